//! Static planning: golden cases from TensorFlow Lite's tests, the validator on good and bad
//! plans, and property tests on random instances against a brute-force optimum.

extern crate std;
use std::vec;
use std::vec::Vec;

use proptest::prelude::*;

use crate::plan::place::{best_fit, WORK_LIMIT};
use crate::plan::{
    greedy_by_breadth, greedy_by_peak, greedy_by_size, lower_bound, search, validate, Buffer, Plan,
    PlanError, SearchOptions,
};

/// TensorFlow Lite's usage records `(size, first_task, last_task)` (inclusive) as buffers.
fn records(r: &[(u64, u64, u64)]) -> Vec<Buffer> {
    r.iter()
        .enumerate()
        .map(|(i, &(size, first, last))| Buffer::new(i as u64, size, first, last + 1))
        .collect()
}

/// `ChainRecords` of `tensorflow/lite/delegates/gpu/common/memory_management_test.cc`.
const CHAIN: [(u64, u64, u64); 5] = [(16, 0, 1), (8, 1, 2), (64, 2, 3), (32, 3, 4), (8, 4, 5)];

/// `ComplexRecords` of the same file.
const COMPLEX: [(u64, u64, u64); 9] = [
    (32, 0, 1),
    (32, 1, 4),
    (8, 2, 5),
    (16, 3, 5),
    (8, 4, 5),
    (64, 5, 7),
    (8, 6, 8),
    (8, 7, 8),
    (16, 8, 9),
];

fn exhaustive() -> SearchOptions {
    SearchOptions::default()
}

#[test]
fn tflite_chain_greedy_by_size() {
    let b = records(&CHAIN);
    let plan = greedy_by_size(&b).unwrap();
    assert_eq!(plan.offsets, [0, 64, 0, 64, 0]);
    assert_eq!(plan.arena, 96);
    validate(&b, &plan).unwrap();
    assert_eq!(lower_bound(&b).unwrap(), 96);
}

#[test]
fn tflite_complex_greedy_by_size() {
    let b = records(&COMPLEX);
    let plan = greedy_by_size(&b).unwrap();
    assert_eq!(plan.offsets, [0, 32, 80, 64, 88, 0, 64, 72, 0]);
    assert_eq!(plan.arena, 96);
    validate(&b, &plan).unwrap();
    // 32 + 8 + 16 + 8 + 32 live at task 4.
    assert_eq!(lower_bound(&b).unwrap(), 96);
}

#[test]
fn tflite_offsets_with_alignment() {
    // `OffsetAssignmentWithAlignment`: every offset aligned to 128.
    let b: Vec<Buffer> = records(&CHAIN)
        .into_iter()
        .map(|b| b.with_align(128))
        .collect();
    let plan = greedy_by_size(&b).unwrap();
    assert_eq!(plan.offsets, [0, 128, 0, 128, 0]);
    assert_eq!(plan.arena, 160);
    validate(&b, &plan).unwrap();
    let found = search(&b, &exhaustive(), &mut || false).unwrap();
    validate(&b, &found.plan).unwrap();
    assert_eq!(found.plan.arena, 160);
    assert!(
        found.optimal,
        "160 is the lower bound rounded up to the grain"
    );
}

/// Greedy by peak on hand-checked cases: the peak's buffers stacked in start order, the rest
/// by size into the tightest gap.
#[test]
fn greedy_by_peak_golden() {
    // Peak at task 3 (64 + 32): buffers 2 and 3 stacked at 0 and 64; then 0, 1, 4 by size.
    let b = records(&CHAIN);
    let plan = greedy_by_peak(&b).unwrap();
    assert_eq!(plan.offsets, [0, 64, 0, 64, 0]);
    assert_eq!(plan.arena, 96);
    validate(&b, &plan).unwrap();

    // The module's example: 16 + 64 + 8 live over [2, 3) are stacked in start order, and the
    // 32 that follows them fits under the 8.
    let b = [
        Buffer::new(0, 16, 0, 4),
        Buffer::new(1, 64, 1, 3),
        Buffer::new(2, 8, 2, 6),
        Buffer::new(3, 32, 4, 6),
    ];
    let plan = greedy_by_peak(&b).unwrap();
    assert_eq!(plan.offsets, [0, 16, 80, 0]);
    assert_eq!(plan.arena, 88);
    validate(&b, &plan).unwrap();

    // Nested lifetimes under a peak at moment 9 (10 + 50 + 40): buffers 0, 3 and 4 are
    // stacked at 0, 10 and 60 in start order; then 2 (30) fits on 0 below 3's lifetime, and 1
    // (20), which conflicts with 0, 2 and 3, goes on top of 3 at 60.
    let b = [
        Buffer::new(0, 10, 0, 10),
        Buffer::new(1, 20, 1, 9),
        Buffer::new(2, 30, 2, 8),
        Buffer::new(3, 50, 8, 10),
        Buffer::new(4, 40, 9, 10),
    ];
    let peak = greedy_by_peak(&b).unwrap();
    validate(&b, &peak).unwrap();
    assert_eq!(peak.offsets, [0, 60, 10, 10, 60]);
    assert_eq!(peak.arena, 100);
    assert_eq!(peak.arena, lower_bound(&b).unwrap());

    // Empty and zero-sized input.
    assert_eq!(greedy_by_peak(&[]).unwrap().arena, 0);
    let z = [Buffer::new(0, 0, 0, 1), Buffer::new(1, 0, 0, 2)];
    assert_eq!(
        greedy_by_peak(&z).unwrap(),
        Plan {
            offsets: vec![0, 0],
            arena: 0
        }
    );
}

#[test]
fn search_meets_the_bound_on_the_golden_cases() {
    for r in [&CHAIN[..], &COMPLEX[..]] {
        let b = records(r);
        let found = search(&b, &exhaustive(), &mut || false).unwrap();
        validate(&b, &found.plan).unwrap();
        assert_eq!(found.plan.arena, 96);
        assert!(found.optimal);
        let breadth = greedy_by_breadth(&b).unwrap();
        validate(&b, &breadth).unwrap();
    }
}

#[test]
fn search_matches_brute_force_on_a_small_case() {
    let b = [
        Buffer::new(0, 3, 0, 2),
        Buffer::new(1, 4, 1, 3),
        Buffer::new(2, 3, 2, 4),
        Buffer::new(3, 2, 0, 1),
        Buffer::new(4, 2, 3, 4),
    ];
    let greedy = greedy_by_size(&b).unwrap();
    validate(&b, &greedy).unwrap();
    let found = search(&b, &exhaustive(), &mut || false).unwrap();
    validate(&b, &found.plan).unwrap();
    assert_eq!(found.plan.arena, brute_force(&b));
    assert!(found.plan.arena <= greedy.arena);
    assert!(found.optimal);
}

#[test]
fn empty_and_zero_sized() {
    let none: [Buffer; 0] = [];
    assert_eq!(lower_bound(&none).unwrap(), 0);
    for plan in [
        greedy_by_size(&none).unwrap(),
        greedy_by_breadth(&none).unwrap(),
        search(&none, &exhaustive(), &mut || false).unwrap().plan,
    ] {
        assert_eq!(plan.arena, 0);
        validate(&none, &plan).unwrap();
    }
    let b = [
        Buffer::new(0, 0, 0, 5),
        Buffer::new(1, 8, 0, 5).with_align(8),
    ];
    let found = search(&b, &exhaustive(), &mut || false).unwrap();
    assert_eq!(found.plan.arena, 8);
    validate(&b, &found.plan).unwrap();
    // A zero-size buffer may sit anywhere, even inside a live one.
    validate(
        &b,
        &Plan {
            offsets: vec![3, 0],
            arena: 8,
        },
    )
    .unwrap();
}

#[test]
fn validate_rejects_bad_plans() {
    let b = [
        Buffer::new(0, 8, 0, 2),
        Buffer::new(1, 8, 1, 3).with_align(8),
        Buffer::new(2, 8, 2, 4),
    ];
    let good = Plan {
        offsets: vec![0, 8, 0],
        arena: 16,
    };
    assert_eq!(validate(&b, &good), Ok(()));
    // Lifetimes are half-open: 0 (0..2) and 2 (2..4) share offset 0 without overlapping.
    let overlap = Plan {
        offsets: vec![0, 8, 12],
        arena: 20,
    };
    assert_eq!(
        validate(&b, &overlap),
        Err(PlanError::Overlap {
            first: 1,
            second: 2
        })
    );
    let overlap_below = Plan {
        offsets: vec![8, 8, 0],
        arena: 16,
    };
    assert_eq!(
        validate(&b, &overlap_below),
        Err(PlanError::Overlap {
            first: 0,
            second: 1
        })
    );
    let same_offset = Plan {
        offsets: vec![0, 0, 16],
        arena: 24,
    };
    assert!(matches!(
        validate(&b, &same_offset),
        Err(PlanError::Overlap { .. })
    ));
    let misaligned = Plan {
        offsets: vec![0, 12, 0],
        arena: 20,
    };
    assert_eq!(
        validate(&b, &misaligned),
        Err(PlanError::Misaligned { index: 1 })
    );
    let short_arena = Plan {
        offsets: vec![0, 8, 0],
        arena: 15,
    };
    assert_eq!(
        validate(&b, &short_arena),
        Err(PlanError::ArenaMismatch {
            claimed: 15,
            actual: 16
        })
    );
    let padded_arena = Plan {
        offsets: vec![0, 8, 0],
        arena: 17,
    };
    assert!(matches!(
        validate(&b, &padded_arena),
        Err(PlanError::ArenaMismatch { .. })
    ));
    let short = Plan {
        offsets: vec![0, 8],
        arena: 16,
    };
    assert_eq!(
        validate(&b, &short),
        Err(PlanError::WrongLength {
            buffers: 3,
            offsets: 2
        })
    );
    let overflow = Plan {
        offsets: vec![u64::MAX, 8, 0],
        arena: 16,
    };
    assert_eq!(validate(&b, &overflow), Err(PlanError::TooLarge));
}

#[test]
fn bad_input_is_an_error() {
    let empty_life = [Buffer::new(0, 8, 3, 3)];
    let bad_align = [Buffer::new(0, 8, 0, 1).with_align(12)];
    let zero_align = [Buffer::new(0, 8, 0, 1).with_align(0)];
    let huge = [Buffer::new(0, u64::MAX, 0, 1), Buffer::new(1, 1, 5, 6)];
    // Small sizes, but two alignments of 2^63: the sizes do not overflow, the padding does.
    let aligned = [
        Buffer::new(0, 8, 0, 2).with_align(16),
        Buffer::new(1, 8, 0, 2).with_align(1 << 63),
        Buffer::new(2, 8, 1, 3).with_align(1 << 63),
    ];
    for (b, e) in [
        (&empty_life[..], PlanError::EmptyLifetime { index: 0 }),
        (&bad_align[..], PlanError::BadAlign { index: 0 }),
        (&zero_align[..], PlanError::BadAlign { index: 0 }),
        (&huge[..], PlanError::TooLarge),
        (&aligned[..], PlanError::AlignTooLarge { index: 1 }),
    ] {
        assert_eq!(lower_bound(b), Err(e));
        assert_eq!(greedy_by_size(b), Err(e));
        assert_eq!(greedy_by_breadth(b), Err(e));
        assert_eq!(search(b, &exhaustive(), &mut || false), Err(e));
        if !matches!(e, PlanError::TooLarge | PlanError::AlignTooLarge { .. }) {
            let plan = Plan {
                offsets: vec![0; b.len()],
                arena: 8,
            };
            assert_eq!(validate(b, &plan), Err(e));
        }
    }
}

/// The smallest arena over every order of placing the buffers, each on top of the highest
/// conflicting buffer placed before it (aligned). Every plan where no buffer can slide down is
/// built this way by the order of its offsets, and some optimal plan is one, so this is the
/// optimum. `O(n! n²)`: tiny instances only. Written without the planner's code.
fn brute_force(b: &[Buffer]) -> u64 {
    fn go(b: &[Buffer], order: &mut Vec<usize>, used: &mut Vec<bool>, best: &mut u64) {
        if order.len() == b.len() {
            let mut off = vec![0u64; b.len()];
            let mut arena = 0;
            for (k, &i) in order.iter().enumerate() {
                let mut top = 0;
                for &j in &order[..k] {
                    let live = b[i].start < b[j].end && b[j].start < b[i].end;
                    if live && b[i].size > 0 && b[j].size > 0 {
                        top = top.max(off[j] + b[j].size);
                    }
                }
                off[i] = top.div_ceil(b[i].align) * b[i].align;
                arena = arena.max(off[i] + b[i].size);
            }
            *best = (*best).min(arena);
            return;
        }
        for i in 0..b.len() {
            if !used[i] {
                used[i] = true;
                order.push(i);
                go(b, order, used, best);
                order.pop();
                used[i] = false;
            }
        }
    }
    let mut best = u64::MAX;
    go(b, &mut Vec::new(), &mut vec![false; b.len()], &mut best);
    best
}

/// Random buffers: `n` of them, sizes up to `max_size` (some zero), lifetimes within
/// `0..horizon`, alignments 1 to 8.
fn instance(n: usize, max_size: u64, horizon: u64) -> impl Strategy<Value = Vec<Buffer>> {
    prop::collection::vec(
        (0..=max_size, 0..horizon, 1..=horizon, 0u32..4, 0u32..4),
        0..=n,
    )
    .prop_map(move |v| {
        v.into_iter()
            .enumerate()
            .map(|(i, (size, start, len, align, zero))| {
                let size = if zero == 0 && i % 3 == 0 { 0 } else { size };
                Buffer::new(i as u64, size, start, start + len).with_align(1 << align)
            })
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// On tiny instances the exhaustive search proves the brute-force optimum, and a search
    /// cut short never claims optimality it does not have.
    #[test]
    fn search_is_exact_on_tiny_instances(b in instance(6, 12, 6), limit in 1u64..40) {
        let optimum = brute_force(&b);
        let full = search(&b, &exhaustive(), &mut || false).unwrap();
        prop_assert_eq!(validate(&b, &full.plan), Ok(()));
        prop_assert!(full.optimal, "an unlimited search proves its plan");
        prop_assert_eq!(full.plan.arena, optimum);
        prop_assert!(full.lower_bound <= optimum);

        let cut = search(&b, &SearchOptions { node_limit: limit, ..exhaustive() }, &mut || false)
            .unwrap();
        prop_assert_eq!(validate(&b, &cut.plan), Ok(()));
        prop_assert!(cut.plan.arena >= optimum);
        prop_assert!(cut.lower_bound <= optimum, "a proven bound is a bound");
        prop_assert_eq!(cut.optimal, cut.plan.arena == cut.lower_bound);
        if cut.optimal {
            prop_assert_eq!(cut.plan.arena, optimum);
        }
        prop_assert!(cut.nodes <= limit + 64, "the node limit holds (within one candidate list)");
    }

    /// On larger instances, with a node limit: every plan is valid, the search never does
    /// worse than either heuristic, and its bounds are consistent.
    #[test]
    fn search_never_worse_than_heuristics(b in instance(40, 64, 24), limit in 0u64..3000) {
        let lb = lower_bound(&b).unwrap();
        let by_size = greedy_by_size(&b).unwrap();
        let by_breadth = greedy_by_breadth(&b).unwrap();
        let by_peak = greedy_by_peak(&b).unwrap();
        prop_assert_eq!(validate(&b, &by_size), Ok(()));
        prop_assert_eq!(validate(&b, &by_breadth), Ok(()));
        prop_assert_eq!(validate(&b, &by_peak), Ok(()));
        let found = search(&b, &SearchOptions { node_limit: limit, ..exhaustive() }, &mut || false)
            .unwrap();
        prop_assert_eq!(validate(&b, &found.plan), Ok(()));
        prop_assert!(found.plan.arena <= by_size.arena.min(by_breadth.arena).min(by_peak.arena));
        prop_assert!(lb <= found.lower_bound && found.lower_bound <= found.plan.arena);
        prop_assert_eq!(found.optimal, found.plan.arena == found.lower_bound);
        prop_assert!(by_size.arena >= lb && by_breadth.arena >= lb && by_peak.arena >= lb);
    }

    /// Greedy by peak's plans validate and never beat the lower bound, with and without
    /// alignment.
    #[test]
    fn greedy_by_peak_plans_validate(
        b in instance(40, 64, 24),
        aligns in prop::collection::vec(0u32..4, 40),
    ) {
        let lb = lower_bound(&b).unwrap();
        let plan = greedy_by_peak(&b).unwrap();
        prop_assert_eq!(validate(&b, &plan), Ok(()));
        prop_assert!(plan.arena >= lb);
        let aligned: Vec<Buffer> =
            b.iter().zip(&aligns).map(|(x, &a)| x.with_align(1 << a)).collect();
        let plan = greedy_by_peak(&aligned).unwrap();
        prop_assert_eq!(validate(&aligned, &plan), Ok(()));
    }

    /// The validator agrees with a pairwise check on arbitrary (mostly invalid) plans.
    #[test]
    fn validate_matches_pairwise(b in instance(8, 8, 6), raw in prop::collection::vec(0u64..24, 8)) {
        let offsets: Vec<u64> = raw.iter().take(b.len()).copied().collect();
        prop_assume!(offsets.len() == b.len());
        let arena = b.iter().zip(&offsets).map(|(b, o)| o + b.size).max().unwrap_or(0);
        let plan = Plan { offsets: offsets.clone(), arena };
        let mut expected = Ok(());
        for i in 0..b.len() {
            if !offsets[i].is_multiple_of(b[i].align) {
                expected = Err(());
            }
            for j in 0..i {
                let live = b[i].start < b[j].end && b[j].start < b[i].end;
                let bytes = offsets[i] < offsets[j] + b[j].size && offsets[j] < offsets[i] + b[i].size;
                if live && bytes && b[i].size > 0 && b[j].size > 0 {
                    expected = Err(());
                }
            }
        }
        prop_assert_eq!(validate(&b, &plan).map_err(|_| ()), expected);
    }
}

/// The placement as it was written before its index (TensorFlow Lite's scan of every buffer
/// placed, `O(n²)`): the oracle the indexed one must match offset for offset.
fn best_fit_by_scan(buffers: &[Buffer], order: &[u32]) -> Plan {
    let align_up = |x: u64, a: u64| x.div_ceil(a) * a;
    let mut offsets = vec![0u64; buffers.len()];
    let mut placed: Vec<u32> = Vec::new();
    let mut arena = 0u64;
    for &i in order {
        let b = &buffers[i as usize];
        if b.size == 0 {
            continue;
        }
        let (mut prev, mut best) = (0u64, None::<(u64, u64)>);
        for &p in &placed {
            let q = &buffers[p as usize];
            if q.end <= b.start || b.end <= q.start {
                continue;
            }
            let po = offsets[p as usize];
            let at = align_up(prev, b.align);
            if po >= at && po - at >= b.size && best.is_none_or(|(g, _)| po - prev < g) {
                best = Some((po - prev, at));
            }
            prev = prev.max(po + q.size);
        }
        let off = best.map_or_else(|| align_up(prev, b.align), |(_, at)| at);
        offsets[i as usize] = off;
        arena = arena.max(off + b.size);
        let pos = placed.partition_point(|&p| offsets[p as usize] <= off);
        placed.insert(pos, i);
    }
    Plan { offsets, arena }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: if cfg!(miri) { 8 } else { 300 },
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// The indexed placement finds the very gaps the quadratic scan finds, in any order.
    #[test]
    fn indexed_placement_matches_the_scan(
        b in instance(60, 64, 30),
        seed in any::<u64>(),
    ) {
        let mut order: Vec<u32> = (0..b.len() as u32).collect();
        // A seeded shuffle (xorshift), so orders other than the heuristics' are tried.
        let mut x = seed | 1;
        for i in (1..order.len()).rev() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            order.swap(i, (x % (i as u64 + 1)) as usize);
        }
        let placed = best_fit(&b, &order, WORK_LIMIT, &mut || false);
        prop_assert_eq!(placed.stacked, 0);
        prop_assert!(!placed.stopped);
        prop_assert_eq!(placed.plan, best_fit_by_scan(&b, &order));
    }

    /// Past the work cap (or when the monitor stops it) the buffers left go on the skyline:
    /// still valid, each exactly on top of the highest conflicting buffer placed before it.
    #[test]
    fn stacked_placement_is_valid_and_tight(
        b in instance(60, 64, 30),
        limit in 0u64..40,
        stop_after in 0u32..3,
    ) {
        let order: Vec<u32> = (0..b.len() as u32).collect();
        let placed = best_fit(&b, &order, limit, &mut || false);
        prop_assert_eq!(validate(&b, &placed.plan), Ok(()));
        let plan = &placed.plan;
        let mut stacked = 0;
        for (k, &i) in order.iter().enumerate() {
            let x = &b[i as usize];
            if x.size == 0 {
                continue;
            }
            let top = order[..k]
                .iter()
                .filter(|&&j| {
                    let y = &b[j as usize];
                    y.size > 0 && y.start < x.end && x.start < y.end
                })
                .map(|&j| plan.offsets[j as usize] + b[j as usize].size)
                .max()
                .unwrap_or(0);
            let on_top = top.div_ceil(x.align) * x.align;
            if limit == 0 {
                // Nothing searched for gaps: every buffer sits right on top.
                prop_assert_eq!(plan.offsets[i as usize], on_top);
            }
            stacked += usize::from(plan.offsets[i as usize] == on_top);
        }
        prop_assert!(stacked >= placed.stacked);
        if limit == 0 {
            prop_assert_eq!(placed.stacked, b.iter().filter(|x| x.size > 0).count());
        }
        // A monitor that stops the gap search: valid too, and it says so.
        let mut calls = 0;
        let stopping = best_fit(&b, &order, WORK_LIMIT, &mut || {
            calls += 1;
            calls > stop_after
        });
        prop_assert_eq!(validate(&b, &stopping.plan), Ok(()));
    }
}

#[test]
fn all_live_past_the_work_cap_is_stacked_to_the_bound() {
    let n = if cfg!(miri) { 200u64 } else { 3000 };
    let b: Vec<Buffer> = (0..n).map(|i| Buffer::new(i, 1 + i % 97, 0, 1)).collect();
    let order: Vec<u32> = (0..b.len() as u32).collect();
    let placed = best_fit(&b, &order, n * 4, &mut || false);
    assert!(placed.stacked > 0, "the cap was reached");
    assert_eq!(validate(&b, &placed.plan), Ok(()));
    assert_eq!(placed.plan.arena, lower_bound(&b).unwrap());
}

/// A monitor that says stop at once: the search still returns valid plans (its heuristics
/// stacked), tries no node, and says how many buffers each heuristic stacked.
#[test]
fn a_search_stopped_at_once_returns_valid_stacked_plans() {
    let b: Vec<Buffer> = (0..500u64)
        .map(|i| Buffer::new(i, 1 + (i * 37) % 64, i % 50, i % 50 + 1 + i % 7))
        .collect();
    let found = search(&b, &exhaustive(), &mut || true).unwrap();
    assert_eq!(validate(&b, &found.plan), Ok(()));
    assert_eq!(found.nodes, 0);
    for (plan, &stacked) in found.greedy.iter().zip(&found.greedy_stacked) {
        assert_eq!(validate(&b, plan), Ok(()));
        assert!(stacked > 0, "the gap search was stopped");
        assert!(found.plan.arena <= plan.arena);
    }
    // Unstopped (a few nodes only), no buffer is stacked and the plans are the public
    // heuristics'.
    let few = SearchOptions {
        node_limit: 1000,
        ..exhaustive()
    };
    let found = search(&b, &few, &mut || false).unwrap();
    assert_eq!(found.greedy_stacked, [0; 3]);
    assert_eq!(found.greedy[0], greedy_by_size(&b).unwrap());
    assert_eq!(found.greedy[1], greedy_by_breadth(&b).unwrap());
    assert_eq!(found.greedy[2], greedy_by_peak(&b).unwrap());
}
