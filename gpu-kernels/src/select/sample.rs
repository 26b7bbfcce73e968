//! SampleSelect (Ribizel & Anzt) and QuickSelect: the element of rank `k`, one level's
//! approximation of it, and the top `k` through the fused filter.
//!
//! Keys are compared as *rank bits*: ordered bits, complemented for "largest first", so the
//! wanted element is always the `k`-th smallest rank (`k` counted from 1 here). Each level
//! works on the level's candidates (first the data, then a candidate buffer):
//!
//! 1. **sample** (`sample_select_sample_<key>`, one block): a pseudo-random sample of the
//!    candidates, sorted in shared memory by the block bitonic sort; `b − 1` splitters at the
//!    `i/b` percentiles, `b = 2^bucket_bits ≤ 256`. Bucket `i` holds the ranks in
//!    `[s_{i−1}, s_i)`. A splitter that repeats the one before it becomes its successor
//!    (`s + 1`), so the bucket `[s, s + 1)` holds the one value `s`: an *equality bucket*. A
//!    level whose target is such a bucket ends the selection, which is what makes duplicates
//!    cheap. When the candidates fit one sort (2048), the sample *is* the candidates: the
//!    block sort is the base case. Selection reads its answer there, and top-k sends the top
//!    `k_left` from there (`EMITTED`); approximate selection makes splitters `[v, v + 1, …]`.
//!    QuickSelect (`SINGLE_PIVOT`) takes the sample's median `p` and the splitters
//!    `[p, p + 1, p + 1]`: a three-way partition.
//! 2. **count** (`sample_select_count_<key>`): each input walks the splitters stored as an
//!    implicit binary search tree (node `i`, children `2i + 1` and `2i + 2`) in shared memory
//!    — branch-free, one compare per level, a tile's inputs level by level together, the top
//!    three levels from registers — counts its bucket in a shared histogram (runs of
//!    one bucket add with one atomic; or, as an option, warp-aggregated through
//!    `match.any.sync`), and stores its bucket as a one-byte *oracle*. Each block publishes
//!    its cumulative histogram, and its counts to the level's totals.
//! 3. **choose** (`sample_select_choose_<key>`, one block): the target bucket (the one
//!    holding the `k`-th smallest rank), the blocks' output offsets (exclusive scans over
//!    blocks: the reduce step), and the next level.
//! 4. **filter**: each block reads its oracles and copies the target bucket's inputs to the
//!    next candidate buffer. Selection needs no order among them: `sample_select_gather_<key>`
//!    reads sixteen oracles per load and reserves places per warp, without block barriers.
//!    Top-k (`EMIT`, `sample_select_filter_<key>`) keeps input order, so that ties resolve by
//!    index: the buckets before the target go straight to the output (the paper's fusion),
//!    and a final level sends the target's first inputs there.
//!
//! Exact selection's first level may be a *bracket* ([`flags::BRACKET`]): the sample (up to
//! [`BRACKET_SAMPLE`] keys, larger than the other levels', not sorted: the two keys are
//! selected where they lie, [`select_two_places`]) gives
//! two keys either side of the wanted rank's estimate, and `sample_select_bracket_<key>`
//! counts the keys below, at and above them and copies those strictly between to a
//! candidate buffer in the same read, with no oracles and no filter pass; the usual levels
//! go on from there.
//!
//! Approximate selection runs sample and count (without oracles) once, then
//! `sample_select_nearest_<key>`: the sample value whose exact rank range (from the counts)
//! is nearest to `k`.
//!
//! The host queues levels without reading anything back; each level's state lives in device
//! memory ([`SampleLevel`]), kernels of levels that are not reached return at once, and the
//! host checks [`SampleOutcome::done`] only after the levels it expects to need. A target
//! bucket larger than the candidate buffers (a sample so unrepresentative that it does not
//! happen in practice) makes the next level draw a new sample of the same candidates.

use crate::block::bitonic_sort::{BlockSortLayout, MAX_BLOCK_SORT_LEN, sort_capacity, sort_keys};
use crate::block::places::{TwoPlacesLayout, select_two_places};
use crate::block::tiles::{
    BucketRuns, HISTOGRAM_BUCKETS, TILE, TILE_COUNT_SET, TILE_ITEMS, TILE_THREADS, TILE_WARPS, block_range,
    load_keys, load_tile_vectors, place_in_order, publish_histogram, scan_block_offsets, unroll_items,
};
use crate::device::{self, SharedLayout, SharedRegion, SharedSlice};
use crate::key::{Key, OrderedBits};
use crate::params::{GlobalPtr, Order};
use crate::warp::{self, bitonic::WarpPairs};

/// Threads per block of every SampleSelect kernel but the sample kernel.
pub const SAMPLE_THREADS: u32 = TILE_THREADS;
/// Threads of the sample kernel's one block: two sample keys each. Its sort is a chain of
/// short dependent steps (66 compare-exchange stages for 2048 keys); 32 warps hide their
/// latencies where 8 warps of eight keys each waited on them.
pub const SAMPLE_SORT_THREADS: u32 = 1024;
/// Sample keys each thread of the sample kernel holds.
const SAMPLE_KEYS_PER_THREAD: usize = (MAX_BLOCK_SORT_LEN / SAMPLE_SORT_THREADS) as usize;
/// The largest sample of a bracket's level ([`flags::BRACKET`]): four times [`MAX_SAMPLE`],
/// eight keys a thread of the sample kernel. Only two of its keys become splitters, found
/// by selection ([`select_two_places`]), not a sort; a bracket holds about `8·σ/√sample` of
/// the keys: a sample of 8192 keeps half what one of 2048 keeps (4.4 % of a median's input,
/// not 8.8 %), so the pass writes half as many and the next level counts half as many.
pub const BRACKET_SAMPLE: u32 = 4 * MAX_SAMPLE;
/// Sample keys each thread of the sample kernel holds at a bracket's level.
const BRACKET_KEYS_PER_THREAD: usize = (BRACKET_SAMPLE / SAMPLE_SORT_THREADS) as usize;
/// Blocks that draw a sample together when the host launches the sample kernel with more
/// than one ([`SampleParams::draws`]): each reads its share of the sample's random
/// positions into a buffer (256 keys a block for [`BRACKET_SAMPLE`]) and the last block to
/// finish works on the sample from there. One block alone keeps only so many random reads
/// in flight: the bracket's 8192 took it about 20 µs from an H200's memory.
pub const SAMPLE_DRAW_BLOCKS: u32 = 32;
/// The most buckets of approximate selection (which keeps no oracles).
pub const MAX_BUCKETS: usize = 1 << MAX_BUCKET_BITS;
/// The most bucket bits of approximate selection.
pub const MAX_BUCKET_BITS: u32 = 10;
/// The most bucket bits of exact selection and top-k: one-byte oracles, and one histogram
/// bucket per thread for the blocks' cumulative histograms.
pub const MAX_EXACT_BUCKET_BITS: u32 = 8;
/// The largest sample, and the most candidates the base case sorts: one block sort.
pub const MAX_SAMPLE: u32 = MAX_BLOCK_SORT_LEN;
/// Bits of the window pass of approximate selection: its tree's depth.
pub const WINDOW_BITS: u32 = 6;
/// Consecutive splitters the window pass compares against (one tree of depth
/// [`WINDOW_BITS`]); sample noise moves a splitter's rank by about `n / √sample`, and
/// ±31 splitters of 1024 cover three times that for a sample of 2048.
pub const WINDOW_SPLITTERS: u32 = (1 << WINDOW_BITS) - 1;
/// The most blocks a count or filter launch may have.
pub const MAX_SAMPLE_BLOCKS: u32 = 1024;
/// Level states the host provides: the most levels one selection may take.
pub const LEVEL_SLOTS: usize = 64;
/// Entries of the splitter array: two sets of [`MAX_BUCKETS`] by level parity, then one flag
/// per splitter of the latest sample (1: a sampled value; 0: a successor made for an
/// equality bucket).
pub const SPLITTER_SLOTS: usize = 3 * MAX_BUCKETS;

const _: () = assert!(1 << MAX_EXACT_BUCKET_BITS == HISTOGRAM_BUCKETS);

/// Where a level's candidates are: [`SampleLevel::source`].
pub mod source {
    /// The level is not reached.
    pub const NONE: u32 = 0;
    /// All of the data.
    pub const DATA: u32 = 1;
    /// Candidate buffer 0.
    pub const BUFFER_0: u32 = 2;
    /// Candidate buffer 1.
    pub const BUFFER_1: u32 = 3;
}

/// What a level's choose kernel decided: [`SampleDecision::action`].
pub mod action {
    /// Not decided yet (the count runs).
    pub const PENDING: u32 = 0;
    /// The target bucket becomes the next level's candidates.
    pub const NEXT: u32 = 1;
    /// The selection ends here: the answer is known, and with `EMIT` the filter sends the
    /// target's first inputs to the output.
    pub const FINISH: u32 = 2;
    /// The target bucket does not fit a candidate buffer: the next level samples the same
    /// candidates again.
    pub const RETRY: u32 = 3;
    /// Top-k's base case: the sample kernel sent the level's outputs itself and ended the
    /// run; the level's other kernels return at once.
    pub const EMITTED: u32 = 4;
}

/// Bits of [`SampleParams::flags`].
pub mod flags {
    /// Top-k: better buckets and the final ties go to the output, with their indices.
    pub const EMIT: u32 = 1;
    /// Count with warp-aggregated atomics (`match.any.sync`) instead of per-thread runs.
    pub const WARP_AGGREGATED: u32 = 2;
    /// One level without oracles, for approximate selection.
    pub const APPROXIMATE: u32 = 4;
    /// QuickSelect: one pivot (the sample median) and a three-way partition.
    pub const SINGLE_PIVOT: u32 = 8;
    /// With `APPROXIMATE`: `sample_select_window_<key>` counts only against the
    /// [`WINDOW_SPLITTERS`](super::WINDOW_SPLITTERS) splitters around the wanted rank's
    /// estimate; the nearest kernel answers only when that proves the answer the full count
    /// would give (else a full count follows).
    pub const WINDOW: u32 = 16;
    /// Bucket select: the splitters divide the level's key range (the data's minimum to
    /// maximum, found by `sample_select_range_<key>`, then the target bucket's bounds)
    /// into equal widths instead of coming from a sample; see [`equal_width_splitter`](super::equal_width_splitter).
    pub const EQUAL_WIDTH: u32 = 32;
    /// Exact selection's first level brackets the wanted rank between two sample keys
    /// (Floyd–Rivest): the sample kernel makes the splitters [`bracket_splitter`](super::bracket_splitter),
    /// and `sample_select_bracket_<key>` counts the buckets and copies the keys strictly
    /// between the two in one pass, with no oracles and no filter pass. With `bucket_bits = 3`.
    /// With `EMIT` (top-k of a small `k`), `sample_select_bracket_top_k_<key>` copies every
    /// key below the upper bound instead, and `sample_select_bracket_place_<key>` puts them
    /// in input order (see [`bracket_top_k`](super::bracket_top_k)).
    pub const BRACKET: u32 = 64;

    /// Whether a selection with `flags` ends at a level after the first (or at level 0,
    /// `len` keys being few enough for the base case) by the radix finish: plain exact
    /// selection (none of `EMIT`, `APPROXIMATE`, `SINGLE_PIVOT`, `EQUAL_WIDTH`, `BRACKET`)
    /// and `len` candidates at most `radix_finish` (`SampleParams::radix_finish`, 0: never).
    /// The sample kernel and the host's count of the levels to expect both ask this.
    ///
    /// ```
    /// use gpu_select_kernels::select::sample::flags::{self, radix_finishes};
    ///
    /// assert!(radix_finishes(0, 1, 30_000, 1 << 15));
    /// assert!(!radix_finishes(0, 0, 30_000, 1 << 15)); // level 0: only the base case's few
    /// assert!(radix_finishes(0, 0, 2048, 1 << 15));
    /// assert!(!radix_finishes(flags::EMIT, 1, 30_000, 1 << 15)); // top-k
    /// assert!(!radix_finishes(0, 1, 1000, 0)); // off
    /// ```
    pub const fn radix_finishes(flags: u32, level: u32, len: u64, radix_finish: u32) -> bool {
        let plain_selection = flags & (EMIT | APPROXIMATE | SINGLE_PIVOT | EQUAL_WIDTH | BRACKET) == 0;
        let at_level = level > 0 || len <= super::MAX_SAMPLE as u64;
        plain_selection && at_level && len <= radix_finish as u64
    }
}

/// Levels of bucket select that split key *values* into equal widths; later levels split
/// the rank bits evenly, so that a skewed range (an outlier far from the rest) still ends
/// in at most `bits / 8` more levels.
pub const VALUE_WIDTH_LEVELS: u32 = 16;

/// The state of one level in device memory: the sample kernel initialises level 0; the
/// choose kernel of level `L` writes its decision and level `L + 1`. The host clears all
/// levels to zero before the first launch.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct SampleLevel {
    /// [`source`]: where the candidates are.
    pub source: u32,
    /// How many samples of these candidates were drawn before (see [`action::RETRY`]).
    pub attempt: u32,
    /// Number of candidates.
    pub len: u64,
    /// The wanted element is the `k_left`-th smallest rank among them (from 1).
    pub k_left: u64,
    /// Outputs written by earlier levels (`EMIT`).
    pub written: u64,
    /// The choose kernel's decision.
    pub decision: SampleDecision,
    /// The lowest rank bits the candidates may have (widened to 64): the target bucket's
    /// lower splitter (`EQUAL_WIDTH`: the range's lowest key). Level 0's: 0, the
    /// bits of the lowest key there is, bar `EQUAL_WIDTH`.
    pub low: u64,
    /// The highest: one below the target bucket's upper splitter. Level 0's: the bits'
    /// `MAX`, bar `EQUAL_WIDTH`.
    pub high: u64,
}

/// What a level's choose kernel decides; its filter acts on it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct SampleDecision {
    /// [`action`].
    pub action: u32,
    /// The target bucket.
    pub target: u32,
    /// Candidates in buckets before the target.
    pub better: u64,
    /// Candidates in the target bucket.
    pub target_len: u64,
    /// On [`action::FINISH`] with `EMIT`: how many target inputs (first in input order) go
    /// to the output.
    pub ties_taken: u64,
}

/// The result the host reads back.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct SampleOutcome {
    /// 1 once the selection has ended.
    pub done: u32,
    /// Levels it took (approximate selection: passes over the data, 1 or 2 with `WINDOW`).
    pub levels: u32,
    /// The answer's rank bits (widened to 64): the selected element, or for approximate
    /// selection the chosen splitter.
    pub value: u64,
    /// Approximate selection: the rank (from 0) of `value` nearest to the wanted one.
    pub rank: u64,
}

/// Parameters of every SampleSelect kernel.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct SampleParams<K> {
    /// The input keys.
    pub data: GlobalPtr<K>,
    /// Number of inputs.
    pub len: u64,
    /// The wanted element is the `k`-th smallest rank (from 1); with `EMIT`, the top `k`.
    pub k: u64,
    /// `EMIT`: `k` output keys (bit-exact copies of inputs).
    pub keys_out: GlobalPtr<K>,
    /// `EMIT`: their indices in the input.
    pub indices_out: GlobalPtr<u64>,
    /// [`LEVEL_SLOTS`] level states, cleared before the first launch.
    pub levels: GlobalPtr<SampleLevel>,
    /// The outcome, cleared before the first launch.
    pub outcome: GlobalPtr<SampleOutcome>,
    /// [`SPLITTER_SLOTS`] splitters (rank bits widened to 64), sorted.
    pub splitters: GlobalPtr<u64>,
    /// `2 × MAX_BUCKETS` bucket totals by level parity; the set of level 0 cleared before the first
    /// launch (each choose kernel clears the next level's).
    pub totals: GlobalPtr<u64>,
    /// `blocks × 256`: each block's cumulative histogram of the current level.
    pub cumulative: GlobalPtr<u32>,
    /// `blocks`: where each block's better inputs start, among the level's (top-k's
    /// bracket: `blocks × 8`, per warp, the keys it kept).
    pub better_offsets: GlobalPtr<u64>,
    /// `blocks`: where each block's target inputs start, among the level's (top-k's
    /// bracket: `blocks × 8`, per warp, its keys equal to the upper bound).
    pub tie_offsets: GlobalPtr<u64>,
    /// One bucket byte per candidate (`len` bytes).
    pub oracles: GlobalPtr<u8>,
    /// The two candidate buffers' keys, `capacity` each.
    pub buffer_keys: [GlobalPtr<K>; 2],
    /// Their indices (`EMIT` only; null otherwise).
    pub buffer_indices: [GlobalPtr<u64>; 2],
    /// Candidates each buffer holds (at least [`MAX_SAMPLE`]).
    pub capacity: u64,
    /// Seed of the sample positions.
    pub seed: u64,
    /// `EQUAL_WIDTH`: two words, cleared before the first launch, where
    /// `sample_select_range_<key>` leaves the data's range: the largest complement of a
    /// rank, then the largest rank.
    pub range: GlobalPtr<u64>,
    /// Two words, cleared before the first launch. Top-k's bracket ([`flags::BRACKET`] with
    /// [`flags::EMIT`]): the keys the bracket pass kept (places taken in candidate buffer
    /// 1), then the runs it copied them out in. Approximate selection's window pass: the
    /// blocks that have finished, then unused.
    pub kept: GlobalPtr<u64>,
    /// Top-k's bracket: where each copied-out run of kept keys lies, `run_capacity` of them.
    pub runs: GlobalPtr<KeptRun>,
    /// Runs `runs` holds.
    pub run_capacity: u64,
    /// A sample drawn by several blocks ([`SAMPLE_DRAW_BLOCKS`]): the keys at its positions,
    /// [`BRACKET_SAMPLE`] of them (null when the sample kernel runs as one block).
    pub draws: GlobalPtr<K>,
    /// The blocks of a sample launch that have drawn their share: cleared before the first
    /// launch, and again by each launch's last block.
    pub draws_done: GlobalPtr<u64>,
    /// Blocks of the count and filter launches (at most [`MAX_SAMPLE_BLOCKS`]).
    pub blocks: u32,
    /// The level this launch works on.
    pub level: u32,
    /// [`Order::to_raw`].
    pub order: u32,
    /// Buckets are `2^bucket_bits`: 1 to [`MAX_EXACT_BUCKET_BITS`], or to
    /// [`MAX_BUCKET_BITS`] with `APPROXIMATE`.
    pub bucket_bits: u32,
    /// Sample size, 2 to [`MAX_SAMPLE`] (to [`BRACKET_SAMPLE`] at a bracket's level).
    pub sample_size: u32,
    /// A selection's level whose candidates number at most this finishes in the sample
    /// kernel's block (see [`flags::radix_finishes`]): the rank's key selected by radix
    /// digits over the candidates where they lie ([`select_two_places`]), no sample, count,
    /// choose or filter, or the base case's sort (plain selection only; 0: never).
    pub radix_finish: u32,
    /// [`flags`].
    pub flags: u32,
}

impl<K: Key> SampleParams<K> {
    fn has(&self, flag: u32) -> bool {
        self.flags & flag != 0
    }

    /// Rank bits are ordered bits xor this.
    fn flip(&self) -> K::Bits {
        if Order::from_raw(self.order) == Order::Largest { K::Bits::MAX } else { K::Bits::MIN }
    }

    /// How many candidates the level has.
    fn candidates(&self, level: &SampleLevel) -> u64 {
        if level.source == source::DATA { self.len } else { level.len }
    }

    /// The candidates of `level`: keys, indices (null: positions), count.
    fn storage(&self, level: &SampleLevel) -> (GlobalPtr<K>, GlobalPtr<u64>, u64) {
        let (keys, indices) = match level.source {
            source::DATA => (self.data, GlobalPtr::null()),
            source::BUFFER_0 => (self.buffer_keys[0], self.buffer_indices[0]),
            _ => (self.buffer_keys[1], self.buffer_indices[1]),
        };
        (keys, indices, self.candidates(level))
    }

    /// The splitter set of this launch's level.
    fn level_splitters(&self) -> GlobalPtr<u64> {
        self.splitters.offset((self.level as u64 % 2) * MAX_BUCKETS as u64)
    }

    /// The bucket totals of level `level`.
    fn level_totals(&self, level: u32) -> GlobalPtr<u64> {
        self.totals.offset((level as u64 % 2) * MAX_BUCKETS as u64)
    }
}

/// The buffer the next level's candidates go to.
fn next_source(current: u32) -> u32 {
    if current == source::BUFFER_0 { source::BUFFER_1 } else { source::BUFFER_0 }
}

/// The smallest rank bits above `bits` (`MAX` stays).
fn successor<B: OrderedBits>(bits: B) -> B {
    if bits == B::MAX { bits } else { B::from_u64(bits.to_u64() + 1) }
}

/// Position of sample `i` among `len` candidates: splitmix64 of the seed, level, attempt and
/// `i`, reduced modulo `len` (sampling with replacement).
fn sample_position(seed: u64, level: u32, attempt: u32, i: u32, len: u64) -> u64 {
    let mut z = seed
        .wrapping_add((level as u64) << 40 | (attempt as u64) << 20 | i as u64)
        .wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (z ^ (z >> 31)) % len
}

/// Shared memory of the sample kernel.
#[derive(Clone, Copy, Debug)]
pub struct SampleSortLayout<B> {
    /// The block sort's slots (keys only), for the largest sample ([`BRACKET_SAMPLE`]).
    pub sort: BlockSortLayout<B>,
    /// The sorted sample, or a bracket's sample as drawn: the sort's own slots, written once
    /// the sort is done (64 KiB for 64-bit keys, within what every GPU from sm_80 on gives
    /// a block).
    pub sorted: SharedRegion<B>,
    /// A bracket's selection of its two keys, and the radix finish's of its one.
    pub places: TwoPlacesLayout,
    /// Per-warp sums of top-k's base case, which places its outputs in input order.
    pub warp_sums: SharedRegion<u64>,
    /// Bytes to ask for at launch.
    pub bytes: usize,
}

impl<B> SampleSortLayout<B> {
    /// The layout.
    pub const fn new() -> Self {
        let (layout, sort) = BlockSortLayout::keys_after(SharedLayout::new(), BRACKET_SAMPLE);
        let (layout, places) = TwoPlacesLayout::after(layout);
        let (layout, warp_sums) = layout.push::<u64>((SAMPLE_SORT_THREADS / device::WARP_SIZE) as usize);
        let sorted = sort.bits;
        Self { sort, sorted, places, warp_sums, bytes: layout.bytes() }
    }
}

impl<B> Default for SampleSortLayout<B> {
    fn default() -> Self {
        Self::new()
    }
}

/// Shared memory of the count and filter kernels.
#[derive(Clone, Copy, Debug)]
pub struct SamplePassLayout<B> {
    /// The splitters as an implicit search tree.
    pub tree: SharedRegion<B>,
    /// The block's bucket histogram.
    pub histogram: SharedRegion<u32>,
    /// Per-warp sums for block scans.
    pub warp_sums: SharedRegion<u64>,
    /// Two sets of tile counts for the ordered placement.
    pub tile_counts: SharedRegion<u32>,
    /// Bytes to ask for at launch.
    pub bytes: usize,
}

impl<B> SamplePassLayout<B> {
    /// The layout.
    pub const fn new() -> Self {
        let (layout, tree) = SharedLayout::new().push::<B>(MAX_BUCKETS);
        let (layout, histogram) = layout.push::<u32>(MAX_BUCKETS);
        let (layout, warp_sums) = layout.push::<u64>(TILE_WARPS);
        let (layout, tile_counts) = layout.push::<u32>(2 * TILE_COUNT_SET);
        Self { tree, histogram, warp_sums, tile_counts, bytes: layout.bytes() }
    }
}

impl<B> Default for SamplePassLayout<B> {
    fn default() -> Self {
        Self::new()
    }
}

/// Shared memory of the choose kernel.
#[derive(Clone, Copy, Debug)]
pub struct SampleChooseLayout {
    /// Per-warp sums of the bucket scan.
    pub warp_sums: SharedRegion<u64>,
    /// The target bucket, its total and the candidates before it.
    pub target: SharedRegion<u64>,
    /// Per block: better inputs, then target inputs.
    pub block_counts: SharedRegion<u64>,
    /// Bytes to ask for at launch.
    pub bytes: usize,
}

impl SampleChooseLayout {
    /// The layout.
    pub const fn new() -> Self {
        let (layout, warp_sums) = SharedLayout::new().push::<u64>(TILE_WARPS);
        let (layout, target) = layout.push::<u64>(3);
        let (layout, block_counts) = layout.push::<u64>(2 * MAX_SAMPLE_BLOCKS as usize);
        Self { warp_sums, target, block_counts, bytes: layout.bytes() }
    }
}

impl Default for SampleChooseLayout {
    fn default() -> Self {
        Self::new()
    }
}

/// Reads the level of this launch; level 0 is initialised here (by the sample kernel, the
/// first of every level).
unsafe fn read_level<K: Key>(params: &SampleParams<K>) -> SampleLevel {
    if params.level == 0 {
        SampleLevel {
            source: source::DATA,
            len: params.len,
            k_left: params.k,
            low: 0,
            high: K::Bits::MAX.to_u64(),
            ..SampleLevel::default()
        }
    } else {
        unsafe { params.levels.read(params.level as u64) }
    }
}

/// The `sample_select_sample_<key>` kernel: the level's splitters, or the base case.
///
/// Launched with [`SAMPLE_DRAW_BLOCKS`] blocks (and [`SampleParams::draws`] set), a drawn
/// sample's random reads are spread over them and the last block to finish does the rest;
/// the base case, the radix finish and equal widths are block 0's alone.
///
/// # Safety
/// One block, or [`SAMPLE_DRAW_BLOCKS`] with `draws` and `draws_done` set, of
/// [`SAMPLE_SORT_THREADS`] threads and [`SampleSortLayout::bytes`] of shared memory; the
/// previous level's choose kernel has run.
// Inlined into its entry: called, it took its parameters through a stack frame.
#[inline(always)]
pub unsafe fn sample<K: Key>(params: SampleParams<K>) {
    let level_index = params.level;
    let mut level = unsafe { read_level(&params) };
    let thread = device::thread_idx_x() as usize;
    let block = device::block_idx_x();
    if level_index == 0 && params.has(flags::EQUAL_WIDTH) {
        level.low = !unsafe { params.range.read(0) };
        level.high = unsafe { params.range.read(1) };
    }
    if level_index == 0 && thread == 0 && block == 0 {
        unsafe { params.levels.write(0, level) };
    }
    if level.source == source::NONE {
        return;
    }
    // The base case: all candidates fit one sort, and the sample is all of them.
    let base = params.candidates(&level) <= MAX_SAMPLE as u64;
    // Only a sample drawn at random positions is spread over the blocks.
    let spread = device::grid_dim_x() > 1 && !base;
    if params.has(flags::EQUAL_WIDTH) && !base {
        if block == 0 {
            unsafe { equal_width_splitters(&params, level) };
        }
        return;
    }
    // Only now: picking the keys' pointer before that branch gave the kernel a stack frame.
    let flip = params.flip();
    let (keys, _, len) = params.storage(&level);
    let layout = SampleSortLayout::<K::Bits>::new();
    if flags::radix_finishes(params.flags, level_index, len, params.radix_finish) {
        if block != 0 {
            return;
        }
        // Few enough candidates that one block reads them all a few times (from L2, where
        // the last filter left them) sooner than a level's four launches and the next; and
        // sooner than the base case's sort. The digits they share (the level's bucket is
        // narrow) are skipped.
        let place = level.k_left - 1;
        let read = |i: usize| unsafe { keys.read(i as u64) }.to_ordered().xor(flip);
        let within = [K::Bits::from_u64(level.low), K::Bits::from_u64(level.high)];
        let [answer, _] =
            unsafe { select_two_places(read, len as usize, [place, place], within, &layout.places) };
        if thread == 0 {
            unsafe { finish_selection(&params, level_index, answer.to_u64()) };
        }
        return;
    }
    if !spread && block != 0 {
        return;
    }
    let count = if base { len as u32 } else { params.sample_size };
    if spread {
        // This block's share of the positions, one key a thread, to `draws`; the last block
        // to finish goes on with all of them, read from there in slot order (the same sample
        // as one block draws).
        let share = count.div_ceil(device::grid_dim_x());
        let slot = block * share + thread as u32;
        if (thread as u32) < share && slot < count {
            let key =
                unsafe { keys.read(sample_position(params.seed, level_index, level.attempt, slot, len)) };
            unsafe { params.draws.write(slot as u64, key) };
        }
        if !unsafe { last_block_to_finish(params.draws_done.as_ptr()) } {
            return;
        }
        if thread == 0 {
            // For the next launch (stream order makes it seen): every block has counted.
            unsafe { params.draws_done.write(0, 0) };
        }
    }
    let keys = if spread { params.draws } else { keys };
    let sorted = unsafe { layout.sorted.bind() };
    let splitter_count = (1usize << params.bucket_bits) - 1;
    // The keys at `at(slot)` for the sample's `count` slots.
    let at = |slot: u32| {
        if base || spread {
            slot as u64
        } else {
            sample_position(params.seed, level_index, level.attempt, slot, len)
        }
    };
    if params.has(flags::BRACKET) && !base {
        // Two keys of the sample, selected where they lie: no sort.
        let (low, high) =
            unsafe { bracket_bounds::<K, BRACKET_KEYS_PER_THREAD>(keys, count, at, flip, &level, &layout) };
        let mut splitter = thread;
        while splitter < splitter_count {
            unsafe {
                params
                    .level_splitters()
                    .write(splitter as u64, bracket_splitter(low, high, splitter).to_u64());
                params
                    .splitters
                    .write((2 * MAX_BUCKETS + splitter) as u64, (splitter == 0 || splitter == 2) as u64);
            }
            splitter += SAMPLE_SORT_THREADS as usize;
        }
        return;
    }
    // Otherwise the whole sample, sorted into `sorted`.
    unsafe {
        sort_sample::<K, SAMPLE_KEYS_PER_THREAD>(keys, count, at, flip, &layout);
        device::sync_threads();
    }

    let emit = params.has(flags::EMIT);
    if base {
        let answer = unsafe { sorted.load(level.k_left as usize - 1) };
        if !emit && !params.has(flags::APPROXIMATE) {
            // Selection ends here; the level's other kernels see FINISH and return.
            if thread == 0 {
                unsafe { finish_selection(&params, level_index, answer.to_u64()) };
            }
            return;
        }
        if emit {
            // Top-k ends here too: the outputs are the candidates below the answer and the
            // answer's first ties, in input order, sent from here rather than through the
            // level's count, choose and filter (about 18 µs of launches on an H200).
            unsafe { emit_base_case(&params, level_index, &level, answer, &layout) };
            return;
        }
    }
    let mut thread_splitter = thread;
    while thread_splitter < splitter_count {
        let thread = thread_splitter;
        // Splitters at the percentiles; a repeat of the one before becomes its successor.
        let (splitter, sampled) = if base {
            // Exact splitters [v, v + 1, …] (top-k, approximate): the count and choose find
            // v's equality bucket.
            let answer = unsafe { sorted.load(level.k_left as usize - 1) };
            if thread == 0 { (answer, true) } else { (successor(answer), false) }
        } else if params.has(flags::SINGLE_PIVOT) {
            let pivot = unsafe { sorted.load(count as usize / 2) };
            if thread == 0 { (pivot, true) } else { (successor(pivot), false) }
        } else {
            let buckets = splitter_count + 1;
            let at = |j: usize| ((j + 1) * count as usize / buckets).min(count as usize - 1);
            let value = unsafe { sorted.load(at(thread)) };
            if thread > 0 && value == unsafe { sorted.load(at(thread - 1)) } {
                (successor(value), false)
            } else {
                (value, true)
            }
        };
        unsafe {
            params.level_splitters().write(thread as u64, splitter.to_u64());
            params.splitters.write((2 * MAX_BUCKETS + thread) as u64, sampled as u64);
        }
        thread_splitter += SAMPLE_SORT_THREADS as usize;
    }
}

/// Top-k's base case at level `level_index`: of the level's candidates (at most
/// [`MAX_SAMPLE`], in input order), sends those whose rank bits are below `answer` (the
/// `k_left`-th smallest) and then `answer`'s first ties to the output after the `written`
/// ones — in input order, the places the count, choose and filter would give them — and
/// ends the run (`EMITTED`).
///
/// # Safety
/// *Block-wide*, [`SAMPLE_SORT_THREADS`] threads; the level's candidates number at most
/// `2 · SAMPLE_SORT_THREADS`; `answer` is the rank bits of their `k_left`-th smallest.
#[inline(always)]
unsafe fn emit_base_case<K: Key>(
    params: &SampleParams<K>,
    level_index: u32,
    level: &SampleLevel,
    answer: K::Bits,
    layout: &SampleSortLayout<K::Bits>,
) {
    const PER_THREAD: usize = (MAX_SAMPLE / SAMPLE_SORT_THREADS) as usize;
    let warp_sums = unsafe { layout.warp_sums.bind() };
    let flip = params.flip();
    let (keys, indices, len) = params.storage(level);
    let first = device::thread_idx_x() as u64 * PER_THREAD as u64;
    // The thread's run of candidates; 0 past the end (neither better nor a tie).
    let mut candidates = [K::default(); PER_THREAD];
    let (mut better, mut ties) = ([false; PER_THREAD], [false; PER_THREAD]);
    let mut counts = 0u64;
    for j in 0..PER_THREAD {
        let at = first + j as u64;
        if at < len {
            candidates[j] = unsafe { keys.read(at) };
            let bits = candidates[j].to_ordered().xor(flip);
            better[j] = bits < answer;
            ties[j] = bits == answer;
            // Better candidates in the high half, ties in the low: at most 2048 of each.
            counts += (better[j] as u64) << 32 | ties[j] as u64;
        }
    }
    let before = unsafe { crate::block::scan::exclusive_scan_add_u64(counts, &warp_sums) };
    if device::thread_idx_x() == SAMPLE_SORT_THREADS - 1 {
        unsafe { warp_sums.store(0, before + counts) };
    }
    unsafe { device::sync_threads() };
    let totals = unsafe { warp_sums.load(0) };
    let (better_total, tie_total) = (totals >> 32, totals & u32::MAX as u64);
    let ties_taken = level.k_left - better_total;
    let (mut better_rank, mut tie_rank) = (before >> 32, before & u32::MAX as u64);
    for j in 0..PER_THREAD {
        let at = first + j as u64;
        let index = if indices.is_null() {
            at
        } else if at < len {
            unsafe { indices.read(at) }
        } else {
            0
        };
        if better[j] {
            unsafe { emit_output(params, level.written + better_rank, candidates[j], index) };
            better_rank += 1;
        } else if ties[j] {
            if tie_rank < ties_taken {
                unsafe { emit_output(params, level.written + better_total + tie_rank, candidates[j], index) };
            }
            tie_rank += 1;
        }
    }
    if device::thread_idx_x() == 0 {
        let decision = SampleDecision {
            action: action::EMITTED,
            target: 0,
            better: better_total,
            target_len: tie_total,
            ties_taken,
        };
        let outcome =
            SampleOutcome { done: 1, levels: level_index + 1, value: answer.to_u64(), rank: params.k - 1 };
        unsafe {
            params.outcome.write(0, outcome);
            let slot = params.levels.as_ptr().add(level_index as usize);
            core::ptr::addr_of_mut!((*slot).decision).write(decision);
        }
    }
}

/// Ends a selection at level `level_index` with the key of rank bits `value`: the outcome,
/// and `FINISH` for the level's other kernels, which then return at once.
///
/// # Safety
/// One thread; the level's state is this launch's to write.
unsafe fn finish_selection<K: Key>(params: &SampleParams<K>, level_index: u32, value: u64) {
    let outcome = SampleOutcome { done: 1, levels: level_index + 1, value, rank: params.k - 1 };
    unsafe {
        params.outcome.write(0, outcome);
        let slot = params.levels.as_ptr().add(level_index as usize);
        core::ptr::addr_of_mut!((*slot).decision.action).write(action::FINISH);
    }
}

/// Reads the keys at `at(slot)` for slots `0 .. count` (`R` slots a thread, all loads
/// issued before the sort waits on any), sorts their rank bits and stores them, in order,
/// at `layout.sorted[..count]`; the caller waits for the block before reading them. By bits
/// alone: which of equal keys comes first does not matter to splitters.
///
/// # Safety
/// *Block-wide*, [`SAMPLE_SORT_THREADS`] threads; `count ≤ SAMPLE_SORT_THREADS · R ≤`
/// [`MAX_SAMPLE`]; every `at(slot)` a key of `keys`.
#[inline(always)]
unsafe fn sort_sample<K: Key, const R: usize>(
    keys: GlobalPtr<K>,
    count: u32,
    at: impl Fn(u32) -> u64,
    flip: K::Bits,
    layout: &SampleSortLayout<K::Bits>,
) {
    let sorted = unsafe { layout.sorted.bind() };
    let lane = device::lane_id() as usize;
    let warp_base = device::warp_id() as usize * 32 * R;
    let mut pairs = WarpPairs::<K::Bits, R>::padding();
    for r in 0..R {
        let slot = warp_base + r * 32 + lane;
        if slot < count as usize {
            pairs.bits[r] = unsafe { keys.read(at(slot as u32)) }.to_ordered().xor(flip);
        }
    }
    unsafe {
        sort_keys(&mut pairs, sort_capacity(count) as usize, &layout.sort);
        // `sorted` is the sort's slots: every warp is done with them before any is stored.
        device::sync_threads();
    }
    for r in 0..R {
        let slot = warp_base + r * 32 + lane;
        if slot < count as usize {
            unsafe { sorted.store(slot, pairs.bits[r]) };
        }
    }
}

/// Standard deviations of a sample quantile's rank that a bracket leaves on either
/// side of the wanted rank's estimate: a bracket misses (and the level samples again, with
/// 256 buckets) about once in 16 000 selections, and holds about `8·σ/√sample` of the keys
/// (9 % for the median with a sample of 2048).
pub const BRACKET_SIGMAS: u64 = 4;

/// The bracket of the level's rank among its candidates, from their sample of `count` keys
/// at `at(slot)`: the sample keys [`BRACKET_SIGMAS`] standard deviations of the sample
/// quantile's rank below and above the estimate (the lowest and highest rank bits past the
/// sample's ends), selected from the keys in shared memory ([`select_two_places`]).
///
/// # Safety
/// *Block-wide*, [`SAMPLE_SORT_THREADS`] threads; `2 ≤ count ≤ SAMPLE_SORT_THREADS · R`;
/// every `at(slot)` a key of `keys`.
#[inline(always)]
unsafe fn bracket_bounds<K: Key, const R: usize>(
    keys: GlobalPtr<K>,
    count: u32,
    at: impl Fn(u32) -> u64,
    flip: K::Bits,
    level: &SampleLevel,
    layout: &SampleSortLayout<K::Bits>,
) -> (K::Bits, K::Bits) {
    // Every load issued before any is used, then the keys to shared memory: the selection
    // reads them there, so that they hold no registers (64-bit keys spilled when they did).
    let mut bits = [K::Bits::MAX; R];
    let thread = device::thread_idx_x();
    for (r, slot_bits) in bits.iter_mut().enumerate() {
        let slot = r as u32 * SAMPLE_SORT_THREADS + thread;
        if slot < count {
            *slot_bits = unsafe { keys.read(at(slot)) }.to_ordered().xor(flip);
        }
    }
    let sample = unsafe { layout.sorted.bind() };
    for (r, &slot_bits) in bits.iter().enumerate() {
        let slot = r as u32 * SAMPLE_SORT_THREADS + thread;
        if slot < count {
            unsafe { sample.store(slot as usize, slot_bits) };
        }
    }
    unsafe { device::sync_threads() };
    let (low_place, high_place) = bracket_places(count as u64, level.k_left, level.len);
    let places = [low_place.unwrap_or(0), high_place.unwrap_or(0)];
    let [low, high] = unsafe {
        select_two_places(
            |i| sample.load(i),
            count as usize,
            places,
            [K::Bits::MIN, K::Bits::MAX],
            &layout.places,
        )
    };
    (
        if low_place.is_some() { low } else { K::Bits::MIN },
        if high_place.is_some() { high } else { K::Bits::MAX },
    )
}

/// The sample places (from 0, of `count` sorted) of a bracket around rank `k` (from 1) of
/// `len` candidates: [`BRACKET_SIGMAS`] standard deviations of the sample quantile's rank
/// below and above the estimate; `None` past the sample's ends.
///
/// ```
/// use gpu_select_kernels::select::sample::bracket_places;
///
/// // The median of 2^28 keys from a sample of 8192: σ = 45 places, 4σ + 1 either side.
/// assert_eq!(bracket_places(8192, 1 << 27, 1 << 28), (Some(4095 - 181), Some(4095 + 181)));
/// // Rank 1: nothing below.
/// assert_eq!(bracket_places(8192, 1, 1 << 28), (None, Some(5)));
/// ```
pub fn bracket_places(count: u64, k: u64, len: u64) -> (Option<u64>, Option<u64>) {
    // The estimate's place in the sample, and the binomial spread of a sample quantile
    // there: `√(count · q · (1 − q))` with `q = k / len`, in sample places.
    let estimate = ((k - 1) as u128 * count as u128 / len as u128) as u64;
    let variance = (estimate * (count - estimate) / count).max(1);
    let mut sigma = 1;
    while (sigma + 1) * (sigma + 1) <= variance {
        sigma += 1;
    }
    let reach = BRACKET_SIGMAS * sigma + 1;
    (estimate.checked_sub(reach), Some(estimate + reach).filter(|&place| place < count))
}

/// Splitter `j` (0 to 6) of a bracket `[low, high]`: `low`, its successor, `high` (at least
/// that successor), its successor, then `MAX` three times. The buckets they make, in order:
/// below `low`; `low` alone (an equality bucket); strictly between the two (the only bucket
/// the bracket pass keeps); `high` alone; above `high`; two empty ones; `MAX` alone. Both
/// bounds are single values, so duplicates of them end the selection at once. (One
/// splitter at a time: an array indexed by the thread gave the sample kernel a stack frame.)
///
/// ```
/// use gpu_select_kernels::select::sample::bracket_splitter;
///
/// let splitters: Vec<u32> = (0..7).map(|j| bracket_splitter(10u32, 20, j)).collect();
/// assert_eq!(splitters, [10, 11, 20, 21, u32::MAX, u32::MAX, u32::MAX]);
/// // A bracket of one value: the bucket between the bounds is empty.
/// assert_eq!(bracket_splitter(10u32, 10, 2), 11);
/// ```
pub fn bracket_splitter<B: OrderedBits>(low: B, high: B, j: usize) -> B {
    let after_low = successor(low);
    let high = if high > after_low { high } else { after_low };
    match j {
        0 => low,
        1 => after_low,
        2 => high,
        3 => successor(high),
        _ => B::MAX,
    }
}

/// Bucket select's splitter `j` (0 to `buckets − 2`) of the rank range `[low, high]`: the
/// key at `(j + 1)/buckets` of the way from the key of rank `low` to that of rank `high`,
/// in value, while `by_value` and both ends are finite; else the rank bits at that
/// fraction of the range. Nondecreasing in `j`, and inside `[low, high]`.
pub fn equal_width_splitter<K: Key>(
    low: u64,
    high: u64,
    j: u64,
    buckets: u64,
    flip: K::Bits,
    by_value: bool,
) -> u64 {
    let key_of = |rank: u64| K::from_ordered(K::Bits::from_u64(rank).xor(flip));
    let (first, last) = (key_of(low).to_f64(), key_of(high).to_f64());
    if by_value && first.is_finite() && last.is_finite() {
        // Halved, so that the width of the widest ranges does not overflow; the doubling
        // is exact, and every step is monotone in the fraction.
        let fraction = (j + 1) as f64 / buckets as f64;
        let value = 2.0 * (first / 2.0 + (last / 2.0 - first / 2.0) * fraction);
        let rank = K::from_f64(value).to_ordered().xor(flip).to_u64();
        // Not `clamp`: its `low <= high` assertion would put a panic's arguments in a
        // stack frame on the GPU.
        return rank.max(low).min(high);
    }
    // `width · (j + 1) / buckets` without 128-bit arithmetic (its division needs a stack
    // frame on the GPU); `buckets` is a power of two.
    let (width, step) = (high - low, j + 1);
    let bits = buckets.trailing_zeros();
    low + (width >> bits) * step + (((width & (buckets - 1)) * step) >> bits)
}

/// The sample kernel's work under `EQUAL_WIDTH` (beyond the base case): the level's
/// splitters from its rank range; a splitter that repeats the one before becomes its
/// successor (an equality bucket), as with a sample.
///
/// # Safety
/// As [`sample`].
#[inline(always)]
unsafe fn equal_width_splitters<K: Key>(params: &SampleParams<K>, level: SampleLevel) {
    let splitter_count = (1u64 << params.bucket_bits) - 1;
    let buckets = splitter_count + 1;
    let by_value = params.level < VALUE_WIDTH_LEVELS;
    let flip = params.flip();
    let at = |j: u64| equal_width_splitter::<K>(level.low, level.high, j, buckets, flip, by_value);
    let mut j = device::thread_idx_x() as u64;
    while j < splitter_count {
        let value = at(j);
        let splitter =
            if j > 0 && value == at(j - 1) { successor(K::Bits::from_u64(value)).to_u64() } else { value };
        unsafe {
            params.level_splitters().write(j, splitter);
            params.splitters.write(2 * MAX_BUCKETS as u64 + j, 0);
        }
        j += SAMPLE_SORT_THREADS as u64;
    }
}

/// Shared memory of the range kernel.
#[derive(Clone, Copy, Debug)]
pub struct RangeLayout {
    /// Per warp: the largest complement of a rank, and the largest rank.
    pub warp_extremes: SharedRegion<u64>,
    /// Bytes to ask for at launch.
    pub bytes: usize,
}

impl RangeLayout {
    /// The layout.
    pub const fn new() -> Self {
        let (layout, warp_extremes) = SharedLayout::new().push::<u64>(2 * TILE_WARPS);
        Self { warp_extremes, bytes: layout.bytes() }
    }
}

impl Default for RangeLayout {
    fn default() -> Self {
        Self::new()
    }
}

/// The `sample_select_range_<key>` kernel (bucket select, before level 0): the smallest and
/// largest rank of the data, into [`SampleParams::range`] (one atomic maximum of each per
/// block; the smallest as the largest complement, so that cleared memory is the identity).
///
/// # Safety
/// [`SAMPLE_THREADS`] threads, [`RangeLayout::bytes`] of shared memory, `grid.x =
/// params.blocks`; `range` cleared.
pub unsafe fn range<K: Key>(params: SampleParams<K>) {
    let flip = params.flip();
    let (start, end) = block_range(params.len, params.blocks);
    let mut lowest_complement = 0u64;
    let mut highest = 0u64;
    let mut tile_start = start;
    while tile_start < end {
        let keys = unsafe { load_keys(params.data, tile_start, end) };
        unroll_items!(i => {
            // Past `end` the tile repeats the last key, which is inside the range anyway.
            let rank = keys[i].to_ordered().xor(flip).to_u64();
            lowest_complement = lowest_complement.max(!rank);
            highest = highest.max(rank);
        });
        tile_start += TILE;
    }
    let (lowest_complement, highest) =
        unsafe { (warp::reduce_max_u64(lowest_complement), warp::reduce_max_u64(highest)) };
    let warp_extremes = unsafe { RangeLayout::new().warp_extremes.bind() };
    let warp = device::warp_id() as usize;
    if device::lane_id() == 0 {
        unsafe {
            warp_extremes.store(2 * warp, lowest_complement);
            warp_extremes.store(2 * warp + 1, highest);
        }
    }
    unsafe { device::sync_threads() };
    if device::thread_idx_x() < 2 {
        let which = device::thread_idx_x() as usize;
        let mut extreme = 0;
        for w in 0..TILE_WARPS {
            extreme = extreme.max(unsafe { warp_extremes.load(2 * w + which) });
        }
        unsafe { device::global_atomic_max_u64(params.range.as_ptr().add(which), extreme) };
    }
}

/// The first splitter of approximate selection's window: the window's middle is the
/// splitter whose percentile is nearest the wanted rank's (fewer than 2^54 inputs).
fn window_start<K: Key>(params: &SampleParams<K>) -> u32 {
    let splitter_count = (1u64 << params.bucket_bits) - 1;
    // Splitter j sits at the sample's (j + 1)/b quantile.
    let estimate = ((params.k - 1) << params.bucket_bits) / params.len;
    let first = estimate.saturating_sub(1 + WINDOW_SPLITTERS as u64 / 2);
    first.min(splitter_count - WINDOW_SPLITTERS as u64) as u32
}

/// Tree levels the count walks in registers.
const REGISTER_LEVELS: u32 = 3;

/// The node at depth 3 that `rank` reaches from the root, given the tree's first seven
/// nodes (depths 0 to 2).
#[inline(always)]
fn top_levels<B: OrderedBits>(top: &[B; 7], rank: B) -> u32 {
    let right = rank >= top[0];
    let depth_1 = if right { top[2] } else { top[1] };
    let right_right = rank >= depth_1;
    let depth_2 = match (right, right_right) {
        (false, false) => top[3],
        (false, true) => top[4],
        (true, false) => top[5],
        (true, true) => top[6],
    };
    7 + 4 * right as u32 + 2 * right_right as u32 + (rank >= depth_2) as u32
}

/// Loads `2^depth − 1` of the level's splitters, from splitter `first` on, into the search
/// tree: node `i` at depth `d` (`i = 2^d − 1 + p`) holds sorted splitter `first + (2p +
/// 1)·2^(depth − d − 1) − 1`. Ends with a barrier.
///
/// # Safety
/// *Block-wide*.
unsafe fn load_tree<K: Key>(params: &SampleParams<K>, tree: &SharedSlice<K::Bits>, depth: u32, first: u32) {
    let mut node = device::thread_idx_x();
    while node < (1 << depth) - 1 {
        let node_depth = 31 - (node + 1).leading_zeros();
        let position = node + 1 - (1 << node_depth);
        let sorted_index = ((2 * position + 1) << (depth - node_depth - 1)) - 1;
        let splitter = unsafe { params.level_splitters().read((first + sorted_index) as u64) };
        unsafe { tree.store(node as usize, K::Bits::from_u64(splitter)) };
        node += SAMPLE_THREADS;
    }
    unsafe { device::sync_threads() };
}

/// Clears the first `buckets` entries of a histogram. Ends with a barrier.
///
/// # Safety
/// *Block-wide*.
unsafe fn clear_buckets(histogram: &SharedSlice<u32>, buckets: usize) {
    let mut bucket = device::thread_idx_x() as usize;
    while bucket < buckets {
        unsafe { histogram.store(bucket, 0) };
        bucket += SAMPLE_THREADS as usize;
    }
    unsafe { device::sync_threads() };
}

/// The `sample_select_count_<key>` kernel: buckets, oracles and histograms of the level.
///
/// # Safety
/// [`SAMPLE_THREADS`] threads, [`SamplePassLayout::bytes`] of shared memory,
/// `grid.x = params.blocks`; the level's sample kernel has run.
pub unsafe fn count<K: Key>(params: SampleParams<K>) {
    let level = unsafe { params.levels.read(params.level as u64) };
    if level.source == source::NONE || level.decision.action != action::PENDING {
        return;
    }
    let depth = params.bucket_bits;
    let totals = params.level_totals(params.level);
    let layout = SamplePassLayout::<K::Bits>::new();
    let (tree, histogram, warp_sums) =
        unsafe { (layout.tree.bind(), layout.histogram.bind(), layout.warp_sums.bind()) };
    unsafe { load_tree(&params, &tree, depth, 0) };
    // Publishing reads all 256 buckets, also when fewer are used.
    unsafe { clear_buckets(&histogram, (1 << depth).max(HISTOGRAM_BUCKETS)) };

    let flip = params.flip();
    let write_oracles = !params.has(flags::APPROXIMATE);
    let aggregated = params.has(flags::WARP_AGGREGATED);
    let (keys, _, len) = params.storage(&level);
    let (start, end) = block_range(len, params.blocks);
    let lane = device::lane_id();
    let leaf_base = (1u32 << depth) - 1;
    // The tree's top levels sit in registers (selects instead of shared loads: the shared
    // memory pipe is what limits the count).
    let mut top = [K::Bits::MIN; 7];
    let walked = if depth >= REGISTER_LEVELS {
        for (node, splitter) in top.iter_mut().enumerate() {
            *splitter = unsafe { tree.load(node) };
        }
        REGISTER_LEVELS
    } else {
        0
    };
    // Tile t + 1 is loaded before tile t is worked on, so its loads are in flight meanwhile.
    let mut tile_start = start;
    let mut next =
        if start < end { unsafe { load_keys(keys, start, end) } } else { [K::default(); TILE_ITEMS] };
    while tile_start < end {
        let tile_keys = next;
        if tile_start + TILE < end {
            next = unsafe { load_keys(keys, tile_start + TILE, end) };
        }
        // All items walk the tree together, one level at a time: eight independent shared
        // loads per level instead of one chain of `depth` loads per item.
        let mut ranks = [K::Bits::MIN; TILE_ITEMS];
        unroll_items!(i => { ranks[i] = tile_keys[i].to_ordered().xor(flip); });
        let mut nodes = [0u32; TILE_ITEMS];
        if depth >= REGISTER_LEVELS {
            unroll_items!(i => { nodes[i] = top_levels(&top, ranks[i]); });
        }
        for _ in walked..depth {
            unroll_items!(i => {
                let splitter = unsafe { tree.load(nodes[i] as usize) };
                nodes[i] = 2 * nodes[i] + 1 + (ranks[i] >= splitter) as u32;
            });
        }
        let first = tile_start + device::thread_idx_x() as u64;
        let full = tile_start + TILE <= end;
        let mut runs = BucketRuns::new();
        unroll_items!(i => {
            let at = first + (i as u64) * TILE_THREADS as u64;
            let valid = full || at < end;
            let bucket = nodes[i] - leaf_base;
            if valid && write_oracles {
                unsafe { params.oracles.write(at, bucket as u8) };
            }
            if aggregated {
                // Lanes of one bucket add together: the lowest of them adds their count.
                let key = if valid { bucket } else { u32::MAX };
                let peers = unsafe { device::match_any_u32(device::FULL_WARP, key) };
                if valid && peers.trailing_zeros() == lane {
                    unsafe { histogram.atomic_add(bucket as usize, peers.count_ones()) };
                }
            } else if valid {
                unsafe { runs.add(&histogram, bucket) };
            }
        });
        unsafe { runs.flush(&histogram) };
        tile_start += TILE;
    }
    let totals = totals.as_ptr();
    if write_oracles {
        unsafe { publish_histogram(&histogram, &warp_sums, params.cumulative, totals) };
    } else {
        // Approximate: no filter follows, so only the totals are needed.
        unsafe { add_to_totals(&histogram, 1 << depth, totals) };
    }
}

/// Adds the block's histogram of `buckets` buckets to the level's totals. Starts with a
/// barrier.
///
/// # Safety
/// *Block-wide*; `totals` holds `buckets` counters.
unsafe fn add_to_totals(histogram: &SharedSlice<u32>, buckets: usize, totals: *mut u64) {
    unsafe { device::sync_threads() };
    let mut bucket = device::thread_idx_x() as usize;
    while bucket < buckets {
        let count = unsafe { histogram.load(bucket) };
        if count != 0 {
            unsafe { device::global_atomic_add_u64(totals.wrapping_add(bucket), count as u64) };
        }
        bucket += SAMPLE_THREADS as usize;
    }
}

/// Keys one warp of the window and bracket passes holds in shared memory (its *stage*)
/// before it works on them together: the stage is emptied once more than half is taken,
/// so that a tile (256 keys a warp) always fits.
pub const WARP_STAGE: usize = 512;

/// Whether a warp's stage with `staged` keys must be emptied before the next tile.
#[inline(always)]
fn stage_is_full(staged: u32) -> bool {
    staged as usize > WARP_STAGE - TILE_ITEMS * 32
}

/// Items of this thread in the tile at `tile_start` that lie before `end` (item `i` is key
/// `tile_start + 256·i + thread`): all [`TILE_ITEMS`] but in a block's last tile, so that
/// the items check their bounds with one 32-bit compare each.
#[inline(always)]
fn thread_items(tile_start: u64, end: u64) -> u32 {
    let first = tile_start + device::thread_idx_x() as u64;
    if tile_start + TILE <= end {
        TILE_ITEMS as u32
    } else if first >= end {
        0
    } else {
        // At most TILE_ITEMS: the tile is not full.
        ((end - first - 1) / TILE_THREADS as u64 + 1) as u32
    }
}

/// Shared memory of the window pass.
#[derive(Clone, Copy, Debug)]
pub struct WindowLayout<B> {
    /// The window's [`WINDOW_SPLITTERS`] as an implicit search tree.
    pub tree: SharedRegion<B>,
    /// The block's histogram of the window's `2^WINDOW_BITS` buckets.
    pub histogram: SharedRegion<u32>,
    /// [`WARP_STAGE`] rank bits per warp, of keys inside the window.
    pub stage: SharedRegion<B>,
    /// Bytes to ask for at launch.
    pub bytes: usize,
}

impl<B> WindowLayout<B> {
    /// The layout.
    pub const fn new() -> Self {
        let (layout, tree) = SharedLayout::new().push::<B>(1 << WINDOW_BITS);
        let (layout, histogram) = layout.push::<u32>(1 << WINDOW_BITS);
        let (layout, stage) = layout.push::<B>(TILE_WARPS * WARP_STAGE);
        // The pass's last block reuses its shared memory for the nearest kernel's work.
        let bytes = layout.bytes();
        assert!(bytes >= NearestLayout::new().bytes);
        Self { tree, histogram, stage, bytes }
    }
}

impl<B> Default for WindowLayout<B> {
    fn default() -> Self {
        Self::new()
    }
}

/// The `sample_select_window_<key>` kernel, approximate selection's first pass with
/// [`flags::WINDOW`]: the counts of the window's buckets, the [`WINDOW_SPLITTERS`]
/// splitters around the wanted rank's estimate (all keys below the first in bucket 0, all
/// from the last on in the last bucket). Most keys fall outside the window and cost two
/// compares; each warp stages the few inside (about 6 % with 1024 buckets) in shared memory
/// and walks them through the window's tree together, 32 at a time, so that no lane walks
/// while the others wait. The last block to finish then does [`nearest`]'s work.
///
/// # Safety
/// [`SAMPLE_THREADS`] threads, [`WindowLayout::bytes`] of shared memory, `grid.x =
/// params.blocks`; level 0's sample kernel has run with `APPROXIMATE` and `bucket_bits >
/// WINDOW_BITS`; the window's totals, the outcome and `kept[0]` cleared; each block's range
/// below 2^32 keys; `params.data` 16-byte aligned (whole tiles load by vectors; a device
/// buffer is).
pub unsafe fn window<K: Key>(params: SampleParams<K>) {
    let level = unsafe { params.levels.read(0) };
    if level.source == source::NONE || level.decision.action != action::PENDING {
        return;
    }
    let layout = WindowLayout::<K::Bits>::new();
    let (tree, histogram, stage) =
        unsafe { (layout.tree.bind(), layout.histogram.bind(), layout.stage.bind()) };
    let first_splitter = window_start(&params);
    unsafe { load_tree(&params, &tree, WINDOW_BITS, first_splitter) };
    unsafe { clear_buckets(&histogram, 1 << WINDOW_BITS) };
    let mut top = [K::Bits::MIN; 7];
    for (node, splitter) in top.iter_mut().enumerate() {
        *splitter = unsafe { tree.load(node) };
    }
    let splitter = |j: u32| K::Bits::from_u64(unsafe { params.level_splitters().read(j as u64) });
    let (low, high) = (splitter(first_splitter), splitter(first_splitter + WINDOW_SPLITTERS - 1));

    let flip = params.flip();
    let (start, end) = block_range(params.len, params.blocks);
    let thread = device::thread_idx_x() as usize;
    let warp_stage = device::warp_id() as usize * WARP_STAGE;
    // Warp-uniform: keys in this warp's stage, and all keys it staged.
    let (mut staged, mut inside) = (0u32, 0u32);
    // Keys at least as large as the window's last splitter; those at least as large as its
    // first are these and the keys inside.
    let mut at_least_high = 0u32;
    // Tile t + 1 is loaded before tile t is worked on, as in the count; whole tiles by
    // vectors (their keys' places do not matter here), the last one key by key. (Two
    // tiles ahead measured slower: 0.4245 against 0.4195 ms, run 101.)
    let load = |at: u64| unsafe {
        if at + TILE <= end { load_tile_vectors(params.data, at) } else { load_keys(params.data, at, end) }
    };
    let mut tile_start = start;
    let mut next = if start < end { load(start) } else { [K::default(); TILE_ITEMS] };
    while tile_start < end {
        let tile_keys = next;
        if tile_start + TILE < end {
            next = load(tile_start + TILE);
        }
        let valid_items = thread_items(tile_start, end);
        unroll_items!(i => {
            // One 32-bit compare for the bounds (only the last tile has fewer items).
            let valid = (i as u32) < valid_items;
            let rank = tile_keys[i].to_ordered().xor(flip);
            at_least_high += (valid && rank >= high) as u32;
            let keep = valid && rank >= low && rank < high;
            let at = warp_stage + staged as usize;
            staged += unsafe { stage_lanes(at, keep, |place| stage.store(place, rank)) };
        });
        if stage_is_full(staged) {
            unsafe { count_stage(&stage, warp_stage, staged, &top, &tree, &histogram) };
            inside += staged;
            staged = 0;
        }
        tile_start += TILE;
    }
    unsafe { count_stage(&stage, warp_stage, staged, &top, &tree, &histogram) };
    inside += staged;

    let last_bucket = (1 << WINDOW_BITS) - 1;
    let warp_high = unsafe { warp::reduce_add_u32(at_least_high) };
    // Bucket 0 gets the block's keys less those at least as large as the window's first
    // splitter (wrapping in between; the sum is right).
    if thread == 0 {
        unsafe { histogram.atomic_add(0, (end - start) as u32) };
    }
    if device::lane_id() == 0 {
        unsafe { histogram.atomic_add(0, 0u32.wrapping_sub(warp_high + inside)) };
        unsafe { histogram.atomic_add(last_bucket, warp_high) };
    }
    let totals = params.totals.offset(MAX_BUCKETS as u64).as_ptr();
    unsafe { add_to_totals(&histogram, 1 << WINDOW_BITS, totals) };
    // The last block to finish weighs the window: the nearest kernel's work, without a
    // launch of its own between the pass and the host's read-back.
    if unsafe { last_block_to_finish(params.kept.as_ptr()) } {
        unsafe { nearest(params) };
    }
}

/// Whether this block is the last of its launch to get here, counted on `finished`
/// (cleared before the launch): every block's global writes before the call are then seen
/// by the last one's after it.
///
/// # Safety
/// *Block-wide*; `finished` is used by this launch only.
unsafe fn last_block_to_finish(finished: *mut u64) -> bool {
    device::fence_device();
    unsafe { device::sync_threads() };
    let mut last = false;
    if device::thread_idx_x() == 0 {
        // Release (PTX memory model): a fence then the ticket's write *in the thread that
        // takes the ticket*; the barrier before it orders the block's other threads'
        // writes before this fence (fences are cumulative). A fence only in the other
        // threads, before the barrier, makes no release pattern with this relaxed atomic.
        device::fence_device();
        let ticket = unsafe { device::global_atomic_add_u64(finished, 1) };
        last = ticket + 1 == device::grid_dim_x() as u64;
        if last {
            // Acquire: the ticket's read then a fence, in this thread, before the barrier
            // that hands the other blocks' writes to the rest of this block.
            device::fence_device();
        }
    }
    unsafe { device::sync_threads_or(last) }
}

/// Walks a warp's `staged` rank bits through the window's tree and counts their buckets in
/// the block's histogram.
///
/// # Safety
/// All lanes of the warp call it together with the same arguments; `top` holds the tree's
/// first seven nodes.
#[inline(always)]
unsafe fn count_stage<B: OrderedBits>(
    stage: &SharedSlice<B>,
    warp_stage: usize,
    staged: u32,
    top: &[B; 7],
    tree: &SharedSlice<B>,
    histogram: &SharedSlice<u32>,
) {
    // The stage's stores by other lanes are visible after the warp barrier.
    unsafe { device::sync_warp(device::FULL_WARP) };
    let mut j = device::lane_id();
    while j < staged {
        let rank = unsafe { stage.load(warp_stage + j as usize) };
        let mut node = top_levels(top, rank);
        for _ in REGISTER_LEVELS..WINDOW_BITS {
            node = 2 * node + 1 + (rank >= unsafe { tree.load(node as usize) }) as u32;
        }
        unsafe { histogram.atomic_add((node + 1 - (1 << WINDOW_BITS)) as usize, 1) };
        j += 32;
    }
    // Every lane has read its keys before any stores the next ones.
    unsafe { device::sync_warp(device::FULL_WARP) };
}

/// The bracket pass's counters: keys at least as large as each of the first four splitters,
/// then keys of rank `MAX`.
pub const BRACKET_COUNTERS: usize = 5;
/// Bucket bits of the bracket's level: the seven splitters of [`bracket_splitter`].
pub const BRACKET_BUCKET_BITS: u32 = 3;
/// The bucket of [`bracket_splitter`] the bracket pass keeps: strictly between the bounds.
pub const BRACKET_INSIDE: u32 = 2;

/// Shared memory of the bracket pass.
#[derive(Clone, Copy, Debug)]
pub struct BracketLayout<K> {
    /// [`WARP_STAGE`] keys per warp on their way to the candidate buffer.
    pub stage: SharedRegion<K>,
    /// The block's [`BRACKET_COUNTERS`].
    pub counters: SharedRegion<u32>,
    /// Bytes to ask for at launch.
    pub bytes: usize,
}

impl<K> BracketLayout<K> {
    /// The layout.
    pub const fn new() -> Self {
        let (layout, stage) = SharedLayout::new().push::<K>(TILE_WARPS * WARP_STAGE);
        let (layout, counters) = layout.push::<u32>(BRACKET_COUNTERS);
        Self { stage, counters, bytes: layout.bytes() }
    }
}

impl<K> Default for BracketLayout<K> {
    fn default() -> Self {
        Self::new()
    }
}

/// The `sample_select_bracket_<key>` kernel, exact selection's first level with
/// [`flags::BRACKET`]: one read of the data that counts the buckets of
/// [`bracket_splitter`] (a few compares per key, no tree and no histogram) and copies the
/// keys strictly between the bounds to candidate buffer 0. Each warp stages its keys in
/// shared memory and copies them out together, reserving their places with one global
/// atomic on that bucket's total (about one per 300 keys kept); a total past the buffer's
/// capacity still counts, and the choose kernel then samples again.
///
/// # Safety
/// [`SAMPLE_THREADS`] threads, [`BracketLayout::bytes`] of shared memory, `grid.x =
/// params.blocks`; the level's sample kernel has run with [`flags::BRACKET`] and
/// `bucket_bits = 3`; each block's range below 2^32 keys; the level's keys 16-byte aligned
/// (whole tiles load by vectors; level 0's are `params.data`, a device buffer).
pub unsafe fn bracket<K: Key>(params: SampleParams<K>) {
    let level = unsafe { params.levels.read(params.level as u64) };
    if level.source == source::NONE || level.decision.action != action::PENDING {
        return;
    }
    let layout = BracketLayout::<K>::new();
    let (stage, counters) = unsafe { (layout.stage.bind(), layout.counters.bind()) };
    let thread = device::thread_idx_x() as usize;
    if thread < BRACKET_COUNTERS {
        unsafe { counters.store(thread, 0) };
    }
    unsafe { device::sync_threads() };

    let splitters = params.level_splitters();
    let bound = |j: u64| K::Bits::from_u64(unsafe { splitters.read(j) });
    let bounds = [bound(0), bound(1), bound(2), bound(3)];
    let flip = params.flip();
    let (keys, _, len) = params.storage(&level);
    let (start, end) = block_range(len, params.blocks);
    let kept = params.level_totals(params.level).as_ptr().wrapping_add(BRACKET_INSIDE as usize);
    let out = params.buffer_keys[0];
    let warp_stage = device::warp_id() as usize * WARP_STAGE;
    // Warp-uniform: keys in this warp's stage, and all keys it kept.
    let (mut staged, mut kept_by_warp) = (0u32, 0u32);
    // Counters 0, 2, 3 and 4 per key (counter 0 is the block's keys instead where `low` is
    // the least key); counter 1 (keys above `low`) is counter 2 plus the keys kept: one
    // count a key less. 16-bit keys add each count as a carry, two instructions where a
    // compare-and-add takes three (this pass issues about as many instructions as an H200
    // can, run 296): bf16 medians of 2^28 1.8–5.9 % faster, but 32- and 64-bit keys 0.6–3.1 %
    // slower that way (H200 run 298), so they compare.
    let carries = size_of::<K>() == 2;
    let count_at_least = |rank: K::Bits, bound: K::Bits, count: u32| {
        if carries { rank.add_if_at_least(bound, count) } else { count + (rank >= bound) as u32 }
    };
    let count_max = |rank: K::Bits, count: u32| {
        if carries { rank.add_if_max(count) } else { count + (rank == K::Bits::MAX) as u32 }
    };
    let mut at_least = [0u32; BRACKET_COUNTERS];
    // One item: its counts, and its key staged when it lies strictly inside the bracket.
    let work = |key: K, valid: bool, at_least: &mut [u32; BRACKET_COUNTERS], staged: &mut u32| {
        let rank = key.to_ordered().xor(flip);
        let above_low = rank >= bounds[1];
        let from_high = rank >= bounds[2];
        if valid {
            // Bounds 2 and 3 are above `low`, so never the least key.
            at_least[0] = count_at_least(rank, bounds[0], at_least[0]);
            at_least[2] = count_at_least(rank, bounds[2], at_least[2]);
            at_least[3] = count_at_least(rank, bounds[3], at_least[3]);
            at_least[4] = count_max(rank, at_least[4]);
        }
        let inside = valid && above_low && !from_high;
        let at = warp_stage + *staged as usize;
        *staged += unsafe { stage_lanes(at, inside, |place| stage.store(place, key)) };
    };
    // Tile t + 1 is loaded before tile t is worked on, as in the count; whole tiles by
    // vectors with no bounds to check (the keys' places do not matter here), the last one
    // key by key.
    let load = |at: u64| unsafe {
        if at + TILE <= end { load_tile_vectors(keys, at) } else { load_keys(keys, at, end) }
    };
    let mut tile_start = start;
    let mut next = if start < end { load(start) } else { [K::default(); TILE_ITEMS] };
    while tile_start < end {
        let tile_keys = next;
        if tile_start + TILE < end {
            next = load(tile_start + TILE);
        }
        if tile_start + TILE <= end {
            unroll_items!(i => { work(tile_keys[i], true, &mut at_least, &mut staged); });
        } else {
            let valid_items = thread_items(tile_start, end);
            unroll_items!(i => { work(tile_keys[i], (i as u32) < valid_items, &mut at_least, &mut staged); });
        }
        if stage_is_full(staged) {
            unsafe { copy_out_stage(&stage, warp_stage, staged, out, kept, params.capacity) };
            kept_by_warp += staged;
            staged = 0;
        }
        tile_start += TILE;
    }
    if staged != 0 {
        unsafe { copy_out_stage(&stage, warp_stage, staged, out, kept, params.capacity) };
        kept_by_warp += staged;
    }

    // The block's counters, then its buckets' totals (the kept bucket's came with the copies).
    for (j, count) in at_least.iter().enumerate() {
        let mut warp_count = unsafe { warp::reduce_add_u32(*count) };
        if j == 1 {
            warp_count = unsafe { warp::reduce_add_u32(at_least[2]) } + kept_by_warp;
        }
        if device::lane_id() == 0 && warp_count != 0 {
            unsafe { counters.atomic_add(j, warp_count) };
        }
    }
    unsafe { device::sync_threads() };
    if thread == 0 {
        let count = |j: usize| unsafe { counters.load(j) } as u64;
        let totals = params.level_totals(params.level).as_ptr();
        // One call per bucket: a loop over (bucket, total) pairs gave the kernel a stack frame.
        let add = |bucket: usize, total: u64| {
            if total != 0 {
                unsafe { device::global_atomic_add_u64(totals.wrapping_add(bucket), total) };
            }
        };
        // Carries count nothing at the least key (the compares count every key there).
        let from_low = if carries && bounds[0] == K::Bits::MIN { end - start } else { count(0) };
        add(0, (end - start) - from_low);
        add(1, from_low - count(1));
        add(3, count(2) - count(3));
        add(4, count(3) - count(4));
        add(7, count(4));
    }
}

/// Appends what the lanes where `keep` holds store (`store(place)`, each at its own place
/// from `at` of a warp's stage) in lane order; returns how many the warp appended (the same
/// on every lane).
///
/// # Safety
/// All lanes of the warp call it together; the stage has room for 32 more from `at`.
#[inline(always)]
unsafe fn stage_lanes(at: usize, keep: bool, store: impl FnOnce(usize)) -> u32 {
    let kept_lanes = unsafe { device::ballot(device::FULL_WARP, keep) };
    if keep {
        // In 32 bits (a stage's places are small): one widening for the address.
        store((at as u32 + (kept_lanes & device::lanemask_lt()).count_ones()) as usize);
    }
    kept_lanes.count_ones()
}

/// Reserves `count` places for a warp with one atomic on `counter` (by lane 0); returns the
/// first, on every lane.
///
/// # Safety
/// All lanes of the warp call it together with the same arguments.
#[inline(always)]
unsafe fn reserve_for_warp(counter: *mut u64, count: u64) -> u64 {
    let mut first = 0;
    if device::lane_id() == 0 {
        first = unsafe { device::global_atomic_add_u64(counter, count) };
    }
    unsafe { device::shfl_idx_u64(device::FULL_WARP, first, 0) }
}

/// Copies a warp's `staged` keys from its stage to `out`, at places reserved by one atomic
/// on `kept` (none past `capacity`).
///
/// # Safety
/// All lanes of the warp call it together with the same arguments.
#[inline(always)]
unsafe fn copy_out_stage<K: Key>(
    stage: &SharedSlice<K>,
    warp_stage: usize,
    staged: u32,
    out: GlobalPtr<K>,
    kept: *mut u64,
    capacity: u64,
) {
    // The stage's stores by other lanes are visible after the warp barrier.
    unsafe { device::sync_warp(device::FULL_WARP) };
    let first = unsafe { reserve_for_warp(kept, staged as u64) };
    let mut j = device::lane_id();
    while j < staged {
        let at = first + j as u64;
        if at < capacity {
            unsafe { out.write(at, stage.load(warp_stage + j as usize)) };
        }
        j += 32;
    }
    // Every lane has read its keys before any stores the next ones.
    unsafe { device::sync_warp(device::FULL_WARP) };
}

/// Keys one warp of top-k's bracket pass reads at a time: key `start + 32·i + lane` in item
/// `i`, so that item order, then lane order, is input order.
pub const WARP_TILE: u64 = 32 * TILE_ITEMS as u64;

/// The keys warp `warp` of `warps` reads in top-k's bracket pass: whole [`WARP_TILE`]s, the
/// warps' ranges in warp order.
pub fn warp_range(len: u64, warps: u64, warp: u64) -> (u64, u64) {
    let per_warp = len.div_ceil(WARP_TILE).div_ceil(warps) * WARP_TILE;
    let start = (warp * per_warp).min(len);
    (start, (start + per_warp).min(len))
}

/// One copy-out of top-k's bracket pass: `len` kept keys (with their indices), in input
/// order, at `source` in candidate buffer 1; among the keys its warp kept, they come after
/// `warp_offset`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct KeptRun {
    /// Where the run starts in candidate buffer 1.
    pub source: u64,
    /// The warp's keys kept before the run.
    pub warp_offset: u32,
    /// The warp (`block · 8 + warp in block`).
    pub warp: u32,
    /// Keys in the run.
    pub len: u32,
    /// Padding.
    pub reserved: u32,
}

/// Shared memory of top-k's bracket pass.
#[derive(Clone, Copy, Debug)]
pub struct BracketTopKLayout<K> {
    /// [`WARP_STAGE`] keys per warp on their way to candidate buffer 1.
    pub stage_keys: SharedRegion<K>,
    /// Their places in the warp's range.
    pub stage_offsets: SharedRegion<u32>,
    /// Bytes to ask for at launch.
    pub bytes: usize,
}

impl<K> BracketTopKLayout<K> {
    /// The layout.
    pub const fn new() -> Self {
        let (layout, stage_keys) = SharedLayout::new().push::<K>(TILE_WARPS * WARP_STAGE);
        let (layout, stage_offsets) = layout.push::<u32>(TILE_WARPS * WARP_STAGE);
        Self { stage_keys, stage_offsets, bytes: layout.bytes() }
    }
}

impl<K> Default for BracketTopKLayout<K> {
    fn default() -> Self {
        Self::new()
    }
}

/// The bucket of [`bracket_splitter`] that holds the upper bound alone.
pub const BRACKET_HIGH: u32 = 3;

/// The `sample_select_bracket_top_k_<key>` kernel, top-k's first level with
/// [`flags::BRACKET`] and [`flags::EMIT`] (for `k` up to a small share of `n`): one read of
/// the data that copies every key below the bracket's upper bound (the top `k` when the
/// `k`-th lies there) with its index to candidate buffer 1, with no oracles and no filter
/// pass, and counts the keys equal to that bound. Only the upper bound matters: the level's
/// totals get the kept keys as bucket 2, the bound's ties as bucket 3 (which holds it alone)
/// and the rest as bucket 4.
///
/// Top-k takes equal keys lowest index first, so what it keeps must end up in input order.
/// Each warp reads a range of its own ([`warp_range`]), in order, and stages its kept keys in
/// shared memory in order (a ballot per item); a full stage goes out as one run, at places
/// reserved by one global atomic, and the run's place among its warp's keys is recorded
/// ([`KeptRun`]). Each warp also publishes how many keys it kept and how many equal the
/// upper bound; the choose kernel turns these into offsets, and
/// `sample_select_bracket_place_<key>` moves each run to where input order puts it.
///
/// # Safety
/// [`SAMPLE_THREADS`] threads, [`BracketTopKLayout::bytes`] of shared memory, `grid.x =
/// params.blocks`; level 0's sample kernel has run with `BRACKET` and `bucket_bits = 3`;
/// `kept` cleared; each warp's range below 2^32 keys.
pub unsafe fn bracket_top_k<K: Key>(params: SampleParams<K>) {
    let level = unsafe { params.levels.read(0) };
    if level.source == source::NONE || level.decision.action != action::PENDING {
        return;
    }
    let layout = BracketTopKLayout::<K>::new();
    let (stage_keys, stage_offsets) = unsafe { (layout.stage_keys.bind(), layout.stage_offsets.bind()) };
    let high = K::Bits::from_u64(unsafe { params.level_splitters().read(2) });
    let flip = params.flip();
    let warps = params.blocks as u64 * TILE_WARPS as u64;
    let warp = device::block_idx_x() as u64 * TILE_WARPS as u64 + device::warp_id() as u64;
    let (start, end) = warp_range(params.len, warps, warp);
    let lane = device::lane_id() as u64;
    let warp_stage = device::warp_id() as usize * WARP_STAGE;
    // Warp-uniform: keys in the stage, and keys copied out before them.
    let mut staged = 0u32;
    let mut copied = 0u32;
    let mut ties = 0u32;
    let mut tile_start = start;
    let mut next = if start < end {
        unsafe { load_warp_keys(params.data, start, end) }
    } else {
        [K::default(); TILE_ITEMS]
    };
    while tile_start < end {
        let tile_keys = next;
        if tile_start + WARP_TILE < end {
            next = unsafe { load_warp_keys(params.data, tile_start + WARP_TILE, end) };
        }
        // Most tiles hold no key at or below the bound (about (place + 1) / sample of the
        // keys are): one least rank a lane and one vote a tile rule them out, where the
        // staging below costs a compare, a ballot and a count a key. The pass issued as many
        // instructions for bf16 keys as for f32 and took the same 316 µs at 2^28 (H200 run
        // 321): instructions, not bytes, set its time. Past `end` the tile repeats the last
        // key, a real one: at worst a tile goes the long way.
        let mut least = K::Bits::MAX;
        unroll_items!(i => {
            let rank = tile_keys[i].to_ordered().xor(flip);
            if rank < least {
                least = rank;
            }
        });
        if unsafe { device::ballot(device::FULL_WARP, least <= high) } == 0 {
            tile_start += WARP_TILE;
            continue;
        }
        let first = tile_start + lane;
        let full = tile_start + WARP_TILE <= end;
        unroll_items!(i => {
            let at = first + 32 * i as u64;
            let valid = full || at < end;
            let rank = tile_keys[i].to_ordered().xor(flip);
            ties += (valid && rank == high) as u32;
            staged += unsafe {
                stage_lanes(warp_stage + staged as usize, valid && rank < high, |place| {
                    stage_keys.store(place, tile_keys[i]);
                    stage_offsets.store(place, (at - start) as u32);
                })
            };
        });
        if stage_is_full(staged) {
            unsafe { copy_out_run(&params, &stage_keys, &stage_offsets, staged, start, warp, copied) };
            copied += staged;
            staged = 0;
        }
        tile_start += WARP_TILE;
    }
    if staged != 0 {
        unsafe { copy_out_run(&params, &stage_keys, &stage_offsets, staged, start, warp, copied) };
        copied += staged;
    }
    // The warp's counts, and its share of the level's totals: kept keys (bucket 2), the upper
    // bound's ties (3), the rest (4).
    let warp_ties = unsafe { warp::reduce_add_u32(ties) };
    if lane == 0 {
        let (kept, ties) = (copied as u64, warp_ties as u64);
        unsafe {
            params.better_offsets.write(warp, kept);
            params.tie_offsets.write(warp, ties);
        }
        let totals = params.level_totals(0).as_ptr();
        let add = |bucket: u32, total: u64| {
            if total != 0 {
                unsafe { device::global_atomic_add_u64(totals.wrapping_add(bucket as usize), total) };
            }
        };
        add(BRACKET_INSIDE, kept);
        add(BRACKET_HIGH, ties);
        add(BRACKET_HIGH + 1, (end - start) - kept - ties);
    }
}

/// The keys of the warp tile at `tile_start`: key `tile_start + 32·i + lane` in item `i`
/// (past `end`: the last key, to be ignored).
///
/// # Safety
/// `keys` holds at least `end` keys, and `tile_start < end`.
#[inline(always)]
unsafe fn load_warp_keys<K: Copy + Default>(
    keys: GlobalPtr<K>,
    tile_start: u64,
    end: u64,
) -> [K; TILE_ITEMS] {
    let first = tile_start + device::lane_id() as u64;
    let mut tile = [K::default(); TILE_ITEMS];
    if tile_start + WARP_TILE <= end {
        unroll_items!(i => { tile[i] = unsafe { keys.read(first + 32 * i as u64) }; });
    } else {
        unroll_items!(i => { tile[i] = unsafe { keys.read((first + 32 * i as u64).min(end - 1)) }; });
    }
    tile
}

/// Copies a warp's `staged` keys and their indices (`warp_start` + the staged offsets) to
/// candidate buffer 1 as one run, at places reserved by one atomic on the kept count, and
/// records the run. Nothing is written past the buffer's or the run table's capacity (the
/// choose kernel then samples the data again).
///
/// # Safety
/// All lanes of the warp call it together with the same arguments.
#[inline(always)]
unsafe fn copy_out_run<K: Key>(
    params: &SampleParams<K>,
    stage_keys: &SharedSlice<K>,
    stage_offsets: &SharedSlice<u32>,
    staged: u32,
    warp_start: u64,
    warp: u64,
    warp_offset: u32,
) {
    // The stage's stores by other lanes are visible after the warp barrier.
    unsafe { device::sync_warp(device::FULL_WARP) };
    let lane = device::lane_id();
    let first = unsafe { reserve_for_warp(params.kept.as_ptr(), staged as u64) };
    let run = unsafe { reserve_for_warp(params.kept.as_ptr().wrapping_add(1), 1) };
    if first + staged as u64 <= params.capacity && run < params.run_capacity {
        let warp_stage = device::warp_id() as usize * WARP_STAGE;
        let mut j = lane;
        while j < staged {
            let at = first + j as u64;
            unsafe {
                params.buffer_keys[1].write(at, stage_keys.load(warp_stage + j as usize));
                let offset = stage_offsets.load(warp_stage + j as usize) as u64;
                params.buffer_indices[1].write(at, warp_start + offset);
            }
            j += 32;
        }
        if lane == 0 {
            let record = KeptRun { source: first, warp_offset, warp: warp as u32, len: staged, reserved: 0 };
            unsafe { params.runs.write(run, record) };
        }
    }
    // Every lane has read its keys before any stores the next ones.
    unsafe { device::sync_warp(device::FULL_WARP) };
}

/// Top-k's bracket, in the choose kernel (one block): with the kept keys in buffer 1 and the
/// `k`-th below the upper bound, the next level takes them (in input order, once placed);
/// with the `k`-th equal to the upper bound, the kept keys and that bound's first ties are the
/// top `k`; otherwise (the bracket missed, or the kept keys overflowed the buffer) the next
/// level samples the data again. Turns the warps' counts into offsets.
///
/// # Safety
/// Block-wide, as the choose kernel; `target`, `before` as it found them at level 0.
unsafe fn choose_bracket_top_k<K: Key>(
    params: &SampleParams<K>,
    level: &SampleLevel,
    target: usize,
    target_len: u64,
    before: u64,
    warp_sums: &SharedSlice<u64>,
) {
    let (kept, runs) = unsafe { (params.kept.read(0), params.kept.read(1)) };
    let fits = kept <= params.capacity && runs <= params.run_capacity;
    let high = K::Bits::from_u64(unsafe { params.level_splitters().read(2) });
    let next = fits && target <= BRACKET_INSIDE as usize;
    let finish = fits && target == BRACKET_HIGH as usize;
    if next || finish {
        let warps = params.blocks as usize * TILE_WARPS;
        unsafe {
            scan_in_place(params.better_offsets, warps, warp_sums);
            scan_in_place(params.tie_offsets, warps, warp_sums);
        }
    }
    if device::thread_idx_x() != 0 {
        return;
    }
    let mut decision =
        SampleDecision { action: action::NEXT, target: target as u32, better: 0, target_len, ties_taken: 0 };
    let next_level = if finish {
        decision.action = action::FINISH;
        decision.better = before;
        decision.ties_taken = level.k_left - before;
        let outcome = SampleOutcome { done: 1, levels: 1, value: high.to_u64(), rank: params.k - 1 };
        unsafe { params.outcome.write(0, outcome) };
        None
    } else if next {
        Some(SampleLevel {
            source: source::BUFFER_0,
            attempt: 0,
            len: kept,
            k_left: level.k_left,
            written: 0,
            decision: SampleDecision::default(),
            low: 0,
            high: K::Bits::MAX.to_u64(),
        })
    } else {
        decision.action = action::RETRY;
        Some(SampleLevel { attempt: level.attempt + 1, decision: SampleDecision::default(), ..*level })
    };
    unsafe {
        if let Some(next_level) = next_level {
            params.levels.write(1, next_level);
        }
        let slot = params.levels.as_ptr();
        core::ptr::addr_of_mut!((*slot).decision).write(decision);
    }
}

/// Replaces `count` values with their exclusive prefix sums. Each warp takes a contiguous
/// run of 32-value chunks and its lanes read and write them side by side, [`SCAN_BATCH`]
/// chunks' loads issued together: a thread's own contiguous share (the form before) made
/// every load touch 32 sectors, and top-k's bracket choose took 20 µs for two scans of 4224
/// values (H200 run 320).
///
/// # Safety
/// Block-wide; `warp_sums` as [`crate::block::scan::exclusive_scan_add_u64`] takes it.
unsafe fn scan_in_place(values: GlobalPtr<u64>, count: usize, warp_sums: &SharedSlice<u64>) {
    let chunks = count.div_ceil(32);
    let per_warp = chunks.div_ceil(TILE_WARPS);
    let first = (device::warp_id() as usize * per_warp).min(chunks);
    let last = (first + per_warp).min(chunks);
    let lane = device::lane_id() as usize;
    // The lane's value of chunks `chunk ..` (0 past the warp's run or the values' end).
    let load_batch = |chunk: usize| -> [u64; SCAN_BATCH] {
        core::array::from_fn(|j| {
            let i = (chunk + j) * 32 + lane;
            if chunk + j < last && i < count { unsafe { values.read(i as u64) } } else { 0 }
        })
    };
    let mut sum = 0u64;
    let mut chunk = first;
    while chunk < last {
        let batch = load_batch(chunk);
        // By index: iterating the array by value kept it in local memory (`for_each_key`).
        #[allow(clippy::needless_range_loop)]
        for j in 0..SCAN_BATCH {
            sum += batch[j];
        }
        chunk += SCAN_BATCH;
    }
    let warp_total =
        unsafe { device::shfl_idx_u64(device::FULL_WARP, warp::inclusive_scan_add_u64(sum), 31) };
    // The warps before this one: lane 0 of each warp carries the warp's total.
    let before = unsafe {
        crate::block::scan::exclusive_scan_add_u64(if lane == 0 { warp_total } else { 0 }, warp_sums)
    };
    let mut carry = unsafe { device::shfl_idx_u64(device::FULL_WARP, before, 0) };
    let mut chunk = first;
    while chunk < last {
        let batch = load_batch(chunk);
        #[allow(clippy::needless_range_loop)]
        for j in 0..SCAN_BATCH {
            if chunk + j < last {
                let inclusive = unsafe { warp::inclusive_scan_add_u64(batch[j]) };
                let i = (chunk + j) * 32 + lane;
                if i < count {
                    unsafe { values.write(i as u64, carry + inclusive - batch[j]) };
                }
                carry += unsafe { device::shfl_idx_u64(device::FULL_WARP, inclusive, 31) };
            }
        }
        chunk += SCAN_BATCH;
    }
}

/// Chunks of 32 values whose loads [`scan_in_place`] issues together.
const SCAN_BATCH: usize = 8;

/// The `sample_select_bracket_place_<key>` kernel, after top-k's bracket pass and level 0's
/// choose: moves each run of kept keys from buffer 1 to where input order puts it (warp
/// offset + place in the warp) — candidate buffer 0 when the next level takes them, the
/// output when they are the top `k` with the upper bound's ties — and then, in that case,
/// sends the first ties (in input order) to the output: each warp whose ties are among them
/// reads its range again.
///
/// # Safety
/// [`SAMPLE_THREADS`] threads, no shared memory, `grid.x = params.blocks`; level 0's
/// bracket pass and choose kernel have run with `BRACKET` and `EMIT`.
pub unsafe fn bracket_place<K: Key>(params: SampleParams<K>) {
    let decision = unsafe { params.levels.read(0) }.decision;
    let finish = decision.action == action::FINISH;
    if !finish && decision.action != action::NEXT {
        return;
    }
    let (keys_to, indices_to) = if finish {
        (params.keys_out, params.indices_out)
    } else {
        (params.buffer_keys[0], params.buffer_indices[0])
    };
    let warps = params.blocks as u64 * TILE_WARPS as u64;
    let warp = device::block_idx_x() as u64 * TILE_WARPS as u64 + device::warp_id() as u64;
    let lane = device::lane_id();
    let runs = unsafe { params.kept.read(1) };
    let mut r = warp;
    while r < runs {
        let run = unsafe { params.runs.read(r) };
        let to = unsafe { params.better_offsets.read(run.warp as u64) } + run.warp_offset as u64;
        let mut j = lane;
        while j < run.len {
            let from = run.source + j as u64;
            unsafe {
                keys_to.write(to + j as u64, params.buffer_keys[1].read(from));
                indices_to.write(to + j as u64, params.buffer_indices[1].read(from));
            }
            j += 32;
        }
        r += warps;
    }
    if !finish {
        return;
    }
    let mut taken = unsafe { params.tie_offsets.read(warp) };
    if taken >= decision.ties_taken {
        return;
    }
    let high = K::Bits::from_u64(unsafe { params.level_splitters().read(2) });
    let flip = params.flip();
    let (start, end) = warp_range(params.len, warps, warp);
    let mut tile_start = start;
    while tile_start < end && taken < decision.ties_taken {
        let tile_keys = unsafe { load_warp_keys(params.data, tile_start, end) };
        let first = tile_start + lane as u64;
        unroll_items!(i => {
            let at = first + 32 * i as u64;
            let tie = at < end && tile_keys[i].to_ordered().xor(flip) == high;
            let tie_lanes = unsafe { device::ballot(device::FULL_WARP, tie) };
            let place = taken + (tie_lanes & device::lanemask_lt()).count_ones() as u64;
            if tie && place < decision.ties_taken {
                unsafe { emit_output(&params, decision.better + place, tile_keys[i], at) };
            }
            taken += tie_lanes.count_ones() as u64;
        });
        tile_start += WARP_TILE;
    }
}

/// Whether bucket `bucket` of the level's `splitter_count` splitters holds one value only
/// (an equality bucket), and that value's rank bits.
unsafe fn single_value<K: Key>(
    params: &SampleParams<K>,
    bucket: usize,
    splitter_count: usize,
) -> Option<u64> {
    let splitters = params.level_splitters();
    let max = K::Bits::MAX.to_u64();
    let low = if bucket == 0 { 0 } else { unsafe { splitters.read(bucket as u64 - 1) } };
    if bucket == splitter_count {
        return (low == max).then_some(low);
    }
    let high = unsafe { splitters.read(bucket as u64) };
    (high != 0 && high - 1 == low).then_some(low)
}

/// The `sample_select_choose_<key>` kernel (one block): the target bucket, the blocks'
/// offsets, and the next level.
///
/// # Safety
/// One block of [`SAMPLE_THREADS`] threads, [`SampleChooseLayout::bytes`] of shared memory;
/// the level's count has run.
pub unsafe fn choose<K: Key>(params: SampleParams<K>) {
    let level_index = params.level;
    let level = unsafe { params.levels.read(level_index as u64) };
    if level.source == source::NONE || level.decision.action != action::PENDING {
        return;
    }
    let layout = SampleChooseLayout::new();
    let (warp_sums, target_slot, block_counts) =
        unsafe { (layout.warp_sums.bind(), layout.target.bind(), layout.block_counts.bind()) };
    let thread = device::thread_idx_x() as usize;

    let totals = params.level_totals(level_index);
    let bucket_total = unsafe { totals.read(thread as u64) };
    let before = unsafe { crate::block::scan::exclusive_scan_add_u64(bucket_total, &warp_sums) };
    if before < level.k_left && level.k_left <= before + bucket_total {
        unsafe {
            target_slot.store(0, thread as u64);
            target_slot.store(1, bucket_total);
            target_slot.store(2, before);
        }
    }
    // The next level counts into the other set: clear it (its count runs after this kernel).
    unsafe { params.level_totals(level_index + 1).write(thread as u64, 0) };
    const _: () = assert!(SAMPLE_THREADS as usize == 1 << MAX_EXACT_BUCKET_BITS);
    unsafe { device::sync_threads() };
    let (target, target_len, better) =
        unsafe { (target_slot.load(0) as usize, target_slot.load(1), target_slot.load(2)) };

    let emit = params.has(flags::EMIT);
    let bracket = params.has(flags::BRACKET);
    if bracket && emit {
        unsafe { choose_bracket_top_k(&params, &level, target, target_len, better, &warp_sums) };
        return;
    }
    let splitter_count = (1usize << params.bucket_bits) - 1;
    let k_left = level.k_left - better;
    let single = unsafe { single_value(&params, target, splitter_count) };
    let finish = single.is_some() || (emit && k_left == target_len);
    let next_fits = target_len <= params.capacity;
    // The bracket pass kept one bucket, already copied out; any other needs a new sample.
    let next_fits = next_fits && !(bracket && target as u32 != BRACKET_INSIDE);
    if !bracket && ((finish && emit) || (!finish && next_fits)) {
        unsafe {
            scan_block_offsets(
                params.cumulative,
                params.blocks as usize,
                MAX_SAMPLE_BLOCKS as usize,
                target,
                &block_counts,
                &warp_sums,
                (params.better_offsets, params.tie_offsets),
            )
        };
    }

    if thread == 0 {
        let mut decision =
            SampleDecision { action: action::NEXT, target: target as u32, better, target_len, ties_taken: 0 };
        let written = level.written + if emit { better } else { 0 };
        let next = if finish {
            decision.action = action::FINISH;
            decision.ties_taken = k_left;
            let outcome = SampleOutcome {
                done: 1,
                levels: level_index + 1,
                value: single.unwrap_or_default(),
                rank: params.k - 1,
            };
            unsafe { params.outcome.write(0, outcome) };
            None
        } else if !next_fits {
            decision.action = action::RETRY;
            Some(SampleLevel { attempt: level.attempt + 1, decision: SampleDecision::default(), ..level })
        } else {
            // Bucket select's next range: the target bucket's bounds (the outer buckets
            // keep the level's own).
            let splitters = params.level_splitters();
            let low = if target == 0 { level.low } else { unsafe { splitters.read(target as u64 - 1) } };
            let high = if target == splitter_count {
                level.high
            } else {
                let upper = unsafe { splitters.read(target as u64) };
                upper - 1
            };
            Some(SampleLevel {
                source: next_source(level.source),
                attempt: 0,
                len: target_len,
                k_left,
                written,
                decision: SampleDecision::default(),
                low,
                high,
            })
        };
        if let Some(next) = next
            && (level_index as usize) + 1 < LEVEL_SLOTS
        {
            unsafe { params.levels.write(level_index as u64 + 1, next) };
        }
        unsafe {
            let slot = params.levels.as_ptr().add(level_index as usize);
            core::ptr::addr_of_mut!((*slot).decision).write(decision);
        }
    }
}

/// Loads the oracles of the tile at `tile_start` (past `end`: [`u32::MAX`], no bucket).
#[inline(always)]
unsafe fn load_oracles(oracles: GlobalPtr<u8>, tile_start: u64, end: u64) -> [u32; TILE_ITEMS] {
    let first = tile_start + device::thread_idx_x() as u64;
    let mut buckets = [u32::MAX; TILE_ITEMS];
    unroll_items!(i => {
        let at = first + (i as u64) * TILE_THREADS as u64;
        if at < end {
            buckets[i] = unsafe { oracles.read(at) } as u32;
        }
    });
    buckets
}

/// The `sample_select_filter_<key>` kernel, top-k's filter: copies the target bucket with
/// its indices to the next level's buffer (in input order), and sends better buckets, and
/// on the last level the first target inputs, to the output. (Selection uses [`gather`].)
///
/// # Safety
/// As [`count`], with `EMIT`; the level's choose kernel has run.
pub unsafe fn filter<K: Key>(params: SampleParams<K>) {
    let level = unsafe { params.levels.read(params.level as u64) };
    let decision = level.decision;
    let runs = level.source != source::NONE
        && (decision.action == action::NEXT || decision.action == action::FINISH);
    if !runs {
        return;
    }
    let last = decision.action == action::FINISH;
    let layout = SamplePassLayout::<K::Bits>::new();
    let tile_counts = unsafe { layout.tile_counts.bind() };
    let (keys, indices, len) = params.storage(&level);
    let (buffer_keys, buffer_indices) = if next_source(level.source) == source::BUFFER_0 {
        (params.buffer_keys[0], params.buffer_indices[0])
    } else {
        (params.buffer_keys[1], params.buffer_indices[1])
    };
    let target = decision.target;
    let (start, end) = block_range(len, params.blocks);
    let block = device::block_idx_x() as u64;
    let mut better_seen = unsafe { params.better_offsets.read(block) };
    let mut ties_seen = unsafe { params.tie_offsets.read(block) };
    let mut parity = 0;
    let mut tile_start = start;
    let mut next = if start < end {
        unsafe { load_oracles(params.oracles, start, end) }
    } else {
        [u32::MAX; TILE_ITEMS]
    };
    while tile_start < end {
        let buckets = next;
        if tile_start + TILE < end {
            next = unsafe { load_oracles(params.oracles, tile_start + TILE, end) };
        }
        let mut is_better = [false; TILE_ITEMS];
        let mut is_tie = [false; TILE_ITEMS];
        let mut to_place = false;
        unroll_items!(i => {
            is_better[i] = buckets[i] < target;
            is_tie[i] = buckets[i] == target;
            to_place |= is_better[i] || is_tie[i];
        });
        if unsafe { device::sync_threads_or(to_place) } {
            let places = unsafe { place_in_order(&is_better, &is_tie, &tile_counts, parity) };
            let first = tile_start + device::thread_idx_x() as u64;
            unroll_items!(i => {
                if is_better[i] || is_tie[i] {
                    let at = first + (i as u64) * TILE_THREADS as u64;
                    let key = unsafe { keys.read(at) };
                    let index = if indices.is_null() { at } else { unsafe { indices.read(at) } };
                    let rank = places.rank[i] as u64;
                    if is_better[i] {
                        unsafe { emit_output(&params, level.written + better_seen + rank, key, index) };
                    } else if last {
                        let rank = ties_seen + rank;
                        if rank < decision.ties_taken {
                            unsafe { emit_output(&params, level.written + decision.better + rank, key, index) };
                        }
                    } else {
                        let rank = ties_seen + rank;
                        unsafe {
                            buffer_keys.write(rank, key);
                            buffer_indices.write(rank, index);
                        }
                    }
                }
            });
            better_seen += places.first_total as u64;
            ties_seen += places.second_total as u64;
            parity ^= 1;
        }
        tile_start += TILE;
    }
}

/// Sixteen oracles, read with one 16-byte load.
#[repr(C, align(16))]
#[derive(Clone, Copy)]
struct OracleVector([u32; 4]);

/// Oracle vectors each thread reads per step of [`gather`]: 64 bytes in flight per thread.
const GATHER_VECTORS: usize = 4;
const _: () = assert!(GATHER_VECTORS == 4, "gather's loops are unrolled for four vectors");

/// Runs `$body` for `$i` = 0 to 3, unrolled in the source (arrays indexed by `$i` stay in
/// registers).
macro_rules! unroll_4 {
    ($i:ident => $body:block) => {{
        {
            let $i: usize = 0;
            $body
        }
        {
            let $i: usize = 1;
            $body
        }
        {
            let $i: usize = 2;
            $body
        }
        {
            let $i: usize = 3;
            $body
        }
    }};
}

/// Which bytes of `word` equal `byte`: the high bit of each such byte, no other bits.
#[inline(always)]
fn bytes_equal(word: u32, byte: u32) -> u32 {
    let diff = word ^ (byte * 0x0101_0101);
    // Bit 7 of a byte of `low` is set when the byte's low seven bits are not all zero.
    let low = (diff & 0x7f7f_7f7f) + 0x7f7f_7f7f;
    !(low | diff | 0x7f7f_7f7f)
}

/// The `sample_select_gather_<key>` kernel, selection's filter (no `EMIT`): copies the
/// target bucket's candidates to the next buffer, in any order within the block's range,
/// which selection does not need. Reads the oracles sixteen to a load; a warp that found
/// some reserves their places with one shared atomic; no block barrier in the loop.
///
/// # Safety
/// As [`count`], with the level's choose kernel run; the oracles are 16-byte aligned and
/// readable up to the next multiple of 16 bytes (the workspace rounds regions up).
pub unsafe fn gather<K: Key>(params: SampleParams<K>) {
    let level = unsafe { params.levels.read(params.level as u64) };
    if level.source == source::NONE || level.decision.action != action::NEXT {
        return;
    }
    let layout = SamplePassLayout::<K::Bits>::new();
    let reserved = unsafe { layout.tile_counts.bind() };
    if device::thread_idx_x() == 0 {
        unsafe { reserved.store(0, 0) };
    }
    unsafe { device::sync_threads() };
    let (keys, _, len) = params.storage(&level);
    let buffer = if next_source(level.source) == source::BUFFER_0 {
        params.buffer_keys[0]
    } else {
        params.buffer_keys[1]
    };
    let target = level.decision.target;
    let (start, end) = block_range(len, params.blocks);
    let block_offset = unsafe { params.tie_offsets.read(device::block_idx_x() as u64) };
    let vectors = params.oracles.as_ptr() as *const OracleVector;
    // `start` is a whole number of tiles, so a multiple of 16.
    let (first_vector, end_vector) = (start / 16, end.div_ceil(16));
    let thread = device::thread_idx_x() as u64;
    let lane = device::lane_id();
    let mut step = first_vector;
    while step < end_vector {
        // All loads first, so that they are in flight together.
        let mut loaded = [OracleVector([0; 4]); GATHER_VECTORS];
        unroll_4!(j => {
            let vector = step + thread + (j * TILE_THREADS as usize) as u64;
            if vector < end_vector {
                loaded[j] = unsafe { vectors.add(vector as usize).read() };
            }
        });
        let mut found = [[0u32; 4]; GATHER_VECTORS];
        let mut count = 0;
        unroll_4!(j => {
            let vector = step + thread + (j * TILE_THREADS as usize) as u64;
            unroll_4!(w => {
                let word = 4 * vector + w as u64;
                // Bytes at or past `end` are not candidates.
                let past_end = (4 * word + 4).saturating_sub(end).min(4);
                let valid = if past_end == 4 { 0 } else { u32::MAX >> (8 * past_end) };
                found[j][w] = bytes_equal(loaded[j].0[w], target) & valid;
                count += found[j][w].count_ones();
            });
        });
        if unsafe { device::ballot(device::FULL_WARP, count != 0) } != 0 {
            let inclusive = unsafe { crate::warp::inclusive_scan_add_u32(count) };
            let mut warp_start = 0;
            if lane == 31 {
                warp_start = unsafe { reserved.atomic_add(0, inclusive) };
            }
            warp_start = unsafe { device::shfl_idx_u32(device::FULL_WARP, warp_start, 31) };
            let mut place = block_offset + (warp_start + inclusive - count) as u64;
            unroll_4!(j => {
                let vector = step + thread + (j * TILE_THREADS as usize) as u64;
                unroll_4!(w => {
                    let mut bits = found[j][w];
                    while bits != 0 {
                        let at = 16 * vector + 4 * w as u64 + (bits.trailing_zeros() / 8) as u64;
                        bits &= bits - 1;
                        unsafe { buffer.write(place, keys.read(at)) };
                        place += 1;
                    }
                });
            });
        }
        step += (GATHER_VECTORS * TILE_THREADS as usize) as u64;
    }
}

/// Writes output `at`.
#[inline(always)]
unsafe fn emit_output<K: Key>(params: &SampleParams<K>, at: u64, key: K, index: u64) {
    unsafe {
        params.keys_out.write(at, key);
        params.indices_out.write(at, index);
    }
}

/// Shared memory of the nearest kernel.
#[derive(Clone, Copy, Debug)]
pub struct NearestLayout {
    /// Per-warp sums of the totals' scan, then per-warp best candidates.
    pub warp_values: SharedRegion<u64>,
    /// The best candidate of the block.
    pub best: SharedRegion<u64>,
    /// Bytes to ask for at launch.
    pub bytes: usize,
}

impl NearestLayout {
    /// The layout.
    pub const fn new() -> Self {
        let (layout, warp_values) = SharedLayout::new().push::<u64>(TILE_WARPS);
        let (layout, best) = layout.push::<u64>(1);
        Self { warp_values, best, bytes: layout.bytes() }
    }
}

impl Default for NearestLayout {
    fn default() -> Self {
        Self::new()
    }
}

/// Splitters each thread of the nearest kernel weighs.
const NEAREST_RUN: usize = MAX_BUCKETS / SAMPLE_THREADS as usize;

/// The `sample_select_nearest_<key>` kernel (one block): after one level's sample and
/// count with `APPROXIMATE`, the sampled splitter whose exact rank range is nearest to the
/// wanted rank `k − 1`. Each thread weighs a run of consecutive splitters; a block scan of
/// the runs' totals gives every splitter's rank, a block-wide minimum the winner.
///
/// With `WINDOW`, the counts cover only the window's splitters (all inputs below the first
/// in bucket 0, all from the last on in the last bucket). Its last splitter bounds the
/// splitters after it and its first those before it, so the winner among the window's
/// other splitters is the full count's answer when no splitter outside can be as near:
/// then the outcome is written; else nothing, and the full count and this kernel run again.
///
/// # Safety
/// One block of [`SAMPLE_THREADS`] threads (a kernel of its own, or the window pass's last
/// block), [`NearestLayout::bytes`] of shared memory; sample and count of level 0 have run;
/// fewer than 2^54 inputs.
pub unsafe fn nearest<K: Key>(params: SampleParams<K>) {
    let window = params.has(flags::WINDOW);
    let earlier = unsafe { params.outcome.read(0) };
    if earlier.done != 0 {
        return;
    }
    let layout = NearestLayout::new();
    let (warp_values, best_slot) = unsafe { (layout.warp_values.bind(), layout.best.bind()) };
    let thread = device::thread_idx_x() as usize;
    let splitter_count = (1usize << params.bucket_bits) - 1;
    // Splitter `offset + j` closes bucket j of `totals`; candidates are j < `candidates`.
    let (offset, buckets, candidates, totals) = if window {
        let buckets = 1 << WINDOW_BITS;
        (window_start(&params) as usize, buckets, buckets - 2, params.totals.offset(MAX_BUCKETS as u64))
    } else {
        (0, splitter_count + 1, splitter_count, params.totals)
    };
    let splitters = params.splitters;
    let wanted = params.k - 1;
    let first = thread * NEAREST_RUN;

    // Inputs below this thread's first splitter: an exclusive scan of the runs' totals.
    let mut run_total = 0;
    for j in first..first + NEAREST_RUN {
        if j < buckets {
            run_total += unsafe { totals.read(j as u64) };
        }
    }
    let mut below = unsafe { crate::block::scan::exclusive_scan_add_u64(run_total, &warp_values) };

    // The candidate key packs (distance, splitter): the minimum is the nearest splitter,
    // the lowest on a tie.
    let mut best = u64::MAX;
    let mut best_rank = 0;
    for j in first..first + NEAREST_RUN {
        if j < candidates {
            below += unsafe { totals.read(j as u64) };
            let splitter = offset + j;
            let sampled = unsafe { splitters.read((2 * MAX_BUCKETS + splitter) as u64) } != 0;
            if sampled {
                // The splitter's ranks: [below, below + equal), `equal` known when the
                // bucket it starts is an equality bucket, else at least 1 (it is an input).
                let equal = match unsafe { single_value(&params, splitter + 1, splitter_count) } {
                    Some(_) => unsafe { totals.read(j as u64 + 1) }.max(1),
                    None => 1,
                };
                let rank = wanted.max(below).min(below + equal - 1);
                let candidate = (rank.abs_diff(wanted) << MAX_BUCKET_BITS) | splitter as u64;
                if candidate < best {
                    (best, best_rank) = (candidate, rank);
                }
            }
        }
    }
    let warp_best = unsafe { crate::warp::reduce_min_u64(best) };
    if device::lane_id() == 0 {
        unsafe { warp_values.store(device::warp_id() as usize, warp_best) };
    }
    if window && thread == 0 {
        // Counts the window's pass, should it not answer (the barriers order this first).
        unsafe { params.outcome.write(0, SampleOutcome { levels: 1, ..SampleOutcome::default() }) };
    }
    unsafe { device::sync_threads() };
    if thread == 0 {
        let mut block_best = u64::MAX;
        for w in 0..TILE_WARPS {
            block_best = block_best.min(unsafe { warp_values.load(w) });
        }
        unsafe { best_slot.store(0, block_best) };
    }
    unsafe { device::sync_threads() };
    // Without a window splitter 0 is always sampled, so some thread holds the block's best.
    if best != u64::MAX && best == unsafe { best_slot.load(0) } {
        let answers = !window || {
            // Splitters before the window rank below its first splitter's `below`, those
            // after it at or above its last splitter's; and a splitter before wins a tie.
            let distance = best >> MAX_BUCKET_BITS;
            let first_below = unsafe { totals.read(0) };
            let last_below = params.len - unsafe { totals.read(buckets as u64 - 1) };
            wanted >= first_below
                && distance <= wanted - first_below
                && last_below >= wanted
                && distance <= last_below - wanted
        };
        if answers {
            let splitter = best & ((1 << MAX_BUCKET_BITS) - 1);
            let value = unsafe { splitters.read(splitter) };
            // Passes over the data: the window's that did not answer, and this one.
            let levels = earlier.levels + 1;
            let outcome = SampleOutcome { done: 1, levels, value, rank: best_rank };
            unsafe { params.outcome.write(0, outcome) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every splitter of a range lies inside it, and they never decrease.
    fn check_splitters<K: Key>(low_key: K, high_key: K, flip: K::Bits, by_value: bool) {
        let rank = |key: K| key.to_ordered().xor(flip).to_u64();
        let (low, high) = (rank(low_key).min(rank(high_key)), rank(low_key).max(rank(high_key)));
        let mut previous = low;
        for j in 0..255 {
            let splitter = equal_width_splitter::<K>(low, high, j, 256, flip, by_value);
            assert!(
                previous <= splitter && splitter <= high,
                "{low_key:?}..{high_key:?} j={j} by_value={by_value}"
            );
            previous = splitter;
        }
    }

    #[test]
    fn equal_width_splitters_stay_in_the_range_and_never_decrease() {
        for by_value in [true, false] {
            for flip in [0u32, u32::MAX] {
                check_splitters(-f32::MAX, f32::MAX, flip, by_value);
                check_splitters(-0.0f32, 0.0, flip, by_value);
                check_splitters(1e-45f32, 3e38, flip, by_value);
                check_splitters(f32::NEG_INFINITY, f32::NAN, flip, by_value);
                check_splitters(5u32, 9, flip, by_value);
            }
            for flip in [0u64, u64::MAX] {
                check_splitters(i64::MIN, i64::MAX, flip, by_value);
                check_splitters(-1e300f64, 1e-300, flip, by_value);
                check_splitters(0u64, u64::MAX, flip, by_value);
            }
        }
        // In value, the middle splitter of [0, 256] is 128.
        let rank = |key: f32| key.to_ordered().to_u64();
        assert_eq!(equal_width_splitter::<f32>(rank(0.0), rank(256.0), 127, 256, 0, true), rank(128.0));
    }
}
