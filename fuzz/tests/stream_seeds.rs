//! The hand-made seeds of the `stream_order` target (`corpus/stream_order/`): small scenarios
//! that between them reach every operation and set-up choice of `tagalloc_fuzz::streams` (two
//! streams reusing each other's memory, `record_stream`, the switch to several streams, a
//! split pending block, exhaustion and the host synchronisation, captures, forgotten and
//! destroyed streams, the clock, virtual-memory regions, stale blocks). Each runs clean
//! here, and each must be in the corpus as encoded here; to write them again after changing
//! a scenario or the encoding:
//!
//! ```sh
//! TAGALLOC_WRITE_SEEDS=1 cargo test --test stream_seeds
//! ```
//!
//! The fuzzer adds to them in its own copy of the corpus (`.ci/fuzz`); `tests/corpus.rs`
//! replays whatever the directory holds.

use std::fs;
use std::path::PathBuf;

use arbitrary::{Arbitrary, Unstructured};
use tagalloc_fuzz::streams::ops::encode;
use tagalloc_fuzz::streams::{Setup, Size, StreamInput, StreamOp, Tally};

use StreamOp::*;

/// Plain regions rounded to 2 MiB, fixed 1 MiB growth, a 16 MiB card, batches of 2 frees
/// aged 4 calls, no clock, two created streams besides the default one: lanes 0 (default),
/// 1 and 2.
const BASE: Setup = Setup {
    card: 0,
    regions: 6,
    growth: 0,
    policy: 0,
    granule: 0,
    batch: 1,
    batch_age: 3,
    clock: 0,
    speed: 4,
    streams: 2,
};

const fn alloc(stream: u8, size: Size) -> StreamOp {
    Alloc {
        stream,
        size,
        ns: 10,
    }
}

/// Bytes of a small request (at most 512).
const fn tiny(n: u16) -> Size {
    Size::new(0, n - 1)
}

/// About `k` × 16 KiB.
const fn kib16(k: u16) -> Size {
    Size::new(140, k * 1024)
}

/// `m` MiB.
const fn mib(m: u16) -> Size {
    Size::new(240, m - 1)
}

fn scenarios() -> Vec<(&'static str, Setup, Vec<StreamOp>)> {
    vec![
        (
            "two-streams",
            BASE,
            vec![
                alloc(1, kib16(4)),
                alloc(2, kib16(4)),
                Free { pick: 0 },
                alloc(2, kib16(2)),
                Use {
                    pick: 1,
                    which: 0,
                    ns: 50,
                },
                Free { pick: 0 },
                Free { pick: 0 },
                alloc(1, kib16(4)),
                Complete { how: 2, stream: 0 },
                ProcessEvents,
                alloc(0, tiny(100)),
                Trim,
            ],
        ),
        (
            "one-stream-then-many",
            Setup { batch: 7, ..BASE },
            vec![
                alloc(0, kib16(8)),
                alloc(0, tiny(64)),
                Free { pick: 0 },
                Free { pick: 0 },
                alloc(1, kib16(8)),
                alloc(2, tiny(64)),
                Free { pick: 1 },
                alloc(1, tiny(32)),
                Complete { how: 3, stream: 0 },
                Work {
                    stream: 2,
                    ns: 9,
                    host: 1,
                },
                Complete { how: 1, stream: 0 },
                ProcessEvents,
            ],
        ),
        (
            "record-stream",
            BASE,
            vec![
                alloc(1, kib16(16)),
                RecordStream {
                    pick: 0,
                    stream: 2,
                    ns: 30,
                },
                RecordStream {
                    pick: 0,
                    stream: 0,
                    ns: 5,
                },
                Use {
                    pick: 0,
                    which: 1,
                    ns: 7,
                },
                Free { pick: 0 },
                alloc(1, kib16(16)),
                alloc(2, kib16(4)),
                Complete { how: 0, stream: 1 },
                Complete { how: 0, stream: 2 },
                ProcessEvents,
                alloc(0, kib16(16)),
            ],
        ),
        (
            // An 8 MiB limit the first two blocks fill: the next allocations, on other
            // streams, take a pending block by a device-side wait and leave the rest of it
            // pending.
            "split-across",
            Setup {
                policy: 1,
                batch: 224,
                batch_age: 224,
                ..BASE
            },
            vec![
                alloc(1, mib(4)),
                alloc(1, mib(4)),
                alloc(0, tiny(1)),
                // Uses after the switch to several streams: the epoch does not cover them.
                Use {
                    pick: 0,
                    which: 0,
                    ns: 40,
                },
                Use {
                    pick: 1,
                    which: 0,
                    ns: 40,
                },
                Free { pick: 0 },
                Free { pick: 0 },
                Free { pick: 0 },
                alloc(2, mib(1)),
                alloc(0, mib(2)),
                alloc(2, kib16(20)),
                Free { pick: 1 },
                alloc(1, kib16(2)),
            ],
        ),
        (
            "exhaustion",
            Setup {
                card: 0,
                regions: 0,
                growth: 2,
                ..BASE
            },
            vec![
                alloc(0, mib(6)),
                alloc(1, mib(6)),
                alloc(2, mib(3)),
                Free { pick: 0 },
                alloc(2, mib(6)),
                alloc(1, mib(12)),
                Free { pick: 0 },
                Free { pick: 0 },
                alloc(0, mib(40)),
                alloc(1, mib(9)),
                Trim,
            ],
        ),
        (
            "limit-bypass-trim-above",
            Setup {
                card: 2,
                policy: 0b0010_1010,
                growth: 1,
                ..BASE
            },
            vec![
                alloc(0, mib(2)),
                alloc(1, kib16(8)),
                alloc(2, mib(5)),
                Free { pick: 0 },
                alloc(1, mib(20)),
                Free { pick: 0 },
                Free { pick: 0 },
                alloc(2, mib(1)),
                ProcessEvents,
                Trim,
            ],
        ),
        (
            "capture",
            BASE,
            vec![
                alloc(0, kib16(2)),
                alloc(1, kib16(2)),
                Free { pick: 0 },
                BeginCapture { stream: 1 },
                alloc(1, kib16(2)),
                alloc(1, kib16(3)),
                Use {
                    pick: 1,
                    which: 0,
                    ns: 3,
                },
                Free { pick: 1 },
                alloc(2, kib16(2)),
                ProcessEvents,
                Trim,
                ForgetStream { stream: 1 },
                EndCapture { stream: 0 },
                ProcessEvents,
                alloc(2, kib16(3)),
                Free { pick: 0 },
            ],
        ),
        (
            "capture-first",
            BASE,
            vec![
                BeginCapture { stream: 2 },
                alloc(2, kib16(4)),
                Free { pick: 0 },
                alloc(2, kib16(4)),
                alloc(0, kib16(4)),
                EndCapture { stream: 0 },
                alloc(0, kib16(4)),
                Complete { how: 2, stream: 0 },
                alloc(1, kib16(4)),
            ],
        ),
        (
            "forget-and-destroy",
            BASE,
            vec![
                CreateStream,
                alloc(3, kib16(6)),
                alloc(0, kib16(6)),
                Free { pick: 0 },
                ForgetStream { stream: 3 },
                alloc(1, kib16(6)),
                CreateStream,
                alloc(3, kib16(6)),
                RecordStream {
                    pick: 0,
                    stream: 2,
                    ns: 1,
                },
                Free { pick: 0 },
                ForgetStream { stream: 2 },
                ForgetStream { stream: 1 },
                ProcessEvents,
                Complete { how: 2, stream: 0 },
                ProcessEvents,
                alloc(1, kib16(6)),
            ],
        ),
        (
            "clock",
            Setup {
                clock: 0x9b,
                speed: 8,
                ..BASE
            },
            vec![
                alloc(1, kib16(4)),
                Work {
                    stream: 1,
                    ns: 200,
                    host: 3,
                },
                Free { pick: 0 },
                alloc(2, kib16(4)),
                Complete { how: 40, stream: 0 },
                alloc(0, kib16(4)),
                Free { pick: 0 },
                Free { pick: 0 },
                Complete {
                    how: 255,
                    stream: 255,
                },
                alloc(2, kib16(8)),
                ProcessEvents,
            ],
        ),
        (
            "vmm",
            Setup {
                regions: 0b101,
                policy: 0x40,
                card: 1,
                ..BASE
            },
            vec![
                alloc(0, mib(3)),
                alloc(1, mib(2)),
                alloc(2, kib16(5)),
                Free { pick: 0 },
                Free { pick: 1 },
                Trim,
                alloc(1, mib(15)),
                alloc(2, mib(8)),
                Free { pick: 0 },
                Trim,
            ],
        ),
        (
            "stale",
            Setup { granule: 1, ..BASE },
            vec![
                alloc(0, tiny(300)),
                Free { pick: 0 },
                StaleFree { pick: 0 },
                StaleRecord { pick: 0, stream: 1 },
                alloc(0, tiny(300)),
                StaleFree { pick: 0 },
                alloc(1, tiny(300)),
                Free { pick: 0 },
                StaleFree { pick: 1 },
                alloc(1, tiny(200)),
                StaleRecord { pick: 1, stream: 2 },
                StaleFree { pick: 0 },
            ],
        ),
    ]
    .into_iter()
    .chain(fixed())
    .collect()
}

/// The inputs of the pool bugs `stream_order` found (fixed in 80c0b6e; `docs/fuzzing.md`,
/// "stream_order"), minimised, kept as seeds: each ran into the bug at once.
///
/// 1. Memory given back to the driver during a capture: a wholly free plain region with
///    `cuMemFree` (which synchronises the device, and, refused, left the region lost to the
///    pool) or a virtual-memory region or its free tail after `cuCtxSynchronize`; either
///    invalidated the capture. Six ways in, and what followed from one of them: with two
///    captures invalidated, both read `u64::MAX` to the pool (`ask_capture`), equal, and it
///    made one stream wait for the other's batch (`CUDA_ERROR_STREAM_CAPTURE_ISOLATION`).
/// 2. No retry after a trim that only shrank a virtual-memory region: out of memory while the
///    same request asked again succeeds.
fn fixed() -> Vec<(&'static str, Setup, Vec<StreamOp>)> {
    // Virtual-memory regions of 128 KiB chunks, 1 MiB growth, `release_above` set.
    const VMM: Setup = Setup {
        regions: 3,
        policy: 0x40,
        ..BASE
    };
    vec![
        (
            "fixed-capture-growth-trim",
            BASE,
            vec![
                BeginCapture { stream: 1 },
                alloc(1, kib16(4)),
                Free { pick: 0 },
                alloc(1, mib(20)),
            ],
        ),
        (
            "fixed-capture-trim",
            BASE,
            vec![
                BeginCapture { stream: 1 },
                alloc(1, kib16(4)),
                Free { pick: 0 },
                Trim,
            ],
        ),
        (
            "fixed-capture-bypass-free",
            Setup {
                policy: 0b1000,
                ..BASE
            },
            vec![
                BeginCapture { stream: 1 },
                alloc(1, mib(2)),
                Free { pick: 0 },
            ],
        ),
        (
            "fixed-capture-trim-above",
            Setup {
                policy: 0b10_0000,
                ..BASE
            },
            vec![
                BeginCapture { stream: 1 },
                alloc(1, kib16(32)),
                Free { pick: 0 },
            ],
        ),
        (
            "fixed-capture-vmm-trim",
            VMM,
            vec![
                BeginCapture { stream: 1 },
                alloc(1, kib16(4)),
                Free { pick: 0 },
                Trim,
            ],
        ),
        (
            "fixed-capture-vmm-shrink",
            VMM,
            vec![BeginCapture { stream: 1 }, alloc(1, tiny(1)), Trim],
        ),
        (
            // Streams 1 and 2 capture; a 16 MiB block freed on stream 2 fills the card; a
            // 1 MiB request on stream 1 could not take it (another capture) nor grow, and the
            // trim-and-retry invalidated both captures.
            "fixed-capture-two-invalidated",
            Setup {
                regions: 0,
                growth: 6,
                policy: 0xff,
                granule: 0xff,
                batch: 0xff,
                batch_age: 0xff,
                clock: 0xff,
                speed: 0xff,
                streams: 3,
                ..BASE
            },
            vec![
                BeginCapture { stream: 1 },
                alloc(2, Size::new(255, 65535)),
                alloc(1, tiny(5)),
                Free { pick: 0 },
                BeginCapture { stream: 1 },
                alloc(1, mib(1)),
            ],
        ),
        (
            // A 16 MiB card, one small block in a 2 MiB virtual-memory region; 15 MiB cannot
            // get a region of its own (14 MiB free), the trim shrinks the first region to one
            // chunk, and the request must be tried again then.
            "fixed-vmm-retry-after-shrink",
            Setup {
                regions: 3,
                growth: 3,
                policy: 0x4c,
                streams: 0,
                ..BASE
            },
            vec![alloc(0, tiny(1)), alloc(0, mib(15))],
        ),
    ]
}

fn corpus_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("corpus/stream_order")
}

#[test]
fn seeds_decode_as_written_and_run_clean() {
    for (name, setup, ops) in scenarios() {
        let bytes = encode(&setup, &ops);
        let input = StreamInput::arbitrary_take_rest(Unstructured::new(&bytes)).unwrap();
        assert_eq!(
            input,
            StreamInput { setup, ops },
            "{name}: decodes differently"
        );
        tagalloc_fuzz::run_stream_order(&input);
    }
}

#[test]
fn seeds_are_in_the_corpus() {
    let dir = corpus_dir();
    let write = std::env::var_os("TAGALLOC_WRITE_SEEDS").is_some();
    if write {
        fs::create_dir_all(&dir).unwrap();
    }
    for (name, setup, ops) in scenarios() {
        let bytes = encode(&setup, &ops);
        let path = dir.join(name);
        if write {
            fs::write(&path, &bytes).unwrap();
        }
        let committed = fs::read(&path).unwrap_or_else(|e| {
            panic!("{}: {e} (TAGALLOC_WRITE_SEEDS=1 writes it)", path.display())
        });
        assert_eq!(committed, bytes, "{}: out of date", path.display());
    }
}

/// Between them, the seeds reach every outcome and every path of the pool the counters show.
#[test]
fn seeds_reach_every_path() {
    let mut sum = Tally::default();
    for (name, setup, ops) in scenarios() {
        let t = tagalloc_fuzz::streams::run(&StreamInput { setup, ops });
        if std::env::var_os("TAGALLOC_SEEDS_VERBOSE").is_some() {
            eprintln!("{name}: {t:?}");
        }
        sum.allocs += t.allocs;
        sum.exhausted += t.exhausted;
        sum.capturing += t.capturing;
        sum.stale_refused += t.stale_refused;
        sum.forgotten += t.forgotten;
        sum.captures += t.captures;
        sum.recorded += t.recorded;
        sum.checked_uses += t.checked_uses;
        let (a, b) = (&mut sum.pool, t.pool);
        a.reused_pending += b.reused_pending;
        a.reused_across += b.reused_across;
        a.events_recorded += b.events_recorded;
        a.event_queries += b.event_queries;
        a.batches_released += b.batches_released;
        a.stream_waits += b.stream_waits;
        a.synchronizations += b.synchronizations;
        a.exhaustion_retries += b.exhaustion_retries;
    }
    eprintln!("all seeds: {sum:?}");
    let p = &sum.pool;
    for (what, n) in [
        ("allocations", sum.allocs),
        ("exhaustion", sum.exhausted),
        ("capturing refusals", sum.capturing),
        ("stale refusals", sum.stale_refused),
        ("forgotten streams", sum.forgotten),
        ("captures", sum.captures),
        ("record_stream", sum.recorded),
        ("uses checked", sum.checked_uses),
        ("reuse of pending blocks", p.reused_pending),
        ("reuse across streams", p.reused_across),
        ("event queries", p.event_queries),
        ("batches released", p.batches_released),
        ("device-side waits", p.stream_waits),
        ("synchronisations", p.synchronizations),
        ("exhaustion retries", p.exhaustion_retries),
    ] {
        assert!(n > 0, "no seed reaches {what}");
    }
}

/// `TAGALLOC_REPLAY=<file> cargo test --test stream_seeds replay -- --nocapture`: prints an
/// input (a crash libFuzzer wrote, say) as its set-up and operations, then runs it. Given a
/// directory (a corpus), runs every input in it and prints what they did in all (how many
/// ended early at a known bug, say).
#[test]
fn replay() {
    let Some(path) = std::env::var_os("TAGALLOC_REPLAY") else {
        return;
    };
    let path = PathBuf::from(path);
    if path.is_dir() {
        let (mut runs, mut sum) = (0, Tally::default());
        for e in fs::read_dir(&path).unwrap() {
            let bytes = fs::read(e.unwrap().path()).unwrap();
            let Ok(input) = StreamInput::arbitrary_take_rest(Unstructured::new(&bytes)) else {
                continue;
            };
            let t = tagalloc_fuzz::streams::run(&input);
            runs += 1;
            sum.allocs += t.allocs;
            sum.exhausted += t.exhausted;
            sum.capturing += t.capturing;
            sum.stale_refused += t.stale_refused;
            sum.forgotten += t.forgotten;
            sum.captures += t.captures;
            sum.recorded += t.recorded;
            sum.checked_uses += t.checked_uses;
        }
        eprintln!("{runs} inputs: {sum:?}");
        return;
    }
    let bytes = fs::read(&path).unwrap();
    let input = StreamInput::arbitrary_take_rest(Unstructured::new(&bytes)).unwrap();
    let plan = tagalloc_fuzz::streams::Plan::new(&input.setup);
    eprintln!("{:?}\n{:?}", input.setup, plan);
    for (i, op) in input.ops.iter().enumerate() {
        eprintln!("{i:3}: {op:?}");
    }
    tagalloc_fuzz::run_stream_order(&input);
}
