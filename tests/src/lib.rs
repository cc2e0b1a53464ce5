//! Cross-crate integration tests and trace replay support for tagalloc.
//!
//! [`trace`] reads the allocation traces (`tests/data/` in the repository, and the larger shared
//! collection beside it when present); [`replay`] runs them through the heap in either tag
//! placement, [`threaded`] replays a multi-threaded trace with one OS thread per recorded thread
//! through any allocator shared by threads, and [`contents`] writes and checks the byte pattern
//! every test block carries. The replay example and the replay tests share that one replay
//! loop, so what the tests verify is what the example measures. [`torch_replay`] likewise serves
//! the `torch_model` example and tests: a trace through a model of PyTorch's CUDA caching
//! allocator on the fake CUDA driver; [`device_replay`] runs the same traces, the same way,
//! through tagalloc's own device pool. Both are adapters to the one loop of [`cuda_replay`].
//! [`stream_patterns`] generates multi-stream device traces of the patterns PyTorch users run
//! with several streams (a pipeline, prefetching and eviction, gradient buckets).

pub mod contents;
pub mod cuda_replay;
pub mod device_replay;
/// Runs a static memory plan's schedule on real memory and checks every buffer's data.
pub mod plan_exec;
pub mod replay;
pub mod stream_patterns;
pub mod threaded;
pub mod torch_replay;
pub mod trace;

/// The README's Rust examples, each compiled and run as a doctest (`cargo test -p
/// tagalloc-tests --doc`), so that every example compiles as shown.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeExamples;

/// The Rust examples of the documents under `docs/`, compiled and run the same way.
#[cfg(doctest)]
#[doc = include_str!("../../docs/heap.md")]
pub struct HeapDocExamples;

/// See [`HeapDocExamples`].
#[cfg(doctest)]
#[doc = include_str!("../../docs/usage.md")]
pub struct UsageDocExamples;

/// See [`HeapDocExamples`].
#[cfg(doctest)]
#[doc = include_str!("../../docs/small-machines.md")]
pub struct SmallMachinesDocExamples;

/// See [`HeapDocExamples`].
#[cfg(doctest)]
#[doc = include_str!("../../docs/static-planning.md")]
pub struct StaticPlanningDocExamples;

/// See [`HeapDocExamples`].
#[cfg(doctest)]
#[doc = include_str!("../../docs/cuda.md")]
pub struct CudaDocExamples;
