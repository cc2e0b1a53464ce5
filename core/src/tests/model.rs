//! Property tests against the reference model ([`crate::model`]).
//!
//! The model knows nothing of bins, tries or tags: it keeps every chunk of every region in an
//! ordered map and predicts, for each request, the chunk the policy must pick: the smallest
//! free chunk that fits, and among equal sizes the one filed into the free set earliest. Random
//! sequences of alloc / aligned alloc / free / realloc / add region / remove region run on
//! both tag placements, through the same adapter the fuzz targets, the trace replay and the
//! benchmarks use ([`crate::model::Adapter`]); after every step the heap's result must equal the model's prediction,
//! `check()` must pass, live allocations must not overlap, alignment must hold, and (inline)
//! the bytes written into each live allocation must still be there.

extern crate std;
use core::ptr::NonNull;
use std::vec::Vec;

use proptest::prelude::*;

use super::inline::Arena;
use crate::model::{Adapter, DetachedAdapter, InlineAdapter, Memory, Model};
use crate::{BinShape, DetachedHeap, HostGranule, InlineHeap, Record, Tally};

// SAFETY: the arena's buffer is valid for its length for as long as the arena lives, and the
// tests hand it to one heap only.
unsafe impl Memory for Arena {
    fn ranges(&mut self) -> impl Iterator<Item = (NonNull<u8>, usize)> {
        let len = self.len();
        NonNull::new(self.ptr()).map(|p| (p, len)).into_iter()
    }
}

/// A growable store for the detached subject when the `alloc` feature (which provides one) is
/// off.
#[cfg(not(feature = "alloc"))]
impl crate::RecordStore for Vec<Record> {
    fn records(&self) -> &[Record] {
        self
    }
    fn records_mut(&mut self) -> &mut [Record] {
        self
    }
    fn grow(&mut self) -> bool {
        let n = self.len().max(8);
        self.resize(self.len() + n, Record::VACANT);
        true
    }
}

/// Where the detached subject's address space starts.
const DETACHED_BASE: usize = 1 << 40;

/// Fills the first `len` bytes of `h` with `byte`, where the placement keeps them in memory.
fn fill<S: Adapter>(h: &S::H, len: usize, byte: u8) {
    if let Some(p) = S::bytes(h) {
        // SAFETY: `h` is a live block of at least `len` bytes that only the test uses.
        unsafe { p.as_ptr().write_bytes(byte, len) }
    }
}

/// Panics unless the first `len` bytes of `h` all hold `byte` (where they are in memory).
fn verify<S: Adapter>(h: &S::H, len: usize, byte: u8) {
    if let Some(p) = S::bytes(h) {
        // SAFETY: as in `fill`.
        let s = unsafe { core::slice::from_raw_parts(p.as_ptr(), len) };
        // Compared a row at a time as slices (a `memcmp`), which Miri runs natively rather
        // than interpreting a loop per byte: the dense-trie tests keep blocks of up to 72 KB.
        let row = [byte; 512];
        assert!(
            s.chunks(row.len()).all(|c| c == &row[..c.len()]),
            "contents of a live allocation changed"
        );
    }
}

/// Frees the live block `h` of `size` bytes, through the checked free.
fn free<S: Adapter>(subject: &mut S, h: S::H, size: usize) {
    // SAFETY: `h` is live (the driver frees each allocation once) and unused afterwards.
    unsafe { subject.free_checked(h, size) }.unwrap();
}

#[derive(Clone, Debug)]
enum Op {
    Alloc { size: usize, align_log2: u32 },
    Free { pick: usize },
    Realloc { pick: usize, size: usize },
    AddRegion { gap: usize, len: usize },
    ExtendRegion { pick: usize, len: usize },
    RemoveRegion { pick: usize },
}

fn size_strategy() -> impl Strategy<Value = usize> + Clone {
    prop_oneof![
        8 => 1usize..=64,
        4 => 1usize..=1100,
        2 => 1usize..=20_000,
        1 => Just(0usize),
        1 => 60_000usize..=300_000,
        1 => prop_oneof![Just(usize::MAX), Just(isize::MAX as usize), Just(usize::MAX - 15)],
    ]
}

/// Sizes that land in the logarithmic bins, many distinct ones per bin, so the size table and
/// the tries are dense and every branch of the best-fit search is taken.
fn large_size_strategy() -> impl Strategy<Value = usize> + Clone {
    prop_oneof![
        // Per-size lists up to 2047 granules: 32 KiB at the host granule, 2047 bytes at the
        // 1-byte granule of the detached dense test, whose size table (up to 16383 bytes) and
        // tries these sizes reach.
        4 => 1040usize..=4096,
        2 => 4096usize..=40_000,
        // The size table at the host granule: 2048 to 16383 granules (32 KiB to 256 KiB),
        // many sizes to a chain of its 256.
        3 => 32_800usize..=72_000,
        1 => 1usize..=64,
    ]
}

fn op_strategy(sizes: impl Strategy<Value = usize> + Clone + 'static) -> impl Strategy<Value = Op> {
    prop_oneof![
        10 => (sizes.clone(), prop_oneof![6 => 0u32..=4, 2 => 5u32..=12, 1 => Just(3u32)])
            .prop_map(|(size, align_log2)| Op::Alloc { size, align_log2 }),
        8 => any::<usize>().prop_map(|pick| Op::Free { pick }),
        3 => (any::<usize>(), sizes).prop_map(|(pick, size)| Op::Realloc { pick, size }),
        1 => (prop_oneof![Just(0usize), 1usize..=4], 1usize..=16)
            .prop_map(|(gap, len)| Op::AddRegion { gap: gap * 256, len: len * 4096 }),
        1 => (any::<usize>(), 1usize..=8)
            .prop_map(|(pick, len)| Op::ExtendRegion { pick, len: len * 2048 }),
        1 => any::<usize>().prop_map(|pick| Op::RemoveRegion { pick }),
    ]
}

/// Address space the test carves regions from.
const SPACE: usize = 1 << 20;

/// Runs `ops` on `subject`, whose address space (`SPACE` bytes) starts at `base`, and on the
/// model beside it.
fn run<S: Adapter>(subject: &mut S, base: usize, first_region: usize, ops: &[Op]) {
    let geo = subject.geometry();
    let mut model = Model::new(geo);
    let mut cursor = 0usize;
    let mut region_offsets: Vec<usize> = Vec::new();
    // Live allocations: (address, handle, size, fill byte).
    let mut marks = crate::StepMarks::default();
    let mut live: Vec<(usize, S::H, usize, u8)> = Vec::new();
    let mut byte = 0u8;
    // Start with one region so that allocations have somewhere to go.
    let ops = core::iter::once(Op::AddRegion {
        gap: 0,
        len: first_region,
    })
    .chain(ops.iter().cloned());
    for op in ops {
        match op {
            Op::Alloc { size, align_log2 } => {
                let align = 1usize << align_log2;
                let want = model.alloc(size, align);
                let got = subject.alloc(size, align);
                match (want, got) {
                    (Ok(w), Ok(h)) => {
                        let a = S::addr(&h);
                        assert_eq!(
                            a, w,
                            "alloc({size}, {align}) picked another chunk than best fit"
                        );
                        assert_eq!(a % align, 0);
                        byte = byte.wrapping_add(1);
                        fill::<S>(&h, size, byte);
                        live.push((a, h, size, byte));
                    }
                    (Err(we), Err(ge)) => assert_eq!(we, ge),
                    (w, g) => panic!(
                        "alloc({size}, {align}): model {w:?}, heap {:?}",
                        g.map(|h| S::addr(&h))
                    ),
                }
            }
            Op::Free { pick } => {
                if live.is_empty() {
                    continue;
                }
                let (a, h, size, b) = live.swap_remove(pick % live.len());
                verify::<S>(&h, size, b);
                free(subject, h, size);
                model.free(a);
            }
            Op::Realloc { pick, size } => {
                if live.is_empty() {
                    continue;
                }
                let i = pick % live.len();
                let (a, h, old, b) = live[i];
                verify::<S>(&h, old, b);
                // The inline heap's realloc moves a block shrinking out of the tries;
                // the detached subject resizes in place or moves, as a device owner would.
                let want = match S::INLINE {
                    true => model.realloc(a, size, 16),
                    false => model.resize_or_move(a, size, 16),
                };
                // SAFETY: `h` is live with `old` bytes; on success only the new handle is kept.
                let got = unsafe { subject.realloc(h, old, 16, size) };
                match (want, got) {
                    (Ok(w), Ok(nh)) => {
                        let na = S::addr(&nh);
                        assert_eq!(
                            na,
                            w.unwrap_or(a),
                            "realloc picked another place than the model"
                        );
                        verify::<S>(&nh, old.min(size), b);
                        fill::<S>(&nh, size, b);
                        live[i] = (na, nh, size, b);
                    }
                    (Err(we), Err(ge)) => assert_eq!(we, ge),
                    (w, g) => panic!("realloc: model {w:?}, heap {:?}", g.map(|h| S::addr(&h))),
                }
            }
            Op::AddRegion { gap, len } => {
                if cursor + gap + len > SPACE {
                    continue;
                }
                let off = cursor + gap;
                let want = model.add_region(base + off, len);
                let got = subject.add_region(base + off, len);
                assert_eq!(want, got, "add_region({off}, {len})");
                if got.is_ok() {
                    cursor = off + len;
                    region_offsets.push(off);
                }
            }
            Op::ExtendRegion { pick, len } => {
                if region_offsets.is_empty() {
                    continue;
                }
                let off = region_offsets[pick % region_offsets.len()];
                let end = model.region_end(base + off).unwrap() - base;
                if end + len > SPACE {
                    continue;
                }
                let want = model.extend_region(base + off, len);
                let got = subject.extend_region(base + off, len);
                assert_eq!(want, got, "extend_region({off}, {len})");
                if got.is_ok() {
                    cursor = cursor.max(end + len);
                }
            }
            Op::RemoveRegion { pick } => {
                if region_offsets.is_empty() {
                    continue;
                }
                let i = pick % region_offsets.len();
                let off = region_offsets[i];
                let want = model.remove_region(base + off);
                let got = subject.remove_region(base + off);
                assert_eq!(want, got, "remove_region({off})");
                if got.is_ok() {
                    region_offsets.swap_remove(i);
                }
            }
        }
        subject.check().unwrap();
        subject.check_step(&mut marks).unwrap();
        let mut spans: Vec<(usize, usize)> = live.iter().map(|&(a, _, s, _)| (a, s)).collect();
        spans.sort_unstable();
        for w in spans.windows(2) {
            assert!(w[0].0 + w[0].1 <= w[1].0, "live allocations overlap");
        }
    }
    // Free everything: each region is one free chunk again, and a whole-region allocation fits.
    for (a, h, size, b) in live.drain(..) {
        verify::<S>(&h, size, b);
        free(subject, h, size);
        model.free(a);
        subject.check().unwrap();
        subject.check_step(&mut marks).unwrap();
    }
    assert!(model.chunks().values().all(|c| c.free));
    assert_eq!(
        model.chunks().len(),
        model.regions().count(),
        "a region is not one free chunk"
    );
    for c in model.chunks().values() {
        let size = c.granules * geo.granule() - geo.head();
        let h = subject
            .alloc(size, 1)
            .expect("a whole-region allocation must fit");
        assert!(model.chunks().contains_key(&S::addr(&h)));
        free(subject, h, size);
    }
    subject.check().unwrap();
}

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: if cfg!(miri) { 4 } else { 96 },
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

fn ops_strategy(
    sizes: impl Strategy<Value = usize> + Clone + 'static,
) -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(op_strategy(sizes), 1..if cfg!(miri) { 24 } else { 400 })
}

/// An inline heap over an arena of the test's address space.
fn inline_subject() -> (InlineAdapter<Arena>, usize) {
    inline_subject_of(InlineHeap::new())
}

/// `heap` (with or without statistics, of either bin shape) over an arena of the test's
/// address space.
fn inline_subject_of<K: Tally, B: BinShape>(
    heap: InlineHeap<HostGranule, K, B>,
) -> (InlineAdapter<Arena, HostGranule, K, B>, usize) {
    let mut arena = Arena::new(SPACE);
    let base = arena.ptr().addr();
    (InlineAdapter::new(heap, arena), base)
}

/// A detached heap with this granule over the test's address space.
fn detached_subject(granule: usize) -> DetachedAdapter<Vec<Record>> {
    DetachedAdapter::new(DetachedHeap::new(Vec::new(), granule).unwrap())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn inline_matches_model(ops in ops_strategy(size_strategy())) {
        let (mut s, base) = inline_subject();
        run(&mut s, base, 32 * 1024, &ops);
    }

    /// The heap without statistics hands out the same addresses: the model predicts them all.
    #[test]
    fn inline_without_stats_matches_model(ops in ops_strategy(size_strategy())) {
        let (mut s, base) = inline_subject_of(InlineHeap::without_stats());
        run(&mut s, base, 32 * 1024, &ops);
    }

    #[test]
    fn inline_without_stats_dense_tries_match_model(ops in ops_strategy(large_size_strategy())) {
        let (mut s, base) = inline_subject_of(InlineHeap::without_stats());
        run(&mut s, base, SPACE / 2, &ops);
    }

    /// The compact bins (a list per size up to 64 granules, tries above) serve the same
    /// policy: the model predicts every address, with sizes on both sides of their lists.
    #[test]
    fn inline_compact_matches_model(ops in ops_strategy(size_strategy())) {
        let (mut s, base) = inline_subject_of(InlineHeap::compact());
        run(&mut s, base, 32 * 1024, &ops);
    }

    #[test]
    fn inline_compact_dense_tries_match_model(ops in ops_strategy(large_size_strategy())) {
        let (mut s, base) = inline_subject_of(InlineHeap::compact());
        run(&mut s, base, SPACE / 2, &ops);
    }

    #[test]
    fn detached_matches_model(ops in ops_strategy(size_strategy())) {
        run(&mut detached_subject(256), DETACHED_BASE, 32 * 1024, &ops);
    }

    #[test]
    fn inline_dense_tries_match_model(ops in ops_strategy(large_size_strategy())) {
        let (mut s, base) = inline_subject();
        run(&mut s, base, SPACE / 2, &ops);
    }

    #[test]
    fn detached_dense_tries_match_model(ops in ops_strategy(large_size_strategy())) {
        // A 1-byte granule puts most of these sizes in tries, densely.
        run(&mut detached_subject(1), DETACHED_BASE, SPACE / 2, &ops);
    }
}

/// Dense bins above the lists, checked directly: thousands of free chunks of distinct and
/// repeated sizes (kept apart by 1-byte spacers so they never merge), then requests of every
/// kind of size, each compared with a brute-force best fit over the free list. At the 1-byte
/// granule, sizes from 2048 to 16383 are the size table's (3000 chunks over its 256 chains,
/// a dozen heads to a chain) and larger ones the tries'.
fn dense_best_fit_is_exact(first: usize, span: usize) {
    let n = if cfg!(miri) { 60 } else { 3000 };
    let mut h = DetachedHeap::new(Vec::new(), 1).unwrap();
    h.add_region(0, 1 << 30).unwrap();
    let mut rng = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = |m: usize| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        (rng % m as u64) as usize
    };
    let mut blocks = Vec::new();
    let mut end = 0;
    for _ in 0..n {
        let size = first + next(span);
        blocks.push(h.alloc(size, 1).unwrap());
        end = h.alloc(1, 1).unwrap().addr + 1;
    }
    // The region's free tail, then the blocks freed in random order; `stamp` is the order in
    // which chunks were filed.
    let mut free: Vec<(usize, usize, u64)> = std::vec![(end, (1 << 30) - end, 0)];
    let mut stamp = 0;
    while !blocks.is_empty() {
        let b = blocks.swap_remove(next(blocks.len()));
        h.free(b).unwrap();
        stamp += 1;
        free.push((b.addr, b.size, stamp));
        if stamp % 97 == 0 {
            h.check().unwrap();
        }
    }
    h.check().unwrap();
    for step in 0..2 * n {
        let need = first - 50 + next(span + 400);
        let want = free
            .iter()
            .enumerate()
            .filter(|(_, c)| c.1 >= need)
            .min_by_key(|(_, c)| (c.1, c.2))
            .map(|(i, _)| i);
        let got = h.alloc(need, 1);
        let (addr, size, _) = free.swap_remove(want.unwrap());
        assert_eq!(got.unwrap().addr, addr, "need {need}: not the best fit");
        if size > need {
            stamp += 1;
            free.push((addr + need, size - need, stamp));
        }
        if step % 97 == 0 {
            h.check().unwrap();
        }
    }
    h.check().unwrap();
}

#[test]
fn dense_size_table_best_fit_is_exact() {
    // Sizes 2100 to 8099 bytes, requests from 2050 (a listed size's rest stays listed).
    dense_best_fit_is_exact(2100, 6000);
}

#[test]
fn dense_trie_best_fit_is_exact() {
    // Sizes 16500 to 40499 bytes, across seven tree bins above the size table; requests from
    // 16450, all above the table.
    dense_best_fit_is_exact(16_500, 24_000);
}

/// The size table's cached smallest chunk, through each way it changes: a carve that keeps it
/// in its map word, a merge that makes it larger than another size of that word (the smallest
/// is then that other size), a merge into another word, and taking it whole. At the 1-byte
/// granule, so that sizes are bytes.
#[test]
fn the_size_tables_smallest_chunk_follows_carves_and_merges() {
    let mut h = DetachedHeap::new(Vec::new(), 1).unwrap();
    h.add_region(0, 1 << 20).unwrap();
    // [a 2050][x 20][spacer][b 2060][spacer][c 2200][y 300][spacer], then the top.
    let a = h.alloc(2050, 1).unwrap();
    let x = h.alloc(20, 1).unwrap();
    h.alloc(1, 1).unwrap();
    let b = h.alloc(2060, 1).unwrap();
    h.alloc(1, 1).unwrap();
    let c = h.alloc(2200, 1).unwrap();
    let y = h.alloc(300, 1).unwrap();
    h.alloc(1, 1).unwrap();
    for blk in [a, b, c] {
        h.free(blk).unwrap();
    }
    h.check().unwrap();
    // `a` (2050) grows to 2070, in its own map word, past `b` (2060): `b` is the smallest now.
    h.free(x).unwrap();
    h.check().unwrap();
    assert_eq!(h.alloc(2055, 1).unwrap().addr, b.addr);
    h.check().unwrap();
    // `b`'s rest (5 bytes) went to the lists; `a` (2070) is the smallest again. `c` (2200)
    // grows to 2500, into another word; then a carve of `a` that keeps it in its word.
    h.free(y).unwrap();
    h.check().unwrap();
    let d = h.alloc(10, 1).unwrap();
    assert_eq!(
        d.addr, a.addr,
        "the lists are empty: the smallest chunk above them"
    );
    h.check().unwrap();
    // `a` is 2060 now; a request of 2061 takes `c` (2500), then one of 2060 takes all of `a`.
    assert_eq!(h.alloc(2061, 1).unwrap().addr, c.addr);
    assert_eq!(h.alloc(2060, 1).unwrap().addr, a.addr + 10);
    h.check().unwrap();
}
