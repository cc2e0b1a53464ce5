//! Proving a pointer a live block of an inline heap without trusting the tags it reads: what
//! a C `free`, which gets any pointer, needs before it writes anything.
//!
//! Three ways, all bounded by the region the pointer lies in, so that no word outside it is
//! ever read, whatever the tags say:
//!
//! - [`InlineHeap::usable_size_in`], `O(1)`: the block's head and the tags its free would
//!   follow (its successor's `PREV_IN_USE` bit, a free successor's size and footer, a free
//!   predecessor's footer and head) must be plausible: in use, a whole number of granules,
//!   inside the region, the neighbours' flags and footers agreeing. One compare each on words
//!   the free reads anyway; an in-use successor's size, which the free does not follow, is
//!   left to that block's own free. Where anything disagrees it hands over to the walk, which
//!   names the cause.
//! - the walk (`InlineHeap::find_block`), `O(chunks of the region)`: every chunk from the
//!   region's first to the block's successor, each size checked against the region's end
//!   before anything past the head is read, each footer and `PREV_IN_USE` bit against its
//!   neighbour. It tells a double free (the payload of a free chunk, or a head a merge marked
//!   absorbed) from a foreign pointer (anything else that is not a live block's payload) and
//!   from damaged tags (a [`CheckError`] naming the chunk).
//! - [`InlineHeap::marked_usable_size`], for a caller that marks the payload of every block it
//!   hands out ([`LiveMarks`], e.g. a bitmap of a bit per granule): `O(1)` plus a scan of the
//!   block's own marks. The pointer must be marked (an unmarked one is named by the word before
//!   it alone), the tags its free follows plausible, the chunk after it the fence or marked,
//!   and no other mark inside its chunk: what the walk proves of the block and of the tags its
//!   free follows (damage elsewhere in the region is found at the free of the block it
//!   damaged, not before), and a size grown over a live neighbour exactly, which the walk does
//!   not find at the grown block's free.

use core::ptr::NonNull;

use super::heap::InlineHeap;
use super::tags::{Chunk, ABSORBED, FLAGS, IN_USE, PREV_IN_USE};
use crate::algo::geometry::W;
use crate::algo::shape::BinShape;
use crate::algo::stats::Tally;
use crate::algo::tags::Tags;
use crate::error::{BlockError, CheckError, Error};
use crate::inline::granule::Granule;

/// The payloads of the live blocks of a heap's regions, as a caller that records every block
/// it hands out and every block it frees keeps them (a C library's checked mode: a bit per
/// granule of each region): what [`InlineHeap::marked_usable_size`] proves a pointer against
/// instead of walking its region.
///
/// Invariant the caller keeps (for the answers, not for memory safety): an address is marked
/// exactly while it is the payload of a block the heap handed out and that has not been freed
/// or moved since.
pub trait LiveMarks {
    /// Whether `addr` (granule-aligned, inside a region) is a live block's payload.
    fn is_live(&self, addr: usize) -> bool;
    /// Whether any address in `lo..hi` (granule-aligned, inside one region) is marked.
    fn any_live(&self, lo: usize, hi: usize) -> bool;
}

/// A region as the probe sees it: the address of its first chunk's head and of its fence, and
/// a pointer through which its words are read.
///
/// Invariant: every word-aligned address from `first - W` to `fence` is inside one region of
/// the heap, readable through `through` (which has the region's provenance).
#[derive(Clone, Copy)]
struct Span {
    through: NonNull<u8>,
    first: usize,
    fence: usize,
}

impl Span {
    /// The word at `at`.
    ///
    /// # Safety
    /// `at` is word-aligned and `first - W <= at <= fence` (inside the region).
    #[inline(always)]
    unsafe fn word(self, at: usize) -> usize {
        // SAFETY: the caller keeps `at` inside the region (type invariant), so it is not null
        // and `through` may read it; it is word-aligned.
        unsafe {
            self.through
                .with_addr(core::num::NonZeroUsize::new_unchecked(at))
                .cast::<usize>()
                .read()
        }
    }

    /// Whether `bytes` is a chunk size a chunk at `c` can have: a whole number of granules,
    /// at least the minimum chunk, ending at or before the fence.
    #[inline(always)]
    fn fits(self, c: usize, bytes: usize, granule: usize, min: usize) -> bool {
        bytes & (granule - 1) == 0 && bytes >= min && bytes <= self.fence - c
    }
}

/// The tags of a block that [`InlineHeap::plausible`] proved, as addresses and bytes: its
/// chunk's head and size, and its free neighbours', which its free merges.
struct Plausible {
    span: Span,
    c: usize,
    bytes: usize,
    prev: Option<(usize, usize)>,
    next: Option<(usize, usize)>,
}

impl<G: Granule, K: Tally, B: BinShape> InlineHeap<G, K, B> {
    /// The usable bytes of the live block at `ptr`, proven as the module docs say, `O(1)`
    /// unless something disagrees: `Refused(DoubleFree)` (a free chunk's payload, or a chunk
    /// a merge absorbed), `Refused(ForeignPointer)` (not a block's payload), or `Corrupted`
    /// (tags that cannot be, with the chunk where they are). Nothing is written.
    ///
    /// What a caller that knows the region a pointer lies in (a table of its regions, kept by
    /// [`crate::Hooks`]) uses to check every free cheaply; a pointer into the middle of a live
    /// block whose preceding bytes happen to look like tags that agree is taken for a block
    /// (only [`InlineHeap::checked_usable_size`]'s walk tells it apart).
    ///
    /// # Time Complexity
    /// `O(1)`; `O(chunks of the region)` when the tags disagree.
    ///
    /// # Safety
    /// `base..base + len` is one of this heap's regions, as [`InlineHeap::region_of`] reports
    /// it (or as the pool's source obtained, grew and cut it), and its memory may be read
    /// through `ptr` (a pointer into it; for Rust's provenance rules, one derived from the
    /// region's memory, as every block of the heap is).
    #[inline(always)]
    pub unsafe fn usable_size_in(
        &self,
        ptr: NonNull<u8>,
        base: usize,
        len: usize,
    ) -> Result<usize, BlockError> {
        // SAFETY: forwarded caller contract.
        match unsafe { self.plausible_size(ptr, base, len) } {
            Some(n) => Ok(n),
            None => self.find_block_size(self.span(ptr, base, len), ptr.addr().get()),
        }
    }

    /// The region `base..base + len` as a [`Span`] read through `ptr`.
    #[inline(always)]
    fn span(&self, ptr: NonNull<u8>, base: usize, len: usize) -> Span {
        Span {
            through: ptr,
            first: base + self.heap.tags().geometry().region_lead(),
            fence: base + len - W,
        }
    }

    /// [`InlineHeap::usable_size_in`]'s `O(1)` part: the usable bytes if every tag the free
    /// of `ptr` follows is plausible, else `None` (the walk then names the cause).
    ///
    /// # Safety
    /// As for [`InlineHeap::usable_size_in`].
    #[inline(always)]
    unsafe fn plausible_size(&self, ptr: NonNull<u8>, base: usize, len: usize) -> Option<usize> {
        // SAFETY: forwarded caller contract.
        unsafe { self.plausible(ptr, base, len) }.map(|b| b.bytes - W)
    }

    /// The tags the free of `ptr` follows, if every one is plausible, else `None`. Each check
    /// is one compare on a word the free reads anyway: the common case (both neighbours in
    /// use) is three loads and four compares.
    ///
    /// # Safety
    /// As for [`InlineHeap::usable_size_in`].
    #[inline(always)]
    unsafe fn plausible(&self, ptr: NonNull<u8>, base: usize, len: usize) -> Option<Plausible> {
        let l = self.heap.tags().geometry();
        let (g, min) = (l.granule(), l.bytes_of(l.min_chunk()));
        let s = self.span(ptr, base, len);
        let c = ptr.addr().get().wrapping_sub(W);
        // The head is a chunk's (`≡ first (mod g)`), with room for a minimum chunk before the
        // fence: one compare for both ends, one for the alignment.
        let off = c.wrapping_sub(s.first);
        let last = s.fence - s.first - min;
        if off > last || off & (g - 1) != 0 {
            return None;
        }
        // SAFETY: `c` is word-aligned (heads are `≡ −W (mod g)`) and was just checked to lie
        // between the first head and the fence. Every read below is of a word-aligned address
        // (sizes are whole granules) checked the same way before it is read.
        let h = unsafe { s.word(c) };
        // In use, and a whole number of granules (no bit below the granule but the flags).
        if h & (g - 1) & !PREV_IN_USE != IN_USE {
            return None;
        }
        let bytes = h & !FLAGS;
        // `min <= bytes <= fence − c` (where `fence − c − min = last − off >= 0`) in one
        // compare.
        if bytes.wrapping_sub(min) > last - off {
            return None;
        }
        let n = c + bytes;
        // SAFETY: as above: `n <= fence`.
        let nh = unsafe { s.word(n) };
        if nh & PREV_IN_USE == 0 {
            return None;
        }
        let next = if nh & IN_USE == 0 {
            // A free successor is merged: its size must fit and its footer agree.
            let nb = nh & !FLAGS;
            // SAFETY: as above: the footer is inside the successor, which fits.
            if !s.fits(n, nb, g, min) || unsafe { s.word(n + nb - W) } != nb {
                return None;
            }
            Some((n, nb))
        } else {
            None
        };
        let prev = if h & PREV_IN_USE == 0 {
            // A free predecessor is merged: its footer must fit and its head agree.
            // SAFETY: as above: `c >= first`, so the word before it is in the region.
            let f = unsafe { s.word(c - W) };
            if f & (g - 1) != 0
                || f < min
                || f > c - s.first
                // SAFETY: as above: `f <= c − first` (tested just before), so `c − f` is at or
                // after the first head.
                || unsafe { s.word(c - f) } != f | PREV_IN_USE
            {
                return None;
            }
            Some((c - f, f))
        } else {
            None
        };
        Some(Plausible {
            span: s,
            c,
            bytes,
            prev,
            next,
        })
    }

    /// Frees the block at `ptr` after proving it as [`InlineHeap::usable_size_in`] does (the
    /// same refusals and reports, nothing written on either), following the tags the proof
    /// read instead of reading them again: what a caller that proves every block going back
    /// to the heap (a per-thread cache's, see `PointerProof::free_cached_block`) frees with.
    ///
    /// # Time Complexity
    /// As for [`InlineHeap::usable_size_in`] and [`InlineHeap::free`].
    ///
    /// # Safety
    /// As for [`InlineHeap::usable_size_in`]; and as for every free, the block is not used
    /// after a successful return (a double free after the chunk was handed out again frees the
    /// new owner's block: no allocator can tell).
    #[inline(always)]
    pub unsafe fn free_in(
        &mut self,
        ptr: NonNull<u8>,
        base: usize,
        len: usize,
    ) -> Result<(), BlockError> {
        // SAFETY: forwarded caller contract.
        let Some(b) = (unsafe { self.plausible(ptr, base, len) }) else {
            return self.free_walked(self.span(ptr, base, len), ptr.addr().get());
        };
        let l = self.heap.tags().geometry();
        let at = |(c, bytes): (usize, usize)| (self.chunk_at(b.span, c), l.granules_of(bytes));
        let (c, size) = at((b.c, b.bytes));
        let (prev, next) = (b.prev.map(at), b.next.map(at));
        // One call for each case, so that each is the merge it is, not a test of it again.
        match (prev, next) {
            (None, None) => self.heap.free_beside(c, size, None, None),
            (Some(p), None) => self.heap.free_beside(c, size, Some(p), None),
            (None, Some(n)) => self.heap.free_beside(c, size, None, Some(n)),
            (p, n) => self.heap.free_beside(c, size, p, n),
        }
        Ok(())
    }

    /// The usable bytes of the live block at `ptr`, proven against `marks`, the payloads of
    /// the live blocks its caller handed out (see [`LiveMarks`]), instead of by a walk: what
    /// [`InlineHeap::checked_usable_size`] proves, in `O(1)` plus a scan of the block's own
    /// marks. In order:
    ///
    /// - `ptr` must be marked, else it is refused, named by the word before it, `O(1)`
    ///   ([`InlineHeap::unmarked_cause`]): `DoubleFree` for a head a merge marked absorbed or
    ///   a free chunk's head whose footer and successor agree, `ForeignPointer` for anything
    ///   else (a pointer into a block, whatever the bytes before it say).
    /// - The tags its free follows must be plausible, as [`InlineHeap::usable_size_in`]
    ///   checks them; where they are not, the walk names the damage (a marked block the walk
    ///   does not find live is damage too: it was handed out and not freed).
    /// - The chunk after the block (after its free successor, if it has one) must be the
    ///   region's fence or a marked block: a size that moved the successor, grown or shrunk,
    ///   is damage.
    /// - No other payload in the block's chunk may be marked: a size grown over a live
    ///   neighbour exactly, which leaves every tag consistent, is damage (found by this scan
    ///   alone; a walk finds it only when it frees the neighbour).
    ///
    /// # Time Complexity
    /// `O(1)` plus [`LiveMarks::any_live`] over the block's chunk (for a bitmap of a bit per
    /// granule, its size in granules / 64 words); a walk of the region only when tags are
    /// damaged (then the caller reports and aborts).
    ///
    /// # Safety
    /// As for [`InlineHeap::usable_size_in`]. `marks` is trusted for the answer, not for
    /// memory safety: every word read is inside the region whatever it says.
    pub unsafe fn marked_usable_size(
        &self,
        ptr: NonNull<u8>,
        base: usize,
        len: usize,
        marks: &impl LiveMarks,
    ) -> Result<usize, BlockError> {
        let a = ptr.addr().get();
        let l = self.heap.tags().geometry();
        let g = l.granule();
        let s = self.span(ptr, base, len);
        // A payload is granule-aligned against the region's first head, one word further.
        if a.wrapping_sub(W).wrapping_sub(s.first) & (g - 1) != 0 || !marks.is_live(a) {
            // SAFETY: forwarded caller contract.
            return Err(BlockError::Refused(unsafe {
                self.unmarked_cause(ptr, base, len, marks)
            }));
        }
        // SAFETY: forwarded caller contract.
        let Some(b) = (unsafe { self.plausible(ptr, base, len) }) else {
            return self.marked_walked(s, a);
        };
        let broken = |what, at| Err(BlockError::Corrupted(CheckError::new(what, at)));
        let n = b.c + b.bytes;
        let after = match b.next {
            Some((n, nb)) => n + nb,
            None => n,
        };
        // Two free chunks are never side by side, so what follows is in use: the fence, or a
        // block handed out.
        if after != s.fence && !marks.is_live(after + W) {
            return broken(
                "the chunk after the block is not a live block (its size was changed)",
                b.c,
            );
        }
        if marks.any_live(a + g, n + W) {
            return broken("the block's size covers another live block", b.c);
        }
        Ok(b.bytes - W)
    }

    /// [`InlineHeap::marked_usable_size`] of a marked block whose tags are not plausible: the
    /// walk names the damage; one that proves the block anyway answers its size, and one that
    /// refuses it found a marked block's head damaged (it was handed out and not freed).
    #[cold]
    #[inline(never)]
    fn marked_walked(&self, s: Span, a: usize) -> Result<usize, BlockError> {
        match self.find_block_size(s, a) {
            Err(BlockError::Refused(_)) => Err(BlockError::Corrupted(CheckError::new(
                "a live block's head is damaged",
                a - W,
            ))),
            r => r,
        }
    }

    /// Why `ptr`, which `marks` does not hold, is not a live block, from the word before it
    /// alone, `O(1)`: `DoubleFree` if that word is a head a merge marked absorbed, or a free
    /// chunk's head (not in use, its predecessor in use, a size that fits the region, its
    /// footer agreeing, its successor's `PREV_IN_USE` bit clear and that successor the fence
    /// or a marked block); `ForeignPointer` otherwise.
    ///
    /// # Safety
    /// As for [`InlineHeap::usable_size_in`].
    #[cold]
    #[inline(never)]
    pub unsafe fn unmarked_cause(
        &self,
        ptr: NonNull<u8>,
        base: usize,
        len: usize,
        marks: &impl LiveMarks,
    ) -> Error {
        let l = self.heap.tags().geometry();
        let (g, min) = (l.granule(), l.bytes_of(l.min_chunk()));
        let s = self.span(ptr, base, len);
        let c = ptr.addr().get().wrapping_sub(W);
        let off = c.wrapping_sub(s.first);
        if off > s.fence - s.first || off & (g - 1) != 0 || c == s.fence {
            return Error::ForeignPointer;
        }
        // SAFETY: `first <= c < fence`, word-aligned (`≡ first (mod g)`), inside the region.
        let h = unsafe { s.word(c) };
        if h == ABSORBED {
            return Error::DoubleFree;
        }
        let bytes = h & !FLAGS;
        if h & FLAGS != PREV_IN_USE || !s.fits(c, bytes, g, min) {
            return Error::ForeignPointer;
        }
        let n = c + bytes;
        // SAFETY: the chunk fits in the region, so its footer and the head after it (at most
        // the fence) are inside it, word-aligned.
        let (footer, nh) = unsafe { (s.word(n - W), s.word(n)) };
        if footer == bytes && nh & PREV_IN_USE == 0 && (n == s.fence || marks.is_live(n + W)) {
            Error::DoubleFree
        } else {
            Error::ForeignPointer
        }
    }

    /// [`InlineHeap::free_in`] when a tag disagrees: the walk proves the block (or names the
    /// cause, nothing written), then the free follows its tags.
    #[cold]
    #[inline(never)]
    fn free_walked(&mut self, s: Span, a: usize) -> Result<(), BlockError> {
        let c = self.find_block(s, a)?;
        self.heap.free(c);
        Ok(())
    }

    /// The usable bytes of the live block at `a`, found by the walk.
    #[cold]
    #[inline(never)]
    fn find_block_size(&self, s: Span, a: usize) -> Result<usize, BlockError> {
        let c = self.find_block(s, a)?;
        let t = self.heap.tags();
        Ok(t.geometry().bytes_of(t.size(c)) - W)
    }

    /// The region `ptr` lies in, as a [`Span`] read through the region's own pointer.
    fn span_of(&self, a: usize) -> Option<Span> {
        let (base, len) = self.heap.region_of(a)?;
        let l = self.heap.tags().geometry();
        let b = base.addr().get();
        Some(Span {
            through: base,
            first: b + l.region_lead(),
            fence: b + len - W,
        })
    }

    /// The live chunk whose payload is `ptr`, proven by a walk of its region (see the module
    /// docs): never reads outside the heap's regions.
    pub(super) fn find_checked(&self, ptr: NonNull<u8>) -> Result<Chunk, BlockError> {
        let a = ptr.addr().get();
        match self.span_of(a) {
            Some(s) => self.find_block(s, a),
            None => Err(BlockError::Refused(Error::ForeignPointer)),
        }
    }

    /// Walks region `s` from its first chunk, checking each chunk's tags before it follows
    /// them, until the chunk holding `a` and its successor have been checked.
    fn find_block(&self, s: Span, a: usize) -> Result<Chunk, BlockError> {
        let l = self.heap.tags().geometry();
        let (g, min) = (l.granule(), l.bytes_of(l.min_chunk()));
        let broken = |what, at| Err(BlockError::Corrupted(CheckError::new(what, at)));
        let mut c = s.first;
        let mut prev_free = false;
        let mut found: Option<Result<usize, Error>> = None;
        while c < s.fence {
            // SAFETY: `first <= c < fence`, word-aligned (`c` advances by whole granules).
            let h = unsafe { s.word(c) };
            let bytes = h & !FLAGS;
            if !s.fits(c, bytes, g, min) {
                return broken(
                    "chunk size not a whole number of granules, or past the region",
                    c,
                );
            }
            if (h & PREV_IN_USE == 0) != prev_free {
                return broken("PREV_IN_USE bit disagrees with the predecessor", c);
            }
            let free = h & IN_USE == 0;
            if free {
                if prev_free {
                    return broken("two free chunks side by side", c);
                }
                // SAFETY: the chunk fits in the region, so its last word is inside it.
                if unsafe { s.word(c + bytes - W) } != bytes {
                    return broken("free chunk's footer disagrees with its head", c);
                }
            }
            if let Some(found) = found {
                // The successor of the block's chunk is sound too.
                return match found {
                    Ok(block) => Ok(self.chunk_at(s, block)),
                    Err(e) => Err(BlockError::Refused(e)),
                };
            }
            if a > c && a < c + bytes {
                found = Some(if a == c + W && !free {
                    Ok(c)
                } else if free
                    && (a == c + W
                        || (
                            // A head a merge marked: the payload of a block that was freed and
                            // merged.
                            a > c + W
                                && (a - c - W) & (g - 1) == 0
                                // SAFETY: `c < a − W` (checked just above), inside this chunk.
                                && unsafe { s.word(a - W) } == ABSORBED
                        ))
                {
                    Err(Error::DoubleFree)
                } else {
                    Err(Error::ForeignPointer)
                });
            }
            prev_free = free;
            c += bytes;
        }
        // SAFETY: `c == fence` (chunks end at or before it), inside the region.
        let fence = unsafe { s.word(c) };
        if fence & !FLAGS != 0 || fence & IN_USE == 0 || (fence & PREV_IN_USE == 0) != prev_free {
            return broken("region fence damaged", c);
        }
        match found {
            Some(Ok(block)) => Ok(self.chunk_at(s, block)),
            Some(Err(e)) => Err(BlockError::Refused(e)),
            None => Err(BlockError::Refused(Error::ForeignPointer)),
        }
    }

    /// The chunk whose head is at `at`, a chunk the walk of `s` proved.
    fn chunk_at(&self, s: Span, at: usize) -> Chunk {
        // SAFETY: `at` is a chunk head inside the region, not null.
        Chunk(
            s.through
                .with_addr(unsafe { core::num::NonZeroUsize::new_unchecked(at) }),
        )
    }
}
