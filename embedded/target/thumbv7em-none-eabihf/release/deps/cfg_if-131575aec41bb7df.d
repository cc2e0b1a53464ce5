/work/wt-layers/embedded/target/thumbv7em-none-eabihf/release/deps/cfg_if-131575aec41bb7df.d: /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/cfg-if-1.0.5/src/lib.rs

/work/wt-layers/embedded/target/thumbv7em-none-eabihf/release/deps/libcfg_if-131575aec41bb7df.rmeta: /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/cfg-if-1.0.5/src/lib.rs

/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/cfg-if-1.0.5/src/lib.rs:
