//! loom models of the concurrent frees. Run them with
//!
//! ```text
//! RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=3 \
//!     cargo test -p tagalloc --lib --release --target-dir target/loom -- tests::loom
//! ```
//!
//! Every model prints how many executions loom explored. Each must be able to fail: built
//! with `--cfg tagalloc_weak_publish` or `--cfg tagalloc_weak_take` (a Release or an Acquire
//! weakened to Relaxed, see `src/sync.rs`), the queue models report a causality violation;
//! `.ci/loom` checks that they do.
//!
//! The queue is the bounded ring of `src/share/queue.rs` for both heaps; the models run it on
//! its own, then through `GlobalHeap` and `SharedDetachedHeap`, with legitimate frees racing
//! allocations and with double frees racing their first free (one must be refused, nothing
//! written); then the per-thread caches' handoffs with the pool: a flush racing a remote free,
//! and a spill racing a refill through the pool's transfer.

extern crate std;
use std::println;
use std::sync::atomic::{AtomicUsize as CountCell, Ordering::Relaxed as Count};
use std::vec::Vec;

use core::ptr::NonNull;
use loom::sync::Arc;
use loom::thread;

use super::inline::{Arena, OneRegion};
use crate::detached::heap::Block;
use crate::share::queue::FreeQueue;
use crate::{
    DetachedHeap, GlobalHeap, Growth, InlineHeap, Policy, Pool, Record, SharedDetachedHeap,
    SharedPool, SpinLock, ThreadCache,
};

/// The stack each modelled thread gets. Loom runs threads as coroutines with 32 KiB stacks by
/// default, and a `GlobalHeap` (its list ends, bitmaps and size table, about 39 KiB) is built on the
/// stack before it moves into its `Arc`: two copies in a frame overflow that.
const STACK: usize = 1 << 20;

/// Runs `f` under loom, on a thread with a `STACK`-sized stack (the model's own first thread
/// keeps loom's default, which cannot be changed), and prints how many executions it explored.
fn model(name: &str, f: impl Fn() + Sync + Send + 'static) {
    let runs = std::sync::Arc::new(CountCell::new(0));
    let counter = runs.clone();
    let f = std::sync::Arc::new(f);
    loom::model(move || {
        counter.fetch_add(1, Count);
        let f = f.clone();
        spawn(move || f()).join().unwrap();
    });
    println!("loom model {name}: {} executions", runs.load(Count));
}

/// `loom::thread::spawn` with a `STACK`-sized stack.
fn spawn<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> thread::JoinHandle<T> {
    thread::Builder::new().stack_size(STACK).spawn(f).unwrap()
}

fn nn(addr: usize) -> NonNull<u8> {
    NonNull::new(addr as *mut u8).unwrap()
}

/// A block standing in for a free, told apart by its address.
fn block(addr: usize) -> Block {
    let mut table = [Record::VACANT; 4];
    let mut h = DetachedHeap::new(&mut table[..], 1).unwrap();
    h.add_region(addr, 64).unwrap();
    h.alloc(1, 1).unwrap()
}

/// Three pushes from two threads into a ring of two while the main thread drains: each block
/// is drained once or given back as "full" (then freed by its pusher), never both, never lost.
#[test]
fn ring_push_races_drain() {
    model("ring_push_races_drain", || {
        let ring = Arc::new(FreeQueue::<Block, 2>::new());
        let refused = Arc::new(loom::sync::atomic::AtomicUsize::new(0));
        let pushers: Vec<_> = [std::vec![1usize << 20, 2 << 20], std::vec![3 << 20]]
            .into_iter()
            .map(|addrs| {
                let (ring, refused) = (ring.clone(), refused.clone());
                spawn(move || {
                    let mut mine = Vec::new();
                    for a in addrs {
                        if let Err(b) = ring.push(block(a)) {
                            mine.push(b.addr);
                            refused.fetch_add(1, loom::sync::atomic::Ordering::Relaxed);
                        }
                    }
                    mine
                })
            })
            .collect();
        // Drain until every block is drained or refused, before joining: the join's
        // happens-before edge must not be what makes the slots readable.
        let mut head = 0;
        let mut done = Vec::new();
        while done.len() + refused.load(loom::sync::atomic::Ordering::Relaxed) < 3 {
            ring.drain(&mut head, |b| done.push(b.addr));
            thread::yield_now();
        }
        for p in pushers {
            done.extend(p.join().unwrap());
        }
        done.sort_unstable();
        assert_eq!(
            done,
            [1 << 20, 2 << 20, 3 << 20],
            "a free was lost or done twice"
        );
    });
}

/// Two threads free a block each on the shared inline heap while the main thread allocates:
/// after join every free has been done exactly once (none refused as a double free, none
/// left) and `check()` is clean.
#[test]
fn global_heap_frees_race_alloc() {
    model("global_heap_frees_race_alloc", || {
        let mut arena = Arena::new(4096);
        let heap = Arc::new(GlobalHeap::new());
        // SAFETY: the arena outlives the heap's use (the threads are joined first).
        unsafe { heap.add_region(arena.ptr(), arena.len()).unwrap() };
        let a = heap.try_alloc(48, 16).unwrap().as_ptr() as usize;
        let b = heap.try_alloc(48, 16).unwrap().as_ptr() as usize;
        let freers: Vec<_> = [a, b]
            .into_iter()
            .map(|p| {
                let heap = heap.clone();
                spawn(move || {
                    // SAFETY: `p` is a live 48-byte allocation given to this thread only.
                    unsafe { heap.try_free(nn(p), 48).unwrap() };
                })
            })
            .collect();
        let c = heap.try_alloc(48, 16).unwrap();
        // Wait for both frees (queued ones are done by `stats`) before joining, so that the
        // queue's own edges, not the join's, are what order them.
        while heap.stats().unwrap().frees < 2 {
            thread::yield_now();
        }
        for f in freers {
            f.join().unwrap();
        }
        let st = heap.stats().unwrap();
        assert_eq!(st.refused_frees, 0);
        assert_eq!(st.frees, 2, "a queued free was lost or done twice");
        assert_eq!(st.live, 1);
        heap.with_heap(|h| h.check()).unwrap().unwrap();
        // SAFETY: `c` is live and not used afterwards.
        unsafe { heap.try_free(c, 48).unwrap() };
        assert_eq!(heap.stats().unwrap().in_use, 0);
        drop(arena);
    });
}

/// Two threads allocate and free on the shared inline heap while the main thread frees a
/// block of its own: `check()` is clean after join and nothing is left in use.
#[test]
fn global_heap_threads_alloc_and_free() {
    model("global_heap_threads_alloc_and_free", || {
        let mut arena = Arena::new(4096);
        let heap = Arc::new(GlobalHeap::new());
        // SAFETY: the arena outlives the heap's use (the threads are joined first).
        unsafe { heap.add_region(arena.ptr(), arena.len()).unwrap() };
        let mine = heap.try_alloc(100, 16).unwrap();
        let workers: Vec<_> = (0..2)
            .map(|i| {
                let heap = heap.clone();
                spawn(move || {
                    let p = heap.try_alloc(32 + 32 * i, 16).unwrap();
                    // SAFETY: this thread's live allocation, not used afterwards.
                    unsafe { heap.try_free(p, 32 + 32 * i).unwrap() };
                })
            })
            .collect();
        // SAFETY: `mine` is live and not used afterwards.
        unsafe { heap.try_free(mine, 100).unwrap() };
        for w in workers {
            w.join().unwrap();
        }
        heap.with_heap(|h| h.check()).unwrap().unwrap();
        let st = heap.stats().unwrap();
        assert_eq!((st.live, st.in_use, st.refused_frees), (0, 0, 0));
        drop(arena);
    });
}

/// The shared detached heap with a ring of two: two threads free while the main thread
/// allocates; every free is done once, whether queued, refused by a full ring, or direct.
#[test]
fn shared_detached_frees_race_alloc() {
    model("shared_detached_frees_race_alloc", || {
        let dev = DetachedHeap::new(std::vec![Record::VACANT; 16], 256).unwrap();
        let heap: Arc<SharedDetachedHeap<_, SpinLock, 2>> = Arc::new(SharedDetachedHeap::new(dev));
        heap.with_heap(|h| h.add_region(1 << 20, 1 << 16))
            .unwrap()
            .unwrap();
        let blocks = [heap.alloc(256, 256).unwrap(), heap.alloc(512, 256).unwrap()];
        let freers: Vec<_> = blocks
            .into_iter()
            .map(|b| {
                let heap = heap.clone();
                spawn(move || heap.free(b).unwrap())
            })
            .collect();
        let c = heap.alloc(256, 256).unwrap();
        // As in `global_heap_frees_race_alloc`: the frees are done before the join.
        while heap.stats().unwrap().frees < 2 {
            thread::yield_now();
        }
        for f in freers {
            f.join().unwrap();
        }
        heap.free(c).unwrap();
        heap.with_heap(|h| h.check()).unwrap().unwrap();
        let st = heap.stats().unwrap();
        assert_eq!((st.live, st.in_use, st.refused_frees), (0, 0, 0));
        assert_eq!(st.frees, 3, "a queued free was lost or done twice");
    });
}

/// A double free races its first free on the shared inline heap while the main thread
/// allocates: exactly one of the two is done and the other refused, wherever each went (queued
/// or direct), and a live neighbour's bytes are never written.
#[test]
fn global_heap_double_free_races_its_first_free() {
    model("global_heap_double_free_races_its_first_free", || {
        let mut arena = Arena::new(4096);
        let heap = Arc::new(GlobalHeap::new());
        // SAFETY: the arena outlives the heap's use (the threads are joined first).
        unsafe { heap.add_region(arena.ptr(), arena.len()).unwrap() };
        let a = heap.try_alloc(48, 16).unwrap().as_ptr() as usize;
        let b = heap.try_alloc(48, 16).unwrap();
        // SAFETY: `b` is a live 48-byte allocation that only this thread uses.
        unsafe { b.as_ptr().write_bytes(0xb5, 48) };
        let freers: Vec<_> = (0..2)
            .map(|_| {
                let heap = heap.clone();
                spawn(move || {
                    // SAFETY: deliberately a double free between the two threads; the heap
                    // must refuse one of them. `a`'s chunk cannot be handed out again in
                    // between (the only other request is too large for it).
                    unsafe { heap.try_free(nn(a), 48) }
                })
            })
            .collect();
        let c = heap.try_alloc(200, 16).unwrap();
        while heap.stats().unwrap().frees + heap.stats().unwrap().refused_frees < 2 {
            thread::yield_now();
        }
        let refused_now = freers
            .into_iter()
            .map(|f| f.join().unwrap())
            .filter(Result::is_err)
            .count() as u64;
        let st = heap.stats().unwrap();
        assert_eq!(st.frees, 1, "the first free is done once");
        assert_eq!(st.refused_frees, 1, "the double free is refused");
        assert!(refused_now <= 1);
        // SAFETY: `b` is live.
        let bytes = unsafe { core::slice::from_raw_parts(b.as_ptr(), 48) };
        assert!(bytes.iter().all(|&x| x == 0xb5), "a live block was written");
        heap.with_heap(|h| h.check()).unwrap().unwrap();
        // SAFETY: live allocations, freed once.
        unsafe {
            heap.try_free(b, 48).unwrap();
            heap.try_free(c, 200).unwrap();
        }
        assert_eq!(heap.stats().unwrap().in_use, 0);
        drop(arena);
    });
}

/// The handoff between a thread's cache and the pool: the owner frees a block into its cache
/// and flushes the cache (its thread's exit) while another thread, whose cache is gone, frees
/// a block the owner's cache handed out straight to the pool (queued if the flush holds the
/// lock). The main thread waits for both through the pool alone, then joins: every block is
/// back exactly once (nothing in use, nothing cached, none refused) and `check()` is clean.
#[test]
fn cache_flush_races_remote_free() {
    model("cache_flush_races_remote_free", || {
        let pool: Arc<SharedPool<InlineHeap, OneRegion>> = Arc::new(SharedPool::new(Pool::new(
            InlineHeap::new(),
            OneRegion::new(Arena::new(8192)),
            Policy::new().growth(Growth::Fixed(4096)),
        )));
        let mut cache = ThreadCache::new(0x5eed);
        let a = pool.alloc_with_cache(&mut cache, 48, 16).unwrap().as_ptr() as usize;
        let b = pool.alloc_with_cache(&mut cache, 48, 16).unwrap().as_ptr() as usize;
        let owner = {
            let pool = pool.clone();
            spawn(move || {
                // SAFETY: `a` is a live 48-byte block of this pool given to this thread only;
                // the cache belongs to this pool.
                unsafe {
                    pool.free_with_cache(&mut cache, nn(a), 48).unwrap();
                    pool.flush_cache(&mut cache).unwrap();
                }
            })
        };
        let remote = {
            let pool = pool.clone();
            spawn(move || {
                // SAFETY: `b` is a live 48-byte block given to this thread only.
                unsafe { pool.free(nn(b), 48).unwrap() };
            })
        };
        while pool.stats().unwrap().heap.in_use != 0 {
            thread::yield_now();
        }
        owner.join().unwrap();
        remote.join().unwrap();
        let s = pool.stats().unwrap();
        assert_eq!(s.heap.refused_frees, 0);
        assert_eq!((s.cache.blocks, s.cache.bytes, s.cache.flushes), (0, 0, 1));
        pool.with_pool(|p| p.check()).unwrap().unwrap();
    });
}

/// The transfer between caches: one thread's cache spills a batch (into the heap if it gets
/// the lock, else into the pool's transfer) while another thread frees a block straight to
/// the pool (queued if the spill holds the lock) and then refills its own cache (from the
/// transfer if a batch is there, else under the lock). Whatever the order: nothing refused,
/// every block accounted for (in use exactly for the blocks the caches and the transfer
/// hold), and once both caches and the transfer are flushed, nothing in use and `check()`
/// clean. Under the weakened orderings the straight free's queue is what breaks.
#[test]
fn spill_races_refill_through_the_transfer() {
    // Executions in which the batch went from one cache to the other through the transfer.
    static HANDED: CountCell = CountCell::new(0);
    model("spill_races_refill_through_the_transfer", || {
        let pool: Arc<SharedPool<InlineHeap, OneRegion>> = Arc::new(SharedPool::new(Pool::new(
            InlineHeap::new(),
            OneRegion::new(Arena::new(32768)),
            Policy::new().growth(Growth::Fixed(24576)),
        )));
        let c = crate::Class::of(48, 16).unwrap();
        let limit = ThreadCache::limit(c) as usize;
        let blocks: Vec<usize> = (0..=limit)
            .map(|_| pool.alloc(48, 16).unwrap().as_ptr() as usize)
            .collect();
        let other = pool.alloc(48, 16).unwrap().as_ptr() as usize;
        let mut full = ThreadCache::new(0x5eed);
        for &p in &blocks[..limit] {
            // SAFETY: live 48-byte blocks of this pool, each given up once; the cache belongs
            // to this pool.
            unsafe { pool.free_with_cache(&mut full, nn(p), 48).unwrap() };
        }
        let spiller = {
            let pool = pool.clone();
            let last = blocks[limit];
            spawn(move || {
                // SAFETY: as above: the class is full, so this free spills.
                unsafe { pool.free_with_cache(&mut full, nn(last), 48).unwrap() };
                full
            })
        };
        let refiller = {
            let pool = pool.clone();
            spawn(move || {
                // SAFETY: `other` is a live 48-byte block given to this thread only.
                unsafe { pool.free(nn(other), 48).unwrap() };
                let mut mine = ThreadCache::new(0x5eed);
                let got = pool.alloc_with_cache(&mut mine, 48, 16).unwrap();
                (mine, got.as_ptr() as usize)
            })
        };
        // A look at the pool meanwhile: it may be the lock holder that does the queued free.
        assert_eq!(pool.stats().unwrap().heap.refused_frees, 0);
        let mut full = spiller.join().unwrap();
        let (mut mine, got) = refiller.join().unwrap();
        let s = pool.stats().unwrap();
        assert_eq!(s.heap.refused_frees, 0);
        // In use: every block but `other`, less the batch if the spill gave it to the heap,
        // plus the refill's blocks if it took them from the heap; so exactly `limit + 1`
        // blocks when the batch went through the transfer.
        if s.heap.in_use == (limit + 1) * c.chunk_bytes() {
            HANDED.fetch_add(1, Count);
        }
        // SAFETY: `got` is live and given up once; the caches belong to this pool.
        unsafe {
            pool.free_with_cache(&mut mine, nn(got), 48).unwrap();
            pool.flush_cache(&mut full).unwrap();
            pool.flush_cache(&mut mine).unwrap();
        }
        pool.flush_transfer().unwrap();
        let s = pool.stats().unwrap();
        assert_eq!(s.heap.refused_frees, 0);
        assert_eq!((s.heap.in_use, s.cache.blocks, s.cache.bytes), (0, 0, 0));
        pool.with_pool(|p| p.check()).unwrap().unwrap();
    });
    assert!(
        HANDED.load(Count) > 0,
        "no execution handed the batch through the transfer"
    );
}
