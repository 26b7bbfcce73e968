//! Squared norms of vectors: a warp per vector, lanes over its components, a butterfly sum.

use super::{Bf16Bits, Component, F16Bits};
use crate::device::{self, FULL_WARP};
use crate::params::GlobalPtr;

/// Threads per block of [`squared_norms`] (a warp per vector).
pub const NORMS_THREADS: u32 = 256;

/// Parameters of `knn_norms_<storage>`.
#[repr(C)]
#[derive(Debug)]
pub struct NormsParams<S> {
    /// `count` vectors of `dim` components, vector `i` at `i · stride`.
    pub vectors: GlobalPtr<S>,
    /// Components from one vector's start to the next's.
    pub stride: u64,
    /// Number of vectors.
    pub count: u64,
    /// Components per vector.
    pub dim: u64,
    /// `count` squared norms.
    pub out: GlobalPtr<f32>,
}

impl<S> Clone for NormsParams<S> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<S> Copy for NormsParams<S> {}

/// The `knn_norms_<storage>` kernel: `out[i] = Σ_j vectors[i · stride + j]²`, in `f32`.
///
/// # Safety
/// Blocks of whole warps; the vectors and `out` in bounds.
#[inline(always)]
pub unsafe fn squared_norms<S: Component>(params: NormsParams<S>) {
    let warps_per_block = (device::block_dim_x() / 32) as u64;
    let warps = device::grid_dim_x() as u64 * warps_per_block;
    let lane = device::lane_id() as u64;
    let mut vector = device::block_idx_x() as u64 * warps_per_block + device::warp_id() as u64;
    // Whole warps loop together (the trip count is the same on every lane).
    while vector < params.count {
        let start = vector * params.stride;
        let mut sum = 0.0f32;
        let mut j = lane;
        while j < params.dim {
            let x = unsafe { params.vectors.read(start + j) }.to_f32();
            sum = device::fma_f32(x, x, sum);
            j += 32;
        }
        let mut lane_mask = 16;
        while lane_mask > 0 {
            sum += f32::from_bits(unsafe { device::shfl_xor_u32(FULL_WARP, sum.to_bits(), lane_mask) });
            lane_mask /= 2;
        }
        if lane == 0 {
            unsafe { params.out.write(vector, sum) };
        }
        vector += warps;
    }
}

/// [`squared_norms`] of `f32` vectors.
///
/// # Safety
/// As [`squared_norms`].
pub unsafe fn squared_norms_f32(params: NormsParams<f32>) {
    unsafe { squared_norms(params) }
}

/// [`squared_norms`] of binary16 vectors.
///
/// # Safety
/// As [`squared_norms`].
pub unsafe fn squared_norms_f16(params: NormsParams<F16Bits>) {
    unsafe { squared_norms(params) }
}

/// [`squared_norms`] of bfloat16 vectors.
///
/// # Safety
/// As [`squared_norms`].
pub unsafe fn squared_norms_bf16(params: NormsParams<Bf16Bits>) {
    unsafe { squared_norms(params) }
}
