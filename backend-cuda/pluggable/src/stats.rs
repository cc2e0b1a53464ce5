//! [`TagallocStats`]: the figures `tagalloc_stats` fills in for a C caller.

use tagalloc_cuda::DeviceStats;

/// What [`tagalloc_stats`](crate::tagalloc_stats) fills in: bytes, counts, and whether the pool works.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TagallocStats {
    /// 0: the figures below are the device's pool's; otherwise no pool could be had (see
    /// [`tagalloc_last_error`](crate::tagalloc_last_error)): -1 no driver, no device, or a bad ordinal; -2 a null `out`.
    pub status: i32,
    /// Bytes in blocks handed out (rounded to the 256-byte granule), pending frees included.
    pub in_use: u64,
    /// The most bytes in use at once.
    pub peak_in_use: u64,
    /// Bytes held from the driver.
    pub reserved: u64,
    /// The most bytes held at once.
    pub peak_reserved: u64,
    /// Bytes freed on one stream that other streams wait for (their events).
    pub pending: u64,
    /// Allocations and frees so far.
    pub allocations: u64,
    /// Frees so far (stream-ordered frees counted when they reach the heap).
    pub frees: u64,
    /// Regions held from the driver (1 with virtual-memory growth).
    pub regions: u64,
    // Appended later: new fields only ever go at the end, so existing offsets stay put.
    /// Chunks handed out now, pending frees included.
    pub live_blocks: u64,
    /// Blocks pending (freed on their stream, waiting for their events).
    pub pending_blocks: u64,
    /// Allocations that ran out while frees were pending, waited for the device, and tried
    /// again (the device pool's `exhaustion_retries`).
    pub exhaustion_retries: u64,
    /// Allocations that failed, gave back every wholly free region, and tried again (the core
    /// pool's `retries`). One request can count here and in `exhaustion_retries`.
    pub pool_retries: u64,
    /// Regions obtained from the driver.
    pub regions_obtained: u64,
    /// Regions given back whole.
    pub regions_given_back: u64,
    /// Times a region grew in place (with virtual-memory growth: one more mapping).
    pub grown: u64,
    /// Times a region's free end was given back (unmapped).
    pub shrunk: u64,
    /// Host synchronisations (running out of memory with frees pending, emptying the cache).
    pub synchronizations: u64,
    /// Events recorded.
    pub events_recorded: u64,
    /// Events queried.
    pub event_queries: u64,
    /// Device-side waits the pool queued (`cuStreamWaitEvent`): an allocating stream made to
    /// wait on the device for another stream's frees, where the host used to wait.
    pub stream_waits: u64,
    /// Host nanoseconds spent issuing those waits (the host itself never waits there).
    pub stream_wait_ns: u64,
    /// Host nanoseconds spent blocked in host synchronisations (running out of memory with
    /// frees pending, emptying the cache).
    pub host_sync_ns: u64,
    /// CUDA graph private pools of the device alive now (see the graph-pool hooks).
    pub graph_pools: u64,
}

impl TagallocStats {
    /// The figures of a device pool's statistics, with its count of graph pools.
    pub(crate) fn from_pool(s: &DeviceStats, graph_pools: usize) -> TagallocStats {
        TagallocStats {
            status: 0,
            in_use: s.pool.heap.in_use as u64,
            peak_in_use: s.pool.heap.peak_in_use as u64,
            reserved: s.pool.reserved as u64,
            peak_reserved: s.pool.peak_reserved as u64,
            pending: s.pending_bytes as u64,
            allocations: s.pool.heap.allocs,
            frees: s.pool.heap.frees,
            regions: s.pool.heap.regions as u64,
            live_blocks: s.pool.heap.live as u64,
            pending_blocks: s.pending_blocks as u64,
            exhaustion_retries: s.counters.exhaustion_retries,
            pool_retries: s.pool.retries,
            regions_obtained: s.pool.regions_obtained,
            regions_given_back: s.pool.regions_given_back,
            grown: s.pool.grown,
            shrunk: s.pool.shrunk,
            synchronizations: s.counters.synchronizations,
            events_recorded: s.counters.events_recorded,
            event_queries: s.counters.event_queries,
            stream_waits: s.counters.stream_waits,
            stream_wait_ns: s.counters.stream_wait_ns,
            host_sync_ns: s.counters.host_sync_ns,
            graph_pools: graph_pools as u64,
        }
    }
}
