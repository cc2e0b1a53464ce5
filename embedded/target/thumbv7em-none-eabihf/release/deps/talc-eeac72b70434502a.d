/work/wt-layers/embedded/target/thumbv7em-none-eabihf/release/deps/talc-eeac72b70434502a.d: src/bin/talc.rs

/work/wt-layers/embedded/target/thumbv7em-none-eabihf/release/deps/libtalc-eeac72b70434502a.rmeta: src/bin/talc.rs

src/bin/talc.rs:
