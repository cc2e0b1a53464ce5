//! Exact search: branch and bound over canonical placements, after MiniMalloc.
//!
//! The search answers one question at a time, "is there a plan whose arena is at most
//! `cap`?", by depth-first search; [`search`] asks it for a falling sequence of capacities to
//! close the gap between the lower bound and the best plan known. What it takes from MiniMalloc
//! (M. Moffitt, "MiniMalloc: A Lightweight Memory Allocator for Hardware-Accelerated Machine
//! Learning", ASPLOS 2023; google/minimalloc `src/solver.cc`), rebuilt here in its own
//! structure:
//!
//! - **Canonical placements.** Every buffer is placed at its *minimum offset*: the top of the
//!   highest conflicting buffer placed so far (aligned). Buffers are placed in non-decreasing
//!   order of offset, ties broken by a fixed preorder, so each plan in which no buffer can
//!   slide down is built exactly once, and an optimal plan is always among them.
//! - **Dominance.** A buffer is never placed at or above the lowest *top* any unplaced buffer
//!   could reach: that buffer would fit below, in a gap nothing later can fill, so the same
//!   plan with it slid down is explored in another branch.
//! - **Inference per section.** In every section of time, the unplaced buffers must all fit
//!   between the section's floor and the capacity. The floor is the highest of: the top of the
//!   buffers placed there, the offset of the last placement (offsets never decrease), and the
//!   lowest minimum offset of its unplaced buffers. A branch where some section overflows is
//!   cut at once, as is one where a buffer's minimum offset leaves it no room.
//! - **Decomposition.** Where no unplaced buffer spans the boundary between two sections, the
//!   two sides are independent problems: they are solved one after the other, and when one
//!   has no solution the search jumps straight back to the placement that split them instead
//!   of retrying the other side.
//! - **Preorders tried in turn** (MiniMalloc's round robin): longest lifetime first (`W`), then
//!   area, then the largest section total (`T`), and the two other arrangements of those
//!   keys, each under a node limit that doubles every round.
//!
//! The search keeps no recursion (a frame stack, a goal list in an arena, and an undo trail),
//! so its depth is not limited by the call stack, and it allocates nothing per node once its
//! vectors have grown.

use alloc::vec;
use alloc::vec::Vec;
use core::cmp::Reverse;

use super::buffer::{align_up, check_buffers};
use super::greedy::{greedy_by_breadth, greedy_by_size};
use super::sweep::Instance;
use super::{Buffer, Plan, PlanError};

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
    #[doc(hidden)]
    pub experiment: u32,
}

impl Default for SearchOptions {
    /// No node limit; lists of up to 2²⁶ entries (256 MiB).
    fn default() -> Self {
        SearchOptions {
            node_limit: u64::MAX,
            graph_limit: 1 << 26,
            experiment: 0,
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
}

/// What the search reports to, and asks of, its caller while it runs. The core has no clock,
/// so a time budget is the caller's: a closure `FnMut() -> bool` is a monitor that answers
/// [`Monitor::stop`].
pub trait Monitor {
    /// Whether to stop now and return the best plan found. Asked every few hundred nodes.
    fn stop(&mut self) -> bool;

    /// A better plan was found: its arena, and the proven lower bound at that point.
    fn improved(&mut self, arena: u64, lower_bound: u64) {
        let _ = (arena, lower_bound);
    }
}

impl<F: FnMut() -> bool> Monitor for F {
    fn stop(&mut self) -> bool {
        self()
    }
}

/// The smallest arena it can find for `buffers`, and whether it is proven optimal.
///
/// Starts from the better of [`greedy_by_size`] and [`greedy_by_breadth`]; if that misses
/// the lower bound, runs the branch-and-bound search described in this module's source
/// (MiniMalloc's canonical placements, dominance, section inference and decomposition) for a
/// falling sequence of capacities: first the lower bound itself, then halfway between the
/// bound and the best plan, each under a node limit that doubles round by round. It stops when
/// the plan meets the proven bound, when `options.node_limit` nodes are spent, or when
/// `monitor.stop()` says so, and always returns the best plan found, never worse than the
/// heuristics'.
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
    let inst = Instance::new(buffers, Some(options.graph_limit));
    let mut lo = inst.lower_bound;
    let by_size = greedy_by_size(buffers)?;
    let by_breadth = greedy_by_breadth(buffers)?;
    let mut best = if by_breadth.arena < by_size.arena {
        by_breadth
    } else {
        by_size
    };
    monitor.improved(best.arena, lo);
    let mut nodes = 0u64;
    let done = |best: Plan, lo: u64, nodes: u64| Solution {
        optimal: best.arena == lo,
        plan: best,
        lower_bound: lo,
        nodes,
    };
    if best.arena <= lo || !inst.has_graph() || inst.len() == 0 {
        return Ok(done(best, lo, nodes));
    }

    let orders = preorders(&inst);
    let mut engine = Engine::new(&inst);
    // Node limit of one attempt, doubled each round (MiniMalloc starts at the buffer count).
    let mut limit = (inst.len() as u64).max(64);
    let mut budget = Budget {
        left: options.node_limit,
        monitor,
        stopped: false,
    };
    // One attempt at a capacity: every preorder in turn under `limit` nodes each.
    // Returns the plan's arena if one was found (and stores it in `best`), or whether the
    // capacity was proven infeasible.
    let mut attempt = |cap: u64, limit: u64, best: &mut Plan, budget: &mut Budget<'_, M>, nodes: &mut u64| {
        for order in &orders {
            let n = limit.min(budget.left);
            if n == 0 || budget.stopped {
                return Attempt::Stopped;
            }
            let (outcome, used) = engine.decide(cap, order, n, budget);
            *nodes += used;
            budget.left = budget.left.saturating_sub(used);
            match outcome {
                Outcome::Found => {
                    *best = engine.plan(buffers);
                    return Attempt::Found;
                }
                Outcome::Infeasible => return Attempt::Infeasible,
                Outcome::Aborted => {}
            }
        }
        if budget.stopped || budget.left == 0 {
            Attempt::Stopped
        } else {
            Attempt::Unknown
        }
    };
    loop {
        if best.arena <= lo {
            break;
        }
        // The bound itself first: most hard instances are tight.
        match attempt(lo, limit, &mut best, &mut budget, &mut nodes) {
            Attempt::Found => {
                budget.monitor.improved(best.arena, lo);
                break;
            }
            Attempt::Infeasible => lo += 1,
            Attempt::Stopped => break,
            Attempt::Unknown => {}
        }
        // Then bisect between the bound and the best plan, with a quarter of the limit.
        let mut probe = lo;
        while options.experiment & 1 == 0 && probe < best.arena && !budget.stopped && budget.left > 0 {
            let cap = probe + (best.arena - 1 - probe) / 2;
            match attempt(cap, (limit / 4).max(64), &mut best, &mut budget, &mut nodes) {
                Attempt::Found => budget.monitor.improved(best.arena, lo),
                Attempt::Infeasible => {
                    lo = cap + 1;
                    probe = cap + 1;
                }
                Attempt::Unknown => probe = cap + 1,
                Attempt::Stopped => break,
            }
        }
        if budget.stopped || budget.left == 0 {
            break;
        }
        limit = limit.saturating_mul(2);
    }
    let lo = lo.min(best.arena);
    Ok(done(best, lo, nodes))
}

/// The result of one capacity tried under every preorder.
enum Attempt {
    Found,
    Infeasible,
    Unknown,
    Stopped,
}

/// Nodes left and the caller's monitor, polled every [`POLL`] nodes.
struct Budget<'m, M: Monitor + ?Sized> {
    left: u64,
    monitor: &'m mut M,
    stopped: bool,
}

/// Nodes between two calls of [`Monitor::stop`].
const POLL: u64 = 256;

/// The three static preorders (ranks per buffer) of MiniMalloc's round robin: `WAT` (longest
/// lifetime, then area, then section total), `TAW` and `TWA`, all descending, ties by index.
fn preorders(inst: &Instance) -> Vec<Vec<u32>> {
    let n = inst.len();
    let total = inst.breadth();
    let area: Vec<u128> = (0..n)
        .map(|b| inst.size[b] as u128 * inst.length[b] as u128)
        .collect();
    let keys: [fn(&Instance, &[u64], &[u128], usize) -> (u128, u128, u128); 3] = [
        |i, t, a, b| (i.length[b] as u128, a[b], t[b] as u128),
        |i, t, a, b| (t[b] as u128, a[b], i.length[b] as u128),
        |i, t, a, b| (t[b] as u128, i.length[b] as u128, a[b]),
    ];
    keys.iter()
        .map(|key| {
            let mut order: Vec<u32> = (0..n as u32).collect();
            order.sort_by_key(|&b| (Reverse(key(inst, &total, &area, b as usize)), b));
            let mut rank = vec![0u32; n];
            for (r, &b) in order.iter().enumerate() {
                rank[b as usize] = r as u32;
            }
            rank
        })
        .collect()
}

/// No buffer, goal or frame.
const NONE: u32 = u32::MAX;
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

/// One change to the search state, undone in reverse order on backtracking.
#[derive(Clone, Copy)]
enum Undo {
    /// A buffer was placed: it becomes unplaced again, and its sections get its size back
    /// and their cuts their count.
    Placed(u32),
    /// A buffer's minimum offset was raised from this value.
    MinOffset(u32, u64),
    /// A section's floor was raised from this value.
    Floor(u32, u64),
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
}

/// The state of a decision search, kept between searches so that its vectors are allocated
/// once.
///
/// Invariants between nodes: `off[b]` is `UNPLACED` or `b`'s offset; for an unplaced `b`,
/// `minoff[b]` is the aligned top of the highest placed buffer conflicting with it; `total[s]`
/// is the size of the unplaced buffers live in section `s`; `cuts[s]` counts the unplaced
/// buffers live in both `s` and `s + 1`; `floor[s]` is a lower bound on the offset of every
/// unplaced buffer live in `s`, at least the top of every placed one. Every change since a
/// frame was opened is on the trail above its `trail_mark`.
struct Engine<'i> {
    inst: &'i Instance,
    init_cuts: Vec<u32>,
    cap: u64,
    pre: Vec<u32>,
    off: Vec<u64>,
    minoff: Vec<u64>,
    total: Vec<u64>,
    floor: Vec<u64>,
    cuts: Vec<u32>,
    /// Unplaced buffers conflicting with each buffer.
    free_deg: Vec<u32>,
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
    counts: Vec<u32>,
    fill: Vec<u32>,
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
            minoff: vec![0; n],
            total: inst.sec_total.clone(),
            floor: vec![0; s],
            cuts: Vec::new(),
            free_deg: (0..n).map(|b| inst.conflicts(b).len() as u32).collect(),
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
            counts: Vec::new(),
            fill: Vec::new(),
            nodes: 0,
        }
    }

    /// The plan of the last successful search, for the caller's buffer slice.
    fn plan(&self, buffers: &[Buffer]) -> Plan {
        let mut offsets = vec![0u64; buffers.len()];
        let mut arena = 0;
        for (b, &o) in self.inst.orig.iter().enumerate() {
            offsets[o as usize] = self.off[b];
            arena = arena.max(self.off[b] + self.inst.size[b]);
        }
        Plan { offsets, arena }
    }

    /// Resets the state for a search at capacity `cap` under preorder `pre`, and returns the
    /// first of the goals made of the problem's independent parts.
    fn reset(&mut self, cap: u64, pre: &[u32]) -> u32 {
        let inst = self.inst;
        self.cap = cap;
        self.pre.clear();
        self.pre.extend_from_slice(pre);
        self.off.fill(UNPLACED);
        self.minoff.fill(0);
        self.total.clear();
        self.total.extend_from_slice(&inst.sec_total);
        self.floor.fill(0);
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
        // The parts: runs of sections between zero cuts.
        self.cutpoints.clear();
        for (s, &c) in self.cuts.iter().enumerate() {
            if c == 0 {
                self.cutpoints.push(s as u32 + 1);
            }
        }
        self.pool.extend(0..inst.len() as u32);
        let whole = Goal {
            list_lo: 0,
            list_hi: inst.len() as u32,
            sec_lo: 0,
            sec_hi: inst.sections() as u32,
            floor_off: 0,
            floor_pre: 0,
            next: NONE,
            creator: NONE,
        };
        self.split(0, inst.len() as u32, &whole, NONE)
    }

    /// Makes one goal per run of sections of `[parent.sec_lo, parent.sec_hi)` between the
    /// `cutpoints`, holding the unplaced buffers of `pool[list_lo..list_hi]` that live there,
    /// chained in section order before `parent.next`; returns the first (or `parent.next` if
    /// all are empty).
    fn split(&mut self, list_lo: u32, list_hi: u32, parent: &Goal, creator: u32) -> u32 {
        let inst = self.inst;
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

    /// Is there a plan within `cap`? Depth-first search under preorder `pre`, at most `limit`
    /// nodes. Returns the outcome and the nodes used; after `Found`, `off` holds the plan.
    fn decide<M: Monitor + ?Sized>(
        &mut self,
        cap: u64,
        pre: &[u32],
        limit: u64,
        budget: &mut Budget<'_, M>,
    ) -> (Outcome, u64) {
        let mut head = self.reset(cap, pre);
        let mut poll_at = POLL;
        let outcome = 'search: loop {
            if !self.open(head) {
                break Outcome::Found;
            }
            loop {
                let f = self.frames.len() - 1;
                if self.nodes >= limit {
                    break 'search Outcome::Aborted;
                }
                if self.nodes >= poll_at {
                    poll_at = self.nodes + POLL;
                    if budget.monitor.stop() {
                        budget.stopped = true;
                        break 'search Outcome::Aborted;
                    }
                }
                if let Some(child) = self.advance(f) {
                    head = child;
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
        (outcome, self.nodes)
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
            let (mut unplaced, mut min_top) = (0u32, u64::MAX);
            // The lowest (offset, preorder) key of a buffer with no unplaced conflicts: its
            // minimum offset can no longer change, so it must be placed before anything with
            // a higher key (MiniMalloc's "hatless" pruning, applied before trying it).
            let mut hatless = (u64::MAX, u32::MAX);
            for &b in &self.pool[goal.list_lo as usize..goal.list_hi as usize] {
                let b = b as usize;
                if self.off[b] == UNPLACED {
                    unplaced += 1;
                    min_top = min_top.min(self.minoff[b] + inst.size[b]);
                    if self.free_deg[b] == 0 {
                        hatless = hatless.min((self.minoff[b], self.pre[b]));
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
                    if self.off[b as usize] == UNPLACED {
                        self.pool.push(b);
                    }
                }
                (list_lo, list_hi) = (base as u32, self.pool.len() as u32);
            }
            // Candidates: at or above the canonical floor, below the lowest reachable top
            // (dominance), not after a hatless buffer, in (offset, preorder) order. A hatless
            // buffer that can never be placed (below the floor, or dominated) leaves none.
            self.scratch.clear();
            let floor = (goal.floor_off, goal.floor_pre);
            let none = (u64::MAX, u32::MAX);
            if hatless == none || (hatless >= floor && hatless.0 < min_top) {
                for &b in &self.pool[list_lo as usize..list_hi as usize] {
                    let bu = b as usize;
                    if self.off[bu] != UNPLACED {
                        continue;
                    }
                    let key = (self.minoff[bu], self.pre[bu]);
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
        None
    }

    /// Places `b` at its minimum offset within `goal` and propagates: conflicting buffers'
    /// minimum offsets, section totals, floors and cuts. `false` if that leaves some buffer or
    /// section without room under the capacity. Every change goes on the trail either way;
    /// `cutpoints` lists the section boundaries whose cut became zero.
    fn place(&mut self, b: usize, goal: &Goal) -> bool {
        let inst = self.inst;
        let cap = self.cap;
        let o = self.minoff[b];
        let size = inst.size[b];
        let top = o + size;
        self.off[b] = o;
        self.trail.push(Undo::Placed(b as u32));
        let (blo, bhi) = (inst.lo[b] as usize, inst.hi[b] as usize);
        self.epoch = self.epoch.wrapping_add(1);
        if self.epoch == 0 {
            self.sec_seen.fill(0);
            self.epoch = 1;
        }
        let epoch = self.epoch;
        self.affected.clear();
        for s in blo..bhi {
            self.total[s] -= size;
            if self.floor[s] != top {
                self.trail.push(Undo::Floor(s as u32, self.floor[s]));
                self.floor[s] = top;
            }
            self.sec_seen[s] = epoch;
            self.affected.push(s as u32);
        }
        self.cutpoints.clear();
        for s in blo..bhi - 1 {
            self.cuts[s] -= 1;
            if self.cuts[s] == 0 {
                self.cutpoints.push(s as u32 + 1);
            }
        }
        for &c in inst.conflicts(b) {
            self.free_deg[c as usize] -= 1;
        }
        for &c in inst.conflicts(b) {
            let c = c as usize;
            if self.off[c] != UNPLACED || self.minoff[c] >= top {
                continue;
            }
            let m = align_up(top, inst.align[c]);
            self.trail.push(Undo::MinOffset(c as u32, self.minoff[c]));
            self.minoff[c] = m;
            if m + inst.size[c] > cap {
                return false;
            }
            for s in inst.lo[c] as usize..inst.hi[c] as usize {
                if self.sec_seen[s] != epoch {
                    self.sec_seen[s] = epoch;
                    self.affected.push(s as u32);
                }
            }
        }
        // A section's floor is at least the lowest minimum offset of its unplaced buffers.
        for i in 0..self.affected.len() {
            let s = self.affected[i] as usize;
            let mut low = u64::MAX;
            for &c in inst.members(s) {
                let c = c as usize;
                if self.off[c] == UNPLACED {
                    low = low.min(self.minoff[c]);
                }
            }
            if low != u64::MAX && low > self.floor[s] {
                self.trail.push(Undo::Floor(s as u32, self.floor[s]));
                self.floor[s] = low;
            }
        }
        // Every section of the goal must hold its unplaced buffers above its floor, and no
        // later placement in the goal goes below `o`.
        for s in goal.sec_lo as usize..goal.sec_hi as usize {
            if self.floor[s].max(o) + self.total[s] > cap {
                return false;
            }
        }
        true
    }

    /// Undoes the trail down to `mark` entries.
    fn undo_to(&mut self, mark: usize) {
        let inst = self.inst;
        while self.trail.len() > mark {
            match self.trail.pop() {
                Some(Undo::Placed(b)) => {
                    let b = b as usize;
                    self.off[b] = UNPLACED;
                    let (lo, hi) = (inst.lo[b] as usize, inst.hi[b] as usize);
                    for s in lo..hi {
                        self.total[s] += inst.size[b];
                    }
                    for s in lo..hi - 1 {
                        self.cuts[s] += 1;
                    }
                    for &c in inst.conflicts(b) {
                        self.free_deg[c as usize] += 1;
                    }
                }
                Some(Undo::MinOffset(c, m)) => self.minoff[c as usize] = m,
                Some(Undo::Floor(s, f)) => self.floor[s as usize] = f,
                None => break,
            }
        }
    }
}
