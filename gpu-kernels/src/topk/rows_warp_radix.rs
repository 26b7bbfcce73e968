//! Batched top-k of short rows by radix selection, a warp per row: the `k` best of every row
//! of at most [`WARP_RADIX_MAX_LEN`] keys, for `k` up to [`WARP_RADIX_MAX_K`].
//!
//! On short rows a queue pays for its warm-up: most of a row of a thousand keys enters a
//! queue of a hundred, and each entry costs merges; the block radix kernel
//! ([`crate::topk::rows_radix`]) pays block barriers and a sort of the whole row. Here a warp
//! reads its row once into registers (32 keys per lane, lane stride) and works there:
//!
//! 1. **Window.** Keys are ranked as in [`crate::topk::rows_radix`] (ordered bits,
//!    complemented for "largest": the best rank is the smallest). The warp's smallest and
//!    largest rank bound the row; the bits above their highest differing bit are common to
//!    every key, so the first digit starts there. (On uniform floats the top bits are the
//!    exponent's, which a fixed first digit would spend on a handful of bins.)
//! 2. **Narrow.** While the keys that could be among the `k` best outnumber the sort's
//!    `32·R` slots (`R` the smallest power of two with `32·R ≥ k`), the warp counts the next
//!    [`DIGIT_BITS`] bits of the candidates into its own histogram in shared memory (runs of
//!    equal digits added with one atomic) and a warp scan over the bins picks the digit of the
//!    `k`-th best. No block barrier anywhere: the warps of a block never wait for each other.
//! 3. **Gather** in column order with ballots: every key better than the chosen prefix, and
//!    the keys sharing it (all of them, or, when every bit is chosen and its ties still
//!    overflow the slots, the first ties by column). Slots follow from the ballots, so no
//!    atomics and the ties are the lowest columns.
//! 4. **Sort** the slots in registers ([`sort_runs`]) by (rank, column) and write the first
//!    `k`: the key read back from the row (bit for bit), its column (or `indices_in`).
//!
//! Rows and outputs are laid out as in [`RowsParams`] with one part per row
//! (`blocks_per_row = 1`; `warps_per_part` is ignored): warp `w` of block `b` takes row
//! `4b + w` and writes its `k` best at `row · k`, padded as there when the row is shorter
//! than `k`.

use crate::device::{self, FULL_WARP, SharedLayout, SharedRegion, SharedSlice};
use crate::key::{Key, OrderedBits};
use crate::params::Order;
use crate::topk::radix::DigitRuns;
use crate::topk::rows::{NO_INDEX, RowsParams, part_at};
use crate::topk::rows_radix::Narrowed;
use crate::warp;
use crate::warp::bitonic::{WarpPairs, sort_runs};

/// Threads per block: four warps, a row each.
pub const WARP_RADIX_THREADS: u32 = 128;
/// Warps per block.
const WARPS: usize = (WARP_RADIX_THREADS / 32) as usize;
/// Keys each lane holds: a row's keys `32·i + lane`.
const ITEMS: usize = 32;
/// The longest row: what a warp's registers hold.
pub const WARP_RADIX_MAX_LEN: u64 = 32 * ITEMS as u64;
/// The largest `k`: the sort's slots in registers (`32·R`, `R ≤ 8`).
pub const WARP_RADIX_MAX_K: u32 = 256;
/// Bits of a histogram pass's digit.
pub const DIGIT_BITS: u32 = 8;
/// Bins of a warp's histogram.
const BINS: usize = 1 << DIGIT_BITS;
/// Consecutive bins each lane sums for the scan.
const BINS_PER_LANE: usize = BINS / 32;
/// Slots per warp: the most the sort takes.
const MAX_SLOTS: usize = WARP_RADIX_MAX_K as usize;

/// Shared memory of `top_k_rows_warp_radix_<key>`: each warp's histogram and slots.
#[derive(Clone, Copy, Debug)]
pub struct WarpRadixLayout<B> {
    /// 2^[`DIGIT_BITS`] counts per warp.
    pub histogram: SharedRegion<u32>,
    /// The gathered ranks, [`WARP_RADIX_MAX_K`] per warp.
    pub bits: SharedRegion<B>,
    /// Their columns.
    pub positions: SharedRegion<u32>,
    /// Bytes to ask for at launch.
    pub bytes: usize,
}

impl<B> WarpRadixLayout<B> {
    /// The layout.
    pub const fn new() -> Self {
        let (layout, histogram) = SharedLayout::new().push::<u32>(WARPS * BINS);
        let (layout, bits) = layout.push::<B>(WARPS * MAX_SLOTS);
        let (layout, positions) = layout.push::<u32>(WARPS * MAX_SLOTS);
        Self { histogram, bits, positions, bytes: layout.bytes() }
    }
}

impl<B> Default for WarpRadixLayout<B> {
    fn default() -> Self {
        Self::new()
    }
}

/// A row's ranks in a warp's registers: rank `i` of lane `l` is column `32·i + l`.
struct RowInRegisters<B> {
    ranks: [B; ITEMS],
    len: u64,
}

impl<B: OrderedBits> RowInRegisters<B> {
    /// Whether rank `i` of this lane is a key of the row.
    #[inline(always)]
    fn holds(&self, i: usize) -> bool {
        ((i * 32) as u64 + device::lane_id() as u64) < self.len
    }

    /// Calls `visit(i, rank)` for each key `i` this lane holds.
    #[inline(always)]
    fn for_each(&self, mut visit: impl FnMut(usize, B)) {
        for i in 0..ITEMS {
            if self.holds(i) {
                visit(i, self.ranks[i]);
            }
        }
    }
}

/// The first narrowing state: the keys' common prefix above their highest differing bit,
/// or every bit chosen when all keys are equal.
///
/// # Safety
/// All 32 lanes call it together; the row holds at least one key.
#[inline(always)]
unsafe fn window<B: OrderedBits>(row: &RowInRegisters<B>) -> Narrowed<B> {
    let (mut lowest, mut highest_complement) = (u64::MAX, u64::MAX);
    row.for_each(|_, rank| {
        lowest = lowest.min(rank.to_u64());
        highest_complement = highest_complement.min(rank.complement().to_u64());
    });
    let lowest = unsafe { warp::reduce_min_u64(lowest) };
    let highest = B::from_u64(unsafe { warp::reduce_min_u64(highest_complement) }).complement().to_u64();
    let shift = u64::BITS - (lowest ^ highest).leading_zeros();
    let prefix = if shift >= u64::BITS { 0 } else { lowest >> shift << shift };
    Narrowed { shift, prefix: B::from_u64(prefix), better: 0, in_prefix: row.len }
}

/// One histogram pass over the candidates (the keys with the prefix): the next digit of the
/// `wanted`-th best rank. Every lane returns the same state.
///
/// # Safety
/// All 32 lanes call it together; `narrowed.shift > 0`, `better < wanted ≤ better +
/// in_prefix`; `histogram` is this warp's [`BINS`].
#[inline(always)]
unsafe fn narrow<B: OrderedBits>(
    row: &RowInRegisters<B>,
    histogram: &SharedSlice<u32>,
    base: usize,
    narrowed: Narrowed<B>,
    wanted: u64,
) -> Narrowed<B> {
    let lane = device::lane_id() as usize;
    // The last pass's scan has read the bins.
    unsafe { device::sync_warp(FULL_WARP) };
    for j in 0..BINS_PER_LANE {
        unsafe { histogram.store(base + j * 32 + lane, 0) };
    }
    unsafe { device::sync_warp(FULL_WARP) };

    let digit_shift = narrowed.shift.saturating_sub(DIGIT_BITS);
    let digit_mask = (1u32 << (narrowed.shift - digit_shift)) - 1;
    let mut runs = DigitRuns::new();
    row.for_each(|_, rank| {
        if narrowed.has_prefix(rank) {
            unsafe { runs.add(histogram, base as u32 + (rank.shr(digit_shift).low_u32() & digit_mask)) };
        }
    });
    unsafe {
        runs.flush(histogram);
        device::sync_warp(FULL_WARP);
    }

    // Lane l sums bins 8l .. 8l + 8; the lane whose bins hold the wanted-th tells the rest.
    let mut counts = [0u32; BINS_PER_LANE];
    for (j, count) in counts.iter_mut().enumerate() {
        *count = unsafe { histogram.load(base + lane * BINS_PER_LANE + j) };
    }
    let sum: u32 = counts.iter().sum();
    let before = (unsafe { warp::inclusive_scan_add_u32(sum) } - sum) as u64;
    let need = wanted - narrowed.better;
    let holds_it = before < need && need <= before + sum as u64;
    let (mut digit, mut before_digit, mut in_digit) = (0u32, before as u32, 0u32);
    if holds_it {
        for (j, &count) in counts.iter().enumerate() {
            if need <= (before_digit + count) as u64 {
                (digit, in_digit) = ((lane * BINS_PER_LANE + j) as u32, count);
                break;
            }
            before_digit += count;
        }
    }
    let source = unsafe { device::ballot(FULL_WARP, holds_it) }.trailing_zeros();
    let digit = unsafe { device::shfl_idx_u32(FULL_WARP, digit, source) } as u64;
    let before_digit = unsafe { device::shfl_idx_u32(FULL_WARP, before_digit, source) } as u64;
    let in_digit = unsafe { device::shfl_idx_u32(FULL_WARP, in_digit, source) } as u64;
    Narrowed {
        shift: digit_shift,
        prefix: narrowed.prefix.xor(B::from_u64(digit << digit_shift)),
        better: narrowed.better + before_digit,
        in_prefix: in_digit,
    }
}

/// Gathers, in column order, every key ranked below the prefix and the first `region_limit`
/// keys with it into the warp's slots: the better keys at `0 .. better`, the others after.
///
/// # Safety
/// All 32 lanes call it together; `better + region_limit` fits the slots.
#[inline(always)]
unsafe fn gather<B: OrderedBits>(
    row: &RowInRegisters<B>,
    slots: (&SharedSlice<B>, &SharedSlice<u32>),
    base: usize,
    narrowed: Narrowed<B>,
    region_limit: u64,
) {
    let lane = device::lane_id();
    let below_lane = device::lanemask_lt();
    let (mut better_seen, mut region_seen) = (0u64, 0u64);
    for i in 0..ITEMS {
        if (i * 32) as u64 >= row.len {
            break; // the same for every lane
        }
        let rank = row.ranks[i];
        let in_region = row.holds(i) && narrowed.has_prefix(rank);
        // The prefix's lower bits are zero: below it is better than every key with it.
        let better = row.holds(i) && rank < narrowed.prefix;
        let better_votes = unsafe { device::ballot(FULL_WARP, better) };
        let region_votes = unsafe { device::ballot(FULL_WARP, in_region) };
        let slot = if better {
            Some(better_seen + (better_votes & below_lane).count_ones() as u64)
        } else if in_region {
            let tie = region_seen + (region_votes & below_lane).count_ones() as u64;
            (tie < region_limit).then_some(narrowed.better + tie)
        } else {
            None
        };
        if let Some(slot) = slot {
            unsafe {
                slots.0.store(base + slot as usize, rank);
                slots.1.store(base + slot as usize, i as u32 * 32 + lane);
            }
        }
        better_seen += better_votes.count_ones() as u64;
        region_seen += region_votes.count_ones() as u64;
    }
    unsafe { device::sync_warp(FULL_WARP) };
}

/// Sorts the `count` gathered pairs in `32·R` registers and writes the row's `k` best
/// (padding past `count`).
///
/// # Safety
/// All 32 lanes call it together; `count ≤ 32·R`, `k ≤ 32·R`; outputs as [`RowsParams`].
#[inline(always)]
unsafe fn sort_and_write<K: Key, const R: usize>(
    params: &RowsParams<K>,
    slots: (&SharedSlice<K::Bits>, &SharedSlice<u32>),
    base: usize,
    count: u64,
    (row_index, row_start): (u64, u64),
    largest: bool,
) {
    let lane = device::lane_id() as usize;
    let mut pairs = WarpPairs::<K::Bits, R>::padding();
    for r in 0..R {
        let slot = r * 32 + lane;
        if (slot as u64) < count {
            unsafe {
                pairs.bits[r] = slots.0.load(base + slot);
                pairs.positions[r] = slots.1.load(base + slot);
            }
        }
    }
    unsafe { sort_runs(&mut pairs, 0, 32 * R) };

    let k = params.k as u64;
    let out_start = row_index * k;
    let padding_key = if largest { K::LOWEST } else { K::HIGHEST };
    for r in 0..R {
        let slot = (r * 32 + lane) as u64;
        if slot < k {
            let (key, index) = if slot >= count {
                (padding_key, NO_INDEX)
            } else {
                let at = row_start + pairs.positions[r] as u64;
                let index = if params.indices_in.is_null() {
                    pairs.positions[r] as u64
                } else {
                    unsafe { params.indices_in.read(at) }
                };
                (unsafe { params.keys_in.read(at) }, index)
            };
            unsafe {
                params.keys_out.write(out_start + slot, key);
                params.indices_out.write(out_start + slot, index);
            }
        }
    }
}

/// The `top_k_rows_warp_radix_<key>` kernel: warp `w` of block `b` writes the `k` best of row
/// `4b + w` (module docs).
///
/// # Safety
/// [`WARP_RADIX_THREADS`] threads, [`WarpRadixLayout::bytes`] of shared memory,
/// `⌈rows / 4⌉` blocks; rows of at most [`WARP_RADIX_MAX_LEN`] keys; `1 ≤ k ≤`
/// [`WARP_RADIX_MAX_K`]; `blocks_per_row = 1`; buffers as [`RowsParams`] documents.
#[inline(always)]
pub unsafe fn select_rows_warp_radix<K: Key>(params: RowsParams<K>) {
    let warp = device::warp_id() as usize;
    let row_index = device::block_idx_x() as u64 * WARPS as u64 + warp as u64;
    if row_index >= params.rows {
        return; // the whole warp: nothing below waits for the block
    }
    // One part per row (the contract), so the part is the whole row.
    let part = unsafe { part_at(&params, row_index) };
    let (row_start, len) = (part.row_start, part.end - part.begin);
    let largest = Order::from_raw(params.order) == Order::Largest;
    let flip = if largest { K::Bits::MAX } else { K::Bits::MIN };
    let lane = device::lane_id() as u64;
    let mut row = RowInRegisters { ranks: [K::Bits::MAX; ITEMS], len };
    for i in 0..ITEMS {
        let column = (i * 32) as u64 + lane;
        if column < len {
            row.ranks[i] = unsafe { params.keys_in.read(row_start + column) }.to_ordered().xor(flip);
        }
    }

    let layout = WarpRadixLayout::<K::Bits>::new();
    let (histogram, bits, positions) =
        unsafe { (layout.histogram.bind(), layout.bits.bind(), layout.positions.bind()) };
    let slots_base = warp * MAX_SLOTS;
    let k = params.k as u64;
    let wanted = k.min(len);
    // Sort registers per lane: the smallest power of two with 32·R ≥ k.
    let registers = k.div_ceil(32).next_power_of_two();
    let mut count = 0;
    if wanted > 0 {
        let capacity = 32 * registers;
        let mut narrowed = unsafe { window(&row) };
        while narrowed.candidates() > capacity && narrowed.shift > 0 {
            narrowed = unsafe { narrow(&row, &histogram, warp * BINS, narrowed, wanted) };
        }
        // Every key with the prefix fits, or (all bits chosen) only its first ties do.
        let region_limit =
            if narrowed.candidates() <= capacity { narrowed.in_prefix } else { wanted - narrowed.better };
        unsafe { gather(&row, (&bits, &positions), slots_base, narrowed, region_limit) };
        count = narrowed.better + region_limit;
    }
    let slots = (&bits, &positions);
    let row_at = (row_index, row_start);
    unsafe {
        match registers {
            1 => sort_and_write::<K, 1>(&params, slots, slots_base, count, row_at, largest),
            2 => sort_and_write::<K, 2>(&params, slots, slots_base, count, row_at, largest),
            4 => sort_and_write::<K, 4>(&params, slots, slots_base, count, row_at, largest),
            _ => sort_and_write::<K, 8>(&params, slots, slots_base, count, row_at, largest),
        }
    }
}
