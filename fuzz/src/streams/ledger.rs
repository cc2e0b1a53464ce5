//! The oracle's memory of device memory: which byte ranges live blocks hold now, and, for
//! memory freed since, the last use of it on every stream that used it (the fake's
//! [`FakePoint`]s). No stream may be handed any byte of a freed range unless the fake says its
//! later work runs after every one of those uses ([`FakeDriver::ordered_after`]: the same
//! stream, completed, or waited for on the device, directly or through other waits).
//!
//! Once a range is handed out again and its new owner has used it (the harness launches a
//! kernel on the block's stream right after every allocation), the old uses are implied by
//! the new one: whatever is ordered after the new use is ordered after them (the fake's waits
//! carry the waiting stream's own dependencies along, and completing work completes what it
//! waited for). So a handed-out range leaves the ledger, and is entered again, with its new
//! uses, when it is freed. Freed ranges are therefore disjoint from each other and from the
//! live blocks.

use std::collections::BTreeMap;

use tagalloc_cuda::fake::{FakeDriver, FakePoint, FakeStream};

/// A freed range: its end, its uses, and when it was freed (the step, for reports).
#[derive(Clone, Debug)]
struct Freed {
    end: u64,
    uses: Vec<FakePoint>,
    step: usize,
}

/// Live and freed ranges of device memory (see the module docs).
///
/// Invariant: `live` and `freed` ranges are non-empty and disjoint, all of them.
#[derive(Debug, Default)]
pub struct Ledger {
    /// Start → (end, the step that allocated it).
    live: BTreeMap<u64, (u64, usize)>,
    /// Start → the freed range starting there.
    freed: BTreeMap<u64, Freed>,
}

impl Ledger {
    /// An empty ledger.
    pub fn new() -> Ledger {
        Ledger::default()
    }

    /// Records `start..end` handed to `stream` at `step`: it must overlap no live block, and
    /// `stream` must be ordered after every use of every freed byte of it. Those freed bytes
    /// then leave the ledger (see the module docs). How many uses it checked; `Err`: what went
    /// wrong, in words.
    pub fn hand_out(
        &mut self,
        gpu: &FakeDriver,
        stream: FakeStream,
        start: u64,
        end: u64,
        step: usize,
    ) -> Result<usize, String> {
        if let Some((&s, &(e, at))) = self.live.range(..end).next_back() {
            if e > start {
                return Err(format!(
                    "overlap: {stream:?} got {start:#x}..{end:#x}, over the live block \
                     {s:#x}..{e:#x} allocated at step {at}"
                ));
            }
        }
        let mut checked = 0;
        let overlapping: Vec<u64> = self
            .freed
            .range(..end)
            .rev()
            .take_while(|(_, f)| f.end > start)
            .map(|(&s, _)| s)
            .collect();
        for &s in &overlapping {
            let f = &self.freed[&s];
            for &p in &f.uses {
                checked += 1;
                if !gpu.ordered_after(stream, p) {
                    return Err(format!(
                        "stream order: {stream:?} got {start:#x}+{}, not ordered after {p:?}, a \
                         use of {s:#x}..{:#x} freed at step {} (its uses: {:?})",
                        end - start,
                        f.end,
                        f.step,
                        f.uses
                    ));
                }
            }
        }
        for s in overlapping {
            if let Some(f) = self.freed.remove(&s) {
                if s < start {
                    self.freed.insert(
                        s,
                        Freed {
                            end: start,
                            ..f.clone()
                        },
                    );
                }
                if f.end > end {
                    self.freed.insert(end, f);
                }
            }
        }
        self.live.insert(start, (end, step));
        Ok(checked)
    }

    /// Records the live block at `start..end` freed at `step`, last used at `uses`.
    pub fn free(&mut self, start: u64, end: u64, uses: Vec<FakePoint>, step: usize) {
        let removed = self.live.remove(&start);
        assert_eq!(
            removed.map(|(e, _)| e),
            Some(end),
            "the ledger lost the live block {start:#x}..{end:#x}"
        );
        self.freed.insert(start, Freed { end, uses, step });
    }

    /// Forgets every use that has completed (`done` says), and the ranges left with none:
    /// every stream is ordered after completed work.
    pub fn forget_completed(&mut self, mut done: impl FnMut(FakePoint) -> bool) {
        self.freed.retain(|_, f| {
            f.uses.retain(|&p| !done(p));
            !f.uses.is_empty()
        });
    }

    /// Freed ranges remembered.
    pub fn freed_ranges(&self) -> usize {
        self.freed.len()
    }
}
