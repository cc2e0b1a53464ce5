//! [`TorchAllocator`]: `DeviceCachingAllocator` of PyTorch's
//! `c10/cuda/CUDACachingAllocator.cpp` (commit 001074d25084fdb87a799823e395a50f5ec044d3), one
//! device, default configuration apart from [`TorchConfig`], over any [`Driver`]. Each method
//! names the function it follows; the data structures are the same (a block list per segment,
//! free blocks of each pool in one set ordered by stream, size and address, outstanding events
//! per stream), so the same requests land at the same offsets of the same segments.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::fmt;

use super::policy::{
    allocation_size, may_use_block, pool_of, round_size, should_split, ConfigError, PoolKind,
    TorchConfig, ONE_EXA_BYTES,
};
use super::stats::TorchStats;
use crate::driver::{DevicePtr, Driver};
use crate::error::DriverError;

/// Index of a block in the allocator's arena.
type Id = usize;

/// A free block's place in its pool: (stream, size, address), as `BlockComparatorSize` orders
/// them, and the block.
type Key<S> = (S, usize, u64, Id);

/// A block (`struct Block`): a piece of a segment, free or handed out.
#[derive(Clone, Debug)]
struct Block<S> {
    /// The stream it was allocated on; a segment and all its blocks belong to one stream.
    stream: S,
    size: usize,
    /// What the caller asked for, while handed out.
    requested: usize,
    ptr: u64,
    pool: PoolKind,
    allocated: bool,
    /// The neighbours in the segment (address order).
    prev: Option<Id>,
    next: Option<Id>,
    /// Events recorded at its free on other streams that have not completed.
    event_count: u32,
    /// Streams other than `stream` it was used on (`record_stream`).
    stream_uses: Vec<S>,
    /// Whether this arena slot holds a block (else it is on the vacant list).
    live: bool,
}

impl<S> Block<S> {
    /// Whether the block may be handed out or merged: in its pool's set.
    fn is_free(&self) -> bool {
        !self.allocated && self.event_count == 0 && self.stream_uses.is_empty()
    }
}

/// Why [`TorchAllocator::malloc`] or [`TorchAllocator::free`] failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TorchError {
    /// "CUDA out of memory": no cached block fits and the driver gave no new segment, even
    /// after every unsplit cached segment was released.
    OutOfMemory {
        /// The size asked for.
        size: usize,
        /// The segment the allocator tried to obtain.
        alloc_size: usize,
        /// Bytes handed out at the time.
        allocated: u64,
        /// Bytes held at the time.
        reserved: u64,
        /// What the driver said was free (`cudaMemGetInfo`), if it could say.
        device_free: Option<usize>,
    },
    /// "invalid device pointer": not an address this allocator handed out, or freed already.
    InvalidPointer(DevicePtr),
    /// The configuration is one PyTorch refuses.
    Config(ConfigError),
    /// A driver call failed with something other than running out of memory.
    Driver(DriverError),
}

impl From<DriverError> for TorchError {
    fn from(e: DriverError) -> TorchError {
        TorchError::Driver(e)
    }
}

impl fmt::Display for TorchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            TorchError::OutOfMemory {
                size,
                alloc_size,
                allocated,
                reserved,
                device_free,
            } => {
                write!(
                    f,
                    "CUDA out of memory: tried to allocate {size} bytes (a {alloc_size}-byte \
                     segment); {allocated} bytes allocated, {} reserved but unallocated",
                    reserved - allocated
                )?;
                if let Some(free) = device_free {
                    write!(f, ", {free} free on the device")?;
                }
                Ok(())
            }
            TorchError::InvalidPointer(p) => write!(f, "invalid device pointer {:#x}", p.0),
            TorchError::Config(e) => write!(f, "invalid configuration: {e}"),
            TorchError::Driver(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for TorchError {}

/// One block of a [`SegmentInfo`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BlockInfo {
    /// Its address.
    pub ptr: DevicePtr,
    /// Its size in bytes.
    pub size: usize,
    /// Whether it is handed out.
    pub allocated: bool,
    /// Whether it is handed out or waiting for events recorded at its free.
    pub active: bool,
}

/// One segment obtained from the driver and its blocks, in address order (`SegmentInfo` of
/// `snapshot()`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SegmentInfo<S> {
    /// Its address.
    pub ptr: DevicePtr,
    /// Its size in bytes.
    pub size: usize,
    /// The stream it belongs to.
    pub stream: S,
    /// Which pool it serves.
    pub pool: PoolKind,
    /// Its blocks.
    pub blocks: Vec<BlockInfo>,
}

/// A model of PyTorch's CUDA caching allocator for one device over a [`Driver`]. See the
/// [module documentation](super).
///
/// Invariants: each live block's `prev`/`next` chain is one segment obtained from the driver,
/// its blocks contiguous and of one stream and pool; a block is in its pool's set iff it is
/// free (not allocated, and waiting for no event); `active` maps exactly the allocated blocks' addresses; no two
/// neighbours in a segment are both free; `stats` agree with the blocks (all checked by
/// [`TorchAllocator::check`]).
pub struct TorchAllocator<D: Driver> {
    driver: D,
    config: TorchConfig,
    blocks: Vec<Block<D::Stream>>,
    vacant: Vec<Id>,
    small: BTreeSet<Key<D::Stream>>,
    large: BTreeSet<Key<D::Stream>>,
    /// Allocated blocks by address (`NativeCachingAllocator::allocated_blocks`).
    active: HashMap<u64, Id>,
    /// Outstanding events by stream, oldest first (`cuda_events`).
    events: BTreeMap<D::Stream, VecDeque<(D::Event, Id)>>,
    /// Events to reuse (`EventPool`).
    event_pool: Vec<D::Event>,
    stats: TorchStats,
}

impl<D: Driver> fmt::Debug for TorchAllocator<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TorchAllocator")
            .field("config", &self.config)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl<D: Driver> TorchAllocator<D> {
    /// An empty allocator over `driver`, configured as `config` (which PyTorch's parser would
    /// have to accept).
    pub fn new(driver: D, config: TorchConfig) -> Result<TorchAllocator<D>, TorchError> {
        config.validate().map_err(TorchError::Config)?;
        Ok(TorchAllocator {
            driver,
            config,
            blocks: Vec::new(),
            vacant: Vec::new(),
            small: BTreeSet::new(),
            large: BTreeSet::new(),
            active: HashMap::new(),
            events: BTreeMap::new(),
            event_pool: Vec::new(),
            stats: TorchStats::default(),
        })
    }

    /// The driver it allocates from.
    pub fn driver(&self) -> &D {
        &self.driver
    }

    /// Its configuration.
    pub fn config(&self) -> &TorchConfig {
        &self.config
    }

    /// Its statistics (`getStats`).
    pub fn stats(&self) -> TorchStats {
        self.stats
    }

    /// Sets every peak back to its current value (`resetPeakStats`).
    pub fn reset_peak_stats(&mut self) {
        let s = &mut self.stats;
        for stat in [
            &mut s.allocated_bytes,
            &mut s.reserved_bytes,
            &mut s.requested_bytes,
            &mut s.active_bytes,
            &mut s.allocations,
            &mut s.segments,
        ] {
            stat.peak = stat.current;
        }
    }

    // --- the arena ----------------------------------------------------------------------------

    fn new_block(&mut self, block: Block<D::Stream>) -> Id {
        match self.vacant.pop() {
            Some(id) => {
                self.blocks[id] = block;
                id
            }
            None => {
                self.blocks.push(block);
                self.blocks.len() - 1
            }
        }
    }

    fn delete_block(&mut self, id: Id) {
        let b = &mut self.blocks[id];
        b.live = false;
        b.stream_uses = Vec::new();
        b.prev = None;
        b.next = None;
        self.vacant.push(id);
    }

    fn key(&self, id: Id) -> Key<D::Stream> {
        let b = &self.blocks[id];
        (b.stream, b.size, b.ptr, id)
    }

    fn pool_set(&mut self, pool: PoolKind) -> &mut BTreeSet<Key<D::Stream>> {
        match pool {
            PoolKind::Small => &mut self.small,
            PoolKind::Large => &mut self.large,
        }
    }

    /// Puts a free block in its pool's set (`BlockPool::insert_into_blocks`).
    fn insert_free(&mut self, id: Id) {
        let key = self.key(id);
        let pool = self.blocks[id].pool;
        self.pool_set(pool).insert(key);
    }

    fn remove_free(&mut self, id: Id) {
        let key = self.key(id);
        let pool = self.blocks[id].pool;
        self.pool_set(pool).remove(&key);
    }

    // --- the public operations ----------------------------------------------------------------

    /// Allocates `size` bytes for use on `stream` (`NativeCachingAllocator::allocate`, then
    /// `DeviceCachingAllocator::malloc`). A size of 0 is `Ok(None)` with nothing allocated, as
    /// PyTorch returns a null pointer for it. The address is a multiple of 512 bytes.
    ///
    /// `malloc`: completed events first free the blocks that waited on them
    /// (`process_events`); the size is rounded (`round_size`) and the pool chosen
    /// (`get_pool`); the best-fitting cached block of that stream and pool is taken
    /// (`get_free_block`); failing that a new segment is obtained (`alloc_block`), and if the
    /// driver is out of memory, cached oversize blocks are released and the segment asked for
    /// again (`release_available_cached_blocks`), then every unsplit cached segment is released
    /// and it is asked for once more (`release_cached_blocks`, the retry). The block found is
    /// split if `should_split` says so (`alloc_found_block`).
    pub fn malloc(
        &mut self,
        size: usize,
        stream: D::Stream,
    ) -> Result<Option<DevicePtr>, TorchError> {
        if size == 0 {
            return Ok(None);
        }
        if size >= ONE_EXA_BYTES {
            return Err(self.out_of_memory(size, size));
        }
        self.process_events()?;
        let rounded = round_size(size);
        let pool = pool_of(rounded);
        let alloc_size = allocation_size(rounded);

        let mut found = self.get_free_block(pool, stream, rounded);
        if found.is_none() {
            found = self.alloc_block(pool, stream, alloc_size, false)?;
            if found.is_none() && self.release_available_cached_blocks(pool, stream, rounded)? {
                found = self.alloc_block(pool, stream, alloc_size, false)?;
            }
            if found.is_none() && self.release_cached_blocks()? {
                found = self.alloc_block(pool, stream, alloc_size, true)?;
            }
        }
        let Some(id) = found else {
            self.stats.num_ooms += 1;
            return Err(self.out_of_memory(size, alloc_size));
        };
        let split = should_split(pool, self.blocks[id].size, rounded, &self.config);
        Ok(Some(self.alloc_found_block(id, rounded, size, split)))
    }

    /// Frees an address [`malloc`](Self::malloc) returned (`NativeCachingAllocator::free`, then
    /// `DeviceCachingAllocator::free`): the block goes back to its pool at once, merged with
    /// free neighbours (`free_block`), unless [`record_stream`](Self::record_stream) named other
    /// streams, in which case an event is recorded on each (`insert_events`) and the block waits
    /// for them. A null address is ignored; one not handed out (or freed already) is
    /// [`TorchError::InvalidPointer`].
    pub fn free(&mut self, ptr: DevicePtr) -> Result<(), TorchError> {
        if ptr.0 == 0 {
            return Ok(());
        }
        let id = self
            .active
            .remove(&ptr.0)
            .ok_or(TorchError::InvalidPointer(ptr))?;
        let size = self.blocks[id].size as u64;
        self.blocks[id].allocated = false;
        self.stats.allocations.decrease(1);
        self.stats.allocated_bytes.decrease(size);
        if self.blocks[id].stream_uses.is_empty() {
            self.free_block(id);
        } else {
            self.insert_events(id)?;
        }
        Ok(())
    }

    /// Marks the block at `ptr` as used on `stream` too (`recordStream`): when it is freed, it
    /// is reused only after the work queued on `stream` by then has completed. Its own stream
    /// is ignored.
    ///
    /// # Safety
    ///
    /// `stream` is live for the driver, and stays live until `ptr` is freed (an event is
    /// recorded on it then).
    pub unsafe fn record_stream(
        &mut self,
        ptr: DevicePtr,
        stream: D::Stream,
    ) -> Result<(), TorchError> {
        let &id = self
            .active
            .get(&ptr.0)
            .ok_or(TorchError::InvalidPointer(ptr))?;
        let b = &mut self.blocks[id];
        if stream != b.stream && !b.stream_uses.contains(&stream) {
            b.stream_uses.push(stream);
        }
        Ok(())
    }

    /// Returns every cached segment with no block in use to the driver, after waiting for
    /// every outstanding event (`emptyCache`, i.e. `release_cached_blocks`).
    pub fn empty_cache(&mut self) -> Result<(), TorchError> {
        self.release_cached_blocks()?;
        Ok(())
    }

    /// The segments held and their blocks, in address order (`snapshot`).
    pub fn segments(&self) -> Vec<SegmentInfo<D::Stream>> {
        let mut segments: Vec<_> = (0..self.blocks.len())
            .filter(|&id| self.blocks[id].live && self.blocks[id].prev.is_none())
            .map(|head| {
                let h = &self.blocks[head];
                let mut info = SegmentInfo {
                    ptr: DevicePtr(h.ptr),
                    size: 0,
                    stream: h.stream,
                    pool: h.pool,
                    blocks: Vec::new(),
                };
                let mut cur = Some(head);
                while let Some(id) = cur {
                    let b = &self.blocks[id];
                    info.size += b.size;
                    info.blocks.push(BlockInfo {
                        ptr: DevicePtr(b.ptr),
                        size: b.size,
                        allocated: b.allocated,
                        active: !b.is_free(),
                    });
                    cur = b.next;
                }
                info
            })
            .collect();
        segments.sort_by_key(|s| s.ptr);
        segments
    }

    /// Verifies the invariants written on [`TorchAllocator`]; says which one failed.
    pub fn check(&self) -> Result<(), String> {
        let (mut reserved, mut segments, mut allocated, mut live) = (0u64, 0u64, 0u64, 0usize);
        for (head, h) in self.blocks.iter().enumerate() {
            if !h.live || h.prev.is_some() {
                continue;
            }
            segments += 1;
            let mut cur = head;
            loop {
                let b = &self.blocks[cur];
                live += 1;
                reserved += b.size as u64;
                if b.stream != h.stream || b.pool != h.pool {
                    return Err(format!(
                        "block {cur} differs from its segment's head {head}"
                    ));
                }
                let key = self.key(cur);
                let listed = match b.pool {
                    PoolKind::Small => self.small.contains(&key),
                    PoolKind::Large => self.large.contains(&key),
                };
                if listed != b.is_free() {
                    return Err(format!(
                        "block {cur} at {:#x}: free {} but listed {listed}",
                        b.ptr,
                        b.is_free()
                    ));
                }
                if b.allocated {
                    allocated += b.size as u64;
                    if self.active.get(&b.ptr) != Some(&cur) {
                        return Err(format!("allocated block {cur} not found by its address"));
                    }
                }
                let Some(next) = b.next else { break };
                let n = &self.blocks[next];
                if !n.live || n.prev != Some(cur) || b.ptr + b.size as u64 != n.ptr {
                    return Err(format!("blocks {cur} and {next} are not neighbours"));
                }
                if b.is_free() && n.is_free() {
                    return Err(format!("free neighbours {cur} and {next} were not merged"));
                }
                cur = next;
            }
        }
        let listed = self.small.len() + self.large.len();
        let free_blocks = self.blocks.iter().filter(|b| b.live && b.is_free()).count();
        if listed != free_blocks {
            return Err(format!("{listed} blocks listed free, {free_blocks} free"));
        }
        if live != self.blocks.len() - self.vacant.len() {
            return Err("a live block belongs to no segment".into());
        }
        let s = &self.stats;
        if (reserved, segments, allocated, self.active.len() as u64)
            != (
                s.reserved_bytes.current,
                s.segments.current,
                s.allocated_bytes.current,
                s.allocations.current,
            )
        {
            return Err(format!(
                "statistics disagree with the blocks: reserved {reserved}, {segments} segments, \
                 allocated {allocated} in {} blocks; stats {s:?}",
                self.active.len()
            ));
        }
        Ok(())
    }

    // --- DeviceCachingAllocator's private functions -------------------------------------------

    fn out_of_memory(&self, size: usize, alloc_size: usize) -> TorchError {
        TorchError::OutOfMemory {
            size,
            alloc_size,
            allocated: self.stats.allocated_bytes.current,
            reserved: self.stats.reserved_bytes.current,
            device_free: self.driver.mem_get_info().ok().map(|i| i.free),
        }
    }

    /// `get_free_block`: the smallest free block of `stream` in the pool with at least `size`
    /// bytes, lowest address first among equal sizes (`lower_bound` on `BlockComparatorSize`),
    /// unless the oversize rules refuse it; taken out of the pool.
    fn get_free_block(&mut self, pool: PoolKind, stream: D::Stream, size: usize) -> Option<Id> {
        let set = self.pool_set(pool);
        let &key = set.range((stream, size, 0, 0)..).next()?;
        if key.0 != stream || !may_use_block(key.1, size, &self.config) {
            return None;
        }
        self.pool_set(pool).remove(&key);
        Some(key.3)
    }

    /// `alloc_block`: a new segment of `alloc_size` bytes from the driver (`cudaMalloc`), as
    /// one unsplit block (not yet in the pool). `Ok(None)` when the driver is out of memory.
    fn alloc_block(
        &mut self,
        pool: PoolKind,
        stream: D::Stream,
        alloc_size: usize,
        is_retry: bool,
    ) -> Result<Option<Id>, DriverError> {
        if is_retry {
            self.stats.num_alloc_retries += 1;
        }
        let ptr = match self.driver.mem_alloc(alloc_size) {
            Ok(ptr) => ptr,
            Err(e) if e.is_out_of_memory() => return Ok(None),
            Err(e) => return Err(e),
        };
        let id = self.new_block(Block {
            stream,
            size: alloc_size,
            requested: 0,
            ptr: ptr.0,
            pool,
            allocated: false,
            prev: None,
            next: None,
            event_count: 0,
            stream_uses: Vec::new(),
            live: true,
        });
        self.stats.segments.increase(1);
        self.stats.reserved_bytes.increase(alloc_size as u64);
        self.stats.num_device_alloc += 1;
        Ok(Some(id))
    }

    /// `alloc_found_block`: hands out the first `size` bytes of block `id` (out of its pool),
    /// the rest becoming a free block of its own when `split`.
    fn alloc_found_block(
        &mut self,
        id: Id,
        size: usize,
        requested: usize,
        split: bool,
    ) -> DevicePtr {
        let id = if split {
            let remaining = id;
            let r = &self.blocks[remaining];
            let block = Block {
                size,
                requested: 0,
                prev: r.prev,
                next: Some(remaining),
                event_count: 0,
                stream_uses: Vec::new(),
                ..r.clone()
            };
            let new = self.new_block(block);
            if let Some(p) = self.blocks[new].prev {
                self.blocks[p].next = Some(new);
            }
            let r = &mut self.blocks[remaining];
            r.prev = Some(new);
            r.ptr += size as u64;
            r.size -= size;
            self.insert_free(remaining);
            new
        } else {
            id
        };
        let b = &mut self.blocks[id];
        b.allocated = true;
        b.requested = requested;
        let (ptr, size) = (b.ptr, b.size as u64);
        self.active.insert(ptr, id);
        let s = &mut self.stats;
        s.allocations.increase(1);
        s.allocated_bytes.increase(size);
        s.active_bytes.increase(size);
        s.requested_bytes.increase(requested as u64);
        DevicePtr(ptr)
    }

    /// `free_block`: a block no longer allocated and waited for goes back to its pool, merged
    /// with its free neighbours (`try_merge_blocks`).
    fn free_block(&mut self, id: Id) {
        let (size, requested) = (
            self.blocks[id].size as u64,
            self.blocks[id].requested as u64,
        );
        let (prev, next) = (self.blocks[id].prev, self.blocks[id].next);
        for candidate in [prev, next].into_iter().flatten() {
            self.try_merge_blocks(id, candidate);
        }
        self.blocks[id].requested = 0;
        self.insert_free(id);
        self.stats.active_bytes.decrease(size);
        self.stats.requested_bytes.decrease(requested);
    }

    /// `try_merge_blocks`: absorbs the neighbour `src` into `dst` if it is free.
    fn try_merge_blocks(&mut self, dst: Id, src: Id) {
        if !self.blocks[src].is_free() {
            return;
        }
        self.remove_free(src);
        let s = self.blocks[src].clone();
        let d = &mut self.blocks[dst];
        if d.prev == Some(src) {
            d.ptr = s.ptr;
            d.prev = s.prev;
            if let Some(p) = s.prev {
                self.blocks[p].next = Some(dst);
            }
        } else {
            d.next = s.next;
            if let Some(n) = s.next {
                self.blocks[n].prev = Some(dst);
            }
        }
        self.blocks[dst].size += s.size;
        self.delete_block(src);
    }

    /// `insert_events`: records an event on every stream the block was used on; the block
    /// waits for all of them.
    fn insert_events(&mut self, id: Id) -> Result<(), DriverError> {
        let streams = std::mem::take(&mut self.blocks[id].stream_uses);
        for stream in streams {
            let event = match self.event_pool.pop() {
                Some(e) => e,
                None => self.driver.event_create()?,
            };
            // SAFETY: the event was created by this driver and is owned by this allocator (in
            // its pool, or just made); the stream is live by `record_stream`'s contract.
            if let Err(e) = unsafe { self.driver.event_record(event, stream) } {
                self.event_pool.push(event);
                return Err(e);
            }
            self.blocks[id].event_count += 1;
            self.events
                .entry(stream)
                .or_default()
                .push_back((event, id));
        }
        Ok(())
    }

    /// `process_events`: on each stream, frees the blocks whose oldest events have completed,
    /// stopping at the first that has not.
    fn process_events(&mut self) -> Result<(), DriverError> {
        let streams: Vec<D::Stream> = self.events.keys().copied().collect();
        for stream in streams {
            while let Some(&(event, id)) = self.events.get(&stream).and_then(|q| q.front()) {
                // SAFETY: the event is this allocator's, created by this driver and live.
                if !unsafe { self.driver.event_query(event) }? {
                    break;
                }
                if let Some(q) = self.events.get_mut(&stream) {
                    q.pop_front();
                }
                self.event_pool.push(event);
                self.event_done(id);
            }
            if self.events.get(&stream).is_some_and(|q| q.is_empty()) {
                self.events.remove(&stream);
            }
        }
        Ok(())
    }

    fn event_done(&mut self, id: Id) {
        let b = &mut self.blocks[id];
        b.event_count -= 1;
        if b.event_count == 0 {
            self.free_block(id);
        }
    }

    /// `synchronize_and_free_events`: waits for every outstanding event and frees the blocks
    /// that waited on them.
    fn synchronize_and_free_events(&mut self) -> Result<(), DriverError> {
        self.stats.num_sync_all_streams += 1;
        while let Some((stream, mut queue)) = self.events.pop_first() {
            while let Some((event, id)) = queue.pop_front() {
                // SAFETY: the event is this allocator's, created by this driver and live.
                if let Err(e) = unsafe { self.driver.event_synchronize(event) } {
                    queue.push_front((event, id));
                    self.events.insert(stream, queue);
                    return Err(e);
                }
                self.event_pool.push(event);
                self.event_done(id);
            }
        }
        Ok(())
    }

    /// `release_block`: gives an unsplit free segment back to the driver (`cudaFree`).
    fn release_block(&mut self, id: Id) -> Result<(), DriverError> {
        let b = &self.blocks[id];
        debug_assert!(b.is_free() && b.prev.is_none() && b.next.is_none());
        let (ptr, size) = (b.ptr, b.size as u64);
        // SAFETY: the block is a whole segment this allocator obtained from the driver's
        // `mem_alloc` (no neighbours), free and waited for, so nothing uses it; it is forgotten
        // right after.
        unsafe { self.driver.mem_free(DevicePtr(ptr)) }?;
        self.remove_free(id);
        self.delete_block(id);
        self.stats.num_device_free += 1;
        self.stats.segments.decrease(1);
        self.stats.reserved_bytes.decrease(size);
        Ok(())
    }

    /// `release_blocks`: releases every unsplit free block of a pool.
    fn release_blocks(&mut self, pool: PoolKind) -> Result<(), DriverError> {
        let set = match pool {
            PoolKind::Small => &self.small,
            PoolKind::Large => &self.large,
        };
        let whole: Vec<Id> = set
            .iter()
            .map(|k| k.3)
            .filter(|&id| self.blocks[id].prev.is_none() && self.blocks[id].next.is_none())
            .collect();
        for id in whole {
            self.release_block(id)?;
        }
        Ok(())
    }

    /// `release_cached_blocks`: waits for every outstanding event, then releases every unsplit
    /// free block of both pools.
    fn release_cached_blocks(&mut self) -> Result<bool, DriverError> {
        self.synchronize_and_free_events()?;
        self.release_blocks(PoolKind::Large)?;
        self.release_blocks(PoolKind::Small)?;
        Ok(true)
    }

    /// `release_available_cached_blocks`: with a `max_split_size` set, releases the smallest
    /// cached block of the stream at least as large as the request (or as `max_split_size`),
    /// or else oversize blocks from the largest down until as many bytes are released.
    fn release_available_cached_blocks(
        &mut self,
        pool: PoolKind,
        stream: D::Stream,
        size: usize,
    ) -> Result<bool, DriverError> {
        let max_split = self.config.max_split_size;
        if max_split == usize::MAX {
            return Ok(false);
        }
        let key_size = size.max(max_split);
        let set = self.pool_set(pool);
        let bound = (stream, key_size, 0, 0);
        let single = set.range(bound..).next().filter(|k| k.0 == stream).copied();
        if let Some(key) = single {
            self.release_block(key.3)?;
            return Ok(true);
        }
        let set = self.pool_set(pool);
        // No single block is large enough; free multiple oversize blocks, starting with the
        // largest.
        let candidates: Vec<Key<D::Stream>> = set
            .range(..bound)
            .rev()
            .take_while(|k| k.0 == stream && k.1 >= max_split)
            .copied()
            .collect();
        let mut released = 0;
        for key in candidates {
            if released >= key_size {
                break;
            }
            released += key.1;
            self.release_block(key.3)?;
        }
        Ok(released >= key_size)
    }
}

impl<D: Driver> Drop for TorchAllocator<D> {
    /// Gives back what can be given back: waits for outstanding events, releases every cached
    /// segment with no block in use, and destroys its events. Segments with blocks still in
    /// use are left to the driver (their addresses stay valid). Errors cannot be reported
    /// from a drop and are ignored.
    fn drop(&mut self) {
        let _ = self.release_cached_blocks();
        for event in self.event_pool.drain(..) {
            // SAFETY: pooled events are this allocator's, created by this driver, not
            // recorded on anything pending, and forgotten here.
            let _ = unsafe { self.driver.event_destroy(event) };
        }
    }
}
