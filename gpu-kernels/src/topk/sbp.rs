//! Split-bucket partition (SBP) top-k: one kernel per iteration, a tile per block, every
//! block's output at a place known before it runs.
//!
//! Each block of [`SBP_THREADS`] threads reads one tile of [`SBP_TILE`] keys into shared
//! memory as ranks (a later pass packs the valid inputs, skipping each segment's padding), in
//! batches of loads in flight, and reduces it to the candidates for its tile's `k` best. The
//! tile is read from global memory once; every refinement reads shared memory. (A first
//! version held the tile in registers, 32 keys a thread: fully unrolled, its code missed the
//! instruction cache and two blocks per multiprocessor left memory idle while they narrowed,
//! 7–11× the read floor on an H200, run 162.)
//!
//! 1. **Partition** (radix form, `TK_RdSP`). Keys are ranked by their ordered bits
//!    (complemented for "largest", so the best keys have the smallest ranks). A histogram of
//!    the next [`DIGIT_BITS`] bits of the ranks that share the prefix chosen so far (shared
//!    atomics, runs of equal digits added at once), and a scan over its bins picks the bin of
//!    the tile's `k`-th best. The scan merges bins in order and stops at the one that covers
//!    `k` (the paper's control-flow optimisation), and the block narrows again only while the
//!    kept keys, those in better bins and the target bin, number more than the cutoff: the
//!    tile is in shared memory, so narrowing again costs no global read.
//!
//!    Search-tree form (`TK_StSP`, `TK_StSPTC`): a tiny kernel of its own ([`tree`], the
//!    task optimisation) sorts a strided sample of the whole input once and keeps 255 of its
//!    best keys as splitters, spaced so that a tile's `k`-th best falls in a bucket of a few
//!    keys; every block then finds each key's bucket by a binary search of the splitters in
//!    shared memory, counts the buckets and keeps those up to the one that covers `k`. When
//!    those are still more than the cutoff (repeated keys, or a tile unlike the sample) the
//!    block narrows inside the target bucket by radix digits, as above. When the splitters
//!    are all one key (a bucket killer's ties), the first pass ([`partition_tree_first`], a
//!    kernel of its own) keeps only the keys at or below the top splitter as it loads the
//!    tile.
//! 2. **Place.** The kept keys go to the block's segment of the output, `block · cutoff`, in
//!    tile order (each thread marks its chunk's kept ranks in a mask; one block scan of the
//!    counts): so no global prefix sum is needed, and since every pass keeps tile order, the
//!    candidates stay in index order.
//!    The segment's count goes to `counts_out`; the next pass skips the segment's tail (the
//!    padding). When every bit is chosen and the keys equal to the `k`-th best overflow the
//!    cutoff, the first ties in tile order (the lowest indices) fill the `k`.
//!
//! The host iterates on the concatenated segments until one tile remains; that last pass runs
//! with a cutoff of exactly `k` and writes the `k` best, in index order, for the block sort.

use crate::block;
use crate::device::{self, FULL_WARP, SharedLayout, SharedRegion};
use crate::key::{Key, OrderedBits};
use crate::params::{GlobalPtr, Order};
use crate::topk::radix::DigitRuns;
use crate::topk::rows_radix::{self, Narrowed, Ranked, count_digit};
use crate::warp;
use crate::warp::bitonic::WarpPairs;

/// Threads per block of the partition kernel: blocks of 256 threads and a 32 KiB tile (32-bit
/// keys) let four share a multiprocessor, so that some load their tiles while others narrow
/// (the launch bounds of `xtask/src/kernels.rs` keep them to 64 registers); the placement
/// gives each thread a chunk of [`SBP_ITEMS`] packed ranks, one bit each of a mask.
pub const SBP_THREADS: u32 = 256;
/// Ranks per thread in the tile: thread `t` places packed ranks `32·t … 32·t + 31`.
pub const SBP_ITEMS: usize = 32;
/// Keys a block reduces per pass.
pub const SBP_TILE: u64 = SBP_THREADS as u64 * SBP_ITEMS as u64;
/// Bits of a narrowing pass's digit: the rows kernel's, whose histogram pass
/// (`rows_radix::count_digit`) the narrowing shares.
pub const DIGIT_BITS: u32 = rows_radix::DIGIT_BITS;
/// Bins of a narrowing pass.
const BINS: usize = 1 << DIGIT_BITS;
const _: () = assert!(SBP_THREADS == rows_radix::RADIX_ROWS_THREADS, "`count_digit`'s block");
/// Warps per block.
const WARPS: usize = (SBP_THREADS / 32) as usize;
// A thread's chunk of the tile is one 32-bit mask, and lane `l` starts reading it at item `l`.
const _: () = assert!(SBP_ITEMS == 32);
// A later pass's tile spans at most one segment per thread (the scan of their counts).
const _: () = assert!(MAX_SEGMENTS <= SBP_THREADS as usize);
/// The least cutoff of a pass that a later pass reads (so a tile spans at most
/// 256 segments, one per thread).
pub const MIN_SBP_CUTOFF: u32 = 32;
/// Input segments a tile of a later pass spans at most.
const MAX_SEGMENTS: usize = (SBP_TILE / MIN_SBP_CUTOFF as u64) as usize;
/// Splitters of the search tree: 256 buckets.
pub const TREE_SPLITTERS: usize = 255;
/// Buckets of the search tree.
const TREE_BUCKETS: usize = TREE_SPLITTERS + 1;
/// Threads of the tree kernel.
pub const TREE_THREADS: u32 = 1024;
/// Keys the tree kernel samples: one block sort.
pub const TREE_SAMPLE: u64 = 2048;
/// Sampled keys per thread of the tree kernel.
const TREE_KEYS_PER_THREAD: usize = (TREE_SAMPLE / TREE_THREADS as u64) as usize;
/// The largest `k` (the last pass's block sort) and the largest cutoff.
pub const MAX_SBP_K: u32 = 2048;
/// The most keys the tree form's first pass keeps from a tile at load (`load_below_top`): half
/// a tile, whose other half holds their positions.
const MAX_KEPT_BELOW_TOP: usize = SBP_TILE as usize / 2;
// The entries of that pass's scan, one per (item, warp), are one per thread; its
// positions fit 16 bits.
const _: () = assert!(SBP_ITEMS * WARPS == SBP_THREADS as usize && SBP_TILE <= 1 << 16);
// Its per-entry counts fit the segments' region; lane `b` holds item `b`'s ballots.
const _: () = assert!(SBP_ITEMS * WARPS <= MAX_SEGMENTS + 1 && SBP_ITEMS == 32);
/// The largest cutoff: a pass shrinks its input at least fourfold.
pub const MAX_SBP_CUTOFF: u32 = (SBP_TILE / 4) as u32;

/// Parameters of `sbp_partition_<key>` and `sbp_tree_<key>`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct SbpParams<K> {
    /// The pass's input keys: the data, or the previous pass's segments.
    pub keys_in: GlobalPtr<K>,
    /// Their indices, or null for the position (the first pass).
    pub indices_in: GlobalPtr<u64>,
    /// Kept keys per input segment of `cutoff_in`, or null (the first pass: all valid).
    pub counts_in: GlobalPtr<u32>,
    /// Splitter ranks of the search tree (255, ascending), or null for the radix form. The
    /// tree kernel writes them.
    pub splitters: GlobalPtr<u64>,
    /// Block `b` writes its kept keys at `b · cutoff`.
    pub keys_out: GlobalPtr<K>,
    /// Their indices.
    pub indices_out: GlobalPtr<u64>,
    /// Kept keys per block, or null (the last pass).
    pub counts_out: GlobalPtr<u32>,
    /// Inputs of the pass (segments and their padding included).
    pub len: u64,
    /// How many best keys every tile must keep (fewer where a tile holds fewer).
    pub k: u32,
    /// At most this many kept per block, a power of two from `k` up, or exactly `k` in the
    /// last pass.
    pub cutoff: u32,
    /// `log2` of the previous pass's cutoff (unused when `counts_in` is null).
    pub cutoff_in_log2: u32,
    /// [`Order::to_raw`].
    pub order: u32,
    /// Tree kernel: the sample's rank of the top splitter.
    pub tree_top: u32,
    /// Keeps the struct free of implicit padding (set to 0).
    pub reserved: u32,
}

impl<K: Key> SbpParams<K> {
    /// XOR-ed into the ordered bits: all ones for "largest", so the best rank is smallest.
    #[inline(always)]
    fn flip(&self) -> K::Bits {
        match Order::from_raw(self.order) {
            Order::Largest => K::Bits::MAX,
            Order::Smallest => K::Bits::MIN,
        }
    }
}

/// Shared memory of `sbp_partition_<key>`.
#[derive(Clone, Copy, Debug)]
pub struct SbpLayout<B> {
    /// The tile's ranks, the valid inputs packed in tile order.
    pub tile: SharedRegion<B>,
    /// The tree form's first pass, when it keeps at most half a tile (`load_below_top`): the
    /// kept ranks in the tile's first half...
    pub kept_ranks: SharedRegion<B>,
    /// ... and their positions in the tile after them.
    pub kept_positions: SharedRegion<u16>,
    /// Per input segment of the tile: the valid inputs before it (a later pass); in the
    /// tree form's first pass, the kept keys before each (item, warp).
    pub segments: SharedRegion<u32>,
    /// The histogram of the digit (or tree bucket) being narrowed.
    pub histogram: SharedRegion<u32>,
    /// Per-warp sums of the scans.
    pub warp_sums: SharedRegion<u64>,
    /// The chosen bin, the keys in bins before it, its keys, and the tile's valid keys.
    pub choice: SharedRegion<u64>,
    /// The search tree's splitters.
    pub splitters: SharedRegion<B>,
    /// Bytes to ask for at launch.
    pub bytes: usize,
}

impl<B> SbpLayout<B> {
    /// The layout.
    pub const fn new() -> Self {
        let (layout, tile) = SharedLayout::new().push::<B>(SBP_TILE as usize);
        let (kept_ranks, kept_positions) = tile.split::<u16>(MAX_KEPT_BELOW_TOP);
        let (layout, segments) = layout.push::<u32>(MAX_SEGMENTS + 1);
        let (layout, histogram) = layout.push::<u32>(BINS);
        let (layout, warp_sums) = layout.push::<u64>(WARPS);
        let (layout, choice) = layout.push::<u64>(4);
        let (layout, splitters) = layout.push::<B>(TREE_SPLITTERS);
        Self {
            tile,
            kept_ranks,
            kept_positions,
            segments,
            histogram,
            warp_sums,
            choice,
            splitters,
            bytes: layout.bytes(),
        }
    }
}

impl<B> Default for SbpLayout<B> {
    fn default() -> Self {
        Self::new()
    }
}

/// Shared memory of `sbp_tree_<key>`: the block sort's slots.
#[derive(Clone, Copy, Debug)]
pub struct SbpTreeLayout<B> {
    /// The sort's slots (keys only).
    pub sort: block::bitonic_sort::BlockSortLayout<B>,
    /// The sorted sample.
    pub sorted: SharedRegion<B>,
    /// Bytes to ask for at launch.
    pub bytes: usize,
}

impl<B> SbpTreeLayout<B> {
    /// The layout.
    pub const fn new() -> Self {
        let (layout, sort) =
            block::bitonic_sort::BlockSortLayout::keys_after(SharedLayout::new(), TREE_SAMPLE as u32);
        let (layout, sorted) = layout.push::<B>(TREE_SAMPLE as usize);
        Self { sort, sorted, bytes: layout.bytes() }
    }
}

impl<B> Default for SbpTreeLayout<B> {
    fn default() -> Self {
        Self::new()
    }
}

/// The ranks a narrowing pass may count: those inside a tree bucket `(low, high]` (the
/// radix form: every rank).
#[derive(Clone, Copy)]
struct Bucket<B> {
    /// Ranks at or below `low` are better than the bucket (when `has_low`).
    low: B,
    has_low: bool,
    high: B,
}

impl<B: OrderedBits> Bucket<B> {
    fn all() -> Self {
        Self { low: B::MIN, has_low: false, high: B::MAX }
    }
}

/// The tile in shared memory: `len` valid ranks, packed in tile order.
struct Tile<B> {
    ranks: crate::device::SharedSlice<B>,
    len: usize,
    /// The tile position of each rank, when only some of the tile's keys were kept at load
    /// (`load_below_top`).
    positions: Option<crate::device::SharedSlice<u16>>,
}

impl<B: OrderedBits> Ranked<B> for Tile<B> {
    /// [`Tile::visit`] (positions unused: 0).
    #[inline(always)]
    unsafe fn visit_ranks(&self, mut visit: impl FnMut(B, u64)) {
        unsafe { self.visit(|rank| visit(rank, 0)) }
    }
}

impl<B: OrderedBits> Tile<B> {
    /// Calls `visit(rank)` for each of this thread's ranks, strided (packed positions
    /// `thread + 256·i`: a warp reads 32 neighbouring words, no bank conflict), for passes
    /// where the order does not matter.
    #[inline(always)]
    unsafe fn visit(&self, mut visit: impl FnMut(B)) {
        let (mut at, len) = (device::thread_idx_x(), self.len as u32);
        while at < len {
            visit(unsafe { self.ranks.load(at as usize) });
            at += SBP_THREADS;
        }
    }

    /// Calls `visit(j, rank)` for the ranks of this thread's chunk, packed positions
    /// `32·thread + j` (tile order is thread order, then `j`), each lane starting at its own
    /// `j` so that a warp's 32 reads fall in 32 banks.
    #[inline(always)]
    unsafe fn visit_chunk(&self, mut visit: impl FnMut(u32, B)) {
        let (base, lane, len) =
            (device::thread_idx_x() * SBP_ITEMS as u32, device::lane_id(), self.len as u32);
        for step in 0..SBP_ITEMS as u32 {
            let j = (step + lane) % SBP_ITEMS as u32;
            if base + j < len {
                visit(j, unsafe { self.ranks.load((base + j) as usize) });
            }
        }
    }
}

/// Loads the block's tile into shared memory as ranks, the valid inputs packed in tile order
/// (a later pass skips each input segment's padding: its count comes from `counts_in`).
/// Returns the tile. Ends with a barrier.
///
/// # Safety
/// *Block-wide*; as [`partition`].
#[inline(always)]
unsafe fn load<K: Key>(params: &SbpParams<K>, layout: &SbpLayout<K::Bits>, start: u64) -> Tile<K::Bits> {
    let (ranks, segments, warp_sums, choice) = unsafe {
        (layout.tile.bind(), layout.segments.bind(), layout.warp_sums.bind(), layout.choice.bind())
    };
    let thread = device::thread_idx_x() as usize;
    let tile_len = (params.len - start).min(SBP_TILE) as usize;
    let flip = params.flip();
    const BATCH: usize = 32;
    if params.counts_in.is_null() {
        // The first pass: every input valid; BATCH loads in flight per thread.
        let mut base = 0;
        while base < tile_len {
            let mut keys = [K::default(); BATCH];
            for (b, key) in keys.iter_mut().enumerate() {
                let at = base + b * SBP_THREADS as usize + thread;
                if at < tile_len {
                    *key = unsafe { params.keys_in.read(start + at as u64) };
                }
            }
            for (b, key) in keys.iter().enumerate() {
                let at = base + b * SBP_THREADS as usize + thread;
                if at < tile_len {
                    unsafe { ranks.store(at, key.to_ordered().xor(flip)) };
                }
            }
            base += BATCH * SBP_THREADS as usize;
        }
        unsafe { device::sync_threads() };
        return Tile { ranks, len: tile_len, positions: None };
    }
    // A later pass: the segments' valid counts, scanned, place each valid input.
    let log2 = params.cutoff_in_log2;
    let segment_count = tile_len.div_ceil(1 << log2);
    let first_segment = start >> log2;
    let count = if thread < segment_count {
        u64::from(unsafe { params.counts_in.read(first_segment + thread as u64) })
    } else {
        0
    };
    let before = unsafe { block::scan::exclusive_scan_add_u64(count, &warp_sums) };
    if thread < segment_count {
        unsafe { segments.store(thread, before as u32) };
    }
    if thread == SBP_THREADS as usize - 1 {
        unsafe {
            choice.store(3, before + count);
            segments.store(segment_count, (before + count) as u32);
        }
    }
    unsafe { device::sync_threads() };
    let mut at = thread;
    while at < tile_len {
        let (segment, slot) = (at >> log2, at & ((1 << log2) - 1));
        let packed = unsafe { segments.load(segment) } as usize;
        if packed + slot < unsafe { segments.load(segment + 1) } as usize {
            let key = unsafe { params.keys_in.read(start + at as u64) };
            unsafe { ranks.store(packed + slot, key.to_ordered().xor(flip)) };
        }
        at += SBP_THREADS as usize;
    }
    let len = unsafe { choice.load(3) } as usize;
    unsafe { device::sync_threads() };
    Tile { ranks, len, positions: None }
}

/// Items `first … first + N − 1` of the thread (tile position `256·b + thread` for item `b`,
/// those below `items`), read and compared with the top splitter: bit `b` of the two words
/// set when item `b` is better than it / equal to it.
///
/// # Safety
/// As [`load_below_top`]; `first + N ≤ 32`.
#[inline(always)]
unsafe fn vote_on_items<K: Key, const N: usize>(
    params: &SbpParams<K>,
    start: u64,
    thread: usize,
    items: u32,
    top: K::Bits,
    first: usize,
) -> (u32, u32) {
    let mut keys = [K::default(); N];
    for (i, key) in keys.iter_mut().enumerate() {
        if ((first + i) as u32) < items {
            *key =
                unsafe { params.keys_in.read(start + ((first + i) * SBP_THREADS as usize + thread) as u64) };
        }
    }
    let flip = params.flip();
    let (mut better, mut tied) = (0u32, 0u32);
    for (i, key) in keys.iter().enumerate() {
        let valid = ((first + i) as u32) < items;
        let rank = key.to_ordered().xor(flip);
        better |= u32::from(valid && rank < top) << (first + i);
        tied |= u32::from(valid && rank == top) << (first + i);
    }
    (better, tied)
}

/// The tree form's first pass: loads the tile and keeps in shared memory only its keys at or
/// below the top splitter (`wanted` of a tile lie there but for a tile unlike the sample;
/// the splitters cover a small multiple of that, so most keys are only compared and
/// dropped): every key better than the top splitter and the first `wanted` equal to it
/// (ties past those cannot be among the tile's `wanted` best), in tile order, with their
/// positions. So every later step of the pass reads those few, and the bucket killer's ties
/// cost a compare each. Order is kept without atomics: each warp votes on each of its items,
/// one block scan of the (item, warp) counts places them. Returns `None`, having kept
/// nothing, when fewer than `wanted` keys are at or below the top splitter (the tile's best
/// lie in the catch-all bucket) or more than [`MAX_KEPT_BELOW_TOP`] would be kept: the
/// caller loads the whole tile then. Ends with a barrier.
///
/// # Safety
/// *Block-wide*; as [`partition`], in its first pass with splitters; `wanted` at most the
/// tile's keys.
#[inline(always)]
unsafe fn load_below_top<K: Key>(
    params: &SbpParams<K>,
    layout: &SbpLayout<K::Bits>,
    start: u64,
    wanted: u64,
) -> Option<Tile<K::Bits>> {
    let (ranks, positions, before_entry, warp_sums, choice) = unsafe {
        (
            layout.kept_ranks.bind(),
            layout.kept_positions.bind(),
            layout.segments.bind(),
            layout.warp_sums.bind(),
            layout.choice.bind(),
        )
    };
    let (thread, lane, warp) =
        (device::thread_idx_x() as usize, device::lane_id() as usize, device::warp_id() as usize);
    let tile_len = (params.len - start).min(SBP_TILE) as usize;
    let flip = params.flip();
    let top = K::Bits::from_u64(unsafe { params.splitters.read(TREE_SPLITTERS as u64 - 1) });
    // Item `b` of thread `t` is tile position `256·b + t`: entry `8·b + warp` covers 32
    // neighbouring positions, and entries in order are tile order. The thread's items inside
    // the tile (all but in a last, partial tile) are its first `items`: one 32-bit compare
    // with a constant per item (testing 64-bit positions kept them live, and spilled).
    let items = (tile_len as u32).saturating_sub(thread as u32).div_ceil(SBP_THREADS);
    // Bit `b`: item `b` is better than the top splitter / equal to it. Transposed across
    // the warp, lane `b` holds item `b`'s ballots (bit `l`: lane `l`'s item), and their
    // counts (packed: a tile's counts fit 16 bits). (Ballots with a select a lane and item
    // kept the 64 ballots live: 128 bytes of spills.) 64-bit keys take their items in four
    // quarters (all 32 in flight spilled at their 80 registers, and so did halves of 16 with
    // 64-bit integers); narrower keys all at once. Each part is a fixed array read in plain
    // loops, which unroll fully and keep the keys in registers (take/skip iterators over one
    // array of 32 left it in local memory).
    let (mut better_bits, mut tied_bits) = (0, 0);
    if size_of::<K>() == 8 {
        const QUARTER: usize = SBP_ITEMS / 4;
        for first in (0..SBP_ITEMS).step_by(QUARTER) {
            let (better, tied) =
                unsafe { vote_on_items::<K, QUARTER>(params, start, thread, items, top, first) };
            (better_bits, tied_bits) = (better_bits | better, tied_bits | tied);
        }
    } else {
        (better_bits, tied_bits) =
            unsafe { vote_on_items::<K, SBP_ITEMS>(params, start, thread, items, top, 0) };
    }
    let (my_better, my_tied) =
        unsafe { (warp::transpose_bits(better_bits), warp::transpose_bits(tied_bits)) };
    let my_counts = my_better.count_ones() | my_tied.count_ones() << 16;
    unsafe {
        before_entry.store(lane * WARPS + warp, my_counts);
        device::sync_threads();
    }
    let counts = u64::from(unsafe { before_entry.load(thread) });
    // (The scan's first barrier orders every thread's read above before the store below.)
    let before = unsafe { block::scan::exclusive_scan_add_u64(counts, &warp_sums) };
    unsafe { before_entry.store(thread, before as u32) };
    if thread == SBP_THREADS as usize - 1 {
        unsafe { choice.store(3, before + counts) };
    }
    unsafe { device::sync_threads() };
    let totals = unsafe { choice.load(3) };
    let (better_total, tied_total) = (totals & 0xFFFF, totals >> 16);
    let kept = better_total + tied_total.min(wanted);
    if better_total + tied_total < wanted || kept > MAX_KEPT_BELOW_TOP as u64 {
        return None;
    }
    // The items this warp keeps anything of: a key better than the top splitter, or a tie
    // among the block's first `wanted` (lane `b`'s entry is item `b`'s); the placement below
    // visits only those. (Visiting every item with a tie — each of a bucket killer's — took
    // 36 % of the pass's instructions, H100 run 272.)
    let ties_before_mine = unsafe { before_entry.load(lane * WARPS + warp) } >> 16;
    let mut items_kept = unsafe {
        device::ballot(FULL_WARP, my_better != 0 || (my_tied != 0 && u64::from(ties_before_mine) < wanted))
    };
    let lower_lanes = device::lanemask_lt();
    // A loop over the set bits (the same on every lane): not unrolled, and empty items cost
    // nothing.
    while items_kept != 0 {
        let b = items_kept.trailing_zeros() as usize;
        items_kept &= items_kept - 1;
        let (better, tied) = unsafe {
            (
                device::shfl_idx_u32(FULL_WARP, my_better, b as u32),
                device::shfl_idx_u32(FULL_WARP, my_tied, b as u32),
            )
        };
        let entry_before = unsafe { before_entry.load(b * WARPS + warp) };
        let ties_before = u64::from(entry_before >> 16) + u64::from((tied & lower_lanes).count_ones());
        let is_better = better & (1 << lane) != 0;
        if is_better || (tied & (1 << lane) != 0 && ties_before < wanted) {
            let slot = u64::from(entry_before & 0xFFFF)
                + u64::from((better & lower_lanes).count_ones())
                + ties_before.min(wanted);
            let at = b * SBP_THREADS as usize + thread;
            // Read again (a cache hit, a few keys a warp): holding the items' keys across
            // the scan would take 32 registers more.
            let rank = unsafe { params.keys_in.read(start + at as u64) }.to_ordered().xor(flip);
            unsafe {
                ranks.store(slot as usize, rank);
                positions.store(slot as usize, at as u16);
            }
        }
    }
    unsafe { device::sync_threads() };
    Some(Tile { ranks, len: kept as usize, positions: Some(positions) })
}

/// The input position (in the pass's input) of the tile's packed rank `at`.
///
/// # Safety
/// After [`load`] or [`load_below_top`]; `at` below the tile's length.
#[inline(always)]
unsafe fn position_of<K: Key>(
    params: &SbpParams<K>,
    tile: &Tile<K::Bits>,
    layout: &SbpLayout<K::Bits>,
    start: u64,
    at: usize,
) -> u64 {
    if let Some(positions) = &tile.positions {
        return start + u64::from(unsafe { positions.load(at) });
    }
    if params.counts_in.is_null() {
        return start + at as u64;
    }
    let segments = unsafe { layout.segments.bind() };
    let tile_len = (params.len - start).min(SBP_TILE) as usize;
    let segment_count = tile_len.div_ceil(1 << params.cutoff_in_log2);
    // The last segment whose packed start is at or before `at`.
    let (mut low, mut high) = (0usize, segment_count);
    while high - low > 1 {
        let middle = (low + high) / 2;
        if unsafe { segments.load(middle) } as usize <= at {
            low = middle;
        } else {
            high = middle;
        }
    }
    start + ((low as u64) << params.cutoff_in_log2) + (at - unsafe { segments.load(low) } as usize) as u64
}

/// The search tree: the bucket among the splitters that holds the tile's `wanted`-th best,
/// the keys of better buckets and its own. Keys above the top splitter (the catch-all bucket,
/// most of the tile: the splitters cover only the sampled ranks near a tile's `k`-th best)
/// cost one compare; the others find their bucket by 8 steps down the implicit tree in
/// shared memory. Ends with the state every thread agrees on.
///
/// # Safety
/// *Block-wide*; `params.splitters` holds [`TREE_SPLITTERS`] ascending ranks;
/// `0 < wanted ≤` the tile's length.
#[inline(always)]
unsafe fn classify<K: Key>(
    params: &SbpParams<K>,
    tile: &Tile<K::Bits>,
    layout: &SbpLayout<K::Bits>,
    wanted: u64,
) -> (Bucket<K::Bits>, Narrowed<K::Bits>) {
    let (histogram, warp_sums, choice, splitters) = unsafe {
        (layout.histogram.bind(), layout.warp_sums.bind(), layout.choice.bind(), layout.splitters.bind())
    };
    let thread = device::thread_idx_x() as usize;
    let mut at = thread;
    while at < TREE_SPLITTERS {
        unsafe { splitters.store(at, K::Bits::from_u64(params.splitters.read(at as u64))) };
        at += SBP_THREADS as usize;
    }
    if thread < TREE_BUCKETS {
        unsafe { histogram.store(thread, 0) };
    }
    unsafe { device::sync_threads() };
    let top = unsafe { splitters.load(TREE_SPLITTERS - 1) };
    let mut runs = DigitRuns::new();
    unsafe {
        tile.visit(|rank| {
            if rank <= top {
                // The number of splitters below the rank: 8 steps down an implicit tree.
                let mut bucket = 0usize;
                let mut step = TREE_BUCKETS / 2;
                while step > 0 {
                    if splitters.load(bucket + step - 1) < rank {
                        bucket += step;
                    }
                    step /= 2;
                }
                runs.add(&histogram, bucket as u32);
            }
        });
        runs.flush(&histogram);
        device::sync_threads();
    }
    // The catch-all bucket was not counted: it holds what the others do not.
    let counted = if thread < TREE_SPLITTERS { u64::from(unsafe { histogram.load(thread) }) } else { 0 };
    let before = unsafe { block::scan::exclusive_scan_add_u64(counted, &warp_sums) };
    let count = if thread == TREE_SPLITTERS { tile.len as u64 - before } else { counted };
    if thread < TREE_BUCKETS && before < wanted && wanted <= before + count {
        unsafe {
            choice.store(0, thread as u64);
            choice.store(1, before);
            choice.store(2, count);
        }
    }
    unsafe { device::sync_threads() };
    let (bucket, better, in_bucket) = unsafe { (choice.load(0) as usize, choice.load(1), choice.load(2)) };
    let range = Bucket {
        low: if bucket > 0 { unsafe { splitters.load(bucket - 1) } } else { K::Bits::MIN },
        has_low: bucket > 0,
        high: if bucket < TREE_SPLITTERS { unsafe { splitters.load(bucket) } } else { K::Bits::MAX },
    };
    unsafe { device::sync_threads() }; // every thread has read the choice
    (range, Narrowed { shift: K::Bits::BITS, prefix: K::Bits::MIN, better, in_prefix: in_bucket })
}

/// One narrowing pass over the tile in shared memory: the next digit of the `wanted`-th best
/// rank among the ranks of `bucket` with the prefix. Ends with the state every thread
/// agrees on.
///
/// # Safety
/// *Block-wide*; `narrowed.shift > 0` and `better < wanted ≤ better + in_prefix`.
#[inline(always)]
unsafe fn narrow<B: OrderedBits>(
    tile: &Tile<B>,
    bucket: &Bucket<B>,
    layout: &SbpLayout<B>,
    narrowed: Narrowed<B>,
    wanted: u64,
) -> Narrowed<B> {
    let (histogram, warp_sums, choice) =
        unsafe { (layout.histogram.bind(), layout.warp_sums.bind(), layout.choice.bind()) };
    // The ranks counted: the bucket's with the prefix, one interval `[lower, upper]`, tested
    // by one unsigned compare.
    let lower = if bucket.has_low && bucket.low.wrapping_sub(B::MAX) > narrowed.prefix {
        bucket.low.wrapping_sub(B::MAX) // `low + 1`
    } else {
        narrowed.prefix
    };
    let upper = if bucket.high < narrowed.upper() { bucket.high } else { narrowed.upper() };
    let width = upper.wrapping_sub(lower);
    let counts = unsafe {
        count_digit(&histogram, &warp_sums, narrowed, tile, |rank| rank.wrapping_sub(lower) <= width)
    };
    let narrowed = unsafe { counts.choose(&choice, wanted) };
    unsafe { device::sync_threads() }; // every thread has read the choice
    narrowed
}

/// One SBP pass: block `b` reduces tile `b` of the input to at most `cutoff` candidates for
/// its `k` best and writes them, in tile order, at `b · cutoff` (module docs). The radix
/// form's passes and every pass after the tree form's first.
///
/// # Safety
/// [`SBP_THREADS`] threads, [`SbpLayout::bytes`] of shared memory, `grid.x` = the tiles of
/// `len`; buffers as [`SbpParams`] describes; `1 ≤ k ≤ cutoff`, `cutoff ≤ MAX_SBP_CUTOFF` or
/// one block; a previous pass's cutoff a power of two from [`MIN_SBP_CUTOFF`] dividing
/// [`SBP_TILE`].
pub unsafe fn partition<K: Key>(params: SbpParams<K>) {
    unsafe { partition_tile::<K, false>(params) }
}

/// The tree form's first pass: [`partition`] with the tree's splitters, which keeps only
/// each tile's keys at or below the top splitter as it loads the tile when the splitters
/// are all one key (`load_below_top`). A kernel of its own, so that the other passes'
/// code stays as it was without that path (with it, the radix form ran 1–4 % slower, H100
/// run 270).
///
/// # Safety
/// As [`partition`], in a first pass (`indices_in` and `counts_in` null) with `splitters`
/// set.
pub unsafe fn partition_tree_first<K: Key>(params: SbpParams<K>) {
    // Said here as well, so the code of a later pass's inputs (segments, indices) drops
    // out of this kernel: with it, its 64-bit-integer form spilled at its 80 registers.
    let first_pass = SbpParams { indices_in: GlobalPtr::null(), counts_in: GlobalPtr::null(), ..params };
    unsafe { partition_tile::<K, true>(first_pass) }
}

/// [`partition`]'s body; `TREE_FIRST`: the tree form's first pass.
///
/// # Safety
/// As [`partition`] or [`partition_tree_first`].
#[inline(always)] // (outlined, its call took 232 bytes of stack and spilled in the callee)
unsafe fn partition_tile<K: Key, const TREE_FIRST: bool>(params: SbpParams<K>) {
    let layout = SbpLayout::<K::Bits>::new();
    let block = device::block_idx_x() as u64;
    let start = block * SBP_TILE;
    let cutoff = params.cutoff as u64;
    // When the tree's splitters are all one key (the sample saw nothing but it below the
    // top: a bucket killer's ties), its first pass keeps only the keys at or below the top
    // splitter, and of the ties with it only `k`, as it loads the tile: every such key
    // would otherwise take the tree's search and every narrowing to the last bit (H100 run
    // 271, 2^28 keys, K = 8 … 128: 2.07–2.33 → 0.84–1.12 ms; run 273: 0.63–0.90). Where
    // the splitters differ (uniform keys, distances) a tile's time is its chain of barriers
    // and scans, not its keys, and the vote and scan of this load made it slower (run 268:
    // 0.73–1.19 → 0.79–1.36 ms): those tiles load whole. (A tile of at most `cutoff` keys keeps them
    // all anyway.) Those kept at load hold the tile's `wanted` best.
    let (tile, wanted) = if TREE_FIRST {
        let tile_len = (params.len - start).min(SBP_TILE);
        let wanted = (params.k as u64).min(tile_len);
        let splitters_one_key =
            unsafe { params.splitters.read(0) == params.splitters.read(TREE_SPLITTERS as u64 - 1) };
        let below_top = if splitters_one_key && tile_len > cutoff {
            unsafe { load_below_top(&params, &layout, start, wanted) }
        } else {
            None
        };
        (below_top.unwrap_or_else(|| unsafe { load(&params, &layout, start) }), wanted)
    } else {
        let tile = unsafe { load(&params, &layout, start) };
        let wanted = (params.k as u64).min(tile.len as u64);
        (tile, wanted)
    };
    let total = tile.len as u64;

    let mut bucket = Bucket::all();
    let mut narrowed = Narrowed { shift: K::Bits::BITS, prefix: K::Bits::MIN, better: 0, in_prefix: total };
    if !params.splitters.is_null() && total > cutoff {
        (bucket, narrowed) = unsafe { classify(&params, &tile, &layout, wanted) };
    }
    while narrowed.candidates() > cutoff && narrowed.shift > 0 {
        narrowed = unsafe { narrow(&tile, &bucket, &layout, narrowed, wanted) };
    }
    // Past the last bit the prefix is the `wanted`-th best itself: its ties overflow.
    let ties = narrowed.candidates() > cutoff;
    let need = wanted - narrowed.better;
    let kept = if ties { wanted } else { narrowed.candidates() };
    // Every kept rank is at most one bound: the bucket's and the prefix's largest rank (ranks
    // below the bucket are below both), or with ties, below the prefix (the `wanted`-th best).
    let upper = narrowed.upper();
    let bound = if ties {
        Keep::Below(narrowed.prefix)
    } else {
        Keep::AtMost(if bucket.high < upper { bucket.high } else { upper })
    };
    unsafe { place(&params, &tile, &layout, start, block, bound, need) };
    if device::thread_idx_x() == 0 && !params.counts_out.is_null() {
        unsafe { params.counts_out.write(block, kept as u32) };
    }
}

/// Which ranks a tile keeps.
#[derive(Clone, Copy)]
enum Keep<B> {
    /// Every rank at most this.
    AtMost(B),
    /// Every rank below this, and the first `need` equal to it (the ties).
    Below(B),
}

/// Writes the kept keys of the tile (and the first `need` ties) at `block · cutoff`, in tile
/// order. Thread `t` owns the packed ranks `32·t … 32·t + 31`, so tile order is thread order:
/// each thread marks its kept ranks and ties in two masks, one block scan of their counts
/// places every thread's first, and a thread walks only its set bits.
///
/// # Safety
/// *Block-wide*; the kept keys and `need` ties fit the cutoff.
#[inline(always)]
unsafe fn place<K: Key>(
    params: &SbpParams<K>,
    tile: &Tile<K::Bits>,
    layout: &SbpLayout<K::Bits>,
    start: u64,
    block: u64,
    bound: Keep<K::Bits>,
    need: u64,
) {
    let (mut keep_mask, mut tie_mask) = (0u32, 0u32);
    unsafe {
        match bound {
            Keep::AtMost(bound) => tile.visit_chunk(|j, rank| keep_mask |= ((rank <= bound) as u32) << j),
            Keep::Below(prefix) => tile.visit_chunk(|j, rank| {
                keep_mask |= ((rank < prefix) as u32) << j;
                tie_mask |= ((rank == prefix) as u32) << j;
            }),
        }
    }
    // Both counts at once (a tile's counts fit 16 bits).
    let packed = keep_mask.count_ones() as u64 | (tie_mask.count_ones() as u64) << 16;
    let before = unsafe { block::scan::exclusive_scan_add_u64(packed, &layout.warp_sums.bind()) };
    let (kept_base, ties_base) = (before & 0xFFFF, before >> 16);
    let first = device::thread_idx_x() as usize * SBP_ITEMS;
    let segment = block * params.cutoff as u64;
    let mut marked = keep_mask | tie_mask;
    while marked != 0 {
        let j = marked.trailing_zeros();
        marked &= marked - 1;
        let below = (1u32 << j) - 1;
        let ties_before = ties_base + (tie_mask & below).count_ones() as u64;
        if keep_mask & (1 << j) == 0 && ties_before >= need {
            continue;
        }
        let slot = segment + kept_base + (keep_mask & below).count_ones() as u64 + ties_before.min(need);
        let position = unsafe { position_of(params, tile, layout, start, first + j as usize) };
        let index =
            if params.indices_in.is_null() { position } else { unsafe { params.indices_in.read(position) } };
        unsafe {
            // The key read back from the input: bit for bit, NaN payloads included.
            params.keys_out.write(slot, params.keys_in.read(position));
            params.indices_out.write(slot, index);
        }
    }
}

/// The search tree of a pass: a strided sample of [`TREE_SAMPLE`] inputs (all, when fewer),
/// sorted by rank; splitter `j` is the sample's rank `⌊(j + 1) · tree_top / 255⌋` (the last
/// sampled rank where that is past the sample), so the splitters spread evenly up to the
/// sample's rank `tree_top` (repeating when that is below 255) and every key worse than it
/// falls in the catch-all bucket. One block of [`TREE_THREADS`] threads,
/// [`SbpTreeLayout::bytes`] of shared memory; the input is a first pass's (every key valid).
///
/// # Safety
/// As above; `params.splitters` holds [`TREE_SPLITTERS`] entries; `len ≥ 1`.
pub unsafe fn tree<K: Key>(params: SbpParams<K>) {
    let layout = SbpTreeLayout::<K::Bits>::new();
    let sorted = unsafe { layout.sorted.bind() };
    let flip = params.flip();
    let count = params.len.min(TREE_SAMPLE);
    let capacity = block::bitonic_sort::sort_capacity(count as u32) as usize;
    let lane = device::lane_id() as usize;
    let warp_base = device::warp_id() as usize * 32 * TREE_KEYS_PER_THREAD;
    let mut pairs = WarpPairs::<K::Bits, TREE_KEYS_PER_THREAD>::padding();
    for r in 0..TREE_KEYS_PER_THREAD {
        let slot = (warp_base + r * 32 + lane) as u64;
        if slot < count {
            let at = if params.len <= TREE_SAMPLE { slot } else { slot * params.len / TREE_SAMPLE };
            pairs.bits[r] = unsafe { params.keys_in.read(at) }.to_ordered().xor(flip);
        }
    }
    unsafe { block::bitonic_sort::sort_keys(&mut pairs, capacity, &layout.sort) };
    for r in 0..TREE_KEYS_PER_THREAD {
        let slot = warp_base + r * 32 + lane;
        if (slot as u64) < count {
            unsafe { sorted.store(slot, pairs.bits[r]) };
        }
    }
    unsafe { device::sync_threads() };
    let thread = device::thread_idx_x() as u64;
    if thread < TREE_SPLITTERS as u64 {
        let at = ((thread + 1) * params.tree_top as u64 / TREE_SPLITTERS as u64).min(count - 1);
        unsafe { params.splitters.write(thread, sorted.load(at as usize).to_u64()) };
    }
}
