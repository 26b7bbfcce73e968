//! Sort & choose, the bitonic top-k paper's simplest baseline: sort everything, keep the
//! first `k`. The sort is a least-significant-digit radix sort written here, 8-bit digits
//! of the *rank bits* (ordered bits, complemented for "largest", so the best come first),
//! carrying each key's position in the data. Every pass is stable, so equal keys end in
//! position order: the result is the library's (best first, ties lowest index first).
//!
//! One pass per digit, least significant first, each three launches:
//!
//! 1. **count** (`sort_choose_count_<key>`): each block histograms the digit over its share
//!    (a contiguous range of whole tiles) and writes its 256 counts, digit-major:
//!    `counts[digit · blocks + block]`;
//! 2. **scan** (`sort_choose_scan_<key>`, one block): the exclusive prefix sum of `counts`
//!    in that order, in place: where each block's inputs of each digit start in the output;
//! 3. **scatter** (`sort_choose_scatter_<key>`): each block reads its share again, tile by
//!    tile, and writes each input to its digit's next place. Within a tile the places follow
//!    input order: each warp ranks its own 256 inputs by digit (`match.any.sync`, a counter
//!    per digit that only the warp touches), one thread per digit scans its digit's counters
//!    over the 8 warps, and a block scan over the digits places the tile, sorted by digit,
//!    in shared memory; the threads then write it out in that order, so each digit's run of
//!    the tile goes out as consecutive stores.
//!
//! The first pass reads the data (positions are implicit); the others read the ping-pong
//! buffers of keys and 32-bit positions. The last pass writes only the places below `k`,
//! straight to the output (keys and 64-bit indices): the "choose" costs nothing extra.
//!
//! Keys travel as stored (their rank bits are recomputed from them each pass), so the
//! result is bit for bit the data's keys. Positions are 32-bit: inputs of fewer than 2^32
//! keys.

use crate::block::scan::exclusive_scan_add_u64;
use crate::block::tiles::{
    BucketRuns, TILE, TILE_ITEMS, TILE_THREADS, TILE_WARPS, block_range, load_keys, unroll_items,
};
use crate::device::{self, SharedLayout, SharedRegion};
use crate::key::{Key, OrderedBits};
use crate::params::{GlobalPtr, Order};

/// Threads per block of every sort & choose kernel.
pub const SORT_CHOOSE_THREADS: u32 = TILE_THREADS;
/// Bits per digit.
pub const SORT_DIGIT_BITS: u32 = 8;
/// Values of a digit: one per thread of a block.
pub const SORT_DIGITS: usize = 1 << SORT_DIGIT_BITS;
/// The most blocks of a count or scatter launch (the scan kernel's share per thread is one
/// digit's counts of every block).
pub const MAX_SORT_CHOOSE_BLOCKS: u32 = 1024;
/// A digit no input has: marks the tile's lanes past the end.
const NO_DIGIT: u32 = SORT_DIGITS as u32;

const _: () = assert!(SORT_CHOOSE_THREADS as usize == SORT_DIGITS);

/// Parameters of every sort & choose kernel.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct SortChooseParams<K> {
    /// The data.
    pub data: GlobalPtr<K>,
    /// Number of keys (below 2^32).
    pub len: u64,
    /// Outputs the last pass writes: the first `k` places.
    pub k: u64,
    /// Where the last pass writes the keys (`k`).
    pub keys_out: GlobalPtr<K>,
    /// Where it writes their indices in the data (`k`).
    pub indices_out: GlobalPtr<u64>,
    /// The ping-pong buffers' keys, `len` each: pass `p` writes buffer `p % 2`.
    pub buffer_keys: [GlobalPtr<K>; 2],
    /// Their positions in the data, `len` each.
    pub buffer_positions: [GlobalPtr<u32>; 2],
    /// `256 · blocks` counts, digit-major; the scan turns them into places.
    pub counts: GlobalPtr<u32>,
    /// Blocks of the count and scatter launches (at most [`MAX_SORT_CHOOSE_BLOCKS`]).
    pub blocks: u32,
    /// The digit of this pass, least significant first.
    pub pass: u32,
    /// Passes in all (the rank bits over 8): the last one writes the output.
    pub passes: u32,
    /// [`Order::to_raw`].
    pub order: u32,
}

impl<K: Key> SortChooseParams<K> {
    /// The digit of this pass of `key`'s rank bits.
    #[inline(always)]
    fn digit(&self, key: K) -> u32 {
        let ordered = key.to_ordered();
        let rank = if Order::from_raw(self.order) == Order::Largest { ordered.complement() } else { ordered };
        ((rank.to_u64() >> (self.pass * SORT_DIGIT_BITS)) as u32) & (SORT_DIGITS as u32 - 1)
    }

    /// This pass's input: keys and positions (null: the keys are the data, in place).
    #[inline(always)]
    fn source(&self) -> (GlobalPtr<K>, GlobalPtr<u32>) {
        if self.pass == 0 { (self.data, GlobalPtr::null()) } else { self.buffer((self.pass - 1) % 2) }
    }

    /// Buffer `which` (0 or 1). Chosen by a branch, not an index: indexing the parameter
    /// arrays at run time would copy the parameters to the stack.
    #[inline(always)]
    fn buffer(&self, which: u32) -> (GlobalPtr<K>, GlobalPtr<u32>) {
        if which == 0 {
            (self.buffer_keys[0], self.buffer_positions[0])
        } else {
            (self.buffer_keys[1], self.buffer_positions[1])
        }
    }
}

/// Shared memory of the count kernel: the block's histogram.
#[derive(Clone, Copy, Debug)]
pub struct SortCountLayout {
    /// One counter per digit.
    pub histogram: SharedRegion<u32>,
    /// Bytes to ask for at launch.
    pub bytes: usize,
}

impl SortCountLayout {
    /// The layout.
    pub const fn new() -> Self {
        let (layout, histogram) = SharedLayout::new().push::<u32>(SORT_DIGITS);
        Self { histogram, bytes: layout.bytes() }
    }
}

impl Default for SortCountLayout {
    fn default() -> Self {
        Self::new()
    }
}

/// The `sort_choose_count_<key>` kernel: this block's histogram of the pass's digit, to
/// `counts[digit · blocks + block]`.
///
/// # Safety
/// [`SORT_CHOOSE_THREADS`] threads, [`SortCountLayout::bytes`] of shared memory,
/// `grid.x = params.blocks`; the previous pass has finished.
pub unsafe fn count<K: Key>(params: SortChooseParams<K>) {
    let histogram = unsafe { SortCountLayout::new().histogram.bind() };
    let thread = device::thread_idx_x() as usize;
    unsafe {
        histogram.store(thread, 0);
        device::sync_threads();
    }
    let (keys, _) = params.source();
    let (start, end) = block_range(params.len, params.blocks);
    let mut tile_start = start;
    while tile_start < end {
        let tile_keys = unsafe { load_keys(keys, tile_start, end) };
        let first = tile_start + thread as u64;
        let mut runs = BucketRuns::new();
        unroll_items!(i => {
            if first + (i as u64) * (TILE_THREADS as u64) < end {
                unsafe { runs.add(&histogram, params.digit(tile_keys[i])) };
            }
        });
        unsafe { runs.flush(&histogram) };
        tile_start += TILE;
    }
    unsafe {
        device::sync_threads();
        let digit = thread as u64;
        params
            .counts
            .write(digit * params.blocks as u64 + device::block_idx_x() as u64, histogram.load(thread));
    }
}

/// Shared memory of the scan kernel.
#[derive(Clone, Copy, Debug)]
pub struct SortScanLayout {
    /// Per-warp sums of the block scan.
    pub warp_sums: SharedRegion<u64>,
    /// Bytes to ask for at launch.
    pub bytes: usize,
}

impl SortScanLayout {
    /// The layout.
    pub const fn new() -> Self {
        let (layout, warp_sums) = SharedLayout::new().push::<u64>(TILE_WARPS);
        Self { warp_sums, bytes: layout.bytes() }
    }
}

impl Default for SortScanLayout {
    fn default() -> Self {
        Self::new()
    }
}

/// The `sort_choose_scan_<key>` kernel (one block): `counts` (digit-major) to its exclusive
/// prefix sum, in place. Thread `d` sums digit `d`'s counts of every block, a block scan
/// orders the digits, then each thread writes its digit's places.
///
/// # Safety
/// One block of [`SORT_CHOOSE_THREADS`] threads, [`SortScanLayout::bytes`] of shared memory;
/// the pass's count has run.
pub unsafe fn scan<K: Key>(params: SortChooseParams<K>) {
    let warp_sums = unsafe { SortScanLayout::new().warp_sums.bind() };
    let blocks = params.blocks as u64;
    let column = device::thread_idx_x() as u64 * blocks;
    let mut total = 0u64;
    for block in 0..blocks {
        total += unsafe { params.counts.read(column + block) } as u64;
    }
    let mut place = unsafe { exclusive_scan_add_u64(total, &warp_sums) };
    for block in 0..blocks {
        let count = unsafe { params.counts.read(column + block) };
        unsafe { params.counts.write(column + block, place as u32) };
        place += count as u64;
    }
}

/// Shared memory of the scatter kernel.
#[derive(Clone, Copy, Debug)]
pub struct SortScatterLayout<K> {
    /// Per warp and digit (`warp · 256 + digit`): the warp's inputs of the digit in this
    /// tile so far, counted by the warp alone; then, scanned over the warps, where the
    /// warp's inputs of the digit start among the tile's.
    pub warp_counts: SharedRegion<u32>,
    /// Where the tile's inputs of each digit start in the output.
    pub tile_places: SharedRegion<u32>,
    /// Where they start in the tile sorted by digit.
    pub tile_starts: SharedRegion<u32>,
    /// Per-warp sums of the block scan over digits.
    pub warp_sums: SharedRegion<u64>,
    /// The tile's keys, sorted by digit (stably).
    pub staged_keys: SharedRegion<K>,
    /// Their positions in the data.
    pub staged_positions: SharedRegion<u32>,
    /// Bytes to ask for at launch.
    pub bytes: usize,
}

impl<K> SortScatterLayout<K> {
    /// The layout.
    pub const fn new() -> Self {
        let (layout, warp_counts) = SharedLayout::new().push::<u32>(TILE_WARPS * SORT_DIGITS);
        let (layout, tile_places) = layout.push::<u32>(SORT_DIGITS);
        let (layout, tile_starts) = layout.push::<u32>(SORT_DIGITS);
        let (layout, warp_sums) = layout.push::<u64>(TILE_WARPS);
        let (layout, staged_keys) = layout.push::<K>(TILE as usize);
        let (layout, staged_positions) = layout.push::<u32>(TILE as usize);
        Self {
            warp_counts,
            tile_places,
            tile_starts,
            warp_sums,
            staged_keys,
            staged_positions,
            bytes: layout.bytes(),
        }
    }
}

impl<K> Default for SortScatterLayout<K> {
    fn default() -> Self {
        Self::new()
    }
}

/// The `sort_choose_scatter_<key>` kernel: this block's inputs to their places, in input
/// order within each digit (a stable pass); the last pass writes the places below `k` to
/// the output.
///
/// In a tile, warp `w` owns the 256 inputs from `256·w` on (item `i` of lane `l` is input
/// `256·w + 32·i + l`), so input order is (warp, item, lane). Each warp ranks its own
/// inputs item by item: the lanes of one digit find each other (`match.any.sync`), the
/// lowest of them adds their number to the warp's counter of the digit and hands the old
/// value on; no other warp touches the counter. Then thread `d` scans digit `d`'s counters
/// over the 8 warps. Two barriers per tile.
///
/// # Safety
/// [`SORT_CHOOSE_THREADS`] threads, [`SortScatterLayout::bytes`] of shared memory,
/// `grid.x = params.blocks` (as the count); the pass's scan has run.
pub unsafe fn scatter<K: Key>(params: SortChooseParams<K>) {
    let layout = SortScatterLayout::<K>::new();
    let (warp_counts, tile_places, tile_starts, warp_sums) = unsafe {
        (
            layout.warp_counts.bind(),
            layout.tile_places.bind(),
            layout.tile_starts.bind(),
            layout.warp_sums.bind(),
        )
    };
    let (staged_keys, staged_positions) =
        unsafe { (layout.staged_keys.bind(), layout.staged_positions.bind()) };
    let thread = device::thread_idx_x() as usize;
    let warp = device::warp_id() as usize;
    let lane = device::lane_id();
    let lanes_below = device::lanemask_lt();
    let own_counts = warp * SORT_DIGITS;
    // Thread `d` keeps digit `d`'s next place in the output across tiles.
    let digit_of_thread = thread;
    let mut next_place = unsafe {
        params.counts.read(digit_of_thread as u64 * params.blocks as u64 + device::block_idx_x() as u64)
    };
    let clear_own_counts = || {
        for digit in (lane as usize..SORT_DIGITS).step_by(32) {
            unsafe { warp_counts.store(own_counts + digit, 0) };
        }
        unsafe { device::sync_warp(device::FULL_WARP) };
    };
    clear_own_counts();
    let last_pass = params.pass + 1 == params.passes;
    let (target_keys, target_positions) = params.buffer(params.pass % 2);
    let (keys, positions) = params.source();
    let (start, end) = block_range(params.len, params.blocks);
    let mut tile_start = start;
    while tile_start < end {
        let first = tile_start + warp as u64 * 256 + lane as u64;
        let mut tile_keys = [K::default(); TILE_ITEMS];
        let mut tile_positions = [0u32; TILE_ITEMS];
        unroll_items!(i => {
            let at = (first + i as u64 * 32).min(end - 1);
            tile_keys[i] = unsafe { keys.read(at) };
            tile_positions[i] = if positions.is_null() { at as u32 } else { unsafe { positions.read(at) } };
        });
        let mut digits = [NO_DIGIT; TILE_ITEMS];
        // Where each input goes among the warp's inputs of its digit.
        let mut in_warp = [0u32; TILE_ITEMS];
        unroll_items!(i => {
            let valid = first + (i as u64) * 32 < end;
            digits[i] = if valid { params.digit(tile_keys[i]) } else { NO_DIGIT };
            let peers = unsafe { device::match_any_u32(device::FULL_WARP, digits[i]) };
            let leader = peers.trailing_zeros();
            let mut before = 0;
            if valid && lane == leader {
                let at = own_counts + digits[i] as usize;
                before = unsafe { warp_counts.load(at) };
                unsafe { warp_counts.store(at, before + peers.count_ones()) };
            }
            let before = unsafe { device::shfl_idx_u32(device::FULL_WARP, before, leader) };
            in_warp[i] = before + (peers & lanes_below).count_ones();
            unsafe { device::sync_warp(device::FULL_WARP) };
        });
        unsafe { device::sync_threads() };
        // Thread `d`: digit `d`'s counters of the warps, in warp order, to where each
        // warp's inputs of the digit start.
        let mut in_tile = 0u32;
        for w in 0..TILE_WARPS {
            let at = w * SORT_DIGITS + digit_of_thread;
            let count = unsafe { warp_counts.load(at) };
            unsafe { warp_counts.store(at, in_tile) };
            in_tile += count;
        }
        // The tile sorted by digit in shared memory, then written digit run by digit run:
        // written straight from the registers, the 256 digits' places scatter every warp's
        // stores over 32 sectors, most of them partly written (uniform keys took 52 ms at
        // 2^28, all-equal ones 8 ms).
        let tile_start_of_digit = unsafe { exclusive_scan_add_u64(in_tile as u64, &warp_sums) } as u32;
        unsafe {
            tile_places.store(digit_of_thread, next_place);
            tile_starts.store(digit_of_thread, tile_start_of_digit);
        }
        next_place += in_tile;
        unsafe { device::sync_threads() };
        unroll_items!(i => {
            if digits[i] != NO_DIGIT {
                let digit = digits[i] as usize;
                let slot = unsafe { tile_starts.load(digit) + warp_counts.load(own_counts + digit) } + in_warp[i];
                unsafe {
                    staged_keys.store(slot as usize, tile_keys[i]);
                    staged_positions.store(slot as usize, tile_positions[i]);
                }
            }
        });
        unsafe { device::sync_threads() };
        let tile_len = (end - tile_start).min(TILE) as usize;
        let mut slot = thread;
        while slot < tile_len {
            let key = unsafe { staged_keys.load(slot) };
            let position = unsafe { staged_positions.load(slot) };
            let digit = params.digit(key) as usize;
            let place =
                unsafe { tile_places.load(digit) as u64 + (slot as u32 - tile_starts.load(digit)) as u64 };
            if !last_pass {
                unsafe {
                    target_keys.write(place, key);
                    target_positions.write(place, position);
                }
            } else if place < params.k {
                unsafe {
                    params.keys_out.write(place, key);
                    params.indices_out.write(place, position as u64);
                }
            }
            slot += SORT_CHOOSE_THREADS as usize;
        }
        // The warp's reads of its counters are done: clear them for the next tile (the
        // next scan reads them only after the next barrier).
        unsafe { device::sync_warp(device::FULL_WARP) };
        clear_own_counts();
        tile_start += TILE;
    }
}

/// Passes of a key type: its bits over 8.
pub const fn passes_of<K: Key>() -> u32 {
    <K::Bits as OrderedBits>::BITS / SORT_DIGIT_BITS
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::vec::Vec;

    use super::*;
    use crate::device::emulator::{LaunchConfig, launch};

    /// Sorts `keys` on the emulator with `blocks` blocks; returns the first `k` pairs.
    fn sort_and_choose<K: Key + Send + Sync>(
        keys: &[K],
        k: usize,
        order: Order,
        blocks: u32,
    ) -> Vec<(K, u64)> {
        let n = keys.len();
        let mut buffer_keys = [std::vec![K::default(); n], std::vec![K::default(); n]];
        let mut buffer_positions = [std::vec![0u32; n], std::vec![0u32; n]];
        let mut counts = std::vec![0u32; SORT_DIGITS * blocks as usize];
        let mut keys_out = std::vec![K::default(); k];
        let mut indices_out = std::vec![u64::MAX; k];
        let [keys0, keys1] = &mut buffer_keys;
        let [positions0, positions1] = &mut buffer_positions;
        let mut params: SortChooseParams<K> = SortChooseParams {
            data: GlobalPtr::from_address(keys.as_ptr() as u64),
            len: n as u64,
            k: k as u64,
            keys_out: GlobalPtr::from_address(keys_out.as_mut_ptr() as u64),
            indices_out: GlobalPtr::from_address(indices_out.as_mut_ptr() as u64),
            buffer_keys: [
                GlobalPtr::from_address(keys0.as_mut_ptr() as u64),
                GlobalPtr::from_address(keys1.as_mut_ptr() as u64),
            ],
            buffer_positions: [
                GlobalPtr::from_address(positions0.as_mut_ptr() as u64),
                GlobalPtr::from_address(positions1.as_mut_ptr() as u64),
            ],
            counts: GlobalPtr::from_address(counts.as_mut_ptr() as u64),
            blocks,
            pass: 0,
            passes: passes_of::<K>(),
            order: order.to_raw(),
        };
        let shape = |grid: u32, shared_bytes: usize| LaunchConfig {
            grid: (grid, 1),
            block_threads: SORT_CHOOSE_THREADS,
            shared_bytes,
        };
        for pass in 0..params.passes {
            params.pass = pass;
            launch(&shape(blocks, SortCountLayout::new().bytes), &|| unsafe { count(params) }).unwrap();
            launch(&shape(1, SortScanLayout::new().bytes), &|| unsafe { scan(params) }).unwrap();
            launch(&shape(blocks, SortScatterLayout::<K>::new().bytes), &|| unsafe { scatter(params) })
                .unwrap();
        }
        keys_out.into_iter().zip(indices_out).collect()
    }

    /// The first `k` of a stable sort by rank, on the CPU.
    fn expected<K: Key>(keys: &[K], k: usize, order: Order) -> Vec<(u64, u64)> {
        let largest = order == Order::Largest;
        let rank = |key: K| {
            let ordered = key.to_ordered();
            (if largest { ordered.complement() } else { ordered }).to_u64()
        };
        let mut pairs: Vec<(u64, u64)> =
            keys.iter().enumerate().map(|(i, &key)| (rank(key), i as u64)).collect();
        pairs.sort();
        pairs.truncate(k);
        pairs
    }

    fn check<K: Key + Send + Sync>(keys: &[K], k: usize, order: Order, blocks: u32) {
        let got = sort_and_choose(keys, k, order, blocks);
        let largest = order == Order::Largest;
        let rank = |key: K| {
            let ordered = key.to_ordered();
            (if largest { ordered.complement() } else { ordered }).to_u64()
        };
        let got: Vec<(u64, u64)> = got.into_iter().map(|(key, index)| (rank(key), index)).collect();
        assert_eq!(got, expected(keys, k, order), "n = {}, k = {k}, {order:?}, {blocks} blocks", keys.len());
    }

    #[test]
    fn sorts_stably_in_both_orders_over_ragged_tiles_and_blocks() {
        let mut next = crate::testing::xorshift(0x2545_f491_4f6c_dd1d);
        let spread: Vec<u32> = (0..5000).map(|_| next() as u32).collect();
        let few: Vec<u32> = (0..5000).map(|_| (next() % 5) as u32 * 0x0101_0101).collect();
        for (keys, blocks) in [(&spread, 1), (&spread, 3), (&few, 2)] {
            for order in [Order::Largest, Order::Smallest] {
                check(keys, 37, order, blocks);
                check(keys, keys.len(), order, blocks);
            }
        }
        let floats: Vec<f64> = (0..3000)
            .map(|i| ((next() % 200) as f64 - 100.0) * if i % 9 == 0 { -0.0 } else { 0.5 })
            .collect();
        check(&floats, 1000, Order::Largest, 2);
        check(&[7i64], 1, Order::Smallest, 1);
    }
}
