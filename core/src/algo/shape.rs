//! Which bins a heap keeps beside the memory it manages: [`Wide`], the default, or [`Compact`],
//! for small machines. Both serve the same policy (best fit, oldest first among equals, the
//! top and the victim: see `crate::algo::heap`), so they hand out the same addresses; they differ in
//! the heap's own state and in how fast a size is found.
//!
//! - [`Wide`]: a list for every size up to 2047 granules, the size table up to 16383, tries
//!   above (see `crate::algo::bins`): most of a heap's state is the two ends of each list, about
//!   20 KiB on a 32-bit target.
//! - [`Compact`]: a list for every size up to 64 granules (1 KiB at the host granule), and
//!   tries for everything above, in 32 tree bins (the last open-ended, from 14336 granules,
//!   224 KiB at the host granule), so that a `GlobalHeap` fits in 1 KiB on a 32-bit target. A size
//!   above the lists is found by a walk of its bin's trie, one chunk per level, rather than in
//!   a list. Sizes: `docs/small-machines.md`; speeds: `docs/measurements.md`.

use core::fmt::Debug;

use crate::algo::size_table::{SizeTable, Table};

/// The bins a heap keeps: [`Wide`] (the default) or [`Compact`]. A type parameter of
/// [`crate::InlineHeap`] and [`crate::GlobalHeap`], so that the lists' sizes are constants of the
/// compiled code. Sealed: the bins rely on its figures.
pub trait BinShape: sealed::Shape {}

/// The default bins: a list per size up to 2047 granules (32 KiB at the host granule), the size
/// table up to 16383 granules, tries above (see `docs/heap.md`).
#[derive(Debug)]
pub enum Wide {}

/// Bins for small machines: a list per size up to 64 granules (1 KiB at the host granule),
/// tries above, in 32 tree bins. The same policy and addresses as [`Wide`]; a `GlobalHeap` of
/// them is at most 1 KiB on a 32-bit target (size: `docs/small-machines.md`).
#[derive(Debug)]
pub enum Compact {}

impl BinShape for Wide {}
impl BinShape for Compact {}

/// Fixed-size storage with a constant empty value: the bins' arrays, whose lengths each shape
/// chooses.
pub trait Slots<T>: AsRef<[T]> + AsMut<[T]> {
    /// Every slot empty (zeros).
    const EMPTY: Self;
}

impl<const N: usize> Slots<u64> for [u64; N] {
    const EMPTY: Self = [0; N];
}

impl<C: Copy, const N: usize> Slots<Option<C>> for [Option<C>; N] {
    const EMPTY: Self = [None; N];
}

/// The two ends of a list: its oldest chunk (where chunks are taken) and its newest (where
/// they are filed).
#[derive(Clone, Copy)]
#[repr(C)]
pub struct Ends<C> {
    pub(crate) head: Option<C>,
    pub(crate) tail: Option<C>,
}

impl<C> Ends<C> {
    /// An empty list's ends.
    pub(crate) const NONE: Self = Ends {
        head: None,
        tail: None,
    };
}

impl<C: Copy, const N: usize> Slots<Ends<C>> for [Ends<C>; N] {
    const EMPTY: Self = [Ends::NONE; N];
}

pub(crate) mod sealed {
    use super::*;

    /// The figures and storage of a [`super::BinShape`].
    pub trait Shape {
        /// Sizes `1..=LISTS` granules have a list each; a power of two or one less, so that
        /// the list slots are a power of two (`SLOTS`).
        const LISTS: usize;
        /// The largest size the size table holds, or `LISTS` when there is none.
        const TABLE_LAST: usize;
        /// The last bin, open-ended: every size of its bin and above is in its trie.
        const LAST_BIN: usize;
        /// The list map, one bit per list.
        type Map: Slots<u64>;
        /// Each list's ends.
        type Lists<C: Copy>: Slots<Ends<C>>;
        /// Each trie's root, from the first bin above the table.
        type Roots<C: Copy>: Slots<Option<C>>;
        /// The size table, or nothing.
        type Table<C: Copy + Eq + Debug>: Table<C>;
    }

    impl Shape for Wide {
        const LISTS: usize = 2047;
        const TABLE_LAST: usize = crate::algo::size_table::LAST;
        const LAST_BIN: usize = crate::algo::bin_index::BIN_COUNT - 1;
        type Map = [u64; 32];
        type Lists<C: Copy> = [Ends<C>; 2048];
        type Roots<C: Copy> = [Option<C>; 32];
        type Table<C: Copy + Eq + Debug> = SizeTable<C>;
    }

    impl Shape for Compact {
        const LISTS: usize = 64;
        const TABLE_LAST: usize = 64;
        // 32 tree bins rather than 16: the open-ended last one branches on every bit of a
        // size, a spine of nodes on the zero bits above its sizes, so it starts at 14336
        // granules rather than 896 (figures: `docs/measurements.md`), for 64 bytes of roots.
        const LAST_BIN: usize = crate::algo::bin_index::EXACT_BINS + 31;
        type Map = [u64; 1];
        type Lists<C: Copy> = [Ends<C>; 64];
        type Roots<C: Copy> = [Option<C>; 32];
        type Table<C: Copy + Eq + Debug> = crate::algo::size_table::NoTable;
    }
}
