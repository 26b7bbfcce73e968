//! Batched top-k: the `k` best of every row, by BlockSelect (Faiss): each warp of a block
//! streams its share of the row through a [`WarpSelect`] queue in registers, then the
//! warps' queues merge in shared memory.
//!
//! Rows are dense (row `r` is `cols` keys at `r · row_stride`) or ragged (`row_offsets`:
//! row `r` is keys `offsets[r] .. offsets[r + 1]`). A row may be split over
//! `blocks_per_row` blocks, each writing its own `k` best: the first pass of the paper's
//! two-pass selection for long rows; the second pass is the same kernel over those
//! candidates (dense rows of `blocks_per_row · k`, with `indices_in`).
//!
//! Block `b` works on row `b / blocks_per_row`, part `b % blocks_per_row`, and writes its
//! `k` best, sorted, at `b · k`: the key (read back from the input at the winning
//! position, so NaN payloads and `-0.0` survive bit for bit) and its index (the column in
//! the row, or `indices_in` of the winner). Slots beyond what the row holds get the index
//! [`NO_INDEX`] and the worst non-NaN key of the order ([`Key::HIGHEST`] for "smallest",
//! [`Key::LOWEST`] for "largest"); inputs whose `indices_in` is [`NO_INDEX`] are skipped.
//!
//! Positions in a row are 32-bit: rows of fewer than `2^32 − 1` keys.

use crate::device::{self, FULL_WARP, SharedLayout, SharedRegion, SharedSlice};
use crate::key::{Key, OrderedBits};
use crate::params::{GlobalPtr, Order};
use crate::warp::bitonic::{WarpPairs, fold_sorted_runs};
use crate::warp::select::{WarpSelect, reduce_min_pair, thread_registers};

pub use crate::topk::bitonic::NO_INDEX;

/// Threads per block: four warps, as Faiss's BlockSelect uses for rows.
pub const ROWS_THREADS: u32 = 128;
/// Warps per block.
const WARPS: usize = (ROWS_THREADS / 32) as usize;
/// Keys each lane loads per step before offering them all at once (loads in flight per
/// lane); at most the thread-queue registers ([`thread_registers`]).
const LOADS_PER_STEP: usize = 4;

/// Parameters of `top_k_rows_q<Q>_<key>`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct RowsParams<K> {
    /// The keys: a row-major matrix (dense), or the rows one after another (ragged).
    pub keys_in: GlobalPtr<K>,
    /// Index to report for each input (laid out as the keys), or null for the column.
    pub indices_in: GlobalPtr<u64>,
    /// `rows + 1` offsets into the keys (ragged rows), or null for dense rows.
    pub row_offsets: GlobalPtr<u64>,
    /// `rows · blocks_per_row · k` keys: block `b` writes its `k` best at `b · k`.
    pub keys_out: GlobalPtr<K>,
    /// Their indices.
    pub indices_out: GlobalPtr<u64>,
    /// Number of rows.
    pub rows: u64,
    /// Keys per dense row (unused for ragged rows).
    pub cols: u64,
    /// Keys from one dense row's start to the next's.
    pub row_stride: u64,
    /// How many to keep per row, 1 to `32·Q`.
    pub k: u32,
    /// [`Order::to_raw`].
    pub order: u32,
    /// Blocks sharing a row, each over an equal part of it.
    pub blocks_per_row: u32,
    /// Keeps the struct free of implicit padding (set to 0).
    pub reserved: u32,
}

/// The shared memory of the kernel: the block's bound (below) and the runs of the warps
/// that hand their queue on at each level of the merge tree (at most half the warps at once).
#[derive(Clone, Copy, Debug)]
pub struct RowsLayout<B> {
    /// The smallest high word of the warps' thresholds: no key whose ordered bits have a
    /// larger high word can be among the part's `k` best ([`WarpSelect::tighten`]).
    pub bound: SharedRegion<u32>,
    /// Encoded keys of the handed-on runs.
    pub bits: SharedRegion<B>,
    /// Their positions.
    pub positions: SharedRegion<u32>,
    /// Bytes to ask for at launch.
    pub bytes: usize,
}

impl<B> RowsLayout<B> {
    /// The layout for warp queues of `32·q` pairs.
    pub const fn new(q: usize) -> Self {
        let (layout, bound) = SharedLayout::new().push::<u32>(1);
        let (layout, bits) = layout.push::<B>(WARPS / 2 * 32 * q);
        let (layout, positions) = layout.push::<u32>(WARPS / 2 * 32 * q);
        Self { bound, bits, positions, bytes: layout.bytes() }
    }
}

/// The block's part of its row: where the row starts and the part's columns.
#[derive(Clone, Copy, Debug)]
struct Part {
    row_start: u64,
    begin: u64,
    end: u64,
}

#[inline(always)]
unsafe fn part_of_block<K>(params: &RowsParams<K>, block: u64) -> Part {
    let parts = params.blocks_per_row.max(1) as u64;
    let (row, part) = (block / parts, block % parts);
    let (row_start, row_len) = if params.row_offsets.is_null() {
        (row * params.row_stride, params.cols)
    } else {
        let start = unsafe { params.row_offsets.read(row) };
        (start, unsafe { params.row_offsets.read(row + 1) } - start)
    };
    Part { row_start, begin: row_len * part / parts, end: row_len * (part + 1) / parts }
}

/// Streams this warp's share of the part (32-key runs, `WARPS` apart, `LOADS_PER_STEP`
/// runs per step) into `sink`, one offer per step.
#[inline(always)]
unsafe fn stream_part<K: Key>(
    params: &RowsParams<K>,
    part: Part,
    largest: bool,
    sink: &mut impl RowSink<K::Bits>,
) {
    let warp = device::warp_id() as u64;
    let lane = device::lane_id() as u64;
    let step_len = (WARPS * 32 * LOADS_PER_STEP) as u64;
    let mut step_start = part.begin + warp * 32 * LOADS_PER_STEP as u64;
    while step_start < part.end {
        let mut keys = [K::default(); LOADS_PER_STEP];
        let mut valid = [false; LOADS_PER_STEP];
        for u in 0..LOADS_PER_STEP {
            let column = step_start + (u * 32) as u64 + lane;
            valid[u] = column < part.end;
            // Clamped, not branched around: the loads issue back to back.
            keys[u] = unsafe { params.keys_in.read(part.row_start + column.min(part.end - 1)) };
        }
        if !params.indices_in.is_null() {
            for (u, is_valid) in valid.iter_mut().enumerate() {
                let column = (step_start + (u * 32) as u64 + lane).min(part.end - 1);
                *is_valid &= unsafe { params.indices_in.read(part.row_start + column) } != NO_INDEX;
            }
        }
        let mut bits = [K::Bits::MAX; LOADS_PER_STEP];
        let mut positions = [0u32; LOADS_PER_STEP];
        for u in 0..LOADS_PER_STEP {
            let ordered = keys[u].to_ordered();
            bits[u] = if largest { ordered.complement() } else { ordered };
            positions[u] = (step_start + (u * 32) as u64 + lane) as u32;
        }
        sink.offer(bits, positions, valid);
        unsafe { sink.end_step() };
        step_start += step_len;
    }
}

/// Where the streams deliver a warp's keys. A trait, not a closure: its methods are always
/// inlined, where a closure offered from several call sites was outlined into a function
/// taking the queue through local memory.
trait RowSink<B> {
    /// Four (encoded key, position) pairs per lane; `valid` marks the real ones.
    fn offer(&mut self, bits: [B; 4], positions: [u32; 4], valid: [bool; 4]);
    /// After each step's offers (all lanes together).
    ///
    /// # Safety
    /// All 32 lanes call it together.
    unsafe fn end_step(&mut self) {}
}

/// `k = 1`: each lane's smallest pair.
struct LaneMinimum<B> {
    best: (B, u32),
}

impl<B: OrderedBits> RowSink<B> for LaneMinimum<B> {
    #[inline(always)]
    fn offer(&mut self, bits: [B; 4], positions: [u32; 4], valid: [bool; 4]) {
        for u in 0..4 {
            if valid[u] && crate::thread::pair_after(self.best.0, self.best.1, bits[u], positions[u]) {
                self.best = (bits[u], positions[u]);
            }
        }
    }
}

/// A warp queue whose threshold the block's warps share through `bound` (the high 32 bits
/// of the ordered key, so that one `atom.shared.min.u32` serves every key width): each warp
/// filters by the tightest threshold of the block, not only by its own queue's.
struct SharedBoundQueue<B, const Q: usize, const T: usize> {
    queue: WarpSelect<B, Q, T>,
    bound: SharedSlice<u32>,
    /// The tightest bound this warp has seen (or published).
    known: u32,
}

impl<B: OrderedBits, const Q: usize, const T: usize> RowSink<B> for SharedBoundQueue<B, Q, T> {
    #[inline(always)]
    fn offer(&mut self, bits: [B; 4], positions: [u32; 4], valid: [bool; 4]) {
        // `add_batch` is safe to call here: every lane offers in every call.
        unsafe { self.queue.add_batch(bits, positions, valid) };
    }

    #[inline(always)]
    unsafe fn end_step(&mut self) {
        let shift = B::BITS - 32;
        let mine = (self.queue.threshold().0.to_u64() >> shift) as u32;
        let mut block_bound = if mine < self.known { mine } else { u32::MAX };
        if device::lane_id() == 0 {
            block_bound = block_bound.min(unsafe { self.bound.atomic_min(0, block_bound) });
        }
        self.known = unsafe { device::shfl_idx_u32(FULL_WARP, block_bound, 0) }.min(self.known);
        // Every key whose high word is at most the bound's stays a candidate.
        let low_ones = if shift == 0 { 0 } else { (1u64 << shift) - 1 };
        let bound_bits = B::from_u64(((self.known as u64) << shift) | low_ones);
        unsafe { self.queue.tighten(bound_bits, u32::MAX) };
    }
}

/// The `top_k_rows_q<Q>_<key>` kernel body (module docs), with `T` thread-queue registers.
///
/// # Safety
/// [`ROWS_THREADS`] threads, [`RowsLayout::bytes`] of shared memory, a grid of
/// `rows · blocks_per_row` blocks, rows shorter than `2^32 − 1`, `1 ≤ k ≤ 32·Q`, outputs of
/// `rows · blocks_per_row · k`.
#[inline(always)]
pub unsafe fn select_rows<K: Key, const Q: usize, const T: usize>(params: RowsParams<K>) {
    let largest = Order::from_raw(params.order) == Order::Largest;
    let warp = device::warp_id() as usize;
    let lane = device::lane_id() as usize;
    let block = device::block_idx_x() as u64;
    let part = unsafe { part_of_block(&params, block) };
    let layout = RowsLayout::<K::Bits>::new(Q);
    let bound = unsafe { layout.bound.bind() };
    if device::thread_idx_x() == 0 {
        unsafe { bound.store(0, u32::MAX) };
    }
    unsafe { device::sync_threads() };

    let mut best = if Q == 1 && params.k == 1 {
        // k = 1: a running minimum per lane and one warp reduction, no queue.
        let mut sink = LaneMinimum { best: (K::Bits::MAX, u32::MAX) };
        unsafe { stream_part(&params, part, largest, &mut sink) };
        let (bits, position) = unsafe { reduce_min_pair(sink.best.0, sink.best.1) };
        let mut best = WarpPairs::<K::Bits, Q>::padding();
        if lane == 0 {
            (best.bits[0], best.positions[0]) = (bits, position);
        }
        best
    } else {
        let mut sink =
            SharedBoundQueue { queue: WarpSelect::<K::Bits, Q, T>::new(params.k), bound, known: u32::MAX };
        unsafe { stream_part(&params, part, largest, &mut sink) };
        unsafe { sink.queue.finish() }
    };

    // Merge the warps' queues in a tree: at distance d, warp w (an odd multiple of d) hands
    // its run to warp w − d through slot w / 2d.
    let (shared_bits, shared_positions) = unsafe { (layout.bits.bind(), layout.positions.bind()) };
    let run = 32 * Q;
    let mut distance = 1;
    while distance < WARPS {
        if warp % (2 * distance) == distance {
            for q in 0..Q {
                let slot = warp / (2 * distance) * run + q * 32 + lane;
                unsafe {
                    shared_bits.store(slot, best.bits[q]);
                    shared_positions.store(slot, best.positions[q]);
                }
            }
        }
        unsafe { device::sync_threads() };
        if warp.is_multiple_of(2 * distance) {
            let mut other = WarpPairs::<K::Bits, Q>::padding();
            for q in 0..Q {
                let slot = warp / (2 * distance) * run + q * 32 + lane;
                unsafe {
                    other.bits[q] = shared_bits.load(slot);
                    other.positions[q] = shared_positions.load(slot);
                }
            }
            unsafe { fold_sorted_runs(&mut best, &other) };
        }
        unsafe { device::sync_threads() }; // the slots are free for the next level
        distance *= 2;
    }

    if warp == 0 {
        let out_start = block * params.k as u64;
        let padding_key = if largest { K::LOWEST } else { K::HIGHEST };
        for q in 0..Q {
            let rank = q * 32 + lane;
            if rank < params.k as usize {
                let position = best.positions[q];
                let (key, index) = if position == u32::MAX {
                    (padding_key, NO_INDEX)
                } else {
                    let at = part.row_start + position as u64;
                    let index = if params.indices_in.is_null() {
                        position as u64
                    } else {
                        unsafe { params.indices_in.read(at) }
                    };
                    (unsafe { params.keys_in.read(at) }, index)
                };
                unsafe {
                    params.keys_out.write(out_start + rank as u64, key);
                    params.indices_out.write(out_start + rank as u64, index);
                }
            }
        }
    }
}

macro_rules! rows_kernels {
    ($($name:ident = $q:literal;)*) => {$(
        #[doc = concat!("[`select_rows`] with `Q = ", $q, "` and `T = thread_registers(Q, key bits)`.")]
        ///
        /// # Safety
        /// As [`select_rows`].
        #[inline(always)]
        pub unsafe fn $name<K: Key>(params: RowsParams<K>) {
            // One branch survives monomorphisation.
            if K::Bits::BITS == 32 {
                unsafe { select_rows::<K, $q, { thread_registers($q, 32) }>(params) }
            } else {
                unsafe { select_rows::<K, $q, { thread_registers($q, 64) }>(params) }
            }
        }
    )*};
}

rows_kernels! {
    select_rows_q1 = 1;
    select_rows_q2 = 2;
    select_rows_q4 = 4;
    select_rows_q8 = 8;
    select_rows_q16 = 16;
    select_rows_q32 = 32;
    select_rows_q64 = 64;
}
