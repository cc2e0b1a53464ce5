//! Greedy placement: buffers taken one at a time in a fixed order, each put in the tightest
//! gap that holds it.
//!
//! The placement step is TensorFlow Lite's "greedy by size" offset calculation
//! (`tensorflow/lite/delegates/gpu/common/memory_management/greedy_by_size_assignment.cc`,
//! `GreedyBySizeAssignment`): walk the buffers already placed that conflict with the new one,
//! in offset order, and take the smallest gap between them that fits it, or else the top of
//! the highest. The three solvers here differ only in the order they feed it; the step itself
//! is [`place::best_fit`](super::place), `O((n + p) log n)` for `p` conflicting pairs, with a
//! cap on `p` (about a second of work) past which the buffers left are stacked on the
//! highest buffer placed over their lifetime.

use alloc::vec;
use alloc::vec::Vec;

use super::buffer::check_buffers;
use super::buffer::{Buffer, Plan};
use super::error::PlanError;
use super::monitor::Monitor;
use super::place::{best_fit, Placed, WORK_LIMIT};
use super::sweep::Instance;

/// The order a heuristic feeds the placement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Order {
    Size,
    Breadth,
    Peak,
}

impl Order {
    pub(super) const ALL: [Order; 3] = [Order::Size, Order::Breadth, Order::Peak];

    /// The buffers' indices in this order. `O(n log n)`.
    pub(super) fn of(self, buffers: &[Buffer]) -> Vec<u32> {
        match self {
            Order::Size => by_size(buffers),
            Order::Breadth => by_breadth(buffers),
            Order::Peak => by_peak(buffers),
        }
    }
}

/// Places `buffers` (already checked) in `order`'s order, within `work_limit` conflicting
/// pairs and while `monitor` lets it.
pub(super) fn place<M: Monitor + ?Sized>(
    buffers: &[Buffer],
    order: Order,
    work_limit: u64,
    monitor: &mut M,
) -> Placed {
    best_fit(buffers, &order.of(buffers), work_limit, monitor)
}

/// The public heuristics: checked input, the default work cap, no monitor.
fn greedy(buffers: &[Buffer], order: Order) -> Result<Plan, PlanError> {
    check_buffers(buffers)?;
    Ok(place(buffers, order, WORK_LIMIT, &mut || false).plan)
}

/// TensorFlow Lite's greedy by size: buffers in order of decreasing size (ties in input order),
/// each at the smallest gap that fits it among the conflicting buffers placed before it, or on
/// top of them. Fast and usually close to the lower bound on inference graphs, far above it on
/// adversarial sets such as MiniMalloc's (figures:
/// `docs/measurements.md#greedyrs-greedy-by-size-and-by-peak`).
///
/// `O((n + p) log n)` time for `p` conflicting pairs, `O(n)` memory. The gap search stops
/// after 2²⁹ units of work (pairs found times the log of their number, per buffer: a few
/// seconds); the buffers left then go on top of their conflicts, `O(log n)` each.
///
/// ```
/// use tagalloc::plan::{greedy_by_size, validate, Buffer};
///
/// // TensorFlow Lite's "chain" test: lifetimes are inclusive there, half-open here.
/// let chain = [(16, 0, 1), (8, 1, 2), (64, 2, 3), (32, 3, 4), (8, 4, 5)];
/// let buffers: Vec<Buffer> = chain
///     .iter()
///     .enumerate()
///     .map(|(i, &(size, first, last))| Buffer::new(i as u64, size, first, last + 1))
///     .collect();
/// let plan = greedy_by_size(&buffers)?;
/// assert_eq!(plan.offsets, [0, 64, 0, 64, 0]);
/// assert_eq!(plan.arena, 96);
/// validate(&buffers, &plan)?;
/// # Ok::<(), tagalloc::plan::PlanError>(())
/// ```
pub fn greedy_by_size(buffers: &[Buffer]) -> Result<Plan, PlanError> {
    greedy(buffers, Order::Size)
}

fn by_size(buffers: &[Buffer]) -> Vec<u32> {
    let mut order: Vec<u32> = (0..buffers.len() as u32).collect();
    // Stable: equal sizes keep their input order.
    order.sort_by(|&a, &b| buffers[b as usize].size.cmp(&buffers[a as usize].size));
    order
}

/// Greedy by breadth: the same gap-filling step, but buffers taken in order of their
/// *breadth*, the largest total live at any moment of their lifetime (then larger first, then
/// longer-lived first). The buffers of the most crowded moments, which decide the arena, are
/// packed first while the arena is still empty. This is TensorFlow Lite's greedy-by-breadth
/// idea (`greedy_by_breadth_assignment.cc`, there for shared objects) and the `T` ("total")
/// preordering of MiniMalloc applied to offsets.
///
/// Time and memory as [`greedy_by_size`], plus the sections (`O(n log n)`).
///
/// ```
/// use tagalloc::plan::{greedy_by_breadth, lower_bound, validate, Buffer};
///
/// let buffers = [
///     Buffer::new(0, 32, 0, 2),
///     Buffer::new(1, 32, 1, 5),
///     Buffer::new(2, 64, 5, 8),
///     Buffer::new(3, 16, 3, 6),
/// ];
/// let plan = greedy_by_breadth(&buffers)?;
/// validate(&buffers, &plan)?;
/// assert!(plan.arena >= lower_bound(&buffers)?);
/// # Ok::<(), tagalloc::plan::PlanError>(())
/// ```
pub fn greedy_by_breadth(buffers: &[Buffer]) -> Result<Plan, PlanError> {
    greedy(buffers, Order::Breadth)
}

fn by_breadth(buffers: &[Buffer]) -> Vec<u32> {
    let inst = Instance::new(buffers, None);
    let breadth = inst.breadth();
    // Zero-size buffers are not in the instance; they go anywhere, so last.
    let mut key = vec![(0u64, 0u64, 0u64); buffers.len()];
    for (b, &o) in inst.orig.iter().enumerate() {
        key[o as usize] = (breadth[b], inst.size[b], inst.length[b]);
    }
    let mut order: Vec<u32> = (0..buffers.len() as u32).collect();
    order.sort_by(|&a, &b| key[b as usize].cmp(&key[a as usize]));
    order
}

/// Greedy by peak: the buffers live at the *peak* (the first moment where the most bytes are
/// live, the moment that sets [`lower_bound`](super::lower_bound)) are stacked first, in
/// order of their start (earliest at the bottom; ties larger first, then input order), and
/// every other buffer follows in TensorFlow Lite's order (larger first), each at the
/// tightest gap that fits it.
///
/// Why: a plan meets the lower bound only if the peak moment has no hole, and stacking the
/// peak's buffers first guarantees that (they all conflict, so each lands on the one before).
/// Taking them in allocation order keeps a program's stack-like lifetimes nested: a buffer
/// allocated earlier and freed later sits lower, so the space above it frees in one piece.
/// On IOPDDL's problems this meets the lower bound where greedy by size does not (figures:
/// `docs/measurements.md#greedyrs-greedy-by-size-and-by-peak`). It is one more order in the
/// manner of MindSpore SOMAS, which runs several sort orders through the same placement and
/// keeps the best
/// (`mindspore/ccsrc/backend/optimizer/somas/somas_solver_core.cc`,
/// `SomasSolverCore::MemoryAllocationSolver`); [`search`](super::search) does the same with
/// this solver and the two above.
///
/// Time and memory as [`greedy_by_size`].
///
/// ```
/// use tagalloc::plan::{greedy_by_peak, lower_bound, validate, Buffer};
///
/// let buffers = [
///     Buffer::new(0, 16, 0, 4),
///     Buffer::new(1, 64, 1, 3),
///     Buffer::new(2, 8, 2, 6),
///     Buffer::new(3, 32, 4, 6),
/// ];
/// let plan = greedy_by_peak(&buffers)?;
/// validate(&buffers, &plan)?;
/// assert_eq!(plan.arena, lower_bound(&buffers)?); // 16 + 64 + 8 live over [2, 3)
/// # Ok::<(), tagalloc::plan::PlanError>(())
/// ```
pub fn greedy_by_peak(buffers: &[Buffer]) -> Result<Plan, PlanError> {
    greedy(buffers, Order::Peak)
}

fn by_peak(buffers: &[Buffer]) -> Vec<u32> {
    let peak = peak_moment(buffers);
    let at_peak = |b: &Buffer| b.size > 0 && peak.is_some_and(|t| b.start <= t && t < b.end);
    let mut order: Vec<u32> = (0..buffers.len() as u32).collect();
    // Stable: the remaining ties keep their input order.
    order.sort_by(|&a, &b| {
        let (x, y) = (&buffers[a as usize], &buffers[b as usize]);
        match (at_peak(x), at_peak(y)) {
            (true, true) => x.start.cmp(&y.start).then(y.size.cmp(&x.size)),
            (true, false) => core::cmp::Ordering::Less,
            (false, true) => core::cmp::Ordering::Greater,
            (false, false) => y.size.cmp(&x.size),
        }
    });
    order
}

/// The first moment at which the most bytes are live (`None` when no buffer has a size):
/// the same sweep as [`lower_bound`](super::lower_bound), ends before starts at equal times.
fn peak_moment(buffers: &[Buffer]) -> Option<u64> {
    let mut events: Vec<(u64, u8, u64)> = Vec::with_capacity(buffers.len() * 2);
    for b in buffers.iter().filter(|b| b.size > 0) {
        events.push((b.start, 1, b.size));
        events.push((b.end, 0, b.size));
    }
    events.sort_unstable();
    let (mut live, mut peak, mut at) = (0u64, 0u64, None);
    for (t, kind, size) in events {
        if kind == 1 {
            // Cannot overflow: check_buffers bounds the sum of all sizes.
            live += size;
            if live > peak {
                (peak, at) = (live, Some(t));
            }
        } else {
            live -= size;
        }
    }
    at
}
