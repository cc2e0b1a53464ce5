//! The inputs a subcommand runs on when the command line names none, and where they come
//! from: the shared collections beside the repository (`../shared/traces`,
//! `../shared/plans`), else the small sets bundled with the checkout the tool was built from.
//! Every path here is absolute (found from that checkout, `CARGO_MANIFEST_DIR`), so the tool
//! runs from any directory, installed or not; only the paths named on the command line are
//! taken from the working directory.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use tagalloc_tests::trace;

use crate::cli::Mode;
use crate::plan;

/// The checkout the tool was built from, where its bundled inputs and the programs' workloads
/// are, or why it cannot be used: an installed tool whose clone was moved or removed.
pub fn checkout() -> Result<&'static Path, String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    if dir.is_dir() {
        Ok(dir)
    } else {
        Err(format!(
            "the checkout this tool was built from, {}, is gone, and with it the bundled traces, \
             problems and workloads (name your own files, or install the tool again from a \
             clone: cargo install --locked --path bench)",
            dir.display()
        ))
    }
}

/// The traces a replay runs, and where they come from: said on stderr and in the output, so
/// that a run on the small bundled set is never taken for one on the shared collection.
pub struct TraceSet {
    pub paths: Vec<PathBuf>,
    /// One line for the report: which set, from where, and why.
    pub origin: String,
    /// The same, for JSON.
    pub json: Value,
    /// The shared collection was wanted but not found: the run falls back to the bundled set.
    pub fallback: bool,
}

/// The trace files to replay: those named (directories expanded), or the default collection:
/// `../shared/traces` (only the traces called `wanted`, if given), else (and always with
/// `--quick`) the bundled `tests/data` traces.
pub fn trace_set(
    named: &[PathBuf],
    mode: Mode,
    wanted: Option<&[&str]>,
) -> Result<TraceSet, String> {
    let list = |dir: &Path| {
        trace::trace_files(dir).map_err(|e| format!("cannot list traces in {}: {e}", dir.display()))
    };
    let names = |paths: &[PathBuf]| {
        paths
            .iter()
            .map(|p| trace::trace_name(p))
            .collect::<Vec<_>>()
            .join(", ")
    };
    if !named.is_empty() {
        let mut paths = Vec::new();
        for p in named {
            if p.is_dir() {
                paths.extend(list(p)?);
            } else if p.is_file() {
                paths.push(p.clone());
            } else {
                return Err(format!(
                    "cannot read trace {}: no such file or directory",
                    p.display()
                ));
            }
        }
        let shown: Vec<String> = named.iter().map(|p| p.display().to_string()).collect();
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
    checkout()?;
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
pub fn device_traces(
    named: Option<&Path>,
    all_multistream: bool,
    mode: Mode,
) -> Result<Vec<(trace::Trace, String)>, String> {
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
    let shared = |file: &str| -> Result<(trace::Trace, String), String> {
        let path = trace::shared_trace(file).map_err(|e| {
            format!("{e} (name a device trace: tagalloc-bench device TRACE, or use --quick)")
        })?;
        let t = trace::Trace::load(&path).map_err(|e| e.to_string())?;
        Ok((t, format!("{} (the shared collection)", path.display())))
    };
    if all_multistream {
        let mut v = vec![if quick {
            synthetic()
        } else {
            shared("torch-multistream.trace.gz")?
        }];
        v.extend(Pattern::ALL.map(pattern));
        return Ok(v);
    }
    if let Some(path) = named {
        if let Some(p) = path.to_str().and_then(Pattern::named) {
            return Ok(vec![pattern(p)]);
        }
        let t = trace::Trace::load(path).map_err(|e| e.to_string())?;
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
pub fn problem_paths(named: &[PathBuf], mode: Mode) -> Result<Vec<PathBuf>, String> {
    if !named.is_empty() {
        let mut paths = Vec::new();
        for p in named {
            if p.is_dir() {
                paths.extend(plan::csv_files(p)?);
            } else if p.is_file() {
                paths.push(p.clone());
            } else {
                return Err(format!(
                    "cannot read problem {}: no such file or directory",
                    p.display()
                ));
            }
        }
        return Ok(paths);
    }
    if mode != Mode::Quick {
        if let Some(dir) = plan::shared_dir() {
            let files = plan::csv_files(&dir)?;
            if !files.is_empty() {
                return Ok(files);
            }
        }
    }
    checkout()?;
    plan::csv_files(&plan::bundled_dir())
}
