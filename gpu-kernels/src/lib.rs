//! GPU selection kernels, written once in Rust and built two ways.
//!
//! 1. For `nvptx64-nvidia-cuda` into PTX (`cargo xtask build-ptx`): the product, which the
//!    host crate `gpu-select` embeds (prebuilt, with `ptxas`'s machine code beside it) and
//!    launches through the CUDA driver API.
//! 2. For the host: everything the host and the device must agree on (launch parameters,
//!    key encodings, shared-memory layouts) and an emulator that runs the *same* kernel
//!    functions on CPU threads, so the test suite exercises real kernel code without a GPU.
//!
//! Layers, by how many threads cooperate; calls go downward only:
//!
//! | layer | what it holds |
//! |---|---|
//! | [`device`] | indices, barriers, warp shuffles/votes, shared memory, atomics, fences; the only place with `cfg(target_arch = "nvptx64")` |
//! | [`thread`] | compare-exchange on key + index pairs |
//! | [`warp`] | warp-wide reductions built on shuffles |
//! | [`block`] | block-wide networks in shared memory (bitonic sort), prefix sums |
//! | [`merge`] | device-wide merge of sorted runs (merge path) |
//! | [`topk`] | the top-k algorithms |
//! | [`select`] | selection by rank (SampleSelect, QuickSelect) |
//! | [`knn`] | exact k-nearest-neighbour search: distance tiles by a tiled matrix product |
//! | [`entry`] | the exported kernels, generated from one table |
//!
//! [`key`] holds the order-preserving key encodings, [`quantile`] numpy's quantile methods
//! and [`params`] the `#[repr(C)]` launch parameters; all three are shared with the host.
#![no_std]
// Nightly features only where the kernels are built for the GPU: the host side (launch
// parameters, keys, layouts, the emulator) builds on stable Rust.
#![cfg_attr(target_arch = "nvptx64", feature(macro_metavar_expr_concat))]
#![cfg_attr(
    target_arch = "nvptx64",
    feature(
        abi_gpu_kernel,
        stdarch_nvptx,
        link_llvm_intrinsics,
        asm_experimental_arch,
        gpu_intrinsics,
        gpu_launch_sized_workgroup_mem,
        core_intrinsics
    )
)]
#![cfg_attr(target_arch = "nvptx64", allow(internal_features))]

pub mod bandwidth;
pub mod block;
pub mod device;
pub mod entry;
pub mod gather;
pub mod key;
pub mod knn;
pub mod merge;
pub mod params;
pub mod probe;
pub mod quantile;
pub mod select;
pub mod thread;
pub mod topk;
pub mod warp;

#[cfg(test)]
mod testing;

pub use key::{Key, OrderedBits};
pub use params::Order;
