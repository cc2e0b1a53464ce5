//! A cold start for a timed run: every cache line the previous run left is evicted first.
//!
//! Why: allocators are interleaved run by run, so without this each one starts with whatever
//! the allocator before it left in the caches. For a short trace that decides the figure: on
//! `wee-gcc-hello` (a few hundred microseconds) the inline heap without statistics, run right
//! after the inline heap, found the very lines it was about to touch (the two hand out the
//! same addresses) and timed much faster than the heap it copies (figures: `bench/README.md`,
//! "Method notes", Replay). Sweeping before every timed run puts
//! every allocator in the same state: none of its arena cached.

use std::hint::black_box;

/// A buffer twice the last-level cache of the development machine the measurement log's
/// figures come from (32 MiB of L3), read one word per 64-byte line.
pub struct Sweep {
    words: Vec<u64>,
}

impl Sweep {
    /// The bytes read by each [`Sweep::run`].
    pub const BYTES: usize = 64 << 20;

    /// The buffer, written once so that its pages exist.
    pub fn new() -> Self {
        Sweep {
            words: vec![1; Self::BYTES / 8],
        }
    }

    /// Reads one word of every line of the buffer, evicting what the caches held. Reads, not
    /// writes: a dirty line would cost the next run a write-back when it is evicted.
    pub fn run(&self) {
        let sum = self
            .words
            .iter()
            .step_by(64 / 8)
            .fold(0u64, |a, &w| a.wrapping_add(w));
        black_box(sum);
    }
}

impl Default for Sweep {
    fn default() -> Self {
        Self::new()
    }
}
