//! Why a planning problem or a plan was refused.

use core::fmt;

/// A problem the planner cannot take, or a plan that does not hold.
///
/// Indices name positions in the buffer slice the function was given, never ids, so that a
/// caller with duplicate or meaningless ids can still find the culprit.
///
/// ```
/// use tagalloc::plan::{greedy_by_size, Buffer, PlanError};
///
/// let buffers = [Buffer::new(7, 64, 0, 4), Buffer::new(8, 64, 5, 5)];
/// assert_eq!(greedy_by_size(&buffers), Err(PlanError::EmptyLifetime { index: 1 }));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PlanError {
    /// The buffer's lifetime `[start, end)` is empty (`start >= end`).
    EmptyLifetime {
        /// The buffer's index.
        index: usize,
    },
    /// The buffer's alignment is zero or not a power of two.
    BadAlign {
        /// The buffer's index.
        index: usize,
    },
    /// The sizes of all buffers together overflow `u64`, so an arena holding them could not be
    /// described.
    TooLarge,
    /// The sizes fit in `u64`, but not once every buffer is padded to its alignment, which
    /// the solvers need (they stack buffers at aligned offsets): this buffer has the largest
    /// alignment, the one to lower.
    AlignTooLarge {
        /// The buffer's index.
        index: usize,
    },
    /// More buffers than the planner indexes (`u32::MAX - 1`).
    TooMany,
    /// The plan has a different number of offsets than there are buffers.
    WrongLength {
        /// Buffers given.
        buffers: usize,
        /// Offsets in the plan.
        offsets: usize,
    },
    /// The buffer's offset is not a multiple of its alignment.
    Misaligned {
        /// The buffer's index.
        index: usize,
    },
    /// Two buffers live at the same time share at least one byte.
    Overlap {
        /// One buffer's index.
        first: usize,
        /// The other's.
        second: usize,
    },
    /// The plan's arena is not the end of its highest buffer (`offset + size`, 0 if none): a
    /// buffer sticks out of it, or it claims more than it uses.
    ArenaMismatch {
        /// The arena the plan states.
        claimed: u64,
        /// The end of its highest buffer.
        actual: u64,
    },
}

impl fmt::Display for PlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            PlanError::EmptyLifetime { index } => {
                write!(f, "buffer {index}: empty lifetime (start >= end)")
            }
            PlanError::BadAlign { index } => {
                write!(f, "buffer {index}: alignment is not a power of two")
            }
            PlanError::TooLarge => f.write_str("total buffer size overflows u64"),
            PlanError::AlignTooLarge { index } => write!(
                f,
                "buffer {index}: alignment too large to be met: with every buffer padded to its \
                 alignment, an arena could pass 2^64 bytes"
            ),
            PlanError::TooMany => f.write_str("too many buffers (at most u32::MAX - 1)"),
            PlanError::WrongLength { buffers, offsets } => {
                write!(f, "{offsets} offsets for {buffers} buffers")
            }
            PlanError::Misaligned { index } => {
                write!(
                    f,
                    "buffer {index}: offset is not a multiple of its alignment"
                )
            }
            PlanError::Overlap { first, second } => write!(
                f,
                "buffers {first} and {second} are live at the same time and overlap"
            ),
            PlanError::ArenaMismatch { claimed, actual } => write!(
                f,
                "plan states an arena of {claimed} bytes but its buffers end at {actual}"
            ),
        }
    }
}

impl core::error::Error for PlanError {}
