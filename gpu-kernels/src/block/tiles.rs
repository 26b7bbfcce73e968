//! Tiled passes over candidates for the bucket-based selections (SampleSelect and
//! QuickSelect; radix select keeps its own copies, see `topk/radix.rs`): each block of [`TILE_THREADS`] threads walks a contiguous
//! range of tiles of [`TILE`] inputs, counts buckets in a shared histogram, and places the
//! inputs of one or two bucket classes in input order.
//!
//! Item `i` of a thread in the tile starting at `s` is input `s + 256·i + thread`, so each
//! warp-wide load is coalesced, and the tile's inputs in (item, warp, lane) order are in
//! input order: that is what makes the placement deterministic.

use crate::device::{self, SharedSlice};
pub use crate::key::key_in_vector;
use crate::params::GlobalPtr;
use crate::{block, warp};

/// Threads per block of every tiled pass.
pub const TILE_THREADS: u32 = 256;
/// Inputs per thread and tile.
pub const TILE_ITEMS: usize = 8;
/// Inputs a block handles per step.
pub const TILE: u64 = TILE_THREADS as u64 * TILE_ITEMS as u64;
/// Warps per block.
pub const TILE_WARPS: usize = (TILE_THREADS / 32) as usize;
/// Buckets of a histogram: one per thread, so publishing takes one block scan.
pub const HISTOGRAM_BUCKETS: usize = TILE_THREADS as usize;
/// Entries of one set of tile counts for [`place_in_order`]: one per (item, warp), plus
/// the total.
pub const TILE_COUNT_SET: usize = TILE_ITEMS * TILE_WARPS + 1;

/// Runs `$body` for `$i` = 0 to [`TILE_ITEMS`] − 1, unrolled in the source: as a loop, LLVM
/// may keep a tile's arrays in local memory.
macro_rules! unroll_items {
    ($i:ident => $body:block) => {
        $crate::block::tiles::unroll_items!(@each $i $body [0 1 2 3 4 5 6 7])
    };
    (@each $i:ident $body:block [$($n:literal)*]) => {{
        const _: () = assert!($crate::block::tiles::TILE_ITEMS == [$($n),*].len());
        $({
            let $i: usize = $n;
            $body
        })*
    }};
}
pub(crate) use unroll_items;

/// This block's share of `len` entries split over `blocks` blocks: a contiguous range of
/// whole tiles, so that blocks in order cover the entries in order.
#[inline(always)]
pub fn block_range(len: u64, blocks: u32) -> (u64, u64) {
    let tiles = len.div_ceil(TILE);
    let per_block = tiles.div_ceil(blocks as u64);
    let block = device::block_idx_x() as u64;
    let start = (block * per_block * TILE).min(len);
    let end = ((block + 1) * per_block * TILE).min(len);
    (start, end)
}

/// The keys of the tile at `tile_start`: key `tile_start + 256·i + thread` in item `i`
/// (past `end`: the last key, to be ignored). Only a block's last tile checks bounds.
///
/// # Safety
/// `keys` holds at least `end` keys, and `tile_start < end`.
#[inline(always)]
pub unsafe fn load_keys<K: Copy + Default>(keys: GlobalPtr<K>, tile_start: u64, end: u64) -> [K; TILE_ITEMS] {
    let first = tile_start + device::thread_idx_x() as u64;
    let mut tile = [K::default(); TILE_ITEMS];
    if tile_start + TILE <= end {
        unroll_items!(i => { tile[i] = unsafe { keys.read(first + (i as u64) * TILE_THREADS as u64) }; });
    } else {
        unroll_items!(i => {
            let at = (first + (i as u64) * TILE_THREADS as u64).min(end - 1);
            tile[i] = unsafe { keys.read(at) };
        });
    }
    tile
}

/// Sixteen bytes of keys: what one vector load moves.
#[repr(C, align(16))]
#[derive(Clone, Copy)]
struct Vector16([u32; 4]);

/// The keys of the full tile at `tile_start` by 16-byte vector loads (a quarter of
/// [`load_keys`]'s load instructions for 4-byte keys): the thread's items are keys
/// `tile_start + 4·(thread + 256·j) …` for 4-byte keys, in vectors of 16 bytes (one vector
/// of eight for 2-byte keys, four of two each for 8-byte ones); for passes
/// that count or keep keys whatever their place.
///
/// Plain vector reads, which LLVM schedules with the rest of the kernel. Where a kernel
/// chooses between this and [`load_keys`] by a flag rather than by the tile's bounds, LLVM
/// may merge the two into scalar loads: [`load_tile_vectors_opaque`] is for those.
///
/// # Safety
/// The tile is full (`tile_start + TILE` keys at most `keys`' length), and key
/// `tile_start` is 16-byte aligned (device buffers are, and block ranges start on whole
/// tiles).
#[inline(always)]
pub unsafe fn load_tile_vectors<K: Copy + Default>(keys: GlobalPtr<K>, tile_start: u64) -> [K; TILE_ITEMS] {
    let base = unsafe { keys.as_ptr().add(tile_start as usize) } as *const Vector16;
    unsafe { unpack_tile(|j| base.add(device::thread_idx_x() as usize + j * TILE_THREADS as usize).read().0) }
}

/// [`load_tile_vectors`] by one [`device::load_global_v4`] per vector, which LLVM can neither
/// split nor merge with other loads. (SampleSelect's kernels keep the plain reads: this
/// measured 0.5–1 % slower on its median, H200 runs 187–188.)
///
/// # Safety
/// As [`load_tile_vectors`], and no thread writes the keys while the kernel runs.
#[inline(always)]
pub unsafe fn load_tile_vectors_opaque<K: Copy + Default>(
    keys: GlobalPtr<K>,
    tile_start: u64,
) -> [K; TILE_ITEMS] {
    unsafe { load_tile_vectors_by(keys, tile_start, |address| device::load_global_v4(address)) }
}

/// [`load_tile_vectors_opaque`] with the vectors loaded as streamed data
/// ([`device::load_global_v4_evict_first`]): for a pass that reads its data once and whose
/// scattered writes should keep their place in L2.
///
/// # Safety
/// As [`load_tile_vectors_opaque`].
#[inline(always)]
pub unsafe fn load_tile_vectors_evict_first<K: Copy + Default>(
    keys: GlobalPtr<K>,
    tile_start: u64,
) -> [K; TILE_ITEMS] {
    unsafe { load_tile_vectors_by(keys, tile_start, |address| device::load_global_v4_evict_first(address)) }
}

/// A full tile's items, each of the thread's 16-byte vectors read by `load`.
///
/// # Safety
/// As [`load_tile_vectors_opaque`]; `load` reads 16 bytes at a 16-byte aligned address.
#[inline(always)]
unsafe fn load_tile_vectors_by<K: Copy + Default>(
    keys: GlobalPtr<K>,
    tile_start: u64,
    load: impl Fn(*const u32) -> [u32; 4],
) -> [K; TILE_ITEMS] {
    let base = unsafe { keys.as_ptr().add(tile_start as usize) } as *const [u32; 4];
    unsafe {
        unpack_tile(|j| load(base.add(device::thread_idx_x() as usize + j * TILE_THREADS as usize).cast()))
    }
}

/// The items of a full tile from its thread's 16-byte vectors, `vector(j)` for `j` below
/// the vectors a thread's items fill.
#[inline(always)]
unsafe fn unpack_tile<K: Copy + Default>(vector: impl Fn(usize) -> [u32; 4]) -> [K; TILE_ITEMS] {
    const { assert!(size_of::<K>() == 2 || size_of::<K>() == 4 || size_of::<K>() == 8) };
    // Word by word into the items (a reinterpreted array of vectors gave a stack frame).
    let mut tile = [K::default(); TILE_ITEMS];
    let per_vector = 16 / size_of::<K>();
    if size_of::<K>() == 2 {
        // One vector of eight 16-bit keys: keys `tile_start + 8·thread …`.
        let words = vector(0);
        for (i, item) in tile.iter_mut().enumerate() {
            *item = unsafe { key_in_vector(&words, i) };
        }
    } else if size_of::<K>() == 4 {
        let words = [vector(0), vector(1)];
        for (i, item) in tile.iter_mut().enumerate() {
            *item = unsafe { key_in_vector(&words[i / per_vector], i % per_vector) };
        }
    } else {
        let words = [vector(0), vector(1), vector(2), vector(3)];
        for (i, item) in tile.iter_mut().enumerate() {
            *item = unsafe { key_in_vector(&words[i / per_vector], i % per_vector) };
        }
    }
    tile
}

/// Counts buckets into a block's histogram, one thread's items at a time: a run of equal
/// buckets is added with one atomic when the bucket changes (CUB's run-length trick).
/// Skewed buckets (the exponent byte of floats, sorted or all-equal inputs) would otherwise
/// serialise many atomics on one address; on spread buckets it costs one compare per item.
/// No warp collective: any thread may count any item.
pub struct BucketRuns {
    bucket: u32,
    count: u32,
}

impl BucketRuns {
    /// No run yet.
    #[inline(always)]
    pub fn new() -> Self {
        Self { bucket: 0, count: 0 }
    }

    /// Counts one input of `bucket`.
    ///
    /// # Safety
    /// `bucket < histogram.len()`.
    #[inline(always)]
    pub unsafe fn add(&mut self, histogram: &SharedSlice<u32>, bucket: u32) {
        if bucket != self.bucket {
            // One branch a change: before the first run this adds 0 to bucket 0, which
            // costs one atomic where a test of the count would cost a branch every change.
            // (A predicated `red.shared` in inline assembly came out of ptxas as the same
            // branch, plus a conversion to a shared address.)
            unsafe { histogram.atomic_add(self.bucket as usize, self.count) };
            self.bucket = bucket;
            self.count = 0;
        }
        self.count += 1;
    }

    /// Adds the current run.
    ///
    /// # Safety
    /// As [`BucketRuns::add`].
    #[inline(always)]
    pub unsafe fn flush(&mut self, histogram: &SharedSlice<u32>) {
        if self.count != 0 {
            unsafe { histogram.atomic_add(self.bucket as usize, self.count) };
            self.count = 0;
        }
    }
}

/// Counts a whole tile's buckets, `buckets[i]` for each item of the calling thread, into a
/// shared histogram: one atomic for the warp when all its items share a bucket (all-equal
/// or sorted input), one for the thread when its items do, else one an item.
///
/// On spread input no run of equal buckets forms, and [`BucketRuns`]' test a key (a branch
/// and its reconvergence, about 9 instructions) buys nothing; here a thread pays about one
/// comparison an item and a vote a tile. Ties between lanes of spread input still meet in
/// the atomics, as before.
///
/// # Safety
/// *Warp-wide* (every lane calls it together); every bucket below `histogram.len()`; the
/// counts fit `u32`.
#[inline(always)]
pub unsafe fn count_tile_buckets(histogram: &SharedSlice<u32>, buckets: &[u32; TILE_ITEMS]) {
    let first = buckets[0];
    let mut same = true;
    unroll_items!(i => { same &= buckets[i] == first; });
    let lane_0s = unsafe { device::shfl_idx_u32(u32::MAX, first, 0) };
    if unsafe { device::all(u32::MAX, same && first == lane_0s) } {
        if device::lane_id() == 0 {
            unsafe { histogram.atomic_add(first as usize, (TILE_ITEMS * 32) as u32) };
        }
    } else if same {
        unsafe { histogram.atomic_add(first as usize, TILE_ITEMS as u32) };
    } else {
        unroll_items!(i => { unsafe { histogram.atomic_add(buckets[i] as usize, 1) }; });
    }
}

impl Default for BucketRuns {
    fn default() -> Self {
        Self::new()
    }
}

/// Publishes the block's histogram: its cumulative form at `cumulative[block]` (a row of
/// [`HISTOGRAM_BUCKETS`]), its counts added to `totals` (one `u64` per bucket). Starts with a
/// barrier.
///
/// # Safety
/// *Block-wide*, [`TILE_THREADS`] threads; `warp_sums` holds [`TILE_WARPS`] values.
pub unsafe fn publish_histogram(
    histogram: &SharedSlice<u32>,
    warp_sums: &SharedSlice<u64>,
    cumulative: GlobalPtr<u32>,
    totals: *mut u64,
) {
    let bucket = device::thread_idx_x() as usize;
    unsafe { device::sync_threads() };
    let count = unsafe { histogram.load(bucket) };
    let before = unsafe { block::scan::exclusive_scan_add_u64(count as u64, warp_sums) };
    let block = device::block_idx_x() as u64;
    unsafe {
        cumulative.write(block * HISTOGRAM_BUCKETS as u64 + bucket as u64, (before + count as u64) as u32);
        if count != 0 {
            device::global_atomic_add_u64(totals.add(bucket), count as u64);
        }
    }
}

/// From the blocks' cumulative histograms (as [`publish_histogram`] wrote them), where each
/// block's inputs of a bucket below `target` ("better") and of `target` ("ties") start among
/// all blocks': exclusive scans over blocks, in block order, written to `better_offsets` and
/// `tie_offsets`.
///
/// # Safety
/// *Block-wide*, [`TILE_THREADS`] threads; `block_counts` holds `2 × max_blocks` values,
/// `blocks ≤ max_blocks`; `warp_sums` holds [`TILE_WARPS`] values.
pub unsafe fn scan_block_offsets(
    cumulative: GlobalPtr<u32>,
    blocks: usize,
    max_blocks: usize,
    target: usize,
    block_counts: &SharedSlice<u64>,
    warp_sums: &SharedSlice<u64>,
    (better_offsets, tie_offsets): (GlobalPtr<u64>, GlobalPtr<u64>),
) {
    let thread = device::thread_idx_x() as usize;
    let mut block = thread;
    while block < blocks {
        let row = (block * HISTOGRAM_BUCKETS) as u64;
        let through = unsafe { cumulative.read(row + target as u64) } as u64;
        let below = if target == 0 { 0 } else { unsafe { cumulative.read(row + target as u64 - 1) as u64 } };
        unsafe {
            block_counts.store(block, below);
            block_counts.store(max_blocks + block, through - below);
        }
        block += TILE_THREADS as usize;
    }
    unsafe { device::sync_threads() };

    // Each thread takes a run of consecutive blocks.
    let per_thread = blocks.div_ceil(TILE_THREADS as usize);
    let first = (thread * per_thread).min(blocks);
    let last = ((thread + 1) * per_thread).min(blocks);
    let scan_blocks = |counts_at: usize, offsets: GlobalPtr<u64>| {
        let mut run_sum = 0;
        for b in first..last {
            run_sum += unsafe { block_counts.load(counts_at + b) };
        }
        let mut offset = unsafe { block::scan::exclusive_scan_add_u64(run_sum, warp_sums) };
        for b in first..last {
            unsafe { offsets.write(b as u64, offset) };
            offset += unsafe { block_counts.load(counts_at + b) };
        }
    };
    scan_blocks(0, better_offsets);
    scan_blocks(max_blocks, tie_offsets);
}

/// Where a tile's inputs of two classes go, in input order: [`place_in_order`]'s result.
#[derive(Clone, Copy)]
pub struct TilePlaces {
    /// For each item in either class: how many inputs of its class come before it in the
    /// tile.
    pub rank: [u32; TILE_ITEMS],
    /// Inputs of the first class in the tile.
    pub first_total: u32,
    /// Inputs of the second class in the tile.
    pub second_total: u32,
}

/// Ranks a tile's inputs of two disjoint classes within their class, in input order: warp
/// ballots per item, then one warp scans the (item, warp) counts. `tile_counts` holds two
/// sets of [`TILE_COUNT_SET`]; successive calls alternate `parity` (0, 1), so one barrier
/// per call suffices.
///
/// # Safety
/// *Block-wide*, [`TILE_THREADS`] threads; no item in both classes.
#[inline(always)]
pub unsafe fn place_in_order(
    first: &[bool; TILE_ITEMS],
    second: &[bool; TILE_ITEMS],
    tile_counts: &SharedSlice<u32>,
    parity: usize,
) -> TilePlaces {
    let counts = parity * TILE_COUNT_SET;
    let warp = device::warp_id() as usize;
    let mut first_votes = [0u32; TILE_ITEMS];
    let mut second_votes = [0u32; TILE_ITEMS];
    unroll_items!(i => {
        first_votes[i] = unsafe { device::ballot(device::FULL_WARP, first[i]) };
        second_votes[i] = unsafe { device::ballot(device::FULL_WARP, second[i]) };
        if device::lane_id() == 0 {
            // Two 16-bit counts: a tile has 2048 inputs.
            let packed = first_votes[i].count_ones() | (second_votes[i].count_ones() << 16);
            unsafe { tile_counts.store(counts + i * TILE_WARPS + warp, packed) };
        }
    });
    unsafe { device::sync_threads() };
    // Warp 0 turns the (item, warp) counts into exclusive offsets, in input order.
    if warp == 0 {
        let lane = device::lane_id() as usize;
        let (a, b) =
            unsafe { (tile_counts.load(counts + 2 * lane), tile_counts.load(counts + 2 * lane + 1)) };
        let inclusive = unsafe { warp::inclusive_scan_add_u32(a + b) };
        let exclusive = inclusive - a - b;
        unsafe {
            tile_counts.store(counts + 2 * lane, exclusive);
            tile_counts.store(counts + 2 * lane + 1, exclusive + a);
            if lane == 31 {
                tile_counts.store(counts + TILE_ITEMS * TILE_WARPS, inclusive);
            }
        }
    }
    unsafe { device::sync_threads() };
    let below_lane = device::lanemask_lt();
    let mut rank = [0u32; TILE_ITEMS];
    unroll_items!(i => {
        if first[i] || second[i] {
            let offset = unsafe { tile_counts.load(counts + i * TILE_WARPS + warp) };
            rank[i] = if first[i] {
                (offset & 0xffff) + (first_votes[i] & below_lane).count_ones()
            } else {
                (offset >> 16) + (second_votes[i] & below_lane).count_ones()
            };
        }
    });
    let total = unsafe { tile_counts.load(counts + TILE_ITEMS * TILE_WARPS) };
    TilePlaces { rank, first_total: total & 0xffff, second_total: total >> 16 }
}
