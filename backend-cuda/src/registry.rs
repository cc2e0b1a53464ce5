//! [`PoolRegistry`]: one pool per device, created when the device is first asked for.

use std::sync::{Arc, Mutex, OnceLock};

use crate::cuda::CudaDriver;
use crate::device_pool::{DeviceConfig, DeviceError, DevicePool};
use crate::driver::Driver;
use crate::error::{code, DriverError};
use crate::shared_device::SharedDevicePool;
use crate::source::Regions;

/// How a registry opens a device's driver.
type Open<D> = dyn Fn(u32) -> Result<D, DriverError> + Send + Sync;

/// One [`SharedDevicePool`] per device ordinal, created lazily: the first request for device
/// `n` opens its driver and builds its pool as the configuration says (with plain regions
/// instead of virtual-memory growth on a device that has no virtual memory management);
/// every later one gets the same pool. A device that does not exist is
/// [`DriverError::NoDevice`].
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use tagalloc_cuda::fake::{FakeConfig, FakeDriver};
/// use tagalloc_cuda::{DeviceConfig, DriverError, PoolRegistry, Driver};
///
/// // A driver a shared pool can clone (to wait for the device without its lock).
/// let devices = PoolRegistry::new(2, DeviceConfig::VMM, |device| {
///     let gpu = FakeDriver::new(FakeConfig { device, device_count: 2, ..FakeConfig::default() });
///     gpu.map(std::sync::Arc::new)
/// });
/// let pool = devices.get(1)?;
/// assert!(std::sync::Arc::ptr_eq(&pool, &devices.get(1)?), "one pool per device");
/// let block = pool.alloc(4096, pool.with(|p| p.driver().default_stream()))?;
/// pool.free(block)?;
/// assert!(devices.get(2).is_err(), "there is no device 2");
/// # Ok(())
/// # }
/// ```
pub struct PoolRegistry<D: Driver> {
    count: u32,
    config: DeviceConfig,
    open: Box<Open<D>>,
    pools: Box<[OnceLock<Arc<SharedDevicePool<D>>>]>,
    /// Held while a pool is being created, so that two threads never open one device twice.
    creating: Mutex<()>,
}

impl<D: Driver> std::fmt::Debug for PoolRegistry<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PoolRegistry")
            .field("count", &self.count)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl<D: Driver> PoolRegistry<D> {
    /// A registry of `count` devices whose drivers `open` makes, each pool set up as `config`
    /// says.
    pub fn new(
        count: u32,
        config: DeviceConfig,
        open: impl Fn(u32) -> Result<D, DriverError> + Send + Sync + 'static,
    ) -> PoolRegistry<D> {
        PoolRegistry {
            count,
            config,
            open: Box::new(open),
            pools: (0..count).map(|_| OnceLock::new()).collect(),
            creating: Mutex::new(()),
        }
    }

    /// How many devices there are.
    pub fn device_count(&self) -> u32 {
        self.count
    }

    /// The configuration every pool is made with.
    pub fn config(&self) -> &DeviceConfig {
        &self.config
    }

    /// The pools created so far, by device.
    pub fn created(&self) -> Vec<Arc<SharedDevicePool<D>>> {
        self.pools.iter().filter_map(|p| p.get().cloned()).collect()
    }
}

impl<D: Driver + Clone> PoolRegistry<D> {
    /// The pool of device `device`, created on first use. Errors: no such device
    /// ([`DriverError::NoDevice`]), or whatever opening its driver or building its pool met
    /// (the next call tries again).
    pub fn get(&self, device: u32) -> Result<Arc<SharedDevicePool<D>>, DeviceError> {
        let slot =
            self.pools
                .get(device as usize)
                .ok_or(DeviceError::Driver(DriverError::NoDevice {
                    ordinal: device,
                    count: self.count,
                }))?;
        if let Some(p) = slot.get() {
            return Ok(Arc::clone(p));
        }
        let _creating = self.creating.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(p) = slot.get() {
            return Ok(Arc::clone(p));
        }
        let pool = Arc::new(self.new_pool(device)?);
        Ok(Arc::clone(slot.get_or_init(|| pool)))
    }

    /// A new pool for `device` (an ordinal below the count) as the configuration says, not
    /// the registry's: a private pool, such as a CUDA graph's. Errors as for
    /// [`PoolRegistry::get`].
    pub fn new_pool(&self, device: u32) -> Result<SharedDevicePool<D>, DeviceError> {
        let pool = match DevicePool::new((self.open)(device)?, self.config) {
            // A device without virtual memory management: plain regions, same policy.
            Err(DeviceError::Driver(e))
                if e.code() == Some(code::NOT_SUPPORTED)
                    && matches!(self.config.regions, Regions::Vmm { .. }) =>
            {
                let plain = DeviceConfig {
                    regions: Regions::PLAIN,
                    ..self.config
                };
                DevicePool::new((self.open)(device)?, plain)?
            }
            other => other?,
        };
        Ok(SharedDevicePool::new(device, pool))
    }
}

impl PoolRegistry<CudaDriver> {
    /// A registry of the machine's CUDA devices. Errors: no driver
    /// ([`DriverError::NoDriver`]), a driver older than CUDA 12.0, or no device at all.
    pub fn cuda(config: DeviceConfig) -> Result<PoolRegistry<CudaDriver>, DriverError> {
        let count = CudaDriver::count_devices()?;
        if count == 0 {
            return Err(DriverError::NoDevice {
                ordinal: 0,
                count: 0,
            });
        }
        Ok(PoolRegistry::new(count, config, CudaDriver::new))
    }
}
