#![no_main]

use libfuzzer_sys::fuzz_target;
use tagalloc_fuzz::plans::PlanInput;

fuzz_target!(init: tagalloc_fuzz::trace::init(), |input: PlanInput| {
    tagalloc_fuzz::run_plan_problem(&input)
});
