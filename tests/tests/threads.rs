//! Real threads through one [`GlobalHeap`]: a multi-threaded trace replayed with one OS thread
//! per thread of the recorded process, and a producer handing blocks to consumers through the
//! `GlobalAlloc` interface. Both make many frees of memory allocated by another thread, some of
//! which find the lock taken and go through the heap's queue of queued frees; every block's
//! contents are verified before it is freed or resized, and the heap's invariants are checked
//! while the threads run and after they have finished.

use std::alloc::{GlobalAlloc, Layout};
use std::any::Any;
use std::collections::HashMap;
use std::fmt;
use std::hint::spin_loop;
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};
use std::sync::{mpsc, Barrier, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use tagalloc::{Error, GlobalHeap, Stats};
use tagalloc_tests::contents::{fill, verify};
use tagalloc_tests::replay::DEFAULT_ALIGN;
use tagalloc_tests::trace::{shared_trace, Event, Trace};

/// How often the main thread checks the heap's invariants while the workers run.
const CHECK_PERIOD: Duration = Duration::from_millis(100);
/// Busy-wait rounds before a thread waiting for another's event starts yielding its core.
const SPINS_BEFORE_YIELD: u32 = 64;

// ---------------------------------------------------------------------------------------------
// Memory for the heaps

/// Zeroed memory handed to a [`GlobalHeap`], kept until this is dropped. Declare it before the
/// heap, so that the heap is dropped (and can no longer hand any of it out) first.
struct Arenas {
    buffers: Mutex<Vec<Vec<u128>>>,
    /// Regions added after the first because the heap ran out.
    added: AtomicUsize,
}

impl Arenas {
    fn new() -> Self {
        Arenas {
            buffers: Mutex::new(Vec::new()),
            added: AtomicUsize::new(0),
        }
    }

    /// Gives `heap` a fresh zeroed region of at least `bytes` bytes.
    fn add_to(&self, heap: &GlobalHeap, bytes: usize) -> Result<(), Error> {
        let mut buffer = vec![0u128; bytes.div_ceil(size_of::<u128>())];
        let (base, len) = (buffer.as_mut_ptr().cast::<u8>(), size_of_val(&buffer[..]));
        let mut buffers = self.buffers.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: the buffer is valid for reads and writes over `len` bytes, 16-byte aligned
        // (the granule), initialised (zeroed) and used by nothing but the heap from here on:
        // it is kept in `buffers`, where moving the vector does not move its contents, until
        // `self` is dropped, after the heap (the type's contract).
        unsafe { heap.add_region(base, len)? };
        buffers.push(buffer);
        Ok(())
    }

    /// Grows `heap` for a request of `size` bytes aligned to `align` that ran out of memory.
    fn grow(&self, heap: &GlobalHeap, size: usize, align: usize) -> Result<(), Error> {
        let bytes = size
            .saturating_add(align)
            .saturating_add(1 << 20)
            .max(16 << 20);
        self.add_to(heap, bytes)?;
        self.added.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

/// Runs `op` and, while it runs out of memory, grows the heap and tries again (a few times).
fn with_growth(
    heap: &GlobalHeap,
    arenas: &Arenas,
    size: usize,
    align: usize,
    mut op: impl FnMut() -> Result<NonNull<u8>, Error>,
) -> Result<NonNull<u8>, Error> {
    let mut steps = 0;
    loop {
        match op() {
            Err(Error::OutOfMemory) if steps < 4 => {
                arenas.grow(heap, size, align)?;
                steps += 1;
            }
            other => return other,
        }
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

fn panic_message(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic".to_owned())
}

/// Checks the heap's invariants and that no free was refused.
fn assert_heap_sound(heap: &GlobalHeap) -> Stats {
    heap.with_heap(|h| h.check())
        .expect("not re-entrant")
        .unwrap_or_else(|e| panic!("heap check: {e}"));
    let stats = heap.stats().expect("not re-entrant");
    assert_eq!(stats.refused_frees, 0, "{stats:?}");
    stats
}

/// Checks that nothing is allocated any more and all the memory is free again, each region one
/// chunk.
fn assert_heap_empty(heap: &GlobalHeap) {
    let stats = assert_heap_sound(heap);
    assert_eq!(stats.in_use, 0, "{stats:?}");
    assert_eq!(stats.live, 0, "{stats:?}");
    assert_eq!(stats.allocs, stats.frees, "{stats:?}");
    assert_eq!(stats.free, stats.managed, "{stats:?}");
    assert_eq!(stats.free_chunks, stats.regions, "{stats:?}");
}

// ---------------------------------------------------------------------------------------------
// A multi-threaded trace, one OS thread per recorded thread

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Alloc,
    Free,
    Realloc,
}

/// One trace event with everything its thread needs to perform it on its own.
#[derive(Clone, Copy, Debug)]
struct Step {
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
struct Planned {
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
struct Plan {
    /// The `t=` of each thread (`None` for events without one) and its steps in trace order.
    threads: Vec<(Option<u32>, Vec<Step>)>,
    events: usize,
    allocs: usize,
    frees: usize,
    reallocs: usize,
    /// Frees of a block allocated by another thread.
    cross_thread_frees: usize,
    /// Reallocs of a block allocated by another thread.
    cross_thread_reallocs: usize,
    /// Frees and reallocs whose previous event on the block was made by another thread: the
    /// events that may have to wait.
    cross_thread_deps: usize,
    /// The allocations the trace leaves live at the end.
    live_at_end: Vec<Planned>,
    /// The most bytes (as replayed: sizes of 0 count 1) and blocks live at once.
    peak_live_bytes: usize,
    peak_live_count: usize,
}

impl Plan {
    /// Plans the first `limit` events of `events`. Sizes of 0 become 1: the heap refuses
    /// zero-size requests, while `malloc(0)` returns a unique pointer.
    fn new(events: &[Event], limit: usize) -> Plan {
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

    fn slots(&self) -> usize {
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
struct Replay<'a> {
    heap: &'a GlobalHeap,
    arenas: &'a Arenas,
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

impl Replay<'_> {
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
        if ptr.addr().get() % step.align != 0 {
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
                    let p = with_growth(self.heap, self.arenas, step.new_size, step.align, || {
                        self.heap.try_alloc(step.new_size, step.align)
                    })
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
                    unsafe { self.heap.try_free(p, step.old_size) }
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
                    let q = with_growth(self.heap, self.arenas, new, step.align, || {
                        // SAFETY: `p` is live with `old` bytes, allocated with `align`; a
                        // failed realloc leaves it so, so every retry passes a live block, and
                        // after a success only the returned pointer is used.
                        unsafe { self.heap.try_realloc(p, old, step.align, new) }
                    })
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

/// What [`replay_threaded`] reports beyond what it prints.
struct Threaded {
    /// Regions the heap was given after the first because it ran out.
    regions_added: usize,
}

/// Replays `events` (the first `limit` of them) through one `GlobalHeap`, one OS thread per
/// `t=` value, then frees what the trace left live, checking the heap along the way. The heap
/// starts with `first_region` bytes, or by default enough for the trace with room to spare.
fn replay_threaded(trace: &Trace, limit: usize, first_region: Option<usize>) -> Threaded {
    let started = Instant::now();
    let plan = Plan::new(&trace.events, limit);
    assert_eq!(plan.events, limit.min(trace.events.len()));

    // Twice the peak, plus tags and rounding for every block, plus slack; more is added if the
    // concurrent interleaving fragments the heap beyond that.
    let arena_bytes =
        first_region.unwrap_or(2 * plan.peak_live_bytes + 32 * plan.peak_live_count + (8 << 20));
    let arenas = Arenas::new();
    let heap = GlobalHeap::new();
    arenas
        .add_to(&heap, arena_bytes)
        .unwrap_or_else(|e| panic!("first region of {arena_bytes} bytes: {e}"));

    let slots: Vec<Slot> = (0..plan.slots())
        .map(|_| Slot {
            ptr: AtomicPtr::new(ptr::null_mut()),
            done: AtomicUsize::new(0),
        })
        .collect();
    let failed = AtomicBool::new(false);
    let finished = AtomicUsize::new(0);
    let replay = Replay {
        heap: &heap,
        arenas: &arenas,
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
        let handles: Vec<_> = plan
            .threads
            .iter()
            .map(|(t, steps)| {
                let (replay, start) = (&replay, &start);
                let name = t.map_or_else(|| "t=?".to_owned(), |t| format!("t={t}"));
                let label = name.clone();
                thread::Builder::new()
                    .name(name.clone())
                    .stack_size(1 << 20)
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
                    })
                    .unwrap_or_else(|e| panic!("spawning thread {name}: {e}"))
            })
            .collect();
        start.wait();
        let t0 = Instant::now();
        // Check the heap's invariants now and then while the threads run: a check takes the
        // lock, does the queued frees, and walks every chunk of every region.
        while finished.load(Ordering::Acquire) < threads && !failed.load(Ordering::Relaxed) {
            thread::sleep(CHECK_PERIOD);
            if let Err(e) = heap.with_heap(|h| h.check()).expect("not re-entrant") {
                check_error = Some(format!("heap check while running: {e}"));
                failed.store(true, Ordering::Relaxed);
            }
            checks += 1;
        }
        let results: Vec<Result<ThreadReport, String>> = handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| Err(panic_message(&*p))))
            .collect();
        (results, t0.elapsed())
    });

    if let Some(e) = check_error {
        panic!("{e}");
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
    assert!(
        errors.is_empty(),
        "{} threads stopped with an error; first: {}",
        errors.len(),
        errors[0]
    );

    let stats = assert_heap_sound(&heap);
    assert_eq!(stats.live, plan.live_at_end.len(), "{stats:?}");
    // Every `a` and every moving `r` is one allocation; an `r` in place is none.
    assert_eq!(
        stats.allocs + stats.reallocs_in_place,
        (plan.allocs + plan.reallocs) as u64,
        "{stats:?}"
    );
    let queued = heap.queued_frees();
    // A queued free only goes through the heap when the next lock holder drains the queue;
    // `stats()` drained it, so the queue cannot have lost one.
    assert!(queued <= plan.frees, "{queued} queued frees");

    // Free, from this thread, what the trace left live (all threads have been joined, so
    // every slot holds what its last event left).
    for block in &plan.live_at_end {
        let slot = &slots[block.slot];
        assert_eq!(slot.done.load(Ordering::Acquire), block.last + 1);
        let p = NonNull::new(slot.ptr.load(Ordering::Relaxed)).expect("live block");
        // SAFETY: the block is live with `size` bytes (its last event left it so), and every
        // thread that used it has been joined.
        unsafe { verify(p, block.size, block.size, block.last as u64) }
            .unwrap_or_else(|m| panic!("block of event {} at the end: {m}", block.last));
        slot.ptr.store(ptr::null_mut(), Ordering::Relaxed);
        // SAFETY: as above; the slot was cleared and the block is not used again.
        unsafe { heap.try_free(p, block.size) }
            .unwrap_or_else(|e| panic!("freeing the block of event {}: {e}", block.last));
    }
    assert_heap_empty(&heap);

    println!(
        "{}: {} threads, {} events ({} alloc, {} free, {} realloc), {} cross-thread frees, \
         {} cross-thread reallocs, {} events after another thread's event on the block ({} \
         had to wait), {} queued frees, {} blocks live at the end, {} regions added, {} checks \
         while running; peak live {} B in {} blocks, heap peak in use {} B; replay {:.2?}, \
         total {:.2?}",
        trace.name,
        threads,
        plan.events,
        plan.allocs,
        plan.frees,
        plan.reallocs,
        plan.cross_thread_frees,
        plan.cross_thread_reallocs,
        plan.cross_thread_deps,
        waits,
        heap.queued_frees(),
        plan.live_at_end.len(),
        arenas.added.load(Ordering::Relaxed),
        checks,
        plan.peak_live_bytes,
        plan.peak_live_count,
        stats.peak_in_use,
        elapsed,
        started.elapsed(),
    );
    Threaded {
        regions_added: arenas.added.load(Ordering::Relaxed),
    }
}

/// The Android SystemUI trace (AOSP's memory_replay, 393 threads) replayed with one OS thread
/// per `t=`, all through one `GlobalHeap`. Each thread performs its own events in trace order;
/// a free or realloc of a block whose previous event was made by another thread waits until
/// that event has been performed, so each block sees its events in trace order while the
/// threads otherwise race. A wait is only ever for an earlier event of the trace, so the
/// earliest event not yet performed can always go ahead: the replay cannot deadlock. The whole
/// trace is replayed (770 k events, one to a few seconds in a debug build on two cores).
/// Built ignored (with the reason) where `../shared/traces` is absent; under `CI=true` it runs
/// and fails if the trace is missing (see `build.rs`).
#[test]
#[cfg_attr(
    not(tagalloc_shared_traces),
    ignore = "needs ../shared/traces/android-systemui.trace.gz beside the repository (absent \
              when built)"
)]
fn android_systemui_with_one_thread_per_trace_thread() {
    let path = shared_trace("android-systemui.trace.gz").unwrap_or_else(|e| panic!("{e}"));
    let trace = Trace::load(&path).unwrap_or_else(|e| panic!("{e}"));
    let stats = trace.stats();
    println!("{}: {stats}", trace.name);
    assert!(stats.threads > 1, "the trace should name several threads");
    replay_threaded(&trace, usize::MAX, None);
}

/// A hand-made trace whose blocks pass from thread to thread, several times each, with resizes
/// on the way: exercises the waiting without `../shared`. The heap starts far too small, so
/// the threads also add regions to it while others allocate and free.
#[test]
fn hand_made_trace_passes_blocks_between_threads() {
    let mut body = String::from("# tagalloc trace v1\n");
    let threads = 6u64;
    let blocks = 3000u64;
    for id in 0..blocks {
        let t = id % threads;
        let align = if id % 11 == 0 { " align=256" } else { "" };
        body += &format!("a {id} {} t={t}{align}\n", (id * 37) % 2000);
        if id >= 8 {
            // Resize a block allocated a few events ago on another thread, then free an older
            // one on a third.
            let r = id - 4;
            body += &format!("r {r} {} t={}\n", (r * 101) % 5000, (t + 1) % threads);
            if id % 3 != 0 {
                let f = id - 8;
                body += &format!("f {f} t={}\n", (t + 2) % threads);
            }
        }
    }
    let trace = Trace::parse("hand-made", body.as_bytes()).unwrap_or_else(|e| panic!("{e}"));
    let plan = Plan::new(&trace.events, usize::MAX);
    assert!(plan.cross_thread_frees > 0 && plan.cross_thread_reallocs > 0);
    let report = replay_threaded(&trace, usize::MAX, Some(256 << 10));
    assert!(report.regions_added > 0, "the heap should have grown");
}

// ---------------------------------------------------------------------------------------------
// One producer, many consumers, through `GlobalAlloc`

/// A block on its way from the producer to a consumer.
struct Parcel {
    ptr: NonNull<u8>,
    layout: Layout,
    /// The pattern the block holds.
    key: u64,
}

// SAFETY: a parcel is the only handle to its block: the producer sends it on and never uses
// the block again, so moving it to another thread hands the block over whole.
unsafe impl Send for Parcel {}

/// splitmix64: a small, seedable source of sizes and choices.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> usize {
        (self.next() % n) as usize
    }

    /// Mostly small sizes, some medium, a few large.
    fn size(&mut self) -> usize {
        match self.below(100) {
            0..70 => 1 + self.below(256),
            70..95 => 257 + self.below(4096 - 256),
            _ => 4097 + self.below(65536 - 4096),
        }
    }

    /// Mostly at most the granule, sometimes far above it.
    fn align(&mut self) -> usize {
        if self.below(10) == 0 {
            32 << self.below(8) // 32 ..= 4096
        } else {
            1 << self.below(5) // 1 ..= 16
        }
    }
}

/// What one consumer did.
#[derive(Default)]
struct Consumed {
    blocks: usize,
    reallocs: usize,
}

/// Receives blocks, verifies them, resizes every eighth through `GlobalAlloc::realloc` (and
/// verifies what survived), and frees them all through `GlobalAlloc::dealloc`.
fn consume(heap: &GlobalHeap, inbox: mpsc::Receiver<Parcel>, seed: u64) -> Consumed {
    let mut rng = Rng(seed);
    let mut done = Consumed::default();
    for parcel in inbox {
        let Parcel { ptr, layout, key } = parcel;
        let size = layout.size();
        // SAFETY: the parcel handed this thread the block, live with `layout`, filled with
        // `key`'s pattern before it was sent (the channel orders that before this).
        unsafe { verify(ptr, size, size, key) }
            .unwrap_or_else(|m| panic!("block {key} ({layout:?}) as received: {m}"));
        let (ptr, layout) = if key % 8 == 0 {
            let new_size = rng.size();
            // SAFETY: the block is live with `layout`, and `new_size` is non-zero and, rounded
            // up to the alignment, far from overflowing.
            let q = unsafe { heap.realloc(ptr.as_ptr(), layout, new_size) };
            let q = NonNull::new(q)
                .unwrap_or_else(|| panic!("realloc of block {key} to {new_size} failed"));
            assert_eq!(q.addr().get() % layout.align(), 0, "block {key} realloc");
            let new = Layout::from_size_align(new_size, layout.align()).expect("layout");
            // SAFETY: `q` is the live resized block of `new_size` bytes, this thread's.
            unsafe {
                verify(q, size, size.min(new_size), key)
                    .unwrap_or_else(|m| panic!("block {key} after realloc to {new_size}: {m}"));
                fill(q, new_size, !key);
                verify(q, new_size, new_size, !key)
                    .unwrap_or_else(|m| panic!("block {key} refilled: {m}"));
            }
            done.reallocs += 1;
            (q, new)
        } else {
            (ptr, layout)
        };
        // SAFETY: the block is live with `layout` and not used after this.
        unsafe { heap.dealloc(ptr.as_ptr(), layout) };
        done.blocks += 1;
    }
    done
}

/// A producer allocates blocks of varied sizes and alignments through `GlobalAlloc::alloc`,
/// fills them, and sends them to three consumers, which verify, sometimes resize, and free them:
/// every free is of a block allocated by another thread, made while the producer keeps taking
/// the lock, so many go through the queue of queued frees.
#[test]
fn one_producer_many_consumers_through_global_alloc() {
    const BLOCKS: usize = 60_000;
    const CONSUMERS: usize = 3;

    let arenas = Arenas::new();
    let heap = GlobalHeap::new();
    arenas
        .add_to(&heap, 32 << 20)
        .unwrap_or_else(|e| panic!("arena: {e}"));

    let t0 = Instant::now();
    let (sent, consumed) = thread::scope(|s| {
        let heap = &heap;
        let mut outboxes = Vec::new();
        let mut consumers = Vec::new();
        for c in 0..CONSUMERS {
            let (tx, rx) = mpsc::sync_channel::<Parcel>(64);
            outboxes.push(tx);
            consumers.push(s.spawn(move || consume(heap, rx, 1000 + c as u64)));
        }
        let producer = s.spawn(move || {
            let mut rng = Rng(7);
            let mut sent = 0;
            for key in 0..BLOCKS as u64 {
                let layout = Layout::from_size_align(rng.size(), rng.align()).expect("layout");
                // SAFETY: the layout's size is non-zero.
                let p = unsafe { heap.alloc(layout) };
                let p = NonNull::new(p).unwrap_or_else(|| panic!("alloc {layout:?} failed"));
                assert_eq!(p.addr().get() % layout.align(), 0, "{layout:?}");
                // SAFETY: `p` was just allocated with `layout` and is this thread's alone.
                unsafe { fill(p, layout.size(), key) };
                let parcel = Parcel {
                    ptr: p,
                    layout,
                    key,
                };
                let to = rng.below(CONSUMERS as u64);
                if let Err(mpsc::SendError(parcel)) = outboxes[to].send(parcel) {
                    // The consumer is gone (it panicked): take the block back and stop.
                    // SAFETY: the block came back unreceived, still live with its layout.
                    unsafe { heap.dealloc(parcel.ptr.as_ptr(), parcel.layout) };
                    break;
                }
                sent += 1;
            }
            sent
        });
        let sent = producer
            .join()
            .unwrap_or_else(|p| panic!("producer: {}", panic_message(&*p)));
        let consumed: Vec<Consumed> = consumers
            .into_iter()
            .enumerate()
            .map(|(c, h)| {
                h.join()
                    .unwrap_or_else(|p| panic!("consumer {c}: {}", panic_message(&*p)))
            })
            .collect();
        (sent, consumed)
    });
    let elapsed = t0.elapsed();

    assert_eq!(sent, BLOCKS);
    let received: usize = consumed.iter().map(|c| c.blocks).sum();
    let reallocs: usize = consumed.iter().map(|c| c.reallocs).sum();
    assert_eq!(received, BLOCKS);
    let stats = heap.stats().expect("not re-entrant");
    // Every block and every moving realloc is one allocation; a realloc in place is none.
    assert_eq!(
        stats.allocs + stats.reallocs_in_place,
        (BLOCKS + reallocs) as u64,
        "{stats:?}"
    );
    assert_heap_empty(&heap);
    println!(
        "{BLOCKS} blocks from 1 producer to {CONSUMERS} consumers ({:?} each), {reallocs} \
         reallocs ({} in place), {} queued frees, heap peak in use {} B, {:.2?}",
        consumed.iter().map(|c| c.blocks).collect::<Vec<_>>(),
        stats.reallocs_in_place,
        heap.queued_frees(),
        stats.peak_in_use,
        elapsed
    );
}
