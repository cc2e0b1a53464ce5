//! Real threads through one [`GlobalHeap`]: a multi-threaded trace replayed with one OS thread
//! per thread of the recorded process, and a producer handing blocks to consumers through the
//! `GlobalAlloc` interface. Both make many frees of memory allocated by another thread, some of
//! which find the lock taken and go through the heap's queue of queued frees; every block's
//! contents are verified before it is freed or resized, and the heap's invariants are checked
//! while the threads run and after they have finished.

use std::alloc::{GlobalAlloc, Layout};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Mutex};
use std::thread;
use std::time::Instant;

use tagalloc::{Error, GlobalHeap, Stats};
use tagalloc_tests::contents::{fill, verify};
use tagalloc_tests::threaded::{
    panic_message, replay_threaded, Plan, ThreadedAlloc, ThreadedOptions,
};
use tagalloc_tests::trace::{shared_trace, Trace};

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

/// A `GlobalHeap` over arenas, growing when it runs out: what the threaded replay drives.
/// The heap is declared first, so it is dropped (and can no longer hand any arena out) before
/// the arenas are.
struct GrowingHeap {
    heap: GlobalHeap,
    arenas: Arenas,
}

impl GrowingHeap {
    /// A heap with a first arena of `bytes` bytes.
    fn new(bytes: usize) -> Self {
        let grown = GrowingHeap {
            heap: GlobalHeap::new(),
            arenas: Arenas::new(),
        };
        grown
            .arenas
            .add_to(&grown.heap, bytes)
            .unwrap_or_else(|e| panic!("first region of {bytes} bytes: {e}"));
        grown
    }
}

impl ThreadedAlloc for GrowingHeap {
    fn alloc(&self, size: usize, align: usize) -> Result<NonNull<u8>, String> {
        with_growth(&self.heap, &self.arenas, size, align, || {
            self.heap.try_alloc(size, align)
        })
        .map_err(|e| e.to_string())
    }
    unsafe fn free(&self, ptr: NonNull<u8>, size: usize, _align: usize) -> Result<(), String> {
        // SAFETY: forwarded caller contract.
        unsafe { self.heap.try_free(ptr, size) }.map_err(|e| e.to_string())
    }
    unsafe fn realloc(
        &self,
        ptr: NonNull<u8>,
        old_size: usize,
        align: usize,
        new_size: usize,
    ) -> Result<NonNull<u8>, String> {
        with_growth(&self.heap, &self.arenas, new_size, align, || {
            // SAFETY: `ptr` is live with `old_size` bytes, allocated with `align`; a failed
            // realloc leaves it so, so every retry passes a live block.
            unsafe { self.heap.try_realloc(ptr, old_size, align, new_size) }
        })
        .map_err(|e| e.to_string())
    }
    fn check(&self) -> Option<Result<(), String>> {
        Some(
            self.heap
                .with_heap(|h| h.check())
                .map_err(|e| e.to_string())
                .and_then(|r| r.map_err(|e| e.to_string())),
        )
    }
    fn stats(&self) -> Option<Stats> {
        self.heap.stats().ok()
    }
    fn queued_frees(&self) -> Option<usize> {
        Some(self.heap.queued_frees())
    }
}

/// What [`replay_threaded_heap`] reports beyond what it prints.
struct Threaded {
    /// Regions the heap was given after the first because it ran out.
    regions_added: usize,
}

/// Replays `trace` through one `GlobalHeap` (see `tagalloc_tests::threaded`). The heap starts
/// with `first_region` bytes, or by default enough for the trace with room to spare.
fn replay_threaded_heap(trace: &Trace, first_region: Option<usize>) -> Threaded {
    let started = Instant::now();
    let plan = Plan::new(&trace.events, usize::MAX);
    // Twice the peak, plus tags and rounding for every block, plus slack; more is added if the
    // concurrent interleaving fragments the heap beyond that.
    let arena_bytes =
        first_region.unwrap_or(2 * plan.peak_live_bytes + 32 * plan.peak_live_count + (8 << 20));
    let heap = GrowingHeap::new(arena_bytes);
    let report = replay_threaded(&heap, trace, &plan, &ThreadedOptions::default())
        .unwrap_or_else(|e| panic!("{e}"));
    let added = heap.arenas.added.load(Ordering::Relaxed);
    println!(
        "{report}, {added} regions added; total {:.2?}",
        started.elapsed()
    );
    Threaded {
        regions_added: added,
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
    replay_threaded_heap(&trace, None);
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
    let report = replay_threaded_heap(&trace, Some(256 << 10));
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
