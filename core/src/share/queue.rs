//! The bounded lock-free queue of frees that could not take a shared heap's lock at once.
//!
//! A queued free must write nothing anywhere before it is known to be a live allocation of the
//! heap (a double free or a foreign pointer is refused without a byte written), and it cannot
//! know that without the lock. So the queue writes nothing into the freed memory: it is a fixed
//! ring of what identifies the free (a pointer and size, or a `Block`), built with the heap, so
//! the free path never allocates either. It is D. Vyukov's bounded queue with many producers
//! (the freeing threads) and one consumer at a time (the lock holder). When the ring is full the
//! freeing thread waits for the lock instead.
//!
//! Each slot has a sequence number: `pos` when it is free for the producer that claimed
//! position `pos`, `pos + 1` once that producer has written its block (a Release store, paired
//! with the consumer's Acquire load), and `pos + N` once the consumer has taken the block (a
//! Release store, paired with the next producer's Acquire load).

use crate::sync::{
    const_unless_loom, AtomicUsize, CachePadded, Ordering, UnsafeCell, PUBLISH, TAKE,
};

/// One place in the ring. Its sequence number is stored less the slot's index, so that every
/// slot starts at 0 and the ring can be built in a `const` (a `static` global allocator).
struct Slot<T> {
    seq_less_index: AtomicUsize,
    item: UnsafeCell<Option<T>>,
}

impl<T> Slot<T> {
    const_unless_loom! {
        fn new() -> Self {
            Slot {
                seq_less_index: AtomicUsize::new(0),
                item: UnsafeCell::new(None),
            }
        }
    }
}

/// A ring of `N` queued frees; `N` is a power of two, at least 2 (with one slot, "written for
/// position `p`" and "free for position `p + N`" would be the same sequence number).
///
/// Invariant: slot `i` starts with sequence `i`; positions are claimed in order by
/// compare-exchange on `tail`, so each position has one producer; the consumer's position
/// lives with the heap, behind its lock, so there is one consumer at a time.
pub(crate) struct FreeQueue<T, const N: usize> {
    /// The producers' position, on a cache line of its own.
    tail: CachePadded<AtomicUsize>,
    slots: [Slot<T>; N],
}

// SAFETY: a slot's item is written only by the producer that claimed its position and read
// only by the consumer, each ordered after the other through the slot's sequence number (see
// the module docs), so the ring may be shared between threads. An item is only ever moved
// from its producer to its consumer, which `T: Send` allows.
unsafe impl<T: Send, const N: usize> Sync for FreeQueue<T, N> {}

impl<T, const N: usize> FreeQueue<T, N> {
    const POWER_OF_TWO: () = assert!(
        N.is_power_of_two() && N >= 2,
        "the ring size must be a power of two, at least 2"
    );

    const_unless_loom! {
        pub(crate) fn new() -> Self {
            let () = Self::POWER_OF_TWO;
            FreeQueue {
                #[cfg(not(loom))]
                slots: [const { Slot::new() }; N],
                #[cfg(loom)]
                slots: core::array::from_fn(|_| Slot::new()),
                tail: CachePadded(AtomicUsize::new(0)),
            }
        }
    }

    /// The slot of position `pos` and its index.
    #[inline]
    fn slot(&self, pos: usize) -> (&Slot<T>, usize) {
        let i = pos % N;
        (&self.slots[i], i)
    }

    /// Queues `item`, or gives it back if the ring is full.
    pub(crate) fn push(&self, item: T) -> Result<(), T> {
        let mut pos = self.tail.load(Ordering::Relaxed);
        loop {
            let (slot, i) = self.slot(pos);
            let seq = slot.seq_less_index.load(Ordering::Acquire).wrapping_add(i);
            match seq.wrapping_sub(pos) as isize {
                0 => match self.tail.compare_exchange_weak(
                    pos,
                    pos.wrapping_add(1),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        // SAFETY: claiming `pos` made this thread the slot's only writer, and
                        // the Acquire load of `seq == pos` ordered it after the consumer's
                        // last read of the slot.
                        slot.item.with_mut(|b| unsafe { *b = Some(item) });
                        let seq = pos.wrapping_add(1).wrapping_sub(i);
                        slot.seq_less_index.store(seq, PUBLISH);
                        return Ok(());
                    }
                    Err(now) => pos = now,
                },
                // The slot still holds the item from `N` positions back: full.
                d if d < 0 => return Err(item),
                // Another producer claimed `pos` already; catch up.
                _ => pos = self.tail.load(Ordering::Relaxed),
            }
        }
    }

    /// Takes the queued items from position `*head` on, in order, until a slot that is empty
    /// or still being written, and passes each to `free`.
    ///
    /// Callers must serialise calls (the heap's lock does) and keep `head` between them,
    /// starting at 0.
    pub(crate) fn drain(&self, head: &mut usize, mut free: impl FnMut(T)) {
        loop {
            let (slot, i) = self.slot(*head);
            if slot.seq_less_index.load(TAKE).wrapping_add(i) != head.wrapping_add(1) {
                return;
            }
            // SAFETY: `seq == head + 1` (Acquire) orders this after the producer's write, and
            // no producer writes the slot again until the store below.
            let item = slot.item.with_mut(|b| unsafe { (*b).take() });
            let seq = head.wrapping_add(N).wrapping_sub(i);
            slot.seq_less_index.store(seq, Ordering::Release);
            *head = head.wrapping_add(1);
            if let Some(item) = item {
                free(item);
            }
        }
    }
}
