/work/wt-layers/embedded/target/thumbv7em-none-eabihf/release/deps/embedded_alloc_llff-68b74743e825025b.d: src/bin/embedded_alloc_llff.rs

/work/wt-layers/embedded/target/thumbv7em-none-eabihf/release/deps/libembedded_alloc_llff-68b74743e825025b.rmeta: src/bin/embedded_alloc_llff.rs

src/bin/embedded_alloc_llff.rs:
