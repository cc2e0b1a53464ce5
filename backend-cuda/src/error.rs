//! Driver errors as values: what a driver call returned, which call it was, and the cases where
//! no call could be made at all (no driver library, no such device).
//!
//! The real driver and the fake one report the same [`DriverError::Cuda`] codes for the same
//! misuse, so a test on the fake shows what the real driver would say.

use core::fmt;

/// `CUresult` codes this crate gives meaning to. Every other code is still carried and named by
/// [`DriverError::Cuda`]; these are the ones the fake driver returns and callers branch on.
pub mod code {
    /// `CUDA_SUCCESS`.
    pub const SUCCESS: u32 = 0;
    /// `CUDA_ERROR_INVALID_VALUE`: a bad size, alignment or range, or an address that is not a
    /// live allocation (a double free).
    pub const INVALID_VALUE: u32 = 1;
    /// `CUDA_ERROR_OUT_OF_MEMORY`: the device (or pinned host memory) is exhausted.
    pub const OUT_OF_MEMORY: u32 = 2;
    /// `CUDA_ERROR_NOT_INITIALIZED`.
    pub const NOT_INITIALIZED: u32 = 3;
    /// `CUDA_ERROR_NO_DEVICE`: the driver sees no CUDA device.
    pub const NO_DEVICE: u32 = 100;
    /// `CUDA_ERROR_INVALID_DEVICE`: no device with that ordinal.
    pub const INVALID_DEVICE: u32 = 101;
    /// `CUDA_ERROR_INVALID_CONTEXT`.
    pub const INVALID_CONTEXT: u32 = 201;
    /// `CUDA_ERROR_INVALID_HANDLE`: a stream or event that does not exist (any more).
    pub const INVALID_HANDLE: u32 = 400;
    /// `CUDA_ERROR_NOT_READY`: work recorded by an event has not completed. [`Driver`](crate::Driver)
    /// methods turn it into `Ok(false)`; it is never returned as an error.
    pub const NOT_READY: u32 = 600;
    /// `CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED`: part of the range is registered already.
    pub const HOST_MEMORY_ALREADY_REGISTERED: u32 = 712;
    /// `CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED`: the pointer does not start a registered range.
    pub const HOST_MEMORY_NOT_REGISTERED: u32 = 713;
    /// `CUDA_ERROR_NOT_SUPPORTED`: e.g. virtual memory management on a device without it.
    pub const NOT_SUPPORTED: u32 = 801;
    /// `CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED`: a call that is illegal while a stream captures
    /// a CUDA graph (synchronising it, or querying events while a capture is under way).
    pub const STREAM_CAPTURE_UNSUPPORTED: u32 = 900;
    /// `CUDA_ERROR_STREAM_CAPTURE_ISOLATION`: a capturing stream made to wait for work outside
    /// its capture.
    pub const STREAM_CAPTURE_ISOLATION: u32 = 905;
    /// `CUDA_ERROR_CAPTURED_EVENT`: querying or synchronising an event last recorded on a
    /// capturing stream.
    pub const CAPTURED_EVENT: u32 = 907;
    /// `CUDA_ERROR_UNKNOWN`.
    pub const UNKNOWN: u32 = 999;
}

/// Why a driver call did not do what was asked. Never a panic: every failure of every call,
/// including "there is no driver at all", comes back as one of these.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DriverError {
    /// No CUDA driver library (`libcuda.so`, `nvcuda.dll`) could be loaded: no NVIDIA driver is
    /// installed, or it is not on the loader's path.
    NoDriver,
    /// The driver library lacks an entry point this crate calls (named here), so it is older
    /// than the CUDA 12.0 driver API this crate is bound to.
    MissingSymbol(&'static str),
    /// The driver works but has no device with this ordinal (`count` devices; 0 means there is
    /// no device at all).
    NoDevice {
        /// The ordinal asked for.
        ordinal: u32,
        /// How many devices the driver sees.
        count: u32,
    },
    /// A driver call returned an error code.
    Cuda {
        /// The driver entry point, e.g. `"cuMemAlloc"`.
        call: &'static str,
        /// The `CUresult` code (see [`code`]).
        code: u32,
        /// The code's name, e.g. `"CUDA_ERROR_OUT_OF_MEMORY"`.
        name: &'static str,
    },
}

impl DriverError {
    /// The error `call` returned with `code`, named from the CUDA headers.
    pub fn cuda(call: &'static str, code: u32) -> DriverError {
        DriverError::Cuda {
            call,
            code,
            name: code_name(code),
        }
    }

    /// The `CUresult` code, for an error a driver call returned.
    pub fn code(&self) -> Option<u32> {
        match *self {
            DriverError::Cuda { code, .. } => Some(code),
            _ => None,
        }
    }

    /// The driver entry point that failed, for an error a driver call returned.
    pub fn call(&self) -> Option<&'static str> {
        match *self {
            DriverError::Cuda { call, .. } => Some(call),
            _ => None,
        }
    }

    /// Whether the device (or pinned host memory) is exhausted: the case an allocator answers
    /// by releasing cached memory and retrying.
    pub fn is_out_of_memory(&self) -> bool {
        self.code() == Some(code::OUT_OF_MEMORY)
    }
}

impl fmt::Display for DriverError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            DriverError::NoDriver => f.write_str(
                "no CUDA driver: the driver library (libcuda.so / nvcuda.dll) could not be loaded",
            ),
            DriverError::MissingSymbol(name) => write!(
                f,
                "the CUDA driver has no entry point {name}: it is older than CUDA 12.0"
            ),
            DriverError::NoDevice { ordinal, count: 0 } => {
                write!(f, "no CUDA device (asked for device {ordinal})")
            }
            DriverError::NoDevice { ordinal, count } => write!(
                f,
                "no CUDA device {ordinal}: the driver sees {count} device(s)"
            ),
            DriverError::Cuda { call, code, name } => {
                write!(f, "{call} failed: {name} ({code})")
            }
        }
    }
}

impl std::error::Error for DriverError {}

/// The name of a `CUresult` code, as in the CUDA 13.4 headers (a superset of every earlier
/// version's), or `"CUDA_ERROR_UNRECOGNIZED"` for a code none of them has.
pub fn code_name(code: u32) -> &'static str {
    match NAMES.binary_search_by_key(&code, |&(c, _)| c) {
        Ok(i) => NAMES[i].1,
        Err(_) => "CUDA_ERROR_UNRECOGNIZED",
    }
}

/// `CUresult` codes and names, sorted by code (taken from `cudaError_enum` in cudarc's bindings
/// of the CUDA 13.4 headers).
const NAMES: &[(u32, &str)] = &[
    (0, "CUDA_SUCCESS"),
    (1, "CUDA_ERROR_INVALID_VALUE"),
    (2, "CUDA_ERROR_OUT_OF_MEMORY"),
    (3, "CUDA_ERROR_NOT_INITIALIZED"),
    (4, "CUDA_ERROR_DEINITIALIZED"),
    (5, "CUDA_ERROR_PROFILER_DISABLED"),
    (6, "CUDA_ERROR_PROFILER_NOT_INITIALIZED"),
    (7, "CUDA_ERROR_PROFILER_ALREADY_STARTED"),
    (8, "CUDA_ERROR_PROFILER_ALREADY_STOPPED"),
    (34, "CUDA_ERROR_STUB_LIBRARY"),
    (36, "CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER"),
    (46, "CUDA_ERROR_DEVICE_UNAVAILABLE"),
    (47, "CUDA_ERROR_MULTICAST_RESOURCE_FULL"),
    (100, "CUDA_ERROR_NO_DEVICE"),
    (101, "CUDA_ERROR_INVALID_DEVICE"),
    (102, "CUDA_ERROR_DEVICE_NOT_LICENSED"),
    (200, "CUDA_ERROR_INVALID_IMAGE"),
    (201, "CUDA_ERROR_INVALID_CONTEXT"),
    (202, "CUDA_ERROR_CONTEXT_ALREADY_CURRENT"),
    (205, "CUDA_ERROR_MAP_FAILED"),
    (206, "CUDA_ERROR_UNMAP_FAILED"),
    (207, "CUDA_ERROR_ARRAY_IS_MAPPED"),
    (208, "CUDA_ERROR_ALREADY_MAPPED"),
    (209, "CUDA_ERROR_NO_BINARY_FOR_GPU"),
    (210, "CUDA_ERROR_ALREADY_ACQUIRED"),
    (211, "CUDA_ERROR_NOT_MAPPED"),
    (212, "CUDA_ERROR_NOT_MAPPED_AS_ARRAY"),
    (213, "CUDA_ERROR_NOT_MAPPED_AS_POINTER"),
    (214, "CUDA_ERROR_ECC_UNCORRECTABLE"),
    (215, "CUDA_ERROR_UNSUPPORTED_LIMIT"),
    (216, "CUDA_ERROR_CONTEXT_ALREADY_IN_USE"),
    (217, "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED"),
    (218, "CUDA_ERROR_INVALID_PTX"),
    (219, "CUDA_ERROR_INVALID_GRAPHICS_CONTEXT"),
    (220, "CUDA_ERROR_NVLINK_UNCORRECTABLE"),
    (221, "CUDA_ERROR_JIT_COMPILER_NOT_FOUND"),
    (222, "CUDA_ERROR_UNSUPPORTED_PTX_VERSION"),
    (223, "CUDA_ERROR_JIT_COMPILATION_DISABLED"),
    (224, "CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY"),
    (225, "CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC"),
    (226, "CUDA_ERROR_CONTAINED"),
    (227, "CUDA_ERROR_INSUFFICIENT_LOADER_VERSION"),
    (300, "CUDA_ERROR_INVALID_SOURCE"),
    (301, "CUDA_ERROR_FILE_NOT_FOUND"),
    (302, "CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND"),
    (303, "CUDA_ERROR_SHARED_OBJECT_INIT_FAILED"),
    (304, "CUDA_ERROR_OPERATING_SYSTEM"),
    (400, "CUDA_ERROR_INVALID_HANDLE"),
    (401, "CUDA_ERROR_ILLEGAL_STATE"),
    (402, "CUDA_ERROR_LOSSY_QUERY"),
    (500, "CUDA_ERROR_NOT_FOUND"),
    (600, "CUDA_ERROR_NOT_READY"),
    (700, "CUDA_ERROR_ILLEGAL_ADDRESS"),
    (701, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"),
    (702, "CUDA_ERROR_LAUNCH_TIMEOUT"),
    (703, "CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING"),
    (704, "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED"),
    (705, "CUDA_ERROR_PEER_ACCESS_NOT_ENABLED"),
    (708, "CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE"),
    (709, "CUDA_ERROR_CONTEXT_IS_DESTROYED"),
    (710, "CUDA_ERROR_ASSERT"),
    (711, "CUDA_ERROR_TOO_MANY_PEERS"),
    (712, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED"),
    (713, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED"),
    (714, "CUDA_ERROR_HARDWARE_STACK_ERROR"),
    (715, "CUDA_ERROR_ILLEGAL_INSTRUCTION"),
    (716, "CUDA_ERROR_MISALIGNED_ADDRESS"),
    (717, "CUDA_ERROR_INVALID_ADDRESS_SPACE"),
    (718, "CUDA_ERROR_INVALID_PC"),
    (719, "CUDA_ERROR_LAUNCH_FAILED"),
    (720, "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE"),
    (721, "CUDA_ERROR_TENSOR_MEMORY_LEAK"),
    (800, "CUDA_ERROR_NOT_PERMITTED"),
    (801, "CUDA_ERROR_NOT_SUPPORTED"),
    (802, "CUDA_ERROR_SYSTEM_NOT_READY"),
    (803, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH"),
    (804, "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE"),
    (805, "CUDA_ERROR_MPS_CONNECTION_FAILED"),
    (806, "CUDA_ERROR_MPS_RPC_FAILURE"),
    (807, "CUDA_ERROR_MPS_SERVER_NOT_READY"),
    (808, "CUDA_ERROR_MPS_MAX_CLIENTS_REACHED"),
    (809, "CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED"),
    (810, "CUDA_ERROR_MPS_CLIENT_TERMINATED"),
    (811, "CUDA_ERROR_CDP_NOT_SUPPORTED"),
    (812, "CUDA_ERROR_CDP_VERSION_MISMATCH"),
    (900, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"),
    (901, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED"),
    (902, "CUDA_ERROR_STREAM_CAPTURE_MERGE"),
    (903, "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED"),
    (904, "CUDA_ERROR_STREAM_CAPTURE_UNJOINED"),
    (905, "CUDA_ERROR_STREAM_CAPTURE_ISOLATION"),
    (906, "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT"),
    (907, "CUDA_ERROR_CAPTURED_EVENT"),
    (908, "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD"),
    (909, "CUDA_ERROR_TIMEOUT"),
    (910, "CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE"),
    (911, "CUDA_ERROR_EXTERNAL_DEVICE"),
    (912, "CUDA_ERROR_INVALID_CLUSTER_SIZE"),
    (913, "CUDA_ERROR_FUNCTION_NOT_LOADED"),
    (914, "CUDA_ERROR_INVALID_RESOURCE_TYPE"),
    (915, "CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION"),
    (916, "CUDA_ERROR_KEY_ROTATION"),
    (917, "CUDA_ERROR_STREAM_DETACHED"),
    (918, "CUDA_ERROR_GRAPH_RECAPTURE_FAILURE"),
    (919, "CUDA_ERROR_FABRIC_NOT_READY"),
    (999, "CUDA_ERROR_UNKNOWN"),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_sorted_and_unique() {
        assert!(NAMES.windows(2).all(|w| w[0].0 < w[1].0));
    }

    #[test]
    fn codes_are_named() {
        assert_eq!(code_name(code::SUCCESS), "CUDA_SUCCESS");
        assert_eq!(code_name(code::OUT_OF_MEMORY), "CUDA_ERROR_OUT_OF_MEMORY");
        assert_eq!(code_name(code::NOT_READY), "CUDA_ERROR_NOT_READY");
        assert_eq!(
            code_name(code::HOST_MEMORY_NOT_REGISTERED),
            "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED"
        );
        assert_eq!(code_name(code::UNKNOWN), "CUDA_ERROR_UNKNOWN");
        assert_eq!(code_name(12345), "CUDA_ERROR_UNRECOGNIZED");
    }

    #[test]
    fn errors_say_what_failed() {
        let e = DriverError::cuda("cuMemAlloc", code::OUT_OF_MEMORY);
        assert!(e.is_out_of_memory());
        assert_eq!(e.call(), Some("cuMemAlloc"));
        assert_eq!(
            e.to_string(),
            "cuMemAlloc failed: CUDA_ERROR_OUT_OF_MEMORY (2)"
        );
        assert!(!DriverError::NoDriver.is_out_of_memory());
        assert_eq!(DriverError::NoDriver.code(), None);
        let none = DriverError::NoDevice {
            ordinal: 0,
            count: 0,
        };
        assert_eq!(none.to_string(), "no CUDA device (asked for device 0)");
    }
}
