//! Exact k-NN search ([`gpu_select_kernels::knn`]): norms, distance tiles, the rows top-k
//! per tile, and the merge of column tiles, within a memory budget.
//!
//! For each tile of queries: for each column tile of the base, one launch writes the tile's
//! distances and one rows top-k keeps each query's `k` best of it, moved into that query's
//! row of candidates (`base_tiles · k` per query); one more rows top-k over the candidates
//! (with their base indices) keeps the `k` best. A base that fits one column tile needs no
//! merge. The tiles are sized so that the distances and candidates held at once stay within
//! [`Tuning::knn_tile_bytes`](crate::Tuning::knn_tile_bytes).

use gpu_select_kernels::entry::{
    KNN_DISTANCE_TILE_BF16, KNN_DISTANCE_TILE_F16, KNN_DISTANCE_TILE_F32, KNN_NORMS_BF16, KNN_NORMS_F16,
    KNN_NORMS_F32, KNN_PLACE, KernelId,
};
use gpu_select_kernels::knn::norms::{NORMS_THREADS, NormsParams};
use gpu_select_kernels::knn::place::{KEEP_ALL, PLACE_THREADS, PlaceParams};
use gpu_select_kernels::knn::tile::{DISTANCE_THREADS, DistanceLayout, DistanceTileParams, distance_grid};
use gpu_select_kernels::knn::{Bf16Bits, Component, F16Bits, Metric};
use gpu_select_kernels::params::{GlobalPtr, Order};
use gpu_select_kernels::warp::select::MAX_QUEUE_K;

use crate::buffer::{DeviceBuffer, DeviceValue};
use crate::engine::rows::{RowsAlgorithm, RowsSpec};
use crate::error::{Error, Result};
use crate::gpu::{Gpu, LaunchShape};
use crate::results::TopK;

/// Blocks of the warp-per-row kernels at most (grid-stride beyond).
const MAX_ROW_BLOCKS: u64 = 4096;
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
}

impl KnnStorage for f32 {
    type Stored = f32;
    const NORMS: KernelId<NormsParams<f32>> = KNN_NORMS_F32;
    const TILE: KernelId<DistanceTileParams<f32>> = KNN_DISTANCE_TILE_F32;
}

impl KnnStorage for half::f16 {
    type Stored = F16Bits;
    const NORMS: KernelId<NormsParams<F16Bits>> = KNN_NORMS_F16;
    const TILE: KernelId<DistanceTileParams<F16Bits>> = KNN_DISTANCE_TILE_F16;
}

impl KnnStorage for half::bf16 {
    type Stored = Bf16Bits;
    const NORMS: KernelId<NormsParams<Bf16Bits>> = KNN_NORMS_BF16;
    const TILE: KernelId<DistanceTileParams<Bf16Bits>> = KNN_DISTANCE_TILE_BF16;
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
    fn part(self, first: usize, count: usize) -> Self {
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
        // the queues' 2048 the rows top-k runs one top-k per row: then every column tile
        // costs each query a call of its own, so the base stays whole and fewer queries
        // share a tile instead.
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
        let (short, longer) = (base / self.base_tiles, base % self.base_tiles);
        let first = tile * short + tile.min(longer);
        (first, short + usize::from(tile < longer))
    }
}

/// One search's shape, shared by its streams.
struct KnnSearch<'r, 'o, T> {
    queries: VectorSet<T>,
    base: VectorSet<T>,
    dim: usize,
    query_norms: GlobalPtr<f32>,
    needs_norms: bool,
    tiles: KnnTiles,
    /// Neighbours kept per query and tile (`k`, or `k + 1` for a graph).
    kept: usize,
    run: &'r KnnRun<'o>,
}

impl<T> KnnSearch<'_, '_, T> {
    /// Whether column tiles are merged (more than one).
    fn merges(&self) -> bool {
        self.tiles.base_tiles > 1
    }

    /// Whether the kept neighbours are placed again at the end (signs, a graph's own index).
    fn finishes(&self) -> bool {
        self.run.metric.is_similarity() || self.run.drop_own
    }
}

/// One stream's buffers of a search ([`Gpu::knn_buffers`]).
struct KnnBuffers {
    distances: DeviceBuffer<f32>,
    per_tile: TopK<f32>,
    candidates: TopK<f32>,
    workspace: DeviceBuffer<u8>,
}

/// What a search writes and how: `rows · k` neighbours, nearest first.
pub(crate) struct KnnRun<'o> {
    pub(crate) metric: Metric,
    pub(crate) k: usize,
    /// The base's squared norms (unused for the inner product).
    pub(crate) base_norms: GlobalPtr<f32>,
    /// A k-NN graph: query `i` is base vector `i`, and drops itself.
    pub(crate) drop_own: bool,
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

    /// Queues a search of `queries` against `base` (both of `dim` components) into
    /// `run.out`, in tiles ([`KnnTiles::plan`] within the handle's tuning), the query tiles
    /// taken in turn by [`Tuning::knn_streams`](crate::Tuning::knn_streams) streams (this
    /// handle's and forked ones, each with buffers of its own; this handle's stream waits
    /// for the others at the end).
    pub(crate) fn run_knn<T: KnnStorage>(
        &self,
        queries: VectorSet<T>,
        base: VectorSet<T>,
        dim: usize,
        run: KnnRun<'_>,
    ) -> Result<()> {
        let kept = run.k + usize::from(run.drop_own);
        let streams = self.tuning().knn_streams.max(1);
        let tiles = KnnTiles::plan(queries.count, base.count, kept, self.tuning().knn_tile_bytes / streams);
        let needs_norms = run.metric != Metric::InnerProduct;
        let query_norms = self.alloc_uninit::<f32>(if needs_norms { queries.count } else { 1 })?;
        if needs_norms {
            self.knn_norms(queries, dim, query_norms.global_ptr())?;
        }
        let search = KnnSearch {
            queries,
            base,
            dim,
            query_norms: query_norms.global_ptr(),
            needs_norms,
            tiles,
            kept,
            run: &run,
        };
        let mut handles = vec![self.clone()];
        for _ in 1..streams.min(queries.count.div_ceil(tiles.query_tile)) {
            let forked = self.fork_stream()?;
            // After the query norms and the outputs' allocation.
            forked.wait_for(self)?;
            handles.push(forked);
        }
        let mut buffers =
            handles.iter().map(|handle| handle.knn_buffers(&search)).collect::<Result<Vec<_>>>()?;
        let mut first_query = 0;
        let mut turn = 0;
        while first_query < queries.count {
            let count = tiles.query_tile.min(queries.count - first_query);
            let at = turn % handles.len();
            handles[at].knn_query_tile(&search, &mut buffers[at], first_query, count)?;
            first_query += count;
            turn += 1;
        }
        for handle in &handles[1..] {
            self.wait_for(handle)?;
        }
        Ok(())
    }

    /// One stream's buffers for `search`: a distance tile, a tile's best, the candidates,
    /// the rows top-k's workspace (the largest any of the search's shapes needs).
    fn knn_buffers<T: KnnStorage>(&self, search: &KnnSearch<'_, '_, T>) -> Result<KnnBuffers> {
        let (tiles, kept) = (search.tiles, search.kept);
        let longest_tile = tiles.base_range(search.base.count, 0).1;
        let per_tile_len = if search.merges() || search.finishes() { tiles.query_tile * kept } else { 1 };
        let candidates_len = if search.merges() { tiles.query_tile * tiles.base_tiles * kept } else { 1 };
        let mut workspace_bytes = 0;
        for query_tile in [tiles.query_tile, search.queries.count % tiles.query_tile] {
            if query_tile == 0 {
                continue;
            }
            for tile in [0, tiles.base_tiles - 1] {
                let cols = tiles.base_range(search.base.count, tile).1;
                workspace_bytes = workspace_bytes.max(self.knn_rows_workspace(query_tile, cols, kept)?);
            }
            if search.merges() {
                let cols = tiles.base_tiles * kept;
                workspace_bytes = workspace_bytes.max(self.knn_rows_workspace(query_tile, cols, kept)?);
            }
        }
        Ok(KnnBuffers {
            distances: self.alloc_uninit::<f32>(tiles.query_tile * longest_tile)?,
            per_tile: TopK {
                values: self.alloc_uninit::<f32>(per_tile_len)?,
                indices: self.alloc_uninit::<u64>(per_tile_len)?,
            },
            candidates: TopK {
                values: self.alloc_uninit::<f32>(candidates_len)?,
                indices: self.alloc_uninit::<u64>(candidates_len)?,
            },
            workspace: self.alloc_uninit::<u8>(workspace_bytes.max(1))?,
        })
    }

    /// Queues queries `first_query .. first_query + count` of `search` on this handle's
    /// stream, with `buffers`: each column tile's distances and best, then their merge.
    fn knn_query_tile<T: KnnStorage>(
        &self,
        search: &KnnSearch<'_, '_, T>,
        buffers: &mut KnnBuffers,
        first_query: usize,
        count: usize,
    ) -> Result<()> {
        let (run, tiles, kept) = (search.run, search.tiles, search.kept);
        let (merges, finishes) = (search.merges(), search.finishes());
        let query_part = search.queries.part(first_query, count);
        let norms_part = search.query_norms.offset(if search.needs_norms { first_query as u64 } else { 0 });
        let out_rows = first_query * run.k..(first_query + count) * run.k;
        let own = run.drop_own.then_some(first_query);
        let KnnBuffers { distances, per_tile, candidates, workspace } = buffers;
        for tile in 0..tiles.base_tiles {
            let (first_base, base_count) = tiles.base_range(search.base.count, tile);
            let tile_distances = distances.view(0, count * base_count);
            self.knn_distance_tile(
                (query_part, norms_part),
                (search.base.part(first_base, base_count), run.base_norms.offset(first_base as u64)),
                search.dim,
                run.metric,
                tile_distances.global_ptr(),
            )?;
            let spec = RowsSpec::dense(count, base_count, base_count, kept)?;
            if !merges && !finishes {
                // One column tile, nothing to finish: straight into the caller's rows.
                let mut out = out_view(run.out, out_rows.clone());
                self.knn_select(&tile_distances, &spec, kept, GlobalPtr::null(), workspace, &mut out)?;
                continue;
            }
            let mut best = out_view(per_tile, 0..count * kept);
            self.knn_select(&tile_distances, &spec, kept, GlobalPtr::null(), workspace, &mut best)?;
            if merges {
                let row = tiles.base_tiles * kept;
                self.knn_place(&best, (candidates, row, tile * kept), count, kept, first_base, None, false)?;
            } else {
                let out = out_view(run.out, out_rows.clone());
                self.knn_place(&best, (&out, run.k, 0), count, kept, 0, own, run.metric.is_similarity())?;
            }
        }
        if merges {
            let cols = tiles.base_tiles * kept;
            let spec = RowsSpec::dense(count, cols, cols, kept)?;
            let values = candidates.values.view(0, count * cols);
            let indices = candidates.indices.global_ptr();
            if finishes {
                let mut best = out_view(per_tile, 0..count * kept);
                self.knn_select(&values, &spec, kept, indices, workspace, &mut best)?;
                let out = out_view(run.out, out_rows);
                self.knn_place(&best, (&out, run.k, 0), count, kept, 0, own, run.metric.is_similarity())?;
            } else {
                let mut out = out_view(run.out, out_rows);
                self.knn_select(&values, &spec, kept, indices, workspace, &mut out)?;
            }
        }
        Ok(())
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
    fn knn_rows_workspace(&self, rows: usize, cols: usize, kept: usize) -> Result<usize> {
        let spec = RowsSpec::dense(rows, cols, cols, kept)?;
        self.rows_workspace_bytes::<f32>(&spec, kept, Order::Smallest, RowsAlgorithm::Auto)
    }

    /// The `kept` smallest of each row of `distances` (shape `spec`), with `indices` (the
    /// candidates' base indices, or null for columns).
    fn knn_select(
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

    /// Queues one distance tile: `queries × base` into `out` (row stride `base.count`).
    pub(crate) fn knn_distance_tile<T: KnnStorage>(
        &self,
        (queries, query_norms): (VectorSet<T>, GlobalPtr<f32>),
        (base, base_norms): (VectorSet<T>, GlobalPtr<f32>),
        dim: usize,
        metric: Metric,
        out: GlobalPtr<f32>,
    ) -> Result<()> {
        let (columns, rows) = distance_grid(queries.count as u64, base.count as u64);
        let (Ok(columns), Ok(rows)) = (u32::try_from(columns), u16::try_from(rows)) else {
            return Err(Error::invalid("a k-NN distance tile too large for one launch"));
        };
        let shape = LaunchShape {
            grid: (columns, rows as u32),
            block_threads: DISTANCE_THREADS,
            shared_bytes: DistanceLayout::new().bytes,
        };
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
        self.launch(T::TILE, shape, params)
    }

    /// Queues the move of `rows × width` neighbours of `from` into `to` (row `r` at
    /// `r · stride + column`), indices shifted by `index_offset`; row `r` drops index
    /// `own + r` (or its last entry) when `own` is given; signs flipped when `negate`.
    #[allow(clippy::too_many_arguments)]
    fn knn_place(
        &self,
        from: &TopK<f32>,
        (to, stride, column): (&TopK<f32>, usize, usize),
        rows: usize,
        width: usize,
        index_offset: usize,
        own: Option<usize>,
        negate: bool,
    ) -> Result<()> {
        let warps_per_block = (PLACE_THREADS / 32) as u64;
        let blocks = (rows as u64).div_ceil(warps_per_block).min(MAX_ROW_BLOCKS) as u32;
        let shape = LaunchShape { grid: (blocks, 1), block_threads: PLACE_THREADS, shared_bytes: 0 };
        let params = PlaceParams {
            values_in: from.values.global_ptr(),
            indices_in: from.indices.global_ptr(),
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
        };
        self.launch(KNN_PLACE, shape, params)
    }
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
