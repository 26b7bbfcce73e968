//! Bucket multiselect (the DIBMS paper's algorithm on one GPU): the keys of many ranks at
//! once in about two reads of the data.
//!
//! Every pass sorts keys into *labels*, numbered in key order, by integer arithmetic on the
//! keys' ordered bits, so that the host knows each label's exact range of bits and
//! computes the same labels:
//!
//! - the first pass maps `[lo, hi]` (the sample's extremes) onto fewer than [`FIRST_SLOTS`]
//!   slots of equal width, and each slot onto a power of two of labels in proportion to the
//!   sample's keys in it (the paper's kernel density estimate, as a table); keys below `lo`
//!   join the first label, those past the last slot have a label, and NaN another
//!   ([`FirstPass`]);
//! - later passes split each active label's range into a power of two of children by a
//!   shift ([`Split`]). A child of a single bit pattern holds one value: its ranks are
//!   answered by its count, and its keys are counted but not kept.
//!
//! The host reads each label's count and decides which labels hold a wanted rank (the
//! *active* ones); only their keys go on.
//!
//! - [`count`], over the data: first-pass labels counted per block into a row of
//!   [`MAX_LABELS`] counters; also the data's smallest and largest key.
//! - [`filter`], over the data (parents: first-pass labels) or over the previous filter's
//!   candidates (parents: their labels): each key whose parent label is active gets its
//!   child label, is counted, and unless its child is a single bit pattern is copied to
//!   this block's region of the output.
//! - [`block_counts`]: how many keys each block will keep in the next filter, from the
//!   previous pass's count rows and the active labels; each filter block starts its output
//!   after the earlier blocks' counts (exact, so the output is dense and no global cursor
//!   is contended).
//! - [`totals`]: the count rows summed per label, for the host.
//! - The last pass, once every active label is small enough to pick from: [`bases`] gives
//!   each block the place of its keys of each active label (from the previous pass's
//!   rows), and [`place`] writes the active labels' keys there, each label's together; no
//!   child labels, no counts.
//! - [`pick`]: one block per wanted rank, the key at its place among its label's keys, by
//!   a radix select (8-bit digits, top first): from global memory while more than
//!   [`PICK_MAX`] keys share the digits chosen, then in shared memory.
//! - [`gather`]: keys at given positions, or at the sample's pseudo-random ones.
//! - [`sample`]: the sample's summary the first pass is made from (its extremes and its
//!   keys per slot), so that only that summary goes to the host, not the sample.
//!
//! Blocks keep their place between passes: block `b` of a filter over candidates reads the
//! region that block `b` of the previous filter wrote, so the previous pass's count row `b`
//! says exactly how many keys block `b` keeps.

use crate::block::scan::exclusive_scan_add_u64;
use crate::block::tiles::{
    TILE, TILE_ITEMS, TILE_THREADS, TILE_WARPS, block_range, count_tile_buckets, load_keys,
    load_tile_vectors_evict_first, load_tile_vectors_opaque, unroll_items,
};
use crate::device::{self, SharedLayout, SharedRegion, SharedSlice};
use crate::key::{Key, OrderedBits};
use crate::params::GlobalPtr;
use crate::warp;

/// Threads per block of the passes.
pub const MULTI_THREADS: u32 = TILE_THREADS;
/// Labels of one pass at most (each block counts them in shared memory).
pub const MAX_LABELS: usize = 8192;
/// Slots of the first pass's table.
pub const FIRST_SLOTS: usize = 1024;
/// Blocks of a pass at most.
pub const MAX_MULTI_BLOCKS: usize = 1024;
/// A parent's entry in the filter's shared slot table when it is not active (slots are
/// below [`MAX_LABELS`]; the host's `slot_of` holds `u32::MAX` there).
pub const NO_SLOT: u16 = u16::MAX;
/// Active labels (slots) [`place`] takes at most: each has its start and a cursor in
/// shared memory.
pub const PLACE_SLOTS: usize = 4096;
/// Threads per block of [`gather`], [`totals`] and [`pick`].
pub const SMALL_THREADS: u32 = 256;
/// Keys [`pick`] holds in shared memory: more sharing the digits chosen are read from
/// global memory.
pub const PICK_MAX: usize = 2048;
/// Digit values of [`pick`]'s radix select (one per thread).
const PICK_DIGITS: usize = SMALL_THREADS as usize;
/// Count rows each thread of [`totals`] sums (the grid's `y` covers the blocks).
pub const TOTALS_ROWS: u32 = 16;

/// The first pass's labels (see the module docs). With `d = max(bits, lo) − lo` clamped to
/// `limit`, slot `d >> slot_shift` and the label `adjust + (d >> shift)` from the slot's
/// table entry ([`FirstPass::entry`]); keys at or above `nan` get `nan_label`.
///
/// The clamps fold the keys outside the slots into table entries: keys below `lo` count
/// as `lo` (the first slot's first label holds them), keys past the slots' end reach the
/// entry at `limit >> slot_shift`, the label above them all (the host's table makes it
/// one). The last slot holds its whole width (up to the label above), not only up to the
/// sample's largest key.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FirstPass {
    /// Ordered bits of the sample's smallest key.
    pub lo: u64,
    /// The largest `d`: the slots' end (`slots << slot_shift`), or the largest key's
    /// `d` (`Bits::MAX − lo`) when the slots reach it.
    pub limit: u64,
    /// Ordered bits of NaN (floats); integers: all ones (`u64::MAX`, narrowed to the keys'
    /// width), whose `nan_label` is the label the table gives them.
    pub nan: u64,
    /// `(hi − lo) >> slot_shift < FIRST_SLOTS − 1` for the sample's largest key `hi`: a
    /// table entry is left for the label above the slots.
    pub slot_shift: u32,
    /// Label of NaN keys (floats; integers: the table's label of all ones).
    pub nan_label: u32,
}

/// Bits of a slot table entry that hold its shift; the bits above hold its adjustment.
const ENTRY_SHIFT_BITS: u32 = 6;

impl FirstPass {
    /// The `slot_shift` of a table over `[lo, hi]` (ordered bits, `lo ≤ hi`): the least
    /// shift that leaves at most `FIRST_SLOTS − 1` slots.
    #[inline(always)]
    pub fn slot_shift_of(lo: u64, hi: u64) -> u32 {
        let width = 64 - (hi - lo).leading_zeros();
        let shift = width.saturating_sub(FIRST_SLOTS.trailing_zeros());
        if (hi - lo) >> shift >= FIRST_SLOTS as u64 - 1 { shift + 1 } else { shift }
    }

    /// The table entry of a slot whose labels are `base + ((d − (slot << slot_shift)) >>
    /// shift)` (`shift ≤ slot_shift`, below 64; `slot_shift − shift ≤ 13`, `slot <
    /// FIRST_SLOTS`, `base < 2^13`): the base less the slot's start in children, which
    /// leaves one addition a key, and the shift.
    pub fn entry(slot: u32, slot_shift: u32, base: u32, shift: u32) -> u32 {
        let adjust = base.wrapping_sub(slot << (slot_shift - shift));
        adjust << ENTRY_SHIFT_BITS | shift
    }

    /// The label of a key's ordered bits, from the slot table `entry(slot)` (`slot <
    /// FIRST_SLOTS`), in the keys' own width (32-bit arithmetic for 32-bit keys). The host
    /// calls the same function.
    ///
    /// Without branches, and with the keys outside the slots folded into the table by two
    /// clamps (see [`FirstPass`]): about a dozen instructions a key. (With three branches a
    /// key, each with its reconvergence, the filter's machine code spent about 38
    /// instructions a key on the label and the slot alone: H200, run 189; then tests and
    /// selects of the keys below, above and inside, 15.)
    #[inline(always)]
    pub fn label_of<B: OrderedBits>(&self, bits: B, entry: impl Fn(usize) -> u32) -> u32 {
        let label = self.table_label(bits, entry);
        if bits >= B::from_u64(self.nan) { self.nan_label } else { label }
    }

    /// [`FirstPass::label_of`] before NaN's label: the table's.
    #[inline(always)]
    pub fn table_label<B: OrderedBits>(&self, bits: B, entry: impl Fn(usize) -> u32) -> u32 {
        let lo = B::from_u64(self.lo);
        let d = bits.max(lo).wrapping_sub(lo).min(B::from_u64(self.limit));
        let entry = entry(d.shr(self.slot_shift).low_u32() as usize);
        let shift = entry & ((1 << ENTRY_SHIFT_BITS) - 1);
        // The host's entries shift by less than the keys' width; said here, the shift
        // needs no clamp.
        unsafe { core::hint::assert_unchecked(shift < B::BITS) };
        let adjust = ((entry as i32) >> ENTRY_SHIFT_BITS) as u32;
        adjust.wrapping_add(d.shr(shift).low_u32())
    }
}

/// An active label's children: bits `b` of the label's range `[start, …]` get child
/// `base + ((b − start) >> shift)` (`shift` below the keys' width). With `shift == 0` every
/// child is one bit pattern.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Split {
    /// Ordered bits of the label's first possible key.
    pub start: u64,
    /// The children's width in bits (log2).
    pub shift: u32,
    /// Label of the first child.
    pub base: u32,
}

impl Split {
    /// The child label of a key's ordered bits (within the parent's range), in the keys'
    /// own width.
    #[inline(always)]
    pub fn label_of<B: OrderedBits>(&self, bits: B) -> u32 {
        let start = B::from_u64(self.start);
        if bits <= start { self.base } else { self.base + bits.wrapping_sub(start).shr(self.shift).low_u32() }
    }
}

/// Launch parameters of the multiselect passes (each reads the fields its docs name).
#[repr(C)]
#[derive(Debug)]
pub struct MultiParams<K> {
    /// The keys: the data, or the previous filter's candidates.
    pub keys: GlobalPtr<K>,
    /// Keys in the data (data passes).
    pub len: u64,
    /// Candidate passes: each candidate's label (its parent). Null for data passes, whose
    /// parents are their first-pass labels.
    pub labels_in: GlobalPtr<u32>,
    /// Candidate passes: how many candidates each block of the previous filter wrote
    /// (block `b` reads the ones block `b` wrote).
    pub counts_in: GlobalPtr<u64>,
    /// The first pass's slot table ([`FIRST_SLOTS`] entries).
    pub table: GlobalPtr<u32>,
    /// Block counts: one bit per parent label, set for the active ones whose keys the next
    /// filter writes (not those whose children are all single bit patterns).
    pub active: GlobalPtr<u32>,
    /// Filters: the slot (index into `slots`) of each parent label, `u32::MAX` for the
    /// inactive ones (the filter keeps a key when its parent has a slot).
    pub slot_of: GlobalPtr<u32>,
    /// Filters: each active parent's split into this pass's labels.
    pub slots: GlobalPtr<Split>,
    /// Filters: how many keys each block keeps ([`block_counts`] writes them); block `b`
    /// writes after the earlier blocks' keys.
    pub counts_out: GlobalPtr<u64>,
    /// [`bases`]: where each active parent's (slot's) keys start in the output of
    /// [`place`].
    pub starts: GlobalPtr<u64>,
    /// [`bases`]: each slot's parent label.
    pub slot_labels: GlobalPtr<u32>,
    /// [`bases`] writes, [`place`] reads: where block `b`'s keys of slot `s` start, at
    /// `s · blocks + b`.
    pub bases: GlobalPtr<u64>,
    /// Filters: the kept keys.
    pub keys_out: GlobalPtr<K>,
    /// Filters: the kept keys' labels.
    pub labels_out: GlobalPtr<u32>,
    /// Counts per block and label: row `b` at `b · MAX_LABELS`.
    pub rows: GlobalPtr<u32>,
    /// Totals: the counts per label summed over blocks (added to; cleared by the host).
    pub totals: GlobalPtr<u64>,
    /// Count: `[max of !bits, max of bits]` over the data (the smallest key's bits
    /// complemented, so one atomic maximum serves both); cleared by the host.
    pub extremes: GlobalPtr<u64>,
    /// The first pass's labels.
    pub first: FirstPass,
    /// Labels this pass counts (rows hold `MAX_LABELS` entries; the first `labels` are
    /// written).
    pub labels: u32,
    /// Parent labels (bits of `active`): filters and block counts.
    pub parent_labels: u32,
    /// Blocks of the count and filter passes.
    pub blocks: u32,
}

impl<K> Clone for MultiParams<K> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<K> Copy for MultiParams<K> {}

/// Launch parameters of [`gather`]: `out[i] = keys[positions[i]]` for `i < len`, or, by
/// rows (`period > 0`), `out[i] = keys[(i / period) · row_stride + positions[i % period]]`:
/// the same positions read in every row; by rows with null `positions`, the position is
/// `i % period` itself below `keys_len` and [`FILL_POSITION`] from there (each row's first
/// `keys_len` keys, padded to `period`). A position of [`FILL_POSITION`] reads no key and
/// writes the key of the highest rank (a NaN for floats, `MAX` for integers): padding that
/// a stable ascending sort leaves behind every key of the row, NaNs included.
#[repr(C)]
#[derive(Debug)]
pub struct GatherKeysParams<K> {
    /// Where the keys are read.
    pub keys: GlobalPtr<K>,
    /// Positions into `keys`; null: the sample's, [`sample_position`]`(seed, i, keys_len)`
    /// (or by rows, the row's first `keys_len`).
    pub positions: GlobalPtr<u64>,
    /// `len` keys.
    pub out: GlobalPtr<K>,
    /// Positions to read.
    pub len: u64,
    /// Keys at `keys` (the sample's positions are below it), or keys a row copies.
    pub keys_len: u64,
    /// The sample's seed.
    pub seed: u64,
    /// Positions per row: the first `period` of `positions` serve every row; 0 reads
    /// `positions` flat.
    pub period: u64,
    /// Keys from one row's start in `keys` to the next's (with `period > 0`).
    pub row_stride: u64,
}

/// A position of [`GatherKeysParams`] that writes padding instead of reading a key.
pub const FILL_POSITION: u64 = u64::MAX;

/// Position of sample key `i` among `len` keys (`len > 0`): splitmix64 of the seed and `i`.
#[inline(always)]
pub fn sample_position(seed: u64, i: u64, len: u64) -> u64 {
    let mut z = (seed ^ i).wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (z ^ (z >> 31)) % len
}

/// One wanted rank for [`pick`]: the key at `offset` (from 0, smallest first) among the
/// `len` keys at `start`, whose ordered bits lie in `low ..= low + (2^width − 1)`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pick {
    /// Where the label's keys start.
    pub start: u64,
    /// Ordered bits of the label's smallest possible key.
    pub low: u64,
    /// Its keys.
    pub len: u32,
    /// The wanted place among them (below `len`).
    pub offset: u32,
    /// The label's keys differ from `low` in their low `width` bits only (at most the
    /// keys' width).
    pub width: u32,
    /// Padding (0).
    pub reserved: u32,
}

/// Launch parameters of [`pick`].
#[repr(C)]
#[derive(Debug)]
pub struct PickParams<K> {
    /// The last filter's output: each label's keys together.
    pub keys: GlobalPtr<K>,
    /// One per block.
    pub picks: GlobalPtr<Pick>,
    /// One key per pick.
    pub out: GlobalPtr<K>,
}

impl<K> Clone for PickParams<K> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<K> Copy for PickParams<K> {}

impl<K> Clone for GatherKeysParams<K> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<K> Copy for GatherKeysParams<K> {}

/// Launch parameters of [`sample`].
#[repr(C)]
#[derive(Debug)]
pub struct SampleSummaryParams<K> {
    /// The sample's keys ([`gather`] wrote them).
    pub keys: GlobalPtr<K>,
    /// Keys in the sample.
    pub count: u64,
    /// With `has_nan`: the ordered bits of NaN, which every NaN key has; those keys are
    /// left out of the summary.
    pub nan: u64,
    /// Whether the keys have a NaN (floats).
    pub has_nan: u32,
    /// Padding.
    pub reserved: u32,
    /// Out: [`SummaryWords::WORDS`] words, as [`SummaryWords`] lays them out.
    pub summary: GlobalPtr<u64>,
}

impl<K> Clone for SampleSummaryParams<K> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<K> Copy for SampleSummaryParams<K> {}

/// What [`sample`] writes, word by word: the smallest and the largest ordered bits of the
/// sample's keys that are not NaN, how many those are (none: both extremes are 0), and
/// then how many fall in each slot of the first pass (by [`FirstPass::slot_shift_of`] the
/// extremes).
pub struct SummaryWords;

impl SummaryWords {
    /// Word of the smallest key's ordered bits.
    pub const SMALLEST: usize = 0;
    /// Word of the largest key's ordered bits.
    pub const LARGEST: usize = 1;
    /// Word of the count of keys that are not NaN.
    pub const FINITE: usize = 2;
    /// Word of slot 0's count; slot `s`'s is `SLOTS + s`.
    pub const SLOTS: usize = 3;
    /// Words in all.
    pub const WORDS: usize = Self::SLOTS + FIRST_SLOTS;
}

/// Shared memory of [`count`] and [`filter`].
pub struct PassLayout {
    /// The first pass's slot table.
    pub table: SharedRegion<u32>,
    /// Filters: each parent's slot (index into `slots`), [`NO_SLOT`] for inactive parents.
    pub slot_of: SharedRegion<u16>,
    /// The block's counts per label.
    pub histogram: SharedRegion<u32>,
    /// Filters: the block's next output place (from its region's start).
    pub cursor: SharedRegion<u32>,
    /// Filters: the warps' sums of the block scan that finds the block's regions.
    pub warp_sums: SharedRegion<u64>,
    /// Filters: the block's input and output region starts.
    pub region: SharedRegion<u64>,
    /// Bytes in all.
    pub bytes: usize,
}

impl PassLayout {
    /// The layout (the same for both passes).
    pub const fn new() -> Self {
        let layout = SharedLayout::new();
        let (layout, table) = layout.push::<u32>(FIRST_SLOTS);
        let (layout, slot_of) = layout.push::<u16>(MAX_LABELS);
        let (layout, histogram) = layout.push::<u32>(MAX_LABELS);
        let (layout, cursor) = layout.push::<u32>(1);
        let (layout, warp_sums) = layout.push::<u64>(TILE_WARPS);
        let (layout, region) = layout.push::<u64>(1);
        Self { table, slot_of, histogram, cursor, warp_sums, region, bytes: layout.bytes() }
    }
}

impl Default for PassLayout {
    fn default() -> Self {
        Self::new()
    }
}

/// Shared memory of [`place`].
pub struct PlaceLayout {
    /// The first pass's slot table.
    pub table: SharedRegion<u32>,
    /// Each parent's slot, [`NO_SLOT`] for inactive parents.
    pub slot_of: SharedRegion<u16>,
    /// Where each slot's keys start in the output.
    pub starts: SharedRegion<u64>,
    /// Each slot's next place for this block's keys, from its start (a 32-bit shared
    /// atomic: sm_90 has no 64-bit one, ptxas builds it from a compare-and-swap loop).
    pub cursors: SharedRegion<u32>,
    /// The block scan's warp sums (candidate passes: the block's input region).
    pub warp_sums: SharedRegion<u64>,
    /// The block's input region start.
    pub region: SharedRegion<u64>,
    /// Bytes in all.
    pub bytes: usize,
}

impl PlaceLayout {
    /// The layout.
    pub const fn new() -> Self {
        let layout = SharedLayout::new();
        let (layout, table) = layout.push::<u32>(FIRST_SLOTS);
        let (layout, slot_of) = layout.push::<u16>(MAX_LABELS);
        let (layout, starts) = layout.push::<u64>(PLACE_SLOTS);
        let (layout, cursors) = layout.push::<u32>(PLACE_SLOTS);
        let (layout, warp_sums) = layout.push::<u64>(TILE_WARPS);
        let (layout, region) = layout.push::<u64>(1);
        Self { table, slot_of, starts, cursors, warp_sums, region, bytes: layout.bytes() }
    }
}

impl Default for PlaceLayout {
    fn default() -> Self {
        Self::new()
    }
}

/// Shared memory of [`block_counts`].
pub struct BlockCountsLayout {
    /// The warps' sums.
    pub warp_sums: SharedRegion<u32>,
    /// Bytes in all.
    pub bytes: usize,
}

impl BlockCountsLayout {
    /// The layout.
    pub const fn new() -> Self {
        let (layout, warp_sums) = SharedLayout::new().push::<u32>(TILE_WARPS);
        Self { warp_sums, bytes: layout.bytes() }
    }
}

impl Default for BlockCountsLayout {
    fn default() -> Self {
        Self::new()
    }
}

/// Shared memory of [`bases`].
pub struct BasesLayout {
    /// The block scan's warp sums.
    pub warp_sums: SharedRegion<u64>,
    /// A chunk's total.
    pub total: SharedRegion<u64>,
    /// Bytes in all.
    pub bytes: usize,
}

impl BasesLayout {
    /// The layout.
    pub const fn new() -> Self {
        let layout = SharedLayout::new();
        let (layout, warp_sums) = layout.push::<u64>(TILE_WARPS);
        let (layout, total) = layout.push::<u64>(1);
        Self { warp_sums, total, bytes: layout.bytes() }
    }
}

impl Default for BasesLayout {
    fn default() -> Self {
        Self::new()
    }
}

/// Shared memory of [`pick`].
pub struct PickLayout {
    /// The label's keys' ordered bits.
    pub bits: SharedRegion<u64>,
    /// The histogram of one digit.
    pub histogram: SharedRegion<u32>,
    /// The block scan's warp sums.
    pub warp_sums: SharedRegion<u64>,
    /// The chosen digit, the place left within it, and its keys.
    pub choice: SharedRegion<u64>,
    /// The next free entry of `bits` while the keys left are gathered.
    pub cursor: SharedRegion<u32>,
    /// Bytes in all.
    pub bytes: usize,
}

impl PickLayout {
    /// The layout.
    pub const fn new() -> Self {
        let layout = SharedLayout::new();
        let (layout, bits) = layout.push::<u64>(PICK_MAX);
        let (layout, histogram) = layout.push::<u32>(PICK_DIGITS);
        let (layout, warp_sums) = layout.push::<u64>(TILE_WARPS);
        let (layout, choice) = layout.push::<u64>(3);
        let (layout, cursor) = layout.push::<u32>(1);
        Self { bits, histogram, warp_sums, choice, cursor, bytes: layout.bytes() }
    }
}

impl Default for PickLayout {
    fn default() -> Self {
        Self::new()
    }
}

/// Shared memory of [`sample`].
pub struct SampleLayout {
    /// The sample's keys per slot.
    pub slots: SharedRegion<u32>,
    /// Each warp's smallest key, largest key, and count of keys that are not NaN.
    pub warp_partials: SharedRegion<u64>,
    /// Bytes in all.
    pub bytes: usize,
}

impl SampleLayout {
    /// The layout.
    pub const fn new() -> Self {
        let layout = SharedLayout::new();
        let (layout, slots) = layout.push::<u32>(FIRST_SLOTS);
        let (layout, warp_partials) = layout.push::<u64>(3 * (SMALL_THREADS / 32) as usize);
        Self { slots, warp_partials, bytes: layout.bytes() }
    }
}

impl Default for SampleLayout {
    fn default() -> Self {
        Self::new()
    }
}

/// The first pass's labels, with the slot table in shared memory.
struct FirstLabels {
    first: FirstPass,
    table: SharedSlice<u32>,
}

impl FirstLabels {
    /// Loads the slot table (no barrier).
    ///
    /// # Safety
    /// *Block-wide*; [`FIRST_SLOTS`] entries at `params.table`.
    #[inline(always)]
    unsafe fn load<K>(params: &MultiParams<K>, table: &SharedRegion<u32>) -> Self {
        let table = unsafe { table.bind() };
        let mut i = device::thread_idx_x() as usize;
        while i < FIRST_SLOTS {
            unsafe { table.store(i, params.table.read(i as u64)) };
            i += MULTI_THREADS as usize;
        }
        Self { first: params.first, table }
    }

    /// The label of `key`.
    #[inline(always)]
    unsafe fn label_of<K: Key>(&self, key: K) -> u32 {
        self.first.label_of(key.to_ordered(), |slot| unsafe { self.table.load(slot) })
    }
}

/// Clears `len` entries of a shared counter array (no barrier).
#[inline(always)]
unsafe fn clear(counters: &SharedSlice<u32>, len: usize) {
    let mut i = device::thread_idx_x() as usize;
    while i < len {
        unsafe { counters.store(i, 0) };
        i += MULTI_THREADS as usize;
    }
}

/// Writes the block's first `labels` counters to its row of `rows` (after a barrier).
#[inline(always)]
unsafe fn publish_row(histogram: &SharedSlice<u32>, rows: GlobalPtr<u32>, labels: usize) {
    unsafe { device::sync_threads() };
    let row = device::block_idx_x() as u64 * MAX_LABELS as u64;
    let mut i = device::thread_idx_x() as usize;
    while i < labels {
        unsafe { rows.write(row + i as u64, histogram.load(i)) };
        i += MULTI_THREADS as usize;
    }
}

/// The keys of the tile at `tile_start`, by 16-byte vectors when `vectors` and the tile is
/// full (their order within the tile then differs, which no pass here minds). Opaque
/// vector loads: with plain ones LLVM merged the two branches into scalar loads from
/// selected addresses (H200, run 186).
///
/// # Safety
/// As [`load_keys`]; with `vectors`, key `tile_start` is 16-byte aligned.
///
/// `EVICT_FIRST`: the vectors are loaded as streamed data (`ld.global.cs`), which L2
/// evicts first (see [`place`]).
#[inline(always)]
unsafe fn load_any_order<K: Key, const EVICT_FIRST: bool>(
    keys: GlobalPtr<K>,
    tile_start: u64,
    end: u64,
    vectors: bool,
) -> [K; TILE_ITEMS] {
    if vectors && tile_start + TILE <= end {
        if EVICT_FIRST {
            unsafe { load_tile_vectors_evict_first(keys, tile_start) }
        } else {
            unsafe { load_tile_vectors_opaque(keys, tile_start) }
        }
    } else {
        unsafe { load_keys(keys, tile_start, end) }
    }
}

/// The `multiselect_count_<key>` kernel: the data's first-pass labels, counted into each
/// block's row, and the data's extremes.
///
/// # Safety
/// [`MULTI_THREADS`] threads, [`PassLayout::bytes`] of shared memory, `grid.x =
/// params.blocks ≤ MAX_MULTI_BLOCKS`; `labels ≤ MAX_LABELS` covers every first-pass label;
/// `extremes` cleared.
pub unsafe fn count<K: Key>(params: MultiParams<K>) {
    if params.blocks == 0 {
        return;
    }
    let layout = PassLayout::new();
    let histogram = unsafe { layout.histogram.bind() };
    unsafe { clear(&histogram, params.labels as usize) };
    let labels_of = unsafe { FirstLabels::load(&params, &layout.table) };
    unsafe { device::sync_threads() };

    let (start, end) = block_range(params.len, params.blocks);
    // Block ranges start on whole tiles, so an aligned buffer gives aligned tiles.
    let vectors = params.keys.address().is_multiple_of(16);
    let (mut smallest, mut largest) = (K::Bits::MAX, K::Bits::MIN);
    // Tile t + 1 is loaded before tile t is counted, so that loads are in flight while the
    // block counts (as SampleSelect's count does).
    let load = |at: u64| unsafe { load_any_order::<K, false>(params.keys, at, end, vectors) };
    let mut next = if start < end { load(start) } else { [K::default(); TILE_ITEMS] };
    let mut label_of = |key: K| {
        let bits = key.to_ordered();
        smallest = smallest.min(bits);
        largest = largest.max(bits);
        unsafe { labels_of.label_of(key) }
    };
    // Whole tiles first, with no test of each key's place (the test and its branch took
    // about a sixth of the loop's instructions); then the block's last, partial tile.
    let mut tile_start = start;
    while tile_start + TILE <= end {
        let keys = next;
        if tile_start + TILE < end {
            next = load(tile_start + TILE);
        }
        let mut labels = [0u32; TILE_ITEMS];
        unroll_items!(i => { labels[i] = label_of(keys[i]); });
        unsafe { count_tile_buckets(&histogram, &labels) };
        tile_start += TILE;
    }
    if tile_start < end {
        let first = tile_start + device::thread_idx_x() as u64;
        unroll_items!(i => {
            if first + (i as u64) * (TILE_THREADS as u64) < end {
                unsafe { histogram.atomic_add(label_of(next[i]) as usize, 1) };
            }
        });
    }
    unsafe { publish_row(&histogram, params.rows, params.labels as usize) };

    let smallest = unsafe { warp::reduce_min_u64(smallest.to_u64()) };
    let largest = unsafe { warp::reduce_max_u64(largest.to_u64()) };
    if device::lane_id() == 0 && smallest <= largest {
        unsafe {
            device::global_atomic_max_u64(params.extremes.as_ptr(), !smallest);
            device::global_atomic_max_u64(params.extremes.as_ptr().add(1), largest);
        }
    }
}

/// Where this block's region starts: the sum of `counts` over the blocks before it.
///
/// # Safety
/// *Block-wide* (ends with a barrier); `counts` holds an entry per earlier block.
#[inline(always)]
unsafe fn region_start(
    counts: GlobalPtr<u64>,
    warp_sums: &SharedSlice<u64>,
    region: &SharedSlice<u64>,
) -> u64 {
    let block = device::block_idx_x() as u64;
    let mut sum = 0u64;
    let mut j = device::thread_idx_x() as u64;
    while j < block {
        sum += unsafe { counts.read(j) };
        j += MULTI_THREADS as u64;
    }
    let before = unsafe { exclusive_scan_add_u64(sum, warp_sums) };
    if device::thread_idx_x() == MULTI_THREADS - 1 {
        unsafe { region.store(0, before + sum) };
    }
    unsafe { device::sync_threads() };
    let start = unsafe { region.load(0) };
    unsafe { device::sync_threads() }; // the next call's store waits for every load
    start
}

/// Each parent's slot into shared memory (no barrier): one load then tells whether a key is
/// kept and which slot it is.
///
/// # Safety
/// *Block-wide*; `parent_labels ≤ MAX_LABELS` entries at `slot_of`.
#[inline(always)]
unsafe fn load_slots<K>(params: &MultiParams<K>, slot_of: &SharedSlice<u16>) {
    let mut i = device::thread_idx_x() as usize;
    while i < params.parent_labels as usize {
        let slot = unsafe { params.slot_of.read(i as u64) }.min(NO_SLOT as u32) as u16;
        unsafe { slot_of.store(i, slot) };
        i += MULTI_THREADS as usize;
    }
}

/// The keys a block reads: its range of the data, or (candidate passes) the region that
/// block `b` of the previous filter wrote.
///
/// # Safety
/// *Block-wide* (ends with a barrier); as [`filter`].
#[inline(always)]
unsafe fn input_range<K>(
    params: &MultiParams<K>,
    warp_sums: &SharedSlice<u64>,
    region: &SharedSlice<u64>,
) -> (u64, u64) {
    if params.labels_in.is_null() {
        block_range(params.len, params.blocks)
    } else {
        let start = unsafe { region_start(params.counts_in, warp_sums, region) };
        (start, start + unsafe { params.counts_in.read(device::block_idx_x() as u64) })
    }
}

/// The `multiselect_filter_<key>` kernel: the keys of active parents copied, with their
/// new labels, to the block's output region, and counted per block.
///
/// # Safety
/// As [`count`]; `parent_labels ≤ MAX_LABELS` entries at `slot_of`, below [`MAX_LABELS`]
/// for the active parents and `u32::MAX` for the others; `slots` holds every active
/// parent's subdivision, whose labels are below `labels`; `counts_out` as [`block_counts`]
/// computed them from the previous pass's rows and the same active parents; candidate
/// passes: `counts_in` as the previous filter's `counts_out`, with the same `blocks`.
pub unsafe fn filter<K: Key>(params: MultiParams<K>) {
    if params.blocks == 0 {
        return;
    }
    let layout = PassLayout::new();
    let (histogram, slot_of, cursor) =
        unsafe { (layout.histogram.bind(), layout.slot_of.bind(), layout.cursor.bind()) };
    let (warp_sums, region) = unsafe { (layout.warp_sums.bind(), layout.region.bind()) };
    unsafe { clear(&histogram, params.labels as usize) };
    unsafe { load_slots(&params, &slot_of) };
    if device::thread_idx_x() == 0 {
        unsafe { cursor.store(0, 0) };
    }
    let data_pass = params.labels_in.is_null();
    let first_labels = unsafe { FirstLabels::load(&params, &layout.table) };
    let (start, end) = unsafe { input_range(&params, &warp_sums, &region) };
    let out_start = unsafe { region_start(params.counts_out, &warp_sums, &region) };
    unsafe { device::sync_threads() };
    let pass =
        FilterPass { params: &params, histogram: &histogram, slot_of: &slot_of, cursor: &cursor, out_start };
    // The loop twice, so that neither tests which pass it is in for every key.
    if data_pass {
        unsafe { pass.filter_range::<true>(&first_labels, start, end) };
    } else {
        unsafe { pass.filter_range::<false>(&first_labels, start, end) };
    }
    unsafe { publish_row(&histogram, params.rows, params.labels as usize) };
}

/// What a filter's tiles share.
struct FilterPass<'a, K> {
    params: &'a MultiParams<K>,
    histogram: &'a SharedSlice<u32>,
    slot_of: &'a SharedSlice<u16>,
    cursor: &'a SharedSlice<u32>,
    out_start: u64,
}

impl<K: Key> FilterPass<'_, K> {
    /// Filters keys `start .. end`: of the data (`DATA_PASS`: parents are first-pass
    /// labels) or of the previous filter's candidates (parents read beside them).
    ///
    /// # Safety
    /// *Block-wide*; as [`filter`], after its set-up and a barrier.
    #[inline(always)]
    unsafe fn filter_range<const DATA_PASS: bool>(&self, first_labels: &FirstLabels, start: u64, end: u64) {
        let params = self.params;
        let vectors = DATA_PASS && params.keys.address().is_multiple_of(16);
        // Tile t + 1's keys are loaded before tile t is filtered, as in the count; not for
        // 64-bit keys, whose filter it takes from 64 to 96 registers (two blocks a
        // multiprocessor instead of the three of a wave).
        let prefetch = size_of::<K>() <= 4;
        let load = |at: u64| unsafe { load_any_order::<K, false>(params.keys, at, end, vectors) };
        // Each item's parent's slot; `FULL`: every item of the tile is before `end`.
        let slots_of = |keys: &[K; TILE_ITEMS], tile_start: u64, full: bool| {
            let parents = if DATA_PASS {
                [0; TILE_ITEMS]
            } else {
                unsafe { load_keys(params.labels_in, tile_start, end) }
            };
            let first = tile_start + device::thread_idx_x() as u64;
            let mut slots = [NO_SLOT; TILE_ITEMS];
            unroll_items!(i => {
                let parent = if DATA_PASS { unsafe { first_labels.label_of(keys[i]) } } else { parents[i] };
                if full || first + (i as u64) * (TILE_THREADS as u64) < end {
                    slots[i] = unsafe { self.slot_of.load(parent as usize) };
                }
            });
            slots
        };
        let keep = |keys: &[K; TILE_ITEMS], slots: &[u16; TILE_ITEMS]| unsafe {
            keep_tile(params, self.histogram, self.cursor, self.out_start, keys, slots)
        };
        let mut next = if prefetch && start < end { load(start) } else { [K::default(); TILE_ITEMS] };
        // As in the count: whole tiles with no test of each key's place, then the last,
        // partial tile.
        let mut tile_start = start;
        while tile_start + TILE <= end {
            let keys = if prefetch { next } else { load(tile_start) };
            if prefetch && tile_start + TILE < end {
                next = load(tile_start + TILE);
            }
            keep(&keys, &slots_of(&keys, tile_start, true));
            tile_start += TILE;
        }
        if tile_start < end {
            let keys = if prefetch { next } else { load(tile_start) };
            keep(&keys, &slots_of(&keys, tile_start, false));
        }
    }
}

/// Counts each of the thread's keys whose parent has a slot (not [`NO_SLOT`]) under its
/// child label in its parent's split and, unless the child is a single bit pattern,
/// appends it with that label to the block's output.
///
/// A warp reserves its places for the whole tile with one shared atomic. First every item
/// is labelled and counted (its parent's split read once); then a ballot per item, outside
/// any branch, marks the lanes that write it, so that each store instruction writes one
/// contiguous run (item by item, lane by lane). (Before: a ballot per item inside the
/// labelling branch, each with its divergence check, and a test of each key's place in
/// whole tiles too, took the data filter to about 99 sm_90 instructions a key against the
/// count's 45, twice the count's time, H100 run 226; then lanes writing their own items
/// one after another scattered each store over the warp's run, and a filter keeping 19 %
/// of the keys went from 1.14 to 1.58 ms, H200 run 229.)
///
/// # Safety
/// *Warp-wide* (every lane calls it together); as [`filter`].
#[inline(always)]
unsafe fn keep_tile<K: Key>(
    params: &MultiParams<K>,
    histogram: &SharedSlice<u32>,
    cursor: &SharedSlice<u32>,
    out_start: u64,
    keys: &[K; TILE_ITEMS],
    slots: &[u16; TILE_ITEMS],
) {
    let kept = slots.iter().any(|&slot| slot != NO_SLOT);
    if unsafe { !device::any(u32::MAX, kept) } {
        return;
    }
    let mut labels = [0u32; TILE_ITEMS];
    let mut writes = [false; TILE_ITEMS];
    unroll_items!(i => {
        if slots[i] != NO_SLOT {
            let split = unsafe { params.slots.read(slots[i] as u64) };
            labels[i] = split.label_of(keys[i].to_ordered());
            unsafe { histogram.atomic_add(labels[i] as usize, 1) };
            writes[i] = split.shift != 0;
        }
    });
    let mut writers = [0u32; TILE_ITEMS];
    let mut total = 0;
    unroll_items!(i => {
        writers[i] = unsafe { device::ballot(u32::MAX, writes[i]) };
        total += writers[i].count_ones();
    });
    if total == 0 {
        return;
    }
    let lane = device::lane_id();
    let mut base = 0;
    if lane == 0 {
        base = unsafe { cursor.atomic_add(0, total) };
    }
    let place = out_start + unsafe { device::shfl_idx_u32(u32::MAX, base, 0) } as u64;
    unroll_items!(i => {
        if writes[i] {
            let before: u32 = writers[..i].iter().map(|w| w.count_ones()).sum();
            let at = place + (before + (writers[i] & device::lanemask_lt()).count_ones()) as u64;
            unsafe {
                params.keys_out.write(at, keys[i]);
                params.labels_out.write(at, labels[i]);
            }
        }
    });
}

/// The `multiselect_bases_<key>` kernel (a block per active parent, or slot): where each
/// block's keys of the slot go in [`place`]'s output, after the slot's `starts` entry and
/// the earlier blocks' keys of it (their counts in the previous pass's rows).
///
/// # Safety
/// [`MULTI_THREADS`] threads, [`BasesLayout::bytes`] of shared memory, a block per slot;
/// `slot_labels` and `starts` hold an entry per slot; `bases` room for `slots · blocks`;
/// `rows` as the previous pass wrote them.
pub unsafe fn bases<K: Key>(params: MultiParams<K>) {
    let layout = BasesLayout::new();
    let (warp_sums, total) = unsafe { (layout.warp_sums.bind(), layout.total.bind()) };
    let slot = device::block_idx_x() as u64;
    let label = unsafe { params.slot_labels.read(slot) } as u64;
    let mut before_chunk = unsafe { params.starts.read(slot) };
    let mut chunk = 0u64;
    while chunk < params.blocks as u64 {
        let block = chunk + device::thread_idx_x() as u64;
        let count = if block < params.blocks as u64 {
            unsafe { params.rows.read(block * MAX_LABELS as u64 + label) }
        } else {
            0
        };
        let before = unsafe { exclusive_scan_add_u64(count as u64, &warp_sums) };
        if block < params.blocks as u64 {
            unsafe { params.bases.write(slot * params.blocks as u64 + block, before_chunk + before) };
        }
        if device::thread_idx_x() == MULTI_THREADS - 1 {
            unsafe { total.store(0, before + count as u64) };
        }
        unsafe { device::sync_threads() };
        before_chunk += unsafe { total.load(0) };
        unsafe { device::sync_threads() }; // the next chunk's store waits for every load
        chunk += MULTI_THREADS as u64;
    }
}

/// The `multiselect_place_<key>` kernel, the last pass when every rank is picked among its
/// label's keys: the keys of active parents written together by parent (slot), each
/// block's at the places [`bases`] gave it. No child labels, no counts: a kept key costs
/// one shared atomic (its place among the block's keys of its slot) and one store.
///
/// # Safety
/// As [`filter`] (without `slots`, `counts_out` and `labels_out`), but
/// [`PlaceLayout::bytes`] of shared memory; `labels ≤ PLACE_SLOTS` is the number of slots;
/// `bases` as [`bases`] wrote them for the same slots and blocks.
pub unsafe fn place<K: Key>(params: MultiParams<K>) {
    if params.blocks == 0 {
        return;
    }
    let layout = PlaceLayout::new();
    let (starts, cursors, slot_of) =
        unsafe { (layout.starts.bind(), layout.cursors.bind(), layout.slot_of.bind()) };
    let (warp_sums, region) = unsafe { (layout.warp_sums.bind(), layout.region.bind()) };
    let block = device::block_idx_x() as u64;
    let mut slot = device::thread_idx_x() as u64;
    while slot < params.labels as u64 {
        let start = unsafe { params.starts.read(slot) };
        let base = unsafe { params.bases.read(slot * params.blocks as u64 + block) };
        unsafe {
            starts.store(slot as usize, start);
            // A label's keys number fewer than 2^32 (the host picks from at most
            // `multiselect_pick_max`).
            cursors.store(slot as usize, (base - start) as u32);
        }
        slot += MULTI_THREADS as u64;
    }
    unsafe { load_slots(&params, &slot_of) };
    let first_labels = unsafe { FirstLabels::load(&params, &layout.table) };
    let (start, end) = unsafe { input_range(&params, &warp_sums, &region) };
    unsafe { device::sync_threads() };
    let place_tile = |keys: &[K; TILE_ITEMS], parents: &[u32; TILE_ITEMS], valid: [bool; TILE_ITEMS]| unsafe {
        place_items(params.keys_out, &slot_of, &starts, &cursors, keys, parents, valid)
    };
    let first = |tile_start: u64| tile_start + device::thread_idx_x() as u64;
    if params.labels_in.is_null() {
        let vectors = params.keys.address().is_multiple_of(16);
        // The data is read once, and the kept keys' writes are scattered over every active
        // label's region: the data goes through L2 evicting first, so that a partly
        // written sector of the output stays there until more of it is written. (ncu on an
        // H100, runs 226 and 230, not one call: 100 labels from 2^28 keys 484 → 457 µs,
        // 1000 labels 1957 → 1838 µs; the count beside them 438 and 431.)
        let load = |at: u64| unsafe { load_any_order::<K, true>(params.keys, at, end, vectors) };
        let labels = |keys: &[K; TILE_ITEMS]| {
            let mut parents = [0u32; TILE_ITEMS];
            unroll_items!(i => { parents[i] = unsafe { first_labels.label_of(keys[i]) }; });
            parents
        };
        // As in the count: whole tiles with no test of each key's place, tile t + 1 loaded
        // while tile t is placed, then the last, partial tile.
        let mut next = if start < end { load(start) } else { [K::default(); TILE_ITEMS] };
        let mut tile_start = start;
        while tile_start + TILE <= end {
            let keys = next;
            if tile_start + TILE < end {
                next = load(tile_start + TILE);
            }
            place_tile(&keys, &labels(&keys), [true; TILE_ITEMS]);
            tile_start += TILE;
        }
        if tile_start < end {
            place_tile(&next, &labels(&next), valid_items(first(tile_start), end));
        }
    } else {
        let mut tile_start = start;
        while tile_start < end {
            let keys = unsafe { load_keys(params.keys, tile_start, end) };
            let parents = unsafe { load_keys(params.labels_in, tile_start, end) };
            place_tile(&keys, &parents, valid_items(first(tile_start), end));
            tile_start += TILE;
        }
    }
}

/// Which of a thread's items in the tile whose first item is `first` lie before `end`.
#[inline(always)]
fn valid_items(first: u64, end: u64) -> [bool; TILE_ITEMS] {
    let mut valid = [false; TILE_ITEMS];
    unroll_items!(i => { valid[i] = first + (i as u64) * (TILE_THREADS as u64) < end; });
    valid
}

/// [`place`]'s work on one tile: the `valid` items whose parent has a slot written at
/// their slot's cursor. In three steps, each over all items, so that the items' shared
/// atomics are in flight together and then their stores (one item after another, each
/// waiting on its own atomic and a global load of its base, took about 0.17 ms of a 2^28
/// pass keeping 1.5 % of the keys: H200, run 206).
///
/// # Safety
/// As [`place`], after its set-up.
#[inline(always)]
unsafe fn place_items<K: Key>(
    keys_out: GlobalPtr<K>,
    slot_of: &SharedSlice<u16>,
    starts: &SharedSlice<u64>,
    cursors: &SharedSlice<u32>,
    keys: &[K; TILE_ITEMS],
    parents: &[u32; TILE_ITEMS],
    valid: [bool; TILE_ITEMS],
) {
    let mut slots = [NO_SLOT; TILE_ITEMS];
    unroll_items!(i => {
        if valid[i] {
            slots[i] = unsafe { slot_of.load(parents[i] as usize) };
        }
    });
    let mut at = [0u64; TILE_ITEMS];
    unroll_items!(i => {
        if slots[i] != NO_SLOT {
            at[i] = unsafe { cursors.atomic_add(slots[i] as usize, 1) } as u64;
        }
    });
    unroll_items!(i => {
        if slots[i] != NO_SLOT {
            unsafe { keys_out.write(starts.load(slots[i] as usize) + at[i], keys[i]) };
        }
    });
}

/// The `multiselect_block_counts_<key>` kernel (a block per count row): `counts_out[b]` =
/// block `b`'s count of the active labels in the previous pass, which is what block `b`
/// of the next filter keeps.
///
/// # Safety
/// [`MULTI_THREADS`] threads, [`BlockCountsLayout::bytes`] of shared memory, `grid.x =
/// blocks`; `rows` as the previous pass wrote them (`parent_labels` entries per row).
pub unsafe fn block_counts<K: Key>(params: MultiParams<K>) {
    let layout = BlockCountsLayout::new();
    let warp_sums = unsafe { layout.warp_sums.bind() };
    let row = device::block_idx_x() as u64 * MAX_LABELS as u64;
    let mut sum = 0u32;
    let mut label = device::thread_idx_x() as usize;
    while label < params.parent_labels as usize {
        if unsafe { params.active.read(label as u64 / 32) } >> (label % 32) & 1 != 0 {
            sum += unsafe { params.rows.read(row + label as u64) };
        }
        label += MULTI_THREADS as usize;
    }
    // A block's count is below 2^32 (it reads fewer keys), so 32-bit sums suffice.
    let sum = unsafe { warp::reduce_add_u32(sum) };
    if device::lane_id() == 0 {
        unsafe { warp_sums.store(device::warp_id() as usize, sum) };
    }
    unsafe { device::sync_threads() };
    if device::thread_idx_x() == 0 {
        let mut total = 0u64;
        for w in 0..TILE_WARPS {
            total += unsafe { warp_sums.load(w) } as u64;
        }
        unsafe { params.counts_out.write(device::block_idx_x() as u64, total) };
    }
}

/// The `multiselect_totals_<key>` kernel: adds to `totals[l]` the counts of label `l`
/// (`l < labels`) in [`TOTALS_ROWS`] blocks' rows (`grid.y` covers the blocks).
///
/// # Safety
/// [`SMALL_THREADS`] threads per block, `grid.x ≥ labels / SMALL_THREADS`, `grid.y ≥
/// blocks / TOTALS_ROWS`; `rows` as the pass before wrote them; `totals` cleared.
pub unsafe fn totals<K: Key>(params: MultiParams<K>) {
    let label = device::global_thread_idx();
    if label >= params.labels as u64 {
        return;
    }
    let first = device::block_idx_y() as u64 * TOTALS_ROWS as u64;
    let last = (first + TOTALS_ROWS as u64).min(params.blocks as u64);
    let mut sum = 0u64;
    let mut block = first;
    while block < last {
        sum += unsafe { params.rows.read(block * MAX_LABELS as u64 + label) } as u64;
        block += 1;
    }
    if sum != 0 {
        unsafe { device::global_atomic_add_u64(params.totals.as_ptr().add(label as usize), sum) };
    }
}

/// The `multiselect_pick_<key>` kernel (a block per wanted rank): the key at the pick's
/// place among its label's keys, by a radix select over their ordered bits less `low`:
/// per 8-bit digit, top first, a histogram of the keys that share the digits chosen so
/// far, a block scan, and the digit whose keys hold the place. While more than
/// [`PICK_MAX`] keys share the digits, each digit reads them from global memory (the
/// label's keys, just written, mostly from L2); then the keys left are gathered into
/// shared memory and the rest of the digits read them there.
///
/// # Safety
/// [`SMALL_THREADS`] threads, [`PickLayout::bytes`] of shared memory, a block per pick;
/// each pick's keys lie inside `keys` and in its range, `offset < len`.
pub unsafe fn pick<K: Key>(params: PickParams<K>) {
    let layout = PickLayout::new();
    let (bits, histogram) = unsafe { (layout.bits.bind(), layout.histogram.bind()) };
    let (warp_sums, choice, cursor) =
        unsafe { (layout.warp_sums.bind(), layout.choice.bind(), layout.cursor.bind()) };
    let which = device::block_idx_x() as u64;
    let pick = unsafe { params.picks.read(which) };
    let thread = device::thread_idx_x() as u64;
    let relative =
        |i: u64| unsafe { params.keys.read(pick.start + i) }.to_ordered().to_u64().wrapping_sub(pick.low);
    let answer = |relative: u64| K::from_ordered(K::Bits::from_u64(relative.wrapping_add(pick.low)));
    // The digits chosen so far (`prefix` under `mask`), the place left among the keys
    // that share them, and how many do.
    let mut digits = Digits { prefix: 0, mask: 0, place: pick.offset as u64, sharing: pick.len as u64 };
    let mut shift = pick.width.min(K::Bits::BITS);
    let len = pick.len as u64;
    while shift > 0 && digits.sharing > PICK_MAX as u64 {
        shift = shift.saturating_sub(8);
        unsafe { digits.choose(shift, &histogram, &warp_sums, &choice, len, relative) };
    }
    if shift == 0 {
        // Every digit chosen: the keys left are equal.
        if thread == 0 {
            unsafe { params.out.write(which, answer(digits.prefix)) };
        }
        return;
    }
    // The keys left, at most PICK_MAX, in shared memory: all of them, or those sharing the
    // digits chosen.
    if thread == 0 {
        unsafe { cursor.store(0, 0) };
    }
    unsafe { device::sync_threads() };
    for_each_key(len, relative, |key| {
        if key & digits.mask == digits.prefix {
            unsafe { bits.store(cursor.atomic_add(0, 1) as usize, key) };
        }
    });
    unsafe { device::sync_threads() };
    let stored = digits.sharing;
    while shift > 0 && digits.sharing > 1 {
        shift = shift.saturating_sub(8);
        unsafe { digits.choose(shift, &histogram, &warp_sums, &choice, stored, |i| bits.load(i as usize)) };
    }
    if digits.sharing > 1 {
        // Every digit chosen: the keys left are equal.
        if thread == 0 {
            unsafe { params.out.write(which, answer(digits.prefix)) };
        }
        return;
    }
    // The one key with the chosen digits.
    let mut i = thread;
    while i < stored {
        let key = unsafe { bits.load(i as usize) };
        if key & digits.mask == digits.prefix {
            unsafe { params.out.write(which, answer(key)) };
        }
        i += SMALL_THREADS as u64;
    }
}

/// Hands `each` the keys `key_at(i)` for this thread's `i` below `len` (from its index, a
/// block apart), sixteen loads issued before the first key is used: a block per pick reads
/// a label of many keys from global memory, and one load in flight a thread left it
/// waiting on each in turn (H100: 101 µs for two picks of a large label).
#[inline(always)]
fn for_each_key(len: u64, key_at: impl Fn(u64) -> u64, mut each: impl FnMut(u64)) {
    const LOADS: u64 = 16;
    let stride = SMALL_THREADS as u64;
    let mut i = device::thread_idx_x() as u64;
    while i + (LOADS - 1) * stride < len {
        let keys: [u64; LOADS as usize] = core::array::from_fn(|j| key_at(i + j as u64 * stride));
        // By index: iterating the array by value kept it in local memory.
        #[allow(clippy::needless_range_loop)]
        for j in 0..LOADS as usize {
            each(keys[j]);
        }
        i += LOADS * stride;
    }
    while i < len {
        each(key_at(i));
        i += stride;
    }
}

/// [`pick`]'s radix select so far.
struct Digits {
    prefix: u64,
    mask: u64,
    place: u64,
    sharing: u64,
}

impl Digits {
    /// Chooses the digit at `shift` (8 bits; digits may overlap bits chosen before, which
    /// the keys left share) among keys `key_at(0 .. len)` that share the digits so far.
    ///
    /// # Safety
    /// *Block-wide*, [`SMALL_THREADS`] threads; ends with a barrier.
    #[inline(always)]
    unsafe fn choose(
        &mut self,
        shift: u32,
        histogram: &SharedSlice<u32>,
        warp_sums: &SharedSlice<u64>,
        choice: &SharedSlice<u64>,
        len: u64,
        key_at: impl Fn(u64) -> u64,
    ) {
        let thread = device::thread_idx_x() as usize;
        unsafe { histogram.store(thread, 0) };
        unsafe { device::sync_threads() };
        for_each_key(len, key_at, |key| {
            if key & self.mask == self.prefix {
                unsafe { histogram.atomic_add((key >> shift) as usize & 0xff, 1) };
            }
        });
        unsafe { device::sync_threads() };
        let count = unsafe { histogram.load(thread) } as u64;
        let before = unsafe { exclusive_scan_add_u64(count, warp_sums) };
        if before <= self.place && self.place < before + count {
            unsafe {
                choice.store(0, thread as u64);
                choice.store(1, self.place - before);
                choice.store(2, count);
            }
        }
        unsafe { device::sync_threads() };
        self.prefix |= unsafe { choice.load(0) } << shift;
        self.mask |= 0xff << shift;
        self.place = unsafe { choice.load(1) };
        self.sharing = unsafe { choice.load(2) };
        unsafe { device::sync_threads() }; // every thread read the choice before the next
    }
}

/// The `multiselect_gather_<key>` kernel: `out[i] = keys[positions[i]]` (or at the
/// sample's positions, or by rows: [`GatherKeysParams`]), grid-stride.
///
/// # Safety
/// Every position read is inside `keys` (`keys_len > 0` for the sample); `len` entries at
/// `positions` and `out` (`period` at `positions` by rows).
pub unsafe fn gather<K: Key>(params: GatherKeysParams<K>) {
    if params.keys_len == 0 {
        return;
    }
    let stride = device::grid_dim_x() as u64 * device::block_dim_x() as u64;
    let mut i = device::global_thread_idx();
    while i < params.len {
        let (row_start, entry) = match i.checked_div(params.period) {
            None => (0, i),
            Some(row) => (row * params.row_stride, i - row * params.period),
        };
        let position = if !params.positions.is_null() {
            unsafe { params.positions.read(entry) }
        } else if params.period == 0 {
            sample_position(params.seed, i, params.keys_len)
        } else if entry < params.keys_len {
            entry
        } else {
            FILL_POSITION
        };
        let key = if position == FILL_POSITION {
            K::from_ordered(K::Bits::MAX)
        } else {
            unsafe { params.keys.read(row_start + position) }
        };
        unsafe { params.out.write(i, key) };
        i += stride;
    }
}

/// The `multiselect_sample_<key>` kernel (one block): the summary ([`SummaryWords`]) of
/// the sample's keys, which [`gather`] read at their pseudo-random places: the extremes of
/// the keys that are not NaN, then their slots (two reads of the sample, from L2). Only
/// these words go to the host: with a sample of 16 384 keys, copying the keys and summing
/// them there took about 0.15 ms of a call on the H100 machine's host (run 225), and one
/// block reading them at their places, with their positions' 64-bit remainders, 76 µs
/// (H200, run 229).
///
/// # Safety
/// [`SMALL_THREADS`] threads, [`SampleLayout::bytes`] of shared memory, one block;
/// `count` keys at `keys`; [`SummaryWords::WORDS`] words at `summary`.
pub unsafe fn sample<K: Key>(params: SampleSummaryParams<K>) {
    const { assert!(SMALL_THREADS == MULTI_THREADS) }; // `clear`'s stride
    let layout = SampleLayout::new();
    let (slots, partials) = unsafe { (layout.slots.bind(), layout.warp_partials.bind()) };
    let bits_at = |i: u64| unsafe { params.keys.read(i) }.to_ordered().to_u64();
    let finite = |bits: u64| params.has_nan == 0 || bits < params.nan;
    let (mut smallest, mut largest, mut count) = (u64::MAX, 0u64, 0u32);
    for_each_key(params.count, bits_at, |bits| {
        if finite(bits) {
            (smallest, largest, count) = (smallest.min(bits), largest.max(bits), count + 1);
        }
    });
    unsafe { clear(&slots, FIRST_SLOTS) };
    let (smallest, largest, count) = unsafe {
        (warp::reduce_min_u64(smallest), warp::reduce_max_u64(largest), warp::reduce_add_u32(count))
    };
    let warps = (SMALL_THREADS / 32) as usize;
    if device::lane_id() == 0 {
        let warp = device::warp_id() as usize;
        unsafe {
            partials.store(warp, smallest);
            partials.store(warps + warp, largest);
            partials.store(2 * warps + warp, count as u64);
        }
    }
    unsafe { device::sync_threads() };
    let (mut smallest, mut largest, mut count) = (u64::MAX, 0u64, 0u64);
    for warp in 0..warps {
        unsafe {
            smallest = smallest.min(partials.load(warp));
            largest = largest.max(partials.load(warps + warp));
            count += partials.load(2 * warps + warp);
        }
    }
    if count == 0 {
        (smallest, largest) = (0, 0);
    }
    let shift = FirstPass::slot_shift_of(smallest, largest);
    if count > 0 {
        for_each_key(params.count, bits_at, |bits| {
            if finite(bits) {
                unsafe { slots.atomic_add(((bits - smallest) >> shift) as usize, 1) };
            }
        });
    }
    unsafe { device::sync_threads() };
    let thread = device::thread_idx_x() as usize;
    if thread == 0 {
        unsafe {
            params.summary.write(SummaryWords::SMALLEST as u64, smallest);
            params.summary.write(SummaryWords::LARGEST as u64, largest);
            params.summary.write(SummaryWords::FINITE as u64, count);
        }
    }
    let mut slot = thread;
    while slot < FIRST_SLOTS {
        unsafe { params.summary.write((SummaryWords::SLOTS + slot) as u64, slots.load(slot) as u64) };
        slot += SMALL_THREADS as usize;
    }
}
