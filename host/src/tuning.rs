//! Tuning values: the launch-shape choices that measurements made, as one value a [`Gpu`]
//! handle carries, so that a benchmark sweep can try others ([`Gpu::with_tuning`]) without
//! the library reading the environment.
//!
//! [`Gpu`]: crate::Gpu
//! [`Gpu::with_tuning`]: crate::Gpu::with_tuning

use crate::limits::DeviceLimits;

/// The kernel family [`Algorithm::Auto`](crate::Algorithm::Auto) runs on rows when
/// [`Tuning::rows_auto_kernel`] forces one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowsKernelFamily {
    /// Warp queues (WarpSelect, BlockSelect).
    WarpSelect,
    /// Radix selection per row.
    RadixSelect,
}

/// Launch-shape choices, the defaults as measured on an H100 (runs recorded in
/// `docs/results/README.md`); [`Tuning::for_device`] gives them, and every handle starts with
/// them. Changing one changes speed, never results: the tests pass with any value.
///
/// ```
/// use gpu_select::{Gpu, Tuning};
///
/// let gpu = Gpu::emulator();
/// assert_eq!(*gpu.tuning(), Tuning::for_device(gpu.limits()));
/// let sweep = gpu.with_tuning(Tuning { bitonic_tight_bound: false, ..*gpu.tuning() });
/// assert!(!sweep.tuning().bitonic_tight_bound);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tuning {
    /// Blocks per multiprocessor of a bitonic or heap top-k's pass (4).
    pub top_k_blocks_per_sm: u32,
    /// Tiles a block of a later top-k pass reduces, so that each pass shrinks the candidates
    /// a lot (8).
    pub top_k_tiles_per_block_later: u64,
    /// Whether the bitonic top-k prunes with the tight bound from its sample (and a second
    /// chain when the bound proves too tight); off, the bound is the sample's `k`-th best.
    pub bitonic_tight_bound: bool,
    /// What [`Algorithm::Auto`](crate::Algorithm::Auto) runs on rows: `None` for the cost
    /// model's choice, else this family (a measurement hook for the cost model's sweeps).
    pub rows_auto_kernel: Option<RowsKernelFamily>,
    /// Rows with warp queues: `Some(true)` gives each warp a row of its own, `Some(false)`
    /// four warps a row; `None` decides by the shape.
    pub rows_warp_per_row: Option<bool>,
    /// Radix rows: the parts a long dense row is split into (at most `cols / k`); `None`
    /// decides by the shape.
    pub rows_radix_parts: Option<u64>,
    /// Radix rows: whether a long dense row is split under a bound its parts sample alike
    /// (`Some(true)` wherever the bound applies, `Some(false)` never); `None` decides by
    /// the shape.
    pub rows_bounded_split: Option<bool>,
    /// Dense rows with `k` beyond 2048 (the batched radix select): the workspace of one
    /// launch's rows stays within about this many bytes (256 MiB); more rows run in more
    /// launches, one after another in the same workspace (a row needing more runs alone).
    pub rows_large_k_workspace_bytes: usize,
    /// Bucket multiselect reads each rank among its label's keys (one block per rank) once
    /// every active label holds at most this many keys (2^18); more take another filter
    /// pass. The pick reads a label's keys from global memory, a digit a read, until at
    /// most 2048 share the digits chosen, then from shared memory: a label of 2^18 keys
    /// takes about two reads of them by one block, where a filter pass over the data
    /// would take two to three reads of all of it and a round trip to the host.
    pub multiselect_pick_max: u32,
    /// Bucket multiselect places the active labels' keys straight from the data (its
    /// second and last read) only when they are at most this many keys (2^23); more take a
    /// filter first and are placed from its candidates. The place pass writes each kept key
    /// at its label's next place, and these writes scatter: on an H100 (runs 230–231), from
    /// 2^28 keys, placing 101 quantiles' 3.6 · 10^6 keys took 0.46 ms (the count: 0.43),
    /// 1001 quantiles' 3.6 · 10^7 keys 1.84–1.98 ms, against 0.90 ms for a filter and 0.55
    /// for placing its candidates. Whole calls (run 231): straight from the data faster up
    /// to 201 quantiles (7.2 · 10^6 keys), 7 % faster at 401, even at 601, slower at 1001,
    /// and 1.5× slower at 301 (1.1 · 10^7 keys; not understood), hence the bound below it.
    /// From 2^24 keys, placing 1001 quantiles' keys straight is faster (a filter first made
    /// them 30–50 % slower).
    pub multiselect_place_keys: u64,
    /// Labels a bucket multiselect filter shares out among the active labels (8192, the
    /// kernels' most); with more than half as many active labels the kept keys are sorted.
    pub multiselect_labels: u32,
    /// Bucket multiselect's sample on one GPU is one key for every 2^14 (at least 1024), and
    /// at most this many (16 384, reached at 2^28 keys). Its extremes bound the first
    /// pass's table, about `n / (sample + 1)` keys fall below and above them, in one label
    /// each, and its keys share the table's labels out. A sample of 1024 left those two
    /// labels at about 262 000 keys each at n = 2^28, over the pick's limit, so a quantile
    /// at 0 (numpy's linear method reads rank 1 there) took a filter pass over the data.
    /// Over shards (DIBMS) the sample crosses the network and stays 1024 keys in all.
    pub multiselect_sample: u32,
    /// Multiselect of rows sorted together (`Gpu::multiselect_rows`, `Gpu::quantiles_rows`):
    /// the padded keys of the rows one batch sorts (2^24); more rows go batch after batch
    /// through the same buffers, at most three of keys (no indices) of this size (200 MB
    /// for `f32`). A row longer than this is a batch of its own.
    pub multiselect_rows_batch_keys: usize,
    /// Bytes the host reads from the device at once where it reads values once, through a
    /// page-locked staging area the device keeps (8 MiB): the keys of many rows' ranks come
    /// in parts of at most this (at least one row's each).
    pub host_staging_bytes: usize,
    /// k-NN: bytes of distance tiles and per-tile candidates a search keeps at once (1 GiB;
    /// Faiss's GPU resources reserve up to 1.5 GiB); queries and base vectors are tiled to
    /// fit (the matrix of all distances is never held). For `k` beyond 2048 half of it: the
    /// batched radix select then splits taller query tiles into more launches. Measured on
    /// SIFT1M's shape (H200, run 181): 1 GiB against 512 MiB 102.4 → 97.6 ms at k = 100,
    /// 123.1 → 109.9 at k = 1000 (fewer, longer column tiles); 2 GiB slower again (108.2).
    pub knn_tile_bytes: usize,
    /// k-NN: streams a search spreads its query tiles over (1: this handle's; at most 8,
    /// and at most one per query tile). With two, one tile's product can overlap another's
    /// selections (the Faiss paper overlaps two); each stream gets its own tiles within
    /// `knn_tile_bytes` shared out. Two measured slower (the products already fill the GPU):
    /// 131.8 against 123.0 ms (H100 run 153), 119.1 against 102.4 (H200 run 180), so 1.
    pub knn_streams: usize,
    /// k-NN with [`KnnPrecision::Tf32Reranked`](crate::KnnPrecision::Tf32Reranked): the
    /// candidates re-ranked per query beyond the `k` asked for, as a percentage of `k` (at
    /// least 32 more; 100: twice `k` and 32 at least). More candidates prove more queries
    /// (the last candidate lies farther from the `k`-th) at the cost of a wider selection.
    pub knn_rerank_extra_percent: u32,
    /// k-NN over a base in host memory ([`Gpu::streamed_index`](crate::Gpu::streamed_index)):
    /// the most bytes of base vectors copied to the device at once, in each of two buffers
    /// (one copied while the other is searched). A full chunk is the largest power of two
    /// of vectors within this and a quarter of the base, and the first three are an eighth,
    /// a quarter and a half of one; a base whose full chunk would be below 1/32 of this is
    /// copied whole. 256 MiB.
    pub knn_stream_chunk_bytes: usize,
    /// k-NN in `f32` ([`KnnPrecision::F32`](crate::KnnPrecision::F32)) and TF32: whether a search
    /// filters its distances as the product makes them (true) rather than writing every
    /// distance tile and selecting from it. A probe of the base (every `s`-th vector, about
    /// `√(base · k)` of them) gives each query a bound its `k` nearest lie within; the
    /// product keeps only the pairs within it, so the distances are neither written nor
    /// read again, and a query whose pairs within the bound overflow their row is searched
    /// again unfiltered. Taken where the rows of candidates stay small (at most a quarter of
    /// the base, `k ≤ 2048`), for searches and not for graphs or streamed bases. On
    /// SIFT1M's shape (H200, run 343) 15.5–18.2 % faster than writing the tiles at k = 1 …
    /// 1000: on. Also the TF32 search's
    /// ([`KnnPrecision::Tf32Reranked`](crate::KnnPrecision::Tf32Reranked)): its product on
    /// the tensor cores keeps the pairs within the bound widened by TF32's error bound, and
    /// its results are the `f32` search's bit for bit (run 346: 46.9 ms at k = 100, 4.35×
    /// torch's `f32` search; its unfiltered form proved no query there).
    pub knn_filter: bool,
    /// SBP top-k: the cutoff of a pass (the most candidates a tile keeps) is `k` plus this
    /// percentage of `k`, rounded up to a power of two (50). A larger cutoff lets a tile
    /// keep whole buckets sooner (fewer narrowing passes over its tile) but makes the next
    /// pass read more; 0 and 100 measured within 1 % of 50 for the radix form, 0 9 % slower
    /// for the tree (H200 run 169).
    pub sbp_cutoff_slack_percent: u32,
    /// SBP top-k: the least cutoff, a power of two (32; 64 measured within 1 %).
    pub sbp_min_cutoff: u32,
    /// SBP search tree: its 255 splitters cover this many times the sampled rank of a tile's
    /// `k`-th best, evenly (2: 5 % faster than 4 and 8, H200 run 169).
    pub sbp_tree_spread: u32,
}

impl Tuning {
    /// The values for a device. Only sm_90 GPUs (H100, H200) have been measured so far, so
    /// today every device gets their values; what does depend on the device (grids of one
    /// wave, blocks per multiprocessor) scales with its multiprocessor count at launch.
    pub fn for_device(_limits: &DeviceLimits) -> Self {
        Self::default()
    }
}

impl Default for Tuning {
    fn default() -> Self {
        Tuning {
            top_k_blocks_per_sm: 4,
            top_k_tiles_per_block_later: 8,
            bitonic_tight_bound: true,
            rows_auto_kernel: None,
            rows_warp_per_row: None,
            rows_radix_parts: None,
            rows_bounded_split: None,
            rows_large_k_workspace_bytes: 256 << 20,
            multiselect_pick_max: 1 << 18,
            multiselect_place_keys: 1 << 23,
            multiselect_labels: 8192,
            multiselect_sample: 1 << 14,
            multiselect_rows_batch_keys: 1 << 24,
            host_staging_bytes: 8 << 20,
            knn_tile_bytes: 1 << 30,
            knn_streams: 1,
            knn_rerank_extra_percent: 100,
            knn_stream_chunk_bytes: 256 << 20,
            knn_filter: true,
            sbp_cutoff_slack_percent: 50,
            sbp_min_cutoff: 32,
            sbp_tree_spread: 2,
        }
    }
}
