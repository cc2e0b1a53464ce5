//! One allocator on one workload, for callgrind and cachegrind (`lab/tools/profile.sh`).
//!
//! The timed benchmarks say how fast each allocator is; this says where the instructions and
//! cache misses go. A profiler run must hold one allocator only (so that nothing else is in
//! its totals) and a fixed amount of work (so that two runs are comparable), and each call
//! must stay a function of its own (so that callgrind can give its inclusive cost per call):
//! every call goes through a [`Probe`], whose `alloc`, `free` and `realloc` are never
//! inlined and count themselves.
//!
//! Workloads, the same streams as the `tagalloc-bench` benchmarks draw:
//! - `random-MAX`: talc's random actions (sizes by `generate_size(MAX)`, talc's alignments, a
//!   seventh of the actions reallocs to `1..3 × MAX` bytes) for `--actions N` actions
//!   (default 300,000) from a fresh heap over a 128 MiB arena, then every live block freed;
//! - `path-exact`, `path-tree`, `path-trie`, `path-aligned`, `path-end`: requests aimed at one path of
//!   tagalloc's heap (see [`Path`]), `--actions N` allocations (default and at most 200,000);
//! - a trace (`NAME`, looked up as `NAME.trace.gz` in `../shared/traces`, then in the bundled
//!   `tests/data`; or a path): replayed whole, or its first `--events N` events, through the
//!   replay benchmark's own loop.
//!
//! Usage: `profile ALLOCATOR WORKLOAD [--actions N] [--events N]`, ALLOCATOR one of
//! `tagalloc` (the inline heap), `talc`, `dlmalloc`, `rlsf`. It prints one line:
//! `ALLOCATOR WORKLOAD: alloc A free F realloc R failed X`, the calls of each kind made
//! (failed ones included: their cost is in the profile too).

use std::path::PathBuf;
use std::process::ExitCode;

use tagalloc_bench::random_actions::{self, Actions};
use tagalloc_bench::replay::{self, Prepared};
use tagalloc_bench::subjects::{Bench, Peer, Subject};
use tagalloc_lab::example_cli;
use tagalloc_tests::trace;

/// The seed of the random-actions benchmark's first counted trial, so that the profile and
/// the timings draw the same stream.
const SEED: u64 = random_actions::FIRST_SEED;

/// Calls made, by kind.
#[derive(Default)]
struct Calls {
    alloc: u64,
    free: u64,
    realloc: u64,
}

/// A subject whose calls are functions of their own, so that callgrind's inclusive cost of
/// `<Probe as Subject>::alloc` is the cost of the allocations alone. The count and the call
/// add a few instructions per call, alike for every allocator.
struct Probe<'c, S> {
    s: S,
    calls: &'c mut Calls,
}

impl<S: Subject> Subject for Probe<'_, S> {
    type Block = S::Block;

    #[inline(never)]
    fn alloc(&mut self, size: usize, align: usize) -> Option<S::Block> {
        self.calls.alloc += 1;
        self.s.alloc(size, align)
    }

    #[inline(never)]
    unsafe fn free(&mut self, block: S::Block, size: usize, align: usize) {
        self.calls.free += 1;
        // SAFETY: forwarded caller contract.
        unsafe { self.s.free(block, size, align) }
    }

    #[inline(never)]
    unsafe fn realloc(
        &mut self,
        block: S::Block,
        size: usize,
        align: usize,
        new_size: usize,
    ) -> Option<S::Block> {
        self.calls.realloc += 1;
        // SAFETY: forwarded caller contract.
        unsafe { self.s.realloc(block, size, align, new_size) }
    }

    fn addr(&self, block: &S::Block) -> usize {
        self.s.addr(block)
    }

    fn chunk_bytes(&self, block: &S::Block) -> Option<usize> {
        self.s.chunk_bytes(block)
    }

    fn needs_cleanup(&self) -> bool {
        self.s.needs_cleanup()
    }

    fn check(&self) -> Result<(), String> {
        self.s.check()
    }
}

/// What to run.
enum Workload {
    Random { max: usize, actions: usize },
    Trace(Prepared),
    Path { path: Path, steps: usize },
}

/// A workload aimed at one path of tagalloc's heap (the host granule is 16 bytes, so its
/// exact bins serve chunks up to 1 KiB), run the same on every allocator.
#[derive(Clone, Copy)]
enum Path {
    /// 1,000 live blocks of 16..=1,000 bytes, the oldest freed before each allocation:
    /// sizes of the exact bins.
    Exact,
    /// The same with 1,100..=16,384 bytes: sizes of the tree bins (which the heap keeps in
    /// lists, one per size, up to 32 KiB).
    Tree,
    /// The same with 33,000..=131,072 bytes: sizes above the lists (the heap's size table
    /// since 2026-11-26, its tries before; the name is kept so that profiles compare).
    Trie,
    /// Exact-bin sizes aligned to 64..=4,096 bytes: the aligned allocation.
    Aligned,
    /// `steps` allocations of 16..=1,000 bytes with no free between them, each carved from
    /// the region's free end, then all freed newest first, each merging into that end.
    End,
}

impl Path {
    fn parse(name: &str) -> Option<Path> {
        Some(match name {
            "path-exact" => Path::Exact,
            "path-tree" => Path::Tree,
            "path-trie" => Path::Trie,
            "path-aligned" => Path::Aligned,
            "path-end" => Path::End,
            _ => return None,
        })
    }

    /// The size and alignment of the next request.
    fn request(self, rng: &mut fastrand::Rng) -> (usize, usize) {
        match self {
            Path::Exact | Path::End => (rng.usize(16..=1000), 16),
            Path::Tree => (rng.usize(1100..=16384), 16),
            Path::Trie => (rng.usize(33_000..=131_072), 16),
            Path::Aligned => (rng.usize(16..=1000), 64 << rng.u32(0..=6)),
        }
    }

    /// Runs `steps` allocations on `s`, each freed in this path's order; the failed ones.
    fn run<S: Subject>(self, s: &mut S, steps: usize) -> u64 {
        let mut rng = fastrand::Rng::with_seed(SEED);
        let keep = if matches!(self, Path::End) {
            steps
        } else {
            1000
        };
        let mut live = std::collections::VecDeque::with_capacity(keep + 1);
        let mut failed = 0;
        for _ in 0..steps {
            if live.len() == keep {
                let (b, size, align) = live.pop_front().expect("keep > 0");
                // SAFETY: a live block of this subject with its size and alignment.
                unsafe { s.free(b, size, align) };
            }
            let (size, align) = self.request(&mut rng);
            match s.alloc(size, align) {
                Some(b) => live.push_back((b, size, align)),
                None => failed += 1,
            }
        }
        while let Some((b, size, align)) = live.pop_back() {
            // SAFETY: as above, each block freed once, newest first.
            unsafe { s.free(b, size, align) };
        }
        failed
    }
}

/// The workload as a benchmark of the bench crate, so that `with_subject` builds the
/// allocator exactly as the timed benchmarks do.
struct Profile<'w> {
    work: &'w Workload,
    calls: Calls,
    failed: u64,
}

impl Bench for Profile<'_> {
    type Out = Result<(), String>;

    fn run<S: Subject>(&mut self, s: S, base: usize) -> Result<(), String> {
        let mut probe = Probe {
            s,
            calls: &mut self.calls,
        };
        match self.work {
            &Workload::Random { max, actions } => {
                let mut run = Actions::new(max, SEED);
                for _ in 0..actions {
                    let step = run.step(&mut probe);
                    if matches!(
                        step,
                        random_actions::Step::Alloc(false) | random_actions::Step::Realloc(false)
                    ) {
                        self.failed += 1;
                    }
                }
                run.free_all(&mut probe);
                probe.check()
            }
            Workload::Trace(p) => {
                let (failed, check) = replay::replay_once(p, probe, base);
                self.failed = failed;
                check
            }
            &Workload::Path { path, steps } => {
                self.failed = path.run(&mut probe, steps);
                probe.check()
            }
        }
    }
}

/// A trace named on the command line: a file, else `NAME.trace.gz` in the shared collection,
/// else in the bundled traces.
fn trace_path(name: &str) -> Result<PathBuf, String> {
    let given = PathBuf::from(name);
    if given.is_file() {
        return Ok(given);
    }
    let file = format!("{name}.trace.gz");
    let dirs = trace::shared_traces_dir()
        .into_iter()
        .chain([trace::bundled_traces_dir()]);
    dirs.map(|d| d.join(&file))
        .find(|p| p.is_file())
        .ok_or_else(|| format!("no trace {name}: not a file, nor {file} in the trace folders"))
}

fn run() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage =
        "usage: profile tagalloc|tagalloc-nostats|talc|dlmalloc|rlsf random-MAX|path-NAME|TRACE \
                 [--actions N] [--events N]";
    if example_cli::wants_help(&args, usage) {
        return Ok(());
    }
    let (Some(who), Some(what)) = (args.first(), args.get(1)) else {
        return Err(usage.into());
    };
    let mut actions = 300_000;
    let mut events = None;
    for (name, n) in example_cli::options(&args[2..], &["--actions", "--events"], usage)? {
        match name {
            "--actions" => actions = n,
            _ => events = Some(n),
        }
    }
    let peer = Peer::by_example_name(who).ok_or(usage)?;
    let (work, len) = match what.strip_prefix("random-") {
        None if what.starts_with("path-") => {
            let path = Path::parse(what).ok_or("path-exact|tree|aligned|end, please")?;
            let steps = actions.min(200_000);
            (Workload::Path { path, steps }, random_actions::HEAP)
        }
        Some(max) => {
            let max = max
                .parse()
                .ok()
                .filter(|&m| m > 16)
                .ok_or("random-MAX: MAX above 16 bytes")?;
            (Workload::Random { max, actions }, random_actions::HEAP)
        }
        None => {
            let p = replay::load(&trace_path(what)?, events)?;
            if p.device {
                return Err(format!(
                    "{what} is a device trace: host allocators only here"
                ));
            }
            let len = replay::arena_len(&p);
            (Workload::Trace(p), len)
        }
    };
    let mut profile = Profile {
        work: &work,
        calls: Calls::default(),
        failed: 0,
    };
    example_cli::run_on_fresh_arena(peer, len, &mut profile)?;
    let c = &profile.calls;
    println!(
        "{who} {what}: alloc {} free {} realloc {} failed {}",
        c.alloc, c.free, c.realloc, profile.failed
    );
    Ok(())
}

fn main() -> ExitCode {
    example_cli::exit("profile", run())
}
