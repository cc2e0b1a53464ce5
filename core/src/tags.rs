//! The tag placement abstraction: everything the shared algorithm needs to know about chunks,
//! and nothing about where their tags are stored.
//!
//! Two placements implement [`Tags`]: [`crate::inline`] keeps the tags inside the managed memory
//! (dlmalloc-style head word and footer, no side storage), [`crate::detached`] keeps them in a
//! host-side table of records and never touches the managed memory. Binning, best-fit search,
//! splitting and coalescing live in [`crate::bins`] and [`crate::heap`], written once against this
//! trait and monomorphised for each placement.

use crate::error::{CheckError, Error};

/// The free-structure links a free chunk carries while it sits in a bin.
///
/// Exact bins use `Next`/`Prev` as a FIFO list (`Next` towards newer chunks, `None` at both
/// ends). Logarithmic bins keep a bitwise trie of distinct sizes (`Left`, `Right`, `Parent`);
/// chunks of a size already in the trie hang off that node's circular `Next`/`Prev` ring,
/// oldest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Link {
    Next = 0,
    Prev = 1,
    Left = 2,
    Right = 3,
    Parent = 4,
}

/// Chunk tags, wherever they live.
///
/// Every byte of every region belongs to exactly one chunk; a chunk is `size()` granules long
/// and is either free or in use. A placement keeps its own tags consistent on every call (an
/// inline heap's footers and "previous in use" bits, an out-of-band table's neighbour links):
/// callers only ever see whole, consistent chunks.
///
/// Links are meaningful only while a chunk is free; the placement stores them wherever it likes
/// (inside the free chunk's own memory, or in its record).
pub(crate) trait Tags {
    /// A chunk: its address (inline) or its record index (out-of-band).
    type Chunk: Copy + Eq + core::fmt::Debug;
    /// A region: its header address (inline) or its record index (out-of-band).
    type Region: Copy + Eq;

    /// Bytes per granule (a power of two).
    fn granule_shift(&self) -> u32;
    /// Bytes of tag that precede the payload inside a chunk (inline head word; 0 out-of-band).
    fn head_bytes(&self) -> usize;
    /// `head_bytes() + granule − 1`: what a request is padded by before it is rounded down to
    /// granules.
    fn request_pad(&self) -> usize;
    /// The smallest chunk, in granules, that can carry a free chunk's links and tags.
    fn min_chunk(&self) -> usize;

    /// The chunk's length in granules.
    fn size(&self, c: Self::Chunk) -> usize;
    fn is_free(&self, c: Self::Chunk) -> bool;
    /// The address of the chunk's first usable byte.
    fn payload(&self, c: Self::Chunk) -> usize;
    /// The physically next chunk of the same region, `None` at the region's end.
    fn next(&self, c: Self::Chunk) -> Option<Self::Chunk>;
    /// The physically next chunk and its size, if it exists and is free.
    fn next_if_free(&self, c: Self::Chunk) -> Option<(Self::Chunk, usize)>;
    /// The physically previous chunk and its size, if it exists and is free (all that
    /// coalescing needs, and all that inline tags can tell without a footer of an in-use chunk).
    fn prev_if_free(&self, c: Self::Chunk) -> Option<(Self::Chunk, usize)>;

    /// Marks the chunk free or in use, updating whatever neighbour tags record its state.
    fn set_free(&mut self, c: Self::Chunk, free: bool);
    /// Splits `c` after `head` granules (`0 < head < size(c)`); `c` keeps the head and both
    /// parts keep `c`'s state. Returns the tail. Needs one spare record (see [`Tags::reserve`]).
    fn split(&mut self, c: Self::Chunk, head: usize) -> Self::Chunk;
    /// Merges `c`'s physical successor into `c`; the result has `c`'s state. Neither may be in
    /// a bin.
    fn absorb_next(&mut self, c: Self::Chunk);
    /// Makes sure `n` splits can happen without failing.
    fn reserve(&mut self, n: usize) -> Result<(), Error>;

    /// Hands out the free, unbinned chunk `c` of `size` granules whose successor is in use:
    /// marks its first `need` granules in use and returns the rest as a free chunk if that can
    /// stand alone (at least [`Tags::min_chunk`]), else marks all of `c` in use and returns
    /// `None`. Needs one spare record. The allocation fast path: a placement may do it in fewer
    /// tag writes than [`Tags::split`] and [`Tags::set_free`] do.
    #[inline]
    fn carve(&mut self, c: Self::Chunk, size: usize, need: usize) -> Option<Self::Chunk> {
        let tail = (size >= need + self.min_chunk()).then(|| self.split(c, need));
        self.set_free(c, false);
        tail
    }

    /// Frees the in-use chunk `c`, first merging it with `prev` (its physical predecessor)
    /// and `next` (its successor) where given: free chunks whose bin entries the caller has
    /// taken out or replaces with the merged chunk. `size` is the merged chunk's size in
    /// granules. Returns the merged free chunk, not yet filed. The free fast path: a placement
    /// may write the merged chunk's tags once.
    #[inline]
    fn free_merged(
        &mut self,
        c: Self::Chunk,
        prev: Option<Self::Chunk>,
        next: Option<Self::Chunk>,
        size: usize,
    ) -> Self::Chunk {
        let _ = size;
        let mut m = c;
        if let Some(p) = prev {
            self.absorb_next(p);
            m = p;
        }
        if next.is_some() {
            self.absorb_next(m);
        }
        self.set_free(m, true);
        m
    }

    fn link(&self, c: Self::Chunk, l: Link) -> Option<Self::Chunk>;
    fn set_link(&mut self, c: Self::Chunk, l: Link, v: Option<Self::Chunk>);

    fn first_region(&self) -> Option<Self::Region>;
    fn next_region(&self, r: Self::Region) -> Option<Self::Region>;
    fn region_first_chunk(&self, r: Self::Region) -> Self::Chunk;
    /// The region's chunk space in granules (what its chunks must add up to).
    fn region_granules(&self, r: Self::Region) -> usize;

    /// Verifies the placement's own tags for `c` (footer, neighbour bits or links, addresses
    /// contiguous with the successor, the region's end). `first` says `c` begins its region.
    fn check_tags(&self, c: Self::Chunk, first: bool) -> Result<(), CheckError>;
}
