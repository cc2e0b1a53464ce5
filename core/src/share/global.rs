//! The shared inline heap: an [`InlineHeap`] behind a lock, with a queue for frees that arrive
//! while the lock is held (see [`crate::share::shared`]). It implements [`GlobalAlloc`] and, with the
//! `allocator-api2` / `allocator-api2-04` features, `allocator_api2`'s `Allocator`, both
//! through [`SharedAlloc`] (see `crate::share::alloc`).

use core::alloc::GlobalAlloc;
use core::ptr::NonNull;

use crate::algo::shape::{BinShape, Wide};
use crate::algo::stats::{Counters, Stats, Tally};
use crate::error::Error;
use crate::inline::granule::{Granule, HostGranule};
use crate::inline::heap::InlineHeap;
use crate::share::alloc::SharedAlloc;
use crate::share::lock::{RawLock, SpinLock};
use crate::share::shared::{QueuedFree, Shared};
use crate::sync::const_unless_loom;

/// A free waiting in the queue: the pointer and the size it was freed with.
#[derive(Clone, Copy)]
pub(crate) struct Queued {
    ptr: NonNull<u8>,
    size: usize,
}

// SAFETY: a queued free is an allocation its owner gave up for good; only the lock holder that
// takes it from the queue uses the pointer, to free it.
unsafe impl Send for Queued {}

/// The heap and the arena it has yet to claim.
pub(crate) struct ArenaHeap<G: Granule, K: Tally, B: BinShape> {
    heap: InlineHeap<G, K, B>,
    arena: Arena,
}

/// The arena of [`GlobalHeap::with_arena`]: none (the other constructors), pending until the
/// first use claims it, or refused, with the reason.
///
/// `repr(u8)` makes "none" a zero tag and nothing else, so that an empty heap is all zeros and
/// its `static` lands in `.bss`: as an `Option<Error>`, "none" was the niche after `Error`'s
/// last variant, a non-zero byte that put the whole static (20 KiB) in `.data`.
#[derive(Clone, Copy)]
#[repr(u8)]
enum Arena {
    None = 0,
    Pending(*mut u8, usize),
    Refused(Error),
}

// SAFETY: the pending arena pointer is only a promise of memory (the `with_arena` contract)
// that is claimed under the lock; the heap itself is `Send`.
unsafe impl<G: Granule, K: Tally, B: BinShape> Send for ArenaHeap<G, K, B> {}

impl<G: Granule, K: Tally, B: BinShape> ArenaHeap<G, K, B> {
    /// The heap, with the arena claimed.
    #[inline]
    fn heap(&mut self) -> &mut InlineHeap<G, K, B> {
        if let Arena::Pending(..) = self.arena {
            self.claim();
        }
        &mut self.heap
    }

    /// Claims the arena of [`GlobalHeap::with_arena`] (once, on first use).
    #[cold]
    #[inline(never)]
    fn claim(&mut self) {
        if let Arena::Pending(base, len) = self.arena {
            let g = self.heap.granule();
            let skip = base.align_offset(g).min(len);
            // SAFETY: `with_arena`'s contract: the arena is valid, unused by anything else,
            // and lives for the program; `skip <= len` keeps the range inside it.
            let r = unsafe { self.heap.add_region(base.wrapping_add(skip), len - skip) };
            self.arena = match r {
                Ok(()) => Arena::None,
                Err(why) => Arena::Refused(why),
            };
        }
    }

    /// `e`, or the reason the arena was refused when `e` is running out of memory because of it.
    #[cold]
    fn explain(&self, e: Error) -> Error {
        match (e, self.arena) {
            (Error::OutOfMemory, Arena::Refused(why)) => why,
            _ => e,
        }
    }
}

impl<G: Granule, K: Tally, B: BinShape> QueuedFree for ArenaHeap<G, K, B> {
    type Freed = Queued;

    fn free_queued(&mut self, q: Queued) {
        // SAFETY: `q` was queued by `GlobalHeap::try_free`, whose caller promised what
        // `InlineHeap::free` needs. A refusal is counted in the statistics.
        let _ = unsafe { self.heap().free(q.ptr, q.size) };
    }
}

/// An [`InlineHeap`] usable from many threads and as `#[global_allocator]`.
///
/// `L` is the lock ([`SpinLock`] by default; with the `lock_api` feature, any
/// `lock_api::RawMutex`, such as `parking_lot::RawMutex`, whose waiters sleep) and `N` (a power
/// of two, at least 2) how many frees can wait for the lock at once; `G` and `K` are the
/// heap's granule and tally, as for [`InlineHeap`] (one without statistics comes from
/// [`GlobalHeap::with_arena_and_lock`], [`GlobalHeap::with_lock`] or
/// [`GlobalHeap::from_heap`]).
///
/// Allocation failures are values: an [`Error`] from the `try_` methods, null through
/// [`GlobalAlloc`]. A free that finds the lock taken does not wait: it is queued (nothing is
/// written into the freed memory) and done, validated, by the next lock holder; when the queue
/// is full it waits for the lock.
///
/// **Re-entry.** The lock is not re-entrant: a call from inside [`GlobalHeap::with_heap`]'s
/// closure into the same heap (an allocation, a free that must wait, `stats`, `with_heap`)
/// returns [`Error::Reentrant`] (null through `GlobalAlloc`) when threads can be told apart
/// (the `std` feature); without `std` it would wait forever, so don't.
///
/// # Examples
///
/// A heap shared by threads, over memory handed to it:
///
/// ```
/// # fn main() -> Result<(), tagalloc::Error> {
/// use tagalloc::GlobalHeap;
///
/// let mut arena = vec![0u128; 4096]; // 64 KiB, 16-byte aligned
/// let heap = GlobalHeap::new();
/// // SAFETY: the arena outlives the heap's use and nothing else touches it.
/// unsafe { heap.add_region(arena.as_mut_ptr().cast(), 64 << 10)? };
/// std::thread::scope(|s| {
///     for _ in 0..4 {
///         s.spawn(|| {
///             let p = heap.try_alloc(100, 16).unwrap();
///             // SAFETY: `p` is a live 100-byte allocation, not used afterwards.
///             unsafe { heap.try_free(p, 100).unwrap() };
///         });
///     }
/// });
/// assert_eq!(heap.stats()?.in_use, 0);
/// heap.with_heap(|h| h.check())?.expect("every invariant holds");
/// # Ok(())
/// # }
/// ```
///
/// As the program's allocator, over a static array claimed on the first allocation:
///
/// ```no_run
/// use tagalloc::GlobalHeap;
///
/// static mut ARENA: [u8; 1 << 20] = [0; 1 << 20];
/// #[global_allocator]
/// static HEAP: GlobalHeap = GlobalHeap::with_arena(&raw mut ARENA);
/// # fn main() {}
/// ```
pub struct GlobalHeap<
    L = SpinLock,
    const N: usize = 64,
    G: Granule = HostGranule,
    K: Tally = Counters,
    B: BinShape = Wide,
> {
    shared: Shared<ArenaHeap<G, K, B>, L, N>,
}

impl GlobalHeap {
    const_unless_loom! {
        /// A heap with no memory yet, behind a [`SpinLock`]; give it memory with
        /// [`GlobalHeap::add_region`].
        ///
        /// # Time Complexity
        /// `O(N)` (the queue is built); the arena is claimed on the first allocation.
        pub fn new() -> Self {
            Self::with_lock()
        }
    }

    const_unless_loom! {
        /// A heap over a static array, behind a [`SpinLock`], claimed on first use (aligned up
        /// to the granule first). If the array is refused (too small), allocations report why.
        ///
        /// The array must be used by nothing else for as long as the heap is in use (normally:
        /// a `static mut` that nothing else names). Taking `&raw mut` of it is the only access
        /// this needs, so no reference to the `static mut` is ever made.
        ///
        /// # Time Complexity
        /// `O(N)` (the queue is built); the arena is claimed on the first allocation.
        pub fn with_arena<const LEN: usize>(arena: *mut [u8; LEN]) -> Self {
            Self::with_arena_and_lock(arena)
        }
    }
}

impl<L: RawLock, const N: usize, K: Tally, B: BinShape> GlobalHeap<L, N, HostGranule, K, B> {
    const_unless_loom! {
        /// [`GlobalHeap::new`] with another lock, queue length or tally.
        ///
        /// # Time Complexity
        /// `O(N)` (the queue is built); the arena is claimed on the first allocation.
        pub fn with_lock() -> Self {
            GlobalHeap {
                shared: Shared::new(ArenaHeap {
                    heap: InlineHeap::host(),
                    arena: Arena::None,
                }),
            }
        }
    }

    const_unless_loom! {
        /// [`GlobalHeap::with_arena`] with another lock, queue length or tally: for instance
        /// the program's allocator without statistics ([`Tally`]):
        ///
        /// ```no_run
        /// use tagalloc::{GlobalHeap, HostGranule, NoCounters, SpinLock};
        ///
        /// static mut ARENA: [u8; 1 << 20] = [0; 1 << 20];
        /// #[global_allocator]
        /// static HEAP: GlobalHeap<SpinLock, 64, HostGranule, NoCounters> =
        ///     GlobalHeap::with_arena_and_lock(&raw mut ARENA);
        /// # fn main() {}
        /// ```
        ///
        /// # Time Complexity
        /// `O(N)` (the queue is built); the arena is claimed on the first allocation.
        pub fn with_arena_and_lock<const LEN: usize>(arena: *mut [u8; LEN]) -> Self {
            GlobalHeap {
                shared: Shared::new(ArenaHeap {
                    heap: InlineHeap::host(),
                    arena: Arena::Pending(arena.cast::<u8>(), LEN),
                }),
            }
        }
    }
}

impl<L: RawLock, const N: usize, G: Granule, K: Tally, B: BinShape> GlobalHeap<L, N, G, K, B> {
    const_unless_loom! {
        /// Shares `heap`, with whatever regions it has, between threads (for instance a heap
        /// of another granule, from [`InlineHeap::with_granule`], or one without statistics,
        /// from [`InlineHeap::without_stats`]).
        ///
        /// ```
        /// # fn main() -> Result<(), tagalloc::Error> {
        /// use tagalloc::{GlobalHeap, HostGranule, InlineHeap, NoCounters, SpinLock};
        ///
        /// static HEAP: GlobalHeap<SpinLock, 64, HostGranule, NoCounters> =
        ///     GlobalHeap::from_heap(InlineHeap::without_stats());
        /// let arena: &'static mut [u128] = Box::leak(vec![0u128; 4096].into_boxed_slice());
        /// // SAFETY: the arena is leaked, so it lives as long as the heap, and only the heap
        /// // uses it.
        /// unsafe { HEAP.add_region(arena.as_mut_ptr().cast(), 64 << 10)? };
        /// let p = HEAP.try_alloc(100, 16)?;
        /// // SAFETY: `p` is a live 100-byte allocation of this heap, not used afterwards.
        /// unsafe { HEAP.try_free(p, 100)? };
        /// HEAP.with_heap(|h| h.check())?.unwrap();
        /// # Ok(())
        /// # }
        /// ```
        ///
        /// # Time Complexity
        /// `O(N)` (the queue is built).
        pub fn from_heap(heap: InlineHeap<G, K, B>) -> Self {
            GlobalHeap {
                shared: Shared::new(ArenaHeap {
                    heap,
                    arena: Arena::None,
                }),
            }
        }
    }

    /// Adds memory to the heap (see [`InlineHeap::add_region`]).
    ///
    /// # Time Complexity
    /// As for [`InlineHeap::add_region`], after the queued frees (each as
    /// [`InlineHeap::free`]).
    ///
    /// # Safety
    /// As for [`InlineHeap::add_region`].
    pub unsafe fn add_region(&self, base: *mut u8, len: usize) -> Result<(), Error> {
        // SAFETY: forwarded caller contract.
        unsafe { self.shared.lock()?.heap.heap().add_region(base, len) }
    }

    /// Runs `f` with the locked heap (statistics, `check()`, trimming), after doing every
    /// queued free. [`Error::Reentrant`] if called from inside `f` itself.
    ///
    /// `f` must not call back into this `GlobalHeap` (see the type's docs on re-entry); with
    /// this heap as the global allocator, that includes allocating.
    ///
    /// # Time Complexity
    /// `f`'s, after the queued frees (at most `N`, each as [`InlineHeap::free`]).
    pub fn with_heap<R>(&self, f: impl FnOnce(&mut InlineHeap<G, K, B>) -> R) -> Result<R, Error> {
        self.shared.with(|st| f(st.heap()))
    }

    /// How many frees so far found the lock taken and were queued (each is done by the next
    /// lock holder).
    ///
    /// # Time Complexity
    /// `O(1)`, without the lock.
    pub fn queued_frees(&self) -> usize {
        self.shared.queued()
    }

    /// Allocates `size` bytes aligned to `align` (see [`InlineHeap::alloc`]).
    ///
    /// # Time Complexity
    /// As for [`InlineHeap::alloc`], after the queued frees (at most `N`, each as
    /// [`InlineHeap::free`]), plus the wait for the lock.
    #[inline]
    pub fn try_alloc(&self, size: usize, align: usize) -> Result<NonNull<u8>, Error> {
        let mut st = self.shared.lock()?;
        let st = &mut st.heap;
        st.heap().alloc(size, align).map_err(|e| st.explain(e))
    }

    /// Frees an allocation of `size` bytes.
    ///
    /// If the lock is free, this is [`InlineHeap::free`] and returns its verdict. If the lock
    /// is taken, the free is queued and `Ok` is returned at once; the next lock holder does it
    /// and, if the heap refuses it, counts it in [`Stats::refused_frees`]. Either way nothing
    /// is written anywhere for a free that is refused. What is detected: a free of a chunk
    /// that is free (always), and with the `checked` feature a pointer that is not the start of
    /// a live allocation of this heap, or a size that does not match (see
    /// [`InlineHeap::free`]). [`Error::Reentrant`] if the queue is full and this thread holds
    /// the lock (nothing is freed then).
    ///
    /// # Time Complexity
    /// `O(1)` when queued (a few atomic operations); otherwise as for [`InlineHeap::free`],
    /// after the queued frees.
    ///
    /// # Safety
    /// As for [`InlineHeap::free`]: without `checked`, `ptr` came from this heap with `size`
    /// and is not freed twice; always, the memory is not used after the call.
    #[inline]
    pub unsafe fn try_free(&self, ptr: NonNull<u8>, size: usize) -> Result<(), Error> {
        self.shared.free(Queued { ptr, size }, |st, q| {
            // SAFETY: forwarded caller contract.
            unsafe { st.heap().free(q.ptr, q.size) }
        })
    }

    /// Resizes an allocation (see [`InlineHeap::realloc`]).
    ///
    /// # Time Complexity
    /// As for [`InlineHeap::realloc`], after the queued frees.
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
        let mut st = self.shared.lock()?;
        let st = &mut st.heap;
        // SAFETY: forwarded caller contract.
        unsafe { st.heap().realloc(ptr, size, align, new_size) }.map_err(|e| st.explain(e))
    }
}

impl<L: RawLock, const N: usize, G: Granule, B: BinShape> GlobalHeap<L, N, G, Counters, B> {
    /// The heap's statistics, after doing every queued free (a heap that keeps them: see
    /// [`Tally`]).
    ///
    /// # Time Complexity
    /// As for [`InlineHeap::stats`], after the queued frees.
    pub fn stats(&self) -> Result<Stats, Error> {
        self.with_heap(|h| h.stats())
    }
}

impl Default for GlobalHeap {
    fn default() -> Self {
        Self::new()
    }
}

shared_alloc_via!(try_alloc, try_free, try_realloc, Error =>
    impl<L: RawLock, const N: usize, G: Granule, K: Tally, B: BinShape> SharedAlloc
        for GlobalHeap<L, N, G, K, B>
);

global_alloc_via_shared!(
    impl<L: RawLock, const N: usize, G: Granule, K: Tally, B: BinShape> GlobalAlloc
        for GlobalHeap<L, N, G, K, B>
);

#[cfg(any(feature = "allocator-api2", feature = "allocator-api2-04"))]
crate::share::alloc::allocator_via_shared!(
    unsafe impl<L: RawLock, const N: usize, G: Granule, K: Tally, B: BinShape> Allocator
        for GlobalHeap<L, N, G, K, B>
);
