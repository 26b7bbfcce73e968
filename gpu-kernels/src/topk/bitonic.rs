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
//! The bound need not be the sample's `k`-th best: a better one (the host takes a rank of
//! the sample near where the data's `k`-th best should fall, with a margin) prunes more, and
//! whether at least `k` inputs lay inside it shows in the chain's result: its `k`-th index is
//! padding exactly when fewer did. The host then runs the chain again with the sample's
//! `k`-th best, which is always safe; every block of that second chain first reads the first
//! chain's `k`-th index (`skip_unless_padding`) and leaves at once when it is real, so the
//! second chain costs a few empty launches and no round trip to the host.
//!
//! **k from 257 to 1024** (`k' = 512, 1024`): runs that long do not fit a warp's registers,
//! so the block keeps its best `k'` in shared memory. A tile with an input inside the bound
//! is sorted whole (the block sort's network, [`sort_slots`]); its first `k'` fold into the
//! block's best (`best[i] ← min(best[i], tile[k'−1−i])`, which is bitonic) and a bitonic
//! merge in shared memory rebuilds them ([`reduce_in_shared`]).
//!
//! **Compaction.** A pruned pass leaves most blocks with fewer than `k` results, so the
//! `b·k` slots of its output would be mostly padding, which the next pass would read and
//! sort. Instead each block appends only its real results (`out_count`) and the next pass
//! reads only as many inputs as were appended (`in_count`): at 2^28 keys and k = 1024 the
//! second pass reads a few thousand candidates instead of 540 672.
//!
//! Positions are 32-bit: the kernel takes inputs of fewer than 2^32 elements.

use crate::block::bitonic_sort::{BlockSortLayout, shared_stage, sort_slots};
use crate::device::{self, SharedLayout, SharedRegion, SharedSlice};
use crate::key::{Key, OrderedBits};
use crate::params::{GlobalPtr, Order};
use crate::thread::pair_after;
use crate::topk::fusion::{Fusion, TRANSFORM_AFFINE, TRANSFORM_MAGNITUDE, sorted_bits};
use crate::warp::bitonic::{WarpPairs, fold_sorted_runs, reduce_runs, sort_runs};

/// Threads per block.
pub const TOPK_THREADS: u32 = 256;
/// Inputs one block reduces per step: 8 per thread.
pub const TOPK_TILE: u64 = 2048;
/// Pairs each thread holds.
const PAIRS_PER_THREAD: usize = 8;
/// Inputs one warp loads from a tile: 8 registers of 32 consecutive inputs, one after
/// another. A tile's 8 warp pieces lie one after another (this many inputs apart) in every
/// pass but a sample's first ([`TopKParams::warp_stride`]).
pub const WARP_INPUTS: u64 = 256;
/// Warps per block.
const WARPS: usize = (TOPK_THREADS / 32) as usize;
/// The largest `k` of the register path (`32·Q` with `Q = 8`); larger `k` keep the block's
/// best in shared memory ([`reduce_in_shared`]).
pub const MAX_REGISTER_K: u32 = 256;
/// The largest `k` the kernel takes (`32·Q` with `Q = 32`).
pub const MAX_BITONIC_K: u32 = 1024;
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
    /// Tile `t` starts at input `first_input + t·tile_stride·2048`: stride 1 for all the
    /// data, more for a sample.
    pub tile_stride: u64,
    /// See `tile_stride`: 0 for all the data; a sample starts half a piece step in (see
    /// `warp_stride`), so that neither end of the data (where sorted inputs keep their
    /// extremes) is in it.
    pub first_input: u64,
    /// Inputs from one warp's piece of a tile to the next (a tile has 8 of [`WARP_INPUTS`]):
    /// `WARP_INPUTS` for contiguous tiles; about `256·tile_stride` for a sample, whose tiles
    /// then spread their pieces evenly over the data. Sampling pieces rather than whole tiles
    /// keeps equal keys' bound tight: the bound's position is then near the data's start
    /// (with whole tiles it was in the first sample tile, 64 tiles in at 2^28, and the filter
    /// let 131 072 equal keys through at k = 1024, ncu run 71).
    pub warp_stride: u64,
    /// The key of the pruning bound (the `k`-th best of a sample), or null for none.
    pub prune_key: GlobalPtr<K>,
    /// The index of the pruning bound (read when `prune_key` is not null).
    pub prune_index: GlobalPtr<u64>,
    /// When not null: the `k`-th index of an earlier chain's result; the block leaves at
    /// once unless it is [`NO_INDEX`] (that chain's bound let fewer than `k` through).
    pub skip_unless_padding: GlobalPtr<u64>,
    /// When not null: how many of the `len` inputs are real (the previous pass's
    /// `out_count`); the pass reads only those.
    pub in_count: GlobalPtr<u64>,
    /// When not null: blocks append their real results (not padding) one after another
    /// from element 0 on, in no particular order, and add their number here (zero before
    /// the pass); when null, block `b` writes its `k` results, padding included, at `b·k`.
    pub out_count: GlobalPtr<u64>,
    /// The filter (applied where a pass reads the data: `indices_in` null) and the
    /// transform (applied to every key it ranks).
    pub fusion: Fusion,
    /// How many to keep, 1 to `32·Q`.
    pub k: u32,
    /// [`Order::to_raw`].
    pub order: u32,
}

/// The shared memory of the kernel: the runs (one of `k' = 32·Q` pairs per warp in the
/// register path, the block's best `k'` in the shared path), the warps' votes (two sets,
/// alternating by tile), the block's pruning bound, and the tile sort's slots (shared path
/// only).
#[derive(Clone, Copy, Debug)]
pub struct TopKLayout<B> {
    /// Encoded keys of the runs.
    pub bits: SharedRegion<B>,
    /// Their positions.
    pub positions: SharedRegion<u32>,
    /// Whether each warp has an input inside the bound, for even and odd tiles.
    pub votes: SharedRegion<u32>,
    /// The bound's encoded key.
    pub bound_bits: SharedRegion<B>,
    /// The bound's position.
    pub bound_position: SharedRegion<u32>,
    /// The slots of the tile sort (empty in the register path).
    pub sort: BlockSortLayout<B>,
    /// Bytes to ask for at launch.
    pub bytes: usize,
}

impl<B> TopKLayout<B> {
    /// The layout for runs of `32·q` pairs.
    pub const fn new(q: usize) -> Self {
        let in_shared = 32 * q > MAX_REGISTER_K as usize;
        let run_slots = if in_shared { 32 * q } else { WARPS * 32 * q };
        let (layout, bits) = SharedLayout::new().push::<B>(run_slots);
        let (layout, positions) = layout.push::<u32>(run_slots);
        let (layout, votes) = layout.push::<u32>(2 * WARPS);
        let (layout, bound_bits) = layout.push::<B>(1);
        let (layout, bound_position) = layout.push::<u32>(1);
        // Segments of one key need no shared slots: the register path gets an empty region.
        let sorted_len = if in_shared { TOPK_TILE as u32 } else { 1 };
        let (layout, sort) = BlockSortLayout::after(layout, sorted_len);
        Self { bits, positions, votes, bound_bits, bound_position, sort, bytes: layout.bytes() }
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

impl<K: Key> RawTile<K> {
    fn empty() -> Self {
        Self { keys: [K::default(); PAIRS_PER_THREAD], indices: [NO_INDEX; PAIRS_PER_THREAD] }
    }
}

/// The pass's parameters with `len` and `tiles` cut to the inputs the previous pass (or
/// [`filter_inside`]) appended, when it counted them; cut to none when it appended more
/// than `len`, the room it had.
///
/// # Safety
/// `in_count`, when not null, is a live counter.
#[inline(always)]
unsafe fn counted_inputs<K>(mut params: TopKParams<K>) -> TopKParams<K> {
    if !params.in_count.is_null() {
        // More appended than there was room for: some inputs were lost, so the pass reads
        // nothing and the chain's result is padding, which sends the host's safe chain on.
        let appended = unsafe { params.in_count.read(0) };
        params.len = if appended > params.len { 0 } else { appended };
        params.tiles = params.len.div_ceil(TOPK_TILE);
    }
    params
}

/// Handles an intermediate pass (one that appends, `out_count`) whose counted inputs fit
/// one tile and its own output (`grid.x · k`, which is what the next pass may read): one
/// block would reduce them and the chain's last pass would sort them again, so instead
/// block 0 appends them unchanged and every block leaves (only the last pass, which does
/// not append, must sort). Returns whether the pass was such a one. On most inputs the
/// filter chain's later passes are: the tight bound lets a few thousand inputs through,
/// and after one pass a tile or less is left, which every later pass would sort again
/// (about 24 µs a tile for k above 256 on an H100, run 56).
///
/// # Safety
/// As [`counted_inputs`], whose result `params` is.
#[inline(always)]
unsafe fn passed_through<K: Key>(params: &TopKParams<K>) -> bool {
    let room = params.k as u64 * device::grid_dim_x() as u64;
    if params.in_count.is_null() || params.out_count.is_null() || params.len > room.min(TOPK_TILE) {
        return false;
    }
    let skipped =
        !params.skip_unless_padding.is_null() && unsafe { params.skip_unless_padding.read(0) } != NO_INDEX;
    if device::block_idx_x() == 0 && !skipped {
        let mut i = device::thread_idx_x() as u64;
        while i < params.len {
            unsafe {
                let index = if params.indices_in.is_null() { i } else { params.indices_in.read(i) };
                params.keys_out.write(i, params.keys_in.read(i));
                params.indices_out.write(i, index);
            }
            i += TOPK_THREADS as u64;
        }
        if device::thread_idx_x() == 0 {
            unsafe { device::global_atomic_add_u64(params.out_count.as_ptr(), params.len) };
        }
    }
    true
}

/// The input that register `r` of this thread holds in the tile starting at `tile_start`:
/// the warp's piece starts `warp·warp_stride` in, and register `r` holds its inputs
/// `32·r + lane` (each register load is 32 consecutive keys per warp, at a constant offset
/// from the thread's first: a step per segment instead of per warp cost 17 % at 2^24,
/// k = 256 and 20 % on a pass over all the data, run 75).
#[inline(always)]
fn tile_input<K>(params: &TopKParams<K>, tile_start: u64, r: usize) -> u64 {
    tile_start + device::warp_id() as u64 * params.warp_stride + r as u64 * 32 + device::lane_id() as u64
}

/// Issues the loads of one tile (register `r`: [`tile_input`]). Addresses are clamped into
/// the input instead of branched around, so all loads issue back to back and nothing
/// waits for them until [`encode_tile`] runs, one tile later.
#[inline(always)]
unsafe fn fetch_tile<K: Key>(params: &TopKParams<K>, tile_start: u64) -> RawTile<K> {
    let last = params.len - 1;
    let mut raw = RawTile::empty();
    for r in 0..PAIRS_PER_THREAD {
        raw.keys[r] = unsafe { params.keys_in.read(tile_input(params, tile_start, r).min(last)) };
    }
    if params.indices_in.is_null() {
        for r in 0..PAIRS_PER_THREAD {
            raw.indices[r] = tile_input(params, tile_start, r);
        }
    } else {
        for r in 0..PAIRS_PER_THREAD {
            raw.indices[r] = unsafe { params.indices_in.read(tile_input(params, tile_start, r).min(last)) };
        }
    }
    raw
}

/// Encodes a fetched tile: ordered bits of the ranked key (complemented for "largest") and
/// positions; inputs past the end, padding from an earlier pass and data the filter turns
/// away become padding.
///
/// # Safety
/// A mask filter holds a byte for every input of the data.
#[inline(always)]
unsafe fn encode_tile<K: Key>(
    params: &TopKParams<K>,
    raw: &RawTile<K>,
    tile_start: u64,
    largest: bool,
) -> WarpPairs<K::Bits, PAIRS_PER_THREAD> {
    // Only the data is filtered: candidates of an earlier pass were admitted when read.
    let filtered = params.indices_in.is_null() && !params.fusion.admits_all();
    let mut pairs = WarpPairs::<K::Bits, PAIRS_PER_THREAD>::padding();
    for r in 0..PAIRS_PER_THREAD {
        if tile_input(params, tile_start, r) < params.len
            && raw.indices[r] != NO_INDEX
            && (!filtered || unsafe { params.fusion.admits(raw.keys[r], raw.indices[r]) })
        {
            pairs.bits[r] = params.fusion.rank_bits(raw.keys[r], largest);
            pairs.positions[r] = raw.indices[r] as u32;
        }
    }
    pairs
}

/// The tile loop both paths share: sets the block's bound, then for each of the block's
/// tiles (grid-stride) loads it, turns the inputs beyond the bound into padding and, when
/// any input of the tile is left, hands the tile to `reduce_tile` together with the bound
/// it was pruned by. `reduce_tile` may tighten the bound (in shared memory); a barrier
/// follows it. Returns `false`, having done nothing, when `skip_unless_padding` says that
/// the block has nothing to do.
///
/// # Safety
/// *Block-wide*, as [`reduce`].
#[inline(always)]
unsafe fn scan_tiles<K: Key>(
    params: &TopKParams<K>,
    largest: bool,
    layout: &TopKLayout<K::Bits>,
    mut reduce_tile: impl FnMut(&mut WarpPairs<K::Bits, PAIRS_PER_THREAD>, K::Bits, u32),
) -> bool {
    // Every thread reads the flag itself, so all leave together without a barrier.
    if !params.skip_unless_padding.is_null() && unsafe { params.skip_unless_padding.read(0) } != NO_INDEX {
        return false;
    }
    let warp = device::warp_id() as usize;
    let lane = device::lane_id() as usize;
    let (votes, bound_bits, bound_position) =
        unsafe { (layout.votes.bind(), layout.bound_bits.bind(), layout.bound_position.bind()) };

    // The bound starts at the one the host passed (from the sample), or at "everything
    // passes", also when the sample's result there is padding (a filter admitted fewer).
    if device::thread_idx_x() == 0 {
        let (bits, position) = unsafe { params.fusion.bound(params.prune_key, params.prune_index, largest) };
        unsafe {
            bound_bits.store(0, bits);
            bound_position.store(0, position);
        }
    }
    unsafe { device::sync_threads() };

    let tile_start = |tile: u64| params.first_input + tile * params.tile_stride * TOPK_TILE;
    let mut tile = device::block_idx_x() as u64;
    let mut parity = 0;
    // Tile t + 1 is fetched before tile t is encoded and voted on, so its loads are in
    // flight while this tile is processed (most tiles need nothing but the vote).
    let mut next =
        if tile < params.tiles { unsafe { fetch_tile(params, tile_start(tile)) } } else { RawTile::empty() };
    while tile < params.tiles {
        let current = next;
        let current_start = tile_start(tile);
        tile += device::grid_dim_x() as u64;
        if tile < params.tiles {
            next = unsafe { fetch_tile(params, tile_start(tile)) };
        }
        let mut sorted = unsafe { encode_tile(params, &current, current_start, largest) };

        // Prune: inputs beyond the bound become padding; vote on whether any real input is
        // left (padding, position u32::MAX, is never inside: tiles of an earlier pass's
        // padding cost nothing).
        let (limit_bits, limit_position) = unsafe { (bound_bits.load(0), bound_position.load(0)) };
        let mut inside = false;
        for r in 0..PAIRS_PER_THREAD {
            if sorted.positions[r] == u32::MAX
                || pair_after(sorted.bits[r], sorted.positions[r], limit_bits, limit_position)
            {
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
        reduce_tile(&mut sorted, limit_bits, limit_position);
        unsafe { device::sync_threads() }; // a new bound is visible to the next tile
    }
    true
}

/// Where the block's results start in the output, for a block with `real` results that are
/// not padding: appended after the other blocks' (one atomic) when the pass counts its
/// outputs, at `block·k` otherwise. Called by one thread.
///
/// # Safety
/// `out_count`, when not null, is a live counter.
#[inline(always)]
unsafe fn output_start<K>(params: &TopKParams<K>, real: u32) -> u64 {
    if params.out_count.is_null() {
        device::block_idx_x() as u64 * params.k as u64
    } else {
        unsafe { device::global_atomic_add_u64(params.out_count.as_ptr(), real as u64) }
    }
}

/// Whether the result of this rank is written: all `k` without compaction (padding
/// included, which the next pass and the caller recognise), only the real ones with it.
#[inline(always)]
fn writes_rank<K>(params: &TopKParams<K>, rank: usize, real: u32) -> bool {
    rank < params.k as usize && (params.out_count.is_null() || rank < real as usize)
}

/// Writes a result at output element `out`: the key gathered from the original data at its
/// position (so NaN payloads and `-0.0` survive bit for bit), or padding: [`NO_INDEX`] and
/// the worst key that is not NaN (what a caller sees when a filter admitted fewer than `k`).
#[inline(always)]
unsafe fn write_result<K: Key>(params: &TopKParams<K>, out: u64, position: u32) {
    // Padding: the block saw fewer than k inputs inside the bound.
    let (key, index) = if position == u32::MAX {
        (if Order::from_raw(params.order) == Order::Largest { K::LOWEST } else { K::HIGHEST }, NO_INDEX)
    } else {
        (unsafe { params.original_keys.read(position as u64) }, position as u64)
    };
    unsafe {
        params.keys_out.write(out, key);
        params.indices_out.write(out, index);
    }
}

/// The `topk_bitonic_q<Q>_<key>` kernel body for `Q ≤ 8` (module docs): runs and the
/// block's best in registers. `Q` = [`registers_for_k`].
///
/// # Safety
/// [`TOPK_THREADS`] threads, [`TopKLayout::bytes`] of shared memory, `len < 2^32`,
/// `1 ≤ k ≤ 32·Q`, outputs of `grid.x · k`.
// Always inlined into its entry point: left to the inliner (with the unroll threshold of
// xtask/src/kernels.rs) the 64-bit Q8 body became a call taking its parameters through local memory.
#[inline(always)]
pub unsafe fn reduce<K: Key, const Q: usize>(params: TopKParams<K>) {
    let params = unsafe { counted_inputs(params) };
    if unsafe { passed_through(&params) } {
        return;
    }
    let largest = Order::from_raw(params.order) == Order::Largest;
    let warp = device::warp_id() as usize;
    let lane = device::lane_id() as usize;
    let layout = TopKLayout::<K::Bits>::new(Q);
    let (shared_bits, shared_positions) = unsafe { (layout.bits.bind(), layout.positions.bind()) };
    let (bound_bits, bound_position) = unsafe { (layout.bound_bits.bind(), layout.bound_position.bind()) };
    let run = 32 * Q;
    let mut best = WarpPairs::<K::Bits, Q>::padding();

    let ran = unsafe {
        scan_tiles(&params, largest, &layout, |sorted, limit_bits, limit_position| {
            sort_runs(sorted, 0, run);
            let mut warp_best = reduce_runs::<K::Bits, PAIRS_PER_THREAD, Q>(sorted);

            // Fold the warps' runs in a tree: at distance d, warp w (a multiple of 2d) takes
            // warp w + d's run. Each level: write, barrier, read.
            let mut distance = 1;
            while distance < WARPS {
                device::sync_threads(); // the previous readers of the slots are done
                if warp.is_multiple_of(distance) {
                    for q in 0..Q {
                        let slot = warp * run + q * 32 + lane;
                        shared_bits.store(slot, warp_best.bits[q]);
                        shared_positions.store(slot, warp_best.positions[q]);
                    }
                }
                device::sync_threads();
                if warp.is_multiple_of(2 * distance) {
                    let mut other = WarpPairs::<K::Bits, Q>::padding();
                    for q in 0..Q {
                        let slot = (warp + distance) * run + q * 32 + lane;
                        other.bits[q] = shared_bits.load(slot);
                        other.positions[q] = shared_positions.load(slot);
                    }
                    fold_sorted_runs(&mut warp_best, &other);
                }
                distance *= 2;
            }
            if warp == 0 {
                fold_sorted_runs(&mut best, &warp_best);
                // The block's k-th best so far bounds the rest, once it beats the bound.
                let kth = params.k as usize - 1;
                let (mut kth_bits, mut kth_position) = (K::Bits::MAX, u32::MAX);
                for q in 0..Q {
                    if q == kth / 32 {
                        (kth_bits, kth_position) = (best.bits[q], best.positions[q]);
                    }
                }
                if lane == kth % 32 && !pair_after(kth_bits, kth_position, limit_bits, limit_position) {
                    bound_bits.store(0, kth_bits);
                    bound_position.store(0, kth_position);
                }
            }
        })
    };

    if ran && warp == 0 {
        // The real results come first (padding sorts last).
        let mut real = 0;
        for q in 0..Q {
            let is_real = q * 32 + lane < params.k as usize && best.positions[q] != u32::MAX;
            real += unsafe { device::ballot(device::FULL_WARP, is_real) }.count_ones();
        }
        let start = if lane == 0 { unsafe { output_start(&params, real) } } else { 0 };
        let start = unsafe { device::shfl_idx_u64(device::FULL_WARP, start, 0) };
        for q in 0..Q {
            let rank = q * 32 + lane;
            if writes_rank(&params, rank, real) {
                unsafe { write_result(&params, start + rank as u64, best.positions[q]) };
            }
        }
    }
}

/// The `topk_bitonic_q<Q>_<key>` kernel body for `Q = 16, 32` (`k` from 257 to 1024; module
/// docs): the block's best `k' = 32·Q` pairs in shared memory. Each tile with an input
/// inside the bound is sorted whole by the block sort's network; its first `k'` fold into
/// the best (element `i` against the tile's `k'−1−i`, keeping the smaller: a bitonic
/// sequence of the `k'` best of both), which a bitonic merge in shared memory sorts again.
///
/// # Safety
/// As [`reduce`].
#[inline(always)]
pub unsafe fn reduce_in_shared<K: Key, const Q: usize>(params: TopKParams<K>) {
    let params = unsafe { counted_inputs(params) };
    if unsafe { passed_through(&params) } {
        return;
    }
    let largest = Order::from_raw(params.order) == Order::Largest;
    let thread = device::thread_idx_x() as usize;
    let tile_slot =
        |r: usize| device::warp_id() as usize * 32 * PAIRS_PER_THREAD + r * 32 + device::lane_id() as usize;
    let layout = TopKLayout::<K::Bits>::new(Q);
    let run = 32 * Q;
    let (best_bits, best_positions): (SharedSlice<K::Bits>, SharedSlice<u32>) =
        unsafe { (layout.bits.bind(), layout.positions.bind()) };
    let (bound_bits, bound_position) = unsafe { (layout.bound_bits.bind(), layout.bound_position.bind()) };
    let mut slot = thread;
    while slot < run {
        unsafe {
            best_bits.store(slot, K::Bits::MAX);
            best_positions.store(slot, u32::MAX);
        }
        slot += TOPK_THREADS as usize;
    }
    // `scan_tiles` has a barrier before the first tile reads the best.

    let ran = unsafe {
        scan_tiles(&params, largest, &layout, |sorted, limit_bits, limit_position| {
            sort_slots::<K::Bits, PAIRS_PER_THREAD>(sorted, TOPK_TILE as usize, &layout.sort);
            // Fold: each of the tile's first k' slots meets its mirror in the best; every
            // best slot is written by the one thread that holds its mirror.
            for r in 0..PAIRS_PER_THREAD {
                let slot = tile_slot(r);
                if slot < run {
                    let mirror = run - 1 - slot;
                    let (bits, position) = (best_bits.load(mirror), best_positions.load(mirror));
                    if pair_after(bits, position, sorted.bits[r], sorted.positions[r]) {
                        best_bits.store(mirror, sorted.bits[r]);
                        best_positions.store(mirror, sorted.positions[r]);
                    }
                }
            }
            device::sync_threads();
            // Rebuild: the bitonic best sorts with one merge (each stage ends in a barrier).
            let mut stride = run / 2;
            while stride >= 1 {
                shared_stage(best_bits, best_positions, run, stride, run);
                stride /= 2;
            }
            // The block's k-th best so far bounds the rest, once it beats the bound.
            if thread == 0 {
                let kth = params.k as usize - 1;
                let (kth_bits, kth_position) = (best_bits.load(kth), best_positions.load(kth));
                if !pair_after(kth_bits, kth_position, limit_bits, limit_position) {
                    bound_bits.store(0, kth_bits);
                    bound_position.store(0, kth_position);
                }
            }
        })
    };

    if ran {
        // The real results come first (padding sorts last): thread 0 finds where they end
        // and reserves their room, and passes the start on through the votes' words (the
        // barrier first: other threads may still read the last tile's votes).
        let votes = unsafe { layout.votes.bind() };
        unsafe { device::sync_threads() };
        if thread == 0 {
            let (mut real, mut end) = (0u32, params.k);
            while real < end {
                let middle = (real + end) / 2;
                if unsafe { best_positions.load(middle as usize) } == u32::MAX {
                    end = middle;
                } else {
                    real = middle + 1;
                }
            }
            let start = unsafe { output_start(&params, real) };
            unsafe {
                votes.store(0, real);
                votes.store(1, start as u32);
                votes.store(2, (start >> 32) as u32);
            }
        }
        unsafe { device::sync_threads() };
        let (real, start) = unsafe { (votes.load(0), votes.load(1) as u64 | (votes.load(2) as u64) << 32) };
        let mut rank = thread;
        while writes_rank(&params, rank, real) {
            unsafe { write_result(&params, start + rank as u64, best_positions.load(rank)) };
            rank += TOPK_THREADS as usize;
        }
    }
}

/// Parameters of `topk_bitonic_filter_<key>`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct FilterParams<K> {
    /// The data.
    pub keys: GlobalPtr<K>,
    /// Number of keys (below 2^32).
    pub len: u64,
    /// The bound's key (a sample's best of some rank).
    pub bound_key: GlobalPtr<K>,
    /// The bound's index.
    pub bound_index: GlobalPtr<u64>,
    /// Where the inputs inside the bound go, appended in no particular order.
    pub keys_out: GlobalPtr<K>,
    /// Their indices in the data.
    pub indices_out: GlobalPtr<u64>,
    /// Adds the number of inputs inside the bound, all of them even past `capacity` (zero
    /// before the kernel): a count above `capacity` tells the next pass that some were lost.
    pub count: GlobalPtr<u64>,
    /// Room in `keys_out` and `indices_out`.
    pub capacity: u64,
    /// The filter and the transform ([`TopKParams::fusion`]).
    pub fusion: Fusion,
    /// [`Order::to_raw`].
    pub order: u32,
}

/// Threads per block of the filter.
pub const FILTER_THREADS: u32 = 256;

/// The `topk_bitonic_filter_<key>` kernel body: copies every input inside the bound (no
/// worse than it in the order of pairs, key then index) to `keys_out` / `indices_out`, one
/// atomic per warp and tile that has any. With a tight bound a few thousand inputs of 2^28
/// get through, so the kernel runs at the speed of a read, with no barrier and no sorting;
/// a reduction chain over what it appended ([`TopKParams::in_count`]) then finds the `k`
/// best. Fewer than `k` inside (a sample unlike the data), or more than `capacity`, shows in
/// that chain's result as padding, and the host's safe chain runs.
///
/// # Safety
/// [`FILTER_THREADS`] threads, `len < 2^32`, outputs of `capacity` elements.
#[inline(always)]
pub unsafe fn filter_inside<K: Key>(params: FilterParams<K>) {
    // One loop per transform and filter, chosen once: the per-key dispatch cost the loop a
    // third more instructions (and branches between the loads and their uses).
    let fusion = params.fusion;
    let admit_all = |_: K, _: u64| true;
    let admit = |key: K, position: u64| unsafe { fusion.admits(key, position) };
    let (scale, offset) = fusion.affine_terms::<K>();
    unsafe {
        match (fusion.transform, fusion.admits_all()) {
            (TRANSFORM_MAGNITUDE, true) => filter_tiles(&params, K::magnitude, admit_all),
            (TRANSFORM_MAGNITUDE, false) => filter_tiles(&params, K::magnitude, admit),
            (TRANSFORM_AFFINE, true) => filter_tiles(&params, |key: K| key.affine(scale, offset), admit_all),
            (TRANSFORM_AFFINE, false) => filter_tiles(&params, |key: K| key.affine(scale, offset), admit),
            (_, true) => filter_tiles(&params, |key| key, admit_all),
            (_, false) => filter_tiles(&params, |key| key, admit),
        }
    }
}

/// [`filter_inside`]'s loop, ranking by `ranked` and filtering by `admits`.
///
/// # Safety
/// As [`filter_inside`]; `admits` reads only what the fusion's filter may.
#[inline(always)]
unsafe fn filter_tiles<K: Key>(
    params: &FilterParams<K>,
    ranked: impl Fn(K) -> K,
    admits: impl Fn(K, u64) -> bool,
) {
    let largest = Order::from_raw(params.order) == Order::Largest;
    let rank_bits = |key: K| sorted_bits(ranked(key), largest);
    let (bound_bits, bound_position) =
        unsafe { params.fusion.bound(params.bound_key, params.bound_index, largest) };
    let tiles = params.len.div_ceil(TOPK_TILE);
    let last = params.len - 1;
    let lane = device::lane_id();
    let mut tile = device::block_idx_x() as u64;
    while tile < tiles {
        // Register r of lane l of warp w holds input `tile·2048 + 256·w + 32·r + l`.
        let first = tile * TOPK_TILE + device::warp_id() as u64 * 256 + lane as u64;
        let mut keys = [K::default(); PAIRS_PER_THREAD];
        for (r, key) in keys.iter_mut().enumerate() {
            *key = unsafe { params.keys.read((first + r as u64 * 32).min(last)) };
        }
        // All 8 loads issue before any key is looked at: without the fence LLVM sank loads
        // 1 to 7 below the first key's branches (those of the fusion), a second memory
        // round trip per tile (the filter went from 0.40 to 0.48 ms at 2^28, run 59).
        device::compiler_barrier();
        let mut inside = 0u32;
        for (r, &key) in keys.iter().enumerate() {
            let position = first + r as u64 * 32;
            if position < params.len
                && !pair_after(rank_bits(key), position as u32, bound_bits, bound_position)
                && admits(key, position)
            {
                inside |= 1 << r;
            }
        }
        tile += device::grid_dim_x() as u64;
        if unsafe { device::ballot(device::FULL_WARP, inside != 0) } == 0 {
            continue;
        }
        // The warp's inputs inside go one after another: lane l's after those of lanes < l.
        let mine = inside.count_ones();
        let through_mine = unsafe { crate::warp::inclusive_scan_add_u32(mine) };
        let mut start = 0;
        if lane == 31 {
            start = unsafe { device::global_atomic_add_u64(params.count.as_ptr(), through_mine as u64) };
        }
        let mut slot =
            unsafe { device::shfl_idx_u64(device::FULL_WARP, start, 31) } + (through_mine - mine) as u64;
        for (r, &key) in keys.iter().enumerate() {
            if inside & (1 << r) != 0 {
                if slot < params.capacity {
                    unsafe {
                        params.keys_out.write(slot, key);
                        params.indices_out.write(slot, first + r as u64 * 32);
                    }
                }
                slot += 1;
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
/// `reduce_in_shared` with `Q = 16` (k ≤ 512).
///
/// # Safety
/// As [`reduce`].
pub unsafe fn reduce_q16<K: Key>(params: TopKParams<K>) {
    unsafe { reduce_in_shared::<K, 16>(params) }
}
/// `reduce_in_shared` with `Q = 32` (k ≤ 1024).
///
/// # Safety
/// As [`reduce`].
pub unsafe fn reduce_q32<K: Key>(params: TopKParams<K>) {
    unsafe { reduce_in_shared::<K, 32>(params) }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::vec::Vec;

    use super::*;
    use crate::device::emulator::{LaunchConfig, launch};

    /// Launches one pass on `grid` blocks with `Q` = `q` (2, or 32 for the shared path).
    fn launch_pass(params: TopKParams<u32>, q: usize, grid: u32) {
        let config = LaunchConfig {
            grid: (grid, 1),
            block_threads: TOPK_THREADS,
            shared_bytes: TopKLayout::<u32>::new(q).bytes,
        };
        match q {
            2 => launch(&config, &|| unsafe { reduce::<u32, 2>(params) }).unwrap(),
            32 => launch(&config, &|| unsafe { reduce_in_shared::<u32, 32>(params) }).unwrap(),
            _ => unreachable!("no test kernel for Q = {q}"),
        }
    }

    /// Runs one pass over `keys` (with `indices`, `NO_INDEX` for padding) on one block with
    /// `Q` = `q` (2, or 32 for the shared path); `skip` is the `skip_unless_padding` flag.
    fn pass_with(keys: &[u32], indices: &[u64], k: u32, q: usize, skip: Option<u64>) -> Vec<u64> {
        let mut keys_out = std::vec![0u32; k as usize];
        let mut indices_out = std::vec![7u64; k as usize];
        let original: Vec<u32> = (0..1 << 16).collect();
        let flag = skip.unwrap_or(0);
        let params = TopKParams {
            keys_in: GlobalPtr::from_address(keys.as_ptr() as u64),
            indices_in: GlobalPtr::from_address(indices.as_ptr() as u64),
            original_keys: GlobalPtr::from_address(original.as_ptr() as u64),
            keys_out: GlobalPtr::from_address(keys_out.as_mut_ptr() as u64),
            indices_out: GlobalPtr::from_address(indices_out.as_mut_ptr() as u64),
            len: keys.len() as u64,
            tiles: keys.len().div_ceil(TOPK_TILE as usize) as u64,
            tile_stride: 1,
            first_input: 0,
            warp_stride: WARP_INPUTS,
            prune_key: GlobalPtr::null(),
            prune_index: GlobalPtr::null(),
            skip_unless_padding: match skip {
                Some(_) => GlobalPtr::from_address(&flag as *const u64 as u64),
                None => GlobalPtr::null(),
            },
            in_count: GlobalPtr::null(),
            out_count: GlobalPtr::null(),
            fusion: Fusion::identity(),
            k,
            order: Order::Smallest.to_raw(),
        };
        launch_pass(params, q, 1);
        indices_out
    }

    /// Runs the filter over `keys` with the bound `(bound_key, bound_index)`, largest first,
    /// on 3 blocks, with room for `capacity`: the count and the appended (key, index) pairs
    /// in index order.
    fn filter(keys: &[u32], bound_key: u32, bound_index: u64, capacity: usize) -> (u64, Vec<(u32, u64)>) {
        let mut keys_out = std::vec![0u32; capacity];
        let mut indices_out = std::vec![NO_INDEX; capacity];
        let mut count = 0u64;
        let params = FilterParams {
            keys: GlobalPtr::from_address(keys.as_ptr() as u64),
            len: keys.len() as u64,
            bound_key: GlobalPtr::from_address(&bound_key as *const u32 as u64),
            bound_index: GlobalPtr::from_address(&bound_index as *const u64 as u64),
            keys_out: GlobalPtr::from_address(keys_out.as_mut_ptr() as u64),
            indices_out: GlobalPtr::from_address(indices_out.as_mut_ptr() as u64),
            count: GlobalPtr::from_address(&mut count as *mut u64 as u64),
            capacity: capacity as u64,
            fusion: Fusion::identity(),
            order: Order::Largest.to_raw(),
        };
        let config = LaunchConfig { grid: (3, 1), block_threads: FILTER_THREADS, shared_bytes: 0 };
        launch(&config, &|| unsafe { filter_inside::<u32>(params) }).unwrap();
        let mut appended: Vec<(u32, u64)> =
            keys_out.into_iter().zip(indices_out).filter(|&(_, index)| index != NO_INDEX).collect();
        appended.sort_unstable_by_key(|&(_, index)| index);
        (count, appended)
    }

    #[test]
    fn the_filter_appends_exactly_the_inputs_inside_the_bound() {
        // 5 tiles and a ragged end; keys repeat, so the bound's index decides ties: inputs
        // equal to the bound key count as inside up to the bound's own index.
        let keys: Vec<u32> =
            (0..5 * 2048 + 77u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 20) % 1000).collect();
        let (bound_key, bound_index) = (990, 6000);
        let inside: Vec<(u32, u64)> = keys
            .iter()
            .enumerate()
            .map(|(i, &key)| (key, i as u64))
            .filter(|&(key, i)| key > bound_key || (key == bound_key && i <= bound_index))
            .collect();
        assert!(inside.len() > 50, "the test needs inputs inside: {}", inside.len());
        let (count, appended) = filter(&keys, bound_key, bound_index, 4096);
        assert_eq!((count, &appended), (inside.len() as u64, &inside));
        // Too little room: the count still says how many were inside, and only real inputs
        // inside were written.
        let (count, appended) = filter(&keys, bound_key, bound_index, 20);
        assert_eq!((count, appended.len()), (inside.len() as u64, 20));
        assert!(appended.iter().all(|pair| inside.contains(pair)));
    }

    fn one_pass(keys: &[u32], indices: &[u64], k: u32) -> Vec<u64> {
        pass_with(keys, indices, k, 2, None)
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

    /// The shared path (k' = 1024) over three tiles of scrambled keys with ties and padding:
    /// the k best by (key, index), in order, then padding when fewer than k are real.
    #[test]
    fn shared_path_keeps_the_best_of_every_tile() {
        let n = 5000usize;
        let keys: Vec<u32> = (0..n as u32).map(|i| i.wrapping_mul(2_654_435_761) % 3000).collect();
        let indices: Vec<u64> =
            (0..n as u64).map(|i| if i % 7 == 3 { NO_INDEX } else { (i * 13) % (1 << 16) }).collect();
        let mut real: Vec<(u32, u64)> =
            keys.iter().zip(&indices).filter(|(_, i)| **i != NO_INDEX).map(|(k, i)| (*k, *i)).collect();
        real.sort_unstable();
        for k in [600u32, 1000, 1024] {
            let want: Vec<u64> = real[..k as usize].iter().map(|p| p.1).collect();
            assert_eq!(pass_with(&keys, &indices, k, 32, None), want, "k = {k}");
        }
        // Only 9 real inputs: the rest of the k results are padding.
        let few: Vec<u64> =
            (0..n as u64).map(|i| if i % 500 == 0 && i < 4500 { i } else { NO_INDEX }).collect();
        let got = pass_with(&keys, &few, 700, 32, None);
        let mut want: Vec<(u32, u64)> =
            few.iter().filter(|i| **i != NO_INDEX).map(|&i| (keys[i as usize], i)).collect();
        want.sort_unstable();
        assert_eq!(&got[..9], want.iter().map(|p| p.1).collect::<Vec<u64>>().as_slice());
        assert!(got[9..].iter().all(|&i| i == NO_INDEX));
    }

    /// A second chain's blocks leave without writing when the first chain's k-th result is
    /// real, and run when it is padding.
    #[test]
    fn skip_unless_padding_gates_the_block() {
        let keys: Vec<u32> = (0..100).rev().collect();
        let indices: Vec<u64> = (0..100).collect();
        assert_eq!(pass_with(&keys, &indices, 3, 2, Some(5)), [7, 7, 7]);
        assert_eq!(pass_with(&keys, &indices, 3, 2, Some(NO_INDEX)), [99, 98, 97]);
        assert_eq!(pass_with(&keys, &indices, 300, 32, Some(5)), [7; 300]);
        assert_eq!(pass_with(&keys, &indices, 3, 32, Some(NO_INDEX))[..3], [99, 98, 97]);
    }

    /// Two blocks append their real results (`out_count`), then one block reads just those
    /// (`in_count`): every real result arrives once, and the second pass finds the top k.
    #[test]
    fn compacted_passes_keep_every_real_result() {
        let n = 5000usize;
        let keys: Vec<u32> = (0..n as u32).map(|i| i.wrapping_mul(2_654_435_761) % 3000).collect();
        let indices: Vec<u64> = (0..n as u64).map(|i| if i % 7 == 3 { NO_INDEX } else { i }).collect();
        let original = keys.clone();
        let real_of = |tiles: &[usize]| -> Vec<(u32, u64)> {
            let mut real: Vec<(u32, u64)> = tiles
                .iter()
                .flat_map(|t| t * 2048..((t + 1) * 2048).min(n))
                .filter(|&i| indices[i] != NO_INDEX)
                .map(|i| (keys[i], indices[i]))
                .collect();
            real.sort_unstable();
            real
        };
        for (k, q) in [(50u32, 2usize), (1000, 32)] {
            let mut keys_mid = std::vec![0u32; 2 * k as usize];
            let mut indices_mid = std::vec![0u64; 2 * k as usize];
            let mut count = 0u64;
            let first = TopKParams {
                keys_in: GlobalPtr::from_address(keys.as_ptr() as u64),
                indices_in: GlobalPtr::from_address(indices.as_ptr() as u64),
                original_keys: GlobalPtr::from_address(original.as_ptr() as u64),
                keys_out: GlobalPtr::from_address(keys_mid.as_mut_ptr() as u64),
                indices_out: GlobalPtr::from_address(indices_mid.as_mut_ptr() as u64),
                len: n as u64,
                tiles: 3,
                tile_stride: 1,
                first_input: 0,
                warp_stride: WARP_INPUTS,
                prune_key: GlobalPtr::null(),
                prune_index: GlobalPtr::null(),
                skip_unless_padding: GlobalPtr::null(),
                in_count: GlobalPtr::null(),
                out_count: GlobalPtr::from_address(&mut count as *mut u64 as u64),
                fusion: Fusion::identity(),
                k,
                order: Order::Smallest.to_raw(),
            };
            let run = |params: TopKParams<u32>, grid: u32| launch_pass(params, q, grid);
            run(first, 2);
            // Block 0 reduced tiles 0 and 2, block 1 tile 1.
            let mut want: Vec<(u32, u64)> = real_of(&[0, 2]).into_iter().take(k as usize).collect();
            want.extend(real_of(&[1]).into_iter().take(k as usize));
            want.sort_unstable();
            assert_eq!(count as usize, want.len(), "k = {k}");
            let mut got: Vec<(u32, u64)> =
                (0..count as usize).map(|i| (keys_mid[i], indices_mid[i])).collect();
            got.sort_unstable();
            assert_eq!(got, want, "k = {k}");

            let mut keys_out = std::vec![0u32; k as usize];
            let mut indices_out = std::vec![0u64; k as usize];
            let second = TopKParams {
                keys_in: GlobalPtr::from_address(keys_mid.as_ptr() as u64),
                indices_in: GlobalPtr::from_address(indices_mid.as_ptr() as u64),
                keys_out: GlobalPtr::from_address(keys_out.as_mut_ptr() as u64),
                indices_out: GlobalPtr::from_address(indices_out.as_mut_ptr() as u64),
                len: 2 * k as u64,
                tiles: (2 * k as u64).div_ceil(TOPK_TILE),
                in_count: GlobalPtr::from_address(&count as *const u64 as u64),
                out_count: GlobalPtr::null(),
                ..first
            };
            run(second, 1);
            let all = real_of(&[0, 1, 2]);
            assert_eq!(indices_out, all[..k as usize].iter().map(|p| p.1).collect::<Vec<u64>>(), "k = {k}");
        }
    }

    /// An intermediate pass whose counted inputs fit a tile and its output (`grid.x · k`)
    /// appends them unchanged (in both kernels, on two blocks), and leaves them alone when
    /// its gate says so; one over more than its output still reduces.
    #[test]
    fn an_intermediate_pass_over_one_tile_or_less_appends_it_unchanged() {
        let keys: Vec<u32> = (0..3000u32).map(|i| i.wrapping_mul(2_654_435_761) % 5000).collect();
        let indices: Vec<u64> = (0..3000u64).map(|i| i * 3 + 1).collect();
        let original: Vec<u32> = std::vec![0; 9001];
        for (k, q, count) in [(50u32, 2usize, 37u64), (50, 2, 100), (50, 2, 101), (1000, 32, 2000)] {
            for gate in [None, Some(5u64)] {
                let mut keys_out = std::vec![0u32; 2 * k as usize];
                let mut indices_out = std::vec![NO_INDEX; 2 * k as usize];
                let mut appended = 0u64;
                let flag = gate.unwrap_or(0);
                let params = TopKParams {
                    keys_in: GlobalPtr::from_address(keys.as_ptr() as u64),
                    indices_in: GlobalPtr::from_address(indices.as_ptr() as u64),
                    original_keys: GlobalPtr::from_address(original.as_ptr() as u64),
                    keys_out: GlobalPtr::from_address(keys_out.as_mut_ptr() as u64),
                    indices_out: GlobalPtr::from_address(indices_out.as_mut_ptr() as u64),
                    len: keys.len() as u64,
                    tiles: 2,
                    tile_stride: 1,
                    first_input: 0,
                    warp_stride: WARP_INPUTS,
                    prune_key: GlobalPtr::null(),
                    prune_index: GlobalPtr::null(),
                    skip_unless_padding: match gate {
                        Some(_) => GlobalPtr::from_address(&flag as *const u64 as u64),
                        None => GlobalPtr::null(),
                    },
                    in_count: GlobalPtr::from_address(&count as *const u64 as u64),
                    out_count: GlobalPtr::from_address(&mut appended as *mut u64 as u64),
                    fusion: Fusion::identity(),
                    k,
                    order: Order::Smallest.to_raw(),
                };
                launch_pass(params, q, 2);
                let context = std::format!("k = {k}, {count} inputs, gate {gate:?}");
                if gate.is_some() {
                    assert_eq!(appended, 0, "{context}");
                    assert!(indices_out.iter().all(|&i| i == NO_INDEX), "{context}");
                } else if count <= 2 * k as u64 {
                    assert_eq!(appended, count, "{context}");
                    assert_eq!(&keys_out[..count as usize], &keys[..count as usize], "{context}");
                    assert_eq!(&indices_out[..count as usize], &indices[..count as usize], "{context}");
                } else {
                    // Reduced: block 0's k best (its one tile holds them all).
                    assert_eq!(appended, k as u64, "{context}");
                    let mut best: Vec<(u32, u64)> =
                        (0..count as usize).map(|i| (keys[i], indices[i])).collect();
                    best.sort_unstable();
                    let got: Vec<u64> = indices_out[..k as usize].to_vec();
                    assert_eq!(
                        got,
                        best[..k as usize].iter().map(|p| p.1).collect::<Vec<u64>>(),
                        "{context}"
                    );
                }
            }
        }
    }
}
