//! A [`DevicePool::snapshot`](tagalloc_cuda::DevicePool::snapshot) written as JSON in the
//! shape of the `"segments"` of PyTorch's `torch.cuda.memory._snapshot()`, so that PyTorch's
//! memory visualiser (`torch.cuda._memory_viz`, pytorch.org/memory_viz) can draw a tagalloc
//! pool once the Python side wraps it as `{"segments": [...], "device_traces": [...]}`.
//!
//! The document:
//!
//! ```text
//! {"device": 0, "segments": [
//!   {"device": 0, "address": 139637976727552, "total_size": 2097152, "stream": 0,
//!    "segment_type": "large", "segment_pool_id": [0, 0],
//!    "allocated_size": 1024, "active_size": 2048, "requested_size": 2000, "frames": [],
//!    "blocks": [
//!      {"address": 139637976727552, "size": 1024, "requested_size": 1000,
//!       "state": "active_allocated", "stream": 0, "frames": []},
//!      {"address": ..., "size": 1024, "requested_size": 1024,
//!       "state": "active_pending_free", "stream": 94001, "frames": []},
//!      {"address": ..., "size": 2095104, "requested_size": 0,
//!       "state": "inactive", "stream": null, "frames": []}]}]}
//! ```
//!
//! Field by field, as PyTorch's `segmentInfoToDict` writes them (torch/csrc/cuda/
//! memory_snapshot.cpp) and its allocator's `snapshot()` sums them (c10/cuda/
//! CUDACachingAllocator.cpp):
//!
//! - a segment is a region the pool holds from the driver; `total_size` its bytes (mapped
//!   bytes for a virtual-memory region), the sum of its blocks' sizes;
//! - `allocated_size`: the bytes of its `active_allocated` blocks; `active_size`: of its
//!   `active_allocated` and `active_pending_free` blocks; `requested_size`: the requested
//!   bytes of those active blocks;
//! - `stream`: always 0 on a segment, because a tagalloc region serves every stream (a
//!   PyTorch segment belongs to the stream that allocated it); a block's own `stream` (a key
//!   PyTorch's blocks do not have, which its readers ignore) is the stream it was allocated
//!   on, or, pending, freed on, and `null` where the pool does not know it;
//! - `segment_type` is `"large"` (the pool has no separate small pool), `segment_pool_id`
//!   `[0, 0]` (no private pools), `frames` empty (no stack traces are recorded);
//! - a block's `state`: `"active_allocated"` (handed out), `"active_pending_free"` (freed on
//!   its stream, waiting for the device to pass the free before other streams may use it),
//!   `"inactive"` (free);
//! - a block's `requested_size`: the bytes asked for where the pool knows them, the block's
//!   size for an active block where it does not (a pending block), 0 for a free one.
//!
//! Addresses and sizes are decimal integers; streams are the integer value of the driver's
//! handle (`cudaStream_t`), as PyTorch writes them.

use core::fmt::Write;

use tagalloc_cuda::{BlockState, SnapshotBlock, SnapshotRegion};

/// The state's name in PyTorch's snapshots.
fn state_name(state: BlockState) -> &'static str {
    match state {
        BlockState::Allocated => "active_allocated",
        BlockState::Pending => "active_pending_free",
        BlockState::Free => "inactive",
    }
}

/// The bytes PyTorch's `requested_size` reports for `b` (see the module documentation).
fn requested<S>(b: &SnapshotBlock<S>) -> usize {
    match b.state {
        BlockState::Free => 0,
        BlockState::Allocated | BlockState::Pending => b.requested.unwrap_or(b.size),
    }
}

/// `regions` of the pool of `device` as the JSON document described in the
/// [module documentation](self); `stream_number` gives a stream's integer value.
pub fn snapshot_json<S: Copy>(
    device: u32,
    regions: &[SnapshotRegion<S>],
    stream_number: impl Fn(S) -> u64,
) -> String {
    let mut out = String::with_capacity(64 + regions.len() * 256);
    // Writing to a `String` cannot fail: the `fmt::Result`s are ignored on purpose.
    let _ = write!(out, "{{\"device\": {device}, \"segments\": [");
    for (i, r) in regions.iter().enumerate() {
        let active = |b: &&SnapshotBlock<S>| b.state != BlockState::Free;
        let allocated: usize = r
            .blocks
            .iter()
            .filter(|b| b.state == BlockState::Allocated)
            .map(|b| b.size)
            .sum();
        let active_size: usize = r.blocks.iter().filter(active).map(|b| b.size).sum();
        let requested_size: usize = r.blocks.iter().filter(active).map(requested).sum();
        if i > 0 {
            out.push_str(", ");
        }
        let _ = write!(
            out,
            "{{\"device\": {device}, \"address\": {}, \"total_size\": {}, \"stream\": 0, \
             \"segment_type\": \"large\", \"segment_pool_id\": [0, 0], \
             \"allocated_size\": {allocated}, \"active_size\": {active_size}, \
             \"requested_size\": {requested_size}, \"frames\": [], \"blocks\": [",
            r.addr, r.size
        );
        for (j, b) in r.blocks.iter().enumerate() {
            if j > 0 {
                out.push_str(", ");
            }
            let _ = write!(
                out,
                "{{\"address\": {}, \"size\": {}, \"requested_size\": {}, \"state\": \"{}\", \
                 \"stream\": ",
                b.addr,
                b.size,
                requested(b),
                state_name(b.state)
            );
            match b.stream {
                Some(s) => {
                    let _ = write!(out, "{}", stream_number(s));
                }
                None => out.push_str("null"),
            }
            out.push_str(", \"frames\": []}");
        }
        out.push_str("]}");
    }
    out.push_str("]}");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_and_states_as_pytorch_writes_them() {
        let block = |addr, size, state, requested, stream| SnapshotBlock {
            addr,
            size,
            state,
            requested,
            stream,
        };
        let regions = [SnapshotRegion {
            addr: 4096,
            size: 4096,
            blocks: vec![
                block(4096, 1024, BlockState::Allocated, Some(1000), Some(7u8)),
                block(5120, 1024, BlockState::Pending, None, Some(9)),
                block(6144, 2048, BlockState::Free, None, None),
            ],
        }];
        let json = snapshot_json(3, &regions, u64::from);
        assert_eq!(
            json,
            "{\"device\": 3, \"segments\": [{\"device\": 3, \"address\": 4096, \
             \"total_size\": 4096, \"stream\": 0, \"segment_type\": \"large\", \
             \"segment_pool_id\": [0, 0], \"allocated_size\": 1024, \"active_size\": 2048, \
             \"requested_size\": 2024, \"frames\": [], \"blocks\": [\
             {\"address\": 4096, \"size\": 1024, \"requested_size\": 1000, \
             \"state\": \"active_allocated\", \"stream\": 7, \"frames\": []}, \
             {\"address\": 5120, \"size\": 1024, \"requested_size\": 1024, \
             \"state\": \"active_pending_free\", \"stream\": 9, \"frames\": []}, \
             {\"address\": 6144, \"size\": 2048, \"requested_size\": 0, \
             \"state\": \"inactive\", \"stream\": null, \"frames\": []}]}]}"
        );
        assert_eq!(
            snapshot_json::<u8>(0, &[], u64::from),
            "{\"device\": 0, \"segments\": []}"
        );
    }
}
