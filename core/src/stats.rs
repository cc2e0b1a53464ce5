//! Heap statistics: kept as running counters on every operation, so reading them is `O(1)`
//! apart from the largest free chunk (one walk down a trie).

/// A snapshot of a heap's counters. All sizes are in bytes of managed memory.
///
/// # Examples
///
/// ```
/// # fn main() -> Result<(), tagalloc::Error> {
/// use tagalloc::{DetachedHeap, Record};
///
/// let mut table = [Record::VACANT; 16];
/// let mut h = DetachedHeap::new(&mut table[..], 256)?;
/// h.add_region(0, 1 << 20)?;
/// let a = h.alloc(1000, 1)?;
/// let b = h.alloc(1000, 1)?;
/// h.free(a)?;
/// let st = h.stats();
/// assert_eq!((st.live, st.in_use, st.managed), (1, 1024, 1 << 20));
/// assert_eq!(st.free, (1 << 20) - 1024);
/// assert_eq!(st.free_chunks, 2); // the hole `a` left, and the rest
/// assert!(st.fragmentation() > 0.0 && st.fragmentation() < 0.01);
/// # let _ = b;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Bytes in chunks handed out, tags and rounding included.
    pub in_use: usize,
    /// The highest `in_use` ever reached.
    pub peak_in_use: usize,
    /// Bytes of chunk space in all regions (what `in_use + free` add up to).
    pub managed: usize,
    /// Bytes in free chunks.
    pub free: usize,
    /// Number of free chunks (each is in one bin).
    pub free_chunks: usize,
    /// Number of chunks handed out right now.
    pub live: usize,
    /// Bytes in the largest free chunk.
    pub largest_free: usize,
    /// The largest request (at granule alignment) that would succeed now: the largest free
    /// chunk less its tag.
    pub largest_request: usize,
    /// Number of regions the heap manages.
    pub regions: usize,
    /// Successful allocations (a moving realloc counts one).
    pub allocs: u64,
    /// Successful frees (a moving realloc counts one).
    pub frees: u64,
    /// Reallocations done in place.
    pub reallocs_in_place: u64,
    /// Frees refused as double, foreign or wrong-size by a checked path.
    pub refused_frees: u64,
}

impl Stats {
    /// `1 − largest free / total free`: 0 when all free memory is one chunk, close to 1 when it
    /// is scattered in many small ones. 0 when nothing is free.
    pub fn fragmentation(&self) -> f64 {
        if self.free == 0 {
            0.0
        } else {
            1.0 - self.largest_free as f64 / self.free as f64
        }
    }
}

/// Running counters, in granules where they track chunk space. Free space (`managed − used`)
/// and live chunks (`allocs − frees`) follow from the others, so the hot paths keep neither.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Counters {
    pub used: usize,
    pub peak_used: usize,
    pub managed: usize,
    pub regions: usize,
    pub free_chunks: usize,
    pub allocs: u64,
    pub frees: u64,
    pub reallocs_in_place: u64,
    pub refused_frees: u64,
}

impl Counters {
    pub const fn new() -> Self {
        Counters {
            used: 0,
            peak_used: 0,
            managed: 0,
            regions: 0,
            free_chunks: 0,
            allocs: 0,
            frees: 0,
            reallocs_in_place: 0,
            refused_frees: 0,
        }
    }

    /// Granules in free chunks.
    pub fn free(&self) -> usize {
        self.managed - self.used
    }

    /// Chunks handed out and not freed.
    pub fn live(&self) -> usize {
        (self.allocs - self.frees) as usize
    }

    #[inline]
    pub fn add_used(&mut self, g: usize) {
        self.used += g;
        if self.used > self.peak_used {
            self.peak_used = self.used;
        }
    }

    /// The statistics, given the granule, the largest free chunk (granules) and the tag bytes
    /// of a chunk.
    pub fn to_stats(self, shift: u32, largest_free: usize, head_bytes: usize) -> Stats {
        let largest = largest_free << shift;
        Stats {
            in_use: self.used << shift,
            peak_in_use: self.peak_used << shift,
            managed: self.managed << shift,
            free: self.free() << shift,
            free_chunks: self.free_chunks,
            live: self.live(),
            largest_free: largest,
            largest_request: largest.saturating_sub(head_bytes),
            regions: self.regions,
            allocs: self.allocs,
            frees: self.frees,
            reallocs_in_place: self.reallocs_in_place,
            refused_frees: self.refused_frees,
        }
    }
}
