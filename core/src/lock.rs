//! The spin lock of the shared heaps.
//!
//! `spin::Mutex` would do the same job; this one is small and takes its atomics from
//! [`crate::sync`], so the loom models check its Acquire/Release edges with the rest.
//!
//! One difference under loom: threads that wait in [`SpinLock::lock`] first queue on a loom
//! `Mutex`, so that at most one of them spins. Under a preemption bound, loom keeps scheduling
//! spinning waiters that yield to one another and never the holder; with one spinner, a yield
//! always lets the holder run. Taking and giving back the lock is the same code in both builds.

use core::ops::{Deref, DerefMut};

#[cfg(not(loom))]
use crate::sync::spin_loop;
use crate::sync::{const_unless_loom, AtomicBool, MutPtr, Ordering, UnsafeCell};

/// A test-and-test-and-set spin lock.
///
/// Invariant: `value` is accessed only through a [`Guard`], and at most one guard exists at a
/// time: a guard is made only by the thread whose compare-exchange set `locked` from `false`
/// to `true`, and `locked` goes back to `false` only when that guard drops.
pub(crate) struct SpinLock<T> {
    locked: AtomicBool,
    #[cfg(loom)]
    waiters: loom::sync::Mutex<()>,
    value: UnsafeCell<T>,
}

// SAFETY: the lock hands out access to `value` to one thread at a time (the invariant above),
// with Acquire/Release on `locked` ordering each holder's accesses after the previous
// holder's, so the value may be used from any thread if it may be sent to one.
unsafe impl<T: Send> Sync for SpinLock<T> {}

impl<T> SpinLock<T> {
    const_unless_loom! {
        pub(crate) fn new(value: T) -> Self {
            SpinLock {
                locked: AtomicBool::new(false),
                #[cfg(loom)]
                waiters: loom::sync::Mutex::new(()),
                value: UnsafeCell::new(value),
            }
        }
    }

    /// The value, without locking: `self` is not shared any more.
    pub(crate) fn into_inner(self) -> T {
        self.value.into_inner()
    }

    /// Takes the lock if it is free right now.
    #[inline]
    pub(crate) fn try_lock(&self) -> Option<Guard<'_, T>> {
        self.locked
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .ok()
            .map(|_| Guard {
                lock: self,
                value: Some(self.value.get_mut()),
            })
    }

    /// Takes the lock, spinning until it is free.
    #[inline]
    pub(crate) fn lock(&self) -> Guard<'_, T> {
        #[cfg(loom)]
        let _one_spinner = self.waiters.lock().unwrap();
        loop {
            if let Some(g) = self.try_lock() {
                return g;
            }
            #[cfg(not(loom))]
            while self.locked.load(Ordering::Relaxed) {
                spin_loop();
            }
            #[cfg(loom)]
            loom::thread::yield_now();
        }
    }
}

/// Exclusive access to a [`SpinLock`]'s value until dropped.
pub(crate) struct Guard<'a, T> {
    lock: &'a SpinLock<T>,
    /// `Some` until the guard drops; let go before the lock is, so that loom never sees the
    /// access outlive the lock.
    value: Option<MutPtr<T>>,
}

impl<T> Deref for Guard<'_, T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        // SAFETY: `value` is `Some` until `drop`; this guard is the only one (the lock's
        // invariant), and `&self` keeps the result from overlapping a `&mut` from `deref_mut`.
        unsafe { self.value.as_ref().unwrap_unchecked().deref() }
    }
}

impl<T> DerefMut for Guard<'_, T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`; `&mut self` makes this the only reference made from it.
        unsafe { self.value.as_ref().unwrap_unchecked().deref() }
    }
}

impl<T> Drop for Guard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        // Ends loom's record of the access (a no-op otherwise) before the lock is given back.
        let _ = self.value.take();
        self.lock.locked.store(false, Ordering::Release);
    }
}
