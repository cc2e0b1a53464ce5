//! The reference model of the allocation policy.
//!
//! The model knows nothing of bins, tries or tags: it keeps every chunk of every region in an
//! ordered map by payload address and predicts, for each request, the chunk the policy must
//! pick. The best fit is the smallest free chunk that fits other than the top and the victim,
//! and among equal sizes the one filed into the free set earliest; the top (the free end of the
//! top region: the region grown last, or until one is grown the first added) serves only when
//! nothing else fits. The victim is the rest of the last chunk carved for a listed request
//! (at most 2047 granules, aligned to at most the granule), kept out of the free set: such a
//! request takes the earliest filed free chunk of exactly its size, else the victim if it
//! fits (its rest stays the victim), else the best fit (its rest becomes the victim, the old
//! one filed), else the top; any other request first files the victim if it fits, then takes
//! the best fit. A free whose only free neighbour is the victim merges into it (unless that
//! would end the top region). Aligned requests over-ask by the worst leading fragment and
//! split one off; a realloc shrinks or grows in place, except that a block of more than 2047
//! granules shrinking to at most 2047 moves to the best fit outside the top when there is one
//! (the victim filed first if it fits); regions are added, grown in place and removed. Every
//! result, the errors included, is what [`crate::InlineHeap`] and [`crate::DetachedHeap`] must
//! return for the same request, given the [`Geometry`] of their placement (the core's own size
//! arithmetic: the model shares it, and decides only where each request goes) (with the
//! detached heap's table never running out of records, and the inline heap never given a null
//! region base).

extern crate alloc;

use crate::algo::bin_index::LIST_SIZES;
use crate::algo::geometry::Geometry;
use crate::algo::heap::SHRINK_MOVE_MAX;
use crate::error::Error;
use alloc::collections::BTreeMap;
use alloc::vec::Vec;

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

/// The reference model: chunks by payload address, regions by base.
#[derive(Clone, Debug)]
pub struct Model {
    geo: Geometry,
    chunks: BTreeMap<usize, MChunk>,
    /// Regions: base → (number, end in bytes), for growth and removal.
    regions: BTreeMap<usize, (usize, usize)>,
    next_region: usize,
    /// The top region (its number): the region grown last, or until one is grown the first
    /// added; its free end is the top.
    top_region: Option<usize>,
    /// The victim's payload address: a free chunk outside the free set (its stamp unused).
    victim: Option<usize>,
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
            top_region: None,
            victim: None,
            clock: 0,
        }
    }

    /// The layout the model was made with.
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

    /// Files the victim into the free set, whatever its size (what a cache's spill or flush
    /// asks of the heap: `InlineHeap::file_victim`).
    pub fn file_victim(&mut self) {
        self.file_victim_if_fits(0);
    }

    /// Files the victim into the free set if it has at least `want` granules.
    fn file_victim_if_fits(&mut self, want: usize) {
        if let Some(v) = self.victim.filter(|v| self.chunks[v].granules >= want) {
            self.victim = None;
            self.file(v);
        }
    }

    /// Whether the chunk at `at` ends the top region.
    fn ends_top(&self, at: usize) -> bool {
        let c = self.chunks[&at];
        Some(c.region) == self.top_region
            && self
                .regions
                .values()
                .any(|&(id, end)| id == c.region && at + c.granules * self.geo.granule() == end)
    }

    fn file(&mut self, at: usize) {
        self.clock += 1;
        let c = self.chunks.get_mut(&at).unwrap();
        c.free = true;
        c.stamp = self.clock;
    }

    /// The top: the last chunk of the top region, if it is free.
    pub fn top(&self) -> Option<usize> {
        let id = self.top_region?;
        let &(_, end) = self.regions.values().find(|(r, _)| *r == id)?;
        let (&at, c) = self.chunks.range(..end).next_back()?;
        (c.region == id && c.free && at + c.granules * self.geo.granule() == end).then_some(at)
    }

    /// Makes region `id`, which is growing, the top region; the old top, if another region's,
    /// is filed among the free chunks as if freed now (the heap puts it into its bin).
    fn make_top_region(&mut self, id: usize) {
        if self.top_region != Some(id) {
            if let Some(old) = self.top() {
                self.file(old);
            }
            self.top_region = Some(id);
        }
    }

    fn next_of(&self, at: usize) -> Option<(usize, MChunk)> {
        let c = self.chunks[&at];
        let n = at + c.granules * self.geo.granule();
        self.chunks
            .get(&n)
            .filter(|nc| nc.region == c.region)
            .map(|&nc| (n, nc))
    }

    fn prev_of(&self, at: usize) -> Option<(usize, MChunk)> {
        let c = self.chunks[&at];
        let (&p, &pc) = self.chunks.range(..at).next_back()?;
        (pc.region == c.region && p + pc.granules * self.geo.granule() == at).then_some((p, pc))
    }

    /// Frees (or files new space at) `at`, merging with free neighbours: into the victim when
    /// it is the only free one (and the merged chunk would not end the top region).
    fn coalesce_and_file(&mut self, mut at: usize) {
        let prev = self.prev_of(at).filter(|(_, pc)| pc.free).map(|(p, _)| p);
        let next = self.next_of(at).filter(|(_, nc)| nc.free).map(|(n, _)| n);
        if let Some(v) = self.victim {
            let into_prev = prev == Some(v) && next.is_none() && !self.ends_top(at);
            if into_prev || (next == Some(v) && prev.is_none()) {
                let granules = self.chunks[&at].granules;
                if into_prev {
                    self.chunks.remove(&at);
                    self.chunks.get_mut(&v).unwrap().granules += granules;
                } else {
                    let vc = self.chunks.remove(&v).unwrap();
                    let c = self.chunks.get_mut(&at).unwrap();
                    c.granules += vc.granules;
                    c.free = true;
                    self.victim = Some(at);
                }
                return;
            }
            if prev == Some(v) || next == Some(v) {
                // Merged away below: no longer the victim.
                self.victim = None;
            }
        }
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
        let tail = at + keep * self.geo.granule();
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
        if let Some(tail) = self.cut(at, keep) {
            self.coalesce_and_file(tail);
        }
    }

    /// The smallest free chunk of at least `want` granules other than the top and the victim,
    /// the one filed earliest among equals.
    fn best_fit(&self, want: usize) -> Option<usize> {
        let top = self.top();
        self.chunks
            .iter()
            .filter(|&(&a, c)| {
                c.free && c.granules >= want && Some(a) != top && Some(a) != self.victim
            })
            .min_by_key(|(_, c)| (c.granules, c.stamp))
            .map(|(&a, _)| a)
    }

    /// Predicts and applies an allocation; returns the payload address.
    pub fn alloc(&mut self, size: usize, align: usize) -> Result<usize, Error> {
        let (need, want) = self.geo.request(size, align)?;
        if need <= LIST_SIZES && self.geo.granule_aligned(align) {
            return self.alloc_listed(need);
        }
        self.file_victim_if_fits(want);
        let top_fits = self.top().filter(|t| self.chunks[t].granules >= want);
        let at = self.best_fit(want).or(top_fits).ok_or(Error::OutOfMemory)?;
        Ok(self.place(at, need, align))
    }

    /// An allocation of `need` granules (a listed size) at the granule's alignment: a chunk
    /// of exactly that size, the victim, the best fit (its rest the new victim), the top.
    fn alloc_listed(&mut self, need: usize) -> Result<usize, Error> {
        let exact = self
            .best_fit(need)
            .filter(|b| self.chunks[b].granules == need);
        if let Some(at) = exact {
            return Ok(self.place(at, need, 1));
        }
        if let Some(v) = self.victim.filter(|v| self.chunks[v].granules >= need) {
            self.chunks.get_mut(&v).unwrap().free = false;
            self.victim = self.cut(v, need);
            return Ok(v);
        }
        if let Some(at) = self.best_fit(need) {
            self.chunks.get_mut(&at).unwrap().free = false;
            if let Some(rest) = self.cut(at, need) {
                if let Some(old) = self.victim.replace(rest) {
                    self.file(old);
                }
            }
            return Ok(at);
        }
        let top = self.top().filter(|t| self.chunks[t].granules >= need);
        let at = top.ok_or(Error::OutOfMemory)?;
        Ok(self.place(at, need, 1))
    }

    /// Cuts the in-use chunk at `at` down to `keep` granules if the rest can stand alone;
    /// returns the rest, free and not filed.
    fn cut(&mut self, at: usize, keep: usize) -> Option<usize> {
        if self.chunks[&at].granules < keep + self.geo.min_chunk() {
            return None;
        }
        let tail = self.split(at, keep);
        self.chunks.get_mut(&tail).unwrap().free = true;
        Some(tail)
    }

    /// Hands out the free chunk at `at` for `need` granules aligned to `align`: the leading
    /// fragment an alignment needs split off and filed, the tail released.
    fn place(&mut self, mut at: usize, need: usize, align: usize) -> usize {
        let g = self.geo.granule();
        let lead = if align > g {
            self.geo.lead_granules(at, align)
        } else {
            0
        };
        if lead > 0 {
            let rest = self.split(at, lead);
            self.file(at);
            at = rest;
        }
        self.chunks.get_mut(&at).unwrap().free = false;
        self.release_tail(at, need);
        at
    }

    /// Applies the free of the live allocation at `at`.
    ///
    /// # Panics
    /// If `at` is not the payload of a chunk.
    pub fn free(&mut self, at: usize) {
        self.coalesce_and_file(at);
    }

    /// Predicts and applies [`crate::InlineHeap::realloc`] of the live allocation at `at`: a
    /// chunk of more than 2047 granules resized to at most 2047, for an alignment up to the
    /// granule, moves to the best fit among the free chunks other than the top if there is one
    /// (`Ok(Some(new))`, the old chunk freed); otherwise as [`Model::resize_or_move`].
    pub fn realloc(
        &mut self,
        at: usize,
        new_size: usize,
        align: usize,
    ) -> Result<Option<usize>, Error> {
        let need = self.geo.granules_for(new_size)?;
        if self.chunks[&at].granules > SHRINK_MOVE_MAX
            && need <= SHRINK_MOVE_MAX
            && self.geo.granule_aligned(align)
        {
            self.file_victim_if_fits(need);
            if let Some(best) = self.best_fit(need) {
                let new = self.place(best, need, align);
                self.free(at);
                return Ok(Some(new));
            }
        }
        self.resize_or_move(at, new_size, align)
    }

    /// Predicts and applies a resize of the live allocation at `at` that stays in place when
    /// it can: in place when it shrinks or its free successor has room (`Ok(None)`), else
    /// moved to a new allocation aligned to `align` and the old one freed (`Ok(Some(new))`).
    /// What a resize in place followed, if it fails, by a move does (a detached heap's owner,
    /// which copies device memory itself).
    pub fn resize_or_move(
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
                    if self.victim == Some(n) {
                        self.victim = None;
                    }
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
        let g = self.geo.granule();
        if base & (g - 1) != 0 {
            return Err(Error::RegionMisaligned);
        }
        let len = len & !(g - 1);
        self.check_free_range(base, len)?;
        if len < self.geo.region_overhead() + self.geo.min_chunk() * g {
            return Err(Error::RegionTooSmall);
        }
        let id = self.next_region;
        self.next_region += 1;
        if self.top_region.is_none() {
            self.top_region = Some(id);
        }
        self.regions.insert(base, (id, base + len));
        let at = base + self.geo.first_payload();
        self.chunks.insert(
            at,
            MChunk {
                granules: (len - self.geo.region_overhead()) / g,
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
        let g = self.geo.granule();
        let len = len & !(g - 1);
        let &(id, end) = self.regions.get(&base).ok_or(Error::UnknownRegion)?;
        self.check_free_range(end, len)?;
        if len < self.geo.min_chunk() * g {
            return Err(Error::RegionTooSmall);
        }
        self.make_top_region(id);
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
        if self.victim == Some(mine[0].0) {
            self.victim = None;
        }
        self.chunks.remove(&mine[0].0);
        self.regions.remove(&base);
        if self.top_region == Some(id) {
            self.top_region = None;
        }
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
