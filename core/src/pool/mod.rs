//! A pool: a heap, a region source and a policy (docs/design.md, "Pools and policies").
//! The pool grows its heap
//! from the source on a miss, within a limit, lets large requests bypass its shared regions,
//! gives wholly free regions back on [`Pool::trim`] (and, where the source can, free tails and
//! the pages of large free chunks), trims and retries once when the source or the limit runs
//! out, calls [`Hooks`] once per range obtained and given back, and keeps the figures an
//! out-of-memory report needs. One pool serves both tag placements: an [`crate::InlineHeap`]
//! over host memory, a [`crate::DetachedHeap`] over device memory.
//!
//! Every check happens before anything is written: a refused call leaves the pool as it was.

pub(crate) mod heap;
pub(crate) mod hooks;
pub(crate) mod policy;
pub(crate) mod realloc;
pub(crate) mod scope;
pub(crate) mod source;

use core::fmt;

use crate::algo::stats::Stats;
use crate::detached::heap::{Block, DetachedHeap};
use crate::detached::records::RecordStore;
use crate::error::{Error, PolicyError};
use crate::pool::heap::PoolHeap;
use crate::pool::hooks::{Hooks, NoHooks};
use crate::pool::policy::{Growth, Policy, Reserve};
use crate::pool::scope::Scope;
use crate::pool::source::RegionSource;

/// How many bypass regions a pool remembers at once; past that, large requests are served like
/// any other (the pool stays correct, it just keeps their regions until trimmed).
const BYPASS_SLOTS: usize = 32;

/// A refused pool request, with the figures an out-of-memory report needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolError {
    /// Why: `OutOfMemory` (the source has nothing more), `LimitExceeded` (the policy's limit
    /// stands in the way), or the request's own error (`ZeroSize`, `BadAlign`, ...).
    pub error: Error,
    /// The bytes asked for.
    pub requested: usize,
    /// The bytes the pool held from its source when it gave up.
    pub reserved: usize,
    /// The bytes in chunks handed out at that moment.
    pub in_use: usize,
    /// The policy's limit, if any.
    pub limit: Option<usize>,
}

impl fmt::Display for PoolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} bytes requested; {} bytes reserved",
            self.error, self.requested, self.reserved
        )?;
        if let Some(limit) = self.limit {
            write!(f, " of a {limit}-byte limit")?;
        }
        write!(f, ", {} bytes in use", self.in_use)
    }
}

impl core::error::Error for PoolError {}

impl From<PoolError> for Error {
    fn from(e: PoolError) -> Error {
        e.error
    }
}

impl PoolError {
    /// Whether more memory (a free elsewhere, a trim, a wait) could let the request succeed.
    pub fn is_exhaustion(&self) -> bool {
        matches!(self.error, Error::OutOfMemory | Error::LimitExceeded)
    }
}

/// A pool's statistics: its heap's, and what it holds from its source.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// The heap's own statistics.
    pub heap: Stats,
    /// Bytes held from the source now.
    pub reserved: usize,
    /// Bytes of regions given back that the source keeps for reuse
    /// ([`RegionSource::cached`]): not the pool's (not in `reserved`, not under its limit), but
    /// still held from the system, until reused, aged out or trimmed.
    pub cached: usize,
    /// The most bytes held at once.
    pub peak_reserved: usize,
    /// Regions obtained from the source.
    pub regions_obtained: u64,
    /// Regions given back whole.
    pub regions_given_back: u64,
    /// Times a region grew in place.
    pub grown: u64,
    /// Times a region's free end was given back.
    pub shrunk: u64,
    /// Requests served from a region of their own.
    pub bypassed: u64,
    /// Times a failed request trimmed and tried again.
    pub retries: u64,
    /// Calls made to the pool's hooks.
    pub hook_calls: u64,
    /// Bytes of pages released inside regions that stayed.
    pub released: u64,
    /// What per-thread caches in front of the pool hold and did (see [`crate::ThreadCache`]):
    /// their blocks count as in use in `heap` too.
    pub cache: CacheStats,
}

/// Figures of the caches, kept by the pool (see [`crate::PoolStats::cache`]): what the caches
/// held and did as of each cache's last exchange with the pool (a refill, a spill, a flush).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Blocks sitting in caches (counted as in use by the heap's statistics too).
    pub blocks: usize,
    /// Bytes of the chunks sitting in caches.
    pub bytes: usize,
    /// Allocations served by a cache without the lock.
    pub hits: u64,
    /// Allocations that found their cache's class empty and refilled it, under the lock or
    /// from a batch another cache left in the pool's transfer.
    pub misses: u64,
    /// Frees that found their cache's class full and moved a batch to the pool.
    pub spills: u64,
    /// Caches given back whole (thread exit, trim, fork).
    pub flushes: u64,
}

/// What one [`Pool::trim`] gave back.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Trimmed {
    /// Regions given back whole.
    pub regions: usize,
    /// Bytes of those regions and of the free ends given back.
    pub bytes: usize,
    /// Bytes of pages released inside regions that stayed.
    pub released: usize,
    /// Bytes the source kept for reuse and returned to the system ([`RegionSource::purge`]).
    pub purged: usize,
}

impl Trimmed {
    /// Whether anything went back to the source (a region, or a region's free end) or from
    /// the source to the system (what it kept for reuse): what a request that ran out may try
    /// again after.
    pub fn gave_back(&self) -> bool {
        self.regions > 0 || self.bytes > 0 || self.purged > 0
    }
}

/// A heap `H` growing from a source `S` under a [`Policy`], with hooks `K`.
///
/// Invariants: `reserved` is the total length of the regions obtained and not given back (each
/// as grown and shrunk); every region of the heap came from `source`; each `bypass` slot names
/// a region obtained for one request larger than the bypass threshold, until that request is
/// freed.
///
/// # Examples
///
/// A detached pool over an address range that grows by 1 MiB regions up to a 4 MiB limit:
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use tagalloc::{DetachedHeap, Error, Growth, Policy, Pool, Record, RegionSource};
///
/// /// Hands out consecutive ranges of an address space no one touches.
/// struct Addresses { next: usize }
///
/// // SAFETY: the ranges are never touched (detached tags), never handed out twice.
/// unsafe impl RegionSource for Addresses {
///     type Base = usize;
///     fn addr(b: usize) -> usize { b }
///     fn granularity(&self) -> usize { 4096 }
///     fn obtain(&mut self, min: usize) -> Result<(usize, usize), Error> {
///         let base = self.next;
///         self.next += min;
///         Ok((base, min))
///     }
///     unsafe fn give_back(&mut self, _base: usize, _len: usize) {}
/// }
///
/// let policy = Policy::new().growth(Growth::Fixed(1 << 20)).limit(4 << 20);
/// let mut table = [Record::VACANT; 64];
/// let heap = DetachedHeap::new(&mut table[..], 256)?;
/// let mut pool = Pool::new(heap, Addresses { next: 1 << 40 }, policy);
/// let a = pool.alloc(3 << 20, 256)?; // one 3 MiB region
/// let b = pool.alloc(100, 256)?; // a second region, of 1 MiB
/// assert_eq!(pool.stats().reserved, 4 << 20);
/// let e = pool.alloc(1 << 20, 256).unwrap_err();
/// assert_eq!((e.error, e.reserved, e.limit), (Error::LimitExceeded, 4 << 20, Some(4 << 20)));
/// // SAFETY: detached blocks are checked; each is freed once.
/// unsafe { pool.free(a, a.size)? };
/// assert_eq!(pool.trim().regions, 1); // the 3 MiB region goes back
/// # let _ = b;
/// # Ok(())
/// # }
/// ```
pub struct Pool<H: PoolHeap, S: RegionSource<Base = H::Base>, K: Hooks = NoHooks> {
    heap: H,
    source: S,
    hooks: K,
    policy: Policy,
    /// Whether the policy's up-front reservation has been tried.
    reserved_up_front: bool,
    reserved: usize,
    /// The size of the next region (the doubling state).
    increment: usize,
    /// The address of the region obtained last, which growth in place extends. An address,
    /// not the region's `Base`: a base may be a pointer, which would keep an inline pool from
    /// being `Send` (and so a shared one from being `Sync`, as a `#[global_allocator]` must be).
    top: Option<usize>,
    /// `policy.bypass_above`, or `usize::MAX` without a bypass: one comparison on the hot
    /// paths.
    bypass_above: usize,
    /// `policy.trim_above`, or `usize::MAX` without it, likewise.
    trim_above: usize,
    bypass: [Option<usize>; BYPASS_SLOTS],
    /// Whether nothing obtained goes back to the source for now (see [`Pool::hold_regions`]).
    hold: bool,
    counts: PoolStats,
}

impl<H: PoolHeap, S: RegionSource<Base = H::Base>> Pool<H, S> {
    /// A pool over `heap` (normally empty), growing from `source` under `policy`. Nothing is
    /// obtained until the first allocation (or [`Pool::reserve_now`]).
    ///
    /// # Time Complexity
    /// `O(1)`.
    pub const fn new(heap: H, source: S, policy: Policy) -> Self {
        Pool::with_hooks(heap, source, policy, NoHooks)
    }
}

impl<H: PoolHeap, S: RegionSource<Base = H::Base>, K: Hooks> Pool<H, S, K> {
    /// [`Pool::new`] with hooks called on every range obtained and given back.
    ///
    /// # Time Complexity
    /// `O(1)`.
    pub const fn with_hooks(heap: H, source: S, policy: Policy, hooks: K) -> Self {
        let increment = match policy.growth {
            Growth::Fixed(bytes) => bytes,
            Growth::Doubling { initial, .. } => initial,
        };
        Pool {
            heap,
            source,
            hooks,
            policy,
            reserved_up_front: false,
            reserved: 0,
            increment,
            top: None,
            bypass_above: match policy.bypass_above {
                Some(t) => t,
                None => usize::MAX,
            },
            trim_above: match policy.trim_above {
                Some(t) => t,
                None => usize::MAX,
            },
            bypass: [None; BYPASS_SLOTS],
            hold: false,
            counts: PoolStats {
                heap: Stats {
                    in_use: 0,
                    peak_in_use: 0,
                    managed: 0,
                    free: 0,
                    free_chunks: 0,
                    live: 0,
                    largest_free: 0,
                    largest_request: 0,
                    regions: 0,
                    allocs: 0,
                    frees: 0,
                    reallocs_in_place: 0,
                    refused_frees: 0,
                },
                reserved: 0,
                cached: 0,
                peak_reserved: 0,
                regions_obtained: 0,
                regions_given_back: 0,
                grown: 0,
                shrunk: 0,
                bypassed: 0,
                retries: 0,
                hook_calls: 0,
                released: 0,
                cache: CacheStats {
                    blocks: 0,
                    bytes: 0,
                    hits: 0,
                    misses: 0,
                    spills: 0,
                    flushes: 0,
                },
            },
        }
    }

    /// The heap, to read (its regions, chunks, `check()`).
    pub fn heap(&self) -> &H {
        &self.heap
    }

    /// Whether a request of `size` bytes bypasses the shared regions.
    #[inline]
    pub(crate) fn bypasses(&self, size: usize) -> bool {
        size > self.bypass_above
    }

    /// The threshold above which a request has a region of its own (`usize::MAX` for none).
    pub(crate) fn bypass_above(&self) -> usize {
        self.bypass_above
    }

    /// The heap and the hooks together (a block a cache gives back is proven by the hooks
    /// and freed into the heap).
    pub(crate) fn heap_and_hooks(&mut self) -> (&mut H, &K) {
        (&mut self.heap, &self.hooks)
    }

    /// The caches' figures, to update at an exchange.
    pub(crate) fn cache_stats_mut(&mut self) -> &mut CacheStats {
        &mut self.counts.cache
    }

    /// The heap, to change (realloc; never to add or remove regions behind the pool's back).
    pub(crate) fn heap_mut(&mut self) -> &mut H {
        &mut self.heap
    }

    /// The source, to read.
    pub fn source(&self) -> &S {
        &self.source
    }

    /// The hooks, to read.
    pub fn hooks(&self) -> &K {
        &self.hooks
    }

    /// The hooks, to change what they keep (a C library's checked mode starting its records of
    /// the blocks handed out); the pool's ranges are unchanged.
    pub fn hooks_mut(&mut self) -> &mut K {
        &mut self.hooks
    }

    /// The policy.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// Allocates `size` bytes aligned to `align`: from the heap if a free chunk fits, else after
    /// growing it (see the module docs). A request above the bypass threshold gets a region of
    /// its own.
    ///
    /// # Time Complexity
    /// As the heap's `alloc` when a chunk fits; a miss adds the source's calls and
    /// `O(regions)` to add or grow a region.
    #[inline]
    pub fn alloc(&mut self, size: usize, align: usize) -> Result<H::Block, PoolError> {
        if size > self.bypass_above {
            return self.alloc_bypass(size, align);
        }
        match self.heap.alloc(size, align) {
            Ok(b) => Ok(b),
            Err(e) => self.alloc_missed(e, size, align),
        }
    }

    /// [`Pool::alloc`] after the heap refused: grow for a miss, report anything else.
    #[cold]
    #[inline(never)]
    fn alloc_missed(&mut self, e: Error, size: usize, align: usize) -> Result<H::Block, PoolError> {
        match e {
            Error::OutOfMemory => self.grow_and_alloc(size, align),
            e => Err(self.report(e, size)),
        }
    }

    /// Allocates from the free chunks the pool already holds, never growing it or calling its
    /// source: `OutOfMemory` when no free chunk fits, and for a request above the bypass
    /// threshold (which never takes a shared chunk). What a caller that holds memory elsewhere
    /// (a stream-ordered device pool's blocks waiting for events) tries before it lets the
    /// pool grow.
    ///
    /// # Time Complexity
    /// As the heap's `alloc`.
    #[inline]
    pub fn alloc_without_growing(
        &mut self,
        size: usize,
        align: usize,
    ) -> Result<H::Block, PoolError> {
        if self.policy.bypass_above.is_some_and(|t| size > t) {
            return Err(self.report(Error::OutOfMemory, size));
        }
        self.heap
            .alloc(size, align)
            .map_err(|e| self.report(e, size))
    }

    /// Frees a block of `size` bytes (the size it was allocated with: it tells a bypassed
    /// block, whose region goes back to the source at once). A block above the bypass
    /// threshold may be larger than it was asked to be (a bypassed block takes its whole
    /// region): any size from the request up to its usable size frees it.
    ///
    /// # Time Complexity
    /// As the heap's `free`; `O(regions)` more for a block above the bypass threshold.
    ///
    /// # Safety
    /// As for the heap's `free` ([`crate::InlineHeap::free`]; nothing for a detached heap,
    /// whose blocks are always checked).
    #[inline]
    pub unsafe fn free(&mut self, block: H::Block, size: usize) -> Result<(), Error> {
        if size > self.bypass_above {
            // SAFETY: forwarded caller contract.
            return unsafe { self.free_bypassed(block, size) };
        }
        // SAFETY: forwarded caller contract.
        unsafe { self.heap.free(block, size) }?;
        if size >= self.trim_above {
            self.trim_regions(None);
        }
        Ok(())
    }

    /// [`Pool::free`] of a block above the bypass threshold: freed with its own size (a
    /// bypassed block takes its whole region, so it may be larger than it was asked to be), and
    /// its region, if it has one of its own, goes back to the source.
    ///
    /// # Safety
    /// As for [`Pool::free`].
    #[cold]
    #[inline(never)]
    unsafe fn free_bypassed(&mut self, block: H::Block, size: usize) -> Result<(), Error> {
        // SAFETY: forwarded caller contract (the same checks as the heap's `free`).
        let own = unsafe { self.heap.usable_size(&block)? };
        if size > own {
            return Err(Error::WrongSize);
        }
        // SAFETY: forwarded caller contract; `own` is the block's size.
        unsafe { self.heap.free(block, own)? };
        self.release_bypass(H::block_addr(&block));
        Ok(())
    }

    /// [`Pool::alloc`], counted in `scope`.
    pub fn alloc_in(
        &mut self,
        scope: &Scope,
        size: usize,
        align: usize,
    ) -> Result<H::Block, PoolError> {
        let b = self.alloc(size, align)?;
        scope.record_alloc(size);
        Ok(b)
    }

    /// [`Pool::free`], counted in `scope`.
    ///
    /// # Safety
    /// As for [`Pool::free`].
    pub unsafe fn free_in(
        &mut self,
        scope: &Scope,
        block: H::Block,
        size: usize,
    ) -> Result<(), Error> {
        // SAFETY: forwarded caller contract.
        unsafe { self.free(block, size)? };
        scope.record_free(size);
        Ok(())
    }

    /// Does the policy's up-front reservation now, if it has not been done (it is otherwise
    /// done on the first miss).
    ///
    /// A policy that fails [`Policy::check`] is refused here, before anything is obtained, with
    /// [`Error::BadPolicy`] naming the field (and again on every later miss).
    pub fn reserve_now(&mut self) -> Result<(), PoolError> {
        if self.reserved_up_front {
            return Ok(());
        }
        self.check_policy(0)?;
        self.reserved_up_front = true;
        let bytes = match self.policy.reserve {
            Reserve::Nothing => return Ok(()),
            Reserve::Bytes(b) => b,
            Reserve::Fraction(f) => match self.source.available() {
                // The fraction (checked to be in [0, 1]) of a byte count, rounded down: float
                // precision is plenty.
                Some(avail) if f > 0.0 => (avail as f64 * f) as usize,
                _ => return Ok(()),
            },
        };
        let len = self
            .round(bytes)
            .ok_or_else(|| self.report(Error::SizeOverflow, bytes))?;
        if len == 0 {
            return Ok(());
        }
        let len = self
            .within_limit(len, len)
            .map_err(|e| self.report(e, bytes))?;
        self.obtain(len).map_err(|e| self.report(e, bytes))
    }

    /// While `hold` is set, nothing obtained goes back to the source: no trim (an explicit one
    /// or the retry of a request that ran out), no free end cut, no bypassed region given back
    /// at its free (it stays, free, until a trim after the hold). For a source whose giving
    /// back is illegal for a while (a CUDA device pool while a graph is captured: `cuMemFree`
    /// waits for the device), or whose free memory others still use (a CUDA graph's private
    /// pool: a replay writes the chunks its capture freed).
    pub fn hold_regions(&mut self, hold: bool) {
        self.hold = hold;
    }

    /// Gives back every wholly free region, then (with [`Policy::release_above`] set, where the
    /// source can) the free ends of the regions that stay and the pages inside large free
    /// chunks; last, the source returns to the system what it keeps for reuse
    /// ([`RegionSource::purge`]), those regions included.
    ///
    /// # Time Complexity
    /// `O(regions)`, plus `O(free chunks)` of at least [`Policy::release_above`] when pages are
    /// released.
    pub fn trim(&mut self) -> Trimmed {
        if self.hold {
            return Trimmed::default();
        }
        let mut out = self.trim_regions(self.policy.release_above);
        if let Some(min) = self.policy.release_above {
            let page = self.source.granularity();
            let Pool { heap, source, .. } = self;
            let mut released = 0;
            heap.free_spans(min, page, |start, len| {
                // SAFETY: the span is inside a region from `source` and holds none of the
                // heap's tags (`free_spans`), in a free chunk nothing uses.
                if unsafe { source.release(start, len) } {
                    released += len;
                }
            });
            out.released += released;
            self.counts.released += released as u64;
        }
        out.purged = self.source.purge();
        out
    }

    /// The part of [`Pool::trim`] that needs no walk of the chunks: every wholly free region
    /// goes back to the source, then, with `cut_above`, the free end of each region that stays
    /// is given back where it is at least that many bytes and the source can shrink the
    /// region. A free above [`Policy::trim_above`] runs it without `cut_above`.
    ///
    /// # Time Complexity
    /// `O(regions)`, plus `O(bits of a size)` per region cut.
    pub fn trim_regions(&mut self, cut_above: Option<usize>) -> Trimmed {
        let mut out = Trimmed::default();
        if self.hold {
            return out;
        }
        let Pool {
            heap,
            source,
            hooks,
            reserved,
            top,
            bypass,
            counts,
            ..
        } = self;
        heap.trim(|base, len| {
            let addr = S::addr(base);
            // SAFETY: the heap removed the region, so nothing uses it; it came from `source`.
            unsafe { source.give_back(base, len) };
            hooks.given_back(addr, len);
            *reserved -= len;
            counts.regions_given_back += 1;
            counts.hook_calls += 1;
            out.regions += 1;
            out.bytes += len;
            if *top == Some(addr) {
                *top = None;
            }
            for slot in bypass.iter_mut().filter(|s| **s == Some(addr)) {
                *slot = None;
            }
        });
        if out.regions > 0 {
            self.restart_doubling();
        }
        if let Some(min) = cut_above {
            let page = self.source.granularity();
            let Pool {
                heap,
                source,
                hooks,
                reserved,
                counts,
                ..
            } = self;
            out.bytes += heap.shrink_regions(page, min, |base, len, keep| {
                // SAFETY: the heap no longer manages the tail; the region came from `source`.
                let done = unsafe { source.shrink(base, len, keep) };
                if done {
                    let addr = S::addr(base);
                    hooks.shrunk(addr, addr + keep, len - keep);
                    *reserved -= len - keep;
                    counts.shrunk += 1;
                    counts.hook_calls += 1;
                }
                done
            });
        }
        out
    }

    /// After regions were given back, doubling starts again from the largest region the pool
    /// still holds (or its initial size), so that a pool that shrank does not grow back by its
    /// old, largest steps.
    fn restart_doubling(&mut self) {
        if let Growth::Doubling { initial, cap } = self.policy.growth {
            let mut largest = 0;
            self.heap.each_region(|_, len| largest = largest.max(len));
            self.increment = largest.clamp(initial, cap.max(initial));
        }
    }

    /// The pool's statistics.
    ///
    /// # Time Complexity
    /// As the heap's `stats`.
    pub fn stats(&self) -> PoolStats {
        PoolStats {
            heap: self.heap.stats(),
            reserved: self.reserved,
            cached: self.source.cached(),
            ..self.counts
        }
    }

    /// Calls `region(base, len)` for every region, then `chunk(addr, bytes, free)` for each of
    /// its chunks: a snapshot of the whole pool as data.
    ///
    /// # Time Complexity
    /// `O(chunks + regions)`.
    pub fn visit(&self, region: impl FnMut(usize, usize), chunk: impl FnMut(usize, usize, bool)) {
        self.heap.visit(region, chunk)
    }

    /// The heap's invariants, and the pool's own: `reserved` is the sum of the regions.
    ///
    /// # Time Complexity
    /// `O(chunks + regions)`.
    pub fn check(&self) -> Result<(), crate::error::CheckError> {
        self.heap.check()?;
        let mut sum = 0;
        self.heap.visit(|_, len| sum += len, |_, _, _| {});
        if sum != self.reserved {
            return Err(crate::error::CheckError::new(
                "reserved bytes disagree with the regions",
                0,
            ));
        }
        Ok(())
    }

    /// The error for a refused request of `size` bytes, with the pool's figures.
    #[cold]
    pub(crate) fn refusal(&self, error: Error, size: usize) -> PoolError {
        self.report(error, size)
    }

    #[cold]
    fn report(&self, error: Error, size: usize) -> PoolError {
        PoolError {
            error,
            requested: size,
            reserved: self.reserved,
            in_use: self.heap.stats().in_use,
            limit: self.policy.limit,
        }
    }

    /// [`Policy::check`], refusing a request of `size` bytes with the field at fault; a growth
    /// that cannot be rounded to the source's granularity is the growth field's fault too.
    fn check_policy(&self, size: usize) -> Result<(), PoolError> {
        let bad = |e| self.report(Error::BadPolicy(e), size);
        self.policy.check().map_err(bad)?;
        if self.round(self.increment).is_none() {
            return Err(bad(PolicyError::GrowthSize));
        }
        Ok(())
    }

    /// `bytes` rounded up to the source's granularity.
    fn round(&self, bytes: usize) -> Option<usize> {
        let g = self.source.granularity();
        bytes.checked_next_multiple_of(g)
    }

    /// The bytes of a region that holds one request of `size` bytes aligned to `align`, and of
    /// the chunk space it needs.
    fn region_for(&self, size: usize, align: usize) -> Result<(usize, usize), Error> {
        let layout = self.heap.geometry();
        let (_, want) = layout.request(size, align)?;
        let space = want
            .checked_mul(layout.granule())
            .ok_or(Error::SizeOverflow)?;
        let region = space
            .checked_add(layout.region_overhead())
            .and_then(|r| self.round(r))
            .ok_or(Error::SizeOverflow)?;
        Ok((region, space))
    }

    /// `len` bytes cut down to what the limit leaves room for, but never below `min`;
    /// `LimitExceeded` if not even `min` fits.
    fn within_limit(&self, len: usize, min: usize) -> Result<usize, Error> {
        let Some(limit) = self.policy.limit else {
            return Ok(len);
        };
        let g = self.source.granularity();
        let room = limit.saturating_sub(self.reserved) & !(g - 1);
        if min > room {
            return Err(Error::LimitExceeded);
        }
        Ok(len.min(room).max(min))
    }

    /// Obtains a region of `len` bytes and adds it to the heap.
    fn obtain(&mut self, len: usize) -> Result<(), Error> {
        let (base, got) = self.source.obtain(len)?;
        let addr = S::addr(base);
        let refused = if got < len || self.policy.limit.is_some_and(|l| self.reserved + got > l) {
            Some(Error::RegionTooSmall)
                .filter(|_| got < len)
                .or(Some(Error::LimitExceeded))
        } else {
            // SAFETY: the source's contract makes the region the heap's to use until it is
            // given back; the heap refuses (writing nothing) one that is misaligned or overlaps.
            unsafe { self.heap.add_region(base, got) }.err()
        };
        match refused {
            None => {
                self.reserved += got;
                self.counts.peak_reserved = self.counts.peak_reserved.max(self.reserved);
                self.counts.regions_obtained += 1;
                self.counts.hook_calls += 1;
                self.hooks.obtained(addr, got);
                self.top = Some(addr);
                if let Growth::Doubling { cap, .. } = self.policy.growth {
                    self.increment = self.increment.saturating_mul(2).min(cap.max(1));
                }
                Ok(())
            }
            // An overlapping region may be memory the heap already uses: keep it.
            Some(Error::RegionOverlap) => Err(Error::RegionOverlap),
            Some(e) => {
                // SAFETY: the region came from the source a moment ago and was never used.
                unsafe { self.source.give_back(base, got) };
                Err(e)
            }
        }
    }

    /// Grows the top region in place until its free end could hold `space` bytes (by at
    /// least the increment, within the limit).
    fn grow_top(&mut self, space: usize) -> Result<(), Error> {
        let at = self.top.ok_or(Error::OutOfMemory)?;
        // The region's free end merges with what is added: only the rest is needed.
        let space = space.saturating_sub(self.heap.free_tail(at)).max(1);
        let want = self
            .round(space.max(self.increment))
            .ok_or(Error::SizeOverflow)?;
        let min = self.round(space).ok_or(Error::SizeOverflow)?;
        self.grow_region(at, want, min).map(|_| ())
    }

    /// Grows the region at `at` in place by `want` bytes, or at least `min` (within the
    /// limit); returns the bytes added.
    fn grow_region(&mut self, at: usize, want: usize, min: usize) -> Result<usize, Error> {
        let (base, len) = self.heap.region_of(at).ok_or(Error::UnknownRegion)?;
        let add = self.within_limit(want, min)?;
        let added = self.source.grow(base, len, add)?;
        // SAFETY: the source's contract: the added range continues the region, is the heap's
        // to use, and is reachable through its base.
        match unsafe { self.heap.extend_region(base, added) } {
            Ok(()) => {
                self.reserved += added;
                self.counts.peak_reserved = self.counts.peak_reserved.max(self.reserved);
                self.counts.grown += 1;
                self.counts.hook_calls += 1;
                self.hooks.grown(at, at + len, added);
                Ok(added)
            }
            Err(e) => {
                // SAFETY: the tail was added a moment ago and never used; give it back.
                unsafe { self.source.shrink(base, len + added, len) };
                Err(e)
            }
        }
    }

    /// Grows, in place where the source can, the region of the bypassed block at `addr`, a
    /// block that spans its whole region, until the region could hold a request of `size`
    /// bytes; returns the payload bytes of the grown region's one chunk. Refused for a block
    /// that is not alone in a region of its own.
    pub(crate) fn grow_bypassed(
        &mut self,
        addr: usize,
        usable: usize,
        size: usize,
    ) -> Result<usize, Error> {
        let (base, len) = self.heap.region_of(addr).ok_or(Error::UnknownRegion)?;
        let at = S::addr(base);
        let layout = self.heap.geometry();
        if !self.bypass.contains(&Some(at)) || layout.whole_region_request(len) != Some(usable) {
            return Err(Error::OutOfMemory);
        }
        let (region, _) = self.region_for(size, layout.granule())?;
        if region > len {
            let add = region - len;
            self.grow_region(at, add, add)?;
        }
        let (_, len) = self.heap.region_of(at).ok_or(Error::UnknownRegion)?;
        layout.whole_region_request(len).ok_or(Error::OutOfMemory)
    }

    /// The slow path of [`Pool::alloc`]: the heap had no chunk that fits.
    #[cold]
    #[inline(never)]
    fn grow_and_alloc(&mut self, size: usize, align: usize) -> Result<H::Block, PoolError> {
        let mut last = Error::OutOfMemory;
        self.check_policy(size)?;
        if !self.reserved_up_front {
            self.reserve_now()?;
            if let Ok(b) = self.heap.alloc(size, align) {
                return Ok(b);
            }
        }
        let (region, space) = self
            .region_for(size, align)
            .map_err(|e| self.report(e, size))?;
        for attempt in 0..2 {
            if self.grow_top(space).is_ok() {
                if let Ok(b) = self.heap.alloc(size, align) {
                    return Ok(b);
                }
            }
            let want = self.round(region.max(self.increment));
            match want
                .ok_or(Error::SizeOverflow)
                .and_then(|w| self.within_limit(w, region))
            {
                Ok(len) => {
                    // A smaller region is tried when the larger one is refused.
                    let got = self.obtain(len).or_else(|e| {
                        if len > region {
                            self.obtain(region)
                        } else {
                            Err(e)
                        }
                    });
                    match got {
                        Ok(()) => match self.heap.alloc(size, align) {
                            Ok(b) => return Ok(b),
                            Err(e) => last = e,
                        },
                        Err(e) => last = e,
                    }
                }
                Err(e) => last = e,
            }
            // Out of memory or over the limit: give back what is free (whole regions, free
            // ends) and try once more.
            if attempt == 0 && self.trim().gave_back() {
                self.counts.retries += 1;
                continue;
            }
            break;
        }
        Err(self.report(last, size))
    }

    /// Serves a request above the bypass threshold from a region of its own.
    #[cold]
    #[inline(never)]
    fn alloc_bypass(&mut self, size: usize, align: usize) -> Result<H::Block, PoolError> {
        self.check_policy(size)?;
        let Some(slot) = self.bypass.iter().position(Option::is_none) else {
            // Every slot is taken: serve it like any other request.
            return match self.heap.alloc(size, align) {
                Ok(b) => Ok(b),
                Err(_) => self.grow_and_alloc(size, align),
            };
        };
        let (region, _) = self
            .region_for(size, align)
            .map_err(|e| self.report(e, size))?;
        let top = self.top;
        let mut got = self
            .within_limit(region, region)
            .and_then(|len| self.obtain(len));
        if matches!(got, Err(Error::OutOfMemory | Error::LimitExceeded)) && self.trim().gave_back()
        {
            self.counts.retries += 1;
            got = self
                .within_limit(region, region)
                .and_then(|len| self.obtain(len));
        }
        got.map_err(|e| self.report(e, size))?;
        // The bypass region is never grown in place: growth stays with the previous top.
        let own = self.top;
        self.top = top;
        // The block takes the whole region (at the granule's alignment, where no leading
        // fragment is split off), so that the end of its last page is not a free chunk that
        // other blocks could take, keeping the region when the block is freed.
        let whole = match own.and_then(|at| self.heap.region_of(at)) {
            Some((_, len)) if align <= self.heap.geometry().granule() => self
                .heap
                .geometry()
                .whole_region_request(len)
                .filter(|&w| w >= size)
                .unwrap_or(size),
            _ => size,
        };
        let block = self
            .heap
            .alloc(whole, align)
            .map_err(|e| self.report(e, size))?;
        let Some(own) = own else { return Ok(block) };
        match self.heap.region_of(H::block_addr(&block)) {
            Some((base, _)) if S::addr(base) == own => {
                self.bypass[slot] = Some(own);
                self.counts.bypassed += 1;
            }
            // Best fit found a smaller free chunk elsewhere: the new region is not needed.
            _ => self.give_back(own),
        }
        Ok(block)
    }

    /// After a bypassed block at `addr` was freed: gives its region back if it is one.
    #[cold]
    pub(crate) fn release_bypass(&mut self, addr: usize) {
        let Some((base, _)) = self.heap.region_of(addr) else {
            return;
        };
        let base = S::addr(base);
        if let Some(slot) = self.bypass.iter_mut().find(|s| **s == Some(base)) {
            *slot = None;
            self.give_back(base);
        }
    }

    /// Removes the region at `base` from the heap, if it is wholly free, and gives it back
    /// (unless the pool holds its regions: it stays, free, for a later trim).
    fn give_back(&mut self, base: usize) {
        if self.hold {
            return;
        }
        if let Ok((b, len)) = self.heap.remove_region(base) {
            // SAFETY: the heap removed the region, so nothing uses it; it came from the source.
            unsafe { self.source.give_back(b, len) };
            self.hooks.given_back(base, len);
            self.reserved -= len;
            self.counts.regions_given_back += 1;
            self.counts.hook_calls += 1;
            if self.top == Some(base) {
                self.top = None;
            }
        }
    }
}

impl<R: RecordStore, S: RegionSource<Base = usize>, K: Hooks> Pool<DetachedHeap<R>, S, K> {
    /// Splits a live block in two live blocks, the first `head` bytes and the rest (see
    /// [`DetachedHeap::split`]); nothing is allocated or freed, so the pool's figures stay.
    /// A block above the bypass threshold (a region of its own) is never split: `(block,
    /// None)`.
    pub fn split(&mut self, block: Block, head: usize) -> Result<(Block, Option<Block>), Error> {
        if self.bypasses(block.size) {
            return Ok((block, None));
        }
        self.heap.split(block, head)
    }

    /// Merges two live blocks, `second` starting where `first` ends, into one (see
    /// [`DetachedHeap::merge`]); nothing is allocated or freed, so the pool's figures stay.
    /// `Ok(None)` (nothing changed) when the merged block would be above the bypass threshold.
    pub fn merge(&mut self, first: Block, second: Block) -> Result<Option<Block>, Error> {
        if self.bypasses(first.size.saturating_add(second.size)) {
            return Ok(None);
        }
        self.heap.merge(first, second).map(Some)
    }
}

impl<H: PoolHeap, S: RegionSource<Base = H::Base>, K: Hooks> Drop for Pool<H, S, K> {
    /// Gives back every wholly free region, and has the source return what it keeps for
    /// reuse. A region that still holds a live block is kept (never unmapped under its owner):
    /// it leaks with the pool.
    fn drop(&mut self) {
        let Pool {
            heap,
            source,
            hooks,
            ..
        } = self;
        heap.trim(|base, len| {
            // SAFETY: the heap removed the region, so nothing uses it; it came from `source`.
            unsafe { source.give_back(base, len) };
            hooks.given_back(S::addr(base), len);
        });
        source.purge();
    }
}
