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
//! **Pruning** (an addition to the paper, which keeps its data-independent network): a
//! block holds a *bound*, a pair that at least `k` inputs are no worse than: the `k`-th best
//! of a sample of the data (computed by an earlier chain of passes over sample tiles, and
//! passed in `prune_key` / `prune_index`), tightened by the block's own running `k`-th best.
//! Inputs beyond the bound cannot be in the top `k`; a tile with no input inside the bound
//! is read and compared, nothing more (one block-wide vote). On most distributions almost
//! every tile takes that path, so the pass runs near the speed of a plain read.
//!
//! A block that saw fewer than `k` inputs inside the bound writes padding: index
//! [`NO_INDEX`], which the next pass skips.
//!
//! Positions are 32-bit: the kernel takes inputs of fewer than 2^32 elements.

use crate::device::{self, SharedLayout, SharedRegion};
use crate::key::{Key, OrderedBits};
use crate::params::{GlobalPtr, Order};
use crate::thread::pair_after;
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
/// The index a block writes for a padding result (it saw fewer than `k` candidates).
pub const NO_INDEX: u64 = u64::MAX;

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
    /// Number of inputs (below 2^32): no input at or past it is read.
    pub len: u64,
    /// Tiles the grid reduces (grid-stride over them).
    pub tiles: u64,
    /// Tile `t` covers inputs `t·tile_stride·2048 ..+2048`: 1 for all the data, more to
    /// read evenly spaced sample tiles.
    pub tile_stride: u64,
    /// The key of the pruning bound (the `k`-th best of a sample), or null for none.
    pub prune_key: GlobalPtr<K>,
    /// The index of the pruning bound (read when `prune_key` is not null).
    pub prune_index: GlobalPtr<u64>,
    /// How many to keep, 1 to `32·Q`.
    pub k: u32,
    /// [`Order::to_raw`].
    pub order: u32,
}

/// The shared memory of the kernel: one run of `k' = 32·Q` pairs per warp, the warps'
/// votes (two sets, alternating by tile) and the block's pruning bound.
#[derive(Clone, Copy, Debug)]
pub struct TopKLayout<B> {
    /// Encoded keys of each warp's run.
    pub bits: SharedRegion<B>,
    /// Their positions.
    pub positions: SharedRegion<u32>,
    /// Whether each warp has an input inside the bound, for even and odd tiles.
    pub votes: SharedRegion<u32>,
    /// The bound's encoded key.
    pub bound_bits: SharedRegion<B>,
    /// The bound's position.
    pub bound_position: SharedRegion<u32>,
    /// Bytes to ask for at launch.
    pub bytes: usize,
}

impl<B> TopKLayout<B> {
    /// The layout for runs of `32·q` pairs.
    pub const fn new(q: usize) -> Self {
        let (layout, bits) = SharedLayout::new().push::<B>(WARPS * 32 * q);
        let (layout, positions) = layout.push::<u32>(WARPS * 32 * q);
        let (layout, votes) = layout.push::<u32>(2 * WARPS);
        let (layout, bound_bits) = layout.push::<B>(1);
        let (layout, bound_position) = layout.push::<u32>(1);
        Self { bits, positions, votes, bound_bits, bound_position, bytes: layout.bytes() }
    }
}

/// `Q` (registers per run) for a given `k`: `k` rounded up to a power of two ≥ 32, over 32.
pub const fn registers_for_k(k: u32) -> u32 {
    let padded = k.next_power_of_two();
    if padded < 32 { 1 } else { padded / 32 }
}

/// One tile's inputs as loaded, before encoding: 8 keys and their indices per thread.
#[derive(Clone, Copy)]
struct RawTile<K> {
    keys: [K; PAIRS_PER_THREAD],
    indices: [u64; PAIRS_PER_THREAD],
}

/// Issues the loads of one tile: input `tile_start + 256·warp + 32·r + lane` for register
/// `r` (each register load is 32 consecutive keys per warp). Addresses are clamped into
/// the input instead of branched around, so all loads issue back to back and nothing
/// waits for them until [`encode_tile`] runs, one tile later.
#[inline(always)]
unsafe fn fetch_tile<K: Key>(params: &TopKParams<K>, tile_start: u64) -> RawTile<K> {
    let first = tile_start + device::warp_id() as u64 * 256 + device::lane_id() as u64;
    let last = params.len - 1;
    let mut raw = RawTile { keys: [K::default(); PAIRS_PER_THREAD], indices: [0; PAIRS_PER_THREAD] };
    for r in 0..PAIRS_PER_THREAD {
        raw.keys[r] = unsafe { params.keys_in.read((first + r as u64 * 32).min(last)) };
    }
    if params.indices_in.is_null() {
        for r in 0..PAIRS_PER_THREAD {
            raw.indices[r] = first + r as u64 * 32;
        }
    } else {
        for r in 0..PAIRS_PER_THREAD {
            raw.indices[r] = unsafe { params.indices_in.read((first + r as u64 * 32).min(last)) };
        }
    }
    raw
}

/// Encodes a fetched tile: ordered bits (complemented for "largest") and positions;
/// inputs past the end and padding from an earlier pass become padding.
#[inline(always)]
fn encode_tile<K: Key>(
    params: &TopKParams<K>,
    raw: &RawTile<K>,
    tile_start: u64,
    largest: bool,
) -> WarpPairs<K::Bits, PAIRS_PER_THREAD> {
    let first = tile_start + device::warp_id() as u64 * 256 + device::lane_id() as u64;
    let mut pairs = WarpPairs::<K::Bits, PAIRS_PER_THREAD>::padding();
    for r in 0..PAIRS_PER_THREAD {
        if first + (r as u64) * 32 < params.len && raw.indices[r] != NO_INDEX {
            let ordered = raw.keys[r].to_ordered();
            pairs.bits[r] = if largest { ordered.complement() } else { ordered };
            pairs.positions[r] = raw.indices[r] as u32;
        }
    }
    pairs
}

/// The `topk_bitonic_q<Q>_<key>` kernel body (module docs). `Q` = [`registers_for_k`].
///
/// # Safety
/// [`TOPK_THREADS`] threads, [`TopKLayout::bytes`] of shared memory, `len < 2^32`,
/// `1 ≤ k ≤ 32·Q`, outputs of `grid.x · k`.
// Always inlined into its entry point: left to the inliner (with the unroll threshold of
// host/build_ptx.rs) the 64-bit Q8 body became a call taking its parameters through local memory.
#[inline(always)]
pub unsafe fn reduce<K: Key, const Q: usize>(params: TopKParams<K>) {
    let largest = Order::from_raw(params.order) == Order::Largest;
    let warp = device::warp_id() as usize;
    let lane = device::lane_id() as usize;
    let thread = device::thread_idx_x() as usize;
    let layout = TopKLayout::<K::Bits>::new(Q);
    let (shared_bits, shared_positions) = unsafe { (layout.bits.bind(), layout.positions.bind()) };
    let (votes, bound_bits, bound_position) =
        unsafe { (layout.votes.bind(), layout.bound_bits.bind(), layout.bound_position.bind()) };
    let run = 32 * Q;
    let mut best = WarpPairs::<K::Bits, Q>::padding();

    // The bound starts at the sample's k-th best, or at "everything passes".
    if thread == 0 {
        let (bits, position) = if params.prune_key.is_null() {
            (K::Bits::MAX, u32::MAX)
        } else {
            let ordered = unsafe { params.prune_key.read(0) }.to_ordered();
            let bits = if largest { ordered.complement() } else { ordered };
            (bits, unsafe { params.prune_index.read(0) } as u32)
        };
        unsafe {
            bound_bits.store(0, bits);
            bound_position.store(0, position);
        }
    }
    unsafe { device::sync_threads() };

    let tile_start = |tile: u64| tile * params.tile_stride * TOPK_TILE;
    let mut tile = device::block_idx_x() as u64;
    let mut parity = 0;
    // Tile t + 1 is fetched before tile t is encoded and voted on, so its loads are in
    // flight while this tile is processed (most tiles need nothing but the vote).
    let mut next = unsafe { fetch_tile(&params, tile_start(tile)) };
    while tile < params.tiles {
        let current = next;
        let current_start = tile_start(tile);
        tile += device::grid_dim_x() as u64;
        if tile < params.tiles {
            next = unsafe { fetch_tile(&params, tile_start(tile)) };
        }
        let mut sorted = encode_tile(&params, &current, current_start, largest);

        // Prune: inputs beyond the bound become padding; vote on whether any is left.
        let (limit_bits, limit_position) = unsafe { (bound_bits.load(0), bound_position.load(0)) };
        let mut inside = false;
        for r in 0..PAIRS_PER_THREAD {
            if pair_after(sorted.bits[r], sorted.positions[r], limit_bits, limit_position) {
                sorted.bits[r] = K::Bits::MAX;
                sorted.positions[r] = u32::MAX;
            } else {
                inside = true;
            }
        }
        let warp_inside = unsafe { device::ballot(device::FULL_WARP, inside) } != 0;
        if lane == 0 {
            unsafe { votes.store(parity * WARPS + warp, warp_inside as u32) };
        }
        unsafe { device::sync_threads() };
        let mut any_inside = false;
        for w in 0..WARPS {
            any_inside |= unsafe { votes.load(parity * WARPS + w) } != 0;
        }
        parity ^= 1;
        if !any_inside {
            continue;
        }

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
            // The block's k-th best so far bounds the rest, once it beats the bound.
            let kth = params.k as usize - 1;
            let (mut kth_bits, mut kth_position) = (K::Bits::MAX, u32::MAX);
            for q in 0..Q {
                if q == kth / 32 {
                    (kth_bits, kth_position) = (best.bits[q], best.positions[q]);
                }
            }
            if lane == kth % 32 && !pair_after(kth_bits, kth_position, limit_bits, limit_position) {
                unsafe {
                    bound_bits.store(0, kth_bits);
                    bound_position.store(0, kth_position);
                }
            }
        }
        unsafe { device::sync_threads() }; // the new bound is visible to the next tile
    }

    if warp == 0 {
        let out_start = device::block_idx_x() as u64 * params.k as u64;
        for q in 0..Q {
            let rank = q * 32 + lane;
            if rank < params.k as usize {
                let out = out_start + rank as u64;
                let position = best.positions[q];
                // Padding: the block saw fewer than k inputs inside the bound.
                let (key, index) = if position == u32::MAX {
                    (K::default(), NO_INDEX)
                } else {
                    (unsafe { params.original_keys.read(position as u64) }, position as u64)
                };
                unsafe {
                    params.keys_out.write(out, key);
                    params.indices_out.write(out, index);
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

#[cfg(test)]
mod tests {
    extern crate std;
    use std::vec::Vec;

    use super::*;
    use crate::device::emulator::{LaunchConfig, launch};

    /// Runs one pass over `keys` (with `indices`, `NO_INDEX` for padding) on one block.
    fn one_pass(keys: &[u32], indices: &[u64], k: u32) -> Vec<u64> {
        let mut keys_out = std::vec![0u32; k as usize];
        let mut indices_out = std::vec![0u64; k as usize];
        let original: Vec<u32> = (0..4096).collect();
        let params = TopKParams {
            keys_in: GlobalPtr::from_address(keys.as_ptr() as u64),
            indices_in: GlobalPtr::from_address(indices.as_ptr() as u64),
            original_keys: GlobalPtr::from_address(original.as_ptr() as u64),
            keys_out: GlobalPtr::from_address(keys_out.as_mut_ptr() as u64),
            indices_out: GlobalPtr::from_address(indices_out.as_mut_ptr() as u64),
            len: keys.len() as u64,
            tiles: 1,
            tile_stride: 1,
            prune_key: GlobalPtr::null(),
            prune_index: GlobalPtr::null(),
            k,
            order: Order::Smallest.to_raw(),
        };
        let config = LaunchConfig {
            grid: (1, 1),
            block_threads: TOPK_THREADS,
            shared_bytes: TopKLayout::<u32>::new(2).bytes,
        };
        launch(&config, &|| unsafe { reduce::<u32, 2>(params) }).unwrap();
        indices_out
    }

    #[test]
    fn padding_inputs_never_win() {
        let keys: Vec<u32> = (0..66).map(|i| if i < 34 { i * 10 } else { 0 }).collect();
        let indices: Vec<u64> = (0..66).map(|i| if i < 34 { i as u64 * 10 } else { NO_INDEX }).collect();
        let got = one_pass(&keys, &indices, 33);
        assert_eq!(got, (0..33).map(|i| i * 10).collect::<Vec<u64>>());
    }

    #[test]
    fn all_real_inputs_in_any_order() {
        let keys: Vec<u32> = (0..66).map(|i| i * 10).collect();
        let indices: Vec<u64> = (0..66).map(|i| i as u64 * 10).collect();
        assert_eq!(one_pass(&keys, &indices, 33), (0..33).map(|i| i * 10).collect::<Vec<u64>>());
        let keys: Vec<u32> = (0..66).map(|i| 1000 - i * 10).collect();
        let indices: Vec<u64> = (0..66).map(|i| i as u64).collect();
        assert_eq!(one_pass(&keys, &indices, 33), (33..66).rev().collect::<Vec<u64>>());
    }
}
