//! One adapter for both heaps: what a test, a fuzz target, a replay or a benchmark calls to
//! drive a heap from a list of operations and compare the results.
//!
//! [`Adapter`] speaks in addresses (region bases, payloads) and handles (what names a block:
//! a payload pointer inline, a [`Block`] detached), so that one driver runs both placements:
//!
//! - [`InlineAdapter`]: an [`InlineHeap`] over [`Memory`] (one arena or several), which turns
//!   an address into a pointer the heap may be given. Region calls outside that memory panic:
//!   that is a bug of the driver, never of the heap.
//! - [`DetachedAdapter`]: a [`DetachedHeap`] over any range of addresses, touched by no one.
//!   It never moves memory: a resize that cannot stay in place is a new block and the old one
//!   freed, as the owner of device memory would do it (copying on the device in between).
//!
//! Each method is the heap's own call and no more (the benchmarks time them): a driver that
//! counts, checks or fills does so around them.

use core::fmt::Debug;
use core::ptr::{without_provenance_mut, NonNull};

use crate::algo::check::StepMarks;
use crate::algo::geometry::Geometry;
use crate::algo::shape::{BinShape, Wide};
use crate::algo::stats::{Counters, Stats, Tally};
use crate::algo::tags::Tags;
use crate::detached::heap::{Block, DetachedHeap};
use crate::detached::records::RecordStore;
use crate::error::{CheckError, Error};
use crate::inline::granule::{Granule, HostGranule};
use crate::inline::heap::InlineHeap;

/// A heap under test, in terms of addresses and handles.
///
/// A block is freed or resized with the size it was allocated (or last resized) with, unless a
/// test means to misuse it. That size is passed with the handle; an inline heap is told it, a
/// detached block carries its own ([`Block::size`], what the heap checks), so a detached block
/// is misused with another size by changing that field.
pub trait Adapter {
    /// What names a block: its payload pointer (inline) or its [`Block`] (detached).
    type H: Copy + Debug;

    /// Whether the tags are inline: a block is then named by its address alone (a stale or
    /// made-up handle equal to a live block's address is that block), and its bytes are
    /// memory the caller may touch ([`Adapter::bytes`]).
    const INLINE: bool;

    /// The heap's size arithmetic (the reference model's, too).
    fn geometry(&self) -> Geometry;

    /// The payload address of `h`.
    fn addr(h: &Self::H) -> usize;

    /// The first byte of `h`'s payload, where the caller may read and write it (inline);
    /// `None` where the heap manages addresses only (detached).
    fn bytes(h: &Self::H) -> Option<NonNull<u8>>;

    /// `alloc(size, align)`.
    fn alloc(&mut self, size: usize, align: usize) -> Result<Self::H, Error>;

    /// The heap's plain free of `h`, a block of `size` bytes: what the build checks (see
    /// [`InlineHeap::free`]); a detached free is always checked.
    ///
    /// # Safety
    /// As for [`InlineHeap::free`]: without the `checked` feature, `h` must be a live block of
    /// this heap whose size `size` fits; its memory is not used after a successful return.
    unsafe fn free(&mut self, h: Self::H, size: usize) -> Result<(), Error>;

    /// A free that proves `h` is a live block whose size `size` fits before it frees it
    /// ([`InlineHeap::free_checked`], [`DetachedHeap::free`]): any other handle is refused,
    /// counted, and nothing is written.
    ///
    /// # Safety
    /// As for [`InlineHeap::free_checked`]: the memory is not used after a successful return.
    unsafe fn free_checked(&mut self, h: Self::H, size: usize) -> Result<(), Error>;

    /// Resizes `h`, a block of `old` bytes, to `new` bytes: in place when it can, else moved
    /// to a new block aligned to `align` (inline: its bytes copied; detached: nothing to copy).
    /// On error `h` is unchanged and still live.
    ///
    /// # Safety
    /// As for [`InlineHeap::realloc`]; on success only the returned handle is used.
    unsafe fn realloc(
        &mut self,
        h: Self::H,
        old: usize,
        align: usize,
        new: usize,
    ) -> Result<Self::H, Error>;

    /// The bytes usable in `h`, or why it is not a live block.
    ///
    /// # Safety
    /// As for [`InlineHeap::usable_size`]: without the `checked` feature, `h` must be live.
    unsafe fn usable_size(&self, h: &Self::H) -> Result<usize, Error>;

    /// `add_region(base, len)`.
    fn add_region(&mut self, base: usize, len: usize) -> Result<(), Error>;

    /// `extend_region(base, len)`.
    fn extend_region(&mut self, base: usize, len: usize) -> Result<(), Error>;

    /// `remove_region(base)`, the range given back as `(base, len)`.
    fn remove_region(&mut self, base: usize) -> Result<(usize, usize), Error>;

    /// `trim()`, calling `release(base, len)` for each region removed; returns how many.
    fn trim(&mut self, release: impl FnMut(usize, usize)) -> usize;

    /// `check()`.
    fn check(&self) -> Result<(), CheckError>;

    /// `check_step(marks)`.
    fn check_step(&self, marks: &mut StepMarks) -> Result<(), CheckError>;
}

/// A [`Adapter`] whose heap keeps statistics (see [`crate::Tally`]): every one but an
/// [`InlineAdapter`] over a heap without counters.
pub trait Counted: Adapter {
    /// `stats()`.
    fn stats(&self) -> Stats;
}

/// Memory an [`InlineAdapter`] gives its heap as regions: one or more ranges of bytes.
///
/// # Safety
/// Every range `ranges` yields, `(start, len)`, is valid for reads and writes through `start`
/// for `len` bytes for as long as the memory lives, and nothing but the heap it is given to
/// (and whoever holds the blocks the heap hands out) uses it until the memory is dropped.
pub unsafe trait Memory {
    /// The ranges, each as its first byte and its length.
    fn ranges(&mut self) -> impl Iterator<Item = (NonNull<u8>, usize)>;
}

// SAFETY: the same ranges as `M`, for as long as the borrow lasts, which the subject holding it
// cannot outlive.
unsafe impl<M: Memory + ?Sized> Memory for &mut M {
    fn ranges(&mut self) -> impl Iterator<Item = (NonNull<u8>, usize)> {
        (**self).ranges()
    }
}

/// An [`InlineHeap`] whose regions are carved from `M`.
///
/// The heap is declared before the memory, so it is gone before the memory is released (or,
/// for a memory that zeroes what it lent, zeroed).
pub struct InlineAdapter<M, G: Granule = HostGranule, K: Tally = Counters, B: BinShape = Wide> {
    heap: InlineHeap<G, K, B>,
    memory: M,
}

impl<M: Memory, G: Granule, K: Tally, B: BinShape> InlineAdapter<M, G, K, B> {
    /// `heap` (with no regions yet) over `memory`.
    pub fn new(heap: InlineHeap<G, K, B>, memory: M) -> Self {
        InlineAdapter { heap, memory }
    }

    /// The heap, for what the adapter does not cover.
    pub fn heap(&self) -> &InlineHeap<G, K, B> {
        &self.heap
    }

    /// The heap, for what the adapter does not cover (for instance putting it behind a
    /// [`crate::GlobalHeap`] for a while).
    pub fn heap_mut(&mut self) -> &mut InlineHeap<G, K, B> {
        &mut self.heap
    }

    /// The memory.
    pub fn memory(&self) -> &M {
        &self.memory
    }

    /// The memory, to add to it (a range handed to the heap must stay).
    pub fn memory_mut(&mut self) -> &mut M {
        &mut self.memory
    }

    /// A pointer to `addr` that reaches `len` bytes of the memory, if they lie in it.
    fn within(&mut self, addr: usize, len: usize) -> Option<NonNull<u8>> {
        self.memory.ranges().find_map(|(start, size)| {
            let off = addr.checked_sub(start.addr().get())?;
            // SAFETY: `off + len <= size`, so `start + off` stays inside the range.
            (off.checked_add(len)? <= size).then(|| unsafe { start.add(off) })
        })
    }

    /// A pointer to `addr..addr + len` in the memory; panics if it lies outside.
    fn region_ptr(&mut self, addr: usize, len: usize) -> *mut u8 {
        match self.within(addr, len) {
            Some(p) => p.as_ptr(),
            None => panic!("{len} bytes at {addr:#x} lie outside the inline subject's memory"),
        }
    }
}

impl<M: Memory, G: Granule, K: Tally, B: BinShape> Adapter for InlineAdapter<M, G, K, B> {
    type H = NonNull<u8>;
    const INLINE: bool = true;

    fn geometry(&self) -> Geometry {
        *self.heap.heap.tags().geometry()
    }

    #[inline]
    fn addr(h: &NonNull<u8>) -> usize {
        h.addr().get()
    }

    #[inline]
    fn bytes(h: &NonNull<u8>) -> Option<NonNull<u8>> {
        Some(*h)
    }

    #[inline]
    fn alloc(&mut self, size: usize, align: usize) -> Result<NonNull<u8>, Error> {
        self.heap.alloc(size, align)
    }

    #[inline]
    unsafe fn free(&mut self, h: NonNull<u8>, size: usize) -> Result<(), Error> {
        // SAFETY: forwarded caller contract.
        unsafe { self.heap.free(h, size) }
    }

    unsafe fn free_checked(&mut self, h: NonNull<u8>, size: usize) -> Result<(), Error> {
        // SAFETY: forwarded caller contract.
        unsafe { self.heap.free_checked(h, size) }
    }

    #[inline]
    unsafe fn realloc(
        &mut self,
        h: NonNull<u8>,
        old: usize,
        align: usize,
        new: usize,
    ) -> Result<NonNull<u8>, Error> {
        // SAFETY: forwarded caller contract.
        unsafe { self.heap.realloc(h, old, align, new) }
    }

    unsafe fn usable_size(&self, h: &NonNull<u8>) -> Result<usize, Error> {
        // SAFETY: forwarded caller contract.
        unsafe { self.heap.usable_size(*h) }
    }

    fn add_region(&mut self, base: usize, len: usize) -> Result<(), Error> {
        // The heap uses the range rounded down to granules, and only that must be memory.
        let len = len & !(self.heap.granule() - 1);
        let p = self.region_ptr(base, len);
        // SAFETY: `p..p + len` lies in the memory (`region_ptr`), which stays valid and used by
        // nothing else while this subject lives (the `Memory` contract); the heap refuses a
        // range that overlaps one of its regions, so no range is given twice at once.
        unsafe { self.heap.add_region(p, len) }
    }

    fn extend_region(&mut self, base: usize, len: usize) -> Result<(), Error> {
        let len = len & !(self.heap.granule() - 1);
        let p = match self.heap.region_of(base) {
            Some((b, have)) if b.addr().get() == base => {
                let reach = have.saturating_add(len);
                self.region_ptr(base, reach)
            }
            // Not a region's base: the heap refuses it by its address alone.
            _ => without_provenance_mut(base),
        };
        // SAFETY: for a region, the pointer reaches the region and the added range, all in
        // the memory (as in `add_region`); otherwise the heap reads nothing through it and
        // returns `UnknownRegion`.
        unsafe { self.heap.extend_region(p, len) }
    }

    fn remove_region(&mut self, base: usize) -> Result<(usize, usize), Error> {
        // The heap finds the region by its address alone.
        let r = self.heap.remove_region(without_provenance_mut(base));
        r.map(|(b, len)| (b.addr().get(), len))
    }

    fn trim(&mut self, mut release: impl FnMut(usize, usize)) -> usize {
        self.heap.trim(|b, len| release(b.addr().get(), len))
    }

    fn check(&self) -> Result<(), CheckError> {
        self.heap.check()
    }

    fn check_step(&self, marks: &mut StepMarks) -> Result<(), CheckError> {
        self.heap.check_step(marks)
    }
}

impl<M: Memory, G: Granule, B: BinShape> Counted for InlineAdapter<M, G, Counters, B> {
    fn stats(&self) -> Stats {
        self.heap.stats()
    }
}

/// A [`DetachedHeap`] over plain addresses, its records in `S`.
pub struct DetachedAdapter<S: RecordStore> {
    heap: DetachedHeap<S>,
}

impl<S: RecordStore> DetachedAdapter<S> {
    /// Drives `heap`.
    pub fn new(heap: DetachedHeap<S>) -> Self {
        DetachedAdapter { heap }
    }

    /// The heap, for what the adapter does not cover.
    pub fn heap(&self) -> &DetachedHeap<S> {
        &self.heap
    }

    /// The heap, for what the adapter does not cover (for instance putting it behind a
    /// [`crate::SharedDetachedHeap`] for a while).
    pub fn heap_mut(&mut self) -> &mut DetachedHeap<S> {
        &mut self.heap
    }

    /// The end of a resize of `h` to `new` bytes that could not stay in place: a new block
    /// aligned to `align`, and `h` freed (out of line, so that the resize in place stays
    /// small where it is inlined).
    #[cold]
    fn moved(&mut self, h: Block, new: usize, align: usize) -> Result<Block, Error> {
        let moved = self.heap.alloc(new, align)?;
        // `resize_in_place` validated `h` before it ran out of room.
        if let Err(e) = self.heap.free(h) {
            panic!("a block validated by resize_in_place was refused: {e}");
        }
        Ok(moved)
    }
}

impl<S: RecordStore> Adapter for DetachedAdapter<S> {
    type H = Block;
    const INLINE: bool = false;

    fn geometry(&self) -> Geometry {
        *self.heap.heap.tags().geometry()
    }

    #[inline]
    fn addr(h: &Block) -> usize {
        h.addr
    }

    #[inline]
    fn bytes(_: &Block) -> Option<NonNull<u8>> {
        None
    }

    #[inline]
    fn alloc(&mut self, size: usize, align: usize) -> Result<Block, Error> {
        self.heap.alloc(size, align)
    }

    #[inline]
    unsafe fn free(&mut self, h: Block, _size: usize) -> Result<(), Error> {
        self.heap.free(h)
    }

    unsafe fn free_checked(&mut self, h: Block, _size: usize) -> Result<(), Error> {
        self.heap.free(h)
    }

    #[inline]
    unsafe fn realloc(
        &mut self,
        h: Block,
        _old: usize,
        align: usize,
        new: usize,
    ) -> Result<Block, Error> {
        match self.heap.resize_in_place(h, new) {
            Err(Error::OutOfMemory) => self.moved(h, new, align),
            other => other,
        }
    }

    unsafe fn usable_size(&self, h: &Block) -> Result<usize, Error> {
        self.heap.usable_size(h)
    }

    fn add_region(&mut self, base: usize, len: usize) -> Result<(), Error> {
        self.heap.add_region(base, len)
    }

    fn extend_region(&mut self, base: usize, len: usize) -> Result<(), Error> {
        self.heap.extend_region(base, len)
    }

    fn remove_region(&mut self, base: usize) -> Result<(usize, usize), Error> {
        self.heap.remove_region(base)
    }

    fn trim(&mut self, release: impl FnMut(usize, usize)) -> usize {
        self.heap.trim(release)
    }

    fn check(&self) -> Result<(), CheckError> {
        self.heap.check()
    }

    fn check_step(&self, marks: &mut StepMarks) -> Result<(), CheckError> {
        self.heap.check_step(marks)
    }
}

impl<S: RecordStore> Counted for DetachedAdapter<S> {
    fn stats(&self) -> Stats {
        self.heap.stats()
    }
}
