//! [`SharedDevicePool`]: a [`DevicePool`] shared between threads, the unit a
//! [`PoolRegistry`](crate::PoolRegistry) hands out per device and a
//! [`DeviceBuffer`](crate::DeviceBuffer) frees itself to (its `buffer` method is with the
//! buffer, in `buffer.rs`).

use std::any::Any;
use std::sync::{Mutex, MutexGuard};

use tagalloc::Trimmed;

use crate::device_pool::{DeviceBlock, DeviceError, DevicePool, DeviceStats};
use crate::driver::Driver;

/// A [`DevicePool`] behind a mutex, for one device, shared by every thread (and every buffer)
/// that allocates there. The host work of an allocation is tens of nanoseconds, so one lock
/// per device is not where time goes; a thread never holds it across a driver wait except
/// when the pool itself must synchronise (switching to several streams, running out).
///
/// Why not the core's sharing layer (`tagalloc::SharedAlloc`, and the lock with queued frees
/// behind `GlobalHeap` and `SharedPool`): that layer hands out host memory by size and writes
/// `GlobalAlloc` and `Allocator` over it, whose callers dereference what they get and name no
/// stream; a device block is neither addressable from the host nor free of its stream. What
/// is left of it, the lock with queued frees, would defer a free that finds the lock taken to
/// the next holder and drop its result, while a device free makes driver calls (an event on
/// its stream) whose errors its caller gets back; and this pool's holder may wait for the
/// device (`cuStreamSynchronize`), so waiters must sleep, which `std`'s mutex does with no
/// lock crate added.
pub struct SharedDevicePool<D: Driver> {
    device: u32,
    pool: Mutex<DevicePool<D>>,
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

impl<D: Driver> SharedDevicePool<D> {
    /// Shares `pool`, the pool of device `device`.
    pub fn new(device: u32, pool: DevicePool<D>) -> SharedDevicePool<D> {
        SharedDevicePool {
            device,
            pool: Mutex::new(pool),
            keep: Mutex::new(Vec::new()),
        }
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

    /// Allocates `size` bytes on `stream` (see [`DevicePool::alloc`]).
    pub fn alloc(
        &self,
        size: usize,
        stream: D::Stream,
    ) -> Result<DeviceBlock<D::Stream>, DeviceError> {
        self.lock().alloc(size, stream)
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

    /// Empties the cache (see [`DevicePool::trim`]).
    pub fn trim(&self) -> Result<Trimmed, DeviceError> {
        self.lock().trim()
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
