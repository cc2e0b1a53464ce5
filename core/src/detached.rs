//! Out-of-band tags: every chunk is a record in a host-side table, and the managed memory is
//! never read or written. This is what device memory needs (the CPU cannot touch it), and it
//! works for any address space: device pointers, offsets into a buffer, file offsets.
//!
//! Allocations come back as a [`Block`] carrying a [`Handle`] to the chunk's record, so freeing
//! is `O(1)` with no address lookup, and always checked: a stale handle (double free), an
//! address that is not the chunk's (foreign pointer) or a wrong size is reported, never obeyed.

use core::num::NonZeroU32;

use crate::error::{CheckError, Error};
use crate::heap::Heap;
use crate::records::{Kind, Record, RecordStore, NIL};
use crate::stats::Stats;
use crate::sync::next_id;
use crate::tags::{Link, Tags};
use crate::MAX_GRANULE;

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
    index: u32,
    heap: NonZeroU32,
    gen: u64,
}

impl Handle {
    /// The index of the chunk's record in the heap's table.
    pub fn index(&self) -> u32 {
        self.index
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

/// Out-of-band tag storage over a [`RecordStore`].
///
/// Invariants: records `0..fresh` are chunks, regions, or vacant and on the `vacant` list
/// (`vacant_count` long); records `fresh..` were never used. A region's chunks form a
/// `prev`/`next` list of contiguous addresses from its `links[FIRST]` to its `prev`, each naming
/// the region in its `region` field.
pub(crate) struct DetachedTags<S> {
    store: S,
    /// The heap's identity, carried by every handle it makes.
    id: NonZeroU32,
    shift: u32,
    fresh: usize,
    vacant: u32,
    vacant_count: usize,
    regions: u32,
}

/// Index of a region's first chunk in its record's `links`.
const FIRST: usize = 0;

impl<S: RecordStore> DetachedTags<S> {
    #[inline]
    fn rec(&self, i: u32) -> &Record {
        &self.store.records()[i as usize]
    }

    #[inline]
    fn rec_mut(&mut self, i: u32) -> &mut Record {
        &mut self.store.records_mut()[i as usize]
    }

    /// How many records the table can use: all of the store, up to the largest index that is
    /// not `NIL`.
    #[inline]
    fn capacity(&self) -> usize {
        self.store.records().len().min(NIL as usize)
    }

    /// Takes a vacant record; [`Tags::reserve`] must have made sure there is one.
    fn take_record(&mut self) -> u32 {
        if self.vacant != NIL {
            let i = self.vacant;
            self.vacant = self.rec(i).next;
            self.vacant_count -= 1;
            i
        } else {
            let i = self.fresh as u32;
            self.fresh += 1;
            i
        }
    }

    fn release_record(&mut self, i: u32) {
        let vacant = self.vacant;
        let r = self.rec_mut(i);
        r.kind = Kind::empty();
        r.gen = r.gen.wrapping_add(1);
        r.next = vacant;
        self.vacant = i;
        self.vacant_count += 1;
    }

    /// The region record whose range contains `addr`, or `NIL`.
    fn region_at(&self, addr: usize) -> u32 {
        let mut r = self.regions;
        while r != NIL {
            let rec = self.rec(r);
            if addr >= rec.addr && addr - rec.addr < rec.size << self.shift {
                return r;
            }
            r = rec.next;
        }
        NIL
    }
}

#[inline]
fn opt(i: u32) -> Option<u32> {
    (i != NIL).then_some(i)
}

/// A chunk's record index as the shared algorithm sees it: stored plus one in a `NonZeroU32`,
/// so that `NIL` (`u32::MAX`) reads as `None` and an `Option<Idx>` (a bin head, a link) is one
/// `u32` with no separate tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Idx(NonZeroU32);

impl Idx {
    /// The chunk at record `i`, `None` for `NIL`.
    #[inline]
    fn new(i: u32) -> Option<Idx> {
        NonZeroU32::new(i.wrapping_add(1)).map(Idx)
    }

    /// The record index (never `NIL`).
    #[inline]
    fn get(self) -> u32 {
        self.0.get() - 1
    }

    /// `i`, which must not be `NIL`, as a chunk.
    #[inline]
    fn of(i: u32) -> Idx {
        Idx::new(i).unwrap_or(Idx(NonZeroU32::MAX))
    }
}

/// The record index of an optional chunk, `NIL` for `None`.
#[inline]
fn raw(c: Option<Idx>) -> u32 {
    c.map_or(NIL, Idx::get)
}

impl<S: RecordStore> Tags for DetachedTags<S> {
    type Chunk = Idx;
    type Region = u32;

    fn granule_shift(&self) -> u32 {
        self.shift
    }

    fn head_bytes(&self) -> usize {
        0
    }

    #[inline]
    fn request_pad(&self) -> usize {
        (1 << self.shift) - 1
    }

    fn min_chunk(&self) -> usize {
        1
    }

    #[inline]
    fn size(&self, c: Idx) -> usize {
        self.rec(c.get()).size
    }

    #[inline]
    fn is_free(&self, c: Idx) -> bool {
        self.rec(c.get()).kind.contains(Kind::FREE)
    }

    #[inline]
    fn payload(&self, c: Idx) -> usize {
        self.rec(c.get()).addr
    }

    #[inline]
    fn next(&self, c: Idx) -> Option<Idx> {
        Idx::new(self.rec(c.get()).next)
    }

    #[inline]
    fn next_if_free(&self, c: Idx) -> Option<(Idx, usize)> {
        let n = Idx::new(self.rec(c.get()).next)?;
        let r = self.rec(n.get());
        r.kind.contains(Kind::FREE).then_some((n, r.size))
    }

    #[inline]
    fn prev_if_free(&self, c: Idx) -> Option<(Idx, usize)> {
        let p = Idx::new(self.rec(c.get()).prev)?;
        let r = self.rec(p.get());
        r.kind.contains(Kind::FREE).then_some((p, r.size))
    }

    fn set_free(&mut self, c: Idx, free: bool) {
        let r = self.rec_mut(c.get());
        r.kind.set(Kind::FREE, free);
        if !free {
            r.gen = r.gen.wrapping_add(1);
        }
    }

    fn split(&mut self, c: Idx, head: usize) -> Idx {
        let c = c.get();
        let t = self.take_record();
        let shift = self.shift;
        let cr = *self.rec(c);
        let tr = self.rec_mut(t);
        tr.addr = cr.addr + (head << shift);
        tr.size = cr.size - head;
        tr.prev = c;
        tr.next = cr.next;
        tr.kind = cr.kind;
        tr.region = cr.region;
        tr.links = [NIL; 5];
        if cr.next == NIL {
            self.rec_mut(cr.region).prev = t;
        } else {
            self.rec_mut(cr.next).prev = t;
        }
        let r = self.rec_mut(c);
        r.next = t;
        r.size = head;
        Idx::of(t)
    }

    fn absorb_next(&mut self, c: Idx) {
        let c = c.get();
        let n = self.rec(c).next;
        let nr = *self.rec(n);
        let r = self.rec_mut(c);
        r.size += nr.size;
        r.next = nr.next;
        if nr.next == NIL {
            self.rec_mut(nr.region).prev = c;
        } else {
            self.rec_mut(nr.next).prev = c;
        }
        self.release_record(n);
    }

    #[inline]
    fn carve(&mut self, c: Idx, size: usize, need: usize) -> Option<Idx> {
        let c = c.get();
        // The minimum chunk is one granule: any rest stands alone.
        let tail = (size > need).then(|| self.take_record());
        let r = self.rec_mut(c);
        r.kind = Kind::CHUNK;
        r.gen = r.gen.wrapping_add(1);
        let t = tail?;
        let (addr, next, region) = (r.addr, r.next, r.region);
        r.size = need;
        r.next = t;
        let shift = self.shift;
        let tr = self.rec_mut(t);
        tr.addr = addr + (need << shift);
        tr.size = size - need;
        tr.prev = c;
        tr.next = next;
        tr.kind = Kind::CHUNK | Kind::FREE;
        tr.region = region;
        // The tail's links are written when it is filed.
        if next == NIL {
            self.rec_mut(region).prev = t;
        } else {
            self.rec_mut(next).prev = t;
        }
        Idx::new(t)
    }

    #[inline(always)]
    fn free_merged(&mut self, c: Idx, prev: Option<Idx>, next: Option<Idx>, size: usize) -> Idx {
        let m = prev.unwrap_or(c).get();
        if prev.is_some() || next.is_some() {
            // Link the merged chunk to what follows its last part.
            let last = self.rec(next.unwrap_or(c).get());
            let (after, region) = (last.next, last.region);
            if after == NIL {
                self.rec_mut(region).prev = m;
            } else {
                self.rec_mut(after).prev = m;
            }
            self.rec_mut(m).next = after;
        }
        let r = self.rec_mut(m);
        r.size = size;
        r.kind = Kind::CHUNK | Kind::FREE;
        if prev.is_some() {
            self.release_record(c.get());
        }
        if let Some(n) = next {
            self.release_record(n.get());
        }
        prev.unwrap_or(c)
    }

    fn reserve(&mut self, n: usize) -> Result<(), Error> {
        while self.vacant_count + (self.capacity() - self.fresh) < n {
            if !self.store.grow() {
                return Err(Error::OutOfRecords);
            }
        }
        Ok(())
    }

    #[inline]
    fn link(&self, c: Idx, l: Link) -> Option<Idx> {
        Idx::new(self.rec(c.get()).links[l as usize])
    }

    #[inline]
    fn set_link(&mut self, c: Idx, l: Link, v: Option<Idx>) {
        self.rec_mut(c.get()).links[l as usize] = raw(v);
    }

    fn first_region(&self) -> Option<u32> {
        opt(self.regions)
    }

    fn next_region(&self, r: u32) -> Option<u32> {
        opt(self.rec(r).next)
    }

    fn region_first_chunk(&self, r: u32) -> Idx {
        Idx::of(self.rec(r).links[FIRST])
    }

    fn region_granules(&self, r: u32) -> usize {
        self.rec(r).size
    }

    fn check_tags(&self, c: Idx, first: bool) -> Result<(), CheckError> {
        let c = c.get();
        let len = self.capacity() as u32;
        let r = self.rec(c);
        if !r.kind.contains(Kind::CHUNK) || r.kind.contains(Kind::REGION) {
            return Err(CheckError::new("record is not a chunk", r.addr));
        }
        if first != (r.prev == NIL) {
            return Err(CheckError::new("chunk's predecessor link is wrong", r.addr));
        }
        if r.region >= len || !self.rec(r.region).kind.contains(Kind::REGION) {
            return Err(CheckError::new("chunk's region link is wrong", r.addr));
        }
        let region = self.rec(r.region);
        if first && r.addr != region.addr {
            return Err(CheckError::new(
                "first chunk does not start its region",
                r.addr,
            ));
        }
        if r.next == NIL && region.prev != c {
            return Err(CheckError::new("region's last-chunk link is wrong", r.addr));
        }
        if r.next != NIL {
            if r.next >= len {
                return Err(CheckError::new("successor index out of the table", r.addr));
            }
            let n = self.rec(r.next);
            if n.prev != c || n.addr != r.addr + (r.size << self.shift) {
                return Err(CheckError::new("successor is not contiguous", r.addr));
            }
        }
        Ok(())
    }
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
    heap: Heap<DetachedTags<S>>,
}

/// The granule of a device-style heap unless another is chosen.
pub const DEVICE_GRANULE: usize = 256;

impl<S: RecordStore> DetachedHeap<S> {
    /// An empty heap over `store` whose sizes are counted in granules of `granule` bytes.
    ///
    /// `granule` is a power of two from 1 to [`MAX_GRANULE`] (1 GiB): every request is rounded
    /// up to a whole number of granules and every block starts on a granule boundary, so
    /// alignments up to the granule cost nothing. [`DEVICE_GRANULE`] (256 bytes) suits device
    /// memory; 1 turns the heap into an allocator of exact byte ranges. Larger granules mean
    /// fewer, coarser chunks.
    ///
    /// Without the `alloc` feature, `store` is a slice of [`Record::VACANT`] the caller
    /// supplies, and the heap holds at most that many chunks and regions at once (records past
    /// `u32::MAX − 1` are never used); with it, a `Vec<Record>` grows as needed.
    ///
    /// Errors: `BadGranule`; `TooManyHeaps` once 2^32 − 2 out-of-band heaps have been made in
    /// this process (each has an identity its blocks carry).
    pub fn new(store: S, granule: usize) -> Result<Self, Error> {
        if !granule.is_power_of_two() || granule > MAX_GRANULE {
            return Err(Error::BadGranule);
        }
        let id = next_id().ok_or(Error::TooManyHeaps)?;
        Ok(DetachedHeap {
            heap: Heap::new(DetachedTags {
                store,
                id,
                shift: granule.trailing_zeros(),
                fresh: 0,
                vacant: NIL,
                vacant_count: 0,
                regions: NIL,
            }),
        })
    }

    /// The granule in bytes.
    pub fn granule(&self) -> usize {
        1 << self.heap.tags.shift
    }

    /// Adds the address range `base..base + len` as a new region (`base` granule-aligned, `len`
    /// rounded down to granules). Adjacent regions stay separate; use
    /// [`DetachedHeap::extend_region`] for space that continues a region.
    ///
    /// Errors: `RegionMisaligned`, `RegionOverlap` (overlaps or wraps), `RegionTooSmall` (less
    /// than one granule), `OutOfRecords`.
    pub fn add_region(&mut self, base: usize, len: usize) -> Result<(), Error> {
        if base & (self.granule() - 1) != 0 {
            return Err(Error::RegionMisaligned);
        }
        let granules = self.new_space(base, len, 2)?;
        let t = &mut self.heap.tags;
        let c = t.take_record();
        let r = t.take_record();
        // A reused record keeps its generation, so that a handle from when it was a chunk can
        // never match a chunk it becomes later.
        let gen = t.rec(r).gen;
        *t.rec_mut(r) = Record {
            addr: base,
            size: granules,
            prev: c,
            next: t.regions,
            links: [c, NIL, NIL, NIL, NIL],
            region: NIL,
            gen,
            kind: Kind::REGION,
        };
        t.regions = r;
        self.add_chunk(c, r, base, granules, NIL, true);
        Ok(())
    }

    /// Grows the region that starts at `region` by `additional` bytes (rounded down to
    /// granules) right after its end, as virtual-memory growth does; the new space merges with
    /// the region's free tail, so the region stays one.
    ///
    /// Errors: `UnknownRegion`, `RegionOverlap`, `RegionTooSmall`, `OutOfRecords`.
    pub fn extend_region(&mut self, region: usize, additional: usize) -> Result<(), Error> {
        let t = &self.heap.tags;
        let mut r = t.regions;
        while r != NIL && t.rec(r).addr != region {
            r = t.rec(r).next;
        }
        if r == NIL {
            return Err(Error::UnknownRegion);
        }
        let end = region + (t.rec(r).size << t.shift);
        let granules = self.new_space(end, additional, 1)?;
        let t = &mut self.heap.tags;
        let c = t.take_record();
        let last = t.rec(r).prev;
        t.rec_mut(last).next = c;
        t.rec_mut(r).size += granules;
        self.add_chunk(c, r, end, granules, last, false);
        Ok(())
    }

    /// Validates new space `start..start + len` (free of overlap, at least a granule) and
    /// reserves `records` records for it; returns its length in granules.
    fn new_space(&mut self, start: usize, len: usize, records: usize) -> Result<usize, Error> {
        let t = &self.heap.tags;
        let len = len & !((1 << t.shift) - 1);
        let end = start.checked_add(len).ok_or(Error::RegionOverlap)?;
        let mut r = t.regions;
        while r != NIL {
            let rec = t.rec(r);
            if start < rec.addr + (rec.size << t.shift) && rec.addr < end {
                return Err(Error::RegionOverlap);
            }
            r = rec.next;
        }
        if len == 0 {
            return Err(Error::RegionTooSmall);
        }
        self.heap.tags.reserve(records)?;
        Ok(len >> self.heap.tags.shift)
    }

    /// Makes record `c` a chunk of new space at the end of region `r` and files it.
    fn add_chunk(&mut self, c: u32, r: u32, addr: usize, size: usize, prev: u32, new: bool) {
        let t = &mut self.heap.tags;
        t.rec_mut(r).prev = c;
        let gen = t.rec(c).gen;
        *t.rec_mut(c) = Record {
            addr,
            size,
            prev,
            next: NIL,
            links: [NIL; 5],
            region: r,
            gen,
            kind: Kind::CHUNK,
        };
        self.heap.add_space(Idx::of(c), new);
    }

    /// Removes the region that starts at `base` if none of it is allocated; returns its range.
    pub fn remove_region(&mut self, base: usize) -> Result<(usize, usize), Error> {
        let mut before = NIL;
        let mut r = self.heap.tags.regions;
        while r != NIL {
            let rec = *self.heap.tags.rec(r);
            if rec.addr == base {
                let c = self.heap.sole_free_chunk(r)?;
                self.heap.remove_space(c);
                let t = &mut self.heap.tags;
                if before == NIL {
                    t.regions = rec.next;
                } else {
                    t.rec_mut(before).next = rec.next;
                }
                t.release_record(c.get());
                t.release_record(r);
                return Ok((base, rec.size << t.shift));
            }
            before = r;
            r = rec.next;
        }
        Err(Error::UnknownRegion)
    }

    /// Removes every wholly free region, calling `release(base, len)` for each; returns how
    /// many were removed.
    pub fn trim(&mut self, mut release: impl FnMut(usize, usize)) -> usize {
        let mut removed = 0;
        let mut r = self.heap.tags.regions;
        while r != NIL {
            let rec = *self.heap.tags.rec(r);
            r = rec.next;
            if let Ok((base, len)) = self.remove_region(rec.addr) {
                release(base, len);
                removed += 1;
            }
        }
        removed
    }

    /// Allocates `size` bytes aligned to `align` (a power of two), by exact best fit: the
    /// smallest free chunk that fits, oldest among equals (for alignments above the granule,
    /// the best fit for the size plus the worst-case padding).
    #[inline]
    pub fn alloc(&mut self, size: usize, align: usize) -> Result<Block, Error> {
        let c = self.heap.alloc(size, align)?.get();
        let r = self.heap.tags.rec(c);
        Ok(Block {
            addr: r.addr,
            size,
            handle: Handle {
                index: c,
                heap: self.heap.tags.id,
                gen: r.gen,
            },
        })
    }

    /// The chunk behind `block` and its size in granules, if `block` is a live allocation of
    /// this heap as handed out.
    #[inline]
    fn validate(&self, block: &Block) -> Result<(Idx, usize), Error> {
        let t = &self.heap.tags;
        if block.handle.heap != t.id {
            return Err(Error::ForeignPointer);
        }
        let i = block.handle.index;
        let rec = t
            .store
            .records()
            .get(i as usize)
            .filter(|r| (i as usize) < t.fresh && !r.kind.contains(Kind::REGION))
            .ok_or(Error::ForeignPointer)?;
        // A live chunk is exactly `CHUNK`: not free, not vacant.
        if rec.gen != block.handle.gen || rec.kind != Kind::CHUNK {
            return Err(Error::DoubleFree);
        }
        if rec.addr != block.addr {
            return Err(Error::ForeignPointer);
        }
        if !self.heap.size_fits(rec.size, block.size) {
            return Err(Error::WrongSize);
        }
        Ok((Idx::of(i), rec.size))
    }

    /// Frees `block`, in `O(1)`. Always checked, in every build: a block freed before
    /// (`DoubleFree`: its record's generation has moved on), a block of another heap or one
    /// whose address is not its chunk's (`ForeignPointer`), or one whose size was changed
    /// (`WrongSize`) is refused, and the heap is left as it was. Nothing is the caller's
    /// promise: a `Block` cannot name a live allocation it was not made for.
    #[inline]
    pub fn free(&mut self, block: Block) -> Result<(), Error> {
        match self.validate(&block) {
            Ok((c, size)) => {
                self.heap.free_sized(c, size);
                Ok(())
            }
            Err(e) => {
                self.heap.counters.rejected_frees += 1;
                Err(e)
            }
        }
    }

    /// Resizes `block` in place to `new_size` bytes: shrinks it (freeing the tail) or grows it
    /// into a free successor. `OutOfMemory` if it cannot grow in place (the block is unchanged
    /// then; moving device memory is the caller's business). Returns the updated block.
    pub fn resize_in_place(&mut self, block: Block, new_size: usize) -> Result<Block, Error> {
        let (c, _) = self.validate(&block)?;
        self.heap.resize_in_place(c, new_size)?;
        Ok(Block {
            size: new_size,
            ..block
        })
    }

    /// Bytes usable in `block` (at least its size), or the reason it is not a live block.
    pub fn usable_size(&self, block: &Block) -> Result<usize, Error> {
        let (_, size) = self.validate(block)?;
        Ok(size << self.heap.tags.shift)
    }

    /// The region containing `addr`, as `(base, len)`, if any.
    pub fn region_of(&self, addr: usize) -> Option<(usize, usize)> {
        let t = &self.heap.tags;
        let r = t.region_at(addr);
        (r != NIL).then(|| (t.rec(r).addr, t.rec(r).size << t.shift))
    }

    /// Verifies every invariant of the heap (see `Heap::check`).
    pub fn check(&self) -> Result<(), CheckError> {
        let t = &self.heap.tags;
        self.heap.check(|c| t.rec(c.get()).addr)
    }

    /// The heap's statistics.
    pub fn stats(&self) -> Stats {
        self.heap.stats()
    }

    /// The record table, for tests that age or corrupt records.
    #[cfg(all(test, not(loom)))]
    pub(crate) fn records_mut(&mut self) -> &mut [Record] {
        self.heap.tags.store.records_mut()
    }
}

#[cfg(feature = "alloc")]
impl DetachedHeap<alloc::vec::Vec<Record>> {
    /// An empty heap whose record table grows on the global heap.
    pub fn growable(granule: usize) -> Result<Self, Error> {
        Self::new(alloc::vec::Vec::new(), granule)
    }
}
