//! `FutexLock`: mutual exclusion under threads, waiters that sleep instead of burning their
//! time slices, and no allocation ever, shown with a counting global allocator that also
//! catches `parking_lot::RawMutex` allocating (so the count is not one that cannot move).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::{Cell, UnsafeCell};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use lock_api::RawMutex;
use tagalloc_host::FutexLock;

/// The system allocator, counting the allocations made while a thread is inside a lock call,
/// per lock type (the tests run at the same time).
struct Counting;

/// Allocations inside lock calls, indexed by [`Kind`].
static IN_LOCK_ALLOCS: [AtomicUsize; 2] = [AtomicUsize::new(0), AtomicUsize::new(0)];

thread_local! {
    /// Which lock type this thread is inside a call of (`None`: none).
    static IN_LOCK: Cell<Option<usize>> = const { Cell::new(None) };
}

/// The lock types counted.
trait Kind {
    const INDEX: usize;
}
impl Kind for FutexLock {
    const INDEX: usize = 0;
}
impl Kind for parking_lot::RawMutex {
    const INDEX: usize = 1;
}

// SAFETY: forwards to `System`.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if let Some(kind) = IN_LOCK.with(Cell::get) {
            IN_LOCK_ALLOCS[kind].fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: forwarded caller contract.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded caller contract.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Runs `f` with this thread marked as inside a call of lock type `K`.
fn in_lock<K: Kind, R>(f: impl FnOnce() -> R) -> R {
    IN_LOCK.with(|c| c.set(Some(K::INDEX)));
    let r = f();
    IN_LOCK.with(|c| c.set(None));
    r
}

/// A value two threads must never touch at once: each update reads both halves, checks them
/// equal, and writes both back incremented, with a yield in between.
struct Pair<L> {
    lock: L,
    halves: UnsafeCell<(u64, u64)>,
}

// SAFETY: `halves` is only touched under `lock`.
unsafe impl<L: Sync> Sync for Pair<L> {}

/// `threads` threads each update the pair `rounds` times under the lock, holding it for
/// `hold` (sleeping) every `sleep_every` rounds. Returns how many allocations were made inside
/// the lock calls.
fn hammer<L: RawMutex + Kind + Sync>(
    threads: usize,
    rounds: u64,
    hold: Duration,
    sleep_every: u64,
) -> usize {
    let pair = Pair {
        lock: L::INIT,
        halves: UnsafeCell::new((0, 0)),
    };
    let pair = &pair; // whole, not field by field (the closure needs the `Sync` pair)
    thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(move || {
                for i in 0..rounds {
                    in_lock::<L, _>(|| pair.lock.lock());
                    // SAFETY: the lock is held.
                    let (a, b) = unsafe { *pair.halves.get() };
                    assert_eq!(a, b, "two holders at once");
                    if i % sleep_every == 0 {
                        thread::sleep(hold);
                    } else {
                        thread::yield_now();
                    }
                    // SAFETY: the lock is held.
                    unsafe { *pair.halves.get() = (a + 1, b + 1) };
                    // SAFETY: this thread holds the lock.
                    in_lock::<L, _>(|| unsafe { pair.lock.unlock() });
                }
            });
        }
    });
    // SAFETY: every thread has been joined.
    let (a, b) = unsafe { *pair.halves.get() };
    assert_eq!((a, b), (threads as u64 * rounds, threads as u64 * rounds));
    IN_LOCK_ALLOCS[L::INDEX].load(Ordering::Relaxed)
}

#[test]
fn excludes_under_contention_and_never_allocates() {
    // More threads than cores, short critical sections with a yield inside: many waiters go
    // to sleep and are woken.
    let allocs = hammer::<FutexLock>(16, 2000, Duration::from_micros(200), 97);
    assert_eq!(allocs, 0, "FutexLock allocated inside lock or unlock");
}

/// The same counting catches `parking_lot::RawMutex`, whose first park builds its global hash
/// table with `Box` and `Vec` (and each new parking thread may grow it): the reason the global
/// allocator cannot use it.
#[test]
fn the_count_catches_parking_lot_allocating() {
    let allocs = hammer::<parking_lot::RawMutex>(16, 200, Duration::from_millis(1), 1);
    assert!(allocs > 0, "parking_lot parked without allocating?");
    println!("parking_lot::RawMutex: {allocs} allocations inside lock/unlock");
}

/// CPU time of the calling thread so far.
fn thread_cpu_time() -> Duration {
    // SAFETY: `rusage` is plain data; getrusage fills it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid, writable `rusage`.
    assert_eq!(unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) }, 0);
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// Waiters sleep: while one thread holds the lock for a long time, the others use almost no
/// CPU. A spinning lock would keep both cores busy for the whole run. The CPU time is the
/// locking threads' own (`RUSAGE_THREAD`), so the tests running beside this one do not count.
#[test]
fn waiters_sleep_instead_of_spinning() {
    let lock = FutexLock::new();
    let (threads, holds, hold) = (8, 5, Duration::from_millis(20));
    let t0 = Instant::now();
    let cpu: Duration = thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    for _ in 0..holds {
                        lock.lock();
                        thread::sleep(hold);
                        // SAFETY: this thread holds the lock.
                        unsafe { lock.unlock() };
                    }
                    thread_cpu_time()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    });
    let wall = t0.elapsed();
    println!("{threads} threads × {holds} holds of {hold:?}: wall {wall:.2?}, CPU {cpu:.2?}");
    assert!(
        wall >= hold * (threads * holds) as u32,
        "the holds overlapped: {wall:?}"
    );
    // Spinning waiters would use about min(threads - 1, cores) × wall of CPU.
    assert!(cpu < wall / 4, "waiters burned {cpu:?} of CPU in {wall:?}");
}
