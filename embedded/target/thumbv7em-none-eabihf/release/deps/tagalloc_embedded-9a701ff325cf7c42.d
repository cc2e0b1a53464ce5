/work/wt-layers/embedded/target/thumbv7em-none-eabihf/release/deps/tagalloc_embedded-9a701ff325cf7c42.d: src/lib.rs

/work/wt-layers/embedded/target/thumbv7em-none-eabihf/release/deps/libtagalloc_embedded-9a701ff325cf7c42.rmeta: src/lib.rs

src/lib.rs:
