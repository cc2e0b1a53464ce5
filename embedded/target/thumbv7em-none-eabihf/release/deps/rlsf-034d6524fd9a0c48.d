/work/main/embedded/target/thumbv7em-none-eabihf/release/deps/rlsf-034d6524fd9a0c48.d: /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/rlsf-0.2.3/src/lib.rs /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/rlsf-0.2.3/src/utils.rs /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/rlsf-0.2.3/src/flex.rs /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/rlsf-0.2.3/src/int.rs /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/rlsf-0.2.3/src/tlsf.rs /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/rlsf-0.2.3/src/../README.md /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/rlsf-0.2.3/src/tlsf-diagram.svg

/work/main/embedded/target/thumbv7em-none-eabihf/release/deps/librlsf-034d6524fd9a0c48.rmeta: /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/rlsf-0.2.3/src/lib.rs /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/rlsf-0.2.3/src/utils.rs /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/rlsf-0.2.3/src/flex.rs /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/rlsf-0.2.3/src/int.rs /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/rlsf-0.2.3/src/tlsf.rs /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/rlsf-0.2.3/src/../README.md /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/rlsf-0.2.3/src/tlsf-diagram.svg

/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/rlsf-0.2.3/src/lib.rs:
/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/rlsf-0.2.3/src/utils.rs:
/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/rlsf-0.2.3/src/flex.rs:
/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/rlsf-0.2.3/src/int.rs:
/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/rlsf-0.2.3/src/tlsf.rs:
/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/rlsf-0.2.3/src/../README.md:
/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/rlsf-0.2.3/src/tlsf-diagram.svg:
