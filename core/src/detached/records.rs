//! The host-side table of chunk records behind detached tags, and the storage it lives in.
//!
//! Records are named by [`Idx`], and every reference from one record to another (a neighbour,
//! a bin link, a region) is an `Option<Idx>`, four bytes with no separate tag. Vacant records
//! form a free list through their `next` field. Without the `alloc` feature the table is a
//! slice the caller supplies (a `static`, a stack array, anything); with it, a `Vec` that grows
//! on demand.

use core::num::NonZeroU32;

use bitflags::bitflags;

/// The most records a table can use: indices `0..MAX_RECORDS`, each stored plus one in a
/// `NonZeroU32`.
pub(crate) const MAX_RECORDS: usize = u32::MAX as usize;

/// A record's index in the table, stored plus one so that `Option<Idx>` is one `u32`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Idx(NonZeroU32);

impl Idx {
    /// Record `i` (below [`MAX_RECORDS`]).
    #[inline]
    pub(crate) fn new(i: usize) -> Idx {
        debug_assert!(i < MAX_RECORDS);
        Idx(NonZeroU32::new((i as u32).wrapping_add(1)).unwrap_or(NonZeroU32::MAX))
    }

    /// The index into the table.
    #[inline]
    pub(crate) fn get(self) -> usize {
        (self.0.get() - 1) as usize
    }
}

bitflags! {
    /// What a record is.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
    pub(crate) struct Kind: u8 {
        /// A chunk of managed memory (else: vacant, on the free list).
        const CHUNK = 1;
        /// The chunk is free.
        const FREE = 2;
        /// A region descriptor rather than a chunk.
        const REGION = 4;
    }
}

/// One entry of the detached table: a chunk, a region, or vacant. Opaque outside the crate;
/// only its size matters to whoever supplies the storage.
///
/// For a chunk: `addr` is its first byte in managed memory, `size` its length in granules,
/// `prev`/`next` its physical neighbours in the region (`None` at the edges), `links` its bin
/// links while free, `region` its region's record, `gen` a counter bumped each time it is
/// handed out, so stale handles are recognised (64 bits: a record reused once a nanosecond
/// would take 584 years to wrap). For a region: `addr` is its base, `size` its
/// length in granules, `next` the next region, `prev` its last chunk, `links[0]` its first.
///
/// A record is 64 bytes on 64-bit targets; a heap needs one per chunk (free or in use) and one
/// per region.
///
/// # Examples
///
/// ```
/// # fn main() -> Result<(), tagalloc::Error> {
/// use tagalloc::{DetachedHeap, Error, Record};
///
/// let mut table = [Record::VACANT; 3]; // one region record and two chunks at most
/// let mut h = DetachedHeap::new(&mut table[..], 16)?;
/// h.add_region(0, 4096)?;
/// let a = h.alloc(16, 16)?; // the region's chunk splits: the third record
/// assert_eq!(h.alloc(16, 16), Err(Error::OutOfRecords));
/// h.free(a)?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Record {
    pub(crate) addr: usize,
    pub(crate) size: usize,
    pub(crate) prev: Option<Idx>,
    pub(crate) next: Option<Idx>,
    pub(crate) links: [Option<Idx>; 5],
    pub(crate) region: Option<Idx>,
    pub(crate) gen: u64,
    pub(crate) kind: Kind,
}

impl Record {
    /// A vacant record, to fill caller-supplied storage with: `[Record::VACANT; N]`.
    pub const VACANT: Record = Record {
        addr: 0,
        size: 0,
        prev: None,
        next: None,
        links: [None; 5],
        region: None,
        gen: 0,
        kind: Kind::empty(),
    };
}

/// Storage for the detached table: a slice the caller supplies (fixed), or with the `alloc`
/// feature a `Vec` that grows. Implement it for other storage (a static pool, memory from a
/// backend).
///
/// # Examples
///
/// A store that grows a fixed-capacity buffer in steps of 32 records:
///
/// ```
/// # fn main() -> Result<(), tagalloc::Error> {
/// use tagalloc::{DetachedHeap, Record, RecordStore};
///
/// struct Steps { buf: [Record; 128], used: usize }
///
/// impl RecordStore for Steps {
///     fn records(&self) -> &[Record] { &self.buf[..self.used] }
///     fn records_mut(&mut self) -> &mut [Record] { &mut self.buf[..self.used] }
///     fn grow(&mut self) -> bool {
///         let room = self.used < self.buf.len();
///         self.used = (self.used + 32).min(self.buf.len());
///         room
///     }
/// }
///
/// let mut h = DetachedHeap::new(Steps { buf: [Record::VACANT; 128], used: 0 }, 64)?;
/// h.add_region(0, 1 << 16)?;
/// let blocks: Vec<_> = (0..50).map(|_| h.alloc(64, 64)).collect::<Result<_, _>>()?;
/// assert_eq!(h.stats().live, 50);
/// # let _ = blocks;
/// # Ok(())
/// # }
/// ```
pub trait RecordStore {
    /// All records, vacant ones included.
    fn records(&self) -> &[Record];
    /// All records, mutably.
    fn records_mut(&mut self) -> &mut [Record];
    /// Adds vacant records ([`Record::VACANT`]) at the end, keeping the existing ones as they
    /// are; returns `false` if the storage cannot grow.
    fn grow(&mut self) -> bool {
        false
    }
}

impl RecordStore for &mut [Record] {
    fn records(&self) -> &[Record] {
        self
    }
    fn records_mut(&mut self) -> &mut [Record] {
        self
    }
}

#[cfg(feature = "alloc")]
impl RecordStore for alloc::vec::Vec<Record> {
    fn records(&self) -> &[Record] {
        self
    }
    fn records_mut(&mut self) -> &mut [Record] {
        self
    }
    fn grow(&mut self) -> bool {
        let add = self.len().clamp(64, 1 << 16);
        if self.len() + add > MAX_RECORDS {
            return false;
        }
        self.resize(self.len() + add, Record::VACANT);
        true
    }
}
