//! Inline tags: boundary tags inside the managed host memory, dlmalloc-style, no side storage.
//!
//! A chunk starts at an address `≡ granule − word (mod granule)`, so its payload, one word
//! further, is granule-aligned. Layout of a chunk of `S` bytes at `c` (`W` = one word):
//!
//! ```text
//! c          head: S | IN_USE | PREV_IN_USE
//! c + W      payload (in use)      | Next, Prev, Left, Right, Parent links (free)
//! c + S − W  payload (in use)      | footer: S (free), read by the successor to find `c`
//! ```
//!
//! An in-use chunk's last word is payload, so the tag overhead is one word per allocation. A
//! free chunk's footer lets its successor find it; the successor's `PREV_IN_USE` bit says
//! whether that footer is valid. Each region starts with a [`RegionHeader`] and ends with a
//! *fence*: a head word of size 0 marked in use, which stops every walk and merge.

use core::mem::size_of;
use core::ptr::NonNull;

use crate::error::{CheckError, Error};
use crate::heap::{Heap, MAX_GRANULE};
use crate::stats::Stats;
use crate::tags::{Link, Tags};

const W: usize = size_of::<usize>();
const IN_USE: usize = 1;
const PREV_IN_USE: usize = 2;
const FLAGS: usize = IN_USE | PREV_IN_USE;
/// The default granule of a host heap.
pub const HOST_GRANULE: usize = 16;

/// The first bytes of every inline region; regions form a singly linked list.
#[repr(C)]
pub(crate) struct RegionHeader {
    next: *mut RegionHeader,
    /// One past the region's last byte (granule-aligned). The fence is the word before it.
    end: usize,
}

/// Inline tag storage: only the granule and the list of regions live outside the memory.
///
/// Invariant: every `NonNull<u8>` chunk handle passed to these methods is the head address of
/// a chunk inside a region on `regions`, and every region is memory the heap owns exclusively
/// for as long as it is on the list (the contract of [`InlineHeap::add_region`]). All reads and
/// writes stay between the region's header and its fence.
pub(crate) struct InlineTags {
    shift: u32,
    /// `min_chunk_for(shift)`, kept so the hot path never divides.
    min_chunk: usize,
    /// The head word plus the granule less one: what a request is rounded up by.
    pad: usize,
    regions: Option<NonNull<RegionHeader>>,
}

/// The smallest free chunk, in granules of `1 << shift` bytes: a head, the two links of an
/// exact bin's list and a footer.
const fn min_chunk_for(shift: u32) -> usize {
    (4 * W).div_ceil(1 << shift)
}

impl InlineTags {
    /// Offset from a region's base to its first chunk's head.
    fn first_offset(&self) -> usize {
        let g = 1 << self.shift;
        (size_of::<RegionHeader>() + W).next_multiple_of(g) - W
    }

    /// # Safety
    /// `p` must point to a word inside a region this heap owns.
    #[inline]
    unsafe fn word(p: NonNull<u8>) -> usize {
        // SAFETY: `p` is word-aligned (chunk heads, links and footers all sit at
        // `≡ −W (mod granule)` plus whole words) and inside owned memory, per the caller.
        unsafe { p.cast::<usize>().read() }
    }

    /// # Safety
    /// As for [`InlineTags::word`].
    #[inline]
    unsafe fn set_word(p: NonNull<u8>, v: usize) {
        // SAFETY: as in `word`; the heap owns the memory exclusively, so nothing else reads it.
        unsafe { p.cast::<usize>().write(v) }
    }

    #[inline]
    fn head(&self, c: NonNull<u8>) -> usize {
        // SAFETY: `c` is a chunk head or a fence in an owned region (type invariant).
        unsafe { Self::word(c) }
    }

    #[inline]
    fn set_head(&mut self, c: NonNull<u8>, v: usize) {
        // SAFETY: as in `head`.
        unsafe { Self::set_word(c, v) }
    }

    #[inline]
    fn bytes(&self, c: NonNull<u8>) -> usize {
        self.head(c) & !FLAGS
    }

    /// The chunk (or fence) right after `c`.
    #[inline]
    fn after(&self, c: NonNull<u8>) -> NonNull<u8> {
        // SAFETY: a chunk is followed by another chunk or its region's fence, both inside the
        // region, so the sum stays in bounds of the same allocation.
        unsafe { c.add(self.bytes(c)) }
    }

    /// Writes `c`'s footer (its size in its last word), for a free chunk.
    fn set_footer(&mut self, c: NonNull<u8>) {
        let bytes = self.bytes(c);
        // SAFETY: a chunk is at least `min_chunk` granules (≥ 2 words), so its last word is
        // inside it, after the head.
        unsafe { Self::set_word(c.add(bytes - W), bytes) }
    }

    #[inline]
    fn set_flag(&mut self, c: NonNull<u8>, flag: usize, on: bool) {
        let h = self.head(c);
        self.set_head(c, if on { h | flag } else { h & !flag });
    }

    fn region_end(r: NonNull<RegionHeader>) -> usize {
        // SAFETY: `r` is on the region list, so its header is initialised and owned.
        unsafe { r.as_ref().end }
    }
}

impl Tags for InlineTags {
    type Chunk = NonNull<u8>;
    type Region = NonNull<RegionHeader>;

    fn granule_shift(&self) -> u32 {
        self.shift
    }

    fn head_bytes(&self) -> usize {
        W
    }

    #[inline]
    fn request_pad(&self) -> usize {
        self.pad
    }

    #[inline]
    fn min_chunk(&self) -> usize {
        self.min_chunk
    }

    #[inline]
    fn size(&self, c: NonNull<u8>) -> usize {
        self.bytes(c) >> self.shift
    }

    #[inline]
    fn is_free(&self, c: NonNull<u8>) -> bool {
        self.head(c) & IN_USE == 0
    }

    #[inline]
    fn payload(&self, c: NonNull<u8>) -> usize {
        c.addr().get() + W
    }

    #[inline]
    fn next(&self, c: NonNull<u8>) -> Option<NonNull<u8>> {
        let n = self.after(c);
        (self.bytes(n) != 0).then_some(n)
    }

    #[inline]
    fn next_if_free(&self, c: NonNull<u8>) -> Option<(NonNull<u8>, usize)> {
        // The fence is marked in use, so one read of the successor's head answers both.
        let n = self.after(c);
        let h = self.head(n);
        (h & IN_USE == 0).then_some((n, h >> self.shift))
    }

    #[inline]
    fn prev_if_free(&self, c: NonNull<u8>) -> Option<(NonNull<u8>, usize)> {
        if self.head(c) & PREV_IN_USE != 0 {
            return None;
        }
        // SAFETY: the predecessor is free, so the word before `c` is its footer, inside the
        // same region; the footer is the predecessor's size, so `c - size` is its head.
        unsafe {
            let bytes = Self::word(c.sub(W));
            Some((c.sub(bytes), bytes >> self.shift))
        }
    }

    fn set_free(&mut self, c: NonNull<u8>, free: bool) {
        self.set_flag(c, IN_USE, !free);
        if free {
            self.set_footer(c);
        }
        let n = self.after(c);
        self.set_flag(n, PREV_IN_USE, !free);
    }

    fn split(&mut self, c: NonNull<u8>, head: usize) -> NonNull<u8> {
        let h = self.head(c);
        let bytes = h & !FLAGS;
        let keep = head << self.shift;
        // SAFETY: `0 < keep < bytes`, so the tail starts inside the chunk.
        let tail = unsafe { c.add(keep) };
        let used = h & IN_USE;
        self.set_head(c, keep | (h & FLAGS));
        self.set_head(
            tail,
            (bytes - keep) | used | if used != 0 { PREV_IN_USE } else { 0 },
        );
        if used == 0 {
            self.set_footer(c);
            self.set_footer(tail);
        }
        tail
    }

    fn absorb_next(&mut self, c: NonNull<u8>) {
        let h = self.head(c);
        let n = self.after(c);
        let merged = (h & !FLAGS) + self.bytes(n);
        self.set_head(c, merged | (h & FLAGS));
        if h & IN_USE == 0 {
            self.set_footer(c);
        }
        let after = self.after(c);
        self.set_flag(after, PREV_IN_USE, h & IN_USE != 0);
    }

    #[inline]
    fn reserve(&mut self, _n: usize) -> Result<(), Error> {
        Ok(())
    }

    #[inline]
    fn carve(&mut self, c: NonNull<u8>, size: usize, need: usize) -> Option<NonNull<u8>> {
        // `c` is free, so its successor's `PREV_IN_USE` is clear and its footer holds its size;
        // only its own `PREV_IN_USE` bit is not known here.
        let prev = self.head(c) & PREV_IN_USE;
        if size >= need + self.min_chunk {
            let keep = need << self.shift;
            let rest = (size - need) << self.shift;
            // SAFETY: `0 < keep < size` in bytes, so the tail head and its footer (the old
            // footer's word) lie inside `c`.
            let tail = unsafe { c.add(keep) };
            self.set_head(c, keep | IN_USE | prev);
            self.set_head(tail, rest | PREV_IN_USE);
            // SAFETY: as above.
            unsafe { Self::set_word(tail.add(rest - W), rest) };
            // The successor stays as it was: its predecessor (the tail) is free.
            Some(tail)
        } else {
            let bytes = size << self.shift;
            self.set_head(c, bytes | IN_USE | prev);
            // SAFETY: a chunk is followed by another chunk or its region's fence.
            let n = unsafe { c.add(bytes) };
            self.set_flag(n, PREV_IN_USE, true);
            None
        }
    }

    #[inline]
    fn free_merged(
        &mut self,
        c: NonNull<u8>,
        prev: Option<NonNull<u8>>,
        next: Option<NonNull<u8>>,
        size: usize,
    ) -> NonNull<u8> {
        let start = prev.unwrap_or(c);
        let bytes = size << self.shift;
        // The merged chunk's predecessor is in use: `prev`'s is (no two free chunks are
        // adjacent), and without `prev`, `c`'s is.
        self.set_head(start, bytes | PREV_IN_USE);
        // SAFETY: the merged chunk spans `prev`, `c` and `next`, all inside one region; its
        // last word and its successor's head are inside the region too.
        let after = unsafe {
            Self::set_word(start.add(bytes - W), bytes);
            start.add(bytes)
        };
        if next.is_none() {
            // `next`'s successor already had the bit clear; `c`'s had it set.
            self.set_flag(after, PREV_IN_USE, false);
        }
        start
    }

    #[inline]
    fn link(&self, c: NonNull<u8>, l: Link) -> Option<NonNull<u8>> {
        // SAFETY: link words follow the head inside a free chunk; a chunk in an exact bin has
        // room for `Next` and `Prev` (min_chunk), one in a logarithmic bin (≥ 65 granules) for
        // all five. Links are stored as pointers, keeping their provenance.
        unsafe { NonNull::new(c.add(W * (1 + l as usize)).cast::<*mut u8>().read()) }
    }

    #[inline]
    fn set_link(&mut self, c: NonNull<u8>, l: Link, v: Option<NonNull<u8>>) {
        let p = v.map_or(core::ptr::null_mut(), NonNull::as_ptr);
        // SAFETY: as in `link`.
        unsafe { c.add(W * (1 + l as usize)).cast::<*mut u8>().write(p) }
    }

    fn first_region(&self) -> Option<NonNull<RegionHeader>> {
        self.regions
    }

    fn next_region(&self, r: NonNull<RegionHeader>) -> Option<NonNull<RegionHeader>> {
        // SAFETY: `r` is on the region list.
        NonNull::new(unsafe { r.as_ref().next })
    }

    fn region_first_chunk(&self, r: NonNull<RegionHeader>) -> NonNull<u8> {
        // SAFETY: the first chunk lies inside the region (checked when it was added).
        unsafe { r.cast::<u8>().add(self.first_offset()) }
    }

    fn region_granules(&self, r: NonNull<RegionHeader>) -> usize {
        let first = r.addr().get() + self.first_offset();
        (Self::region_end(r) - W - first) >> self.shift
    }

    fn check_tags(&self, c: NonNull<u8>, first: bool) -> Result<(), CheckError> {
        let at = c.addr().get();
        let h = self.head(c);
        let bytes = h & !FLAGS;
        if bytes & ((1 << self.shift) - 1) != 0 || bytes < self.min_chunk() << self.shift {
            return Err(CheckError::new(
                "chunk size not a whole number of granules",
                at,
            ));
        }
        if first && h & PREV_IN_USE == 0 {
            return Err(CheckError::new("first chunk claims a free predecessor", at));
        }
        if h & IN_USE == 0 {
            // SAFETY: the caller checked that `c`'s size stays inside the region.
            let footer = unsafe { Self::word(c.add(bytes - W)) };
            if footer != bytes {
                return Err(CheckError::new(
                    "free chunk's footer disagrees with its head",
                    at,
                ));
            }
        }
        let n = self.after(c);
        let nh = self.head(n);
        if (nh & PREV_IN_USE != 0) != (h & IN_USE != 0) {
            return Err(CheckError::new("successor's PREV_IN_USE bit is wrong", at));
        }
        if nh & !FLAGS == 0 && nh & IN_USE == 0 {
            return Err(CheckError::new(
                "region fence not marked in use",
                n.addr().get(),
            ));
        }
        Ok(())
    }
}

/// A heap whose boundary tags live inside the host memory it manages.
///
/// It owns the regions given to it until they are removed. Sizes are rounded to granules
/// (16 bytes by default) with one word of tag per allocation; any power-of-two alignment is
/// served, alignments above the granule by splitting off a leading free fragment.
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
pub struct InlineHeap {
    heap: Heap<InlineTags>,
}

// SAFETY: the heap owns its regions exclusively (the `add_region` contract) and holds no
// thread-bound state, so it may move to another thread with them.
unsafe impl Send for InlineHeap {}

impl Default for InlineHeap {
    fn default() -> Self {
        Self::new()
    }
}

impl InlineHeap {
    /// An empty heap with the host granule of 16 bytes. Add memory with
    /// [`InlineHeap::add_region`].
    pub const fn new() -> Self {
        InlineHeap {
            heap: Heap::new(InlineTags {
                shift: HOST_GRANULE.trailing_zeros(),
                min_chunk: min_chunk_for(HOST_GRANULE.trailing_zeros()),
                pad: W + HOST_GRANULE - 1,
                regions: None,
            }),
        }
    }

    /// An empty heap with another granule: a power of two from 16 bytes ([`HOST_GRANULE`]) to
    /// [`MAX_GRANULE`] (1 GiB). Every request is rounded up to a whole number of granules
    /// (its one-word tag included) and every payload is granule-aligned; a region loses up to a
    /// granule at its start to its header. Errors: `BadGranule`.
    pub const fn with_granule(granule: usize) -> Result<Self, Error> {
        if !granule.is_power_of_two() || granule < HOST_GRANULE || granule > MAX_GRANULE {
            return Err(Error::BadGranule);
        }
        Ok(InlineHeap {
            heap: Heap::new(InlineTags {
                shift: granule.trailing_zeros(),
                min_chunk: min_chunk_for(granule.trailing_zeros()),
                pad: W + granule - 1,
                regions: None,
            }),
        })
    }

    /// The granule in bytes.
    pub fn granule(&self) -> usize {
        1 << self.heap.tags.shift
    }

    /// Hands `len` bytes at `base` to the heap as a new region. `base` must be granule-aligned;
    /// `len` is rounded down to granules. A region is never merged with another that happens to
    /// be adjacent (they may be separate allocations); use [`InlineHeap::extend_region`] for
    /// memory that continues a region.
    ///
    /// Errors: `RegionMisaligned` (null or unaligned base), `RegionOverlap` (overlaps a managed
    /// region or wraps), `RegionTooSmall`. Nothing is written on error.
    ///
    /// # Safety
    /// `base..base + len` must be valid for reads and writes, must not be used by anything else
    /// until the heap is dropped or the region is removed, and must outlive the heap's use of
    /// it.
    pub unsafe fn add_region(&mut self, base: *mut u8, len: usize) -> Result<(), Error> {
        let g = self.granule();
        let base = NonNull::new(base).ok_or(Error::RegionMisaligned)?;
        if base.addr().get() & (g - 1) != 0 {
            return Err(Error::RegionMisaligned);
        }
        let len = len & !(g - 1);
        let end = self.free_range(base.addr().get(), len)?;
        let first = self.heap.tags.first_offset();
        if len < first + W + self.min_chunk_bytes() {
            return Err(Error::RegionTooSmall);
        }
        let span = len - first - W;
        // SAFETY: the region is valid and ours (caller contract); the header, the first head
        // and the fence all lie inside `base..base + len`, at word-aligned offsets.
        unsafe {
            let header = base.cast::<RegionHeader>();
            header.write(RegionHeader {
                next: self
                    .heap
                    .tags
                    .regions
                    .map_or(core::ptr::null_mut(), NonNull::as_ptr),
                end,
            });
            let c = base.add(first);
            InlineTags::set_word(c, span | IN_USE | PREV_IN_USE);
            InlineTags::set_word(c.add(span), IN_USE | PREV_IN_USE);
            self.heap.tags.regions = Some(header);
            self.heap.add_space(c, true);
        }
        Ok(())
    }

    /// Grows the region that starts at `region` by `additional` bytes (rounded down to
    /// granules) right after its end, as `sbrk` or reserved virtual memory allow. The new
    /// space merges with the region's free tail: no boundary is left behind.
    ///
    /// Errors: `UnknownRegion`, `RegionOverlap`, `RegionTooSmall` (less than one minimum
    /// chunk). Nothing is written on error.
    ///
    /// # Safety
    /// The added range must be valid for reads and writes, used by nothing else, and reachable
    /// through the pointer the region was added with (one allocation or mapping).
    pub unsafe fn extend_region(
        &mut self,
        region: *mut u8,
        additional: usize,
    ) -> Result<(), Error> {
        let mut reg = self.find_region(region)?;
        let len = additional & !(self.granule() - 1);
        let old_end = InlineTags::region_end(reg);
        self.free_range(old_end, len)?;
        // The new space becomes one chunk, which must be able to stand alone as a free one.
        if len < self.min_chunk_bytes() {
            return Err(Error::RegionTooSmall);
        }
        // SAFETY: `reg` is on the list; the old fence is inside the region and the new fence
        // inside the added range, both reachable through the region's pointer (caller
        // contract). The old fence becomes the new chunk's head, a new fence closes the region.
        unsafe {
            let fence = reg.cast::<u8>().add(old_end - W - reg.addr().get());
            let prev_in_use = InlineTags::word(fence) & PREV_IN_USE;
            InlineTags::set_word(fence, len | IN_USE | prev_in_use);
            InlineTags::set_word(fence.add(len), IN_USE | PREV_IN_USE);
            reg.as_mut().end = old_end + len;
            self.heap.add_space(fence, false);
        }
        Ok(())
    }

    fn min_chunk_bytes(&self) -> usize {
        self.heap.tags.min_chunk() << self.heap.tags.shift
    }

    /// The end of `start..start + len` if that range wraps nothing and overlaps no region.
    fn free_range(&self, start: usize, len: usize) -> Result<usize, Error> {
        let end = start.checked_add(len).ok_or(Error::RegionOverlap)?;
        let mut r = self.heap.tags.regions;
        while let Some(reg) = r {
            if start < InlineTags::region_end(reg) && reg.addr().get() < end {
                return Err(Error::RegionOverlap);
            }
            r = self.heap.tags.next_region(reg);
        }
        Ok(end)
    }

    /// The region whose header is at `base`.
    fn find_region(&self, base: *mut u8) -> Result<NonNull<RegionHeader>, Error> {
        let mut r = self.heap.tags.regions;
        while let Some(reg) = r {
            if reg.as_ptr().cast::<u8>() == base {
                return Ok(reg);
            }
            r = self.heap.tags.next_region(reg);
        }
        Err(Error::UnknownRegion)
    }

    /// Removes the region that starts at `base` if none of it is allocated, and gives its range
    /// back (granule-rounded) for the caller to release.
    pub fn remove_region(&mut self, base: *mut u8) -> Result<(NonNull<u8>, usize), Error> {
        let mut link: Option<NonNull<RegionHeader>> = None;
        let mut r = self.heap.tags.regions;
        while let Some(reg) = r {
            if reg.as_ptr().cast::<u8>() == base {
                let c = self.heap.sole_free_chunk(reg)?;
                self.heap.remove_space(c);
                let next = self.heap.tags.next_region(reg);
                match link {
                    // SAFETY: `prev` is on the list, so its header is ours to update.
                    Some(mut prev) => unsafe {
                        prev.as_mut().next = next.map_or(core::ptr::null_mut(), NonNull::as_ptr)
                    },
                    None => self.heap.tags.regions = next,
                }
                let len = InlineTags::region_end(reg) - reg.addr().get();
                return Ok((reg.cast(), len));
            }
            link = r;
            r = self.heap.tags.next_region(reg);
        }
        Err(Error::UnknownRegion)
    }

    /// Removes every wholly free region, calling `release(base, len)` for each; returns how
    /// many were removed.
    pub fn trim(&mut self, mut release: impl FnMut(NonNull<u8>, usize)) -> usize {
        let mut removed = 0;
        let mut r = self.heap.tags.regions;
        while let Some(reg) = r {
            r = self.heap.tags.next_region(reg);
            if let Ok((base, len)) = self.remove_region(reg.as_ptr().cast()) {
                release(base, len);
                removed += 1;
            }
        }
        removed
    }

    /// Allocates `size` bytes aligned to `align` (a power of two). The exact best fit among
    /// free chunks is used: the smallest that fits, oldest among equals. For alignments above
    /// the granule, the best fit for the size plus the worst-case alignment padding.
    #[inline]
    pub fn alloc(&mut self, size: usize, align: usize) -> Result<NonNull<u8>, Error> {
        let c = self.heap.alloc(size, align)?;
        Ok(payload_of(c))
    }

    /// Frees an allocation of `size` bytes. `O(1)` (without `checked`).
    ///
    /// What is detected depends on the build, and a refused free writes nothing:
    /// - always: the chunk's tag says it is free already (a double free of a chunk that has
    ///   not merged with a free neighbour since): `DoubleFree`;
    /// - with the `checked` feature this is [`InlineHeap::free_checked`]: a pointer that is not
    ///   the payload of a live chunk of this heap (`ForeignPointer`, or `DoubleFree` for one
    ///   into a free chunk), a size that does not fit the chunk (`WrongSize`).
    ///
    /// # Safety
    /// Without `checked`: `ptr` must have come from this heap's `alloc`/`realloc`, and not have
    /// been freed since (beyond the tag check above, a foreign pointer or a double free after a
    /// merge reads whatever lies before `ptr`: undefined behaviour). With `checked`, only the
    /// rule that holds for every build: the memory must not be used after a successful return,
    /// and a double free after the chunk was handed out again frees the new owner's block (no
    /// allocator can tell those apart).
    #[inline(always)]
    pub unsafe fn free(&mut self, ptr: NonNull<u8>, size: usize) -> Result<(), Error> {
        if cfg!(feature = "checked") {
            // SAFETY: forwarded caller contract (a subset of it).
            return unsafe { self.free_checked(ptr, size) };
        }
        let c = chunk_of(ptr);
        if self.heap.tags.is_free(c) {
            self.heap.counters.rejected_frees += 1;
            return Err(Error::DoubleFree);
        }
        self.heap.free(c);
        Ok(())
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
    fn validated_chunk(&mut self, ptr: NonNull<u8>, size: usize) -> Result<NonNull<u8>, Error> {
        let c = match self.find_chunk(ptr) {
            Ok(c) if !self.heap.size_matches(c, size) => Err(Error::WrongSize),
            other => other,
        };
        c.inspect_err(|_| self.heap.counters.rejected_frees += 1)
    }

    /// Finds the live chunk whose payload is `ptr` by walking its region. A payload-aligned
    /// pointer into a free chunk is a double free (its chunk has merged since), anything else
    /// that is not a live chunk's payload is foreign.
    fn find_chunk(&self, ptr: NonNull<u8>) -> Result<NonNull<u8>, Error> {
        let t = &self.heap.tags;
        let a = ptr.addr().get();
        let mut r = t.regions;
        while let Some(reg) = r {
            if (reg.addr().get()..InlineTags::region_end(reg)).contains(&a) {
                let mut c = Some(t.region_first_chunk(reg));
                while let Some(ch) = c {
                    let p = t.payload(ch);
                    if p > a {
                        break;
                    }
                    let end = ch.addr().get() + (t.size(ch) << t.shift);
                    if a < end {
                        let could_be_payload = (a - p) & ((1 << t.shift) - 1) == 0;
                        return match (p == a, t.is_free(ch)) {
                            (true, false) => Ok(ch),
                            (_, true) if could_be_payload => Err(Error::DoubleFree),
                            _ => Err(Error::ForeignPointer),
                        };
                    }
                    c = t.next(ch);
                }
                return Err(Error::ForeignPointer);
            }
            r = t.next_region(reg);
        }
        Err(Error::ForeignPointer)
    }

    /// Resizes an allocation of `old_size` bytes to `new_size`: shrinks in place, or grows in
    /// place into a free successor, and only if neither works moves it to a new chunk aligned
    /// to `align`, copying `min(old_size, new_size)` bytes (never more than the old chunk
    /// holds). On error the old allocation is untouched. With the `checked` feature the
    /// pointer and size are validated as in [`InlineHeap::free_checked`].
    ///
    /// # Safety
    /// As for [`InlineHeap::free`]; `old_size` must be the size the block was allocated or last
    /// resized with. On success the old pointer must no longer be used unless it was returned.
    pub unsafe fn realloc(
        &mut self,
        ptr: NonNull<u8>,
        old_size: usize,
        align: usize,
        new_size: usize,
    ) -> Result<NonNull<u8>, Error> {
        let c = if cfg!(feature = "checked") {
            self.validated_chunk(ptr, old_size)?
        } else {
            chunk_of(ptr)
        };
        match self.heap.resize_in_place(c, new_size) {
            Err(Error::OutOfMemory) => {}
            other => return other.map(|()| ptr),
        }
        let keep = old_size
            .min(new_size)
            .min((self.heap.tags.size(c) << self.heap.tags.shift) - W);
        let new = self.alloc(new_size, align)?;
        // SAFETY: both chunks are live and distinct; `keep` fits in the old chunk's payload
        // and in the new allocation.
        unsafe { core::ptr::copy_nonoverlapping(ptr.as_ptr(), new.as_ptr(), keep) };
        self.heap.free(c);
        Ok(new)
    }

    /// Bytes usable at `ptr` (at least what was asked for).
    ///
    /// # Safety
    /// `ptr` must be a live allocation of this heap.
    pub unsafe fn usable_size(&self, ptr: NonNull<u8>) -> usize {
        let c = chunk_of(ptr);
        (self.heap.tags.size(c) << self.heap.tags.shift) - W
    }

    /// Verifies every invariant of the heap (see `Heap::check`).
    pub fn check(&self) -> Result<(), CheckError> {
        self.heap.check(|c| c.addr().get())
    }

    /// The heap's statistics.
    pub fn stats(&self) -> Stats {
        self.heap.stats()
    }
}

fn payload_of(c: NonNull<u8>) -> NonNull<u8> {
    // SAFETY: the payload is one word into the chunk, inside it.
    unsafe { c.add(W) }
}

fn chunk_of(ptr: NonNull<u8>) -> NonNull<u8> {
    // `wrapping_sub` keeps this free of preconditions; the result is only dereferenced once the
    // caller's contract (or `find_chunk`) says it is a chunk head.
    NonNull::new(ptr.as_ptr().wrapping_sub(W)).unwrap_or(ptr)
}
