//! The solvers' view of a problem: time cut into sections, and who conflicts with whom.
//!
//! A *section* is a maximal set of buffers live at one moment (a maximal clique of the
//! interval graph): sweeping the events in time order, one is recorded at every end that
//! follows a start. Every moment's live set is contained in some section, so the largest
//! section total is the lower bound, and each buffer lives in a contiguous run of sections
//! `[lo, hi)`. This is MiniMalloc's "sweeper" (google/minimalloc `src/sweeper.cc`), rebuilt
//! here without gaps or windows, which this planner does not model. MiniMalloc also keeps a
//! section at each end time whose live set is not maximal; a subset can have a higher floor,
//! so those can prune where the maximal ones do not, but one section per elementary interval
//! barely changed the node counts while doubling the sections to maintain, so only maximal
//! ones are kept (figures: `docs/measurements.md#sweeprs-only-maximal-sections`).
//!
//! Zero-size buffers conflict with nothing and are left out: `orig` maps the instance's
//! buffers back to the caller's indices.

use alloc::vec;
use alloc::vec::Vec;

use super::buffer::Buffer;

/// Sections and conflicts of the buffers of one problem that have a size.
///
/// Invariants: for every buffer `b`, `lo[b] < hi[b] <= sections()`; `b` is live in every
/// section of `[lo[b], hi[b])` and in no other; `sec_total[s]` is the sum of the sizes of the
/// buffers live in `s`. When built (`has_graph`), `adj[adj_start[b]..adj_start[b + 1]]` lists
/// exactly the buffers whose lifetimes overlap `b`'s, and `mem[mem_start[s]..mem_start[s +
/// 1]]` exactly the buffers live in `s`.
pub(super) struct Instance {
    /// The caller's index of each buffer.
    pub orig: Vec<u32>,
    pub size: Vec<u64>,
    pub align: Vec<u64>,
    /// `end - start`.
    pub length: Vec<u64>,
    pub lo: Vec<u32>,
    pub hi: Vec<u32>,
    pub sec_total: Vec<u64>,
    pub adj_start: Vec<usize>,
    pub adj: Vec<u32>,
    pub mem_start: Vec<usize>,
    pub mem: Vec<u32>,
    /// The largest section total: no plan's arena is smaller.
    pub lower_bound: u64,
    /// The greatest common divisor of the sizes and of the alignments above 1: every offset
    /// a solver builds (tops of buffers, aligned up) and so every arena is a multiple of it.
    pub grain: u64,
}

/// Start and end events, ends first at equal times, as `(time, 0 = end / 1 = start, index)`.
fn events(start: &[u64], end: &[u64]) -> Vec<(u64, u8, u32)> {
    let mut ev = Vec::with_capacity(start.len() * 2);
    for (i, (&s, &e)) in start.iter().zip(end).enumerate() {
        ev.push((s, 1, i as u32));
        ev.push((e, 0, i as u32));
    }
    ev.sort_unstable();
    ev
}

impl Instance {
    /// Sections of `buffers` (already checked by `check_buffers`). With `graph_limit`, the
    /// conflict lists and section member lists are built too, unless together they would hold
    /// more than that many entries. `O(n log n)` plus the size of what is built.
    pub fn new(buffers: &[Buffer], graph_limit: Option<usize>) -> Instance {
        let kept: Vec<u32> = (0..buffers.len() as u32)
            .filter(|&i| buffers[i as usize].size > 0)
            .collect();
        let n = kept.len();
        let pick = |f: fn(&Buffer) -> u64| -> Vec<u64> {
            kept.iter().map(|&i| f(&buffers[i as usize])).collect()
        };
        let size = pick(|b| b.size);
        let align = pick(|b| b.align);
        let start = pick(|b| b.start);
        let end = pick(|b| b.end);
        let length = start.iter().zip(&end).map(|(s, e)| e - s).collect();
        let ev = events(&start, &end);

        // Pass 1: sections, ranges, totals, and how big the lists would be.
        let (mut lo, mut hi) = (vec![0u32; n], vec![0u32; n]);
        let mut sec_total = Vec::new();
        let mut sec_len = Vec::new();
        let (mut live, mut live_count, mut pending) = (0u64, 0usize, false);
        let mut pairs = 0usize;
        for &(_, kind, i) in &ev {
            let i = i as usize;
            if kind == 1 {
                lo[i] = sec_total.len() as u32;
                pairs += live_count;
                live += size[i];
                live_count += 1;
                pending = true;
            } else {
                if pending {
                    sec_total.push(live);
                    sec_len.push(live_count);
                    pending = false;
                }
                hi[i] = sec_total.len() as u32;
                live -= size[i];
                live_count -= 1;
            }
        }
        let lower_bound = sec_total.iter().copied().max().unwrap_or(0);
        let grain = size
            .iter()
            .chain(align.iter().filter(|&&a| a > 1))
            .fold(0, |g, &x| gcd(g, x))
            .max(1);
        let members: usize = sec_len.iter().sum();
        let mut inst = Instance {
            orig: kept,
            size,
            align,
            length,
            lo,
            hi,
            sec_total,
            adj_start: Vec::new(),
            adj: Vec::new(),
            mem_start: Vec::new(),
            mem: Vec::new(),
            lower_bound,
            grain,
        };
        let fits = graph_limit
            .is_some_and(|limit| pairs.saturating_mul(2).saturating_add(members) <= limit);
        if fits {
            inst.build_graph(&ev, pairs, &sec_len);
        }
        inst
    }

    /// Pass 2: conflict lists (in CSR form) and section member lists.
    fn build_graph(&mut self, ev: &[(u64, u8, u32)], pairs: usize, sec_len: &[usize]) {
        let n = self.len();
        // Degrees: each pair is counted once, when its later buffer starts.
        let mut deg = vec![0usize; n];
        let mut active: Vec<u32> = Vec::new();
        let mut pos = vec![0usize; n];
        for &(_, kind, i) in ev {
            let iu = i as usize;
            if kind == 1 {
                deg[iu] += active.len();
                for &a in &active {
                    deg[a as usize] += 1;
                }
                pos[iu] = active.len();
                active.push(i);
            } else {
                remove(&mut active, &mut pos, iu);
            }
        }
        let mut adj_start = Vec::with_capacity(n + 1);
        let mut acc = 0;
        for &d in &deg {
            adj_start.push(acc);
            acc += d;
        }
        adj_start.push(acc);
        debug_assert_eq!(acc, pairs * 2);
        let mut fill: Vec<usize> = adj_start[..n].to_vec();
        let mut adj = vec![0u32; acc];
        let mut mem_start = Vec::with_capacity(sec_len.len() + 1);
        let mut mem = Vec::with_capacity(sec_len.iter().sum());
        active.clear();
        let mut pending = false;
        for &(_, kind, i) in ev {
            let iu = i as usize;
            if kind == 1 {
                for &a in &active {
                    adj[fill[iu]] = a;
                    fill[iu] += 1;
                    adj[fill[a as usize]] = i;
                    fill[a as usize] += 1;
                }
                pos[iu] = active.len();
                active.push(i);
                pending = true;
            } else {
                if pending {
                    mem_start.push(mem.len());
                    mem.extend_from_slice(&active);
                    pending = false;
                }
                remove(&mut active, &mut pos, iu);
            }
        }
        mem_start.push(mem.len());
        self.adj_start = adj_start;
        self.adj = adj;
        self.mem_start = mem_start;
        self.mem = mem;
    }

    /// Buffers in the instance.
    pub fn len(&self) -> usize {
        self.size.len()
    }

    /// Sections in the instance.
    pub fn sections(&self) -> usize {
        self.sec_total.len()
    }

    /// Whether the conflict and member lists were built.
    pub fn has_graph(&self) -> bool {
        self.adj_start.len() == self.len() + 1
    }

    /// The buffers whose lifetimes overlap `b`'s (needs the graph).
    #[inline]
    pub fn conflicts(&self, b: usize) -> &[u32] {
        &self.adj[self.adj_start[b]..self.adj_start[b + 1]]
    }

    /// The buffers live in section `s` (needs the graph).
    #[inline]
    pub fn members(&self, s: usize) -> &[u32] {
        &self.mem[self.mem_start[s]..self.mem_start[s + 1]]
    }

    /// For each buffer, the largest total live in any of its sections: its "breadth".
    /// Range maxima over the section totals in a bottom-up tree: `O(n log s)`.
    pub fn breadth(&self) -> Vec<u64> {
        let s = self.sections();
        let leaves = s.max(1).next_power_of_two();
        let mut tree = vec![0u64; 2 * leaves];
        tree[leaves..leaves + s].copy_from_slice(&self.sec_total);
        for v in (1..leaves).rev() {
            tree[v] = tree[2 * v].max(tree[2 * v + 1]);
        }
        (0..self.len())
            .map(|b| {
                let (mut l, mut r) = (self.lo[b] as usize + leaves, self.hi[b] as usize + leaves);
                let mut best = 0;
                while l < r {
                    if l & 1 == 1 {
                        best = best.max(tree[l]);
                        l += 1;
                    }
                    if r & 1 == 1 {
                        r -= 1;
                        best = best.max(tree[r]);
                    }
                    l >>= 1;
                    r >>= 1;
                }
                best
            })
            .collect()
    }

    /// `cuts[s]`: the buffers live in both section `s` and `s + 1`. Where it is 0, the
    /// sections on either side are independent problems.
    pub fn cuts(&self) -> Vec<u32> {
        let s = self.sections();
        let mut diff = vec![0i64; s + 1];
        for b in 0..self.len() {
            let (lo, hi) = (self.lo[b] as usize, self.hi[b] as usize);
            if hi > lo + 1 {
                diff[lo] += 1;
                diff[hi - 1] -= 1;
            }
        }
        let mut cuts = Vec::with_capacity(s.saturating_sub(1));
        let mut acc = 0i64;
        for d in diff.iter().take(s.saturating_sub(1)) {
            acc += d;
            cuts.push(acc as u32);
        }
        cuts
    }
}

/// Removes `i` from `active` in `O(1)`, keeping `pos` (each member's index in it) right.
fn remove(active: &mut Vec<u32>, pos: &mut [usize], i: usize) {
    let p = pos[i];
    let last = active.len() - 1;
    active.swap(p, last);
    pos[active[p] as usize] = p;
    active.pop();
}

/// Greatest common divisor (`gcd(0, x) = x`).
fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}
