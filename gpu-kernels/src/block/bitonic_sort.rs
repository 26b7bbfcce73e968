//! Block-wide bitonic sort of up to 2048 key + position pairs: registers first, shared
//! memory only for the largest merges.
//!
//! A block of [`SORT_THREADS`] threads holds 2048 slots, [`PAIRS_PER_THREAD`] per thread in
//! registers (each warp 256 slots in the lane-stride layout of [`crate::warp::bitonic`]).
//! The slots hold one segment of up to 2048 keys, or [`segments_per_block`] shorter segments
//! side by side, each padded to `capacity` (the next power of two).
//!
//! 1. Load: slot `s` holds key `s % capacity` of the block's segment `s / capacity`, encoded
//!    as ordered bits (complemented for "largest first", so the network always sorts
//!    ascending) next to its position; slots past a segment's end get `MAX` bits and a
//!    position past every real one, so padding sorts last even behind real `MAX` keys.
//! 2. Merge sizes up to 256 run inside each warp: in-register compare-exchanges for strides
//!    ≥ 32, shuffles below (no shared memory, no barrier).
//! 3. Merge sizes 512–2048 (only for segments longer than 256): the stages of stride ≥ 256
//!    in shared memory, one barrier each, then the strides 128…1 back in registers.
//! 4. Store from registers: the key gathered from its input position (so NaN payloads and
//!    `-0.0` come back bit for bit) and its index.
//!
//! Pairs compare by (bits, position), so the sort is stable: equal keys keep their input
//! order, in both orders. For 2048 slots that is 6 shared-memory stages and 10 barriers
//! instead of the 66 of a network run entirely in shared memory.
//!
//! [`sort_keys`] runs the same network on bits alone, for a sort whose positions no one
//! reads (SampleSelect's sample), in a block of any number of warps: half the shuffles and
//! shared-memory traffic, and with 1024 threads of two keys each, four times the warps to
//! hide each stage's latency (the sample kernel's 2048 keys: 24 → 10–17 µs on an H100).
//! [`sort_segment_keys`] (the `block_sort_keys_<key>` kernel) runs it over whole segments,
//! as [`sort_segments`] does, for sorts that carry no index (the rows of quantiles), and
//! writes each key back from its bits instead of gathering it from its input position.

use crate::device::{self, SharedLayout, SharedRegion, SharedSlice};
use crate::key::{Key, OrderedBits};
use crate::params::{BlockSortParams, Order};
use crate::thread::slot_after;
use crate::warp::bitonic::{WarpPairs, merge_stages_by, sort_runs_by};

/// The longest segment one block sorts, and the slots every block holds.
pub const MAX_BLOCK_SORT_LEN: u32 = 2048;

/// Threads of every sort block.
pub const SORT_THREADS: u32 = 256;

/// Pairs each thread holds in registers.
pub const PAIRS_PER_THREAD: usize = (MAX_BLOCK_SORT_LEN / SORT_THREADS) as usize;

/// Slots of one warp: merge sizes up to this run without shared memory.
const WARP_SLOTS: usize = 32 * PAIRS_PER_THREAD;

/// Slots the network sorts for a segment of `segment_len` keys: the next power of two, at
/// least 2.
pub const fn sort_capacity(segment_len: u32) -> u32 {
    let capacity = segment_len.next_power_of_two();
    if capacity < 2 { 2 } else { capacity }
}

/// Segments one block sorts side by side: as many as fill [`MAX_BLOCK_SORT_LEN`] slots.
pub const fn segments_per_block(segment_len: u32) -> u32 {
    MAX_BLOCK_SORT_LEN / sort_capacity(segment_len)
}

/// The shared memory of the sort, for keys carried as `B` bits: the block's 2048 slots when
/// segments are longer than one warp's 256 slots, nothing otherwise.
#[derive(Clone, Copy, Debug)]
pub struct BlockSortLayout<B> {
    /// Encoded keys, one per slot.
    pub bits: SharedRegion<B>,
    /// Input position of each slot's key.
    pub positions: SharedRegion<u32>,
    /// Bytes to ask for at launch.
    pub bytes: usize,
}

impl<B> BlockSortLayout<B> {
    /// The layout for a block's segments of `segment_len` keys.
    pub const fn new(segment_len: u32) -> Self {
        Self::after(SharedLayout::new(), segment_len).1
    }

    /// The layout placed after the regions of `layout`, for kernels that sort as one step
    /// among others; also returns the layout extended by it.
    pub const fn after(layout: SharedLayout, segment_len: u32) -> (SharedLayout, Self) {
        let slots =
            if sort_capacity(segment_len) as usize > WARP_SLOTS { MAX_BLOCK_SORT_LEN as usize } else { 0 };
        let (layout, bits) = layout.push::<B>(slots);
        let (layout, positions) = layout.push::<u32>(slots);
        (layout, Self { bits, positions, bytes: layout.bytes() })
    }

    /// The layout of [`sort_segment_keys`] for segments of `segment_len` keys: the block's
    /// 2048 slots' bits when segments are longer than one warp's 256 slots, nothing
    /// otherwise; no positions.
    pub const fn keys_only(segment_len: u32) -> Self {
        let slots =
            if sort_capacity(segment_len) as usize > WARP_SLOTS { MAX_BLOCK_SORT_LEN as usize } else { 0 };
        let (layout, bits) = SharedLayout::new().push::<B>(slots);
        let (layout, positions) = layout.push::<u32>(0);
        Self { bits, positions, bytes: layout.bytes() }
    }

    /// The layout of [`sort_keys`] for `len` keys, after the regions of `layout`: the slots'
    /// bits, and no positions.
    pub const fn keys_after(layout: SharedLayout, len: u32) -> (SharedLayout, Self) {
        let (layout, bits) = layout.push::<B>(sort_capacity(len) as usize);
        let (layout, positions) = layout.push::<u32>(0);
        (layout, Self { bits, positions, bytes: layout.bytes() })
    }
}

/// One compare-exchange stage over all slots in shared memory: stride `stride` of merge
/// size `size`, each run of `run_len` slots ending ascending (module docs of
/// [`crate::warp::bitonic`]).
///
/// # Safety
/// *Block-wide*: every thread calls it with the same arguments, after a barrier that orders
/// the previous writes of the slots. Ends with a barrier.
pub unsafe fn shared_stage<B: OrderedBits>(
    bits: SharedSlice<B>,
    positions: SharedSlice<u32>,
    size: usize,
    stride: usize,
    run_len: usize,
) {
    unsafe { shared_stage_by::<B, true>(bits, positions, size, stride, run_len) }
}

/// [`shared_stage`], by (bits, position) when `TIES`, by bits alone otherwise (the
/// positions are then neither read nor written).
///
/// # Safety
/// As [`shared_stage`].
unsafe fn shared_stage_by<B: OrderedBits, const TIES: bool>(
    bits: SharedSlice<B>,
    positions: SharedSlice<u32>,
    size: usize,
    stride: usize,
    run_len: usize,
) {
    let pairs = bits.len() / 2;
    let threads = device::block_dim_x() as usize;
    let mut pair = device::thread_idx_x() as usize;
    while pair < pairs {
        let low = 2 * pair - (pair & (stride - 1));
        let high = low + stride;
        let ascending = size == run_len || low & size == 0;
        unsafe {
            let (bits_low, bits_high) = (bits.load(low), bits.load(high));
            let (position_low, position_high) =
                if TIES { (positions.load(low), positions.load(high)) } else { (0, 0) };
            if slot_after::<B, TIES>(bits_low, position_low, bits_high, position_high) == ascending {
                bits.store(low, bits_high);
                bits.store(high, bits_low);
                if TIES {
                    positions.store(low, position_high);
                    positions.store(high, position_low);
                }
            }
        }
        pair += threads;
    }
    unsafe { device::sync_threads() };
}

/// Sorts the block's slots, held in registers `R` to a thread: slot `32·(R·warp + r) +
/// lane` in register `r` of that lane, `256·R` slots in all (2048 with
/// [`PAIRS_PER_THREAD`], as [`sort_segments`] holds them), as runs of `capacity` slots,
/// each ascending by (bits, position): the block sort's network, for kernels that load
/// their own slots (the bitonic top-k sorts its tiles with it). A kernel that sorts fewer than
/// 2048 candidates may hold them in fewer registers a thread: all warps then share the
/// merges in registers, and the shared-memory stages touch only `256·R` slots (the radix
/// rows kernel sorts up to 1024 candidates with `R = 4`, 64 with `R = 2`).
///
/// # Safety
/// *Block-wide*, [`SORT_THREADS`] threads; `R` a power of two from 1 to
/// [`PAIRS_PER_THREAD`]; `capacity` a power of two from 2 to `256·R`; `layout` made by
/// [`BlockSortLayout::new`] for segments of `capacity` when `R =` [`PAIRS_PER_THREAD`],
/// for segments of 2048 otherwise.
#[inline(always)]
pub unsafe fn sort_slots<B: OrderedBits, const R: usize>(
    pairs: &mut WarpPairs<B, R>,
    capacity: usize,
    layout: &BlockSortLayout<B>,
) {
    unsafe { sort_slots_by::<B, R, true>(pairs, capacity, layout) }
}

/// Sorts the bits of the block's slots, held as [`sort_slots`] holds them, by bits alone:
/// the positions are neither read nor moved (equal keys end in any order). For a block of
/// any whole number of warps up to 1024 threads: SampleSelect sorts its 2048 samples with
/// 1024 threads and `R = 2`, where 256 threads with `R = 8` wait on their own latencies.
///
/// # Safety
/// *Block-wide*; `R` a power of two; `capacity` a power of two from 2 to the block's
/// `32·R·warps` slots; `layout` with at least that many slots.
#[inline(always)]
pub unsafe fn sort_keys<B: OrderedBits, const R: usize>(
    pairs: &mut WarpPairs<B, R>,
    capacity: usize,
    layout: &BlockSortLayout<B>,
) {
    unsafe { sort_slots_by::<B, R, false>(pairs, capacity, layout) }
}

/// [`sort_slots`] (`TIES`) or [`sort_keys`].
#[inline(always)]
unsafe fn sort_slots_by<B: OrderedBits, const R: usize, const TIES: bool>(
    pairs: &mut WarpPairs<B, R>,
    capacity: usize,
    layout: &BlockSortLayout<B>,
) {
    let warp_slots = 32 * R;
    let lane = device::lane_id() as usize;
    let warp_base = device::warp_id() as usize * warp_slots;
    unsafe { sort_runs_by::<B, R, TIES>(pairs, warp_base, capacity) };

    if capacity > warp_slots {
        let slots = warp_slots * (device::block_dim_x() / 32) as usize;
        let (bits, positions) =
            unsafe { (layout.bits.bind().prefix(slots), layout.positions.bind().prefix(slots)) };
        let mut size = 2 * warp_slots;
        while size <= capacity {
            for r in 0..R {
                let slot = warp_base + r * 32 + lane;
                unsafe {
                    bits.store(slot, pairs.bits[r]);
                    if TIES {
                        positions.store(slot, pairs.positions[r]);
                    }
                }
            }
            unsafe { device::sync_threads() };
            let mut stride = size / 2;
            while stride >= warp_slots {
                unsafe { shared_stage_by::<B, TIES>(bits, positions, size, stride, capacity) };
                stride /= 2;
            }
            // Each thread reloads the slots it stored, so no barrier is needed before the
            // next store of them.
            for r in 0..R {
                let slot = warp_base + r * 32 + lane;
                unsafe {
                    pairs.bits[r] = bits.load(slot);
                    if TIES {
                        pairs.positions[r] = positions.load(slot);
                    }
                }
            }
            unsafe { merge_stages_by::<B, R, TIES>(pairs, warp_base, size, warp_slots / 2, capacity) };
            size *= 2;
        }
    }
}

/// The `block_sort_<key>` kernel: block `b` sorts segments `b·spb .. (b+1)·spb` of
/// `params`, spb = [`segments_per_block`].
///
/// # Safety
/// Launched with `grid.x` = `segments.div_ceil(spb)`, [`SORT_THREADS`] threads and
/// [`BlockSortLayout::bytes`] of shared memory, on valid buffers of the documented shapes.
pub unsafe fn sort_segments<K: Key>(params: BlockSortParams<K>) {
    let segment_len = params.segment_len as usize;
    let capacity = sort_capacity(params.segment_len) as usize;
    let largest_first = Order::from_raw(params.order) == Order::Largest;
    let first_segment = device::block_idx_x() as u64 * segments_per_block(params.segment_len) as u64;
    let lane = device::lane_id() as usize;
    let warp_base = device::warp_id() as usize * WARP_SLOTS;
    // Slot `s` holds key `s % capacity` of the block's segment `s / capacity`; this is where
    // that segment starts in the input, or `None` past the last segment.
    let segment_start = |slot: usize| {
        let segment = first_segment + (slot / capacity) as u64;
        (segment < params.segments as u64).then_some(segment * segment_len as u64)
    };

    let mut pairs = WarpPairs::<K::Bits, PAIRS_PER_THREAD>::padding();
    for r in 0..PAIRS_PER_THREAD {
        let slot = warp_base + r * 32 + lane;
        let key = slot % capacity;
        pairs.positions[r] = key as u32;
        if let Some(start) = segment_start(slot)
            && key < segment_len
        {
            let ordered = unsafe { params.keys_in.read(start + key as u64) }.to_ordered();
            pairs.bits[r] = if largest_first { ordered.complement() } else { ordered };
        }
    }
    let layout = BlockSortLayout::<K::Bits>::new(params.segment_len);
    unsafe { sort_slots(&mut pairs, capacity, &layout) };

    for r in 0..PAIRS_PER_THREAD {
        let slot = warp_base + r * 32 + lane;
        let key = slot % capacity;
        if let Some(start) = segment_start(slot)
            && key < segment_len
        {
            let position = pairs.positions[r] as u64;
            let out = start + key as u64;
            unsafe {
                params.keys_out.write(out, params.keys_in.read(start + position));
                if !params.indices_out.is_null() {
                    let index = if params.indices_in.is_null() {
                        position
                    } else {
                        params.indices_in.read(start + position)
                    };
                    params.indices_out.write(out, index);
                }
            }
        }
    }
}

/// The `block_sort_keys_<key>` kernel: [`sort_segments`] of keys alone, for a sort whose
/// positions no one reads (the rows of a multiselect or of quantiles). The network runs on
/// the keys' ordered bits only (half the shuffles and shared-memory traffic, fewer
/// registers) and each key is written back from its bits, not gathered from its input
/// position: equal keys are the same bits, so the result is the stable sort's, except that
/// every NaN comes back as the canonical quiet NaN ([`Key::from_ordered`]).
///
/// # Safety
/// As [`sort_segments`] (the indices unused), with [`BlockSortLayout::keys_only`] of shared
/// memory.
pub unsafe fn sort_segment_keys<K: Key>(params: BlockSortParams<K>) {
    let segment_len = params.segment_len as usize;
    let capacity = sort_capacity(params.segment_len) as usize;
    let largest_first = Order::from_raw(params.order) == Order::Largest;
    let first_segment = device::block_idx_x() as u64 * segments_per_block(params.segment_len) as u64;
    let lane = device::lane_id() as usize;
    let warp_base = device::warp_id() as usize * WARP_SLOTS;
    // As in `sort_segments`: where slot `slot`'s segment starts in the input, if it is one.
    let segment_start = |slot: usize| {
        let segment = first_segment + (slot / capacity) as u64;
        (segment < params.segments as u64).then_some(segment * segment_len as u64)
    };
    // Largest first: the complemented bits sort ascending, and are complemented back.
    let flip = |bits: K::Bits| if largest_first { bits.complement() } else { bits };

    let mut pairs = WarpPairs::<K::Bits, PAIRS_PER_THREAD>::padding();
    for r in 0..PAIRS_PER_THREAD {
        let slot = warp_base + r * 32 + lane;
        let key = slot % capacity;
        if let Some(start) = segment_start(slot)
            && key < segment_len
        {
            pairs.bits[r] = flip(unsafe { params.keys_in.read(start + key as u64) }.to_ordered());
        }
    }
    let layout = BlockSortLayout::<K::Bits>::keys_only(params.segment_len);
    unsafe { sort_keys(&mut pairs, capacity, &layout) };

    // Padding (`MAX` bits) sorts after every key, or ties with keys of `MAX` bits, which are
    // the same: each segment's first `segment_len` slots are its keys in order.
    for r in 0..PAIRS_PER_THREAD {
        let slot = warp_base + r * 32 + lane;
        let key = slot % capacity;
        if let Some(start) = segment_start(slot)
            && key < segment_len
        {
            unsafe { params.keys_out.write(start + key as u64, K::from_ordered(flip(pairs.bits[r]))) };
        }
    }
}
