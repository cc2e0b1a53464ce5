//! The lower bound of every plan: the most bytes live at one moment.

use alloc::vec::Vec;

use super::buffer::check_buffers;
use super::buffer::Buffer;
use super::error::PlanError;

/// The largest total size of the buffers live at one moment. No plan's arena is smaller, so a
/// plan whose arena equals it is optimal (alignment can push the true optimum above it).
///
/// A sweep over the `2n` start and end events in time order, ends before starts at equal
/// times (lifetimes are half-open): `O(n log n)` time, `O(n)` memory.
///
/// ```
/// use tagalloc::plan::{lower_bound, Buffer};
///
/// let buffers = [Buffer::new(0, 8, 0, 2), Buffer::new(1, 4, 1, 3), Buffer::new(2, 16, 2, 4)];
/// assert_eq!(lower_bound(&buffers)?, 20); // 4 + 16 live over [2, 3)
/// # Ok::<(), tagalloc::plan::PlanError>(())
/// ```
pub fn lower_bound(buffers: &[Buffer]) -> Result<u64, PlanError> {
    check_buffers(buffers)?;
    // (time, 0 = end / 1 = start, size): sorting puts ends first at equal times.
    let mut events: Vec<(u64, u8, u64)> = Vec::with_capacity(buffers.len() * 2);
    for b in buffers {
        events.push((b.start, 1, b.size));
        events.push((b.end, 0, b.size));
    }
    events.sort_unstable();
    let (mut live, mut peak) = (0u64, 0u64);
    for (_, kind, size) in events {
        if kind == 1 {
            // Cannot overflow: check_buffers bounds the sum of all sizes.
            live += size;
            peak = peak.max(live);
        } else {
            live -= size;
        }
    }
    Ok(peak)
}
