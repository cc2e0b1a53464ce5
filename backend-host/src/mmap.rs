//! Regions from the operating system: anonymous private `mmap` mappings, given back with
//! `munmap`, optionally page-locked (`mlock`), on huge pages, and pre-faulted.
//!
//! **How refusals are reported.** The core's [`Error`] is a fieldless enum shared by every
//! heap and source, so a refused system call comes back to the pool as
//! [`Error::OutOfMemory`], which is what it means to the pool: this source has nothing more to
//! give right now (after a trim the pool retries, and giving regions back also gives back the
//! locked-page budget that a refused `mlock` ran out of). The details are kept in the source,
//! as plain numbers written without allocating (this runs inside the global allocator):
//! [`MmapSource::last_error`] returns a [`SourceError`] naming the call, the bytes asked, the
//! error number and, for a refused page lock, the `RLIMIT_MEMLOCK` in force; its `Display`
//! says what to do. A pool's source is read with `Pool::source()` or, shared,
//! `SharedPool::with_pool(|p| p.source().last_error())`.
//!
//! **Reuse.** With [`MmapOptions::reuse`], mappings given back are kept a while instead of
//! unmapped, and a later region is cut from one of them, the rest kept (see [`Reuse`]): a
//! program that frees a large block and allocates another then neither maps, faults in nor
//! unmaps it again.

use core::fmt;
use core::ptr::{null_mut, NonNull};

use tagalloc::{Error, RegionSource};

use crate::os;

/// How an [`MmapSource`] maps its regions. A small builder of `const` setters.
///
/// # Examples
///
/// ```
/// use tagalloc_host::{MmapOptions, MmapSource};
///
/// // Pinned, pre-faulted regions (e.g. for DMA or to register with a device).
/// const PINNED: MmapSource = MmapOptions::new().locked(true).populate(true).source();
/// assert!(PINNED.options().is_locked());
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MmapOptions {
    locked: bool,
    huge_pages: bool,
    populate: bool,
    reuse: Reuse,
}

/// The most ranges a source keeps for reuse ([`Reuse::entries`] is capped to it).
pub const REUSE_SLOTS: usize = 16;

/// How an [`MmapSource`] keeps mappings given back for reuse (see [`MmapOptions::reuse`]).
///
/// A mapping given back (a large block's own region at its free, a wholly free region at a
/// trim) of at most `bytes` is kept, with the time it was given back, instead of unmapped; one
/// that ends where a kept range starts, or starts where one ends, is joined to it (the older
/// time kept). A region obtained later takes the kept range closest in size: the smallest that
/// holds it, whose head it gets, the rest (its tail) staying kept as a range of its own, with
/// its time (no system call: a page-aligned part of a mapping can later be unmapped or
/// `mremap`ped on its own); or else the largest, grown with `mremap(MREMAP_MAYMOVE)`, which
/// moves the pages it has without copying or faulting them, so only the new tail is faulted in.
///
/// A kept range goes back to the system when it has been kept `delay_ms` milliseconds, at the
/// next call that obtains or gives back a region (the clock is read only there; there is no
/// thread), when more than `entries` or more than `bytes` are kept (the oldest first; past the
/// bytes only, it loses just its end where that is enough), and on
/// every trim ([`tagalloc::RegionSource::purge`]). Besides, the bytes kept never exceed the most
/// the source has ever had handed out at once less what it has handed out now (kept + handed
/// out ≤ the peak handed out): where a region obtained or grown would pass that, the oldest
/// kept ranges are unmapped (the last one only as far as needed, from its end). So the source
/// never has more mapped than a source without reuse has had at its peak, and a program's
/// peak resident memory does not rise with reuse.
///
/// The policy follows what glibc, jemalloc and mimalloc do with freed large blocks: glibc raises
/// its mmap threshold to the size of a freed mapped chunk (up to 32 MiB,
/// `DEFAULT_MMAP_THRESHOLD_MAX`) and keeps such blocks in its heap until a trim; jemalloc returns
/// unused dirty pages over `opt.dirty_decay_ms` (10 s); mimalloc purges them after
/// `purge_delay` (10 ms). [`Reuse::DEFAULT`] keeps up to 16 ranges and 64 MiB (glibc's largest
/// trim threshold, twice its largest mmap threshold) for 100 ms: long enough for a program that
/// frees and allocates large blocks in turn (malloc-large) to reuse them, short enough that
/// mappings kept past a program's phase do not raise its peak resident set much, since a kept
/// mapping is resident whole (figures for 10 ms, 100 ms and 1 s: docs/measurements.md, "The
/// programs bench before and after issue 48"). 16 rather than 8 mappings: the
/// tails kept make more ranges than blocks freed (a range costs 24 bytes of the source and a
/// look at each obtain and give-back); in a simulation of mimalloc-bench's malloc-large the
/// byte bound, not the count, then binds.
///
/// Reuse is off for huge-page sources (a moved mapping could lose its huge-page alignment).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Reuse {
    /// The most ranges kept (at most [`REUSE_SLOTS`]); 0: none (reuse off).
    pub entries: usize,
    /// The most bytes kept; a mapping larger than this is unmapped at once.
    pub bytes: usize,
    /// How long a mapping is kept, in milliseconds of the coarse monotonic clock.
    pub delay_ms: u64,
}

impl Reuse {
    /// Nothing kept: every mapping given back is unmapped at once.
    pub const OFF: Reuse = Reuse {
        entries: 0,
        bytes: 0,
        delay_ms: 0,
    };

    /// Up to 16 ranges and 64 MiB, each for 100 ms (see the type's docs).
    pub const DEFAULT: Reuse = Reuse {
        entries: REUSE_SLOTS,
        bytes: 64 << 20,
        delay_ms: 100,
    };

    /// Whether anything is kept.
    pub const fn is_on(&self) -> bool {
        self.entries > 0 && self.bytes > 0
    }
}

/// What an [`MmapSource`]'s reuse did (all zeros without it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReuseStats {
    /// Mappings kept when given back.
    pub kept: u64,
    /// Regions obtained from a kept mapping instead of a new one.
    pub reused: u64,
    /// Of those, the ones whose mapping was grown (`mremap`) to fit.
    pub grown: u64,
    /// Of those, the ones cut from the head of a larger kept range (the rest stays kept).
    pub cut: u64,
    /// Mappings given back that were joined to a kept range next to them.
    pub joined: u64,
    /// Of the grown, the joined ranges that `mremap` could not grow (they span mappings),
    /// moved to a fresh mapping instead.
    pub moved: u64,
    /// Kept mappings unmapped after [`Reuse::delay_ms`].
    pub expired: u64,
    /// Kept ranges unmapped to keep within [`Reuse::entries`] and [`Reuse::bytes`] (past the
    /// bytes only, the oldest loses just its end where that is enough).
    pub evicted: u64,
    /// Kept ranges unmapped, wholly or from their end, to keep the bytes kept plus those handed
    /// out within the most ever handed out at once.
    pub over_peak: u64,
    /// Kept mappings unmapped by [`tagalloc::RegionSource::purge`] (a trim).
    pub purged: u64,
}

impl MmapOptions {
    /// Plain anonymous mappings, faulted in on first touch, pageable.
    pub const fn new() -> Self {
        MmapOptions {
            locked: false,
            huge_pages: false,
            populate: false,
            reuse: Reuse::OFF,
        }
    }

    /// Keep mappings given back for reuse, as `reuse` says (see [`Reuse`]); [`Reuse::OFF`],
    /// the default, unmaps them at once.
    ///
    /// ```
    /// use tagalloc::RegionSource;
    /// use tagalloc_host::{MmapOptions, Reuse};
    ///
    /// let mut src = MmapOptions::new().reuse(Reuse::DEFAULT).source();
    /// let (base, len) = src.obtain(5 << 20).unwrap();
    /// // SAFETY: the region came from `src` and nothing uses it.
    /// unsafe { src.give_back(base, len) };
    /// assert_eq!((src.cached(), src.mapped()), (5 << 20, 5 << 20)); // kept, still mapped
    /// let (again, len) = src.obtain(4 << 20).unwrap(); // its head: no new mapping
    /// assert_eq!((again, len, src.maps(), src.cached()), (base, 4 << 20, 1, 1 << 20));
    /// // SAFETY: as above.
    /// unsafe { src.give_back(again, len) }; // joined to the tail kept
    /// assert_eq!((src.purge(), src.mapped()), (5 << 20, 0));
    /// ```
    pub const fn reuse(self, reuse: Reuse) -> Self {
        MmapOptions { reuse, ..self }
    }

    /// How mappings given back are kept for reuse.
    pub const fn reuse_policy(&self) -> Reuse {
        self.reuse
    }

    /// Lock every region in memory (`mlock`): it is faulted in at once and never paged out.
    /// The kernel refuses past `RLIMIT_MEMLOCK` (`ulimit -l`) unless the process has
    /// `CAP_IPC_LOCK`; pages of a locked region are never released on trim.
    pub const fn locked(self, on: bool) -> Self {
        MmapOptions { locked: on, ..self }
    }

    /// Back regions with huge pages: `MAP_HUGETLB` (pages reserved in
    /// `/proc/sys/vm/nr_hugepages`), and where that is refused an ordinary mapping aligned to
    /// the huge-page size with `madvise(MADV_HUGEPAGE)` (transparent huge pages). The source's
    /// granularity becomes the huge-page size. [`MmapSource::huge_pages`] says which was used.
    pub const fn huge_pages(self, on: bool) -> Self {
        MmapOptions {
            huge_pages: on,
            ..self
        }
    }

    /// Fault every page in when a region is mapped or grown (`MAP_POPULATE`,
    /// `MADV_POPULATE_WRITE`), so the first touch does not.
    pub const fn populate(self, on: bool) -> Self {
        MmapOptions {
            populate: on,
            ..self
        }
    }

    /// Whether regions are page-locked.
    pub const fn is_locked(&self) -> bool {
        self.locked
    }

    /// Whether regions use huge pages.
    pub const fn is_huge(&self) -> bool {
        self.huge_pages
    }

    /// Whether regions are pre-faulted.
    pub const fn is_populated(&self) -> bool {
        self.populate
    }

    /// A source with these options.
    pub const fn source(self) -> MmapSource {
        MmapSource::with_options(self)
    }
}

/// The system call a [`SourceError`] is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Call {
    /// `mmap` of a new region.
    Map,
    /// `mlock` of a region (or the locked growth of one).
    Lock,
    /// `mremap` growing a region in place.
    Remap,
    /// `munmap` of a region or its tail.
    Unmap,
    /// `madvise(MADV_DONTNEED)` releasing pages.
    Release,
    /// `madvise(MADV_POPULATE_WRITE)` faulting pages in.
    Populate,
}

/// A system call the source made that failed: which, for how many bytes, and why.
///
/// # Examples
///
/// ```
/// use tagalloc_host::{Call, SourceError};
///
/// let e = SourceError { call: Call::Lock, bytes: 1 << 20, errno: libc::ENOMEM, memlock_limit: Some(65536) };
/// let msg = e.to_string();
/// assert!(msg.contains("RLIMIT_MEMLOCK") && msg.contains("1048576 bytes"), "{msg}");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SourceError {
    /// The call that failed.
    pub call: Call,
    /// The bytes it was asked to map, lock, add, unmap or release.
    pub bytes: usize,
    /// The error number it set.
    pub errno: i32,
    /// For [`Call::Lock`]: the soft `RLIMIT_MEMLOCK` in bytes when it failed (`None`:
    /// unlimited).
    pub memlock_limit: Option<u64>,
}

impl fmt::Display for SourceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.call {
            Call::Map => "mmap",
            Call::Lock => "mlock",
            Call::Remap => "mremap (growth in place)",
            Call::Unmap => "munmap",
            Call::Release => "madvise(MADV_DONTNEED)",
            Call::Populate => "madvise(MADV_POPULATE_WRITE)",
        };
        let why = std::io::Error::from_raw_os_error(self.errno);
        write!(f, "{what} of {} bytes failed: {why}", self.bytes)?;
        if self.call == Call::Lock {
            match self.memlock_limit {
                Some(limit) => write!(
                    f,
                    "; RLIMIT_MEMLOCK is {limit} bytes and the process's locked pages may not \
                     exceed it: raise it (`ulimit -l`, or LimitMEMLOCK= for a service), give \
                     the process CAP_IPC_LOCK, or use a source without page locking"
                )?,
                None => write!(
                    f,
                    "; RLIMIT_MEMLOCK is unlimited, so the system itself refused to lock the \
                     pages (not enough memory that can be locked)"
                )?,
            }
        }
        Ok(())
    }
}

impl std::error::Error for SourceError {}

/// Which huge pages a source's regions got.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HugePages {
    /// Regions mapped with `MAP_HUGETLB` (reserved huge pages).
    pub hugetlb: u64,
    /// Regions for which `MAP_HUGETLB` was refused and that were mapped huge-page-aligned with
    /// `madvise(MADV_HUGEPAGE)` instead (the fallback).
    pub transparent: u64,
    /// Why `MAP_HUGETLB` was last refused (an error number; `ENOMEM` when no huge pages are
    /// reserved).
    pub hugetlb_errno: Option<i32>,
    /// Regions whose `madvise(MADV_HUGEPAGE)` was refused too (e.g. a kernel without
    /// transparent huge pages): they use ordinary pages.
    pub advice_refused: u64,
}

/// Anonymous private `mmap` regions (see the module docs and [`MmapOptions`]).
///
/// Every region is one mapping, from [`RegionSource::obtain`] until it is given back: it grows
/// with `mremap` without `MREMAP_MAYMOVE` (the kernel extends the mapping in place or refuses,
/// so the region stays one mapping reachable from its base), its tail goes with `munmap`, and
/// its free pages with `madvise(MADV_DONTNEED)` (they read as zeros afterwards). The
/// granularity (every length and base alignment) is the page size, or the huge-page size with
/// huge pages.
///
/// Every failed call is an error value, never a panic; none of the methods allocates.
///
/// # Examples
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use tagalloc::{Growth, InlineHeap, Policy, Pool};
/// use tagalloc_host::MmapSource;
///
/// let policy = Policy::new()
///     .growth(Growth::Doubling { initial: 1 << 20, cap: 16 << 20 })
///     .limit(64 << 20);
/// let mut pool = Pool::new(InlineHeap::new(), MmapSource::new(), policy);
/// let p = pool.alloc(100_000, 64)?;
/// // SAFETY: a live block of 100 000 bytes, freed once.
/// unsafe {
///     p.as_ptr().write_bytes(7, 100_000);
///     pool.free(p, 100_000)?;
/// }
/// assert_eq!(pool.trim().regions, 1); // munmapped
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct MmapSource {
    options: MmapOptions,
    last_error: Option<SourceError>,
    huge: HugePages,
    /// Bytes mapped now (regions obtained and grown, less those given back and cut), the
    /// mappings kept for reuse included.
    mapped: usize,
    /// Mappings made (`mmap` of a region).
    maps: u64,
    /// Mappings kept for reuse, as `(base, len, when)`; `len == 0`: an empty slot.
    kept: [(usize, usize, u64); REUSE_SLOTS],
    /// The bytes of `kept`.
    cached: usize,
    /// The most bytes ever handed out at once (`mapped - cached`, after each region obtained or
    /// grown): the bound of `mapped` (see [`Reuse`]).
    peak_out: usize,
    reuse_stats: ReuseStats,
    /// The clock [`Reuse::delay_ms`] is measured with, in milliseconds.
    clock: fn() -> u64,
}

impl Default for MmapSource {
    fn default() -> Self {
        Self::new()
    }
}

impl MmapSource {
    /// Plain anonymous mappings (see [`MmapOptions::new`]).
    pub const fn new() -> Self {
        Self::with_options(MmapOptions::new())
    }

    /// A source with `options`.
    pub const fn with_options(options: MmapOptions) -> Self {
        MmapSource {
            options,
            last_error: None,
            huge: HugePages {
                hugetlb: 0,
                transparent: 0,
                hugetlb_errno: None,
                advice_refused: 0,
            },
            mapped: 0,
            maps: 0,
            kept: [(0, 0, 0); REUSE_SLOTS],
            cached: 0,
            peak_out: 0,
            reuse_stats: ReuseStats {
                kept: 0,
                reused: 0,
                grown: 0,
                cut: 0,
                joined: 0,
                moved: 0,
                expired: 0,
                evicted: 0,
                over_peak: 0,
                purged: 0,
            },
            clock: os::coarse_ms,
        }
    }

    /// This source with `clock` (milliseconds, never going back) instead of the coarse
    /// monotonic clock for [`Reuse::delay_ms`]: for tests, which move time themselves.
    pub const fn with_clock(self, clock: fn() -> u64) -> Self {
        let mut s = self;
        s.clock = clock;
        s
    }

    /// The options.
    pub const fn options(&self) -> &MmapOptions {
        &self.options
    }

    /// The last system call that failed, with the details; `None` if none has. A failed growth
    /// in place (the next addresses are taken, which is routine) counts too.
    pub fn last_error(&self) -> Option<SourceError> {
        self.last_error
    }

    /// Which huge pages the regions got (all zeros without huge pages).
    pub fn huge_pages(&self) -> HugePages {
        self.huge
    }

    /// Bytes mapped now, the mappings kept for reuse included.
    pub fn mapped(&self) -> usize {
        self.mapped
    }

    /// Mappings made for regions (`mmap` calls that succeeded; a region cut from a kept mapping
    /// is not one).
    pub fn maps(&self) -> u64 {
        self.maps
    }

    /// What reuse did.
    pub fn reuse_stats(&self) -> ReuseStats {
        self.reuse_stats
    }

    /// Whether mappings given back are kept (see [`Reuse`]).
    fn reusing(&self) -> bool {
        self.options.reuse.is_on() && !self.options.huge_pages
    }

    /// Unmaps the kept mapping in slot `i`, if any; its bytes.
    fn drop_kept(&mut self, i: usize) -> usize {
        let Some(&(base, len, _)) = self.kept.get(i) else {
            return 0;
        };
        if len == 0 {
            return 0;
        }
        if let Some(slot) = self.kept.get_mut(i) {
            *slot = (0, 0, 0);
        }
        self.cached -= len;
        // SAFETY: a kept mapping of this source, which nothing uses (the pool gave it back) and
        // which is no longer in `kept`.
        if unsafe { self.unmap(base, len) } {
            self.mapped -= len;
        }
        len
    }

    /// Unmaps the kept mappings older than the delay at `now`.
    fn expire(&mut self, now: u64) {
        let delay = self.options.reuse.delay_ms;
        for i in 0..REUSE_SLOTS {
            if matches!(self.kept.get(i), Some(&(_, len, at)) if len > 0 && now.saturating_sub(at) >= delay)
            {
                self.drop_kept(i);
                self.reuse_stats.expired += 1;
            }
        }
    }

    /// The slot of the oldest kept mapping, if any.
    fn oldest(&self) -> Option<usize> {
        (0..REUSE_SLOTS)
            .filter(|&i| self.kept.get(i).is_some_and(|k| k.1 > 0))
            .min_by_key(|&i| self.kept.get(i).map_or(0, |k| k.2))
    }

    /// Keeps the mapping `base..base + len` for reuse, if reuse is on and it fits the bounds,
    /// joined to the kept ranges it touches; whether it did (else the caller unmaps it).
    fn keep(&mut self, base: usize, len: usize) -> bool {
        let reuse = self.options.reuse;
        if !self.reusing() || len > reuse.bytes {
            return false;
        }
        let now = (self.clock)();
        self.expire(now);
        // Join: a kept range ending at `base` or starting at `end` (at most one of each, as
        // kept ranges never touch) leaves its slot and becomes part of this one.
        let (mut base, mut end, mut when) = (base, base + len, now);
        for k in &mut self.kept {
            let (kb, kl, kw) = *k;
            if kl > 0 && (kb + kl == base || kb == end) && end - base + kl <= reuse.bytes {
                base = base.min(kb);
                end = end.max(kb + kl);
                when = when.min(kw);
                *k = (0, 0, 0);
                self.cached -= kl;
                self.reuse_stats.joined += 1;
            }
        }
        let len = end - base;
        let limit = reuse.entries.min(REUSE_SLOTS);
        loop {
            let count = self.kept.iter().filter(|k| k.1 > 0).count();
            let excess = (self.cached + len).saturating_sub(reuse.bytes);
            if count < limit && excess == 0 {
                break;
            }
            let Some(i) = self.oldest() else { break };
            self.reuse_stats.evicted += 1;
            // Past the bytes only: the oldest range loses its end, if that is enough.
            if count < limit && self.cut_end(i, excess) {
                break;
            }
            self.drop_kept(i);
        }
        // A free slot is left: the loop frees one, or there are none kept at all.
        if let Some(slot) = self.kept.iter_mut().find(|k| k.1 == 0) {
            *slot = (base, len, when);
            self.cached += len;
            self.reuse_stats.kept += 1;
        } else {
            // Unreachable (`limit <= REUSE_SLOTS`); the joined ranges and this one go.
            // SAFETY: ranges of this source's kept mappings and the one given back, which
            // nothing uses, no longer in `kept`.
            if unsafe { self.unmap(base, len) } {
                self.mapped -= len;
            }
        }
        true
    }

    /// Records the bytes handed out now as the peak if they are, and unmaps kept bytes (the
    /// oldest ranges first, the last from its end only if that is enough) until the bytes kept plus
    /// those handed out are within the peak (see [`Reuse`]). Called after every region obtained or
    /// grown, the only calls that add to what is mapped.
    fn bound_to_peak(&mut self) {
        let out = self.mapped - self.cached;
        self.peak_out = self.peak_out.max(out);
        while self.mapped > self.peak_out {
            let excess = self.mapped - self.peak_out;
            let Some(i) = self.oldest() else { return };
            self.reuse_stats.over_peak += 1;
            if !self.cut_end(i, excess) {
                self.drop_kept(i);
            }
        }
    }

    /// Unmaps the last `bytes` of the kept range in slot `i` if it is longer; whether it did.
    fn cut_end(&mut self, i: usize, bytes: usize) -> bool {
        let Some(&(base, len, when)) = self.kept.get(i) else {
            return false;
        };
        if len <= bytes {
            return false;
        }
        // `bytes` and `len` are multiples of the granularity (so are all lengths here).
        // SAFETY: the end of a kept range of this source, which nothing uses.
        if !unsafe { self.unmap(base + len - bytes, bytes) } {
            return false;
        }
        self.mapped -= bytes;
        self.cached -= bytes;
        if let Some(slot) = self.kept.get_mut(i) {
            *slot = (base, len - bytes, when);
        }
        true
    }

    /// A region of `len` bytes (a multiple of the granularity) cut from a kept range: the head
    /// of the smallest that holds it, its tail staying kept, else the largest, grown in place or
    /// moved (`mremap(MREMAP_MAYMOVE)`: its pages move without being copied or faulted). `None`
    /// when nothing is kept, or the kept range could not be grown (then it stays kept: a range
    /// joined from two mappings cannot be `mremap`ped whole, and fails with `EFAULT`).
    fn reuse_kept(&mut self, len: usize) -> Option<(NonNull<u8>, usize)> {
        if self.cached == 0 {
            return None;
        }
        self.expire((self.clock)());
        let live = |k: &&(usize, usize, u64)| k.1 > 0;
        let pick = self
            .kept
            .iter()
            .enumerate()
            .filter(|(_, k)| live(k) && k.1 >= len)
            .min_by_key(|(_, k)| k.1)
            .or_else(|| {
                self.kept
                    .iter()
                    .enumerate()
                    .filter(|(_, k)| live(k))
                    .max_by_key(|(_, k)| k.1)
            })
            .map(|(i, &k)| (i, k))?;
        let (i, (base, have, when)) = pick;
        if have >= len {
            // The head goes out; the tail keeps the slot, and its time.
            let rest = if have > len {
                self.reuse_stats.cut += 1;
                (base + len, have - len, when)
            } else {
                (0, 0, 0)
            };
            if let Some(slot) = self.kept.get_mut(i) {
                *slot = rest;
            }
            self.cached -= len;
            self.reuse_stats.reused += 1;
            return NonNull::new(base as *mut u8).map(|p| (p, len));
        }
        // A locked mapping's new pages are locked (and faulted in) by the kernel.
        // SAFETY: `base..base + have` is a kept range of this source, which nothing uses; with
        // `MREMAP_MAYMOVE` the kernel extends it in place or moves it whole to free addresses,
        // and never touches other mappings (a range spanning two mappings is refused).
        let mut p =
            unsafe { libc::mremap(base as *mut libc::c_void, have, len, libc::MREMAP_MAYMOVE) };
        if p == libc::MAP_FAILED {
            self.fail(Call::Remap, len - have);
            p = self.move_joined(base, have, len)?;
        }
        if let Some(slot) = self.kept.get_mut(i) {
            *slot = (0, 0, 0);
        }
        self.cached -= have;
        let at = p.addr();
        self.mapped += len - have;
        if self.options.populate
            && !self.options.locked
            && self.populate(at + have, len - have).is_err()
        {
            // SAFETY: the mapping just moved or grown, which nothing uses.
            if unsafe { self.unmap(at, len) } {
                self.mapped -= len;
            }
            return None;
        }
        self.reuse_stats.grown += 1;
        self.reuse_stats.reused += 1;
        NonNull::new(p.cast()).map(|p| (p, len))
    }

    /// A kept range joined from parts of two or more mappings (which `mremap` refuses to grow,
    /// `EFAULT`) moved to the head of a fresh mapping of `len` bytes: `mremap(MREMAP_FIXED)`
    /// without resizing moves several mappings at once (Linux 6.17 and later; older kernels
    /// refuse it too). `None`, the range still kept, where refused, and for locked sources
    /// (the fresh tail would not be locked).
    fn move_joined(&mut self, base: usize, have: usize, len: usize) -> Option<*mut libc::c_void> {
        if self.options.locked {
            return None;
        }
        let fresh = Self::map(len, 0)?;
        // SAFETY: `base..base + have` is a kept range of this source, which nothing uses, and
        // the destination is the head of the mapping just made, which nothing uses either;
        // `MREMAP_FIXED` replaces that head with the range's pages and unmaps the range.
        let p = unsafe {
            libc::mremap(
                base as *mut libc::c_void,
                have,
                have,
                libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED,
                fresh.as_ptr().cast::<libc::c_void>(),
            )
        };
        if p == libc::MAP_FAILED {
            self.fail(Call::Remap, have);
            // SAFETY: the fresh mapping, which nothing uses.
            unsafe { self.unmap(fresh.addr().get(), len) };
            return None;
        }
        self.reuse_stats.moved += 1;
        Some(p)
    }

    /// Records a failed call (the error number is read now) and returns the pool's error.
    #[cold]
    fn fail(&mut self, call: Call, bytes: usize) -> Error {
        let errno = os::errno();
        self.record(call, bytes, errno);
        Error::OutOfMemory
    }

    #[cold]
    fn record(&mut self, call: Call, bytes: usize, errno: i32) {
        let memlock_limit = if call == Call::Lock {
            os::memlock_limit()
        } else {
            None
        };
        self.last_error = Some(SourceError {
            call,
            bytes,
            errno,
            memlock_limit,
        });
    }

    /// `mmap` of `len` anonymous private bytes with `extra` flags; `None` (errno set) if
    /// refused.
    fn map(len: usize, extra: libc::c_int) -> Option<NonNull<u8>> {
        // SAFETY: an anonymous mapping at an address the kernel chooses touches no existing
        // memory; the result is checked.
        let p = unsafe {
            libc::mmap(
                null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | extra,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return None;
        }
        NonNull::new(p.cast())
    }

    /// `munmap`, recording a failure.
    ///
    /// # Safety
    /// `addr..addr + len` is part of a mapping of this source that nothing uses any more.
    unsafe fn unmap(&mut self, addr: usize, len: usize) -> bool {
        if len == 0 {
            return true;
        }
        // SAFETY: the caller's contract.
        if unsafe { libc::munmap(addr as *mut libc::c_void, len) } != 0 {
            self.fail(Call::Unmap, len);
            return false;
        }
        true
    }

    /// Faults in `addr..addr + len` of a fresh mapping.
    fn populate(&mut self, addr: usize, len: usize) -> Result<(), Error> {
        // SAFETY: the range is part of a read-write mapping of this source; populating it only
        // faults pages in (Linux 5.14 and later).
        let r = unsafe { libc::madvise(addr as *mut libc::c_void, len, libc::MADV_POPULATE_WRITE) };
        if r == 0 {
            return Ok(());
        }
        if os::errno() != libc::EINVAL {
            return Err(self.fail(Call::Populate, len));
        }
        // An older kernel: touch each page instead. The range is fresh, so it reads as zeros
        // and writing a zero keeps it so.
        let page = os::page_size();
        for at in (addr..addr + len).step_by(page) {
            // SAFETY: `at` is inside the fresh read-write mapping, which nothing else uses yet.
            unsafe { (at as *mut u8).write_volatile(0) };
        }
        Ok(())
    }

    /// A huge-page region of `len` bytes (a multiple of the huge-page size): `MAP_HUGETLB`, or
    /// the fallback, recorded in `self.huge`.
    fn map_huge(&mut self, len: usize) -> Result<NonNull<u8>, Error> {
        let populate = if self.options.populate {
            libc::MAP_POPULATE
        } else {
            0
        };
        if let Some(p) = Self::map(len, libc::MAP_HUGETLB | populate) {
            self.huge.hugetlb += 1;
            return Ok(p);
        }
        self.huge.hugetlb_errno = Some(os::errno());
        // Fallback: over-map by one huge page, cut the ends so the region is aligned to it
        // (transparent huge pages need aligned ranges), and advise huge pages.
        let huge = os::huge_page_size();
        let over = len.checked_add(huge).ok_or(Error::SizeOverflow)?;
        let Some(raw) = Self::map(over, 0) else {
            return Err(self.fail(Call::Map, over));
        };
        let start = raw.addr().get();
        let aligned = start.next_multiple_of(huge);
        let head = aligned - start;
        // SAFETY: the head and tail are parts of the mapping just made, which nothing uses.
        let trimmed =
            unsafe { self.unmap(start, head) && self.unmap(aligned + len, over - head - len) };
        if !trimmed {
            // SAFETY: as above; whatever part of it is left goes.
            unsafe { libc::munmap(raw.as_ptr().cast(), over) };
            return Err(Error::OutOfMemory);
        }
        // SAFETY: `aligned..aligned + len` is the mapping just made; advice changes no
        // contents.
        let advised =
            unsafe { libc::madvise(aligned as *mut libc::c_void, len, libc::MADV_HUGEPAGE) };
        if advised != 0 {
            self.huge.advice_refused += 1;
        }
        self.huge.transparent += 1;
        if self.options.populate {
            if let Err(e) = self.populate(aligned, len) {
                // SAFETY: the fresh mapping, which nothing uses.
                unsafe { self.unmap(aligned, len) };
                return Err(e);
            }
        }
        // `aligned` is inside a mapping the kernel placed, so it is not null.
        NonNull::new(aligned as *mut u8).ok_or(Error::OutOfMemory)
    }
}

impl Drop for MmapSource {
    /// Unmaps the mappings kept for reuse (the regions handed out are their pool's business).
    fn drop(&mut self) {
        self.purge();
    }
}

// SAFETY: every region is an anonymous private read-write mapping, fresh or kept for reuse
// (a mapping given back by the pool, which nothing uses since, or a page-aligned part of one,
// the head of a kept range; kept ranges never overlap, and a part is handed out once: it leaves
// `kept` as it is handed out, the rest of the range staying there), used by nothing but the pool it
// is handed to until it is given back (`munmap`ped or kept) or its tail is cut; a kept mapping
// grown with `MREMAP_MAYMOVE` is one mapping, at the address the kernel returns; growth is
// `mremap` without `MREMAP_MAYMOVE`, so a grown region is the same mapping, extended in place
// and reachable from its base; released pages (`MADV_DONTNEED`) stay mapped and read as
// zeros. Bases are aligned to the granularity: the page size (any mapping), or the huge-page
// size (`MAP_HUGETLB` mappings are aligned by the kernel, the fallback by trimming).
unsafe impl RegionSource for MmapSource {
    type Base = NonNull<u8>;

    fn addr(base: NonNull<u8>) -> usize {
        base.addr().get()
    }

    fn granularity(&self) -> usize {
        if self.options.huge_pages {
            os::huge_page_size()
        } else {
            os::page_size()
        }
    }

    fn obtain(&mut self, min: usize) -> Result<(NonNull<u8>, usize), Error> {
        let g = self.granularity();
        let len = min
            .max(1)
            .checked_next_multiple_of(g)
            .filter(|&l| l <= isize::MAX as usize)
            .ok_or(Error::SizeOverflow)?;
        if self.reusing() {
            if let Some(got) = self.reuse_kept(len) {
                self.bound_to_peak();
                return Ok(got);
            }
        }
        let base = if self.options.huge_pages {
            self.map_huge(len)?
        } else {
            let populate = if self.options.populate && !self.options.locked {
                libc::MAP_POPULATE
            } else {
                0
            };
            match Self::map(len, populate) {
                Some(p) => p,
                None => return Err(self.fail(Call::Map, len)),
            }
        };
        if self.options.locked {
            // SAFETY: the range is the mapping just made.
            if unsafe { libc::mlock(base.as_ptr().cast(), len) } != 0 {
                let e = self.fail(Call::Lock, len);
                // SAFETY: the fresh mapping, which nothing uses.
                unsafe { self.unmap(base.addr().get(), len) };
                return Err(e);
            }
        }
        self.mapped += len;
        self.maps += 1;
        self.bound_to_peak();
        Ok((base, len))
    }

    unsafe fn give_back(&mut self, base: NonNull<u8>, len: usize) {
        // The caller's contract: the region came from here and nothing uses it, so it may be
        // kept and handed out again.
        if self.keep(base.addr().get(), len) {
            return;
        }
        // SAFETY: the caller's contract: the region came from here and nothing uses it.
        if unsafe { self.unmap(base.addr().get(), len) } {
            self.mapped -= len;
        }
    }

    fn cached(&self) -> usize {
        self.cached
    }

    fn purge(&mut self) -> usize {
        let mut bytes = 0;
        for i in 0..REUSE_SLOTS {
            let n = self.drop_kept(i);
            if n > 0 {
                bytes += n;
                self.reuse_stats.purged += 1;
            }
        }
        bytes
    }

    fn grow(&mut self, base: NonNull<u8>, len: usize, additional: usize) -> Result<usize, Error> {
        let g = self.granularity();
        let add = additional
            .checked_next_multiple_of(g)
            .ok_or(Error::SizeOverflow)?;
        let new_len = len
            .checked_add(add)
            .filter(|&l| l <= isize::MAX as usize)
            .ok_or(Error::SizeOverflow)?;
        // A locked mapping's new pages are locked (and faulted in) by the kernel, within
        // `RLIMIT_MEMLOCK`.
        // SAFETY: `base..base + len` is a mapping of this source (the trait's contract for the
        // regions the pool names); without `MREMAP_MAYMOVE` the kernel extends it over free
        // addresses right after its end or fails, and never moves or touches other mappings.
        let p = unsafe { libc::mremap(base.as_ptr().cast(), len, new_len, 0) };
        if p == libc::MAP_FAILED {
            let errno = os::errno();
            // A locked mapping that would pass the locking limit fails with EAGAIN.
            let call = if self.options.locked && errno == libc::EAGAIN {
                Call::Lock
            } else {
                Call::Remap
            };
            self.record(call, add, errno);
            return Err(Error::OutOfMemory);
        }
        if p.cast::<u8>() != base.as_ptr() {
            // Impossible without MREMAP_MAYMOVE; never hand the pool a region it did not ask
            // for. Nothing can be undone safely, so refuse loudly in the record.
            self.record(Call::Remap, add, libc::EFAULT);
            return Err(Error::OutOfMemory);
        }
        let at = base.addr().get() + len;
        if self.options.populate && !self.options.locked {
            if let Err(e) = self.populate(at, add) {
                // SAFETY: the tail was added a moment ago and nothing uses it.
                unsafe { self.unmap(at, add) };
                return Err(e);
            }
        }
        self.mapped += add;
        self.bound_to_peak();
        Ok(add)
    }

    unsafe fn shrink(&mut self, base: NonNull<u8>, len: usize, keep: usize) -> bool {
        let g = self.granularity();
        if keep >= len || !keep.is_multiple_of(g) || !len.is_multiple_of(g) {
            return false;
        }
        // SAFETY: the caller's contract: the tail is part of a region of this source that
        // nothing uses.
        let done = unsafe { self.unmap(base.addr().get() + keep, len - keep) };
        if done {
            self.mapped -= len - keep;
        }
        done
    }

    unsafe fn release(&mut self, start: usize, len: usize) -> bool {
        // Locked pages are meant to stay resident (and `MADV_DONTNEED` refuses them).
        if self.options.locked || len == 0 {
            return false;
        }
        // SAFETY: the caller's contract: the range is inside a region of this source and holds
        // nothing anyone needs; the pages stay mapped and read as zeros afterwards.
        if unsafe { libc::madvise(start as *mut libc::c_void, len, libc::MADV_DONTNEED) } != 0 {
            self.fail(Call::Release, len);
            return false;
        }
        true
    }

    fn available(&self) -> Option<usize> {
        os::mem_available()
    }
}
