//! Host memory for the `tagalloc` core: regions from the operating system, a lock that parks,
//! and a ready global allocator for `std` programs.
//!
//! - [`MmapSource`]: a `tagalloc::RegionSource` of anonymous private `mmap` regions, optionally
//!   page-locked (`mlock`), on huge pages (`MAP_HUGETLB`, else `madvise(MADV_HUGEPAGE)`) and
//!   pre-faulted; regions grow in place (`mremap`), lose their free tails (`munmap`) and the
//!   pages of free chunks (`madvise(MADV_DONTNEED)`). A refused call is an error value; the
//!   details (which call, how many bytes, the error number, `RLIMIT_MEMLOCK`) are kept as a
//!   [`SourceError`].
//! - [`FutexLock`]: a `lock_api::RawMutex` whose waiters sleep on a futex and that never
//!   allocates, so it can guard the global allocator (`parking_lot`'s cannot: see its docs).
//! - [`HostAllocator`]: a `tagalloc::SharedPool` of the two with a growth and trimming policy,
//!   adopted in one line:
//!
//! ```no_run
//! #[global_allocator]
//! static A: tagalloc_host::HostAllocator = tagalloc_host::HostAllocator::new();
//! ```
//!
//! - [`CacheBinding`]: each thread's cache of small blocks in front of a `'static` host pool
//!   (what [`HostAllocator`] uses inside), set up without allocating and given back at the
//!   thread's exit, joined or not.
//!
//! - [`nearest`] and [`count`]: words for messages, without allocating: the known name nearest
//!   to a misspelt one (the malloc library's environment, the planner's CSV columns), and a
//!   count with its noun in the right number.
//!
//! Linux only: the source relies on `mremap`, `MAP_HUGETLB`, `MAP_POPULATE` and
//! `MADV_POPULATE_WRITE`, the lock on futexes.

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

#[cfg(not(target_os = "linux"))]
compile_error!("tagalloc-host supports Linux only (mremap, MAP_HUGETLB, futexes)");

mod futex;
mod global;
mod mmap;
mod os;
mod tcache;
mod tls_slot;
mod words;

pub use futex::FutexLock;
pub use global::{HostAllocator, HostPool};
pub use mmap::{
    Call, HugePages, MmapOptions, MmapSource, Reuse, ReuseStats, SourceError, REUSE_SLOTS,
};
pub use tcache::CacheBinding;
pub use words::{count, nearest, noun, Count};
