//! The placement seam: everything the shared algorithm needs to know about chunks and regions,
//! and nothing about where their tags are stored.
//!
//! Two placements implement [`Tags`]: [`crate::inline::tags`] keeps the tags inside the
//! managed memory (dlmalloc-style head word and footer, no side storage),
//! [`crate::detached::tags`] keeps them in a host-side table of records and never touches the
//! managed memory. Binning and best fit ([`crate::algo::bins`]), the allocation algorithm
//! ([`crate::algo::heap`]), region management ([`crate::algo::region`]) and the invariant walk
//! ([`crate::algo::check`]) are written once against this trait and monomorphised for each
//! placement.
//!
//! # Contract
//!
//! **Who owns which bytes.** A placement owns its tags: every byte of every region belongs to
//! exactly one chunk, and the placement keeps each chunk's size and state, the links between
//! physical neighbours, and whatever records a region's extent. Inline tags live in the first
//! word of each chunk (and the last word of a free one) and in each region's header and fence;
//! everything else in an in-use chunk is its owner's. Detached tags live in the record table;
//! no byte of managed memory is ever read or written. A free chunk's bin links belong to the
//! bins ([`Tags::link`], [`Tags::set_link`]): the placement stores them (inside the chunk, or in
//! its record) but never interprets them.
//!
//! **What each method may assume.** Every `Chunk` passed in is a chunk of a region the
//! placement manages (a chunk handle is only ever obtained from the placement), and every
//! `Region` is on its region list. The callers keep the heap's invariants between calls: no two
//! free chunks are adjacent, and a chunk in a bin is free. Methods that change chunks say which
//! state they expect; [`Tags::reserve`] must have made room before a call that needs a record.
//! A placement keeps its own tags consistent on every call: callers only ever see whole,
//! consistent chunks.

use crate::algo::geometry::Geometry;
use crate::error::{CheckError, Error};

/// The free-structure links a free chunk carries while it sits in a bin.
///
/// Exact bins use `Next`/`Prev` as a FIFO list (`Next` towards newer chunks, `None` at both
/// ends). Tree bins keep a bitwise trie of distinct sizes (`Left`, `Right`, `Parent`); chunks
/// of a size already in the trie hang off that node's circular `Next`/`Prev` ring, oldest
/// first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Link {
    Next = 0,
    Prev = 1,
    Left = 2,
    Right = 3,
    Parent = 4,
}

/// Chunk and region tags, wherever they live (see the module docs for the contract).
pub(crate) trait Tags {
    /// A chunk: its head (inline) or its record (detached).
    type Chunk: Copy + Eq + core::fmt::Debug;
    /// A region: its header (inline) or its record (detached).
    type Region: Copy + Eq;
    /// Where a region starts, as its owner names it: a pointer (inline, which writes through
    /// it) or a plain address (detached).
    type Base: Copy;

    /// The placement's size arithmetic.
    fn geometry(&self) -> &Geometry;

    // Chunks.

    /// The chunk's length in granules.
    fn size(&self, c: Self::Chunk) -> usize;
    fn is_free(&self, c: Self::Chunk) -> bool;
    /// The chunk's length in granules if it is in use, `None` if it is free: both in one read
    /// of its tag, for the free path.
    fn used_size(&self, c: Self::Chunk) -> Option<usize>;
    /// The address of the chunk's first usable byte.
    fn payload(&self, c: Self::Chunk) -> usize;
    /// The address of the chunk, for reports: its head (inline) or its first byte (detached).
    fn addr(&self, c: Self::Chunk) -> usize;
    /// The physically next chunk of the same region, `None` at the region's end.
    fn next(&self, c: Self::Chunk) -> Option<Self::Chunk>;
    /// The physically next chunk after `c` (of `size` granules, as the caller knows) and its
    /// size, if it exists and is free.
    fn next_if_free(&self, c: Self::Chunk, size: usize) -> Option<(Self::Chunk, usize)>;
    /// The physically previous chunk and its size, if it exists and is free (all that
    /// coalescing needs, and all that inline tags can tell without a footer of an in-use chunk).
    fn prev_if_free(&self, c: Self::Chunk) -> Option<(Self::Chunk, usize)>;

    /// Splits `c` after `head` granules (`0 < head < size(c)`, both parts at least the
    /// minimum chunk); `c` keeps the head and both parts keep `c`'s state. Returns the tail.
    /// Needs one reserved record.
    fn split(&mut self, c: Self::Chunk, head: usize) -> Self::Chunk;
    /// Merges `c`'s physical successor into `c`; the result has `c`'s state. Neither may be in
    /// a bin.
    fn absorb_next(&mut self, c: Self::Chunk);
    /// Makes sure `n` records can be taken without failing (splits, new regions).
    fn reserve(&mut self, n: usize) -> Result<(), Error>;

    /// Hands out the free, unbinned chunk `c` of `size` granules, whose successor is in use:
    /// marks its first `need` granules in use and returns the rest as a free chunk if that can
    /// stand alone (at least the minimum chunk), else marks all of `c` in use and returns
    /// `None`. Needs one reserved record. The allocation fast path: each chunk's tags are
    /// written once.
    fn carve(&mut self, c: Self::Chunk, size: usize, need: usize) -> Option<Self::Chunk>;

    /// Frees the in-use chunk `c`, first merging it with `prev` (its physical predecessor)
    /// and `next` (its successor) where given: free chunks whose bin entries the caller has
    /// taken out or replaces with the merged chunk. `size` is the merged chunk's size in
    /// granules. Returns the merged free chunk, not yet filed. The free fast path: the merged
    /// chunk's tags are written once.
    fn free_merged(
        &mut self,
        c: Self::Chunk,
        prev: Option<Self::Chunk>,
        next: Option<Self::Chunk>,
        size: usize,
    ) -> Self::Chunk;

    /// A bin link of the free chunk `c`.
    fn link(&self, c: Self::Chunk, l: Link) -> Option<Self::Chunk>;
    /// Sets a bin link of the free chunk `c`.
    fn set_link(&mut self, c: Self::Chunk, l: Link, v: Option<Self::Chunk>);

    // Regions.

    /// The address a region base stands for.
    fn base_addr(b: Self::Base) -> usize;
    fn first_region(&self) -> Option<Self::Region>;
    fn next_region(&self, r: Self::Region) -> Option<Self::Region>;
    /// The region's base, as it was handed in.
    fn region_base(&self, r: Self::Region) -> Self::Base;
    /// The region's length in bytes, as handed in and grown (granule-rounded).
    fn region_len(&self, r: Self::Region) -> usize;
    fn region_first_chunk(&self, r: Self::Region) -> Self::Chunk;
    /// The region's chunk space in granules (what its chunks must add up to).
    fn region_granules(&self, r: Self::Region) -> usize;

    /// Makes `base..base + len` a region at the head of the region list, spanning one chunk,
    /// marked in use and not yet filed, which it returns. `len` is granule-rounded and leaves
    /// room for the region's overhead and a minimum chunk; the range overlaps no region. Needs
    /// two reserved records.
    ///
    /// # Safety
    /// Inline tags write into the range: it must be valid for reads and writes and owned by
    /// the heap until the region is closed (the contract of `add_region`).
    unsafe fn open_region(&mut self, base: Self::Base, len: usize) -> Self::Chunk;
    /// Grows region `r` by `len` bytes (granule-rounded, at least a minimum chunk, overlapping
    /// no region) right after its end; returns the new space as one chunk, marked in use and
    /// not yet filed. Needs one reserved record.
    ///
    /// # Safety
    /// As for [`Tags::open_region`], for the added range, which must also be reachable through
    /// the region's base (one allocation or mapping).
    unsafe fn grow_region(&mut self, r: Self::Region, len: usize) -> Self::Chunk;
    /// The region's last chunk and its size, if it is free.
    fn region_last_free(&self, r: Self::Region) -> Option<(Self::Chunk, usize)>;
    /// Cuts region `r` down to `len` bytes (granule-rounded): its last chunk `last`, free and
    /// taken out of the bins, keeps `size` granules (at least the minimum chunk) and the
    /// region ends right after it. The bytes past the new end are no longer the heap's.
    fn cut_region(&mut self, r: Self::Region, last: Self::Chunk, size: usize, len: usize);
    /// Forgets region `r`, whose only chunk `c` (free, taken out of the bins) spans it;
    /// `before` is the region ahead of it on the list.
    fn close_region(&mut self, r: Self::Region, before: Option<Self::Region>, c: Self::Chunk);

    // Checking.

    /// Verifies the placement's own tags for `c` (footer, neighbour bits or links, addresses
    /// contiguous with the successor, the region's end). `first` says `c` begins its region.
    fn check_tags(&self, c: Self::Chunk, first: bool) -> Result<(), CheckError>;
}
