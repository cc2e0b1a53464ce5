//! Heap statistics: kept as running counters on every operation by a heap that counts
//! ([`Counters`], the default; [`NoCounters`] keeps none, see [`Tally`]), so reading them is
//! `O(1)` apart from the largest free chunk (one walk down a trie).

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

/// Whether a heap keeps the running counters behind [`Stats`], chosen by a heap's type
/// ([`crate::InlineHeap`], [`crate::GlobalHeap`]): [`Counters`], the default, keeps them;
/// [`NoCounters`] keeps nothing. ([`crate::DetachedHeap`] always counts: its calls are
/// dominated by its record table, and device pools read their statistics.)
///
/// Why a choice: the counters are a few read-modify-writes on every allocation and free (the
/// bytes in use and their peak, the counts of allocations, frees and free chunks), a
/// measurable share of a replay's time (figures:
/// `docs/measurements.md#statsrs-what-the-counters-cost`). A heap that nothing reads
/// statistics from need not pay them; talc makes its counters an opt-in feature for the same
/// reason. A type parameter rather than a Cargo feature, because features unify: one crate in
/// a build that asked for statistics would turn them on for every heap in it. Both kinds run
/// the same algorithm and hand out the same addresses; only [`Counters`] heaps have a `stats`
/// method.
///
/// Sealed: the heaps call its methods on their hot paths, and only these two implement it.
pub trait Tally: sealed::Count {}

impl Tally for Counters {}
impl Tally for NoCounters {}

/// A heap that keeps no statistics (see [`Tally`]). Its `check` verifies every invariant of the
/// chunks and bins, only not the counters it does not have.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NoCounters;

pub(crate) mod sealed {
    use super::Counters;

    /// What a heap counts, as it happens, in granules. Every method is a no-op for
    /// [`super::NoCounters`], so the compiler removes the updates from its hot paths.
    pub trait Count: Copy + Sized {
        /// Nothing counted yet.
        const NEW: Self;
        /// The counters, when this kind keeps them (for the invariant walk and `stats`).
        fn counters(&self) -> Option<&Counters>;
        /// `g` granules of chunk space added, in a new region if `new_region`.
        fn space_added(&mut self, g: usize, new_region: bool);
        /// `g` granules of chunk space given back, with their whole region if `region_gone`.
        fn space_removed(&mut self, g: usize, region_gone: bool);
        /// A free chunk filed (into a bin or as the top).
        fn filed(&mut self);
        /// A free chunk taken out of its bin or the top.
        fn unfiled(&mut self);
        /// A chunk of `g` granules handed out, at its final size.
        fn handed_out(&mut self, g: usize);
        /// A chunk of `g` granules freed.
        fn freed(&mut self, g: usize);
        /// A free refused (double, foreign or wrong size).
        fn refused(&mut self);
        /// A chunk grown in place by `g` granules.
        fn grew(&mut self, g: usize);
        /// A chunk shrunk in place by `g` granules.
        fn shrank(&mut self, g: usize);
    }

    impl Count for Counters {
        const NEW: Self = Counters::new();
        #[inline(always)]
        fn counters(&self) -> Option<&Counters> {
            Some(self)
        }
        #[inline(always)]
        fn space_added(&mut self, g: usize, new_region: bool) {
            self.managed += g;
            self.regions += usize::from(new_region);
        }
        #[inline(always)]
        fn space_removed(&mut self, g: usize, region_gone: bool) {
            self.managed -= g;
            self.regions -= usize::from(region_gone);
        }
        #[inline(always)]
        fn filed(&mut self) {
            self.free_chunks += 1;
        }
        #[inline(always)]
        fn unfiled(&mut self) {
            self.free_chunks -= 1;
        }
        #[inline(always)]
        fn handed_out(&mut self, g: usize) {
            self.add_used(g);
            self.allocs += 1;
        }
        #[inline(always)]
        fn freed(&mut self, g: usize) {
            self.used -= g;
            self.frees += 1;
        }
        #[inline(always)]
        fn refused(&mut self) {
            self.refused_frees += 1;
        }
        #[inline(always)]
        fn grew(&mut self, g: usize) {
            self.add_used(g);
            self.reallocs_in_place += 1;
        }
        #[inline(always)]
        fn shrank(&mut self, g: usize) {
            self.used -= g;
            self.reallocs_in_place += 1;
        }
    }

    impl Count for super::NoCounters {
        const NEW: Self = super::NoCounters;
        #[inline(always)]
        fn counters(&self) -> Option<&Counters> {
            None
        }
        #[inline(always)]
        fn space_added(&mut self, _: usize, _: bool) {}
        #[inline(always)]
        fn space_removed(&mut self, _: usize, _: bool) {}
        #[inline(always)]
        fn filed(&mut self) {}
        #[inline(always)]
        fn unfiled(&mut self) {}
        #[inline(always)]
        fn handed_out(&mut self, _: usize) {}
        #[inline(always)]
        fn freed(&mut self, _: usize) {}
        #[inline(always)]
        fn refused(&mut self) {}
        #[inline(always)]
        fn grew(&mut self, _: usize) {}
        #[inline(always)]
        fn shrank(&mut self, _: usize) {}
    }
}

/// A heap that keeps its statistics (see [`Tally`]): running counters, in granules where they
/// track chunk space, updated on every call. Free space (`managed − used`) and live chunks
/// (`allocs − frees`) follow from the others, so the hot paths keep neither. The default for
/// every heap.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    pub(crate) used: usize,
    pub(crate) peak_used: usize,
    pub(crate) managed: usize,
    pub(crate) regions: usize,
    pub(crate) free_chunks: usize,
    pub(crate) allocs: u64,
    pub(crate) frees: u64,
    pub(crate) reallocs_in_place: u64,
    pub(crate) refused_frees: u64,
}

impl Counters {
    pub(crate) const fn new() -> Self {
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
    pub(crate) fn free(&self) -> usize {
        self.managed - self.used
    }

    /// Chunks handed out and not freed.
    pub(crate) fn live(&self) -> usize {
        (self.allocs - self.frees) as usize
    }

    #[inline]
    pub(crate) fn add_used(&mut self, g: usize) {
        self.used += g;
        if self.used > self.peak_used {
            self.peak_used = self.used;
        }
    }

    /// The statistics, given the granule, the largest free chunk (granules) and the tag bytes
    /// of a chunk.
    pub(crate) fn to_stats(self, shift: u32, largest_free: usize, head_bytes: usize) -> Stats {
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
