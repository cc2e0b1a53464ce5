//! A pool's policy: how it grows, how much it may hold, what bypasses it, and what trimming
//! gives back. The knobs of the allocators this layer learned from:
//!
//! | policy | Paddle | MindSpore | TensorFlow |
//! | --- | --- | --- | --- |
//! | [`Growth::Fixed`] | AutoGrowth: max(request, chunk) | increase size | — |
//! | [`Growth::Doubling`] | — | — | `allow_growth` (BFC's doubling region sizes) |
//! | [`Reserve::Bytes`] / [`Reserve::Fraction`] | Pre-allocation, `fraction_of_gpu_memory_to_use` |
//! init size | `per_process_gpu_memory_fraction` | | [`Policy::limit`] | `gpu_memory_limit_mb` |
//! max size | `memory_limit` | | [`Policy::bypass_above`] | large-request bypass | — | — |
//! | [`Policy::trim_above`] | — | — | — (glibc's `M_TRIM_THRESHOLD`) |
//!
//! Every figure is in bytes. Growth always takes at least what the request that triggered it
//! needs (with the heap's overhead and the source's rounding), so a single large request never
//! fails for want of a larger increment.

use crate::error::PolicyError;

/// How a pool asks for more memory on a miss.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Growth {
    /// Each region is at least this many bytes.
    Fixed(usize),
    /// Regions double in size, from `initial` up to `cap` bytes (TensorFlow's BFC allocator
    /// with `allow_growth`).
    Doubling {
        /// The first region's size.
        initial: usize,
        /// The largest size doubling reaches.
        cap: usize,
    },
}

/// What a pool reserves before its first allocation.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Reserve {
    /// Nothing: grow on demand.
    Nothing,
    /// One region of this many bytes (at most `isize::MAX`).
    Bytes(usize),
    /// One region of this fraction (0 to 1, both included; 0 reserves nothing) of what the
    /// source says it has available (e.g. a device's free memory); nothing if the source cannot
    /// say. NaN, negative and larger fractions are refused ([`PolicyError::ReserveFraction`]).
    Fraction(f64),
}

/// A pool's policy. Build one with [`Policy::new`] and the `const` setters.
///
/// # Examples
///
/// ```
/// use tagalloc::{Growth, Policy, Reserve};
///
/// // MindSpore's init / increase / max, for a 16 GiB device.
/// const DEVICE: Policy = Policy::new()
///     .reserve(Reserve::Bytes(2 << 30))
///     .growth(Growth::Fixed(1 << 30))
///     .limit(16 << 30);
/// // TensorFlow's allow_growth: regions of 2 MiB, 4 MiB, ... up to 1 GiB.
/// const HOST: Policy = Policy::new()
///     .growth(Growth::Doubling { initial: 2 << 20, cap: 1 << 30 })
///     .bypass_above(64 << 20)
///     .release_above(1 << 20);
/// assert_eq!(DEVICE.limit, Some(16 << 30));
/// assert_eq!(HOST.bypass_above, Some(64 << 20));
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Policy {
    /// How regions are sized on a miss.
    pub growth: Growth,
    /// What is reserved before the first allocation.
    pub reserve: Reserve,
    /// The most bytes the pool may hold from its source at once; `None`: no limit.
    pub limit: Option<usize>,
    /// Requests above this many bytes get a region of their own, given back when they are
    /// freed; `None`: no bypass.
    pub bypass_above: Option<usize>,
    /// When trimming, the pages inside free chunks of at least this many bytes are released
    /// (where the source can); `None`: never.
    pub release_above: Option<usize>,
    /// A free of a block of at least this many bytes gives back the regions it leaves wholly
    /// free (see [`Policy::trim_above`]); `None`: only an explicit trim gives memory back.
    pub trim_above: Option<usize>,
}

impl Policy {
    /// Grow on demand by regions of at least 1 MiB; no reservation, no limit, no bypass; trim
    /// gives back wholly free regions only.
    pub const fn new() -> Self {
        Policy {
            growth: Growth::Fixed(1 << 20),
            reserve: Reserve::Nothing,
            limit: None,
            bypass_above: None,
            release_above: None,
            trim_above: None,
        }
    }

    /// With this growth.
    pub const fn growth(self, growth: Growth) -> Self {
        Policy { growth, ..self }
    }

    /// With this reservation.
    pub const fn reserve(self, reserve: Reserve) -> Self {
        Policy { reserve, ..self }
    }

    /// With a hard limit on the bytes held from the source.
    pub const fn limit(self, bytes: usize) -> Self {
        Policy {
            limit: Some(bytes),
            ..self
        }
    }

    /// With requests above `bytes` bypassing the pool's shared regions.
    pub const fn bypass_above(self, bytes: usize) -> Self {
        Policy {
            bypass_above: Some(bytes),
            ..self
        }
    }

    /// With trimming releasing the pages of free chunks of at least `bytes`.
    pub const fn release_above(self, bytes: usize) -> Self {
        Policy {
            release_above: Some(bytes),
            ..self
        }
    }

    /// With a free of a block of at least `bytes` (one that does not bypass the regions)
    /// giving back the regions it leaves wholly free ([`crate::Pool::trim_regions`], in
    /// `O(regions)`), as glibc trims its heap at a free once the free top exceeds
    /// `M_TRIM_THRESHOLD` (128 KiB by default): memory a program's large temporary blocks used
    /// does not stay resident until an explicit trim. Free region ends are not cut there (a
    /// region cut at every large free grew again elsewhere, and CPython's peak RSS rose:
    /// `docs/measurements.md`, "large frees give back wholly free regions").
    pub const fn trim_above(self, bytes: usize) -> Self {
        Policy {
            trim_above: Some(bytes),
            ..self
        }
    }
}

impl Policy {
    /// Whether a pool can follow this policy: every region size at most `isize::MAX`, a
    /// reserved fraction from 0 to 1. A `const fn`, so that a policy built in a constant can
    /// be checked at compile time (`const _: () = assert!(P.check().is_ok());`); pools check
    /// it themselves before they obtain anything.
    pub const fn check(&self) -> Result<(), PolicyError> {
        const MAX: usize = isize::MAX as usize;
        match self.growth {
            Growth::Fixed(bytes) if bytes > MAX => return Err(PolicyError::GrowthSize),
            Growth::Doubling { initial, cap } if initial > MAX || cap > MAX => {
                return Err(PolicyError::GrowthSize)
            }
            _ => {}
        }
        match self.reserve {
            Reserve::Bytes(bytes) if bytes > MAX => Err(PolicyError::ReserveBytes),
            // Written so that NaN, which compares false with everything, is refused.
            Reserve::Fraction(f) if !(f >= 0.0 && f <= 1.0) => Err(PolicyError::ReserveFraction),
            _ => Ok(()),
        }
    }
}

impl Default for Policy {
    fn default() -> Self {
        Self::new()
    }
}
