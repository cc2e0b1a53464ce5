//! The free bins and the exact best-fit search.
//!
//! Sizes are numbered into 128 bins by `crate::algo::bin_index`: bins 0–63 each hold exactly
//! one size (1…64 granules), bins 64–127 are tree bins, logarithmic, the last one open-ended.
//!
//! **Lists.** Every size up to [`LIST_SIZES`] granules (bins 0–83: up to 32 KiB at the host
//! granule) has a FIFO list of its own: the oldest chunk at its head, the newest at its tail,
//! linked both ways, so filing touches only the old tail and taking the oldest only its
//! successor. A 2048-bit map says which lists are non-empty, and a summary word which of its
//! 32 words are, so the smallest non-empty size at or above a request is two
//! `trailing_zeros` away: exact best fit, oldest first, in `O(1)`. (The first twenty tree bins
//! span at most 256 sizes each; a list per size serves them better than a trie, whose walk
//! visits a chunk, often a cache miss, per level.) The price is memory beside the heap: 16
//! bytes of list ends per size, 32 KiB per heap, which is why the lists stop there.
//!
//! **The size table.** From 2048 to 16383 granules (32 KiB to 256 KiB at the host granule,
//! tree bins 84–95), a bitmap over sizes finds the best fit and a hash of the size its oldest
//! chunk: `crate::algo::size_table`, which says why.
//!
//! **Tries.** Above that, inside each tree bin, the distinct sizes form a bitwise trie on the
//! size's low bits (dlmalloc's tree bins): a node at depth `d` branches on bit `top_bit - d`, so
//! any operation visits at most one node per bit of the size. Chunks whose size is already in
//! the trie join that node's circular ring, behind the older ones, and the node itself is always
//! the oldest of its size: exact best fit, oldest first among equals, in `O(bits of a size)`
//! worst case with no scan of a bin. A chunk alone in its tree bin (typically a region's free
//! end) hands its place straight to what replaces it, the rest of an allocation carved from it
//! or a merge that absorbs it, when that stays in the same bin. A 64-bit map says which tries
//! are non-empty.
//!
//! **Shapes.** That is the [`Wide`](crate::Wide) shape, the default. The
//! [`Compact`](crate::Compact) shape (`crate::algo::shape`) keeps lists up to 64 granules, no size
//! table, and tries from bin 64 to bin 95, its last, open-ended: a few hundred bytes instead of
//! some 20 KiB. The policy is the same in both: what a request takes is decided by
//! [`LIST_SIZES`] (the victim, the realloc's move), never by where a shape keeps a size, and
//! every structure finds the exact best fit, oldest first.

use core::hint::select_unpredictable;

use crate::algo::bin_index::{bin_of, log_bin_min, top_bit, BIN_COUNT, LIST_SIZES};
use crate::algo::ring::{ring_each, ring_init, ring_push_back, ring_unlink};
use crate::algo::shape::sealed::Shape;
use crate::algo::shape::{Ends, Slots, Wide};
use crate::algo::size_table::Table;
use crate::algo::tags::{Link, Tags};

/// The free bins of one heap.
///
/// Invariants (verified by `crate::algo::check`): bit `s − 1` of `lists` is set iff `heads[s − 1]`
/// is `Some`, iff `tails[s − 1]` is; bit `w` of `summary` is set iff `lists[w] != 0`; bit
/// `b − FIRST_TRIE_BIN` of `tries` is set iff `roots[b − FIRST_TRIE_BIN]` is `Some`; every
/// chunk reachable from a list or a root is free; a list runs from its head to its tail with
/// consistent links both ways and holds chunks of its size only; a trie holds chunks of its
/// bin only, with consistent parent links, each node's size agreeing with its path's bits, its
/// children differing from it, and ring members (marked by `Parent == Some(self)`) having the
/// node's size; the size table keeps its own (see `SizeTable`).
///
/// The fields are in the order the hot paths touch them (`repr(C)`): the two map words every
/// search reads first, then the list map, then each list's ends side by side, so that a
/// list operation touches one cache line of ends rather than one for heads and one for tails.
#[repr(C)]
pub(crate) struct Bins<C: Copy + Eq + core::fmt::Debug, S: Shape = Wide> {
    summary: u64,
    tries: u64,
    lists: S::Map,
    /// Per size up to `S::LISTS` (at `size − 1`): the oldest chunk and the newest.
    ends: S::Lists<C>,
    /// Per tree bin from `first_trie_bin` on: the trie's root.
    roots: S::Roots<C>,
    /// The sizes above the lists, up to `S::TABLE_LAST`.
    table: S::Table<C>,
}

impl<C: Copy + Eq + core::fmt::Debug, S: Shape> Bins<C, S> {
    /// Words of the list map (one bit per size).
    const MAP_WORDS: usize = S::LISTS.div_ceil(64);
    /// Slots of the list arrays: a power of two, so that indices masked with `SLOTS − 1` need
    /// no bounds check (with 2047 lists, the last slot, of size 2048, is never used).
    const SLOTS: usize = S::LISTS.next_power_of_two();
    /// Whether this shape's lists stop below the policy's listed sizes ([`LIST_SIZES`]), so
    /// that the calls for a listed size must look beyond them. A constant, so that with
    /// [`Wide`]'s lists the test is compiled away: as a comparison of the size, whose bound the
    /// callers' own tests do not always prove, it cost the free instructions (figures:
    /// `docs/measurements.md#binsrs-short-lists-as-a-constant`).
    const SHORT_LISTS: bool = S::LISTS < LIST_SIZES;
    /// The first bin kept as a trie: the bin of the first size above the table (or the lists).
    pub(crate) const FIRST_TRIE_BIN: usize = bin_of(S::TABLE_LAST + 1);
    /// The shape's figures agree with its storage.
    const SHAPE_OK: () = assert!(
        Self::MAP_WORDS.is_power_of_two()
            && Self::SLOTS <= 64 * Self::MAP_WORDS
            && size_of::<S::Lists<C>>() == Self::SLOTS * size_of::<Ends<C>>()
            && size_of::<S::Map>() == Self::MAP_WORDS * 8
            && size_of::<S::Roots<C>>()
                == (S::LAST_BIN + 1 - Self::FIRST_TRIE_BIN) * size_of::<Option<C>>()
            && S::LAST_BIN + 1 - Self::FIRST_TRIE_BIN <= 64
            && S::LAST_BIN < BIN_COUNT
            && S::TABLE_LAST >= S::LISTS
    );

    pub const fn new() -> Self {
        let () = Self::SHAPE_OK;
        Bins {
            lists: S::Map::EMPTY,
            summary: 0,
            tries: 0,
            ends: S::Lists::EMPTY,
            table: S::Table::EMPTY,
            roots: S::Roots::EMPTY,
        }
    }

    /// The bin that holds free chunks of `size` granules in this shape: [`bin_of`], the sizes
    /// of the bins above the last gathered in it.
    #[inline]
    pub(crate) fn bin(size: usize) -> usize {
        let b = bin_of(size);
        if b > S::LAST_BIN {
            S::LAST_BIN
        } else {
            b
        }
    }

    /// [`top_bit`] in this shape: the last bin branches on every bit.
    #[inline]
    pub(crate) fn top_bit(b: usize) -> u32 {
        if b == S::LAST_BIN {
            usize::BITS - 1
        } else {
            top_bit(b)
        }
    }

    /// The bins this shape keeps as tries.
    pub(crate) fn trie_bins() -> core::ops::RangeInclusive<usize> {
        Self::FIRST_TRIE_BIN..=S::LAST_BIN
    }

    /// The words of the list map.
    pub(crate) fn map_words() -> usize {
        Self::MAP_WORDS
    }

    /// The list of `size` granules (`1..=S::LISTS`): its head, its tail, and whether the map
    /// says it is non-empty.
    pub(crate) fn list(&self, size: usize) -> (Option<C>, Option<C>, bool) {
        let i = size - 1;
        (
            self.ends.as_ref()[i].head,
            self.ends.as_ref()[i].tail,
            self.lists.as_ref()[i / 64] >> (i % 64) & 1 == 1,
        )
    }

    /// Word `w` of the list map (bit `k`: the list of size `64 w + k + 1` is non-empty), and
    /// which of those 64 lists have a head and which a tail, as the same kind of bit mask: a
    /// branch-free pass over the ends, so that checking all 2048 lists stays cheap.
    pub(crate) fn list_word(&self, w: usize) -> (u64, u64, u64) {
        let ends = &self.ends.as_ref()[w * 64..w * 64 + 64];
        // The common case, 64 empty lists, in a branch-free loop the compiler can vectorise.
        let any = ends
            .iter()
            .fold(false, |any, e| any | e.head.is_some() | e.tail.is_some());
        if !any && self.lists.as_ref()[w] == 0 {
            return (0, 0, 0);
        }
        let mut heads = 0u64;
        let mut tails = 0u64;
        for (k, e) in ends.iter().enumerate() {
            heads |= u64::from(e.head.is_some()) << k;
            tails |= u64::from(e.tail.is_some()) << k;
        }
        (self.lists.as_ref()[w], heads, tails)
    }

    /// Whether the summary word says word `w` of the list map is non-empty, and whether it is.
    pub(crate) fn summary(&self, w: usize) -> (bool, bool) {
        (self.summary >> w & 1 == 1, self.lists.as_ref()[w] != 0)
    }

    /// The summary word (bit `w`: word `w` of the list map is non-zero): for a step's check.
    pub(crate) fn summary_bits(&self) -> u64 {
        self.summary
    }

    /// The size table, for the check.
    pub(crate) fn table(&self) -> &S::Table<C> {
        &self.table
    }

    /// Tree bin `b`'s root (`b ≥ FIRST_TRIE_BIN`), and whether the map says it is non-empty.
    pub(crate) fn root(&self, b: usize) -> (Option<C>, bool) {
        let i = b - Self::FIRST_TRIE_BIN;
        (self.roots.as_ref()[i], self.tries >> i & 1 == 1)
    }

    /// Files the free chunk `c` of `size` granules into its bin, behind every older chunk of
    /// its size.
    #[inline(always)]
    pub fn insert<T: Tags<Chunk = C>>(&mut self, t: &mut T, c: C, size: usize) {
        if size <= S::LISTS {
            self.list_push(t, c, size - 1);
        } else if size <= S::TABLE_LAST {
            self.table.insert(t, c, size);
        } else {
            self.trie_insert(t, c, size);
        }
    }

    /// Appends `c` to list `i` (of size `i + 1`).
    ///
    /// Branch-free, as is [`Bins::list_unlink`]: with a list per size most lists hold zero to
    /// two chunks, so whether one is empty, or a chunk is its head or tail, is close to a coin
    /// flip, and as branches these were the heap's most mispredicted (cachegrind's branch
    /// simulation on talc's random actions). A link that would go to the list's ends when a
    /// neighbour is missing is written into `c`'s own link word instead, which is rewritten or
    /// dead afterwards; the ends are computed with selects, and the map bits set (here) or
    /// cleared (on unlink) whatever the list held.
    #[inline(always)]
    fn list_push<T: Tags<Chunk = C>>(&mut self, t: &mut T, c: C, i: usize) {
        let i = i & (Self::SLOTS - 1);
        let Ends { head, tail } = self.ends.as_ref()[i];
        // The old tail's successor, or for an empty list `c`'s own, set to `None` next.
        t.set_link(tail.unwrap_or(c), Link::Next, Some(c));
        t.set_link(c, Link::Next, None);
        t.set_link(c, Link::Prev, tail);
        self.ends.as_mut()[i] = Ends {
            head: select_unpredictable(tail.is_none(), Some(c), head),
            tail: Some(c),
        };
        // Setting a bit already set changes nothing.
        self.lists.as_mut()[(i / 64) & (Self::MAP_WORDS - 1)] |= 1 << (i % 64);
        self.summary |= 1 << (i / 64);
    }

    /// Marks list `i` empty in the maps if `emptied`.
    #[inline(always)]
    fn list_emptied(&mut self, i: usize, emptied: bool) {
        let w = (i / 64) & (Self::MAP_WORDS - 1);
        self.lists.as_mut()[w] &= !(u64::from(emptied) << (i % 64));
        self.summary &= !(u64::from(self.lists.as_ref()[w] == 0) << w);
    }

    /// Files the free chunk `c` of `size` (> `S::TABLE_LAST`) granules into its tree bin's
    /// trie.
    fn trie_insert<T: Tags<Chunk = C>>(&mut self, t: &mut T, c: C, size: usize) {
        let b = Self::bin(size);
        match self.trie_seek(t, b, size) {
            Seek::Empty => {
                self.roots.as_mut()[b - Self::FIRST_TRIE_BIN] = Some(c);
                self.tries |= 1 << (b - Self::FIRST_TRIE_BIN);
                ring_init(t, c);
                t.set_link(c, Link::Left, None);
                t.set_link(c, Link::Right, None);
                t.set_link(c, Link::Parent, None);
            }
            Seek::Found(node) => {
                ring_push_back(t, node, c);
                t.set_link(c, Link::Parent, Some(c));
            }
            Seek::Vacant(node, dir) => {
                t.set_link(node, dir, Some(c));
                t.set_link(c, Link::Parent, Some(node));
                t.set_link(c, Link::Left, None);
                t.set_link(c, Link::Right, None);
                ring_init(t, c);
            }
        }
    }

    /// Walks tree bin `b`'s trie along the bits of `size` (a size of the bin) until the node of
    /// that size (the oldest of it) or a free child slot: the path a filing of `size` takes,
    /// and an exact lookup's, which unlike [`Bins::trie_best_fit`] stops there.
    #[inline(always)]
    fn trie_seek<T: Tags<Chunk = C>>(&self, t: &T, b: usize, size: usize) -> Seek<C> {
        let Some(mut node) = self.roots.as_ref()[b - Self::FIRST_TRIE_BIN] else {
            return Seek::Empty;
        };
        // The branching bit of each level is the top bit of `bits`.
        let mut bits = size << (usize::BITS - 1 - Self::top_bit(b));
        loop {
            if t.size(node) == size {
                return Seek::Found(node);
            }
            // A select, not a branch: the bit is a coin flip (see `Bins::trie_best_fit`).
            let dir = select_unpredictable((bits as isize) < 0, Link::Right, Link::Left);
            match t.link(node, dir) {
                Some(child) => node = child,
                None => return Seek::Vacant(node, dir),
            }
            // Two distinct sizes of one bin differ at some bit at or below `top_bit`, so the
            // walk stops before it runs out of bits.
            bits <<= 1;
        }
    }

    /// Takes the free chunk `c` of `size` granules out of its bin.
    #[inline]
    pub fn remove<T: Tags<Chunk = C>>(&mut self, t: &mut T, c: C, size: usize) {
        if size <= S::LISTS {
            self.list_unlink(t, c, size - 1);
        } else if size <= S::TABLE_LAST {
            self.table.remove(t, c, size);
        } else {
            self.trie_unlink(t, c, Self::bin(size));
        }
    }

    /// Takes `c` out of list `i` (branch-free: see [`Bins::list_push`]).
    #[inline(always)]
    fn list_unlink<T: Tags<Chunk = C>>(&mut self, t: &mut T, c: C, i: usize) {
        let i = i & (Self::SLOTS - 1);
        let next = t.link(c, Link::Next);
        let prev = t.link(c, Link::Prev);
        // Where a neighbour is missing, `c`'s own link word takes the write: it is dead now.
        t.set_link(prev.unwrap_or(c), Link::Next, next);
        t.set_link(next.unwrap_or(c), Link::Prev, prev);
        let Ends { head, tail } = self.ends.as_ref()[i];
        self.ends.as_mut()[i] = Ends {
            head: select_unpredictable(prev.is_none(), next, head),
            tail: select_unpredictable(next.is_none(), prev, tail),
        };
        self.list_emptied(i, prev.is_none() & next.is_none());
    }

    /// Takes the oldest chunk out of the non-empty list `i`.
    ///
    /// Unlike [`Bins::list_push`] and [`Bins::list_unlink`], a branch on whether the list
    /// empties: this branch predicts better than the others, and made branch-free it cost every
    /// allocation a write of the tail and of the maps and was slower (figures:
    /// `docs/measurements.md#binsrs-the-pop-keeps-its-branch`).
    /// Always inlined: the allocation's fast path pops both a chunk of
    /// exactly the size and the best fit, and with two copies the compiler called it.
    #[inline(always)]
    fn pop_oldest<T: Tags<Chunk = C>>(&mut self, t: &mut T, i: usize) -> Option<C> {
        let i = i & (Self::SLOTS - 1);
        let c = self.ends.as_ref()[i].head?;
        let next = t.link(c, Link::Next);
        self.ends.as_mut()[i].head = next;
        match next {
            Some(n) => t.set_link(n, Link::Prev, None),
            None => {
                self.ends.as_mut()[i].tail = None;
                self.list_emptied(i, true);
            }
        }
        Some(c)
    }

    /// The smallest size with a non-empty list at or above `need` (`1..=S::LISTS`).
    #[inline(always)]
    fn first_list_at_least(&self, need: usize) -> Option<usize> {
        let i = need - 1;
        let w = (i / 64) & (Self::MAP_WORDS - 1);
        // The lists of `need` and up within its map word, `need`'s at bit 0.
        let here = self.lists.as_ref()[w] >> (i % 64);
        if here != 0 {
            return Some(need + here.trailing_zeros() as usize);
        }
        let later = self.summary & (u64::MAX << w << 1);
        if later == 0 {
            return None;
        }
        let w = later.trailing_zeros() as usize & (Self::MAP_WORDS - 1);
        Some(w * 64 + self.lists.as_ref()[w].trailing_zeros() as usize + 1)
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
                self.roots.as_mut()[b - Self::FIRST_TRIE_BIN] = replacement;
                if replacement.is_none() {
                    self.tries &= !(1 << (b - Self::FIRST_TRIE_BIN));
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
    #[inline(always)]
    pub fn take_best<T, F>(&mut self, t: &mut T, need: usize, carve: F) -> Option<(C, usize)>
    where
        T: Tags<Chunk = C>,
        F: FnOnce(&mut T, C, usize) -> Option<(C, usize)>,
    {
        if need <= S::LISTS {
            if let Some(size) = self.first_list_at_least(need) {
                return self.take_listed(t, size, carve);
            }
            return self.take_above_lists(t, need, carve);
        }
        if need <= S::TABLE_LAST {
            if let Some((c, size)) = self.table.best_fit(t, need) {
                return Some(self.take_tabled(t, c, size, carve));
            }
            return self.take_smallest_trie(t, Self::FIRST_TRIE_BIN, carve);
        }
        self.take_best_trie(t, need, carve)
    }

    /// [`Bins::take_best`] for a size above the table (and the lists): the best fit in its
    /// bin's trie, else the smallest chunk of a higher bin.
    #[inline(always)]
    fn take_best_trie<T, F>(&mut self, t: &mut T, need: usize, carve: F) -> Option<(C, usize)>
    where
        T: Tags<Chunk = C>,
        F: FnOnce(&mut T, C, usize) -> Option<(C, usize)>,
    {
        let b = Self::bin(need);
        if let Some((c, size)) = self.trie_best_fit(t, b, need) {
            self.take_log(t, b, c, size, carve);
            return Some((c, size));
        }
        // Every chunk of a higher bin is larger than `need`: take the smallest there.
        self.take_smallest_trie(t, b + 1, carve)
    }

    /// [`Bins::take_best`] for a listed size (of the policy, at most [`LIST_SIZES`]) that no
    /// list serves: the best fit among the chunks above the lists. With every policy-listed
    /// size in a list ([`Wide`]) that is the smallest chunk above them, oldest among equals,
    /// from the size table, else from the tries; with lists that stop below (`Compact`), a
    /// request above them is a best-fit search of the tries.
    #[inline(always)]
    pub fn take_above_lists<T, F>(&mut self, t: &mut T, need: usize, carve: F) -> Option<(C, usize)>
    where
        T: Tags<Chunk = C>,
        F: FnOnce(&mut T, C, usize) -> Option<(C, usize)>,
    {
        if Self::SHORT_LISTS && need > S::LISTS {
            return self.take_best_trie(t, need, carve);
        }
        if let Some((c, size)) = self.table.min() {
            return Some(self.take_tabled(t, c, size, carve));
        }
        self.take_smallest_trie(t, Self::FIRST_TRIE_BIN, carve)
    }

    /// Whether any chunk above the lists is free (in the size table or a trie).
    #[inline(always)]
    pub fn has_unlisted(&self) -> bool {
        self.tries != 0 || !self.table.is_empty()
    }

    /// Takes the size table's chunk `c` of `size` out of the table, carves it, and files the
    /// rest.
    #[inline(always)]
    fn take_tabled<T, F>(&mut self, t: &mut T, c: C, size: usize, carve: F) -> (C, usize)
    where
        T: Tags<Chunk = C>,
        F: FnOnce(&mut T, C, usize) -> Option<(C, usize)>,
    {
        let spot = self.table.detach(t, c, size);
        let rest = carve(t, c, size);
        if let Some((rest, rsize)) = self.table.attach(t, c, size, spot, rest) {
            self.insert(t, rest, rsize);
        }
        (c, size)
    }

    /// Whether `need` granules (`1..=LIST_SIZES`) lie above this shape's lists, in its tries: a
    /// constant `false` for [`Wide`], whose lists hold every listed size.
    #[inline(always)]
    pub fn listed_in_tries(need: usize) -> bool {
        Self::SHORT_LISTS && need > S::LISTS
    }

    /// Takes the oldest chunk of exactly `need` granules (`1..=LIST_SIZES`) out of its list;
    /// `None` when there is none. A size above this shape's lists is looked up in its trie.
    #[inline(always)]
    pub fn pop_exact<T: Tags<Chunk = C>>(&mut self, t: &mut T, need: usize) -> Option<C> {
        if Self::SHORT_LISTS && need > S::LISTS {
            return self.trie_take_exact(t, need);
        }
        let i = need - 1;
        // The map word, which the search for the best fit reads next anyway, rather than the
        // list's ends, a line of their own.
        if self.lists.as_ref()[(i / 64) & (Self::MAP_WORDS - 1)] >> (i % 64) & 1 == 0 {
            return None;
        }
        self.pop_oldest(t, i)
    }

    /// [`Bins::pop_exact`] above the lists: the trie node of exactly `need` granules (the
    /// oldest of its size), taken out. An exact walk, which stops where `need`'s path ends,
    /// rather than a best-fit search, which goes on to the smallest larger size: most of these
    /// lookups miss.
    #[inline(never)]
    fn trie_take_exact<T: Tags<Chunk = C>>(&mut self, t: &mut T, need: usize) -> Option<C> {
        let b = Self::bin(need);
        match self.trie_seek(t, b, need) {
            Seek::Found(c) => {
                self.trie_unlink(t, c, b);
                Some(c)
            }
            Seek::Empty | Seek::Vacant(..) => None,
        }
    }

    /// Takes the oldest of the smallest listed chunks of at least `need` granules
    /// (`1..=LIST_SIZES`) out of its list, with its size; `None` when no list holds one (the
    /// chunks above the lists may: [`Bins::take_above_lists`]). The first half of
    /// [`Bins::take_best`]'s list case, for the allocation fast path, which carves the chunk
    /// and keeps the rest as its victim.
    #[inline(always)]
    pub fn pop_listed<T: Tags<Chunk = C>>(&mut self, t: &mut T, need: usize) -> Option<(C, usize)> {
        if Self::SHORT_LISTS && need > S::LISTS {
            return None;
        }
        let size = self.first_list_at_least(need)?;
        Some((self.pop_oldest(t, size - 1)?, size))
    }

    /// Files the free chunk `c` of `size` granules (`1..=LIST_SIZES`) into its list, or its
    /// trie when this shape's lists stop below.
    #[inline(always)]
    pub fn push_listed<T: Tags<Chunk = C>>(&mut self, t: &mut T, c: C, size: usize) {
        debug_assert!((1..=LIST_SIZES).contains(&size));
        if Self::SHORT_LISTS && size > S::LISTS {
            return self.trie_insert(t, c, size);
        }
        self.list_push(t, c, size - 1);
    }

    /// Takes the free chunk `c` of `size` granules (`1..=LIST_SIZES`) out of its list, or its
    /// trie when this shape's lists stop below.
    #[inline(always)]
    pub fn unlink_listed<T: Tags<Chunk = C>>(&mut self, t: &mut T, c: C, size: usize) {
        debug_assert!((1..=LIST_SIZES).contains(&size));
        if Self::SHORT_LISTS && size > S::LISTS {
            return self.trie_unlink(t, c, Self::bin(size));
        }
        self.list_unlink(t, c, size - 1);
    }

    /// Takes the oldest chunk of the non-empty list of `size` granules, carves it, and files
    /// the rest (smaller, so into a list too).
    #[inline]
    fn take_listed<T, F>(&mut self, t: &mut T, size: usize, carve: F) -> Option<(C, usize)>
    where
        T: Tags<Chunk = C>,
        F: FnOnce(&mut T, C, usize) -> Option<(C, usize)>,
    {
        let c = self.pop_oldest(t, size - 1)?;
        if let Some((rest, rsize)) = carve(t, c, size) {
            self.push_listed(t, rest, rsize);
        }
        Some((c, size))
    }

    /// [`Bins::take_best`] from the lowest non-empty trie of bin `from` (at least
    /// `FIRST_TRIE_BIN`) on: its smallest chunk, oldest among equals. Always inlined: as a
    /// function of its own, its register saves were a large share of its instructions
    /// (figures: `docs/measurements.md#binsrs-the-trie-allocation-always-inlined`).
    #[inline(always)]
    fn take_smallest_trie<T, F>(&mut self, t: &mut T, from: usize, carve: F) -> Option<(C, usize)>
    where
        T: Tags<Chunk = C>,
        F: FnOnce(&mut T, C, usize) -> Option<(C, usize)>,
    {
        let above = self.tries
            & u64::MAX
                .checked_shl((from - Self::FIRST_TRIE_BIN) as u32)
                .unwrap_or(0);
        if above == 0 {
            return None;
        }
        let b = Self::FIRST_TRIE_BIN + above.trailing_zeros() as usize;
        let (c, size) = smallest(t, self.roots.as_ref()[b - Self::FIRST_TRIE_BIN]?);
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
        if self.roots.as_ref()[b - Self::FIRST_TRIE_BIN] == Some(c) && is_lone_root(t, c) {
            // Nothing links to `c` but the bin: carving may overwrite its links.
            match carve(t, c, size) {
                Some((rest, rsize)) if rsize >= log_bin_min(b) => self.set_lone_root(t, b, rest),
                other => {
                    self.roots.as_mut()[b - Self::FIRST_TRIE_BIN] = None;
                    self.tries &= !(1 << (b - Self::FIRST_TRIE_BIN));
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
        if old_size > S::TABLE_LAST {
            let b = Self::bin(old_size);
            if self.roots.as_ref()[b - Self::FIRST_TRIE_BIN] == Some(old)
                && is_lone_root(t, old)
                && (b == S::LAST_BIN || new_size < log_bin_min(b + 1))
            {
                let m = merge(t);
                self.set_lone_root(t, b, m);
                return m;
            }
            self.trie_unlink(t, old, b);
        } else if old_size > S::LISTS {
            let spot = self.table.detach(t, old, old_size);
            let m = merge(t);
            let file = self
                .table
                .attach(t, old, old_size, spot, Some((m, new_size)));
            if let Some((m, size)) = file {
                self.insert(t, m, size);
            }
            return m;
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
        self.roots.as_mut()[b - Self::FIRST_TRIE_BIN] = Some(c);
        ring_init(t, c);
        t.set_link(c, Link::Left, None);
        t.set_link(c, Link::Right, None);
        t.set_link(c, Link::Parent, None);
    }

    /// The smallest trie node of bin `b` with at least `need` granules, with its size.
    ///
    /// Branch-free but for the loops' ends and the exact hit: which child a level goes to,
    /// whether a node is the best so far and which right subtree is the deepest passed by
    /// follow the sizes' bits, a coin flip each, and as branches they were the compact
    /// shape's most mispredicted (cachegrind's branch simulation, figures:
    /// `docs/measurements.md`). Both children are read (one line: the link words are
    /// side by side) and the wanted one selected.
    fn trie_best_fit<T: Tags<Chunk = C>>(
        &self,
        t: &T,
        b: usize,
        need: usize,
    ) -> Option<(C, usize)> {
        // The best so far and its size; `None` until a node fits (no size is a sentinel: a
        // chunk may be `usize::MAX` granules long).
        let mut best: Option<C> = None;
        let mut best_size = 0;
        // Follow `need`'s bits (the top bit of `bits` at each level; zeros once they run out).
        // A right subtree passed by while going left holds only sizes above `need`; the
        // deepest such subtree holds the smallest of them.
        let mut node = self.roots.as_ref()[b - Self::FIRST_TRIE_BIN];
        let mut larger = None;
        let mut bits = need << (usize::BITS - 1 - Self::top_bit(b));
        while let Some(n) = node {
            let size = t.size(n);
            if size == need {
                // No size fits better; the node is the oldest of its size.
                return Some((n, size));
            }
            let better = (size > need) & (best.is_none() | (size < best_size));
            best = select_unpredictable(better, Some(n), best);
            best_size = select_unpredictable(better, size, best_size);
            let right = t.link(n, Link::Right);
            let left = t.link(n, Link::Left);
            let go_right = (bits as isize) < 0;
            larger = select_unpredictable(!go_right & right.is_some(), right, larger);
            node = select_unpredictable(go_right, right, left);
            bits <<= 1;
        }
        // The smallest size of a subtree lies on its leftmost path.
        let mut node = larger;
        while let Some(n) = node {
            let size = t.size(n);
            let better = best.is_none() | (size < best_size);
            best = select_unpredictable(better, Some(n), best);
            best_size = select_unpredictable(better, size, best_size);
            node = left_else_right(t, n);
        }
        best.map(|c| (c, best_size))
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
        let mut size = min;
        while size <= S::LISTS {
            let Some(s) = self.first_list_at_least(size) else {
                break;
            };
            let mut c = self.ends.as_ref()[s - 1].head;
            while let Some(ch) = c {
                each(ch, s);
                c = t.link(ch, Link::Next);
            }
            size = s + 1;
        }
        self.table.each_at_least(t, min, &mut each);
        for b in Self::bin(min).max(Self::FIRST_TRIE_BIN)..=S::LAST_BIN {
            let Some(head) = self.roots.as_ref()[b - Self::FIRST_TRIE_BIN] else {
                continue;
            };
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
                    ring_each(t, n, size, &mut each);
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
        if self.tries != 0 {
            let b = Self::FIRST_TRIE_BIN + 63 - self.tries.leading_zeros() as usize;
            let root = self.roots.as_ref()[b - Self::FIRST_TRIE_BIN]?;
            Some(largest_size(t, root))
        } else if let Some(size) = self.table.largest() {
            Some(size)
        } else if self.summary != 0 {
            let w = 63 - self.summary.leading_zeros() as usize;
            Some(w * 64 + 64 - self.lists.as_ref()[w].leading_zeros() as usize)
        } else {
            None
        }
    }
}

/// Where [`Bins::trie_seek`]'s walk for a size ended.
enum Seek<C> {
    /// The trie is empty.
    Empty,
    /// The node of the size.
    Found(C),
    /// No node of the size: this node's child slot on that side is free and on its path.
    Vacant(C, Link),
}

/// Whether the trie root `c` is its bin's only chunk: no children, no ring.
#[inline]
fn is_lone_root<T: Tags>(t: &T, c: T::Chunk) -> bool {
    t.link(c, Link::Left).is_none()
        && t.link(c, Link::Right).is_none()
        && t.link(c, Link::Next) == Some(c)
}

/// The smallest node of the trie under `c` (the oldest of its size), with its size: it lies
/// on the leftmost path. Branch-free but for the loop's end, as [`Bins::trie_best_fit`] is.
#[inline]
fn smallest<T: Tags>(t: &T, c: T::Chunk) -> (T::Chunk, usize) {
    let mut best = (c, t.size(c));
    let mut node = left_else_right(t, c);
    while let Some(n) = node {
        let size = t.size(n);
        best = select_unpredictable(size < best.1, (n, size), best);
        node = left_else_right(t, n);
    }
    best
}

/// The left child of trie node `c`, else its right one: the next node of a leftmost path.
/// Both read and one selected, with no branch on which is there.
#[inline(always)]
fn left_else_right<T: Tags>(t: &T, c: T::Chunk) -> Option<T::Chunk> {
    let left = t.link(c, Link::Left);
    select_unpredictable(left.is_some(), left, t.link(c, Link::Right))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compact_tries_reach_past_random_sizes_before_the_open_ended_bin() {
        use crate::algo::bin_index::log_bin_min;
        use crate::Compact;
        type B = Bins<u32, Compact>;
        assert_eq!(B::FIRST_TRIE_BIN, 64);
        // 32 tree bins: the last, whose trie branches on every bit, from 14336 granules.
        assert_eq!(<Compact as Shape>::LAST_BIN, 95);
        assert_eq!(log_bin_min(95), 14336);
        assert_eq!(B::bin(14335), 94);
        assert_eq!(B::bin(14336), 95);
        assert_eq!(B::bin(usize::MAX), 95);
        assert_eq!(B::top_bit(94), 10);
        assert_eq!(B::top_bit(95), usize::BITS - 1);
    }

    #[test]
    fn only_compact_keeps_listed_sizes_in_tries() {
        use crate::Compact;
        for need in 1..=LIST_SIZES {
            assert!(!Bins::<u32, Wide>::listed_in_tries(need));
            assert_eq!(Bins::<u32, Compact>::listed_in_tries(need), need > 64);
        }
    }

    #[test]
    fn list_word_reports_the_map_and_which_ends_are_set() {
        let mut b: Bins<u32> = Bins::new();
        assert_eq!(b.list_word(0), (0, 0, 0));
        // A head without its tail or its map bit, and a tail in the unused last slot: the
        // masks show every disagreement for the check to report.
        b.ends[5].head = Some(1);
        b.lists[0] |= 1 << 9;
        b.ends[9].head = Some(2);
        b.ends[9].tail = Some(3);
        b.ends[Bins::<u32>::SLOTS - 1].tail = Some(4);
        assert_eq!(b.list_word(0), (1 << 9, 1 << 5 | 1 << 9, 1 << 9));
        assert_eq!(b.list_word(Bins::<u32>::MAP_WORDS - 1), (0, 0, 1 << 63));
        assert_eq!(b.list_word(1), (0, 0, 0));
    }
}
