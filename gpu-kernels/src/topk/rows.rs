//! Batched top-k: the `k` best of every row, by BlockSelect (Faiss): each warp of a block
//! streams its share of the row through a [`WarpSelect`] queue in registers, then the
//! warps' queues merge in shared memory.
//!
//! Rows are dense (row `r` is `cols` keys at `r · row_stride`) or ragged (`row_offsets`:
//! row `r` is keys `offsets[r] .. offsets[r + 1]`). A row may be split over
//! `blocks_per_row` blocks, each writing its own `k` best: the first pass of the paper's
//! two-pass selection for long rows; the second pass is the same kernel over those
//! candidates (dense rows of `blocks_per_row · k`, with `indices_in`). When rows are many,
//! each warp may take a row of its own (`warps_per_part = 1`): no merge in shared memory,
//! and four rows per block.
//!
//! A *part* (a row, or one block's share of a split row) is worked on by `warps_per_part`
//! warps; part `p` is the `p % blocks_per_row`-th share of row `p / blocks_per_row`, and
//! writes its `k` best, sorted, at `p · k`: the key (read back from the input at the
//! winning position, so NaN payloads and `-0.0` survive bit for bit) and its index (the
//! column in the row, or `indices_in` of the winner). Slots beyond what the row holds get
//! the index [`NO_INDEX`] and the worst non-NaN key of the order ([`Key::HIGHEST`] for
//! "smallest", [`Key::LOWEST`] for "largest"); inputs whose `indices_in` is [`NO_INDEX`]
//! are skipped.
//!
//! **The stream.** A warp reads its part in steps of [`STEP_KEYS`]: first a *filter* with
//! 16-byte loads (each lane four neighbouring keys per load, four loads in flight; 8-byte
//! loads for 16-bit keys, two for 64-bit ones) that only
//! asks whether any key of each 128-key quarter could enter the queue, by the queue's
//! current threshold; then only the quarters that hold one are offered to the queue, each
//! read again (from L1) with the lane-stride layout the queue takes. Once the threshold is
//! tight, almost every step is the filter alone: wide loads, one comparison per key, one
//! vote per quarter. The offers are made from one loop whose trip count is the number of
//! quarters with candidates, so the merge networks are inlined once per kernel. Parts that
//! are not 16-byte aligned (or inputs that are not) skip the filter: every quarter is
//! offered.
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
/// Keys each lane offers to the queue at once (one `add_batch`, lane stride 32): at most the
/// thread-queue registers ([`thread_registers`]).
const KEYS_PER_OFFER: usize = 4;
/// Keys a warp offers at once: a quarter of a step.
const QUARTER_KEYS: u64 = 32 * KEYS_PER_OFFER as u64;
/// Quarters per step: the filter's 16-byte loads in flight per lane.
const QUARTERS: usize = 4;
/// Keys a warp filters per step (and between two exchanges of the block's bound).
pub const STEP_KEYS: u64 = QUARTER_KEYS * QUARTERS as u64;

/// Four neighbouring keys, read with one 16-byte load (two for 64-bit keys).
#[repr(C, align(16))]
#[derive(Clone, Copy)]
struct FourKeys<K>([K; 4]);

/// Four neighbouring 16-bit keys, read with one 8-byte load. Not [`FourKeys`]: its 16-byte
/// alignment pads four 2-byte keys to 16 bytes, so group `i` would be read at byte `16·i`,
/// the keys of another group (GPU run 156 lost the best keys of long rows that way).
#[repr(C, align(8))]
#[derive(Clone, Copy)]
struct FourNarrowKeys<K>([K; 4]);

/// Group `group` of four neighbouring keys of `keys` (keys `4·group …`), in one load of the
/// group's bytes.
///
/// # Safety
/// The group lies inside `keys`, whose start is 16-byte aligned.
#[inline(always)]
unsafe fn read_group<K: Key>(keys: GlobalPtr<K>, group: u64) -> [K; 4] {
    if size_of::<K>() == 2 {
        unsafe { (keys.as_ptr() as *const FourNarrowKeys<K>).add(group as usize).read().0 }
    } else {
        unsafe { (keys.as_ptr() as *const FourKeys<K>).add(group as usize).read().0 }
    }
}

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
    /// Blocks sharing a row, each over an equal part of it (the co-ranking merge's blocks
    /// share a row's candidates instead: `crate::topk::rows_merge`).
    pub blocks_per_row: u32,
    /// Warps that work on one part: 4 (the block, [`ROWS_THREADS`]` / 32`) or 1 (each warp
    /// its own row; then `blocks_per_row` is 1).
    pub warps_per_part: u32,
}

/// The shared memory of the kernel: the parts' bounds (below) and the runs of the warps
/// that hand their queue on at each level of the merge tree (at most half the warps at once).
#[derive(Clone, Copy, Debug)]
pub struct RowsLayout<B> {
    /// Per part of the block: the smallest high word of its warps' thresholds; no key whose
    /// ordered bits have a larger high word can be among the part's `k` best
    /// ([`WarpSelect::tighten`]).
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
        let (layout, bound) = SharedLayout::new().push::<u32>(WARPS);
        let (layout, bits) = layout.push::<B>(WARPS / 2 * 32 * q);
        let (layout, positions) = layout.push::<u32>(WARPS / 2 * 32 * q);
        Self { bound, bits, positions, bytes: layout.bytes() }
    }
}

/// A part of a row: where the row starts and the part's columns.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Part {
    pub(crate) row_start: u64,
    pub(crate) begin: u64,
    pub(crate) end: u64,
}

/// Part `index` (module docs); empty past the last row (such a part writes nothing).
#[inline(always)]
pub(crate) unsafe fn part_at<K>(params: &RowsParams<K>, index: u64) -> Part {
    let parts = params.blocks_per_row.max(1) as u64;
    let (row, part) = (index / parts, index % parts);
    if row >= params.rows {
        return Part { row_start: 0, begin: 0, end: 0 };
    }
    let (row_start, row_len) = if params.row_offsets.is_null() {
        (row * params.row_stride, params.cols)
    } else {
        let start = unsafe { params.row_offsets.read(row) };
        (start, unsafe { params.row_offsets.read(row + 1) } - start)
    };
    Part { row_start, begin: row_len * part / parts, end: row_len * (part + 1) / parts }
}

/// Streams this warp's share of the part into `sink`: steps of [`STEP_KEYS`], the warp's
/// `warp_in_part`-th of every `warps_in_part`, filtered with wide loads and offered by
/// quarters (module docs).
#[inline(always)]
unsafe fn stream_part<K: Key>(
    params: &RowsParams<K>,
    part: Part,
    warp_in_part: u64,
    warps_in_part: u64,
    largest: bool,
    sink: &mut impl RowSink<K::Bits>,
) {
    // Absolute key indices from here on: the part is `first .. last` of `keys_in`.
    let (first, last) = (part.row_start + part.begin, part.row_start + part.end);
    if first >= last {
        return;
    }
    let lane = device::lane_id() as u64;
    let encode = |key: K| {
        let ordered = key.to_ordered();
        if largest { ordered.complement() } else { ordered }
    };
    // The filter reads whole aligned groups of four; `first_whole` is one of them, the
    // address a lane whose group is not whole reads instead (and ignores).
    let first_whole = first.next_multiple_of(4);
    let filter = params.keys_in.address().is_multiple_of(16) && first_whole + 4 <= last;
    let mut step = (first & !3) + warp_in_part * STEP_KEYS;
    while step < last {
        // The filter: which quarters hold a key that could enter the queue.
        let bound = sink.bound();
        let mut quarters_to_offer = 0u32;
        let mut groups = [[K::default(); 4]; QUARTERS];
        let mut whole = [false; QUARTERS];
        for (quarter, group) in groups.iter_mut().enumerate() {
            let at = step + quarter as u64 * QUARTER_KEYS + 4 * lane;
            whole[quarter] = filter && at >= first && at + 4 <= last;
            if filter {
                // Clamped, not branched around: the loads issue back to back.
                let read_at = if whole[quarter] { at } else { first_whole };
                *group = unsafe { read_group(params.keys_in, read_at / 4) };
            }
        }
        for (quarter, group) in groups.iter().enumerate() {
            let at = step + quarter as u64 * QUARTER_KEYS + 4 * lane;
            let overlaps = at < last && at + 4 > first;
            // A group the filter could not read whole is offered as it is.
            let mut may_enter = overlaps && !whole[quarter];
            if whole[quarter] {
                for &key in group {
                    may_enter |= encode(key) <= bound;
                }
            }
            if unsafe { device::any(FULL_WARP, may_enter) } {
                quarters_to_offer |= 1 << quarter;
            }
        }

        // The offers: one loop over the quarters with candidates (its trip count is data,
        // so it stays one loop, and the queue's merge is inlined once).
        while quarters_to_offer != 0 {
            let quarter = quarters_to_offer.trailing_zeros() as u64;
            quarters_to_offer &= quarters_to_offer - 1;
            let quarter_start = step + quarter * QUARTER_KEYS;
            let mut bits = [K::Bits::MAX; KEYS_PER_OFFER];
            let mut positions = [0u32; KEYS_PER_OFFER];
            let mut valid = [false; KEYS_PER_OFFER];
            for u in 0..KEYS_PER_OFFER {
                let at = quarter_start + (u * 32) as u64 + lane;
                valid[u] = at >= first && at < last;
                let read_at = at.clamp(first, last - 1);
                bits[u] = encode(unsafe { params.keys_in.read(read_at) });
                positions[u] = (at.wrapping_sub(part.row_start)) as u32;
                if !params.indices_in.is_null() {
                    valid[u] &= unsafe { params.indices_in.read(read_at) } != NO_INDEX;
                }
            }
            sink.offer(bits, positions, valid);
        }
        unsafe { sink.end_step() };
        step += warps_in_part * STEP_KEYS;
    }
}

/// Where the streams deliver a warp's keys. A trait, not a closure: its methods are always
/// inlined, where a closure offered from several call sites was outlined into a function
/// taking the queue through local memory.
trait RowSink<B> {
    /// This lane takes no key whose encoding is above this (a key equal to it may still be
    /// refused, by position): what the filter compares with.
    fn bound(&self) -> B;
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
    fn bound(&self) -> B {
        self.best.0
    }

    #[inline(always)]
    fn offer(&mut self, bits: [B; 4], positions: [u32; 4], valid: [bool; 4]) {
        for u in 0..4 {
            if valid[u] && crate::thread::pair_after(self.best.0, self.best.1, bits[u], positions[u]) {
                self.best = (bits[u], positions[u]);
            }
        }
    }
}

/// A warp queue whose threshold the warps of a part share through `bound[slot]` (the high
/// 32 bits of the ordered key, so that one `atom.shared.min.u32` serves every key width):
/// each warp filters by the tightest threshold of its part, not only by its own queue's.
struct SharedBoundQueue<B, const Q: usize, const T: usize> {
    queue: WarpSelect<B, Q, T>,
    bound: SharedSlice<u32>,
    slot: usize,
    /// Whether other warps work on the part (else there is nothing to exchange).
    shared: bool,
    /// The tightest bound this warp has seen (or published).
    known: u32,
}

impl<B: OrderedBits, const Q: usize, const T: usize> RowSink<B> for SharedBoundQueue<B, Q, T> {
    #[inline(always)]
    fn bound(&self) -> B {
        self.queue.threshold().0
    }

    #[inline(always)]
    fn offer(&mut self, bits: [B; 4], positions: [u32; 4], valid: [bool; 4]) {
        // `add_batch` is safe to call here: every lane offers in every call.
        unsafe { self.queue.add_batch(bits, positions, valid) };
    }

    #[inline(always)]
    unsafe fn end_step(&mut self) {
        if !self.shared {
            return;
        }
        let shift = B::BITS - 32;
        let mine = (self.queue.threshold().0.to_u64() >> shift) as u32;
        let mut block_bound = if mine < self.known { mine } else { u32::MAX };
        if device::lane_id() == 0 {
            block_bound = block_bound.min(unsafe { self.bound.atomic_min(self.slot, block_bound) });
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
/// [`ROWS_THREADS`] threads, [`RowsLayout::bytes`] of shared memory; a grid of
/// `rows · blocks_per_row` blocks (`warps_per_part = 4`) or `⌈rows / 4⌉` blocks
/// (`warps_per_part = 1`, `blocks_per_row = 1`); rows shorter than `2^32 − 1`,
/// `1 ≤ k ≤ 32·Q`, outputs of `rows · blocks_per_row · k`.
#[inline(always)]
pub unsafe fn select_rows<K: Key, const Q: usize, const T: usize>(params: RowsParams<K>) {
    let largest = Order::from_raw(params.order) == Order::Largest;
    let warp = device::warp_id() as usize;
    let lane = device::lane_id() as usize;
    // 1 or 4 warps per part: shifts, not divisions.
    let warps_in_part = if params.warps_per_part == 1 { 1 } else { WARPS };
    let part_shift = warps_in_part.trailing_zeros();
    let slot = warp >> part_shift;
    let part_index = ((device::block_idx_x() as u64) << (WARPS.trailing_zeros() - part_shift)) + slot as u64;
    let part = unsafe { part_at(&params, part_index) };
    let warp_in_part = (warp & (warps_in_part - 1)) as u64;
    let layout = RowsLayout::<K::Bits>::new(Q);
    let bound = unsafe { layout.bound.bind() };
    if (device::thread_idx_x() as usize) < WARPS {
        unsafe { bound.store(device::thread_idx_x() as usize, u32::MAX) };
    }
    unsafe { device::sync_threads() };

    let mut best = if Q == 1 && params.k == 1 {
        // k = 1: a running minimum per lane and one warp reduction, no queue.
        let mut sink = LaneMinimum { best: (K::Bits::MAX, u32::MAX) };
        unsafe { stream_part(&params, part, warp_in_part, warps_in_part as u64, largest, &mut sink) };
        let (bits, position) = unsafe { reduce_min_pair(sink.best.0, sink.best.1) };
        let mut best = WarpPairs::<K::Bits, Q>::padding();
        if lane == 0 {
            (best.bits[0], best.positions[0]) = (bits, position);
        }
        best
    } else {
        let mut sink = SharedBoundQueue {
            queue: WarpSelect::<K::Bits, Q, T>::new(params.k),
            bound,
            slot,
            shared: warps_in_part > 1,
            known: u32::MAX,
        };
        unsafe { stream_part(&params, part, warp_in_part, warps_in_part as u64, largest, &mut sink) };
        unsafe { sink.queue.finish() }
    };

    // Merge the part's warps' queues in a tree: at distance d, warp w (an odd multiple of d)
    // hands its run to warp w − d through slot w / 2d. (No levels for a warp per part.)
    let (shared_bits, shared_positions) = unsafe { (layout.bits.bind(), layout.positions.bind()) };
    let run = 32 * Q;
    let mut distance = 1;
    while distance < warps_in_part {
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

    let part_exists = part_index < params.rows * params.blocks_per_row.max(1) as u64;
    if warp_in_part == 0 && part_exists {
        let out_start = part_index * params.k as u64;
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
