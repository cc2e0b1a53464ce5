//! Region management: one implementation over both placements (`crate::algo::region`).

extern crate std;
use std::vec::Vec;

use super::inline::Arena;
use crate::{DetachedHeap, Error, InlineHeap, Record};

/// Trim removes exactly the wholly free regions, in one pass, whatever their order on the list,
/// and names each one's range once.
#[test]
fn trim_gives_back_every_wholly_free_region_and_keeps_the_rest() {
    let mut h = DetachedHeap::new(std::vec![Record::VACANT; 256], 64).unwrap();
    let regions: Vec<usize> = (0..40).map(|i| (i + 1) << 20).collect();
    for &base in &regions {
        h.add_region(base, 1 << 16).unwrap();
    }
    // Keep every third region busy: one block in each.
    let busy: Vec<_> = regions
        .iter()
        .step_by(3)
        .map(|&base| {
            let b = h.alloc(1 << 16, 1).unwrap();
            assert_eq!(h.region_of(b.addr).map(|r| r.0), Some(b.addr));
            (base, b)
        })
        .collect();
    let mut released = Vec::new();
    let n = h.trim(|base, len| released.push((base, len)));
    released.sort_unstable();
    let expect: Vec<(usize, usize)> = regions
        .iter()
        .filter(|&&b| !busy.iter().any(|&(_, blk)| blk.addr == b))
        .map(|&b| (b, 1 << 16))
        .collect();
    assert_eq!((n, released), (expect.len(), expect));
    h.check().unwrap();
    assert_eq!(h.stats().regions, busy.len());
    for (_, b) in busy {
        h.free(b).unwrap();
    }
    assert_eq!(h.trim(|_, _| {}), 14, "the 14 regions that were busy");
    assert_eq!(h.stats().regions, 0);
    h.check().unwrap();
}

/// Free spans name whole pages of free chunks, never the tags an inline heap keeps in them.
#[test]
fn free_spans_name_whole_free_pages_and_no_tags() {
    const PAGE: usize = 4096;
    let mut a = Arena::new(1 << 20);
    let mut h = InlineHeap::new();
    // SAFETY: the arena outlives the heap and nothing else uses it.
    unsafe { h.add_region(a.ptr(), a.len()).unwrap() };
    let x = h.alloc(100, 16).unwrap();
    let big = h.alloc(300 << 10, 16).unwrap();
    let y = h.alloc(100, 16).unwrap();
    // SAFETY: live, freed once.
    unsafe { h.free(big, 300 << 10).unwrap() };
    let mut spans = Vec::new();
    h.free_spans(64 << 10, PAGE, |s, l| spans.push((s, l)));
    // Two free chunks: the hole `big` left, and the region's free end.
    assert_eq!(spans.len(), 2, "{spans:?}");
    let hole = spans[0];
    let big_start = big.as_ptr() as usize - 8;
    assert_eq!(hole.0 % PAGE, 0);
    assert_eq!(hole.1 % PAGE, 0);
    // The span starts past the head and the five link words and ends before the footer.
    assert!(hole.0 >= big_start + 48 && hole.0 < big_start + 48 + PAGE);
    assert!(hole.0 + hole.1 <= y.as_ptr() as usize - 8 - 8);
    // Writing the whole span (as a released page reads back as zeros) leaves the heap sound.
    for &(s, l) in &spans {
        // SAFETY: the span lies inside a free chunk of the arena, away from its tags.
        unsafe { core::ptr::write_bytes(s as *mut u8, 0, l) };
    }
    h.check().unwrap();
    // SAFETY: live, freed once.
    unsafe {
        h.free(x, 100).unwrap();
        h.free(y, 100).unwrap();
    }
    let mut one = Vec::new();
    assert_eq!(h.free_spans(0, PAGE, |s, l| one.push((s, l))), 1);
    h.check().unwrap();

    let mut d = DetachedHeap::new(std::vec![Record::VACANT; 16], 256).unwrap();
    d.add_region(1 << 30, 1 << 20).unwrap();
    let b = d.alloc(5000, 256).unwrap();
    let mut dspans = Vec::new();
    d.free_spans(1, PAGE, |s, l| dspans.push((s, l)));
    // The free end starts right after `b`'s 5120 bytes: its first whole page is at 8192.
    assert_eq!(dspans, [((1 << 30) + 8192, (1 << 20) - 8192)]);
    d.free(b).unwrap();
}

/// Growing a region merges the new space into its free end; a gap, an overlap or a foreign
/// base is refused and changes nothing.
#[test]
fn extend_merges_and_refusals_change_nothing() {
    let mut d = DetachedHeap::new(std::vec![Record::VACANT; 16], 256).unwrap();
    d.add_region(0, 1 << 16).unwrap();
    d.add_region(1 << 20, 1 << 16).unwrap();
    let before = d.stats();
    assert_eq!(d.extend_region(4096, 1 << 16), Err(Error::UnknownRegion));
    assert_eq!(d.extend_region(0, 1 << 20), Err(Error::RegionOverlap));
    assert_eq!(d.extend_region(0, 255), Err(Error::RegionTooSmall));
    assert_eq!(d.stats(), before);
    d.extend_region(0, (1 << 20) - (1 << 16)).unwrap();
    let st = d.stats();
    assert_eq!(
        (st.regions, st.free_chunks, st.largest_free),
        (2, 2, 1 << 20)
    );
    assert_eq!(d.region_of((1 << 20) - 1), Some((0, 1 << 20)));
    d.check().unwrap();
}

/// The top (the free end of the top region: the first region added, until a region is grown)
/// is carved only when no other free chunk fits, even when it is the smallest that would: a
/// hole is taken first, then the top; a region added beside it is best-fit space like any hole;
/// growing that region makes it the top region, and the old top goes into the bins.
#[test]
fn the_top_is_carved_only_when_no_other_free_chunk_fits() {
    const R1: usize = 0x1000;
    const R2: usize = 0x10_0000;
    let mut h = DetachedHeap::new(std::vec![Record::VACANT; 64], 1).unwrap();
    h.add_region(R1, 10_000).unwrap();
    let a = h.alloc(3_000, 1).unwrap();
    let b = h.alloc(5_000, 1).unwrap();
    assert_eq!(
        (a.addr, b.addr),
        (R1, R1 + 3_000),
        "both carved from the top"
    );
    h.free(a).unwrap();
    // Free: a hole of 3,000 and the top, 2,000 (the smaller).
    let c = h.alloc(100, 1).unwrap();
    assert_eq!(c.addr, R1, "the hole, not the smaller top");
    let d = h.alloc(1_500, 1).unwrap();
    assert_eq!(
        d.addr,
        R1 + 100,
        "the rest of the hole (2,900) before the top (2,000)"
    );
    let e = h.alloc(1_500, 1).unwrap();
    assert_eq!(e.addr, R1 + 8_000, "the hole's 1,400 is too small: the top");
    h.check().unwrap();
    // Free: 1,400 at R1 + 1,600 and the top, 500 at R1 + 9,500.
    h.add_region(R2, 10_000).unwrap();
    let f = h.alloc(1_000, 1).unwrap();
    assert_eq!(f.addr, R1 + 1_600, "the smallest binned chunk that fits");
    let g = h.alloc(450, 1).unwrap();
    assert_eq!(
        g.addr, R2,
        "the added region is binned space, taken before the top"
    );
    h.check().unwrap();
    // Growing the second region makes it the top region: R1's free end (500) is binned now.
    h.extend_region(R2, 4_096).unwrap();
    let k = h.alloc(480, 1).unwrap();
    assert_eq!(k.addr, R1 + 9_500, "the old top, binned, fits best");
    h.check().unwrap();
    let st = h.stats();
    assert_eq!(
        st.largest_free,
        10_000 - 450 + 4_096,
        "the top counts as free"
    );
    for blk in [b, c, d, e, f, g, k] {
        h.free(blk).unwrap();
        h.check().unwrap();
    }
    assert_eq!((h.stats().free_chunks, h.stats().in_use), (2, 0));
}
