//! The one pool every C call goes to, and the operations the C interface is made of, in the
//! pool's terms: sizes learnt from the heap, failures as `None`.
//!
//! **How `free` finds a size.** C's `free` gets a pointer only, while the pool frees a block of
//! a given size (the size tells a bypassed block, whose region goes back to the system at
//! once). The inline heap keeps every block's size in the tag word before it, and that is the
//! size the block is freed with: `Pool::free` compares it with the bypass threshold, and for a
//! block above it finds the block's region in the pool's bypass table and gives it back. The tags
//! are read under the pool's lock, with the free: the lock holder rewrites a block's tag word
//! when its neighbour changes state (the `PREV_IN_USE` bit), so reading it without the lock
//! would race.
//!
//! **How a pointer is proven first** (`block_size`), before a byte at it is read: its address
//! must lie in one of the pool's regions, found in the table its hooks keep ([`Ranges`]); one
//! that does not is foreign, or a double free if it lies in a range given back lately (a large
//! block given back by its first free, its mapping kept for reuse or unmapped). Inside a region, by
//! default the tags the free will follow must be plausible (`InlineHeap::usable_size_in`, `O(1)`:
//! in use, a whole number of granules, inside the region, the neighbours' flags and footers
//! agreeing, else a walk names the cause). In checked mode (`TAGALLOC_CHECKED`) the pool marks the
//! payload of every block it hands out in its region's bitmap (`crate::marks`, kept by the hooks
//! with the ranges) and clears it when the block is freed or moved, all under the lock; a pointer
//! must then be marked (else it is refused, the word before it naming a double free or an invalid
//! pointer), the tags its free follows plausible as above, the chunk after it the fence or a marked
//! block, and no other mark inside its chunk (`InlineHeap::marked_usable_size`, `O(1)` plus the
//! block's size / 1024 words): so a pointer into the middle of a block is told from a block
//! whose preceding bytes happen to read as sound tags, and a size grown over a live neighbour
//! is found. The blocks live when checked mode starts (allocated before it was known) are
//! marked by one walk of the heap; a region without a bitmap (one could not be mapped, or the
//! table is full) is proven by a walk of the region from its start
//! (`InlineHeap::checked_usable_size`), as before. Damaged tags are reported with their address
//! and the process aborts (`report::corruption`), as glibc does.
//!
//! **The per-thread cache.** Outside checked mode, small blocks (chunks up to 8 KiB) are allocated
//! from and freed into the calling thread's cache (`tagalloc_host::CacheBinding`) without the lock,
//! and a `realloc` of one is kept or moved to a block of the cache without it too
//! (`CacheBinding::realloc_proven`, which proves the pointer as a cached free does). Both proofs a
//! cache relies on are the library's one `tagalloc::PointerProof` (`crate::proof`). A cached free
//! proves its pointer without the lock too, as far as that can be done soundly: its address must
//! lie in one of the pool's regions as the hooks last published them
//! ([`crate::ranges::find_unlocked`]; a thread whose ranges have not changed since its last
//! proofs uses the regions it found then, [`crate::ranges::find_remembered`]), and only then is the
//! tag word before it read, with a relaxed atomic load (`InlineHeap::unlocked_usable_size`), which
//! is sound because the lock holder's only write to a live block's tag, its `PREV_IN_USE` bit, is a
//! relaxed atomic store that keeps the size bits. The tag must say in use, with a size of a cached
//! class that ends inside the region. Anything else (an address in no region, ranges changing
//! meanwhile, a free or larger chunk) takes the locked path above, which proves and reports. A
//! double free of a block sitting in a cache, this thread's or another's, is refused by the cache's
//! key (see `tagalloc::ThreadCache`), and a `realloc` or size query of such a block too. Not made
//! at a cached free: the neighbours' flags and footers of `usable_size_in` (the lock holder writes
//! them as it carves and merges, so they cannot be read without the lock); they are checked when
//! the block leaves its cache for the heap, under the lock (`free_cached_block`, which frees with
//! the tags its proof read: `InlineHeap::free_in`), so damage after a small block is reported then,
//! before the heap follows it. Checked mode bypasses the caches altogether: every allocation and
//! free goes to the pool under the lock, and every free is proven against the bitmaps (a block a
//! cache still holds from before checked mode started is unmarked when it leaves the cache).

use core::ptr::NonNull;

use tagalloc::{BlockError, Error, InlineHeap, Pool, PoolStats, SharedPool};
use tagalloc_host::{CacheBinding, HostAllocator, MmapOptions, MmapSource, Reuse};

use crate::lock::PoolLock;
use crate::options;
use crate::ranges::Ranges;
use crate::report;

/// The alignment of every block `malloc` returns: glibc's `MALLOC_ALIGNMENT` on 64-bit
/// targets (`2 * sizeof(size_t)`), which is also the inline heap's granule.
pub(crate) const MIN_ALIGN: usize = 16;

/// The pool: the host pool (an inline heap over `mmap` regions) with the host allocator's policy:
/// regions doubling from 1 MiB to 64 MiB, requests above 1 MiB in mappings of their own, a free
/// of 128 KiB or more giving back the regions it leaves wholly free, `malloc_trim` giving back
/// wholly free regions and free region ends and releasing the pages of free chunks of 64 KiB or
/// more. The source keeps the mappings given back for reuse ([`Reuse::DEFAULT`]: up to 16
/// ranges and 64 MiB, for 100 ms, and never more than the peak of large mappings handed out less
/// those handed out now), so that a large block freed and another allocated cost no new
/// mapping (a smaller one takes the head of a kept mapping, the tail staying kept), and
/// `malloc_trim` unmaps them. Its lock is [`PoolLock`], which the fork handlers can reach.
/// Nothing is mapped until the first allocation.
static POOL: SharedPool<InlineHeap, MmapSource, Ranges, PoolLock> =
    SharedPool::new(Pool::with_hooks(
        InlineHeap::new(),
        MmapOptions::new().reuse(Reuse::DEFAULT).source(),
        HostAllocator::POLICY,
        Ranges::new(),
    ));

/// The pool itself, as the lock holder sees it.
type Inner = Pool<InlineHeap, MmapSource, Ranges>;

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
    let checked = options::checked();
    if !checked {
        // A hit makes no system call, so `errno` needs no saving.
        if let Some(p) = CACHES.take(&POOL, size.max(1), align) {
            return Some(p);
        }
    }
    alloc_slow(size, align, checked)
}

/// [`alloc`] past a cache hit, out of line: a hit then saves fewer registers.
#[cold]
#[inline(never)]
fn alloc_slow(size: usize, align: usize, checked: bool) -> Option<NonNull<u8>> {
    let saved = errno();
    let got = if checked {
        POOL.with_pool(|p| {
            start_marking(p);
            let b = p.alloc(size.max(1), align).ok()?;
            p.hooks().mark(b.addr().get());
            Some(b)
        })
        .ok()
        .flatten()
        .ok_or(())
    } else {
        CACHES.alloc(&POOL, size.max(1), align).map_err(|_| ())
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

/// A word's bytes: a chunk's head is one word before its payload.
const W: usize = core::mem::size_of::<usize>();

/// Starts checked mode's records of the live blocks (`Ranges::start_marking`) if they have not
/// started: a bitmap for every region, and the blocks live now (allocated before checked mode
/// was known, in a thread's cache or not) marked, by one walk of the heap. Every checked call
/// makes sure of it first, under the lock.
#[inline]
fn start_marking(p: &mut Inner) {
    if !p.hooks().marking() {
        start_marking_now(p);
    }
}

/// [`start_marking`] the first time.
#[cold]
#[inline(never)]
fn start_marking_now(p: &mut Inner) {
    if p.hooks_mut().start_marking() {
        let ranges = p.hooks();
        p.visit(
            |_, _| {},
            |head, _, free| {
                if !free {
                    ranges.mark(head.wrapping_add(W));
                }
            },
        );
    }
}

/// The usable size of the live block at `ptr`, proven before anything is read at it (see the
/// module docs), under the lock. Refused: `ForeignPointer` (not a block's payload),
/// `DoubleFree` (a free block, one a merge absorbed, or a large block whose region went back
/// at its first free); `Corrupted`: tags around it that cannot be.
#[inline(always)]
fn block_size(p: &Inner, ptr: NonNull<u8>, checked: bool) -> Result<usize, BlockError> {
    if !checked {
        if let Some((base, len)) = p.hooks().find(ptr.addr().get()) {
            // SAFETY: `base..base + len` is one of the heap's regions: the hooks' table holds
            // the ranges the pool added to the heap, as grown and cut.
            return unsafe { p.heap().usable_size_in(ptr, base, len) };
        }
    }
    block_size_slow(p, ptr, checked)
}

/// [`block_size`] of a block that must not sit in a thread's cache (a `realloc`, a size
/// query): one that carries the caches' key was freed, so is refused as a double free.
#[inline]
fn block_size_uncached(p: &Inner, ptr: NonNull<u8>, checked: bool) -> Result<usize, BlockError> {
    let n = block_size(p, ptr, checked)?;
    // SAFETY: `ptr` was just proven a live block of this pool (at least 24 bytes).
    if !checked && unsafe { CACHES.is_cached(ptr) } {
        return Err(BlockError::Refused(Error::DoubleFree));
    }
    Ok(n)
}

/// [`block_size`] in checked mode, or for an address the table does not hold.
#[cold]
#[inline(never)]
fn block_size_slow(p: &Inner, ptr: NonNull<u8>, checked: bool) -> Result<usize, BlockError> {
    let a = ptr.addr().get();
    let ranges = p.hooks();
    if checked {
        if let Some((base, len, marks)) = ranges.find_marked(a) {
            // SAFETY: `base..base + len` is one of the heap's regions (the hooks' table holds
            // the ranges the pool added to the heap, as grown and cut).
            return unsafe { p.heap().marked_usable_size(ptr, base, len, &marks) };
        }
    }
    let region = match ranges.find(a) {
        Some(r) => Some(r),
        None if !ranges.complete() => p.heap().region_of(a).map(|(b, l)| (b.addr().get(), l)),
        None => None,
    };
    match region {
        None if ranges.given_back(a) => Err(BlockError::Refused(Error::DoubleFree)),
        None => Err(BlockError::Refused(Error::ForeignPointer)),
        Some(_) if checked => p.heap().checked_usable_size(ptr),
        // SAFETY: `base..base + len` is one of the heap's regions (as above, or the heap
        // named it).
        Some((base, len)) => unsafe { p.heap().usable_size_in(ptr, base, len) },
    }
}

/// Frees `ptr`. A refusal (a double free, a foreign pointer) is counted and reported, and
/// frees nothing; damaged tags are reported and the process aborts.
///
/// # Safety
/// None beyond C's: a pointer that is not a live block is refused, not obeyed, except one
/// into a block whose preceding bytes read as sound tags (see `InlineHeap::usable_size_in`),
/// which only checked mode tells apart.
#[inline]
pub(crate) unsafe fn free(ptr: NonNull<u8>) {
    let checked = options::checked();
    if !checked {
        // SAFETY: `ptr` is a live block of this pool of the usable size the pool's proof gives (as
        // far as the unlocked proof goes: see the module docs), given up by the caller.
        if let Some(done) = unsafe { CACHES.free_proven(&POOL, ptr) } {
            if let Err(e) = done {
                report::bad_pointer("free", ptr.as_ptr(), BlockError::Refused(e));
            }
            return;
        }
    }
    let done = POOL.with_pool(|p| {
        if checked {
            start_marking(p);
        }
        let size = block_size(p, ptr, checked)?;
        if !checked {
            // SAFETY: `ptr` is a live block of `size` bytes of this pool (just proven).
            return unsafe { p.free(ptr, size) }.map_err(BlockError::Refused);
        }
        // Unmarked before the free, which may give its region (and bitmap) back.
        p.hooks().unmark(ptr.addr().get());
        // SAFETY: as above.
        let freed = unsafe { p.free(ptr, size) };
        if freed.is_err() {
            p.hooks().mark(ptr.addr().get());
        }
        freed.map_err(BlockError::Refused)
    });
    match done {
        Ok(Ok(())) => {}
        Ok(Err(e)) => report::bad_pointer("free", ptr.as_ptr(), e),
        Err(e) => report::bad_pointer("free", ptr.as_ptr(), BlockError::Refused(e)),
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
    if !checked {
        // A small block: kept, or moved to a block of the thread's cache, without the lock.
        // SAFETY: `ptr` is a live block of this pool of the usable size the pool's proof gives (as
        // far as the unlocked proof goes: see the module docs); the caller's contract.
        let done = unsafe { CACHES.realloc_proven(&POOL, ptr, MIN_ALIGN, new_size.max(1)) };
        match done {
            Some(Ok(p)) => {
                set_errno(saved);
                return Some(p);
            }
            Some(Err(e)) => {
                report::bad_pointer("realloc", ptr.as_ptr(), BlockError::Refused(e));
                set_errno(libc::EINVAL);
                return None;
            }
            None => {}
        }
    }
    let done = POOL.with_pool(|p| {
        if checked {
            start_marking(p);
        }
        let old = match block_size_uncached(p, ptr, checked) {
            Ok(n) => n,
            Err(e) => return Err(Some(e)),
        };
        // SAFETY: `ptr` is a live block of `old` bytes of this pool (just proven).
        let new = unsafe { p.realloc(ptr, old, MIN_ALIGN, new_size.max(1)) }.map_err(|_| None)?;
        if checked && new != ptr {
            // Moved: the old payload is no longer live (its region may be gone: then nothing is
            // cleared), the new one is.
            p.hooks().unmark(ptr.addr().get());
            p.hooks().mark(new.addr().get());
        }
        Ok(new)
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
        Ok(Err(Some(e))) => {
            report::bad_pointer("realloc", ptr.as_ptr(), e);
            set_errno(libc::EINVAL);
            None
        }
        Err(e) => {
            report::bad_pointer("realloc", ptr.as_ptr(), BlockError::Refused(e));
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
    match POOL.with_pool(|p| {
        if checked {
            start_marking(p);
        }
        block_size_uncached(p, ptr, checked)
    }) {
        Ok(Ok(n)) => n,
        Ok(Err(BlockError::Corrupted(c))) => {
            report::corruption("malloc_usable_size", ptr.as_ptr(), c)
        }
        _ => 0,
    }
}

/// Gives memory back to the system (`Pool::trim`: free regions, free ends, the pages of free
/// chunks, and the mappings the source kept for reuse); whether anything was.
/// The calling thread's cache and the batches the caches handed to one another go back to
/// the pool first (other threads keep their caches).
pub(crate) fn trim() -> bool {
    CACHES.flush_current(&POOL);
    let _ = POOL.flush_transfer();
    POOL.trim().is_ok_and(|t| t.gave_back() || t.released > 0)
}

/// Gives the calling thread's cache back to the pool (at `exit`).
pub(crate) fn flush_calling_thread() {
    CACHES.flush_current(&POOL);
}

/// The pool's statistics; `None` only if this thread holds the pool's lock.
pub(crate) fn stats() -> Option<PoolStats> {
    POOL.stats().ok()
}
