//! Traces replayed through tagalloc's stream-ordered device pool on the fake driver, with
//! plain device regions and with virtual-memory growth: the pool's invariants hold along the
//! way (its pending lists included), its figures agree with the driver's books, and nothing
//! is left on the device once the trace's allocations are freed and the pool trimmed.

use tagalloc_cuda::fake::{Call, FakeConfig};
use tagalloc_cuda::{DeviceConfig, Regions};
use tagalloc_tests::device_replay::{synthetic_trace, DeviceReplay, DeviceReplayReport};
use tagalloc_tests::trace::{shared_trace, Trace};

/// Replays with checks every `check_every` events, drains, and checks what every replay must
/// satisfy; returns the report.
fn replay_checked(
    trace: &Trace,
    config: DeviceConfig,
    check_every: usize,
    lag: usize,
) -> DeviceReplayReport {
    let mut replay = DeviceReplay::new(trace, config, FakeConfig::default(), check_every, lag)
        .unwrap_or_else(|e| panic!("{e}"));
    let report = replay.run().unwrap_or_else(|e| panic!("{e}"));
    println!("{report}");
    let expected = trace.stats();
    let s = report.stats;
    assert_eq!(report.events, expected.events);
    assert_eq!(report.peak_live_bytes, expected.peak_live_bytes);
    assert!(
        s.pool.peak_reserved as u64 >= expected.peak_live_bytes,
        "{s:?}"
    );
    assert_eq!(s.pool.heap.live - s.pending_blocks, expected.live_at_end);
    // The pool's regions are what the driver holds for it.
    let out = replay.driver().outstanding();
    assert_eq!(out.device_bytes, s.pool.reserved, "{out:?}");
    match config.regions {
        Regions::Plain { .. } => {
            assert_eq!(report.calls.get(Call::MemAlloc), s.pool.regions_obtained);
            assert_eq!(out.allocations as u64, s.pool.heap.regions as u64);
        }
        Regions::Vmm { chunk, .. } => {
            assert_eq!(s.pool.heap.regions, 1, "one region");
            assert_eq!(out.mappings * chunk, s.pool.reserved);
            assert_eq!(report.calls.get(Call::MemAlloc), 0);
        }
    }
    let freed = replay.drain().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(freed, expected.live_at_end);
    let left = replay.driver().outstanding();
    assert_eq!(
        (
            left.allocations,
            left.mappings,
            left.physical,
            left.device_bytes
        ),
        (0, 0, 0, 0),
        "{left:?}"
    );
    report
}

/// The PyTorch CUDA trace of the shared collection (one stream, 6.9 GiB peak live) through
/// both kinds of regions on a 16 GiB fake card. Built ignored where `../shared/traces` is
/// absent; fails under `CI=true` if it is (see `build.rs`). `--nocapture` shows peak reserved
/// against peak live.
#[test]
#[cfg_attr(
    not(tagalloc_shared_traces),
    ignore = "needs ../shared/traces/torch-cs336.trace.gz beside the repository (absent when \
              built)"
)]
fn shared_torch_cs336() {
    let path = shared_trace("torch-cs336.trace.gz").unwrap_or_else(|e| panic!("{e}"));
    let trace = Trace::load(&path).unwrap_or_else(|e| panic!("{e}"));
    println!("{}: {}", trace.name, trace.stats());
    for config in [DeviceConfig::PLAIN, DeviceConfig::VMM] {
        let r = replay_checked(&trace, config, 64, 64);
        assert!(
            !r.stats.multi_stream,
            "one stream: frees go straight to the heap"
        );
        assert_eq!(r.calls.synchronizations(), 0);
        assert_eq!(r.calls.get(Call::EventRecord), 0);
        assert_eq!(r.stats.pool.retries, 0, "16 GiB is plenty");
    }
}

/// Three streams: blocks move between streams through events (a device-side wait, or the
/// event seen complete), the invariants hold after every event, and the host never waits
/// while memory lasts: not even when the second stream appears.
#[test]
fn synthetic_three_streams() {
    let trace = synthetic_trace(4000, 3, 60, 7);
    for config in [DeviceConfig::PLAIN, DeviceConfig::VMM] {
        let r = replay_checked(&trace, config, 1, 16);
        assert!(r.stats.multi_stream);
        assert_eq!(r.stats.streams, 3);
        assert!(r.calls.get(Call::EventRecord) > 0);
        assert!(r.stats.counters.batches_released > 0);
        assert!(
            r.stats.counters.reused_pending > 0,
            "{:?}",
            r.stats.counters
        );
        assert_eq!(r.calls.synchronizations(), 0, "{}", r.calls);
        assert_eq!(
            r.calls.get(Call::StreamWaitEvent),
            r.stats.counters.stream_waits
        );
        // Batches, not an event per free.
        assert!(
            r.calls.get(Call::EventRecord) * 3 <= trace.stats().frees as u64,
            "batches, not one event per free: {}",
            r.calls
        );
    }
}

/// Without the device ever catching up by itself, a small card (twice the trace's peak):
/// misses take other streams' pending blocks by device-side waits, and the host waits only
/// when the card has run out (each such wait an exhaustion retry); the replay never fails.
#[test]
fn synthetic_streams_on_a_small_card() {
    let trace = synthetic_trace(3000, 2, 40, 11);
    let peak = trace.stats().peak_live_bytes as usize;
    let fake = FakeConfig {
        total_memory: (peak * 2).next_multiple_of(2 << 20),
        ..FakeConfig::default()
    };
    let config = DeviceConfig {
        regions: Regions::Vmm {
            chunk: 2 << 20,
            reserve: 0,
        },
        policy: tagalloc::Policy::new()
            .growth(tagalloc::Growth::Fixed(2 << 20))
            .release_above(2 << 20),
        ..DeviceConfig::VMM
    };
    let mut replay = DeviceReplay::new(&trace, config, fake, 1, 0).unwrap();
    let r = replay.run().unwrap_or_else(|e| panic!("{e}"));
    println!("{r}");
    assert!(r.stats.counters.stream_waits > 0, "{:?}", r.stats.counters);
    assert_eq!(
        r.calls.synchronizations(),
        r.stats.counters.exhaustion_retries,
        "{:?}",
        r.stats.counters
    );
    replay.drain().unwrap();
}
