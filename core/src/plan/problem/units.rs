//! Aliases and groups merged into *units*: sets of buffers at fixed offsets from one base,
//! placed as one. Alias links make trees (union-find by following `of` to the root); a group
//! lays its members' trees out back to back. A unit's conflicts are its members' conflicts,
//! each shifted by the member's offset in the unit, as MindSpore SOMAS's `findOffset` does for
//! contiguous lists.
//!
//! Everything the problem's structure can get wrong is refused here, before any solver runs:
//! alias cycles and overruns, misaligned aliases and pins, group members fixed twice or laid
//! out over each other, no common space, and in-place writes over data still read.

use alloc::vec;
use alloc::vec::Vec;

use super::super::buffer::align_up;
use super::error::ProblemError;
use super::reach::Time;
use super::Problem;

/// The units of a checked problem.
///
/// Invariants: `members[u]` lists the buffers of unit `u` (every buffer is in exactly one
/// unit, `unit[b]`); buffer `b` is at `base(u) + rel[b]`; `rel[b] + size(b) <= extent[u]`;
/// `rel[b]` is a multiple of `b`'s alignment and `align[u]` of every member's, so any base that
/// is a multiple of `align[u]` aligns every member; `pinned[u]` is the base the problem fixes;
/// `spaces[u]` is not empty.
pub(super) struct Units {
    pub unit: Vec<u32>,
    pub rel: Vec<u64>,
    pub members: Vec<Vec<u32>>,
    pub extent: Vec<u64>,
    pub align: Vec<u64>,
    pub pinned: Vec<Option<u64>>,
    pub spaces: Vec<Vec<u32>>,
    /// Each buffer's alias-tree root.
    pub root: Vec<u32>,
}

fn overlap(a: (u64, u64), b: (u64, u64)) -> bool {
    a.0 < b.1 && b.0 < a.1
}

impl Units {
    pub(super) fn new(p: &Problem, time: &Time<'_>) -> Result<Units, ProblemError> {
        let n = p.items.len();
        if n >= u32::MAX as usize {
            return Err(ProblemError::TooLarge);
        }
        if p.spaces.is_empty() {
            return Err(ProblemError::NoSpace);
        }
        let spaces = p.spaces.len() as u32;
        let mut total = 0u64;
        for (buffer, it) in p.items.iter().enumerate() {
            if !it.align.is_power_of_two() {
                return Err(ProblemError::BadAlign { buffer });
            }
            total = total
                .checked_add(it.size)
                .and_then(|t| t.checked_add(it.align))
                .ok_or(ProblemError::TooLarge)?;
            if it
                .spaces
                .as_ref()
                .is_some_and(|s| s.iter().any(|&x| x >= spaces))
                || it.alias.is_some_and(|a| a.of >= n)
            {
                return Err(ProblemError::OutOfRange { buffer });
            }
            if let Some(a) = it.alias {
                if a.of == buffer {
                    return Err(ProblemError::AliasCycle { buffer });
                }
                if it.pinned.is_some() || it.spaces.is_some() {
                    return Err(ProblemError::AliasPlacedApart { buffer });
                }
                let target = p.items[a.of].size;
                if a.offset.checked_add(it.size).is_none_or(|e| e > target) {
                    return Err(ProblemError::AliasTooLarge { buffer });
                }
            }
        }
        // Roots and offsets in the tree, following alias links (0 unvisited, 1 on the path, 2
        // done); the sizes bound every offset, so no sum overflows.
        let mut root = vec![0u32; n];
        let mut tree_rel = vec![0u64; n];
        let mut state = vec![0u8; n];
        let mut path = Vec::new();
        for start in 0..n {
            let mut b = start;
            while state[b] == 0 {
                state[b] = 1;
                path.push(b);
                match p.items[b].alias {
                    Some(a) => b = a.of,
                    None => break,
                }
            }
            if state[b] == 1 && p.items[b].alias.is_some() {
                return Err(ProblemError::AliasCycle { buffer: b });
            }
            // `b` is a root (on the path, last) or done: unwind the path onto it.
            while let Some(x) = path.pop() {
                if let Some(a) = p.items[x].alias {
                    root[x] = root[a.of];
                    tree_rel[x] = tree_rel[a.of] + a.offset;
                } else {
                    root[x] = x as u32;
                }
                state[x] = 2;
            }
        }
        let mut tree_align = vec![1u64; n];
        for b in 0..n {
            if !tree_rel[b].is_multiple_of(p.items[b].align) {
                return Err(ProblemError::AliasMisaligned { buffer: b });
            }
            let r = root[b] as usize;
            tree_align[r] = tree_align[r].max(p.items[b].align);
        }
        // Groups: each tree at most once, its root at `unit_rel`.
        let mut group_of = vec![u32::MAX; n]; // per root
        let mut in_group = vec![false; n];
        let mut unit_rel = vec![0u64; n]; // per root
                                          // Every layout below stays within the sizes, alignments and gaps together.
        for g in &p.groups {
            total = (g.members.len() as u64)
                .checked_mul(g.gap)
                .and_then(|gaps| total.checked_add(gaps))
                .ok_or(ProblemError::TooLarge)?;
        }
        for (g, group) in p.groups.iter().enumerate() {
            let mut cursor = 0u64;
            for (k, &m) in group.members.iter().enumerate() {
                if m >= n {
                    return Err(ProblemError::OutOfRange { buffer: m });
                }
                if core::mem::replace(&mut in_group[m], true) {
                    return Err(ProblemError::InTwoGroups { buffer: m });
                }
                let r = root[m] as usize;
                if group_of[r] != u32::MAX {
                    return Err(ProblemError::FixedTwice { buffer: m });
                }
                group_of[r] = g as u32;
                if k > 0 {
                    cursor = cursor
                        .checked_add(group.gap)
                        .ok_or(ProblemError::TooLarge)?;
                }
                let k_m = tree_rel[m];
                let at = cursor.max(k_m);
                let pos = k_m + align_up(at - k_m, tree_align[r]);
                unit_rel[r] = pos - k_m;
                cursor = pos + p.items[m].size;
                if cursor > total {
                    return Err(ProblemError::TooLarge);
                }
            }
        }
        // Units: one per group, then one per tree outside groups.
        let mut unit = vec![u32::MAX; n];
        let mut unit_of_group = vec![u32::MAX; p.groups.len()];
        let mut members: Vec<Vec<u32>> = Vec::new();
        for b in 0..n {
            let r = root[b] as usize;
            let u = if group_of[r] != u32::MAX {
                let g = group_of[r] as usize;
                if unit_of_group[g] == u32::MAX {
                    unit_of_group[g] = members.len() as u32;
                    members.push(Vec::new());
                }
                unit_of_group[g]
            } else if unit[r] != u32::MAX {
                unit[r]
            } else {
                members.push(Vec::new());
                (members.len() - 1) as u32
            };
            unit[b] = u;
            members[u as usize].push(b as u32);
        }
        let units = members.len();
        let mut rel = vec![0u64; n];
        let mut extent = vec![0u64; units];
        let mut align = vec![1u64; units];
        let mut pinned: Vec<Option<u64>> = vec![None; units];
        for b in 0..n {
            let r = root[b] as usize;
            let u = unit[b] as usize;
            rel[b] = unit_rel[r] + tree_rel[b];
            extent[u] = extent[u].max(rel[b] + p.items[b].size);
            align[u] = align[u].max(tree_align[r]);
        }
        for b in 0..n {
            let Some(o) = p.items[b].pinned else { continue };
            let u = unit[b] as usize;
            let misaligned = o % tree_align[b] != 0
                || o < rel[b]
                || !(o - rel[b]).is_multiple_of(align[u])
                || o.checked_add(extent[u] - rel[b]).is_none();
            if misaligned {
                return Err(ProblemError::PinnedMisaligned { buffer: b });
            }
            let base = o - rel[b];
            if pinned[u].is_some_and(|x| x != base) {
                return Err(ProblemError::FixedTwice { buffer: b });
            }
            pinned[u] = Some(base);
        }
        // Spaces: the first member's list, kept where every member (its tree's root, which
        // carries the list) allows it.
        let all: Vec<u32> = (0..spaces).collect();
        let mut space_lists = Vec::with_capacity(units);
        for m in &members {
            let first = root[m[0] as usize] as usize;
            let mut list = p.items[first].spaces.clone().unwrap_or_else(|| all.clone());
            list.dedup();
            list.retain(|s| {
                m.iter().all(|&b| {
                    let r = root[b as usize] as usize;
                    p.items[r].spaces.as_ref().is_none_or(|l| l.contains(s))
                })
            });
            if list.is_empty() {
                return Err(ProblemError::NoCommonSpace {
                    buffer: m[0] as usize,
                });
            }
            space_lists.push(list);
        }
        // Pinned buffers of different units that share bytes while live: no placement can
        // help. A sweep over their addresses, `O(k log k + overlapping pairs)`.
        let mut fixed: Vec<(u32, u64, u64, usize)> = Vec::new();
        for (u, base) in pinned.iter().enumerate() {
            if let Some(base) = base {
                for &b in &members[u] {
                    let b = b as usize;
                    if p.items[b].size > 0 {
                        let at = base + rel[b];
                        fixed.push((space_lists[u][0], at, at + p.items[b].size, b));
                    }
                }
            }
        }
        fixed.sort_unstable();
        let mut open: Vec<(u32, u64, usize)> = Vec::new();
        for &(s, at, end, b) in &fixed {
            open.retain(|&(os, oend, _)| os == s && oend > at);
            for &(_, _, x) in &open {
                if unit[x] != unit[b] && time.conflict(x, b) {
                    return Err(ProblemError::PinnedOverlap {
                        first: x.min(b),
                        second: x.max(b),
                    });
                }
            }
            open.push((s, end, b));
        }
        let units = Units {
            unit,
            rel,
            members,
            extent,
            align,
            pinned,
            spaces: space_lists,
            root,
        };
        units.check_groups(p, time)?;
        units.check_writes(p, time)?;
        Ok(units)
    }

    fn range(&self, p: &Problem, b: usize) -> (u64, u64) {
        (self.rel[b], self.rel[b] + p.items[b].size)
    }

    /// Buffers of different trees in one unit (a group) never share bytes while live.
    /// `O(k²)` for a unit of `k` buffers.
    fn check_groups(&self, p: &Problem, time: &Time<'_>) -> Result<(), ProblemError> {
        for m in self.members.iter().filter(|m| m.len() > 1) {
            for (i, &a) in m.iter().enumerate() {
                for &b in &m[i + 1..] {
                    let (a, b) = (a as usize, b as usize);
                    if self.root[a] != self.root[b]
                        && p.items[a].size > 0
                        && p.items[b].size > 0
                        && overlap(self.range(p, a), self.range(p, b))
                        && time.conflict(a, b)
                    {
                        return Err(ProblemError::GroupOverlap {
                            first: a.min(b),
                            second: a.max(b),
                        });
                    }
                }
            }
        }
        Ok(())
    }

    /// In-place safety within each alias tree: of two writers (the root, and every alias that
    /// is not a view) sharing bytes, one is written first, and every buffer showing the
    /// first's data (it and the views below it) is read for the last time no later than by
    /// the second's producer. `O(k²)` for a tree of `k` buffers.
    fn check_writes(&self, p: &Problem, time: &Time<'_>) -> Result<(), ProblemError> {
        let n = p.items.len();
        // The writer whose data each buffer shows.
        let data: Vec<u32> = (0..n)
            .map(|b| {
                let mut x = b;
                while let Some(a) = p.items[x].alias.filter(|a| a.view) {
                    x = a.of;
                }
                x as u32
            })
            .collect();
        for m in &self.members {
            let mut trees: Vec<(u32, u32)> =
                m.iter().map(|&b| (self.root[b as usize], b)).collect();
            trees.sort_unstable();
            for tree in trees.chunk_by(|x, y| x.0 == y.0).filter(|t| t.len() > 1) {
                let buffers: Vec<usize> = tree.iter().map(|&(_, b)| b as usize).collect();
                let writers: Vec<usize> = buffers
                    .iter()
                    .copied()
                    .filter(|&b| data[b] == b as u32 && p.items[b].size > 0)
                    .collect();
                for &a in &writers {
                    for &w in &writers {
                        if a == w || !overlap(self.range(p, a), self.range(p, w)) {
                            continue;
                        }
                        if !time.written_before(a, w) {
                            if !time.written_before(w, a) {
                                return Err(ProblemError::AliasUnsafe {
                                    reader: a.min(w),
                                    writer: a.max(w),
                                });
                            }
                            continue;
                        }
                        for &v in &buffers {
                            if data[v] == a as u32
                                && p.items[v].size > 0
                                && overlap(self.range(p, v), self.range(p, w))
                                && !time.read_by_write(v, w)
                            {
                                return Err(ProblemError::AliasUnsafe {
                                    reader: v,
                                    writer: w,
                                });
                            }
                        }
                    }
                }
            }
        }
        Ok(())
    }
}
