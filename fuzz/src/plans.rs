//! The static planner (`tagalloc::plan::solve`) on problems with constraints: intervals or a
//! dependency graph on streams, aliases (views and in-place writes), contiguous groups, pins
//! and spaces with capacities, all sizes and counts small so that a run is quick.
//!
//! The oracle is `check_layout`, written apart from the solver (its own alias walk, its own
//! reachability, an address sweep): every layout `solve` or `arrange` returns must pass it,
//! be no smaller than `problem_lower_bound`, and `solve`'s must be the smallest it tried.
//! Refusals are fine (most random aliases are unsafe); a panic, an overflow or a layout that
//! fails the check is the bug.

use arbitrary::Arbitrary;
use tagalloc::plan::{
    arrange, check_layout, problem_lower_bound, solve, Alias, Fit, Graph, Group, Item, Lifetimes,
    Objects, Problem, SearchOptions, SolveOptions, Space, Strategy, StrategyOrder, Uses,
};

/// One input: the problem's shape.
#[derive(Arbitrary, Debug)]
pub struct PlanInput {
    graph: bool,
    streams: u8,
    buffers: Vec<Buf>,
    groups: Vec<(Vec<u8>, u8)>,
    capacities: Vec<Option<u16>>,
    edges: Vec<(u8, u8)>,
}

/// One buffer, as bytes to decode.
#[derive(Arbitrary, Debug)]
pub struct Buf {
    size: u16,
    align_log: u8,
    start: u8,
    len: u8,
    alias: Option<(u8, u16, bool)>,
    pin: Option<u16>,
    spaces: Option<Vec<u8>>,
    readers: Vec<u8>,
    output: bool,
}

const BUFFERS: usize = 24;
const NODES: usize = 16;

/// Decodes the input into a problem (bounded sizes and counts; indices taken modulo).
pub fn problem(input: &PlanInput) -> Problem {
    let bufs = &input.buffers[..input.buffers.len().min(BUFFERS)];
    let n = bufs.len();
    let spaces: Vec<Space> = input
        .capacities
        .iter()
        .take(3)
        .map(|c| Space {
            capacity: c.map(u64::from),
        })
        .chain(core::iter::once(Space::default()))
        .collect();
    let items = bufs
        .iter()
        .enumerate()
        .map(|(k, b)| {
            let mut it = Item::new(u64::from(b.size % 4096)).with_align(1 << (b.align_log % 8));
            if let Some((of, offset, view)) = b.alias {
                if k > 0 {
                    it.alias = Some(Alias {
                        of: usize::from(of) % k,
                        offset: u64::from(offset % 512),
                        view,
                    });
                }
            }
            if it.alias.is_none() {
                it.pinned = b.pin.map(|p| u64::from(p % 8192));
                it.spaces = b.spaces.as_ref().map(|s| {
                    s.iter()
                        .take(3)
                        .map(|&x| u32::from(x) % spaces.len() as u32)
                        .collect()
                });
            }
            it
        })
        .collect();
    let lifetimes = if input.graph {
        let streams = u32::from(input.streams % 3) + 1;
        Lifetimes::Graph(Graph {
            streams: (0..NODES as u32).map(|v| v % streams).collect(),
            edges: input
                .edges
                .iter()
                .take(8)
                .map(|&(a, b)| (usize::from(a) % NODES, usize::from(b) % NODES))
                .filter(|&(a, b)| a < b)
                .collect(),
            uses: bufs
                .iter()
                .map(|b| {
                    let producer = usize::from(b.start) % (NODES + 1);
                    let producer = (producer < NODES).then_some(producer);
                    let after = producer.map_or(0, |p| p + 1);
                    Uses {
                        producer,
                        consumers: b
                            .readers
                            .iter()
                            .take(3)
                            .map(|&r| after + usize::from(r) % (NODES - after).max(1))
                            .filter(|&c| c < NODES)
                            .collect(),
                        output: b.output,
                    }
                })
                .collect(),
        })
    } else {
        Lifetimes::Intervals(
            bufs.iter()
                .map(|b| {
                    let s = u64::from(b.start % 32);
                    (s, s + 1 + u64::from(b.len % 8))
                })
                .collect(),
        )
    };
    let groups = input
        .groups
        .iter()
        .take(2)
        .filter(|_| n > 0)
        .map(|(m, gap)| Group {
            members: m.iter().take(4).map(|&x| usize::from(x) % n).collect(),
            gap: u64::from(*gap % 64),
        })
        .collect();
    Problem {
        items,
        lifetimes,
        groups,
        spaces,
    }
}

/// What a problem has and whether `solve` took it: `(graph, aliases, groups, pins, spaces,
/// solved)`, for choosing and checking seeds.
pub fn features(input: &PlanInput) -> (bool, bool, bool, bool, bool, bool) {
    let p = problem(input);
    (
        matches!(p.lifetimes, Lifetimes::Graph(_)),
        p.items.iter().any(|i| i.alias.is_some()),
        !p.groups.is_empty(),
        p.items.iter().any(|i| i.pinned.is_some()),
        p.spaces.len() > 1,
        solve(&p, &SolveOptions::default(), &mut || false).is_ok(),
    )
}

/// `plan_problem`: solve and every single strategy; each layout passes the independent check.
pub fn run(input: &PlanInput) {
    let p = problem(input);
    let options = SolveOptions {
        search: SearchOptions {
            node_limit: 20_000,
            ..SearchOptions::default()
        },
        improve_work: 1 << 16,
        ..SolveOptions::default()
    };
    let bound = problem_lower_bound(&p);
    match solve(&p, &options, &mut || false) {
        Ok(s) => crate::trace::untraced(|| {
            assert_eq!(
                check_layout(&p, &s.layout),
                Ok(()),
                "solve's layout of {p:?}"
            );
            assert_eq!(bound, Ok(s.lower_bound));
            assert!(s.layout.total() >= s.lower_bound, "below the bound: {p:?}");
            assert!(s.tried.iter().all(|&(_, t)| t >= s.layout.total()));
        }),
        // A problem `solve` refuses is refused by the bound too, unless only placement
        // failed (no room, or pins overlapping after a spill).
        Err(e) => assert!(
            bound.is_err() || matches!(e, tagalloc::plan::ProblemError::NoRoom { .. }),
            "{e:?} but bound {bound:?}"
        ),
    }
    for order in [StrategyOrder::Size, StrategyOrder::Start] {
        for objects in [Objects::Single, Objects::Many] {
            let strategy = Strategy {
                order,
                fit: Fit::First,
                objects,
            };
            if let Ok(layout) = arrange(&p, strategy) {
                crate::trace::untraced(|| {
                    assert_eq!(check_layout(&p, &layout), Ok(()), "{strategy:?} on {p:?}");
                    assert!(bound.is_ok_and(|b| layout.total() >= b));
                });
            }
        }
    }
}
