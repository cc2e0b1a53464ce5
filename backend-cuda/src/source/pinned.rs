//! [`PinnedSource`]: page-locked host memory the device can reach, for a host pool.

use core::ptr::NonNull;

use tagalloc::{Error, RegionSource};

use super::refused;
use crate::driver::{Driver, PinFlags};
use crate::error::DriverError;

/// The granularity of pinned regions: a page, the alignment `cuMemHostAlloc` returns.
pub(crate) const PAGE: usize = 4096;

/// Regions of pinned host memory: `cuMemHostAlloc` when the pool obtains one, `cuMemFreeHost`
/// when it gives one back. The memory is ordinary host memory to the CPU (an
/// [`tagalloc::InlineHeap`] keeps its tags in it) and reachable from the device, so copies
/// from and to it run asynchronously at full speed.
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use tagalloc::{InlineHeap, Policy, Pool};
/// use tagalloc_cuda::fake::{FakeConfig, FakeDriver};
/// use tagalloc_cuda::{PinnedSource, PinFlags};
///
/// let gpu = FakeDriver::new(FakeConfig::default())?;
/// let source = PinnedSource::new(&gpu, PinFlags::PORTABLE);
/// let mut pool = Pool::new(InlineHeap::new(), source, Policy::new());
/// let p = pool.alloc(1000, 16)?; // a staging buffer the host may write
/// // SAFETY: `p` is a live 1000-byte block of the pool.
/// unsafe { p.as_ptr().write_bytes(7, 1000) };
/// // SAFETY: freed once, with its size, and not used after.
/// unsafe { pool.free(p, 1000)? };
/// pool.trim();
/// assert_eq!(gpu.outstanding().host_allocations, 0);
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct PinnedSource<D: Driver> {
    driver: D,
    flags: PinFlags,
    last: Option<DriverError>,
}

impl<D: Driver> PinnedSource<D> {
    /// A source of memory pinned with `flags` (portable, for a pool that serves several
    /// devices; mapped into the device's address space).
    pub fn new(driver: D, flags: PinFlags) -> PinnedSource<D> {
        PinnedSource {
            driver,
            flags,
            last: None,
        }
    }

    /// The driver.
    pub fn driver(&self) -> &D {
        &self.driver
    }

    /// The last driver error met, if any.
    pub fn last_error(&self) -> Option<DriverError> {
        self.last
    }
}

// SAFETY: a region is a live `cuMemHostAlloc` allocation of the length handed out: readable
// and writable host memory, page-aligned, used by nothing else, until `give_back` frees it.
// The driver never hands out a live allocation twice.
unsafe impl<D: Driver> RegionSource for PinnedSource<D> {
    type Base = NonNull<u8>;

    fn addr(base: NonNull<u8>) -> usize {
        base.addr().get()
    }

    fn granularity(&self) -> usize {
        PAGE
    }

    fn obtain(&mut self, min: usize) -> Result<(NonNull<u8>, usize), Error> {
        let len = min
            .checked_next_multiple_of(PAGE)
            .filter(|&l| l > 0)
            .ok_or(Error::SizeOverflow)?;
        let ptr = self
            .driver
            .host_alloc(len, self.flags)
            .map_err(|e| refused(e, &mut self.last))?;
        Ok((ptr, len))
    }

    unsafe fn give_back(&mut self, base: NonNull<u8>, _len: usize) {
        // Copies queued from or to the memory must finish before it goes.
        if let Err(e) = self.driver.ctx_synchronize() {
            self.last = Some(e);
        }
        // SAFETY: the region came from `host_alloc` (this source's `obtain`) and the pool,
        // which removed it, holds no reference into it; queued work finished above.
        if let Err(e) = unsafe { self.driver.host_free(base) } {
            self.last = Some(e);
        }
    }
}
