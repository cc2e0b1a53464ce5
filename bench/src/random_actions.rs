//! talc's "random actions" benchmark (talc's `benches/src/random_actions.rs`, single-threaded,
//! with reallocation), so that its figures line up with talc's BENCHMARKS.md.
//!
//! Every allocator gets the same 128 MiB arena. For a fixed time it performs random actions on
//! a list of live allocations: 1/7 realloc a random one to `1..3 × max` bytes, 3/7 free a
//! random one when at least 300 are live, otherwise (3/7, or 6/7 below 300) allocate a size
//! drawn by talc's `generate_size(max)` with talc's `generate_align()`. The score is the number
//! of successful actions; each trial starts a fresh allocator, warms it up for 2 ms, then
//! counts. talc reports the mean over 7 trials of 200 ms for maximum sizes 200 B to 30 000 B,
//! which is what this reports too (scaled to 200 ms when a shorter trial is asked for).
//!
//! One departure: the random streams are seeded per trial, the same for every allocator, so
//! that they all face the same actions; talc seeds from entropy.

use std::ffi::OsStr;
use std::path::Path;
use std::time::{Duration, Instant};

use indicatif::ProgressBar;
use serde_json::{json, Value};

use crate::cli::{self, Mode, Opt};
use crate::plot;
use crate::report::{self, Better, Table};
use crate::subjects::{with_subject, Arena, Bench, Peer, Setup, Space, Subject};

/// talc's `HEAP_SIZE`.
pub const HEAP: usize = 1 << 27;
/// talc's `RA_MAX_SIZES_ARENA`.
pub const MAX_SIZES: [usize; 5] = [200, 1000, 3000, 10000, 30000];
/// talc's `RA_ALLOC_COUNT_ARENA`: below this many live blocks, only allocate or realloc.
const MIN_LIVE: usize = 300;
/// talc's `RA_MAX_REALLOC_SIZE_MULTI`.
const REALLOC_MULTI: usize = 3;
/// talc's trial length, the unit of its score.
const TALC_DURATION: Duration = Duration::from_millis(200);

/// How long to measure.
pub struct Options {
    /// Trials per allocator and size (talc: 7).
    pub trials: usize,
    /// Length of a trial (talc: 200 ms).
    pub duration: Duration,
    /// Warm-up before each trial (talc: 2 ms).
    pub warmup: Duration,
    /// The maximum request sizes, in bytes (talc's: [`MAX_SIZES`]); each within
    /// [`SIZE_RANGE`].
    pub sizes: Vec<usize>,
    /// The allocators to run, by [`Peer::key`] (checked by the caller); empty: all.
    /// tagalloc's inline heap always runs, first: every ratio is taken against it.
    pub only: Vec<String>,
}

/// The options `random-actions` takes.
pub const OPTIONS: &[Opt] = &[
    cli::runs("trials per allocator and size, the mean reported (default talc's 7; 3 in the default suite, 1 with --quick)"),
    Opt {
        name: "sizes",
        value: Some("N[,N...]"),
        help: "only these maximum sizes in bytes, each from 17 to 100000 (default talc's 200,1000,3000,10000,30000)",
    },
    Opt {
        name: "only",
        value: Some("KEY[,KEY...]"),
        help: "only these allocators (keys such as talc, dlmalloc, rlsf, tagalloc_inline_nostats; a wrong one is refused with the list), and tagalloc's inline heap every ratio is taken against (default: all)",
    },
];

impl Options {
    /// The defaults: talc's 7 trials of 200 ms after 2 ms of warm-up for each of its five
    /// maximum sizes (3 trials of 60 ms in the default suite; with `--quick`, one of 5 ms
    /// after 1 ms), every allocator.
    pub fn new(mode: Mode) -> Self {
        Options {
            trials: mode.pick(7, 3, 1),
            duration: Duration::from_millis(mode.pick(200, 60, 5)),
            warmup: Duration::from_millis(if mode == Mode::Quick { 1 } else { 2 }),
            sizes: MAX_SIZES.to_vec(),
            only: Vec::new(),
        }
    }

    /// Sets one of [`OPTIONS`] from its value, or says why the value is refused.
    pub fn set(&mut self, name: &str, value: &OsStr) -> Result<(), String> {
        match name {
            "runs" => self.trials = cli::count(value, 1, "trials per allocator and size")?,
            "sizes" => self.sizes = parse_sizes(cli::text(value)?)?,
            "only" => self.only = cli::keys(value)?,
            _ => return Err(cli::not_taken("random-actions")),
        }
        Ok(())
    }
}

/// The maximum sizes `--sizes` accepts: `generate_size` draws a cap from `16..max`, so the
/// smallest is 17; at the largest, 300 live blocks reallocated to three times it stay well
/// inside the arena.
pub const SIZE_RANGE: std::ops::RangeInclusive<usize> = 17..=100_000;

/// Parses `--sizes`' value: maximum sizes in bytes, separated by commas, each in
/// [`SIZE_RANGE`], none twice. A refusal says why after the value given.
pub fn parse_sizes(v: &str) -> Result<Vec<usize>, String> {
    let expected = format!(
        "expected sizes in bytes separated by commas, e.g. 200,1000, each from {} to {}",
        SIZE_RANGE.start(),
        SIZE_RANGE.end()
    );
    let mut sizes = Vec::new();
    for part in v.split(',') {
        let n: usize = part
            .trim()
            .parse()
            .map_err(|_| format!("is not a list of sizes: not `{part}` ({expected})"))?;
        if !SIZE_RANGE.contains(&n) {
            return Err(format!(
                "has {n}, outside {}..={} bytes ({expected})",
                SIZE_RANGE.start(),
                SIZE_RANGE.end()
            ));
        }
        if sizes.contains(&n) {
            return Err(format!("has {n} named twice ({expected})"));
        }
        sizes.push(n);
    }
    Ok(sizes)
}

/// talc's `generate_size`: biased towards small sizes.
pub fn generate_size(rng: &mut fastrand::Rng, max: usize) -> usize {
    let cap = rng.usize(16..max);
    rng.usize(4..cap)
}

/// talc's `generate_align`: 75 % word-aligned, 19 % twice that, 4 % four times, ...
pub fn generate_align(rng: &mut fastrand::Rng) -> usize {
    std::mem::align_of::<usize>() << (rng.u16(..).trailing_zeros() / 2)
}

/// One trial: warm-up, then the counted run.
struct Trial {
    max: usize,
    seed: u64,
    warmup: Duration,
    duration: Duration,
}

/// Counts of one trial: successful actions, failed allocations, failed reallocs.
#[derive(Clone, Copy, Default)]
struct Counts {
    score: u64,
    alloc_failures: u64,
    realloc_failures: u64,
}

/// The seed of the first counted trial (trial `t` draws from `FIRST_SEED + t`), which the
/// lab's examples (`lab/examples/`) use too, so that they draw the timed benchmark's stream.
pub const FIRST_SEED: u64 = 0x7A1C_0000;

/// The seed of the warm-up before a run seeded with `seed`: another stream, so that the
/// counted actions do not replay the warm-up's.
pub const fn warmup_seed(seed: u64) -> u64 {
    seed ^ 0x5741_524d
}

/// What one random action did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// An allocation; `false` when the allocator refused it.
    Alloc(bool),
    /// A free.
    Free,
    /// A realloc; `false` when the allocator refused it (the block stays as it was).
    Realloc(bool),
    /// A realloc drawn while nothing was live: no call.
    Idle,
}

/// The live blocks of a random-actions run and the stream that drives it: one action at a
/// time, so that the timed trials and the callgrind profile (`lab/examples/profile.rs`, a fixed
/// number of actions) draw exactly the same calls.
pub struct Actions<B> {
    rng: fastrand::Rng,
    max: usize,
    live: Vec<(B, usize, usize)>,
}

impl<B: Copy> Actions<B> {
    /// A run at maximum size `max` (at least 17: talc draws `16..max`), seeded with `seed`.
    pub fn new(max: usize, seed: u64) -> Self {
        Actions {
            rng: fastrand::Rng::with_seed(seed),
            max,
            live: Vec::with_capacity(100_000),
        }
    }

    /// Draws one action and performs it on `s`.
    pub fn step<S: Subject<Block = B>>(&mut self, s: &mut S) -> Step {
        let action = self.rng.usize(0..=6);
        if action == 6 {
            if self.live.is_empty() {
                return Step::Idle;
            }
            let i = self.rng.usize(0..self.live.len());
            let new_size = self.rng.usize(1..self.max * REALLOC_MULTI);
            let (b, size, align) = self.live[i];
            // SAFETY: `b` is a live block of `size` bytes aligned to `align`; it is replaced by
            // the result on success and kept on failure.
            let moved = unsafe { s.realloc(b, size, align, new_size) };
            if let Some(nb) = moved {
                self.live[i] = (nb, new_size, align);
            }
            Step::Realloc(moved.is_some())
        } else if action < 3 || self.live.len() < MIN_LIVE {
            let size = generate_size(&mut self.rng, self.max);
            let align = generate_align(&mut self.rng);
            let b = s.alloc(size, align);
            if let Some(b) = b {
                self.live.push((b, size, align));
            }
            Step::Alloc(b.is_some())
        } else {
            let i = self.rng.usize(0..self.live.len());
            let (b, size, align) = self.live.swap_remove(i);
            // SAFETY: a live block with its size and alignment, removed from the list.
            unsafe { s.free(b, size, align) };
            Step::Free
        }
    }

    /// Frees every block still live (talc's wrappers do it on drop); returns how many.
    pub fn free_all<S: Subject<Block = B>>(self, s: &mut S) -> usize {
        let n = self.live.len();
        for (b, size, align) in self.live {
            // SAFETY: as in `step`; every block is freed once.
            unsafe { s.free(b, size, align) };
        }
        n
    }
}

impl Trial {
    fn actions<S: Subject>(&self, s: &mut S, seed: u64, duration: Duration) -> Counts {
        let mut c = Counts::default();
        let mut run = Actions::new(self.max, seed);
        let start = Instant::now();
        while start.elapsed() < duration {
            for _ in 0..100 {
                match run.step(s) {
                    Step::Alloc(true) | Step::Free | Step::Realloc(true) => c.score += 1,
                    Step::Alloc(false) => c.alloc_failures += 1,
                    Step::Realloc(false) => c.realloc_failures += 1,
                    Step::Idle => {}
                }
            }
        }
        run.free_all(s);
        c
    }
}

impl Bench for Trial {
    type Out = Counts;
    fn run<S: Subject>(&mut self, mut s: S, _base: usize) -> Counts {
        self.actions(&mut s, warmup_seed(self.seed), self.warmup);
        self.actions(&mut s, self.seed, self.duration)
    }
}

/// Runs the benchmark; returns the markdown section and the JSON record.
pub fn run(
    opts: &Options,
    plots: Option<&Path>,
    bar: &ProgressBar,
) -> Result<(String, Value), String> {
    let all: Vec<Peer> = Peer::HOST.iter().chain(&Peer::ADDRESSES).copied().collect();
    let peers = Peer::selected(&all, &opts.only, Peer::Inline);
    let mut arena = Arena::new(HEAP)?;
    let setup = Setup {
        wrap: true,
        max_allocs: 1 << 17,
    };
    let scale = TALC_DURATION.as_secs_f64() / opts.duration.as_secs_f64();
    // [peer][size] -> (mean score per 200 ms, failures)
    let mut cells = vec![vec![(f64::NAN, 0u64, 0u64); opts.sizes.len()]; peers.len()];
    let mut totals = vec![vec![(Counts::default(), 0u32); opts.sizes.len()]; peers.len()];
    let mut notes = Vec::new();
    // Trials outermost and every allocator in turn within one, so that a drift of the machine's
    // speed (load, frequency) over the run reaches all allocators alike rather than whichever
    // ran in its slow stretch.
    for t in 0..opts.trials {
        for (j, &max) in opts.sizes.iter().enumerate() {
            for (i, &peer) in peers.iter().enumerate() {
                bar.set_message(format!("random actions: {} ≤{max} B", peer.name()));
                bar.inc(1);
                let space = Space::for_peer(peer, &mut arena, HEAP);
                let mut trial = Trial {
                    max,
                    seed: FIRST_SEED + t as u64,
                    warmup: opts.warmup,
                    duration: opts.duration,
                };
                match with_subject(peer, space, setup, &mut trial) {
                    Ok(c) => {
                        let (total, ok) = &mut totals[i][j];
                        total.score += c.score;
                        total.alloc_failures += c.alloc_failures;
                        total.realloc_failures += c.realloc_failures;
                        *ok += 1;
                    }
                    Err(e) => notes.push(format!("- {}: {e}", peer.name())),
                }
            }
        }
    }
    for (row, cells) in totals.iter().zip(&mut cells) {
        for (&(total, ok), cell) in row.iter().zip(cells) {
            if ok > 0 {
                *cell = (
                    total.score as f64 / f64::from(ok) * scale,
                    total.alloc_failures,
                    total.realloc_failures,
                );
            }
        }
    }
    // The same columns twice: scores, then each score ÷ tagalloc inline's.
    let table = |suffix: &str| {
        let mut columns: Vec<(String, bool)> =
            vec![("allocator".into(), false), ("memory".into(), false)];
        columns.extend(
            opts.sizes
                .iter()
                .map(|m| (format!("max {m} B{suffix}"), true)),
        );
        let cols: Vec<(&str, bool)> = columns.iter().map(|(n, r)| (n.as_str(), *r)).collect();
        Table::new(&cols)
    };
    let mut scores = table("");
    let ratio = report::ratio_header("tagalloc inline", Better::Higher);
    let mut ratios = table(&format!(", {ratio}"));
    for (i, &peer) in peers.iter().enumerate() {
        let kind = if peer.is_host() { "host" } else { "addresses" }.to_string();
        let mut s = vec![peer.name(), kind.clone()];
        let mut r = vec![peer.name(), kind];
        for (j, cell) in cells[i].iter().enumerate() {
            s.push(if cell.0.is_finite() {
                report::count(cell.0.round() as u64)
            } else {
                "error".into()
            });
            // The allocator's score over tagalloc's: higher is better.
            r.push(report::ratio(cell.0, Some(cells[0][j].0)));
            if cell.1 + cell.2 > 0 {
                notes.push(format!(
                    "- {}, max {} B: {} allocations and {} reallocs failed over {} trials",
                    peer.name(),
                    opts.sizes[j],
                    cell.1,
                    cell.2,
                    opts.trials
                ));
            }
        }
        scores.row(s);
        ratios.row(r);
    }
    // Each error once, in the order first seen (trials repeat them, not side by side).
    let mut seen = std::collections::HashSet::new();
    notes.retain(|n| seen.insert(n.clone()));
    let mut md = format!(
        "## Random actions (talc's method)\n\nSuccessful alloc/free/realloc calls per 200 ms \
         (talc's score; higher is better), mean of {} trials of {} ms{} after {} ms of warm-up, \
         ≥ {MIN_LIVE} live blocks, one {} arena for all. Address allocators move a block \
         without copying it; the bump reference wraps around (a speed floor, not an \
         allocator); glibc uses its own memory.\n\n{}\nEach score ÷ tagalloc inline's (higher \
         is better: above 1, more calls than tagalloc):\n\n{}",
        opts.trials,
        opts.duration.as_millis(),
        if opts.duration == TALC_DURATION {
            String::new()
        } else {
            " scaled to 200 ms".to_string()
        },
        opts.warmup.as_millis(),
        report::bytes(HEAP as u64),
        scores.render(),
        ratios.render(),
    );
    report::push_notes(&mut md, &notes);
    if let Some(dir) = plots {
        let series: Vec<plot::Series> = peers
            .iter()
            .enumerate()
            .map(|(i, p)| plot::Series {
                name: p.name(),
                points: opts
                    .sizes
                    .iter()
                    .zip(&cells[i])
                    .filter(|(_, c)| c.0.is_finite())
                    .map(|(&m, c)| (m as f64, c.0 / 1e6))
                    .collect(),
                value: None,
            })
            .collect();
        let sizes: Vec<f64> = opts.sizes.iter().map(|&m| m as f64).collect();
        let notes = [format!(
            "Mean of {} of {} ms{} each, ≥ {MIN_LIVE} live blocks, one {} arena for all. \
             tagalloc detached and offset-allocator move a block without copying it; the bump \
             reference wraps around (a speed floor, not an allocator); glibc uses its own memory.",
            report::plural(opts.trials, "trial"),
            opts.duration.as_millis(),
            if opts.duration == TALC_DURATION {
                ""
            } else {
                " (scaled to 200 ms)"
            },
            report::bytes(HEAP as u64),
        )];
        let chart = plot::Lines {
            title: "Random actions (talc's method): successful alloc/free/realloc calls per \
                    200 ms, by maximum request size (higher is better)",
            x_desc: "maximum request size (bytes, logarithmic)",
            y_desc: "successful calls per 200 ms (millions)",
            log_x_ticks: Some(&sizes),
            y_max: None,
            value_header: "",
            notes: &notes,
        };
        plot::lines(&dir.join("random-actions.svg"), &chart, &series)?;
    }
    let json = json!({
        "trials": opts.trials,
        "duration_ms": opts.duration.as_millis() as u64,
        "warmup_ms": opts.warmup.as_millis() as u64,
        "heap_bytes": HEAP,
        "max_sizes": opts.sizes,
        "results": peers.iter().enumerate().map(|(i, p)| json!({
            "allocator": p.name(),
            "key": p.key(),
            "memory": if p.is_host() { "host" } else { "addresses" },
            "scores_per_200ms": cells[i].iter().map(|c| if c.0.is_finite() { Some(c.0) } else { None }).collect::<Vec<_>>(),
            "alloc_failures": cells[i].iter().map(|c| c.1).collect::<Vec<_>>(),
            "realloc_failures": cells[i].iter().map(|c| c.2).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    });
    Ok((md, json))
}
