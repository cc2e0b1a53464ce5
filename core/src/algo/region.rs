//! Regions: the address ranges a heap manages, written once over the placement seam.
//!
//! A region is added whole, grown in place when new memory continues it (the new space merges
//! with its free end, so no boundary is left behind), removed when none of it is allocated, and
//! trimmed (every wholly free region removed in one pass). Adjacent regions that were added
//! separately stay separate: they may be separate allocations. This is where a region source
//! plugs in: it obtains a range and adds it, extends a region it can grow contiguously, and
//! takes back what [`Heap::remove_region`] and [`Heap::trim`] give back; [`Heap::free_spans`]
//! names the free ranges whose pages it may release without giving the region back.
//!
//! Every check happens before anything is written: a refused call leaves the heap as it was.

use crate::algo::heap::Heap;
use crate::algo::shape::sealed::Shape;
use crate::algo::stats::Tally;
use crate::algo::tags::Tags;
use crate::error::Error;

impl<T: Tags, K: Tally, S: Shape> Heap<T, K, S> {
    /// Adds `base..base + len` as a new region (`base` granule-aligned, `len` rounded down to
    /// granules). Errors: `RegionMisaligned`, `RegionOverlap` (overlaps a region or wraps),
    /// `RegionTooSmall` (no room for the region's overhead and one chunk), `OutOfRecords`.
    ///
    /// # Time Complexity
    /// `O(regions)` (the overlap check).
    ///
    /// # Safety
    /// For a placement that writes into its regions (inline tags): the range must be valid for
    /// reads and writes and used by nothing else until the region is removed or the heap is
    /// dropped.
    pub unsafe fn add_region(&mut self, base: T::Base, len: usize) -> Result<(), Error> {
        let layout = *self.tags().geometry();
        let g = layout.granule();
        let addr = T::base_addr(base);
        if addr & (g - 1) != 0 {
            return Err(Error::RegionMisaligned);
        }
        let len = len & !(g - 1);
        self.check_free_range(addr, len)?;
        if len < layout.region_overhead() + (layout.min_chunk() << layout.shift()) {
            return Err(Error::RegionTooSmall);
        }
        self.tags_mut().reserve(2)?;
        // SAFETY: the range is the caller's to give (contract above), granule-aligned, overlaps
        // no region and has room for the overhead and a chunk (checked above).
        let c = unsafe { self.tags_mut().open_region(base, len) };
        self.add_space(c, true);
        Ok(())
    }

    /// Grows the region that starts at `base` by `additional` bytes (rounded down to
    /// granules) right after its end; the new space merges with the region's free end.
    /// Errors: `UnknownRegion`, `RegionOverlap`, `RegionTooSmall` (less than one minimum
    /// chunk), `OutOfRecords`.
    ///
    /// # Time Complexity
    /// `O(regions)`.
    ///
    /// # Safety
    /// As for [`Heap::add_region`], for the added range, which must also be reachable through
    /// the region's base (one allocation or mapping).
    pub unsafe fn extend_region(&mut self, base: T::Base, additional: usize) -> Result<(), Error> {
        let layout = *self.tags().geometry();
        let (r, _) = self.find_region(T::base_addr(base))?;
        let len = additional & !(layout.granule() - 1);
        let end = T::base_addr(self.tags().region_base(r)) + self.tags().region_len(r);
        self.check_free_range(end, len)?;
        if len < layout.min_chunk() << layout.shift() {
            return Err(Error::RegionTooSmall);
        }
        self.tags_mut().reserve(1)?;
        // SAFETY: the added range is the caller's to give and continues the region (contract
        // above); it overlaps no region and holds a minimum chunk (checked above).
        let c = unsafe { self.tags_mut().grow_region(r, len) };
        self.add_space(c, false);
        Ok(())
    }

    /// Removes the region that starts at `base` if none of it is allocated; gives back its
    /// base and length in bytes for its owner to release. Errors: `UnknownRegion`,
    /// `RegionInUse`.
    ///
    /// # Time Complexity
    /// `O(regions)`.
    pub fn remove_region(&mut self, base: usize) -> Result<(T::Base, usize), Error> {
        let (r, before) = self.find_region(base)?;
        let c = self.sole_free_chunk(r).ok_or(Error::RegionInUse)?;
        Ok(self.close(r, before, c))
    }

    /// Removes every wholly free region in one pass, calling `release(base, len)` for each;
    /// returns how many were removed.
    ///
    /// # Time Complexity
    /// `O(regions)`.
    pub fn trim(&mut self, mut release: impl FnMut(T::Base, usize)) -> usize {
        let mut removed = 0;
        let mut before = None;
        let mut region = self.tags().first_region();
        while let Some(r) = region {
            region = self.tags().next_region(r);
            match self.sole_free_chunk(r) {
                Some(c) => {
                    let (base, len) = self.close(r, before, c);
                    release(base, len);
                    removed += 1;
                }
                None => before = Some(r),
            }
        }
        removed
    }

    /// The region containing `addr`, as `(base, len)`.
    ///
    /// # Time Complexity
    /// `O(regions)`.
    pub fn region_of(&self, addr: usize) -> Option<(T::Base, usize)> {
        let t = self.tags();
        let mut region = t.first_region();
        while let Some(r) = region {
            let base = T::base_addr(t.region_base(r));
            if addr >= base && addr - base < t.region_len(r) {
                return Some((t.region_base(r), t.region_len(r)));
            }
            region = t.next_region(r);
        }
        None
    }

    /// Bytes of the free chunk that ends the region holding `addr`: what growing that region
    /// in place adds to (0 when its last chunk is in use, or no region holds `addr`).
    ///
    /// # Time Complexity
    /// `O(regions)`.
    pub fn free_tail(&self, addr: usize) -> usize {
        let t = self.tags();
        let mut region = t.first_region();
        while let Some(r) = region {
            let base = T::base_addr(t.region_base(r));
            if addr >= base && addr - base < t.region_len(r) {
                return t
                    .region_last_free(r)
                    .map_or(0, |(_, size)| size << t.geometry().shift());
            }
            region = t.next_region(r);
        }
        0
    }

    /// Calls `each(start, len)` for every free chunk of at least `min` bytes whose whole pages
    /// (of `page` bytes, a power of two) could be released: the page-aligned part of the free
    /// space, past whatever tags a placement keeps in it. Returns how many spans it named.
    ///
    /// # Time Complexity
    /// `O(chunks)`.
    pub fn free_spans(&self, min: usize, page: usize, mut each: impl FnMut(usize, usize)) -> usize {
        let t = self.tags();
        let layout = t.geometry();
        let (keep_front, keep_back) = layout.free_chunk_tags();
        let min_granules = (min >> layout.shift()).max(1);
        let mut named = 0;
        let mut name = |c: T::Chunk, size: usize| {
            let bytes = size << layout.shift();
            if bytes < min {
                return;
            }
            let start = (t.addr(c) + keep_front).next_multiple_of(page);
            let end = (t.addr(c) + bytes - keep_back) & !(page - 1);
            if end > start {
                each(start, end - start);
                named += 1;
            }
        };
        self.bins().each_at_least(t, min_granules, &mut name);
        if let Some(c) = self.top().chunk {
            name(c, t.size(c));
        }
        if let Some((c, size)) = self.victim().chunk {
            name(c, size);
        }
        named
    }

    /// Cuts the free end of every region (see [`Heap::shrink_region`]) in one walk of the
    /// region list, offering each cut to `give(base, len, keep)` (the region's base, its length
    /// before the cut and after it), which releases the tail and says whether it did; a tail it
    /// refuses is put back. `min` is the least tail worth
    /// cutting, in bytes. Returns the bytes cut and kept cut.
    ///
    /// # Time Complexity
    /// `O(regions)`, plus `O(bits of a size)` per region cut.
    pub fn shrink_regions(
        &mut self,
        page: usize,
        min: usize,
        mut give: impl FnMut(T::Base, usize, usize) -> bool,
    ) -> usize {
        let mut total = 0;
        let mut region = self.tags().first_region();
        while let Some(r) = region {
            region = self.tags().next_region(r);
            let base = self.tags().region_base(r);
            let len = self.tags().region_len(r);
            let Some((keep, cut)) = self.cut(r, page) else {
                continue;
            };
            if cut >= min && give(base, len, keep) {
                total += cut;
            } else {
                // SAFETY: the tail was the region's a moment ago, and its owner still has it.
                let back = unsafe { self.extend_region(base, cut) };
                debug_assert!(back.is_ok(), "a cut tail goes back where it was");
            }
        }
        total
    }

    /// Gives back the free end of the region that starts at `base`: cuts the region at the
    /// first `page` boundary (a power of two, a multiple of the granule) past the end of a
    /// minimum free chunk at the start of its last, free chunk; returns the region's new
    /// length and the length cut off, or `None` if there is not a whole page to cut (or no such
    /// region). The region stays, shorter; its owner releases the tail.
    ///
    /// # Time Complexity
    /// `O(regions)` to find the region, then `O(bits of a size)` to re-file the shortened
    /// chunk.
    pub fn shrink_region(&mut self, base: usize, page: usize) -> Option<(usize, usize)> {
        let (r, _) = self.find_region(base).ok()?;
        self.cut(r, page)
    }

    /// [`Heap::shrink_region`] of region `r`.
    fn cut(&mut self, r: T::Region, page: usize) -> Option<(usize, usize)> {
        let t = self.tags();
        let layout = *t.geometry();
        let (last, size) = t.region_last_free(r)?;
        let base = T::base_addr(t.region_base(r));
        let len = t.region_len(r);
        let keep_chunk = layout.min_chunk() << layout.shift();
        // The cut leaves a minimum chunk and the region's tail tags (an inline fence).
        let tail_tags = layout.region_overhead() - layout.region_lead();
        let cut = (t.addr(last) + keep_chunk + tail_tags).next_multiple_of(page);
        let new_len = cut - base;
        if new_len >= len {
            return None;
        }
        let keep = (cut - tail_tags - t.addr(last)) >> layout.shift();
        self.unfile(last, size);
        self.tags_mut().cut_region(r, last, keep, new_len);
        self.refile(last, keep, size - keep);
        Some((new_len, len - new_len))
    }

    /// Calls `each(base, len)` for every region, in list order.
    ///
    /// # Time Complexity
    /// `O(regions)`.
    pub fn each_region(&self, mut each: impl FnMut(usize, usize)) {
        let t = self.tags();
        let mut r = t.first_region();
        while let Some(reg) = r {
            each(T::base_addr(t.region_base(reg)), t.region_len(reg));
            r = t.next_region(reg);
        }
    }

    /// Calls `each` for every region, as `(base, len)`, then `chunk` for each of its chunks,
    /// as `(address, bytes, free)`, in address order within a region.
    ///
    /// # Time Complexity
    /// `O(chunks + regions)`.
    pub fn visit(
        &self,
        mut region: impl FnMut(usize, usize),
        mut chunk: impl FnMut(usize, usize, bool),
    ) {
        let t = self.tags();
        let shift = t.geometry().shift();
        let mut r = t.first_region();
        while let Some(reg) = r {
            region(T::base_addr(t.region_base(reg)), t.region_len(reg));
            let mut c = Some(t.region_first_chunk(reg));
            while let Some(ch) = c {
                chunk(t.addr(ch), t.size(ch) << shift, t.is_free(ch));
                c = t.next(ch);
            }
            r = t.next_region(reg);
        }
    }

    /// The region that starts at `base` and the one ahead of it on the list.
    fn find_region(&self, base: usize) -> Result<(T::Region, Option<T::Region>), Error> {
        let t = self.tags();
        let mut before = None;
        let mut region = t.first_region();
        while let Some(r) = region {
            if T::base_addr(t.region_base(r)) == base {
                return Ok((r, before));
            }
            before = Some(r);
            region = t.next_region(r);
        }
        Err(Error::UnknownRegion)
    }

    /// `RegionOverlap` if `start..start + len` wraps the address space or overlaps a region.
    fn check_free_range(&self, start: usize, len: usize) -> Result<(), Error> {
        let end = start.checked_add(len).ok_or(Error::RegionOverlap)?;
        let t = self.tags();
        let mut region = t.first_region();
        while let Some(r) = region {
            let base = T::base_addr(t.region_base(r));
            if start < base + t.region_len(r) && base < end {
                return Err(Error::RegionOverlap);
            }
            region = t.next_region(r);
        }
        Ok(())
    }

    /// The chunk that spans all of region `r`, if it is free.
    fn sole_free_chunk(&self, r: T::Region) -> Option<T::Chunk> {
        let t = self.tags();
        let c = t.region_first_chunk(r);
        (t.is_free(c) && t.size(c) == t.region_granules(r)).then_some(c)
    }

    /// Removes region `r`, whose sole free chunk is `c`; returns its base and length.
    fn close(&mut self, r: T::Region, before: Option<T::Region>, c: T::Chunk) -> (T::Base, usize) {
        let (base, len) = (self.tags().region_base(r), self.tags().region_len(r));
        self.remove_space(c);
        self.tags_mut().close_region(r, before, c);
        (base, len)
    }
}
