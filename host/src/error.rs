//! The one error type of the library.

use std::fmt;

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
    /// The driver could not load the embedded PTX.
    PtxLoad {
        /// Which PTX flavour (`sm_80`, `sm_90`).
        arch: &'static str,
        /// The driver's answer.
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
    pub(crate) fn driver(during: impl Into<String>, error: cust::error::CudaError, bytes: usize) -> Self {
        if error == cust::error::CudaError::OutOfMemory {
            Error::OutOfMemory { requested_bytes: bytes }
        } else {
            Error::Driver { during: during.into(), reason: error.to_string() }
        }
    }
}

/// Checks the result of a raw driver call (`cust::sys`), mapping out-of-memory to
/// [`Error::OutOfMemory`].
pub(crate) fn check_driver(result: cust::sys::CUresult, during: &str, bytes: usize) -> Result<()> {
    use cust::sys::cudaError_enum as Code;
    match result {
        Code::CUDA_SUCCESS => Ok(()),
        Code::CUDA_ERROR_OUT_OF_MEMORY => Err(Error::OutOfMemory { requested_bytes: bytes }),
        other => Err(Error::Driver { during: during.to_string(), reason: format!("{other:?}") }),
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NoDevice { reason } => write!(f, "no CUDA device available: {reason}"),
            Error::UnsupportedDevice { name, compute_capability: (major, minor) } => {
                write!(f, "{name} has compute capability {major}.{minor}; gpu-select needs 8.0 or newer")
            }
            Error::PtxLoad { arch, reason } => {
                write!(f, "the driver could not load the {arch} PTX: {reason}")
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
