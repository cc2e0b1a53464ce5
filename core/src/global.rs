//! The shared inline heap: an [`InlineHeap`] behind a spin lock, with a lock-free queue for
//! frees that arrive while the lock is held. It implements [`GlobalAlloc`] (and, with the
//! `allocator-api2` feature, `allocator_api2::alloc::Allocator`), for `no_std` programs:
//!
//! ```no_run
//! use tagalloc::GlobalHeap;
//!
//! static mut ARENA: [u8; 1 << 20] = [0; 1 << 20];
//! #[global_allocator]
//! static HEAP: GlobalHeap = GlobalHeap::with_arena(&raw mut ARENA);
//! # fn main() {}
//! ```
//!
//! The arena is claimed on the first allocation (writing tags is not possible in a `const`
//! initialiser), aligned up to the granule first.
//!
//! A free from a thread that cannot take the lock at once does not wait: it pushes the
//! allocation on a [`RemoteStack`] (the link lives in the freed memory) and returns. Whoever
//! takes the lock next frees everything queued before serving its own request, as do
//! [`GlobalHeap::with_heap`] and [`GlobalHeap::stats`], so a queued free is never lost and the
//! queued memory is never handed out before it has really been freed.

use core::alloc::{GlobalAlloc, Layout};
use core::ptr::{null_mut, NonNull};

use crate::error::Error;
use crate::inline::{InlineHeap, HOST_GRANULE};
use crate::lock::{Guard, SpinLock};
use crate::remote_stack::{RemoteStack, LINK_ALIGN, LINK_BYTES};
use crate::stats::Stats;
use crate::sync::const_unless_loom;

const _: () = assert!(
    LINK_ALIGN <= HOST_GRANULE,
    "payloads must be able to hold a link"
);

/// Every allocation is made at least this long, so that any of them can be queued. It costs
/// nothing: a minimum chunk's payload is at least as long.
#[inline]
fn queueable(size: usize) -> usize {
    size.max(LINK_BYTES)
}

/// The heap, the arena it has yet to claim, and a count of queued frees.
struct State {
    heap: InlineHeap,
    pending: Option<(*mut u8, usize)>,
    /// Frees that went through the queue.
    deferred: u64,
}

// SAFETY: the pending arena pointer is only a promise of memory (the `with_arena` contract)
// that is claimed under the lock; the heap itself is `Send`.
unsafe impl Send for State {}

impl State {
    fn heap(&mut self) -> &mut InlineHeap {
        if let Some((base, len)) = self.pending.take() {
            let g = self.heap.granule();
            let skip = base.align_offset(g).min(len);
            // SAFETY: `with_arena`'s contract: the arena is valid, unused by anything else,
            // and lives for the program; `skip <= len` keeps the range inside it. A too-small
            // arena is refused by `add_region` and leaves the heap empty (allocations fail).
            let _ = unsafe { self.heap.add_region(base.wrapping_add(skip), len - skip) };
        }
        &mut self.heap
    }

    /// Frees everything queued on `remote`.
    fn drain(&mut self, remote: &RemoteStack) {
        // SAFETY: every payload taken is freed below, under the lock this `&mut` comes from.
        for (p, size) in unsafe { remote.take_all() } {
            // SAFETY: `p` was queued by `GlobalHeap::free` on this heap's behalf: the caller
            // promised it is a live allocation of `size` bytes that it gives up. A refused
            // free (checked build) is counted in the statistics.
            let _ = unsafe { self.heap().free(p, size) };
            self.deferred += 1;
        }
    }
}

/// A spin-locked inline heap usable from many threads and as `#[global_allocator]`.
/// Allocation failures return null (or an [`Error`] from the `try_` methods); nothing panics.
pub struct GlobalHeap {
    state: SpinLock<State>,
    remote: RemoteStack,
}

impl GlobalHeap {
    const_unless_loom! {
        /// A heap with no memory yet; give it some with [`GlobalHeap::add_region`].
        pub fn new() -> Self {
            GlobalHeap {
                state: SpinLock::new(State {
                    heap: InlineHeap::new(),
                    pending: None,
                    deferred: 0,
                }),
                remote: RemoteStack::new(),
            }
        }
    }

    const_unless_loom! {
        /// A heap over a static array, claimed on first use.
        ///
        /// The array must be used by nothing else for as long as the heap is in use (normally:
        /// a `static mut` that nothing else names). Taking `&raw mut` of it is the only access
        /// this needs, so no reference to the `static mut` is ever made.
        pub fn with_arena<const N: usize>(arena: *mut [u8; N]) -> Self {
            GlobalHeap {
                state: SpinLock::new(State {
                    heap: InlineHeap::new(),
                    pending: Some((arena.cast::<u8>(), N)),
                    deferred: 0,
                }),
                remote: RemoteStack::new(),
            }
        }
    }

    /// The lock, with the queued frees done.
    fn locked(&self) -> Guard<'_, State> {
        let mut st = self.state.lock();
        st.drain(&self.remote);
        st
    }

    /// Adds memory to the heap (see [`InlineHeap::add_region`]).
    ///
    /// # Safety
    /// As for [`InlineHeap::add_region`].
    pub unsafe fn add_region(&self, base: *mut u8, len: usize) -> Result<(), Error> {
        // SAFETY: forwarded caller contract.
        unsafe { self.locked().heap().add_region(base, len) }
    }

    /// Runs `f` with the locked heap (statistics, `check()`, trimming), after doing every
    /// queued free.
    pub fn with_heap<R>(&self, f: impl FnOnce(&mut InlineHeap) -> R) -> R {
        f(self.locked().heap())
    }

    /// The heap's statistics, after doing every queued free.
    pub fn stats(&self) -> Stats {
        self.with_heap(|h| h.stats())
    }

    /// How many frees so far found the lock taken and went through the queue.
    pub fn deferred_frees(&self) -> u64 {
        self.locked().deferred
    }

    /// Allocates `size` bytes aligned to `align` (see [`InlineHeap::alloc`]).
    pub fn try_alloc(&self, size: usize, align: usize) -> Result<NonNull<u8>, Error> {
        self.locked().heap().alloc(queueable(size), align)
    }

    /// Frees an allocation of `size` bytes. If the lock is taken, the free is queued and done
    /// by the next lock holder, and `Ok` is returned at once; a queued free that the checked
    /// build refuses is counted in [`Stats::rejected_frees`].
    ///
    /// # Safety
    /// As for [`InlineHeap::free`]: `ptr` came from this heap with `size` and is not used
    /// after the call. Unlike `InlineHeap::free`, a free that is queued is not checked before
    /// the call returns, so a double free must not be relied on to be reported here.
    pub unsafe fn try_free(&self, ptr: NonNull<u8>, size: usize) -> Result<(), Error> {
        let size = queueable(size);
        match self.state.try_lock() {
            Some(mut st) => {
                st.drain(&self.remote);
                // SAFETY: forwarded caller contract.
                unsafe { st.heap().free(ptr, size) }
            }
            None => {
                // SAFETY: the caller gives up `ptr`, a live allocation of this heap; every
                // allocation is at least `LINK_BYTES` long (`queueable`) and aligned to the
                // granule, at least `LINK_ALIGN`.
                unsafe { self.remote.push(ptr, size) };
                Ok(())
            }
        }
    }

    /// Resizes an allocation (see [`InlineHeap::realloc`]).
    ///
    /// # Safety
    /// As for [`InlineHeap::realloc`].
    pub unsafe fn try_realloc(
        &self,
        ptr: NonNull<u8>,
        size: usize,
        align: usize,
        new_size: usize,
    ) -> Result<NonNull<u8>, Error> {
        // SAFETY: forwarded caller contract; the sizes are made queueable as in `try_alloc`.
        unsafe {
            self.locked()
                .heap()
                .realloc(ptr, queueable(size), align, queueable(new_size))
        }
    }
}

impl Default for GlobalHeap {
    fn default() -> Self {
        Self::new()
    }
}

// SAFETY: `alloc` returns either null or a fresh block of at least `layout.size()` bytes aligned
// to `layout.align()` that no other live allocation overlaps (the heap's invariants); `dealloc`
// and `realloc` forward the caller's promise that `ptr` came from this allocator with `layout`.
unsafe impl GlobalAlloc for GlobalHeap {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        self.try_alloc(layout.size(), layout.align())
            .map_or(null_mut(), NonNull::as_ptr)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if let Some(p) = NonNull::new(ptr) {
            // SAFETY: `GlobalAlloc`'s contract: `ptr` was allocated here with `layout`. A
            // refused free (checked build) is counted in the statistics; `dealloc` has no way
            // to return it.
            let _ = unsafe { self.try_free(p, layout.size()) };
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let Some(p) = NonNull::new(ptr) else {
            return null_mut();
        };
        // SAFETY: `GlobalAlloc`'s contract, as in `dealloc`.
        unsafe { self.try_realloc(p, layout.size(), layout.align(), new_size) }
            .map_or(null_mut(), NonNull::as_ptr)
    }
}

#[cfg(feature = "allocator-api2")]
mod allocator_api {
    use allocator_api2::alloc::{AllocError, Allocator, Layout};
    use core::ptr::{self, NonNull};

    use super::GlobalHeap;

    /// The well-aligned dangling pointer `Allocator` hands out for zero-sized requests.
    fn dangling(layout: Layout) -> Result<NonNull<u8>, AllocError> {
        NonNull::new(ptr::without_provenance_mut(layout.align())).ok_or(AllocError)
    }

    impl GlobalHeap {
        /// Moves an allocation to a fresh one for `new` (a resize that also changes the
        /// alignment, or one from or to zero bytes).
        ///
        /// # Safety
        /// `ptr` is a live allocation of this heap with `old`, given up if this succeeds.
        unsafe fn move_to(
            &self,
            ptr: NonNull<u8>,
            old: Layout,
            new: Layout,
        ) -> Result<NonNull<[u8]>, AllocError> {
            let fresh = self.allocate(new)?;
            let keep = old.size().min(new.size());
            // SAFETY: both blocks are live, distinct, and at least `keep` long.
            unsafe { ptr::copy_nonoverlapping(ptr.as_ptr(), fresh.cast().as_ptr(), keep) };
            // SAFETY: the caller's contract; the contents have been moved.
            unsafe { self.deallocate(ptr, old) };
            Ok(fresh)
        }

        /// Resizes in place when it can (same alignment, neither size zero), else moves.
        ///
        /// # Safety
        /// As for [`Allocator::grow`] / [`Allocator::shrink`].
        unsafe fn resize(
            &self,
            ptr: NonNull<u8>,
            old: Layout,
            new: Layout,
        ) -> Result<NonNull<[u8]>, AllocError> {
            if old.size() == 0 || new.size() == 0 || old.align() != new.align() {
                // SAFETY: forwarded caller contract.
                return unsafe { self.move_to(ptr, old, new) };
            }
            // SAFETY: forwarded caller contract: `ptr` is live with `old`.
            let p = unsafe { self.try_realloc(ptr, old.size(), old.align(), new.size()) }
                .map_err(|_| AllocError)?;
            Ok(NonNull::slice_from_raw_parts(p, new.size()))
        }
    }

    // SAFETY: blocks are fresh, non-overlapping and as large and aligned as asked (the heap's
    // invariants) and stay valid until freed; zero-sized requests get a dangling aligned
    // pointer that is never passed to the heap; the heap may be moved or shared (it is `Sync`),
    // and blocks are freed through whichever reference to it.
    unsafe impl Allocator for GlobalHeap {
        fn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
            if layout.size() == 0 {
                return Ok(NonNull::slice_from_raw_parts(dangling(layout)?, 0));
            }
            let p = self
                .try_alloc(layout.size(), layout.align())
                .map_err(|_| AllocError)?;
            Ok(NonNull::slice_from_raw_parts(p, layout.size()))
        }

        unsafe fn deallocate(&self, ptr: NonNull<u8>, layout: Layout) {
            if layout.size() != 0 {
                // SAFETY: `Allocator`'s contract: `ptr` is live here with `layout`.
                let _ = unsafe { self.try_free(ptr, layout.size()) };
            }
        }

        unsafe fn grow(
            &self,
            ptr: NonNull<u8>,
            old: Layout,
            new: Layout,
        ) -> Result<NonNull<[u8]>, AllocError> {
            // SAFETY: forwarded caller contract.
            unsafe { self.resize(ptr, old, new) }
        }

        unsafe fn shrink(
            &self,
            ptr: NonNull<u8>,
            old: Layout,
            new: Layout,
        ) -> Result<NonNull<[u8]>, AllocError> {
            // SAFETY: forwarded caller contract.
            unsafe { self.resize(ptr, old, new) }
        }
    }
}
