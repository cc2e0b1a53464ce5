//! A multi-threaded trace replayed with one OS thread per thread of the recorded process,
//! through any allocator shared by threads ([`ThreadedAlloc`]): the core's `GlobalHeap`, a
//! shared pool over `mmap` regions with either lock, or the system allocator, so that one
//! replay (and one verification of every block) serves the tests and the side-by-side timing.
//!
//! Each thread performs its own events in trace order; a free or realloc of a block whose
//! previous event was made by another thread waits until that event has been performed, so each
//! block sees its events in trace order while the threads otherwise race. A wait is only ever
//! for an earlier event of the trace, so the earliest event not yet performed can always go
//! ahead: the replay cannot deadlock. Every block is filled with a pattern keyed by the event
//! that wrote it, and verified before it is freed or resized and after a resize. Where the
//! allocator can check itself, its invariants are checked while the threads run (optionally)
//! and after they have finished, and its statistics must agree with the trace.
//!
//! Nothing here panics on a failed allocation, a corrupted block or a broken invariant: they
//! come back as an error message naming the event.

use std::alloc::{GlobalAlloc, Layout, System};
use std::any::Any;
use std::collections::HashMap;
use std::fmt;
use std::hint::spin_loop;
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};
use std::sync::Barrier;
use std::thread;
use std::time::{Duration, Instant};

use tagalloc::{Hooks, InlineHeap, RawLock, RegionSource, SharedPool, Stats};
use tagalloc_host::count;

use crate::contents::{fill, verify};
use crate::replay::DEFAULT_ALIGN;
use crate::trace::{Event, Trace};

/// Busy-wait rounds before a thread waiting for another's event starts yielding its core.
const SPINS_BEFORE_YIELD: u32 = 64;

/// An allocator the replaying threads share. Errors are messages (each allocator has its own
/// error type).
pub trait ThreadedAlloc: Sync {
    /// `size` (non-zero) bytes aligned to `align`.
    fn alloc(&self, size: usize, align: usize) -> Result<NonNull<u8>, String>;
    /// Frees a block.
    ///
    /// # Safety
    /// `ptr` is a live block of this allocator of `size` bytes, allocated with `align`, not
    /// used afterwards.
    unsafe fn free(&self, ptr: NonNull<u8>, size: usize, align: usize) -> Result<(), String>;
    /// Resizes a block; on an error the block is left as it was.
    ///
    /// # Safety
    /// As for [`ThreadedAlloc::free`]; after a success only the returned pointer is used.
    unsafe fn realloc(
        &self,
        ptr: NonNull<u8>,
        old_size: usize,
        align: usize,
        new_size: usize,
    ) -> Result<NonNull<u8>, String>;
    /// Verifies the allocator's invariants; `None` if it has no checker.
    fn check(&self) -> Option<Result<(), String>> {
        None
    }
    /// The heap's statistics; `None` if it keeps none.
    fn stats(&self) -> Option<Stats> {
        None
    }
    /// How many frees found the lock taken and were queued; `None` if it does not queue.
    fn queued_frees(&self) -> Option<usize> {
        None
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Alloc,
    Free,
    Realloc,
}

/// One trace event with everything its thread needs to perform it on its own.
#[derive(Clone, Copy, Debug)]
pub struct Step {
    op: Op,
    /// The event's index in the trace. An event that writes a block (`a`, `r`) fills it with
    /// the pattern keyed by its own index.
    index: usize,
    /// The allocation the event is about: one slot per `a` event, so that even a trace that
    /// allocated an id again after freeing it would give each allocation a slot of its own.
    slot: usize,
    /// For `f` and `r`: the index of the previous event on the same allocation, which must have
    /// been performed first, and whose pattern the block holds.
    prev: usize,
    /// For `f` and `r`: the block's size before the event.
    old_size: usize,
    /// For `a` and `r`: the block's size after the event.
    new_size: usize,
    /// The alignment the block was allocated with.
    align: usize,
}

/// An allocation of the trace that is live at a point of the plan.
#[derive(Clone, Copy)]
pub struct Planned {
    slot: usize,
    /// The last event on it.
    last: usize,
    /// The thread (index into [`Plan::threads`]) of its last event, and of its `a`.
    last_thread: usize,
    alloc_thread: usize,
    size: usize,
    align: usize,
}

/// The trace split into per-thread lists of steps.
pub struct Plan {
    /// The `t=` of each thread (`None` for events without one) and its steps in trace order.
    pub threads: Vec<(Option<u32>, Vec<Step>)>,
    pub events: usize,
    pub allocs: usize,
    pub frees: usize,
    pub reallocs: usize,
    /// Frees of a block allocated by another thread.
    pub cross_thread_frees: usize,
    /// Reallocs of a block allocated by another thread.
    pub cross_thread_reallocs: usize,
    /// Frees and reallocs whose previous event on the block was made by another thread: the
    /// events that may have to wait.
    pub cross_thread_deps: usize,
    /// The allocations the trace leaves live at the end.
    pub live_at_end: Vec<Planned>,
    /// The most bytes (as replayed: sizes of 0 count 1) and blocks live at once.
    pub peak_live_bytes: usize,
    pub peak_live_count: usize,
}

impl Plan {
    /// Plans the first `limit` events of `events`. Sizes of 0 become 1: the heap refuses
    /// zero-size requests, while `malloc(0)` returns a unique pointer.
    pub fn new(events: &[Event], limit: usize) -> Plan {
        let mut plan = Plan {
            threads: Vec::new(),
            events: 0,
            allocs: 0,
            frees: 0,
            reallocs: 0,
            cross_thread_frees: 0,
            cross_thread_reallocs: 0,
            cross_thread_deps: 0,
            live_at_end: Vec::new(),
            peak_live_bytes: 0,
            peak_live_count: 0,
        };
        let mut thread_index: HashMap<Option<u32>, usize> = HashMap::new();
        let mut live: HashMap<u64, Planned> = HashMap::new();
        let mut slots = 0;
        let mut live_bytes = 0usize;
        for (index, event) in events.iter().take(limit).enumerate() {
            plan.events += 1;
            let t = *thread_index.entry(event.thread()).or_insert_with(|| {
                plan.threads.push((event.thread(), Vec::new()));
                plan.threads.len() - 1
            });
            let step = match *event {
                Event::Alloc {
                    id, size, align, ..
                } => {
                    plan.allocs += 1;
                    let size = size.max(1);
                    let align = align.unwrap_or(DEFAULT_ALIGN);
                    let fresh = Planned {
                        slot: slots,
                        last: index,
                        last_thread: t,
                        alloc_thread: t,
                        size,
                        align,
                    };
                    slots += 1;
                    assert!(
                        live.insert(id, fresh).is_none(),
                        "event {index}: id {id} live"
                    );
                    live_bytes += size;
                    Step {
                        op: Op::Alloc,
                        index,
                        slot: fresh.slot,
                        prev: index,
                        old_size: 0,
                        new_size: size,
                        align,
                    }
                }
                Event::Free { id, .. } | Event::Realloc { id, .. } => {
                    let block = live
                        .get_mut(&id)
                        .unwrap_or_else(|| panic!("event {index}: id {id} is not live"));
                    let (op, new_size) = match *event {
                        Event::Realloc { new_size, .. } => (Op::Realloc, new_size.max(1)),
                        _ => (Op::Free, 0),
                    };
                    let step = Step {
                        op,
                        index,
                        slot: block.slot,
                        prev: block.last,
                        old_size: block.size,
                        new_size,
                        align: block.align,
                    };
                    if block.last_thread != t {
                        plan.cross_thread_deps += 1;
                    }
                    let foreign = block.alloc_thread != t;
                    live_bytes = live_bytes - block.size + new_size;
                    if op == Op::Free {
                        plan.frees += 1;
                        plan.cross_thread_frees += usize::from(foreign);
                        live.remove(&id);
                    } else {
                        plan.reallocs += 1;
                        plan.cross_thread_reallocs += usize::from(foreign);
                        block.last = index;
                        block.last_thread = t;
                        block.size = new_size;
                    }
                    step
                }
            };
            plan.threads[t].1.push(step);
            plan.peak_live_bytes = plan.peak_live_bytes.max(live_bytes);
            plan.peak_live_count = plan.peak_live_count.max(live.len());
        }
        plan.live_at_end = live.into_values().collect();
        plan.live_at_end.sort_by_key(|b| b.slot);
        plan
    }

    pub fn slots(&self) -> usize {
        self.allocs
    }
}

/// Where an allocation of the replay stands, shared by all threads.
///
/// `done` is the index + 1 of the last event performed on it (0: none yet). The thread that
/// performs an event stores the block's pointer and then `done` with Release; a thread whose
/// event depends on it waits until `done` is exactly its `prev + 1` with Acquire, after which
/// the pointer and the block's contents are those the previous event left.
struct Slot {
    ptr: AtomicPtr<u8>,
    done: AtomicUsize,
}

/// What the replaying threads share.
struct Replay<'a, A: ThreadedAlloc> {
    alloc: &'a A,
    slots: &'a [Slot],
    events: &'a [Event],
    failed: &'a AtomicBool,
    finished: &'a AtomicUsize,
}

/// What one replaying thread saw.
#[derive(Default)]
struct ThreadReport {
    /// Events whose previous event on the block had not happened yet when they came up.
    waits: usize,
}

impl<A: ThreadedAlloc> Replay<'_, A> {
    fn error(&self, step: &Step, what: impl fmt::Display) -> String {
        format!(
            "event {} (`{}`): {what}",
            step.index, self.events[step.index]
        )
    }

    /// Waits until the previous event on `step`'s block has been performed, and returns the
    /// block's pointer and whether it had to wait.
    fn wait_for_prev(&self, step: &Step) -> Result<(NonNull<u8>, bool), String> {
        let slot = &self.slots[step.slot];
        let want = step.prev + 1;
        let mut rounds = 0u32;
        loop {
            let done = slot.done.load(Ordering::Acquire);
            if done == want {
                let ptr = slot.ptr.load(Ordering::Relaxed);
                let ptr = NonNull::new(ptr).ok_or_else(|| self.error(step, "null block"))?;
                return Ok((ptr, rounds > 0));
            }
            // Events on a block are performed in trace order, one after the other, so `done`
            // can only be behind; anything else is a bug in the replay itself.
            if done > want {
                return Err(self.error(step, format!("block already at event {}", done - 1)));
            }
            if self.failed.load(Ordering::Relaxed) {
                return Err(self.error(step, "gave up: another thread failed"));
            }
            rounds = rounds.saturating_add(1);
            if rounds < SPINS_BEFORE_YIELD {
                spin_loop();
            } else {
                thread::yield_now();
            }
        }
    }

    fn publish(&self, step: &Step, ptr: *mut u8) {
        let slot = &self.slots[step.slot];
        slot.ptr.store(ptr, Ordering::Relaxed);
        slot.done.store(step.index + 1, Ordering::Release);
    }

    fn check_aligned(&self, step: &Step, ptr: NonNull<u8>) -> Result<(), String> {
        if !ptr.addr().get().is_multiple_of(step.align) {
            return Err(self.error(step, format!("{ptr:p} is not {}-aligned", step.align)));
        }
        Ok(())
    }

    /// Performs one thread's steps in order.
    fn run_thread(&self, steps: &[Step]) -> Result<ThreadReport, String> {
        let mut report = ThreadReport::default();
        for step in steps {
            if self.failed.load(Ordering::Relaxed) {
                return Err(self.error(step, "gave up: another thread failed"));
            }
            match step.op {
                Op::Alloc => {
                    let p = self
                        .alloc
                        .alloc(step.new_size, step.align)
                        .map_err(|e| self.error(step, format!("alloc: {e}")))?;
                    self.check_aligned(step, p)?;
                    // SAFETY: `p` was just allocated, `new_size` bytes long, and no other
                    // thread knows it before `publish`.
                    unsafe { fill(p, step.new_size, step.index as u64) };
                    self.publish(step, p.as_ptr());
                }
                Op::Free => {
                    let (p, waited) = self.wait_for_prev(step)?;
                    report.waits += usize::from(waited);
                    // SAFETY: the block is live with `old_size` bytes (the previous event on it
                    // left it so, and `wait_for_prev` ordered this after it); its later events
                    // wait for this one, so no other thread touches it meanwhile.
                    unsafe { verify(p, step.old_size, step.old_size, step.prev as u64) }
                        .map_err(|m| self.error(step, format!("before free: {m}")))?;
                    self.publish(step, ptr::null_mut());
                    // SAFETY: `p` is a live allocation of this heap of `old_size` bytes, as
                    // above, and nothing uses it after this: the slot was cleared, and the
                    // trace has no later event on the block.
                    unsafe { self.alloc.free(p, step.old_size, step.align) }
                        .map_err(|e| self.error(step, format!("free: {e}")))?;
                }
                Op::Realloc => {
                    let (p, waited) = self.wait_for_prev(step)?;
                    report.waits += usize::from(waited);
                    let (old, new) = (step.old_size, step.new_size);
                    // SAFETY: as for a free: the block is live with `old` bytes and only this
                    // thread uses it until `publish`.
                    unsafe { verify(p, old, old, step.prev as u64) }
                        .map_err(|m| self.error(step, format!("before realloc: {m}")))?;
                    // SAFETY: `p` is live with `old` bytes, allocated with `align`; after a
                    // success only the returned pointer is used.
                    let q = unsafe { self.alloc.realloc(p, old, step.align, new) }
                        .map_err(|e| self.error(step, format!("realloc: {e}")))?;
                    self.check_aligned(step, q)?;
                    // SAFETY: `q` is the live, resized block of `new` bytes, used by this
                    // thread only until `publish`.
                    unsafe {
                        verify(q, old, old.min(new), step.prev as u64)
                            .map_err(|m| self.error(step, format!("after realloc: {m}")))?;
                        fill(q, new, step.index as u64);
                    }
                    self.publish(step, q.as_ptr());
                }
            }
        }
        Ok(report)
    }
}

/// Sets `flag` if the thread unwinds, so that the threads waiting on it give up instead of
/// waiting for ever, and counts the thread as finished either way.
struct ExitGuard<'a> {
    failed: &'a AtomicBool,
    finished: &'a AtomicUsize,
}

impl Drop for ExitGuard<'_> {
    fn drop(&mut self) {
        if thread::panicking() {
            self.failed.store(true, Ordering::Relaxed);
        }
        self.finished.fetch_add(1, Ordering::Release);
    }
}

/// The message of a panic payload.
pub fn panic_message(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic".to_owned())
}

/// How a threaded replay runs.
#[derive(Clone, Copy, Debug)]
pub struct ThreadedOptions {
    /// How often the main thread checks the allocator's invariants while the threads run
    /// (`None`: only at the end; what a timing wants, as a check holds the lock).
    pub check_period: Option<Duration>,
    /// Each replaying thread's stack.
    pub stack_size: usize,
}

impl Default for ThreadedOptions {
    fn default() -> Self {
        ThreadedOptions {
            check_period: Some(Duration::from_millis(100)),
            stack_size: 1 << 20,
        }
    }
}

/// What a threaded replay did.
#[derive(Clone, Debug)]
pub struct ThreadedReport {
    /// The trace's name.
    pub trace: String,
    /// OS threads run, one per `t=` of the trace.
    pub threads: usize,
    /// Events replayed.
    pub events: usize,
    /// Events after another thread's event on the block that had to wait for it.
    pub waits: usize,
    /// Invariant checks while the threads ran.
    pub checks: usize,
    /// Frees queued because the lock was taken (`None`: the allocator does not queue).
    pub queued_frees: Option<usize>,
    /// Wall time from the start barrier to the last thread joined.
    pub replay: Duration,
    /// The heap's statistics after the threads finished, before the blocks the trace left live
    /// were freed (`None`: the allocator keeps none).
    pub stats: Option<Stats>,
    /// The trace's figures, as planned.
    pub cross_thread_frees: usize,
    /// Reallocs of a block allocated by another thread.
    pub cross_thread_reallocs: usize,
    /// Frees and reallocs whose previous event on the block was another thread's.
    pub cross_thread_deps: usize,
    /// Allocations the trace left live at its end.
    pub live_at_end: usize,
    /// The most bytes live at once (sizes of 0 count 1).
    pub peak_live_bytes: usize,
}

impl fmt::Display for ThreadedReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} threads, {} events, {} cross-thread frees, {} cross-thread reallocs, {} \
             events after another thread's event on the block ({} had to wait), {} blocks live \
             at the end, {} checks while running, peak live {} B",
            self.trace,
            self.threads,
            self.events,
            self.cross_thread_frees,
            self.cross_thread_reallocs,
            self.cross_thread_deps,
            self.waits,
            self.live_at_end,
            self.checks,
            self.peak_live_bytes,
        )?;
        if let Some(q) = self.queued_frees {
            write!(f, ", {q} queued frees")?;
        }
        if let Some(s) = &self.stats {
            write!(f, ", heap peak in use {} B", s.peak_in_use)?;
        }
        write!(f, "; replay {:.2?}", self.replay)
    }
}

/// Checks the allocator's invariants (if it can) and that no free was refused.
fn sound<A: ThreadedAlloc>(alloc: &A) -> Result<Option<Stats>, String> {
    if let Some(r) = alloc.check() {
        r.map_err(|e| format!("heap check: {e}"))?;
    }
    let stats = alloc.stats();
    if let Some(s) = &stats {
        if s.refused_frees != 0 {
            return Err(format!("refused frees: {s:?}"));
        }
    }
    Ok(stats)
}

/// Replays the first `limit` events of `trace` through `alloc`, one OS thread per `t=` value,
/// then frees what the trace left live, checking the allocator along the way (see the module
/// docs). The allocator must be empty when it starts (its statistics are compared with the
/// trace's counts) and is empty again when this returns `Ok`.
pub fn replay_threaded<A: ThreadedAlloc>(
    alloc: &A,
    trace: &Trace,
    plan: &Plan,
    options: &ThreadedOptions,
) -> Result<ThreadedReport, String> {
    let slots: Vec<Slot> = (0..plan.slots())
        .map(|_| Slot {
            ptr: AtomicPtr::new(ptr::null_mut()),
            done: AtomicUsize::new(0),
        })
        .collect();
    let failed = AtomicBool::new(false);
    let finished = AtomicUsize::new(0);
    let replay = Replay {
        alloc,
        slots: &slots,
        events: &trace.events,
        failed: &failed,
        finished: &finished,
    };
    let threads = plan.threads.len();
    let start = Barrier::new(threads + 1);

    let mut checks = 0usize;
    let mut check_error = None;
    let (results, elapsed) = thread::scope(|s| {
        let mut handles = Vec::with_capacity(threads);
        for (t, steps) in &plan.threads {
            let (replay, start) = (&replay, &start);
            let name = t.map_or_else(|| "t=?".to_owned(), |t| format!("t={t}"));
            let label = name.clone();
            let spawned = thread::Builder::new()
                .name(name.clone())
                .stack_size(options.stack_size)
                .spawn_scoped(s, move || {
                    let _exit = ExitGuard {
                        failed: replay.failed,
                        finished: replay.finished,
                    };
                    start.wait();
                    let result = replay.run_thread(steps);
                    if result.is_err() {
                        replay.failed.store(true, Ordering::Relaxed);
                    }
                    result.map_err(|e| format!("{label}: {e}"))
                });
            match spawned {
                Ok(h) => handles.push(h),
                // The threads already spawned wait at the barrier: it cannot be released
                // without this one, so give up loudly.
                Err(e) => panic!("spawning thread {name}: {e}"),
            }
        }
        start.wait();
        let t0 = Instant::now();
        if let Some(period) = options.check_period {
            // Check the invariants now and then while the threads run: a check takes the
            // lock, does the queued frees, and walks every chunk of every region.
            while finished.load(Ordering::Acquire) < threads && !failed.load(Ordering::Relaxed) {
                thread::sleep(period);
                if let Some(Err(e)) = alloc.check() {
                    check_error = Some(format!("heap check while running: {e}"));
                    failed.store(true, Ordering::Relaxed);
                }
                checks += 1;
            }
        }
        let results: Vec<Result<ThreadReport, String>> = handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| Err(panic_message(&*p))))
            .collect();
        (results, t0.elapsed())
    });

    if let Some(e) = check_error {
        return Err(e);
    }
    let mut waits = 0;
    let mut errors = Vec::new();
    for result in results {
        match result {
            Ok(report) => waits += report.waits,
            Err(e) => errors.push(e),
        }
    }
    // The first thread to fail says why; the others only gave up because of it.
    errors.sort_by_key(|e| e.contains("gave up"));
    if let Some(first) = errors.first() {
        return Err(format!(
            "{} stopped with an error; first: {first}",
            count(errors.len(), "thread", "threads")
        ));
    }

    let stats = sound(alloc)?;
    if let Some(s) = &stats {
        if s.live != plan.live_at_end.len() {
            return Err(format!("{} live at the end, {s:?}", plan.live_at_end.len()));
        }
        // Every `a` and every moving `r` is one allocation; an `r` in place is none.
        if s.allocs + s.reallocs_in_place != (plan.allocs + plan.reallocs) as u64 {
            return Err(format!(
                "{} allocs and {} reallocs in the trace, {s:?}",
                plan.allocs, plan.reallocs
            ));
        }
    }
    let queued = alloc.queued_frees();
    // A queued free only goes through the heap when the next lock holder drains the queue;
    // `stats()` drained it, so the queue cannot have lost one.
    if queued.is_some_and(|q| q > plan.frees) {
        return Err(format!("{queued:?} queued frees"));
    }

    // Free, from this thread, what the trace left live (all threads have been joined, so
    // every slot holds what its last event left).
    for block in &plan.live_at_end {
        let slot = &slots[block.slot];
        if slot.done.load(Ordering::Acquire) != block.last + 1 {
            return Err(format!(
                "block of event {} not at its last event",
                block.last
            ));
        }
        let p = NonNull::new(slot.ptr.load(Ordering::Relaxed))
            .ok_or_else(|| format!("block of event {} is null", block.last))?;
        // SAFETY: the block is live with `size` bytes (its last event left it so), and every
        // thread that used it has been joined.
        unsafe { verify(p, block.size, block.size, block.last as u64) }
            .map_err(|m| format!("block of event {} at the end: {m}", block.last))?;
        slot.ptr.store(ptr::null_mut(), Ordering::Relaxed);
        // SAFETY: as above; the slot was cleared and the block is not used again.
        unsafe { alloc.free(p, block.size, block.align) }
            .map_err(|e| format!("freeing the block of event {}: {e}", block.last))?;
    }
    if let Some(s) = sound(alloc)? {
        // Nothing allocated any more, and all the memory free again, each region one chunk.
        let empty = s.in_use == 0
            && s.live == 0
            && s.allocs == s.frees
            && s.free == s.managed
            && s.free_chunks == s.regions;
        if !empty {
            return Err(format!("not empty after the replay: {s:?}"));
        }
    }

    Ok(ThreadedReport {
        trace: trace.name.clone(),
        threads,
        events: plan.events,
        waits,
        checks,
        queued_frees: alloc.queued_frees(),
        replay: elapsed,
        stats,
        cross_thread_frees: plan.cross_thread_frees,
        cross_thread_reallocs: plan.cross_thread_reallocs,
        cross_thread_deps: plan.cross_thread_deps,
        live_at_end: plan.live_at_end.len(),
        peak_live_bytes: plan.peak_live_bytes,
    })
}

/// A shared inline pool (e.g. `tagalloc_host::HostPool`, over `mmap` regions, with either
/// lock): it grows by itself, so nothing is added here.
impl<S, K, L, const N: usize> ThreadedAlloc for SharedPool<InlineHeap, S, K, L, N>
where
    S: RegionSource<Base = NonNull<u8>>,
    K: Hooks,
    L: RawLock,
    Self: Sync,
{
    fn alloc(&self, size: usize, align: usize) -> Result<NonNull<u8>, String> {
        SharedPool::alloc(self, size, align).map_err(|e| e.to_string())
    }
    unsafe fn free(&self, ptr: NonNull<u8>, size: usize, _align: usize) -> Result<(), String> {
        // SAFETY: forwarded caller contract.
        unsafe { SharedPool::free(self, ptr, size) }.map_err(|e| e.to_string())
    }
    unsafe fn realloc(
        &self,
        ptr: NonNull<u8>,
        old_size: usize,
        align: usize,
        new_size: usize,
    ) -> Result<NonNull<u8>, String> {
        // SAFETY: forwarded caller contract.
        unsafe { SharedPool::realloc(self, ptr, old_size, align, new_size) }
            .map_err(|e| e.to_string())
    }
    fn check(&self) -> Option<Result<(), String>> {
        Some(match self.with_pool(|p| p.check()) {
            Ok(r) => r.map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        })
    }
    fn stats(&self) -> Option<Stats> {
        SharedPool::stats(self).ok().map(|s| s.heap)
    }
    fn queued_frees(&self) -> Option<usize> {
        Some(SharedPool::queued_frees(self))
    }
}

/// The system allocator (glibc's `malloc` on Linux), for comparison: no checker, no
/// statistics.
pub struct SystemAlloc;

impl SystemAlloc {
    fn layout(size: usize, align: usize) -> Result<Layout, String> {
        Layout::from_size_align(size, align).map_err(|e| e.to_string())
    }
}

impl ThreadedAlloc for SystemAlloc {
    fn alloc(&self, size: usize, align: usize) -> Result<NonNull<u8>, String> {
        // SAFETY: the replay never asks for zero bytes.
        let p = unsafe { System.alloc(Self::layout(size, align)?) };
        NonNull::new(p).ok_or_else(|| format!("malloc of {size} bytes returned null"))
    }
    unsafe fn free(&self, ptr: NonNull<u8>, size: usize, align: usize) -> Result<(), String> {
        // SAFETY: forwarded caller contract: allocated here with this layout.
        unsafe { System.dealloc(ptr.as_ptr(), Self::layout(size, align)?) };
        Ok(())
    }
    unsafe fn realloc(
        &self,
        ptr: NonNull<u8>,
        old_size: usize,
        align: usize,
        new_size: usize,
    ) -> Result<NonNull<u8>, String> {
        // SAFETY: forwarded caller contract; `new_size` is non-zero.
        let q = unsafe { System.realloc(ptr.as_ptr(), Self::layout(old_size, align)?, new_size) };
        NonNull::new(q).ok_or_else(|| format!("realloc to {new_size} bytes returned null"))
    }
}
