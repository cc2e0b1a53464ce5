//! The greedy placement step shared by the heuristics: buffers taken in a given order, each at
//! the start of the tightest gap that holds it between the conflicting buffers already placed,
//! or on top of them; in `O((n + p) log n)` for `n` buffers and `p` conflicting pairs, with a
//! cap on `p`'s work past which the rest go on top.
//!
//! The gap rule is TensorFlow Lite's greedy-by-size offset calculation (see
//! [`greedy`](super::greedy)). TensorFlow Lite, and this module before, found the conflicting
//! buffers by scanning every buffer placed, `O(n²)` in all. Here they come from an index of
//! the placed buffers' lifetimes (a segment tree over the buffers sorted by start, keeping the
//! latest end among the placed ones in each subtree), which reports only those that overlap;
//! sorting them by offset gives the gaps. The work is the conflicting pairs, as in the
//! conflict-graph placements of MiniMalloc and TelaMalloc, without storing the graph.
//!
//! Where the problem has too many pairs for that (a million buffers live at once has 5·10¹¹),
//! the buffers left when the work cap is spent, or when the caller's monitor says stop, are
//! placed on the *skyline*: at the top of the highest buffer placed over their lifetime, a
//! range maximum in a second segment tree over time, as idealloc and TelaMalloc stack buffers
//! onto the current profile. That is always valid and `O(log n)` a buffer; it never reuses a
//! gap, so it is the fallback only (on buffers all live at once it is optimal anyway).

use alloc::vec;
use alloc::vec::Vec;

use super::buffer::align_up;
use super::buffer::{Buffer, Plan};
use super::monitor::Monitor;

/// Work (conflicting pairs found, each once, by the later-placed buffer, times the log of
/// their number for sorting them) a placement may do before the buffers left go on the
/// skyline: a few seconds at most, and more than any problem in `../shared/plans` needs
/// (IOPDDL's S_1, 4.3·10⁷ pairs, needs about 2²⁸).
pub(crate) const WORK_LIMIT: u64 = 1 << 29;

/// Work between two calls of [`Monitor::stop`].
const POLL_WORK: u64 = 1 << 16;

/// How a placement ended.
pub(crate) struct Placed {
    pub plan: Plan,
    /// Buffers placed on the skyline because the work cap or the monitor stopped the gap
    /// search (0 when every buffer got its tightest gap).
    pub stacked: usize,
    /// The monitor said stop.
    pub stopped: bool,
}

/// Places `buffers` (already checked by `check_buffers`) one at a time in `order`, a
/// permutation of their indices: each at the start of the smallest gap that fits it between
/// the conflicting buffers already placed (alignment respected; ties to the lowest), else on
/// top of the highest of them; zero-size buffers at 0. Once `work_limit` conflicting pairs
/// have been visited or `monitor` says stop, every buffer left goes on top of the highest
/// buffer placed over its lifetime.
///
/// `O((n + p) log n)` time for the `p ≤ work_limit` pairs visited, `O(n)` memory.
pub(crate) fn best_fit<M: Monitor + ?Sized>(
    buffers: &[Buffer],
    order: &[u32],
    work_limit: u64,
    monitor: &mut M,
) -> Placed {
    let n = buffers.len();
    let mut offsets = vec![0u64; n];
    // Time as the distinct start times: a buffer covers the starts in `[start, end)`, and two
    // buffers overlap exactly when they cover a common start (the later of their starts).
    let mut starts: Vec<u64> = buffers.iter().map(|b| b.start).collect();
    starts.sort_unstable();
    starts.dedup();
    let span = |b: &Buffer| -> (u32, u32) {
        let lo = starts.partition_point(|&s| s < b.start) as u32;
        let hi = starts.partition_point(|&s| s < b.end) as u32;
        (lo, hi)
    };
    let spans: Vec<(u32, u32)> = buffers.iter().map(span).collect();
    let mut skyline = Skyline::new(starts.len());
    let mut index = LiveIndex::new(&spans, starts.len());
    let mut scratch: Vec<(u64, u64)> = Vec::new();
    let (mut work, mut next_poll) = (0u64, POLL_WORK);
    let (mut stacked, mut stopped, mut gaps) = (0usize, false, true);
    let mut arena = 0u64;
    for &i in order {
        let i = i as usize;
        let b = &buffers[i];
        if b.size == 0 {
            continue;
        }
        let (lo, hi) = spans[i];
        if gaps && (work >= work_limit || (work >= next_poll && monitor.stop())) {
            stopped = work < work_limit;
            gaps = false;
        }
        if work >= next_poll {
            next_poll = work + POLL_WORK;
        }
        let off = if gaps {
            scratch.clear();
            let k = index.overlapping(lo, hi, |j| {
                scratch.push((offsets[j], offsets[j] + buffers[j].size))
            });
            // The pairs found, and sorting them: k log k.
            work += 1 + k * u64::from(64 - k.leading_zeros());
            index.insert(i);
            tightest_gap(&mut scratch, b)
        } else {
            stacked += 1;
            align_up(skyline.max(lo, hi), b.align)
        };
        offsets[i] = off;
        // Cannot overflow: check_buffers bounds the sum of all sizes and alignments.
        let top = off + b.size;
        skyline.raise(lo, hi, top);
        arena = arena.max(top);
    }
    Placed {
        plan: Plan { offsets, arena },
        stacked,
        stopped,
    }
}

/// The start of the smallest gap between the ranges `placed` (`(offset, end)`, in any order)
/// that holds `b` at its alignment, ties to the lowest; else the first aligned offset above
/// them all. The gaps are the holes in the union of the ranges, measured from the end of
/// everything below.
fn tightest_gap(placed: &mut [(u64, u64)], b: &Buffer) -> u64 {
    placed.sort_unstable_by_key(|r| r.0);
    let mut prev = 0u64; // the highest end of the ranges seen so far
    let mut best: Option<(u64, u64)> = None; // (gap, offset)
    for &(po, end) in placed.iter() {
        let at = align_up(prev, b.align);
        if po >= at && po - at >= b.size {
            let gap = po - prev;
            if best.is_none_or(|(g, _)| gap < g) {
                best = Some((gap, at));
            }
        }
        prev = prev.max(end);
    }
    best.map_or_else(|| align_up(prev, b.align), |(_, at)| at)
}

/// The highest top placed over each moment, with range "raise to at least" and range maximum.
///
/// A segment tree over the moments, bottom-up (`2 * leaves` nodes, node 1 the root): `raised`
/// is the least top every moment under the node has been raised to as a whole, `high` the
/// highest top of any moment under it. Invariant: `high[v] >= raised[v]`, and the top of
/// moment `t` is the largest `raised` on the path from its leaf to the root.
struct Skyline {
    leaves: usize,
    raised: Vec<u64>,
    high: Vec<u64>,
}

impl Skyline {
    fn new(moments: usize) -> Skyline {
        let leaves = moments.max(1).next_power_of_two();
        Skyline {
            leaves,
            raised: vec![0; 2 * leaves],
            high: vec![0; 2 * leaves],
        }
    }

    /// Raises every moment of `[lo, hi)` (not empty) to at least `top`. `O(log n)`.
    fn raise(&mut self, lo: u32, hi: u32, top: u64) {
        let (mut l, mut r) = (lo as usize + self.leaves, hi as usize + self.leaves);
        while l < r {
            if l & 1 == 1 {
                self.raised[l] = self.raised[l].max(top);
                self.high[l] = self.high[l].max(top);
                l += 1;
            }
            if r & 1 == 1 {
                r -= 1;
                self.raised[r] = self.raised[r].max(top);
                self.high[r] = self.high[r].max(top);
            }
            l >>= 1;
            r >>= 1;
        }
        // Every node above a raised one holds a moment of the range: its highest top is at
        // least `top`. Those nodes are the ancestors of the range's two end leaves.
        for leaf in [lo as usize, hi as usize - 1] {
            let mut v = (leaf + self.leaves) >> 1;
            while v >= 1 {
                self.high[v] = self.high[v].max(top);
                v >>= 1;
            }
        }
    }

    /// The highest top over `[lo, hi)` (not empty). `O(log n)`.
    fn max(&self, lo: u32, hi: u32) -> u64 {
        let mut best = 0;
        let (mut l, mut r) = (lo as usize + self.leaves, hi as usize + self.leaves);
        while l < r {
            if l & 1 == 1 {
                best = best.max(self.high[l]);
                l += 1;
            }
            if r & 1 == 1 {
                r -= 1;
                best = best.max(self.high[r]);
            }
            l >>= 1;
            r >>= 1;
        }
        // A raise of a node above the ones read covers them too; every such node is an
        // ancestor of one of the range's two end leaves (its range holds a moment inside
        // `[lo, hi)` and one outside).
        for leaf in [lo as usize, hi as usize - 1] {
            let mut v = (leaf + self.leaves) >> 1;
            while v >= 1 {
                best = best.max(self.raised[v]);
                v >>= 1;
            }
        }
        best
    }
}

/// The placed buffers, found by lifetime: which of them overlap a range of moments.
///
/// Buffers sorted by their first moment (`by_lo`, with `pos` its inverse, and `before[t]` the
/// number that start before moment `t`); a segment tree over those positions keeps in each
/// node the latest end (`hi`, plus one so that 0 means "none placed") among the placed
/// buffers under it.
struct LiveIndex<'s> {
    spans: &'s [(u32, u32)],
    by_lo: Vec<u32>,
    pos: Vec<u32>,
    before: Vec<u32>,
    leaves: usize,
    latest: Vec<u32>,
    stack: Vec<u32>,
}

impl<'s> LiveIndex<'s> {
    fn new(spans: &'s [(u32, u32)], moments: usize) -> LiveIndex<'s> {
        let n = spans.len();
        let mut by_lo: Vec<u32> = (0..n as u32).collect();
        by_lo.sort_unstable_by_key(|&i| spans[i as usize].0);
        let mut pos = vec![0u32; n];
        for (p, &i) in by_lo.iter().enumerate() {
            pos[i as usize] = p as u32;
        }
        // Counting sort's prefix sums: `before[t + 1] - before[t]` buffers start at `t`.
        let mut before = vec![0u32; moments + 1];
        for &(lo, _) in spans {
            before[lo as usize + 1] += 1;
        }
        for t in 0..moments {
            before[t + 1] += before[t];
        }
        let leaves = n.max(1).next_power_of_two();
        LiveIndex {
            spans,
            by_lo,
            pos,
            before,
            leaves,
            latest: vec![0; 2 * leaves],
            stack: Vec::new(),
        }
    }

    /// Marks buffer `i` placed. `O(log n)`.
    fn insert(&mut self, i: usize) {
        let end = self.spans[i].1 + 1;
        let mut v = self.pos[i] as usize + self.leaves;
        while v >= 1 && self.latest[v] < end {
            self.latest[v] = end;
            v >>= 1;
        }
    }

    /// Calls `found` with every placed buffer whose moments meet `[lo, hi)`; returns how many.
    /// `O((k + 1) log n)` for `k` found.
    fn overlapping(&mut self, lo: u32, hi: u32, mut found: impl FnMut(usize)) -> u64 {
        // Those starting before `hi` are a prefix of `by_lo`; of them, those ending after `lo`.
        let prefix = self.before[hi as usize] as usize;
        let mut count = 0;
        self.stack.clear();
        self.stack.push(1);
        while let Some(v) = self.stack.pop() {
            let v = v as usize;
            if self.latest[v] <= lo + 1 {
                continue;
            }
            // The first position under node `v`: nodes at depth d cover leaves/2^d positions.
            let depth = usize::BITS - 1 - v.leading_zeros();
            let width = self.leaves >> depth;
            let first = (v - (1 << depth)) * width;
            if first >= prefix {
                continue;
            }
            if width == 1 {
                found(self.by_lo[first] as usize);
                count += 1;
            } else {
                // The right half only where it starts inside the prefix.
                if first + width / 2 < prefix {
                    self.stack.push(2 * v as u32 + 1);
                }
                self.stack.push(2 * v as u32);
            }
        }
        count
    }
}
