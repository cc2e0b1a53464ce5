//! The shared host pool (`tagalloc_host::HostPool`: an inline heap over `mmap` regions behind
//! the futex lock, with `HostAllocator`'s policy) under the threaded trace replay of
//! `tagalloc_tests::threaded`: one OS thread per recorded thread, every block's contents
//! verified, the pool's invariants checked while the threads run, and every region given back to
//! the system by `trim` at the end.

use std::time::Instant;

use tagalloc::{InlineHeap, Pool, SharedPool};
use tagalloc_host::{count, HostAllocator, HostPool, MmapSource};
use tagalloc_tests::threaded::{replay_threaded, Plan, ThreadedOptions};
use tagalloc_tests::trace::{shared_trace, Trace};

/// Replays `trace` through a fresh host pool, then trims it and checks that every region went
/// back.
fn replay_through_host_pool(trace: &Trace) {
    let started = Instant::now();
    let pool: HostPool = SharedPool::new(Pool::new(
        InlineHeap::new(),
        MmapSource::new(),
        HostAllocator::POLICY,
    ));
    let plan = Plan::new(&trace.events, usize::MAX);
    let report = replay_threaded(&pool, trace, &plan, &ThreadedOptions::default())
        .unwrap_or_else(|e| panic!("{e}"));
    let st = pool.stats().unwrap();
    let t = pool.trim().unwrap();
    let after = pool.stats().unwrap();
    let mapped = pool.with_pool(|p| p.source().mapped()).unwrap();
    println!(
        "{report}; pool peak reserved {} B, {} obtained, {} grown in place, {} bypassed, \
         {}; trim gave back {}; total {:.2?}",
        st.peak_reserved,
        count(st.regions_obtained, "region", "regions"),
        st.grown,
        st.bypassed,
        count(st.retries, "retry", "retries"),
        count(t.regions, "region", "regions"),
        started.elapsed()
    );
    assert!(st.regions_obtained >= 1);
    assert_eq!(
        (after.reserved, after.heap.regions, mapped),
        (0, 0, 0),
        "{after:?}"
    );
    assert_eq!(
        after.regions_obtained, after.regions_given_back,
        "{after:?}"
    );
}

/// The Android SystemUI trace (AOSP's memory_replay, 393 threads, 770 k events) through the
/// shared host pool. Built ignored (with the reason) where `../shared/traces` is absent; under
/// `CI=true` it runs and fails if the trace is missing (see `build.rs`).
#[test]
#[cfg_attr(
    not(tagalloc_shared_traces),
    ignore = "needs ../shared/traces/android-systemui.trace.gz beside the repository (absent \
              when built)"
)]
fn android_systemui_through_the_shared_host_pool() {
    let path = shared_trace("android-systemui.trace.gz").unwrap_or_else(|e| panic!("{e}"));
    let trace = Trace::load(&path).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        trace.stats().threads > 1,
        "the trace should name several threads"
    );
    replay_through_host_pool(&trace);
}

/// Blocks passed between six threads with resizes on the way, some above the bypass threshold
/// (regions of their own, given back on free): runs without `../shared`.
#[test]
fn hand_made_trace_through_the_shared_host_pool() {
    let mut body = String::from("# tagalloc trace v1\n");
    let threads = 6u64;
    for id in 0..3000u64 {
        let t = id % threads;
        let size = if id % 500 == 7 {
            (2 << 20) + id
        } else {
            (id * 37) % 4000
        };
        let align = if id % 11 == 0 { " align=4096" } else { "" };
        body += &format!("a {id} {size} t={t}{align}\n");
        if id >= 8 {
            let r = id - 4;
            body += &format!("r {r} {} t={}\n", (r * 101) % 9000, (t + 1) % threads);
            if id % 3 != 0 {
                body += &format!("f {} t={}\n", id - 8, (t + 2) % threads);
            }
        }
    }
    let trace = Trace::parse("hand-made", body.as_bytes()).unwrap_or_else(|e| panic!("{e}"));
    replay_through_host_pool(&trace);
}
