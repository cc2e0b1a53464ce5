//! CUDA memory for the `tagalloc` core: the driver seam, region sources over the core's pool,
//! and a device pool with stream-ordered reuse, one per device.
//!
//! Everything here builds and its tests run with no GPU and no CUDA toolkit: the driver
//! library is opened at run time, and CPU tests run on a fake driver.
//!
//! - [`Driver`]: the one trait through which every CUDA driver call of a device
//!   allocator goes: device allocations, virtual memory (reserve, create, map, set access,
//!   unmap, granularity), pinned and registered host memory, streams, events, memory
//!   information, device count and context. Errors are values ([`DriverError`], carrying the
//!   `CUresult` code and name); nothing panics.
//! - [`CudaDriver`]: the real driver, through cudarc's raw driver bindings
//!   (`cudarc::driver::sys`, CUDA 12.0 binding set, loaded dynamically). With no driver
//!   installed, [`CudaDriver::new`] returns [`DriverError::NoDriver`]; with no device,
//!   [`DriverError::NoDevice`].
//! - `fake::FakeDriver` (feature `fake`): a driver for tests and benchmarks whose device
//!   memory is address space the CPU cannot touch, with real bookkeeping, event completion by
//!   hand or by a clock (host and per-stream device time, stalls counted), device-side waits
//!   with what each stream is ordered after, graph capture, call counts and injected failures.
//! - Region sources for the core's [`tagalloc::Pool`]: plain device allocations
//!   ([`PlainSource`]), virtual-memory growth that keeps the pool one region and unmaps free
//!   tail chunks on trim ([`VmmSource`]; either chosen at run time: [`DeviceSource`],
//!   [`Regions`]), pinned host memory ([`PinnedSource`]), and a hook that registers any host
//!   pool's regions with CUDA ([`RegisterHook`]).
//! - [`DevicePool`]: a device pool with stream-ordered reuse (a block freed on one stream is
//!   reusable at once by that stream, by another after a device-side wait for the event
//!   covering the free, or with no wait once the event has completed; one event per batch of
//!   frees; `record_stream`; the host waits only when the device is out of memory and on
//!   trim), safe under CUDA graph capture when told of it, with streams it can be told to
//!   forget, and an invariant checker over its pending lists. [`SharedDevicePool`] shares one
//!   between threads (waiting for the device without its lock); [`PoolRegistry`] keeps one per
//!   device, created on first use.
//! - [`DeviceBuffer`]: a typed buffer freed to its pool (on its stream) when dropped;
//!   [`CudaBuffer`] wraps one for cudarc, whose copies, memsets and kernel launches take it
//!   as they take a `CudaSlice` (cudarc's device-pointer and kernel-argument traits).
//! - `torch_model` (feature `torch-model`): a model of PyTorch's CUDA caching allocator's
//!   placement policy over the seam, to compare the device pool with on the same trace and
//!   the same fake driver (`tagalloc-bench device`).
//!
//! The C ABI for PyTorch's `CUDAPluggableAllocator` is a crate of its own,
//! `tagalloc-cuda-pluggable` (`backend-cuda/pluggable/`), so that no ordinary Rust build
//! links a shared library.
//!
//! ```
//! use tagalloc_cuda::fake::{Call, FakeConfig, FakeDriver};
//! use tagalloc_cuda::Driver;
//!
//! # fn main() -> Result<(), tagalloc_cuda::DriverError> {
//! let gpu = FakeDriver::new(FakeConfig::default())?; // a 16 GiB card, 2 MiB pages
//! let stream = gpu.stream_create()?;
//! let block = gpu.mem_alloc(1 << 20)?; // device memory: never dereference it on the host
//! let event = gpu.event_create()?;
//! // SAFETY: the stream and event are live, and nothing uses the block after the free.
//! unsafe {
//!     gpu.event_record(event, stream)?;
//!     assert!(!gpu.event_query(event)?); // pending until the test says otherwise
//!     gpu.complete(event)?;
//!     assert!(gpu.event_query(event)?);
//!     gpu.mem_free(block)?;
//! }
//! assert_eq!(gpu.calls().get(Call::MemAlloc), 1);
//! # Ok(())
//! # }
//! ```
//!
//! # Tests that need a GPU
//!
//! `tests/real_driver.rs` checks the real driver: that creating it without a driver reports
//! [`DriverError::NoDriver`] and never panics (runs everywhere), and, on a GPU, device
//! allocation and free, virtual-memory reserve, map, access and unmap, pinned and registered
//! host memory, streams and events; its `pool` module runs the device pool on the GPU with
//! both kinds of regions and two streams, and cudarc's copies and memset into and out of
//! [`CudaBuffer`]s. They are built everywhere (so they always compile, and so does the check
//! that cudarc's launches accept a `CudaBuffer`) and ignored unless asked for. Every GPU test
//! of the crate is in that one binary; on a machine with a GPU and a Rust toolchain:
//!
//! ```text
//! cargo test -p tagalloc-cuda --test real_driver -- --ignored
//! ```
//!
//! On a GPU machine without one, build the test binary here and copy it there (it needs only
//! the NVIDIA driver, no toolkit):
//!
//! ```text
//! cargo test -p tagalloc-cuda --test real_driver --no-run   # prints the binary's path
//! ./real_driver-<hash> --ignored                             # on the GPU machine
//! ```
//!
//! Without a GPU those tests are reported as ignored, with the reason, never as passed.

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

// Every item of the backend proper has one path, at the root; the modules are private. The
// test doubles are modules of their own, behind features.
mod addr_hash;
mod buffer;
mod cuda;
mod cudarc_buffer;
mod device_pool;
mod driver;
mod error;
#[cfg(feature = "fake")]
pub mod fake;
mod registry;
mod shared_device;
mod snapshot;
mod source;
#[cfg(feature = "torch-model")]
pub mod torch_model;

pub use addr_hash::{AddrHash, AddrHasher};
pub use buffer::DeviceBuffer;
pub use cuda::{driver_present, CuEvent, CuPhysical, CuStream, CudaDriver};
pub use cudarc_buffer::CudaBuffer;
pub use device_pool::{
    DeviceBlock, DeviceConfig, DeviceCounters, DeviceError, DeviceHeap, DevicePool, DeviceStats,
};
pub use driver::{Capture, DevicePtr, Driver, Granularity, MemInfo, PinFlags};
pub use error::{code, code_name, DriverError};
pub use registry::PoolRegistry;
pub use shared_device::SharedDevicePool;
pub use snapshot::{BlockState, SnapshotBlock, SnapshotRegion};
pub use source::{DeviceSource, PinnedSource, PlainSource, Regions, RegisterHook, VmmSource};
