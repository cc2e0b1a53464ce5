//! The pool's lock, where the fork handlers can reach it.
//!
//! A pool's lock lives inside the pool (`tagalloc::SharedPool` keeps it with the value it
//! guards), but `fork` needs it from outside: the child of a multi-threaded process is a copy
//! of the parent with one thread, so a lock that another thread of the parent held at the
//! moment of the fork stays held in the child for ever, and the child's first `malloc` waits
//! for it. POSIX's answer is `pthread_atfork`: take the lock before the fork (`prepare`), so
//! that no other thread is inside the allocator when the address space is copied, and give it
//! back on both sides afterwards (`parent`, `child`).
//!
//! So the pool's lock type, [`PoolLock`], holds no state: it is a handle to one
//! [`FutexLock`] in a `static`, which the fork handlers take and give back directly.

use core::sync::atomic::{AtomicBool, Ordering};

use lock_api::RawMutex;
use tagalloc_host::FutexLock;

/// The one lock behind every [`PoolLock`] handle.
static LOCK: FutexLock = FutexLock::new();

/// The pool's lock: a handle to one futex lock in a `static` (see the module docs), so that
/// the fork handlers can take it from outside the pool. Every handle is the same lock: two
/// pools behind it would still exclude each other correctly, only more than they need.
pub(crate) struct PoolLock;

// SAFETY: every method forwards to the same `FutexLock`, a `lock_api::RawMutex` whose contract
// (one holder at a time, Acquire on taking, Release on giving back) is exactly this one; a
// futex word may be released from any thread, hence `GuardSend`.
unsafe impl RawMutex for PoolLock {
    const INIT: PoolLock = PoolLock;
    type GuardMarker = lock_api::GuardSend;

    #[inline]
    fn lock(&self) {
        LOCK.lock();
    }

    #[inline]
    fn try_lock(&self) -> bool {
        LOCK.try_lock()
    }

    #[inline]
    unsafe fn unlock(&self) {
        // SAFETY: forwarded caller contract: the caller holds the lock.
        unsafe { LOCK.unlock() }
    }

    #[inline]
    fn is_locked(&self) -> bool {
        LOCK.is_locked()
    }
}

/// Whether `prepare` took the lock for a fork in progress, so that `parent` and `child` give
/// back only what was taken.
static HELD_FOR_FORK: AtomicBool = AtomicBool::new(false);

/// Before `fork`: waits until no thread is inside the allocator and keeps it so.
extern "C" fn prepare() {
    LOCK.lock();
    HELD_FOR_FORK.store(true, Ordering::Relaxed);
}

/// After `fork`, in either process: gives the lock back.
extern "C" fn release() {
    if HELD_FOR_FORK.swap(false, Ordering::Relaxed) {
        // SAFETY: `prepare` took the lock in this thread (in the child, in the thread that the
        // child's only thread was copied from, whose state the child inherited), and nothing
        // has given it back since.
        unsafe { LOCK.unlock() };
    }
}

/// Registers the fork handlers (`prepare`, then `release` in the parent and in the child).
/// `false` if `pthread_atfork` refused (it can only run out of memory).
///
/// Handlers registered later run their `prepare` earlier, so registering at the library's
/// first call makes this `prepare` run after those of nearly every other library: their
/// handlers may still allocate, and this one is the last word before the fork.
pub(crate) fn register_fork_handlers() -> bool {
    // SAFETY: the three functions are `extern "C"`, take no arguments, and stay loaded for the
    // life of the process (a preloaded library is never unloaded).
    unsafe { libc::pthread_atfork(Some(prepare), Some(release), Some(release)) == 0 }
}
