/work/wt-layers/embedded/target/thumbv7em-none-eabihf/release/deps/tagalloc_compact-51f78906a9d8711a.d: src/bin/tagalloc_compact.rs

/work/wt-layers/embedded/target/thumbv7em-none-eabihf/release/deps/libtagalloc_compact-51f78906a9d8711a.rmeta: src/bin/tagalloc_compact.rs

src/bin/tagalloc_compact.rs:
