//! The benchmark tool's pieces as a library: the binary (`src/main.rs`) is the command line
//! over these modules, and its documentation lists the benchmarks. The profiling tools in
//! `lab/` (callgrind probes, hardware counters, per-call latencies) drive the same allocator
//! adapters, workloads and trace preparation instead of copies of them.

pub mod arena_source;
pub mod bump;
pub mod clock;
pub mod cold;
pub mod device;
pub mod efficiency;
pub mod heapmap;
pub mod machine;
pub mod micro;
pub mod plan;
pub mod plan_trace;
pub mod plot;
pub mod pool;
pub mod programs;
pub mod random_actions;
pub mod replay;
pub mod report;
pub mod snapshot;
pub mod style;
pub mod subjects;
pub mod threads;
