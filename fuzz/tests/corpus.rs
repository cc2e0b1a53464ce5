//! Replays the committed seed corpus through the targets' harness without libFuzzer, so that
//! `cargo test` (from `fuzz/`, any toolchain) checks every seed still passes. Inputs that do
//! not decode are skipped, as the fuzz targets skip them. The seeds of a target run one after
//! another on one thread, reusing its arena as the fuzzer does; after each run the arena must
//! be all zeros again.

use std::fs;
use std::path::Path;

use arbitrary::{Arbitrary, Unstructured};
use tagalloc_fuzz::arena::Lease;
use tagalloc_fuzz::misuse::Step;
use tagalloc_fuzz::ops::{Input, Op};
use tagalloc_fuzz::streams::StreamInput;

/// Runs every file of `corpus/<target>/` through `run`; returns how many ran.
fn replay<T: for<'a> Arbitrary<'a>>(target: &str, run: impl Fn(&T)) -> usize {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("corpus")
        .join(target);
    let mut paths: Vec<_> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    paths.sort();
    let mut ran = 0;
    for p in paths {
        let data = fs::read(&p).unwrap();
        if let Ok(input) = T::arbitrary_take_rest(Unstructured::new(&data)) {
            run(&input);
            assert!(
                Lease::take().is_zeroed(),
                "{}: the arena is not all zeros after the run",
                p.display()
            );
            ran += 1;
        }
    }
    assert!(ran > 0, "no seeds in {}", dir.display());
    ran
}

#[test]
fn inline_ops_seeds() {
    replay::<Input<Op>>("inline_ops", tagalloc_fuzz::run_inline_ops);
}

#[test]
fn detached_ops_seeds() {
    replay::<Input<Op>>("detached_ops", tagalloc_fuzz::run_detached_ops);
}

#[test]
fn best_fit_differential_seeds() {
    replay::<Input<Op>>(
        "best_fit_differential",
        tagalloc_fuzz::run_best_fit_differential,
    );
}

#[test]
fn misuse_seeds() {
    replay::<Input<Step>>("misuse", tagalloc_fuzz::run_misuse);
}

#[test]
fn stream_order_seeds() {
    replay::<StreamInput>("stream_order", tagalloc_fuzz::run_stream_order);
}

#[test]
fn plan_problem_seeds() {
    replay::<tagalloc_fuzz::plans::PlanInput>("plan_problem", tagalloc_fuzz::run_plan_problem);
}

/// The planner's seeds (kept from a minimised corpus, one per combination of what a problem
/// has) reach problems that `solve` takes with a graph, aliases, groups, pins and spaces.
#[test]
fn plan_problem_seeds_reach_every_constraint_solved() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus/plan_problem");
    let mut reached = [false; 5];
    for e in fs::read_dir(&dir).unwrap() {
        let data = fs::read(e.unwrap().path()).unwrap();
        let Ok(input) =
            tagalloc_fuzz::plans::PlanInput::arbitrary_take_rest(Unstructured::new(&data))
        else {
            continue;
        };
        let (graph, aliases, groups, pins, spaces, solved) = tagalloc_fuzz::plans::features(&input);
        if solved {
            for (r, f) in reached
                .iter_mut()
                .zip([graph, aliases, groups, pins, spaces])
            {
                *r |= f;
            }
        }
    }
    assert_eq!(reached, [true; 5], "graph, aliases, groups, pins, spaces");
}
