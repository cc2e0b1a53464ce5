/work/wt-layers/embedded/target/thumbv7em-none-eabihf/release/deps/tagalloc-80d3a8676d94e9bf.d: /work/wt-layers/core/src/lib.rs /work/wt-layers/core/src/algo/mod.rs /work/wt-layers/core/src/algo/bin_index.rs /work/wt-layers/core/src/algo/bins.rs /work/wt-layers/core/src/algo/check.rs /work/wt-layers/core/src/algo/geometry.rs /work/wt-layers/core/src/algo/heap.rs /work/wt-layers/core/src/algo/region.rs /work/wt-layers/core/src/algo/ring.rs /work/wt-layers/core/src/algo/shape.rs /work/wt-layers/core/src/algo/size_table.rs /work/wt-layers/core/src/algo/stats.rs /work/wt-layers/core/src/algo/tags.rs /work/wt-layers/core/src/detached/mod.rs /work/wt-layers/core/src/detached/heap.rs /work/wt-layers/core/src/detached/records.rs /work/wt-layers/core/src/detached/tags.rs /work/wt-layers/core/src/error.rs /work/wt-layers/core/src/inline/mod.rs /work/wt-layers/core/src/inline/granule.rs /work/wt-layers/core/src/inline/heap.rs /work/wt-layers/core/src/inline/probe.rs /work/wt-layers/core/src/inline/tags.rs /work/wt-layers/core/src/pool/mod.rs /work/wt-layers/core/src/pool/heap.rs /work/wt-layers/core/src/pool/hooks.rs /work/wt-layers/core/src/pool/policy.rs /work/wt-layers/core/src/pool/scope.rs /work/wt-layers/core/src/pool/source.rs /work/wt-layers/core/src/share/mod.rs /work/wt-layers/core/src/share/detached.rs /work/wt-layers/core/src/share/global.rs /work/wt-layers/core/src/share/lock.rs /work/wt-layers/core/src/share/pool.rs /work/wt-layers/core/src/share/queue.rs /work/wt-layers/core/src/share/shared.rs /work/wt-layers/core/src/share/tcache.rs /work/wt-layers/core/src/sync.rs

/work/wt-layers/embedded/target/thumbv7em-none-eabihf/release/deps/libtagalloc-80d3a8676d94e9bf.rmeta: /work/wt-layers/core/src/lib.rs /work/wt-layers/core/src/algo/mod.rs /work/wt-layers/core/src/algo/bin_index.rs /work/wt-layers/core/src/algo/bins.rs /work/wt-layers/core/src/algo/check.rs /work/wt-layers/core/src/algo/geometry.rs /work/wt-layers/core/src/algo/heap.rs /work/wt-layers/core/src/algo/region.rs /work/wt-layers/core/src/algo/ring.rs /work/wt-layers/core/src/algo/shape.rs /work/wt-layers/core/src/algo/size_table.rs /work/wt-layers/core/src/algo/stats.rs /work/wt-layers/core/src/algo/tags.rs /work/wt-layers/core/src/detached/mod.rs /work/wt-layers/core/src/detached/heap.rs /work/wt-layers/core/src/detached/records.rs /work/wt-layers/core/src/detached/tags.rs /work/wt-layers/core/src/error.rs /work/wt-layers/core/src/inline/mod.rs /work/wt-layers/core/src/inline/granule.rs /work/wt-layers/core/src/inline/heap.rs /work/wt-layers/core/src/inline/probe.rs /work/wt-layers/core/src/inline/tags.rs /work/wt-layers/core/src/pool/mod.rs /work/wt-layers/core/src/pool/heap.rs /work/wt-layers/core/src/pool/hooks.rs /work/wt-layers/core/src/pool/policy.rs /work/wt-layers/core/src/pool/scope.rs /work/wt-layers/core/src/pool/source.rs /work/wt-layers/core/src/share/mod.rs /work/wt-layers/core/src/share/detached.rs /work/wt-layers/core/src/share/global.rs /work/wt-layers/core/src/share/lock.rs /work/wt-layers/core/src/share/pool.rs /work/wt-layers/core/src/share/queue.rs /work/wt-layers/core/src/share/shared.rs /work/wt-layers/core/src/share/tcache.rs /work/wt-layers/core/src/sync.rs

/work/wt-layers/core/src/lib.rs:
/work/wt-layers/core/src/algo/mod.rs:
/work/wt-layers/core/src/algo/bin_index.rs:
/work/wt-layers/core/src/algo/bins.rs:
/work/wt-layers/core/src/algo/check.rs:
/work/wt-layers/core/src/algo/geometry.rs:
/work/wt-layers/core/src/algo/heap.rs:
/work/wt-layers/core/src/algo/region.rs:
/work/wt-layers/core/src/algo/ring.rs:
/work/wt-layers/core/src/algo/shape.rs:
/work/wt-layers/core/src/algo/size_table.rs:
/work/wt-layers/core/src/algo/stats.rs:
/work/wt-layers/core/src/algo/tags.rs:
/work/wt-layers/core/src/detached/mod.rs:
/work/wt-layers/core/src/detached/heap.rs:
/work/wt-layers/core/src/detached/records.rs:
/work/wt-layers/core/src/detached/tags.rs:
/work/wt-layers/core/src/error.rs:
/work/wt-layers/core/src/inline/mod.rs:
/work/wt-layers/core/src/inline/granule.rs:
/work/wt-layers/core/src/inline/heap.rs:
/work/wt-layers/core/src/inline/probe.rs:
/work/wt-layers/core/src/inline/tags.rs:
/work/wt-layers/core/src/pool/mod.rs:
/work/wt-layers/core/src/pool/heap.rs:
/work/wt-layers/core/src/pool/hooks.rs:
/work/wt-layers/core/src/pool/policy.rs:
/work/wt-layers/core/src/pool/scope.rs:
/work/wt-layers/core/src/pool/source.rs:
/work/wt-layers/core/src/share/mod.rs:
/work/wt-layers/core/src/share/detached.rs:
/work/wt-layers/core/src/share/global.rs:
/work/wt-layers/core/src/share/lock.rs:
/work/wt-layers/core/src/share/pool.rs:
/work/wt-layers/core/src/share/queue.rs:
/work/wt-layers/core/src/share/shared.rs:
/work/wt-layers/core/src/share/tcache.rs:
/work/wt-layers/core/src/sync.rs:
