//! The 128 free bins and the exact best-fit search.
//!
//! Bins 0–63 each hold exactly one size (1…64 granules) as a circular FIFO ring, so the head is
//! always the oldest chunk of that size. Bins 64–127 are logarithmic: four sub-bins per power of
//! two, the last one open-ended. Inside a logarithmic bin, the distinct sizes form a bitwise trie
//! on the size's low bits (dlmalloc's tree bins): a node at depth `d` branches on bit
//! `top_bit - d`, so any operation visits at most one node per bit of the size. Chunks whose size
//! is already in the trie join that node's ring, behind the older ones, and the node itself is
//! always the oldest of its size. That makes the search exact best fit, oldest first among
//! equals, in `O(bits of a size)` worst case with no scan of a bin.
//!
//! A 128-bit map records which bins are non-empty; the next candidate bin is one
//! `trailing_zeros` away.

use crate::error::CheckError;
use crate::tags::{Link, Tags};

/// Number of bins.
pub const BIN_COUNT: usize = 128;
/// Bins below this index hold exactly one size each.
pub const EXACT_BINS: usize = 64;
/// Logarithmic sub-bins per power of two (a power of two itself).
const SUB_BINS_LOG2: u32 = 2;
/// The smallest power of two served by the logarithmic bins: `2^6 = 64` granules.
const FIRST_LOG_POW: u32 = 6;

/// The bin that holds free chunks of `size` granules (`size >= 1`). `O(1)`: one
/// `leading_zeros`, a shift and a mask.
#[inline]
pub const fn bin_of(size: usize) -> usize {
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

/// The highest size bit on which chunks of logarithmic bin `bin` may differ: the trie's first
/// branching bit. All sizes in the bin agree on every bit above it.
#[inline]
const fn top_bit(bin: usize) -> u32 {
    if bin == BIN_COUNT - 1 {
        usize::BITS - 1
    } else {
        let pow = FIRST_LOG_POW + ((bin - EXACT_BINS) as u32 >> SUB_BINS_LOG2);
        pow - SUB_BINS_LOG2 - 1
    }
}

/// The free bins of one heap.
///
/// Invariants (verified by [`Bins::check`]): bit `b` of `map` is set iff `heads[b]` is `Some`;
/// every chunk reachable from `heads[b]` is free and `bin_of(size) == b`; exact bins hold one
/// size in a consistent circular ring; a logarithmic bin's trie has consistent parent links,
/// each node's size agrees with its path's bits, its children differ from it, and ring members
/// (marked by `Parent == Some(self)`) have the node's size.
pub(crate) struct Bins<C> {
    map: u128,
    heads: [Option<C>; BIN_COUNT],
}

impl<C: Copy + Eq + core::fmt::Debug> Bins<C> {
    pub const fn new() -> Self {
        Bins {
            map: 0,
            heads: [None; BIN_COUNT],
        }
    }

    /// Files the free chunk `c` into its bin.
    pub fn insert<T: Tags<Chunk = C>>(&mut self, t: &mut T, c: C) {
        let size = t.size(c);
        let b = bin_of(size);
        self.map |= 1 << b;
        let Some(head) = self.heads[b] else {
            self.heads[b] = Some(c);
            ring_init(t, c);
            if b >= EXACT_BINS {
                t.set_link(c, Link::Left, None);
                t.set_link(c, Link::Right, None);
                t.set_link(c, Link::Parent, None);
            }
            return;
        };
        if b < EXACT_BINS {
            ring_push_back(t, head, c);
            return;
        }
        // Walk the trie until the size is found (join its ring) or a free child slot is.
        let mut node = head;
        let mut bit = top_bit(b);
        loop {
            if t.size(node) == size {
                ring_push_back(t, node, c);
                t.set_link(c, Link::Parent, Some(c));
                return;
            }
            let dir = if bit_set(size, bit) {
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
            bit = bit.wrapping_sub(1);
        }
    }

    /// Takes the free chunk `c` out of its bin.
    #[inline]
    pub fn remove<T: Tags<Chunk = C>>(&mut self, t: &mut T, c: C) {
        self.remove_from(t, c, bin_of(t.size(c)));
    }

    /// Takes the free chunk `c` out of bin `b`, which must be its bin.
    #[inline]
    fn remove_from<T: Tags<Chunk = C>>(&mut self, t: &mut T, c: C, b: usize) {
        if b < EXACT_BINS {
            let rest = ring_unlink(t, c);
            if self.heads[b] == Some(c) {
                self.heads[b] = rest;
            }
        } else if t.link(c, Link::Parent) == Some(c) {
            // A ring member behind a trie node: the trie does not change.
            ring_unlink(t, c);
        } else {
            self.trie_remove(t, b, c);
        }
        if self.heads[b].is_none() {
            self.map &= !(1 << b);
        }
    }

    /// Removes trie node `x`, putting the next-oldest chunk of its size, or else a leaf of its
    /// subtree, in its place. Any chunk of `x`'s subtree agrees with `x`'s path, so it may stand
    /// where `x` stood.
    fn trie_remove<T: Tags<Chunk = C>>(&mut self, t: &mut T, b: usize, x: C) {
        let replacement = match ring_unlink(t, x) {
            Some(r) => Some(r),
            None => {
                // Descend to a leaf, preferring right children, and detach it.
                let mut leaf = t.link(x, Link::Right).or_else(|| t.link(x, Link::Left));
                if let Some(mut r) = leaf {
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
                    leaf = Some(r);
                }
                leaf
            }
        };
        let parent = t.link(x, Link::Parent);
        match parent {
            None => self.heads[b] = replacement,
            Some(p) => {
                let side = if t.link(p, Link::Left) == Some(x) {
                    Link::Left
                } else {
                    Link::Right
                };
                t.set_link(p, side, replacement);
            }
        }
        if let Some(r) = replacement {
            t.set_link(r, Link::Parent, parent);
            for side in [Link::Left, Link::Right] {
                // `x`'s child may have been the detached leaf itself; it is gone from there.
                let child = t.link(x, side).filter(|&ch| ch != r);
                t.set_link(r, side, child);
                if let Some(ch) = child {
                    t.set_link(ch, Link::Parent, Some(r));
                }
            }
        }
    }

    /// Takes the best-fitting free chunk for `need` granules out of its bin: the smallest
    /// chunk of at least `need`, oldest among equals. `None` if no chunk is large enough.
    pub fn take_best<T: Tags<Chunk = C>>(&mut self, t: &mut T, need: usize) -> Option<C> {
        let b = bin_of(need);
        let found = if b < EXACT_BINS {
            self.heads[b]
        } else {
            self.trie_best_fit(t, b, need)
        };
        let (c, bin) = match found {
            Some(c) => (c, b),
            None => {
                // Every chunk of a higher bin is larger than `need`: take the smallest there.
                let above = self.map & (u128::MAX.checked_shl(b as u32 + 1).unwrap_or(0));
                if above == 0 {
                    return None;
                }
                let nb = above.trailing_zeros() as usize;
                let head = self.heads[nb]?;
                if nb < EXACT_BINS {
                    (head, nb)
                } else {
                    (extreme(t, head, Link::Left, |a, b| a < b), nb)
                }
            }
        };
        self.remove_from(t, c, bin);
        Some(c)
    }

    /// The smallest trie node of bin `b` with at least `need` granules.
    fn trie_best_fit<T: Tags<Chunk = C>>(&self, t: &T, b: usize, need: usize) -> Option<C> {
        let mut best: Option<(C, usize)> = None;
        let consider = |c: C, best: &mut Option<(C, usize)>| {
            let size = t.size(c);
            if size >= need && best.is_none_or(|(_, s)| size < s) {
                *best = Some((c, size));
            }
        };
        // Follow `need`'s bits. A right subtree passed by while going left holds only sizes
        // above `need`; the deepest such subtree holds the smallest of them.
        let mut node = self.heads[b];
        let mut larger = None;
        let mut bit = top_bit(b);
        while let Some(n) = node {
            consider(n, &mut best);
            if best.is_some_and(|(_, s)| s == need) {
                return best.map(|(c, _)| c);
            }
            let right = t.link(n, Link::Right);
            node = if bit_set(need, bit) {
                right
            } else {
                t.link(n, Link::Left)
            };
            if right.is_some() && right != node {
                larger = right;
            }
            bit = bit.wrapping_sub(1);
        }
        // The smallest size of a subtree lies on its leftmost path.
        let mut node = larger;
        while let Some(n) = node {
            consider(n, &mut best);
            node = t.link(n, Link::Left).or_else(|| t.link(n, Link::Right));
        }
        best.map(|(c, _)| c)
    }

    /// The size in granules of the largest free chunk, if any.
    pub fn largest<T: Tags<Chunk = C>>(&self, t: &T) -> Option<usize> {
        if self.map == 0 {
            return None;
        }
        let b = 127 - self.map.leading_zeros() as usize;
        let head = self.heads[b]?;
        Some(if b < EXACT_BINS {
            t.size(head)
        } else {
            t.size(extreme(t, head, Link::Right, |a, b| a > b))
        })
    }

    /// Verifies every bin invariant; returns the number of free chunks filed and their total
    /// size in granules.
    pub fn check<T: Tags<Chunk = C>>(
        &self,
        t: &T,
        addr: impl Fn(C) -> usize,
        limit: usize,
    ) -> Result<(usize, usize), CheckError> {
        let mut count = 0usize;
        let mut granules = 0usize;
        for b in 0..BIN_COUNT {
            let head = self.heads[b];
            if head.is_some() != (self.map >> b & 1 == 1) {
                let at = head.map_or(0, &addr);
                return Err(CheckError::new("bin bitmap disagrees with bin", at));
            }
            let Some(head) = head else { continue };
            let mut check_one = |c: C| -> Result<(), CheckError> {
                if !t.is_free(c) {
                    return Err(CheckError::new("chunk in a bin is not free", addr(c)));
                }
                if bin_of(t.size(c)) != b {
                    return Err(CheckError::new("free chunk in the wrong bin", addr(c)));
                }
                count += 1;
                granules += t.size(c);
                if count > limit {
                    return Err(CheckError::new(
                        "more chunks in bins than free chunks",
                        addr(c),
                    ));
                }
                Ok(())
            };
            if b < EXACT_BINS {
                check_ring(t, head, &addr, limit, &mut check_one)?;
            } else {
                if t.link(head, Link::Parent).is_some() {
                    return Err(CheckError::new("trie root has a parent", addr(head)));
                }
                check_trie(t, head, top_bit(b), &addr, limit, &mut check_one)?;
            }
        }
        Ok((count, granules))
    }
}

/// Bit `bit` of `size`; bits past the word (a walk that ran out of bits) read as zero.
#[inline]
fn bit_set(size: usize, bit: u32) -> bool {
    size.checked_shr(bit).unwrap_or(0) & 1 == 1
}

/// Walks from `c` along `dir` (falling back to the other child) and returns the node whose
/// size wins `better`: the smallest on the leftmost path, or the largest on the rightmost.
fn extreme<T: Tags>(
    t: &T,
    c: T::Chunk,
    dir: Link,
    better: impl Fn(usize, usize) -> bool,
) -> T::Chunk {
    let other = if dir == Link::Left {
        Link::Right
    } else {
        Link::Left
    };
    let mut best = c;
    let mut node = Some(c);
    while let Some(n) = node {
        if better(t.size(n), t.size(best)) {
            best = n;
        }
        node = t.link(n, dir).or_else(|| t.link(n, other));
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

/// Checks a ring's links both ways and calls `each` on every member.
fn check_ring<T: Tags>(
    t: &T,
    head: T::Chunk,
    addr: &impl Fn(T::Chunk) -> usize,
    limit: usize,
    each: &mut impl FnMut(T::Chunk) -> Result<(), CheckError>,
) -> Result<(), CheckError> {
    let size = t.size(head);
    let mut c = head;
    for _ in 0..=limit {
        each(c)?;
        if t.size(c) != size {
            return Err(CheckError::new(
                "ring holds chunks of different sizes",
                addr(c),
            ));
        }
        let next = t
            .link(c, Link::Next)
            .ok_or(CheckError::new("ring link missing", addr(c)))?;
        if t.link(next, Link::Prev) != Some(c) {
            return Err(CheckError::new("ring links disagree", addr(c)));
        }
        if next == head {
            return Ok(());
        }
        c = next;
    }
    Err(CheckError::new("ring does not close", addr(head)))
}

/// Checks the trie under `node` (which branches on `bit`): sizes agree with the path, parent
/// links agree with child links, rings hang only off nodes.
fn check_trie<T: Tags>(
    t: &T,
    node: T::Chunk,
    bit: u32,
    addr: &impl Fn(T::Chunk) -> usize,
    limit: usize,
    each: &mut impl FnMut(T::Chunk) -> Result<(), CheckError>,
) -> Result<(), CheckError> {
    // Iterative depth-first walk; depth is bounded by the bits of a size (plus one level for
    // a child of a bit-0 node, marked by `bit` wrapping to `u32::MAX`, which may have none).
    const DEPTH: usize = 2 * usize::BITS as usize + 2;
    let mut stack: [(Option<T::Chunk>, u32, usize); DEPTH] = [(None, 0, 0); DEPTH];
    let mut top = 1;
    stack[0] = (Some(node), bit, t.size(node));
    while top > 0 {
        top -= 1;
        let (Some(n), bit, prefix) = stack[top] else {
            continue;
        };
        // `prefix` is the parent's size: all bits above the parent's branching bit agree.
        let size = t.size(n);
        let shift = bit.wrapping_add(2);
        if size.checked_shr(shift) != prefix.checked_shr(shift) {
            return Err(CheckError::new("trie node off its path's bits", addr(n)));
        }
        check_ring(t, n, addr, limit, &mut |c| {
            if c != n && t.link(c, Link::Parent) != Some(c) {
                return Err(CheckError::new("ring member not marked as such", addr(c)));
            }
            each(c)
        })?;
        for (side, want) in [(Link::Left, false), (Link::Right, true)] {
            let Some(child) = t.link(n, side) else {
                continue;
            };
            if bit == u32::MAX || top + 1 >= DEPTH {
                return Err(CheckError::new(
                    "trie deeper than a size's bits",
                    addr(child),
                ));
            }
            if t.link(child, Link::Parent) != Some(n) {
                return Err(CheckError::new("trie parent link disagrees", addr(child)));
            }
            let csize = t.size(child);
            if bit_set(csize, bit) != want || csize == size {
                return Err(CheckError::new("trie child on the wrong side", addr(child)));
            }
            stack[top] = (Some(child), bit.wrapping_sub(1), size);
            top += 1;
        }
    }
    Ok(())
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
