//! The per-thread cache in front of a shared inline pool: hits without the lock, batched
//! refills and spills, bounds, double frees refused, flushes, the figures in `PoolStats`, and
//! a differential property test against the reference model with a model of the cache in
//! front. Small enough for Miri (`cargo +nightly miri test -p tagalloc ... tests::tcache`).

extern crate std;
use std::collections::BTreeMap;
use std::vec::Vec;

use core::ptr::NonNull;
use proptest::prelude::*;

use super::inline::{Arena, OneRegion};
use crate::model::{Geometry, Model};
use crate::share::alloc::SharedAlloc;
use crate::share::cache::thread::ENABLED;
use crate::{
    Class, Error, Growth, InlineHeap, Policy, Pool, Reserve, SharedPool, ThreadCache, CLASSES,
    TOTAL_BYTES,
};

type TestPool = SharedPool<InlineHeap, OneRegion>;

/// A pool over one region of `len` bytes, obtained at once; and that region.
fn pool(len: usize) -> (TestPool, (usize, usize)) {
    let source = OneRegion::new(Arena::new(len + 64));
    let pool = SharedPool::new(Pool::new(
        InlineHeap::new(),
        source,
        Policy::new()
            .growth(Growth::Fixed(len))
            .reserve(Reserve::Bytes(len)),
    ));
    pool.with_pool(|p| p.reserve_now()).unwrap().unwrap();
    let region = pool.with_pool(|p| p.source().handed).unwrap();
    (pool, region)
}

const KEY: usize = 0x5eed_0fca_5e00;

/// Flushes `caches` into `pool`: then nothing is left in use, and the heap is sound.
///
/// # Safety
/// Every cache belongs to `pool`.
unsafe fn flush_all_back(pool: &TestPool, caches: &mut [&mut ThreadCache]) {
    for cache in caches {
        // SAFETY: the caller's promise.
        unsafe { pool.flush_cache(cache).unwrap() };
    }
    assert_eq!(pool.stats().unwrap().heap.in_use, 0);
    pool.with_pool(|p| p.check()).unwrap().unwrap();
}

#[test]
fn a_freed_small_block_comes_back_from_the_cache() {
    let (pool, _) = pool(64 << 10);
    let mut cache = ThreadCache::new(KEY);
    let p = pool.alloc_with_cache(&mut cache, 100, 8).unwrap();
    // SAFETY: a live 100-byte block of this pool, given up.
    unsafe { pool.free_with_cache(&mut cache, p, 100).unwrap() };
    let q = pool.alloc_with_cache(&mut cache, 100, 8).unwrap();
    if ENABLED {
        assert_eq!(p, q, "the block just freed is the next one handed out");
        let c = Class::of(100, 8).unwrap();
        assert_eq!(
            cache.count(c),
            ThreadCache::batch(c),
            "one refill brought a batch"
        );
    }
    // SAFETY: as above.
    unsafe { pool.free_with_cache(&mut cache, q, 100).unwrap() };
    // SAFETY: the cache belongs to this pool.
    unsafe { pool.flush_cache(&mut cache).unwrap() };
    let s = pool.stats().unwrap();
    assert_eq!(s.heap.in_use, 0);
    assert_eq!((s.cache.blocks, s.cache.bytes), (0, 0));
    if ENABLED {
        assert_eq!((s.cache.hits, s.cache.misses, s.cache.flushes), (1, 1, 1));
    }
    pool.with_pool(|p| p.check()).unwrap().unwrap();
}

#[test]
fn cached_blocks_count_as_in_use_and_on_their_own() {
    let (pool, _) = pool(64 << 10);
    let mut cache = ThreadCache::new(KEY);
    let p = pool.alloc_with_cache(&mut cache, 40, 16).unwrap();
    let s = pool.stats().unwrap();
    assert_eq!(s.cache.blocks, cache.blocks());
    assert_eq!(s.cache.bytes, cache.bytes());
    assert!(
        s.heap.in_use >= cache.bytes(),
        "cached blocks are in use for the heap"
    );
    // SAFETY: a live 40-byte block, given up.
    unsafe { pool.free_with_cache(&mut cache, p, 40).unwrap() };
    // SAFETY: the cache belongs to this pool.
    unsafe { pool.flush_cache(&mut cache).unwrap() };
    assert_eq!(pool.stats().unwrap().heap.in_use, 0);
}

#[test]
fn a_full_class_spills_a_batch_and_stays_within_its_bounds() {
    let (pool, _) = pool(256 << 10);
    let mut cache = ThreadCache::new(KEY);
    let c = Class::of(24, 8).unwrap();
    let n = 3 * ThreadCache::limit(c) as usize;
    let blocks: Vec<_> = (0..n)
        .map(|_| pool.alloc_with_cache(&mut cache, 24, 8).unwrap())
        .collect();
    for &p in &blocks {
        // SAFETY: live 24-byte blocks, each given up once.
        unsafe { pool.free_with_cache(&mut cache, p, 24).unwrap() };
        assert!(cache.count(c) <= ThreadCache::limit(c));
        assert!(cache.bytes() <= TOTAL_BYTES);
    }
    if ENABLED {
        assert!(pool.stats().unwrap().cache.spills >= 1);
    }
    // SAFETY: the cache belongs to this pool.
    unsafe { flush_all_back(&pool, &mut [&mut cache]) };
}

#[test]
fn the_total_bound_holds_across_classes() {
    let (pool, _) = pool(1 << 20);
    let mut cache = ThreadCache::new(KEY);
    let mut live = Vec::new();
    for size in (24..1032).step_by(16) {
        for _ in 0..8 {
            live.push((pool.alloc_with_cache(&mut cache, size, 16).unwrap(), size));
        }
    }
    for (p, size) in live {
        // SAFETY: live blocks, each given up once.
        unsafe { pool.free_with_cache(&mut cache, p, size).unwrap() };
        assert!(cache.bytes() <= TOTAL_BYTES);
    }
    // SAFETY: the cache belongs to this pool.
    unsafe { flush_all_back(&pool, &mut [&mut cache]) };
}

#[test]
fn a_double_free_through_a_cache_is_refused_and_writes_nothing() {
    let (pool, _) = pool(64 << 10);
    let mut mine = ThreadCache::new(KEY);
    let mut other = ThreadCache::new(KEY);
    let p = pool.alloc_with_cache(&mut mine, 64, 16).unwrap();
    // SAFETY: a live 64-byte block, given up.
    unsafe { pool.free_with_cache(&mut mine, p, 64).unwrap() };
    let before = (mine.blocks(), other.blocks());
    // SAFETY: a double free, which the cache's key (or, in the checked build, the heap) refuses.
    let again = unsafe { pool.free_with_cache(&mut mine, p, 64) };
    assert_eq!(again, Err(Error::DoubleFree));
    // Another thread's cache (same process key) refuses it too.
    // SAFETY: as above.
    let remote = unsafe { pool.free_with_cache(&mut other, p, 64) };
    assert_eq!(remote, Err(Error::DoubleFree));
    assert_eq!(
        (mine.blocks(), other.blocks()),
        before,
        "nothing was cached"
    );
    // SAFETY: both caches belong to this pool.
    unsafe { flush_all_back(&pool, &mut [&mut mine, &mut other]) };
}

#[test]
fn a_block_handed_out_carries_no_key() {
    let (pool, _) = pool(64 << 10);
    let mut cache = ThreadCache::new(KEY);
    let p = pool.alloc_with_cache(&mut cache, 32, 16).unwrap();
    // SAFETY: a live 32-byte block, given up, then taken again.
    unsafe { pool.free_with_cache(&mut cache, p, 32).unwrap() };
    let q = pool.alloc_with_cache(&mut cache, 32, 16).unwrap();
    // SAFETY: a live block of at least 16 bytes.
    assert!(!unsafe { cache.carries_key(q) });
    // SAFETY: given up once.
    unsafe { pool.free_with_cache(&mut cache, q, 32).unwrap() };
    // SAFETY: the cache belongs to this pool.
    unsafe { pool.flush_cache(&mut cache).unwrap() };
}

#[test]
fn large_and_overaligned_requests_bypass_the_cache() {
    let (pool, _) = pool(64 << 10);
    let mut cache = ThreadCache::new(KEY);
    let big = pool.alloc_with_cache(&mut cache, 9000, 16).unwrap();
    let aligned = pool.alloc_with_cache(&mut cache, 64, 256).unwrap();
    assert_eq!(aligned.addr().get() % 256, 0);
    assert_eq!(cache.blocks(), 0);
    // SAFETY: live blocks, given up once.
    unsafe {
        pool.free_with_cache(&mut cache, big, 9000).unwrap();
        pool.free_with_cache(&mut cache, aligned, 64).unwrap();
        flush_all_back(&pool, &mut [&mut cache]);
    }
}

#[test]
fn the_classes_above_the_exact_ones_hold_what_they_promise() {
    let mut last = 0;
    for size in 1..=9000 {
        let Some(c) = Class::of(size, 16) else {
            assert!(size > 8000, "{size} has a class");
            continue;
        };
        let chunk = (size + 8).div_ceil(16).max(2) * 16;
        assert!(
            c.index() < CLASSES && c.index() >= last,
            "{size}: classes grow with sizes"
        );
        last = c.index();
        assert!(c.usable() >= size, "{size}: its class's blocks hold it");
        assert_eq!(c.chunk_bytes() % 16, 0);
        assert!(
            c.chunk_bytes() * 8 <= chunk * 9,
            "{size}: at most an eighth more than its own chunk"
        );
        assert_eq!(
            Class::holding(c.chunk_bytes()),
            c,
            "{size}: its size files it back"
        );
    }
    for size in 0..=9000 {
        assert_eq!(
            Class::cacheable(size),
            Class::of(size, 1).is_some(),
            "{size}"
        );
    }
    for bytes in (32..=20000).step_by(16) {
        let h = Class::holding(bytes);
        assert!(
            h.chunk_bytes() <= bytes,
            "{bytes}: stands in for a smaller class only"
        );
        if h.index() + 1 < CLASSES {
            let next = Class::of(bytes - 8 + 1, 16).unwrap();
            assert!(
                next.chunk_bytes() > bytes,
                "{bytes}: the largest it can stand in for"
            );
        }
    }
}

#[test]
fn a_block_between_two_class_sizes_is_filed_by_its_own_chunk() {
    if !ENABLED {
        return;
    }
    let (pool, _) = pool(64 << 10);
    let mut cache = ThreadCache::new(KEY);
    // Aligned above the granule: no class, a chunk of its own size (2016 bytes), between the
    // classes of 1920 and 2048 bytes.
    let p = pool.alloc_with_cache(&mut cache, 2000, 32).unwrap();
    // A refill, where the cache learns the pool's bypass threshold.
    let q = pool.alloc_with_cache(&mut cache, 100, 16).unwrap();
    // SAFETY: live blocks of this pool with their sizes, given up once.
    unsafe {
        pool.free_with_cache(&mut cache, p, 2000).unwrap();
        pool.free_with_cache(&mut cache, q, 100).unwrap();
    }
    let asked = Class::of(2000, 16).unwrap();
    let own = Class::holding(2016);
    assert_eq!((asked.chunk_bytes(), own.chunk_bytes()), (2048, 1920));
    assert_eq!((cache.count(asked), cache.count(own)), (0, 1));
    assert_eq!(
        pool.alloc_with_cache(&mut cache, 1900, 16).unwrap(),
        p,
        "served to a request its chunk holds"
    );
    // SAFETY: as above; the cache belongs to this pool.
    unsafe {
        pool.free_with_cache(&mut cache, p, 1900).unwrap();
        flush_all_back(&pool, &mut [&mut cache]);
    }
}

#[test]
fn a_bypassed_block_of_a_class_size_is_not_cached() {
    let source = OneRegion::new(Arena::new(64 << 10));
    let pool: TestPool = SharedPool::new(Pool::new(
        InlineHeap::new(),
        source,
        Policy::new()
            .growth(Growth::Fixed(32 << 10))
            .bypass_above(4096),
    ));
    let mut cache = ThreadCache::new(KEY);
    // Twice: the first free teaches the cache the pool's bypass threshold, the second is
    // turned away by it.
    for round in 1..=2 {
        let p = pool.alloc_with_cache(&mut cache, 6000, 16).unwrap();
        // SAFETY: a live block of this pool with its size, given up once.
        unsafe { pool.free_with_cache(&mut cache, p, 6000).unwrap() };
        assert_eq!(cache.blocks(), 0, "a region of its own is not kept");
        let s = pool.stats().unwrap();
        assert_eq!(
            (s.regions_given_back, s.reserved),
            (round, 0),
            "its region went back"
        );
    }
}

#[test]
fn a_block_freed_by_another_cache_is_served_there() {
    let (pool, _) = pool(64 << 10);
    let mut a = ThreadCache::new(KEY);
    let mut b = ThreadCache::new(KEY);
    let p = pool.alloc_with_cache(&mut a, 200, 16).unwrap();
    // SAFETY: a live block, given up by another cache than the one that handed it out.
    unsafe { pool.free_with_cache(&mut b, p, 200).unwrap() };
    let q = pool.alloc_with_cache(&mut b, 200, 16).unwrap();
    if ENABLED {
        assert_eq!(p, q);
    }
    // SAFETY: given up once; both caches belong to this pool.
    unsafe {
        pool.free_with_cache(&mut b, q, 200).unwrap();
        flush_all_back(&pool, &mut [&mut a, &mut b]);
    }
}

/// After a spill the victim is filed: the next listed request takes the smallest hole that
/// fits instead of carving on from the rest of the chunk the cache's refills were carved from
/// (which may be a span never touched: the end of a region other than the top region).
#[test]
fn a_spill_files_the_victim_so_holes_serve_first() {
    if !ENABLED {
        return;
    }
    let (pool, _) = pool(128 << 10);
    let mut cache = ThreadCache::new(KEY);
    let alloc = |cache: &mut ThreadCache, size| pool.alloc_with_cache(cache, size, 16).unwrap();
    // Above the cached sizes: straight to the pool.
    let hole = alloc(&mut cache, 9500);
    let _guard0 = alloc(&mut cache, 10000);
    let span = alloc(&mut cache, 40000);
    let _guard1 = alloc(&mut cache, 10000);
    // SAFETY: a live block of this pool with its size, given up once.
    unsafe { pool.free_with_cache(&mut cache, span, 40000).unwrap() };
    // Refills of the 1040-byte class, carved from the span; its rest is the victim.
    let c = Class::of(1000, 16).unwrap();
    let n = ThreadCache::limit(c) as usize + 2;
    let blocks: Vec<_> = (0..n).map(|_| alloc(&mut cache, 1000)).collect();
    assert!(blocks
        .iter()
        .all(|b| (span.addr().get()..span.addr().get() + 40000).contains(&b.addr().get())));
    // SAFETY: as above.
    unsafe { pool.free_with_cache(&mut cache, hole, 9500).unwrap() };
    for b in blocks {
        // SAFETY: as above.
        unsafe { pool.free_with_cache(&mut cache, b, 1000).unwrap() };
    }
    assert!(
        pool.stats().unwrap().cache.spills >= 1,
        "the frees past the class's bound spilled"
    );
    assert!(cache.count(c) <= ThreadCache::limit(c));
    assert_eq!(
        alloc(&mut cache, 9400),
        hole,
        "the hole, the best fit, and not the rest of the span"
    );
    pool.with_pool(|p| p.check()).unwrap().unwrap();
}

/// A model of the cache: per class a stack of addresses, refilled and spilled as the cache
/// does, over the reference model of the heap.
struct ModelCache {
    bins: BTreeMap<usize, Vec<usize>>,
    bytes: usize,
    /// Whether the cache has learnt the pool's bypass threshold (at its first exchange: a
    /// refill, a spill, a flush, or an uncached free above the exact classes): until then a
    /// block above the exact classes is freed to the pool, not cached.
    learnt: bool,
}

impl ModelCache {
    fn count(&self, c: Class) -> u32 {
        self.bins.get(&c.index()).map_or(0, |b| b.len() as u32)
    }

    fn alloc(&mut self, m: &mut Model, size: usize) -> Option<usize> {
        let Some(c) = Class::of(size, 16) else {
            return m.alloc(size, 16).ok();
        };
        if let Some(p) = self.bins.entry(c.index()).or_default().pop() {
            self.bytes -= c.chunk_bytes();
            return Some(p);
        }
        self.learnt = true;
        let first = m.alloc(c.usable(), 16).ok()?;
        let by_class = ThreadCache::limit(c)
            .saturating_sub(self.count(c))
            .min(ThreadCache::batch(c));
        let by_bytes = ((TOTAL_BYTES - self.bytes) / c.chunk_bytes()) as u32;
        for _ in 0..by_class.min(by_bytes) {
            match m.alloc(c.usable(), 16) {
                Ok(p) => {
                    self.bins.entry(c.index()).or_default().push(p);
                    self.bytes += c.chunk_bytes();
                }
                Err(_) => break,
            }
        }
        Some(first)
    }

    fn free(&mut self, m: &mut Model, p: usize, size: usize) {
        let Some(c) = Class::of(size, 1) else {
            return m.free(p);
        };
        // Above the exact classes the block's own chunk decides, once the cache knows the
        // pool's bypass threshold; before, the free teaches it and goes to the pool.
        let c = if c.is_coarse() {
            if !self.learnt {
                self.learnt = true;
                return m.free(p);
            }
            Class::holding(m.chunks()[&p].granules * 16)
        } else {
            c
        };
        let full = |s: &Self| {
            s.count(c) >= ThreadCache::limit(c) || s.bytes + c.chunk_bytes() > TOTAL_BYTES
        };
        if full(self) {
            for _ in 0..ThreadCache::batch(c).max(1) {
                match self.bins.entry(c.index()).or_default().pop() {
                    Some(q) => {
                        self.bytes -= c.chunk_bytes();
                        m.free(q);
                    }
                    None => break,
                }
            }
            if full(self) {
                m.free(p);
            } else {
                self.bins.entry(c.index()).or_default().push(p);
                self.bytes += c.chunk_bytes();
            }
            // A spill files the victim once its frees are done.
            m.file_victim();
            self.learnt = true;
            return;
        }
        self.bins.entry(c.index()).or_default().push(p);
        self.bytes += c.chunk_bytes();
    }

    /// `SharedPool::realloc_with_cache`, else the heap's realloc under the lock: the new
    /// address, or `None` when neither can serve it.
    fn realloc(&mut self, m: &mut Model, p: usize, size: usize) -> Option<usize> {
        let usable = m.chunks()[&p].granules * 16 - 8;
        if let (true, Some(to)) = (Class::cacheable(usable), Class::of(size, 1)) {
            if Class::holding(usable + 8) == to {
                return Some(p);
            }
            if let Some(q) = self.bins.entry(to.index()).or_default().pop() {
                self.bytes -= to.chunk_bytes();
                self.free(m, p, usable);
                return Some(q);
            }
        }
        match m.realloc(p, size, 16) {
            Ok(moved) => Some(moved.unwrap_or(p)),
            Err(_) => None,
        }
    }

    fn flush(&mut self, m: &mut Model) {
        for (_, bin) in core::mem::take(&mut self.bins) {
            for p in bin.into_iter().rev() {
                m.free(p);
            }
        }
        m.file_victim();
        self.bytes = 0;
        self.learnt = true;
    }
}

#[derive(Clone, Debug)]
enum Step {
    Alloc(usize),
    Free(usize),
    Realloc(usize, usize),
    Flush,
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    let step = prop_oneof![
        6 => prop_oneof![1usize..1100, 1usize..3000, 1usize..10000].prop_map(Step::Alloc),
        5 => any::<usize>().prop_map(Step::Free),
        3 => (any::<usize>(), prop_oneof![1usize..1100, 1usize..10000])
            .prop_map(|(i, size)| Step::Realloc(i, size)),
        1 => Just(Step::Flush),
    ];
    proptest::collection::vec(step, 1..if cfg!(miri) { 30 } else { 300 })
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: if cfg!(miri) { 2 } else { 128 },
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// Random requests and reallocs through a cache in front of a pool: every address is the
    /// one the reference model predicts with a model of the cache in front of it, the heap's
    /// invariants hold after every step, and the figures balance.
    #[test]
    fn a_cached_pool_places_every_block_where_the_model_says(ops in steps()) {
        if !ENABLED {
            return Ok(());
        }
        let (pool, (base, len)) = pool(512 << 10);
        let mut model = Model::new(Geometry::inline(16).unwrap());
        model.add_region(base, len).unwrap();
        let mut mc = ModelCache { bins: BTreeMap::new(), bytes: 0, learnt: false };
        let mut cache = ThreadCache::new(KEY);
        let mut live: Vec<(NonNull<u8>, usize)> = Vec::new();
        for op in ops {
            match op {
                Step::Alloc(size) => {
                    let got = pool.alloc_with_cache(&mut cache, size, 16).ok();
                    let want = mc.alloc(&mut model, size);
                    prop_assert_eq!(got.map(|p| p.addr().get()), want, "alloc {}", size);
                    if let Some(p) = got {
                        // SAFETY: a fresh block of at least `size` bytes.
                        unsafe { p.as_ptr().write_bytes(0xa5, size) };
                        live.push((p, size));
                    }
                }
                Step::Free(i) if !live.is_empty() => {
                    let (p, size) = live.swap_remove(i % live.len());
                    // SAFETY: a live block of this pool with its size, given up once.
                    unsafe { pool.free_with_cache(&mut cache, p, size).unwrap() };
                    mc.free(&mut model, p.addr().get(), size);
                }
                Step::Realloc(i, size) if !live.is_empty() => {
                    let k = i % live.len();
                    let (p, old) = live[k];
                    // SAFETY: a live block of this pool.
                    let usable = unsafe { <InlineHeap>::unlocked_usable_size(p) }.unwrap();
                    // SAFETY: a live block of `usable` bytes, not in a cache; replaced in
                    // `live` by what comes back.
                    let r = unsafe { pool.realloc_with_cache(&mut cache, p, usable, 16, size) };
                    let got = match r {
                        Some(r) => r.ok(),
                        // SAFETY: as above, with its size.
                        None => unsafe { pool.realloc_block(p, old, 16, size) }.ok(),
                    };
                    let want = mc.realloc(&mut model, p.addr().get(), size);
                    let at = got.map(|q| q.addr().get());
                    prop_assert_eq!(at, want, "realloc {} to {}", old, size);
                    if let Some(q) = got {
                        let n = old.min(size);
                        // SAFETY: a live block of at least `size` bytes, of which the first
                        // `n` were copied.
                        let kept = unsafe { core::slice::from_raw_parts(q.as_ptr(), n) };
                        prop_assert!(kept.iter().all(|&b| b == 0xa5), "the payload moved whole");
                        // SAFETY: as above.
                        unsafe { q.as_ptr().write_bytes(0xa5, size) };
                        live[k] = (q, size);
                    }
                }
                Step::Free(_) | Step::Realloc(..) => {}
                Step::Flush => {
                    // SAFETY: the cache belongs to this pool.
                    unsafe { pool.flush_cache(&mut cache).unwrap() };
                    mc.flush(&mut model);
                }
            }
            prop_assert_eq!(cache.bytes(), mc.bytes);
            pool.with_pool(|p| p.check()).unwrap().unwrap();
        }
        // SAFETY: the cache belongs to this pool.
        unsafe { pool.flush_cache(&mut cache).unwrap() };
        for (p, size) in live {
            // SAFETY: live blocks, given up once.
            unsafe { pool.free_with_cache(&mut cache, p, size).unwrap() };
        }
        // SAFETY: as above.
        unsafe { pool.flush_cache(&mut cache).unwrap() };
        let s = pool.stats().unwrap();
        prop_assert_eq!(s.heap.in_use, 0);
        prop_assert_eq!((s.cache.blocks, s.cache.bytes), (0, 0));
    }
}

/// A spill that finds the pool's lock taken does not wait: its batch goes to the pool's
/// transfer, where another cache's refill takes it without the lock; blocks there are still
/// cached (counted so, a second free refused), and `flush_transfer` gives them to the heap.
#[test]
fn a_spill_that_finds_the_lock_taken_hands_its_batch_to_another_cache() {
    if !ENABLED {
        return;
    }
    let (pool, _) = pool(256 << 10);
    let mut a = ThreadCache::new(KEY);
    let mut b = ThreadCache::new(KEY);
    let c = Class::of(100, 16).unwrap();
    let (limit, batch) = (ThreadCache::limit(c), ThreadCache::batch(c));
    let blocks: Vec<_> = (0..=limit).map(|_| pool.alloc(100, 16).unwrap()).collect();
    for &p in &blocks[..limit as usize] {
        // SAFETY: live blocks of this pool with their size, each given up once.
        unsafe { pool.free_with_cache(&mut a, p, 100).unwrap() };
    }
    assert_eq!(a.count(c), limit);
    let in_use = pool.stats().unwrap().heap.in_use;
    // The class is full: this free spills, while this very thread holds the lock.
    pool.with_pool(|_| {
        // SAFETY: as above.
        unsafe { pool.free_with_cache(&mut a, blocks[limit as usize], 100) }
    })
    .unwrap()
    .unwrap();
    let s = pool.stats().unwrap();
    assert_eq!(s.heap.in_use, in_use, "nothing went to the heap");
    assert_eq!(a.count(c), limit - batch + 1);
    assert_eq!(s.cache.blocks, batch as usize, "the batch counts as cached");
    // The batch's blocks are the last ones the cache took, and refused if freed again.
    let handed = &blocks[(limit - batch) as usize..limit as usize];
    let again = handed[0];
    // SAFETY: a double free of a block in the transfer, refused with nothing written.
    let refused = unsafe { pool.free_with_cache(&mut b, again, 100) };
    assert_eq!(refused, Err(Error::DoubleFree));
    assert_eq!(b.blocks(), 0);
    // Another cache's refill takes the batch, without the heap.
    let got = pool.alloc_with_cache(&mut b, 100, 16).unwrap();
    assert!(handed.contains(&got));
    assert_eq!(b.count(c), batch - 1);
    assert_eq!(pool.stats().unwrap().heap.in_use, in_use);
    assert_eq!(pool.stats().unwrap().cache.blocks, 0);
    // SAFETY: `got` is live and given up once; the caches belong to this pool.
    unsafe {
        pool.free_with_cache(&mut b, got, 100).unwrap();
        flush_all_back(&pool, &mut [&mut a, &mut b]);
    }
}

/// `flush_transfer` (what a trim does first) gives the transfer's batches to the heap.
#[test]
fn flushing_the_transfer_gives_its_batches_to_the_heap() {
    if !ENABLED {
        return;
    }
    let (pool, _) = pool(256 << 10);
    let mut a = ThreadCache::new(KEY);
    let c = Class::of(300, 16).unwrap();
    let limit = ThreadCache::limit(c);
    let blocks: Vec<_> = (0..=limit).map(|_| pool.alloc(300, 16).unwrap()).collect();
    for &p in &blocks[..limit as usize] {
        // SAFETY: live blocks of this pool with their size, each given up once.
        unsafe { pool.free_with_cache(&mut a, p, 300).unwrap() };
    }
    pool.with_pool(|_| {
        // SAFETY: as above.
        unsafe { pool.free_with_cache(&mut a, blocks[limit as usize], 300) }
    })
    .unwrap()
    .unwrap();
    let before = pool.stats().unwrap();
    assert_eq!(before.cache.blocks, ThreadCache::batch(c) as usize);
    pool.flush_transfer().unwrap();
    let after = pool.stats().unwrap();
    assert_eq!(after.cache.blocks, 0);
    assert_eq!(
        before.heap.in_use - after.heap.in_use,
        ThreadCache::batch(c) as usize * c.chunk_bytes()
    );
    pool.with_pool(|p| p.check()).unwrap().unwrap();
    // SAFETY: the cache belongs to this pool.
    unsafe { flush_all_back(&pool, &mut [&mut a]) };
}

std::thread_local! {
    /// The damage the cache reported on this thread (the handler is a plain `fn`).
    static DAMAGE: core::cell::RefCell<Vec<crate::CheckError>> = const { core::cell::RefCell::new(Vec::new()) };
}

fn record_damage(e: crate::CheckError) {
    DAMAGE.with(|d| d.borrow_mut().push(e));
}

fn damage_seen() -> Vec<usize> {
    DAMAGE.with(|d| d.borrow_mut().drain(..).map(|e| e.at).collect())
}

/// `n` blocks of `size` bytes freed into a fresh cache (with the damage recorder) in order, so
/// that the last one freed is its class's first; the cache and the blocks.
fn cached(pool: &TestPool, size: usize, n: usize) -> (ThreadCache, Vec<NonNull<u8>>) {
    let mut cache = ThreadCache::new(KEY).on_damage(record_damage);
    let blocks: Vec<_> = (0..n).map(|_| pool.alloc(size, 16).unwrap()).collect();
    for &p in &blocks {
        // SAFETY: a live block of `size` bytes of this pool, given up.
        unsafe { pool.free_with_cache(&mut cache, p, size).unwrap() };
    }
    (cache, blocks)
}

/// A cached block's first word is not the next block's address: links are stored masked
/// (safe linking), so a program reading freed memory finds no heap address there.
#[test]
fn a_cached_blocks_link_is_stored_masked() {
    if !ENABLED {
        return;
    }
    let (pool, _) = pool(64 << 10);
    let (mut cache, blocks) = cached(&pool, 40, 2);
    // SAFETY: the block is cached (freed), its first word readable.
    let word = unsafe { blocks[1].cast::<usize>().read() };
    assert_ne!(word, blocks[0].as_ptr() as usize);
    assert_ne!(word, 0, "the last link is not a bare null either");
    // SAFETY: as above.
    let last = unsafe { blocks[0].cast::<usize>().read() };
    assert_ne!(last, 0);
    // The cache still hands them back, in order.
    assert_eq!(
        pool.alloc_with_cache(&mut cache, 40, 16).unwrap(),
        blocks[1]
    );
    assert_eq!(
        pool.alloc_with_cache(&mut cache, 40, 16).unwrap(),
        blocks[0]
    );
    assert!(damage_seen().is_empty());
    for &p in &blocks {
        // SAFETY: live blocks, given up once.
        unsafe { pool.free_with_cache(&mut cache, p, 40).unwrap() };
    }
    // SAFETY: the cache belongs to this pool.
    unsafe { flush_all_back(&pool, &mut [&mut cache]) };
}

/// A write after free onto the cached block (first), which may use a live block (second).
type Damage = fn(NonNull<u8>, NonNull<u8>);

/// Writes after free onto a cached block's link (overwritten, its high byte flipped as a
/// 32-byte overflow of its neighbour does, replaced by a plausible address) are reported with
/// the block's address when the cache takes the block, and the damaged list is never
/// followed: the next allocations come from the heap, and the heap stays sound.
#[test]
fn a_damaged_link_is_reported_when_taken_and_never_followed() {
    if !ENABLED {
        return;
    }
    let damages: [(&str, Damage); 3] = [
        ("link overwritten", |p, _| {
            // SAFETY: a freed block's first word, the program's misuse this test plays.
            unsafe { p.cast::<u64>().write(0x4141_4141_4141_4141) }
        }),
        ("high byte", |p, _| {
            // SAFETY: as above, the top byte of its first word.
            unsafe { p.add(7).write(p.add(7).read() ^ b'A') }
        }),
        ("a plausible address", |p, other| {
            // SAFETY: as above; the link made to point at a live block, unencoded.
            unsafe { p.cast::<usize>().write(other.as_ptr() as usize) }
        }),
    ];
    for (name, damage) in damages {
        let (pool, _) = pool(64 << 10);
        let live = pool.alloc(40, 16).unwrap();
        let (mut cache, blocks) = cached(&pool, 40, 3);
        // The list runs blocks[2], [1], [0]: blocks[1]'s link leads to blocks[0].
        damage(blocks[1], live);
        let mut taken = Vec::new();
        for _ in 0..3 {
            taken.push(pool.alloc_with_cache(&mut cache, 40, 16).unwrap());
        }
        assert_eq!(taken[0], blocks[2], "{name}: the sound head is handed out");
        assert_eq!(damage_seen(), [blocks[1].as_ptr() as usize], "{name}");
        assert!(
            !taken.contains(&blocks[1]),
            "{name}: the damaged block is never handed out"
        );
        assert!(!taken.contains(&live), "{name}: nor where its link points");
        assert!(!taken.contains(&blocks[0]), "{name}: nor what follows it");
        for p in taken.into_iter().chain([live]) {
            // SAFETY: live blocks, given up once.
            unsafe { pool.free_with_cache(&mut cache, p, 40).unwrap() };
        }
        // SAFETY: the cache belongs to this pool.
        unsafe { pool.flush_cache(&mut cache).unwrap() };
        pool.with_pool(|p| p.check()).unwrap().unwrap();
    }
}

/// A list ends where its count says: a last link forged to a live block with the secret (it
/// decodes to a sound address) is never followed, as the class is empty after its last block;
/// a flush, which checks every link against the count and every key, reports it, as it reports
/// a key overwritten.
#[test]
fn the_last_link_and_the_keys_are_checked_by_a_flush() {
    if !ENABLED {
        return;
    }
    let mask = crate::share::cache::link::link_mask(KEY);
    for word in [0, 1] {
        let (pool, _) = pool(64 << 10);
        let live = pool.alloc(40, 16).unwrap();
        let (mut cache, blocks) = cached(&pool, 40, 2);
        // The list runs blocks[1], [0]; blocks[0] ends it.
        let forge = |victim: NonNull<u8>| {
            let salt = (victim.as_ptr() as usize >> 12) ^ mask;
            // SAFETY: a freed block's first word, the misuse this test plays.
            unsafe { victim.cast::<usize>().write(live.as_ptr() as usize ^ salt) };
        };
        let victim = if word == 0 {
            forge(blocks[0]);
            let taken: Vec<_> = (0..3)
                .map(|_| pool.alloc_with_cache(&mut cache, 40, 16).unwrap())
                .collect();
            assert_eq!(&taken[..2], &[blocks[1], blocks[0]]);
            assert_ne!(taken[2], live, "nothing past the list's end is followed");
            assert!(damage_seen().is_empty());
            for p in taken {
                // SAFETY: live blocks, given up once, to the heap.
                unsafe { pool.free(p, 40).unwrap() };
            }
            // SAFETY: the cache belongs to this pool.
            unsafe { pool.flush_cache(&mut cache).unwrap() };
            let (again, blocks) = cached(&pool, 40, 2);
            cache = again;
            forge(blocks[0]);
            blocks[0]
        } else {
            // SAFETY: a freed block's second word, the misuse this test plays.
            unsafe { blocks[1].cast::<u64>().add(1).write(0x4141_4141_4141_4141) };
            blocks[1]
        };
        // SAFETY: the cache belongs to this pool.
        unsafe { pool.flush_cache(&mut cache).unwrap() };
        assert_eq!(damage_seen(), [victim.as_ptr() as usize], "word {word}");
        // SAFETY: a live block, given up once.
        unsafe { pool.free(live, 40).unwrap() };
        pool.with_pool(|p| p.check()).unwrap().unwrap();
    }
}

/// A flush (a thread's exit) that meets a damaged link reports it and stops there: the blocks
/// before it go back to the heap, the rest stay in use (leaked), and the heap stays sound.
#[test]
fn a_flush_stops_at_a_damaged_link() {
    if !ENABLED {
        return;
    }
    let (pool, _) = pool(64 << 10);
    let (mut cache, blocks) = cached(&pool, 40, 4);
    // The list runs blocks[3], [2], [1], [0]: damage the second.
    // SAFETY: a freed block's first word, the misuse this test plays.
    unsafe { blocks[2].cast::<u64>().write(0x4100_0000_0000_0000) };
    // SAFETY: the cache belongs to this pool.
    unsafe { pool.flush_cache(&mut cache).unwrap() };
    assert_eq!(damage_seen(), [blocks[2].as_ptr() as usize]);
    assert_eq!(cache.blocks(), 0, "the damaged list is dropped");
    let s = pool.stats().unwrap();
    let chunk = Class::of(40, 16).unwrap().chunk_bytes();
    assert_eq!(
        s.heap.in_use,
        3 * chunk,
        "blocks[2], [1], [0] are leaked, not followed"
    );
    pool.with_pool(|p| p.check()).unwrap().unwrap();
}

/// Hooks that prove every block leaving a cache through the pool's one proof, counting them,
/// and refuse them all when told to.
#[derive(Default)]
struct Proving {
    proven: core::cell::Cell<usize>,
    refuse: core::cell::Cell<bool>,
}

impl crate::Hooks for Proving {}

impl crate::PointerProof for Proving {
    unsafe fn free_cached_block(
        &self,
        heap: &mut InlineHeap,
        ptr: NonNull<u8>,
        size: usize,
    ) -> bool {
        self.proven.set(self.proven.get() + 1);
        if self.refuse.get() {
            return false;
        }
        // SAFETY: the caller's promise.
        unsafe { heap.free(ptr, size) }.is_ok()
    }
}

/// Every block a cache gives back to the heap, by a spill or a flush, is proven by the pool's
/// [`crate::PointerProof`], once; a block the proof refuses stays out of the heap.
#[test]
fn every_block_leaving_a_cache_goes_through_the_pools_proof() {
    let len = 256 << 10;
    let source = OneRegion::new(Arena::new(len + 64));
    let policy = Policy::new()
        .growth(Growth::Fixed(len))
        .reserve(Reserve::Bytes(len));
    let pool: SharedPool<InlineHeap, OneRegion, Proving> = SharedPool::new(Pool::with_hooks(
        InlineHeap::new(),
        source,
        policy,
        Proving::default(),
    ));
    let mut cache = ThreadCache::new(KEY);
    let c = Class::of(24, 8).unwrap();
    let n = 3 * ThreadCache::limit(c) as usize;
    let blocks: Vec<_> = (0..n)
        .map(|_| pool.alloc_with_cache(&mut cache, 24, 8).unwrap())
        .collect();
    for &p in &blocks {
        // SAFETY: live 24-byte blocks, each given up once.
        unsafe { pool.free_with_cache(&mut cache, p, 24).unwrap() };
    }
    let proven = || pool.with_pool(|p| p.hooks().proven.get()).unwrap();
    let spilled = proven();
    if ENABLED {
        assert!(pool.stats().unwrap().cache.spills >= 1);
        assert!(spilled >= 1, "a spill's blocks are proven");
    }
    let p = pool.alloc_with_cache(&mut cache, 24, 8).unwrap();
    pool.with_pool(|p| p.hooks().refuse.set(true)).unwrap();
    // SAFETY: a live 24-byte block, given up once.
    unsafe { pool.free_with_cache(&mut cache, p, 24).unwrap() };
    let held = cache.blocks();
    let in_use = pool.stats().unwrap().heap.in_use;
    // SAFETY: the cache belongs to this pool.
    unsafe { pool.flush_cache(&mut cache).unwrap() };
    assert_eq!(proven(), spilled + held, "each block flushed proven once");
    if ENABLED {
        assert!(held >= 1);
    }
    assert_eq!(
        pool.stats().unwrap().heap.in_use,
        in_use,
        "the refused blocks stay out of the heap"
    );
}
