//! The misuse target's steps that need a shared heap or the limits of the size arithmetic,
//! run on both heaps from hand-made inputs (the seed corpus reaches them too, but only as the
//! fuzzer happened to find them): every kind of queued free, each re-entrant call, a batch
//! that overfills the ring, and each kind of extreme request and constructor.

use tagalloc_fuzz::misuse::{Bad, Extreme, Misuse, QueuedFree, Step, MAX_QUEUED};
use tagalloc_fuzz::ops::{Align, Config, Input, Op, Size};

fn alloc(size: usize) -> Step {
    Step::Op(Op::Alloc {
        size: Size(size),
        align: Align(16),
    })
}

fn free(pick: u16) -> Step {
    Step::Op(Op::Free { pick })
}

/// Allocations of many sizes, some freed (so that there are stale handles), then `steps`.
fn input(table: u8, steps: Vec<Step>) -> Input<Step> {
    let mut ops: Vec<Step> = (1..40).map(|k| alloc(k * 37)).collect();
    ops.extend([free(3), free(11), free(0), free(20)]);
    ops.extend(steps);
    Input {
        config: Config {
            granule: 0,
            table,
            first_region: 7,
        },
        ops,
    }
}

/// Every kind of bad free, as queued frees.
fn bad_frees() -> Vec<QueuedFree> {
    vec![
        QueuedFree::Bad(Bad::Stale { pick: 0 }),
        QueuedFree::Bad(Bad::Twice { pick: 5 }),
        QueuedFree::Bad(Bad::Interior { pick: 7, offset: 4 }),
        QueuedFree::Bad(Bad::Interior { pick: 8, offset: 3 }),
        QueuedFree::Bad(Bad::WrongSize {
            pick: 9,
            size: Size(100_000),
        }),
        QueuedFree::Bad(Bad::Foreign { raw: 0x1234_5672 }),
        QueuedFree::Bad(Bad::Foreign { raw: 0x1234_5671 }),
    ]
}

fn queued_steps() -> Vec<Step> {
    let mut steps = Vec::new();
    // Good and bad frees mixed, within the ring, with every re-entrant call.
    let mut frees = vec![QueuedFree::Live { pick: 2 }];
    frees.extend(bad_frees());
    steps.push(Step::Misuse(Misuse::Queued {
        frees,
        reenter: 0xf,
    }));
    // More frees than the ring holds: the last ones are refused as re-entrant and not done.
    let frees = (0..MAX_QUEUED as u16)
        .map(|pick| QueuedFree::Live { pick })
        .collect();
    steps.push(Step::Misuse(Misuse::Queued { frees, reenter: 1 }));
    // The same live allocation twice, and a batch of misuses alone.
    let frees = vec![QueuedFree::Live { pick: 1 }, QueuedFree::Live { pick: 1 }];
    steps.push(Step::Misuse(Misuse::Queued { frees, reenter: 2 }));
    steps.push(Step::Misuse(Misuse::Queued {
        frees: bad_frees(),
        reenter: 0,
    }));
    steps
}

fn extreme_steps() -> Vec<Step> {
    let mut steps = Vec::new();
    for which in 0..4u8 {
        for k in 0..16u8 {
            steps.push(Step::Misuse(Misuse::Extreme(Extreme {
                which,
                pick: u16::from(k),
                size: k,
                align: k.wrapping_mul(3),
                salt: 0x9e37_79b9_7f4a_7c15u64.rotate_left(u32::from(k) * 5) | u64::from(k & 1),
            })));
        }
    }
    steps
}

#[test]
fn queued_frees_on_both_heaps() {
    // Even `table`: the inline heap; odd: the detached one (growable below 128).
    for table in [0, 1, 201] {
        tagalloc_fuzz::run_misuse(&input(table, queued_steps()));
    }
}

#[test]
fn extremes_on_both_heaps() {
    for table in [0, 1] {
        tagalloc_fuzz::run_misuse(&input(table, extreme_steps()));
    }
}

#[test]
fn a_block_of_a_heap_over_the_same_offsets_is_foreign() {
    // The first block of a fresh heap over the same first region as this heap's: the same
    // address, size and record, another heap. `raw`: a twin heap's block (bit 1), kept live
    // there (bit 0), of `raw % 5000 + 1` bytes.
    let raw = 999;
    let steps = |realloc| {
        vec![
            alloc(1000),
            Step::Misuse(Misuse::Now {
                bad: Bad::Foreign { raw },
                realloc,
            }),
            Step::Misuse(Misuse::Queued {
                frees: vec![QueuedFree::Bad(Bad::Foreign { raw })],
                reenter: 0,
            }),
        ]
    };
    for realloc in [false, true] {
        let input = Input {
            config: Config {
                granule: 0,
                table: 1,
                first_region: 7,
            },
            ops: steps(realloc),
        };
        tagalloc_fuzz::run_misuse(&input);
    }
}
