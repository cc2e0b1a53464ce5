//! Traces replayed through the model of PyTorch's CUDA caching allocator on the fake driver:
//! the model's invariants hold along the way, its statistics agree with the driver's books,
//! and everything it obtained goes back once the trace's allocations are freed.

use tagalloc_cuda::fake::{Call, FakeConfig};
use tagalloc_cuda::torch_model::{TorchConfig, TorchError};
use tagalloc_tests::torch_replay::{TorchReplay, TorchReplayError, TorchReplayReport};
use tagalloc_tests::trace::{shared_trace, Trace};

const MIB: usize = 1 << 20;

fn parse(body: &str) -> Trace {
    Trace::parse(
        "hand-made",
        format!("# tagalloc trace v1\n{body}").as_bytes(),
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

/// Replays, drains, and checks what every replay must satisfy; returns the report.
fn replay_checked(trace: &Trace, config: TorchConfig, fake: FakeConfig) -> TorchReplayReport {
    let mut replay = TorchReplay::new(trace, config, fake, 64).unwrap_or_else(|e| panic!("{e}"));
    let report = replay.run().unwrap_or_else(|e| panic!("{e}"));
    println!("{report}");
    let expected = trace.stats();
    let s = report.stats;
    assert_eq!(report.events, expected.events);
    assert_eq!(report.peak_live_bytes, expected.peak_live_bytes);
    // Rounding and caching only ever add to what the trace asked for.
    assert!(s.reserved_bytes.peak >= s.allocated_bytes.peak, "{s:?}");
    assert!(s.allocated_bytes.peak >= expected.peak_live_bytes, "{s:?}");
    assert_eq!(s.allocations.current, expected.live_at_end as u64);
    // The model's own counts are the driver's (no failures were injected).
    assert_eq!(
        report.calls.get(Call::MemAlloc),
        s.num_device_alloc + s.num_ooms
    );
    assert_eq!(report.calls.get(Call::MemFree), s.num_device_free);
    assert_eq!(
        replay.driver().outstanding().device_bytes as u64,
        s.reserved_bytes.current
    );

    let freed = replay.drain().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(freed, expected.live_at_end);
    let left = replay.driver().outstanding();
    assert_eq!((left.allocations, left.device_bytes), (0, 0), "{left:?}");
    report
}

/// Replays the PyTorch CUDA trace of the shared collection (one stream, sizes up to 51 MB,
/// 7.4 GB peak live) on a 16 GiB fake card. Built ignored where `../shared/traces` is absent;
/// fails under `CI=true` if it is (see `build.rs`).
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
    let report = replay_checked(&trace, TorchConfig::default(), FakeConfig::default());
    assert!(report.stats.num_device_alloc > 0);
    assert_eq!(report.stats.num_ooms, 0, "16 GiB is plenty for 7.4 GB live");
    // With max_split_size set (a common setting against fragmentation): the trace's largest
    // blocks (up to 51 MB) become oversize, never split.
    let split = TorchConfig {
        max_split_size: 32 * MIB,
        ..TorchConfig::default()
    };
    replay_checked(&trace, split, FakeConfig::default());
}

/// A hand-made trace whose figures follow from the rules: two streams, small and large
/// requests, a resize, a zero size and allocations left live.
#[test]
fn hand_made_trace_figures() {
    let trace = parse(
        "a 0 1000 s=0\n\
         a 1 3000 s=0\n\
         a 2 0 s=0\n\
         a 3 5000000 s=7\n\
         f 0 s=0\n\
         r 1 2000000 s=0\n\
         a 4 100 s=7\n\
         f 3 s=7\n\
         f 2 s=0\n",
    );
    let report = replay_checked(&trace, TorchConfig::default(), FakeConfig::default());
    let s = report.stats;
    // s=0: one 2 MiB small segment (1000 and 3000 bytes), then the 2 MB resize: a 20 MiB
    // segment. s=7: a 20 MiB segment for 5 MB and a 2 MiB small segment for 100 bytes.
    assert_eq!(s.num_device_alloc, 4);
    assert_eq!(s.reserved_bytes.peak, (2 + 20 + 20 + 2) as u64 * MIB as u64);
    assert_eq!(report.calls.get(Call::MemAlloc), 4);
    assert_eq!(
        report.calls.get(Call::MemFree),
        0,
        "nothing released during the trace"
    );
    assert_eq!(
        s.allocated_bytes.peak,
        5_000_192 + 2_000_384 + 512,
        "at the peak: 5000000, 2000000 and 100, each rounded up to 512"
    );
    assert!(
        report.reserved_over_live() > 5.0,
        "tiny trace, big segments"
    );
}

/// A device too small for the trace: the replay stops with the model's out-of-memory error
/// naming the event, after the model released its cache and retried.
#[test]
fn out_of_memory_is_reported_with_the_event() {
    let trace = parse("a 0 30000000\na 1 30000000\nf 0\na 2 60000000\n");
    let fake = FakeConfig {
        total_memory: 80 * MIB,
        ..FakeConfig::default()
    };
    let mut replay = TorchReplay::new(&trace, TorchConfig::default(), fake, 1).unwrap();
    let err = replay.run().unwrap_err();
    println!("{err}");
    match err {
        TorchReplayError::Event {
            index: 3,
            error: TorchError::OutOfMemory { size, .. },
            ..
        } => assert_eq!(size, 60_000_000),
        other => panic!("unexpected: {other}"),
    }
    let s = replay.model().stats();
    assert_eq!((s.num_ooms, s.num_alloc_retries), (1, 1));
    assert_eq!(
        s.num_device_free, 1,
        "the cached 30 MB segment was released first"
    );
}
