//! Each rule of PyTorch's caching allocator pinned by a test, run on the fake driver. The
//! comments cite the function of `c10/cuda/CUDACachingAllocator.cpp` (commit
//! 001074d25084fdb87a799823e395a50f5ec044d3) each test follows.

use super::*;
use crate::fake::{Call, FakeConfig, FakeDriver, FakeStream};
use crate::{code, DevicePtr, Driver};

const MIB: usize = 1 << 20;

fn fake(total_mib: usize) -> FakeDriver {
    FakeDriver::new(FakeConfig {
        total_memory: total_mib * MIB,
        ..FakeConfig::default()
    })
    .unwrap()
}

fn model(driver: &FakeDriver, config: TorchConfig) -> TorchAllocator<&FakeDriver> {
    TorchAllocator::new(driver, config).unwrap()
}

fn limited(max_split_mib: usize) -> TorchConfig {
    TorchConfig {
        max_split_size: max_split_mib * MIB,
        ..TorchConfig::default()
    }
}

/// Allocates and checks the invariants.
fn alloc(m: &mut TorchAllocator<&FakeDriver>, size: usize, stream: FakeStream) -> DevicePtr {
    let p = m
        .malloc(size, stream)
        .unwrap_or_else(|e| panic!("malloc({size}): {e}"))
        .expect("non-zero size");
    m.check().unwrap();
    p
}

fn free(m: &mut TorchAllocator<&FakeDriver>, p: DevicePtr) {
    m.free(p).unwrap();
    m.check().unwrap();
}

fn off(p: DevicePtr, base: DevicePtr) -> usize {
    (p.0 - base.0) as usize
}

/// The block layout of segment `i`: (offset in the segment, size, allocated).
fn layout(m: &TorchAllocator<&FakeDriver>, i: usize) -> Vec<(usize, usize, bool)> {
    let s = &m.segments()[i];
    s.blocks
        .iter()
        .map(|b| (off(b.ptr, s.ptr), b.size, b.allocated))
        .collect()
}

/// `round_size`: every size becomes a multiple of `kMinBlockSize` (512), at least 512; the
/// small pool packs such blocks back to back in one `kSmallBuffer` segment.
#[test]
fn sizes_round_to_512_bytes() {
    let d = fake(64);
    let mut m = model(&d, TorchConfig::default());
    let s = d.default_stream();
    let a = alloc(&mut m, 1, s);
    let b = alloc(&mut m, 513, s);
    let c = alloc(&mut m, 8, s);
    assert_eq!(off(b, a), 512);
    assert_eq!(off(c, a), 512 + 1024);
    assert_eq!(m.stats().allocated_bytes.current, 512 + 1024 + 512);
    assert_eq!(m.stats().requested_bytes.current, 1 + 513 + 8);
    assert_eq!(
        layout(&m, 0),
        vec![
            (0, 512, true),
            (512, 1024, true),
            (1536, 512, true),
            (2048, 2 * MIB - 2048, false)
        ]
    );
}

/// `get_pool` (`size <= kSmallSize` is small) and `get_allocation_size` (`kSmallBuffer` for
/// small requests): 1 MiB requests are small and two of them fill one 2 MiB segment.
#[test]
fn small_requests_are_packed_in_2_mib_segments() {
    let d = fake(64);
    let mut m = model(&d, TorchConfig::default());
    let s = d.default_stream();
    let a = alloc(&mut m, MIB, s);
    let b = alloc(&mut m, MIB, s);
    let c = alloc(&mut m, MIB, s);
    assert_eq!(off(b, a), MIB, "the rest of the first segment");
    let segments = m.segments();
    assert_eq!(segments.len(), 2);
    assert!(segments
        .iter()
        .all(|g| g.size == 2 * MIB && g.pool == PoolKind::Small));
    assert_eq!(segments[1].ptr, c);
    assert_eq!(d.calls().get(Call::MemAlloc), 2);
    assert_eq!(m.stats().num_device_alloc, 2);
    assert_eq!(m.stats().reserved_bytes.current, 4 * MIB as u64);
}

/// `get_allocation_size`: over 1 MiB and under `kMinLargeAlloc` (10 MiB) a `kLargeBuffer`
/// (20 MiB) segment; from 10 MiB on, the request rounded up to `kRoundLarge` (2 MiB).
#[test]
fn large_segment_sizes() {
    let d = fake(256);
    let mut m = model(&d, TorchConfig::default());
    let s = d.default_stream();
    let a = alloc(&mut m, MIB + 1, s);
    let b = alloc(&mut m, 5 * MIB, s);
    assert_eq!(off(b, a), MIB + 512, "from the same 20 MiB segment");
    // On another stream (s's segment has 14 MiB left, which would serve these):
    let s2 = d.stream_create().unwrap();
    alloc(&mut m, 10 * MIB, s2);
    alloc(&mut m, 10 * MIB + 1, s2);
    let sizes: Vec<(usize, PoolKind)> = m.segments().iter().map(|g| (g.size, g.pool)).collect();
    assert_eq!(
        sizes,
        vec![
            (20 * MIB, PoolKind::Large),
            (10 * MIB, PoolKind::Large),
            (12 * MIB, PoolKind::Large)
        ]
    );
    // 12 MiB - (10 MiB + 512) leaves more than 1 MiB: split off as a free block.
    assert_eq!(
        layout(&m, 2),
        vec![
            (0, 10 * MIB + 512, true),
            (10 * MIB + 512, 2 * MIB - 512, false)
        ]
    );
}

/// `get_free_block` with `BlockComparatorSize`: the smallest free block of the stream and pool
/// that fits; among equal sizes, the lowest address.
#[test]
fn best_fit_then_lowest_address() {
    let d = fake(64);
    let mut m = model(&d, TorchConfig::default());
    let s = d.default_stream();
    // One 20 MiB segment: [a 2][x 2][b 3][y 2][c 2][rest 9], all in MiB.
    let a = alloc(&mut m, 2 * MIB, s);
    let _x = alloc(&mut m, 2 * MIB, s);
    let b = alloc(&mut m, 3 * MIB, s);
    let _y = alloc(&mut m, 2 * MIB, s);
    let c = alloc(&mut m, 2 * MIB, s);
    assert_eq!(m.segments().len(), 1);
    free(&mut m, c); // merges with the free rest: 11 MiB
    free(&mut m, b);
    free(&mut m, a);
    assert_eq!(
        alloc(&mut m, 2 * MIB, s),
        a,
        "2 MiB: a, not the larger b or rest"
    );
    let p = alloc(&mut m, 2 * MIB + MIB / 2, s);
    assert_eq!(p, b, "2.5 MiB: b (3 MiB) is the smallest that fits");
    // 0.5 MiB would remain in b: not more than kSmallSize, so b is handed out whole.
    assert_eq!(
        m.stats().allocated_bytes.current,
        (2 + 2 + 3 + 2) * MIB as u64
    );
}

/// `should_split` for the small pool: split when `remaining >= kMinBlockSize`.
#[test]
fn small_pool_splits_down_to_512_bytes() {
    let d = fake(64);
    let mut m = model(&d, TorchConfig::default());
    let s = d.default_stream();
    let a = alloc(&mut m, 2 * MIB - MIB, s); // 1 MiB: 1 MiB remains
    let b = alloc(&mut m, MIB - 512, s); // 512 bytes remain: split
    let c = alloc(&mut m, 512, s); // exactly the rest: nothing to split
    assert_eq!((off(b, a), off(c, a)), (MIB, 2 * MIB - 512));
    assert_eq!(
        layout(&m, 0),
        vec![
            (0, MIB, true),
            (MIB, MIB - 512, true),
            (2 * MIB - 512, 512, true)
        ]
    );
    free(&mut m, b);
    // A 1 MiB - 1024 request in the freed 1 MiB - 512 block leaves 512 bytes: split again.
    let d2 = alloc(&mut m, MIB - 1024, s);
    assert_eq!(d2, b);
    assert_eq!(layout(&m, 0)[2], (2 * MIB - 1024, 512, false));
}

/// `should_split` for the large pool: split only when `remaining > kSmallSize` (1 MiB).
#[test]
fn large_pool_splits_only_above_1_mib() {
    let d = fake(64);
    let mut m = model(&d, TorchConfig::default());
    let s = d.default_stream();
    let a = alloc(&mut m, 19 * MIB, s); // 20 MiB segment, exactly 1 MiB would remain
    assert_eq!(layout(&m, 0), vec![(0, 20 * MIB, true)]);
    assert_eq!(m.stats().allocated_bytes.current, 20 * MIB as u64);
    free(&mut m, a);
    let b = alloc(&mut m, 19 * MIB - 512, s); // 1 MiB + 512 remains: split
    assert_eq!(b, a);
    assert_eq!(
        layout(&m, 0),
        vec![
            (0, 19 * MIB - 512, true),
            (19 * MIB - 512, MIB + 512, false)
        ]
    );
}

/// `get_free_block`'s oversize rules and `should_split`'s `size < max_split_size`: with
/// `max_split_size` 40 MiB, a request under it never takes a cached block of 40 MiB or more,
/// an oversize request takes one only if it is less than `kLargeBuffer` (20 MiB) larger, and
/// oversize blocks are handed out whole.
#[test]
fn max_split_size_and_oversize_blocks() {
    let d = fake(1024);
    let mut m = model(&d, limited(40));
    let s = d.default_stream();
    let big = alloc(&mut m, 60 * MIB, s);
    free(&mut m, big);
    let small = alloc(&mut m, 30 * MIB, s);
    assert_ne!(
        small, big,
        "30 MiB < max_split_size may not use the 60 MiB oversize block"
    );
    assert_eq!(m.segments().len(), 2);
    free(&mut m, small);
    let p = alloc(&mut m, 41 * MIB, s);
    assert_eq!(p, big, "60 < 41 + 20: close enough");
    assert_eq!(
        m.stats().allocated_bytes.current,
        60 * MIB as u64,
        "handed out whole, not split"
    );
    free(&mut m, p);
    let q = alloc(&mut m, 40 * MIB, s);
    assert_ne!(q, big, "60 >= 40 + 20: too large to round up to");
    assert_eq!(m.segments().len(), 3);
    // Unlimited (the default): the 60 MiB block would serve 30 MiB, split.
    let d2 = fake(1024);
    let mut m2 = model(&d2, TorchConfig::default());
    let big2 = alloc(&mut m2, 60 * MIB, s);
    free(&mut m2, big2);
    assert_eq!(alloc(&mut m2, 30 * MIB, s), big2);
    assert_eq!(
        layout(&m2, 0),
        vec![(0, 30 * MIB, true), (30 * MIB, 30 * MIB, false)]
    );
}

/// `get_free_block` (`(*it)->stream != p.stream()` ends the search) and
/// `BlockComparatorSize` (stream first): a stream never reuses another stream's blocks, and
/// gets its own segments.
#[test]
fn streams_keep_their_own_segments() {
    let d = fake(64);
    let mut m = model(&d, TorchConfig::default());
    let (s1, s2) = (d.stream_create().unwrap(), d.stream_create().unwrap());
    assert!(s1 < s2);
    // Both ways round: the search starts at the stream's first key, so it could run into the
    // next stream's blocks, and into none of the previous stream's.
    let a = alloc(&mut m, 4096, s2);
    free(&mut m, a);
    let b = alloc(&mut m, 4096, s1);
    assert_ne!(b, a, "s1 may not use s2's cached block");
    free(&mut m, b);
    let c = alloc(&mut m, 8192, s2);
    assert_eq!(c, a, "s2's own cached block, not s1's");
    let segments = m.segments();
    assert_eq!(segments.len(), 2);
    assert_eq!((segments[0].stream, segments[1].stream), (s2, s1));
    assert_eq!(alloc(&mut m, 4096, s1), b, "s1's cached block");
    assert_eq!(d.calls().get(Call::MemAlloc), 2);
}

/// `free_block` and `try_merge_blocks`: a freed block absorbs its free neighbours in the
/// segment, both sides.
#[test]
fn freed_blocks_merge_with_free_neighbours() {
    let d = fake(64);
    let mut m = model(&d, TorchConfig::default());
    let s = d.default_stream();
    let quarter = MIB / 2;
    let a = alloc(&mut m, quarter, s);
    let b = alloc(&mut m, quarter, s);
    let c = alloc(&mut m, quarter, s);
    free(&mut m, a);
    free(&mut m, c);
    assert_eq!(
        layout(&m, 0),
        vec![
            (0, quarter, false),
            (quarter, quarter, true),
            (MIB, MIB, false)
        ]
    );
    free(&mut m, b);
    assert_eq!(layout(&m, 0), vec![(0, 2 * MIB, false)]);
    assert_eq!(m.stats().active_bytes.current, 0);
}

/// `malloc`: when `alloc_block` fails, `release_cached_blocks` (after
/// `synchronize_and_free_events`) frees every unsplit cached segment and `alloc_block` is
/// retried once (`isRetry`, `num_alloc_retries`); when that fails too, the allocation fails
/// (`num_ooms`) and segments with blocks in use are kept.
#[test]
fn out_of_memory_releases_the_cache_and_retries_once() {
    let d = fake(64);
    let mut m = model(&d, TorchConfig::default());
    let (s1, s2) = (d.stream_create().unwrap(), d.stream_create().unwrap());
    let cached = alloc(&mut m, 40 * MIB, s1);
    free(&mut m, cached);
    let kept = alloc(&mut m, 4096, s1); // a split small segment, in use
                                        // s2 cannot use s1's cached 40 MiB; 40 + 2 + 30 > 64, so the first cudaMalloc fails.
    let p = alloc(&mut m, 30 * MIB, s2);
    let st = m.stats();
    assert_eq!((st.num_alloc_retries, st.num_sync_all_streams), (1, 1));
    assert_eq!((st.num_device_alloc, st.num_device_free), (3, 1));
    assert_eq!(st.reserved_bytes.current, (2 + 30) * MIB as u64);
    assert_eq!(st.reserved_bytes.peak, (40 + 2) * MIB as u64);
    let calls = d.calls();
    assert_eq!(
        (calls.get(Call::MemAlloc), calls.get(Call::MemFree)),
        (4, 1)
    );

    let err = m.malloc(40 * MIB, s2).unwrap_err();
    assert!(
        matches!(
            err,
            TorchError::OutOfMemory {
                size,
                alloc_size,
                device_free: Some(_),
                ..
            } if size == 40 * MIB && alloc_size == 40 * MIB
        ),
        "{err}"
    );
    assert_eq!(m.stats().num_ooms, 1);
    assert_eq!(m.stats().num_alloc_retries, 2);
    m.check().unwrap();
    assert_eq!(m.segments().len(), 2, "the segments in use stay");
    free(&mut m, p);
    free(&mut m, kept);
}

/// `release_available_cached_blocks` (only with `max_split_size` set): before the full
/// release, free the smallest cached block of the stream at least as large as the request,
/// or else oversize blocks from the largest down until as many bytes are freed; no retry is
/// counted.
#[test]
fn release_available_cached_blocks_comes_first() {
    let d = fake(100);
    let mut m = model(&d, limited(20));
    let s = d.default_stream();
    let a = alloc(&mut m, 30 * MIB, s);
    let b = alloc(&mut m, 60 * MIB, s);
    free(&mut m, a);
    free(&mut m, b);
    // 40 MiB: the 60 MiB block is 20 MiB too large (get_free_block); cudaMalloc(40) fails
    // (90 + 40 > 100); the smallest cached block >= 40 (the 60) is released and it succeeds.
    let p = alloc(&mut m, 40 * MIB, s);
    let st = m.stats();
    assert_eq!(
        (
            st.num_device_free,
            st.num_alloc_retries,
            st.num_sync_all_streams
        ),
        (1, 0, 0)
    );
    let sizes: Vec<usize> = m.segments().iter().map(|g| g.size).collect();
    assert!(
        sizes.contains(&(30 * MIB)) && sizes.contains(&(40 * MIB)),
        "{sizes:?}"
    );
    free(&mut m, p);

    // No single cached block >= 65 MiB: release the 40, then the 30, largest first.
    let q = alloc(&mut m, 65 * MIB, s);
    let st = m.stats();
    assert_eq!((st.num_device_free, st.num_alloc_retries), (3, 0));
    assert_eq!(m.segments().len(), 1);
    free(&mut m, q);

    // Unlimited max_split_size: this step does nothing, the full release does it.
    let d2 = fake(100);
    let mut m2 = model(&d2, TorchConfig::default());
    let big = alloc(&mut m2, 60 * MIB, s);
    let other = d2.stream_create().unwrap();
    free(&mut m2, big);
    alloc(&mut m2, 60 * MIB, other);
    assert_eq!(m2.stats().num_alloc_retries, 1);
}

/// `recordStream`, `insert_events` and `process_events`: a block used on another stream is
/// reusable only once the event recorded on that stream at the free has completed; its own
/// stream is ignored.
#[test]
fn blocks_used_on_other_streams_wait_for_their_events() {
    let d = fake(64);
    let mut m = model(&d, TorchConfig::default());
    let (s1, s2) = (d.stream_create().unwrap(), d.stream_create().unwrap());
    let a = alloc(&mut m, 512, s1);
    // SAFETY: s1 and s2 stay live for the whole test.
    unsafe {
        m.record_stream(a, s1).unwrap(); // its own stream: ignored
        m.record_stream(a, s2).unwrap();
    }
    free(&mut m, a);
    assert_eq!(d.calls().get(Call::EventRecord), 1);
    assert_eq!(d.pending_events(), 1);
    assert_eq!(m.stats().active_bytes.current, 512, "waiting is active");
    let b = alloc(&mut m, 512, s1);
    assert_ne!(b, a, "a waits for s2");
    d.complete_stream(s2).unwrap();
    let c = alloc(&mut m, 512, s1);
    assert_eq!(
        c, a,
        "the event completed: a is free again and the best fit"
    );
    assert_eq!(m.stats().active_bytes.current, 1024);

    // The pooled event is reused; empty_cache waits for what is still pending.
    // SAFETY: as above.
    unsafe { m.record_stream(c, s2).unwrap() };
    free(&mut m, c);
    free(&mut m, b);
    assert_eq!(d.calls().get(Call::EventCreate), 1, "one event, pooled");
    m.empty_cache().unwrap();
    m.check().unwrap();
    assert_eq!(d.calls().get(Call::EventSynchronize), 1);
    assert_eq!(m.stats().num_sync_all_streams, 1);
    assert!(m.segments().is_empty());
    assert_eq!(d.outstanding().allocations, 0);
}

/// `emptyCache` is `release_cached_blocks`, whose `release_blocks` frees only segments that
/// are one free block ("Frees all non-split blocks").
#[test]
fn empty_cache_releases_only_wholly_free_segments() {
    let d = fake(64);
    let mut m = model(&d, TorchConfig::default());
    let s = d.default_stream();
    let a = alloc(&mut m, 4 * MIB, s);
    let _b = alloc(&mut m, 4 * MIB, s);
    let c = alloc(&mut m, 12 * MIB, s);
    free(&mut m, a);
    free(&mut m, c);
    m.empty_cache().unwrap();
    m.check().unwrap();
    let sizes: Vec<usize> = m.segments().iter().map(|g| g.size).collect();
    assert_eq!(
        sizes,
        vec![20 * MIB],
        "the 12 MiB segment went; the one holding b stays"
    );
    assert_eq!(m.stats().reserved_bytes.current, 20 * MIB as u64);
    assert_eq!(d.outstanding().device_bytes, 20 * MIB);
}

/// Failure is a value: zero sizes (`allocate` returns null), sizes of 1 EB or more
/// (`allocate`'s `one_exa_bytes` check), foreign and double frees (`free`: "invalid device
/// pointer"), driver errors other than out-of-memory (`alloc_block`: `C10_CUDA_CHECK`), and
/// configurations PyTorch refuses.
#[test]
fn errors_are_values() {
    let d = fake(64);
    let mut m = model(&d, TorchConfig::default());
    let s = d.default_stream();
    assert_eq!(m.malloc(0, s), Ok(None));
    assert!(matches!(
        m.malloc(ONE_EXA_BYTES, s),
        Err(TorchError::OutOfMemory { .. })
    ));
    assert_eq!(m.stats().num_ooms, 0, "refused before the allocator proper");
    let a = alloc(&mut m, 100, s);
    let inside = DevicePtr(a.0 + 512);
    assert_eq!(m.free(inside), Err(TorchError::InvalidPointer(inside)));
    free(&mut m, a);
    assert_eq!(m.free(a), Err(TorchError::InvalidPointer(a)));
    assert_eq!(m.free(DevicePtr(0)), Ok(()), "null is ignored");
    assert_eq!(
        // SAFETY: the stream is live; the pointer is refused anyway.
        unsafe { m.record_stream(a, s) },
        Err(TorchError::InvalidPointer(a))
    );
    d.fail_nth(Call::MemAlloc, 1, code::UNKNOWN);
    let err = m.malloc(30 * MIB, s).unwrap_err();
    assert_eq!(
        err,
        TorchError::Driver(crate::DriverError::cuda("cuMemAlloc", code::UNKNOWN))
    );
    m.check().unwrap();
    assert!(matches!(
        TorchAllocator::new(&d, limited(10)),
        Err(TorchError::Config(ConfigError::MaxSplitSizeTooSmall(_)))
    ));
}

/// Dropping the model gives back every segment with nothing in use, and its events.
#[test]
fn drop_gives_back_what_it_can() {
    let d = fake(64);
    let s = d.stream_create().unwrap();
    let kept;
    {
        let mut m = model(&d, TorchConfig::default());
        let a = alloc(&mut m, 30 * MIB, s);
        kept = alloc(&mut m, 4096, s);
        // SAFETY: the default stream is always live.
        unsafe { m.record_stream(a, d.default_stream()).unwrap() };
        free(&mut m, a);
        assert_eq!(d.outstanding().events, 1);
    }
    let left = d.outstanding();
    assert_eq!((left.allocations, left.events), (1, 0), "{left:?}");
    assert!(d.is_device_address(kept));
}

/// Peaks follow `increase_stat`; `resetPeakStats` sets them back to the current values.
#[test]
fn statistics_and_peaks() {
    let d = fake(64);
    let mut m = model(&d, TorchConfig::default());
    let s = d.default_stream();
    let a = alloc(&mut m, 3 * MIB, s);
    let b = alloc(&mut m, 5 * MIB, s);
    free(&mut m, a);
    let st = m.stats();
    assert_eq!(
        st.allocated_bytes,
        Stat {
            current: 5 * MIB as u64,
            peak: 8 * MIB as u64
        }
    );
    assert_eq!(
        st.reserved_bytes,
        Stat {
            current: 20 * MIB as u64,
            peak: 20 * MIB as u64
        }
    );
    assert_eq!(
        st.allocations,
        Stat {
            current: 1,
            peak: 2
        }
    );
    assert_eq!(
        st.segments,
        Stat {
            current: 1,
            peak: 1
        }
    );
    m.reset_peak_stats();
    assert_eq!(m.stats().allocated_bytes.peak, 5 * MIB as u64);
    free(&mut m, b);
    assert_eq!(
        m.stats().allocated_bytes,
        Stat {
            current: 0,
            peak: 5 * MIB as u64
        }
    );
}
