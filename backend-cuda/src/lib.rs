//! CUDA memory for the `tagalloc` core (work in progress).

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

mod cuda;
mod driver;
mod error;
pub mod fake;
#[cfg(feature = "torch-model")]
pub mod torch_model;

pub use cuda::{driver_present, CuEvent, CuPhysical, CuStream, CudaDriver, ENTRY_POINTS};
pub use driver::{DevicePtr, Driver, Granularity, MemInfo, PinFlags};
pub use error::{code, code_name, DriverError};
pub use fake::{FakeConfig, FakeDriver};
