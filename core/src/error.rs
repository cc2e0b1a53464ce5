//! Errors as values: every bad request comes back as an [`Error`], every broken invariant found
//! by `check()` as a [`CheckError`], every policy no pool can follow as a [`PolicyError`].
//! Nothing in the core panics on bad input.

use core::fmt;

/// Why a heap operation was refused. Nothing was changed when one of these is returned.
///
/// # Examples
///
/// ```
/// # fn main() -> Result<(), tagalloc::Error> {
/// use tagalloc::{DetachedHeap, Error, Record};
///
/// let mut table = [Record::VACANT; 8];
/// let mut h = DetachedHeap::new(&mut table[..], 256)?;
/// h.add_region(0, 1 << 16)?;
/// assert_eq!(h.alloc(0, 1), Err(Error::ZeroSize));
/// assert_eq!(h.alloc(1, 3), Err(Error::BadAlign));
/// assert_eq!(h.alloc(1 << 17, 1), Err(Error::OutOfMemory));
/// assert_eq!(Error::OutOfMemory.to_string(), "out of memory: no free chunk is large enough");
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Error {
    /// A request for zero bytes.
    ZeroSize,
    /// The size, rounded up to granules and with the tag overhead and alignment slack added,
    /// does not fit in `isize`.
    SizeOverflow,
    /// The alignment is zero or not a power of two.
    BadAlign,
    /// No free chunk is large enough (the heap may be fragmented; see `Stats`).
    OutOfMemory,
    /// The detached chunk table is full and cannot grow.
    OutOfRecords,
    /// The region, after its bookkeeping, has no room for a single chunk.
    RegionTooSmall,
    /// The region's base is null or not aligned to the heap's granule.
    RegionMisaligned,
    /// The region overlaps one the heap already manages, or wraps the address space.
    RegionOverlap,
    /// The region still holds allocated chunks, so it cannot be removed.
    RegionInUse,
    /// No region of this heap starts at that address.
    UnknownRegion,
    /// The granule is not a power of two between the placement's minimum and
    /// [`crate::MAX_GRANULE`].
    BadGranule,
    /// The chunk was already free (or the handle is stale: it was freed before).
    DoubleFree,
    /// The pointer or block was never handed out by this heap (a block of another heap, say),
    /// or points inside a chunk.
    ForeignPointer,
    /// The size given with a free does not match the size the chunk was allocated for.
    WrongSize,
    /// The calling thread already holds this heap's lock (a call from inside `with_heap`, or
    /// from a hook the heap is running): waiting would never end.
    Reentrant,
    /// A pool's policy limit leaves no room for the region a request needs.
    LimitExceeded,
    /// A pool's policy has a field no pool can follow (see [`crate::Policy::check`]); the
    /// pool obtained nothing.
    BadPolicy(PolicyError),
    /// Every detached heap gets an identity that its blocks carry; all 2^32 − 2 of them
    /// have been used in this process.
    TooManyHeaps,
    /// The tags around the block are damaged (a write past a block's end, say): what a
    /// validating free finds instead of a block ([`BlockError::Corrupted`] says where).
    Corrupted,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Error::BadPolicy(e) => return e.fmt(f),
            Error::ZeroSize => "zero-size request",
            Error::SizeOverflow => "size overflows the address space",
            Error::BadAlign => "alignment is not a power of two",
            Error::OutOfMemory => "out of memory: no free chunk is large enough",
            Error::OutOfRecords => "out of chunk records: the detached table is full",
            Error::RegionTooSmall => "region too small to hold a chunk",
            Error::RegionMisaligned => "region base is null or not granule-aligned",
            Error::RegionOverlap => "region overlaps a managed region or wraps around",
            Error::RegionInUse => "region still holds allocated chunks",
            Error::UnknownRegion => "no such region",
            Error::BadGranule => "granule must be a power of two and large enough for the tags",
            Error::DoubleFree => "double free (chunk already free, or stale handle)",
            Error::ForeignPointer => "pointer was not handed out by this heap",
            Error::WrongSize => "size does not match the allocation",
            Error::Reentrant => "re-entrant call: this thread already holds the heap's lock",
            Error::LimitExceeded => "the pool's limit leaves no room for the request",
            Error::TooManyHeaps => "no detached heap identities left in this process",
            Error::Corrupted => "heap corruption: the tags around the block are damaged",
        })
    }
}

impl core::error::Error for Error {}

/// `r` as two scalars, `(Some(value), _)` or `(None, error)`, for an out-of-line function of
/// the hot paths to return: Rust returns a `Result` of a chunk or pointer and an `Error`
/// through memory, so that its caller sets up a stack slot on every call, and returns the pair
/// in two registers. The error beside a value is never read; the caller unpacks the pair with
/// `Option::ok_or`.
#[inline(always)]
pub(crate) fn as_pair<V>(r: Result<V, Error>) -> (Option<V>, Error) {
    match r {
        Ok(v) => (Some(v), Error::OutOfMemory),
        Err(e) => (None, e),
    }
}

/// Why a pointer handed to a validating free is not freed: refused as a pointer that is not
/// a live block, or the heap's tags found damaged on the way (memory the caller corrupted,
/// which a C allocator reports and aborts on).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockError {
    /// `DoubleFree` or `ForeignPointer`: the heap is sound, the pointer is wrong.
    Refused(Error),
    /// The tags at [`CheckError::at`] cannot be: the heap's memory was written by its user.
    Corrupted(CheckError),
}

impl From<BlockError> for Error {
    fn from(e: BlockError) -> Error {
        match e {
            BlockError::Refused(e) => e,
            BlockError::Corrupted(_) => Error::Corrupted,
        }
    }
}

impl fmt::Display for BlockError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BlockError::Refused(e) => e.fmt(f),
            BlockError::Corrupted(c) => write!(f, "heap corruption at {:#x}: {}", c.at, c.what),
        }
    }
}

impl core::error::Error for BlockError {}

/// A broken heap invariant found by `check()`: what is wrong and where (an address for inline
/// tags, an address of managed memory for detached tags).
///
/// # Examples
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use tagalloc::InlineHeap;
///
/// let mut arena = vec![0u128; 256];
/// let mut heap = InlineHeap::new();
/// // SAFETY: the arena outlives the heap and nothing else touches it.
/// unsafe { heap.add_region(arena.as_mut_ptr().cast(), 4096)? };
/// let p = heap.alloc(32, 16)?;
/// heap.check()?;
/// // Overwrite the chunk's tag, one word before the payload, as a buggy program might.
/// // SAFETY: the word is inside the arena (it is the chunk's head).
/// unsafe { p.as_ptr().cast::<usize>().sub(1).write(3) };
/// let broken = heap.check().unwrap_err();
/// assert_eq!(broken.what, "chunk size not a whole number of granules");
/// assert_eq!(broken.at, p.as_ptr() as usize - 8);
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CheckError {
    /// The invariant that does not hold.
    pub what: &'static str,
    /// The address of the chunk (or region) where it was found.
    pub at: usize,
}

impl CheckError {
    pub(crate) const fn new(what: &'static str, at: usize) -> Self {
        CheckError { what, at }
    }
}

impl fmt::Display for CheckError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "heap invariant broken at {:#x}: {}", self.at, self.what)
    }
}

impl core::error::Error for CheckError {}

/// A policy field whose value no pool can follow, found by
/// [`Policy::check`](crate::Policy::check). A pool with such a policy refuses every request that
/// would act on it with [`Error::BadPolicy`], obtaining nothing.
///
/// ```
/// use tagalloc::{Growth, Policy, PolicyError, Reserve};
///
/// let policy = Policy::new().reserve(Reserve::Fraction(f64::NAN));
/// assert_eq!(policy.check(), Err(PolicyError::ReserveFraction));
/// assert_eq!(PolicyError::ReserveFraction.field(), "reserve");
/// let policy = Policy::new().growth(Growth::Fixed(usize::MAX));
/// assert_eq!(policy.check(), Err(PolicyError::GrowthSize));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PolicyError {
    /// `reserve`: a [`Reserve::Fraction`](crate::Reserve::Fraction) that is NaN, negative or
    /// above 1.
    ReserveFraction,
    /// `reserve`: [`Reserve::Bytes`](crate::Reserve::Bytes) above `isize::MAX`, more than any
    /// address space holds.
    ReserveBytes,
    /// `growth`: a region size ([`Growth::Fixed`](crate::Growth::Fixed)'s, or
    /// [`Growth::Doubling`](crate::Growth::Doubling)'s `initial` or `cap`) above `isize::MAX`,
    /// more than any address space holds.
    GrowthSize,
}

impl PolicyError {
    /// The name of the [`Policy`](crate::Policy) field at fault.
    pub const fn field(self) -> &'static str {
        match self {
            PolicyError::ReserveFraction | PolicyError::ReserveBytes => "reserve",
            PolicyError::GrowthSize => "growth",
        }
    }

    /// What is wrong with it.
    pub const fn why(self) -> &'static str {
        match self {
            PolicyError::ReserveFraction => "Reserve::Fraction must be a number from 0 to 1",
            PolicyError::ReserveBytes => "Reserve::Bytes is above isize::MAX",
            PolicyError::GrowthSize => "a region size is above isize::MAX",
        }
    }
}

impl core::fmt::Display for PolicyError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "bad pool policy field `{}`: {}",
            self.field(),
            self.why()
        )
    }
}

impl core::error::Error for PolicyError {}
