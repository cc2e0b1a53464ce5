//! [`SharedDevicePool`]: a [`DevicePool`] shared between threads, the unit a
//! [`PoolRegistry`](crate::PoolRegistry) hands out per device and a
//! [`DeviceBuffer`](crate::DeviceBuffer) frees itself to (its `buffer` method is with the
//! buffer, in `buffer.rs`).

use std::any::Any;
use std::sync::{Mutex, MutexGuard};

use tagalloc::Trimmed;

use crate::device_pool::{synchronize, DeviceBlock, DeviceError, DevicePool, DeviceStats, Miss};
use crate::driver::Driver;

/// A [`DevicePool`] behind a mutex, for one device, shared by every thread (and every buffer)
/// that allocates there. The host work of an allocation is tens of nanoseconds, so one lock
/// per device is not where time goes, and no thread waits for the device while it holds the
/// lock: the pool's one host wait of an allocation (the device out of memory while frees are
/// pending) and that of a trim happen with the lock released, through a handle on the driver
/// kept here for that (a clone of the pool's), so another thread's allocation on a stream
/// whose memory is at hand goes on meanwhile.
///
/// Why not the core's sharing layer (`tagalloc::SharedAlloc`, and the lock with queued frees
/// behind `GlobalHeap` and `SharedPool`): that layer hands out host memory by size and writes
/// `GlobalAlloc` and `Allocator` over it, whose callers dereference what they get and name no
/// stream; a device block is neither addressable from the host nor free of its stream. What
/// is left of it, the lock with queued frees, would defer a free that finds the lock taken to
/// the next holder and drop its result, while a device free makes driver calls (an event on
/// its stream) whose errors its caller gets back; and a thread of this pool may wait for the
/// device, so waiters must sleep, which `std`'s mutex does with no lock crate added.
pub struct SharedDevicePool<D: Driver> {
    device: u32,
    pool: Mutex<DevicePool<D>>,
    /// The pool's driver, to wait for the device without holding the pool's lock.
    waiter: D,
    /// Whatever must live as long as the pool, by key: the streams (cudarc's
    /// `Arc<CudaStream>`, keyed by their handle) whose handles the pool holds, so none is
    /// destroyed while the pool may still record an event on it.
    keep: Mutex<Vec<(usize, Box<dyn Any + Send + Sync>)>>,
}

impl<D: Driver> std::fmt::Debug for SharedDevicePool<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedDevicePool")
            .field("device", &self.device)
            .finish_non_exhaustive()
    }
}

impl<D: Driver + Clone> SharedDevicePool<D> {
    /// Shares `pool`, the pool of device `device`.
    pub fn new(device: u32, pool: DevicePool<D>) -> SharedDevicePool<D> {
        SharedDevicePool {
            device,
            waiter: pool.driver().clone(),
            pool: Mutex::new(pool),
            keep: Mutex::new(Vec::new()),
        }
    }
}

impl<D: Driver> SharedDevicePool<D> {
    /// A handle on the pool's driver, for calls that need none of the pool's state (asking
    /// which capture a stream is in), made without its lock.
    pub fn driver(&self) -> &D {
        &self.waiter
    }

    /// Tells the pool a CUDA graph capture began on its device (see
    /// [`DevicePool::capture_begun`]).
    pub fn capture_begun(&self) {
        self.lock().capture_begun();
    }

    /// Tells the pool a capture on its device ended (see [`DevicePool::capture_ended`]).
    pub fn capture_ended(&self) -> Result<(), DeviceError> {
        self.lock().capture_ended()
    }

    /// Makes the pool keep every region it obtains (see [`DevicePool::keep_regions`]).
    pub fn keep_regions(&self) {
        self.lock().keep_regions();
    }

    /// The device's ordinal.
    pub fn device(&self) -> u32 {
        self.device
    }

    /// The locked pool. A panic while it was held (a failed assertion in another thread)
    /// leaves no half-made change the pool's next call relies on: carry on.
    pub fn lock(&self) -> MutexGuard<'_, DevicePool<D>> {
        self.pool.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `f` with the locked pool.
    pub fn with<R>(&self, f: impl FnOnce(&mut DevicePool<D>) -> R) -> R {
        f(&mut self.lock())
    }

    /// Allocates `size` bytes on `stream` (see [`DevicePool::alloc`]); when that needs the
    /// host to wait for the device, it waits with the lock released.
    pub fn alloc(
        &self,
        size: usize,
        stream: D::Stream,
    ) -> Result<DeviceBlock<D::Stream>, DeviceError> {
        let mut pool = self.lock();
        match pool.try_alloc(size, stream) {
            Ok(b) => Ok(b),
            Err(Miss::Fail(e)) => Err(e),
            Err(Miss::Sync(_)) => {
                drop(pool);
                self.wait_for_device()?;
                self.lock().alloc_without_sync(size, stream)
            }
        }
    }

    /// Synchronises the context with the pool's lock released, then returns what the
    /// synchronisation covered to the heap.
    #[cold]
    fn wait_for_device(&self) -> Result<(), DeviceError> {
        let ticket = self.lock().prepare_sync()?;
        if let Some(ticket) = ticket {
            let ns = synchronize(&self.waiter)?;
            self.lock().synced(ticket, ns);
        }
        Ok(())
    }

    /// Frees a block on its stream (see [`DevicePool::free`]).
    pub fn free(&self, block: DeviceBlock<D::Stream>) -> Result<(), DeviceError> {
        self.lock().free(block)
    }

    /// Marks a block as used by another stream (see [`DevicePool::record_stream`]).
    pub fn record_stream(
        &self,
        block: &DeviceBlock<D::Stream>,
        other: D::Stream,
    ) -> Result<(), DeviceError> {
        self.lock().record_stream(block, other)
    }

    /// Stops using a stream (see [`DevicePool::forget_stream`]).
    pub fn forget_stream(&self, stream: D::Stream) -> Result<(), DeviceError> {
        self.lock().forget_stream(stream)
    }

    /// Empties the cache (see [`DevicePool::trim`]), waiting for the device with the lock
    /// released.
    pub fn trim(&self) -> Result<Trimmed, DeviceError> {
        self.wait_for_device()?;
        // Frees that came in while the lock was released stay pending: their chunks are
        // live, so the trim leaves them, as it leaves blocks in use.
        Ok(self.lock().trim_synced())
    }

    /// The pool's statistics.
    pub fn stats(&self) -> DeviceStats {
        self.lock().stats()
    }

    /// Keeps `value` alive as long as the pool (a stream the pool holds the handle of), once
    /// per `key`: a second value with a key already kept is dropped at once.
    pub fn keep_alive(&self, key: usize, value: Box<dyn Any + Send + Sync>) {
        let mut keep = self.keep.lock().unwrap_or_else(|e| e.into_inner());
        if !keep.iter().any(|(k, _)| *k == key) {
            keep.push((key, value));
        }
    }

    /// How many values [`SharedDevicePool::keep_alive`] keeps.
    pub fn kept(&self) -> usize {
        self.keep.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}
