//! The independent check of a layout against every constraint of its problem.
//!
//! Written apart from the solver, sharing none of its code: it follows alias links itself,
//! finds reachability by a search from every node (not the solver's bitset rows), and finds
//! the pairs of buffers that share bytes by a sweep over addresses (the solver reasons over
//! conflicts). A bug would have to be made twice, in two shapes, to get through.

use alloc::vec;
use alloc::vec::Vec;

use super::error::ProblemError;
use super::{Layout, Lifetimes, Problem};

/// Checks that `layout` places `problem`'s buffers validly:
///
/// - one space and offset per buffer, one arena per space (`LayoutLength`);
/// - each buffer in a space it may use, an alias in its target's (`WrongSpace`);
/// - each offset a multiple of the alignment, at its pin, at its target's offset plus the
///   alias offset, and each group member where its group puts it: at least `gap` past the
///   member before, and not movable one alignment step lower (`Misplaced`);
/// - no two buffers that conflict share a byte, unless they are of one alias tree (sharing
///   is what an alias declares) (`Overlap`);
/// - each arena the end of its space's highest buffer, within its capacity (`ArenaMismatch`).
///
/// The problem's own checks (alias cycles, in-place safety and the like) are
/// [`solve`](super::solve)'s; a problem with an alias cycle gets `Misplaced` here.
/// Time: `O(n log n + s)` for the `s` pairs sharing bytes, plus for a graph `O(N·(N + E))`
/// for reachability and `N²` bits (refused as `GraphTooLarge` past the solver's default
/// limit).
pub fn check_layout(problem: &Problem, layout: &Layout) -> Result<(), ProblemError> {
    let n = problem.items.len();
    if layout.spaces.len() != n
        || layout.offsets.len() != n
        || layout.arenas.len() != problem.spaces.len()
    {
        return Err(ProblemError::LayoutLength);
    }
    let items = &problem.items;
    // Roots of alias trees: follow at most n links.
    let mut root = vec![0usize; n];
    let mut tree_align = vec![1u64; n];
    for (b, r) in root.iter_mut().enumerate() {
        let mut x = b;
        let mut steps = 0;
        while let Some(a) = items[x].alias {
            if a.of >= n || steps > n {
                return Err(ProblemError::Misplaced { buffer: b });
            }
            x = a.of;
            steps += 1;
        }
        *r = x;
    }
    for (b, it) in items.iter().enumerate() {
        tree_align[root[b]] = tree_align[root[b]].max(it.align);
    }
    let mut ends = vec![0u64; problem.spaces.len()];
    for (b, it) in items.iter().enumerate() {
        let (s, o) = (layout.spaces[b], layout.offsets[b]);
        if s as usize >= problem.spaces.len() {
            return Err(ProblemError::WrongSpace { buffer: b });
        }
        let allowed = items[root[b]]
            .spaces
            .as_ref()
            .is_none_or(|l| l.contains(&s));
        if !allowed || layout.spaces[root[b]] != s {
            return Err(ProblemError::WrongSpace { buffer: b });
        }
        if !it.align.is_power_of_two()
            || !o.is_multiple_of(it.align)
            || it.pinned.is_some_and(|p| p != o)
        {
            return Err(ProblemError::Misplaced { buffer: b });
        }
        if let Some(a) = it.alias {
            if layout.offsets[a.of].checked_add(a.offset) != Some(o) {
                return Err(ProblemError::Misplaced { buffer: b });
            }
        }
        let end = o.checked_add(it.size).ok_or(ProblemError::TooLarge)?;
        ends[s as usize] = ends[s as usize].max(end);
    }
    for g in &problem.groups {
        for pair in g.members.windows(2) {
            let (a, m) = (pair[0], pair[1]);
            if a >= n || m >= n || layout.spaces[a] != layout.spaces[m] {
                return Err(ProblemError::Misplaced {
                    buffer: m.min(n.saturating_sub(1)),
                });
            }
            let floor = layout.offsets[a]
                .checked_add(items[a].size)
                .and_then(|e| e.checked_add(g.gap))
                .ok_or(ProblemError::TooLarge)?;
            let at = layout.offsets[m];
            // The member's root must stay at or above the group's start (where the first
            // member's root is): the member cannot go lower than that plus its offset within
            // its tree.
            let start = layout.offsets[root[g.members[0]]];
            let in_tree = at
                .checked_sub(layout.offsets[root[m]])
                .ok_or(ProblemError::Misplaced { buffer: m })?;
            let step = tree_align[root[m]];
            let lowest = floor.max(start.saturating_add(in_tree));
            if at < lowest || at.checked_sub(step).is_some_and(|lower| lower >= lowest) {
                return Err(ProblemError::Misplaced { buffer: m });
            }
        }
    }
    for (s, space) in problem.spaces.iter().enumerate() {
        if layout.arenas[s] != ends[s] || space.capacity.is_some_and(|c| ends[s] > c) {
            return Err(ProblemError::ArenaMismatch { space: s });
        }
    }
    let conflict = Conflict::new(problem)?;
    // Pairs sharing bytes: by space and offset, against the ranges still open.
    let mut order: Vec<usize> = (0..n).filter(|&b| items[b].size > 0).collect();
    order.sort_unstable_by_key(|&b| (layout.spaces[b], layout.offsets[b]));
    let mut open: Vec<usize> = Vec::new();
    for &b in &order {
        let (s, o) = (layout.spaces[b], layout.offsets[b]);
        open.retain(|&x| layout.spaces[x] == s && layout.offsets[x] + items[x].size > o);
        for &x in &open {
            if root[x] != root[b] && conflict.between(x, b) {
                return Err(ProblemError::Overlap {
                    first: x.min(b),
                    second: x.max(b),
                });
            }
        }
        open.push(b);
    }
    Ok(())
}

/// Conflicts, computed apart from the solver's rows.
enum Conflict<'p> {
    Intervals(&'p [(u64, u64)]),
    Graph {
        uses: &'p [super::Uses],
        /// Bit `v * nodes + w`: a non-empty path leads from `v` to `w`.
        reach: Vec<u64>,
        nodes: usize,
    },
}

impl<'p> Conflict<'p> {
    fn new(p: &'p Problem) -> Result<Conflict<'p>, ProblemError> {
        match &p.lifetimes {
            Lifetimes::Intervals(iv) => {
                if iv.len() != p.items.len() {
                    return Err(ProblemError::LayoutLength);
                }
                Ok(Conflict::Intervals(iv))
            }
            Lifetimes::Graph(g) => {
                let nodes = g.streams.len();
                if g.uses.len() != p.items.len() {
                    return Err(ProblemError::LayoutLength);
                }
                let mut next: Vec<Vec<usize>> = vec![Vec::new(); nodes];
                let mut previous_on_stream: Vec<(u32, usize)> = Vec::new();
                for (v, &s) in g.streams.iter().enumerate() {
                    match previous_on_stream.iter_mut().find(|(t, _)| *t == s) {
                        Some(entry) => {
                            next[entry.1].push(v);
                            entry.1 = v;
                        }
                        None => previous_on_stream.push((s, v)),
                    }
                }
                for &(a, b) in &g.edges {
                    if a >= nodes || b >= nodes {
                        return Err(ProblemError::EdgeOutOfRange { edge: 0 });
                    }
                    next[a].push(b);
                }
                for (buffer, u) in g.uses.iter().enumerate() {
                    if let Some(pr) = u.producer {
                        for &c in &u.consumers {
                            if pr >= nodes || c >= nodes {
                                return Err(ProblemError::OutOfRange { buffer });
                            }
                            next[pr].push(c);
                        }
                    }
                }
                // The same bound on memory as the solver's rows.
                let bits = nodes
                    .checked_mul(nodes)
                    .filter(|&b| b as u64 <= super::SolveOptions::default().bit_limit)
                    .ok_or(ProblemError::GraphTooLarge)?;
                let mut reach = vec![0u64; bits.div_ceil(64)];
                let mut stack = Vec::new();
                for v in 0..nodes {
                    stack.clear();
                    stack.extend(next[v].iter().copied());
                    while let Some(w) = stack.pop() {
                        let bit = v * nodes + w;
                        if reach[bit / 64] >> (bit % 64) & 1 == 0 {
                            reach[bit / 64] |= 1 << (bit % 64);
                            stack.extend(next[w].iter().copied());
                        }
                    }
                }
                Ok(Conflict::Graph {
                    uses: &g.uses,
                    reach,
                    nodes,
                })
            }
        }
    }

    fn between(&self, a: usize, b: usize) -> bool {
        match self {
            Conflict::Intervals(iv) => iv[a].0 < iv[b].1 && iv[b].0 < iv[a].1,
            Conflict::Graph { uses, reach, nodes } => {
                let done_before = |x: usize, y: usize| -> bool {
                    let Some(q) = uses[y].producer else {
                        return false;
                    };
                    let at = |v: usize| {
                        let bit = v * nodes + q;
                        v < *nodes && q < *nodes && reach[bit / 64] >> (bit % 64) & 1 == 1
                    };
                    if uses[x].output {
                        false
                    } else if !uses[x].consumers.is_empty() {
                        uses[x].consumers.iter().all(|&c| at(c))
                    } else {
                        uses[x].producer.is_none_or(at)
                    }
                };
                !done_before(a, b) && !done_before(b, a)
            }
        }
    }
}
