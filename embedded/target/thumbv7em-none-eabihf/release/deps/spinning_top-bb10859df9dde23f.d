/work/main/embedded/target/thumbv7em-none-eabihf/release/deps/spinning_top-bb10859df9dde23f.d: /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/spinning_top-0.3.1/src/lib.rs /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/spinning_top-0.3.1/src/relax.rs /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/spinning_top-0.3.1/src/rw_spinlock.rs /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/spinning_top-0.3.1/src/spinlock.rs

/work/main/embedded/target/thumbv7em-none-eabihf/release/deps/libspinning_top-bb10859df9dde23f.rmeta: /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/spinning_top-0.3.1/src/lib.rs /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/spinning_top-0.3.1/src/relax.rs /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/spinning_top-0.3.1/src/rw_spinlock.rs /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/spinning_top-0.3.1/src/spinlock.rs

/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/spinning_top-0.3.1/src/lib.rs:
/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/spinning_top-0.3.1/src/relax.rs:
/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/spinning_top-0.3.1/src/rw_spinlock.rs:
/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/spinning_top-0.3.1/src/spinlock.rs:
