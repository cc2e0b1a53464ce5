//! The fake device's engines, for its clock: how much of the device's work runs at once.
//!
//! A real device's streams share its throughput: two memory-bound kernels on two streams each
//! get about half the bandwidth, and a kernel that fills the GPU leaves nothing to another.
//! Modelled as `n` engines, each running one kernel at a time at full speed: a kernel ready at
//! `t` runs in the earliest gap of any engine at or after `t` that is long enough, so work of
//! other streams fills the time an engine would otherwise idle (what a GPU does with its idle
//! multiprocessors). One engine is a device whose every kernel fills it; with no engines at all
//! (the clock's `engines: 0`), every stream runs at full speed at once, an upper bound of the
//! concurrency a device offers.

use std::collections::BTreeMap;

/// Busy intervals of each engine, `start → end` in nanoseconds of device time.
///
/// Invariant: an engine's intervals do not overlap and do not touch (touching ones are
/// merged).
#[derive(Debug)]
pub(crate) struct Engines {
    busy: Vec<BTreeMap<u64, u64>>,
}

impl Engines {
    pub(crate) fn new(n: u32) -> Engines {
        Engines {
            busy: (0..n.max(1)).map(|_| BTreeMap::new()).collect(),
        }
    }

    /// Runs `ns` of work ready at `ready` (not before `now`, the host's time, before which
    /// nothing is placed any more): returns when it ends.
    pub(crate) fn place(&mut self, now: u64, ready: u64, ns: u64) -> u64 {
        if ns == 0 {
            return ready;
        }
        let (i, start) = self
            .busy
            .iter()
            .map(|b| earliest(b, ready, ns))
            .enumerate()
            .min_by_key(|&(_, t)| t)
            .unwrap_or((0, ready));
        let b = &mut self.busy[i];
        let (mut s, mut e) = (start, start + ns);
        if let Some((&ps, &pe)) = b.range(..=s).next_back() {
            if pe == s {
                b.remove(&ps);
                s = ps;
            }
        }
        if let Some(ne) = b.remove(&e) {
            e = ne;
        }
        b.insert(s, e);
        // Nothing is ever placed before the host's time again: forget what ended before it.
        for b in &mut self.busy {
            while let Some((&fs, &fe)) = b.first_key_value() {
                if fe >= now {
                    break;
                }
                b.remove(&fs);
            }
        }
        start + ns
    }
}

/// The earliest start at or after `ready` of a gap of `ns` in `busy`.
fn earliest(busy: &BTreeMap<u64, u64>, ready: u64, ns: u64) -> u64 {
    let mut t = ready;
    if let Some((_, &e)) = busy.range(..=t).next_back() {
        t = t.max(e);
    }
    for (&s, &e) in busy.range(t..) {
        if s >= t + ns {
            break;
        }
        t = t.max(e);
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_engine_runs_one_kernel_at_a_time_and_fills_gaps() {
        let mut e = Engines::new(1);
        assert_eq!(e.place(0, 0, 10), 10); // 0..10
        assert_eq!(e.place(0, 0, 10), 20, "after the first: 10..20");
        assert_eq!(e.place(0, 50, 10), 60, "ready late: 50..60, a gap 20..50");
        assert_eq!(e.place(0, 5, 30), 50, "fills the gap exactly: 20..50");
        assert_eq!(e.place(0, 0, 1), 61, "no gap left before 60");
        assert_eq!(e.busy[0].len(), 1, "touching intervals merged");
    }

    #[test]
    fn two_engines_run_two_kernels_at_once() {
        let mut e = Engines::new(2);
        assert_eq!(e.place(0, 0, 10), 10);
        assert_eq!(e.place(0, 0, 10), 10, "the second engine");
        assert_eq!(e.place(0, 0, 10), 20);
        assert_eq!(e.place(100, 100, 1), 101, "the past is forgotten");
        assert!(e.busy.iter().all(|b| b.len() <= 1));
    }
}
