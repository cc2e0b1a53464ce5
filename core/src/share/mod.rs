//! Sharing: heaps and pools behind a lock, with the frees that find it taken queued, and
//! per-thread caches in front of a shared pool.

#[macro_use]
pub(crate) mod alloc;
pub(crate) mod cache;
pub(crate) mod detached;
pub(crate) mod global;
pub(crate) mod lock;
pub(crate) mod pool;
pub(crate) mod queue;
pub(crate) mod shared;
