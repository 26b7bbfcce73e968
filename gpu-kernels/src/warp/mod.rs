//! Warp-wide operations built on shuffles. *All lanes of the warp call together.*
//!
//! * reductions and scans, 32- and 64-bit (this file);
//! * [`bitonic`]: bitonic sorting and merging networks over `32·R` key + position pairs held
//!   in registers;
//! * [`select`]: WarpSelect, a warp's queue of its `k` smallest pairs (Faiss).

pub mod bitonic;
pub mod select;

use crate::device::{self, shfl_xor_u32};

/// Combines `value` across the lanes of a full warp by a butterfly (5 `shfl.bfly` steps, lane
/// masks 16, 8, 4, 2, 1); every lane ends with the same result. `combine` must be
/// associative and commutative.
///
/// # Safety
/// All 32 lanes of the warp call it together.
#[inline(always)]
unsafe fn butterfly_u32(value: u32, combine: impl Fn(u32, u32) -> u32) -> u32 {
    let mut acc = value;
    let mut lane_mask = 16;
    while lane_mask > 0 {
        acc = combine(acc, unsafe { shfl_xor_u32(device::FULL_WARP, acc, lane_mask) });
        lane_mask /= 2;
    }
    acc
}

/// [`butterfly_u32`] for 64-bit values (each step shuffles both halves).
///
/// # Safety
/// All 32 lanes of the warp call it together.
#[inline(always)]
unsafe fn butterfly_u64(value: u64, combine: impl Fn(u64, u64) -> u64) -> u64 {
    let mut acc = value;
    let mut lane_mask = 16;
    while lane_mask > 0 {
        acc = combine(acc, unsafe { device::shfl_xor_u64(device::FULL_WARP, acc, lane_mask) });
        lane_mask /= 2;
    }
    acc
}

/// Sum of `value` over the lanes of a full warp (wrapping); every lane gets the result.
///
/// # Safety
/// All 32 lanes of the warp call it together.
#[inline(always)]
pub unsafe fn reduce_add_u32(value: u32) -> u32 {
    unsafe { butterfly_u32(value, u32::wrapping_add) }
}

/// Maximum of `value` over the lanes of a full warp; every lane gets the result.
///
/// # Safety
/// All 32 lanes of the warp call it together.
#[inline(always)]
pub unsafe fn reduce_max_u32(value: u32) -> u32 {
    unsafe { butterfly_u32(value, u32::max) }
}

/// Minimum of a `u64` over the lanes of a full warp; every lane gets the result.
///
/// # Safety
/// All 32 lanes of the warp call it together.
#[inline(always)]
pub unsafe fn reduce_min_u64(value: u64) -> u64 {
    unsafe { butterfly_u64(value, u64::min) }
}

/// Maximum of a `u64` over the lanes of a full warp; every lane gets the result.
///
/// # Safety
/// All 32 lanes of the warp call it together.
#[inline(always)]
pub unsafe fn reduce_max_u64(value: u64) -> u64 {
    unsafe { butterfly_u64(value, u64::max) }
}

/// Inclusive prefix sum of `value` over the lanes of a full warp (Hillis–Steele with
/// `shfl.up`, 5 shuffles).
///
/// # Safety
/// All 32 lanes of the warp call it together.
#[inline(always)]
pub unsafe fn inclusive_scan_add_u32(value: u32) -> u32 {
    let lane = device::lane_id();
    let mut sum = value;
    let mut delta = 1;
    while delta < device::WARP_SIZE {
        let below = unsafe { device::shfl_up_u32(device::FULL_WARP, sum, delta) };
        if lane >= delta {
            sum = sum.wrapping_add(below);
        }
        delta *= 2;
    }
    sum
}

/// Inclusive prefix sum of a `u64` over the lanes of a full warp (as
/// [`inclusive_scan_add_u32`], 64-bit shuffles).
///
/// # Safety
/// All 32 lanes of the warp call it together.
#[inline(always)]
pub unsafe fn inclusive_scan_add_u64(value: u64) -> u64 {
    let lane = device::lane_id();
    let mut sum = value;
    let mut delta = 1;
    while delta < device::WARP_SIZE {
        let below = unsafe { device::shfl_up_u64(device::FULL_WARP, sum, delta) };
        if lane >= delta {
            sum = sum.wrapping_add(below);
        }
        delta *= 2;
    }
    sum
}
