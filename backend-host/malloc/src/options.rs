//! What the environment asks for, read once, before the first allocation is served if
//! possible, without allocating.
//!
//! - `TAGALLOC_CHECKED`: set (to anything but `0` or nothing), every call goes to the pool
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
//!   the program goes on (what the Rust API always does: it returns the error). Any other value
//!   is reported in one line and the default is kept. Damaged tags abort either way.
//! - `TAGALLOC_STATS`: set likewise, the heap's figures are written when the process exits
//!   (an `atexit` handler), each line naming the program and its pid: to stderr while it is
//!   open, else (a program that closed it, as coreutils do) to
//!   `/tmp/tagalloc-stats-<pid>.txt`. A value holding a `/` is a file to append them to
//!   instead, `%p` in it standing for the pid (`TAGALLOC_STATS=./stats-%p.txt`).
//!
//! **No allocation, no recursion.** The pool needs no initialisation at all (it is a `const`
//! in a `static`: nothing is mapped until the first allocation), so the allocator works before
//! and while this runs. Starting means reading two variables with libc's `getenv` (no
//! allocation, unlike `std::env`), registering the fork handlers and
//! the exit handler (the calling thread's cache, and the statistics). `pthread_atfork` and `atexit` may themselves call `malloc` (when their
//! preallocated tables are full); such a call, and any call made by another thread meanwhile,
//! finds the start under way and is served at once with the defaults, instead of waiting for
//! a start that is waiting for it. Nothing here uses `dlsym`, Rust's `std::env`, formatting
//! or thread-local destructors.

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
/// Whether a double free or a foreign pointer aborts (`TAGALLOC_ON_MISUSE`); so from the first
/// call, before the environment is read.
static ABORT_ON_MISUSE: AtomicBool = AtomicBool::new(true);

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
    CHECKED.store(flag(c"TAGALLOC_CHECKED"), Ordering::Relaxed);
    with_value(c"TAGALLOC_ON_MISUSE", |v| match v {
        None | Some(b"abort") => {}
        Some(b"continue") => ABORT_ON_MISUSE.store(false, Ordering::Relaxed),
        Some(_) => report::line(format_args!(
            "tagalloc: TAGALLOC_ON_MISUSE is neither \"abort\" nor \"continue\"; a double free \
             or an invalid pointer aborts (the default)"
        )),
    });
    let stats = flag(c"TAGALLOC_STATS");
    STATS.store(stats, Ordering::Relaxed);
    if stats {
        with_value(c"TAGALLOC_STATS", |v| {
            report::set_stats_path(v.filter(|v| v.contains(&b'/')));
        });
    }
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

/// Whether the environment variable `name` is set to something other than empty or `0`.
fn flag(name: &CStr) -> bool {
    with_value(name, |v| v.is_some_and(|v| !matches!(v, b"" | b"0")))
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

/// Whether a detected double free or foreign pointer aborts the process
/// (`TAGALLOC_ON_MISUSE`, `abort` by default) rather than being refused.
#[inline]
pub(crate) fn abort_on_misuse() -> bool {
    ABORT_ON_MISUSE.load(Ordering::Relaxed)
}

/// Whether the heap's figures are written at exit (`TAGALLOC_STATS`).
#[inline]
pub(crate) fn stats() -> bool {
    STATS.load(Ordering::Relaxed)
}
