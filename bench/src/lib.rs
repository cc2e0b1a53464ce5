//! The benchmark tool's pieces as a library: the binary (`src/main.rs`) is the command line
//! over these modules, and its documentation lists the benchmarks. The profiling tools in
//! `lab/` (callgrind probes, hardware counters, per-call latencies) drive the same allocator
//! adapters, workloads and trace preparation instead of copies of them.

mod arena_source;
mod bump;
pub mod cli;
mod clock;
pub mod cold;
pub mod device;
pub mod efficiency;
mod heapmap;
pub mod inputs;
pub mod machine;
pub mod micro;
pub mod plan;
pub mod plan_constrained;
pub mod plan_file;
pub mod plan_trace;
mod plot;
pub mod pool;
pub mod programs;
pub mod random_actions;
pub mod replay;
pub mod report;
pub mod snapshot;
mod style;
pub mod subjects;
pub mod threads;
