//! Blocks freed on a stream that other streams may not reuse yet: the pending lists of a
//! [`DevicePool`](crate::DevicePool), and the batches of frees one event covers.
//!
//! A block freed on stream S while other streams use the pool is *pending*: S may take it
//! again at once (S's own later work runs after the work that used it), any other stream only
//! once the device has finished everything S had queued when it was freed. It joins S's *open
//! batch*; one event recorded on S *fences* the whole batch (one `cuEventRecord` per batch, not
//! per free), and when that event has completed the batch's blocks go back to the pool's heap,
//! where they merge with their free neighbours and serve every stream. Events on one stream
//! complete in order, so only the oldest fenced batch of each stream is ever queried.
//!
//! A block that `record_stream` marked as used by other streams too waits for a batch of each
//! of those streams as well (`waits` counts the batches it is in), and is not reusable by S
//! before them either.

use std::collections::{BTreeSet, VecDeque};

use tagalloc::Block;

/// Names a pending slot as it was when a batch took it: a slot reused since (its generation
/// moved on) is skipped when the batch is released.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SlotRef {
    pub(crate) slot: u32,
    pub(crate) gen: u32,
}

/// A pending block.
///
/// Invariant (for a live slot): `block` is a live allocation of the pool's heap; the slot is
/// in exactly `waits` batches (open or fenced) under its current generation; it is in its
/// stream's `fit` set, keyed `(usable, slot)`, iff `waits == 1 && reusable`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Slot {
    pub(crate) block: Block,
    /// Bytes of the chunk (the block's size rounded up to the granule).
    pub(crate) usable: usize,
    /// The stream it was freed on (an index into the pool's stream table).
    pub(crate) stream: u32,
    /// Batches it waits for.
    pub(crate) waits: u16,
    /// Whether its own stream may take it again at once (no `record_stream` uses).
    pub(crate) reusable: bool,
    pub(crate) gen: u32,
    pub(crate) live: bool,
}

/// The arena of pending slots.
#[derive(Debug, Default)]
pub(crate) struct Slots {
    pub(crate) slots: Vec<Slot>,
    vacant: Vec<u32>,
    /// Live slots, and their bytes.
    pub(crate) count: usize,
    pub(crate) bytes: usize,
    /// The most `bytes` ever reached.
    pub(crate) peak: usize,
}

impl Slots {
    /// Stores a pending block; returns its reference.
    pub(crate) fn insert(
        &mut self,
        block: Block,
        usable: usize,
        stream: u32,
        waits: u16,
        reusable: bool,
    ) -> SlotRef {
        let slot = Slot {
            block,
            usable,
            stream,
            waits,
            reusable,
            gen: 0,
            live: true,
        };
        self.count += 1;
        self.bytes += usable;
        self.peak = self.peak.max(self.bytes);
        match self.vacant.pop() {
            Some(i) => {
                let s = &mut self.slots[i as usize];
                let gen = s.gen;
                *s = Slot { gen, ..slot };
                SlotRef { slot: i, gen }
            }
            None => {
                self.slots.push(slot);
                SlotRef {
                    slot: (self.slots.len() - 1) as u32,
                    gen: 0,
                }
            }
        }
    }

    /// The live slot `r` names, if it still does.
    pub(crate) fn get(&self, r: SlotRef) -> Option<&Slot> {
        self.slots
            .get(r.slot as usize)
            .filter(|s| s.live && s.gen == r.gen)
    }

    pub(crate) fn get_mut(&mut self, r: SlotRef) -> Option<&mut Slot> {
        self.slots
            .get_mut(r.slot as usize)
            .filter(|s| s.live && s.gen == r.gen)
    }

    /// Empties slot `i` (its block leaves the pending lists); the batches that still name it
    /// skip it from now on.
    pub(crate) fn remove(&mut self, i: u32) -> Slot {
        let s = &mut self.slots[i as usize];
        let out = *s;
        s.live = false;
        s.gen = s.gen.wrapping_add(1);
        self.count -= 1;
        self.bytes -= out.usable;
        self.vacant.push(i);
        out
    }
}

/// Frees that one event covers.
#[derive(Debug)]
pub(crate) struct Batch<E> {
    pub(crate) event: E,
    pub(crate) slots: Vec<SlotRef>,
}

/// What the pool keeps per stream.
///
/// Invariant: `fenced` is in recording order (so in completion order); `fit` holds exactly the
/// live slots of this stream that it may take again at once (see [`Slot`]).
#[derive(Debug)]
pub(crate) struct StreamState<S, E> {
    pub(crate) stream: S,
    /// Pending blocks this stream may take at once: (usable bytes, slot), best fit first.
    pub(crate) fit: BTreeSet<(usize, u32)>,
    /// Frees since the last event recorded on this stream.
    pub(crate) open: Vec<SlotRef>,
    /// Bytes of the live slots in this stream's batches, open and fenced: what waiting for the
    /// stream would return (or let go on to their other streams' waits).
    pub(crate) bytes: usize,
    /// Batches with an event recorded, oldest first.
    pub(crate) fenced: VecDeque<Batch<E>>,
}

impl<S, E> StreamState<S, E> {
    pub(crate) fn new(stream: S) -> Self {
        StreamState {
            stream,
            fit: BTreeSet::new(),
            open: Vec::new(),
            bytes: 0,
            fenced: VecDeque::new(),
        }
    }

    /// The best pending fit of at least `need` bytes and at most `max`: its slot.
    pub(crate) fn best_fit(&self, need: usize, max: usize) -> Option<(usize, u32)> {
        self.fit
            .range((need, 0)..)
            .next()
            .copied()
            .filter(|&(usable, _)| usable <= max)
    }
}
