//! Misuse of the checked APIs: frees and reallocs of stale, interior, wrongly sized and
//! foreign handles. Each must come back as an `Err` naming the misuse, leave the heap exactly
//! as it was (statistics equal but for the refusal counter, `check()` clean) and leave every
//! live allocation's contents alone.

use arbitrary::{Arbitrary, Result, Unstructured};
use tagalloc::{Error, Stats};

use crate::driver::Driver;
use crate::ops::{Op, Size};
use crate::subject::Subject;
use crate::trace::untraced;

/// One misuse.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Misuse {
    /// Frees (or reallocs) an allocation that was freed before.
    Stale {
        /// Which of the remembered freed allocations (0: the latest).
        pick: u8,
        /// Realloc rather than free.
        realloc: bool,
    },
    /// Frees a live allocation, then frees it again at once.
    FreeTwice {
        /// Which live allocation.
        pick: u16,
    },
    /// Frees (or reallocs) an address inside a live allocation, or just before it.
    Interior {
        /// Which live allocation.
        pick: u16,
        /// How far from its start.
        offset: u32,
        /// Realloc rather than free.
        realloc: bool,
    },
    /// Frees (or reallocs) a live allocation with another size.
    WrongSize {
        /// Which live allocation.
        pick: u16,
        /// The size claimed.
        size: Size,
        /// Realloc rather than free.
        realloc: bool,
    },
    /// Frees (or reallocs) a handle this heap never gave out.
    Foreign {
        /// What it is made from.
        raw: usize,
        /// Realloc rather than free.
        realloc: bool,
    },
}

impl<'a> Arbitrary<'a> for Misuse {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        let sel = u8::arbitrary(u)?;
        let realloc = sel & 1 == 1;
        Ok(match sel >> 1 {
            0..=24 => Misuse::Stale {
                pick: u.arbitrary()?,
                realloc,
            },
            25..=49 => Misuse::FreeTwice {
                pick: u.arbitrary()?,
            },
            50..=74 => Misuse::Interior {
                pick: u.arbitrary()?,
                offset: u.arbitrary()?,
                realloc,
            },
            75..=99 => Misuse::WrongSize {
                pick: u.arbitrary()?,
                size: u.arbitrary()?,
                realloc,
            },
            _ => Misuse::Foreign {
                raw: u.arbitrary()?,
                realloc,
            },
        })
    }
}

/// A step of the misuse target: a plain operation (to build up a heap) or a misuse.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// A plain operation.
    Op(Op),
    /// A misuse.
    Misuse(Misuse),
}

impl<'a> Arbitrary<'a> for Step {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        Ok(if u8::arbitrary(u)? < 168 {
            Step::Op(u.arbitrary()?)
        } else {
            Step::Misuse(u.arbitrary()?)
        })
    }
}

/// The statistics with the refusal counter cleared, to compare before and after a refusal.
fn sans_refusals(st: Stats) -> Stats {
    Stats {
        refused_frees: 0,
        ..st
    }
}

impl<S: Subject> Driver<S> {
    /// Runs a step of the misuse target.
    pub fn run_step(&mut self, step: &Step) {
        match step {
            Step::Op(op) => self.step(op),
            Step::Misuse(m) => self.misuse(m),
        }
    }

    /// Whether `h`'s address is a live allocation's.
    fn names_live(&self, h: &S::H) -> bool {
        let a = S::addr(h);
        self.live.iter().any(|l| l.addr == a)
    }

    /// Runs one misuse and checks that it was refused with one of `allowed`, changing
    /// nothing.
    fn refused(&mut self, h: S::H, size: usize, realloc: bool, allowed: &[Error], what: &str) {
        let before = untraced(|| self.subject.stats());
        let got = if realloc {
            self.subject
                .realloc(h, size, 16, size.saturating_add(4096))
                .map(|_| ())
        } else {
            self.subject.free(h, size)
        };
        untraced(|| {
            let e = match got {
                Ok(()) => panic!("{what}: {h:?} ({size} bytes) was obeyed"),
                Err(e) => e,
            };
            assert!(
                allowed.contains(&e),
                "{what}: {h:?} ({size} bytes) refused as {e:?}, not one of {allowed:?}"
            );
            let after = self.subject.stats();
            assert_eq!(
                sans_refusals(after),
                sans_refusals(before),
                "{what}: refused, yet the heap changed"
            );
            let counted = after.refused_frees - before.refused_frees;
            if realloc {
                assert!(counted <= 1, "{what}: {counted} refusals counted");
            } else {
                assert_eq!(counted, 1, "{what}: refusal not counted");
            }
        });
        self.after_step();
        self.verify_all();
    }

    /// Runs one misuse.
    pub fn misuse(&mut self, m: &Misuse) {
        use Error::{DoubleFree, ForeignPointer, WrongSize};
        match *m {
            Misuse::Stale { pick, realloc } => {
                let n = self.graveyard.len();
                if n == 0 {
                    return;
                }
                let (h, size) = self.graveyard[n - 1 - pick as usize % n];
                if self.subject.frees_by_address() && self.names_live(&h) {
                    return;
                }
                self.refused(h, size, realloc, &[DoubleFree, ForeignPointer], "stale");
            }
            Misuse::FreeTwice { pick } => {
                let Some(i) = self.pick(pick) else { return };
                let l = self.live[i];
                self.free(i);
                self.after_step();
                let allowed: &[Error] = if self.subject.frees_by_address() {
                    // The freed chunk may have merged into a free predecessor.
                    &[DoubleFree, ForeignPointer]
                } else {
                    &[DoubleFree]
                };
                self.refused(l.h, l.size, false, allowed, "double free");
            }
            Misuse::Interior {
                pick,
                offset,
                realloc,
            } => {
                let Some(i) = self.pick(pick) else { return };
                let l = self.live[i];
                let usable = self.subject.usable(&l.h);
                // Inside the payload, or into the chunk's head just before it.
                let k = if offset & 1 == 0 {
                    1 + (offset as usize >> 1) % (usable - 1).max(1)
                } else {
                    ((offset as usize >> 1) % 8 + 1).wrapping_neg()
                };
                let h = S::interior(&l.h, k);
                self.refused(h, l.size, realloc, &[ForeignPointer], "interior");
            }
            Misuse::WrongSize {
                pick,
                size: Size(size),
                realloc,
            } => {
                let Some(i) = self.pick(pick) else { return };
                let l = self.live[i];
                let granules = (self.subject.usable(&l.h) + self.geo.head) / self.geo.granule;
                if !self.geo.size_matches(granules, size) {
                    self.refused(l.h, size, realloc, &[WrongSize], "wrong size");
                } else if !realloc {
                    // A size the chunk may have been allocated for: an ordinary free.
                    self.free_as(i, size);
                    self.after_step();
                }
            }
            Misuse::Foreign { raw, realloc } => {
                let h = self.subject.foreign(raw);
                if self.names_live(&h) {
                    return;
                }
                let size = raw % 4096 + 1;
                self.refused(h, size, realloc, &[ForeignPointer, DoubleFree], "foreign");
            }
        }
    }
}
