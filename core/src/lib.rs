//! # tagalloc
//!
//! A boundary-tag allocator core: dlmalloc-style chunks with `O(1)` coalescing of both
//! physical neighbours, 128 bins (64 exact sizes + 64 logarithmic), and an exact best-fit search
//! with a worst case bounded by the bits of a size, over regions handed to it from anywhere.
//!
//! One algorithm, two tag placements:
//!
//! - [`InlineHeap`]: tags inside the host memory it manages, one word per allocation, no side
//!   storage.
//! - [`DetachedHeap`]: tags in a host-side table of records; the managed memory is never read or
//!   written, so it serves device memory, or any range of offsets.
//!
//! Both heaps are single-owner (`&mut self`). Sharing is a layer above: [`GlobalHeap`] (inline,
//! `GlobalAlloc`, and `allocator_api2::alloc::Allocator` with the `allocator-api2` feature) and
//! [`SharedDetachedHeap`] put a heap behind a spin lock, and a free that finds the lock taken
//! does not wait: it is queued on a lock-free structure (inside the freed memory for the
//! inline heap, a fixed ring for the out-of-band one) and done by the next lock holder. loom
//! model-checks the queues (`core/src/tests/loom.rs`).
//!
//! Every bad request returns an [`Error`]; `check()` verifies every invariant and reports a
//! [`CheckError`]. The crate is `#![no_std]`; the `alloc` feature lets the out-of-band table
//! grow, the `checked` feature validates every inline free, and `allocator-api2` implements that
//! crate's `Allocator` for [`GlobalHeap`].
//!
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use tagalloc::{DetachedHeap, InlineHeap, Record};
//!
//! let mut arena = vec![0u128; 4096]; // 64 KiB, 16-byte aligned
//! let mut heap = InlineHeap::new();
//! // SAFETY: the arena outlives the heap and nothing else touches it.
//! unsafe { heap.add_region(arena.as_mut_ptr().cast(), 64 << 10)? };
//! let p = heap.alloc(100, 16)?; // best fit, 16-aligned
//! // SAFETY: `p` is a live 100-byte allocation of this heap.
//! let p = unsafe { heap.realloc(p, 100, 16, 400)? }; // grows in place when it can
//! // SAFETY: `p` is not used afterwards.
//! unsafe { heap.free_checked(p, 400)? }; // reports double, foreign and wrong-size frees
//! heap.check()?; // verifies every invariant
//!
//! let mut table = [Record::VACANT; 256]; // out-of-band tags: no memory is touched
//! let mut dev = DetachedHeap::new(&mut table[..], 256)?;
//! dev.add_region(0x7f00_0000_0000, 1 << 30)?; // e.g. a device allocation
//! let block = dev.alloc(1 << 20, 4096)?;
//! dev.free(block)?;
//! assert_eq!(dev.stats().in_use, 0);
//! # Ok(())
//! # }
//! ```

#![no_std]
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

#[cfg(feature = "alloc")]
extern crate alloc;

mod bins;
mod detached;
mod error;
mod global;
mod heap;
mod inline;
mod lock;
#[cfg(any(test, feature = "model"))]
#[doc(hidden)]
pub mod model;
#[cfg(feature = "alloc")]
pub mod plan;
mod records;
mod remote_ring;
mod remote_stack;
mod shared_detached;
mod stats;
mod sync;
mod tags;

pub use bins::{bin_of, BIN_COUNT, EXACT_BINS};
pub use detached::{Block, DetachedHeap, Handle, DEVICE_GRANULE};
pub use error::{CheckError, Error};
pub use global::GlobalHeap;
pub use inline::{InlineHeap, HOST_GRANULE};
pub use records::{Record, RecordStore};
pub use shared_detached::SharedDetachedHeap;
pub use stats::Stats;

#[cfg(test)]
mod tests;
