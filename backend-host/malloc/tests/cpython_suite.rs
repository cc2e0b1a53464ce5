//! CPython's own regression suite as a test of the library: the modules of
//! `tests/cpython_modules.txt` (allocation-heavy and quick: the containers, strings, `json`,
//! `re`, `pickle`, `weakref`, `gc`, ...) run by `python3 -m test`, one process, in sequence,
//! with `PYTHONMALLOC=malloc` (every object from `malloc`), on glibc and with the library
//! preloaded; the set of modules that fail, and the set that alter the execution
//! environment, must be the same on both (CPython's own failures on this machine, if any,
//! are not the library's).
//!
//! The library's statistics go to files (`TAGALLOC_STATS=DIR/stats-%p.txt`), not to stderr,
//! since some of the tests compare what a child Python writes on stderr: they prove the
//! library served the run and refused no free.
//!
//! The tests need CPython's `test` package with those modules, which distributions ship
//! apart (Debian: `libpython3.X-testsuite`): found or not when the tests were built
//! (`build.rs`); missing, the tests are ignored with the reason, or fail under `CI=true`.

mod common;

use std::collections::BTreeSet;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::sync::OnceLock;
use std::time::Duration;

use common::{library, python, scratch, Program, Run};

const MODULES: &str = include_str!("cpython_modules.txt");

/// One run of the suite.
#[derive(Debug)]
struct Outcome {
    run: Run,
    failed: BTreeSet<String>,
    env_changed: BTreeSet<String>,
}

/// The modules a section of regrtest's summary lists: its header (`2 tests failed:`,
/// `1 test altered the execution environment:`) ends with `ending`; the names follow on
/// indented lines.
fn section(out: &str, ending: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut lines = out.lines();
    while let Some(line) = lines.next() {
        let header = line
            .split_whitespace()
            .next()
            .is_some_and(|n| n.parse::<u32>().is_ok())
            && line.trim_end().ends_with(ending);
        if header {
            for l in lines.by_ref() {
                if !l.starts_with("    ") {
                    break;
                }
                names.extend(l.split_whitespace().map(String::from));
            }
        }
    }
    names
}

/// The tail of a run's output, for a failure message.
fn tail(run: &Run) -> String {
    let text = format!("{}{}", run.stdout_text(), run.stderr_text());
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

/// Runs the suite on glibc (`preload` false) or on the library, checked or not.
fn suite(preload: bool, checked: bool) -> Outcome {
    let name = match (preload, checked) {
        (false, _) => "cpython-glibc",
        (true, false) => "cpython-tagalloc",
        (true, true) => "cpython-checked",
    };
    let dir: &'static Path = Box::leak(scratch(name).into_boxed_path());
    let py = python();
    let mut p = Program::new(&py, &["-m", "test"], dir)
        .env("PYTHONMALLOC", "malloc")
        .env("PYTHONDONTWRITEBYTECODE", "1");
    p.args.extend(MODULES.split_whitespace().map(String::from));
    p.limit = Duration::from_secs(if checked { 3600 } else { 900 });
    let stats = dir.join("stats-%p.txt").to_string_lossy().into_owned();
    let lib = library();
    let mut extra = vec![("TAGALLOC_STATS", stats.as_str())];
    if checked {
        extra.push(("TAGALLOC_CHECKED", "1"));
    }
    let mut run = if preload {
        p.run(Some(&lib), &extra)
    } else {
        p.run(None, &[])
    };
    // The statistics of every process of the run, from their files.
    for entry in std::fs::read_dir(dir).expect("read the scratch directory") {
        let path = entry.expect("a directory entry").path();
        if path
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("stats-"))
        {
            let text = std::fs::read_to_string(&path).expect("read a statistics file");
            run.tagalloc_lines.extend(text.lines().map(String::from));
        }
    }
    let out = run.stdout_text();
    // regrtest exits 0 when all pass, 2 when some fail; anything else (a signal, a crash of
    // the interpreter) means the run did not finish.
    assert!(
        matches!(run.status.code(), Some(0 | 2)) && out.contains("== Tests result: "),
        "{name}: python3 -m test did not finish ({:?}, signal {:?}):\n{}",
        run.status.code(),
        run.status.signal(),
        tail(&run)
    );
    let failed = section(&out, " failed:");
    let env_changed = section(&out, " altered the execution environment:");
    eprintln!(
        "{name}: {} module(s) in {:.1} s; failed: {failed:?}; altered the environment: \
         {env_changed:?}",
        MODULES.split_whitespace().count(),
        run.elapsed.as_secs_f64()
    );
    Outcome {
        run,
        failed,
        env_changed,
    }
}

/// The suite on glibc, run once per test binary.
fn on_glibc() -> &'static Outcome {
    static BASE: OnceLock<Outcome> = OnceLock::new();
    BASE.get_or_init(|| suite(false, false))
}

/// The suite on the library and, at the same time on another thread, on glibc (the two
/// take about the same time; nothing compares their times).
fn same_failures_as_glibc(checked: bool) {
    let (base, ours) = std::thread::scope(|s| {
        let base = s.spawn(on_glibc);
        let ours = suite(true, checked);
        (base.join().expect("the glibc run"), ours)
    });
    assert_eq!(
        ours.failed,
        base.failed,
        "modules that fail on tagalloc{} and on glibc differ:\n{}",
        if checked { " (checked)" } else { "" },
        tail(&ours.run)
    );
    assert_eq!(
        ours.env_changed,
        base.env_changed,
        "modules that alter the environment on tagalloc and on glibc differ:\n{}",
        tail(&ours.run)
    );
    assert!(
        ours.run.most_allocations() >= 1_000_000,
        "the library reported at most {} allocations in one process: was it preloaded?",
        ours.run.most_allocations()
    );
    let refused: Vec<&String> = ours
        .run
        .tagalloc_lines
        .iter()
        .filter(|l| l.contains("refused") && !l.contains(" 0 refused frees"))
        .collect();
    assert!(refused.is_empty(), "refused frees: {refused:?}");
}

#[cfg_attr(
    not(tagalloc_has_cpython_tests),
    ignore = "needs CPython's regression tests (python3's `test` package with the modules of \
              tests/cpython_modules.txt; Debian: libpython3.X-testsuite) when the tests were \
              built"
)]
#[test]
fn cpython_regression_modules() {
    same_failures_as_glibc(false);
}

#[cfg_attr(
    not(tagalloc_has_cpython_tests),
    ignore = "needs CPython's regression tests (python3's `test` package with the modules of \
              tests/cpython_modules.txt; Debian: libpython3.X-testsuite) when the tests were \
              built"
)]
#[test]
fn cpython_regression_modules_checked() {
    same_failures_as_glibc(true);
}
