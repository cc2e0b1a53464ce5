//! [`DevicePool`]: a device memory pool with stream-ordered reuse (its docs give the rules
//! and why), with its configuration, blocks, errors and statistics.

use core::fmt;

use tagalloc::Trimmed;
use tagalloc::{Block, DetachedHeap, Error, Growth, Policy, Pool, PoolError, PoolStats, Record};

use crate::addr_hash::AddrMap;
use crate::driver::{DevicePtr, Driver};
use crate::error::DriverError;
use crate::pending::{Batch, SlotRef, Slots, StreamState};
use crate::snapshot::{BlockState, SnapshotBlock, SnapshotRegion};
use crate::source::{DeviceSource, Regions, DEVICE_GRANULE};

/// The heap a device pool allocates from: detached tags in a growable table.
pub type DeviceHeap = DetachedHeap<Vec<Record>>;

/// How a [`DevicePool`] is set up.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DeviceConfig {
    /// Where regions come from.
    pub regions: Regions,
    /// Growth, reservation, limit, bypass and trimming ([`Policy::release_above`] must be set
    /// for a trim to unmap free tail chunks of a [`Regions::Vmm`] pool).
    pub policy: Policy,
    /// The heap's granule: sizes are rounded up to it and blocks aligned to it (a power of two;
    /// 256 is what `cuMemAlloc` guarantees).
    pub granule: usize,
    /// The most frees one event covers: a stream's open batch is fenced when it reaches this.
    pub batch: usize,
    /// The most pool calls (allocations and frees, on any stream) an open batch waits before
    /// it is fenced, and between two polls of every stream's oldest fenced batch: the sooner
    /// an event is recorded and seen complete, the sooner the memory serves every stream; the
    /// later, the fewer driver calls.
    pub batch_age: u64,
    /// The share of the reserved bytes that pending blocks may hold before the pool, rather
    /// than grow, waits for the oldest batches' events (`cuEventSynchronize`): pending memory
    /// never dominates the pool. Greater than 0, at most 1 (1: never wait while the pool can
    /// grow).
    pub max_pending: f64,
}

impl DeviceConfig {
    /// The default [`DeviceConfig::batch`].
    pub const BATCH: usize = 64;
    /// The default [`DeviceConfig::batch_age`].
    pub const BATCH_AGE: u64 = 128;
    /// The default [`DeviceConfig::max_pending`]: pending blocks at most a tenth of the pool
    /// before a miss waits rather than grows (figures in `docs/device-pool.md`).
    pub const MAX_PENDING: f64 = 0.1;

    /// Plain device allocations ([`Regions::PLAIN`]), regions doubling from 64 MiB to 1 GiB
    /// (a request larger than that gets a region its size): few driver calls for a large
    /// workload, little held for a small one; a region wholly free after a trim goes back.
    pub const PLAIN: DeviceConfig = DeviceConfig {
        regions: Regions::PLAIN,
        policy: Policy::new().growth(Growth::Doubling {
            initial: 64 << 20,
            cap: 1 << 30,
        }),
        granule: DEVICE_GRANULE,
        batch: DeviceConfig::BATCH,
        batch_age: DeviceConfig::BATCH_AGE,
        max_pending: DeviceConfig::MAX_PENDING,
    };

    /// Virtual-memory growth ([`Regions::VMM`]): one region grown by 64 MiB chunks, trimmed by
    /// whole free tail chunks.
    pub const VMM: DeviceConfig = DeviceConfig {
        regions: Regions::VMM,
        policy: Policy::new()
            .growth(Growth::Fixed(64 << 20))
            .release_above(64 << 20),
        granule: DEVICE_GRANULE,
        batch: DeviceConfig::BATCH,
        batch_age: DeviceConfig::BATCH_AGE,
        max_pending: DeviceConfig::MAX_PENDING,
    };
}

/// A block of device memory from a [`DevicePool`]: its address, the size asked for, and the
/// stream it belongs to. Give it back to [`DevicePool::free`] as received; a copy freed twice,
/// or a block of another pool, is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DeviceBlock<S> {
    ptr: DevicePtr,
    size: usize,
    stream: S,
    /// The heap's block for the chunk (with the size the chunk was first allocated for).
    chunk: Block,
    /// 0, or the tag of this life of a chunk taken back from a pending list.
    tag: u32,
}

impl<S: Copy> DeviceBlock<S> {
    /// The device address (never dereference it on the host).
    pub fn ptr(&self) -> DevicePtr {
        self.ptr
    }

    /// The bytes asked for.
    pub fn size(&self) -> usize {
        self.size
    }

    /// The stream it was allocated on.
    pub fn stream(&self) -> S {
        self.stream
    }
}

/// Why a [`DevicePool`] call failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DeviceError {
    /// The pool refused a request: out of memory (after reusing completed frees, synchronising
    /// and trimming), over its limit, or a bad size; with the pool's figures, and the driver's
    /// error when a driver call was what failed.
    Pool {
        /// What the pool said, with its figures.
        error: PoolError,
        /// The source's last driver error, if a driver call failed on the way.
        driver: Option<DriverError>,
    },
    /// The block is not a live block of this pool: freed already (`DoubleFree`), or another
    /// pool's (`ForeignPointer`).
    Block(Error),
    /// A stream or event call failed.
    Driver(DriverError),
    /// The pool could not be set up (a bad granule).
    Setup(Error),
    /// A [`DeviceConfig`] field out of its range: the field, and what it must be.
    Config(&'static str),
}

impl fmt::Display for DeviceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceError::Pool { error, driver } => {
                write!(f, "device pool: {error}")?;
                if let Some(d) = driver {
                    write!(f, " (driver: {d})")?;
                }
                Ok(())
            }
            DeviceError::Block(e) => write!(f, "device pool: bad block: {e}"),
            DeviceError::Driver(e) => write!(f, "device pool: {e}"),
            DeviceError::Setup(e) => write!(f, "device pool: cannot set up: {e}"),
            DeviceError::Config(what) => write!(f, "device pool: bad configuration: {what}"),
        }
    }
}

impl std::error::Error for DeviceError {}

impl From<DriverError> for DeviceError {
    fn from(e: DriverError) -> DeviceError {
        DeviceError::Driver(e)
    }
}

/// Whether one stream or several have allocated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode<S> {
    /// Nothing allocated yet.
    Fresh,
    /// Only this stream has allocated (or been named by `record_stream`).
    Single(S),
    /// Several streams.
    Multi,
}

/// Where a chunk in use stands, for the multi-stream checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Entry {
    /// Pending, in this slot.
    Pending(u32),
    /// Taken back from a pending list and handed out with this tag.
    Reused(u32),
}

/// Counters of what a [`DevicePool`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceCounters {
    /// Allocations served from the allocating stream's pending list.
    pub reused_pending: u64,
    /// Events recorded (batches fenced).
    pub events_recorded: u64,
    /// Events queried.
    pub event_queries: u64,
    /// Batches returned to the heap after their event completed.
    pub batches_released: u64,
    /// Waits for one stream (`cuStreamSynchronize`), when pending blocks held more than
    /// [`DeviceConfig::max_pending`] of the pool and it would otherwise have grown.
    pub stream_waits: u64,
    /// Other host synchronisations (of a stream or the context): switching to several
    /// streams, and running out of memory.
    pub synchronizations: u64,
    /// Allocations that ran out, synchronised, and tried again.
    pub exhaustion_retries: u64,
}

/// A [`DevicePool`]'s statistics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceStats {
    /// The core pool's: bytes in use (pending blocks count as in use there), reserved, peaks.
    pub pool: PoolStats,
    /// Blocks pending (freed, waiting for their events before other streams may use them).
    pub pending_blocks: usize,
    /// Their bytes.
    pub pending_bytes: usize,
    /// The most bytes ever pending at once.
    pub peak_pending_bytes: usize,
    /// Streams the pool has seen.
    pub streams: usize,
    /// Whether several streams have allocated.
    pub multi_stream: bool,
    /// Events created and not destroyed.
    pub events: usize,
    /// What it did.
    pub counters: DeviceCounters,
}

/// A device memory pool with stream-ordered reuse, over driver `D`: a [`Pool`] (a
/// [`DetachedHeap`] growing from a [`DeviceSource`] under a [`Policy`]).
///
/// # Stream order
///
/// Every allocation belongs to a stream, and the device runs each stream's work in the order it
/// was queued, while the host runs ahead. So a block freed on stream S (its last use queued on
/// S, not yet run) may be handed to S again at once: S's next use of it runs after. Another
/// stream T may reuse it only once the device has finished what S had queued when it was
/// freed, which an event recorded on S after the free tells; the pool polls such events
/// (`cuEventQuery`) and never waits for one when a block is freed. The rules, as built:
///
/// 1. **One stream**: while a single stream has ever allocated from the pool, a free goes
///    straight to the heap (no other stream exists to misuse it), with no driver call. This is
///    the common case (PyTorch's default stream), and it costs what the heap costs.
/// 2. **Many streams**: when a second stream first allocates (or `record_stream` names one),
///    the first stream is synchronised once (`cuStreamSynchronize`: the blocks already in the
///    heap were freed on it and may still be in use there), and from then on a block freed on
///    S is *pending* (see `pending.rs`): S may take it again at once (best fit among S's
///    pending blocks), and it joins S's open batch of frees. One event recorded on S fences a
///    whole batch; when it has completed, the batch's blocks go back to the heap, where they
///    merge with their free neighbours and serve every stream. Events on one stream complete
///    in order, so only each stream's oldest batch is queried.
/// 3. **`record_stream(block, T)`** marks a block as used by stream T too: its free then waits
///    for a batch on each of its streams (an event on T as well as on S), and S may not take it
///    back before.
///
/// **When memory comes back.** Once `batch_age` pool calls (allocations and frees, any
/// stream) have passed since the last poll, the next allocation polls every stream's oldest fenced batches and then fences every open
/// batch; so a block goes back to the heap at most two periods after the device has passed
/// its free, whether or not its stream allocates again, for at most one record and one query
/// per stream and period. A batch is also fenced when it reaches `batch` frees.
///
/// **What waits is bounded.** An allocation on S tries, in order: a pending block of S that
/// fits closely (at most 1/8 larger); a free chunk of the heap; then, if anything is pending,
/// it polls every stream and tries the heap again; then, while pending blocks hold more than
/// `max_pending` of the reserved bytes (a tenth by default), it waits for the stream whose
/// batches hold the most pending bytes (`cuStreamSynchronize`: one call returns everything
/// that stream freed, no event needed) and tries the heap again; then any pending block of S
/// that fits; then the pool grows (its own trim-and-retry included); and when that runs out,
/// it synchronises the context (`cuCtxSynchronize`), returns everything pending to the heap
/// and tries once more before it reports the pool's error, with its figures. So the pool
/// grows only while pending blocks hold at most `max_pending` of it: they never dominate it.
///
/// Why this design. PyTorch's caching allocator records an event per stream a block was
/// used on, at its free, queries them on every allocation, and keeps a free list per stream:
/// memory freed on one stream never serves another, segments of different streams never
/// merge, and it waits only when the device is out of memory. `cudaMallocAsync` pools reuse
/// across streams by making the allocating stream wait on the device for the freeing
/// stream's event (`cudaMemPoolReuseAllowInternalDependencies`), and RMM's stream-ordered
/// resource (`stream_ordered_memory_resource::get_block`) keeps a free list per stream and,
/// before it grows, takes another stream's block (the allocating stream waits for that
/// stream's event, or that stream is synchronised), then synchronises and merges other
/// streams' whole lists until a block fits. Here one heap serves every stream, so a block is
/// free for all once the device has passed it; a batch of frees shares one event; and, as
/// RMM does before it grows, a miss with too much pending waits for a stream (the fullest)
/// and takes back everything it freed, which on a GPU that keeps up costs nothing (its work is
/// done) and otherwise throttles the host to the device, as the next synchronising call of a
/// training loop would. A device-side wait (`cuStreamWaitEvent`, as `cudaMallocAsync` does)
/// would avoid the host wait; it is not built. Figures: `docs/device-pool.md` and
/// `docs/measurements.md` (`tagalloc-bench device`).
///
/// # Blocks
///
/// A [`DeviceBlock`] carries the heap's [`Block`] (whose checked free catches a double free or
/// a foreign block), the size asked for and the stream. A block taken back from a pending list
/// gets a fresh tag, so a stale copy of its earlier life is refused too.
///
/// # Invariants
///
/// Checked by [`DevicePool::check`]: the core pool's; in `Fresh` and `Single`
/// mode nothing is pending and `index` and `extra` are empty; every live pending slot is as
/// `pending::Slot` says, and `index` names it; every `Reused` entry is a live chunk of the
/// heap.
pub struct DevicePool<D: Driver> {
    pool: Pool<DeviceHeap, DeviceSource<D>>,
    granule: usize,
    batch: usize,
    mode: Mode<D::Stream>,
    streams: Vec<StreamState<D::Stream, D::Event>>,
    slots: Slots,
    /// Chunk address → its place, in multi-stream mode, for pending and reused chunks.
    index: AddrMap<Entry>,
    /// Chunk address → the other streams `record_stream` named for the block living there.
    extra: AddrMap<Vec<D::Stream>>,
    /// Events not recorded now, to record next.
    idle_events: Vec<D::Event>,
    /// Events created and not destroyed.
    events: usize,
    /// The last tag handed out.
    tag: u32,
    /// Spare batch vectors.
    spare: Vec<Vec<SlotRef>>,
    batch_age: u64,
    max_pending: f64,
    /// Allocations and frees in multi-stream mode, to age open batches by.
    clock: u64,
    /// The clock at the last poll of every stream.
    polled: u64,
    counters: DeviceCounters,
}

impl<D: Driver> fmt::Debug for DevicePool<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DevicePool")
            .field("regions", &self.pool.source().regions())
            .field("granule", &self.granule)
            .field("multi_stream", &(self.mode == Mode::Multi))
            .field("pending_blocks", &self.slots.count)
            .finish_non_exhaustive()
    }
}

impl<D: Driver> DevicePool<D> {
    /// A pool over `driver` as `config` says. Nothing is allocated until the first request
    /// (or [`DevicePool::reserve_now`]). Errors: a bad granule, or a region configuration the
    /// driver refuses (see [`DeviceSource::new`]).
    pub fn new(driver: D, config: DeviceConfig) -> Result<DevicePool<D>, DeviceError> {
        if !(config.max_pending > 0.0 && config.max_pending <= 1.0) {
            return Err(DeviceError::Config(
                "max_pending must be greater than 0 and at most 1",
            ));
        }
        let heap = DetachedHeap::growable(config.granule).map_err(DeviceError::Setup)?;
        let source = DeviceSource::new(driver, config.regions)?;
        Ok(DevicePool {
            pool: Pool::new(heap, source, config.policy),
            granule: config.granule,
            batch: config.batch.max(1),
            mode: Mode::Fresh,
            streams: Vec::new(),
            slots: Slots::default(),
            index: AddrMap::default(),
            extra: AddrMap::default(),
            idle_events: Vec::new(),
            events: 0,
            tag: 0,
            spare: Vec::new(),
            batch_age: config.batch_age.max(1),
            max_pending: config.max_pending,
            clock: 0,
            polled: 0,
            counters: DeviceCounters::default(),
        })
    }

    /// The driver.
    pub fn driver(&self) -> &D {
        self.pool.source().driver()
    }

    /// The core pool, to read (its heap, source and policy).
    pub fn pool(&self) -> &Pool<DeviceHeap, DeviceSource<D>> {
        &self.pool
    }

    /// Does the policy's up-front reservation now (a fraction of the device's free memory,
    /// say), if it has not been done.
    pub fn reserve_now(&mut self) -> Result<(), DeviceError> {
        self.pool.reserve_now().map_err(|e| self.pool_error(e))
    }

    /// Allocates `size` bytes on `stream`, aligned to the granule (see the
    /// [`DevicePool`] docs for what it tries, in which order).
    ///
    /// The pool keeps `stream` and later records events on it and synchronises it, until
    /// every block freed on it has gone back to the heap: a stream handed to the pool must
    /// stay live that long. That is the contract of every stream value already (a driver's
    /// stream lives until [`Driver::stream_destroy`], whose caller promises not to use it
    /// again; a `CuStream` made with `CuStream::from_raw` stays live while it is used), so
    /// the call itself is safe; streams that come and go should be kept alive (PyTorch keeps
    /// its streams for the life of the process).
    ///
    /// # Time Complexity
    /// With one stream, as the heap's `alloc`. With several, a lookup among the streams and the
    /// pending list's `O(log n)` on top; a miss adds a driver call per stream.
    #[inline]
    pub fn alloc(
        &mut self,
        size: usize,
        stream: D::Stream,
    ) -> Result<DeviceBlock<D::Stream>, DeviceError> {
        match self.mode {
            Mode::Single(s) if s == stream => self.alloc_single(size, stream),
            Mode::Fresh => {
                self.mode = Mode::Single(stream);
                self.stream_index(stream);
                self.alloc_single(size, stream)
            }
            Mode::Single(first) => {
                self.go_multi(first)?;
                self.alloc_multi(size, stream)
            }
            Mode::Multi => self.alloc_multi(size, stream),
        }
    }

    #[inline]
    fn alloc_single(
        &mut self,
        size: usize,
        stream: D::Stream,
    ) -> Result<DeviceBlock<D::Stream>, DeviceError> {
        match self.pool.alloc(size, self.granule) {
            Ok(chunk) => Ok(DeviceBlock {
                ptr: DevicePtr(chunk.addr as u64),
                size,
                stream,
                chunk,
                tag: 0,
            }),
            // Nothing is pending with one stream: synchronising would free nothing.
            Err(e) => Err(self.pool_error(e)),
        }
    }

    #[cold]
    #[inline(never)]
    fn alloc_multi(
        &mut self,
        size: usize,
        stream: D::Stream,
    ) -> Result<DeviceBlock<D::Stream>, DeviceError> {
        self.clock += 1;
        if self.clock - self.polled >= self.batch_age {
            self.poll_all()?;
            self.fence_all()?;
        }
        let si = self.stream_index(stream);
        let new = |chunk: Block| DeviceBlock {
            ptr: DevicePtr(chunk.addr as u64),
            size,
            stream,
            chunk,
            tag: 0,
        };
        let need = match size.checked_next_multiple_of(self.granule) {
            Some(n) if n > 0 => n,
            _ => {
                return self
                    .pool
                    .alloc_cached(size, self.granule)
                    .map(new)
                    .map_err(|e| self.pool_error(e))
            }
        };
        if let Some(b) = self.take_pending(si, need, need + need / 8, size) {
            return Ok(b);
        }
        match self.pool.alloc_cached(size, self.granule) {
            Ok(chunk) => return Ok(new(chunk)),
            Err(e) if e.error != Error::OutOfMemory => return Err(self.pool_error(e)),
            Err(_) => {}
        }
        if self.slots.count > 0 {
            // A miss: what the device has passed goes back to the heap; every open batch is
            // fenced; then, while pending blocks hold more than their share of the pool, the
            // oldest batch is waited for rather than the pool grown.
            self.poll_all()?;
            if let Ok(chunk) = self.pool.alloc_cached(size, self.granule) {
                return Ok(new(chunk));
            }
            while self.over_pending_share() && self.wait_fullest()? {
                if let Ok(chunk) = self.pool.alloc_cached(size, self.granule) {
                    return Ok(new(chunk));
                }
            }
            if let Some(b) = self.take_pending(si, need, usize::MAX, size) {
                return Ok(b);
            }
        }
        let e = match self.pool.alloc(size, self.granule) {
            Ok(chunk) => return Ok(new(chunk)),
            Err(e) => e,
        };
        if !e.is_exhaustion() || self.slots.count == 0 {
            return Err(self.pool_error(e));
        }
        self.counters.exhaustion_retries += 1;
        self.release_all_after_sync()?;
        match self.pool.alloc(size, self.granule) {
            Ok(chunk) => Ok(new(chunk)),
            Err(e) => Err(self.pool_error(e)),
        }
    }

    /// Takes the best pending fit of stream `si` between `need` and `max` bytes, for a request
    /// of `size` bytes.
    fn take_pending(
        &mut self,
        si: usize,
        need: usize,
        max: usize,
        size: usize,
    ) -> Option<DeviceBlock<D::Stream>> {
        let state = &mut self.streams[si];
        let key = state.best_fit(need, max)?;
        state.fit.remove(&key);
        let stream = state.stream;
        let slot = self.slots.remove(key.1);
        self.streams[si].bytes -= slot.usable;
        self.tag = self.tag.wrapping_add(1).max(1);
        self.index.insert(slot.block.addr, Entry::Reused(self.tag));
        self.counters.reused_pending += 1;
        Some(DeviceBlock {
            ptr: DevicePtr(slot.block.addr as u64),
            size,
            stream,
            chunk: slot.block,
            tag: self.tag,
        })
    }

    /// Frees `block` on its stream: to the heap at once while one stream uses the pool, else
    /// to its stream's pending list (see [`DevicePool`]). Never waits for the
    /// device. Errors: a block freed already, or another pool's ([`DeviceError::Block`]); a
    /// failed `cuEventRecord` when the free fills a batch (the block stays pending then).
    ///
    /// # Time Complexity
    /// With one stream, as the heap's `free`. With several, a hash lookup and the pending
    /// list's `O(log n)`.
    #[inline]
    pub fn free(&mut self, block: DeviceBlock<D::Stream>) -> Result<(), DeviceError> {
        match self.mode {
            Mode::Single(_) if block.tag == 0 => {
                // SAFETY: detached frees are always checked; the block names its chunk.
                unsafe { self.pool.free(block.chunk, block.chunk.size) }.map_err(DeviceError::Block)
            }
            Mode::Multi => self.free_multi(block),
            _ => Err(DeviceError::Block(Error::ForeignPointer)),
        }
    }

    /// Whether `block` is live in this pool as handed out, in multi-stream mode.
    fn validate(&self, block: &DeviceBlock<D::Stream>) -> Result<(), Error> {
        match self.index.get(&block.chunk.addr) {
            Some(Entry::Pending(_)) => Err(Error::DoubleFree),
            Some(&Entry::Reused(tag)) if tag == block.tag => Ok(()),
            Some(Entry::Reused(_)) => Err(Error::DoubleFree),
            None if block.tag != 0 => Err(Error::DoubleFree),
            None => self.pool.heap().usable_size(&block.chunk).map(drop),
        }
    }

    #[cold]
    #[inline(never)]
    fn free_multi(&mut self, block: DeviceBlock<D::Stream>) -> Result<(), DeviceError> {
        self.validate(&block).map_err(DeviceError::Block)?;
        self.clock += 1;
        let addr = block.chunk.addr;
        let si = self.stream_index(block.stream);
        let extras = self.extra.remove(&addr).unwrap_or_default();
        let usable = block.chunk.size.next_multiple_of(self.granule);
        let reusable = extras.is_empty();
        let waits = u16::try_from(1 + extras.len()).unwrap_or(u16::MAX);
        let r = self
            .slots
            .insert(block.chunk, usable, si as u32, waits, reusable);
        self.index.insert(addr, Entry::Pending(r.slot));
        if reusable {
            self.streams[si].fit.insert((usable, r.slot));
        }
        self.join(si, r)?;
        for t in extras {
            let ti = self.stream_index(t);
            self.join(ti, r)?;
        }
        Ok(())
    }

    /// Adds a pending slot to stream `si`'s open batch, fencing the batch when it is full.
    fn join(&mut self, si: usize, r: SlotRef) -> Result<(), DeviceError> {
        let state = &mut self.streams[si];
        if state.open.capacity() == 0 {
            if let Some(v) = self.spare.pop() {
                state.open = v;
            }
        }
        state.open.push(r);
        state.bytes += self.slots.get(r).map_or(0, |s| s.usable);
        if state.open.len() >= self.batch {
            self.fence(si)?;
        }
        Ok(())
    }

    /// Marks `block` as used by `other` as well as its own stream: its free will wait for an
    /// event on `other` too, and no stream takes it back before that has completed (PyTorch's
    /// `recordStream`). The pool records an event on `other` later, so `other` must stay live
    /// as long as the pool may use it, as every stream handed to the pool must (see
    /// [`DevicePool::alloc`]).
    pub fn record_stream(
        &mut self,
        block: &DeviceBlock<D::Stream>,
        other: D::Stream,
    ) -> Result<(), DeviceError> {
        match self.mode {
            Mode::Fresh => return Err(DeviceError::Block(Error::ForeignPointer)),
            Mode::Single(s) => {
                if block.tag != 0 {
                    return Err(DeviceError::Block(Error::DoubleFree));
                }
                self.pool
                    .heap()
                    .usable_size(&block.chunk)
                    .map_err(DeviceError::Block)?;
                if other == s {
                    return Ok(());
                }
                self.go_multi(s)?;
            }
            Mode::Multi => self.validate(block).map_err(DeviceError::Block)?,
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

    /// The index of `stream` in the table, added if new.
    fn stream_index(&mut self, stream: D::Stream) -> usize {
        match self.streams.iter().position(|s| s.stream == stream) {
            Some(i) => i,
            None => {
                self.streams.push(StreamState::new(stream));
                self.streams.len() - 1
            }
        }
    }

    /// Switches to the multi-stream rules: the first stream's queued work must finish before
    /// the blocks it freed into the heap serve another.
    #[cold]
    fn go_multi(&mut self, first: D::Stream) -> Result<(), DeviceError> {
        // SAFETY: `first` allocated from this pool, so it is live as long as the pool uses it
        // (the contract of stream values; see `alloc`).
        unsafe { self.driver().stream_synchronize(first)? };
        self.counters.synchronizations += 1;
        self.mode = Mode::Multi;
        Ok(())
    }

    /// Records an event on stream `si` for its open batch.
    fn fence(&mut self, si: usize) -> Result<(), DeviceError> {
        if self.streams[si].open.is_empty() {
            return Ok(());
        }
        let event = match self.idle_events.pop() {
            Some(e) => e,
            None => {
                let e = self.driver().event_create()?;
                self.events += 1;
                e
            }
        };
        let stream = self.streams[si].stream;
        // SAFETY: the event is this pool's and live; the stream allocated from (or was named
        // to) this pool, so it is live as long as the pool uses it (see `alloc`).
        if let Err(e) = unsafe { self.driver().event_record(event, stream) } {
            self.idle_events.push(event);
            return Err(e.into());
        }
        self.counters.events_recorded += 1;
        let slots = std::mem::take(&mut self.streams[si].open);
        self.streams[si].fenced.push_back(Batch { event, slots });
        Ok(())
    }

    /// Whether pending blocks hold more than [`DeviceConfig::max_pending`] of the reserved
    /// bytes.
    fn over_pending_share(&self) -> bool {
        let reserved = self.pool.stats().reserved;
        self.slots.bytes as f64 > self.max_pending * reserved as f64
    }

    /// Waits for the stream whose frees hold the most pending bytes (`cuStreamSynchronize`)
    /// and returns all its batches, fenced and open, to the heap: one call for everything
    /// the stream freed, no event recorded. `false` when nothing is pending.
    #[cold]
    fn wait_fullest(&mut self) -> Result<bool, DeviceError> {
        let fullest = (0..self.streams.len())
            .filter(|&i| self.streams[i].bytes > 0)
            .max_by_key(|&i| self.streams[i].bytes);
        let Some(si) = fullest else {
            return Ok(false);
        };
        let stream = self.streams[si].stream;
        // SAFETY: `stream` allocated from (or was named to) this pool, so it is live as long
        // as the pool uses it (see `alloc`).
        unsafe { self.driver().stream_synchronize(stream)? };
        self.counters.stream_waits += 1;
        self.release_stream(si);
        Ok(true)
    }

    /// Returns every batch of stream `si`, fenced and open, to the heap: the device has
    /// finished everything queued on the stream.
    fn release_stream(&mut self, si: usize) {
        while let Some(batch) = self.streams[si].fenced.pop_front() {
            self.release(si, batch.slots);
            self.idle_events.push(batch.event);
            self.counters.batches_released += 1;
        }
        let open = std::mem::take(&mut self.streams[si].open);
        self.release(si, open);
    }

    /// Returns stream `si`'s completed batches to the heap, oldest first, stopping at the first
    /// that has not completed.
    fn poll(&mut self, si: usize) -> Result<(), DeviceError> {
        while let Some(batch) = self.streams[si].fenced.front() {
            let event = batch.event;
            self.counters.event_queries += 1;
            // SAFETY: the event is this pool's and live.
            if !unsafe { self.driver().event_query(event)? } {
                break;
            }
            if let Some(batch) = self.streams[si].fenced.pop_front() {
                self.release(si, batch.slots);
                self.idle_events.push(batch.event);
                self.counters.batches_released += 1;
            }
        }
        Ok(())
    }

    /// Polls every stream's fenced batches, oldest first (one query for a stream whose
    /// oldest batch has not completed).
    fn poll_all(&mut self) -> Result<(), DeviceError> {
        self.polled = self.clock;
        for si in 0..self.streams.len() {
            self.poll(si)?;
        }
        Ok(())
    }

    /// Counts one batch of stream `si` done for each slot of `slots`, and returns those it
    /// was the last wait of to the heap.
    fn release(&mut self, si: usize, mut slots: Vec<SlotRef>) {
        for &r in &slots {
            let Some(s) = self.slots.get_mut(r) else {
                continue; // taken back by its stream since
            };
            s.waits -= 1;
            self.streams[si].bytes -= s.usable;
            if s.waits > 0 {
                continue;
            }
            let s = self.slots.remove(r.slot);
            if s.reusable {
                self.streams[s.stream as usize]
                    .fit
                    .remove(&(s.usable, r.slot));
            }
            self.index.remove(&s.block.addr);
            // SAFETY: detached frees are checked. The block was a live chunk of the heap
            // (invariant of a pending slot) and every stream that used it is done with it.
            let freed = unsafe { self.pool.free(s.block, s.block.size) };
            debug_assert!(freed.is_ok(), "a pending block is a live chunk");
        }
        slots.clear();
        self.spare.push(slots);
    }

    /// Synchronises the context, after which every pending block is free for every stream,
    /// and returns them all to the heap.
    fn release_all_after_sync(&mut self) -> Result<(), DeviceError> {
        self.driver().ctx_synchronize()?;
        self.counters.synchronizations += 1;
        for si in 0..self.streams.len() {
            self.release_stream(si);
        }
        Ok(())
    }

    /// Fences every stream's open batch.
    fn fence_all(&mut self) -> Result<(), DeviceError> {
        for si in 0..self.streams.len() {
            self.fence(si)?;
        }
        Ok(())
    }

    /// Records an event for every open batch and returns every batch whose event has
    /// completed to the heap, without waiting for any (PyTorch's `process_events`); returns
    /// how many pending blocks went back. Allocations do this themselves when they miss.
    pub fn process_events(&mut self) -> Result<usize, DeviceError> {
        let before = self.slots.count;
        self.fence_all()?;
        self.poll_all()?;
        Ok(before - self.slots.count)
    }

    /// Empties the cache: synchronises and returns every pending block to the heap (if any is
    /// pending), destroys the idle events, then trims the pool: wholly free regions go back to
    /// the driver, and (with [`Policy::release_above`]) free tail chunks of a virtual-memory
    /// region are unmapped.
    pub fn trim(&mut self) -> Result<Trimmed, DeviceError> {
        if self.slots.count > 0 || self.streams.iter().any(|s| !s.open.is_empty()) {
            self.release_all_after_sync()?;
        }
        self.destroy_idle_events();
        Ok(self.pool.trim())
    }

    fn destroy_idle_events(&mut self) {
        for event in self.idle_events.drain(..) {
            // SAFETY: the event is this pool's, recorded on nothing now, and dropped here.
            let _ = unsafe { self.pool.source().driver().event_destroy(event) };
            self.events -= 1;
        }
    }

    /// Whether `block`'s chunk is live in the heap (handed out, or freed and still pending):
    /// what a caller that keeps blocks by address (the C ABI) checks its map against.
    pub fn chunk_is_live(&self, block: &DeviceBlock<D::Stream>) -> bool {
        self.pool.heap().usable_size(&block.chunk).is_ok()
    }

    /// The pool's statistics.
    pub fn stats(&self) -> DeviceStats {
        DeviceStats {
            pool: self.pool.stats(),
            pending_blocks: self.slots.count,
            pending_bytes: self.slots.bytes,
            peak_pending_bytes: self.slots.peak,
            streams: self.streams.len(),
            multi_stream: self.mode == Mode::Multi,
            events: self.events,
            counters: self.counters,
        }
    }

    /// Every region the pool holds and every chunk in it, in address order, with what the
    /// pool knows of each (see [`SnapshotRegion`]): a pending chunk's stream; nothing of a
    /// chunk in use, whose block its owner holds.
    ///
    /// # Time Complexity
    /// `O(chunks + regions)`, and a hash lookup per chunk in use.
    pub fn snapshot(&self) -> Vec<SnapshotRegion<D::Stream>> {
        let regions = core::cell::RefCell::new(Vec::new());
        self.pool.visit(
            |addr, size| {
                regions.borrow_mut().push(SnapshotRegion {
                    addr,
                    size,
                    blocks: Vec::new(),
                })
            },
            |addr, size, free| {
                let mut block = SnapshotBlock {
                    addr,
                    size,
                    state: BlockState::Free,
                    requested: None,
                    stream: None,
                };
                if !free {
                    block.state = BlockState::Allocated;
                    if let Some(Entry::Pending(slot)) = self.index.get(&addr) {
                        block.state = BlockState::Pending;
                        let s = &self.slots.slots[*slot as usize];
                        block.stream = self.streams.get(s.stream as usize).map(|st| st.stream);
                    }
                }
                if let Some(r) = regions.borrow_mut().last_mut() {
                    r.blocks.push(block);
                }
            },
        );
        regions.into_inner()
    }

    /// The error for a refused request, with the source's driver error if it met one.
    #[cold]
    fn pool_error(&mut self, error: PoolError) -> DeviceError {
        let driver = self.pool_source_error();
        DeviceError::Pool { error, driver }
    }

    fn pool_source_error(&self) -> Option<DriverError> {
        self.pool.source().last_error()
    }

    /// Verifies every invariant: the core pool's (heap and reserved bytes) and the pending
    /// lists' (see [`DevicePool`]).
    ///
    /// # Time Complexity
    /// `O(chunks + regions + pending blocks + streams)`.
    pub fn check(&self) -> Result<(), String> {
        self.pool.check().map_err(|e| e.to_string())?;
        if self.mode != Mode::Multi
            && (self.slots.count > 0 || !self.index.is_empty() || !self.extra.is_empty())
        {
            return Err("pending blocks with a single stream".into());
        }
        let heap = self.pool.heap();
        // How many batches name each slot under its generation.
        let mut refs = vec![0usize; self.slots.slots.len()];
        for st in &self.streams {
            let batches = st.fenced.iter().map(|b| &b.slots).chain([&st.open]);
            let mut waiting = 0;
            for r in batches.flatten() {
                if let Some(s) = self.slots.get(*r) {
                    refs[r.slot as usize] += 1;
                    waiting += s.usable;
                }
            }
            if waiting != st.bytes {
                return Err(format!(
                    "stream {:?}'s batches hold {waiting} bytes, it counts {}",
                    st.stream, st.bytes
                ));
            }
        }
        let (mut count, mut bytes, mut fit) = (0, 0, 0);
        for (i, s) in self.slots.slots.iter().enumerate() {
            if !s.live {
                continue;
            }
            count += 1;
            bytes += s.usable;
            let at = s.block.addr;
            heap.usable_size(&s.block)
                .map_err(|e| format!("pending block {at:#x} is not live in the heap: {e}"))?;
            if self.index.get(&at) != Some(&Entry::Pending(i as u32)) {
                return Err(format!("pending block {at:#x} is not indexed"));
            }
            if refs[i] != s.waits as usize {
                return Err(format!(
                    "pending block {at:#x} waits for {} batches but is in {}",
                    s.waits, refs[i]
                ));
            }
            let listed = self
                .streams
                .get(s.stream as usize)
                .is_some_and(|st| st.fit.contains(&(s.usable, i as u32)));
            if listed != (s.reusable && s.waits == 1) {
                return Err(format!("pending block {at:#x} is wrongly (un)listed"));
            }
            fit += usize::from(listed);
        }
        if (count, bytes) != (self.slots.count, self.slots.bytes) {
            return Err("pending counts disagree with the slots".into());
        }
        if fit != self.streams.iter().map(|s| s.fit.len()).sum::<usize>() {
            return Err("a pending list names a block that is not pending".into());
        }
        for (&at, e) in &self.index {
            if let Entry::Reused(_) = e {
                let live = heap.region_of(at).is_some();
                if !live {
                    return Err(format!("reused block {at:#x} is outside every region"));
                }
            }
        }
        Ok(())
    }
}

impl<D: Driver> Drop for DevicePool<D> {
    /// Returns every pending block to the heap (after synchronising), destroys the pool's
    /// events; the core pool then gives back every wholly free region. Regions holding live
    /// blocks stay with the driver.
    fn drop(&mut self) {
        if self.slots.count > 0 {
            let _ = self.release_all_after_sync();
        }
        for st in &mut self.streams {
            for batch in st.fenced.drain(..) {
                self.idle_events.push(batch.event);
            }
        }
        self.destroy_idle_events();
    }
}
