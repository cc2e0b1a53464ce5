//! The constrained planner: the exact interval search where the problem is an interval
//! problem once its units are merged, and an ensemble of placements everywhere; the smallest
//! layout kept.

use alloc::vec::Vec;

use super::super::{search, Monitor, SearchOptions};
use super::arrange::{place, unit_order, Conflicts, Fit, Objects, Strategy, StrategyOrder};
use super::bound::bound;
use super::error::ProblemError;
use super::improve::improve;
use super::reach::{Time, DEFAULT_BIT_LIMIT};
use super::rectangles::Rectangles;
use super::units::Units;
use super::{Layout, Lifetimes, Problem};

/// How long [`solve`] may look, and how much memory it may use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SolveOptions {
    /// The exact search's options (interval problems only).
    pub search: SearchOptions,
    /// Run the exact search where it applies (`false`: placements only).
    pub exact: bool,
    /// Work (conflicting pairs visited) the local search over placement orders may spend
    /// after the ensemble, when its best layout is above the bound; 0 for none.
    pub improve_work: u64,
    /// The most bits a graph problem's conflict rows may take (`(nodes + 64) × (nodes +
    /// buffers)`); past it the problem is refused with `GraphTooLarge`.
    pub bit_limit: u64,
}

impl Default for SolveOptions {
    /// The search's defaults, the search on, 2²⁵ pairs of local search (tens of milliseconds
    /// on a 700-tensor graph), 2³¹ bits (256 MiB) of graph rows.
    fn default() -> Self {
        SolveOptions {
            search: SearchOptions::default(),
            exact: true,
            improve_work: 1 << 25,
            bit_limit: DEFAULT_BIT_LIMIT,
        }
    }
}

/// Which solver made a layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Method {
    /// The exact interval search over the units as rectangles (extent × the hull of their
    /// members' lifetimes); `proven`: it proved that rectangle problem optimal.
    Search {
        /// The search proved its plan optimal for the rectangles.
        proven: bool,
    },
    /// One placement heuristic.
    Placement(Strategy),
    /// The local search over placement orders, from this heuristic's order.
    Improved(Strategy),
}

/// What [`solve`] found.
///
/// Invariant: `lower_bound <= layout.total()`; `optimal` only when no layout has a smaller
/// total: when the two are equal, or when the search proved the rectangle problem optimal
/// and the rectangles lose nothing (every unit's lifetime hull is covered, moment by moment,
/// by members spanning its whole extent).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Solved {
    /// The smallest layout found.
    pub layout: Layout,
    /// [`problem_lower_bound`](super::problem_lower_bound)'s bound.
    pub lower_bound: u64,
    /// Proven optimal (see the type's invariant).
    pub optimal: bool,
    /// The solver that made `layout`.
    pub method: Method,
    /// Every solver tried and its total arena (refused placements left out).
    pub tried: Vec<(Method, u64)>,
}

/// The ensemble the planner runs: four orders, both fit rules, one arena per space.
const ORDERS: [StrategyOrder; 4] = [
    StrategyOrder::Size,
    StrategyOrder::Breadth,
    StrategyOrder::Start,
    StrategyOrder::SizeLastIndex,
];

/// The smallest layout it finds for `problem`, and whether it is proven optimal.
///
/// Checks the problem (see [`ProblemError`]), merges aliases and groups into units, then:
///
/// - placements: each unit at a free base by best and first fit, in four orders
///   ([`StrategyOrder`]); `O(u log u + c log c)` each for `u` units and `c` conflicting
///   pairs (finding the pairs: a sweep for intervals, `O(n²)` bit reads for a graph after the
///   `O(N·(N + E)/64)` reachability rows);
/// - where the problem is an interval problem with one space and no pins, the exact
///   [`search`](crate::plan::search) on the units as rectangles (valid: a rectangle covers all
///   its members), within `options.search` and `monitor`;
/// - where neither reached the bound nor settled it, a local search over the best
///   placement's order (`options.improve_work`, and `monitor`);
///
/// and keeps the smallest total. A capacity is honoured by spilling to the next space; when
/// no space has room, `NoRoom`.
pub fn solve<M: Monitor + ?Sized>(
    problem: &Problem,
    options: &SolveOptions,
    monitor: &mut M,
) -> Result<Solved, ProblemError> {
    let time = Time::new(problem, options.bit_limit)?;
    let units = Units::new(problem, &time)?;
    let lower_bound = bound(problem, &time, &units);
    let conflicts = Conflicts::new(problem, &time, &units);
    let mut tried = Vec::new();
    let mut best: Option<(Layout, Method)> = None;
    let mut last_err = None;
    for order in ORDERS {
        for fit in [Fit::Best, Fit::First] {
            let strategy = Strategy {
                order,
                fit,
                objects: Objects::Single,
            };
            match place(problem, &time, &units, &conflicts, strategy) {
                Ok(layout) => keep(&mut best, &mut tried, layout, Method::Placement(strategy)),
                Err(e) => last_err = Some(e),
            }
        }
    }
    let mut rect_proven = false;
    if let (true, Some(rects)) = (options.exact, Rectangles::from_units(problem, &units)) {
        if let Ok(found) = search(&rects.buffers, &options.search, monitor) {
            let layout = rects.layout(problem, &found.plan.offsets);
            let fits = problem.spaces[0]
                .capacity
                .is_none_or(|c| layout.arenas[0] <= c);
            if fits {
                rect_proven = found.optimal;
                let method = Method::Search {
                    proven: found.optimal,
                };
                keep(&mut best, &mut tried, layout, method);
            }
        }
    }
    // Where the search could not settle it: the local search from the best heuristic's order.
    if let Some((layout, Method::Placement(s))) = &best {
        let (s, total) = (*s, layout.total());
        let settled = rect_proven && rectangles_exact(problem, &units);
        if total > lower_bound && !settled && options.improve_work > 0 {
            let order = unit_order(problem, &time, &units, &conflicts, s.order);
            let better = improve(
                problem,
                &units,
                &conflicts,
                order,
                s.fit,
                total,
                lower_bound,
                options.improve_work,
                monitor,
            );
            if let Some(layout) = better {
                keep(&mut best, &mut tried, layout, Method::Improved(s));
            }
        }
    }
    let Some((layout, method)) = best else {
        return Err(last_err.unwrap_or(ProblemError::NoSpace));
    };
    // A saturated total equals a saturated bound without being proven equal to it.
    let optimal = (layout.total() == lower_bound && lower_bound < u64::MAX)
        || (matches!(method, Method::Search { .. })
            && rect_proven
            && rectangles_exact(problem, &units));
    Ok(Solved {
        layout,
        lower_bound,
        optimal,
        method,
        tried,
    })
}

/// Records a layout tried, and keeps it if it is the smallest so far.
fn keep(
    best: &mut Option<(Layout, Method)>,
    tried: &mut Vec<(Method, u64)>,
    layout: Layout,
    method: Method,
) {
    let total = layout.total();
    tried.push((method, total));
    if best.as_ref().is_none_or(|(b, _)| total < b.total()) {
        *best = Some((layout, method));
    }
}

/// Whether the rectangles lose nothing: in every unit of more than one buffer, the members
/// spanning the whole extent cover the unit's lifetime hull without a gap, so at every moment
/// of the hull all its bytes are taken anyway.
fn rectangles_exact(p: &Problem, units: &Units) -> bool {
    let Lifetimes::Intervals(iv) = &p.lifetimes else {
        return false;
    };
    units.members.iter().enumerate().all(|(u, m)| {
        if m.len() == 1 {
            return true;
        }
        let start = m.iter().map(|&b| iv[b as usize].0).min().unwrap_or(0);
        let end = m.iter().map(|&b| iv[b as usize].1).max().unwrap_or(0);
        let mut full: Vec<(u64, u64)> = m
            .iter()
            .map(|&b| b as usize)
            .filter(|&b| units.rel[b] == 0 && p.items[b].size == units.extent[u])
            .map(|b| iv[b])
            .collect();
        full.sort_unstable();
        let mut reach = start;
        for (s, e) in full {
            if s > reach {
                return false;
            }
            reach = reach.max(e);
        }
        reach >= end
    })
}
