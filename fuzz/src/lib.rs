//! Fuzz harness for the tagalloc core, shared by the targets in `fuzz_targets/`.
//!
//! - [`ops`]: decoding input bytes into heap operations ([`ops::Op`]) and a run's set-up.
//! - [`rig`]: both heaps, driven through the core's adapter (`tagalloc::model::Adapter`), with
//!   what surrounds them: an `InlineHeap` over regions carved from a zeroed arena ([`arena`]:
//!   one per thread, reused from run to run), a `DetachedHeap` over plain numbers with its
//!   record table growable or capped, foreign handles, and each heap behind a lock for a
//!   while (`GlobalHeap`, `SharedDetachedHeap`).
//! - [`settings`]: the harness's environment variables, a value it does not accept reported.
//! - [`pattern`]: the byte pattern kept in every live allocation of an inline heap.
//! - [`trace`]: keeps the checks' comparisons out of the fuzzer's feedback (when built for it).
//! - [`driver`]: runs operations on a heap and checks every result, with or without the
//!   reference model (`tagalloc::model`), then frees everything and checks that every region
//!   is one free chunk again.
//! - [`misuse`]: double, stale, interior, wrongly sized and foreign frees and reallocs, frees
//!   queued while the heap's lock is held and calls that re-enter it, and requests and
//!   constructors at the limits of the size arithmetic.
//! - [`plans`]: the static planner on problems with aliases, groups, streams, pins and spaces,
//!   every layout against the independent `check_layout`.
//! - [`streams`]: the CUDA backend's stream-ordered device pool (`tagalloc_cuda::DevicePool`)
//!   over the fake driver, on several streams, with graph captures, streams forgotten and
//!   destroyed, and the fake's timeline as the oracle of stream-ordered reuse.
//!
//! Every target is one of the `run_*` functions below (after [`trace::init`] once); a failing input
//! replays with `cargo +nightly fuzz run <target> <file>`, and `cargo +nightly fuzz fmt <target>
//! <file>` prints it as a sequence of operations.

#![cfg_attr(fuzzing, feature(linkage))]

pub mod arena;
pub mod driver;
pub mod misuse;
pub mod ops;
pub mod pattern;
pub mod plans;
pub mod rig;
pub mod settings;
pub mod streams;
pub mod trace;

use tagalloc::{DetachedHeap, Error, InlineHeap};

use driver::Driver;
use misuse::Step;
use ops::{Config, Input, Op};
use rig::{CappedTable, DetachedRig, InlineRig, Rig};

/// Runs the steps on the inline heap the set-up asks for: mostly the host granule as a
/// constant (`InlineHeap::new`, what programs use), sometimes the same granule read at run time
/// or a larger one (`InlineHeap::with_granule`).
fn drive_inline<T: Apply>(config: &Config, with_model: bool, steps: &[T]) {
    let granule = match config.granule % 8 {
        0..=3 => return drive(InlineRig::new(InlineHeap::new()), with_model, config, steps),
        4 => 16,
        5 => 32,
        6 => 64,
        _ => 256,
    };
    let heap = InlineHeap::with_granule(granule).unwrap();
    drive(InlineRig::new(heap), with_model, config, steps);
}

/// The detached granule the set-up asks for.
fn detached_granule(config: &Config) -> usize {
    [256, 16, 1, 4096, 64][config.granule as usize % 5]
}

/// Something a driver runs: an operation, or a step of the misuse target.
pub trait Apply {
    /// Runs `self` through `d`.
    fn apply<R: Rig>(&self, d: &mut Driver<R>);
}

impl Apply for Op {
    fn apply<R: Rig>(&self, d: &mut Driver<R>) {
        d.step(self);
    }
}

impl Apply for Step {
    fn apply<R: Rig>(&self, d: &mut Driver<R>) {
        d.run_step(self);
    }
}

/// Runs `steps` through a driver over `rig`, from the set-up's first region to the final
/// checks.
fn drive<R: Rig, T: Apply>(rig: R, with_model: bool, config: &Config, steps: &[T]) {
    let mut d = Driver::new(rig, with_model);
    d.start(config.first_region_len());
    for step in steps {
        step.apply(&mut d);
    }
    d.finish();
}

/// Runs the steps on a detached heap with the record table the set-up asks for: growable
/// (`DetachedHeap::growable`), or capped at a few records so that `OutOfRecords` comes up.
fn drive_detached<T: Apply>(config: &Config, steps: &[T]) {
    let g = detached_granule(config);
    if config.table < 128 {
        let heap = DetachedHeap::growable(g).unwrap();
        drive(DetachedRig::new(heap), false, config, steps);
    } else {
        let cap = 2 + (config.table as usize & 63);
        let heap = DetachedHeap::new(CappedTable::new(cap / 2, cap), g).unwrap();
        drive(DetachedRig::new(heap), false, config, steps);
    }
}

/// `inline_ops`: operation sequences on an `InlineHeap`.
pub fn run_inline_ops(input: &Input<Op>) {
    let c = &input.config;
    if c.granule == 255 {
        for bad in [0, 8, 24, 48] {
            assert_eq!(InlineHeap::with_granule(bad).err(), Some(Error::BadGranule));
        }
    }
    drive_inline(c, false, &input.ops);
}

/// `detached_ops`: operation sequences on a `DetachedHeap`.
pub fn run_detached_ops(input: &Input<Op>) {
    let c = &input.config;
    if c.granule == 255 {
        for bad in [0, 3, 24] {
            assert!(matches!(
                DetachedHeap::growable(bad),
                Err(Error::BadGranule)
            ));
        }
    }
    drive_detached(c, &input.ops);
}

/// `best_fit_differential`: the same operations on both heaps, each checked against the
/// reference model: every address and every error must be the model's.
pub fn run_best_fit_differential(input: &Input<Op>) {
    let c = &input.config;
    drive_inline(c, true, &input.ops);
    let heap = DetachedHeap::growable(detached_granule(c)).unwrap();
    drive(DetachedRig::new(heap), true, c, &input.ops);
}

/// `misuse`: operations interleaved with misuse of the checked APIs, on the heap the set-up
/// picks.
pub fn run_misuse(input: &Input<Step>) {
    let c = &input.config;
    if c.table & 1 == 0 {
        drive_inline(c, false, &input.ops);
    } else {
        drive_detached(c, &input.ops);
    }
}

/// `stream_order`: operation sequences on a stream-ordered device pool over the fake CUDA
/// driver, checked against the fake's timeline (see [`streams`]).
pub fn run_stream_order(input: &streams::StreamInput) {
    streams::run(input);
}

/// `plan_problem`: the static planner on problems with constraints (see [`plans`]).
pub fn run_plan_problem(input: &plans::PlanInput) {
    plans::run(input)
}
