//! The driver seam: the one trait through which every CUDA driver call of a device allocator
//! goes, and the plain types it speaks in.

use core::fmt::Debug;
use core::hash::Hash;
use core::ptr::NonNull;
use std::sync::Arc;

use crate::error::DriverError;

/// A device address (`CUdeviceptr`). The host must never read or write through it: on the fake
/// driver it points into inaccessible address space, so doing so crashes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(transparent)]
pub struct DevicePtr(pub u64);

impl DevicePtr {
    /// The address as an integer.
    #[inline]
    pub const fn addr(self) -> u64 {
        self.0
    }

    /// The address `bytes` further on, or `None` on overflow.
    #[inline]
    pub const fn checked_add(self, bytes: u64) -> Option<DevicePtr> {
        match self.0.checked_add(bytes) {
            Some(a) => Some(DevicePtr(a)),
            None => None,
        }
    }
}

/// Free and total memory of the driver's device, from [`Driver::mem_get_info`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MemInfo {
    /// Bytes the device could still allocate (for every process together).
    pub free: usize,
    /// The device's memory in bytes.
    pub total: usize,
}

/// Which granularity [`Driver::allocation_granularity`] reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Granularity {
    /// The granularity every virtual-memory size, address and alignment must be a multiple of
    /// (`CU_MEM_ALLOC_GRANULARITY_MINIMUM`; 2 MiB on current GPUs).
    Minimum,
    /// The granularity the driver recommends for performance
    /// (`CU_MEM_ALLOC_GRANULARITY_RECOMMENDED`), a multiple of the minimum.
    Recommended,
}

/// How pinned host memory is pinned ([`Driver::host_alloc`], [`Driver::host_register`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct PinFlags {
    /// Pinned for every CUDA context, not only the driver's own (`CU_MEMHOSTALLOC_PORTABLE`,
    /// `CU_MEMHOSTREGISTER_PORTABLE`). A pool shared between devices wants this.
    pub portable: bool,
    /// Mapped into the device's address space as well (`CU_MEMHOSTALLOC_DEVICEMAP`,
    /// `CU_MEMHOSTREGISTER_DEVICEMAP`); on 64-bit systems with unified addressing the memory is
    /// device-accessible at its host address either way.
    pub device_map: bool,
}

impl PinFlags {
    /// Pinned for the driver's context only.
    pub const DEFAULT: PinFlags = PinFlags {
        portable: false,
        device_map: false,
    };
    /// Pinned for every context.
    pub const PORTABLE: PinFlags = PinFlags {
        portable: true,
        device_map: false,
    };
}

/// Whether a stream is being captured into a CUDA graph (`cuStreamGetCaptureInfo`).
///
/// While a stream captures, the work queued on it is recorded into a graph instead of run, so
/// synchronising it, querying or synchronising an event recorded on it, or making it wait for an
/// event recorded outside the capture is illegal (the driver refuses, and invalidates the
/// capture). A device allocator asks before any such call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Capture {
    /// Not capturing: every call is allowed.
    None,
    /// Capturing, in the capture sequence with this id (unique per process).
    Active(u64),
    /// In a capture sequence that an illegal call already invalidated; still capturing until
    /// the capture ends.
    Invalidated,
}

impl Capture {
    /// Whether the stream is in a capture sequence, active or invalidated.
    pub fn is_capturing(self) -> bool {
        self != Capture::None
    }
}

/// The CUDA driver calls a device allocator needs, for one device (the driver's
/// [`device`](Driver::device)), whose context every call runs in.
///
/// Two implementations: [`CudaDriver`](crate::CudaDriver), the real driver through cudarc, and
/// the fake driver (`fake::FakeDriver`, feature `fake`), which backs CPU tests and benchmarks. A pool is generic
/// over [`Driver`] (static dispatch). It calls the driver only when it grows, trims, or deals
/// with streams and events, never once per allocation, so the trait favours clear contracts over
/// saving nanoseconds; it stays object-safe all the same (`dyn Driver<Stream = …, Event = …,
/// Physical = …>`) for code that wants one pool type over several drivers.
///
/// # The liveness contract
///
/// Every handle (stream, event, physical allocation) and every range (device allocation, address
/// reservation, mapping, pinned or registered host memory) is owned by whoever created it
/// through this driver, until they end its life with the matching call. Methods that end a life
/// (`mem_free`, `stream_destroy`, …) or that hand the driver a handle or range it will act on
/// (`event_record`, `mem_map`, …) are `unsafe`: the real driver's behaviour on a destroyed
/// handle, or on a range another owner still uses, is undefined (or corrupts that owner's data
/// on the device). Nothing obtained from a driver outlives it: dropping the driver ends every
/// allocation, mapping and handle it gave (the real one releases its context, the fake one its
/// memory). The fake driver checks all of it and returns the error the real driver
/// returns where it detects misuse, which is what the tests lean on. Methods that only create
/// or query are safe.
///
/// All sizes are in bytes. Device addresses are [`DevicePtr`]s, which the host must never
/// dereference.
///
/// Every method reports failure as a [`DriverError`] and never panics.
pub trait Driver {
    /// A stream (`CUstream`). Ordered (by handle value, as PyTorch orders its streams) so that a
    /// pool can key sorted structures by stream.
    type Stream: Copy + Eq + Ord + Hash + Debug + Send + Sync;
    /// An event (`CUevent`), created with timing disabled.
    type Event: Copy + Eq + Hash + Debug + Send + Sync;
    /// A physical memory allocation for virtual-memory mapping
    /// (`CUmemGenericAllocationHandle`).
    type Physical: Copy + Eq + Hash + Debug + Send + Sync;

    // --- device and context -------------------------------------------------------------------

    /// How many CUDA devices the driver sees (`cuDeviceGetCount`).
    fn device_count(&self) -> Result<u32, DriverError>;

    /// The ordinal of the device this driver serves; chosen when the driver is created.
    fn device(&self) -> u32;

    /// Makes the driver's context (the device's primary context) current on the calling thread,
    /// for code that launches work next (`cuCtxSetCurrent`). The driver's own methods do not need
    /// it: each runs in the driver's context whatever is current, and leaves the caller's
    /// current context as it was.
    fn make_current(&self) -> Result<(), DriverError>;

    /// Free and total memory of the device (`cuMemGetInfo`).
    fn mem_get_info(&self) -> Result<MemInfo, DriverError>;

    /// Blocks until all work queued on the device by this context has completed
    /// (`cuCtxSynchronize`). Every event recorded before the call has completed after it.
    fn ctx_synchronize(&self) -> Result<(), DriverError>;

    // --- device memory ------------------------------------------------------------------------

    /// Allocates `bytes` of device memory (`cuMemAlloc`), aligned to at least 256 bytes (the
    /// driver's documented guarantee; nothing more may be assumed). `bytes == 0` is
    /// `CUDA_ERROR_INVALID_VALUE`; exhaustion is `CUDA_ERROR_OUT_OF_MEMORY`. The memory is not
    /// initialised. Separate allocations are never merged: a pool must not treat two of them as
    /// one range even where their addresses happen to be adjacent.
    fn mem_alloc(&self, bytes: usize) -> Result<DevicePtr, DriverError>;

    /// Frees a device allocation (`cuMemFree`). An address that is not the start of a live
    /// [`mem_alloc`](Driver::mem_alloc) allocation is `CUDA_ERROR_INVALID_VALUE` (so a double
    /// free is refused). Like `cudaFree`, it waits for work queued on the device to complete
    /// before it returns.
    ///
    /// # Safety
    ///
    /// `ptr` came from this driver's `mem_alloc`, and nothing will use the allocation
    /// afterwards: no work still queued on any stream, and no other owner (a cudarc
    /// `CudaSlice`, another pool) holds it. The driver may give the memory to the next
    /// allocation at once.
    unsafe fn mem_free(&self, ptr: DevicePtr) -> Result<(), DriverError>;

    // --- virtual memory -----------------------------------------------------------------------

    /// The granularity of virtual-memory sizes and addresses for pinned device memory on the
    /// driver's device (`cuMemGetAllocationGranularity`). A device without virtual memory
    /// management answers `CUDA_ERROR_NOT_SUPPORTED`.
    fn allocation_granularity(&self, which: Granularity) -> Result<usize, DriverError>;

    /// Reserves `bytes` of device virtual address space, aligned to `align` (0 for the
    /// granularity), with no memory behind it (`cuMemAddressReserve`). `bytes` must be a
    /// non-zero multiple of the minimum granularity and `align` zero or a power of two;
    /// otherwise `CUDA_ERROR_INVALID_VALUE`. Reserving costs no device memory, so a pool may
    /// reserve far more than the device holds.
    fn mem_address_reserve(&self, bytes: usize, align: usize) -> Result<DevicePtr, DriverError>;

    /// Returns a reservation's address range to the driver (`cuMemAddressFree`).
    ///
    /// # Safety
    ///
    /// `ptr` and `bytes` are exactly a live reservation of this driver's
    /// `mem_address_reserve`, and nothing is mapped in it any more (every mapping was
    /// [unmapped](Driver::mem_unmap)).
    unsafe fn mem_address_free(&self, ptr: DevicePtr, bytes: usize) -> Result<(), DriverError>;

    /// Allocates `bytes` of physical device memory to map into reservations (`cuMemCreate`,
    /// pinned memory on the driver's device). `bytes` must be a non-zero multiple of the minimum
    /// granularity (else `CUDA_ERROR_INVALID_VALUE`); exhaustion is
    /// `CUDA_ERROR_OUT_OF_MEMORY`.
    fn mem_create(&self, bytes: usize) -> Result<Self::Physical, DriverError>;

    /// Releases a physical allocation's handle (`cuMemRelease`). Its memory goes back to the
    /// device once it is also unmapped everywhere; releasing while still mapped is allowed and
    /// keeps the mapping working until it is unmapped.
    ///
    /// # Safety
    ///
    /// `handle` came from this driver's `mem_create` and is not used again.
    unsafe fn mem_release(&self, handle: Self::Physical) -> Result<(), DriverError>;

    /// Maps the first `bytes` of `handle` at `ptr` (`cuMemMap`, offset 0). `ptr` and `bytes`
    /// must be multiples of the minimum granularity, `bytes` at most the handle's size, and the
    /// range must lie inside one reservation and overlap no mapping; otherwise
    /// `CUDA_ERROR_INVALID_VALUE`. The device cannot access the range until
    /// [`mem_set_access`](Driver::mem_set_access) grants it.
    ///
    /// # Safety
    ///
    /// The range lies in a reservation the caller owns, and `handle` is live (created by this
    /// driver and not yet released).
    unsafe fn mem_map(
        &self,
        ptr: DevicePtr,
        bytes: usize,
        handle: Self::Physical,
    ) -> Result<(), DriverError>;

    /// Grants the driver's device read and write access to a mapped range (`cuMemSetAccess`).
    /// Every byte of the range must be mapped (else `CUDA_ERROR_INVALID_VALUE`).
    ///
    /// # Safety
    ///
    /// The range's mappings are the caller's.
    unsafe fn mem_set_access(&self, ptr: DevicePtr, bytes: usize) -> Result<(), DriverError>;

    /// Unmaps a range (`cuMemUnmap`). The range must cover whole mappings exactly (one or
    /// several adjacent ones); otherwise `CUDA_ERROR_INVALID_VALUE`. Unlike
    /// [`mem_free`](Driver::mem_free) this does not wait for the device.
    ///
    /// # Safety
    ///
    /// The mappings are the caller's, and no work still queued on any stream uses the range
    /// (synchronise first: the physical memory may be reused at once).
    unsafe fn mem_unmap(&self, ptr: DevicePtr, bytes: usize) -> Result<(), DriverError>;

    // --- pinned host memory -------------------------------------------------------------------

    /// Allocates `bytes` of page-locked host memory that the device can reach
    /// (`cuMemHostAlloc`), page-aligned. The host may read and write it. `bytes == 0` is
    /// `CUDA_ERROR_INVALID_VALUE`; exhaustion is `CUDA_ERROR_OUT_OF_MEMORY`.
    fn host_alloc(&self, bytes: usize, flags: PinFlags) -> Result<NonNull<u8>, DriverError>;

    /// Frees memory from [`host_alloc`](Driver::host_alloc) (`cuMemFreeHost`). An address that
    /// is not a live `host_alloc` allocation is `CUDA_ERROR_INVALID_VALUE`.
    ///
    /// # Safety
    ///
    /// `ptr` came from this driver's `host_alloc`; no host reference into the memory and no
    /// queued device work uses it afterwards.
    unsafe fn host_free(&self, ptr: NonNull<u8>) -> Result<(), DriverError>;

    /// Page-locks `bytes` of existing host memory at `ptr` and makes it reachable from the
    /// device (`cuMemHostRegister`). A range overlapping one registered already is
    /// `CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED`; `bytes == 0` is `CUDA_ERROR_INVALID_VALUE`.
    ///
    /// # Safety
    ///
    /// `ptr..ptr + bytes` is mapped host memory, and stays mapped while any device work may
    /// read or write it (by DMA). It may be unmapped before it is
    /// [unregistered](Driver::host_unregister) only when no queued device work uses it, and it
    /// must then be unregistered before any of its addresses is registered again (the driver
    /// keeps the pages pinned until then; Linux keeps pinned pages alive after `munmap`).
    unsafe fn host_register(
        &self,
        ptr: NonNull<u8>,
        bytes: usize,
        flags: PinFlags,
    ) -> Result<(), DriverError>;

    /// Unregisters memory registered at `ptr` (`cuMemHostUnregister`). A pointer that does not
    /// start a registered range is `CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED`.
    ///
    /// # Safety
    ///
    /// The registration is the caller's, and no queued device work uses the range.
    unsafe fn host_unregister(&self, ptr: NonNull<u8>) -> Result<(), DriverError>;

    // --- streams ------------------------------------------------------------------------------

    /// The legacy default stream (the null `CUstream`), live as long as the driver.
    fn default_stream(&self) -> Self::Stream;

    /// Creates a stream that does not synchronise with the default stream (`cuStreamCreate`
    /// with `CU_STREAM_NON_BLOCKING`).
    fn stream_create(&self) -> Result<Self::Stream, DriverError>;

    /// Destroys a stream (`cuStreamDestroy`); work already queued on it still completes. The
    /// default stream or a destroyed one is `CUDA_ERROR_INVALID_HANDLE` where the driver can
    /// tell.
    ///
    /// # Safety
    ///
    /// `stream` came from this driver's `stream_create`, and is not used again.
    unsafe fn stream_destroy(&self, stream: Self::Stream) -> Result<(), DriverError>;

    /// Blocks until all work queued on `stream` has completed (`cuStreamSynchronize`): every
    /// event recorded on it before the call has completed after it. Illegal on a capturing
    /// stream (`CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED`).
    ///
    /// # Safety
    ///
    /// `stream` is live: the default stream, or one of this driver's not yet destroyed.
    unsafe fn stream_synchronize(&self, stream: Self::Stream) -> Result<(), DriverError>;

    /// Makes all work queued on `stream` from now on wait, on the device, until the work
    /// `event` recorded has completed (`cuStreamWaitEvent`, flags 0). The host does not wait:
    /// the call returns at once. An event never recorded imposes no wait. A capturing stream
    /// may wait only for an event recorded in the same capture
    /// (`CUDA_ERROR_STREAM_CAPTURE_ISOLATION` otherwise).
    ///
    /// # Safety
    ///
    /// `stream` and `event` are live.
    unsafe fn stream_wait_event(
        &self,
        stream: Self::Stream,
        event: Self::Event,
    ) -> Result<(), DriverError>;

    /// Whether `stream` is being captured into a CUDA graph (`cuStreamGetCaptureInfo`), which
    /// decides what may be called on it (see [`Capture`]). Legal at any time, capturing or not.
    ///
    /// # Safety
    ///
    /// `stream` is live.
    unsafe fn stream_capture(&self, stream: Self::Stream) -> Result<Capture, DriverError>;

    // --- events -------------------------------------------------------------------------------

    /// Creates an event with timing disabled (`cuEventCreate` with
    /// `CU_EVENT_DISABLE_TIMING`), the cheap kind a stream-ordered allocator records at frees.
    /// An event never recorded counts as completed.
    fn event_create(&self) -> Result<Self::Event, DriverError>;

    /// Destroys an event (`cuEventDestroy`); if it is still pending, the driver frees it once
    /// it completes.
    ///
    /// # Safety
    ///
    /// `event` came from this driver's `event_create`, and is not used again.
    unsafe fn event_destroy(&self, event: Self::Event) -> Result<(), DriverError>;

    /// Records `event` on `stream` (`cuEventRecord`): it completes when all work queued on the
    /// stream so far has. Recording again moves the event to the new point.
    ///
    /// # Safety
    ///
    /// `event` and `stream` are live (see [`event_destroy`](Driver::event_destroy) and
    /// [`stream_destroy`](Driver::stream_destroy)).
    unsafe fn event_record(
        &self,
        event: Self::Event,
        stream: Self::Stream,
    ) -> Result<(), DriverError>;

    /// Whether the work `event` recorded has completed (`cuEventQuery`), without waiting:
    /// `Ok(true)` when it has (or the event was never recorded), `Ok(false)` when not yet
    /// (`CUDA_ERROR_NOT_READY`, which is not an error here).
    ///
    /// # Safety
    ///
    /// `event` is live.
    unsafe fn event_query(&self, event: Self::Event) -> Result<bool, DriverError>;

    /// Blocks until the work `event` recorded has completed (`cuEventSynchronize`).
    ///
    /// # Safety
    ///
    /// `event` is live.
    unsafe fn event_synchronize(&self, event: Self::Event) -> Result<(), DriverError>;
}

/// Forwards every [`Driver`] method to `**self`, for the pointer types below.
macro_rules! forward_driver {
    () => {
        type Stream = D::Stream;
        type Event = D::Event;
        type Physical = D::Physical;

        fn device_count(&self) -> Result<u32, DriverError> {
            (**self).device_count()
        }
        fn device(&self) -> u32 {
            (**self).device()
        }
        fn make_current(&self) -> Result<(), DriverError> {
            (**self).make_current()
        }
        fn mem_get_info(&self) -> Result<MemInfo, DriverError> {
            (**self).mem_get_info()
        }
        fn ctx_synchronize(&self) -> Result<(), DriverError> {
            (**self).ctx_synchronize()
        }
        fn mem_alloc(&self, bytes: usize) -> Result<DevicePtr, DriverError> {
            (**self).mem_alloc(bytes)
        }
        unsafe fn mem_free(&self, ptr: DevicePtr) -> Result<(), DriverError> {
            // SAFETY: the caller keeps the contract of `mem_free`, which is the same.
            unsafe { (**self).mem_free(ptr) }
        }
        fn allocation_granularity(&self, which: Granularity) -> Result<usize, DriverError> {
            (**self).allocation_granularity(which)
        }
        fn mem_address_reserve(
            &self,
            bytes: usize,
            align: usize,
        ) -> Result<DevicePtr, DriverError> {
            (**self).mem_address_reserve(bytes, align)
        }
        unsafe fn mem_address_free(&self, ptr: DevicePtr, bytes: usize) -> Result<(), DriverError> {
            // SAFETY: the caller keeps the contract of `mem_address_free`.
            unsafe { (**self).mem_address_free(ptr, bytes) }
        }
        fn mem_create(&self, bytes: usize) -> Result<Self::Physical, DriverError> {
            (**self).mem_create(bytes)
        }
        unsafe fn mem_release(&self, handle: Self::Physical) -> Result<(), DriverError> {
            // SAFETY: the caller keeps the contract of `mem_release`.
            unsafe { (**self).mem_release(handle) }
        }
        unsafe fn mem_map(
            &self,
            ptr: DevicePtr,
            bytes: usize,
            handle: Self::Physical,
        ) -> Result<(), DriverError> {
            // SAFETY: the caller keeps the contract of `mem_map`.
            unsafe { (**self).mem_map(ptr, bytes, handle) }
        }
        unsafe fn mem_set_access(&self, ptr: DevicePtr, bytes: usize) -> Result<(), DriverError> {
            // SAFETY: the caller keeps the contract of `mem_set_access`.
            unsafe { (**self).mem_set_access(ptr, bytes) }
        }
        unsafe fn mem_unmap(&self, ptr: DevicePtr, bytes: usize) -> Result<(), DriverError> {
            // SAFETY: the caller keeps the contract of `mem_unmap`.
            unsafe { (**self).mem_unmap(ptr, bytes) }
        }
        fn host_alloc(&self, bytes: usize, flags: PinFlags) -> Result<NonNull<u8>, DriverError> {
            (**self).host_alloc(bytes, flags)
        }
        unsafe fn host_free(&self, ptr: NonNull<u8>) -> Result<(), DriverError> {
            // SAFETY: the caller keeps the contract of `host_free`.
            unsafe { (**self).host_free(ptr) }
        }
        unsafe fn host_register(
            &self,
            ptr: NonNull<u8>,
            bytes: usize,
            flags: PinFlags,
        ) -> Result<(), DriverError> {
            // SAFETY: the caller keeps the contract of `host_register`.
            unsafe { (**self).host_register(ptr, bytes, flags) }
        }
        unsafe fn host_unregister(&self, ptr: NonNull<u8>) -> Result<(), DriverError> {
            // SAFETY: the caller keeps the contract of `host_unregister`.
            unsafe { (**self).host_unregister(ptr) }
        }
        fn default_stream(&self) -> Self::Stream {
            (**self).default_stream()
        }
        fn stream_create(&self) -> Result<Self::Stream, DriverError> {
            (**self).stream_create()
        }
        unsafe fn stream_destroy(&self, stream: Self::Stream) -> Result<(), DriverError> {
            // SAFETY: the caller keeps the contract of `stream_destroy`.
            unsafe { (**self).stream_destroy(stream) }
        }
        unsafe fn stream_synchronize(&self, stream: Self::Stream) -> Result<(), DriverError> {
            // SAFETY: the caller keeps the contract of `stream_synchronize`.
            unsafe { (**self).stream_synchronize(stream) }
        }
        unsafe fn stream_wait_event(
            &self,
            stream: Self::Stream,
            event: Self::Event,
        ) -> Result<(), DriverError> {
            // SAFETY: the caller keeps the contract of `stream_wait_event`.
            unsafe { (**self).stream_wait_event(stream, event) }
        }
        unsafe fn stream_capture(&self, stream: Self::Stream) -> Result<Capture, DriverError> {
            // SAFETY: the caller keeps the contract of `stream_capture`.
            unsafe { (**self).stream_capture(stream) }
        }
        fn event_create(&self) -> Result<Self::Event, DriverError> {
            (**self).event_create()
        }
        unsafe fn event_destroy(&self, event: Self::Event) -> Result<(), DriverError> {
            // SAFETY: the caller keeps the contract of `event_destroy`.
            unsafe { (**self).event_destroy(event) }
        }
        unsafe fn event_record(
            &self,
            event: Self::Event,
            stream: Self::Stream,
        ) -> Result<(), DriverError> {
            // SAFETY: the caller keeps the contract of `event_record`.
            unsafe { (**self).event_record(event, stream) }
        }
        unsafe fn event_query(&self, event: Self::Event) -> Result<bool, DriverError> {
            // SAFETY: the caller keeps the contract of `event_query`.
            unsafe { (**self).event_query(event) }
        }
        unsafe fn event_synchronize(&self, event: Self::Event) -> Result<(), DriverError> {
            // SAFETY: the caller keeps the contract of `event_synchronize`.
            unsafe { (**self).event_synchronize(event) }
        }
    };
}

/// A borrowed driver is a driver: a pool can run over `&FakeDriver` while the test keeps the
/// fake to complete events and read its counters.
impl<D: Driver + ?Sized> Driver for &D {
    forward_driver!();
}

/// A shared driver is a driver: several pools (or a pool and its test) can hold one.
impl<D: Driver + ?Sized> Driver for Arc<D> {
    forward_driver!();
}
