//! The real driver ([`CudaDriver`]): without a GPU, that creating it reports why it cannot work
//! and never panics; with one, that every kind of call of the seam does what its contract says,
//! and (module `pool`) that the device pool and its cudarc buffers work on it.
//!
//! Every GPU test of the crate is in this one binary, built everywhere and ignored unless
//! asked for:
//!
//! ```text
//! cargo test -p tagalloc-cuda --test real_driver -- --ignored
//! ```
//!
//! or, to run them on a GPU machine without a Rust toolchain, build the test binary here with
//! `cargo test -p tagalloc-cuda --test real_driver --no-run` (cargo prints its path), copy it
//! there and run `./real_driver-<hash> --ignored`.

use std::ffi::CStr;
use std::ptr::NonNull;

#[path = "real_driver/pool.rs"]
mod pool;

use cudarc::driver::sys;
use tagalloc_cuda::{
    code, Capture, CudaDriver, DevicePtr, Driver, DriverError, Granularity, PinFlags,
};

/// Whether the driver library can be opened, asked of the system loader directly (not through
/// cudarc), by the two names an NVIDIA driver installs on Linux.
fn libcuda_loadable() -> bool {
    let names: [&CStr; 2] = [c"libcuda.so", c"libcuda.so.1"];
    names.iter().any(|name| {
        // SAFETY: `name` is a NUL-terminated string; a handle that opens is closed at once.
        unsafe {
            let handle = libc::dlopen(name.as_ptr(), libc::RTLD_LAZY | libc::RTLD_LOCAL);
            if handle.is_null() {
                false
            } else {
                libc::dlclose(handle);
                true
            }
        }
    })
}

#[test]
fn creating_the_driver_reports_no_driver_instead_of_panicking() {
    let present = libcuda_loadable();
    for ordinal in [0, 7, u32::MAX] {
        let result = std::panic::catch_unwind(|| CudaDriver::new(ordinal))
            .unwrap_or_else(|_| panic!("CudaDriver::new({ordinal}) panicked"));
        match &result {
            Err(DriverError::NoDriver) => assert!(
                !present,
                "the loader opens libcuda, but the driver says there is none"
            ),
            _ => assert!(
                present,
                "no libcuda here, yet CudaDriver::new({ordinal}) returned {result:?}"
            ),
        }
        if ordinal == u32::MAX {
            assert!(result.is_err(), "device {ordinal} cannot exist");
        }
        if let Err(e) = &result {
            println!("CudaDriver::new({ordinal}): {e}");
        }
    }
    assert_eq!(tagalloc_cuda::driver_present(), present);
}

fn gpu() -> CudaDriver {
    CudaDriver::new(0).unwrap_or_else(|e| panic!("this test needs a CUDA GPU: {e}"))
}

/// Fills `bytes` at `ptr` with `value` on the device and reads them back, so that a test sees
/// the memory really works (calls outside the seam, for the test only).
fn fill_and_read(driver: &CudaDriver, ptr: DevicePtr, bytes: usize, value: u8) -> Vec<u8> {
    driver.make_current().unwrap();
    let mut host = vec![0u8; bytes];
    // SAFETY: `ptr..ptr + bytes` is device memory the test owns, mapped and accessible;
    // `host` has room for `bytes`; the context is current.
    unsafe {
        assert_eq!(
            sys::cuMemsetD8_v2(ptr.0, value, bytes),
            sys::CUresult::CUDA_SUCCESS
        );
        assert_eq!(
            sys::cuMemcpyDtoH_v2(host.as_mut_ptr().cast(), ptr.0, bytes),
            sys::CUresult::CUDA_SUCCESS
        );
    }
    host
}

#[test]
#[ignore = "needs a CUDA GPU: run with cargo test -p tagalloc-cuda --test real_driver -- --ignored"]
fn gpu_device_info() {
    let driver = gpu();
    assert!(driver.device_count().unwrap() >= 1);
    assert_eq!(driver.device(), 0);
    let info = driver.mem_get_info().unwrap();
    assert!(info.total > 0 && info.free <= info.total, "{info:?}");
    driver.ctx_synchronize().unwrap();
    println!("device 0: {info:?}");
}

#[test]
#[ignore = "needs a CUDA GPU: run with cargo test -p tagalloc-cuda --test real_driver -- --ignored"]
fn gpu_alloc_and_free() {
    let driver = gpu();
    let before = driver.mem_get_info().unwrap();
    let ptr = driver.mem_alloc(64 << 20).unwrap();
    assert_eq!(ptr.0 % 256, 0);
    assert!(driver.mem_get_info().unwrap().free < before.free);
    assert_eq!(fill_and_read(&driver, ptr, 4096, 0x5a), vec![0x5a; 4096]);
    // SAFETY: the allocation is the test's and nothing uses it after the free.
    unsafe { driver.mem_free(ptr).unwrap() };
    // SAFETY: freeing again is the misuse under test; the driver refuses it.
    let again = unsafe { driver.mem_free(ptr) }.unwrap_err();
    assert_eq!(again.code(), Some(code::INVALID_VALUE), "{again}");
    let zero = driver.mem_alloc(0).unwrap_err();
    assert_eq!(zero.code(), Some(code::INVALID_VALUE), "{zero}");
    let huge = driver.mem_alloc(before.total * 2).unwrap_err();
    assert!(huge.is_out_of_memory(), "{huge}");
}

#[test]
#[ignore = "needs a CUDA GPU: run with cargo test -p tagalloc-cuda --test real_driver -- --ignored"]
fn gpu_virtual_memory() {
    let driver = gpu();
    let g = driver.allocation_granularity(Granularity::Minimum).unwrap();
    let r = driver
        .allocation_granularity(Granularity::Recommended)
        .unwrap();
    assert!(g.is_power_of_two() && r.is_multiple_of(g), "{g} {r}");
    let base = driver.mem_address_reserve(8 * g, 0).unwrap();
    assert_eq!(base.0 % g as u64, 0);
    let a = driver.mem_create(2 * g).unwrap();
    let b = driver.mem_create(g).unwrap();
    let second = DevicePtr(base.0 + 2 * g as u64);
    // SAFETY: the reservation and the handles are the test's; nothing else uses them.
    unsafe {
        driver.mem_map(base, 2 * g, a).unwrap();
        driver.mem_map(second, g, b).unwrap();
        // The two mappings are one contiguous range: access is granted (and, below, taken
        // away) over both at once, as CUDA's vectorAddMMAP sample does.
        driver.mem_set_access(base, 3 * g).unwrap();
    }
    assert_eq!(fill_and_read(&driver, base, 3 * g, 7), vec![7; 3 * g]);
    // SAFETY: as above; no work uses the range after the synchronisation.
    unsafe {
        driver.ctx_synchronize().unwrap();
        driver.mem_unmap(base, 3 * g).unwrap();
        driver.mem_release(a).unwrap();
        driver.mem_release(b).unwrap();
        driver.mem_address_free(base, 8 * g).unwrap();
    }
    let odd = driver.mem_create(g + 1).unwrap_err();
    assert_eq!(odd.code(), Some(code::INVALID_VALUE), "{odd}");
}

#[test]
#[ignore = "needs a CUDA GPU: run with cargo test -p tagalloc-cuda --test real_driver -- --ignored"]
fn gpu_pinned_host_memory() {
    let driver = gpu();
    let p = driver.host_alloc(1 << 20, PinFlags::PORTABLE).unwrap();
    assert_eq!(p.as_ptr() as usize % 4096, 0);
    // SAFETY: `p` is 1 MiB of host memory the test owns.
    let bytes = unsafe { std::slice::from_raw_parts_mut(p.as_ptr(), 1 << 20) };
    bytes.fill(3);
    assert!(bytes.iter().all(|&b| b == 3));
    // SAFETY: no reference into the memory outlives this point.
    unsafe { driver.host_free(p).unwrap() };

    let mut buffer = vec![0u8; 1 << 20];
    let ptr = NonNull::new(buffer.as_mut_ptr()).unwrap();
    // SAFETY: `buffer` stays alive and in place until it is unregistered below.
    unsafe {
        driver
            .host_register(ptr, buffer.len(), PinFlags::DEFAULT)
            .unwrap();
        let twice = driver
            .host_register(ptr, buffer.len(), PinFlags::DEFAULT)
            .unwrap_err();
        assert_eq!(
            twice.code(),
            Some(code::HOST_MEMORY_ALREADY_REGISTERED),
            "{twice}"
        );
        driver.host_unregister(ptr).unwrap();
        let gone = driver.host_unregister(ptr).unwrap_err();
        assert_eq!(
            gone.code(),
            Some(code::HOST_MEMORY_NOT_REGISTERED),
            "{gone}"
        );
    }
}

#[test]
#[ignore = "needs a CUDA GPU: run with cargo test -p tagalloc-cuda --test real_driver -- --ignored"]
fn gpu_streams_and_events() {
    let driver = gpu();
    let stream = driver.stream_create().unwrap();
    let event = driver.event_create().unwrap();
    // SAFETY: the stream and the event are the test's and live until destroyed at the end.
    unsafe {
        assert!(driver.event_query(event).unwrap(), "never recorded");
        driver.event_record(event, stream).unwrap();
        driver.event_synchronize(event).unwrap();
        assert!(driver.event_query(event).unwrap());
        driver.event_record(event, driver.default_stream()).unwrap();
        driver.stream_synchronize(driver.default_stream()).unwrap();
        assert!(driver.event_query(event).unwrap());
        driver.stream_synchronize(stream).unwrap();
        // A device-side wait of one stream for an event of another, and the capture state of
        // streams that capture nothing.
        let other = driver.stream_create().unwrap();
        driver.event_record(event, stream).unwrap();
        driver.stream_wait_event(other, event).unwrap();
        driver.stream_synchronize(other).unwrap();
        assert!(driver.event_query(event).unwrap(), "other waited for it");
        assert_eq!(driver.stream_capture(other).unwrap(), Capture::None);
        assert_eq!(
            driver.stream_capture(driver.default_stream()).unwrap(),
            Capture::None
        );
        driver.stream_destroy(other).unwrap();
        driver.event_destroy(event).unwrap();
        driver.stream_destroy(stream).unwrap();
        let default = driver.stream_destroy(driver.default_stream()).unwrap_err();
        assert_eq!(default.code(), Some(code::INVALID_HANDLE));
    }
}
