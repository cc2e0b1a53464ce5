//! [`DeviceError`]: why a [`DevicePool`](crate::DevicePool) call failed.

use core::fmt;

use tagalloc::{Error, PoolError};

use crate::error::DriverError;

/// Why a [`DevicePool`](crate::DevicePool) call failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DeviceError {
    /// The pool refused a request: out of memory (after reusing completed frees, synchronising
    /// and trimming), over its limit, or a bad size; with the pool's figures, and the driver's
    /// error when a driver call was what failed.
    Pool {
        /// What the pool said, with its figures.
        error: PoolError,
        /// The source's last driver error, if a driver call failed on the way.
        driver: Option<DriverError>,
    },
    /// The block is not a live block of this pool: freed already (`DoubleFree`), or another
    /// pool's (`ForeignPointer`).
    Block(Error),
    /// A stream or event call failed.
    Driver(DriverError),
    /// The pool could not be set up (a bad granule).
    Setup(Error),
    /// A [`DeviceConfig`](crate::DeviceConfig) field out of its range: the field, and what it
    /// must be.
    Config(&'static str),
    /// What was asked needs a call that is illegal while a stream is captured into a CUDA
    /// graph (waiting for the device, or ordering a stream after work outside its capture):
    /// refused, nothing changed; what it was.
    Capturing(&'static str),
}

impl fmt::Display for DeviceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceError::Pool { error, driver } => {
                write!(f, "device pool: {error}")?;
                if let Some(d) = driver {
                    write!(f, " (driver: {d})")?;
                }
                Ok(())
            }
            DeviceError::Block(e) => write!(f, "device pool: bad block: {e}"),
            DeviceError::Driver(e) => write!(f, "device pool: {e}"),
            DeviceError::Setup(e) => write!(f, "device pool: cannot set up: {e}"),
            DeviceError::Config(what) => write!(f, "device pool: bad configuration: {what}"),
            DeviceError::Capturing(what) => write!(
                f,
                "device pool: {what} while a CUDA graph is being captured (it would need a \
                 call that is illegal during a capture)"
            ),
        }
    }
}

impl std::error::Error for DeviceError {}

impl From<DriverError> for DeviceError {
    fn from(e: DriverError) -> DeviceError {
        DeviceError::Driver(e)
    }
}
