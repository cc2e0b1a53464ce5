//! The constants and pure size rules of PyTorch's CUDA caching allocator, each from
//! `c10/cuda/CUDACachingAllocator.cpp` (pytorch/pytorch at commit
//! 001074d25084fdb87a799823e395a50f5ec044d3; function names below are that file's).

use core::fmt;

/// All sizes are rounded to at least this (`kMinBlockSize`).
pub const K_MIN_BLOCK_SIZE: usize = 512;
/// The largest "small" request: 1 MiB (`kSmallSize`).
pub const K_SMALL_SIZE: usize = 1 << 20;
/// Small requests are packed in 2 MiB segments (`kSmallBuffer`).
pub const K_SMALL_BUFFER: usize = 2 << 20;
/// Requests between 1 and 10 MiB get 20 MiB segments (`kLargeBuffer`); also the least
/// `max_split_size` and the default `max_non_split_rounding`.
pub const K_LARGE_BUFFER: usize = 20 << 20;
/// Requests below this (10 MiB) and above `K_SMALL_SIZE` use `K_LARGE_BUFFER` segments
/// (`kMinLargeAlloc`).
pub const K_MIN_LARGE_ALLOC: usize = 10 << 20;
/// Larger requests get segments rounded up to 2 MiB (`kRoundLarge`).
pub const K_ROUND_LARGE: usize = 2 << 20;
/// Requests of this size or more are refused outright ("Tried to allocate more than 1EB
/// memory", `NativeCachingAllocator::allocate`).
pub const ONE_EXA_BYTES: usize = 1 << 60;

/// The settings of `PYTORCH_CUDA_ALLOC_CONF` that shape placement and are modelled here.
///
/// Not modelled (all off by default in PyTorch): `roundup_power2_divisions`,
/// `garbage_collection_threshold`, `expandable_segments`, a per-process memory fraction, CUDA
/// graph private pools and free-memory callbacks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TorchConfig {
    /// Blocks this large or larger are never split (`max_split_size_mb`; default unlimited,
    /// `usize::MAX`). PyTorch refuses values under 20 MiB
    /// (`AcceleratorAllocatorConfig::parseMaxSplitSize`); so does [`TorchConfig::validate`].
    pub max_split_size: usize,
    /// How much larger than an oversize request a cached oversize block may be and still serve
    /// it (`max_non_split_rounding_mb` in newer PyTorch; `kLargeBuffer`, 20 MiB, hard-coded in
    /// `get_free_block` at the commit followed here and the default since).
    pub max_non_split_rounding: usize,
}

impl Default for TorchConfig {
    fn default() -> TorchConfig {
        TorchConfig {
            max_split_size: usize::MAX,
            max_non_split_rounding: K_LARGE_BUFFER,
        }
    }
}

/// A [`TorchConfig`] PyTorch would refuse.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ConfigError {
    /// `max_split_size` under 20 MiB.
    MaxSplitSizeTooSmall(usize),
    /// `max_non_split_rounding` under 20 MiB.
    MaxNonSplitRoundingTooSmall(usize),
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ConfigError::MaxSplitSizeTooSmall(v) => {
                write!(
                    f,
                    "max_split_size {v} is under {K_LARGE_BUFFER} bytes (20 MiB)"
                )
            }
            ConfigError::MaxNonSplitRoundingTooSmall(v) => write!(
                f,
                "max_non_split_rounding {v} is under {K_LARGE_BUFFER} bytes (20 MiB)"
            ),
        }
    }
}

impl std::error::Error for ConfigError {}

impl TorchConfig {
    /// Refuses what PyTorch's configuration parser refuses: both sizes must be at least
    /// `kLargeBuffer` (`parseMaxSplitSize`, `parseMaxNonSplitRoundingSize`).
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.max_split_size < K_LARGE_BUFFER {
            return Err(ConfigError::MaxSplitSizeTooSmall(self.max_split_size));
        }
        if self.max_non_split_rounding < K_LARGE_BUFFER {
            return Err(ConfigError::MaxNonSplitRoundingTooSmall(
                self.max_non_split_rounding,
            ));
        }
        Ok(())
    }
}

/// The two pools of free blocks (`DeviceCachingAllocator::small_blocks`, `large_blocks`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PoolKind {
    /// Blocks of requests up to 1 MiB, carved from 2 MiB segments.
    Small,
    /// Everything larger.
    Large,
}

/// `round_size` with `roundup_power2_divisions` unset: at least 512 bytes, and a multiple of
/// 512. Saturates instead of overflowing (sizes that large are refused before this anyway).
pub fn round_size(size: usize) -> usize {
    if size < K_MIN_BLOCK_SIZE {
        K_MIN_BLOCK_SIZE
    } else {
        size.div_ceil(K_MIN_BLOCK_SIZE)
            .saturating_mul(K_MIN_BLOCK_SIZE)
    }
}

/// `get_pool`: the small pool for rounded sizes up to `kSmallSize`, else the large one.
pub fn pool_of(rounded: usize) -> PoolKind {
    if rounded <= K_SMALL_SIZE {
        PoolKind::Small
    } else {
        PoolKind::Large
    }
}

/// `get_allocation_size`: the segment to `cudaMalloc` for a rounded request that no cached
/// block serves: 2 MiB for small requests, 20 MiB up to 10 MiB, else the size rounded up to
/// 2 MiB.
pub fn allocation_size(rounded: usize) -> usize {
    if rounded <= K_SMALL_SIZE {
        K_SMALL_BUFFER
    } else if rounded < K_MIN_LARGE_ALLOC {
        K_LARGE_BUFFER
    } else {
        rounded
            .div_ceil(K_ROUND_LARGE)
            .saturating_mul(K_ROUND_LARGE)
    }
}

/// `should_split`: whether a free block of `block_size` chosen for a rounded request of
/// `size` is split, the rest going back to the pool. Small pool: when at least 512 bytes
/// remain. Large pool: when the request is under `max_split_size` and more than 1 MiB
/// remains.
pub fn should_split(pool: PoolKind, block_size: usize, size: usize, config: &TorchConfig) -> bool {
    let remaining = block_size - size;
    match pool {
        PoolKind::Small => remaining >= K_MIN_BLOCK_SIZE,
        PoolKind::Large => size < config.max_split_size && remaining > K_SMALL_SIZE,
    }
}

/// The oversize rules of `get_free_block`, applied to the best-fitting cached block: a request
/// under `max_split_size` may not take an oversize block (one of `max_split_size` or more),
/// and an oversize request may take one only if it is less than `max_non_split_rounding`
/// larger than the request.
pub fn may_use_block(block_size: usize, size: usize, config: &TorchConfig) -> bool {
    if size < config.max_split_size && block_size >= config.max_split_size {
        return false;
    }
    if size >= config.max_split_size
        && block_size >= size.saturating_add(config.max_non_split_rounding)
    {
        return false;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1 << 20;

    /// `round_size`: `size < kMinBlockSize` gives `kMinBlockSize`, else
    /// `kMinBlockSize * ceil(size / kMinBlockSize)` (no power-of-two divisions configured).
    #[test]
    fn rounding_to_512_bytes() {
        assert_eq!(round_size(0), 512);
        assert_eq!(round_size(1), 512);
        assert_eq!(round_size(512), 512);
        assert_eq!(round_size(513), 1024);
        assert_eq!(round_size(4096), 4096);
        assert_eq!(round_size(5 * MIB + 1), 5 * MIB + 512);
        assert_eq!(
            round_size(usize::MAX),
            usize::MAX,
            "saturates, never panics"
        );
    }

    /// `get_pool`: `size <= kSmallSize` selects `small_blocks`.
    #[test]
    fn pool_choice_at_one_mib() {
        assert_eq!(pool_of(512), PoolKind::Small);
        assert_eq!(pool_of(MIB), PoolKind::Small);
        assert_eq!(pool_of(MIB + 512), PoolKind::Large);
    }

    /// `get_allocation_size`: `kSmallBuffer` up to `kSmallSize`, `kLargeBuffer` below
    /// `kMinLargeAlloc`, else rounded up to `kRoundLarge`.
    #[test]
    fn segment_sizes() {
        assert_eq!(allocation_size(512), 2 * MIB);
        assert_eq!(allocation_size(MIB), 2 * MIB);
        assert_eq!(allocation_size(MIB + 512), 20 * MIB);
        assert_eq!(allocation_size(10 * MIB - 512), 20 * MIB);
        assert_eq!(allocation_size(10 * MIB), 10 * MIB);
        assert_eq!(allocation_size(10 * MIB + 512), 12 * MIB);
        assert_eq!(allocation_size(51 * MIB), 52 * MIB);
    }

    /// `should_split`: small pool `remaining >= kMinBlockSize`; large pool
    /// `size < max_split_size && remaining > kSmallSize`.
    #[test]
    fn split_thresholds() {
        let c = TorchConfig::default();
        assert!(should_split(PoolKind::Small, 2 * MIB, 2 * MIB - 512, &c));
        assert!(!should_split(PoolKind::Small, 2 * MIB, 2 * MIB, &c));
        assert!(
            !should_split(PoolKind::Large, 20 * MIB, 19 * MIB, &c),
            "exactly 1 MiB left"
        );
        assert!(should_split(PoolKind::Large, 20 * MIB, 19 * MIB - 512, &c));
        let limited = TorchConfig {
            max_split_size: 40 * MIB,
            ..c
        };
        assert!(!should_split(
            PoolKind::Large,
            100 * MIB,
            40 * MIB,
            &limited
        ));
        assert!(should_split(
            PoolKind::Large,
            100 * MIB,
            40 * MIB - 512,
            &limited
        ));
    }

    /// `get_free_block`: "Do not return an oversized block for a large request" and "Allow
    /// oversized block size to be rounded up but within a limit" (`kLargeBuffer`).
    #[test]
    fn oversize_blocks() {
        let c = TorchConfig {
            max_split_size: 40 * MIB,
            ..TorchConfig::default()
        };
        assert!(may_use_block(30 * MIB, 20 * MIB, &c));
        assert!(
            !may_use_block(40 * MIB, 20 * MIB, &c),
            "oversize block, small request"
        );
        assert!(may_use_block(59 * MIB, 40 * MIB, &c));
        assert!(
            !may_use_block(60 * MIB, 40 * MIB, &c),
            "20 MiB or more to spare"
        );
        let d = TorchConfig::default();
        assert!(
            may_use_block(1 << 40, 1 << 20, &d),
            "no oversize rules when unlimited"
        );
    }

    /// `parseMaxSplitSize`: "max_split_size_mb too small, must be >= 20".
    #[test]
    fn config_limits() {
        assert_eq!(TorchConfig::default().validate(), Ok(()));
        let small = TorchConfig {
            max_split_size: 20 * MIB - 1,
            ..TorchConfig::default()
        };
        assert_eq!(
            small.validate(),
            Err(ConfigError::MaxSplitSizeTooSmall(20 * MIB - 1))
        );
        let rounding = TorchConfig {
            max_non_split_rounding: MIB,
            ..TorchConfig::default()
        };
        assert!(rounding.validate().is_err());
    }
}
