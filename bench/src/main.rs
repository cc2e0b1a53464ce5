//! Benchmarks of tagalloc against peer allocators, all driven through one trait
//! (`subjects::Subject`) so that each benchmark is written once:
//!
//! - `micro`: alloc+free of small random sizes in steady state;
//! - `random-actions`: talc's published speed benchmark, so that figures line up with talc's;
//! - `efficiency`: talc's heap-efficiency benchmark (how full a heap gets before a failure);
//! - `replay [TRACE...]`: recorded allocation traces replayed through every allocator, with
//!   time per event and peak footprint against the trace's peak live bytes.
//! - `plan [CSV...]`: static memory planning (`tagalloc::plan`) on problems with known
//!   lifetimes: lower bound, greedy and exact-search arenas, proof of optimality, time.
//! - `plan-trace [TRACE...]`: a trace's lifetimes planned offline against tagalloc's dynamic
//!   footprint on the same events. Neither planning command is part of the default suite.
//!
//! With no subcommand a default suite runs all four, shortened to finish in under two minutes.
//! Results are markdown tables on stdout (`--json` for machines), SVG charts under
//! `target/tagalloc-bench/`, and a progress bar on stderr when it is a terminal.
//!
//! Run: `cargo run --release -p tagalloc-bench [-- SUBCOMMAND] [OPTIONS]`

mod bump;
mod efficiency;
mod micro;
mod plan;
mod plan_trace;
mod plot;
mod random_actions;
mod replay;
mod report;
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

SUBCOMMANDS (none: the default suite, all four shortened, under two minutes):
    micro               alloc+free of random 8..=512-byte blocks, 1000 live
    random-actions      talc's random-actions benchmark (7 trials x 200 ms per size)
    efficiency          talc's heap-efficiency benchmark (300 rounds)
    replay [TRACE...]   replay allocation traces (files or directories; default: every
                        trace in ../shared/traces, else the bundled tests/data traces)
    plan [CSV...]       static memory planning problems (files or directories; default:
                        ../shared/plans/*.csv, else the bundled bench/data/plans); not in
                        the default suite
    plan-trace [TRACE...]
                        plan a trace's lifetimes offline and compare with tagalloc's
                        dynamic footprint on the same events (traces as for replay); not
                        in the default suite

OPTIONS:
    --quick             a seconds-long smoke run: tiny durations, few rounds, the bundled
                        traces only (their first 20,000 events)
    --json              print the results as JSON instead of markdown tables
    --runs N            repetitions: micro and replay runs, random-actions trials,
                        efficiency rounds
    --budget SECONDS    replay: stop one allocator's run on one trace after this long;
                        plan, plan-trace: time for the exact search on each problem
                        (default 10)
    --events N          plan-trace: events used from the start of each trace
                        (default 50000)
    --out DIR           where the SVG charts go (default: target/tagalloc-bench)
    --no-plots          write no charts
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
            Short('h') | Long("help") => return Ok(None),
            Value(v) if args.command.is_none() => {
                let name = v.string().map_err(e)?;
                match name.as_str() {
                    "micro" | "random-actions" | "efficiency" | "replay" | "plan"
                    | "plan-trace" => args.command = Some(name),
                    other => {
                        return Err(format!(
                            "unknown subcommand `{other}` (expected micro, random-actions, \
                             efficiency, replay, plan or plan-trace)"
                        ))
                    }
                }
            }
            Value(v) if matches!(args.command.as_deref(), Some("replay" | "plan-trace")) => {
                args.traces.push(v.into())
            }
            Value(v) if args.command.as_deref() == Some("plan") => args.problems.push(v.into()),
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

/// The trace files to replay: those named (directories expanded), or the default collection.
fn trace_paths(args: &Args, mode: Mode) -> Result<Vec<PathBuf>, Failure> {
    let list = |dir: &Path| {
        trace::trace_files(dir)
            .map_err(|e| Failure::Input(format!("cannot list traces in {}: {e}", dir.display())))
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
        return Ok(paths);
    }
    if mode != Mode::Quick {
        if let Some(dir) = trace::shared_traces_dir() {
            let files = list(&dir)?;
            if !files.is_empty() {
                return Ok(files);
            }
        }
    }
    list(&trace::bundled_traces_dir())
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
    // Planning is a different job from the allocator benchmarks: only when asked for.
    let wants_only = |name: &str| args.command.as_deref() == Some(name);
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
    let mut prepared = Vec::new();
    if wants("replay") {
        let paths = trace_paths(args, mode)?;
        if paths.is_empty() {
            return Err(Failure::Input("no traces to replay".into()));
        }
        let max_events = (mode == Mode::Quick).then_some(20_000);
        let bar = progress(paths.len() as u64);
        for p in &paths {
            bar.set_message(format!("loading {}", p.display()));
            prepared.push(replay::load(p, max_events).map_err(Failure::Input)?);
            bar.inc(1);
        }
        bar.finish_and_clear();
    }
    let mut trace_problems = Vec::new();
    let plan_events = args
        .events
        .unwrap_or(if mode == Mode::Quick { 5_000 } else { 50_000 });
    if wants_only("plan-trace") {
        let paths = trace_paths(args, mode)?;
        if paths.is_empty() {
            return Err(Failure::Input("no traces to plan".into()));
        }
        for p in &paths {
            trace_problems.push(plan_trace::load(p, plan_events).map_err(Failure::Input)?);
        }
    }
    let mut problems = Vec::new();
    if wants_only("plan") {
        let paths = problem_paths(args, mode)?;
        if paths.is_empty() {
            return Err(Failure::Input("no planning problems to solve".into()));
        }
        for p in &paths {
            problems.push(plan::load(p).map_err(Failure::Input)?);
        }
    }

    let mut out_json = serde_json::Map::new();
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

    if wants_only("plan") {
        let opts = plan::Options {
            budget: Duration::from_secs_f64(args.budget.unwrap_or(match mode {
                Mode::Quick => 0.2,
                _ => 10.0,
            })),
        };
        let bar = progress(problems.len() as u64);
        let (md, json) = plan::run(&problems, &opts, &bar).map_err(run_err)?;
        bar.finish_and_clear();
        emit(md, "plan", json);
    }

    if wants_only("plan-trace") {
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
