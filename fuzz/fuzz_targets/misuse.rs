#![no_main]

use libfuzzer_sys::fuzz_target;
use tagalloc_fuzz::misuse::Step;
use tagalloc_fuzz::ops::Input;

fuzz_target!(init: tagalloc_fuzz::trace::init(), |input: Input<Step>| {
    tagalloc_fuzz::run_misuse(&input)
});
