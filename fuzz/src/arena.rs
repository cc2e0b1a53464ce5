//! The inline heaps' memory: one arena per thread, allocated and zeroed once, lent to each run
//! and given back zeroed again.
//!
//! A fresh zeroed arena for every input cost more than most runs themselves (under the address
//! sanitizer, allocating and freeing a megabyte poisons and unpoisons its shadow and maps and
//! unmaps its pages every time). The arena is reused instead, and each run starts from the
//! same state a fresh arena had: all zeros. That holds because, within a run, only two things
//! write the arena:
//!
//! - the heap, and only inside the ranges it was given as regions (the ranges passed to a
//!   successful `add_region`, and those added by a successful `extend_region`, which also
//!   rewrites the old fence just before them);
//! - the driver, and only inside live allocations, which lie in those regions.
//!
//! A [`Lease`] records every range it hands to the heap ([`Lease::lent`]) and, when the run
//! ends, writes zeros over those ranges and nothing else, so the cost follows what the run
//! used rather than the arena's size. Memory outside every region keeps the zeros it was
//! given; the `outside` buffer (memory no region ever covers, for foreign pointers) is zeroed
//! whole.
//!
//! A run that panics aborts the fuzzer, so no dirty arena is ever lent again; `cargo test`'s
//! replay lends a fresh arena on each thread.
//!
//! The arena is mapped between two inaccessible guard pages: the heap under test sees one
//! allocation, inside which the address sanitizer has no boundaries to watch, so what it could
//! catch of the heap, an access just before or past the memory it was given, the guard pages
//! catch for free, as a fault libFuzzer reports with the input (see `docs/fuzzing.md`).

use std::cell::Cell;
use std::ops::Range;
use std::ptr::NonNull;

use tagalloc::model;

use crate::ops::SPACE;

/// Bytes of a guard page (at least the host's page).
const GUARD: usize = 1 << 16;

/// `u128`s of memory no region ever covers.
const OUTSIDE_WORDS: usize = 64;

/// `SPACE` bytes mapped between two guard pages, zeroed by the kernel; unmapped when dropped.
struct Mapping {
    /// The first byte after the lower guard page.
    base: NonNull<u8>,
}

impl Mapping {
    fn new() -> Mapping {
        let total = SPACE + 2 * GUARD;
        // SAFETY: a fresh anonymous mapping, which aliases nothing; the result is checked.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                total,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert!(p != libc::MAP_FAILED, "mmap of the fuzz arena failed");
        // SAFETY: `GUARD..GUARD + SPACE` lies inside the mapping just made.
        let base = unsafe { p.cast::<u8>().add(GUARD) };
        // SAFETY: as above; the guard pages either side stay `PROT_NONE`.
        let r = unsafe { libc::mprotect(base.cast(), SPACE, libc::PROT_READ | libc::PROT_WRITE) };
        assert_eq!(r, 0, "mprotect of the fuzz arena failed");
        Mapping {
            base: NonNull::new(base).expect("a mapping is not at address 0"),
        }
    }

    /// The arena's bytes.
    fn bytes(&self) -> &[u8] {
        // SAFETY: `SPACE` readable bytes from `base`, mapped while `self` lives.
        unsafe { std::slice::from_raw_parts(self.base.as_ptr(), SPACE) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the whole mapping made in `new`, which nothing uses any more.
        unsafe { libc::munmap(self.base.as_ptr().sub(GUARD).cast(), SPACE + 2 * GUARD) };
    }
}

/// The memory itself: all zeros whenever it is not lent.
struct Memory {
    arena: Mapping,
    outside: Box<[u128]>,
}

impl Memory {
    fn zeroed() -> Box<Memory> {
        Box::new(Memory {
            arena: Mapping::new(),
            outside: vec![0u128; OUTSIDE_WORDS].into_boxed_slice(),
        })
    }
}

thread_local! {
    /// This thread's idle arena, if it has one.
    static IDLE: Cell<Option<Box<Memory>>> = const { Cell::new(None) };
}

/// An arena lent to one run: `SPACE` zeroed bytes from a page boundary, and a buffer outside
/// it. Dropping it zeroes what the run was lent and returns it to the thread.
pub struct Lease {
    memory: Option<Box<Memory>>,
    /// The first page-aligned byte of the arena.
    base: *mut u8,
    /// Ranges of the arena handed to the heap, as offsets from `base`.
    lent: Vec<Range<usize>>,
}

impl Lease {
    /// This thread's arena, or a fresh one if it has none (or lends it already).
    pub fn take() -> Lease {
        let memory = IDLE.with(Cell::take).unwrap_or_else(Memory::zeroed);
        let base = memory.arena.base.as_ptr();
        Lease {
            memory: Some(memory),
            base,
            lent: Vec::new(),
        }
    }

    /// The first byte of the arena (page-aligned); `SPACE` bytes follow.
    pub fn base(&self) -> *mut u8 {
        self.base
    }

    /// The buffer no region ever covers, and its length in bytes.
    pub fn outside(&mut self) -> (*mut u8, usize) {
        let m = self.memory.as_mut().expect("a lease holds its memory");
        (m.outside.as_mut_ptr().cast(), m.outside.len() * 16)
    }

    /// Whether every byte of the arena and of the buffer outside it is zero (what a run may
    /// rely on; the replay test checks it between runs).
    pub fn is_zeroed(&self) -> bool {
        let m = self.memory.as_ref().expect("a lease holds its memory");
        m.arena.bytes().iter().all(|&b| b == 0) && m.outside.iter().all(|&w| w == 0)
    }

    /// Records that the heap may write `start..end` (addresses inside the arena).
    pub fn lent(&mut self, start: usize, end: usize) {
        let b = self.base as usize;
        assert!(
            b <= start && start <= end && end <= b + SPACE,
            "lent outside the arena"
        );
        self.lent.push(start - b..end - b);
    }
}

// SAFETY: the arena's `SPACE` bytes from `base` lie in the memory the lease holds until it is
// dropped, and while lent they are used only by the run's heap and the blocks it hands out.
unsafe impl model::Memory for Lease {
    fn ranges(&mut self) -> impl Iterator<Item = (NonNull<u8>, usize)> {
        NonNull::new(self.base).map(|b| (b, SPACE)).into_iter()
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let Some(mut memory) = self.memory.take() else {
            return;
        };
        // Ranges may repeat (a region removed and added again): zero each byte once.
        self.lent.sort_unstable_by_key(|r| r.start);
        let zero = |r: Range<usize>| {
            // SAFETY: `r` lies in `0..SPACE` (checked in `lent`), inside the arena's
            // allocation from `base`; the heap that wrote it is gone, so nothing else refers
            // to it.
            unsafe { self.base.add(r.start).write_bytes(0, r.len()) }
        };
        let mut pending: Option<Range<usize>> = None;
        for r in self.lent.drain(..) {
            pending = match pending {
                Some(p) if r.start <= p.end => Some(p.start..p.end.max(r.end)),
                Some(p) => {
                    zero(p);
                    Some(r)
                }
                None => Some(r),
            };
        }
        if let Some(p) = pending {
            zero(p);
        }
        memory.outside.fill(0);
        IDLE.with(|idle| idle.set(Some(memory)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The permissions `/proc/self/maps` gives the page holding `addr`.
    fn perms(addr: usize) -> String {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        for line in maps.lines() {
            let (range, rest) = line.split_once(' ').unwrap();
            let (lo, hi) = range.split_once('-').unwrap();
            let lo = usize::from_str_radix(lo, 16).unwrap();
            let hi = usize::from_str_radix(hi, 16).unwrap();
            if (lo..hi).contains(&addr) {
                return rest[..4].to_string();
            }
        }
        panic!("{addr:#x} is not mapped");
    }

    #[test]
    fn the_arena_lies_between_guard_pages() {
        let lease = Lease::take();
        let base = lease.base() as usize;
        assert_eq!(perms(base), "rw-p");
        assert_eq!(perms(base + SPACE - 1), "rw-p");
        assert_eq!(perms(base - 1), "---p");
        assert_eq!(perms(base + SPACE), "---p");
        assert!(lease.is_zeroed());
    }
}
