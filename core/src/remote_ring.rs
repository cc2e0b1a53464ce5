//! The bounded lock-free queue of frees that could not take a shared out-of-band heap's lock at
//! once.
//!
//! The inline heap queues a free inside the freed memory; an out-of-band heap must never touch
//! its managed memory, and its record table may move when it grows, so the queue is a fixed
//! ring of [`Block`]s built with the heap: no allocation on the free path. It is D. Vyukov's
//! bounded queue with many producers (the freeing threads) and one consumer at a time (the lock
//! holder). When the ring is full the freeing thread waits for the lock instead.
//!
//! Each slot has a sequence number: `pos` when it is free for the producer that claimed
//! position `pos`, `pos + 1` once that producer has written its block (a Release store, paired
//! with the consumer's Acquire load), and `pos + N` once the consumer has taken the block (a
//! Release store, paired with the next producer's Acquire load).

use crate::detached::Block;
use crate::sync::{AtomicUsize, Ordering, UnsafeCell, PUBLISH, TAKE};

struct Slot {
    seq: AtomicUsize,
    block: UnsafeCell<Option<Block>>,
}

/// A ring of `N` queued frees; `N` is a power of two, at least 2 (with one slot, "written for
/// position `p`" and "free for position `p + N`" would be the same sequence number).
///
/// Invariant: slot `i` starts with sequence `i`; positions are claimed in order by
/// compare-exchange on `tail`, so each position has one producer; the consumer's position
/// lives with the heap, behind its lock, so there is one consumer at a time.
pub(crate) struct RemoteRing<const N: usize> {
    slots: [Slot; N],
    tail: AtomicUsize,
}

// SAFETY: a slot's block is written only by the producer that claimed its position and read
// only by the consumer, each ordered after the other through the slot's sequence number (see
// the module docs), so the ring may be shared between threads.
unsafe impl<const N: usize> Sync for RemoteRing<N> {}

impl<const N: usize> RemoteRing<N> {
    const POWER_OF_TWO: () = assert!(
        N.is_power_of_two() && N >= 2,
        "the ring size must be a power of two, at least 2"
    );

    pub(crate) fn new() -> Self {
        let () = Self::POWER_OF_TWO;
        RemoteRing {
            slots: core::array::from_fn(|i| Slot {
                seq: AtomicUsize::new(i),
                block: UnsafeCell::new(None),
            }),
            tail: AtomicUsize::new(0),
        }
    }

    /// Queues `block`, or gives it back if the ring is full.
    pub(crate) fn push(&self, block: Block) -> Result<(), Block> {
        let mut pos = self.tail.load(Ordering::Relaxed);
        loop {
            let slot = &self.slots[pos % N];
            let seq = slot.seq.load(Ordering::Acquire);
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
                        slot.block.with_mut(|b| unsafe { *b = Some(block) });
                        slot.seq.store(pos.wrapping_add(1), PUBLISH);
                        return Ok(());
                    }
                    Err(now) => pos = now,
                },
                // The slot still holds the block from `N` positions back: full.
                d if d < 0 => return Err(block),
                // Another producer claimed `pos` already; catch up.
                _ => pos = self.tail.load(Ordering::Relaxed),
            }
        }
    }

    /// Takes the queued blocks from position `*head` on, in order, until a slot that is empty
    /// or still being written, and passes each to `free`.
    ///
    /// Callers must serialise calls (the heap's lock does) and keep `head` between them,
    /// starting at 0.
    pub(crate) fn drain(&self, head: &mut usize, mut free: impl FnMut(Block)) {
        loop {
            let slot = &self.slots[*head % N];
            if slot.seq.load(TAKE) != head.wrapping_add(1) {
                return;
            }
            // SAFETY: `seq == head + 1` (Acquire) orders this after the producer's write, and
            // no producer writes the slot again until the store below.
            let block = slot.block.with_mut(|b| unsafe { (*b).take() });
            slot.seq.store(head.wrapping_add(N), Ordering::Release);
            *head = head.wrapping_add(1);
            if let Some(block) = block {
                free(block);
            }
        }
    }
}
