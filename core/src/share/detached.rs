//! The shared detached heap: a [`DetachedHeap`] behind a lock, with a queue for frees that
//! arrive while the lock is held (see [`crate::share::shared`]).

use crate::algo::stats::Stats;
use crate::detached::heap::{Block, DetachedHeap};
use crate::detached::records::RecordStore;
use crate::error::Error;
use crate::share::lock::{RawLock, SpinLock};
use crate::share::shared::{QueuedFree, Shared};

impl<S: RecordStore> QueuedFree for DetachedHeap<S> {
    type Freed = Block;

    fn free_queued(&mut self, block: Block) {
        // A refusal is counted in the statistics by `free` itself.
        let _ = self.free(block);
    }
}

/// A [`DetachedHeap`] usable from many threads.
///
/// `L` is the lock ([`SpinLock`] by default, or any `lock_api::RawMutex` with the `lock_api`
/// feature) and `N` (a power of two, at least 2) how many frees can wait for the lock at once.
/// A free that finds the lock taken is queued and done, validated, by the next lock holder; a
/// refused one (double free, stale block, block of another heap) is counted in
/// [`Stats::refused_frees`]. When the queue is full the free waits for the lock, so nothing on
/// the free path allocates.
///
/// **Re-entry.** A call from inside [`SharedDetachedHeap::with_heap`]'s closure into the same
/// heap returns [`Error::Reentrant`] where it would have to wait for the lock (an allocation;
/// a free when the queue is full), when threads can be told apart (the `std` feature); without
/// `std` it would wait forever, so don't.
///
/// # Examples
///
/// ```
/// # fn main() -> Result<(), tagalloc::Error> {
/// use tagalloc::{DetachedHeap, Record, SharedDetachedHeap};
///
/// let mut table = [Record::VACANT; 64];
/// let dev: SharedDetachedHeap<_> = SharedDetachedHeap::new(DetachedHeap::new(&mut table[..], 256)?);
/// dev.with_heap(|h| h.add_region(0x7f00_0000_0000, 1 << 30))??;
/// std::thread::scope(|s| {
///     s.spawn(|| {
///         let b = dev.alloc(4096, 256).unwrap();
///         dev.free(b).unwrap(); // queued if another thread holds the lock
///     });
/// });
/// assert_eq!(dev.stats()?.in_use, 0);
/// # Ok(())
/// # }
/// ```
pub struct SharedDetachedHeap<S: RecordStore, L = SpinLock, const N: usize = 64> {
    shared: Shared<DetachedHeap<S>, L, N>,
}

impl<S: RecordStore, L: RawLock, const N: usize> SharedDetachedHeap<S, L, N> {
    /// Shares `heap`.
    ///
    /// # Time Complexity
    /// `O(N)` (the ring is built).
    pub fn new(heap: DetachedHeap<S>) -> Self {
        SharedDetachedHeap {
            shared: Shared::new(heap),
        }
    }

    /// Allocates (see [`DetachedHeap::alloc`]).
    ///
    /// # Time Complexity
    /// As for [`DetachedHeap::alloc`], after the queued frees (at most `N`, each as
    /// [`DetachedHeap::free`]), plus the wait for the lock.
    pub fn alloc(&self, size: usize, align: usize) -> Result<Block, Error> {
        self.shared.lock()?.heap.alloc(size, align)
    }

    /// Frees `block`. If the lock is free, this is [`DetachedHeap::free`] and returns its
    /// verdict (every misuse is detected: see there). If the lock is taken, the free is queued
    /// and `Ok` is returned at once; the next lock holder does it and counts a refusal in
    /// [`Stats::refused_frees`]. A refused free changes nothing, on either path.
    /// [`Error::Reentrant`] if the queue is full and this thread holds the lock (nothing is
    /// freed then).
    ///
    /// # Time Complexity
    /// `O(1)` when queued; otherwise as for [`DetachedHeap::free`], after the queued frees.
    pub fn free(&self, block: Block) -> Result<(), Error> {
        self.shared.free(block, |heap, b| heap.free(b))
    }

    /// Runs `f` with the locked heap (regions, resizing, `check()`), after doing every queued
    /// free. [`Error::Reentrant`] if called from inside `f` itself.
    ///
    /// # Time Complexity
    /// `f`'s, after the queued frees.
    pub fn with_heap<R>(&self, f: impl FnOnce(&mut DetachedHeap<S>) -> R) -> Result<R, Error> {
        self.shared.with(f)
    }

    /// The heap's statistics, after doing every queued free.
    ///
    /// # Time Complexity
    /// As for [`DetachedHeap::stats`], after the queued frees.
    pub fn stats(&self) -> Result<Stats, Error> {
        self.with_heap(|h| h.stats())
    }

    /// How many frees so far found the lock taken and were queued (each is done by the next
    /// lock holder).
    ///
    /// # Time Complexity
    /// `O(1)`, without the lock.
    pub fn queued_frees(&self) -> usize {
        self.shared.queued()
    }

    /// The heap back, with every queued free done.
    ///
    /// # Time Complexity
    /// The queued frees'.
    pub fn into_inner(self) -> DetachedHeap<S> {
        self.shared.into_inner()
    }
}
