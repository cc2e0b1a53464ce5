//! [`DevicePool`]: a device memory pool with stream-ordered reuse (its docs give the rules and
//! why), in layers: the memory below (`seam.rs`: a core pool of device regions), the
//! stream-ordering layer over it (`order.rs`, its pending lists in `pending.rs`), and around
//! them the configuration, blocks, errors, statistics and the checker, each in a file of its
//! own.

use std::fmt;
use std::time::Instant;

use tagalloc::{DetachedHeap, Pool, Trimmed};

mod block;
mod check;
mod config;
mod error;
mod order;
mod pending;
mod seam;
mod stats;

pub use block::DeviceBlock;
pub use config::DeviceConfig;
pub use error::DeviceError;
pub use seam::DeviceHeap;
pub use stats::{DeviceCounters, DeviceStats};

pub(crate) use order::{Miss, Ticket};

use crate::driver::Driver;
use crate::source::DeviceSource;
use order::{Mode, StreamOrder};
use seam::{PoolSeam, Seam};

/// A device memory pool with stream-ordered reuse, over driver `D`: a [`Pool`] (a
/// [`DetachedHeap`] growing from a [`DeviceSource`] under a
/// [`Policy`](tagalloc::Policy)), and over it the stream order.
///
/// # Stream order
///
/// Every allocation belongs to a stream, and the device runs each stream's work in the order it
/// was queued, while the host runs ahead. So a block freed on stream S (its last use queued on
/// S, not yet run) may be handed to S again at once: S's next use of it runs after. Another
/// stream T may use it once the device has finished what S had queued when it was freed (an
/// event recorded on S after the free tells), or at once if T's later work is made to wait for
/// that event on the device (`cuStreamWaitEvent`): the host never waits for it. The rules, as
/// built:
///
/// 1. **One stream**: while a single stream has ever allocated from the pool, a free goes
///    straight to the heap (no other stream exists to misuse it), with no driver call. This is
///    the common case (PyTorch's default stream), and it costs what the heap costs.
/// 2. **Many streams**: when a second stream first allocates (or `record_stream` names one),
///    an event is recorded on the first stream (the *epoch*: the blocks already in the heap
///    were freed on it and may still be in use there); another stream's first block from the
///    heap makes that stream wait for the epoch on the device, once, until the epoch is seen
///    complete. From then on a block freed on S is *pending* (see `pending.rs`): S may take it
///    again at once (best fit among S's pending blocks), and it joins S's open batch of frees.
///    One event recorded on S fences a whole batch; when it has completed, the batch's blocks
///    go back to the heap, where they merge with their free neighbours and serve every stream.
///    Events on one stream complete in order, so only each stream's oldest batch is queried.
/// 3. **`record_stream(block, T)`** marks a block as used by stream T too: its free joins a
///    batch on each of its streams, and no stream takes it without being ordered after all of
///    them.
///
/// **When memory comes back.** Once `batch_age` pool calls (allocations and frees, any
/// stream) have passed since the last poll, the next allocation polls every stream's oldest
/// fenced batches and then fences every open batch; so a block goes back to the heap at most
/// two periods after the device has passed its free, whether or not its stream allocates
/// again, for at most one record and one query per stream and period. A batch is also fenced
/// when it reaches `batch` frees.
///
/// **What an allocation tries.** On S, in order: a pending block of S that fits closely (at
/// most 1/8 larger); a free chunk of the heap; then, if anything is pending, it polls every
/// stream (at most every 32 pool calls: what the device has passed goes back to the heap, no
/// wait at all) and tries the heap again; then, while pending blocks hold more than
/// [`DeviceConfig::max_pending`] of the pool (by default whenever one is pending), the
/// smallest pending block of any stream that fits, one needing no new wait first: S waits on
/// the device for the batches it is in (their streams' newest, fencing an open one first),
/// unless S has waited for those batches or later ones of the same streams already (the pool
/// keeps, per stream pair, the latest batch waited for, so it never waits twice for the same
/// work), and what S does not need of the block stays pending in the same batches; then the
/// pool grows (its own trim-and-retry included); out of memory, it takes a pending block by a
/// device-side wait whatever the share; and when that fails too while frees are pending, the
/// host synchronises the context (`cuCtxSynchronize`, the one host wait of an allocation:
/// nothing else can work), everything pending goes back to the heap, and it tries once more
/// before it reports the pool's error, with its figures.
///
/// **Why this design.** PyTorch's caching allocator records an event per stream a block was
/// used on at its free and queries them on every allocation (`process_events`), keeps a free
/// list per stream, so memory freed on one stream never serves another and segments of
/// different streams never merge, and waits only when the device is out of memory.
/// `cudaMallocAsync` pools reuse across streams by making the allocating stream wait on the
/// device for the freeing stream's event (`cudaMemPoolReuseAllowInternalDependencies`), or
/// with no wait once the free is known complete (`cudaMemPoolReuseAllowOpportunistic`, what
/// the poll here does), or when the streams are already ordered
/// (`cudaMemPoolReuseFollowEventDependencies`, what the per-pair memory of waits does). RMM's
/// `stream_ordered_memory_resource::get_block` keeps a free list per stream and, before it
/// grows, takes another stream's block by `cudaStreamWaitEvent` on that stream's event (one
/// event per stream, recorded again at every free: "significant overhead on deallocations",
/// its own comment says), then moves that stream's whole list into the allocating stream's,
/// the one wait covering them all; only when no list has a fit does it merge every list (a
/// wait each) before it grows. Here one heap serves every stream, so a block is free for all
/// once the device has passed it; memory not yet passed is taken by a device-side wait, as
/// RMM and `cudaMallocAsync` do; the wait is for the freeing stream's newest batch, which, as
/// RMM's one event per stream, covers every block that stream freed so far, and a stream that
/// waited for a batch is also counted as ordered after what that batch's stream had waited for.
/// A batch of frees shares one event, fenced at most `batch_age` pool calls after its first
/// free (or when a miss takes from it): a wait for it waits for that stream's work up to the
/// fence, a false dependency RMM also has (its event recorded at the latest free), in
/// exchange for one `cuEventRecord` per batch instead of one per free. Figures:
/// `docs/device-pool.md` (`tagalloc-bench device`).
///
/// # CUDA graphs
///
/// While a stream captures a graph, synchronising, querying an event, or making a stream wait
/// across the capture's boundary is illegal. Tell the pool around every capture on its device
/// ([`DevicePool::capture_begun`], [`DevicePool::capture_ended`]; PyTorch's graph-pool hooks
/// do it for the C ABI): while one is under way it queries nothing, asks the driver which
/// capture a stream is in before any event record or wait on it, lets a stream wait only for
/// events recorded in the same capture, records an event recorded in a capture again once its
/// stream is done capturing, and refuses (never corrupts) what would need a host wait
/// ([`DeviceError::Capturing`]). The pool cannot know a graph's replays: memory a graph uses
/// must stay allocated while it may be replayed (the C ABI keeps a private pool per graph for
/// that, as PyTorch does).
///
/// # Streams
///
/// The pool keeps the streams handed to it and records events on them, waits on them and
/// (while capturing) asks about them, until [`DevicePool::forget_stream`]: after a stream's
/// last allocation, free and `record_stream`, that fences what it freed (the pool's last call
/// naming it) and the stream may then be destroyed. Without it a stream must stay live as long
/// as the pool (PyTorch keeps its streams for the life of the process).
///
/// # Blocks
///
/// A [`DeviceBlock`] carries the heap's [`Block`](tagalloc::Block) (whose checked free
/// catches a double free or a foreign block), the size asked for and the stream. A block taken
/// back from a pending list gets a fresh tag, so a stale copy of its earlier life is refused
/// too.
///
/// # Invariants
///
/// Checked by [`DevicePool::check`]: the core pool's, and the stream order's (see `order.rs`
/// and `pending.rs`).
pub struct DevicePool<D: Driver> {
    mem: PoolSeam<D>,
    order: StreamOrder<D>,
    /// Whether it keeps every region (see [`DevicePool::keep_regions`]).
    keep: bool,
}

impl<D: Driver> fmt::Debug for DevicePool<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DevicePool")
            .field("regions", &self.mem.pool.source().regions())
            .field("granule", &self.mem.granule)
            .field("multi_stream", &(self.order.mode == Mode::Multi))
            .field("pending_blocks", &self.order.slots.count)
            .finish_non_exhaustive()
    }
}

impl<D: Driver> DevicePool<D> {
    /// A pool over `driver` as `config` says. Nothing is allocated until the first request
    /// (or [`DevicePool::reserve_now`]). Errors: a bad granule, or a region configuration the
    /// driver refuses (see [`DeviceSource::new`]).
    pub fn new(driver: D, config: DeviceConfig) -> Result<DevicePool<D>, DeviceError> {
        if !(0.0..=1.0).contains(&config.max_pending) {
            return Err(DeviceError::Config("max_pending must be between 0 and 1"));
        }
        let heap = DetachedHeap::growable(config.granule).map_err(DeviceError::Setup)?;
        let source = DeviceSource::new(driver, config.regions)?;
        Ok(DevicePool {
            mem: PoolSeam {
                pool: Pool::new(heap, source, config.policy),
                granule: config.granule,
            },
            order: StreamOrder::new(
                config.batch,
                config.batch_age,
                config.max_pending,
                config.granule,
            ),
            keep: false,
        })
    }

    /// The driver.
    pub fn driver(&self) -> &D {
        self.mem.driver()
    }

    /// The core pool, to read (its heap, source and policy).
    pub fn pool(&self) -> &Pool<DeviceHeap, DeviceSource<D>> {
        &self.mem.pool
    }

    /// Does the policy's up-front reservation now (a fraction of the device's free memory,
    /// say), if it has not been done.
    pub fn reserve_now(&mut self) -> Result<(), DeviceError> {
        self.mem.pool.reserve_now().map_err(|e| self.mem.refusal(e))
    }

    /// Allocates `size` bytes on `stream`, aligned to the granule (see the [`DevicePool`] docs
    /// for what it tries, in which order).
    ///
    /// The pool keeps `stream` and later records events on it and makes it wait for events,
    /// until [`DevicePool::forget_stream`]: a stream handed to the pool must stay live that
    /// long. That is the contract of every stream value already (a driver's stream lives until
    /// [`Driver::stream_destroy`], whose caller promises not to use it again; a `CuStream`
    /// made with `CuStream::from_raw` stays live while it is used), so the call itself is safe.
    ///
    /// # Time Complexity
    /// With one stream, as the heap's `alloc`. With several, a lookup among the streams and the
    /// pending lists' `O(log n)` on top; a miss adds a driver call per stream.
    #[inline]
    pub fn alloc(
        &mut self,
        size: usize,
        stream: D::Stream,
    ) -> Result<DeviceBlock<D::Stream>, DeviceError> {
        match self.order.alloc(&mut self.mem, size, stream, true) {
            Ok(b) => Ok(b),
            Err(Miss::Fail(e)) => Err(e),
            Err(Miss::Sync(_)) => self.alloc_after_sync(size, stream),
        }
    }

    /// The host synchronisation of a miss that ran out, then the allocation once more.
    #[cold]
    fn alloc_after_sync(
        &mut self,
        size: usize,
        stream: D::Stream,
    ) -> Result<DeviceBlock<D::Stream>, DeviceError> {
        if let Some(ticket) = self.prepare_sync()? {
            let ns = synchronize(self.driver())?;
            self.synced(ticket, ns);
        }
        self.alloc_without_sync(size, stream)
    }

    /// [`DevicePool::alloc`], but `Miss::Sync` when only a host synchronisation could serve
    /// it: for a caller that synchronises without holding its lock (see
    /// [`SharedDevicePool`](crate::SharedDevicePool)).
    pub(crate) fn try_alloc(
        &mut self,
        size: usize,
        stream: D::Stream,
    ) -> Result<DeviceBlock<D::Stream>, Miss> {
        self.order.alloc(&mut self.mem, size, stream, true)
    }

    /// The allocation after a synchronisation: running out is the pool's error now.
    pub(crate) fn alloc_without_sync(
        &mut self,
        size: usize,
        stream: D::Stream,
    ) -> Result<DeviceBlock<D::Stream>, DeviceError> {
        self.order
            .alloc(&mut self.mem, size, stream, false)
            .map_err(|m| match m {
                Miss::Fail(e) | Miss::Sync(e) => e,
            })
    }

    /// Before a host synchronisation: fences every open batch and says what it will cover
    /// (`None`: nothing to wait for).
    pub(crate) fn prepare_sync(&mut self) -> Result<Option<Ticket>, DeviceError> {
        self.order.prepare_sync(&mut self.mem)
    }

    /// After the host synchronisation `ticket` was made for, which took `ns` nanoseconds.
    pub(crate) fn synced(&mut self, ticket: Ticket, ns: u64) {
        self.order.synced(&mut self.mem, ticket, ns);
    }

    /// Frees `block` on its stream: to the heap at once while one stream uses the pool, else
    /// to its stream's pending list (see [`DevicePool`]). Never waits for the device. Errors:
    /// a block freed already, or another pool's ([`DeviceError::Block`]); a failed
    /// `cuEventRecord` when the free fills a batch (the block stays pending then).
    ///
    /// # Time Complexity
    /// With one stream, as the heap's `free`. With several, a hash lookup and the pending
    /// lists' `O(log n)`.
    #[inline]
    pub fn free(&mut self, block: DeviceBlock<D::Stream>) -> Result<(), DeviceError> {
        self.order.free(&mut self.mem, block)
    }

    /// Marks `block` as used by `other` as well as its own stream: its free will join a batch
    /// on `other` too, and no stream takes it before being ordered after that (PyTorch's
    /// `recordStream`). The pool records an event on `other` later, so `other` must stay live
    /// as long as the pool may use it, as every stream handed to the pool must (see
    /// [`DevicePool::alloc`]).
    pub fn record_stream(
        &mut self,
        block: &DeviceBlock<D::Stream>,
        other: D::Stream,
    ) -> Result<(), DeviceError> {
        self.order.record_stream(&self.mem, block, other)
    }

    /// Stops using `stream`: records an event for what it freed (the pool's last call naming
    /// it), after which the stream may be destroyed. Call it after the stream's last
    /// allocation, free and `record_stream` use; a stream the pool never saw (or forgot
    /// already) is no error. Refused while `stream` captures, or while its frees wait for
    /// events recorded in a capture ([`DeviceError::Capturing`]).
    ///
    /// Why an explicit call rather than an event at each stream's last batch: the pool cannot
    /// tell which free is a stream's last, and an event recorded at every free (RMM's way)
    /// costs a driver call per free; a program that destroys streams knows when it does.
    pub fn forget_stream(&mut self, stream: D::Stream) -> Result<(), DeviceError> {
        self.order.forget_stream(&self.mem, stream)
    }

    /// Records an event for every open batch and returns every batch whose event has
    /// completed to the heap, without waiting for any (PyTorch's `process_events`); returns
    /// how many pending blocks went back. Allocations do this themselves when they miss.
    pub fn process_events(&mut self) -> Result<usize, DeviceError> {
        self.order.process_events(&mut self.mem)
    }

    /// Tells the pool a CUDA graph capture began on its device (before the capture's first
    /// allocation): until as many [`DevicePool::capture_ended`], the pool makes no call that
    /// is illegal during a capture (see [`DevicePool`], CUDA graphs).
    pub fn capture_begun(&mut self) {
        self.order.capture_begun();
        self.hold_regions();
    }

    /// Tells the pool a capture on its device ended.
    pub fn capture_ended(&mut self) -> Result<(), DeviceError> {
        let ended = self.order.capture_ended(&self.mem);
        self.hold_regions();
        ended
    }

    /// Makes the pool keep every region it obtains for the rest of its life (a trim gives
    /// nothing back, nor does a request that runs out): what a CUDA graph's private pool
    /// needs, whose free chunks a replay of the graph still writes.
    pub fn keep_regions(&mut self) {
        self.keep = true;
        self.hold_regions();
    }

    /// Nothing goes back to the driver while a capture is under way (`cuMemFree` waits for
    /// the device, illegal then) or for a pool that keeps its regions.
    fn hold_regions(&mut self) {
        let hold = self.keep || self.order.captures > 0;
        self.mem.pool.hold_regions(hold);
    }

    /// Empties the cache: synchronises and returns every pending block to the heap (if any is
    /// pending), destroys the idle events, then trims the pool: wholly free regions go back to
    /// the driver, and (with [`Policy::release_above`](tagalloc::Policy::release_above)) free
    /// tail chunks of a virtual-memory region are unmapped. Refused during a capture, when
    /// anything is pending; gives nothing back during a capture, or from a pool that keeps its
    /// regions.
    pub fn trim(&mut self) -> Result<Trimmed, DeviceError> {
        if let Some(ticket) = self.prepare_sync()? {
            let ns = synchronize(self.driver())?;
            self.synced(ticket, ns);
        }
        Ok(self.trim_synced())
    }

    /// The end of [`DevicePool::trim`], once nothing is pending.
    pub(crate) fn trim_synced(&mut self) -> Trimmed {
        self.order.destroy_idle_events(&self.mem);
        self.mem.pool.trim()
    }

    /// Whether `block`'s chunk is live in the heap (handed out, or freed and still pending):
    /// what a caller that keeps blocks by address (the C ABI) checks its map against.
    pub fn chunk_is_live(&self, block: &DeviceBlock<D::Stream>) -> bool {
        self.mem.is_live(&block.chunk).is_ok()
    }

    /// The pool's statistics.
    pub fn stats(&self) -> DeviceStats {
        let o = &self.order;
        DeviceStats {
            pool: self.mem.pool.stats(),
            pending_blocks: o.slots.count,
            pending_bytes: o.slots.bytes,
            peak_pending_bytes: o.slots.peak,
            streams: o.streams.iter().filter(|s| !s.gone).count(),
            multi_stream: o.mode == Mode::Multi,
            events: o.events,
            captures: o.captures,
            counters: o.counters,
        }
    }
}

/// Synchronises the context of `driver`: how long the host waited, in nanoseconds.
pub(crate) fn synchronize<D: Driver>(driver: &D) -> Result<u64, DeviceError> {
    let start = Instant::now();
    driver.ctx_synchronize()?;
    Ok(start.elapsed().as_nanos() as u64)
}

impl<D: Driver> Drop for DevicePool<D> {
    /// Returns every pending block to the heap (after synchronising, unless a capture is under
    /// way), destroys the pool's events; the core pool then gives back every wholly free
    /// region. Regions holding live (or still pending) blocks stay with the driver.
    fn drop(&mut self) {
        if let Ok(Some(ticket)) = self.prepare_sync() {
            if let Ok(ns) = synchronize(self.driver()) {
                self.synced(ticket, ns);
            }
        }
        self.order.destroy_all_events(&self.mem);
    }
}
