//! The free chunks of the sizes just above the lists: a bitmap over sizes for the best fit, and
//! the oldest chunk of each size found through a small hash table.
//!
//! The lists (see `crate::algo::bins`) give every size its own pair of ends in the heap's state,
//! which is what makes them `O(1)`, and what stops them at 2047 granules: each further size
//! would cost 16 bytes whether it occurs or not. Above them, a bitwise trie costs no state per
//! size but visits a chunk, often a cache miss, per level, on every filing, taking and search:
//! on large random actions those walks were most of the free's gap to talc's (figures:
//! `docs/measurements.md#size_tablers-why-a-size-table`).
//!
//! This table serves the sizes from `FIRST` to `LAST` granules (32 KiB to 256 KiB at the
//! host granule) with neither: one bit per size says which sizes have a free chunk, so the
//! smallest size at or above a request is found in the bitmap (three levels of
//! `trailing_zeros`, all in the heap's state), and the oldest chunk of a size is found in the
//! chain of its map word (a hash of the size: its 64 sizes share it). Each chain links the
//! oldest chunk of each of its sizes (its *head*), and each head carries a FIFO ring of the
//! younger chunks of its size, exactly as a trie node does. Few distinct sizes this large are
//! free at once (each is at least 32 KiB), so a chain is usually empty or one head long, and
//! filing a chunk of a new size touches at most the chain's first head. The state is 4 KiB,
//! against the 224 KiB that lists for these sizes would take.
//!
//! Two cases are kept cheap because programs dwell in them. The smallest chunk is cached
//! (`min`), so a listed request that no list serves, which takes it, needs no search. And a
//! table that holds a single chunk keeps it there alone, outside the map and the chains and
//! with its links unwritten, so that carving it again and again, or merging into it, only
//! renames it, as a trie's lone root is replaced in place; real traces dwell there (figures:
//! `docs/measurements.md#size_tablers-a-single-chunk-kept-alone`). With more chunks, a carve or
//! merge that keeps a chunk's size within its map word still replaces it in place
//! ([`SizeTable::detach`]).
//!
//! Link words: `Next` and `Prev` are the ring (a head's `Next` is the oldest of the rest);
//! `Left` and `Right` are a head's neighbours in its chain (towards the bucket and away from
//! it); `Parent` is `None` for a head and the chunk itself for a ring member, as in the tries.

use crate::algo::bin_index::LIST_SIZES;
use crate::algo::ring::{ring_each, ring_init, ring_push_back, ring_unlink};
use crate::algo::tags::{Link, Tags};

/// The smallest size the table holds: the first one above the lists.
pub(crate) const FIRST: usize = LIST_SIZES + 1;
/// The largest size the table holds; above it, the tries (from tree bin 96).
pub(crate) const LAST: usize = (1 << 14) - 1;
/// Words of the size map (bit `s % 64` of word `s / 64`: size `s`). The map starts at size 0,
/// so that a size is its own index and `WORDS` a power of two, masks that need no bounds check;
/// the 32 words of listed sizes are always zero.
const WORDS: usize = (LAST + 1) / 64;
/// Words of the summary (bit `w`: word `w` of the map is non-zero).
pub(crate) const SUMMARY_WORDS: usize = WORDS.div_ceil(64);
/// Chains of heads: one per word of the map (the 32 of the listed sizes unused).
const BUCKETS: usize = WORDS;
const _: () = assert!(
    SUMMARY_WORDS <= 64
        && SUMMARY_WORDS.is_power_of_two()
        && WORDS.is_power_of_two()
        && BUCKETS.is_power_of_two()
        && (LAST + 1).is_multiple_of(64)
);

/// The sizes `FIRST..=LAST` of one heap's free chunks.
///
/// Invariants (verified by `crate::algo::check`): bit `w` of `top` is set iff `summary[w] != 0`,
/// bit `v` of `summary[w]` iff `map[64 w + v] != 0`; bit `s` of the map is set iff one head of
/// size `s` is in chain `s / 64` (so no bit below `FIRST` is), and no chain holds two heads
/// of one size or a head of another chain; chains are linked both ways (`Left` of a chain's
/// first head is `None`), every head's `Parent` is `None`, and its ring holds free chunks of its
/// size only, each with `Parent` pointing to itself; `min` is the head of the smallest size
/// marked, with that size, and `None` iff the map is empty. When `lone` is set, the map, the
/// summaries and the chains are empty instead, and `min` is the table's only chunk.
#[repr(C)]
pub struct SizeTable<C> {
    /// The smallest chunk, oldest among equals, and its size (0 when there is none): the
    /// answer for any request up to that size without a walk of the map's levels.
    min: Option<C>,
    min_size: usize,
    /// Whether `min` is the table's only chunk, kept outside the map and the chains with its
    /// links unwritten (see [`SizeTable::detach`]).
    lone: bool,
    top: u64,
    summary: [u64; SUMMARY_WORDS],
    map: [u64; WORDS],
    buckets: [Option<C>; BUCKETS],
}

/// Where [`SizeTable::detach`] left a chunk, for [`SizeTable::attach`].
pub enum Spot<C> {
    /// The table's lone chunk.
    Lone,
    /// The only chunk of its size, still in its chain (between these neighbours) and the map.
    Alone { left: Option<C>, right: Option<C> },
    /// Out of the table already.
    Gone,
}

/// The chain that holds the head of `size`: one per word of the map, so that the sizes of a
/// chain are the 64 that word marks, and a size changed by a little stays in its chain.
#[inline(always)]
fn bucket(size: usize) -> usize {
    (size / 64) & (BUCKETS - 1)
}

impl<C: Copy + Eq + core::fmt::Debug> SizeTable<C> {
    pub const fn new() -> Self {
        SizeTable {
            min: None,
            min_size: 0,
            lone: false,
            top: 0,
            summary: [0; SUMMARY_WORDS],
            map: [0; WORDS],
            buckets: [None; BUCKETS],
        }
    }

    /// Whether any chunk is in the table.
    #[inline(always)]
    pub(crate) fn is_empty(&self) -> bool {
        self.min.is_none()
    }

    /// Whether the table's only chunk is kept alone (`min`, outside the map): for the check.
    pub(crate) fn is_lone(&self) -> bool {
        self.lone
    }

    /// Whether the map says a chunk of `size` (`FIRST..=LAST`) is in the table.
    #[inline(always)]
    pub(crate) fn has(&self, size: usize) -> bool {
        self.map[(size / 64) & (WORDS - 1)] >> (size % 64) & 1 == 1
    }

    /// Sets or clears the map bit of `size`, and the summaries above it.
    #[inline(always)]
    fn mark(&mut self, size: usize, on: bool) {
        let w = (size / 64) & (WORDS - 1);
        let s = (w / 64) & (SUMMARY_WORDS - 1);
        if on {
            self.map[w] |= 1 << (size % 64);
            self.summary[s] |= 1 << (w % 64);
            self.top |= 1 << s;
        } else {
            self.map[w] &= !(1 << (size % 64));
            self.summary[s] &= !(u64::from(self.map[w] == 0) << (w % 64));
            self.top &= !(u64::from(self.summary[s] == 0) << s);
        }
    }

    /// The smallest size in the table at or above `need` (`FIRST..=LAST`).
    #[inline(always)]
    fn first_at_least(&self, need: usize) -> Option<usize> {
        let w = (need / 64) & (WORDS - 1);
        let here = self.map[w] >> (need % 64);
        if here != 0 {
            return Some(need + here.trailing_zeros() as usize);
        }
        self.first_from_word(w + 1)
    }

    /// The smallest size in the table, if any, from the map.
    #[inline(always)]
    pub(crate) fn smallest(&self) -> Option<usize> {
        self.first_from_word(FIRST / 64)
    }

    /// The best fit for `need` granules (`FIRST..=LAST`): the oldest chunk of the smallest size
    /// at or above `need`, with its size. The cached smallest chunk when it fits, else a search
    /// of the map from `need` (a lone chunk that does not fit leaves the map empty).
    #[inline(always)]
    pub(crate) fn best_fit<T: Tags<Chunk = C>>(&self, t: &T, need: usize) -> Option<(C, usize)> {
        match self.min() {
            Some((c, size)) if size >= need => Some((c, size)),
            _ => {
                let size = self.first_at_least(need)?;
                Some((self.head(t, size)?, size))
            }
        }
    }

    /// The smallest chunk in the table (the oldest of the smallest size), with its size.
    #[inline(always)]
    pub(crate) fn min(&self) -> Option<(C, usize)> {
        Some((self.min?, self.min_size))
    }

    /// Finds the smallest chunk again after the old one left the table.
    #[inline(never)]
    fn refresh_min<T: Tags<Chunk = C>>(&mut self, t: &T) {
        let size = self.smallest();
        self.min = size.and_then(|s| self.head(t, s));
        self.min_size = size.unwrap_or(0);
    }

    /// The smallest size in words `w..` of the map.
    #[inline]
    fn first_from_word(&self, w: usize) -> Option<usize> {
        if w >= WORDS {
            return None;
        }
        let s = (w / 64) & (SUMMARY_WORDS - 1);
        let here = self.summary[s] & (u64::MAX << (w % 64));
        let word = if here != 0 {
            s * 64 + here.trailing_zeros() as usize
        } else {
            let later = self.top & (u64::MAX << s << 1);
            if later == 0 {
                return None;
            }
            let s = later.trailing_zeros() as usize & (SUMMARY_WORDS - 1);
            s * 64 + self.summary[s].trailing_zeros() as usize
        };
        let word = word & (WORDS - 1);
        Some(word * 64 + self.map[word].trailing_zeros() as usize)
    }

    /// The largest size in the table, if any.
    pub(crate) fn largest(&self) -> Option<usize> {
        if self.lone {
            return Some(self.min_size);
        }
        if self.top == 0 {
            return None;
        }
        let s = (63 - self.top.leading_zeros() as usize) & (SUMMARY_WORDS - 1);
        let w = (s * 64 + 63 - self.summary[s].leading_zeros() as usize) & (WORDS - 1);
        Some(w * 64 + 63 - self.map[w].leading_zeros() as usize)
    }

    /// The head (oldest chunk) of `size`, found by walking its chain; `None` if the chain has
    /// none, which the map says beforehand.
    #[inline(always)]
    pub(crate) fn head<T: Tags<Chunk = C>>(&self, t: &T, size: usize) -> Option<C> {
        let mut node = self.buckets[bucket(size)];
        while let Some(n) = node {
            if t.size(n) == size {
                return Some(n);
            }
            node = t.link(n, Link::Right);
        }
        None
    }

    /// Files the free chunk `c` of `size` granules (`FIRST..=LAST`), behind every older chunk
    /// of its size: into its head's ring, or as a new head at the front of its chain.
    #[inline]
    pub(crate) fn insert<T: Tags<Chunk = C>>(&mut self, t: &mut T, c: C, size: usize) {
        let Some(m) = self.min else {
            // The only chunk: alone, no link written.
            self.min = Some(c);
            self.min_size = size;
            self.lone = true;
            return;
        };
        if self.lone {
            // A second chunk: the first one goes into the map and its chain.
            self.lone = false;
            self.file(t, m, self.min_size);
        }
        if self.file(t, c, size) && size < self.min_size {
            self.min = Some(c);
            self.min_size = size;
        }
    }

    /// [`SizeTable::insert`] but for the smallest chunk, which is the caller's; returns whether
    /// `c` is its size's head (no other chunk of its size was in the table).
    ///
    /// Out of line, as the tries' filing is: inlined into the heap's filing of every free
    /// chunk, the table's filing made the heap's `unfile` too large to inline into the free
    /// (figures: `docs/measurements.md#size_tablers-the-filing-out-of-line`).
    #[inline(never)]
    fn file<T: Tags<Chunk = C>>(&mut self, t: &mut T, c: C, size: usize) -> bool {
        if self.has(size) {
            if let Some(h) = self.head(t, size) {
                ring_push_back(t, h, c);
                t.set_link(c, Link::Parent, Some(c));
                return false;
            }
        }
        self.push_head(t, c, size);
        self.mark(size, true);
        true
    }

    /// Puts `c` at the front of the chain of `size` as the head of a size with no other free
    /// chunk; the map is the caller's.
    #[inline(always)]
    fn push_head<T: Tags<Chunk = C>>(&mut self, t: &mut T, c: C, size: usize) {
        let k = bucket(size);
        let first = self.buckets[k];
        if let Some(f) = first {
            t.set_link(f, Link::Left, Some(c));
        }
        t.set_link(c, Link::Left, None);
        t.set_link(c, Link::Right, first);
        t.set_link(c, Link::Parent, None);
        ring_init(t, c);
        self.buckets[k] = Some(c);
    }

    /// Links `mid` (if any) between a chain's `left` and `right` neighbours of a head of
    /// `size` leaving it: the chain's front when `left` is `None`.
    #[inline(always)]
    fn relink<T: Tags<Chunk = C>>(
        &mut self,
        t: &mut T,
        size: usize,
        left: Option<C>,
        right: Option<C>,
        mid: Option<C>,
    ) {
        match left {
            Some(l) => t.set_link(l, Link::Right, mid.or(right)),
            None => self.buckets[bucket(size)] = mid.or(right),
        }
        if let Some(r) = right {
            t.set_link(r, Link::Left, mid.or(left));
        }
    }

    /// Takes the free chunk `c` of `size` granules out of the table. A head is replaced in
    /// its chain by the next-oldest chunk of its size, or else leaves the chain and the map.
    /// Out of line, as [`SizeTable::file`] is.
    #[inline(never)]
    pub(crate) fn remove<T: Tags<Chunk = C>>(&mut self, t: &mut T, c: C, size: usize) {
        if self.lone {
            debug_assert_eq!(self.min, Some(c));
            self.min = None;
            self.lone = false;
            return;
        }
        if t.link(c, Link::Parent) == Some(c) {
            ring_unlink(t, c);
            return;
        }
        let left = t.link(c, Link::Left);
        let right = t.link(c, Link::Right);
        let next = ring_unlink(t, c);
        if let Some(r) = next {
            t.set_link(r, Link::Parent, None);
            t.set_link(r, Link::Left, left);
            t.set_link(r, Link::Right, right);
        } else {
            self.mark(size, false);
        }
        self.relink(t, size, left, right, next);
        if self.min == Some(c) {
            match next {
                // The next-oldest of the smallest size.
                Some(r) => self.min = Some(r),
                None => self.refresh_min(t),
            }
        }
        self.settle(t);
    }

    /// Makes the table's only chunk, if it holds one, the lone chunk again: out of the map and
    /// its chain. Called when a chunk has left the map.
    #[inline(always)]
    fn settle<T: Tags<Chunk = C>>(&mut self, t: &T) {
        let Some(m) = self.min else { return };
        let w = (self.min_size / 64) & (WORDS - 1);
        let s = (w / 64) & (SUMMARY_WORDS - 1);
        if self.top.is_power_of_two()
            && self.summary[s].is_power_of_two()
            && self.map[w].is_power_of_two()
            && t.link(m, Link::Next) == Some(m)
        {
            // One size marked, one head (the smallest) without a ring: alone in its chain.
            self.buckets[bucket(self.min_size)] = None;
            self.map[w] = 0;
            self.summary[s] = 0;
            self.top = 0;
            self.lone = true;
        }
    }

    /// Takes the free chunk `c` of `size` out of the table, as far as the caller needs before
    /// it carves or merges `c`; [`SizeTable::attach`] completes it with the result. The two
    /// together are [`SizeTable::remove`] and [`SizeTable::insert`], but cheaper in the common
    /// cases. When `c` is the table's lone chunk, the new chunk simply takes its place (or
    /// leaves the table empty if its size is not the table's). When `c` was the only chunk of
    /// its size and the new size has none and lies in the same word of the map (so in the same
    /// chain), the new chunk takes `c`'s place with one write of that word, no summary touched,
    /// and the smallest chunk, if it was `c`, is found in that word. A new size in the table's
    /// range but another word is filed by `attach` too, so that a carve of the smallest chunk
    /// knows its rest is the smallest now without a search (and without the read of a chunk
    /// that a search's walk of a chain costs). On python-json, whose listed requests with empty
    /// lists carve the smallest chunk above them, the table holds one chunk for seven in ten of
    /// its 410 thousand carves and merges per run, and nine in ten stay in their word.
    ///
    /// Two calls, not one taking the carve as a closure: on talc's random actions at 30000 B
    /// the closure was not always inlined, and the whole was too large for the free's merge.
    #[inline(always)]
    pub(crate) fn detach<T: Tags<Chunk = C>>(&mut self, t: &mut T, c: C, size: usize) -> Spot<C> {
        if self.lone {
            debug_assert_eq!(self.min, Some(c));
            return Spot::Lone;
        }
        self.detach_mapped(t, c, size)
    }

    /// [`SizeTable::detach`] of a chunk in the map.
    #[inline(never)]
    fn detach_mapped<T: Tags<Chunk = C>>(&mut self, t: &mut T, c: C, size: usize) -> Spot<C> {
        if t.link(c, Link::Parent) == Some(c) || t.link(c, Link::Next) != Some(c) {
            // A ring member, or a head with younger chunks of its size: the map keeps `size`.
            self.remove(t, c, size);
            return Spot::Gone;
        }
        // The only chunk of its size: its chain neighbours, read before the caller may
        // overwrite its links.
        Spot::Alone {
            left: t.link(c, Link::Left),
            right: t.link(c, Link::Right),
        }
    }

    /// Completes [`SizeTable::detach`] of `c` (of `size`) once the caller has carved or
    /// merged it into `file`, the free chunk to file, if any; returns it unless this filed it.
    #[inline(always)]
    pub(crate) fn attach<T: Tags<Chunk = C>>(
        &mut self,
        t: &mut T,
        c: C,
        size: usize,
        spot: Spot<C>,
        file: Option<(C, usize)>,
    ) -> Option<(C, usize)> {
        match spot {
            Spot::Lone => match file {
                Some((r, rsize)) if (FIRST..=LAST).contains(&rsize) => {
                    self.min = Some(r);
                    self.min_size = rsize;
                    None
                }
                other => {
                    self.min = None;
                    self.lone = false;
                    other
                }
            },
            Spot::Gone => file,
            Spot::Alone { left, right } => self.attach_mapped(t, c, size, left, right, file),
        }
    }

    /// [`SizeTable::attach`] of the only chunk of its size, whose chain neighbours were
    /// `left` and `right`.
    #[inline(never)]
    fn attach_mapped<T: Tags<Chunk = C>>(
        &mut self,
        t: &mut T,
        c: C,
        size: usize,
        left: Option<C>,
        right: Option<C>,
        file: Option<(C, usize)>,
    ) -> Option<(C, usize)> {
        let w = (size / 64) & (WORDS - 1);
        match file {
            Some((r, rsize)) if rsize / 64 == size / 64 && !self.has(rsize) => {
                // `r` takes `c`'s place in the chain, and its bit `c`'s.
                self.map[w] ^= 1 << (size % 64) | 1 << (rsize % 64);
                t.set_link(r, Link::Left, left);
                t.set_link(r, Link::Right, right);
                t.set_link(r, Link::Parent, None);
                ring_init(t, r);
                self.relink(t, size, left, right, Some(r));
                if self.min == Some(c) {
                    // No size below `c`'s was marked: the smallest is in this word now.
                    let s = w * 64 + self.map[w].trailing_zeros() as usize;
                    self.min = if s == rsize { Some(r) } else { self.head(t, s) };
                    self.min_size = s;
                } else if rsize < self.min_size {
                    // (Not from this heap's carves and merges: a carve that stays in its word
                    // is of the smallest chunk, a merge grows.)
                    self.min = Some(r);
                    self.min_size = rsize;
                }
                None
            }
            other => {
                self.relink(t, size, left, right, None);
                self.mark(size, false);
                let was_min = self.min == Some(c);
                if let Some((r, rsize)) = other.filter(|&(_, rs)| (FIRST..=LAST).contains(&rs)) {
                    if !was_min {
                        // The smallest is another mapped chunk, so this is a plain filing.
                        self.insert(t, r, rsize);
                        return None;
                    }
                    // No size below `c`'s was marked.
                    let head = self.file(t, r, rsize);
                    match self.smallest() {
                        Some(s) if s == rsize && head => {
                            self.min = Some(r);
                            self.min_size = s;
                        }
                        _ => self.refresh_min(t),
                    }
                    return None;
                }
                if was_min {
                    self.refresh_min(t);
                }
                self.settle(t);
                other
            }
        }
    }

    /// Calls `each(chunk, size)` for every chunk of at least `min` granules in the table, by
    /// size.
    pub(crate) fn each_at_least<T: Tags<Chunk = C>>(
        &self,
        t: &T,
        min: usize,
        mut each: impl FnMut(C, usize),
    ) {
        if self.lone {
            if let Some(c) = self.min.filter(|_| self.min_size >= min) {
                each(c, self.min_size);
            }
            return;
        }
        let mut size = min.max(FIRST);
        while size <= LAST {
            let Some(s) = self.first_at_least(size) else {
                break;
            };
            if let Some(h) = self.head(t, s) {
                ring_each(t, h, s, &mut each);
            }
            size = s + 1;
        }
    }

    /// Word `w` of the map, and whether the summary says it is non-zero: for the check.
    pub(crate) fn map_word(&self, w: usize) -> (u64, bool) {
        (self.map[w], self.summary[w / 64] >> (w % 64) & 1 == 1)
    }

    /// Whether summary word `s` is non-zero, and whether `top` says so: for the check.
    pub(crate) fn summary_word(&self, s: usize) -> (bool, bool) {
        (self.summary[s] != 0, self.top >> s & 1 == 1)
    }

    /// The summary words (bit `w` of word `s`: map word `64 s + w` is non-zero): for a step's
    /// check.
    pub(crate) fn summary_words(&self) -> [u64; SUMMARY_WORDS] {
        self.summary
    }

    /// Bucket `k`'s first head: for the check.
    pub(crate) fn bucket_head(&self, k: usize) -> Option<C> {
        self.buckets[k]
    }

    /// The number of map words and of buckets: for the check.
    pub(crate) const SHAPE: (usize, usize, usize) = (WORDS, SUMMARY_WORDS, BUCKETS);

    /// The chain a size's head belongs in: for the check.
    pub(crate) fn bucket_of(size: usize) -> usize {
        bucket(size)
    }
}

/// What the bins need of the sizes between their lists and their tries: the [`SizeTable`]
/// (`crate::Wide`) or nothing ([`NoTable`], `crate::Compact`, whose tries start right above its
/// lists). The bins reach it only for sizes in `FIRST..=TABLE_LAST` of their shape, so a shape
/// without a table never calls the methods that file or take a chunk.
// Reachable only as the storage of a sealed `BinShape`, which no one outside can name or
// implement: `Tags` stays the crate's own.
#[allow(private_bounds)]
pub trait Table<C>: Sized {
    /// An empty table.
    const EMPTY: Self;
    /// The size table itself, for the check.
    fn sizes(&self) -> Option<&SizeTable<C>>;
    /// Whether no chunk is in the table.
    fn is_empty(&self) -> bool;
    /// The smallest chunk (see [`SizeTable::min`]).
    fn min(&self) -> Option<(C, usize)>;
    /// See [`SizeTable::best_fit`].
    fn best_fit<T: Tags<Chunk = C>>(&self, t: &T, need: usize) -> Option<(C, usize)>;
    /// See [`SizeTable::insert`].
    fn insert<T: Tags<Chunk = C>>(&mut self, t: &mut T, c: C, size: usize);
    /// See [`SizeTable::remove`].
    fn remove<T: Tags<Chunk = C>>(&mut self, t: &mut T, c: C, size: usize);
    /// See [`SizeTable::detach`].
    fn detach<T: Tags<Chunk = C>>(&mut self, t: &mut T, c: C, size: usize) -> Spot<C>;
    /// See [`SizeTable::attach`].
    fn attach<T: Tags<Chunk = C>>(
        &mut self,
        t: &mut T,
        c: C,
        size: usize,
        spot: Spot<C>,
        file: Option<(C, usize)>,
    ) -> Option<(C, usize)>;
    /// See [`SizeTable::each_at_least`].
    fn each_at_least<T: Tags<Chunk = C>>(&self, t: &T, min: usize, each: impl FnMut(C, usize));
    /// See [`SizeTable::largest`].
    fn largest(&self) -> Option<usize>;
}

#[allow(private_bounds)]
impl<C: Copy + Eq + core::fmt::Debug> Table<C> for SizeTable<C> {
    const EMPTY: Self = SizeTable::new();

    fn sizes(&self) -> Option<&SizeTable<C>> {
        Some(self)
    }

    #[inline(always)]
    fn is_empty(&self) -> bool {
        SizeTable::is_empty(self)
    }

    #[inline(always)]
    fn min(&self) -> Option<(C, usize)> {
        SizeTable::min(self)
    }

    #[inline(always)]
    fn best_fit<T: Tags<Chunk = C>>(&self, t: &T, need: usize) -> Option<(C, usize)> {
        SizeTable::best_fit(self, t, need)
    }

    #[inline(always)]
    fn insert<T: Tags<Chunk = C>>(&mut self, t: &mut T, c: C, size: usize) {
        SizeTable::insert(self, t, c, size)
    }

    #[inline(always)]
    fn remove<T: Tags<Chunk = C>>(&mut self, t: &mut T, c: C, size: usize) {
        SizeTable::remove(self, t, c, size)
    }

    #[inline(always)]
    fn detach<T: Tags<Chunk = C>>(&mut self, t: &mut T, c: C, size: usize) -> Spot<C> {
        SizeTable::detach(self, t, c, size)
    }

    #[inline(always)]
    fn attach<T: Tags<Chunk = C>>(
        &mut self,
        t: &mut T,
        c: C,
        size: usize,
        spot: Spot<C>,
        file: Option<(C, usize)>,
    ) -> Option<(C, usize)> {
        SizeTable::attach(self, t, c, size, spot, file)
    }

    fn each_at_least<T: Tags<Chunk = C>>(&self, t: &T, min: usize, each: impl FnMut(C, usize)) {
        SizeTable::each_at_least(self, t, min, each)
    }

    fn largest(&self) -> Option<usize> {
        SizeTable::largest(self)
    }
}

/// No size table: the bins of a shape whose tries start right above its lists. Always empty;
/// the bins never file a chunk in it (its `insert` and `remove` are unreachable, and say so
/// in debug builds).
pub struct NoTable;

#[allow(private_bounds)]
impl<C> Table<C> for NoTable {
    const EMPTY: Self = NoTable;

    fn sizes(&self) -> Option<&SizeTable<C>> {
        None
    }

    #[inline(always)]
    fn is_empty(&self) -> bool {
        true
    }

    #[inline(always)]
    fn min(&self) -> Option<(C, usize)> {
        None
    }

    #[inline(always)]
    fn best_fit<T: Tags<Chunk = C>>(&self, _: &T, _: usize) -> Option<(C, usize)> {
        None
    }

    fn insert<T: Tags<Chunk = C>>(&mut self, _: &mut T, _: C, size: usize) {
        debug_assert!(false, "a chunk of {size} granules filed in no table");
    }

    fn remove<T: Tags<Chunk = C>>(&mut self, _: &mut T, _: C, size: usize) {
        debug_assert!(false, "a chunk of {size} granules taken from no table");
    }

    fn detach<T: Tags<Chunk = C>>(&mut self, _: &mut T, _: C, size: usize) -> Spot<C> {
        debug_assert!(false, "a chunk of {size} granules detached from no table");
        Spot::Gone
    }

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

    fn each_at_least<T: Tags<Chunk = C>>(&self, _: &T, _: usize, _: impl FnMut(C, usize)) {}

    fn largest(&self) -> Option<usize> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_covers_whole_tree_bins() {
        use crate::algo::bin_index::bin_of;
        assert_ne!(bin_of(FIRST - 1), bin_of(FIRST));
        assert_ne!(bin_of(LAST), bin_of(LAST + 1));
    }

    #[test]
    fn map_searches_find_the_smallest_at_or_above() {
        let mut m: SizeTable<u32> = SizeTable::new();
        assert_eq!(m.smallest(), None);
        assert_eq!(m.largest(), None);
        for s in [FIRST + 5, FIRST + 64 * 70 + 3, LAST] {
            m.mark(s, true);
        }
        assert_eq!(m.smallest(), Some(FIRST + 5));
        assert_eq!(m.largest(), Some(LAST));
        assert_eq!(m.first_at_least(FIRST), Some(FIRST + 5));
        assert_eq!(m.first_at_least(FIRST + 5), Some(FIRST + 5));
        assert_eq!(m.first_at_least(FIRST + 6), Some(FIRST + 64 * 70 + 3));
        assert_eq!(m.first_at_least(FIRST + 64 * 70 + 4), Some(LAST));
        assert_eq!(m.first_at_least(LAST), Some(LAST));
        m.mark(LAST, false);
        assert_eq!(m.first_at_least(FIRST + 64 * 70 + 4), None);
        assert_eq!(m.largest(), Some(FIRST + 64 * 70 + 3));
        m.mark(FIRST + 64 * 70 + 3, false);
        m.mark(FIRST + 5, false);
        assert_eq!((m.smallest(), m.largest()), (None, None));
        assert_eq!((m.top, m.summary), (0, [0; SUMMARY_WORDS]));
    }
}
