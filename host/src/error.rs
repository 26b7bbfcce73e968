//! The one error type of the library.

use std::fmt;

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
        /// The driver's code and words ([`std::error::Error::source`] of this error).
        source: DriverError,
    },
    /// `k` (a count or a rank) is outside what the input or the algorithm takes: `k = 0`, `k`
    /// beyond the input or a row, a rank at or past the input's length, or `k` over an
    /// algorithm's bound.
    KOutOfRange {
        /// The `k` asked for.
        k: usize,
        /// The smallest `k` taken.
        min: usize,
        /// The largest `k` taken.
        max: usize,
        /// What sets the range, e.g. "the input has 3 keys".
        context: String,
    },
    /// A caller-provided workspace is smaller than the size query said it must be.
    WorkspaceTooSmall {
        /// Bytes the call needs (what its `_workspace_bytes` query returns).
        needed: usize,
        /// Bytes given.
        given: usize,
    },
    /// The library could not finish what it should always finish (e.g. SampleSelect did not
    /// converge in its levels); a bug or an input the library's design did not foresee:
    /// please report it.
    Internal {
        /// What happened.
        message: String,
    },
    /// A distributed call ([`crate::distributed`]) failed on one of its processes, and every
    /// process returns this same error; or this process heard nothing from the others
    /// within its communicator's timeout.
    Distributed {
        /// The rank of the process that failed first, when one did (`None`: a timeout, or
        /// the transport failed).
        failed_rank: Option<usize>,
        /// What happened: the failed process's own error, in words.
        message: String,
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
    pub(crate) fn driver(
        during: impl Into<String>,
        error: cudarc::driver::result::DriverError,
        bytes: usize,
    ) -> Self {
        if error.0 == sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY {
            Error::OutOfMemory { requested_bytes: bytes }
        } else {
            Error::Driver { during: during.into(), source: DriverError::from(error) }
        }
    }

    /// Shorthand for [`Error::KOutOfRange`].
    pub(crate) fn k_out_of_range(k: usize, min: usize, max: usize, context: impl Into<String>) -> Self {
        Error::KOutOfRange { k, min, max, context: context.into() }
    }

    /// Checks a caller-provided workspace's size against what the call needs.
    pub(crate) fn check_workspace_size(needed: usize, given: usize) -> Result<()> {
        if given < needed { Err(Error::WorkspaceTooSmall { needed, given }) } else { Ok(()) }
    }
}

/// A CUDA driver error: its code (a `CUresult`) and the driver's name and words for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriverError {
    /// The `CUresult` value, e.g. 100 for `CUDA_ERROR_NO_DEVICE`.
    pub code: u32,
    /// The code's name, e.g. `CUDA_ERROR_NO_DEVICE`.
    pub name: String,
    /// The driver's words, e.g. "no CUDA-capable device is detected" (empty when the driver
    /// has none).
    pub message: String,
}

impl From<cudarc::driver::result::DriverError> for DriverError {
    fn from(error: cudarc::driver::result::DriverError) -> Self {
        DriverError {
            code: error.0 as u32,
            name: format!("{:?}", error.0),
            message: error
                .error_string()
                .map(|words| words.to_string_lossy().into_owned())
                .unwrap_or_default(),
        }
    }
}

impl fmt::Display for DriverError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.message.is_empty() {
            write!(f, "{}", self.name)
        } else {
            write!(f, "{} ({})", self.name, self.message)
        }
    }
}

impl std::error::Error for DriverError {}

/// A driver error as its code and the driver's own words, e.g.
/// `CUDA_ERROR_NO_DEVICE (no CUDA-capable device is detected)`.
pub(crate) fn describe_driver_error(error: cudarc::driver::result::DriverError) -> String {
    DriverError::from(error).to_string()
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
            Error::Driver { during, source } => write!(f, "CUDA driver error while {during}: {source}"),
            Error::Emulator { message } => write!(f, "emulated kernel failed: {message}"),
            Error::KOutOfRange { k, min, max, context } => {
                write!(f, "k = {k} is out of range {min}..={max}: {context}")
            }
            Error::WorkspaceTooSmall { needed, given } => {
                write!(f, "the workspace holds {given} bytes; the call needs {needed} (ask its size query)")
            }
            Error::Internal { message } => write!(f, "internal error (please report it): {message}"),
            Error::Distributed { failed_rank: Some(rank), message } => {
                write!(f, "the distributed call failed on rank {rank}: {message}")
            }
            Error::Distributed { failed_rank: None, message } => {
                write!(f, "the distributed call failed: {message}")
            }
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Driver { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// The library's result type.
pub type Result<T> = std::result::Result<T, Error>;
