//! What a [`DevicePool`](crate::DevicePool) counts: [`DeviceCounters`] and [`DeviceStats`].

use tagalloc::PoolStats;

/// Counters of what a [`DevicePool`](crate::DevicePool) did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceCounters {
    /// Allocations served from a pending block (freed on a stream, not yet known complete):
    /// the allocating stream's own, or another stream's after a device-side wait.
    pub reused_pending: u64,
    /// Of those, blocks another stream had freed (taken with a device-side wait unless the
    /// allocating stream had already waited for that work).
    pub reused_across: u64,
    /// Events recorded (batches fenced, and the switch to several streams).
    pub events_recorded: u64,
    /// Events queried.
    pub event_queries: u64,
    /// Batches returned to the heap after their event completed.
    pub batches_released: u64,
    /// Device-side waits (`cuStreamWaitEvent`): an allocating stream made to wait on the
    /// device for another stream's frees, instead of the host waiting.
    pub stream_waits: u64,
    /// Host nanoseconds spent in those calls (issuing them; the host never waits there).
    pub stream_wait_ns: u64,
    /// Host synchronisations (`cuCtxSynchronize`): running out of memory with frees pending,
    /// and emptying the cache.
    pub synchronizations: u64,
    /// Host nanoseconds spent blocked in them.
    pub host_sync_ns: u64,
    /// Allocations that ran out, synchronised, and tried again.
    pub exhaustion_retries: u64,
}

/// A [`DevicePool`](crate::DevicePool)'s statistics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceStats {
    /// The core pool's: bytes in use (pending blocks count as in use there), reserved, peaks.
    pub pool: PoolStats,
    /// Blocks pending (freed, waiting for their events before other streams may use them
    /// without a wait).
    pub pending_blocks: usize,
    /// Their bytes.
    pub pending_bytes: usize,
    /// The most bytes ever pending at once.
    pub peak_pending_bytes: usize,
    /// Streams the pool uses now (forgotten ones not counted).
    pub streams: usize,
    /// Whether several streams have allocated.
    pub multi_stream: bool,
    /// Events created and not destroyed.
    pub events: usize,
    /// CUDA graph captures under way that the pool was told of.
    pub captures: u32,
    /// What it did.
    pub counters: DeviceCounters,
}
