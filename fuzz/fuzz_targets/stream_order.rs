#![no_main]

use libfuzzer_sys::fuzz_target;
use tagalloc_fuzz::streams::StreamInput;

fuzz_target!(init: tagalloc_fuzz::trace::init(), |input: StreamInput| {
    tagalloc_fuzz::run_stream_order(&input)
});
