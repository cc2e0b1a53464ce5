//! Benchmarks for tagalloc. For now one quick measurement: alloc+free of small random sizes
//! on each tag placement, with the system allocator beside them as a reference. The full suite
//! (trace replay and talc's methods against peer allocators) builds on this crate.
//!
//! Run: `cargo run --release -p tagalloc-bench`

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::time::Instant;

use tagalloc::{DetachedHeap, InlineHeap};

/// Live slots: each step frees the slot's block (if any) and allocates a new one there.
const SLOTS: usize = 1000;
const STEPS: usize = 2_000_000;
const RUNS: usize = 7;
const ARENA: usize = 64 << 20;

/// The request sizes of one run, the same for every allocator: 8..=512 bytes.
fn sizes() -> Vec<usize> {
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    (0..STEPS)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            8 + (x % 505) as usize
        })
        .collect()
}

/// An allocator under test: allocate, free, and whatever it needs to start.
trait Subject {
    type Block: Copy;
    fn alloc(&mut self, size: usize) -> Self::Block;
    fn free(&mut self, b: Self::Block, size: usize);
}

struct Inline {
    heap: InlineHeap,
    _arena: Vec<u128>,
}

impl Inline {
    fn new() -> Self {
        let mut arena = vec![0u128; ARENA / 16];
        let mut heap = InlineHeap::new();
        // SAFETY: the arena is 16-aligned, lives as long as the heap (same struct, dropped
        // after it is no longer used) and is touched only through the heap.
        unsafe { heap.add_region(arena.as_mut_ptr().cast(), ARENA) }.expect("region");
        Inline {
            heap,
            _arena: arena,
        }
    }
}

impl Subject for Inline {
    type Block = std::ptr::NonNull<u8>;
    fn alloc(&mut self, size: usize) -> Self::Block {
        self.heap.alloc(size, 16).expect("inline alloc")
    }
    fn free(&mut self, b: Self::Block, size: usize) {
        // SAFETY: `b` came from this heap's `alloc` and is freed once.
        unsafe { self.heap.free(b, size) }.expect("inline free");
    }
}

struct Detached(DetachedHeap<Vec<tagalloc::Record>>);

impl Subject for Detached {
    type Block = tagalloc::Block;
    fn alloc(&mut self, size: usize) -> Self::Block {
        self.0.alloc(size, 16).expect("detached alloc")
    }
    fn free(&mut self, b: Self::Block, _size: usize) {
        self.0.free(b).expect("detached free");
    }
}

struct Sys;

impl Subject for Sys {
    type Block = *mut u8;
    fn alloc(&mut self, size: usize) -> Self::Block {
        // SAFETY: the layout has a non-zero size.
        unsafe { System.alloc(Layout::from_size_align(size, 16).unwrap()) }
    }
    fn free(&mut self, b: Self::Block, size: usize) {
        // SAFETY: `b` came from `System.alloc` with this layout.
        unsafe { System.dealloc(b, Layout::from_size_align(size, 16).unwrap()) }
    }
}

/// One run: nanoseconds per alloc+free pair.
fn run<S: Subject>(s: &mut S, sizes: &[usize]) -> f64 {
    let mut slots: Vec<Option<(S::Block, usize)>> = vec![None; SLOTS];
    let start = Instant::now();
    for (i, &size) in sizes.iter().enumerate() {
        let slot = &mut slots[(i * 7919) % SLOTS];
        if let Some((b, n)) = slot.take() {
            s.free(b, n);
        }
        *slot = Some((black_box(s.alloc(size)), size));
    }
    let ns = start.elapsed().as_nanos() as f64 / sizes.len() as f64;
    for (b, n) in slots.into_iter().flatten() {
        s.free(b, n);
    }
    ns
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let sizes = sizes();
    let (mut inline, mut detached, mut sys) = (Vec::new(), Vec::new(), Vec::new());
    let mut di = Inline::new();
    let mut dd = Detached(DetachedHeap::growable(16).expect("granule"));
    dd.0.add_region(1 << 32, ARENA).expect("region");
    // Interleave the allocators run by run, so that machine noise hits them alike.
    for _ in 0..RUNS {
        inline.push(run(&mut di, &sizes));
        detached.push(run(&mut dd, &sizes));
        sys.push(run(&mut Sys, &sizes));
    }
    di.heap.check().expect("inline heap invariants");
    dd.0.check().expect("detached heap invariants");
    let (i, d, s) = (median(inline), median(detached), median(sys));
    println!("alloc+free of random 8..=512-byte blocks, {SLOTS} live, {STEPS} pairs, median of {RUNS} runs");
    println!("| allocator | ns per alloc+free | vs inline |");
    println!("| --- | ---: | ---: |");
    println!("| tagalloc inline (16 B granule) | {i:.1} | 1.00 |");
    println!(
        "| tagalloc out-of-band (16 B granule) | {d:.1} | {:.2} |",
        d / i
    );
    println!("| system malloc | {s:.1} | {:.2} |", s / i);
}
