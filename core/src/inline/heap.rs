//! The inline heap: the public face of the inline placement (`crate::inline::tags`), the
//! algorithm over tags kept inside the host memory it manages.

use core::ptr::NonNull;

use crate::algo::check::StepMarks;
use crate::algo::geometry::{Geometry, W};
use crate::algo::heap::Heap;
use crate::algo::shape::{BinShape, Compact, Wide};
use crate::algo::stats::{Counters, NoCounters, Stats, Tally};
use crate::algo::tags::Tags;
use crate::error::{as_pair, BlockError, CheckError, Error};
use crate::inline::granule::{AnyGranule, Granule, HostGranule};
use crate::inline::tags::{Chunk, InlineTags, FLAGS, IN_USE};

/// A heap whose boundary tags live inside the host memory it manages.
///
/// It owns the regions given to it until they are removed. Sizes are rounded to granules
/// (16 bytes by default) with one word of tag per allocation; any power-of-two alignment is
/// served, alignments above the granule by splitting off a leading free fragment.
///
/// `G` says where the granule comes from: [`HostGranule`] (the default, [`InlineHeap::new`])
/// makes it a constant of the compiled code, which the hot paths need (about a tenth of an
/// allocation's instructions); [`AnyGranule`] ([`InlineHeap::with_granule`]) reads it from the
/// heap, for granules above 16 bytes. Both run the same algorithm.
///
/// `K` says whether it keeps statistics ([`Tally`]): [`Counters`] (the default) behind
/// [`InlineHeap::stats`], or [`NoCounters`] ([`InlineHeap::without_stats`]), which skips a few
/// counter updates on every call.
///
/// # Examples
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use tagalloc::{Error, InlineHeap};
///
/// let mut arena = vec![0u128; 4096]; // 64 KiB, 16-byte aligned
/// let mut heap = InlineHeap::new();
/// // SAFETY: the arena outlives the heap and nothing else touches it.
/// unsafe { heap.add_region(arena.as_mut_ptr().cast(), 64 << 10)? };
/// let p = heap.alloc(100, 16)?; // best fit, 16-aligned
/// // SAFETY: `p` is a live 100-byte allocation of this heap.
/// let p = unsafe { heap.realloc(p, 100, 16, 400)? }; // grows in place when it can
/// assert_eq!(heap.alloc(0, 16), Err(Error::ZeroSize));
/// // SAFETY: `p` is not used afterwards.
/// unsafe { heap.free_checked(p, 400)? };
/// // SAFETY: deliberately a double free: the checked free refuses it.
/// assert_eq!(unsafe { heap.free_checked(p, 400) }, Err(Error::DoubleFree));
/// heap.check()?; // verifies every invariant
/// assert_eq!(heap.stats().in_use, 0);
/// # Ok(())
/// # }
/// ```
pub struct InlineHeap<G: Granule = HostGranule, K: Tally = Counters, B: BinShape = Wide> {
    pub(crate) heap: Heap<InlineTags<G>, K, B>,
}

// SAFETY: the heap owns its regions exclusively (the `add_region` contract) and holds no
// thread-bound state, so it may move to another thread with them.
unsafe impl<G: Granule, K: Tally, B: BinShape> Send for InlineHeap<G, K, B> {}

impl Default for InlineHeap {
    fn default() -> Self {
        Self::new()
    }
}

impl InlineHeap {
    /// An empty heap with the host granule of 16 bytes, which the compiler then knows: every
    /// size computation of the hot paths shifts and rounds by constants (see
    /// [`HostGranule`]). Add memory with [`InlineHeap::add_region`].
    ///
    /// # Time Complexity
    /// `O(1)`.
    pub const fn new() -> Self {
        Self::host()
    }
}

impl<K: Tally, B: BinShape> InlineHeap<HostGranule, K, B> {
    /// An empty heap with the host granule, counting with `K` (for the constructors that are
    /// generic over the tally; callers name [`InlineHeap::new`] or
    /// [`InlineHeap::without_stats`]).
    pub(crate) const fn host() -> Self {
        InlineHeap {
            heap: Heap::new(InlineTags::new(())),
        }
    }
}

impl InlineHeap<HostGranule, NoCounters> {
    /// [`InlineHeap::new`] without statistics: every call runs as in a heap that counts and
    /// hands out the same addresses, without updating the counters (see [`Tally`]; figures:
    /// `docs/measurements.md#statsrs-what-the-counters-cost`). It has no `stats`, and its `check`
    /// verifies everything but the counters.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use tagalloc::{HostGranule, InlineHeap, NoCounters};
    ///
    /// // A `const fn`, so a `static`'s heap can be built this way too.
    /// const EMPTY: InlineHeap<HostGranule, NoCounters> = InlineHeap::without_stats();
    /// let mut arena = vec![0u128; 4096];
    /// let mut heap = EMPTY;
    /// // SAFETY: the arena outlives the heap and nothing else touches it.
    /// unsafe { heap.add_region(arena.as_mut_ptr().cast(), 64 << 10)? };
    /// let p = heap.alloc(100, 16)?;
    /// // SAFETY: `p` is a live 100-byte allocation of this heap, not used afterwards.
    /// unsafe { heap.free_checked(p, 100)? };
    /// heap.check()?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Time Complexity
    /// `O(1)`.
    pub const fn without_stats() -> Self {
        Self::host()
    }
}

impl InlineHeap<HostGranule, Counters, Compact> {
    /// [`InlineHeap::new`] with the bins of small machines ([`Compact`]): the same policy and
    /// addresses, a small fraction of the state (a `GlobalHeap` of them fits in 1 KiB on a
    /// 32-bit target), and slower for sizes above 64 granules (1 KiB), which a trie serves
    /// instead of a list (sizes in `docs/small-machines.md`, speeds in `docs/measurements.md`).
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use tagalloc::InlineHeap;
    ///
    /// let mut arena = vec![0u128; 1024];
    /// let mut heap = InlineHeap::compact();
    /// // SAFETY: the arena outlives the heap and nothing else touches it.
    /// unsafe { heap.add_region(arena.as_mut_ptr().cast(), 16 << 10)? };
    /// let p = heap.alloc(3000, 16)?; // above the compact lists: from a trie
    /// // SAFETY: `p` is a live 3000-byte allocation of this heap, not used afterwards.
    /// unsafe { heap.free_checked(p, 3000)? };
    /// heap.check()?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Time Complexity
    /// `O(1)`.
    pub const fn compact() -> Self {
        Self::host()
    }
}

impl InlineHeap<AnyGranule, NoCounters> {
    /// [`InlineHeap::with_granule`] without statistics (see [`InlineHeap::without_stats`]).
    /// Errors: `BadGranule`.
    ///
    /// # Time Complexity
    /// `O(1)`.
    pub const fn with_granule_without_stats(granule: usize) -> Result<Self, Error> {
        Self::any(granule)
    }
}

impl<K: Tally> InlineHeap<AnyGranule, K> {
    /// An empty heap with `granule`, counting with `K` (see [`InlineHeap::with_granule`]).
    const fn any(granule: usize) -> Result<Self, Error> {
        match Geometry::inline(granule) {
            Ok(layout) => Ok(InlineHeap {
                heap: Heap::new(InlineTags::new(layout)),
            }),
            Err(e) => Err(e),
        }
    }
}

impl InlineHeap<AnyGranule> {
    /// An empty heap with another granule: a power of two from 16 bytes
    /// ([`HOST_GRANULE`](crate::HOST_GRANULE)) to [`MAX_GRANULE`](crate::MAX_GRANULE) (1 GiB).
    /// Every request is rounded up to a whole number of granules (its one-word tag included)
    /// and every payload is granule-aligned; a region loses up to a granule at its start to its
    /// header. The granule is read at run time ([`AnyGranule`]):
    /// [`InlineHeap::new`] is faster for the host granule. Errors: `BadGranule`.
    ///
    /// # Time Complexity
    /// `O(1)`.
    pub const fn with_granule(granule: usize) -> Result<Self, Error> {
        Self::any(granule)
    }
}

impl<G: Granule, K: Tally, B: BinShape> InlineHeap<G, K, B> {
    /// The granule in bytes.
    ///
    /// # Time Complexity
    /// `O(1)`.
    pub fn granule(&self) -> usize {
        self.heap.tags().geometry().granule()
    }

    /// Hands `len` bytes at `base` to the heap as a new region. `base` must be granule-aligned;
    /// `len` is rounded down to granules. A region is never merged with another that happens to
    /// be adjacent (they may be separate allocations); use [`InlineHeap::extend_region`] for
    /// memory that continues a region.
    ///
    /// Errors: `RegionMisaligned` (null or unaligned base), `RegionOverlap` (overlaps a managed
    /// region or wraps), `RegionTooSmall`. Nothing is written on error.
    ///
    /// # Time Complexity
    /// `O(regions)`.
    ///
    /// # Safety
    /// `base..base + len` must be valid for reads and writes, must not be used by anything else
    /// until the heap is dropped or the region is removed, and must outlive the heap's use of
    /// it.
    pub unsafe fn add_region(&mut self, base: *mut u8, len: usize) -> Result<(), Error> {
        let base = NonNull::new(base).ok_or(Error::RegionMisaligned)?;
        // SAFETY: forwarded caller contract.
        unsafe { self.heap.add_region(base, len) }
    }

    /// Grows the region that starts at `region` by `additional` bytes (rounded down to
    /// granules) right after its end, as `sbrk` or reserved virtual memory allow. The new
    /// space merges with the region's free end: no boundary is left behind.
    ///
    /// Errors: `UnknownRegion`, `RegionOverlap`, `RegionTooSmall` (less than one minimum
    /// chunk). Nothing is written on error.
    ///
    /// # Time Complexity
    /// `O(regions)`.
    ///
    /// # Safety
    /// The added range must be valid for reads and writes, used by nothing else, and reachable
    /// through the pointer the region was added with (one allocation or mapping).
    pub unsafe fn extend_region(
        &mut self,
        region: *mut u8,
        additional: usize,
    ) -> Result<(), Error> {
        let base = NonNull::new(region).ok_or(Error::UnknownRegion)?;
        // SAFETY: forwarded caller contract.
        unsafe { self.heap.extend_region(base, additional) }
    }

    /// Removes the region that starts at `base` if none of it is allocated, and gives its range
    /// back (granule-rounded) for the caller to release. Errors: `UnknownRegion`,
    /// `RegionInUse`.
    ///
    /// # Time Complexity
    /// `O(regions)`.
    pub fn remove_region(&mut self, base: *mut u8) -> Result<(NonNull<u8>, usize), Error> {
        self.heap.remove_region(base.addr())
    }

    /// Removes every wholly free region, calling `release(base, len)` for each; returns how
    /// many were removed.
    ///
    /// # Time Complexity
    /// `O(regions)`.
    pub fn trim(&mut self, release: impl FnMut(NonNull<u8>, usize)) -> usize {
        self.heap.trim(release)
    }

    /// The region containing `addr`, as `(base, len)`, if any.
    ///
    /// # Time Complexity
    /// `O(regions)`.
    pub fn region_of(&self, addr: usize) -> Option<(NonNull<u8>, usize)> {
        self.heap.region_of(addr)
    }

    /// Allocates `size` bytes aligned to `align` (a power of two). The best fit among free
    /// chunks is used: the smallest that fits, oldest among equals; the top (the free end of
    /// the region the heap grows at) only when no other free chunk fits. For alignments above
    /// the granule, the best fit for the size plus the worst-case alignment padding. A listed
    /// size (up to 32 KiB) at most granule-aligned that no chunk of exactly its size serves is
    /// carved from the victim first, the rest of the chunk carved last for such a request
    /// (see the crate's glossary).
    /// Errors:
    /// `ZeroSize`, `SizeOverflow`, `BadAlign`, `OutOfMemory`.
    ///
    /// # Time Complexity
    /// `O(1)` for sizes kept in lists (up to 2047 granules, 32 KiB at the host granule);
    /// `O(bits of a size)` otherwise (one walk down a bin's trie).
    #[inline(always)]
    pub fn alloc(&mut self, size: usize, align: usize) -> Result<NonNull<u8>, Error> {
        let c = self.heap.alloc(size, align)?;
        Ok(c.payload())
    }

    /// Files the victim into its bin, so that the next listed requests take a free chunk of
    /// exactly their size or the best fit, not the rest of the chunk carved last. What a
    /// thread cache does after giving a batch back (`SharedPool`'s spill and flush): the
    /// victim may be a large span never yet touched (the end of a region other than the top
    /// region), and a block the cache held beside it kept the frees before it from merging
    /// into it and so from filing it, which the same frees do without a cache.
    ///
    /// # Time Complexity
    /// `O(1)` for a victim of a listed size; `O(bits of a size)` otherwise.
    #[inline]
    pub(crate) fn file_victim(&mut self) {
        self.heap.file_victim();
    }

    /// Frees an allocation of `size` bytes.
    ///
    /// What is detected depends on the build, and a refused free writes nothing:
    /// - always: the chunk's tag says it is free already, or that a merge absorbed the chunk
    ///   into a free neighbour (a double free, unless the memory was handed out again since):
    ///   `DoubleFree`;
    /// - with the `checked` feature this is [`InlineHeap::free_checked`]: a pointer that is not
    ///   the payload of a live chunk of this heap (`ForeignPointer`, or `DoubleFree` for one
    ///   into a free chunk), a size that does not fit the chunk (`WrongSize`).
    ///
    /// # Time Complexity
    /// Without `checked`: `O(1)` when the merged chunk has up to 2047 granules, `O(bits of a
    /// size)` otherwise. With it, as for [`InlineHeap::free_checked`].
    ///
    /// # Safety
    /// Without `checked`: `ptr` must have come from this heap's `alloc`/`realloc`, and not have
    /// been freed since (beyond the tag check above, a foreign pointer, or a double free after
    /// the memory was handed out again, reads whatever lies before `ptr`: undefined behaviour;
    /// [`InlineHeap::usable_size_in`] proves a pointer first in `O(1)`). With `checked`, only the
    /// rule that holds for every build: the memory must not be used after a successful return,
    /// and a double free after the chunk was handed out again frees the new owner's block (no
    /// allocator can tell those apart).
    #[inline(always)]
    pub unsafe fn free(&mut self, ptr: NonNull<u8>, size: usize) -> Result<(), Error> {
        if cfg!(feature = "checked") {
            // SAFETY: forwarded caller contract (a subset of it).
            return unsafe { self.free_checked(ptr, size) };
        }
        prefetch_successor(ptr, size);
        // SAFETY: without `checked`, `ptr` is a payload of this heap (the caller's contract).
        self.heap.free_in_use(unsafe { Chunk::of_payload(ptr) })
    }

    /// Frees an allocation after proving that `ptr` is the payload of a live chunk of this
    /// heap whose size fits `size`: reports `ForeignPointer`, `DoubleFree` (the chunk is free,
    /// or `ptr` points into a free chunk where a payload could have been) or `WrongSize`
    /// instead of corrupting anything; a refused free writes nothing.
    ///
    /// # Time Complexity
    /// `O(regions + chunks of ptr's region)`: a walk to find the chunk.
    ///
    /// # Safety
    /// The memory must not be used after a successful return (it may be handed out again). A
    /// double free after the chunk was handed out again frees the new owner's block: that
    /// stays the caller's promise.
    pub unsafe fn free_checked(&mut self, ptr: NonNull<u8>, size: usize) -> Result<(), Error> {
        let c = self.validated_chunk(ptr, size)?;
        self.heap.free(c);
        Ok(())
    }

    /// The live chunk whose payload is `ptr`, if its size fits `size`; a refusal is counted in
    /// the statistics.
    fn validated_chunk(&mut self, ptr: NonNull<u8>, size: usize) -> Result<Chunk, Error> {
        match self.find_chunk(ptr) {
            Ok(c) if self.heap.size_fits(c, size) => Ok(c),
            Ok(_) => Err(self.heap.refused(Error::WrongSize)),
            Err(e) => Err(self.heap.refused(e)),
        }
    }

    /// Finds the live chunk whose payload is `ptr` by a bounds-checked walk of its region
    /// (see [`crate::inline::probe`]): `DoubleFree` for the payload of a free chunk or of one a merge
    /// absorbed, `Corrupted` for tags that cannot be, `ForeignPointer` for anything else that
    /// is not a live chunk's payload.
    fn find_chunk(&self, ptr: NonNull<u8>) -> Result<Chunk, Error> {
        self.find_checked(ptr).map_err(Error::from)
    }

    /// Resizes an allocation of `old_size` bytes to `new_size`: shrinks in place, or grows in
    /// place into a free successor, and only if neither works moves it to a new chunk aligned
    /// to `align`, copying `min(old_size, new_size)` bytes (never more than the old chunk
    /// holds). A block whose chunk is above 2047 granules (32 KiB at the host granule) shrinking
    /// to at most 2047 moves instead, into the best fitting free chunk outside the top if there
    /// is one, so that the whole old chunk is freed (for alignments up to the granule; see the
    /// crate's policy). On error the old allocation is untouched. Detects what
    /// [`InlineHeap::free`] detects in the same build, before anything is written.
    ///
    /// # Time Complexity
    /// As for [`InlineHeap::alloc`] plus [`InlineHeap::free`], and the copy when it moves.
    ///
    /// # Safety
    /// As for [`InlineHeap::free`]; `old_size` must be the size the block was allocated or last
    /// resized with. On success the old pointer must no longer be used unless it was returned.
    #[inline(always)]
    pub unsafe fn realloc(
        &mut self,
        ptr: NonNull<u8>,
        old_size: usize,
        align: usize,
        new_size: usize,
    ) -> Result<NonNull<u8>, Error> {
        // SAFETY: forwarded caller contract.
        let (p, e) = unsafe { self.realloc_pair(ptr, old_size, align, new_size) };
        p.ok_or(e)
    }

    /// [`InlineHeap::realloc`] out of line: the new pointer, or `None` and the error, as a pair
    /// ([`as_pair`]), which comes back in registers where the `Result` would come back through
    /// memory.
    ///
    /// # Safety
    /// As for [`InlineHeap::realloc`].
    #[inline(never)]
    unsafe fn realloc_pair(
        &mut self,
        ptr: NonNull<u8>,
        old_size: usize,
        align: usize,
        new_size: usize,
    ) -> (Option<NonNull<u8>>, Error) {
        // SAFETY: forwarded caller contract.
        as_pair(unsafe { self.realloc_result(ptr, old_size, align, new_size) })
    }

    /// [`InlineHeap::realloc`]'s work, as a `Result`.
    ///
    /// # Safety
    /// As for [`InlineHeap::realloc`].
    #[inline(always)]
    unsafe fn realloc_result(
        &mut self,
        ptr: NonNull<u8>,
        old_size: usize,
        align: usize,
        new_size: usize,
    ) -> Result<NonNull<u8>, Error> {
        let c = if cfg!(feature = "checked") {
            self.validated_chunk(ptr, old_size)?
        } else {
            // SAFETY: without `checked`, `ptr` is a payload of this heap (the caller's
            // contract).
            let c = unsafe { Chunk::of_payload(ptr) };
            if self.heap.tags().is_free(c) {
                return Err(self.heap.refused(Error::DoubleFree));
            }
            c
        };
        // The new size in granules, computed once for the attempt in place and the move.
        let need = self.heap.tags().geometry().granules_for(new_size)?;
        let new = match self.heap.shrink_target(c, need, align) {
            Some(new) => new,
            None => {
                if self.heap.resize_granules(c, need)? {
                    return Ok(ptr);
                }
                if self.heap.tags().geometry().granule_aligned(align) {
                    self.heap.alloc_granules(need)?
                } else {
                    self.heap.alloc(new_size, align)?
                }
            }
        }
        .payload();
        let t = self.heap.tags();
        let have = t.size(c);
        let keep = old_size.min(new_size).min(t.geometry().bytes_of(have) - W);
        // SAFETY: both chunks are live and distinct; `keep` fits in the old chunk's payload
        // and in the new allocation.
        unsafe { core::ptr::copy_nonoverlapping(ptr.as_ptr(), new.as_ptr(), keep) };
        self.heap.free_sized(c, have);
        Ok(new)
    }

    /// Resizes the live block at `ptr` in place to serve `size` bytes (shrinking, or growing
    /// into a free successor); `OutOfMemory`, the block unchanged, if it cannot grow in place.
    ///
    /// # Safety
    /// `ptr` is a live allocation of this heap.
    pub(crate) unsafe fn resize_in_place(
        &mut self,
        ptr: NonNull<u8>,
        size: usize,
    ) -> Result<(), Error> {
        // SAFETY: `ptr` is a live allocation of this heap (the caller's contract).
        self.heap
            .resize_in_place(unsafe { Chunk::of_payload(ptr) }, size)
    }

    /// Bytes usable at `ptr` (at least what was asked for), with the same checks as
    /// [`InlineHeap::free`] in this build (nothing is counted as refused).
    ///
    /// # Time Complexity
    /// `O(1)` without `checked`; with it, as for [`InlineHeap::free_checked`].
    ///
    /// # Safety
    /// As for [`InlineHeap::free`]: without `checked`, `ptr` must be a live allocation of this
    /// heap.
    pub unsafe fn usable_size(&self, ptr: NonNull<u8>) -> Result<usize, Error> {
        let c = if cfg!(feature = "checked") {
            self.find_chunk(ptr)?
        } else {
            // SAFETY: without `checked`, `ptr` is a live allocation of this heap (the caller's
            // contract).
            unsafe { Chunk::of_payload(ptr) }
        };
        let t = self.heap.tags();
        if t.is_free(c) {
            return Err(Error::DoubleFree);
        }
        Ok(t.geometry().bytes_of(t.size(c)) - W)
    }

    /// Bytes usable at the live block `ptr` of an inline heap, read from its tag without
    /// the heap's lock (a C `free` choosing a per-thread cache's class, see
    /// [`crate::ThreadCache`]); `None` when the tag says the chunk is not in use.
    ///
    /// Sound without the lock because the word is loaded atomically (relaxed), and the only
    /// write another thread may make to a live block's head, the lock holder's update of its
    /// `PREV_IN_USE` bit, is an atomic store that leaves the size bits alone (see
    /// `InlineTags::set_flag`); the size itself changes only in a realloc of the block, which
    /// is its owner's call.
    ///
    /// # Time Complexity
    /// `O(1)`, one relaxed load.
    ///
    /// # Safety
    /// `ptr` is a live allocation of an inline heap, owned by the caller (not
    /// being freed or resized by another thread). A double free of a block the heap has freed
    /// breaks this: its head may then be written, not atomically, by the lock holder.
    #[inline]
    pub unsafe fn unlocked_usable_size(ptr: NonNull<u8>) -> Option<usize> {
        // SAFETY: the caller's promise: the word before `ptr` is a live chunk's head, aligned;
        // the accesses that may race with this load are atomic (see above).
        let h =
            unsafe { core::sync::atomic::AtomicUsize::from_ptr(ptr.byte_sub(W).cast().as_ptr()) }
                .load(core::sync::atomic::Ordering::Relaxed);
        if h & IN_USE == 0 {
            return None;
        }
        (h & !FLAGS).checked_sub(W)
    }

    /// Bytes usable at `ptr`, after proving, as [`InlineHeap::free_checked`] does, that `ptr`
    /// is the payload of a live chunk of this heap, in every build: `Refused(ForeignPointer)`,
    /// `Refused(DoubleFree)` for the payload of a free chunk or of one a merge absorbed, or
    /// `Corrupted` with the chunk whose tags cannot be (every size is checked against the
    /// region's end before it is followed, so the walk itself never leaves the heap's memory).
    /// Nothing is written or counted. What a caller that learns a block's size from the heap (a C
    /// `free`, which gets none) uses to check a pointer at run time, where the `checked`
    /// feature would check every free of the build.
    ///
    /// # Time Complexity
    /// As for [`InlineHeap::free_checked`]: a walk of `ptr`'s region.
    pub fn checked_usable_size(&self, ptr: NonNull<u8>) -> Result<usize, BlockError> {
        let c = self.find_checked(ptr)?;
        let t = self.heap.tags();
        Ok(t.geometry().bytes_of(t.size(c)) - W)
    }

    /// Calls `each(start, len)` for every free chunk of at least `min` bytes, naming the
    /// whole pages (of `page` bytes, a power of two) inside it that hold none of the heap's
    /// tags: what a region source may release (`madvise(MADV_DONTNEED)`, unmapping device
    /// pages) while the region stays. Returns how many spans it named.
    ///
    /// # Time Complexity
    /// `O(chunks + regions)`.
    pub fn free_spans(&self, min: usize, page: usize, each: impl FnMut(usize, usize)) -> usize {
        self.heap.free_spans(min, page, each)
    }

    /// Verifies every invariant of the heap (see `crate::algo::check`).
    ///
    /// # Time Complexity
    /// `O(chunks + regions)`.
    pub fn check(&self) -> Result<(), CheckError> {
        self.heap.check()
    }

    /// A step's check, for harnesses that check after every operation: the invariants of
    /// [`check`](Self::check), reading only the bins' lists that `marks` (kept from the previous
    /// step's check) or the bins mark non-empty (see [`StepMarks`](crate::StepMarks)).
    ///
    /// # Time Complexity
    /// `O(chunks + regions + marked map words)`.
    pub fn check_step(&self, marks: &mut StepMarks) -> Result<(), CheckError> {
        self.heap.check_step(marks)
    }
}

impl<G: Granule, B: BinShape> InlineHeap<G, Counters, B> {
    /// The heap's statistics.
    ///
    /// # Time Complexity
    /// `O(bits of a size)` (the largest free chunk is found down a trie); the rest is kept as
    /// running counters.
    pub fn stats(&self) -> Stats {
        self.heap.stats()
    }
}

/// Starts loading the cache line at `ptr + size`, where, by the size the caller frees with,
/// the head of the chunk after the block at `ptr` lies or is close: less than a minimum chunk
/// further (a chunk is at most that much above its request, `Geometry::size_fits`), so usually
/// on that line.
///
/// Why: a free reads its chunk's head, and only then knows where its successor's head is; on
/// a heap larger than the cache both reads miss, one after the other. Started here, the second
/// miss overlaps the first, as in allocators that take the size from the caller and read the
/// tag at the block's end directly (talc); it made random actions faster at every maximum size
/// (figures: `docs/measurements.md#inliners-the-free-prefetches-its-successor`). A hint: a
/// prefetch reads nothing the program sees and never faults, so a wrong size costs one
/// useless line.
#[inline(always)]
fn prefetch_successor(ptr: NonNull<u8>, size: usize) {
    #[cfg(all(target_arch = "x86_64", target_feature = "sse", not(miri)))]
    {
        use core::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // SAFETY: the intrinsic needs SSE, which this build enables (the `cfg` above); a
        // prefetch neither faults nor reads anything the program sees, whatever the address,
        // and `wrapping_add` keeps computing the address itself defined.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(ptr.as_ptr().wrapping_add(size).cast::<i8>()) };
    }
    // Where the prefetch is compiled out (other targets, Miri), the arguments go unused.
    let _ = (ptr, size);
}
