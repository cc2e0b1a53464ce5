//! The allocation algorithm, written once over [`Tags`]: size rounding, best-fit search,
//! aligned carving, splitting, coalescing, resizing in place, statistics and the invariant walk.
//! [`crate::InlineHeap`] and [`crate::DetachedHeap`] are thin typed front ends over [`Heap`].

use crate::bins::Bins;
use crate::error::{CheckError, Error};
use crate::stats::{Counters, Stats};
use crate::tags::Tags;

/// The largest granule a heap accepts: 1 GiB, the largest page size in use. Below it, no size,
/// tag or alignment computation can overflow (a request's padding stays far below
/// `isize::MAX`), and any real region still holds chunks.
pub const MAX_GRANULE: usize = 1 << 30;

/// A heap over some tag placement.
///
/// Invariants: every byte of every region is in exactly one chunk; no two free chunks are
/// physically adjacent; every free chunk is in the bin of its size and nothing else is in a
/// bin; `counters` agree with the chunks. [`Heap::check`] verifies all of them.
pub(crate) struct Heap<T: Tags> {
    pub tags: T,
    bins: Bins<T::Chunk>,
    pub counters: Counters,
}

impl<T: Tags> Heap<T> {
    pub const fn new(tags: T) -> Self {
        Heap {
            tags,
            bins: Bins::new(),
            counters: Counters::new(),
        }
    }

    fn shift(&self) -> u32 {
        self.tags.granule_shift()
    }

    /// The chunk size in granules that serves `size` bytes: the head tag added, rounded up to
    /// granules, at least the minimum chunk.
    #[inline]
    pub fn granules_for(&self, size: usize) -> Result<usize, Error> {
        let pad = self.tags.request_pad();
        // One comparison refuses both a zero size (it wraps) and one whose rounded byte count
        // would pass `isize::MAX`.
        if size.wrapping_sub(1) >= (isize::MAX as usize) - pad {
            return Err(bad_size(size));
        }
        Ok(((size + pad) >> self.shift()).max(self.tags.min_chunk()))
    }

    /// Allocates `size` bytes whose payload is aligned to `align`.
    #[inline]
    pub fn alloc(&mut self, size: usize, align: usize) -> Result<T::Chunk, Error> {
        // `align` is a power of two no larger than the granule iff `align − 1` is below the
        // granule and shares no bit with `align` (0 wraps and fails the first test).
        let mask = align.wrapping_sub(1);
        let granule_mask = self.tags.request_pad() - self.tags.head_bytes();
        if mask > granule_mask || align & mask != 0 {
            return self.alloc_aligned(size, align);
        }
        // Every payload is granule-aligned: the best fit for the size is the answer.
        let need = self.granules_for(size)?;
        self.tags.reserve(1)?;
        let Some((c, have)) = self.bins.take_best(&mut self.tags, need, |t, c, have| {
            let tail = t.carve(c, have, need)?;
            Some((tail, have - need))
        }) else {
            return Err(out_of_memory());
        };
        self.count_taken(have, need, self.tags.min_chunk());
        Ok(c)
    }

    /// Counts a chunk of `have` granules taken from a bin and carved to `need` granules.
    #[inline]
    fn count_taken(&mut self, have: usize, need: usize, min: usize) {
        // `carve` split off a free tail exactly when it could stand alone.
        if have - need >= min {
            self.counted_out(need);
        } else {
            self.counters.free_chunks -= 1;
            self.counted_out(have);
        }
    }

    /// [`Heap::alloc`] for alignments above the granule (and bad ones).
    #[inline(never)]
    fn alloc_aligned(&mut self, size: usize, align: usize) -> Result<T::Chunk, Error> {
        if !align.is_power_of_two() {
            return Err(Error::BadAlign);
        }
        let need = self.granules_for(size)?;
        // Over-ask by the worst leading fragment. Fewer than `step` granules reach the
        // boundary, and one more `step` is added when that would leave a fragment below the
        // minimum chunk, so the fragment is always under `step + min_chunk` granules.
        let step = align >> self.shift();
        let want = need
            .checked_add(step + self.tags.min_chunk() - 1)
            .filter(|&w| w <= (isize::MAX as usize) >> self.shift())
            .ok_or(Error::SizeOverflow)?;
        self.tags.reserve(2)?;
        let (mut c, mut have) = self
            .bins
            .take_best(&mut self.tags, want, |_, _, _| None)
            .ok_or(Error::OutOfMemory)?;
        self.counters.free_chunks -= 1;
        let lead = self.lead_granules(c, align);
        if lead > 0 {
            // The leading fragment stays free; its predecessor is in use (it was next to a
            // free chunk), and its successor is about to be.
            let rest = self.tags.split(c, lead);
            self.file_free(c, lead);
            (c, have) = (rest, have - lead);
        }
        // `c` is out of the bins, so its successor is in use and the tail needs no coalescing.
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

    /// Granules to skip at the front of `c` so its payload meets `align`: zero, or a fragment
    /// large enough to be a free chunk of its own.
    fn lead_granules(&self, c: T::Chunk, align: usize) -> usize {
        let misalign = self.tags.payload(c) & (align - 1);
        if misalign == 0 {
            return 0;
        }
        let mut lead = (align - misalign) >> self.shift();
        if lead < self.tags.min_chunk() {
            lead += align >> self.shift();
        }
        lead
    }

    /// Counts a chunk of `used` granules handed out. It is counted once it has its final size,
    /// so the peak never sees a transient.
    #[inline]
    fn counted_out(&mut self, used: usize) {
        self.counters.add_used(used);
        self.counters.allocs += 1;
    }

    /// Cuts the in-use chunk `c` down to `keep` granules if the rest can stand as a free chunk,
    /// and frees the rest (coalescing it with a free successor). Leaves `used` to the caller.
    fn release_tail(&mut self, c: T::Chunk, keep: usize) {
        let have = self.tags.size(c);
        if have >= keep + self.tags.min_chunk() {
            let tail = self.tags.split(c, keep);
            self.coalesce_and_file(tail, have - keep);
        }
    }

    /// Frees the in-use chunk `c`.
    #[inline]
    pub fn free(&mut self, c: T::Chunk) {
        self.free_sized(c, self.tags.size(c));
    }

    /// Frees the in-use chunk `c` of `size` granules (its size, already read by the caller).
    #[inline]
    pub fn free_sized(&mut self, c: T::Chunk, size: usize) {
        self.counters.used -= size;
        self.counters.frees += 1;
        self.coalesce_and_file(c, size);
    }

    /// Frees the unbinned chunk `c` of `size` granules, marked in use and not counted as free,
    /// merging it with free neighbours first so that no two free chunks are ever adjacent.
    #[inline]
    fn coalesce_and_file(&mut self, c: T::Chunk, size: usize) {
        let prev = self.tags.prev_if_free(c);
        let next = self.tags.next_if_free(c);
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

    /// Puts the free chunk `c` of `size` granules into its bin.
    #[inline]
    fn file_free(&mut self, c: T::Chunk, size: usize) {
        self.counters.free_chunks += 1;
        self.bins.insert(&mut self.tags, c, size);
    }

    /// Takes the free chunk `c` of `size` granules out of its bin (to merge or hand it out).
    #[inline]
    fn unfile(&mut self, c: T::Chunk, size: usize) {
        self.counters.free_chunks -= 1;
        self.bins.remove(&mut self.tags, c, size);
    }

    /// Resizes the in-use chunk `c` in place to serve `size` bytes: shrinks it (freeing the
    /// tail) or grows it into a free successor. Fails with `OutOfMemory` when it cannot grow in
    /// place; `c` is unchanged then.
    #[inline]
    pub fn resize_in_place(&mut self, c: T::Chunk, size: usize) -> Result<(), Error> {
        let need = self.granules_for(size)?;
        self.tags.reserve(1)?;
        let have = self.tags.size(c);
        if need > have {
            let (n, size) = self
                .tags
                .next_if_free(c)
                .filter(|&(_, size)| have + size >= need)
                .ok_or(Error::OutOfMemory)?;
            self.unfile(n, size);
            self.tags.absorb_next(c);
        }
        self.release_tail(c, need);
        let now = self.tags.size(c);
        if now >= have {
            self.counters.add_used(now - have);
        } else {
            self.counters.used -= have - now;
        }
        self.counters.reallocs_in_place += 1;
        Ok(())
    }

    /// Adds a fresh free chunk spanning new chunk space (a new region, or the growth of one):
    /// counts it as managed and files it, merging with a free predecessor.
    pub fn add_space(&mut self, c: T::Chunk, new_region: bool) {
        let size = self.tags.size(c);
        self.counters.managed += size;
        self.counters.regions += usize::from(new_region);
        self.coalesce_and_file(c, size);
    }

    /// Takes the free chunk `c` that spans a whole region out of the heap, before the placement
    /// forgets the region.
    pub fn remove_space(&mut self, c: T::Chunk) {
        let size = self.tags.size(c);
        self.unfile(c, size);
        self.counters.managed -= size;
        self.counters.regions -= 1;
    }

    /// The chunk that spans all of region `r`, if it is free; `Err(RegionInUse)` otherwise.
    pub fn sole_free_chunk(&self, r: T::Region) -> Result<T::Chunk, Error> {
        let c = self.tags.region_first_chunk(r);
        if self.tags.is_free(c) && self.tags.size(c) == self.tags.region_granules(r) {
            Ok(c)
        } else {
            Err(Error::RegionInUse)
        }
    }

    /// The chunk size `c` was allocated with may be `size` bytes: `size` fits and would not have
    /// left a tail large enough to split off.
    pub fn size_matches(&self, c: T::Chunk, size: usize) -> bool {
        self.size_fits(self.tags.size(c), size)
    }

    /// Whether a chunk of `have` granules may have been allocated with `size` bytes (see
    /// [`Heap::size_matches`]).
    #[inline]
    pub fn size_fits(&self, have: usize, size: usize) -> bool {
        self.granules_for(size)
            .is_ok_and(|need| need <= have && have < need + self.tags.min_chunk())
    }

    pub fn stats(&self) -> Stats {
        let largest = self.bins.largest(&self.tags).unwrap_or(0);
        self.counters
            .to_stats(self.shift(), largest, self.tags.head_bytes())
    }

    /// Verifies every invariant of the heap; `addr` names a chunk in error reports.
    pub fn check(&self, addr: impl Fn(T::Chunk) -> usize) -> Result<(), CheckError> {
        let t = &self.tags;
        let (mut free_chunks, mut free, mut used, mut managed, mut live) = (0, 0, 0, 0, 0);
        let mut regions = 0;
        let mut region = t.first_region();
        while let Some(r) = region {
            let mut c = t.region_first_chunk(r);
            let mut total = 0usize;
            let mut prev_free = false;
            let mut first = true;
            loop {
                t.check_tags(c, first)?;
                first = false;
                let size = t.size(c);
                if size == 0 {
                    return Err(CheckError::new("empty chunk", addr(c)));
                }
                total = total
                    .checked_add(size)
                    .filter(|&s| s <= t.region_granules(r))
                    .ok_or(CheckError::new("chunks overrun their region", addr(c)))?;
                if t.is_free(c) {
                    if prev_free {
                        return Err(CheckError::new("two free chunks adjacent", addr(c)));
                    }
                    free_chunks += 1;
                    free += size;
                } else {
                    used += size;
                    live += 1;
                }
                prev_free = t.is_free(c);
                match t.next(c) {
                    Some(n) => c = n,
                    None => break,
                }
            }
            if total != t.region_granules(r) {
                return Err(CheckError::new(
                    "chunks do not add up to the region",
                    addr(c),
                ));
            }
            managed += total;
            regions += 1;
            region = t.next_region(r);
        }
        let (binned, binned_granules) = self.bins.check(t, &addr, free_chunks)?;
        if binned != free_chunks || binned_granules != free {
            return Err(CheckError::new("a free chunk is missing from the bins", 0));
        }
        let k = &self.counters;
        if k.free() != free || k.free_chunks != free_chunks || k.used != used || k.live() != live {
            return Err(CheckError::new("statistics disagree with the chunks", 0));
        }
        if k.managed != managed || k.regions != regions {
            return Err(CheckError::new(
                "managed size disagrees with the regions",
                0,
            ));
        }
        Ok(())
    }
}

/// The error for a size [`Heap::granules_for`] refuses.
#[cold]
fn bad_size(size: usize) -> Error {
    if size == 0 {
        Error::ZeroSize
    } else {
        Error::SizeOverflow
    }
}

#[cold]
fn out_of_memory() -> Error {
    Error::OutOfMemory
}
