//! The stream-ordering layer of a [`DevicePool`](crate::DevicePool): which stream may use
//! which memory when, over the memory below it (the [`Seam`]), as RMM's
//! `stream_ordered_memory_resource` sits over its free lists. The rules and why are on
//! [`DevicePool`](crate::DevicePool); this file is how.

use std::collections::BTreeSet;
use std::time::Instant;

use tagalloc::{Block, Error};

use super::block::DeviceBlock;
use super::error::DeviceError;
use super::pending::{BatchId, FencedFrees, Slot, SlotRef, Slots, StreamState};
use super::seam::Seam;
use super::stats::DeviceCounters;
use crate::addr_hash::AddrMap;
use crate::driver::{Capture, Driver};

/// Whether one stream or several have allocated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode<S> {
    /// Nothing allocated yet.
    Fresh,
    /// Only this stream has allocated (or been named by `record_stream`).
    Single(S),
    /// Several streams.
    Multi,
}

/// Where a chunk in use stands, for the multi-stream checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Entry {
    /// Pending, in this slot.
    Pending(u32),
    /// Taken back from a pending list and handed out with this tag.
    Reused(u32),
}

/// Why an allocation did not succeed.
#[derive(Debug)]
pub(crate) enum Miss {
    /// It failed.
    Fail(DeviceError),
    /// The device is out of memory while frees are pending: the host must wait for the
    /// device ([`StreamOrder::prepare_sync`], a synchronisation without any lock held,
    /// [`StreamOrder::synced`]) and the allocation be tried once more; the pool's error, if
    /// it may not.
    Sync(DeviceError),
}

impl From<DeviceError> for Miss {
    fn from(e: DeviceError) -> Miss {
        Miss::Fail(e)
    }
}

/// The capture id standing for an invalidated capture, whose id the driver does not say.
const INVALIDATED: u64 = u64::MAX;

/// Whether work in capture `a` may wait for work in capture `b` (`None`: outside any): the
/// same capture, not an invalidated one (two invalidated captures may be different ones).
fn same_capture(a: Option<u64>, b: Option<u64>) -> bool {
    a == b && a != Some(INVALIDATED)
}

/// Whether `e` says the pool ran out (the device or its limit).
fn exhausted(e: &DeviceError) -> bool {
    matches!(e, DeviceError::Pool { error, .. } if error.is_exhaustion())
}

/// What a host synchronisation covers: per stream, the last batch fenced before it, and
/// whether the epoch was recorded before it.
#[derive(Debug)]
pub(crate) struct Ticket {
    fenced: Vec<u64>,
    epoch: bool,
}

/// The switch to several streams: an event recorded on the one stream that had used the pool
/// until then. The heap's free chunks were freed on that stream, so another stream takes one
/// only after waiting (on the device) for this event, once, or after it is seen complete.
#[derive(Debug)]
struct Epoch<E> {
    event: E,
    /// The capture it was recorded in (see [`FencedFrees::capture`]).
    capture: Option<u64>,
    /// The first stream's entry (never forgotten while the epoch was recorded in a capture).
    first: usize,
}

/// A block being freed in multi-stream mode, as it grows by merging with pending neighbours.
struct Freeing {
    chunk: Block,
    batches: Vec<BatchId>,
    reusable: bool,
}

/// The fewest pool calls between two polls a miss makes: a poll queries an event per stream,
/// and on a trace where misses come in runs (a stream's turn) polling each of them finds
/// nothing new (figures: `docs/device-pool.md`).
const MISS_POLL_GAP: u64 = 32;

/// How many pending blocks, smallest first, a miss looks at for one it may take across
/// streams (one may be unusable: recorded in another capture).
const ACROSS_CANDIDATES: usize = 8;

/// The stream-ordering state of a device pool over driver `D`.
///
/// Invariants (checked by `check.rs`): in `Fresh` and `Single` mode nothing is pending,
/// `index`, `extra` and `sizes` are empty and there is no epoch; every live slot is as
/// [`Slot`] says, `index` names it and `sizes` holds it; every `Reused` entry lies in a region
/// of the heap.
pub(crate) struct StreamOrder<D: Driver> {
    pub(crate) mode: Mode<D::Stream>,
    pub(crate) streams: Vec<StreamState<D::Stream, D::Event>>,
    pub(crate) slots: Slots,
    /// Every pending slot, by (usable bytes, slot): the fits across streams.
    pub(crate) sizes: BTreeSet<(usize, u32)>,
    /// Chunk address → its place, in multi-stream mode, for pending and reused chunks.
    pub(crate) index: AddrMap<Entry>,
    /// A pending chunk's end address → its slot: to find the pending chunk before a free one.
    pub(crate) ends: AddrMap<u32>,
    /// Chunk address → the other streams `record_stream` named for the block living there.
    pub(crate) extra: AddrMap<Vec<D::Stream>>,
    /// Events not recorded now, to record next.
    idle_events: Vec<D::Event>,
    /// Events created and not destroyed.
    pub(crate) events: usize,
    /// The last tag handed out.
    tag: u32,
    /// Spare batch vectors.
    spare: Vec<Vec<SlotRef>>,
    batch: usize,
    batch_age: u64,
    max_pending: f64,
    granule: usize,
    /// Allocations and frees in multi-stream mode, to age open batches by.
    clock: u64,
    /// The clock at the last poll of every stream.
    polled: u64,
    epoch: Option<Epoch<D::Event>>,
    /// Captures under way on the device that the pool was told of.
    pub(crate) captures: u32,
    /// Whether an event (a batch's or the epoch's) was recorded in a capture and must be
    /// recorded again once its stream no longer captures.
    recapture: bool,
    pub(crate) counters: DeviceCounters,
}

impl<D: Driver> StreamOrder<D> {
    pub(crate) fn new(
        batch: usize,
        batch_age: u64,
        max_pending: f64,
        granule: usize,
    ) -> StreamOrder<D> {
        StreamOrder {
            mode: Mode::Fresh,
            streams: Vec::new(),
            slots: Slots::default(),
            sizes: BTreeSet::new(),
            index: AddrMap::default(),
            ends: AddrMap::default(),
            extra: AddrMap::default(),
            idle_events: Vec::new(),
            events: 0,
            tag: 0,
            spare: Vec::new(),
            batch: batch.max(1),
            batch_age: batch_age.max(1),
            max_pending,
            granule,
            clock: 0,
            polled: 0,
            epoch: None,
            captures: 0,
            recapture: false,
            counters: DeviceCounters::default(),
        }
    }

    // --- allocation ---------------------------------------------------------------------------

    /// Allocates `size` bytes on `stream` (see [`DevicePool`](crate::DevicePool) for the
    /// order of what it tries). `may_sync`: whether running out may ask for a host
    /// synchronisation ([`Miss::Sync`]) rather than fail.
    #[inline]
    pub(crate) fn alloc(
        &mut self,
        mem: &mut impl Seam<D>,
        size: usize,
        stream: D::Stream,
        may_sync: bool,
    ) -> Result<DeviceBlock<D::Stream>, Miss> {
        match self.mode {
            Mode::Single(s) if s == stream => Self::alloc_single(mem, size, stream),
            Mode::Fresh => {
                self.mode = Mode::Single(stream);
                self.stream_index(stream);
                Self::alloc_single(mem, size, stream)
            }
            Mode::Single(first) => {
                self.go_multi(mem, first)?;
                self.alloc_multi(mem, size, stream, may_sync)
            }
            Mode::Multi => self.alloc_multi(mem, size, stream, may_sync),
        }
    }

    /// One stream: the heap, growing if it must. Nothing is pending, so nothing to wait for.
    #[inline]
    fn alloc_single(
        mem: &mut impl Seam<D>,
        size: usize,
        stream: D::Stream,
    ) -> Result<DeviceBlock<D::Stream>, Miss> {
        match mem.take_growing(size) {
            Ok(chunk) => Ok(DeviceBlock::new(chunk, size, stream, 0)),
            Err(e) => Err(Miss::Fail(mem.refusal(e))),
        }
    }

    #[cold]
    #[inline(never)]
    fn alloc_multi(
        &mut self,
        mem: &mut impl Seam<D>,
        size: usize,
        stream: D::Stream,
        may_sync: bool,
    ) -> Result<DeviceBlock<D::Stream>, Miss> {
        self.clock += 1;
        if self.clock - self.polled >= self.batch_age {
            self.poll_all(mem)?;
            self.fence_all(mem)?;
        }
        let si = self.stream_index(stream);
        let need = match size.checked_next_multiple_of(self.granule) {
            Some(n) if n > 0 => n,
            // A size the heap refuses: let it say why.
            _ => return Self::alloc_single(mem, size, stream),
        };
        if let Some(b) = self.take_own(si, need, need + need / 8, size) {
            return Ok(b);
        }
        if let Some(b) = self.heap_block(mem, si, size, false)? {
            return Ok(b);
        }
        if self.slots.count > 0 {
            // A miss: what the device has passed goes back to the heap first (no wait at
            // all), then a pending block, taken by a device-side wait if another stream freed
            // it.
            if self.captures == 0 && self.clock - self.polled >= MISS_POLL_GAP {
                self.poll_all(mem)?;
                if let Some(b) = self.heap_block(mem, si, size, false)? {
                    return Ok(b);
                }
            }
            // A device-side wait orders the allocating stream after the freeing stream's work,
            // which costs the device concurrency while it lags; so it is taken while pending
            // blocks hold more than their share of the pool, and otherwise the pool grows.
            if self.pending_dominates(mem) {
                if let Some(b) = self.take_across(mem, si, need, size)? {
                    return Ok(b);
                }
            }
        }
        match self.heap_block(mem, si, size, true) {
            Ok(Some(b)) => Ok(b),
            Ok(None) => Err(DeviceError::Capturing(
                "a capturing stream cannot be ordered after the switch to several streams",
            )
            .into()),
            Err(Miss::Fail(e)) if self.slots.count > 0 && exhausted(&e) => {
                // Out of memory: a pending block by a device-side wait, else the host waits.
                if let Some(b) = self.take_across(mem, si, need, size)? {
                    return Ok(b);
                }
                if !may_sync {
                    return Err(Miss::Fail(e));
                }
                self.counters.exhaustion_retries += 1;
                Err(Miss::Sync(e))
            }
            Err(e) => Err(e),
        }
    }

    /// Whether pending blocks hold more than [`DeviceConfig::max_pending`] of the reserved
    /// bytes.
    fn pending_dominates(&self, mem: &impl Seam<D>) -> bool {
        self.slots.bytes as f64 > self.max_pending * mem.reserved() as f64
    }

    /// A chunk from the heap (`grow`: growing if it must) for stream `si`, ordered after the
    /// epoch; `None` when the heap has nothing (without growing), or when `si` captures and
    /// cannot wait for the epoch (the chunk goes back).
    fn heap_block(
        &mut self,
        mem: &mut impl Seam<D>,
        si: usize,
        size: usize,
        grow: bool,
    ) -> Result<Option<DeviceBlock<D::Stream>>, Miss> {
        let taken = if grow {
            mem.take_growing(size)
        } else {
            mem.take_free(size)
        };
        let chunk = match taken {
            Ok(c) => c,
            Err(e) if !grow && e.error == Error::OutOfMemory => return Ok(None),
            Err(e) => return Err(Miss::Fail(mem.refusal(e))),
        };
        match self.order_after_epoch(mem, si) {
            Ok(true) => Ok(Some(DeviceBlock::new(
                chunk,
                size,
                self.streams[si].stream,
                0,
            ))),
            Ok(false) => {
                mem.give_back(chunk);
                Ok(None)
            }
            Err(e) => {
                mem.give_back(chunk);
                Err(e.into())
            }
        }
    }

    /// Makes stream `si`'s later work run after the epoch, by a device-side wait, unless it
    /// already does; `false` when it cannot (it captures, the epoch does not).
    fn order_after_epoch(&mut self, mem: &impl Seam<D>, si: usize) -> Result<bool, DeviceError> {
        let Some((event, capture)) = self.epoch.as_ref().map(|e| (e.event, e.capture)) else {
            return Ok(true);
        };
        if self.streams[si].after_epoch {
            return Ok(true);
        }
        if !same_capture(self.capture_of(mem, si)?, capture) {
            return Ok(false);
        }
        self.device_wait(mem, si, event)?;
        self.streams[si].after_epoch = true;
        Ok(true)
    }

    /// Takes stream `si`'s own best pending fit between `need` and `max` bytes, for a request
    /// of `size` bytes: no wait (its own later work runs after its frees).
    fn take_own(
        &mut self,
        si: usize,
        need: usize,
        max: usize,
        size: usize,
    ) -> Option<DeviceBlock<D::Stream>> {
        let (_, slot) = self.streams[si].best_fit(need, max)?;
        let s = self.detach(slot);
        Some(self.hand_out(si, s.block, size, false))
    }

    /// Takes the smallest pending block of at least `need` bytes that stream `si` may use,
    /// making `si` wait on the device for the batches it is in (unless it did already), and
    /// leaves what it does not need pending in the same batches.
    fn take_across(
        &mut self,
        mem: &mut impl Seam<D>,
        si: usize,
        need: usize,
        size: usize,
    ) -> Result<Option<DeviceBlock<D::Stream>>, DeviceError> {
        let here = self.capture_of(mem, si)?;
        let candidates: Vec<u32> = self
            .sizes
            .range((need, 0)..)
            .take(ACROSS_CANDIDATES)
            .map(|&(_, slot)| slot)
            .collect();
        // A fit that needs no new wait first (the stream waited for its batches already),
        // else the smallest it may wait for.
        let free_of_waits = candidates
            .iter()
            .copied()
            .find(|&slot| self.waits_needed(si, slot).is_empty());
        let mut chosen = None;
        for slot in free_of_waits.into_iter().chain(candidates) {
            if self.may_take(mem, si, slot, here)? {
                chosen = Some(slot);
                break;
            }
        }
        if let Some(slot) = chosen {
            self.wait_for(mem, si, slot, here)?;
            let s = self.detach(slot);
            let across = s.stream as usize != si;
            let (head, tail) = if s.usable > need {
                mem.split(s.block, need)
            } else {
                (s.block, None)
            };
            if let Some(tail) = tail {
                self.keep_pending(mem, tail, &s)?;
            }
            return Ok(Some(self.hand_out(si, head, size, across)));
        }
        Ok(None)
    }

    /// Which batch of stream `t` stream `si` (in capture `here`) should wait for, to be
    /// ordered after batch `q` of `t`: `t`'s newest fenced batch if it is `q` or later (one
    /// wait then covers every block `t` freed up to it, and no event needs recording), else
    /// `q` itself (the open batch, fenced then); `None` when it may not be waited for (a
    /// capture's boundary between them).
    fn wait_target(
        &self,
        mem: &impl Seam<D>,
        t: usize,
        q: u64,
        here: Option<u64>,
    ) -> Result<Option<u64>, DeviceError> {
        let st = &self.streams[t];
        // The newest batch with an event already: no record needed to wait for it.
        if let Some(b) = st.fenced.back() {
            if b.seq >= q && same_capture(b.capture, here) {
                return Ok(Some(b.seq));
            }
        }
        let capture = match st.fenced_batch(q) {
            Some(b) => b.capture,
            // The open batch, fenced now if waited for.
            None if st.gone => return Ok(None),
            None => self.capture_of(mem, t)?,
        };
        Ok(same_capture(capture, here).then_some(q))
    }

    /// The batches of `slot` stream `si` would have to wait for: those still waiting, of
    /// other streams, that `si` has not waited for already.
    fn waits_needed(&self, si: usize, slot: u32) -> Vec<BatchId> {
        self.slots.slots[slot as usize]
            .batches
            .iter()
            .copied()
            .filter(|&(t, q)| {
                let t = t as usize;
                t != si && self.streams[t].holds_batch(q) && self.streams[si].waited_for(t) < q
            })
            .collect()
    }

    /// Whether stream `si` (in capture `here`) may wait for every batch of `slot` it needs:
    /// a wait crosses no capture's boundary.
    fn may_take(
        &mut self,
        mem: &impl Seam<D>,
        si: usize,
        slot: u32,
        here: Option<u64>,
    ) -> Result<bool, DeviceError> {
        for (t, q) in self.waits_needed(si, slot) {
            if self.wait_target(mem, t as usize, q, here)?.is_none() {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Makes stream `si` wait on the device for every batch of `slot` it needs (see
    /// [`StreamOrder::wait_target`]; an open batch is fenced first).
    fn wait_for(
        &mut self,
        mem: &mut impl Seam<D>,
        si: usize,
        slot: u32,
        here: Option<u64>,
    ) -> Result<(), DeviceError> {
        for (t, q) in self.waits_needed(si, slot) {
            let t = t as usize;
            let seq = self.wait_target(mem, t, q, here)?.unwrap_or(q);
            if seq == self.streams[t].open_seq {
                self.fence(mem, t)?;
            }
            if let Some(b) = self.streams[t].fenced_batch(seq) {
                let (event, knows) = (b.event, b.knows.clone());
                self.device_wait(mem, si, event)?;
                // Ordered after what `t` had waited for before that batch, too.
                self.streams[si].learn(&knows);
            }
            self.streams[si].note_wait(t, seq);
        }
        Ok(())
    }

    /// Queues a device-side wait of stream `si` for `event` (`cuStreamWaitEvent`).
    fn device_wait(
        &mut self,
        mem: &impl Seam<D>,
        si: usize,
        event: D::Event,
    ) -> Result<(), DeviceError> {
        let start = Instant::now();
        // SAFETY: the event is this pool's and live; the stream allocated from this pool and
        // is not forgotten, so it is live (the contract of stream values; see
        // `DevicePool::alloc`).
        let waited = unsafe {
            mem.driver()
                .stream_wait_event(self.streams[si].stream, event)
        };
        self.counters.stream_wait_ns += start.elapsed().as_nanos() as u64;
        waited?;
        self.counters.stream_waits += 1;
        Ok(())
    }

    /// Takes live slot `slot` out of every pending structure; returns it.
    fn detach(&mut self, slot: u32) -> Slot {
        let s = self.slots.remove(slot);
        self.sizes.remove(&(s.usable, slot));
        self.ends.remove(&(s.block.addr + s.usable));
        self.streams[s.stream as usize]
            .fit
            .remove(&(s.usable, slot));
        for &(t, q) in &s.batches {
            let st = &mut self.streams[t as usize];
            if st.holds_batch(q) {
                st.bytes -= s.usable;
            }
        }
        s
    }

    /// Keeps `tail`, split off a pending block `like`, pending in the batches `like` still
    /// waits for.
    fn keep_pending(
        &mut self,
        mem: &mut impl Seam<D>,
        tail: Block,
        like: &Slot,
    ) -> Result<(), DeviceError> {
        let batches: Vec<BatchId> = like
            .batches
            .iter()
            .copied()
            .filter(|&(t, q)| self.streams[t as usize].holds_batch(q))
            .collect();
        if batches.is_empty() {
            mem.give_back(tail); // cannot happen: a pending block waits for a batch
            return Ok(());
        }
        self.make_pending(mem, tail, like.stream, batches, like.reusable)
    }

    /// Makes `chunk` a pending block of stream `stream`, in `batches` (each a stream's open
    /// batch or one of its fenced ones, still waiting), reusable at once by its own stream if
    /// `reusable` (no other stream used it) and its own stream's is its only batch.
    fn make_pending(
        &mut self,
        mem: &impl Seam<D>,
        chunk: Block,
        stream: u32,
        batches: Vec<BatchId>,
        reusable: bool,
    ) -> Result<(), DeviceError> {
        let usable = chunk.size.next_multiple_of(self.granule);
        let listed = reusable && batches.len() == 1;
        let r = self.slots.insert(Slot {
            block: chunk,
            usable,
            stream,
            waits: u16::try_from(batches.len()).unwrap_or(u16::MAX),
            reusable,
            batches: batches.clone(),
            gen: 0,
            live: true,
        });
        self.index.insert(chunk.addr, Entry::Pending(r.slot));
        self.ends.insert(chunk.addr + usable, r.slot);
        self.sizes.insert((usable, r.slot));
        if listed {
            self.streams[stream as usize].fit.insert((usable, r.slot));
        }
        for (t, q) in batches {
            let t = t as usize;
            if q == self.streams[t].open_seq {
                self.join(mem, t, r)?;
            } else if let Some(b) = self.streams[t].fenced.iter_mut().find(|b| b.seq == q) {
                b.slots.push(r);
                self.streams[t].bytes += usable;
            }
        }
        Ok(())
    }

    /// Hands `chunk`, taken from a pending list, out to stream `si` as a block of `size`
    /// bytes, with a fresh tag.
    fn hand_out(
        &mut self,
        si: usize,
        chunk: Block,
        size: usize,
        across: bool,
    ) -> DeviceBlock<D::Stream> {
        self.tag = self.tag.wrapping_add(1).max(1);
        self.index.insert(chunk.addr, Entry::Reused(self.tag));
        self.counters.reused_pending += 1;
        self.counters.reused_across += u64::from(across);
        DeviceBlock::new(chunk, size, self.streams[si].stream, self.tag)
    }

    // --- frees --------------------------------------------------------------------------------

    /// Frees `block` on its stream: to the heap at once while one stream uses the pool, else
    /// to its stream's pending list.
    #[inline]
    pub(crate) fn free(
        &mut self,
        mem: &mut impl Seam<D>,
        block: DeviceBlock<D::Stream>,
    ) -> Result<(), DeviceError> {
        match self.mode {
            Mode::Single(_) if block.tag == 0 => {
                mem.free_checked(block.chunk).map_err(DeviceError::Block)
            }
            Mode::Multi => self.free_multi(mem, block),
            _ => Err(DeviceError::Block(Error::ForeignPointer)),
        }
    }

    /// Whether `block` is live in this pool as handed out, in multi-stream mode.
    pub(crate) fn validate(
        &self,
        mem: &impl Seam<D>,
        block: &DeviceBlock<D::Stream>,
    ) -> Result<(), Error> {
        match self.index.get(&block.chunk.addr) {
            Some(Entry::Pending(_)) => Err(Error::DoubleFree),
            Some(&Entry::Reused(tag)) if tag == block.tag => mem.is_live(&block.chunk),
            Some(Entry::Reused(_)) => Err(Error::DoubleFree),
            None if block.tag != 0 => Err(Error::DoubleFree),
            None => mem.is_live(&block.chunk),
        }
    }

    #[cold]
    #[inline(never)]
    fn free_multi(
        &mut self,
        mem: &mut impl Seam<D>,
        block: DeviceBlock<D::Stream>,
    ) -> Result<(), DeviceError> {
        self.validate(mem, &block).map_err(DeviceError::Block)?;
        self.clock += 1;
        // Its entry as reused goes; the (possibly merged) pending chunk gets its own below.
        self.index.remove(&block.chunk.addr);
        let si = self.stream_index(block.stream);
        let extras = self.extra.remove(&block.chunk.addr).unwrap_or_default();
        let mut freed = Freeing {
            chunk: block.chunk,
            batches: vec![(si as u32, self.streams[si].open_seq)],
            reusable: extras.is_empty(),
        };
        for t in extras {
            let ti = self.stream_index(t);
            if !freed.batches.iter().any(|&(s, _)| s as usize == ti) {
                freed.batches.push((ti as u32, self.streams[ti].open_seq));
            }
        }
        // Pending neighbours merge with it: one larger block that waits for all their
        // batches, which a miss can take whole where the pieces would not do.
        let end = freed.chunk.addr + freed.chunk.size.next_multiple_of(self.granule);
        if let Some(&Entry::Pending(next)) = self.index.get(&end) {
            self.absorb(mem, &mut freed, si, next, true);
        }
        if let Some(&prev) = self.ends.get(&freed.chunk.addr) {
            self.absorb(mem, &mut freed, si, prev, false);
        }
        self.make_pending(mem, freed.chunk, si as u32, freed.batches, freed.reusable)
    }

    /// Merges pending slot `other` (the chunk after `freed`'s if `after`, else the one
    /// before) into `freed`, a chunk being freed on stream `si`: the merged chunk waits for
    /// the batches of both (the later of two batches of one stream standing for both), and
    /// its own stream may take it at once only if both could. Nothing changes if the heap
    /// cannot merge them.
    fn absorb(
        &mut self,
        mem: &mut impl Seam<D>,
        freed: &mut Freeing,
        si: usize,
        other: u32,
        after: bool,
    ) {
        let o = &self.slots.slots[other as usize];
        let (first, second) = if after {
            (freed.chunk, o.block)
        } else {
            (o.block, freed.chunk)
        };
        let Some(merged) = mem.merge(first, second) else {
            return;
        };
        let o = self.detach(other);
        self.index.remove(&o.block.addr);
        for (t, q) in o.batches {
            if !self.streams[t as usize].holds_batch(q) {
                continue;
            }
            match freed.batches.iter_mut().find(|(s, _)| *s == t) {
                Some((_, mine)) => *mine = (*mine).max(q),
                None => freed.batches.push((t, q)),
            }
        }
        freed.reusable &= o.reusable && o.stream as usize == si;
        freed.chunk = merged;
    }

    /// Adds a pending slot to stream `si`'s open batch, fencing the batch when it is full.
    fn join(&mut self, mem: &impl Seam<D>, si: usize, r: SlotRef) -> Result<(), DeviceError> {
        let state = &mut self.streams[si];
        if state.open.capacity() == 0 {
            if let Some(v) = self.spare.pop() {
                state.open = v;
            }
        }
        state.open.push(r);
        state.bytes += self.slots.get(r).map_or(0, |s| s.usable);
        if state.open.len() >= self.batch {
            self.fence(mem, si)?;
        }
        Ok(())
    }

    /// Marks `block` as used by `other` as well as its own stream (see
    /// [`DevicePool::record_stream`](crate::DevicePool::record_stream)).
    pub(crate) fn record_stream(
        &mut self,
        mem: &impl Seam<D>,
        block: &DeviceBlock<D::Stream>,
        other: D::Stream,
    ) -> Result<(), DeviceError> {
        match self.mode {
            Mode::Fresh => return Err(DeviceError::Block(Error::ForeignPointer)),
            Mode::Single(s) => {
                if block.tag != 0 {
                    return Err(DeviceError::Block(Error::DoubleFree));
                }
                mem.is_live(&block.chunk).map_err(DeviceError::Block)?;
                if other == s {
                    return Ok(());
                }
                self.go_multi(mem, s)?;
            }
            Mode::Multi => self.validate(mem, block).map_err(DeviceError::Block)?,
        }
        if other != block.stream {
            self.stream_index(other);
            let uses = self.extra.entry(block.chunk.addr).or_default();
            if !uses.contains(&other) {
                uses.push(other);
            }
        }
        Ok(())
    }

    // --- streams ------------------------------------------------------------------------------

    /// The index of `stream` in the table: its entry, else an idle forgotten entry made new,
    /// else a new one.
    pub(crate) fn stream_index(&mut self, stream: D::Stream) -> usize {
        if let Some(i) = self.live_index(stream) {
            return i;
        }
        if let Some(i) = self.streams.iter().position(|s| s.gone && s.idle()) {
            // Its batch numbers go on from the old stream's, so what other streams (and
            // their batches' `knows`) note of the old one stays below every batch of the new.
            let open_seq = self.streams[i].open_seq;
            self.streams[i] = StreamState::new(stream);
            self.streams[i].open_seq = open_seq;
            return i;
        }
        self.streams.push(StreamState::new(stream));
        self.streams.len() - 1
    }

    /// The entry of `stream`, if the pool uses it (not forgotten).
    fn live_index(&self, stream: D::Stream) -> Option<usize> {
        self.streams
            .iter()
            .position(|s| s.stream == stream && !s.gone)
    }

    /// The capture stream `si` is in, asked of the driver only while the pool was told a
    /// capture is under way (otherwise none is, by the pool's contract).
    fn capture_of(&self, mem: &impl Seam<D>, si: usize) -> Result<Option<u64>, DeviceError> {
        if self.captures == 0 {
            return Ok(None);
        }
        Self::ask_capture(mem, self.streams[si].stream)
    }

    /// The capture `stream` is in, from the driver (an invalidated one as [`INVALIDATED`],
    /// which [`same_capture`] matches with nothing).
    fn ask_capture(mem: &impl Seam<D>, stream: D::Stream) -> Result<Option<u64>, DeviceError> {
        // SAFETY: the stream allocated from this pool (or was named to it) and is not
        // forgotten: live by the contract of stream values.
        Ok(match unsafe { mem.driver().stream_capture(stream)? } {
            Capture::None => None,
            Capture::Active(id) => Some(id),
            Capture::Invalidated => Some(INVALIDATED),
        })
    }

    /// Switches to the multi-stream rules: records the epoch on the first stream (the blocks
    /// it freed into the heap may still be in use there).
    #[cold]
    fn go_multi(&mut self, mem: &impl Seam<D>, first: D::Stream) -> Result<(), DeviceError> {
        let fi = self.stream_index(first);
        let capture = self.capture_of(mem, fi)?;
        let event = self.record(mem, first)?;
        self.recapture |= capture.is_some();
        self.epoch = Some(Epoch {
            event,
            capture,
            first: fi,
        });
        self.streams[fi].after_epoch = true;
        self.mode = Mode::Multi;
        Ok(())
    }

    /// Stops naming `stream` to the driver: fences its open batch (the pool's last call on
    /// it), after which it may be destroyed (see
    /// [`DevicePool::forget_stream`](crate::DevicePool::forget_stream)).
    pub(crate) fn forget_stream(
        &mut self,
        mem: &impl Seam<D>,
        stream: D::Stream,
    ) -> Result<(), DeviceError> {
        let Some(si) = self.live_index(stream) else {
            return Ok(()); // never seen, or forgotten already
        };
        let epoch_captured = self
            .epoch
            .as_ref()
            .is_some_and(|e| e.first == si && e.capture.is_some());
        let captured = epoch_captured
            || self.streams[si].fenced.iter().any(|b| b.capture.is_some())
            || Self::ask_capture(mem, stream)?.is_some();
        if captured {
            return Err(DeviceError::Capturing("forgetting a stream it captures on"));
        }
        if self.mode == Mode::Single(stream) {
            self.go_multi(mem, stream)?;
        }
        self.fence(mem, si)?;
        self.streams[si].gone = true;
        Ok(())
    }

    // --- events -------------------------------------------------------------------------------

    /// Records an event (an idle one, or a new one) on `stream`; returns it.
    fn record(&mut self, mem: &impl Seam<D>, stream: D::Stream) -> Result<D::Event, DeviceError> {
        let event = match self.idle_events.pop() {
            Some(e) => e,
            None => {
                let e = mem.driver().event_create()?;
                self.events += 1;
                e
            }
        };
        // SAFETY: the event is this pool's and live; the stream allocated from (or was named
        // to) this pool and is not forgotten, so it is live (see `DevicePool::alloc`).
        if let Err(e) = unsafe { mem.driver().event_record(event, stream) } {
            self.idle_events.push(event);
            return Err(e.into());
        }
        self.counters.events_recorded += 1;
        Ok(event)
    }

    /// Records an event on stream `si` for its open batch.
    fn fence(&mut self, mem: &impl Seam<D>, si: usize) -> Result<(), DeviceError> {
        if self.streams[si].open.is_empty() || self.streams[si].gone {
            return Ok(());
        }
        let capture = self.capture_of(mem, si)?;
        let event = self.record(mem, self.streams[si].stream)?;
        self.recapture |= capture.is_some();
        let st = &mut self.streams[si];
        let slots = std::mem::take(&mut st.open);
        let seq = st.open_seq;
        st.open_seq += 1;
        let knows = st.waited.clone();
        st.fenced.push_back(FencedFrees {
            event,
            seq,
            capture,
            slots,
            knows,
        });
        Ok(())
    }

    /// Fences every stream's open batch.
    pub(crate) fn fence_all(&mut self, mem: &impl Seam<D>) -> Result<(), DeviceError> {
        for si in 0..self.streams.len() {
            self.fence(mem, si)?;
        }
        Ok(())
    }

    /// Returns stream `si`'s completed batches to the heap, oldest first, stopping at the first
    /// that has not completed (or was recorded in a capture).
    fn poll(&mut self, mem: &mut impl Seam<D>, si: usize) -> Result<(), DeviceError> {
        while let Some(batch) = self.streams[si].fenced.front() {
            if batch.capture.is_some() {
                break;
            }
            let event = batch.event;
            self.counters.event_queries += 1;
            // SAFETY: the event is this pool's and live.
            if !unsafe { mem.driver().event_query(event)? } {
                break;
            }
            self.release_front(mem, si);
        }
        Ok(())
    }

    /// Releases stream `si`'s oldest fenced batch (its work is done).
    fn release_front(&mut self, mem: &mut impl Seam<D>, si: usize) {
        if let Some(batch) = self.streams[si].fenced.pop_front() {
            self.release(mem, si, batch.slots);
            self.idle_events.push(batch.event);
            self.counters.batches_released += 1;
        }
    }

    /// Polls the epoch and every stream's fenced batches, oldest first (one query for a
    /// stream whose oldest batch has not completed). Nothing while a capture is under way:
    /// querying an event is illegal then.
    fn poll_all(&mut self, mem: &mut impl Seam<D>) -> Result<(), DeviceError> {
        self.polled = self.clock;
        if self.captures > 0 {
            return Ok(());
        }
        if self.recapture {
            self.record_again(mem)?;
        }
        if let Some(ep) = &self.epoch {
            if ep.capture.is_none() {
                self.counters.event_queries += 1;
                // SAFETY: the event is this pool's and live.
                if unsafe { mem.driver().event_query(ep.event)? } {
                    if let Some(ep) = self.epoch.take() {
                        self.idle_events.push(ep.event);
                    }
                }
            }
        }
        for si in 0..self.streams.len() {
            self.poll(mem, si)?;
        }
        Ok(())
    }

    /// Records again, outside the capture, every event that was recorded in one, on streams
    /// that no longer capture: from then on they stand for a point of the device's timeline
    /// after the frees (and after the work queued before the capture).
    fn record_again(&mut self, mem: &impl Seam<D>) -> Result<(), DeviceError> {
        let mut still = false;
        for si in 0..self.streams.len() {
            let st = &self.streams[si];
            if !st.fenced.iter().any(|b| b.capture.is_some()) {
                continue;
            }
            if Self::ask_capture(mem, st.stream)?.is_some() {
                still = true;
                continue;
            }
            let stream = st.stream;
            for i in 0..self.streams[si].fenced.len() {
                let b = &self.streams[si].fenced[i];
                if b.capture.is_none() {
                    continue;
                }
                // SAFETY: the event is this pool's and live, the stream live (not forgotten:
                // a stream with captured batches is never forgotten).
                unsafe { mem.driver().event_record(b.event, stream)? };
                self.counters.events_recorded += 1;
                self.streams[si].fenced[i].capture = None;
            }
        }
        if let Some((first, event)) = self
            .epoch
            .as_ref()
            .filter(|e| e.capture.is_some())
            .map(|e| (e.first, e.event))
        {
            let stream = self.streams[first].stream;
            if Self::ask_capture(mem, stream)?.is_some() {
                still = true;
            } else {
                // SAFETY: the event is this pool's and live; the first stream is not
                // forgotten while its epoch was recorded in a capture.
                unsafe { mem.driver().event_record(event, stream)? };
                self.counters.events_recorded += 1;
                if let Some(ep) = &mut self.epoch {
                    ep.capture = None;
                }
            }
        }
        self.recapture = still;
        Ok(())
    }

    /// Counts one batch of stream `si` done for each slot of `slots`, and returns those it
    /// was the last wait of to the heap.
    fn release(&mut self, mem: &mut impl Seam<D>, si: usize, mut slots: Vec<SlotRef>) {
        for &r in &slots {
            let Some(s) = self.slots.get_mut(r) else {
                continue; // taken back since
            };
            s.waits -= 1;
            let (usable, waits) = (s.usable, s.waits);
            self.streams[si].bytes -= usable;
            if waits > 0 {
                continue;
            }
            let s = self.slots.remove(r.slot);
            self.sizes.remove(&(s.usable, r.slot));
            self.streams[s.stream as usize]
                .fit
                .remove(&(s.usable, r.slot));
            self.index.remove(&s.block.addr);
            self.ends.remove(&(s.block.addr + s.usable));
            mem.give_back(s.block);
        }
        slots.clear();
        self.spare.push(slots);
    }

    /// Records an event for every open batch and returns every batch whose event has
    /// completed to the heap, without waiting for any; returns how many pending blocks went
    /// back.
    pub(crate) fn process_events(&mut self, mem: &mut impl Seam<D>) -> Result<usize, DeviceError> {
        let before = self.slots.count;
        self.fence_all(mem)?;
        self.poll_all(mem)?;
        Ok(before - self.slots.count)
    }

    // --- host synchronisation -----------------------------------------------------------------

    /// Before a host synchronisation of the context: fences every open batch, and says what
    /// the synchronisation will cover (`None`: nothing waits, no synchronisation needed).
    /// Refused while a capture is under way.
    pub(crate) fn prepare_sync(
        &mut self,
        mem: &mut impl Seam<D>,
    ) -> Result<Option<Ticket>, DeviceError> {
        let idle = self.slots.count == 0
            && self.epoch.is_none()
            && self.streams.iter().all(|s| s.open.is_empty());
        if idle {
            return Ok(None);
        }
        if self.captures > 0 {
            return Err(DeviceError::Capturing("waiting for the device"));
        }
        if self.recapture {
            self.record_again(mem)?;
        }
        self.fence_all(mem)?;
        Ok(Some(Ticket {
            fenced: self.streams.iter().map(|s| s.open_seq - 1).collect(),
            epoch: self.epoch.is_some(),
        }))
    }

    /// After the host synchronisation `ticket` was made for (it took `ns` nanoseconds):
    /// everything it covers goes back to the heap.
    pub(crate) fn synced(&mut self, mem: &mut impl Seam<D>, ticket: Ticket, ns: u64) {
        self.counters.synchronizations += 1;
        self.counters.host_sync_ns += ns;
        for (si, &last) in ticket.fenced.iter().enumerate() {
            while let Some(b) = self.streams[si].fenced.front() {
                if b.seq > last || b.capture.is_some() {
                    break;
                }
                self.release_front(mem, si);
            }
        }
        if ticket.epoch {
            if let Some(ep) = self.epoch.take() {
                self.idle_events.push(ep.event);
            }
        }
    }

    // --- captures -----------------------------------------------------------------------------

    /// Told that a capture began on the device (before its first allocation).
    pub(crate) fn capture_begun(&mut self) {
        self.captures += 1;
    }

    /// Told that a capture ended: once none is under way, events recorded in captures are
    /// recorded again where their streams no longer capture.
    pub(crate) fn capture_ended(&mut self, mem: &impl Seam<D>) -> Result<(), DeviceError> {
        self.captures = self.captures.saturating_sub(1);
        if self.captures == 0 && self.recapture {
            self.record_again(mem)?;
        }
        Ok(())
    }

    // --- teardown -----------------------------------------------------------------------------

    /// Destroys the idle events.
    pub(crate) fn destroy_idle_events(&mut self, mem: &impl Seam<D>) {
        for event in self.idle_events.drain(..) {
            // SAFETY: the event is this pool's, recorded on nothing now, and dropped here.
            let _ = unsafe { mem.driver().event_destroy(event) };
            self.events -= 1;
        }
    }

    /// Destroys every event (the pool is going): the driver frees a pending one once it
    /// completes.
    pub(crate) fn destroy_all_events(&mut self, mem: &impl Seam<D>) {
        for st in &mut self.streams {
            for batch in st.fenced.drain(..) {
                self.idle_events.push(batch.event);
            }
        }
        if let Some(ep) = self.epoch.take() {
            self.idle_events.push(ep.event);
        }
        self.destroy_idle_events(mem);
    }
}
