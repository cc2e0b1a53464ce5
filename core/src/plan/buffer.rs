//! The planner's input and output: buffers with lifetimes, and offsets in one arena.

use alloc::vec::Vec;

use super::error::PlanError;

/// A buffer to place: `size` bytes live over the half-open interval `[start, end)` of some
/// clock (operator steps, trace events, …), at an offset that is a multiple of `align`.
///
/// Two buffers conflict when their lifetimes share a moment: `a.start < b.end && b.start <
/// a.end`. A buffer that ends at `t` and one that starts at `t` do not conflict, so memory
/// freed by one step can be reused by the next. A zero-size buffer conflicts with nothing.
///
/// Invariants the planner checks (and refuses with a [`PlanError`] otherwise): `start < end`,
/// `align` a power of two (1 means no requirement).
///
/// ```
/// use tagalloc::plan::Buffer;
///
/// let weights = Buffer::new(0, 4096, 0, 10).with_align(256); // live for the whole run
/// let scratch = Buffer::new(1, 512, 3, 4); // one step
/// assert_eq!(weights.align, 256);
/// assert_eq!(scratch.end - scratch.start, 1);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Buffer {
    /// The caller's name for the buffer; the planner never reads it.
    pub id: u64,
    /// Bytes it needs.
    pub size: u64,
    /// The first moment it is live.
    pub start: u64,
    /// The first moment it is no longer live.
    pub end: u64,
    /// The alignment of its offset: a power of two, 1 for none.
    pub align: u64,
}

impl Buffer {
    /// A buffer of `size` bytes live over `[start, end)`, with no alignment requirement.
    pub const fn new(id: u64, size: u64, start: u64, end: u64) -> Self {
        Buffer {
            id,
            size,
            start,
            end,
            align: 1,
        }
    }

    /// The same buffer with its offset aligned to `align` (a power of two).
    pub const fn with_align(self, align: u64) -> Self {
        Buffer { align, ..self }
    }
}

/// Where every buffer goes: `offsets[i]` is the offset of buffer `i` of the slice the plan was
/// made for, and `arena` the bytes the arena needs, the end of the highest buffer
/// (`max(offset + size)`, 0 for no buffers).
///
/// The planner's functions only return plans that [`validate`](super::validate) accepts; a
/// plan from anywhere else can be checked with it.
///
/// ```
/// use tagalloc::plan::{self, Buffer, Plan};
///
/// let buffers = [Buffer::new(0, 8, 0, 2), Buffer::new(1, 8, 1, 3), Buffer::new(2, 8, 2, 4)];
/// let plan = Plan::new(&buffers, vec![0, 8, 0])?;
/// assert_eq!(plan.arena, 16);
/// plan::validate(&buffers, &plan)?;
/// # Ok::<(), tagalloc::plan::PlanError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Plan {
    /// The offset of each buffer, in the order of the buffers.
    pub offsets: Vec<u64>,
    /// The arena's size in bytes: the end of the highest buffer.
    pub arena: u64,
}

impl Plan {
    /// The plan placing `buffers[i]` at `offsets[i]`, with its arena computed. `WrongLength`
    /// if the lengths differ, `TooLarge` if an end overflows. Nothing else is checked: see
    /// [`validate`](super::validate). `O(n)`.
    pub fn new(buffers: &[Buffer], offsets: Vec<u64>) -> Result<Plan, PlanError> {
        if buffers.len() != offsets.len() {
            return Err(PlanError::WrongLength {
                buffers: buffers.len(),
                offsets: offsets.len(),
            });
        }
        let mut arena = 0u64;
        for (b, &o) in buffers.iter().zip(&offsets) {
            arena = arena.max(o.checked_add(b.size).ok_or(PlanError::TooLarge)?);
        }
        Ok(Plan { offsets, arena })
    }
}

/// Checks what every solver relies on: lifetimes not empty, alignments powers of two, at most
/// `u32::MAX - 1` buffers, and `Σ (size + align - 1)` within `u64`, so that no arena a solver
/// builds (each buffer on top of others, padded to its alignment) can overflow: `TooLarge`
/// when the sizes alone overflow, else `AlignTooLarge` naming the most aligned buffer. `O(n)`.
pub(super) fn check_buffers(buffers: &[Buffer]) -> Result<(), PlanError> {
    if buffers.len() >= u32::MAX as usize {
        return Err(PlanError::TooMany);
    }
    let (mut sizes, mut padded) = (Some(0u64), Some(0u64));
    let mut most_aligned = 0;
    for (index, b) in buffers.iter().enumerate() {
        if b.start >= b.end {
            return Err(PlanError::EmptyLifetime { index });
        }
        if !b.align.is_power_of_two() {
            return Err(PlanError::BadAlign { index });
        }
        if b.align > buffers[most_aligned].align {
            most_aligned = index;
        }
        sizes = sizes.and_then(|t| t.checked_add(b.size));
        padded = padded
            .and_then(|t| t.checked_add(b.size))
            .and_then(|t| t.checked_add(b.align - 1));
    }
    match (sizes, padded) {
        (None, _) => Err(PlanError::TooLarge),
        (Some(_), None) => Err(PlanError::AlignTooLarge {
            index: most_aligned,
        }),
        _ => Ok(()),
    }
}

/// `x` rounded up to a multiple of `align` (a power of two); callers keep `x + align - 1`
/// within `u64` (see [`check_buffers`]).
#[inline]
pub(super) fn align_up(x: u64, align: u64) -> u64 {
    (x + (align - 1)) & !(align - 1)
}
