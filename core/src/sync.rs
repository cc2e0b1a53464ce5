//! Every atomic and cell of the shared heaps comes from here, so that `--cfg loom` swaps them
//! all for loom's model-checked versions at once (see `core/src/tests/loom.rs`).
//!
//! Loom's atomics and cells have no `const` constructors, so the constructors that build them
//! are `const` only without loom ([`const_unless_loom!`]).
//!
//! The orderings that publish and take a queued free are named here too. They can be weakened
//! on purpose with `--cfg tagalloc_weak_publish` (Release → Relaxed on the push) or
//! `--cfg tagalloc_weak_take` (Acquire → Relaxed on the drain), to show that the loom models
//! catch a missing happens-before edge; CI builds both mutants and expects the models to fail.

#[cfg(not(loom))]
pub(crate) use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

#[cfg(loom)]
pub(crate) use loom::cell::{MutPtr, UnsafeCell};

/// The ordering of the store that makes a queued free visible to the next lock holder.
pub(crate) const PUBLISH: Ordering = if cfg!(tagalloc_weak_publish) {
    Ordering::Relaxed
} else {
    Ordering::Release
};

/// The ordering of the load that takes queued frees, pairing with [`PUBLISH`].
pub(crate) const TAKE: Ordering = if cfg!(tagalloc_weak_take) {
    Ordering::Relaxed
} else {
    Ordering::Acquire
};

/// A number never handed out before in this process, from 1 to `u32::MAX − 1`; `None` once all
/// are used. It names a heap, so that a heap can refuse another heap's blocks. A process-wide
/// counter, not part of what the loom models check, so it is a plain `core` atomic.
pub(crate) fn next_id() -> Option<core::num::NonZeroU32> {
    static NEXT: core::sync::atomic::AtomicU32 = core::sync::atomic::AtomicU32::new(1);
    let relaxed = core::sync::atomic::Ordering::Relaxed;
    let id = NEXT
        .fetch_update(relaxed, relaxed, |n| n.checked_add(1))
        .ok()?;
    core::num::NonZeroU32::new(id)
}

/// A value on a cache line of its own (64 bytes, x86-64's and most ARM cores' line), so that
/// what other threads write to their neighbours does not make its users miss the cache (false
/// sharing): the lock, the queue's producer position and the queue's counter each get one.
#[derive(Debug, Default)]
#[repr(C, align(64))]
pub(crate) struct CachePadded<T>(pub(crate) T);

impl<T> core::ops::Deref for CachePadded<T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        &self.0
    }
}

/// One turn of a busy-wait. (Under loom a waiter yields instead: see `crate::share::lock`.)
#[cfg(not(loom))]
#[inline]
pub(crate) fn spin_loop() {
    core::hint::spin_loop();
}

/// Declares a function that is `const` except under loom, whose atomics cannot be built in a
/// `const` context.
macro_rules! const_unless_loom {
    ($(#[$attr:meta])* $vis:vis fn $($rest:tt)*) => {
        #[cfg(not(loom))]
        $(#[$attr])*
        $vis const fn $($rest)*
        #[cfg(loom)]
        $(#[$attr])*
        $vis fn $($rest)*
    };
}
pub(crate) use const_unless_loom;

/// `core::cell::UnsafeCell` with loom's access API (`with_mut`, `get_mut`), so the code
/// that uses it is the same in both builds and loom can track every access.
#[cfg(not(loom))]
#[derive(Debug)]
#[repr(transparent)]
pub(crate) struct UnsafeCell<T>(core::cell::UnsafeCell<T>);

#[cfg(not(loom))]
impl<T> UnsafeCell<T> {
    #[inline]
    pub(crate) const fn new(value: T) -> Self {
        UnsafeCell(core::cell::UnsafeCell::new(value))
    }

    #[inline]
    pub(crate) fn into_inner(self) -> T {
        self.0.into_inner()
    }

    /// Runs `f` with a pointer for writing.
    #[inline]
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }

    /// A pointer for writing that stays valid (and, under loom, tracked as a write access)
    /// for as long as it lives.
    #[inline]
    pub(crate) fn get_mut(&self) -> MutPtr<T> {
        MutPtr(self.0.get())
    }
}

/// See [`UnsafeCell::get_mut`].
#[cfg(not(loom))]
#[derive(Debug)]
pub(crate) struct MutPtr<T>(*mut T);

#[cfg(not(loom))]
impl<T> MutPtr<T> {
    /// # Safety
    /// No other reference to the cell's value may exist while the result is used.
    #[inline]
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn deref(&self) -> &mut T {
        // SAFETY: the caller's promise of exclusive access; the pointer comes from a live cell.
        unsafe { &mut *self.0 }
    }
}
