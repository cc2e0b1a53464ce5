//! Hooks over real mappings: called exactly once for every region obtained, grown, cut and
//! given back, across growth in place, bypassed requests and trim, and each call agrees with
//! the kernel (`mincore`: an obtained or grown range is mapped when its hook runs, a range given
//! back or cut no longer is). One test in this binary, so no other test's mappings land in the
//! addresses it watches.

mod common;

use std::collections::BTreeMap;
use std::ptr::NonNull;

use common::{mapped, unmapped};
use tagalloc::{Error, Growth, Hooks, InlineHeap, Policy, Pool, RegionSource};
use tagalloc_host::MmapSource;

const MIB: usize = 1 << 20;

/// An `MmapSource` that leaves free addresses after each region it obtains (it obtains more
/// and cuts the tail), so that the pool's growth in place can succeed: with top-down `mmap`
/// placement the addresses after a fresh mapping are usually taken.
struct Roomy(MmapSource);

// SAFETY: every call forwards to the `MmapSource` (its regions, shrunk at once, stay its
// regions).
unsafe impl RegionSource for Roomy {
    type Base = NonNull<u8>;
    fn addr(b: NonNull<u8>) -> usize {
        MmapSource::addr(b)
    }
    fn granularity(&self) -> usize {
        self.0.granularity()
    }
    fn obtain(&mut self, min: usize) -> Result<(NonNull<u8>, usize), Error> {
        let (base, len) = self.0.obtain(min + 16 * MIB)?;
        // SAFETY: the tail was never used.
        assert!(unsafe { self.0.shrink(base, len, min) });
        Ok((base, min))
    }
    unsafe fn give_back(&mut self, base: NonNull<u8>, len: usize) {
        // SAFETY: forwarded caller contract.
        unsafe { self.0.give_back(base, len) }
    }
    fn grow(&mut self, base: NonNull<u8>, len: usize, add: usize) -> Result<usize, Error> {
        self.0.grow(base, len, add)
    }
    unsafe fn shrink(&mut self, base: NonNull<u8>, len: usize, keep: usize) -> bool {
        // SAFETY: forwarded caller contract.
        unsafe { self.0.shrink(base, len, keep) }
    }
    unsafe fn release(&mut self, start: usize, len: usize) -> bool {
        // SAFETY: forwarded caller contract.
        unsafe { self.0.release(start, len) }
    }
}

/// Keeps the registered ranges, fails on anything unbalanced, and checks each with the kernel.
#[derive(Default)]
struct Registry {
    /// Base → registered length.
    live: BTreeMap<usize, usize>,
    obtained: u64,
    grown: u64,
    given_back: u64,
    shrunk: u64,
}

impl Hooks for Registry {
    fn obtained(&mut self, base: usize, len: usize) {
        assert!(
            mapped(base, len),
            "obtained {base:#x}+{len:#x} is not mapped"
        );
        assert!(
            self.live.insert(base, len).is_none(),
            "obtained twice: {base:#x}"
        );
        self.obtained += 1;
    }
    fn grown(&mut self, base: usize, at: usize, len: usize) {
        assert!(mapped(at, len), "grown {at:#x}+{len:#x} is not mapped");
        let r = self.live.get_mut(&base).expect("grown region registered");
        assert_eq!(base + *r, at);
        *r += len;
        self.grown += 1;
    }
    fn given_back(&mut self, base: usize, len: usize) {
        assert!(
            unmapped(base, len),
            "given back {base:#x}+{len:#x} is still mapped"
        );
        assert_eq!(self.live.remove(&base), Some(len), "given back once, whole");
        self.given_back += 1;
    }
    fn shrunk(&mut self, base: usize, at: usize, len: usize) {
        assert!(unmapped(at, len), "cut {at:#x}+{len:#x} is still mapped");
        let r = self.live.get_mut(&base).expect("shrunk region registered");
        assert_eq!(base + *r, at + len);
        *r -= len;
        self.shrunk += 1;
    }
}

#[test]
fn hooks_run_once_per_range_across_growth_bypass_and_trim() {
    let policy = Policy::new()
        .growth(Growth::Fixed(MIB))
        .bypass_above(4 * MIB)
        .release_above(64 << 10);
    let mut pool = Pool::with_hooks(
        InlineHeap::new(),
        Roomy(MmapSource::new()),
        policy,
        Registry::default(),
    );
    // Growth: 600 KiB blocks, one region of 1 MiB grown in place several times.
    let mut blocks: Vec<(NonNull<u8>, usize)> = Vec::new();
    for _ in 0..6 {
        let p = pool.alloc(600 << 10, 16).unwrap();
        // SAFETY: a live block of 600 KiB.
        unsafe { p.as_ptr().write_bytes(0xab, 600 << 10) };
        blocks.push((p, 600 << 10));
    }
    let st = pool.stats();
    assert_eq!(st.regions_obtained, 1, "{st:?}");
    assert!(st.grown >= 2, "{st:?}");
    // Bypass: two 8 MiB requests get regions of their own; freeing one gives it back at once.
    let big1 = pool.alloc(8 * MIB, 64).unwrap();
    let big2 = pool.alloc(8 * MIB, 4096).unwrap();
    // SAFETY: live blocks of 8 MiB.
    unsafe {
        big1.as_ptr().write_bytes(1, 8 * MIB);
        big2.as_ptr().write_bytes(2, 8 * MIB);
    }
    assert_eq!(pool.stats().bypassed, 2);
    assert_eq!(pool.hooks().live.len(), 3);
    // SAFETY: live blocks, freed once.
    unsafe { pool.free(big1, 8 * MIB).unwrap() };
    assert_eq!(pool.hooks().given_back, 1);
    // Trim with the top region half free: its free end is cut (hook `shrunk`).
    for (p, size) in blocks.drain(3..) {
        // SAFETY: live blocks, freed once.
        unsafe { pool.free(p, size).unwrap() };
    }
    let t = pool.trim();
    assert_eq!(t.regions, 0, "{t:?}");
    assert!(pool.hooks().shrunk >= 1, "{t:?}");
    // Everything freed: trim gives every region back.
    for (p, size) in blocks.drain(..) {
        // SAFETY: live blocks, freed once.
        unsafe { pool.free(p, size).unwrap() };
    }
    // SAFETY: a live block, freed once.
    unsafe { pool.free(big2, 8 * MIB).unwrap() };
    pool.trim();
    pool.check().unwrap();

    let st = pool.stats();
    let h = pool.hooks();
    assert!(h.live.is_empty(), "{:?}", h.live);
    assert_eq!(h.obtained, st.regions_obtained);
    assert_eq!(h.given_back, st.regions_given_back);
    assert_eq!(h.obtained, h.given_back);
    assert_eq!(h.grown, st.grown);
    assert_eq!(h.shrunk, st.shrunk);
    assert_eq!(
        h.obtained + h.grown + h.given_back + h.shrunk,
        st.hook_calls
    );
    assert_eq!(st.reserved, 0);
    assert_eq!(pool.source().0.mapped(), 0);
    println!("{st:?}");
}
