//! [`DeviceBuffer`]: a typed handle on device memory from a pool, freed to the pool (on its
//! stream) when dropped.

use core::marker::PhantomData;
use std::sync::Arc;

use tagalloc::{Error, PoolError};

use crate::device_pool::{DeviceBlock, DeviceError};
use crate::driver::{DevicePtr, Driver};
use crate::shared_device::SharedDevicePool;

impl<D: Driver> SharedDevicePool<D> {
    /// A typed buffer of `len` values of `T` on `stream`, freed to this pool when dropped.
    /// Errors: `len == 0` or a zero-sized `T` (`ZeroSize`), a size that overflows
    /// (`SizeOverflow`), a `T` aligned beyond the pool's granule (`BadAlign`), and every error
    /// of [`DevicePool::alloc`](crate::DevicePool::alloc).
    pub fn buffer<T>(
        self: &Arc<Self>,
        len: usize,
        stream: D::Stream,
    ) -> Result<DeviceBuffer<T, D>, DeviceError> {
        DeviceBuffer::new(self, len, stream)
    }
}

/// `len` values of `T` in device memory, allocated on a stream from a [`SharedDevicePool`]
/// and freed to it on that stream when dropped: the free never waits for the device, and
/// other streams get the memory only after the work queued so far on the buffer's stream (and
/// on every stream named to [`DeviceBuffer::record_stream`]) has finished.
///
/// The memory is not initialised and never touched by the host. With the real driver,
/// [`CudaBuffer`](crate::CudaBuffer) wraps one so that cudarc's copies and kernel launches
/// take it directly.
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::sync::Arc;
/// use tagalloc_cuda::fake::{FakeConfig, FakeDriver};
/// use tagalloc_cuda::{DeviceConfig, DevicePool, Driver, SharedDevicePool};
///
/// let gpu = Arc::new(FakeDriver::new(FakeConfig::default())?);
/// let pool = Arc::new(SharedDevicePool::new(0, DevicePool::new(gpu.clone(), DeviceConfig::VMM)?));
/// let stream = gpu.default_stream();
/// let buf = pool.buffer::<f32>(1 << 20, stream)?;
/// assert_eq!((buf.len(), buf.num_bytes()), (1 << 20, 4 << 20));
/// drop(buf); // back to the pool, on its stream
/// assert_eq!(pool.stats().pool.heap.in_use, 0);
/// # Ok(())
/// # }
/// ```
pub struct DeviceBuffer<T, D: Driver> {
    pool: Arc<SharedDevicePool<D>>,
    block: DeviceBlock<D::Stream>,
    len: usize,
    _values: PhantomData<T>,
}

// SAFETY: the buffer holds device memory (never host data of type `T`) and a handle on a
// shared pool, which is `Sync`: moving or sharing the handle between threads is what the pool
// is built for.
unsafe impl<T, D: Driver + Send> Send for DeviceBuffer<T, D> {}
// SAFETY: as above; `&DeviceBuffer` only reads the block's address and length.
unsafe impl<T, D: Driver + Send> Sync for DeviceBuffer<T, D> {}

impl<T, D: Driver> std::fmt::Debug for DeviceBuffer<T, D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceBuffer")
            .field("ptr", &self.block.ptr())
            .field("len", &self.len)
            .field("stream", &self.block.stream())
            .finish()
    }
}

impl<T, D: Driver> DeviceBuffer<T, D> {
    pub(crate) fn new(
        pool: &Arc<SharedDevicePool<D>>,
        len: usize,
        stream: D::Stream,
    ) -> Result<DeviceBuffer<T, D>, DeviceError> {
        let refuse = |error: Error, requested: usize| DeviceError::Pool {
            error: PoolError {
                error,
                requested,
                reserved: 0,
                in_use: 0,
                limit: None,
            },
            driver: None,
        };
        let bytes = len
            .checked_mul(size_of::<T>())
            .ok_or(refuse(Error::SizeOverflow, usize::MAX))?;
        if bytes == 0 {
            return Err(refuse(Error::ZeroSize, 0));
        }
        let granule = pool.with(|p| p.pool().heap().granule());
        if align_of::<T>() > granule {
            return Err(refuse(Error::BadAlign, bytes));
        }
        let block = pool.alloc(bytes, stream)?;
        Ok(DeviceBuffer {
            pool: Arc::clone(pool),
            block,
            len,
            _values: PhantomData,
        })
    }

    /// The number of values.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds no value (never: empty buffers are refused).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Its size in bytes.
    pub fn num_bytes(&self) -> usize {
        self.block.size()
    }

    /// The device address of its first value (never dereference it on the host).
    pub fn ptr(&self) -> DevicePtr {
        self.block.ptr()
    }

    /// The stream it belongs to.
    pub fn stream(&self) -> D::Stream {
        self.block.stream()
    }

    /// The pool it frees itself to.
    pub fn pool(&self) -> &Arc<SharedDevicePool<D>> {
        &self.pool
    }

    /// Marks the buffer as used by `other` as well (see [`DevicePool::record_stream`]): its
    /// memory goes to another stream only after the work queued on `other` up to its free has
    /// finished too.
    ///
    /// [`DevicePool::record_stream`]: crate::DevicePool::record_stream
    pub fn record_stream(&self, other: D::Stream) -> Result<(), DeviceError> {
        self.pool.record_stream(&self.block, other)
    }
}

impl<T, D: Driver> Drop for DeviceBuffer<T, D> {
    /// Frees the memory to the pool on the buffer's stream. The block is live (the buffer owns
    /// it), so the only possible failure is an event the pool could not record when the free
    /// fills a batch; the block then stays pending and goes back at the next synchronisation.
    fn drop(&mut self) {
        let _ = self.pool.free(self.block);
    }
}
