//! A tile of distances: the product of a tile of queries with a tile of base vectors
//! (`⟨x, y⟩` for every pair), finished into distances by the epilogue
//! ([`super::tile_distance`]).
//!
//! A block computes a [`TILE`]` × `[`TILE`] square of the product (queries × base vectors)
//! with [`DISTANCE_THREADS`] threads, each accumulating an 8 × 8 patch in registers. The
//! dimension is walked [`DEPTH`] components at a time: the block stages both tiles' next
//! `DEPTH` components in shared memory (transposed: component-major, so that a thread's
//! eight rows are two 16-byte loads), while the registers prefetch the step after it from
//! global memory: two stages in shared memory, one barrier per step.
//!
//! ```text
//! thread t = 16·ty + tx owns rows    ty·4 + {0,1,2,3} and 64 + ty·4 + {0,1,2,3}
//!                       and columns  tx·4 + {0,1,2,3} and 64 + tx·4 + {0,1,2,3}
//! ```
//!
//! (rows four apart and 64 apart: a warp's two values of `ty` read two 16-byte words of the
//! query stage, broadcast; its sixteen values of `tx` read 256 contiguous bytes of the base
//! stage, no bank conflict). Components past the dimension, and vectors past the tile's
//! end, are read as zeros; distances are written only inside the tile.
//!
//! The filtered form ([`distance_filter`], `knn_distance_filter_<storage>`) runs the same
//! product and writes no tile: its epilogue keeps a pair only when its distance is at most
//! its query's bound (a distance the search measured before, [`FilterTarget`]), as one
//! 8-byte candidate (the distance's rank and the base index) appended to the query's row.
//! The search's bound leaves a few thousand of a million pairs a query, so the distances
//! are neither written nor read again.

use super::{Bf16Bits, Component, F16Bits, Metric, tile_distance};
use crate::device::{self, SharedLayout, SharedRegion};
use crate::key::Key;
use crate::params::GlobalPtr;

/// Queries (and base vectors) per block.
pub const TILE: u64 = 128;
/// Components per step of the product.
pub const DEPTH: usize = 8;
/// Threads per block: 16 × 16, each an 8 × 8 patch.
pub const DISTANCE_THREADS: u32 = 256;
/// Rows (and columns) of a thread's patch.
const PATCH: usize = 8;
/// Shared-memory stages (the one read and the one written during a step).
const STAGES: usize = 2;

/// Runs `$body` for `$i` = 0 to [`PATCH`] − 1, unrolled in the source (so that the patch's
/// arrays are indexed by constants and stay in registers).
macro_rules! unroll_patch {
    ($i:ident => $body:block) => {
        unroll_patch!(@each $i $body [0 1 2 3 4 5 6 7])
    };
    (@each $i:ident $body:block [$($n:literal)*]) => {{
        const _: () = assert!(PATCH == [$($n),*].len());
        $({
            let $i: usize = $n;
            $body
        })*
    }};
}

/// Four neighbouring values, one 16-byte access.
#[repr(C, align(16))]
#[derive(Clone, Copy, Debug, Default)]
pub struct Four(pub [f32; 4]);

/// Parameters of `knn_distance_tile_<storage>`.
#[repr(C)]
#[derive(Debug)]
pub struct DistanceTileParams<S> {
    /// The first query of the tile; query `i` at `i · query_stride`.
    pub queries: GlobalPtr<S>,
    /// Components from one query's start to the next's.
    pub query_stride: u64,
    /// The queries' squared norms (null for the inner product).
    pub query_norms: GlobalPtr<f32>,
    /// The first base vector of the tile; vector `j` at `j · base_stride`.
    pub base: GlobalPtr<S>,
    /// Components from one base vector's start to the next's.
    pub base_stride: u64,
    /// The base vectors' squared norms (null for the inner product).
    pub base_norms: GlobalPtr<f32>,
    /// `query_count` rows of distances, row `i` at `i · out_stride`, one per base vector.
    pub out: GlobalPtr<f32>,
    /// Distances from one row's start to the next's (at least `base_count`).
    pub out_stride: u64,
    /// Queries in the tile.
    pub query_count: u64,
    /// Base vectors in the tile.
    pub base_count: u64,
    /// Components per vector.
    pub dim: u64,
    /// [`Metric::to_raw`].
    pub metric: u32,
}

impl<S> Clone for DistanceTileParams<S> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<S> Copy for DistanceTileParams<S> {}

/// Where the filtered form keeps its candidates (module docs).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct FilterTarget {
    /// Each query's bound, a distance as the tiles hold it: a pair is kept when its
    /// distance is at most the bound (a float compare: every pair whose rank,
    /// [`Key::to_ordered`], is at most the bound's, and a zero beside the other zero; a NaN
    /// bound keeps nothing).
    pub bounds: GlobalPtr<f32>,
    /// Each query's count of kept pairs, added to (it may pass `capacity`: the row is then
    /// incomplete, and the host searches that query again).
    pub counts: GlobalPtr<u32>,
    /// `query_count` rows of `capacity` candidates, each `rank << 32 | base index`.
    pub candidates: GlobalPtr<u64>,
    /// Candidates a row holds.
    pub capacity: u64,
    /// Added to a column's place in the tile: the base index the candidate carries (the
    /// whole base's indices fit 32 bits).
    pub index_offset: u64,
}

impl FilterTarget {
    /// No target: the plain tile's.
    pub(super) const NONE: Self = FilterTarget {
        bounds: GlobalPtr::null(),
        counts: GlobalPtr::null(),
        candidates: GlobalPtr::null(),
        capacity: 0,
        index_offset: 0,
    };

    /// Appends the candidate of `rank` and base column `column` to row `query`.
    ///
    /// # Safety
    /// `query` a row of the target.
    #[inline(always)]
    pub(super) unsafe fn keep(&self, query: u64, rank: u32, column: u64) {
        let slot = unsafe { device::global_atomic_add_u32(self.counts.offset(query).as_ptr(), 1) } as u64;
        if slot < self.capacity {
            let candidate = (rank as u64) << 32 | (self.index_offset + column);
            unsafe { self.candidates.write(query * self.capacity + slot, candidate) };
        }
    }
}

/// Parameters of `knn_distance_filter_<storage>`: the tile's (its `out` and `out_stride`
/// unused) and where the candidates go.
#[repr(C)]
#[derive(Debug)]
pub struct DistanceFilterParams<S> {
    /// The product, as the plain tile takes it.
    pub tile: DistanceTileParams<S>,
    /// The candidates' rows.
    pub target: FilterTarget,
}

impl<S> Clone for DistanceFilterParams<S> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<S> Copy for DistanceFilterParams<S> {}

/// The shared memory of the kernel: both tiles' stages, component-major.
#[derive(Clone, Copy, Debug)]
pub struct DistanceLayout {
    /// The queries' stages: `STAGES × DEPTH` rows of [`TILE`] values.
    pub queries: SharedRegion<f32>,
    /// The base vectors' stages, alike.
    pub base: SharedRegion<f32>,
    /// Bytes to ask for at launch.
    pub bytes: usize,
}

impl DistanceLayout {
    /// The layout (the same for every launch).
    pub const fn new() -> Self {
        let stage_values = STAGES * DEPTH * TILE as usize;
        let (layout, queries) = SharedLayout::new().push::<f32>(stage_values);
        let (layout, base) = layout.push::<f32>(stage_values);
        Self { queries, base, bytes: layout.bytes() }
    }
}

impl Default for DistanceLayout {
    fn default() -> Self {
        Self::new()
    }
}

/// The blocks a launch needs: `(⌈base_count / TILE⌉, ⌈query_count / TILE⌉)`.
pub const fn distance_grid(query_count: u64, base_count: u64) -> (u64, u64) {
    (base_count.div_ceil(TILE), query_count.div_ceil(TILE))
}

/// The first query and the first base vector of this block's tile. Blocks in launch order
/// take all query tiles of one base tile before the next base tile, so that a base tile
/// comes from DRAM once and from L2 for the other query tiles (the grid's shape stays
/// [`distance_grid`]'s: base tiles × query tiles).
#[inline(always)]
fn tile_origin() -> (u64, u64) {
    let query_tiles = device::grid_dim_y() as u64;
    let launch_order =
        device::block_idx_y() as u64 * device::grid_dim_x() as u64 + device::block_idx_x() as u64;
    ((launch_order % query_tiles) * TILE, (launch_order / query_tiles) * TILE)
}

/// This thread's `DEPTH / 2` components of one vector of a tile, from component `first`
/// on, widened to `f32`: zeros past the dimension or past the tile's last vector; one
/// 16-byte load when `aligned` (`f32` vectors starting on 16 bytes) and all four are there.
#[inline(always)]
unsafe fn load_quarter<S: Component>(
    vectors: GlobalPtr<S>,
    (stride, count, dim): (u64, u64, u64),
    vector: u64,
    first: u64,
    aligned: bool,
) -> [f32; DEPTH / 2] {
    let mut values = [0.0f32; DEPTH / 2];
    if vector < count {
        if aligned && first + (DEPTH / 2) as u64 <= dim {
            // `S` is `f32` here (4 bytes, the only such component).
            let four = vectors.offset(vector * stride + first).as_ptr() as *const Four;
            return unsafe { four.read() }.0;
        }
        for (j, value) in values.iter_mut().enumerate() {
            let component = first + j as u64;
            if component < dim {
                *value = unsafe { vectors.read(vector * stride + component) }.to_f32();
            }
        }
    }
    values
}

/// The `knn_distance_tile_<storage>` kernel (module docs).
///
/// # Safety
/// [`DISTANCE_THREADS`] threads, [`DistanceLayout::bytes`] of shared memory, the grid of
/// [`distance_grid`]; every vector, norm and distance named by the parameters in bounds.
#[inline(always)]
pub unsafe fn distance_tile<S: Component>(params: DistanceTileParams<S>) {
    unsafe { product::<S, false>(params, FilterTarget::NONE) }
}

/// The `knn_distance_filter_<storage>` kernel (module docs): [`distance_tile`]'s product,
/// each query's candidates kept in `params.target` instead of a tile written.
///
/// # Safety
/// As [`distance_tile`] (with `params.tile.out` unused); `params.target`'s bounds and
/// counts hold `query_count` values, its candidates `query_count · capacity`.
#[inline(always)]
pub unsafe fn distance_filter<S: Component>(params: DistanceFilterParams<S>) {
    unsafe { product::<S, true>(params.tile, params.target) }
}

/// The product of both kernels; the epilogue writes the tile or, `FILTER`, keeps candidates.
///
/// # Safety
/// As [`distance_tile`] or [`distance_filter`].
// The patch's loops index registers by position (row i, column j) and compute the matrix
// positions from the same i and j: plain ranges read best here.
#[allow(clippy::needless_range_loop)]
#[inline(always)]
unsafe fn product<S: Component, const FILTER: bool>(params: DistanceTileParams<S>, target: FilterTarget) {
    let metric = Metric::from_raw(params.metric);
    let thread = device::thread_idx_x() as usize;
    let (tx, ty) = (thread % 16, thread / 16);
    let (query_start, base_start) = tile_origin();
    let queries = params.queries.offset(query_start * params.query_stride);
    let base = params.base.offset(base_start * params.base_stride);
    let query_count = params.query_count - query_start.min(params.query_count);
    let base_count = params.base_count - base_start.min(params.base_count);

    let layout = DistanceLayout::new();
    let (query_words, base_words) = unsafe { (layout.queries.bind(), layout.base.bind()) };
    let (query_fours, base_fours) =
        unsafe { (layout.queries.cast::<Four>().bind(), layout.base.cast::<Four>().bind()) };

    // The vector this thread stages, and which half of the step's components.
    let (staged_vector, staged_half) = ((thread / 2) as u64, thread % 2);
    // 16-byte loads where every vector of both sets starts on 16 bytes.
    let aligned = size_of::<S>() == 4
        && queries.address().is_multiple_of(16)
        && base.address().is_multiple_of(16)
        && params.query_stride.is_multiple_of(4)
        && params.base_stride.is_multiple_of(4);
    let stage_load = |step: u64| unsafe {
        let first = step * DEPTH as u64 + (staged_half * DEPTH / 2) as u64;
        let load = |vectors, stride, count| {
            load_quarter(vectors, (stride, count, params.dim), staged_vector, first, aligned)
        };
        (load(queries, params.query_stride, query_count), load(base, params.base_stride, base_count))
    };
    let stage_store = |stage: usize, (query_part, base_part): ([f32; DEPTH / 2], [f32; DEPTH / 2])| unsafe {
        for j in 0..DEPTH / 2 {
            let at = (stage * DEPTH + staged_half * DEPTH / 2 + j) * TILE as usize + staged_vector as usize;
            query_words.store(at, query_part[j]);
            base_words.store(at, base_part[j]);
        }
    };

    let steps = params.dim.div_ceil(DEPTH as u64);
    let mut sums = [[0.0f32; PATCH]; PATCH];
    stage_store(0, stage_load(0));
    unsafe { device::sync_threads() };
    for step in 0..steps {
        let stage = (step % STAGES as u64) as usize;
        // The next step's loads are in flight while this one's products run.
        let next = if step + 1 < steps { Some(stage_load(step + 1)) } else { None };
        for component in 0..DEPTH {
            let row = (stage * DEPTH + component) * (TILE as usize / 4);
            let (query_low, query_high) =
                unsafe { (query_fours.load(row + ty), query_fours.load(row + 16 + ty)) };
            let (base_low, base_high) =
                unsafe { (base_fours.load(row + tx), base_fours.load(row + 16 + tx)) };
            let mut x = [0.0f32; PATCH];
            let mut y = [0.0f32; PATCH];
            x[..4].copy_from_slice(&query_low.0);
            x[4..].copy_from_slice(&query_high.0);
            y[..4].copy_from_slice(&base_low.0);
            y[4..].copy_from_slice(&base_high.0);
            for i in 0..PATCH {
                for j in 0..PATCH {
                    sums[i][j] = device::fma_f32(x[i], y[j], sums[i][j]);
                }
            }
        }
        if let Some(loaded) = next {
            stage_store((stage + 1) % STAGES, loaded);
        }
        unsafe { device::sync_threads() };
    }

    // The epilogue: distances of this thread's patch, inside the tile only.
    let needs_norms = metric != Metric::InnerProduct;
    let patch_column = |j: usize| ((j / 4) * 64 + tx * 4 + j % 4) as u64;
    let mut base_norm = [0.0f32; PATCH];
    if needs_norms {
        for (j, norm) in base_norm.iter_mut().enumerate() {
            if patch_column(j) < base_count {
                *norm = unsafe { params.base_norms.read(base_start + patch_column(j)) };
            }
        }
    }
    if FILTER {
        // First each pair's distance and whether it is within its query's bound (branch-free,
        // one copy per metric); then, in the few threads that keep a pair, the kept ones appended
        // by a loop over their bits, each distance picked from the registers by constant
        // indices. (With both phases unrolled the epilogue was 7 000 instructions and the
        // kernel 15 % slower than the written tile, H200 run 337; with the loop reading a
        // copy of the sums, the sums went to local memory and it took twice the time, run
        // 338.) A float compare keeps every pair whose rank is within the bound's, and ±0
        // beside the other zero: the selection orders the candidates by rank; a NaN bound
        // keeps nothing, and the query is searched again.
        let mut kept = 0u64;
        // The patch's columns inside the tile, as bits: eight compares, not 64.
        let mut columns_in = 0u32;
        unroll_patch!(j => {
            if patch_column(j) < base_count {
                columns_in |= 1 << j;
            }
        });
        // The 64 distances and compares once per metric, with no test of the metric (or of
        // the columns) per distance: a jump table a distance and a branch around each made
        // this epilogue some 1 700 instructions a warp (H200 run 342, `ncu`).
        macro_rules! within_bounds {
            ($metric:expr) => {
                unroll_patch!(i => {
                    let row = ((i / 4) * 64 + ty * 4 + i % 4) as u64;
                    if row < query_count {
                        let query = query_start + row;
                        let query_norm =
                            if needs_norms { unsafe { params.query_norms.read(query) } } else { 0.0 };
                        let bound = unsafe { target.bounds.read(query) };
                        unroll_patch!(j => {
                            sums[i][j] = tile_distance($metric, sums[i][j], query_norm, base_norm[j]);
                            let within = (sums[i][j] <= bound) as u64 & (columns_in >> j & 1) as u64;
                            kept |= within << (i * PATCH + j);
                        });
                    }
                })
            };
        }
        match metric {
            Metric::L2 => within_bounds!(Metric::L2),
            Metric::InnerProduct => within_bounds!(Metric::InnerProduct),
            Metric::Cosine => within_bounds!(Metric::Cosine),
        }
        while kept != 0 {
            let bit = kept.trailing_zeros() as usize;
            kept &= kept - 1;
            let mut distance = 0.0f32;
            unroll_patch!(i => {
                unroll_patch!(j => {
                    if bit == i * PATCH + j {
                        distance = sums[i][j];
                    }
                });
            });
            let (i, j) = (bit / PATCH, bit % PATCH);
            let row = ((i / 4) * 64 + ty * 4 + i % 4) as u64;
            let column = base_start + patch_column(j);
            unsafe { target.keep(query_start + row, distance.to_ordered(), column) };
        }
        return;
    }
    let out = params.out.offset(base_start);
    // (The tensor-core tile writes its pairs the same way, spelled out there too: one store
    // helper for both made this kernel 24 % slower, H200 run 200.)
    let whole_fours = out.address().is_multiple_of(16) && params.out_stride.is_multiple_of(4);
    for i in 0..PATCH {
        let row = ((i / 4) * 64 + ty * 4 + i % 4) as u64;
        if row >= query_count {
            continue;
        }
        let query = query_start + row;
        let query_norm = if needs_norms { unsafe { params.query_norms.read(query) } } else { 0.0 };
        for half in 0..2 {
            let mut distances = Four::default();
            for j in 0..4 {
                distances.0[j] =
                    tile_distance(metric, sums[i][half * 4 + j], query_norm, base_norm[half * 4 + j]);
            }
            let column = patch_column(half * 4);
            let at = query * params.out_stride + column;
            if whole_fours && column + 4 <= base_count {
                unsafe { (out.offset(at).as_ptr() as *mut Four).write(distances) };
            } else {
                for j in 0..4 {
                    if column + (j as u64) < base_count {
                        unsafe { out.write(at + j as u64, distances.0[j]) };
                    }
                }
            }
        }
    }
}

/// [`distance_tile`] of `f32` vectors.
///
/// # Safety
/// As [`distance_tile`].
pub unsafe fn distance_tile_f32(params: DistanceTileParams<f32>) {
    unsafe { distance_tile(params) }
}

/// [`distance_tile`] of binary16 vectors.
///
/// # Safety
/// As [`distance_tile`].
pub unsafe fn distance_tile_f16(params: DistanceTileParams<F16Bits>) {
    unsafe { distance_tile(params) }
}

/// [`distance_tile`] of bfloat16 vectors.
///
/// # Safety
/// As [`distance_tile`].
pub unsafe fn distance_tile_bf16(params: DistanceTileParams<Bf16Bits>) {
    unsafe { distance_tile(params) }
}

/// [`distance_filter`] of `f32` vectors.
///
/// # Safety
/// As [`distance_filter`].
// Inlined into its entry: left to LLVM, the unrolled epilogue made the body a call, with the
// parameters copied to the stack.
#[inline(always)]
pub unsafe fn distance_filter_f32(params: DistanceFilterParams<f32>) {
    unsafe { distance_filter(params) }
}

/// [`distance_filter`] of binary16 vectors.
///
/// # Safety
/// As [`distance_filter`].
// Inlined into its entry: left to LLVM, the unrolled epilogue made the body a call, with the
// parameters copied to the stack.
#[inline(always)]
pub unsafe fn distance_filter_f16(params: DistanceFilterParams<F16Bits>) {
    unsafe { distance_filter(params) }
}

/// [`distance_filter`] of bfloat16 vectors.
///
/// # Safety
/// As [`distance_filter`].
// Inlined into its entry: left to LLVM, the unrolled epilogue made the body a call, with the
// parameters copied to the stack.
#[inline(always)]
pub unsafe fn distance_filter_bf16(params: DistanceFilterParams<Bf16Bits>) {
    unsafe { distance_filter(params) }
}
