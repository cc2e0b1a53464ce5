//! Decoding fuzz input into heap operations.
//!
//! Every value is decoded from a one-byte selector followed by its payload, so that the
//! distributions lean where the bugs are likely (small sizes, small alignments, the bins'
//! edges) and still reach zero, the overflow edges and invalid values. Running out of input
//! decodes as zeros, which are always valid choices.

use arbitrary::{Arbitrary, Result, Unstructured};

/// Bytes of address space each target lays its regions out in (the inline targets' arena).
pub const SPACE: usize = 1 << 20;

/// The most operations one input runs.
pub const MAX_OPS: usize = 2000;

/// A request size in bytes: mostly small, up to a few hundred KiB, sometimes zero or huge.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Size(pub usize);

const HUGE_SIZES: [usize; 9] = [
    usize::MAX,
    usize::MAX - 15,
    isize::MAX as usize,
    isize::MAX as usize - 7,
    isize::MAX as usize - 64,
    isize::MAX as usize + 1,
    1 << 40,
    SPACE,
    SPACE - 8,
];

impl<'a> Arbitrary<'a> for Size {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        Ok(Size(match u8::arbitrary(u)? {
            0..=119 => u.int_in_range(1..=64)?,
            120..=179 => u.int_in_range(1..=1100)?,
            180..=219 => u.int_in_range(1..=20_000)?,
            220..=235 => u.int_in_range(20_000..=300_000)?,
            236..=241 => 0,
            242..=247 => usize::arbitrary(u)?,
            _ => *u.choose(&HUGE_SIZES)?,
        }))
    }

    fn size_hint(_depth: usize) -> (usize, Option<usize>) {
        (1, Some(1 + size_of::<usize>()))
    }
}

/// An alignment: mostly powers of two up to a page, sometimes huge, zero or not a power of
/// two.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Align(pub usize);

const BAD_ALIGNS: [usize; 7] = [0, 3, 6, 24, 48, 1000, usize::MAX];

impl<'a> Arbitrary<'a> for Align {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        Ok(Align(match u8::arbitrary(u)? {
            0..=159 => 1 << u.int_in_range(0..=4)?,
            160..=223 => 1 << u.int_in_range(5..=12)?,
            224..=235 => *u.choose(&BAD_ALIGNS)?,
            236..=247 => 1 << u.int_in_range(13..=usize::BITS - 1)?,
            _ => usize::arbitrary(u)?,
        }))
    }

    fn size_hint(_depth: usize) -> (usize, Option<usize>) {
        (1, Some(1 + size_of::<usize>()))
    }
}

/// A region's length in bytes: mostly whole pages, sometimes too small, unaligned or huge.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Len(pub usize);

const HUGE_LENS: [usize; 5] = [
    usize::MAX,
    usize::MAX - 4095,
    isize::MAX as usize,
    1 << 40,
    SPACE,
];

impl<'a> Arbitrary<'a> for Len {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        Ok(Len(match u8::arbitrary(u)? {
            0..=127 => u.int_in_range(1..=16)? * 4096,
            128..=183 => u.int_in_range(0..=600)?,
            184..=223 => u.int_in_range(1..=64)? * 16384,
            224..=247 => u32::arbitrary(u)? as usize,
            _ => *u.choose(&HUGE_LENS)?,
        }))
    }

    fn size_hint(_depth: usize) -> (usize, Option<usize>) {
        (1, Some(1 + size_of::<usize>()))
    }
}

/// Where a new region goes: an offset into the target's address space, or (out-of-band heaps
/// only; inline targets skip it) any address at all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    /// Bytes from the start of the target's address space.
    Offset(usize),
    /// An absolute address.
    Raw(usize),
}

const RAW_BASES: [usize; 6] = [
    0,
    4096,
    usize::MAX & !4095,
    usize::MAX - 4095 - 65536,
    isize::MAX as usize + 1,
    1 << 40,
];

impl<'a> Arbitrary<'a> for Place {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        Ok(match u8::arbitrary(u)? {
            0..=175 => Place::Offset(u.int_in_range(0..=(SPACE / 4096 - 1))? * 4096),
            176..=231 => Place::Offset(u.int_in_range(0..=(SPACE / 16 - 1))? * 16),
            232..=243 => Place::Offset(u.int_in_range(0..=SPACE - 1)?),
            244..=249 => Place::Raw(*u.choose(&RAW_BASES)?),
            _ => Place::Raw(usize::arbitrary(u)?),
        })
    }

    fn size_hint(_depth: usize) -> (usize, Option<usize>) {
        (1, Some(1 + size_of::<usize>()))
    }
}

/// Which region an operation names: mostly one the target added, sometimes an address that
/// is not a region's base.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Arbitrary)]
pub struct RegionPick(pub u8);

impl RegionPick {
    /// The `n` regions are known by index; `None` means "not a region": the caller makes up
    /// an address.
    pub fn index(self, n: usize) -> Option<usize> {
        (n > 0 && self.0 < 232).then(|| self.0 as usize % n)
    }

    /// An address that is probably not a region's base, at this offset of the address space.
    pub fn stray_offset(self) -> usize {
        self.0 as usize * 4096 + 16
    }
}

/// One heap operation. `pick` chooses among the live allocations (modulo their count).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// `alloc(size, align)`.
    Alloc {
        /// Bytes asked for.
        size: Size,
        /// Alignment asked for.
        align: Align,
    },
    /// Frees a live allocation.
    Free {
        /// Which one.
        pick: u16,
    },
    /// Resizes a live allocation (the detached heap: in place, else allocate and free).
    Realloc {
        /// Which one.
        pick: u16,
        /// The new size.
        size: Size,
        /// The alignment if it moves.
        align: Align,
    },
    /// Adds a region.
    AddRegion {
        /// Its base.
        at: Place,
        /// Its length.
        len: Len,
    },
    /// Grows a region in place.
    ExtendRegion {
        /// Which region.
        pick: RegionPick,
        /// Bytes added.
        len: Len,
    },
    /// Removes a region.
    RemoveRegion {
        /// Which region.
        pick: RegionPick,
    },
    /// Removes every wholly free region.
    Trim,
}

impl<'a> Arbitrary<'a> for Op {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        Ok(match u8::arbitrary(u)? {
            0..=99 => Op::Alloc {
                size: u.arbitrary()?,
                align: u.arbitrary()?,
            },
            100..=179 => Op::Free {
                pick: u.arbitrary()?,
            },
            180..=211 => Op::Realloc {
                pick: u.arbitrary()?,
                size: u.arbitrary()?,
                align: u.arbitrary()?,
            },
            212..=229 => Op::AddRegion {
                at: u.arbitrary()?,
                len: u.arbitrary()?,
            },
            230..=241 => Op::ExtendRegion {
                pick: u.arbitrary()?,
                len: u.arbitrary()?,
            },
            242..=251 => Op::RemoveRegion {
                pick: u.arbitrary()?,
            },
            _ => Op::Trim,
        })
    }
}

/// How a run is set up: the granule and record table, and the first region.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Arbitrary)]
pub struct Config {
    /// Chooses the granule (each target maps it onto the granules its placement accepts).
    pub granule: u8,
    /// Chooses the detached record table: growable, or capped at a few records.
    pub table: u8,
    /// The first region's length, in 16 KiB steps (one more than this, modulo 16).
    pub first_region: u8,
}

impl Config {
    /// The length of the region every run starts with.
    pub fn first_region_len(&self) -> usize {
        (1 + (self.first_region as usize % 16)) * 16384
    }
}

/// A whole fuzz input: the set-up, then operations until the input runs out (at most
/// [`MAX_OPS`]).
#[derive(Clone, Debug)]
pub struct Input<T> {
    /// The set-up.
    pub config: Config,
    /// The operations, in order.
    pub ops: Vec<T>,
}

impl<'a, T: Arbitrary<'a>> Arbitrary<'a> for Input<T> {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        let config = u.arbitrary()?;
        // Most operations take two bytes or more: one allocation, seldom grown.
        let mut ops = Vec::with_capacity((u.len() / 2).min(MAX_OPS));
        while !u.is_empty() && ops.len() < MAX_OPS {
            match T::arbitrary(u) {
                Ok(op) => ops.push(op),
                Err(_) => break,
            }
        }
        Ok(Input { config, ops })
    }

    fn arbitrary_take_rest(mut u: Unstructured<'a>) -> Result<Self> {
        Self::arbitrary(&mut u)
    }
}
