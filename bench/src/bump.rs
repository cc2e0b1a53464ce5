//! The bump allocator: the physical limit any allocator can be measured against. It hands out
//! the next bytes of its range and keeps no free lists, so nothing can be faster per call, and
//! nothing uses more memory: freed bytes come back only when every allocation is gone.

/// A bump pointer over `base..base + len` (addresses only; the caller owns any memory behind
/// them). Frees only count down the live allocations; the range is reused from the start when
/// none is left. The newest allocation can grow in place.
///
/// With `wrap`, a request that does not fit starts again at `base` even while allocations are
/// live. That is no allocator at all (live blocks get aliased); it only serves the speed
/// benchmarks, which never read what they allocate, as the floor of what a call can cost.
pub struct Bump {
    base: usize,
    len: usize,
    next: usize,
    last: usize,
    live: usize,
    wrap: bool,
}

impl Bump {
    /// A bump pointer at the start of `base..base + len`.
    pub fn new(base: usize, len: usize, wrap: bool) -> Self {
        Bump {
            base,
            len,
            next: 0,
            last: usize::MAX,
            live: 0,
            wrap,
        }
    }

    /// The first address of the range.
    pub fn base(&self) -> usize {
        self.base
    }

    /// The offset from `base` of `size` fresh bytes aligned to `align` (a power of two).
    pub fn alloc(&mut self, size: usize, align: usize) -> Option<usize> {
        let fit = |from: usize| {
            let start = (self.base + from).checked_next_multiple_of(align)? - self.base;
            (start.checked_add(size)? <= self.len).then_some(start)
        };
        let start = fit(self.next).or_else(|| if self.wrap { fit(0) } else { None })?;
        (self.next, self.last, self.live) = (start + size, start, self.live + 1);
        Some(start)
    }

    /// Grows (or shrinks) the allocation at `offset` in place if it is the newest one.
    pub fn resize_last(&mut self, offset: usize, new_size: usize) -> bool {
        let fits =
            offset == self.last && offset.checked_add(new_size).is_some_and(|e| e <= self.len);
        if fits {
            self.next = offset + new_size;
        }
        fits
    }

    /// Forgets one allocation; when none is left the whole range is free again.
    pub fn free(&mut self) {
        self.live = self.live.saturating_sub(1);
        if self.live == 0 {
            (self.next, self.last) = (0, usize::MAX);
        }
    }
}
