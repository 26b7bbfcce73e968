//! Device-wide merge of sorted runs (merge path), for sorting more keys than one block
//! holds: the block bitonic sort makes runs of 2048, and each launch of `merge_runs_<key>`
//! merges neighbouring runs pairwise, doubling the run length.
//!
//! Each block writes [`MERGE_TILE`] consecutive outputs of one pair of runs `(A, B)`
//! (Odeh, Green, Mwassi, Shmueli & Birk, "Merge Path", 2012; the tiling of ModernGPU and
//! CUB): two threads find by binary search in global memory where the tile's first and
//! last outputs cross the merge path, the block stages the tile's keys of A and B in shared
//! memory (coalesced reads), each thread finds its [`MERGE_ITEMS`] outputs' start by a
//! search in shared memory and merges them there, and the block writes the tile in order
//! (coalesced writes). Before, each thread searched global memory for its own start and
//! wrote its 8 outputs 32 bytes apart from its neighbours': a merge pass of 2^24 f32 keys
//! moved its 134 MB at about 0.85 TB/s on an H200 (run 255). Ties take `A` first, so the
//! merge is stable: with stable runs, the whole sort is stable.

use crate::device::{self, SharedLayout, SharedRegion};
use crate::key::{Key, OrderedBits};
use crate::params::{GlobalPtr, Order};

/// Threads per block.
pub const MERGE_THREADS: u32 = 256;
/// Outputs each thread writes.
pub const MERGE_ITEMS: u64 = 8;
/// Outputs each block writes: run lengths are multiples of half of it, so that a tile never
/// straddles two pairs of runs.
pub const MERGE_TILE: u64 = MERGE_THREADS as u64 * MERGE_ITEMS;

/// The shared memory of `merge_runs_<key>`: the tile's input keys (A's, then B's), its
/// output keys, the output's places among the inputs (for the indices), and the tile's two
/// splits.
#[derive(Clone, Copy, Debug)]
pub struct MergeLayout<K> {
    inputs: SharedRegion<K>,
    outputs: SharedRegion<K>,
    sources: SharedRegion<u32>,
    splits: SharedRegion<u64>,
    /// Bytes to ask for at launch.
    pub bytes: usize,
}

impl<K> MergeLayout<K> {
    /// The layout (the same for every launch of a key type).
    pub const fn new() -> Self {
        let tile = MERGE_TILE as usize;
        let (layout, inputs) = SharedLayout::new().push::<K>(tile);
        let (layout, outputs) = layout.push::<K>(tile);
        let (layout, sources) = layout.push::<u32>(tile);
        let (layout, splits) = layout.push::<u64>(2);
        Self { inputs, outputs, sources, splits, bytes: layout.bytes() }
    }
}

impl<K> Default for MergeLayout<K> {
    fn default() -> Self {
        Self::new()
    }
}

/// Parameters of `merge_runs_<key>`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct MergeParams<K> {
    /// `len` keys in sorted runs of `run_len` (the last run may be shorter).
    pub keys_in: GlobalPtr<K>,
    /// The index carried with each key.
    pub indices_in: GlobalPtr<u64>,
    /// The merged keys: sorted runs of `2·run_len`.
    pub keys_out: GlobalPtr<K>,
    /// Their indices; null: keys only (`indices_in` is not read).
    pub indices_out: GlobalPtr<u64>,
    /// Number of keys.
    pub len: u64,
    /// Length of the input runs.
    pub run_len: u64,
    /// [`Order::to_raw`]: the order the runs are sorted in.
    pub order: u32,
    /// Keeps the struct free of implicit padding (set to 0).
    pub reserved: u32,
}

/// Blocks a launch needs for `len` keys: one per [`MERGE_TILE`] outputs.
pub const fn merge_blocks_for(len: u64) -> u64 {
    len.div_ceil(MERGE_TILE)
}

/// The `merge_runs_<key>` kernel body.
///
/// # Safety
/// [`merge_blocks_for`]`(len)` blocks of [`MERGE_THREADS`] threads in a 1-D grid, with
/// [`MergeLayout::bytes`] of shared memory; inputs sorted in runs of `run_len` in `order`,
/// `run_len` a multiple of `MERGE_TILE / 2` or at least `len`; outputs of `len` that do not
/// overlap the inputs.
pub unsafe fn merge_runs<K: Key>(params: MergeParams<K>) {
    let tile_start = device::block_idx_x() as u64 * MERGE_TILE;
    if tile_start >= params.len {
        return;
    }
    let largest = Order::from_raw(params.order) == Order::Largest;
    let load = |at: u64| unsafe { params.keys_in.read(at) };
    // Rank bits: ascending in the merge's order.
    let rank = |key: K| {
        let ordered = key.to_ordered();
        if largest { ordered.complement() } else { ordered }
    };
    let pair_len = 2 * params.run_len;
    let a_start = tile_start / pair_len * pair_len;
    let a_len = params.run_len.min(params.len - a_start);
    let b_start = a_start + a_len;
    let b_len = params.run_len.min(params.len - b_start);
    let tile_len = MERGE_TILE.min(b_start + b_len - tile_start);
    let layout = MergeLayout::<K>::new();
    let (inputs, outputs, sources, splits) =
        unsafe { (layout.inputs.bind(), layout.outputs.bind(), layout.sources.bind(), layout.splits.bind()) };
    let thread = device::thread_idx_x() as u64;
    let threads = device::block_dim_x() as u64;

    // 1. Where the tile's first and last outputs cross the pair's merge path: the outputs
    //    before diagonal `d` take `split(d)` keys of A, the smallest i with A[i] after
    //    B[d - 1 - i] (A wins ties).
    let first_diagonal = tile_start - a_start;
    if thread < 2 {
        let diagonal = first_diagonal + thread * tile_len;
        let (mut low, mut high) = (diagonal.saturating_sub(b_len), diagonal.min(a_len));
        while low < high {
            let middle = (low + high) / 2;
            if rank(load(a_start + middle)) <= rank(load(b_start + diagonal - 1 - middle)) {
                low = middle + 1;
            } else {
                high = middle;
            }
        }
        unsafe { splits.store(thread as usize, low) };
    }
    unsafe { device::sync_threads() };
    let (a_begin, a_end) = unsafe { (splits.load(0), splits.load(1)) };
    let b_begin = first_diagonal - a_begin;
    // The tile's keys: `tile_a` of A from `a_begin`, then the rest of B from `b_begin`.
    let tile_a = a_end - a_begin;
    let tile_b = tile_len - tile_a;

    // 2. Stage them, in order (coalesced).
    let mut j = thread;
    while j < tile_len {
        let key = if j < tile_a { load(a_start + a_begin + j) } else { load(b_start + b_begin + j - tile_a) };
        unsafe { inputs.store(j as usize, key) };
        j += threads;
    }
    unsafe { device::sync_threads() };

    // 3. This thread's outputs: its start on the tile's merge path by a search in shared
    //    memory, then a sequential merge; each output's place among the inputs kept for
    //    its index.
    let a_key = |i: u64| unsafe { inputs.load(i as usize) };
    let b_key = |i: u64| unsafe { inputs.load((tile_a + i) as usize) };
    let first = thread * MERGE_ITEMS;
    if first < tile_len {
        let (mut low, mut high) = (first.saturating_sub(tile_b), first.min(tile_a));
        while low < high {
            let middle = (low + high) / 2;
            if rank(a_key(middle)) <= rank(b_key(first - 1 - middle)) {
                low = middle + 1;
            } else {
                high = middle;
            }
        }
        let (mut a, mut b) = (low, first - low);
        for out in first..(first + MERGE_ITEMS).min(tile_len) {
            let take_a = b >= tile_b || (a < tile_a && rank(a_key(a)) <= rank(b_key(b)));
            let source = if take_a {
                a += 1;
                a - 1
            } else {
                b += 1;
                tile_a + b - 1
            };
            unsafe {
                outputs.store(out as usize, inputs.load(source as usize));
                sources.store(out as usize, source as u32);
            }
        }
    }
    unsafe { device::sync_threads() };

    // 4. The tile written in order (coalesced), each key's index read from its place.
    let mut j = thread;
    while j < tile_len {
        unsafe {
            params.keys_out.write(tile_start + j, outputs.load(j as usize));
            if !params.indices_out.is_null() {
                let source = sources.load(j as usize) as u64;
                let from = if source < tile_a {
                    a_start + a_begin + source
                } else {
                    b_start + b_begin + source - tile_a
                };
                params.indices_out.write(tile_start + j, params.indices_in.read(from));
            }
        }
        j += threads;
    }
}
