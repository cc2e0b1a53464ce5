//! A region source over one pre-touched [`Arena`], so that a pool's policy can be measured
//! without the operating system in the timings: regions are page-aligned ranges of the arena,
//! placed first fit, and no page is ever mapped, faulted or unmapped while a replay runs.
//!
//! It does what a real source does with the arena's address space, and keeps books of it:
//! - `obtain`: the lowest free range that fits (as `mmap` of a fresh range);
//! - `give_back`: the range becomes free again;
//! - `grow` (only when built with growth in place, as a reserved virtual range or `mremap`
//!   in place can): the space right after a region, if nothing else holds it;
//! - `shrink`: a region's tail becomes free again (as `munmap` of a tail);
//! - `release`: counted only. The pages stay as they are, so the replays after a trim are not
//!   slowed by page faults that a real `madvise(MADV_DONTNEED)` would cause; the bytes are
//!   what such a source would have released.
//!
//! A call that does not match the books (a range given back that was never handed out, say) is
//! refused and counted, never trusted: [`ArenaSource::errors`] reports it.

use std::collections::BTreeMap;
use std::marker::PhantomData;
use std::ptr::NonNull;

use tagalloc::{Error, RegionSource};

use crate::subjects::Arena;

/// The granularity of every region: the page size.
pub const PAGE: usize = 4096;

/// Page-aligned regions of an arena, handed out first fit.
///
/// Invariant: `out` maps the offset of every region handed out and not given back to its
/// length; the ranges are disjoint, page-aligned and inside `0..len`.
pub struct ArenaSource<'a> {
    base: NonNull<u8>,
    len: usize,
    out: BTreeMap<usize, usize>,
    grows: bool,
    released: u64,
    /// The highest end of a range ever handed out: the arena address space the source used.
    high: usize,
    errors: u64,
    _arena: PhantomData<&'a mut Arena>,
}

impl<'a> ArenaSource<'a> {
    /// A source of regions of `arena`; `grows` lets a region grow in place into free space
    /// right after it.
    pub fn new(arena: &'a mut Arena, grows: bool) -> Self {
        ArenaSource {
            base: arena.base(),
            len: arena.len() & !(PAGE - 1),
            out: BTreeMap::new(),
            grows,
            released: 0,
            high: 0,
            errors: 0,
            _arena: PhantomData,
        }
    }

    /// Bytes the pool asked to release (pages of free chunks), in total.
    pub fn released(&self) -> u64 {
        self.released
    }

    /// The highest offset ever handed out, plus its length: how much of the arena's address
    /// space the pool's regions spread over.
    pub fn high_water(&self) -> usize {
        self.high
    }

    /// Calls that did not match the books (refused; a pool bug if ever non-zero).
    pub fn errors(&self) -> u64 {
        self.errors
    }

    fn offset(&self, addr: usize) -> Option<usize> {
        addr.checked_sub(self.base.addr().get())
            .filter(|&o| o < self.len)
    }

    /// The lowest offset where `len` bytes are free.
    fn place(&self, len: usize) -> Option<usize> {
        let mut at = 0;
        for (&o, &l) in &self.out {
            if o >= at + len {
                break;
            }
            at = at.max(o + l);
        }
        (at.checked_add(len)? <= self.len).then_some(at)
    }

    /// The first offset at or past `end` that a region holds (or the arena's end).
    fn next_taken(&self, end: usize) -> usize {
        self.out.range(end..).next().map_or(self.len, |(&o, _)| o)
    }

    /// Whether `base..base + len` is exactly a region handed out.
    fn is_region(&self, base: usize, len: usize) -> bool {
        self.offset(base)
            .is_some_and(|o| self.out.get(&o) == Some(&len))
    }
}

// SAFETY: every region is a range of the arena, which the source borrows mutably for 'a (so it
// outlives any pool holding the source, and nothing else uses it meanwhile); the books hand
// each byte to at most one region at a time, and `grow` only adds the free range right after
// a region, reachable through the region's base (one allocation). Released ranges are left as
// they are, so they stay usable.
unsafe impl RegionSource for ArenaSource<'_> {
    type Base = NonNull<u8>;

    fn addr(base: NonNull<u8>) -> usize {
        base.addr().get()
    }

    fn granularity(&self) -> usize {
        PAGE
    }

    fn obtain(&mut self, min: usize) -> Result<(NonNull<u8>, usize), Error> {
        let len = min.max(1).next_multiple_of(PAGE);
        let at = self.place(len).ok_or(Error::OutOfMemory)?;
        self.out.insert(at, len);
        self.high = self.high.max(at + len);
        // SAFETY: `at + len <= self.len`, inside the arena's allocation.
        let base = unsafe { self.base.add(at) };
        Ok((base, len))
    }

    unsafe fn give_back(&mut self, base: NonNull<u8>, len: usize) {
        if !self.is_region(base.addr().get(), len) {
            self.errors += 1;
            return;
        }
        if let Some(o) = self.offset(base.addr().get()) {
            self.out.remove(&o);
        }
    }

    fn grow(&mut self, base: NonNull<u8>, len: usize, additional: usize) -> Result<usize, Error> {
        if !self.grows {
            return Err(Error::OutOfMemory);
        }
        if !self.is_region(base.addr().get(), len) || !additional.is_multiple_of(PAGE) {
            self.errors += 1;
            return Err(Error::UnknownRegion);
        }
        let o = self.offset(base.addr().get()).ok_or(Error::UnknownRegion)?;
        let end = o + len;
        if end
            .checked_add(additional)
            .is_none_or(|e| e > self.next_taken(end))
        {
            return Err(Error::OutOfMemory);
        }
        self.out.insert(o, len + additional);
        self.high = self.high.max(end + additional);
        Ok(additional)
    }

    unsafe fn shrink(&mut self, base: NonNull<u8>, len: usize, keep: usize) -> bool {
        if !self.is_region(base.addr().get(), len)
            || keep == 0
            || keep >= len
            || !keep.is_multiple_of(PAGE)
        {
            self.errors += 1;
            return false;
        }
        match self.offset(base.addr().get()) {
            Some(o) => {
                self.out.insert(o, keep);
                true
            }
            None => false,
        }
    }

    unsafe fn release(&mut self, start: usize, len: usize) -> bool {
        let inside = self.offset(start).is_some_and(|o| {
            self.out
                .range(..=o)
                .next_back()
                .is_some_and(|(&r, &l)| o + len <= r + l)
        });
        if !inside || !start.is_multiple_of(PAGE) || !len.is_multiple_of(PAGE) {
            self.errors += 1;
            return false;
        }
        self.released += len as u64;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_fit_growth_and_books() {
        let mut arena = Arena::new(64 * PAGE).unwrap();
        let mut s = ArenaSource::new(&mut arena, true);
        let (a, la) = s.obtain(PAGE + 1).unwrap();
        assert_eq!(la, 2 * PAGE);
        let (b, _) = s.obtain(PAGE).unwrap();
        assert_eq!(b.addr().get(), a.addr().get() + 2 * PAGE);
        // `a` cannot grow into `b`; `b` can grow into the free space after it.
        assert_eq!(s.grow(a, la, PAGE), Err(Error::OutOfMemory));
        assert_eq!(s.grow(b, PAGE, 3 * PAGE), Ok(3 * PAGE));
        // SAFETY: the source never hands out memory in this test's use of it.
        unsafe {
            assert!(s.shrink(b, 4 * PAGE, PAGE));
            s.give_back(a, la);
        }
        // The first fit is `a`'s old place again.
        let (c, _) = s.obtain(PAGE).unwrap();
        assert_eq!(c, a);
        // SAFETY: as above; `b` is one page now and inside the arena.
        unsafe {
            assert!(s.release(b.addr().get(), PAGE));
            assert!(!s.release(b.addr().get(), 2 * PAGE), "past the region");
            s.give_back(b, 4 * PAGE); // the wrong length: refused and counted
        }
        assert_eq!(s.released(), PAGE as u64);
        assert_eq!(s.errors(), 2);
        assert_eq!(s.high_water(), 6 * PAGE);
        assert_eq!(s.obtain(1 << 30), Err(Error::OutOfMemory));
    }

    #[test]
    fn without_growth_regions_stay_apart() {
        let mut arena = Arena::new(16 * PAGE).unwrap();
        let mut s = ArenaSource::new(&mut arena, false);
        let (a, la) = s.obtain(PAGE).unwrap();
        assert_eq!(s.grow(a, la, PAGE), Err(Error::OutOfMemory));
        assert_eq!(s.errors(), 0);
    }
}
