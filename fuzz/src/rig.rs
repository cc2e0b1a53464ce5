//! The heap under test and what surrounds it. The heap itself is driven through the core's
//! adapter ([`tagalloc::model::Adapter`], the one the core's tests, the trace replay and the
//! benchmarks use); a [`Rig`] adds what only fuzzing needs: where regions may go, handles that
//! are not the heap's (interior, foreign, of another heap), and the heap put behind a lock for
//! a while, to queue frees on it.

use std::ptr::NonNull;

use tagalloc::model::{Adapter, Counted, DetachedAdapter, InlineAdapter};
use tagalloc::{
    AnyGranule, Block, CheckError, DetachedHeap, Error, GlobalHeap, Granule, HostGranule,
    InlineHeap, Record, RecordStore, SharedDetachedHeap, SpinLock, Stats,
};

use crate::arena::Lease;
use crate::ops::{Place, SPACE};

/// What names a block of rig `R`'s heap.
pub type H<R> = <<R as Rig>::S as Adapter>::H;

/// How many frees the ring of a shared heap holds here: few, so that a batch of queued frees
/// fills it.
pub const RING: usize = 8;

/// A heap under test with its surroundings.
pub trait Rig {
    /// The heap, through the core's adapter.
    type S: Counted;
    /// The heap behind a lock, as [`Rig::shared`] lends it.
    type Shared: SharedHeap<H = H<Self>>;

    /// The heap.
    fn subject(&self) -> &Self::S;
    /// The heap.
    fn subject_mut(&mut self) -> &mut Self::S;
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
    /// Notes that the heap was given `start..end` (inline: to zero it again after the run).
    fn lent(&mut self, _start: usize, _end: usize) {}
    /// Checks what the driver cannot about a block just handed out for `size` bytes.
    fn adopted(&self, _h: &H<Self>, _size: usize) {}
    /// `h` moved `k` bytes into its allocation: an interior pointer, or a block whose address
    /// was changed.
    fn interior(h: &H<Self>, k: usize) -> H<Self>;
    /// `h` claimed to be a block of `size` bytes: the same pointer (the size goes with it to
    /// the heap), or a block whose size was changed.
    fn resized(h: &H<Self>, size: usize) -> H<Self>;
    /// A handle this heap never gave out, made from `raw`.
    fn foreign(&mut self, raw: usize) -> H<Self>;
    /// Puts the heap behind a lock (a [`GlobalHeap`], a [`SharedDetachedHeap`]), runs `f` on
    /// the shared heap, and takes the heap back with every queued free done.
    fn shared<T>(&mut self, f: impl FnOnce(&Self::Shared) -> T) -> T;
}

/// A heap behind a lock, as the queued-free step drives it.
pub trait SharedHeap {
    /// What names a block.
    type H;
    /// `with_heap`: runs `f` with the lock held, given the heap's statistics and `check()` as
    /// they are then (queued frees are done when the lock is next taken).
    fn with_heap<T>(&self, f: impl FnOnce(Stats, Result<(), CheckError>) -> T) -> Result<T, Error>;
    /// A free of `h`, a block of `size` bytes (see [`Adapter`] on sizes): done at once if the
    /// lock is free, queued if it is held (refused as re-entrant if the ring is full).
    fn free(&self, h: Self::H, size: usize) -> Result<(), Error>;
    /// An allocation.
    fn alloc(&self, size: usize, align: usize) -> Result<Self::H, Error>;
    /// A resize of `h`, a block of `old` bytes (detached: in place, under the lock).
    fn realloc(&self, h: Self::H, old: usize, align: usize, new: usize) -> Result<Self::H, Error>;
    /// `stats()`.
    fn stats(&self) -> Result<Stats, Error>;
    /// How many frees were queued.
    fn queued_frees(&self) -> usize;
}

/// The granules an inline rig can run: an empty heap of either kind, to stand in for the heap
/// under test while that is lent to a [`GlobalHeap`].
pub trait RigGranule: Granule + Sized {
    /// An empty heap of `granule` bytes.
    fn empty(granule: usize) -> InlineHeap<Self>;
}

impl RigGranule for HostGranule {
    fn empty(_granule: usize) -> InlineHeap<Self> {
        InlineHeap::new()
    }
}

impl RigGranule for AnyGranule {
    fn empty(granule: usize) -> InlineHeap<Self> {
        InlineHeap::with_granule(granule).expect("the heap under test has this granule")
    }
}

/// An [`InlineHeap`] over regions carved from one arena of [`SPACE`] zeroed bytes (this
/// thread's, lent for the run: see [`crate::arena`]), with its granule a constant
/// ([`HostGranule`]) or read at run time ([`AnyGranule`]).
pub struct InlineRig<G: RigGranule> {
    /// The heap over the arena, which it zeroes back when dropped (after the heap).
    subject: InlineAdapter<Lease, G>,
    /// The arena's first byte (page-aligned).
    base: *mut u8,
    /// Memory no region ever covers, for foreign pointers, and its length in bytes.
    outside: (*mut u8, usize),
}

impl<G: RigGranule> InlineRig<G> {
    /// `heap` over this thread's arena, all zeros.
    pub fn new(heap: InlineHeap<G>) -> Self {
        let mut arena = Lease::take();
        let base = arena.base();
        let outside = arena.outside();
        InlineRig {
            subject: InlineAdapter::new(heap, arena),
            base,
            outside,
        }
    }
}

impl<G: RigGranule> Rig for InlineRig<G> {
    type S = InlineAdapter<Lease, G>;
    type Shared = GlobalHeap<SpinLock, RING, G>;

    fn subject(&self) -> &Self::S {
        &self.subject
    }

    fn subject_mut(&mut self) -> &mut Self::S {
        &mut self.subject
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

    fn lent(&mut self, start: usize, end: usize) {
        self.subject.memory_mut().lent(start, end);
    }

    fn interior(h: &NonNull<u8>, k: usize) -> NonNull<u8> {
        NonNull::new(h.as_ptr().wrapping_add(k)).unwrap_or(*h)
    }

    fn resized(h: &NonNull<u8>, _size: usize) -> NonNull<u8> {
        *h
    }

    fn foreign(&mut self, raw: usize) -> NonNull<u8> {
        let p = match raw % 4 {
            // Anywhere in the arena, in a region or not.
            0 | 1 => self.base.wrapping_add((raw >> 2) % SPACE),
            // Memory the heap never managed.
            2 => self.outside.0.wrapping_add((raw >> 2) % self.outside.1),
            // Any address at all.
            _ => std::ptr::without_provenance_mut(raw),
        };
        NonNull::new(p).unwrap_or(NonNull::dangling())
    }

    fn shared<T>(&mut self, f: impl FnOnce(&Self::Shared) -> T) -> T {
        let heap = self.subject.heap_mut();
        let stand_in = G::empty(heap.granule());
        let shared = GlobalHeap::<SpinLock, RING, G>::from_heap(std::mem::replace(heap, stand_in));
        let out = f(&shared);
        let heap = self.subject.heap_mut();
        let swap = |h: &mut InlineHeap<G>| std::mem::swap(h, heap);
        shared.with_heap(swap).expect("the lock is free again");
        out
    }
}

impl<G: Granule> SharedHeap for GlobalHeap<SpinLock, RING, G> {
    type H = NonNull<u8>;

    fn with_heap<T>(&self, f: impl FnOnce(Stats, Result<(), CheckError>) -> T) -> Result<T, Error> {
        GlobalHeap::with_heap(self, |h| f(h.stats(), h.check()))
    }

    fn free(&self, h: NonNull<u8>, size: usize) -> Result<(), Error> {
        // SAFETY: with the `checked` feature, which this crate enables, a free is validated
        // before anything is written (queued or not); the driver never uses a block's memory
        // after a free of it that is not refused.
        unsafe { self.try_free(h, size) }
    }

    fn alloc(&self, size: usize, align: usize) -> Result<NonNull<u8>, Error> {
        self.try_alloc(size, align)
    }

    fn realloc(
        &self,
        h: NonNull<u8>,
        old: usize,
        align: usize,
        new: usize,
    ) -> Result<NonNull<u8>, Error> {
        // SAFETY: as in `free`; the driver uses only the returned pointer after a success.
        unsafe { self.try_realloc(h, old, align, new) }
    }

    fn stats(&self) -> Result<Stats, Error> {
        GlobalHeap::stats(self)
    }

    fn queued_frees(&self) -> usize {
        GlobalHeap::queued_frees(self)
    }
}

/// Where a detached heap's address space starts (its regions are numbers, never memory).
pub const DETACHED_BASE: usize = 1 << 40;

/// A record store the detached rig can use: growable, or capped so that `OutOfRecords` comes
/// up.
pub trait Table: RecordStore {
    /// Whether the table may run out of records.
    const CAPPED: bool;
    /// A table with no records, for a heap that holds nothing.
    fn empty() -> Self;
}

impl Table for Vec<Record> {
    const CAPPED: bool = false;
    fn empty() -> Self {
        Vec::new()
    }
}

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

impl Table for CappedTable {
    const CAPPED: bool = true;
    fn empty() -> Self {
        CappedTable::new(0, 0)
    }
}

/// A [`DetachedHeap`] over plain numbers, with other heaps to take foreign blocks from.
pub struct DetachedRig<T: Table> {
    subject: DetachedAdapter<T>,
    /// Another heap over other addresses, and one over the same addresses as this heap's
    /// first region: their blocks are foreign here. Made when the first foreign block is asked
    /// for (most runs ask for none).
    others: [Option<DetachedHeap<Vec<Record>>>; 2],
    /// An empty heap to stand in for this one while it is shared (made on first use).
    spare: Option<DetachedHeap<T>>,
}

impl<T: Table> DetachedRig<T> {
    /// `heap`, with nothing else made yet.
    pub fn new(heap: DetachedHeap<T>) -> Self {
        DetachedRig {
            subject: DetachedAdapter::new(heap),
            others: [None, None],
            spare: None,
        }
    }
}

/// A fresh heap with this granule and one region of [`SPACE`] bytes: far from the rig's
/// addresses (`twin` false), or at the very offsets its first region has (`twin` true).
fn other_heap(granule: usize, twin: bool) -> DetachedHeap<Vec<Record>> {
    let mut other = DetachedHeap::growable(granule).unwrap();
    let base = if twin {
        DETACHED_BASE
    } else {
        DETACHED_BASE * 2
    };
    other.add_region(base, SPACE).unwrap();
    other
}

impl<T: Table> Rig for DetachedRig<T> {
    type S = DetachedAdapter<T>;
    type Shared = SharedDetachedHeap<T, SpinLock, RING>;

    fn subject(&self) -> &Self::S {
        &self.subject
    }

    fn subject_mut(&mut self) -> &mut Self::S {
        &mut self.subject
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
        T::CAPPED
    }

    fn adopted(&self, b: &Block, size: usize) {
        assert_eq!(b.size, size, "a block must carry the size asked for");
        assert_eq!(
            self.subject
                .heap()
                .region_of(b.addr)
                .map(|(base, len)| b.addr - base < len),
            Some(true),
            "a block must lie in a region"
        );
    }

    fn interior(h: &Block, k: usize) -> Block {
        Block {
            addr: h.addr.wrapping_add(k),
            ..*h
        }
    }

    fn resized(h: &Block, size: usize) -> Block {
        Block { size, ..*h }
    }

    fn foreign(&mut self, raw: usize) -> Block {
        // A block of another heap, live or already freed there: over other addresses, or over
        // the same ones (equal addresses, sizes, even record numbers: only the heap differs).
        let twin = raw & 2 != 0;
        let size = raw % 5000 + 1;
        let g = self.subject.heap().granule();
        let slot = &mut self.others[usize::from(twin)];
        let other = slot.get_or_insert_with(|| other_heap(g, twin));
        let block = match other.alloc(size, 1) {
            Ok(b) => b,
            Err(_) => {
                // Full: start that heap afresh (its old blocks stay foreign here).
                let fresh = slot.insert(other_heap(g, twin));
                return fresh.alloc(size, 1).unwrap();
            }
        };
        if raw & 1 == 0 {
            other.free(block).unwrap();
        }
        block
    }

    fn shared<R>(&mut self, f: impl FnOnce(&Self::Shared) -> R) -> R {
        let g = self.subject.heap().granule();
        let spare = self
            .spare
            .take()
            .unwrap_or_else(|| DetachedHeap::new(T::empty(), g).unwrap());
        let shared = SharedDetachedHeap::<T, SpinLock, RING>::new(spare);
        let heap = self.subject.heap_mut();
        shared
            .with_heap(|h| std::mem::swap(h, heap))
            .expect("a new heap's lock is free");
        let out = f(&shared);
        let heap = self.subject.heap_mut();
        shared
            .with_heap(|h| std::mem::swap(h, heap))
            .expect("the lock is free again");
        self.spare = Some(shared.into_inner());
        out
    }
}

impl<T: Table> SharedHeap for SharedDetachedHeap<T, SpinLock, RING> {
    type H = Block;

    fn with_heap<R>(&self, f: impl FnOnce(Stats, Result<(), CheckError>) -> R) -> Result<R, Error> {
        SharedDetachedHeap::with_heap(self, |h| f(h.stats(), h.check()))
    }

    fn free(&self, h: Block, _size: usize) -> Result<(), Error> {
        SharedDetachedHeap::free(self, h)
    }

    fn alloc(&self, size: usize, align: usize) -> Result<Block, Error> {
        SharedDetachedHeap::alloc(self, size, align)
    }

    fn realloc(&self, h: Block, _old: usize, _align: usize, new: usize) -> Result<Block, Error> {
        SharedDetachedHeap::with_heap(self, |heap| heap.resize_in_place(h, new))?
    }

    fn stats(&self) -> Result<Stats, Error> {
        SharedDetachedHeap::stats(self)
    }

    fn queued_frees(&self) -> usize {
        SharedDetachedHeap::queued_frees(self)
    }
}
