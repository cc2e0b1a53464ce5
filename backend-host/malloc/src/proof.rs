//! The library's one proof of a pointer before a thread's cache trusts it
//! ([`tagalloc::PointerProof`], implemented by the pool's hooks, [`Ranges`]): without the lock,
//! a free's pointer against the ranges the hooks publish and the thread's memo of them, then
//! its tag (`cached_size`); under the lock, a block leaving a cache for the heap against the
//! hooks' table, its tags and its neighbours' (`free_cached_block`). How and why: `crate::pool`'s
//! docs, "The per-thread cache".

use core::ptr::NonNull;

use tagalloc::{BlockError, Class, InlineHeap, PointerProof, ProofMemo};

use crate::pool::MIN_ALIGN;
use crate::ranges::{self, Ranges};
use crate::report;

impl PointerProof for Ranges {
    /// The usable size of `ptr` if a thread's cache may take it, proven without the lock
    /// (see `crate::pool`'s docs, "The per-thread cache"), through the regions this thread
    /// proved in last (`memo`, when it has a cache); `None` sends the free to the lock.
    #[inline(always)]
    fn cached_size(ptr: NonNull<u8>, memo: Option<&ProofMemo>) -> Option<usize> {
        let a = ptr.addr().get();
        if !a.is_multiple_of(MIN_ALIGN) {
            return None;
        }
        let room = match memo {
            Some(m) => ranges::find_remembered(a, m)?,
            None => ranges::find_unlocked(a)?,
        };
        tagged_size(ptr, room)
    }

    /// A block a thread's cache gives back is proven as an uncached free proves it (its
    /// region, its tags and its neighbours'), and freed with the tags the proof read: damaged
    /// tags are reported and the process aborts; anything else refused stays out of the heap.
    #[inline(always)]
    unsafe fn free_cached_block(
        &self,
        heap: &mut InlineHeap,
        ptr: NonNull<u8>,
        _size: usize,
    ) -> bool {
        let Some((base, len)) = self.find(ptr.addr().get()) else {
            return false;
        };
        // SAFETY: `base..base + len` is one of the heap's regions (the table holds the ranges
        // the pool added to the heap, as grown and cut), and `ptr`, a block handed out by the
        // heap, derives from its memory; the caller gives it up once.
        match unsafe { heap.free_in(ptr, base, len) } {
            Ok(()) => {
                // Checked mode found this block live when it started (the caches hold blocks
                // from before it only).
                self.unmark(ptr.addr().get());
                true
            }
            Err(BlockError::Corrupted(c)) => report::corruption("free", ptr.as_ptr(), c),
            Err(BlockError::Refused(_)) => false,
        }
    }
}

/// [`Ranges`]'s `cached_size` once the word before `ptr` and the `room` bytes from `ptr` on are
/// known to
/// lie in one of the pool's regions: the usable size its tag gives, if of a cached class and
/// inside the room.
#[inline(always)]
fn tagged_size(ptr: NonNull<u8>, room: usize) -> Option<usize> {
    // The word before `ptr` lies inside one of the pool's mapped regions (the mirror was
    // consistent, and a region holding a live block is not given back while it is). For a
    // pointer that breaks the contract inside a region (into a block's middle, or to a block
    // freed to the heap since) the load may meet a plain write of the lock holder: no fault,
    // but a value the checks below may take for a tag; only checked mode proves such
    // pointers.
    // SAFETY: so the load is in bounds; it is atomic, and for a live block, which C's contract
    // makes `ptr`, the lock holder's only write to that word is atomic too (see
    // `InlineHeap::unlocked_usable_size`).
    let size = unsafe { <InlineHeap>::unlocked_usable_size(ptr) }?;
    // The class first, then the fit, each its own branch: so the first is the one range
    // compare a free without the fit makes, and the fit one compare more.
    if !Class::cacheable(size) {
        return None;
    }
    if size > room {
        return None;
    }
    Some(size)
}
