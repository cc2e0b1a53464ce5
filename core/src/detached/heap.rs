//! The detached heap: the public face of the detached placement (`crate::detached::tags`),
//! whose managed memory is never read or written.
//!
//! Allocations come back as a [`Block`] carrying a [`Handle`] to the chunk's record, so freeing
//! is `O(1)` with no address lookup, and always checked: a stale handle (double free), an
//! address that is not the chunk's (foreign pointer) or a wrong size is reported, never obeyed.

use core::num::NonZeroU32;

use crate::algo::check::StepMarks;
use crate::algo::geometry::Geometry;
use crate::algo::heap::Heap;
use crate::algo::stats::Stats;
use crate::detached::records::{Idx, Kind, RecordStore};
use crate::detached::tags::DetachedTags;
use crate::error::{CheckError, Error};
use crate::sync::next_id;

/// Names one allocation's record: the heap that made it, the record's index, and the
/// record's generation when it was handed out, which tells a live allocation from an earlier
/// one that used the same record. Only a [`DetachedHeap`] makes them.
///
/// # Examples
///
/// ```
/// # fn main() -> Result<(), tagalloc::Error> {
/// use tagalloc::{DetachedHeap, Error, Record};
///
/// let (mut t1, mut t2) = ([Record::VACANT; 8], [Record::VACANT; 8]);
/// let mut h1 = DetachedHeap::new(&mut t1[..], 256)?;
/// let mut h2 = DetachedHeap::new(&mut t2[..], 256)?;
/// h1.add_region(0, 1 << 20)?;
/// h2.add_region(0, 1 << 20)?;
/// let a = h1.alloc(1000, 256)?;
/// let b = h2.alloc(1000, 256)?;
/// assert_eq!(a.addr, b.addr); // the same offsets in two address spaces...
/// assert_ne!(a.handle, b.handle); // ...but each heap knows its own blocks
/// assert_eq!(h1.free(b), Err(Error::ForeignPointer));
/// h1.free(a)?;
/// assert_eq!(h1.free(a), Err(Error::DoubleFree)); // the generation moved on
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Handle {
    record: Idx,
    heap: NonZeroU32,
    gen: u64,
}

impl Handle {
    /// The index of the chunk's record in the heap's table.
    ///
    /// # Time Complexity
    /// `O(1)`.
    pub fn index(&self) -> usize {
        self.record.get()
    }
}

/// An allocation from a [`DetachedHeap`]: its address, the size asked for, and its handle.
/// Give it back to [`DetachedHeap::free`] as it was received: a block whose fields were
/// changed, freed twice, or freed to another heap is refused.
///
/// # Examples
///
/// ```
/// # fn main() -> Result<(), tagalloc::Error> {
/// use tagalloc::{Block, DetachedHeap, Error, Record};
///
/// let mut table = [Record::VACANT; 8];
/// let mut dev = DetachedHeap::new(&mut table[..], 256)?;
/// dev.add_region(0x10_0000, 1 << 20)?;
/// let b: Block = dev.alloc(1000, 4096)?;
/// assert_eq!((b.addr % 4096, b.size), (0, 1000));
/// assert_eq!(dev.usable_size(&b)?, 1024); // rounded up to the 256-byte granule
/// assert_eq!(dev.free(Block { size: 5000, ..b }), Err(Error::WrongSize));
/// dev.free(b)?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Block {
    /// The first byte of the allocation in the managed address space.
    pub addr: usize,
    /// The size that was asked for (the chunk may be larger; see
    /// [`DetachedHeap::usable_size`]).
    pub size: usize,
    /// The chunk's record.
    pub handle: Handle,
}

/// A heap whose tags live in a host-side table: it hands out ranges of an address space it
/// never touches (device memory, offsets).
///
/// Sizes are rounded to the granule (256 bytes is typical for device memory), with no tag
/// overhead. Any power-of-two alignment is served, those above the granule by splitting off a
/// leading free fragment.
///
/// # Examples
///
/// ```
/// # fn main() -> Result<(), tagalloc::Error> {
/// use tagalloc::{DetachedHeap, Record, DEVICE_GRANULE};
///
/// let mut table = [Record::VACANT; 256]; // at most 256 chunks and regions at once
/// let mut dev = DetachedHeap::new(&mut table[..], DEVICE_GRANULE)?;
/// dev.add_region(0x7f00_0000_0000, 1 << 30)?; // e.g. a device allocation: never touched
/// let a = dev.alloc(1 << 20, 4096)?;
/// let b = dev.alloc(300, 1)?;
/// assert_eq!(b.addr, a.addr + (1 << 20)); // best fit: the front of the remaining space
/// dev.free(a)?;
/// dev.free(b)?;
/// dev.check().expect("every invariant holds");
/// assert_eq!(dev.stats().free_chunks, 1); // merged back into one chunk
/// # Ok(())
/// # }
/// ```
pub struct DetachedHeap<S: RecordStore> {
    pub(crate) heap: Heap<DetachedTags<S>>,
}

/// The granule of a device-style heap unless another is chosen.
pub const DEVICE_GRANULE: usize = 256;

impl<S: RecordStore> DetachedHeap<S> {
    /// An empty heap over `store` whose sizes are counted in granules of `granule` bytes.
    ///
    /// `granule` is a power of two from 1 to [`MAX_GRANULE`](crate::MAX_GRANULE) (1 GiB): every request is rounded
    /// up to a whole number of granules and every block starts on a granule boundary, so
    /// alignments up to the granule cost nothing. [`DEVICE_GRANULE`] (256 bytes) suits device
    /// memory; 1 turns the heap into an allocator of exact byte ranges. Larger granules mean
    /// fewer, coarser chunks.
    ///
    /// Without the `alloc` feature, `store` is a slice of
    /// [`Record::VACANT`](crate::Record::VACANT) the caller supplies, and the heap holds at most
    /// that many chunks and regions at once (records past `u32::MAX − 1` are never used); with
    /// it, a `Vec<Record>` grows as needed.
    ///
    /// Errors: `BadGranule`; `TooManyHeaps` once 2^32 − 2 detached heaps have been made in this
    /// process (each has an identity its blocks carry).
    ///
    /// # Time Complexity
    /// `O(1)`.
    pub fn new(store: S, granule: usize) -> Result<Self, Error> {
        let layout = Geometry::detached(granule)?;
        let id = next_id().ok_or(Error::TooManyHeaps)?;
        Ok(DetachedHeap {
            heap: Heap::new(DetachedTags {
                store,
                id,
                layout,
                fresh: 0,
                vacant: None,
                vacant_count: 0,
                regions: None,
            }),
        })
    }

    /// The granule in bytes.
    ///
    /// # Time Complexity
    /// `O(1)`.
    pub fn granule(&self) -> usize {
        self.heap.tags().layout.granule()
    }

    /// Adds the address range `base..base + len` as a new region (`base` granule-aligned, `len`
    /// rounded down to granules). Adjacent regions stay separate; use
    /// [`DetachedHeap::extend_region`] for space that continues a region.
    ///
    /// Errors: `RegionMisaligned`, `RegionOverlap` (overlaps or wraps), `RegionTooSmall` (less
    /// than one granule), `OutOfRecords`. Nothing is changed on error.
    ///
    /// # Time Complexity
    /// `O(regions)`.
    pub fn add_region(&mut self, base: usize, len: usize) -> Result<(), Error> {
        // SAFETY: detached tags never read or write the range, so any range may be given.
        unsafe { self.heap.add_region(base, len) }
    }

    /// Grows the region that starts at `region` by `additional` bytes (rounded down to
    /// granules) right after its end, as virtual-memory growth does; the new space merges with
    /// the region's free end, so the region stays one.
    ///
    /// Errors: `UnknownRegion`, `RegionOverlap`, `RegionTooSmall`, `OutOfRecords`. Nothing is
    /// changed on error.
    ///
    /// # Time Complexity
    /// `O(regions)`.
    pub fn extend_region(&mut self, region: usize, additional: usize) -> Result<(), Error> {
        // SAFETY: as in `add_region`.
        unsafe { self.heap.extend_region(region, additional) }
    }

    /// Removes the region that starts at `base` if none of it is allocated; returns its range
    /// as `(base, len)`. Errors: `UnknownRegion`, `RegionInUse`.
    ///
    /// # Time Complexity
    /// `O(regions)`.
    pub fn remove_region(&mut self, base: usize) -> Result<(usize, usize), Error> {
        self.heap.remove_region(base)
    }

    /// Removes every wholly free region, calling `release(base, len)` for each; returns how
    /// many were removed.
    ///
    /// # Time Complexity
    /// `O(regions)`.
    pub fn trim(&mut self, release: impl FnMut(usize, usize)) -> usize {
        self.heap.trim(release)
    }

    /// The region containing `addr`, as `(base, len)`, if any.
    ///
    /// # Time Complexity
    /// `O(regions)`.
    pub fn region_of(&self, addr: usize) -> Option<(usize, usize)> {
        self.heap.region_of(addr)
    }

    /// Allocates `size` bytes aligned to `align` (a power of two), by best fit: the smallest
    /// free chunk that fits, oldest among equals, and the top (the free end of the region the
    /// heap grows at) only when no other free chunk fits (for alignments above the granule,
    /// the best fit for the size plus the worst-case padding). A listed size at most
    /// granule-aligned that no chunk of exactly its size serves is carved from the victim
    /// first, the rest of the chunk carved last for such a request (see the crate's glossary).
    /// Errors: `ZeroSize`, `SizeOverflow`, `BadAlign`, `OutOfMemory`, `OutOfRecords`.
    ///
    /// # Time Complexity
    /// `O(1)` for sizes kept in lists (up to 2047 granules); `O(bits of a size)` otherwise
    /// (one walk down a bin's trie).
    #[inline(always)]
    pub fn alloc(&mut self, size: usize, align: usize) -> Result<Block, Error> {
        let c = self.heap.alloc(size, align)?;
        let t = self.heap.tags();
        let r = t.rec(c);
        Ok(Block {
            addr: r.addr,
            size,
            handle: Handle {
                record: c,
                heap: t.id,
                gen: r.gen,
            },
        })
    }

    /// The chunk behind `block` and its size in granules, if `block` is a live allocation of
    /// this heap as handed out.
    #[inline]
    fn validate(&self, block: &Block) -> Result<(Idx, usize), Error> {
        let t = self.heap.tags();
        let i = block.handle.record;
        if block.handle.heap != t.id || i.get() >= t.fresh {
            return Err(Error::ForeignPointer);
        }
        let rec = t.rec(i);
        // A live chunk is exactly `CHUNK`: not free, not vacant, not a region.
        if rec.gen != block.handle.gen || rec.kind != Kind::CHUNK {
            return Err(Error::DoubleFree);
        }
        if rec.addr != block.addr {
            return Err(Error::ForeignPointer);
        }
        if !t.layout.size_fits(rec.size, block.size) {
            return Err(Error::WrongSize);
        }
        Ok((i, rec.size))
    }

    /// Frees `block`. Always checked, in every build: a block freed before (`DoubleFree`: its
    /// record's generation has moved on), a block of another heap or one whose address is not
    /// its chunk's (`ForeignPointer`), or one whose size was changed (`WrongSize`) is refused,
    /// and the heap is left as it was. Nothing is the caller's promise: a `Block` cannot name a
    /// live allocation it was not made for.
    ///
    /// # Time Complexity
    /// `O(1)` for a merged chunk of up to 2047 granules; `O(bits of a size)` otherwise.
    #[inline(always)]
    pub fn free(&mut self, block: Block) -> Result<(), Error> {
        match self.validate(&block) {
            Ok((c, size)) => {
                self.heap.free_sized(c, size);
                Ok(())
            }
            Err(e) => Err(self.heap.refused(e)),
        }
    }

    /// Resizes `block` in place to `new_size` bytes: shrinks it (freeing the tail) or grows it
    /// into a free successor. `OutOfMemory` if it cannot grow in place (the block is unchanged
    /// then; moving device memory is the caller's business). Returns the updated block.
    ///
    /// # Time Complexity
    /// As for [`DetachedHeap::free`].
    pub fn resize_in_place(&mut self, block: Block, new_size: usize) -> Result<Block, Error> {
        let (c, _) = self.validate(&block)?;
        self.heap.resize_in_place(c, new_size)?;
        Ok(Block {
            size: new_size,
            ..block
        })
    }

    /// Splits the live `block` in two live blocks: the first `head` bytes (rounded up to the
    /// granule) keep `block`'s record, the rest becomes a block of its own, with a fresh
    /// handle. Returns both; the tail is `None` (and `block` unchanged) when either part would
    /// be empty. Errors: `block` is not a live block of this heap (as for
    /// [`DetachedHeap::free`]), `head` overflows, or no record is left for the tail.
    ///
    /// # Time Complexity
    /// `O(1)`.
    pub fn split(&mut self, block: Block, head: usize) -> Result<(Block, Option<Block>), Error> {
        let (c, _) = self.validate(&block)?;
        if head == 0 {
            return Ok((block, None));
        }
        let keep = self.heap.tags().layout.granules_for(head)?;
        let Some(t) = self.heap.split_in_use(c, keep)? else {
            return Ok((block, None));
        };
        let gen = self.heap.tags_mut().renew(t);
        let tags = self.heap.tags();
        let (head_rec, tail_rec) = (tags.rec(c), tags.rec(t));
        let head_block = Block {
            size: head_rec.size << tags.layout.shift(),
            ..block
        };
        let tail_block = Block {
            addr: tail_rec.addr,
            size: tail_rec.size << tags.layout.shift(),
            handle: Handle {
                record: t,
                gen,
                ..block.handle
            },
        };
        Ok((head_block, Some(tail_block)))
    }

    /// Merges the live `first` with the live `second` that starts where `first` ends (in the
    /// same region): one live block of both their bytes, keeping `first`'s handle; `second`'s
    /// handle names nothing from now on. The inverse of [`DetachedHeap::split`]. Errors: either
    /// is not a live block of this heap (as for [`DetachedHeap::free`]), or `second` does not
    /// follow `first` (`ForeignPointer`); nothing changes then.
    ///
    /// # Time Complexity
    /// `O(1)`.
    pub fn merge(&mut self, first: Block, second: Block) -> Result<Block, Error> {
        let (a, _) = self.validate(&first)?;
        let (b, _) = self.validate(&second)?;
        if !self.heap.merge_in_use(a, b) {
            return Err(Error::ForeignPointer);
        }
        let tags = self.heap.tags();
        Ok(Block {
            size: tags.rec(a).size << tags.layout.shift(),
            ..first
        })
    }

    /// Bytes usable in `block` (at least its size), or the reason it is not a live block of
    /// this heap.
    ///
    /// # Time Complexity
    /// `O(1)`.
    pub fn usable_size(&self, block: &Block) -> Result<usize, Error> {
        let (_, size) = self.validate(block)?;
        Ok(size << self.heap.tags().layout.shift())
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

    /// As [`InlineHeap::check_step`](crate::InlineHeap::check_step), for this heap.
    pub fn check_step(&self, marks: &mut StepMarks) -> Result<(), CheckError> {
        self.heap.check_step(marks)
    }

    /// Verifies every invariant of the heap (see `crate::algo::check`).
    ///
    /// # Time Complexity
    /// `O(chunks + regions)`.
    pub fn check(&self) -> Result<(), CheckError> {
        self.heap.check()
    }

    /// The heap's statistics.
    ///
    /// # Time Complexity
    /// `O(bits of a size)` (the largest free chunk is found down a trie); the rest is kept as
    /// running counters.
    pub fn stats(&self) -> Stats {
        self.heap.stats()
    }

    /// The record table, for tests that age or corrupt records.
    #[cfg(all(test, not(loom)))]
    pub(crate) fn records_mut(&mut self) -> &mut [crate::detached::records::Record] {
        self.heap.tags_mut().store.records_mut()
    }
}

#[cfg(feature = "alloc")]
impl DetachedHeap<alloc::vec::Vec<crate::detached::records::Record>> {
    /// An empty heap whose record table grows on the global heap.
    ///
    /// # Time Complexity
    /// `O(1)`.
    pub fn growable(granule: usize) -> Result<Self, Error> {
        Self::new(alloc::vec::Vec::new(), granule)
    }
}
