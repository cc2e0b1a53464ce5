//! A malloc-compatible shared library over the tagalloc host pool: unmodified, dynamically
//! linked C programs run on tagalloc with
//!
//! ```sh
//! LD_PRELOAD=target/release/libtagalloc_malloc.so PROGRAM ARGS...
//! ```
//!
//! - [`api`]: the exported C functions (`malloc`, `free`, `calloc`, `realloc`,
//!   `reallocarray`, `posix_memalign`, `aligned_alloc`, `memalign`, `valloc`, `pvalloc`,
//!   `malloc_usable_size`, glibc's `__libc_*` aliases, `malloc_trim`, `mallopt`,
//!   `malloc_stats`, `mallinfo`, `mallinfo2`, `malloc_info`, `cfree`) and how each behaves.
//! - `pool`: the one pool they share (`tagalloc_host::HostPool` with the host allocator's
//!   policy) and how `free` learns a block's size from the heap.
//! - `lock`: the pool's lock, taken around `fork` by `pthread_atfork` handlers so that the
//!   child of a multi-threaded parent can allocate.
//! - `marks`: checked mode's bitmaps of the live blocks, one bit per granule of each region,
//!   against which a pointer is proven in `O(1)` instead of by a walk of its region.
//! - `options`: the environment (`TAGALLOC_CHECKED`, `TAGALLOC_ON_MISUSE`, `TAGALLOC_STATS`),
//!   read once without allocating or recursing; a value it does not accept, or a `TAGALLOC_*`
//!   variable nothing reads, reported in one line.
//! - `ranges`: the address ranges the pool holds and gave back lately, kept by its hooks,
//!   against which `free` checks a pointer before it reads anything at it.
//! - `proof`: the one proof of a pointer a thread's cache trusts (`tagalloc::PointerProof`),
//!   without the lock as a free takes the cache and under it as a block leaves the cache.
//! - `report`: statistics, the first refused free, heap corruption (then an abort) and the
//!   environment's refused values, written to stderr with `write(2)`.
//!
//! This crate is only a `cdylib`: no Rust crate may depend on it, since whatever linked it
//! would have its `malloc` replaced. It is tested by running real programs with it preloaded
//! and comparing their output with a run on glibc (`tests/`).

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

#[cfg(not(all(target_os = "linux", target_env = "gnu", target_pointer_width = "64")))]
compile_error!("tagalloc-malloc replaces glibc's allocator on 64-bit Linux only");

pub mod api;
mod lock;
mod marks;
mod options;
mod pool;
mod proof;
mod ranges;
mod report;
