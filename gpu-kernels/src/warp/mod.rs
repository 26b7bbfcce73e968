//! Warp-wide operations built on shuffles. *All lanes of the warp call together.*
//!
//! * reductions and scans, 32- and 64-bit, and the transpose of a warp's 32 × 32 bits (this
//!   file);
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

/// The 32 × 32 bit matrix whose row `l` is lane `l`'s `bits`, transposed: lane `b` gets the
/// word whose bit `l` is bit `b` of lane `l`'s `bits` — for 32 predicates a lane, lane `b`
/// ends with what a ballot of predicate `b` gives, in 5 shuffles instead of 32 ballots and
/// their selects (which keep the 32 ballots live). Each step swaps the off-diagonal blocks
/// of side `s` (16, 8, 4, 2, 1) between lanes `s` apart.
///
/// # Safety
/// All 32 lanes of the warp call it together.
#[inline(always)]
pub unsafe fn transpose_bits(bits: u32) -> u32 {
    let lane = device::lane_id();
    let mut word = bits;
    // Bit positions `b` with `b & s == 0`, for s = 16, 8, 4, 2, 1.
    let mut low = 0x0000_FFFFu32;
    let mut side = 16;
    while side > 0 {
        let partner = unsafe { shfl_xor_u32(device::FULL_WARP, word, side) };
        word = if lane & side == 0 {
            (word & low) | ((partner & low) << side)
        } else {
            (word & !low) | ((partner & !low) >> side)
        };
        side /= 2;
        low ^= low << side;
    }
    word
}

#[cfg(all(test, not(target_arch = "nvptx64")))]
mod tests {
    extern crate std;

    use std::sync::atomic::{AtomicU32, Ordering};
    use std::vec::Vec;

    use crate::device::{self, emulator};

    #[test]
    fn transpose_bits_gives_each_lane_a_ballot() {
        // Lane `l`'s bits: a pseudo-random word; lane `b` must get bit `b` of every lane.
        let row = |lane: u32| (lane.wrapping_mul(0x9E37_79B9) ^ 0x5bd1_e995).rotate_left(lane);
        let got: Vec<AtomicU32> = (0..32).map(|_| AtomicU32::new(0)).collect();
        let config = emulator::LaunchConfig { grid: (1, 1), block_threads: 32, shared_bytes: 0 };
        emulator::launch(&config, &|| {
            let lane = device::lane_id();
            got[lane as usize].store(unsafe { super::transpose_bits(row(lane)) }, Ordering::Relaxed);
        })
        .unwrap();
        for b in 0..32 {
            let want = (0..32).fold(0u32, |word, lane| word | ((row(lane) >> b) & 1) << lane);
            assert_eq!(got[b as usize].load(Ordering::Relaxed), want, "lane {b}");
        }
    }
}
