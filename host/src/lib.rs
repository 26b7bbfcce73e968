//! GPU selection in Rust: order statistics of data on an NVIDIA GPU, with kernels written
//! in Rust (`gpu-select-kernels`, compiled to PTX and prebuilt to machine code) and launched
//! through the CUDA driver API ([`cudarc`](https://docs.rs/cudarc), loaded at run time).
//!
//! What is here: the [`Gpu`] handle (a CUDA device, or the [emulator](Gpu::emulator) that
//! runs the same kernel code on CPU threads), typed [`DeviceBuffer`]s, top-k
//! ([`Gpu::top_k`], see [`Algorithm`]), the element of rank `k` ([`Gpu::select`], by
//! SampleSelect or QuickSelect) and its one-level approximation with an exact rank
//! ([`Gpu::select_approx`]), a block bitonic sort of small segments
//! ([`Gpu::sort_segments`]), the read floor every benchmark compares with
//! ([`Gpu::read_pass`]) and the CPU [`reference`](mod@reference) implementations the tests use as the
//! oracle.
//!
//! ```
//! use gpu_select::{Gpu, Order};
//!
//! // The GPU when one is present, else the emulator (or say which: GPU_SELECT_BACKEND).
//! let gpu = Gpu::from_env()?;
//! let (keys, indices) = gpu.sort_small(&[0.5f32, -2.0, 7.25, 0.5], Order::Largest)?;
//! assert_eq!(keys, [7.25, 0.5, 0.5, -2.0]);
//! assert_eq!(indices, [2, 0, 3, 1]); // ties keep their input order
//! # Ok::<(), gpu_select::Error>(())
//! ```
//!
//! # Keys and order
//!
//! Keys are `f32`, `f64`, `i32`, `u32`, `i64` and `u64` ([`SelectKey`]). Floats follow a
//! total order: `-inf < … < -0.0 < +0.0 < … < +inf < NaN` (every NaN alike), so "largest"
//! results start with the NaNs. See [`Key`].

mod bandwidth;
mod buffer;
pub mod diagnostics;
mod error;
mod gpu;
mod kernels;
pub mod reference;
mod select;
mod sort;
mod topk;
mod tuning;

pub use buffer::{DeviceBuffer, DeviceValue};
pub use error::{DriverError, Error, Result};
pub use gpu::{BACKEND_ENV, BackendKind, DeviceLimits, Gpu};
pub use gpu_select_kernels::{Key, Order};
pub use kernels::KernelImage;
pub use select::{ApproxSelection, SampleSelectPolicy, SelectAlgorithm, SelectOptions};
pub use sort::{MAX_SMALL_SORT_LEN, SortedSegments};
pub use topk::{
    Algorithm, InputFilter, KeyTransform, PADDING_INDEX, RowsAlgorithm, TopK, TopKFusion, TopKOptions,
};
pub use tuning::{RowsKernelFamily, Tuning};

/// A key type the library selects on: `f32`, `f64`, `i32`, `u32`, `i64`, `u64`.
pub trait SelectKey: Key + gpu_select_kernels::entry::KernelKey + DeviceValue {}

impl<K: Key + gpu_select_kernels::entry::KernelKey + DeviceValue> SelectKey for K {}

/// The README's example, compiled and run as a doc test.
#[doc = include_str!("../../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

/// docs/select.md's example, compiled and run as a doc test.
#[doc = include_str!("../../docs/select.md")]
#[cfg(doctest)]
pub struct SelectGuideDoctests;

/// docs/rows.md's example, compiled and run as a doc test.
#[doc = include_str!("../../docs/rows.md")]
#[cfg(doctest)]
pub struct RowsGuideDoctests;
