//! Runs operations on a heap ([`Rig`]) and checks every result.
//!
//! The driver keeps its own account of the live allocations and the regions, and after every
//! operation asks the heap to check its invariants and compares its statistics with that
//! account. The check after a step is the heap's step check (`check_step`: every chunk and
//! counter, and the bins' lists marked non-empty before or after the step); every
//! [`FULL_CHECK_EVERY`] steps and at the end it is the full `check()`, which also reads the
//! lists empty on both sides. Why that split, with the bugs planted to show it keeps finding
//! what the full check after every step found: `docs/fuzzing.md`. Live allocations are filled with
//! a pattern (inline heaps) that is verified on free, on realloc and at the end. With a [`Model`],
//! every address and every error must be the model's prediction; without one, the results are
//! checked against what the request and the heap's own statistics imply (an `OutOfMemory` only if
//! no free chunk is large enough, a region refused only for a reason that holds, a region removed
//! exactly when nothing in it is allocated). At the end everything is freed and every region must
//! be one free chunk again.

use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet};

use tagalloc::model::{Adapter, Counted, Geometry, Model};
use tagalloc::{Error, Stats, StepMarks};

use crate::ops::{Align, Len, Op, Place, RegionPick, Size};
use crate::pattern;
use crate::rig::{Rig, H};
use crate::trace::untraced;

/// A live allocation as the driver knows it.
#[derive(Clone, Copy, Debug)]
pub struct Live<H> {
    /// Its payload address.
    pub addr: usize,
    /// Its handle.
    pub h: H,
    /// The size it was asked for (or last resized to).
    pub size: usize,
    /// The seed of the pattern in its bytes.
    pub seed: u8,
}

/// How many freed allocations are remembered for stale frees.
const GRAVEYARD: usize = 64;

/// Steps between two full checks (the steps between are checked with the step check). The
/// default keeps the full check's share of a run small; `TAGALLOC_FUZZ_FULL_EVERY` (read once)
/// overrides it, `1` being the full check after every step.
pub const FULL_CHECK_EVERY: u32 = 64;

/// [`FULL_CHECK_EVERY`], or its override from the environment.
fn full_check_every() -> u32 {
    static EVERY: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *EVERY.get_or_init(|| crate::settings::steps("TAGALLOC_FUZZ_FULL_EVERY", FULL_CHECK_EVERY))
}

/// The payload address of `h`.
pub(crate) fn addr<R: Rig>(h: &H<R>) -> usize {
    R::S::addr(h)
}

/// Writes the pattern of `seed` into the first `len` bytes of `h` where the heap keeps them in
/// memory (inline), at least from byte `from` on (the bytes before it already hold the
/// pattern).
pub(crate) fn fill<R: Rig>(h: &H<R>, from: usize, len: usize, seed: u8) {
    let Some(p) = R::S::bytes(h) else { return };
    let from = from / 256 * 256;
    // SAFETY: `h` is a live allocation of at least `len` bytes, which only the driver uses;
    // `from <= len`.
    let s = unsafe { std::slice::from_raw_parts_mut(p.as_ptr().add(from), len - from) };
    pattern::fill_from(s, from, seed);
}

/// Panics unless the first `len` bytes of `h` hold the pattern of `seed` (where the heap keeps
/// them in memory).
pub(crate) fn verify<R: Rig>(h: &H<R>, len: usize, seed: u8) {
    let Some(p) = R::S::bytes(h) else { return };
    // SAFETY: as in `fill`.
    let s = unsafe { std::slice::from_raw_parts(p.as_ptr(), len) };
    if let Err(i) = pattern::verify(s, seed) {
        panic!(
            "contents of the live allocation at {:#x} ({len} bytes) changed at byte {i}",
            p.as_ptr() as usize
        );
    }
}

/// Runs operations on a heap, with or without the reference model.
pub struct Driver<R: Rig> {
    pub(crate) rig: R,
    model: Option<Model>,
    pub(crate) geo: Geometry,
    pub(crate) live: Vec<Live<H<R>>>,
    /// The live allocations' spans, address → size, to find overlaps.
    spans: BTreeMap<usize, usize>,
    /// The heap's regions, base → end.
    regions: BTreeMap<usize, usize>,
    /// Freed allocations as `(handle, size)`, newest last.
    pub(crate) graveyard: Vec<(H<R>, usize)>,
    seed: u8,
    /// The bins' marks at the last step check.
    marks: Cell<StepMarks>,
    /// Steps checked since the last full check.
    since_full: Cell<u32>,
}

impl<R: Rig> Driver<R> {
    /// A driver over `rig`, comparing every result with the reference model if `with_model`.
    pub fn new(rig: R, with_model: bool) -> Self {
        let geo = rig.subject().geometry();
        Driver {
            rig,
            model: with_model.then(|| Model::new(geo)),
            geo,
            live: Vec::with_capacity(64),
            spans: BTreeMap::new(),
            regions: BTreeMap::new(),
            graveyard: Vec::with_capacity(GRAVEYARD),
            seed: 0,
            marks: Cell::new(StepMarks::default()),
            since_full: Cell::new(0),
        }
    }

    /// Adds the first region, `len` bytes at the start of the address space.
    pub fn start(&mut self, len: usize) {
        self.step(&Op::AddRegion {
            at: Place::Offset(0),
            len: Len(len),
        });
    }

    /// Runs one operation and checks the heap.
    pub fn step(&mut self, op: &Op) {
        match *op {
            Op::Alloc {
                size: Size(size),
                align: Align(align),
            } => self.alloc(size, align),
            Op::Free { pick } => {
                if let Some(i) = self.pick(pick) {
                    self.free(i);
                }
            }
            Op::Realloc {
                pick,
                size: Size(size),
                align: Align(align),
            } => {
                if let Some(i) = self.pick(pick) {
                    self.realloc(i, size, align);
                }
            }
            Op::AddRegion { at, len: Len(len) } => self.add_region(at, len),
            Op::ExtendRegion {
                pick,
                len: Len(len),
            } => self.extend_region(pick, len),
            Op::RemoveRegion { pick } => self.remove_region(pick),
            Op::Trim => self.trim(),
        }
        self.after_step();
    }

    /// The live allocation `pick` names, if any is live.
    pub(crate) fn pick(&self, pick: u16) -> Option<usize> {
        (!self.live.is_empty()).then(|| pick as usize % self.live.len())
    }

    pub(crate) fn records_may_run_out(&self, e: Error) -> bool {
        e == Error::OutOfRecords && self.rig.may_run_out_of_records()
    }

    /// The heap's statistics (untraced).
    pub(crate) fn stats(&self) -> Stats {
        untraced(|| self.rig.subject().stats())
    }

    pub(crate) fn alloc(&mut self, size: usize, align: usize) {
        let before = self.stats();
        let got = self.rig.subject_mut().alloc(size, align);
        untraced(|| self.alloc_done(size, align, got, before));
    }

    /// Checks the result `got` of `alloc(size, align)` on a heap that had the statistics
    /// `before`, and files the allocation.
    fn alloc_done(&mut self, size: usize, align: usize, got: Result<H<R>, Error>, before: Stats) {
        let got_addr = got.as_ref().map(addr::<R>).map_err(|e| *e);
        if let Some(m) = &mut self.model {
            let want = m.alloc(size, align);
            assert_eq!(got_addr, want, "alloc({size}, {align}): heap vs model");
        } else {
            match (self.geo.request(size, align), got_addr) {
                (Err(want), got) => assert_eq!(got, Err(want), "alloc({size}, {align})"),
                (Ok((_, want)), got) => {
                    let fits = before.largest_free >> self.geo.shift() >= want;
                    match got {
                        Ok(_) => assert!(fits, "alloc({size}, {align}) served from nothing"),
                        Err(e) if self.records_may_run_out(e) => {}
                        Err(e) => {
                            assert_eq!(e, Error::OutOfMemory, "alloc({size}, {align})");
                            assert!(
                                !fits,
                                "alloc({size}, {align}): out of memory, yet {before:?}"
                            );
                        }
                    }
                }
            }
        }
        if let Ok(h) = got {
            assert_eq!(
                addr::<R>(&h) % align,
                0,
                "alloc({size}, {align}) misaligned"
            );
            self.rig.adopted(&h, size);
            self.seed = self.seed.wrapping_add(1);
            self.adopt(h, 0, size, self.seed);
        }
    }

    /// Files a new or moved live allocation: fills it (its first `kept` bytes already hold
    /// the pattern of `seed`, verified) and checks it against the others.
    fn adopt(&mut self, h: H<R>, kept: usize, size: usize, seed: u8) {
        let addr = addr::<R>(&h);
        assert!(self.usable(&h) >= size, "allocation too small");
        fill::<R>(&h, kept.min(size), size, seed);
        self.live.push(Live {
            addr,
            h,
            size,
            seed,
        });
        self.add_span(addr, size);
    }

    fn add_span(&mut self, addr: usize, size: usize) {
        if let Some((&a, &s)) = self.spans.range(..=addr).next_back() {
            assert!(a + s <= addr, "live allocations overlap at {addr:#x}");
        }
        if let Some((&a, _)) = self.spans.range(addr..).next() {
            assert!(addr + size <= a, "live allocations overlap at {addr:#x}");
        }
        let (&base, &end) = self
            .regions
            .range(..=addr)
            .next_back()
            .expect("an allocation outside every region");
        assert!(
            addr >= base + self.geo.first_payload() && addr + size <= end,
            "an allocation outside its region"
        );
        self.spans.insert(addr, size);
    }

    /// The usable bytes of the live allocation `h`.
    pub(crate) fn usable(&self, h: &H<R>) -> usize {
        // SAFETY: the driver asks only about live allocations (and the checked build would
        // refuse anything else).
        unsafe { self.rig.subject().usable_size(h) }.expect("a live block must be valid")
    }

    /// Forgets the live allocation `i` (freed, or moved) and remembers it as stale.
    pub(crate) fn forget(&mut self, i: usize) -> Live<H<R>> {
        let l = self.live.swap_remove(i);
        self.spans.remove(&l.addr);
        if self.graveyard.len() == GRAVEYARD {
            self.graveyard.remove(0);
        }
        self.graveyard.push((l.h, l.size));
        l
    }

    pub(crate) fn free(&mut self, i: usize) {
        self.free_as(i, self.live[i].size);
    }

    /// Frees the live allocation `i`, claiming it has `size` bytes (a size it may have).
    pub(crate) fn free_as(&mut self, i: usize, size: usize) {
        let l = self.live[i];
        untraced(|| verify::<R>(&l.h, l.size, l.seed));
        // SAFETY: `free_checked` refuses anything but a live block whose size `size` fits, and
        // the driver forgets the block once it is freed.
        let r = unsafe {
            self.rig
                .subject_mut()
                .free_checked(R::resized(&l.h, size), size)
        };
        untraced(|| {
            assert_eq!(
                r,
                Ok(()),
                "free of the live allocation {l:?} as {size} bytes"
            );
            if let Some(m) = &mut self.model {
                m.free(l.addr);
            }
            self.forget(i);
        });
    }

    /// Whether the heap did it (in place or moved); a refusal is checked as well.
    pub(crate) fn realloc(&mut self, i: usize, new: usize, align: usize) -> bool {
        let l = self.live[i];
        let before = untraced(|| {
            verify::<R>(&l.h, l.size, l.seed);
            self.rig.subject().stats()
        });
        // SAFETY: `l` is live with its size (with the `checked` feature the pointer and size
        // are validated first); the driver uses only the returned handle afterwards.
        let got = unsafe { self.rig.subject_mut().realloc(l.h, l.size, align, new) };
        let done = got.is_ok();
        untraced(|| self.realloc_done(i, new, align, got, before));
        done
    }

    /// Checks the result `got` of resizing the live allocation `i` to `new` bytes (aligned to
    /// `align` if it moves) on a heap that had the statistics `before`, and files the result.
    fn realloc_done(
        &mut self,
        i: usize,
        new: usize,
        align: usize,
        got: Result<H<R>, Error>,
        before: Stats,
    ) {
        let l = self.live[i];
        let got_addr = got.as_ref().map(addr::<R>).map_err(|e| *e);
        if let Some(m) = &mut self.model {
            // The inline heap's realloc (a shrink out of the tries may move); the detached
            // subject resizes in place or moves.
            let want = match R::S::INLINE {
                true => m.realloc(l.addr, new, align),
                false => m.resize_or_move(l.addr, new, align),
            }
            .map(|n| n.unwrap_or(l.addr));
            assert_eq!(
                got_addr, want,
                "realloc({l:?}, {new}, {align}): heap vs model"
            );
        } else if let Err(e) = self.geo.granules_for(new) {
            assert_eq!(got_addr, Err(e), "realloc({l:?}, {new})");
        } else if let Some(e) = got_addr.err().filter(|&e| !self.records_may_run_out(e)) {
            // It could not stay in place, so a new allocation was refused.
            match self.geo.request(new, align) {
                Err(want) => assert_eq!(e, want, "realloc({l:?}, {new}, {align})"),
                Ok((_, want)) => {
                    assert_eq!(e, Error::OutOfMemory, "realloc({l:?}, {new}, {align})");
                    let largest = before.largest_free >> self.geo.shift();
                    assert!(largest < want, "realloc: out of memory, yet {before:?}");
                }
            }
        }
        let Ok(h) = got else { return };
        let addr = addr::<R>(&h);
        if addr == l.addr {
            self.spans.remove(&l.addr);
            self.live.swap_remove(i);
        } else {
            assert_eq!(addr % align, 0, "realloc moved to a misaligned address");
            self.forget(i);
        }
        let kept = l.size.min(new);
        verify::<R>(&h, kept, l.seed);
        self.adopt(h, kept, new, l.seed);
    }

    /// Whether `start..start + len` wraps or overlaps a region.
    fn overlaps(&self, start: usize, len: usize) -> bool {
        match start.checked_add(len) {
            None => true,
            Some(end) => self.regions.iter().any(|(&b, &e)| start < e && b < end),
        }
    }

    fn add_region(&mut self, at: Place, len: usize) {
        let Some(base) = self.rig.resolve(at) else {
            return;
        };
        let g = self.geo.granule();
        let rlen = len & !(g - 1);
        if !self.rig.can_place(base, rlen) {
            return;
        }
        let got = self.rig.subject_mut().add_region(base, len);
        untraced(|| self.add_region_done(base, len, got));
    }

    /// Checks the result `got` of `add_region(base, len)` and files the region.
    fn add_region_done(&mut self, base: usize, len: usize, got: Result<(), Error>) {
        let g = self.geo.granule();
        let rlen = len & !(g - 1);
        if let Some(m) = &mut self.model {
            let want = m.add_region(base, len);
            assert_eq!(got, want, "add_region({base:#x}, {len})");
        } else {
            let small = rlen < self.geo.region_overhead() + self.geo.min_chunk() * g;
            let holds = match got {
                Ok(()) => base & (g - 1) == 0 && !self.overlaps(base, rlen) && !small,
                Err(Error::RegionMisaligned) => base & (g - 1) != 0 || base == 0,
                Err(Error::RegionOverlap) => self.overlaps(base, rlen),
                Err(Error::RegionTooSmall) => small,
                Err(e) => self.records_may_run_out(e),
            };
            assert!(holds, "add_region({base:#x}, {len}): {got:?}");
        }
        if got.is_ok() {
            self.regions.insert(base, base + rlen);
            self.rig.lent(base, base + rlen);
        }
    }

    /// The base address `pick` names: a region's, or a made-up one.
    fn region_base(&self, pick: RegionPick) -> usize {
        match pick.index(self.regions.len()) {
            Some(i) => *self.regions.keys().nth(i).unwrap(),
            None => self.rig.at_offset(pick.stray_offset()),
        }
    }

    fn extend_region(&mut self, pick: RegionPick, len: usize) {
        let base = self.region_base(pick);
        let g = self.geo.granule();
        let rlen = len & !(g - 1);
        let end = self.regions.get(&base).copied();
        if let Some(end) = end {
            if !self.rig.can_place(end, rlen) {
                return;
            }
        }
        let got = self.rig.subject_mut().extend_region(base, len);
        untraced(|| self.extend_region_done(base, len, end, got));
    }

    /// Checks the result `got` of `extend_region(base, len)` (`end`: the region's end, if
    /// `base` is a region's) and files the growth.
    fn extend_region_done(
        &mut self,
        base: usize,
        len: usize,
        end: Option<usize>,
        got: Result<(), Error>,
    ) {
        let g = self.geo.granule();
        let rlen = len & !(g - 1);
        if let Some(m) = &mut self.model {
            let want = m.extend_region(base, len);
            assert_eq!(got, want, "extend_region({base:#x}, {len})");
        } else {
            let holds = match (end, got) {
                (None, got) => got == Err(Error::UnknownRegion),
                (Some(end), Ok(())) => {
                    !self.overlaps(end, rlen) && rlen >= self.geo.min_chunk() * g
                }
                (Some(end), Err(Error::RegionOverlap)) => self.overlaps(end, rlen),
                (Some(_), Err(Error::RegionTooSmall)) => rlen < self.geo.min_chunk() * g,
                (Some(_), Err(e)) => self.records_may_run_out(e),
            };
            assert!(holds, "extend_region({base:#x}, {len}): {got:?}");
        }
        if let (Ok(()), Some(end)) = (got, end) {
            *self.regions.get_mut(&base).unwrap() += rlen;
            self.rig.lent(end, end + rlen);
        }
    }

    /// Whether a live allocation lies in `base..end`.
    fn in_use(&self, base: usize, end: usize) -> bool {
        self.spans.range(base..end).next().is_some()
    }

    fn remove_region(&mut self, pick: RegionPick) {
        let base = self.region_base(pick);
        let got = self.rig.subject_mut().remove_region(base);
        untraced(|| self.remove_region_done(base, got));
    }

    /// Checks the result `got` of `remove_region(base)` and forgets the region.
    fn remove_region_done(&mut self, base: usize, got: Result<(usize, usize), Error>) {
        let want = match self.regions.get(&base) {
            None => Err(Error::UnknownRegion),
            Some(&end) if self.in_use(base, end) => Err(Error::RegionInUse),
            Some(&end) => Ok((base, end - base)),
        };
        assert_eq!(got, want, "remove_region({base:#x})");
        if let Some(m) = &mut self.model {
            let model = m.remove_region(base);
            assert_eq!(model, got, "remove_region({base:#x}): model");
        }
        if got.is_ok() {
            self.regions.remove(&base);
        }
    }

    fn trim(&mut self) {
        let mut got = Vec::new();
        self.rig.subject_mut().trim(|b, len| got.push((b, len)));
        untraced(|| self.trim_done(got));
    }

    /// Checks the regions `trim()` released (`got`) and forgets them.
    fn trim_done(&mut self, mut got: Vec<(usize, usize)>) {
        got.sort_unstable();
        let want: Vec<(usize, usize)> = self
            .regions
            .iter()
            .filter(|&(&b, &e)| !self.in_use(b, e))
            .map(|(&b, &e)| (b, e - b))
            .collect();
        assert_eq!(got, want, "trim");
        if let Some(m) = &mut self.model {
            assert_eq!(m.trim(), got, "trim: model");
        }
        for (b, _) in got {
            self.regions.remove(&b);
        }
    }

    /// The checks after every operation: the heap's invariants, and its statistics against
    /// the driver's account (untraced: see [`crate::trace`]).
    pub(crate) fn after_step(&self) {
        untraced(|| self.check_account());
    }

    fn check_account(&self) {
        let every = full_check_every();
        if every == 1 {
            // The full check after every step, alone (the harness as it was before step checks).
            if let Err(e) = self.rig.subject().check() {
                panic!("check() failed: {e}");
            }
            return self.check_counts();
        }
        let n = self.since_full.get() + 1;
        if n >= every {
            self.since_full.set(0);
            if let Err(e) = self.rig.subject().check() {
                panic!("check() failed: {e}");
            }
        } else {
            self.since_full.set(n);
        }
        // After a full check too, so that the marks are always the previous step's.
        if let Err(e) = self.check_step() {
            panic!("check_step() failed: {e}");
        }
        self.check_counts();
    }

    /// The heap's step check, with the marks of the previous one.
    fn check_step(&self) -> Result<(), tagalloc::CheckError> {
        let mut marks = self.marks.get();
        let r = self.rig.subject().check_step(&mut marks);
        self.marks.set(marks);
        r
    }

    /// The heap's statistics against the driver's account.
    fn check_counts(&self) {
        let st = self.rig.subject().stats();
        assert_eq!(st.live, self.live.len(), "live count: {st:?}");
        assert_eq!(st.regions, self.regions.len(), "region count: {st:?}");
        let managed: usize = self
            .regions
            .iter()
            .map(|(&b, &e)| e - b - self.geo.region_overhead())
            .sum();
        assert_eq!(st.managed, managed, "managed bytes: {st:?}");
        assert_eq!(st.in_use + st.free, st.managed, "bytes: {st:?}");
    }

    /// Verifies the contents of every live allocation.
    pub fn verify_all(&self) {
        untraced(|| {
            for l in &self.live {
                verify::<R>(&l.h, l.size, l.seed);
            }
        });
    }

    /// Frees everything, then checks that every region is one free chunk again: the
    /// statistics say so, and an allocation of each whole region succeeds, at its first
    /// payload.
    pub fn finish(mut self) {
        self.verify_all();
        while !self.live.is_empty() {
            self.free(self.live.len() - 1);
            self.after_step();
        }
        let st = self.rig.subject().stats();
        assert_eq!((st.live, st.in_use), (0, 0), "{st:?}");
        assert_eq!(
            st.free_chunks, st.regions,
            "a region is not one free chunk: {st:?}"
        );
        if let Some(m) = &self.model {
            untraced(|| {
                assert!(m.chunks().values().all(|c| c.free));
                assert_eq!(m.chunks().len(), self.regions.len());
                assert!(m.regions().eq(self.regions.iter().map(|(&b, &e)| (b, e))));
            });
        }
        // Largest first: a whole-region request then fits no free chunk but the regions of
        // its length (the top, the region grown last, is carved only when no other chunk
        // fits, so smallest first could take a larger region's chunk for the top's size).
        let mut by_len: Vec<(usize, usize)> =
            self.regions.iter().map(|(&b, &e)| (e - b, b)).collect();
        by_len.sort_unstable_by(|a, b| b.cmp(a));
        let mut firsts: BTreeSet<usize> = self
            .regions
            .keys()
            .map(|&b| b + self.geo.first_payload())
            .collect();
        let mut whole = Vec::new();
        let mut all = true;
        for (len, base) in by_len {
            let size = self
                .geo
                .whole_region_request(len)
                .expect("a region too small for a chunk");
            match self.rig.subject_mut().alloc(size, 1) {
                Ok(h) => {
                    let a = addr::<R>(&h);
                    assert!(firsts.remove(&a), "whole-region allocation at {a:#x}");
                    whole.push((h, size));
                }
                Err(Error::SizeOverflow) if self.geo.granules_for(size).is_err() => all = false,
                Err(e) if self.records_may_run_out(e) => all = false,
                Err(e) => panic!("whole-region allocation of {base:#x} ({len} bytes): {e}"),
            }
        }
        if all {
            assert_eq!(self.rig.subject().stats().free_chunks, 0);
        }
        // A step check here; the full check once all is free again, below.
        untraced(|| self.check_step()).unwrap();
        for (h, size) in whole {
            // SAFETY: `h` is a whole-region block just allocated, not used again.
            let freed = unsafe { self.rig.subject_mut().free_checked(h, size) };
            assert_eq!(freed, Ok(()));
        }
        untraced(|| self.rig.subject().check()).unwrap();
        let st = self.rig.subject().stats();
        assert_eq!(st.free_chunks, st.regions, "{st:?}");
    }
}
