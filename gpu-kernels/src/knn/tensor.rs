//! A tile of distances on the tensor cores: the product of [`tile`](super::tile)'s kernel
//! with TF32 inputs (`mma.sync.m16n8k8`, `f32` accumulation), finished by the same epilogue
//! ([`super::tile_distance`]). Its distances are approximations: the search keeps more
//! candidates than asked for and re-ranks them exactly ([`rerank`], [`rerank_candidates`]).
//!
//! The block and its grid are [`tile`](super::tile)'s: [`TILE`]` × `[`TILE`] distances per
//! block of [`DISTANCE_THREADS`] threads; a step is [`TENSOR_DEPTH`] components. `f32`
//! vectors are copied into the shared-memory stages asynchronously (`cp.async`, 16 bytes a
//! copy where the vectors start on 16 bytes), three steps ahead of the products (two for
//! split TF32, whose stages are twice the size; [`Tf32TileLayout::stages`]); each thread
//! rounds its own copies to TF32 in place once they have landed, before the
//! barrier that hands the stage to the warps. 16-bit vectors are widened in registers, the
//! next step loaded while this one's products run. Each of the 8 warps computes a 64 × 32
//! part of the tile as 4 × 4 products of 16 × 8, each step 32 `mma` over its 16 components.
//! The rows' and columns' norms that the epilogue adds are in shared memory by then (copied
//! asynchronously for the written tile; read with the bounds for the filter).
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
use crate::device::{self, SharedLayout, SharedRegion};
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
    /// (`filter` false) or the filter.
    pub const fn new(split: bool, filter: bool) -> Self {
        let stage_words = Self::stages(split) * TENSOR_DEPTH * TILE as usize;
        let low_words = if split { stage_words } else { 0 };
        let bounds = if filter { TILE as usize } else { 0 };
        let (layout, queries) = SharedLayout::new().push::<u32>(stage_words);
        let (layout, base) = layout.push::<u32>(stage_words);
        let (layout, queries_low) = layout.push::<u32>(low_words);
        let (layout, base_low) = layout.push::<u32>(low_words);
        let (layout, row_norms) = layout.push::<f32>(TILE as usize);
        let (layout, row_bounds) = layout.push::<f32>(bounds);
        let (layout, column_norms) = layout.push::<f32>(TILE as usize);
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

/// The product of both TF32 kernels; the epilogue writes the tile or, `FILTER`, keeps
/// candidates.
///
/// # Safety
/// As [`distance_tile_tf32`] or [`distance_filter_tf32`].
// Fragment and accumulator arrays are indexed by position (row tile, column tile), as the
// PTX ISA lays them out: plain ranges read best here.
#[allow(clippy::needless_range_loop)]
#[inline(always)]
unsafe fn tf32_product<S: Component, const SPLIT: bool, const FILTER: bool>(
    params: DistanceTileParams<S>,
    target: FilterTarget,
    margin: Margin,
) {
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

    let layout = Tf32TileLayout::new(SPLIT, FILTER);
    let fours = |region: SharedRegion<u32>| unsafe { region.cast::<Tf32Four>().bind() };
    let (query_words, base_words) = (fours(layout.queries), fours(layout.base));
    let (query_lows, base_lows) = (fours(layout.queries_low), fours(layout.base_low));
    // Both sets' stages are vector-major: chunk `c` (components 4c … 4c + 3 of the step) of
    // vector `v` is 16-byte word `v · CHUNKS + c` of its stage.
    let stage_at = |stage: usize, vector: usize, chunk: usize| stage * STAGE_FOURS + vector * CHUNKS + chunk;

    // This thread stages chunk `staged_chunk` of vectors `staged_vector` and `staged_vector +
    // 64` of both sets: a quarter of a warp writes 64 contiguous bytes of each stage.
    let (staged_vector, staged_chunk) = ((thread / CHUNKS) as u64, thread % CHUNKS);
    const SECOND: u64 = (DISTANCE_THREADS as usize / CHUNKS) as u64;
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
    let layout_edges =
        unsafe { (layout.row_norms.bind(), layout.row_bounds.bind(), layout.column_norms.bind()) };
    let read_edges = || {
        if FILTER {
            let (row_norms, row_bounds, column_norms) = &layout_edges;
            let edge = thread % TILE as usize;
            if thread < TILE as usize {
                let (mut norm, mut bound) = (0.0, f32::NAN);
                if (edge as u64) < query_count {
                    let query = query_start + edge as u64;
                    norm = unsafe { params.query_norms.read(query) };
                    bound = margin.widen(unsafe { target.bounds.read(query) }, norm, 1.0);
                }
                unsafe { (row_norms.store(edge, norm), row_bounds.store(edge, bound)) };
            } else {
                let mut norm = 0.0;
                if needs_norms && (edge as u64) < base_count {
                    norm = unsafe { params.base_norms.read(base_start + edge as u64) };
                }
                unsafe { column_norms.store(edge, norm) };
            }
        }
    };

    // One step's products from stage `stage`: B's components for the warp's columns (both
    // `mma` depths in one load), then a row tile at a time A's rows g and g + 8 (both depths
    // in two loads), each product into its accumulator (an accumulator's two products 16
    // apart): with SPLIT the small terms first (lo·hi, hi·lo), then hi·hi.
    let mut sums = [[[0.0f32; 4]; N_TILES]; M_TILES];
    let mut multiply = |stage: usize| {
        let mut b = [Tf32Four::default(); N_TILES];
        let mut b_low = [Tf32Four::default(); N_TILES];
        for n in 0..N_TILES {
            let at = stage_at(stage, warp_column + n * 8 + g, t);
            b[n] = unsafe { base_words.load(at) };
            if SPLIT {
                b_low[n] = unsafe { base_lows.load(at) };
            }
        }
        for m in 0..M_TILES {
            let rows = [warp_row + m * 16 + g, warp_row + m * 16 + g + 8].map(|row| stage_at(stage, row, t));
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
    };

    // The written tile's norms, copied asynchronously as their own group before the stages'
    // (their reads in the epilogue waited on memory: 11 % of the tile's stall samples, H200
    // run 370): zeros past the tile's vectors, and under the inner product. (Straight-line
    // code: as a closure beside the others it put their captures on a stack frame.)
    if !FILTER {
        let (row_norms, _, column_norms) = layout_edges;
        let edge = thread % TILE as usize;
        let (norms, start, count, region) = if thread < TILE as usize {
            (params.query_norms, query_start, query_count, row_norms)
        } else {
            (params.base_norms, base_start, base_count, column_norms)
        };
        unsafe {
            if needs_norms {
                let destination = region.address(edge) as *mut u32;
                copy_word(destination, norms.offset(start), (1, count), edge as u64, 0, 1);
            } else {
                region.store(edge, 0.0);
            }
            device::copy_async_commit();
        }
    }

    let steps = params.dim.div_ceil(TENSOR_DEPTH as u64);
    if size_of::<S>() == 4 {
        // `f32` vectors: the stages copied asynchronously, `stages − 1` steps ahead of the
        // products (register prefetch one step ahead left the loads' latency exposed: one
        // step's 32 `mma` a warp are shorter, H200 run 349). Each thread copies its chunks
        // as they are, waits for them, and rounds them to TF32 in place before the barrier
        // that hands them to the warps: the same TF32 inputs, the same products, as before.
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
            multiply(stage);
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
            multiply(stage);
            if let Some(loaded) = next {
                stage_store(1 - stage, loaded);
            }
            unsafe { device::sync_threads() };
        }
    }

    // The epilogue: lane (g, t) holds rows g and g + 8, columns 2t and 2t + 1 of each product.
    let column_of = |n: usize| (warp_column + n * 8 + 2 * t) as u64;
    if FILTER {
        let (row_norms, row_bounds, column_norms) = &layout_edges;
        let mut base_norm = [[0.0f32; 2]; N_TILES];
        unroll!([0 1 2 3] n => {
            unroll!([0 1] j => {
                base_norm[n][j] = unsafe { column_norms.load(column_of(n) as usize + j) };
            });
        });
        // As the f32 filter's epilogue (`super::tile`): each pair's distance and whether it
        // is within its query's widened bound, branch-free and once per metric, as bits
        // (row part `2m + half`, column part `2n + j`); then the kept ones appended by a
        // loop over their bits, each distance picked from the registers by constant indices.
        let mut columns_in = 0u32;
        unroll!([0 1 2 3] n => {
            unroll!([0 1] j => {
                if column_of(n) + (j as u64) < base_count {
                    columns_in |= 1 << (2 * n + j);
                }
            });
        });
        let mut kept = 0u64;
        macro_rules! within_bounds {
            ($metric:expr) => {
                unroll!([0 1 2 3] m => {
                    unroll!([0 1] half => {
                        let row = (warp_row + m * 16 + g + 8 * half) as u64;
                        if row < query_count {
                            let query_norm = unsafe { row_norms.load(row as usize) };
                            let bound = unsafe { row_bounds.load(row as usize) };
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
            let row = (warp_row + m * 16 + g + 8 * half) as u64;
            unsafe {
                target.keep(query_start + row, distance.to_ordered(), base_start + column_of(n) + j as u64)
            };
        }
        return;
    }
    // The norms as copied at the block's start.
    let (row_norms, _, column_norms) = layout_edges;
    let mut base_norm = [[0.0f32; 2]; N_TILES];
    for n in 0..N_TILES {
        for j in 0..2 {
            base_norm[n][j] = unsafe { column_norms.load(column_of(n) as usize + j) };
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
            let query_norm = unsafe { row_norms.load(row as usize) };
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

/// [`distance_filter_tf32`] of `f32` vectors.
///
/// # Safety
/// As [`distance_filter_tf32`].
// Inlined into its entry, as the f32 filter's.
#[inline(always)]
pub unsafe fn distance_filter_tf32_f32(params: Tf32FilterParams<f32>) {
    unsafe { distance_filter_tf32(params) }
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
