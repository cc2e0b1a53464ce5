//! Trimming lowers the process's resident memory, as the kernel counts it
//! (`/proc/self/statm`), both by releasing the pages of free chunks in regions that stay and
//! by unmapping regions that are wholly free. One test in this binary, so no other test's
//! memory moves the figures between the two readings.

mod common;

use std::alloc::{GlobalAlloc, Layout};

use common::resident_bytes;
use tagalloc_host::HostAllocator;

const MIB: usize = 1 << 20;

static POOL: HostAllocator = HostAllocator::new();

#[test]
fn trim_lowers_resident_memory() {
    let layout = Layout::from_size_align(32 << 10, 16).unwrap();
    let count = 2048; // 64 MiB
    let blocks: Vec<*mut u8> = (0..count)
        .map(|i| {
            // SAFETY: a non-zero size.
            let p = unsafe { POOL.alloc(layout) };
            assert!(!p.is_null());
            // SAFETY: a live block of the layout's size; every page is touched.
            unsafe { p.write_bytes(i as u8, layout.size()) };
            p
        })
        .collect();
    let reserved = POOL.stats().unwrap().reserved;
    // Free all but every 64th block: most regions keep a block, so most of what this trim
    // gives back are pages released inside regions that stay, and their cut free ends.
    let mut kept = Vec::new();
    for (i, &p) in blocks.iter().enumerate() {
        if i % 64 == 0 {
            kept.push((i, p));
        } else {
            // SAFETY: a live block, freed once.
            unsafe { POOL.dealloc(p, layout) };
        }
    }
    let before = resident_bytes();
    let t = POOL.trim().unwrap();
    let after = resident_bytes();
    let drop = before.saturating_sub(after);
    println!(
        "64 MiB in 32 KiB blocks, 1 in 64 kept: {reserved} B reserved; resident {} MiB before \
         trim, {} MiB after ({} MiB less); {t:?}",
        before / MIB,
        after / MIB,
        drop / MIB
    );
    assert!(
        t.released >= 16 * MIB,
        "pages released in regions that stay: {t:?}"
    );
    assert!(t.released + t.bytes >= 48 * MIB, "{t:?}");
    assert!(drop >= 40 * MIB, "resident memory fell by {drop} B only");
    // The kept blocks are intact.
    for &(i, p) in &kept {
        // SAFETY: a live block of the layout's size.
        let bytes = unsafe { std::slice::from_raw_parts(p, layout.size()) };
        assert!(bytes.iter().all(|&b| b == i as u8), "block {i} changed");
    }
    POOL.pool().with_pool(|p| p.check()).unwrap().unwrap();

    // Everything freed: every region is unmapped.
    for (_, p) in kept {
        // SAFETY: a live block, freed once.
        unsafe { POOL.dealloc(p, layout) };
    }
    let t = POOL.trim().unwrap();
    let st = POOL.stats().unwrap();
    assert!(t.regions >= 1, "{t:?}");
    assert_eq!((st.reserved, st.heap.regions), (0, 0), "{st:?}");
}
