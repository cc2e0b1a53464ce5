//! `MmapSource` with reuse on (`MmapOptions::reuse`): mappings given back are kept and cut or
//! grown for later regions instead of mapped anew, and go back to the system after the delay,
//! past the bounds (the kept bytes plus those handed out within the peak handed out among them)
//! and on a purge (a pool's trim). What is mapped is checked with the kernel
//! (`mincore`), the delay with a clock the tests move themselves (nothing here is timed).

mod common;

use std::sync::atomic::{AtomicU64, Ordering};

use common::{mapped, one_at_a_time, resident_pages, unmapped};
use tagalloc::{Growth, InlineHeap, Policy, Pool, RegionSource};
use tagalloc_host::{MmapOptions, MmapSource, Reuse};

const MIB: usize = 1 << 20;

// `one_at_a_time` (`tests/common`) is held by every test here for its whole run, and so also
// makes each the one user of `NOW` at a time.

/// The tests' clock, in milliseconds.
static NOW: AtomicU64 = AtomicU64::new(0);

fn now() -> u64 {
    NOW.load(Ordering::Relaxed)
}

/// A source keeping up to 4 mappings and 32 MiB for 100 ms of [`NOW`], which starts at 0.
fn source() -> MmapSource {
    NOW.store(0, Ordering::Relaxed);
    MmapOptions::new()
        .reuse(Reuse {
            entries: 4,
            bytes: 32 * MIB,
            delay_ms: 100,
        })
        .source()
        .with_clock(now)
}

/// Writes `key` over `len` bytes at `addr` (a region the caller holds).
fn fill(addr: usize, len: usize, key: u8) {
    // SAFETY: the callers pass ranges of regions they hold.
    unsafe { std::ptr::write_bytes(addr as *mut u8, key, len) };
}

/// Whether `len` bytes at `addr` all hold `key`.
fn holds(addr: usize, len: usize, key: u8) -> bool {
    // SAFETY: as for `fill`.
    unsafe { std::slice::from_raw_parts(addr as *const u8, len) }
        .iter()
        .all(|&b| b == key)
}

type Region = (std::ptr::NonNull<u8>, usize);

/// Regions of `sizes` from `src` (which keeps nothing yet), no two of them next to each other,
/// so that none given back joins another; and the regions obtained on the way that touched
/// one of them, which the caller holds until it is done (the kernel places a mapping in the
/// highest gap it fits, which earlier tests may have left anywhere).
fn apart(src: &mut MmapSource, sizes: &[usize]) -> (Vec<Region>, Vec<Region>) {
    let (mut chosen, mut held): (Vec<Region>, Vec<Region>) = (Vec::new(), Vec::new());
    for &size in sizes {
        loop {
            let r = src.obtain(size).unwrap();
            let (b, e) = (r.0.addr().get(), r.0.addr().get() + r.1);
            if chosen
                .iter()
                .any(|c| c.0.addr().get() + c.1 == b || c.0.addr().get() == e)
            {
                held.push(r);
            } else {
                chosen.push(r);
                break;
            }
        }
    }
    (chosen, held)
}

/// Gives back `regions` (of `src`), then everything kept.
fn give_all_back(src: &mut MmapSource, regions: &[Region]) {
    for &(b, l) in regions {
        // SAFETY: the callers pass regions of `src` they no longer use.
        unsafe { src.give_back(b, l) };
    }
    src.purge();
}

#[test]
fn a_smaller_region_is_cut_from_a_kept_mapping_and_its_tail_kept() {
    let _serial = one_at_a_time();
    let mut src = source();
    let (base, len) = src.obtain(5 * MIB).unwrap();
    let addr = base.addr().get();
    fill(addr, len, 7);
    // SAFETY: the region came from `src` and is not used after this.
    unsafe { src.give_back(base, len) };
    assert!(mapped(addr, len), "kept, not unmapped");
    assert_eq!(
        (src.cached(), src.mapped(), src.maps()),
        (5 * MIB, 5 * MIB, 1)
    );

    let (head, hlen) = src.obtain(4 * MIB).unwrap();
    assert_eq!((head, hlen), (base, 4 * MIB), "the kept mapping's head");
    assert_eq!(src.maps(), 1, "no new mapping");
    assert_eq!(
        (src.cached(), src.mapped()),
        (MIB, 5 * MIB),
        "the tail is kept"
    );
    assert_eq!(
        resident_pages(addr, len),
        Some(len / 4096),
        "all its pages stayed resident, the tail's too"
    );
    assert!(holds(addr, len, 7), "an old mapping holds what was written");
    let r = src.reuse_stats();
    assert_eq!((r.kept, r.reused, r.cut, r.grown), (1, 1, 1, 0), "{r:?}");

    // The tail serves the next region that fits it, still without a system call.
    let (tail, tlen) = src.obtain(MIB).unwrap();
    assert_eq!((tail.addr().get(), tlen), (addr + 4 * MIB, MIB));
    assert_eq!((src.cached(), src.mapped(), src.maps()), (0, 5 * MIB, 1));
    assert!(holds(addr + 4 * MIB, MIB, 7));

    // Given back, head and tail join into the whole mapping again, which serves 5 MiB.
    // SAFETY: as above.
    unsafe { src.give_back(head, hlen) };
    // SAFETY: as above.
    unsafe { src.give_back(tail, tlen) };
    let r = src.reuse_stats();
    assert_eq!((r.kept, r.joined, src.cached()), (3, 1, 5 * MIB), "{r:?}");
    let (whole, wlen) = src.obtain(5 * MIB).unwrap();
    assert_eq!((whole, wlen, src.maps()), (base, 5 * MIB, 1));
    assert_eq!(src.reuse_stats().cut, 1, "taken whole");
    // SAFETY: as above.
    unsafe { src.give_back(whole, wlen) };
    assert_eq!(src.purge(), 5 * MIB);
    assert!(unmapped(addr, len));
    assert_eq!((src.cached(), src.mapped()), (0, 0));
}

/// Kept bytes plus those handed out stay within the most ever handed out at once: a kept
/// range grown past it costs the oldest kept ranges, the last from its end only.
#[test]
fn kept_and_handed_out_bytes_stay_within_the_peak_handed_out() {
    let _serial = one_at_a_time();
    let mut src = source();
    let (r, held) = apart(&mut src, &[4 * MIB, 8 * MIB]);
    let (a, c) = (r[0], r[1]);
    let h: usize = held.iter().map(|r| r.1).sum();
    fill(a.0.addr().get(), a.1, 3);
    NOW.store(1, Ordering::Relaxed);
    // SAFETY: each region came from `src` and is not used after its give-back.
    unsafe { src.give_back(a.0, a.1) };
    NOW.store(2, Ordering::Relaxed);
    // SAFETY: as above.
    unsafe { src.give_back(c.0, c.1) };
    assert_eq!(src.reuse_stats().joined, 0);
    assert_eq!((src.cached(), src.mapped()), (12 * MIB, h + 12 * MIB)); // the peak out

    // 10 MiB: none holds it; the 8 MiB range grows by 2, h + 10 MiB are out, and h + 12 MiB
    // mapped leaves 2 MiB to keep: the oldest (A, 4 MiB) loses its last 2 MiB.
    let g = src.obtain(10 * MIB).unwrap();
    let r = src.reuse_stats();
    assert_eq!((r.grown, r.over_peak), (1, 1), "{r:?}");
    assert_eq!((src.cached(), src.mapped()), (2 * MIB, h + 12 * MIB));
    let at = a.0.addr().get();
    assert!(
        mapped(at, 2 * MIB) && holds(at, 2 * MIB, 3),
        "A's head is kept"
    );
    assert!(unmapped(at + 2 * MIB, 2 * MIB), "A's end went back");

    // A new peak: h + 30 MiB out (the kept 2 MiB grown by 18); nothing is left to keep.
    let big = src.obtain(20 * MIB).unwrap();
    assert_eq!((src.cached(), src.mapped()), (0, h + 30 * MIB));
    give_all_back(&mut src, &[&held[..], &[g, big]].concat());
    assert_eq!(src.mapped(), 0);

    // A range older than the one grown, no larger than the excess, goes whole.
    let mut src = source();
    let (r, held) = apart(&mut src, &[MIB, 4 * MIB]);
    let (x, y) = (r[0], r[1]);
    let h: usize = held.iter().map(|r| r.1).sum();
    NOW.store(1, Ordering::Relaxed);
    // SAFETY: as above.
    unsafe { src.give_back(x.0, x.1) };
    NOW.store(2, Ordering::Relaxed);
    // SAFETY: as above.
    unsafe { src.give_back(y.0, y.1) };
    assert_eq!(src.reuse_stats().joined, 0);
    // Peak h + 5 MiB out; 6 MiB grows Y: h + 6 MiB out (a new peak), and X (1 MiB) is past it.
    let g = src.obtain(6 * MIB).unwrap();
    assert_eq!((src.cached(), src.mapped()), (0, h + 6 * MIB));
    assert_eq!(src.reuse_stats().over_peak, 1);
    assert!(unmapped(x.0.addr().get(), MIB));
    give_all_back(&mut src, &[&held[..], &[g]].concat());
    assert_eq!(src.mapped(), 0);
}

/// A kept range over two mappings (here split by `MADV_DONTFORK`, as a range joined from two
/// mappings is) cannot be grown by `mremap`; it is moved to the head of a fresh mapping
/// instead (Linux 6.17 and later), its pages with it, or else stays kept.
#[test]
fn a_kept_range_over_two_mappings_is_moved_to_grow() {
    let _serial = one_at_a_time();
    let mut src = source();
    let (base, len) = src.obtain(8 * MIB).unwrap();
    let addr = base.addr().get();
    fill(addr, len, 5);
    // SAFETY: the region's upper half, which this test holds; the advice changes no contents
    // and splits the mapping in two.
    let r = unsafe {
        libc::madvise(
            (addr + 4 * MIB) as *mut libc::c_void,
            4 * MIB,
            libc::MADV_DONTFORK,
        )
    };
    assert_eq!(r, 0);
    // SAFETY: the region came from `src` and is not used after this.
    unsafe { src.give_back(base, len) };
    let (g, glen) = src.obtain(12 * MIB).unwrap();
    let r = src.reuse_stats();
    if r.moved == 1 {
        assert_eq!(
            (r.grown, src.cached(), src.mapped()),
            (1, 0, 12 * MIB),
            "{r:?}"
        );
        assert!(holds(g.addr().get(), 8 * MIB, 5), "the pages moved along");
        assert!(holds(g.addr().get() + 8 * MIB, 4 * MIB, 0));
        assert_ne!(g.addr().get(), addr, "moved");
    } else {
        // An older kernel: a fresh mapping, the range still kept.
        assert_eq!(
            (r.grown, src.cached(), src.maps()),
            (0, 8 * MIB, 2),
            "{r:?}"
        );
    }
    // SAFETY: as above.
    unsafe { src.give_back(g, glen) };
    src.purge();
    assert_eq!(src.mapped(), 0);
}

#[test]
fn a_larger_region_grows_a_kept_mapping_keeping_its_pages() {
    let _serial = one_at_a_time();
    let mut src = source();
    let (base, len) = src.obtain(4 * MIB).unwrap();
    fill(base.addr().get(), len, 9);
    // SAFETY: the region came from `src` and is not used after this.
    unsafe { src.give_back(base, len) };
    let (grown, len) = src.obtain(6 * MIB).unwrap();
    let addr = grown.addr().get();
    assert_eq!(len, 6 * MIB);
    assert_eq!(src.maps(), 1, "grown with mremap, not mapped anew");
    assert_eq!((src.cached(), src.mapped()), (0, 6 * MIB));
    assert!(mapped(addr, len));
    // Moved or grown in place, the old pages came along resident; the new tail is untouched.
    assert!(
        holds(addr, 4 * MIB, 9),
        "the kept pages moved with their contents"
    );
    assert_eq!(resident_pages(addr, 4 * MIB), Some(4 * MIB / 4096));
    assert_eq!(
        resident_pages(addr + 4 * MIB, 2 * MIB),
        Some(0),
        "only the tail is new"
    );
    assert!(holds(addr + 4 * MIB, 2 * MIB, 0));
    let r = src.reuse_stats();
    assert_eq!((r.reused, r.grown, r.cut), (1, 1, 0), "{r:?}");
    // SAFETY: as above.
    unsafe { src.give_back(grown, len) };
    src.purge();
    assert!(unmapped(addr, len));
    assert_eq!(src.mapped(), 0);
}

#[test]
fn the_closest_kept_mapping_is_taken() {
    let _serial = one_at_a_time();
    let mut src = source();
    let (regions, held) = apart(&mut src, &[2 * MIB, 8 * MIB, 5 * MIB]);
    let maps = src.maps();
    for &(b, l) in &regions {
        // SAFETY: each region came from `src` and is not used after this.
        unsafe { src.give_back(b, l) };
    }
    assert_eq!(src.reuse_stats().joined, 0);
    // 4 MiB: the 5 MiB mapping is the smallest that holds it.
    let (b, l) = src.obtain(4 * MIB).unwrap();
    assert_eq!((b, l), (regions[2].0, 4 * MIB));
    // 10 MiB: none holds it; the largest (8 MiB) grows.
    let (b2, l2) = src.obtain(10 * MIB).unwrap();
    assert_eq!(l2, 10 * MIB);
    // 15 MiB were out at the peak; 14 are now, so 1 MiB may be kept: the 5 MiB mapping's
    // tail, the 2 MiB mapping (the oldest) went.
    let r = src.reuse_stats();
    assert_eq!((src.cached(), r.over_peak), (MIB, 1), "{r:?}");
    assert!(unmapped(regions[0].0.addr().get(), 2 * MIB));
    assert_eq!(src.maps(), maps, "no new mapping");
    give_all_back(&mut src, &[&held[..], &[(b, l), (b2, l2)]].concat());
    assert_eq!((src.cached(), src.mapped()), (0, 0));
}

#[test]
fn kept_mappings_stay_within_the_bounds_and_age_out_after_the_delay() {
    let _serial = one_at_a_time();
    let mut src = source();
    // Five mappings of 1 MiB, none next to another, given back one a millisecond: four are
    // kept, the oldest goes.
    let (regions, held) = apart(&mut src, &[MIB; 5]);
    for (i, &(b, l)) in regions.iter().enumerate() {
        NOW.store(i as u64, Ordering::Relaxed);
        // SAFETY: each region came from `src` and is not used after this.
        unsafe { src.give_back(b, l) };
    }
    let r = src.reuse_stats();
    assert_eq!(
        (r.kept, r.evicted, r.joined, src.cached()),
        (5, 1, 0, 4 * MIB),
        "{r:?}"
    );
    assert!(
        unmapped(regions[0].0.addr().get(), MIB),
        "the oldest was unmapped"
    );
    assert!(regions[1..].iter().all(|&(b, l)| mapped(b.addr().get(), l)));
    give_all_back(&mut src, &held);
    assert_eq!((src.cached(), src.mapped()), (0, 0));

    // Past the byte bound (32 MiB): the oldest go until the new one fits, the last of them
    // losing only its end where that is enough.
    let evicted = src.reuse_stats().evicted;
    let (r, held) = apart(&mut src, &[2 * MIB, 22 * MIB, 16 * MIB]);
    for (i, &(b, l)) in r.iter().enumerate() {
        NOW.store(8 + i as u64, Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { src.give_back(b, l) };
    }
    // 2 + 22 + 16 = 40 MiB: 8 too many; the 2 MiB range goes, the 22 MiB one loses 6.
    assert_eq!(src.cached(), 32 * MIB);
    assert_eq!(src.reuse_stats().evicted, evicted + 2);
    assert!(unmapped(r[0].0.addr().get(), 2 * MIB), "the oldest went");
    let y = r[1].0.addr().get();
    assert!(mapped(y, 16 * MIB) && unmapped(y + 16 * MIB, 6 * MIB));
    give_all_back(&mut src, &held);
    assert_eq!((src.cached(), src.mapped()), (0, 0));
    let (a, la) = src.obtain(16 * MIB).unwrap();
    // SAFETY: as above.
    unsafe { src.give_back(a, la) };
    // A mapping larger than the bound is never kept.
    let (big, lbig) = src.obtain(40 * MIB).unwrap();
    assert_eq!(src.cached(), 0, "the kept 16 MiB mapping was grown to 40");
    // SAFETY: as above.
    unsafe { src.give_back(big, lbig) };
    assert!(
        unmapped(big.addr().get(), lbig),
        "over the byte bound: unmapped at once"
    );
    assert_eq!(src.mapped(), 0);

    // The delay, from the time a range was given back; a range joined keeps the older time.
    let joined = src.reuse_stats().joined;
    let (c, lc) = src.obtain(2 * MIB).unwrap();
    // SAFETY: as above.
    unsafe { src.give_back(c, lc) }; // at 10 ms
    for t in [50, 109] {
        NOW.store(t, Ordering::Relaxed);
        let (d, ld) = src.obtain(MIB).unwrap();
        assert_eq!(d, c, "the head of the kept range");
        // SAFETY: as above.
        unsafe { src.give_back(d, ld) }; // joined to the tail kept since 10 ms
    }
    let r = src.reuse_stats();
    assert_eq!(
        (r.expired, r.joined - joined, src.cached()),
        (0, 2, 2 * MIB),
        "{r:?}"
    );
    NOW.store(110, Ordering::Relaxed);
    let maps = src.maps();
    let (f, lf) = src.obtain(3 * MIB).unwrap();
    assert_eq!(
        src.reuse_stats().expired,
        1,
        "the range given back at 10 ms aged out, though joined to at 109 ms"
    );
    assert_eq!(src.maps(), maps + 1, "a new mapping");
    assert_eq!(
        (src.mapped(), src.cached()),
        (3 * MIB, 0),
        "only the region handed out is mapped"
    );
    // SAFETY: as above.
    unsafe { src.give_back(f, lf) };
    NOW.store(1000, Ordering::Relaxed);
    let (g, lg) = src.obtain(MIB).unwrap();
    assert_eq!(
        src.reuse_stats().expired,
        2,
        "and this one at the next call"
    );
    assert_eq!(src.mapped(), MIB);
    // SAFETY: as above.
    unsafe { src.give_back(g, lg) };
    src.purge();
    assert_eq!(src.mapped(), 0);
}

#[test]
fn without_reuse_every_mapping_is_unmapped_at_once() {
    let _serial = one_at_a_time();
    let mut src = MmapSource::new();
    let (base, len) = src.obtain(5 * MIB).unwrap();
    // SAFETY: the region came from `src` and is not used after this.
    unsafe { src.give_back(base, len) };
    assert!(unmapped(base.addr().get(), len));
    assert_eq!((src.cached(), src.mapped(), src.purge()), (0, 0, 0));
}

/// Through a pool: a large block freed and a smaller one allocated reuse the mapping (the
/// pool obtains a region, the source maps nothing), the statistics show what is kept, and a
/// trim gives everything back.
#[test]
fn a_pool_reuses_a_freed_large_blocks_mapping_and_trim_returns_it() {
    let _serial = one_at_a_time();
    let policy = Policy::new().growth(Growth::Fixed(MIB)).bypass_above(MIB);
    let mut pool = Pool::new(InlineHeap::new(), source(), policy);
    let a = pool.alloc(5 * MIB, 16).unwrap();
    // SAFETY: a live block of 5 MiB, freed once.
    unsafe { pool.free(a, 5 * MIB) }.unwrap();
    let st = pool.stats();
    assert_eq!((st.reserved, st.regions_given_back), (0, 1), "{st:?}");
    assert!(st.cached > 5 * MIB, "kept, and visible: {st:?}");
    let maps = pool.source().maps();
    let b = pool.alloc(4 * MIB, 16).unwrap();
    assert_eq!(pool.source().maps(), maps, "no new mapping");
    assert_eq!(pool.source().reuse_stats().reused, 1);
    assert_eq!(pool.stats().regions_obtained, 2);
    assert_eq!(b.addr(), a.addr(), "the same mapping");
    // SAFETY: a live block of 4 MiB, freed once.
    unsafe { pool.free(b, 4 * MIB) }.unwrap();
    assert!(pool.stats().cached > 4 * MIB);
    let t = pool.trim();
    assert!(t.purged > 4 * MIB && t.gave_back(), "{t:?}");
    let st = pool.stats();
    assert_eq!(
        (st.reserved, st.cached, pool.source().mapped()),
        (0, 0, 0),
        "{st:?}"
    );
}
