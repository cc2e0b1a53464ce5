//! Blocks freed on a stream that other streams may not use yet without a wait: the pending
//! slots of a [`DevicePool`](crate::DevicePool), the batches of frees one event covers, and
//! what the pool keeps per stream.
//!
//! A block freed on stream S while several streams use the pool is *pending*: S may take it
//! again at once (S's own later work runs after the work that used it); another stream T may
//! take it by waiting on the device for the event that covers the free (`cuStreamWaitEvent`);
//! once that event has completed, the block goes back to the pool's heap, where it merges
//! with its free neighbours and serves every stream with no wait. It joins S's *open batch*;
//! one event recorded on S *fences* the whole batch (one `cuEventRecord` per batch, not per
//! free). Events on one stream complete in order, so only the oldest fenced batch of each
//! stream is ever queried, and a stream that waited for one batch of S is ordered after every
//! earlier batch of S too.
//!
//! A block that `record_stream` marked as used by other streams too is in a batch of each of
//! those streams as well (`waits` counts the batches it is still in), and its own stream may
//! not take it back before them either.

use std::collections::{BTreeSet, VecDeque};

use tagalloc::Block;

/// Names a pending slot as it was when a batch took it: a slot reused since (its generation
/// moved on) is skipped when the batch is released.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SlotRef {
    pub(crate) slot: u32,
    pub(crate) gen: u32,
}

/// A batch of a stream, by its sequence number on that stream: (stream index, batch seq).
pub(crate) type BatchId = (u32, u64);

/// A pending block.
///
/// Invariant (for a live slot): `block` is a live chunk of the pool's heap; the slot is in
/// exactly `waits` live batches (open or fenced) under its current generation, each named in
/// `batches`; it is in the pool's size index; it is in its stream's `fit` set, keyed
/// `(usable, slot)`, iff `waits == 1 && reusable`.
#[derive(Clone, Debug)]
pub(crate) struct Slot {
    pub(crate) block: Block,
    /// Bytes of the chunk.
    pub(crate) usable: usize,
    /// The stream it was freed on (an index into the pool's stream table).
    pub(crate) stream: u32,
    /// Live batches it is in.
    pub(crate) waits: u16,
    /// Whether its own stream may take it again at once (no `record_stream` uses).
    pub(crate) reusable: bool,
    /// The batches it joined: its own stream's first, then its other users'.
    pub(crate) batches: Vec<BatchId>,
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
    pub(crate) fn insert(&mut self, slot: Slot) -> SlotRef {
        self.count += 1;
        self.bytes += slot.usable;
        self.peak = self.peak.max(self.bytes);
        match self.vacant.pop() {
            Some(i) => {
                let s = &mut self.slots[i as usize];
                let gen = s.gen;
                *s = Slot {
                    gen,
                    live: true,
                    ..slot
                };
                SlotRef { slot: i, gen }
            }
            None => {
                self.slots.push(Slot {
                    gen: 0,
                    live: true,
                    ..slot
                });
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
        let out = Slot {
            batches: std::mem::take(&mut s.batches),
            ..s.clone()
        };
        s.live = false;
        s.gen = s.gen.wrapping_add(1);
        self.count -= 1;
        self.bytes -= out.usable;
        self.vacant.push(i);
        out
    }
}

/// Frees that one event covers: the `seq`-th batch of its stream.
#[derive(Debug)]
pub(crate) struct FencedFrees<E> {
    pub(crate) event: E,
    pub(crate) seq: u64,
    /// The capture the event was recorded in (its stream was capturing then): such an event is
    /// a node of the graph, never queried, and recorded again once the capture is over.
    pub(crate) capture: Option<u64>,
    pub(crate) slots: Vec<SlotRef>,
    /// Its stream's `waited` when it was fenced: a stream that waits for this batch is
    /// ordered after those batches of other streams too.
    pub(crate) knows: Vec<u64>,
}

/// What the pool keeps per stream.
///
/// Invariant: `fenced` is in recording order (so in completion order), its `seq`s increasing
/// and below `open_seq`; `fit` holds exactly the live slots of this stream that it may take
/// again at once (see [`Slot`]); `waited` names, per other stream, a batch seq at most that
/// stream's `open_seq`; a `gone` stream has an empty open batch.
#[derive(Debug)]
pub(crate) struct StreamState<S, E> {
    pub(crate) stream: S,
    /// Pending blocks this stream may take at once: (usable bytes, slot), best fit first.
    pub(crate) fit: BTreeSet<(usize, u32)>,
    /// Frees since the last event recorded on this stream.
    pub(crate) open: Vec<SlotRef>,
    /// The seq the open batch will have when fenced.
    pub(crate) open_seq: u64,
    /// Bytes of the live slots in this stream's batches, open and fenced.
    pub(crate) bytes: usize,
    /// Batches with an event recorded, oldest first.
    pub(crate) fenced: VecDeque<FencedFrees<E>>,
    /// Per other stream (by index), the latest of its batches this stream waited for on the
    /// device: this stream's later work runs after that batch and every earlier one.
    pub(crate) waited: Vec<u64>,
    /// Whether this stream's work is ordered after the pool's switch to several streams (see
    /// `order.rs`, the epoch).
    pub(crate) after_epoch: bool,
    /// Forgotten ([`DevicePool::forget_stream`](crate::DevicePool::forget_stream)): never
    /// named to the driver again.
    pub(crate) gone: bool,
}

impl<S, E> StreamState<S, E> {
    pub(crate) fn new(stream: S) -> Self {
        StreamState {
            stream,
            fit: BTreeSet::new(),
            open: Vec::new(),
            open_seq: 1,
            bytes: 0,
            fenced: VecDeque::new(),
            waited: Vec::new(),
            after_epoch: false,
            gone: false,
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

    /// The fenced batch `seq`, if it is still waiting.
    pub(crate) fn fenced_batch(&self, seq: u64) -> Option<&FencedFrees<E>> {
        let i = self.fenced.partition_point(|b| b.seq < seq);
        self.fenced.get(i).filter(|b| b.seq == seq)
    }

    /// Whether batch `seq` of this stream still waits (open, or fenced and not released).
    pub(crate) fn holds_batch(&self, seq: u64) -> bool {
        seq == self.open_seq || self.fenced_batch(seq).is_some()
    }

    /// The latest batch of stream `t` this stream waited for (0: none).
    pub(crate) fn waited_for(&self, t: usize) -> u64 {
        self.waited.get(t).copied().unwrap_or(0)
    }

    /// Notes that this stream is ordered after what `knows` names (another stream's
    /// `waited`, taken over through a wait).
    pub(crate) fn learn(&mut self, knows: &[u64]) {
        if self.waited.len() < knows.len() {
            self.waited.resize(knows.len(), 0);
        }
        for (w, &k) in self.waited.iter_mut().zip(knows) {
            *w = (*w).max(k);
        }
    }

    /// Notes that this stream waited for batch `seq` of stream `t`.
    pub(crate) fn note_wait(&mut self, t: usize, seq: u64) {
        if self.waited.len() <= t {
            self.waited.resize(t + 1, 0);
        }
        self.waited[t] = self.waited[t].max(seq);
    }

    /// Whether nothing of this stream waits any more (an entry that may serve a new stream).
    pub(crate) fn idle(&self) -> bool {
        self.open.is_empty() && self.fenced.is_empty() && self.bytes == 0
    }
}
