//! Cross-crate integration tests and trace replay support for tagalloc.
//!
//! [`trace`] reads the allocation traces (`tests/data/` in the repository, and the larger shared
//! collection beside it when present) that the replay example and the replay tests run through
//! the heap.

pub mod trace;
