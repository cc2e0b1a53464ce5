/work/wt-layers/embedded/target/thumbv7em-none-eabihf/release/deps/linked_list_allocator-f77035454089b22a.d: /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/linked_list_allocator-0.10.6/src/lib.rs /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/linked_list_allocator-0.10.6/src/hole.rs

/work/wt-layers/embedded/target/thumbv7em-none-eabihf/release/deps/liblinked_list_allocator-f77035454089b22a.rmeta: /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/linked_list_allocator-0.10.6/src/lib.rs /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/linked_list_allocator-0.10.6/src/hole.rs

/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/linked_list_allocator-0.10.6/src/lib.rs:
/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/linked_list_allocator-0.10.6/src/hole.rs:
