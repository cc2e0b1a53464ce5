//! [`VmmSource`]: virtual-memory growth. A pool over it stays one contiguous region: a large
//! device address range is reserved once and physical chunks are mapped at its end as the
//! pool grows, then unmapped from its end when the pool trims.

use tagalloc::{Error, RegionSource};

use super::{free_memory, refused};
use crate::driver::{DevicePtr, Driver, Granularity};
use crate::error::{code, DriverError};

/// One reserved address range and the chunks mapped from its start.
///
/// Invariant: `chunks[i]` is a live physical allocation of `chunk` bytes mapped, with access
/// granted, at `base + i × chunk`; nothing else is mapped in the range; `used` says whether
/// the mapped part is a region handed out (a range with no region has no chunks).
#[derive(Debug)]
struct Reservation<P> {
    base: usize,
    size: usize,
    used: bool,
    chunks: Vec<P>,
}

/// Regions in reserved device address ranges, backed by physical chunks mapped as they grow.
///
/// - [`obtain`](RegionSource::obtain) reserves a range (`cuMemAddressReserve`) of the
///   configured size, by default the device's total memory (reserving costs no memory), or
///   reuses one kept from before, and maps the region's chunks at its start.
/// - [`grow`](RegionSource::grow) maps more chunks right after the region's end: one
///   `cuMemCreate` and one `cuMemMap` per chunk and one `cuMemSetAccess` for them all. The
///   region stays one, so its free end merges with the new space and nothing fragments
///   across segments.
/// - [`shrink`](RegionSource::shrink) unmaps the chunks past a point (one `cuMemUnmap`, one
///   `cuMemRelease` per chunk), and [`give_back`](RegionSource::give_back) all of them; the
///   address range is kept for the next region (at most one spare range; others are freed).
///   `cuMemUnmap`, unlike `cuMemFree`, does not wait for the device, so both synchronise the
///   context first (`cuCtxSynchronize`): no queued work can touch memory that is gone.
///
/// The chunk is the source's granularity: every region length, growth and cut is a multiple
/// of it, and every reservation is aligned to it. A larger chunk means fewer driver calls and a coarser trim; the footprint it adds is
/// at most one chunk at the pool's end.
///
/// Invariant: `chunk` is a power of two and a multiple of the driver's minimum granularity,
/// `reserve` a multiple of `chunk` (or 0: the device's memory, rounded up to chunks).
#[derive(Debug)]
pub struct VmmSource<D: Driver> {
    driver: D,
    chunk: usize,
    reserve: usize,
    ranges: Vec<Reservation<D::Physical>>,
    last: Option<DriverError>,
}

impl<D: Driver> VmmSource<D> {
    /// A source mapping chunks of `chunk` bytes into reservations of `reserve` bytes (0: the
    /// device's total memory). Errors: `CUDA_ERROR_NOT_SUPPORTED` from a device without
    /// virtual memory management; `CUDA_ERROR_INVALID_VALUE` for a chunk that is not a power
    /// of two and a multiple of the device's granularity, or a reservation that is not a
    /// multiple of the chunk.
    pub fn new(driver: D, chunk: usize, reserve: usize) -> Result<VmmSource<D>, DriverError> {
        let g = driver.allocation_granularity(Granularity::Minimum)?;
        if !chunk.is_power_of_two()
            || g == 0
            || !chunk.is_multiple_of(g)
            || !reserve.is_multiple_of(chunk)
        {
            return Err(DriverError::cuda("VmmSource::new", code::INVALID_VALUE));
        }
        Ok(VmmSource {
            driver,
            chunk,
            reserve,
            ranges: Vec::new(),
            last: None,
        })
    }

    /// The driver.
    pub fn driver(&self) -> &D {
        &self.driver
    }

    /// Bytes per physical chunk.
    pub fn chunk(&self) -> usize {
        self.chunk
    }

    /// The configured reservation size (0: the device's memory).
    pub fn reserve(&self) -> usize {
        self.reserve
    }

    /// Reserved address ranges held now, with a region in them or kept for the next one.
    pub fn reservations(&self) -> usize {
        self.ranges.len()
    }

    /// Chunks mapped now, in every range.
    pub fn mapped_chunks(&self) -> usize {
        self.ranges.iter().map(|r| r.chunks.len()).sum()
    }

    /// The last driver error met, if any.
    pub fn last_error(&self) -> Option<DriverError> {
        self.last
    }

    /// The last driver error met, forgotten.
    pub fn take_last_error(&mut self) -> Option<DriverError> {
        self.last.take()
    }

    /// How many bytes a new reservation covers, for a region of at least `min` bytes.
    fn reservation_size(&mut self, min: usize) -> Result<usize, Error> {
        let configured = if self.reserve > 0 {
            self.reserve
        } else {
            let total = self
                .driver
                .mem_get_info()
                .map_err(|e| refused(e, &mut self.last))?
                .total;
            total
                .checked_next_multiple_of(self.chunk)
                .ok_or(Error::SizeOverflow)?
        };
        Ok(configured.max(min))
    }

    /// The range whose base is `base`.
    fn range_of(&self, base: usize) -> Option<usize> {
        self.ranges.iter().position(|r| r.base == base)
    }

    /// Maps `bytes` (whole chunks) at offset `from` of range `i`, right after its mapped
    /// chunks; on failure unmaps and releases what it mapped, leaving the range as it was.
    fn map_chunks(&mut self, i: usize, from: usize, bytes: usize) -> Result<(), Error> {
        let (base, chunk) = (self.ranges[i].base, self.chunk);
        debug_assert_eq!(from, self.ranges[i].chunks.len() * chunk);
        let start = base + from;
        for k in 0..bytes / chunk {
            let handle = match self.driver.mem_create(chunk) {
                Ok(h) => h,
                Err(e) => return Err(self.unwind(i, from, k, e)),
            };
            let at = DevicePtr((start + k * chunk) as u64);
            // SAFETY: `at..at + chunk` lies in range `i`, a reservation this source owns,
            // past every chunk mapped there (invariant of `Reservation`); `handle` was just
            // created.
            if let Err(e) = unsafe { self.driver.mem_map(at, chunk, handle) } {
                // SAFETY: the handle was created above, never mapped, and is dropped here.
                let _ = unsafe { self.driver.mem_release(handle) };
                return Err(self.unwind(i, from, k, e));
            }
            self.ranges[i].chunks.push(handle);
        }
        // SAFETY: the range was mapped just above, by this source.
        if let Err(e) = unsafe { self.driver.mem_set_access(DevicePtr(start as u64), bytes) } {
            return Err(self.unwind(i, from, bytes / chunk, e));
        }
        Ok(())
    }

    /// Undoes the `mapped` chunks [`VmmSource::map_chunks`] mapped at offset `from` of range
    /// `i` before it met `e`; returns the error for the pool.
    fn unwind(&mut self, i: usize, from: usize, mapped: usize, e: DriverError) -> Error {
        let err = refused(e, &mut self.last);
        self.unmap_from(i, from, mapped * self.chunk);
        err
    }

    /// Unmaps and releases the `bytes` of chunks mapped at offset `from` of range `i`, the
    /// range's last ones. Records a failure.
    fn unmap_from(&mut self, i: usize, from: usize, bytes: usize) {
        if bytes == 0 {
            return;
        }
        let keep = from / self.chunk;
        let ptr = DevicePtr((self.ranges[i].base + from) as u64);
        // SAFETY: the chunks from `keep` on are mapped there by this source (invariant of
        // `Reservation`), adjacent, and nothing uses them (the callers' contracts, and the
        // synchronisation before any unmap of memory that was handed out).
        if let Err(e) = unsafe { self.driver.mem_unmap(ptr, bytes) } {
            self.last = Some(e);
            return;
        }
        for handle in self.ranges[i].chunks.drain(keep..) {
            // SAFETY: the handle came from `mem_create`, is no longer mapped, and is dropped
            // from the books here, so never used again.
            if let Err(e) = unsafe { self.driver.mem_release(handle) } {
                self.last = Some(e);
            }
        }
    }

    /// Waits for all queued work before memory is unmapped (`cuMemUnmap` does not).
    fn synchronize(&mut self) {
        if let Err(e) = self.driver.ctx_synchronize() {
            self.last = Some(e);
        }
    }
}

// SAFETY: a region is the mapped start of a reservation this source owns, every byte of it
// backed by a chunk with access granted (invariant of `Reservation`), until it is shrunk or
// given back; grown chunks continue it within the same reservation, so it stays reachable
// through its base. Detached tags never touch it. No range is handed out twice: a reservation
// holds at most one region (`used`).
unsafe impl<D: Driver> RegionSource for VmmSource<D> {
    type Base = usize;

    fn addr(base: usize) -> usize {
        base
    }

    fn granularity(&self) -> usize {
        self.chunk
    }

    fn obtain(&mut self, min: usize) -> Result<(usize, usize), Error> {
        let len = min
            .checked_next_multiple_of(self.chunk)
            .filter(|&l| l > 0)
            .ok_or(Error::SizeOverflow)?;
        let i = match self.ranges.iter().position(|r| !r.used && r.size >= len) {
            Some(i) => i,
            None => {
                let size = self.reservation_size(len)?;
                // Aligned to the chunk: the pool cuts regions at multiples of the
                // granularity counted from address 0, so a base must be one.
                let ptr = self
                    .driver
                    .mem_address_reserve(size, self.chunk)
                    .map_err(|e| refused(e, &mut self.last))?;
                self.ranges.push(Reservation {
                    base: ptr.0 as usize,
                    size,
                    used: false,
                    chunks: Vec::new(),
                });
                self.ranges.len() - 1
            }
        };
        self.map_chunks(i, 0, len)?;
        self.ranges[i].used = true;
        Ok((self.ranges[i].base, len))
    }

    unsafe fn give_back(&mut self, base: usize, len: usize) {
        let Some(i) = self.range_of(base) else {
            return;
        };
        self.synchronize();
        debug_assert_eq!(len, self.ranges[i].chunks.len() * self.chunk);
        self.unmap_from(i, 0, len);
        self.ranges[i].used = false;
        // Keep one spare range for the next region; free the others.
        let spares = self.ranges.iter().filter(|r| !r.used).count();
        if spares > 1 && self.ranges[i].chunks.is_empty() {
            let r = self.ranges.swap_remove(i);
            // SAFETY: the reservation is this source's, and nothing is mapped in it.
            if let Err(e) = unsafe {
                self.driver
                    .mem_address_free(DevicePtr(r.base as u64), r.size)
            } {
                self.last = Some(e);
            }
        }
    }

    fn grow(&mut self, base: usize, len: usize, additional: usize) -> Result<usize, Error> {
        let i = self.range_of(base).ok_or(Error::UnknownRegion)?;
        let add = additional
            .checked_next_multiple_of(self.chunk)
            .ok_or(Error::SizeOverflow)?;
        let r = &self.ranges[i];
        if !r.used || len != r.chunks.len() * self.chunk {
            return Err(Error::UnknownRegion);
        }
        if len.checked_add(add).is_none_or(|end| end > r.size) {
            // The reservation is full: the pool takes a new region.
            return Err(Error::OutOfMemory);
        }
        self.map_chunks(i, len, add)?;
        Ok(add)
    }

    unsafe fn shrink(&mut self, base: usize, len: usize, keep: usize) -> bool {
        let Some(i) = self.range_of(base) else {
            return false;
        };
        if !keep.is_multiple_of(self.chunk)
            || keep >= len
            || len != self.ranges[i].chunks.len() * self.chunk
        {
            return false;
        }
        self.synchronize();
        let before = self.ranges[i].chunks.len();
        self.unmap_from(i, keep, len - keep);
        self.ranges[i].chunks.len() < before
    }

    fn available(&self) -> Option<usize> {
        free_memory(&self.driver)
    }
}

impl<D: Driver> Drop for VmmSource<D> {
    /// Frees every reservation with nothing mapped. A range whose region is still mapped (a
    /// pool dropped with blocks live) is left alone, never unmapped under its owner: it goes
    /// with the driver.
    fn drop(&mut self) {
        for r in self.ranges.iter().filter(|r| !r.used) {
            // SAFETY: the reservation is this source's and nothing is mapped in it.
            let _ = unsafe {
                self.driver
                    .mem_address_free(DevicePtr(r.base as u64), r.size)
            };
        }
    }
}
