//! Replays allocation traces through both tag placements of tagalloc and prints what the heap
//! did with them: speed, how much memory the trace's live bytes really took, and how fragmented
//! the heap was left.
//!
//! ```text
//! cargo run --release -p tagalloc-tests --example replay                  # the bundled traces
//! cargo run --release -p tagalloc-tests --example replay -- A.trace.gz …  # these traces
//! ```
//!
//! The replay is the same one the tests run (`tagalloc_tests::replay`): block contents are
//! written and verified (inline placement) and the heap's invariants are checked at the end, so
//! a number printed here comes from a replay that was also shown to be correct. One difference:
//! inline blocks are freed with the plain `free` rather than `free_checked`, whose proof of the
//! pointer walks the block's region and would make ns/op measure that walk instead of the heap
//! (the tests use the checked free). ns/op is the time of the whole event loop, id map, content
//! writes and first touches of the arena's pages included, over the allocator calls; each trace
//! is replayed [`RUNS`] times and the fastest run is shown, as the machine may be busy with
//! other work.

use std::env;
use std::path::PathBuf;
use std::process::ExitCode;

use tagalloc_tests::replay::{replay, Placement, ReplayError, ReplayOptions, ReplayReport};
use tagalloc_tests::trace::{bundled_traces_dir, trace_files, Trace};

/// Replays per trace and placement; the fastest is reported.
const RUNS: usize = 5;

const USAGE: &str = "usage: replay [TRACE...]\n\
    Replays each trace (tagalloc trace v1, plain or gzip) through the inline and the detached \
    heap;\nwith no arguments, the bundled traces in tests/data/.";

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
        let dir = bundled_traces_dir();
        match trace_files(&dir) {
            Ok(files) if !files.is_empty() => files,
            Ok(_) => {
                eprintln!("no traces in {}", dir.display());
                return ExitCode::FAILURE;
            }
            Err(e) => {
                eprintln!("{}: {e}", dir.display());
                return ExitCode::FAILURE;
            }
        }
    } else {
        args
    };

    let options = ReplayOptions {
        checked_free: false,
        ..ReplayOptions::default()
    };
    let mut failed = false;
    for (n, path) in paths.iter().enumerate() {
        if n > 0 {
            println!();
        }
        let trace = match Trace::load(path) {
            Ok(trace) => trace,
            Err(e) => {
                eprintln!("{e}");
                failed = true;
                continue;
            }
        };
        println!("{}: {}", trace.name, trace.stats());
        print_header();
        for placement in Placement::ALL {
            match fastest(&trace, placement, &options) {
                Ok(report) => print_row(&report),
                Err(e) => {
                    eprintln!("  {e}");
                    failed = true;
                }
            }
        }
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// The fastest of [`RUNS`] replays (they differ only in time: the heap is deterministic).
fn fastest(
    trace: &Trace,
    placement: Placement,
    options: &ReplayOptions,
) -> Result<ReplayReport, ReplayError> {
    let mut best = replay(trace, placement, options)?;
    for _ in 1..RUNS {
        let report = replay(trace, placement, options)?;
        if report.elapsed < best.elapsed {
            best = report;
        }
    }
    Ok(best)
}

fn print_header() {
    println!(
        "  {:<9} {:>9} {:>7} {:>11} {:>11} {:>6} {:>11} {:>6} {:>6} {:>11} {:>5}",
        "placement",
        "events",
        "ns/op",
        "peak in use",
        "trace peak",
        "ratio",
        "managed",
        "grown",
        "free",
        "largest",
        "frag"
    );
}

fn print_row(r: &ReplayReport) {
    let s = &r.stats;
    let ratio = if r.peak_live_bytes == 0 {
        0.0
    } else {
        s.peak_in_use as f64 / r.peak_live_bytes as f64
    };
    println!(
        "  {:<9} {:>9} {:>7.1} {:>11} {:>11} {:>6.2} {:>11} {:>6} {:>6} {:>11} {:>5.3}",
        r.placement,
        r.events,
        r.ns_per_op(),
        mib(s.peak_in_use),
        mib(r.peak_live_bytes),
        ratio,
        mib(s.managed),
        r.regions_added,
        s.free_chunks,
        mib(s.largest_free),
        s.fragmentation()
    );
}

/// Bytes as MiB with two decimals: the traces' sizes run from kilobytes to gigabytes, and a
/// fixed unit keeps the columns comparable.
fn mib(bytes: usize) -> String {
    format!("{:.2} MiB", bytes as f64 / (1024.0 * 1024.0))
}
