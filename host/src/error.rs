//! The one error type of the library.

use std::fmt;

use cudarc::driver::result::DriverError;
use cudarc::driver::sys;

/// Everything that can go wrong, with a message that says what to do about it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Error {
    /// No CUDA device could be opened (no driver, no GPU, or `cuInit` failed).
    NoDevice {
        /// The driver's answer.
        reason: String,
    },
    /// The device is older than the PTX supports (compute capability 8.0).
    UnsupportedDevice {
        /// Device name.
        name: String,
        /// Its compute capability, e.g. `(7, 5)`.
        compute_capability: (i32, i32),
    },
    /// The embedded kernels could not be loaded (see [`KernelImage`](crate::KernelImage)).
    KernelLoad {
        /// Which image: `sm_90 machine code`, `PTX`.
        image: String,
        /// Why: the driver's answer, or the decompressor's.
        reason: String,
    },
    /// A device allocation failed.
    OutOfMemory {
        /// Bytes asked for.
        requested_bytes: usize,
    },
    /// An argument is out of its documented range.
    InvalidArgument {
        /// What was wrong.
        message: String,
    },
    /// The input holds no element.
    EmptyInput,
    /// Two buffers that must have the same length do not.
    LengthMismatch {
        /// What the lengths are of.
        what: &'static str,
        /// Expected length.
        expected: usize,
        /// Actual length.
        actual: usize,
    },
    /// A CUDA driver call failed.
    Driver {
        /// What the library was doing.
        during: String,
        /// The driver's answer.
        reason: String,
    },
    /// The emulator found something a GPU would do wrong (a library bug: please report it).
    Emulator {
        /// What the emulator saw.
        message: String,
    },
}

impl Error {
    /// Shorthand for [`Error::InvalidArgument`].
    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        Error::InvalidArgument { message: message.into() }
    }

    /// Wraps a driver error, mapping out-of-memory to [`Error::OutOfMemory`].
    pub(crate) fn driver(during: impl Into<String>, error: DriverError, bytes: usize) -> Self {
        if error.0 == sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY {
            Error::OutOfMemory { requested_bytes: bytes }
        } else {
            Error::Driver { during: during.into(), reason: describe_driver_error(error) }
        }
    }
}

/// A driver error as its code and the driver's own words, e.g.
/// `CUDA_ERROR_NO_DEVICE (no CUDA-capable device is detected)`.
pub(crate) fn describe_driver_error(error: DriverError) -> String {
    match error.error_string() {
        Ok(words) => format!("{:?} ({})", error.0, words.to_string_lossy()),
        Err(_) => format!("{:?}", error.0),
    }
}

/// Checks the result of a raw driver call, mapping out-of-memory to [`Error::OutOfMemory`].
pub(crate) fn check_driver(result: sys::CUresult, during: &str, bytes: usize) -> Result<()> {
    result.result().map_err(|error| Error::driver(during, error, bytes))
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NoDevice { reason } => write!(f, "no CUDA device available: {reason}"),
            Error::UnsupportedDevice { name, compute_capability: (major, minor) } => {
                write!(f, "{name} has compute capability {major}.{minor}; gpu-select needs 8.0 or newer")
            }
            Error::KernelLoad { image, reason } => {
                write!(f, "the kernels' {image} could not be loaded: {reason}")
            }
            Error::OutOfMemory { requested_bytes } => {
                write!(f, "out of device memory allocating {requested_bytes} bytes")
            }
            Error::InvalidArgument { message } => write!(f, "invalid argument: {message}"),
            Error::EmptyInput => write!(f, "the input is empty"),
            Error::LengthMismatch { what, expected, actual } => {
                write!(f, "{what}: expected length {expected}, got {actual}")
            }
            Error::Driver { during, reason } => write!(f, "CUDA driver error while {during}: {reason}"),
            Error::Emulator { message } => write!(f, "emulated kernel failed: {message}"),
        }
    }
}

impl std::error::Error for Error {}

/// The library's result type.
pub type Result<T> = std::result::Result<T, Error>;
