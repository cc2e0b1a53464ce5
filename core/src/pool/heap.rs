//! What a [`crate::Pool`] needs from the heap it grows, implemented by both heaps, so that one
//! pool serves host memory ([`InlineHeap`]) and device memory ([`DetachedHeap`]).

use core::ptr::NonNull;

use crate::algo::geometry::Geometry;
use crate::algo::stats::Stats;
use crate::algo::tags::Tags;
use crate::detached::heap::{Block, DetachedHeap};
use crate::detached::records::RecordStore;
use crate::error::{CheckError, Error};
use crate::inline::granule::Granule;
use crate::inline::heap::InlineHeap;

mod sealed {
    pub trait Sealed {}
}

/// A heap a pool can grow: the operations of [`InlineHeap`] and [`DetachedHeap`] under one name.
/// Each method is the heap's own, documented there. Sealed: a pool relies on these methods
/// keeping the heaps' own contracts, which only the two heaps of this crate do.
pub trait PoolHeap: sealed::Sealed {
    /// How a region's base is named (a pointer for inline tags, an address for detached ones).
    type Base: Copy;
    /// What an allocation is known by: a payload pointer, or a [`Block`].
    type Block: Copy;

    /// The heap's size arithmetic.
    fn geometry(&self) -> Geometry;
    /// The address a block starts at.
    fn block_addr(block: &Self::Block) -> usize;
    /// Allocates `size` bytes aligned to `align`.
    fn alloc(&mut self, size: usize, align: usize) -> Result<Self::Block, Error>;
    /// Frees a block of `size` bytes.
    ///
    /// # Safety
    /// As for the heap's own `free`.
    unsafe fn free(&mut self, block: Self::Block, size: usize) -> Result<(), Error>;
    /// Bytes usable in a block.
    ///
    /// # Safety
    /// As for the heap's own `usable_size`.
    unsafe fn usable_size(&self, block: &Self::Block) -> Result<usize, Error>;
    /// Adds a region.
    ///
    /// # Safety
    /// As for the heap's own `add_region`.
    unsafe fn add_region(&mut self, base: Self::Base, len: usize) -> Result<(), Error>;
    /// Grows a region in place.
    ///
    /// # Safety
    /// As for the heap's own `extend_region`.
    unsafe fn extend_region(&mut self, base: Self::Base, additional: usize) -> Result<(), Error>;
    /// Removes a wholly free region.
    fn remove_region(&mut self, base: usize) -> Result<(Self::Base, usize), Error>;
    /// Cuts a region's free end at a page boundary.
    fn shrink_region(&mut self, base: usize, page: usize) -> Option<(usize, usize)>;
    /// Cuts every region's free end, offering each tail to `give`.
    fn shrink_regions(
        &mut self,
        page: usize,
        min: usize,
        give: impl FnMut(Self::Base, usize, usize) -> bool,
    ) -> usize;
    /// Removes every wholly free region.
    fn trim(&mut self, release: impl FnMut(Self::Base, usize)) -> usize;
    /// Names the releasable pages of large free chunks.
    fn free_spans(&self, min: usize, page: usize, each: impl FnMut(usize, usize)) -> usize;
    /// The region containing `addr`.
    fn region_of(&self, addr: usize) -> Option<(Self::Base, usize)>;
    /// Bytes of the free chunk ending the region containing `addr`.
    fn free_tail(&self, addr: usize) -> usize;
    /// Every region, as `(base, len)`.
    fn each_region(&self, each: impl FnMut(usize, usize));
    /// Every region and chunk.
    fn visit(&self, region: impl FnMut(usize, usize), chunk: impl FnMut(usize, usize, bool));
    /// The heap's statistics.
    fn stats(&self) -> Stats;
    /// Verifies every invariant.
    fn check(&self) -> Result<(), CheckError>;
}

/// The trait methods both heaps answer the same way, from the shared algorithm underneath
/// (`self.heap`, a `Heap` over the heap's placement).
macro_rules! shared_ops {
    () => {
        #[inline]
        fn geometry(&self) -> Geometry {
            *self.heap.tags().geometry()
        }
        unsafe fn add_region(&mut self, base: Self::Base, len: usize) -> Result<(), Error> {
            // SAFETY: forwarded caller contract.
            unsafe { self.heap.add_region(base, len) }
        }
        unsafe fn extend_region(
            &mut self,
            base: Self::Base,
            additional: usize,
        ) -> Result<(), Error> {
            // SAFETY: forwarded caller contract.
            unsafe { self.heap.extend_region(base, additional) }
        }
        fn remove_region(&mut self, base: usize) -> Result<(Self::Base, usize), Error> {
            self.heap.remove_region(base)
        }
        fn shrink_region(&mut self, base: usize, page: usize) -> Option<(usize, usize)> {
            self.heap.shrink_region(base, page)
        }
        fn shrink_regions(
            &mut self,
            page: usize,
            min: usize,
            give: impl FnMut(Self::Base, usize, usize) -> bool,
        ) -> usize {
            self.heap.shrink_regions(page, min, give)
        }
        fn trim(&mut self, release: impl FnMut(Self::Base, usize)) -> usize {
            self.heap.trim(release)
        }
        fn free_spans(&self, min: usize, page: usize, each: impl FnMut(usize, usize)) -> usize {
            self.heap.free_spans(min, page, each)
        }
        fn region_of(&self, addr: usize) -> Option<(Self::Base, usize)> {
            self.heap.region_of(addr)
        }
        fn free_tail(&self, addr: usize) -> usize {
            self.heap.free_tail(addr)
        }
        fn each_region(&self, each: impl FnMut(usize, usize)) {
            self.heap.each_region(each)
        }
        fn visit(&self, region: impl FnMut(usize, usize), chunk: impl FnMut(usize, usize, bool)) {
            self.heap.visit(region, chunk)
        }
        fn stats(&self) -> Stats {
            self.heap.stats()
        }
        fn check(&self) -> Result<(), CheckError> {
            self.heap.check()
        }
    };
}

impl<G: Granule> sealed::Sealed for InlineHeap<G> {}
impl<S: RecordStore> sealed::Sealed for DetachedHeap<S> {}

impl<G: Granule> PoolHeap for InlineHeap<G> {
    type Base = NonNull<u8>;
    type Block = NonNull<u8>;

    shared_ops!();

    #[inline]
    fn block_addr(block: &NonNull<u8>) -> usize {
        block.addr().get()
    }
    #[inline]
    fn alloc(&mut self, size: usize, align: usize) -> Result<NonNull<u8>, Error> {
        InlineHeap::alloc(self, size, align)
    }
    #[inline]
    unsafe fn free(&mut self, block: NonNull<u8>, size: usize) -> Result<(), Error> {
        // SAFETY: forwarded caller contract.
        unsafe { InlineHeap::free(self, block, size) }
    }
    unsafe fn usable_size(&self, block: &NonNull<u8>) -> Result<usize, Error> {
        // SAFETY: forwarded caller contract.
        unsafe { InlineHeap::usable_size(self, *block) }
    }
}

impl<S: RecordStore> PoolHeap for DetachedHeap<S> {
    type Base = usize;
    type Block = Block;

    shared_ops!();

    #[inline]
    fn block_addr(block: &Block) -> usize {
        block.addr
    }
    #[inline]
    fn alloc(&mut self, size: usize, align: usize) -> Result<Block, Error> {
        DetachedHeap::alloc(self, size, align)
    }
    #[inline]
    unsafe fn free(&mut self, block: Block, _size: usize) -> Result<(), Error> {
        DetachedHeap::free(self, block)
    }
    unsafe fn usable_size(&self, block: &Block) -> Result<usize, Error> {
        DetachedHeap::usable_size(self, block)
    }
}
