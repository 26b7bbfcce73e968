//! Batched top-k of short rows by radix selection, a warp per row: the `k` best of every row
//! of at most [`WARP_RADIX_MAX_LEN`] keys, for `k` up to [`WARP_RADIX_MAX_K`].
//!
//! On short rows a queue pays for its warm-up: most of a row of a thousand keys enters a
//! queue of a hundred, and each entry costs merges; the block radix kernel
//! ([`crate::topk::rows_radix`]) pays block barriers and a sort of the whole row. Here a warp
//! reads its row once into registers (`ITEMS` keys per lane, lane stride) and works there.
//! A kernel per row length ([`WARP_RADIX_ROW_LENGTHS`]: 128, 256, 512 and 1024 keys, 4 to 32
//! keys a lane): every loop below runs over a lane's `ITEMS` registers, so a row of 128 keys
//! in the kernel for 1024 spent eight times the instructions it needs, and the registers of
//! 32 keys a lane let only four blocks onto a multiprocessor.
//!
//! With `k = 1` the warp takes the minimum of (rank, column) over its registers and two
//! warp reductions: no histogram, no sort. Otherwise:
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
//!    the keys sharing it (all of them, or, when every bit of the key is chosen and its ties
//!    still overflow the slots, the first ties by column). Slots follow from the ballots, so
//!    no atomics and the ties are the lowest columns. (16-bit keys rank as 32-bit words
//!    whose low half is padding, zero in every rank: narrowing stops at the key's bits.)
//! 4. **Sort** the slots in registers ([`sort_runs`]) by (rank, column) and write the first
//!    `k`: the key read back from the row (bit for bit), its column (or `indices_in`).
//!
//! Rows and outputs are laid out as in [`RowsParams`] with one part per row
//! (`blocks_per_row = 1`; `warps_per_part` is ignored): warp `w` of block `b` takes row
//! `4b + w` and writes its `k` best at `row · k`, padded as there when the row is shorter
//! than `k`. As in the queue kernels, keys whose `indices_in` is [`NO_INDEX`] take no part.

use crate::device::{self, FULL_WARP, SharedLayout, SharedRegion, SharedSlice};
use crate::key::{Key, OrderedBits};
use crate::params::Order;
use crate::topk::radix::DigitRuns;
use crate::topk::rows::{NO_INDEX, RowsParams, part_at};
use crate::topk::rows_radix::{Narrowed, order_flip};
use crate::warp;
use crate::warp::bitonic::{WarpPairs, sort_runs};

/// Threads per block: four warps, a row each.
pub const WARP_RADIX_THREADS: u32 = 128;
/// Warps per block.
const WARPS: usize = (WARP_RADIX_THREADS / 32) as usize;
/// The longest row of each kernel (`top_k_rows_warp_radix128`, `…256`, `…512` and
/// `top_k_rows_warp_radix`): `32·ITEMS` for the keys a lane holds, `32·i + lane`.
pub const WARP_RADIX_ROW_LENGTHS: [u64; 4] = [128, 256, 512, 1024];
/// The longest row: what a warp's registers hold.
pub const WARP_RADIX_MAX_LEN: u64 = WARP_RADIX_ROW_LENGTHS[3];
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
struct RowInRegisters<B, const ITEMS: usize> {
    ranks: [B; ITEMS],
    /// Bit `i`: rank `i` of this lane is a key that takes part (within the row, and not
    /// marked [`NO_INDEX`] by the caller's indices).
    taking_part: u32,
    /// The row's columns.
    len: u64,
    /// Keys of the row that take part, over the warp.
    keys: u64,
}

impl<B: OrderedBits, const ITEMS: usize> RowInRegisters<B, ITEMS> {
    /// Reads row `row_start .. row_start + len` of `params`, ranked with `flip`: keys whose
    /// `indices_in` is [`NO_INDEX`] take no part.
    ///
    /// # Safety
    /// All 32 lanes call it together; `len ≤ 32·ITEMS`; buffers as [`RowsParams`].
    #[inline(always)]
    unsafe fn read<K: Key<Bits = B>>(params: &RowsParams<K>, (row_start, len): (u64, u64), flip: B) -> Self {
        let lane = device::lane_id() as u64;
        let mut row = RowInRegisters { ranks: [B::MAX; ITEMS], taking_part: 0, len, keys: len };
        if params.indices_in.is_null() {
            // Straight-line predicated loads, all in flight at once (a test of the caller's
            // index between them made the row of 1024 keys 20 % slower: H200 run 235).
            for i in 0..ITEMS {
                let column = (i * 32) as u64 + lane;
                if column < len {
                    row.ranks[i] = unsafe { params.keys_in.read(row_start + column) }.to_ordered().xor(flip);
                }
            }
            // This lane's columns `32·i + lane` below `len`: the first `held` registers.
            let held = if len > lane { ((len - lane).div_ceil(32)).min(ITEMS as u64) } else { 0 };
            row.taking_part = if held >= 32 { u32::MAX } else { (1u32 << held) - 1 };
        } else {
            for i in 0..ITEMS {
                let column = (i * 32) as u64 + lane;
                if column < len && unsafe { params.indices_in.read(row_start + column) } != NO_INDEX {
                    row.ranks[i] = unsafe { params.keys_in.read(row_start + column) }.to_ordered().xor(flip);
                    row.taking_part |= 1 << i;
                }
            }
            row.keys = unsafe { warp::reduce_add_u32(row.taking_part.count_ones()) } as u64;
        }
        row
    }

    /// Whether rank `i` of this lane is a key that takes part.
    #[inline(always)]
    fn holds(&self, i: usize) -> bool {
        self.taking_part >> i & 1 != 0
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
/// All 32 lanes call it together; at least one key of the row takes part.
#[inline(always)]
unsafe fn window<B: OrderedBits, const ITEMS: usize>(row: &RowInRegisters<B, ITEMS>) -> Narrowed<B> {
    let (mut lowest, mut highest_complement) = (u64::MAX, u64::MAX);
    row.for_each(|_, rank| {
        lowest = lowest.min(rank.to_u64());
        highest_complement = highest_complement.min(rank.complement().to_u64());
    });
    let lowest = unsafe { warp::reduce_min_u64(lowest) };
    let highest = B::from_u64(unsafe { warp::reduce_min_u64(highest_complement) }).complement().to_u64();
    let shift = u64::BITS - (lowest ^ highest).leading_zeros();
    let prefix = if shift >= u64::BITS { 0 } else { lowest >> shift << shift };
    Narrowed { shift, prefix: B::from_u64(prefix), better: 0, in_prefix: row.keys }
}

/// One histogram pass over the candidates (the keys with the prefix): the next digit of the
/// `wanted`-th best rank. Every lane returns the same state.
///
/// # Safety
/// All 32 lanes call it together; `narrowed.shift > 0`, `better < wanted ≤ better +
/// in_prefix`; `histogram` is this warp's [`BINS`].
#[inline(always)]
unsafe fn narrow<B: OrderedBits, const ITEMS: usize>(
    row: &RowInRegisters<B, ITEMS>,
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
unsafe fn gather<B: OrderedBits, const ITEMS: usize>(
    row: &RowInRegisters<B, ITEMS>,
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

    for r in 0..R {
        let slot = (r * 32 + lane) as u64;
        if slot < params.k as u64 {
            let position = (slot < count).then_some(pairs.positions[r]);
            unsafe { write_result(params, row_index, (row_start, position), slot) };
        }
    }
}

/// The best key of the row (lowest column among equal ranks) to `row · k`, for `k = 1`:
/// each lane's best over its registers, then the warp's least rank and, among the lanes
/// holding it, the least column.
///
/// # Safety
/// All 32 lanes call it together; at least one key of the row takes part; outputs as
/// [`RowsParams`].
#[inline(always)]
unsafe fn write_best<K: Key, const ITEMS: usize>(
    params: &RowsParams<K>,
    row: &RowInRegisters<K::Bits, ITEMS>,
    (row_index, row_start): (u64, u64),
) {
    let lane = device::lane_id();
    let (mut best, mut column) = (u64::MAX, None);
    // Columns rise with `i`, so the strict `<` keeps a lane's first of equal ranks. (A rank
    // may be u64::MAX itself: the first key a lane holds is its best so far whatever it is.)
    row.for_each(|i, rank| {
        if column.is_none() || rank.to_u64() < best {
            (best, column) = (rank.to_u64(), Some(i as u32 * 32 + lane));
        }
    });
    let least = unsafe { warp::reduce_min_u64(best) };
    let column = match column {
        Some(column) if best == least => column as u64,
        _ => u64::MAX, // no key here, or none as good as the row's best
    };
    let column = unsafe { warp::reduce_min_u64(column) };
    if lane == 0 {
        unsafe { write_result(params, row_index, (row_start, Some(column as u32)), 0) };
    }
}

/// Writes output slot `slot` of row `row_index`: the key at `position` of the row (read
/// back, bit for bit) and its column (or `indices_in` there), or padding for `None`.
///
/// # Safety
/// `position` within the row; `slot < k`; outputs as [`RowsParams`].
#[inline(always)]
unsafe fn write_result<K: Key>(
    params: &RowsParams<K>,
    row_index: u64,
    (row_start, position): (u64, Option<u32>),
    slot: u64,
) {
    let largest = Order::from_raw(params.order) == Order::Largest;
    let (key, index) = match position {
        None => (if largest { K::LOWEST } else { K::HIGHEST }, NO_INDEX),
        Some(position) => {
            let at = row_start + position as u64;
            let index = if params.indices_in.is_null() {
                position as u64
            } else {
                unsafe { params.indices_in.read(at) }
            };
            (unsafe { params.keys_in.read(at) }, index)
        }
    };
    let out = row_index * params.k as u64 + slot;
    unsafe {
        params.keys_out.write(out, key);
        params.indices_out.write(out, index);
    }
}

/// The body of the `top_k_rows_warp_radix…_<key>` kernels: warp `w` of block `b` writes the
/// `k` best of row `4b + w` (module docs), holding `ITEMS` keys a lane.
///
/// A warp per row, each row's loads in flight at once, and as many warps as the registers
/// allow: tried on the GPU (H200 run 236), warps that took several rows and read the next
/// while working on the current one ran 4–50 % slower on rows of 128 and 256 keys (the loop
/// took their kernels from 62 and 70 registers to 95 and 123: fewer warps in flight).
///
/// # Safety
/// [`WARP_RADIX_THREADS`] threads, [`WarpRadixLayout::bytes`] of shared memory,
/// `⌈rows / 4⌉` blocks; rows of at most `32·ITEMS` keys; `1 ≤ k ≤`
/// [`WARP_RADIX_MAX_K`]; `blocks_per_row = 1`; buffers as [`RowsParams`] documents.
#[inline(always)]
unsafe fn select_rows_in_registers<K: Key, const ITEMS: usize>(params: RowsParams<K>) {
    let row_index = device::block_idx_x() as u64 * WARPS as u64 + device::warp_id() as u64;
    if row_index >= params.rows {
        return; // the whole warp: nothing below waits for the block
    }
    let flip = order_flip::<K>(Order::from_raw(params.order) == Order::Largest);
    let (row, row_start) = unsafe { read_row::<K, ITEMS>(&params, row_index, flip) };
    unsafe { select_row(&params, &row, (row_index, row_start)) };
}

/// Row `row_index` of `params` in the warp's registers, ranked with `flip`, and where it
/// starts.
///
/// # Safety
/// All 32 lanes call it together; `row_index < rows`; as [`select_rows_in_registers`].
#[inline(always)]
unsafe fn read_row<K: Key, const ITEMS: usize>(
    params: &RowsParams<K>,
    row_index: u64,
    flip: K::Bits,
) -> (RowInRegisters<K::Bits, ITEMS>, u64) {
    // One part per row (the contract), so the part is the whole row.
    let part = unsafe { part_at(params, row_index) };
    let (row_start, len) = (part.row_start, part.end - part.begin);
    (unsafe { RowInRegisters::read(params, (row_start, len), flip) }, row_start)
}

/// The `k` best of one row in the warp's registers to the outputs (module docs).
///
/// # Safety
/// All 32 lanes call it together; `row` read by [`RowInRegisters::read`] at `row_start`;
/// as [`select_rows_in_registers`].
#[inline(always)]
unsafe fn select_row<K: Key, const ITEMS: usize>(
    params: &RowsParams<K>,
    row: &RowInRegisters<K::Bits, ITEMS>,
    row_at: (u64, u64),
) {
    let k = params.k as u64;
    if k == 1 && row.keys > 0 {
        return unsafe { write_best(params, row, row_at) };
    }
    let warp = device::warp_id() as usize;
    let layout = WarpRadixLayout::<K::Bits>::new();
    let (histogram, bits, positions) =
        unsafe { (layout.histogram.bind(), layout.bits.bind(), layout.positions.bind()) };
    let slots_base = warp * MAX_SLOTS;
    let wanted = k.min(row.keys);
    // Sort registers per lane: the smallest power of two with 32·R ≥ k.
    let registers = k.div_ceil(32).next_power_of_two();
    let mut count = 0;
    if wanted > 0 {
        let capacity = 32 * registers;
        let mut narrowed = unsafe { window(row) };
        while narrowed.candidates() > capacity && narrowed.bits_left::<K>() {
            narrowed = unsafe { narrow(row, &histogram, warp * BINS, narrowed, wanted) };
        }
        // Every key with the prefix fits, or (all bits chosen) only its first ties do.
        let region_limit =
            if narrowed.candidates() <= capacity { narrowed.in_prefix } else { wanted - narrowed.better };
        unsafe { gather(row, (&bits, &positions), slots_base, narrowed, region_limit) };
        count = narrowed.better + region_limit;
    }
    let slots = (&bits, &positions);
    unsafe {
        match registers {
            1 => sort_and_write::<K, 1>(params, slots, slots_base, count, row_at),
            2 => sort_and_write::<K, 2>(params, slots, slots_base, count, row_at),
            4 => sort_and_write::<K, 4>(params, slots, slots_base, count, row_at),
            _ => sort_and_write::<K, 8>(params, slots, slots_base, count, row_at),
        }
    }
}

macro_rules! warp_radix_kernels {
    ($($name:ident = $items:literal;)*) => {$(
        #[doc = concat!("The body of `top_k_rows_warp_radix…_<key>` for rows of at most ", $items, " × 32 keys.")]
        ///
        /// # Safety
        /// As the module's kernels (rows of at most that length).
        #[inline(always)]
        pub unsafe fn $name<K: Key>(params: RowsParams<K>) {
            unsafe { select_rows_in_registers::<K, $items>(params) }
        }
    )*};
}

warp_radix_kernels! {
    select_rows_warp_radix_128 = 4;
    select_rows_warp_radix_256 = 8;
    select_rows_warp_radix_512 = 16;
    select_rows_warp_radix = 32;
}

const _: () = {
    let lengths = WARP_RADIX_ROW_LENGTHS;
    assert!(lengths[0] == 4 * 32 && lengths[1] == 8 * 32 && lengths[2] == 16 * 32 && lengths[3] == 32 * 32);
};
