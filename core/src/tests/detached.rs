//! Out-of-band heap: smoke tests over caller-supplied record storage.

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
    h.add_region(1 << 20, 1 << 20).unwrap();
    assert_eq!(h.stats().free_chunks, 1);
    assert_eq!(h.add_region(100, 4096), Err(Error::RegionMisaligned));
    assert_eq!(h.add_region(1 << 19, 1 << 20), Err(Error::RegionOverlap));
    h.check().unwrap();
    assert_eq!(h.remove_region(0), Ok((0, 2 << 20)));
    h.check().unwrap();
}

use crate::Block;
