//! The allocation algorithm, written once over [`Tags`]: best-fit allocation, aligned carving,
//! splitting, coalescing, resizing in place and the counters behind the statistics.
//! [`crate::InlineHeap`] and [`crate::DetachedHeap`] are thin typed front ends over [`Heap`];
//! region management lives in [`crate::algo::region`], the invariant walk in [`crate::algo::check`].

use crate::algo::bin_index::LIST_SIZES;
use crate::algo::bins::Bins;
use crate::algo::geometry::Geometry;
use crate::algo::shape::sealed::Shape;
use crate::algo::shape::Wide;
use crate::algo::stats::{Counters, Stats, Tally};
use crate::algo::tags::Tags;
use crate::error::{as_pair, Error};

/// The boundary, in granules, of a realloc's move (see [`Heap::shrink_target`]): a block moves
/// when its chunk is above it and the new size at or below it. It is the largest listed size
/// (32 KiB at the host granule), so the search is a bitmap lookup and the copy stays short.
pub(crate) const SHRINK_MOVE_MAX: usize = LIST_SIZES;

/// A heap over some tag placement.
///
/// Invariants: every byte of every region is in exactly one chunk; no two free chunks are
/// physically adjacent; every free chunk is in the bin of its size and nothing else is in a
/// bin, except the top (see [`Top`]) and the victim (see [`Victim`]), which are in none;
/// `tally` agrees with the chunks when it counts (see [`Tally`]).
/// [`Heap::check`] verifies all of them. The fields are private so that only the algorithm
/// changes chunks: front ends read the tags through [`Heap::tags`] and change the heap through
/// its methods.
pub(crate) struct Heap<T: Tags, K: Tally = Counters, S: Shape = Wide> {
    tags: T,
    bins: Bins<T::Chunk, S>,
    top: Top<T::Chunk>,
    victim: Victim<T::Chunk>,
    tally: K,
}

/// The top: the free end of the top region, kept out of the bins and carved only when no
/// binned chunk fits (dlmalloc's top chunk; Wilson et al.,
/// "Dynamic Storage Allocation: A Survey and Critical Review", 1995, on preserving the
/// "wilderness"). A heap that grows allocates most new blocks from the region's end: from the
/// top that is a carve and no bin operation, and a free that merges back into the top files
/// nothing.
///
/// The top region is the region grown last, or, until one is grown, the first region added
/// (a heap's growth continues there); removing it leaves none until the next is added or
/// grown.
///
/// Invariant: `end` is where the chunks of the top region end (the address just past its last
/// chunk, as [`Tags::addr`] counts; 0 when there is no top region); `chunk` is the chunk that
/// ends there when that chunk is free, and `None` otherwise. No binned chunk ends at `end`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Top<C> {
    pub chunk: Option<C>,
    pub end: usize,
}

/// The victim: the rest of the chunk carved last for a listed request (dlmalloc's "designated
/// victim"), kept out of the bins, so that the listed requests after it are carved from it one
/// after another, at neighbouring addresses and with no bin operation.
///
/// The policy it makes (what `crate::model::reference` predicts): a request of a listed size
/// (at most `LIST_SIZES` granules) aligned to at most the granule takes, in this order, the
/// oldest free chunk of exactly its size; the victim, if large enough (what is left of it
/// stays the victim); the best fit among the binned chunks (its rest becomes the victim, and
/// the old victim is filed into its bin); the top. Any other request (aligned above the
/// granule, above the lists, a realloc's move) first files the victim if it fits, then takes
/// the best fit as always. A free whose only free neighbour is the victim merges
/// into it (unless the merged chunk would end the top region); with the victim and another free
/// neighbour, the victim is filed first and the free merges as any other.
///
/// Why: exact best fit alone takes the smallest chunk that fits even when it lies far from the
/// last allocation, and pays a bin operation for every rest; the victim made the traces'
/// replays faster at no higher footprint (figures: `docs/measurements.md#heaprs-the-victim`).
///
/// Invariant: the chunk is free, in no bin, not the top, and does not end the top region; the
/// size beside it is its size in granules (kept so that no request reads the chunk's tag to
/// know whether the victim serves it).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Victim<C> {
    pub chunk: Option<(C, usize)>,
}

impl<C: Copy + Eq> Victim<C> {
    const NONE: Self = Victim { chunk: None };

    /// The victim and its size, if it has at least `need` granules.
    #[inline(always)]
    fn fitting(&self, need: usize) -> Option<(C, usize)> {
        self.chunk.filter(|&(_, size)| size >= need)
    }

    /// Whether `c` is the victim.
    #[inline(always)]
    fn is(&self, c: C) -> bool {
        self.chunk.is_some_and(|(v, _)| v == c)
    }

    /// The victim's size in granules, 0 when there is none.
    #[inline]
    fn size(&self) -> usize {
        self.chunk.map_or(0, |(_, size)| size)
    }
}

impl<T: Tags, K: Tally, S: Shape> Heap<T, K, S> {
    pub const fn new(tags: T) -> Self {
        Heap {
            tags,
            bins: Bins::new(),
            top: Top {
                chunk: None,
                end: 0,
            },
            victim: Victim::NONE,
            tally: K::NEW,
        }
    }

    /// The placement, to read.
    #[inline]
    pub fn tags(&self) -> &T {
        &self.tags
    }

    #[inline]
    fn geometry(&self) -> &Geometry {
        self.tags.geometry()
    }

    /// The placement, to change regions ([`crate::algo::region`] only: it never touches a chunk in
    /// a bin, and hands every chunk it makes or takes back to [`Heap::add_space`] and
    /// [`Heap::remove_space`]).
    #[inline]
    pub(crate) fn tags_mut(&mut self) -> &mut T {
        &mut self.tags
    }

    /// The bins, to read (for the invariant walk).
    pub(crate) fn bins(&self) -> &Bins<T::Chunk, S> {
        &self.bins
    }

    /// The counters, to read (for the invariant walk), if this heap keeps them.
    pub(crate) fn counters(&self) -> Option<&Counters> {
        self.tally.counters()
    }

    /// The top, to read (for the invariant walk and the walks of free chunks).
    pub(crate) fn top(&self) -> Top<T::Chunk> {
        self.top
    }

    /// The victim, to read (for the invariant walk and the walks of free chunks).
    pub(crate) fn victim(&self) -> Victim<T::Chunk> {
        self.victim
    }

    /// Where the chunk `c` of `size` granules ends (the address just past it).
    #[inline]
    fn end_of(&self, c: T::Chunk, size: usize) -> usize {
        self.tags.addr(c) + self.geometry().bytes_of(size)
    }

    /// Whether the free chunk `c` of `size` granules ends the top region, so is the top.
    #[inline]
    pub(crate) fn ends_top(&self, c: T::Chunk, size: usize) -> bool {
        self.end_of(c, size) == self.top.end
    }

    /// Adds a fresh in-use chunk spanning new chunk space (a new region, or the growth of one):
    /// counts it as managed, moves the top region if it must (see [`Top`]), and files it,
    /// merging with a free predecessor.
    pub(crate) fn add_space(&mut self, c: T::Chunk, new_region: bool) {
        let size = self.tags.size(c);
        self.tally.space_added(size, new_region);
        let end = self.end_of(c, size);
        if new_region {
            // A new region is the top region only if there is none: a region added beside
            // it (a block's own, a source that cannot grow in place) is best-fit space.
            if self.top.end == 0 {
                self.top.end = end;
            }
        } else {
            // Growth makes its region the top region: the growth of the top region continues
            // it (the new space starts where its chunks ended); for another region, the old
            // top goes into the bins.
            if self.tags.addr(c) != self.top.end {
                if let Some(old) = self.top.chunk.take() {
                    let old_size = self.tags.size(old);
                    self.bins.insert(&mut self.tags, old, old_size);
                }
            }
            self.top.end = end;
        }
        self.coalesce_and_file(c, size);
    }

    /// Files the free, unbinned chunk `c`, which has become `size` granules after its region
    /// was cut `cut` granules shorter, and stops counting those as managed. If the region was
    /// the top region, it stays the top region, ending where `c` now ends.
    pub(crate) fn refile(&mut self, c: T::Chunk, size: usize, cut: usize) {
        self.tally.space_removed(cut, false);
        if self.ends_top(c, size + cut) {
            self.top.end = self.end_of(c, size);
        }
        self.file_free(c, size);
    }

    /// Takes the free chunk `c` that spans a whole region out of the heap, before the placement
    /// forgets the region (and the top region with it, if it was).
    pub(crate) fn remove_space(&mut self, c: T::Chunk) {
        let size = self.tags.size(c);
        self.unfile(c, size);
        if self.ends_top(c, size) {
            self.top.end = 0;
        }
        self.tally.space_removed(size, true);
    }

    /// Allocates `size` bytes whose payload is aligned to `align`.
    ///
    /// The fast paths are `#[inline(always)]` from the placements' entry points down (both
    /// placements' `alloc` and `free`): this, [`Heap::alloc_granules`], and for a free
    /// [`Heap::free_in_use`] or [`Heap::free_sized`] through `coalesce_and_file` and `file_free`
    /// to `Bins::insert`. With `#[inline]` a build with LTO and one codegen unit left some of
    /// them out of line and ran slower (figures:
    /// `docs/measurements.md#heaprs-the-fast-paths-always-inlined`).
    #[inline(always)]
    pub fn alloc(&mut self, size: usize, align: usize) -> Result<T::Chunk, Error> {
        if !self.geometry().granule_aligned(align) {
            let (c, e) = self.alloc_aligned(size, align);
            return c.ok_or(e);
        }
        let need = self.geometry().granules_for(size)?;
        self.alloc_granules(need)
    }

    /// Allocates a chunk of `need` granules (from [`Geometry::granules_for`]) at the granule's
    /// alignment, as [`Victim`] says: for a listed size, a chunk of exactly that size, else
    /// the victim, else the best fit; for a larger one, the best fit.
    ///
    /// A request a list or the victim serves is handled inline; the rest out of line, so that
    /// the common path needs no callee-saved register: a listed size through
    /// [`Heap::alloc_granules_slow`], a larger one straight to [`Heap::alloc_unlisted`].
    #[inline(always)]
    pub fn alloc_granules(&mut self, need: usize) -> Result<T::Chunk, Error> {
        self.tags.reserve(1)?;
        if need <= LIST_SIZES {
            if Bins::<T::Chunk, S>::listed_in_tries(need) && self.victim.fitting(need).is_none() {
                // In a trie, the oldest chunk of exactly `need` granules is also the best fit,
                // so unless the victim comes between them, one search finds it, not an exact
                // walk and then a best-fit walk of the same path.
                return self.alloc_granules_slow(need).ok_or_else(out_of_memory);
            }
            if let Some(c) = self.bins.pop_exact(&mut self.tags, need) {
                self.carve_counted(c, need, need);
                return Ok(c);
            }
            // The victim, else the best fit among the lists, carved in one place: with a carve
            // for each, the compiler called the placement's carve out of line.
            let (c, have) = match self.victim.fitting(need) {
                Some(found) => {
                    self.victim = Victim::NONE;
                    found
                }
                None => match self.bins.pop_listed(&mut self.tags, need) {
                    Some(found) => found,
                    None => return self.alloc_granules_slow(need).ok_or_else(out_of_memory),
                },
            };
            return Ok(match self.carve_counted(c, have, need) {
                Some(tail) => self.replace_victim(c, tail, have - need),
                None => c,
            });
        }
        self.alloc_unlisted(need).ok_or_else(out_of_memory)
    }

    /// Makes the free, unbinned chunk `tail` of `size` granules (the rest of the carve of `c`
    /// for a listed request) the victim and files the old one into its bin; returns `c`.
    ///
    /// The old victim is always listed here: the callers carve `c` from the victim itself
    /// (and take it first) or from another chunk because the victim was smaller than the
    /// listed request. So the filing is a list push, inline, with no call. A victim above the
    /// lists (which [`Bins::insert`] would file through a call of the size table or the tries)
    /// goes to a function of its own that hands `c` back, so that no value of the allocation
    /// lives across a call either way: with `Bins::insert` inlined here, every allocation
    /// saved and restored callee-saved registers (figures:
    /// `docs/measurements.md#heaprs-no-value-across-a-call-when-the-victim-is-replaced`).
    #[inline(always)]
    fn replace_victim(&mut self, c: T::Chunk, tail: T::Chunk, size: usize) -> T::Chunk {
        match self.victim.chunk.replace((tail, size)) {
            Some((v, vsize)) if vsize <= LIST_SIZES => {
                self.bins.push_listed(&mut self.tags, v, vsize);
                c
            }
            Some((v, vsize)) => self.file_unlisted_passing(v, vsize, c),
            None => c,
        }
    }

    /// Files the free chunk `v` of `vsize` granules, above the lists, and returns `c`
    /// untouched (see [`Heap::replace_victim`], whose callers never get here: the branch keeps
    /// it right for any victim, and debug builds say so if one ever does).
    #[inline(never)]
    #[cold]
    fn file_unlisted_passing(&mut self, v: T::Chunk, vsize: usize, c: T::Chunk) -> T::Chunk {
        debug_assert!(
            false,
            "a victim of {vsize} granules replaced by a listed carve"
        );
        self.bins.insert(&mut self.tags, v, vsize);
        c
    }

    /// Files the victim into its bin if it has at least `want` granules, so that a request
    /// that does not take the victim as such (see [`Victim`]) takes the best fit among all
    /// the free chunks but the top, the victim included (the newest of its size). Only then: a
    /// victim too small could not be the answer, and a request that fails leaves the heap as it
    /// was.
    #[inline(always)]
    fn file_victim_if_fits(&mut self, want: usize) {
        if self.victim.fitting(want).is_some() {
            self.file_victim();
        }
    }

    /// Files the victim, if any, into its bin.
    #[inline(always)]
    pub(crate) fn file_victim(&mut self) {
        if let Some((v, size)) = self.victim.chunk.take() {
            self.bins.insert(&mut self.tags, v, size);
        }
    }

    /// [`Heap::alloc_granules`] for a listed size that no list serves: from the chunks above
    /// the lists (the size table's, then the tries'), else from the top; `None` when neither
    /// has room. An `Option`, a single register, rather than a `Result`, which would be
    /// returned through memory.
    ///
    /// Any chunk above the lists is larger than a listed size, so with none of them free the
    /// request goes straight to the top. That case is a leaf with no callee-saved register (a
    /// third of wee-gcc-hello's allocations take it), and the other jumps on to
    /// [`Heap::alloc_above_lists`], whose registers only it pays for.
    #[inline(never)]
    fn alloc_granules_slow(&mut self, need: usize) -> Option<T::Chunk> {
        if self.bins.has_unlisted() {
            return self.alloc_above_lists(need);
        }
        self.alloc_top(need)
    }

    /// A listed size from the best fit above the lists, else the top (called with one free
    /// above the lists; with every listed size in a list, every such chunk is larger, so one is
    /// always found: see [`Bins::take_above_lists`]). Its rest becomes the victim: the carve
    /// keeps it and gives the bins nothing to file.
    #[inline(never)]
    fn alloc_above_lists(&mut self, need: usize) -> Option<T::Chunk> {
        let mut rest = None;
        let taken = self
            .bins
            .take_above_lists(&mut self.tags, need, |t, c, have| {
                rest = t.carve(c, have, need).map(|tail| (tail, have - need));
                None
            });
        let Some((c, have)) = taken else {
            return self.alloc_top(need);
        };
        self.counted_carve(need, have);
        Some(match rest {
            Some((tail, size)) => self.replace_victim(c, tail, size),
            None => c,
        })
    }

    /// A size above the lists: the best fit among the binned chunks, else the top; `None` when
    /// neither has room. Its own function, so that the search of the table and the tries,
    /// inlined here, costs the listed sizes' paths no register.
    #[inline(never)]
    fn alloc_unlisted(&mut self, need: usize) -> Option<T::Chunk> {
        self.file_victim_if_fits(need);
        self.take_best_counted(need)
            .or_else(|| self.alloc_top(need))
    }

    /// The best fit for `need` granules among the binned chunks (never the top), carved and
    /// counted as an allocation; `None` when no binned chunk fits.
    #[inline(always)]
    fn take_best_counted(&mut self, need: usize) -> Option<T::Chunk> {
        let (c, have) = self.bins.take_best(&mut self.tags, need, carver(need))?;
        self.counted_carve(need, have);
        Some(c)
    }

    /// Carves `need` granules from the top, if it has them; what is left stays the top.
    #[inline(always)]
    fn alloc_top(&mut self, need: usize) -> Option<T::Chunk> {
        let (c, have) = self.take_top(need)?;
        // The rest, if any, still ends the top region.
        self.top.chunk = self.carve_counted(c, have, need);
        Some(c)
    }

    /// Where a realloc of the in-use chunk `c` to `need` granules aligned to `align` moves the
    /// block before anything else is tried: when `c` is above [`SHRINK_MOVE_MAX`] (a trie
    /// size), `need` at or below it (a listed size) and `align` at most the granule, the best
    /// fit for `need` among the binned free chunks (never the top), carved and counted as an
    /// allocation; `None` (the realloc goes on in place if it can) otherwise, or when no binned
    /// chunk fits.
    ///
    /// Why: a large block shrunk in place keeps a small piece of a large span in use, between
    /// the free tail and whatever precedes it; moved into the smallest hole that takes it, the
    /// whole span is freed and merges with its free neighbours, and small holes are used up
    /// instead of large ones: it raised talc's heap-efficiency figure, above the other rules
    /// tried, and moving small blocks too bought nothing (figures:
    /// `docs/measurements.md#heaprs-a-shrinking-realloc-moves-out-of-the-tries`). Unlike
    /// mimalloc, a shrink that finds no hole stays in place rather than taking new space.
    #[inline]
    pub fn shrink_target(&mut self, c: T::Chunk, need: usize, align: usize) -> Option<T::Chunk> {
        if self.tags.size(c) <= SHRINK_MOVE_MAX
            || need > SHRINK_MOVE_MAX
            || !self.geometry().granule_aligned(align)
        {
            return None;
        }
        self.shrink_target_slow(need)
    }

    /// [`Heap::shrink_target`]'s search, out of line.
    #[inline(never)]
    fn shrink_target_slow(&mut self, need: usize) -> Option<T::Chunk> {
        self.tags.reserve(1).ok()?;
        self.file_victim_if_fits(need);
        self.take_best_counted(need)
    }

    /// Takes the top out of the heap's free space if it has at least `want` granules: the
    /// chunk and its size, free and in no bin, its successor the region's end.
    #[inline]
    fn take_top(&mut self, want: usize) -> Option<(T::Chunk, usize)> {
        let c = self.top.chunk?;
        let size = self.tags.size(c);
        if size < want {
            return None;
        }
        self.top.chunk = None;
        Some((c, size))
    }

    /// Hands out the free, unbinned chunk `c` of `have` granules for `need` ([`Tags::carve`])
    /// and counts it, by which way the carve went; returns the free rest, not yet filed.
    #[inline(always)]
    fn carve_counted(&mut self, c: T::Chunk, have: usize, need: usize) -> Option<T::Chunk> {
        let tail = self.tags.carve(c, have, need);
        match tail {
            Some(_) => self.counted_out(need),
            None => {
                self.tally.unfiled();
                self.counted_out(have);
            }
        }
        tail
    }

    /// Counts an allocation of `need` granules carved from a chunk of `have` (see `carver`).
    #[inline(always)]
    fn counted_carve(&mut self, need: usize, have: usize) {
        let min = self.geometry().min_chunk();
        // `carve` split off a free tail exactly when it could stand alone.
        if have - need >= min {
            self.counted_out(need);
        } else {
            self.tally.unfiled();
            self.counted_out(have);
        }
    }

    /// [`Heap::alloc`] for alignments above the granule (and bad ones), out of line: the
    /// chunk, or `None` and the error, as a pair ([`as_pair`]), so that no allocation sets up
    /// a stack slot for a `Result`.
    #[inline(never)]
    fn alloc_aligned(&mut self, size: usize, align: usize) -> (Option<T::Chunk>, Error) {
        as_pair(self.alloc_aligned_result(size, align))
    }

    /// [`Heap::alloc_aligned`]'s work, as a `Result`.
    #[inline(always)]
    fn alloc_aligned_result(&mut self, size: usize, align: usize) -> Result<T::Chunk, Error> {
        let (need, want) = self.geometry().request(size, align)?;
        self.tags.reserve(2)?;
        self.file_victim_if_fits(want);
        let (mut c, mut have) = match self.bins.take_best(&mut self.tags, want, |_, _, _| None) {
            Some(found) => found,
            None => self.take_top(want).ok_or(Error::OutOfMemory)?,
        };
        self.tally.unfiled();
        let lead = self.geometry().lead_granules(self.tags.payload(c), align);
        if lead > 0 {
            // The leading fragment stays free; its predecessor is in use (it was next to a
            // free chunk), and its successor is about to be.
            let rest = self.tags.split(c, lead);
            self.file_free(c, lead);
            (c, have) = (rest, have - lead);
        }
        // `c` is out of the bins (or was the top), so its successor is in use and the tail
        // needs no coalescing; filing it makes it the top if it ends the top region.
        let used = match self.tags.carve(c, have, need) {
            Some(tail) => {
                self.file_free(tail, have - need);
                need
            }
            None => have,
        };
        self.counted_out(used);
        Ok(c)
    }

    /// Counts a chunk of `used` granules handed out. It is counted once it has its final size,
    /// so the peak never sees a transient.
    #[inline]
    fn counted_out(&mut self, used: usize) {
        self.tally.handed_out(used);
    }

    /// Cuts the in-use chunk `c` down to `keep` granules if the rest can stand as a free chunk,
    /// and frees the rest (coalescing it with a free successor). Leaves `used` to the caller.
    fn release_tail(&mut self, c: T::Chunk, keep: usize) {
        let have = self.tags.size(c);
        if have >= keep + self.geometry().min_chunk() {
            let tail = self.tags.split(c, keep);
            self.coalesce_and_file(tail, have - keep);
        }
    }

    /// Frees the in-use chunk `c`.
    #[inline]
    pub fn free(&mut self, c: T::Chunk) {
        self.free_sized(c, self.tags.size(c));
    }

    /// Frees `c` if its tag says it is in use; otherwise counts a refused free and returns
    /// `DoubleFree` (all a placement's tag can tell without further validation).
    #[inline(always)]
    pub fn free_in_use(&mut self, c: T::Chunk) -> Result<(), Error> {
        match self.tags.used_size(c) {
            Some(size) => {
                self.free_sized(c, size);
                Ok(())
            }
            None => Err(self.refused(Error::DoubleFree)),
        }
    }

    /// Frees the in-use chunk `c` of `size` granules (its size, already read by the caller).
    #[inline(always)]
    pub fn free_sized(&mut self, c: T::Chunk, size: usize) {
        self.tally.freed(size);
        self.coalesce_and_file(c, size);
    }

    /// [`Heap::free_sized`] of a chunk whose free neighbours the caller has read already (a
    /// proof of the block that checked their tags): `prev` and `next` as
    /// [`Tags::prev_if_free`] and [`Tags::next_if_free`] give them, so that they are not read
    /// again.
    #[inline(always)]
    pub fn free_beside(
        &mut self,
        c: T::Chunk,
        size: usize,
        prev: Option<(T::Chunk, usize)>,
        next: Option<(T::Chunk, usize)>,
    ) {
        self.tally.freed(size);
        self.coalesce_beside(c, size, prev, next);
    }

    /// Counts a free refused for `e` and returns `e`.
    #[cold]
    pub fn refused(&mut self, e: Error) -> Error {
        self.tally.refused();
        e
    }

    /// Frees the unbinned chunk `c` of `size` granules, marked in use and not counted as free,
    /// merging it with free neighbours first so that no two free chunks are ever adjacent.
    #[inline(always)]
    fn coalesce_and_file(&mut self, c: T::Chunk, size: usize) {
        let (prev, next) = (self.tags.prev_if_free(c), self.tags.next_if_free(c, size));
        self.coalesce_beside(c, size, prev, next);
    }

    /// [`Heap::coalesce_and_file`] with `c`'s free neighbours read already.
    #[inline(always)]
    fn coalesce_beside(
        &mut self,
        c: T::Chunk,
        size: usize,
        prev: Option<(T::Chunk, usize)>,
        next: Option<(T::Chunk, usize)>,
    ) {
        // The common cases inline: at most one free neighbour, and every size involved kept
        // in a list. The rest out of line, so that these paths need few callee-saved
        // registers. A merge with one neighbour leaves the number of free chunks as it was.
        // The top is never a predecessor (it ends its region). A merge with the top as the
        // successor stays the top; one that ends the top region otherwise goes the slow way,
        // which keeps the merged chunk out of the bins.
        match (prev, next) {
            (None, None) if size <= LIST_SIZES => {
                let m = self.tags.free_merged(c, None, None, size);
                self.file_free(m, size);
            }
            (Some((p, ps)), None)
                if size + ps <= LIST_SIZES && !self.ends_top(c, size) && !self.victim.is(p) =>
            {
                self.bins.unlink_listed(&mut self.tags, p, ps);
                let m = self.tags.free_merged(c, Some(p), None, size + ps);
                self.bins.push_listed(&mut self.tags, m, size + ps);
            }
            (None, Some((n, ns))) if self.top.chunk == Some(n) => {
                // Merged into the top, which stays the top: no bin is touched.
                let m = self.tags.free_merged(c, None, Some(n), size + ns);
                self.top.chunk = Some(m);
            }
            (None, Some((n, ns))) if size + ns <= LIST_SIZES && !self.victim.is(n) => {
                self.bins.unlink_listed(&mut self.tags, n, ns);
                let m = self.tags.free_merged(c, None, Some(n), size + ns);
                self.bins.push_listed(&mut self.tags, m, size + ns);
            }
            _ => self.coalesce_and_file_slow(c, size),
        }
    }

    /// [`Heap::coalesce_and_file`] when both neighbours are free, a size is above the lists,
    /// the merged chunk ends the top region, or a neighbour is the victim.
    #[inline(never)]
    fn coalesce_and_file_slow(&mut self, c: T::Chunk, size: usize) {
        let prev = self.tags.prev_if_free(c);
        let next = self.tags.next_if_free(c, size);
        if let Some((v, vsize)) = self.victim.chunk {
            let total = size + vsize;
            let merged = match (prev, next) {
                // The victim grows by `c` and stays the victim (at its address).
                (Some((p, _)), None) if p == v && !self.ends_top(c, size) => {
                    Some(self.tags.free_merged(c, Some(p), None, total))
                }
                // The victim grows back over `c` (the victim never ends the top region, so
                // neither does the merged chunk).
                (None, Some((n, _))) if n == v => {
                    Some(self.tags.free_merged(c, None, Some(n), total))
                }
                _ => None,
            };
            if let Some(m) = merged {
                self.victim = Victim {
                    chunk: Some((m, total)),
                };
                return;
            }
            if prev.is_some_and(|(p, _)| p == v) || next.is_some_and(|(n, _)| n == v) {
                // Merged with another free neighbour too, or into the top: the victim is filed
                // first, and the merge goes on as for any free neighbours.
                self.file_victim();
            }
        }
        let at_top = match next {
            Some((n, _)) => self.top.chunk == Some(n),
            None => self.ends_top(c, size),
        };
        if at_top {
            // The merged chunk is the top: its free neighbours leave their places (the bins,
            // or the top), and it is filed as the top.
            let mut total = size;
            if let Some((p, ps)) = prev {
                self.unfile(p, ps);
                total += ps;
            }
            if let Some((n, ns)) = next {
                self.unfile(n, ns);
                total += ns;
            }
            let m = self
                .tags
                .free_merged(c, prev.map(|(p, _)| p), next.map(|(n, _)| n), total);
            self.file_free(m, total);
            return;
        }
        // The merged chunk takes the bin place of its successor, else of its predecessor.
        match (prev, next) {
            (None, None) => {
                let m = self.tags.free_merged(c, None, None, size);
                self.file_free(m, size);
            }
            (Some((p, ps)), None) => {
                let total = size + ps;
                self.bins.merge_into(&mut self.tags, p, ps, total, |t| {
                    t.free_merged(c, Some(p), None, total)
                });
            }
            (None, Some((n, ns))) => {
                let total = size + ns;
                self.bins.merge_into(&mut self.tags, n, ns, total, |t| {
                    t.free_merged(c, None, Some(n), total)
                });
            }
            (Some((p, ps)), Some((n, ns))) => {
                self.unfile(p, ps);
                let total = size + ps + ns;
                self.bins.merge_into(&mut self.tags, n, ns, total, |t| {
                    t.free_merged(c, Some(p), Some(n), total)
                });
            }
        }
    }

    /// Puts the free chunk `c` of `size` granules into its bin, or makes it the top if it ends
    /// the top region.
    #[inline(always)]
    fn file_free(&mut self, c: T::Chunk, size: usize) {
        self.tally.filed();
        if self.ends_top(c, size) {
            self.top.chunk = Some(c);
        } else {
            self.bins.insert(&mut self.tags, c, size);
        }
    }

    /// Takes the free chunk `c` of `size` granules out of its bin, or out of the top or the
    /// victim (to merge or hand it out).
    #[inline]
    pub(crate) fn unfile(&mut self, c: T::Chunk, size: usize) {
        self.tally.unfiled();
        if self.top.chunk == Some(c) {
            self.top.chunk = None;
        } else if self.victim.is(c) {
            self.victim = Victim::NONE;
        } else {
            self.bins.remove(&mut self.tags, c, size);
        }
    }

    /// Resizes the in-use chunk `c` in place to serve `size` bytes: shrinks it (freeing the
    /// tail) or grows it into a free successor. Fails with `OutOfMemory` when it cannot grow in
    /// place; `c` is unchanged then.
    #[inline]
    pub fn resize_in_place(&mut self, c: T::Chunk, size: usize) -> Result<(), Error> {
        let need = self.geometry().granules_for(size)?;
        match self.resize_granules(c, need)? {
            true => Ok(()),
            false => Err(Error::OutOfMemory),
        }
    }

    /// [`Heap::resize_in_place`] to `need` granules (from [`Geometry::granules_for`]): `true`
    /// when done, `false` when `c` cannot grow in place (it is unchanged then).
    ///
    /// Inlined, so that the common answer of a growing realloc, "not in place", costs a read
    /// of the successor's tag and no call; a resize that happens runs out of line.
    #[inline]
    pub fn resize_granules(&mut self, c: T::Chunk, need: usize) -> Result<bool, Error> {
        self.tags.reserve(1)?;
        let have = self.tags.size(c);
        if need <= have {
            self.shrink(c, have, need);
        } else {
            match self.tags.next_if_free(c, have) {
                Some((n, size)) if have + size >= need => {
                    self.grow_into_next(c, have, n, size, need)
                }
                _ => return Ok(false),
            }
        }
        Ok(true)
    }

    /// Splits the in-use chunk `c` after `keep` granules into two in-use chunks and returns
    /// the tail; `None` (and `c` unchanged) when either part would be smaller than the minimum
    /// chunk. The tail counts as a chunk handed out, with no bytes added to those in use: what
    /// a caller does that hands out part of a chunk it holds and keeps the rest (a device pool
    /// taking part of a block that still waits for another stream).
    pub fn split_in_use(&mut self, c: T::Chunk, keep: usize) -> Result<Option<T::Chunk>, Error> {
        self.tags.reserve(1)?;
        let have = self.tags.size(c);
        let min = self.geometry().min_chunk();
        if keep < min || have < keep + min {
            return Ok(None);
        }
        let tail = self.tags.split(c, keep);
        self.tally.handed_out(0);
        Ok(Some(tail))
    }

    /// Merges the in-use chunk `c` with its physical successor `n`, in use too: the inverse of
    /// [`Heap::split_in_use`]. `false` (and nothing changed) when `n` is not `c`'s successor in
    /// use. The successor counts as a chunk freed, with no bytes taken from those in use.
    pub fn merge_in_use(&mut self, c: T::Chunk, n: T::Chunk) -> bool {
        if self.tags.next(c) != Some(n) || self.tags.is_free(n) {
            return false;
        }
        self.tags.absorb_next(c);
        self.tally.freed(0);
        true
    }

    /// Shrinks the in-use chunk `c` of `have` granules to `need` (at most `have`), freeing
    /// the tail if it can stand alone.
    #[inline(never)]
    fn shrink(&mut self, c: T::Chunk, have: usize, need: usize) {
        self.release_tail(c, need);
        self.tally.shrank(have - self.tags.size(c));
    }

    /// Grows the in-use chunk `c` of `have` granules to `need` by merging its free successor
    /// `n` of `size` granules (large enough) into it, and frees what it does not need of that.
    #[inline(never)]
    fn grow_into_next(&mut self, c: T::Chunk, have: usize, n: T::Chunk, size: usize, need: usize) {
        self.unfile(n, size);
        self.tags.absorb_next(c);
        self.release_tail(c, need);
        // Counted at the final size, so the peak never sees the transient.
        self.tally.grew(self.tags.size(c) - have);
    }

    /// The chunk size `c` was allocated with may be `size` bytes (see [`Geometry::size_fits`]).
    #[inline]
    pub fn size_fits(&self, c: T::Chunk, size: usize) -> bool {
        self.geometry().size_fits(self.tags.size(c), size)
    }
}

impl<T: Tags, S: Shape> Heap<T, Counters, S> {
    pub fn stats(&self) -> Stats {
        let top = self.top.chunk.map_or(0, |c| self.tags.size(c));
        let largest = self
            .bins
            .largest(&self.tags)
            .unwrap_or(0)
            .max(top)
            .max(self.victim.size());
        self.tally
            .to_stats(self.geometry().shift(), largest, self.geometry().head())
    }
}

/// The carving step of an allocation of `need` granules, for [`Bins::take_best`]: the chunk's
/// first `need` granules handed out, the rest returned as a free chunk if it can stand alone.
#[inline(always)]
fn carver<T: Tags>(
    need: usize,
) -> impl FnOnce(&mut T, T::Chunk, usize) -> Option<(T::Chunk, usize)> {
    move |t, c, have| {
        let tail = t.carve(c, have, need)?;
        Some((tail, have - need))
    }
}

#[cold]
fn out_of_memory() -> Error {
    Error::OutOfMemory
}
