//! GPU selection in Rust: order statistics of data on an NVIDIA GPU, with kernels written
//! in Rust (`gpu-select-kernels`, compiled to PTX and prebuilt to machine code) and launched
//! through the CUDA driver API ([`cudarc`](https://docs.rs/cudarc), loaded at run time).
//!
//! What is here: the [`Gpu`] handle (a CUDA device and the stream its work queues on, or
//! the [emulator](Gpu::emulator) that runs the same kernel code on CPU threads), typed
//! [`DeviceBuffer`]s and views of memory the caller owns ([`DeviceSlice`], raw pointers, and
//! with the `cudarc` feature cudarc's slices), and the operations, one call shape each:
//!
//! | operation | convenient | plan | run of a plan | host slices |
//! |---|---|---|---|---|
//! | top-k of an array or of rows ([`Keys`]) | [`Gpu::top_k`] | [`Gpu::plan_top_k`] | [`Gpu::top_k_into`] | [`Gpu::top_k_host`] |
//! | the key of rank `k`, exact or approximate | [`Gpu::select`] | [`Gpu::plan_select`] | [`Gpu::select_into`] | [`Gpu::select_host`] |
//! | the keys of many ranks; numpy's quantiles (of an array or of each row) | [`Gpu::multiselect`], [`Gpu::quantiles`], [`Gpu::multiselect_rows`], [`Gpu::quantiles_rows`], [`Gpu::quantiles_rows_on_device`] | | [`Gpu::quantiles_rows_into`] | [`Gpu::multiselect_host`], [`Gpu::quantiles_host`] |
//! | many ranks or quantiles of keys spread over processes (DIBMS) | [`distributed::Distributed`] | | | |
//! | the `k` nearest vectors of each query (exact; L2, inner product, cosine; `f32`, `f16` or `bf16` vectors; on the tensor cores with exact re-ranking, [`FlatIndex::with_precision`]), a k-NN graph | [`Gpu::knn`], [`FlatIndex::search`], [`FlatIndex::knn_graph`] | [`Gpu::flat_index`], [`Gpu::upload_flat_index`] (the base's norms once), [`FlatIndex::plan_search`] | [`FlatIndex::search_into`] | [`FlatIndex::search_host`] |
//! | the same over several GPUs, the base sharded or replicated | [`MultiGpuIndex::search`] | [`MultiGpuIndex::new`] | | [`MultiGpuIndex::search_host`] |
//! | the same over a base in host memory (larger than the GPU's), streamed in chunks | [`StreamedIndex::search`] | [`Gpu::streamed_index`], [`StreamedIndex::plan_search`] | [`StreamedIndex::search_into`] | [`StreamedIndex::search_host`] |
//! | sorting segments of up to 2048 keys | [`Gpu::sort_segments`] | | [`Gpu::sort_segments_into`] | [`Gpu::sort_small`] |
//!
//! Also: the read floor every benchmark compares with ([`diagnostics::read_pass`]), the
//! tuning values ([`Tuning`]) and the CPU [`reference`](mod@reference) implementations the
//! tests use as the oracle. Which calls wait for the GPU: [`Gpu`](Gpu#which-calls-wait).
//!
//! ```
//! use gpu_select::{Gpu, Order, TopKOptions};
//!
//! // The GPU when one is present, else the emulator (or say which: GPU_SELECT_BACKEND).
//! let gpu = Gpu::from_env()?;
//! let data = gpu.upload(&[0.5f32, -2.0, 7.25, 0.5, 3.0])?;
//! let top = gpu.top_k(&data, 3, &TopKOptions::new(Order::Largest))?;
//! assert_eq!(gpu.download(&top.values)?, [7.25, 3.0, 0.5]);
//! assert_eq!(gpu.download(&top.indices)?, [2, 4, 0]); // ties keep their input order
//! # Ok::<(), gpu_select::Error>(())
//! ```
//!
//! # Keys and order
//!
//! Keys are `f32`, `f64`, `i32`, `u32`, `i64` and `u64` ([`SelectKey`]). Floats follow a
//! total order: `-inf < … < -0.0 < +0.0 < … < +inf < NaN` (every NaN alike), so "largest"
//! results start with the NaNs. See [`Key`].

mod api;
mod bandwidth;
mod buffer;
pub mod diagnostics;
pub mod distributed;
mod engine;
mod error;
mod gpu;
mod kernels;
mod limits;
mod options;
mod quantile;
pub mod reference;
mod results;
mod tuning;
mod view;
mod workspace;

pub use api::{
    FlatIndex, Keys, MultiGpuIndex, Placement, SearchPlan, SelectPlan, StreamedIndex, StreamedSearchPlan,
    TopKPlan, VectorComponent, Vectors,
};
pub use buffer::{DeviceBuffer, DeviceValue};
pub use engine::knn::KnnPrecision;
pub use error::{DriverError, Error, Result};
pub use gpu::{BACKEND_ENV, BackendKind, DeviceLimits, Gpu};
pub use gpu_select_kernels::knn::Metric;
pub use gpu_select_kernels::{Key, Order, OrderedBits};
pub use kernels::KernelImage;
pub use options::{
    Algorithm, InputFilter, KeyTransform, MAX_SMALL_SORT_LEN, MultiselectAlgorithm, NanPolicy, PADDING_INDEX,
    QuantileOptions, SampleSelectPolicy, SelectAlgorithm, SelectOptions, TopKOptions,
};
pub use quantile::{QuantileMethod, QuantilePoint};
pub use results::{Neighbours, Selection, SortedSegments, TopK, TopKOut};
pub use tuning::{RowsKernelFamily, Tuning};
pub use view::{DeviceSlice, DeviceSliceMut};

/// A key type the library selects on: `f32`, `f64`, `i32`, `u32`, `i64`, `u64`, and the
/// 16-bit floats `half::f16` and `half::bf16` (read at their own width: half the bytes of
/// `f32`; ordered as their `f32` values, NaN on top as for every float).
///
/// Sealed: each key type needs its kernels built into the library (its row of the kernel
/// table), so no other crate can add one.
pub trait SelectKey: Key + DeviceValue + sealed::KernelTable {}

mod sealed {
    /// The kernel table of a key type: reachable inside the library only.
    pub trait KernelTable: gpu_select_kernels::entry::KernelKey {}
}

macro_rules! select_keys {
    ($($t:ty),*) => {$(
        impl sealed::KernelTable for $t {}
        impl SelectKey for $t {}
    )*};
}
select_keys!(f32, f64, i32, u32, i64, u64, half::f16, half::bf16);

/// The README's example, compiled and run as a doc test.
#[doc = include_str!("../../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

/// docs/select.md's example, compiled and run as a doc test.
#[doc = include_str!("../../docs/select.md")]
#[cfg(doctest)]
pub struct SelectGuideDoctests;

/// docs/quantiles.md's example, compiled and run as a doc test.
#[doc = include_str!("../../docs/quantiles.md")]
#[cfg(doctest)]
pub struct QuantilesGuideDoctests;

/// docs/distributed.md's example, compiled and run as a doc test.
#[doc = include_str!("../../docs/distributed.md")]
#[cfg(doctest)]
pub struct DistributedGuideDoctests;

/// docs/knn.md's example, compiled and run as a doc test.
#[doc = include_str!("../../docs/knn.md")]
#[cfg(doctest)]
pub struct KnnGuideDoctests;

/// docs/sbp.md's example, compiled and run as a doc test.
#[doc = include_str!("../../docs/sbp.md")]
#[cfg(doctest)]
pub struct SbpGuideDoctests;

/// docs/rows.md's example, compiled and run as a doc test.
#[doc = include_str!("../../docs/rows.md")]
#[cfg(doctest)]
pub struct RowsGuideDoctests;
