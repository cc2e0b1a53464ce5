//! Who may share bytes with whom: the time side of a problem, from intervals or from a
//! dependency graph.
//!
//! For a graph, reachability is one bitset of `nodes` bits per node (`reach[v]`: the nodes a
//! non-empty path leads to from `v`), filled in reverse topological order, `O(N·(N + E)/64)`
//! time and `N²/8` bytes; then one bitset per buffer (`after[a]`: the nodes that every reader
//! of `a` reaches, the intersection of its consumers' rows), `O(n·N/64)` more. A conflict test
//! is then two bit reads. This is the conflict matrix of MindSpore SOMAS
//! (`ComputeConflictMatrix`), kept as "finished before" rows rather than a buffer × buffer
//! matrix: `n·N` bits instead of `n²`.

use alloc::collections::BinaryHeap;
use alloc::vec;
use alloc::vec::Vec;
use core::cmp::Reverse;

use super::error::ProblemError;
use super::{Graph, Lifetimes, Problem};

/// Rows of bits.
struct Rows {
    words: usize,
    bits: Vec<u64>,
}

impl Rows {
    fn new(rows: usize, width: usize, ones: bool) -> Rows {
        let words = width.div_ceil(64);
        Rows {
            words,
            bits: vec![if ones { u64::MAX } else { 0 }; rows * words],
        }
    }
    fn row(&self, r: usize) -> &[u64] {
        &self.bits[r * self.words..(r + 1) * self.words]
    }
    fn get(&self, r: usize, c: usize) -> bool {
        self.bits[r * self.words + c / 64] >> (c % 64) & 1 == 1
    }
    fn set(&mut self, r: usize, c: usize) {
        self.bits[r * self.words + c / 64] |= 1 << (c % 64);
    }
}

/// The graph's reachability and each buffer's "finished before" row.
pub(super) struct Reach<'p> {
    graph: &'p Graph,
    reach: Rows,
    after: Rows,
    /// A topological order, file order wherever the dependencies allow.
    order: Vec<u32>,
}

/// The time side of a checked problem.
pub(super) enum Time<'p> {
    Intervals(&'p [(u64, u64)]),
    Graph(Reach<'p>),
}

/// The most bits a graph problem's conflict rows may take by default (`SolveOptions`'s
/// `bit_limit`: 256 MiB), kept here beside the rows it bounds so that the lower bound, which
/// builds them too, needs no solver options.
pub(super) const DEFAULT_BIT_LIMIT: u64 = 1 << 31;

impl<'p> Time<'p> {
    /// Checks the lifetimes (lengths, intervals, node indices, cycles) and builds the
    /// conflict oracle; `bit_limit` bounds the graph's bitsets.
    pub(super) fn new(problem: &'p Problem, bit_limit: u64) -> Result<Time<'p>, ProblemError> {
        let n = problem.items.len();
        match &problem.lifetimes {
            Lifetimes::Intervals(iv) => {
                if iv.len() != n {
                    return Err(ProblemError::WrongLength {
                        items: n,
                        lifetimes: iv.len(),
                    });
                }
                if let Some(buffer) = iv.iter().position(|&(s, e)| s >= e) {
                    return Err(ProblemError::EmptyLifetime { buffer });
                }
                Ok(Time::Intervals(iv))
            }
            Lifetimes::Graph(g) => Ok(Time::Graph(Reach::new(g, n, bit_limit)?)),
        }
    }

    /// Whether `a` and `b` may not share a byte (their sizes aside).
    pub(super) fn conflict(&self, a: usize, b: usize) -> bool {
        match self {
            Time::Intervals(iv) => iv[a].0 < iv[b].1 && iv[b].0 < iv[a].1,
            Time::Graph(r) => !r.finished_before(a, b) && !r.finished_before(b, a),
        }
    }

    /// Whether `w` is written after `a` (`a` written first, by an ordered path or step).
    pub(super) fn written_before(&self, a: usize, w: usize) -> bool {
        match self {
            Time::Intervals(iv) => iv[a].0 < iv[w].0,
            Time::Graph(r) => {
                let uses = &r.graph.uses;
                match (uses[a].producer, uses[w].producer) {
                    (_, None) => false,
                    (None, Some(_)) => true,
                    (Some(p), Some(q)) => r.reach.get(p, q),
                }
            }
        }
    }

    /// Whether every read of `v` happens before `w` is written, or by `w`'s producer itself.
    pub(super) fn read_by_write(&self, v: usize, w: usize) -> bool {
        match self {
            Time::Intervals(iv) => iv[v].1 <= iv[w].0 + 1,
            Time::Graph(r) => {
                let uses = &r.graph.uses;
                let Some(q) = uses[w].producer else {
                    return false;
                };
                !uses[v].output
                    && uses[v]
                        .consumers
                        .iter()
                        .all(|&c| c == q || r.reach.get(c, q))
            }
        }
    }

    /// Intervals under one sequential order of the problem, such that two buffers live at a
    /// common moment always conflict: the moments a lower bound may sweep. For intervals, the
    /// intervals; for a graph, the topological order kept (see [`Reach::schedule`]).
    pub(super) fn schedule(&self) -> Vec<(u64, u64)> {
        match self {
            Time::Intervals(iv) => iv.to_vec(),
            Time::Graph(r) => r.schedule(),
        }
    }
}

impl<'p> Reach<'p> {
    fn new(g: &'p Graph, n: usize, bit_limit: u64) -> Result<Reach<'p>, ProblemError> {
        if g.uses.len() != n {
            return Err(ProblemError::WrongLength {
                items: n,
                lifetimes: g.uses.len(),
            });
        }
        let nodes = g.streams.len();
        if nodes >= u32::MAX as usize {
            return Err(ProblemError::TooLarge);
        }
        let bits = (nodes as u64 + 64).saturating_mul((nodes + n) as u64);
        if bits > bit_limit {
            return Err(ProblemError::GraphTooLarge);
        }
        let mut succ: Vec<Vec<u32>> = vec![Vec::new(); nodes];
        for (buffer, u) in g.uses.iter().enumerate() {
            let bad =
                u.producer.is_some_and(|p| p >= nodes) || u.consumers.iter().any(|&c| c >= nodes);
            if bad {
                return Err(ProblemError::OutOfRange { buffer });
            }
            if let Some(p) = u.producer {
                for &c in &u.consumers {
                    succ[p].push(c as u32);
                }
            }
        }
        for (edge, &(a, b)) in g.edges.iter().enumerate() {
            if a >= nodes || b >= nodes {
                return Err(ProblemError::EdgeOutOfRange { edge });
            }
            succ[a].push(b as u32);
        }
        let mut last_on: alloc::collections::BTreeMap<u32, usize> = Default::default();
        for (v, &s) in g.streams.iter().enumerate() {
            if let Some(prev) = last_on.insert(s, v) {
                succ[prev].push(v as u32);
            }
        }
        for s in &mut succ {
            s.sort_unstable();
            s.dedup();
        }
        // Kahn's algorithm, the lowest index first: file order wherever it is an order.
        let mut indegree = vec![0u32; nodes];
        for s in &succ {
            for &w in s {
                indegree[w as usize] += 1;
            }
        }
        let mut ready: BinaryHeap<Reverse<u32>> = (0..nodes as u32)
            .filter(|&v| indegree[v as usize] == 0)
            .map(Reverse)
            .collect();
        let mut order = Vec::with_capacity(nodes);
        while let Some(Reverse(v)) = ready.pop() {
            order.push(v);
            for &w in &succ[v as usize] {
                indegree[w as usize] -= 1;
                if indegree[w as usize] == 0 {
                    ready.push(Reverse(w));
                }
            }
        }
        if order.len() < nodes {
            let node = (0..nodes).find(|&v| indegree[v] > 0).unwrap_or(0);
            return Err(ProblemError::GraphCycle { node });
        }
        let mut reach = Rows::new(nodes, nodes, false);
        let words = reach.words;
        for &v in order.iter().rev() {
            let v = v as usize;
            for &w in &succ[v] {
                let w = w as usize;
                // Rows of distinct nodes (no self edge: that would be a cycle).
                let (lo, hi) = (v.min(w), v.max(w));
                let (head, tail) = reach.bits.split_at_mut(hi * words);
                let (dst, src) = if v < w {
                    (&mut head[lo * words..(lo + 1) * words], &tail[..words])
                } else {
                    (
                        &mut tail[..words],
                        &head[lo * words..(lo + 1) * words] as &[u64],
                    )
                };
                for (d, s) in dst.iter_mut().zip(src) {
                    *d |= *s;
                }
                reach.set(v, w);
            }
        }
        let mut after = Rows::new(n, nodes, true);
        for (a, u) in g.uses.iter().enumerate() {
            let row = &mut after.bits[a * words..(a + 1) * words];
            if u.output {
                row.fill(0);
            } else if !u.consumers.is_empty() {
                for &c in &u.consumers {
                    for (d, s) in row.iter_mut().zip(reach.row(c)) {
                        *d &= *s;
                    }
                }
            } else if let Some(p) = u.producer {
                row.copy_from_slice(reach.row(p));
            }
        }
        Ok(Reach {
            graph: g,
            reach,
            after,
            order,
        })
    }

    /// Every read of `a` is done before `b` is written (see [`Graph`](super::Graph)).
    fn finished_before(&self, a: usize, b: usize) -> bool {
        self.graph.uses[b]
            .producer
            .is_some_and(|p| self.after.get(a, p))
    }

    /// Intervals in the kept topological order: inputs from moment 0, the `k`-th node's
    /// outputs from `k + 1`, to one past the last reader's moment (outputs to the end). Two
    /// buffers live together here conflict: if `b` is written at or before `a`'s last read in
    /// a topological order, that read cannot reach `b`'s producer, and vice versa.
    fn schedule(&self) -> Vec<(u64, u64)> {
        let nodes = self.order.len();
        let mut at = vec![0u64; nodes];
        for (k, &v) in self.order.iter().enumerate() {
            at[v as usize] = k as u64 + 1;
        }
        let end = nodes as u64 + 2;
        self.graph
            .uses
            .iter()
            .map(|u| {
                let start = u.producer.map_or(0, |p| at[p]);
                let stop = if u.output {
                    end
                } else {
                    u.consumers
                        .iter()
                        .map(|&c| at[c] + 1)
                        .max()
                        .unwrap_or(start + 1)
                };
                (start, stop.max(start + 1))
            })
            .collect()
    }
}
