//! Region sources: where a [`crate::Pool`] gets its regions and where it gives them back.
//!
//! A source hands out whole regions ([`RegionSource::obtain`]) and takes them back
//! ([`RegionSource::give_back`]). It may also grow a region in place, keeping it one region
//! ([`RegionSource::grow`]: `mremap`, or mapping more physical pages into a reserved virtual
//! range), give back a region's tail ([`RegionSource::shrink`]: unmapping the pages past a
//! point), release the pages of a free range while keeping it ([`RegionSource::release`]:
//! `madvise(MADV_DONTNEED)`), and say how much it could still supply
//! ([`RegionSource::available`], for a pool that reserves a fraction up front). A source may
//! keep regions given back for reuse instead of returning them at once (the host source keeps
//! freed large mappings a while: see `tagalloc_host::Reuse`): it says how many bytes it keeps
//! ([`RegionSource::cached`]) and gives them all back when the pool is trimmed
//! ([`RegionSource::purge`]). Backends
//! implement it: anonymous `mmap` in `tagalloc-host`, device allocations and virtual-memory
//! growth in `tagalloc-cuda`.
//!
//! The pool trusts a source with nothing: a region that is smaller than asked for, misaligned,
//! or overlapping one the pool already manages is refused with an error before a byte of it is
//! written. A region too small or misaligned is given back at once; one that overlaps a managed
//! region is not (giving it back could release memory the pool uses) and is reported as
//! [`crate::Error::RegionOverlap`].

use crate::error::Error;

/// A supplier of regions for a pool.
///
/// `Base` names a region the way its heap takes it: `NonNull<u8>` for memory the heap writes
/// its tags into ([`crate::InlineHeap`]), `usize` for an address range it never touches
/// ([`crate::DetachedHeap`]).
///
/// # Safety
/// A region handed out by [`RegionSource::obtain`] (and every range added by
/// [`RegionSource::grow`]) must be valid for the heap to use as its placement requires (for
/// inline tags: readable and writable memory, used by nothing else) from the moment it is
/// handed out until it is given back, and reachable through its base (one allocation or
/// mapping, which is what lets a grown region stay one). Ranges named to
/// [`RegionSource::release`] may read as anything afterwards but must stay usable.
pub unsafe trait RegionSource {
    /// How a region's base is named.
    type Base: Copy;

    /// The address `base` stands for.
    fn addr(base: Self::Base) -> usize;

    /// The size every region's length, growth and shrinking is a multiple of, and the
    /// alignment of every base (a power of two: the page size, the huge-page size, or the
    /// device's mapping granularity).
    fn granularity(&self) -> usize;

    /// A new region of at least `min` bytes (a multiple of the granularity), as `(base, len)`
    /// with `len ≥ min`. Errors: `OutOfMemory` when the source has nothing more to give, or
    /// whatever refusal the source reports.
    fn obtain(&mut self, min: usize) -> Result<(Self::Base, usize), Error>;

    /// Takes back a region: `base` and `len` exactly as obtained, plus every growth, less every
    /// shrink.
    ///
    /// # Safety
    /// The region came from this source, and nothing uses it any more (the pool has removed
    /// it from its heap).
    unsafe fn give_back(&mut self, base: Self::Base, len: usize);

    /// Grows the region `base..base + len` in place by at least `additional` bytes (a multiple
    /// of the granularity), right after its end; returns how many bytes were added. `Err`
    /// (`OutOfMemory` by default) when it cannot: then nothing changed.
    fn grow(&mut self, base: Self::Base, len: usize, additional: usize) -> Result<usize, Error> {
        let _ = (base, len, additional);
        Err(Error::OutOfMemory)
    }

    /// Takes back the tail `base + keep .. base + len` of a region (`keep` a multiple of the
    /// granularity, less than `len`), which stays a region of `keep` bytes. Returns whether it
    /// did; by default it does not.
    ///
    /// # Safety
    /// The region came from this source and nothing uses the tail any more.
    unsafe fn shrink(&mut self, base: Self::Base, len: usize, keep: usize) -> bool {
        let _ = (base, len, keep);
        false
    }

    /// Releases the pages of `start..start + len` (granularity-aligned, inside one region)
    /// while the range stays part of its region: its contents may read as anything (zeros,
    /// for anonymous memory) the next time they are used. Returns whether it did; by default
    /// it does not.
    ///
    /// # Safety
    /// The range is inside a region from this source and holds nothing anyone needs (the
    /// heap's own tags included: see `free_spans`).
    unsafe fn release(&mut self, start: usize, len: usize) -> bool {
        let _ = (start, len);
        false
    }

    /// Bytes of regions given back that the source keeps for reuse instead of returning them
    /// (still held from the system: mapped, resident), 0 by default.
    fn cached(&self) -> usize {
        0
    }

    /// Returns to the system everything the source keeps for reuse ([`RegionSource::cached`]);
    /// the bytes returned. [`crate::Pool::trim`] calls it after giving its free regions back, and
    /// so does a pool being dropped. By default there is nothing to return.
    fn purge(&mut self) -> usize {
        0
    }

    /// How many more bytes the source could supply now, if it knows (a device's free memory,
    /// say). Used to reserve a fraction of it up front.
    fn available(&self) -> Option<usize> {
        None
    }
}
