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
}

impl MmapOptions {
    /// Plain anonymous mappings, faulted in on first touch, pageable.
    pub const fn new() -> Self {
        MmapOptions {
            locked: false,
            huge_pages: false,
            populate: false,
        }
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
    /// Bytes mapped now (regions obtained and grown, less those given back and cut).
    mapped: usize,
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
        }
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

    /// Bytes mapped now.
    pub fn mapped(&self) -> usize {
        self.mapped
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

// SAFETY: every region is a fresh anonymous private read-write mapping, used by nothing but
// the pool it is handed to until it is given back (`munmap`ped) or its tail is cut; growth is
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
        Ok((base, len))
    }

    unsafe fn give_back(&mut self, base: NonNull<u8>, len: usize) {
        // SAFETY: the caller's contract: the region came from here and nothing uses it.
        if unsafe { self.unmap(base.addr().get(), len) } {
            self.mapped -= len;
        }
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
