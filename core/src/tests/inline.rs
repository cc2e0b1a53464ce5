//! Inline heap: smoke tests over a heap-allocated arena.

extern crate std;
use std::vec::Vec;

use core::ptr::NonNull;

use crate::{BlockError, Error, HostGranule, InlineHeap, RegionSource, Stats, Tally};

/// A granule-aligned arena that outlives the heap using it.
pub(crate) struct Arena {
    buf: Vec<u128>,
}

impl Arena {
    pub fn new(bytes: usize) -> Self {
        Arena {
            buf: std::vec![0u128; bytes / 16],
        }
    }
    pub fn ptr(&mut self) -> *mut u8 {
        self.buf.as_mut_ptr().cast()
    }
    /// The arena's address without a mutable borrow (the pool tests; not built under loom).
    #[cfg_attr(loom, allow(dead_code))]
    pub fn ptr_addr(&self) -> usize {
        self.buf.as_ptr() as usize
    }
    pub fn len(&self) -> usize {
        self.buf.len() * 16
    }
}

/// One region: the whole arena, handed out once.
pub(crate) struct OneRegion {
    arena: Arena,
    out: bool,
    /// The region handed out: base and length.
    pub(crate) handed: (usize, usize),
}

impl OneRegion {
    pub(crate) fn new(arena: Arena) -> Self {
        OneRegion {
            arena,
            out: false,
            handed: (0, 0),
        }
    }
}

// SAFETY: the arena outlives the pool (it moves into it) and is handed out once.
unsafe impl RegionSource for OneRegion {
    type Base = NonNull<u8>;
    fn addr(b: NonNull<u8>) -> usize {
        b.addr().get()
    }
    fn granularity(&self) -> usize {
        4096
    }
    fn obtain(&mut self, min: usize) -> Result<(NonNull<u8>, usize), Error> {
        let len = self.arena.len() & !4095;
        if self.out || min > len {
            return Err(Error::OutOfMemory);
        }
        self.out = true;
        let p = self.arena.ptr();
        self.handed = (p.addr(), len);
        Ok((NonNull::new(p).unwrap(), len))
    }
    unsafe fn give_back(&mut self, _: NonNull<u8>, _: usize) {
        self.out = false;
    }
}

#[test]
fn alloc_free_roundtrip() {
    let mut a = Arena::new(1 << 18);
    let mut h = InlineHeap::new();
    // SAFETY: the arena outlives the heap and nothing else uses its memory.
    unsafe { h.add_region(a.ptr(), a.len()).unwrap() };
    h.check().unwrap();
    let whole = h.stats().free;
    let mut ps = Vec::new();
    let n = if cfg!(miri) { 60 } else { 200 };
    for i in 1..n {
        let p = h.alloc(i * 7, 16).unwrap();
        assert_eq!(p.as_ptr() as usize % 16, 0);
        // SAFETY: the block is a live allocation of at least that many bytes.
        unsafe { p.as_ptr().write_bytes(i as u8, i * 7) };
        ps.push((p, i * 7));
        h.check().unwrap();
    }
    for (i, &(p, n)) in ps.iter().enumerate().rev().step_by(2) {
        // SAFETY: the block is a live allocation of at least that many bytes.
        let s = unsafe { core::slice::from_raw_parts(p.as_ptr(), n) };
        assert!(s.iter().all(|&b| b == (i + 1) as u8));
        // SAFETY: the pointer is a live allocation of this heap, not used after it is freed.
        unsafe { h.free(p, n).unwrap() };
        h.check().unwrap();
    }
    for (i, &(p, n)) in ps.iter().enumerate().rev().skip(1).step_by(2) {
        // SAFETY: the block is a live allocation of at least that many bytes.
        let s = unsafe { core::slice::from_raw_parts(p.as_ptr(), n) };
        assert!(s.iter().all(|&b| b == (i + 1) as u8));
        // SAFETY: the pointer is a live allocation of this heap, not used after it is freed.
        unsafe { h.free(p, n).unwrap() };
        h.check().unwrap();
    }
    let st = h.stats();
    assert_eq!(st.free_chunks, 1);
    assert_eq!(st.free, whole);
    assert_eq!(st.in_use, 0);
}

#[test]
fn aligned_allocs() {
    let mut a = Arena::new(1 << 18);
    let mut h = InlineHeap::new();
    // SAFETY: the arena outlives the heap and nothing else uses its memory.
    unsafe { h.add_region(a.ptr(), a.len()).unwrap() };
    let mut ps = Vec::new();
    for shift in 4..13 {
        for size in [1usize, 17, 100, 5000] {
            let align = 1usize << shift;
            let p = h.alloc(size, align).unwrap();
            assert_eq!(p.as_ptr() as usize % align, 0);
            h.check().unwrap();
            ps.push((p, size));
        }
    }
    for (p, n) in ps {
        // SAFETY: the pointer is a live allocation of this heap, not used after it is freed.
        unsafe { h.free(p, n).unwrap() };
        h.check().unwrap();
    }
    assert_eq!(h.stats().free_chunks, 1);
}

#[test]
fn bad_inputs() {
    bad_inputs_on(InlineHeap::new(), |h| Some(h.stats()));
}

/// The same refusals from a heap without statistics: the counting is all that differs.
#[test]
fn bad_inputs_without_stats() {
    bad_inputs_on(InlineHeap::without_stats(), |_| None);
    for g in [0, 8, 24, 1 << 31] {
        assert_eq!(
            InlineHeap::with_granule_without_stats(g).err(),
            Some(Error::BadGranule),
            "granule {g}"
        );
    }
    let mut a = Arena::new(1 << 16);
    let mut h = InlineHeap::with_granule_without_stats(64).unwrap();
    let lead = a.ptr().align_offset(64);
    // SAFETY: the arena outlives the heap and nothing else uses its memory; the region starts
    // at the arena's first 64-aligned byte and ends inside it.
    unsafe { h.add_region(a.ptr().add(lead), a.len() - lead).unwrap() };
    let p = h.alloc(100, 64).unwrap();
    // SAFETY: `p` is live and not used after the free; the second free is refused.
    unsafe {
        h.free_checked(p, 100).unwrap();
        assert_eq!(h.free_checked(p, 100), Err(Error::DoubleFree));
    }
    h.check().unwrap();
}

/// Every refusal of bad input on `h`, whose statistics `stats` reads where it keeps them.
fn bad_inputs_on<K: Tally>(
    mut h: InlineHeap<HostGranule, K>,
    stats: fn(&InlineHeap<HostGranule, K>) -> Option<Stats>,
) {
    let mut a = Arena::new(4096);
    assert_eq!(h.alloc(8, 8), Err(Error::OutOfMemory));
    // SAFETY: the arena outlives the heap and nothing else uses its memory.
    unsafe {
        assert_eq!(
            h.add_region(core::ptr::null_mut(), 4096),
            Err(Error::RegionMisaligned)
        );
        assert_eq!(
            h.add_region(a.ptr().add(8), 1024),
            Err(Error::RegionMisaligned)
        );
        assert_eq!(h.add_region(a.ptr(), 40), Err(Error::RegionTooSmall));
        h.add_region(a.ptr(), 2048).unwrap();
        assert_eq!(
            h.add_region(a.ptr().add(1024), 1024),
            Err(Error::RegionOverlap)
        );
    }
    assert_eq!(h.alloc(0, 8), Err(Error::ZeroSize));
    assert_eq!(h.alloc(8, 3), Err(Error::BadAlign));
    assert_eq!(h.alloc(8, 0), Err(Error::BadAlign));
    assert_eq!(h.alloc(usize::MAX, 8), Err(Error::SizeOverflow));
    assert_eq!(h.alloc(isize::MAX as usize, 8), Err(Error::SizeOverflow));
    assert_eq!(h.alloc(8, 1 << 62), Err(Error::OutOfMemory));
    assert_eq!(h.alloc(8, 1 << 63), Err(Error::SizeOverflow));
    assert_eq!(h.alloc(4096, 8), Err(Error::OutOfMemory));
    let p = h.alloc(100, 8).unwrap();
    // SAFETY: pointers come from this heap's arena; freed ones are not used again.
    unsafe {
        assert_eq!(h.free_checked(p.add(16), 100), Err(Error::ForeignPointer));
        assert_eq!(h.free_checked(p, 300), Err(Error::WrongSize));
        h.free_checked(p, 100).unwrap();
        assert_eq!(h.free_checked(p, 100), Err(Error::DoubleFree));
    }
    h.check().unwrap();
    // Growth: the second half joins the first region and the whole is one free chunk. One
    // granule is too little to stand as a chunk of its own.
    // SAFETY: the arena outlives the heap and nothing else uses its memory.
    unsafe {
        let p = h.alloc(2000, 16).unwrap(); // the whole region: the growth stands alone
        assert_eq!(h.extend_region(a.ptr(), 16), Err(Error::RegionTooSmall));
        assert_eq!(
            h.extend_region(a.ptr().add(16), 32),
            Err(Error::UnknownRegion)
        );
        h.extend_region(a.ptr(), 32).unwrap();
        h.check().unwrap();
        h.free(p, 2000).unwrap();
        h.extend_region(a.ptr(), 2048 - 32).unwrap();
    }
    h.check().unwrap();
    if let Some(st) = stats(&h) {
        assert_eq!((st.free_chunks, st.refused_frees), (1, 3));
    }
    let big = h.alloc(3500, 16).unwrap();
    // SAFETY: the pointer is a live allocation of this heap, not used after it is freed.
    unsafe { h.free(big, 3500).unwrap() };
    assert_eq!(h.trim(|_, _| {}), 1);
    if let Some(st) = stats(&h) {
        assert_eq!(st.managed, 0);
    }
    assert_eq!(h.alloc(8, 8), Err(Error::OutOfMemory));
    h.check().unwrap();
}

#[test]
fn realloc_shrinking_out_of_the_tries_moves_into_the_best_hole() {
    let mut a = Arena::new(1 << 20);
    let mut h = InlineHeap::new();
    // SAFETY: the arena outlives the heap and nothing else uses its memory.
    unsafe { h.add_region(a.ptr(), a.len()).unwrap() };
    let small_hole = h.alloc(20_000, 16).unwrap();
    let sep1 = h.alloc(16, 16).unwrap();
    let hole = h.alloc(40_000, 16).unwrap();
    let sep2 = h.alloc(16, 16).unwrap();
    let little = h.alloc(1000, 16).unwrap();
    let sep3 = h.alloc(16, 16).unwrap();
    let big = h.alloc(100_000, 16).unwrap();
    let sep4 = h.alloc(16, 16).unwrap();
    // SAFETY: pointers come from this heap's arena; freed ones are not used again.
    unsafe {
        h.free(small_hole, 20_000).unwrap();
        h.free(hole, 40_000).unwrap();
        // A block of a listed size stays in place however far it shrinks, holes or not.
        let q = h.realloc(little, 1000, 16, 50).unwrap();
        assert_eq!(q, little);
        // A block above the listed sizes shrinking to a listed one (30 000 bytes are 1876
        // granules): into the smallest hole that takes it, not the 20 000-byte one.
        big.as_ptr().write_bytes(0xCD, 30_000);
        let r = h.realloc(big, 100_000, 16, 30_000).unwrap();
        assert_eq!(r, hole, "moved into the 40 000-byte hole");
        assert!(core::slice::from_raw_parts(r.as_ptr(), 30_000)
            .iter()
            .all(|&b| b == 0xCD));
        h.check().unwrap();
        // The old chunk was freed whole.
        let again = h.alloc(100_000, 16).unwrap();
        assert_eq!(again, big, "the old chunk is free again");
        // No binned chunk fits (the holes left are 20 000 bytes and the first one's rest):
        // in place, and the top is not taken for it.
        let s = h.realloc(again, 100_000, 16, 30_000).unwrap();
        assert_eq!(s, again);
        // To more than the listed sizes (34 000 bytes are 2126 granules): in place, though the
        // tail the last shrink freed would take it.
        let big2 = h.alloc(100_000, 16).unwrap();
        let t = h.realloc(big2, 100_000, 16, 34_000).unwrap();
        assert_eq!(t, big2);
        // An alignment above the granule: in place, whatever holes there are.
        let aligned = h.alloc(100_000, 256).unwrap();
        let u = h.realloc(aligned, 100_000, 256, 50).unwrap();
        assert_eq!(u, aligned);
        h.check().unwrap();
        for (ptr, size) in [
            (r, 30_000),
            (q, 50),
            (s, 30_000),
            (t, 34_000),
            (u, 50),
            (sep1, 16),
            (sep2, 16),
            (sep3, 16),
            (sep4, 16),
        ] {
            h.free(ptr, size).unwrap();
        }
    }
    h.check().unwrap();
    assert_eq!(h.stats().in_use, 0);
}

#[test]
fn realloc_in_place_then_moves() {
    let mut a = Arena::new(1 << 14);
    let mut h = InlineHeap::new();
    // SAFETY: the arena outlives the heap and nothing else uses its memory.
    unsafe { h.add_region(a.ptr(), a.len()).unwrap() };
    let p = h.alloc(100, 16).unwrap();
    // SAFETY: pointers come from this heap's arena; freed ones are not used again.
    unsafe {
        p.as_ptr().write_bytes(0xAB, 100);
        let q = h.realloc(p, 100, 16, 1000).unwrap();
        assert_eq!(p, q, "grows in place into the free successor");
        let q2 = h.realloc(q, 1000, 16, 50).unwrap();
        assert_eq!(q, q2, "shrinks in place");
        h.check().unwrap();
        let blocker = h.alloc(64, 16).unwrap();
        let r = h.realloc(q2, 50, 16, 500).unwrap();
        assert_ne!(r, q2);
        assert!(core::slice::from_raw_parts(r.as_ptr(), 50)
            .iter()
            .all(|&b| b == 0xAB));
        h.check().unwrap();
        h.free(blocker, 64).unwrap();
        h.free(r, 500).unwrap();
    }
    h.check().unwrap();
    assert_eq!(h.stats().free_chunks, 1);
}

#[test]
fn stats_count_final_chunk_sizes() {
    let mut a = Arena::new(1 << 16);
    let mut h = InlineHeap::new();
    // SAFETY: the arena outlives the heap and nothing else uses its memory.
    unsafe { h.add_region(a.ptr(), a.len()).unwrap() };
    let managed = h.stats().managed;
    // 100 bytes + one word of tag, rounded to 16: a 112-byte chunk.
    let p = h.alloc(100, 16).unwrap();
    let s = h.stats();
    assert_eq!(
        (s.in_use, s.peak_in_use, s.live, s.allocs),
        (112, 112, 1, 1)
    );
    assert_eq!(s.free + s.in_use, managed);
    assert_eq!(s.largest_free, s.free);
    assert_eq!(s.fragmentation(), 0.0);
    // Growing in place into the free successor counts only the new size.
    // SAFETY: the pointer is a live allocation of this heap, not used after it is freed.
    let p = unsafe { h.realloc(p, 100, 16, 1000).unwrap() };
    let s = h.stats();
    assert_eq!(
        (s.in_use, s.peak_in_use, s.reallocs_in_place),
        (1008, 1008, 1)
    );
    let q = h.alloc(40, 16).unwrap();
    // SAFETY: the pointer is a live allocation of this heap, not used after it is freed.
    unsafe { h.free(p, 1000).unwrap() };
    let s = h.stats();
    assert_eq!((s.in_use, s.free_chunks, s.frees), (48, 2, 1));
    assert!(s.fragmentation() > 0.0);
    // SAFETY: the pointer is a live allocation of this heap, not used after it is freed.
    unsafe { h.free(q, 40).unwrap() };
    assert_eq!(h.stats().peak_in_use, 1056);
    h.check().unwrap();
}

#[test]
fn inline_region_errors() {
    assert_eq!(InlineHeap::with_granule(8).err(), Some(Error::BadGranule));
    assert_eq!(InlineHeap::with_granule(48).err(), Some(Error::BadGranule));
    let mut a = Arena::new(1 << 14);
    let mut h = InlineHeap::with_granule(64).unwrap();
    assert_eq!(h.granule(), 64);
    let base = a.ptr().wrapping_add(a.ptr().align_offset(64));
    // SAFETY: the arena outlives the heap and nothing else uses its memory.
    unsafe {
        assert_eq!(
            h.add_region(base.add(16), 4096),
            Err(Error::RegionMisaligned)
        );
        assert_eq!(
            h.add_region(core::ptr::without_provenance_mut(usize::MAX), 4096),
            Err(Error::RegionMisaligned)
        );
    }
    // SAFETY: the arena outlives the heap and nothing else uses its memory.
    unsafe { h.add_region(base, 8192).unwrap() };
    let p = h.alloc(1, 1).unwrap();
    assert_eq!(p.as_ptr() as usize % 64, 0);
    assert_eq!(h.remove_region(base), Err(Error::RegionInUse));
    assert_eq!(
        h.remove_region(base.wrapping_add(64)),
        Err(Error::UnknownRegion)
    );
    // SAFETY: the pointer is a live allocation of this heap, not used after it is freed.
    unsafe { h.free(p, 1).unwrap() };
    // SAFETY: a double free of a pointer from this heap is detected from its tag, not undefined.
    assert_eq!(unsafe { h.free(p, 1) }, Err(Error::DoubleFree));
    let (b, len) = h.remove_region(base).unwrap();
    assert_eq!((b.as_ptr(), len), (base, 8192));
    assert_eq!(
        h.stats(),
        crate::Stats {
            frees: 1,
            allocs: 1,
            peak_in_use: 64,
            refused_frees: 1,
            ..Default::default()
        }
    );
    h.check().unwrap();
}

/// A moving realloc copies no more than the old chunk holds, even when told a larger old size
/// (the checked build refuses the size instead).
#[test]
fn realloc_never_copies_past_the_old_chunk() {
    let mut a = Arena::new(1 << 14);
    let mut h = InlineHeap::new();
    // SAFETY: the arena outlives the heap and nothing else uses its memory.
    unsafe { h.add_region(a.ptr(), 4096).unwrap() };
    let p = h.alloc(16, 16).unwrap();
    let _q = h.alloc(16, 16).unwrap();
    // SAFETY: the pointer is a live allocation of this heap, not used after it is freed.
    let r = unsafe { h.realloc(p, 3000, 16, 3000) };
    if cfg!(feature = "checked") {
        assert_eq!(r, Err(Error::WrongSize));
    } else {
        assert_ne!(r.unwrap(), p);
    }
    h.check().unwrap();
}

/// The checked size query proves a pointer in every build: a live payload gives what
/// `usable_size` gives, a freed one `DoubleFree`, a pointer inside a block or outside the heap
/// `ForeignPointer`; nothing is counted as refused and the heap stays intact.
#[test]
fn checked_usable_size_proves_the_pointer() {
    let mut a = Arena::new(1 << 16);
    let mut h = InlineHeap::new();
    // SAFETY: the arena outlives the heap and nothing else uses its memory.
    unsafe { h.add_region(a.ptr(), a.len()).unwrap() };
    let p = h.alloc(100, 16).unwrap();
    let q = h.alloc(3000, 64).unwrap();
    let r = h.alloc(40, 16).unwrap();
    for (block, asked) in [(p, 100), (q, 3000), (r, 40)] {
        // SAFETY: a live allocation of this heap.
        let plain = unsafe { h.usable_size(block) }.unwrap();
        assert_eq!(h.checked_usable_size(block), Ok(plain));
        assert!(plain >= asked);
    }
    // SAFETY: a live allocation, freed once and not used again.
    unsafe { h.free(q, 3000).unwrap() };
    assert_eq!(
        h.checked_usable_size(q),
        Err(BlockError::Refused(Error::DoubleFree))
    );
    // SAFETY: `p` is a live block of at least 100 bytes, so `p + 16` is inside it.
    let inside = unsafe { p.add(16) };
    assert_eq!(
        h.checked_usable_size(inside),
        Err(BlockError::Refused(Error::ForeignPointer))
    );
    let mut other = [0u128; 4];
    let outside = core::ptr::NonNull::new(other.as_mut_ptr().cast::<u8>()).unwrap();
    assert_eq!(
        h.checked_usable_size(outside),
        Err(BlockError::Refused(Error::ForeignPointer))
    );
    assert_eq!(h.stats().refused_frees, 0);
    h.check().unwrap();
}

/// The heap's own state is the size `docs/heap.md` gives (37 KiB inline, 39 KiB shared, 20 KiB
/// detached), most of it the two ends of each per-size list; a change to the bins shows here.
#[cfg(all(target_pointer_width = "64", not(loom)))]
#[test]
fn the_heaps_own_state_is_the_documented_size() {
    use core::mem::size_of;
    let kib = |bytes: usize| bytes.div_ceil(1024);
    assert_eq!(kib(size_of::<InlineHeap>()), 37);
    // The counters are nine words; without them the heap is that much smaller.
    assert_eq!(
        size_of::<InlineHeap>() - size_of::<InlineHeap<HostGranule, crate::NoCounters>>(),
        size_of::<crate::Counters>()
    );
    assert_eq!(size_of::<crate::Counters>(), 9 * 8);
    assert_eq!(kib(size_of::<crate::GlobalHeap>()), 39);
    assert_eq!(
        kib(size_of::<crate::DetachedHeap<&mut [crate::Record]>>()),
        20
    );
}

#[test]
fn the_victim_serves_listed_requests_before_the_best_fit() {
    let mut a = Arena::new(1 << 16);
    let mut h = InlineHeap::new();
    // SAFETY: the arena outlives the heap and nothing else uses its memory.
    unsafe { h.add_region(a.ptr(), a.len()).unwrap() };
    // Chunk sizes in granules of 16 bytes (a size plus its 8-byte head, rounded up): 1000 B
    // is 63, 552 B 35, 400 B 26, 392 B 25.
    let x = h.alloc(1000, 16).unwrap();
    let s1 = h.alloc(16, 16).unwrap();
    let z = h.alloc(400, 16).unwrap();
    let s2 = h.alloc(16, 16).unwrap();
    // SAFETY: pointers come from this heap's arena; freed ones are not used again.
    unsafe {
        h.free(x, 1000).unwrap();
        h.free(z, 400).unwrap();
        // Only `x` fits: carved, and its rest (28 granules) becomes the victim.
        let p1 = h.alloc(552, 16).unwrap();
        assert_eq!(p1, x);
        h.check().unwrap();
        // Exact best fit would take `z` (26 granules); no chunk of exactly 25 is free, so the
        // victim serves, right after `p1`.
        let p2 = h.alloc(392, 16).unwrap();
        assert_eq!(p2.as_ptr() as usize, x.as_ptr() as usize + 35 * 16);
        h.check().unwrap();
        // A chunk of exactly the size comes before the victim.
        let p3 = h.alloc(400, 16).unwrap();
        assert_eq!(p3, z);
        // A free whose only free neighbour is the victim (its 3-granule rest) merges into it,
        // and the victim serves the same request again from there.
        h.free(p2, 392).unwrap();
        h.check().unwrap();
        let p4 = h.alloc(392, 16).unwrap();
        assert_eq!(p4, p2);
        h.check().unwrap();
        for (p, size) in [(p1, 552), (p3, 400), (p4, 392), (s1, 16), (s2, 16)] {
            h.free(p, size).unwrap();
            h.check().unwrap();
        }
    }
    assert_eq!(h.stats().in_use, 0);
    assert_eq!(h.stats().free_chunks, 1);
}

#[test]
fn both_granule_kinds_compute_the_same_sizes() {
    use crate::algo::tags::Tags;

    let host = InlineHeap::new();
    let any = InlineHeap::with_granule(16).unwrap();
    assert_eq!(host.heap.tags().geometry(), any.heap.tags().geometry());
    assert_eq!(host.granule(), 16);
}
