//! The shared out-of-band heap: a [`DetachedHeap`] behind a spin lock, with a bounded
//! lock-free ring ([`RemoteRing`]) for frees that arrive while the lock is held.
//!
//! A free that finds the lock taken queues its [`Block`] and returns; whoever takes the lock
//! next frees everything queued first. If the ring is full, the free waits for the lock
//! instead, so nothing on the free path allocates. Queued frees are validated when they are
//! done: a refused one (double free, stale or forged block) is counted in
//! [`Stats::rejected_frees`].
//!
//! ```
//! # fn main() -> Result<(), tagalloc::Error> {
//! use tagalloc::{DetachedHeap, Record, SharedDetachedHeap};
//!
//! let mut table = [Record::VACANT; 64];
//! let dev: SharedDetachedHeap<_> = SharedDetachedHeap::new(DetachedHeap::new(&mut table[..], 256)?);
//! dev.with_heap(|h| h.add_region(0x7f00_0000_0000, 1 << 30))?;
//! std::thread::scope(|s| {
//!     s.spawn(|| {
//!         let b = dev.alloc(4096, 256).unwrap();
//!         dev.free(b).unwrap(); // queued if another thread holds the lock
//!     });
//! });
//! assert_eq!(dev.stats().in_use, 0);
//! # Ok(())
//! # }
//! ```

use crate::detached::{Block, DetachedHeap};
use crate::error::Error;
use crate::lock::{Guard, SpinLock};
use crate::records::RecordStore;
use crate::remote_ring::RemoteRing;
use crate::stats::Stats;

/// The heap and the ring's consumer position.
struct State<S: RecordStore> {
    heap: DetachedHeap<S>,
    /// The next ring position to take (the ring's single-consumer side).
    head: usize,
    /// Frees that went through the ring.
    deferred: u64,
}

impl<S: RecordStore> State<S> {
    fn drain<const N: usize>(&mut self, ring: &RemoteRing<N>) {
        let State {
            heap,
            head,
            deferred,
        } = self;
        ring.drain(head, |block| {
            // A refused free is counted in the heap's statistics.
            let _ = heap.free(block);
            *deferred += 1;
        });
    }
}

/// A [`DetachedHeap`] usable from many threads; `N` (a power of two) is how many frees can wait
/// for the lock at once.
pub struct SharedDetachedHeap<S: RecordStore, const N: usize = 64> {
    state: SpinLock<State<S>>,
    ring: RemoteRing<N>,
}

impl<S: RecordStore, const N: usize> SharedDetachedHeap<S, N> {
    /// Shares `heap`.
    pub fn new(heap: DetachedHeap<S>) -> Self {
        SharedDetachedHeap {
            state: SpinLock::new(State {
                heap,
                head: 0,
                deferred: 0,
            }),
            ring: RemoteRing::new(),
        }
    }

    /// The lock, with the queued frees done.
    fn locked(&self) -> Guard<'_, State<S>> {
        let mut st = self.state.lock();
        st.drain(&self.ring);
        st
    }

    /// Allocates (see [`DetachedHeap::alloc`]).
    pub fn alloc(&self, size: usize, align: usize) -> Result<Block, Error> {
        self.locked().heap.alloc(size, align)
    }

    /// Frees `block`. If the lock is taken, the free is queued and `Ok` is returned at once;
    /// it is validated when it is done, and a refusal is counted in
    /// [`Stats::rejected_frees`]. Otherwise it is done now and a refusal is returned.
    pub fn free(&self, block: Block) -> Result<(), Error> {
        let mut st = match self.state.try_lock() {
            Some(st) => st,
            None => match self.ring.push(block) {
                Ok(()) => return Ok(()),
                // The ring is full: wait for the lock.
                Err(_) => self.state.lock(),
            },
        };
        st.drain(&self.ring);
        st.heap.free(block)
    }

    /// Runs `f` with the locked heap (regions, resizing, `check()`), after doing every queued
    /// free.
    pub fn with_heap<R>(&self, f: impl FnOnce(&mut DetachedHeap<S>) -> R) -> R {
        f(&mut self.locked().heap)
    }

    /// The heap's statistics, after doing every queued free.
    pub fn stats(&self) -> Stats {
        self.with_heap(|h| h.stats())
    }

    /// How many frees so far found the lock taken and went through the ring.
    pub fn deferred_frees(&self) -> u64 {
        self.locked().deferred
    }

    /// The heap back, with every queued free done.
    pub fn into_inner(self) -> DetachedHeap<S> {
        let SharedDetachedHeap { state, ring } = self;
        let mut st = state.into_inner();
        st.drain(&ring);
        st.heap
    }
}
