//! The size arithmetic of a tag placement: how many granules a request takes, what an aligned
//! request must find, which sizes a chunk may have been allocated with, and how much of a region
//! is not chunk space. Written once, for the heap and for the reference model
//! ([`crate::model`]), which must agree on every figure.

use core::mem::size_of;

use crate::error::Error;

/// One machine word.
pub(crate) const W: usize = size_of::<usize>();

/// The largest granule a heap accepts: 1 GiB, the largest page size in use. Below it, no size,
/// tag or alignment computation can overflow (a request's padding stays far below
/// `isize::MAX`), and any real region still holds chunks.
pub const MAX_GRANULE: usize = 1 << 30;

/// A placement's geometry: granule, tag bytes per chunk, smallest chunk, region overhead.
/// (Not a [`core::alloc::Layout`], which is one request's size and alignment.)
///
/// Invariants (checked by the constructors): the granule is a power of two no larger than
/// [`MAX_GRANULE`] and `granule = 1 << shift`; `pad = head + granule − 1`;
/// `size_limit = isize::MAX − pad`; `min_chunk ≥ 1`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    shift: u32,
    /// `1 << shift`, kept so the hot paths need not shift to get it.
    granule: usize,
    head: usize,
    pad: usize,
    /// `isize::MAX − pad`: the largest request (plus one) whose rounded size stays in range.
    size_limit: usize,
    min_chunk: usize,
    region_lead: usize,
    region_tail: usize,
    /// Bytes at the front and at the back of a free chunk that hold its tags and bin links.
    free_tags: (usize, usize),
}

impl Geometry {
    /// The geometry of an inline heap with this granule (a power of two from 16 bytes to
    /// [`MAX_GRANULE`]): one word of head per chunk; the smallest chunk holds a head, the two
    /// links of an exact bin's list and a footer; each region starts with a two-word header
    /// padded so that the first payload is granule-aligned, and ends with a one-word fence.
    pub const fn inline(granule: usize) -> Result<Geometry, Error> {
        if !granule.is_power_of_two() || granule < 16 || granule > MAX_GRANULE {
            return Err(Error::BadGranule);
        }
        Ok(Geometry {
            shift: granule.trailing_zeros(),
            granule,
            head: W,
            pad: W + granule - 1,
            size_limit: isize::MAX as usize - (W + granule - 1),
            min_chunk: (4 * W).div_ceil(granule),
            // Header, then padding so the first chunk's head is one word before a granule.
            region_lead: (2 * W + W).next_multiple_of(granule) - W,
            region_tail: W,
            // The head and five bin links at the front, the footer at the back.
            free_tags: (6 * W, W),
        })
    }

    /// The geometry of a detached heap with this granule (any power of two up to
    /// [`MAX_GRANULE`]): no tag bytes, one-granule chunks, regions that are all chunk space.
    pub const fn detached(granule: usize) -> Result<Geometry, Error> {
        if !granule.is_power_of_two() || granule > MAX_GRANULE {
            return Err(Error::BadGranule);
        }
        Ok(Geometry {
            shift: granule.trailing_zeros(),
            granule,
            head: 0,
            pad: granule - 1,
            size_limit: isize::MAX as usize - (granule - 1),
            min_chunk: 1,
            region_lead: 0,
            region_tail: 0,
            free_tags: (0, 0),
        })
    }

    /// Bytes per granule.
    #[inline]
    pub const fn granule(&self) -> usize {
        self.granule
    }

    /// `log2` of the granule.
    #[inline]
    pub const fn shift(&self) -> u32 {
        self.shift
    }

    /// The whole granules in `bytes` (any bits below a granule, such as tag flags, dropped).
    #[inline]
    pub(crate) fn granules_of(&self, bytes: usize) -> usize {
        self.assume_shift_in_range();
        bytes >> self.shift
    }

    /// The bytes in `granules` granules (chunk sizes and offsets, which stay in range).
    #[inline]
    pub(crate) fn bytes_of(&self, granules: usize) -> usize {
        self.assume_shift_in_range();
        granules << self.shift
    }

    /// Tells the compiler that `shift` is below `usize::BITS`, so that a shift by it needs no
    /// masking (Rust defines a shift by more as wrapping, and masks the amount to get that).
    #[inline(always)]
    fn assume_shift_in_range(&self) {
        // SAFETY: the granule is at most `MAX_GRANULE` (type invariant), so `shift ≤ 30`.
        unsafe { core::hint::assert_unchecked(self.shift < usize::BITS) }
    }

    /// Bytes of tag before each payload.
    #[inline]
    pub const fn head(&self) -> usize {
        self.head
    }

    /// The smallest chunk, in granules.
    #[inline]
    pub const fn min_chunk(&self) -> usize {
        self.min_chunk
    }

    /// Bytes from a region's base to its first chunk.
    #[inline]
    pub const fn region_lead(&self) -> usize {
        self.region_lead
    }

    /// Bytes of a region that are not chunk space: before the first chunk and after the last.
    #[inline]
    pub const fn region_overhead(&self) -> usize {
        self.region_lead + self.region_tail
    }

    /// Bytes at the front and at the back of a free chunk that hold its tags and bin links
    /// (zero for detached tags, which keep none in the memory).
    #[inline]
    pub const fn free_chunk_tags(&self) -> (usize, usize) {
        self.free_tags
    }

    /// Offset from a region's base to its first payload.
    #[cfg(any(test, feature = "model"))]
    #[inline]
    pub const fn first_payload(&self) -> usize {
        self.region_lead + self.head
    }

    /// The chunk size in granules that serves `size` bytes: the head added, rounded up to
    /// granules, at least the minimum chunk. `ZeroSize`, or `SizeOverflow` when the rounded
    /// size would pass `isize::MAX`.
    #[inline]
    pub fn granules_for(&self, size: usize) -> Result<usize, Error> {
        // One comparison refuses both a zero size (it wraps) and one whose rounded byte count
        // would pass `isize::MAX`.
        if size.wrapping_sub(1) >= self.size_limit {
            return Err(bad_size(size));
        }
        Ok(self.granules_of(size + self.pad).max(self.min_chunk))
    }

    /// The granules an allocation of `size` bytes aligned to `align` keeps (`need`) and the
    /// smallest free chunk that can serve it (`want`: `need` plus the worst leading fragment,
    /// for alignments above the granule), or the request's error.
    ///
    /// Over an alignment step, fewer than `step` granules reach the boundary, and one more step
    /// is added when that would leave a fragment below the minimum chunk, so the fragment is
    /// always under `step + min_chunk` granules.
    #[inline]
    pub fn request(&self, size: usize, align: usize) -> Result<(usize, usize), Error> {
        if !align.is_power_of_two() {
            return Err(Error::BadAlign);
        }
        let need = self.granules_for(size)?;
        if align <= self.granule() {
            return Ok((need, need));
        }
        let step = align >> self.shift;
        let want = need
            .checked_add(step + self.min_chunk - 1)
            .filter(|&w| w <= (isize::MAX as usize) >> self.shift)
            .ok_or(Error::SizeOverflow)?;
        Ok((need, want))
    }

    /// Granules to skip at the front of a free chunk whose payload is at `payload` so that the
    /// payload meets `align` (a power of two above the granule): zero, or a fragment large
    /// enough to be a free chunk of its own.
    #[inline]
    pub fn lead_granules(&self, payload: usize, align: usize) -> usize {
        let misalign = payload & (align - 1);
        if misalign == 0 {
            return 0;
        }
        let mut lead = (align - misalign) >> self.shift;
        if lead < self.min_chunk {
            lead += align >> self.shift;
        }
        lead
    }

    /// Whether `align` is a power of two no larger than the granule: every payload meets it,
    /// so the best fit for the size is the answer.
    #[inline]
    pub(crate) const fn granule_aligned(&self, align: usize) -> bool {
        // `align − 1` is below the granule and shares no bit with `align` (0 wraps and fails
        // the first test).
        let mask = align.wrapping_sub(1);
        mask < self.granule && align & mask == 0
    }

    /// Whether a chunk of `granules` may have been allocated with `size` bytes: `size` fits
    /// and would not have left a tail large enough to split off. A checked free with any other
    /// size is refused as `WrongSize`.
    #[inline]
    pub fn size_fits(&self, granules: usize, size: usize) -> bool {
        self.granules_for(size)
            .is_ok_and(|need| need <= granules && granules < need + self.min_chunk)
    }

    /// The payload bytes of the single chunk that spans a region of `len` bytes (rounded down
    /// to granules), or `None` if no chunk fits.
    pub fn whole_region_request(&self, len: usize) -> Option<usize> {
        let len = len & !(self.granule() - 1);
        (len >= self.region_overhead() + (self.min_chunk << self.shift))
            .then(|| len - self.region_overhead() - self.head)
    }
}

/// The error for a size [`Geometry::granules_for`] refuses.
#[cold]
fn bad_size(size: usize) -> Error {
    if size == 0 {
        Error::ZeroSize
    } else {
        Error::SizeOverflow
    }
}
