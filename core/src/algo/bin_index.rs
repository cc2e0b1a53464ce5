//! Bin numbering: which bin a size of free chunk falls in, and the sizes the policy lists.
//!
//! Bins 0–63 each hold exactly one size (1…64 granules). Bins 64–127 are tree bins:
//! logarithmic, four sub-bins per power of two, the last one open-ended. Where each shape keeps
//! the chunks of a bin (lists, the size table, tries) is `crate::algo::bins`'s business.

/// Number of bins of the [`Wide`](crate::Wide) shape ([`Compact`](crate::Compact) keeps fewer
/// tree bins, its last one open-ended).
pub(crate) const BIN_COUNT: usize = 128;
/// Bins below this index hold exactly one size each.
pub(crate) const EXACT_BINS: usize = 64;
/// The listed sizes of the policy: a request of up to this many granules may take the victim,
/// and a realloc's move is bounded by it (see `crate::algo::heap`). Every shape serves the same
/// policy; the [`Wide`](crate::Wide) shape also keeps a list for each of these sizes.
pub(crate) const LIST_SIZES: usize = 2047;
/// Tree sub-bins per power of two (a power of two itself).
const SUB_BINS_LOG2: u32 = 2;
/// The smallest power of two served by the tree bins: `2^6 = 64` granules.
const FIRST_LOG_POW: u32 = 6;

/// The bin that holds free chunks of `size` granules (`size >= 1`). `O(1)`: one
/// `leading_zeros`, a shift and a mask.
#[inline]
pub(crate) const fn bin_of(size: usize) -> usize {
    if size <= EXACT_BINS {
        return size.saturating_sub(1);
    }
    let pow = usize::BITS - 1 - size.leading_zeros();
    let sub = (size >> (pow - SUB_BINS_LOG2)) & ((1 << SUB_BINS_LOG2) - 1);
    let idx = (((pow - FIRST_LOG_POW) << SUB_BINS_LOG2) as usize) + sub;
    if idx >= BIN_COUNT - EXACT_BINS {
        BIN_COUNT - 1
    } else {
        EXACT_BINS + idx
    }
}

/// The smallest size in granules that tree bin `bin` holds (the open-ended last bin
/// holds every size from there on).
#[inline]
pub(crate) const fn log_bin_min(bin: usize) -> usize {
    LOG_BIN_MIN[bin - EXACT_BINS]
}

/// [`log_bin_min`] of every tree bin, computed once.
const LOG_BIN_MIN: [usize; BIN_COUNT - EXACT_BINS] = {
    let mut t = [0; BIN_COUNT - EXACT_BINS];
    let mut idx = 0;
    while idx < t.len() {
        let pow = FIRST_LOG_POW + (idx as u32 >> SUB_BINS_LOG2);
        let sub = idx & ((1 << SUB_BINS_LOG2) - 1);
        let min = ((1 << SUB_BINS_LOG2) + sub) << (pow - SUB_BINS_LOG2);
        // The first bin's range starts at 64, which is the last exact size.
        t[idx] = if min > EXACT_BINS {
            min
        } else {
            EXACT_BINS + 1
        };
        idx += 1;
    }
    t
};

/// The highest size bit on which chunks of tree bin `bin` may differ: the trie's first
/// branching bit. All sizes in the bin agree on every bit above it.
#[inline]
pub(crate) const fn top_bit(bin: usize) -> u32 {
    if bin == BIN_COUNT - 1 {
        usize::BITS - 1
    } else {
        let pow = FIRST_LOG_POW + ((bin - EXACT_BINS) as u32 >> SUB_BINS_LOG2);
        pow - SUB_BINS_LOG2 - 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_bins_hold_one_size_each() {
        for s in 1..=64 {
            assert_eq!(bin_of(s), s - 1);
        }
    }

    #[test]
    fn log_bins_are_monotone_and_cover_all_sizes() {
        let mut last = bin_of(65);
        assert_eq!(last, EXACT_BINS);
        let mut s = 65usize;
        while s < 1 << 30 {
            let b = bin_of(s);
            assert!(b == last || b == last + 1, "size {s}: bin {b} after {last}");
            last = b;
            s += 1 + s / 64;
        }
        assert_eq!(bin_of(usize::MAX), BIN_COUNT - 1);
        assert_eq!(bin_of(1 << 40), BIN_COUNT - 1);
    }

    #[test]
    fn log_bin_min_is_the_first_size_of_each_bin() {
        for b in EXACT_BINS..BIN_COUNT {
            let min = log_bin_min(b);
            assert_eq!(bin_of(min), b, "bin {b}");
            assert_eq!(bin_of(min - 1), b - 1, "bin {b}");
        }
    }

    #[test]
    fn sizes_of_a_log_bin_agree_above_its_top_bit() {
        let limit = if cfg!(miri) { 5_000 } else { 1 << 22 };
        // Each size shares every bit above the bin's top bit with the bin's first size.
        let mut first = 65usize;
        for s in 65usize..limit {
            let b = bin_of(s);
            if b == BIN_COUNT - 1 {
                break;
            }
            if b != bin_of(first) {
                first = s;
            }
            let tb = top_bit(b);
            assert_eq!(s >> (tb + 1), first >> (tb + 1), "size {s} bin {b}");
        }
    }
}
