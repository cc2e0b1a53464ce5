//! Benchmark suite for tagalloc against peer allocators (not written yet).

fn main() {
    println!(
        "tagalloc-bench: the benchmark suite is coming; for now, replay allocation traces with \
         `cargo run --release -p tagalloc-tests --example replay [-- TRACE...]`"
    );
}
