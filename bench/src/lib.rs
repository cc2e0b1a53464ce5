//! The benchmark tool's pieces as a library, so that the examples (the callgrind profile in
//! `examples/profile.rs`, the hardware counters in `examples/counters.rs`, the calls' latencies
//! in `examples/call_times.rs`) drive the same
//! allocator adapters, workloads and trace preparation as the `tagalloc-bench` binary instead
//! of copies of them. The binary (`src/main.rs`) is the command line over these modules; its
//! documentation lists the benchmarks.

pub mod arena_source;
pub mod bump;
pub mod clock;
pub mod cold;
pub mod counters;
pub mod device;
pub mod efficiency;
pub mod example_cli;
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
