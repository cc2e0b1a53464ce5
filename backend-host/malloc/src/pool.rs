//! The one pool every C call goes to, and the operations the C interface is made of, in the
//! pool's terms: sizes learnt from the heap, failures as `None`.
//!
//! **How `free` finds a size.** C's `free` gets a pointer only, while the pool frees a block of
//! a given size (the size tells a bypassed block, whose region goes back to the system at
//! once). The inline heap keeps every block's size in the tag word before it, so the heap
//! answers in O(1) (`InlineHeap::usable_size`: the chunk's bytes less its tag, at least what
//! was asked) and that is the size the block is freed with: `Pool::free` compares it with the
//! bypass threshold, and for a block above it finds the block's region in the pool's bypass
//! table and unmaps it. The tag is read under the pool's lock, with the free: the lock holder
//! rewrites a block's tag word when its neighbour changes state (the `PREV_IN_USE` bit), so
//! reading it without the lock would race. In checked mode the size comes from
//! `InlineHeap::checked_usable_size` instead, which proves the pointer first.
//!
//! **The per-thread cache.** Outside checked mode, small blocks (chunks up to 1040 bytes) are
//! allocated from and freed into the calling thread's cache (`tagalloc_host::CacheBinding`)
//! without the lock. A cached free still needs the block's size, before any lock: it reads the
//! tag word with a relaxed atomic load (`InlineHeap::unlocked_usable_size`), which is sound
//! because the lock holder's only write to a live block's tag, the `PREV_IN_USE` bit, is a
//! relaxed atomic store that keeps the size bits. A tag that says the chunk is free (a double
//! free the heap can see) or a size above the cached classes takes the locked path above,
//! which reports it. A double free of a block sitting in a cache, this thread's or another's,
//! is refused by the cache's key (see `tagalloc::ThreadCache`). Checked mode bypasses the
//! caches altogether: every free is proven under the lock.

use core::ptr::NonNull;

use tagalloc::{Class, Error, InlineHeap, Pool, PoolStats, SharedPool};
use tagalloc_host::{CacheBinding, HostAllocator, HostPool, MmapSource};

use crate::lock::PoolLock;
use crate::options;
use crate::report;

/// The alignment of every block `malloc` returns: glibc's `MALLOC_ALIGNMENT` on 64-bit
/// targets (`2 * sizeof(size_t)`), which is also the inline heap's granule.
pub(crate) const MIN_ALIGN: usize = 16;

/// The pool: the host pool (an inline heap over `mmap` regions) with the host allocator's
/// policy: regions doubling from 1 MiB to 64 MiB, requests above 1 MiB in mappings of their
/// own (unmapped on free), `malloc_trim` unmapping wholly free regions and free region ends
/// and releasing the pages of free chunks of 64 KiB or more. Its lock is [`PoolLock`], which
/// the fork handlers can reach. Nothing is mapped until the first allocation.
static POOL: HostPool<PoolLock> = SharedPool::new(Pool::new(
    InlineHeap::new(),
    MmapSource::new(),
    HostAllocator::POLICY,
));

/// The threads' caches in front of [`POOL`].
static CACHES: CacheBinding = CacheBinding::new();

/// Sets the calling thread's `errno`.
#[inline]
pub(crate) fn set_errno(e: i32) {
    // SAFETY: `__errno_location` returns this thread's errno, valid for the thread's life.
    unsafe { *libc::__errno_location() = e };
}

/// Reads the calling thread's `errno`.
#[inline]
fn errno() -> i32 {
    // SAFETY: as in `set_errno`.
    unsafe { *libc::__errno_location() }
}

/// `size` bytes (at least one: C's `malloc(0)` returns a unique pointer) aligned to `align` (a
/// power of two, at least [`MIN_ALIGN`]); `None` with `errno = ENOMEM` on failure. A success
/// leaves `errno` as it was, though the pool's growth may have made a failed `mremap` first.
#[inline]
pub(crate) fn alloc(size: usize, align: usize) -> Option<NonNull<u8>> {
    let saved = errno();
    let got = if options::checked() {
        POOL.alloc(size.max(1), align)
    } else {
        CACHES.alloc(&POOL, size.max(1), align)
    };
    match got {
        Ok(p) => {
            set_errno(saved);
            Some(p)
        }
        Err(_) => {
            set_errno(libc::ENOMEM);
            None
        }
    }
}

/// The usable size of `ptr`, read under the lock (see the module docs): proven in checked
/// mode, else from the block's tag (which refuses a block already free).
///
/// # Safety
/// Unless checked mode is on, `ptr` must be a block of this pool, live or freed.
#[inline]
unsafe fn size_of(
    p: &Pool<InlineHeap, MmapSource>,
    ptr: NonNull<u8>,
    checked: bool,
) -> Result<usize, Error> {
    if checked {
        p.heap().checked_usable_size(ptr)
    } else {
        // SAFETY: forwarded caller contract.
        unsafe { p.heap().usable_size(ptr) }
    }
}

/// Frees `ptr`. A refusal (a double free; in checked mode also a foreign pointer) is counted
/// and reported, and frees nothing.
///
/// # Safety
/// `ptr` came from this pool and is not used after this call. In checked mode a pointer that
/// did not is refused, not undefined behaviour.
#[inline]
pub(crate) unsafe fn free(ptr: NonNull<u8>) {
    let checked = options::checked();
    if !checked {
        // SAFETY: forwarded caller contract: outside checked mode `ptr` is a live block of
        // this pool, owned by the caller (see the module docs on the unlocked read).
        let size = unsafe { <InlineHeap>::unlocked_usable_size(ptr) };
        if let Some(size) = size.filter(|&n| Class::of(n, 1).is_some()) {
            // SAFETY: forwarded caller contract; `size` is the block's usable size.
            if let Err(e) = unsafe { CACHES.free(&POOL, ptr, size) } {
                report::refusal("free", ptr.as_ptr(), e);
            }
            return;
        }
    }
    let done = POOL.with_pool(|p| {
        // SAFETY: forwarded caller contract.
        let size = unsafe { size_of(p, ptr, checked) }?;
        // SAFETY: forwarded caller contract; `size` is the block's own.
        unsafe { p.free(ptr, size) }
    });
    if let Err(e) | Ok(Err(e)) = done {
        report::refusal("free", ptr.as_ptr(), e);
    }
}

/// Resizes `ptr` to `new_size` bytes (at least one): in place when the heap can, else moved
/// (copying what both hold). `None` on failure, the block untouched: `errno = ENOMEM`, or
/// `EINVAL` for a refused pointer (counted and reported as a refused free).
///
/// # Safety
/// As for [`free`]; on success `ptr` is not used again unless it was returned.
pub(crate) unsafe fn realloc(ptr: NonNull<u8>, new_size: usize) -> Option<NonNull<u8>> {
    let checked = options::checked();
    let saved = errno();
    let done = POOL.with_pool(|p| {
        // SAFETY: forwarded caller contract.
        let old = match unsafe { size_of(p, ptr, checked) } {
            Ok(n) => n,
            Err(e) => return Err(Some(e)),
        };
        // SAFETY: forwarded caller contract; `old` is the block's own size.
        unsafe { p.realloc(ptr, old, MIN_ALIGN, new_size.max(1)) }.map_err(|_| None)
    });
    match done {
        Ok(Ok(p)) => {
            set_errno(saved);
            Some(p)
        }
        Ok(Err(None)) => {
            set_errno(libc::ENOMEM);
            None
        }
        Ok(Err(Some(e))) | Err(e) => {
            report::refusal("realloc", ptr.as_ptr(), e);
            set_errno(libc::EINVAL);
            None
        }
    }
}

/// The bytes usable at `ptr` (at least what was asked for); 0 for a refused pointer.
///
/// # Safety
/// As for [`free`], except that `ptr` stays live.
pub(crate) unsafe fn usable_size(ptr: NonNull<u8>) -> usize {
    let checked = options::checked();
    // SAFETY: forwarded caller contract.
    match POOL.with_pool(|p| unsafe { size_of(p, ptr, checked) }) {
        Ok(Ok(n)) => n,
        _ => 0,
    }
}

/// Gives memory back to the system (`Pool::trim`); whether anything was.
/// The calling thread's cache goes back to the pool first (other threads keep theirs).
pub(crate) fn trim() -> bool {
    CACHES.flush_current(&POOL);
    POOL.trim()
        .is_ok_and(|t| t.regions > 0 || t.bytes > 0 || t.released > 0)
}

/// The pool's statistics; `None` only if this thread holds the pool's lock.
pub(crate) fn stats() -> Option<PoolStats> {
    POOL.stats().ok()
}
