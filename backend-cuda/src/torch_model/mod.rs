//! A model of PyTorch's CUDA caching allocator's placement policy (the `torch-model` feature),
//! over the [driver seam](crate::Driver), so that it runs on the
//! fake driver (`fake::FakeDriver`, feature `fake`) with no GPU and tagalloc's device pool can be measured
//! against it on the same trace: the memory it reserves for the same requests, and the driver
//! calls it makes.
//!
//! Written from `c10/cuda/CUDACachingAllocator.cpp` (pytorch/pytorch, commit
//! 001074d25084fdb87a799823e395a50f5ec044d3) and the allocator settings parser
//! `c10/core/AllocatorConfig.cpp`; every rule below names the function it follows, and the
//! tests cite the same.
//!
//! - Sizes are rounded up to 512 bytes (`kMinBlockSize`, `round_size`).
//! - Requests up to 1 MiB (`kSmallSize`) use the small pool, larger ones the large pool
//!   (`get_pool`).
//! - A request no cached block serves gets a new segment: 2 MiB for the small pool
//!   (`kSmallBuffer`), 20 MiB for requests under 10 MiB (`kLargeBuffer`, `kMinLargeAlloc`),
//!   else the request rounded up to 2 MiB (`kRoundLarge`) (`get_allocation_size`).
//! - The cached block taken is the smallest of the request's stream and pool that fits, the
//!   lowest address among equals: free blocks are ordered by (stream, size, address)
//!   (`BlockComparatorSize`, `get_free_block`). Segments and their blocks belong to the stream
//!   that allocated them; another stream never reuses them.
//! - A block larger than needed is split when at least 512 bytes remain in the small pool, or
//!   more than 1 MiB in the large pool and the request is under `max_split_size`
//!   (`should_split`, `alloc_found_block`).
//! - With `max_split_size` set, blocks of that size or more are "oversize": never split, never
//!   used for a request under `max_split_size`, and used for an oversize request only if less
//!   than 20 MiB (`max_non_split_rounding`) larger (`get_free_block`).
//! - A freed block merges with free neighbours in its segment (`free_block`,
//!   `try_merge_blocks`); blocks used on other streams (`recordStream`) wait for events
//!   recorded at the free (`insert_events`, `process_events`).
//! - When the driver is out of memory: release cached oversize blocks and retry
//!   (`release_available_cached_blocks`), then wait for every event, release every unsplit
//!   cached segment and retry once more (`release_cached_blocks`, `num_alloc_retries`); then
//!   fail. [`TorchAllocator::empty_cache`] is `emptyCache`.
//! - Statistics (`DeviceStats`): allocated, reserved, requested and active bytes with peaks,
//!   segments, retries, out-of-memory failures, device allocations and frees.
//!
//! Left out, all off by default in PyTorch: `roundup_power2_divisions`,
//! `garbage_collection_threshold`, `expandable_segments`, the per-process memory fraction,
//! CUDA graph private pools and free-memory callbacks.

mod allocator;
mod policy;
mod stats;
#[cfg(test)]
mod tests;

pub use allocator::{BlockInfo, SegmentInfo, TorchAllocator, TorchError};
pub use policy::{
    allocation_size, may_use_block, pool_of, round_size, should_split, ConfigError, PoolKind,
    TorchConfig, K_LARGE_BUFFER, K_MIN_BLOCK_SIZE, K_MIN_LARGE_ALLOC, K_ROUND_LARGE,
    K_SMALL_BUFFER, K_SMALL_SIZE, ONE_EXA_BYTES,
};
pub use stats::{Stat, TorchStats};
