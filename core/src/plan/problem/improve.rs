//! A local search over placement orders: the greedy placements are only as good as their
//! order, so the best one's order is perturbed (two units swapped, or one moved earlier) and
//! placed again, keeping every order that places no worse (plateau moves let the search
//! drift). Deterministic (a fixed xorshift seed), bounded by work and by the caller's
//! monitor. This is the "iterated greedy" of scheduling heuristics, applied here because
//! graphs with parallel streams have no exact search to fall back on.

use alloc::vec::Vec;

use super::super::Monitor;
use super::arrange::{place_in, Conflicts, Fit, Objects};
use super::units::Units;
use super::{Layout, Problem};

/// Tries at most this many orders, whatever the work budget allows.
const MAX_TRIES: u64 = 4096;

/// Perturbs `order` (pinned units first, untouched) while the layout stays above `bound`,
/// within `work` (conflicting pairs visited, summed over tries) and while `monitor` lets it.
/// Returns a better layout than `best_total`, if one was found.
#[allow(clippy::too_many_arguments)]
pub(super) fn improve<M: Monitor + ?Sized>(
    p: &Problem,
    units: &Units,
    c: &Conflicts,
    mut order: Vec<u32>,
    fit: Fit,
    mut best_total: u64,
    bound: u64,
    work: u64,
    monitor: &mut M,
) -> Option<Layout> {
    let fixed = units.pinned.iter().filter(|x| x.is_some()).count();
    let free = order.len() - fixed;
    if free < 2 || best_total <= bound {
        return None;
    }
    let per_try = c.pairs() + order.len() as u64 + 1;
    let tries = (work / per_try).min(MAX_TRIES);
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move |m: usize| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x % m as u64) as usize
    };
    let mut found = None;
    for _ in 0..tries {
        if monitor.stop() || best_total <= bound {
            break;
        }
        let mut trial = order.clone();
        let (a, b) = (fixed + next(free), fixed + next(free));
        if next(2) == 0 {
            trial.swap(a, b);
        } else {
            let (from, to) = (a.max(b), a.min(b));
            let u = trial.remove(from);
            trial.insert(to, u);
        }
        let Ok(layout) = place_in(p, units, c, &trial, fit, Objects::Single) else {
            continue;
        };
        let total = layout.total();
        if total <= best_total {
            if total < best_total {
                best_total = total;
                found = Some(layout);
            }
            order = trial;
        }
    }
    found
}
