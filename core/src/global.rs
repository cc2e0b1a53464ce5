//! A spin-locked [`InlineHeap`] that implements [`GlobalAlloc`], for `no_std` programs:
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

use core::alloc::{GlobalAlloc, Layout};
use core::ptr::{null_mut, NonNull};

use spin::Mutex;

use crate::error::Error;
use crate::inline::InlineHeap;
use crate::stats::Stats;

/// The heap and the arena it has yet to claim.
struct State {
    heap: InlineHeap,
    pending: Option<(*mut u8, usize)>,
}

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
}

/// A spin-locked inline heap usable as `#[global_allocator]`. Allocation failures return null,
/// as `GlobalAlloc` requires; nothing panics.
pub struct GlobalHeap {
    state: Mutex<State>,
}

// SAFETY: all access to the heap and the pending arena pointer goes through the mutex, and the
// heap owns its memory exclusively, so sharing `&GlobalHeap` across threads is sound.
unsafe impl Sync for GlobalHeap {}
// SAFETY: as above; nothing in the state is tied to a thread.
unsafe impl Send for GlobalHeap {}

impl GlobalHeap {
    /// A heap with no memory yet; give it some with [`GlobalHeap::add_region`].
    pub const fn new() -> Self {
        GlobalHeap {
            state: Mutex::new(State {
                heap: InlineHeap::new(),
                pending: None,
            }),
        }
    }

    /// A heap over a static array, claimed on first use.
    ///
    /// The array must be used by nothing else for as long as the heap is in use (normally: a
    /// `static mut` that nothing else names). Taking `&raw mut` of it is the only access this
    /// needs, so no reference to the `static mut` is ever made.
    pub const fn with_arena<const N: usize>(arena: *mut [u8; N]) -> Self {
        GlobalHeap {
            state: Mutex::new(State {
                heap: InlineHeap::new(),
                pending: Some((arena.cast::<u8>(), N)),
            }),
        }
    }

    /// Adds memory to the heap (see [`InlineHeap::add_region`]).
    ///
    /// # Safety
    /// As for [`InlineHeap::add_region`].
    pub unsafe fn add_region(&self, base: *mut u8, len: usize) -> Result<(), Error> {
        // SAFETY: forwarded caller contract.
        unsafe { self.state.lock().heap().add_region(base, len) }
    }

    /// Runs `f` with the locked heap (statistics, `check()`, trimming).
    pub fn with_heap<R>(&self, f: impl FnOnce(&mut InlineHeap) -> R) -> R {
        f(self.state.lock().heap())
    }

    /// The heap's statistics.
    pub fn stats(&self) -> Stats {
        self.with_heap(|h| h.stats())
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
        let mut st = self.state.lock();
        st.heap()
            .alloc(layout.size(), layout.align())
            .map_or(null_mut(), NonNull::as_ptr)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if let Some(p) = NonNull::new(ptr) {
            // SAFETY: `GlobalAlloc`'s contract: `ptr` was allocated here with `layout`. A
            // refused free (reported by the checked build) is counted in the statistics;
            // `dealloc` has no way to return it.
            let _ = unsafe { self.state.lock().heap().free(p, layout.size()) };
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let Some(p) = NonNull::new(ptr) else {
            return null_mut();
        };
        let mut st = self.state.lock();
        // SAFETY: `GlobalAlloc`'s contract, as in `dealloc`.
        unsafe {
            st.heap()
                .realloc(p, layout.size(), layout.align(), new_size)
        }
        .map_or(null_mut(), NonNull::as_ptr)
    }
}
