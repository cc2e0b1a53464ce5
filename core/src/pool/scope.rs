//! Per-scope tracking (TensorFlow's `TrackingAllocator`): a [`Scope`] counts the bytes
//! allocated through it, what is still live, and its high watermark, so that one part of a
//! program (a model's forward pass, a request) can be measured while it shares a pool with the
//! rest. Its counters are atomics, so it works with shared pools and across threads.

use core::sync::atomic::{AtomicUsize, Ordering::Relaxed};

/// Byte counters for the allocations made through one scope (see
/// [`crate::Pool::alloc_in`]). Sizes are the sizes asked for.
///
/// # Examples
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use tagalloc::{DetachedHeap, Policy, Pool, Record, Scope};
/// # use tagalloc::{Error, RegionSource};
/// # struct Addresses(usize);
/// # unsafe impl RegionSource for Addresses {
/// #     type Base = usize;
/// #     fn addr(b: usize) -> usize { b }
/// #     fn granularity(&self) -> usize { 4096 }
/// #     fn obtain(&mut self, min: usize) -> Result<(usize, usize), Error> {
/// #         let b = self.0; self.0 += min; Ok((b, min))
/// #     }
/// #     unsafe fn give_back(&mut self, _: usize, _: usize) {}
/// # }
///
/// let mut table = [Record::VACANT; 16];
/// let heap = DetachedHeap::new(&mut table[..], 256)?;
/// let mut pool = Pool::new(heap, Addresses(1 << 30), Policy::new());
/// let forward = Scope::new();
/// let a = pool.alloc_in(&forward, 1000, 256)?;
/// let b = pool.alloc_in(&forward, 3000, 256)?;
/// // SAFETY: `a` is live; detached blocks are checked anyway.
/// unsafe { pool.free_in(&forward, a, 1000)? };
/// assert_eq!((forward.in_use(), forward.peak(), forward.allocated()), (3000, 4000, 4000));
/// # let _ = b;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Default)]
pub struct Scope {
    allocated: AtomicUsize,
    freed: AtomicUsize,
    peak: AtomicUsize,
    allocs: AtomicUsize,
    frees: AtomicUsize,
}

impl Scope {
    /// A scope with nothing counted.
    pub const fn new() -> Self {
        Scope {
            allocated: AtomicUsize::new(0),
            freed: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
            allocs: AtomicUsize::new(0),
            frees: AtomicUsize::new(0),
        }
    }

    /// Counts an allocation of `bytes`.
    pub fn record_alloc(&self, bytes: usize) {
        let now = self.allocated.fetch_add(bytes, Relaxed) + bytes;
        self.allocs.fetch_add(1, Relaxed);
        let live = now - self.freed.load(Relaxed).min(now);
        self.peak.fetch_max(live, Relaxed);
    }

    /// Counts a free of `bytes`.
    pub fn record_free(&self, bytes: usize) {
        self.freed.fetch_add(bytes, Relaxed);
        self.frees.fetch_add(1, Relaxed);
    }

    /// Bytes allocated through the scope, in total.
    pub fn allocated(&self) -> usize {
        self.allocated.load(Relaxed)
    }

    /// Bytes allocated through the scope and not yet freed.
    pub fn in_use(&self) -> usize {
        self.allocated().saturating_sub(self.freed.load(Relaxed))
    }

    /// The most bytes the scope has had live at once (exact when one thread uses the scope; a
    /// close lower bound when several race).
    pub fn peak(&self) -> usize {
        self.peak.load(Relaxed)
    }

    /// Allocations made through the scope.
    pub fn allocs(&self) -> usize {
        self.allocs.load(Relaxed)
    }

    /// Frees made through the scope.
    pub fn frees(&self) -> usize {
        self.frees.load(Relaxed)
    }
}
