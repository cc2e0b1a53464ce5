//! The command line itself: each subcommand's `--help` is its own usage, every usage error is
//! one line naming the subcommand, the option, the value and what is expected, then one line
//! saying where the usage is, and `--out` is refused in the words of what the subcommand
//! writes. Nothing here measures anything: every run is refused or prints a help.

use std::process::{Command, Output};

fn bench(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tagalloc-bench"))
        .args(args)
        .output()
        .expect("the benchmark binary runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

const SUBCOMMANDS: [&str; 11] = [
    "micro",
    "random-actions",
    "efficiency",
    "replay",
    "pool",
    "snapshot",
    "plan",
    "plan-trace",
    "threads",
    "device",
    "programs",
];

#[test]
fn a_subcommands_help_is_its_own_usage() {
    for flag in ["--help", "-h"] {
        let out = bench(&["plan", flag]);
        let help = text(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{flag}");
        assert!(help.starts_with("tagalloc-bench plan: "), "{help}");
        assert!(
            help.contains("tagalloc-bench plan [OPTIONS] [PROBLEM...]"),
            "{help}"
        );
        // The words, whatever the wrapping.
        let flat = help.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            flat.contains(
                "--budget SECONDS time for the exact search on each problem \
                           (default 10; 0.2 with --quick)"
            ),
            "{help}"
        );
        // The problems' format, and only plan's options: not the global list, not another's.
        assert!(flat.contains("lower (or start)"), "{help}");
        for other in ["SUBCOMMANDS", "--sizes", "--runs", "--at ", "--no-plots"] {
            assert!(
                !help.contains(other),
                "plan's help shows `{other}`:\n{help}"
            );
        }
    }
    for name in SUBCOMMANDS {
        let out = bench(&[name, "--help"]);
        let help = text(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{name}");
        assert!(
            help.starts_with(&format!("tagalloc-bench {name}: ")),
            "{name}: {help}"
        );
        assert!(
            help.contains(&format!("tagalloc-bench {name} [OPTIONS]")),
            "{name}: {help}"
        );
        assert!(!help.contains("SUBCOMMANDS"), "{name}: {help}");
    }
    // Options before the subcommand count the same.
    let out = bench(&["--quick", "snapshot", "--help"]);
    assert!(text(&out.stdout).contains("--at EVENT|peak"));
}

#[test]
fn the_global_help_lists_the_subcommands_one_line_each() {
    let out = bench(&["--help"]);
    let help = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0));
    assert!(help.contains("SUBCOMMANDS:"), "{help}");
    assert!(help.contains("tagalloc-bench SUBCOMMAND --help"), "{help}");
    for name in SUBCOMMANDS {
        assert!(
            help.lines().any(|l| l.starts_with(&format!("    {name} "))),
            "no line for {name}:\n{help}"
        );
    }
    // Each subcommand's details are in its own help: not the snapshot's or device's options.
    for detail in ["--at", "--engines", "--lib"] {
        assert!(!help.contains(detail), "`{detail}` in\n{help}");
    }
}

/// Checks that `args` is refused with exit status 2 and exactly `line`, then the line that
/// points to `command`'s help.
fn refused_with(args: &[&str], command: &str, line: &str) {
    let out = bench(args);
    assert_eq!(out.status.code(), Some(2), "{args:?}");
    assert_eq!(
        text(&out.stderr),
        format!("{line}\nsee `{command} --help`\n"),
        "{args:?}"
    );
    assert!(out.stdout.is_empty(), "{args:?}: {}", text(&out.stdout));
}

#[test]
fn a_usage_error_is_one_line_and_where_the_usage_is() {
    refused_with(
        &["plan", "--budget", "abc"],
        "tagalloc-bench plan",
        "tagalloc-bench plan: --budget: \"abc\" is not a number of seconds (expected e.g. 10 \
         or 2.5)",
    );
    // Wherever the option stands, the subcommand is named.
    refused_with(
        &["--budget", "abc", "plan"],
        "tagalloc-bench plan",
        "tagalloc-bench plan: --budget: \"abc\" is not a number of seconds (expected e.g. 10 \
         or 2.5)",
    );
    refused_with(
        &["--quick", "plan-trace", "--events", "0"],
        "tagalloc-bench plan-trace",
        "tagalloc-bench plan-trace: --events: \"0\" is too small (expected events per trace, \
         at least 1)",
    );
    refused_with(
        &["plan", "--budget"],
        "tagalloc-bench plan",
        "tagalloc-bench plan: --budget needs a value (expected SECONDS)",
    );
    refused_with(
        &["frobnicate"],
        "tagalloc-bench",
        "tagalloc-bench: unknown subcommand \"frobnicate\" (expected micro, random-actions, \
         efficiency, replay, pool, snapshot, plan, plan-trace, threads, device, programs)",
    );
    refused_with(
        &["plan", "--bogus"],
        "tagalloc-bench plan",
        "tagalloc-bench plan: --bogus is not an option of plan",
    );
    refused_with(
        &["--quick", "threads", "3"],
        "tagalloc-bench threads",
        "tagalloc-bench threads: \"3\" is neither a thread count (1, 2, 4, 8) nor an allocator \
         (tagalloc_globalheap_spin, tagalloc_globalheap_futex, tagalloc_hostallocator, \
         talc_spin, rlsf_mutex, glibc)",
    );
}

#[test]
fn an_option_the_subcommand_does_not_take_is_refused() {
    refused_with(
        &["plan", "--sizes", "200"],
        "tagalloc-bench plan",
        "tagalloc-bench plan: --sizes belongs to the random-actions subcommand, not to plan",
    );
    refused_with(
        &["--quick", "--events", "10"],
        "tagalloc-bench",
        "tagalloc-bench: --events belongs to the plan-trace subcommand, not to the default suite",
    );
    refused_with(
        &["pool", "--out", "charts"],
        "tagalloc-bench pool",
        "tagalloc-bench pool: --out is not an option of pool, which writes no files",
    );
    refused_with(
        &["micro", "--budget", "3"],
        "tagalloc-bench micro",
        "tagalloc-bench micro: --budget belongs to the replay, plan and plan-trace \
         subcommands, not to micro",
    );
}

#[test]
fn out_is_refused_in_the_words_of_what_the_subcommand_writes() {
    refused_with(
        &["plan", "--out", "x.txt"],
        "tagalloc-bench plan",
        "tagalloc-bench plan: --out: \"x.txt\" is neither a directory nor a .csv file \
         (expected a directory for NAME.plan.csv of each problem, or the .csv file of one \
         problem's plan)",
    );
    let out = bench(&["snapshot", "t.trace", "--out", "x.png"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr.starts_with(
            "tagalloc-bench snapshot: --out: \"x.png\" is neither a directory nor an .svg file"
        ),
        "{stderr}"
    );
    let out = bench(&["replay", "--out", "x.svg"]);
    let stderr = text(&out.stderr);
    assert!(
        stderr.starts_with(
            "tagalloc-bench replay: --out: \"x.svg\" is not a directory (expected the \
             directory the SVG charts go to"
        ),
        "{stderr}"
    );
}

/// The tool finds its bundled inputs wherever it runs from, as an installed one must.
#[test]
fn runs_from_any_directory() {
    let dir = std::env::temp_dir();
    let out = Command::new(env!("CARGO_BIN_EXE_tagalloc-bench"))
        .current_dir(&dir)
        .args(["--quick", "--json", "plan"])
        .output()
        .expect("the benchmark binary runs");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(json["plan"].as_array().map(Vec::len), Some(2));
}

/// A reader that stops early (`tagalloc-bench --help | head -1`) ends the tool quietly, as it
/// ends `cat`: no "failed printing to stdout" panic.
#[test]
fn a_closed_pipe_ends_the_tool_without_a_panic() {
    use std::process::Stdio;
    let mut child = Command::new(env!("CARGO_BIN_EXE_tagalloc-bench"))
        .args(["plan", "--help"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the benchmark binary runs");
    // Closed before the child has started writing: its first write finds no reader.
    drop(child.stdout.take());
    let out = child.wait_with_output().expect("the benchmark binary ends");
    let err = text(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
}
