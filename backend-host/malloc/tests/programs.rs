//! Real programs, written elsewhere, run on glibc and on the library, with the same
//! environment and input, and compared byte for byte (stdout, stderr, exit status): CPython
//! (a JSON round trip, dict- and list-heavy work, threads), perl, sqlite3, git (`fast-import`
//! building a history, then `log -p`) and g++ compiling a C++17 program (the object files
//! compared, then the program run). The workloads are in `programs/`; the benchmark
//! (`tagalloc-bench programs`) runs the same files, larger.
//!
//! CPython runs with `PYTHONMALLOC=malloc`, so that every object it allocates comes from
//! `malloc` rather than from its own small-object arenas (which take 256 KiB at a time):
//! that is the run that exercises the allocator.
//!
//! A program that was not on `PATH` when the tests were built makes its test ignored, with
//! the reason (`build.rs`); under `CI=true` it fails instead.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{library, python, same_output, scratch, source, Program};

fn arg(p: &Path) -> String {
    p.to_str().expect("a UTF-8 path").to_string()
}

fn python_script(script: &str, n: &str, min_allocations: u64) {
    let dir = scratch(script);
    let py = python();
    let p = Program::new(&py, &[], &dir)
        .env("PYTHONMALLOC", "malloc")
        .env("PYTHONDONTWRITEBYTECODE", "1");
    let p = Program {
        args: vec![arg(&source(&format!("programs/{script}"))), n.to_string()],
        ..p
    };
    same_output(&p, min_allocations);
}

#[cfg_attr(
    not(tagalloc_has_python3),
    ignore = "needs python3 on PATH when the tests were built (CI installs it)"
)]
#[test]
fn python_json_round_trip() {
    python_script("json_roundtrip.py", "20000", 1_000_000);
}

#[cfg_attr(
    not(tagalloc_has_python3),
    ignore = "needs python3 on PATH when the tests were built (CI installs it)"
)]
#[test]
fn python_dicts_and_lists() {
    python_script("dicts_lists.py", "150000", 500_000);
}

#[cfg_attr(
    not(tagalloc_has_python3),
    ignore = "needs python3 on PATH when the tests were built (CI installs it)"
)]
#[test]
fn python_threads() {
    python_script("threads.py", "200", 500_000);
}

#[cfg_attr(
    not(tagalloc_has_perl),
    ignore = "needs perl on PATH when the tests were built (CI installs it)"
)]
#[test]
fn perl_words() {
    let dir = scratch("perl");
    let script = arg(&source("programs/words.pl"));
    let p = Program::new("perl", &[&script, "150000"], &dir);
    same_output(&p, 10_000);
}

#[cfg_attr(
    not(tagalloc_has_sqlite3),
    ignore = "needs sqlite3 on PATH when the tests were built (CI installs it)"
)]
#[test]
fn sqlite3_queries() {
    let dir = scratch("sqlite3");
    let sql = std::fs::read_to_string(source("programs/queries.sql")).expect("read queries.sql");
    let p = Program::new("sqlite3", &[], &dir).stdin(sql.replace("@ROWS@", "60000").into_bytes());
    let (_, ours) = same_output(&p, 10_000);
    assert!(
        ours.stdout_text().contains("48000|"),
        "{}",
        ours.stdout_text()
    );
}

/// A git command's environment: no system or user configuration, fixed identity, no pager.
fn git(dir: &Path, args: &[&str]) -> Program<'static> {
    let dir: &'static Path = Box::leak(dir.to_path_buf().into_boxed_path());
    let mut p = Program::new("git", args, dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("HOME", arg(dir))
        .env("GIT_PAGER", "cat");
    p.args.insert(0, "--no-pager".into());
    p
}

/// A repository whose history `git fast-import` builds from `programs/history.awk`'s stream
/// of `commits` commits, on glibc or on the library; returns its HEAD.
fn history(dir: &Path, commits: usize, preload: Option<&Path>) -> String {
    let init = Command::new("git")
        .args(["init", "-q", "-b", "main"])
        .arg(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .expect("run git init");
    assert!(
        init.status.success(),
        "{}",
        String::from_utf8_lossy(&init.stderr)
    );
    let awk = Command::new("awk")
        .arg("-v")
        .arg(format!("n={commits}"))
        .arg("-f")
        .arg(source("programs/history.awk"))
        .output()
        .expect("run awk");
    assert!(
        awk.status.success(),
        "awk: {}",
        String::from_utf8_lossy(&awk.stderr)
    );
    let import = git(dir, &["fast-import", "--quiet"]).stdin(awk.stdout);
    let run = import.run(preload, &[]);
    assert!(
        run.status.success(),
        "git fast-import: {}",
        run.stderr_text()
    );
    let head = git(dir, &["rev-parse", "HEAD"]).run(None, &[]);
    assert!(head.status.success());
    head.stdout_text()
}

#[cfg_attr(
    not(tagalloc_has_git),
    ignore = "needs git on PATH when the tests were built (CI installs it)"
)]
#[test]
fn git_fast_import_and_log_patch() {
    let dir = scratch("git");
    let (on_glibc, on_tagalloc) = (dir.join("glibc"), dir.join("tagalloc"));
    // The same history built on each allocator has the same commits.
    let head = history(&on_glibc, 400, None);
    assert_eq!(history(&on_tagalloc, 400, Some(&library())), head);
    let log = git(&on_glibc, &["log", "-p", "--no-color", "--stat"]);
    let (_, ours) = same_output(&log, 10_000);
    assert!(ours.stdout.len() > 1_000_000, "{} bytes", ours.stdout.len());
}

fn cxx_flags(src: &Path, out: &Path) -> Vec<String> {
    ["-std=c++17", "-O2", "-frandom-seed=tagalloc", "-c"]
        .into_iter()
        .map(String::from)
        .chain([arg(src), "-o".into(), arg(out)])
        .collect()
}

/// g++ (its driver, cc1plus and as, all preloaded) compiles a C++17 program using the
/// standard library's containers, strings and regular expressions: the object files are the
/// same bytes; the program, linked and run, prints the same.
#[cfg_attr(
    not(tagalloc_has_gxx),
    ignore = "needs g++ on PATH when the tests were built (CI installs it)"
)]
#[test]
fn gxx_compiles_cxx17() {
    let dir = scratch("gxx");
    let src = source("programs/containers.cpp");
    let objects: [PathBuf; 2] = [dir.join("glibc.o"), dir.join("tagalloc.o")];
    let lib = library();
    for (obj, preload) in objects.iter().zip([None, Some(lib.as_path())]) {
        let mut p = Program::new("g++", &[], &dir);
        p.args = cxx_flags(&src, obj);
        let run = p.run(preload, &[]);
        assert!(run.status.success(), "g++: {}", run.stderr_text());
        if preload.is_some() {
            // The driver and cc1plus at least.
            assert!(run.processes_reported() >= 2, "{:?}", run.tagalloc_lines);
            assert!(run.most_allocations() > 100_000, "{:?}", run.tagalloc_lines);
        }
    }
    let [a, b] = [&objects[0], &objects[1]].map(|o| std::fs::read(o).expect("read an object file"));
    assert!(
        a == b,
        "the object files differ ({} and {} bytes)",
        a.len(),
        b.len()
    );
    let exe = dir.join("containers");
    let link = Command::new("g++")
        .arg(&objects[0])
        .arg("-o")
        .arg(&exe)
        .output()
        .expect("run g++ to link");
    assert!(
        link.status.success(),
        "{}",
        String::from_utf8_lossy(&link.stderr)
    );
    let exe = arg(&exe);
    let p = Program::new(&exe, &["100000"], &dir);
    let (_, ours) = same_output(&p, 10_000);
    assert!(
        ours.stdout_text().starts_with("distinct "),
        "{}",
        ours.stdout_text()
    );
}
