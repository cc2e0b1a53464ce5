//! `MmapSource` against the kernel: what it maps, grows, cuts, releases and gives back is
//! checked with `mincore` (mapped or not, resident or not) and `/proc/self/maps`, not taken from
//! the source's own word.

mod common;

use std::ptr::NonNull;

use common::{mapped, mapping_of, one_at_a_time, page_size, resident_pages, unmapped};
use tagalloc::{Error, RegionSource};
use tagalloc_host::{Call, MmapOptions, MmapSource};

const MIB: usize = 1 << 20;

/// Fills `len` bytes at `addr` with a pattern keyed by `key`.
fn fill(addr: usize, len: usize, key: u8) {
    // SAFETY: the callers pass ranges of regions they hold.
    let bytes = unsafe { std::slice::from_raw_parts_mut(addr as *mut u8, len) };
    for (i, b) in bytes.iter_mut().enumerate() {
        *b = key ^ (i / 4096) as u8;
    }
}

/// Whether `len` bytes at `addr` hold `fill`'s pattern for `key`.
fn holds(addr: usize, len: usize, key: u8) -> bool {
    // SAFETY: as for `fill`.
    let bytes = unsafe { std::slice::from_raw_parts(addr as *const u8, len) };
    bytes
        .iter()
        .enumerate()
        .all(|(i, &b)| b == key ^ (i / 4096) as u8)
}

fn zeros(addr: usize, len: usize) -> bool {
    // SAFETY: as for `fill`.
    unsafe { std::slice::from_raw_parts(addr as *const u8, len) }
        .iter()
        .all(|&b| b == 0)
}

#[test]
fn obtain_maps_zeroed_page_aligned_memory_and_give_back_unmaps_it() {
    let _serial = one_at_a_time();
    let mut src = MmapSource::new();
    let page = page_size();
    assert_eq!(src.granularity(), page);
    // A size that is not a multiple of the page is rounded up.
    let (base, len) = src.obtain(3 * page + 1).unwrap();
    let addr = base.addr().get();
    assert_eq!(len, 4 * page);
    assert_eq!(addr % page, 0);
    assert!(mapped(addr, len));
    assert_eq!(resident_pages(addr, len), Some(0), "nothing faulted in yet");
    assert!(zeros(addr, len));
    fill(addr, len, 0x5a);
    assert!(holds(addr, len, 0x5a));
    assert_eq!(src.mapped(), len);
    // SAFETY: the region came from `src` and is not used after this.
    unsafe { src.give_back(base, len) };
    assert!(unmapped(addr, len));
    assert_eq!(src.mapped(), 0);
    assert_eq!(src.last_error(), None);
}

/// Obtains a region of `len` bytes filled with `key`'s pattern, with `room` free addresses
/// right after it (obtained longer, then cut), and grows it in place by `room`; returns its base.
/// Between the cut and the growth another thread's mapping (a test thread's stack, say) may
/// land in the room: then, and only then (`mincore` says the room is mapped), it tries again.
fn obtain_and_grow(src: &mut MmapSource, len: usize, room: usize, key: u8) -> NonNull<u8> {
    for _ in 0..5 {
        let (base, got) = src.obtain(len + room).unwrap();
        let addr = base.addr().get();
        // SAFETY: the tail came from `src` and was never used.
        assert!(unsafe { src.shrink(base, got, len) });
        fill(addr, len, key);
        match src.grow(base, len, room) {
            Ok(added) => {
                assert_eq!(added, room);
                return base;
            }
            Err(e) => {
                assert_eq!(e, Error::OutOfMemory);
                assert!(
                    !unmapped(addr + len, room),
                    "growth refused though the room was free: {:?}",
                    src.last_error()
                );
                // SAFETY: the region is not used after this.
                unsafe { src.give_back(base, len) };
            }
        }
    }
    panic!("the room after a region was taken five times in a row");
}

#[test]
fn grow_extends_the_same_mapping_in_place_or_refuses_and_changes_nothing() {
    let _serial = one_at_a_time();
    let mut src = MmapSource::new();
    // Another test thread may map the addresses right after the region between the growth
    // and the placing of the blocker below (its stack, its own regions): then the whole
    // attempt starts again, up to five times.
    for _ in 0..5 {
        let base = obtain_and_grow(&mut src, MIB, MIB, 1);
        let addr = base.addr().get();
        // One mapping from the base over both parts, the old contents kept, the new part zeros.
        let (start, end) = mapping_of(addr).expect("mapped");
        assert!(
            start <= addr && end >= addr + 2 * MIB,
            "{start:#x}..{end:#x}"
        );
        assert!(holds(addr, MIB, 1));
        assert!(zeros(addr + MIB, MIB));
        fill(addr, 2 * MIB, 2);

        // Take the addresses right after the end: growth must now be refused, as a value,
        // with the region untouched.
        // SAFETY: a fresh anonymous mapping at free addresses (MAP_FIXED_NOREPLACE never
        // replaces an existing mapping).
        let blocker = unsafe {
            libc::mmap(
                (addr + 2 * MIB) as *mut libc::c_void,
                page_size(),
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
                -1,
                0,
            )
        };
        let ours = blocker as usize == addr + 2 * MIB;
        if !ours {
            if blocker != libc::MAP_FAILED {
                // SAFETY: a mapping this test made elsewhere, unused.
                unsafe { libc::munmap(blocker, page_size()) };
            }
            // The kernel often places a new region right below an older mapping: then that
            // mapping blocks the growth as well as ours would. Addresses neither ours nor
            // mapped at all (a mapping gone meanwhile): try again.
            if unmapped(addr + 2 * MIB, page_size()) {
                // SAFETY: the region is ours and unused from here on.
                unsafe { src.give_back(base, 2 * MIB) };
                continue;
            }
        }
        match src.grow(base, 2 * MIB, MIB) {
            Err(e) => assert_eq!(e, Error::OutOfMemory),
            Ok(added) if !ours => {
                // The other mapping went away between the check and the growth.
                // SAFETY: the region, grown, is ours and unused from here on.
                unsafe { src.give_back(base, 2 * MIB + added) };
                continue;
            }
            Ok(added) => panic!("grew by {added} bytes into a range this test had mapped"),
        }
        let e = src.last_error().expect("recorded");
        assert_eq!((e.call, e.bytes), (Call::Remap, MIB));
        assert!(e.to_string().contains("mremap"), "{e}");
        assert!(holds(addr, 2 * MIB, 2));
        assert_eq!(src.mapped(), 2 * MIB);
        // SAFETY: the blocker (if this test made it) and the region are ours and unused from
        // here on.
        unsafe {
            if ours {
                libc::munmap(blocker, page_size());
            }
            src.give_back(base, 2 * MIB);
        }
        assert!(unmapped(addr, 2 * MIB));
        return;
    }
    panic!("the addresses after a grown region were taken five times in a row");
}

#[test]
fn shrink_unmaps_the_tail_and_keeps_the_head() {
    let _serial = one_at_a_time();
    let mut src = MmapSource::new();
    let (base, len) = src.obtain(4 * MIB).unwrap();
    let addr = base.addr().get();
    fill(addr, len, 3);
    // SAFETY: the tail is not used after this.
    assert!(unsafe { src.shrink(base, len, MIB) });
    assert!(mapped(addr, MIB));
    assert!(unmapped(addr + MIB, 3 * MIB));
    assert!(holds(addr, MIB, 3));
    // Nothing to cut, or not on a page boundary: refused, nothing changes.
    // SAFETY: as above; these calls are refused before any system call.
    unsafe {
        assert!(!src.shrink(base, MIB, MIB));
        assert!(!src.shrink(base, MIB, 100));
    }
    assert!(mapped(addr, MIB));
    // SAFETY: the region (now 1 MiB) is not used after this.
    unsafe { src.give_back(base, MIB) };
    assert!(unmapped(addr, MIB));
}

#[test]
fn release_drops_the_pages_which_then_read_as_zeros() {
    let _serial = one_at_a_time();
    let mut src = MmapSource::new();
    let page = page_size();
    let (base, len) = src.obtain(64 * page).unwrap();
    let addr = base.addr().get();
    fill(addr, len, 4);
    assert_eq!(resident_pages(addr, len), Some(64));
    // SAFETY: the middle 32 pages hold nothing anyone needs from here on.
    assert!(unsafe { src.release(addr + 16 * page, 32 * page) });
    assert_eq!(resident_pages(addr + 16 * page, 32 * page), Some(0));
    assert_eq!(resident_pages(addr, 16 * page), Some(16));
    assert!(mapped(addr, len), "released pages stay mapped");
    assert!(zeros(addr + 16 * page, 32 * page));
    assert!(holds(addr, 16 * page, 4));
    // SAFETY: the region is not used after this.
    unsafe { src.give_back(base, len) };
}

#[test]
fn populate_faults_every_page_in_on_obtain_and_on_growth() {
    let _serial = one_at_a_time();
    let page = page_size();
    let mut src = MmapOptions::new().populate(true).source();
    let (base, len) = src.obtain(4 * MIB).unwrap();
    let addr = base.addr().get();
    assert_eq!(resident_pages(addr, len), Some(len / page), "MAP_POPULATE");
    // SAFETY: the region is not used after this.
    unsafe { src.give_back(base, len) };
    let base = obtain_and_grow(&mut src, MIB, MIB, 9);
    let addr = base.addr().get();
    assert_eq!(
        resident_pages(addr + MIB, MIB),
        Some(MIB / page),
        "MADV_POPULATE_WRITE on the grown part"
    );
    assert!(holds(addr, MIB, 9));
    // SAFETY: the region is not used after this.
    unsafe { src.give_back(base, 2 * MIB) };
}

#[test]
fn impossible_requests_are_errors_not_panics() {
    let _serial = one_at_a_time();
    let mut src = MmapSource::new();
    assert_eq!(src.obtain(usize::MAX), Err(Error::SizeOverflow));
    assert_eq!(
        src.obtain(isize::MAX as usize + 1),
        Err(Error::SizeOverflow)
    );
    // 64 TiB: more address space than a process gets under the default overcommit rules.
    assert_eq!(src.obtain(1 << 46), Err(Error::OutOfMemory));
    let e = src.last_error().expect("recorded");
    assert_eq!((e.call, e.bytes), (Call::Map, 1 << 46));
    assert!(
        e.to_string()
            .starts_with("mmap of 70368744177664 bytes failed"),
        "{e}"
    );
    let (base, len) = src.obtain(MIB).unwrap();
    assert_eq!(src.grow(base, len, usize::MAX), Err(Error::SizeOverflow));
    // SAFETY: the region is not used after this.
    unsafe { src.give_back(base, len) };
}

#[test]
fn available_reports_the_systems_free_memory() {
    let _serial = one_at_a_time();
    let avail = MmapSource::new().available().expect("MemAvailable");
    assert!(avail >= MIB, "{avail}");
}

#[test]
fn the_source_is_const_and_its_regions_serve_a_pool() {
    let _serial = one_at_a_time();
    use tagalloc::{Growth, InlineHeap, Policy, Pool};
    static_assertions();
    let policy = Policy::new().growth(Growth::Fixed(MIB)).limit(8 * MIB);
    let mut pool = Pool::new(InlineHeap::new(), MmapSource::new(), policy);
    let blocks: Vec<(NonNull<u8>, usize)> = (1..40)
        .map(|i| {
            let size = i * 5000;
            let p = pool.alloc(size, 16).unwrap();
            fill(p.addr().get(), size, i as u8);
            (p, size)
        })
        .collect();
    pool.check().unwrap();
    let e = pool.alloc(16 * MIB, 16).unwrap_err();
    assert_eq!(e.error, Error::LimitExceeded);
    for (i, &(p, size)) in blocks.iter().enumerate() {
        assert!(holds(p.addr().get(), size, (i + 1) as u8));
        // SAFETY: a live block of this pool, freed once.
        unsafe { pool.free(p, size).unwrap() };
    }
    let regions = pool.stats().heap.regions;
    assert_eq!(pool.trim().regions, regions);
    assert_eq!(pool.source().mapped(), 0);
}

/// The source can be built in a `const` (a `static` allocator needs that).
fn static_assertions() {
    const _LOCKED: MmapSource = MmapOptions::new().locked(true).huge_pages(true).source();
    static _PLAIN: std::sync::Mutex<MmapSource> = std::sync::Mutex::new(MmapSource::new());
}
