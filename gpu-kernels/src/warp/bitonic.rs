//! Bitonic networks over key + position pairs held in a warp's registers.
//!
//! A warp holds `32·R` pairs in the *lane-stride* layout: element `e` of the warp lives in
//! register `e / 32` of lane `e % 32`.
//!
//! ```text
//!            lane 0   lane 1  …  lane 31
//! reg 0      e = 0    e = 1   …  e = 31
//! reg 1      e = 32   e = 33  …  e = 63
//!  …
//! reg R−1    e = 32(R−1) …       e = 32R − 1
//! ```
//!
//! A compare-exchange stage of stride `s` pairs element `e` with `e ^ s`:
//!
//! * `s ≥ 32`: the partner is register `r ^ (s/32)` of the *same lane* — a plain
//!   min/max in registers, no communication;
//! * `s < 32`: the partner is the same register of lane `lane ^ s` — one `shfl.sync.bfly`
//!   per word, and each lane keeps the min or the max.
//!
//! Register indices are compile-time constants in every stage (the stride between
//! registers is a const generic), so the arrays stay in registers (`tests/ptx_checks.rs`
//! checks that no kernel uses local memory).
//!
//! Directions follow Batcher's network over a larger index space: a stage of merge size
//! `size` sorts ascending where bit `size` of the element's *global* index (`base + e`) is 0,
//! and always ascending when `size == run_len`, so several runs of `run_len` laid side by
//! side all end ascending. That lets a block run the early merge sizes in registers and the
//! later ones in shared memory with one rule (`block::bitonic_sort`).

use crate::device::{self, FULL_WARP, WARP_SIZE};
use crate::key::OrderedBits;
use crate::thread::{pair_after, slot_after};

/// `32·R` (ordered bits, position) pairs of one warp, lane-stride layout.
#[derive(Clone, Copy, Debug)]
pub struct WarpPairs<B, const R: usize> {
    /// Encoded keys; register `r` of lane `l` holds element `32r + l`.
    pub bits: [B; R],
    /// Positions (tie-breaks and the index the caller maps back).
    pub positions: [u32; R],
}

impl<B: OrderedBits, const R: usize> WarpPairs<B, R> {
    /// Elements the warp holds.
    pub const LEN: usize = 32 * R;

    /// All registers set to `(MAX, u32::MAX)`: padding that sorts last.
    pub fn padding() -> Self {
        Self { bits: [B::MAX; R], positions: [u32::MAX; R] }
    }
}

/// Butterfly shuffle of ordered bits of either width (two shuffles for 64-bit keys).
///
/// # Safety
/// All 32 lanes call it together.
#[inline(always)]
pub(crate) unsafe fn shfl_xor_bits<B: OrderedBits>(value: B, lane_mask: u32) -> B {
    if B::BITS == 32 {
        B::from_u64(unsafe { device::shfl_xor_u32(FULL_WARP, value.low_u32(), lane_mask) } as u64)
    } else {
        B::from_u64(unsafe { device::shfl_xor_u64(FULL_WARP, value.to_u64(), lane_mask) })
    }
}

/// Indexed shuffle of ordered bits of either width: the value of lane `lane`.
///
/// # Safety
/// All 32 lanes call it together.
#[inline(always)]
pub(crate) unsafe fn shfl_idx_bits<B: OrderedBits>(value: B, lane: u32) -> B {
    if B::BITS == 32 {
        B::from_u64(unsafe { device::shfl_idx_u32(FULL_WARP, value.low_u32(), lane) } as u64)
    } else {
        B::from_u64(unsafe { device::shfl_idx_u64(FULL_WARP, value.to_u64(), lane) })
    }
}

/// Whether element `global` sorts ascending in a stage of merge size `size`.
#[inline(always)]
fn ascending(global: usize, size: usize, run_len: usize) -> bool {
    size == run_len || global & size == 0
}

/// One stage with stride `32·J` (`J ≥ 1`): partners in the same lane, registers `r` and
/// `r ^ J`.
#[inline(always)]
fn stage_in_registers<B: OrderedBits, const R: usize, const J: usize, const TIES: bool>(
    pairs: &mut WarpPairs<B, R>,
    base: usize,
    size: usize,
    run_len: usize,
) {
    let lane = device::lane_id() as usize;
    for r in 0..R {
        let partner = r ^ J;
        if partner > r && partner < R {
            let up = ascending(base + r * 32 + lane, size, run_len);
            let after = slot_after::<B, TIES>(
                pairs.bits[r],
                pairs.positions[r],
                pairs.bits[partner],
                pairs.positions[partner],
            );
            if after == up {
                (pairs.bits[r], pairs.bits[partner]) = (pairs.bits[partner], pairs.bits[r]);
                if TIES {
                    (pairs.positions[r], pairs.positions[partner]) =
                        (pairs.positions[partner], pairs.positions[r]);
                }
            }
        }
    }
}

/// One stage with stride `stride < 32`: partners in lanes `lane` and `lane ^ stride`.
///
/// # Safety
/// All 32 lanes call it together.
#[inline(always)]
unsafe fn stage_across_lanes<B: OrderedBits, const R: usize, const TIES: bool>(
    pairs: &mut WarpPairs<B, R>,
    base: usize,
    size: usize,
    stride: usize,
    run_len: usize,
) {
    let lane = device::lane_id() as usize;
    let lower = lane & stride == 0;
    for r in 0..R {
        let up = ascending(base + r * 32 + lane, size, run_len);
        let (bits, position) = (pairs.bits[r], pairs.positions[r]);
        let other_bits = unsafe { shfl_xor_bits(bits, stride as u32) };
        let other_position =
            if TIES { unsafe { device::shfl_xor_u32(FULL_WARP, position, stride as u32) } } else { position };
        // The lower element keeps the smaller pair when ascending, the larger otherwise.
        let keep_smaller = lower == up;
        let mine_after = slot_after::<B, TIES>(bits, position, other_bits, other_position);
        if mine_after == keep_smaller {
            pairs.bits[r] = other_bits;
            pairs.positions[r] = other_position;
        }
    }
}

/// Runs the stages of merge size `size` from stride `first_stride` down to 1.
///
/// `base` is the global index of the warp's element 0 (a multiple of `32·R`), used for
/// directions; `run_len` is the length of the runs being sorted (see the module docs).
///
/// # Safety
/// All 32 lanes call it together with the same arguments; `first_stride < 32·R`, `R ≤ 64`.
#[inline(always)]
pub unsafe fn merge_stages<B: OrderedBits, const R: usize>(
    pairs: &mut WarpPairs<B, R>,
    base: usize,
    size: usize,
    first_stride: usize,
    run_len: usize,
) {
    unsafe { merge_stages_by::<B, R, true>(pairs, base, size, first_stride, run_len) }
}

/// [`merge_stages`], by (bits, position) when `TIES`, by bits alone otherwise
/// ([`slot_after`]).
///
/// # Safety
/// As [`merge_stages`].
#[inline(always)]
pub(crate) unsafe fn merge_stages_by<B: OrderedBits, const R: usize, const TIES: bool>(
    pairs: &mut WarpPairs<B, R>,
    base: usize,
    size: usize,
    first_stride: usize,
    run_len: usize,
) {
    let mut stride = first_stride;
    while stride >= WARP_SIZE as usize {
        match stride / 32 {
            1 => stage_in_registers::<B, R, 1, TIES>(pairs, base, size, run_len),
            2 => stage_in_registers::<B, R, 2, TIES>(pairs, base, size, run_len),
            4 => stage_in_registers::<B, R, 4, TIES>(pairs, base, size, run_len),
            8 => stage_in_registers::<B, R, 8, TIES>(pairs, base, size, run_len),
            16 => stage_in_registers::<B, R, 16, TIES>(pairs, base, size, run_len),
            32 => stage_in_registers::<B, R, 32, TIES>(pairs, base, size, run_len),
            _ => unreachable!("register strides go up to 32 (R ≤ 64)"),
        }
        stride /= 2;
    }
    while stride > 0 {
        unsafe { stage_across_lanes::<B, R, TIES>(pairs, base, size, stride, run_len) };
        stride /= 2;
    }
}

/// Sorts the warp's elements in runs: all merge sizes `2, 4, …, min(run_len, 32·R)`.
///
/// With `run_len ≤ 32·R` every run of `run_len` elements ends ascending by (bits, position);
/// with a longer `run_len` the warp's `32·R` elements end as one sorted sequence whose
/// direction is what Batcher's network over `run_len` wants there, ready for the larger
/// merges in shared memory.
///
/// # Safety
/// All 32 lanes call it together with the same arguments; `R ≤ 64`, `run_len` a power of
/// two ≥ 2.
#[inline(always)]
pub unsafe fn sort_runs<B: OrderedBits, const R: usize>(
    pairs: &mut WarpPairs<B, R>,
    base: usize,
    run_len: usize,
) {
    unsafe { sort_runs_by::<B, R, true>(pairs, base, run_len) }
}

/// [`sort_runs`], by (bits, position) when `TIES`, by bits alone otherwise
/// ([`slot_after`]).
///
/// # Safety
/// As [`sort_runs`].
#[inline(always)]
pub(crate) unsafe fn sort_runs_by<B: OrderedBits, const R: usize, const TIES: bool>(
    pairs: &mut WarpPairs<B, R>,
    base: usize,
    run_len: usize,
) {
    let last = if run_len < 32 * R { run_len } else { 32 * R };
    let mut size = 2;
    while size <= last {
        unsafe { merge_stages_by::<B, R, TIES>(pairs, base, size, size / 2, run_len) };
        size *= 2;
    }
}

/// Folds two sorted runs of `32·Q` pairs into the smaller half, sorted: `kept` becomes the
/// `32·Q` smallest pairs of `kept ∪ other`, ascending (the bitonic top-k step: compare
/// `kept[i]` with `other[32Q − 1 − i]`, keep the smaller — the result is bitonic — then
/// rebuild it with a bitonic merge).
///
/// `other` must be sorted ascending too. Element `i = 32q + lane` of `kept` meets element
/// `32Q − 1 − i` of `other`: register `Q − 1 − q` of lane `31 − lane`.
///
/// # Safety
/// All 32 lanes call it together.
#[inline(always)]
pub unsafe fn fold_sorted_runs<B: OrderedBits, const Q: usize>(
    kept: &mut WarpPairs<B, Q>,
    other: &WarpPairs<B, Q>,
) {
    for q in 0..Q {
        let partner_bits = unsafe { shfl_xor_bits(other.bits[Q - 1 - q], 31) };
        let partner_position = unsafe { device::shfl_xor_u32(FULL_WARP, other.positions[Q - 1 - q], 31) };
        if pair_after(kept.bits[q], kept.positions[q], partner_bits, partner_position) {
            kept.bits[q] = partner_bits;
            kept.positions[q] = partner_position;
        }
    }
    // The kept run is bitonic: one merge sorts it (every stage ascending, as size == run).
    unsafe { merge_stages(kept, 0, 32 * Q, 16 * Q, 32 * Q) };
}

/// Folds run `2J + 1` into run `2J` and stores the result as run `J` (runs of `32·Q` pairs).
/// `J` is a const generic so that every register index is a constant: a loop over `J`
/// that LLVM declines to unroll would move the arrays to local memory.
#[inline(always)]
unsafe fn fold_pair<B: OrderedBits, const R: usize, const Q: usize, const J: usize>(
    all: &mut WarpPairs<B, R>,
) {
    let mut kept = WarpPairs::<B, Q>::padding();
    let mut other = WarpPairs::<B, Q>::padding();
    for q in 0..Q {
        kept.bits[q] = all.bits[2 * J * Q + q];
        kept.positions[q] = all.positions[2 * J * Q + q];
        other.bits[q] = all.bits[(2 * J + 1) * Q + q];
        other.positions[q] = all.positions[(2 * J + 1) * Q + q];
    }
    unsafe { fold_sorted_runs(&mut kept, &other) };
    for q in 0..Q {
        all.bits[J * Q + q] = kept.bits[q];
        all.positions[J * Q + q] = kept.positions[q];
    }
}

/// Folds the `RUNS` runs in use pairwise into `RUNS / 2`, packed to the front.
#[inline(always)]
unsafe fn fold_level<B: OrderedBits, const R: usize, const Q: usize, const RUNS: usize>(
    all: &mut WarpPairs<B, R>,
) {
    macro_rules! fold_pairs {
        ($($j:literal)*) => { $( if $j < RUNS / 2 { unsafe { fold_pair::<B, R, Q, $j>(all) } } )* };
    }
    fold_pairs!(0 1 2 3 4 5 6 7);
}

/// Reduces the `32·R` pairs of a warp, sorted in runs of `32·Q` (by [`sort_runs`] with
/// `run_len = 32·Q`), to their `32·Q` smallest, sorted ascending, by folding runs pairwise.
///
/// # Safety
/// All 32 lanes call it together; `Q` divides `R`, both powers of two, `R ≤ 16`.
#[inline(always)]
pub unsafe fn reduce_runs<B: OrderedBits, const R: usize, const Q: usize>(
    pairs: &WarpPairs<B, R>,
) -> WarpPairs<B, Q> {
    let mut all = *pairs;
    unsafe {
        if R / Q >= 16 {
            fold_level::<B, R, Q, 16>(&mut all);
        }
        if R / Q >= 8 {
            fold_level::<B, R, Q, 8>(&mut all);
        }
        if R / Q >= 4 {
            fold_level::<B, R, Q, 4>(&mut all);
        }
        if R / Q >= 2 {
            fold_level::<B, R, Q, 2>(&mut all);
        }
    }
    let mut best = WarpPairs::<B, Q>::padding();
    for q in 0..Q {
        best.bits[q] = all.bits[q];
        best.positions[q] = all.positions[q];
    }
    best
}
