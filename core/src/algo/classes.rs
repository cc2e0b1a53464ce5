//! The free chunks just above the [`Compact`](crate::Compact) shape's lists: segregated lists
//! over size classes, each kept sorted by size, so that the exact best fit is the first chunk
//! of its class that fits.
//!
//! The default shape's speed comes from a list per size (`crate::algo::bins`), two words of state per
//! size; the compact shape cannot afford them above its first lists (its whole static must fit
//! in 1 KiB on a 32-bit target), and tries, which cost no state per size, walk a chunk per
//! level on every filing, taking and search. Here one word per *class* of sizes (the head only:
//! the list is a ring, so its newest end is the head's `Prev`), four classes per power of two
//! from 64 granules, so the sizes of a class differ by less than a quarter. A class holds few
//! chunks at a time, so keeping each list sorted (by size, and among equal sizes by filing
//! order, oldest first) costs a short walk on filing, and buys the rest in `O(1)`: the best fit
//! for a request is the first chunk of its class with enough granules (none if the class's
//! newest end, its largest, is too small), else the head of the next non-empty class, found in
//! a bitmap; the smallest chunk of the table is the first class's head. That is the policy's
//! best fit, oldest first among equals, the same chunk the default's lists and size table give.
//!
//! Link words: `Next` and `Prev` only, the ring (`Next` towards larger sizes and newer chunks;
//! the head's `Prev` is the class's last chunk).

use crate::algo::ring::{ring_init, ring_unlink};
use crate::algo::size_table::{SizeTable, Spot, Table};
use crate::algo::tags::{Link, Tags};

/// The smallest size the classes hold: the first one above the compact shape's lists (64
/// granules; `crate::algo::shape` asserts that they meet).
pub(crate) const FIRST: usize = 65;
/// The largest size the classes hold; above it, the compact shape's tries.
pub(crate) const LAST: usize = (1 << 12) - 1;
/// Classes per power of two, as a power of two.
const SUB_LOG: u32 = 2;
/// The power of two of the first class's sizes.
const FIRST_POW: u32 = usize::BITS - 1 - FIRST.leading_zeros();
/// The number of classes: `2^SUB_LOG` per power of two from `2^FIRST_POW` to `LAST + 1`.
pub(crate) const CLASSES: usize = (((LAST + 1).trailing_zeros() - FIRST_POW) << SUB_LOG) as usize;
/// Words of the class map.
const WORDS: usize = CLASSES.div_ceil(64);
const _: () = assert!((LAST + 1).is_power_of_two() && FIRST_POW >= SUB_LOG && FIRST < LAST);

/// The class of `size` granules (`FIRST..=LAST`): its power of two, and which quarter of it.
#[inline(always)]
pub(crate) const fn class_of(size: usize) -> usize {
    let pow = usize::BITS - 1 - size.leading_zeros();
    let sub = (size >> (pow - SUB_LOG)) & ((1 << SUB_LOG) - 1);
    (((pow - FIRST_POW) << SUB_LOG) as usize) + sub
}

/// The sizes `FIRST..=LAST` of one compact heap's free chunks.
///
/// Invariants (verified by `crate::algo::check`): bit `k % 64` of `map[k / 64]` is set iff
/// `heads[k]` is `Some`; the ring from `heads[k]` holds free chunks of class `k` only, linked
/// both ways, in order of size and among equal sizes of filing (the head the smallest and
/// oldest).
#[repr(C)]
pub struct ClassTable<C> {
    map: [u64; WORDS],
    heads: [Option<C>; CLASSES],
}

impl<C: Copy + Eq + core::fmt::Debug> ClassTable<C> {
    pub const fn new() -> Self {
        ClassTable {
            map: [0; WORDS],
            heads: [None; CLASSES],
        }
    }

    /// The first non-empty class at or above `k`.
    #[inline(always)]
    fn first_from(&self, k: usize) -> Option<usize> {
        let mut w = k / 64;
        if w >= WORDS {
            return None;
        }
        let mut bits = self.map[w] & (u64::MAX << (k % 64));
        loop {
            if bits != 0 {
                return Some(w * 64 + bits.trailing_zeros() as usize);
            }
            w += 1;
            if w >= WORDS {
                return None;
            }
            bits = self.map[w];
        }
    }

    /// Class `k`'s first chunk (the smallest, oldest among equals), and whether the map says
    /// the class is non-empty: for the check.
    pub(crate) fn class(&self, k: usize) -> (Option<C>, bool) {
        (self.heads[k], self.map[k / 64] >> (k % 64) & 1 == 1)
    }

    /// The best fit for `need` granules (`FIRST..=LAST`): the first chunk of `need`'s class
    /// with at least `need` granules, else the first chunk of the next non-empty class.
    #[inline]
    pub(crate) fn best_fit<T: Tags<Chunk = C>>(&self, t: &T, need: usize) -> Option<(C, usize)> {
        let k = class_of(need);
        if let Some(h) = self.heads[k] {
            // The class's last chunk is its largest: if it is too small, all are.
            let last = t.link(h, Link::Prev).unwrap_or(h);
            if t.size(last) >= need {
                let mut n = h;
                loop {
                    let size = t.size(n);
                    if size >= need {
                        return Some((n, size));
                    }
                    n = t.link(n, Link::Next).unwrap_or(last);
                }
            }
        }
        let h = self.heads[self.first_from(k + 1)?]?;
        Some((h, t.size(h)))
    }

    /// Files the free chunk `c` of `size` granules (`FIRST..=LAST`) behind every chunk of its
    /// class that is not larger, found from the class's newest end (so at once when it is the
    /// class's largest).
    #[inline]
    pub(crate) fn insert<T: Tags<Chunk = C>>(&mut self, t: &mut T, c: C, size: usize) {
        let k = class_of(size);
        let Some(h) = self.heads[k] else {
            self.heads[k] = Some(c);
            self.map[k / 64] |= 1 << (k % 64);
            ring_init(t, c);
            return;
        };
        let mut n = t.link(h, Link::Prev).unwrap_or(h);
        let at = loop {
            if t.size(n) <= size {
                break n;
            }
            if n == h {
                // Smaller than every chunk of the class: its new head, after its last.
                self.heads[k] = Some(c);
                break t.link(h, Link::Prev).unwrap_or(h);
            }
            n = t.link(n, Link::Prev).unwrap_or(h);
        };
        let next = t.link(at, Link::Next).unwrap_or(at);
        t.set_link(c, Link::Next, Some(next));
        t.set_link(c, Link::Prev, Some(at));
        t.set_link(at, Link::Next, Some(c));
        t.set_link(next, Link::Prev, Some(c));
    }

    /// Takes the free chunk `c` of `size` granules out of its class.
    #[inline]
    pub(crate) fn remove<T: Tags<Chunk = C>>(&mut self, t: &mut T, c: C, size: usize) {
        let k = class_of(size);
        let next = ring_unlink(t, c);
        if self.heads[k] == Some(c) {
            self.heads[k] = next;
            if next.is_none() {
                self.map[k / 64] &= !(1 << (k % 64));
            }
        }
    }

    /// The smallest chunk, the oldest among equals: the first class's head.
    #[inline(always)]
    pub(crate) fn min<T: Tags<Chunk = C>>(&self, t: &T) -> Option<(C, usize)> {
        let h = self.heads[self.first_from(0)?]?;
        Some((h, t.size(h)))
    }

    /// The largest size held: the last chunk of the last non-empty class.
    pub(crate) fn largest<T: Tags<Chunk = C>>(&self, t: &T) -> Option<usize> {
        let w = (0..WORDS).rev().find(|&w| self.map[w] != 0)?;
        let k = w * 64 + 63 - self.map[w].leading_zeros() as usize;
        let h = self.heads[k]?;
        Some(t.size(t.link(h, Link::Prev).unwrap_or(h)))
    }

    /// Calls `each(chunk, size)` for every chunk of at least `min` granules, by class.
    pub(crate) fn each_at_least<T: Tags<Chunk = C>>(
        &self,
        t: &T,
        min: usize,
        mut each: impl FnMut(C, usize),
    ) {
        let mut k = class_of(min.clamp(FIRST, LAST));
        while let Some(found) = self.first_from(k) {
            let Some(h) = self.heads[found] else { break };
            let mut n = h;
            loop {
                let size = t.size(n);
                if size >= min {
                    each(n, size);
                }
                match t.link(n, Link::Next) {
                    Some(next) if next != h => n = next,
                    _ => break,
                }
            }
            k = found + 1;
        }
    }
}

/// A shape's table as the check sees it: the class table, or none. Apart from [`Table`] so that
/// the size table, which the classes build on, needs nothing of them.
pub trait Classes<C> {
    /// The class table itself, for the check.
    fn classes(&self) -> Option<&ClassTable<C>>;
}

impl<C> Classes<C> for SizeTable<C> {
    fn classes(&self) -> Option<&ClassTable<C>> {
        None
    }
}

impl<C> Classes<C> for ClassTable<C> {
    fn classes(&self) -> Option<&ClassTable<C>> {
        Some(self)
    }
}

#[allow(private_bounds)]
impl<C: Copy + Eq + core::fmt::Debug> Table<C> for ClassTable<C> {
    const EMPTY: Self = ClassTable::new();

    fn sizes(&self) -> Option<&SizeTable<C>> {
        None
    }

    #[inline(always)]
    fn is_empty(&self) -> bool {
        self.map.iter().all(|&w| w == 0)
    }

    #[inline(always)]
    fn min<T: Tags<Chunk = C>>(&self, t: &T) -> Option<(C, usize)> {
        ClassTable::min(self, t)
    }

    #[inline(always)]
    fn best_fit<T: Tags<Chunk = C>>(&self, t: &T, need: usize) -> Option<(C, usize)> {
        ClassTable::best_fit(self, t, need)
    }

    #[inline(always)]
    fn insert<T: Tags<Chunk = C>>(&mut self, t: &mut T, c: C, size: usize) {
        ClassTable::insert(self, t, c, size)
    }

    #[inline(always)]
    fn remove<T: Tags<Chunk = C>>(&mut self, t: &mut T, c: C, size: usize) {
        ClassTable::remove(self, t, c, size)
    }

    /// Takes `c` out at once: a merged or carved chunk is filed again by its size.
    #[inline(always)]
    fn detach<T: Tags<Chunk = C>>(&mut self, t: &mut T, c: C, size: usize) -> Spot<C> {
        ClassTable::remove(self, t, c, size);
        Spot::Gone
    }

    #[inline(always)]
    fn attach<T: Tags<Chunk = C>>(
        &mut self,
        _: &mut T,
        _: C,
        _: usize,
        _: Spot<C>,
        file: Option<(C, usize)>,
    ) -> Option<(C, usize)> {
        file
    }

    fn each_at_least<T: Tags<Chunk = C>>(&self, t: &T, min: usize, each: impl FnMut(C, usize)) {
        ClassTable::each_at_least(self, t, min, each)
    }

    fn largest<T: Tags<Chunk = C>>(&self, t: &T) -> Option<usize> {
        ClassTable::largest(self, t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_are_monotone_and_cover_first_to_last() {
        assert_eq!(class_of(FIRST), 0);
        assert_eq!(class_of(LAST), CLASSES - 1);
        let mut last = 0;
        let mut smallest = FIRST;
        for s in FIRST + 1..=LAST {
            let k = class_of(s);
            assert!(
                k == last || k == last + 1,
                "size {s}: class {k} after {last}"
            );
            if k != last {
                smallest = s;
            }
            // A class's sizes differ by less than a quarter of its smallest.
            assert!(s - smallest < smallest.div_ceil(4), "size {s} in class {k}");
            last = k;
        }
    }
}
