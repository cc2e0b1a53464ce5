//! The real driver: [`Driver`] over the CUDA driver API, through cudarc's raw bindings
//! (`cudarc::driver::sys`), with the driver library loaded at run time.

use core::ffi::c_void;
use core::ptr::{self, NonNull};

use cudarc::driver::sys;

use crate::driver::{Capture, DevicePtr, Driver, Granularity, MemInfo, PinFlags};
use crate::error::DriverError;

/// The driver entry points this module calls, by the symbol names cudarc loads; checked by
/// [`CudaDriver::new`] before the first call.
pub(crate) const ENTRY_POINTS: &[&str] = &[
    "cuInit",
    "cuGetErrorName",
    "cuDeviceGetCount",
    "cuDeviceGet",
    "cuDevicePrimaryCtxRetain",
    "cuDevicePrimaryCtxRelease_v2",
    "cuCtxGetCurrent",
    "cuCtxSetCurrent",
    "cuCtxPushCurrent_v2",
    "cuCtxPopCurrent_v2",
    "cuCtxSynchronize",
    "cuMemGetInfo_v2",
    "cuMemAlloc_v2",
    "cuMemFree_v2",
    "cuMemGetAllocationGranularity",
    "cuMemAddressReserve",
    "cuMemAddressFree",
    "cuMemCreate",
    "cuMemRelease",
    "cuMemMap",
    "cuMemUnmap",
    "cuMemSetAccess",
    "cuMemHostAlloc",
    "cuMemFreeHost",
    "cuMemHostRegister_v2",
    "cuMemHostUnregister",
    "cuStreamCreate",
    "cuStreamDestroy_v2",
    "cuStreamSynchronize",
    "cuStreamWaitEvent",
    "cuStreamGetCaptureInfo_v2",
    "cuThreadExchangeStreamCaptureMode",
    "cuEventCreate",
    "cuEventDestroy_v2",
    "cuEventRecord",
    "cuEventQuery",
    "cuEventSynchronize",
];

/// Turns a `CUresult` into `Ok` or the error of `call`.
fn check(call: &'static str, result: sys::CUresult) -> Result<(), DriverError> {
    match result {
        sys::CUresult::CUDA_SUCCESS => Ok(()),
        other => Err(DriverError::cuda(call, other as u32)),
    }
}

/// Whether a driver library can be loaded, asked without panicking.
pub fn driver_present() -> bool {
    // SAFETY: `is_culib_present` only tries to open the driver library by its usual names;
    // opening it runs the library's initialisers, which is what loading a driver means.
    unsafe { sys::is_culib_present() }
}

/// Looks up every entry point of [`ENTRY_POINTS`] in the loaded driver library.
fn check_entry_points() -> Result<(), DriverError> {
    // SAFETY: `driver_present()` returned true before this is called, so `culib` finds the
    // library (it tries the same names) instead of panicking.
    let lib = unsafe { sys::culib() };
    for &name in ENTRY_POINTS {
        // SAFETY: the symbol is only looked up, never called through this type.
        let found = unsafe { lib.get::<unsafe extern "C" fn()>(name.as_bytes()) }.is_ok();
        if !found {
            return Err(DriverError::MissingSymbol(name));
        }
    }
    Ok(())
}

/// A stream of the real driver (`CUstream`; null is the legacy default stream).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CuStream(usize);

impl CuStream {
    /// A stream created elsewhere (by cudarc, the CUDA runtime, PyTorch), to allocate on.
    ///
    /// # Safety
    ///
    /// `stream` is a live stream of the driver's context (or null, the default stream), and
    /// stays live while the value is used.
    pub unsafe fn from_raw(stream: sys::CUstream) -> CuStream {
        CuStream(stream as usize)
    }

    /// The raw `CUstream`.
    pub fn as_raw(self) -> sys::CUstream {
        self.0 as sys::CUstream
    }
}

/// An event of the real driver (`CUevent`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CuEvent(usize);

impl CuEvent {
    /// The raw `CUevent`.
    pub fn as_raw(self) -> sys::CUevent {
        self.0 as sys::CUevent
    }
}

/// A physical allocation of the real driver (`CUmemGenericAllocationHandle`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CuPhysical(sys::CUmemGenericAllocationHandle);

impl CuPhysical {
    /// The raw handle.
    pub fn as_raw(self) -> sys::CUmemGenericAllocationHandle {
        self.0
    }
}

/// The CUDA driver for one device, holding its primary context: [`Driver`] over the CUDA
/// driver API, through cudarc's raw bindings (`cudarc::driver::sys`), with the driver library
/// loaded at run time.
///
/// # Which driver it needs
///
/// cudarc is built with its `cuda-12000` bindings, the oldest CUDA 12 set. Every entry point
/// called here (listed in `ENTRY_POINTS`) exists, under the same versioned name, in the
/// bindings of every CUDA version cudarc 0.19 supports (11.4 to 13.4): none is gated on a newer
/// version, so a newer feature would buy nothing and would only risk asking an older driver for
/// a symbol it lacks. cudarc resolves each symbol when it is first called and panics if it is
/// missing; [`CudaDriver::new`] therefore looks every one of them up first and reports a missing
/// one as [`DriverError::MissingSymbol`], so no call can panic later.
///
/// # No driver, no device
///
/// cudarc's loader panics when no driver library can be found (`CudaContext::new(0)` does, for
/// instance). [`CudaDriver::new`] asks `is_culib_present()` before anything else and returns
/// [`DriverError::NoDriver`], then `cuInit` and `cuDeviceGetCount` decide between a working
/// device and [`DriverError::NoDevice`].
///
/// # Contexts
///
/// The driver holds its device's primary context (the one the CUDA runtime and PyTorch use).
/// Each method makes it current for the duration of the call only (pushing it when another
/// context is current, and popping it after), so the caller's thread state is left alone.
///
/// # A limit of the bindings
///
/// cudarc types every entry point as returning its `CUresult` Rust enum, so a code the
/// CUDA 12.0 headers do not list, returned by a newer driver, would not be a valid value of that
/// enum. None of the calls used here is documented to return such a code; the error names this
/// crate reports come from its own table ([`code_name`](crate::code_name)), which covers
/// CUDA 13.4.
///
/// # Clones
///
/// A clone is another handle on the same retained context (shared, released when the last
/// handle goes): what a shared pool keeps to wait for the device without holding its lock.
#[derive(Clone, Debug)]
pub struct CudaDriver {
    ordinal: u32,
    device: sys::CUdevice,
    ctx: sys::CUcontext,
    _retained: std::sync::Arc<Retained>,
}

/// The primary context of a device, retained while this lives.
///
/// Invariant: `ctx` is the retained primary context of `device`, released on drop.
#[derive(Debug)]
struct Retained {
    device: sys::CUdevice,
}

impl Drop for Retained {
    fn drop(&mut self) {
        // SAFETY: the context was retained in `CudaDriver::new` and is released once, here,
        // when the last handle on it goes. An error (the driver shutting down first) leaves
        // nothing to do.
        let _ = unsafe { sys::cuDevicePrimaryCtxRelease_v2(self.device) };
    }
}

// SAFETY: a `CUcontext` may be used from any thread (the driver API is thread-safe and every
// method makes the context current on the calling thread for its call); `CudaDriver` holds no
// thread-bound state.
unsafe impl Send for CudaDriver {}
// SAFETY: as above; `&CudaDriver` only ever passes the context handle to driver calls.
unsafe impl Sync for CudaDriver {}

impl CudaDriver {
    /// Loads the driver and retains the primary context of device `ordinal`. With no driver
    /// library this is [`DriverError::NoDriver`], with no such device
    /// [`DriverError::NoDevice`]; it never panics.
    pub fn new(ordinal: u32) -> Result<CudaDriver, DriverError> {
        if !driver_present() {
            return Err(DriverError::NoDriver);
        }
        check_entry_points()?;
        // SAFETY: every entry point exists (checked above); `cuInit` takes flags 0.
        match unsafe { sys::cuInit(0) } {
            sys::CUresult::CUDA_SUCCESS => {}
            sys::CUresult::CUDA_ERROR_NO_DEVICE => {
                return Err(DriverError::NoDevice { ordinal, count: 0 })
            }
            other => return Err(DriverError::cuda("cuInit", other as u32)),
        }
        let count = device_count()?;
        if ordinal >= count {
            return Err(DriverError::NoDevice { ordinal, count });
        }
        let mut device: sys::CUdevice = 0;
        // SAFETY: `device` is a valid out-pointer; the ordinal is below the device count.
        check("cuDeviceGet", unsafe {
            sys::cuDeviceGet(&mut device, ordinal as i32)
        })?;
        let mut ctx: sys::CUcontext = ptr::null_mut();
        // SAFETY: `ctx` is a valid out-pointer and `device` a device handle from the driver.
        check("cuDevicePrimaryCtxRetain", unsafe {
            sys::cuDevicePrimaryCtxRetain(&mut ctx, device)
        })?;
        Ok(CudaDriver {
            ordinal,
            device,
            ctx,
            _retained: std::sync::Arc::new(Retained { device }),
        })
    }

    /// How many CUDA devices the driver sees, without opening one: [`DriverError::NoDriver`]
    /// with no driver library, 0 when `cuInit` finds no device. Never panics.
    pub fn count_devices() -> Result<u32, DriverError> {
        if !driver_present() {
            return Err(DriverError::NoDriver);
        }
        check_entry_points()?;
        // SAFETY: every entry point exists (checked above); `cuInit` takes flags 0.
        match unsafe { sys::cuInit(0) } {
            sys::CUresult::CUDA_SUCCESS => device_count(),
            sys::CUresult::CUDA_ERROR_NO_DEVICE => Ok(0),
            other => Err(DriverError::cuda("cuInit", other as u32)),
        }
    }

    /// The retained primary context, for code that uses cudarc or the driver directly.
    pub fn context(&self) -> sys::CUcontext {
        self.ctx
    }

    /// Makes the context current for the guard's lifetime.
    fn bind(&self) -> Result<Bound, DriverError> {
        let mut current: sys::CUcontext = ptr::null_mut();
        // SAFETY: `current` is a valid out-pointer.
        check("cuCtxGetCurrent", unsafe {
            sys::cuCtxGetCurrent(&mut current)
        })?;
        if current == self.ctx {
            return Ok(Bound { pushed: false });
        }
        // SAFETY: `ctx` is a retained context (invariant of `CudaDriver`).
        check("cuCtxPushCurrent", unsafe {
            sys::cuCtxPushCurrent_v2(self.ctx)
        })?;
        Ok(Bound { pushed: true })
    }

    fn location(&self) -> sys::CUmemLocation {
        sys::CUmemLocation {
            type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
            id: self.device,
        }
    }

    fn allocation_prop(&self) -> sys::CUmemAllocationProp {
        sys::CUmemAllocationProp {
            type_: sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED,
            requestedHandleTypes: sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_NONE,
            location: self.location(),
            win32HandleMetaData: ptr::null_mut(),
            allocFlags: sys::CUmemAllocationProp_st__bindgen_ty_1 {
                compressionType: 0,
                gpuDirectRDMACapable: 0,
                usage: 0,
                reserved: [0; 4],
            },
        }
    }
}

/// This thread's stream-capture interaction mode set to relaxed until dropped, then put back.
///
/// While any thread captures a CUDA graph in the global mode (PyTorch's default), calls that
/// might synchronise implicitly (`cuMemAlloc`, `cuMemCreate`, `cuMemMap`, …) fail on every
/// thread unless that thread is relaxed. Growing or trimming a pool during a capture is safe
/// (a graph keeps the addresses it captured; nothing is freed that the graph uses), so the
/// memory calls run relaxed, as PyTorch's caching allocator runs its `cudaMalloc`.
struct Relaxed {
    previous: sys::CUstreamCaptureMode,
}

impl Relaxed {
    fn new() -> Result<Relaxed, DriverError> {
        let mut mode = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED;
        // SAFETY: `mode` is a valid in/out pointer holding a valid mode.
        check("cuThreadExchangeStreamCaptureMode", unsafe {
            sys::cuThreadExchangeStreamCaptureMode(&mut mode)
        })?;
        Ok(Relaxed { previous: mode })
    }
}

impl Drop for Relaxed {
    fn drop(&mut self) {
        let mut mode = self.previous;
        // SAFETY: `mode` is a valid in/out pointer holding the mode read in `new`.
        let _ = unsafe { sys::cuThreadExchangeStreamCaptureMode(&mut mode) };
    }
}

/// The driver's context, current on this thread until dropped (popped if it was pushed).
struct Bound {
    pushed: bool,
}

impl Drop for Bound {
    fn drop(&mut self) {
        if self.pushed {
            let mut popped: sys::CUcontext = ptr::null_mut();
            // SAFETY: this guard pushed the context, so there is one to pop.
            let _ = unsafe { sys::cuCtxPopCurrent_v2(&mut popped) };
        }
    }
}

fn device_count() -> Result<u32, DriverError> {
    let mut count = 0i32;
    // SAFETY: `count` is a valid out-pointer; the driver was initialised.
    check("cuDeviceGetCount", unsafe {
        sys::cuDeviceGetCount(&mut count)
    })?;
    Ok(count.max(0) as u32)
}

fn host_alloc_flags(flags: PinFlags) -> u32 {
    let mut f = 0;
    if flags.portable {
        f |= sys::CU_MEMHOSTALLOC_PORTABLE;
    }
    if flags.device_map {
        f |= sys::CU_MEMHOSTALLOC_DEVICEMAP;
    }
    f
}

fn host_register_flags(flags: PinFlags) -> u32 {
    let mut f = 0;
    if flags.portable {
        f |= sys::CU_MEMHOSTREGISTER_PORTABLE;
    }
    if flags.device_map {
        f |= sys::CU_MEMHOSTREGISTER_DEVICEMAP;
    }
    f
}

impl Driver for CudaDriver {
    type Stream = CuStream;
    type Event = CuEvent;
    type Physical = CuPhysical;

    fn device_count(&self) -> Result<u32, DriverError> {
        device_count()
    }

    fn device(&self) -> u32 {
        self.ordinal
    }

    fn make_current(&self) -> Result<(), DriverError> {
        // SAFETY: `ctx` is a retained context.
        check("cuCtxSetCurrent", unsafe { sys::cuCtxSetCurrent(self.ctx) })
    }

    fn mem_get_info(&self) -> Result<MemInfo, DriverError> {
        let _bound = self.bind()?;
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: valid out-pointers; the context is current.
        check("cuMemGetInfo", unsafe {
            sys::cuMemGetInfo_v2(&mut free, &mut total)
        })?;
        Ok(MemInfo { free, total })
    }

    fn ctx_synchronize(&self) -> Result<(), DriverError> {
        let _bound = self.bind()?;
        // SAFETY: the context is current.
        check("cuCtxSynchronize", unsafe { sys::cuCtxSynchronize() })
    }

    fn mem_alloc(&self, bytes: usize) -> Result<DevicePtr, DriverError> {
        let _bound = self.bind()?;
        let _relaxed = Relaxed::new()?;
        let mut ptr: sys::CUdeviceptr = 0;
        // SAFETY: valid out-pointer; the driver checks the size.
        check("cuMemAlloc", unsafe { sys::cuMemAlloc_v2(&mut ptr, bytes) })?;
        Ok(DevicePtr(ptr))
    }

    unsafe fn mem_free(&self, ptr: DevicePtr) -> Result<(), DriverError> {
        let _bound = self.bind()?;
        // SAFETY: the caller guarantees the allocation is theirs and unused from now on.
        check("cuMemFree", unsafe { sys::cuMemFree_v2(ptr.0) })
    }

    fn allocation_granularity(&self, which: Granularity) -> Result<usize, DriverError> {
        let _bound = self.bind()?;
        let prop = self.allocation_prop();
        let option = match which {
            Granularity::Minimum => {
                sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_MINIMUM
            }
            Granularity::Recommended => {
                sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_RECOMMENDED
            }
        };
        let mut granularity = 0usize;
        // SAFETY: valid out-pointer and a fully initialised property struct.
        check("cuMemGetAllocationGranularity", unsafe {
            sys::cuMemGetAllocationGranularity(&mut granularity, &prop, option)
        })?;
        Ok(granularity)
    }

    fn mem_address_reserve(&self, bytes: usize, align: usize) -> Result<DevicePtr, DriverError> {
        let _bound = self.bind()?;
        let _relaxed = Relaxed::new()?;
        let mut ptr: sys::CUdeviceptr = 0;
        // SAFETY: valid out-pointer; no fixed address is asked for (0) and flags are 0.
        check("cuMemAddressReserve", unsafe {
            sys::cuMemAddressReserve(&mut ptr, bytes, align, 0, 0)
        })?;
        Ok(DevicePtr(ptr))
    }

    unsafe fn mem_address_free(&self, ptr: DevicePtr, bytes: usize) -> Result<(), DriverError> {
        let _bound = self.bind()?;
        // SAFETY: the caller guarantees the reservation is theirs and empty.
        check("cuMemAddressFree", unsafe {
            sys::cuMemAddressFree(ptr.0, bytes)
        })
    }

    fn mem_create(&self, bytes: usize) -> Result<CuPhysical, DriverError> {
        let _bound = self.bind()?;
        let _relaxed = Relaxed::new()?;
        let prop = self.allocation_prop();
        let mut handle: sys::CUmemGenericAllocationHandle = 0;
        // SAFETY: valid out-pointer and a fully initialised property struct; flags are 0.
        check("cuMemCreate", unsafe {
            sys::cuMemCreate(&mut handle, bytes, &prop, 0)
        })?;
        Ok(CuPhysical(handle))
    }

    unsafe fn mem_release(&self, handle: CuPhysical) -> Result<(), DriverError> {
        let _bound = self.bind()?;
        let _relaxed = Relaxed::new()?;
        // SAFETY: the caller guarantees the handle is theirs and not used again.
        check("cuMemRelease", unsafe { sys::cuMemRelease(handle.0) })
    }

    unsafe fn mem_map(
        &self,
        ptr: DevicePtr,
        bytes: usize,
        handle: CuPhysical,
    ) -> Result<(), DriverError> {
        let _bound = self.bind()?;
        let _relaxed = Relaxed::new()?;
        // SAFETY: the caller guarantees the range and the handle are theirs; offset and flags
        // are 0.
        check("cuMemMap", unsafe {
            sys::cuMemMap(ptr.0, bytes, 0, handle.0, 0)
        })
    }

    unsafe fn mem_set_access(&self, ptr: DevicePtr, bytes: usize) -> Result<(), DriverError> {
        let _bound = self.bind()?;
        let _relaxed = Relaxed::new()?;
        let desc = sys::CUmemAccessDesc {
            location: self.location(),
            flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
        };
        // SAFETY: the caller guarantees the mapped range is theirs; one descriptor is passed.
        check("cuMemSetAccess", unsafe {
            sys::cuMemSetAccess(ptr.0, bytes, &desc, 1)
        })
    }

    unsafe fn mem_unmap(&self, ptr: DevicePtr, bytes: usize) -> Result<(), DriverError> {
        let _bound = self.bind()?;
        let _relaxed = Relaxed::new()?;
        // SAFETY: the caller guarantees the mappings are theirs and idle.
        check("cuMemUnmap", unsafe { sys::cuMemUnmap(ptr.0, bytes) })
    }

    fn host_alloc(&self, bytes: usize, flags: PinFlags) -> Result<NonNull<u8>, DriverError> {
        let _bound = self.bind()?;
        let mut p: *mut c_void = ptr::null_mut();
        // SAFETY: valid out-pointer; the driver checks the size and flags.
        check("cuMemHostAlloc", unsafe {
            sys::cuMemHostAlloc(&mut p, bytes, host_alloc_flags(flags))
        })?;
        NonNull::new(p.cast()).ok_or(DriverError::cuda("cuMemHostAlloc", crate::code::UNKNOWN))
    }

    unsafe fn host_free(&self, ptr: NonNull<u8>) -> Result<(), DriverError> {
        let _bound = self.bind()?;
        // SAFETY: the caller guarantees the memory is theirs and unused from now on.
        check("cuMemFreeHost", unsafe {
            sys::cuMemFreeHost(ptr.as_ptr().cast())
        })
    }

    unsafe fn host_register(
        &self,
        ptr: NonNull<u8>,
        bytes: usize,
        flags: PinFlags,
    ) -> Result<(), DriverError> {
        let _bound = self.bind()?;
        // SAFETY: the caller guarantees the range stays mapped until unregistered.
        check("cuMemHostRegister", unsafe {
            sys::cuMemHostRegister_v2(ptr.as_ptr().cast(), bytes, host_register_flags(flags))
        })
    }

    unsafe fn host_unregister(&self, ptr: NonNull<u8>) -> Result<(), DriverError> {
        let _bound = self.bind()?;
        // SAFETY: the caller guarantees the registration is theirs and idle.
        check("cuMemHostUnregister", unsafe {
            sys::cuMemHostUnregister(ptr.as_ptr().cast())
        })
    }

    fn default_stream(&self) -> CuStream {
        CuStream(0)
    }

    fn stream_create(&self) -> Result<CuStream, DriverError> {
        let _bound = self.bind()?;
        let mut stream: sys::CUstream = ptr::null_mut();
        // SAFETY: valid out-pointer; the flag value is `CU_STREAM_NON_BLOCKING`.
        check("cuStreamCreate", unsafe {
            sys::cuStreamCreate(
                &mut stream,
                sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32,
            )
        })?;
        Ok(CuStream(stream as usize))
    }

    unsafe fn stream_destroy(&self, stream: CuStream) -> Result<(), DriverError> {
        if stream.0 == 0 {
            return Err(DriverError::cuda(
                "cuStreamDestroy",
                crate::code::INVALID_HANDLE,
            ));
        }
        let _bound = self.bind()?;
        // SAFETY: the caller guarantees the stream is theirs and not used again.
        check("cuStreamDestroy", unsafe {
            sys::cuStreamDestroy_v2(stream.as_raw())
        })
    }

    unsafe fn stream_synchronize(&self, stream: CuStream) -> Result<(), DriverError> {
        let _bound = self.bind()?;
        // SAFETY: the caller guarantees the stream is live.
        check("cuStreamSynchronize", unsafe {
            sys::cuStreamSynchronize(stream.as_raw())
        })
    }

    unsafe fn stream_wait_event(
        &self,
        stream: CuStream,
        event: CuEvent,
    ) -> Result<(), DriverError> {
        let _bound = self.bind()?;
        // SAFETY: the caller guarantees both handles are live; flags are 0.
        check("cuStreamWaitEvent", unsafe {
            sys::cuStreamWaitEvent(stream.as_raw(), event.as_raw(), 0)
        })
    }

    unsafe fn stream_capture(&self, stream: CuStream) -> Result<Capture, DriverError> {
        let _bound = self.bind()?;
        let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
        let mut id: sys::cuuint64_t = 0;
        // SAFETY: the caller guarantees the stream is live; `status` and `id` are valid
        // out-pointers, and the graph and dependency outputs are optional (null).
        check("cuStreamGetCaptureInfo", unsafe {
            sys::cuStreamGetCaptureInfo_v2(
                stream.as_raw(),
                &mut status,
                &mut id,
                ptr::null_mut(),
                ptr::null_mut(),
                ptr::null_mut(),
            )
        })?;
        Ok(match status {
            sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE => Capture::None,
            sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE => Capture::Active(id),
            _ => Capture::Invalidated,
        })
    }

    fn event_create(&self) -> Result<CuEvent, DriverError> {
        let _bound = self.bind()?;
        let mut event: sys::CUevent = ptr::null_mut();
        // SAFETY: valid out-pointer; the flag value is `CU_EVENT_DISABLE_TIMING`.
        check("cuEventCreate", unsafe {
            sys::cuEventCreate(
                &mut event,
                sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32,
            )
        })?;
        Ok(CuEvent(event as usize))
    }

    unsafe fn event_destroy(&self, event: CuEvent) -> Result<(), DriverError> {
        let _bound = self.bind()?;
        // SAFETY: the caller guarantees the event is theirs and not used again.
        check("cuEventDestroy", unsafe {
            sys::cuEventDestroy_v2(event.as_raw())
        })
    }

    unsafe fn event_record(&self, event: CuEvent, stream: CuStream) -> Result<(), DriverError> {
        let _bound = self.bind()?;
        // SAFETY: the caller guarantees both handles are live.
        check("cuEventRecord", unsafe {
            sys::cuEventRecord(event.as_raw(), stream.as_raw())
        })
    }

    unsafe fn event_query(&self, event: CuEvent) -> Result<bool, DriverError> {
        let _bound = self.bind()?;
        // SAFETY: the caller guarantees the event is live.
        match unsafe { sys::cuEventQuery(event.as_raw()) } {
            sys::CUresult::CUDA_SUCCESS => Ok(true),
            sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            other => Err(DriverError::cuda("cuEventQuery", other as u32)),
        }
    }

    unsafe fn event_synchronize(&self, event: CuEvent) -> Result<(), DriverError> {
        let _bound = self.bind()?;
        // SAFETY: the caller guarantees the event is live.
        check("cuEventSynchronize", unsafe {
            sys::cuEventSynchronize(event.as_raw())
        })
    }
}
