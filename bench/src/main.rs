//! Benchmarks of tagalloc against peer allocators, all driven through one trait
//! (`subjects::Subject`) so that each benchmark is written once:
//!
//! - `micro`: alloc+free of small random sizes in steady state;
//! - `random-actions`: talc's published speed benchmark, so that figures line up with talc's;
//! - `efficiency`: talc's heap-efficiency benchmark (how full a heap gets before a failure);
//! - `replay [TRACE...]`: recorded allocation traces replayed through every allocator, with
//!   time per event and peak footprint against the trace's peak live bytes;
//! - `pool [TRACE...]`: traces replayed through tagalloc's pool under several growth and trim
//!   policies: peak reserved against peak live, what trimming gives back, and the policy
//!   layer's time over the bare heap;
//! - `snapshot TRACE`: the pool's heap at one moment of a trace, drawn region by region.
//! - `plan [CSV...]`: static memory planning (`tagalloc::plan`) on problems with known
//!   lifetimes: lower bound, greedy and exact-search arenas, proof of optimality, time;
//! - `plan-trace [TRACE...]`: a trace's lifetimes planned offline against tagalloc's dynamic
//!   footprint on the same events. Neither planning command is part of the default suite.
//! - `threads`: 1, 2, 4 and 8 threads allocating and freeing through one shared allocator,
//!   some frees handed to another thread: operations per second. Not in the default suite.
//! - `device [TRACE|pipeline|prefetch|buckets]`: a device trace through tagalloc's
//!   stream-ordered device pool (plain and virtual-memory regions) and a model of PyTorch's
//!   CUDA caching allocator, on the fake CUDA driver with a modelled device clock: peak
//!   reserved ÷ peak live, driver calls, host synchronisations and device waits, modelled run
//!   time and host stall against an allocator that never waits, at three device speeds, host
//!   ns per event; `--all-multistream` for every multi-stream trace and a summary. Not in the
//!   default suite.
//! - `programs`: real programs (CPython, perl, sqlite3, git, g++) timed with glibc, jemalloc,
//!   mimalloc, tcmalloc and tagalloc's preload library, wall time and peak resident memory.
//!   Not in the default suite.
//!
//! With no subcommand a default suite runs the first four, shortened to take about a minute (see
//! `docs/measurements.md` for the measurement).
//! Results are markdown tables on stdout (`--json` for machines), SVG charts under
//! `target/tagalloc-bench/`, and a progress bar on stderr when it is a terminal.
//!
//! Run: `cargo run --release -p tagalloc-bench [-- SUBCOMMAND] [OPTIONS]`

use tagalloc_bench::{
    cold, device, efficiency,
    machine::{load_average, Machine},
    micro, plan, plan_constrained, plan_trace, pool, programs, random_actions, replay, snapshot,
    threads,
};

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{json, Value};
use tagalloc_tests::trace;

const HELP: &str = "\
tagalloc-bench: tagalloc against peer allocators

USAGE:
    tagalloc-bench [OPTIONS] [SUBCOMMAND]

SUBCOMMANDS (none: the default suite, the first four shortened, about a minute):
    micro               alloc+free of random 8..=512-byte blocks, 1000 live
    random-actions      talc's random-actions benchmark (7 trials x 200 ms per size)
    efficiency          talc's heap-efficiency benchmark (300 rounds)
    replay [TRACE...]   replay allocation traces (files or directories; default: every
                        trace in ../shared/traces, else the bundled tests/data traces)
    pool [TRACE...]     replay traces through tagalloc's pool under growth and trim
                        policies: peak reserved / peak live, trim, ns/event over the
                        bare heap (default: python-json, sqlite, android-systemui from
                        ../shared/traces, else the bundled traces)
    snapshot TRACE      replay a trace through a pool up to --at and draw its heap as an
                        SVG: regions, chunks in use and free, fragmentation
    plan [PROBLEM...]   static memory planning problems, .csv (intervals) or .json
                        (aliases, groups, graphs with streams, pins, spaces:
                        docs/plan-format.md); files or directories; default:
                        ../shared/plans/*.csv, else the bundled bench/data/plans); not in
                        the default suite
    plan-trace [TRACE...]
                        plan a trace's lifetimes offline and compare with tagalloc's
                        dynamic footprint on the same events (traces as for replay); not
                        in the default suite
    threads [N|ALLOCATOR...]
                        1, 2, 4 and 8 threads allocating and freeing through one shared
                        allocator (tagalloc's GlobalHeap and HostAllocator, talc, rlsf,
                        glibc), a quarter of the frees handed to another thread:
                        operations per second (--runs: rounds, default 7); naming thread
                        counts or allocators (their JSON keys) runs only those, to
                        profile one; not in the default suite
    device [TRACE|pipeline|prefetch|buckets]
                        a device trace (default ../shared/traces/torch-cs336.trace.gz;
                        with --quick a synthetic 3-stream one; pipeline, prefetch,
                        buckets: generated multi-stream patterns) through tagalloc's
                        device pool (plain and VMM regions) and a model of PyTorch's
                        caching allocator on the fake CUDA driver with a modelled
                        device clock: memory, driver calls, modelled run time and host
                        stall against an allocator that never waits, at device speeds
                        0.5x, 1x and 2x (15 interleaved runs); --all-multistream: every
                        multi-stream trace (torch-multistream and the three patterns)
                        and a summary table; not in the default suite
    programs            real programs (CPython, perl, sqlite3, git, g++) with glibc,
                        jemalloc, mimalloc, tcmalloc and tagalloc preloaded: wall time and
                        peak resident memory, 3 rounds (a few minutes); missing peers are
                        skipped, or installed with apt-get with --install

OPTIONS:
    --quick             a seconds-long smoke run: tiny durations, few rounds, the bundled
                        traces only (their first 20,000 events)
    --json              print the results as JSON instead of markdown tables
    --runs N            repetitions: micro, replay and pool runs, random-actions trials,
                        efficiency rounds
    --budget SECONDS    replay: stop one allocator's run on one trace after this long;
                        plan, plan-trace: time for the exact search on each problem
                        (default 10)
    --events N          plan-trace: events used from the start of each trace
                        (default 50000)
    --out DIR           the directory the SVG charts go to (default:
                        target/tagalloc-bench; made if missing); for snapshot, a
                        directory or the .svg file to write; for plan, a directory
                        for NAME.plan.csv of each problem, or the .csv file of one
                        problem's plan (id,offset lines); anything else is refused
    --no-plots          write no charts
    --sizes N[,N...]    random-actions: only these maximum sizes in bytes (default
                        talc's 200,1000,3000,10000,30000; each from 17 to 100000)
    --only KEY[,KEY...] random-actions, replay: only these allocators (keys such as
                        talc, dlmalloc, rlsf, tagalloc_inline_nostats; a wrong one is
                        refused with the list), and tagalloc's heap every ratio is
                        taken against
    --at EVENT|peak     snapshot: after this many events, or when live bytes peak
                        (default: peak)
    --policy NAME       snapshot: the pool's growth, fixed-64k, fixed-2m (default) or
                        doubling (1 MiB to 64 MiB)
    --lib PATH          programs: tagalloc's preload library (default: built now with
                        cargo, in this tool's profile)
    --baseline PATH     programs: another build of the preload library, run beside
                        tagalloc's as one more allocator (before and after a change,
                        interleaved in the same rounds)
    --install           programs: install missing peers with apt-get (as root) instead
                        of skipping them
    --engines N         device: the modelled device runs N kernels at once at full
                        speed (default 1: its streams share its throughput; 0: every
                        stream at full speed at once, no sharing)
    --all-multistream   device: replay every multi-stream trace (the shared
                        torch-multistream and the generated pipeline, prefetch and
                        buckets; with --quick the generated synthetic-3-streams and
                        short patterns) and print a summary table of them all
    -h, --help          this text
";

/// What the command line asked for.
struct Args {
    command: Option<String>,
    traces: Vec<PathBuf>,
    problems: Vec<PathBuf>,
    quick: bool,
    json: bool,
    runs: Option<usize>,
    budget: Option<f64>,
    events: Option<usize>,
    out: Option<PathBuf>,
    plots: bool,
    at: Option<snapshot::At>,
    policy: Option<pool::Growing>,
    /// `threads`: the thread counts and allocators named after it.
    selection: Vec<String>,
    lib: Option<PathBuf>,
    baseline: Option<PathBuf>,
    install: bool,
    /// `--all-multistream`: `device` replays every multi-stream trace.
    all_multistream: bool,
    /// `--engines N`: `device`'s modelled device runs N kernels at once (0: every stream at
    /// full speed at once).
    engines: Option<u32>,
    /// `--sizes`: random-actions' maximum sizes (empty: talc's five).
    sizes: Vec<usize>,
    /// `--only`: the allocators random-actions and replay run, by key (empty: all).
    only: Vec<String>,
}

/// Why the tool stopped: bad input (exit code 2) or a failure while running (1).
enum Failure {
    Input(String),
    Run(String),
}

fn parse_args() -> Result<Option<Args>, String> {
    use lexopt::prelude::*;
    let mut args = Args {
        command: None,
        traces: Vec::new(),
        problems: Vec::new(),
        quick: false,
        json: false,
        runs: None,
        budget: None,
        events: None,
        out: None,
        plots: true,
        at: None,
        policy: None,
        selection: Vec::new(),
        lib: None,
        baseline: None,
        install: false,
        all_multistream: false,
        engines: None,
        sizes: Vec::new(),
        only: Vec::new(),
    };
    let mut parser = lexopt::Parser::from_env();
    let e = |e: lexopt::Error| e.to_string();
    while let Some(arg) = parser.next().map_err(e)? {
        match arg {
            Long("quick") => args.quick = true,
            Long("json") => args.json = true,
            Long("no-plots") => args.plots = false,
            Long("runs") => {
                let n: usize = parser.value().map_err(e)?.parse().map_err(e)?;
                if n == 0 {
                    return Err("--runs must be at least 1".into());
                }
                args.runs = Some(n);
            }
            Long("budget") => {
                let s: f64 = parser.value().map_err(e)?.parse().map_err(e)?;
                if !(s.is_finite() && s > 0.0 && s < 1e6) {
                    return Err("--budget must be a positive number of seconds".into());
                }
                args.budget = Some(s);
            }
            Long("events") => {
                let n: usize = parser.value().map_err(e)?.parse().map_err(e)?;
                if n == 0 {
                    return Err("--events must be at least 1".into());
                }
                args.events = Some(n);
            }
            Long("out") => args.out = Some(parser.value().map_err(e)?.into()),
            Long("at") => {
                let v = parser.value().map_err(e)?.string().map_err(e)?;
                args.at = Some(snapshot::At::parse(&v)?);
            }
            Long("policy") => {
                let v = parser.value().map_err(e)?.string().map_err(e)?;
                let keys: Vec<&str> = pool::GROWTHS.iter().map(|g| g.key).collect();
                args.policy = Some(pool::growth_named(&v).ok_or_else(|| {
                    format!("unknown --policy `{v}` (expected {})", keys.join(", "))
                })?);
            }
            Long("only") => {
                let v = parser.value().map_err(e)?.string().map_err(e)?;
                args.only = v.split(',').map(str::to_string).collect();
                if args.only.iter().any(String::is_empty) {
                    return Err("--only takes allocator keys separated by commas".into());
                }
            }
            Long("sizes") => {
                let v = parser.value().map_err(e)?.string().map_err(e)?;
                args.sizes = random_actions::parse_sizes(&v)?;
            }
            Long("lib") => args.lib = Some(parser.value().map_err(e)?.into()),
            Long("baseline") => args.baseline = Some(parser.value().map_err(e)?.into()),
            Long("install") => args.install = true,
            Long("all-multistream") => args.all_multistream = true,
            Long("engines") => {
                let v = parser.value().map_err(e)?.string().map_err(e)?;
                args.engines = Some(v.parse().map_err(|_| {
                    format!(
                        "--engines takes a count of kernels run at once (0: no limit), not {v:?}"
                    )
                })?);
            }
            Short('h') | Long("help") => return Ok(None),
            Value(v) if args.command.is_none() => {
                let name = v.string().map_err(e)?;
                match name.as_str() {
                    "micro" | "random-actions" | "efficiency" | "replay" | "pool" | "snapshot"
                    | "plan" | "plan-trace" | "threads" | "device" | "programs" => {
                        args.command = Some(name)
                    }
                    other => {
                        return Err(format!(
                            "unknown subcommand `{other}` (expected micro, random-actions, \
                             efficiency, replay, pool, snapshot, plan, plan-trace, threads, \
                             device or programs)"
                        ))
                    }
                }
            }
            Value(v)
                if matches!(
                    args.command.as_deref(),
                    Some("replay" | "pool" | "snapshot" | "plan-trace")
                ) =>
            {
                args.traces.push(v.into())
            }
            Value(v) if args.command.as_deref() == Some("plan") => args.problems.push(v.into()),
            Value(v) if args.command.as_deref() == Some("threads") => {
                args.selection.push(v.string().map_err(e)?)
            }
            Value(v) if args.command.as_deref() == Some("device") && args.traces.is_empty() => {
                args.traces.push(v.into())
            }
            other => return Err(other.unexpected().to_string()),
        }
    }
    if !args.only.is_empty()
        && !matches!(args.command.as_deref(), Some("random-actions" | "replay"))
    {
        return Err("--only belongs to the random-actions and replay subcommands".into());
    }
    if args.all_multistream && args.command.as_deref() != Some("device") {
        return Err("--all-multistream belongs to the device subcommand".into());
    }
    if args.all_multistream && !args.traces.is_empty() {
        return Err(
            "device: --all-multistream replays its own set of traces; name no trace".into(),
        );
    }
    if !args.sizes.is_empty() && args.command.as_deref() != Some("random-actions") {
        return Err("--sizes belongs to the random-actions subcommand".into());
    }
    let snapshot = args.command.as_deref() == Some("snapshot");
    if !snapshot && (args.at.is_some() || args.policy.is_some()) {
        return Err("--at and --policy belong to the snapshot subcommand".into());
    }
    if snapshot && args.traces.len() != 1 {
        return Err("snapshot takes exactly one trace file".into());
    }
    if let Some(out) = &args.out {
        let plan = args.command.as_deref() == Some("plan");
        match (snapshot, out_kind(out)) {
            (_, Out::Dir) | (true, Out::Svg) => {}
            (false, Out::Csv) if plan => {}
            (true, Out::Other | Out::Csv) => {
                return Err(format!(
                    "snapshot: --out {} is neither a directory nor an .svg file (the picture \
                     is SVG; `rsvg-convert -o snap.png snap.svg` makes a PNG of it)",
                    out.display()
                ))
            }
            (false, _) => {
                return Err(format!(
                    "--out {} is not a directory: it takes the directory the SVG charts go to",
                    out.display()
                ))
            }
        }
    }
    Ok(Some(args))
}

/// What an `--out` path names: one meaning for every subcommand.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Out {
    /// A directory: one that exists, or a path with no extension (made if missing).
    Dir,
    /// An SVG file to write (the snapshot's picture).
    Svg,
    /// A CSV file to write (a plan).
    Csv,
    /// Anything else (an existing file, another extension): refused.
    Other,
}

fn out_kind(path: &Path) -> Out {
    if path.is_dir() {
        return Out::Dir;
    }
    match path.extension().and_then(|e| e.to_str()) {
        _ if path.file_name().is_none() => Out::Dir,
        None if !path.exists() => Out::Dir,
        Some("svg") => Out::Svg,
        Some("csv") => Out::Csv,
        _ => Out::Other,
    }
}

/// How long each part runs: a full subcommand, the default suite, or a smoke run.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Full,
    Suite,
    Quick,
}

/// The traces a replay runs, and where they come from: said on stderr and in the output, so
/// that a run on the small bundled set is never taken for one on the shared collection.
struct TraceSet {
    paths: Vec<PathBuf>,
    /// One line for the report: which set, from where, and why.
    origin: String,
    /// The same, for JSON.
    json: Value,
    /// The shared collection was wanted but not found: the run falls back to the bundled set.
    fallback: bool,
}

/// The trace files to replay: those named (directories expanded), or the default collection:
/// `../shared/traces` (only the traces called `wanted`, if given), else (and always with
/// `--quick`) the bundled `tests/data` traces.
fn trace_set(args: &Args, mode: Mode, wanted: Option<&[&str]>) -> Result<TraceSet, Failure> {
    let list = |dir: &Path| {
        trace::trace_files(dir)
            .map_err(|e| Failure::Input(format!("cannot list traces in {}: {e}", dir.display())))
    };
    let names = |paths: &[PathBuf]| {
        paths
            .iter()
            .map(|p| trace::trace_name(p))
            .collect::<Vec<_>>()
            .join(", ")
    };
    if !args.traces.is_empty() {
        let mut paths = Vec::new();
        for p in &args.traces {
            if p.is_dir() {
                paths.extend(list(p)?);
            } else if p.is_file() {
                paths.push(p.clone());
            } else {
                return Err(Failure::Input(format!(
                    "cannot read trace {}: no such file or directory",
                    p.display()
                )));
            }
        }
        let shown: Vec<String> = args
            .traces
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        return Ok(TraceSet {
            origin: format!(
                "the {} trace(s) named on the command line ({})",
                paths.len(),
                shown.join(", ")
            ),
            json: json!({ "set": "named", "paths": shown }),
            paths,
            fallback: false,
        });
    }
    let bundled = std::fs::canonicalize(trace::bundled_traces_dir())
        .unwrap_or_else(|_| trace::bundled_traces_dir());
    let shared = trace::shared_traces_location();
    let why = if mode == Mode::Quick {
        "--quick replays only these".to_string()
    } else {
        match trace::shared_traces_dir() {
            Some(dir) => {
                let mut paths = list(&dir)?;
                let mut missing = Vec::new();
                if let Some(wanted) = wanted {
                    paths.retain(|p| wanted.contains(&trace::trace_name(p).as_str()));
                    missing = wanted
                        .iter()
                        .filter(|w| !paths.iter().any(|p| trace::trace_name(p) == **w))
                        .map(|w| w.to_string())
                        .collect();
                }
                if !paths.is_empty() && !missing.is_empty() {
                    return Ok(TraceSet {
                        origin: format!(
                            "{} of the shared collection's traces from {} ({}), WITHOUT {}, \
                             which {} not there",
                            paths.len(),
                            dir.display(),
                            names(&paths),
                            missing.join(", "),
                            if missing.len() == 1 { "is" } else { "are" }
                        ),
                        json: json!({
                            "set": "shared",
                            "dir": dir.display().to_string(),
                            "missing": missing,
                        }),
                        paths,
                        fallback: true,
                    });
                }
                if !paths.is_empty() {
                    return Ok(TraceSet {
                        origin: format!(
                            "the shared collection, {} traces from {} ({})",
                            paths.len(),
                            dir.display(),
                            names(&paths)
                        ),
                        json: json!({ "set": "shared", "dir": dir.display().to_string() }),
                        paths,
                        fallback: false,
                    });
                }
                match wanted {
                    Some(w) => format!("{} holds none of {}", dir.display(), w.join(", ")),
                    None => format!("{} holds no traces", dir.display()),
                }
            }
            None => format!("no shared trace collection at {}", shared.display()),
        }
    };
    let paths = list(&bundled)?;
    let fallback = mode != Mode::Quick;
    Ok(TraceSet {
        origin: format!(
            "the {} small bundled traces from {} ({}){}: {why}",
            paths.len(),
            bundled.display(),
            names(&paths),
            if fallback {
                ", NOT the shared collection the README's results come from"
            } else {
                ""
            }
        ),
        json: json!({
            "set": "bundled",
            "dir": bundled.display().to_string(),
            "why": why,
        }),
        paths,
        fallback,
    })
}

/// The traces `device` replays, and where each came from: the one named (a file, or the name
/// of a generated pattern: pipeline, prefetch, buckets), else the PyTorch trace of the shared
/// collection (an error if it is missing), or, with `--quick`, a synthetic three-stream trace
/// that needs no file; with `--all-multistream`, every multi-stream trace: the shared
/// torch-multistream and the three patterns (with `--quick`, the synthetic three-stream trace
/// and the patterns one step long).
fn device_traces(args: &Args, mode: Mode) -> Result<Vec<(trace::Trace, String)>, Failure> {
    use tagalloc_tests::stream_patterns::Pattern;
    let quick = mode == Mode::Quick;
    let pattern = |p: Pattern| {
        let steps = if quick { 1 } else { p.default_steps() };
        let t = p.trace(steps, 1);
        let origin = format!(
            "{}, generated ({}, {steps} training step{}, seed 1: {})",
            t.name,
            p.name(),
            if steps == 1 { "" } else { "s" },
            p.describe()
        );
        (t, origin)
    };
    let synthetic = || {
        let t = tagalloc_tests::device_replay::synthetic_trace(3000, 3, 50, 1);
        let origin = format!(
            "{}, generated (--quick: 3000 events on 3 streams, no file needed)",
            t.name
        );
        (t, origin)
    };
    let shared = |file: &str| -> Result<(trace::Trace, String), Failure> {
        let path = trace::shared_trace(file).map_err(|e| {
            Failure::Input(format!(
                "{e} (name a device trace: tagalloc-bench device TRACE, or use --quick)"
            ))
        })?;
        let t = trace::Trace::load(&path).map_err(|e| Failure::Input(e.to_string()))?;
        Ok((t, format!("{} (the shared collection)", path.display())))
    };
    if args.all_multistream {
        let mut v = vec![if quick {
            synthetic()
        } else {
            shared("torch-multistream.trace.gz")?
        }];
        v.extend(Pattern::ALL.map(pattern));
        return Ok(v);
    }
    if let Some(path) = args.traces.first() {
        if let Some(p) = path.to_str().and_then(Pattern::named) {
            return Ok(vec![pattern(p)]);
        }
        let t = trace::Trace::load(path).map_err(|e| Failure::Input(e.to_string()))?;
        return Ok(vec![(
            t,
            format!("{} (named on the command line)", path.display()),
        )]);
    }
    if quick {
        return Ok(vec![synthetic()]);
    }
    Ok(vec![shared("torch-cs336.trace.gz")?])
}

/// The planning problems to solve: those named (directories expanded), or the shared
/// collection, or (for `--quick`, or without it) the bundled ones.
fn problem_paths(args: &Args, mode: Mode) -> Result<Vec<PathBuf>, Failure> {
    if !args.problems.is_empty() {
        let mut paths = Vec::new();
        for p in &args.problems {
            if p.is_dir() {
                paths.extend(plan::csv_files(p).map_err(Failure::Input)?);
            } else if p.is_file() {
                paths.push(p.clone());
            } else {
                return Err(Failure::Input(format!(
                    "cannot read problem {}: no such file or directory",
                    p.display()
                )));
            }
        }
        return Ok(paths);
    }
    if mode != Mode::Quick {
        if let Some(dir) = plan::shared_dir() {
            let files = plan::csv_files(&dir).map_err(Failure::Input)?;
            if !files.is_empty() {
                return Ok(files);
            }
        }
    }
    plan::csv_files(&plan::bundled_dir()).map_err(Failure::Input)
}

fn progress(len: u64) -> ProgressBar {
    let bar = ProgressBar::new(len);
    if let Ok(style) =
        ProgressStyle::with_template("{msg:50!} [{bar:30}] {pos}/{len} {elapsed_precise}")
    {
        bar.set_style(style.progress_chars("=> "));
    }
    bar
}

fn default_out() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"));
    target.join("tagalloc-bench")
}

fn run(args: &Args) -> Result<(), Failure> {
    let started = Instant::now();
    let mode = match (args.quick, args.command.is_some()) {
        (true, _) => Mode::Quick,
        (false, true) => Mode::Full,
        (false, false) => Mode::Suite,
    };
    let wants = |name: &str| args.command.is_none() || args.command.as_deref() == Some(name);
    // Pools, snapshots and planning are other jobs than the suite's: only when asked for.
    let only = |name: &str| args.command.as_deref() == Some(name);
    let pick = |full: usize, suite: usize, quick: usize| {
        args.runs.unwrap_or(match mode {
            Mode::Full => full,
            Mode::Suite => suite,
            Mode::Quick => quick,
        })
    };
    // `--out` names a directory, or (snapshot) the picture's file; the directory is made here.
    let plots = if args.plots {
        let dir = match (&args.out, only("snapshot")) {
            (Some(file), _) if matches!(out_kind(file), Out::Svg | Out::Csv) => file
                .parent()
                .filter(|d| !d.as_os_str().is_empty())
                .map_or_else(|| PathBuf::from("."), Path::to_path_buf),
            (out, _) => out.clone().unwrap_or_else(default_out),
        };
        std::fs::create_dir_all(&dir)
            .map_err(|e| Failure::Run(format!("cannot create {}: {e}", dir.display())))?;
        Some(std::fs::canonicalize(&dir).unwrap_or(dir))
    } else {
        None
    };
    let run_err = Failure::Run;

    // Traces first, so that a bad one stops the tool before any long measurement.
    let device_traces = if args.command.as_deref() == Some("device") {
        Some(device_traces(args, mode)?)
    } else {
        None
    };
    let mut prepared = Vec::new();
    let mut traces = None;
    if wants("replay") || only("pool") || only("snapshot") {
        let wanted = only("pool").then_some(&pool::DEFAULT_TRACES[..]);
        let set = trace_set(args, mode, wanted)?;
        if set.paths.is_empty() {
            return Err(Failure::Input(format!(
                "no traces to replay in {}",
                set.origin
            )));
        }
        if only("snapshot") && set.paths.len() != 1 {
            return Err(Failure::Input(format!(
                "snapshot takes one trace, and {} holds {}",
                args.traces[0].display(),
                set.paths.len()
            )));
        }
        eprintln!(
            "tagalloc-bench: {}replaying {}",
            if set.fallback { "WARNING: " } else { "" },
            set.origin
        );
        let max_events = (mode == Mode::Quick).then_some(20_000);
        let bar = progress(set.paths.len() as u64);
        for p in &set.paths {
            bar.set_message(format!("loading {}", p.display()));
            prepared.push(replay::load(p, max_events).map_err(Failure::Input)?);
            bar.inc(1);
        }
        bar.finish_and_clear();
        traces = Some(set);
    }
    let mut trace_problems = Vec::new();
    let plan_events = args
        .events
        .unwrap_or(if mode == Mode::Quick { 5_000 } else { 50_000 });
    if only("plan-trace") {
        let set = trace_set(args, mode, None)?;
        if set.paths.is_empty() {
            return Err(Failure::Input("no traces to plan".into()));
        }
        eprintln!(
            "tagalloc-bench: {}planning {}",
            if set.fallback { "WARNING: " } else { "" },
            set.origin
        );
        for p in &set.paths {
            trace_problems.push(plan_trace::load(p, plan_events).map_err(Failure::Input)?);
        }
    }
    let mut problems = Vec::new();
    let mut constrained = Vec::new();
    if only("plan") {
        let paths = problem_paths(args, mode)?;
        if paths.is_empty() {
            return Err(Failure::Input("no planning problems to solve".into()));
        }
        for p in &paths {
            match plan::load_any(p).map_err(Failure::Input)? {
                plan::Input::Intervals(q) => problems.push(q),
                plan::Input::Constrained(q) => constrained.push(q),
            }
        }
    }

    let threads_only = threads::Selection::parse(&args.selection).map_err(Failure::Input)?;
    // The keys of `--only`, checked before anything runs.
    tagalloc_bench::subjects::Peer::check_keys(&args.only).map_err(Failure::Input)?;

    let machine = Machine::at_start();
    let mut out_json = serde_json::Map::new();
    if let Some(set) = &traces {
        out_json.insert("traces".into(), set.json.clone());
    }
    let mut emit = |md: String, key: &str, json: Value| {
        if !args.json {
            println!("{md}");
        }
        out_json.insert(key.to_string(), json);
    };
    if !args.json {
        println!(
            "# tagalloc-bench{}\n",
            match mode {
                Mode::Full => "",
                Mode::Suite => " (default suite)",
                Mode::Quick => " (--quick smoke run: figures are not meaningful)",
            }
        );
        println!("**Machine:** {}.\n", machine.describe());
        if let Some(set) = &traces {
            let warning = if set.fallback { "WARNING: " } else { "" };
            println!("**{warning}Traces replayed:** {}.\n", set.origin);
        }
    }

    if wants("micro") {
        let opts = micro::Options {
            steps: match mode {
                Mode::Full => 2_000_000,
                Mode::Suite => 500_000,
                Mode::Quick => 20_000,
            },
            runs: pick(7, 5, 2),
        };
        let bar = progress((opts.runs * 10) as u64);
        let (md, json) = micro::run(&opts, plots.as_deref(), &bar).map_err(run_err)?;
        bar.finish_and_clear();
        emit(md, "micro", json);
    }

    if wants("random-actions") {
        let opts = random_actions::Options {
            trials: pick(7, 3, 1),
            duration: Duration::from_millis(match mode {
                Mode::Full => 200,
                Mode::Suite => 60,
                Mode::Quick => 5,
            }),
            warmup: Duration::from_millis(if mode == Mode::Quick { 1 } else { 2 }),
            sizes: if args.sizes.is_empty() {
                random_actions::MAX_SIZES.to_vec()
            } else {
                args.sizes.clone()
            },
            only: args.only.clone(),
        };
        let bar = progress((opts.trials * 10 * opts.sizes.len()) as u64);
        let (md, json) = random_actions::run(&opts, plots.as_deref(), &bar).map_err(run_err)?;
        bar.finish_and_clear();
        emit(md, "random_actions", json);
    }

    if wants("efficiency") {
        let opts = efficiency::Options {
            rounds: pick(300, 30, 2),
            heap: if mode == Mode::Quick {
                8 << 20
            } else {
                random_actions::HEAP
            },
        };
        let bar = progress((opts.rounds * 9) as u64);
        let (md, json) = efficiency::run(&opts, plots.as_deref(), &bar).map_err(run_err)?;
        bar.finish_and_clear();
        emit(md, "efficiency", json);
    }

    if wants("replay") {
        let opts = replay::Options {
            runs: pick(5, 3, 1),
            budget: Duration::from_secs_f64(args.budget.unwrap_or(match mode {
                Mode::Full => 10.0,
                Mode::Suite => 1.5,
                Mode::Quick => 1.0,
            })),
            plots: plots.clone(),
            only: args.only.clone(),
        };
        let items: usize = prepared
            .iter()
            .map(|p| (opts.runs + 1) * replay::peers(p, &opts.only).len())
            .sum();
        let bar = progress(items as u64);
        let mut md = format!(
            "## Trace replay\n\nEvery event of each trace through every allocator: one untimed \
             run for the footprint, then {} timed run(s), allocators interleaved, each timed \
             run from cold caches ({} MiB read first); ns/event is the median. Host allocators \
             share one arena per trace (the bump reference gets one as large as the trace's \
             total requests); address allocators manage an address \
             range of the same size and touch no memory (a moving realloc copies nothing). \
             A run stops after {:.1} s (marked †). Single-threaded: `t=` fields are ignored. \
             {}\n",
            opts.runs,
            cold::Sweep::BYTES >> 20,
            opts.budget.as_secs_f64(),
            replay::FOOTPRINT_NOTE,
        );
        let mut traces = Vec::new();
        for p in &prepared {
            let r = replay::run(p, &opts, &bar).map_err(run_err)?;
            md.push('\n');
            md.push_str(&r.markdown(opts.runs));
            traces.push(r.json());
        }
        bar.finish_and_clear();
        emit(md, "replay", Value::Array(traces));
    }

    if only("pool") {
        let opts = pool::Options {
            runs: pick(7, 3, 1),
        };
        let host: Vec<&replay::Prepared> = prepared.iter().filter(|p| !p.device).collect();
        let items = host.len() * pool::ROWS * (opts.runs + 1);
        let bar = progress(items as u64);
        let mut md = pool::heading(opts.runs);
        let mut traces = Vec::new();
        for p in &prepared {
            if p.device {
                md.push_str(&format!(
                    "\n### {}\n\nNot replayed: a device-memory trace, which a pool of host \
                     memory cannot hold.\n",
                    p.name
                ));
                continue;
            }
            let r = pool::run(p, &opts, &bar).map_err(run_err)?;
            md.push('\n');
            md.push_str(&r.markdown());
            traces.push(r.json());
        }
        bar.finish_and_clear();
        emit(md, "pool", Value::Array(traces));
    }

    if only("snapshot") {
        let p = &prepared[0];
        let when = args.at.unwrap_or(snapshot::At::Peak);
        let at = when.resolve(p).map_err(Failure::Input)?;
        let growing = args.policy.unwrap_or(pool::GROWTHS[1]);
        let svg = plots.as_ref().map(|dir| match &args.out {
            Some(file) if out_kind(file) == Out::Svg => {
                dir.join(file.file_name().unwrap_or_default())
            }
            _ => dir.join(format!(
                "snapshot-{}-{}.svg",
                p.name,
                match when {
                    snapshot::At::Peak => "peak".to_string(),
                    snapshot::At::Events(n) => n.to_string(),
                }
            )),
        });
        let s = snapshot::run(p, at, when == snapshot::At::Peak, growing, svg.as_deref())
            .map_err(run_err)?;
        emit(s.markdown(), "snapshot", s.json());
    }

    if only("plan") {
        let opts = plan::Options {
            budget: Duration::from_secs_f64(args.budget.unwrap_or(match mode {
                Mode::Quick => 0.2,
                _ => 10.0,
            })),
            out: args.out.clone(),
        };
        if !problems.is_empty() {
            let bar = progress(problems.len() as u64);
            let (md, json) = plan::run(&problems, &opts, &bar).map_err(run_err)?;
            bar.finish_and_clear();
            emit(md, "plan", json);
        }
        if !constrained.is_empty() {
            let opts = plan_constrained::Options {
                budget: opts.budget,
                out: opts.out,
                orders: 4,
            };
            let bar = progress(constrained.len() as u64);
            let (md, json) = plan_constrained::run(&constrained, &opts, &bar).map_err(run_err)?;
            bar.finish_and_clear();
            emit(md, "plan_constrained", json);
        }
    }

    if only("plan-trace") {
        let opts = plan_trace::Options {
            budget: Duration::from_secs_f64(args.budget.unwrap_or(match mode {
                Mode::Quick => 0.2,
                _ => 10.0,
            })),
            events: plan_events,
        };
        let bar = progress(trace_problems.len() as u64);
        let (md, json) = plan_trace::run(&trace_problems, &opts, &bar).map_err(run_err)?;
        bar.finish_and_clear();
        emit(md, "plan_trace", json);
    }

    if only("threads") {
        let opts = threads::Options {
            steps: if mode == Mode::Quick { 2_000 } else { 500_000 },
            runs: pick(7, 7, 1),
            warmup: mode != Mode::Quick,
            only: threads_only,
        };
        let rounds = opts.runs + usize::from(opts.warmup);
        let bar = progress((rounds * opts.only.runs_per_round()) as u64);
        let (md, json) = threads::run(&opts, plots.as_deref(), &bar).map_err(run_err)?;
        bar.finish_and_clear();
        emit(md, "threads", json);
    }

    if let Some(traces) = &device_traces {
        for (_, origin) in traces {
            eprintln!("tagalloc-bench: device: replaying {origin}");
        }
        let mut model = device::Model::DEFAULT;
        if let Some(n) = args.engines {
            model.clock.engines = n;
        }
        let opts = device::Options {
            runs: pick(15, 15, 1),
            model,
        };
        let bar = progress(opts.steps(traces.len()));
        let replayed = traces
            .iter()
            .map(|(_, origin)| format!("- {origin}"))
            .collect::<Vec<_>>()
            .join("\n");
        let (md, json) = if args.all_multistream {
            let all: Vec<&trace::Trace> = traces.iter().map(|(t, _)| t).collect();
            device::run_all(&all, &opts, &bar).map_err(run_err)?
        } else {
            device::run(&traces[0].0, &opts, &bar).map_err(run_err)?
        };
        bar.finish_and_clear();
        let heading = if traces.len() == 1 {
            format!("**Device trace replayed:** {}.", traces[0].1)
        } else {
            format!("**Device traces replayed:**\n\n{replayed}")
        };
        emit(format!("{heading}\n\n{md}"), "device", json);
    }

    // Only when asked for: it needs the programs installed and takes minutes.
    if only("programs") {
        let opts = programs::Options {
            runs: pick(3, 3, 1),
            quick: mode == Mode::Quick,
            install: args.install,
            lib: args.lib.clone(),
            baseline: args.baseline.clone(),
            plots: plots.clone(),
        };
        let bar = progress(0);
        let (md, json) = programs::run(&opts, &bar).map_err(run_err)?;
        bar.finish_and_clear();
        emit(md, "programs", json);
    }

    let charts = plots.as_ref().filter(|_| {
        !["pool", "plan", "plan-trace", "device"]
            .iter()
            .any(|c| only(c))
    });
    if let Some(dir) = charts {
        out_json.insert("plots_dir".into(), json!(dir.display().to_string()));
    }
    out_json.insert("machine".into(), machine.json());
    if args.json {
        let text = serde_json::to_string_pretty(&Value::Object(out_json))
            .map_err(|e| Failure::Run(e.to_string()))?;
        println!("{text}");
    } else if let Some(dir) = charts {
        // `pool` and planning write tables only; `snapshot` names its picture in its section.
        println!("Charts: {}", dir.display());
    }
    if !args.json {
        println!(
            "Load average (1, 5, 15 min) at the end: {}.",
            load_average()
        );
    }
    eprintln!("finished in {:.1} s", started.elapsed().as_secs_f64());
    Ok(())
}

fn main() -> ExitCode {
    // Started by `programs` to run and measure one program (not for people: see
    // `programs::runner_main`).
    let raw: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if raw.get(1).is_some_and(|a| a == programs::RUNNER) {
        return ExitCode::from(programs::runner_main(&raw[2..]));
    }
    let args = match parse_args() {
        Ok(Some(args)) => args,
        Ok(None) => {
            print!("{HELP}");
            println!(
                "\nPLANNING PROBLEMS (plan CSV...): {}; a plan written with --out has the \
                 lines `id,offset` and ends with `# arena BYTES`.",
                plan::FORMAT
            );
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("tagalloc-bench: {e}\n\n{HELP}");
            return ExitCode::from(2);
        }
    };
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Input(e)) => {
            eprintln!("tagalloc-bench: {e}");
            ExitCode::from(2)
        }
        Err(Failure::Run(e)) => {
            eprintln!("tagalloc-bench: {e}");
            ExitCode::from(1)
        }
    }
}
