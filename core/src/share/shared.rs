//! A heap shared between threads: one heap behind a lock, with a queue for frees that arrive
//! while the lock is held (docs/design.md, "Sharing: the lock and queued frees").
//! [`crate::GlobalHeap`] and
//! [`crate::SharedDetachedHeap`] are this with an inline and a detached heap.
//!
//! A free that finds the lock taken does not wait: it puts what identifies the free (a pointer
//! and size, or a `Block`) on a bounded lock-free ring and returns. Whoever takes the lock next
//! does every queued free before anything else, so a queued free is never lost and its memory
//! is never handed out before it has really been freed. The ring writes nothing into the freed
//! memory, so a free that will be refused (a double free, a foreign pointer) writes nothing
//! anywhere: it is validated when it is done, under the lock, like any other free, and a
//! refusal is counted in the heap's statistics. When the ring is full the free waits for the
//! lock instead; nothing on the free path allocates.

use crate::error::Error;
use crate::share::lock::{Guard, Locked, RawLock};
use crate::share::queue::FreeQueue;
use crate::sync::{const_unless_loom, AtomicUsize, CachePadded, Ordering};

/// A heap that can sit behind a [`Shared`]: how a free is identified while it waits in the
/// queue, and how it is done once the lock is taken.
pub(crate) trait QueuedFree {
    /// What a queued free carries.
    type Freed: Send;
    /// Does a free that waited in the queue. A refusal is counted in the heap's statistics
    /// (there is no caller left to return it to).
    fn free_queued(&mut self, freed: Self::Freed);
}

/// The heap and the ring's consumer position, behind the lock.
pub(crate) struct State<H> {
    pub(crate) heap: H,
    /// The next ring position to take (the ring's single-consumer side).
    head: usize,
}

/// A heap `H` behind lock `L`, with a ring of `N` queued frees.
///
/// Invariant: every item on the ring is a free that its caller gave up for good and that has
/// not been done yet; the ring is drained, in order, by every lock holder before it touches
/// the heap.
pub(crate) struct Shared<H: QueuedFree, L, const N: usize> {
    state: Locked<L, State<H>>,
    ring: FreeQueue<H::Freed, N>,
    /// Frees that went through the ring (on a line of its own: every queued free bumps it).
    queued: CachePadded<AtomicUsize>,
}

impl<H: QueuedFree, L: RawLock, const N: usize> Shared<H, L, N> {
    const_unless_loom! {
        pub(crate) fn new(heap: H) -> Self {
            Shared {
                state: Locked::new(State { heap, head: 0 }),
                ring: FreeQueue::new(),
                queued: CachePadded(AtomicUsize::new(0)),
            }
        }
    }

    /// Does every queued free.
    fn drain(&self, st: &mut State<H>) {
        let State { heap, head } = st;
        self.ring.drain(head, |freed| heap.free_queued(freed));
    }

    /// The lock if it is free right now, with the queued frees done.
    #[inline]
    pub(crate) fn try_lock(&self) -> Option<Guard<'_, L, State<H>>> {
        let mut st = self.state.try_lock()?;
        self.drain(&mut st);
        Some(st)
    }

    /// The lock, with the queued frees done; [`Error::Reentrant`] if this thread holds it.
    #[inline]
    pub(crate) fn lock(&self) -> Result<Guard<'_, L, State<H>>, Error> {
        let mut st = self.state.lock()?;
        self.drain(&mut st);
        Ok(st)
    }

    /// Frees `freed` now with `free` if the lock is free, else queues it and returns `Ok` at
    /// once. If the ring is full it waits for the lock, and returns [`Error::Reentrant`] if
    /// this thread holds it already (then nothing was freed or queued).
    #[inline]
    pub(crate) fn free(
        &self,
        freed: H::Freed,
        free: impl FnOnce(&mut H, H::Freed) -> Result<(), Error>,
    ) -> Result<(), Error> {
        let mut st = match self.state.try_lock() {
            Some(st) => st,
            None => match self.ring.push(freed) {
                Ok(()) => {
                    self.queued.fetch_add(1, Ordering::Relaxed);
                    return Ok(());
                }
                Err(back) => {
                    let st = self.state.lock()?;
                    return self.free_locked(st, back, free);
                }
            },
        };
        self.drain(&mut st);
        free(&mut st.heap, freed)
    }

    /// The slow end of [`Shared::free`]: the ring was full and the lock is now held.
    #[cold]
    fn free_locked(
        &self,
        mut st: Guard<'_, L, State<H>>,
        freed: H::Freed,
        free: impl FnOnce(&mut H, H::Freed) -> Result<(), Error>,
    ) -> Result<(), Error> {
        self.drain(&mut st);
        free(&mut st.heap, freed)
    }

    /// Runs `f` on the locked heap, after doing every queued free.
    pub(crate) fn with<R>(&self, f: impl FnOnce(&mut H) -> R) -> Result<R, Error> {
        Ok(f(&mut self.lock()?.heap))
    }

    /// How many frees so far found the lock taken and were queued.
    pub(crate) fn queued(&self) -> usize {
        self.queued.load(Ordering::Relaxed)
    }

    /// The heap back, with every queued free done.
    pub(crate) fn into_inner(self) -> H {
        let Shared { state, ring, .. } = self;
        let mut st = state.into_inner();
        let State { heap, head } = &mut st;
        ring.drain(head, |freed| heap.free_queued(freed));
        st.heap
    }
}
