//! An execution checker for static memory plans: runs a [`Problem`](tagalloc::plan::Problem)'s schedule on real memory
//! laid out by a [`Layout`](tagalloc::plan::Layout), every producer writing a pattern named by its buffer and every
//! consumer verifying the patterns of what it reads. A layout that lets one buffer clobber
//! another while it is still read shows as corrupt data, whatever
//! [`check_layout`](tagalloc::plan::check_layout) says (it is not called here).
//!
//! - The data a buffer shows is its own when it is a writer (not a view); a view shows the
//!   data of its nearest writing ancestor through the alias links, at its offset inside it.
//! - Interval mode: the distinct moments in increasing order. At moment `t`: verify every
//!   buffer whose last moment (`end - 1`) is `t` and whose data was written before `t`; write
//!   every writer starting at `t` (ancestors in the alias tree first); then verify every
//!   buffer whose last moment is `t` again (or first, when its data was written at `t`), as a
//!   step reads its inputs while it writes its outputs, but not those whose data an in-place
//!   writer starting at `t` overwrites, which it may.
//! - Graph mode: `graph_orders` topological orders (order 0 takes the lowest ready node, order
//!   1 the highest, later orders a seeded random one), each honouring data edges, `edges` and
//!   the streams' own orders, each on freshly zeroed regions: the graph inputs are written
//!   first; each node verifies what it consumes, writes what it produces, then verifies what
//!   it consumes again but for what its in-place writers overwrite; the outputs are verified
//!   at the end.
//!
//! What it cannot see: rules about where buffers go that no data depends on (a group member
//! out of its place, a pin, alignment within the region), which
//! [`check_layout`](tagalloc::plan::check_layout) checks.
//!
//! Only safe code: each space's region is a `Vec<u8>` with room to align its start, and
//! [`PlannedArena`](tagalloc::plan::PlannedArena)'s addresses are mapped back to indices into it.

#![forbid(unsafe_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use tagalloc::plan::{Layout, Lifetimes, PlannedArena, Problem};

/// The most bytes all regions together may take (arenas plus alignment slack).
pub const MAX_REGION_BYTES: u64 = 1 << 32;

/// What a run did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Executed {
    /// Moments visited (interval mode) or nodes run, summed over the orders (graph mode).
    pub steps: usize,
    /// Schedules run: 1 in interval mode, `graph_orders` (at least 1) in graph mode.
    pub orders: usize,
    /// Bytes written by producers.
    pub bytes_written: u64,
    /// Bytes verified, counted at each check (a buffer read at a step is checked before and
    /// after that step's writes).
    pub bytes_checked: u64,
}

/// Why a run failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExecError {
    /// The layout (or problem) cannot be run: wrong lengths, a region [`PlannedArena`]
    /// refused, an arena too large, a cycle.
    Refused(String),
    /// A buffer's data was not intact when it was read.
    Corrupt {
        /// The buffer read.
        buffer: usize,
        /// When: `"step 12"` (interval mode), `"node 7 (order 2)"` or `"end (order 2)"`
        /// (graph mode).
        at: String,
        /// The first wrong byte, as an offset in the buffer.
        byte: u64,
        /// The writer whose pattern is there instead, when one is recognisable.
        found: Option<usize>,
    },
}

impl fmt::Display for ExecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExecError::Refused(why) => write!(f, "refused: {why}"),
            ExecError::Corrupt {
                buffer,
                at,
                byte,
                found,
            } => {
                write!(f, "buffer {buffer} corrupt at {at}, byte {byte}: ")?;
                match found {
                    Some(w) => write!(f, "it holds buffer {w}'s data"),
                    None => f.write_str("it holds no recognisable buffer's data"),
                }
            }
        }
    }
}

impl std::error::Error for ExecError {}

/// Runs `problem`'s schedule on real memory laid out by `layout`: every producer writes a
/// pattern named by its buffer, every consumer verifies the patterns of what it reads.
/// `graph_orders` topological orders are run in graph mode (at least 1); interval mode has one.
pub fn execute(
    problem: &Problem,
    layout: &Layout,
    graph_orders: usize,
) -> Result<Executed, ExecError> {
    let exec = Exec::new(problem, layout)?;
    match &problem.lifetimes {
        Lifetimes::Intervals(intervals) => exec.run_intervals(intervals),
        Lifetimes::Graph(graph) => exec.run_graph(graph, graph_orders.max(1)),
    }
}

fn refused(why: impl Into<String>) -> ExecError {
    ExecError::Refused(why.into())
}

fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Bytes `8k .. 8k + 8` of writer `w`'s data.
fn word(w: usize, k: u64) -> [u8; 8] {
    splitmix64(
        (w as u64)
            .wrapping_add(1)
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
            ^ k,
    )
    .to_le_bytes()
}

/// Byte `d` of writer `w`'s data.
fn pattern_byte(w: usize, d: u64) -> u8 {
    word(w, d / 8)[(d % 8) as usize]
}

/// The state of one run: the regions, where every buffer is in them, whose data it shows.
struct Exec<'a> {
    problem: &'a Problem,
    /// Each buffer's data: its nearest writing ancestor (itself for a writer) and the offset
    /// of the buffer inside it.
    data: Vec<(usize, u64)>,
    /// Alias links from each buffer to its tree's root.
    depth: Vec<usize>,
    /// One zeroed region per space.
    regions: Vec<Vec<u8>>,
    /// Each buffer's region and byte index in it (`None` for zero-size buffers).
    place: Vec<Option<(usize, usize)>>,
    /// Each region's writers of non-zero size, for naming what clobbered a buffer.
    writers_in: Vec<Vec<usize>>,
    done: Executed,
}

impl<'a> Exec<'a> {
    fn new(problem: &'a Problem, layout: &Layout) -> Result<Exec<'a>, ExecError> {
        let n = problem.items.len();
        if layout.offsets.len() != n || layout.spaces.len() != n {
            return Err(refused(format!(
                "the layout has {} offsets and {} spaces for {n} buffers",
                layout.offsets.len(),
                layout.spaces.len()
            )));
        }
        if layout.arenas.len() != problem.spaces.len() {
            return Err(refused(format!(
                "the layout has {} arenas for {} spaces",
                layout.arenas.len(),
                problem.spaces.len()
            )));
        }
        let spaces = layout.arenas.len();
        let mut max_align = vec![1u64; spaces];
        for (b, it) in problem.items.iter().enumerate() {
            let s = layout.spaces[b] as usize;
            if s >= spaces {
                return Err(refused(format!("buffer {b} is in space {s}, of {spaces}")));
            }
            if !it.align.is_power_of_two() {
                return Err(refused(format!(
                    "buffer {b}'s alignment {} is not a power of two",
                    it.align
                )));
            }
            max_align[s] = max_align[s].max(it.align);
        }

        // Each buffer's data source and depth, following the alias links.
        let mut data = Vec::with_capacity(n);
        let mut depth = Vec::with_capacity(n);
        for b in 0..n {
            let (mut cur, mut off, mut writer) = (b, 0u64, None);
            let mut links = 0;
            while let Some(alias) = problem.items[cur].alias {
                if writer.is_none() && !alias.view {
                    writer = Some((cur, off));
                }
                if alias.of >= n {
                    return Err(refused(format!("buffer {cur} aliases buffer {}", alias.of)));
                }
                if writer.is_none() {
                    off = off
                        .checked_add(alias.offset)
                        .ok_or_else(|| refused(format!("buffer {b}'s alias offsets overflow")))?;
                }
                cur = alias.of;
                links += 1;
                if links > n {
                    return Err(refused(format!("buffer {b} is on an alias cycle")));
                }
            }
            data.push(writer.unwrap_or((cur, off)));
            depth.push(links);
        }

        // The regions, and every buffer's place in them.
        let mut total = 0u64;
        for (&arena, &align) in layout.arenas.iter().zip(&max_align) {
            total = total
                .checked_add(arena)
                .and_then(|t| t.checked_add(align))
                .filter(|&t| t <= MAX_REGION_BYTES)
                .ok_or_else(|| {
                    refused(format!(
                        "the arenas ({:?} bytes) and their alignment exceed {MAX_REGION_BYTES} bytes",
                        layout.arenas
                    ))
                })?;
        }
        let mut regions = Vec::with_capacity(spaces);
        let mut place = vec![None; n];
        let mut writers_in = vec![Vec::new(); spaces];
        for s in 0..spaces {
            let arena = layout.arenas[s];
            let align = max_align[s];
            // Both fit in usize: their sum is at most MAX_REGION_BYTES.
            let len = usize::try_from(arena + align).map_err(|_| refused("region too large"))?;
            let region = vec![0u8; len];
            let start = region.as_ptr() as usize as u64;
            let pad = (align - start % align) % align;
            let arena_map = PlannedArena::new(problem, layout, s as u32, start + pad, arena)
                .map_err(|e| refused(format!("space {s}: {e}")))?;
            for (b, it) in problem.items.iter().enumerate() {
                if layout.spaces[b] as usize != s || it.size == 0 {
                    continue;
                }
                let at = arena_map
                    .address(b)
                    .and_then(|a| a.checked_sub(start))
                    .filter(|&i| i.checked_add(it.size).is_some_and(|e| e <= len as u64))
                    .ok_or_else(|| {
                        refused(format!("buffer {b} lies outside space {s}'s region"))
                    })?;
                place[b] = Some((s, at as usize));
                if data[b].0 == b {
                    writers_in[s].push(b);
                }
            }
            regions.push(region);
        }
        Ok(Exec {
            problem,
            data,
            depth,
            regions,
            place,
            writers_in,
            done: Executed::default(),
        })
    }

    fn size(&self, b: usize) -> u64 {
        self.problem.items[b].size
    }

    fn is_writer(&self, b: usize) -> bool {
        self.data[b].0 == b
    }

    /// `a` is `y` or an ancestor of `y` through the alias links.
    fn is_ancestor(&self, a: usize, y: usize) -> bool {
        let mut cur = y;
        for _ in 0..=self.depth[y] {
            if cur == a {
                return true;
            }
            match self.problem.items[cur].alias {
                Some(alias) => cur = alias.of,
                None => return false,
            }
        }
        false
    }

    /// Writer `y` is an in-place write over writer `w`'s bytes (an alias below it).
    fn overwrites(&self, y: usize, w: usize) -> bool {
        y != w && self.is_ancestor(w, y)
    }

    /// Sorts writers so that an alias's ancestors are written before it.
    fn by_depth(&self, writers: &mut [usize]) {
        writers.sort_by_key(|&w| (self.depth[w], w));
    }

    /// Writes writer `w`'s pattern over its bytes.
    fn write(&mut self, w: usize) {
        let size = self.size(w);
        let Some((r, at)) = self.place[w] else {
            return;
        };
        let region = &mut self.regions[r];
        let mut lo = 0u64;
        while lo < size {
            let k = lo / 8;
            let hi = ((k + 1) * 8).min(size);
            let bytes = word(w, k);
            let (i, j) = (at + lo as usize, at + hi as usize);
            if let Some(dst) = region.get_mut(i..j) {
                dst.copy_from_slice(&bytes[..(hi - lo) as usize]);
            }
            lo = hi;
        }
        self.done.bytes_written += size;
    }

    /// Checks that buffer `b` shows its data's pattern.
    fn verify(&mut self, b: usize, at: &dyn Fn() -> String) -> Result<(), ExecError> {
        let size = self.size(b);
        let Some((r, start)) = self.place[b] else {
            return Ok(());
        };
        let (w, off) = self.data[b];
        let region = &self.regions[r];
        let end = off.saturating_add(size);
        let mut d = off;
        while d < end {
            let k = d / 8;
            let next = k.saturating_add(1).saturating_mul(8).min(end);
            let expected = word(w, k);
            let want = &expected[(d - k * 8) as usize..(next - k * 8) as usize];
            let i = start + (d - off) as usize;
            let got = region.get(i..i + want.len()).unwrap_or(&[]);
            if got != want {
                let first = want.iter().zip(got).position(|(a, b)| a != b).unwrap_or(0);
                let byte = d - off + first as u64;
                return Err(ExecError::Corrupt {
                    buffer: b,
                    at: at(),
                    byte,
                    found: self.found(b, r, start + byte as usize, size - byte),
                });
            }
            d = next;
        }
        self.done.bytes_checked += size;
        Ok(())
    }

    /// The writer (not `b`'s own data) whose pattern the bytes at `index` of region `r` hold,
    /// over at most 8 bytes and `left` bytes: the one matching the most bytes.
    fn found(&self, b: usize, r: usize, index: usize, left: u64) -> Option<usize> {
        let region = &self.regions[r];
        let n = left.min(8) as usize;
        let mut best: Option<(usize, usize)> = None;
        for &c in &self.writers_in[r] {
            if c == self.data[b].0 {
                continue;
            }
            let Some((_, at)) = self.place[c] else {
                continue;
            };
            let size = self.size(c) as usize;
            if index < at || index >= at + size {
                continue;
            }
            let m = n.min(at + size - index);
            let d = (index - at) as u64;
            let matches =
                (0..m).all(|j| region.get(index + j) == Some(&pattern_byte(c, d + j as u64)));
            if matches && best.is_none_or(|(_, bm)| m > bm) {
                best = Some((c, m));
            }
        }
        best.map(|(c, _)| c)
    }

    fn run_intervals(mut self, intervals: &[(u64, u64)]) -> Result<Executed, ExecError> {
        let n = self.problem.items.len();
        if intervals.len() != n {
            return Err(refused(format!(
                "{} intervals for {n} buffers",
                intervals.len()
            )));
        }
        if let Some(b) = (0..n).find(|&b| intervals[b].0 >= intervals[b].1) {
            return Err(refused(format!(
                "buffer {b}'s interval {:?} is empty",
                intervals[b]
            )));
        }
        #[derive(Default)]
        struct Moment {
            before: Vec<usize>,
            writes: Vec<usize>,
            after: Vec<usize>,
        }
        let mut moments: BTreeMap<u64, Moment> = BTreeMap::new();
        for (b, &(start, _)) in intervals.iter().enumerate() {
            moments.entry(start).or_default();
            if self.is_writer(b) && self.size(b) > 0 {
                moments.entry(start).or_default().writes.push(b);
            }
        }
        for b in 0..n {
            if self.size(b) == 0 {
                continue;
            }
            let last = intervals[b].1 - 1;
            let w = self.data[b].0;
            if intervals[w].0 < last {
                moments.entry(last).or_default().before.push(b);
            }
            // Read at `last` while that moment's writers write: checked again after them
            // (first after them, when written at `last` itself), unless an in-place writer
            // starting then overwrites the data, which it may.
            let overwritten = moments
                .get(&last)
                .is_some_and(|m| m.writes.iter().any(|&y| self.overwrites(y, w)));
            if !overwritten {
                moments.entry(last).or_default().after.push(b);
            }
        }
        for m in moments.values_mut() {
            let mut writes = std::mem::take(&mut m.writes);
            self.by_depth(&mut writes);
            m.writes = writes;
        }
        for (t, m) in &moments {
            let at = || format!("step {t}");
            for &b in &m.before {
                self.verify(b, &at)?;
            }
            for &w in &m.writes {
                self.write(w);
            }
            for &b in &m.after {
                self.verify(b, &at)?;
            }
        }
        self.done.steps = moments.len();
        self.done.orders = 1;
        Ok(self.done)
    }

    fn run_graph(
        mut self,
        graph: &tagalloc::plan::Graph,
        orders: usize,
    ) -> Result<Executed, ExecError> {
        let n = self.problem.items.len();
        let nodes = graph.streams.len();
        if graph.uses.len() != n {
            return Err(refused(format!(
                "{} uses for {n} buffers",
                graph.uses.len()
            )));
        }
        let mut next: Vec<Vec<usize>> = vec![Vec::new(); nodes];
        let node = |v: usize, what: &dyn Fn() -> String| {
            if v < nodes {
                Ok(v)
            } else {
                Err(refused(format!("{} names node {v}, of {nodes}", what())))
            }
        };
        let mut consumes = vec![Vec::new(); nodes];
        let mut produces = vec![Vec::new(); nodes];
        let mut inputs = Vec::new();
        let mut outputs = Vec::new();
        for (b, uses) in graph.uses.iter().enumerate() {
            let what = || format!("buffer {b}");
            for &c in &uses.consumers {
                let c = node(c, &what)?;
                if self.size(b) > 0 && !consumes[c].contains(&b) {
                    consumes[c].push(b);
                }
            }
            match uses.producer {
                Some(p) => {
                    let p = node(p, &what)?;
                    next[p].extend(uses.consumers.iter().copied());
                    if self.is_writer(b) && self.size(b) > 0 {
                        produces[p].push(b);
                    }
                }
                None if self.is_writer(b) && self.size(b) > 0 => inputs.push(b),
                None => {}
            }
            if uses.output && self.size(b) > 0 {
                outputs.push(b);
            }
        }
        for &(a, z) in &graph.edges {
            let what = || format!("edge ({a}, {z})");
            let a = node(a, &what)?;
            let z = node(z, &what)?;
            next[a].push(z);
        }
        let mut last_on: BTreeMap<u32, usize> = BTreeMap::new();
        for (v, &s) in graph.streams.iter().enumerate() {
            if let Some(u) = last_on.insert(s, v) {
                next[u].push(v);
            }
        }
        let mut indegree = vec![0usize; nodes];
        for succ in &next {
            for &z in succ {
                indegree[z] += 1;
            }
        }
        self.by_depth(&mut inputs);
        for p in &mut produces {
            self.by_depth(p);
        }
        // A node reads its inputs while it writes its outputs: they are checked again after
        // its writes, but for those its in-place writers overwrite, which they may.
        let again: Vec<Vec<usize>> = (0..nodes)
            .map(|v| {
                consumes[v]
                    .iter()
                    .copied()
                    .filter(|&b| {
                        !produces[v]
                            .iter()
                            .any(|&y| self.overwrites(y, self.data[b].0))
                    })
                    .collect()
            })
            .collect();

        // Each order: a topological sort (refused on a cycle before anything runs).
        let sort = |k: usize| -> Result<Vec<usize>, ExecError> {
            let mut indegree = indegree.clone();
            let mut ready: BTreeSet<usize> = (0..nodes).filter(|&v| indegree[v] == 0).collect();
            let mut rng = splitmix64(k as u64) | 1;
            let mut order = Vec::with_capacity(nodes);
            while !ready.is_empty() {
                let v = match k {
                    0 => *ready.first().unwrap_or(&0),
                    1 => *ready.last().unwrap_or(&0),
                    _ => {
                        rng ^= rng << 13;
                        rng ^= rng >> 7;
                        rng ^= rng << 17;
                        let i = (rng % ready.len() as u64) as usize;
                        *ready.iter().nth(i).unwrap_or(&0)
                    }
                };
                ready.remove(&v);
                order.push(v);
                for &z in &next[v] {
                    indegree[z] -= 1;
                    if indegree[z] == 0 {
                        ready.insert(z);
                    }
                }
            }
            if order.len() < nodes {
                let stuck = (0..nodes).find(|&v| indegree[v] > 0).unwrap_or(0);
                return Err(refused(format!(
                    "the graph has a cycle through node {stuck}"
                )));
            }
            Ok(order)
        };
        sort(0)?;
        for k in 0..orders {
            let order = sort(k)?;
            for region in &mut self.regions {
                region.fill(0);
            }
            for &w in &inputs {
                self.write(w);
            }
            for &v in &order {
                let at = || format!("node {v} (order {k})");
                for &b in &consumes[v] {
                    self.verify(b, &at)?;
                }
                for &w in &produces[v] {
                    self.write(w);
                }
                for &b in &again[v] {
                    self.verify(b, &at)?;
                }
            }
            let at = || format!("end (order {k})");
            for &b in &outputs {
                self.verify(b, &at)?;
            }
            self.done.steps += nodes;
        }
        self.done.orders = orders;
        Ok(self.done)
    }
}

#[cfg(test)]
mod tests {
    use tagalloc::plan::{
        check_layout, solve, Alias, ArenaError, Graph, Group, Item, Layout, Lifetimes,
        PlannedArena, Problem, ProblemError, SolveOptions, Space, Uses,
    };

    use super::{execute, ExecError};

    fn solved(problem: &Problem) -> Layout {
        let layout = solve(problem, &SolveOptions::default(), &mut || false)
            .expect("solvable")
            .layout;
        check_layout(problem, &layout).expect("solve's layout checks");
        layout
    }

    /// Arenas recomputed after offsets were changed by hand.
    fn fix_arenas(problem: &Problem, layout: &mut Layout) {
        for a in &mut layout.arenas {
            *a = 0;
        }
        for (b, it) in problem.items.iter().enumerate() {
            let s = layout.spaces[b] as usize;
            layout.arenas[s] = layout.arenas[s].max(layout.offsets[b] + it.size);
        }
    }

    /// Intervals, views (whole and a sub-buffer), in-place writes (one over a group member),
    /// a group with a gap, two spaces.
    fn rich_problem() -> Problem {
        Problem {
            items: vec![
                Item::new(64),                                 // 0 x
                Item::new(256).with_align(16),                 // 1 y
                Item::new(256).with_alias(Alias::write(1, 0)), // 2 z = relu(y)
                Item::new(256).with_alias(Alias::view(2, 0)),  // 3 f = flatten(z)
                Item::new(32).in_spaces(vec![1]),              // 4 g, other space
                Item::new(64).with_alias(Alias::view(1, 128)), // 5 h, part of y
                Item::new(100).with_align(8),                  // 6 a, group
                Item::new(40).with_align(32),                  // 7 b, group
                Item::new(16).with_alias(Alias::write(7, 16)), // 8 c, over b
                Item::new(16).with_alias(Alias::view(6, 8)),   // 9 k, part of a
                Item::new(0),                                  // 10 empty
                Item::new(48).with_alias(Alias::view(3, 64)),  // 11 view of a view
                Item::new(24).with_align(4096),                // 12 page-aligned
            ],
            lifetimes: Lifetimes::Intervals(vec![
                (0, 1),
                (0, 2),
                (1, 3),
                (2, 4),
                (3, 4),
                (0, 2),
                (1, 4),
                (2, 5),
                (4, 5),
                (3, 4),
                (0, 5),
                (2, 3),
                (1, 5),
            ]),
            groups: vec![Group {
                members: vec![6, 7],
                gap: 8,
            }],
            spaces: vec![Space::default(), Space::default()],
        }
    }

    #[test]
    fn a_solved_problem_runs_intact() {
        let problem = rich_problem();
        let layout = solved(&problem);
        let done = execute(&problem, &layout, 1).unwrap();
        assert_eq!(done.orders, 1);
        assert_eq!(done.steps, 5);
        // Every writer once; every buffer of non-zero size checked once.
        let writers: u64 = [0, 1, 2, 4, 6, 7, 8, 12]
            .iter()
            .map(|&b| problem.items[b].size)
            .sum();
        let all: u64 = problem.items.iter().map(|i| i.size).sum();
        assert_eq!(done.bytes_written, writers);
        // Every buffer of non-zero size checked, some twice (before and after the writes
        // of the moment that reads them last).
        assert!(done.bytes_checked >= all);
    }

    #[test]
    fn two_conflicting_buffers_sharing_bytes_are_caught() {
        let problem = Problem {
            items: vec![Item::new(64), Item::new(64), Item::new(32)],
            lifetimes: Lifetimes::Intervals(vec![(0, 3), (1, 2), (2, 4)]),
            ..Problem::default()
        };
        let mut layout = solved(&problem);
        execute(&problem, &layout, 1).unwrap();
        // Buffer 1 moved 8 bytes into buffer 0, which is read after 1 is written.
        layout.offsets[1] = layout.offsets[0] + 8;
        fix_arenas(&problem, &mut layout);
        assert!(check_layout(&problem, &layout).is_err());
        let err = execute(&problem, &layout, 1).unwrap_err();
        assert_eq!(
            err,
            ExecError::Corrupt {
                buffer: 0,
                at: "step 2".into(),
                byte: 8,
                found: Some(1)
            },
            "{err}"
        );
        assert_eq!(
            err.to_string(),
            "buffer 0 corrupt at step 2, byte 8: it holds buffer 1's data"
        );
    }

    #[test]
    fn an_in_place_write_over_a_buffer_read_later_is_caught() {
        // y overwrites x's first half at step 1; x is read at step 2.
        let mut problem = Problem {
            items: vec![Item::new(64), Item::new(32).with_alias(Alias::write(0, 0))],
            lifetimes: Lifetimes::Intervals(vec![(0, 3), (1, 3)]),
            ..Problem::default()
        };
        assert!(solve(&problem, &SolveOptions::default(), &mut || false).is_err());
        let layout = Layout {
            spaces: vec![0, 0],
            offsets: vec![0, 0],
            arenas: vec![64],
        };
        let err = execute(&problem, &layout, 1).unwrap_err();
        assert_eq!(
            err,
            ExecError::Corrupt {
                buffer: 0,
                at: "step 2".into(),
                byte: 0,
                found: Some(1)
            },
            "{err}"
        );
        // Read last at the write itself, it is fine.
        problem.lifetimes = Lifetimes::Intervals(vec![(0, 2), (1, 3)]);
        check_layout(&problem, &layout).unwrap();
        let done = execute(&problem, &layout, 1).unwrap();
        // x before y's write; y before and after the writes of step 2 (there are none).
        assert_eq!(done.bytes_checked, 64 + 2 * 32);
    }

    /// Node 0 (stream 0) writes p and e, node 1 (stream 0) reads p, writes r; node 2 (stream
    /// `s`) writes q, node 3 (stream `s`) reads q and e, writes s. The input i is read by
    /// nodes 0 and 2; r and s are outputs.
    fn branches(stream: u32) -> Problem {
        let uses = |producer: Option<usize>, consumers: &[usize], output: bool| Uses {
            producer,
            consumers: consumers.to_vec(),
            output,
        };
        Problem {
            items: vec![
                Item::new(64),                 // 0 i
                Item::new(128).with_align(64), // 1 p
                Item::new(128).with_align(64), // 2 q
                Item::new(16),                 // 3 e
                Item::new(32),                 // 4 r
                Item::new(32),                 // 5 s
            ],
            lifetimes: Lifetimes::Graph(Graph {
                streams: vec![0, 0, stream, stream],
                edges: vec![],
                uses: vec![
                    uses(None, &[0, 2], false),
                    uses(Some(0), &[1], false),
                    uses(Some(2), &[3], false),
                    uses(Some(0), &[3], false),
                    uses(Some(1), &[], true),
                    uses(Some(3), &[], true),
                ],
            }),
            ..Problem::default()
        }
    }

    #[test]
    fn parallel_branches_sharing_bytes_are_caught_by_some_order() {
        let one = branches(0);
        let two = branches(1);
        // Both solved layouts run intact under every order.
        for problem in [&one, &two] {
            let done = execute(problem, &solved(problem), 4).unwrap();
            assert_eq!((done.orders, done.steps), (4, 16));
        }
        // p and q share bytes: right on one stream (p is read before q is written), wrong on
        // two.
        let layout = Layout {
            spaces: vec![0; 6],
            offsets: vec![0, 64, 64, 192, 208, 240],
            arenas: vec![272],
        };
        check_layout(&one, &layout).unwrap();
        assert!(check_layout(&two, &layout).is_err());
        execute(&one, &layout, 4).unwrap();
        // Order 0 runs the nodes in index order, which is safe; order 1 (highest ready first)
        // runs node 2, then node 0 (node 3 waits for e), whose p overwrites q.
        execute(&two, &layout, 1).unwrap();
        let err = execute(&two, &layout, 4).unwrap_err();
        assert_eq!(
            err,
            ExecError::Corrupt {
                buffer: 2,
                at: "node 3 (order 1)".into(),
                byte: 0,
                found: Some(1)
            },
            "{err}"
        );
    }

    #[test]
    fn planned_arena_refuses_a_short_or_misaligned_region() {
        let problem = Problem {
            items: vec![Item::new(100).with_align(16), Item::new(50).with_align(256)],
            lifetimes: Lifetimes::Intervals(vec![(0, 2), (1, 3)]),
            ..Problem::default()
        };
        let layout = solved(&problem);
        let arena = layout.arenas[0];
        // A device address: never dereferenced.
        let base = 0x7f00_0000_0000u64;
        let planned = PlannedArena::new(&problem, &layout, 0, base, arena).unwrap();
        for b in 0..2 {
            let (addr, size) = planned.range(b).unwrap();
            assert!(addr >= base && addr + size <= base + arena);
            assert_eq!(addr % problem.items[b].align, 0);
        }
        assert_eq!(
            PlannedArena::new(&problem, &layout, 0, base, arena - 1),
            Err(ArenaError::TooSmall {
                needed: arena,
                given: arena - 1
            })
        );
        assert_eq!(
            PlannedArena::new(&problem, &layout, 0, base + 128, arena),
            Err(ArenaError::Misaligned { align: 256 })
        );
        assert_eq!(
            PlannedArena::new(&problem, &layout, 1, base, arena),
            Err(ArenaError::WrongLayout)
        );
    }

    #[test]
    fn layouts_that_do_not_fit_are_refused_without_panicking() {
        let problem = Problem {
            items: vec![Item::new(64), Item::new(64)],
            lifetimes: Lifetimes::Intervals(vec![(0, 2), (1, 3)]),
            ..Problem::default()
        };
        let good = solved(&problem);
        let refused =
            |layout: &Layout| matches!(execute(&problem, layout, 1), Err(ExecError::Refused(_)));
        let mut short = good.clone();
        short.offsets.pop();
        assert!(refused(&short));
        let mut spaces = good.clone();
        spaces.arenas.push(0);
        assert!(refused(&spaces));
        let mut elsewhere = good.clone();
        elsewhere.spaces[1] = 3;
        assert!(refused(&elsewhere));
        let mut past = good.clone();
        past.offsets[1] = u64::MAX - 10;
        assert!(refused(&past));
        let mut huge = good.clone();
        huge.arenas[0] = 1 << 40;
        let err = execute(&problem, &huge, 1).unwrap_err();
        assert!(err.to_string().contains("exceed"), "{err}");
        let mut understated = good.clone();
        understated.arenas[0] = 64;
        assert!(refused(&understated));
        // A cycle in a graph, and node indices out of range.
        let cyclic = Problem {
            items: vec![Item::new(8), Item::new(8)],
            lifetimes: Lifetimes::Graph(Graph {
                streams: vec![0, 1],
                edges: vec![(1, 0)],
                uses: vec![
                    Uses {
                        producer: Some(0),
                        consumers: vec![1],
                        output: false,
                    },
                    Uses {
                        producer: Some(1),
                        consumers: vec![7],
                        output: false,
                    },
                ],
            }),
            ..Problem::default()
        };
        let layout = Layout {
            spaces: vec![0, 0],
            offsets: vec![0, 8],
            arenas: vec![16],
        };
        let err = execute(&cyclic, &layout, 2).unwrap_err();
        assert!(err.to_string().contains("node 7"), "{err}");
        let mut cyclic = cyclic;
        if let Lifetimes::Graph(g) = &mut cyclic.lifetimes {
            g.uses[1].consumers = vec![];
        }
        let err = execute(&cyclic, &layout, 2).unwrap_err();
        assert!(err.to_string().contains("cycle"), "{err}");
    }

    /// Every buffer tree moved onto every other buffer (and 8, 16, 64 bytes past it) in the
    /// solved layouts above: what `check_layout` accepts runs intact, and what it refuses is
    /// caught, but for a group member moved out of its place (a rule about where members
    /// go, not about data).
    #[test]
    fn check_layout_and_execution_agree_on_moved_buffers() {
        for problem in [rich_problem(), branches(1), branches(0)] {
            let good = solved(&problem);
            let n = problem.items.len();
            let root = |mut b: usize| {
                while let Some(a) = problem.items[b].alias {
                    b = a.of;
                }
                b
            };
            let mut caught = 0;
            for b in (0..n).filter(|&b| problem.items[b].alias.is_none()) {
                for c in (0..n).filter(|&c| good.spaces[c] == good.spaces[b]) {
                    for shift in [0, 8, 16, 64] {
                        let target = good.offsets[c] + shift;
                        if !target.is_multiple_of(problem.items[b].align) {
                            continue;
                        }
                        let mut layout = good.clone();
                        for d in (0..n).filter(|&d| root(d) == b) {
                            layout.offsets[d] = good.offsets[d] - good.offsets[b] + target;
                        }
                        fix_arenas(&problem, &mut layout);
                        let ran = execute(&problem, &layout, 4);
                        match check_layout(&problem, &layout) {
                            Ok(()) => assert!(ran.is_ok(), "{b} at {target}: {ran:?}"),
                            Err(ProblemError::Misplaced { .. }) => {}
                            Err(e) => {
                                assert!(ran.is_err(), "{b} at {target}: {e:?} missed");
                                caught += 1;
                            }
                        }
                    }
                }
            }
            assert!(caught > 50, "{caught}");
        }
    }
}
