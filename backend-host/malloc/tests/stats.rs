//! Where `TAGALLOC_STATS` puts the exit report, and that it names the program: stderr while it
//! is open; `/tmp/tagalloc-stats-<pid>.txt` when the program closed it (as coreutils do before
//! exit); the file a value with a `/` names, `%p` standing for the pid.

mod common;

use std::process::Command;

use common::{library, scratch};

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
