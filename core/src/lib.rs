//! # tagalloc
//!
//! A boundary-tag allocator core: dlmalloc-style chunks with `O(1)` coalescing of both
//! physical neighbours, free chunks filed by size (a list for each size up to 2,047 granules,
//! a size table up to 16,383, bitwise tries above), and an exact best-fit search with a worst
//! case bounded by the bits of a size (beside dlmalloc's designated victim for small
//! requests), over regions handed to it from anywhere.
//! The decisions it rests on, each with its reason: `docs/design.md` in the repository.
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
//! `allocator-api2` / `allocator-api2-04` implement that crate's `Allocator` for the shared
//! host heaps and pools ([`GlobalHeap`], a [`SharedPool`] of an [`InlineHeap`]), through
//! [`SharedAlloc`].
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
//! - **bin**: where free chunks wait. Sizes are numbered into 128 bins: **exact bins** (0–63)
//!   of one size each, **tree bins** (64–127) of a logarithmic range each, the last
//!   open-ended. Where a bin's chunks are kept is the heap's [`BinShape`]. The default,
//!   [`Wide`], keeps 2,047 **lists**, one per size from 1 to 2,047 granules (bins 0–83;
//!   requests up to 32,744 bytes at the host granule), each oldest first, found through a
//!   2,048-bit map; the **size table** for 2,048 to 16,383 granules (bins 84–95), a bitmap
//!   over sizes and a hash from a size to its oldest chunk; and a bitwise **trie** per tree
//!   bin above (bins 96–127).
//!   [`Compact`] keeps lists up to 64 granules and tries for bins 64–79, the last open-ended.
//!   Every structure finds the exact best fit, oldest first among equals.
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
//!   cache given back. A pointer whose size its caller does not know is **proven** by the
//!   pool's [`PointerProof`] before a cache takes it, and every block again as it leaves a
//!   cache for the heap.
//!
//! # Modules
//!
//! The folders are the layers; each uses only the ones listed before it. One concept per file:
//!
//! - `error` (what every call can return) and `sync` (the atomics and cells that loom can
//!   swap, `core/src/tests/loom.rs`).
//! - `algo/`, the algorithm, written once over the placement seam: `geometry` (a placement's
//!   size arithmetic, [`Geometry`]), `tags` (the seam), `bin_index` (which bin a size falls
//!   in, and the sizes the policy lists), `ring` (the rings of equal-sized free chunks),
//!   `size_table` (the sizes just above the lists), `shape` (which bins a heap keeps:
//!   [`Wide`], [`Compact`]), `bins` (the bins and the best-fit search), `stats` (statistics
//!   and the tally behind them), `heap` (allocation, carving, merging, resizing, the top and
//!   the victim), `region` (adding, growing, trimming and removing regions), `check` (the
//!   invariant walk).
//! - `inline/`, tags in the memory: `granule` (a constant or a stored granule, [`Granule`]),
//!   `tags` (the head word and footer of each chunk, the region header and fence), `heap`
//!   ([`InlineHeap`]), `probe` (the bounds-checked walk behind the checked free).
//! - `detached/`, tags apart from the memory: `records` (the table, [`Record`],
//!   [`RecordStore`]), `tags` (each chunk and region a record of that table), `heap`
//!   ([`DetachedHeap`], the [`Block`]s and [`Handle`]s it hands out).
//! - `pool/`, a heap grown from a source under a policy ([`Pool`], its statistics):
//!   `heap` (what a pool needs of either heap, [`PoolHeap`]), `source` ([`RegionSource`]),
//!   `policy` ([`Policy`]), `hooks` ([`Hooks`]), `scope` ([`Scope`]), `realloc` (resizing an
//!   inline pool's block, [`Pool::realloc`]).
//! - `share/`, heaps and pools between threads: `lock` ([`SpinLock`], [`RawLock`], re-entry),
//!   `queue` (the ring of queued frees), `shared` (a heap behind a lock whose holder drains
//!   the queue), `global` ([`GlobalHeap`]), `detached` ([`SharedDetachedHeap`]), `pool`
//!   ([`SharedPool`]), `alloc` (`GlobalAlloc` and `Allocator`, written once for every shared
//!   host heap or pool, [`SharedAlloc`]), and `cache/`, per-thread caches in front of a
//!   shared pool: `class` (the size classes, [`Class`]), `link` (safe linking, what a damaged
//!   link does), `linked_blocks` (a class's cached blocks moved whole between caches),
//!   `proof` (the one seam that proves a pointer before a cache trusts it, [`PointerProof`]),
//!   `thread` ([`ThreadCache`], and its exchange with the pool), `transfer` (the blocks the
//!   caches hand to one another while the pool's lock is taken).
//! - `plan/` (with `alloc`), apart from the rest: static memory planning, offsets for buffers
//!   whose lifetimes are known in advance: `error`, `buffer` (the problem and its plan),
//!   `sweep` (time cut into sections, and who conflicts with whom), `bound` (the lower bound),
//!   `validate` (the independent check of a plan), `monitor` (the caller's say in a running
//!   search), `place` (the tightest-gap step), `greedy` (the three greedy orders), `search`
//!   (branch and bound, `tagalloc::plan::search`); and `problem` (`plan/problem/`: problems
//!   with aliases, contiguous groups, dependency graphs with streams, pins and spaces; its
//!   `units` (aliases and groups merged, every structural refusal), `reach` (conflicts from
//!   intervals or graph reachability bitsets), `bound` (the bound valid for every kind),
//!   `arrange` (unit placements: orders, fits, spaces), `rectangles` (units as an interval
//!   problem), `improve` (local search over placement orders), `solve`, `check` (the
//!   independent check of a layout), `arena` (`PlannedArena`), `error`).
//! - `model/` (for tests and the `model` feature; hidden): `reference` (the reference model
//!   that predicts every address) and `adapter` (the one adapter that the core's tests, the
//!   fuzz targets, the trace replay and the benchmarks drive both heaps through).
//!
//! `tests/module_map.rs` holds this map to the files, and every file to the order of the
//! layers: no `crate::` or `super::` path of a layer reaches one listed after it, and no file
//! uses itself through others.
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

mod algo;
mod detached;
mod error;
mod inline;
#[cfg(any(test, feature = "model"))]
#[doc(hidden)]
pub mod model;
#[cfg(feature = "alloc")]
pub mod plan;
mod pool;
mod share;
mod sync;

pub use algo::check::StepMarks;
pub use algo::geometry::{Geometry, MAX_GRANULE};
pub use algo::shape::{BinShape, Compact, Wide};
pub use algo::stats::{Counters, NoCounters, Stats, Tally};
pub use detached::heap::{Block, DetachedHeap, Handle, DEVICE_GRANULE};
pub use detached::records::{Record, RecordStore};
pub use error::{BlockError, CheckError, Error, PolicyError};
pub use inline::granule::{AnyGranule, Granule, HostGranule, HOST_GRANULE};
pub use inline::heap::InlineHeap;
pub use inline::LiveMarks;
pub use pool::heap::PoolHeap;
pub use pool::hooks::{Hooks, NoHooks};
pub use pool::policy::{Growth, Policy, Reserve};
pub use pool::scope::Scope;
pub use pool::source::RegionSource;
pub use pool::{CacheStats, Pool, PoolError, PoolStats, Trimmed};
pub use share::alloc::SharedAlloc;
pub use share::cache::class::{Class, CLASSES};
pub use share::cache::link::OnDamage;
pub use share::cache::proof::{PointerProof, ProofMemo};
pub use share::cache::thread::{tcache_enabled, ThreadCache, TOTAL_BYTES};
pub use share::detached::SharedDetachedHeap;
pub use share::global::GlobalHeap;
pub use share::lock::{RawLock, SpinLock};
pub use share::pool::{OomHandler, SharedPool};

#[cfg(test)]
mod tests;
