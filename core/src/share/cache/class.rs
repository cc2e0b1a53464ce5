//! The caches' size classes: which requests share a class, and the chunk size, usable size
//! and bound of each (see the cache's module docs, "Size classes").

use crate::algo::geometry::W;
use crate::inline::granule::HOST_GEOMETRY;

/// How many size classes a cache has: 64 of one chunk size each (to 1040 bytes), then eight
/// per doubling over three doublings (to 8 KiB).
pub const CLASSES: usize = EXACT_CLASSES + STEPS * DOUBLINGS;

/// Room for [`CLASSES`] in the per-class arrays, a power of two: an index masked to it needs no
/// bounds check on the fast path.
pub(crate) const SLOTS: usize = CLASSES.next_power_of_two();

/// The largest request a class serves: [`Class::cacheable`] sizes are 1 to this.
pub const MAX_CACHED_SIZE: usize = Class::bytes_of_index(CLASSES - 1) - W;

/// Classes of one chunk size each, from the smallest chunk up.
pub const EXACT_CLASSES: usize = 64;

/// Classes per doubling above the exact ones.
const STEPS: usize = 8;

/// Doublings the classes above the exact ones cover, from `1 << LOG_BASE` bytes (to 8 KiB).
const DOUBLINGS: usize = 3;

/// log2 of the chunk size the classes above the exact ones start doubling from: 64 granules
/// (1024 bytes with the host's 16-byte granule), just below the largest exact class.
const LOG_BASE: u32 = (64 * HOST_GEOMETRY.granule()).trailing_zeros();

/// log2 of [`STEPS`].
const LOG_STEPS: u32 = STEPS.trailing_zeros();

/// A class's chunk size and bound, looked up rather than computed on every take and put (the
/// bound is a division).
#[derive(Clone, Copy)]
struct Size {
    bytes: u16,
    limit: u8,
}

/// [`Size`] of every class: 16 KiB worth of blocks, at least 8 and at most 64.
static SIZES: [Size; SLOTS] = {
    let mut t = [Size { bytes: 0, limit: 0 }; SLOTS];
    let mut i = 0;
    while i < CLASSES {
        let bytes = Class::bytes_of_index(i);
        let per = 16384 / bytes;
        t[i] = Size {
            bytes: bytes as u16,
            limit: if per < 8 {
                8
            } else if per > 64 {
                64
            } else {
                per as u8
            },
        };
        i += 1;
    }
    t
};

/// log2 of `x`, for `x > 0`.
#[inline]
const fn log2(x: usize) -> u32 {
    usize::BITS - 1 - x.leading_zeros()
}

/// A size class: the chunks of `MIN + class` granules (host granule), always below
/// [`CLASSES`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Class(u8);

impl Class {
    /// The class of a request of `size` bytes aligned to at most the granule, if it has one:
    /// the smallest whose chunks hold it.
    #[inline]
    pub fn of(size: usize, align: usize) -> Option<Class> {
        if align > HOST_GEOMETRY.granule() {
            return None;
        }
        let g = HOST_GEOMETRY.granules_for(size).ok()?;
        let c = g - HOST_GEOMETRY.min_chunk();
        if c < EXACT_CLASSES {
            return Some(Class(c as u8));
        }
        // Above the exact classes: the class of the next size up. `b` is at least
        // `1 << LOG_BASE` (the exact classes reach past it), and `b >> shift` is 8..=15 (its top
        // four bits), so its class's size, `(b >> shift) + 1 << shift`, is the first at least
        // `b + 1` bytes.
        let b = g * HOST_GEOMETRY.granule() - 1;
        let d = log2(b) - LOG_BASE;
        if d as usize >= DOUBLINGS {
            return None;
        }
        let shift = LOG_BASE - LOG_STEPS + d;
        let k = EXACT_CLASSES + d as usize * STEPS + (b >> shift) - STEPS;
        Some(Class(k as u8))
    }

    /// Whether a request of `size` bytes aligned to at most the granule has a class: the same
    /// answer as `Class::of(size, 1).is_some()`, in one compare.
    #[inline]
    pub fn cacheable(size: usize) -> bool {
        size.wrapping_sub(1) < MAX_CACHED_SIZE
    }

    /// The largest class whose chunks a chunk of `bytes` bytes (a block's own, from its tag,
    /// at least the smallest chunk) can stand in for: where a free files it.
    #[inline]
    pub fn holding(bytes: usize) -> Class {
        let g = HOST_GEOMETRY.granules_of(bytes);
        let c = g.saturating_sub(HOST_GEOMETRY.min_chunk());
        if c < EXACT_CLASSES {
            return Class(c as u8);
        }
        // Above the exact classes: `bytes >> shift` is 8..=15, and the class of size
        // `m << shift` is `d * STEPS + m - 9` past the exact ones (`m = 8`: the previous
        // doubling's last, or the last exact class).
        let d = log2(bytes) - LOG_BASE;
        if d as usize >= DOUBLINGS {
            return Class((CLASSES - 1) as u8);
        }
        let shift = LOG_BASE - LOG_STEPS + d;
        let k = EXACT_CLASSES + d as usize * STEPS + (bytes >> shift) - (STEPS + 1);
        Class(k as u8)
    }

    /// The class of index `i`, below [`CLASSES`].
    pub(crate) fn from_index(i: usize) -> Class {
        debug_assert!(i < CLASSES);
        Class(i as u8)
    }

    /// Whether the class is above the exact ones: its chunks may be larger than its size, and
    /// a block's class must be read from its tag.
    #[inline]
    pub fn is_coarse(self) -> bool {
        self.index() >= EXACT_CLASSES
    }

    /// Its index, below [`CLASSES`].
    #[inline]
    pub fn index(self) -> usize {
        usize::from(self.0) & (SLOTS - 1)
    }

    /// The bytes of its chunks (the least, above the exact classes).
    #[inline]
    pub fn chunk_bytes(self) -> usize {
        SIZES[self.index()].bytes as usize
    }

    /// [`Class::chunk_bytes`] of index `i`, computed (for [`SIZES`]).
    const fn bytes_of_index(i: usize) -> usize {
        if i < EXACT_CLASSES {
            return (i + HOST_GEOMETRY.min_chunk()) * HOST_GEOMETRY.granule();
        }
        let k = i - EXACT_CLASSES;
        (STEPS + 1 + k % STEPS) << (LOG_BASE - LOG_STEPS + (k / STEPS) as u32)
    }

    /// The most blocks a cache keeps of the class (see `ThreadCache::limit`).
    #[inline]
    pub(crate) fn limit(self) -> u32 {
        SIZES[self.index()].limit as u32
    }

    /// The usable bytes of its blocks: the request the pool serves for it.
    #[inline]
    pub fn usable(self) -> usize {
        self.chunk_bytes() - W
    }
}
