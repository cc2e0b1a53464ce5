//! What the tests share: the built library, running a program with and without it preloaded
//! (with a time limit, its output in files), and comparing the two runs.
//!
//! Both runs of a comparison get the same environment (the `C` locale, fixed hash seeds) and
//! differ only in `LD_PRELOAD`; the preloaded run also sets `TAGALLOC_STATS=1`, so that every
//! process of it (a program's children included) writes its heap's figures to stderr at exit:
//! the proof that the library really served it. Those lines are taken out of stderr before
//! the two runs' outputs are compared byte for byte.

#![allow(dead_code)] // each test file uses a part

use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The library under test, built now if it is not up to date: `cargo test` builds a package's
/// integration tests but not its `cdylib` (only a library that can be linked), so the tests
/// build it themselves, once per test program, with the profile they were built with, and take
/// its path from cargo's own report of what it built. Fails with cargo's output if the build
/// fails or names no `libtagalloc_malloc.so`.
pub fn library() -> PathBuf {
    static LIB: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    match LIB.get_or_init(build_library) {
        Ok(p) => p.clone(),
        Err(e) => panic!("{e}"),
    }
}

fn build_library() -> Result<PathBuf, String> {
    // The profile is the name of the directory above `deps/`, where this test program is.
    let exe = std::env::current_exe().map_err(|e| format!("the test's own path: {e}"))?;
    let profile = exe
        .parent()
        .and_then(Path::parent)
        .and_then(Path::file_name)
        .and_then(|n| n.to_str())
        .ok_or_else(|| format!("no profile directory above {}", exe.display()))?;
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(&cargo);
    cmd.current_dir(env!("CARGO_MANIFEST_DIR")).args([
        "build",
        "-p",
        "tagalloc-malloc",
        "--message-format=json-render-diagnostics",
    ]);
    match profile {
        "debug" => {}
        "release" => {
            cmd.arg("--release");
        }
        other => {
            cmd.args(["--profile", other]);
        }
    }
    let out = cmd
        .output()
        .map_err(|e| format!("cannot run {}: {e}", Path::new(&cargo).display()))?;
    let report = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!(
            "cargo build -p tagalloc-malloc ({profile}) failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    // The artifact message lists the files built: take the shared library's.
    let path = report
        .split('"')
        .find(|s| s.ends_with("/libtagalloc_malloc.so"))
        .map(PathBuf::from)
        .ok_or_else(|| {
            format!(
                "cargo build -p tagalloc-malloc ({profile}) named no libtagalloc_malloc.so:\n\
                 {report}"
            )
        })?;
    if !path.is_file() {
        return Err(format!(
            "{} was reported built but is missing",
            path.display()
        ));
    }
    Ok(path)
}

/// A fresh directory for one test, under cargo's scratch directory for integration tests.
pub fn scratch(name: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "malloc-{name}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).expect("create a scratch directory");
    dir
}

/// A file of this crate (`programs/...`, `tests/c/...`).
pub fn source(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(rel)
}

/// What a finished run left.
#[derive(Debug)]
pub struct Run {
    pub status: ExitStatus,
    pub stdout: Vec<u8>,
    /// Without the library's `tagalloc:` statistics lines.
    pub stderr: Vec<u8>,
    /// The library's lines (statistics, reports), one per entry.
    pub tagalloc_lines: Vec<String>,
    pub elapsed: Duration,
}

impl Run {
    pub fn stdout_text(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }

    pub fn stderr_text(&self) -> String {
        String::from_utf8_lossy(&self.stderr).into_owned()
    }

    /// The most allocations any process of the run reported at exit (0 if none reported): the
    /// heap's, plus those its thread caches served without reaching the heap.
    pub fn most_allocations(&self) -> u64 {
        let mut per_process: std::collections::HashMap<&str, u64> = Default::default();
        for l in &self.tagalloc_lines {
            let Some((pid, rest)) = l.split_once(" at exit: ") else {
                continue;
            };
            let figure = rest
                .split_once(" allocations")
                .or_else(|| {
                    rest.split_once(" hits,")
                        .map(|(a, b)| (a.rsplit(' ').next().unwrap_or(a), b))
                })
                .and_then(|(n, _)| n.parse::<u64>().ok());
            if let Some(n) = figure {
                *per_process.entry(pid).or_default() += n;
            }
        }
        per_process.into_values().max().unwrap_or(0)
    }

    /// How many processes reported their statistics at exit.
    pub fn processes_reported(&self) -> usize {
        self.tagalloc_lines
            .iter()
            .filter(|l| l.contains(" allocations, "))
            .count()
    }
}

/// How to run one program.
pub struct Program<'a> {
    pub cmd: &'a str,
    pub args: Vec<String>,
    pub dir: &'a Path,
    pub env: Vec<(&'a str, String)>,
    /// Fed to the program's stdin (nothing: /dev/null).
    pub stdin: Option<Vec<u8>>,
    pub limit: Duration,
}

impl<'a> Program<'a> {
    pub fn new(cmd: &'a str, args: &[&str], dir: &'a Path) -> Self {
        Program {
            cmd,
            args: args.iter().map(|s| s.to_string()).collect(),
            dir,
            env: Vec::new(),
            stdin: None,
            limit: Duration::from_secs(300),
        }
    }

    pub fn env(mut self, key: &'a str, value: impl Into<String>) -> Self {
        self.env.push((key, value.into()));
        self
    }

    pub fn stdin(mut self, bytes: Vec<u8>) -> Self {
        self.stdin = Some(bytes);
        self
    }

    /// Runs it, on glibc (`preload` `None`) or with a library preloaded (and its statistics
    /// asked for). Panics, naming the program, if it cannot start or runs past its limit (it
    /// is killed then).
    pub fn run(&self, preload: Option<&Path>, extra_env: &[(&str, &str)]) -> Run {
        static N: AtomicUsize = AtomicUsize::new(0);
        let tag = N.fetch_add(1, Ordering::Relaxed);
        let out_path = self.dir.join(format!(".out-{tag}"));
        let err_path = self.dir.join(format!(".err-{tag}"));
        let in_path = self.dir.join(format!(".in-{tag}"));
        let stdin = match &self.stdin {
            Some(bytes) => {
                File::create(&in_path)
                    .and_then(|mut f| f.write_all(bytes))
                    .expect("write the program's input");
                Stdio::from(File::open(&in_path).expect("reopen the input"))
            }
            None => Stdio::null(),
        };
        let mut cmd = Command::new(self.cmd);
        cmd.args(&self.args)
            .current_dir(self.dir)
            .env_remove("LD_PRELOAD")
            .env_remove("TAGALLOC_STATS")
            .env_remove("TAGALLOC_CHECKED")
            .env("LC_ALL", "C")
            .env("PYTHONHASHSEED", "0")
            .stdin(stdin)
            .stdout(File::create(&out_path).expect("create the stdout file"))
            .stderr(File::create(&err_path).expect("create the stderr file"));
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        if let Some(lib) = preload {
            cmd.env("LD_PRELOAD", lib).env("TAGALLOC_STATS", "1");
        }
        for (k, v) in extra_env {
            cmd.env(k, v);
        }
        let started = Instant::now();
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", self.cmd));
        let status = loop {
            if let Some(status) = child.try_wait().expect("wait for the program") {
                break status;
            }
            if started.elapsed() > self.limit {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "{} {:?} (preload: {preload:?}) ran past {:?} and was killed",
                    self.cmd, self.args, self.limit
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let elapsed = started.elapsed();
        let stdout = fs::read(&out_path).expect("read stdout");
        let raw_err = fs::read(&err_path).expect("read stderr");
        let (stderr, tagalloc_lines) = split_tagalloc_lines(&raw_err);
        Run {
            status,
            stdout,
            stderr,
            tagalloc_lines,
            elapsed,
        }
    }
}

/// Separates the library's lines (`tagalloc: ...`) from the rest of a stderr.
fn split_tagalloc_lines(raw: &[u8]) -> (Vec<u8>, Vec<String>) {
    let mut rest = Vec::new();
    let mut ours = Vec::new();
    for line in raw.split_inclusive(|&b| b == b'\n') {
        if line.starts_with(b"tagalloc: ") {
            ours.push(String::from_utf8_lossy(line).trim_end().to_string());
        } else {
            rest.extend_from_slice(line);
        }
    }
    (rest, ours)
}

/// The first difference between two outputs, for a failure message.
fn first_difference(a: &[u8], b: &[u8]) -> String {
    let at = a
        .iter()
        .zip(b)
        .position(|(x, y)| x != y)
        .unwrap_or(a.len().min(b.len()));
    let window = |s: &[u8]| {
        let start = at.saturating_sub(80);
        let end = (at + 80).min(s.len());
        String::from_utf8_lossy(&s[start..end]).into_owned()
    };
    format!(
        "lengths {} and {}; first difference at byte {at}:\n--- glibc:\n{}\n--- tagalloc:\n{}",
        a.len(),
        b.len(),
        window(a),
        window(b)
    )
}

/// Runs `program` on glibc and on the library, and checks that both succeed with the same
/// stdout and stderr (byte for byte) and that the library served at least `min_allocations`
/// allocations in one of the run's processes. Returns the two runs.
pub fn same_output(program: &Program, min_allocations: u64) -> (Run, Run) {
    let lib = library();
    let base = program.run(None, &[]);
    assert!(
        base.status.success(),
        "{} {:?} fails on glibc ({}): {}",
        program.cmd,
        program.args,
        base.status,
        base.stderr_text()
    );
    let ours = program.run(Some(&lib), &[]);
    assert!(
        ours.status.success(),
        "{} {:?} fails on tagalloc ({}):\n{}{}\n{}",
        program.cmd,
        program.args,
        ours.status,
        ours.stdout_text(),
        ours.stderr_text(),
        ours.tagalloc_lines.join("\n")
    );
    assert!(
        base.stdout == ours.stdout,
        "{} {:?}: stdout differs: {}",
        program.cmd,
        program.args,
        first_difference(&base.stdout, &ours.stdout)
    );
    assert!(
        base.stderr == ours.stderr,
        "{} {:?}: stderr differs: {}",
        program.cmd,
        program.args,
        first_difference(&base.stderr, &ours.stderr)
    );
    assert!(
        ours.most_allocations() >= min_allocations,
        "{} {:?}: the library reported at most {} allocations (expected at least \
         {min_allocations}): was it preloaded?\n{}",
        program.cmd,
        program.args,
        ours.most_allocations(),
        ours.tagalloc_lines.join("\n")
    );
    let refused: Vec<&String> = ours
        .tagalloc_lines
        .iter()
        .filter(|l| l.contains("refused") && !l.contains(" 0 refused frees"))
        .collect();
    assert!(refused.is_empty(), "refused frees: {refused:?}");
    eprintln!(
        "{} {:?}: same output ({} bytes); {:.2} s on glibc, {:.2} s on tagalloc; {} process(es) \
         on tagalloc, up to {} allocations",
        program.cmd,
        program.args,
        ours.stdout.len(),
        base.elapsed.as_secs_f64(),
        ours.elapsed.as_secs_f64(),
        ours.processes_reported(),
        ours.most_allocations()
    );
    (base, ours)
}

/// Compiles a C file of this crate into `dir` with `cc`, returning the executable.
pub fn compile_c(rel: &str, dir: &Path, extra: &[&str]) -> PathBuf {
    let src = source(rel);
    let exe = dir.join(
        Path::new(rel)
            .file_stem()
            .expect("a file name")
            .to_string_lossy()
            .into_owned(),
    );
    let out = Command::new("cc")
        .args(["-O2", "-g", "-Wall", "-pthread"])
        .args(extra)
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .arg("-ldl")
        .output()
        .expect("run cc");
    assert!(
        out.status.success(),
        "cc {}: {}",
        src.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

/// The Python interpreter itself, not a wrapper script that starts it (pyenv's shims run
/// bash first): asked of `python3` on glibc.
pub fn python() -> String {
    let out = Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .expect("run python3");
    assert!(out.status.success(), "python3 does not run");
    String::from_utf8(out.stdout)
        .expect("a UTF-8 path")
        .trim()
        .to_string()
}
