//! The measurement lab: tools that explain the benchmarks' figures rather than produce them.
//! The examples (the callgrind profile in `examples/profile.rs`, the hardware counters in
//! `examples/counters.rs`, the calls' latencies in `examples/call_times.rs`) drive the
//! `tagalloc-bench` library's allocator adapters, workloads and trace preparation, so that a
//! profile runs what the timed benchmark runs; `tools/` holds the scripts around them
//! (callgrind, code-layout shuffles, A/B relinking). What they found is in
//! `docs/measurements.md`.
//!
//! Not a default member of the workspace: `cargo build` and `cargo test` at the root leave it
//! out; `cargo test --workspace` and `cargo clippy --workspace` (the CI) build and check it.

pub mod counters;
pub mod example_cli;
