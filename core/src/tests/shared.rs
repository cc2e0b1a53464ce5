//! The shared heaps with real threads: queued frees, cross-thread frees, `check()` after join.
//! Short enough for Miri, which checks the lock-free queues for data races too.

extern crate std;
use std::sync::mpsc;
use std::thread;
use std::vec::Vec;

use core::ptr::NonNull;

use super::inline::Arena;
use crate::{DetachedHeap, GlobalHeap, Record, SharedDetachedHeap, SpinLock};

/// A global heap over `arena`.
fn global_over(arena: &mut Arena) -> GlobalHeap {
    let heap = GlobalHeap::new();
    // SAFETY: the arena outlives the heap and nothing else uses its memory.
    unsafe { heap.add_region(arena.ptr(), arena.len()).unwrap() };
    heap
}

/// An allocation handed from one thread to another (pointers are not `Send`).
#[derive(Clone, Copy)]
struct Ptr(NonNull<u8>);
// SAFETY: the tests hand each allocation to one thread at a time.
unsafe impl Send for Ptr {}

impl Ptr {
    /// The pointer (a method, so closures capture the whole `Send` wrapper, not the field).
    fn get(self) -> NonNull<u8> {
        self.0
    }
}

/// Writes `tag` over `len` bytes at `p`.
fn fill(p: Ptr, len: usize, tag: u8) {
    // SAFETY: callers pass a live allocation of at least `len` bytes that only they use.
    unsafe { core::ptr::write_bytes(p.get().as_ptr(), tag, len) };
}

/// Whether `len` bytes at `p` all hold `tag`.
fn holds(p: Ptr, len: usize, tag: u8) -> bool {
    // SAFETY: as in `fill`.
    unsafe { core::slice::from_raw_parts(p.get().as_ptr(), len) }
        .iter()
        .all(|&b| b == tag)
}

#[test]
fn a_free_that_finds_the_lock_taken_is_queued_and_done_by_the_next_holder() {
    let mut arena = Arena::new(1 << 16);
    let heap = global_over(&mut arena);
    let p = heap.try_alloc(100, 16).unwrap();
    let before = heap.stats().unwrap();
    heap.with_heap(|h| {
        // The lock is held here: the other thread's free must be queued, not wait.
        let p = Ptr(p);
        let heap = &heap;
        thread::scope(|s| {
            s.spawn(move || {
                // SAFETY: `p` is a live allocation of 100 bytes, not used afterwards.
                unsafe { heap.try_free(p.get(), 100).unwrap() };
            });
        });
        // Queued, so not freed yet: the chunk is still in use.
        assert_eq!(h.stats().live, before.live);
    })
    .unwrap();
    assert_eq!(heap.queued_frees(), 1);
    let after = heap.stats().unwrap();
    assert_eq!(after.live, before.live - 1);
    assert_eq!(after.in_use, 0);
    assert_eq!(after.refused_frees, 0);
    heap.with_heap(|h| h.check()).unwrap().unwrap();
}

#[test]
fn threads_allocate_and_free_each_others_blocks() {
    const THREADS: usize = 3;
    let rounds = if cfg!(miri) { 40 } else { 4000 };
    // Blocks sent to a thread that has finished stay live until the end: room for all of them.
    let mut arena = Arena::new(if cfg!(miri) { 1 << 20 } else { 16 << 20 });
    let heap = global_over(&mut arena);
    let heap = &heap;
    // Thread i allocates, checks, and hands every other block to thread i + 1 to free.
    let (txs, rxs): (Vec<_>, Vec<_>) = (0..THREADS).map(|_| mpsc::channel()).unzip();
    let free_received = |q: Ptr, qlen: usize, qtag: u8| {
        assert!(holds(q, qlen, qtag), "a block changed while it was live");
        // SAFETY: handed over by its allocating thread, which dropped it.
        unsafe { heap.try_free(q.get(), qlen).unwrap() };
    };
    let leftovers: Vec<mpsc::Receiver<(Ptr, usize, u8)>> = thread::scope(|s| {
        let threads: Vec<_> = rxs
            .into_iter()
            .enumerate()
            .map(|(i, rx)| {
                let tx: mpsc::Sender<(Ptr, usize, u8)> = txs[(i + 1) % THREADS].clone();
                s.spawn(move || {
                    let mut seed = 0x9e37_79b9_u32.wrapping_mul(i as u32 + 1);
                    for r in 0..rounds {
                        seed ^= seed << 13;
                        seed ^= seed >> 17;
                        seed ^= seed << 5;
                        let len = 1 + (seed as usize % 700);
                        let tag = (r as u8) ^ (i as u8).wrapping_mul(37);
                        let p = Ptr(heap.try_alloc(len, 16).unwrap());
                        fill(p, len, tag);
                        if r % 2 == 0 {
                            tx.send((p, len, tag)).unwrap();
                        } else {
                            assert!(holds(p, len, tag));
                            // SAFETY: this thread's live allocation of `len` bytes.
                            unsafe { heap.try_free(p.get(), len).unwrap() };
                        }
                        for (q, qlen, qtag) in rx.try_iter() {
                            free_received(q, qlen, qtag);
                        }
                    }
                    rx
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    // Blocks sent after their receiver finished: free them here.
    drop(txs);
    for rx in leftovers {
        for (q, qlen, qtag) in rx.try_iter() {
            free_received(q, qlen, qtag);
        }
    }
    let st = heap.stats().unwrap();
    heap.with_heap(|h| h.check()).unwrap().unwrap();
    assert_eq!((st.live, st.in_use, st.refused_frees), (0, 0, 0));
    assert_eq!(st.frees, (THREADS * rounds) as u64);
}

#[test]
fn one_producer_many_consumers() {
    const CONSUMERS: usize = 3;
    let blocks = if cfg!(miri) { 60 } else { 20_000 };
    let mut arena = Arena::new(1 << 20);
    let heap = global_over(&mut arena);
    let heap = &heap;
    let (tx, rx) = mpsc::sync_channel::<(Ptr, usize, u8)>(64);
    let rx = std::sync::Mutex::new(rx);
    let rx = &rx;
    thread::scope(|s| {
        for _ in 0..CONSUMERS {
            s.spawn(move || loop {
                let Ok((p, len, tag)) = rx.lock().unwrap().recv() else {
                    return;
                };
                assert!(holds(p, len, tag));
                // SAFETY: handed over by the producer, which dropped it.
                unsafe { heap.try_free(p.get(), len).unwrap() };
            });
        }
        for i in 0..blocks {
            let len = 8 + (i * 29) % 1000;
            let p = Ptr(heap.try_alloc(len, 8).unwrap());
            fill(p, len, i as u8);
            tx.send((p, len, i as u8)).unwrap();
        }
        drop(tx);
    });
    let st = heap.stats().unwrap();
    heap.with_heap(|h| h.check()).unwrap().unwrap();
    assert_eq!((st.live, st.in_use, st.refused_frees), (0, 0, 0));
    assert_eq!(st.frees, blocks as u64);
}

#[test]
fn shared_detached_heap_queues_frees_and_waits_when_the_ring_is_full() {
    let threads = 3;
    let per_thread = if cfg!(miri) { 20 } else { 3000 };
    let dev = DetachedHeap::new(std::vec![Record::VACANT; 4096], 256).unwrap();
    // A ring of 2 fills up often, so the wait-for-the-lock path runs too.
    let heap: SharedDetachedHeap<_, SpinLock, 2> = SharedDetachedHeap::new(dev);
    heap.with_heap(|h| h.add_region(1 << 32, 1 << 28))
        .unwrap()
        .unwrap();
    let heap = &heap;
    thread::scope(|s| {
        for t in 0..threads {
            s.spawn(move || {
                let mut live = Vec::new();
                for i in 0..per_thread {
                    let b = heap.alloc(256 * (1 + (i + t) % 9), 256).unwrap();
                    live.push(b);
                    if live.len() > 8 {
                        heap.free(live.swap_remove(i % 8)).unwrap();
                    }
                }
                for b in live {
                    heap.free(b).unwrap();
                }
            });
        }
    });
    let st = heap.stats().unwrap();
    heap.with_heap(|h| h.check()).unwrap().unwrap();
    assert_eq!((st.live, st.in_use, st.refused_frees), (0, 0, 0));
    assert_eq!(st.frees, (threads * per_thread) as u64);
    // A double free that is queued is refused when it is done, and counted.
    let b = heap.alloc(512, 256).unwrap();
    heap.free(b).unwrap();
    assert!(heap.free(b).is_err());
    assert_eq!(heap.stats().unwrap().refused_frees, 1);
}

/// The `Allocator` of each supported `allocator-api2` version: collections grow and shrink,
/// zero sizes never reach the heap, a grow that changes alignment moves the contents.
macro_rules! allocator_api2_test {
    ($feature:literal, $name:ident, $krate:ident) => {
        #[cfg(feature = $feature)]
        #[test]
        fn $name() {
            use $krate::alloc::{Allocator, Layout};
            use $krate::vec::Vec as AVec;

            let mut arena = Arena::new(1 << 18);
            let heap = global_over(&mut arena);
            {
                let mut v: AVec<u64, &GlobalHeap> = AVec::new_in(&heap);
                for i in 0..3000u64 {
                    v.push(i);
                }
                v.truncate(10);
                v.shrink_to_fit();
                assert_eq!(v.iter().sum::<u64>(), 45);
                let z: AVec<(), &GlobalHeap> = AVec::with_capacity_in(5, &heap);
                assert_eq!(z.capacity(), usize::MAX);
            }
            // A grow that changes the alignment moves the block and keeps its contents.
            let old = Layout::from_size_align(24, 8).unwrap();
            let new = Layout::from_size_align(200, 256).unwrap();
            let p = heap.allocate(old).unwrap().cast::<u8>();
            fill(Ptr(p), 24, 7);
            // SAFETY: `p` is live with `old`; `new` is at least as large.
            let q = unsafe { heap.grow(p, old, new) }.unwrap().cast::<u8>();
            assert_eq!(q.as_ptr() as usize % 256, 0);
            assert!(holds(Ptr(q), 24, 7));
            // SAFETY: `q` is live with `new`.
            unsafe { heap.deallocate(q, new) };
            let zero = Layout::from_size_align(0, 64).unwrap();
            let d = heap.allocate(zero).unwrap();
            assert_eq!(d.cast::<u8>().as_ptr() as usize % 64, 0);
            // SAFETY: a zero-sized block from this allocator.
            unsafe { heap.deallocate(d.cast(), zero) };
            let st = heap.stats().unwrap();
            assert_eq!((st.live, st.in_use, st.refused_frees), (0, 0, 0));
            heap.with_heap(|h| h.check()).unwrap().unwrap();
        }
    };
}

allocator_api2_test!(
    "allocator-api2",
    allocator_api2_02_collections_grow_shrink_and_zero_sizes,
    allocator_api2
);
allocator_api2_test!(
    "allocator-api2-04",
    allocator_api2_04_collections_grow_shrink_and_zero_sizes,
    allocator_api2_04
);

/// A `lock_api` lock (here `parking_lot`'s, whose waiters sleep) behind the same shared heap:
/// threads hand blocks to each other, and a re-entrant call is refused as with the spin lock.
#[cfg(feature = "lock_api")]
#[test]
fn a_parking_lock_serves_threads_and_refuses_reentry() {
    let mut arena = Arena::new(1 << 20);
    let heap: GlobalHeap<parking_lot::RawMutex> = GlobalHeap::with_lock();
    // SAFETY: the arena outlives the heap and nothing else uses its memory.
    unsafe { heap.add_region(arena.ptr(), arena.len()).unwrap() };
    let rounds = if cfg!(miri) { 30 } else { 3000 };
    let (tx, rx) = mpsc::channel::<(Ptr, usize)>();
    let heap = &heap;
    thread::scope(|s| {
        s.spawn(move || {
            for (p, len) in rx {
                assert!(holds(p, len, len as u8));
                // SAFETY: handed over by its allocating thread, which dropped it.
                unsafe { heap.try_free(p.get(), len).unwrap() };
            }
        });
        for i in 0..rounds {
            let len = 1 + i % 500;
            let p = Ptr(heap.try_alloc(len, 16).unwrap());
            fill(p, len, len as u8);
            tx.send((p, len)).unwrap();
        }
        drop(tx);
    });
    assert_eq!(
        heap.with_heap(|_| heap.try_alloc(8, 8).map(|_| ())),
        Ok(Err(crate::Error::Reentrant))
    );
    let st = heap.stats().unwrap();
    assert_eq!((st.live, st.in_use, st.refused_frees), (0, 0, 0));
    heap.with_heap(|h| h.check()).unwrap().unwrap();
}

/// A global heap without statistics over an arena it claims on first use, as a program's
/// allocator would be: threads allocate and free through it (frees queue while the lock is
/// taken), and afterwards every invariant holds and the whole arena is one free chunk again.
/// An arena too small to hold a chunk is refused, and allocations say why.
#[test]
fn a_global_heap_without_stats_claims_its_arena_and_serves_threads() {
    use crate::{HostGranule, NoCounters};
    type Uncounted = GlobalHeap<SpinLock, 8, HostGranule, NoCounters>;
    const LEN: usize = 1 << 16;
    // Declared before the heap, so dropped after it: the heap uses it for as long as it lives.
    let mut arena = std::boxed::Box::new([0u8; LEN]);
    let skip = arena.as_ptr().align_offset(16);
    let heap = Uncounted::with_arena_and_lock(&raw mut *arena);
    let rounds = if cfg!(miri) { 20 } else { 2000 };
    thread::scope(|s| {
        for i in 0..2u8 {
            let heap = &heap;
            s.spawn(move || {
                for r in 0..rounds {
                    let len = 1 + (r * 37 + usize::from(i) * 11) % 300;
                    let p = Ptr(heap.try_alloc(len, 16).unwrap());
                    fill(p, len, i);
                    assert!(holds(p, len, i), "a block changed while it was live");
                    // SAFETY: this thread's live allocation of `len` bytes, not used after.
                    unsafe { heap.try_free(p.get(), len).unwrap() };
                }
            });
        }
    });
    heap.with_heap(|h| h.check()).unwrap().unwrap();
    // The region's header and fence take less than 64 bytes of what is left after aligning.
    let whole = LEN - skip - 64;
    let p = heap.try_alloc(whole, 16).unwrap();
    // SAFETY: live, not used afterwards.
    unsafe { heap.try_free(p, whole).unwrap() };

    let mut tiny = [0u8; 32];
    let refused = Uncounted::with_arena_and_lock(&raw mut tiny);
    assert_eq!(refused.try_alloc(8, 8), Err(crate::Error::RegionTooSmall));
}
