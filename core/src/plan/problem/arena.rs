//! A layout used at run time: each buffer's address in a region.

use alloc::vec::Vec;
use core::fmt;

use super::{Layout, Problem};

/// The addresses of one space's buffers in a region given for it: host memory, or a block of
/// the device pool (an address the host never dereferences). It holds addresses only; what is
/// done with them is the caller's.
///
/// Invariant: the region `[base, base + len)` holds the space's arena, and `base` is a
/// multiple of the largest alignment of the space's buffers, so every address it gives keeps
/// its buffer's alignment and its bytes within the region.
///
/// ```
/// use tagalloc::plan::{solve, Item, Lifetimes, PlannedArena, Problem, SolveOptions};
///
/// let problem = Problem {
///     items: vec![Item::new(100).with_align(16), Item::new(50).with_align(16)],
///     lifetimes: Lifetimes::Intervals(vec![(0, 2), (1, 3)]),
///     ..Problem::default()
/// };
/// let solved = solve(&problem, &SolveOptions::default(), &mut || false)?;
/// let mut memory = vec![0u128; 16]; // 256 bytes, 16-aligned
/// let base = memory.as_mut_ptr() as usize as u64;
/// let arena = PlannedArena::new(&problem, &solved.layout, 0, base, 256).unwrap();
/// assert_eq!(arena.address(0), Some(base + solved.layout.offsets[0]));
/// # Ok::<(), tagalloc::plan::ProblemError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedArena {
    base: u64,
    len: u64,
    /// Each buffer's offset, `None` for buffers of other spaces.
    offsets: Vec<Option<u64>>,
    sizes: Vec<u64>,
}

/// Why a region cannot hold a layout's space.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArenaError {
    /// The region is smaller than the space's arena.
    TooSmall {
        /// The arena's bytes.
        needed: u64,
        /// The region's.
        given: u64,
    },
    /// The region's start is not a multiple of the largest alignment among the space's
    /// buffers.
    Misaligned {
        /// That alignment.
        align: u64,
    },
    /// The layout does not fit the problem (lengths, or no such space).
    WrongLayout,
}

impl fmt::Display for ArenaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ArenaError::TooSmall { needed, given } => {
                write!(f, "region of {given} bytes for an arena of {needed}")
            }
            ArenaError::Misaligned { align } => {
                write!(f, "region start not a multiple of {align}")
            }
            ArenaError::WrongLayout => f.write_str("layout does not match the problem"),
        }
    }
}

impl core::error::Error for ArenaError {}

impl PlannedArena {
    /// The addresses of `space`'s buffers in the region `[base, base + len)`. The layout is
    /// trusted to be valid (see [`check_layout`](super::check_layout)); the region is checked.
    pub fn new(
        problem: &Problem,
        layout: &Layout,
        space: u32,
        base: u64,
        len: u64,
    ) -> Result<PlannedArena, ArenaError> {
        let n = problem.items.len();
        if layout.offsets.len() != n
            || layout.spaces.len() != n
            || space as usize >= layout.arenas.len()
        {
            return Err(ArenaError::WrongLayout);
        }
        let needed = layout.arenas[space as usize];
        if len < needed || base.checked_add(len).is_none() {
            return Err(ArenaError::TooSmall { needed, given: len });
        }
        let mut align = 1;
        let mut offsets = Vec::with_capacity(n);
        for (b, it) in problem.items.iter().enumerate() {
            if layout.spaces[b] == space {
                if layout.offsets[b]
                    .checked_add(it.size)
                    .is_none_or(|e| e > len)
                {
                    return Err(ArenaError::WrongLayout);
                }
                align = align.max(it.align);
                offsets.push(Some(layout.offsets[b]));
            } else {
                offsets.push(None);
            }
        }
        if !align.is_power_of_two() || !base.is_multiple_of(align) {
            return Err(ArenaError::Misaligned { align });
        }
        Ok(PlannedArena {
            base,
            len,
            offsets,
            sizes: problem.items.iter().map(|i| i.size).collect(),
        })
    }

    /// Buffer `b`'s address (`None`: not a buffer of this space).
    pub fn address(&self, b: usize) -> Option<u64> {
        Some(self.base + (*self.offsets.get(b)?)?)
    }

    /// Buffer `b`'s bytes as `(address, size)`.
    pub fn range(&self, b: usize) -> Option<(u64, u64)> {
        Some((self.address(b)?, self.sizes[b]))
    }

    /// The region's start and length.
    pub fn region(&self) -> (u64, u64) {
        (self.base, self.len)
    }
}
