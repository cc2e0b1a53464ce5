//! Region hooks: called by a [`crate::Pool`] exactly once for every range it obtains from its
//! source and every range it gives back (TensorFlow's sub-allocator visitors), e.g. to register
//! host memory with CUDA (`cuMemHostRegister`) or with an RDMA NIC, and to unregister it.
//!
//! Hooks run while the pool is being changed (inside its lock, for a shared pool): they must not
//! call back into the pool.

use core::ptr::NonNull;

use crate::inline::heap::InlineHeap;

/// Callbacks on the ranges a pool obtains and gives back. Every method does nothing by
/// default. Addresses are the ranges' first bytes, lengths in bytes.
///
/// # Examples
///
/// ```
/// use tagalloc::Hooks;
///
/// /// Counts the bytes registered, as a `cuMemHostRegister` hook would register them.
/// #[derive(Default)]
/// struct Registered(usize);
///
/// impl Hooks for Registered {
///     fn obtained(&mut self, _base: usize, len: usize) { self.0 += len; }
///     fn grown(&mut self, _base: usize, _at: usize, len: usize) { self.0 += len; }
///     fn given_back(&mut self, _base: usize, len: usize) { self.0 -= len; }
///     fn shrunk(&mut self, _base: usize, _at: usize, len: usize) { self.0 -= len; }
/// }
/// # let mut r = Registered::default();
/// # r.obtained(0, 4096);
/// # assert_eq!(r.0, 4096);
/// ```
pub trait Hooks {
    /// A new region `base..base + len` was obtained (before anything is allocated in it).
    fn obtained(&mut self, base: usize, len: usize) {
        let _ = (base, len);
    }
    /// The region at `base` grew in place by `at..at + len`.
    fn grown(&mut self, base: usize, at: usize, len: usize) {
        let _ = (base, at, len);
    }
    /// The region `base..base + len` was given back, whole (after its last use).
    fn given_back(&mut self, base: usize, len: usize) {
        let _ = (base, len);
    }
    /// The tail `at..at + len` of the region at `base` was given back; the region stays.
    fn shrunk(&mut self, base: usize, at: usize, len: usize) {
        let _ = (base, at, len);
    }
    /// Frees into an inline pool's `heap` the block at `ptr`, of a per-thread cache's class of
    /// `size` usable bytes, coming back from the cache (a spill or a flush, under the lock: see
    /// [`crate::ThreadCache`]), and says whether it did. A library that proves every free
    /// proves the block here as it would a free that bypasses the cache, and frees it with
    /// what the proof read ([`InlineHeap::free_in`]; it may report damage and abort); a block
    /// it refuses stays out of the heap for good. By default the heap's [`InlineHeap::free`].
    ///
    /// # Safety
    /// `ptr` is a block the cache held: of `heap`, with at least `size` usable bytes, given up
    /// once, as far as the proof that let the cache take it goes.
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

/// No hooks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NoHooks;

impl Hooks for NoHooks {}
