//! The reference model of the allocation policy, for differential tests and fuzz targets.
//!
//! **Not a stable API**: it exists so that the property tests and the fuzz targets check the
//! heaps against one oracle, and it changes whenever they need it to. It is compiled for the
//! crate's own tests and with the `model` feature, and hidden from the documentation.
//!
//! The model knows nothing of bins, tries or tags: it keeps every chunk of every region in an
//! ordered map by payload address and predicts, for each request, the chunk the policy must
//! pick: the smallest free chunk that fits, and among equal sizes the one filed into the free
//! set earliest. Aligned requests over-ask by the worst leading fragment and split one off;
//! regions are added, grown in place and removed. Every result, the errors included, is what
//! [`crate::InlineHeap`] and [`crate::DetachedHeap`] must return for the same request, given
//! the [`Geometry`] of their placement (with the out-of-band heap's table never running out of
//! records, and the inline heap never given a null region base).

extern crate alloc;

use alloc::collections::BTreeMap;
use alloc::vec::Vec;
use core::mem::size_of;

use crate::Error;

const W: usize = size_of::<usize>();

/// One chunk of the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MChunk {
    /// Length in granules.
    pub granules: usize,
    /// Whether it is free.
    pub free: bool,
    /// When it was last filed into the free set (ties go to the smallest).
    pub stamp: u64,
    /// The region it belongs to (a number the model gives each region it adds).
    pub region: usize,
}

/// How a placement lays chunks out, in the model's terms (payload addresses, granules).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// Bytes per granule.
    pub granule: usize,
    /// Bytes of tag before each payload.
    pub head: usize,
    /// The smallest chunk, in granules.
    pub min_chunk: usize,
    /// Offset from a region's base to its first payload.
    pub first_payload: usize,
    /// Bytes of a region that are not chunk space.
    pub region_overhead: usize,
}

impl Geometry {
    /// The geometry of an [`crate::InlineHeap`] with this granule (a power of two of at least
    /// 16 bytes): one word of head per chunk, a two-word region header padded so the first
    /// payload is granule-aligned, and a one-word fence closing each region.
    pub const fn inline(granule: usize) -> Self {
        let lead = (2 * W + W).next_multiple_of(granule);
        Geometry {
            granule,
            head: W,
            // A head, two ring links and a footer.
            min_chunk: (4 * W).div_ceil(granule),
            first_payload: lead,
            // Header and padding before the first chunk, fence after the last.
            region_overhead: lead,
        }
    }

    /// The geometry of a [`crate::DetachedHeap`] with this granule (any power of two): no tag
    /// bytes, one-granule chunks, regions that are all chunk space.
    pub const fn detached(granule: usize) -> Self {
        Geometry {
            granule,
            head: 0,
            min_chunk: 1,
            first_payload: 0,
            region_overhead: 0,
        }
    }

    /// The chunk size, in granules, that serves `size` bytes.
    pub fn granules_for(&self, size: usize) -> Result<usize, Error> {
        if size == 0 {
            return Err(Error::ZeroSize);
        }
        let bytes = size
            .checked_add(self.head + self.granule - 1)
            .filter(|&b| b <= isize::MAX as usize)
            .ok_or(Error::SizeOverflow)?;
        Ok((bytes / self.granule).max(self.min_chunk))
    }

    /// The granules an allocation of `size` bytes aligned to `align` keeps (`need`) and the
    /// smallest free chunk that can serve it (`want`: `need` plus the worst leading fragment
    /// for alignments above the granule), or the request's error.
    pub fn request(&self, size: usize, align: usize) -> Result<(usize, usize), Error> {
        if !align.is_power_of_two() {
            return Err(Error::BadAlign);
        }
        let need = self.granules_for(size)?;
        let g = self.granule;
        let want = if align <= g {
            need
        } else {
            let step = align / g;
            need.checked_add(step + self.min_chunk - 1)
                .filter(|&w| w <= isize::MAX as usize / g)
                .ok_or(Error::SizeOverflow)?
        };
        Ok((need, want))
    }

    /// Whether a chunk of `granules` may have been allocated for `size` bytes: `size` fits and
    /// would not have left a tail large enough to split off. A checked free with any other
    /// size is refused as `WrongSize`.
    pub fn size_matches(&self, granules: usize, size: usize) -> bool {
        self.granules_for(size)
            .is_ok_and(|need| need <= granules && granules < need + self.min_chunk)
    }

    /// The payload bytes of the single chunk that spans a region of `len` bytes (rounded down
    /// to granules), or `None` if no chunk fits.
    pub fn whole_region_request(&self, len: usize) -> Option<usize> {
        let len = len & !(self.granule - 1);
        (len >= self.region_overhead + self.min_chunk * self.granule)
            .then(|| len - self.region_overhead - self.head)
    }
}

/// The reference model: chunks by payload address, regions by base.
#[derive(Clone, Debug)]
pub struct Model {
    geo: Geometry,
    chunks: BTreeMap<usize, MChunk>,
    /// Regions: base → (number, end in bytes), for growth and removal.
    regions: BTreeMap<usize, (usize, usize)>,
    next_region: usize,
    clock: u64,
}

impl Model {
    /// An empty model of a heap with this geometry.
    pub fn new(geo: Geometry) -> Self {
        Model {
            geo,
            chunks: BTreeMap::new(),
            regions: BTreeMap::new(),
            next_region: 0,
            clock: 0,
        }
    }

    /// The geometry the model was made with.
    pub fn geometry(&self) -> Geometry {
        self.geo
    }

    /// Every chunk, by payload address.
    pub fn chunks(&self) -> &BTreeMap<usize, MChunk> {
        &self.chunks
    }

    /// Every region as `(base, end)`, by base.
    pub fn regions(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.regions.iter().map(|(&b, &(_, e))| (b, e))
    }

    /// The end of the region that starts at `base`.
    pub fn region_end(&self, base: usize) -> Option<usize> {
        self.regions.get(&base).map(|&(_, e)| e)
    }

    fn file(&mut self, at: usize) {
        self.clock += 1;
        let c = self.chunks.get_mut(&at).unwrap();
        c.free = true;
        c.stamp = self.clock;
    }

    fn next_of(&self, at: usize) -> Option<(usize, MChunk)> {
        let c = self.chunks[&at];
        let n = at + c.granules * self.geo.granule;
        self.chunks
            .get(&n)
            .filter(|nc| nc.region == c.region)
            .map(|&nc| (n, nc))
    }

    fn prev_of(&self, at: usize) -> Option<(usize, MChunk)> {
        let c = self.chunks[&at];
        let (&p, &pc) = self.chunks.range(..at).next_back()?;
        (pc.region == c.region && p + pc.granules * self.geo.granule == at).then_some((p, pc))
    }

    /// Frees (or files new space at) `at`, merging with free neighbours.
    fn coalesce_and_file(&mut self, mut at: usize) {
        if let Some((p, pc)) = self.prev_of(at).filter(|(_, pc)| pc.free) {
            let c = self.chunks.remove(&at).unwrap();
            self.chunks.get_mut(&p).unwrap().granules = pc.granules + c.granules;
            at = p;
        }
        if let Some((n, nc)) = self.next_of(at).filter(|(_, nc)| nc.free) {
            self.chunks.remove(&n);
            self.chunks.get_mut(&at).unwrap().granules += nc.granules;
        }
        self.file(at);
    }

    fn split(&mut self, at: usize, keep: usize) -> usize {
        let c = self.chunks.get_mut(&at).unwrap();
        let tail = at + keep * self.geo.granule;
        let rest = c.granules - keep;
        c.granules = keep;
        let tc = MChunk {
            granules: rest,
            ..*c
        };
        self.chunks.insert(tail, tc);
        tail
    }

    fn release_tail(&mut self, at: usize, keep: usize) {
        if self.chunks[&at].granules >= keep + self.geo.min_chunk {
            let tail = self.split(at, keep);
            self.chunks.get_mut(&tail).unwrap().free = false;
            self.coalesce_and_file(tail);
        }
    }

    /// Predicts and applies an allocation; returns the payload address.
    pub fn alloc(&mut self, size: usize, align: usize) -> Result<usize, Error> {
        let (need, want) = self.geo.request(size, align)?;
        let g = self.geo.granule;
        let (&at, _) = self
            .chunks
            .iter()
            .filter(|(_, c)| c.free && c.granules >= want)
            .min_by_key(|(_, c)| (c.granules, c.stamp))
            .ok_or(Error::OutOfMemory)?;
        let mut at = at;
        if align > g && at % align != 0 {
            let mut lead = (align - at % align) / g;
            if lead < self.geo.min_chunk {
                lead += align / g;
            }
            let rest = self.split(at, lead);
            self.file(at);
            at = rest;
        }
        self.chunks.get_mut(&at).unwrap().free = false;
        self.release_tail(at, need);
        Ok(at)
    }

    /// Applies the free of the live allocation at `at`.
    ///
    /// # Panics
    /// If `at` is not the payload of a chunk.
    pub fn free(&mut self, at: usize) {
        self.coalesce_and_file(at);
    }

    /// Predicts and applies a resize of the live allocation at `at`: in place when it shrinks
    /// or its free successor has room (`Ok(None)`), else moved to a new allocation aligned to
    /// `align` and the old one freed (`Ok(Some(new))`).
    pub fn realloc(
        &mut self,
        at: usize,
        new_size: usize,
        align: usize,
    ) -> Result<Option<usize>, Error> {
        let need = self.geo.granules_for(new_size)?;
        let have = self.chunks[&at].granules;
        let mut in_place = need <= have;
        if !in_place {
            if let Some((n, nc)) = self.next_of(at).filter(|(_, nc)| nc.free) {
                if have + nc.granules >= need {
                    self.chunks.remove(&n);
                    self.chunks.get_mut(&at).unwrap().granules += nc.granules;
                    in_place = true;
                }
            }
        }
        if in_place {
            self.release_tail(at, need);
            return Ok(None);
        }
        let new = self.alloc(new_size, align)?;
        self.free(at);
        Ok(Some(new))
    }

    /// Whether `start..start + len` overlaps a region; `RegionOverlap` also if it wraps.
    fn check_free_range(&self, start: usize, len: usize) -> Result<(), Error> {
        let end = start.checked_add(len).ok_or(Error::RegionOverlap)?;
        if self
            .regions
            .iter()
            .any(|(&b, &(_, e))| start < e && b < end)
        {
            return Err(Error::RegionOverlap);
        }
        Ok(())
    }

    /// Predicts and applies the addition of region `base..base + len`.
    pub fn add_region(&mut self, base: usize, len: usize) -> Result<(), Error> {
        let g = self.geo.granule;
        if base & (g - 1) != 0 {
            return Err(Error::RegionMisaligned);
        }
        let len = len & !(g - 1);
        self.check_free_range(base, len)?;
        if len < self.geo.region_overhead + self.geo.min_chunk * g {
            return Err(Error::RegionTooSmall);
        }
        let id = self.next_region;
        self.next_region += 1;
        self.regions.insert(base, (id, base + len));
        let at = base + self.geo.first_payload;
        self.chunks.insert(
            at,
            MChunk {
                granules: (len - self.geo.region_overhead) / g,
                free: false,
                stamp: 0,
                region: id,
            },
        );
        self.file(at);
        Ok(())
    }

    /// Predicts and applies growth: new space right after the region's last chunk, merged
    /// with it if free.
    pub fn extend_region(&mut self, base: usize, len: usize) -> Result<(), Error> {
        let g = self.geo.granule;
        let len = len & !(g - 1);
        let &(id, end) = self.regions.get(&base).ok_or(Error::UnknownRegion)?;
        self.check_free_range(end, len)?;
        if len < self.geo.min_chunk * g {
            return Err(Error::RegionTooSmall);
        }
        // The old end (inline: the payload after the old fence) starts the new chunk.
        self.chunks.insert(
            end,
            MChunk {
                granules: len / g,
                free: false,
                stamp: 0,
                region: id,
            },
        );
        self.regions.insert(base, (id, end + len));
        self.coalesce_and_file(end);
        Ok(())
    }

    /// Predicts and applies the removal of the region that starts at `base`; returns its
    /// range as `(base, len)`.
    pub fn remove_region(&mut self, base: usize) -> Result<(usize, usize), Error> {
        let &(id, end) = self.regions.get(&base).ok_or(Error::UnknownRegion)?;
        let mine: Vec<_> = self
            .chunks
            .iter()
            .filter(|(_, c)| c.region == id)
            .map(|(&a, c)| (a, *c))
            .collect();
        if mine.len() != 1 || !mine[0].1.free {
            return Err(Error::RegionInUse);
        }
        self.chunks.remove(&mine[0].0);
        self.regions.remove(&base);
        Ok((base, end - base))
    }

    /// Predicts and applies a trim: every wholly free region removed; returns their ranges as
    /// `(base, len)`, by base.
    pub fn trim(&mut self) -> Vec<(usize, usize)> {
        let bases: Vec<usize> = self.regions.keys().copied().collect();
        bases
            .into_iter()
            .filter_map(|b| self.remove_region(b).ok())
            .collect()
    }
}
