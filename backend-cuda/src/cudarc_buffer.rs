//! [`CudaBuffer`]: a [`DeviceBuffer`] that cudarc's copies, memsets and kernel launches take
//! directly, through cudarc 0.19's device-pointer traits.

use std::sync::Arc;

use cudarc::driver::{
    sys, CudaStream, DevicePtr as CudarcDevicePtr, DevicePtrMut, DeviceSlice, LaunchArgs,
    PushKernelArg, SyncOnDrop,
};

use crate::buffer::DeviceBuffer;
use crate::cuda::{CuStream, CudaDriver};
use crate::device_pool::DeviceError;
use crate::driver::Driver;
use crate::shared_device::SharedDevicePool;

/// A typed buffer from a tagalloc device pool, on a cudarc stream: pass it to
/// `stream.memcpy_htod(&host, &mut buf)`, `stream.memcpy_dtoh(&buf, &mut host)`,
/// `stream.memset_zeros(&mut buf)`, or `stream.launch_builder(&f).arg(&buf)` as a cudarc
/// `CudaSlice`. Dropped, it goes back to its pool on its stream.
///
/// cudarc's own slices wait on and record events per slice when a context uses several
/// streams. This buffer leaves that to the pool's stream order instead, which covers memory
/// reuse, not data: using it on a stream other than its own needs
/// [`CudaBuffer::record_stream`] (so the pool does not give its memory away while that stream
/// may use it) and, as with any CUDA memory, an event or synchronisation between the writer
/// and the reader.
///
/// The pool holds the stream's handle until it has recorded its last event on it; the buffer
/// hands the pool a clone of the `Arc<CudaStream>`, kept as long as the pool, so the stream is
/// never destroyed under it.
pub struct CudaBuffer<T, D: Driver<Stream = CuStream> = CudaDriver> {
    buf: DeviceBuffer<T, D>,
    /// The address, where `launch_builder().arg()` can point at it.
    ptr: sys::CUdeviceptr,
    stream: Arc<CudaStream>,
}

impl<T, D: Driver<Stream = CuStream>> std::fmt::Debug for CudaBuffer<T, D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaBuffer")
            .field("ptr", &self.ptr)
            .field("len", &self.buf.len())
            .finish_non_exhaustive()
    }
}

/// The pool's name for a cudarc stream, keeping the stream alive as long as the pool.
fn pool_stream<D: Driver<Stream = CuStream>>(
    pool: &SharedDevicePool<D>,
    stream: &Arc<CudaStream>,
) -> CuStream {
    pool.keep_alive(stream.cu_stream() as usize, Box::new(Arc::clone(stream)));
    // SAFETY: `stream` is a live stream of its context, kept alive as long as the pool (just
    // above), which is as long as the pool can use the handle.
    unsafe { CuStream::from_raw(stream.cu_stream()) }
}

impl<D: Driver<Stream = CuStream>> SharedDevicePool<D> {
    /// `len` values of `T` on the cudarc `stream`, for cudarc's copies and launches. The
    /// stream must belong to the pool's device (its primary context, which `CudaContext::new`
    /// also uses). Errors as for [`SharedDevicePool::buffer`].
    pub fn cuda_buffer<T>(
        self: &Arc<Self>,
        len: usize,
        stream: &Arc<CudaStream>,
    ) -> Result<CudaBuffer<T, D>, DeviceError> {
        let buf = self.buffer::<T>(len, pool_stream(self, stream))?;
        Ok(CudaBuffer {
            ptr: buf.ptr().0,
            buf,
            stream: Arc::clone(stream),
        })
    }
}

impl<T, D: Driver<Stream = CuStream>> CudaBuffer<T, D> {
    /// The buffer underneath.
    pub fn buffer(&self) -> &DeviceBuffer<T, D> {
        &self.buf
    }

    /// Marks the buffer as used on `other` too: its memory goes to another stream only after
    /// the work queued on `other` up to its drop has finished (PyTorch's `record_stream`).
    pub fn record_stream(&self, other: &Arc<CudaStream>) -> Result<(), DeviceError> {
        let s = pool_stream(self.buf.pool(), other);
        self.buf.record_stream(s)
    }
}

impl<T, D: Driver<Stream = CuStream>> DeviceSlice<T> for CudaBuffer<T, D> {
    fn len(&self) -> usize {
        self.buf.len()
    }

    fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }
}

impl<T, D: Driver<Stream = CuStream>> CudarcDevicePtr<T> for CudaBuffer<T, D> {
    /// The address; nothing to wait for or record (see the type's documentation).
    fn device_ptr<'a>(&'a self, _stream: &'a CudaStream) -> (sys::CUdeviceptr, SyncOnDrop<'a>) {
        (self.ptr, SyncOnDrop::Record(None))
    }
}

impl<T, D: Driver<Stream = CuStream>> DevicePtrMut<T> for CudaBuffer<T, D> {
    /// The address; nothing to wait for or record (see the type's documentation).
    fn device_ptr_mut<'a>(
        &'a mut self,
        _stream: &'a CudaStream,
    ) -> (sys::CUdeviceptr, SyncOnDrop<'a>) {
        (self.ptr, SyncOnDrop::Record(None))
    }
}

// SAFETY: the argument pushed is a pointer to the buffer's `CUdeviceptr`, which lives as long
// as the borrow `'b`, longer than the launch arguments `'a` (cudarc's own impl for
// `CudaSlice` pushes the same); the kernel receives the device address by value.
unsafe impl<'a, 'b: 'a, T, D: Driver<Stream = CuStream>> PushKernelArg<&'b CudaBuffer<T, D>>
    for LaunchArgs<'a>
{
    #[inline(always)]
    fn arg(&mut self, arg: &'b CudaBuffer<T, D>) -> &mut Self {
        <Self as PushKernelArg<&'b sys::CUdeviceptr>>::arg(self, &arg.ptr)
    }
}

// SAFETY: as for the shared borrow above.
unsafe impl<'a, 'b: 'a, T, D: Driver<Stream = CuStream>> PushKernelArg<&'b mut CudaBuffer<T, D>>
    for LaunchArgs<'a>
{
    #[inline(always)]
    fn arg(&mut self, arg: &'b mut CudaBuffer<T, D>) -> &mut Self {
        <Self as PushKernelArg<&'b sys::CUdeviceptr>>::arg(self, &arg.ptr)
    }
}
