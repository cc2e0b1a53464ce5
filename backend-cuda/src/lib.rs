//! CUDA memory regions for the `tagalloc` core.
//!
//! This crate will supply regions from CUDA to the tagalloc core, through `cudarc` with dynamic
//! loading so that it builds and its tests run on machines with no GPU and no CUDA toolkit:
//! plain device allocations, virtual-memory growth (one reserved address range that physical
//! pages are mapped into as the pool grows), pinned host memory, and stream-ordered reuse of
//! freed blocks. Nothing is implemented yet.
