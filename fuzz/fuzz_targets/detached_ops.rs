#![no_main]

use libfuzzer_sys::fuzz_target;
use tagalloc_fuzz::ops::{Input, Op};

fuzz_target!(init: tagalloc_fuzz::trace::init(), |input: Input<Op>| {
    tagalloc_fuzz::run_detached_ops(&input)
});
