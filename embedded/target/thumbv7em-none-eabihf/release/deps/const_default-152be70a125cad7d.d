/work/wt-layers/embedded/target/thumbv7em-none-eabihf/release/deps/const_default-152be70a125cad7d.d: /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/const-default-1.0.0/src/lib.rs

/work/wt-layers/embedded/target/thumbv7em-none-eabihf/release/deps/libconst_default-152be70a125cad7d.rmeta: /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/const-default-1.0.0/src/lib.rs

/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/const-default-1.0.0/src/lib.rs:
