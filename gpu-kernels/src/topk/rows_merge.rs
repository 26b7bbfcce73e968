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
//! sort: the block stages the row's ranks in shared memory once (one read of the
//! candidates) and every thread searches for its own. A candidate stops searching once its
//! place reaches `k`.
//!
//! Against selecting again (the radix kernel over the candidates, narrowing and then a block
//! sort of up to 2048), this does `(runs − 1) · log2(k)` shared-memory reads per candidate
//! and no barrier after the staging.
//!
//! Rows are dense runs: row `r` is `cols = runs · k` candidates at `r · row_stride` of
//! `keys_in` (with `indices_in`, or the position in the row when null), run `i` its keys
//! `i · k .. (i + 1) · k`, each sorted best first by (rank, column) with no padding. Block `r`
//! writes row `r`'s `k` best, sorted, at `r · k`.

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
/// below it, and with `ties_first` those equal to it too.
#[inline(always)]
unsafe fn count_before<B: OrderedBits>(
    ranks: &SharedSlice<B>,
    start: usize,
    len: usize,
    x: B,
    ties_first: bool,
) -> usize {
    let (mut low, mut remaining) = (0, len);
    while remaining > 0 {
        let half = remaining / 2;
        let rank = unsafe { ranks.load(start + low + half) };
        if rank < x || (ties_first && rank == x) {
            low += half + 1;
            remaining -= half + 1;
        } else {
            remaining = half;
        }
    }
    low
}

/// The `top_k_rows_merge_<key>` kernel: block `r` writes the `k` best of row `r`'s runs
/// (module docs).
///
/// # Safety
/// [`MERGE_ROWS_THREADS`] threads, [`RowsMergeLayout::bytes`] of shared memory, `rows`
/// blocks; `cols = runs · k` with `1 ≤ runs ≤` [`MERGE_MAX_RUNS`] and `cols ≤`
/// [`MERGE_MAX_CANDIDATES`]; each run sorted and unpadded as the module docs say;
/// `blocks_per_row = 1`; buffers as [`RowsParams`] documents.
#[inline(always)]
pub unsafe fn merge_rows<K: Key>(params: RowsParams<K>) {
    let row = device::block_idx_x() as u64;
    if row >= params.rows {
        return;
    }
    let largest = Order::from_raw(params.order) == Order::Largest;
    let flip = if largest { K::Bits::MAX } else { K::Bits::MIN };
    let (k, len) = (params.k as usize, params.cols as usize);
    let runs = len / k;
    let start = row * params.row_stride;
    let ranks = unsafe { RowsMergeLayout::<K::Bits>::new().ranks.bind() };
    let thread = device::thread_idx_x() as usize;
    let mut at = thread;
    while at < len {
        unsafe { ranks.store(at, params.keys_in.read(start + at as u64).to_ordered().xor(flip)) };
        at += MERGE_ROWS_THREADS as usize;
    }
    unsafe { device::sync_threads() };

    let mut at = thread;
    while at < len {
        let (run, position) = (at / k, at % k);
        let rank = unsafe { ranks.load(at) };
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
        at += MERGE_ROWS_THREADS as usize;
    }
}
