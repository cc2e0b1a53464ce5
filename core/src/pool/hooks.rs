//! Region hooks: called by a [`crate::Pool`] exactly once for every range it obtains from its
//! source and every range it gives back (TensorFlow's sub-allocator visitors), e.g. to register
//! host memory with CUDA (`cuMemHostRegister`) or with an RDMA NIC, and to unregister it.
//!
//! Hooks run while the pool is being changed (inside its lock, for a shared pool): they must not
//! call back into the pool.

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
}

/// No hooks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NoHooks;

impl Hooks for NoHooks {}
