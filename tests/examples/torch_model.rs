//! Replays device-allocation traces through the model of PyTorch's CUDA caching allocator on
//! the fake CUDA driver, and prints what PyTorch's placement policy would cost: peak reserved
//! device memory ÷ peak live bytes, driver calls, and host time per event.
//!
//! ```text
//! cargo run --release -p tagalloc-tests --example torch_model                 # torch-cs336
//! cargo run --release -p tagalloc-tests --example torch_model -- A.trace.gz … # these traces
//! ```
//!
//! With no arguments it replays `torch-cs336.trace.gz` from the shared trace collection
//! (`../shared/traces` beside the repository) and fails if that is missing. Each trace is
//! replayed [`RUNS`] times on a fresh model and fake 16 GiB card; the memory and call figures
//! are the same every run (the replay is deterministic, which the example checks), and the time
//! shown is the median run's. ns/event is the whole event loop: the model, the fake driver's
//! bookkeeping for the driver calls, and the trace's id map; no invariant checks run while
//! timing (the `torch_model` test replays the same loop with them).

use std::env;
use std::path::PathBuf;
use std::process::ExitCode;

use tagalloc_cuda::fake::{Call, FakeConfig};
use tagalloc_cuda::torch_model::TorchConfig;
use tagalloc_tests::torch_replay::{TorchReplay, TorchReplayReport};
use tagalloc_tests::trace::{shared_trace, Trace};

/// Replays per trace; the median time is reported.
const RUNS: usize = 7;

const USAGE: &str = "usage: torch_model [TRACE...]\n\
    Replays each trace (tagalloc trace v1, plain or gzip) through a model of PyTorch's CUDA \
    caching allocator on the fake CUDA driver;\nwith no arguments, \
    ../shared/traces/torch-cs336.trace.gz.";

fn replay(trace: &Trace) -> Result<TorchReplayReport, String> {
    let mut reports = Vec::with_capacity(RUNS);
    for _ in 0..RUNS {
        let mut replay = TorchReplay::new(trace, TorchConfig::default(), FakeConfig::default(), 0)
            .map_err(|e| e.to_string())?;
        reports.push(replay.run().map_err(|e| e.to_string())?);
    }
    let first = &reports[0];
    if reports
        .iter()
        .any(|r| r.stats != first.stats || r.calls != first.calls)
    {
        return Err("runs disagree on memory or driver calls".into());
    }
    reports.sort_by_key(|r| r.elapsed);
    Ok(reports.swap_remove(RUNS / 2))
}

fn main() -> ExitCode {
    let args: Vec<PathBuf> = env::args_os().skip(1).map(PathBuf::from).collect();
    if args.iter().any(|a| a == "--help" || a == "-h") {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    if args
        .iter()
        .any(|a| a.to_str().is_some_and(|s| s.starts_with('-')))
    {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    }
    let paths = if args.is_empty() {
        match shared_trace("torch-cs336.trace.gz") {
            Ok(path) => vec![path],
            Err(e) => {
                eprintln!("{e}");
                return ExitCode::FAILURE;
            }
        }
    } else {
        args
    };
    println!(
        "PyTorch caching-allocator model (default settings) on the fake driver; median of {RUNS} \
         runs"
    );
    println!(
        "{:<16} {:>8} {:>12} {:>14} {:>15} {:>10} {:>9} {:>9}",
        "trace",
        "events",
        "peak live",
        "peak reserved",
        "reserved÷live",
        "cuMemAlloc",
        "cuMemFree",
        "ns/event"
    );
    println!(
        "{:<16} {:>8} {:>12} {:>14} {:>15} {:>10} {:>9} {:>9}",
        "", "", "(GiB)", "(GiB)", "(lower better)", "", "", "(lower)"
    );
    let mut failed = false;
    for path in paths {
        let result = Trace::load(&path)
            .map_err(|e| e.to_string())
            .and_then(|trace| replay(&trace));
        match result {
            Ok(r) => {
                const GIB: f64 = (1u64 << 30) as f64;
                println!(
                    "{:<16} {:>8} {:>12.3} {:>14.3} {:>15.3} {:>10} {:>9} {:>9.1}",
                    r.trace,
                    r.events,
                    r.peak_live_bytes as f64 / GIB,
                    r.stats.reserved_bytes.peak as f64 / GIB,
                    r.reserved_over_live(),
                    r.calls.get(Call::MemAlloc),
                    r.calls.get(Call::MemFree),
                    r.ns_per_event()
                );
                println!("  all driver calls: {}", r.calls);
                println!(
                    "  synchronisations: {}; retries after releasing the cache: {}; peak \
                     allocated (rounded sizes): {:.3} GiB",
                    r.calls.synchronizations(),
                    r.stats.num_alloc_retries,
                    r.stats.allocated_bytes.peak as f64 / GIB
                );
            }
            Err(e) => {
                eprintln!("{}: {e}", path.display());
                failed = true;
            }
        }
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
