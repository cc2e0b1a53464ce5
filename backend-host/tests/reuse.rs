//! `MmapSource` with reuse on (`MmapOptions::reuse`): mappings given back are kept and cut or
//! grown for later regions instead of mapped anew, and go back to the system after the delay,
//! past the bounds and on a purge (a pool's trim). What is mapped is checked with the kernel
//! (`mincore`), the delay with a clock the tests move themselves (nothing here is timed).

mod common;

use std::sync::atomic::{AtomicU64, Ordering};

use common::{mapped, resident_pages, unmapped};
use tagalloc::{Growth, InlineHeap, Policy, Pool, RegionSource};
use tagalloc_host::{MmapOptions, MmapSource, Reuse};

const MIB: usize = 1 << 20;

/// Held by every test here for its whole run (see `tests/source.rs`), and so also the one
/// user of [`NOW`] at a time.
static KERNEL_MAPPINGS: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    KERNEL_MAPPINGS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

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

#[test]
fn a_smaller_region_is_cut_from_a_kept_mapping_and_its_tail_unmapped() {
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

    let (again, len) = src.obtain(4 * MIB).unwrap();
    assert_eq!((again, len), (base, 4 * MIB), "the kept mapping, cut");
    assert_eq!(src.maps(), 1, "no new mapping");
    assert_eq!((src.cached(), src.mapped()), (0, 4 * MIB));
    assert!(unmapped(addr + 4 * MIB, MIB), "the tail went back");
    assert_eq!(
        resident_pages(addr, len),
        Some(len / 4096),
        "its pages stayed resident"
    );
    assert!(holds(addr, len, 7), "an old mapping holds what was written");
    let r = src.reuse_stats();
    assert_eq!((r.kept, r.reused, r.shrunk, r.grown), (1, 1, 1, 0), "{r:?}");
    // SAFETY: as above.
    unsafe { src.give_back(again, len) };
    assert_eq!(src.purge(), 4 * MIB);
    assert!(unmapped(addr, len));
    assert_eq!((src.cached(), src.mapped()), (0, 0));
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
    assert_eq!((r.reused, r.grown, r.shrunk), (1, 1, 0), "{r:?}");
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
    let sizes = [2 * MIB, 8 * MIB, 5 * MIB];
    let regions: Vec<_> = sizes.iter().map(|&s| src.obtain(s).unwrap()).collect();
    for &(b, l) in &regions {
        // SAFETY: each region came from `src` and is not used after this.
        unsafe { src.give_back(b, l) };
    }
    // 4 MiB: the 5 MiB mapping is the smallest that holds it.
    let (b, l) = src.obtain(4 * MIB).unwrap();
    assert_eq!((b, l), (regions[2].0, 4 * MIB));
    // 10 MiB: none holds it; the largest (8 MiB) grows.
    let (b2, l2) = src.obtain(10 * MIB).unwrap();
    assert_eq!(l2, 10 * MIB);
    assert_eq!(src.cached(), 2 * MIB, "the 2 MiB mapping is still kept");
    assert_eq!(src.maps(), 3);
    for (b, l) in [(b, l), (b2, l2)] {
        // SAFETY: as above.
        unsafe { src.give_back(b, l) };
    }
    assert_eq!(src.purge(), 16 * MIB);
    assert_eq!(src.mapped(), 0);
}

#[test]
fn kept_mappings_stay_within_the_bounds_and_age_out_after_the_delay() {
    let _serial = one_at_a_time();
    let mut src = source();
    // Five mappings of 1 MiB, given back one a millisecond: four are kept, the oldest goes.
    let regions: Vec<_> = (0..5).map(|_| src.obtain(MIB).unwrap()).collect();
    for (i, &(b, l)) in regions.iter().enumerate() {
        NOW.store(i as u64, Ordering::Relaxed);
        // SAFETY: each region came from `src` and is not used after this.
        unsafe { src.give_back(b, l) };
    }
    let r = src.reuse_stats();
    assert_eq!((r.kept, r.evicted, src.cached()), (5, 1, 4 * MIB), "{r:?}");
    assert!(
        unmapped(regions[0].0.addr().get(), MIB),
        "the oldest was unmapped"
    );
    assert!(regions[1..].iter().all(|&(b, l)| mapped(b.addr().get(), l)));

    assert_eq!(src.purge(), 4 * MIB);

    // Past the byte bound (32 MiB): the oldest go until the new one fits.
    let (a, la) = src.obtain(20 * MIB).unwrap();
    let (b, lb) = src.obtain(16 * MIB).unwrap();
    NOW.store(10, Ordering::Relaxed);
    // SAFETY: as above.
    unsafe { src.give_back(a, la) };
    // SAFETY: as above.
    unsafe { src.give_back(b, lb) };
    assert_eq!(
        src.cached(),
        16 * MIB,
        "20 + 16 MiB is past the bound: the older went"
    );
    assert!(unmapped(a.addr().get(), la));
    assert_eq!(src.reuse_stats().evicted, 2);
    // A mapping larger than the bound is never kept.
    let (big, lbig) = src.obtain(40 * MIB).unwrap();
    assert_eq!(src.cached(), 0, "the 16 MiB mapping was grown to 40");
    // SAFETY: as above.
    unsafe { src.give_back(big, lbig) };
    assert!(
        unmapped(big.addr().get(), lbig),
        "over the byte bound: unmapped at once"
    );
    assert_eq!(src.mapped(), 0);

    // The delay: a mapping given back at 10 ms is still kept at 109 ms and ages out at 110 ms,
    // at the next call that obtains or gives back a region.
    let (c, lc) = src.obtain(2 * MIB).unwrap();
    // SAFETY: as above.
    unsafe { src.give_back(c, lc) };
    let (d, ld) = src.obtain(MIB).unwrap(); // a fresh 1 MiB: the kept 2 MiB could serve it...
    assert_eq!(d, c, "...and did");
    let (e, le) = src.obtain(MIB).unwrap(); // a new mapping
                                            // SAFETY: as above.
    unsafe { src.give_back(d, ld) };
    NOW.store(109, Ordering::Relaxed);
    // SAFETY: as above.
    unsafe { src.give_back(e, le) };
    assert_eq!((src.reuse_stats().expired, src.cached()), (0, 2 * MIB));
    NOW.store(110, Ordering::Relaxed);
    let (f, lf) = src.obtain(3 * MIB).unwrap();
    assert_eq!(
        src.reuse_stats().expired,
        1,
        "the one given back at 10 ms aged out"
    );
    assert_eq!(
        src.mapped(),
        3 * MIB,
        "only the region handed out is mapped"
    );
    assert_eq!(
        src.reuse_stats().grown,
        2,
        "the one given back at 109 ms was grown"
    );
    assert_eq!(src.cached(), 0);
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
