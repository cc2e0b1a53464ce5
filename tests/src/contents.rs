//! Block contents: the byte pattern written into every allocation a test makes, and its check.
//!
//! A pattern depends on a key (an allocation's id or event) and on the offset, so a block
//! overwritten by another, copied to the wrong place, or never written shows. Small blocks carry
//! it in every byte; large ones at their edges and a few probes, which catches the same
//! overlaps and lost copies without making a test's cost grow with the bytes allocated.

use std::fmt;
use std::ops::Range;
use std::ptr::NonNull;
use std::slice;

/// Blocks up to this size have their whole contents written and verified.
pub const SMALL_BLOCK: usize = 512;
/// Bytes verified at each end of a large block.
pub const EDGE: usize = 64;
/// Bytes verified at each probe inside a large block.
pub const PROBE: usize = 16;

/// The byte that `key`'s pattern has at `offset`. Different keys and offsets give different
/// bytes, and no key gives all zeros, so a block never written (the arenas are zeroed) shows
/// too.
#[inline]
pub fn pattern(key: u64, offset: usize) -> u8 {
    let x = key.wrapping_mul(0x9e37_79b9_7f4a_7c15)
        ^ (offset as u64).wrapping_mul(0xd6e8_feb8_6659_fd93)
        ^ 0x5851_f42d_4c95_7f2d;
    (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 56) as u8
}

/// The ranges of a `len`-byte block that carry the pattern: all of a small block; the first and
/// last [`EDGE`] bytes of a large one and [`PROBE`] bytes at each quarter. The unused slots of
/// the array are empty ranges.
pub fn sample_ranges(len: usize) -> [Range<usize>; 5] {
    if len <= SMALL_BLOCK {
        return [0..len, 0..0, 0..0, 0..0, 0..0];
    }
    let probe = |k: usize| {
        let at = len / 4 * k;
        at..at + PROBE
    };
    [0..EDGE, probe(1), probe(2), probe(3), len - EDGE..len]
}

/// Writes `key`'s pattern over the sampled ranges of the `len` bytes at `ptr`.
///
/// # Safety
/// `ptr..ptr + len` is a live allocation that nothing else uses during the call, inside a
/// zeroed arena (so every byte is initialised).
pub unsafe fn fill(ptr: NonNull<u8>, len: usize, key: u64) {
    for range in sample_ranges(len) {
        // SAFETY: `range` lies within `0..len`, memory of the caller's block that nothing else
        // refers to (caller contract).
        let bytes =
            unsafe { slice::from_raw_parts_mut(ptr.as_ptr().add(range.start), range.len()) };
        for (k, b) in bytes.iter_mut().enumerate() {
            *b = pattern(key, range.start + k);
        }
    }
}

/// A byte that does not hold the pattern it should.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mismatch {
    /// Its offset in the block.
    pub offset: usize,
    /// The pattern's byte there.
    pub expected: u8,
    /// The byte found.
    pub found: u8,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "byte {} is {:#04x}, expected {:#04x}",
            self.offset, self.found, self.expected
        )
    }
}

/// Verifies that the ranges [`fill`] writes for a block of `written` bytes hold `key`'s
/// pattern at `ptr`, as far as they lie below `upto` (after a resize: the bytes that must have
/// survived).
///
/// # Safety
/// `ptr..ptr + upto` is a live allocation that nothing writes during the call, inside a zeroed
/// arena.
pub unsafe fn verify(
    ptr: NonNull<u8>,
    written: usize,
    upto: usize,
    key: u64,
) -> Result<(), Mismatch> {
    for range in sample_ranges(written) {
        let end = range.end.min(upto);
        if range.start >= end {
            continue;
        }
        // SAFETY: `range.start..end` lies within `0..upto`, memory of a live block that is
        // only read here (caller contract).
        let bytes =
            unsafe { slice::from_raw_parts(ptr.as_ptr().add(range.start), end - range.start) };
        for (k, &found) in bytes.iter().enumerate() {
            let offset = range.start + k;
            let expected = pattern(key, offset);
            if found != expected {
                return Err(Mismatch {
                    offset,
                    expected,
                    found,
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sample_ranges_cover_small_blocks_and_stay_inside_large_ones() {
        assert_eq!(sample_ranges(1)[0], 0..1);
        assert_eq!(sample_ranges(SMALL_BLOCK)[0], 0..SMALL_BLOCK);
        for len in [SMALL_BLOCK + 1, 1000, 4096, 1 << 20] {
            let ranges = sample_ranges(len);
            assert_eq!(ranges[0], 0..EDGE);
            assert_eq!(ranges[4], len - EDGE..len);
            assert!(ranges.iter().all(|r| r.end <= len && !r.is_empty()));
        }
    }

    #[test]
    fn pattern_depends_on_id_and_offset() {
        let a: Vec<u8> = (0..64).map(|i| pattern(1, i)).collect();
        let b: Vec<u8> = (0..64).map(|i| pattern(2, i)).collect();
        let shifted: Vec<u8> = (1..65).map(|i| pattern(1, i)).collect();
        assert_ne!(a, b);
        assert_ne!(a, shifted);
    }
}
