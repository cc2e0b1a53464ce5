//! The one seam through which a pointer is proven before a per-thread cache trusts it: "is this
//! address a live block of this pool's heap, and may a cache take it", asked twice of the same
//! implementation, [`PointerProof`]:
//!
//! - **without the lock**, when a free whose caller knows only the pointer (C's `free`) would
//!   go into the calling thread's cache: [`PointerProof::cached_size`] gives the block's usable
//!   size, or sends the free to the lock. The hooks sit behind the pool's lock then, so this
//!   proof reads what its implementation publishes for it (the malloc library: its regions,
//!   under a sequence lock), and the calling thread's [`ProofMemo`];
//! - **under the lock**, when a block leaves a cache for the heap (a spill, a flush, a trim of
//!   the transfer): [`PointerProof::free_cached_block`] proves it as a free that bypasses the
//!   cache would, with the tags and neighbours that could not be read without the lock, and
//!   frees it.
//!
//! The trait extends the pool's [`Hooks`], since the locked half reads what the hooks keep of
//! the pool's regions; a pool whose hooks prove nothing ([`NoHooks`]) takes the defaults: no
//! unlocked proof (the caller gives every size), and the heap's own free under the lock.

use core::cell::Cell;
use core::ptr::NonNull;

use crate::inline::heap::InlineHeap;
use crate::pool::hooks::{Hooks, NoHooks};

/// Nine words a thread keeps between its proofs of pointers of one pool (the malloc library:
/// the regions it proved in last and the sequence of its table it read): zero at first, kept
/// while the thread's cache serves the same pool, read and written by that thread's
/// [`PointerProof::cached_size`] only.
pub type ProofMemo = [Cell<usize>; 9];

/// How a pool's blocks are proven before a cache takes them or gives them back (see the module
/// docs): implemented once, by the pool's hooks.
///
/// # Examples
///
/// ```
/// use core::ptr::NonNull;
/// use tagalloc::{Hooks, InlineHeap, PointerProof, ProofMemo};
///
/// /// Counts the blocks that came back from caches.
/// #[derive(Default)]
/// struct Counted(core::cell::Cell<usize>);
///
/// impl Hooks for Counted {}
///
/// impl PointerProof for Counted {
///     unsafe fn free_cached_block(&self, heap: &mut InlineHeap, ptr: NonNull<u8>, size: usize) -> bool {
///         self.0.set(self.0.get() + 1);
///         // SAFETY: the caller's promise.
///         unsafe { heap.free(ptr, size) }.is_ok()
///     }
/// }
/// # assert_eq!(<Counted as PointerProof>::cached_size(NonNull::dangling(), None), None);
/// ```
pub trait PointerProof: Hooks {
    /// Without the pool's lock: the usable size of the block at `ptr` if it is a live block of
    /// this pool's heap that a thread's cache may take (its size of a cached class), `None` to
    /// send the free to the lock, where it is proven in full. `memo` is the calling thread's
    /// [`ProofMemo`] for this pool when the thread has a cache for it. Nothing at `ptr` may be
    /// read before its address is known to lie in one of the pool's regions. By default
    /// `None`: every free goes to the lock, or brings its size.
    #[inline(always)]
    fn cached_size(ptr: NonNull<u8>, memo: Option<&ProofMemo>) -> Option<usize> {
        let _ = (ptr, memo);
        None
    }

    /// Under the pool's lock: frees into the pool's `heap` the block at `ptr`, of a per-thread
    /// cache's class of `size` usable bytes, coming back from the cache (a spill or a flush:
    /// see [`crate::ThreadCache`]), and says whether it did. An implementation that proves
    /// every free proves the block here as it would a free that bypasses the cache, and frees
    /// it with what the proof read ([`InlineHeap::free_in`]; it may report damage and abort);
    /// a block it refuses stays out of the heap for good. By default the heap's
    /// [`InlineHeap::free`].
    ///
    /// # Safety
    /// `ptr` is a block the cache held: of `heap`, with at least `size` usable bytes, given up
    /// once, as far as the proof that let the cache take it goes.
    #[inline(always)]
    unsafe fn free_cached_block(
        &self,
        heap: &mut InlineHeap,
        ptr: NonNull<u8>,
        size: usize,
    ) -> bool {
        // SAFETY: the caller's promise.
        unsafe { heap.free(ptr, size) }.is_ok()
    }
}

/// No proof beyond the heap's own free.
impl PointerProof for NoHooks {}
