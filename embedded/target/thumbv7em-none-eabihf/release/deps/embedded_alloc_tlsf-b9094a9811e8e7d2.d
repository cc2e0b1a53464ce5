/work/wt-layers/embedded/target/thumbv7em-none-eabihf/release/deps/embedded_alloc_tlsf-b9094a9811e8e7d2.d: src/bin/embedded_alloc_tlsf.rs

/work/wt-layers/embedded/target/thumbv7em-none-eabihf/release/deps/libembedded_alloc_tlsf-b9094a9811e8e7d2.rmeta: src/bin/embedded_alloc_tlsf.rs

src/bin/embedded_alloc_tlsf.rs:
