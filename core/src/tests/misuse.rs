//! Misuse that must be refused without writing a byte, one test per way of getting it wrong:
//! frees queued while the lock is held, zero sizes, absurd constructor parameters, blocks of
//! another heap, generation wrap, the error of a double free after a merge, exact best fit at
//! the extreme sizes, and re-entry into a locked heap.

extern crate std;
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::Duration;

use super::inline::Arena;
use crate::{
    Counters, DetachedHeap, Error, GlobalHeap, HostGranule, InlineHeap, NoCounters, Record,
    SharedDetachedHeap, SpinLock, Stats, Tally,
};

/// Runs `f` on a thread of its own and fails the test, naming `what`, if it has not returned
/// within a few seconds (a hang would otherwise stall the whole test run; the hung thread is
/// left behind).
fn within<R: Send + 'static>(what: &str, f: impl FnOnce() -> R + Send + 'static) -> R {
    let (tx, rx) = mpsc::channel();
    let t = thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(Duration::from_secs(10)) {
        Ok(r) => {
            t.join().unwrap();
            r
        }
        Err(_) => panic!("{what}: hung (no return within 10 s)"),
    }
}

/// A global heap and the arena it manages, shareable with a thread that may outlive the test
/// if it hangs.
struct Fixture<K: Tally = Counters> {
    heap: GlobalHeap<SpinLock, 64, HostGranule, K>,
    _arena: Arena,
}

impl<K: Tally> core::ops::Deref for Fixture<K> {
    type Target = GlobalHeap<SpinLock, 64, HostGranule, K>;
    fn deref(&self) -> &Self::Target {
        &self.heap
    }
}

/// A global heap over an arena of `bytes`.
fn global(bytes: usize) -> Arc<Fixture> {
    global_over(bytes, GlobalHeap::new())
}

/// `heap`, with no regions yet, over an arena of `bytes`.
fn global_over<K: Tally>(
    bytes: usize,
    heap: GlobalHeap<SpinLock, 64, HostGranule, K>,
) -> Arc<Fixture<K>> {
    let mut arena = Arena::new(bytes);
    // SAFETY: the arena moves into the fixture with the heap, so it lives as long as the heap
    // (its buffer does not move), and nothing else uses it.
    unsafe { heap.add_region(arena.ptr(), arena.len()).unwrap() };
    Arc::new(Fixture {
        heap,
        _arena: arena,
    })
}

/// Fills `len` bytes at `p` with `tag`.
fn fill(p: core::ptr::NonNull<u8>, len: usize, tag: u8) {
    // SAFETY: callers pass a live allocation of at least `len` bytes.
    unsafe { p.as_ptr().write_bytes(tag, len) };
}

/// Whether `len` bytes at `p` all hold `tag`.
fn holds(p: core::ptr::NonNull<u8>, len: usize, tag: u8) -> bool {
    // SAFETY: as in `fill`.
    unsafe { core::slice::from_raw_parts(p.as_ptr(), len) }
        .iter()
        .all(|&b| b == tag)
}

/// Finding: a double free queued while the lock was held wrote its link into a free chunk,
/// which broke that chunk's bin; a later free then wrote into a live allocation.
#[test]
fn a_queued_double_free_writes_nothing_and_is_counted() {
    queued_double_free(global(1 << 16), |h| Some(h.stats().unwrap()));
}

/// The same on a heap without statistics: refused without a write, only not counted.
#[test]
fn a_queued_double_free_writes_nothing_without_stats() {
    let heap = GlobalHeap::from_heap(InlineHeap::without_stats());
    queued_double_free::<NoCounters>(global_over(1 << 16, heap), |_| None);
}

/// A double free queued behind the lock on `heap`, whose statistics `stats` reads where it
/// keeps them.
fn queued_double_free<K: Tally>(
    heap: Arc<Fixture<K>>,
    stats: fn(&GlobalHeap<SpinLock, 64, HostGranule, K>) -> Option<Stats>,
) {
    // Neighbours stay allocated so that `p`'s chunk stays a chunk of its own when freed.
    let a = heap.try_alloc(48, 16).unwrap();
    let p = heap.try_alloc(48, 16).unwrap();
    let b = heap.try_alloc(48, 16).unwrap();
    let q = heap.try_alloc(48, 16).unwrap();
    let c = heap.try_alloc(48, 16).unwrap();
    // SAFETY: `p` is a live allocation of 48 bytes.
    unsafe { heap.try_free(p, 48).unwrap() };
    // SAFETY: `q` likewise.
    unsafe { heap.try_free(q, 48).unwrap() };
    // The bin of 48-byte chunks now holds `p` then `q`.
    heap.with_heap(|_| {
        // The lock is held: this free is queued. It is a double free of `p`.
        // SAFETY: deliberately wrong (that is the test), but it must be refused, not obeyed.
        let _ = unsafe { heap.try_free(p, 48) };
    })
    .unwrap();
    if let Some(st) = stats(&heap) {
        assert_eq!(st.refused_frees, 1, "the queued double free is refused");
    }
    heap.with_heap(|h| h.check()).unwrap().unwrap();
    // Taking both free chunks back and freeing a live neighbour must not touch `a`'s bytes.
    fill(a, 48, 0xa5);
    let x = heap.try_alloc(48, 16).unwrap();
    let y = heap.try_alloc(48, 16).unwrap();
    // SAFETY: `b` is live, not used afterwards.
    unsafe { heap.try_free(b, 48).unwrap() };
    assert!(holds(a, 48, 0xa5), "a live allocation was written");
    heap.with_heap(|h| h.check()).unwrap().unwrap();
    for (ptr, len) in [(a, 48), (x, 48), (y, 48), (c, 48)] {
        // SAFETY: live allocations of this heap, freed once.
        unsafe { heap.try_free(ptr, len).unwrap() };
    }
    heap.with_heap(|h| h.check()).unwrap().unwrap();
    if let Some(st) = stats(&heap) {
        assert_eq!(st.in_use, 0);
    }
    // Everything is free again: the whole arena is one chunk, less its region header.
    let whole = heap.try_alloc((1 << 16) - 64, 16).unwrap();
    // SAFETY: live, not used afterwards.
    unsafe { heap.try_free(whole, (1 << 16) - 64).unwrap() };
}

/// Finding: a foreign pointer freed while the lock was held had 16 bytes written into it.
#[cfg(feature = "checked")]
#[test]
fn a_queued_foreign_free_writes_nothing_and_is_counted() {
    let heap = global(1 << 16);
    let mut outside = [0x5au8; 64];
    let ptr = core::ptr::NonNull::new(outside[16..].as_mut_ptr()).unwrap();
    heap.with_heap(|_| {
        // SAFETY: deliberately wrong: `ptr` is not from this heap. The checked build refuses it.
        let _ = unsafe { heap.try_free(ptr, 32) };
    })
    .unwrap();
    assert_eq!(heap.stats().unwrap().refused_frees, 1);
    assert!(
        outside.iter().all(|&b| b == 0x5a),
        "the foreign memory was written"
    );
    heap.with_heap(|h| h.check()).unwrap().unwrap();
}

/// Finding: zero sizes were refused by `InlineHeap` but served by `GlobalHeap`.
#[test]
fn every_front_end_refuses_zero_sizes() {
    let heap = global(1 << 16);
    assert_eq!(heap.try_alloc(0, 16), Err(Error::ZeroSize));
    let p = heap.try_alloc(100, 16).unwrap();
    assert_eq!(
        // SAFETY: `p` is live with 100 bytes; a refused realloc leaves it live.
        unsafe { heap.try_realloc(p, 100, 16, 0) },
        Err(Error::ZeroSize)
    );
    // SAFETY: still live after the refusal.
    unsafe { heap.try_free(p, 100).unwrap() };
    let mut table = [Record::VACANT; 8];
    let mut dev = DetachedHeap::new(&mut table[..], 256).unwrap();
    dev.add_region(0, 1 << 20).unwrap();
    assert_eq!(dev.alloc(0, 256), Err(Error::ZeroSize));
    let shared: SharedDetachedHeap<_> = SharedDetachedHeap::new(dev);
    assert_eq!(shared.alloc(0, 1), Err(Error::ZeroSize));
    let mut a = Arena::new(1 << 12);
    let mut h = InlineHeap::new();
    // SAFETY: the arena outlives the heap and nothing else uses it.
    unsafe { h.add_region(a.ptr(), a.len()).unwrap() };
    assert_eq!(h.alloc(0, 16), Err(Error::ZeroSize));
}

/// Finding: `with_granule(1 << 63)` was accepted, and `alloc` then overflowed.
#[test]
fn constructors_refuse_absurd_granules() {
    for g in [0, 3, 8, 1 << 31, 1 << 40, 1 << 63, usize::MAX] {
        assert_eq!(
            InlineHeap::with_granule(g).err(),
            Some(Error::BadGranule),
            "inline granule {g:#x}"
        );
    }
    for g in [0, 3, 1 << 31, 1 << 63, usize::MAX] {
        let mut table = [Record::VACANT; 4];
        assert_eq!(
            DetachedHeap::new(&mut table[..], g).err(),
            Some(Error::BadGranule),
            "detached granule {g:#x}"
        );
    }
    // The largest granule accepted still works end to end.
    let mut table = [Record::VACANT; 8];
    let mut dev = DetachedHeap::new(&mut table[..], 1 << 30).unwrap();
    dev.add_region(1 << 30, 4 << 30).unwrap();
    let b = dev.alloc(1, 1).unwrap();
    assert_eq!(dev.usable_size(&b), Ok(1 << 30));
    dev.free(b).unwrap();
    dev.check().unwrap();
    let mut h = InlineHeap::with_granule(1 << 30).unwrap();
    assert_eq!(h.alloc(1, 1), Err(Error::OutOfMemory));
    let mut a = Arena::new(1 << 12);
    // SAFETY: the arena outlives the heap and nothing else uses it.
    let r = unsafe { h.add_region(a.ptr(), a.len()) };
    assert!(
        r.is_err(),
        "a 4 KiB region cannot be 1 GiB-aligned and hold a chunk"
    );
}

/// Finding: two detached heaps over the same offsets hand out equal blocks, and one heap
/// freed the other's block as if it were its own.
#[test]
fn a_block_of_another_heap_is_refused() {
    let mut t1 = [Record::VACANT; 8];
    let mut t2 = [Record::VACANT; 8];
    let mut h1 = DetachedHeap::new(&mut t1[..], 256).unwrap();
    let mut h2 = DetachedHeap::new(&mut t2[..], 256).unwrap();
    h1.add_region(0, 1 << 20).unwrap();
    h2.add_region(0, 1 << 20).unwrap();
    let mine = h1.alloc(1000, 256).unwrap();
    let theirs = h2.alloc(1000, 256).unwrap();
    assert_eq!(h1.free(theirs), Err(Error::ForeignPointer));
    assert_eq!(h1.stats().live, 1, "h1's own allocation must still be live");
    h1.free(mine).unwrap();
    h2.free(theirs).unwrap();
}

/// Finding: the record generation was 32 bits, so after 2^32 reuses of one record a stale
/// block matched the record's current allocation and freed it.
#[test]
fn a_stale_block_never_matches_after_the_generation_passes_32_bits() {
    let mut table = [Record::VACANT; 8];
    let mut h = DetachedHeap::new(&mut table[..], 256).unwrap();
    h.add_region(0, 1 << 20).unwrap();
    let stale = h.alloc(1 << 20, 1).unwrap();
    h.free(stale).unwrap();
    // Age the record as 2^32 − 1 more hand-outs would.
    let i = stale.handle.index();
    h.records_mut()[i].gen += (1 << 32) - 1;
    let live = h.alloc(1 << 20, 1).unwrap();
    assert_eq!(
        live.handle.index(),
        stale.handle.index(),
        "the same record again"
    );
    assert_eq!(h.free(stale), Err(Error::DoubleFree));
    assert_eq!(
        h.stats().live,
        1,
        "the current allocation must still be live"
    );
    h.free(live).unwrap();
}

/// Finding: with `checked`, a double free of a chunk that has since merged with a free
/// neighbour was reported as `ForeignPointer`.
#[cfg(feature = "checked")]
#[test]
fn a_double_free_after_a_merge_is_reported_as_such() {
    let mut a = Arena::new(1 << 14);
    let mut h = InlineHeap::new();
    // SAFETY: the arena outlives the heap and nothing else uses it.
    unsafe { h.add_region(a.ptr(), a.len()).unwrap() };
    let x = h.alloc(64, 16).unwrap();
    let y = h.alloc(64, 16).unwrap();
    let _z = h.alloc(64, 16).unwrap();
    // SAFETY: live allocations, freed once; `y` merges into `x`'s free chunk.
    unsafe {
        h.free_checked(x, 64).unwrap();
        h.free_checked(y, 64).unwrap();
    }
    // SAFETY: deliberately a double free; the checked path refuses it.
    assert_eq!(unsafe { h.free_checked(y, 64) }, Err(Error::DoubleFree));
    // A pointer into a free chunk that no allocation could have had is foreign.
    let odd = core::ptr::NonNull::new(y.as_ptr().wrapping_add(3)).unwrap();
    assert_eq!(
        // SAFETY: deliberately foreign; the checked path refuses it.
        unsafe { h.free_checked(odd, 8) },
        Err(Error::ForeignPointer)
    );
    h.check().unwrap();
}

/// Finding: a free chunk of exactly `usize::MAX` granules was never chosen by the tree-bin
/// search, which started its best size at `usize::MAX` and compared strictly.
#[test]
fn exact_best_fit_holds_at_the_largest_sizes() {
    let mut table = [Record::VACANT; 8];
    let mut h = DetachedHeap::new(&mut table[..], 1).unwrap();
    h.add_region(0, usize::MAX).unwrap();
    assert_eq!(h.stats().largest_free, usize::MAX);
    // Each of these is served from a free chunk larger than any request can be.
    let a = h.alloc(1 << 62, 1).unwrap();
    assert_eq!(a.addr, 0);
    let b = h.alloc(1 << 62, 1).unwrap();
    assert_eq!(b.addr, 1 << 62);
    // What is left is exactly the largest request the size rules allow.
    let rest = h.alloc(isize::MAX as usize, 1).unwrap();
    assert_eq!(rest.addr, 1 << 63);
    assert_eq!(h.stats().free, 0);
    for block in [b, a, rest] {
        h.free(block).unwrap();
    }
    h.check().unwrap();
    assert_eq!(h.stats().largest_free, usize::MAX);
    // The largest request the size rules allow, on a heap that has it.
    let largest = isize::MAX as usize;
    let b = h.alloc(largest, 1).unwrap();
    assert_eq!((b.addr, h.usable_size(&b)), (0, Ok(largest)));
    assert_eq!(h.alloc(largest + 1, 1), Err(Error::SizeOverflow));
    h.free(b).unwrap();
    h.check().unwrap();
    // Inline: sizes at the edge of what the size rules allow are refused, not wrapped.
    let mut a = Arena::new(1 << 12);
    let mut ih = InlineHeap::new();
    // SAFETY: the arena outlives the heap and nothing else uses it.
    unsafe { ih.add_region(a.ptr(), a.len()).unwrap() };
    for size in [isize::MAX as usize - 8, isize::MAX as usize, usize::MAX] {
        assert_eq!(
            ih.alloc(size, 16),
            Err(Error::SizeOverflow),
            "size {size:#x}"
        );
        assert_eq!(
            ih.alloc(size, 4096),
            Err(Error::SizeOverflow),
            "size {size:#x}"
        );
    }
    let all = ih.stats().largest_request;
    let p = ih.alloc(all, 16).unwrap();
    assert_eq!(ih.alloc(1, 1), Err(Error::OutOfMemory));
    // SAFETY: live, freed once.
    unsafe { ih.free(p, all).unwrap() };
    ih.check().unwrap();
}

/// Finding: an allocation inside `GlobalHeap::with_heap` on the same thread spun forever.
#[test]
fn allocating_inside_with_heap_is_refused_not_a_hang() {
    let heap = global(1 << 16);
    let h = heap.clone();
    let r = within("try_alloc inside with_heap", move || {
        h.with_heap(|_| h.try_alloc(16, 16).map(|p| p.addr().get()))
    });
    assert_eq!(r, Ok(Err(Error::Reentrant)));
    // Nothing was allocated, and the heap is usable once the lock is given back.
    assert_eq!(heap.stats().unwrap().live, 0);
    assert!(heap.try_alloc(16, 16).is_ok());
}

/// Finding: `SharedDetachedHeap::free` inside `with_heap`, with the ring full, spun forever.
#[test]
fn freeing_into_a_full_ring_inside_with_heap_is_refused_not_a_hang() {
    let mut dev = DetachedHeap::new(std::vec![Record::VACANT; 16], 256).unwrap();
    dev.add_region(0, 1 << 20).unwrap();
    let heap: Arc<SharedDetachedHeap<_, SpinLock, 2>> = Arc::new(SharedDetachedHeap::new(dev));
    let blocks = [(); 3].map(|_| heap.alloc(256, 256).unwrap());
    let h = heap.clone();
    let r = within("free into a full ring inside with_heap", move || {
        h.with_heap(|_| blocks.map(|b| h.free(b)))
    });
    // Two are queued; the third finds the ring full and the lock held by its own thread.
    assert_eq!(r, Ok([Ok(()), Ok(()), Err(Error::Reentrant)]));
    assert_eq!(heap.stats().unwrap().live, 1);
}
