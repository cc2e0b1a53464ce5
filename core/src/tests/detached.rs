//! Detached heap: smoke tests over caller-supplied record storage.

use crate::{DetachedHeap, Error, Record};

#[test]
fn detached_roundtrip_and_misuse() {
    let mut recs = [Record::VACANT; 64];
    let mut h = DetachedHeap::new(&mut recs[..], 256).unwrap();
    h.add_region(0, 1 << 20).unwrap();
    h.check().unwrap();
    let a = h.alloc(1000, 256).unwrap();
    let b = h.alloc(1, 4096).unwrap();
    assert_eq!(b.addr % 4096, 0);
    let c = h.alloc(70_000, 1).unwrap();
    h.check().unwrap();
    assert_eq!(
        h.free(Block {
            addr: a.addr + 256,
            ..a
        }),
        Err(Error::ForeignPointer)
    );
    assert_eq!(h.free(Block { size: 5000, ..a }), Err(Error::WrongSize));
    h.free(a).unwrap();
    assert_eq!(h.free(a), Err(Error::DoubleFree));
    let c = h.resize_in_place(c, 100).unwrap();
    let c = h.resize_in_place(c, 200_000).unwrap();
    h.check().unwrap();
    h.free(b).unwrap();
    h.free(c).unwrap();
    h.check().unwrap();
    assert_eq!(h.stats().free_chunks, 1);
    h.extend_region(0, 1 << 20).unwrap();
    assert_eq!(h.stats().free_chunks, 1);
    assert_eq!(h.stats().regions, 1);
    // An adjacent region that is not declared contiguous stays separate.
    h.add_region(2 << 20, 1 << 20).unwrap();
    assert_eq!((h.stats().free_chunks, h.stats().regions), (2, 2));
    assert_eq!(h.remove_region(2 << 20), Ok((2 << 20, 1 << 20)));
    assert_eq!(h.add_region(100, 4096), Err(Error::RegionMisaligned));
    assert_eq!(h.add_region(1 << 19, 1 << 20), Err(Error::RegionOverlap));
    h.check().unwrap();
    assert_eq!(h.remove_region(0), Ok((0, 2 << 20)));
    h.check().unwrap();
}

use crate::Block;

#[test]
fn detached_bad_inputs() {
    let mut recs = [Record::VACANT; 4];
    assert_eq!(
        DetachedHeap::new(&mut recs[..], 48).err(),
        Some(Error::BadGranule)
    );
    let mut h = DetachedHeap::new(&mut recs[..], 256).unwrap();
    assert_eq!(h.alloc(1, 1), Err(Error::OutOfMemory));
    assert_eq!(h.add_region(0, 255), Err(Error::RegionTooSmall));
    assert_eq!(
        h.add_region(usize::MAX - 255, 4096),
        Err(Error::RegionOverlap)
    );
    h.add_region(0, 1 << 16).unwrap();
    assert_eq!(h.alloc(0, 1), Err(Error::ZeroSize));
    assert_eq!(h.alloc(1, 6), Err(Error::BadAlign));
    assert_eq!(h.alloc(usize::MAX, 1), Err(Error::SizeOverflow));
    assert_eq!(h.alloc(1, 1 << 63), Err(Error::SizeOverflow));
    assert_eq!(h.alloc(1 << 17, 1), Err(Error::OutOfMemory));
    assert_eq!(h.remove_region(4096), Err(Error::UnknownRegion));
    // Four records: one region, then chunks. The table runs out before memory does.
    let a = h.alloc(1, 1).unwrap();
    let b = h.alloc(1, 1).unwrap();
    assert_eq!(h.alloc(1, 1), Err(Error::OutOfRecords));
    assert_eq!(h.remove_region(0), Err(Error::RegionInUse));
    h.check().unwrap();
    // A handle is only good for the block it was made for.
    assert_eq!(
        h.free(Block {
            handle: b.handle,
            ..a
        }),
        Err(Error::ForeignPointer)
    );
    h.free(a).unwrap();
    h.free(b).unwrap();
    assert_eq!(h.free(b), Err(Error::DoubleFree));
    assert_eq!(h.resize_in_place(b, 10), Err(Error::DoubleFree));
    assert_eq!(h.stats().refused_frees, 2);
    h.check().unwrap();
    assert_eq!(h.remove_region(0), Ok((0, 1 << 16)));
    h.check().unwrap();
}

/// A record that was a region and becomes a chunk again keeps its generation, so a handle from
/// an earlier life of the record never matches (found by the `misuse` fuzz target).
#[test]
fn stale_block_never_matches_a_reused_record() {
    let mut recs = [Record::VACANT; 3];
    let mut h = DetachedHeap::new(&mut recs[..], 256).unwrap();
    h.add_region(0x10000, 0x10000).unwrap();
    h.remove_region(0x10000).unwrap();
    h.add_region(0x10000, 0x2000).unwrap();
    let a = h.alloc(1, 1).unwrap();
    h.free(a).unwrap();
    h.remove_region(0x10000).unwrap();
    h.add_region(0x100000, 0x9000).unwrap();
    h.remove_region(0x100000).unwrap();
    h.add_region(0x10000, 0x10000).unwrap();
    let b = h.alloc(1, 1).unwrap();
    assert_eq!(
        b.addr, a.addr,
        "the set-up reuses the stale block's address"
    );
    assert_eq!(h.free(a), Err(Error::DoubleFree));
    assert_eq!(h.stats().live, 1);
    h.free(b).unwrap();
    h.check().unwrap();
}

/// A live block split in two gives two live blocks that free separately and merge back; a
/// stale handle of the whole block is refused, and a split that would leave an empty part is
/// no split.
#[test]
fn a_live_block_splits_in_two_live_blocks() {
    let mut recs = [Record::VACANT; 8];
    let mut h = DetachedHeap::new(&mut recs[..], 256).unwrap();
    h.add_region(0, 1 << 16).unwrap();
    let whole = h.alloc(4096, 1).unwrap();
    let in_use = h.stats().in_use;
    let (head, tail) = h.split(whole, 1000).unwrap();
    let tail = tail.expect("a tail of 3 KiB");
    assert_eq!((head.addr, head.size), (whole.addr, 1024));
    assert_eq!((tail.addr, tail.size), (whole.addr + 1024, 3072));
    assert_eq!(h.stats().in_use, in_use, "a split allocates nothing");
    assert_eq!(h.stats().live, 2);
    h.check().unwrap();
    assert_eq!(
        h.split(head, 1024).unwrap(),
        (head, None),
        "nothing left over"
    );
    assert_eq!(h.split(head, 0).unwrap(), (head, None), "nothing kept");
    // Merged back: one live block of 4 KiB with the head's handle.
    assert_eq!(
        h.merge(tail, head),
        Err(Error::ForeignPointer),
        "not in that order"
    );
    let merged = h.merge(head, tail).unwrap();
    assert_eq!((merged.addr, merged.size), (whole.addr, 4096));
    assert_eq!(h.stats().live, 1);
    assert_eq!(h.stats().in_use, in_use);
    assert_eq!(
        h.free(tail),
        Err(Error::DoubleFree),
        "the tail's handle is stale"
    );
    h.check().unwrap();
    let (head, tail) = h.split(merged, 1000).unwrap();
    let tail = tail.unwrap();
    h.free(tail).unwrap();
    assert_eq!(h.free(tail), Err(Error::DoubleFree));
    h.check().unwrap();
    assert_eq!(
        h.merge(head, tail),
        Err(Error::DoubleFree),
        "a freed neighbour"
    );
    h.free(head).unwrap();
    assert_eq!(h.free(whole), Err(Error::DoubleFree));
    assert_eq!(h.split(whole, 256), Err(Error::DoubleFree));
    h.check().unwrap();
    assert_eq!(h.stats().free_chunks, 1);
    assert_eq!(h.remove_region(0), Ok((0, 1 << 16)));
}
