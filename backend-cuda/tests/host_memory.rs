//! Host memory for CUDA on the fake driver: a pool over pinned host memory, and the hook that
//! registers the regions of any host pool with CUDA, exactly once per region and per growth,
//! and unregisters them before they go back.

use std::alloc::{alloc, dealloc, Layout};
use std::collections::BTreeMap;
use std::ptr::NonNull;

use tagalloc::{Error, Growth, InlineHeap, Policy, Pool, RegionSource};
use tagalloc_cuda::fake::{Call, FakeConfig, FakeDriver, Outstanding};
use tagalloc_cuda::{PinFlags, PinnedSource, RegisterHook};

const PAGE: usize = 4096;
/// How far a region of the test arena may grow in place.
const SLOT: usize = 1 << 20;

#[test]
fn a_pool_over_pinned_host_memory() {
    let gpu = FakeDriver::new(FakeConfig::default()).unwrap();
    let source = PinnedSource::new(&gpu, PinFlags::PORTABLE);
    let mut pool = Pool::new(
        InlineHeap::new(),
        source,
        Policy::new().growth(Growth::Fixed(1 << 20)),
    );
    let mut blocks = Vec::new();
    for i in 0..40usize {
        let size = 10_000 + i * 1000;
        let p = pool.alloc(size, 64).unwrap();
        // SAFETY: a live block of `size` bytes: pinned memory is ordinary host memory.
        unsafe { p.as_ptr().write_bytes(i as u8, size) };
        blocks.push((p, size, i as u8));
    }
    pool.check().unwrap();
    for &(p, size, v) in &blocks {
        // SAFETY: live blocks, written above.
        let bytes = unsafe { std::slice::from_raw_parts(p.as_ptr(), size) };
        assert!(bytes.iter().all(|&b| b == v), "contents survive");
    }
    let st = pool.stats();
    assert!(st.regions_obtained >= 2, "{st:?}");
    assert_eq!(gpu.calls().get(Call::HostAlloc), st.regions_obtained);
    assert_eq!(
        gpu.outstanding().host_allocations as u64,
        st.regions_obtained
    );
    for (p, size, _) in blocks {
        // SAFETY: each block freed once, with its size.
        unsafe { pool.free(p, size).unwrap() };
    }
    let t = pool.trim();
    assert_eq!(t.regions as u64, st.regions_obtained);
    assert_eq!(gpu.calls().get(Call::HostFree), st.regions_obtained);
    assert_eq!(gpu.outstanding(), Outstanding::default());
}

/// Ranges of one page-aligned arena from the global allocator, with books, that grow in place
/// and shrink: a stand-in for an `mmap` source.
struct Arena {
    base: NonNull<u8>,
    size: usize,
    /// Offset → length handed out.
    out: BTreeMap<usize, usize>,
}

impl Arena {
    fn new(size: usize) -> Arena {
        let layout = Layout::from_size_align(size, PAGE).unwrap();
        // SAFETY: a non-zero size.
        let base = NonNull::new(unsafe { alloc(layout) }).unwrap();
        Arena {
            base,
            size,
            out: BTreeMap::new(),
        }
    }

    fn offset(&self, p: NonNull<u8>) -> usize {
        p.addr().get() - self.base.addr().get()
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        let layout = Layout::from_size_align(self.size, PAGE).unwrap();
        // SAFETY: allocated in `new` with this layout.
        unsafe { dealloc(self.base.as_ptr(), layout) };
    }
}

// SAFETY: ranges of the arena, which outlives the pool (declared before it, dropped after),
// never handed out twice (the books).
unsafe impl RegionSource for &mut Arena {
    type Base = NonNull<u8>;
    fn addr(b: NonNull<u8>) -> usize {
        b.addr().get()
    }
    fn granularity(&self) -> usize {
        PAGE
    }
    fn obtain(&mut self, min: usize) -> Result<(NonNull<u8>, usize), Error> {
        // Each region starts a slot of its own, and grows in place up to the slot's end.
        let at = self
            .out
            .iter()
            .next_back()
            .map_or(0, |(&o, &l)| (o + l).next_multiple_of(SLOT));
        if at + min > self.size {
            return Err(Error::OutOfMemory);
        }
        self.out.insert(at, min);
        // SAFETY: inside the arena.
        Ok((unsafe { self.base.add(at) }, min))
    }
    unsafe fn give_back(&mut self, base: NonNull<u8>, len: usize) {
        let o = self.offset(base);
        assert_eq!(self.out.remove(&o), Some(len));
    }
    fn grow(&mut self, base: NonNull<u8>, len: usize, add: usize) -> Result<usize, Error> {
        let o = self.offset(base);
        let next = self
            .out
            .range(o + 1..)
            .next()
            .map_or(self.size, |(&n, _)| n);
        if o + len + add > next.min(o + SLOT) {
            return Err(Error::OutOfMemory);
        }
        self.out.insert(o, len + add);
        Ok(add)
    }
    unsafe fn shrink(&mut self, base: NonNull<u8>, len: usize, keep: usize) -> bool {
        let o = self.offset(base);
        assert_eq!(self.out.insert(o, keep), Some(len));
        true
    }
}

#[test]
fn the_hook_registers_each_region_and_growth_exactly_once() {
    let gpu = FakeDriver::new(FakeConfig::default()).unwrap();
    let mut arena = Arena::new(64 << 20);
    let hook = RegisterHook::new(&gpu, PinFlags::DEFAULT);
    let policy = Policy::new()
        .growth(Growth::Fixed(64 * PAGE))
        .release_above(16 * PAGE);
    let mut pool = Pool::with_hooks(InlineHeap::new(), &mut arena, policy, hook);
    let mut blocks = Vec::new();
    for i in 0..200usize {
        let size = 100 + (i * 7919) % 30_000;
        blocks.push((pool.alloc(size, 16).unwrap(), size));
    }
    let st = pool.stats();
    assert!(st.grown > 0 && st.regions_obtained > 1, "{st:?}");
    let ranges = st.regions_obtained + st.grown;
    assert_eq!(
        gpu.calls().get(Call::HostRegister),
        ranges,
        "once per range"
    );
    assert_eq!(pool.hooks().registrations(), ranges);
    assert_eq!(gpu.outstanding().registrations as u64, ranges);
    assert_eq!(pool.hooks().registered_bytes(), st.reserved);
    assert_eq!(pool.hooks().failures().0, 0);

    // Free the last blocks: trimming cuts the regions' free ends, and what is cut off is
    // unregistered (a piece the cut splits keeps its head registered).
    for (p, size) in blocks.drain(100..) {
        // SAFETY: freed once, with its size.
        unsafe { pool.free(p, size).unwrap() };
    }
    let t = pool.trim();
    let st = pool.stats();
    assert!(t.bytes > 0, "{t:?}");
    assert_eq!(pool.hooks().registered_bytes(), st.reserved);
    assert_eq!(gpu.outstanding().registrations, pool.hooks().registered());
    pool.check().unwrap();

    for (p, size) in blocks.drain(..) {
        // SAFETY: as above.
        unsafe { pool.free(p, size).unwrap() };
    }
    let t = pool.trim();
    assert!(t.regions > 0);
    assert_eq!(pool.stats().reserved, 0);
    assert_eq!(pool.hooks().registered(), 0);
    assert_eq!(
        gpu.calls().get(Call::HostUnregister),
        pool.hooks().unregistrations()
    );
    assert_eq!(
        pool.hooks().registrations(),
        pool.hooks().unregistrations(),
        "every registration undone, each once"
    );
    assert_eq!(gpu.outstanding(), Outstanding::default());
}

#[test]
fn a_failed_registration_is_counted_and_the_pool_still_serves() {
    let gpu = FakeDriver::new(FakeConfig::default()).unwrap();
    gpu.fail_nth(Call::HostRegister, 1, tagalloc_cuda::code::OUT_OF_MEMORY);
    let mut arena = Arena::new(8 << 20);
    let hook = RegisterHook::new(&gpu, PinFlags::DEFAULT);
    let mut pool = Pool::with_hooks(InlineHeap::new(), &mut arena, Policy::new(), hook);
    let p = pool.alloc(1000, 16).unwrap();
    let (n, last) = pool.hooks().failures();
    assert_eq!(n, 1);
    assert!(last.is_some_and(|e| e.is_out_of_memory()));
    assert_eq!(pool.hooks().registered(), 0);
    // SAFETY: freed once, with its size.
    unsafe { pool.free(p, 1000).unwrap() };
    pool.trim();
    assert_eq!(gpu.outstanding(), Outstanding::default());
}
