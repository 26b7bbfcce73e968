//! A tile of distances on the tensor cores: the product of [`tile`](super::tile)'s kernel
//! with TF32 inputs (`mma.sync.m16n8k8`, `f32` accumulation), finished by the same epilogue
//! ([`super::tile_distance`]). Its distances are approximations: the search keeps more
//! candidates than asked for and re-ranks them exactly ([`rerank`]).
//!
//! The block, its grid and its staging are [`tile`](super::tile)'s: [`TILE`]` × `[`TILE`]
//! distances per block of [`DISTANCE_THREADS`] threads, two shared-memory stages
//! (component-major), the next step's components prefetched into registers; but a step is
//! [`TENSOR_DEPTH`] components (16-byte loads of `f32` vectors), so that the products of a
//! step hide the round trip of the next one's loads. The staged values are rounded to TF32
//! once, as they are stored. Each of the 8 warps computes a 64 × 32 part of the tile as 4 × 4
//! products of 16 × 8, each step 32 `mma` over its 16 components. A stage's rows are padded
//! to [`TILE`]` + 8` words, so that the fragment loads (lane `4g + t` reads component `t` or
//! `t + 4` of vector `g` or `g + 8`) fall in 32 different banks.
//!
//! TF32 keeps 10 of `f32`'s 23 mantissa bits (each input within a relative `2^-11`), so a
//! dot product's error is up to about `2^-10 · ‖x‖ ‖y‖`: the bound the re-ranking proves its
//! candidates by (`host/src/engine/knn.rs`). Split TF32 (`SPLIT`, "3xTF32") also stages each
//! value's remainder `lo = tf32(x − hi)` and sums `lo·hi + hi·lo + hi·hi`: each value then
//! within `2^-22`, three times the products for a bound about a thousand times tighter.

use super::tile::{DISTANCE_THREADS, DistanceTileParams, Four, TILE};
use super::{Bf16Bits, Component, F16Bits, Metric, tile_distance};
use crate::device::{self, SharedLayout, SharedRegion};
use crate::params::GlobalPtr;
use crate::topk::bitonic::NO_INDEX;

/// Components per step (per shared-memory stage): two `mma` depths of 8, so that each
/// round trip of the prefetched loads and each barrier carry twice the products of the f32
/// kernel's depth.
pub const TENSOR_DEPTH: usize = 16;
/// Components a thread stages per vector and step: half a step, two 16-byte loads of `f32`.
const STAGED: usize = TENSOR_DEPTH / 2;
/// Words from one component's row of a stage to the next: [`TILE`] and 8 of padding, so that
/// the fragment loads (lane `4g + t` reads row `t`, column `g`) fall in 32 banks (`8t + g`).
const ROW: usize = TILE as usize + 8;
/// Shared-memory stages.
const STAGES: usize = 2;
/// Rows (queries) of a warp's part of the tile.
const WARP_ROWS: usize = 64;
/// Columns (base vectors) of a warp's part.
const WARP_COLUMNS: usize = 32;
/// 16-row products per warp part.
const M_TILES: usize = WARP_ROWS / 16;
/// 8-column products per warp part.
const N_TILES: usize = WARP_COLUMNS / 8;
const _: () = assert!(
    (TILE as usize / WARP_ROWS) * (TILE as usize / WARP_COLUMNS) * 32 == DISTANCE_THREADS as usize,
    "the warps' parts cover the tile"
);

/// The shared memory of the kernel: both tiles' stages as TF32 bits, component-major, rows
/// padded.
#[derive(Clone, Copy, Debug)]
pub struct Tf32TileLayout {
    /// The queries' stages: `STAGES × TENSOR_DEPTH` rows of `ROW` words.
    pub queries: SharedRegion<u32>,
    /// The base vectors' stages, alike.
    pub base: SharedRegion<u32>,
    /// Split TF32: the queries' remainders (`x − hi`, rounded to TF32), alike.
    pub queries_low: SharedRegion<u32>,
    /// Split TF32: the base vectors' remainders.
    pub base_low: SharedRegion<u32>,
    /// Bytes to ask for at launch.
    pub bytes: usize,
}

impl Tf32TileLayout {
    /// The layout of one TF32 product per pair (`split` false) or three.
    pub const fn new(split: bool) -> Self {
        let stage_words = STAGES * TENSOR_DEPTH * ROW;
        let low_words = if split { stage_words } else { 0 };
        let (layout, queries) = SharedLayout::new().push::<u32>(stage_words);
        let (layout, base) = layout.push::<u32>(stage_words);
        let (layout, queries_low) = layout.push::<u32>(low_words);
        let (layout, base_low) = layout.push::<u32>(low_words);
        Self { queries, base, queries_low, base_low, bytes: layout.bytes() }
    }
}

/// This thread's [`STAGED`] components of one vector from component `first` on, widened to
/// `f32`: zeros past the dimension or past the tile's last vector (`count`); two 16-byte
/// loads when `aligned` (`f32` vectors starting on 16 bytes) and the components are all
/// there.
///
/// # Safety
/// Every component named inside `vectors`.
#[inline(always)]
unsafe fn load_staged<S: Component>(
    vectors: GlobalPtr<S>,
    (stride, count, dim): (u64, u64, u64),
    vector: u64,
    first: u64,
    aligned: bool,
) -> [f32; STAGED] {
    let mut values = [0.0f32; STAGED];
    if vector < count {
        let at = vectors.offset(vector * stride + first);
        if aligned && first + STAGED as u64 <= dim {
            // `S` is `f32` here (4 bytes, the only such component).
            let fours = at.as_ptr() as *const Four;
            let (low, high) = unsafe { (fours.read(), fours.add(1).read()) };
            values[..4].copy_from_slice(&low.0);
            values[4..].copy_from_slice(&high.0);
        } else {
            for (j, value) in values.iter_mut().enumerate() {
                if first + (j as u64) < dim {
                    *value = unsafe { at.read(j as u64) }.to_f32();
                }
            }
        }
    }
    values
}

/// Two neighbouring distances, one 8-byte access.
#[repr(C, align(8))]
#[derive(Clone, Copy, Debug, Default)]
struct Two([f32; 2]);

/// The `knn_distance_tile_tf32_<storage>` kernel (module docs).
///
/// # Safety
/// As [`super::tile::distance_tile`], with [`Tf32TileLayout::bytes`] of shared memory.
// Fragment and accumulator arrays are indexed by position (row tile, column tile), as the
// PTX ISA lays them out: plain ranges read best here.
#[allow(clippy::needless_range_loop)]
#[inline(always)]
pub unsafe fn distance_tile_tf32<S: Component, const SPLIT: bool>(params: DistanceTileParams<S>) {
    let metric = Metric::from_raw(params.metric);
    let thread = device::thread_idx_x() as usize;
    let (warp, lane) = (thread / 32, thread % 32);
    let (g, t) = (lane / 4, lane % 4);
    let warp_row = (warp / (TILE as usize / WARP_COLUMNS)) * WARP_ROWS;
    let warp_column = (warp % (TILE as usize / WARP_COLUMNS)) * WARP_COLUMNS;
    // The grid's own order (base tiles fastest): taking all query tiles of a base tile
    // together, as the f32 tile does (`tile_origin`), measured 5 % slower here (run 178).
    let query_start = device::block_idx_y() as u64 * TILE;
    let base_start = device::block_idx_x() as u64 * TILE;
    let queries = params.queries.offset(query_start * params.query_stride);
    let base = params.base.offset(base_start * params.base_stride);
    let query_count = params.query_count - query_start.min(params.query_count);
    let base_count = params.base_count - base_start.min(params.base_count);

    let layout = Tf32TileLayout::new(SPLIT);
    let (query_words, base_words) = unsafe { (layout.queries.bind(), layout.base.bind()) };
    let (query_lows, base_lows) = unsafe { (layout.queries_low.bind(), layout.base_low.bind()) };

    // The vector this thread stages, and which half of the step's components.
    let (staged_vector, staged_half) = ((thread / 2) as u64, thread % 2);
    // 16-byte loads where every vector of both sets starts on 16 bytes.
    let vectors_aligned = size_of::<S>() == 4
        && queries.address().is_multiple_of(16)
        && base.address().is_multiple_of(16)
        && params.query_stride.is_multiple_of(4)
        && params.base_stride.is_multiple_of(4);
    let stage_load = |step: u64| unsafe {
        let first = step * TENSOR_DEPTH as u64 + (staged_half * STAGED) as u64;
        let load = |vectors, stride, count| {
            load_staged(vectors, (stride, count, params.dim), staged_vector, first, vectors_aligned)
        };
        (load(queries, params.query_stride, query_count), load(base, params.base_stride, base_count))
    };
    let stage_store = |stage: usize, (query_part, base_part): ([f32; STAGED], [f32; STAGED])| unsafe {
        for j in 0..STAGED {
            let at = (stage * TENSOR_DEPTH + staged_half * STAGED + j) * ROW + staged_vector as usize;
            let (query_high, base_high) =
                (device::f32_to_tf32(query_part[j]), device::f32_to_tf32(base_part[j]));
            query_words.store(at, query_high);
            base_words.store(at, base_high);
            if SPLIT {
                // The remainder, exact in f32 (hi holds x's leading bits), rounded to TF32.
                query_lows.store(at, device::f32_to_tf32(query_part[j] - f32::from_bits(query_high)));
                base_lows.store(at, device::f32_to_tf32(base_part[j] - f32::from_bits(base_high)));
            }
        }
    };

    let steps = params.dim.div_ceil(TENSOR_DEPTH as u64);
    let mut sums = [[[0.0f32; 4]; N_TILES]; M_TILES];
    stage_store(0, stage_load(0));
    unsafe { device::sync_threads() };
    for step in 0..steps {
        let stage = (step % STAGES as u64) as usize;
        // The next step's loads are in flight while this one's products run.
        let next = if step + 1 < steps { Some(stage_load(step + 1)) } else { None };
        for depth in 0..TENSOR_DEPTH / 8 {
            // Rows t and t + 4 of this 8-deep slice of the stage.
            let low = (stage * TENSOR_DEPTH + depth * 8 + t) * ROW;
            let high = low + 4 * ROW;
            // B's fragments for the warp's columns, then A's a row tile at a time (fewer
            // registers held), each product into its accumulator: with SPLIT the small terms
            // first (lo·hi, hi·lo), then hi·hi.
            let b_at = |words: &crate::device::SharedSlice<u32>, n: usize| unsafe {
                let column = warp_column + n * 8 + g;
                [words.load(low + column), words.load(high + column)]
            };
            let a_at = |words: &crate::device::SharedSlice<u32>, m: usize| unsafe {
                let row = warp_row + m * 16 + g;
                [
                    words.load(low + row),
                    words.load(low + row + 8),
                    words.load(high + row),
                    words.load(high + row + 8),
                ]
            };
            let mut b = [[0u32; 2]; N_TILES];
            let mut b_low = [[0u32; 2]; N_TILES];
            for n in 0..N_TILES {
                b[n] = b_at(&base_words, n);
                if SPLIT {
                    b_low[n] = b_at(&base_lows, n);
                }
            }
            for m in 0..M_TILES {
                let a = a_at(&query_words, m);
                if SPLIT {
                    let a_low = a_at(&query_lows, m);
                    for n in 0..N_TILES {
                        sums[m][n] = unsafe { device::mma_tf32_m16n8k8(a_low, b[n], sums[m][n]) };
                        sums[m][n] = unsafe { device::mma_tf32_m16n8k8(a, b_low[n], sums[m][n]) };
                    }
                }
                for n in 0..N_TILES {
                    sums[m][n] = unsafe { device::mma_tf32_m16n8k8(a, b[n], sums[m][n]) };
                }
            }
        }
        if let Some(loaded) = next {
            stage_store((stage + 1) % STAGES, loaded);
        }
        unsafe { device::sync_threads() };
    }

    // The epilogue: lane (g, t) holds rows g and g + 8, columns 2t and 2t + 1 of each product.
    let needs_norms = metric != Metric::InnerProduct;
    let column_of = |n: usize| (warp_column + n * 8 + 2 * t) as u64;
    let mut base_norm = [[0.0f32; 2]; N_TILES];
    if needs_norms {
        for n in 0..N_TILES {
            for j in 0..2 {
                if column_of(n) + (j as u64) < base_count {
                    base_norm[n][j] = unsafe { params.base_norms.read(base_start + column_of(n) + j as u64) };
                }
            }
        }
    }
    let out = params.out.offset(base_start);
    // (As the f32 tile writes its fours, spelled out in each: one store helper for both made
    // the f32 tile 24 % slower, H200 run 200.)
    let whole_pairs = out.address().is_multiple_of(8) && params.out_stride.is_multiple_of(2);
    for m in 0..M_TILES {
        for half in 0..2 {
            let row = (warp_row + m * 16 + g + 8 * half) as u64;
            if row >= query_count {
                continue;
            }
            let query = query_start + row;
            let query_norm = if needs_norms { unsafe { params.query_norms.read(query) } } else { 0.0 };
            for n in 0..N_TILES {
                let mut distances = Two::default();
                for j in 0..2 {
                    distances.0[j] =
                        tile_distance(metric, sums[m][n][2 * half + j], query_norm, base_norm[n][j]);
                }
                let column = column_of(n);
                let at = query * params.out_stride + column;
                if whole_pairs && column + 2 <= base_count {
                    unsafe { (out.offset(at).as_ptr() as *mut Two).write(distances) };
                } else {
                    for j in 0..2 {
                        if column + (j as u64) < base_count {
                            unsafe { out.write(at + j as u64, distances.0[j]) };
                        }
                    }
                }
            }
        }
    }
}

/// [`distance_tile_tf32`] of `f32` vectors, one TF32 product per pair.
///
/// # Safety
/// As [`distance_tile_tf32`].
pub unsafe fn distance_tile_tf32_f32(params: DistanceTileParams<f32>) {
    unsafe { distance_tile_tf32::<_, false>(params) }
}

/// [`distance_tile_tf32`] of binary16 vectors (exact in TF32: only the sums round).
///
/// # Safety
/// As [`distance_tile_tf32`].
pub unsafe fn distance_tile_tf32_f16(params: DistanceTileParams<F16Bits>) {
    unsafe { distance_tile_tf32::<_, false>(params) }
}

/// [`distance_tile_tf32`] of bfloat16 vectors (exact in TF32: only the sums round).
///
/// # Safety
/// As [`distance_tile_tf32`].
pub unsafe fn distance_tile_tf32_bf16(params: DistanceTileParams<Bf16Bits>) {
    unsafe { distance_tile_tf32::<_, false>(params) }
}

/// [`distance_tile_tf32`] of `f32` vectors, split: three TF32 products per pair.
///
/// # Safety
/// As [`distance_tile_tf32`].
pub unsafe fn distance_tile_tf32x3_f32(params: DistanceTileParams<f32>) {
    unsafe { distance_tile_tf32::<_, true>(params) }
}

/// Threads per block of [`rerank`].
pub const RERANK_THREADS: u32 = 256;

/// Parameters of `knn_rerank_<storage>`.
#[repr(C)]
#[derive(Debug)]
pub struct RerankParams<S> {
    /// The first query of the rows; query `i` at `i · query_stride`.
    pub queries: GlobalPtr<S>,
    /// Components from one query's start to the next's.
    pub query_stride: u64,
    /// The rows' queries' squared norms (null for the inner product).
    pub query_norms: GlobalPtr<f32>,
    /// The whole base; vector `j` at `j · base_stride`.
    pub base: GlobalPtr<S>,
    /// Components from one base vector's start to the next's.
    pub base_stride: u64,
    /// The base's squared norms (null for the inner product).
    pub base_norms: GlobalPtr<f32>,
    /// `rows × width` candidates' base indices, row after row ([`NO_INDEX`]: none).
    pub candidates: GlobalPtr<u64>,
    /// `rows × width` distances, computed here.
    pub out: GlobalPtr<f32>,
    /// Candidates per row.
    pub width: u64,
    /// Rows (queries).
    pub rows: u64,
    /// Components per vector.
    pub dim: u64,
    /// [`Metric::to_raw`].
    pub metric: u32,
    /// Keeps the struct free of implicit padding (set to 0).
    pub reserved: u32,
}

impl<S> Clone for RerankParams<S> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<S> Copy for RerankParams<S> {}

/// The `knn_rerank_<storage>` kernel: the distance of each query to each of its candidates
/// in `f32`, by the f32 tile kernel's arithmetic — one `fma` per component, in component
/// order, from 0, then [`tile_distance`] — so that a candidate gets the distance the f32 search
/// gives it. A block per row, a thread per candidate (grid-stride over the row). A
/// candidate of [`NO_INDEX`] gets NaN (ranked last).
///
/// # Safety
/// Any block size; `grid.x ≥ 1` blocks take rows in turn; every index is below the base's
/// count, every vector and norm named in bounds.
pub unsafe fn rerank<S: Component>(params: RerankParams<S>) {
    let metric = Metric::from_raw(params.metric);
    let needs_norms = metric != Metric::InnerProduct;
    let mut row = device::block_idx_x() as u64;
    while row < params.rows {
        let query = params.queries.offset(row * params.query_stride);
        let query_norm = if needs_norms { unsafe { params.query_norms.read(row) } } else { 0.0 };
        let mut j = device::thread_idx_x() as u64;
        while j < params.width {
            let at = row * params.width + j;
            let index = unsafe { params.candidates.read(at) };
            let distance = if index == NO_INDEX {
                f32::NAN
            } else {
                let vector = params.base.offset(index * params.base_stride);
                let mut dot = 0.0f32;
                for c in 0..params.dim {
                    let (x, y) = unsafe { (query.read(c).to_f32(), vector.read(c).to_f32()) };
                    dot = device::fma_f32(x, y, dot);
                }
                let base_norm = if needs_norms { unsafe { params.base_norms.read(index) } } else { 0.0 };
                tile_distance(metric, dot, query_norm, base_norm)
            };
            unsafe { params.out.write(at, distance) };
            j += device::block_dim_x() as u64;
        }
        row += device::grid_dim_x() as u64;
    }
}

/// [`rerank`] of `f32` vectors.
///
/// # Safety
/// As [`rerank`].
pub unsafe fn rerank_f32(params: RerankParams<f32>) {
    unsafe { rerank(params) }
}

/// [`rerank`] of binary16 vectors.
///
/// # Safety
/// As [`rerank`].
pub unsafe fn rerank_f16(params: RerankParams<F16Bits>) {
    unsafe { rerank(params) }
}

/// [`rerank`] of bfloat16 vectors.
///
/// # Safety
/// As [`rerank`].
pub unsafe fn rerank_bf16(params: RerankParams<Bf16Bits>) {
    unsafe { rerank(params) }
}
