/work/wt-layers/embedded/target/thumbv7em-none-eabihf/release/deps/scopeguard-e9320d2c2f069574.d: /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/scopeguard-1.2.0/src/lib.rs

/work/wt-layers/embedded/target/thumbv7em-none-eabihf/release/deps/libscopeguard-e9320d2c2f069574.rmeta: /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/scopeguard-1.2.0/src/lib.rs

/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/scopeguard-1.2.0/src/lib.rs:
