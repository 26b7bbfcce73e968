//! Warp-wide operations built on shuffles. *All lanes of the warp call together.*
//!
//! * reductions and scans, 32- and 64-bit (this file);
//! * [`bitonic`]: bitonic sorting and merging networks over `32·R` key + position pairs held
//!   in registers;
//! * [`select`]: WarpSelect, a warp's queue of its `k` smallest pairs (Faiss).

pub mod bitonic;
pub mod select;

use crate::device::{self, shfl_xor_u32};

/// Sum of `value` over the lanes of a full warp (butterfly reduction, 5 shuffles); every
/// lane gets the result.
///
/// # Safety
/// All 32 lanes of the warp call it together.
#[inline(always)]
pub unsafe fn reduce_add_u32(value: u32) -> u32 {
    let mut sum = value;
    let mut lane_mask = 16;
    while lane_mask > 0 {
        sum = sum.wrapping_add(unsafe { shfl_xor_u32(device::FULL_WARP, sum, lane_mask) });
        lane_mask /= 2;
    }
    sum
}

/// Maximum of `value` over the lanes of a full warp; every lane gets the result.
///
/// # Safety
/// All 32 lanes of the warp call it together.
#[inline(always)]
pub unsafe fn reduce_max_u32(value: u32) -> u32 {
    let mut max = value;
    let mut lane_mask = 16;
    while lane_mask > 0 {
        max = max.max(unsafe { shfl_xor_u32(device::FULL_WARP, max, lane_mask) });
        lane_mask /= 2;
    }
    max
}

/// Minimum of a `u64` over the lanes of a full warp; every lane gets the result.
///
/// # Safety
/// All 32 lanes of the warp call it together.
#[inline(always)]
pub unsafe fn reduce_min_u64(value: u64) -> u64 {
    let mut min = value;
    let mut lane_mask = 16;
    while lane_mask > 0 {
        min = min.min(unsafe { device::shfl_xor_u64(device::FULL_WARP, min, lane_mask) });
        lane_mask /= 2;
    }
    min
}

/// Maximum of a `u64` over the lanes of a full warp; every lane gets the result.
///
/// # Safety
/// All 32 lanes of the warp call it together.
#[inline(always)]
pub unsafe fn reduce_max_u64(value: u64) -> u64 {
    let mut max = value;
    let mut lane_mask = 16;
    while lane_mask > 0 {
        max = max.max(unsafe { device::shfl_xor_u64(device::FULL_WARP, max, lane_mask) });
        lane_mask /= 2;
    }
    max
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
