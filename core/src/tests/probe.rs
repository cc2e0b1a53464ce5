//! Pointers a C `free` may be handed, proven against an inline heap's tags before anything is
//! written: a double free after the block merged with a free neighbour (either side), a
//! pointer into the middle of a block (zeros or garbage before it), a pointer outside the
//! heap, and tags damaged by a write past a block's end or by a size that leaves the region.
//! Each through the `O(1)` probe (`usable_size_in`), the walk (`checked_usable_size`) and,
//! where it applies, the plain `free` and `realloc`; none may crash, and each names its cause.

use core::ptr::NonNull;

use super::inline::Arena;
use crate::{BlockError, Error, InlineHeap};

const DOUBLE: Result<usize, BlockError> = Err(BlockError::Refused(Error::DoubleFree));
const FOREIGN: Result<usize, BlockError> = Err(BlockError::Refused(Error::ForeignPointer));

/// A heap over `a`, and the region's base and length as its pool's table would give them.
fn heap(a: &mut Arena) -> (InlineHeap, usize, usize) {
    let mut h = InlineHeap::new();
    // SAFETY: the arena outlives the heap and nothing else uses its memory.
    unsafe { h.add_region(a.ptr(), a.len()).unwrap() };
    let (base, len) = h.region_of(a.ptr_addr()).unwrap();
    (h, base.addr().get(), len)
}

/// The probe's answer for `p` in the heap's one region.
fn probe(h: &InlineHeap, base: usize, len: usize, p: NonNull<u8>) -> Result<usize, BlockError> {
    // SAFETY: `base..base + len` is the heap's region and `p` was derived from the arena.
    unsafe { h.usable_size_in(p, base, len) }
}

/// Both ways of proving `p` agree on `want`.
fn both(h: &InlineHeap, base: usize, len: usize, p: NonNull<u8>, want: Result<usize, BlockError>) {
    assert_eq!(probe(h, base, len, p), want, "probe of {p:p}");
    assert_eq!(h.checked_usable_size(p), want, "walk of {p:p}");
}

/// The probe and the walk agree wherever the probe refuses (it hands over to the walk); where
/// it proves a block, the walk finds the same block or damage past it that its free does not
/// follow (an in-use successor's size).
fn agree(h: &InlineHeap, p: NonNull<u8>, got: Result<usize, BlockError>) {
    let walk = h.checked_usable_size(p);
    match got {
        Ok(_) => assert!(
            walk == got || matches!(walk, Err(BlockError::Corrupted(_))),
            "{p:p}: probe {got:?}, walk {walk:?}"
        ),
        Err(_) => assert_eq!(got, walk, "{p:p}"),
    }
}

#[test]
fn a_live_block_is_proven_with_its_usable_size() {
    let mut a = Arena::new(1 << 14);
    let (mut h, base, len) = heap(&mut a);
    for size in [1, 24, 100, 3000] {
        let p = h.alloc(size, 16).unwrap();
        // SAFETY: a live allocation of this heap.
        let plain = unsafe { h.usable_size(p) }.unwrap();
        both(&h, base, len, p, Ok(plain));
    }
    // Next to a free predecessor and a free successor too.
    let x = h.alloc(64, 16).unwrap();
    let y = h.alloc(64, 16).unwrap();
    let z = h.alloc(64, 16).unwrap();
    let _keep = h.alloc(64, 16).unwrap();
    // SAFETY: live allocations, each freed once.
    unsafe {
        h.free(x, 64).unwrap();
        h.free(z, 64).unwrap();
    }
    // SAFETY: a live allocation of this heap.
    let plain = unsafe { h.usable_size(y) }.unwrap();
    both(&h, base, len, y, Ok(plain));
    h.check().unwrap();
}

/// `free(a); free(b); free(b)` with `b` merged into `a`, and `free(b); free(a); free(b)` with
/// `b` absorbed as `a`'s successor: the plain free (which reads only the head) refuses both,
/// and so do `realloc` and `usable_size`; nothing is freed twice.
#[test]
fn a_double_free_after_a_merge_is_refused_by_the_plain_free() {
    for b_first in [false, true] {
        let mut ar = Arena::new(1 << 14);
        let (mut h, base, len) = heap(&mut ar);
        let a = h.alloc(64, 16).unwrap();
        let b = h.alloc(64, 16).unwrap();
        let _keep = h.alloc(64, 16).unwrap();
        let in_use = h.stats().in_use;
        let order = if b_first { [b, a] } else { [a, b] };
        for p in order {
            // SAFETY: live allocations, each freed once.
            unsafe { h.free(p, 64).unwrap() };
        }
        let after = h.stats();
        assert_eq!(
            after.free_chunks, 2,
            "a and b merged into one chunk (and the top)"
        );
        // SAFETY: deliberately a double free: refused before anything is written.
        assert_eq!(unsafe { h.free(b, 64) }, Err(Error::DoubleFree));
        // SAFETY: as above, through realloc and usable_size.
        unsafe {
            assert_eq!(h.realloc(b, 64, 16, 200), Err(Error::DoubleFree));
            assert_eq!(h.usable_size(b), Err(Error::DoubleFree));
        }
        both(&h, base, len, b, DOUBLE);
        let now = h.stats();
        assert_eq!((now.in_use, now.free), (after.in_use, after.free));
        assert!(now.in_use < in_use);
        h.check().unwrap();
    }
}

/// A pointer into the middle of a live block is foreign, never a double free, whether the
/// bytes before it are zeros or garbage that reads as a size leaving the region.
#[test]
fn a_pointer_into_a_block_is_foreign_whatever_precedes_it() {
    let mut a = Arena::new(1 << 14);
    let (mut h, base, len) = heap(&mut a);
    let p = h.alloc(256, 16).unwrap();
    let _keep = h.alloc(64, 16).unwrap();
    for fill in [0x00u8, 0xff, 0x41, 0x20] {
        // SAFETY: `p` is a live block of at least 256 bytes.
        unsafe { p.as_ptr().write_bytes(fill, 256) };
        for off in [16, 32, 128, 5] {
            // SAFETY: inside the block.
            let inside = unsafe { p.add(off) };
            both(&h, base, len, inside, FOREIGN);
        }
    }
    h.check().unwrap();
}

/// A pointer outside every region is foreign to the walk (the probe is only ever given a
/// pointer inside the region its caller found).
#[test]
fn a_pointer_outside_the_heap_is_foreign() {
    let mut a = Arena::new(1 << 14);
    let (h, _, _) = heap(&mut a);
    let mut other = [0u128; 4];
    let outside = NonNull::new(other.as_mut_ptr().cast::<u8>()).unwrap();
    assert_eq!(h.checked_usable_size(outside), FOREIGN);
}

/// One byte written past a block's usable size lands on the next chunk's head: for every
/// byte value, the probe and the walk agree (as [`agree`] says), neither calls it a double free or
/// a foreign pointer, nothing is read outside the region, and the block or its neighbour is
/// reported as corruption with an address in the heap, but for the one value that leaves a heap as
/// consistent as a sound one. (Where only one of the two frees reports it, the other is safe:
/// it does not follow the damaged head.)
#[test]
fn a_write_past_a_block_is_reported_as_corruption() {
    for byte in 0..=255u8 {
        let mut ar = Arena::new(1 << 12);
        let (mut h, base, len) = heap(&mut ar);
        let a = h.alloc(24, 16).unwrap();
        let b = h.alloc(24, 16).unwrap();
        let _keep = h.alloc(24, 16).unwrap();
        // SAFETY: a live block of this heap.
        let usable = unsafe { h.usable_size(a) }.unwrap();
        // SAFETY: deliberately one byte past the block: the next head's low byte, in the arena.
        let old = unsafe { a.as_ptr().add(usable).replace(byte) };
        if byte == old {
            continue;
        }
        let mut reported = 0;
        for p in [a, b] {
            let got = probe(&h, base, len, p);
            agree(&h, p, got);
            match got {
                Err(BlockError::Corrupted(c)) => {
                    assert!(c.at >= base && c.at < base + len, "{c}");
                    reported += 1;
                }
                Ok(_) => {}
                Err(e) => panic!("byte {byte:#x} at {p:p}: {e:?}"),
            }
        }
        // 0x43 makes `b`'s head say 64 bytes in use: `b` then spans `_keep` exactly, a
        // heap as consistent as one where `b` was that large; no tag can tell.
        if byte == 0x43 {
            assert_eq!(reported, 0);
            continue;
        }
        assert!(reported > 0, "byte {byte:#x}: neither free reports it");
        assert!(h.check().is_err(), "byte {byte:#x}");
    }
}

/// A head whose size leaves the region, on the block itself: the probe and the walk stop at
/// it and report it, and so does `check()`.
#[test]
fn a_size_that_leaves_the_region_is_reported_not_followed() {
    for bad in [usize::MAX & !3, 1 << 40, 0x7fff_fff0, 0] {
        let mut ar = Arena::new(1 << 12);
        let (mut h, base, len) = heap(&mut ar);
        let a = h.alloc(24, 16).unwrap();
        let b = h.alloc(24, 16).unwrap();
        // SAFETY: `b`'s head, one word before it, inside the arena.
        unsafe { b.as_ptr().cast::<usize>().sub(1).write(bad | 3) };
        let got = probe(&h, base, len, b);
        assert!(
            matches!(got, Err(BlockError::Corrupted(_))),
            "size {bad:#x}: {got:?}"
        );
        // The walk reports it from either block; the probe of `a`, which does not follow an
        // in-use successor's size, may let `a` be freed.
        for p in [a, b] {
            agree(&h, p, probe(&h, base, len, p));
            assert!(matches!(
                h.checked_usable_size(p),
                Err(BlockError::Corrupted(_))
            ));
        }
        assert!(h.check().is_err());
    }
}

/// A pointer inside a free chunk's head word (before the payload would start) is foreign to
/// the walk, which must not take it for the payload of a merged block (fuzz target `misuse`
/// found the walk subtracting past zero there).
#[test]
fn a_pointer_inside_a_free_chunks_head_is_foreign() {
    let mut a = Arena::new(1 << 14);
    let (mut h, _, _) = heap(&mut a);
    let x = h.alloc(64, 16).unwrap();
    let _keep = h.alloc(64, 16).unwrap();
    // SAFETY: a live allocation, freed once.
    unsafe { h.free(x, 64).unwrap() };
    for back in [1, 4, 7] {
        // The head word of `x`'s free chunk is the word before `x`.
        let p = NonNull::new(x.as_ptr().wrapping_sub(back)).unwrap();
        assert_eq!(
            h.checked_usable_size(p),
            FOREIGN,
            "{back} bytes before the payload"
        );
    }
    h.check().unwrap();
}

/// The heap's region, read through `p` (a pointer into it): what a refused free must leave as
/// it was.
fn region_bytes(p: NonNull<u8>, base: usize, len: usize) -> std::vec::Vec<u8> {
    let at = p.with_addr(core::num::NonZeroUsize::new(base).unwrap());
    // SAFETY: `base..base + len` is the arena's memory, from which `p` was derived, and
    // nothing writes it meanwhile.
    unsafe { core::slice::from_raw_parts(at.as_ptr(), len) }.to_vec()
}

/// `free_in` frees as the plain free does, with every kind of neighbour (none free, a free
/// predecessor, a free successor, both, the top): two heaps over twin arenas go through the
/// same steps, one freeing with `free`, the other with `free_in`; after each step `check()`
/// passes on both and their figures agree, and so do the places of their next allocations.
#[test]
fn free_in_frees_as_the_plain_free_does() {
    let (mut a1, mut a2) = (Arena::new(1 << 14), Arena::new(1 << 14));
    let (mut plain, base1, _) = heap(&mut a1);
    let (mut proven, base, len) = heap(&mut a2);
    let sizes = [24, 64, 100, 24, 200, 64, 24, 48, 1000, 24];
    let p1: std::vec::Vec<_> = sizes.iter().map(|&s| plain.alloc(s, 16).unwrap()).collect();
    let p2: std::vec::Vec<_> = sizes
        .iter()
        .map(|&s| proven.alloc(s, 16).unwrap())
        .collect();
    // Alone, beside a free predecessor, beside a free successor, alone, successor, alone,
    // predecessor and the top, successor only (the first chunk), both, both and the top.
    for i in [2, 3, 1, 6, 5, 8, 9, 0, 4, 7] {
        // SAFETY: live allocations of their heaps, each freed once; `base..base + len` is the
        // second heap's region.
        unsafe {
            plain.free(p1[i], sizes[i]).unwrap();
            proven.free_in(p2[i], base, len).unwrap();
        }
        plain.check().unwrap();
        proven.check().unwrap();
        assert_eq!(plain.stats(), proven.stats(), "after freeing block {i}");
        let (q1, q2) = (plain.alloc(40, 16).unwrap(), proven.alloc(40, 16).unwrap());
        assert_eq!(
            q1.addr().get() - base1,
            q2.addr().get() - base,
            "after block {i}"
        );
        // SAFETY: just allocated, freed once.
        unsafe {
            plain.free(q1, 40).unwrap();
            proven.free(q2, 40).unwrap();
        }
    }
}

/// `free_in` refuses what the probe refuses, with the same answer, and writes nothing: a
/// double free after a merge, pointers into a block, and a block whose successor's head a
/// write past its end damaged (reported as corruption).
#[test]
fn free_in_refuses_what_the_probe_refuses_writing_nothing() {
    let mut ar = Arena::new(1 << 14);
    let (mut h, base, len) = heap(&mut ar);
    let a = h.alloc(64, 16).unwrap();
    let b = h.alloc(64, 16).unwrap();
    let big = h.alloc(256, 16).unwrap();
    let keep = h.alloc(24, 16).unwrap();
    let _next = h.alloc(64, 16).unwrap();
    // SAFETY: live allocations, each freed once (`b` merges into `a`'s free chunk).
    unsafe {
        h.free(a, 64).unwrap();
        h.free(b, 64).unwrap();
    }
    // SAFETY: `big` is a live block of 256 bytes; then one byte past `keep`'s usable size,
    // onto the next chunk's head, in the arena.
    unsafe {
        big.as_ptr().write_bytes(0x41, 256);
        let usable = h.usable_size(keep).unwrap();
        keep.as_ptr().add(usable).write(b'x');
    }
    let (bytes, stats) = (region_bytes(keep, base, len), h.stats());
    let inside = |off| {
        // SAFETY: inside `big`.
        unsafe { big.add(off) }
    };
    for (p, want) in [
        (b, DOUBLE),
        (inside(16), FOREIGN),
        (inside(5), FOREIGN),
        (keep, probe(&h, base, len, keep)),
    ] {
        // SAFETY: `base..base + len` is the heap's region; `p` derives from the arena.
        let got = unsafe { h.free_in(p, base, len) };
        assert_eq!(got, want.map(|_| ()), "{p:p}");
        assert!(got.is_err(), "{p:p}");
        assert_eq!(h.stats(), stats, "{p:p}");
        assert!(region_bytes(keep, base, len) == bytes, "{p:p} wrote");
    }
    assert!(matches!(
        probe(&h, base, len, keep),
        Err(BlockError::Corrupted(_))
    ));
}

/// Live payloads as a set, for [`InlineHeap::marked_usable_size`].
#[derive(Default)]
struct Marks(std::collections::BTreeSet<usize>);

impl crate::LiveMarks for Marks {
    fn is_live(&self, addr: usize) -> bool {
        self.0.contains(&addr)
    }
    fn any_live(&self, lo: usize, hi: usize) -> bool {
        self.0.range(lo..hi).next().is_some()
    }
}

/// The proof against marks: a marked block is proven with the size the walk finds (next to
/// free neighbours too); a double free after a merge either way and the payload of a free
/// chunk are named double frees, a pointer into a block (whatever precedes it, forged tags
/// too) and into a free chunk foreign; a size grown over a live neighbour exactly, and one
/// shrunk, are damage at the grown block.
#[test]
fn the_proof_against_marks_agrees_with_the_walk_and_finds_a_size_grown_over_a_block() {
    fn marked(
        h: &InlineHeap,
        base: usize,
        len: usize,
        m: &Marks,
        p: NonNull<u8>,
    ) -> Result<usize, BlockError> {
        // SAFETY: `base..base + len` is the heap's region and `p` was derived from the arena.
        unsafe { h.marked_usable_size(p, base, len, m) }
    }
    let mut ar = Arena::new(1 << 14);
    let (mut h, base, len) = heap(&mut ar);
    let mut m = Marks::default();
    let alloc = |h: &mut InlineHeap, m: &mut Marks, n: usize| {
        let p = h.alloc(n, 16).unwrap();
        m.0.insert(p.addr().get());
        p
    };
    let [a, b, c, d, e, f] = [24, 24, 24, 24, 256, 64].map(|n| alloc(&mut h, &mut m, n));
    for p in [a, b, c, d, e, f] {
        assert_eq!(
            marked(&h, base, len, &m, p),
            h.checked_usable_size(p),
            "{p:p}"
        );
    }
    // `b` freed (a free chunk's payload), then `c` merged into it (an absorbed head).
    for p in [b, c] {
        m.0.remove(&p.addr().get());
        // SAFETY: live allocations, each freed once.
        unsafe { h.free(p, 24).unwrap() };
    }
    assert_eq!(marked(&h, base, len, &m, b), DOUBLE);
    assert_eq!(marked(&h, base, len, &m, c), DOUBLE);
    // Next to a free predecessor: proven.
    assert_eq!(marked(&h, base, len, &m, d), h.checked_usable_size(d));
    // Into a block, zeros, garbage or a forged in-use tag ending where the chunk ends before it.
    // SAFETY: `e` is a live block of 256 bytes.
    let chunk = unsafe { h.usable_size(e) }.unwrap() + 8;
    for fill in [0x00u8, 0xff, 0x41] {
        // SAFETY: inside the block.
        unsafe { e.as_ptr().write_bytes(fill, 256) };
        for off in [16, 64, 5] {
            // SAFETY: inside the block.
            assert_eq!(marked(&h, base, len, &m, unsafe { e.add(off) }), FOREIGN);
        }
    }
    // SAFETY: inside the block; a forged head at `e + 56` whose chunk ends with `e`'s.
    unsafe { e.add(56).cast::<usize>().write_unaligned((chunk - 64) | 3) };
    // SAFETY: as above.
    let inside = unsafe { e.add(64) };
    assert_eq!(marked(&h, base, len, &m, inside), FOREIGN);
    // Into the free chunk `b..` (past its links).
    // SAFETY: inside the free chunk.
    assert_eq!(marked(&h, base, len, &m, unsafe { b.add(48) }), FOREIGN);
    // `d`'s head grown over `e` exactly: every tag consistent, `e` covered.
    // SAFETY: `d`'s head word, in the arena.
    let head = unsafe { d.as_ptr().sub(8).cast::<usize>() };
    // SAFETY: as above.
    let was = unsafe { head.read() };
    // SAFETY: as above.
    unsafe { head.write(was + chunk) };
    assert!(
        matches!(marked(&h, base, len, &m, d), Err(BlockError::Corrupted(x)) if x.at == d.addr().get() - 8),
        "{:?}",
        marked(&h, base, len, &m, d)
    );
    // Shrunk by a granule: its successor then lies inside it, not marked.
    // SAFETY: as above.
    unsafe { head.write(was - 16) };
    assert!(matches!(
        marked(&h, base, len, &m, d),
        Err(BlockError::Corrupted(_))
    ));
    // SAFETY: as above.
    unsafe { head.write(was) };
    assert_eq!(marked(&h, base, len, &m, d), h.checked_usable_size(d));
}
