//! The address ranges the pool holds from the system, and those it gave back lately: what
//! `free` consults before it reads a single byte at a pointer, so that a stack address, an
//! `mmap` of the program's or a large block given back by its first free is refused by its
//! address instead of read (a bare SIGSEGV where nothing is mapped, garbage followed where
//! something is).
//!
//! The table is kept by the pool's [`Hooks`], which it calls, under its lock, once for every
//! range it obtains, grows, cuts and gives back (large blocks' own regions included), so it is
//! exact without the pool knowing of it. It holds [`LIVE`] ranges: the pool's regions double
//! from 1 MiB to 64 MiB and grow in place, and at most 32 large blocks have regions of their
//! own at a time, so a program needs more only past several GiB; then the table says so
//! ([`Ranges::complete`]) and `free` asks the heap, which walks its list of regions, instead.
//! The ranges given back are kept in a ring of the last [`GONE`], so that a second free of a
//! large block, whose region went back to the system at its first free, is named a double
//! free (a range obtained again over one of them takes it off the ring). The source keeps such
//! a region's mapping a while for reuse (`tagalloc_host::Reuse`), but to the pool, and so to
//! the hooks, it was given back at the free: its range stays on the ring, still mapped, until a
//! region is obtained over it.
//!
//! A free into a thread's cache proves its pointer without the lock: the hooks also publish
//! the live ranges to [`MIRROR`] under a sequence lock (the sequence odd while they change),
//! which [`find_unlocked`] reads with atomic loads and trusts only if the sequence did not move
//! meanwhile; any doubt sends the free to the lock.
//!
//! In checked mode the table also holds each live range's bitmap of live payloads
//! ([`Bitmap`], see `crate::marks`), made, grown, cleared and unmapped by the same hooks.

use core::cell::Cell;
use core::sync::atomic::{fence, AtomicUsize, Ordering};

use tagalloc::Hooks;
use tagalloc::ProofMemo;

use crate::marks::{Bitmap, RegionMarks};

/// A word's bytes.
const W: usize = core::mem::size_of::<usize>();

/// Live ranges the table holds before it gives up on being complete.
const LIVE: usize = 128;
const _: () = assert!(LIVE.is_power_of_two(), "the hints are masked by LIVE - 1");
/// Ranges given back that are remembered.
const GONE: usize = 16;

/// Whether `lo <= addr < end`, in one compare (`lo <= end`; an empty slot, `(0, 0)`, holds
/// nothing).
#[inline(always)]
fn holds(lo: usize, end: usize, addr: usize) -> bool {
    addr.wrapping_sub(lo) < end.wrapping_sub(lo)
}

/// The pool's ranges (see the module docs).
///
/// Invariants: `live[..count]` are the ranges the pool holds from its source, as `(base, end)`,
/// each as grown and cut, none twice; unless `incomplete`, they are all of them; the slots past
/// `count` are `(0, 0)`, which hold no address. `gone` holds ranges given back since, none
/// overlapping a live one. `last` is one of `live[..count]`, as `(base, end - base)`, or
/// `(0, 0)`. While `marking` (checked mode), `marks[i]` is `live[i]`'s bitmap, covering the
/// range as grown and cut, or [`Bitmap::NONE`] if it could not be mapped; otherwise every
/// slot is [`Bitmap::NONE`].
pub(crate) struct Ranges {
    live: [(usize, usize); LIVE],
    marks: [Bitmap; LIVE],
    marking: bool,
    count: usize,
    incomplete: bool,
    gone: [(usize, usize); GONE],
    next_gone: usize,
    /// The range [`Ranges::find`] found last, as a copy `(base, len)` (two loads, where an
    /// index would need the slot's words read through it as well); emptied by every change to
    /// `live`.
    last: Cell<(usize, usize)>,
}

impl Ranges {
    /// No range yet.
    pub(crate) const fn new() -> Self {
        Ranges {
            live: [(0, 0); LIVE],
            marks: [Bitmap::NONE; LIVE],
            marking: false,
            count: 0,
            incomplete: false,
            gone: [(0, 0); GONE],
            next_gone: 0,
            last: Cell::new((0, 0)),
        }
    }

    /// The live range holding `addr`, as `(base, len)`: the one found last, else the first
    /// that holds it (then remembered), as frees of one region tend to come together. The
    /// range found last is tested in one compare (empty, it holds nothing).
    #[inline]
    pub(crate) fn find(&self, addr: usize) -> Option<(usize, usize)> {
        let (base, len) = self.last.get();
        if addr.wrapping_sub(base) < len {
            return Some((base, len));
        }
        self.find_scan(addr)
    }

    /// [`Ranges::find`] past its hint: the first range that holds `addr`, then remembered.
    #[cold]
    #[inline(never)]
    fn find_scan(&self, addr: usize) -> Option<(usize, usize)> {
        let live = self.live.get(..self.count).unwrap_or(&[]);
        let &(base, end) = live.iter().find(|&&(base, end)| holds(base, end, addr))?;
        self.last.set((base, end - base));
        Some((base, end - base))
    }

    /// Whether every live range is in the table (else a miss proves nothing).
    #[inline]
    pub(crate) fn complete(&self) -> bool {
        !self.incomplete
    }

    /// Whether `addr` lies in a range given back lately (and not obtained again since).
    pub(crate) fn given_back(&self, addr: usize) -> bool {
        self.gone
            .iter()
            .any(|&(base, end)| addr >= base && addr < end)
    }

    /// The index of the live range starting at `base`.
    fn index(&self, base: usize) -> Option<usize> {
        self.live
            .get(..self.count)
            .unwrap_or(&[])
            .iter()
            .position(|&(b, _)| b == base)
    }

    /// Whether checked mode's bitmaps are kept ([`Ranges::start_marking`]).
    #[inline]
    pub(crate) fn marking(&self) -> bool {
        self.marking
    }

    /// Starts keeping a bitmap of live payloads for every range, those held now and those
    /// obtained from now on (checked mode, once, under the lock); whether it started now (then
    /// the caller marks the blocks already live: [`Ranges::mark`] for each).
    pub(crate) fn start_marking(&mut self) -> bool {
        if self.marking {
            return false;
        }
        self.marking = true;
        for (m, &(base, end)) in self.marks.iter_mut().zip(&self.live).take(self.count) {
            *m = Bitmap::map(end.wrapping_sub(base));
        }
        true
    }

    /// The range holding `addr` with its bitmap, if it has one, as `(base, len, marks)`.
    #[inline]
    pub(crate) fn find_marked(&self, addr: usize) -> Option<(usize, usize, RegionMarks)> {
        let (i, &(base, end)) = self
            .live
            .iter()
            .take(self.count)
            .enumerate()
            .find(|&(_, &(base, end))| holds(base, end, addr))?;
        let bits = *self.marks.get(i)?;
        bits.exists()
            .then(|| (base, end.wrapping_sub(base), RegionMarks { base, bits }))
    }

    /// Marks the payload `addr`, just handed out, live (in checked mode, if its range has a
    /// bitmap).
    #[inline]
    pub(crate) fn mark(&self, addr: usize) {
        if let Some((_, _, m)) = self.find_marked(addr) {
            m.bits.set(m.base, addr);
        }
    }

    /// Marks the payload `addr`, about to be freed or just moved, no longer live.
    #[inline]
    pub(crate) fn unmark(&self, addr: usize) {
        if let Some((_, _, m)) = self.find_marked(addr) {
            m.bits.clear(m.base, addr);
        }
    }

    /// Takes `base..end`, in use again, off the ring of ranges given back.
    fn reuse(&mut self, base: usize, end: usize) {
        for g in &mut self.gone {
            if g.0 < end && base < g.1 {
                *g = (0, 0);
            }
        }
    }
}

/// The live ranges, for readers without the lock (see the module docs): written only by the
/// hooks, under the pool's lock, so one writer at a time.
///
/// Invariant (between writes, `seq` even): `live[..count]` are the table's live ranges, each as
/// `(base + W, end)`, the addresses whose preceding word lies in the range (a payload's, whose
/// tag word is then readable); the slots past `count` are `(0, 0)`, which hold no address.
pub(crate) struct Mirror {
    seq: AtomicUsize,
    count: AtomicUsize,
    live: [(AtomicUsize, AtomicUsize); LIVE],
    /// The index in `live` that [`find_unlocked`] found last, tried first (a hint: any value
    /// is safe). Written by readers only when it changes, so a program whose frees stay in
    /// one region reads it and never writes it.
    hint: AtomicUsize,
}

/// The one pool's mirror (the library has one pool).
pub(crate) static MIRROR: Mirror = Mirror {
    seq: AtomicUsize::new(0),
    count: AtomicUsize::new(0),
    live: [const { (AtomicUsize::new(0), AtomicUsize::new(0)) }; LIVE],
    hint: AtomicUsize::new(0),
};

impl Mirror {
    /// Copies `live` in (the writer's side of the sequence lock), emptying the slots it no
    /// longer uses.
    fn publish(&self, live: &[(usize, usize)]) {
        let s = self.seq.load(Ordering::Relaxed);
        self.seq.store(s.wrapping_add(1), Ordering::Relaxed);
        fence(Ordering::Release);
        let old = self.count.load(Ordering::Relaxed);
        for (i, slot) in self.live.iter().enumerate().take(old.max(live.len())) {
            let (lo, end) = live.get(i).map_or((0, 0), |&(base, end)| (base + W, end));
            slot.0.store(lo, Ordering::Relaxed);
            slot.1.store(end, Ordering::Relaxed);
        }
        self.count.store(live.len(), Ordering::Relaxed);
        self.seq.store(s.wrapping_add(2), Ordering::Release);
    }
}

/// How many regions a thread's memo remembers: the last ones it proved pointers in.
const REMEMBERED: usize = 4;

/// [`find_unlocked`] through the slots this thread proved in last (`memo`, as
/// [`find_and_remember`] leaves it: `[seq, lo, len, lo2, len2, ...]`, [`REMEMBERED`] slots
/// `lo..lo + len` read under the even sequence `seq`, the latest first, or empty): while the
/// sequence is still `seq` the ranges have not changed since, so those slots still hold, and a
/// pointer in one is proven with one shared load (the sequence) and a compare or two per slot,
/// on words of its own thread. Several, as a program's frees spread over its regions, and a miss
/// scans the shared table, whose hint every thread writes (figures: docs/measurements.md,
/// "Four remembered regions").
#[inline(always)]
pub(crate) fn find_remembered(addr: usize, memo: &ProofMemo) -> Option<usize> {
    let same = MIRROR.seq.load(Ordering::Acquire) == memo[0].get();
    // An empty slot (`len == 0`) holds nothing.
    let slot = |k: usize| {
        let off = addr.wrapping_sub(memo[1 + 2 * k].get());
        let len = memo[2 + 2 * k].get();
        (off < len).then(|| len - off)
    };
    let room = match same {
        true => slot(0)
            .or_else(|| slot(1))
            .or_else(|| slot(2))
            .or_else(|| slot(3))
            .unwrap_or_else(|| find_and_remember(addr, memo)),
        false => find_and_remember(addr, memo),
    };
    // A range holding `addr` has room from it on: 0 is none, a plain word, so that the paths
    // above do not each carry a flag.
    (room != 0).then_some(room)
}

/// [`find_remembered`] past its memo: [`find_unlocked`] (0 for none), its slot remembered
/// first, and the slots remembered before it after it if the sequence has not changed since
/// (the oldest forgotten).
#[cold]
#[inline(never)]
fn find_and_remember(addr: usize, memo: &ProofMemo) -> usize {
    let Some((seq, lo, end)) = find_slot(addr) else {
        return 0;
    };
    let old = memo.each_ref().map(Cell::get);
    let mut new = [0; 1 + 2 * REMEMBERED];
    new[0] = seq;
    new[1] = lo;
    new[2] = end - lo;
    if old[0] == seq {
        new[3..].copy_from_slice(&old[1..old.len() - 2]);
    }
    memo.iter().zip(new).for_each(|(w, v)| w.set(v));
    end - addr
}

/// The bytes from `addr` to the end of the live range holding it and the word before it (so
/// the word before `addr` and everything up to the end may be read), read without the lock;
/// `None` when none does or the ranges changed meanwhile (then the caller asks under the
/// lock).
#[inline]
pub(crate) fn find_unlocked(addr: usize) -> Option<usize> {
    find_slot(addr).map(|(_, _, end)| end - addr)
}

/// [`find_unlocked`] as the sequence it read (even) and the mirror's slot `(lo, end)`. The
/// range found last is tried first, in one compare: the mirror lists the regions oldest
/// first, while most frees fall in the newest, largest ones, which a scan from the front
/// reaches last.
#[inline(always)]
fn find_slot(addr: usize) -> Option<(usize, usize, usize)> {
    let m = &MIRROR;
    let s1 = m.seq.load(Ordering::Acquire);
    // Any index is in bounds once masked (`LIVE` is a power of two); a torn or stale slot is
    // caught by the sequence check below.
    let slot = &m.live[m.hint.load(Ordering::Relaxed) & (LIVE - 1)];
    let (lo, end) = (
        slot.0.load(Ordering::Relaxed),
        slot.1.load(Ordering::Relaxed),
    );
    let (lo, end) = if holds(lo, end, addr) {
        (lo, end)
    } else {
        scan_unlocked(m, addr)?
    };
    fence(Ordering::Acquire);
    // An odd sequence was a write in progress: what was read may be torn.
    (s1 & 1 == 0 && m.seq.load(Ordering::Relaxed) == s1).then_some((s1, lo, end))
}

/// [`find_unlocked`] past its hint: the first slot that holds `addr`, then remembered (read
/// inside the caller's sequence check).
#[cold]
#[inline(never)]
fn scan_unlocked(m: &Mirror, addr: usize) -> Option<(usize, usize)> {
    let n = m.count.load(Ordering::Relaxed).min(LIVE);
    let (i, lo, end) = m.live.iter().take(n).enumerate().find_map(|(i, slot)| {
        let (lo, end) = (
            slot.0.load(Ordering::Relaxed),
            slot.1.load(Ordering::Relaxed),
        );
        holds(lo, end, addr).then_some((i, lo, end))
    })?;
    m.hint.store(i, Ordering::Relaxed);
    Some((lo, end))
}

impl Ranges {
    /// After every change to `live`: forgets the range found last and publishes the live
    /// ranges to [`MIRROR`].
    fn mirror(&self) {
        self.last.set((0, 0));
        MIRROR.publish(self.live.get(..self.count).unwrap_or(&[]));
    }
}

impl Hooks for Ranges {
    fn obtained(&mut self, base: usize, len: usize) {
        let end = base.saturating_add(len);
        self.reuse(base, end);
        match self.live.get_mut(self.count) {
            Some(slot) => {
                *slot = (base, end);
                if self.marking {
                    if let Some(m) = self.marks.get_mut(self.count) {
                        *m = Bitmap::map(len);
                    }
                }
                self.count += 1;
            }
            None => self.incomplete = true,
        }
        self.mirror();
    }

    fn grown(&mut self, base: usize, at: usize, len: usize) {
        let end = at.saturating_add(len);
        self.reuse(at, end);
        if let Some(i) = self.index(base) {
            if let Some(r) = self.live.get_mut(i) {
                r.1 = end;
            }
            if let Some(m) = self.marks.get_mut(i) {
                m.grow(end.wrapping_sub(base));
            }
        }
        self.mirror();
    }

    fn given_back(&mut self, base: usize, len: usize) {
        if let Some(i) = self.index(base) {
            if let Some(m) = self.marks.get_mut(i) {
                m.unmap();
            }
            self.count -= 1;
            self.live.swap(i, self.count);
            self.marks.swap(i, self.count);
            if let Some(gone) = self.live.get_mut(self.count) {
                *gone = (0, 0);
            }
        }
        if let Some(g) = self.gone.get_mut(self.next_gone) {
            *g = (base, base.saturating_add(len));
        }
        self.next_gone = (self.next_gone + 1) % GONE;
        self.mirror();
    }

    fn shrunk(&mut self, base: usize, at: usize, len: usize) {
        if let Some(i) = self.index(base) {
            if let Some(r) = self.live.get_mut(i) {
                r.1 = at;
            }
            if let Some(m) = self.marks.get(i) {
                m.clear_range(base, at, at.saturating_add(len));
            }
        }
        if let Some(g) = self.gone.get_mut(self.next_gone) {
            *g = (at, at.saturating_add(len));
        }
        self.next_gone = (self.next_gone + 1) % GONE;
        self.mirror();
    }
}
