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
        .join("-");
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
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_tagalloc-bench"))
            .args(args)
            .output()
            .expect("the benchmark binary runs");
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(!text(&out.stderr).contains("panicked"), "{args:?}");
    }
}

/// `device --quick` replays a generated three-stream trace (no ../shared needed) through the
/// device pool and the PyTorch model, and prints the comparison table.
#[test]
fn device() {
    let out = bench(&["--quick", "--no-plots", "device"]);
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
    assert!(stdout.contains("÷ peak live (lower is better)"), "{stdout}");
    assert!(
        stdout.contains("÷ PyTorch model (lower is better)"),
        "{stdout}"
    );
    assert!(stdout.contains("synthetic-3-streams"), "{stdout}");
    assert!(stderr.contains("device: replaying"), "{stderr}");
}

#[test]
fn device_as_json() {
    let out = bench(&["--quick", "--json", "--no-plots", "device"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let json: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("--json prints one JSON document");
    let results = json["device"]["results"].as_array().expect("results");
    assert_eq!(results.len(), 3);
    for r in results {
        let ratio = r["reserved_over_live"].as_f64().expect("a ratio");
        assert!(ratio >= 1.0, "{r}");
        assert!(r["driver_calls"].as_u64().is_some(), "{r}");
    }
    assert_eq!(json["device"]["streams"], 3);
}

#[test]
fn device_with_a_missing_trace_is_a_clear_error() {
    let out = bench(&["device", "/nonexistent/missing.trace.gz"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("missing.trace.gz"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}
