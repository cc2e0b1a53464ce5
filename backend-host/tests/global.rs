//! `HostAllocator` as the `#[global_allocator]` of a real program: this test binary, harness
//! and all. It is wrapped so that an allocation made from inside another (the lock, the
//! thread-local read, the source or the pool allocating) is counted; the count must stay 0.

mod common;

use std::alloc::{GlobalAlloc, Layout};
use std::cell::Cell;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::thread;

use tagalloc::{Error, Policy};
use tagalloc_host::{Call, HostAllocator};

/// The allocator under test, counting calls made while this thread is already inside one.
struct Detect(HostAllocator);

static NESTED: AtomicUsize = AtomicUsize::new(0);
static CALLS: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static DEPTH: Cell<u32> = const { Cell::new(0) };
}

impl Detect {
    fn enter<R>(&self, f: impl FnOnce() -> R) -> R {
        CALLS.fetch_add(1, Ordering::Relaxed);
        let depth = DEPTH.with(|d| {
            let n = d.get();
            d.set(n + 1);
            n
        });
        if depth > 0 {
            NESTED.fetch_add(1, Ordering::Relaxed);
        }
        let r = f();
        DEPTH.with(|d| d.set(depth));
        r
    }
}

// SAFETY: forwards to `HostAllocator`.
unsafe impl GlobalAlloc for Detect {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded caller contract.
        self.enter(|| unsafe { self.0.alloc(layout) })
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded caller contract.
        self.enter(|| unsafe { self.0.dealloc(ptr, layout) })
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded caller contract.
        self.enter(|| unsafe { self.0.realloc(ptr, layout, new_size) })
    }
}

#[global_allocator]
static A: Detect = Detect(HostAllocator::new());

fn assert_nothing_nested() {
    assert_eq!(
        NESTED.load(Ordering::Relaxed),
        0,
        "an allocation from inside another"
    );
}

/// Collections, strings and threads handing memory to each other through channels, many more
/// threads than cores (so waiters sleep on the lock), large vectors that bypass the bins and
/// grow by reallocation; then the heap's invariants and the books.
#[test]
fn a_std_workload_runs_on_it_and_nothing_allocates_inside_it() {
    let (tx, rx) = mpsc::channel::<(usize, Vec<String>, Vec<u64>)>();
    let producers: Vec<_> = (0..12)
        .map(|t| {
            let tx = tx.clone();
            thread::spawn(move || {
                for round in 0..200 {
                    let words: Vec<String> =
                        (0..50).map(|i| format!("t{t}-r{round}-w{i}")).collect();
                    let numbers: Vec<u64> = (0..(round * 97 % 5000) as u64).collect();
                    tx.send((t, words, numbers)).unwrap();
                }
            })
        })
        .collect();
    drop(tx);
    let consumer = thread::spawn(move || {
        let mut by_thread: HashMap<usize, usize> = HashMap::new();
        let mut lengths: BTreeMap<usize, usize> = BTreeMap::new();
        for (t, words, numbers) in rx {
            *by_thread.entry(t).or_default() += words.len();
            for w in &words {
                assert!(w.starts_with(&format!("t{t}-")));
                *lengths.entry(w.len()).or_default() += 1;
            }
            let n = numbers.len() as u64;
            assert_eq!(numbers.iter().sum::<u64>(), n * n.saturating_sub(1) / 2);
        }
        (by_thread, lengths)
    });
    for p in producers {
        p.join().unwrap();
    }
    let (by_thread, lengths) = consumer.join().unwrap();
    assert_eq!(by_thread.len(), 12);
    assert!(by_thread.values().all(|&n| n == 200 * 50));
    assert_eq!(lengths.values().sum::<usize>(), 12 * 200 * 50);

    // Large vectors: above the bypass threshold, grown by reallocation.
    let mut big: Vec<u64> = Vec::new();
    for i in 0..4_000_000u64 {
        big.push(i);
    }
    assert_eq!(big.iter().rev().take(3).sum::<u64>(), 3 * 3_999_998);
    drop(big);

    assert_nothing_nested();
    A.0.pool().with_pool(|p| p.check()).unwrap().unwrap();
    let st = A.0.stats().unwrap();
    assert!(st.bypassed > 0, "{st:?}");
    assert_eq!(st.heap.refused_frees, 0, "{st:?}");
    assert!(A.0.trim().is_ok());
    assert!(CALLS.load(Ordering::Relaxed) > 100_000);
    assert_nothing_nested();
}

/// Threads that start, allocate and exit while others do the same: the lock's re-entry check
/// reads a thread-local at every point of a thread's life, including its very end.
#[test]
fn short_lived_threads_allocate_and_exit() {
    for _ in 0..20 {
        let handles: Vec<_> = (0..16)
            .map(|i| {
                thread::spawn(move || {
                    let v: Vec<Vec<u8>> = (1..=100).map(|j| vec![i as u8; j * 10]).collect();
                    v.iter().filter(|b| b.iter().all(|&x| x == i as u8)).count()
                })
            })
            .collect();
        for h in handles {
            assert_eq!(h.join().unwrap(), 100);
        }
    }
    assert_nothing_nested();
}

/// A request the system cannot serve is a null pointer (here) with the reason kept, not a
/// panic inside the allocator. A private instance, so other tests' routine refusals (a growth
/// in place that finds its addresses taken) do not replace the reason read.
#[test]
fn an_impossible_request_is_null_with_the_reason_kept() {
    static PRIVATE: HostAllocator = HostAllocator::with_policy(Policy::new());
    let layout = Layout::from_size_align(1 << 46, 16).unwrap();
    // SAFETY: a non-zero size.
    let p = unsafe { PRIVATE.alloc(layout) };
    assert!(p.is_null());
    let e = PRIVATE.last_error().unwrap().expect("recorded");
    assert_eq!(e.call, Call::Map);
    assert!(e.bytes >= 1 << 46, "{e}");
    let err = PRIVATE.pool().alloc(1 << 46, 16).unwrap_err();
    assert_eq!(err.error, Error::OutOfMemory);
    assert_nothing_nested();
}

/// A `realloc` of a small block goes through the thread's cache: kept when its chunk already
/// serves the new size, else moved to a cached block with its bytes (the core's property test
/// checks which, address by address, against the model); a block that asked for
/// more than the granule's alignment keeps it (the cache's blocks are only granule-aligned).
/// Through the global allocator: a thread's cache serves the first pool it allocates from.
#[test]
fn small_reallocs_keep_their_bytes_and_their_alignment() {
    use std::alloc::{alloc, dealloc, realloc};
    let fill = |p: *mut u8, n: usize| {
        // SAFETY: `p` is a live block of at least `n` bytes.
        unsafe { std::slice::from_raw_parts_mut(p, n) }
            .iter_mut()
            .enumerate()
            .for_each(|(i, b)| *b = i as u8);
    };
    let holds = |p: *const u8, n: usize| {
        // SAFETY: `p` is a live block of at least `n` bytes.
        let s = unsafe { std::slice::from_raw_parts(p, n) };
        s.iter().enumerate().all(|(i, &b)| b == i as u8)
    };
    let layout = Layout::from_size_align(100, 16).unwrap();
    // Warm the cache of the classes involved, so that the moves below come from it.
    for size in [100, 104, 3000, 40, 300] {
        let l = Layout::from_size_align(size, 16).unwrap();
        // SAFETY: a non-zero size; the block is given back at once.
        unsafe { dealloc(alloc(l), l) };
    }
    // SAFETY: a non-zero size.
    let p = unsafe { alloc(layout) };
    fill(p, 100);
    // SAFETY: `p` is live with `layout`; it is not used again unless returned.
    let q = unsafe { realloc(p, layout, 104) };
    // Kept in place when `p`'s chunk is 104's class; a cached block can be larger than its
    // class (the other tests share this allocator), and then it moves: either way, whole.
    assert!(!q.is_null() && holds(q, 100));
    // SAFETY: as above, with the layout it has now.
    let r = unsafe { realloc(q, Layout::from_size_align(104, 16).unwrap(), 3000) };
    assert!(!r.is_null() && holds(r, 100), "grown, its bytes kept");
    fill(r, 3000);
    // SAFETY: as above.
    let s = unsafe { realloc(r, Layout::from_size_align(3000, 16).unwrap(), 40) };
    assert!(!s.is_null() && holds(s, 40), "shrunk, its bytes kept");
    // SAFETY: as above.
    unsafe { dealloc(s, Layout::from_size_align(40, 16).unwrap()) };

    let wide = Layout::from_size_align(100, 256).unwrap();
    // SAFETY: a non-zero size.
    let a = unsafe { alloc(wide) };
    fill(a, 100);
    // SAFETY: `a` is live with `wide`.
    let b = unsafe { realloc(a, wide, 300) };
    assert!(!b.is_null() && holds(b, 100));
    assert_eq!(b as usize % 256, 0, "the layout's alignment kept");
    // SAFETY: `b` is live, 300 bytes aligned to 256.
    unsafe { dealloc(b, Layout::from_size_align(300, 256).unwrap()) };
    assert_nothing_nested();
}
