//! The C interface call by call (`tests/c/api.c`): the cases every C allocator must get right,
//! checked on glibc first (so the checks themselves are right) and then on the library; what
//! the library adds (its functions replace all of glibc's, C17's `aligned_alloc`, `mallinfo2`,
//! large blocks' mappings kept for reuse, `malloc_trim`); and misuse in checked mode, refused and
//! reported once. The statistics at exit are checked against what the program did.

mod common;

use std::time::Duration;

use common::{compile_c, library, scratch, Program};

#[cfg_attr(
    not(tagalloc_has_cc),
    ignore = "needs cc on PATH when the tests were built (CI installs it)"
)]
#[test]
fn the_c_interface_behaves_as_on_glibc() {
    let dir = scratch("api");
    let exe = compile_c("tests/c/api.c", &dir, &[]);
    let exe = exe.to_str().expect("a UTF-8 path");
    let mut p = Program::new(exe, &["common"], &dir);
    p.limit = Duration::from_secs(60);
    let (base, ours) = common::same_output(&p, 10);
    assert!(base.stdout_text().ends_with("common: 0 failed\n"));
    assert!(ours
        .stdout_text()
        .contains("ok   calloc zeroes reused memory"));
}

#[cfg_attr(
    not(tagalloc_has_cc),
    ignore = "needs cc on PATH when the tests were built (CI installs it)"
)]
#[test]
fn the_library_replaces_every_allocator_function() {
    let dir = scratch("api-tagalloc");
    let exe = compile_c("tests/c/api.c", &dir, &[]);
    let p = Program::new(exe.to_str().expect("a UTF-8 path"), &["tagalloc"], &dir);
    let run = p.run(Some(&library()), &[]);
    let out = run.stdout_text();
    assert!(run.status.success(), "{out}{}", run.stderr_text());
    assert!(out.ends_with("tagalloc: 0 failed\n"), "{out}");
    // The two large blocks had regions of their own (the second cut from the first's kept
    // mapping), and trim gave back regions.
    let stats = run.tagalloc_lines.join("\n");
    assert!(stats.contains("2 requests bypassed"), "{stats}");
    assert!(!stats.contains("given back 0"), "{stats}");
}

/// Misuse under `TAGALLOC_CHECKED=1` and `TAGALLOC_ON_MISUSE=continue`: a double free, a stack
/// pointer, a pointer into a block and a foreign realloc are refused (the program goes on, its
/// blocks intact), the first is
/// reported on stderr and no other is, and the exit statistics count all four.
#[cfg_attr(
    not(tagalloc_has_cc),
    ignore = "needs cc on PATH when the tests were built (CI installs it)"
)]
#[test]
fn checked_mode_refuses_and_reports_misuse_once() {
    let dir = scratch("api-checked");
    let exe = compile_c("tests/c/api.c", &dir, &[]);
    let p = Program::new(exe.to_str().expect("a UTF-8 path"), &["checked"], &dir);
    let run = p.run(
        Some(&library()),
        &[
            ("TAGALLOC_CHECKED", "1"),
            ("TAGALLOC_ON_MISUSE", "continue"),
        ],
    );
    let out = run.stdout_text();
    assert!(run.status.success(), "{out}{}", run.stderr_text());
    assert!(out.ends_with("checked: 0 failed\n"), "{out}");
    let reports: Vec<&String> = run
        .tagalloc_lines
        .iter()
        .filter(|l| l.contains(") refused: "))
        .collect();
    assert_eq!(reports.len(), 1, "{:?}", run.tagalloc_lines);
    assert!(
        reports[0].starts_with("tagalloc: free(0x") && reports[0].contains("a double free"),
        "{}",
        reports[0]
    );
    let stats = run.tagalloc_lines.join("\n");
    assert!(stats.contains(", 4 refused frees;"), "{stats}");
}

/// A program that frees `p` twice, then allocates and prints a block it kept.
fn double_free_program(dir: &std::path::Path) -> std::path::PathBuf {
    let src = dir.join("double.c");
    std::fs::write(
        &src,
        "#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\n\
         int main(void) {\n  char *p = malloc(100), *keep = malloc(100);\n\
         strcpy(keep, \"intact\");\n  free(p);\n  free(p);\n  char *q = malloc(100);\n\
         printf(\"%s %d\\n\", keep, q != NULL);\n  return 0;\n}\n",
    )
    .expect("write double.c");
    let exe = dir.join("double");
    let cc = std::process::Command::new("cc")
        .args(["-O0", "-w", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .expect("run cc");
    assert!(
        cc.status.success(),
        "{}",
        String::from_utf8_lossy(&cc.stderr)
    );
    exe
}

/// Without checked mode a double free of a block whose tag still says free is refused too
/// (the tag is read before anything is written), with `TAGALLOC_ON_MISUSE=continue`.
#[cfg_attr(
    not(tagalloc_has_cc),
    ignore = "needs cc on PATH when the tests were built (CI installs it)"
)]
#[test]
fn a_double_free_is_refused_without_checked_mode() {
    let dir = scratch("api-double");
    let exe = double_free_program(&dir);
    let p = Program::new(exe.to_str().expect("a UTF-8 path"), &[], &dir);
    let run = p.run(Some(&library()), &[("TAGALLOC_ON_MISUSE", "continue")]);
    assert!(run.status.success(), "{}", run.stderr_text());
    assert_eq!(run.stdout_text(), "intact 1\n");
    let stats = run.tagalloc_lines.join("\n");
    assert!(stats.contains("a double free"), "{stats}");
    assert!(stats.contains(", 1 refused free;"), "{stats}");
    assert!(
        !stats.contains("(double free"),
        "the cause is said once: {stats}"
    );
}

/// By default a double free is reported and the process aborts at it, as glibc's does, in
/// both modes; a value of `TAGALLOC_ON_MISUSE` the library does not know is reported in one
/// line and the default kept.
#[cfg_attr(
    not(tagalloc_has_cc),
    ignore = "needs cc on PATH when the tests were built (CI installs it)"
)]
#[test]
fn a_double_free_aborts_by_default() {
    use std::os::unix::process::ExitStatusExt;
    let dir = scratch("api-double-abort");
    let exe = double_free_program(&dir);
    let p = Program::new(exe.to_str().expect("a UTF-8 path"), &[], &dir);
    for env in [
        &[][..],
        &[("TAGALLOC_CHECKED", "1")][..],
        &[("TAGALLOC_ON_MISUSE", "abort")][..],
        &[("TAGALLOC_ON_MISUSE", "goon")][..],
    ] {
        let run = p.run(Some(&library()), env);
        let err = run.tagalloc_lines.join("\n");
        assert_eq!(run.status.signal(), Some(libc::SIGABRT), "{env:?}: {err}");
        assert_eq!(run.stdout_text(), "", "{env:?}: stopped at the second free");
        assert!(
            err.contains("): a double free: the block was freed already")
                && err.contains("; aborting"),
            "{env:?}: {err}"
        );
        let unknown = err.contains("TAGALLOC_ON_MISUSE is neither");
        assert_eq!(unknown, env.iter().any(|e| e.1 == "goon"), "{env:?}: {err}");
    }
}

/// `malloc_stats()` writes the figures on demand, and `TAGALLOC_STATS` at exit: in use at
/// exit is what the program left allocated (100 blocks of 1000 bytes, plus stdio's buffer).
#[cfg_attr(
    not(tagalloc_has_cc),
    ignore = "needs cc on PATH when the tests were built (CI installs it)"
)]
#[test]
fn statistics_say_what_the_program_left() {
    let dir = scratch("api-stats");
    let src = dir.join("leak.c");
    std::fs::write(
        &src,
        "#include <malloc.h>\n#include <stdlib.h>\n#include <string.h>\n\
         static void *volatile keep[100];\n\
         int main(void) {\n  for (int i = 0; i < 100; i++) { keep[i] = malloc(1000); \
         memset(keep[i], 1, 1000); }\n  malloc_stats();\n  return 0;\n}\n",
    )
    .expect("write leak.c");
    let exe = dir.join("leak");
    let cc = std::process::Command::new("cc")
        .args(["-O2", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .expect("run cc");
    assert!(
        cc.status.success(),
        "{}",
        String::from_utf8_lossy(&cc.stderr)
    );
    let p = Program::new(exe.to_str().expect("a UTF-8 path"), &[], &dir);
    let run = p.run(Some(&library()), &[]);
    assert!(run.status.success(), "{}", run.stderr_text());
    let lines = &run.tagalloc_lines;
    let on_demand = lines
        .iter()
        .filter(|l| l.contains("] malloc_stats: "))
        .count();
    let at_exit = lines.iter().filter(|l| l.contains("] at exit: ")).count();
    assert_eq!((on_demand, at_exit), (4, 4), "{lines:?}");
    // The number before `word` in `line`.
    let figure = |line: &str, word: &str| -> usize {
        let before = &line[..line.find(word).unwrap_or_else(|| panic!("{word}: {line}"))];
        let n = before.trim_end().rsplit(' ').next().unwrap_or_default();
        n.parse().unwrap_or_else(|_| panic!("{word}: {line}"))
    };
    let first = &lines[0];
    let caches = &lines[3];
    // The blocks in the thread's cache count as in use; the program's own are the rest: 100
    // blocks of 1000 bytes (1008 bytes each with the tag, rounded to 16), and nothing of the
    // library's own (the thread's exit is set with a pthread key, which allocates nothing).
    assert_eq!(
        figure(first, " blocks") - figure(caches, " blocks ("),
        100,
        "{first} / {caches}"
    );
    // The cache holds what the last refill left: a batch is half the class's bound of 16 KiB
    // worth (16 blocks of 1008 bytes), so 8 blocks, 7.9 KiB.
    assert!(
        first.contains("in use 106.3 KiB") && caches.contains("hold 7.9 KiB"),
        "{first} / {caches}"
    );
}
