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

use crate::error::{as_pair, BlockError, CheckError, Error};
use crate::granule::{AnyGranule, Granule, HostGranule};
use crate::heap::Heap;
use crate::layout::{Layout, W};
use crate::shape::{BinShape, Compact, Wide};
use crate::stats::{Counters, NoCounters, Stats, Tally};
use crate::tags::{Link, Tags};

mod probe;

const IN_USE: usize = 1;
const PREV_IN_USE: usize = 2;
const FLAGS: usize = IN_USE | PREV_IN_USE;
/// What a chunk's head word becomes when a merge absorbs the chunk into a free neighbour: not
/// in use (so the free path's one test of the head refuses a later free of it as a double
/// free) and no size a chunk can have (not a whole number of granules), so no live or free
/// head ever holds it and a report can tell it from other damage.
const ABSORBED: usize = 0xF4EE_D0D0_F4EE_D0D4_u64 as usize;
/// The default granule of a host heap.
pub const HOST_GRANULE: usize = 16;

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
pub(crate) struct Chunk(NonNull<u8>);

impl Chunk {
    /// The chunk whose payload is `ptr` (not checked: see [`InlineHeap::free`]).
    ///
    /// # Safety
    /// `ptr` must be the payload of a chunk of one of the heap's regions (the contract of the
    /// unchecked free, realloc and usable size), so the word before it is that chunk's head.
    #[inline]
    unsafe fn of_payload(ptr: NonNull<u8>) -> Chunk {
        // SAFETY: the head is one word before the payload, inside the same region (the
        // caller's promise), so the subtraction stays in bounds and is not null.
        Chunk(unsafe { ptr.byte_sub(W) })
    }

    /// The payload: one word into the chunk.
    fn payload(self) -> NonNull<u8> {
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

/// Inline tag storage: only the layout and the list of regions live outside the memory.
///
/// Invariant: every [`Chunk`] passed to these methods satisfies its type invariant, and every
/// region on `regions` is memory the heap owns exclusively for as long as it is on the list
/// (the contract of [`InlineHeap::add_region`]). `G` says whether the granule is a constant
/// or read from `layout` (see [`crate::granule`]), which holds it only for the latter.
pub(crate) struct InlineTags<G: Granule> {
    layout: G::Stored,
    regions: Option<NonNull<RegionHeader>>,
    granule: PhantomData<G>,
}

impl<G: Granule> InlineTags<G> {
    /// Tags with this layout (what `G` stores of it) and no region yet.
    const fn new(layout: G::Stored) -> Self {
        InlineTags {
            layout,
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
    /// reads without the lock ([`InlineHeap::unlocked_usable_size`]), so this word is read and
    /// written with relaxed atomic accesses, which compile to plain moves: no data race with
    /// that reader, and the size bits it wants are not changed here. Every other write of a
    /// head is of a chunk the lock holder owns (being allocated, freed or split), which no
    /// other thread reads; the heap's memory is outside what loom models, hence `core`'s
    /// atomics rather than `crate::sync`'s.
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
    fn layout(&self) -> &Layout {
        G::layout(&self.layout)
    }

    #[inline]
    fn size(&self, c: Chunk) -> usize {
        self.layout().granules_of(self.bytes(c))
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
        (h & IN_USE != 0).then_some(self.layout().granules_of(h))
    }

    #[inline]
    fn next_if_free(&self, c: Chunk, size: usize) -> Option<(Chunk, usize)> {
        // SAFETY: a chunk is followed by another chunk or its region's fence.
        let n = unsafe { c.plus(self.layout().bytes_of(size)) };
        // The fence is marked in use, so one read of the successor's head answers both.
        let h = self.head(n);
        (h & IN_USE == 0).then_some((n, self.layout().granules_of(h)))
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
            Some((Chunk(c.0.sub(bytes)), self.layout().granules_of(bytes)))
        }
    }

    fn split(&mut self, c: Chunk, head: usize) -> Chunk {
        let h = self.head(c);
        let bytes = h & !FLAGS;
        let keep = self.layout().bytes_of(head);
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
        if size >= need + self.layout().min_chunk() {
            let keep = self.layout().bytes_of(need);
            let rest = self.layout().bytes_of(size - need);
            // SAFETY: `0 < keep < size` in bytes, so the tail head lies inside `c`.
            let tail = unsafe { c.plus(keep) };
            self.set_head(c, keep | IN_USE | prev);
            self.set_head(tail, rest | PREV_IN_USE);
            self.set_footer(tail, rest);
            // The successor stays as it was: its predecessor (the tail) is free.
            Some(tail)
        } else {
            let bytes = self.layout().bytes_of(size);
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
        let bytes = self.layout().bytes_of(size);
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
        Chunk(unsafe { r.cast::<u8>().add(self.layout().region_lead()) })
    }

    fn region_granules(&self, r: NonNull<RegionHeader>) -> usize {
        self.layout()
            .granules_of(self.region_len(r) - self.layout().region_overhead())
    }

    unsafe fn open_region(&mut self, base: NonNull<u8>, len: usize) -> Chunk {
        let span = len - self.layout().region_overhead();
        let header = base.cast::<RegionHeader>();
        // SAFETY: the range is valid, ours, granule-aligned and large enough (the caller's
        // contract); the header, the first head and the fence all lie inside it, at
        // word-aligned offsets.
        unsafe {
            header.write(RegionHeader {
                next: self.regions.map_or(core::ptr::null_mut(), NonNull::as_ptr),
                end: base.addr().get() + len,
            });
            let c = Chunk(base.add(self.layout().region_lead()));
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
        let bytes = self.layout().bytes_of(size);
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
        if bytes & (self.layout().granule() - 1) != 0
            || bytes < self.layout().bytes_of(self.layout().min_chunk())
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

/// A heap whose boundary tags live inside the host memory it manages.
///
/// It owns the regions given to it until they are removed. Sizes are rounded to granules
/// (16 bytes by default) with one word of tag per allocation; any power-of-two alignment is
/// served, alignments above the granule by splitting off a leading free fragment.
///
/// `G` says where the granule comes from: [`HostGranule`] (the default, [`InlineHeap::new`])
/// makes it a constant of the compiled code, which the hot paths need (about a tenth of an
/// allocation's instructions); [`AnyGranule`] ([`InlineHeap::with_granule`]) reads it from the
/// heap, for granules above 16 bytes. Both run the same algorithm.
///
/// `K` says whether it keeps statistics ([`Tally`]): [`Counters`] (the default) behind
/// [`InlineHeap::stats`], or [`NoCounters`] ([`InlineHeap::without_stats`]), which skips a few
/// counter updates on every call.
///
/// # Examples
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use tagalloc::{Error, InlineHeap};
///
/// let mut arena = vec![0u128; 4096]; // 64 KiB, 16-byte aligned
/// let mut heap = InlineHeap::new();
/// // SAFETY: the arena outlives the heap and nothing else touches it.
/// unsafe { heap.add_region(arena.as_mut_ptr().cast(), 64 << 10)? };
/// let p = heap.alloc(100, 16)?; // best fit, 16-aligned
/// // SAFETY: `p` is a live 100-byte allocation of this heap.
/// let p = unsafe { heap.realloc(p, 100, 16, 400)? }; // grows in place when it can
/// assert_eq!(heap.alloc(0, 16), Err(Error::ZeroSize));
/// // SAFETY: `p` is not used afterwards.
/// unsafe { heap.free_checked(p, 400)? };
/// // SAFETY: deliberately a double free: the checked free refuses it.
/// assert_eq!(unsafe { heap.free_checked(p, 400) }, Err(Error::DoubleFree));
/// heap.check()?; // verifies every invariant
/// assert_eq!(heap.stats().in_use, 0);
/// # Ok(())
/// # }
/// ```
pub struct InlineHeap<G: Granule = HostGranule, K: Tally = Counters, B: BinShape = Wide> {
    pub(crate) heap: Heap<InlineTags<G>, K, B>,
}

// SAFETY: the heap owns its regions exclusively (the `add_region` contract) and holds no
// thread-bound state, so it may move to another thread with them.
unsafe impl<G: Granule, K: Tally, B: BinShape> Send for InlineHeap<G, K, B> {}

impl Default for InlineHeap {
    fn default() -> Self {
        Self::new()
    }
}

impl InlineHeap {
    /// An empty heap with the host granule of 16 bytes, which the compiler then knows: every
    /// size computation of the hot paths shifts and rounds by constants (see
    /// [`HostGranule`]). Add memory with [`InlineHeap::add_region`].
    ///
    /// # Time Complexity
    /// `O(1)`.
    pub const fn new() -> Self {
        Self::host()
    }
}

impl<K: Tally, B: BinShape> InlineHeap<HostGranule, K, B> {
    /// An empty heap with the host granule, counting with `K` (for the constructors that are
    /// generic over the tally; callers name [`InlineHeap::new`] or
    /// [`InlineHeap::without_stats`]).
    pub(crate) const fn host() -> Self {
        InlineHeap {
            heap: Heap::new(InlineTags::new(())),
        }
    }
}

impl InlineHeap<HostGranule, NoCounters> {
    /// [`InlineHeap::new`] without statistics: every call runs as in a heap that counts and
    /// hands out the same addresses, without updating the counters (see [`Tally`]: 3 to 7 %
    /// of the time on the traces in bench/README.md). It has no `stats`, and its `check`
    /// verifies everything but the counters.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use tagalloc::{HostGranule, InlineHeap, NoCounters};
    ///
    /// // A `const fn`, so a `static`'s heap can be built this way too.
    /// const EMPTY: InlineHeap<HostGranule, NoCounters> = InlineHeap::without_stats();
    /// let mut arena = vec![0u128; 4096];
    /// let mut heap = EMPTY;
    /// // SAFETY: the arena outlives the heap and nothing else touches it.
    /// unsafe { heap.add_region(arena.as_mut_ptr().cast(), 64 << 10)? };
    /// let p = heap.alloc(100, 16)?;
    /// // SAFETY: `p` is a live 100-byte allocation of this heap, not used afterwards.
    /// unsafe { heap.free_checked(p, 100)? };
    /// heap.check()?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Time Complexity
    /// `O(1)`.
    pub const fn without_stats() -> Self {
        Self::host()
    }
}

impl InlineHeap<HostGranule, Counters, Compact> {
    /// [`InlineHeap::new`] with the bins of small machines ([`Compact`]): the same policy and
    /// addresses, a small fraction of the state (a `GlobalHeap` of them fits in 1 KiB on a
    /// 32-bit target), and slower for sizes above 64 granules (1 KiB), which sorted lists of
    /// size classes serve instead of a list per size (the README has the measured sizes,
    /// `docs/compact.md` the speeds).
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use tagalloc::InlineHeap;
    ///
    /// let mut arena = vec![0u128; 1024];
    /// let mut heap = InlineHeap::compact();
    /// // SAFETY: the arena outlives the heap and nothing else touches it.
    /// unsafe { heap.add_region(arena.as_mut_ptr().cast(), 16 << 10)? };
    /// let p = heap.alloc(3000, 16)?; // above the compact lists: from a size class
    /// // SAFETY: `p` is a live 3000-byte allocation of this heap, not used afterwards.
    /// unsafe { heap.free_checked(p, 3000)? };
    /// heap.check()?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Time Complexity
    /// `O(1)`.
    pub const fn compact() -> Self {
        Self::host()
    }
}

impl InlineHeap<AnyGranule, NoCounters> {
    /// [`InlineHeap::with_granule`] without statistics (see [`InlineHeap::without_stats`]).
    /// Errors: `BadGranule`.
    ///
    /// # Time Complexity
    /// `O(1)`.
    pub const fn with_granule_without_stats(granule: usize) -> Result<Self, Error> {
        Self::any(granule)
    }
}

impl<K: Tally> InlineHeap<AnyGranule, K> {
    /// An empty heap with `granule`, counting with `K` (see [`InlineHeap::with_granule`]).
    const fn any(granule: usize) -> Result<Self, Error> {
        match Layout::inline(granule) {
            Ok(layout) => Ok(InlineHeap {
                heap: Heap::new(InlineTags::new(layout)),
            }),
            Err(e) => Err(e),
        }
    }
}

impl InlineHeap<AnyGranule> {
    /// An empty heap with another granule: a power of two from 16 bytes ([`HOST_GRANULE`]) to
    /// [`MAX_GRANULE`](crate::MAX_GRANULE) (1 GiB). Every request is rounded up to a whole number of granules
    /// (its one-word tag included) and every payload is granule-aligned; a region loses up to a
    /// granule at its start to its header. The granule is read at run time ([`AnyGranule`]):
    /// [`InlineHeap::new`] is faster for the host granule. Errors: `BadGranule`.
    ///
    /// # Time Complexity
    /// `O(1)`.
    pub const fn with_granule(granule: usize) -> Result<Self, Error> {
        Self::any(granule)
    }
}

impl<G: Granule, K: Tally, B: BinShape> InlineHeap<G, K, B> {
    /// The granule in bytes.
    ///
    /// # Time Complexity
    /// `O(1)`.
    pub fn granule(&self) -> usize {
        self.heap.tags().layout().granule()
    }

    /// Hands `len` bytes at `base` to the heap as a new region. `base` must be granule-aligned;
    /// `len` is rounded down to granules. A region is never merged with another that happens to
    /// be adjacent (they may be separate allocations); use [`InlineHeap::extend_region`] for
    /// memory that continues a region.
    ///
    /// Errors: `RegionMisaligned` (null or unaligned base), `RegionOverlap` (overlaps a managed
    /// region or wraps), `RegionTooSmall`. Nothing is written on error.
    ///
    /// # Time Complexity
    /// `O(regions)`.
    ///
    /// # Safety
    /// `base..base + len` must be valid for reads and writes, must not be used by anything else
    /// until the heap is dropped or the region is removed, and must outlive the heap's use of
    /// it.
    pub unsafe fn add_region(&mut self, base: *mut u8, len: usize) -> Result<(), Error> {
        let base = NonNull::new(base).ok_or(Error::RegionMisaligned)?;
        // SAFETY: forwarded caller contract.
        unsafe { self.heap.add_region(base, len) }
    }

    /// Grows the region that starts at `region` by `additional` bytes (rounded down to
    /// granules) right after its end, as `sbrk` or reserved virtual memory allow. The new
    /// space merges with the region's free end: no boundary is left behind.
    ///
    /// Errors: `UnknownRegion`, `RegionOverlap`, `RegionTooSmall` (less than one minimum
    /// chunk). Nothing is written on error.
    ///
    /// # Time Complexity
    /// `O(regions)`.
    ///
    /// # Safety
    /// The added range must be valid for reads and writes, used by nothing else, and reachable
    /// through the pointer the region was added with (one allocation or mapping).
    pub unsafe fn extend_region(
        &mut self,
        region: *mut u8,
        additional: usize,
    ) -> Result<(), Error> {
        let base = NonNull::new(region).ok_or(Error::UnknownRegion)?;
        // SAFETY: forwarded caller contract.
        unsafe { self.heap.extend_region(base, additional) }
    }

    /// Removes the region that starts at `base` if none of it is allocated, and gives its range
    /// back (granule-rounded) for the caller to release. Errors: `UnknownRegion`,
    /// `RegionInUse`.
    ///
    /// # Time Complexity
    /// `O(regions)`.
    pub fn remove_region(&mut self, base: *mut u8) -> Result<(NonNull<u8>, usize), Error> {
        self.heap.remove_region(base.addr())
    }

    /// Removes every wholly free region, calling `release(base, len)` for each; returns how
    /// many were removed.
    ///
    /// # Time Complexity
    /// `O(regions)`.
    pub fn trim(&mut self, release: impl FnMut(NonNull<u8>, usize)) -> usize {
        self.heap.trim(release)
    }

    /// The region containing `addr`, as `(base, len)`, if any.
    ///
    /// # Time Complexity
    /// `O(regions)`.
    pub fn region_of(&self, addr: usize) -> Option<(NonNull<u8>, usize)> {
        self.heap.region_of(addr)
    }

    /// Allocates `size` bytes aligned to `align` (a power of two). The best fit among free
    /// chunks is used: the smallest that fits, oldest among equals; the top (the free end of
    /// the region the heap grows at) only when no other free chunk fits. For alignments above
    /// the granule, the best fit for the size plus the worst-case alignment padding. A listed
    /// size (up to 32 KiB) at most granule-aligned that no chunk of exactly its size serves is
    /// carved from the victim first, the rest of the chunk carved last for such a request
    /// (see the crate's glossary).
    /// Errors:
    /// `ZeroSize`, `SizeOverflow`, `BadAlign`, `OutOfMemory`.
    ///
    /// # Time Complexity
    /// `O(1)` for sizes kept in lists (up to 2047 granules, 32 KiB at the host granule);
    /// `O(bits of a size)` otherwise (one walk down a bin's trie).
    #[inline(always)]
    pub fn alloc(&mut self, size: usize, align: usize) -> Result<NonNull<u8>, Error> {
        let c = self.heap.alloc(size, align)?;
        Ok(c.payload())
    }

    /// Frees an allocation of `size` bytes.
    ///
    /// What is detected depends on the build, and a refused free writes nothing:
    /// - always: the chunk's tag says it is free already, or that a merge absorbed the chunk
    ///   into a free neighbour (a double free, unless the memory was handed out again since):
    ///   `DoubleFree`;
    /// - with the `checked` feature this is [`InlineHeap::free_checked`]: a pointer that is not
    ///   the payload of a live chunk of this heap (`ForeignPointer`, or `DoubleFree` for one
    ///   into a free chunk), a size that does not fit the chunk (`WrongSize`).
    ///
    /// # Time Complexity
    /// Without `checked`: `O(1)` when the merged chunk has up to 2047 granules, `O(bits of a
    /// size)` otherwise. With it, as for [`InlineHeap::free_checked`].
    ///
    /// # Safety
    /// Without `checked`: `ptr` must have come from this heap's `alloc`/`realloc`, and not have
    /// been freed since (beyond the tag check above, a foreign pointer, or a double free after
    /// the memory was handed out again, reads whatever lies before `ptr`: undefined behaviour;
    /// [`InlineHeap::usable_size_in`] proves a pointer first in `O(1)`). With `checked`, only the
    /// rule that holds for every build: the memory must not be used after a successful return,
    /// and a double free after the chunk was handed out again frees the new owner's block (no
    /// allocator can tell those apart).
    #[inline(always)]
    pub unsafe fn free(&mut self, ptr: NonNull<u8>, size: usize) -> Result<(), Error> {
        if cfg!(feature = "checked") {
            // SAFETY: forwarded caller contract (a subset of it).
            return unsafe { self.free_checked(ptr, size) };
        }
        prefetch_successor(ptr, size);
        // SAFETY: without `checked`, `ptr` is a payload of this heap (the caller's contract).
        self.heap.free_in_use(unsafe { Chunk::of_payload(ptr) })
    }

    /// Frees an allocation after proving that `ptr` is the payload of a live chunk of this
    /// heap whose size fits `size`: reports `ForeignPointer`, `DoubleFree` (the chunk is free,
    /// or `ptr` points into a free chunk where a payload could have been) or `WrongSize`
    /// instead of corrupting anything; a refused free writes nothing.
    ///
    /// # Time Complexity
    /// `O(regions + chunks of ptr's region)`: a walk to find the chunk.
    ///
    /// # Safety
    /// The memory must not be used after a successful return (it may be handed out again). A
    /// double free after the chunk was handed out again frees the new owner's block: that
    /// stays the caller's promise.
    pub unsafe fn free_checked(&mut self, ptr: NonNull<u8>, size: usize) -> Result<(), Error> {
        let c = self.validated_chunk(ptr, size)?;
        self.heap.free(c);
        Ok(())
    }

    /// The live chunk whose payload is `ptr`, if its size fits `size`; a refusal is counted in
    /// the statistics.
    fn validated_chunk(&mut self, ptr: NonNull<u8>, size: usize) -> Result<Chunk, Error> {
        match self.find_chunk(ptr) {
            Ok(c) if self.heap.size_fits(c, size) => Ok(c),
            Ok(_) => Err(self.heap.refused(Error::WrongSize)),
            Err(e) => Err(self.heap.refused(e)),
        }
    }

    /// Finds the live chunk whose payload is `ptr` by a bounds-checked walk of its region
    /// (see [`probe`]): `DoubleFree` for the payload of a free chunk or of one a merge
    /// absorbed, `Corrupted` for tags that cannot be, `ForeignPointer` for anything else that
    /// is not a live chunk's payload.
    fn find_chunk(&self, ptr: NonNull<u8>) -> Result<Chunk, Error> {
        self.find_checked(ptr).map_err(Error::from)
    }

    /// Resizes an allocation of `old_size` bytes to `new_size`: shrinks in place, or grows in
    /// place into a free successor, and only if neither works moves it to a new chunk aligned
    /// to `align`, copying `min(old_size, new_size)` bytes (never more than the old chunk
    /// holds). A block whose chunk is above 2047 granules (32 KiB at the host granule) shrinking
    /// to at most 2047 moves instead, into the best fitting free chunk outside the top if there
    /// is one, so that the whole old chunk is freed (for alignments up to the granule; see the
    /// crate's policy). On error the old allocation is untouched. Detects what
    /// [`InlineHeap::free`] detects in the same build, before anything is written.
    ///
    /// # Time Complexity
    /// As for [`InlineHeap::alloc`] plus [`InlineHeap::free`], and the copy when it moves.
    ///
    /// # Safety
    /// As for [`InlineHeap::free`]; `old_size` must be the size the block was allocated or last
    /// resized with. On success the old pointer must no longer be used unless it was returned.
    #[inline(always)]
    pub unsafe fn realloc(
        &mut self,
        ptr: NonNull<u8>,
        old_size: usize,
        align: usize,
        new_size: usize,
    ) -> Result<NonNull<u8>, Error> {
        // SAFETY: forwarded caller contract.
        let (p, e) = unsafe { self.realloc_pair(ptr, old_size, align, new_size) };
        p.ok_or(e)
    }

    /// [`InlineHeap::realloc`] out of line: the new pointer, or `None` and the error, as a pair
    /// ([`as_pair`]), which comes back in registers where the `Result` would come back through
    /// memory.
    ///
    /// # Safety
    /// As for [`InlineHeap::realloc`].
    #[inline(never)]
    unsafe fn realloc_pair(
        &mut self,
        ptr: NonNull<u8>,
        old_size: usize,
        align: usize,
        new_size: usize,
    ) -> (Option<NonNull<u8>>, Error) {
        // SAFETY: forwarded caller contract.
        as_pair(unsafe { self.realloc_result(ptr, old_size, align, new_size) })
    }

    /// [`InlineHeap::realloc`]'s work, as a `Result`.
    ///
    /// # Safety
    /// As for [`InlineHeap::realloc`].
    #[inline(always)]
    unsafe fn realloc_result(
        &mut self,
        ptr: NonNull<u8>,
        old_size: usize,
        align: usize,
        new_size: usize,
    ) -> Result<NonNull<u8>, Error> {
        let c = if cfg!(feature = "checked") {
            self.validated_chunk(ptr, old_size)?
        } else {
            // SAFETY: without `checked`, `ptr` is a payload of this heap (the caller's
            // contract).
            let c = unsafe { Chunk::of_payload(ptr) };
            if self.heap.tags().is_free(c) {
                return Err(self.heap.refused(Error::DoubleFree));
            }
            c
        };
        // The new size in granules, computed once for the attempt in place and the move.
        let need = self.heap.tags().layout().granules_for(new_size)?;
        let new = match self.heap.shrink_target(c, need, align) {
            Some(new) => new,
            None => {
                if self.heap.resize_granules(c, need)? {
                    return Ok(ptr);
                }
                if self.heap.tags().layout().granule_aligned(align) {
                    self.heap.alloc_granules(need)?
                } else {
                    self.heap.alloc(new_size, align)?
                }
            }
        }
        .payload();
        let t = self.heap.tags();
        let have = t.size(c);
        let keep = old_size.min(new_size).min(t.layout().bytes_of(have) - W);
        // SAFETY: both chunks are live and distinct; `keep` fits in the old chunk's payload
        // and in the new allocation.
        unsafe { core::ptr::copy_nonoverlapping(ptr.as_ptr(), new.as_ptr(), keep) };
        self.heap.free_sized(c, have);
        Ok(new)
    }

    /// Resizes the live block at `ptr` in place to serve `size` bytes (shrinking, or growing
    /// into a free successor); `OutOfMemory`, the block unchanged, if it cannot grow in place.
    ///
    /// # Safety
    /// `ptr` is a live allocation of this heap.
    pub(crate) unsafe fn resize_in_place(
        &mut self,
        ptr: NonNull<u8>,
        size: usize,
    ) -> Result<(), Error> {
        // SAFETY: `ptr` is a live allocation of this heap (the caller's contract).
        self.heap
            .resize_in_place(unsafe { Chunk::of_payload(ptr) }, size)
    }

    /// Bytes usable at `ptr` (at least what was asked for), with the same checks as
    /// [`InlineHeap::free`] in this build (nothing is counted as refused).
    ///
    /// # Time Complexity
    /// `O(1)` without `checked`; with it, as for [`InlineHeap::free_checked`].
    ///
    /// # Safety
    /// As for [`InlineHeap::free`]: without `checked`, `ptr` must be a live allocation of this
    /// heap.
    pub unsafe fn usable_size(&self, ptr: NonNull<u8>) -> Result<usize, Error> {
        let c = if cfg!(feature = "checked") {
            self.find_chunk(ptr)?
        } else {
            // SAFETY: without `checked`, `ptr` is a live allocation of this heap (the caller's
            // contract).
            unsafe { Chunk::of_payload(ptr) }
        };
        let t = self.heap.tags();
        if t.is_free(c) {
            return Err(Error::DoubleFree);
        }
        Ok(t.layout().bytes_of(t.size(c)) - W)
    }

    /// Bytes usable at the live block `ptr` of an inline heap, read from its tag without
    /// the heap's lock (a C `free` choosing a per-thread cache's class, see
    /// [`crate::ThreadCache`]); `None` when the tag says the chunk is not in use.
    ///
    /// Sound without the lock because the word is loaded atomically (relaxed), and the only
    /// write another thread may make to a live block's head, the lock holder's update of its
    /// `PREV_IN_USE` bit, is an atomic store that leaves the size bits alone (see
    /// `InlineTags::set_flag`); the size itself changes only in a realloc of the block, which
    /// is its owner's call.
    ///
    /// # Time Complexity
    /// `O(1)`, one relaxed load.
    ///
    /// # Safety
    /// `ptr` is a live allocation of an inline heap, owned by the caller (not
    /// being freed or resized by another thread). A double free of a block the heap has freed
    /// breaks this: its head may then be written, not atomically, by the lock holder.
    #[inline]
    pub unsafe fn unlocked_usable_size(ptr: NonNull<u8>) -> Option<usize> {
        // SAFETY: the caller's promise: the word before `ptr` is a live chunk's head, aligned;
        // the accesses that may race with this load are atomic (see above).
        let h =
            unsafe { core::sync::atomic::AtomicUsize::from_ptr(ptr.byte_sub(W).cast().as_ptr()) }
                .load(core::sync::atomic::Ordering::Relaxed);
        if h & IN_USE == 0 {
            return None;
        }
        (h & !FLAGS).checked_sub(W)
    }

    /// Bytes usable at `ptr`, after proving, as [`InlineHeap::free_checked`] does, that `ptr`
    /// is the payload of a live chunk of this heap, in every build: `Refused(ForeignPointer)`,
    /// `Refused(DoubleFree)` for the payload of a free chunk or of one a merge absorbed, or
    /// `Corrupted` with the chunk whose tags cannot be (every size is checked against the
    /// region's end before it is followed, so the walk itself never leaves the heap's memory).
    /// Nothing is written or counted. What a caller that learns a block's size from the heap (a C
    /// `free`, which gets none) uses to check a pointer at run time, where the `checked`
    /// feature would check every free of the build.
    ///
    /// # Time Complexity
    /// As for [`InlineHeap::free_checked`]: a walk of `ptr`'s region.
    pub fn checked_usable_size(&self, ptr: NonNull<u8>) -> Result<usize, BlockError> {
        let c = self.find_checked(ptr)?;
        let t = self.heap.tags();
        Ok(t.layout().bytes_of(t.size(c)) - W)
    }

    /// Calls `each(start, len)` for every free chunk of at least `min` bytes, naming the
    /// whole pages (of `page` bytes, a power of two) inside it that hold none of the heap's
    /// tags: what a region source may release (`madvise(MADV_DONTNEED)`, unmapping device
    /// pages) while the region stays. Returns how many spans it named.
    ///
    /// # Time Complexity
    /// `O(chunks + regions)`.
    pub fn free_spans(&self, min: usize, page: usize, each: impl FnMut(usize, usize)) -> usize {
        self.heap.free_spans(min, page, each)
    }

    /// Verifies every invariant of the heap (see `crate::check`).
    ///
    /// # Time Complexity
    /// `O(chunks + regions)`.
    pub fn check(&self) -> Result<(), CheckError> {
        self.heap.check()
    }
}

impl<G: Granule, B: BinShape> InlineHeap<G, Counters, B> {
    /// The heap's statistics.
    ///
    /// # Time Complexity
    /// `O(bits of a size)` (the largest free chunk is found down a trie); the rest is kept as
    /// running counters.
    pub fn stats(&self) -> Stats {
        self.heap.stats()
    }
}

/// Starts loading the cache line at `ptr + size`, where, by the size the caller frees with,
/// the head of the chunk after the block at `ptr` lies or is close: less than a minimum chunk
/// further (a chunk is at most that much above its request, `Layout::size_fits`), so usually
/// on that line.
///
/// Why: a free reads its chunk's head, and only then knows where its successor's head is; on
/// a heap larger than the cache both reads miss, one after the other. Started here, the second
/// miss overlaps the first, as in allocators that take the size from the caller and read the
/// tag at the block's end directly (talc). On talc's random actions with its 200 ms trials
/// this made the heap 1.7 to 3.5 % faster at every maximum size (bench/README.md). A hint: a
/// prefetch reads nothing the program sees and never faults, so a wrong size costs one
/// useless line.
#[inline(always)]
fn prefetch_successor(ptr: NonNull<u8>, size: usize) {
    #[cfg(all(target_arch = "x86_64", target_feature = "sse", not(miri)))]
    {
        use core::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // SAFETY: the intrinsic needs SSE, which this build enables (the `cfg` above); a
        // prefetch neither faults nor reads anything the program sees, whatever the address,
        // and `wrapping_add` keeps computing the address itself defined.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(ptr.as_ptr().wrapping_add(size).cast::<i8>()) };
    }
    // Where the prefetch is compiled out (other targets, Miri), the arguments go unused.
    let _ = (ptr, size);
}
