//! The independent check of a plan.
//!
//! Written apart from the solvers on purpose, sharing none of their code (not their input
//! checks, not their sweep, not their overlap test): the solvers reason over sections of time
//! and conflict lists, this walks time with an ordered set of the live buffers' address
//! ranges. A bug would have to be made twice, in two different shapes, to get through.

use alloc::collections::BTreeMap;
use alloc::vec::Vec;

use super::buffer::{Buffer, Plan};
use super::error::PlanError;

/// Checks that `plan` is a valid placement of `buffers`:
///
/// - one offset per buffer (`WrongLength`);
/// - every buffer has a non-empty lifetime and a power-of-two alignment (`EmptyLifetime`,
///   `BadAlign`), and its offset is a multiple of it (`Misaligned`);
/// - no two buffers live at the same moment share a byte (`Overlap`, naming both);
/// - `plan.arena` is exactly the end of the highest buffer (`ArenaMismatch`; `TooLarge` if an
///   end overflows `u64`).
///
/// Time walks through the start and end events in order (ends first at equal times, as
/// lifetimes are half-open) while the live buffers' address ranges are kept in an ordered map;
/// since those ranges never overlap, a new one overlaps some live range exactly when it
/// overlaps its neighbour below or above in the map. `O(n log n)` time, `O(n)` memory.
///
/// ```
/// use tagalloc::plan::{validate, Buffer, Plan, PlanError};
///
/// let buffers = [Buffer::new(0, 8, 0, 2), Buffer::new(1, 8, 1, 3)];
/// let good = Plan { offsets: vec![0, 8], arena: 16 };
/// assert_eq!(validate(&buffers, &good), Ok(()));
/// let bad = Plan { offsets: vec![0, 4], arena: 12 };
/// assert_eq!(validate(&buffers, &bad), Err(PlanError::Overlap { first: 0, second: 1 }));
/// ```
pub fn validate(buffers: &[Buffer], plan: &Plan) -> Result<(), PlanError> {
    if plan.offsets.len() != buffers.len() {
        return Err(PlanError::WrongLength {
            buffers: buffers.len(),
            offsets: plan.offsets.len(),
        });
    }
    let mut highest = 0u64;
    for (index, (b, &offset)) in buffers.iter().zip(&plan.offsets).enumerate() {
        if b.end <= b.start {
            return Err(PlanError::EmptyLifetime { index });
        }
        if b.align == 0 || b.align & (b.align - 1) != 0 {
            return Err(PlanError::BadAlign { index });
        }
        if offset % b.align != 0 {
            return Err(PlanError::Misaligned { index });
        }
        let end = offset.checked_add(b.size).ok_or(PlanError::TooLarge)?;
        highest = highest.max(end);
    }
    if highest != plan.arena {
        return Err(PlanError::ArenaMismatch {
            claimed: plan.arena,
            actual: highest,
        });
    }

    // (time, false = end / true = start, index): at equal times, ends sort first.
    let mut events: Vec<(u64, bool, usize)> = Vec::with_capacity(buffers.len() * 2);
    for (i, b) in buffers.iter().enumerate() {
        if b.size > 0 {
            events.push((b.start, true, i));
            events.push((b.end, false, i));
        }
    }
    events.sort_unstable();
    // Live ranges keyed by (offset, index), valued by their end address.
    let mut live: BTreeMap<(u64, usize), u64> = BTreeMap::new();
    for (_, starts, i) in events {
        let lo = plan.offsets[i];
        let hi = lo + buffers[i].size;
        if !starts {
            live.remove(&(lo, i));
            continue;
        }
        if let Some((&(_, below), &below_end)) = live.range(..(lo, i)).next_back() {
            if below_end > lo {
                return Err(PlanError::Overlap {
                    first: below.min(i),
                    second: below.max(i),
                });
            }
        }
        if let Some((&(above_lo, above), _)) = live.range((lo, i)..).next() {
            if above_lo < hi {
                return Err(PlanError::Overlap {
                    first: above.min(i),
                    second: above.max(i),
                });
            }
        }
        live.insert((lo, i), hi);
    }
    Ok(())
}
