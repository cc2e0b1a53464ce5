//! Misuse: frees and reallocs of stale, interior, wrongly sized and foreign handles; frees
//! queued while the heap's lock is held; requests and constructors at the limits of the size
//! arithmetic. Each misuse must come back as an `Err` naming it (or, queued, be counted as
//! refused once the lock is taken again), leave the heap exactly as it was (statistics equal but
//! for the refusal counter, `check()` clean) and leave every live allocation's contents alone.

use arbitrary::{Arbitrary, Result, Unstructured};
use tagalloc::model::{Adapter, Counted, Geometry};
use tagalloc::{DetachedHeap, Error, InlineHeap, Stats, HOST_GRANULE, MAX_GRANULE};

use crate::driver::{addr, verify, Driver, Live};
use crate::ops::{Op, Size};
use crate::rig::{Rig, SharedHeap, H, RING};
use crate::trace::untraced;

/// A free (or realloc) of a handle that is not a live allocation of this heap with that size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bad {
    /// An allocation that was freed before.
    Stale {
        /// Which of the remembered freed allocations (0: the latest).
        pick: u8,
    },
    /// A live allocation freed, then freed again at once.
    Twice {
        /// Which live allocation.
        pick: u16,
    },
    /// An address inside a live allocation, or just before it.
    Interior {
        /// Which live allocation.
        pick: u16,
        /// How far from its start.
        offset: u32,
    },
    /// A live allocation with another size.
    WrongSize {
        /// Which live allocation.
        pick: u16,
        /// The size claimed.
        size: Size,
    },
    /// A handle this heap never gave out (detached: a block of another heap, over other
    /// addresses or the very same ones).
    Foreign {
        /// What it is made from.
        raw: usize,
    },
}

impl Bad {
    /// Decodes the misuse that selector `sel` (below 112) names.
    fn decode(sel: u8, u: &mut Unstructured<'_>) -> Result<Bad> {
        Ok(match sel {
            0..=24 => Bad::Stale {
                pick: u.arbitrary()?,
            },
            25..=49 => Bad::Twice {
                pick: u.arbitrary()?,
            },
            50..=74 => Bad::Interior {
                pick: u.arbitrary()?,
                offset: u.arbitrary()?,
            },
            75..=99 => Bad::WrongSize {
                pick: u.arbitrary()?,
                size: u.arbitrary()?,
            },
            _ => Bad::Foreign {
                raw: u.arbitrary()?,
            },
        })
    }
}

/// One free of a batch queued while the lock is held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueuedFree {
    /// A live allocation, freed as it should be: done once the lock is taken again.
    Live {
        /// Which one.
        pick: u16,
    },
    /// A misuse: refused, and counted, once the lock is taken again.
    Bad(Bad),
}

impl<'a> Arbitrary<'a> for QueuedFree {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        let sel = u8::arbitrary(u)?;
        Ok(match sel {
            0..=111 => QueuedFree::Bad(Bad::decode(sel, u)?),
            _ => QueuedFree::Live {
                pick: u.arbitrary()?,
            },
        })
    }
}

/// The most frees one batch queues: more than the ring holds, so that it fills.
pub const MAX_QUEUED: usize = RING + 4;

/// Requests and constructors at the limits of the size arithmetic.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Arbitrary)]
pub struct Extreme {
    /// What is tried: constructors with absurd granules, an allocation, or a resize of a live
    /// allocation.
    pub which: u8,
    /// Which live allocation a resize takes.
    pub pick: u16,
    /// Which extreme size.
    pub size: u8,
    /// Which extreme alignment.
    pub align: u8,
    /// Bits for a size, an alignment or a granule of their own.
    pub salt: u64,
}

/// One misuse.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Misuse {
    /// A bad free, or realloc, refused at once.
    Now {
        /// What it is.
        bad: Bad,
        /// Realloc rather than free (a double free is always two frees).
        realloc: bool,
    },
    /// The heap behind a lock (a `GlobalHeap`, a `SharedDetachedHeap`) for a moment: inside
    /// `with_heap`, frees are queued (good and bad) and allocating calls refused as re-entrant.
    Queued {
        /// The frees, in order.
        frees: Vec<QueuedFree>,
        /// Which re-entrant calls are tried inside (one bit each: alloc, realloc, stats,
        /// `with_heap`).
        reenter: u8,
    },
    /// Requests and constructors at the limits.
    Extreme(Extreme),
}

impl<'a> Arbitrary<'a> for Misuse {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        let sel = u8::arbitrary(u)?;
        let realloc = sel & 1 == 1;
        Ok(match sel >> 1 {
            s @ 0..=111 => Misuse::Now {
                bad: Bad::decode(s, u)?,
                realloc,
            },
            112..=121 => {
                let n = 1 + usize::from(u8::arbitrary(u)?) % MAX_QUEUED;
                let mut frees = Vec::with_capacity(n);
                for _ in 0..n {
                    frees.push(u.arbitrary()?);
                }
                Misuse::Queued {
                    frees,
                    reenter: u.arbitrary()?,
                }
            }
            _ => Misuse::Extreme(u.arbitrary()?),
        })
    }
}

/// A step of the misuse target: a plain operation (to build up a heap) or a misuse.
#[derive(Clone, Debug, PartialEq, Eq)]
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

/// A bad handle ready to be freed: the handle, the size claimed, the errors that may refuse it,
/// and what it is.
struct Prepared<T> {
    h: T,
    size: usize,
    allowed: &'static [Error],
    what: &'static str,
}

/// A free planned in a queued batch.
struct Planned<T> {
    h: T,
    size: usize,
    /// The live allocation it frees (an index into the driver's list), or `None` for a misuse.
    frees: Option<usize>,
}

/// Sizes at the limits: the ends of the address space and of `isize`, and a few past what any
/// region holds.
const EXTREME_SIZES: [usize; 10] = [
    usize::MAX,
    usize::MAX - 1,
    usize::MAX - 15,
    isize::MAX as usize + 1,
    isize::MAX as usize,
    isize::MAX as usize - 1,
    isize::MAX as usize - 4096,
    1 << 62,
    1 << 48,
    0,
];

/// Alignments that are not powers of two, or are huge.
const EXTREME_ALIGNS: [usize; 11] = [
    0,
    3,
    6,
    (1 << 63) + 1,
    usize::MAX,
    1 << 63,
    1 << 62,
    1 << 40,
    MAX_GRANULE,
    MAX_GRANULE * 2,
    1 << 31,
];

/// Granules no heap accepts, and the limits of those they do.
const GRANULES: [usize; 14] = [
    0,
    1,
    2,
    3,
    8,
    24,
    48,
    1000,
    MAX_GRANULE - 1,
    MAX_GRANULE + 1,
    MAX_GRANULE * 2,
    1 << 62,
    1 << 63,
    usize::MAX,
];

impl<R: Rig> Driver<R> {
    /// Runs a step of the misuse target.
    pub fn run_step(&mut self, step: &Step) {
        match step {
            Step::Op(op) => self.step(op),
            Step::Misuse(m) => self.misuse(m),
        }
    }

    /// Whether `h`'s address is a live allocation's.
    fn names_live(&self, h: &H<R>) -> bool {
        let a = addr::<R>(h);
        self.live.iter().any(|l| l.addr == a)
    }

    /// The live allocation `pick` names, if `size` is a size it may have been allocated with
    /// (a free with that size is an ordinary free).
    fn fitting(&self, pick: u16, size: usize) -> Option<usize> {
        let i = self.pick(pick)?;
        let granules = (self.usable(&self.live[i].h) + self.geo.head()) >> self.geo.shift();
        self.geo.size_fits(granules, size).then_some(i)
    }

    /// Runs one misuse.
    pub fn misuse(&mut self, m: &Misuse) {
        match m {
            Misuse::Now { bad, realloc } => {
                if let (Bad::WrongSize { pick, size }, false) = (bad, realloc) {
                    if let Some(i) = self.fitting(*pick, size.0) {
                        // A size the allocation may have: an ordinary free.
                        self.free_as(i, size.0);
                        self.after_step();
                        return;
                    }
                }
                if let Some(p) = self.prepare(bad, true) {
                    self.refused(p, *realloc);
                }
            }
            Misuse::Queued { frees, reenter } => self.queued(frees, *reenter),
            Misuse::Extreme(x) => self.extreme(x),
        }
    }

    /// Makes the handle for `bad`, or `None` when there is nothing to misuse (or the handle
    /// would name a live allocation). A double free first frees its allocation, at once if
    /// `now` (and queued otherwise: the caller does it).
    fn prepare(&mut self, bad: &Bad, now: bool) -> Option<Prepared<H<R>>> {
        use Error::{DoubleFree, ForeignPointer, WrongSize};
        // A pointer into a free chunk (after a merge) is a double free or a foreign pointer
        // by where it falls; a detached block names its record, so the error is exact.
        let freed: &'static [Error] = if R::S::INLINE {
            &[DoubleFree, ForeignPointer]
        } else {
            &[DoubleFree]
        };
        let foreign: &'static [Error] = if R::S::INLINE {
            &[ForeignPointer, DoubleFree]
        } else {
            &[ForeignPointer]
        };
        Some(match *bad {
            Bad::Stale { pick } => {
                let n = self.graveyard.len();
                if n == 0 {
                    return None;
                }
                let (h, size) = self.graveyard[n - 1 - pick as usize % n];
                if R::S::INLINE && self.names_live(&h) {
                    return None;
                }
                let allowed = &[DoubleFree, ForeignPointer];
                Prepared {
                    h,
                    size,
                    allowed,
                    what: "stale",
                }
            }
            Bad::Twice { pick } => {
                let i = self.pick(pick)?;
                let l = self.live[i];
                if now {
                    self.free(i);
                    self.after_step();
                }
                Prepared {
                    h: l.h,
                    size: l.size,
                    allowed: freed,
                    what: "double free",
                }
            }
            Bad::Interior { pick, offset } => {
                let l = self.live[self.pick(pick)?];
                let usable = self.usable(&l.h);
                // Inside the payload, or into the chunk's head just before it.
                let k = if offset & 1 == 0 {
                    1 + (offset as usize >> 1) % (usable - 1).max(1)
                } else {
                    ((offset as usize >> 1) % 8 + 1).wrapping_neg()
                };
                let h = R::interior(&l.h, k);
                Prepared {
                    h,
                    size: l.size,
                    allowed: &[ForeignPointer],
                    what: "interior",
                }
            }
            Bad::WrongSize {
                pick,
                size: Size(size),
            } => {
                let l = self.live[self.pick(pick)?];
                if self.fitting(pick, size).is_some() {
                    return None;
                }
                Prepared {
                    h: R::resized(&l.h, size),
                    size,
                    allowed: &[WrongSize],
                    what: "wrong size",
                }
            }
            Bad::Foreign { raw } => {
                let h = self.rig.foreign(raw);
                if R::S::INLINE && self.names_live(&h) {
                    return None;
                }
                Prepared {
                    h,
                    size: raw % 4096 + 1,
                    allowed: foreign,
                    what: "foreign",
                }
            }
        })
    }

    /// Runs the misuse `p` now (a free, or a realloc) and checks that it was refused with one
    /// of its errors, changing nothing.
    fn refused(&mut self, p: Prepared<H<R>>, realloc: bool) {
        let Prepared {
            h,
            size,
            allowed,
            what,
        } = p;
        let before = self.stats();
        let got = if realloc {
            // SAFETY: with the `checked` feature the handle is validated before anything is
            // written; a refused realloc leaves everything as it was.
            unsafe {
                self.rig
                    .subject_mut()
                    .realloc(h, size, 16, size.saturating_add(4096))
            }
            .map(|_| ())
        } else {
            // SAFETY: `free_checked` refuses anything but a live block, writing nothing.
            unsafe { self.rig.subject_mut().free_checked(h, size) }
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
            let after = self.rig.subject().stats();
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

    /// Plans the frees of a queued batch: each live allocation freed at most once as it
    /// should be (a second free of it is a double free), and misuses as [`Driver::prepare`]
    /// makes them.
    fn plan(&mut self, frees: &[QueuedFree]) -> Vec<Planned<H<R>>> {
        let mut planned: Vec<Planned<H<R>>> = Vec::with_capacity(frees.len() + 1);
        let freeing = |planned: &mut Vec<Planned<H<R>>>, i: usize, l: Live<H<R>>| {
            let twice = planned.iter().any(|p| p.frees == Some(i));
            planned.push(Planned {
                h: l.h,
                size: l.size,
                frees: (!twice).then_some(i),
            });
        };
        for f in frees {
            match f {
                QueuedFree::Live { pick } => {
                    if let Some(i) = self.pick(*pick) {
                        freeing(&mut planned, i, self.live[i]);
                    }
                }
                QueuedFree::Bad(Bad::WrongSize { pick, size }) => {
                    let (pick, size) = (*pick, size.0);
                    if let Some(i) = self.fitting(pick, size) {
                        // A size the allocation may have: an ordinary free.
                        let l = self.live[i];
                        let h = R::resized(&l.h, size);
                        freeing(&mut planned, i, Live { h, size, ..l });
                    } else if let Some(p) = self.prepare(
                        &Bad::WrongSize {
                            pick,
                            size: Size(size),
                        },
                        false,
                    ) {
                        planned.push(Planned {
                            h: p.h,
                            size: p.size,
                            frees: None,
                        });
                    }
                }
                QueuedFree::Bad(bad) => {
                    let Some(p) = self.prepare(bad, false) else {
                        continue;
                    };
                    if let Bad::Twice { pick } = bad {
                        // The good free first; the bad one is the second.
                        let i = self.pick(*pick).unwrap();
                        freeing(&mut planned, i, self.live[i]);
                    }
                    planned.push(Planned {
                        h: p.h,
                        size: p.size,
                        frees: None,
                    });
                }
            }
        }
        planned
    }

    /// Puts the heap behind a lock, and inside `with_heap` queues the frees of `frees` and
    /// tries the re-entrant calls `reenter` names. While the lock is held, every free must be
    /// queued (`Ok`; `Reentrant` once the ring is full) and the heap untouched; once it is
    /// taken again, the good frees are done and the bad ones refused, counted, with nothing
    /// written.
    fn queued(&mut self, frees: &[QueuedFree], reenter: u8) {
        let planned = self.plan(frees);
        let before = self.stats();
        let live = self.live.clone();
        let probe = self.live.first().copied();
        let geo = self.geo;
        let (queued, drained) = self.rig.shared(|shared| {
            let locked = shared.with_heap(|st, _| {
                assert_eq!(st, before, "the heap changed when it was put behind a lock");
                let queued: Vec<bool> = planned
                    .iter()
                    .enumerate()
                    .map(|(k, p)| {
                        let got = shared.free(p.h, p.size);
                        let want = if k < RING {
                            Ok(())
                        } else {
                            Err(Error::Reentrant)
                        };
                        assert_eq!(got, want, "free {k} of {:?} inside with_heap", p.h);
                        got.is_ok()
                    })
                    .collect();
                untraced(|| reentrant(shared, reenter, probe, geo));
                // Queued, nothing done: no byte of a live allocation written.
                untraced(|| live.iter().for_each(|l| verify::<R>(&l.h, l.size, l.seed)));
                queued
            });
            let queued = locked.expect("the lock is free");
            let inside = shared.with_heap(|st, check| (st, check));
            // `with_heap` does the queued frees first: they were still pending above.
            let (drained, check) = inside.expect("the lock is free");
            check.expect("check() after the queued frees");
            assert_eq!(shared.queued_frees(), queued.iter().filter(|&&q| q).count());
            assert_eq!(shared.stats(), Ok(drained));
            (queued, drained)
        });
        untraced(|| {
            let done = |want: bool| {
                planned
                    .iter()
                    .zip(&queued)
                    .filter(|(p, &q)| q && p.frees.is_some() == want)
                    .count()
            };
            assert_eq!(
                drained.refused_frees - before.refused_frees,
                done(false) as u64,
                "queued misuses refused: {drained:?}"
            );
            assert_eq!(before.live - drained.live, done(true), "queued frees done");
        });
        // Forget what was freed, highest index first (the list is compacted by swapping).
        let mut gone: Vec<usize> = planned
            .iter()
            .zip(&queued)
            .filter_map(|(p, &q)| p.frees.filter(|_| q))
            .collect();
        gone.sort_unstable_by(|a, b| b.cmp(a));
        for i in gone {
            self.forget(i);
        }
        self.after_step();
        self.verify_all();
    }

    /// Runs an extreme request or constructor.
    fn extreme(&mut self, x: &Extreme) {
        let size = match x.size as usize % (EXTREME_SIZES.len() + 4) {
            i if i < EXTREME_SIZES.len() => EXTREME_SIZES[i],
            // The largest size the arithmetic takes, and the ones beside it.
            i => {
                let pad = self.geo.head() + self.geo.granule() - 1;
                (isize::MAX as usize - pad)
                    .wrapping_add(i - EXTREME_SIZES.len())
                    .wrapping_sub(1)
            }
        };
        let align = match x.align as usize % (EXTREME_ALIGNS.len() + 1) {
            i if i < EXTREME_ALIGNS.len() => EXTREME_ALIGNS[i],
            _ => x.salt as usize,
        };
        match x.which % 4 {
            0 => untraced(|| constructors(x.salt)),
            1 => self.extreme_alloc(size, align),
            2 => self.extreme_alloc((x.salt as usize) | 1 << 62, align),
            _ => self.extreme_realloc(x.pick, size, align),
        }
    }

    /// An allocation of `size` bytes aligned to `align`, checked as any other, and, refused,
    /// shown to have changed nothing.
    fn extreme_alloc(&mut self, size: usize, align: usize) {
        let before = self.stats();
        let n = self.live.len();
        self.alloc(size, align);
        if self.live.len() == n {
            assert_eq!(
                self.stats(),
                before,
                "alloc({size}, {align}) refused, yet the heap changed"
            );
        }
        self.after_step();
    }

    /// A resize of a live allocation to `size` bytes (aligned to `align` if it moves), checked
    /// as any other, and, refused, shown to have changed nothing.
    fn extreme_realloc(&mut self, pick: u16, size: usize, align: usize) {
        let Some(i) = self.pick(pick) else { return };
        let l = self.live[i];
        let before = self.stats();
        // Decided by the heap's answer: a resize to the size a block has succeeds in place
        // whatever the alignment (it matters only for a move), and leaves the same entry.
        if !self.realloc(i, size, align) {
            let after = self.stats();
            assert_eq!(
                sans_refusals(after),
                sans_refusals(before),
                "realloc({l:?}, {size}, {align}) refused, yet the heap changed"
            );
        }
        self.after_step();
        self.verify_all();
    }
}

/// Tries the re-entrant calls `reenter` names on `shared`, whose lock this thread holds: each
/// must be refused as `Reentrant` (nothing waits, nothing changes).
fn reentrant<S: SharedHeap>(shared: &S, reenter: u8, probe: Option<Live<S::H>>, geo: Geometry)
where
    S::H: Copy + std::fmt::Debug,
{
    if reenter & 1 != 0 {
        let got = shared.alloc(geo.granule(), 1).map(|_| ());
        assert_eq!(got, Err(Error::Reentrant), "alloc inside with_heap");
    }
    if let Some(l) = probe.filter(|_| reenter & 2 != 0) {
        let got = shared.realloc(l.h, l.size, 16, l.size + 1).map(|_| ());
        assert_eq!(got, Err(Error::Reentrant), "realloc inside with_heap");
    }
    if reenter & 4 != 0 {
        assert_eq!(
            shared.stats(),
            Err(Error::Reentrant),
            "stats inside with_heap"
        );
    }
    if reenter & 8 != 0 {
        let got = shared.with_heap(|_, _| ());
        assert_eq!(got, Err(Error::Reentrant), "with_heap inside with_heap");
    }
}

/// Both heaps' constructors given absurd granules, which they must refuse as `BadGranule`, and
/// the largest granule, which they must take: with it, the requests at the limits are refused
/// with the errors the size arithmetic names, and a detached heap over a range of such granules
/// hands out a block and takes it back.
fn constructors(salt: u64) {
    let own = salt as usize;
    for g in GRANULES.into_iter().chain([own, 1 << (salt % 64)]) {
        let inline_ok = g.is_power_of_two() && (HOST_GRANULE..=MAX_GRANULE).contains(&g);
        let got = InlineHeap::with_granule(g).err();
        assert_eq!(
            got,
            (!inline_ok).then_some(Error::BadGranule),
            "inline granule {g}"
        );
        if !g.is_power_of_two() || g > MAX_GRANULE {
            // Refused before the heap takes an identity: any number of these costs nothing.
            let got = DetachedHeap::growable(g).err();
            assert_eq!(got, Some(Error::BadGranule), "detached granule {g}");
        }
    }
    let inline = InlineHeap::with_granule(MAX_GRANULE).expect("the largest granule");
    let layout = Geometry::inline(MAX_GRANULE).unwrap();
    for (size, align) in limit_requests(salt) {
        let want = layout
            .request(size, align)
            .err()
            .unwrap_or(Error::OutOfMemory);
        let mut heap = InlineHeap::with_granule(MAX_GRANULE).unwrap();
        assert_eq!(
            heap.alloc(size, align).err(),
            Some(want),
            "alloc({size}, {align})"
        );
        assert_eq!(heap.stats(), inline.stats());
    }
    if salt & 1 == 0 {
        return;
    }
    // One detached heap of the largest granule (each takes an identity, so not on every run).
    let mut heap = DetachedHeap::growable(MAX_GRANULE).expect("the largest granule");
    let layout = Geometry::detached(MAX_GRANULE).unwrap();
    heap.add_region(1 << 40, 4 * MAX_GRANULE).unwrap();
    let empty = heap.stats();
    for (size, align) in limit_requests(salt) {
        let want = match layout.request(size, align) {
            Err(e) => Some(e),
            Ok((_, want)) => (want > 4).then_some(Error::OutOfMemory),
        };
        match heap.alloc(size, align) {
            Ok(b) => {
                assert_eq!(want, None, "alloc({size}, {align}) served");
                assert_eq!(b.addr % MAX_GRANULE.max(align), 0);
                assert!(heap.usable_size(&b).unwrap() >= size);
                heap.free(b).unwrap();
            }
            Err(e) => assert_eq!(Some(e), want, "alloc({size}, {align})"),
        }
        heap.check().unwrap();
        let st = heap.stats();
        let whole = (0, 0, empty.free, 1, empty.refused_frees);
        let now = (
            st.live,
            st.in_use,
            st.free,
            st.free_chunks,
            st.refused_frees,
        );
        assert_eq!(now, whole, "alloc({size}, {align}) left {st:?}");
    }
}

/// Requests at the limits of a heap of the largest granule.
fn limit_requests(salt: u64) -> [(usize, usize); 8] {
    [
        (1, 1),
        (MAX_GRANULE, MAX_GRANULE),
        (0, 1),
        (1, 3),
        (usize::MAX, 1),
        (isize::MAX as usize - MAX_GRANULE, 1),
        (1, 1 << 63),
        (salt as usize % (8 * MAX_GRANULE) + 1, 1 << (salt >> 58)),
    ]
}
