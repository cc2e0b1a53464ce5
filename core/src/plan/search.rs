//! Exact search: branch and bound over canonical placements, after MiniMalloc.
//!
//! The search answers one question at a time, "is there a plan whose arena is at most
//! `cap`?", by depth-first search; [`search`] asks it at the lower bound and at a falling
//! sequence of capacities below the best plan known. What it takes from MiniMalloc (M. D.
//! Moffitt, "MiniMalloc: A Lightweight Memory Allocator for Hardware-Accelerated Machine
//! Learning", ASPLOS 2023; google/minimalloc `src/solver.cc` and `src/sweeper.cc`), rebuilt
//! here in its own structure:
//!
//! - **Canonical placements.** Every buffer is placed at its *minimum offset*: the top of the
//!   highest conflicting buffer placed so far (aligned). Buffers are placed in non-decreasing
//!   order of offset, ties broken by a fixed preorder, so each plan in which no buffer can
//!   slide down is built exactly once, and an optimal plan is always among them.
//! - **Dominance.** A buffer is never placed at or above the lowest *top* any unplaced buffer
//!   could reach: that buffer would fit below, in a gap nothing later can fill, so the same
//!   plan with it slid down is explored in another branch.
//! - **Hatless buffers.** A buffer with no unplaced conflicts can never move, so nothing
//!   ordered after it may be placed before it (MiniMalloc's "hatless pruning", applied here
//!   before the candidates are tried rather than after).
//! - **Inference per section.** In every section of time (each maximal set of buffers live
//!   together), the unplaced buffers must all fit between the section's floor and the capacity. The floor
//!   is the higher of the offset of the last placement (offsets never decrease) and the lowest
//!   minimum offset of the section's unplaced buffers, which is kept exact with a count of the
//!   buffers holding it. A branch where some section overflows is cut at once, as is one where
//!   a buffer's minimum offset leaves it no room.
//! - **Decomposition.** Where no unplaced buffer spans the boundary between two sections, the
//!   two sides are independent problems: they are solved one after the other, and when one
//!   has no solution the search jumps straight back to the placement that split them instead
//!   of retrying the other side. The problem's own independent parts are searched separately,
//!   and each keeps its placement while the others are retried.
//! - **Preorders** `TWA` (largest section total, then longest lifetime, then area) and `TAW`,
//!   two of MiniMalloc's three defaults, each both with fixed ranks and re-ranked by the
//!   current section totals in every sub-problem split off (as MiniMalloc's `SubSolve` sorts
//!   each sub-partition anew). Where MiniMalloc tries its preorders in turn under a node limit
//!   that doubles every round, restarting each time, the searches here are paused and resumed:
//!   all four run in slices side by side, none is ever restarted.
//!
//! Beyond MiniMalloc: interchangeable buffers (same size, alignment and sections) are placed
//! in preorder only, and every capacity is a multiple of the grain (the gcd of the sizes and
//! alignments), which also rounds the lower bound up.
//!
//! The search keeps no recursion (a frame stack, a goal list in an arena, and an undo trail),
//! so its depth is not limited by the call stack, and it allocates nothing per node once its
//! vectors have grown.

use alloc::vec;
use alloc::vec::Vec;

use super::buffer::{align_up, check_buffers};
use super::buffer::{Buffer, Plan};
use super::error::PlanError;
use super::greedy::{self, Order};
use super::monitor::Monitor;
use super::place::WORK_LIMIT;
use super::sweep::Instance;

/// How long [`search`] may look, and how much memory it may use.
///
/// ```
/// use tagalloc::plan::SearchOptions;
///
/// let quick = SearchOptions { node_limit: 100_000, ..SearchOptions::default() };
/// assert!(quick.graph_limit > 0);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SearchOptions {
    /// Search nodes (placements tried) in all, over every capacity and preorder; the search
    /// stops with the best plan found when they are spent. `u64::MAX` for no limit.
    pub node_limit: u64,
    /// The most entries (4 bytes each) the conflict lists and section member lists may hold.
    /// A problem whose lists would be larger (hundreds of thousands of buffers live together)
    /// is not searched: the best heuristic plan is returned, not proven optimal unless it
    /// meets the lower bound.
    pub graph_limit: usize,
}

impl Default for SearchOptions {
    /// No node limit; lists of up to 2²⁶ entries (256 MiB).
    fn default() -> Self {
        SearchOptions {
            node_limit: u64::MAX,
            graph_limit: 1 << 26,
        }
    }
}

/// What [`search`] found: the best plan, the best lower bound it proved, and whether the two
/// meet.
///
/// Invariant: `lower_bound <= plan.arena`, and `optimal` exactly when they are equal. The
/// lower bound is the most bytes live at one moment, raised when the search proves that no
/// plan fits in some larger capacity.
///
/// ```
/// use tagalloc::plan::{search, Buffer, SearchOptions};
///
/// let buffers = [Buffer::new(0, 8, 0, 3), Buffer::new(1, 8, 1, 2), Buffer::new(2, 16, 2, 4)];
/// let found = search(&buffers, &SearchOptions::default(), &mut || false)?;
/// assert!(found.optimal);
/// assert_eq!(found.plan.arena, found.lower_bound);
/// # Ok::<(), tagalloc::plan::PlanError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Solution {
    /// The best plan found.
    pub plan: Plan,
    /// No plan has a smaller arena than this.
    pub lower_bound: u64,
    /// `plan.arena == lower_bound`: the plan is proven optimal.
    pub optimal: bool,
    /// Search nodes used (placements tried).
    pub nodes: u64,
    /// The plans of greedy by size, by breadth and by peak that the search started from, as
    /// placed within the monitor's budget (with no time left, their later buffers are
    /// stacked rather than fitted into gaps; see [`greedy_by_size`](super::greedy_by_size)).
    pub greedy: [Plan; 3],
    /// How many buffers of each of those plans were stacked on top of their conflicts rather
    /// than fitted into a gap, because the work cap or the monitor stopped the gap search (0
    /// for each plan that got every buffer its tightest gap).
    pub greedy_stacked: [usize; 3],
}

/// The smallest arena it can find for `buffers`, and whether it is proven optimal.
///
/// Starts from the best of [`greedy_by_size`](super::greedy_by_size),
/// [`greedy_by_breadth`](super::greedy_by_breadth) and [`greedy_by_peak`](super::greedy_by_peak);
/// if that misses the lower bound, runs the branch-and-bound search described in this module's source
/// (MiniMalloc's canonical placements, dominance, section inference and decomposition): two
/// thirds of the nodes go to the lower bound itself, one third to probes just below the best
/// plan (a step below it that doubles after a success and halves after a probe runs out of
/// patience). It stops when the plan meets the proven bound, when `options.node_limit` nodes
/// are spent, or when `monitor.stop()` says so, and always returns the best plan found, never
/// worse than the heuristics'.
///
/// Time: exponential in the worst case (the problem is NP-hard), bounded by the node limit and
/// the monitor; each node costs `O(n + s)` for `n` buffers and `s` sections in its part of the
/// problem, plus the conflicts of the buffer placed. Memory: `O(n + s)` plus the conflict and
/// section lists (see [`SearchOptions::graph_limit`]).
///
/// ```
/// use std::time::{Duration, Instant};
/// use tagalloc::plan::{search, validate, Buffer, SearchOptions};
///
/// let buffers: Vec<Buffer> = (0..40u64)
///     .map(|i| Buffer::new(i, 1 + (i * 37) % 64, i % 7, i % 7 + 1 + i % 5))
///     .collect();
/// let deadline = Instant::now() + Duration::from_secs(1);
/// let found = search(&buffers, &SearchOptions::default(), &mut || Instant::now() > deadline)?;
/// validate(&buffers, &found.plan)?;
/// assert!(found.lower_bound <= found.plan.arena);
/// # Ok::<(), tagalloc::plan::PlanError>(())
/// ```
pub fn search<M: Monitor + ?Sized>(
    buffers: &[Buffer],
    options: &SearchOptions,
    monitor: &mut M,
) -> Result<Solution, PlanError> {
    check_buffers(buffers)?;
    // The heuristics first, under the monitor: once it says stop, what is left of them is
    // stacked, `O(n log n)`.
    let mut stopped = false;
    let mut greedy_stacked = [0; 3];
    let mut k = 0;
    let greedy = Order::ALL.map(|order| {
        let limit = if stopped { 0 } else { WORK_LIMIT };
        let placed = greedy::place(buffers, order, limit, monitor);
        stopped |= placed.stopped;
        greedy_stacked[k] = placed.stacked;
        k += 1;
        placed.plan
    });
    // The heuristics' best, ties to the earlier one: greedy by size first, so that where the
    // newer orders do not beat it the search starts from the same plan as before.
    let mut best = &greedy[0];
    for other in &greedy[1..] {
        if other.arena < best.arena {
            best = other;
        }
    }
    let best = best.clone();
    let stopped = stopped || monitor.stop();
    let inst = Instance::new(buffers, (!stopped).then_some(options.graph_limit));
    let mut lo = inst.lower_bound;
    monitor.improved(best.arena, lo);
    let mut nodes = 0u64;
    let done = |best: Plan, lo: u64, nodes: u64, greedy: [Plan; 3]| Solution {
        optimal: best.arena == lo,
        plan: best,
        lower_bound: lo,
        nodes,
        greedy,
        greedy_stacked,
    };
    let indexable = inst.len() < INDEX_LIMIT && inst.sections() < INDEX_LIMIT;
    if best.arena <= lo || !inst.has_graph() || !indexable || inst.len() == 0 || stopped {
        return Ok(done(best, lo, nodes, greedy));
    }

    let orders: Vec<(&'static str, Vec<u32>)> =
        PORTFOLIO.iter().map(|&k| (k, preorder(&inst, k))).collect();
    let mut parts = Part::all(&inst, &best);
    let n = inst.len() as u64;
    let mut budget = Budget {
        left: options.node_limit,
        monitor,
        stopped: false,
    };
    let arena = |parts: &[Part]| parts.iter().map(|p| p.arena).max().unwrap_or(0);
    let mut best_arena = best.arena;
    // Every offset and arena is a multiple of the grain (sizes are, alignment keeps it), so
    // the bound rounds up to one and capacities step by it.
    let grain = inst.grain;
    lo = lo.div_ceil(grain) * grain;
    // The bound itself, searched under every preorder at once (slices in turn), never
    // restarted: most hard instances are tight.
    let mut at_bound = Probe::new(lo);
    // Probes below the best plan, with half the nodes: at `best - step`, the step doubling
    // after a success and halving after a probe finds nothing within `patience` nodes; when it
    // cannot halve any more, it starts again from half the gap with twice the patience.
    let mut probe: Option<Probe<'_>> = None;
    let gap = |best: u64, lo: u64| ((best - lo) / 2 / grain).max(1) * grain;
    let mut step = gap(best_arena, lo);
    let mut patience = 16 * n.max(64);
    // A part may fit a capacity before the others do: the plan improves as soon as the
    // highest part comes down.
    let note = |parts: &[Part], best_arena: &mut u64, lo: u64, budget: &mut Budget<'_, M>| {
        if arena(parts) < *best_arena {
            *best_arena = arena(parts);
            budget.monitor.improved(*best_arena, lo);
        }
    };
    while best_arena > lo && !budget.stopped && budget.left > 0 {
        let before = nodes;
        let outcome = at_bound.step(SLICE, &inst, &orders, &mut parts, &mut budget, &mut nodes);
        note(&parts, &mut best_arena, lo, &mut budget);
        match outcome {
            Step::Found => break,
            Step::Infeasible => {
                lo += grain;
                at_bound = Probe::new(lo);
            }
            Step::Running => {}
        }
        if best_arena <= lo + grain {
            continue;
        }
        let share = (nodes - before) / 2;
        let p = probe
            .get_or_insert_with(|| Probe::new(best_arena.saturating_sub(step).max(lo + grain)));
        let cap = p.cap;
        let outcome = p.step(share, &inst, &orders, &mut parts, &mut budget, &mut nodes);
        let spent = p.spent;
        note(&parts, &mut best_arena, lo, &mut budget);
        match outcome {
            Step::Found => {
                step = step.saturating_mul(2).min(gap(best_arena, lo));
                probe = None;
            }
            Step::Infeasible => {
                lo = lo.max(cap + grain);
                at_bound = Probe::new(lo);
                step = gap(best_arena, lo);
                probe = None;
            }
            Step::Running if spent > patience => {
                if step > grain {
                    step = (step / 2 / grain).max(1) * grain;
                } else {
                    step = gap(best_arena, lo);
                    patience = patience.saturating_mul(2);
                }
                probe = None;
            }
            Step::Running => {}
        }
    }
    let best = Part::plan(&parts, &inst, buffers);
    debug_assert_eq!(best.arena, best_arena);
    let lo = lo.min(best.arena);
    Ok(done(best, lo, nodes, greedy))
}

/// An independent part of the problem: a run of sections that no buffer crosses into the
/// next, with its buffers and the best placement found for them. Parts are searched one at a
/// time, and a part that fits a capacity keeps its placement when the others are retried.
struct Part {
    sec_lo: u32,
    sec_hi: u32,
    /// Its buffers (instance indices).
    buffers: Vec<u32>,
    /// Their offsets in the best placement found.
    offsets: Vec<u64>,
    /// The end of its highest buffer there.
    arena: u64,
    /// No placement of the part has a smaller arena.
    bound: u64,
}

impl Part {
    /// The parts of `inst`, each starting from its buffers' offsets in `plan`.
    fn all(inst: &Instance, plan: &Plan) -> Vec<Part> {
        let cuts = inst.cuts();
        let mut parts = Vec::new();
        let mut lo = 0;
        for s in 0..inst.sections() {
            // `cuts` has one entry fewer than there are sections: the last one ends a part.
            if cuts.get(s).is_none_or(|&c| c == 0) {
                parts.push(Part {
                    sec_lo: lo as u32,
                    sec_hi: s as u32 + 1,
                    buffers: Vec::new(),
                    offsets: Vec::new(),
                    arena: 0,
                    bound: inst.sec_total[lo..=s].iter().copied().max().unwrap_or(0),
                });
                lo = s + 1;
            }
        }
        for b in 0..inst.len() {
            let p = parts.partition_point(|p| p.sec_hi <= inst.lo[b]);
            let part = &mut parts[p];
            let off = plan.offsets[inst.orig[b] as usize];
            part.buffers.push(b as u32);
            part.offsets.push(off);
            part.arena = part.arena.max(off + inst.size[b]);
        }
        parts
    }

    /// The whole plan from the parts' placements (zero-size buffers at 0).
    fn plan(parts: &[Part], inst: &Instance, buffers: &[Buffer]) -> Plan {
        let mut offsets = vec![0u64; buffers.len()];
        for part in parts {
            for (&b, &o) in part.buffers.iter().zip(&part.offsets) {
                offsets[inst.orig[b as usize] as usize] = o;
            }
        }
        let arena = parts.iter().map(|p| p.arena).max().unwrap_or(0);
        Plan { offsets, arena }
    }
}

/// Nodes each search of a probe runs before the next one's turn.
const SLICE: u64 = 4096;

/// Where a probe stands after a step.
enum Step {
    /// Every part fits the capacity.
    Found,
    /// Some part was proven not to fit.
    Infeasible,
    /// Neither yet.
    Running,
}

/// The question "does every part fit in `cap`?", searched for each part that does not yet,
/// under every preorder at once: one resumable search per part and preorder, run in slices in
/// turn, so that the preorder that suits a part is not held up by the others and no search is
/// ever restarted.
struct Probe<'i> {
    cap: u64,
    started: bool,
    /// (part, search) for the parts that still exceed `cap`.
    searches: Vec<(usize, Engine<'i>)>,
    /// Nodes spent so far.
    spent: u64,
}

impl<'i> Probe<'i> {
    fn new(cap: u64) -> Self {
        Probe {
            cap,
            started: false,
            searches: Vec::new(),
            spent: 0,
        }
    }

    /// Runs the searches for about `nodes` nodes in all (a slice each at least), storing what
    /// they find in `parts`.
    fn step<M: Monitor + ?Sized>(
        &mut self,
        nodes: u64,
        inst: &'i Instance,
        orders: &[(&'static str, Vec<u32>)],
        parts: &mut [Part],
        budget: &mut Budget<'_, M>,
        total: &mut u64,
    ) -> Step {
        let cap = self.cap;
        if !self.started {
            self.started = true;
            for (i, part) in parts.iter().enumerate().filter(|(_, p)| p.arena > cap) {
                for (keys, order) in orders {
                    let mut engine = Engine::new(inst);
                    engine.start(cap, keys, order, part);
                    self.searches.push((i, engine));
                    // Setting a search up is `O(n log n)`: with many parts, the monitor is
                    // asked between them too.
                    if budget.monitor.stop() {
                        budget.stopped = true;
                        return Step::Running;
                    }
                }
            }
        }
        let slice = (nodes / self.searches.len().max(1) as u64).max(POLL);
        for (i, engine) in self.searches.iter_mut() {
            if parts[*i].arena <= cap {
                continue;
            }
            let (outcome, used) = engine.resume(slice.min(budget.left), budget);
            *total += used;
            self.spent += used;
            budget.left = budget.left.saturating_sub(used);
            match outcome {
                Outcome::Found => engine.store(&mut parts[*i]),
                Outcome::Infeasible => {
                    parts[*i].bound = parts[*i].bound.max(cap + 1);
                    return Step::Infeasible;
                }
                Outcome::Aborted if budget.stopped || budget.left == 0 => break,
                Outcome::Aborted => {}
            }
        }
        self.searches.retain(|(i, _)| parts[*i].arena > cap);
        if self.searches.is_empty() {
            Step::Found
        } else {
            Step::Running
        }
    }
}

/// Nodes left and the caller's monitor, polled every [`POLL`] nodes.
struct Budget<'m, M: Monitor + ?Sized> {
    left: u64,
    monitor: &'m mut M,
    stopped: bool,
}

/// Nodes between two calls of [`Monitor::stop`].
const POLL: u64 = 256;

/// Buffers and sections scanned between two calls of [`Monitor::stop`], whatever the nodes:
/// about a millisecond.
const POLL_WORK: u64 = 1 << 20;

/// The preorders searched side by side: `TWA` (largest section total, then longest lifetime,
/// then largest area) and `TAW`, two of MiniMalloc's three defaults, each once with static
/// ranks and once (`+`) re-ranked by the current section totals in every goal split off, as
/// MiniMalloc's `SubSolve` does. Measured on MiniMalloc's challenging set (A–K, at their
/// bounds), the first solution always came from one of these four, and never from its third
/// default, `WAT`, which is left out so that the four share the nodes.
const PORTFOLIO: [&str; 4] = ["TWA", "TAW", "TWA+", "TAW+"];

/// A static preorder as ranks per buffer: buffers sorted by the keys named, each descending,
/// ties by index. Keys (MiniMalloc's letters): `W` lifetime length, `A` area (size × length),
/// `T` largest section total over the lifetime, `Z` size, `C` sections spanned, `O`
/// conflicts, `L` start, `U` end.
fn preorder(inst: &Instance, keys: &str) -> Vec<u32> {
    let n = inst.len();
    let total = inst.breadth();
    let mut order: Vec<u32> = (0..n as u32).collect();
    sort_by_keys(inst, keys, &total, &mut order);
    let mut rank = vec![0u32; n];
    for (r, &b) in order.iter().enumerate() {
        rank[b as usize] = r as u32;
    }
    rank
}

/// Sorts `order` (buffer indices) by the preorder `keys` (a trailing `+` is not a key),
/// each descending, ties by index;
/// `total[b]` is buffer `b`'s section total for the key `T`.
fn sort_by_keys(inst: &Instance, keys: &str, total: &[u64], order: &mut [u32]) {
    let key = |b: usize, k: u8| -> u128 {
        match k {
            b'W' => inst.length[b] as u128,
            b'A' => inst.size[b] as u128 * inst.length[b] as u128,
            b'T' => total[b] as u128,
            b'Z' => inst.size[b] as u128,
            b'C' => (inst.hi[b] - inst.lo[b]) as u128,
            b'O' if inst.has_graph() => inst.conflicts(b).len() as u128,
            b'L' => inst.lo[b] as u128,
            b'U' => inst.hi[b] as u128,
            _ => 0,
        }
    };
    order.sort_by(|&a, &b| {
        for &k in keys.as_bytes() {
            let (ka, kb) = (key(a as usize, k), key(b as usize, k));
            if ka != kb {
                return kb.cmp(&ka);
            }
        }
        a.cmp(&b)
    });
}

/// No buffer, goal or frame.
const NONE: u32 = u32::MAX;
/// Above this many buffers, the search keeps section floors as the tops of the placed
/// buffers only, without raising them to the lowest minimum offset of the unplaced ones: on
/// large graphs a long-lived buffer conflicts with thousands of others, each spanning
/// thousands of sections, and keeping the exact floors would cost millions of steps a node.
const LIGHT: usize = 4096;

/// Slots of a search's no-good table at most (16 bytes each).
const NOGOODS: usize = 1 << 18;

/// The signature of a search state: the capacity, the goal's sections and canonical floor,
/// and each unplaced buffer of the goal with its rank and minimum offset. That is all a
/// frame's subtree depends on: placed buffers act on the goal only through the minimum
/// offsets, no unplaced buffer outside the goal shares a section with it, and the ranks give
/// the canonical floor its meaning (a re-ranked goal can meet the same buffers and offsets
/// under other ranks). A frame is exhausted only by
/// failures within its own goal (a failure of a later goal jumps past it), so an exhausted
/// frame's signature is a state with no placement, and meeting it again the search can fail at
/// once. 128 bits from two independent multiply-xorshift lanes, so that two different states
/// sharing a signature is not a practical concern. Signatures depend on the buffers' list
/// order, which is fixed (ascending) for a given goal.
struct Sig(u64, u64);

impl Sig {
    fn new(cap: u64, sec_lo: u32, sec_hi: u32, floor_off: u64, floor_pre: u32) -> Sig {
        let mut s = Sig(0x243F_6A88_85A3_08D3, 0x1319_8A2E_0370_7344);
        s.add(cap, floor_off);
        s.add(((sec_lo as u64) << 32) | sec_hi as u64, floor_pre as u64);
        s
    }

    #[inline(always)]
    fn add(&mut self, b: u64, m: u64) {
        let x = m ^ b.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(23);
        self.0 = (self.0 ^ x).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        self.0 ^= self.0 >> 31;
        self.1 = (self.1 ^ x.rotate_left(41) ^ b).wrapping_mul(0x94D0_49BB_1331_11EB);
        self.1 ^= self.1 >> 29;
    }

    /// Never 0, the table's empty slot.
    fn finish(self) -> u128 {
        (((self.0 as u128) << 64) | self.1 as u128).max(1)
    }
}

/// Marks a section rescanned in this placement (`Engine::sec_seen`, above every epoch).
const STALE: u32 = 1 << 31;
/// The offset of a buffer not placed yet.
const UNPLACED: u64 = u64::MAX;

/// How one decision search ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    /// Every buffer is placed within the capacity.
    Found,
    /// The whole search space was exhausted: no plan fits the capacity.
    Infeasible,
    /// The node limit or the monitor stopped it first.
    Aborted,
}

/// One change to the search state, undone in reverse order on backtracking, packed in 16
/// bytes (the trail is the search's busiest memory): the kind in the top two bits of `head`,
/// a buffer or section index in the rest, and the old values in `aux` and `value`.
///
/// - `PLACED`, buffer `b`: it becomes unplaced again, its sections get its size back and
///   their cuts their count.
/// - `MIN_OFFSET`, buffer `c`: its minimum offset was `value`.
/// - `LOW`, section `s`: its lowest minimum offset was `value`, held by `aux` buffers.
/// - `RANK`, buffer `b`: its preorder rank was `aux`.
#[derive(Clone, Copy)]
struct Undo {
    head: u32,
    aux: u32,
    value: u64,
}

const PLACED: u32 = 0;
const MIN_OFFSET: u32 = 1;
const LOW: u32 = 2;
const RANK: u32 = 3;
/// Indices below this fit beside the kind (the search is not run on larger problems).
const INDEX_LIMIT: usize = 1 << 30;

impl Undo {
    fn new(kind: u32, index: u32, aux: u32, value: u64) -> Undo {
        Undo {
            head: (kind << 30) | index,
            aux,
            value,
        }
    }

    fn kind(self) -> u32 {
        self.head >> 30
    }

    fn index(self) -> usize {
        (self.head & (INDEX_LIMIT as u32 - 1)) as usize
    }
}

/// A part of the problem still to solve: the unplaced buffers of `pool[list]` (placed ones
/// are skipped), living in sections `[sec_lo, sec_hi)`, to be placed at or above
/// `(floor_off, floor_pre)` in (offset, preorder) order. Goals form linked lists (`next`)
/// in an arena and are never changed once made, so a frame restores the list of goals still
/// to solve by restoring one index.
#[derive(Clone, Copy)]
struct Goal {
    list_lo: u32,
    list_hi: u32,
    sec_lo: u32,
    sec_hi: u32,
    floor_off: u64,
    floor_pre: u32,
    /// The goal to solve after this one.
    next: u32,
    /// The frame whose placement made this goal; when the goal cannot be solved, the search
    /// resumes there. `NONE` for the problem's own parts.
    creator: u32,
}

/// A choice point: the candidates to place next in one goal.
#[derive(Clone, Copy)]
struct Frame {
    goal: u32,
    /// The goal's buffers as this frame sees them (compacted when many were placed).
    list_lo: u32,
    list_hi: u32,
    cand_hi: u32,
    next: u32,
    trail_mark: u32,
    goals_mark: u32,
    pool_mark: u32,
    /// The state's signature, recorded as a no-good when the frame is exhausted.
    sig: u128,
}

/// The state of a decision search, kept between searches so that its vectors are allocated
/// once.
///
/// Invariants between nodes: `off[b]` is `UNPLACED` or `b`'s offset; for an unplaced `b`,
/// `avail[b]` is its minimum offset, the aligned top of the highest placed buffer conflicting
/// with it (and `UNPLACED` for a placed one); `total[s]`
/// is the size of the unplaced buffers live in section `s`; `cuts[s]` counts the unplaced
/// buffers live in both `s` and `s + 1`; `low[s]` is the lowest minimum offset of the
/// unplaced buffers live in `s` (the section's floor: no placed buffer there reaches above
/// it) and `low_count[s]` how many of them have it; in `light` mode, `low[s]` is instead the
/// top of the buffers placed in `s`, a weaker floor. Every change since a frame was opened is
/// on the trail above its `trail_mark`.
struct Engine<'i> {
    inst: &'i Instance,
    init_cuts: Vec<u32>,
    cap: u64,
    pre: Vec<u32>,
    off: Vec<u64>,
    /// The minimum offset of an unplaced buffer, `UNPLACED` for a placed one: one load
    /// tells both.
    avail: Vec<u64>,
    total: Vec<u64>,
    low: Vec<u64>,
    low_count: Vec<u32>,
    cuts: Vec<u32>,
    /// Unplaced buffers conflicting with each buffer.
    free_deg: Vec<u32>,
    /// Large instance: section floors are the tops of placed buffers only (see `LIGHT`).
    light: bool,
    /// The buffer interchangeable with each one (same size, alignment and sections) that
    /// precedes it in the preorder, or `NONE`: placed first, so that of two plans that differ
    /// by swapping them only one is explored.
    twin: Vec<u32>,
    trail: Vec<Undo>,
    frames: Vec<Frame>,
    cands: Vec<u32>,
    goals: Vec<Goal>,
    pool: Vec<u32>,
    sec_seen: Vec<u32>,
    epoch: u32,
    affected: Vec<u32>,
    cutpoints: Vec<u32>,
    scratch: Vec<(u64, u32, u32)>,
    /// Where a paused search goes on: the goal to open next (if `opening`), or the top frame.
    head: u32,
    opening: bool,
    outcome: Option<Outcome>,
    poll_at: u64,
    /// Buffers and sections scanned so far, and when to ask the monitor next: on a large
    /// problem a node scans its goal's whole list, so nodes alone are a poor clock.
    work: u64,
    work_poll_at: u64,
    counts: Vec<u32>,
    fill: Vec<u32>,
    /// Signatures of states proven to have no placement within `cap` (see [`Sig`]), in a
    /// direct-mapped table (a newer entry replaces an older one in its slot).
    nogood: Vec<u128>,
    /// The preorder's keys, whether split-off goals are re-ranked by them (`+`), and scratch
    /// space to do it.
    keys: &'static str,
    dynamic: bool,
    order_buf: Vec<u32>,
    t_buf: Vec<u64>,
    nodes: u64,
}

impl<'i> Engine<'i> {
    fn new(inst: &'i Instance) -> Self {
        let (n, s) = (inst.len(), inst.sections());
        Engine {
            inst,
            init_cuts: inst.cuts(),
            cap: 0,
            pre: vec![0; n],
            off: vec![UNPLACED; n],
            avail: vec![0; n],
            total: inst.sec_total.clone(),
            low: vec![0; s],
            low_count: vec![0; s],
            cuts: Vec::new(),
            free_deg: (0..n).map(|b| inst.conflicts(b).len() as u32).collect(),
            twin: vec![NONE; n],
            light: n > LIGHT,
            trail: Vec::new(),
            frames: Vec::new(),
            cands: Vec::new(),
            goals: Vec::new(),
            pool: Vec::new(),
            sec_seen: vec![0; s],
            epoch: 0,
            affected: Vec::new(),
            cutpoints: Vec::new(),
            scratch: Vec::new(),
            head: NONE,
            opening: false,
            outcome: None,
            poll_at: POLL,
            work: 0,
            work_poll_at: POLL_WORK,
            counts: Vec::new(),
            fill: Vec::new(),
            nogood: vec![0; (n * 256).clamp(1 << 10, NOGOODS)],
            keys: "",
            dynamic: false,
            order_buf: Vec::new(),
            t_buf: vec![0; n],
            nodes: 0,
        }
    }

    /// Stores the placement of the last successful search into `part`.
    fn store(&self, part: &mut Part) {
        part.arena = 0;
        for (&b, o) in part.buffers.iter().zip(part.offsets.iter_mut()) {
            *o = self.off[b as usize];
            part.arena = part.arena.max(*o + self.inst.size[b as usize]);
        }
    }

    /// Resets the state for a search of `part` at capacity `cap` under preorder `pre`, and
    /// returns its goal.
    fn reset(&mut self, cap: u64, pre: &[u32], part: &Part) -> u32 {
        let inst = self.inst;
        self.cap = cap;
        self.pre.clear();
        self.pre.extend_from_slice(pre);
        self.nogood.fill(0);
        // Interchangeable buffers, chained in preorder.
        let mut by_shape: Vec<u32> = (0..inst.len() as u32).collect();
        let shape = |b: u32| {
            let b = b as usize;
            (inst.lo[b], inst.hi[b], inst.size[b], inst.align[b], pre[b])
        };
        by_shape.sort_unstable_by_key(|&b| shape(b));
        self.twin.fill(NONE);
        for w in by_shape.windows(2) {
            let (a, b) = (shape(w[0]), shape(w[1]));
            if (a.0, a.1, a.2, a.3) == (b.0, b.1, b.2, b.3) {
                self.twin[w[1] as usize] = w[0];
            }
        }
        self.off.fill(UNPLACED);
        self.avail.fill(0);
        self.total.clear();
        self.total.extend_from_slice(&inst.sec_total);
        self.low.fill(0);
        for s in 0..inst.sections() {
            self.low_count[s] = inst.members(s).len() as u32;
        }
        self.cuts.clear();
        self.cuts.extend_from_slice(&self.init_cuts);
        for b in 0..inst.len() {
            self.free_deg[b] = inst.conflicts(b).len() as u32;
        }
        self.trail.clear();
        self.frames.clear();
        self.cands.clear();
        self.goals.clear();
        self.pool.clear();
        self.nodes = 0;
        self.poll_at = POLL;
        self.work_poll_at = self.work + POLL_WORK;
        self.pool.extend_from_slice(&part.buffers);
        self.goals.push(Goal {
            list_lo: 0,
            list_hi: part.buffers.len() as u32,
            sec_lo: part.sec_lo,
            sec_hi: part.sec_hi,
            floor_off: 0,
            floor_pre: 0,
            next: NONE,
            creator: NONE,
        });
        0
    }

    /// Makes one goal per run of sections of `[parent.sec_lo, parent.sec_hi)` between the
    /// `cutpoints`, holding the unplaced buffers of `pool[list_lo..list_hi]` that live there,
    /// chained in section order before `parent.next`; returns the first (or `parent.next` if
    /// all are empty).
    fn split(&mut self, list_lo: u32, list_hi: u32, parent: &Goal, creator: u32) -> u32 {
        let inst = self.inst;
        self.work += u64::from(list_hi - list_lo);
        let k = self.cutpoints.len() + 1;
        let (sec_lo, sec_hi) = (parent.sec_lo, parent.sec_hi);
        let bound = |cutpoints: &[u32], i: usize| -> u32 {
            if i == 0 {
                sec_lo
            } else if i == k {
                sec_hi
            } else {
                cutpoints[i - 1]
            }
        };
        // Counting sort of the unplaced buffers by the part they live in (each lives in
        // exactly one, as no unplaced buffer crosses a zero cut).
        let part_of = |cutpoints: &[u32], b: u32| cutpoints.partition_point(|&c| c <= b);
        self.counts.clear();
        self.counts.resize(k + 1, 0);
        for i in list_lo..list_hi {
            let b = self.pool[i as usize] as usize;
            if self.off[b] == UNPLACED {
                self.counts[part_of(&self.cutpoints, inst.lo[b]) + 1] += 1;
            }
        }
        for i in 0..k {
            self.counts[i + 1] += self.counts[i];
        }
        let base = self.pool.len() as u32;
        self.pool.resize((base + self.counts[k]) as usize, 0);
        self.fill.clear();
        self.fill.extend_from_slice(&self.counts);
        for i in list_lo..list_hi {
            let b = self.pool[i as usize];
            if self.off[b as usize] == UNPLACED {
                let p = part_of(&self.cutpoints, inst.lo[b as usize]);
                self.pool[(base + self.fill[p]) as usize] = b;
                self.fill[p] += 1;
            }
        }
        let mut head = parent.next;
        for p in (0..k).rev() {
            if self.counts[p] == self.counts[p + 1] {
                continue;
            }
            if creator != NONE && self.dynamic {
                self.rerank(base + self.counts[p], base + self.counts[p + 1]);
            }
            self.goals.push(Goal {
                list_lo: base + self.counts[p],
                list_hi: base + self.counts[p + 1],
                sec_lo: bound(&self.cutpoints, p),
                sec_hi: bound(&self.cutpoints, p + 1),
                floor_off: 0,
                floor_pre: 0,
                next: head,
                creator,
            });
            head = self.goals.len() as u32 - 1;
        }
        head
    }

    /// Ranks the buffers of `pool[lo..hi]`, a goal just split off, by the preorder's keys with
    /// `T` taken from the sections' current totals (the unplaced buffers only), as MiniMalloc
    /// does for each sub-partition it solves. Ranks are only compared within a goal.
    fn rerank(&mut self, lo: u32, hi: u32) {
        let inst = self.inst;
        self.order_buf.clear();
        self.order_buf
            .extend_from_slice(&self.pool[lo as usize..hi as usize]);
        for &b in &self.order_buf {
            let b = b as usize;
            self.t_buf[b] = self.total[inst.lo[b] as usize..inst.hi[b] as usize]
                .iter()
                .copied()
                .max()
                .unwrap_or(0);
        }
        let mut order = core::mem::take(&mut self.order_buf);
        sort_by_keys(inst, self.keys, &self.t_buf, &mut order);
        for (r, &b) in order.iter().enumerate() {
            let b = b as usize;
            if self.pre[b] != r as u32 {
                self.trail.push(Undo::new(RANK, b as u32, self.pre[b], 0));
                self.pre[b] = r as u32;
            }
        }
        self.order_buf = order;
    }

    /// Starts a search for a placement of `part` within `cap` under preorder `pre`; run it with
    /// [`Engine::resume`].
    fn start(&mut self, cap: u64, keys: &'static str, pre: &[u32], part: &Part) {
        self.keys = keys;
        self.dynamic = keys.ends_with('+');
        self.head = self.reset(cap, pre, part);
        self.opening = true;
        self.outcome = None;
    }

    /// Continues the search for at most `limit` more nodes (or until the monitor says stop).
    /// Returns the outcome and the nodes used. After `Aborted` it can be resumed where it
    /// stopped; after `Found`, `off` holds the placement; `Found` and `Infeasible` are final.
    fn resume<M: Monitor + ?Sized>(
        &mut self,
        limit: u64,
        budget: &mut Budget<'_, M>,
    ) -> (Outcome, u64) {
        let first = self.nodes;
        if let Some(done) = self.outcome {
            return (done, 0);
        }
        let stop_at = first.saturating_add(limit);
        let outcome = 'search: loop {
            if self.opening {
                if !self.open(self.head) {
                    break Outcome::Found;
                }
                self.opening = false;
            }
            loop {
                if self.nodes >= stop_at {
                    return (Outcome::Aborted, self.nodes - first);
                }
                if self.nodes >= self.poll_at || self.work >= self.work_poll_at {
                    self.poll_at = self.nodes + POLL;
                    self.work_poll_at = self.work + POLL_WORK;
                    if budget.monitor.stop() {
                        budget.stopped = true;
                        return (Outcome::Aborted, self.nodes - first);
                    }
                }
                let f = self.frames.len() - 1;
                if let Some(child) = self.advance(f) {
                    self.head = child;
                    self.opening = true;
                    break;
                }
                // Every candidate failed: resume at the frame that made this goal.
                let creator = self.goals[self.frames[f].goal as usize].creator;
                if creator == NONE {
                    break 'search Outcome::Infeasible;
                }
                let c = creator as usize;
                self.frames.truncate(c + 1);
                self.cands.truncate(self.frames[c].cand_hi as usize);
            }
        };
        self.outcome = Some(outcome);
        (outcome, self.nodes - first)
    }

    /// Opens a frame on the first goal from `g` on that has unplaced buffers, with its
    /// candidates in order; `false` if every goal is solved.
    fn open(&mut self, mut g: u32) -> bool {
        let inst = self.inst;
        loop {
            if g == NONE {
                return false;
            }
            let goal = self.goals[g as usize];
            self.work += u64::from(goal.list_hi - goal.list_lo);
            let (mut unplaced, mut min_top) = (0u32, u64::MAX);
            // The lowest (offset, preorder) key of a buffer with no unplaced conflicts: its
            // minimum offset can no longer change, so it must be placed before anything with
            // a higher key (MiniMalloc's "hatless" pruning, applied before trying it).
            let mut hatless = (u64::MAX, u32::MAX);
            // The state this frame searches: everything its subtree depends on.
            let mut sig = Sig::new(
                self.cap,
                goal.sec_lo,
                goal.sec_hi,
                goal.floor_off,
                goal.floor_pre,
            );
            for &b in &self.pool[goal.list_lo as usize..goal.list_hi as usize] {
                let b = b as usize;
                let m = self.avail[b];
                if m != UNPLACED {
                    sig.add(((self.pre[b] as u64) << 32) | b as u64, m);
                    unplaced += 1;
                    min_top = min_top.min(m + inst.size[b]);
                    if self.free_deg[b] == 0 {
                        hatless = hatless.min((m, self.pre[b]));
                    }
                }
            }
            if unplaced == 0 {
                g = goal.next;
                continue;
            }
            // Compact the list once most of it is placed, so that scans stay short.
            let (mut list_lo, mut list_hi) = (goal.list_lo, goal.list_hi);
            if unplaced * 2 < list_hi - list_lo {
                let base = self.pool.len();
                for i in list_lo..list_hi {
                    let b = self.pool[i as usize];
                    if self.avail[b as usize] != UNPLACED {
                        self.pool.push(b);
                    }
                }
                (list_lo, list_hi) = (base as u32, self.pool.len() as u32);
            }
            // Candidates: at or above the canonical floor, below the lowest reachable top
            // (dominance), not after a hatless buffer, in (offset, preorder) order. A hatless
            // buffer below the floor can never be placed: then there are none.
            self.scratch.clear();
            let floor = (goal.floor_off, goal.floor_pre);
            let none = (u64::MAX, u32::MAX);
            let sig = sig.finish();
            let known = self.nogood[(sig as usize) & (self.nogood.len() - 1)] == sig;
            if !known && (hatless == none || hatless >= floor) {
                for &b in &self.pool[list_lo as usize..list_hi as usize] {
                    let bu = b as usize;
                    let key = (self.avail[bu], self.pre[bu]);
                    if key.0 == UNPLACED {
                        continue;
                    }
                    let t = self.twin[bu];
                    if t != NONE && self.avail[t as usize] != UNPLACED {
                        continue;
                    }
                    if key.0 >= min_top || key < floor || key > hatless {
                        continue;
                    }
                    self.scratch.push((key.0, key.1, b));
                }
            }
            self.scratch.sort_unstable();
            let cand_lo = self.cands.len() as u32;
            self.cands.extend(self.scratch.iter().map(|c| c.2));
            self.frames.push(Frame {
                goal: g,
                list_lo,
                list_hi,
                cand_hi: self.cands.len() as u32,
                next: cand_lo,
                trail_mark: self.trail.len() as u32,
                goals_mark: self.goals.len() as u32,
                pool_mark: self.pool.len() as u32,
                sig,
            });
            return true;
        }
    }

    /// Tries the next candidates of frame `f` until one is placed without a contradiction;
    /// returns the goal to continue with, or `None` when they are exhausted (the state is then
    /// as when the frame was opened).
    fn advance(&mut self, f: usize) -> Option<u32> {
        let fr = self.frames[f];
        self.undo_to(fr.trail_mark as usize);
        self.goals.truncate(fr.goals_mark as usize);
        self.pool.truncate(fr.pool_mark as usize);
        let goal = self.goals[fr.goal as usize];
        let mut next = fr.next;
        while next < fr.cand_hi {
            let b = self.cands[next as usize];
            next += 1;
            self.nodes += 1;
            if self.place(b as usize, &goal) {
                self.frames[f].next = next;
                if self.cutpoints.is_empty() {
                    self.goals.push(Goal {
                        list_lo: fr.list_lo,
                        list_hi: fr.list_hi,
                        floor_off: self.off[b as usize],
                        floor_pre: self.pre[b as usize],
                        creator: f as u32,
                        ..goal
                    });
                    return Some(self.goals.len() as u32 - 1);
                }
                // The placement cut the goal into independent parts.
                return Some(self.split(fr.list_lo, fr.list_hi, &goal, f as u32));
            }
            self.undo_to(fr.trail_mark as usize);
        }
        self.frames[f].next = next;
        // Every placement from this state failed within its own goal: a no-good.
        let slot = (fr.sig as usize) & (self.nogood.len() - 1);
        self.nogood[slot] = fr.sig;
        None
    }

    /// Places `b` at its minimum offset within `goal` and propagates: conflicting buffers'
    /// minimum offsets, section totals, floors and cuts. `false` if that leaves some buffer or
    /// section without room under the capacity. Every change goes on the trail either way;
    /// `cutpoints` lists the section boundaries whose cut became zero.
    fn place(&mut self, b: usize, goal: &Goal) -> bool {
        let inst = self.inst;
        let cap = self.cap;
        let o = self.avail[b];
        let size = inst.size[b];
        let top = o + size;
        self.off[b] = o;
        self.avail[b] = UNPLACED;
        self.trail.push(Undo::new(PLACED, b as u32, 0, 0));
        let (blo, bhi) = (inst.lo[b] as usize, inst.hi[b] as usize);
        self.work += (bhi - blo + inst.conflicts(b).len()) as u64;
        self.epoch += 1;
        if self.epoch == STALE {
            self.sec_seen.fill(0);
            self.epoch = 1;
        }
        let epoch = self.epoch;
        // `b` leaves its sections' unplaced sets.
        self.affected.clear();
        for s in blo..bhi {
            self.total[s] -= size;
            if self.light {
                // The floor is only the top of the placed buffers (see `LIGHT`).
                if self.low[s] != top {
                    self.trail
                        .push(Undo::new(LOW, s as u32, self.low_count[s], self.low[s]));
                    self.low[s] = top;
                }
            } else {
                self.leave(s, o, epoch);
            }
        }
        self.cutpoints.clear();
        for s in blo..bhi - 1 {
            self.cuts[s] -= 1;
            if self.cuts[s] == 0 {
                self.cutpoints.push(s as u32 + 1);
            }
        }
        let conflicts = inst.conflicts(b);
        for (k, &c) in conflicts.iter().enumerate() {
            let c = c as usize;
            self.free_deg[c] -= 1;
            let old = self.avail[c];
            if old >= top {
                continue; // placed (UNPLACED is the largest value), or high enough
            }
            let m = align_up(top, inst.align[c]);
            self.trail.push(Undo::new(MIN_OFFSET, c as u32, 0, old));
            self.avail[c] = m;
            if m + inst.size[c] > cap {
                // The undo of `Placed` gives every conflict its count back: take them all.
                for &d in &conflicts[k + 1..] {
                    self.free_deg[d as usize] -= 1;
                }
                return false;
            }
            if !self.light {
                for s in inst.lo[c] as usize..inst.hi[c] as usize {
                    self.leave(s, old, epoch);
                }
            }
        }
        // Sections whose lowest minimum offset lost its last holder: rescan them.
        for i in 0..self.affected.len() {
            let s = self.affected[i] as usize;
            self.work += inst.members(s).len() as u64;
            let (mut low, mut count) = (u64::MAX, 0u32);
            for &c in inst.members(s) {
                let m = self.avail[c as usize];
                if m < low {
                    (low, count) = (m, 1);
                } else if m == low {
                    count += 1;
                }
            }
            if low == UNPLACED {
                count = 0;
            }
            self.low[s] = low;
            self.low_count[s] = count;
        }
        // Every section of the goal must hold its unplaced buffers above its floor, and no
        // later placement in the goal goes below `o`. Every section of the goal passed this
        // with the goal's floor offset when the goal was made; at that same offset, only the
        // sections this placement changed (`b`'s, and those rescanned) can fail now.
        let fits = |s: usize| {
            let t = self.total[s];
            t == 0 || self.low[s].max(o) + t <= cap
        };
        if o == goal.floor_off {
            (blo..bhi).all(fits) && self.affected.iter().all(|&s| fits(s as usize))
        } else {
            self.work += u64::from(goal.sec_hi - goal.sec_lo);
            (goal.sec_lo as usize..goal.sec_hi as usize).all(fits)
        }
    }

    /// A buffer whose minimum offset was `m` leaves the unplaced set of section `s` (placed, or
    /// its minimum offset raised): if it held the section's lowest minimum offset, one holder
    /// fewer, and the section is rescanned when none is left. The section's values go on
    /// the trail once per placement (`sec_seen[s] == epoch` afterwards, `epoch | STALE` once
    /// it is to be rescanned).
    #[inline(always)]
    fn leave(&mut self, s: usize, m: u64, epoch: u32) {
        if self.low[s] != m {
            return;
        }
        let seen = self.sec_seen[s];
        if seen == epoch | STALE {
            return;
        }
        if seen != epoch {
            self.trail
                .push(Undo::new(LOW, s as u32, self.low_count[s], self.low[s]));
            self.sec_seen[s] = epoch;
        }
        self.low_count[s] -= 1;
        if self.low_count[s] == 0 {
            self.sec_seen[s] = epoch | STALE;
            self.affected.push(s as u32);
        }
    }

    /// Undoes the trail down to `mark` entries.
    fn undo_to(&mut self, mark: usize) {
        let inst = self.inst;
        while self.trail.len() > mark {
            let Some(u) = self.trail.pop() else { break };
            let i = u.index();
            match u.kind() {
                PLACED => {
                    self.avail[i] = self.off[i];
                    self.off[i] = UNPLACED;
                    let (lo, hi) = (inst.lo[i] as usize, inst.hi[i] as usize);
                    for s in lo..hi {
                        self.total[s] += inst.size[i];
                    }
                    for s in lo..hi - 1 {
                        self.cuts[s] += 1;
                    }
                    for &c in inst.conflicts(i) {
                        self.free_deg[c as usize] += 1;
                    }
                }
                MIN_OFFSET => self.avail[i] = u.value,
                LOW => {
                    self.low[i] = u.value;
                    self.low_count[i] = u.aux;
                }
                _ => self.pre[i] = u.aux,
            }
        }
    }
}
