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

extern crate std;
use std::collections::BTreeSet;
use std::println;
use std::sync::atomic::{AtomicUsize as CountCell, Ordering::Relaxed as Count};
use std::vec::Vec;

use core::ptr::NonNull;
use loom::sync::Arc;
use loom::thread;

use super::inline::Arena;
use crate::detached::Block;
use crate::remote_ring::RemoteRing;
use crate::remote_stack::RemoteStack;
use crate::{DetachedHeap, GlobalHeap, Record, SharedDetachedHeap};

/// Runs `f` under loom and prints how many executions it explored.
fn model(name: &str, f: impl Fn() + Sync + Send + 'static) {
    let runs = std::sync::Arc::new(CountCell::new(0));
    let counter = runs.clone();
    loom::model(move || {
        counter.fetch_add(1, Count);
        f();
    });
    println!("loom model {name}: {} executions", runs.load(Count));
}

/// Slots of 64 bytes, 16-aligned, standing in for freed allocations.
struct Slots {
    buf: Vec<u128>,
}

impl Slots {
    fn new(n: usize) -> Self {
        Slots {
            buf: std::vec![0; n * 4],
        }
    }
    fn addr(&mut self, i: usize) -> usize {
        self.buf[i * 4..].as_mut_ptr() as usize
    }
}

fn nn(addr: usize) -> NonNull<u8> {
    NonNull::new(addr as *mut u8).unwrap()
}

/// Two threads push while the main thread takes: every pushed payload comes out exactly once,
/// with its size, and reading its link never races with writing it.
#[test]
fn stack_push_races_take() {
    model("stack_push_races_take", || {
        let mut slots = Slots::new(3);
        let addrs: Vec<usize> = (0..3).map(|i| slots.addr(i)).collect();
        let stack = Arc::new(RemoteStack::new());
        let pushers: Vec<_> = [addrs[..1].to_vec(), addrs[1..].to_vec()]
            .into_iter()
            .map(|mine| {
                let stack = stack.clone();
                thread::spawn(move || {
                    for a in mine {
                        // SAFETY: each slot is pushed once and not touched afterwards.
                        unsafe { stack.push(nn(a), a % 1000) };
                    }
                })
            })
            .collect();
        // Take until everything has come out, before joining: the join's happens-before edge
        // must not be what makes the links readable.
        let mut seen = Vec::new();
        while seen.len() < 3 {
            // SAFETY: every taken slot is recorded (the model's "free").
            seen.extend(unsafe { stack.take_all() });
            thread::yield_now();
        }
        for p in pushers {
            p.join().unwrap();
        }
        let got: BTreeSet<usize> = seen
            .iter()
            .map(|&(p, size)| {
                assert_eq!(
                    size,
                    p.as_ptr() as usize % 1000,
                    "size travels with its link"
                );
                p.as_ptr() as usize
            })
            .collect();
        assert_eq!(seen.len(), 3, "a free was lost or taken twice");
        assert_eq!(got, addrs.iter().copied().collect());
        drop(slots);
    });
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
        let ring = Arc::new(RemoteRing::<2>::new());
        let refused = Arc::new(loom::sync::atomic::AtomicUsize::new(0));
        let pushers: Vec<_> = [std::vec![1usize << 20, 2 << 20], std::vec![3 << 20]]
            .into_iter()
            .map(|addrs| {
                let (ring, refused) = (ring.clone(), refused.clone());
                thread::spawn(move || {
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
                thread::spawn(move || {
                    // SAFETY: `p` is a live 48-byte allocation given to this thread only.
                    unsafe { heap.try_free(nn(p), 48).unwrap() };
                })
            })
            .collect();
        let c = heap.try_alloc(48, 16).unwrap();
        // Wait for both frees (queued ones are done by `stats`) before joining, so that the
        // queue's own edges, not the join's, are what order them.
        while heap.stats().frees < 2 {
            thread::yield_now();
        }
        for f in freers {
            f.join().unwrap();
        }
        let st = heap.stats();
        assert_eq!(st.rejected_frees, 0);
        assert_eq!(st.frees, 2, "a queued free was lost or done twice");
        assert_eq!(st.live, 1);
        heap.with_heap(|h| h.check()).unwrap();
        // SAFETY: `c` is live and not used afterwards.
        unsafe { heap.try_free(c, 48).unwrap() };
        assert_eq!(heap.stats().in_use, 0);
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
                thread::spawn(move || {
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
        heap.with_heap(|h| h.check()).unwrap();
        let st = heap.stats();
        assert_eq!((st.live, st.in_use, st.rejected_frees), (0, 0, 0));
        drop(arena);
    });
}

/// The shared out-of-band heap with a ring of two: two threads free while the main thread
/// allocates; every free is done once, whether queued, refused by a full ring, or direct.
#[test]
fn shared_detached_frees_race_alloc() {
    model("shared_detached_frees_race_alloc", || {
        let dev = DetachedHeap::new(std::vec![Record::VACANT; 16], 256).unwrap();
        let heap: Arc<SharedDetachedHeap<_, 2>> = Arc::new(SharedDetachedHeap::new(dev));
        heap.with_heap(|h| h.add_region(1 << 20, 1 << 16)).unwrap();
        let blocks = [heap.alloc(256, 256).unwrap(), heap.alloc(512, 256).unwrap()];
        let freers: Vec<_> = blocks
            .into_iter()
            .map(|b| {
                let heap = heap.clone();
                thread::spawn(move || heap.free(b).unwrap())
            })
            .collect();
        let c = heap.alloc(256, 256).unwrap();
        // As in `global_heap_frees_race_alloc`: the frees are done before the join.
        while heap.stats().frees < 2 {
            thread::yield_now();
        }
        for f in freers {
            f.join().unwrap();
        }
        heap.free(c).unwrap();
        heap.with_heap(|h| h.check()).unwrap();
        let st = heap.stats();
        assert_eq!((st.live, st.in_use, st.rejected_frees), (0, 0, 0));
        assert_eq!(st.frees, 3, "a queued free was lost or done twice");
    });
}
