//! Bitonic top-k (Shanbhag, Pirk, Madden), with the sorting networks in registers.
//!
//! One kernel, launched in passes; each block reduces its share of the input to its `k`
//! best pairs (the paper's *SortReducer*), and the next pass reduces the blocks' outputs the
//! same way (*BitonicReducer*) until one block is left. Per block, for each tile of
//! [`TOPK_TILE`] = 2048 inputs (grid-stride over tiles):
//!
//! 1. load 8 pairs per thread into registers: the key encoded as ordered bits (complemented
//!    for "largest", so the block always keeps the smallest bits) and its input index as the
//!    position, which also breaks ties (lower index first);
//! 2. sort runs of `k' = 32·Q` (k rounded up to a power of two, at least 32) inside each warp
//!    ([`sort_runs`]);
//! 3. fold the warp's runs pairwise to one run of `k'` — compare run A with run B reversed,
//!    keep the smaller of each pair (the result is bitonic), rebuild with a bitonic merge
//!    ([`reduce_runs`]);
//! 4. fold the 8 warps' runs in a tree through shared memory (3 levels), then fold the tile's
//!    best into the block's running best, which warp 0 keeps in registers across tiles.
//!
//! The block writes its `k` best (sorted) with their input indices; a pass over `b` blocks
//! leaves `b·k` candidates for the next one. Keys are written by gathering from the
//! original data at the winning index, so NaN payloads and `-0.0` survive bit for bit.
//!
//! Positions are 32-bit: the kernel takes inputs of fewer than 2^32 elements.

use crate::device::{self, SharedLayout, SharedRegion};
use crate::key::{Key, OrderedBits};
use crate::params::{GlobalPtr, Order};
use crate::warp::bitonic::{WarpPairs, fold_sorted_runs, reduce_runs, sort_runs};

/// Threads per block.
pub const TOPK_THREADS: u32 = 256;
/// Inputs one block reduces per step: 8 per thread.
pub const TOPK_TILE: u64 = 2048;
/// Pairs each thread holds.
const PAIRS_PER_THREAD: usize = 8;
/// Warps per block.
const WARPS: usize = (TOPK_THREADS / 32) as usize;
/// The largest `k` of the register path (`32·Q` with `Q = 8`).
pub const MAX_BITONIC_K: u32 = 256;

/// Parameters of `topk_bitonic_q<Q>_<key>`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct TopKParams<K> {
    /// Input keys (the data in the first pass, the previous pass's candidates later).
    pub keys_in: GlobalPtr<K>,
    /// Index of each input in the original data, or null when it is its position.
    pub indices_in: GlobalPtr<u64>,
    /// The original data, where output keys are gathered from.
    pub original_keys: GlobalPtr<K>,
    /// `grid.x · k` keys: block `b` writes its `k` best, sorted, at `b·k`.
    pub keys_out: GlobalPtr<K>,
    /// Their indices in the original data.
    pub indices_out: GlobalPtr<u64>,
    /// Number of inputs (below 2^32).
    pub len: u64,
    /// How many to keep, 1 to `32·Q`.
    pub k: u32,
    /// [`Order::to_raw`].
    pub order: u32,
}

/// The shared memory of the kernel: one run of `k' = 32·Q` pairs per warp.
#[derive(Clone, Copy, Debug)]
pub struct TopKLayout<B> {
    /// Encoded keys of each warp's run.
    pub bits: SharedRegion<B>,
    /// Their positions.
    pub positions: SharedRegion<u32>,
    /// Bytes to ask for at launch.
    pub bytes: usize,
}

impl<B> TopKLayout<B> {
    /// The layout for runs of `32·q` pairs.
    pub const fn new(q: usize) -> Self {
        let (layout, bits) = SharedLayout::new().push::<B>(WARPS * 32 * q);
        let (layout, positions) = layout.push::<u32>(WARPS * 32 * q);
        Self { bits, positions, bytes: layout.bytes() }
    }
}

/// `Q` (registers per run) for a given `k`: `k` rounded up to a power of two ≥ 32, over 32.
pub const fn registers_for_k(k: u32) -> u32 {
    let padded = k.next_power_of_two();
    if padded < 32 { 1 } else { padded / 32 }
}

/// Loads one tile's pairs into registers: element `tile_start + 256·warp + 32·r + lane`
/// lands in register `r` (coalesced: each register load is 32 consecutive keys per warp).
#[inline(always)]
unsafe fn load_tile<K: Key>(
    params: &TopKParams<K>,
    tile_start: u64,
    largest: bool,
) -> WarpPairs<K::Bits, PAIRS_PER_THREAD> {
    let mut pairs = WarpPairs::<K::Bits, PAIRS_PER_THREAD>::padding();
    let first = tile_start + device::warp_id() as u64 * 256 + device::lane_id() as u64;
    for r in 0..PAIRS_PER_THREAD {
        let i = first + r as u64 * 32;
        if i < params.len {
            let ordered = unsafe { params.keys_in.read(i) }.to_ordered();
            pairs.bits[r] = if largest { ordered.complement() } else { ordered };
            pairs.positions[r] = if params.indices_in.is_null() {
                i as u32
            } else {
                (unsafe { params.indices_in.read(i) }) as u32
            };
        }
    }
    pairs
}

/// The `topk_bitonic_q<Q>_<key>` kernel body (module docs). `Q` = [`registers_for_k`].
///
/// # Safety
/// [`TOPK_THREADS`] threads, [`TopKLayout::bytes`] of shared memory, `len < 2^32`,
/// `1 ≤ k ≤ 32·Q`, outputs of `grid.x · k`.
pub unsafe fn reduce<K: Key, const Q: usize>(params: TopKParams<K>) {
    let largest = Order::from_raw(params.order) == Order::Largest;
    let warp = device::warp_id() as usize;
    let lane = device::lane_id() as usize;
    let layout = TopKLayout::<K::Bits>::new(Q);
    let (shared_bits, shared_positions) = unsafe { (layout.bits.bind(), layout.positions.bind()) };
    let run = 32 * Q;
    let tiles = params.len.div_ceil(TOPK_TILE);
    let mut best = WarpPairs::<K::Bits, Q>::padding();

    let mut tile = device::block_idx_x() as u64;
    while tile < tiles {
        let pairs = unsafe { load_tile(&params, tile * TOPK_TILE, largest) };
        let mut sorted = pairs;
        unsafe { sort_runs(&mut sorted, 0, run) };
        let mut warp_best = unsafe { reduce_runs::<K::Bits, PAIRS_PER_THREAD, Q>(&sorted) };

        // Fold the warps' runs in a tree: at distance d, warp w (a multiple of 2d) takes
        // warp w + d's run. Each level: write, barrier, read.
        let mut distance = 1;
        while distance < WARPS {
            unsafe { device::sync_threads() }; // the previous readers of the slots are done
            if warp.is_multiple_of(distance) {
                for q in 0..Q {
                    let slot = warp * run + q * 32 + lane;
                    unsafe {
                        shared_bits.store(slot, warp_best.bits[q]);
                        shared_positions.store(slot, warp_best.positions[q]);
                    }
                }
            }
            unsafe { device::sync_threads() };
            if warp.is_multiple_of(2 * distance) {
                let mut other = WarpPairs::<K::Bits, Q>::padding();
                for q in 0..Q {
                    let slot = (warp + distance) * run + q * 32 + lane;
                    unsafe {
                        other.bits[q] = shared_bits.load(slot);
                        other.positions[q] = shared_positions.load(slot);
                    }
                }
                unsafe { fold_sorted_runs(&mut warp_best, &other) };
            }
            distance *= 2;
        }
        if warp == 0 {
            unsafe { fold_sorted_runs(&mut best, &warp_best) };
        }
        tile += device::grid_dim_x() as u64;
    }

    if warp == 0 {
        let out_start = device::block_idx_x() as u64 * params.k as u64;
        for q in 0..Q {
            let rank = q * 32 + lane;
            // Padding (MAX bits, position u32::MAX) only reaches the output when the block
            // saw fewer than k inputs, which the host never launches.
            if rank < params.k as usize {
                let index = best.positions[q] as u64;
                unsafe {
                    params.keys_out.write(out_start + rank as u64, params.original_keys.read(index));
                    params.indices_out.write(out_start + rank as u64, index);
                }
            }
        }
    }
}

/// `reduce` with `Q = 1` (k ≤ 32), for the kernel table.
///
/// # Safety
/// As [`reduce`].
pub unsafe fn reduce_q1<K: Key>(params: TopKParams<K>) {
    unsafe { reduce::<K, 1>(params) }
}
/// `reduce` with `Q = 2` (k ≤ 64).
///
/// # Safety
/// As [`reduce`].
pub unsafe fn reduce_q2<K: Key>(params: TopKParams<K>) {
    unsafe { reduce::<K, 2>(params) }
}
/// `reduce` with `Q = 4` (k ≤ 128).
///
/// # Safety
/// As [`reduce`].
pub unsafe fn reduce_q4<K: Key>(params: TopKParams<K>) {
    unsafe { reduce::<K, 4>(params) }
}
/// `reduce` with `Q = 8` (k ≤ 256).
///
/// # Safety
/// As [`reduce`].
pub unsafe fn reduce_q8<K: Key>(params: TopKParams<K>) {
    unsafe { reduce::<K, 8>(params) }
}
