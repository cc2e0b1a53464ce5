//! Detached tags: every chunk is a record in a host-side table, and the managed memory is
//! never read or written. This is what device memory needs (the CPU cannot touch it), and it
//! works for any address space: device pointers, offsets into a buffer, file offsets. The
//! public heap over these tags is `crate::detached::heap`.

use crate::algo::geometry::Geometry;
use crate::algo::tags::{Link, Tags};
use crate::detached::records::{Idx, Kind, Record, RecordStore, MAX_RECORDS};
use crate::error::{CheckError, Error};
use core::num::NonZeroU32;

/// Detached tag storage over a [`RecordStore`].
///
/// Invariants: records `0..fresh` are chunks, regions, or vacant and on the `vacant` list
/// (`vacant_count` long); records `fresh..` were never used. A region's chunks form a
/// `prev`/`next` list of contiguous addresses from its `links[FIRST]` to its `prev`, each naming
/// the region in its `region` field. Regions form a list through `next` from `regions`.
pub(crate) struct DetachedTags<S> {
    pub(super) store: S,
    /// The heap's identity, carried by every handle it makes.
    pub(super) id: NonZeroU32,
    pub(super) layout: Geometry,
    pub(super) fresh: usize,
    pub(super) vacant: Option<Idx>,
    pub(super) vacant_count: usize,
    pub(super) regions: Option<Idx>,
}

/// Index of a region's first chunk in its record's `links`.
const FIRST: usize = 0;

impl<S: RecordStore> DetachedTags<S> {
    #[inline]
    pub(super) fn rec(&self, i: Idx) -> &Record {
        &self.store.records()[i.get()]
    }

    #[inline]
    /// Gives record `i` a new generation (a chunk handed out anew), returned: handles of its
    /// earlier lives no longer name it.
    pub(super) fn renew(&mut self, i: Idx) -> u64 {
        let r = self.rec_mut(i);
        r.gen = r.gen.wrapping_add(1);
        r.gen
    }

    fn rec_mut(&mut self, i: Idx) -> &mut Record {
        &mut self.store.records_mut()[i.get()]
    }

    /// How many records the table can use: all of the store, up to [`MAX_RECORDS`].
    #[inline]
    fn capacity(&self) -> usize {
        self.store.records().len().min(MAX_RECORDS)
    }

    /// Takes a vacant record; [`Tags::reserve`] must have made sure there is one.
    fn take_record(&mut self) -> Idx {
        match self.vacant {
            Some(i) => {
                self.vacant = self.rec(i).next;
                self.vacant_count -= 1;
                i
            }
            None => {
                self.fresh += 1;
                Idx::new(self.fresh - 1)
            }
        }
    }

    fn release_record(&mut self, i: Idx) {
        let vacant = self.vacant;
        let r = self.rec_mut(i);
        r.kind = Kind::empty();
        r.gen = r.gen.wrapping_add(1);
        r.next = vacant;
        self.vacant = Some(i);
        self.vacant_count += 1;
    }

    /// Points whatever follows chunk `c` (its successor, or its region's last-chunk link) back
    /// at `c`, given `c`'s `next` and `region`.
    #[inline]
    fn link_back(&mut self, c: Idx, next: Option<Idx>, region: Option<Idx>) {
        if let Some(owner) = next.or(region) {
            self.rec_mut(owner).prev = Some(c);
        }
    }

    /// A new in-use chunk record: `size` granules at `addr` in `region`, after `prev`, last in
    /// its region. A reused record keeps its generation, so that a handle from when it was a
    /// chunk can never match the chunk it becomes.
    fn new_chunk(&mut self, addr: usize, size: usize, prev: Option<Idx>, region: Idx) -> Idx {
        let c = self.take_record();
        let gen = self.rec(c).gen;
        *self.rec_mut(c) = Record {
            addr,
            size,
            prev,
            next: None,
            links: [None; 5],
            region: Some(region),
            gen,
            kind: Kind::CHUNK,
        };
        self.rec_mut(region).prev = Some(c);
        c
    }
}

impl<S: RecordStore> Tags for DetachedTags<S> {
    type Chunk = Idx;
    type Region = Idx;
    type Base = usize;

    #[inline]
    fn geometry(&self) -> &Geometry {
        &self.layout
    }

    #[inline]
    fn size(&self, c: Idx) -> usize {
        self.rec(c).size
    }

    #[inline]
    fn is_free(&self, c: Idx) -> bool {
        self.rec(c).kind.contains(Kind::FREE)
    }

    #[inline]
    fn payload(&self, c: Idx) -> usize {
        self.rec(c).addr
    }

    #[inline]
    fn addr(&self, c: Idx) -> usize {
        self.rec(c).addr
    }

    #[inline]
    fn next(&self, c: Idx) -> Option<Idx> {
        self.rec(c).next
    }

    #[inline]
    fn used_size(&self, c: Idx) -> Option<usize> {
        let r = self.rec(c);
        (!r.kind.contains(Kind::FREE)).then_some(r.size)
    }

    #[inline]
    fn next_if_free(&self, c: Idx, _size: usize) -> Option<(Idx, usize)> {
        let n = self.rec(c).next?;
        let r = self.rec(n);
        r.kind.contains(Kind::FREE).then_some((n, r.size))
    }

    #[inline]
    fn prev_if_free(&self, c: Idx) -> Option<(Idx, usize)> {
        let p = self.rec(c).prev?;
        let r = self.rec(p);
        r.kind.contains(Kind::FREE).then_some((p, r.size))
    }

    fn split(&mut self, c: Idx, head: usize) -> Idx {
        let t = self.take_record();
        let shift = self.layout.shift();
        let cr = *self.rec(c);
        *self.rec_mut(t) = Record {
            addr: cr.addr + (head << shift),
            size: cr.size - head,
            prev: Some(c),
            next: cr.next,
            links: [None; 5],
            region: cr.region,
            gen: self.rec(t).gen,
            kind: cr.kind,
        };
        self.link_back(t, cr.next, cr.region);
        let r = self.rec_mut(c);
        r.next = Some(t);
        r.size = head;
        t
    }

    fn absorb_next(&mut self, c: Idx) {
        let Some(n) = self.rec(c).next else { return };
        let nr = *self.rec(n);
        let r = self.rec_mut(c);
        r.size += nr.size;
        r.next = nr.next;
        self.link_back(c, nr.next, nr.region);
        self.release_record(n);
    }

    #[inline]
    fn carve(&mut self, c: Idx, size: usize, need: usize) -> Option<Idx> {
        // The minimum chunk is one granule: any rest stands alone.
        let tail = (size > need).then(|| self.take_record());
        let shift = self.layout.shift();
        let r = self.rec_mut(c);
        r.kind = Kind::CHUNK;
        r.gen = r.gen.wrapping_add(1);
        let t = tail?;
        let (addr, next, region) = (r.addr, r.next, r.region);
        r.size = need;
        r.next = Some(t);
        let tr = self.rec_mut(t);
        tr.addr = addr + (need << shift);
        tr.size = size - need;
        tr.prev = Some(c);
        tr.next = next;
        tr.kind = Kind::CHUNK | Kind::FREE;
        tr.region = region;
        // The tail's links are written when it is filed.
        self.link_back(t, next, region);
        Some(t)
    }

    #[inline(always)]
    fn free_merged(&mut self, c: Idx, prev: Option<Idx>, next: Option<Idx>, size: usize) -> Idx {
        let m = prev.unwrap_or(c);
        if prev.is_some() || next.is_some() {
            // Link the merged chunk to what follows its last part.
            let last = self.rec(next.unwrap_or(c));
            let (after, region) = (last.next, last.region);
            self.link_back(m, after, region);
            self.rec_mut(m).next = after;
        }
        let r = self.rec_mut(m);
        r.size = size;
        r.kind = Kind::CHUNK | Kind::FREE;
        if prev.is_some() {
            self.release_record(c);
        }
        if let Some(n) = next {
            self.release_record(n);
        }
        m
    }

    fn reserve(&mut self, n: usize) -> Result<(), Error> {
        while self.vacant_count + (self.capacity() - self.fresh) < n {
            if !self.store.grow() {
                return Err(Error::OutOfRecords);
            }
        }
        Ok(())
    }

    #[inline]
    fn link(&self, c: Idx, l: Link) -> Option<Idx> {
        self.rec(c).links[l as usize]
    }

    #[inline]
    fn set_link(&mut self, c: Idx, l: Link, v: Option<Idx>) {
        self.rec_mut(c).links[l as usize] = v;
    }

    #[inline]
    fn base_addr(b: usize) -> usize {
        b
    }

    fn first_region(&self) -> Option<Idx> {
        self.regions
    }

    fn next_region(&self, r: Idx) -> Option<Idx> {
        self.rec(r).next
    }

    fn region_base(&self, r: Idx) -> usize {
        self.rec(r).addr
    }

    fn region_len(&self, r: Idx) -> usize {
        self.rec(r).size << self.layout.shift()
    }

    fn region_first_chunk(&self, r: Idx) -> Idx {
        // A region record always names its first chunk; a broken one reads as the region
        // itself, which `check_tags` reports as "record is not a chunk".
        self.rec(r).links[FIRST].unwrap_or(r)
    }

    fn region_granules(&self, r: Idx) -> usize {
        self.rec(r).size
    }

    unsafe fn open_region(&mut self, base: usize, len: usize) -> Idx {
        let r = self.take_record();
        let gen = self.rec(r).gen;
        *self.rec_mut(r) = Record {
            addr: base,
            size: len >> self.layout.shift(),
            prev: None,
            next: self.regions,
            links: [None; 5],
            region: None,
            gen,
            kind: Kind::REGION,
        };
        self.regions = Some(r);
        let c = self.new_chunk(base, len >> self.layout.shift(), None, r);
        self.rec_mut(r).links[FIRST] = Some(c);
        c
    }

    unsafe fn grow_region(&mut self, r: Idx, len: usize) -> Idx {
        let granules = len >> self.layout.shift();
        let (end, last) = {
            let rec = self.rec(r);
            (rec.addr + (rec.size << self.layout.shift()), rec.prev)
        };
        let c = self.new_chunk(end, granules, last, r);
        if let Some(last) = last {
            self.rec_mut(last).next = Some(c);
        }
        self.rec_mut(r).size += granules;
        c
    }

    fn region_last_free(&self, r: Idx) -> Option<(Idx, usize)> {
        let last = self.rec(r).prev?;
        let rec = self.rec(last);
        rec.kind.contains(Kind::FREE).then_some((last, rec.size))
    }

    fn cut_region(&mut self, r: Idx, last: Idx, size: usize, len: usize) {
        self.rec_mut(last).size = size;
        self.rec_mut(r).size = len >> self.layout.shift();
    }

    fn close_region(&mut self, r: Idx, before: Option<Idx>, c: Idx) {
        let next = self.rec(r).next;
        match before {
            Some(b) => self.rec_mut(b).next = next,
            None => self.regions = next,
        }
        self.release_record(c);
        self.release_record(r);
    }

    fn check_tags(&self, c: Idx, first: bool) -> Result<(), CheckError> {
        let len = self.capacity();
        let r = self.rec(c);
        if !r.kind.contains(Kind::CHUNK) || r.kind.contains(Kind::REGION) {
            return Err(CheckError::new("record is not a chunk", r.addr));
        }
        if first != r.prev.is_none() {
            return Err(CheckError::new("chunk's predecessor link is wrong", r.addr));
        }
        let region = r
            .region
            .filter(|g| g.get() < len && self.rec(*g).kind.contains(Kind::REGION))
            .map(|g| self.rec(g))
            .ok_or(CheckError::new("chunk's region link is wrong", r.addr))?;
        if first && r.addr != region.addr {
            return Err(CheckError::new(
                "first chunk does not start its region",
                r.addr,
            ));
        }
        match r.next {
            None if region.prev != Some(c) => {
                Err(CheckError::new("region's last-chunk link is wrong", r.addr))
            }
            None => Ok(()),
            Some(n) if n.get() >= len => {
                Err(CheckError::new("successor index out of the table", r.addr))
            }
            Some(n) => {
                let nr = self.rec(n);
                if nr.prev != Some(c) || nr.addr != r.addr + (r.size << self.layout.shift()) {
                    return Err(CheckError::new("successor is not contiguous", r.addr));
                }
                Ok(())
            }
        }
    }
}
