//! Region sources over the [driver seam](crate::Driver): where a device pool's memory comes
//! from. Each implements the core's [`RegionSource`], so the core's [`tagalloc::Pool`] grows,
//! limits, bypasses and trims over it under a [`tagalloc::Policy`] (docs/design.md, "Pools and
//! policies" and "Stream order on the device"):
//!
//! - [`PlainSource`] ([`plain`]): one device allocation (`cuMemAlloc`) per region, freed
//!   (`cuMemFree`) when the pool gives the region back. Regions never merge, even where the
//!   driver happens to place them side by side.
//! - [`VmmSource`] ([`vmm`]): virtual-memory growth. A large device address range is reserved
//!   once (`cuMemAddressReserve`; costs no memory), and physical chunks are created and mapped
//!   at its end as the pool grows (`cuMemCreate`, `cuMemMap`, `cuMemSetAccess`), through
//!   [`RegionSource::grow`], so the pool stays **one** contiguous region that never fragments
//!   across segments; trimming unmaps and releases free tail chunks
//!   ([`RegionSource::shrink`]). PyTorch's expandable segments and MindSpore's VMM pool work
//!   the same way.
//! - [`DeviceSource`]: either of the two, chosen at run time ([`Regions`]), what
//!   [`DevicePool`](crate::DevicePool) grows from.
//! - [`PinnedSource`] ([`pinned`]): page-locked host memory (`cuMemHostAlloc`) for a host
//!   pool, and [`RegisterHook`] ([`register`]): core [`Hooks`](tagalloc::Hooks) that register
//!   every region of any host pool with CUDA (`cuMemHostRegister`) and unregister it before it
//!   goes back.
//!
//! Every source reports how much the device has free ([`RegionSource::available`], from
//! `cuMemGetInfo`), so a [`tagalloc::Reserve::Fraction`] policy pre-allocates a share of it.
//! A driver failure reaches the pool as [`Error::OutOfMemory`] (the core's errors have no room
//! for a driver's); the source keeps the [`DriverError`] itself ([`DeviceSource::last_error`])
//! so that a device pool can report it.
//!
//! The device sources' `Base` is the device address as a `usize`: they serve the core's
//! [`tagalloc::DetachedHeap`], whose tags never touch the memory they manage.

mod pinned;
mod plain;
mod register;
mod vmm;

pub use pinned::PinnedSource;
pub use plain::PlainSource;
pub use register::RegisterHook;
pub use vmm::VmmSource;

use tagalloc::{Error, RegionSource};

use crate::driver::Driver;
use crate::error::DriverError;

/// The granule of a device pool unless another is chosen: 256 bytes, the alignment
/// `cuMemAlloc` guarantees.
pub(crate) const DEVICE_GRANULE: usize = tagalloc::DEVICE_GRANULE;

/// How a device pool obtains its regions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Regions {
    /// One `cuMemAlloc` per region, each region's length rounded up to `round` bytes (a power
    /// of two of at least 256; 2 MiB matches what the driver maps for large allocations
    /// anyway, and PyTorch's rounding of large segments).
    Plain {
        /// Region lengths are multiples of this.
        round: usize,
    },
    /// Virtual-memory growth: reservations of `reserve` bytes (0: the device's total memory)
    /// into which physical chunks of `chunk` bytes (a power of two and a multiple of the
    /// device's minimum granularity) are mapped as the pool grows; the chunk is also the unit
    /// of trimming.
    Vmm {
        /// Bytes of each physical chunk.
        chunk: usize,
        /// Bytes of address space reserved at once; 0 for the device's total memory.
        reserve: usize,
    },
}

impl Regions {
    /// Plain allocations rounded to 2 MiB.
    pub const PLAIN: Regions = Regions::Plain { round: 2 << 20 };
    /// Virtual-memory growth in chunks of 64 MiB within a reservation of the device's size.
    pub const VMM: Regions = Regions::Vmm {
        chunk: 64 << 20,
        reserve: 0,
    };
}

/// A device region source chosen at run time: [`PlainSource`] or [`VmmSource`]. The choice
/// costs one branch per source call, and the pool calls its source only when it grows or
/// trims.
#[derive(Debug)]
pub enum DeviceSource<D: Driver> {
    /// One device allocation per region.
    Plain(PlainSource<D>),
    /// Virtual-memory growth.
    Vmm(VmmSource<D>),
}

impl<D: Driver> DeviceSource<D> {
    /// A source over `driver` as `regions` says. Errors: a configuration the driver refuses
    /// (a chunk that is not a multiple of the granularity, a device without virtual memory
    /// management for [`Regions::Vmm`]).
    pub fn new(driver: D, regions: Regions) -> Result<DeviceSource<D>, DriverError> {
        Ok(match regions {
            Regions::Plain { round } => DeviceSource::Plain(PlainSource::new(driver, round)?),
            Regions::Vmm { chunk, reserve } => {
                DeviceSource::Vmm(VmmSource::new(driver, chunk, reserve)?)
            }
        })
    }

    /// The driver the source allocates from.
    pub fn driver(&self) -> &D {
        match self {
            DeviceSource::Plain(s) => s.driver(),
            DeviceSource::Vmm(s) => s.driver(),
        }
    }

    /// The last driver error a source call met (and turned into `OutOfMemory` for the pool),
    /// if any since [`DeviceSource::take_last_error`].
    pub fn last_error(&self) -> Option<DriverError> {
        match self {
            DeviceSource::Plain(s) => s.last_error(),
            DeviceSource::Vmm(s) => s.last_error(),
        }
    }

    /// [`DeviceSource::last_error`], forgotten.
    pub fn take_last_error(&mut self) -> Option<DriverError> {
        match self {
            DeviceSource::Plain(s) => s.take_last_error(),
            DeviceSource::Vmm(s) => s.take_last_error(),
        }
    }

    /// Which kind of regions it hands out.
    pub fn regions(&self) -> Regions {
        match self {
            DeviceSource::Plain(s) => Regions::Plain { round: s.round() },
            DeviceSource::Vmm(s) => Regions::Vmm {
                chunk: s.chunk(),
                reserve: s.reserve(),
            },
        }
    }
}

// SAFETY: forwards to the two sources, whose contracts are the same as this one's.
unsafe impl<D: Driver> RegionSource for DeviceSource<D> {
    type Base = usize;

    fn addr(base: usize) -> usize {
        base
    }

    fn granularity(&self) -> usize {
        match self {
            DeviceSource::Plain(s) => s.granularity(),
            DeviceSource::Vmm(s) => s.granularity(),
        }
    }

    fn obtain(&mut self, min: usize) -> Result<(usize, usize), Error> {
        match self {
            DeviceSource::Plain(s) => s.obtain(min),
            DeviceSource::Vmm(s) => s.obtain(min),
        }
    }

    unsafe fn give_back(&mut self, base: usize, len: usize) {
        match self {
            // SAFETY: forwarded caller contract.
            DeviceSource::Plain(s) => unsafe { s.give_back(base, len) },
            // SAFETY: forwarded caller contract.
            DeviceSource::Vmm(s) => unsafe { s.give_back(base, len) },
        }
    }

    fn grow(&mut self, base: usize, len: usize, additional: usize) -> Result<usize, Error> {
        match self {
            DeviceSource::Plain(s) => s.grow(base, len, additional),
            DeviceSource::Vmm(s) => s.grow(base, len, additional),
        }
    }

    unsafe fn shrink(&mut self, base: usize, len: usize, keep: usize) -> bool {
        match self {
            // SAFETY: forwarded caller contract.
            DeviceSource::Plain(s) => unsafe { s.shrink(base, len, keep) },
            // SAFETY: forwarded caller contract.
            DeviceSource::Vmm(s) => unsafe { s.shrink(base, len, keep) },
        }
    }

    fn available(&self) -> Option<usize> {
        match self {
            DeviceSource::Plain(s) => s.available(),
            DeviceSource::Vmm(s) => s.available(),
        }
    }
}

/// What the pool is told when a driver call fails: the core's errors have no room for a
/// driver's, so every failure reads as exhaustion there, and `last` keeps the real one.
fn refused(e: DriverError, last: &mut Option<DriverError>) -> Error {
    *last = Some(e);
    Error::OutOfMemory
}

/// The device's free memory, if the driver can say.
fn free_memory<D: Driver>(driver: &D) -> Option<usize> {
    driver.mem_get_info().ok().map(|m| m.free)
}
