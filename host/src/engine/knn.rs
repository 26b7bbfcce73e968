//! Exact k-NN search ([`gpu_select_kernels::knn`]): norms, distance tiles, the rows top-k
//! per tile, and the merge of column tiles, within a memory budget.
//!
//! For each tile of queries: for each column tile of the base, one launch writes the tile's
//! distances and one rows top-k keeps each query's `k` best of it, moved into that query's
//! row of candidates (`base_tiles · k` per query); one more rows top-k over the candidates
//! (with their base indices) keeps the `k` best. A base that fits one column tile needs no
//! merge. The tiles are sized so that the distances and candidates held at once stay within
//! [`Tuning::knn_tile_bytes`](crate::Tuning::knn_tile_bytes).
//!
//! A filtered search ([`Tuning::knn_filter`](crate::Tuning::knn_filter), [`KnnFilter`])
//! writes no distance tile of the whole base. For each tile of queries: the distances to a
//! probe of the base (every `step`-th vector) and their `k`-th smallest per query, the
//! query's bound (the probe is part of the base, so its `k` nearest lie within it); then one
//! launch of the product over the whole base keeps, per query, the pairs within the bound
//! as candidates (`rank << 32 | index`, so that ordering them orders by distance, then by
//! index, as every search does); one rows top-k of those keeps the `k` best, unpacked into
//! place. Each pair's distance is the same arithmetic as in the unfiltered tiles, so the
//! results are the unfiltered search's bit for bit. A query whose pairs within the bound
//! overflow its row (a probe unlike the base around it, or many equal distances) is found
//! by its count and searched again unfiltered ([`Gpu::knn_unproven`]).
//!
//! A TF32 search ([`KnnPrecision::Tf32Reranked`]) is filtered the same way where the `f32`
//! one would be, with its product on the tensor cores: the probe's bound (exact, in `f32`)
//! is widened by TF32's error bound for the query ([`KnnPrecision::margin`]), so that every
//! pair the `f32` filter keeps is kept, in rows up to twice as long. The rows top-k of
//! their TF32 keys gives each query's `k`-th TF32 distance `A`; the candidates within
//! `A + 2 · margin` (which hold the `k` nearest) get their exact distances' keys
//! (`knn_rerank_candidates_<storage>`), the others the largest key, and one more rows top-k
//! keeps the `k` best: the `f32` search's results bit for bit. A query whose row overflows,
//! or whose `A` or margin is not finite, is searched again in `f32`. Since the TF32 filter
//! walks base tiles (H200 run 379) it is the faster at every `k` the filter takes.

use gpu_select_kernels::entry::{
    KNN_DISTANCE_FILTER_BF16, KNN_DISTANCE_FILTER_F16, KNN_DISTANCE_FILTER_F32,
    KNN_DISTANCE_FILTER_TF32_BF16, KNN_DISTANCE_FILTER_TF32_F16, KNN_DISTANCE_FILTER_TF32_F32,
    KNN_DISTANCE_TILE_BF16, KNN_DISTANCE_TILE_F16, KNN_DISTANCE_TILE_F32, KNN_DISTANCE_TILE_TF32_BF16,
    KNN_DISTANCE_TILE_TF32_F16, KNN_DISTANCE_TILE_TF32_F32, KNN_DISTANCE_TILE_TF32X3_F32, KNN_NORMS_BF16,
    KNN_NORMS_F16, KNN_NORMS_F32, KNN_PLACE, KNN_RERANK_BF16, KNN_RERANK_CANDIDATES_BF16,
    KNN_RERANK_CANDIDATES_F16, KNN_RERANK_CANDIDATES_F32, KNN_RERANK_F16, KNN_RERANK_F32, KernelId,
};
use gpu_select_kernels::knn::norms::{NORMS_THREADS, NormsParams};
use gpu_select_kernels::knn::place::{KEEP_ALL, PLACE_THREADS, PlaceParams};
use gpu_select_kernels::knn::tensor::{
    Margin, RERANK_THREADS, RerankCandidatesParams, RerankParams, Tf32FilterParams, Tf32TileLayout,
    walk_grid, walks,
};
use gpu_select_kernels::knn::tile::{
    DISTANCE_THREADS, DistanceFilterParams, DistanceLayout, DistanceTileParams, FilterTarget, distance_grid,
};
use gpu_select_kernels::knn::{Bf16Bits, Component, F16Bits, Metric};
use gpu_select_kernels::params::{GlobalPtr, Order};
use gpu_select_kernels::warp::select::MAX_QUEUE_K;

use crate::MAX_SMALL_SORT_LEN;
use crate::buffer::{DeviceBuffer, DeviceValue};
use crate::engine::rows::{RowsAlgorithm, RowsSpec};
use crate::engine::sort::Pairs;
use crate::error::{Error, Result};
use crate::gpu::{Gpu, LaunchShape};
use crate::results::TopK;
use crate::workspace::{WorkspaceCarver, check_key_count};

/// Blocks of the warp-per-row kernels at most (grid-stride beyond).
const MAX_ROW_BLOCKS: u64 = 4096;
/// Streams a search takes at most, whatever the tuning asks (each is a CUDA stream made per
/// search, with buffers of its own).
const MAX_KNN_STREAMS: usize = 8;
/// How many times longer a TF32 filter's rows are than the f32 filter's: room for the
/// pairs its margin adds.
const TF32_FILTER_ROOM: usize = 2;
/// Queries per tile the planner starts from: enough for the product to
/// fill the GPU (blocks of 128 × 128 distances), few enough that a column tile of a large base
/// stays long.
const QUERY_TILE_TARGET: usize = 1024;

/// A type vectors are stored in, and its kernels: what the distance kernels read as
/// [`Component`]s. Sealed by where it lives (public, in a crate-private module).
pub trait KnnStorage: DeviceValue {
    /// The kernels' view of the type (the same bits).
    type Stored: Component;
    /// Squared norms of vectors of this type.
    const NORMS: KernelId<NormsParams<Self::Stored>>;
    /// Distance tiles of vectors of this type.
    const TILE: KernelId<DistanceTileParams<Self::Stored>>;
    /// The filtered product: each query's pairs within its bound, as candidates.
    const FILTER: KernelId<DistanceFilterParams<Self::Stored>>;
    /// Approximate distance tiles on the tensor cores (TF32).
    const TILE_TF32: KernelId<DistanceTileParams<Self::Stored>>;
    /// Split TF32 tiles (three products per pair) and whether they are split; for 16-bit
    /// storage, which TF32 holds exactly, the one-product kernel.
    const TILE_TF32X3: (KernelId<DistanceTileParams<Self::Stored>>, bool);
    /// Whether TF32 holds every value of the type exactly (16-bit floats).
    const EXACT_IN_TF32: bool;
    /// Exact distances of each query's candidates.
    const RERANK: KernelId<RerankParams<Self::Stored>>;
    /// The filtered product on the tensor cores: each query's pairs within its bound
    /// widened by TF32's margin.
    const FILTER_TF32: KernelId<Tf32FilterParams<Self::Stored>>;
    /// The TF32 filter's candidates that can be among the nearest, with their exact keys.
    const RERANK_CANDIDATES: KernelId<RerankCandidatesParams<Self::Stored>>;
    /// Whether `FILTER_TF32` walks base tiles where [`walks`] says so (`f32` vectors: each
    /// block a query tile and every `width`-th base tile, [`walk_grid`], with
    /// [`Tf32TileLayout::walking`]'s shared memory), not one tile a block.
    const TF32_FILTER_WALKS: bool;
}

impl KnnStorage for f32 {
    type Stored = f32;
    const NORMS: KernelId<NormsParams<f32>> = KNN_NORMS_F32;
    const TILE: KernelId<DistanceTileParams<f32>> = KNN_DISTANCE_TILE_F32;
    const FILTER: KernelId<DistanceFilterParams<f32>> = KNN_DISTANCE_FILTER_F32;
    const TILE_TF32: KernelId<DistanceTileParams<f32>> = KNN_DISTANCE_TILE_TF32_F32;
    const TILE_TF32X3: (KernelId<DistanceTileParams<f32>>, bool) = (KNN_DISTANCE_TILE_TF32X3_F32, true);
    const EXACT_IN_TF32: bool = false;
    const RERANK: KernelId<RerankParams<f32>> = KNN_RERANK_F32;
    const FILTER_TF32: KernelId<Tf32FilterParams<f32>> = KNN_DISTANCE_FILTER_TF32_F32;
    const RERANK_CANDIDATES: KernelId<RerankCandidatesParams<f32>> = KNN_RERANK_CANDIDATES_F32;
    const TF32_FILTER_WALKS: bool = true;
}

impl KnnStorage for half::f16 {
    type Stored = F16Bits;
    const NORMS: KernelId<NormsParams<F16Bits>> = KNN_NORMS_F16;
    const TILE: KernelId<DistanceTileParams<F16Bits>> = KNN_DISTANCE_TILE_F16;
    const FILTER: KernelId<DistanceFilterParams<F16Bits>> = KNN_DISTANCE_FILTER_F16;
    const TILE_TF32: KernelId<DistanceTileParams<F16Bits>> = KNN_DISTANCE_TILE_TF32_F16;
    const TILE_TF32X3: (KernelId<DistanceTileParams<F16Bits>>, bool) = (KNN_DISTANCE_TILE_TF32_F16, false);
    const EXACT_IN_TF32: bool = true;
    const RERANK: KernelId<RerankParams<F16Bits>> = KNN_RERANK_F16;
    const FILTER_TF32: KernelId<Tf32FilterParams<F16Bits>> = KNN_DISTANCE_FILTER_TF32_F16;
    const RERANK_CANDIDATES: KernelId<RerankCandidatesParams<F16Bits>> = KNN_RERANK_CANDIDATES_F16;
    const TF32_FILTER_WALKS: bool = false;
}

impl KnnStorage for half::bf16 {
    type Stored = Bf16Bits;
    const NORMS: KernelId<NormsParams<Bf16Bits>> = KNN_NORMS_BF16;
    const TILE: KernelId<DistanceTileParams<Bf16Bits>> = KNN_DISTANCE_TILE_BF16;
    const FILTER: KernelId<DistanceFilterParams<Bf16Bits>> = KNN_DISTANCE_FILTER_BF16;
    const TILE_TF32: KernelId<DistanceTileParams<Bf16Bits>> = KNN_DISTANCE_TILE_TF32_BF16;
    const TILE_TF32X3: (KernelId<DistanceTileParams<Bf16Bits>>, bool) = (KNN_DISTANCE_TILE_TF32_BF16, false);
    const EXACT_IN_TF32: bool = true;
    const RERANK: KernelId<RerankParams<Bf16Bits>> = KNN_RERANK_BF16;
    const FILTER_TF32: KernelId<Tf32FilterParams<Bf16Bits>> = KNN_DISTANCE_FILTER_TF32_BF16;
    const RERANK_CANDIDATES: KernelId<RerankCandidatesParams<Bf16Bits>> = KNN_RERANK_CANDIDATES_BF16;
    const TF32_FILTER_WALKS: bool = false;
}

/// How a search computes its distances.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum KnnPrecision {
    /// Every distance in `f32` on the CUDA cores (the default).
    #[default]
    F32,
    /// Distances on the tensor cores with TF32 inputs (about 2^-10 relative error in each
    /// product), for more candidates than asked for (`k` plus
    /// [`Tuning::knn_rerank_extra_percent`](crate::Tuning::knn_rerank_extra_percent) of it, at
    /// least 32 more); the candidates' distances then computed again in `f32` exactly as the
    /// `F32` search computes them, and the `k` best of those kept. A query whose candidates
    /// cannot be proven to hold its `k` nearest (the `k`-th exact distance must lie at least
    /// the error bound below every left-out vector's TF32 distance) is searched again in
    /// `f32`: the result is the `F32` search's, up to ties at the `k`-th distance.
    ///
    /// Where the `f32` search is filtered ([`Tuning::knn_filter`](crate::Tuning::knn_filter)),
    /// so is this one, and then it needs no proof: the tensor cores' product keeps every pair
    /// within the probe's exact bound widened by the error bound, the candidates that can
    /// still be among the `k` nearest get their exact distances, and the result is the `F32`
    /// search's bit for bit, ties included (a query whose candidates overflow is searched
    /// again in `f32`); at every `k` the filter takes it is the faster (H200, SIFT1M's shape,
    /// run 379: 65.2 against the `f32` filter's 87.5 ms at `k = 1000`, 76.0 against 92.4 at
    /// `k = 2000`).
    Tf32Reranked,
    /// As `Tf32Reranked` with split TF32 ("3xTF32"): each `f32` value as a TF32 `hi` and the
    /// TF32 of its remainder `lo`, and three tensor-core products per pair (`lo·hi + hi·lo +
    /// hi·hi`): each value within `2^-22` instead of `2^-11`, so the error bound is about a
    /// thousand times tighter and proofs hold where TF32's do not (data whose norms are large
    /// against the gaps between neighbours, such as SIFT's). For 16-bit storage, which TF32
    /// holds exactly, the same as `Tf32Reranked` with this tighter bound.
    Tf32x3Reranked,
}

impl KnnPrecision {
    /// Whether the tiles are approximations whose candidates are re-ranked.
    fn reranks(self) -> bool {
        self != KnnPrecision::F32
    }
}

impl KnnPrecision {
    /// The most a tile distance of this precision (for a query to any base vector) and the `F32`
    /// search's distance of the same pair can differ: for a query of squared norm `query_norm`
    /// and base vectors of squared norm at most `base_norm_max` (both as computed in `f32`),
    /// `dim` components, `exact_inputs` when the vectors are stored as 16-bit floats (which TF32
    /// holds exactly). 0 for `F32`. What the re-ranking's proof subtracts (module docs of
    /// [`FlatIndex::with_precision`](crate::FlatIndex::with_precision)).
    ///
    /// Each product's inputs round to TF32 within a relative `2^-11`, so each product within
    /// `2^-10 + 2^-22` of itself; the tensor cores' and the `F32` search's `f32` sums add at most
    /// `dim · 2^-23` and `dim · 2^-24` of `Σ |x_i y_i| ≤ ‖x‖ ‖y‖` (Cauchy–Schwarz), so the two
    /// dot products differ by at most `δ · ‖x‖ ‖y‖` with `δ = 2^-10 + dim · 2^-21` (slack kept).
    /// The norms are the same values in both; the epilogue's few roundings add `8 · 2^-24` of
    /// the terms' sizes. L2 doubles the dot's error (`− 2⟨x, y⟩`); cosine divides it by
    /// `‖x‖ ‖y‖`.
    ///
    /// Split TF32 ([`KnnPrecision::Tf32x3Reranked`], `exact_inputs` false) holds each input
    /// within `2^-22` and leaves out `lo·lo`, so each product within `3 · 2^-22 (1 + 2^-10)`,
    /// and its sums run over `3 · dim` terms: `δ = 2^-20 + 3 · dim · 2^-23 + dim · 2^-24`, about
    /// `2^-14` at 128 components. With 16-bit storage (`exact_inputs`), TF32 holds every input
    /// exactly: only the sums round, `δ = dim · 2^-23 + dim · 2^-24`.
    ///
    /// ```
    /// use gpu_select::{KnnPrecision, Metric};
    ///
    /// // SIFT-like vectors: squared norms near 10^6, 128 components.
    /// let tf32 = KnnPrecision::Tf32Reranked.error_bound(Metric::L2, 128, false, 1e6, 1.2e6);
    /// let split = KnnPrecision::Tf32x3Reranked.error_bound(Metric::L2, 128, false, 1e6, 1.2e6);
    /// assert!(tf32 > 2000.0 && split < 150.0);
    /// assert_eq!(KnnPrecision::F32.error_bound(Metric::L2, 128, false, 1e6, 1.2e6), 0.0);
    /// ```
    pub fn error_bound(
        self,
        metric: Metric,
        dim: usize,
        exact_inputs: bool,
        query_norm: f32,
        base_norm_max: f32,
    ) -> f64 {
        if self == KnnPrecision::F32 {
            return 0.0;
        }
        let (delta, widen) = self.dot_error(dim, exact_inputs);
        let unit = 2f64.powi(-24);
        let (x, y) = ((query_norm as f64).sqrt() * widen, (base_norm_max as f64).sqrt() * widen);
        match metric {
            Metric::L2 => 2.0 * delta * x * y + 8.0 * unit * (x * x + y * y + 2.0 * x * y),
            Metric::InnerProduct => delta * x * y + 8.0 * unit * x * y,
            Metric::Cosine => delta * widen * widen + 8.0 * unit,
        }
    }

    /// `δ`, the most the two dot products differ relative to `‖x‖ ‖y‖`, and the factor that
    /// widens a norm's square root computed in `f32` into a bound of the true length (the
    /// norms' own rounding, `dim` additions). TF32 only.
    fn dot_error(self, dim: usize, exact_inputs: bool) -> (f64, f64) {
        let unit = 2f64.powi(-24);
        let dim_f = dim as f64;
        let delta = match (self, exact_inputs) {
            (_, true) => dim_f * 2f64.powi(-23) + dim_f * unit,
            (KnnPrecision::Tf32x3Reranked, false) => {
                2f64.powi(-20) + 3.0 * dim_f * 2f64.powi(-23) + dim_f * unit
            }
            _ => 2f64.powi(-10) + dim_f * 2f64.powi(-21),
        };
        (delta, 1.0 + (dim_f + 2.0) * unit)
    }

    /// [`KnnPrecision::error_bound`] for a query of squared norm `n`, in the form the kernels
    /// evaluate: `per_length · √n + per_norm · n + constant` (rounded up there), each term
    /// rounded up to `f32` here, so never less than the bound; 0 for `F32`, as the bound.
    pub(crate) fn margin(self, metric: Metric, dim: usize, exact_inputs: bool, base_norm_max: f32) -> Margin {
        if self == KnnPrecision::F32 {
            return Margin::default();
        }
        let (delta, widen) = self.dot_error(dim, exact_inputs);
        let unit = 2f64.powi(-24);
        let y = (base_norm_max as f64).sqrt() * widen;
        // The bound's terms with the query's length `x = √n · widen` taken out.
        let (per_length, per_norm, constant) = match metric {
            Metric::L2 => {
                ((2.0 * delta + 16.0 * unit) * y * widen, 8.0 * unit * widen * widen, 8.0 * unit * y * y)
            }
            Metric::InnerProduct => ((delta + 8.0 * unit) * y * widen, 0.0, 0.0),
            Metric::Cosine => (0.0, 0.0, delta * widen * widen + 8.0 * unit),
        };
        let up = |value: f64| if value > 0.0 { (value as f32).next_up() } else { 0.0 };
        Margin { per_length: up(per_length), per_norm: up(per_norm), constant: up(constant), reserved: 0.0 }
    }
}

/// `count` vectors of `dim` components on the device, vector `i` at `i · stride` (the
/// address of its first component).
#[derive(Debug)]
pub(crate) struct VectorSet<T> {
    pub(crate) data: GlobalPtr<T>,
    pub(crate) count: usize,
    pub(crate) stride: usize,
}

impl<T> Clone for VectorSet<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for VectorSet<T> {}

impl<T: KnnStorage> VectorSet<T> {
    pub(crate) fn part(self, first: usize, count: usize) -> Self {
        VectorSet { data: self.data.offset((first * self.stride) as u64), count, stride: self.stride }
    }

    /// The kernels' pointer: the same address, as the stored bits.
    fn stored(self) -> GlobalPtr<T::Stored> {
        GlobalPtr::from_address(self.data.address())
    }
}

/// How a search is cut into tiles.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct KnnTiles {
    /// Queries per tile (the last may hold fewer).
    pub(crate) query_tile: usize,
    /// Column tiles of the base: `base % base_tiles` of them hold one vector more than the
    /// others, each at least the number kept per tile.
    pub(crate) base_tiles: usize,
}

impl KnnTiles {
    /// Tiles for `queries × base` distances keeping `kept` per query, within `budget` bytes
    /// of tiles and candidates where possible (`kept ≤ base`).
    pub(crate) fn plan(queries: usize, base: usize, kept: usize, budget: usize) -> Self {
        let bytes_per_query = |base_tiles: usize| {
            let tile = base.div_ceil(base_tiles) * size_of::<f32>();
            let entry = size_of::<f32>() + size_of::<u64>();
            // The tile's best, the row of candidates and the merge's output.
            let kept_bytes = kept * entry * if base_tiles == 1 { 1 } else { base_tiles + 2 };
            tile + kept_bytes
        };
        // Every column tile keeps `kept`, so it must hold at least that many vectors. Beyond
        // the queues' 2048 the rows top-k is the batched radix select, whose passes and sort
        // grow with `k` per column tile: the base stays whole and fewer queries share a tile
        // instead (one selection of each query's whole row).
        let most_tiles = if kept > MAX_QUEUE_K as usize { 1 } else { (base / kept).max(1) };
        let mut query_tile = queries.min(QUERY_TILE_TARGET);
        loop {
            let mut base_tiles = 1;
            while base_tiles < most_tiles && bytes_per_query(base_tiles).saturating_mul(query_tile) > budget {
                base_tiles = (base_tiles * 2).min(most_tiles);
            }
            if bytes_per_query(base_tiles).saturating_mul(query_tile) <= budget || query_tile == 1 {
                return KnnTiles { query_tile, base_tiles };
            }
            query_tile = (query_tile / 2).max(1);
        }
    }

    /// The first vector and the length of column tile `tile` of a base of `base` vectors.
    pub(crate) fn base_range(&self, base: usize, tile: usize) -> (usize, usize) {
        share(base, self.base_tiles, tile)
    }
}

/// Share `part` of `count` items cut into `parts` in order, as equal as can be (the first
/// `count % parts` one longer): its first item and its length.
pub(crate) fn share(count: usize, parts: usize, part: usize) -> (usize, usize) {
    let (short, longer) = (count / parts, count % parts);
    (part * short + part.min(longer), short + usize::from(part < longer))
}

/// A filtered search's probe and rows of candidates (module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct KnnFilter {
    /// Base vectors probed: every `step`-th from the first.
    probe: usize,
    step: usize,
    /// Candidates a query's row holds.
    capacity: usize,
}

impl KnnFilter {
    /// The filter keeping `kept` of `base` vectors, or `None` where it does not pay (rows of
    /// candidates beyond a quarter of the base, `kept` beyond the queues' 2048, a base
    /// beyond 32-bit indices).
    ///
    /// The probe of about `√(base · kept)` vectors (a power of two, at most an eighth of the
    /// base) balances its own product against the candidates it leaves: with every
    /// `step`-th vector probed, the bound (the probe's `kept`-th distance) has about
    /// `kept · step` of the base within it, give or take `√kept · step` for a probe that
    /// samples the base evenly. A row holds `step · (kept + 8 √kept + 16)`: eight of those
    /// deviations, and for small `kept` (whose count within the bound is nearly
    /// geometric) 25 times its mean at `kept = 1`.
    pub(crate) fn plan(base: usize, kept: usize) -> Option<Self> {
        if kept > MAX_QUEUE_K as usize || base > u32::MAX as usize {
            return None;
        }
        let balanced = (base as f64 * kept as f64).sqrt().ceil() as usize;
        let probe = balanced.next_power_of_two().min(base / 8);
        if probe < kept || probe == 0 {
            return None;
        }
        let step = base / probe;
        let spread = kept as f64 + 8.0 * (kept as f64).sqrt() + 16.0;
        let capacity = ((step as f64 * spread).ceil() as usize).next_multiple_of(32);
        (capacity <= base / 4).then_some(KnnFilter { probe, step, capacity })
    }

    /// The same probe with rows `factor` times as long, at most a quarter of the base: for a
    /// TF32 filter, whose bound is widened by its margin.
    fn widened(self, factor: usize, base: usize) -> Self {
        let capacity = (self.capacity * factor).min(base / 4 / 32 * 32).max(self.capacity);
        KnnFilter { capacity, ..self }
    }

    /// Bytes a query takes in a stream's buffers: its probe's distances, its row of
    /// candidates, the probe's best (distances and indices) and the candidates' (keys and
    /// places).
    fn bytes_per_query(&self, kept: usize) -> usize {
        self.probe * 4 + self.capacity * 8 + kept * (4 + 8) + kept * (8 + 8)
    }
}

/// A search made ready for one shape ([`Gpu::plan_knn`]): its tiles, its streams, and
/// where its buffers lie in its workspace. The size query and the run read the same layout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct KnnPlan {
    pub(crate) queries: usize,
    pub(crate) base: usize,
    pub(crate) k: usize,
    pub(crate) metric: Metric,
    /// A k-NN graph: query `i` is base vector `i`, and drops itself.
    pub(crate) drop_own: bool,
    pub(crate) precision: KnnPrecision,
    /// The filtered search's probe and rows, or `None` for the tiles.
    filter: Option<KnnFilter>,
    /// Filtered: offset of each query's count of candidates, and of the probe's squared
    /// norms.
    counts: usize,
    probe_norms: usize,
    /// Neighbours kept per query from the distance tiles: [`KnnPlan::kept`], or with TF32
    /// the candidates re-ranked.
    candidates: usize,
    tiles: KnnTiles,
    /// Streams taking the query tiles in turn (this handle's first).
    streams: usize,
    /// Offset of the queries' squared norms.
    query_norms: usize,
    /// TF32: offset of the proofs' two values per query (the `candidates`-th TF32
    /// distance, then the `kept`-th exact one).
    checks: usize,
    /// Offset of the first stream's buffers; stream `s`'s at `+ s · stream_bytes`.
    first_stream: usize,
    stream_bytes: usize,
    regions: StreamRegions,
    pub(crate) workspace_bytes: usize,
}

/// Where one stream's buffers lie, from the stream's first byte, and their lengths.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct StreamRegions {
    /// A distance tile: offset, `query_tile × longest column tile` distances.
    distances: (usize, usize),
    /// A tile's best: offsets of distances and indices, `query_tile × kept`.
    best: (usize, usize, usize),
    /// The candidates of every column tile: offsets, `query_tile × base_tiles × kept`.
    candidates: (usize, usize, usize),
    /// The rows top-k's workspace: offset, bytes.
    rows: (usize, usize),
    /// TF32: the candidates' exact distances: offset, `query_tile × candidates`.
    exact: (usize, usize),
    /// TF32: the re-ranked best: offsets of distances and indices, `query_tile × kept`.
    reranked: (usize, usize, usize),
    /// TF32: the candidates' indices in increasing order, and the sort's positions:
    /// offsets, `query_tile × candidates`.
    by_index: (usize, usize, usize),
    /// Filtered: each query's bound: offset, `query_tile`.
    bounds: (usize, usize),
    /// Filtered: the rows of candidates: offset, `query_tile × capacity`.
    filtered: (usize, usize),
    /// Filtered: the candidates' best: offsets of keys and places, `query_tile × kept`.
    selected: (usize, usize, usize),
}

impl KnnPlan {
    /// Neighbours kept per query and tile (`k`, or `k + 1` for a graph).
    fn kept(&self) -> usize {
        self.k + usize::from(self.drop_own)
    }

    /// Whether column tiles are merged (more than one).
    fn merges(&self) -> bool {
        self.tiles.base_tiles > 1
    }

    /// Whether the kept neighbours are placed again at the end (signs, a graph's own index).
    fn finishes(&self) -> bool {
        self.metric.is_similarity() || self.drop_own
    }

    /// Whether the queries' norms are needed (not for the inner product, unless a TF32
    /// search's error bound needs them).
    fn needs_norms(&self) -> bool {
        self.metric != Metric::InnerProduct || self.reranks()
    }

    /// Whether the tiles are TF32 and their candidates re-ranked.
    fn reranks(&self) -> bool {
        self.precision.reranks()
    }

    /// Whether TF32 tiles' candidates are re-ranked and proven (TF32, not filtered: a
    /// filtered TF32 search re-ranks in its rows of candidates, and their counts say what to
    /// search again).
    fn proves(&self) -> bool {
        self.reranks() && self.filter.is_none()
    }

    /// Whether the search is filtered (module docs).
    pub(crate) fn filters(&self) -> bool {
        self.filter.is_some()
    }

    /// TF32: whether every base vector is a candidate (then nothing is left to prove).
    pub(crate) fn every_vector_a_candidate(&self) -> bool {
        self.candidates == self.base
    }
}

/// What every query tile of a search reads: the queries, the base, the dimension, the
/// queries' squared norms, and where TF32's proofs keep their values.
type SearchVectors<T> = (VectorSet<T>, VectorSet<T>, usize, GlobalPtr<f32>, GlobalPtr<f32>);

/// One stream's buffers of a search: views of the workspace.
struct KnnBuffers {
    distances: DeviceBuffer<f32>,
    best: TopK<f32>,
    candidates: TopK<f32>,
    rows: DeviceBuffer<u8>,
    exact: DeviceBuffer<f32>,
    reranked: TopK<f32>,
    by_index: Pairs<u64>,
    bounds: DeviceBuffer<f32>,
    filtered: DeviceBuffer<u64>,
    selected: TopK<u64>,
}

/// What a run reads besides the plan and the vectors, and where it writes.
pub(crate) struct KnnRun<'o> {
    /// The base's squared norms (unused for the inner product).
    pub(crate) base_norms: GlobalPtr<f32>,
    /// The largest of them (a TF32 filter's margin; unused otherwise).
    pub(crate) base_norm_max: f32,
    /// `queries · k` neighbours, query after query.
    pub(crate) out: &'o mut TopK<f32>,
}

impl Gpu {
    /// Queues the squared norms of `vectors` into `out`.
    pub(crate) fn knn_norms<T: KnnStorage>(
        &self,
        vectors: VectorSet<T>,
        dim: usize,
        out: GlobalPtr<f32>,
    ) -> Result<()> {
        let warps_per_block = (NORMS_THREADS / 32) as u64;
        let blocks = (vectors.count as u64).div_ceil(warps_per_block).min(MAX_ROW_BLOCKS) as u32;
        let shape = LaunchShape { grid: (blocks, 1), block_threads: NORMS_THREADS, shared_bytes: 0 };
        let params = NormsParams {
            vectors: vectors.stored(),
            stride: vectors.stride as u64,
            count: vectors.count as u64,
            dim: dim as u64,
            out,
        };
        self.launch(T::NORMS, shape, params)
    }

    /// Plans a search of `queries` vectors against `base` keeping `k` each (`k + 1`, then
    /// one dropped, for a graph): tiles within [`Tuning::knn_tile_bytes`](crate::Tuning),
    /// [`Tuning::knn_streams`](crate::Tuning) streams, and the workspace's layout; filtered
    /// (module docs) where `may_filter`, the tuning and the shape allow, for an `f32`
    /// search whose caller searches the queries [`Gpu::knn_unproven`] names again.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn plan_knn(
        &self,
        queries: usize,
        base: usize,
        k: usize,
        metric: Metric,
        drop_own: bool,
        precision: KnnPrecision,
        may_filter: bool,
    ) -> Result<KnnPlan> {
        check_key_count(queries)?;
        check_key_count(base)?;
        let kept = k + usize::from(drop_own);
        let may_filter = may_filter && self.tuning().knn_filter;
        let f32_filter = may_filter.then(|| KnnFilter::plan(base, kept)).flatten();
        // TF32 filtered: the f32 filter's probe, rows twice as long for the pairs within the
        // margin (module docs); its re-ranking sorts nothing.
        let tf32_filter = f32_filter
            .filter(|_| precision == KnnPrecision::Tf32Reranked)
            .map(|filter| filter.widened(TF32_FILTER_ROOM, base));
        let extra = (kept * self.tuning().knn_rerank_extra_percent as usize / 100).max(32);
        // The re-ranking orders each query's candidates by index in one block sort: beyond
        // its 2048, the f32 search.
        let precision = if tf32_filter.is_none() && (kept + extra).min(base) > MAX_SMALL_SORT_LEN {
            KnnPrecision::F32
        } else {
            precision
        };
        let candidates =
            if precision.reranks() && tf32_filter.is_none() { (kept + extra).min(base) } else { kept };
        let wanted_streams = self.tuning().knn_streams.clamp(1, MAX_KNN_STREAMS);
        // Beyond the queues, half the budget: the batched radix select splits taller query
        // tiles into more launches (at 1 GiB, k = 10 000 measured 23.6 against 21.8 ms).
        let budget = self.tuning().knn_tile_bytes / wanted_streams;
        let budget = if candidates > MAX_QUEUE_K as usize { budget / 2 } else { budget };
        let filter = match precision {
            KnnPrecision::F32 => f32_filter,
            _ => tf32_filter,
        };
        let tiles = match filter {
            // The whole base in one launch; as many queries a tile as the budget holds.
            Some(filter) => KnnTiles {
                query_tile: queries
                    .min(QUERY_TILE_TARGET)
                    .min((budget / filter.bytes_per_query(kept)).max(1)),
                base_tiles: 1,
            },
            None => KnnTiles::plan(queries, base, candidates, budget),
        };
        let streams = wanted_streams.min(queries.div_ceil(tiles.query_tile));
        let mut plan = KnnPlan {
            queries,
            base,
            k,
            metric,
            drop_own,
            precision,
            filter,
            counts: 0,
            probe_norms: 0,
            candidates,
            tiles,
            streams,
            query_norms: 0,
            checks: 0,
            first_stream: 0,
            stream_bytes: 0,
            regions: StreamRegions {
                distances: (0, 0),
                best: (0, 0, 0),
                candidates: (0, 0, 0),
                rows: (0, 0),
                exact: (0, 0),
                reranked: (0, 0, 0),
                by_index: (0, 0, 0),
                bounds: (0, 0),
                filtered: (0, 0),
                selected: (0, 0, 0),
            },
            workspace_bytes: 0,
        };
        // The rows top-k's workspace: the largest any of the search's shapes needs.
        let mut rows_bytes = 0;
        for query_tile in [tiles.query_tile, queries % tiles.query_tile] {
            if query_tile == 0 {
                continue;
            }
            if let Some(filter) = filter {
                rows_bytes = rows_bytes.max(self.knn_rows_workspace(query_tile, filter.probe, kept)?);
                let spec = RowsSpec::dense(query_tile, filter.capacity, filter.capacity, kept)?;
                let candidates_bytes =
                    self.rows_workspace_bytes::<u64>(&spec, kept, Order::Smallest, RowsAlgorithm::Auto)?;
                rows_bytes = rows_bytes.max(candidates_bytes);
                continue;
            }
            for tile in [0, tiles.base_tiles - 1] {
                let cols = tiles.base_range(base, tile).1;
                rows_bytes = rows_bytes.max(self.knn_rows_workspace(query_tile, cols, candidates)?);
            }
            if plan.merges() {
                let cols = tiles.base_tiles * candidates;
                rows_bytes = rows_bytes.max(self.knn_rows_workspace(query_tile, cols, candidates)?);
            }
            if plan.reranks() {
                rows_bytes = rows_bytes.max(self.knn_rows_workspace(query_tile, candidates, kept)?);
            }
        }
        // One stream's regions, from its first byte.
        let distances_len = match filter {
            Some(filter) => tiles.query_tile * filter.probe,
            None => tiles.query_tile * tiles.base_range(base, 0).1,
        };
        let best_len = if plan.merges() || plan.finishes() || plan.reranks() || filter.is_some() {
            tiles.query_tile * candidates
        } else {
            0
        };
        let (bounds_len, filtered_len, selected_len) = match filter {
            Some(filter) => (tiles.query_tile, tiles.query_tile * filter.capacity, tiles.query_tile * kept),
            None => (0, 0, 0),
        };
        let candidates_len = if plan.merges() { tiles.query_tile * tiles.base_tiles * candidates } else { 0 };
        let (exact_len, reranked_len) =
            if plan.proves() { (tiles.query_tile * candidates, tiles.query_tile * kept) } else { (0, 0) };
        let mut stream = WorkspaceCarver::default();
        plan.regions = StreamRegions {
            distances: (stream.region(distances_len * 4), distances_len),
            best: (stream.region(best_len * 4), stream.region(best_len * 8), best_len),
            candidates: (
                stream.region(candidates_len * 4),
                stream.region(candidates_len * 8),
                candidates_len,
            ),
            rows: (stream.region(rows_bytes), rows_bytes),
            exact: (stream.region(exact_len * 4), exact_len),
            reranked: (stream.region(reranked_len * 4), stream.region(reranked_len * 8), reranked_len),
            by_index: (stream.region(exact_len * 8), stream.region(exact_len * 8), exact_len),
            bounds: (stream.region(bounds_len * 4), bounds_len),
            filtered: (stream.region(filtered_len * 8), filtered_len),
            selected: (stream.region(selected_len * 8), stream.region(selected_len * 8), selected_len),
        };
        plan.stream_bytes = stream.bytes();
        let mut whole = WorkspaceCarver::default();
        plan.query_norms = whole.region(if plan.needs_norms() { queries * 4 } else { 0 });
        plan.checks = whole.region(if plan.proves() { 2 * queries * 4 } else { 0 });
        if let Some(filter) = filter {
            plan.counts = whole.region(queries * 4);
            plan.probe_norms =
                whole.region(if metric == Metric::InnerProduct { 0 } else { filter.probe * 4 });
        }
        plan.first_stream = whole.region(streams * plan.stream_bytes);
        plan.workspace_bytes = whole.bytes();
        Ok(plan)
    }

    /// Queues `plan`'s search of `queries` against `base` (both of `dim` components) into
    /// `run.out`, with `workspace` (at least `plan.workspace_bytes`): the queries' norms,
    /// then the query tiles taken in turn by the plan's streams (this handle's and forked
    /// ones, each with its buffers in the workspace; this handle's stream waits for the
    /// others at the end).
    pub(crate) fn run_knn<T: KnnStorage>(
        &self,
        plan: &KnnPlan,
        (queries, base, dim): (VectorSet<T>, VectorSet<T>, usize),
        workspace: &DeviceBuffer<u8>,
        run: KnnRun<'_>,
    ) -> Result<()> {
        let address = |offset: usize| workspace.global_ptr().address() + offset as u64;
        let query_norms = GlobalPtr::from_address(address(plan.query_norms));
        if plan.needs_norms() {
            self.knn_norms(queries, dim, query_norms)?;
        }
        let (counts, probe_norms) = (
            GlobalPtr::<u32>::from_address(address(plan.counts)),
            GlobalPtr::from_address(address(plan.probe_norms)),
        );
        if let Some(filter) = plan.filter {
            self.clear_on_device(counts.address(), plan.queries * 4)?;
            if plan.metric != Metric::InnerProduct {
                // The probe's norms side by side, as the product reads them.
                let from = run.base_norms.address();
                self.copy_rows_on_device(from, filter.step * 4, probe_norms.address(), 4, 4, filter.probe)?;
            }
        }
        let mut handles = vec![self.clone()];
        for _ in 1..plan.streams {
            let forked = self.fork_stream()?;
            // After the queries' norms, and whatever came before on this handle.
            forked.wait_for(self)?;
            handles.push(forked);
        }
        let regions = plan.regions;
        let mut buffers: Vec<KnnBuffers> = handles
            .iter()
            .enumerate()
            .map(|(s, handle)| {
                let start = plan.first_stream + s * plan.stream_bytes;
                // Views of this stream's share of the workspace, which owns the memory.
                fn view<V: DeviceValue>(handle: &Gpu, address: u64, len: usize) -> DeviceBuffer<V> {
                    DeviceBuffer::borrowed(handle.clone(), address, len, false)
                }
                let at = |offset: usize| address(start + offset);
                let pair = |(keys, indices, len): (usize, usize, usize)| TopK {
                    values: view(handle, at(keys), len),
                    indices: view(handle, at(indices), len),
                };
                KnnBuffers {
                    distances: view(handle, at(regions.distances.0), regions.distances.1),
                    best: pair(regions.best),
                    candidates: pair(regions.candidates),
                    rows: view(handle, at(regions.rows.0), regions.rows.1),
                    exact: view(handle, at(regions.exact.0), regions.exact.1),
                    reranked: pair(regions.reranked),
                    by_index: Pairs::at(at(regions.by_index.0), at(regions.by_index.1)),
                    bounds: view(handle, at(regions.bounds.0), regions.bounds.1),
                    filtered: view(handle, at(regions.filtered.0), regions.filtered.1),
                    selected: TopK {
                        values: view(handle, at(regions.selected.0), regions.selected.2),
                        indices: view(handle, at(regions.selected.1), regions.selected.2),
                    },
                }
            })
            .collect();
        let checks = GlobalPtr::from_address(address(plan.checks));
        let search = (queries, base, dim, query_norms, checks);
        let (mut first_query, mut turn) = (0, 0);
        while first_query < plan.queries {
            let count = plan.tiles.query_tile.min(plan.queries - first_query);
            let at = turn % handles.len();
            let tile = (first_query, count);
            match plan.filter {
                Some(filter) => {
                    let filtered = (filter, counts, probe_norms);
                    handles[at].knn_filtered_query_tile(
                        plan,
                        filtered,
                        search,
                        &run,
                        &mut buffers[at],
                        tile,
                    )?
                }
                None => handles[at].knn_query_tile(plan, search, &run, &mut buffers[at], tile)?,
            }
            first_query += count;
            turn += 1;
        }
        for handle in &handles[1..] {
            self.wait_for(handle)?;
        }
        Ok(())
    }

    /// Queues queries `first_query .. first_query + count` of a search on this handle's
    /// stream, with `buffers`: each column tile's distances and best, then their merge; with
    /// TF32, the candidates' exact distances, their best, and the values the proof reads.
    fn knn_query_tile<T: KnnStorage>(
        &self,
        plan: &KnnPlan,
        (queries, base, dim, query_norms, checks): SearchVectors<T>,
        run: &KnnRun<'_>,
        buffers: &mut KnnBuffers,
        (first_query, count): (usize, usize),
    ) -> Result<()> {
        let (tiles, kept, candidates) = (plan.tiles, plan.kept(), plan.candidates);
        let (merges, finishes, reranks) = (plan.merges(), plan.finishes(), plan.reranks());
        let query_part = queries.part(first_query, count);
        let norms_part = query_norms.offset(if plan.needs_norms() { first_query as u64 } else { 0 });
        let out_rows = first_query * plan.k..(first_query + count) * plan.k;
        let own = plan.drop_own.then_some(first_query);
        let negate = plan.metric.is_similarity();
        let KnnBuffers { distances, best, candidates: merged_rows, rows, exact, reranked, by_index, .. } =
            buffers;
        // Where the tiles' (or their merge's) best go when they are not the result: `best`.
        let into_best = merges || finishes || reranks;
        for tile in 0..tiles.base_tiles {
            let (first_base, base_count) = tiles.base_range(base.count, tile);
            let tile_distances = distances.view(0, count * base_count);
            self.knn_distance_tile(
                (query_part, norms_part),
                (base.part(first_base, base_count), run.base_norms.offset(first_base as u64)),
                dim,
                (plan.metric, plan.precision),
                tile_distances.global_ptr(),
            )?;
            let spec = RowsSpec::dense(count, base_count, base_count, candidates)?;
            if !into_best {
                // One column tile, nothing to finish: straight into the caller's rows.
                let mut out = out_view(run.out, out_rows.clone());
                self.knn_select(&tile_distances, &spec, kept, GlobalPtr::null(), rows, &mut out)?;
                continue;
            }
            let mut tile_best = out_view(best, 0..count * candidates);
            self.knn_select(&tile_distances, &spec, candidates, GlobalPtr::null(), rows, &mut tile_best)?;
            if merges {
                let row = tiles.base_tiles * candidates;
                let to = (&*merged_rows, row, tile * candidates);
                self.knn_place(&tile_best, to, count, candidates, first_base, None, false)?;
            } else if !reranks {
                let out = out_view(run.out, out_rows.clone());
                self.knn_place(&tile_best, (&out, plan.k, 0), count, kept, 0, own, negate)?;
            }
        }
        if merges {
            let cols = tiles.base_tiles * candidates;
            let spec = RowsSpec::dense(count, cols, cols, candidates)?;
            let values = merged_rows.values.view(0, count * cols);
            let indices = merged_rows.indices.global_ptr();
            if finishes || reranks {
                let mut merged = out_view(best, 0..count * candidates);
                self.knn_select(&values, &spec, candidates, indices, rows, &mut merged)?;
                if !reranks {
                    let out = out_view(run.out, out_rows.clone());
                    self.knn_place(&merged, (&out, plan.k, 0), count, kept, 0, own, negate)?;
                }
            } else {
                let mut out = out_view(run.out, out_rows.clone());
                self.knn_select(&values, &spec, kept, indices, rows, &mut out)?;
            }
        }
        if reranks {
            // `best` holds each query's candidates by TF32 distance, nearest first; the
            // proof reads the last one's, and the `kept`-th exact distance below.
            let approximate = out_view(best, 0..count * candidates);
            let (last_approximate, last_exact) =
                (checks.offset(first_query as u64), checks.offset((plan.queries + first_query) as u64));
            let last_of = |values: &DeviceBuffer<f32>, width: usize| {
                values.global_ptr().offset(width as u64 - 1).address()
            };
            let (from, pitch) = (last_of(&approximate.values, candidates), candidates * 4);
            self.copy_rows_on_device(from, pitch, last_approximate.address(), 4, 4, count)?;
            // The candidates in index order, so that equal exact distances keep the lower
            // index first, as the f32 search's do.
            let indices = Pairs::at(approximate.indices.global_ptr().address(), 0);
            self.launch_block_sort(indices, candidates as u32, count as u32, Order::Smallest, *by_index)?;
            let exact = exact.view(0, count * candidates);
            let sorted = by_index.keys;
            self.knn_rerank(
                (query_part, norms_part),
                (base, run.base_norms),
                dim,
                plan.metric,
                sorted,
                &exact,
            )?;
            let spec = RowsSpec::dense(count, candidates, candidates, kept)?;
            let mut best_exact = out_view(reranked, 0..count * kept);
            self.knn_select(&exact, &spec, kept, sorted, rows, &mut best_exact)?;
            let out = out_view(run.out, out_rows);
            self.knn_place(&best_exact, (&out, plan.k, 0), count, kept, 0, own, negate)?;
            let (from, pitch) = (last_of(&best_exact.values, kept), kept * 4);
            self.copy_rows_on_device(from, pitch, last_exact.address(), 4, 4, count)?;
        }
        Ok(())
    }

    /// Queues queries `first_query .. first_query + count` of a filtered search (module
    /// docs) on this handle's stream, with `buffers`: the probe's distances and each query's
    /// bound, the product over the whole base keeping the pairs within it, their `kept`
    /// best, unpacked into the caller's rows.
    fn knn_filtered_query_tile<T: KnnStorage>(
        &self,
        plan: &KnnPlan,
        (filter, counts, probe_norms): (KnnFilter, GlobalPtr<u32>, GlobalPtr<f32>),
        (queries, base, dim, query_norms, _): SearchVectors<T>,
        run: &KnnRun<'_>,
        buffers: &mut KnnBuffers,
        (first_query, count): (usize, usize),
    ) -> Result<()> {
        let kept = plan.kept();
        let query_part = queries.part(first_query, count);
        let norms_part = query_norms.offset(if plan.needs_norms() { first_query as u64 } else { 0 });
        let KnnBuffers { distances, best, rows, bounds, filtered, selected, .. } = buffers;
        // The probe: every `step`-th base vector (its norms gathered side by side), and each
        // query's `kept`-th distance to it, the bound.
        let probe = VectorSet { data: base.data, count: filter.probe, stride: base.stride * filter.step };
        let probe_distances = distances.view(0, count * filter.probe);
        self.knn_distance_tile(
            (query_part, norms_part),
            (probe, probe_norms),
            dim,
            (plan.metric, KnnPrecision::F32),
            probe_distances.global_ptr(),
        )?;
        let spec = RowsSpec::dense(count, filter.probe, filter.probe, kept)?;
        let mut probe_best = out_view(best, 0..count * kept);
        self.knn_select(&probe_distances, &spec, kept, GlobalPtr::null(), rows, &mut probe_best)?;
        let last = probe_best.values.global_ptr().offset(kept as u64 - 1).address();
        self.copy_rows_on_device(last, kept * 4, bounds.global_ptr().address(), 4, 4, count)?;
        // The rows of candidates, filled past their counts with the last key there is.
        let rows_of = filtered.view(0, count * filter.capacity);
        self.fill_on_device(rows_of.global_ptr().address(), count * filter.capacity * 8, 0xff)?;
        let target = FilterTarget {
            bounds: bounds.global_ptr(),
            counts: counts.offset(first_query as u64),
            candidates: rows_of.global_ptr(),
            capacity: filter.capacity as u64,
            index_offset: 0,
        };
        let tile = self.knn_tile_params(
            (query_part, norms_part),
            (base, run.base_norms),
            dim,
            plan.metric,
            GlobalPtr::null(),
        )?;
        let product = DistanceFilterParams { tile: tile.1, target };
        let tf32 = plan.precision != KnnPrecision::F32;
        let margin = plan.precision.margin(plan.metric, dim, T::EXACT_IN_TF32, run.base_norm_max);
        if !tf32 {
            let shape = LaunchShape { shared_bytes: DistanceLayout::new().bytes, ..tile.0 };
            self.launch(T::FILTER, shape, product)?;
        } else {
            let shape = self.tf32_filter_shape::<T>(tile.0, (count, base.count, dim));
            self.launch(T::FILTER_TF32, shape, Tf32FilterParams { filter: product, margin })?;
        }
        // The `kept` smallest keys of each row: by distance, then by index.
        let spec = RowsSpec::dense(count, filter.capacity, filter.capacity, kept)?;
        let mut best_keys = TopK {
            values: selected.values.view(0, count * kept),
            indices: selected.indices.view(0, count * kept),
        };
        let mut select = |best_keys: &mut TopK<u64>| {
            self.run_rows(
                &rows_of,
                &spec,
                (GlobalPtr::null(), GlobalPtr::null()),
                kept,
                Order::Smallest,
                RowsAlgorithm::Auto,
                rows,
                best_keys,
            )
        };
        select(&mut best_keys)?;
        if tf32 {
            // The candidates that can be among the `kept` nearest get their exact keys; the
            // `kept` best of those are the f32 filter's.
            self.knn_rerank_candidates(
                (query_part, norms_part),
                (base, run.base_norms),
                (dim, plan.metric, margin),
                (&rows_of, counts.offset(first_query as u64)),
                (&best_keys.values, kept),
            )?;
            select(&mut best_keys)?;
        }
        let out = out_view(run.out, first_query * plan.k..(first_query + count) * plan.k);
        let own = plan.drop_own.then_some(first_query);
        self.knn_place_candidates(
            &best_keys.values,
            (&out, plan.k),
            count,
            kept,
            own,
            plan.metric.is_similarity(),
        )
    }

    /// Queues the exact distances of each query of `queries` to its candidates (`candidates`,
    /// base indices, as many rows as queries, each as wide as a row of `out`) into `out`.
    fn knn_rerank<T: KnnStorage>(
        &self,
        (queries, query_norms): (VectorSet<T>, GlobalPtr<f32>),
        (base, base_norms): (VectorSet<T>, GlobalPtr<f32>),
        dim: usize,
        metric: Metric,
        candidates: GlobalPtr<u64>,
        out: &DeviceBuffer<f32>,
    ) -> Result<()> {
        let params = RerankParams {
            queries: queries.stored(),
            query_stride: queries.stride as u64,
            query_norms,
            base: base.stored(),
            base_stride: base.stride as u64,
            base_norms,
            candidates,
            out: out.global_ptr(),
            width: (out.len() / queries.count) as u64,
            rows: queries.count as u64,
            dim: dim as u64,
            metric: metric.to_raw(),
            reserved: 0,
        };
        self.launch(T::RERANK, rerank_shape(queries.count), params)
    }

    /// Queues the TF32 filter's re-ranking of each query of `queries`: its row of `keys`
    /// (`counts` of them, rows of `keys.len() / queries` each) rewritten with the exact keys
    /// of the candidates that can be among its `kept` nearest, by the `kept` best TF32 keys
    /// in `best` (`knn_rerank_candidates_<storage>`).
    fn knn_rerank_candidates<T: KnnStorage>(
        &self,
        (queries, query_norms): (VectorSet<T>, GlobalPtr<f32>),
        (base, base_norms): (VectorSet<T>, GlobalPtr<f32>),
        (dim, metric, margin): (usize, Metric, Margin),
        (keys, counts): (&DeviceBuffer<u64>, GlobalPtr<u32>),
        (best, kept): (&DeviceBuffer<u64>, usize),
    ) -> Result<()> {
        let params = RerankCandidatesParams {
            queries: queries.stored(),
            query_stride: queries.stride as u64,
            query_norms,
            base: base.stored(),
            base_stride: base.stride as u64,
            base_norms,
            keys: keys.global_ptr(),
            best: best.global_ptr(),
            counts,
            width: (keys.len() / queries.count) as u64,
            kept: kept as u64,
            rows: queries.count as u64,
            dim: dim as u64,
            metric: metric.to_raw(),
            reserved: 0,
            margin,
        };
        self.launch(T::RERANK_CANDIDATES, rerank_shape(queries.count), params)
    }

    /// After a TF32 or filtered search of `plan` with `workspace` has run: the queries
    /// whose candidates are not proven to hold their `kept` nearest ([`KnnPrecision::error_bound`]
    /// with the base's largest squared norm `base_norm_max`), or whose row of candidates
    /// overflowed (filtered), in order: the caller searches them again. Waits for the search.
    pub(crate) fn knn_unproven<T: KnnStorage>(
        &self,
        plan: &KnnPlan,
        workspace: &DeviceBuffer<u8>,
        dim: usize,
        base_norm_max: f32,
    ) -> Result<Vec<usize>> {
        let address = |offset: usize| workspace.global_ptr().address() + offset as u64;
        if let Some(filter) = plan.filter {
            let mut counts = vec![0u32; plan.queries];
            self.copy_from_address(address(plan.counts), &mut counts)?;
            // (Fewer than `kept` cannot happen: the probe's `kept` nearest are within the
            // bound. Checked all the same, as a row so short would hold padding.)
            let complete = |count: u32| (plan.kept()..=filter.capacity).contains(&(count as usize));
            return Ok((0..plan.queries).filter(|&query| !complete(counts[query])).collect());
        }
        if !plan.reranks() || plan.every_vector_a_candidate() {
            return Ok(Vec::new());
        }
        let mut checks = vec![0.0f32; 2 * plan.queries];
        self.copy_from_address(address(plan.checks), &mut checks)?;
        let mut norms = vec![0.0f32; plan.queries];
        self.copy_from_address(address(plan.query_norms), &mut norms)?;
        let (last_approximate, last_exact) = checks.split_at(plan.queries);
        Ok((0..plan.queries)
            .filter(|&query| {
                let (approximate, exact) = (last_approximate[query] as f64, last_exact[query] as f64);
                let bound = plan.precision.error_bound(
                    plan.metric,
                    dim,
                    T::EXACT_IN_TF32,
                    norms[query],
                    base_norm_max,
                );
                // Every left-out vector's f32 distance is at least its TF32 distance less the
                // bound, and its TF32 distance at least the last candidate's. NaN or an
                // infinity proves nothing.
                let proven = approximate.is_finite() && exact.is_finite() && approximate - bound >= exact;
                !proven
            })
            .collect())
    }

    /// The `k` nearest of each row of `candidates` (`rows × width` distances, similarities
    /// negated, with their base indices): one more k-selection, as the merge of several
    /// GPUs' results; the similarities' signs restored.
    pub(crate) fn knn_merge(
        &self,
        candidates: &TopK<f32>,
        (rows, width): (usize, usize),
        k: usize,
        metric: Metric,
    ) -> Result<TopK<f32>> {
        let spec = RowsSpec::dense(rows, width, width, k)?;
        let mut workspace = self.alloc_uninit::<u8>(self.knn_rows_workspace(rows, width, k)?.max(1))?;
        let mut out = TopK {
            values: self.alloc_uninit::<f32>(rows * k)?,
            indices: self.alloc_uninit::<u64>(rows * k)?,
        };
        let indices = candidates.indices.global_ptr();
        self.knn_select(&candidates.values, &spec, k, indices, &mut workspace, &mut out)?;
        if metric.is_similarity() {
            // In place, entry for entry.
            self.knn_place(&out, (&out, k, 0), rows, k, 0, None, true)?;
        }
        Ok(out)
    }

    /// Workspace bytes of the rows top-k over `rows × cols` distances keeping `kept`.
    pub(crate) fn knn_rows_workspace(&self, rows: usize, cols: usize, kept: usize) -> Result<usize> {
        let spec = RowsSpec::dense(rows, cols, cols, kept)?;
        self.rows_workspace_bytes::<f32>(&spec, kept, Order::Smallest, RowsAlgorithm::Auto)
    }

    /// The `kept` smallest of each row of `distances` (shape `spec`), with `indices` (the
    /// candidates' base indices, or null for columns).
    pub(crate) fn knn_select(
        &self,
        distances: &DeviceBuffer<f32>,
        spec: &RowsSpec,
        kept: usize,
        indices: GlobalPtr<u64>,
        workspace: &mut DeviceBuffer<u8>,
        out: &mut TopK<f32>,
    ) -> Result<()> {
        let offsets = GlobalPtr::null();
        self.run_rows(
            distances,
            spec,
            (offsets, indices),
            kept,
            Order::Smallest,
            RowsAlgorithm::Auto,
            workspace,
            out,
        )
    }

    /// Queues one distance tile: `queries × base` into `out` (row stride `base.count`), on
    /// the CUDA cores in `f32` or the tensor cores in TF32.
    pub(crate) fn knn_distance_tile<T: KnnStorage>(
        &self,
        queries: (VectorSet<T>, GlobalPtr<f32>),
        base: (VectorSet<T>, GlobalPtr<f32>),
        dim: usize,
        (metric, precision): (Metric, KnnPrecision),
        out: GlobalPtr<f32>,
    ) -> Result<()> {
        let (shape, params) = self.knn_tile_params(queries, base, dim, metric, out)?;
        let (kernel, shared_bytes) = match precision {
            KnnPrecision::F32 => (T::TILE, DistanceLayout::new().bytes),
            KnnPrecision::Tf32Reranked => (T::TILE_TF32, Tf32TileLayout::new(false, false).bytes),
            KnnPrecision::Tf32x3Reranked => {
                (T::TILE_TF32X3.0, Tf32TileLayout::new(T::TILE_TF32X3.1, false).bytes)
            }
        };
        self.launch(kernel, LaunchShape { shared_bytes, ..shape }, params)
    }

    /// The launch of the TF32 filter over `query_count × base_count` distances of `dim`
    /// components, from the tile's grid `tile`: where it walks base tiles
    /// (`T::TF32_FILTER_WALKS`, [`walks`]), the walk's grid on as many blocks as the device
    /// holds at once; else one tile a block.
    fn tf32_filter_shape<T: KnnStorage>(
        &self,
        tile: LaunchShape,
        (query_count, base_count, dim): (usize, usize, usize),
    ) -> LaunchShape {
        if !(T::TF32_FILTER_WALKS && walks(dim as u64)) {
            return LaunchShape { shared_bytes: Tf32TileLayout::new(false, true).bytes, ..tile };
        }
        let shared_bytes = Tf32TileLayout::walking().bytes;
        // Two blocks a multiprocessor at most (their registers), fewer where shared memory
        // holds fewer (each block also takes 1 KB the system reserves).
        let per_sm = (self.limits().max_shared_bytes_per_block / (shared_bytes + 1024)).clamp(1, 2);
        let slots = self.limits().multiprocessors as u64 * per_sm as u64;
        let (width, _) = walk_grid(query_count as u64, base_count as u64, slots);
        LaunchShape { grid: (width as u32, tile.grid.1), shared_bytes, ..tile }
    }

    /// The grid (shared memory left to the kernel) and the parameters of a distance tile of
    /// `queries × base` into `out` (row stride `base.count`).
    fn knn_tile_params<T: KnnStorage>(
        &self,
        (queries, query_norms): (VectorSet<T>, GlobalPtr<f32>),
        (base, base_norms): (VectorSet<T>, GlobalPtr<f32>),
        dim: usize,
        metric: Metric,
        out: GlobalPtr<f32>,
    ) -> Result<(LaunchShape, DistanceTileParams<T::Stored>)> {
        let (columns, rows) = distance_grid(queries.count as u64, base.count as u64);
        let (Ok(columns), Ok(rows)) = (u32::try_from(columns), u16::try_from(rows)) else {
            return Err(Error::invalid("a k-NN distance tile too large for one launch"));
        };
        let shape =
            LaunchShape { grid: (columns, rows as u32), block_threads: DISTANCE_THREADS, shared_bytes: 0 };
        let params = DistanceTileParams {
            queries: queries.stored(),
            query_stride: queries.stride as u64,
            query_norms,
            base: base.stored(),
            base_stride: base.stride as u64,
            base_norms,
            out,
            out_stride: base.count as u64,
            query_count: queries.count as u64,
            base_count: base.count as u64,
            dim: dim as u64,
            metric: metric.to_raw(),
        };
        Ok((shape, params))
    }

    /// Queues the unpacking of `rows × width` candidates of a filtered search (`rank << 32 |
    /// index`, nearest first) into `to` (row `r` at `r · stride`): row `r` drops index `own
    /// + r` (or its last entry) when `own` is given; signs flipped when `negate`.
    fn knn_place_candidates(
        &self,
        from: &DeviceBuffer<u64>,
        (to, stride): (&TopK<f32>, usize),
        rows: usize,
        width: usize,
        own: Option<usize>,
        negate: bool,
    ) -> Result<()> {
        let params = PlaceParams {
            candidates_in: from.global_ptr(),
            ..place_params((to, stride, 0), rows, width, 0, own, negate)
        };
        self.launch(KNN_PLACE, place_shape(rows), params)
    }

    /// Queues the move of `rows × width` neighbours of `from` into `to` (row `r` at
    /// `r · stride + column`), indices shifted by `index_offset`; row `r` drops index
    /// `own + r` (or its last entry) when `own` is given; signs flipped when `negate`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn knn_place(
        &self,
        from: &TopK<f32>,
        (to, stride, column): (&TopK<f32>, usize, usize),
        rows: usize,
        width: usize,
        index_offset: usize,
        own: Option<usize>,
        negate: bool,
    ) -> Result<()> {
        let params = PlaceParams {
            values_in: from.values.global_ptr(),
            indices_in: from.indices.global_ptr(),
            ..place_params((to, stride, column), rows, width, index_offset, own, negate)
        };
        self.launch(KNN_PLACE, place_shape(rows), params)
    }
}

/// `knn_place`'s parameters with its inputs null (the caller names the ones it reads).
fn place_params(
    (to, stride, column): (&TopK<f32>, usize, usize),
    rows: usize,
    width: usize,
    index_offset: usize,
    own: Option<usize>,
    negate: bool,
) -> PlaceParams {
    PlaceParams {
        values_in: GlobalPtr::null(),
        indices_in: GlobalPtr::null(),
        values_out: to.values.global_ptr(),
        indices_out: to.indices.global_ptr(),
        rows: rows as u64,
        width_in: width as u64,
        width_out: (width - usize::from(own.is_some())) as u64,
        stride_out: stride as u64,
        column_out: column as u64,
        index_offset: index_offset as u64,
        own_index_start: own.map_or(KEEP_ALL, |own| own as u64),
        negate: u32::from(negate),
        candidates_in: GlobalPtr::null(),
    }
}

/// The grid of both re-ranking kernels over `rows` rows: a block per row (grid-stride past
/// [`MAX_ROW_BLOCKS`]).
fn rerank_shape(rows: usize) -> LaunchShape {
    let blocks = (rows as u64).min(MAX_ROW_BLOCKS) as u32;
    LaunchShape { grid: (blocks, 1), block_threads: RERANK_THREADS, shared_bytes: 0 }
}

/// The grid of `knn_place` over `rows` rows: a warp per row.
fn place_shape(rows: usize) -> LaunchShape {
    let warps_per_block = (PLACE_THREADS / 32) as u64;
    let blocks = (rows as u64).div_ceil(warps_per_block).min(MAX_ROW_BLOCKS) as u32;
    LaunchShape { grid: (blocks, 1), block_threads: PLACE_THREADS, shared_bytes: 0 }
}

/// Entries `range` of a result's values and indices.
fn out_view(out: &TopK<f32>, range: std::ops::Range<usize>) -> TopK<f32> {
    TopK {
        values: out.values.view(range.start, range.len()),
        indices: out.indices.view(range.start, range.len()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tf32_search_runs_the_tf32_filter_at_every_k_the_filter_takes() {
        // The TF32 filter is the faster up to the queues' 2048 (H200 run 379); beyond, no
        // search is filtered.
        let gpu = Gpu::emulator();
        let plan = |k| {
            gpu.plan_knn(1000, 1_000_000, k, Metric::L2, false, KnnPrecision::Tf32Reranked, true).unwrap()
        };
        for k in [1, 100, 768, 769, 1000, MAX_QUEUE_K as usize] {
            assert_eq!((plan(k).precision, plan(k).filters()), (KnnPrecision::Tf32Reranked, true), "k = {k}");
        }
        assert!(!plan(MAX_QUEUE_K as usize + 1).filters());
        // Unfiltered (a graph's plan, or the filter off), TF32 keeps its tiles and proof.
        let graph = gpu
            .plan_knn(1000, 1_000_000, 1000, Metric::L2, false, KnnPrecision::Tf32Reranked, false)
            .unwrap();
        assert_eq!((graph.precision, graph.filters()), (KnnPrecision::Tf32Reranked, false));
    }

    #[test]
    fn the_margin_the_kernels_evaluate_is_never_below_the_error_bound() {
        // As the kernels evaluate it (each operation rounded up), over norms from 0 to past
        // the base's largest, every metric, both TF32 forms, both kinds of input.
        let precisions = [KnnPrecision::Tf32Reranked, KnnPrecision::Tf32x3Reranked];
        for (precision, exact) in precisions.into_iter().flat_map(|p| [(p, false), (p, true)]) {
            for metric in [Metric::L2, Metric::InnerProduct, Metric::Cosine] {
                for (dim, base_norm_max) in [(128, 1.2e6f32), (7, 3.0), (960, 1e-6), (64, 0.0)] {
                    let margin = precision.margin(metric, dim, exact, base_norm_max);
                    for norm in [0.0f32, 1e-9, 0.5, 1.0, 3.0, 1e6, 1.2e6, 7.3e11] {
                        let bound = precision.error_bound(metric, dim, exact, norm, base_norm_max);
                        let widened = margin.widen(0.0, norm, 1.0) as f64;
                        assert!(
                            widened >= bound,
                            "{precision:?} {exact} {metric:?} {dim} {norm}: {widened} < {bound}"
                        );
                        // Not loose either: within a hundredth of it (the f32 roundings).
                        assert!(
                            widened <= bound * 1.01 + 1e-30,
                            "{precision:?} {metric:?} {norm}: {widened} ≫ {bound}"
                        );
                    }
                }
            }
        }
        // No margin for f32, as no error bound.
        let none = KnnPrecision::F32.margin(Metric::L2, 128, false, 1e6);
        assert_eq!((none.per_length, none.per_norm, none.constant), (0.0, 0.0, 0.0));
        // A NaN norm or bound widens to NaN (keeps nothing); an infinite norm to infinity.
        let margin = KnnPrecision::Tf32Reranked.margin(Metric::L2, 128, false, 1e6);
        assert!(margin.widen(f32::NAN, 1.0, 1.0).is_nan() && margin.widen(1.0, f32::NAN, 1.0).is_nan());
        assert_eq!(margin.widen(1.0, f32::INFINITY, 2.0), f32::INFINITY);
    }

    #[test]
    fn the_filter_probes_about_the_root_of_base_times_k_and_leaves_short_rows() {
        // SIFT1M's shape at k = 100: 16 384 probed (every 61st), rows of 11 968.
        assert_eq!(
            KnnFilter::plan(1_000_000, 100),
            Some(KnnFilter { probe: 16_384, step: 61, capacity: 11_968 })
        );
        for base in [5000, 20_000, 1_000_000, 50_000_000] {
            for kept in [1, 10, 100, 1000, 2048] {
                let Some(filter) = KnnFilter::plan(base, kept) else { continue };
                // The probe lies in the base, holds `kept`, and a row is at most a quarter of
                // the base and holds the bound's expected count with room to spare.
                assert!(filter.probe >= kept && (filter.probe - 1) * filter.step < base, "{base} {kept}");
                let deviations = filter.step as f64 * (kept as f64 + 8.0 * (kept as f64).sqrt());
                assert!(filter.capacity <= base / 4 && filter.capacity as f64 >= deviations, "{base} {kept}");
                assert_eq!(filter.capacity % 32, 0);
            }
        }
        // Not where the rows would be long, nor beyond the queues or 32-bit indices.
        assert_eq!(KnnFilter::plan(2000, 64), None);
        assert_eq!(KnnFilter::plan(1_000_000, 2049), None);
        assert_eq!(KnnFilter::plan(1 << 33, 10), None);
        assert_eq!(KnnFilter::plan(7, 1), None);
    }

    #[test]
    fn tiles_fit_the_budget_and_hold_what_each_keeps() {
        // SIFT1M's shape at k = 100 within 512 MiB: a thousand queries, 8 column tiles.
        let tiles = KnnTiles::plan(10_000, 1_000_000, 100, 512 << 20);
        assert_eq!(tiles, KnnTiles { query_tile: 1024, base_tiles: 8 });
        // Beyond the queues, one column tile and fewer queries a tile.
        assert_eq!(
            KnnTiles::plan(1000, 1_000_000, 10_000, 512 << 20),
            KnnTiles { query_tile: 125, base_tiles: 1 }
        );
        // Whatever the budget, every column tile holds at least what it keeps, and the
        // tiles cover the base exactly.
        for (queries, base, kept, budget) in [
            (7, 1000, 1, 1 << 10),
            (300, 777, 33, 1 << 12),
            (5, 10_000, 10_000, 1),
            (1, 1, 1, 0),
            (2000, 99, 98, 1 << 30),
            (1000, 1_000_000, 10_000, 512 << 20),
        ] {
            let tiles = KnnTiles::plan(queries, base, kept, budget);
            assert!(tiles.query_tile >= 1 && tiles.query_tile <= queries, "{tiles:?}");
            let mut next = 0;
            for tile in 0..tiles.base_tiles {
                let (first, len) = tiles.base_range(base, tile);
                assert_eq!(first, next);
                assert!(len >= kept, "{queries} {base} {kept} {budget}: {tiles:?} tile {tile} holds {len}");
                next = first + len;
            }
            assert_eq!(next, base);
        }
    }
}
