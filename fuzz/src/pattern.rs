//! The byte pattern the driver keeps in every live allocation of an inline heap, written and
//! verified a 256-byte row at a time.
//!
//! Byte `i` of the pattern of `seed` is `(seed + i) ^ 29 * (i >> 8)` (all modulo 256): it
//! changes along the allocation, so a copy from the wrong offset is caught as well as a
//! foreign write. Within one 256-byte row of an allocation (bytes `256 c .. 256 c + 256`) the
//! first term is `seed + r` and the second is the constant `29 c`, so every row is a slice of
//! one precomputed table row: [`fill`] copies rows with `memcpy` and [`verify`] compares them
//! with `memcmp`. The bytes are exactly those of [`pattern`], every byte is written and every
//! byte is compared, at a cost per row rather than per byte (the fuzz build instruments every
//! comparison in a byte loop, which made filling and verifying large allocations most of a
//! run's time).

/// Bytes per row.
const ROW: usize = 256;

/// `TABLE[k][j] = (j % 256) ^ k`: the row of an allocation whose row constant is `k`, for any
/// seed, starts at `j = seed`.
static TABLE: [[u8; 2 * ROW]; 256] = table();

const fn table() -> [[u8; 2 * ROW]; 256] {
    let mut t = [[0u8; 2 * ROW]; 256];
    let mut k = 0;
    while k < 256 {
        let mut j = 0;
        while j < 2 * ROW {
            t[k][j] = (j as u8) ^ (k as u8);
            j += 1;
        }
        k += 1;
    }
    t
}

/// The byte at `i` of the pattern of `seed`.
#[inline]
pub fn pattern(seed: u8, i: usize) -> u8 {
    seed.wrapping_add(i as u8) ^ ((i >> 8) as u8).wrapping_mul(29)
}

/// The pattern of `seed` for row `row`, `len` bytes long (at most [`ROW`]).
#[inline]
fn row(seed: u8, row: usize, len: usize) -> &'static [u8] {
    let k = (row as u8).wrapping_mul(29);
    let start = seed as usize;
    &TABLE[k as usize][start..start + len]
}

/// Writes the pattern of `seed` over `bytes`, which start at offset `from` of the allocation
/// (a multiple of [`ROW`]).
pub fn fill_from(bytes: &mut [u8], from: usize, seed: u8) {
    debug_assert_eq!(from % ROW, 0);
    for (c, chunk) in bytes.chunks_mut(ROW).enumerate() {
        chunk.copy_from_slice(row(seed, from / ROW + c, chunk.len()));
    }
}

/// Writes the pattern of `seed` over an allocation's first `bytes.len()` bytes.
pub fn fill(bytes: &mut [u8], seed: u8) {
    fill_from(bytes, 0, seed);
}

/// Checks that `bytes`, an allocation's first bytes, hold the pattern of `seed`; on a
/// mismatch, returns the offset of the first byte that differs.
pub fn verify(bytes: &[u8], seed: u8) -> Result<(), usize> {
    for (c, chunk) in bytes.chunks(ROW).enumerate() {
        if chunk != row(seed, c, chunk.len()) {
            let k = (0..chunk.len())
                .find(|&k| chunk[k] != pattern(seed, c * ROW + k))
                .expect("a row that differs has a byte that differs");
            return Err(c * ROW + k);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rows give exactly the bytes of `pattern`, for every seed, across many rows (the
    /// row constant cycles every 256 rows).
    #[test]
    fn rows_are_the_pattern() {
        let len = 257 * ROW + 77;
        let mut buf = vec![0u8; len];
        for seed in 0..=255u8 {
            fill(&mut buf, seed);
            for (i, &b) in buf.iter().enumerate() {
                assert_eq!(b, pattern(seed, i), "seed {seed}, byte {i}");
            }
            assert_eq!(verify(&buf, seed), Ok(()));
        }
    }

    #[test]
    fn fill_from_continues_the_pattern() {
        let mut whole = vec![0u8; 5 * ROW + 3];
        fill(&mut whole, 7);
        let mut tail = vec![0u8; 3 * ROW + 3];
        fill_from(&mut tail, 2 * ROW, 7);
        assert_eq!(&whole[2 * ROW..], &tail[..]);
    }

    /// Every single changed byte is found, at its offset.
    #[test]
    fn verify_finds_every_changed_byte() {
        let len = 3 * ROW + 10;
        let mut buf = vec![0u8; len];
        fill(&mut buf, 200);
        for i in 0..len {
            buf[i] ^= 0x40;
            assert_eq!(verify(&buf, 200), Err(i));
            buf[i] ^= 0x40;
        }
        assert_eq!(verify(&buf, 201), Err(0));
        assert_eq!(verify(&buf[..0], 9), Ok(()));
    }
}
