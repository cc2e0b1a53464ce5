//! Which code tells the fuzzer about its comparisons.
//!
//! The fuzz build instruments every integer comparison with a call into libFuzzer, which
//! records the operands so that mutations can try them. That is worth its cost in the code
//! under test (the heap's operations) and in the decoding of inputs, but not in the checks the
//! driver runs after every step: `check()` walks every chunk and bin, and its comparisons,
//! which hold on every run, made up most of each execution's time and flooded libFuzzer's
//! table of recent comparisons with operands no input controls.
//!
//! Built with `-Cllvm-args=-sanitizer-coverage-gated-trace-callbacks` (as `.ci/fuzz` builds),
//! every instrumented function reads a gate word when it is entered and makes those calls only
//! while the gate is non-zero. [`untraced`] closes the gate around a check, and [`init`] opens
//! it once before the first input. Only the comparison callbacks are gated: the edge counters
//! that measure coverage, and so which inputs are kept, count the checks' code as before, and
//! every check runs exactly as it does without the gate.
//!
//! Built without that option (a plain `cargo +nightly fuzz build`, or `cargo test`), there is no
//! gate: both functions then only run what they are given.

#[cfg(fuzzing)]
mod gate {
    // The gate words: the compiler emits one per object file, in the section `__sancov_gate`,
    // and the linker marks the section's ends. Weak, so that a build without gating (no such
    // section) links too, with null ends.
    extern "C" {
        #[linkage = "extern_weak"]
        static __start___sancov_gate: *mut u64;
        #[linkage = "extern_weak"]
        static __stop___sancov_gate: *mut u64;
    }

    /// Writes `value` into every gate word (there may be one per object file; the code reads
    /// the one its symbol resolved to) and returns the value the first one held.
    pub fn swap(value: u64) -> u64 {
        // SAFETY: reading the addresses of two link-time symbols.
        let (start, stop) = unsafe { (__start___sancov_gate, __stop___sancov_gate) };
        if start.is_null() || stop <= start {
            return value;
        }
        let words = (stop as usize - start as usize) / size_of::<u64>();
        // SAFETY: the section holds `words >= 1` aligned `u64` gate words, accessed only here
        // and by instrumented code, on the fuzzer's one thread. Volatile, so that no write is
        // dropped as dead before the compiler's instrumentation adds the reads.
        unsafe {
            let old = start.read_volatile();
            for i in 0..words {
                start.add(i).write_volatile(value);
            }
            old
        }
    }
}

#[cfg(not(fuzzing))]
mod gate {
    pub fn swap(value: u64) -> u64 {
        value
    }
}

/// Opens the gate: comparisons are reported from here on. Called once, before the first input.
pub fn init() {
    gate::swap(1);
}

/// Runs `f` (a check) with the gate closed, then sets it back as it was.
pub fn untraced<R>(f: impl FnOnce() -> R) -> R {
    let was = gate::swap(0);
    let r = behind_gate(f);
    gate::swap(was);
    r
}

/// Calls `f` from a function of its own: each function reads the gate when it is entered, so
/// `f` must not be inlined into a caller that read it while it was open.
#[inline(never)]
fn behind_gate<R>(f: impl FnOnce() -> R) -> R {
    f()
}
