//! Trace replay: runs a [`Trace`] through a tagalloc heap event by event, verifying the heap's
//! invariants and, where the memory can be touched, the contents of every block on the way.
//!
//! One replay loop, [`Replay`], drives either tag placement through the [`ReplayHeap`] trait, so
//! the tests and the `replay` example exercise exactly the same code:
//!
//! - **inline** ([`InlineReplayHeap`]): an [`InlineHeap`] over arenas from the system allocator.
//!   Every block gets a pattern derived from its id written into it when it is allocated, and
//!   the pattern is verified before the block is freed or resized and, after a resize, over the
//!   prefix that must have survived. A heap that hands out overlapping blocks, overwrites a
//!   payload with its tags, or loses data in a moving realloc is caught at the first event where
//!   it matters, not much later as a corrupted tag.
//! - **detached** ([`DetachedReplayHeap`]): a [`DetachedHeap`] over one range of addresses that
//!   is never touched, the way device memory is managed. There are no contents to verify; a
//!   realloc is resized in place when it can be, and otherwise allocated anew and the old block
//!   freed (the owner of device memory would copy between the two on the device).
//!
//! Sizing: each heap starts with memory for the trace's peak live bytes times
//! [`ReplayOptions::size_factor`], plus a per-block allowance for tags and rounding, plus slack.
//! A trace that fragments the heap beyond that still replays: on `OutOfMemory` the heap grows
//! (a new arena for inline, a contiguous extension of the range for detached) and the request is
//! retried. [`ReplayReport::regions_added`] says how often that happened.
//!
//! Zero sizes: traces may ask for 0 bytes (`malloc(0)` returns a unique pointer), but the heap
//! refuses zero-size requests, so a 0 in a trace is replayed as a request for 1 byte.
//!
//! Nothing here panics on trace data: an inconsistent trace, a refused request, a corrupted
//! block or a broken invariant comes back as a [`ReplayError`] naming the event.

use std::alloc::{self, Layout};
use std::collections::HashMap;
use std::fmt;
use std::ptr::NonNull;
use std::time::{Duration, Instant};

use tagalloc::{Block, CheckError, DetachedHeap, Error, InlineHeap, Record, Stats, DEVICE_GRANULE};

use crate::contents;
use crate::trace::{Event, FastHash, Trace, TraceStats};

/// The alignment of a trace allocation without `align=`: what malloc guarantees on x86-64,
/// where the traces were recorded.
pub const DEFAULT_ALIGN: usize = 16;

/// Memory added to every heap beyond the sizing from the trace, so that tiny traces need no
/// special case.
const SLACK: usize = 1 << 20;
/// Growth steps tried for one request before giving up. One step is sized to serve the request,
/// so more than one is only needed if the heap misjudges its own free space.
const MAX_GROWTH_STEPS: usize = 4;
/// Where the detached heap's address range starts: far from 0, so that an address of 0 (a null
/// pointer on a device) can never be handed out, and large enough to be aligned to any granule
/// a device would use.
#[cfg(target_pointer_width = "64")]
const DETACHED_BASE: usize = 1 << 32;
#[cfg(not(target_pointer_width = "64"))]
const DETACHED_BASE: usize = 1 << 24;

/// Where the heap's tags live: in the managed memory, or in a table beside it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Placement {
    /// [`InlineHeap`]: tags inside host memory.
    Inline,
    /// [`DetachedHeap`]: tags in a host-side table, managed memory never touched.
    Detached,
}

impl Placement {
    /// Both placements, in the order reports list them.
    pub const ALL: [Placement; 2] = [Placement::Inline, Placement::Detached];

    /// The placement's name as reports print it.
    pub fn name(self) -> &'static str {
        match self {
            Placement::Inline => "inline",
            Placement::Detached => "detached",
        }
    }
}

impl fmt::Display for Placement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.name())
    }
}

/// How to replay.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplayOptions {
    /// Run the heap's `check()` after every this many events, as well as at the end; 0 checks
    /// only at the end. Checks walk the whole heap, so frequent ones dominate a replay's time;
    /// their time is left out of [`ReplayReport::elapsed`].
    pub check_every: usize,
    /// Write and verify block contents (inline placement only; detached memory is never
    /// touched). The writes are counted in [`ReplayReport::elapsed`].
    pub verify_contents: bool,
    /// Free inline blocks with `InlineHeap::free_checked`, which proves each pointer and size
    /// before freeing. That proof walks the chunks of the block's region, so on a trace with
    /// tens of thousands of live blocks it costs far more than the free itself and swamps the
    /// timing; without it the plain `free` is used, which is sound here because the replay only
    /// ever frees blocks it holds live. Detached frees are always checked, in `O(1)`.
    pub checked_free: bool,
    /// The detached heap's granule, a power of two; device heaps typically use 256 bytes.
    pub detached_granule: usize,
    /// The memory a heap starts with, as a multiple of the trace's peak live bytes (before the
    /// per-block allowance and slack). Smaller values make the replay rely on growth.
    pub size_factor: usize,
}

impl Default for ReplayOptions {
    fn default() -> Self {
        ReplayOptions {
            check_every: 0,
            verify_contents: true,
            checked_free: true,
            detached_granule: DEVICE_GRANULE,
            size_factor: 2,
        }
    }
}

/// What one replay did.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplayReport {
    /// The trace's name.
    pub name: String,
    /// The tag placement replayed through.
    pub placement: Placement,
    /// Trace events replayed.
    pub events: usize,
    /// Allocator calls made for them: one per event, except that a detached realloc that cannot
    /// resize in place makes three (the failed resize, the new allocation, the free), and a call
    /// retried after growth counts twice.
    pub ops: u64,
    /// Time spent replaying the events, heap growth and content writes included, periodic
    /// `check()` calls left out.
    pub elapsed: Duration,
    /// The heap's statistics after the last event (blocks the trace never freed still live).
    pub stats: Stats,
    /// The trace's own peak of live bytes (the sum of the sizes it asked for), to set
    /// [`Stats::peak_in_use`] against: the difference is tags, rounding and alignment.
    pub peak_live_bytes: usize,
    /// Memory added after the start because the heap ran out: arenas for inline (each a region
    /// of its own), extensions of the one address range for detached.
    pub regions_added: usize,
}

impl ReplayReport {
    /// Nanoseconds per allocator call; 0 for an empty trace.
    pub fn ns_per_op(&self) -> f64 {
        if self.ops == 0 {
            0.0
        } else {
            self.elapsed.as_nanos() as f64 / self.ops as f64
        }
    }
}

impl fmt::Display for ReplayReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.stats;
        write!(
            f,
            "{} {}: {} events, {} ops, {:.1} ns/op; peak in use {} B (trace peak live {} B), \
             managed {} B (+{} regions), {} free chunks, largest free {} B, fragmentation {:.3}",
            self.name,
            self.placement,
            self.events,
            self.ops,
            self.ns_per_op(),
            s.peak_in_use,
            self.peak_live_bytes,
            s.managed,
            self.regions_added,
            s.free_chunks,
            s.largest_free,
            s.fragmentation()
        )
    }
}

/// Why a replay stopped: which trace, which placement, which event (where it is about one), and
/// what failed.
///
/// Boxed, so that the `Result`s the replay returns on every path stay one word wide.
#[derive(Clone, Debug)]
pub struct ReplayError(Box<ErrorDetail>);

#[derive(Clone, Debug)]
struct ErrorDetail {
    trace: String,
    placement: Placement,
    event: Option<(usize, Event)>,
    kind: ReplayErrorKind,
}

/// What went wrong in a replay.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum ReplayErrorKind {
    /// The heap refused a request the trace made (`op` is `alloc`, `free` or `realloc`), with a
    /// size already adjusted as replayed (1 for a 0).
    Heap {
        op: &'static str,
        id: u64,
        size: usize,
        error: Error,
    },
    /// A block's contents are not what was written into it.
    Contents {
        id: u64,
        offset: usize,
        expected: u8,
        found: u8,
    },
    /// A block came back at an address that does not meet its alignment.
    Misaligned { id: u64, addr: usize, align: usize },
    /// The heap's invariant checker found a broken invariant.
    Check(CheckError),
    /// The trace frees or resizes an id that is not live (only possible for a [`Trace`] built
    /// by hand: [`Trace::load`] refuses such traces).
    NotLive(u64),
    /// The trace allocates an id that is live (as for `NotLive`).
    IdReused(u64),
    /// The heap could not be created (for example a granule that is not a power of two).
    Setup(Error),
    /// The system allocator had no arena of this many bytes for the inline heap.
    Arena { bytes: usize },
    /// The heap refused new memory at `base`, `len` bytes long.
    Region {
        base: usize,
        len: usize,
        error: Error,
    },
    /// The detached heap's address range cannot grow by this many bytes without wrapping.
    AddressSpace { bytes: usize },
    /// [`Replay::run`] was called a second time; a replay runs its trace once.
    AlreadyRun,
}

impl ReplayError {
    fn new(
        trace: &Trace,
        placement: Placement,
        index: Option<usize>,
        kind: ReplayErrorKind,
    ) -> ReplayError {
        ReplayError(Box::new(ErrorDetail {
            trace: trace.name.clone(),
            placement,
            event: index.and_then(|i| trace.events.get(i).map(|e| (i, *e))),
            kind,
        }))
    }

    /// The name of the trace being replayed.
    pub fn trace_name(&self) -> &str {
        &self.0.trace
    }

    /// The placement being replayed through.
    pub fn placement(&self) -> Placement {
        self.0.placement
    }

    /// The event the error is about: its 0-based index in [`Trace::events`] and the event.
    /// `None` for errors found after the last event or outside the event loop.
    pub fn event(&self) -> Option<(usize, &Event)> {
        self.0.event.as_ref().map(|(i, e)| (*i, e))
    }

    /// What went wrong.
    pub fn kind(&self) -> &ReplayErrorKind {
        &self.0.kind
    }
}

impl fmt::Display for ReplayError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({} placement)", self.0.trace, self.0.placement)?;
        match &self.0.event {
            // Counted from 1, like lines, so that "event 1" is the first one.
            Some((i, event)) => write!(f, ", event {} (`{event}`)", i + 1)?,
            None => write!(f, ", after the events")?,
        }
        write!(f, ": {}", self.0.kind)
    }
}

impl fmt::Display for ReplayErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReplayErrorKind::Heap {
                op,
                id,
                size,
                error,
            } => write!(f, "{op} of {size} bytes for id {id} failed: {error}"),
            ReplayErrorKind::Contents {
                id,
                offset,
                expected,
                found,
            } => write!(
                f,
                "contents of id {id} corrupted at offset {offset}: expected {expected:#04x}, \
                 found {found:#04x}"
            ),
            ReplayErrorKind::Misaligned { id, addr, align } => {
                write!(f, "id {id} at {addr:#x} is not aligned to {align}")
            }
            ReplayErrorKind::Check(e) => write!(f, "check() failed: {e}"),
            ReplayErrorKind::NotLive(id) => write!(f, "id {id} is not live"),
            ReplayErrorKind::IdReused(id) => write!(f, "id {id} is already live"),
            ReplayErrorKind::Setup(e) => write!(f, "could not create the heap: {e}"),
            ReplayErrorKind::Arena { bytes } => {
                write!(f, "the system allocator has no arena of {bytes} bytes")
            }
            ReplayErrorKind::Region { base, len, error } => {
                write!(f, "the heap refused {len} bytes at {base:#x}: {error}")
            }
            ReplayErrorKind::AddressSpace { bytes } => {
                write!(f, "the address range cannot grow by {bytes} bytes")
            }
            ReplayErrorKind::AlreadyRun => write!(f, "the trace was already replayed"),
        }
    }
}

impl std::error::Error for ReplayError {}

/// A heap a [`Replay`] can drive: the allocator calls of a trace, growth when memory runs out,
/// and (where memory can be touched) contents. Implemented for both tag placements, so the
/// replay loop is written once.
///
/// The `unsafe` methods take a block that must be live in this heap; [`Replay`] keeps that
/// promise by holding each live block in exactly one place and dropping it when it is freed.
pub trait ReplayHeap {
    /// A live allocation, as the replay remembers it between events.
    type Block: Copy;
    /// Which placement this is.
    const PLACEMENT: Placement;

    /// Allocates `size` bytes (non-zero) aligned to `align`, without growing.
    fn alloc(&mut self, size: usize, align: usize) -> Result<Self::Block, Error>;

    /// Frees `block`.
    ///
    /// # Safety
    /// `block` must have come from this heap's [`alloc`](ReplayHeap::alloc) or
    /// [`realloc`](ReplayHeap::realloc) and not have been freed or reallocated since.
    unsafe fn free(&mut self, block: Self::Block) -> Result<(), Error>;

    /// Resizes `block` to `new_size` bytes (non-zero), keeping its alignment and its contents
    /// up to the smaller size. On error `block` is unchanged and still live.
    ///
    /// # Safety
    /// As for [`free`](ReplayHeap::free); on success only the returned block is live.
    unsafe fn realloc(&mut self, block: Self::Block, new_size: usize)
        -> Result<Self::Block, Error>;

    /// Adds memory so that a request for `size` bytes aligned to `align` can succeed.
    fn grow(&mut self, size: usize, align: usize) -> Result<(), ReplayErrorKind>;

    /// The size `block` was allocated or resized to.
    fn size(block: &Self::Block) -> usize;

    /// The alignment `block` was allocated with.
    fn align(block: &Self::Block) -> usize;

    /// The address of `block`'s first byte (in the managed address space).
    fn addr(block: &Self::Block) -> usize;

    /// Writes the pattern of `id` over `block` (all of it for a small block, the sampled ranges
    /// of a large one). Does nothing where the memory cannot be touched.
    ///
    /// # Safety
    /// As for [`free`](ReplayHeap::free).
    unsafe fn fill(&mut self, id: u64, block: &Self::Block);

    /// Verifies that the ranges [`fill`](ReplayHeap::fill) writes for a block of `written`
    /// bytes hold `id`'s pattern in `block`, as far as they lie below `upto`. After a realloc,
    /// `written` is the old size and `upto` the smaller of the two. Always `Ok` where the
    /// memory cannot be touched.
    ///
    /// # Safety
    /// As for [`free`](ReplayHeap::free).
    unsafe fn verify(
        &self,
        id: u64,
        block: &Self::Block,
        written: usize,
        upto: usize,
    ) -> Result<(), ReplayErrorKind>;

    /// The heap's invariant checker.
    fn check(&self) -> Result<(), CheckError>;

    /// The heap's statistics.
    fn stats(&self) -> Stats;

    /// Growth steps taken (see [`ReplayReport::regions_added`]).
    fn regions_added(&self) -> usize;

    /// Allocator calls made so far.
    fn calls(&self) -> u64;
}

/// Memory for the inline heap from the system allocator, freed when dropped.
///
/// Invariant: `ptr` was returned by `alloc_zeroed(layout)` and is freed only by `drop`.
struct Arena {
    ptr: NonNull<u8>,
    layout: Layout,
}

impl Arena {
    /// An arena of `len` bytes aligned to `align`.
    ///
    /// The memory is zeroed so that every byte a block can reach is initialised: even a faulty
    /// heap that hands out a block it never copied into yields wrong values when verified, never
    /// a read of uninitialised memory.
    fn new(len: usize, align: usize) -> Result<Arena, ReplayErrorKind> {
        let layout = Layout::from_size_align(len.max(1), align)
            .map_err(|_| ReplayErrorKind::Arena { bytes: len })?;
        // SAFETY: `layout` has a non-zero size.
        let ptr = unsafe { alloc::alloc_zeroed(layout) };
        NonNull::new(ptr)
            .map(|ptr| Arena { ptr, layout })
            .ok_or(ReplayErrorKind::Arena { bytes: len })
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from `alloc_zeroed` with this very layout (type invariant), and this
        // is the only place it is freed.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

/// A live block of an [`InlineReplayHeap`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InlineBlock {
    ptr: NonNull<u8>,
    size: usize,
    align: usize,
}

/// An [`InlineHeap`] over arenas from the system allocator, growing by another arena when it
/// runs out.
pub struct InlineReplayHeap {
    // Declared before `arenas`, so it is dropped first: the heap points into them.
    heap: InlineHeap,
    /// Every arena ever handed to the heap, kept until the heap is gone.
    arenas: Vec<Arena>,
    /// Bytes of arena given to the heap so far.
    reserved: usize,
    checked_free: bool,
    calls: u64,
}

impl InlineReplayHeap {
    /// A heap with the host granule and one arena of (about) `bytes` bytes; `checked_free` as
    /// in [`ReplayOptions::checked_free`].
    pub fn new(bytes: usize, checked_free: bool) -> Result<Self, ReplayErrorKind> {
        let mut heap = InlineReplayHeap {
            heap: InlineHeap::new(),
            arenas: Vec::new(),
            reserved: 0,
            checked_free,
            calls: 0,
        };
        heap.add_arena(bytes)?;
        Ok(heap)
    }

    /// The heap itself, to inspect.
    pub fn heap(&self) -> &InlineHeap {
        &self.heap
    }

    fn add_arena(&mut self, bytes: usize) -> Result<(), ReplayErrorKind> {
        let g = self.heap.granule();
        let len = bytes
            .checked_next_multiple_of(g)
            .ok_or(ReplayErrorKind::Arena { bytes })?;
        let arena = Arena::new(len, g)?;
        let base = arena.ptr.as_ptr();
        // SAFETY: the arena is valid for reads and writes of `len` bytes, aligned to the
        // granule by its layout, and used by nothing but the heap: it is pushed onto `arenas`,
        // which outlives `heap` (field order) and frees nothing before the heap is gone. A new
        // region is never merged with an adjacent one, so separate arenas stay separate.
        unsafe { self.heap.add_region(base, len) }.map_err(|error| ReplayErrorKind::Region {
            base: base.addr(),
            len,
            error,
        })?;
        self.arenas.push(arena);
        self.reserved = self.reserved.saturating_add(len);
        Ok(())
    }
}

impl ReplayHeap for InlineReplayHeap {
    type Block = InlineBlock;
    const PLACEMENT: Placement = Placement::Inline;

    fn alloc(&mut self, size: usize, align: usize) -> Result<InlineBlock, Error> {
        self.calls += 1;
        let ptr = self.heap.alloc(size, align)?;
        Ok(InlineBlock { ptr, size, align })
    }

    unsafe fn free(&mut self, block: InlineBlock) -> Result<(), Error> {
        self.calls += 1;
        if self.checked_free {
            // SAFETY: the block's memory is not used after this (caller contract);
            // `free_checked` proves the pointer and size itself.
            unsafe { self.heap.free_checked(block.ptr, block.size) }
        } else {
            // SAFETY: the block came from this heap's `alloc` or `realloc` and has not been
            // freed since (caller contract), and its memory is not used after this.
            unsafe { self.heap.free(block.ptr, block.size) }
        }
    }

    unsafe fn realloc(
        &mut self,
        block: InlineBlock,
        new_size: usize,
    ) -> Result<InlineBlock, Error> {
        self.calls += 1;
        // SAFETY: the block is live in this heap (caller contract), and `block.size` is exactly
        // the size it was allocated or last resized to, so the `min(old, new)` bytes a moving
        // realloc copies lie inside it. On success the caller forgets the old block and uses
        // only the returned one.
        let ptr = unsafe {
            self.heap
                .realloc(block.ptr, block.size, block.align, new_size)
        }?;
        Ok(InlineBlock {
            ptr,
            size: new_size,
            align: block.align,
        })
    }

    fn grow(&mut self, size: usize, align: usize) -> Result<(), ReplayErrorKind> {
        // Room for the request, its worst-case alignment padding, and the region's own header,
        // fence and the chunk's tag (a few granules).
        let need = size
            .saturating_add(align)
            .saturating_add(8 * self.heap.granule());
        self.add_arena(need.max(self.reserved / 2))
    }

    fn size(block: &InlineBlock) -> usize {
        block.size
    }

    fn align(block: &InlineBlock) -> usize {
        block.align
    }

    fn addr(block: &InlineBlock) -> usize {
        block.ptr.addr().get()
    }

    unsafe fn fill(&mut self, id: u64, block: &InlineBlock) {
        // SAFETY: the block's `size` bytes are memory the heap handed out and has not taken
        // back (caller contract), inside a zeroed arena, and nothing else refers to them.
        unsafe { contents::fill(block.ptr, block.size, id) }
    }

    unsafe fn verify(
        &self,
        id: u64,
        block: &InlineBlock,
        written: usize,
        upto: usize,
    ) -> Result<(), ReplayErrorKind> {
        // SAFETY: as in `fill`; the block is only read, up to its size.
        unsafe { contents::verify(block.ptr, written, upto.min(block.size), id) }.map_err(|m| {
            ReplayErrorKind::Contents {
                id,
                offset: m.offset,
                expected: m.expected,
                found: m.found,
            }
        })
    }

    fn check(&self) -> Result<(), CheckError> {
        self.heap.check()
    }

    fn stats(&self) -> Stats {
        self.heap.stats()
    }

    fn regions_added(&self) -> usize {
        self.arenas.len().saturating_sub(1)
    }

    fn calls(&self) -> u64 {
        self.calls
    }
}

/// A live block of a [`DetachedReplayHeap`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DetachedBlock {
    block: Block,
    align: usize,
}

/// A [`DetachedHeap`] over one range of addresses that nothing backs: the heap never touches
/// them, which is the point of the placement. The range grows at its end when the heap runs
/// out, so it stays one region, as with virtual-memory growth on a device.
pub struct DetachedReplayHeap {
    heap: DetachedHeap<Vec<Record>>,
    /// The first address of the range (its one region).
    base: usize,
    /// One past the last address of the range.
    end: usize,
    /// Bytes of range given to the heap so far.
    reserved: usize,
    growths: usize,
    calls: u64,
}

impl DetachedReplayHeap {
    /// A heap with `granule` bytes per granule over a range of (about) `bytes` bytes.
    pub fn new(granule: usize, bytes: usize) -> Result<Self, ReplayErrorKind> {
        let heap = DetachedHeap::growable(granule).map_err(ReplayErrorKind::Setup)?;
        let base = DETACHED_BASE
            .checked_next_multiple_of(granule)
            .ok_or(ReplayErrorKind::AddressSpace { bytes })?;
        let mut heap = DetachedReplayHeap {
            heap,
            base,
            end: base,
            reserved: 0,
            growths: 0,
            calls: 0,
        };
        heap.extend(bytes)?;
        Ok(heap)
    }

    /// The heap itself, to inspect.
    pub fn heap(&self) -> &DetachedHeap<Vec<Record>> {
        &self.heap
    }

    /// Adds `bytes` (rounded up to granules) at the end of the range: the first call makes the
    /// region, later ones grow it in place, as virtual-memory growth would.
    fn extend(&mut self, bytes: usize) -> Result<(), ReplayErrorKind> {
        let len = bytes
            .checked_next_multiple_of(self.heap.granule())
            .ok_or(ReplayErrorKind::AddressSpace { bytes })?;
        let end = self
            .end
            .checked_add(len)
            .ok_or(ReplayErrorKind::AddressSpace { bytes: len })?;
        let added = if self.end == self.base {
            self.heap.add_region(self.base, len)
        } else {
            self.heap.extend_region(self.base, len)
        };
        added.map_err(|error| ReplayErrorKind::Region {
            base: self.end,
            len,
            error,
        })?;
        self.end = end;
        self.reserved = self.reserved.saturating_add(len);
        Ok(())
    }
}

impl ReplayHeap for DetachedReplayHeap {
    type Block = DetachedBlock;
    const PLACEMENT: Placement = Placement::Detached;

    fn alloc(&mut self, size: usize, align: usize) -> Result<DetachedBlock, Error> {
        self.calls += 1;
        let block = self.heap.alloc(size, align)?;
        Ok(DetachedBlock { block, align })
    }

    unsafe fn free(&mut self, block: DetachedBlock) -> Result<(), Error> {
        self.calls += 1;
        self.heap.free(block.block)
    }

    unsafe fn realloc(
        &mut self,
        block: DetachedBlock,
        new_size: usize,
    ) -> Result<DetachedBlock, Error> {
        self.calls += 1;
        match self.heap.resize_in_place(block.block, new_size) {
            Ok(resized) => Ok(DetachedBlock {
                block: resized,
                align: block.align,
            }),
            Err(Error::OutOfMemory) => {
                // Moving: a new block, then the old one freed (its owner would copy between
                // them on the device in between). If the new one cannot be had, the old one
                // stays live, as the contract asks.
                let moved = self.alloc(new_size, block.align)?;
                // SAFETY: `block` is live in this heap (caller contract).
                unsafe { self.free(block) }?;
                Ok(moved)
            }
            Err(e) => Err(e),
        }
    }

    fn grow(&mut self, size: usize, align: usize) -> Result<(), ReplayErrorKind> {
        // The extension merges with a free chunk at the end of the range, so room for the
        // request and its alignment padding is always enough.
        let need = size
            .saturating_add(align)
            .saturating_add(2 * self.heap.granule());
        self.extend(need.max(self.reserved / 2))?;
        self.growths += 1;
        Ok(())
    }

    fn size(block: &DetachedBlock) -> usize {
        block.block.size
    }

    fn align(block: &DetachedBlock) -> usize {
        block.align
    }

    fn addr(block: &DetachedBlock) -> usize {
        block.block.addr
    }

    unsafe fn fill(&mut self, _id: u64, _block: &DetachedBlock) {}

    unsafe fn verify(
        &self,
        _id: u64,
        _block: &DetachedBlock,
        _written: usize,
        _upto: usize,
    ) -> Result<(), ReplayErrorKind> {
        Ok(())
    }

    fn check(&self) -> Result<(), CheckError> {
        self.heap.check()
    }

    fn stats(&self) -> Stats {
        self.heap.stats()
    }

    fn regions_added(&self) -> usize {
        self.growths
    }

    fn calls(&self) -> u64 {
        self.calls
    }
}

/// The memory to start a heap with for `stats`: the peak live bytes times `factor`, an
/// allowance of two granules per live block for tags and rounding, and [`SLACK`]. Saturates
/// rather than overflowing; an impossible size then fails as an arena or range error.
fn initial_bytes(stats: &TraceStats, granule: usize, factor: usize) -> usize {
    usize::try_from(stats.peak_live_bytes)
        .unwrap_or(usize::MAX)
        .saturating_mul(factor)
        .saturating_add(
            stats
                .peak_live_count
                .saturating_mul(granule.saturating_mul(2)),
        )
        .saturating_add(SLACK)
}

/// A trace being replayed through a heap: the heap, and the live blocks by trace id.
///
/// Invariant: every block in `live` is live in `heap` (allocated or reallocated there and not
/// freed since), and is removed from `live` before it is freed or replaced after a realloc. This
/// is what makes the calls of [`ReplayHeap`]'s `unsafe` methods sound.
pub struct Replay<'t, H: ReplayHeap> {
    trace: &'t Trace,
    stats: TraceStats,
    options: ReplayOptions,
    heap: H,
    live: HashMap<u64, H::Block, FastHash>,
    ran: bool,
}

impl<'t> Replay<'t, InlineReplayHeap> {
    /// Prepares to replay `trace` through an [`InlineHeap`].
    pub fn inline(trace: &'t Trace, options: &ReplayOptions) -> Result<Self, ReplayError> {
        let stats = trace.stats();
        let bytes = initial_bytes(&stats, tagalloc::HOST_GRANULE, options.size_factor);
        // The sizing is only a guess from the trace; if the system cannot supply it, start
        // small, so that the request that really cannot be served is the one named in the error.
        let checked = options.checked_free;
        let heap = InlineReplayHeap::new(bytes, checked)
            .or_else(|_| InlineReplayHeap::new(SLACK, checked))
            .map_err(|kind| ReplayError::new(trace, Placement::Inline, None, kind))?;
        Ok(Replay::with_heap(trace, stats, options, heap))
    }
}

impl<'t> Replay<'t, DetachedReplayHeap> {
    /// Prepares to replay `trace` through a [`DetachedHeap`] with the options' granule.
    pub fn detached(trace: &'t Trace, options: &ReplayOptions) -> Result<Self, ReplayError> {
        let stats = trace.stats();
        let granule = options.detached_granule;
        let bytes = initial_bytes(&stats, granule, options.size_factor);
        // As for the inline heap: a range that cannot be had falls back to a small one.
        let heap = DetachedReplayHeap::new(granule, bytes)
            .or_else(|e| match e {
                ReplayErrorKind::Setup(_) => Err(e),
                _ => DetachedReplayHeap::new(granule, SLACK),
            })
            .map_err(|kind| ReplayError::new(trace, Placement::Detached, None, kind))?;
        Ok(Replay::with_heap(trace, stats, options, heap))
    }
}

impl<'t, H: ReplayHeap> Replay<'t, H> {
    fn with_heap(trace: &'t Trace, stats: TraceStats, options: &ReplayOptions, heap: H) -> Self {
        Replay {
            trace,
            stats,
            options: options.clone(),
            heap,
            live: HashMap::with_capacity_and_hasher(stats.peak_live_count, FastHash::default()),
            ran: false,
        }
    }

    /// Replays every event of the trace, checking the heap every
    /// [`ReplayOptions::check_every`] events and always at the end. Blocks the trace never
    /// frees stay live (see [`Replay::free_live`]). Runs once; a second call is an error.
    pub fn run(&mut self) -> Result<ReplayReport, ReplayError> {
        if self.ran {
            return Err(self.error(None, ReplayErrorKind::AlreadyRun));
        }
        self.ran = true;
        let trace = self.trace;
        let every = self.options.check_every;
        let ops_before = self.heap.calls();
        let mut checking = Duration::ZERO;
        let start = Instant::now();
        for (i, event) in trace.events.iter().enumerate() {
            if let Err(kind) = self.apply(event) {
                return Err(self.error(Some(i), kind));
            }
            if every != 0 && (i + 1) % every == 0 {
                let t = Instant::now();
                let checked = self.heap.check();
                checking += t.elapsed();
                if let Err(e) = checked {
                    return Err(self.error(Some(i), ReplayErrorKind::Check(e)));
                }
            }
        }
        let elapsed = start.elapsed().saturating_sub(checking);
        self.check()?;
        Ok(ReplayReport {
            name: trace.name.clone(),
            placement: H::PLACEMENT,
            events: trace.events.len(),
            ops: self.heap.calls() - ops_before,
            elapsed,
            stats: self.heap.stats(),
            peak_live_bytes: usize::try_from(self.stats.peak_live_bytes).unwrap_or(usize::MAX),
            regions_added: self.heap.regions_added(),
        })
    }

    /// Frees every live block (contents verified first), in id order so that runs repeat
    /// exactly; returns how many there were.
    pub fn free_live(&mut self) -> Result<usize, ReplayError> {
        let mut ids: Vec<u64> = self.live.keys().copied().collect();
        ids.sort_unstable();
        for &id in &ids {
            self.free_id(id).map_err(|kind| self.error(None, kind))?;
        }
        Ok(ids.len())
    }

    /// Allocates the whole of the largest free chunk as one block (kept live under an id the
    /// trace does not use), without growing the heap; returns the size requested. After
    /// [`Replay::free_live`] each region is one free chunk, so calling this once per region
    /// shows that every region can be handed out whole again.
    pub fn alloc_largest_free(&mut self) -> Result<usize, ReplayError> {
        let size = self.heap.stats().largest_request;
        let mut id = u64::MAX;
        while self.live.contains_key(&id) {
            id = id.wrapping_sub(1);
        }
        let block = self.heap.alloc(size, DEFAULT_ALIGN).map_err(|error| {
            self.error(
                None,
                ReplayErrorKind::Heap {
                    op: "alloc",
                    id,
                    size,
                    error,
                },
            )
        })?;
        if self.options.verify_contents {
            // SAFETY: `block` was just allocated from this heap.
            unsafe { self.heap.fill(id, &block) };
        }
        self.live.insert(id, block);
        Ok(size)
    }

    /// Runs the heap's invariant checker.
    pub fn check(&self) -> Result<(), ReplayError> {
        self.heap
            .check()
            .map_err(|e| self.error(None, ReplayErrorKind::Check(e)))
    }

    /// The heap's statistics now.
    pub fn stats(&self) -> Stats {
        self.heap.stats()
    }

    /// Regions the heap manages now.
    pub fn region_count(&self) -> usize {
        self.heap.stats().regions
    }

    /// Blocks live now.
    pub fn live_count(&self) -> usize {
        self.live.len()
    }

    /// The statistics of the trace being replayed.
    pub fn trace_stats(&self) -> &TraceStats {
        &self.stats
    }

    /// The heap and its memory.
    pub fn heap(&self) -> &H {
        &self.heap
    }

    fn error(&self, index: Option<usize>, kind: ReplayErrorKind) -> ReplayError {
        ReplayError::new(self.trace, H::PLACEMENT, index, kind)
    }

    fn apply(&mut self, event: &Event) -> Result<(), ReplayErrorKind> {
        match *event {
            Event::Alloc {
                id, size, align, ..
            } => self.alloc_id(id, size, align.unwrap_or(DEFAULT_ALIGN)),
            Event::Free { id, .. } => self.free_id(id),
            Event::Realloc { id, new_size, .. } => self.realloc_id(id, new_size),
        }
    }

    fn alloc_id(&mut self, id: u64, size: usize, align: usize) -> Result<(), ReplayErrorKind> {
        if self.live.contains_key(&id) {
            return Err(ReplayErrorKind::IdReused(id));
        }
        let size = size.max(1);
        let block = self.with_growth("alloc", id, size, align, |h| h.alloc(size, align))?;
        self.check_aligned(id, &block)?;
        if self.options.verify_contents {
            // SAFETY: `block` was just allocated from this heap.
            unsafe { self.heap.fill(id, &block) };
        }
        self.live.insert(id, block);
        Ok(())
    }

    fn free_id(&mut self, id: u64) -> Result<(), ReplayErrorKind> {
        let block = *self.live.get(&id).ok_or(ReplayErrorKind::NotLive(id))?;
        let size = H::size(&block);
        if self.options.verify_contents {
            // SAFETY: blocks in `live` are live in the heap (type invariant).
            unsafe { self.heap.verify(id, &block, size, size) }?;
        }
        self.live.remove(&id);
        // SAFETY: the block was live (type invariant) and is no longer in `live`, so it is never
        // used again.
        unsafe { self.heap.free(block) }.map_err(|error| ReplayErrorKind::Heap {
            op: "free",
            id,
            size,
            error,
        })
    }

    fn realloc_id(&mut self, id: u64, new_size: usize) -> Result<(), ReplayErrorKind> {
        let old = *self.live.get(&id).ok_or(ReplayErrorKind::NotLive(id))?;
        let old_size = H::size(&old);
        let new_size = new_size.max(1);
        let verify = self.options.verify_contents;
        if verify {
            // SAFETY: blocks in `live` are live in the heap (type invariant).
            unsafe { self.heap.verify(id, &old, old_size, old_size) }?;
        }
        let new = self.with_growth("realloc", id, new_size, H::align(&old), |h| {
            // SAFETY: `old` is live (type invariant); a failed realloc leaves it live, so each
            // retry passes a live block, and after a success it is replaced in `live` below
            // before anything else can use it.
            unsafe { h.realloc(old, new_size) }
        })?;
        self.live.insert(id, new);
        self.check_aligned(id, &new)?;
        if verify {
            // SAFETY: `new` is live: it was just returned by the heap and is in `live`.
            unsafe {
                self.heap
                    .verify(id, &new, old_size, old_size.min(new_size))?;
                self.heap.fill(id, &new);
            }
        }
        Ok(())
    }

    /// Runs `op`, and on `OutOfMemory` grows the heap for a `size`-byte request aligned to
    /// `align` and tries again, a bounded number of times.
    fn with_growth<T>(
        &mut self,
        op_name: &'static str,
        id: u64,
        size: usize,
        align: usize,
        mut op: impl FnMut(&mut H) -> Result<T, Error>,
    ) -> Result<T, ReplayErrorKind> {
        let mut steps = 0;
        loop {
            match op(&mut self.heap) {
                Ok(v) => return Ok(v),
                Err(Error::OutOfMemory) if steps < MAX_GROWTH_STEPS => {
                    self.heap.grow(size, align)?;
                    steps += 1;
                }
                Err(error) => {
                    return Err(ReplayErrorKind::Heap {
                        op: op_name,
                        id,
                        size,
                        error,
                    })
                }
            }
        }
    }

    fn check_aligned(&self, id: u64, block: &H::Block) -> Result<(), ReplayErrorKind> {
        let (addr, align) = (H::addr(block), H::align(block));
        if addr % align != 0 {
            return Err(ReplayErrorKind::Misaligned { id, addr, align });
        }
        Ok(())
    }
}

/// Replays `trace` through `placement` once, with the heap dropped afterwards: what the
/// example and any caller that only wants the report needs.
pub fn replay(
    trace: &Trace,
    placement: Placement,
    options: &ReplayOptions,
) -> Result<ReplayReport, ReplayError> {
    match placement {
        Placement::Inline => Replay::inline(trace, options)?.run(),
        Placement::Detached => Replay::detached(trace, options)?.run(),
    }
}
