//! The fake device's address space: one anonymous mapping the CPU may not touch
//! (`PROT_NONE`), and the bookkeeping of which ranges of it are handed out.
//!
//! Device allocations and virtual-memory reservations are carved from it, so every device
//! address the fake gives is a real address of this process that faults on any CPU read or
//! write: a test that touches device memory by mistake crashes instead of passing.

use std::collections::BTreeMap;

/// An inaccessible address range and its free parts.
///
/// Invariants: `free` holds disjoint, non-adjacent, non-empty ranges (start → length) inside
/// `base..base + len`; every other byte of that range is handed out.
#[derive(Debug)]
pub(crate) struct DeviceSpace {
    base: u64,
    len: u64,
    free: BTreeMap<u64, u64>,
}

impl DeviceSpace {
    /// Maps `len` bytes of inaccessible address space, aligned to `align` (a power of two).
    /// `None` when the system refuses.
    pub(crate) fn new(len: usize, align: usize) -> Option<DeviceSpace> {
        let total = len.checked_add(align)?;
        // SAFETY: an anonymous private mapping at an address of the kernel's choosing touches
        // no existing memory. PROT_NONE and MAP_NORESERVE: it costs no memory, only addresses.
        let raw = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                total,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if raw == libc::MAP_FAILED {
            return None;
        }
        let start = raw as usize;
        let aligned = start.next_multiple_of(align);
        // Give back the unaligned head and the tail beyond `len`, keeping `aligned..+len`.
        let head = aligned - start;
        let tail = total - head - len;
        // SAFETY: both ranges lie inside the mapping just made, which nothing else uses.
        unsafe {
            if head > 0 {
                libc::munmap(raw, head);
            }
            if tail > 0 {
                libc::munmap((aligned + len) as *mut libc::c_void, tail);
            }
        }
        let mut free = BTreeMap::new();
        free.insert(aligned as u64, len as u64);
        Some(DeviceSpace {
            base: aligned as u64,
            len: len as u64,
            free,
        })
    }

    /// The first address.
    pub(crate) fn base(&self) -> u64 {
        self.base
    }

    /// The size in bytes.
    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    /// Whether `addr` lies in the space.
    pub(crate) fn contains(&self, addr: u64) -> bool {
        addr.wrapping_sub(self.base) < self.len
    }

    /// Hands out `size` bytes aligned to `align` (a power of two): the lowest free address that
    /// fits. `None` when no free range is large enough.
    pub(crate) fn take(&mut self, size: u64, align: u64) -> Option<u64> {
        if size == 0 {
            return None;
        }
        let (start, len, at) = self.free.iter().find_map(|(&start, &len)| {
            let at = start.checked_next_multiple_of(align)?;
            let end = at.checked_add(size)?;
            (end <= start + len).then_some((start, len, at))
        })?;
        self.free.remove(&start);
        if at > start {
            self.free.insert(start, at - start);
        }
        let end = at + size;
        if end < start + len {
            self.free.insert(end, start + len - end);
        }
        Some(at)
    }

    /// Takes back `start..start + size`, which [`take`](Self::take) handed out, merging it with
    /// free neighbours.
    pub(crate) fn give(&mut self, start: u64, size: u64) {
        debug_assert!(self.contains(start) && size > 0 && start + size <= self.base + self.len);
        let (mut start, mut size) = (start, size);
        if let Some((&prev, &prev_len)) = self.free.range(..start).next_back() {
            debug_assert!(prev + prev_len <= start, "given back twice");
            if prev + prev_len == start {
                self.free.remove(&prev);
                start = prev;
                size += prev_len;
            }
        }
        if let Some(&next_len) = self.free.get(&(start + size)) {
            self.free.remove(&(start + size));
            size += next_len;
        }
        self.free.insert(start, size);
    }

    /// Bytes not handed out.
    #[cfg(test)]
    pub(crate) fn free_bytes(&self) -> u64 {
        self.free.values().sum()
    }
}

impl Drop for DeviceSpace {
    fn drop(&mut self) {
        // SAFETY: `base..base + len` is the mapping `new` kept, unmapped once, here. Nothing
        // can still use it: the CPU never could, and the driver that owned it is gone.
        unsafe {
            libc::munmap(self.base as *mut libc::c_void, self.len as usize);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_fit_with_alignment_and_merging() {
        let mut s = DeviceSpace::new(1 << 24, 1 << 21).unwrap();
        assert_eq!(s.base() % (1 << 21), 0);
        let a = s.take(300, 256).unwrap();
        let b = s.take(1 << 21, 1 << 21).unwrap();
        let c = s.take(256, 256).unwrap();
        assert_eq!(a, s.base());
        assert_eq!(b, s.base() + (1 << 21)); // aligned past `a`, leaving a gap
        assert_eq!(c, s.base() + 512); // the gap's first 256-aligned address after `a`
        assert!(s.take(1 << 25, 256).is_none());
        s.give(b, 1 << 21);
        s.give(a, 300);
        s.give(c, 256);
        assert_eq!(s.free_bytes(), 1 << 24);
        assert_eq!(s.free.len(), 1, "{:?}", s.free);
        assert!(s.contains(s.base()) && !s.contains(s.base() + (1 << 24)));
    }
}
