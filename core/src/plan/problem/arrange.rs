//! Placement of units one at a time: the heuristics of the constrained planner, and of the
//! MindSpore SOMAS ensemble it is compared with.
//!
//! A unit (an alias tree or a group) goes at a *base*; its member `p` then covers
//! `[base + rel_p, base + rel_p + size_p)`. A placed buffer `q` at `[qa, qb)` that conflicts
//! with `p` forbids the bases `(qa - rel_p - size_p, qb - rel_p)`: the union of those
//! intervals over every conflicting pair leaves the free bases, and the fit rule picks one.
//! For a unit of one buffer, the free bases are the gaps between its conflicts' ranges, and
//! the best fit is TensorFlow Lite's greedy-by-size step; for a group it is SOMAS's
//! `findOffset` for contiguous lists (each member's own conflicts, shifted by its offset).
//! `O(c log c)` a unit for `c` conflicting pairs.

use alloc::vec;
use alloc::vec::Vec;

use super::super::buffer::align_up;
use super::error::ProblemError;
use super::reach::Time;
use super::units::Units;
use super::{Layout, Problem};

/// The order units are placed in (pinned units always first, at their pins).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StrategyOrder {
    /// Larger extent first, ties by lower index (SOMAS `kGreaterSizeSmallerIndex`, TFLite).
    Size,
    /// Larger extent first, ties by higher index (SOMAS `kGreaterSizeGreaterIndex`).
    SizeLastIndex,
    /// Most bytes in conflict with the unit first (its extent plus its conflicts' sizes), then
    /// larger: the crowded moments first, as greedy by breadth does for intervals.
    Breadth,
    /// Earliest written first, ties larger first: allocation order, which keeps stack-like
    /// lifetimes nested.
    Start,
}

/// Which free base a unit takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fit {
    /// The smallest run of free bases that holds it (ties lowest): best fit.
    Best,
    /// The lowest free base: first fit (SOMAS's "smallest offset").
    First,
}

/// How the arena is organised while placing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Objects {
    /// One arena per space; a unit may go anywhere in it.
    Single,
    /// SOMAS's "many objects": the arena is a stack of bands, each as tall as the first unit
    /// placed in it; a unit goes in the first band where it fits whole, else opens a band on
    /// top. Fewer choices, but a band's layout never disturbs another's.
    Many,
}

/// One placement heuristic.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Strategy {
    /// The order.
    pub order: StrategyOrder,
    /// The fit rule.
    pub fit: Fit,
    /// The arena's organisation.
    pub objects: Objects,
}

/// Conflicts between buffers of different units, as adjacency lists (only buffers with a
/// size). Invariant: `adj[b]` lists exactly the buffers `c` of other units, both with a
/// size, with `time.conflict(b, c)`.
pub(super) struct Conflicts {
    adj: Vec<Vec<u32>>,
}

impl Conflicts {
    /// The conflicting pairs, each counted from both sides: the work of one placement.
    pub(super) fn pairs(&self) -> u64 {
        self.adj.iter().map(|a| a.len() as u64).sum()
    }

    /// Intervals: a sweep in start order against the buffers still live, `O(n log n + c)`.
    /// A graph: every pair tested, `O(n²)` bit reads.
    pub(super) fn new(p: &Problem, time: &Time<'_>, units: &Units) -> Conflicts {
        let n = p.items.len();
        let mut adj: Vec<Vec<u32>> = vec![Vec::new(); n];
        let sized: Vec<usize> = (0..n).filter(|&b| p.items[b].size > 0).collect();
        let mut add = |a: usize, b: usize| {
            if units.unit[a] != units.unit[b] {
                adj[a].push(b as u32);
                adj[b].push(a as u32);
            }
        };
        match time {
            Time::Intervals(iv) => {
                let mut by_start = sized.clone();
                by_start.sort_unstable_by_key(|&b| iv[b].0);
                let mut live: Vec<usize> = Vec::new();
                for &b in &by_start {
                    live.retain(|&x| iv[x].1 > iv[b].0);
                    for &x in &live {
                        add(x, b);
                    }
                    live.push(b);
                }
            }
            Time::Graph(_) => {
                for (i, &a) in sized.iter().enumerate() {
                    for &b in &sized[i + 1..] {
                        if time.conflict(a, b) {
                            add(a, b);
                        }
                    }
                }
            }
        }
        Conflicts { adj }
    }
}

/// Places `problem` with one strategy. Checks the problem first (see
/// [`ProblemError`]); `NoRoom` when some unit fits in none of its spaces.
///
/// ```
/// use tagalloc::plan::{arrange, Fit, Item, Lifetimes, Objects, Problem, Strategy, StrategyOrder};
///
/// let problem = Problem {
///     items: vec![Item::new(8), Item::new(8), Item::new(8)],
///     lifetimes: Lifetimes::Intervals(vec![(0, 2), (1, 3), (2, 4)]),
///     ..Problem::default()
/// };
/// let s = Strategy { order: StrategyOrder::Size, fit: Fit::Best, objects: Objects::Single };
/// assert_eq!(arrange(&problem, s)?.arenas, vec![16]);
/// # Ok::<(), tagalloc::plan::ProblemError>(())
/// ```
pub fn arrange(problem: &Problem, strategy: Strategy) -> Result<Layout, ProblemError> {
    let time = Time::new(problem, super::SolveOptions::default().bit_limit)?;
    let units = Units::new(problem, &time)?;
    let conflicts = Conflicts::new(problem, &time, &units);
    place(problem, &time, &units, &conflicts, strategy)
}

/// The unit order of `order`, pinned units first.
pub(super) fn unit_order(
    p: &Problem,
    time: &Time<'_>,
    units: &Units,
    c: &Conflicts,
    order: StrategyOrder,
) -> Vec<u32> {
    let k = units.members.len();
    let mut ids: Vec<u32> = (0..k as u32).collect();
    let pinned = |u: u32| units.pinned[u as usize].is_none();
    match order {
        StrategyOrder::Size => {
            ids.sort_by_key(|&u| (pinned(u), core::cmp::Reverse(units.extent[u as usize]), u))
        }
        StrategyOrder::SizeLastIndex => ids.sort_by_key(|&u| {
            (
                pinned(u),
                core::cmp::Reverse(units.extent[u as usize]),
                core::cmp::Reverse(u),
            )
        }),
        StrategyOrder::Breadth => {
            let weight: Vec<u64> = (0..k)
                .map(|u| {
                    let mut w = units.extent[u];
                    for &b in &units.members[u] {
                        for &x in &c.adj[b as usize] {
                            w = w.saturating_add(p.items[x as usize].size);
                        }
                    }
                    w
                })
                .collect();
            ids.sort_by_key(|&u| {
                let u_ = u as usize;
                (
                    pinned(u),
                    core::cmp::Reverse(weight[u_]),
                    core::cmp::Reverse(units.extent[u_]),
                    u,
                )
            });
        }
        StrategyOrder::Start => {
            let schedule = time.schedule();
            let start = |u: usize| {
                units.members[u]
                    .iter()
                    .map(|&b| schedule[b as usize].0)
                    .min()
                    .unwrap_or(0)
            };
            ids.sort_by_key(|&u| {
                let u_ = u as usize;
                (
                    pinned(u),
                    start(u_),
                    core::cmp::Reverse(units.extent[u_]),
                    u,
                )
            });
        }
    }
    ids
}

pub(super) fn place(
    p: &Problem,
    time: &Time<'_>,
    units: &Units,
    c: &Conflicts,
    strategy: Strategy,
) -> Result<Layout, ProblemError> {
    let order = unit_order(p, time, units, c, strategy.order);
    place_in(p, units, c, &order, strategy.fit, strategy.objects)
}

/// Places the units in `order` (a permutation of the units, pinned ones first) by `fit` in
/// `objects`.
pub(super) fn place_in(
    p: &Problem,
    units: &Units,
    c: &Conflicts,
    order: &[u32],
    fit_rule: Fit,
    objects: Objects,
) -> Result<Layout, ProblemError> {
    let n = p.items.len();
    let k = units.members.len();
    let mut base: Vec<Option<(u32, u64)>> = vec![None; k]; // (space, base) of placed units
    let mut bands: Vec<Vec<(u64, u64)>> = vec![Vec::new(); p.spaces.len()]; // (lo, hi) per space
    let mut top = vec![0u64; p.spaces.len()];
    let mut forbidden: Vec<(u64, u64)> = Vec::new();
    for &u in order {
        let u = u as usize;
        let extent = units.extent[u];
        let first_member = units.members[u][0] as usize;
        if let Some(pin) = units.pinned[u] {
            // Pinned units come first in every order, and pins that share bytes while live
            // are refused when the units are made: nothing placed can be in the way.
            let s = units.spaces[u][0];
            if p.spaces[s as usize]
                .capacity
                .is_some_and(|cap| pin + extent > cap)
            {
                return Err(ProblemError::NoRoom {
                    buffer: first_member,
                });
            }
            base[u] = Some((s, pin));
            top[s as usize] = top[s as usize].max(pin + extent);
            continue;
        }
        let mut placed = None;
        for &s in &units.spaces[u] {
            let cap = p.spaces[s as usize].capacity;
            forbid(p, units, c, &base, u, s, &mut forbidden);
            let at = match objects {
                Objects::Single => fit(
                    &forbidden,
                    units.align[u],
                    0,
                    cap.map(|c| c.checked_sub(extent)),
                    fit_rule,
                ),
                Objects::Many => {
                    let mut at = None;
                    for &(lo, hi) in &bands[s as usize] {
                        if hi - lo >= extent {
                            at = fit(
                                &forbidden,
                                units.align[u],
                                lo,
                                Some(Some(hi - extent)),
                                fit_rule,
                            );
                            if at.is_some() {
                                break;
                            }
                        }
                    }
                    at.or_else(|| {
                        let lo = align_up(top[s as usize], units.align[u]);
                        let fits =
                            cap.is_none_or(|cap| lo.checked_add(extent).is_some_and(|e| e <= cap));
                        fits.then(|| {
                            bands[s as usize].push((lo, lo + extent));
                            lo
                        })
                    })
                }
            };
            if let Some(at) = at {
                placed = Some((s, at));
                break;
            }
        }
        let Some((s, at)) = placed else {
            return Err(ProblemError::NoRoom {
                buffer: first_member,
            });
        };
        base[u] = Some((s, at));
        top[s as usize] = top[s as usize].max(at + extent);
    }
    let mut layout = Layout {
        spaces: vec![0; n],
        offsets: vec![0; n],
        arenas: vec![0; p.spaces.len()],
    };
    for b in 0..n {
        let (s, at) =
            base[units.unit[b] as usize].unwrap_or((units.spaces[units.unit[b] as usize][0], 0));
        layout.spaces[b] = s;
        layout.offsets[b] = at + units.rel[b];
        let end = layout.offsets[b] + p.items[b].size;
        let arena = &mut layout.arenas[s as usize];
        *arena = (*arena).max(end);
    }
    Ok(layout)
}

/// The bases unit `u` may not take in space `s`, merged and sorted, as `[lo, hi)` runs.
fn forbid(
    p: &Problem,
    units: &Units,
    c: &Conflicts,
    base: &[Option<(u32, u64)>],
    u: usize,
    s: u32,
    out: &mut Vec<(u64, u64)>,
) {
    out.clear();
    for &b in &units.members[u] {
        let b = b as usize;
        let (rel, size) = (units.rel[b], p.items[b].size);
        for &q in &c.adj[b] {
            let q = q as usize;
            let Some((qs, qbase)) = base[units.unit[q] as usize] else {
                continue;
            };
            if qs != s {
                continue;
            }
            let qa = qbase + units.rel[q];
            let qb = qa + p.items[q].size;
            // Bases in (qa - rel - size, qb - rel), clamped at 0.
            let lo = (qa + 1).saturating_sub(rel + size);
            let hi = qb.saturating_sub(rel);
            if hi > lo {
                out.push((lo, hi));
            }
        }
    }
    out.sort_unstable();
    let mut merged = 0;
    for i in 0..out.len() {
        if merged > 0 && out[i].0 <= out[merged - 1].1 {
            out[merged - 1].1 = out[merged - 1].1.max(out[i].1);
        } else {
            out[merged] = out[i];
            merged += 1;
        }
    }
    out.truncate(merged);
}

/// A base in `[lo, hi]` (no upper limit for `None`; `Some(None)`: no room at all), a multiple
/// of `align`, outside the sorted disjoint runs `forbidden`, by the fit rule.
fn fit(
    forbidden: &[(u64, u64)],
    align: u64,
    lo: u64,
    hi: Option<Option<u64>>,
    rule: Fit,
) -> Option<u64> {
    let hi = match hi {
        None => u64::MAX,
        Some(None) => return None,
        Some(Some(h)) => h,
    };
    let mut best: Option<(u64, u64)> = None; // (free run length, base)
    let mut free_from = lo;
    let mut consider = |from: u64, to: u64| -> bool {
        // Free bases [from, to] (inclusive), `to` capped at `hi`.
        let to = to.min(hi);
        let at = align_up(from, align);
        if from > to || at > to {
            return false;
        }
        let run = to - from;
        if best.is_none_or(|(r, _)| run < r) {
            best = Some((run, at));
        }
        rule == Fit::First
    };
    for &(a, b) in forbidden {
        if b <= free_from {
            continue;
        }
        if a > free_from && consider(free_from, a - 1) {
            return best.map(|(_, at)| at);
        }
        free_from = free_from.max(b);
        if free_from > hi {
            break;
        }
    }
    if free_from <= hi {
        // The open run above everything: only when no closed run fits (its length is the
        // largest possible), unless first fit stops earlier.
        consider(free_from, u64::MAX - align);
    }
    best.map(|(_, at)| at)
}
