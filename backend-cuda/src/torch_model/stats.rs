//! The model's statistics, as PyTorch keeps them (`DeviceStats` in
//! `c10/cuda/CUDACachingAllocator.h`, updated by `increase_stat` / `decrease_stat`), for the
//! aggregate of both pools.

/// A current value and its high-water mark (`Stat`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Stat {
    /// The value now.
    pub current: u64,
    /// The highest it has been.
    pub peak: u64,
}

impl Stat {
    pub(crate) fn increase(&mut self, amount: u64) {
        self.current += amount;
        self.peak = self.peak.max(self.current);
    }

    pub(crate) fn decrease(&mut self, amount: u64) {
        debug_assert!(self.current >= amount, "negative statistic");
        self.current -= amount;
    }
}

/// What [`TorchAllocator::stats`](super::TorchAllocator::stats) reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct TorchStats {
    /// Bytes in blocks handed out (rounded sizes; `allocated_bytes`).
    pub allocated_bytes: Stat,
    /// Bytes in segments obtained from the driver (`reserved_bytes`): what the allocator
    /// holds of the device.
    pub reserved_bytes: Stat,
    /// Bytes the caller asked for in blocks handed out or waiting on events
    /// (`requested_bytes`).
    pub requested_bytes: Stat,
    /// Bytes in blocks handed out or waiting on events (`active_bytes`).
    pub active_bytes: Stat,
    /// Blocks handed out (`allocation`).
    pub allocations: Stat,
    /// Segments held (`segment`).
    pub segments: Stat,
    /// Allocations retried after every cached block was released (`num_alloc_retries`).
    pub num_alloc_retries: u64,
    /// Allocations that failed for want of memory (`num_ooms`).
    pub num_ooms: u64,
    /// Times every outstanding event was waited for (`num_sync_all_streams`).
    pub num_sync_all_streams: u64,
    /// Segments obtained from the driver (`num_device_alloc`, `cudaMalloc` calls that
    /// succeeded).
    pub num_device_alloc: u64,
    /// Segments given back (`num_device_free`, `cudaFree` calls).
    pub num_device_free: u64,
}
