//! A hasher for maps keyed by device addresses: one multiplication, no DoS resistance (the keys
//! are addresses a pool handed out, not input from outside). The device pool's own maps and
//! the C ABI's map of the blocks it handed out use it.

use core::hash::{BuildHasherDefault, Hasher};

/// Fibonacci hashing of one integer key: the key times 2^64 / φ, high bits first. Addresses
/// are multiples of the granule, so their low bits carry nothing; the multiplication spreads
/// the bits that vary into the high ones, which `hashbrown` uses for its control bytes, and
/// the rotation brings them to the low ones it indexes with.
#[derive(Clone, Copy, Debug, Default)]
pub struct AddrHasher(u64);

impl Hasher for AddrHasher {
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }

    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    #[inline]
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0 ^ n)
            .wrapping_mul(0x9e37_79b9_7f4a_7c15)
            .rotate_left(26);
    }

    #[inline]
    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }
}

/// The `BuildHasher` of [`AddrHasher`].
pub type AddrHash = BuildHasherDefault<AddrHasher>;

/// A map keyed by address.
pub(crate) type AddrMap<V> = std::collections::HashMap<usize, V, AddrHash>;
