//! Inline tags: boundary tags inside the managed host memory, dlmalloc-style, no side storage.
//!
//! A chunk starts at an address `≡ granule − word (mod granule)`, so its payload, one word
//! further, is granule-aligned. Layout of a chunk of `S` bytes at `c` (`W` = one word):
//!
//! ```text
//! c          head: S | IN_USE | PREV_IN_USE
//! c + W      payload (in use)      | Next, Prev, Left, Right, Parent links (free)
//! c + S − W  payload (in use)      | footer: S (free), read by the successor to find `c`
//! ```
//!
//! An in-use chunk's last word is payload, so the tag overhead is one word per allocation. A
//! free chunk's footer lets its successor find it; the successor's `PREV_IN_USE` bit says
//! whether that footer is valid. Each region starts with a [`RegionHeader`] and ends with a
//! *fence*: a head word of size 0 marked in use, which stops every walk and merge.

use core::marker::PhantomData;
use core::ptr::NonNull;

use crate::algo::geometry::{Geometry, W};
use crate::algo::tags::{Link, Tags};
use crate::error::{CheckError, Error};
use crate::inline::granule::Granule;

pub(super) const IN_USE: usize = 1;
pub(super) const PREV_IN_USE: usize = 2;
pub(super) const FLAGS: usize = IN_USE | PREV_IN_USE;
/// What a chunk's head word becomes when a merge absorbs the chunk into a free neighbour: not
/// in use (so the free path's one test of the head refuses a later free of it as a double
/// free) and no size a chunk can have (not a whole number of granules), so no live or free
/// head ever holds it and a report can tell it from other damage.
pub(super) const ABSORBED: usize = 0xF4EE_D0D0_F4EE_D0D4_u64 as usize;

/// The first bytes of every inline region; regions form a singly linked list.
#[derive(Clone, Copy)]
#[repr(C)]
pub(crate) struct RegionHeader {
    next: *mut RegionHeader,
    /// One past the region's last byte (granule-aligned). The fence is the word before it.
    end: usize,
}

/// An inline chunk: the address of its head word.
///
/// Invariant: it is the head of a chunk (or the fence) inside a region of the heap that made
/// it, so every word the placement reads or writes through it lies between that region's
/// header and its fence, in memory the heap owns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Chunk(pub(super) NonNull<u8>);

impl Chunk {
    /// The chunk whose payload is `ptr` (not checked: see
    /// [`InlineHeap::free`](crate::InlineHeap::free)).
    ///
    /// # Safety
    /// `ptr` must be the payload of a chunk of one of the heap's regions (the contract of the
    /// unchecked free, realloc and usable size), so the word before it is that chunk's head.
    #[inline]
    pub(super) unsafe fn of_payload(ptr: NonNull<u8>) -> Chunk {
        // SAFETY: the head is one word before the payload, inside the same region (the
        // caller's promise), so the subtraction stays in bounds and is not null.
        Chunk(unsafe { ptr.byte_sub(W) })
    }

    /// The payload: one word into the chunk.
    pub(super) fn payload(self) -> NonNull<u8> {
        // SAFETY: the payload is one word into the chunk, inside it (type invariant).
        unsafe { self.0.add(W) }
    }

    fn addr(self) -> usize {
        self.0.addr().get()
    }

    /// The word `off` bytes into (or, negative, before) the chunk.
    ///
    /// # Safety
    /// The word must lie inside the chunk's region, between its header and its fence.
    #[inline]
    unsafe fn word_at(self, off: isize) -> NonNull<usize> {
        // SAFETY: the caller keeps the result inside the region, one allocation.
        unsafe { self.0.offset(off).cast() }
    }

    /// The chunk `bytes` further on in the same region.
    ///
    /// # Safety
    /// The result must be a chunk or the fence of the same region.
    #[inline]
    unsafe fn plus(self, bytes: usize) -> Chunk {
        // SAFETY: the caller's promise keeps the sum inside the region.
        Chunk(unsafe { self.0.add(bytes) })
    }
}

/// Inline tag storage: only the geometry and the list of regions live outside the memory.
///
/// Invariant: every [`Chunk`] passed to these methods satisfies its type invariant, and every
/// region on `regions` is memory the heap owns exclusively for as long as it is on the list
/// (the contract of [`InlineHeap::add_region`](crate::InlineHeap::add_region)). `G` says
/// whether the granule is a constant or read from `geometry` (see [`crate::inline::granule`]),
/// which holds it only for the latter.
pub(crate) struct InlineTags<G: Granule> {
    geometry: G::Stored,
    regions: Option<NonNull<RegionHeader>>,
    granule: PhantomData<G>,
}

impl<G: Granule> InlineTags<G> {
    /// Tags with this geometry (what `G` stores of it) and no region yet.
    pub(super) const fn new(geometry: G::Stored) -> Self {
        InlineTags {
            geometry,
            regions: None,
            granule: PhantomData,
        }
    }

    #[inline]
    fn head(&self, c: Chunk) -> usize {
        // SAFETY: `c` is a chunk head or a fence in an owned region (type invariant); heads are
        // word-aligned (at `≡ −W (mod granule)`).
        unsafe { c.word_at(0).read() }
    }

    #[inline]
    fn set_head(&mut self, c: Chunk, v: usize) {
        // SAFETY: as in `head`; the heap owns the memory exclusively, so nothing else reads it.
        unsafe { c.word_at(0).write(v) }
    }

    #[inline]
    fn bytes(&self, c: Chunk) -> usize {
        self.head(c) & !FLAGS
    }

    /// The chunk (or fence) right after `c`.
    #[inline]
    fn after(&self, c: Chunk) -> Chunk {
        // SAFETY: a chunk is followed by another chunk or its region's fence.
        unsafe { c.plus(self.bytes(c)) }
    }

    /// Writes the footer of a free chunk of `bytes` bytes at `c` (its size in its last word).
    #[inline]
    fn set_footer(&mut self, c: Chunk, bytes: usize) {
        // SAFETY: a chunk is at least `min_chunk` granules (four words), so its last word is
        // inside it, after the head.
        unsafe { c.word_at(bytes as isize - W as isize).write(bytes) }
    }

    /// Sets or clears `flag` in `c`'s head: only ever `PREV_IN_USE`, when `c`'s predecessor
    /// changes state. `c` may then be a live block that another thread owns and whose head it
    /// reads without the lock
    /// ([`InlineHeap::unlocked_usable_size`](crate::InlineHeap::unlocked_usable_size)), so this
    /// word is read and written with relaxed atomic accesses, which compile to plain moves: no
    /// data race with that reader, and the size bits it wants are not changed here. Every
    /// other write of a head is of a chunk the lock holder owns (being allocated, freed or
    /// split), which no other thread reads; the heap's memory is outside what loom models,
    /// hence `core`'s atomics rather than `crate::sync`'s.
    #[inline]
    fn set_flag(&mut self, c: Chunk, flag: usize, on: bool) {
        // SAFETY: the head word of a chunk in an owned region (as in `head`), word-aligned,
        // and every access that may race with this one is atomic too (see above).
        let w = unsafe { core::sync::atomic::AtomicUsize::from_ptr(c.word_at(0).as_ptr()) };
        let h = w.load(core::sync::atomic::Ordering::Relaxed);
        w.store(
            if on { h | flag } else { h & !flag },
            core::sync::atomic::Ordering::Relaxed,
        );
    }

    /// A copy of region `r`'s header.
    fn header(r: NonNull<RegionHeader>) -> RegionHeader {
        // SAFETY: `r` is on the region list, so its header is initialised, aligned and owned.
        unsafe { r.read() }
    }
}

impl<G: Granule> Tags for InlineTags<G> {
    type Chunk = Chunk;
    type Region = NonNull<RegionHeader>;
    type Base = NonNull<u8>;

    #[inline]
    fn geometry(&self) -> &Geometry {
        G::geometry(&self.geometry)
    }

    #[inline]
    fn size(&self, c: Chunk) -> usize {
        self.geometry().granules_of(self.bytes(c))
    }

    #[inline]
    fn is_free(&self, c: Chunk) -> bool {
        self.head(c) & IN_USE == 0
    }

    #[inline]
    fn payload(&self, c: Chunk) -> usize {
        c.addr() + W
    }

    #[inline]
    fn addr(&self, c: Chunk) -> usize {
        c.addr()
    }

    #[inline]
    fn next(&self, c: Chunk) -> Option<Chunk> {
        let n = self.after(c);
        (self.bytes(n) != 0).then_some(n)
    }

    #[inline]
    fn used_size(&self, c: Chunk) -> Option<usize> {
        let h = self.head(c);
        (h & IN_USE != 0).then_some(self.geometry().granules_of(h))
    }

    #[inline]
    fn next_if_free(&self, c: Chunk, size: usize) -> Option<(Chunk, usize)> {
        // SAFETY: a chunk is followed by another chunk or its region's fence.
        let n = unsafe { c.plus(self.geometry().bytes_of(size)) };
        // The fence is marked in use, so one read of the successor's head answers both.
        let h = self.head(n);
        (h & IN_USE == 0).then_some((n, self.geometry().granules_of(h)))
    }

    #[inline]
    fn prev_if_free(&self, c: Chunk) -> Option<(Chunk, usize)> {
        if self.head(c) & PREV_IN_USE != 0 {
            return None;
        }
        // SAFETY: the predecessor is free, so the word before `c` is its footer, inside the
        // same region; the footer is the predecessor's size, so `c − size` is its head.
        unsafe {
            let bytes = c.word_at(-(W as isize)).read();
            Some((Chunk(c.0.sub(bytes)), self.geometry().granules_of(bytes)))
        }
    }

    fn split(&mut self, c: Chunk, head: usize) -> Chunk {
        let h = self.head(c);
        let bytes = h & !FLAGS;
        let keep = self.geometry().bytes_of(head);
        // SAFETY: `0 < keep < bytes`, so the tail starts inside the chunk.
        let tail = unsafe { c.plus(keep) };
        let used = h & IN_USE;
        self.set_head(c, keep | (h & FLAGS));
        self.set_head(
            tail,
            (bytes - keep) | used | if used != 0 { PREV_IN_USE } else { 0 },
        );
        if used == 0 {
            self.set_footer(c, keep);
            self.set_footer(tail, bytes - keep);
        }
        tail
    }

    fn absorb_next(&mut self, c: Chunk) {
        let h = self.head(c);
        let n = self.after(c);
        let merged = (h & !FLAGS) + self.bytes(n);
        self.set_head(c, merged | (h & FLAGS));
        if h & IN_USE == 0 {
            self.set_footer(c, merged);
        }
        let after = self.after(c);
        self.set_flag(after, PREV_IN_USE, h & IN_USE != 0);
    }

    #[inline]
    fn reserve(&mut self, _n: usize) -> Result<(), Error> {
        Ok(())
    }

    #[inline]
    fn carve(&mut self, c: Chunk, size: usize, need: usize) -> Option<Chunk> {
        // `c` is free, so its successor's `PREV_IN_USE` is clear and its footer holds its size;
        // only its own `PREV_IN_USE` bit is not known here.
        let prev = self.head(c) & PREV_IN_USE;
        if size >= need + self.geometry().min_chunk() {
            let keep = self.geometry().bytes_of(need);
            let rest = self.geometry().bytes_of(size - need);
            // SAFETY: `0 < keep < size` in bytes, so the tail head lies inside `c`.
            let tail = unsafe { c.plus(keep) };
            self.set_head(c, keep | IN_USE | prev);
            self.set_head(tail, rest | PREV_IN_USE);
            self.set_footer(tail, rest);
            // The successor stays as it was: its predecessor (the tail) is free.
            Some(tail)
        } else {
            let bytes = self.geometry().bytes_of(size);
            self.set_head(c, bytes | IN_USE | prev);
            // SAFETY: a chunk is followed by another chunk or its region's fence.
            let n = unsafe { c.plus(bytes) };
            self.set_flag(n, PREV_IN_USE, true);
            None
        }
    }

    #[inline]
    fn free_merged(
        &mut self,
        c: Chunk,
        prev: Option<Chunk>,
        next: Option<Chunk>,
        size: usize,
    ) -> Chunk {
        let start = prev.unwrap_or(c);
        let bytes = self.geometry().bytes_of(size);
        // The absorbed heads are marked, so that a second free of either is refused: they
        // lie inside the merged chunk, neither at its head nor at its footer.
        if prev.is_some() {
            self.set_head(c, ABSORBED);
        }
        if let Some(n) = next {
            self.set_head(n, ABSORBED);
        }
        // The merged chunk's predecessor is in use: `prev`'s is (no two free chunks are
        // adjacent), and without `prev`, `c`'s is.
        self.set_head(start, bytes | PREV_IN_USE);
        self.set_footer(start, bytes);
        if next.is_none() {
            // `next`'s successor already had the bit clear; `c`'s had it set.
            // SAFETY: the merged chunk is followed by another chunk or its region's fence.
            let after = unsafe { start.plus(bytes) };
            self.set_flag(after, PREV_IN_USE, false);
        }
        start
    }

    #[inline]
    fn link(&self, c: Chunk, l: Link) -> Option<Chunk> {
        // SAFETY: link words follow the head inside a free chunk; a chunk in an exact bin has
        // room for `Next` and `Prev` (min_chunk), one in a tree bin (≥ 65 granules) for all
        // five. Links are stored as pointers, keeping their provenance.
        let p = unsafe {
            c.word_at((W * (1 + l as usize)) as isize)
                .cast::<*mut u8>()
                .read()
        };
        NonNull::new(p).map(Chunk)
    }

    #[inline]
    fn set_link(&mut self, c: Chunk, l: Link, v: Option<Chunk>) {
        let p = v.map_or(core::ptr::null_mut(), |c| c.0.as_ptr());
        // SAFETY: as in `link`.
        unsafe {
            c.word_at((W * (1 + l as usize)) as isize)
                .cast::<*mut u8>()
                .write(p)
        }
    }

    #[inline]
    fn base_addr(b: NonNull<u8>) -> usize {
        b.addr().get()
    }

    fn first_region(&self) -> Option<NonNull<RegionHeader>> {
        self.regions
    }

    fn next_region(&self, r: NonNull<RegionHeader>) -> Option<NonNull<RegionHeader>> {
        NonNull::new(Self::header(r).next)
    }

    fn region_base(&self, r: NonNull<RegionHeader>) -> NonNull<u8> {
        r.cast()
    }

    fn region_len(&self, r: NonNull<RegionHeader>) -> usize {
        Self::header(r).end - r.addr().get()
    }

    fn region_first_chunk(&self, r: NonNull<RegionHeader>) -> Chunk {
        // SAFETY: the first chunk lies inside the region (checked when it was added).
        Chunk(unsafe { r.cast::<u8>().add(self.geometry().region_lead()) })
    }

    fn region_granules(&self, r: NonNull<RegionHeader>) -> usize {
        self.geometry()
            .granules_of(self.region_len(r) - self.geometry().region_overhead())
    }

    unsafe fn open_region(&mut self, base: NonNull<u8>, len: usize) -> Chunk {
        let span = len - self.geometry().region_overhead();
        let header = base.cast::<RegionHeader>();
        // SAFETY: the range is valid, ours, granule-aligned and large enough (the caller's
        // contract); the header, the first head and the fence all lie inside it, at
        // word-aligned offsets.
        unsafe {
            header.write(RegionHeader {
                next: self.regions.map_or(core::ptr::null_mut(), NonNull::as_ptr),
                end: base.addr().get() + len,
            });
            let c = Chunk(base.add(self.geometry().region_lead()));
            c.word_at(0).write(span | IN_USE | PREV_IN_USE);
            c.plus(span).word_at(0).write(IN_USE | PREV_IN_USE);
            self.regions = Some(header);
            c
        }
    }

    unsafe fn grow_region(&mut self, mut r: NonNull<RegionHeader>, len: usize) -> Chunk {
        let old_end = Self::header(r).end;
        // SAFETY: `r` is on the list; the old fence is inside the region and the new fence
        // inside the added range, both reachable through the region's pointer (the caller's
        // contract). The old fence becomes the new chunk's head, a new fence closes the region.
        unsafe {
            let fence = Chunk(r.cast::<u8>().add(old_end - W - r.addr().get()));
            let prev_in_use = self.head(fence) & PREV_IN_USE;
            self.set_head(fence, len | IN_USE | prev_in_use);
            self.set_head(fence.plus(len), IN_USE | PREV_IN_USE);
            r.as_mut().end = old_end + len;
            fence
        }
    }

    fn region_last_free(&self, r: NonNull<RegionHeader>) -> Option<(Chunk, usize)> {
        let end = Self::header(r).end;
        // SAFETY: the fence is the region's last word, inside it.
        let fence = Chunk(unsafe { r.cast::<u8>().add(end - W - r.addr().get()) });
        self.prev_if_free(fence)
    }

    fn cut_region(&mut self, mut r: NonNull<RegionHeader>, last: Chunk, size: usize, len: usize) {
        let bytes = self.geometry().bytes_of(size);
        // The last chunk keeps its `PREV_IN_USE` bit (its predecessor is in use: it is free
        // and no two free chunks are adjacent) and gets a new footer; the new fence follows it.
        let prev = self.head(last) & PREV_IN_USE;
        self.set_head(last, bytes | prev);
        self.set_footer(last, bytes);
        // SAFETY: the new fence is the word after the shortened chunk, inside the region's
        // old extent; `r` is on the list, its header ours to update.
        unsafe {
            self.set_head(last.plus(bytes), IN_USE);
            r.as_mut().end = r.addr().get() + len;
        }
    }

    fn close_region(
        &mut self,
        r: NonNull<RegionHeader>,
        before: Option<NonNull<RegionHeader>>,
        _c: Chunk,
    ) {
        let next = self.next_region(r);
        match before {
            // SAFETY: `b` is on the list, so its header is ours to update.
            Some(mut b) => unsafe {
                b.as_mut().next = next.map_or(core::ptr::null_mut(), NonNull::as_ptr)
            },
            None => self.regions = next,
        }
    }

    fn check_tags(&self, c: Chunk, first: bool) -> Result<(), CheckError> {
        let at = c.addr();
        let h = self.head(c);
        let bytes = h & !FLAGS;
        if bytes & (self.geometry().granule() - 1) != 0
            || bytes < self.geometry().bytes_of(self.geometry().min_chunk())
        {
            return Err(CheckError::new(
                "chunk size not a whole number of granules",
                at,
            ));
        }
        if first && h & PREV_IN_USE == 0 {
            return Err(CheckError::new("first chunk claims a free predecessor", at));
        }
        if h & IN_USE == 0 {
            // SAFETY: the caller checked that `c`'s size stays inside the region.
            let footer = unsafe { c.word_at(bytes as isize - W as isize).read() };
            if footer != bytes {
                return Err(CheckError::new(
                    "free chunk's footer disagrees with its head",
                    at,
                ));
            }
        }
        let n = self.after(c);
        let nh = self.head(n);
        if (nh & PREV_IN_USE != 0) != (h & IN_USE != 0) {
            return Err(CheckError::new("successor's PREV_IN_USE bit is wrong", at));
        }
        if nh & !FLAGS == 0 && nh & IN_USE == 0 {
            return Err(CheckError::new("region fence not marked in use", n.addr()));
        }
        Ok(())
    }
}
