//! The exported kernels, all generated from the one table below.
//!
//! Each row names a kernel, its launch parameters and the function of a lower layer that is
//! its body. Keyed rows are instantiated for every key type, as `<name>_<key>`
//! (`block_sort_f32`); the host reaches them through [`KernelKey`], so a missing
//! instantiation is a compile error on the host, not a "symbol not found" at run time.

use half::{bf16, f16};

use crate::bandwidth::{ReadFloorParams, read_floor};
use crate::block::bitonic_sort::{sort_segment_keys, sort_segments};
use crate::gather::{GatherIndicesParams, gather_indices};
use crate::key::Key;
use crate::knn::norms::{NormsParams, squared_norms_bf16, squared_norms_f16, squared_norms_f32};
use crate::knn::place::{PlaceParams, place_neighbours};
use crate::knn::tensor::{
    RerankCandidatesParams, RerankParams, Tf32FilterParams, distance_filter_tf32_bf16,
    distance_filter_tf32_f16, distance_filter_tf32_f32, distance_tile_tf32_bf16, distance_tile_tf32_f16,
    distance_tile_tf32_f32, distance_tile_tf32x3_f32, rerank_bf16, rerank_candidates_bf16,
    rerank_candidates_f16, rerank_candidates_f32, rerank_f16, rerank_f32,
};
use crate::knn::tile::{
    DistanceFilterParams, DistanceTileParams, distance_filter_bf16, distance_filter_f16, distance_filter_f32,
    distance_tile_bf16, distance_tile_f16, distance_tile_f32,
};
use crate::knn::{Bf16Bits, F16Bits};
use crate::merge::{MergeParams, merge_runs};
use crate::params::BlockSortParams;
use crate::probe::{ProbeParams, global_atomics, indices, shared_memory, warp_collectives};
use crate::select::multi::{
    GatherKeysParams, MultiParams, PickParams, SampleSummaryParams, bases as multiselect_bases_body,
    block_counts as multiselect_block_counts_body, count as multiselect_count_body,
    filter as multiselect_filter_body, gather as multiselect_gather_body, pick as multiselect_pick_body,
    place as multiselect_place_body, sample as multiselect_sample_body, totals as multiselect_totals_body,
};
use crate::select::quantiles::{QuantilesRowsParams, of_sorted_rows as quantiles_rows_body};
use crate::select::sample::{
    SampleParams, bracket as sample_bracket_body, bracket_place as sample_bracket_place_body,
    bracket_top_k as sample_bracket_top_k_body, choose as sample_choose_body, count as sample_count_body,
    filter as sample_filter_body, gather as sample_gather_body, nearest as sample_nearest_body,
    range as sample_range_body, sample as sample_sample_body, window as sample_window_body,
};
use crate::topk::bitonic::{
    FilterParams, TopKParams, filter_inside, reduce_q1, reduce_q2, reduce_q4, reduce_q8, reduce_q16,
    reduce_q32,
};
use crate::topk::heap::{HeapParams, select_per_thread};
use crate::topk::radix::{
    RadixParams, choose as radix_choose_body, count as radix_count_body, filter as radix_filter_body,
};
use crate::topk::rows::{
    RowsParams, select_rows_q1, select_rows_q2, select_rows_q4, select_rows_q8, select_rows_q16,
    select_rows_q32, select_rows_q64,
};
use crate::topk::rows_merge::merge_rows;
use crate::topk::rows_radix::{BoundedParams, bounded_filter, bounded_finish, select_rows_radix};
use crate::topk::rows_warp_radix::{
    select_rows_warp_radix, select_rows_warp_radix_128, select_rows_warp_radix_256,
    select_rows_warp_radix_512,
};
use crate::topk::sbp::{
    SbpParams, partition as sbp_partition_body, partition_tree_first as sbp_partition_tree_body,
    tree as sbp_tree_body,
};
use crate::topk::sort_choose::{
    SortChooseParams, count as sort_choose_count_body, scan as sort_choose_scan_body,
    scatter as sort_choose_scatter_body,
};

/// A kernel the host can launch: the PTX symbol and the body the emulator runs.
pub struct KernelId<P> {
    /// PTX entry-point name.
    pub name: &'static str,
    /// The kernel body, for the emulator (on the GPU the entry point calls it).
    pub body: unsafe fn(P),
}

impl<P> Clone for KernelId<P> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<P> Copy for KernelId<P> {}

impl<P> core::fmt::Debug for KernelId<P> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "KernelId({})", self.name)
    }
}

/// The kernels instantiated for a key type.
pub trait KernelKey: Key {
    /// Block bitonic sort of segments of up to 2048 keys.
    const BLOCK_SORT: KernelId<BlockSortParams<Self>>;
    /// Block bitonic sort of segments of up to 2048 keys, keys alone (no index).
    const BLOCK_SORT_KEYS: KernelId<BlockSortParams<Self>>;
    /// Bitonic top-k reduction pass, k ≤ 32.
    const TOPK_BITONIC_Q1: KernelId<TopKParams<Self>>;
    /// Bitonic top-k reduction pass, k ≤ 64.
    const TOPK_BITONIC_Q2: KernelId<TopKParams<Self>>;
    /// Bitonic top-k reduction pass, k ≤ 128.
    const TOPK_BITONIC_Q4: KernelId<TopKParams<Self>>;
    /// Bitonic top-k reduction pass, k ≤ 256.
    const TOPK_BITONIC_Q8: KernelId<TopKParams<Self>>;
    /// Bitonic top-k reduction pass, k ≤ 512 (the block's best in shared memory).
    const TOPK_BITONIC_Q16: KernelId<TopKParams<Self>>;
    /// Bitonic top-k reduction pass, k ≤ 1024 (the block's best in shared memory).
    const TOPK_BITONIC_Q32: KernelId<TopKParams<Self>>;
    /// Bitonic top-k: the inputs inside a tight bound, appended for a reduction chain.
    const TOPK_BITONIC_FILTER: KernelId<FilterParams<Self>>;
    /// Per-thread top-k: each thread's best `k` in a heap in shared memory.
    const TOPK_HEAP: KernelId<HeapParams<Self>>;
    /// Radix-select top-k: histogram of one level's digit.
    const RADIX_COUNT: KernelId<RadixParams<Self>>;
    /// Radix-select top-k: the target digit and the blocks' offsets of one level.
    const RADIX_CHOOSE: KernelId<RadixParams<Self>>;
    /// Radix-select top-k: outputs and candidates of one level.
    const RADIX_FILTER: KernelId<RadixParams<Self>>;
    /// Sort & choose: histogram of one radix-sort pass's digit per block.
    const SORT_CHOOSE_COUNT: KernelId<SortChooseParams<Self>>;
    /// Sort & choose: the blocks' places per digit (one block).
    const SORT_CHOOSE_SCAN: KernelId<SortChooseParams<Self>>;
    /// Sort & choose: one stable radix-sort pass (the last writes the first `k`).
    const SORT_CHOOSE_SCATTER: KernelId<SortChooseParams<Self>>;
    /// Bucket select: the data's smallest and largest rank, before level 0.
    const SAMPLE_SELECT_RANGE: KernelId<SampleParams<Self>>;
    /// SampleSelect: a level's sample and splitters (or the base case).
    const SAMPLE_SELECT_SAMPLE: KernelId<SampleParams<Self>>;
    /// SampleSelect: buckets, oracles and histograms of a level.
    const SAMPLE_SELECT_COUNT: KernelId<SampleParams<Self>>;
    /// SampleSelect: a level's target bucket, block offsets and next level.
    const SAMPLE_SELECT_CHOOSE: KernelId<SampleParams<Self>>;
    /// SampleSelect: a level's target bucket to the next buffer (and top-k outputs).
    const SAMPLE_SELECT_FILTER: KernelId<SampleParams<Self>>;
    /// SampleSelect, selection only: a level's target bucket to the next buffer, in any order.
    const SAMPLE_SELECT_GATHER: KernelId<SampleParams<Self>>;
    /// SampleSelect, selection only: the first level's bracket pass (counts, and copies the
    /// keys between the bounds).
    const SAMPLE_SELECT_BRACKET: KernelId<SampleParams<Self>>;
    /// SampleSelect, top-k: the first level's bracket pass (counts, and copies the keys below
    /// the upper bound in runs).
    const SAMPLE_SELECT_BRACKET_TOP_K: KernelId<SampleParams<Self>>;
    /// SampleSelect, top-k: the bracket's runs to their places in input order, and the upper
    /// bound's first ties.
    const SAMPLE_SELECT_BRACKET_PLACE: KernelId<SampleParams<Self>>;
    /// SampleSelect, approximate: the window's counts (the splitters around the wanted rank).
    const SAMPLE_SELECT_WINDOW: KernelId<SampleParams<Self>>;
    /// SampleSelect, approximate: the splitter nearest to the wanted rank.
    const SAMPLE_SELECT_NEAREST: KernelId<SampleParams<Self>>;
    /// Bucket multiselect: the data's first-pass labels counted per block, and its extremes.
    const MULTISELECT_COUNT: KernelId<MultiParams<Self>>;
    /// Bucket multiselect: the keys of active labels kept, relabelled and counted.
    const MULTISELECT_FILTER: KernelId<MultiParams<Self>>;
    /// Bucket multiselect: how many keys each block keeps in the next filter.
    const MULTISELECT_BLOCK_COUNTS: KernelId<MultiParams<Self>>;
    /// Bucket multiselect, last pass: where each block's keys of each active label go.
    const MULTISELECT_BASES: KernelId<MultiParams<Self>>;
    /// Bucket multiselect, last pass: the keys of active labels written together by label.
    const MULTISELECT_PLACE: KernelId<MultiParams<Self>>;
    /// Bucket multiselect: each wanted key among its label's keys.
    const MULTISELECT_PICK: KernelId<PickParams<Self>>;
    /// Bucket multiselect: the count rows summed per label.
    const MULTISELECT_TOTALS: KernelId<MultiParams<Self>>;
    /// Keys at given positions (multiselect's sample and answers).
    const MULTISELECT_GATHER: KernelId<GatherKeysParams<Self>>;
    /// Bucket multiselect: the sample's summary (extremes and keys per first-pass slot).
    const MULTISELECT_SAMPLE: KernelId<SampleSummaryParams<Self>>;
    /// numpy's quantiles of rows already sorted, interpolated on the device.
    const QUANTILES_ROWS: KernelId<QuantilesRowsParams<Self>>;
    /// Batched top-k (BlockSelect), k ≤ 32.
    const ROWS_Q1: KernelId<RowsParams<Self>>;
    /// Batched top-k (BlockSelect), k ≤ 64.
    const ROWS_Q2: KernelId<RowsParams<Self>>;
    /// Batched top-k (BlockSelect), k ≤ 128.
    const ROWS_Q4: KernelId<RowsParams<Self>>;
    /// Batched top-k (BlockSelect), k ≤ 256.
    const ROWS_Q8: KernelId<RowsParams<Self>>;
    /// Batched top-k (BlockSelect), k ≤ 512.
    const ROWS_Q16: KernelId<RowsParams<Self>>;
    /// Batched top-k (BlockSelect), k ≤ 1024.
    const ROWS_Q32: KernelId<RowsParams<Self>>;
    /// Batched top-k (BlockSelect), k ≤ 2048.
    const ROWS_Q64: KernelId<RowsParams<Self>>;
    /// Batched top-k by radix selection, a block per row, k ≤ 2048.
    const ROWS_RADIX: KernelId<RowsParams<Self>>;
    /// Batched top-k by radix selection, rows split under a bound their parts sample alike:
    /// each part's keys below the bound (16- and 32-bit keys).
    const ROWS_RADIX_BOUNDED: KernelId<BoundedParams<Self>>;
    /// The bounded split's second pass: a block per row over its parts' candidates.
    const ROWS_RADIX_BOUNDED_FINISH: KernelId<BoundedParams<Self>>;
    /// Batched top-k by radix selection, a warp per row of at most 128 keys, k ≤ 256.
    const ROWS_WARP_RADIX_128: KernelId<RowsParams<Self>>;
    /// Batched top-k by radix selection, a warp per row of at most 256 keys, k ≤ 256.
    const ROWS_WARP_RADIX_256: KernelId<RowsParams<Self>>;
    /// Batched top-k by radix selection, a warp per row of at most 512 keys, k ≤ 256.
    const ROWS_WARP_RADIX_512: KernelId<RowsParams<Self>>;
    /// Batched top-k by radix selection, a warp per row of at most 1024 keys, k ≤ 256.
    const ROWS_WARP_RADIX: KernelId<RowsParams<Self>>;
    /// The `k` best of each row's sorted runs of `k`, by co-ranking: a split row's second
    /// pass.
    const ROWS_MERGE: KernelId<RowsParams<Self>>;
    /// Split-bucket partition: one pass, each tile reduced to its candidates at a fixed
    /// place.
    const SBP_PARTITION: KernelId<SbpParams<Self>>;
    /// Split-bucket partition: the search tree form's first pass (its splitters all one
    /// key: only the keys at or below the top one kept at load).
    const SBP_PARTITION_TREE: KernelId<SbpParams<Self>>;
    /// Split-bucket partition: the search tree's splitters from a sample (one block).
    const SBP_TREE: KernelId<SbpParams<Self>>;
    /// Merge of neighbouring sorted runs (merge path).
    const MERGE_RUNS: KernelId<MergeParams<Self>>;
    /// Every kernel name of this key type, as in the PTX.
    const KERNEL_NAMES: &'static [&'static str];
}

crate::__kernel_table! {
    keyed for [f32, f64, i32, u32, i64, u64, f16, bf16] {
        BLOCK_SORT = block_sort(BlockSortParams) => sort_segments;
        BLOCK_SORT_KEYS = block_sort_keys(BlockSortParams) => sort_segment_keys;
        MERGE_RUNS = merge_runs(MergeParams) => merge_runs;
        TOPK_BITONIC_Q1 = topk_bitonic_q1(TopKParams) => reduce_q1;
        TOPK_BITONIC_Q2 = topk_bitonic_q2(TopKParams) => reduce_q2;
        TOPK_BITONIC_Q4 = topk_bitonic_q4(TopKParams) => reduce_q4;
        TOPK_BITONIC_Q8 = topk_bitonic_q8(TopKParams) => reduce_q8;
        TOPK_BITONIC_Q16 = topk_bitonic_q16(TopKParams) => reduce_q16;
        TOPK_BITONIC_Q32 = topk_bitonic_q32(TopKParams) => reduce_q32;
        TOPK_BITONIC_FILTER = topk_bitonic_filter(FilterParams) => filter_inside;
        TOPK_HEAP = topk_heap(HeapParams) => select_per_thread;
        ROWS_Q1 = top_k_rows_q1(RowsParams) => select_rows_q1;
        ROWS_Q2 = top_k_rows_q2(RowsParams) => select_rows_q2;
        ROWS_Q4 = top_k_rows_q4(RowsParams) => select_rows_q4;
        ROWS_Q8 = top_k_rows_q8(RowsParams) => select_rows_q8;
        ROWS_Q16 = top_k_rows_q16(RowsParams) => select_rows_q16;
        ROWS_Q32 = top_k_rows_q32(RowsParams) => select_rows_q32;
        ROWS_Q64 = top_k_rows_q64(RowsParams) => select_rows_q64;
        ROWS_RADIX = top_k_rows_radix(RowsParams) => select_rows_radix;
        ROWS_RADIX_BOUNDED = top_k_rows_radix_bounded(BoundedParams) => bounded_filter;
        ROWS_RADIX_BOUNDED_FINISH = top_k_rows_radix_bounded_finish(BoundedParams) => bounded_finish;
        ROWS_WARP_RADIX_128 = top_k_rows_warp_radix128(RowsParams) => select_rows_warp_radix_128;
        ROWS_WARP_RADIX_256 = top_k_rows_warp_radix256(RowsParams) => select_rows_warp_radix_256;
        ROWS_WARP_RADIX_512 = top_k_rows_warp_radix512(RowsParams) => select_rows_warp_radix_512;
        ROWS_WARP_RADIX = top_k_rows_warp_radix(RowsParams) => select_rows_warp_radix;
        ROWS_MERGE = top_k_rows_merge(RowsParams) => merge_rows;
        SBP_PARTITION = sbp_partition(SbpParams) => sbp_partition_body;
        SBP_PARTITION_TREE = sbp_partition_tree(SbpParams) => sbp_partition_tree_body;
        SBP_TREE = sbp_tree(SbpParams) => sbp_tree_body;
        RADIX_COUNT = radix_count(RadixParams) => radix_count_body;
        RADIX_CHOOSE = radix_choose(RadixParams) => radix_choose_body;
        RADIX_FILTER = radix_filter(RadixParams) => radix_filter_body;
        SORT_CHOOSE_COUNT = sort_choose_count(SortChooseParams) => sort_choose_count_body;
        SORT_CHOOSE_SCAN = sort_choose_scan(SortChooseParams) => sort_choose_scan_body;
        SORT_CHOOSE_SCATTER = sort_choose_scatter(SortChooseParams) => sort_choose_scatter_body;
        SAMPLE_SELECT_RANGE = sample_select_range(SampleParams) => sample_range_body;
        SAMPLE_SELECT_SAMPLE = sample_select_sample(SampleParams) => sample_sample_body;
        SAMPLE_SELECT_COUNT = sample_select_count(SampleParams) => sample_count_body;
        SAMPLE_SELECT_CHOOSE = sample_select_choose(SampleParams) => sample_choose_body;
        SAMPLE_SELECT_FILTER = sample_select_filter(SampleParams) => sample_filter_body;
        SAMPLE_SELECT_GATHER = sample_select_gather(SampleParams) => sample_gather_body;
        SAMPLE_SELECT_BRACKET = sample_select_bracket(SampleParams) => sample_bracket_body;
        SAMPLE_SELECT_BRACKET_TOP_K = sample_select_bracket_top_k(SampleParams) => sample_bracket_top_k_body;
        SAMPLE_SELECT_BRACKET_PLACE = sample_select_bracket_place(SampleParams) => sample_bracket_place_body;
        SAMPLE_SELECT_WINDOW = sample_select_window(SampleParams) => sample_window_body;
        SAMPLE_SELECT_NEAREST = sample_select_nearest(SampleParams) => sample_nearest_body;
        MULTISELECT_COUNT = multiselect_count(MultiParams) => multiselect_count_body;
        MULTISELECT_FILTER = multiselect_filter(MultiParams) => multiselect_filter_body;
        MULTISELECT_BLOCK_COUNTS = multiselect_block_counts(MultiParams) => multiselect_block_counts_body;
        MULTISELECT_BASES = multiselect_bases(MultiParams) => multiselect_bases_body;
        MULTISELECT_PLACE = multiselect_place(MultiParams) => multiselect_place_body;
        MULTISELECT_PICK = multiselect_pick(PickParams) => multiselect_pick_body;
        MULTISELECT_TOTALS = multiselect_totals(MultiParams) => multiselect_totals_body;
        MULTISELECT_GATHER = multiselect_gather(GatherKeysParams) => multiselect_gather_body;
        MULTISELECT_SAMPLE = multiselect_sample(SampleSummaryParams) => multiselect_sample_body;
        QUANTILES_ROWS = quantiles_rows(QuantilesRowsParams) => quantiles_rows_body;
    }
    plain {
        /// Read-only pass over a buffer: the benchmarks' floor.
        READ_FLOOR = read_floor_u32(ReadFloorParams) => read_floor;
        /// The caller's indices for selected positions.
        GATHER_INDICES = gather_selected_indices(GatherIndicesParams) => gather_indices;
        /// k-NN: squared norms of `f32` vectors.
        KNN_NORMS_F32 = knn_norms_f32(NormsParams<f32>) => squared_norms_f32;
        /// k-NN: squared norms of binary16 vectors.
        KNN_NORMS_F16 = knn_norms_f16(NormsParams<F16Bits>) => squared_norms_f16;
        /// k-NN: squared norms of bfloat16 vectors.
        KNN_NORMS_BF16 = knn_norms_bf16(NormsParams<Bf16Bits>) => squared_norms_bf16;
        /// k-NN: a tile of distances of `f32` vectors (a tiled matrix product and its epilogue).
        KNN_DISTANCE_TILE_F32 = knn_distance_tile_f32(DistanceTileParams<f32>) => distance_tile_f32;
        /// k-NN: a tile of distances of binary16 vectors.
        KNN_DISTANCE_TILE_F16 = knn_distance_tile_f16(DistanceTileParams<F16Bits>) => distance_tile_f16;
        /// k-NN: a tile of distances of bfloat16 vectors.
        KNN_DISTANCE_TILE_BF16 = knn_distance_tile_bf16(DistanceTileParams<Bf16Bits>) => distance_tile_bf16;
        /// k-NN: the pairs of `f32` vectors within each query's bound, as candidates (the
        /// tile's product, no tile written).
        KNN_DISTANCE_FILTER_F32 = knn_distance_filter_f32(DistanceFilterParams<f32>) => distance_filter_f32;
        /// k-NN: the pairs of binary16 vectors within each query's bound.
        KNN_DISTANCE_FILTER_F16 = knn_distance_filter_f16(DistanceFilterParams<F16Bits>) => distance_filter_f16;
        /// k-NN: the pairs of bfloat16 vectors within each query's bound.
        KNN_DISTANCE_FILTER_BF16 = knn_distance_filter_bf16(DistanceFilterParams<Bf16Bits>) => distance_filter_bf16;
        /// k-NN: a tile of approximate distances of `f32` vectors on the tensor cores (TF32).
        KNN_DISTANCE_TILE_TF32_F32 = knn_distance_tile_tf32_f32(DistanceTileParams<f32>) => distance_tile_tf32_f32;
        /// k-NN: a tile of approximate distances of binary16 vectors on the tensor cores.
        KNN_DISTANCE_TILE_TF32_F16 = knn_distance_tile_tf32_f16(DistanceTileParams<F16Bits>) => distance_tile_tf32_f16;
        /// k-NN: a tile of approximate distances of bfloat16 vectors on the tensor cores.
        KNN_DISTANCE_TILE_TF32_BF16 = knn_distance_tile_tf32_bf16(DistanceTileParams<Bf16Bits>) => distance_tile_tf32_bf16;
        /// k-NN: a tile of approximate distances of `f32` vectors on the tensor cores, split
        /// TF32 (three products per pair).
        KNN_DISTANCE_TILE_TF32X3_F32 = knn_distance_tile_tf32x3_f32(DistanceTileParams<f32>) => distance_tile_tf32x3_f32;
        /// k-NN: the pairs of `f32` vectors within each query's bound widened by TF32's
        /// margin, as candidates (the TF32 tile's product, no tile written).
        KNN_DISTANCE_FILTER_TF32_F32 = knn_distance_filter_tf32_f32(Tf32FilterParams<f32>) => distance_filter_tf32_f32;
        /// k-NN: the TF32 filter of binary16 vectors.
        KNN_DISTANCE_FILTER_TF32_F16 = knn_distance_filter_tf32_f16(Tf32FilterParams<F16Bits>) => distance_filter_tf32_f16;
        /// k-NN: the TF32 filter of bfloat16 vectors.
        KNN_DISTANCE_FILTER_TF32_BF16 = knn_distance_filter_tf32_bf16(Tf32FilterParams<Bf16Bits>) => distance_filter_tf32_bf16;
        /// k-NN: the candidates' exact `f32` distances, `f32` vectors.
        KNN_RERANK_F32 = knn_rerank_f32(RerankParams<f32>) => rerank_f32;
        /// k-NN: the candidates' exact `f32` distances, binary16 vectors.
        KNN_RERANK_F16 = knn_rerank_f16(RerankParams<F16Bits>) => rerank_f16;
        /// k-NN: the candidates' exact `f32` distances, bfloat16 vectors.
        KNN_RERANK_BF16 = knn_rerank_bf16(RerankParams<Bf16Bits>) => rerank_bf16;
        /// k-NN: the TF32 filter's candidates that can be among the nearest, with their
        /// exact `f32` distances' keys, `f32` vectors.
        KNN_RERANK_CANDIDATES_F32 = knn_rerank_candidates_f32(RerankCandidatesParams<f32>) => rerank_candidates_f32;
        /// k-NN: the TF32 filter's candidates re-ranked, binary16 vectors.
        KNN_RERANK_CANDIDATES_F16 = knn_rerank_candidates_f16(RerankCandidatesParams<F16Bits>) => rerank_candidates_f16;
        /// k-NN: the TF32 filter's candidates re-ranked, bfloat16 vectors.
        KNN_RERANK_CANDIDATES_BF16 = knn_rerank_candidates_bf16(RerankCandidatesParams<Bf16Bits>) => rerank_candidates_bf16;
        /// k-NN: neighbours moved into their rows (offsets, signs, a graph's own index).
        KNN_PLACE = knn_place(PlaceParams) => place_neighbours;
        /// Probe of thread, block and grid indices.
        PROBE_INDICES = probe_indices(ProbeParams) => indices;
        /// Probe of the warp collectives.
        PROBE_WARP = probe_warp(ProbeParams) => warp_collectives;
        /// Probe of shared memory and shared atomics.
        PROBE_SHARED = probe_shared(ProbeParams) => shared_memory;
        /// Probe of global atomics and fences.
        PROBE_GLOBAL_ATOMICS = probe_global_atomics(ProbeParams) => global_atomics;
    }
}
