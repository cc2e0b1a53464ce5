//! The environment checked at start: a value of `TAGALLOC_CHECKED`, `TAGALLOC_ON_MISUSE` or
//! `TAGALLOC_STATS` the library does not accept is reported in one line (variable, value, what
//! is accepted, the default used), and so is a `TAGALLOC_*` variable nothing in the project
//! reads, with the known name nearest to it; every variable the project's sources name is
//! known, and described in `docs/environment.md`.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::library;

/// Runs `/bin/true` with the library preloaded and `env` (and nothing else of tagalloc's);
/// what it wrote on stderr.
fn stderr_with(env: &[(&str, &str)]) -> String {
    let mut cmd = Command::new("/bin/true");
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("TAGALLOC_") {
            cmd.env_remove(key);
        }
    }
    let out = cmd
        .env("LD_PRELOAD", library())
        .envs(env.iter().copied())
        .output()
        .expect("run /bin/true");
    assert!(out.status.success(), "{env:?}: {:?}", out.status);
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_malformed_value_is_one_line_naming_what_is_accepted_and_the_default() {
    let cases = [
        (
            "TAGALLOC_CHECKED",
            "2",
            "tagalloc: TAGALLOC_CHECKED is neither \"0\" nor \"1\" but \"2\"; the default is \
             used: 0",
        ),
        (
            "TAGALLOC_STATS",
            "yes",
            "tagalloc: TAGALLOC_STATS is neither \"0\", \"1\" nor a path holding a \"/\" \
             (./stats-%p.txt) but \"yes\"; the default is used: 0 (no statistics)",
        ),
        (
            "TAGALLOC_ON_MISUSE",
            "goon",
            "tagalloc: TAGALLOC_ON_MISUSE is neither \"abort\" nor \"continue\" but \"goon\"; \
             the default is used: abort",
        ),
    ];
    for (name, value, want) in cases {
        let stderr = stderr_with(&[(name, value)]);
        assert_eq!(stderr.lines().count(), 1, "{name}={value}: {stderr}");
        assert!(stderr.starts_with(want), "{name}={value}: {stderr}");
    }
    // Accepted values say nothing (statistics off, so that nothing else is written).
    for (name, value) in [
        ("TAGALLOC_CHECKED", "0"),
        ("TAGALLOC_CHECKED", "1"),
        ("TAGALLOC_CHECKED", ""),
        ("TAGALLOC_STATS", "0"),
        ("TAGALLOC_STATS", ""),
        ("TAGALLOC_ON_MISUSE", "abort"),
        ("TAGALLOC_ON_MISUSE", "continue"),
    ] {
        assert_eq!(stderr_with(&[(name, value)]), "", "{name}={value}");
    }
}

#[test]
fn an_unknown_variable_is_named_with_the_nearest_known_one() {
    let stderr = stderr_with(&[("TAGALLOC_CHEKED", "1")]);
    assert_eq!(
        stderr,
        "tagalloc: unknown variable TAGALLOC_CHEKED ignored (did you mean TAGALLOC_CHECKED?)\n"
    );
    let stderr = stderr_with(&[("TAGALLOC_CUDA_REGION", "plain")]);
    assert!(
        stderr.contains("(did you mean TAGALLOC_CUDA_REGIONS?)"),
        "{stderr}"
    );
    let stderr = stderr_with(&[("TAGALLOC_XYZZY", "1")]);
    assert_eq!(
        stderr,
        "tagalloc: unknown variable TAGALLOC_XYZZY ignored (the variables: \
         docs/environment.md)\n"
    );
}

/// The repository's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every `TAGALLOC_*` name in the repository's sources, scripts (CI's too) and documents (but for
/// the deliberate misspellings of this file and of the table's example).
fn project_variables() -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut dirs = vec![root()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{dir:?}: {e}")) {
            let path = entry.expect("a directory entry").path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if path.is_dir() {
                if name != ".git" && name != "target" {
                    dirs.push(path);
                }
                continue;
            }
            // Scripts without an extension too (`.ci/run`); binary files do not read as text.
            let source = path.extension().is_none_or(|e| {
                ["rs", "py", "sh", "c", "toml", "yml", "yaml", "md"]
                    .iter()
                    .any(|ext| e == *ext)
            });
            if !source
                || path.ends_with("backend-host/malloc/tests/env.rs")
                || path.ends_with("docs/environment.md")
            {
                continue;
            }
            let Ok(text) = std::fs::read_to_string(&path) else {
                continue;
            };
            for (at, _) in text.match_indices("TAGALLOC_") {
                let rest = &text[at + "TAGALLOC_".len()..];
                let end = rest
                    .find(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
                    .unwrap_or(rest.len());
                let suffix = rest[..end].trim_end_matches('_');
                if !suffix.is_empty() {
                    names.insert(format!("TAGALLOC_{suffix}"));
                }
            }
        }
    }
    names
}

#[test]
fn every_variable_of_the_project_is_known_and_documented() {
    let names = project_variables();
    assert!(
        names.contains("TAGALLOC_CUDA_LIBRARY") && names.contains("TAGALLOC_CUDA_REGIONS"),
        "{names:?}"
    );
    // Set to values that are valid wherever a value is checked.
    let env: Vec<(&str, &str)> = names
        .iter()
        .map(|n| {
            let value = match n.as_str() {
                "TAGALLOC_ON_MISUSE" => "abort",
                "TAGALLOC_CUDA_REGIONS" => "plain",
                "TAGALLOC_STATS" | "TAGALLOC_CHECKED" => "0",
                _ => "1",
            };
            (n.as_str(), value)
        })
        .collect();
    let stderr = stderr_with(&env);
    assert_eq!(stderr, "", "{names:?}");
    let doc = root().join("docs/environment.md");
    let table = std::fs::read_to_string(&doc).unwrap_or_else(|e| panic!("{doc:?}: {e}"));
    let undocumented: Vec<&String> = names
        .iter()
        .filter(|n| !table.contains(&format!("| `{n}`")))
        .collect();
    assert!(
        undocumented.is_empty(),
        "{} lacks a row for {undocumented:?}",
        doc.display()
    );
}
