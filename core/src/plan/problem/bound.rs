//! A lower bound valid for every constraint kind.

use alloc::vec::Vec;

use super::error::ProblemError;
use super::reach::{Time, DEFAULT_BIT_LIMIT};
use super::units::Units;
use super::Problem;

/// No layout's total arena (the sum over its spaces) is below this.
///
/// The bound is the most bytes live at one moment of one sequential order, where the bytes of
/// a unit (an alias tree, or a group) are the union of its live members' byte ranges (an
/// in-place write and the buffer it overwrites, live together at the writing step, count once;
/// two buffers of a group never overlap, so they count apart). It is raised to the sum over
/// spaces of the highest pinned end in each. Why it holds:
///
/// - intervals: buffers live at one moment that are not of one unit conflict pairwise, so no
///   two share a byte; a unit's live members take at least the union of their ranges;
/// - a graph: the moments are those of one topological order (file order where it can), and
///   two buffers live together there always conflict under the dependency rule (if `b` is
///   written at or before `a`'s last read in some valid order, that read cannot reach `b`'s
///   producer: see `Reach::schedule`), so the same argument holds; parallel streams only add
///   conflicts, so the bound of any one order is valid;
/// - every space's arena reaches its highest pinned buffer.
///
/// `O(e log e)` for `e` events, plus `O(k log k)` a event for units of `k > 1` buffers.
pub fn problem_lower_bound(problem: &Problem) -> Result<u64, ProblemError> {
    let time = Time::new(problem, DEFAULT_BIT_LIMIT)?;
    let units = Units::new(problem, &time)?;
    Ok(bound(problem, &time, &units))
}

pub(super) fn bound(p: &Problem, time: &Time<'_>, units: &Units) -> u64 {
    let schedule = time.schedule();
    let mut events: Vec<(u64, u8, u32)> = Vec::with_capacity(2 * p.items.len());
    for (b, &(s, e)) in schedule.iter().enumerate() {
        if p.items[b].size > 0 {
            events.push((s, 1, b as u32));
            events.push((e, 0, b as u32));
        }
    }
    events.sort_unstable();
    let mut live: Vec<Vec<u32>> = alloc::vec![Vec::new(); units.members.len()];
    let mut bytes = alloc::vec![0u64; units.members.len()];
    let (mut total, mut peak) = (0u64, 0u64);
    let mut ranges: Vec<(u64, u64)> = Vec::new();
    // The total after each start, for picking the moments a graph's cliques grow from.
    let mut after_start: Vec<(u64, usize)> = Vec::new();
    for (k, &(_, kind, b)) in events.iter().enumerate() {
        let u = units.unit[b as usize] as usize;
        if kind == 1 {
            live[u].push(b);
        } else if let Some(at) = live[u].iter().position(|&x| x == b) {
            live[u].swap_remove(at);
        }
        let now = if live[u].len() <= 1 {
            live[u].first().map_or(0, |&x| p.items[x as usize].size)
        } else {
            ranges.clear();
            ranges.extend(live[u].iter().map(|&x| {
                let x = x as usize;
                (units.rel[x], units.rel[x] + p.items[x].size)
            }));
            union_length(&mut ranges)
        };
        total = total - bytes[u] + now;
        bytes[u] = now;
        if kind == 1 {
            peak = peak.max(total);
            after_start.push((total, k));
        }
    }
    if matches!(time, Time::Graph(_)) {
        peak = peak.max(grown_cliques(p, time, units, &events, &mut after_start));
    }
    let mut pinned = alloc::vec![0u64; p.spaces.len()];
    for (u, base) in units.pinned.iter().enumerate() {
        if let Some(base) = base {
            let s = units.spaces[u][0] as usize;
            pinned[s] = pinned[s].max(base + units.extent[u]);
        }
    }
    peak.max(pinned.iter().fold(0, |t, &a| t.saturating_add(a)))
}

/// The bytes covered by `ranges` (`[lo, hi)` each).
fn union_length(ranges: &mut [(u64, u64)]) -> u64 {
    ranges.sort_unstable();
    let (mut covered, mut reach) = (0u64, 0u64);
    for &(lo, hi) in ranges.iter() {
        let lo = lo.max(reach);
        if hi > lo {
            covered += hi - lo;
            reach = hi;
        }
    }
    covered
}

/// Moments of the sweep grown into larger cliques: on a graph with parallel streams, buffers
/// of another branch conflict with everything live at a moment of the file's order without
/// being live at it. From each of the most crowded moments (up to [`SEEDS`]), the live units
/// (counted as the sweep counts them) are extended greedily, larger first, by every buffer of
/// another unit that conflicts with all the buffers taken so far. Pairwise conflicting
/// buffers of distinct units never share a byte, and a buffer conflicting with all the live
/// members of a unit is apart from their union, so each clique's bytes are a lower bound.
/// `O(SEEDS · (e + n · k))` for cliques of `k` buffers.
fn grown_cliques(
    p: &Problem,
    time: &Time<'_>,
    units: &Units,
    events: &[(u64, u8, u32)],
    after_start: &mut [(u64, usize)],
) -> u64 {
    after_start.sort_unstable_by(|a, b| b.cmp(a));
    let mut seeds: Vec<usize> = after_start.iter().take(SEEDS).map(|&(_, k)| k).collect();
    seeds.sort_unstable();
    let mut by_size: Vec<usize> = (0..p.items.len())
        .filter(|&b| p.items[b].size > 0)
        .collect();
    by_size.sort_unstable_by_key(|&b| core::cmp::Reverse(p.items[b].size));
    let mut live: Vec<u32> = Vec::new();
    let mut best = 0u64;
    let mut next_seed = 0;
    let mut taken_unit = alloc::vec![false; units.members.len()];
    for (k, &(_, kind, b)) in events.iter().enumerate() {
        if next_seed == seeds.len() {
            break;
        }
        if kind == 1 {
            live.push(b);
        } else if let Some(at) = live.iter().position(|&x| x == b) {
            live.swap_remove(at);
        }
        if k != seeds[next_seed] {
            continue;
        }
        next_seed += 1;
        let (_, seed_total) = after_start
            .iter()
            .map(|&(t, e)| (e, t))
            .find(|&(e, _)| e == k)
            .unwrap_or((k, 0));
        let mut clique: Vec<usize> = live.iter().map(|&x| x as usize).collect();
        for &m in &clique {
            taken_unit[units.unit[m] as usize] = true;
        }
        let mut weight = seed_total;
        for &c in &by_size {
            if !taken_unit[units.unit[c] as usize] && clique.iter().all(|&m| time.conflict(m, c)) {
                taken_unit[units.unit[c] as usize] = true;
                clique.push(c);
                weight += p.items[c].size;
            }
        }
        best = best.max(weight);
        for &m in &clique {
            taken_unit[units.unit[m] as usize] = false;
        }
    }
    best
}

/// The most crowded moments a graph's cliques grow from.
const SEEDS: usize = 1024;
