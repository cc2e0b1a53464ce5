//! Real allocation traces replayed through both tag placements, with block contents and the
//! heap's invariants verified along the way, and the heap shown to return to one free chunk per
//! region once everything is freed: a leaked byte, a missed merge or a corrupted tag anywhere in
//! hundreds of thousands of operations shows up here.

use std::path::Path;

use tagalloc_tests::replay::{
    replay, Placement, Replay, ReplayErrorKind, ReplayHeap, ReplayOptions,
};
use tagalloc_tests::trace::{bundled_traces_dir, shared_trace, trace_files, Trace};

/// How often the real traces are checked: often enough to catch a broken invariant close to
/// the event that broke it, rarely enough that the walks do not dominate the test's time.
const CHECK_EVERY: usize = 4096;

fn options() -> ReplayOptions {
    ReplayOptions {
        check_every: CHECK_EVERY,
        verify_contents: true,
        ..ReplayOptions::default()
    }
}

/// Replays `trace` through `replay`, then frees what the trace left live and shows that every
/// region is one free chunk that can be handed out whole.
fn replay_and_drain<H: ReplayHeap>(mut replay: Replay<'_, H>) {
    let expected = *replay.trace_stats();
    let report = replay.run().unwrap_or_else(|e| panic!("{e}"));
    println!("  {report}");
    assert_eq!(report.events, expected.events);
    assert_eq!(report.stats.live, expected.live_at_end);
    assert_eq!(replay.live_count(), expected.live_at_end);
    // Tags and rounding only ever add to what the trace asked for.
    assert!(
        report.stats.peak_in_use >= report.peak_live_bytes,
        "{report}"
    );

    let freed = replay.free_live().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(freed, expected.live_at_end);
    replay.check().unwrap_or_else(|e| panic!("{e}"));
    let regions = replay.region_count();
    let stats = replay.stats();
    assert_eq!(stats.in_use, 0, "{stats:?}");
    assert_eq!(stats.live, 0, "{stats:?}");
    assert_eq!(stats.free, stats.managed, "{stats:?}");
    assert_eq!(stats.free_chunks, regions, "{stats:?}");

    for _ in 0..regions {
        replay
            .alloc_largest_free()
            .unwrap_or_else(|e| panic!("whole-region allocation: {e}"));
    }
    replay.check().unwrap_or_else(|e| panic!("{e}"));
    let stats = replay.stats();
    assert_eq!(stats.free, 0, "{stats:?}");
    assert_eq!(stats.free_chunks, 0, "{stats:?}");
    assert_eq!(stats.in_use, stats.managed, "{stats:?}");

    assert_eq!(
        replay.free_live().unwrap_or_else(|e| panic!("{e}")),
        regions
    );
    replay.check().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(replay.stats().free_chunks, regions);
}

fn replay_both(path: &Path) {
    let trace = Trace::load(path).unwrap_or_else(|e| panic!("{e}"));
    assert!(!trace.events.is_empty(), "{}", path.display());
    println!("{}: {}", trace.name, trace.stats());
    let options = options();
    replay_and_drain(Replay::inline(&trace, &options).unwrap_or_else(|e| panic!("{e}")));
    replay_and_drain(Replay::detached(&trace, &options).unwrap_or_else(|e| panic!("{e}")));
}

/// Replays a trace of the shared collection; fails when it is missing. The tests that call this
/// are built ignored (with the reason) where `../shared/traces` is absent, and run and fail
/// under `CI=true` (see `build.rs`).
fn replay_shared(file: &str) {
    replay_both(&shared_trace(file).unwrap_or_else(|e| panic!("{e}")));
}

#[test]
#[cfg_attr(
    not(tagalloc_shared_traces),
    ignore = "needs ../shared/traces/sqlite.trace.gz beside the repository (absent when built)"
)]
fn shared_sqlite() {
    replay_shared("sqlite.trace.gz");
}

#[test]
#[cfg_attr(
    not(tagalloc_shared_traces),
    ignore = "needs ../shared/traces/wee-gcc-hello.trace.gz beside the repository (absent when \
              built)"
)]
fn shared_wee_gcc_hello() {
    replay_shared("wee-gcc-hello.trace.gz");
}

#[test]
fn bundled_traces() {
    let files = trace_files(&bundled_traces_dir()).unwrap_or_else(|e| panic!("{e}"));
    assert!(!files.is_empty(), "no traces in tests/data");
    for path in files {
        replay_both(&path);
    }
}

fn parse(body: &str) -> Trace {
    Trace::parse(
        "hand-made",
        format!("# tagalloc trace v1\n{body}").as_bytes(),
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

/// Zero sizes, over-aligned blocks, reallocs that grow, shrink and move, and a heap far too
/// small to start with, so that it must grow into several regions.
#[test]
fn small_trace_exercises_growth_alignment_and_zero_sizes() {
    let mut body = String::new();
    for id in 0..200 {
        let align = if id % 7 == 0 { " align=4096" } else { "" };
        body += &format!("a {id} {}{align}\n", (id * 37) % 3000);
    }
    for id in (0..200).step_by(3) {
        body += &format!("r {id} {}\n", (id * 101) % 9000);
    }
    for id in (0..200).step_by(2) {
        body += &format!("f {id}\n");
    }
    let trace = parse(&body);
    let options = ReplayOptions {
        check_every: 1,
        size_factor: 0,
        ..ReplayOptions::default()
    };
    let replay_inline = Replay::inline(&trace, &options).unwrap_or_else(|e| panic!("{e}"));
    replay_and_drain(replay_inline);
    let replay_detached = Replay::detached(&trace, &options).unwrap_or_else(|e| panic!("{e}"));
    replay_and_drain(replay_detached);
}

#[test]
fn growth_is_reported() {
    // Live bytes far beyond the slack the heap starts with when the size factor is 0.
    let body: String = (0..40).map(|id| format!("a {id} 100000\n")).collect();
    let trace = parse(&body);
    let options = ReplayOptions {
        size_factor: 0,
        ..ReplayOptions::default()
    };
    for placement in Placement::ALL {
        let report = replay(&trace, placement, &options).unwrap_or_else(|e| panic!("{e}"));
        assert!(report.regions_added > 0, "{report}");
        assert_eq!(report.stats.live, 40);
    }
}

#[test]
fn inconsistent_traces_are_errors_not_panics() {
    use tagalloc_tests::trace::Event;
    let alloc = |id| Event::Alloc {
        id,
        size: 8,
        align: None,
        thread: None,
        stream: None,
    };
    let free = |id| Event::Free {
        id,
        thread: None,
        stream: None,
        used: None,
    };
    // `Trace::load` refuses these; a trace built by hand can still hold them.
    let cases = [
        (vec![free(3)], ReplayErrorKind::NotLive(3)),
        (vec![alloc(1), alloc(1)], ReplayErrorKind::IdReused(1)),
    ];
    for (events, kind) in cases {
        let trace = Trace {
            name: "bad".into(),
            events,
        };
        for placement in Placement::ALL {
            let err = replay(&trace, placement, &ReplayOptions::default()).unwrap_err();
            assert_eq!(err.kind(), &kind);
            assert_eq!(err.placement(), placement);
            let (index, _) = err.event().expect("names the event");
            assert_eq!(index, trace.events.len() - 1);
            println!("{err}");
        }
    }
}

#[test]
fn impossible_requests_are_errors_not_panics() {
    // (trace, whether the detached heap must refuse it too: a range of addresses that nothing
    // backs can grow to 2^60 bytes, host memory cannot).
    let cases = [
        (format!("a 0 {}\n", usize::MAX), true),
        (format!("a 0 16\nr 0 {}\n", usize::MAX), true),
        (format!("a 0 {}\n", 1usize << 60), false),
        (format!("a 0 16 align={}\n", 1usize << 60), false),
    ];
    for (body, detached_fails) in cases {
        let trace = parse(&body);
        for placement in Placement::ALL {
            match replay(&trace, placement, &ReplayOptions::default()) {
                Err(err) => {
                    assert!(err.event().is_some(), "{err}");
                    println!("{err}");
                }
                Ok(report) => {
                    assert!(
                        placement == Placement::Detached && !detached_fails,
                        "{body:?} should fail: {report}"
                    );
                }
            }
        }
    }
}

#[test]
fn a_replay_runs_once() {
    let trace = parse("a 0 8\nf 0\n");
    let mut replay = Replay::inline(&trace, &ReplayOptions::default()).unwrap();
    replay.run().unwrap();
    let err = replay.run().unwrap_err();
    assert_eq!(err.kind(), &ReplayErrorKind::AlreadyRun);
}

#[test]
fn bad_granule_is_an_error() {
    let trace = parse("a 0 8\n");
    let options = ReplayOptions {
        detached_granule: 3,
        ..ReplayOptions::default()
    };
    let err = replay(&trace, Placement::Detached, &options).unwrap_err();
    assert!(matches!(err.kind(), ReplayErrorKind::Setup(_)), "{err}");
}

#[test]
fn an_alignment_no_memory_can_meet_names_the_event_and_the_alignment() {
    let trace = parse(&format!("a 0 16\na 1 8 align={}\n", 1usize << 63));
    for placement in Placement::ALL {
        let err = replay(&trace, placement, &ReplayOptions::default())
            .expect_err("an alignment of 2^63 cannot be met");
        let (index, _) = err.event().expect("the error names its event");
        assert_eq!(index, 1, "{err}");
        let text = err.to_string();
        assert!(text.contains("event 2"), "{text}");
        // The cause, beyond the event's own text: the request's alignment.
        let cause = text.split_once("`): ").map_or("", |(_, c)| c);
        assert!(
            cause.contains(&format!("aligned to {}", 1usize << 63)),
            "{text}"
        );
        println!("{text}");
    }
}
