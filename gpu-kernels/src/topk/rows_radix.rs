//! Batched top-k by radix selection, a block per row: the `k` best of every row for `k` up
//! to [`MAX_RADIX_ROWS_K`], in one or two reads of the row whatever `k` is.
//!
//! The queues of [`crate::topk::rows`] pay for every key that enters them with merges whose
//! size grows with `k`; at `k` in the hundreds and thousands those merges, not the reads,
//! set the time. Here the cost of `k` is one sort of at most [`CAPACITY`] candidates:
//!
//! 1. **Narrow.** Keys are ranked by their ordered bits (complemented for "largest", so the
//!    best keys always have the smallest ranks). While the keys that could be among the
//!    row's `k` best number more than [`CAPACITY`], the block builds a histogram of the next
//!    [`DIGIT_BITS`] bits of the ranks that share the prefix chosen so far (shared-memory
//!    atomics, runs of equal digits added at once), and a scan over its bins picks the digit
//!    of the `k`-th best. Each such pass reads the row once; 32-bit keys need at most three,
//!    64-bit keys six, and uniform keys usually one (a bin of 2048 holds few keys).
//! 2. **Collect.** One more read gathers every key whose rank is at most the prefix's
//!    largest rank, `better + in_prefix ≤ CAPACITY` of them, into shared memory (ranks and
//!    positions, slots taken by a shared atomic counter). Narrowing from the row stops
//!    already at [`POOL`] candidates: the read gathers them into a pool in shared memory,
//!    and the passes that bring them down to [`CAPACITY`] read the pool, not the row
//!    (the largest keys of `[0, 1)` put an eighth of a row in the first digit's top bin:
//!    one read of the row fewer). 32-bit keys only: with 64-bit keys the pool's code
//!    takes the kernel to 139 registers, one block per multiprocessor instead of two.
//!
//!    Rows (or parts) longer than the pool with 32-bit keys first try to skip narrowing
//!    from the row (`speculate`): a strided sample of [`SAMPLE`] keys, narrowed in the
//!    pool, bounds the `k`-th best from above with high probability; one read gathers every
//!    key within the bound into the pool. When at least `k` and at most [`POOL`] keys made
//!    it (uniform keys almost always), the row has been read once and the passes read the
//!    pool; otherwise (skewed or repeated keys) the row is read as above, after at most a
//!    part of a read lost (a warp stops gathering once the pool is full). Passes over the pool
//!    go on until the candidates fit a sort of `k` rounded up to a power of two, not
//!    of [`CAPACITY`]: a pass over the pool costs less than the larger sort's merges.
//! 3. **Sort** the candidates with the block bitonic sort ([`sort_slots`]), by (rank,
//!    position), in as few registers a thread as hold them (every warp shares the sort),
//!    and write the first `k`: the key its rank decodes to (a NaN read back from the row,
//!    for its payload), and its column (or `indices_in`).
//!
//! **Ties.** When every bit is chosen and the keys equal to the `k`-th best still overflow
//! the sort, and the pool holds them, their positions are narrowed in the pool as ranks are
//! (a digit a pass) until the better keys and the ties up to a position fit the sort of `k`
//! rounded up; the sort keeps the first ties by column. Without a pool (64-bit keys, or
//! ties beyond it), the collect pass places keys in column order (warp ballots, a scan over
//! the tile's warps) and keeps the first ties only; it stops reading once it has them and
//! every better key. So ties are always broken by lower column, as the sort breaks them, and
//! a row of equal keys costs its histogram passes and a read of its first `k` keys.
//!
//! Rows, parts and outputs are laid out as in [`RowsParams`]: block `p` takes part
//! `p % blocks_per_row` of row `p / blocks_per_row` (`warps_per_part` is ignored) and writes
//! its `k` best at `p · k`; parts shorter than `k` are padded as there. A split row's parts
//! go through this kernel again as dense rows of `blocks_per_row · k` candidates with
//! `indices_in`; that second pass skips no input, so the host splits only rows whose parts
//! hold at least `k` keys (no padding among the candidates).

use crate::block;
use crate::block::bitonic_sort::{
    BlockSortLayout, MAX_BLOCK_SORT_LEN, PAIRS_PER_THREAD, SORT_THREADS, sort_capacity, sort_slots,
};
use crate::device::{self, SharedLayout, SharedRegion, SharedSlice};
use crate::key::{BitsBound, Key, OrderedBits, rank_padding_bits};
use crate::params::{GlobalPtr, Order};
use crate::topk::radix::DigitRuns;
use crate::topk::rows::{NO_INDEX, Part, RowsParams, part_at};
use crate::warp;
use crate::warp::bitonic::WarpPairs;

/// Threads per block: the block sort's.
pub const RADIX_ROWS_THREADS: u32 = SORT_THREADS;
/// Bits of a histogram pass's digit.
pub const DIGIT_BITS: u32 = 11;
/// Bins of a histogram pass.
const BINS: usize = 1 << DIGIT_BITS;
/// Consecutive bins each thread sums for the scan.
const BINS_PER_THREAD: usize = BINS / RADIX_ROWS_THREADS as usize;
/// Candidates the block sorts at most: the block sort's slots.
pub const CAPACITY: u64 = MAX_BLOCK_SORT_LEN as u64;
/// Candidates the pool holds: narrowing from the row stops at this many (32-bit keys).
pub const POOL: u64 = 6144;

/// Keys of the strided sample that bounds a long row's `k`-th best before it is read
/// (`speculate`); the sample waits in the pool.
pub const SAMPLE: u64 = 1024;
const _: () = assert!(SAMPLE <= POOL && SAMPLE.is_multiple_of(RADIX_ROWS_THREADS as u64));
/// Sampled keys each thread loads.
const SAMPLE_PER_THREAD: usize = (SAMPLE / RADIX_ROWS_THREADS as u64) as usize;

/// The pool's candidates for keys of `B`: none for 64-bit keys (module docs).
const fn pool_len<B>() -> u64 {
    if size_of::<B>() == 4 { POOL } else { 0 }
}
/// The largest `k`: the candidates hold at least the `k` best.
pub const MAX_RADIX_ROWS_K: u32 = MAX_BLOCK_SORT_LEN;
/// Warps per block.
const WARPS: usize = (RADIX_ROWS_THREADS / 32) as usize;
/// Keys per thread and tile of the ordered (tie) placement and of a row's unaligned end.
const ITEMS: usize = 16;
/// 16-byte vectors per thread and tile of a row's aligned body: 64 bytes of 16- and 32-bit
/// keys, 128 of 64-bit keys (16 keys a thread, as [`ITEMS`]).
const fn tile_vectors<K>() -> usize {
    if size_of::<K>() == 8 { 8 } else { 4 }
}
/// The most of [`tile_vectors`].
const MAX_VECTORS: usize = 8;
/// Keys a block reads per tile.
const TILE: u64 = RADIX_ROWS_THREADS as u64 * ITEMS as u64;
/// Entries of one set of ordered-placement counts: one per (item, warp), plus the total.
const PLACEMENT_SET: usize = ITEMS * WARPS + 1;

/// Shared memory of `top_k_rows_radix_<key>`.
#[derive(Clone, Copy, Debug)]
pub struct RadixRowsLayout<B> {
    /// The histogram of the digit being narrowed.
    pub histogram: SharedRegion<u32>,
    /// Per-warp sums of the bin scan.
    pub warp_sums: SharedRegion<u64>,
    /// The chosen digit, the keys in bins before it, and its bin's keys.
    pub choice: SharedRegion<u64>,
    /// The next free candidate slot: of the sort's slots, then of the pool.
    pub next_slot: SharedRegion<u32>,
    /// Ranks of the pool's candidates.
    pub pool_bits: SharedRegion<B>,
    /// Their positions.
    pub pool_positions: SharedRegion<u32>,
    /// Two sets (alternating by tile) of packed (better, tie) counts per (item, warp) for the
    /// ordered placement of ties, scanned in place, plus the tile's total.
    pub placement: SharedRegion<u32>,
    /// The candidates (ranks and positions), then the sort's slots.
    pub sort: BlockSortLayout<B>,
    /// Bytes to ask for at launch.
    pub bytes: usize,
}

impl<B> RadixRowsLayout<B> {
    /// The layout.
    pub const fn new() -> Self {
        let (layout, histogram) = SharedLayout::new().push::<u32>(BINS);
        let (layout, warp_sums) = layout.push::<u64>(WARPS);
        let (layout, choice) = layout.push::<u64>(3);
        let (layout, next_slot) = layout.push::<u32>(2);
        let (layout, pool_bits) = layout.push::<B>(pool_len::<B>() as usize);
        let (layout, pool_positions) = layout.push::<u32>(pool_len::<B>() as usize);
        let (layout, placement) = layout.push::<u32>(2 * PLACEMENT_SET);
        let (layout, sort) = BlockSortLayout::after(layout, MAX_BLOCK_SORT_LEN);
        Self {
            histogram,
            warp_sums,
            choice,
            next_slot,
            pool_bits,
            pool_positions,
            placement,
            sort,
            bytes: layout.bytes(),
        }
    }
}

impl<B> Default for RadixRowsLayout<B> {
    fn default() -> Self {
        Self::new()
    }
}

/// One row and how its keys rank.
#[derive(Clone, Copy)]
struct Row<K: Key> {
    keys: GlobalPtr<K>,
    start: u64,
    len: u64,
    /// XOR-ed into the ordered bits: [`order_flip`].
    flip: K::Bits,
}

impl<K: Key> Row<K> {
    #[inline(always)]
    fn rank(&self, key: K) -> K::Bits {
        key.to_ordered().xor(self.flip)
    }

    /// Calls `visit(rank, position)` for every key of the row, each thread for its own, in
    /// no particular order: the row's 16-byte aligned body by tiles of [`tile_vectors`] 16-byte
    /// vectors a thread (64 bytes: 16 keys of 32 bits, 32 of 16 bits), all loaded before the
    /// first is visited; the keys before its first 16-byte boundary and after its last whole
    /// tile one by one.
    #[inline(always)]
    unsafe fn for_each(&self, visit: impl FnMut(K::Bits, u64)) {
        unsafe { self.for_each_until::<false>(|| false, visit) }
    }

    /// [`Row::for_each`], but with `MAY_STOP` a warp skips its remaining whole tiles once
    /// `stop` (asked by lane 0 before each tile) holds; the keys after the last whole tile
    /// are always visited. (Without `MAY_STOP` no vote is compiled in.)
    ///
    /// A tile's bytes, not its keys, are what the time of a long row's read follows: a block
    /// reads its row one tile after another, each a memory latency (H200 runs 185, 188: bf16
    /// and f32 rows of the same shape took the same time, a 16-bit key a 2-byte load).
    ///
    /// # Safety
    /// *Warp-wide* (whole warps call it together); the kernel writes no key.
    #[inline(always)]
    unsafe fn for_each_until<const MAY_STOP: bool>(
        &self,
        stop: impl Fn() -> bool,
        visit: impl FnMut(K::Bits, u64),
    ) {
        unsafe { self.for_each_tile_until::<MAY_STOP>(stop, &mut EachKey(visit)) }
    }

    /// Calls `keep(rank, position)` for every key of the row ranked at or below `bound`, as
    /// [`Row::for_each_until`] visits them. A tile's keys are tested a 16-byte vector at a
    /// time without a branch (floats by their bits, [`Key::bits_at_most`], else by their
    /// ranks, [`Key::ranks_at_most`]); only the few within the bound are read again (from
    /// the cache the tile came through) and handed to `keep`. (A branch per key around
    /// `keep` cost 16 warp instructions a bf16 key, most of a long row's gather: H200 run
    /// 354.)
    ///
    /// # Safety
    /// As [`Row::for_each_until`].
    #[inline(always)]
    unsafe fn for_each_within_until<const MAY_STOP: bool>(
        &self,
        bound: K::Bits,
        stop: impl Fn() -> bool,
        keep: impl FnMut(K::Bits, u64),
    ) {
        let test = K::bits_bound(self.flip, bound);
        unsafe { self.for_each_tile_until::<MAY_STOP>(stop, &mut WithinBound { bound, test, keep }) }
    }

    /// The loop of [`Row::for_each_until`]: the keys before the row's first 16-byte boundary
    /// and after its last whole tile go to `visitor` one by one, each whole tile at once:
    /// this thread's [`tile_vectors`] 16-byte vectors of it, all loaded before the first is
    /// visited.
    ///
    /// # Safety
    /// As [`Row::for_each_until`].
    #[inline(always)]
    unsafe fn for_each_tile_until<const MAY_STOP: bool>(
        &self,
        stop: impl Fn() -> bool,
        visitor: &mut impl TileVisitor<K>,
    ) {
        let thread = device::thread_idx_x() as u64;
        let key_bytes = size_of::<K>() as u64;
        // Keys of the row before its first 16-byte boundary (keys are aligned to their size).
        let address = self.keys.address() + self.start * key_bytes;
        let head = ((16 - address % 16) % 16 / key_bytes).min(self.len);
        if thread < head {
            visitor.key(self.rank(unsafe { self.keys.read(self.start + thread) }), thread);
        }
        let per_vector = 16 / key_bytes;
        let tile_keys = RADIX_ROWS_THREADS as u64 * tile_vectors::<K>() as u64 * per_vector;
        let body_end = head + (self.len - head) / tile_keys * tile_keys;
        let load = |tile: u64| {
            let mut words = [[0u32; 4]; MAX_VECTORS];
            for (j, vector) in words[..tile_vectors::<K>()].iter_mut().enumerate() {
                let at =
                    unsafe { self.keys.as_ptr().add((self.start + vector_start::<K>(tile, j)) as usize) };
                *vector = unsafe { device::load_global_v4(at as *const u32) };
            }
            words
        };
        // Tile `t + 1` is loaded before tile `t` is visited: two tiles in flight a thread.
        let mut tile = head;
        let mut next_words = if tile < body_end { load(tile) } else { [[0u32; 4]; MAX_VECTORS] };
        while tile < body_end {
            let words = next_words;
            let stopping =
                MAY_STOP && unsafe { device::any(device::FULL_WARP, device::lane_id() == 0 && stop()) };
            let next = if stopping { body_end } else { tile + tile_keys };
            if next < body_end {
                next_words = load(next);
            }
            unsafe { visitor.tile(self, &words, tile) };
            tile = next;
        }
        while tile < self.len {
            for i in 0..ITEMS as u64 {
                let position = tile + i * RADIX_ROWS_THREADS as u64 + thread;
                if position < self.len {
                    visitor.key(self.rank(unsafe { self.keys.read(self.start + position) }), position);
                }
            }
            tile += TILE;
        }
    }
}

/// What [`Row::for_each_tile_until`] hands a row's keys to: those outside the whole tiles one
/// by one, each whole tile at once.
trait TileVisitor<K: Key> {
    /// Key at `position`, ranked `rank`.
    fn key(&mut self, rank: K::Bits, position: u64);
    /// This thread's vectors of the tile of `row` that starts at position `tile` (vector
    /// `j`'s first key at [`vector_start`]).
    ///
    /// # Safety
    /// The tile is within the row.
    unsafe fn tile(&mut self, row: &Row<K>, words: &[[u32; 4]; MAX_VECTORS], tile: u64);
}

/// Every key to the closure ([`Row::for_each_until`]).
struct EachKey<F>(F);

impl<K: Key, F: FnMut(K::Bits, u64)> TileVisitor<K> for EachKey<F> {
    #[inline(always)]
    fn key(&mut self, rank: K::Bits, position: u64) {
        (self.0)(rank, position)
    }

    #[inline(always)]
    unsafe fn tile(&mut self, row: &Row<K>, words: &[[u32; 4]; MAX_VECTORS], tile: u64) {
        for (j, vector) in words[..tile_vectors::<K>()].iter().enumerate() {
            for e in 0..16 / size_of::<K>() {
                let key = unsafe { block::tiles::key_in_vector::<K>(vector, e) };
                (self.0)(row.rank(key), vector_start::<K>(tile, j) + e as u64);
            }
        }
    }
}

/// The keys ranked at or below `bound` to `keep` ([`Row::for_each_within_until`]), tested
/// on their bits by `test` where the key type has one ([`Key::bits_bound`]).
struct WithinBound<B, F> {
    bound: B,
    test: Option<BitsBound<B>>,
    keep: F,
}

impl<K: Key, F: FnMut(K::Bits, u64)> TileVisitor<K> for WithinBound<K::Bits, F> {
    #[inline(always)]
    fn key(&mut self, rank: K::Bits, position: u64) {
        if rank <= self.bound {
            (self.keep)(rank, position);
        }
    }

    #[inline(always)]
    unsafe fn tile(&mut self, row: &Row<K>, words: &[[u32; 4]; MAX_VECTORS], tile: u64) {
        let per_vector = 16 / size_of::<K>();
        let ranked = |within: &mut u32| {
            for (j, vector) in words[..tile_vectors::<K>()].iter().enumerate() {
                *within |= K::ranks_at_most(vector, row.flip, self.bound) << (j * per_vector);
            }
        };
        let mut within = 0u32;
        if let Some(test) = self.test {
            // A float's bits against the bound: fewer instructions than its rank (the
            // sign rule, NaNs made one); a negative NaN (rare) sends the tile to its ranks.
            let mut negative_nan = false;
            for (j, vector) in words[..tile_vectors::<K>()].iter().enumerate() {
                let (bits, nan) = K::bits_at_most(vector, test);
                within |= bits << (j * per_vector);
                negative_nan |= nan;
            }
            if negative_nan {
                within = 0;
                ranked(&mut within);
            }
        } else {
            ranked(&mut within);
        }
        while within != 0 {
            let index = within.trailing_zeros() as usize;
            within &= within - 1;
            let position = vector_start::<K>(tile, index / per_vector) + (index % per_vector) as u64;
            (self.keep)(row.rank(unsafe { row.keys.read(row.start + position) }), position);
        }
    }
}

/// The row position of the first key of this thread's vector `j` in the tile that starts
/// at `tile` ([`Row::for_each_tile_until`]): vector `j` holds keys
/// `tile + per_vector·(thread + 256·j) …`, `per_vector` = `16 / size_of::<K>()`.
#[inline(always)]
fn vector_start<K>(tile: u64, j: usize) -> u64 {
    let thread = device::thread_idx_x() as u64;
    tile + (thread + (j * RADIX_ROWS_THREADS as usize) as u64) * (16 / size_of::<K>()) as u64
}

/// Ranks a pass visits, each thread its share: the row (from global memory), the pool, the
/// bounded split's candidates, or an SBP tile.
pub(crate) trait Ranked<B> {
    /// Calls `visit(rank, position)` for each of this thread's ranks.
    ///
    /// # Safety
    /// *Block-wide* for the row's tiles; the pool is ordered before by a barrier.
    unsafe fn visit_ranks(&self, visit: impl FnMut(B, u64));
}

impl<K: Key> Ranked<K::Bits> for Row<K> {
    #[inline(always)]
    unsafe fn visit_ranks(&self, visit: impl FnMut(K::Bits, u64)) {
        unsafe { self.for_each(visit) }
    }
}

/// The candidates gathered into the pool: `len` ranks and their positions in the row.
struct Pool<B> {
    bits: SharedSlice<B>,
    positions: SharedSlice<u32>,
    len: usize,
}

impl<B: OrderedBits> Ranked<B> for Pool<B> {
    #[inline(always)]
    unsafe fn visit_ranks(&self, mut visit: impl FnMut(B, u64)) {
        let mut at = device::thread_idx_x() as usize;
        while at < self.len {
            unsafe { visit(self.bits.load(at), self.positions.load(at) as u64) };
            at += RADIX_ROWS_THREADS as usize;
        }
    }
}

/// What the narrowing has found: the `k`-th best's rank agrees with `prefix` above bit
/// `shift`; `better` keys rank below every key with that prefix, and `in_prefix` share it.
#[derive(Clone, Copy)]
pub(crate) struct Narrowed<B> {
    pub(crate) shift: u32,
    pub(crate) prefix: B,
    pub(crate) better: u64,
    pub(crate) in_prefix: u64,
}

impl<B: OrderedBits> Narrowed<B> {
    /// The state before any pass over `count` keys whose ranks all lie within `low ..=
    /// high`: the bits those two share, every rank between them shares too, so they are
    /// chosen already and the first pass takes the next digit below them (bf16 logits'
    /// best ~2000 share sign and most of the exponent: one pass fewer).
    #[inline(always)]
    pub(crate) fn spanning(low: B, high: B, count: u64) -> Self {
        let shift = u64::BITS - (low.to_u64() ^ high.to_u64()).leading_zeros();
        let prefix = if shift >= B::BITS { B::MIN } else { B::from_u64(high.to_u64() >> shift << shift) };
        Narrowed { shift: shift.min(B::BITS), prefix, better: 0, in_prefix: count }
    }

    #[inline(always)]
    pub(crate) fn has_prefix(&self, rank: B) -> bool {
        self.shift >= B::BITS || rank.shr(self.shift) == self.prefix.shr(self.shift)
    }

    /// Whether bits of keys of `K` are left to narrow: once the digits reach the padding
    /// below a key's bits in its rank ([`rank_padding_bits`]: 16-bit keys) every bit of the
    /// key is chosen, and a further pass would find all the candidates in one bin (a pass
    /// lost whenever ties straddle the `k`-th best, as they often do among bf16 logits).
    #[inline(always)]
    pub(crate) fn bits_left<K: Key<Bits = B>>(&self) -> bool {
        self.shift > rank_padding_bits::<K>()
    }

    /// Keys that may be among the wanted best: the better ones and those with the prefix.
    pub(crate) fn candidates(&self) -> u64 {
        self.better + self.in_prefix
    }

    /// The largest rank with the prefix.
    pub(crate) fn upper(&self) -> B {
        match self.shift {
            0 => self.prefix,
            shift if shift >= B::BITS => B::MAX,
            shift => self.prefix.xor(B::MAX.shr(B::BITS - shift)),
        }
    }
}

/// What a key's ordered bits are XOR-ed with to give its rank: for "largest" its own bits
/// (not the padding below them, which stays zero in every rank), else nothing.
#[inline(always)]
pub(crate) fn order_flip<K: Key>(largest: bool) -> K::Bits {
    if largest { K::Bits::from_u64(u64::MAX << rank_padding_bits::<K>()) } else { K::Bits::MIN }
}

/// One digit's histogram, counted and scanned by the block: the digit below a narrowed
/// prefix, this thread's bins (`BINS_PER_THREAD · t ..`) and how many keys the bins before
/// them hold.
pub(crate) struct DigitCounts<B> {
    narrowed: Narrowed<B>,
    shift: u32,
    mask: u32,
    counts: [u32; BINS_PER_THREAD],
    before: u64,
    /// The keys in this thread's bins.
    sum: u64,
}

/// Counts the digit below `narrowed`'s prefix (its [`DIGIT_BITS`] next bits, or all that
/// are left) of the ranks of `source` that `counted` takes (those with the prefix, or every
/// candidate), then scans the bins: the histogram pass that [`narrow`],
/// [`place_by_counting`] and SBP's narrowing share. The histogram keeps the counts. (A
/// source and a test, not a closure that visits: LLVM left such a closure outlined, with a
/// stack frame, in every rows kernel.)
///
/// # Safety
/// *Block-wide* ([`RADIX_ROWS_THREADS`] threads); `histogram` of [`BINS`] bins and
/// `warp_sums` of a slot a warp; `narrowed.shift > 0`.
#[inline(always)]
pub(crate) unsafe fn count_digit<B: OrderedBits>(
    histogram: &SharedSlice<u32>,
    warp_sums: &SharedSlice<u64>,
    narrowed: Narrowed<B>,
    source: &impl Ranked<B>,
    counted: impl Fn(B) -> bool,
) -> DigitCounts<B> {
    let thread = device::thread_idx_x() as usize;
    for j in 0..BINS_PER_THREAD {
        unsafe { histogram.store(j * RADIX_ROWS_THREADS as usize + thread, 0) };
    }
    unsafe { device::sync_threads() };
    let shift = narrowed.shift.saturating_sub(DIGIT_BITS);
    let mask = (1u32 << (narrowed.shift - shift)) - 1;
    let mut runs = DigitRuns::new();
    unsafe {
        source.visit_ranks(|rank, _| {
            if counted(rank) {
                runs.add(histogram, rank.shr(shift).low_u32() & mask);
            }
        });
        runs.flush(histogram);
        device::sync_threads();
    }
    let mut counts = [0u32; BINS_PER_THREAD];
    for (j, count) in counts.iter_mut().enumerate() {
        *count = unsafe { histogram.load(thread * BINS_PER_THREAD + j) };
    }
    let sum: u64 = counts.iter().map(|&c| c as u64).sum();
    let before = unsafe { block::scan::exclusive_scan_add_u64(sum, warp_sums) };
    DigitCounts { narrowed, shift, mask, counts, before, sum }
}

impl<B: OrderedBits> DigitCounts<B> {
    /// `rank`'s bin.
    #[inline(always)]
    pub(crate) fn digit(&self, rank: B) -> usize {
        (rank.shr(self.shift).low_u32() & self.mask) as usize
    }

    /// This thread's bins: each bin, its count, and the keys in the bins before it.
    #[inline(always)]
    pub(crate) fn bins(&self) -> impl Iterator<Item = (usize, u32, u64)> + '_ {
        let thread = device::thread_idx_x() as usize;
        let mut before = self.before;
        self.counts.iter().enumerate().map(move |(j, &count)| {
            let bin = (thread * BINS_PER_THREAD + j, count, before);
            before += count as u64;
            bin
        })
    }

    /// The bin of the `wanted`-th best rank (counting the keys better than the prefix), as
    /// the narrowed state every thread agrees on: the thread whose bins hold it publishes.
    ///
    /// # Safety
    /// *Block-wide*; `choice` of three slots, not read by a thread still reading an earlier
    /// choice; `better < wanted ≤ better + ` the keys counted.
    #[inline(always)]
    pub(crate) unsafe fn choose(&self, choice: &SharedSlice<u64>, wanted: u64) -> Narrowed<B> {
        let need = wanted - self.narrowed.better;
        // (A guard and a loop that stops, not a test of every bin: the test of every bin took
        // the 64-bit rows kernels from 128 registers to 155–168.)
        if self.before < need && need <= self.before + self.sum {
            let mut running = self.before;
            let first_bin = device::thread_idx_x() as usize * BINS_PER_THREAD;
            for (j, &count) in self.counts.iter().enumerate() {
                if need <= running + count as u64 {
                    unsafe {
                        choice.store(0, (first_bin + j) as u64);
                        choice.store(1, running);
                        choice.store(2, count as u64);
                    }
                    break;
                }
                running += count as u64;
            }
        }
        unsafe { device::sync_threads() };
        let (digit, before_digit, in_digit) = unsafe { (choice.load(0), choice.load(1), choice.load(2)) };
        Narrowed {
            shift: self.shift,
            prefix: self.narrowed.prefix.xor(B::from_u64(digit << self.shift)),
            better: self.narrowed.better + before_digit,
            in_prefix: in_digit,
        }
    }
}

/// One histogram pass: the next digit of the `wanted`-th best rank among those with the
/// prefix (a key's rank, or a tied key's position). Ends with the narrowed state every
/// thread agrees on.
///
/// # Safety
/// *Block-wide*; bits left to narrow ([`Narrowed::bits_left`] for keys' ranks) and
/// `better < wanted ≤ better + in_prefix`.
#[inline(always)]
unsafe fn narrow<B: OrderedBits, L>(
    row: &impl Ranked<B>,
    layout: &RadixRowsLayout<L>,
    narrowed: Narrowed<B>,
    wanted: u64,
) -> Narrowed<B> {
    let (histogram, warp_sums, choice) =
        unsafe { (layout.histogram.bind(), layout.warp_sums.bind(), layout.choice.bind()) };
    let counts =
        unsafe { count_digit(&histogram, &warp_sums, narrowed, row, |rank| narrowed.has_prefix(rank)) };
    unsafe { counts.choose(&choice, wanted) }
}

/// Gathers every rank of `source` that `keep(rank, position)` takes into `slots` (ranks and
/// positions), in any order (the sort orders them), taking slots from counter `counter`.
///
/// # Safety
/// *Block-wide*; the counter is 0 and ordered before by a barrier; the candidates fit.
#[inline(always)]
unsafe fn collect<B: OrderedBits>(
    source: &impl Ranked<B>,
    layout_counters: &SharedRegion<u32>,
    counter: usize,
    slots: (&SharedRegion<B>, &SharedRegion<u32>),
    keep: impl Fn(B, u64) -> bool,
) {
    let (next_slot, bits, positions) = unsafe { (layout_counters.bind(), slots.0.bind(), slots.1.bind()) };
    unsafe {
        source.visit_ranks(|rank, position| {
            if keep(rank, position) {
                let slot = next_slot.atomic_add(counter, 1) as usize;
                bits.store(slot, rank);
                positions.store(slot, position as u32);
            }
        });
    }
}

/// Gathers the candidates of `narrowed` (every rank at most its `upper()`) from `source`
/// into `slots`, as [`collect`]; returns their number.
///
/// # Safety
/// As [`collect`].
#[inline(always)]
unsafe fn collect_narrowed<B: OrderedBits>(
    source: &impl Ranked<B>,
    layout_counters: &SharedRegion<u32>,
    counter: usize,
    slots: (&SharedRegion<B>, &SharedRegion<u32>),
    narrowed: Narrowed<B>,
) -> u64 {
    let upper = narrowed.upper();
    unsafe { collect(source, layout_counters, counter, slots, |rank, _| rank <= upper) };
    narrowed.candidates()
}

/// The sample's bound for a row of `len` keys: how many of [`SAMPLE`] keys spread evenly
/// over the row must rank at or below it so that, with high probability, at least `wanted`
/// keys of the row do and at most [`POOL`] (the sample's expected count below the
/// `wanted`-th best, `m = wanted · SAMPLE / len`, plus three standard deviations and 4, so
/// that a shortfall, a wasted read, is rare: about 0.1 %), and the keys of the row that
/// bound is expected to gather (plus three of their standard deviations). `None` when those
/// would overflow the pool. A 32-bit row longer than the pool is read once when this is
/// `Some`; the nearer the gathering comes to the pool, the likelier a second read (the
/// host's cost model uses it).
pub fn sample_bound(wanted: u64, len: u64) -> Option<(u64, u64)> {
    let expected = (wanted * SAMPLE).div_ceil(len);
    let rank = expected + 3 * expected.isqrt() + 4;
    let gathered = (rank + 3 * rank.isqrt()) * len / SAMPLE;
    (rank < SAMPLE && gathered <= POOL).then_some((rank, gathered))
}

/// Sample key `i` of `len / sample_len` evenly strided ones: `i · len / sample_len`.
#[inline(always)]
fn strided_position(i: u64, len: u64, sample_len: u64) -> u64 {
    i * len / sample_len
}

/// Sample key `i` of the bounded split's [`BOUNDED_SAMPLE`] from a row of `len ≥
/// BOUNDED_SAMPLE` keys: one key of each of `BOUNDED_SAMPLE` equal segments of `len /
/// BOUNDED_SAMPLE` keys (the last keys of the row, fewer than a segment, are never drawn), at a
/// pseudo-random place in it (a hash of `i`), so that keys laid out with a period dividing the segments (rows of
/// sorted runs, say) do not all land on the same place of their period (a sample that
/// misses sends a row to the slow path).
///
/// ```
/// use gpu_select_kernels::topk::rows_radix::{BOUNDED_SAMPLE, bounded_sample_position};
/// let len = 100_000;
/// for i in [0, 1, BOUNDED_SAMPLE - 1] {
///     let (p, segment) = (bounded_sample_position(i, len, BOUNDED_SAMPLE), len / BOUNDED_SAMPLE);
///     assert!(i * segment <= p && p < (i + 1) * segment);
/// }
/// ```
#[inline(always)]
pub fn bounded_sample_position(i: u64, len: u64, sample_len: u64) -> u64 {
    // One division a row would do (the segment); the place in it is the high half of a
    // 32-bit hash of `i` times the segment, not a remainder (64-bit divisions cost a GPU
    // thread hundreds of instructions: sampling with three a key took 10 µs, H200 run 302).
    let segment = len / sample_len;
    let hash = (i as u32).wrapping_add(1).wrapping_mul(0x9E37_79B9) ^ ((i as u32) << 7);
    i * segment + ((hash as u64 * segment) >> 32)
}

/// The rank bound of a sample of `PER_THREAD · 256` keys spread over `row` (key `i` at
/// `position(i, row.len, sample_len)`; loaded into the pool): the largest rank of the narrowest prefix that holds the sample's
/// `sample_wanted` best, so that `sample_wanted` of the sampled keys (more where they tie)
/// rank at or below it. Ends with a barrier after the last visit of the pool, which may
/// then be overwritten.
///
/// # Safety
/// *Block-wide*; the pool holds `PER_THREAD · 256` ranks (32-bit ranks only: the pool of
/// 64-bit keys is empty); `sample_wanted` below the sample's size, so that at least one pass
/// narrows it (and waits for the block).
#[inline(always)]
unsafe fn sample_rank<K: Key, const PER_THREAD: usize>(
    row: &Row<K>,
    layout: &RadixRowsLayout<K::Bits>,
    sample_wanted: u64,
    position: impl Fn(u64, u64, u64) -> u64,
) -> K::Bits {
    let sample_len = (PER_THREAD * RADIX_ROWS_THREADS as usize) as u64;
    let (bits, positions) = unsafe { (layout.pool_bits.bind(), layout.pool_positions.bind()) };
    // Every load is issued before the first store: one memory latency, not one per key
    // (H100 run 39: a tenth of the kernel's stalls waited on these loads one by one).
    let thread = device::thread_idx_x() as u64;
    let position =
        |i: usize| position(thread + (i * RADIX_ROWS_THREADS as usize) as u64, row.len, sample_len);
    let mut sampled = [K::default(); PER_THREAD];
    for (i, key) in sampled.iter_mut().enumerate() {
        *key = unsafe { row.keys.read(row.start + position(i)) };
    }
    for (i, key) in sampled.iter().enumerate() {
        let slot = thread as usize + i * RADIX_ROWS_THREADS as usize;
        unsafe {
            bits.store(slot, row.rank(*key));
            positions.store(slot, position(i) as u32);
        }
    }
    let sample = Pool { bits, positions, len: sample_len as usize };
    // `narrow` clears the histogram and waits for the block before it visits the sample.
    let mut narrowed =
        Narrowed { shift: K::Bits::BITS, prefix: K::Bits::MIN, better: 0, in_prefix: sample_len };
    while narrowed.candidates() > sample_wanted && narrowed.bits_left::<K>() {
        narrowed = unsafe { narrow(&sample, layout, narrowed, sample_wanted) };
    }
    // `narrow` waits for the block after its last visit: the pool may be overwritten.
    narrowed.upper()
}

/// One read of a row longer than the pool that gathers its best keys straight into the pool
/// (32-bit keys): a strided sample of [`SAMPLE`] keys (in the pool) is narrowed to a rank
/// bound at the best key of [`sample_bound`]'s rank, then every key of the row at or below the bound is
/// gathered. When at least `wanted` and at most [`POOL`] keys were within the bound, the
/// pool holds every candidate for the row's `wanted` best, and the usual narrowing from the
/// row (one read per digit, and one more to gather) is skipped. Otherwise (skewed or
/// repeated keys) returns `None` with both counters 0 again, and the caller reads the row as
/// before: a warp stops gathering once the pool overflows, so all-equal rows lose little.
///
/// # Safety
/// *Block-wide*; both counters 0 and ordered before by a barrier; `row.len > POOL`.
#[inline(always)]
unsafe fn speculate<K: Key>(
    row: &Row<K>,
    layout: &RadixRowsLayout<K::Bits>,
    wanted: u64,
) -> Option<Pool<K::Bits>> {
    let (sample_wanted, _) = sample_bound(wanted, row.len)?;
    let bound = unsafe { sample_rank::<K, SAMPLE_PER_THREAD>(row, layout, sample_wanted, strided_position) };
    let (next_slot, bits, positions) =
        unsafe { (layout.next_slot.bind(), layout.pool_bits.bind(), layout.pool_positions.bind()) };
    let pool_full = || unsafe { next_slot.atomic_add(1, 0) } > POOL as u32;
    unsafe {
        row.for_each_within_until::<true>(bound, pool_full, |rank, position| {
            let slot = next_slot.atomic_add(1, 1) as usize;
            if slot < POOL as usize {
                bits.store(slot, rank);
                positions.store(slot, position as u32);
            }
        });
        device::sync_threads();
    }
    let gathered = unsafe { next_slot.load(1) } as u64;
    if (wanted..=POOL).contains(&gathered) {
        return Some(Pool { bits, positions, len: gathered as usize });
    }
    unsafe {
        device::sync_threads(); // every thread has read the count
        if device::thread_idx_x() == 0 {
            next_slot.store(1, 0);
        }
        device::sync_threads();
    }
    None
}

/// The collect pass when the ties with the `wanted`-th best overflow the candidates (every
/// bit chosen): keys better than it and its first ties in column order, ordered placement
/// per tile; stops once all of them are placed. Returns `wanted`.
///
/// # Safety
/// *Block-wide*; every bit of the key chosen (not [`Narrowed::bits_left`]).
#[inline(always)]
unsafe fn collect_ties_in_order<K: Key>(
    row: &Row<K>,
    layout: &RadixRowsLayout<K::Bits>,
    narrowed: Narrowed<K::Bits>,
    wanted: u64,
) -> u64 {
    let (placement, bits, positions) =
        unsafe { (layout.placement.bind(), layout.sort.bits.bind(), layout.sort.positions.bind()) };
    let thread = device::thread_idx_x() as u64;
    let (warp, lane) = (device::warp_id() as usize, device::lane_id() as usize);
    let below_lane = device::lanemask_lt();
    let ties_wanted = wanted - narrowed.better;
    let (mut better_seen, mut ties_seen) = (0u64, 0u64);
    let mut parity = 0;
    let mut tile = 0;
    while tile < row.len && (better_seen < narrowed.better || ties_seen < ties_wanted) {
        let counts = parity * PLACEMENT_SET;
        let mut better_votes = [0u32; ITEMS];
        let mut tie_votes = [0u32; ITEMS];
        let mut ranks = [K::Bits::MAX; ITEMS];
        for i in 0..ITEMS {
            let position = tile + (i * RADIX_ROWS_THREADS as usize) as u64 + thread;
            let valid = position < row.len;
            if valid {
                ranks[i] = row.rank(unsafe { row.keys.read(row.start + position) });
            }
            let (is_better, is_tie) =
                (valid && ranks[i] < narrowed.prefix, valid && ranks[i] == narrowed.prefix);
            better_votes[i] = unsafe { device::ballot(device::FULL_WARP, is_better) };
            tie_votes[i] = unsafe { device::ballot(device::FULL_WARP, is_tie) };
            if lane == 0 {
                let packed = better_votes[i].count_ones() | (tie_votes[i].count_ones() << 16);
                unsafe { placement.store(counts + i * WARPS + warp, packed) };
            }
        }
        unsafe { device::sync_threads() };
        // Warp 0 turns the (item, warp) counts into exclusive offsets, in column order.
        if warp == 0 {
            const PER_LANE: usize = ITEMS * WARPS / 32;
            let mut entries = [0u32; PER_LANE];
            for (e, entry) in entries.iter_mut().enumerate() {
                *entry = unsafe { placement.load(counts + PER_LANE * lane + e) };
            }
            let sum: u32 = entries.iter().sum();
            let inclusive = unsafe { warp::inclusive_scan_add_u32(sum) };
            let mut running = inclusive - sum;
            for (e, entry) in entries.iter().enumerate() {
                unsafe { placement.store(counts + PER_LANE * lane + e, running) };
                running += entry;
            }
            if lane == 31 {
                unsafe { placement.store(counts + ITEMS * WARPS, inclusive) };
            }
        }
        unsafe { device::sync_threads() };
        for i in 0..ITEMS {
            let offset = unsafe { placement.load(counts + i * WARPS + warp) };
            let position = (tile + (i * RADIX_ROWS_THREADS as usize) as u64 + thread) as u32;
            if better_votes[i] & (1 << lane) != 0 {
                let slot = better_seen
                    + (offset & 0xffff) as u64
                    + (better_votes[i] & below_lane).count_ones() as u64;
                unsafe {
                    bits.store(slot as usize, ranks[i]);
                    positions.store(slot as usize, position);
                }
            } else if tie_votes[i] & (1 << lane) != 0 {
                let tie = ties_seen + (offset >> 16) as u64 + (tie_votes[i] & below_lane).count_ones() as u64;
                if tie < ties_wanted {
                    let slot = (narrowed.better + tie) as usize;
                    unsafe {
                        bits.store(slot, ranks[i]);
                        positions.store(slot, position);
                    }
                }
            }
        }
        let total = unsafe { placement.load(counts + ITEMS * WARPS) };
        better_seen += (total & 0xffff) as u64;
        ties_seen += (total >> 16) as u64;
        parity ^= 1;
        tile += TILE;
    }
    wanted
}

/// The `top_k_rows_radix_<key>` kernel: block `p` writes the `k` best of part `p` (module
/// docs).
///
/// # Safety
/// [`RADIX_ROWS_THREADS`] threads, [`RadixRowsLayout::bytes`] of shared memory,
/// `rows · blocks_per_row` blocks; `1 ≤ k ≤` [`MAX_RADIX_ROWS_K`]; buffers as
/// [`RowsParams`] documents.
#[inline(always)]
pub unsafe fn select_rows_radix<K: Key>(params: RowsParams<K>) {
    let part_index = device::block_idx_x() as u64;
    if part_index >= params.rows * params.blocks_per_row.max(1) as u64 {
        return;
    }
    let part = unsafe { part_at(&params, part_index) };
    unsafe { select_part(&params, part_index, part) };
}

/// The layout of a block's shared memory, its counters zeroed and ordered before what
/// follows by a barrier.
///
/// # Safety
/// *Block-wide*.
#[inline(always)]
unsafe fn cleared_layout<B>() -> RadixRowsLayout<B> {
    let layout = RadixRowsLayout::<B>::new();
    if device::thread_idx_x() == 0 {
        unsafe {
            layout.next_slot.bind().store(0, 0);
            layout.next_slot.bind().store(1, 0);
        }
    }
    unsafe { device::sync_threads() };
    layout
}

/// The `k` best of `part` of `params`' keys, written at `part_index · k` (the body of
/// [`select_rows_radix`], for a part the caller chooses).
///
/// # Safety
/// As [`select_rows_radix`]; the part lies within the keys.
#[inline(always)]
unsafe fn select_part<K: Key>(params: &RowsParams<K>, part_index: u64, part: Part) {
    let params = *params;
    // This block's part of the row: columns `first .. first + len`.
    let (first, len) = (part.begin, part.end - part.begin);
    let start = part.row_start + first;
    let largest = Order::from_raw(params.order) == Order::Largest;
    let row = Row { keys: params.keys_in, start, len, flip: order_flip::<K>(largest) };
    let layout = unsafe { cleared_layout::<K::Bits>() };

    let k = params.k as u64;
    let wanted = k.min(len);
    let mut narrowed = Narrowed { shift: K::Bits::BITS, prefix: K::Bits::MIN, better: 0, in_prefix: len };
    // Narrowing from the pool goes on below the sort's slots, to a sort of `k` rounded up:
    // a pass over the pool costs less than the sort's larger merges.
    let sort_target = k.next_power_of_two().min(CAPACITY);
    let speculated = if pool_len::<K::Bits>() > 0 && len > POOL {
        unsafe { speculate(&row, &layout, wanted) }
    } else {
        None
    };
    let count = if let Some(pool) = speculated {
        // Every key of the row within the bound is in the pool, so the pool's ranks below
        // the `wanted`-th best are the row's: narrowing the pool narrows the row.
        narrowed.in_prefix = pool.len as u64;
        unsafe { finish_from_pool::<K>(row.len, &pool, &layout, narrowed, wanted, sort_target) }
    } else {
        // Without a pool, narrow from the row down to the sort's slots.
        let narrow_from_row_to = pool_len::<K::Bits>().max(CAPACITY);
        while narrowed.candidates() > narrow_from_row_to && narrowed.bits_left::<K>() {
            narrowed = unsafe { narrow(&row, &layout, narrowed, wanted) };
        }
        // With a pool, candidates that need more of a thread's registers to sort than a
        // sort of `k` rounded up narrow on in the pool, short rows too: sorting all of a row
        // of 2048 keys for its best 8 took 3× the time of narrowing first (H100 run 41,
        // 10 000 × 2048); narrowing 1000 keys to 512, both sorted in 4 registers, took 14 %
        // more than sorting them all.
        let narrow_in_pool = pool_len::<K::Bits>() > 0
            && narrowed.bits_left::<K>()
            && (narrowed.candidates() > CAPACITY
                || sort_registers(narrowed.candidates(), k) > sort_registers(sort_target, k));
        if !narrow_in_pool && narrowed.candidates() <= CAPACITY {
            unsafe {
                collect_narrowed(
                    &row,
                    &layout.next_slot,
                    0,
                    (&layout.sort.bits, &layout.sort.positions),
                    narrowed,
                )
            }
        } else if !narrow_in_pool {
            // Every bit chosen, or no pool (the narrowing above then chose every bit; the
            // test drops the pool's code from 64-bit kernels), and the ties overflow the sort.
            unsafe { collect_ties_in_order(&row, &layout, narrowed, wanted) }
        } else {
            // More than a sort of `k` takes, no more than the pool: narrow on from the pool.
            let pool_len = unsafe {
                collect_narrowed(
                    &row,
                    &layout.next_slot,
                    1,
                    (&layout.pool_bits, &layout.pool_positions),
                    narrowed,
                )
            };
            let pool = unsafe {
                Pool {
                    bits: layout.pool_bits.bind(),
                    positions: layout.pool_positions.bind(),
                    len: pool_len as usize,
                }
            };
            unsafe { finish_from_pool::<K>(row.len, &pool, &layout, narrowed, wanted, sort_target) }
        }
    };
    unsafe { sort_and_write(&params, &layout, (part_index, start, first), count, largest) };
}

/// Narrows on in `pool`, which holds every key of the row that may be among the `wanted`
/// best (the pool in shared memory, or the bounded split's candidates), until the
/// candidates fit a sort of `sort_target` (or every bit is chosen), then gathers them into
/// the sort's slots from the pool: when the ties with the `wanted`-th best still overflow
/// the sort, the better keys and the ties up to a position that keeps them within it (ties
/// go in column order; positions are columns of a row of `row_len` keys). Returns their
/// number.
///
/// # Safety
/// *Block-wide*; the pool is written (a barrier follows in the first `narrow`, and the
/// gathers order nothing before it); the sort's counter is 0.
#[inline(always)]
unsafe fn finish_from_pool<K: Key>(
    row_len: u64,
    pool: &impl Ranked<K::Bits>,
    layout: &RadixRowsLayout<K::Bits>,
    mut narrowed: Narrowed<K::Bits>,
    wanted: u64,
    sort_target: u64,
) -> u64 {
    // `narrow` clears the histogram and then waits for the block: the pool is complete
    // after that barrier.
    while narrowed.candidates() > sort_target && narrowed.bits_left::<K>() {
        narrowed = unsafe { narrow(pool, layout, narrowed, wanted) };
    }
    let slots = (&layout.sort.bits, &layout.sort.positions);
    if narrowed.candidates() <= sort_target {
        return unsafe { collect_narrowed(pool, &layout.next_slot, 0, slots, narrowed) };
    }
    // Every bit of the key chosen, and the ties with the `wanted`-th best overflow the sort
    // (bf16 logits at k = 1024 put about 18 keys on a value): all of them are in the pool,
    // and the first in column order are the ones the sort would keep, so their positions are
    // narrowed (a digit a pass, as ranks are) until the better keys and the ties up to a
    // position fit the sort of `sort_target`, not one of twice as many slots (or a read of
    // the row, beyond its slots).
    let tie = narrowed.prefix;
    let tied = TiedPositions { pool, tie };
    let room = sort_target - narrowed.better;
    let position_bits = u64::BITS - (row_len.max(1) - 1).leading_zeros();
    let mut by_position =
        Narrowed { shift: position_bits, prefix: 0u32, better: 0, in_prefix: narrowed.in_prefix };
    while by_position.candidates() > room && by_position.shift > 0 {
        by_position = unsafe { narrow(&tied, layout, by_position, wanted - narrowed.better) };
    }
    let last = by_position.upper();
    unsafe {
        collect(pool, &layout.next_slot, 0, slots, |rank, position| {
            rank < tie || (rank == tie && position as u32 <= last)
        })
    };
    narrowed.better + by_position.candidates()
}

/// The positions of the pool's keys of rank `tie` (the ties with the wanted-th best, once
/// every bit of the key is chosen), visited as the ranks a narrowing reads.
struct TiedPositions<'a, B, P> {
    pool: &'a P,
    tie: B,
}

impl<B: OrderedBits, P: Ranked<B>> Ranked<u32> for TiedPositions<'_, B, P> {
    #[inline(always)]
    unsafe fn visit_ranks(&self, mut visit: impl FnMut(u32, u64)) {
        unsafe {
            self.pool.visit_ranks(|rank, position| {
                if rank == self.tie {
                    visit(position as u32, position)
                }
            })
        }
    }
}

/// Sorts the `count` candidates in the sort's slots by (rank, position) and writes the first
/// `k` of part `part_index` (padded beyond `count`): the key its rank decodes to (a NaN read
/// back from `start + position`), its index `first + position` (or `indices_in` there). The candidates go into
/// as few registers a thread as hold them, so that every warp shares the sort (H100 run 39:
/// a quarter of the split LLM rows' stalls sorted 1024 candidates in four warps' 2048
/// slots).
///
/// # Safety
/// *Block-wide*, after the candidates are written.
#[inline(always)]
unsafe fn sort_and_write<K: Key>(
    params: &RowsParams<K>,
    layout: &RadixRowsLayout<K::Bits>,
    part: (u64, u64, u64),
    count: u64,
    largest: bool,
) {
    unsafe { device::sync_threads() };
    let capacity = sort_capacity(count as u32) as usize;
    unsafe {
        match sort_registers(count, params.k as u64) {
            2 => sort_and_write_in::<K, 2>(params, layout, part, (count, capacity), largest),
            4 => sort_and_write_in::<K, 4>(params, layout, part, (count, capacity), largest),
            _ => sort_and_write_in::<K, PAIRS_PER_THREAD>(params, layout, part, (count, capacity), largest),
        }
    }
}

/// The registers a thread of [`sort_and_write`] sorts `count` candidates in, whose slots
/// also take the padding up to `k`: 2, 4 or [`PAIRS_PER_THREAD`].
#[inline(always)]
fn sort_registers(count: u64, k: u64) -> usize {
    let capacity = sort_capacity(count as u32) as u64;
    if capacity <= 64 && k <= 2 * 256 {
        2
    } else if capacity <= 1024 && k <= 4 * 256 {
        4
    } else {
        PAIRS_PER_THREAD
    }
}

/// [`sort_and_write`] with `R` registers a thread: the slots `32·(R·warp + r) + lane`.
///
/// # Safety
/// As [`sort_and_write`], after its barrier; `capacity` and `k` at most `256·R`.
#[inline(always)]
unsafe fn sort_and_write_in<K: Key, const R: usize>(
    params: &RowsParams<K>,
    layout: &RadixRowsLayout<K::Bits>,
    (part_index, start, first): (u64, u64, u64),
    (count, capacity): (u64, usize),
    largest: bool,
) {
    let k = params.k as u64;
    let (bits, positions) = unsafe { (layout.sort.bits.bind(), layout.sort.positions.bind()) };
    let lane = device::lane_id() as usize;
    let warp_base = device::warp_id() as usize * 32 * R;
    let mut pairs = WarpPairs::<K::Bits, R>::padding();
    for r in 0..R {
        let slot = warp_base + r * 32 + lane;
        if (slot as u64) < count {
            unsafe {
                pairs.bits[r] = bits.load(slot);
                pairs.positions[r] = positions.load(slot);
            }
        }
    }
    // (The sort's first stores go to the slots each thread just read: no barrier needed.)
    unsafe { sort_slots(&mut pairs, capacity, &layout.sort) };

    let out_start = part_index * k;
    let padding_key = if largest { K::LOWEST } else { K::HIGHEST };
    let flip = order_flip::<K>(largest);
    for r in 0..R {
        let slot = (warp_base + r * 32 + lane) as u64;
        if slot < k {
            let position = pairs.positions[r];
            let (key, index) = if slot >= count {
                (padding_key, NO_INDEX)
            } else {
                let at = start + position as u64;
                let index = if params.indices_in.is_null() {
                    first + position as u64
                } else {
                    unsafe { params.indices_in.read(at) }
                };
                // The rank decodes to the key bit for bit, except NaNs (they share one
                // rank): only those are read back from the row, for their payloads. (H100
                // run 39: reading every key back was a tenth of the split rows' stalls.)
                let decoded = K::from_ordered(pairs.bits[r].xor(flip));
                #[allow(clippy::eq_op)] // `x != x`: NaN, the only key not equal to itself
                let key = if decoded != decoded { unsafe { params.keys_in.read(at) } } else { decoded };
                (key, index)
            };
            unsafe {
                params.keys_out.write(out_start + slot, key);
                params.indices_out.write(out_start + slot, index);
            }
        }
    }
}

/// Keys of the sample that bounds a bounded split's candidates: every part of a row draws
/// the same ones, so every part finds the same bound without a word between blocks.
pub const BOUNDED_SAMPLE: u64 = 4096;
/// Sampled keys each thread loads for [`BOUNDED_SAMPLE`].
const BOUNDED_SAMPLE_PER_THREAD: usize = (BOUNDED_SAMPLE / RADIX_ROWS_THREADS as u64) as usize;
const _: () = assert!(BOUNDED_SAMPLE <= POOL && BOUNDED_SAMPLE.is_multiple_of(RADIX_ROWS_THREADS as u64));

/// The bounded split's sample rank and candidate capacity for the `wanted` best of a row of
/// `len` keys: the bound is the rank of the sample's `rank`-th best ([`BOUNDED_SAMPLE`] keys
/// spread evenly over the row), and a row's candidates, its keys ranked strictly below the
/// bound, are expected to number about `(rank − 1) · len / BOUNDED_SAMPLE`. The sample's
/// expected count among the `wanted` best, `e = wanted · BOUNDED_SAMPLE / len` rounded up,
/// plus four of its standard deviations and 5 make a shortfall (fewer than `wanted`
/// candidates) rare, under one call in 10^5 for keys in random order; the capacity, four
/// standard deviations and 5 above the rank, makes an overflow as rare. Either sends the
/// finish to the whole row (correct, slower). `None` when the rank would reach the sample's
/// size (`wanted` too large a share of the row for the sample to bound).
///
/// ```
/// use gpu_select_kernels::topk::rows_radix::bounded_bound;
/// // 2^20 keys, k = 1024: the sample's 17th best; about 4096 candidates, room for 9728.
/// assert_eq!(bounded_bound(1024, 1 << 20), Some((17, 9728)));
/// assert_eq!(bounded_bound(2048, 2048), None); // the whole row: nothing to bound
/// ```
pub const fn bounded_bound(wanted: u64, len: u64) -> Option<(u64, u64)> {
    if len == 0 {
        return None;
    }
    let expected = (wanted * BOUNDED_SAMPLE).div_ceil(len);
    let rank = expected + 4 * expected.isqrt() + 5;
    if rank >= BOUNDED_SAMPLE {
        return None;
    }
    let room = rank + 4 * rank.isqrt() + 5;
    let capacity = room * len / BOUNDED_SAMPLE;
    let capacity = if capacity < wanted { wanted } else { capacity };
    Some((rank, if capacity > len { len } else { capacity }))
}

/// Words of [`BoundedParams::tallies`] per row.
pub const BOUNDED_TALLIES: u64 = 5;

/// Parameters of the bounded split of dense rows (`top_k_rows_radix_bounded_<key>`, then
/// `top_k_rows_radix_bounded_finish_<key>`): `rows` as for the radix kernel, its
/// `blocks_per_row` the first pass's parts, its outputs the finish's.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct BoundedParams<K> {
    /// The rows (dense, no `indices_in`), `k`, the order, the parts and the outputs.
    pub rows: RowsParams<K>,
    /// `rows · capacity` candidate keys: row `r`'s at `r · capacity`.
    pub candidate_keys: GlobalPtr<K>,
    /// Their columns in the row.
    pub candidate_positions: GlobalPtr<u64>,
    /// Per row, [`BOUNDED_TALLIES`] words, zero before the first pass: its keys ranked below
    /// the bound, its keys ranked at it, the bound (ordered bits, order flip applied), the
    /// candidate slots taken (the keys of both kinds, plus `capacity + 1` for each block
    /// that could not keep them all), and the complement of the best rank kept (the
    /// largest of the blocks').
    pub tallies: GlobalPtr<u64>,
    /// Candidates a row holds at most ([`bounded_bound`]).
    pub capacity: u64,
}

/// The bounded split's first pass (`top_k_rows_radix_bounded_<key>`), a block per part of
/// a row. Parts split without a bound must each keep their own `k` best, so a row's second
/// pass reads `parts · k` candidates and a row can only be split into parts of many times
/// `k` keys (2^20 keys at k = 1024: 8 parts of 2^17, 60 µs a block, H200). Here every part
/// draws the same sample of the whole row ([`BOUNDED_SAMPLE`] keys) and narrows it to the
/// same bound ([`bounded_bound`]), and keeps only its keys ranked at or below it (in the
/// pool, then copied, with their columns, to the row's candidates at a place one global
/// atomic reserves), counting those below it and those at it apart. A row's candidates then
/// hold about `bounded_bound`'s count whatever the parts, so the row can be split as finely
/// as a wave of blocks takes.
/// 64-bit keys have no pool: their kernel returns at once, and the host never runs it.
///
/// # Safety
/// [`RADIX_ROWS_THREADS`] threads, [`RadixRowsLayout::bytes`] of shared memory,
/// `rows · blocks_per_row` blocks; dense rows whose parts hold fewer than 2^32 keys;
/// `bounded_bound(min(k, cols), cols)` is `Some((_, capacity))`; the tallies zero.
#[inline(always)]
pub unsafe fn bounded_filter<K: Key>(params: BoundedParams<K>) {
    let rows = params.rows;
    let parts = rows.blocks_per_row.max(1) as u64;
    let part_index = device::block_idx_x() as u64;
    let wanted = (rows.k as u64).min(rows.cols);
    let sample_wanted = match bounded_bound(wanted, rows.cols) {
        Some((rank, _)) => rank,
        None => return,
    };
    if pool_len::<K::Bits>() == 0 || part_index >= rows.rows * parts {
        return;
    }
    let part = unsafe { part_at(&rows, part_index) };
    let row_index = part_index / parts;
    let largest = Order::from_raw(rows.order) == Order::Largest;
    let whole =
        Row { keys: rows.keys_in, start: part.row_start, len: rows.cols, flip: order_flip::<K>(largest) };
    let layout = unsafe { cleared_layout::<K::Bits>() };
    let bound = unsafe {
        sample_rank::<K, BOUNDED_SAMPLE_PER_THREAD>(&whole, &layout, sample_wanted, bounded_sample_position)
    };
    // A bound whose digits reached the rank's padding (16-bit keys) has that padding set;
    // no key's rank does, so it is cleared: the bound is then the largest real rank the
    // prefix holds, and keys equal to it count as ties, not candidates.
    let bound = K::Bits::from_u64(bound.to_u64() & (u64::MAX << rank_padding_bits::<K>()));

    let (next_slot, bits, positions, choice) = unsafe {
        (layout.next_slot.bind(), layout.pool_bits.bind(), layout.pool_positions.bind(), layout.choice.bind())
    };
    let piece = Row { start: part.row_start + part.begin, len: part.end - part.begin, ..whole };
    // Keys at or below the bound go to the pool (ties too: the finish breaks them by
    // column); those strictly below are counted apart (`next_slot[0]`).
    let mut better = 0u32;
    // The best rank this thread kept: the finish's narrowing starts below the bits every
    // candidate shares (those of the row's best and the bound).
    let mut best = K::Bits::MAX;
    unsafe {
        piece.for_each_within_until::<false>(
            bound,
            || false,
            |rank, position| {
                better += (rank < bound) as u32;
                if rank < best {
                    best = rank;
                }
                let slot = next_slot.atomic_add(1, 1) as usize;
                if slot < POOL as usize {
                    bits.store(slot, rank);
                    positions.store(slot, position as u32);
                }
            },
        );
        if better > 0 {
            next_slot.atomic_add(0, better);
        }
    }
    let tallies = rows_tallies(&params, row_index);
    // The row's best kept rank, as the largest complement (the tallies start at zero).
    let warp_best = unsafe { warp::reduce_min_u64(best.to_u64()) };
    if device::lane_id() == 0 && warp_best != K::Bits::MAX.to_u64() {
        unsafe { device::global_atomic_max_u64(tallies.as_ptr().add(4), !warp_best) };
    }
    unsafe { device::sync_threads() };
    let kept = unsafe { next_slot.load(1) } as u64;
    if device::thread_idx_x() == 0 {
        // A block that kept more than its pool lost candidates: the row's slots pass the
        // capacity, and the finish does not read the candidates.
        let lost = if kept > POOL { params.capacity + 1 } else { 0 };
        unsafe {
            let base = device::global_atomic_add_u64(tallies.as_ptr().add(3), kept + lost);
            choice.store(0, base);
            let below = next_slot.load(0) as u64;
            if below > 0 {
                device::global_atomic_add_u64(tallies.as_ptr(), below);
            }
            if kept > below {
                device::global_atomic_add_u64(tallies.as_ptr().add(1), kept - below);
            }
            if part_index.is_multiple_of(parts) {
                tallies.write(2, bound.to_u64());
            }
        }
    }
    unsafe { device::sync_threads() };
    let base = unsafe { choice.load(0) };
    let row_candidates = row_index * params.capacity;
    let mut at = device::thread_idx_x() as u64;
    while at < kept.min(POOL) && base + at < params.capacity {
        unsafe {
            let column = part.begin + positions.load(at as usize) as u64;
            let slot = row_candidates + base + at;
            // The rank decodes to the key (a NaN to the canonical one: the finish reads a
            // NaN's payload back from the row).
            params.candidate_keys.write(slot, K::from_ordered(bits.load(at as usize).xor(whole.flip)));
            params.candidate_positions.write(slot, column);
        }
        at += RADIX_ROWS_THREADS as u64;
    }
}

/// Row `row`'s tallies ([`BoundedParams::tallies`]).
#[inline(always)]
fn rows_tallies<K>(params: &BoundedParams<K>, row: u64) -> GlobalPtr<u64> {
    params.tallies.offset(row * BOUNDED_TALLIES)
}

/// A row's candidates of the bounded split, in no particular order: their ranks (from their
/// keys) and, as positions, their columns in the row, so that ties sort by column as they
/// do everywhere else.
struct Candidates<K: Key> {
    keys: GlobalPtr<K>,
    columns: GlobalPtr<u64>,
    start: u64,
    len: u64,
    flip: K::Bits,
}

/// Candidates each thread loads before it visits them: one memory latency for eight.
const CANDIDATES_IN_FLIGHT: usize = 8;

impl<K: Key> Ranked<K::Bits> for Candidates<K> {
    #[inline(always)]
    unsafe fn visit_ranks(&self, mut visit: impl FnMut(K::Bits, u64)) {
        let stride = RADIX_ROWS_THREADS as u64;
        let mut at = device::thread_idx_x() as u64;
        while at < self.len {
            let mut keys = [K::default(); CANDIDATES_IN_FLIGHT];
            let mut columns = [0u64; CANDIDATES_IN_FLIGHT];
            for i in 0..CANDIDATES_IN_FLIGHT {
                let slot = at + i as u64 * stride;
                if slot < self.len {
                    unsafe {
                        keys[i] = self.keys.read(self.start + slot);
                        columns[i] = self.columns.read(self.start + slot);
                    }
                }
            }
            for i in 0..CANDIDATES_IN_FLIGHT {
                if at + (i as u64) * stride < self.len {
                    visit(keys[i].to_ordered().xor(self.flip), columns[i]);
                }
            }
            at += CANDIDATES_IN_FLIGHT as u64 * stride;
        }
    }
}

/// The most keys one rank may hold for [`place_by_counting`]: each of them counts the others.
const MAX_COUNTED_TIES: u64 = 256;

/// Writes the `wanted` best of a row's `candidates` (all of them ranked within `narrowed`'s
/// prefix, none better) in order without a sort, when one digit below the prefix reaches
/// every bit of the key (16-bit keys whose candidates share most of the exponent) and no
/// rank among the `wanted` best holds more than [`MAX_COUNTED_TIES`] keys: one histogram of
/// that digit gives each rank's first place (its count of better keys), the candidates of
/// the ranks up to the `wanted`-th best are placed by rank (a slot from their rank's cursor),
/// and each then counts the keys of its rank in lower columns: its place is its rank's first
/// place plus that count, ties by column as everywhere (the `wanted`-th best's ties beyond
/// `wanted` are dropped). The bitonic sort of 1024 candidates and the narrowing of the
/// ties by column were the finish's larger half (H200 run 365). Where it does not apply it
/// writes nothing and returns the narrowing so far (after its histogram, as [`narrow`]
/// leaves it, when a rank holds too many keys), for the caller to narrow on and sort.
///
/// # Safety
/// *Block-wide*; the layout's counters are 0; `wanted ≤ ` the candidates `≤` [`POOL`];
/// columns below 2^32.
#[inline(always)]
unsafe fn place_by_counting<K: Key>(
    rows: &RowsParams<K>,
    candidates: &Candidates<K>,
    layout: &RadixRowsLayout<K::Bits>,
    narrowed: Narrowed<K::Bits>,
    (wanted, row_index, row_start): (u64, u64, u64),
) -> Result<(), Narrowed<K::Bits>> {
    if pool_len::<K::Bits>() == 0
        || narrowed.shift > DIGIT_BITS + rank_padding_bits::<K>()
        || narrowed.better != 0
        || wanted < rows.k as u64
    {
        return Err(narrowed);
    }
    let (histogram, warp_sums, choice) =
        unsafe { (layout.histogram.bind(), layout.warp_sums.bind(), layout.choice.bind()) };
    let (ranks, columns, cursors) =
        unsafe { (layout.pool_bits.bind(), layout.pool_positions.bind(), layout.sort.positions.bind()) };
    let thread = device::thread_idx_x() as usize;
    let counts = unsafe { count_digit(&histogram, &warp_sums, narrowed, candidates, |_| true) };
    // Each bin's first place, in the histogram and as its cursor; the most keys a rank up to
    // the `wanted`-th best's holds (those whose first place is before `wanted`), in this
    // thread's bins.
    let mut most = 0;
    for (bin, count, first) in counts.bins() {
        unsafe {
            histogram.store(bin, first as u32);
            cursors.store(bin, first as u32);
        }
        if first < wanted {
            most = most.max(count);
        }
    }
    let within = unsafe { counts.choose(&choice, wanted) };
    let (chosen, better, tied) = (counts.digit(within.prefix), within.better, within.in_prefix);
    // Over the block.
    let most = unsafe { warp::reduce_max_u32(most) };
    unsafe {
        device::sync_threads(); // every thread has read the choice
        if device::lane_id() == 0 {
            warp_sums.store(device::warp_id() as usize, most as u64);
        }
        device::sync_threads();
    }
    let most = (0..WARPS).map(|warp| unsafe { warp_sums.load(warp) }).max().unwrap_or(0);
    if most > MAX_COUNTED_TIES {
        return Err(within);
    }
    // The candidates of the ranks up to the chosen one, placed by rank.
    unsafe {
        candidates.visit_ranks(|rank, column| {
            let bin = counts.digit(rank);
            if bin <= chosen {
                let slot = cursors.atomic_add(bin, 1) as usize;
                ranks.store(slot, rank);
                columns.store(slot, column as u32);
            }
        });
        device::sync_threads();
    }
    let k = rows.k as u64;
    let room = wanted - better;
    let flip = candidates.flip;
    let mut at = thread;
    while (at as u64) < better + tied {
        let (rank, column) = unsafe { (ranks.load(at), columns.load(at)) };
        let bin = counts.digit(rank);
        let (start, end) = unsafe { (histogram.load(bin) as usize, cursors.load(bin) as usize) };
        let lower = (start..end).filter(|&j| unsafe { columns.load(j) } < column).count() as u64;
        if bin < chosen || lower < room {
            let place = row_index * k + start as u64 + lower;
            // The rank decodes to the key bit for bit, except NaNs (they share one rank):
            // read back from the row for their payloads.
            let decoded = K::from_ordered(rank.xor(flip));
            #[allow(clippy::eq_op)] // `x != x`: NaN, the only key not equal to itself
            let key = if decoded != decoded {
                unsafe { rows.keys_in.read(row_start + column as u64) }
            } else {
                decoded
            };
            unsafe {
                rows.keys_out.write(place, key);
                rows.indices_out.write(place, column as u64);
            }
        }
        at += RADIX_ROWS_THREADS as usize;
    }
    Ok(())
}

/// The bounded split's second pass (`top_k_rows_radix_bounded_finish_<key>`), a block per
/// row, writing what [`select_rows_radix`] writes for the row:
/// - when the row's candidates (its keys at or below the bound) are at least `k` and all
///   fit, they are narrowed (histogram
///   passes over them, as the radix kernel narrows its pool) until the `k` best and their
///   ties fit a sort of `k` rounded up (ties beyond it narrowed by column, the first kept),
///   gathered with their columns, and sorted by rank and column;
/// - when the ties with the bound overflow the candidates but fewer than `k` keys rank below
///   it, the bound is the `k`-th best's rank: the row's better keys and first ties in column
///   order are gathered from the row (one read at most, ending once all are found: a row of
///   equal keys reads its first `k`);
/// - otherwise (the sample missed, or 64-bit keys) the whole row as the radix kernel takes
///   it, one block to the row: correct, and slow (H200: about 0.5 ms for 2^20 keys with
///   ties), which the sample makes rare for keys in any order but an adversary's.
///
/// # Safety
/// As [`bounded_filter`], `rows` blocks, after it.
#[inline(always)]
pub unsafe fn bounded_finish<K: Key>(params: BoundedParams<K>) {
    let rows = RowsParams { blocks_per_row: 1, ..params.rows };
    let row_index = device::block_idx_x() as u64;
    if row_index >= rows.rows {
        return;
    }
    let tallies = rows_tallies(&params, row_index);
    let (kept, ties, bound, slots, best) =
        unsafe { (tallies.read(0), tallies.read(1), tallies.read(2), tallies.read(3), !tallies.read(4)) };
    let k = rows.k as u64;
    let wanted = k.min(rows.cols);
    let whole = Part { row_start: row_index * rows.row_stride, begin: 0, end: rows.cols };
    let largest = Order::from_raw(rows.order) == Order::Largest;
    let flip = order_flip::<K>(largest);
    let from_candidates = pool_len::<K::Bits>() > 0 && (wanted..=params.capacity).contains(&slots);
    let from_ties = pool_len::<K::Bits>() > 0 && kept < wanted && wanted <= kept + ties;
    if from_candidates {
        let candidates = Candidates {
            keys: params.candidate_keys,
            columns: params.candidate_positions,
            start: row_index * params.capacity,
            len: slots,
            flip,
        };
        let layout = unsafe { cleared_layout::<K::Bits>() };
        let sort_target = k.next_power_of_two().min(CAPACITY);
        // Every candidate ranks from the best kept to the bound (the whole range, were none
        // recorded).
        let low = K::Bits::from_u64(if best <= bound { best } else { 0 });
        let narrowed = Narrowed::spanning(low, K::Bits::from_u64(bound), slots);
        // (Its slots hold the candidates up to the `k`-th best's rank: at most the pool.)
        let placed = if rows.cols <= 1 << 32 && slots <= POOL {
            unsafe {
                place_by_counting(&rows, &candidates, &layout, narrowed, (wanted, row_index, whole.row_start))
            }
        } else {
            Err(narrowed)
        };
        if let Err(narrowed) = placed {
            let count = unsafe {
                finish_from_pool::<K>(rows.cols, &candidates, &layout, narrowed, wanted, sort_target)
            };
            unsafe { sort_and_write(&rows, &layout, (row_index, whole.row_start, 0), count, largest) };
        }
    } else if from_ties {
        let row = Row { keys: rows.keys_in, start: whole.row_start, len: rows.cols, flip };
        let layout = unsafe { cleared_layout::<K::Bits>() };
        let narrowed = Narrowed { shift: 0, prefix: K::Bits::from_u64(bound), better: kept, in_prefix: ties };
        let count = unsafe { collect_ties_in_order(&row, &layout, narrowed, wanted) };
        unsafe { sort_and_write(&rows, &layout, (row_index, whole.row_start, 0), count, largest) };
    } else {
        unsafe { select_part(&rows, row_index, whole) };
    }
}

#[cfg(test)]
mod tests {
    use super::Narrowed;
    use crate::key::OrderedBits;

    /// `spanning` chooses exactly the bits that `low` and `high` share: every rank between
    /// them has the prefix, and the next bit down tells `low` from `high`.
    fn check_spanning<B: OrderedBits + core::fmt::Debug>(low: B, high: B) {
        let narrowed = Narrowed::spanning(low, high, 7);
        assert_eq!((narrowed.better, narrowed.in_prefix), (0, 7));
        let (low, high) = (low.to_u64(), high.to_u64());
        let middle = low + (high - low) / 2;
        for rank in [low, low.saturating_add(1), middle, high.saturating_sub(1), high] {
            if (low..=high).contains(&rank) {
                assert!(narrowed.has_prefix(B::from_u64(rank)), "{low:#x} ..= {high:#x}: {rank:#x}");
            }
        }
        assert!(narrowed.upper().to_u64() >= high);
        if narrowed.shift > 0 {
            let bit = 1u64 << (narrowed.shift - 1);
            assert_ne!(low & bit, high & bit, "{low:#x} ..= {high:#x}: shift {}", narrowed.shift);
        }
        // Ranks outside the prefix's range do not have it.
        if narrowed.shift < B::BITS {
            let below = (high >> narrowed.shift << narrowed.shift).checked_sub(1);
            let above = narrowed.upper().to_u64().checked_add(1).filter(|&r| r <= B::MAX.to_u64());
            for rank in below.into_iter().chain(above) {
                assert!(!narrowed.has_prefix(B::from_u64(rank)), "{low:#x} ..= {high:#x}: {rank:#x}");
            }
        }
    }

    #[test]
    fn spanning_chooses_the_bits_low_and_high_share() {
        let mut next = crate::testing::xorshift(0x9e37_79b9_7f4a_7c15);
        for _ in 0..20_000 {
            let (a, b) = (next(), next() >> (next() % 64));
            check_spanning(a.min(b), a.max(b));
            let (a, b) = (a as u32, (b >> (next() % 32)) as u32);
            check_spanning(a.min(b), a.max(b));
        }
        for (low, high) in
            [(0u32, 0u32), (5, 5), (0, u32::MAX), (u32::MAX, u32::MAX), (0x8000_0000, 0x8000_ffff)]
        {
            check_spanning(low, high);
            check_spanning(low as u64, high as u64);
        }
        check_spanning(0u64, u64::MAX);
        // Ranks of one sign and exponent (16-bit keys: 16 bits of padding): 9 bits chosen.
        let narrowed = Narrowed::spanning(0x3f10_0000u32, 0x3f70_0000, 9);
        assert_eq!((narrowed.shift, narrowed.prefix), (23, 0x3f00_0000));
    }
}
