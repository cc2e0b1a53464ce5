/work/wt-layers/embedded/target/thumbv7em-none-eabihf/release/deps/tagalloc_default_arena-b9fdf8b6a9d3817a.d: src/bin/tagalloc_default_arena.rs

/work/wt-layers/embedded/target/thumbv7em-none-eabihf/release/deps/libtagalloc_default_arena-b9fdf8b6a9d3817a.rmeta: src/bin/tagalloc_default_arena.rs

src/bin/tagalloc_default_arena.rs:
