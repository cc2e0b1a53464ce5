//! Multi-threaded throughput: 1, 2, 4 and 8 threads allocating and freeing at once through one
//! shared allocator, a share of the frees done by another thread than the one that allocated.
//!
//! Every allocator is a [`GlobalAlloc`] shared by reference (rlsf, which has no lock of its
//! own, behind a `std::sync::Mutex`), and every one runs the same generic function
//! (`measure`), so they differ only in the allocator.
//!
//! **Workload, per thread.** A local set of at most [`LIVE`] blocks, 16-aligned, sizes drawn
//! from a seeded stream (7 in 8 uniform in 8..=512 bytes, 1 in 8 in 513..=4096); the same seeds
//! for every allocator, so each thread asks for the same sizes in the same order. The set is
//! filled before the clock starts; then each step frees a random block when the set is full and
//! allocates one otherwise (so the steady state alternates a free and an allocation). One free
//! in [`HANDOFF`] is handed to the next thread instead (thread `i` to `i + 1`, the last to the
//! first; with one thread, to itself: a delayed free, not a remote one), through a mailbox that
//! the receiver empties every [`DRAIN_EVERY`] steps and frees. The mailboxes are `Mutex<Vec>`s
//! sized once up front and never grown: the handoff allocates nothing, through the allocator
//! under test (which glibc is) or any other. A producer that finds its neighbour's mailbox full
//! waits for room (emptying its own meanwhile, so a ring of waiting threads still moves), and
//! that is counted; a thread that has done its steps keeps emptying its mailbox until every
//! thread has, so the share of frees handed over is the same for every allocator.
//!
//! **What is checked.** Every block is stamped on allocation (its first 8 bytes, and its last 8
//! when it has 16 or more) with a tag unique to it, and the stamp is checked before it is
//! freed, by whichever thread frees it; a block that is misaligned or whose stamp changed is
//! counted as corrupted, and the allocator's row reports an error. After each run, with every
//! block freed, tagalloc's heaps are checked (`check()`, nothing in use, no free refused).
//!
//! **What is measured.** Operations (allocations + frees, all threads) per second of wall time,
//! from the first thread's start to the last thread's end of its timed steps; and the threads'
//! CPU time per operation (each thread's from its start until every thread is done, summed;
//! waits for room in a mailbox included), which shows what waiting costs where wall time
//! cannot: a thread spinning on a lock burns a core that a sleeping one leaves to the holder.

use std::alloc::{GlobalAlloc, Layout, System};
use std::ffi::OsStr;
use std::path::Path;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Barrier, Mutex, PoisonError};
use std::time::{Duration, Instant};

use indicatif::ProgressBar;
use serde_json::{json, Value};
use tagalloc::{GlobalHeap, SpinLock};
use tagalloc_host::{FutexLock, HostAllocator};

use crate::cli::{self, Mode, Opt};
use crate::clock::thread_cpu;
use crate::machine::{load_average, logical_cpus};
use crate::plot;
use crate::report::{self, Better, Table};
use crate::subjects::Arena;

/// The thread counts measured.
pub const THREADS: [usize; 4] = [1, 2, 4, 8];
/// Live blocks each thread keeps once its set is full.
pub const LIVE: usize = 256;
/// One free in this many is handed to the next thread.
pub const HANDOFF: u64 = 4;
/// A thread empties its mailbox every this many steps.
pub const DRAIN_EVERY: usize = 32;
/// Blocks a mailbox holds (far more than arrive between two drains while both threads run).
const MAILBOX: usize = 8192;
/// Alignment of every request.
const ALIGN: usize = 16;
/// The arena of the arena allocators: 8 threads × ([`LIVE`] + [`MAILBOX`]) blocks of about
/// 520 B on average (at most 4 KiB) fit several times over.
const ARENA: usize = 128 << 20;

/// How long to measure.
pub struct Options {
    /// Timed steps per thread (each an allocation, a free, or a handoff).
    pub steps: usize,
    /// Rounds; the median of each allocator's runs is reported.
    pub runs: usize,
    /// One untimed round first (glibc's per-thread arenas, caches, page tables).
    pub warmup: bool,
    /// Which thread counts and allocators run (all of them by default).
    pub only: Selection,
}

/// The options `threads` takes.
pub const OPTIONS: &[Opt] = &[cli::runs(
    "rounds, the median of each allocator's runs reported (default 7, after an untimed one; 1 with --quick, none untimed)",
)];

impl Options {
    /// The defaults: 7 rounds of 500,000 steps a thread after an untimed one (with `--quick`,
    /// one round of 2,000), every thread count and allocator.
    pub fn new(mode: Mode) -> Self {
        Options {
            steps: if mode == Mode::Quick { 2_000 } else { 500_000 },
            runs: mode.pick(7, 7, 1),
            warmup: mode != Mode::Quick,
            only: Selection::default(),
        }
    }

    /// Sets one of [`OPTIONS`] from its value, or says why the value is refused.
    pub fn set(&mut self, name: &str, value: &OsStr) -> Result<(), String> {
        match name {
            "runs" => self.runs = cli::count(value, 1, "rounds")?,
            _ => return Err(cli::not_taken("threads")),
        }
        Ok(())
    }
}

/// A part of the benchmark to run alone, to profile one allocator at one thread count: the
/// command line's words after `threads`, each a thread count of [`THREADS`] or an allocator's
/// key ([`Contender::key`]). No thread count means all of them; no allocator, all of them.
#[derive(Clone, Debug, Default)]
pub struct Selection {
    threads: Vec<usize>,
    allocators: Vec<Contender>,
}

impl Selection {
    /// The selection `words` name, or what is wrong with them.
    pub fn parse(words: &[String]) -> Result<Selection, String> {
        let mut sel = Selection::default();
        for w in words {
            if let Some(&t) = THREADS.iter().find(|t| t.to_string() == *w) {
                sel.threads.push(t);
            } else if let Some(&c) = Contender::ALL.iter().find(|c| c.key() == w) {
                sel.allocators.push(c);
            } else {
                let keys: Vec<&str> = Contender::ALL.iter().map(|c| c.key()).collect();
                return Err(format!(
                    "{w:?} is neither a thread count ({}) nor an allocator ({})",
                    THREADS.map(|t| t.to_string()).join(", "),
                    keys.join(", ")
                ));
            }
        }
        Ok(sel)
    }

    fn has_threads(&self, t: usize) -> bool {
        self.threads.is_empty() || self.threads.contains(&t)
    }

    fn has(&self, c: Contender) -> bool {
        self.allocators.is_empty() || self.allocators.contains(&c)
    }

    /// How many runs a round makes.
    pub fn runs_per_round(&self) -> usize {
        let t = THREADS.iter().filter(|&&t| self.has_threads(t)).count();
        t * Contender::ALL.iter().filter(|&&c| self.has(c)).count()
    }
}

/// The allocators compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Contender {
    /// `tagalloc::GlobalHeap` (its default spin lock) over the arena.
    GlobalSpin,
    /// `GlobalHeap<tagalloc_host::FutexLock>` over the arena: waiters sleep.
    GlobalFutex,
    /// `tagalloc_host::HostAllocator`: the pool over `mmap` regions, futex lock.
    Host,
    /// talc 5's `TalcLock` with `spinning_top::RawSpinlock`, the arena claimed.
    Talc,
    /// rlsf's TLSF over the arena behind a `std::sync::Mutex`.
    Rlsf,
    /// glibc's malloc (`std::alloc::System`).
    Glibc,
}

impl Contender {
    pub const ALL: [Contender; 6] = [
        Contender::GlobalSpin,
        Contender::GlobalFutex,
        Contender::Host,
        Contender::Talc,
        Contender::Rlsf,
        Contender::Glibc,
    ];

    /// The name in tables and charts (and in `style`): the peers keep the names they have in
    /// the other benchmarks, so that they keep their colours.
    pub fn name(self) -> &'static str {
        match self {
            Contender::GlobalSpin => "tagalloc GlobalHeap",
            Contender::GlobalFutex => "tagalloc GlobalHeap (futex)",
            Contender::Host => "tagalloc HostAllocator",
            Contender::Talc => crate::subjects::Peer::TALC_NAME,
            Contender::Rlsf => "rlsf",
            Contender::Glibc => "glibc malloc",
        }
    }

    /// How it is set up, for the report.
    fn setup(self) -> &'static str {
        match self {
            Contender::GlobalSpin => "`GlobalHeap` (spin lock), arena",
            Contender::GlobalFutex => "`GlobalHeap<FutexLock>`, arena",
            Contender::Host => "`HostAllocator` (mmap regions, futex lock)",
            Contender::Talc => "`TalcLock<RawSpinlock, Manual>`, arena claimed",
            Contender::Rlsf => "`Mutex<Tlsf>`, arena",
            Contender::Glibc => "`System` (per-thread arenas)",
        }
    }

    /// The JSON key, and the name that selects it on the command line.
    pub fn key(self) -> &'static str {
        match self {
            Contender::GlobalSpin => "tagalloc_globalheap_spin",
            Contender::GlobalFutex => "tagalloc_globalheap_futex",
            Contender::Host => "tagalloc_hostallocator",
            Contender::Talc => "talc_spin",
            Contender::Rlsf => "rlsf_mutex",
            Contender::Glibc => "glibc",
        }
    }
}

/// What this benchmark needs of an allocator besides [`GlobalAlloc`]: a look at its state once
/// a run is over and every block is freed.
trait Contended: GlobalAlloc + Sync {
    /// The allocator's own consistency checks, where it has them.
    fn verify(&self) -> Result<(), String> {
        Ok(())
    }

    /// How many frees waited in a queue for the lock (tagalloc's shared heaps).
    fn queued_frees(&self) -> Option<usize> {
        None
    }

    /// A worker thread is done with the allocator (after its clean-up, untimed): a per-thread
    /// cache goes back now rather than at the thread's exit, which may come after `verify`.
    fn thread_done(&self) {}

    /// Allocations served by per-thread caches ÷ all cacheable ones so far (tagalloc's host
    /// allocator).
    fn cache_hit_rate(&self) -> Option<f64> {
        None
    }
}

impl<L: tagalloc::RawLock + Sync, const N: usize> Contended for GlobalHeap<L, N> {
    fn verify(&self) -> Result<(), String> {
        let err = |e: tagalloc::Error| format!("tagalloc: {e}");
        self.with_heap(|h| h.check())
            .map_err(err)?
            .map_err(|e| format!("check failed: {e}"))?;
        let stats = self.stats().map_err(err)?;
        if stats.refused_frees != 0 {
            return Err(format!(
                "{} refused",
                report::counted(stats.refused_frees, "free", "frees")
            ));
        }
        if stats.in_use != 0 {
            return Err(format!(
                "{} bytes still in use with every block freed",
                stats.in_use
            ));
        }
        Ok(())
    }

    fn queued_frees(&self) -> Option<usize> {
        Some(GlobalHeap::queued_frees(self))
    }
}

impl Contended for HostAllocator {
    fn verify(&self) -> Result<(), String> {
        let err = |e: tagalloc::Error| format!("tagalloc: {e}");
        // The batches the caches handed to one another are cached blocks too: back to the heap
        // (the caches themselves went back as each thread finished).
        self.pool().flush_transfer().map_err(err)?;
        self.pool()
            .with_pool(|p| p.check())
            .map_err(err)?
            .map_err(|e| format!("check failed: {e}"))?;
        let stats = self.stats().map_err(err)?;
        if stats.heap.refused_frees != 0 {
            return Err(format!(
                "{} refused",
                report::counted(stats.heap.refused_frees, "free", "frees")
            ));
        }
        if stats.heap.in_use != 0 {
            return Err(format!(
                "{} bytes still in use with every block freed",
                stats.heap.in_use
            ));
        }
        Ok(())
    }

    fn queued_frees(&self) -> Option<usize> {
        Some(self.pool().queued_frees())
    }

    fn thread_done(&self) {
        self.flush_thread_cache();
    }

    fn cache_hit_rate(&self) -> Option<f64> {
        let c = self.stats().ok()?.cache;
        Some(c.hits as f64 / (c.hits + c.misses).max(1) as f64)
    }
}

/// talc as its docs set it up for threads: a `lock_api` spin lock around the heap.
type TalcSpin = talc::TalcLock<spinning_top::RawSpinlock, talc::source::Manual>;

impl Contended for TalcSpin {}

impl Contended for System {}

/// rlsf's TLSF (the parameters of rlsf's own global allocator) behind a standard mutex: rlsf has
/// no lock of its own.
struct LockedRlsf<'a> {
    tlsf: Mutex<rlsf::Tlsf<'a, usize, usize, { usize::BITS as usize }, { usize::BITS as usize }>>,
}

impl<'a> LockedRlsf<'a> {
    fn new(arena: &'a mut Arena) -> Self {
        let mut tlsf = rlsf::Tlsf::new();
        let pool = NonNull::slice_from_raw_parts(arena.base(), arena.len());
        // SAFETY: the pool is the arena, borrowed mutably for 'a (the pool lifetime of `Tlsf`);
        // nothing else touches it meanwhile.
        unsafe { tlsf.insert_free_block_ptr(pool) };
        LockedRlsf {
            tlsf: Mutex::new(tlsf),
        }
    }
}

// SAFETY: every call goes to rlsf under the mutex, so one thread at a time uses the TLSF;
// `allocate` returns null or a fresh block of the layout's size and alignment; `deallocate`
// gets the caller's promise (the block came from here with this alignment). `realloc` is the
// trait's default (allocate, copy, free); the benchmark never calls it.
unsafe impl GlobalAlloc for LockedRlsf<'_> {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let mut tlsf = self.tlsf.lock().unwrap_or_else(PoisonError::into_inner);
        tlsf.allocate(layout)
            .map_or(std::ptr::null_mut(), NonNull::as_ptr)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if let Some(p) = NonNull::new(ptr) {
            let mut tlsf = self.tlsf.lock().unwrap_or_else(PoisonError::into_inner);
            // SAFETY: `GlobalAlloc`'s contract: `ptr` came from this pool with `layout`.
            unsafe { tlsf.deallocate(p, layout.align()) }
        }
    }
}

impl Contended for LockedRlsf<'_> {}

/// A live block: where it is, its size, and the tag stamped into it.
#[derive(Clone, Copy)]
struct Live {
    ptr: NonNull<u8>,
    size: usize,
    tag: u64,
}

// SAFETY: a `Live` is the only handle to its block; moving it to another thread (through a
// mailbox) moves the ownership of the block with it, and only the holder touches the memory.
unsafe impl Send for Live {}

/// Writes `tag` into the block's first 8 bytes and its complement into the last 8 (when they do
/// not overlap the first).
///
/// # Safety
/// `ptr` is a live block of `size >= 8` bytes owned by the caller, aligned to 8.
unsafe fn stamp(ptr: NonNull<u8>, size: usize, tag: u64) {
    // SAFETY: the first 8 bytes are inside the block and aligned (the caller's contract).
    unsafe { ptr.cast::<u64>().write(tag) };
    if size >= 16 {
        // SAFETY: `size - 8 >= 8`, so the last 8 bytes are inside the block, after the first.
        unsafe { ptr.add(size - 8).cast::<u64>().write_unaligned(!tag) };
    }
}

/// Whether the block still holds its stamp.
///
/// # Safety
/// As for [`stamp`], on a block stamped with `tag` (or, if corrupted, any initialised bytes).
unsafe fn intact(b: &Live) -> bool {
    // SAFETY: as in `stamp`.
    let first = unsafe { b.ptr.cast::<u64>().read() };
    let last = if b.size >= 16 {
        // SAFETY: as in `stamp`.
        unsafe { b.ptr.add(b.size - 8).cast::<u64>().read_unaligned() }
    } else {
        !b.tag
    };
    first == b.tag && last == !b.tag
}

/// A request size: 7 in 8 in 8..=512 bytes, 1 in 8 in 513..=4096.
fn draw_size(rng: &mut fastrand::Rng) -> usize {
    if rng.u8(..8) == 0 {
        rng.usize(513..=4096)
    } else {
        rng.usize(8..=512)
    }
}

/// One thread's counts and clocks.
#[derive(Default)]
struct ThreadOut {
    allocs: u64,
    frees: u64,
    handed: u64,
    waited: u64,
    failures: u64,
    corrupted: u64,
    start: Option<Instant>,
    end: Option<Instant>,
    cpu: Option<Duration>,
}

/// What one run (one allocator, one thread count) measured.
#[derive(Clone, Copy, Default)]
struct Outcome {
    ops: u64,
    wall: Duration,
    /// The threads' CPU time over their timed steps, summed; `None` where it cannot be read.
    cpu: Option<Duration>,
    handed: u64,
    waited: u64,
    failures: u64,
    corrupted: u64,
}

/// A thread's state while it runs: its allocator, its live set, its counts.
struct Worker<'a, A: GlobalAlloc> {
    alloc: &'a A,
    live: Vec<Live>,
    rng: fastrand::Rng,
    next_tag: u64,
    out: ThreadOut,
}

impl<A: GlobalAlloc> Worker<'_, A> {
    fn alloc(&mut self) {
        let size = draw_size(&mut self.rng);
        let Ok(layout) = Layout::from_size_align(size, ALIGN) else {
            self.out.failures += 1;
            return;
        };
        // SAFETY: the layout's size is at least 8, never zero.
        let p = unsafe { self.alloc.alloc(layout) };
        let Some(ptr) = NonNull::new(p) else {
            self.out.failures += 1;
            return;
        };
        self.out.allocs += 1;
        if ptr.addr().get() % ALIGN != 0 {
            // Not stamped and never freed: the allocator broke its contract.
            self.out.corrupted += 1;
            return;
        }
        let tag = self.next_tag;
        self.next_tag += 1;
        // SAFETY: a fresh block of `size >= 8` bytes, 16-aligned (checked above).
        unsafe { stamp(ptr, size, tag) };
        self.live.push(Live { ptr, size, tag });
    }

    /// Checks the stamp and frees the block.
    fn free(&mut self, b: Live) {
        // SAFETY: `b` is live and owned by this thread (from its set or its mailbox), stamped.
        if !unsafe { intact(&b) } {
            self.out.corrupted += 1;
        }
        // The size and alignment it was allocated with: `from_size_align` accepted them then.
        if let Ok(layout) = Layout::from_size_align(b.size, ALIGN) {
            // SAFETY: `b` came from this allocator with `layout` and is freed once: it left
            // the set (or the mailbox) it was in.
            unsafe { self.alloc.dealloc(b.ptr.as_ptr(), layout) };
            self.out.frees += 1;
        }
    }

    /// Hands `b` to the next thread: into its mailbox, or, when that is full, after waiting for
    /// room (emptying this thread's own mailbox meanwhile, so that threads waiting on one
    /// another in a ring still make progress).
    fn hand_over(
        &mut self,
        b: Live,
        next: &Mutex<Vec<Live>>,
        own: &Mutex<Vec<Live>>,
        inbox: &mut Vec<Live>,
    ) {
        let mut waited = false;
        loop {
            let mut mb = next.lock().unwrap_or_else(PoisonError::into_inner);
            if mb.len() < mb.capacity() {
                mb.push(b);
                self.out.handed += 1;
                self.out.waited += u64::from(waited);
                return;
            }
            drop(mb);
            waited = true;
            self.drain(own, inbox);
            std::thread::yield_now();
        }
    }

    /// Frees every block the previous thread handed over. `inbox` is an empty vector of
    /// [`MAILBOX`] capacity, swapped with the mailbox's, so nothing is allocated.
    fn drain(&mut self, mailbox: &Mutex<Vec<Live>>, inbox: &mut Vec<Live>) {
        std::mem::swap(
            &mut *mailbox.lock().unwrap_or_else(PoisonError::into_inner),
            inbox,
        );
        for b in inbox.drain(..) {
            self.free(b);
        }
    }
}

/// Runs `steps` steps on each of `threads` threads through `alloc` (see the module docs) and
/// frees every block afterwards. `seed` fixes every thread's stream.
fn measure<A: Contended>(
    alloc: &A,
    threads: usize,
    steps: usize,
    seed: u64,
) -> Result<Outcome, String> {
    let mailboxes: Vec<Mutex<Vec<Live>>> = (0..threads)
        .map(|_| Mutex::new(Vec::with_capacity(MAILBOX)))
        .collect();
    let start = Barrier::new(threads);
    let end = Barrier::new(threads);
    let done = AtomicUsize::new(0);
    let outs: Vec<ThreadOut> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|me| {
                let (mailboxes, start, end, done) = (&mailboxes, &start, &end, &done);
                s.spawn(move || {
                    let mut w = Worker {
                        alloc,
                        live: Vec::with_capacity(LIVE),
                        rng: fastrand::Rng::with_seed(seed ^ (me as u64).wrapping_mul(0x9E37_79B9)),
                        next_tag: (me as u64) << 48 | 0x5A5A_0000_0000,
                        out: ThreadOut::default(),
                    };
                    let mut inbox = Vec::with_capacity(MAILBOX);
                    let next = &mailboxes[(me + 1) % threads];
                    // The fill is untimed and not counted (its failures are).
                    while w.live.len() < LIVE && w.out.failures < LIVE as u64 {
                        w.alloc();
                    }
                    w.out.allocs = 0;
                    start.wait();
                    let cpu0 = thread_cpu();
                    w.out.start = Some(Instant::now());
                    for step in 0..steps {
                        if step % DRAIN_EVERY == 0 {
                            w.drain(&mailboxes[me], &mut inbox);
                        }
                        if w.live.len() < LIVE {
                            w.alloc();
                            continue;
                        }
                        let i = w.rng.usize(..w.live.len());
                        let b = w.live.swap_remove(i);
                        if w.rng.u64(..HANDOFF) == 0 {
                            w.hand_over(b, next, &mailboxes[me], &mut inbox);
                        } else {
                            w.free(b);
                        }
                    }
                    w.out.end = Some(Instant::now());
                    done.fetch_add(1, Ordering::AcqRel);
                    // Until every thread is done handing over, frees keep arriving: take them
                    // (so that no producer waits forever on a full mailbox), sleeping between
                    // looks rather than spinning on a core the others need.
                    while done.load(Ordering::Acquire) < threads {
                        w.drain(&mailboxes[me], &mut inbox);
                        std::thread::sleep(Duration::from_micros(100));
                    }
                    w.out.cpu = match (cpu0, thread_cpu()) {
                        (Some(a), Some(b)) => b.checked_sub(a),
                        _ => None,
                    };
                    end.wait();
                    let counted = (w.out.allocs, w.out.frees);
                    w.drain(&mailboxes[me], &mut inbox);
                    while let Some(b) = w.live.pop() {
                        w.free(b);
                    }
                    alloc.thread_done();
                    // Only the timed steps count; the clean-up's checks do.
                    (w.out.allocs, w.out.frees) = counted;
                    w.out
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().map_err(|_| "a thread panicked".to_string()))
            .collect::<Result<Vec<_>, _>>()
    })?;
    let first = outs.iter().filter_map(|o| o.start).min();
    let last = outs.iter().filter_map(|o| o.end).max();
    let cpu = outs
        .iter()
        .map(|o| o.cpu)
        .try_fold(Duration::ZERO, |sum, c| c.map(|c| sum + c));
    Ok(Outcome {
        ops: outs.iter().map(|o| o.allocs + o.frees).sum(),
        wall: match (first, last) {
            (Some(a), Some(b)) => b.duration_since(a),
            _ => Duration::ZERO,
        },
        cpu,
        handed: outs.iter().map(|o| o.handed).sum(),
        waited: outs.iter().map(|o| o.waited).sum(),
        failures: outs.iter().map(|o| o.failures).sum(),
        corrupted: outs.iter().map(|o| o.corrupted).sum(),
    })
}

/// One run of `c` with `threads` threads: the allocator built fresh (over the arena, where it
/// takes one), measured, checked with every block freed, and dropped. Also returns how many
/// frees waited in tagalloc's queue.
fn one(
    c: Contender,
    arena: &mut Arena,
    threads: usize,
    steps: usize,
    seed: u64,
) -> Result<(Outcome, Option<usize>), String> {
    fn go<A: Contended>(
        a: &A,
        threads: usize,
        steps: usize,
        seed: u64,
    ) -> Result<(Outcome, Option<usize>), String> {
        let out = measure(a, threads, steps, seed)?;
        a.verify()?;
        if let Some(rate) = a.cache_hit_rate() {
            eprintln!(
                "tagalloc HostAllocator, {threads} threads: {:.2} % of cacheable allocations \
                 served by the thread caches",
                rate * 100.0
            );
        }
        Ok((out, a.queued_frees()))
    }
    let (base, len) = (arena.base().as_ptr(), arena.len());
    let tagalloc = |e: tagalloc::Error| format!("tagalloc: add_region: {e}");
    match c {
        Contender::GlobalSpin => {
            let heap: GlobalHeap<SpinLock> = GlobalHeap::with_lock();
            // SAFETY: the arena is page-aligned, valid for `len` bytes and borrowed mutably
            // for this call, which the heap does not outlive; nothing else touches it.
            unsafe { heap.add_region(base, len) }.map_err(tagalloc)?;
            go(&heap, threads, steps, seed)
        }
        Contender::GlobalFutex => {
            let heap: GlobalHeap<FutexLock> = GlobalHeap::with_lock();
            // SAFETY: as above.
            unsafe { heap.add_region(base, len) }.map_err(tagalloc)?;
            go(&heap, threads, steps, seed)
        }
        Contender::Host => go(&HostAllocator::new(), threads, steps, seed),
        Contender::Talc => {
            let talc = TalcSpin::new(talc::source::Manual);
            // SAFETY: as above: the arena is the heap's alone for as long as it lives.
            unsafe { talc.lock().claim(base, len) }.ok_or("talc: claim refused the arena")?;
            go(&talc, threads, steps, seed)
        }
        Contender::Rlsf => go(&LockedRlsf::new(arena), threads, steps, seed),
        Contender::Glibc => go(&System, threads, steps, seed),
    }
}

/// The seed of round `r`: the same for every allocator and thread count in the round.
fn seed(round: usize) -> u64 {
    0x7468_7265_6164_7300 ^ (round as u64).wrapping_mul(0x2545_F491_4F6C_DD1D)
}

/// Each allocator's results, per thread count.
#[derive(Clone, Default)]
struct Cell {
    /// Operations per second, one per timed round.
    rates: Vec<f64>,
    /// CPU ns per operation, one per timed round where the clock could be read.
    cpu_ns: Vec<f64>,
    /// The round each rate came from, to pair it with the reference's.
    rounds: Vec<usize>,
    /// Frees queued for tagalloc's lock ÷ frees, per timed round.
    queued_share: Vec<f64>,
    handed: u64,
    waited: u64,
    failures: u64,
    corrupted: u64,
    errors: Vec<String>,
}

/// Runs the benchmark; returns the markdown section and the JSON record.
pub fn run(
    opts: &Options,
    plots: Option<&Path>,
    bar: &ProgressBar,
) -> Result<(String, Value), String> {
    let load_start = load_average();
    eprintln!("tagalloc-bench threads: load average at the start {load_start}");
    let cores = logical_cpus();
    let mut arena = Arena::new(ARENA)?;
    let all = Contender::ALL;
    let mut cells: Vec<Vec<Cell>> = vec![vec![Cell::default(); THREADS.len()]; all.len()];
    let warmup = usize::from(opts.warmup);
    for round in 0..warmup + opts.runs {
        let timed = round >= warmup;
        for (ti, &threads) in THREADS.iter().enumerate() {
            if !opts.only.has_threads(threads) {
                continue;
            }
            // Interleaved, in an order rotated each round, so that noise hits all alike.
            for k in 0..all.len() {
                let ci = (k + round) % all.len();
                let c = all[ci];
                if !opts.only.has(c) {
                    continue;
                }
                bar.set_message(format!("threads: {} × {threads}", c.name()));
                bar.inc(1);
                let cell = &mut cells[ci][ti];
                match one(c, &mut arena, threads, opts.steps, seed(round)) {
                    Ok((o, queued)) => {
                        cell.failures += o.failures;
                        cell.corrupted += o.corrupted;
                        if !timed {
                            continue;
                        }
                        let secs = o.wall.as_secs_f64();
                        cell.rates.push(if secs > 0.0 {
                            o.ops as f64 / secs
                        } else {
                            f64::NAN
                        });
                        cell.rounds.push(round);
                        if let Some(cpu) = o.cpu.filter(|_| o.ops > 0) {
                            cell.cpu_ns.push(cpu.as_nanos() as f64 / o.ops as f64);
                        }
                        if let Some(q) = queued {
                            // Frees are about half of the operations; the queue counts frees
                            // of the fill and the clean-up too, so this is an estimate.
                            let frees = (o.ops / 2).max(1);
                            cell.queued_share.push(q as f64 / frees as f64);
                        }
                        cell.handed += o.handed;
                        cell.waited += o.waited;
                    }
                    Err(e) => cell.errors.push(e),
                }
            }
        }
    }
    let load_end = load_average();
    eprintln!("tagalloc-bench threads: load average at the end {load_end}");

    let median = |v: &[f64]| report::median(v);
    let rates: Vec<Vec<f64>> = cells
        .iter()
        .map(|row| row.iter().map(|c| median(&c.rates)).collect())
        .collect();
    let base: Vec<f64> = rates[0].clone();
    let ratio_range = |ci: usize, ti: usize| -> Option<(f64, f64)> {
        let (c, r) = (&cells[ci][ti], &cells[0][ti]);
        let per: Vec<f64> = c
            .rounds
            .iter()
            .zip(&c.rates)
            .filter_map(|(round, rate)| {
                let j = r.rounds.iter().position(|x| x == round)?;
                Some(rate / r.rates[j])
            })
            .filter(|x| x.is_finite())
            .collect();
        let lo = per.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = per.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        (!per.is_empty()).then_some((lo, hi))
    };
    let over: Vec<String> = THREADS
        .iter()
        .filter(|&&t| cores > 0 && t > cores)
        .map(|t| t.to_string())
        .collect();
    let machine = if cores == 0 {
        "The number of cores could not be read.".to_string()
    } else if over.is_empty() {
        format!("This machine has {cores} cores available to the process.")
    } else {
        format!(
            "This machine has {} available to the process (`available_parallelism`), so {} \
             threads oversubscribe it: threads then wait for a core as well as for the lock.",
            report::plural(cores, "core"),
            over.join(" and ")
        )
    };
    let thread_header = |t: usize| report::plural(t, "thread");

    let table = |first: &[(&str, bool)]| {
        let mut h: Vec<(String, bool)> = first.iter().map(|(s, r)| (s.to_string(), *r)).collect();
        h.extend(THREADS.iter().map(|&t| (thread_header(t), true)));
        h
    };
    let render = |h: Vec<(String, bool)>, rows: Vec<Vec<String>>| {
        let refs: Vec<(&str, bool)> = h.iter().map(|(s, r)| (s.as_str(), *r)).collect();
        let mut t = Table::new(&refs);
        for r in rows {
            t.row(r);
        }
        t.render()
    };
    let mops = |v: f64| {
        if v.is_finite() {
            format!("{:.2}", v / 1e6)
        } else {
            "—".into()
        }
    };
    let rate_rows = all
        .iter()
        .enumerate()
        .map(|(ci, c)| {
            let mut row = vec![c.name().to_string(), c.setup().to_string()];
            row.extend(rates[ci].iter().map(|&v| mops(v)));
            row
        })
        .collect();
    let ratio_rows = all
        .iter()
        .enumerate()
        .map(|(ci, c)| {
            let mut row = vec![c.name().to_string()];
            row.extend((0..THREADS.len()).map(|ti| {
                let r = report::ratio(rates[ci][ti], Some(base[ti]));
                match ratio_range(ci, ti) {
                    Some((lo, hi)) if ci != 0 && cells[ci][ti].rates.len() > 1 => {
                        format!("{r} ({lo:.2}–{hi:.2})")
                    }
                    _ => r,
                }
            }));
            row
        })
        .collect();
    let cpu_rows = all
        .iter()
        .enumerate()
        .map(|(ci, c)| {
            let mut row = vec![c.name().to_string()];
            row.extend(
                cells[ci]
                    .iter()
                    .map(|cell| report::nanos(median(&cell.cpu_ns))),
            );
            row
        })
        .collect();
    let queue_rows = all
        .iter()
        .enumerate()
        .filter(|(ci, _)| cells[*ci].iter().any(|c| !c.queued_share.is_empty()))
        .map(|(ci, c)| {
            let mut row = vec![c.name().to_string()];
            row.extend(cells[ci].iter().map(|cell| {
                let v = median(&cell.queued_share);
                if v.is_finite() {
                    format!("{:.1} %", v * 100.0)
                } else {
                    "—".into()
                }
            }));
            row
        })
        .collect();

    let mut notes = Vec::new();
    for (ci, c) in all.iter().enumerate() {
        for (ti, cell) in cells[ci].iter().enumerate() {
            let at = format!("{}, {}", c.name(), thread_header(THREADS[ti]));
            let mut errors = cell.errors.clone();
            errors.dedup();
            for e in errors {
                notes.push(format!("- {at}: error: {e}"));
            }
            if cell.corrupted > 0 {
                notes.push(format!(
                    "- {at}: error: {} misaligned or with their stamp overwritten",
                    report::counted(cell.corrupted, "block", "blocks")
                ));
            }
            if cell.failures > 0 {
                notes.push(format!(
                    "- {at}: {} failed",
                    report::counted(cell.failures, "allocation", "allocations")
                ));
            }
        }
    }

    let (waited, handed) = cells
        .iter()
        .flatten()
        .fold((0, 0), |(w, h), c| (w + c.waited, h + c.handed));
    if waited > 0 {
        notes.push(format!(
            "- {} of {} handoffs ({:.3} %) found the next thread's mailbox full and waited for \
             room (per allocator and thread count: `waited` in the JSON).",
            report::count(waited),
            report::count(handed),
            100.0 * waited as f64 / handed.max(1) as f64
        ));
    }

    let ratio = format!(
        "allocator: {}",
        report::ratio_header("tagalloc GlobalHeap", Better::Higher)
    );
    let mut md = format!(
        "## Multi-threaded throughput\n\n\
         {threads} threads at once through one shared allocator. Each thread keeps up to {LIVE} \
         live blocks (16-aligned; 7 in 8 of 8–512 B, 1 in 8 of 513–4096 B; the same seeded \
         sizes for every allocator), filled before the clock starts; then, for {steps} steps, \
         frees a random block when it holds {LIVE} and allocates one otherwise. One free in \
         {HANDOFF} is handed to the next thread, which frees it (from a pre-sized mailbox it \
         empties every {DRAIN_EVERY} steps; with one thread, to itself). Every block's first and \
         last 8 bytes are stamped and checked before it is freed. Operations = allocations + \
         frees of all threads, per second of wall time from the first thread's start to the \
         last one's end; median of {runs}{warm}, allocators interleaved and their order rotated \
         each round.\n\n\
         {machine} Load average (1, 5, 15 min) at the start: {load_start}; at the end: \
         {load_end}.\n\n\
         ### Operations per second (millions; higher is better)\n\n{t1}\n\
         ### Ratio to tagalloc GlobalHeap (operations per second ÷ GlobalHeap's; higher is \
         better; the range of the rounds' own ratios in brackets)\n\n{t2}\n\
         ### CPU time per operation (ns: all threads' CPU time ÷ operations; lower is better)\n\n\
         Where wall time hides it: a thread spinning on a lock burns a core; one asleep leaves \
         it to the holder.\n\n{t3}",
        threads = THREADS
            .iter()
            .map(|t| t.to_string())
            .collect::<Vec<_>>()
            .join(", "),
        steps = report::count(opts.steps as u64),
        runs = report::plural(opts.runs, "run"),
        warm = if opts.warmup {
            " after an untimed round"
        } else {
            ""
        },
        t1 = render(table(&[("allocator", false), ("setup", false)]), rate_rows),
        t2 = render(table(&[(&ratio, false)]), ratio_rows),
        t3 = render(table(&[("allocator", false)]), cpu_rows),
    );
    md.push_str(&format!(
        "\n### Frees queued by tagalloc's shared heaps\n\nFrees that found the lock taken and \
         were left on the queue for the next holder, ÷ about half the operations (the frees; \
         the fill's and clean-up's frees are in the count too).\n\n{}",
        render(table(&[("allocator", false)]), queue_rows)
    ));
    report::push_notes(&mut md, &notes);

    if let Some(dir) = plots {
        let series: Vec<plot::Series> = all
            .iter()
            .enumerate()
            .map(|(ci, c)| plot::Series {
                name: c.name().to_string(),
                points: THREADS
                    .iter()
                    .zip(&rates[ci])
                    .map(|(&t, &r)| (t as f64, r / 1e6))
                    .collect(),
                value: None,
            })
            .collect();
        let ticks: Vec<f64> = THREADS.iter().map(|&t| t as f64).collect();
        let chart_notes = [
            format!(
                "{} Load average at the start {load_start}, at the end {load_end}.",
                machine.replace('`', "")
            ),
            format!(
                "Each thread: up to {LIVE} live blocks of 8–4096 B, a free when full, else an \
                 allocation; 1 free in {HANDOFF} handed to the next thread. Median of {}.",
                report::plural(opts.runs, "run")
            ),
        ];
        let chart = plot::Lines {
            title: "Multi-threaded throughput: allocations + frees per second, all threads \
                    together (higher is better)",
            x_desc: "threads (log scale)",
            y_desc: "million operations per second",
            log_x_ticks: Some(&ticks),
            y_max: None,
            value_header: "",
            notes: &chart_notes,
        };
        plot::lines(&dir.join("threads.svg"), &chart, &series)?;
    }

    let json = json!({
        "threads": THREADS,
        "steps_per_thread": opts.steps,
        "runs": opts.runs,
        "warmup_round": opts.warmup,
        "live_per_thread": LIVE,
        "handoff_one_in": HANDOFF,
        "drain_every": DRAIN_EVERY,
        "cores": cores,
        "load_average_start": load_start,
        "load_average_end": load_end,
        "results": all.iter().enumerate().map(|(ci, c)| json!({
            "allocator": c.name(),
            "key": c.key(),
            "setup": c.setup(),
            "ops_per_sec": rates[ci]
                .iter()
                .map(|&v| v.is_finite().then_some(v))
                .collect::<Vec<_>>(),
            "ops_per_sec_runs": cells[ci].iter().map(|c| c.rates.clone()).collect::<Vec<_>>(),
            "ratio_to_tagalloc_globalheap": (0..THREADS.len()).map(|ti| {
                let (r, b) = (rates[ci][ti], base[ti]);
                (r.is_finite() && b > 0.0).then(|| r / b)
            }).collect::<Vec<_>>(),
            "cpu_ns_per_op": cells[ci].iter().map(|c| {
                let v = median(&c.cpu_ns);
                v.is_finite().then_some(v)
            }).collect::<Vec<_>>(),
            "queued_free_share": cells[ci].iter().map(|c| {
                let v = median(&c.queued_share);
                v.is_finite().then_some(v)
            }).collect::<Vec<_>>(),
            "failures": cells[ci].iter().map(|c| c.failures).collect::<Vec<_>>(),
            "corrupted": cells[ci].iter().map(|c| c.corrupted).collect::<Vec<_>>(),
            "waited": cells[ci].iter().map(|c| c.waited).collect::<Vec<_>>(),
            "errors": cells[ci].iter().map(|c| c.errors.clone()).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    });
    Ok((md, json))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::UnsafeCell;

    /// A broken allocator: every block is the same 8 KiB buffer, and freeing does nothing.
    struct OneBuffer(UnsafeCell<[u128; 512]>);

    // SAFETY: it is broken on purpose (blocks overlap), for the test that the stamps catch it;
    // the memory itself stays valid and in bounds for every request the workload makes.
    unsafe impl Sync for OneBuffer {}

    // SAFETY: not upheld (blocks overlap): the point of the test. Every pointer returned is
    // 16-aligned and valid for 4096 bytes, which the workload's requests never exceed.
    unsafe impl GlobalAlloc for OneBuffer {
        unsafe fn alloc(&self, _layout: Layout) -> *mut u8 {
            self.0.get().cast()
        }
        unsafe fn dealloc(&self, _ptr: *mut u8, _layout: Layout) {}
    }

    impl Contended for OneBuffer {}

    #[test]
    fn overlapping_blocks_are_caught() {
        // One thread: blocks that overlap are written one after the other, never at once.
        let broken = OneBuffer(UnsafeCell::new([0; 512]));
        let o = measure(&broken, 1, 2_000, 1).expect("the run completes");
        assert!(o.corrupted > 0, "nothing caught");
    }

    #[test]
    fn a_sound_allocator_passes_and_every_operation_is_counted() {
        for threads in [1, 3] {
            let steps = 5_000;
            let o = measure(&System, threads, steps, 7).expect("the run completes");
            assert_eq!((o.corrupted, o.failures), (0, 0));
            // Each step is an allocation, a free or a handoff; a handed block counts when the
            // receiver frees it, which the last few may not do inside the timed window.
            let most = (threads * steps) as u64;
            assert!(
                o.ops <= most && o.ops >= most * 9 / 10,
                "{} of {most}",
                o.ops
            );
            assert!(o.handed > 0 && o.wall > Duration::ZERO);
        }
    }

    #[test]
    fn tagalloc_heaps_are_checked_after_a_run() {
        let mut arena = Arena::new(16 << 20).expect("an arena");
        for c in [
            Contender::GlobalSpin,
            Contender::GlobalFutex,
            Contender::Host,
        ] {
            let (o, queued) = one(c, &mut arena, 2, 2_000, 3).expect("a clean run");
            assert_eq!(o.corrupted, 0);
            assert!(queued.is_some(), "{c:?}");
        }
    }
}
