//! A pool shared between threads: a [`Pool`] behind a lock, with queued frees (see
//! [`crate::share::shared`]), an out-of-memory handler called without the lock, and, for host
//! pools, [`GlobalAlloc`] and `allocator_api2`'s `Allocator` through [`SharedAlloc`].

use core::alloc::GlobalAlloc;
use core::ptr::NonNull;

use crate::algo::geometry::W;
use crate::error::Error;
use crate::inline::heap::InlineHeap;
use crate::pool::heap::PoolHeap;
use crate::pool::hooks::{Hooks, NoHooks};
use crate::pool::source::RegionSource;
use crate::pool::{Pool, PoolError, PoolStats, Trimmed};
use crate::share::alloc::SharedAlloc;
use crate::share::cache::class::Class;
use crate::share::cache::proof::PointerProof;
use crate::share::cache::thread::{self, ThreadCache};
use crate::share::cache::transfer::Transfer;
use crate::share::lock::{RawLock, SpinLock};
use crate::share::shared::{QueuedFree, Shared};
use crate::sync::const_unless_loom;

/// A free waiting in the queue: the block and the size it was freed with.
pub(crate) struct Pending<B> {
    block: B,
    size: usize,
}

// SAFETY: a queued free is a block its owner gave up for good; only the lock holder that takes
// it from the queue uses it, to free it.
unsafe impl<B> Send for Pending<B> {}

impl<H: PoolHeap, S: RegionSource<Base = H::Base>, K: Hooks> QueuedFree for Pool<H, S, K> {
    type Freed = Pending<H::Block>;

    fn free_queued(&mut self, p: Pending<H::Block>) {
        // SAFETY: `p` was queued by `SharedPool::free`, whose caller promised what `Pool::free`
        // needs. A refusal is counted in the heap's statistics.
        let _ = unsafe { self.free(p.block, p.size) };
    }
}

/// What a shared pool does when a request finds no memory: called without the pool's lock
/// (so other threads' frees go through), it may free memory elsewhere, wait for frees, or
/// decide to give up. `true` asks for another try (TensorFlow's `AllocatorRetry`).
pub type OomHandler = fn(&PoolError) -> bool;

/// A [`Pool`] usable from many threads; for host memory, a `#[global_allocator]`.
///
/// `L` is the lock ([`SpinLock`] by default, or any `lock_api::RawMutex`, such as
/// `parking_lot::RawMutex`, with the `lock_api` feature) and `N` (a power of two, at least 2)
/// how many frees can wait for the lock at once. A free that finds the lock taken is queued
/// (nothing is written into the block) and done, validated, by the next lock holder. When a
/// request runs out of memory after the pool has trimmed and retried, the [`OomHandler`], if
/// any, is called without the lock, up to `max_retries` times.
///
/// **Re-entry.** A call into the same pool from the thread that holds its lock (inside
/// [`SharedPool::with_pool`], or from a hook) returns [`Error::Reentrant`] (null through
/// `GlobalAlloc`) with the `std` feature; without it, it would wait forever.
///
/// # Examples
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use tagalloc::{DetachedHeap, Error, Policy, Pool, Record, RegionSource, SharedPool};
///
/// struct Addresses { next: usize }
/// // SAFETY: detached tags never touch the ranges; none is handed out twice.
/// unsafe impl RegionSource for Addresses {
///     type Base = usize;
///     fn addr(b: usize) -> usize { b }
///     fn granularity(&self) -> usize { 1 << 20 }
///     fn obtain(&mut self, min: usize) -> Result<(usize, usize), Error> {
///         let base = self.next;
///         self.next += min;
///         Ok((base, min))
///     }
///     unsafe fn give_back(&mut self, _: usize, _: usize) {}
/// }
///
/// let mut table = [Record::VACANT; 64];
/// let heap = DetachedHeap::new(&mut table[..], 256)?;
/// let pool = Pool::new(heap, Addresses { next: 1 << 40 }, Policy::new());
/// let pool: SharedPool<_, _> = SharedPool::new(pool);
/// std::thread::scope(|s| {
///     for _ in 0..4 {
///         s.spawn(|| {
///             let b = pool.alloc(1 << 16, 256).unwrap();
///             // SAFETY: detached blocks are checked; freed once.
///             unsafe { pool.free(b, b.size).unwrap() };
///         });
///     }
/// });
/// assert_eq!(pool.stats()?.heap.in_use, 0);
/// # Ok(())
/// # }
/// ```
pub struct SharedPool<H, S, K = NoHooks, L = SpinLock, const N: usize = 64>
where
    H: PoolHeap,
    S: RegionSource<Base = H::Base>,
    K: Hooks,
{
    shared: Shared<Pool<H, S, K>, L, N>,
    oom: Option<OomHandler>,
    max_retries: u32,
    /// Batches the threads' caches hand to one another while the lock is taken (used by the
    /// inline pools' caches only).
    transfer: Transfer,
}

impl<H, S, K, L, const N: usize> SharedPool<H, S, K, L, N>
where
    H: PoolHeap,
    S: RegionSource<Base = H::Base>,
    K: Hooks,
    L: RawLock,
{
    const_unless_loom! {
        /// Shares `pool`, with no out-of-memory handler.
        ///
        /// # Time Complexity
        /// `O(N)` (the queue is built).
        pub fn new(pool: Pool<H, S, K>) -> Self {
            SharedPool {
                shared: Shared::new(pool),
                oom: None,
                max_retries: 0,
                transfer: Transfer::new(),
            }
        }
    }

    const_unless_loom! {
        /// Shares `pool`, with `handler` called, without the lock, when a request runs out of
        /// memory; it may ask for up to `max_retries` more tries of that request.
        ///
        /// # Time Complexity
        /// `O(N)` (the queue is built).
        pub fn with_oom_handler(pool: Pool<H, S, K>, handler: OomHandler, max_retries: u32) -> Self {
            SharedPool {
                shared: Shared::new(pool),
                oom: Some(handler),
                max_retries,
                transfer: Transfer::new(),
            }
        }
    }

    /// Allocates (see [`Pool::alloc`]); when the pool runs out, asks the out-of-memory
    /// handler, if any, whether to try again.
    ///
    /// # Time Complexity
    /// As for [`Pool::alloc`], after the queued frees, plus the wait for the lock.
    #[inline]
    pub fn alloc(&self, size: usize, align: usize) -> Result<H::Block, PoolError> {
        let mut tries = 0;
        loop {
            let result = match self.shared.lock() {
                Ok(mut st) => st.heap.alloc(size, align),
                Err(e) => Err(unlocked_error(e, size)),
            };
            match result {
                Err(e) if e.is_exhaustion() && tries < self.max_retries => {
                    let Some(handler) = self.oom else {
                        return Err(e);
                    };
                    tries += 1;
                    if !handler(&e) {
                        return Err(e);
                    }
                }
                other => return other,
            }
        }
    }

    /// Frees a block of `size` bytes (see [`Pool::free`]). If the lock is taken the free is
    /// queued and `Ok` returned at once; the next lock holder does it and counts a refusal in
    /// the heap's statistics. [`Error::Reentrant`] if the queue is full and this thread holds
    /// the lock (nothing is freed then).
    ///
    /// # Time Complexity
    /// `O(1)` when queued; otherwise as for [`Pool::free`], after the queued frees.
    ///
    /// # Safety
    /// As for [`Pool::free`].
    #[inline]
    pub unsafe fn free(&self, block: H::Block, size: usize) -> Result<(), Error> {
        self.shared.free(Pending { block, size }, |pool, p| {
            // SAFETY: forwarded caller contract.
            unsafe { pool.free(p.block, p.size) }
        })
    }

    /// Trims the pool (see [`Pool::trim`]).
    ///
    /// # Time Complexity
    /// As for [`Pool::trim`], after the queued frees.
    pub fn trim(&self) -> Result<Trimmed, Error> {
        self.shared.with(|p| p.trim())
    }

    /// The pool's statistics, after doing every queued free.
    ///
    /// # Time Complexity
    /// As for [`Pool::stats`], after the queued frees.
    pub fn stats(&self) -> Result<PoolStats, Error> {
        let mut s = self.shared.with(|p| p.stats())?;
        // What the caches handed to one another is cached too.
        s.cache.blocks += self.transfer.blocks();
        s.cache.bytes += self.transfer.bytes();
        Ok(s)
    }

    /// Runs `f` with the locked pool (snapshots, `check()`, reservation), after doing every
    /// queued free. [`Error::Reentrant`] if called from inside `f` itself.
    ///
    /// # Time Complexity
    /// `f`'s, after the queued frees.
    pub fn with_pool<R>(&self, f: impl FnOnce(&mut Pool<H, S, K>) -> R) -> Result<R, Error> {
        self.shared.with(f)
    }

    /// How many frees so far found the lock taken and were queued.
    ///
    /// # Time Complexity
    /// `O(1)`, without the lock.
    pub fn queued_frees(&self) -> usize {
        self.shared.queued()
    }

    /// The pool back, with every queued free done.
    pub fn into_inner(self) -> Pool<H, S, K> {
        self.shared.into_inner()
    }
}

/// The error of a request that could not take the lock.
#[cold]
fn unlocked_error(error: Error, size: usize) -> PoolError {
    PoolError {
        error,
        requested: size,
        reserved: 0,
        in_use: 0,
        limit: None,
    }
}

impl<S, K, L, const N: usize> SharedPool<InlineHeap, S, K, L, N>
where
    S: RegionSource<Base = NonNull<u8>>,
    K: Hooks,
    L: RawLock,
{
    /// Resizes an allocation (see [`Pool::realloc`]).
    ///
    /// # Time Complexity
    /// As for [`Pool::realloc`], after the queued frees.
    ///
    /// # Safety
    /// As for [`InlineHeap::realloc`].
    pub unsafe fn realloc(
        &self,
        ptr: NonNull<u8>,
        old_size: usize,
        align: usize,
        new_size: usize,
    ) -> Result<NonNull<u8>, PoolError> {
        let mut st = self
            .shared
            .lock()
            .map_err(|e| unlocked_error(e, new_size))?;
        // SAFETY: forwarded caller contract.
        unsafe { st.heap.realloc(ptr, old_size, align, new_size) }
    }
}

impl<S, K, L, const N: usize> SharedPool<InlineHeap, S, K, L, N>
where
    S: RegionSource<Base = NonNull<u8>>,
    K: PointerProof,
    L: RawLock,
{
    /// Allocates through `cache` (see [`ThreadCache`]): a request of a cached class comes from
    /// the cache without the lock or any atomic operation; an empty class is refilled with a
    /// batch under one lock acquisition; anything else (larger sizes, alignments above the
    /// granule, the `checked` build) is [`SharedPool::alloc`].
    ///
    /// # Time Complexity
    /// `O(1)` on a hit; a refill is a batch of [`Pool::alloc`]s under the lock.
    #[inline]
    pub fn alloc_with_cache(
        &self,
        cache: &mut ThreadCache,
        size: usize,
        align: usize,
    ) -> Result<NonNull<u8>, PoolError> {
        if thread::ENABLED {
            if let Some(c) = Class::of(size, align) {
                if let Some(p) = cache.take(c) {
                    return Ok(p);
                }
                return self.refill(cache, c, size, align);
            }
        }
        self.alloc(size, align)
    }

    /// [`SharedPool::alloc_with_cache`] when the class is empty: under one lock acquisition,
    /// one block for the caller and a batch for the cache (from the heap as it stands: only
    /// the caller's block may grow the pool), and the cache's figures handed to the pool.
    #[cold]
    #[inline(never)]
    fn refill(
        &self,
        cache: &mut ThreadCache,
        c: Class,
        size: usize,
        align: usize,
    ) -> Result<NonNull<u8>, PoolError> {
        // A batch another cache left while the lock was taken, before waiting for the lock.
        if cache.fits_batch(c) {
            if let Some(batch) = self.transfer.pop(c) {
                // SAFETY: the transfer holds batches of this pool's blocks of class `c` or
                // larger, at most a batch each (pushed by `spill`), now given to the cache,
                // which fits one. A damaged batch (reported) leaves the lock's path below.
                if let Some(p) = unsafe { cache.refill_from(c, batch) } {
                    return Ok(p);
                }
            }
        }
        let first = match self.shared.lock() {
            Ok(mut st) => {
                let pool = &mut st.heap;
                if pool.bypasses(c.usable()) {
                    // A policy that bypasses small sizes: its blocks have regions of their own,
                    // which a cache must not keep.
                    return pool.alloc(size, align);
                }
                let first = pool.alloc(c.usable(), align);
                if first.is_ok() {
                    for _ in 0..cache.room(c) {
                        match pool.heap_mut().alloc(c.usable(), align) {
                            // SAFETY: a fresh block of class `c` of this pool, owned by no one.
                            Ok(p) => unsafe { cache.push(c, p) },
                            Err(_) => break,
                        }
                    }
                }
                cache.missed();
                cache.exchange_with(pool);
                first
            }
            Err(e) => Err(unlocked_error(e, size)),
        };
        match first {
            Ok(p) => Ok(p),
            // The out-of-memory handler and the lock's own errors: the plain path.
            Err(_) => self.alloc(size, align),
        }
    }

    /// Frees a block of `size` bytes through `cache`: a block of a cached class goes into the
    /// cache without the lock or any atomic operation; a full class first moves a batch to
    /// the pool under one lock acquisition. Anything else is [`SharedPool::free`].
    /// `DoubleFree`, nothing written, for a block that sits in a cache (see [`ThreadCache`]).
    ///
    /// # Time Complexity
    /// `O(1)`; a spill is a batch of [`Pool::free`]s under the lock.
    ///
    /// # Safety
    /// As for [`Pool::free`]; `cache` belongs to this pool (it was only ever used with it).
    #[inline]
    pub unsafe fn free_with_cache(
        &self,
        cache: &mut ThreadCache,
        ptr: NonNull<u8>,
        size: usize,
    ) -> Result<(), Error> {
        if thread::ENABLED {
            if let Some(c) = Class::of(size, 1) {
                if !c.is_coarse() {
                    // SAFETY: forwarded caller contract: a block of this pool of class `c` (its
                    // size rounds to it) or larger.
                    return unsafe { self.put_or_spill(cache, c, ptr) };
                }
                // SAFETY: forwarded caller contract: `ptr` is a live block of this pool that
                // the caller owns.
                return match unsafe { <InlineHeap>::unlocked_usable_size(ptr) } {
                    // Above the exact classes the block's own chunk decides (see
                    // `Class::holding`), unless the pool would give it back as a region of
                    // its own.
                    // SAFETY: forwarded caller contract; a block of that class or larger.
                    Some(u) if u >= size && u <= cache.bypass_above() => unsafe {
                        self.put_or_spill(cache, Class::holding(u + W), ptr)
                    },
                    // SAFETY: forwarded caller contract.
                    _ => unsafe { self.free_uncached(cache, ptr, size) },
                };
            }
        }
        // SAFETY: forwarded caller contract.
        unsafe { self.free(ptr, size) }
    }

    /// Resizes the live block `ptr`, whose usable size is `usable` (its tag's), to `new_size`
    /// bytes aligned to `align` through `cache` alone, when that needs no lock:
    /// `Some(Ok(ptr))` when the block's chunk is one the cache would hand out for `new_size`
    /// (its class, as a free files it); else a block of `new_size`'s class from the cache,
    /// what both hold copied, and `ptr` freed into the cache as by
    /// [`SharedPool::free_with_cache`]. `None`, nothing done, when either size has no class
    /// (nor `align`, above the granule) or the cache holds no block of the new one: the caller
    /// then takes the lock ([`SharedAlloc::realloc_block`]), which may resize in place.
    ///
    /// A `realloc` of a small block is thus a hit and a free; it is the many small reallocs of
    /// interpreters (docs/measurements.md, "`realloc` through the cache") that would otherwise each
    /// take the lock.
    ///
    /// # Time Complexity
    /// `O(1)` and a copy of at most `min(usable, new_size)` bytes; a free that spills takes
    /// the lock (see [`SharedPool::free_with_cache`]).
    ///
    /// # Safety
    /// As for [`SharedPool::free_with_cache`] with `ptr`'s usable size; on `Some(Ok(p))` with
    /// `p` other than `ptr`, `ptr` is not used again. `ptr` does not sit in a cache (the
    /// caller checked its key: a block there is a freed one, which a `realloc` must refuse).
    #[inline]
    pub unsafe fn realloc_with_cache(
        &self,
        cache: &mut ThreadCache,
        ptr: NonNull<u8>,
        usable: usize,
        align: usize,
        new_size: usize,
    ) -> Option<Result<NonNull<u8>, Error>> {
        if !thread::ENABLED || !Class::cacheable(usable) {
            return None;
        }
        // An alignment above the granule has no class: such a block keeps the pool's path.
        let to = Class::of(new_size, align)?;
        if Class::holding(usable + W) == to {
            return Some(Ok(ptr));
        }
        let new = cache.take(to)?;
        // SAFETY: `new` is a fresh block of class `to` (at least `new_size` usable bytes) and
        // `ptr` a live one of `usable` bytes (the caller's promise): distinct blocks.
        unsafe { core::ptr::copy_nonoverlapping(ptr.as_ptr(), new.as_ptr(), usable.min(new_size)) };
        // SAFETY: forwarded caller contract: `ptr` is given up now that its bytes are copied.
        match unsafe { self.free_with_cache(cache, ptr, usable) } {
            Ok(()) => Some(Ok(new)),
            Err(e) => {
                // Refused, so `ptr` stays the caller's: the new block goes back where it was
                // (it carries no key, so the cache takes it or spills to make room).
                // SAFETY: the block just taken from class `to`, unused, given up.
                let _ = unsafe { self.put_or_spill(cache, to, new) };
                Some(Err(e))
            }
        }
    }

    /// Puts `ptr` into class `c` of `cache`, spilling a batch first if the class is full.
    ///
    /// # Safety
    /// As for [`SharedPool::free_with_cache`], `ptr` a block of class `c` or larger.
    #[inline(always)]
    unsafe fn put_or_spill(
        &self,
        cache: &mut ThreadCache,
        c: Class,
        ptr: NonNull<u8>,
    ) -> Result<(), Error> {
        // SAFETY: forwarded caller contract.
        if unsafe { cache.put(c, ptr) }? {
            return Ok(());
        }
        // SAFETY: as above.
        unsafe { self.spill(cache, c, ptr) }
    }

    /// [`SharedPool::free_with_cache`] of a block above the exact classes that the cache does
    /// not take: one the pool bypasses, or any before the cache has learnt the pool's bypass
    /// threshold, which it learns here (and at every exchange), under the lock it frees with.
    ///
    /// # Safety
    /// As for [`SharedPool::free_with_cache`].
    #[cold]
    #[inline(never)]
    unsafe fn free_uncached(
        &self,
        cache: &mut ThreadCache,
        ptr: NonNull<u8>,
        size: usize,
    ) -> Result<(), Error> {
        match self.shared.lock() {
            Ok(mut st) => {
                let pool = &mut st.heap;
                cache.exchange_with(pool);
                // SAFETY: forwarded caller contract.
                unsafe { pool.free(ptr, size) }
            }
            // SAFETY: forwarded caller contract (the lock is this thread's: queued or refused).
            Err(_) => unsafe { self.free(ptr, size) },
        }
    }

    /// [`SharedPool::free_with_cache`] when the class or the cache is full: a batch of the
    /// class goes back to the pool under one lock acquisition, then `ptr` into the cache.
    ///
    /// # Safety
    /// As for [`SharedPool::free_with_cache`].
    #[cold]
    #[inline(never)]
    unsafe fn spill(
        &self,
        cache: &mut ThreadCache,
        c: Class,
        ptr: NonNull<u8>,
    ) -> Result<(), Error> {
        let mut st = match self.shared.try_lock() {
            Some(st) => st,
            None => {
                // The lock is taken: the batch goes to the transfer rather than wait, if it
                // has room.
                if let Some(batch) = cache.take_batch(c, ThreadCache::batch(c).max(1)) {
                    // SAFETY: the cache's blocks of class `c` (its invariant), given up.
                    match unsafe { self.transfer.push(c, batch) } {
                        Ok(()) => {
                            // SAFETY: forwarded caller contract; the class has room now.
                            if let Ok(true) = unsafe { cache.put(c, ptr) } {
                                cache.spilled();
                                return Ok(());
                            }
                        }
                        // SAFETY: the batch just taken from this class, given back.
                        Err(batch) => unsafe { cache.untake_batch(c, batch) },
                    }
                }
                match self.shared.lock() {
                    Ok(st) => st,
                    // SAFETY: forwarded caller contract (the lock is this thread's: queued
                    // or refused).
                    Err(_) => return unsafe { self.free(ptr, c.usable()) },
                }
            }
        };
        let pool = &mut st.heap;
        cache.drain(c, ThreadCache::batch(c).max(1), |p| {
            // SAFETY: the cache's blocks are live blocks of this pool of class `c` or larger
            // (its invariant), freed once.
            unsafe { free_from_cache(pool, p, c.usable()) };
        });
        // SAFETY: forwarded caller contract.
        let cached = unsafe { cache.put(c, ptr) };
        if !matches!(cached, Ok(true)) {
            // The whole cache is at its byte bound with other classes: this one goes back.
            // SAFETY: forwarded caller contract.
            let _ = unsafe { pool.free(ptr, c.usable()) };
        }
        // The batch's holes, not the victim, serve the next listed requests (see `file_victim`).
        pool.heap_mut().file_victim();
        cache.spilled();
        cache.exchange_with(pool);
        Ok(())
    }

    /// Gives the batches the caches left in the pool's transfer (see [`ThreadCache`]) back to
    /// the heap, under the lock: what a trim does first. Best effort: a transfer whose own lock
    /// is taken right now is left as it is. [`Error::Reentrant`] if this thread holds the lock.
    ///
    /// # Time Complexity
    /// `O(blocks)` frees under the lock.
    pub fn flush_transfer(&self) -> Result<(), Error> {
        if self.transfer.blocks() == 0 {
            return Ok(());
        }
        let mut st = self.shared.lock()?;
        let pool = &mut st.heap;
        self.transfer.take_all(|c, batch| {
            // SAFETY: the transfer's batches are blocks of this pool of class `c` or larger,
            // owned by no one (its invariant), now given up to the heap.
            unsafe {
                batch.drain(|p| {
                    // SAFETY: a block of this pool of class `c` or larger, freed once, as a
                    // cache's spill frees it.
                    free_from_cache(pool, p, c.usable())
                })
            }
        });
        pool.heap_mut().file_victim();
        Ok(())
    }

    /// Gives every block of `cache` back to the pool under one lock acquisition (a thread's
    /// exit, a trim, the child after a fork), and the cache's figures with them.
    /// [`Error::Reentrant`] (nothing moved) if this thread holds the lock.
    ///
    /// # Time Complexity
    /// `O(blocks)` frees under the lock.
    ///
    /// # Safety
    /// `cache` belongs to this pool.
    pub unsafe fn flush_cache(&self, cache: &mut ThreadCache) -> Result<(), Error> {
        let mut st = self.shared.lock()?;
        let pool = &mut st.heap;
        cache.drain_all(|c, p| {
            // SAFETY: the cache's blocks are live blocks of this pool (the caller's promise and
            // the cache's invariant), freed once.
            unsafe { free_from_cache(pool, p, c.usable()) };
        });
        pool.heap_mut().file_victim();
        pool.cache_stats_mut().flushes += 1;
        cache.exchange_with(pool);
        Ok(())
    }
}

/// Frees a block a per-thread cache gives back (a spill, a flush, a trim of the transfer, under
/// the lock) through the pool's [`PointerProof::free_cached_block`], then, for a class above
/// the bypass threshold, gives its region back if it has one of its own, as [`Pool::free`]
/// would.
///
/// # Safety
/// As for [`PointerProof::free_cached_block`], with this pool's heap.
#[inline(always)]
unsafe fn free_from_cache<S, K>(pool: &mut Pool<InlineHeap, S, K>, ptr: NonNull<u8>, size: usize)
where
    S: RegionSource<Base = NonNull<u8>>,
    K: PointerProof,
{
    let (heap, hooks) = pool.heap_and_hooks();
    // SAFETY: forwarded caller contract.
    let freed = unsafe { hooks.free_cached_block(heap, ptr, size) };
    if freed && size > pool.bypass_above() {
        pool.release_bypass(ptr.addr().get());
    }
}

shared_alloc_via!(alloc, free, realloc, PoolError =>
    impl<S, K, L, const N: usize> SharedAlloc for SharedPool<InlineHeap, S, K, L, N>
    where
        S: RegionSource<Base = NonNull<u8>>,
        K: Hooks,
        L: RawLock,
);

global_alloc_via_shared!(
    impl<S, K, L, const N: usize> GlobalAlloc for SharedPool<InlineHeap, S, K, L, N>
    where
        S: RegionSource<Base = NonNull<u8>>,
        K: Hooks,
        L: RawLock,
);

#[cfg(any(feature = "allocator-api2", feature = "allocator-api2-04"))]
crate::share::alloc::allocator_via_shared!(
    unsafe impl<S, K, L, const N: usize> Allocator for SharedPool<InlineHeap, S, K, L, N>
    where
        S: RegionSource<Base = NonNull<u8>>,
        K: Hooks,
        L: RawLock,
);
