//! The allocation algorithm, written once over [`Tags`]: size rounding, best-fit search,
//! aligned carving, splitting, coalescing, resizing in place, statistics and the invariant walk.
//! [`crate::InlineHeap`] and [`crate::DetachedHeap`] are thin typed front ends over [`Heap`].

use crate::bins::Bins;
use crate::error::{CheckError, Error};
use crate::stats::{Counters, Stats};
use crate::tags::Tags;

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
    pub fn granules_for(&self, size: usize) -> Result<usize, Error> {
        if size == 0 {
            return Err(Error::ZeroSize);
        }
        let g = 1usize << self.shift();
        let bytes = size
            .checked_add(self.tags.head_bytes() + g - 1)
            .filter(|&b| b <= isize::MAX as usize)
            .ok_or(Error::SizeOverflow)?;
        Ok((bytes >> self.shift()).max(self.tags.min_chunk()))
    }

    /// Allocates `size` bytes whose payload is aligned to `align`.
    pub fn alloc(&mut self, size: usize, align: usize) -> Result<T::Chunk, Error> {
        if !align.is_power_of_two() {
            return Err(Error::BadAlign);
        }
        let need = self.granules_for(size)?;
        let g = 1usize << self.shift();
        // Every payload is granule-aligned, so only a larger alignment needs slack: over-ask by
        // the worst leading fragment. Fewer than `step` granules reach the boundary, and one
        // more `step` is added when that would leave a fragment below the minimum chunk, so
        // the fragment is always under `step + min_chunk` granules.
        let (want, splits) = if align <= g {
            (need, 1)
        } else {
            let step = align >> self.shift();
            let want = need
                .checked_add(step + self.tags.min_chunk() - 1)
                .filter(|&w| w <= (isize::MAX as usize) >> self.shift())
                .ok_or(Error::SizeOverflow)?;
            (want, 2)
        };
        self.tags.reserve(splits)?;
        let mut c = self
            .bins
            .take_best(&mut self.tags, want)
            .ok_or(Error::OutOfMemory)?;
        self.counters.free -= self.tags.size(c);
        self.counters.free_chunks -= 1;
        let lead = self.lead_granules(c, align);
        if lead > 0 {
            // The leading fragment stays free; its predecessor is in use (it was next to a
            // free chunk), and its successor is about to be.
            let rest = self.tags.split(c, lead);
            self.file_free(c);
            c = rest;
        }
        self.hand_out(c, need);
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

    /// Marks the (unbinned, free) chunk `c` in use with `need` granules, filing any usable
    /// tail. `c` came from a bin, so both its neighbours are in use and the tail needs no
    /// coalescing. The chunk is counted once it has its final size, so the peak never sees a
    /// transient.
    fn hand_out(&mut self, c: T::Chunk, need: usize) {
        if self.tags.size(c) >= need + self.tags.min_chunk() {
            let tail = self.tags.split(c, need);
            self.file_free(tail);
        }
        self.tags.set_free(c, false);
        self.counters.add_used(self.tags.size(c));
        self.counters.live += 1;
        self.counters.allocs += 1;
    }

    /// Cuts the in-use chunk `c` down to `keep` granules if the rest can stand as a free chunk,
    /// and frees the rest (coalescing it with a free successor). Leaves `used` to the caller.
    fn release_tail(&mut self, c: T::Chunk, keep: usize) {
        if self.tags.size(c) >= keep + self.tags.min_chunk() {
            let tail = self.tags.split(c, keep);
            self.coalesce_and_file(tail);
        }
    }

    /// Frees the in-use chunk `c`.
    pub fn free(&mut self, c: T::Chunk) {
        self.counters.used -= self.tags.size(c);
        self.counters.live -= 1;
        self.counters.frees += 1;
        self.coalesce_and_file(c);
    }

    /// Frees an unbinned chunk not counted as free, merging it with free neighbours first so
    /// that no two free chunks are ever adjacent.
    fn coalesce_and_file(&mut self, mut c: T::Chunk) {
        if let Some(p) = self.tags.prev_if_free(c) {
            self.unfile(p);
            self.tags.absorb_next(p);
            c = p;
        }
        if let Some(n) = self.tags.next_if_free(c) {
            self.unfile(n);
            self.tags.absorb_next(c);
        }
        self.tags.set_free(c, true);
        self.file_free(c);
    }

    /// Puts a free chunk into its bin.
    fn file_free(&mut self, c: T::Chunk) {
        self.counters.free += self.tags.size(c);
        self.counters.free_chunks += 1;
        self.bins.insert(&mut self.tags, c);
    }

    /// Takes a free chunk out of its bin (to merge or hand it out).
    fn unfile(&mut self, c: T::Chunk) {
        self.counters.free -= self.tags.size(c);
        self.counters.free_chunks -= 1;
        self.bins.remove(&mut self.tags, c);
    }

    /// Resizes the in-use chunk `c` in place to serve `size` bytes: shrinks it (freeing the
    /// tail) or grows it into a free successor. Fails with `OutOfMemory` when it cannot grow in
    /// place; `c` is unchanged then.
    pub fn resize_in_place(&mut self, c: T::Chunk, size: usize) -> Result<(), Error> {
        let need = self.granules_for(size)?;
        self.tags.reserve(1)?;
        let have = self.tags.size(c);
        if need > have {
            let n = self
                .tags
                .next_if_free(c)
                .filter(|&n| have + self.tags.size(n) >= need)
                .ok_or(Error::OutOfMemory)?;
            self.unfile(n);
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
        self.counters.managed += self.tags.size(c);
        self.counters.regions += usize::from(new_region);
        self.coalesce_and_file(c);
    }

    /// Takes the free chunk `c` that spans a whole region out of the heap, before the placement
    /// forgets the region.
    pub fn remove_space(&mut self, c: T::Chunk) {
        self.unfile(c);
        self.counters.managed -= self.tags.size(c);
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
        let have = self.tags.size(c);
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
        if k.free != free || k.free_chunks != free_chunks || k.used != used || k.live != live {
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
