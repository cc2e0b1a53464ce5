//! The locks the shared heaps sit behind, and the one place that knows which thread holds one.
//!
//! A shared heap is generic over its lock ([`RawLock`]): [`SpinLock`] (the default, `no_std`)
//! or, with the `lock_api` feature, any `lock_api::RawMutex` such as `parking_lot::RawMutex`,
//! whose waiting threads sleep instead of spinning (what `std` programs with more threads than
//! cores want).
//!
//! [`Locked`] pairs a lock with the value it guards and remembers which thread holds it, so that
//! a thread asking for a lock it already holds (a call into the heap from inside `with_heap`,
//! or from a hook the heap is running) gets [`Error::Reentrant`] instead of waiting forever.
//! Threads are told apart by the address of a thread-local byte, which needs `std` (the `std`
//! feature, on by default). Without it the owner is unknown and such a call waits forever: the
//! shared heaps' methods say so.

use core::ops::{Deref, DerefMut};

use crate::error::Error;
#[cfg(not(loom))]
use crate::sync::spin_loop;
use crate::sync::{
    const_unless_loom, AtomicBool, AtomicUsize, CachePadded, MutPtr, Ordering, UnsafeCell,
};

/// A raw mutual-exclusion lock: no data, just taken or not.
///
/// # Examples
///
/// A lock that yields to the OS scheduler while it waits (with the `lock_api` feature,
/// `parking_lot::RawMutex` and every other `lock_api::RawMutex` are locks already):
///
/// ```
/// use std::sync::atomic::{AtomicBool, Ordering};
/// use tagalloc::{GlobalHeap, RawLock};
///
/// struct YieldLock(AtomicBool);
///
/// // SAFETY: the compare-exchange admits one holder (Acquire); `unlock` releases (Release).
/// unsafe impl RawLock for YieldLock {
///     const INIT: Self = YieldLock(AtomicBool::new(false));
///     fn try_lock(&self) -> bool {
///         self.0.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed).is_ok()
///     }
///     fn lock(&self) {
///         while !self.try_lock() {
///             std::thread::yield_now();
///         }
///     }
///     unsafe fn unlock(&self) {
///         self.0.store(false, Ordering::Release);
///     }
/// }
///
/// let mut arena = vec![0u128; 1024];
/// let heap: GlobalHeap<YieldLock> = GlobalHeap::with_lock();
/// // SAFETY: the arena outlives the heap's use and nothing else touches it.
/// unsafe { heap.add_region(arena.as_mut_ptr().cast(), 16 << 10).unwrap() };
/// let p = heap.try_alloc(100, 16).unwrap();
/// // SAFETY: `p` is live and not used afterwards.
/// unsafe { heap.try_free(p, 100).unwrap() };
/// ```
///
/// # Safety
/// An implementation must exclude: between a `lock` or successful `try_lock` and the matching
/// `unlock`, no other `lock` or `try_lock` may succeed; taking the lock must be an Acquire and
/// `unlock` a Release, so each holder sees everything the previous holder wrote.
pub unsafe trait RawLock {
    /// An unlocked lock.
    #[cfg(not(loom))]
    const INIT: Self;
    /// An unlocked lock (loom's atomics cannot be built in a `const`).
    #[cfg(loom)]
    fn init() -> Self;
    /// Takes the lock if it is free right now.
    fn try_lock(&self) -> bool;
    /// Takes the lock, waiting (spinning or sleeping) until it is free.
    fn lock(&self);
    /// Gives the lock back.
    ///
    /// # Safety
    /// The caller holds the lock (its `lock` or successful `try_lock` was the last one).
    unsafe fn unlock(&self);
}

/// A test-and-test-and-set spin lock: the default lock of the shared heaps, for `no_std`.
///
/// # Examples
///
/// ```
/// use tagalloc::{GlobalHeap, SpinLock};
///
/// // The default lock; a queue of 16 frees instead of 64.
/// let heap: GlobalHeap<SpinLock, 16> = GlobalHeap::with_lock();
/// assert_eq!(heap.try_alloc(8, 8), Err(tagalloc::Error::OutOfMemory)); // no memory yet
/// ```
///
/// Under loom, threads that wait first queue on a loom `Mutex`, so that at most one of them
/// spins: under a preemption bound loom keeps scheduling spinning waiters that yield to one
/// another and never the holder; with one spinner, a yield always lets the holder run. Taking
/// and giving back the lock is the same code in both builds.
pub struct SpinLock {
    locked: AtomicBool,
    #[cfg(loom)]
    waiters: loom::sync::Mutex<()>,
}

// SAFETY: `try_lock` succeeds only for the compare-exchange that moves `locked` from `false` to
// `true` (Acquire), and only `unlock` (Release) moves it back.
unsafe impl RawLock for SpinLock {
    #[cfg(not(loom))]
    const INIT: Self = SpinLock {
        locked: AtomicBool::new(false),
    };

    #[cfg(loom)]
    fn init() -> Self {
        SpinLock {
            locked: AtomicBool::new(false),
            waiters: loom::sync::Mutex::new(()),
        }
    }

    #[inline]
    fn try_lock(&self) -> bool {
        self.locked
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    #[inline]
    fn lock(&self) {
        #[cfg(loom)]
        let _one_spinner = self.waiters.lock().unwrap();
        while !self.try_lock() {
            #[cfg(not(loom))]
            while self.locked.load(Ordering::Relaxed) {
                spin_loop();
            }
            #[cfg(loom)]
            loom::thread::yield_now();
        }
    }

    #[inline]
    unsafe fn unlock(&self) {
        self.locked.store(false, Ordering::Release);
    }
}

/// Any `lock_api` lock (`parking_lot::RawMutex`, `spin`'s) can guard a shared heap.
#[cfg(all(feature = "lock_api", not(loom)))]
// SAFETY: `lock_api::RawMutex` promises the same exclusion and orderings (its own `unsafe`
// trait contract).
unsafe impl<R: lock_api::RawMutex> RawLock for R {
    const INIT: Self = <R as lock_api::RawMutex>::INIT;

    #[inline]
    fn try_lock(&self) -> bool {
        lock_api::RawMutex::try_lock(self)
    }

    #[inline]
    fn lock(&self) {
        lock_api::RawMutex::lock(self)
    }

    #[inline]
    unsafe fn unlock(&self) {
        // SAFETY: forwarded caller contract.
        unsafe { lock_api::RawMutex::unlock(self) }
    }
}

/// A token for the calling thread, distinct from every other live thread's and never 0; 0 when
/// threads cannot be told apart (no `std`, or under loom).
#[inline]
fn thread_token() -> usize {
    #[cfg(all(feature = "std", not(loom)))]
    {
        std::thread_local! {
            // Constant-initialised and without a destructor, so that reading its address
            // never allocates (this runs inside a global allocator) and works at any point of
            // a thread's life.
            static TOKEN: u8 = const { 0 };
        }
        TOKEN
            .try_with(|t| core::ptr::from_ref(t).addr())
            .unwrap_or(0)
    }
    #[cfg(not(all(feature = "std", not(loom))))]
    0
}

/// A value behind a [`RawLock`], with the holding thread remembered.
///
/// Invariants: `value` is reached only through a [`Guard`], and a guard exists only while
/// `raw` is held by the thread that made it; `owner` is that thread's token while it holds the
/// lock (0 when unknown) and 0 otherwise. Only the holder writes `owner`, so a thread that
/// reads its own token there holds the lock.
pub(crate) struct Locked<L, T> {
    /// The lock and its holder, on a cache line of their own.
    word: CachePadded<LockWord<L>>,
    value: UnsafeCell<T>,
}

/// What every waiter touches: the lock and the holder's token.
struct LockWord<L> {
    raw: L,
    owner: AtomicUsize,
}

// SAFETY: the lock hands the value to one thread at a time, with Acquire/Release ordering each
// holder after the previous one (the `RawLock` contract), so the value may be used from any
// thread if it may be sent to one.
unsafe impl<L: RawLock + Sync, T: Send> Sync for Locked<L, T> {}

impl<L: RawLock, T> Locked<L, T> {
    const_unless_loom! {
        pub(crate) fn new(value: T) -> Self {
            Locked {
                word: CachePadded(LockWord {
                    #[cfg(not(loom))]
                    raw: L::INIT,
                    #[cfg(loom)]
                    raw: L::init(),
                    owner: AtomicUsize::new(0),
                }),
                value: UnsafeCell::new(value),
            }
        }
    }

    /// The value, without locking: `self` is not shared any more.
    pub(crate) fn into_inner(self) -> T {
        self.value.into_inner()
    }

    /// The guard of a lock this thread (token `me`) has just taken.
    #[inline]
    fn guard(&self, me: usize) -> Guard<'_, L, T> {
        // Where threads cannot be told apart `owner` stays 0 and is never touched (loom then
        // explores only the lock's own atomics).
        if me != 0 {
            self.word.owner.store(me, Ordering::Relaxed);
        }
        Guard {
            lock: self,
            owned: me != 0,
            value: Some(self.value.get_mut()),
        }
    }

    /// Takes the lock if it is free right now.
    ///
    /// The thread's token is read before the lock is taken, as in [`Locked::lock`]: reading a
    /// thread-local may wait for the dynamic loader's TLS lock (glibc's `__tls_get_addr`
    /// after another thread `dlopen`ed a library with TLS), whose holder may be allocating,
    /// so waiting for it while holding this lock could deadlock.
    #[inline]
    pub(crate) fn try_lock(&self) -> Option<Guard<'_, L, T>> {
        let me = thread_token();
        self.word.raw.try_lock().then(|| self.guard(me))
    }

    /// Takes the lock, waiting until it is free; [`Error::Reentrant`] if this thread holds it
    /// already (known only with `std`; without it, such a call waits forever).
    #[inline]
    pub(crate) fn lock(&self) -> Result<Guard<'_, L, T>, Error> {
        let me = thread_token();
        if !self.word.raw.try_lock() {
            if me != 0 && self.word.owner.load(Ordering::Relaxed) == me {
                return Err(reentrant());
            }
            self.word.raw.lock();
        }
        Ok(self.guard(me))
    }
}

#[cold]
fn reentrant() -> Error {
    Error::Reentrant
}

/// Exclusive access to a [`Locked`] value until dropped.
pub(crate) struct Guard<'a, L: RawLock, T> {
    lock: &'a Locked<L, T>,
    /// Whether this guard wrote its thread's token into `owner`.
    owned: bool,
    /// `Some` until the guard drops; let go before the lock is, so that loom never sees the
    /// access outlive the lock.
    value: Option<MutPtr<T>>,
}

impl<L: RawLock, T> Deref for Guard<'_, L, T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        // SAFETY: `value` is `Some` until `drop`; this guard is the only one (the invariant of
        // `Locked`), and `&self` keeps the result from overlapping a `&mut` from `deref_mut`.
        unsafe { self.value.as_ref().unwrap_unchecked().deref() }
    }
}

impl<L: RawLock, T> DerefMut for Guard<'_, L, T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`; `&mut self` makes this the only reference made from it.
        unsafe { self.value.as_ref().unwrap_unchecked().deref() }
    }
}

impl<L: RawLock, T> Drop for Guard<'_, L, T> {
    #[inline]
    fn drop(&mut self) {
        // Ends loom's record of the access (a no-op otherwise) before the lock is given back.
        let _ = self.value.take();
        if self.owned {
            self.lock.word.owner.store(0, Ordering::Relaxed);
        }
        // SAFETY: a guard exists only while its thread holds the lock (the invariant).
        unsafe { self.lock.word.raw.unlock() };
    }
}
