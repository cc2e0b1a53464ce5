//! The heaps under test, behind one interface the driver runs operations through.

use core::fmt::Debug;
use core::ptr::NonNull;

use tagalloc::model::Geometry;
use tagalloc::{Block, CheckError, DetachedHeap, Error, InlineHeap, Record, RecordStore, Stats};

use crate::arena::Lease;
use crate::ops::{Place, SPACE};
use crate::pattern;

/// A heap under test, in terms of absolute addresses (payloads and region bases).
pub trait Subject {
    /// What an allocation is named by: a pointer, or a block.
    type H: Copy + Debug;

    /// The heap's layout, in the model's terms.
    fn geometry(&self) -> Geometry;
    /// The address of a new region's base, or `None` if this heap cannot be given that place.
    fn resolve(&self, at: Place) -> Option<usize>;
    /// The address at this offset of the address space.
    fn at_offset(&self, offset: usize) -> usize;
    /// Whether `start..start + len` may be handed to the heap (inline: inside the arena).
    fn can_place(&self, start: usize, len: usize) -> bool;
    /// Whether the record table may run out (an `OutOfRecords` error is then acceptable).
    fn may_run_out_of_records(&self) -> bool {
        false
    }
    /// Whether a free names its allocation by address alone (inline): a stale or made-up
    /// handle equal to a live allocation's address is that allocation then.
    fn frees_by_address(&self) -> bool;

    /// The payload address of `h`.
    fn addr(h: &Self::H) -> usize;
    /// `alloc(size, align)`.
    fn alloc(&mut self, size: usize, align: usize) -> Result<Self::H, Error>;
    /// A checked free of `h` as an allocation of `size` bytes.
    fn free(&mut self, h: Self::H, size: usize) -> Result<(), Error>;
    /// A resize of `h`, an allocation of `old` bytes, to `new` bytes; a move is aligned to
    /// `align`.
    fn realloc(
        &mut self,
        h: Self::H,
        old: usize,
        align: usize,
        new: usize,
    ) -> Result<Self::H, Error>;
    /// `add_region(base, len)`.
    fn add_region(&mut self, base: usize, len: usize) -> Result<(), Error>;
    /// `extend_region(base, len)`.
    fn extend_region(&mut self, base: usize, len: usize) -> Result<(), Error>;
    /// `remove_region(base)`, as `(base, len)`.
    fn remove_region(&mut self, base: usize) -> Result<(usize, usize), Error>;
    /// `trim()`: the released ranges as `(base, len)`.
    fn trim(&mut self) -> Vec<(usize, usize)>;
    /// `check()`.
    fn check(&self) -> Result<(), CheckError>;
    /// `stats()`.
    fn stats(&self) -> Stats;
    /// The usable bytes of the live allocation `h`.
    fn usable(&self, h: &Self::H) -> usize;

    /// Writes the pattern of `seed` into the first `len` bytes of `h` (inline only), at least
    /// from byte `from` on (the bytes before it already hold the pattern).
    fn fill(&mut self, _h: &Self::H, _from: usize, _len: usize, _seed: u8) {}
    /// Panics unless the first `len` bytes of `h` hold the pattern of `seed` (inline only).
    fn verify(&self, _h: &Self::H, _len: usize, _seed: u8) {}

    /// `h` moved `k` bytes into its allocation: an interior pointer, or a block whose address
    /// was changed.
    fn interior(h: &Self::H, k: usize) -> Self::H;
    /// A handle this heap never gave out, made from `raw`.
    fn foreign(&mut self, raw: usize) -> Self::H;
}

/// An [`InlineHeap`] over regions carved from one arena of [`SPACE`] zeroed bytes (this
/// thread's, lent for the run: see [`crate::arena`]).
pub struct InlineSubject {
    heap: InlineHeap,
    /// The arena; `base` is its first page-aligned byte. Declared after `heap`, so the heap is
    /// gone when the lease zeroes what it wrote.
    arena: Lease,
    base: *mut u8,
    /// Memory no region ever covers, for foreign pointers, and its length in bytes.
    outside: (*mut u8, usize),
    /// Every region handed to the heap in this run, as `(base, end)` (newest last; a region
    /// removed and added again appears twice), to know where an extension starts.
    ends: Vec<(usize, usize)>,
}

impl InlineSubject {
    /// A heap with this granule over this thread's arena, all zeros.
    pub fn new(heap: InlineHeap) -> Self {
        let mut arena = Lease::take();
        let base = arena.base();
        let outside = arena.outside();
        InlineSubject {
            heap,
            arena,
            base,
            outside,
            ends: Vec::new(),
        }
    }

    fn ptr(&self, addr: usize) -> *mut u8 {
        self.base
            .wrapping_add(addr.wrapping_sub(self.base as usize))
    }

    /// The heap, for checks the interface does not cover.
    pub fn heap(&mut self) -> &mut InlineHeap {
        &mut self.heap
    }
}

impl Subject for InlineSubject {
    type H = NonNull<u8>;

    fn geometry(&self) -> Geometry {
        Geometry::inline(self.heap.granule())
    }

    fn resolve(&self, at: Place) -> Option<usize> {
        match at {
            Place::Offset(o) => Some(self.at_offset(o)),
            Place::Raw(_) => None,
        }
    }

    fn at_offset(&self, offset: usize) -> usize {
        self.base as usize + offset
    }

    fn can_place(&self, start: usize, len: usize) -> bool {
        let b = self.base as usize;
        start >= b && start.checked_add(len).is_some_and(|e| e <= b + SPACE)
    }

    fn frees_by_address(&self) -> bool {
        true
    }

    fn addr(h: &NonNull<u8>) -> usize {
        h.as_ptr() as usize
    }

    fn alloc(&mut self, size: usize, align: usize) -> Result<NonNull<u8>, Error> {
        self.heap.alloc(size, align)
    }

    fn free(&mut self, h: NonNull<u8>, size: usize) -> Result<(), Error> {
        // SAFETY: the driver never uses `h` again once a free succeeded, and `free_checked`
        // refuses any pointer that is not a live allocation's.
        unsafe { self.heap.free_checked(h, size) }
    }

    fn realloc(
        &mut self,
        h: NonNull<u8>,
        old: usize,
        align: usize,
        new: usize,
    ) -> Result<NonNull<u8>, Error> {
        // SAFETY: with the `checked` feature the pointer and size are validated first; the
        // driver uses only the returned pointer afterwards.
        unsafe { self.heap.realloc(h, old, align, new) }
    }

    fn add_region(&mut self, base: usize, len: usize) -> Result<(), Error> {
        let end = base + (len & !(self.heap.granule() - 1));
        assert!(self.can_place(base, end - base));
        // SAFETY: the range lies in the arena, which outlives the heap; nothing but the heap
        // uses arena memory, and the heap refuses ranges that overlap its regions.
        let got = unsafe { self.heap.add_region(self.ptr(base), len) };
        if got.is_ok() {
            self.arena.lent(base, end);
            self.ends.push((base, end));
        }
        got
    }

    fn extend_region(&mut self, base: usize, len: usize) -> Result<(), Error> {
        // SAFETY: the driver makes sure the added range lies in the arena (one allocation,
        // which the region's pointer reaches); the heap refuses overlaps and unknown regions.
        let got = unsafe { self.heap.extend_region(self.ptr(base), len) };
        if got.is_ok() {
            // The region is live, so its newest entry is its current extent.
            let (_, end) = self
                .ends
                .iter_mut()
                .rev()
                .find(|(b, _)| *b == base)
                .expect("an extended region was added");
            let added = len & !(self.heap.granule() - 1);
            self.arena.lent(*end, *end + added);
            *end += added;
        }
        got
    }

    fn remove_region(&mut self, base: usize) -> Result<(usize, usize), Error> {
        self.heap
            .remove_region(self.ptr(base))
            .map(|(b, len)| (b.as_ptr() as usize, len))
    }

    fn trim(&mut self) -> Vec<(usize, usize)> {
        let mut out = Vec::new();
        self.heap
            .trim(|b, len| out.push((b.as_ptr() as usize, len)));
        out
    }

    fn check(&self) -> Result<(), CheckError> {
        self.heap.check()
    }

    fn stats(&self) -> Stats {
        self.heap.stats()
    }

    fn usable(&self, h: &NonNull<u8>) -> usize {
        // SAFETY: the driver asks only about live allocations.
        unsafe { self.heap.usable_size(*h) }
    }

    fn fill(&mut self, h: &NonNull<u8>, from: usize, len: usize, seed: u8) {
        let from = from / 256 * 256;
        // SAFETY: `h` is a live allocation of at least `len` bytes, which only the driver uses;
        // `from <= len`.
        let s = unsafe { core::slice::from_raw_parts_mut(h.as_ptr().add(from), len - from) };
        pattern::fill_from(s, from, seed);
    }

    fn verify(&self, h: &NonNull<u8>, len: usize, seed: u8) {
        // SAFETY: as in `fill`.
        let s = unsafe { core::slice::from_raw_parts(h.as_ptr(), len) };
        if let Err(i) = pattern::verify(s, seed) {
            panic!(
                "contents of the live allocation at {:#x} ({len} bytes) changed at byte {i}",
                h.as_ptr() as usize
            );
        }
    }

    fn interior(h: &NonNull<u8>, k: usize) -> NonNull<u8> {
        NonNull::new(h.as_ptr().wrapping_add(k)).unwrap_or(*h)
    }

    fn foreign(&mut self, raw: usize) -> NonNull<u8> {
        let p = match raw % 4 {
            // Anywhere in the arena, in a region or not.
            0 | 1 => self.ptr(self.at_offset((raw >> 2) % SPACE)),
            // Memory the heap never managed.
            2 => self.outside.0.wrapping_add((raw >> 2) % self.outside.1),
            // Any address at all.
            _ => core::ptr::without_provenance_mut(raw),
        };
        NonNull::new(p).unwrap_or(NonNull::dangling())
    }
}

/// Where an out-of-band heap's address space starts (its regions are numbers, never memory).
pub const DETACHED_BASE: usize = 1 << 40;

/// A record table that grows up to a fixed number of records, so that `OutOfRecords` is
/// reached.
pub struct CappedTable {
    records: Vec<Record>,
    cap: usize,
}

impl CappedTable {
    /// A table of `start` records that grows to at most `cap`.
    pub fn new(start: usize, cap: usize) -> Self {
        CappedTable {
            records: vec![Record::VACANT; start.min(cap)],
            cap,
        }
    }
}

impl RecordStore for CappedTable {
    fn records(&self) -> &[Record] {
        &self.records
    }
    fn records_mut(&mut self) -> &mut [Record] {
        &mut self.records
    }
    fn grow(&mut self) -> bool {
        let n = self.records.len();
        let add = n.clamp(1, 16).min(self.cap - n);
        self.records.resize(n + add, Record::VACANT);
        add > 0
    }
}

/// A [`DetachedHeap`] over some record store, with a second heap to take foreign blocks
/// from.
pub struct DetachedSubject<S: RecordStore> {
    heap: DetachedHeap<S>,
    capped: bool,
    /// Another heap, over other addresses: its blocks are foreign to `heap`. Made when the
    /// first foreign block is asked for (most runs ask for none).
    other: Option<DetachedHeap<Vec<Record>>>,
}

impl<S: RecordStore> DetachedSubject<S> {
    /// Wraps `heap`; `capped` says whether its table may run out.
    pub fn new(heap: DetachedHeap<S>, capped: bool) -> Self {
        DetachedSubject {
            heap,
            capped,
            other: None,
        }
    }

    /// A fresh heap with one region of `SPACE` bytes, far from this heap's addresses.
    fn other_heap(&self) -> DetachedHeap<Vec<Record>> {
        let mut other = DetachedHeap::growable(self.heap.granule()).unwrap();
        other.add_region(DETACHED_BASE * 2, SPACE).unwrap();
        other
    }

    /// The heap, for checks the interface does not cover.
    pub fn heap(&mut self) -> &mut DetachedHeap<S> {
        &mut self.heap
    }
}

impl<S: RecordStore> Subject for DetachedSubject<S> {
    type H = Block;

    fn geometry(&self) -> Geometry {
        Geometry::detached(self.heap.granule())
    }

    fn resolve(&self, at: Place) -> Option<usize> {
        Some(match at {
            Place::Offset(o) => self.at_offset(o),
            Place::Raw(a) => a,
        })
    }

    fn at_offset(&self, offset: usize) -> usize {
        DETACHED_BASE + offset
    }

    fn can_place(&self, _start: usize, _len: usize) -> bool {
        true
    }

    fn may_run_out_of_records(&self) -> bool {
        self.capped
    }

    fn frees_by_address(&self) -> bool {
        false
    }

    fn addr(h: &Block) -> usize {
        h.addr
    }

    fn alloc(&mut self, size: usize, align: usize) -> Result<Block, Error> {
        let b = self.heap.alloc(size, align)?;
        assert_eq!(b.size, size, "a block must carry the size asked for");
        assert_eq!(
            self.heap
                .region_of(b.addr)
                .map(|(base, len)| b.addr - base < len),
            Some(true),
            "a block must lie in a region"
        );
        Ok(b)
    }

    fn free(&mut self, h: Block, size: usize) -> Result<(), Error> {
        self.heap.free(Block { size, ..h })
    }

    fn realloc(&mut self, h: Block, old: usize, align: usize, new: usize) -> Result<Block, Error> {
        // The out-of-band heap never moves memory: a moving realloc is what a device heap's
        // caller does (in place, else allocate, copy on the device, free).
        let h = Block { size: old, ..h };
        match self.heap.resize_in_place(h, new) {
            Ok(b) => Ok(b),
            Err(Error::OutOfMemory) => {
                let b = self.heap.alloc(new, align)?;
                self.heap.free(h).expect("freeing a validated block");
                Ok(b)
            }
            Err(e) => Err(e),
        }
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

    fn trim(&mut self) -> Vec<(usize, usize)> {
        let mut out = Vec::new();
        self.heap.trim(|b, len| out.push((b, len)));
        out
    }

    fn check(&self) -> Result<(), CheckError> {
        self.heap.check()
    }

    fn stats(&self) -> Stats {
        self.heap.stats()
    }

    fn usable(&self, h: &Block) -> usize {
        self.heap
            .usable_size(h)
            .expect("a live block must be valid")
    }

    fn interior(h: &Block, k: usize) -> Block {
        Block {
            addr: h.addr.wrapping_add(k),
            ..*h
        }
    }

    fn foreign(&mut self, raw: usize) -> Block {
        // A block of the other heap, live or already freed there.
        let size = raw % 5000 + 1;
        if self.other.is_none() {
            self.other = Some(self.other_heap());
        }
        let other = self.other.as_mut().unwrap();
        match other.alloc(size, 1) {
            Ok(b) => {
                if raw & 1 == 0 {
                    other.free(b).unwrap();
                }
                b
            }
            Err(_) => {
                // Full: start the other heap afresh (its old blocks stay foreign here).
                let mut other = self.other_heap();
                let b = other.alloc(size, 1).unwrap();
                self.other = Some(other);
                b
            }
        }
    }
}
