//! A ready global allocator for `std` programs: [`HostAllocator`], a shared pool of `mmap`
//! regions behind a [`FutexLock`].
//!
//! Nothing on its allocation and free paths allocates through it: the pool and the heap work
//! inside the regions they manage, the source calls `mmap`/`mremap`/`munmap`/`madvise` and
//! reads `/proc` files into stack buffers, the lock is one atomic word and a futex, the core's
//! re-entry check reads the address of a constant-initialised thread-local without a
//! destructor, and each thread's cache of small blocks (`crate::tcache`) is another such
//! thread-local; the one registration a thread makes, its cache's exit destructor, takes a
//! list node from glibc's own `malloc` (not this allocator) once per thread. `tests/global.rs` checks this with the
//! allocator installed as a test program's `#[global_allocator]`, wrapped so that a call made
//! from inside another is counted.

use core::alloc::GlobalAlloc;
use core::ptr::NonNull;
use core::sync::atomic::AtomicU32;

use tagalloc::{
    Error, Growth, InlineHeap, NoHooks, Policy, Pool, PoolError, PoolStats, SharedAlloc,
    SharedPool, Trimmed,
};

use crate::futex::FutexLock;
use crate::mmap::{MmapSource, SourceError};
use crate::tcache;

/// A shared host pool: an [`InlineHeap`] over [`MmapSource`] regions behind lock `L`
/// ([`FutexLock`] by default, `tagalloc::SpinLock` for comparison).
pub type HostPool<L = FutexLock> = SharedPool<InlineHeap, MmapSource, NoHooks, L>;

/// The `std` program's allocator: adopt it with one line,
///
/// ```no_run
/// #[global_allocator]
/// static A: tagalloc_host::HostAllocator = tagalloc_host::HostAllocator::new();
/// ```
///
/// It is a [`HostPool`] with [`HostAllocator::POLICY`]: regions of 1 MiB doubling up to 64 MiB,
/// requests above 1 MiB in regions of their own (returned to the system as soon as they are freed),
/// a free of 128 KiB or more giving back the regions it leaves wholly free (as glibc trims its heap
/// at a free), and [`HostAllocator::trim`] giving back wholly free regions, cutting free region
/// ends and releasing the pages of free chunks of 64 KiB or more. Waiting threads sleep
/// ([`FutexLock`]). Nothing is mapped until the first allocation. Requests of up to 8184 bytes
/// (alignment up to 16) go through the calling thread's cache in front of the pool,
/// without the lock (see `tagalloc::ThreadCache`): a thread's cache serves the first
/// `HostAllocator` it uses and goes back to it at the thread's exit, on [`HostAllocator::trim`]
/// and [`HostAllocator::flush_thread_cache`].
///
/// # Examples
///
/// A private instance, with another policy:
///
/// ```
/// use std::alloc::{GlobalAlloc, Layout};
/// use tagalloc::{Growth, Policy};
/// use tagalloc_host::HostAllocator;
///
/// static SMALL: HostAllocator = HostAllocator::with_policy(
///     Policy::new().growth(Growth::Fixed(256 << 10)).limit(8 << 20),
/// );
/// let layout = Layout::from_size_align(1000, 8).unwrap();
/// // SAFETY: a non-zero size; the block is freed once with its layout.
/// unsafe {
///     let p = SMALL.alloc(layout);
///     assert!(!p.is_null());
///     SMALL.dealloc(p, layout);
/// }
/// assert_eq!(SMALL.trim().unwrap().regions, 1);
/// assert_eq!(SMALL.stats().unwrap().reserved, 0);
/// ```
pub struct HostAllocator {
    pool: HostPool,
    /// Tells this allocator's per-thread caches from those of one dropped at the same address
    /// (see `crate::tcache`); 0 until a thread binds a cache to it.
    cache_id: AtomicU32,
}

impl HostAllocator {
    /// The default policy: growth doubling from 1 MiB to 64 MiB regions (TensorFlow's
    /// `allow_growth`), requests above 1 MiB bypassing the shared regions, a free of 128 KiB or
    /// more giving back the regions it leaves wholly free (`Policy::trim_above`, after glibc's
    /// `M_TRIM_THRESHOLD`), and trim releasing free spans of 64 KiB or more.
    pub const POLICY: Policy = Policy::new()
        .growth(Growth::Doubling {
            initial: 1 << 20,
            cap: 64 << 20,
        })
        .bypass_above(1 << 20)
        .release_above(64 << 10)
        .trim_above(128 << 10);

    /// The allocator with [`HostAllocator::POLICY`] over plain `mmap` regions.
    pub const fn new() -> Self {
        Self::with_policy(Self::POLICY)
    }

    /// The allocator with another policy.
    pub const fn with_policy(policy: Policy) -> Self {
        Self::with_source(MmapSource::new(), policy)
    }

    /// The allocator over another source (locked or huge pages, say) with `policy`.
    pub const fn with_source(source: MmapSource, policy: Policy) -> Self {
        HostAllocator {
            pool: SharedPool::new(Pool::new(InlineHeap::new(), source, policy)),
            cache_id: AtomicU32::new(0),
        }
    }

    /// Gives memory back to the system (see `tagalloc::Pool::trim`). `Error::Reentrant` only
    /// if called from inside [`HostAllocator::pool`]'s `with_pool`.
    /// The calling thread's cache and the batches the caches handed to one another go back to
    /// the pool first (other threads keep their caches).
    pub fn trim(&self) -> Result<Trimmed, Error> {
        tcache::flush_current(&self.pool, &self.cache_id);
        self.pool.flush_transfer()?;
        self.pool.trim()
    }

    /// Gives the calling thread's cache of small blocks back to the pool now, as its exit
    /// would (a worker going idle, or before reading exact statistics: the caches' figures are
    /// as of each cache's last exchange with the pool).
    pub fn flush_thread_cache(&self) {
        tcache::flush_current(&self.pool, &self.cache_id);
    }

    /// The pool's statistics (the heap's, and what is held from the system; `cache`: the
    /// per-thread caches, as of each one's last exchange with the pool).
    pub fn stats(&self) -> Result<PoolStats, Error> {
        self.pool.stats()
    }

    /// The last system call of the source that failed, with the details (why an allocation
    /// came back null, say).
    pub fn last_error(&self) -> Result<Option<SourceError>, Error> {
        self.pool.with_pool(|p| p.source().last_error())
    }

    /// The shared pool, for everything else (`with_pool` for snapshots and `check()`,
    /// `queued_frees`).
    pub fn pool(&self) -> &HostPool {
        &self.pool
    }
}

impl Drop for HostAllocator {
    /// Threads that still hold cached blocks of this allocator forget them instead of giving
    /// them back to a pool that is gone (see `crate::tcache`).
    fn drop(&mut self) {
        tcache::unbind(&self.pool, &self.cache_id);
    }
}

impl Default for HostAllocator {
    fn default() -> Self {
        Self::new()
    }
}

// SAFETY: `alloc_block` and `free_block` go through the calling thread's cache, which hands
// out only live blocks of this pool that nobody else holds (its invariant) and takes back the
// blocks the caller gives up, with the caller's promise that `ptr` came from this allocator
// with `size`; everything else is the shared pool's `SharedAlloc`, whose contract is the same.
unsafe impl SharedAlloc for HostAllocator {
    type Error = PoolError;

    /// Small requests from the thread's cache (see `crate::tcache`), the rest from the pool.
    #[inline]
    fn alloc_block(&self, size: usize, align: usize) -> Result<NonNull<u8>, PoolError> {
        tcache::with_cache(&self.pool, &self.cache_id, |cache| match cache {
            Some(cache) => self.pool.alloc_with_cache(cache, size, align),
            None => self.pool.alloc_block(size, align),
        })
    }

    /// Small blocks into the thread's cache (whichever thread allocated them: the heap is
    /// shared), the rest to the pool. Rust hands over the layout, so no tag is read.
    #[inline]
    unsafe fn free_block(&self, ptr: NonNull<u8>, size: usize) -> Result<(), Error> {
        tcache::with_cache(&self.pool, &self.cache_id, |cache| match cache {
            // SAFETY: forwarded caller contract; the cache serves this pool.
            Some(cache) => unsafe { self.pool.free_with_cache(cache, ptr, size) },
            // SAFETY: forwarded caller contract.
            None => unsafe { self.pool.free_block(ptr, size) },
        })
    }

    #[inline]
    unsafe fn realloc_block(
        &self,
        ptr: NonNull<u8>,
        size: usize,
        align: usize,
        new_size: usize,
    ) -> Result<NonNull<u8>, PoolError> {
        // A small block is kept, or moves to a block of the thread's cache, without the lock.
        let cached = tcache::with_cache(&self.pool, &self.cache_id, |cache| {
            let cache = cache?;
            // SAFETY: `ptr` is a live block of this pool (the caller's contract), so its tag
            // reads soundly without the lock.
            let usable = unsafe { <InlineHeap>::unlocked_usable_size(ptr) }?;
            // SAFETY: a live block of `usable` bytes, so in no cache, that the caller gives up
            // if it moves. A refusal (its payload happening to read as the caches' key) leaves
            // it to the pool's path below.
            unsafe {
                self.pool
                    .realloc_with_cache(cache, ptr, usable, align, new_size)
            }?
            .ok()
        });
        if let Some(p) = cached {
            return Ok(p);
        }
        // SAFETY: forwarded caller contract.
        unsafe { self.pool.realloc_block(ptr, size, align, new_size) }
    }
}

tagalloc::global_alloc_via_shared!(impl GlobalAlloc for HostAllocator);
