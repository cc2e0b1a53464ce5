//! Decides, when the tests are built, which of the real programs they run are installed: for
//! each of `cc`, `python3`, `perl`, `sqlite3`, `git` and `g++` found on `PATH` it sets the cfg
//! `tagalloc_has_NAME` (`g++` as `gxx`). The tests that need a missing program are built
//! `#[ignore = "..."]` with the reason, so `cargo test` lists them as ignored, never as passed.
//! Under `CI=true` every cfg is set: CI installs the programs (`.ci/run`), so there a missing
//! one must fail its tests.
//!
//! The decision is taken again when `PATH` or `CI` changes, or when a file in a directory of
//! `PATH` does (a program installed or removed).
//!
//! Likewise `tagalloc_has_cpython_tests`: `python3` finds CPython's regression tests (the
//! `test` package, with every module `tests/cpython_modules.txt` names), which
//! `tests/cpython_suite.rs` runs. Distributions ship them apart (Debian:
//! `libpython3.X-testsuite`).

use std::env;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The programs, and the name each has in its cfg.
const PROGRAMS: [(&str, &str); 6] = [
    ("cc", "cc"),
    ("python3", "python3"),
    ("perl", "perl"),
    ("sqlite3", "sqlite3"),
    ("git", "git"),
    ("g++", "gxx"),
];

fn executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Whether `python3` imports `test.support` and finds every module of the list.
fn cpython_tests(modules: &str) -> bool {
    let check = format!(
        "import importlib.util, sys, test.support\n\
         sys.exit(any(importlib.util.find_spec('test.' + m) is None for m in {:?}.split()))",
        modules
    );
    Command::new("python3")
        .args(["-c", &check])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-changed=tests/cpython_modules.txt");
    println!("cargo::rerun-if-env-changed=CI");
    println!("cargo::rerun-if-env-changed=PATH");
    let dirs: Vec<PathBuf> = env::var_os("PATH")
        .map(|p| env::split_paths(&p).collect())
        .unwrap_or_default();
    for d in &dirs {
        // Only directories that exist: cargo takes a missing path as always changed.
        if d.is_dir() {
            println!("cargo::rerun-if-changed={}", d.display());
        }
    }
    let ci = env::var("CI").is_ok_and(|v| v == "true");
    for (program, cfg) in PROGRAMS {
        println!("cargo::rustc-check-cfg=cfg(tagalloc_has_{cfg})");
        if ci || dirs.iter().any(|d| executable(&d.join(program))) {
            println!("cargo::rustc-cfg=tagalloc_has_{cfg}");
        }
    }
    println!("cargo::rustc-check-cfg=cfg(tagalloc_has_cpython_tests)");
    let modules = std::fs::read_to_string("tests/cpython_modules.txt").unwrap_or_default();
    if ci || cpython_tests(&modules) {
        println!("cargo::rustc-cfg=tagalloc_has_cpython_tests");
    }
}
