//! A tile of distances on the tensor cores: the product of [`tile`](super::tile)'s kernel
//! with TF32 inputs (`mma.sync.m16n8k8`, `f32` accumulation), finished by the same epilogue
//! ([`super::tile_distance`]). Its distances are approximations: the search keeps more
//! candidates than asked for and re-ranks them exactly ([`rerank`], [`rerank_candidates`]).
//!
//! A block computes [`TILE`]` × `[`TILE`] distances at a time with [`DISTANCE_THREADS`]
//! threads, [`TENSOR_DEPTH`] components a step. `f32` vectors are copied into the stages
//! asynchronously (`cp.async`, 16 bytes a copy where they start on 16 bytes), three steps
//! ahead (two for split TF32, whose stages are twice the size); each thread rounds its own
//! copies to TF32 in place, before the barrier that hands the stage to the warps. The `f32`
//! filter walks base tiles for vectors of up to 128 components (`walk`: the queries kept in
//! shared memory, the copies running on across tiles); the written tile, longer vectors,
//! split TF32 and 16-bit vectors (widened in registers a step ahead) take one tile a block
//! ([`tile`](super::tile)'s grid). Each of the 8 warps computes a 64 × 32 part of the tile
//! as 4 × 4 products of 16 × 8, each step 32 `mma` over its 16 components. The epilogue's
//! norms are in shared memory by then (copied with the stages, or the filter's read).
//!
//! The products take the components in an order of their own: an `mma`'s `k` index is any
//! order of the components, as long as A and B agree. Lane `4g + t` feeds `k = t` and
//! `k = t + 4` of both `mma` of a step, so it is given components `4t … 4t + 3` (`k = t`
//! and `t + 4` of the first `mma` are components `4t` and `4t + 1`, of the second `4t + 2`
//! and `4t + 3`). Both sets' stages hold each vector's 16 components side by side
//! (vector-major, as the vectors lie in memory, so that a copy lands as it is read): one
//! 16-byte shared load is a lane's B fragments of both `mma`, and two (rows `g` and `g + 8`)
//! are its A fragments of both (ptxas moves their words into a quad of registers for each
//! `mma`, run 370). A quarter of a warp reads 64 contiguous bytes, a warp 512: no conflict.
//! (The queries' stage interleaved rows `g` and `g + 8` before, one load an A fragment: the
//! same loads a step, but a 16-byte copy cannot write it; word copies were slower, run 371.)
//!
//! TF32 keeps 10 of `f32`'s 23 mantissa bits (each input within a relative `2^-11`), so a
//! dot product's error is up to about `2^-10 · ‖x‖ ‖y‖`: the bound the re-ranking proves its
//! candidates by (`host/src/engine/knn.rs`). Split TF32 (`SPLIT`, "3xTF32") also stages each
//! value's remainder `lo = tf32(x − hi)` and sums `lo·hi + hi·lo + hi·hi`: each value then
//! within `2^-22`, three times the products for a bound about a thousand times tighter.
//!
//! The filtered form ([`distance_filter_tf32`], `knn_distance_filter_tf32_<storage>`) runs
//! the TF32 product and writes no tile: as the `f32` filter ([`super::tile::FilterTarget`]),
//! it keeps each pair within its query's bound, here the bound widened by the most a TF32
//! distance can lie below the `f32` one ([`Margin`]), so that every pair the `f32` filter
//! would keep is kept; [`rerank_candidates`] then gives the pairs that can still be among
//! the nearest their exact distances.

use super::tile::{DISTANCE_THREADS, DistanceFilterParams, DistanceTileParams, FilterTarget, Four, TILE};
use super::{Bf16Bits, Component, F16Bits, Metric, tile_distance};
use crate::device::{self, SharedLayout, SharedRegion, SharedSlice};
use crate::key::Key;
use crate::params::GlobalPtr;
use crate::topk::bitonic::NO_INDEX;

/// Components per step (per shared-memory stage): two `mma` depths of 8, so that each
/// round trip of the prefetched loads and each barrier carry twice the products of the f32
/// kernel's depth.
pub const TENSOR_DEPTH: usize = 16;
/// 16-byte chunks of a vector per stage.
const CHUNKS: usize = TENSOR_DEPTH / 4;
/// Shared-memory stages of `f32` vectors, copied asynchronously: the copies of the next
/// `STAGES − 1` steps in flight while one step's products run. (16-bit vectors, widened in
/// registers, use two of them.)
const STAGES: usize = 4;
/// The same for split TF32, whose stages are twice the size (two blocks a multiprocessor
/// still fit).
const SPLIT_STAGES: usize = 3;
/// Steps of the queries that a block of the walking filter ([`walks`]) keeps in shared
/// memory for its whole walk: vectors of up to 128 components (64 KB of queries; two blocks
/// a multiprocessor still fit on sm_90).
pub const RESIDENT_STEPS: usize = 8;
/// Rows (queries) of a warp's part of the tile.
const WARP_ROWS: usize = 64;
/// Columns (base vectors) of a warp's part.
const WARP_COLUMNS: usize = 32;
/// 16-row products per warp part.
const M_TILES: usize = WARP_ROWS / 16;
/// 8-column products per warp part.
const N_TILES: usize = WARP_COLUMNS / 8;
/// Vectors of a tile one thread stages per step (of each set): two (base: 64 apart; queries:
/// rows `g` and `g + 8` of a 16-row block).
const STAGED_VECTORS: usize = TILE as usize * CHUNKS / DISTANCE_THREADS as usize;
/// 16-byte words of one stage of one set.
const STAGE_FOURS: usize = TILE as usize * CHUNKS;
/// The second vector a thread stages, after its first (`thread / CHUNKS`): a quarter of a
/// warp writes 64 contiguous bytes of each stage.
const SECOND: u64 = (DISTANCE_THREADS as usize / CHUNKS) as u64;
const _: () = assert!(
    (TILE as usize / WARP_ROWS) * (TILE as usize / WARP_COLUMNS) * 32 == DISTANCE_THREADS as usize,
    "the warps' parts cover the tile"
);
const _: () = assert!(M_TILES == 4 && N_TILES == 4 && STAGED_VECTORS == 2, "the unrolled lists below");

/// Runs `$body` for `$i` in the literal list, unrolled in the source (so that the
/// accumulators are indexed by constants and stay in registers).
macro_rules! unroll {
    ([$($n:literal)*] $i:ident => $body:block) => {{
        $({
            let $i: usize = $n;
            $body
        })*
    }};
}

/// The shared memory of the kernels: both tiles' stages as TF32 bits (module docs), and the
/// filter's rows and columns.
#[derive(Clone, Copy, Debug)]
pub struct Tf32TileLayout {
    /// The queries' stages: [`Tf32TileLayout::stages`]` × TILE × TENSOR_DEPTH` words,
    /// vector-major (module docs).
    pub queries: SharedRegion<u32>,
    /// The base vectors' stages, alike.
    pub base: SharedRegion<u32>,
    /// Split TF32: the queries' remainders (`x − hi`, rounded to TF32), alike.
    pub queries_low: SharedRegion<u32>,
    /// Split TF32: the base vectors' remainders.
    pub base_low: SharedRegion<u32>,
    /// Each row's squared norm, and for the filter its widened bound, each column's squared
    /// norm ([`TILE`] each), read at the block's start.
    pub row_norms: SharedRegion<f32>,
    /// (See `row_norms`.)
    pub row_bounds: SharedRegion<f32>,
    /// (See `row_norms`.)
    pub column_norms: SharedRegion<f32>,
    /// Bytes to ask for at launch.
    pub bytes: usize,
}

impl Tf32TileLayout {
    /// Shared-memory stages of one TF32 product per pair (`split` false) or three.
    pub const fn stages(split: bool) -> usize {
        if split { SPLIT_STAGES } else { STAGES }
    }

    /// The layout of one TF32 product per pair (`split` false) or three, of the tile
    /// (`filter` false) or the filter, for the kernels of one tile a block.
    pub const fn new(split: bool, filter: bool) -> Self {
        let stages = Self::stages(split);
        Self::with((stages, stages), split, filter, 1)
    }

    /// The layout of the walking `f32` filter ([`walks`]): [`RESIDENT_STEPS`] stages of
    /// queries, four (`STAGES`) of the base and as many buffers of column norms.
    pub const fn walking() -> Self {
        Self::with((RESIDENT_STEPS, STAGES), false, true, STAGES)
    }

    const fn with(
        (query_stages, base_stages): (usize, usize),
        split: bool,
        filter: bool,
        column_buffers: usize,
    ) -> Self {
        let stage_words = TENSOR_DEPTH * TILE as usize;
        let split_words = if split { stage_words } else { 0 };
        let bounds = if filter { TILE as usize } else { 0 };
        let (layout, queries) = SharedLayout::new().push::<u32>(query_stages * stage_words);
        let (layout, base) = layout.push::<u32>(base_stages * stage_words);
        let (layout, queries_low) = layout.push::<u32>(query_stages * split_words);
        let (layout, base_low) = layout.push::<u32>(base_stages * split_words);
        let (layout, row_norms) = layout.push::<f32>(TILE as usize);
        let (layout, row_bounds) = layout.push::<f32>(bounds);
        let (layout, column_norms) = layout.push::<f32>(column_buffers * TILE as usize);
        Self {
            queries,
            base,
            queries_low,
            base_low,
            row_norms,
            row_bounds,
            column_norms,
            bytes: layout.bytes(),
        }
    }
}

/// The grid of the walking filter ([`walks`]) for `query_count × base_count` distances
/// on a device that holds `slots` of their blocks at once (multiprocessors times blocks a
/// multiprocessor): `(width, query tiles)`, each query tile's base tiles shared out among
/// `width` blocks. The width is the one whose busiest block has the fewest tiles, counting
/// the waves the grid takes (the smallest such: the fewest starts); e.g. 8 query tiles of
/// 7 813 base tiles on 264 slots: 33 blocks a query tile, 237 tiles each, one wave.
///
/// ```
/// use gpu_select_kernels::knn::tensor::walk_grid;
/// assert_eq!(walk_grid(1024, 1_000_000, 264), (33, 8));
/// assert_eq!(walk_grid(100_000, 1_000_000, 264), (85, 782)); // 252 waves of 92 tiles
/// ```
pub fn walk_grid(query_count: u64, base_count: u64, slots: u64) -> (u64, u64) {
    let (base_tiles, query_tiles) = super::tile::distance_grid(query_count, base_count);
    let slots = slots.max(1);
    let (mut best, mut best_width) = (u64::MAX, 1);
    for width in 1..=base_tiles.min(slots) {
        let busiest = (query_tiles * width).div_ceil(slots) * base_tiles.div_ceil(width);
        if busiest < best {
            (best, best_width) = (busiest, width);
        }
    }
    (best_width, query_tiles)
}

/// Four components of one vector from component `first` on, widened to `f32`: zeros past
/// the dimension or past the tile's last vector (`count`); one 16-byte load when `aligned`
/// (`f32` vectors starting on 16 bytes) and all four are there.
///
/// # Safety
/// Every component named inside `vectors`.
#[inline(always)]
unsafe fn load_chunk<S: Component>(
    vectors: GlobalPtr<S>,
    (stride, count, dim): (u64, u64, u64),
    vector: u64,
    first: u64,
    aligned: bool,
) -> Four {
    let mut values = Four::default();
    if vector < count {
        let at = vectors.offset(vector * stride + first);
        if aligned && first + 4 <= dim {
            // `S` is `f32` here (4 bytes, the only such component). One `ld.global.v4`: a
            // plain read was split into four generic loads of a word (H200 run 345, `ncu`).
            let words = unsafe { device::load_global_v4(at.as_ptr() as *const u32) };
            return Four(words.map(f32::from_bits));
        }
        for (j, value) in values.0.iter_mut().enumerate() {
            if first + (j as u64) < dim {
                *value = unsafe { at.read(j as u64) }.to_f32();
            }
        }
    }
    values
}

/// Starts the asynchronous copy of component `component` of `f32` vector `vector` into one
/// word of shared memory: zero past the dimension or past the last vector (`count`), which
/// is not read.
///
/// # Safety
/// Every component named inside `vectors`, which is a valid address; `destination` not
/// accessed until the copy's group is complete.
#[inline(always)]
unsafe fn copy_word(
    destination: *mut u32,
    vectors: GlobalPtr<f32>,
    (stride, count): (u64, u64),
    vector: u64,
    component: u64,
    dim: u64,
) {
    let there = vector < count && component < dim;
    // A component past the vectors reads nothing; its copy names the first.
    let at = if there { vectors.offset(vector * stride + component) } else { vectors };
    unsafe { device::copy_async_4(destination, at.as_ptr() as *const u32, if there { 4 } else { 0 }) }
}

/// Starts the asynchronous copy of squared norm `edge` of `norms` (of `count`) into value
/// `at` of `region`: zero past `count`, and where `needed` is false (the inner product,
/// whose norms may be null), stored at once.
///
/// # Safety
/// `at` inside `region`, not accessed until the copy's group is complete; the norms named
/// inside `norms` when `needed`.
#[inline(always)]
unsafe fn copy_norm(
    region: SharedSlice<f32>,
    at: usize,
    (norms, count): (GlobalPtr<f32>, u64),
    edge: u64,
    needed: bool,
) {
    unsafe {
        if needed {
            copy_word(region.address(at) as *mut u32, norms, (1, count), edge, 0, 1);
        } else {
            region.store(at, 0.0);
        }
    }
}

/// Row `row` of a filter's query tile (of `query_count` queries from `query_start`): its
/// query's squared norm and bound widened by its margin; 0 and NaN (nothing kept) past the
/// queries.
///
/// # Safety
/// The queries' norms and bounds named inside `query_norms` and the target's bounds.
#[inline(always)]
unsafe fn filter_row(
    (query_norms, target, margin): (GlobalPtr<f32>, &FilterTarget, Margin),
    (query_start, query_count): (u64, u64),
    row: u64,
) -> (f32, f32) {
    if row >= query_count {
        return (0.0, f32::NAN);
    }
    let query = query_start + row;
    let norm = unsafe { query_norms.read(query) };
    (norm, margin.widen(unsafe { target.bounds.read(query) }, norm, 1.0))
}

/// Starts the asynchronous copy of four components of one `f32` vector from component
/// `first` on into `destination` (16 bytes of shared memory), as [`load_chunk`] reads them:
/// zeros past the dimension or past the tile's last vector (`count`), which are not read;
/// one 16-byte copy when `aligned`, else four of a word.
///
/// # Safety
/// Every component named inside `vectors`, the tile's first vector among them;
/// `destination` 16-byte aligned, not accessed until the copy's group is complete.
#[inline(always)]
unsafe fn copy_chunk(
    destination: *mut u32,
    vectors: GlobalPtr<f32>,
    (stride, count, dim): (u64, u64, u64),
    vector: u64,
    first: u64,
    aligned: bool,
) {
    let present = if vector < count { dim.saturating_sub(first).min(4) } else { 0 };
    // A vector past the tile reads nothing; its copies name the tile's first component.
    let at = if present > 0 { vectors.offset(vector * stride + first) } else { vectors };
    let source = at.as_ptr() as *const u32;
    unsafe {
        if aligned {
            device::copy_async_16(destination, source, present as u32 * 4);
        } else {
            for j in 0..4 {
                let there = (j as u64) < present;
                let word = if there { source.add(j) } else { source };
                device::copy_async_4(destination.add(j), word, if there { 4 } else { 0 });
            }
        }
    }
}

/// Four TF32 values (their bits), one 16-byte shared access.
#[repr(C, align(16))]
#[derive(Clone, Copy, Debug, Default)]
struct Tf32Four([u32; 4]);

/// Two neighbouring distances, one 8-byte access.
#[repr(C, align(8))]
#[derive(Clone, Copy, Debug, Default)]
struct Two([f32; 2]);

/// How far a TF32 distance may lie below the `f32` distance of the same pair, for a query of
/// squared norm `n`: `per_length · √n + per_norm · n + constant`, every term non-negative
/// and every operation rounded up (the host's `KnnPrecision::error_bound`, with the base's
/// largest norm, in the form the kernels evaluate).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Margin {
    /// Times the query's length.
    pub per_length: f32,
    /// Times the query's squared norm.
    pub per_norm: f32,
    /// Added.
    pub constant: f32,
    /// Keeps the struct free of implicit padding (set to 0).
    pub reserved: f32,
}

impl Margin {
    /// `value + times · margin(norm)`, rounded up (NaN where either is NaN; infinite where
    /// the margin is).
    #[inline(always)]
    pub fn widen(&self, value: f32, norm: f32, times: f32) -> f32 {
        let margin = device::fma_up_f32(
            self.per_length,
            device::sqrt_up_f32(norm),
            device::fma_up_f32(self.per_norm, norm, self.constant),
        );
        device::fma_up_f32(times, margin, value)
    }
}

/// Parameters of `knn_distance_filter_tf32_<storage>`: the `f32` filter's, and the margin
/// its bounds are widened by.
#[repr(C)]
#[derive(Debug)]
pub struct Tf32FilterParams<S> {
    /// The product and where its candidates go (the query norms are read for the margin
    /// under every metric).
    pub filter: DistanceFilterParams<S>,
    /// Added to each query's bound.
    pub margin: Margin,
}

impl<S> Clone for Tf32FilterParams<S> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<S> Copy for Tf32FilterParams<S> {}

/// The `knn_distance_tile_tf32_<storage>` kernel (module docs).
///
/// # Safety
/// As [`super::tile::distance_tile`], with [`Tf32TileLayout::bytes`] of shared memory.
#[inline(always)]
pub unsafe fn distance_tile_tf32<S: Component, const SPLIT: bool>(params: DistanceTileParams<S>) {
    unsafe { tf32_product::<S, SPLIT, false>(params, FilterTarget::NONE, Margin::default()) }
}

/// The `knn_distance_filter_tf32_<storage>` kernel (module docs): [`distance_tile_tf32`]'s
/// product, each query's pairs within its bound widened by `params.margin` kept as
/// candidates (their TF32 distances' ranks and base indices).
///
/// # Safety
/// As [`super::tile::distance_filter`], with [`Tf32TileLayout::bytes`] of shared memory and
/// the queries' norms under every metric.
#[inline(always)]
pub unsafe fn distance_filter_tf32<S: Component>(params: Tf32FilterParams<S>) {
    unsafe { tf32_product::<S, false, true>(params.filter.tile, params.filter.target, params.margin) }
}

/// Where a warp's part of the tile lies, and which entries of its fragments lane
/// `4g + t` holds.
#[derive(Clone, Copy)]
struct WarpPart {
    /// The part's first row (query) in the tile.
    row: usize,
    /// The part's first column (base vector) in the tile.
    column: usize,
    g: usize,
    t: usize,
}

impl WarpPart {
    #[inline(always)]
    fn of(thread: usize) -> Self {
        let (warp, lane) = (thread / 32, thread % 32);
        Self {
            row: (warp / (TILE as usize / WARP_COLUMNS)) * WARP_ROWS,
            column: (warp % (TILE as usize / WARP_COLUMNS)) * WARP_COLUMNS,
            g: lane / 4,
            t: lane % 4,
        }
    }

    /// The tile's column of entries `2t` and `2t + 1` of product column `n`.
    #[inline(always)]
    fn column_of(self, n: usize) -> u64 {
        (self.column + n * 8 + 2 * self.t) as u64
    }

    /// The tile's row of entries `2 · half` and `2 · half + 1` of product row `m`.
    #[inline(always)]
    fn row_of(self, m: usize, half: usize) -> u64 {
        (self.row + m * 16 + self.g + 8 * half) as u64
    }
}

/// A lane's accumulators: product row, product column, fragment entry.
type Sums = [[[f32; 4]; N_TILES]; M_TILES];

/// A set's stages, as 16-byte words.
type Fours = SharedSlice<Tf32Four>;

/// Both sets' stages are vector-major: chunk `chunk` (components `4 · chunk … 4 · chunk + 3`
/// of the step) of vector `vector` is 16-byte word `vector · CHUNKS + chunk` of its stage.
#[inline(always)]
fn stage_at(stage: usize, vector: usize, chunk: usize) -> usize {
    stage * STAGE_FOURS + vector * CHUNKS + chunk
}

/// One step's products from the queries' stage `query_stage` and the base's `base_stage`:
/// B's components for the warp's columns (both `mma` depths in one load), then a row tile at
/// a time A's rows g and g + 8 (both depths in two loads), each product into its
/// accumulator (an accumulator's two products 16 apart): with SPLIT the small terms first
/// (lo·hi, hi·lo), then hi·hi.
///
/// # Safety
/// Both stages written and handed over by a barrier.
// Fragment and accumulator arrays are indexed by position (row tile, column tile), as the
// PTX ISA lays them out: plain ranges read best here.
#[allow(clippy::needless_range_loop)]
#[inline(always)]
unsafe fn multiply<const SPLIT: bool>(
    (query_words, query_lows): (Fours, Fours),
    (base_words, base_lows): (Fours, Fours),
    (query_stage, base_stage): (usize, usize),
    part: WarpPart,
    sums: &mut Sums,
) {
    let (g, t) = (part.g, part.t);
    let mut b = [Tf32Four::default(); N_TILES];
    let mut b_low = [Tf32Four::default(); N_TILES];
    for n in 0..N_TILES {
        let at = stage_at(base_stage, part.column + n * 8 + g, t);
        b[n] = unsafe { base_words.load(at) };
        if SPLIT {
            b_low[n] = unsafe { base_lows.load(at) };
        }
    }
    for m in 0..M_TILES {
        let rows =
            [part.row + m * 16 + g, part.row + m * 16 + g + 8].map(|row| stage_at(query_stage, row, t));
        let x = rows.map(|at| unsafe { query_words.load(at) }.0);
        let x_low = if SPLIT { rows.map(|at| unsafe { query_lows.load(at) }.0) } else { [[0; 4]; 2] };
        for depth in 0..2 {
            let (k0, k1) = (2 * depth, 2 * depth + 1);
            // Lane (g, t)'s A fragment: rows g and g + 8 at k = t (component 4t + 2·depth)
            // and k = t + 4 (the next component).
            let a = [x[0][k0], x[1][k0], x[0][k1], x[1][k1]];
            if SPLIT {
                let a_low = [x_low[0][k0], x_low[1][k0], x_low[0][k1], x_low[1][k1]];
                for n in 0..N_TILES {
                    let (bn, bn_low) = ([b[n].0[k0], b[n].0[k1]], [b_low[n].0[k0], b_low[n].0[k1]]);
                    sums[m][n] = unsafe { device::mma_tf32_m16n8k8(a_low, bn, sums[m][n]) };
                    sums[m][n] = unsafe { device::mma_tf32_m16n8k8(a, bn_low, sums[m][n]) };
                }
            }
            for n in 0..N_TILES {
                sums[m][n] = unsafe { device::mma_tf32_m16n8k8(a, [b[n].0[k0], b[n].0[k1]], sums[m][n]) };
            }
        }
    }
}

/// Rounds this thread's `f32` chunks of stage `stage` of a set (vectors `staged`, chunk
/// `chunk`) to TF32 in place, once its copies have landed.
///
/// # Safety
/// This thread's copies into them complete; no other thread accesses them until a barrier.
#[inline(always)]
unsafe fn round_own(words: Fours, stage: usize, staged: [u64; STAGED_VECTORS], chunk: usize) {
    unroll!([0 1] i => {
        let at = stage_at(stage, staged[i] as usize, chunk);
        let values = unsafe { words.load(at) }.0;
        unsafe { words.store(at, Tf32Four(values.map(|bits| device::f32_to_tf32(f32::from_bits(bits))))) };
    });
}

/// The rows and columns a tile's epilogue reads from shared memory: each row's squared norm
/// and (filter) widened bound, and the columns' squared norms from `columns_from` on.
#[derive(Clone, Copy)]
struct Edges {
    row_norms: SharedSlice<f32>,
    row_bounds: SharedSlice<f32>,
    column_norms: SharedSlice<f32>,
    columns_from: usize,
}

impl Edges {
    /// The squared norms of the lane's columns (product column `n`, entry `j`).
    ///
    /// # Safety
    /// The columns' norms written and handed over by a barrier.
    #[inline(always)]
    unsafe fn base_norms(self, part: WarpPart) -> [[f32; 2]; N_TILES] {
        let mut norms = [[0.0f32; 2]; N_TILES];
        unroll!([0 1 2 3] n => {
            unroll!([0 1] j => {
                norms[n][j] = unsafe { self.column_norms.load(self.columns_from + part.column_of(n) as usize + j) };
            });
        });
        norms
    }
}

/// The written tile's epilogue: lane (g, t) holds rows g and g + 8, columns 2t and 2t + 1
/// of each product; each distance ([`tile_distance`]) written to `out` (the tile's first
/// column; row `query` at `query · out_stride`), two neighbours a store where they lie on
/// 8 bytes.
///
/// # Safety
/// The edges' norms handed over by a barrier; `out` holds the tile's rows and columns.
// Accumulator arrays are indexed by position, as in `multiply`.
#[allow(clippy::needless_range_loop)]
#[inline(always)]
unsafe fn write_tile(
    metric: Metric,
    part: WarpPart,
    sums: &Sums,
    edges: Edges,
    (out, out_stride): (GlobalPtr<f32>, u64),
    (query_start, query_count): (u64, u64),
    base_count: u64,
) {
    let base_norm = unsafe { edges.base_norms(part) };
    // (As the f32 tile writes its fours, spelled out in each: one store helper for both made
    // the f32 tile 24 % slower, H200 run 200.)
    let whole_pairs = out.address().is_multiple_of(8) && out_stride.is_multiple_of(2);
    for m in 0..M_TILES {
        for half in 0..2 {
            let row = part.row_of(m, half);
            if row >= query_count {
                continue;
            }
            let query = query_start + row;
            let query_norm = unsafe { edges.row_norms.load(row as usize) };
            for n in 0..N_TILES {
                let mut distances = Two::default();
                for j in 0..2 {
                    distances.0[j] =
                        tile_distance(metric, sums[m][n][2 * half + j], query_norm, base_norm[n][j]);
                }
                let column = part.column_of(n);
                let at = query * out_stride + column;
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

/// The filter's epilogue: as the f32 filter's (`super::tile`), each pair's distance and
/// whether it is within its query's widened bound, branch-free and once per metric, as bits
/// (row part `2m + half`, column part `2n + j`); then the kept ones appended to `target` by
/// a loop over their bits, each distance picked from the registers by constant indices.
///
/// # Safety
/// The edges' norms and bounds handed over by a barrier; the tile's rows are rows of
/// `target`.
#[inline(always)]
unsafe fn keep_within_bounds(
    metric: Metric,
    part: WarpPart,
    sums: &mut Sums,
    edges: Edges,
    target: &FilterTarget,
    (query_start, query_count): (u64, u64),
    (base_start, base_count): (u64, u64),
) {
    let base_norm = unsafe { edges.base_norms(part) };
    let mut columns_in = 0u32;
    unroll!([0 1 2 3] n => {
        unroll!([0 1] j => {
            if part.column_of(n) + (j as u64) < base_count {
                columns_in |= 1 << (2 * n + j);
            }
        });
    });
    let mut kept = 0u64;
    macro_rules! within_bounds {
        ($metric:expr) => {
            unroll!([0 1 2 3] m => {
                unroll!([0 1] half => {
                    let row = part.row_of(m, half);
                    if row < query_count {
                        let query_norm = unsafe { edges.row_norms.load(row as usize) };
                        let bound = unsafe { edges.row_bounds.load(row as usize) };
                        unroll!([0 1 2 3] n => {
                            unroll!([0 1] j => {
                                let value = &mut sums[m][n][2 * half + j];
                                *value = tile_distance($metric, *value, query_norm, base_norm[n][j]);
                                let within = (*value <= bound) as u64 & (columns_in >> (2 * n + j) & 1) as u64;
                                kept |= within << (16 * m + 8 * half + 2 * n + j);
                            });
                        });
                    }
                });
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
        unroll!([0 1 2 3] m => {
            unroll!([0 1 2 3] n => {
                unroll!([0 1 2 3] e => {
                    if bit == 16 * m + 8 * (e / 2) + 2 * n + e % 2 {
                        distance = sums[m][n][e];
                    }
                });
            });
        });
        let (m, half, n, j) = (bit / 16, bit / 8 % 2, bit / 2 % 4, bit % 2);
        let row = part.row_of(m, half);
        unsafe {
            target.keep(query_start + row, distance.to_ordered(), base_start + part.column_of(n) + j as u64)
        };
    }
}

/// The product of the TF32 kernels of one tile a block (16-bit vectors, split TF32); the
/// epilogue writes the tile or, `FILTER`, keeps candidates.
///
/// # Safety
/// As [`distance_tile_tf32`] or [`distance_filter_tf32`].
#[inline(always)]
unsafe fn tf32_product<S: Component, const SPLIT: bool, const FILTER: bool>(
    params: DistanceTileParams<S>,
    target: FilterTarget,
    margin: Margin,
) {
    let metric = Metric::from_raw(params.metric);
    let thread = device::thread_idx_x() as usize;
    let part = WarpPart::of(thread);
    // The grid's own order (base tiles fastest): taking all query tiles of a base tile
    // together, as the f32 tile does (`tile_origin`), measured 5 % slower here (run 178).
    let query_start = device::block_idx_y() as u64 * TILE;
    let base_start = device::block_idx_x() as u64 * TILE;
    let queries = params.queries.offset(query_start * params.query_stride);
    let base = params.base.offset(base_start * params.base_stride);
    let query_count = params.query_count - query_start.min(params.query_count);
    let base_count = params.base_count - base_start.min(params.base_count);

    let layout = Tf32TileLayout::new(SPLIT, FILTER);
    let fours = |region: SharedRegion<u32>| unsafe { region.cast::<Tf32Four>().bind() };
    let (query_words, base_words) = (fours(layout.queries), fours(layout.base));
    let (query_lows, base_lows) = (fours(layout.queries_low), fours(layout.base_low));

    // This thread stages chunk `staged_chunk` of vectors `staged_vector` and `staged_vector +
    // 64` of both sets.
    let (staged_vector, staged_chunk) = ((thread / CHUNKS) as u64, thread % CHUNKS);
    let staged = [staged_vector, staged_vector + SECOND];
    // 16-byte loads and copies where every vector of both sets starts on 16 bytes.
    let vectors_aligned = size_of::<S>() == 4
        && queries.address().is_multiple_of(16)
        && base.address().is_multiple_of(16)
        && params.query_stride.is_multiple_of(4)
        && params.base_stride.is_multiple_of(4);
    let sets = [(queries, params.query_stride, query_count), (base, params.base_stride, base_count)];
    let first_of = |step: u64| step * TENSOR_DEPTH as u64 + (staged_chunk * 4) as u64;
    // TF32 bits of `values` and, with SPLIT, of their remainders (exact in f32: hi holds
    // x's leading bits), rounded to TF32.
    let round = |values: [f32; 4]| {
        let high = values.map(device::f32_to_tf32);
        let mut low = [0u32; 4];
        if SPLIT {
            for j in 0..4 {
                low[j] = device::f32_to_tf32(values[j] - f32::from_bits(high[j]));
            }
        }
        (Tf32Four(high), Tf32Four(low))
    };
    // This thread's four chunks of a stage (queries, then base), rounded and stored.
    let stage_store = |stage: usize, chunks: [Four; 4]| unsafe {
        for (i, chunk) in chunks.into_iter().enumerate() {
            let (words, lows) = if i < 2 { (query_words, query_lows) } else { (base_words, base_lows) };
            let at = stage_at(stage, staged[i % 2] as usize, staged_chunk);
            let (high, low) = round(chunk.0);
            words.store(at, high);
            if SPLIT {
                lows.store(at, low);
            }
        }
    };

    // The filter's rows and columns, read once while the first stages load: each row's
    // squared norm and bound widened by its margin, each column's squared norm.
    let needs_norms = metric != Metric::InnerProduct;
    let edges = unsafe {
        Edges {
            row_norms: layout.row_norms.bind(),
            row_bounds: layout.row_bounds.bind(),
            column_norms: layout.column_norms.bind(),
            columns_from: 0,
        }
    };
    // (A `move` closure: borrowing `edges` put it on a stack frame.)
    let read_edges = move || {
        if FILTER {
            let edge = thread % TILE as usize;
            if thread < TILE as usize {
                let rows = (query_start, query_count);
                let (norm, bound) =
                    unsafe { filter_row((params.query_norms, &target, margin), rows, edge as u64) };
                unsafe { (edges.row_norms.store(edge, norm), edges.row_bounds.store(edge, bound)) };
            } else {
                let mut norm = 0.0;
                if needs_norms && (edge as u64) < base_count {
                    norm = unsafe { params.base_norms.read(base_start + edge as u64) };
                }
                unsafe { edges.column_norms.store(edge, norm) };
            }
        }
    };

    let mut sums: Sums = Default::default();
    let sets_of = |stage: usize| ((query_words, query_lows), (base_words, base_lows), (stage, stage));

    // The written tile's norms, copied asynchronously as their own group before the stages'
    // (their reads in the epilogue waited on memory: 11 % of the tile's stall samples, H200
    // run 370): zeros past the tile's vectors, and under the inner product. (Straight-line
    // code: as a closure beside the others it put their captures on a stack frame.)
    if !FILTER {
        let edge = thread % TILE as usize;
        unsafe {
            if thread < TILE as usize {
                let rows = (params.query_norms.offset(query_start), query_count);
                copy_norm(edges.row_norms, edge, rows, edge as u64, needs_norms);
            } else {
                let columns = (params.base_norms.offset(base_start), base_count);
                copy_norm(edges.column_norms, edge, columns, edge as u64, needs_norms);
            }
            device::copy_async_commit();
        }
    }

    let steps = params.dim.div_ceil(TENSOR_DEPTH as u64);
    if size_of::<S>() == 4 {
        // `f32` vectors (split): the stages copied asynchronously, `stages − 1` steps ahead
        // of the products, as in `walk`. Each thread copies its chunks as they are,
        // waits for them, and splits them into TF32 values and remainders in place before
        // the barrier that hands them to the warps.
        let stages = Tf32TileLayout::stages(SPLIT);
        let copy = |step: u64| unsafe {
            if step < steps {
                let stage = (step % stages as u64) as usize;
                for (i, &(vectors, stride, count)) in [sets[0], sets[0], sets[1], sets[1]].iter().enumerate()
                {
                    let words = if i < 2 { query_words } else { base_words };
                    let destination = words.address(stage_at(stage, staged[i % 2] as usize, staged_chunk));
                    let vectors = GlobalPtr::<f32>::from_address(vectors.address());
                    copy_chunk(
                        destination as *mut u32,
                        vectors,
                        (stride, count, params.dim),
                        staged[i % 2],
                        first_of(step),
                        vectors_aligned,
                    );
                }
            }
            device::copy_async_commit();
        };
        for step in 0..stages as u64 - 1 {
            copy(step);
        }
        read_edges();
        for step in 0..steps {
            let stage = (step % stages as u64) as usize;
            unsafe {
                if SPLIT {
                    device::copy_async_wait::<{ SPLIT_STAGES as u32 - 2 }>();
                } else {
                    device::copy_async_wait::<{ STAGES as u32 - 2 }>();
                }
                let own = [0, 1, 2, 3].map(|i| {
                    let words = if i < 2 { query_words } else { base_words };
                    Four(
                        words
                            .load(stage_at(stage, staged[i % 2] as usize, staged_chunk))
                            .0
                            .map(f32::from_bits),
                    )
                });
                stage_store(stage, own);
                device::sync_threads();
            }
            // Stage `step + stages − 1`'s slot held step − 1's, which every warp is done with.
            copy(step + stages as u64 - 1);
            let (queries, base, stages) = sets_of(stage);
            unsafe { multiply::<SPLIT>(queries, base, stages, part, &mut sums) };
        }
    } else {
        // 16-bit vectors, widened as they are loaded: the next step's chunks in registers
        // while this one's products run, two stages.
        let stage_load = |step: u64| unsafe {
            let [(qs, q_stride, q_count), (bs, b_stride, b_count)] = sets;
            let load = |vectors, stride, count, vector| {
                load_chunk(vectors, (stride, count, params.dim), vector, first_of(step), vectors_aligned)
            };
            [
                load(qs, q_stride, q_count, staged[0]),
                load(qs, q_stride, q_count, staged[1]),
                load(bs, b_stride, b_count, staged[0]),
                load(bs, b_stride, b_count, staged[1]),
            ]
        };
        stage_store(0, stage_load(0));
        read_edges();
        unsafe {
            device::copy_async_wait::<0>();
            device::sync_threads();
        }
        for step in 0..steps {
            let stage = (step % 2) as usize;
            let next = if step + 1 < steps { Some(stage_load(step + 1)) } else { None };
            let (queries, base, stages) = sets_of(stage);
            unsafe { multiply::<SPLIT>(queries, base, stages, part, &mut sums) };
            if let Some(loaded) = next {
                stage_store(1 - stage, loaded);
            }
            unsafe { device::sync_threads() };
        }
    }

    unsafe {
        if FILTER {
            let tile = ((query_start, query_count), (base_start, base_count));
            keep_within_bounds(metric, part, &mut sums, edges, &target, tile.0, tile.1);
        } else {
            let out = (params.out.offset(base_start), params.out_stride);
            write_tile(metric, part, &sums, edges, out, (query_start, query_count), base_count);
        }
    }
}

/// The `f32` TF32 filter: vectors of up to [`RESIDENT_STEPS`] steps walk ([`walk`]),
/// longer ones take one tile a block ([`tile`](super::tile)'s grid), as the other TF32
/// kernels.
///
/// # Safety
/// As [`distance_filter_tf32`]; for vectors of up to [`RESIDENT_STEPS`] steps as [`walk`],
/// else with [`Tf32TileLayout::new`]`(false, true).bytes` of shared memory.
#[inline(always)]
unsafe fn filter_tf32_f32(params: Tf32FilterParams<f32>) {
    unsafe {
        if walks(params.filter.tile.dim) {
            walk(params)
        } else {
            tf32_product::<f32, false, true>(params.filter.tile, params.filter.target, params.margin)
        }
    }
}

/// Whether the `f32` TF32 filter walks base tiles for vectors of `dim` components (its
/// queries then fit shared memory for the whole walk), launched on [`walk_grid`]'s grid
/// with [`Tf32TileLayout::walking`]'s shared memory.
pub const fn walks(dim: u64) -> bool {
    dim <= (RESIDENT_STEPS * TENSOR_DEPTH) as u64
}

/// The walk of the `f32` TF32 filter: each block takes query tile `blockIdx.y` and walks
/// base tiles `blockIdx.x`, `+ gridDim.x`, … ([`walk_grid`]), keeping each tile's pairs
/// within their queries' widened bounds. Its queries stay in shared memory for the whole
/// walk (copied and rounded to TF32 once: only the base is copied a step), and its copies
/// run on across tile boundaries: the next tile's first steps land while this one's
/// epilogue runs, and a block pays its first copies' latency once. Each base tile's column
/// norms are copied with its first step into one of `STAGES` buffers (so that a buffer is
/// rewritten only after every warp has passed the epilogue that read it, however few steps
/// a tile has). (The written tile walked alike was slower, H200 run 375: it keeps one tile a
/// block.)
///
/// # Safety
/// As [`distance_filter_tf32`], with [`Tf32TileLayout::walking`]`().bytes` of shared memory,
/// any `gridDim.x`, vectors of up to [`RESIDENT_STEPS`] steps, and a block's tiles times the
/// steps below 2^32 (a base in device memory).
#[inline(always)]
unsafe fn walk(filter: Tf32FilterParams<f32>) {
    let (params, target, margin) = (filter.filter.tile, filter.filter.target, filter.margin);
    let metric = Metric::from_raw(params.metric);
    let thread = device::thread_idx_x() as usize;
    let part = WarpPart::of(thread);
    let query_start = device::block_idx_y() as u64 * TILE;
    let queries = params.queries.offset(query_start * params.query_stride);
    let query_count = params.query_count - query_start.min(params.query_count);
    let (first_tile, tile_stride) = (device::block_idx_x(), device::grid_dim_x());
    let base_tiles = params.base_count.div_ceil(TILE);
    if first_tile as u64 >= base_tiles {
        return;
    }
    // The walk's steps, counted from 0: step `q` is step `q % steps` of the block's tile
    // `q / steps`, in stage `q % STAGES` (32-bit: the caller's bound; at least one step, so
    // that no division has a panic path).
    let steps = (params.dim.div_ceil(TENSOR_DEPTH as u64) as u32).max(1);
    let tiles = (base_tiles - first_tile as u64).div_ceil(tile_stride as u64) as u32;
    let walk_steps = tiles * steps;
    let tile_start = |tile: u32| (first_tile + tile * tile_stride) as u64 * TILE;

    let layout = Tf32TileLayout::walking();
    let fours = |region: SharedRegion<u32>| unsafe { region.cast::<Tf32Four>().bind() };
    let (query_words, base_words) = (fours(layout.queries), fours(layout.base));
    let no_lows = fours(layout.queries_low);
    let (row_norms, row_bounds, column_norms) =
        unsafe { (layout.row_norms.bind(), layout.row_bounds.bind(), layout.column_norms.bind()) };
    let (staged_vector, staged_chunk) = ((thread / CHUNKS) as u64, thread % CHUNKS);
    let staged = [staged_vector, staged_vector + SECOND];
    // 16-byte copies where every vector of both sets starts on 16 bytes.
    let vectors_aligned = queries.address().is_multiple_of(16)
        && params.base.address().is_multiple_of(16)
        && params.query_stride.is_multiple_of(4)
        && params.base_stride.is_multiple_of(4);
    let first_of = |step: u32| step as u64 * TENSOR_DEPTH as u64 + (staged_chunk * 4) as u64;
    let needs_norms = metric != Metric::InnerProduct;

    // The copies of step `q` of the walk: the base tile's chunks, with its first step the
    // tile's column norms; one group, empty past the walk's end.
    let copy = |q: u32| unsafe {
        if q < walk_steps {
            let (tile, step, stage) = (q / steps, q % steps, q as usize % STAGES);
            let base_start = tile_start(tile);
            let base = params.base.offset(base_start * params.base_stride);
            let base_count = params.base_count - base_start;
            unroll!([0 1] i => {
                let destination = base_words.address(stage_at(stage, staged[i] as usize, staged_chunk));
                let set = (params.base_stride, base_count, params.dim);
                copy_chunk(destination as *mut u32, base, set, staged[i], first_of(step), vectors_aligned);
            });
            if step == 0 && thread >= TILE as usize {
                let edge = thread - TILE as usize;
                let at = tile as usize % STAGES * TILE as usize + edge;
                let columns = (params.base_norms.offset(base_start), base_count);
                copy_norm(column_norms, at, columns, edge as u64, needs_norms);
            }
        }
        device::copy_async_commit();
    };

    // The rows, once: each query's squared norm and its bound widened by its margin (read
    // while the first copies land).
    if thread < TILE as usize {
        let rows = (query_start, query_count);
        let (norm, bound) = unsafe { filter_row((params.query_norms, &target, margin), rows, thread as u64) };
        unsafe { (row_norms.store(thread, norm), row_bounds.store(thread, bound)) };
    }
    // The queries, every step into a stage of its own, as a group before the base's.
    for step in 0..steps {
        unroll!([0 1] i => {
            let destination = unsafe { query_words.address(stage_at(step as usize, staged[i] as usize, staged_chunk)) };
            let set = (params.query_stride, query_count, params.dim);
            unsafe { copy_chunk(destination as *mut u32, queries, set, staged[i], first_of(step), vectors_aligned) };
        });
    }
    unsafe { device::copy_async_commit() };
    for q in 0..STAGES as u32 - 1 {
        copy(q);
    }

    let mut sums: Sums = Default::default();
    let mut q = 0;
    for tile in 0..tiles {
        for step in 0..steps {
            let stage = q as usize % STAGES;
            unsafe {
                // This step's copies (and the queries) have landed: each thread rounds its own
                // to TF32 in place, before the barrier that hands them to the warps.
                device::copy_async_wait::<{ STAGES as u32 - 2 }>();
                round_own(base_words, stage, staged, staged_chunk);
                if q == 0 {
                    for query_step in 0..steps as usize {
                        round_own(query_words, query_step, staged, staged_chunk);
                    }
                }
                device::sync_threads();
            }
            // Its stage held the step before this one's, which every warp is done with.
            copy(q + STAGES as u32 - 1);
            let (queries, base) = ((query_words, no_lows), (base_words, no_lows));
            unsafe { multiply::<false>(queries, base, (step as usize, stage), part, &mut sums) };
            q += 1;
        }
        // (The rows through `opaque_u64`: LLVM would hoist each row's index out of the walk
        // and hold the eight in registers across it.)
        let (base_start, rows) = (tile_start(tile), (device::opaque_u64(query_start), query_count));
        let base_count = params.base_count - base_start;
        let columns_from = tile as usize % STAGES * TILE as usize;
        let edges = Edges { row_norms, row_bounds, column_norms, columns_from };
        unsafe {
            keep_within_bounds(metric, part, &mut sums, edges, &target, rows, (base_start, base_count))
        };
        sums = Default::default();
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

/// [`distance_filter_tf32`] of `f32` vectors: each block walks base tiles where [`walks`]
/// says so (`filter_tf32_f32`).
///
/// # Safety
/// As `filter_tf32_f32`: where [`walks`], with [`Tf32TileLayout::walking`]`().bytes` of
/// shared memory and a grid of any width ([`walk_grid`]'s); else as
/// [`distance_filter_tf32`].
// Inlined into its entry, as the f32 filter's.
#[inline(always)]
pub unsafe fn distance_filter_tf32_f32(params: Tf32FilterParams<f32>) {
    unsafe { filter_tf32_f32(params) }
}

/// [`distance_filter_tf32`] of binary16 vectors.
///
/// # Safety
/// As [`distance_filter_tf32`].
#[inline(always)]
pub unsafe fn distance_filter_tf32_f16(params: Tf32FilterParams<F16Bits>) {
    unsafe { distance_filter_tf32(params) }
}

/// [`distance_filter_tf32`] of bfloat16 vectors.
///
/// # Safety
/// As [`distance_filter_tf32`].
#[inline(always)]
pub unsafe fn distance_filter_tf32_bf16(params: Tf32FilterParams<Bf16Bits>) {
    unsafe { distance_filter_tf32(params) }
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

/// Whether every vector of both sets starts on 16 bytes (`f32` vectors only), so that
/// [`exact_dot`] reads them four components at a time.
#[inline(always)]
fn vectors_aligned<S>(
    queries: GlobalPtr<S>,
    query_stride: u64,
    base: GlobalPtr<S>,
    base_stride: u64,
) -> bool {
    size_of::<S>() == 4
        && queries.address().is_multiple_of(16)
        && base.address().is_multiple_of(16)
        && query_stride.is_multiple_of(4)
        && base_stride.is_multiple_of(4)
}

/// `⟨x, y⟩` of `dim` components by the f32 tile's arithmetic: one `fma` per component, in
/// component order, from 0 (so that a pair gets the bits the f32 search gives it); 16-byte
/// loads where `aligned` ([`vectors_aligned`]), the same values in the same order.
///
/// # Safety
/// Both vectors' `dim` components in bounds.
#[inline(always)]
unsafe fn exact_dot<S: Component>(x: GlobalPtr<S>, y: GlobalPtr<S>, dim: u64, aligned: bool) -> f32 {
    let mut dot = 0.0f32;
    let mut c = 0;
    if aligned {
        while c + 4 <= dim {
            let (xs, ys) = unsafe {
                ((x.offset(c).as_ptr() as *const Four).read(), (y.offset(c).as_ptr() as *const Four).read())
            };
            for j in 0..4 {
                dot = device::fma_f32(xs.0[j], ys.0[j], dot);
            }
            c += 4;
        }
    }
    while c < dim {
        let (a, b) = unsafe { (x.read(c).to_f32(), y.read(c).to_f32()) };
        dot = device::fma_f32(a, b, dot);
        c += 1;
    }
    dot
}

/// The distance of `query` (squared norm `query_norm`) to base vector `index` (of `base`,
/// `stride` components apart, with their squared norms) by the f32 tile's arithmetic:
/// [`exact_dot`], then [`tile_distance`] (the norms unread for the inner product).
///
/// # Safety
/// As [`exact_dot`]; `index` below the base's count.
#[inline(always)]
unsafe fn exact_distance<S: Component>(
    metric: Metric,
    (query, query_norm): (GlobalPtr<S>, f32),
    (base, stride, norms): (GlobalPtr<S>, u64, GlobalPtr<f32>),
    index: u64,
    (dim, aligned): (u64, bool),
) -> f32 {
    let dot = unsafe { exact_dot(query, base.offset(index * stride), dim, aligned) };
    let base_norm = if metric != Metric::InnerProduct { unsafe { norms.read(index) } } else { 0.0 };
    tile_distance(metric, dot, query_norm, base_norm)
}

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
    let aligned = vectors_aligned(params.queries, params.query_stride, params.base, params.base_stride);
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
                let base = (params.base, params.base_stride, params.base_norms);
                unsafe { exact_distance(metric, (query, query_norm), base, index, (params.dim, aligned)) }
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

/// Parameters of `knn_rerank_candidates_<storage>`.
#[repr(C)]
#[derive(Debug)]
pub struct RerankCandidatesParams<S> {
    /// The first query of the rows; query `i` at `i · query_stride`.
    pub queries: GlobalPtr<S>,
    /// Components from one query's start to the next's.
    pub query_stride: u64,
    /// The rows' queries' squared norms (under every metric: the margin reads them).
    pub query_norms: GlobalPtr<f32>,
    /// The whole base; vector `j` at `j · base_stride`.
    pub base: GlobalPtr<S>,
    /// Components from one base vector's start to the next's.
    pub base_stride: u64,
    /// The base's squared norms (null for the inner product).
    pub base_norms: GlobalPtr<f32>,
    /// `rows × width` candidates, `rank << 32 | base index` of their TF32 distances
    /// (the TF32 filter's rows), rewritten in place with their exact distances' ranks.
    pub keys: GlobalPtr<u64>,
    /// `rows × kept`: each row's `kept` smallest keys of `keys`, in order.
    pub best: GlobalPtr<u64>,
    /// Each row's count of candidates (the filter's; may pass `width`), set to `u32::MAX`
    /// where the row proves nothing.
    pub counts: GlobalPtr<u32>,
    /// Candidates per row.
    pub width: u64,
    /// Neighbours kept per row.
    pub kept: u64,
    /// Rows (queries).
    pub rows: u64,
    /// Components per vector.
    pub dim: u64,
    /// [`Metric::to_raw`].
    pub metric: u32,
    /// Keeps the struct free of implicit padding (set to 0).
    pub reserved: u32,
    /// The most a TF32 distance lies below the exact one (the filter's).
    pub margin: Margin,
}

impl<S> Clone for RerankCandidatesParams<S> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<S> Copy for RerankCandidatesParams<S> {}

/// The `knn_rerank_candidates_<storage>` kernel: each row's candidates of the TF32 filter
/// that can still be among its `kept` nearest get their exact distances, the others the
/// largest key.
///
/// Let `A` be the row's `kept`-th smallest TF32 distance and `M` the margin. Those `kept`
/// candidates' exact distances are at most `A + M`, so the row's `kept`-th exact distance
/// `D` is too; a vector among the `kept` nearest has an exact distance at most `D`, so a
/// TF32 distance at most `D + M ≤ A + 2M`. Each candidate within `A + 2M` (rounded up) gets
/// `rank << 32 | index` of its exact distance, by the f32 tile's arithmetic (`exact_dot`,
/// [`tile_distance`]), the key the `f32` filter gives the same pair; the rest the largest
/// key, ranked last. A row whose `A + 2M` is not finite (a NaN or an infinite distance or
/// norm, or fewer than `kept` candidates) gets the count `u32::MAX`: the host searches it
/// again.
///
/// # Safety
/// Any block size; `grid.x ≥ 1` blocks take rows in turn; every index below the base's
/// count, every vector and norm named in bounds.
pub unsafe fn rerank_candidates<S: Component>(params: RerankCandidatesParams<S>) {
    let metric = Metric::from_raw(params.metric);
    let aligned = vectors_aligned(params.queries, params.query_stride, params.base, params.base_stride);
    let mut row = device::block_idx_x() as u64;
    while row < params.rows {
        let query = params.queries.offset(row * params.query_stride);
        let (count, query_norm, last_best) = unsafe {
            (
                params.counts.read(row) as u64,
                params.query_norms.read(row),
                params.best.read(row * params.kept + params.kept - 1),
            )
        };
        let approximate = f32::from_ordered((last_best >> 32) as u32);
        let threshold = params.margin.widen(approximate, query_norm, 2.0);
        if !threshold.is_finite() {
            // Every thread of the block skips the row (the same inputs); one marks it.
            if device::thread_idx_x() == 0 {
                unsafe { params.counts.write(row, u32::MAX) };
            }
        } else {
            let mut j = device::thread_idx_x() as u64;
            while j < count.min(params.width) {
                let at = row * params.width + j;
                let key = unsafe { params.keys.read(at) };
                let within = f32::from_ordered((key >> 32) as u32) <= threshold;
                let exact = if within {
                    let index = key & u32::MAX as u64;
                    let base = (params.base, params.base_stride, params.base_norms);
                    let distance = unsafe {
                        exact_distance(metric, (query, query_norm), base, index, (params.dim, aligned))
                    };
                    (distance.to_ordered() as u64) << 32 | index
                } else {
                    u64::MAX
                };
                unsafe { params.keys.write(at, exact) };
                j += device::block_dim_x() as u64;
            }
        }
        row += device::grid_dim_x() as u64;
    }
}

/// [`rerank_candidates`] of `f32` vectors.
///
/// # Safety
/// As [`rerank_candidates`].
pub unsafe fn rerank_candidates_f32(params: RerankCandidatesParams<f32>) {
    unsafe { rerank_candidates(params) }
}

/// [`rerank_candidates`] of binary16 vectors.
///
/// # Safety
/// As [`rerank_candidates`].
pub unsafe fn rerank_candidates_f16(params: RerankCandidatesParams<F16Bits>) {
    unsafe { rerank_candidates(params) }
}

/// [`rerank_candidates`] of bfloat16 vectors.
///
/// # Safety
/// As [`rerank_candidates`].
pub unsafe fn rerank_candidates_bf16(params: RerankCandidatesParams<Bf16Bits>) {
    unsafe { rerank_candidates(params) }
}
