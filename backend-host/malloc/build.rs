//! Decides, when the tests are built, which of the real programs they run are installed: for
//! each of `cc`, `python3`, `perl`, `sqlite3`, `git` and `g++` found on `PATH` it sets the cfg
//! `tagalloc_has_NAME` (`g++` as `gxx`). The tests that need a missing program are built
//! `#[ignore = "..."]` with the reason, so `cargo test` lists them as ignored, never as passed.
//! Under `CI=true` every cfg is set: CI installs the programs (`.ci/run`), so there a missing
//! one must fail its tests.
//!
//! The decision is taken again when `PATH` or `CI` changes, or when a file in a directory of
//! `PATH` does (a program installed or removed).

use std::env;
use std::path::{Path, PathBuf};

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

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
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
}
