//! The second pass of a split row: the `k` best of a row's parts, each part's `k` best
//! already sorted, by co-ranking instead of selecting again.
//!
//! When few long rows are split over blocks ([`crate::topk::rows_radix`]), each part writes
//! its `k` best sorted by (rank, column). The row's answer is the first `k` of the stable
//! merge of those runs, and every candidate's place in that merge follows from binary
//! searches alone: a candidate at position `p` of run `i` with rank `x` lands at
//!
//! `p + Σ_{j < i} |{r ∈ run_j : r ≤ x}| + Σ_{j > i} |{r ∈ run_j : r < x}|`,
//!
//! so ties go to the lower run first, and, since the runs are the row's parts in column
//! order and each run breaks its own ties by column, ties in the merge go to the lower column
//! as everywhere in the library. A candidate whose place is below `k` writes itself there;
//! the places are a permutation, so each output slot has exactly one writer. No histogram, no
//! sort: each block stages the row's ranks in shared memory (one read of the candidates)
//! and every thread searches for its own. A candidate stops searching once its place
//! reaches `k`. A row's candidates may be shared among several blocks (`blocks_per_row`),
//! each staging every rank and placing its slices: few rows then still fill the GPU.
//!
//! Against selecting again (the radix kernel over the candidates, narrowing and then a block
//! sort of up to 2048), this does `(runs − 1) · log2(k)` shared-memory reads per candidate
//! and no barrier after the staging.
//!
//! Rows are dense runs: row `r` is `cols = runs · k` candidates at `r · row_stride` of
//! `keys_in` (with `indices_in`, or the position in the row when null), run `i` its keys
//! `i · k .. (i + 1) · k`, each sorted best first by (rank, column) with no padding. The blocks
//! of row `r` write its `k` best, sorted, at `r · k`.

use crate::device::{self, SharedLayout, SharedRegion, SharedSlice};
use crate::key::{Key, OrderedBits};
use crate::params::Order;
use crate::topk::rows::RowsParams;

/// Threads per block: a row each.
pub const MERGE_ROWS_THREADS: u32 = 512;
/// The most candidates a row may have: what the shared memory stages.
pub const MERGE_MAX_CANDIDATES: u64 = 8192;
/// The most runs a row may have: each candidate searches all but its own.
pub const MERGE_MAX_RUNS: u64 = 16;

/// Shared memory of `top_k_rows_merge_<key>`.
#[derive(Clone, Copy, Debug)]
pub struct RowsMergeLayout<B> {
    /// The ranks of a row's candidates.
    pub ranks: SharedRegion<B>,
    /// Bytes to ask for at launch.
    pub bytes: usize,
}

impl<B> RowsMergeLayout<B> {
    /// The layout.
    pub const fn new() -> Self {
        let (layout, ranks) = SharedLayout::new().push::<B>(MERGE_MAX_CANDIDATES as usize);
        Self { ranks, bytes: layout.bytes() }
    }
}

impl<B> Default for RowsMergeLayout<B> {
    fn default() -> Self {
        Self::new()
    }
}

/// How many ranks of the sorted run `ranks[start .. start + len]` come before `x`: those
/// below it, and with `ties_first` those equal to it too. Branch-free: the steps depend
/// on `len` alone, so a warp's lanes search in step (H100 run 39: a branchy 64-bit search
/// was half the kernel's stalls).
#[inline(always)]
unsafe fn count_before<B: OrderedBits>(
    ranks: &SharedSlice<B>,
    start: u32,
    len: u32,
    x: B,
    ties_first: bool,
) -> u32 {
    if len == 0 {
        return 0;
    }
    let before = |rank: B| rank < x || (ties_first && rank == x);
    // `start +` the count lies in `base ..= base + remaining`.
    let (mut base, mut remaining) = (start, len);
    while remaining > 1 {
        let half = remaining / 2;
        if before(unsafe { ranks.load((base + half) as usize) }) {
            base += half;
        }
        remaining -= half;
    }
    base - start + before(unsafe { ranks.load(base as usize) }) as u32
}

/// The `top_k_rows_merge_<key>` kernel: the blocks of row `r` write the `k` best of its
/// runs (module docs), block `b` of the row placing every `blocks_per_row`-th slice of
/// [`MERGE_ROWS_THREADS`] candidates, starting with slice `b`.
///
/// # Safety
/// [`MERGE_ROWS_THREADS`] threads, [`RowsMergeLayout::bytes`] of shared memory,
/// `rows · blocks_per_row` blocks (`blocks_per_row ≥ 1`); `cols = runs · k` with
/// `1 ≤ runs ≤` [`MERGE_MAX_RUNS`] and `cols ≤` [`MERGE_MAX_CANDIDATES`]; each run sorted
/// and unpadded as the module docs say; buffers as [`RowsParams`] documents.
#[inline(always)]
pub unsafe fn merge_rows<K: Key>(params: RowsParams<K>) {
    let blocks_per_row = params.blocks_per_row.max(1) as u64;
    let block = device::block_idx_x() as u64;
    let (row, slice) = (block / blocks_per_row, (block % blocks_per_row) as u32);
    if row >= params.rows {
        return;
    }
    let largest = Order::from_raw(params.order) == Order::Largest;
    let flip = if largest { K::Bits::MAX } else { K::Bits::MIN };
    // Both fit in 32 bits: `len ≤ MERGE_MAX_CANDIDATES`.
    let (k, len) = (params.k, params.cols as u32);
    let runs = len / k;
    let start = row * params.row_stride;
    let ranks = unsafe { RowsMergeLayout::<K::Bits>::new().ranks.bind() };
    let thread = device::thread_idx_x();
    let mut at = thread;
    while at < len {
        let rank = unsafe { params.keys_in.read(start + at as u64) }.to_ordered().xor(flip);
        unsafe { ranks.store(at as usize, rank) };
        at += MERGE_ROWS_THREADS;
    }
    unsafe { device::sync_threads() };

    let mut at = slice * MERGE_ROWS_THREADS + thread;
    while at < len {
        let (run, position) = (at / k, at % k);
        let rank = unsafe { ranks.load(at as usize) };
        let mut place = position;
        let mut other = 0;
        while other < runs && place < k {
            if other != run {
                place += unsafe { count_before(&ranks, other * k, k, rank, other < run) };
            }
            other += 1;
        }
        if place < k {
            let from = start + at as u64;
            let index =
                if params.indices_in.is_null() { at as u64 } else { unsafe { params.indices_in.read(from) } };
            let to = row * k as u64 + place as u64;
            unsafe {
                params.keys_out.write(to, params.keys_in.read(from));
                params.indices_out.write(to, index);
            }
        }
        at += blocks_per_row as u32 * MERGE_ROWS_THREADS;
    }
}
