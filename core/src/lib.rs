//! # tagalloc
//!
//! A boundary-tag allocator core: dlmalloc-style chunks with `O(1)` coalescing of both
//! physical neighbours, 128 bins (64 exact bins + 64 tree bins), and an exact best-fit search
//! with a worst case bounded by the bits of a size (beside dlmalloc's designated victim for
//! small requests), over regions handed to it from anywhere.
//!
//! One algorithm, two tag placements:
//!
//! - [`InlineHeap`]: tags inside the host memory it manages, one word per allocation, no side
//!   storage.
//! - [`DetachedHeap`]: tags in a host-side table of records; the managed memory is never read or
//!   written, so it serves device memory, or any range of offsets.
//!
//! Both heaps are single-owner (`&mut self`). Sharing is a layer above: [`GlobalHeap`] (inline,
//! `GlobalAlloc`, and `allocator_api2::alloc::Allocator` with the `allocator-api2` features)
//! and [`SharedDetachedHeap`] put a heap behind a lock ([`SpinLock`], or any `lock_api` lock),
//! and a free that finds the lock taken does not wait: it is queued on a bounded lock-free ring
//! and done, validated, by the next lock holder. loom model-checks the queue
//! (`core/src/tests/loom.rs`).
//!
//! Every bad request returns an [`Error`] and changes nothing; `check()` verifies every
//! invariant and reports a [`CheckError`]. The crate is `#![no_std]`; the `std` feature (on by
//! default) lets the shared heaps detect re-entry, `alloc` lets the detached table grow,
//! `checked` validates every inline free, `lock_api` admits `lock_api` locks, and
//! `allocator-api2` / `allocator-api2-04` implement that crate's `Allocator` for [`GlobalHeap`].
//!
//! # Glossary
//!
//! One word per thing, in the code, the docs, the tests and the benchmark output:
//!
//! - **region**: an address range handed to a heap (`add_region`), grown in place
//!   (`extend_region`), given back whole (`remove_region`, `trim`). Every byte of it is in
//!   one chunk, except an inline region's header and fence.
//! - **chunk**: a run of whole granules of a region, free or in use, with its tags.
//! - **block**: what a caller holds for a chunk in use: a payload pointer (inline) or a
//!   [`Block`] (detached). **payload**: a block's usable bytes.
//! - **granule**: the unit sizes are counted in (16 bytes inline, 256 typical for device
//!   memory); every payload is granule-aligned.
//! - **tags**: a chunk's size, state and neighbour links. **Inline** tags sit in the memory;
//!   **detached** tags sit in a table of [`Record`]s apart from it (elsewhere called
//!   out-of-band tags). The **placement** is where a heap keeps its tags.
//! - **bin**: where free chunks wait. **Exact bins** (0–63) hold one size each, oldest first;
//!   **tree bins** (64–127) each hold a logarithmic range of sizes: up to 2047 granules (bins
//!   64–83) in one list per size, above that in a bitwise trie (see `bins`).
//! - **best fit**: the smallest free chunk that fits, the oldest among equals, the top and the
//!   victim aside.
//! - **victim**: the rest of the chunk last carved for a listed request, kept out of the bins;
//!   listed requests that no chunk of exactly their size serves are carved from it first
//!   (dlmalloc's designated victim; the exact policy is on `heap::Victim`).
//! - **top**: the free end of the top region (the region grown last, or until one is grown the
//!   first added), kept out of the bins and carved only when no other free chunk fits.
//! - **realloc** (inline): in place when the block shrinks or its free successor has room,
//!   else moved; a block above the listed sizes (32 KiB at the host granule) shrinking to a
//!   listed size moves to the best fit outside the top when one exists, so that the whole old
//!   chunk is freed (see `InlineHeap::realloc`).
//! - **queued free**: a free that found the shared heap's lock taken and waits on the ring
//!   for the next lock holder ([`GlobalHeap::queued_frees`]).
//! - **refused**: a call that returned an [`Error`] and changed nothing; refused frees are
//!   counted in [`Stats::refused_frees`] by a heap that keeps statistics.
//! - **tally**: what a heap counts as it goes, chosen by its type ([`Tally`]): [`Counters`]
//!   (the default, behind `stats()`) or [`NoCounters`] (nothing, and a little faster).
//! - **re-entry**: a call into a shared heap from the thread that holds its lock
//!   ([`Error::Reentrant`]).
//! - **cache** (thread cache): a thread's stack of small blocks per size class in front of a
//!   shared inline pool ([`ThreadCache`]), taken and given back without the lock; its blocks
//!   are in use for the heap. A **hit** is an allocation served by it, a **miss** one that
//!   refilled it, a **spill** a batch moved back from a full class, a **flush** the whole
//!   cache given back.
//!
//! # Modules
//!
//! One concept per file: `layout` (size arithmetic), `tags` (the placement seam), `inline` and
//! `detached` (the two placements and their heaps), `records` (the detached table), `bins`
//! (bins and best fit), `heap` (the algorithm), `region` (regions), `check` (the invariant
//! walk), `stats` (statistics and the counters behind them), `lock` (locks and re-entry),
//! `queue` (the ring of queued frees), `shared` (a heap behind a lock), `global` and
//! `shared_detached` (the two shared heaps), `tcache` (per-thread caches in front of a shared
//! pool), `sync` (atomics that loom can swap), `model` (the
//! reference model and the one adapter that tests, fuzz targets, trace replay and benchmarks
//! drive both heaps through; hidden).
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
//! let mut table = [Record::VACANT; 256]; // detached tags: no memory is touched
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
#[cfg(feature = "std")]
extern crate std;

mod bins;
mod check;
mod classes;
mod detached;
mod error;
mod global;
mod granule;
mod heap;
mod hooks;
mod inline;
mod layout;
mod lock;
#[cfg(any(test, feature = "model"))]
#[doc(hidden)]
pub mod model;
#[cfg(feature = "alloc")]
pub mod plan;
mod policy;
mod pool;
mod pool_heap;
mod queue;
mod records;
mod region;
mod scope;
mod shape;
mod shared;
mod shared_detached;
mod shared_pool;
mod size_table;
mod source;
mod stats;
mod sync;
mod tags;
mod tcache;

pub use detached::{Block, DetachedHeap, Handle, DEVICE_GRANULE};
pub use error::{BlockError, CheckError, Error};
pub use global::GlobalHeap;
pub use granule::{AnyGranule, Granule, HostGranule};
pub use hooks::{Hooks, NoHooks};
pub use inline::{InlineHeap, HOST_GRANULE};
pub use layout::{Layout, MAX_GRANULE};
pub use lock::{RawLock, SpinLock};
pub use policy::{Growth, Policy, PolicyError, Reserve};
pub use pool::{Pool, PoolError, PoolStats, Trimmed};
pub use pool_heap::PoolHeap;
pub use records::{Record, RecordStore};
pub use scope::Scope;
pub use shape::{BinShape, Compact, Wide};
pub use shared_detached::SharedDetachedHeap;
pub use shared_pool::{OomHandler, SharedPool};
pub use source::RegionSource;
pub use stats::{Counters, NoCounters, Stats, Tally};
pub use tcache::{tcache_enabled, CacheStats, Class, ThreadCache, CLASSES, TOTAL_BYTES};

#[cfg(test)]
mod tests;
