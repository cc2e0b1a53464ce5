//! The device pool on the fake driver: stream-ordered reuse (same stream at once, another
//! stream by a device-side wait or once the event completed, `record_stream`, one event per
//! batch, splits and merges of pending blocks), virtual-memory growth and trimming, plain
//! device regions, the out-of-memory path (the one host wait, made without the shared pool's
//! lock), forgotten streams, graph captures, and a randomised run on three streams that
//! checks, after every step, the pool's invariants, that no two live blocks overlap, that
//! every block lies in accessible device memory, and that no stream ever gets memory unless
//! its later work is ordered after every earlier use of it (the fake's `ordered_after`).
//! Device memory is the fake's `PROT_NONE` space: any CPU access to it would crash the test.

use tagalloc::{Error, Growth, Policy};
use tagalloc_cuda::fake::{
    Call, CallCounts, FakeConfig, FakeDriver, FakePoint, FakeStream, Outstanding,
};
use tagalloc_cuda::{DeviceBlock, DeviceConfig, DeviceError, DevicePool, Driver, Regions};

const MIB: usize = 1 << 20;

fn fake(total: usize) -> FakeDriver {
    FakeDriver::new(FakeConfig {
        total_memory: total,
        ..FakeConfig::default()
    })
    .unwrap()
}

/// Plain regions of exactly `region` bytes, at most `limit` bytes in all, fences every
/// `batch` frees.
fn plain(region: usize, limit: Option<usize>, batch: usize) -> DeviceConfig {
    let mut policy = Policy::new().growth(Growth::Fixed(region));
    if let Some(l) = limit {
        policy = policy.limit(l);
    }
    DeviceConfig {
        regions: Regions::Plain { round: 2 * MIB },
        policy,
        batch,
        ..DeviceConfig::PLAIN
    }
}

fn vmm(chunk: usize) -> DeviceConfig {
    DeviceConfig {
        regions: Regions::Vmm { chunk, reserve: 0 },
        policy: Policy::new()
            .growth(Growth::Fixed(chunk))
            .release_above(chunk),
        ..DeviceConfig::VMM
    }
}

fn streams(gpu: &FakeDriver, n: usize) -> Vec<FakeStream> {
    (0..n).map(|_| gpu.stream_create().unwrap()).collect()
}

fn destroy(gpu: &FakeDriver, streams: Vec<FakeStream>) {
    for s in streams {
        // SAFETY: the test created the stream and uses it no more.
        unsafe { gpu.stream_destroy(s).unwrap() };
    }
}

fn calls(gpu: &FakeDriver, before: &CallCounts, call: Call) -> u64 {
    gpu.calls().since(before).get(call)
}

/// Every block lies in the fake device's address space, mapped and accessible.
fn assert_device_memory(gpu: &FakeDriver, blocks: &[DeviceBlock<FakeStream>]) {
    for b in blocks {
        assert!(gpu.is_device_address(b.ptr()), "{b:?}");
        assert!(gpu.is_accessible(b.ptr(), b.size()), "{b:?}");
    }
}

#[test]
fn one_stream_frees_to_the_heap_with_no_driver_call() {
    let gpu = fake(1 << 30);
    let s = gpu.stream_create().unwrap();
    let mut pool = DevicePool::new(&gpu, plain(64 * MIB, None, 64)).unwrap();
    let first = pool.alloc(MIB, s).unwrap();
    assert_device_memory(&gpu, &[first]);
    pool.free(first).unwrap();
    let before = gpu.calls();
    for _ in 0..100 {
        let b = pool.alloc(MIB, s).unwrap();
        assert_eq!(b.ptr(), first.ptr(), "the same stream reuses at once");
        pool.free(b).unwrap();
    }
    assert_eq!(gpu.calls().since(&before).total(), 0, "no driver call");
    assert!(!pool.stats().multi_stream);
    assert_eq!(pool.stats().pool.heap.live, 0);
    pool.check().unwrap();
    assert_eq!(
        pool.free(first),
        Err(DeviceError::Block(Error::DoubleFree)),
        "a stale copy is refused"
    );
    drop(pool);
    destroy(&gpu, vec![s]);
    assert_eq!(gpu.outstanding(), Outstanding::default());
}

#[test]
fn same_stream_reuses_a_pending_block_at_once() {
    let gpu = fake(1 << 30);
    let st = streams(&gpu, 2);
    let (s, t) = (st[0], st[1]);
    let mut pool = DevicePool::new(&gpu, plain(64 * MIB, None, 64)).unwrap();
    let x = pool.alloc(256, t).unwrap();
    let before = gpu.calls();
    let a = pool.alloc(3 * MIB, s).unwrap();
    // The switch: an event on T (the epoch), S waits for it on the device; the host never.
    assert_eq!(calls(&gpu, &before, Call::EventRecord), 1, "the epoch");
    assert_eq!(calls(&gpu, &before, Call::StreamWaitEvent), 1);
    assert_eq!(gpu.calls().since(&before).synchronizations(), 0);
    pool.free(a).unwrap();
    assert_eq!(pool.stats().pending_blocks, 1);
    let before = gpu.calls();
    // Slightly smaller still fits closely: S takes it back, no event, no sync.
    let b = pool.alloc(3 * MIB - 1000, s).unwrap();
    assert_eq!(b.ptr(), a.ptr());
    assert_eq!(gpu.calls().since(&before).total(), 0, "no driver call");
    assert_eq!(pool.stats().counters.reused_pending, 1);
    pool.check().unwrap();
    // The old copy of the block is stale now.
    assert_eq!(pool.free(a), Err(DeviceError::Block(Error::DoubleFree)));
    pool.free(b).unwrap();
    assert_eq!(pool.free(b), Err(DeviceError::Block(Error::DoubleFree)));
    pool.free(x).unwrap();
    pool.check().unwrap();
    drop(pool);
    destroy(&gpu, st);
    assert_eq!(gpu.outstanding(), Outstanding::default());
}

#[test]
fn another_stream_takes_a_pending_block_by_a_device_side_wait() {
    let gpu = fake(1 << 30);
    let st = streams(&gpu, 2);
    let (s, t) = (st[0], st[1]);
    // Fence at every free, so the event exists at once.
    let mut pool = DevicePool::new(&gpu, plain(4 * MIB, None, 1)).unwrap();
    let a = pool.alloc(4 * MIB, s).unwrap();
    let t0 = pool.alloc(256, t).unwrap(); // a second region: T is in use
    let used = gpu.launch(s, 0).unwrap(); // S's kernel on the block
    let before = gpu.calls();
    pool.free(a).unwrap();
    assert_eq!(calls(&gpu, &before, Call::EventRecord), 1);
    pool.check().unwrap();

    // Before the event completes, T takes the block: T waits for S's batch on the device.
    assert!(!gpu.ordered_after(t, used));
    let b = pool.alloc(4 * MIB, t).unwrap();
    assert_eq!(
        b.ptr(),
        a.ptr(),
        "taken across streams, the pool did not grow"
    );
    assert_eq!(pool.stats().pool.reserved, 8 * MIB);
    assert_eq!(calls(&gpu, &before, Call::StreamWaitEvent), 1);
    assert!(
        gpu.ordered_after(t, used),
        "T's later work runs after S's use"
    );
    assert_eq!(gpu.calls().since(&before).synchronizations(), 0);
    assert_eq!(pool.stats().counters.reused_across, 1);
    pool.check().unwrap();

    // Once the device has passed a free and a poll has seen it (a miss polls at most every
    // few calls; the periodic poll, or `process_events`, at any time), the block comes back
    // with no wait at all.
    pool.free(b).unwrap(); // pending on T now
    gpu.complete_all();
    pool.process_events().unwrap();
    let before = gpu.calls();
    let c = pool.alloc(4 * MIB, s).unwrap();
    assert_eq!(c.ptr(), a.ptr(), "reused after the event completed");
    assert_eq!(calls(&gpu, &before, Call::StreamWaitEvent), 0);
    assert_eq!(pool.stats().pending_blocks, 0);
    assert_eq!(gpu.calls().since(&before).synchronizations(), 0);
    pool.check().unwrap();
    for b in [t0, c] {
        pool.free(b).unwrap();
    }
    drop(pool);
    destroy(&gpu, st);
    assert_eq!(gpu.outstanding(), Outstanding::default());
}

#[test]
fn a_split_leaves_the_rest_pending_and_a_stream_never_waits_twice_for_one_batch() {
    let gpu = fake(1 << 30);
    let st = streams(&gpu, 3);
    let (s, t, u) = (st[0], st[1], st[2]);
    let mut pool = DevicePool::new(&gpu, plain(64 * MIB, None, 64)).unwrap();
    let big = pool.alloc(8 * MIB, s).unwrap();
    let t0 = pool.alloc(56 * MIB, t).unwrap(); // the rest of the region
    let used = gpu.launch(s, 0).unwrap();
    pool.free(big).unwrap(); // pending on S, in its open batch
    let before = gpu.calls();
    let a = pool.alloc(2 * MIB, t).unwrap();
    assert_eq!(a.ptr(), big.ptr(), "the head of S's block");
    assert_eq!(
        calls(&gpu, &before, Call::EventRecord),
        1,
        "S's open batch fenced"
    );
    assert_eq!(calls(&gpu, &before, Call::StreamWaitEvent), 1);
    assert!(gpu.ordered_after(t, used));
    let st_ = pool.stats();
    assert_eq!(
        (st_.pending_blocks, st_.pending_bytes),
        (1, 6 * MIB),
        "the rest waits"
    );
    pool.check().unwrap();
    // T takes more of the rest: it waited for that batch already.
    let b = pool.alloc(2 * MIB, t).unwrap();
    assert_eq!(b.ptr().0, big.ptr().0 + 2 * MIB as u64);
    assert_eq!(
        calls(&gpu, &before, Call::StreamWaitEvent),
        1,
        "no second wait"
    );
    // U has not: it waits, once.
    let c = pool.alloc(2 * MIB, u).unwrap();
    assert_eq!(c.ptr().0, big.ptr().0 + 4 * MIB as u64);
    assert!(gpu.ordered_after(u, used));
    // One wait, for S's batch (recorded after the epoch on S, so U needs no other).
    assert_eq!(calls(&gpu, &before, Call::StreamWaitEvent), 2);
    assert_eq!(gpu.calls().since(&before).synchronizations(), 0);
    pool.check().unwrap();
    // The rest of the rest goes back to the heap when S's batch completes.
    gpu.complete_stream(s).unwrap();
    pool.process_events().unwrap();
    assert_eq!(pool.stats().pending_bytes, 0);
    pool.check().unwrap();
    for x in [t0, a, b, c] {
        pool.free(x).unwrap();
    }
    pool.check().unwrap();
    drop(pool);
    destroy(&gpu, st);
    assert_eq!(gpu.outstanding(), Outstanding::default());
}

#[test]
fn record_stream_makes_a_free_wait_for_every_stream_that_used_it() {
    let gpu = fake(1 << 30);
    let st = streams(&gpu, 3);
    let (s, t, u) = (st[0], st[1], st[2]);
    let mut pool = DevicePool::new(&gpu, plain(2 * MIB, None, 1)).unwrap();
    let a = pool.alloc(2 * MIB, s).unwrap();
    pool.record_stream(&a, t).unwrap();
    assert!(pool.stats().multi_stream, "a second stream in use");
    let before = gpu.calls();
    pool.free(a).unwrap();
    assert_eq!(
        calls(&gpu, &before, Call::EventRecord),
        2,
        "an event on S and on T"
    );
    // S's work done, T's not: still pending.
    gpu.complete_stream(s).unwrap();
    assert_eq!(pool.process_events().unwrap(), 0);
    // S takes it back only by waiting for T on the device (not for itself).
    let t_use = gpu.point(t).unwrap();
    let before = gpu.calls();
    let b = pool.alloc(2 * MIB, s).unwrap();
    assert_eq!(b.ptr(), a.ptr());
    assert_eq!(calls(&gpu, &before, Call::StreamWaitEvent), 1);
    assert!(gpu.ordered_after(s, t_use));
    pool.check().unwrap();
    pool.free(b).unwrap();
    // Both done: back in the heap, for any stream, with no wait.
    gpu.complete_all();
    pool.process_events().unwrap();
    assert_eq!(pool.stats().pending_blocks, 0);
    let d = pool.alloc(2 * MIB, u).unwrap();
    assert_eq!(d.ptr(), a.ptr());
    pool.check().unwrap();
    // Refused: a block freed already.
    let e = pool.record_stream(&a, u);
    assert_eq!(e, Err(DeviceError::Block(Error::DoubleFree)));
    pool.free(d).unwrap();
    drop(pool);
    destroy(&gpu, st);
    assert_eq!(gpu.outstanding(), Outstanding::default());
}

#[test]
fn one_event_per_batch_of_frees_not_per_free() {
    let gpu = fake(1 << 30);
    let st = streams(&gpu, 2);
    let (s, t) = (st[0], st[1]);
    let mut pool = DevicePool::new(&gpu, plain(64 * MIB, None, 8)).unwrap();
    let t0 = pool.alloc(256, t).unwrap();
    let blocks: Vec<_> = (0..37).map(|_| pool.alloc(4096, s).unwrap()).collect();
    let before = gpu.calls();
    for b in blocks {
        pool.free(b).unwrap();
    }
    // 37 frees: four full batches of 8 fenced; 5 still open.
    assert_eq!(calls(&gpu, &before, Call::EventRecord), 4);
    assert_eq!(
        calls(&gpu, &before, Call::EventCreate),
        4,
        "events are pooled"
    );
    assert!(calls(&gpu, &before, Call::EventQuery) <= 4);
    assert_eq!(gpu.calls().since(&before).synchronizations(), 0);
    pool.check().unwrap();
    // Adjacent pending blocks merged as they were freed: one block, waiting for the latest
    // batch it joined (S's open one; S's earlier batches complete before it).
    assert_eq!(pool.stats().pending_blocks, 1);
    assert_eq!(pool.stats().pending_bytes, 37 * 4096);
    // Once the device is done, one pass fences the open batch (its event recorded now) and
    // the next, once that has completed, returns the block.
    gpu.complete_all();
    assert_eq!(pool.process_events().unwrap(), 0);
    assert_eq!(calls(&gpu, &before, Call::EventRecord), 5);
    gpu.complete_all();
    assert_eq!(pool.process_events().unwrap(), 1);
    assert!(
        calls(&gpu, &before, Call::EventCreate) <= 5,
        "completed events are recorded again"
    );
    pool.check().unwrap();
    pool.free(t0).unwrap();
    drop(pool);
    destroy(&gpu, st);
    assert_eq!(gpu.outstanding(), Outstanding::default());
}

#[test]
fn vmm_growth_stays_one_region_and_trim_unmaps_its_free_tail() {
    let gpu = fake(1 << 30);
    let s = gpu.stream_create().unwrap();
    let chunk = 4 * MIB;
    let mut pool = DevicePool::new(&gpu, vmm(chunk)).unwrap();
    let mut blocks = Vec::new();
    for i in 0..40 {
        blocks.push(pool.alloc(MIB + i * 1000, s).unwrap());
        pool.check().unwrap();
    }
    assert_device_memory(&gpu, &blocks);
    let st = pool.stats().pool;
    assert_eq!(st.heap.regions, 1, "one region however much it grew");
    assert_eq!(st.regions_obtained, 1);
    assert!(st.grown >= 9, "{st:?}");
    let out = gpu.outstanding();
    assert_eq!(out.reservations, 1);
    assert_eq!(out.mappings, st.reserved / chunk);
    assert_eq!(out.physical, st.reserved / chunk);
    assert_eq!(out.allocations, 0, "no plain allocation");

    // Free the last half: trimming unmaps the free tail chunks and keeps the rest mapped.
    for b in blocks.drain(20..) {
        pool.free(b).unwrap();
    }
    let reserved = pool.stats().pool.reserved;
    let before = gpu.calls();
    let t = pool.trim().unwrap();
    assert!(t.bytes >= 4 * chunk, "{t:?}");
    assert_eq!(t.regions, 0, "the region stays");
    let after = pool.stats().pool;
    assert_eq!(after.reserved, reserved - t.bytes);
    assert_eq!(gpu.outstanding().mappings, after.reserved / chunk);
    assert_eq!(
        calls(&gpu, &before, Call::MemUnmap),
        1,
        "one unmap for the tail"
    );
    assert_eq!(
        calls(&gpu, &before, Call::MemRelease) as usize,
        t.bytes / chunk
    );
    assert_eq!(
        calls(&gpu, &before, Call::CtxSynchronize),
        1,
        "unmap waits for the device"
    );
    assert_device_memory(&gpu, &blocks);
    pool.check().unwrap();

    // Growing again maps at the end of the same range: still one region.
    blocks.push(pool.alloc(30 * MIB, s).unwrap());
    assert_eq!(pool.stats().pool.heap.regions, 1);
    assert_device_memory(&gpu, &blocks);

    for b in blocks.drain(..) {
        pool.free(b).unwrap();
    }
    pool.trim().unwrap();
    let out = gpu.outstanding();
    assert_eq!((out.mappings, out.physical, out.device_bytes), (0, 0, 0));
    assert_eq!(
        out.reservations, 1,
        "the address range is kept for the next region"
    );
    drop(pool);
    destroy(&gpu, vec![s]);
    assert_eq!(gpu.outstanding(), Outstanding::default());
}

#[test]
fn plain_regions_are_device_allocations_given_back_on_trim() {
    let gpu = fake(1 << 30);
    let s = gpu.default_stream();
    let mut pool = DevicePool::new(&gpu, plain(8 * MIB, None, 64)).unwrap();
    let a = pool.alloc(5 * MIB, s).unwrap();
    let b = pool.alloc(5 * MIB, s).unwrap();
    let c = pool.alloc(20 * MIB, s).unwrap();
    assert_device_memory(&gpu, &[a, b, c]);
    assert_eq!(
        gpu.calls().get(Call::MemAlloc),
        3,
        "two 8 MiB regions and one 20 MiB"
    );
    assert_eq!(pool.stats().pool.heap.regions, 3);
    assert_eq!(gpu.outstanding().device_bytes, 36 * MIB);
    pool.free(c).unwrap();
    pool.free(a).unwrap();
    let t = pool.trim().unwrap();
    assert_eq!((t.regions, t.bytes), (2, 28 * MIB));
    assert_eq!(gpu.outstanding().allocations, 1);
    pool.free(b).unwrap();
    pool.trim().unwrap();
    assert_eq!(gpu.outstanding(), Outstanding::default());
    assert_eq!(gpu.calls().get(Call::MemFree), 3);
    pool.check().unwrap();
}

#[test]
fn large_requests_bypass_the_pool_and_go_back_when_freed() {
    let gpu = fake(1 << 30);
    let st = streams(&gpu, 2);
    for regions in [
        Regions::PLAIN,
        Regions::Vmm {
            chunk: 2 * MIB,
            reserve: 0,
        },
    ] {
        let config = DeviceConfig {
            regions,
            policy: Policy::new()
                .growth(Growth::Fixed(4 * MIB))
                .bypass_above(16 * MIB)
                .release_above(2 * MIB),
            ..DeviceConfig::PLAIN
        };
        let mut pool = DevicePool::new(&gpu, config).unwrap();
        let small = pool.alloc(MIB, st[0]).unwrap();
        let big = pool.alloc(40 * MIB, st[0]).unwrap();
        assert_device_memory(&gpu, &[small, big]);
        let s = pool.stats().pool;
        assert_eq!((s.bypassed, s.heap.regions), (1, 2), "{regions:?}");
        let held = gpu.outstanding().device_bytes;
        assert!(held >= 44 * MIB, "{held}");
        // One stream: the bypassed region goes back at its free.
        pool.free(big).unwrap();
        assert_eq!(pool.stats().pool.heap.regions, 1);
        assert_eq!(gpu.outstanding().device_bytes, held - 40 * MIB);
        // Several streams: it goes back once its event has completed.
        let big = pool.alloc(40 * MIB, st[1]).unwrap();
        pool.free(big).unwrap();
        assert_eq!(
            pool.stats().pool.heap.regions,
            2,
            "pending: its region stays"
        );
        gpu.complete_all();
        pool.process_events().unwrap();
        gpu.complete_all();
        pool.process_events().unwrap();
        assert_eq!(pool.stats().pool.heap.regions, 1, "{regions:?}");
        pool.check().unwrap();
        pool.free(small).unwrap();
        pool.trim().unwrap();
        drop(pool);
        let out = gpu.outstanding();
        assert_eq!((out.allocations, out.mappings, out.device_bytes), (0, 0, 0));
    }
    destroy(&gpu, st);
    assert_eq!(gpu.outstanding(), Outstanding::default());
}

#[test]
fn reserve_a_fraction_of_free_memory_up_front() {
    let gpu = fake(64 * MIB);
    gpu.set_external_usage(16 * MIB);
    let config = DeviceConfig {
        policy: vmm(2 * MIB)
            .policy
            .reserve(tagalloc::Reserve::Fraction(0.5)),
        ..vmm(2 * MIB)
    };
    let mut pool = DevicePool::new(&gpu, config).unwrap();
    pool.reserve_now().unwrap();
    assert_eq!(
        pool.stats().pool.reserved,
        24 * MIB,
        "half of the 48 MiB free"
    );
    let a = pool.alloc(20 * MIB, gpu.default_stream()).unwrap();
    assert_eq!(
        pool.stats().pool.reserved,
        24 * MIB,
        "served from the reservation"
    );
    pool.free(a).unwrap();
    drop(pool);
    assert_eq!(gpu.outstanding(), Outstanding::default());
}

#[test]
fn out_of_memory_reuses_completed_frees_waits_on_the_device_then_synchronises_then_reports() {
    // 8 MiB of device memory, 2 MiB regions: four regions at most.
    let gpu = fake(8 * MIB);
    let st = streams(&gpu, 2);
    let (s, t) = (st[0], st[1]);
    let mut pool = DevicePool::new(&gpu, plain(2 * MIB, None, 1)).unwrap();
    let mut on_s: Vec<_> = (0..2).map(|_| pool.alloc(2 * MIB, s).unwrap()).collect();
    let halves: Vec<_> = (0..2).map(|_| pool.alloc(MIB, s).unwrap()).collect();
    let t0 = pool.alloc(2 * MIB, t).unwrap();
    assert_eq!(gpu.outstanding().device_bytes, 8 * MIB);

    // 1. A free on S whose event has completed: T reuses it, no wait of any kind.
    pool.free(on_s.pop().unwrap()).unwrap();
    gpu.complete_stream(s).unwrap();
    pool.process_events().unwrap(); // the poll sees it
    let before = gpu.calls();
    let t1 = pool.alloc(2 * MIB, t).unwrap();
    assert_eq!(gpu.calls().since(&before).synchronizations(), 0);
    assert_eq!(calls(&gpu, &before, Call::StreamWaitEvent), 0);
    pool.check().unwrap();

    // 2. A free whose event has not completed: T waits for it on the device.
    pool.free(on_s.pop().unwrap()).unwrap();
    let before = gpu.calls();
    let t2 = pool.alloc(2 * MIB, t).unwrap();
    assert_eq!(calls(&gpu, &before, Call::StreamWaitEvent), 1);
    assert_eq!(gpu.calls().since(&before).synchronizations(), 0);
    pool.check().unwrap();

    // 3. A pending half next to a free half, neither large enough: T's request runs out, the
    //    pool synchronises (the one host wait), the halves merge in the heap, and it retries.
    let (h1, h2) = (halves[0], halves[1]);
    pool.free(h2).unwrap();
    gpu.complete_stream(s).unwrap();
    pool.process_events().unwrap();
    gpu.complete_stream(s).unwrap();
    pool.process_events().unwrap();
    assert_eq!(pool.stats().pending_blocks, 0, "h2 is free in the heap");
    pool.free(h1).unwrap();
    let before = gpu.calls();
    let t3 = pool.alloc(2 * MIB, t).unwrap();
    assert_eq!(calls(&gpu, &before, Call::CtxSynchronize), 1);
    assert_eq!(pool.stats().counters.exhaustion_retries, 1);
    assert_eq!(pool.stats().counters.synchronizations, 1);
    pool.check().unwrap();

    // 4. Nothing to reuse: the pool's error, with its figures and the driver's.
    let e = pool.alloc(2 * MIB, t).unwrap_err();
    match e {
        DeviceError::Pool { error, driver } => {
            assert_eq!(error.error, Error::OutOfMemory);
            assert_eq!(error.requested, 2 * MIB);
            assert_eq!(error.reserved, 8 * MIB);
            assert_eq!(error.in_use, 8 * MIB);
            let d = driver.expect("the driver's error");
            assert!(d.is_out_of_memory(), "{d}");
        }
        other => panic!("{other}"),
    }
    assert!(e.to_string().contains("CUDA_ERROR_OUT_OF_MEMORY"), "{e}");
    pool.check().unwrap();
    for b in [t0, t1, t2, t3] {
        pool.free(b).unwrap();
    }
    pool.trim().unwrap();
    assert_eq!(gpu.outstanding().device_bytes, 0);
    drop(pool);
    destroy(&gpu, st);
    assert_eq!(gpu.outstanding(), Outstanding::default());
}

#[test]
fn a_limit_is_reported_with_its_figures() {
    let gpu = fake(1 << 30);
    let mut pool = DevicePool::new(&gpu, plain(4 * MIB, Some(8 * MIB), 64)).unwrap();
    let s = gpu.default_stream();
    let _a = pool.alloc(6 * MIB, s).unwrap();
    match pool.alloc(4 * MIB, s) {
        Err(DeviceError::Pool { error, .. }) => {
            assert_eq!(error.error, Error::LimitExceeded);
            assert_eq!(error.limit, Some(8 * MIB));
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        pool.alloc(0, s),
        Err(DeviceError::Pool { error, .. }) if error.error == Error::ZeroSize
    ));
}

/// A small deterministic generator (xorshift64*), so that a failure replays.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A block freed on a stream, as the test saw it: the last use of it on each stream that used
/// it (the fake's point on that stream at the free). No stream may get any of its bytes
/// unless its later work runs after every one of them (the fake's `ordered_after`: same
/// stream, completed, or waited for on the device).
struct Freed {
    start: u64,
    end: u64,
    uses: Vec<FakePoint>,
}

fn random_run(config: DeviceConfig, total: usize, seed: u64, steps: usize) {
    let gpu = fake(total);
    let st = streams(&gpu, 3);
    let mut pool = DevicePool::new(&gpu, config).unwrap();
    let mut rng = Rng(seed);
    let mut live: Vec<(DeviceBlock<FakeStream>, Vec<FakeStream>)> = Vec::new();
    let mut freed: Vec<Freed> = Vec::new();
    let mut failures = 0;
    for step in 0..steps {
        match rng.below(100) {
            0..=49 => {
                let size = match rng.below(10) {
                    0 => 1 + rng.below(8 * MIB as u64) as usize,
                    1..=3 => 1 + rng.below(MIB as u64) as usize,
                    _ => 1 + rng.below(64 << 10) as usize,
                };
                let s = st[rng.below(3) as usize];
                match pool.alloc(size, s) {
                    Ok(b) => {
                        let (start, end) = (b.ptr().0, b.ptr().0 + size as u64);
                        assert_device_memory(&gpu, &[b]);
                        for (other, _) in &live {
                            let (os, oe) = (other.ptr().0, other.ptr().0 + other.size() as u64);
                            assert!(end <= os || oe <= start, "step {step}: overlap");
                        }
                        // Memory freed comes back only to a stream ordered after its uses.
                        for f in freed.iter().filter(|f| f.start < end && start < f.end) {
                            for &p in &f.uses {
                                assert!(
                                    gpu.ordered_after(s, p),
                                    "step {step}: handed to {s:?} before {p:?} was done with it"
                                );
                            }
                        }
                        gpu.launch(s, 0).unwrap(); // a kernel using the block
                        live.push((b, vec![s]));
                    }
                    Err(DeviceError::Pool { error, .. }) if error.is_exhaustion() => failures += 1,
                    Err(e) => panic!("step {step}: {e}"),
                }
            }
            50..=84 if !live.is_empty() => {
                let (b, used) = live.swap_remove(rng.below(live.len() as u64) as usize);
                freed.push(Freed {
                    start: b.ptr().0,
                    end: b.ptr().0 + b.size() as u64,
                    uses: used.iter().map(|&u| gpu.point(u).unwrap()).collect(),
                });
                pool.free(b).unwrap_or_else(|e| panic!("step {step}: {e}"));
            }
            85..=89 if !live.is_empty() => {
                let i = rng.below(live.len() as u64) as usize;
                let other = st[rng.below(3) as usize];
                let (b, used) = &mut live[i];
                pool.record_stream(b, other).unwrap();
                gpu.launch(other, 0).unwrap(); // the other stream's use
                if !used.contains(&other) {
                    used.push(other);
                }
            }
            90..=95 => gpu.complete_stream(st[rng.below(3) as usize]).unwrap(),
            96..=97 => {
                pool.process_events().unwrap();
            }
            _ => {
                pool.trim().unwrap();
            }
        }
        pool.check().unwrap_or_else(|e| panic!("step {step}: {e}"));
        // Forget freed ranges every stream is ordered after.
        freed.retain(|f| {
            !f.uses
                .iter()
                .all(|&p| st.iter().all(|&x| gpu.ordered_after(x, p)))
        });
    }
    assert!(failures < steps / 4, "{failures} failures");
    for (b, _) in live.drain(..) {
        pool.free(b).unwrap();
    }
    pool.trim().unwrap();
    pool.check().unwrap();
    let out = gpu.outstanding();
    assert_eq!((out.allocations, out.mappings, out.device_bytes), (0, 0, 0));
    drop(pool);
    destroy(&gpu, st);
    assert_eq!(gpu.outstanding(), Outstanding::default());
}

#[test]
fn random_three_streams_plain() {
    for seed in 1..=4 {
        random_run(plain(16 * MIB, None, 4), 256 * MIB, seed, 1500);
    }
}

#[test]
fn random_three_streams_vmm() {
    for seed in 11..=14 {
        random_run(vmm(2 * MIB), 256 * MIB, seed, 1500);
    }
}

#[test]
fn random_three_streams_short_of_memory() {
    for seed in 21..=24 {
        random_run(plain(4 * MIB, None, 2), 48 * MIB, seed, 1500);
    }
}

/// The pattern of PyTorch's four-stream run (`../shared/traces/torch-multistream.trace.gz`):
/// side streams take turns, each allocating two inputs, a small buffer and an output, the
/// output handed to the main stream with `record_stream`, all freed on the side stream; the
/// device runs between `LAG` and `2 × LAG` operations behind the host.
#[test]
fn four_side_streams_with_record_stream_keep_pending_bounded() {
    const LAG: usize = 64;
    let gpu = fake(16 << 30);
    let main = gpu.default_stream();
    let side = streams(&gpu, 4);
    let mut pool = DevicePool::new(&gpu, DeviceConfig::VMM).unwrap();
    let mut rng = Rng(7);
    let workspace: Vec<_> = side
        .iter()
        .map(|&s| pool.alloc(32 * MIB, s).unwrap())
        .collect();
    let (mut live, mut peak_live) = (32 * MIB * 4, 0);
    let (mut ops, mut mark) = (0, None);
    let step = |ops: &mut usize, mark: &mut Option<tagalloc_cuda::fake::FakeMark>| {
        *ops += 1;
        if (*ops).is_multiple_of(LAG) {
            if let Some(m) = *mark {
                gpu.complete_until(m);
            }
            *mark = Some(gpu.mark());
        }
    };
    for turn in 0..400 {
        let s = side[turn % 4];
        let a = (4 + rng.below(60) as usize) * MIB;
        let mut blocks = Vec::new();
        for size in [a, a, 8192, 2 * a] {
            blocks.push(pool.alloc(size, s).unwrap());
            live += size;
            peak_live = peak_live.max(live);
            step(&mut ops, &mut mark);
            pool.check().unwrap_or_else(|e| panic!("turn {turn}: {e}"));
        }
        pool.record_stream(&blocks[3], main).unwrap();
        for b in blocks {
            live -= b.size();
            pool.free(b).unwrap();
            step(&mut ops, &mut mark);
            pool.check().unwrap_or_else(|e| panic!("turn {turn}: {e}"));
        }
    }
    let st = pool.stats();
    assert_eq!(gpu.calls().synchronizations(), 0, "the host never waited");
    assert!(
        st.pool.peak_reserved as f64 <= 1.5 * peak_live as f64,
        "peak reserved {} against peak live {peak_live}",
        st.pool.peak_reserved
    );
    for b in workspace {
        pool.free(b).unwrap();
    }
    pool.trim().unwrap();
    pool.check().unwrap();
    drop(pool);
    destroy(&gpu, side);
    assert_eq!(gpu.outstanding(), Outstanding::default());
}

#[test]
fn a_stream_that_frees_and_never_allocates_again_gives_its_memory_back() {
    let gpu = fake(1 << 30);
    let st = streams(&gpu, 2);
    let (s, t) = (st[0], st[1]);
    let mut pool = DevicePool::new(&gpu, plain(256 * MIB, None, 64)).unwrap();
    let on_s: Vec<_> = (0..8).map(|_| pool.alloc(4 * MIB, s).unwrap()).collect();
    let t0 = pool.alloc(256, t).unwrap();
    for b in on_s {
        pool.free(b).unwrap();
    }
    assert_eq!(pool.stats().pending_bytes, 32 * MIB);
    let before = gpu.calls();
    // T keeps allocating small blocks from the heap; the device is never behind. S's batch is
    // fenced at the next periodic poll, and the one after finds its event complete.
    let mut calls = 0;
    // (T's own freed block is pending too, for T to take again.)
    while pool.stats().pending_bytes >= 32 * MIB {
        let b = pool.alloc(4096, t).unwrap();
        pool.free(b).unwrap();
        gpu.complete_all();
        calls += 2;
        assert!(
            calls <= 2 * DeviceConfig::BATCH_AGE + 2,
            "still pending after {calls} calls"
        );
        pool.check().unwrap();
    }
    assert_eq!(
        gpu.calls().since(&before).synchronizations(),
        0,
        "never waited"
    );
    // The memory is in the heap for every stream: T takes S's 32 MiB without growing.
    let reserved = pool.stats().pool.reserved;
    let big = pool.alloc(32 * MIB, t).unwrap();
    assert_eq!(pool.stats().pool.reserved, reserved);
    for b in [t0, big] {
        pool.free(b).unwrap();
    }
    drop(pool);
    destroy(&gpu, st);
    assert_eq!(gpu.outstanding(), Outstanding::default());
}

/// One thread's exhaustion wait (the host synchronisation of a miss that ran out) is made with
/// the pool's lock released: another thread's allocation on a stream whose memory is at hand
/// goes through while the first is still waiting for the device.
#[test]
fn an_exhaustion_wait_does_not_block_another_threads_allocation() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{mpsc, Arc};
    use std::time::Duration;
    use tagalloc_cuda::SharedDevicePool;

    let gpu = Arc::new(fake(8 * MIB));
    let st = streams(&gpu, 3);
    let (s, t, u) = (st[0], st[1], st[2]);
    let pool = Arc::new(SharedDevicePool::new(
        0,
        DevicePool::new(Arc::clone(&gpu), plain(2 * MIB, None, 1)).unwrap(),
    ));
    let h1 = pool.alloc(MIB, s).unwrap();
    let h2 = pool.alloc(MIB, s).unwrap();
    let ub = pool.alloc(3 * MIB / 2, u).unwrap();
    let filler = pool.alloc(MIB / 2, u).unwrap();
    let x = pool.alloc(2 * MIB, s).unwrap();
    let y = pool.alloc(2 * MIB, t).unwrap();
    assert_eq!(gpu.outstanding().device_bytes, 8 * MIB);
    // h2 free in the heap; h1 and U's block pending, not yet passed by the device.
    pool.free(h2).unwrap();
    for _ in 0..2 {
        gpu.complete_all();
        pool.with(|p| p.process_events()).unwrap();
    }
    pool.free(ub).unwrap();
    pool.free(h1).unwrap();

    // The host synchronisation blocks until the test lets it go.
    let (entered_tx, entered_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let go_rx = std::sync::Mutex::new(go_rx);
    gpu.on_synchronize(Some(Arc::new(move || {
        let _ = entered_tx.send(());
        let _ = go_rx.lock().unwrap().recv_timeout(Duration::from_secs(30));
    })));
    let waiting = Arc::new(AtomicBool::new(true));
    let a = {
        let (pool, waiting) = (Arc::clone(&pool), Arc::clone(&waiting));
        std::thread::spawn(move || {
            let b = pool.alloc(2 * MIB, t); // runs out: waits for the device
            waiting.store(false, Ordering::SeqCst);
            b
        })
    };
    entered_rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the first thread synchronises");
    // Meanwhile, U's own pending block serves U, from another thread.
    let (done_tx, done_rx) = mpsc::channel();
    let b = {
        let pool = Arc::clone(&pool);
        std::thread::spawn(move || {
            let b = pool.alloc(3 * MIB / 2, u);
            let _ = done_tx.send(());
            b
        })
    };
    let served = done_rx.recv_timeout(Duration::from_secs(10)).is_ok();
    let still_waiting = waiting.load(Ordering::SeqCst);
    go_tx.send(()).unwrap(); // let the synchronisation end whatever happened
    assert!(
        served,
        "the second thread's allocation waited for the first's synchronisation"
    );
    assert!(
        still_waiting,
        "the first thread was still waiting for the device"
    );
    let ub2 = b.join().unwrap().unwrap();
    assert_eq!(ub2.ptr(), ub.ptr(), "U's own block, at once");
    let a2 = a.join().unwrap().unwrap();
    assert_eq!(
        a2.ptr(),
        h1.ptr(),
        "the halves merged once the device was waited for"
    );
    gpu.on_synchronize(None);
    pool.with(|p| p.check()).unwrap();
    assert_eq!(pool.stats().counters.synchronizations, 1);
    for blk in [ub2, filler, x, y, a2] {
        pool.free(blk).unwrap();
    }
    pool.trim().unwrap();
    drop(pool);
    destroy(&gpu, st);
    assert_eq!(gpu.outstanding(), Outstanding::default());
}

/// A stream the pool was told to forget is never named to the driver again: destroyed, the
/// fake refuses any call on it, and the pool goes on (allocating, polling, trimming) without
/// one failing.
#[test]
fn a_forgotten_stream_may_be_destroyed() {
    let gpu = fake(1 << 30);
    let st = streams(&gpu, 2);
    let (s, t) = (st[0], st[1]);
    let mut pool = DevicePool::new(&gpu, plain(16 * MIB, None, 64)).unwrap();
    let a = pool.alloc(8 * MIB, s).unwrap();
    let b = pool.alloc(8 * MIB, t).unwrap();
    pool.free(a).unwrap(); // pending on S, in its open batch
    let before = gpu.calls();
    pool.forget_stream(s).unwrap();
    assert_eq!(
        calls(&gpu, &before, Call::EventRecord),
        1,
        "S's batch fenced"
    );
    assert_eq!(pool.stats().streams, 1);
    pool.forget_stream(s).unwrap(); // forgotten already: nothing to do
                                    // SAFETY: the test created S and the pool no longer uses it.
    unsafe { gpu.stream_destroy(s).unwrap() };
    // T takes S's block by waiting on S's batch's event (an event, not the stream), polls,
    // and trims: no call names S.
    let c = pool.alloc(8 * MIB, t).unwrap();
    assert_eq!(c.ptr(), a.ptr());
    for _ in 0..300 {
        let x = pool.alloc(4096, t).unwrap();
        pool.free(x).unwrap();
        gpu.complete_all();
    }
    pool.free(b).unwrap();
    pool.free(c).unwrap();
    pool.trim().unwrap();
    pool.check().unwrap();
    // A new stream reusing the forgotten entry starts afresh.
    let s2 = gpu.stream_create().unwrap();
    let d = pool.alloc(MIB, s2).unwrap();
    pool.free(d).unwrap();
    pool.forget_stream(s2).unwrap();
    pool.check().unwrap();
    drop(pool);
    // SAFETY: the test's streams, used no more.
    unsafe { gpu.stream_destroy(s2).unwrap() };
    destroy(&gpu, vec![t]);
    assert_eq!(gpu.outstanding(), Outstanding::default());
}

/// While the pool is told a capture is under way it makes no call the driver refuses then
/// (the fake's capture would be invalidated), takes nothing across the capture's boundary,
/// and refuses what needs the host to wait; once told the capture ended, it records the
/// captured batches' events again and goes on as before.
#[test]
fn a_capture_is_never_broken_by_the_pool() {
    let gpu = fake(64 * MIB);
    let st = streams(&gpu, 2);
    let (s, c) = (st[0], st[1]);
    let mut pool = DevicePool::new(&gpu, plain(16 * MIB, None, 1)).unwrap();
    let a = pool.alloc(8 * MIB, s).unwrap();
    let keep = pool.alloc(8 * MIB, c).unwrap();
    pool.free(a).unwrap(); // pending on S, fenced outside the capture
    pool.capture_begun();
    gpu.begin_capture(c).unwrap();
    // C captures: it may not wait for S's batch (recorded outside the capture): the pool grows.
    let x = pool.alloc(8 * MIB, c).unwrap();
    assert_ne!(x.ptr(), a.ptr());
    // Frees on the capturing stream are fenced in the capture; C takes its own back.
    pool.free(x).unwrap();
    let y = pool.alloc(8 * MIB, c).unwrap();
    assert_eq!(y.ptr(), x.ptr());
    // Running out needs a host wait: refused, not made.
    let mut held = Vec::new();
    let err = loop {
        match pool.alloc(16 * MIB, c) {
            Ok(b) => held.push(b),
            Err(e) => break e,
        }
    };
    assert!(
        matches!(err, DeviceError::Capturing(_) | DeviceError::Pool { .. }),
        "{err}"
    );
    assert!(matches!(pool.trim(), Err(DeviceError::Capturing(_))));
    assert!(matches!(
        pool.forget_stream(c),
        Err(DeviceError::Capturing(_))
    ));
    pool.check().unwrap();
    assert!(
        gpu.end_capture(c).unwrap(),
        "the pool never invalidated the capture"
    );
    pool.capture_ended().unwrap();
    // Outside the capture again: polls, waits and trims work; nothing is lost.
    for b in held.into_iter().chain([y, keep]) {
        pool.free(b).unwrap();
    }
    gpu.complete_all();
    pool.process_events().unwrap();
    gpu.complete_all();
    pool.process_events().unwrap();
    pool.trim().unwrap();
    pool.check().unwrap();
    assert_eq!(pool.stats().pending_blocks, 0);
    drop(pool);
    destroy(&gpu, st);
    assert_eq!(gpu.outstanding(), Outstanding::default());
}

#[test]
fn a_pending_share_out_of_range_is_refused() {
    let gpu = fake(1 << 30);
    for bad in [-0.1, 1.5, f64::NAN, f64::INFINITY] {
        let config = DeviceConfig {
            max_pending: bad,
            ..DeviceConfig::VMM
        };
        match DevicePool::new(&gpu, config) {
            Err(DeviceError::Config(what)) => assert!(what.contains("max_pending"), "{what}"),
            other => panic!("{bad}: {other:?}"),
        }
    }
    assert_eq!(gpu.outstanding(), Outstanding::default());
}

/// Running out during a capture gives nothing back to the driver to make room (`cuMemFree`
/// waits for the device, which would break the capture): the request is refused, the
/// capture stays valid, and once it is over the same request trims and succeeds.
#[test]
fn running_out_during_a_capture_frees_no_region() {
    let gpu = fake(64 * MIB);
    let st = streams(&gpu, 2);
    let (s, c) = (st[0], st[1]);
    let mut pool = DevicePool::new(&gpu, plain(16 * MIB, None, 1)).unwrap();
    let a = pool.alloc(16 * MIB, s).unwrap();
    let w = pool.alloc(16 * MIB, c).unwrap();
    pool.free(w).unwrap();
    for _ in 0..2 {
        gpu.complete_all();
        pool.process_events().unwrap();
    }
    assert_eq!(pool.stats().pending_blocks, 0, "w's region is wholly free");
    pool.capture_begun();
    gpu.begin_capture(c).unwrap();
    let before = gpu.calls();
    assert!(
        pool.alloc(40 * MIB, c).is_err(),
        "no room without giving back"
    );
    assert_eq!(calls(&gpu, &before, Call::MemFree), 0);
    assert_eq!(pool.trim().unwrap(), tagalloc::Trimmed::default());
    assert!(gpu.end_capture(c).unwrap(), "the capture was not broken");
    pool.capture_ended().unwrap();
    let big = pool.alloc(40 * MIB, c).unwrap();
    assert_eq!(
        calls(&gpu, &before, Call::MemFree),
        1,
        "w's region, after the capture"
    );
    pool.check().unwrap();
    for b in [a, big] {
        pool.free(b).unwrap();
    }
    drop(pool);
    destroy(&gpu, st);
    assert_eq!(gpu.outstanding(), Outstanding::default());
}

/// Two captures an illegal call invalidated are not taken for one: a stream in one never
/// waits for an event recorded in the other (the driver would refuse the wait); the pool
/// grows instead.
#[test]
fn two_invalidated_captures_are_not_one() {
    let gpu = fake(64 * MIB);
    let st = streams(&gpu, 2);
    let (c1, c2) = (st[0], st[1]);
    let mut pool = DevicePool::new(&gpu, plain(2 * MIB, None, 1)).unwrap();
    let x = pool.alloc(2 * MIB, c1).unwrap();
    let y = pool.alloc(2 * MIB, c2).unwrap();
    for c in [c1, c2] {
        pool.capture_begun();
        gpu.begin_capture(c).unwrap();
    }
    assert!(
        gpu.ctx_synchronize().is_err(),
        "illegal: both captures invalidated"
    );
    pool.free(x).unwrap(); // fenced in c1's invalidated capture
    let z = pool
        .alloc(2 * MIB, c2)
        .expect("grown, no wait across the captures");
    assert_ne!(z.ptr(), x.ptr());
    assert_eq!(
        pool.stats().counters.stream_waits,
        1,
        "only c2's wait for the epoch"
    );
    for c in [c1, c2] {
        assert!(
            !gpu.end_capture(c).unwrap(),
            "invalidated by the test's own call"
        );
        pool.capture_ended().unwrap();
    }
    for b in [y, z] {
        pool.free(b).unwrap();
    }
    gpu.complete_all();
    pool.trim().unwrap();
    pool.check().unwrap();
    drop(pool);
    destroy(&gpu, st);
    assert_eq!(gpu.outstanding(), Outstanding::default());
}
