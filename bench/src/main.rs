//! Benchmarks of tagalloc against peer allocators, all driven through one trait
//! (`subjects::Subject`) so that each benchmark is written once:
//!
//! - `micro`: alloc+free of small random sizes in steady state;
//! - `random-actions`: talc's published speed benchmark, so that figures line up with talc's;
//! - `efficiency`: talc's heap-efficiency benchmark (how full a heap gets before a failure);
//! - `replay [TRACE...]`: recorded allocation traces replayed through every allocator, with
//!   time per event and peak footprint against the trace's peak live bytes;
//! - `device [TRACE]`: a device trace through tagalloc's stream-ordered device pool (plain
//!   and virtual-memory regions) and a model of PyTorch's CUDA caching allocator, on the fake
//!   CUDA driver: peak reserved ÷ peak live, driver calls, host ns per event.
//!
//! With no subcommand a default suite runs the first four, shortened to take about a minute (see
//! the README for the measurement).
//! Results are markdown tables on stdout (`--json` for machines), SVG charts under
//! `target/tagalloc-bench/`, and a progress bar on stderr when it is a terminal.
//!
//! Run: `cargo run --release -p tagalloc-bench [-- SUBCOMMAND] [OPTIONS]`

mod bump;
mod device;
mod efficiency;
mod micro;
mod plot;
mod random_actions;
mod replay;
mod report;
mod style;
mod subjects;

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
    device [TRACE]      a device trace (default ../shared/traces/torch-cs336.trace.gz;
                        with --quick a synthetic 3-stream one) through tagalloc's device
                        pool (plain and VMM regions) and a model of PyTorch's caching
                        allocator on the fake CUDA driver (15 interleaved runs)

OPTIONS:
    --quick             a seconds-long smoke run: tiny durations, few rounds, the bundled
                        traces only (their first 20,000 events)
    --json              print the results as JSON instead of markdown tables
    --runs N            repetitions: micro and replay runs, random-actions trials,
                        efficiency rounds
    --budget SECONDS    replay: stop one allocator's run on one trace after this long
    --out DIR           where the SVG charts go (default: target/tagalloc-bench)
    --no-plots          write no charts
    -h, --help          this text
";

/// What the command line asked for.
struct Args {
    command: Option<String>,
    traces: Vec<PathBuf>,
    quick: bool,
    json: bool,
    runs: Option<usize>,
    budget: Option<f64>,
    out: Option<PathBuf>,
    plots: bool,
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
        quick: false,
        json: false,
        runs: None,
        budget: None,
        out: None,
        plots: true,
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
            Long("out") => args.out = Some(parser.value().map_err(e)?.into()),
            Short('h') | Long("help") => return Ok(None),
            Value(v) if args.command.is_none() => {
                let name = v.string().map_err(e)?;
                match name.as_str() {
                    "micro" | "random-actions" | "efficiency" | "replay" | "device" => {
                        args.command = Some(name)
                    }
                    other => {
                        return Err(format!(
                            "unknown subcommand `{other}` (expected micro, random-actions, \
                             efficiency, replay or device)"
                        ))
                    }
                }
            }
            Value(v) if args.command.as_deref() == Some("replay") => args.traces.push(v.into()),
            Value(v) if args.command.as_deref() == Some("device") && args.traces.is_empty() => {
                args.traces.push(v.into())
            }
            other => return Err(other.unexpected().to_string()),
        }
    }
    Ok(Some(args))
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
/// `../shared/traces`, else (and always with `--quick`) the bundled `tests/data` traces.
fn trace_set(args: &Args, mode: Mode) -> Result<TraceSet, Failure> {
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
                let paths = list(&dir)?;
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
                format!("{} holds no traces", dir.display())
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

/// The trace `device` replays, and where it came from: the one named, else the PyTorch trace
/// of the shared collection (an error if it is missing), or, with `--quick`, a synthetic
/// three-stream trace that needs no file.
fn device_trace(args: &Args, mode: Mode) -> Result<(trace::Trace, String), Failure> {
    if let Some(path) = args.traces.first() {
        let t = trace::Trace::load(path).map_err(|e| Failure::Input(e.to_string()))?;
        return Ok((t, format!("{} (named on the command line)", path.display())));
    }
    if mode == Mode::Quick {
        let t = tagalloc_tests::device_replay::synthetic_trace(3000, 3, 50, 1);
        let origin = format!(
            "{}, generated (--quick: 3000 events on 3 streams, no file needed)",
            t.name
        );
        return Ok((t, origin));
    }
    let path = trace::shared_trace("torch-cs336.trace.gz").map_err(|e| {
        Failure::Input(format!(
            "{e} (name a device trace: tagalloc-bench device TRACE, or use --quick)"
        ))
    })?;
    let t = trace::Trace::load(&path).map_err(|e| Failure::Input(e.to_string()))?;
    Ok((t, format!("{} (the shared collection)", path.display())))
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
    let pick = |full: usize, suite: usize, quick: usize| {
        args.runs.unwrap_or(match mode {
            Mode::Full => full,
            Mode::Suite => suite,
            Mode::Quick => quick,
        })
    };
    let plots = if args.plots {
        let dir = args.out.clone().unwrap_or_else(default_out);
        std::fs::create_dir_all(&dir)
            .map_err(|e| Failure::Run(format!("cannot create {}: {e}", dir.display())))?;
        Some(std::fs::canonicalize(&dir).unwrap_or(dir))
    } else {
        None
    };
    let run_err = Failure::Run;

    // Traces first, so that a bad one stops the tool before any long measurement.
    let device_trace = if args.command.as_deref() == Some("device") {
        Some(device_trace(args, mode)?)
    } else {
        None
    };
    let mut prepared = Vec::new();
    let mut traces = None;
    if wants("replay") {
        let set = trace_set(args, mode)?;
        if set.paths.is_empty() {
            return Err(Failure::Input(format!(
                "no traces to replay in {}",
                set.origin
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
        };
        let bar = progress((opts.trials * 10 * random_actions::MAX_SIZES.len()) as u64);
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
        };
        let items: usize = prepared.len() * (opts.runs + 1) * 10;
        let bar = progress(items as u64);
        let mut md = format!(
            "## Trace replay\n\nEvery event of each trace through every allocator: one untimed \
             run for the footprint, then {} timed run(s), allocators interleaved; ns/event is \
             the median. Host allocators share one arena per trace (the bump reference gets \
             one as large as the trace's total requests); address allocators manage an address \
             range of the same size and touch no memory (a moving realloc copies nothing). \
             A run stops after {:.1} s (marked †). Single-threaded: `t=` fields are ignored. \
             {}\n",
            opts.runs,
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

    if let Some((trace, origin)) = &device_trace {
        eprintln!("tagalloc-bench: device: replaying {origin}");
        let opts = device::Options {
            runs: pick(15, 15, 1),
        };
        let bar = progress((3 * (opts.runs + 1)) as u64);
        let (md, json) = device::run(trace, &opts, &bar).map_err(run_err)?;
        bar.finish_and_clear();
        emit(
            format!("**Device trace replayed:** {origin}.\n\n{md}"),
            "device",
            json,
        );
    }

    if let Some(dir) = &plots {
        out_json.insert("plots_dir".into(), json!(dir.display().to_string()));
    }
    if args.json {
        let text = serde_json::to_string_pretty(&Value::Object(out_json))
            .map_err(|e| Failure::Run(e.to_string()))?;
        println!("{text}");
    } else if let Some(dir) = &plots {
        println!("Charts: {}", dir.display());
    }
    eprintln!("finished in {:.1} s", started.elapsed().as_secs_f64());
    Ok(())
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(Some(args)) => args,
        Ok(None) => {
            print!("{HELP}");
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
