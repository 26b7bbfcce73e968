//! Block-wide bitonic sort of up to 2048 key + position pairs in shared memory.
//!
//! Batcher's bitonic network on `capacity` (a power of two) slots per segment; a block
//! sorts [`segments_per_block`] segments side by side (2048 slots in all), so that short
//! segments still fill a block:
//!
//! 1. load the segment, encoding each key as ordered bits (complemented for "largest
//!    first", so the network always sorts ascending) next to its position; pad the slots
//!    past the segment with `MAX` bits and positions past every real one, so the padding
//!    sorts last even after real `MAX` keys;
//! 2. for each merge size `2, 4, …, capacity` and each stride `size/2, …, 1`, every pair
//!    `(low, low + stride)` is compare-exchanged, ascending when bit `size` of `low` is 0
//!    (and always in the last merge, so every segment ends ascending) — one barrier per
//!    stride, `log2(capacity)·(log2(capacity)+1)/2` in all;
//! 3. write the first `segment_len` slots: the key gathered from its input position (so
//!    NaN payloads and `-0.0` come back bit for bit) and its index.
//!
//! Pairs compare by (bits, position), so the sort is stable: equal keys keep their input
//! order, in both orders. It is the base case of the selection algorithms and the host's
//! small-array sort.

use crate::device::{self, SharedLayout, SharedRegion, SharedSlice};
use crate::key::{Key, OrderedBits};
use crate::params::{BlockSortParams, Order};
use crate::thread::pair_after;

/// The longest segment one block sorts: 2048 pairs, 16 KiB (32-bit keys) or 24 KiB (64-bit
/// keys) of shared memory.
pub const MAX_BLOCK_SORT_LEN: u32 = 2048;

/// Slots the network sorts for a segment of `segment_len` keys: the next power of two, at
/// least 2.
pub const fn sort_capacity(segment_len: u32) -> u32 {
    let capacity = segment_len.next_power_of_two();
    if capacity < 2 { 2 } else { capacity }
}

/// Segments one block sorts side by side: as many as fill [`MAX_BLOCK_SORT_LEN`] slots.
pub const fn segments_per_block(segment_len: u32) -> u32 {
    MAX_BLOCK_SORT_LEN.div_ceil(sort_capacity(segment_len))
}

/// Threads per block the host launches for `segments` segments of `segment_len`: one per
/// compare-exchange pair of a block's (non-empty) segments, up to 1024.
pub const fn sort_threads(segment_len: u32, segments: u32) -> u32 {
    let per_block = segments_per_block(segment_len);
    let filled = if segments < per_block { segments } else { per_block };
    let pairs = sort_capacity(segment_len) * filled / 2;
    if pairs > 1024 {
        1024
    } else if pairs == 0 {
        1
    } else {
        pairs
    }
}

/// The shared memory of the sort, for keys carried as `B` bits.
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
        let capacity = (sort_capacity(segment_len) * segments_per_block(segment_len)) as usize;
        let layout = SharedLayout::new();
        let (layout, bits) = layout.push::<B>(capacity);
        let (layout, positions) = layout.push::<u32>(capacity);
        Self { bits, positions, bytes: layout.bytes() }
    }
}

/// Sorts each run of `run_len` consecutive pairs of `bits` and `positions` ascending by
/// (bits, position). `run_len` is a power of two that divides `bits.len()`.
///
/// # Safety
/// *Block-wide*: every thread of the block calls it with the same arguments, after a barrier
/// that follows the writes of the input. Ends with a barrier.
pub unsafe fn sort_pairs_shared<B: OrderedBits>(
    bits: SharedSlice<B>,
    positions: SharedSlice<u32>,
    run_len: usize,
) {
    let capacity = run_len;
    let pairs = bits.len() / 2;
    let first_pair = device::thread_idx_x() as usize;
    let threads = device::block_dim_x() as usize;
    let mut size = 2;
    while size <= capacity {
        let mut stride = size / 2;
        while stride > 0 {
            let mut pair = first_pair;
            while pair < pairs {
                let low = 2 * pair - (pair & (stride - 1));
                let high = low + stride;
                let ascending = size == capacity || low & size == 0;
                unsafe {
                    let (bits_low, position_low) = (bits.load(low), positions.load(low));
                    let (bits_high, position_high) = (bits.load(high), positions.load(high));
                    if pair_after(bits_low, position_low, bits_high, position_high) == ascending {
                        bits.store(low, bits_high);
                        positions.store(low, position_high);
                        bits.store(high, bits_low);
                        positions.store(high, position_low);
                    }
                }
                pair += threads;
            }
            unsafe { device::sync_threads() };
            stride /= 2;
        }
        size *= 2;
    }
}

/// The `block_sort_<key>` kernel: block `b` sorts segments `b·spb .. (b+1)·spb` of
/// `params`, spb = [`segments_per_block`].
///
/// # Safety
/// Launched with `grid.x` = `segments.div_ceil(spb)`, [`sort_threads`] threads (or any
/// count) and [`BlockSortLayout::bytes`] of shared memory, on valid buffers of the
/// documented shapes.
pub unsafe fn sort_segments<K: Key>(params: BlockSortParams<K>) {
    let segment_len = params.segment_len as usize;
    let capacity = sort_capacity(params.segment_len) as usize;
    let layout = BlockSortLayout::<K::Bits>::new(params.segment_len);
    let (bits, positions) = unsafe { (layout.bits.bind(), layout.positions.bind()) };
    let largest_first = Order::from_raw(params.order) == Order::Largest;
    let first_segment = device::block_idx_x() as u64 * segments_per_block(params.segment_len) as u64;
    let threads = device::block_dim_x() as usize;
    // Slot `s` of the block holds key `s % capacity` of the block's segment `s / capacity`;
    // `start` is where that segment begins in the input, or `None` past the last segment.
    let segment_start = |slot: usize| {
        let segment = first_segment + (slot / capacity) as u64;
        (segment < params.segments as u64).then_some(segment * segment_len as u64)
    };

    let mut slot = device::thread_idx_x() as usize;
    while slot < bits.len() {
        let key = slot % capacity;
        let encoded = match segment_start(slot) {
            Some(start) if key < segment_len => {
                let ordered = unsafe { params.keys_in.read(start + key as u64) }.to_ordered();
                if largest_first { ordered.complement() } else { ordered }
            }
            _ => K::Bits::MAX,
        };
        unsafe {
            bits.store(slot, encoded);
            positions.store(slot, key as u32);
        }
        slot += threads;
    }
    unsafe {
        device::sync_threads();
        sort_pairs_shared(bits, positions, capacity);
    }

    let mut slot = device::thread_idx_x() as usize;
    while slot < bits.len() {
        let key = slot % capacity;
        if let Some(start) = segment_start(slot)
            && key < segment_len
        {
            let position = unsafe { positions.load(slot) } as u64;
            let out = start + key as u64;
            unsafe {
                params.keys_out.write(out, params.keys_in.read(start + position));
                let index = if params.indices_in.is_null() {
                    position
                } else {
                    params.indices_in.read(start + position)
                };
                params.indices_out.write(out, index);
            }
        }
        slot += threads;
    }
}
