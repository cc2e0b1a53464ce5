/work/wt-layers/embedded/target/thumbv7em-none-eabihf/release/deps/rlsf-8abf1b487307a888.d: src/bin/rlsf.rs

/work/wt-layers/embedded/target/thumbv7em-none-eabihf/release/deps/librlsf-8abf1b487307a888.rmeta: src/bin/rlsf.rs

src/bin/rlsf.rs:
