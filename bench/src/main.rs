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
//! Run: `cargo run --release -p tagalloc-bench [-- SUBCOMMAND] [OPTIONS]`, or install it with
//! `cargo install --locked --path bench` and run `tagalloc-bench` from any directory.
//! `tagalloc-bench SUBCOMMAND --help` says what each one takes. The subcommands are one table
//! (`SUBCOMMANDS`); each benchmark module owns its options and their defaults
//! (`OPTIONS`, `Options::new`, `Options::set`), and this file only parses and dispatches.

use tagalloc_bench::{
    cli::{self, Mode, Opt},
    cold, device, efficiency, inputs,
    inputs::TraceSet,
    machine::{load_average, Machine},
    micro, plan, plan_constrained, plan_trace, pool, programs, random_actions, replay, snapshot,
    threads,
};

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{json, Value};
use tagalloc_tests::trace;

/// One subcommand: what the global help lists, what its own help says, the options it takes,
/// and the function that runs it.
struct Subcommand {
    /// Empty for the default suite (no subcommand).
    name: &'static str,
    /// One line for the global help.
    summary: &'static str,
    /// Its arguments, as its usage line shows them after the name.
    usage: &'static str,
    /// What it does, for its own help.
    about: &'static str,
    /// Each argument and what it means.
    arguments: &'static [(&'static str, &'static str)],
    /// The options of its module; `--quick`, `--json`, `--out` and `--no-plots` come from
    /// [`Writes`].
    options: &'static [Opt],
    /// What it writes besides its tables, which decides what `--out` means for it.
    writes: Writes,
    /// A last paragraph for its help (`plan`: the problems' format).
    notes: Option<&'static str>,
    run: fn(&Call) -> Result<(), Failure>,
}

/// What a subcommand writes besides its tables: what `--out` names for it, and whether
/// `--no-plots` means anything.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Writes {
    /// SVG charts, into a directory.
    Charts,
    /// One SVG picture: a directory for it, or its file.
    Picture,
    /// Plans (`plan`): a directory for `NAME.plan.csv`, or one `.csv` file; no charts.
    Plans,
    /// Nothing: it takes neither `--out` nor `--no-plots`.
    Nothing,
}

/// The options every subcommand takes.
const QUICK: Opt = Opt {
    name: "quick",
    value: None,
    help: "a seconds-long smoke run: tiny durations, few rounds, the bundled inputs only \
           (traces: their first 20,000 events); its figures mean nothing",
};
const JSON: Opt = Opt {
    name: "json",
    value: None,
    help: "print the results as JSON instead of markdown tables",
};
const NO_PLOTS: Opt = Opt {
    name: "no-plots",
    value: None,
    help: "write no charts",
};
const OUT_CHARTS: Opt = Opt {
    name: "out",
    value: Some("DIR"),
    help: "the directory the SVG charts go to, made if missing (default: target/tagalloc-bench \
           in the checkout this tool was built from, or $CARGO_TARGET_DIR/tagalloc-bench)",
};
const OUT_PICTURE: Opt = Opt {
    name: "out",
    value: Some("DIR|FILE.svg"),
    help: "the .svg file to write, or a directory for snapshot-NAME-EVENT.svg (default: the \
           charts' directory, target/tagalloc-bench)",
};
const OUT_PLANS: Opt = Opt {
    name: "out",
    value: Some("DIR|FILE.csv"),
    help: "write the plans: a directory for NAME.plan.csv of each problem, or the .csv file of \
           one problem's plan (id,offset lines, then # arena BYTES; default: none written)",
};

/// The options the default suite takes besides the common ones: each applies to the parts
/// whose module takes it.
const SUITE_OPTIONS: &[Opt] = &[
    Opt {
        name: "runs",
        value: Some("N"),
        help: "repetitions of every part: micro and replay runs, random-actions trials, \
               efficiency rounds (default 5, 3, 3 and 30; --quick: 2, 1, 1 and 2)",
    },
    Opt {
        name: "budget",
        value: Some("SECONDS"),
        help: "replay: stop one allocator's run on one trace after this long (default 1.5; 1 \
               with --quick)",
    },
];

const TRACES: (&str, &str) = (
    "TRACE...",
    "trace files or directories of them (default: every trace in ../shared/traces beside \
     the repository, else the bundled tests/data traces, with a warning)",
);

/// The default suite: no subcommand.
const SUITE: Subcommand = Subcommand {
    name: "",
    summary: "",
    usage: "",
    about: "the default suite: micro, random-actions, efficiency and replay, shortened (fewer \
            steps, trials, rounds and runs; a 1.5 s cap per replay run), about a minute",
    arguments: &[],
    options: SUITE_OPTIONS,
    writes: Writes::Charts,
    notes: None,
    run: run_suite,
};

/// Every subcommand, in the order the help lists them.
const SUBCOMMANDS: &[Subcommand] = &[
    Subcommand {
        name: "micro",
        summary: "alloc+free of random 8..=512-byte blocks, 1000 live",
        usage: "",
        about: "alloc+free of random 8..=512-byte blocks with 1000 live, every allocator: the \
                cost of the two calls in steady state",
        arguments: &[],
        options: micro::OPTIONS,
        writes: Writes::Charts,
        notes: None,
        run: run_micro,
    },
    Subcommand {
        name: "random-actions",
        summary: "talc's random-actions benchmark (7 trials x 200 ms per size)",
        usage: "",
        about: "talc's random-actions speed benchmark: successful alloc, free and realloc \
                calls in 200 ms with at least 300 blocks live, for maximum sizes 200 B to \
                30,000 B, in talc's units",
        arguments: &[],
        options: random_actions::OPTIONS,
        writes: Writes::Charts,
        notes: None,
        run: run_random_actions,
    },
    Subcommand {
        name: "efficiency",
        summary: "talc's heap-efficiency benchmark (300 rounds)",
        usage: "",
        about: "talc's heap-efficiency benchmark: the share of a 128 MiB heap in use at the \
                first failure",
        arguments: &[],
        options: efficiency::OPTIONS,
        writes: Writes::Charts,
        notes: None,
        run: run_efficiency,
    },
    Subcommand {
        name: "replay",
        summary: "replay allocation traces through every allocator",
        usage: "[TRACE...]",
        about: "allocation traces replayed through every allocator: ns per event, peak \
                footprint against the trace's peak live bytes, failures",
        arguments: &[TRACES],
        options: replay::OPTIONS,
        writes: Writes::Charts,
        notes: None,
        run: run_replay,
    },
    Subcommand {
        name: "pool",
        summary: "traces through tagalloc's pool under growth and trim policies",
        usage: "[TRACE...]",
        about: "traces replayed through tagalloc's pool under growth and trim policies: peak \
                reserved / peak live, what trimming gives back, ns/event over the bare heap",
        arguments: &[(
            "TRACE...",
            "trace files or directories of them (default: python-json, sqlite and \
             android-systemui from ../shared/traces, else the bundled traces, with a warning)",
        )],
        options: pool::OPTIONS,
        writes: Writes::Nothing,
        notes: None,
        run: run_pool,
    },
    Subcommand {
        name: "snapshot",
        summary: "one moment of a trace's pool drawn as an SVG",
        usage: "TRACE",
        about: "a trace replayed through a pool up to --at, and its heap drawn as an SVG with \
                its figures: regions, chunks in use and free, fragmentation",
        arguments: &[("TRACE", "the trace file (exactly one)")],
        options: snapshot::OPTIONS,
        writes: Writes::Picture,
        notes: None,
        run: run_snapshot,
    },
    Subcommand {
        name: "plan",
        summary: "static memory planning problems (.csv, .json); not in the default suite",
        usage: "[PROBLEM...]",
        about: "static memory planning (tagalloc::plan): lower bound, greedy and exact-search \
                arenas, proof of optimality, time; problems with aliases, groups, graphs, pins \
                or spaces against TensorFlow Lite's and MindSpore SOMAS's planners",
        arguments: &[(
            "PROBLEM...",
            ".csv (intervals) or .json (aliases, groups, graphs with streams, pins, spaces: \
             docs/plan-format.md) files, or directories of them (default: \
             ../shared/plans/*.csv beside the repository, else the bundled bench/data/plans)",
        )],
        options: plan::OPTIONS,
        writes: Writes::Plans,
        notes: Some(plan::FORMAT),
        run: run_plan,
    },
    Subcommand {
        name: "plan-trace",
        summary: "a trace's lifetimes planned offline against tagalloc's footprint",
        usage: "[TRACE...]",
        about: "each trace's first events as a planning problem, planned offline, against \
                tagalloc's dynamic footprint on the same events",
        arguments: &[TRACES],
        options: plan_trace::OPTIONS,
        writes: Writes::Nothing,
        notes: None,
        run: run_plan_trace,
    },
    Subcommand {
        name: "threads",
        summary: "1 to 8 threads on one shared allocator: operations per second",
        usage: "[N|ALLOCATOR...]",
        about: "1, 2, 4 and 8 threads allocating and freeing through one shared allocator \
                (tagalloc's GlobalHeap and HostAllocator, talc, rlsf, glibc), a quarter of the \
                frees handed to another thread: operations per second",
        arguments: &[(
            "N|ALLOCATOR...",
            "only these thread counts (1, 2, 4, 8) and allocators (their JSON keys, such as \
             talc_spin), to profile one (default: all)",
        )],
        options: threads::OPTIONS,
        writes: Writes::Charts,
        notes: None,
        run: run_threads,
    },
    Subcommand {
        name: "device",
        summary: "a device trace through tagalloc's device pool and PyTorch's model",
        usage: "[TRACE|pipeline|prefetch|buckets]",
        about: "a device trace through tagalloc's stream-ordered device pool (plain and VMM \
                regions) and a model of PyTorch's caching allocator, on the fake CUDA driver \
                with a modelled device clock: memory, driver calls, modelled run time and host \
                stall against an allocator that never waits, at device speeds 0.5x, 1x and 2x",
        arguments: &[(
            "TRACE|pipeline|prefetch|buckets",
            "a device trace file, or a generated multi-stream pattern (default: \
             ../shared/traces/torch-cs336.trace.gz; with --quick a generated 3-stream trace)",
        )],
        options: device::OPTIONS,
        writes: Writes::Nothing,
        notes: None,
        run: run_device,
    },
    Subcommand {
        name: "programs",
        summary: "real programs with each malloc preloaded: time, peak memory (minutes)",
        usage: "",
        about: "real programs (CPython, perl, sqlite3, git, g++) with glibc, jemalloc, \
                mimalloc, tcmalloc and tagalloc preloaded: wall time and peak resident memory \
                (a few minutes); missing programs and peers are skipped, or peers installed \
                with --install. Needs the checkout this tool was built from (its workloads, \
                and cargo to build the library unless --lib is given)",
        arguments: &[],
        options: programs::OPTIONS,
        writes: Writes::Charts,
        notes: None,
        run: run_programs,
    },
];

impl Subcommand {
    fn named(name: &str) -> Option<&'static Subcommand> {
        SUBCOMMANDS.iter().find(|s| s.name == name)
    }

    /// `tagalloc-bench` or `tagalloc-bench NAME`, as messages and help name it.
    fn title(&self) -> String {
        if self.name.is_empty() {
            "tagalloc-bench".into()
        } else {
            format!("tagalloc-bench {}", self.name)
        }
    }

    /// Every option it takes, its module's first.
    fn all_options(&self) -> Vec<Opt> {
        let mut all = self.options.to_vec();
        all.extend([QUICK, JSON]);
        match self.writes {
            Writes::Charts => all.extend([OUT_CHARTS, NO_PLOTS]),
            Writes::Picture => all.extend([OUT_PICTURE, NO_PLOTS]),
            Writes::Plans => all.push(OUT_PLANS),
            Writes::Nothing => {}
        }
        all
    }

    /// Its help: what it does, its usage, its arguments and its options with their defaults.
    fn help(&self) -> String {
        let mut s = cli::wrap(&format!("{}: {}", self.title(), self.about), 0);
        s.push_str("\nUSAGE:\n");
        let usage = format!("{} [OPTIONS] {}", self.title(), self.usage);
        s.push_str(&format!("    {}\n", usage.trim_end()));
        if !self.arguments.is_empty() {
            s.push_str("\nARGUMENTS:\n");
            for (name, help) in self.arguments {
                s.push_str(&cli::columns(name, help));
            }
        }
        s.push_str("\nOPTIONS:\n");
        s.push_str(&cli::describe(&self.all_options()));
        s.push_str(&cli::columns("-h, --help", "this text"));
        if let Some(notes) = self.notes {
            s.push_str(&format!(
                "\n{}:\n",
                self.usage.trim_matches(['[', ']', '.'])
            ));
            s.push_str(&cli::wrap(
                &format!(
                    "{notes}; a plan written with --out has the lines `id,offset` and ends \
                     with `# arena BYTES`."
                ),
                4,
            ));
        }
        s
    }
}

/// The global help: the suite's usage, one line a subcommand, the suite's options.
fn global_help() -> String {
    let mut s = String::from(
        "tagalloc-bench: tagalloc against peer allocators\n\nUSAGE:\n    \
         tagalloc-bench [OPTIONS]                    the default suite (about a minute)\n    \
         tagalloc-bench SUBCOMMAND [OPTIONS] [ARGS]  one benchmark at full length\n    \
         tagalloc-bench SUBCOMMAND --help            what it does, its arguments and options\n\n\
         SUBCOMMANDS:\n",
    );
    for c in SUBCOMMANDS {
        s.push_str(&cli::columns(c.name, c.summary));
    }
    s.push('\n');
    s.push_str(&cli::wrap(
        &format!("With no subcommand, {}.", SUITE.about),
        0,
    ));
    s.push_str("\nOPTIONS (of the default suite; each subcommand's are in its --help):\n");
    s.push_str(&cli::describe(&SUITE.all_options()));
    s.push_str(&cli::columns("-h, --help", "this text"));
    s
}

/// What the command line asked for, its options checked against the subcommand's.
struct Call {
    command: &'static Subcommand,
    mode: Mode,
    json: bool,
    plots: bool,
    out: Option<PathBuf>,
    /// The words after the subcommand's name.
    args: Vec<OsString>,
    /// The options of the subcommand's module, with their values (empty for a flag).
    given: Vec<(&'static str, OsString)>,
    started: Instant,
}

/// Why the tool stopped: a usage error (exit status 2, and where the usage is), bad input (2)
/// or a failure while running (1).
enum Failure {
    Usage(String),
    Input(String),
    Run(String),
}

/// What `main` does: run a call, or print a help.
enum Parsed {
    Run(Call),
    Help(String),
}

/// Takes the command line apart: the subcommand, then each option checked against those it
/// takes. A usage error names the subcommand (with the suite, none).
fn parse(args: Vec<OsString>) -> Result<Parsed, (&'static Subcommand, String)> {
    let mut known: Vec<Opt> = SUITE.all_options();
    for c in SUBCOMMANDS {
        for o in c.all_options() {
            if !known.iter().any(|k| k.name == o.name) {
                known.push(o);
            }
        }
    }
    // The subcommand, if the first word names one, for the messages of a line refused early.
    let first = |words: &[OsString]| {
        words
            .first()
            .and_then(|w| w.to_str())
            .and_then(Subcommand::named)
    };
    let lexed =
        cli::lex(args, &known).map_err(|(words, e)| (first(&words).unwrap_or(&SUITE), e))?;
    let command = match lexed.words.first() {
        None => &SUITE,
        Some(w) => match w.to_str().and_then(Subcommand::named) {
            Some(c) => c,
            None => {
                let names: Vec<&str> = SUBCOMMANDS.iter().map(|s| s.name).collect();
                return Err((
                    &SUITE,
                    format!(
                        "unknown subcommand {:?} (expected {})",
                        w.to_string_lossy(),
                        names.join(", ")
                    ),
                ));
            }
        },
    };
    if lexed.help {
        return Ok(Parsed::Help(if command.name.is_empty() {
            global_help()
        } else {
            command.help()
        }));
    }
    let refuse = |e: String| Err((command, e));
    if let Some(option) = lexed.unknown {
        return refuse(if command.name.is_empty() {
            format!("{option} is not an option")
        } else {
            format!("{option} is not an option of {}", command.name)
        });
    }
    let takes = command.all_options();
    let mut call = Call {
        command,
        mode: if command.name.is_empty() {
            Mode::Suite
        } else {
            Mode::Full
        },
        json: false,
        plots: true,
        out: None,
        args: lexed.words.into_iter().skip(1).collect(),
        given: Vec::new(),
        started: Instant::now(),
    };
    for (name, value) in lexed.options {
        if !takes.iter().any(|o| o.name == name) {
            return refuse(not_taken(command, name));
        }
        match name {
            "quick" => call.mode = Mode::Quick,
            "json" => call.json = true,
            "no-plots" => call.plots = false,
            "out" => {
                let path = PathBuf::from(&value);
                if let Some(why) = out_refused(command.writes, &path) {
                    return refuse(format!("--out: {:?} {why}", value.to_string_lossy()));
                }
                call.out = Some(path);
            }
            _ => call.given.push((name, value)),
        }
    }
    Ok(Parsed::Run(call))
}

/// Why `--NAME` is refused by `command`, which does not take it: which subcommands do.
fn not_taken(command: &Subcommand, name: &str) -> String {
    let what = if command.name.is_empty() {
        "the default suite".to_string()
    } else {
        command.name.to_string()
    };
    if matches!(name, "out" | "no-plots") && command.writes == Writes::Nothing {
        return format!("--{name} is not an option of {what}, which writes no files");
    }
    let takers: Vec<&str> = SUBCOMMANDS
        .iter()
        .filter(|c| c.options.iter().any(|o| o.name == name))
        .map(|c| c.name)
        .collect();
    let takers = match takers.as_slice() {
        [one] => format!("the {one} subcommand"),
        [init @ .., last] => format!("the {} and {last} subcommands", init.join(", ")),
        [] => "no subcommand".to_string(),
    };
    format!("--{name} belongs to {takers}, not to {what}")
}

/// What an `--out` path names.
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

/// Why `path` cannot be the `--out` of a subcommand that writes `writes`, in the words of what
/// it writes; `None` if it can.
fn out_refused(writes: Writes, path: &Path) -> Option<&'static str> {
    match (writes, out_kind(path)) {
        (_, Out::Dir) | (Writes::Picture, Out::Svg) | (Writes::Plans, Out::Csv) => None,
        (Writes::Picture, _) => Some(
            "is neither a directory nor an .svg file (expected where the picture goes: a \
             directory, or FILE.svg; `rsvg-convert -o snap.png snap.svg` makes a PNG of it)",
        ),
        (Writes::Plans, _) => Some(
            "is neither a directory nor a .csv file (expected a directory for NAME.plan.csv \
             of each problem, or the .csv file of one problem's plan)",
        ),
        (Writes::Charts | Writes::Nothing, _) => Some(
            "is not a directory (expected the directory the SVG charts go to, made if missing)",
        ),
    }
}

impl Call {
    /// Hands each option of `options` given on the command line to `set`; a refused value
    /// becomes a usage error naming the option and the value.
    fn configure(
        &self,
        options: &[Opt],
        mut set: impl FnMut(&str, &OsStr) -> Result<(), String>,
    ) -> Result<(), Failure> {
        for (name, value) in &self.given {
            if options.iter().any(|o| o.name == *name) {
                set(name, value).map_err(|why| {
                    Failure::Usage(format!("--{name}: {:?} {why}", value.to_string_lossy()))
                })?;
            }
        }
        Ok(())
    }

    /// Refuses any word after the subcommand's name.
    fn no_args(&self) -> Result<(), Failure> {
        match self.args.first() {
            None => Ok(()),
            Some(w) => Err(Failure::Usage(format!(
                "takes no arguments, and was given {:?}",
                w.to_string_lossy()
            ))),
        }
    }

    fn paths(&self) -> Vec<PathBuf> {
        self.args.iter().map(PathBuf::from).collect()
    }

    /// The directory the charts go to, made now; `None` with `--no-plots`.
    fn plots(&self) -> Result<Option<PathBuf>, Failure> {
        if !self.plots {
            return Ok(None);
        }
        let dir = match &self.out {
            Some(file) if out_kind(file) == Out::Svg => file
                .parent()
                .filter(|d| !d.as_os_str().is_empty())
                .map_or_else(|| PathBuf::from("."), Path::to_path_buf),
            out => out.clone().unwrap_or_else(default_out),
        };
        std::fs::create_dir_all(&dir)
            .map_err(|e| Failure::Run(format!("cannot create {}: {e}", dir.display())))?;
        Ok(Some(std::fs::canonicalize(&dir).unwrap_or(dir)))
    }
}

/// The results as they come: markdown on stdout, or one JSON document at the end.
struct Report {
    json: bool,
    out: serde_json::Map<String, Value>,
    machine: Machine,
    started: Instant,
}

impl Report {
    /// Prints the heading: the run's kind, the machine, the traces replayed.
    fn start(call: &Call, traces: Option<&TraceSet>) -> Report {
        let machine = Machine::at_start();
        let mut out = serde_json::Map::new();
        if let Some(set) = traces {
            out.insert("traces".into(), set.json.clone());
        }
        if !call.json {
            println!(
                "# tagalloc-bench{}\n",
                match call.mode {
                    Mode::Full => "",
                    Mode::Suite => " (default suite)",
                    Mode::Quick => " (--quick smoke run: figures are not meaningful)",
                }
            );
            println!("**Machine:** {}.\n", machine.describe());
            if let Some(set) = traces {
                let warning = if set.fallback { "WARNING: " } else { "" };
                println!("**{warning}Traces replayed:** {}.\n", set.origin);
            }
        }
        Report {
            json: call.json,
            out,
            machine,
            started: call.started,
        }
    }

    fn emit(&mut self, md: String, key: &str, json: Value) {
        if !self.json {
            println!("{md}");
        }
        self.out.insert(key.to_string(), json);
    }

    /// The end: where the charts went (`charts`: the subcommand draws some), the machine's
    /// load, the JSON document.
    fn finish(mut self, charts: Option<&Path>) -> Result<(), Failure> {
        if let Some(dir) = charts {
            self.out
                .insert("plots_dir".into(), json!(dir.display().to_string()));
        }
        self.out.insert("machine".into(), self.machine.json());
        if self.json {
            let text = serde_json::to_string_pretty(&Value::Object(self.out))
                .map_err(|e| Failure::Run(e.to_string()))?;
            println!("{text}");
        } else if let Some(dir) = charts {
            // `pool` and planning write tables only; `snapshot` names its picture in its section.
            println!("Charts: {}", dir.display());
        }
        if !self.json {
            println!(
                "Load average (1, 5, 15 min) at the end: {}.",
                load_average()
            );
        }
        eprintln!("finished in {:.1} s", self.started.elapsed().as_secs_f64());
        Ok(())
    }
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

/// The charts' directory when `--out` names none: `$CARGO_TARGET_DIR/tagalloc-bench`, else
/// `target/tagalloc-bench` in the checkout the tool was built from, wherever it runs.
fn default_out() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"));
    target.join("tagalloc-bench")
}

/// The traces `replay`, `pool` and `snapshot` run on (`wanted`: the names taken from the shared
/// collection), loaded (with `--quick`, their first 20,000 events).
fn load_traces(
    call: &Call,
    wanted: Option<&[&str]>,
) -> Result<(TraceSet, Vec<replay::Prepared>), Failure> {
    let set = inputs::trace_set(&call.paths(), call.mode, wanted).map_err(Failure::Input)?;
    if set.paths.is_empty() {
        return Err(Failure::Input(format!(
            "no traces to replay in {}",
            set.origin
        )));
    }
    if call.command.name == "snapshot" && set.paths.len() != 1 {
        return Err(Failure::Input(format!(
            "snapshot takes one trace, and {} holds {}",
            call.args[0].to_string_lossy(),
            set.paths.len()
        )));
    }
    eprintln!(
        "tagalloc-bench: {}replaying {}",
        if set.fallback { "WARNING: " } else { "" },
        set.origin
    );
    let max_events = (call.mode == Mode::Quick).then_some(20_000);
    let bar = progress(set.paths.len() as u64);
    let mut prepared = Vec::new();
    for p in &set.paths {
        bar.set_message(format!("loading {}", p.display()));
        prepared.push(replay::load(p, max_events).map_err(Failure::Input)?);
        bar.inc(1);
    }
    bar.finish_and_clear();
    Ok((set, prepared))
}

/// A benchmark's run: its markdown and its JSON, or why it failed.
type Bench<O> = fn(&O, Option<&Path>, &ProgressBar) -> Result<(String, Value), String>;

/// One benchmark's section: its progress bar of `steps`, its run, its report under `key`.
fn part<O>(
    opts: &O,
    steps: usize,
    run: Bench<O>,
    key: &str,
    plots: Option<&Path>,
    report: &mut Report,
) -> Result<(), Failure> {
    let bar = progress(steps as u64);
    let (md, json) = run(opts, plots, &bar).map_err(Failure::Run)?;
    bar.finish_and_clear();
    report.emit(md, key, json);
    Ok(())
}

fn micro_part(
    opts: &micro::Options,
    plots: Option<&Path>,
    report: &mut Report,
) -> Result<(), Failure> {
    part(opts, opts.runs * 10, micro::run, "micro", plots, report)
}

fn random_actions_part(
    opts: &random_actions::Options,
    plots: Option<&Path>,
    report: &mut Report,
) -> Result<(), Failure> {
    let steps = opts.trials * 10 * opts.sizes.len();
    part(
        opts,
        steps,
        random_actions::run,
        "random_actions",
        plots,
        report,
    )
}

fn efficiency_part(
    opts: &efficiency::Options,
    plots: Option<&Path>,
    report: &mut Report,
) -> Result<(), Failure> {
    part(
        opts,
        opts.rounds * 9,
        efficiency::run,
        "efficiency",
        plots,
        report,
    )
}

fn replay_part(
    opts: &replay::Options,
    prepared: &[replay::Prepared],
    report: &mut Report,
) -> Result<(), Failure> {
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
    for p in prepared {
        let r = replay::run(p, opts, &bar).map_err(Failure::Run)?;
        md.push('\n');
        md.push_str(&r.markdown(opts.runs));
        traces.push(r.json());
    }
    bar.finish_and_clear();
    report.emit(md, "replay", Value::Array(traces));
    Ok(())
}

/// No subcommand: micro, random-actions, efficiency and replay, shortened.
fn run_suite(call: &Call) -> Result<(), Failure> {
    let mut micro_opts = micro::Options::new(call.mode);
    call.configure(micro::OPTIONS, |n, v| micro_opts.set(n, v))?;
    let mut ra_opts = random_actions::Options::new(call.mode);
    call.configure(random_actions::OPTIONS, |n, v| ra_opts.set(n, v))?;
    let mut eff_opts = efficiency::Options::new(call.mode);
    call.configure(efficiency::OPTIONS, |n, v| eff_opts.set(n, v))?;
    let mut replay_opts = replay::Options::new(call.mode);
    call.configure(replay::OPTIONS, |n, v| replay_opts.set(n, v))?;
    call.no_args()?;
    let plots = call.plots()?;
    replay_opts.plots = plots.clone();
    // Traces first, so that a bad one stops the tool before any long measurement.
    let (set, prepared) = load_traces(call, None)?;
    let mut report = Report::start(call, Some(&set));
    micro_part(&micro_opts, plots.as_deref(), &mut report)?;
    random_actions_part(&ra_opts, plots.as_deref(), &mut report)?;
    efficiency_part(&eff_opts, plots.as_deref(), &mut report)?;
    replay_part(&replay_opts, &prepared, &mut report)?;
    report.finish(plots.as_deref())
}

/// A benchmark of the default suite run alone: its options with their defaults, no arguments,
/// its section.
fn run_alone<O>(
    call: &Call,
    options: &[Opt],
    new: fn(Mode) -> O,
    set: fn(&mut O, &str, &OsStr) -> Result<(), String>,
    part: fn(&O, Option<&Path>, &mut Report) -> Result<(), Failure>,
) -> Result<(), Failure> {
    let mut opts = new(call.mode);
    call.configure(options, |n, v| set(&mut opts, n, v))?;
    call.no_args()?;
    let plots = call.plots()?;
    let mut report = Report::start(call, None);
    part(&opts, plots.as_deref(), &mut report)?;
    report.finish(plots.as_deref())
}

fn run_micro(call: &Call) -> Result<(), Failure> {
    use micro::{Options, OPTIONS};
    run_alone(call, OPTIONS, Options::new, Options::set, micro_part)
}

fn run_random_actions(call: &Call) -> Result<(), Failure> {
    use random_actions::{Options, OPTIONS};
    run_alone(
        call,
        OPTIONS,
        Options::new,
        Options::set,
        random_actions_part,
    )
}

fn run_efficiency(call: &Call) -> Result<(), Failure> {
    use efficiency::{Options, OPTIONS};
    run_alone(call, OPTIONS, Options::new, Options::set, efficiency_part)
}

fn run_replay(call: &Call) -> Result<(), Failure> {
    let mut opts = replay::Options::new(call.mode);
    call.configure(replay::OPTIONS, |n, v| opts.set(n, v))?;
    let plots = call.plots()?;
    opts.plots = plots.clone();
    let (set, prepared) = load_traces(call, None)?;
    let mut report = Report::start(call, Some(&set));
    replay_part(&opts, &prepared, &mut report)?;
    report.finish(plots.as_deref())
}

fn run_pool(call: &Call) -> Result<(), Failure> {
    let mut opts = pool::Options::new(call.mode);
    call.configure(pool::OPTIONS, |n, v| opts.set(n, v))?;
    let (set, prepared) = load_traces(call, Some(&pool::DEFAULT_TRACES[..]))?;
    let mut report = Report::start(call, Some(&set));
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
        let r = pool::run(p, &opts, &bar).map_err(Failure::Run)?;
        md.push('\n');
        md.push_str(&r.markdown());
        traces.push(r.json());
    }
    bar.finish_and_clear();
    report.emit(md, "pool", Value::Array(traces));
    report.finish(None)
}

fn run_snapshot(call: &Call) -> Result<(), Failure> {
    let mut opts = snapshot::Options::new();
    call.configure(snapshot::OPTIONS, |n, v| opts.set(n, v))?;
    if call.args.len() != 1 {
        return Err(Failure::Usage(format!(
            "takes exactly one trace file, and was given {}",
            call.args.len()
        )));
    }
    let plots = call.plots()?;
    let (set, prepared) = load_traces(call, None)?;
    let p = &prepared[0];
    let at = opts.at.resolve(p).map_err(Failure::Input)?;
    let svg = plots.as_ref().map(|dir| match &call.out {
        Some(file) if out_kind(file) == Out::Svg => dir.join(file.file_name().unwrap_or_default()),
        _ => dir.join(format!(
            "snapshot-{}-{}.svg",
            p.name,
            match opts.at {
                snapshot::At::Peak => "peak".to_string(),
                snapshot::At::Events(n) => n.to_string(),
            }
        )),
    });
    let mut report = Report::start(call, Some(&set));
    let s = snapshot::run(
        p,
        at,
        opts.at == snapshot::At::Peak,
        opts.growing,
        svg.as_deref(),
    )
    .map_err(Failure::Run)?;
    report.emit(s.markdown(), "snapshot", s.json());
    report.finish(plots.as_deref())
}

fn run_plan(call: &Call) -> Result<(), Failure> {
    let mut opts = plan::Options::new(call.mode);
    call.configure(plan::OPTIONS, |n, v| opts.set(n, v))?;
    opts.out = call.out.clone();
    // One plan's file: its directory is made, as a charts' directory would be.
    if let Some(dir) = opts
        .out
        .as_deref()
        .filter(|o| out_kind(o) == Out::Csv)
        .and_then(Path::parent)
        .filter(|d| !d.as_os_str().is_empty())
    {
        std::fs::create_dir_all(dir)
            .map_err(|e| Failure::Run(format!("cannot create {}: {e}", dir.display())))?;
    }
    let paths = inputs::problem_paths(&call.paths(), call.mode).map_err(Failure::Input)?;
    if paths.is_empty() {
        return Err(Failure::Input("no planning problems to solve".into()));
    }
    let mut problems = Vec::new();
    let mut constrained = Vec::new();
    for p in &paths {
        match plan::load_any(p).map_err(Failure::Input)? {
            plan::Input::Intervals(q) => problems.push(q),
            plan::Input::Constrained(q) => constrained.push(q),
        }
    }
    let mut report = Report::start(call, None);
    if !problems.is_empty() {
        let bar = progress(problems.len() as u64);
        let (md, json) = plan::run(&problems, &opts, &bar).map_err(Failure::Run)?;
        bar.finish_and_clear();
        report.emit(md, "plan", json);
    }
    if !constrained.is_empty() {
        let opts = plan_constrained::Options {
            budget: opts.budget,
            out: opts.out,
            orders: 4,
        };
        let bar = progress(constrained.len() as u64);
        let (md, json) = plan_constrained::run(&constrained, &opts, &bar).map_err(Failure::Run)?;
        bar.finish_and_clear();
        report.emit(md, "plan_constrained", json);
    }
    report.finish(None)
}

fn run_plan_trace(call: &Call) -> Result<(), Failure> {
    let mut opts = plan_trace::Options::new(call.mode);
    call.configure(plan_trace::OPTIONS, |n, v| opts.set(n, v))?;
    let set = inputs::trace_set(&call.paths(), call.mode, None).map_err(Failure::Input)?;
    if set.paths.is_empty() {
        return Err(Failure::Input("no traces to plan".into()));
    }
    eprintln!(
        "tagalloc-bench: {}planning {}",
        if set.fallback { "WARNING: " } else { "" },
        set.origin
    );
    let mut problems = Vec::new();
    for p in &set.paths {
        problems.push(plan_trace::load(p, opts.events).map_err(Failure::Input)?);
    }
    let mut report = Report::start(call, None);
    let bar = progress(problems.len() as u64);
    let (md, json) = plan_trace::run(&problems, &opts, &bar).map_err(Failure::Run)?;
    bar.finish_and_clear();
    report.emit(md, "plan_trace", json);
    report.finish(None)
}

fn run_threads(call: &Call) -> Result<(), Failure> {
    let mut opts = threads::Options::new(call.mode);
    call.configure(threads::OPTIONS, |n, v| opts.set(n, v))?;
    let words: Vec<String> = call
        .args
        .iter()
        .map(|w| w.to_string_lossy().into_owned())
        .collect();
    opts.only = threads::Selection::parse(&words).map_err(Failure::Usage)?;
    let plots = call.plots()?;
    let mut report = Report::start(call, None);
    let rounds = opts.runs + usize::from(opts.warmup);
    let bar = progress((rounds * opts.only.runs_per_round()) as u64);
    let (md, json) = threads::run(&opts, plots.as_deref(), &bar).map_err(Failure::Run)?;
    bar.finish_and_clear();
    report.emit(md, "threads", json);
    report.finish(plots.as_deref())
}

fn run_device(call: &Call) -> Result<(), Failure> {
    let mut opts = device::Options::new(call.mode);
    call.configure(device::OPTIONS, |n, v| opts.set(n, v))?;
    if opts.all_multistream && !call.args.is_empty() {
        return Err(Failure::Usage(
            "--all-multistream replays its own set of traces; name no trace".into(),
        ));
    }
    if call.args.len() > 1 {
        return Err(Failure::Usage(format!(
            "takes one trace or pattern, and was given {}",
            call.args.len()
        )));
    }
    let named = call.args.first().map(Path::new);
    let traces =
        inputs::device_traces(named, opts.all_multistream, call.mode).map_err(Failure::Input)?;
    let mut report = Report::start(call, None);
    for (_, origin) in &traces {
        eprintln!("tagalloc-bench: device: replaying {origin}");
    }
    let bar = progress(opts.steps(traces.len()));
    let replayed = traces
        .iter()
        .map(|(_, origin)| format!("- {origin}"))
        .collect::<Vec<_>>()
        .join("\n");
    let (md, json) = if opts.all_multistream {
        let all: Vec<&trace::Trace> = traces.iter().map(|(t, _)| t).collect();
        device::run_all(&all, &opts, &bar).map_err(Failure::Run)?
    } else {
        device::run(&traces[0].0, &opts, &bar).map_err(Failure::Run)?
    };
    bar.finish_and_clear();
    let heading = if traces.len() == 1 {
        format!("**Device trace replayed:** {}.", traces[0].1)
    } else {
        format!("**Device traces replayed:**\n\n{replayed}")
    };
    report.emit(format!("{heading}\n\n{md}"), "device", json);
    report.finish(None)
}

fn run_programs(call: &Call) -> Result<(), Failure> {
    let mut opts = programs::Options::new(call.mode);
    call.configure(programs::OPTIONS, |n, v| opts.set(n, v))?;
    call.no_args()?;
    // Its workloads, and the library it builds, are in the checkout.
    inputs::checkout().map_err(Failure::Input)?;
    let plots = call.plots()?;
    opts.plots = plots.clone();
    let mut report = Report::start(call, None);
    let bar = progress(0);
    let (md, json) = programs::run(&opts, &bar).map_err(Failure::Run)?;
    bar.finish_and_clear();
    report.emit(md, "programs", json);
    report.finish(plots.as_deref())
}

fn main() -> ExitCode {
    // A closed pipe (`| head`) ends the tool as it ends any filter, instead of a panic at the
    // next `print!` (Rust ignores SIGPIPE by default).
    // SAFETY: `signal` with `SIG_DFL` installs no handler; called before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    // Started by `programs` to run and measure one program (not for people: see
    // `programs::runner_main`).
    let raw: Vec<OsString> = std::env::args_os().collect();
    if raw.get(1).is_some_and(|a| a == programs::RUNNER) {
        return ExitCode::from(programs::runner_main(&raw[2..]));
    }
    let call = match parse(raw.into_iter().skip(1).collect()) {
        Ok(Parsed::Run(call)) => call,
        Ok(Parsed::Help(text)) => {
            print!("{text}");
            return ExitCode::SUCCESS;
        }
        Err((command, e)) => return usage_error(command, &e),
    };
    match (call.command.run)(&call) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Usage(e)) => usage_error(call.command, &e),
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

/// A usage error: one line naming the subcommand, then one saying where its usage is.
fn usage_error(command: &Subcommand, e: &str) -> ExitCode {
    let title = command.title();
    eprintln!("{title}: {e}\nsee `{title} --help`");
    ExitCode::from(2)
}
