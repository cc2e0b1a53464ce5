//! Cross-crate integration tests and trace replay support for tagalloc.
//!
//! [`trace`] reads the allocation traces (`tests/data/` in the repository, and the larger shared
//! collection beside it when present), and [`replay`] runs them through the heap in either tag
//! placement, [`threaded`] replays a multi-threaded trace with one OS thread per recorded
//! thread through any allocator shared by threads, and [`contents`] writes and checks the byte
//! pattern every test block carries. The replay example and the replay tests share that one replay loop, so what the
//! tests verify is what the example measures.

pub mod contents;
pub mod replay;
pub mod threaded;
pub mod trace;
