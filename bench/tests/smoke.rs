//! Smoke runs of the benchmark tool: each subcommand with `--quick` must finish, succeed and
//! print its table. Timings are never checked: they mean nothing in a debug build on a shared
//! machine; what this guards is that every allocator and every path of the tool still runs.

use std::path::PathBuf;
use std::process::{Command, Output};

fn bench(args: &[&str]) -> Output {
    let out = out_dir(args);
    Command::new(env!("CARGO_BIN_EXE_tagalloc-bench"))
        .args(args)
        .arg("--out")
        .arg(&out)
        .output()
        .expect("the benchmark binary runs")
}

/// A chart directory per invocation, so that tests running in parallel do not share one.
fn out_dir(args: &[&str]) -> PathBuf {
    let name: String = args
        .iter()
        .map(|a| a.trim_start_matches('-'))
        .collect::<Vec<_>>()
        .join("-")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("smoke-{name}"))
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Runs `args` and checks success, a markdown table, and the charts it should have written.
fn smoke(args: &[&str], heading: &str, charts: &[&str]) {
    let out = bench(args);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{args:?} failed: {stderr}\n{stdout}");
    assert!(
        stdout.contains(heading),
        "{args:?}: no `{heading}` in\n{stdout}"
    );
    assert!(
        stdout.contains("| allocator |") && stdout.contains("| --- |"),
        "{args:?}: no table in\n{stdout}"
    );
    assert!(stdout.contains("| tagalloc inline |"), "{stdout}");
    assert!(
        !stdout.contains("error:"),
        "{args:?}: an allocator failed\n{stdout}"
    );
    for chart in charts {
        let path = out_dir(args).join(chart);
        let svg = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
        assert!(svg.contains("<svg"), "{path:?} is not an SVG");
        // The title may be wrapped anywhere in "(lower is better)".
        assert!(
            svg.contains("better"),
            "{path:?}: the title does not say which way is better"
        );
        assert!(
            svg.contains("tagalloc"),
            "{path:?}: no tagalloc in the chart"
        );
    }
}

#[test]
fn micro() {
    smoke(
        &["--quick", "micro"],
        "## alloc+free microbenchmark",
        &["micro.svg"],
    );
}

#[test]
fn random_actions() {
    smoke(
        &["--quick", "random-actions"],
        "## Random actions",
        &["random-actions.svg"],
    );
}

/// `--only` runs the allocators named and tagalloc's heap (every ratio is taken against it),
/// in random actions and in replay, and as JSON each row carries its key; an unknown key, or
/// `--only` where it means nothing, is refused before anything runs.
#[test]
fn only_the_allocators_named() {
    let keys = |json: &serde_json::Value| -> Vec<String> {
        json["results"]
            .as_array()
            .expect("results")
            .iter()
            .map(|r| r["key"].as_str().expect("key").to_string())
            .collect()
    };
    let out = bench_plain(&["--quick", "--json", "random-actions", "--only", "talc"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(keys(&json["random_actions"]), ["tagalloc_inline", "talc"]);
    let out = bench_plain(&["--quick", "--json", "replay", "--only", "dlmalloc,rlsf"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    for trace in json["replay"].as_array().expect("traces") {
        assert_eq!(keys(trace), ["tagalloc_inline", "rlsf", "dlmalloc"]);
    }
    refused(&[
        (
            &["--quick", "random-actions", "--only", "tlac"],
            "unknown allocator `tlac`",
        ),
        (
            &["--quick", "replay", "--only", "talc,"],
            "separated by commas",
        ),
        (&["--quick", "micro", "--only", "talc"], "--only belongs"),
    ]);
}

/// Runs each command line and checks that it is refused as bad input (exit status 2) with an
/// error that says `said`.
fn refused(cases: &[(&[&str], &str)]) {
    for &(args, said) in cases {
        let out = bench_plain(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(
            text(&out.stderr).contains(said),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
}

#[test]
fn only_the_sizes_named() {
    let out = bench_plain(&[
        "--quick",
        "--json",
        "random-actions",
        "--only",
        "talc",
        "--sizes",
        "100,4000",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let ra = &json["random_actions"];
    assert_eq!(ra["max_sizes"], serde_json::json!([100, 4000]));
    for r in ra["results"].as_array().expect("results") {
        let scores = r["scores_per_200ms"].as_array().expect("scores");
        assert_eq!(scores.len(), 2, "{r}");
        assert!(
            scores.iter().all(|s| s.as_f64().is_some_and(|s| s > 0.0)),
            "{r}"
        );
    }
    refused(&[
        (
            &["--quick", "random-actions", "--sizes", "16"],
            "outside 17..=100000",
        ),
        (
            &["--quick", "random-actions", "--sizes", "200,x"],
            "not `x`",
        ),
        (
            &["--quick", "random-actions", "--sizes", "200,200"],
            "named twice",
        ),
        (&["--quick", "replay", "--sizes", "200"], "--sizes belongs"),
    ]);
}

#[test]
fn efficiency() {
    smoke(
        &["--quick", "efficiency"],
        "## Heap efficiency",
        &["efficiency.svg"],
    );
}

#[test]
fn replay() {
    smoke(
        &["--quick", "replay"],
        "## Trace replay",
        &[
            "replay-python-dicts-footprint.svg",
            "replay-python-dicts-ns.svg",
        ],
    );
}

/// Which traces were replayed, and from where, is said on stderr and in the report.
#[test]
fn replay_says_which_traces() {
    let out = bench(&["--quick", "--no-plots", "replay"]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    for said in [&stdout, &stderr] {
        assert!(
            said.contains("bundled traces from") && said.contains("tests/data"),
            "{said}"
        );
    }
    assert!(stdout.contains("**Traces replayed:**"), "{stdout}");
}

#[test]
fn replay_named_trace_as_json() {
    let data = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/data");
    let trace = data.join("perl-words.trace.gz");
    let trace = trace.to_str().expect("a UTF-8 path");
    let out = bench(&["--quick", "--json", "--no-plots", "replay", trace]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let json: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("--json prints one JSON document");
    let traces = json["replay"].as_array().expect("a list of traces");
    assert_eq!(traces.len(), 1);
    assert_eq!(traces[0]["trace"], "perl-words");
    let results = traces[0]["results"].as_array().expect("results");
    assert!(results.iter().any(|r| r["allocator"] == "tagalloc inline"));
    assert!(results.iter().all(|r| r["error"].is_null()), "{results:?}");
}

#[test]
fn bad_trace_path_is_a_clear_error() {
    let out = bench(&["--quick", "replay", "/nonexistent/missing.trace.gz"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("missing.trace.gz"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn malformed_trace_is_a_clear_error() {
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("smoke-malformed.trace");
    std::fs::write(&path, "# tagalloc trace v1\na 0 16\nf 1\n").expect("write a trace");
    let out = bench(&["--quick", "replay", path.to_str().expect("a UTF-8 path")]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("line 3"), "{stderr}");
}

#[test]
fn bad_arguments_exit_2() {
    for args in [
        &["frobnicate"][..],
        &["--runs", "0"],
        &["--runs", "x"],
        &["--bogus"],
        &["plan", "--budget", "0"],
        &["plan-trace", "--events", "0"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_tagalloc-bench"))
            .args(args)
            .output()
            .expect("the benchmark binary runs");
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(!text(&out.stderr).contains("panicked"), "{args:?}");
    }
}

/// Real programs with every allocator preloaded: the tool builds tagalloc's library, runs the
/// programs that are installed (skipping, with a line saying so, those that are not, and any
/// peer allocator not installed: `--quick` installs nothing) and checks each run's output
/// against glibc's. What must hold anywhere: glibc's and tagalloc's rows, no failed run, the
/// two charts.
#[test]
fn programs() {
    let args = ["--quick", "programs"];
    let out = bench(&args);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stderr}\n{stdout}");
    assert!(stdout.contains("## Real programs"), "{stdout}");
    assert!(
        stdout.contains("### tagalloc against each allocator"),
        "{stdout}"
    );
    assert!(
        stdout.contains("| glibc malloc |") && stdout.contains("| tagalloc (LD_PRELOAD) |"),
        "{stdout}"
    );
    assert!(
        stdout.contains("(lower is better)") && !stdout.contains("error:"),
        "{stdout}"
    );
    for chart in ["programs-time.svg", "programs-rss.svg"] {
        let path = out_dir(&args).join(chart);
        let svg = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
        assert!(svg.contains("<svg") && svg.contains("better") && svg.contains("tagalloc"));
    }
}

/// `device --quick` replays a generated three-stream trace (no ../shared needed) through the
/// device pool and the PyTorch model, and prints the comparison table, the model and the
/// speed sweep.
#[test]
fn device() {
    let out = bench_plain(&["--quick", "device"]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stderr}\n{stdout}");
    assert!(
        stdout.contains("## Device pool against PyTorch's caching allocator"),
        "{stdout}"
    );
    for row in [
        "| tagalloc device, plain regions |",
        "| tagalloc device, VMM growth |",
        "| PyTorch caching allocator (model) |",
    ] {
        assert!(stdout.contains(row), "no `{row}` in\n{stdout}");
    }
    for text in [
        "÷ peak live (lower is better)",
        "÷ PyTorch model (lower is better)",
        "÷ never waiting (lower is better)",
        "| host synchronisations | device waits |",
        "modelled stall, % of run (lower is better)",
        "**Device-time model** (the traces carry no timing",
        "**Device speed sweep**",
        "0.5×: run ÷ never waiting",
        "2×: peak reserved ÷ peak live",
        "By modelled run time (run ÷ never waiting), lowest first: **",
        "By peak reserved (÷ peak live), lowest first: **",
        "synthetic-3-streams",
    ] {
        assert!(stdout.contains(text), "no `{text}` in\n{stdout}");
    }
    assert!(stderr.contains("device: replaying"), "{stderr}");
}

/// The keys of one trace's JSON: every allocator's figures, the model and the sweep.
fn check_device_json(d: &serde_json::Value, name: &str, streams: u64) {
    assert_eq!(d["trace"], name, "{d}");
    assert_eq!(d["streams"], streams, "{name}");
    let never = d["modelled_run_s_never_waiting"]
        .as_f64()
        .expect("a lower bound");
    assert!(never > 0.0, "{name}");
    assert_eq!(d["model"]["host_ns_per_event"], 5000, "{name}");
    assert_eq!(d["model"]["speed"], 1.0, "{name}");
    assert!(d["model"]["bytes_per_ns"].as_f64().is_some(), "{name}");
    let results = d["results"].as_array().expect("results");
    assert_eq!(results.len(), 3, "{name}");
    for r in results {
        let ratio = r["reserved_over_live"].as_f64().expect("a ratio");
        assert!(ratio >= 1.0, "{r}");
        assert!(r["driver_calls"].as_u64().is_some(), "{r}");
        assert!(r["driver_calls_by_kind"].is_object(), "{r}");
        assert!(r["host_synchronizations"].as_u64().is_some(), "{r}");
        assert!(r["device_waits"].as_u64().is_some(), "{r}");
        let stall = r["modelled_host_stall_s"].as_f64().expect("a stall");
        let run = r["modelled_run_s"].as_f64().expect("a run");
        assert!(stall >= 0.0 && stall < run, "{r}");
        let host = r["modelled_host_s"].as_f64().expect("the host's time");
        assert!(host > stall && host <= run, "{r}");
        assert!(run >= never, "never waiting is the lower bound: {r}");
        let over = r["modelled_run_over_never_waiting"]
            .as_f64()
            .expect("a ratio");
        assert!((over - run / never).abs() < 1e-9, "{r}");
    }
    let sweep = &d["speed_sweep"];
    let points = sweep["points"].as_array().expect("sweep points");
    let speeds: Vec<f64> = points
        .iter()
        .map(|p| p["speed"].as_f64().unwrap())
        .collect();
    assert_eq!(speeds, [0.5, 1.0, 2.0], "{name}");
    for p in points {
        assert_eq!(p["results"].as_array().map(Vec::len), Some(3), "{p}");
        assert!(p["order_by_modelled_run"].is_array(), "{p}");
    }
    assert!(sweep["same_order_by_modelled_run"].is_boolean(), "{sweep}");
    assert!(sweep["same_order_by_peak_reserved"].is_boolean(), "{sweep}");
}

#[test]
fn device_as_json() {
    let out = bench_plain(&["--quick", "--json", "device"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let json: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("--json prints one JSON document");
    check_device_json(&json["device"], "synthetic-3-streams", 3);
}

/// The generated patterns by name, each with its streams and its `u=` frees.
#[test]
fn device_patterns() {
    for (name, streams) in [("pipeline", 4), ("prefetch", 3), ("buckets", 2)] {
        let out = bench_plain(&["--quick", "--json", "device", name]);
        assert!(out.status.success(), "{name}: {}", text(&out.stderr));
        let json: serde_json::Value =
            serde_json::from_slice(&out.stdout).expect("--json prints one JSON document");
        let d = &json["device"];
        check_device_json(d, &format!("synthetic-{name}"), streams);
        assert!(d["frees_with_u"].as_u64() > Some(0), "{name}: {d}");
        assert!(
            text(&out.stderr).contains(&format!("synthetic-{name}, generated")),
            "{name}"
        );
    }
}

/// `--all-multistream`: every multi-stream trace (with --quick, the generated ones) and one
/// summary of them all.
#[test]
fn device_all_multistream() {
    let out = bench_plain(&["--quick", "--json", "device", "--all-multistream"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let json: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("--json prints one JSON document");
    let d = &json["device"];
    let traces = d["traces"].as_array().expect("traces");
    let names: Vec<&str> = traces
        .iter()
        .map(|t| t["trace"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "synthetic-3-streams",
            "synthetic-pipeline",
            "synthetic-prefetch",
            "synthetic-buckets"
        ]
    );
    for (t, streams) in traces.iter().zip([3, 4, 3, 2]) {
        check_device_json(t, t["trace"].as_str().unwrap(), streams);
    }
    let summary = d["summary"].as_array().expect("summary");
    assert_eq!(summary.len(), 12);
    for row in summary {
        for key in [
            "host_synchronizations",
            "device_waits",
            "modelled_stall_share",
            "modelled_run_over_never_waiting",
            "reserved_over_live",
            "driver_calls_over_torch",
        ] {
            assert!(row[key].is_number(), "{key}: {row}");
        }
    }
    assert_eq!(d["model"]["kernel_base_ns"], 5000);

    let out = bench_plain(&["--quick", "device", "--all-multistream"]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    for text in [
        "### synthetic-pipeline",
        "### synthetic-prefetch",
        "### synthetic-buckets",
        "### Summary: every multi-stream trace at device speed 1×",
        "| trace | allocator | host synchronisations | device waits |",
        "driver calls ÷ PyTorch model's (lower is better)",
        "at every speed**",
    ] {
        assert!(stdout.contains(text), "no `{text}` in\n{stdout}");
    }
}

#[test]
fn device_all_multistream_takes_no_trace() {
    for (args, says) in [
        (
            &["device", "--all-multistream", "x.trace.gz"][..],
            "name no trace",
        ),
        (
            &["--quick", "replay", "--all-multistream"][..],
            "belongs to the device",
        ),
    ] {
        let out = bench_plain(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let stderr = text(&out.stderr);
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
}

#[test]
fn device_with_a_missing_trace_is_a_clear_error() {
    let out = bench_plain(&["device", "/nonexistent/missing.trace.gz"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("missing.trace.gz"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// The pool subcommand: both tables for every bundled trace, every pool checked clean.
#[test]
fn pool() {
    let args = ["--quick", "pool"];
    let out = bench_plain(&args);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stderr}\n{stdout}");
    assert!(stdout.contains("## Pools"), "{stdout}");
    for trace in ["### perl-words", "### python-dicts"] {
        assert!(stdout.contains(trace), "no {trace} in\n{stdout}");
    }
    for row in [
        "| pool policy | source | trim |",
        "| 64 KiB regions | separate regions | — |",
        "| doubling 1 → 64 MiB | grows in place | trimmed |",
        "| bare InlineHeap (A) |",
        "| bare InlineHeap (B) |",
        "| pool, whole arena reserved up front |",
        "| 2 MiB regions, separate regions, trimmed |",
    ] {
        assert!(stdout.contains(row), "no `{row}` in\n{stdout}");
    }
    assert!(!stdout.contains("check failed"), "{stdout}");
    assert!(stderr.contains("bundled traces from"), "{stderr}");
}

#[test]
fn pool_as_json() {
    let out = bench_plain(&["--quick", "--json", "pool"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let json: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("--json prints one JSON document");
    let traces = json["pool"].as_array().expect("a list of traces");
    assert_eq!(traces.len(), 2);
    for t in traces {
        let rows = t["rows"].as_array().expect("rows");
        assert_eq!(
            rows.len(),
            15,
            "bare A, bare B, the pool over the whole arena and 12 pools"
        );
        let peak = t["peak_live_bytes"].as_u64().expect("peak live");
        for r in rows {
            assert!(r["check"].is_null(), "{r}");
            assert_eq!(r["failures"], 0, "{r}");
            if r["policy"] != "bare" && r["policy"] != "whole_arena_reserved" {
                let reserved = r["peak_reserved_bytes"].as_u64().expect("peak reserved");
                assert!(reserved >= peak, "{r}");
            }
        }
    }
}

/// The snapshot picture, at the peak and at an event, with the figures in the report and in
/// the picture.
#[test]
fn snapshot() {
    let data = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/data");
    let trace = data.join("python-dicts.trace.gz");
    let trace = trace.to_str().expect("a UTF-8 path");
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("smoke-snapshot-pictures");
    for (at, policy, file) in [
        ("peak", "fixed-2m", "peak.svg"),
        ("5000", "fixed-64k", "event.svg"),
    ] {
        let svg = dir.join(file);
        let _ = std::fs::remove_file(&svg);
        let out = Command::new(env!("CARGO_BIN_EXE_tagalloc-bench"))
            .args(["--quick", "snapshot", trace, "--at", at, "--policy", policy])
            .arg("--out")
            .arg(&svg)
            .output()
            .expect("the benchmark binary runs");
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert!(out.status.success(), "{stderr}\n{stdout}");
        for figure in ["| reserved |", "| largest free chunk |", "| fragmentation"] {
            assert!(stdout.contains(figure), "no `{figure}` in\n{stdout}");
        }
        let picture = std::fs::read_to_string(&svg).unwrap_or_else(|e| panic!("{svg:?}: {e}"));
        assert!(picture.contains("<svg"), "{svg:?} is not an SVG");
        for said in [
            "python-dicts",
            "fragmentation",
            "Reserved",
            "in use",
            "free",
        ] {
            assert!(picture.contains(said), "{svg:?} does not say `{said}`");
        }
        if at == "peak" {
            assert!(picture.contains("peak of live bytes"), "{svg:?}");
        } else {
            assert!(picture.contains("after event 5,000"), "{svg:?}");
        }
    } // A directory: the picture goes in it under its default name.
    let sub = dir.join("in-a-directory");
    let _ = std::fs::remove_dir_all(&sub);
    let out = Command::new(env!("CARGO_BIN_EXE_tagalloc-bench"))
        .args(["--quick", "snapshot", trace, "--out"])
        .arg(&sub)
        .output()
        .expect("the benchmark binary runs");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let svg = sub.join("snapshot-python-dicts-peak.svg");
    assert!(
        std::fs::read_to_string(&svg).is_ok_and(|t| t.contains("<svg")),
        "{svg:?}"
    );
}

#[test]
fn snapshot_bad_input_is_a_clear_error() {
    let data = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/data");
    let trace = data.join("python-dicts.trace.gz");
    let trace = trace.to_str().expect("a UTF-8 path");
    for (args, said) in [
        (
            &["--quick", "snapshot", trace, "--at", "999999999"][..],
            "events",
        ),
        (&["--quick", "snapshot", trace, "--at", "soon"], "--at"),
        (
            &["--quick", "snapshot", trace, "--policy", "huge"],
            "--policy",
        ),
        (&["--quick", "snapshot"], "one trace"),
        (&["--quick", "replay", "--at", "peak"], "snapshot"),
        (
            &["--quick", "snapshot", trace, "--out", "snap.png"],
            "neither a directory nor an .svg file",
        ),
        (
            &["--quick", "replay", "--out", "charts.svg"],
            "not a directory",
        ),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_tagalloc-bench"))
            .args(args)
            .arg("--no-plots")
            .output()
            .expect("the benchmark binary runs");
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(said), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}

/// Runs the tool without the chart directory (planning writes no charts).
fn bench_plain(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tagalloc-bench"))
        .args(args)
        .output()
        .expect("the benchmark binary runs")
}

#[test]
fn plan() {
    let out = bench_plain(&["--quick", "plan"]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "plan failed: {stderr}\n{stdout}");
    assert!(stdout.contains("## Static planning"), "{stdout}");
    assert!(
        stdout.contains("| problem |") && stdout.contains("| --- |"),
        "{stdout}"
    );
    assert!(
        stdout.contains("| chain |") && stdout.contains("| ladder |"),
        "{stdout}"
    );
}

#[test]
fn plan_json_has_exactly_the_documented_fields() {
    let out = bench_plain(&["--quick", "--json", "plan"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let json: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("--json prints one JSON document");
    let problems = json["plan"].as_array().expect("a list of problems");
    assert_eq!(problems.len(), 2, "the two bundled problems");
    for p in problems {
        let mut keys: Vec<&str> = p
            .as_object()
            .expect("an object")
            .keys()
            .map(String::as_str)
            .collect();
        keys.sort_unstable();
        assert_eq!(
            keys,
            [
                "arena",
                "buffers",
                "ids",
                "lower_bound",
                "offsets",
                "optimal",
                "problem",
                "seconds"
            ]
        );
        assert!(p["arena"].as_u64() >= p["lower_bound"].as_u64());
        let n = p["buffers"].as_u64().expect("a count") as usize;
        assert_eq!(p["offsets"].as_array().map(Vec::len), Some(n));
        assert_eq!(p["ids"].as_array().map(Vec::len), Some(n));
        assert!(p["seconds"].as_f64().is_some_and(|s| s >= 0.0));
    }
    // The ladder is where both greedy plans miss the bound and the search closes the gap.
    let ladder = problems
        .iter()
        .find(|p| p["problem"] == "ladder")
        .expect("the ladder problem");
    assert_eq!(ladder["buffers"], 10);
    assert_eq!(ladder["optimal"], true);
    assert_eq!(ladder["arena"], ladder["lower_bound"]);
}

#[test]
fn plan_trace() {
    let out = bench_plain(&["--quick", "plan-trace"]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(
        out.status.success(),
        "plan-trace failed: {stderr}\n{stdout}"
    );
    assert!(
        stdout.contains("## Dynamic heap against the offline plan"),
        "{stdout}"
    );
    assert!(
        stdout.contains("| python-dicts |") && stdout.contains("| perl-words |"),
        "{stdout}"
    );
}

#[test]
fn malformed_plan_is_a_clear_error() {
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("smoke-malformed.csv");
    std::fs::write(&path, "id,lower,upper,size\n0,0,3,4\n1,5,2,8\n").expect("write a problem");
    let out = bench_plain(&["--quick", "plan", path.to_str().expect("a UTF-8 path")]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("line 3"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    let out = bench_plain(&["--quick", "plan", "/nonexistent/missing.csv"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("missing.csv"));
}

/// The threads subcommand: every allocator at every thread count, every block's stamp intact,
/// tagalloc's heaps checked clean, and the chart.
#[test]
fn threads() {
    let args = ["--quick", "threads"];
    let out = bench(&args);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stderr}\n{stdout}");
    assert!(stdout.contains("## Multi-threaded throughput"), "{stdout}");
    assert!(
        stdout.contains("| 1 thread | 2 threads | 4 threads | 8 threads |"),
        "{stdout}"
    );
    for row in [
        "| tagalloc GlobalHeap |",
        "| tagalloc GlobalHeap (futex) |",
        "| tagalloc HostAllocator |",
        "| talc |",
        "| rlsf |",
        "| glibc malloc |",
    ] {
        assert!(stdout.contains(row), "no `{row}` in\n{stdout}");
    }
    assert!(stdout.contains("Load average"), "{stdout}");
    assert!(!stdout.contains("error:"), "an allocator failed\n{stdout}");
    let path = out_dir(&args).join("threads.svg");
    let svg = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    assert!(
        svg.contains("better") && svg.contains("tagalloc GlobalHeap"),
        "{path:?}"
    );
    // One allocator at one thread count, for profiling; a word that is neither is refused.
    let out = bench_plain(&["--quick", "--no-plots", "threads", "2", "talc_spin"]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(stdout.contains("| talc |"), "{stdout}");
    let out = bench_plain(&["--quick", "--no-plots", "threads", "3"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("neither a thread count"));
}
