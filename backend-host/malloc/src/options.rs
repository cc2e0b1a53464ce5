//! What the environment asks for, read once, before the first allocation is served if
//! possible, without allocating.
//!
//! - `TAGALLOC_CHECKED`: `1`, every call goes to the pool
//!   under its lock (no thread caches), and every `free`, `realloc` and
//!   `malloc_usable_size` proves its pointer the payload of a live block against checked
//!   mode's bitmaps of the blocks handed out (`crate::marks`, one bit per granule of each
//!   region, 0.8 % of the regions' bytes; `InlineHeap::marked_usable_size`): `O(1)` plus a
//!   scan of the block's own bits (its size / 1024 words), which tells a pointer into a block
//!   from one whose preceding bytes happen to read as a tag and finds a size grown over a live
//!   neighbour. Without it the proof is `O(1)` (`InlineHeap::usable_size_in`): the address in
//!   one of the pool's regions, the tags the free follows plausible. Either way a double free
//!   or a foreign pointer is detected (see `TAGALLOC_ON_MISUSE`), and damaged tags are
//!   reported and abort.
//! - `TAGALLOC_ON_MISUSE`: what a detected double free or foreign pointer does. `abort` (the
//!   default, and what glibc, Scudo and hardened_malloc do): reported on stderr, then the
//!   process aborts. `continue`: the call is refused, counted and the first one reported, and
//!   the program goes on (what the Rust API always does: it returns the error). Damaged tags
//!   abort either way.
//! - `TAGALLOC_STATS`: `1`, the heap's figures are written when the process exits
//!   (an `atexit` handler), each line naming the program and its pid: to stderr while it is
//!   open, else (a program that closed it, as coreutils do) to
//!   `/tmp/tagalloc-stats-<pid>.txt`. A value holding a `/` is a file to append them to
//!   instead, `%p` in it standing for the pid (`TAGALLOC_STATS=./stats-%p.txt`); one that
//!   cannot be opened is reported and the figures go to `/tmp/tagalloc-stats-<pid>.txt`.
//!
//! `0` or nothing is the default of the first and the last. **Every value is checked**: one the
//! library does not accept is reported in one line on stderr (variable, value, what is
//! accepted, the default used instead), as is a `TAGALLOC_*` variable that nothing in the
//! project reads (with the known name nearest to it), since a misspelt or malformed setting
//! that is silently ignored looks like one that works. The project's variables, whoever reads
//! them: `docs/environment.md`.
//!
//! **No allocation, no recursion.** The pool needs no initialisation at all (it is a `const`
//! in a `static`: nothing is mapped until the first allocation), so the allocator works before
//! and while this runs. Starting means reading the environment with libc's `getenv` and
//! `environ` (no allocation, unlike `std::env`), registering the fork handlers and
//! the exit handler (the calling thread's cache, and the statistics). `pthread_atfork` and `atexit`
//! may themselves call `malloc` (when their preallocated tables are full); such a call, and any
//! call made by another thread meanwhile, finds the start under way and is served at once with the
//! defaults, instead of waiting for a start that is waiting for it. Nothing here uses `dlsym`,
//! Rust's `std::env`, formatting or thread-local destructors.

use core::ffi::CStr;
use core::sync::atomic::{AtomicBool, AtomicU8, Ordering};

use crate::lock::register_fork_handlers;
use crate::report;

const NOT_STARTED: u8 = 0;
const STARTING: u8 = 1;
const READY: u8 = 2;

/// Where the start is: `NOT_STARTED`, then `STARTING` (one thread is reading the environment
/// and registering handlers), then `READY`.
static STATE: AtomicU8 = AtomicU8::new(NOT_STARTED);
static CHECKED: AtomicBool = AtomicBool::new(false);
static STATS: AtomicBool = AtomicBool::new(false);

/// Starts the library if it has not started: reads the environment, registers the handlers
/// (`at_exit`: the calling thread's cache back to the pool at exit, and the statistics, when
/// `TAGALLOC_STATS` asks for them). Returns at
/// once if another call (this thread's, further up the stack, or another thread's) is starting
/// it.
#[inline]
pub(crate) fn start(at_exit: extern "C" fn()) {
    if STATE.load(Ordering::Acquire) != READY {
        start_now(at_exit);
    }
}

#[cold]
#[inline(never)]
fn start_now(at_exit: extern "C" fn()) {
    if STATE
        .compare_exchange(NOT_STARTED, STARTING, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        return;
    }
    report_unknown_variables();
    with_value(c"TAGALLOC_CHECKED", |v| match v {
        None | Some(b"" | b"0") => {}
        Some(b"1") => CHECKED.store(true, Ordering::Relaxed),
        Some(v) => report::malformed(
            "TAGALLOC_CHECKED",
            v,
            "neither \"0\" nor \"1\"",
            "0 (pointers proven in O(1) from their tags)",
        ),
    });
    with_value(c"TAGALLOC_ON_MISUSE", |v| match v {
        None | Some(b"abort") => {}
        Some(b"continue") => report::continue_on_misuse(),
        Some(v) => report::malformed(
            "TAGALLOC_ON_MISUSE",
            v,
            "neither \"abort\" nor \"continue\"",
            "abort (a double free or an invalid pointer aborts)",
        ),
    });
    let stats = with_value(c"TAGALLOC_STATS", |v| match v {
        None | Some(b"" | b"0") => false,
        Some(b"1") => true,
        Some(v) if v.contains(&b'/') => {
            report::set_stats_path(Some(v));
            true
        }
        Some(v) => {
            report::malformed(
                "TAGALLOC_STATS",
                v,
                "neither \"0\", \"1\" nor a path holding a \"/\" (./stats-%p.txt)",
                "0 (no statistics)",
            );
            false
        }
    });
    STATS.store(stats, Ordering::Relaxed);
    if !register_fork_handlers() {
        report::line(format_args!(
            "tagalloc: pthread_atfork refused; a child forked while another thread allocates \
             may hang"
        ));
    }
    // SAFETY: `at_exit` is an `extern "C"` function without arguments of this library, which
    // stays loaded for the life of the process. Registered this early, it takes one of the
    // static slots of glibc's exit list: nothing is allocated.
    if unsafe { libc::atexit(at_exit) } != 0 && stats {
        report::line(format_args!(
            "tagalloc: atexit refused; no statistics will be printed at exit"
        ));
    }
    STATE.store(READY, Ordering::Release);
}

/// Every `TAGALLOC_*` variable of the project, without the prefix: this library's, and those
/// the CUDA library, the Python module and the test, fuzzing and recording tools read, so that
/// none of them is called unknown here (`docs/environment.md` describes each; the library's
/// tests check both against the sources).
const KNOWN: &[&str] = &[
    "BLESS",
    "CHECKED",
    "CUDA_LIBRARY",
    "CUDA_REGIONS",
    "FUZZ_FULL_EVERY",
    "FUZZ_TRACE",
    "HOST_MLOCK_CHILD",
    "LAYOUT_SEED",
    "MTRACE_LOG",
    "ON_MISUSE",
    "REPLAY",
    "SEEDS_VERBOSE",
    "STATS",
    "STRAY_ACCESS_CHILD",
    "WRITE_SEEDS",
];

const PREFIX: &[u8] = b"TAGALLOC_";

extern "C" {
    /// The process's environment, `NAME=VALUE` strings ending in a null pointer (POSIX).
    static environ: *const *const libc::c_char;
}

/// Reports, one line each, the `TAGALLOC_*` variables that are not in [`KNOWN`], with the
/// known name nearest to each.
fn report_unknown_variables() {
    // SAFETY: `environ` is glibc's array, valid (or null) unless another thread changes the
    // environment meanwhile: the assumption `getenv` makes too.
    let mut entry = unsafe { environ };
    if entry.is_null() {
        return;
    }
    loop {
        // SAFETY: `entry` points into the null-terminated array `environ` heads.
        let string = unsafe { *entry };
        if string.is_null() {
            break;
        }
        // SAFETY: each entry is a NUL-terminated string.
        let bytes = unsafe { CStr::from_ptr(string) }.to_bytes();
        let name = bytes.split(|&b| b == b'=').next().unwrap_or(bytes);
        if let Some(rest) = name.strip_prefix(PREFIX) {
            let rest = core::str::from_utf8(rest).unwrap_or("");
            if !KNOWN.contains(&rest) {
                report::unknown_variable(name, tagalloc_host::nearest(rest, KNOWN.iter().copied()));
            }
        }
        // SAFETY: not past the terminating null pointer, just checked.
        entry = unsafe { entry.add(1) };
    }
}

/// Calls `f` with the bytes of the environment variable `name`, if it is set.
fn with_value<R>(name: &CStr, f: impl FnOnce(Option<&[u8]>) -> R) -> R {
    // SAFETY: `name` is NUL-terminated; `getenv` returns null or a NUL-terminated string that
    // stays valid until the environment is changed, and `f` reads it before this returns.
    let value = unsafe { libc::getenv(name.as_ptr()) };
    if value.is_null() {
        return f(None);
    }
    // SAFETY: as above: a NUL-terminated string.
    f(Some(unsafe { CStr::from_ptr(value) }.to_bytes()))
}

/// Whether frees and reallocs prove their pointers (`TAGALLOC_CHECKED`).
#[inline]
pub(crate) fn checked() -> bool {
    CHECKED.load(Ordering::Relaxed)
}

/// Whether the heap's figures are written at exit (`TAGALLOC_STATS`).
#[inline]
pub(crate) fn stats() -> bool {
    STATS.load(Ordering::Relaxed)
}
