//! The alloc+free microbenchmark: a fixed set of live slots, each step frees one slot's block
//! and allocates a new one of a random small size there. It isolates the cost of the two calls
//! on a heap in steady state, without the realloc copies and size spread of the other
//! benchmarks.

use std::ffi::OsStr;
use std::hint::black_box;
use std::path::Path;
use std::time::Instant;

use indicatif::ProgressBar;
use serde_json::{json, Value};

use crate::cli::{self, Mode, Opt};
use crate::plot;
use crate::report::{self, Better, Table};
use crate::subjects::{with_subject, Arena, Bench, Peer, Setup, Space, Subject};

/// Live slots: each step frees the slot's block (if any) and allocates a new one there.
const SLOTS: usize = 1000;
/// The arena every host allocator gets (and the address range of the address allocators).
const ARENA: usize = 64 << 20;

/// How long to measure.
pub struct Options {
    /// alloc+free pairs per run.
    pub steps: usize,
    /// Runs per allocator; the median is reported.
    pub runs: usize,
}

/// The options `micro` takes.
pub const OPTIONS: &[Opt] = &[cli::runs(
    "runs per allocator, the median reported (default 7; 5 in the default suite, 2 with --quick)",
)];

impl Options {
    /// The defaults: 2 million alloc+free pairs a run (half a million in the default suite,
    /// 20,000 with `--quick`).
    pub fn new(mode: Mode) -> Self {
        Options {
            steps: mode.pick(2_000_000, 500_000, 20_000),
            runs: mode.pick(7, 5, 2),
        }
    }

    /// Sets one of [`OPTIONS`] from its value, or says why the value is refused.
    pub fn set(&mut self, name: &str, value: &OsStr) -> Result<(), String> {
        match name {
            "runs" => self.runs = cli::count(value, 1, "runs per allocator")?,
            _ => return Err(cli::not_taken("micro")),
        }
        Ok(())
    }
}

/// The request sizes of one run, the same for every allocator: 8..=512 bytes.
fn sizes(steps: usize) -> Vec<usize> {
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    (0..steps)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            8 + (x % 505) as usize
        })
        .collect()
}

struct Run<'a> {
    sizes: &'a [usize],
}

/// One run's result: ns per alloc+free pair, allocation failures, and the allocator's check.
type RunOut = (f64, u64, Result<(), String>);

impl Bench for Run<'_> {
    type Out = RunOut;
    fn run<S: Subject>(&mut self, mut s: S, _base: usize) -> RunOut {
        let mut slots: Vec<Option<(S::Block, usize)>> = vec![None; SLOTS];
        let mut failures = 0;
        let start = Instant::now();
        for (i, &size) in self.sizes.iter().enumerate() {
            let slot = &mut slots[(i * 7919) % SLOTS];
            if let Some((b, n)) = slot.take() {
                // SAFETY: the slot holds a live block of `n` bytes, 16-aligned.
                unsafe { s.free(b, n, 16) };
            }
            match s.alloc(size, 16) {
                Some(b) => *slot = Some((black_box(b), size)),
                None => failures += 1,
            }
        }
        let ns = start.elapsed().as_nanos() as f64 / self.sizes.len().max(1) as f64;
        let check = s.check();
        if s.needs_cleanup() {
            for (b, n) in slots.into_iter().flatten() {
                // SAFETY: a live block of `n` bytes, 16-aligned, freed once.
                unsafe { s.free(b, n, 16) };
            }
        }
        (ns, failures, check)
    }
}

/// Runs the microbenchmark; returns the markdown section and the JSON record.
pub fn run(
    opts: &Options,
    plots: Option<&Path>,
    bar: &ProgressBar,
) -> Result<(String, Value), String> {
    let sizes = sizes(opts.steps);
    let peers: Vec<Peer> = Peer::HOST.iter().chain(&Peer::ADDRESSES).copied().collect();
    let mut arena = Arena::new(ARENA)?;
    let setup = Setup {
        wrap: true,
        max_allocs: 1 << 17,
    };
    let mut ns: Vec<Vec<f64>> = vec![Vec::new(); peers.len()];
    let mut failures = vec![0u64; peers.len()];
    let mut notes = Vec::new();
    // Interleave the allocators run by run, so that machine noise hits them alike.
    for _ in 0..opts.runs {
        for (i, &peer) in peers.iter().enumerate() {
            bar.set_message(format!("micro: {}", peer.name()));
            bar.inc(1);
            let space = Space::for_peer(peer, &mut arena, ARENA);
            match with_subject(peer, space, setup, &mut Run { sizes: &sizes }) {
                Ok((n, f, check)) => {
                    ns[i].push(n);
                    failures[i] = failures[i].max(f);
                    if let Err(e) = check {
                        notes.push(format!("- {}: check failed: {e}", peer.name()));
                    }
                }
                Err(e) => notes.push(format!("- {}: {e}", peer.name())),
            }
        }
    }
    let medians: Vec<f64> = ns.iter().map(|v| report::median(v)).collect();
    let base = Some(medians[0]);
    let ratio = report::ratio_header("tagalloc inline", Better::Lower);
    let mut t = Table::new(&[
        ("allocator", false),
        ("memory", false),
        ("ns per alloc+free (lower is better)", true),
        (&ratio, true),
        ("failures", true),
    ]);
    for (i, &peer) in peers.iter().enumerate() {
        t.row(vec![
            peer.name(),
            if peer.is_host() { "host" } else { "addresses" }.into(),
            report::nanos(medians[i]),
            report::ratio(medians[i], base),
            report::count(failures[i]),
        ]);
    }
    notes.dedup();
    let mut md = format!(
        "## alloc+free microbenchmark\n\nRandom 8..=512-byte blocks, 16-aligned, {SLOTS} live: \
         each step frees one slot's block and allocates a new one there; {} pairs per run, \
         median of {} runs. Host allocators share one {} arena; the bump reference wraps \
         around when it reaches the end (a speed floor, not an allocator).\n\n{}",
        report::count(opts.steps as u64),
        opts.runs,
        report::bytes(ARENA as u64),
        t.render()
    );
    report::push_notes(&mut md, &notes);
    if let Some(dir) = plots {
        let bars: Vec<plot::Bar> = peers
            .iter()
            .zip(&medians)
            .map(|(p, &value)| plot::Bar {
                name: p.name(),
                label: p.name(),
                value,
            })
            .collect();
        let chart = plot::Bars {
            title: "alloc+free microbenchmark: time per alloc+free pair of random 8–512-byte \
                    blocks, 1000 live (lower is better)",
            x_desc: &format!(
                "ns per alloc+free pair (median of {})",
                report::plural(opts.runs, "run")
            ),
            unit: " ns",
            notes: &[
                "tagalloc detached and offset-allocator hand out address ranges and touch no \
                 memory; the bump reference wraps around when it reaches the end (a speed \
                 floor, not an allocator)."
                    .into(),
            ],
        };
        plot::bars(&dir.join("micro.svg"), &chart, &bars)?;
    }
    let json = json!({
        "steps": opts.steps,
        "runs": opts.runs,
        "slots": SLOTS,
        "results": peers.iter().enumerate().map(|(i, p)| json!({
            "allocator": p.name(),
            "memory": if p.is_host() { "host" } else { "addresses" },
            "ns_per_pair": if medians[i].is_finite() { Some(medians[i]) } else { None },
            "ns_per_pair_runs": ns[i],
            "ratio_to_tagalloc_inline": base.filter(|b| *b > 0.0 && medians[i].is_finite()).map(|b| medians[i] / b),
            "failures": failures[i],
        })).collect::<Vec<_>>(),
    });
    Ok((md, json))
}
