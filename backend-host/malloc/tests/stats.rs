//! Where `TAGALLOC_STATS` puts the exit report, and that it names the program: stderr while it
//! is open; `/tmp/tagalloc-stats-<pid>.txt` when the program closed it (as coreutils do before
//! exit); the file a value with a `/` names, `%p` standing for the pid, else (a file that
//! cannot be written, said in one line) the same file in `/tmp`. Every line names the program,
//! and counts of 1 are singular.

mod common;

use std::process::Command;

use common::{compile_c, library, scratch, Program};

/// Runs `sh -c script` with the library preloaded and `TAGALLOC_STATS=stats`; the pid of the
/// process and what it wrote on stderr.
fn run(script: &str, stats: &str) -> (u32, String) {
    let child = Command::new("sh")
        .args(["-c", script])
        .env("LD_PRELOAD", library())
        .env("TAGALLOC_STATS", stats)
        .env_remove("TAGALLOC_CHECKED")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run sh");
    let pid = child.id();
    let out = child.wait_with_output().expect("wait for sh");
    assert!(out.status.success(), "{script}: {:?}", out.status);
    (pid, String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn the_report_names_the_program_on_stderr() {
    let (pid, stderr) = run("exec true", "1");
    assert!(
        stderr.contains(&format!("tagalloc: true[{pid}] at exit: ")),
        "{stderr}"
    );
}

#[test]
fn with_stderr_closed_the_report_goes_to_a_file() {
    // `exec 2>&-` closes stderr; `true` (the same process, so the same pid) then exits.
    let (pid, stderr) = run("exec 2>&- true", "1");
    assert!(stderr.is_empty(), "{stderr}");
    let file = format!("/tmp/tagalloc-stats-{pid}.txt");
    let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{file}: {e}"));
    let _ = std::fs::remove_file(&file);
    assert!(
        text.contains(&format!("tagalloc: true[{pid}] at exit: "))
            && text.contains(" allocations, "),
        "{text}"
    );
}

#[test]
fn a_path_with_pid_receives_the_report() {
    let dir = scratch("stats-path");
    let pattern = dir.join("stats-%p.txt");
    let (pid, stderr) = run("exec true", pattern.to_str().expect("a UTF-8 path"));
    assert!(!stderr.contains("tagalloc:"), "{stderr}");
    let file = dir.join(format!("stats-{pid}.txt"));
    let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{file:?}: {e}"));
    assert!(
        text.contains(&format!("tagalloc: true[{pid}] at exit: ")),
        "{text}"
    );
}

#[test]
fn every_line_of_the_report_names_the_program() {
    let (pid, stderr) = run("exec true", "1");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 4, "{stderr}");
    for line in lines {
        assert!(
            line.starts_with(&format!("tagalloc: true[{pid}] at exit: ")),
            "{line}"
        );
    }
}

#[test]
fn a_file_that_cannot_be_written_is_said_and_the_report_goes_to_tmp() {
    let (pid, stderr) = run("exec true", "/nonexistent/dir/stats.txt");
    let file = format!("/tmp/tagalloc-stats-{pid}.txt");
    let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{file}: {e}: {stderr}"));
    let _ = std::fs::remove_file(&file);
    assert_eq!(
        stderr,
        format!(
            "tagalloc: cannot write the statistics to /nonexistent/dir/stats.txt: No such file \
             or directory; they go to {file}\n"
        )
    );
    assert!(
        text.contains(&format!("tagalloc: true[{pid}] at exit: ")),
        "{text}"
    );
}

#[cfg_attr(
    not(tagalloc_has_cc),
    ignore = "needs cc on PATH when the tests were built (CI installs it)"
)]
#[test]
fn a_count_of_one_is_singular() {
    let dir = scratch("stats-one");
    let exe = compile_c("tests/c/one-block.c", &dir, &[]);
    let p = Program::new(exe.to_str().expect("a UTF-8 path"), &[], &dir);
    // Checked mode bypasses the thread caches: the one block is the heap's one allocation.
    let run = p.run(Some(&library()), &[("TAGALLOC_CHECKED", "1")]);
    assert!(run.status.success(), "{}", run.stderr_text());
    let stats = run.tagalloc_lines.join("\n");
    for one in ["in 1 region,", "in 1 chunk,", ": 1 allocation, 1 free, "] {
        assert!(stats.contains(one), "{one}: {stats}");
    }
    let plural_one = [
        "regions",
        "blocks",
        "chunks",
        "allocations",
        "frees",
        "requests",
        "hits",
    ]
    .iter()
    .find(|noun| stats.contains(&format!(" 1 {noun}")));
    assert_eq!(plural_one, None, "{stats}");
}
