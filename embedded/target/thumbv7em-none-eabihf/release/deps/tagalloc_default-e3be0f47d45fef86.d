/work/wt-layers/embedded/target/thumbv7em-none-eabihf/release/deps/tagalloc_default-e3be0f47d45fef86.d: src/bin/tagalloc_default.rs

/work/wt-layers/embedded/target/thumbv7em-none-eabihf/release/deps/libtagalloc_default-e3be0f47d45fef86.rmeta: src/bin/tagalloc_default.rs

src/bin/tagalloc_default.rs:
