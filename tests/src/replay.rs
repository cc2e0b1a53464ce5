//! Trace replay: runs a [`Trace`] through a tagalloc heap event by event, verifying the heap's
//! invariants and, where the memory can be touched, the contents of every block on the way.
//!
//! One replay loop, [`Replay`], drives either tag placement through the adapter every test of
//! the heaps uses (`tagalloc::model::Adapter`: the core's model tests, the fuzz targets and the
//! benchmarks call the heaps through it too) and [`ReplayHeap`], which adds how each placement
//! gets more memory, so the tests and the `replay` example exercise exactly the same code:
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

use tagalloc::model::{Adapter, Counted, DetachedAdapter, InlineAdapter, Memory};
use tagalloc::{CheckError, DetachedHeap, Error, InlineHeap, Record, Stats, DEVICE_GRANULE};

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
    /// size already adjusted as replayed (1 for a 0) and the block's alignment (named in the
    /// message when the trace asked for one, since it may be the cause).
    Heap {
        op: &'static str,
        id: u64,
        size: usize,
        align: usize,
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
                align,
                error,
            } => {
                write!(f, "{op} of {size} bytes")?;
                if *align != DEFAULT_ALIGN {
                    write!(f, " aligned to {align}")?;
                }
                write!(f, " for id {id} failed: {error}")
            }
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

/// A heap a [`Replay`] can drive: one of tagalloc's heaps through the adapter every test of
/// the heaps uses ([`Adapter`] and [`Counted`]: the allocator calls, checks and statistics),
/// and how it gets more memory when it runs out. Implemented for both tag placements, so the
/// replay loop is written once.
pub trait ReplayHeap: Counted + Sized {
    /// Which placement this is.
    const PLACEMENT: Placement;

    /// Granules that a growth step adds beyond a request's size and alignment, for the tags and
    /// rounding the new memory must also hold.
    const GROWTH_GRANULES: usize;

    /// A heap with no memory yet, as `options` ask.
    fn start(options: &ReplayOptions) -> Result<Self, ReplayErrorKind>;

    /// Adds memory for (about) `bytes` bytes; returns how many were added.
    fn add_memory(&mut self, bytes: usize) -> Result<usize, ReplayErrorKind>;
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

/// Every arena the inline heap was given, kept until the heap is gone (the heap is declared
/// before its memory in [`InlineAdapter`], so it is dropped first).
#[derive(Default)]
pub struct Arenas(Vec<Arena>);

// SAFETY: each arena is valid for reads and writes of its length until it is dropped with the
// heap's memory, and is handed to that one heap only.
unsafe impl Memory for Arenas {
    fn ranges(&mut self) -> impl Iterator<Item = (NonNull<u8>, usize)> {
        self.0.iter().map(|a| (a.ptr, a.layout.size()))
    }
}

/// An [`InlineHeap`] with the host granule over arenas from the system allocator, growing by
/// another arena (a region of its own) when it runs out.
pub type InlineReplayHeap = InlineAdapter<Arenas>;

impl ReplayHeap for InlineReplayHeap {
    const PLACEMENT: Placement = Placement::Inline;
    // The region's own header and fence, and the chunk's tag.
    const GROWTH_GRANULES: usize = 8;

    fn start(_: &ReplayOptions) -> Result<Self, ReplayErrorKind> {
        Ok(InlineAdapter::new(InlineHeap::new(), Arenas::default()))
    }

    fn add_memory(&mut self, bytes: usize) -> Result<usize, ReplayErrorKind> {
        let g = self.heap().granule();
        let len = bytes
            .checked_next_multiple_of(g)
            .ok_or(ReplayErrorKind::Arena { bytes })?;
        let arena = Arena::new(len, g)?;
        let base = arena.ptr.addr().get();
        // The arena joins the memory first, so that the heap may be given it; a new region is
        // never merged with an adjacent one, so separate arenas stay separate.
        self.memory_mut().0.push(arena);
        if let Err(error) = self.add_region(base, len) {
            self.memory_mut().0.pop();
            return Err(ReplayErrorKind::Region { base, len, error });
        }
        Ok(len)
    }
}

/// The first address of the detached heap's range for this granule.
fn detached_base(granule: usize) -> Option<usize> {
    DETACHED_BASE.checked_next_multiple_of(granule)
}

/// A [`DetachedHeap`] over one range of addresses that nothing backs: the heap never touches
/// them, which is the point of the placement. The range grows at its end when the heap runs
/// out, so it stays one region, as with virtual-memory growth on a device.
pub type DetachedReplayHeap = DetachedAdapter<Vec<Record>>;

impl ReplayHeap for DetachedReplayHeap {
    const PLACEMENT: Placement = Placement::Detached;
    // The extension merges with a free chunk at the end of the range: rounding only.
    const GROWTH_GRANULES: usize = 2;

    fn start(options: &ReplayOptions) -> Result<Self, ReplayErrorKind> {
        let heap = DetachedHeap::growable(options.detached_granule);
        Ok(DetachedAdapter::new(heap.map_err(ReplayErrorKind::Setup)?))
    }

    /// Adds `bytes` (rounded up to granules) at the end of the range: the first call makes the
    /// region, later ones grow it in place, as virtual-memory growth would.
    fn add_memory(&mut self, bytes: usize) -> Result<usize, ReplayErrorKind> {
        let g = self.heap().granule();
        let len = bytes
            .checked_next_multiple_of(g)
            .ok_or(ReplayErrorKind::AddressSpace { bytes })?;
        let base = detached_base(g).ok_or(ReplayErrorKind::AddressSpace { bytes })?;
        let end = self.heap().region_of(base).map_or(base, |(b, l)| b + l);
        end.checked_add(len)
            .ok_or(ReplayErrorKind::AddressSpace { bytes: len })?;
        let added = if end == base {
            self.add_region(base, len)
        } else {
            self.extend_region(base, len)
        };
        added.map_err(|error| ReplayErrorKind::Region {
            base: end,
            len,
            error,
        })?;
        Ok(len)
    }
}

/// A live block: its handle, and the size and alignment it was last given.
#[derive(Clone, Copy, Debug)]
struct Live<H> {
    h: H,
    size: usize,
    align: usize,
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
/// freed since, with the size and alignment recorded), and is removed from `live` before it is
/// freed or replaced after a realloc. This is what makes the calls of the adapter's `unsafe`
/// methods sound.
pub struct Replay<'t, H: ReplayHeap> {
    trace: &'t Trace,
    stats: TraceStats,
    options: ReplayOptions,
    heap: H,
    live: HashMap<u64, Live<H::H>, FastHash>,
    /// Bytes of memory given to the heap so far.
    reserved: usize,
    /// Growth steps taken since the start (see [`ReplayReport::regions_added`]).
    growths: usize,
    /// Allocator calls made so far (see [`ReplayReport::ops`]).
    calls: u64,
    ran: bool,
}

impl<'t> Replay<'t, InlineReplayHeap> {
    /// Prepares to replay `trace` through an [`InlineHeap`].
    pub fn inline(trace: &'t Trace, options: &ReplayOptions) -> Result<Self, ReplayError> {
        Replay::new(trace, options)
    }
}

impl<'t> Replay<'t, DetachedReplayHeap> {
    /// Prepares to replay `trace` through a [`DetachedHeap`] with the options' granule.
    pub fn detached(trace: &'t Trace, options: &ReplayOptions) -> Result<Self, ReplayError> {
        Replay::new(trace, options)
    }
}

impl<'t, H: ReplayHeap> Replay<'t, H> {
    /// Prepares to replay `trace` through a heap of placement `H`, with memory for the
    /// trace's peak as [`ReplayOptions::size_factor`] asks.
    pub fn new(trace: &'t Trace, options: &ReplayOptions) -> Result<Self, ReplayError> {
        let stats = trace.stats();
        let fail = |kind| ReplayError::new(trace, H::PLACEMENT, None, kind);
        let mut heap = H::start(options).map_err(fail)?;
        let bytes = initial_bytes(&stats, heap.geometry().granule(), options.size_factor);
        // The sizing is only a guess from the trace; if the system cannot supply it, start
        // small, so that the request that really cannot be served is the one named in the error.
        let reserved = heap
            .add_memory(bytes)
            .or_else(|_| heap.add_memory(SLACK))
            .map_err(fail)?;
        Ok(Replay {
            trace,
            stats,
            options: options.clone(),
            heap,
            live: HashMap::with_capacity_and_hasher(stats.peak_live_count, FastHash::default()),
            reserved,
            growths: 0,
            calls: 0,
            ran: false,
        })
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
        let ops_before = self.calls;
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
            ops: self.calls - ops_before,
            elapsed,
            stats: self.heap.stats(),
            peak_live_bytes: usize::try_from(self.stats.peak_live_bytes).unwrap_or(usize::MAX),
            regions_added: self.growths,
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
        self.calls += 1;
        let h = self.heap.alloc(size, DEFAULT_ALIGN).map_err(|error| {
            self.error(
                None,
                ReplayErrorKind::Heap {
                    op: "alloc",
                    id,
                    size,
                    align: DEFAULT_ALIGN,
                    error,
                },
            )
        })?;
        let block = Live {
            h,
            size,
            align: DEFAULT_ALIGN,
        };
        if self.options.verify_contents {
            // SAFETY: `block` was just allocated from this heap.
            unsafe { fill::<H>(id, &block) };
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
        let h = self.with_growth("alloc", id, size, align, |heap, calls| {
            *calls += 1;
            heap.alloc(size, align)
        })?;
        let block = Live { h, size, align };
        check_aligned::<H>(id, &block)?;
        if self.options.verify_contents {
            // SAFETY: `block` was just allocated from this heap.
            unsafe { fill::<H>(id, &block) };
        }
        self.live.insert(id, block);
        Ok(())
    }

    fn free_id(&mut self, id: u64) -> Result<(), ReplayErrorKind> {
        let block = *self.live.get(&id).ok_or(ReplayErrorKind::NotLive(id))?;
        let size = block.size;
        if self.options.verify_contents {
            // SAFETY: blocks in `live` are live in the heap (type invariant).
            unsafe { verify::<H>(id, &block, size, size) }?;
        }
        self.live.remove(&id);
        self.calls += 1;
        // SAFETY: the block was live with this size (type invariant) and is no longer in
        // `live`, so it is never used again. The checked free proves the pointer and size
        // itself.
        let freed = unsafe {
            if self.options.checked_free {
                self.heap.free_checked(block.h, size)
            } else {
                self.heap.free(block.h, size)
            }
        };
        freed.map_err(|error| ReplayErrorKind::Heap {
            op: "free",
            id,
            size,
            align: block.align,
            error,
        })
    }

    fn realloc_id(&mut self, id: u64, new_size: usize) -> Result<(), ReplayErrorKind> {
        let old = *self.live.get(&id).ok_or(ReplayErrorKind::NotLive(id))?;
        let new_size = new_size.max(1);
        let verify_contents = self.options.verify_contents;
        if verify_contents {
            // SAFETY: blocks in `live` are live in the heap (type invariant).
            unsafe { verify::<H>(id, &old, old.size, old.size) }?;
        }
        let h = self.with_growth("realloc", id, new_size, old.align, |heap, calls| {
            // SAFETY: `old` is live with its recorded size (type invariant); a failed realloc
            // leaves it live, so each retry passes a live block, and after a success it is
            // replaced in `live` below before anything else can use it.
            let got = unsafe { heap.realloc(old.h, old.size, old.align, new_size) };
            *calls += realloc_calls::<H>(&old.h, &got);
            got
        })?;
        let new = Live {
            h,
            size: new_size,
            align: old.align,
        };
        self.live.insert(id, new);
        check_aligned::<H>(id, &new)?;
        if verify_contents {
            // SAFETY: `new` is live: it was just returned by the heap and is in `live`.
            unsafe {
                verify::<H>(id, &new, old.size, old.size.min(new_size))?;
                fill::<H>(id, &new);
            }
        }
        Ok(())
    }

    /// Runs `op` (which counts the allocator calls it makes in its second argument), and on
    /// `OutOfMemory` grows the heap for a `size`-byte request aligned to `align` and tries
    /// again, a bounded number of times.
    fn with_growth<T>(
        &mut self,
        op_name: &'static str,
        id: u64,
        size: usize,
        align: usize,
        mut op: impl FnMut(&mut H, &mut u64) -> Result<T, Error>,
    ) -> Result<T, ReplayErrorKind> {
        let mut steps = 0;
        loop {
            match op(&mut self.heap, &mut self.calls) {
                Ok(v) => return Ok(v),
                Err(Error::OutOfMemory) if steps < MAX_GROWTH_STEPS => {
                    self.grow(size, align)?;
                    steps += 1;
                }
                Err(error) => {
                    return Err(ReplayErrorKind::Heap {
                        op: op_name,
                        id,
                        size,
                        align,
                        error,
                    })
                }
            }
        }
    }

    /// Adds memory so that a request for `size` bytes aligned to `align` can succeed: room for
    /// it, its worst-case alignment padding and the placement's tags, or half of what the heap
    /// has already, whichever is more.
    fn grow(&mut self, size: usize, align: usize) -> Result<(), ReplayErrorKind> {
        let granule = self.heap.geometry().granule();
        let need = size
            .saturating_add(align)
            .saturating_add(H::GROWTH_GRANULES * granule);
        let added = self.heap.add_memory(need.max(self.reserved / 2))?;
        self.reserved = self.reserved.saturating_add(added);
        self.growths += 1;
        Ok(())
    }
}

/// Allocator calls a realloc made: one, except that a detached block that cannot be resized in
/// place is moved by a new allocation and a free of the old one (three calls, or two when the
/// new allocation ran out of memory).
fn realloc_calls<H: Adapter>(old: &H::H, got: &Result<H::H, Error>) -> u64 {
    if H::INLINE {
        return 1;
    }
    match got {
        // Moved: the old block was still live when the new one was allocated.
        Ok(new) if H::addr(new) != H::addr(old) => 3,
        Err(Error::OutOfMemory) => 2,
        _ => 1,
    }
}

fn check_aligned<H: Adapter>(id: u64, block: &Live<H::H>) -> Result<(), ReplayErrorKind> {
    let (addr, align) = (H::addr(&block.h), block.align);
    if addr % align != 0 {
        return Err(ReplayErrorKind::Misaligned { id, addr, align });
    }
    Ok(())
}

/// Writes the pattern of `id` over `block` (all of it for a small block, the sampled ranges of
/// a large one). Does nothing where the memory cannot be touched (detached).
///
/// # Safety
/// `block` is live in the heap with its recorded size, and nothing else uses its bytes.
unsafe fn fill<H: Adapter>(id: u64, block: &Live<H::H>) {
    if let Some(p) = H::bytes(&block.h) {
        // SAFETY: the block's `size` bytes are memory the heap handed out and has not taken
        // back (caller contract), inside a zeroed arena, and nothing else refers to them.
        unsafe { contents::fill(p, block.size, id) }
    }
}

/// Verifies that the ranges [`fill`] writes for a block of `written` bytes hold `id`'s pattern
/// in `block`, as far as they lie below `upto`. After a realloc, `written` is the old size and
/// `upto` the smaller of the two. Always `Ok` where the memory cannot be touched.
///
/// # Safety
/// As for [`fill`].
unsafe fn verify<H: Adapter>(
    id: u64,
    block: &Live<H::H>,
    written: usize,
    upto: usize,
) -> Result<(), ReplayErrorKind> {
    let Some(p) = H::bytes(&block.h) else {
        return Ok(());
    };
    // SAFETY: as in `fill`; the block is only read, up to its size.
    unsafe { contents::verify(p, written, upto.min(block.size), id) }.map_err(|m| {
        ReplayErrorKind::Contents {
            id,
            offset: m.offset,
            expected: m.expected,
            found: m.found,
        }
    })
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
