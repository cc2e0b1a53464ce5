//! talc's random actions with every allocator call timed on its own by the processor's time
//! stamp counter, fenced on both sides: cycles per alloc, free and realloc (the reallocs split
//! by whether they moved), for each allocator in turn.
//!
//! Why: where instruction counts and simulated caches show two allocators level and the timed
//! benchmark does not, and the machine has no hardware counters (a virtual machine that
//! exposes none; see `examples/counters.rs`), this still says which kind of call the time
//! goes to. The fences keep the calls from overlapping each other and the driver, so a call's
//! figure is its latency, not its share of a pipelined run: a gap that shows in the timed
//! benchmark and not here lies in how calls overlap, not in any one call.
//!
//! Usage: `call_times ALLOCATOR[,ALLOCATOR...] MAX[,MAX...] [--actions N] [--rounds R]`
//! (ALLOCATOR: tagalloc, tagalloc-nostats, talc, dlmalloc, rlsf). Each round runs every size
//! and allocator once: a fresh heap over a 128 MiB arena, 100,000 untimed actions, then `N`
//! timed ones (default 2,000,000). Prints one line per run, then the medians of the rounds.

use std::process::ExitCode;

use tagalloc_bench::random_actions::{self, Actions};
use tagalloc_bench::report::median;
use tagalloc_bench::subjects::{Bench, Subject};
use tagalloc_lab::example_cli;

const SEED: u64 = random_actions::FIRST_SEED;

/// Time stamp counter ticks and calls, per kind of call.
#[derive(Clone, Copy, Default)]
struct Tally {
    ticks: [u64; KINDS.len()],
    calls: [u64; KINDS.len()],
}

const KINDS: [&str; 4] = ["alloc", "free", "realloc in place", "realloc moved"];

/// The time stamp counter, read after every earlier instruction has completed and before
/// any later one starts.
#[inline(always)]
fn stamp() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        use core::arch::x86_64::{_mm_lfence, _rdtsc};
        // SAFETY: `lfence` and `rdtsc` exist on every x86-64 processor and touch no memory.
        unsafe {
            _mm_lfence();
            let t = _rdtsc();
            _mm_lfence();
            t
        }
    }
    // Elsewhere `run` refuses before anything is timed.
    #[cfg(not(target_arch = "x86_64"))]
    {
        0
    }
}

/// A subject whose calls are timed one by one.
struct Timed<S> {
    s: S,
    tally: Tally,
}

impl<S: Subject> Timed<S> {
    fn count(&mut self, kind: usize, start: u64) {
        self.tally.ticks[kind] += stamp() - start;
        self.tally.calls[kind] += 1;
    }
}

impl<S: Subject> Subject for Timed<S> {
    type Block = S::Block;

    fn alloc(&mut self, size: usize, align: usize) -> Option<S::Block> {
        let t = stamp();
        let b = self.s.alloc(size, align);
        self.count(0, t);
        b
    }

    unsafe fn free(&mut self, block: S::Block, size: usize, align: usize) {
        let t = stamp();
        // SAFETY: forwarded caller contract.
        unsafe { self.s.free(block, size, align) };
        self.count(1, t);
    }

    unsafe fn realloc(
        &mut self,
        block: S::Block,
        size: usize,
        align: usize,
        new_size: usize,
    ) -> Option<S::Block> {
        let before = self.s.addr(&block);
        let t = stamp();
        // SAFETY: forwarded caller contract.
        let b = unsafe { self.s.realloc(block, size, align, new_size) };
        let moved = b.is_some_and(|b| self.s.addr(&b) != before);
        self.count(2 + usize::from(moved), t);
        b
    }

    fn addr(&self, block: &S::Block) -> usize {
        self.s.addr(block)
    }

    fn check(&self) -> Result<(), String> {
        self.s.check()
    }
}

/// One timed run.
struct Run {
    max: usize,
    actions: usize,
    out: Tally,
}

impl Bench for Run {
    type Out = Result<(), String>;
    fn run<S: Subject>(&mut self, mut s: S, _base: usize) -> Result<(), String> {
        example_cli::warm_up(&mut s, self.max);
        let mut timed = Timed {
            s,
            tally: Tally::default(),
        };
        let mut run = Actions::new(self.max, SEED);
        for _ in 0..self.actions {
            run.step(&mut timed);
        }
        run.free_all(&mut timed.s);
        self.out = timed.tally;
        timed.s.check()
    }
}

fn run() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: call_times ALLOCATOR[,...] MAX[,...] [--actions N] [--rounds R]";
    if example_cli::wants_help(&args, usage) {
        return Ok(());
    }
    if !cfg!(target_arch = "x86_64") {
        return Err(
            "this times calls with x86-64's time stamp counter, which this target has not".into(),
        );
    }
    let a = example_cli::actions_args(&args, usage, 2_000_000)?;
    let mut results: Vec<(usize, &str, Tally)> = Vec::new();
    println!("ticks per call: size allocator {}", KINDS.join(" / "));
    for (max, name, peer) in a.runs() {
        let mut run = Run {
            max,
            actions: a.actions,
            out: Tally::default(),
        };
        example_cli::run_on_fresh_arena(peer, random_actions::HEAP, &mut run)?;
        let t = run.out;
        let cells: Vec<String> = (0..KINDS.len())
            .map(|k| per_call(t.ticks[k], t.calls[k]))
            .collect();
        println!("{max} {name} {}", cells.join(" / "));
        results.push((max, name, t));
    }
    println!(
        "\nmedians of {} rounds, ticks per call (calls in the last round):",
        a.rounds
    );
    println!("| size | allocator | {} |", KINDS.join(" | "));
    println!("|---|---|{}", "--:|".repeat(KINDS.len()));
    for (max, name, _) in a.cells() {
        let mine: Vec<&Tally> = results
            .iter()
            .filter(|r| r.0 == max && r.1 == name)
            .map(|r| &r.2)
            .collect();
        let cells: Vec<String> = (0..KINDS.len())
            .map(|k| {
                let v: Vec<f64> = mine
                    .iter()
                    .filter(|t| t.calls[k] > 0)
                    .map(|t| t.ticks[k] as f64 / t.calls[k] as f64)
                    .collect();
                let calls = mine.last().map_or(0, |t| t.calls[k]);
                if v.is_empty() {
                    "-".into()
                } else {
                    format!("{:.1} ({calls})", median(&v))
                }
            })
            .collect();
        println!("| {max} | {name} | {} |", cells.join(" | "));
    }
    Ok(())
}

fn per_call(ticks: u64, calls: u64) -> String {
    if calls == 0 {
        "-".into()
    } else {
        format!("{:.1}", ticks as f64 / calls as f64)
    }
}

fn main() -> ExitCode {
    example_cli::exit("call_times", run())
}
