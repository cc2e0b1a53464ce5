//! A lock whose waiters sleep in the kernel, and that never allocates: [`FutexLock`].
//!
//! **Why not `parking_lot::RawMutex`.** It parks waiters in a global hash table that
//! `parking_lot_core` allocates on first use: `create_hashtable` calls `HashTable::new`, which
//! builds a `Vec` of buckets and returns it in a `Box`, and every thread's first park
//! constructs its `ThreadData` in a lazily initialised `thread_local!`, which calls
//! `grow_hashtable` (more `Vec`s and `Box`es; `parking_lot_core` 0.9.12, `src/parking_lot.rs`).
//! When the pool *is* the global allocator, a thread that waits for the pool's lock allocates
//! from the pool, whose lock is still held by the other thread, so it waits again, parks
//! again, allocates again...: a program with such a pool as its `#[global_allocator]` overflows
//! its stack (SIGSEGV) on its first contended allocation (seen with `backend-host/tests/global.rs`
//! switched to `parking_lot::RawMutex`; the backtrace runs `__rust_alloc` ←
//! `HashTable::new` ← `park`). The waiting thread does not hold the lock, so the core's
//! re-entry check cannot catch it.
//!
//! **What this is.** The three-state futex mutex of Ulrich Drepper's "Futexes Are Tricky"
//! (2011), "Mutex, Take 3" (`mutex3`): 0 unlocked, 1 locked, 2 locked with possible waiters; a
//! waiter swaps in 2 and sleeps in `FUTEX_WAIT` while it reads 2; `unlock` swaps in 0 and wakes
//! one sleeper if it took a 2 out. As in the Rust standard library's futex mutex
//! (`library/std/src/sys/sync/mutex/futex.rs`), a waiter first spins briefly while the lock is
//! held without waiters, since critical sections here are short. The lock word is the only
//! state; nothing allocates, and no thread-local is touched. Waiters sleep with `FUTEX_WAIT`
//! (`FUTEX_PRIVATE_FLAG`: the lock is never shared between processes).
//!
//! It implements `lock_api::RawMutex`, so it is a `lock_api` lock (`lock_api::Mutex<FutexLock,
//! T>` works) and, through the core's `lock_api` feature, a `tagalloc::RawLock`.

use core::sync::atomic::{AtomicU32, Ordering};

/// Unlocked.
const UNLOCKED: u32 = 0;
/// Locked, no thread sleeping on it.
const LOCKED: u32 = 1;
/// Locked, and threads may be sleeping on it: `unlock` must wake one.
const CONTENDED: u32 = 2;

/// Busy-wait rounds before a waiter sleeps (the standard library's figure).
const SPINS: u32 = 100;

/// A futex-based mutual-exclusion lock that parks waiting threads and never allocates (see the
/// module docs).
///
/// Invariant: `state` is `UNLOCKED` (0) exactly when no thread holds the lock; it is
/// `CONTENDED` (2) whenever a thread may be asleep on it (a waiter sets it so before it sleeps),
/// so the holder's `unlock` wakes one.
///
/// # Examples
///
/// ```
/// use tagalloc_host::FutexLock;
///
/// let counter = lock_api::Mutex::<FutexLock, u64>::new(0);
/// std::thread::scope(|s| {
///     for _ in 0..4 {
///         s.spawn(|| {
///             for _ in 0..1000 {
///                 *counter.lock() += 1;
///             }
///         });
///     }
/// });
/// assert_eq!(*counter.lock(), 4000);
/// ```
#[derive(Debug)]
pub struct FutexLock {
    state: AtomicU32,
}

impl FutexLock {
    /// An unlocked lock.
    pub const fn new() -> Self {
        FutexLock {
            state: AtomicU32::new(UNLOCKED),
        }
    }

    /// The slow path of `lock`: spin a little, then sleep until the lock is handed over.
    #[cold]
    fn lock_contended(&self) {
        let mut state = self.spin();
        // Free now: take it without announcing waiters.
        if state == UNLOCKED {
            match self.state.compare_exchange(
                UNLOCKED,
                LOCKED,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return,
                Err(s) => state = s,
            }
        }
        loop {
            // Announce a waiter; if the lock was free, it is ours (in the contended state, so
            // our `unlock` may wake a sleeper needlessly, which is harmless).
            if state != CONTENDED && self.state.swap(CONTENDED, Ordering::Acquire) == UNLOCKED {
                return;
            }
            wait(&self.state, CONTENDED);
            state = self.spin();
        }
    }

    /// Spins while the lock is held without sleepers, at most [`SPINS`] rounds; returns the
    /// last state seen.
    fn spin(&self) -> u32 {
        let mut spins = SPINS;
        loop {
            let state = self.state.load(Ordering::Relaxed);
            if state != LOCKED || spins == 0 {
                return state;
            }
            core::hint::spin_loop();
            spins -= 1;
        }
    }
}

impl Default for FutexLock {
    fn default() -> Self {
        Self::new()
    }
}

// SAFETY: the lock is taken only by a compare-exchange from UNLOCKED or a swap that returned
// UNLOCKED, both Acquire, and only `unlock` (a Release swap) makes it UNLOCKED again, so at
// most one thread holds it and each holder sees what the previous one wrote. A thread that
// sleeps does so only while the word reads CONTENDED (`FUTEX_WAIT` compares atomically), and
// `unlock` wakes one sleeper whenever it replaces a CONTENDED: no wake-up is lost.
unsafe impl lock_api::RawMutex for FutexLock {
    #[allow(clippy::declare_interior_mutable_const)] // lock_api's own pattern: a fresh lock
    const INIT: FutexLock = FutexLock::new();

    // Any thread may unlock a futex word.
    type GuardMarker = lock_api::GuardSend;

    #[inline]
    fn lock(&self) {
        if self
            .state
            .compare_exchange(UNLOCKED, LOCKED, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            self.lock_contended();
        }
    }

    #[inline]
    fn try_lock(&self) -> bool {
        self.state
            .compare_exchange(UNLOCKED, LOCKED, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    #[inline]
    unsafe fn unlock(&self) {
        if self.state.swap(UNLOCKED, Ordering::Release) == CONTENDED {
            wake_one(&self.state);
        }
    }

    #[inline]
    fn is_locked(&self) -> bool {
        self.state.load(Ordering::Relaxed) != UNLOCKED
    }
}

/// Sleeps while `word` holds `expected` (a spurious or interrupted wake-up just returns: the
/// caller re-checks).
fn wait(word: &AtomicU32, expected: u32) {
    // SAFETY: FUTEX_WAIT reads the aligned u32 behind `word`, which outlives the call, and
    // sleeps only if it still holds `expected`; a null timeout waits without limit. Errors
    // (EAGAIN: the value changed; EINTR: a signal) need no handling: the caller loops.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
            expected,
            core::ptr::null::<libc::timespec>(),
        );
    }
}

/// Wakes one thread sleeping on `word`.
fn wake_one(word: &AtomicU32) {
    // SAFETY: FUTEX_WAKE only names the address; it never reads or writes it.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            1,
        );
    }
}
