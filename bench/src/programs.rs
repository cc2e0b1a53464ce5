//! `programs`: real programs (CPython, perl, sqlite3, git, g++) timed with each allocator
//! preloaded: glibc's own malloc (nothing preloaded), jemalloc, mimalloc and tcmalloc from the
//! distribution's packages, and tagalloc's preload library (`backend-host/malloc`). The
//! workloads are the files the library's tests compare outputs with
//! (`backend-host/malloc/programs/`), larger.
//!
//! Each measurement is one process tree started with `LD_PRELOAD` set (children inherit it:
//! g++'s cc1plus and as, git's helpers) by a small runner (this tool, run again: see
//! `measure`), which waits for it with `wait4`, whose resource usage gives the peak resident
//! memory (`ru_maxrss`: the largest of the tree's processes) and the CPU time, and measures the
//! wall time around it. Every program runs once untimed on glibc first (its
//! output is the reference every other run must reproduce, and its files are then in the page
//! cache), then `runs` rounds, each running every allocator once in an order that rotates from
//! round to round; the tables give medians.
//!
//! A peer whose library is missing is skipped with a printed reason, or installed with
//! `apt-get` when asked for (`--install`, as root, not `--quick`); so is a program that is not
//! installed.

use std::collections::hash_map::DefaultHasher;
use std::ffi::OsStr;
use std::fs::{self, File};
use std::hash::Hasher;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use indicatif::ProgressBar;
use serde_json::{json, Value};

use crate::cli::{self, Mode, Opt};
use crate::machine::load_average;
use crate::plot::{self, Group, Grouped};
use crate::report::{self, median, ratio, ratio_header, Better, Table};

/// The name tagalloc's library has in tables and charts.
pub const TAGALLOC: &str = "tagalloc (LD_PRELOAD)";
/// The name of `--baseline`'s library in tables and charts.
pub const BASELINE: &str = "tagalloc baseline (--baseline)";
/// The name of glibc's allocator (the same as in the other benchmarks).
pub const GLIBC: &str = "glibc malloc";

/// The peers from the distribution: name, Debian package, library file.
const PEERS: [(&str, &str, &str); 3] = [
    ("jemalloc", "libjemalloc2", "libjemalloc.so.2"),
    ("mimalloc", "libmimalloc2.0", "libmimalloc.so.2"),
    (
        "tcmalloc",
        "libtcmalloc-minimal4",
        "libtcmalloc_minimal.so.4",
    ),
];

/// Every allocator of the benchmark, in table order.
#[cfg(test)]
pub fn allocator_names() -> Vec<&'static str> {
    let mut names = vec![GLIBC];
    names.extend(PEERS.iter().map(|p| p.0));
    names.push(TAGALLOC);
    names
}

/// What the command line asked of `programs`.
pub struct Options {
    pub runs: usize,
    pub quick: bool,
    /// Whether missing peers may be installed with `apt-get`.
    pub install: bool,
    /// tagalloc's library; built with cargo when not given.
    pub lib: Option<PathBuf>,
    /// Another build of the library, measured as one more allocator ([`BASELINE`]).
    pub baseline: Option<PathBuf>,
    pub plots: Option<PathBuf>,
}

/// The options `programs` takes.
pub const OPTIONS: &[Opt] = &[
    cli::runs("rounds, the median reported (default 3; 1 with --quick, with tiny inputs and no installing)"),
    Opt {
        name: "lib",
        value: Some("PATH"),
        help: "tagalloc's preload library (default: built now with cargo, in this tool's profile, in the checkout this tool was built from)",
    },
    Opt {
        name: "baseline",
        value: Some("PATH"),
        help: "another build of the preload library, run beside tagalloc's as one more allocator (before and after a change, interleaved in the same rounds)",
    },
    Opt {
        name: "install",
        value: None,
        help: "install missing peers with apt-get (as root) instead of skipping them",
    },
];

impl Options {
    /// The defaults: 3 rounds (1 with `--quick`, on tiny inputs), the library built now,
    /// nothing installed, no charts.
    pub fn new(mode: Mode) -> Self {
        Options {
            runs: mode.pick(3, 3, 1),
            quick: mode == Mode::Quick,
            install: false,
            lib: None,
            baseline: None,
            plots: None,
        }
    }

    /// Sets one of [`OPTIONS`] from its value, or says why the value is refused.
    pub fn set(&mut self, name: &str, value: &OsStr) -> Result<(), String> {
        match name {
            "runs" => self.runs = cli::count(value, 1, "rounds")?,
            "lib" => self.lib = Some(value.into()),
            "baseline" => self.baseline = Some(value.into()),
            "install" => self.install = true,
            _ => return Err(cli::not_taken("programs")),
        }
        Ok(())
    }
}

/// An allocator to preload (`None`: glibc's, nothing preloaded).
struct Allocator {
    name: &'static str,
    preload: Option<PathBuf>,
}

/// One program and its input.
struct Workload {
    name: &'static str,
    /// Whether the program runs several threads at once.
    threaded: bool,
    /// What is run, for the report.
    what: String,
    cmd: PathBuf,
    args: Vec<String>,
    env: Vec<(&'static str, String)>,
    stdin: Option<PathBuf>,
    dir: PathBuf,
}

/// One timed run.
#[derive(Clone, Copy)]
struct Sample {
    wall: f64,
    cpu: f64,
    rss_kib: u64,
}

/// What one allocator did on one program over all rounds.
#[derive(Default)]
struct Outcome {
    samples: Vec<Sample>,
    /// The first failure: a bad exit, an output that differs from glibc's, a time-out.
    error: Option<String>,
}

impl Outcome {
    fn wall(&self) -> f64 {
        median(&self.samples.iter().map(|s| s.wall).collect::<Vec<_>>())
    }
    fn cpu(&self) -> f64 {
        median(&self.samples.iter().map(|s| s.cpu).collect::<Vec<_>>())
    }
    fn rss(&self) -> f64 {
        median(
            &self
                .samples
                .iter()
                .map(|s| s.rss_kib as f64 * 1024.0)
                .collect::<Vec<_>>(),
        )
    }
    fn usable(&self) -> bool {
        self.error.is_none() && !self.samples.is_empty()
    }
}

/// The most a run may take before it is killed and counted as failed.
const LIMIT: Duration = Duration::from_secs(300);

/// An executable on `PATH`.
fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// A shared library's path, as the dynamic loader's cache knows it (`ldconfig -p`), else in
/// the usual directories.
fn find_library(file: &str) -> Option<PathBuf> {
    let cached = ["ldconfig", "/sbin/ldconfig", "/usr/sbin/ldconfig"]
        .iter()
        .find_map(|c| Command::new(c).arg("-p").output().ok())
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    let from_cache = cached.lines().find_map(|l| {
        let (name, path) = l.trim().split_once(" => ")?;
        (name.split_whitespace().next() == Some(file)).then(|| PathBuf::from(path.trim()))
    });
    from_cache.filter(|p| p.is_file()).or_else(|| {
        [
            "/usr/lib/x86_64-linux-gnu",
            "/lib/x86_64-linux-gnu",
            "/usr/lib/aarch64-linux-gnu",
            "/usr/lib64",
            "/usr/lib",
            "/usr/local/lib",
        ]
        .iter()
        .map(|d| Path::new(d).join(file))
        .find(|p| p.is_file())
    })
}

/// Installs Debian packages (`apt-get install`, after `apt-get update` if the first try fails).
fn apt_install(packages: &[&str]) -> Result<(), String> {
    // SAFETY: `geteuid` has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err("not running as root".into());
    }
    if on_path("apt-get").is_none() {
        return Err("no apt-get".into());
    }
    let install = || {
        Command::new("apt-get")
            .args(["install", "-y", "--no-install-recommends"])
            .args(packages)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .output()
    };
    let first = install().map_err(|e| e.to_string())?;
    if first.status.success() {
        return Ok(());
    }
    let _ = Command::new("apt-get")
        .arg("update")
        .env("DEBIAN_FRONTEND", "noninteractive")
        .output();
    let second = install().map_err(|e| e.to_string())?;
    if second.status.success() {
        Ok(())
    } else {
        let text = String::from_utf8_lossy(&second.stderr);
        Err(format!(
            "apt-get install failed: {}",
            text.lines().last().unwrap_or("(no message)")
        ))
    }
}

/// tagalloc's preload library: the one named, or built now with cargo, in the profile this
/// tool was built with, its path taken from cargo's report of what it built.
fn tagalloc_library(named: Option<&Path>) -> Result<PathBuf, String> {
    if let Some(p) = named {
        return preload_path("--lib", p);
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(&cargo);
    cmd.current_dir(env!("CARGO_MANIFEST_DIR")).args([
        "build",
        "-p",
        "tagalloc-malloc",
        "--message-format=json-render-diagnostics",
    ]);
    if !cfg!(debug_assertions) {
        cmd.arg("--release");
    }
    let how = "build it with `cargo build --release -p tagalloc-malloc` and pass \
               --lib target/release/libtagalloc_malloc.so";
    let out = cmd
        .output()
        .map_err(|e| format!("cannot run cargo to build tagalloc's library ({e}): {how}"))?;
    if !out.status.success() {
        return Err(format!(
            "cargo build -p tagalloc-malloc failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let report = String::from_utf8_lossy(&out.stdout);
    report
        .split('"')
        .find(|s| s.ends_with("/libtagalloc_malloc.so"))
        .map(PathBuf::from)
        .filter(|p| p.is_file())
        .ok_or_else(|| format!("cargo built no libtagalloc_malloc.so: {how}"))
}

/// The allocators: glibc, each peer found (installed first if missing and allowed), tagalloc;
/// and a line for each peer skipped.
fn allocators(
    opts: &Options,
    lib: PathBuf,
    baseline: Option<PathBuf>,
) -> (Vec<Allocator>, Vec<String>) {
    let mut found: Vec<Option<PathBuf>> = PEERS.iter().map(|p| find_library(p.2)).collect();
    let mut skipped = Vec::new();
    let missing: Vec<&str> = PEERS
        .iter()
        .zip(&found)
        .filter(|(_, f)| f.is_none())
        .map(|(p, _)| p.1)
        .collect();
    let install_error = if missing.is_empty() {
        None
    } else if opts.quick {
        Some("--quick installs nothing".to_string())
    } else if !opts.install {
        Some("not asked to (--install)".to_string())
    } else {
        eprintln!("tagalloc-bench: installing {}", missing.join(" "));
        apt_install(&missing).err()
    };
    for (i, p) in PEERS.iter().enumerate() {
        if found[i].is_none() {
            found[i] = find_library(p.2);
        }
        if found[i].is_none() {
            skipped.push(format!(
                "{} skipped: {} (Debian package {}) not found{}",
                p.0,
                p.2,
                p.1,
                install_error
                    .as_ref()
                    .map_or(String::new(), |e| format!(", not installed: {e}"))
            ));
        }
    }
    let mut list = vec![Allocator {
        name: GLIBC,
        preload: None,
    }];
    for (p, f) in PEERS.iter().zip(found) {
        if let Some(path) = f {
            list.push(Allocator {
                name: p.0,
                preload: Some(path),
            });
        }
    }
    if let Some(base) = baseline {
        list.push(Allocator {
            name: BASELINE,
            preload: Some(base),
        });
    }
    list.push(Allocator {
        name: TAGALLOC,
        preload: Some(lib),
    });
    (list, skipped)
}

fn programs_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../backend-host/malloc/programs")
}

fn path_arg(p: &Path) -> String {
    p.display().to_string()
}

/// The workloads whose programs are installed, set up in `work` (inputs written, a git
/// repository built), and a line for each one skipped.
fn workloads(quick: bool, work: &Path) -> Result<(Vec<Workload>, Vec<String>), String> {
    let src = fs::canonicalize(programs_dir())
        .map_err(|e| format!("{}: {e}", programs_dir().display()))?;
    let mut list = Vec::new();
    let mut skipped = Vec::new();
    let pick = |full: usize, small: usize| if quick { small } else { full };
    let mut skip = |name: &str, program: &str| {
        skipped.push(format!("{name} skipped: {program} is not installed"));
    };

    // The interpreter itself (pyenv and similar put a shell script first on PATH).
    let python = on_path("python3").and_then(|_| {
        let out = Command::new("python3")
            .args(["-c", "import sys; print(sys.executable)"])
            .output()
            .ok()?;
        let p = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        p.is_file().then_some(p)
    });
    match &python {
        Some(py) => {
            let script = |f: &str| path_arg(&src.join(f));
            let with_malloc = vec![("PYTHONMALLOC", "malloc".to_string())];
            let n = pick(15_000, 1_000).to_string();
            list.push(Workload {
                name: "python json",
                threaded: false,
                what: format!("json_roundtrip.py {n}, PYTHONMALLOC=malloc"),
                cmd: py.clone(),
                args: vec![script("json_roundtrip.py"), n.clone()],
                env: with_malloc.clone(),
                stdin: None,
                dir: work.to_path_buf(),
            });
            list.push(Workload {
                name: "python json, pymalloc",
                threaded: false,
                what: format!(
                    "json_roundtrip.py {n}, CPython's own small-object allocator (its default)"
                ),
                cmd: py.clone(),
                args: vec![script("json_roundtrip.py"), n],
                env: Vec::new(),
                stdin: None,
                dir: work.to_path_buf(),
            });
            let n = pick(200_000, 10_000).to_string();
            list.push(Workload {
                name: "python dicts",
                threaded: false,
                what: format!("dicts_lists.py {n}, PYTHONMALLOC=malloc"),
                cmd: py.clone(),
                args: vec![script("dicts_lists.py"), n],
                env: with_malloc.clone(),
                stdin: None,
                dir: work.to_path_buf(),
            });
            let n = pick(300, 20).to_string();
            list.push(Workload {
                name: "python threads",
                threaded: true,
                what: format!("threads.py {n} (4 threads), PYTHONMALLOC=malloc"),
                cmd: py.clone(),
                args: vec![script("threads.py"), n],
                env: with_malloc,
                stdin: None,
                dir: work.to_path_buf(),
            });
        }
        None => skip("python", "python3"),
    }

    match on_path("perl") {
        Some(perl) => {
            let n = pick(300_000, 10_000).to_string();
            list.push(Workload {
                name: "perl",
                threaded: false,
                what: format!("words.pl {n}"),
                cmd: perl,
                args: vec![path_arg(&src.join("words.pl")), n],
                env: Vec::new(),
                stdin: None,
                dir: work.to_path_buf(),
            });
        }
        None => skip("perl", "perl"),
    }

    match on_path("sqlite3") {
        Some(sqlite) => {
            let rows = pick(120_000, 2_000);
            let sql = fs::read_to_string(src.join("queries.sql"))
                .map_err(|e| format!("queries.sql: {e}"))?;
            let input = work.join("queries.sql");
            fs::write(&input, sql.replace("@ROWS@", &rows.to_string()))
                .map_err(|e| format!("{}: {e}", input.display()))?;
            list.push(Workload {
                name: "sqlite3",
                threaded: false,
                what: format!("queries.sql, {rows} rows, in memory"),
                cmd: sqlite,
                args: Vec::new(),
                env: Vec::new(),
                stdin: Some(input),
                dir: work.to_path_buf(),
            });
        }
        None => skip("sqlite3", "sqlite3"),
    }

    match (on_path("git"), on_path("awk")) {
        (Some(git), Some(_)) => {
            let commits = pick(10_000, 50);
            let repo = work.join("repo");
            build_repository(&repo, &src.join("history.awk"), commits)?;
            let git_env = vec![
                ("GIT_CONFIG_NOSYSTEM", "1".to_string()),
                ("GIT_CONFIG_GLOBAL", "/dev/null".to_string()),
                ("HOME", path_arg(work)),
            ];
            list.push(Workload {
                name: "git log -p",
                threaded: false,
                what: format!("git log -p --stat, {commits} commits"),
                cmd: git.clone(),
                args: ["--no-pager", "log", "-p", "--stat", "--no-color"]
                    .map(String::from)
                    .to_vec(),
                env: git_env.clone(),
                stdin: None,
                dir: repo.clone(),
            });
            list.push(Workload {
                name: "git repack",
                threaded: true,
                what: format!("git repack -a -d -f, 2 threads, {commits} commits"),
                cmd: git,
                args: ["-c", "pack.threads=2", "repack", "-a", "-d", "-f", "-q"]
                    .map(String::from)
                    .to_vec(),
                env: git_env,
                stdin: None,
                dir: repo,
            });
        }
        (None, _) => skip("git", "git"),
        (_, None) => skip("git", "awk"),
    }

    match on_path("g++") {
        Some(gxx) => {
            let (file, opt) = if quick {
                let tiny = work.join("tiny.cpp");
                fs::write(
                    &tiny,
                    "#include <vector>\nint main() { std::vector<int> v{1, 2}; return \
                     int(v.size()) - 2; }\n",
                )
                .map_err(|e| format!("{}: {e}", tiny.display()))?;
                (tiny, "-O0")
            } else {
                (src.join("containers.cpp"), "-O2")
            };
            list.push(Workload {
                name: "g++",
                threaded: false,
                what: format!(
                    "g++ -std=c++17 {opt} -c {}",
                    file.file_name()
                        .map_or(String::new(), |f| f.to_string_lossy().into())
                ),
                cmd: gxx,
                args: vec![
                    "-std=c++17".into(),
                    opt.into(),
                    "-frandom-seed=tagalloc".into(),
                    "-c".into(),
                    path_arg(&file),
                    "-o".into(),
                    path_arg(&work.join("out.o")),
                ],
                env: Vec::new(),
                stdin: None,
                dir: work.to_path_buf(),
            });
        }
        None => skip("g++", "g++"),
    }
    Ok((list, skipped))
}

/// A repository whose history `git fast-import` builds from `history.awk`'s stream.
fn build_repository(repo: &Path, awk: &Path, commits: usize) -> Result<(), String> {
    let fail = |what: &str, out: &std::process::Output| {
        format!("{what}: {}", String::from_utf8_lossy(&out.stderr))
    };
    let _ = fs::remove_dir_all(repo);
    let init = Command::new("git")
        .args(["init", "-q", "-b", "main"])
        .arg(repo)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .map_err(|e| format!("git init: {e}"))?;
    if !init.status.success() {
        return Err(fail("git init", &init));
    }
    let stream = Command::new("awk")
        .arg("-v")
        .arg(format!("n={commits}"))
        .arg("-v")
        .arg("lines=60")
        .arg("-f")
        .arg(awk)
        .output()
        .map_err(|e| format!("awk: {e}"))?;
    if !stream.status.success() {
        return Err(fail("awk", &stream));
    }
    let stream_file = repo.join("history.stream");
    fs::write(&stream_file, &stream.stdout).map_err(|e| e.to_string())?;
    let import = Command::new("git")
        .args(["fast-import", "--quiet"])
        .current_dir(repo)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .stdin(File::open(&stream_file).map_err(|e| e.to_string())?)
        .output()
        .map_err(|e| format!("git fast-import: {e}"))?;
    let _ = fs::remove_file(&stream_file);
    if !import.status.success() {
        return Err(fail("git fast-import", &import));
    }
    Ok(())
}

/// A hash of a file's bytes (an output to compare with the reference run's).
fn hash_file(path: &Path) -> Result<u64, String> {
    let mut f = File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut h = DefaultHasher::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = f.read(&mut buf).map_err(|e| e.to_string())?;
        if n == 0 {
            return Ok(h.finish());
        }
        h.write(&buf[..n]);
    }
}

/// The hidden first argument that makes this tool a runner (see [`runner_main`]).
pub const RUNNER: &str = "--measure-child";

/// Runs `w` once with `a` preloaded: the sample and a hash of its stdout, or why it failed.
///
/// The program is started by a fresh copy of this tool (a runner, [`runner_main`]), not by the
/// tool itself: Linux keeps a process's peak resident memory across `exec`, and a child that
/// this tool spawned would start with the tool's own (about 40 MiB, its data and charts
/// library), which would hide every program that stays below it. The runner is small when it
/// spawns the program, and it measures the program's tree with `wait4` as `/usr/bin/time` does.
fn measure(w: &Workload, a: &Allocator, out: &Path) -> Result<(Sample, u64), String> {
    let stdin = match &w.stdin {
        Some(p) => Stdio::from(File::open(p).map_err(|e| format!("{}: {e}", p.display()))?),
        None => Stdio::null(),
    };
    let stdout = File::create(out).map_err(|e| format!("{}: {e}", out.display()))?;
    let result = out.with_extension("measured");
    let _ = fs::remove_file(&result);
    let me = std::env::current_exe().map_err(|e| format!("this tool's path: {e}"))?;
    let mut cmd = Command::new(me);
    cmd.arg(RUNNER)
        .arg(&result)
        .arg(a.preload.as_deref().unwrap_or(Path::new("")))
        .arg(&w.cmd)
        .args(&w.args)
        .current_dir(&w.dir)
        .env_remove("LD_PRELOAD")
        .env_remove("TAGALLOC_STATS")
        .env_remove("TAGALLOC_CHECKED")
        .env("LC_ALL", "C")
        .env("PYTHONHASHSEED", "0")
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .stdin(stdin)
        .stdout(stdout)
        .stderr(Stdio::null());
    // Its own process group, so that a run past the limit is killed with all its processes.
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    for (k, v) in &w.env {
        cmd.env(k, v);
    }
    let started = Instant::now();
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot start the runner for {}: {e}", w.cmd.display()))?;
    let group = child.id() as libc::pid_t;
    // A watchdog kills a run that hangs, so that one bad allocator cannot stall the tool.
    let done = Arc::new(AtomicBool::new(false));
    let watch = {
        let done = done.clone();
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                if started.elapsed() > LIMIT {
                    // SAFETY: `group` is the process group of our child, not yet reaped
                    // (`done` is still false); killing it touches nothing else.
                    unsafe { libc::kill(-group, libc::SIGKILL) };
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };
    let status = child.wait();
    done.store(true, Ordering::Relaxed);
    let _ = watch.join();
    let status = status.map_err(|e| format!("waiting for the runner: {e}"))?;
    if started.elapsed() > LIMIT {
        return Err(format!("killed after {} s", LIMIT.as_secs()));
    }
    let text = fs::read_to_string(&result).map_err(|_| format!("the runner failed ({status})"))?;
    let fields: Vec<&str> = text.split_whitespace().collect();
    let field = |i: usize| fields.get(i).copied().unwrap_or("");
    match field(0) {
        "exit" if field(1) == "0" => {}
        "exit" => return Err(format!("exit status {}", field(1))),
        "signal" => return Err(format!("killed by signal {}", field(1))),
        _ => return Err(format!("the runner says: {}", text.trim())),
    }
    let num = |i: usize| {
        field(i)
            .parse::<f64>()
            .map_err(|_| format!("runner output `{text}`"))
    };
    let sample = Sample {
        wall: num(2)?,
        cpu: num(3)?,
        rss_kib: num(4)? as u64,
    };
    Ok((sample, hash_file(out)?))
}

/// The runner: `tagalloc-bench --measure-child RESULT PRELOAD PROGRAM ARGS...` starts PROGRAM
/// (with `LD_PRELOAD=PRELOAD` unless PRELOAD is empty; stdin, stdout and stderr inherited),
/// waits for it with `wait4`, and writes to the file RESULT one line: `exit CODE` or
/// `signal NUMBER`, then the wall time and the CPU time in seconds and the peak resident
/// memory in KiB of the program's process tree. Returns the exit code for the runner.
pub fn runner_main(args: &[std::ffi::OsString]) -> u8 {
    let [result, preload, program, rest @ ..] = args else {
        eprintln!("{RUNNER} RESULT PRELOAD PROGRAM [ARGS...]");
        return 2;
    };
    let mut cmd = Command::new(program);
    cmd.args(rest);
    if !preload.is_empty() {
        cmd.env("LD_PRELOAD", preload);
    }
    let started = Instant::now();
    let line = match cmd.spawn() {
        Err(e) => format!("error cannot start {}: {e}", Path::new(program).display()),
        Ok(child) => {
            let pid = child.id() as libc::pid_t;
            let mut status = 0;
            // SAFETY: plain data, for which all zeros is a valid value.
            let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
            // SAFETY: `pid` is our child; `status` and `usage` are valid for writes. The
            // `Child` is dropped without waiting, so the child is reaped only here.
            let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
            let wall = started.elapsed().as_secs_f64();
            drop(child);
            let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
            if r != pid {
                format!("error wait4: {}", std::io::Error::last_os_error())
            } else {
                let how = if libc::WIFEXITED(status) {
                    format!("exit {}", libc::WEXITSTATUS(status))
                } else {
                    format!("signal {}", libc::WTERMSIG(status))
                };
                format!(
                    "{how} {wall:.6} {:.6} {}",
                    secs(usage.ru_utime) + secs(usage.ru_stime),
                    usage.ru_maxrss
                )
            }
        }
    };
    match fs::write(result, line + "\n") {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("{}: {e}", Path::new(result).display());
            1
        }
    }
}

/// `path` as `LD_PRELOAD` needs it: an absolute path to a file. The programs run in their own
/// directories, where a relative path names nothing, and the loader then runs them on glibc's
/// allocator with no word the benchmark sees.
fn preload_path(flag: &str, path: &Path) -> Result<PathBuf, String> {
    let p = fs::canonicalize(path).map_err(|e| format!("{flag} {}: {e}", path.display()))?;
    if p.is_file() {
        Ok(p)
    } else {
        Err(format!("{flag} {}: not a file", path.display()))
    }
}

/// Runs the benchmark: markdown and JSON.
pub fn run(opts: &Options, bar: &ProgressBar) -> Result<(String, Value), String> {
    let lib = tagalloc_library(opts.lib.as_deref())?;
    let baseline = match &opts.baseline {
        Some(b) => Some(preload_path("--baseline", b)?),
        None => None,
    };
    let (allocs, mut skipped) = allocators(opts, lib.clone(), baseline);
    let work = std::env::temp_dir().join(format!("tagalloc-bench-programs-{}", std::process::id()));
    let _ = fs::remove_dir_all(&work);
    fs::create_dir_all(&work).map_err(|e| format!("{}: {e}", work.display()))?;
    let result = run_in(opts, bar, &allocs, &work, &lib, &mut skipped);
    let _ = fs::remove_dir_all(&work);
    result
}

fn run_in(
    opts: &Options,
    bar: &ProgressBar,
    allocs: &[Allocator],
    work: &Path,
    lib: &Path,
    skipped: &mut Vec<String>,
) -> Result<(String, Value), String> {
    bar.set_message("setting up the programs' inputs");
    let (loads, also_skipped) = workloads(opts.quick, work)?;
    skipped.extend(also_skipped);
    for s in skipped.iter() {
        eprintln!("tagalloc-bench: {s}");
    }
    let load_before = load_average();
    let out = work.join("stdout");
    bar.set_length((loads.len() * (1 + opts.runs * allocs.len())) as u64);
    let mut results: Vec<Vec<Outcome>> = Vec::new();
    let mut references: Vec<Option<u64>> = Vec::new();
    for w in &loads {
        bar.set_message(format!("{}: reference run on glibc", w.name));
        let reference = measure(w, &allocs[0], &out).map(|(_, h)| h);
        bar.inc(1);
        let mut outcomes: Vec<Outcome> = allocs.iter().map(|_| Outcome::default()).collect();
        if let Err(e) = &reference {
            for o in &mut outcomes {
                o.error = Some(format!("the reference run on glibc failed: {e}"));
            }
        }
        results.push(outcomes);
        references.push(reference.ok());
    }
    for round in 0..opts.runs {
        for (wi, w) in loads.iter().enumerate() {
            let Some(reference) = references[wi] else {
                bar.inc(allocs.len() as u64);
                continue;
            };
            for k in 0..allocs.len() {
                let ai = (k + round + wi) % allocs.len();
                let a = &allocs[ai];
                bar.set_message(format!("round {}: {} on {}", round + 1, w.name, a.name));
                let o = &mut results[wi][ai];
                if o.error.is_none() {
                    match measure(w, a, &out) {
                        Ok((s, h)) if h == reference => o.samples.push(s),
                        Ok(_) => o.error = Some("output differs from glibc's".into()),
                        Err(e) => o.error = Some(e),
                    }
                }
                bar.inc(1);
            }
        }
    }
    let load_after = load_average();
    Ok(render(
        opts,
        allocs,
        &loads,
        &results,
        skipped,
        lib,
        (&load_before, &load_after),
    ))
}

/// The tables (markdown), the JSON and the charts.
fn render(
    opts: &Options,
    allocs: &[Allocator],
    loads: &[Workload],
    results: &[Vec<Outcome>],
    skipped: &[String],
    lib: &Path,
    load: (&str, &str),
) -> (String, Value) {
    let mut md = format!(
        "## Real programs\n\nEach program runs once untimed on glibc (its output is the \
         reference), then {} with every allocator preloaded (`LD_PRELOAD`; glibc: nothing \
         preloaded), allocators interleaved in an order that rotates between rounds. Medians. \
         Wall time around the process tree; peak resident memory is `ru_maxrss` from `wait4` \
         (the largest process of the tree: cc1plus for g++); CPU is user + system time. A run \
         whose output differs from glibc's counts as failed. tagalloc: `{}`. Load average \
         (1, 5, 15 min) before: {}; after: {}; {} cores.\n",
        report::plural(opts.runs, "round"),
        lib.display(),
        load.0,
        load.1,
        std::thread::available_parallelism().map_or(0, |n| n.get()),
    );
    if !skipped.is_empty() {
        md.push('\n');
        for s in skipped {
            md.push_str(&format!("- {s}\n"));
        }
    }

    // tagalloc against every other allocator, per program.
    let t = allocs.len() - 1;
    let others: Vec<usize> = (0..t).collect();
    let mut cols: Vec<(String, bool)> = vec![("program".into(), false), ("threads".into(), false)];
    for &i in &others {
        cols.push((
            format!(
                "time: tagalloc {}",
                ratio_header(allocs[i].name, Better::Lower)
            ),
            true,
        ));
    }
    cols.push((
        format!(
            "time: tagalloc {}",
            ratio_header("fastest other", Better::Lower)
        ),
        true,
    ));
    cols.push((
        format!(
            "CPU: tagalloc {}",
            ratio_header("least of the others", Better::Lower)
        ),
        true,
    ));
    for &i in &others {
        cols.push((
            format!(
                "peak RSS: tagalloc {}",
                ratio_header(allocs[i].name, Better::Lower)
            ),
            true,
        ));
    }
    cols.push((
        format!(
            "peak RSS: tagalloc {}",
            ratio_header("smallest other", Better::Lower)
        ),
        true,
    ));
    let col_refs: Vec<(&str, bool)> = cols.iter().map(|(s, r)| (s.as_str(), *r)).collect();
    let mut summary = Table::new(&col_refs);
    for (w, r) in loads.iter().zip(results) {
        let mine = &r[t];
        let mut row = vec![
            w.name.to_string(),
            if w.threaded { "yes" } else { "no" }.to_string(),
        ];
        let best = |f: &dyn Fn(&Outcome) -> f64| {
            others
                .iter()
                .filter(|&&i| r[i].usable())
                .map(|&i| f(&r[i]))
                .fold(f64::NAN, f64::min)
        };
        let of = |o: &Outcome, f: &dyn Fn(&Outcome) -> f64| o.usable().then(|| f(o));
        let mine_time = of(mine, &|o| o.wall());
        let mine_rss = of(mine, &|o| o.rss());
        for &i in &others {
            row.push(match (mine_time, of(&r[i], &|o| o.wall())) {
                (Some(m), b) => ratio(m, b),
                _ => "—".into(),
            });
        }
        let fastest = best(&|o| o.wall());
        row.push(mine_time.map_or("—".into(), |m| ratio(m, Some(fastest))));
        let least_cpu = best(&|o| o.cpu());
        row.push(of(mine, &|o| o.cpu()).map_or("—".into(), |m| ratio(m, Some(least_cpu))));
        for &i in &others {
            row.push(match (mine_rss, of(&r[i], &|o| o.rss())) {
                (Some(m), b) => ratio(m, b),
                _ => "—".into(),
            });
        }
        let smallest = best(&|o| o.rss());
        row.push(mine_rss.map_or("—".into(), |m| ratio(m, Some(smallest))));
        summary.row(row);
    }
    md.push_str("\n### tagalloc against each allocator\n\n");
    md.push_str(&summary.render());

    let mut json_programs = Vec::new();
    for (w, r) in loads.iter().zip(results) {
        let base = r[0].usable().then(|| (r[0].wall(), r[0].rss(), r[0].cpu()));
        let mut table = Table::new(&[
            ("allocator", false),
            ("wall (s)", true),
            (&ratio_header("glibc", Better::Lower), true),
            ("peak RSS", true),
            (&ratio_header("glibc", Better::Lower), true),
            ("CPU (s)", true),
            (&ratio_header("glibc", Better::Lower), true),
        ]);
        let mut json_allocs = Vec::new();
        for (a, o) in allocs.iter().zip(r) {
            if let Some(e) = &o.error {
                table.row(vec![a.name.into(), format!("error: {e}")]);
            } else {
                table.row(vec![
                    a.name.into(),
                    format!("{:.3}", o.wall()),
                    ratio(o.wall(), base.map(|b| b.0)),
                    report::bytes(o.rss() as u64),
                    ratio(o.rss(), base.map(|b| b.1)),
                    format!("{:.3}", o.cpu()),
                    ratio(o.cpu(), base.map(|b| b.2)),
                ]);
            }
            json_allocs.push(json!({
                "allocator": a.name,
                "library": a.preload.as_ref().map(|p| p.display().to_string()),
                "error": o.error,
                "wall_s": o.samples.iter().map(|s| s.wall).collect::<Vec<_>>(),
                "cpu_s": o.samples.iter().map(|s| s.cpu).collect::<Vec<_>>(),
                "peak_rss_bytes": o.samples.iter().map(|s| s.rss_kib * 1024).collect::<Vec<_>>(),
                "median_wall_s": o.usable().then(|| o.wall()),
                "median_peak_rss_bytes": o.usable().then(|| o.rss()),
            }));
        }
        md.push_str(&format!(
            "\n### {}{}\n\n`{}`\n\n",
            w.name,
            if w.threaded { " (threaded)" } else { "" },
            w.what
        ));
        md.push_str(&table.render());
        json_programs.push(json!({
            "program": w.name,
            "threaded": w.threaded,
            "what": w.what,
            "results": json_allocs,
        }));
    }

    if let Some(dir) = &opts.plots {
        let charts = [
            (
                "programs-time.svg",
                "Real programs: wall time ÷ glibc's, median (lower is better)",
                "wall time ÷ glibc's (lower is better)",
                true,
            ),
            (
                "programs-rss.svg",
                "Real programs: peak resident memory ÷ glibc's, median (lower is better)",
                "peak resident memory ÷ glibc's (lower is better)",
                false,
            ),
        ];
        for (file, title, x_desc, time) in charts {
            let groups: Vec<Group> = loads
                .iter()
                .zip(results)
                .map(|(w, r)| {
                    let f = |o: &Outcome| if time { o.wall() } else { o.rss() };
                    let base = r[0].usable().then(|| f(&r[0]));
                    Group {
                        label: if w.threaded {
                            format!("{} (threads)", w.name)
                        } else {
                            w.name.to_string()
                        },
                        bars: allocs
                            .iter()
                            .zip(r)
                            .skip(1)
                            .map(|(a, o)| {
                                let v = match (o.usable(), base) {
                                    (true, Some(b)) if b > 0.0 => f(o) / b,
                                    _ => f64::NAN,
                                };
                                (a.name.to_string(), v)
                            })
                            .collect(),
                    }
                })
                .collect();
            let notes = [format!(
                "Medians of {}; the dashed line is glibc's malloc (nothing preloaded). Load \
                 average before: {}; after: {}.",
                report::plural(opts.runs, "round"),
                load.0,
                load.1
            )];
            let chart = Grouped {
                title,
                x_desc,
                reference: Some((1.0, "glibc")),
                notes: &notes,
            };
            if let Err(e) = plot::grouped_bars(&dir.join(file), &chart, &groups) {
                md.push_str(&format!("\n(chart {file} not written: {e})\n"));
            }
        }
    }

    let json = json!({
        "runs": opts.runs,
        "load_average_before": load.0,
        "load_average_after": load.1,
        "tagalloc_library": lib.display().to_string(),
        "skipped": skipped,
        "programs": json_programs,
    });
    (md, json)
}

#[cfg(test)]
mod preload_tests {
    use super::*;

    #[test]
    fn a_relative_preload_path_becomes_absolute_and_a_missing_one_is_refused() {
        // `cargo test` runs in the package's directory, where `Cargo.toml` is a file.
        let p = preload_path("--lib", Path::new("Cargo.toml")).unwrap();
        assert!(
            p.is_absolute() && p.ends_with("bench/Cargo.toml"),
            "{}",
            p.display()
        );
        let e = preload_path("--baseline", Path::new("no/such.so")).unwrap_err();
        assert!(e.starts_with("--baseline no/such.so: "), "{e}");
        assert!(preload_path("--lib", Path::new("src")).is_err());
    }
}
