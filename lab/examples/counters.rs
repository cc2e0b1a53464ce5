//! talc's random actions under the processor's own counters (Linux `perf_event_open`): cycles,
//! instructions, branch misses, L1 data misses and the rest, per action, for each allocator
//! in turn, run the way the timed benchmark runs them (no probe, every call inlined).
//!
//! Why: simulated caches and instruction counts (callgrind, cachegrind) can show two
//! allocators level where the timed benchmark shows one slower; what the time is spent on then
//! (mispredicted branches on the real predictor, misses the simulator does not model, stalls)
//! only the hardware can say (`tagalloc_lab::counters`). Where the machine has no counters
//! (a virtual machine that exposes none), each refused event is named with the kernel's
//! reason, and the run reports time and the kernel's software events alone.
//!
//! Usage: `counters ALLOCATOR[,ALLOCATOR...] MAX[,MAX...] [--actions N] [--rounds R]`
//! (ALLOCATOR: tagalloc, tagalloc-nostats, talc, dlmalloc, rlsf; MAX: talc's maximum size in
//! bytes). Each round runs every size and allocator once: a fresh heap over a 128 MiB arena,
//! 100,000 uncounted actions, then `N` counted ones (default 10,000,000), then every live block
//! freed. Prints one line per run, then the medians per size and allocator.

use std::process::ExitCode;
use std::time::Instant;

use tagalloc_bench::random_actions::{self, Actions};
use tagalloc_bench::report::median;
use tagalloc_bench::subjects::{Bench, Subject};
use tagalloc_lab::counters::{EventCounters, EVENTS};
use tagalloc_lab::example_cli;

/// The seed of every run's counted actions: the timed benchmark's first trial's.
const SEED: u64 = random_actions::FIRST_SEED;

/// One counted run.
struct Run<'c> {
    max: usize,
    actions: usize,
    counters: &'c EventCounters,
    out: Option<(f64, Vec<Option<f64>>)>,
}

impl Bench for Run<'_> {
    type Out = Result<(), String>;
    fn run<S: Subject>(&mut self, mut s: S, _base: usize) -> Result<(), String> {
        example_cli::warm_up(&mut s, self.max);
        let mut run = Actions::new(self.max, SEED);
        let start = Instant::now();
        self.counters.start();
        for _ in 0..self.actions {
            run.step(&mut s);
        }
        self.counters.stop();
        let ns = start.elapsed().as_nanos() as f64;
        let counts = self.counters.read().into_iter().map(|(_, v)| v).collect();
        self.out = Some((ns, counts));
        run.free_all(&mut s);
        s.check()
    }
}

fn run() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: counters ALLOCATOR[,...] MAX[,...] [--actions N] [--rounds R]";
    if example_cli::wants_help(&args, usage) {
        return Ok(());
    }
    let a = example_cli::actions_args(&args, usage, 10_000_000)?;
    let (counters, refused) = EventCounters::open(&EVENTS);
    for (e, why) in &refused {
        println!("refused: {}: {why}", e.name);
    }
    let mut results: Vec<(usize, &str, f64, Vec<Option<f64>>)> = Vec::new();
    let header: Vec<&str> = EVENTS.iter().map(|e| e.name).collect();
    println!("per action: size allocator ns {}", header.join(" "));
    for (max, name, peer) in a.runs() {
        let mut run = Run {
            max,
            actions: a.actions,
            counters: &counters,
            out: None,
        };
        example_cli::run_on_fresh_arena(peer, random_actions::HEAP, &mut run)?;
        let (ns, counts) = run.out.ok_or("no result")?;
        let per = |v: f64| v / a.actions as f64;
        let cells: Vec<String> = counts
            .iter()
            .map(|c| c.map_or("-".into(), |v| format!("{:.3}", per(v))))
            .collect();
        println!("{max} {name} {:.2} {}", per(ns), cells.join(" "));
        results.push((max, name, ns, counts));
    }
    println!("\nmedians per action:");
    println!("| size | allocator | ns | {} |", header.join(" | "));
    println!("|---|---|{}", "--:|".repeat(header.len() + 1));
    for (max, name, _) in a.cells() {
        let mine: Vec<_> = results
            .iter()
            .filter(|r| r.0 == max && r.1 == name)
            .collect();
        let ns = median(&mine.iter().map(|r| r.2).collect::<Vec<_>>()) / a.actions as f64;
        let cells: Vec<String> = (0..EVENTS.len())
            .map(|i| {
                let v: Vec<f64> = mine.iter().filter_map(|r| r.3[i]).collect();
                if v.is_empty() {
                    "-".into()
                } else {
                    format!("{:.3}", median(&v) / a.actions as f64)
                }
            })
            .collect();
        println!("| {max} | {name} | {ns:.2} | {} |", cells.join(" | "));
    }
    Ok(())
}

fn main() -> ExitCode {
    example_cli::exit("counters", run())
}
