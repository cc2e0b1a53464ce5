//! [`PlainSource`]: one device allocation per region.

use tagalloc::{Error, RegionSource};

use super::{free_memory, refused};
use crate::driver::{DevicePtr, Driver};
use crate::error::{code, DriverError};

/// The alignment `cuMemAlloc` guarantees, and so the granularity of a plain source: region
/// bases are aligned to it and nothing more may be assumed.
pub(crate) const ALLOC_ALIGN: usize = 256;

/// Regions that are device allocations: `cuMemAlloc` when the pool obtains one, `cuMemFree`
/// when it gives one back. Regions cannot grow in place (a pool over this source adds new
/// regions), and a region's free tail is never given back alone.
///
/// Invariant: `round` is a power of two of at least `ALLOC_ALIGN` (256).
#[derive(Debug)]
pub struct PlainSource<D: Driver> {
    driver: D,
    round: usize,
    last: Option<DriverError>,
}

impl<D: Driver> PlainSource<D> {
    /// A source whose regions are `cuMemAlloc` allocations with lengths rounded up to `round`
    /// bytes, a power of two of at least 256 (else `CUDA_ERROR_INVALID_VALUE`, before any
    /// call).
    pub fn new(driver: D, round: usize) -> Result<PlainSource<D>, DriverError> {
        if !round.is_power_of_two() || round < ALLOC_ALIGN {
            return Err(DriverError::cuda("PlainSource::new", code::INVALID_VALUE));
        }
        Ok(PlainSource {
            driver,
            round,
            last: None,
        })
    }

    /// The driver.
    pub fn driver(&self) -> &D {
        &self.driver
    }

    /// The rounding of region lengths.
    pub fn round(&self) -> usize {
        self.round
    }

    /// The last driver error met, if any.
    pub fn last_error(&self) -> Option<DriverError> {
        self.last
    }

    /// The last driver error met, forgotten.
    pub fn take_last_error(&mut self) -> Option<DriverError> {
        self.last.take()
    }
}

// SAFETY: a region is a live `cuMemAlloc` allocation of at least the length handed out,
// reachable through its base, until `give_back` frees it; detached tags never touch it. It is
// never handed out twice (the driver never returns a live allocation again).
unsafe impl<D: Driver> RegionSource for PlainSource<D> {
    type Base = usize;

    fn addr(base: usize) -> usize {
        base
    }

    fn granularity(&self) -> usize {
        ALLOC_ALIGN
    }

    fn obtain(&mut self, min: usize) -> Result<(usize, usize), Error> {
        let len = min
            .checked_next_multiple_of(self.round)
            .ok_or(Error::SizeOverflow)?;
        let ptr = self
            .driver
            .mem_alloc(len)
            .map_err(|e| refused(e, &mut self.last))?;
        let base = usize::try_from(ptr.0).map_err(|_| Error::RegionMisaligned)?;
        Ok((base, len))
    }

    unsafe fn give_back(&mut self, base: usize, _len: usize) {
        // SAFETY: the region came from `mem_alloc` (this source's `obtain`) and the pool uses
        // it no more. `cuMemFree` waits for the device's queued work before it frees, so work
        // still queued on a stream that used the region finishes first. A failure leaves the
        // allocation with the driver (released with its context); it is remembered.
        if let Err(e) = unsafe { self.driver.mem_free(DevicePtr(base as u64)) } {
            self.last = Some(e);
        }
    }

    fn available(&self) -> Option<usize> {
        free_memory(&self.driver)
    }
}
