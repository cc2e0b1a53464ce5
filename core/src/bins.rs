//! The 128 free bins and the exact best-fit search.
//!
//! Bins 0–63 each hold exactly one size (1…64 granules) as a FIFO list: the bin array keeps its
//! head (the oldest chunk) and its tail (the newest), and the chunks are linked both ways, so
//! filing touches only the old tail and taking the oldest touches only its successor. Bins
//! 64–127 are tree bins: logarithmic, four sub-bins per power of two, the last one open-ended.
//! Inside a tree bin, the distinct sizes form a bitwise trie on the size's low bits (dlmalloc's
//! tree bins): a node at depth `d` branches on bit `top_bit - d`, so any operation visits at most
//! one node per bit of the size. Chunks whose size is already in the trie join that node's
//! circular ring, behind the older ones, and the node itself is always the oldest of its size.
//! That makes the search exact best fit, oldest first among equals, in `O(bits of a size)` worst
//! case with no scan of a bin. A chunk alone in its tree bin (typically a region's free
//! end) hands its place straight to what replaces it, the rest of an allocation carved from it
//! or a merge that absorbs it, when that stays in the same bin.
//!
//! Two 64-bit maps (one for the exact bins, one for the tree bins) record which bins are
//! non-empty; the next candidate bin is one `trailing_zeros` away.

use crate::tags::{Link, Tags};

/// Number of bins.
pub(crate) const BIN_COUNT: usize = 128;
/// Bins below this index hold exactly one size each.
pub(crate) const EXACT_BINS: usize = 64;
/// Tree sub-bins per power of two (a power of two itself).
const SUB_BINS_LOG2: u32 = 2;
/// The smallest power of two served by the tree bins: `2^6 = 64` granules.
const FIRST_LOG_POW: u32 = 6;

/// The bin that holds free chunks of `size` granules (`size >= 1`). `O(1)`: one
/// `leading_zeros`, a shift and a mask.
#[inline]
pub(crate) const fn bin_of(size: usize) -> usize {
    if size <= EXACT_BINS {
        return size.saturating_sub(1);
    }
    let pow = usize::BITS - 1 - size.leading_zeros();
    let sub = (size >> (pow - SUB_BINS_LOG2)) & ((1 << SUB_BINS_LOG2) - 1);
    let idx = (((pow - FIRST_LOG_POW) << SUB_BINS_LOG2) as usize) + sub;
    if idx >= BIN_COUNT - EXACT_BINS {
        BIN_COUNT - 1
    } else {
        EXACT_BINS + idx
    }
}

/// The smallest size in granules that tree bin `bin` holds (the open-ended last bin
/// holds every size from there on).
#[inline]
const fn log_bin_min(bin: usize) -> usize {
    LOG_BIN_MIN[bin - EXACT_BINS]
}

/// [`log_bin_min`] of every tree bin, computed once.
const LOG_BIN_MIN: [usize; BIN_COUNT - EXACT_BINS] = {
    let mut t = [0; BIN_COUNT - EXACT_BINS];
    let mut idx = 0;
    while idx < t.len() {
        let pow = FIRST_LOG_POW + (idx as u32 >> SUB_BINS_LOG2);
        let sub = idx & ((1 << SUB_BINS_LOG2) - 1);
        let min = ((1 << SUB_BINS_LOG2) + sub) << (pow - SUB_BINS_LOG2);
        // The first bin's range starts at 64, which is the last exact size.
        t[idx] = if min > EXACT_BINS {
            min
        } else {
            EXACT_BINS + 1
        };
        idx += 1;
    }
    t
};

/// The highest size bit on which chunks of tree bin `bin` may differ: the trie's first
/// branching bit. All sizes in the bin agree on every bit above it.
#[inline]
pub(crate) const fn top_bit(bin: usize) -> u32 {
    if bin == BIN_COUNT - 1 {
        usize::BITS - 1
    } else {
        let pow = FIRST_LOG_POW + ((bin - EXACT_BINS) as u32 >> SUB_BINS_LOG2);
        pow - SUB_BINS_LOG2 - 1
    }
}

/// The free bins of one heap.
///
/// Invariants (verified by `crate::check`): bit `b` of `exact` (bit `b − 64` of `log`) is set
/// iff `heads[b]` is `Some`; every chunk reachable from `heads[b]` is free and
/// `bin_of(size) == b`; an exact bin's list runs from `heads[b]` to `tails[b]` with consistent
/// links both ways and one size; a tree bin's trie has consistent parent links, each
/// node's size agrees with its path's bits, its children differ from it, and ring members
/// (marked by `Parent == Some(self)`) have the node's size.
pub(crate) struct Bins<C> {
    exact: u64,
    log: u64,
    /// Exact bins: the oldest chunk; tree bins: the trie's root.
    heads: [Option<C>; BIN_COUNT],
    /// Exact bins only: the newest chunk.
    tails: [Option<C>; EXACT_BINS],
}

impl<C: Copy + Eq + core::fmt::Debug> Bins<C> {
    pub const fn new() -> Self {
        Bins {
            exact: 0,
            log: 0,
            heads: [None; BIN_COUNT],
            tails: [None; EXACT_BINS],
        }
    }

    /// Bin `b`'s oldest chunk (exact bin) or trie root (tree bin).
    pub(crate) fn head(&self, b: usize) -> Option<C> {
        self.heads[b]
    }

    /// Exact bin `b`'s newest chunk.
    pub(crate) fn tail(&self, b: usize) -> Option<C> {
        self.tails[b]
    }

    /// Whether the map says bin `b` is non-empty.
    pub(crate) fn is_marked(&self, b: usize) -> bool {
        if b < EXACT_BINS {
            self.exact >> b & 1 == 1
        } else {
            self.log >> (b - EXACT_BINS) & 1 == 1
        }
    }

    /// Files the free chunk `c` of `size` granules into its bin, behind every older chunk of
    /// its size.
    #[inline]
    pub fn insert<T: Tags<Chunk = C>>(&mut self, t: &mut T, c: C, size: usize) {
        if size <= EXACT_BINS {
            let b = size - 1;
            let tail = self.tails[b];
            t.set_link(c, Link::Next, None);
            t.set_link(c, Link::Prev, tail);
            match tail {
                Some(last) => t.set_link(last, Link::Next, Some(c)),
                None => {
                    self.heads[b] = Some(c);
                    self.exact |= 1 << b;
                }
            }
            self.tails[b] = Some(c);
        } else {
            self.trie_insert(t, c, size);
        }
    }

    /// Files the free chunk `c` of `size` (> 64) granules into its tree bin's trie.
    fn trie_insert<T: Tags<Chunk = C>>(&mut self, t: &mut T, c: C, size: usize) {
        let b = bin_of(size);
        let Some(head) = self.heads[b] else {
            self.heads[b] = Some(c);
            self.log |= 1 << (b - EXACT_BINS);
            ring_init(t, c);
            t.set_link(c, Link::Left, None);
            t.set_link(c, Link::Right, None);
            t.set_link(c, Link::Parent, None);
            return;
        };
        // Walk the trie until the size is found (join its ring) or a free child slot is. The
        // branching bit of each level is the top bit of `bits`.
        let mut node = head;
        let mut bits = size << (usize::BITS - 1 - top_bit(b));
        loop {
            if t.size(node) == size {
                ring_push_back(t, node, c);
                t.set_link(c, Link::Parent, Some(c));
                return;
            }
            let dir = if (bits as isize) < 0 {
                Link::Right
            } else {
                Link::Left
            };
            match t.link(node, dir) {
                Some(child) => node = child,
                None => {
                    t.set_link(node, dir, Some(c));
                    t.set_link(c, Link::Parent, Some(node));
                    t.set_link(c, Link::Left, None);
                    t.set_link(c, Link::Right, None);
                    ring_init(t, c);
                    return;
                }
            }
            // Two distinct sizes of one bin differ at some bit at or below `top_bit`, so the
            // walk stops before it runs out of bits.
            bits <<= 1;
        }
    }

    /// Takes the free chunk `c` of `size` granules out of its bin.
    #[inline]
    pub fn remove<T: Tags<Chunk = C>>(&mut self, t: &mut T, c: C, size: usize) {
        if size <= EXACT_BINS {
            self.list_unlink(t, c, size - 1);
        } else {
            self.trie_unlink(t, c, bin_of(size));
        }
    }

    /// Takes `c` out of exact bin `b`'s list.
    #[inline(always)]
    fn list_unlink<T: Tags<Chunk = C>>(&mut self, t: &mut T, c: C, b: usize) {
        let next = t.link(c, Link::Next);
        let prev = t.link(c, Link::Prev);
        match prev {
            Some(p) => t.set_link(p, Link::Next, next),
            None => self.heads[b] = next,
        }
        match next {
            Some(n) => t.set_link(n, Link::Prev, prev),
            None => self.tails[b] = prev,
        }
        if prev.is_none() && next.is_none() {
            self.exact &= !(1 << b);
        }
    }

    /// Takes the oldest chunk out of the non-empty exact bin `b`.
    #[inline]
    fn pop_oldest<T: Tags<Chunk = C>>(&mut self, t: &mut T, b: usize) -> Option<C> {
        let c = self.heads[b]?;
        let next = t.link(c, Link::Next);
        self.heads[b] = next;
        match next {
            Some(n) => t.set_link(n, Link::Prev, None),
            None => {
                self.tails[b] = None;
                self.exact &= !(1 << b);
            }
        }
        Some(c)
    }

    /// Takes the free chunk `c` out of tree bin `b`, which must be its bin. A trie node
    /// is replaced by the next-oldest chunk of its size, or else by a leaf of its subtree: any
    /// chunk of the subtree agrees with the node's path, so it may stand where the node stood.
    fn trie_unlink<T: Tags<Chunk = C>>(&mut self, t: &mut T, c: C, b: usize) {
        let parent = t.link(c, Link::Parent);
        if parent == Some(c) {
            // A ring member behind a trie node: the trie does not change.
            ring_unlink(t, c);
            return;
        }
        let left = t.link(c, Link::Left);
        let right = t.link(c, Link::Right);
        let replacement = match ring_unlink(t, c) {
            Some(r) => Some(r),
            None => match right.or(left) {
                None => None,
                Some(mut r) => {
                    // Descend to a leaf, preferring right children, and detach it.
                    while let Some(n) = t.link(r, Link::Right).or_else(|| t.link(r, Link::Left)) {
                        r = n;
                    }
                    let p = t.link(r, Link::Parent).unwrap_or(r);
                    let side = if t.link(p, Link::Right) == Some(r) {
                        Link::Right
                    } else {
                        Link::Left
                    };
                    t.set_link(p, side, None);
                    Some(r)
                }
            },
        };
        match parent {
            None => {
                self.heads[b] = replacement;
                if replacement.is_none() {
                    self.log &= !(1 << (b - EXACT_BINS));
                }
            }
            Some(p) => {
                let side = if t.link(p, Link::Left) == Some(c) {
                    Link::Left
                } else {
                    Link::Right
                };
                t.set_link(p, side, replacement);
            }
        }
        if let Some(r) = replacement {
            t.set_link(r, Link::Parent, parent);
            // `c`'s child may have been the detached leaf itself; it is gone from there.
            for (side, child) in [(Link::Left, left), (Link::Right, right)] {
                let child = child.filter(|&ch| ch != r);
                t.set_link(r, side, child);
                if let Some(ch) = child {
                    t.set_link(ch, Link::Parent, Some(r));
                }
            }
        }
    }

    /// Takes the best-fitting free chunk for `need` granules (`need >= 1`) out of its bin: the
    /// smallest chunk of at least `need`, oldest among equals. Hands it and its size to `carve`,
    /// then files the free rest that `carve` returns (chunk and size, at most the taken size),
    /// if any. Returns the chunk taken with its size; `None` if no chunk is large enough.
    ///
    /// The same as taking the chunk out and filing the rest, but a chunk alone in its
    /// tree bin (typically a region's free end) whose rest stays in that bin is replaced
    /// by the rest in place: neither the map nor a second search is touched.
    #[inline]
    pub fn take_best<T, F>(&mut self, t: &mut T, need: usize, carve: F) -> Option<(C, usize)>
    where
        T: Tags<Chunk = C>,
        F: FnOnce(&mut T, C, usize) -> Option<(C, usize)>,
    {
        if need <= EXACT_BINS {
            // Exact bins at or above `need` hold one size each: the lowest non-empty one holds
            // the smallest chunks that fit, and its head is the oldest of them.
            let fits = self.exact & (u64::MAX << (need - 1));
            if fits != 0 {
                let b = fits.trailing_zeros() as usize;
                let c = self.pop_oldest(t, b)?;
                if let Some((rest, size)) = carve(t, c, b + 1) {
                    self.insert(t, rest, size);
                }
                return Some((c, b + 1));
            }
            return self.take_smallest_log(t, 0, carve);
        }
        let b = bin_of(need);
        if let Some((c, size)) = self.trie_best_fit(t, b, need) {
            self.take_log(t, b, c, size, carve);
            return Some((c, size));
        }
        // Every chunk of a higher bin is larger than `need`: take the smallest there.
        self.take_smallest_log(t, b + 1 - EXACT_BINS, carve)
    }

    /// [`Bins::take_best`] from the lowest non-empty tree bin from `64 + from` on: its
    /// smallest chunk, oldest among equals.
    #[inline]
    fn take_smallest_log<T, F>(&mut self, t: &mut T, from: usize, carve: F) -> Option<(C, usize)>
    where
        T: Tags<Chunk = C>,
        F: FnOnce(&mut T, C, usize) -> Option<(C, usize)>,
    {
        let above = self.log & u64::MAX.checked_shl(from as u32).unwrap_or(0);
        if above == 0 {
            return None;
        }
        let b = EXACT_BINS + above.trailing_zeros() as usize;
        let (c, size) = smallest(t, self.heads[b]?);
        self.take_log(t, b, c, size, carve);
        Some((c, size))
    }

    /// Takes `c` of `size` granules out of tree bin `b`, carves it, and files the rest:
    /// in `c`'s place when `c` was alone in the bin and the rest stays in it.
    #[inline(always)]
    fn take_log<T, F>(&mut self, t: &mut T, b: usize, c: C, size: usize, carve: F)
    where
        T: Tags<Chunk = C>,
        F: FnOnce(&mut T, C, usize) -> Option<(C, usize)>,
    {
        if self.heads[b] == Some(c) && is_lone_root(t, c) {
            // Nothing links to `c` but the bin: carving may overwrite its links.
            match carve(t, c, size) {
                Some((rest, rsize)) if rsize >= log_bin_min(b) => self.set_lone_root(t, b, rest),
                other => {
                    self.heads[b] = None;
                    self.log &= !(1 << (b - EXACT_BINS));
                    if let Some((rest, rsize)) = other {
                        self.insert(t, rest, rsize);
                    }
                }
            }
        } else {
            self.trie_unlink(t, c, b);
            if let Some((rest, rsize)) = carve(t, c, size) {
                self.insert(t, rest, rsize);
            }
        }
    }

    /// Takes the free chunk `old` of `old_size` granules out of its bin, calls `merge` (which
    /// writes the tags of a free chunk of `new_size >= old_size` granules that absorbs `old`,
    /// and returns it), and files the merged chunk. The same as [`Bins::remove`], `merge` and
    /// [`Bins::insert`], but when `old` was alone in its tree bin and the merged chunk
    /// stays in it, the merged chunk takes its place directly.
    #[inline]
    pub fn merge_into<T, F>(
        &mut self,
        t: &mut T,
        old: C,
        old_size: usize,
        new_size: usize,
        merge: F,
    ) -> C
    where
        T: Tags<Chunk = C>,
        F: FnOnce(&mut T) -> C,
    {
        if old_size > EXACT_BINS {
            let b = bin_of(old_size);
            if self.heads[b] == Some(old)
                && is_lone_root(t, old)
                && (b == BIN_COUNT - 1 || new_size < log_bin_min(b + 1))
            {
                let m = merge(t);
                self.set_lone_root(t, b, m);
                return m;
            }
            self.trie_unlink(t, old, b);
        } else {
            self.list_unlink(t, old, old_size - 1);
        }
        let m = merge(t);
        self.insert(t, m, new_size);
        m
    }

    /// Makes `c` the only chunk of tree bin `b`, whose map bit is already set.
    #[inline]
    fn set_lone_root<T: Tags<Chunk = C>>(&mut self, t: &mut T, b: usize, c: C) {
        self.heads[b] = Some(c);
        ring_init(t, c);
        t.set_link(c, Link::Left, None);
        t.set_link(c, Link::Right, None);
        t.set_link(c, Link::Parent, None);
    }

    /// The smallest trie node of bin `b` with at least `need` granules, with its size.
    fn trie_best_fit<T: Tags<Chunk = C>>(
        &self,
        t: &T,
        b: usize,
        need: usize,
    ) -> Option<(C, usize)> {
        // The best so far; `None` until a node fits (no size is a sentinel: a chunk may be
        // `usize::MAX` granules long).
        let mut best: Option<(C, usize)> = None;
        let better = |best: Option<(C, usize)>, size: usize| best.is_none_or(|(_, s)| size < s);
        // Follow `need`'s bits (the top bit of `bits` at each level; zeros once they run out).
        // A right subtree passed by while going left holds only sizes above `need`; the
        // deepest such subtree holds the smallest of them.
        let mut node = self.heads[b];
        let mut larger = None;
        let mut bits = need << (usize::BITS - 1 - top_bit(b));
        while let Some(n) = node {
            let size = t.size(n);
            if size >= need && better(best, size) {
                best = Some((n, size));
                if size == need {
                    return best;
                }
            }
            let right = t.link(n, Link::Right);
            node = if (bits as isize) < 0 {
                right
            } else {
                t.link(n, Link::Left)
            };
            if right.is_some() && right != node {
                larger = right;
            }
            bits <<= 1;
        }
        // The smallest size of a subtree lies on its leftmost path.
        let mut node = larger;
        while let Some(n) = node {
            let size = t.size(n);
            if better(best, size) {
                best = Some((n, size));
            }
            node = t.link(n, Link::Left).or_else(|| t.link(n, Link::Right));
        }
        best
    }

    /// Calls `each(chunk, size)` for every free chunk of at least `min` granules (`min ≥ 1`),
    /// walking only the bins that can hold one: `O(such chunks + bins)`, not a walk of every
    /// chunk. The order is by bin, not by address.
    pub fn each_at_least<T: Tags<Chunk = C>>(
        &self,
        t: &T,
        min: usize,
        mut each: impl FnMut(C, usize),
    ) {
        let first = bin_of(min);
        for b in first..BIN_COUNT {
            let Some(head) = self.heads[b] else { continue };
            if b < EXACT_BINS {
                let mut c = Some(head);
                while let Some(ch) = c {
                    each(ch, b + 1);
                    c = t.link(ch, Link::Next);
                }
                continue;
            }
            // Depth-first over the trie (its depth is bounded by the bits of a size), each
            // node's ring with it.
            const DEPTH: usize = 2 * usize::BITS as usize + 2;
            let mut stack: [Option<C>; DEPTH] = [None; DEPTH];
            stack[0] = Some(head);
            let mut top = 1;
            while top > 0 {
                top -= 1;
                let Some(n) = stack[top] else { continue };
                let size = t.size(n);
                if size >= min {
                    let mut r = n;
                    loop {
                        each(r, size);
                        match t.link(r, Link::Next) {
                            Some(next) if next != n => r = next,
                            _ => break,
                        }
                    }
                }
                for side in [Link::Left, Link::Right] {
                    if let Some(child) = t.link(n, side) {
                        if top < DEPTH {
                            stack[top] = Some(child);
                            top += 1;
                        }
                    }
                }
            }
        }
    }

    /// The size in granules of the largest free chunk, if any.
    pub fn largest<T: Tags<Chunk = C>>(&self, t: &T) -> Option<usize> {
        if self.log != 0 {
            let b = EXACT_BINS + 63 - self.log.leading_zeros() as usize;
            let head = self.heads[b]?;
            Some(largest_size(t, head))
        } else if self.exact != 0 {
            Some(64 - self.exact.leading_zeros() as usize)
        } else {
            None
        }
    }
}

/// Whether the trie root `c` is its bin's only chunk: no children, no ring.
#[inline]
fn is_lone_root<T: Tags>(t: &T, c: T::Chunk) -> bool {
    t.link(c, Link::Left).is_none()
        && t.link(c, Link::Right).is_none()
        && t.link(c, Link::Next) == Some(c)
}

/// The smallest node of the trie under `c` (the oldest of its size), with its size: it lies
/// on the leftmost path.
#[inline]
fn smallest<T: Tags>(t: &T, c: T::Chunk) -> (T::Chunk, usize) {
    let mut best = (c, t.size(c));
    let mut node = t.link(c, Link::Left).or_else(|| t.link(c, Link::Right));
    while let Some(n) = node {
        let size = t.size(n);
        if size < best.1 {
            best = (n, size);
        }
        node = t.link(n, Link::Left).or_else(|| t.link(n, Link::Right));
    }
    best
}

/// The largest size in the trie under `c`: it lies on the rightmost path.
fn largest_size<T: Tags>(t: &T, c: T::Chunk) -> usize {
    let mut best = t.size(c);
    let mut node = t.link(c, Link::Right).or_else(|| t.link(c, Link::Left));
    while let Some(n) = node {
        best = best.max(t.size(n));
        node = t.link(n, Link::Right).or_else(|| t.link(n, Link::Left));
    }
    best
}

fn ring_init<T: Tags>(t: &mut T, c: T::Chunk) {
    t.set_link(c, Link::Next, Some(c));
    t.set_link(c, Link::Prev, Some(c));
}

/// Appends `c` to the ring headed by `head` (the ring's oldest end).
fn ring_push_back<T: Tags>(t: &mut T, head: T::Chunk, c: T::Chunk) {
    let tail = t.link(head, Link::Prev).unwrap_or(head);
    t.set_link(c, Link::Next, Some(head));
    t.set_link(c, Link::Prev, Some(tail));
    t.set_link(tail, Link::Next, Some(c));
    t.set_link(head, Link::Prev, Some(c));
}

/// Unlinks `c` from its ring; returns the chunk after it, or `None` if `c` was alone.
fn ring_unlink<T: Tags>(t: &mut T, c: T::Chunk) -> Option<T::Chunk> {
    let next = t.link(c, Link::Next).unwrap_or(c);
    if next == c {
        return None;
    }
    let prev = t.link(c, Link::Prev).unwrap_or(c);
    t.set_link(prev, Link::Next, Some(next));
    t.set_link(next, Link::Prev, Some(prev));
    Some(next)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_bins_hold_one_size_each() {
        for s in 1..=64 {
            assert_eq!(bin_of(s), s - 1);
        }
    }

    #[test]
    fn log_bins_are_monotone_and_cover_all_sizes() {
        let mut last = bin_of(65);
        assert_eq!(last, EXACT_BINS);
        let mut s = 65usize;
        while s < 1 << 30 {
            let b = bin_of(s);
            assert!(b == last || b == last + 1, "size {s}: bin {b} after {last}");
            last = b;
            s += 1 + s / 64;
        }
        assert_eq!(bin_of(usize::MAX), BIN_COUNT - 1);
        assert_eq!(bin_of(1 << 40), BIN_COUNT - 1);
    }

    #[test]
    fn log_bin_min_is_the_first_size_of_each_bin() {
        for b in EXACT_BINS..BIN_COUNT {
            let min = log_bin_min(b);
            assert_eq!(bin_of(min), b, "bin {b}");
            assert_eq!(bin_of(min - 1), b - 1, "bin {b}");
        }
    }

    #[test]
    fn sizes_of_a_log_bin_agree_above_its_top_bit() {
        let limit = if cfg!(miri) { 5_000 } else { 1 << 22 };
        // Each size shares every bit above the bin's top bit with the bin's first size.
        let mut first = 65usize;
        for s in 65usize..limit {
            let b = bin_of(s);
            if b == BIN_COUNT - 1 {
                break;
            }
            if b != bin_of(first) {
                first = s;
            }
            let tb = top_bit(b);
            assert_eq!(s >> (tb + 1), first >> (tb + 1), "size {s} bin {b}");
        }
    }
}
