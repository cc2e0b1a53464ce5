//! Checked mode's record of the live blocks: for each of the pool's regions, a bitmap with one
//! bit per granule (16 bytes) of the region, set at the payload of every block the pool hands
//! out and cleared when the block is freed or moved, against which `free`, `realloc` and
//! `malloc_usable_size` prove a pointer in `O(1)` (see `tagalloc::LiveMarks` and
//! `InlineHeap::marked_usable_size`) instead of walking its region.
//!
//! A bitmap takes a region's bytes / 128 (0.8 %), in a mapping of its own (`mmap`, never the
//! program's heap), made when the region is obtained in checked mode (or, for the regions
//! obtained before, when checked mode starts) and following the region as the pool's hooks
//! report it grown (`mremap`), cut (the bits past the cut cleared) and given back (unmapped).
//! A region whose bitmap could not be mapped or grown has none: its pointers are proven by the
//! walk, as before. Everything here runs under the pool's lock.

use core::ptr::null_mut;

use tagalloc::LiveMarks;

/// The bytes one bit stands for: the inline heap's granule, also `malloc`'s alignment.
const GRANULE: usize = tagalloc::HOST_GRANULE;
/// Bits in a bitmap word.
const BITS: usize = u64::BITS as usize;
/// A bitmap word's bytes.
const WORD: usize = core::mem::size_of::<u64>();
/// The unit bitmaps are mapped in (the smallest page; the kernel rounds up to its own).
const PAGE: usize = 4096;

/// One region's bitmap: `bytes` bytes mapped at `addr` (0: none), bit `i` standing for the
/// granule at `base + i * GRANULE` of the region at `base`.
///
/// Invariant: `addr..addr + bytes` is a private anonymous read-write mapping this type made
/// and has not unmapped, `bytes` a multiple of [`PAGE`] (or `addr == 0` and `bytes == 0`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct Bitmap {
    addr: usize,
    bytes: usize,
}

/// The bitmap's bytes for a region of `len` bytes, rounded up to [`PAGE`]; `None` if that
/// overflows.
fn bytes_for(len: usize) -> Option<usize> {
    let words = len.div_ceil(GRANULE * BITS);
    words.checked_mul(WORD)?.checked_next_multiple_of(PAGE)
}

impl Bitmap {
    /// No bitmap.
    pub(crate) const NONE: Bitmap = Bitmap { addr: 0, bytes: 0 };

    /// Whether there is one.
    #[inline]
    pub(crate) fn exists(self) -> bool {
        self.addr != 0
    }

    /// A cleared bitmap for a region of `len` bytes; [`Bitmap::NONE`] if it cannot be mapped.
    pub(crate) fn map(len: usize) -> Bitmap {
        let Some(bytes) = bytes_for(len).filter(|&b| b > 0) else {
            return Bitmap::NONE;
        };
        // SAFETY: a new private anonymous mapping: no memory of anyone's is touched.
        let p = unsafe {
            libc::mmap(
                null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED || p.is_null() {
            return Bitmap::NONE;
        }
        Bitmap {
            addr: p.expose_provenance(),
            bytes,
        }
    }

    /// Unmaps it; it is [`Bitmap::NONE`] after.
    pub(crate) fn unmap(&mut self) {
        if self.exists() {
            // SAFETY: the mapping this bitmap made (type invariant); nothing reads it after.
            unsafe {
                libc::munmap(
                    core::ptr::with_exposed_provenance_mut(self.addr),
                    self.bytes,
                )
            };
        }
        *self = Bitmap::NONE;
    }

    /// Makes it cover a region of `len` bytes, its new bits cleared (a mapping's fresh pages
    /// are zeros, and the bits past a cut were cleared by [`Bitmap::clear_range`]); a bitmap
    /// that cannot grow is unmapped (its region's pointers are then proven by the walk).
    pub(crate) fn grow(&mut self, len: usize) {
        if !self.exists() {
            return;
        }
        let Some(bytes) = bytes_for(len) else {
            self.unmap();
            return;
        };
        if bytes <= self.bytes {
            return;
        }
        // SAFETY: the mapping this bitmap made (type invariant), moved if need be; under the
        // pool's lock nobody holds its old address.
        let p = unsafe {
            libc::mremap(
                core::ptr::with_exposed_provenance_mut(self.addr),
                self.bytes,
                bytes,
                libc::MREMAP_MAYMOVE,
            )
        };
        if p == libc::MAP_FAILED || p.is_null() {
            self.unmap();
            return;
        }
        *self = Bitmap {
            addr: p.expose_provenance(),
            bytes,
        };
    }

    /// The word holding bit `bit` and the bit's mask in it, if the bitmap has it.
    #[inline]
    fn word(self, bit: usize) -> Option<(*mut u64, u64)> {
        let w = bit / BITS;
        if w >= self.bytes / WORD {
            return None;
        }
        let p = core::ptr::with_exposed_provenance_mut::<u64>(self.addr).wrapping_add(w);
        Some((p, 1 << (bit % BITS)))
    }

    /// The bit of the granule at `addr` of the region at `base`, if `addr` is a granule of it.
    #[inline]
    fn bit(base: usize, addr: usize) -> Option<usize> {
        let off = addr.checked_sub(base)?;
        off.is_multiple_of(GRANULE).then_some(off / GRANULE)
    }

    /// Marks the payload `addr` of the region at `base` live.
    #[inline]
    pub(crate) fn set(self, base: usize, addr: usize) {
        if let Some((p, m)) = Self::bit(base, addr).and_then(|b| self.word(b)) {
            // SAFETY: `p` is a word of the mapping (`word` checked it), read and written under
            // the pool's lock only.
            unsafe { *p |= m };
        }
    }

    /// Marks the payload `addr` of the region at `base` no longer live.
    #[inline]
    pub(crate) fn clear(self, base: usize, addr: usize) {
        if let Some((p, m)) = Self::bit(base, addr).and_then(|b| self.word(b)) {
            // SAFETY: as in `set`.
            unsafe { *p &= !m };
        }
    }

    /// Whether the payload `addr` of the region at `base` is marked.
    #[inline]
    pub(crate) fn test(self, base: usize, addr: usize) -> bool {
        match Self::bit(base, addr).and_then(|b| self.word(b)) {
            // SAFETY: as in `set`.
            Some((p, m)) => unsafe { *p & m != 0 },
            None => false,
        }
    }

    /// Calls `f` with each word of bits `lo..hi` (clipped to the bitmap) and the mask of those
    /// bits in it, until `f` returns `true`; whether one did. `(hi - lo) / 64 + 2` words.
    fn each_word(self, lo: usize, hi: usize, mut f: impl FnMut(*mut u64, u64) -> bool) -> bool {
        let hi = hi.min((self.bytes / WORD).saturating_mul(BITS));
        let mut bit = lo;
        while bit < hi {
            let Some((p, first)) = self.word(bit) else {
                return false;
            };
            // The bits from `bit` to the word's end, less those from `hi` on.
            let in_word = BITS - bit % BITS;
            let left = hi - bit;
            let mask = if left < in_word {
                // `first << left` is the bit `hi`'s, in the same word.
                (first << left).wrapping_sub(first)
            } else {
                first.wrapping_neg()
            };
            if f(p, mask) {
                return true;
            }
            bit = bit.saturating_add(in_word);
        }
        false
    }

    /// Whether any payload in `lo..hi` of the region at `base` is marked.
    pub(crate) fn any(self, base: usize, lo: usize, hi: usize) -> bool {
        let (Some(lo), Some(hi)) = (lo.checked_sub(base), hi.checked_sub(base)) else {
            return false;
        };
        self.each_word(lo.div_ceil(GRANULE), hi.div_ceil(GRANULE), |p, m| {
            // SAFETY: as in `set` (`each_word` hands out the mapping's words only).
            unsafe { *p & m != 0 }
        })
    }

    /// Clears every mark in `lo..hi` of the region at `base` (a range cut from the region:
    /// should it be obtained again, its bits start cleared), writing only words that hold one.
    pub(crate) fn clear_range(self, base: usize, lo: usize, hi: usize) {
        let (Some(lo), Some(hi)) = (lo.checked_sub(base), hi.checked_sub(base)) else {
            return;
        };
        self.each_word(lo.div_ceil(GRANULE), hi.div_ceil(GRANULE), |p, m| {
            // SAFETY: as in `any`.
            unsafe {
                if *p & m != 0 {
                    *p &= !m;
                }
            }
            false
        });
    }
}

/// A region's bitmap as [`LiveMarks`] for the heap's proof.
pub(crate) struct RegionMarks {
    /// The region's base.
    pub(crate) base: usize,
    /// Its bitmap.
    pub(crate) bits: Bitmap,
}

impl LiveMarks for RegionMarks {
    #[inline]
    fn is_live(&self, addr: usize) -> bool {
        self.bits.test(self.base, addr)
    }

    #[inline]
    fn any_live(&self, lo: usize, hi: usize) -> bool {
        self.bits.any(self.base, lo, hi)
    }
}
