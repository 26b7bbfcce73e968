//! Exact k-NN over a base in host memory, streamed through the device in chunks: for a base
//! larger than the GPU's memory (Faiss's brute force pages a CPU-resident base the same
//! way).
//!
//! The base is cut into chunks ([`chunk_schedule`]): full ones of a power of two of vectors
//! within [`Tuning::knn_stream_chunk_bytes`](crate::Tuning) and a quarter of the base,
//! after an eighth, a quarter and a half of one, so that the first search waits for a short
//! copy. Two device buffers take the chunks in turn: a second stream copies chunk `c + 1`
//! from host memory while chunk `c` is searched on the handle's stream (its norms, then the
//! search of [`super::knn`] against it: distance tiles and rows top-k). Each chunk's best (its `k`
//! best, or all of it) go beside the best so far in a row of `2k` per query (base indices
//! shifted by the chunk's first, similarities negated so that the rows top-k ranks them as
//! the search does), and one more rows top-k keeps the `k` best ([`merge_steps`]). Equal
//! distances keep the lower index first (the earlier chunks' part of the row comes first),
//! so the result is the device index's, bit for bit: a pair's distance does not depend on
//! the tiling.
//!
//! Every query is searched against each chunk before the next is copied, so the base
//! crosses the bus once per search; only when the merge rows of all queries would pass
//! [`Tuning::knn_tile_bytes`](crate::Tuning) are the queries taken in groups, each
//! streaming the base again.

use gpu_select_kernels::knn::Metric;
use gpu_select_kernels::params::GlobalPtr;

use crate::buffer::{DeviceBuffer, DeviceValue};
use crate::engine::knn::{KnnPlan, KnnPrecision, KnnRun, KnnStorage, VectorSet};
use crate::engine::rows::RowsSpec;
use crate::error::Result;
use crate::gpu::Gpu;
use crate::results::TopK;
use crate::workspace::{WorkspaceCarver, check_key_count};

/// Steps of the ramp at the start: the first chunk is `2^-RAMP_STEPS` of a full one, each
/// next twice the one before, so that the first search waits for a short copy.
const RAMP_STEPS: u32 = 3;

/// A full chunk is at most this fraction of the base (and a power of two of vectors). Each
/// chunk searches every query tile once more (a distance tile, a rows top-k and a merge:
/// about 0.1 ms a tile of 1024 queries on an H100), while the copy the first search waits
/// for and, where copying is the slower, the last chunk's search grow with the chunk.
/// SIFT1M's shape on an H100, k = 100 (runs 214–218): 10^3 queries 14.7 ms with chunks of
/// 256 MiB, 11.6 with a quarter of the base (64 MiB), 12.0 with an eighth (9.7 with the base
/// on the device); 10^4 queries 100.6, 100.8 and 108.9 (96.1). Lengths other than powers of
/// two measured slower still (125 000 vectors: 105.6 ms at 10^4 queries, run 216).
const BASE_PER_FULL_CHUNK: usize = 4;

/// Below this fraction of the tuning's chunk bytes, a full chunk would cost more in launches
/// than its copy saves: the base is one chunk.
const LEAST_FULL_CHUNK_FRACTION: usize = 32;

/// Bytes a query's merge buffers take per neighbour kept: the chunk's best (`k`), the row
/// of the best so far beside the chunk's (`2k`) and the merge's result (`k`), each entry a
/// distance and an index.
const MERGE_BYTES_PER_KEPT: usize = 4 * (size_of::<f32>() + size_of::<u64>());

/// A streamed search made ready for one shape: the chunks, the query groups, and where
/// its buffers lie in its workspace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct StreamedPlan {
    pub(crate) queries: usize,
    pub(crate) base: usize,
    pub(crate) k: usize,
    metric: Metric,
    pub(crate) dim: usize,
    /// The chunks the base is cut into, in order: first vector and length.
    pub(crate) chunks: Vec<(usize, usize)>,
    /// How each chunk's best join the best so far, chunk by chunk.
    steps: Vec<MergeStep>,
    /// Queries searched per pass over the base.
    pub(crate) query_group: usize,
    regions: StreamedRegions,
    pub(crate) workspace_bytes: usize,
}

/// Offsets in a streamed search's workspace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct StreamedRegions {
    /// The two chunk buffers (one when the base is one chunk).
    slots: [usize; 2],
    /// Their vectors' squared norms.
    norms: [usize; 2],
    /// A chunk's best: distances, indices (`query_group × k`).
    chunk_best: (usize, usize),
    /// The best so far beside a chunk's: distances, indices (`query_group × 2k`).
    merged: (usize, usize),
    /// The merge's result: distances, indices (`query_group × k`).
    running: (usize, usize),
    /// The chunk searches' and the merges' workspace: offset, bytes.
    search: (usize, usize),
}

impl StreamedPlan {
    /// Whether the base is cut into several chunks, so that their best are merged.
    fn merges(&self) -> bool {
        self.chunks.len() > 1
    }

    /// Whether the chunks' norms are computed (not for the inner product).
    fn needs_norms(&self) -> bool {
        self.metric != Metric::InnerProduct
    }
}

impl Gpu {
    /// The chunks a streamed search cuts a host base of `base` vectors of `dim` components
    /// of `T` into ([`chunk_schedule`] within [`Tuning::knn_stream_chunk_bytes`](crate::Tuning)).
    pub(crate) fn knn_stream_chunks<T: KnnStorage>(
        &self,
        base: usize,
        dim: usize,
    ) -> Result<Vec<(usize, usize)>> {
        let most = (self.tuning().knn_stream_chunk_bytes / (dim * size_of::<T>())).max(1);
        check_key_count(most.min(base))?;
        Ok(chunk_schedule(base, most))
    }

    /// Plans a search of `queries` vectors against a host base of `base` vectors of `dim`
    /// components of `T` for their `k` nearest (`1 ≤ k ≤ base`).
    pub(crate) fn plan_knn_streamed<T: KnnStorage>(
        &self,
        queries: usize,
        (base, dim): (usize, usize),
        k: usize,
        metric: Metric,
    ) -> Result<StreamedPlan> {
        check_key_count(queries)?;
        let vector_bytes = dim * size_of::<T>();
        let chunks = self.knn_stream_chunks::<T>(base, dim)?;
        let steps = merge_steps(&chunks, k);
        let longest = chunks.iter().map(|&(_, len)| len).max().unwrap_or(0);
        let several = chunks.len() > 1;
        let query_group = if several {
            (self.tuning().knn_tile_bytes / (k * MERGE_BYTES_PER_KEPT)).clamp(1, queries)
        } else {
            queries
        };
        // The chunk searches' workspace: the largest of their shapes' (two query counts, the
        // chunks' lengths) and of the merges' rows top-k.
        let mut shapes: Vec<(usize, usize, usize)> = chunks
            .iter()
            .zip(&steps)
            .map(|(&(_, len), step)| (len, step.column + step.kept, step.keep))
            .collect();
        shapes.sort_unstable();
        shapes.dedup();
        let mut search_bytes = 0;
        for group in [query_group, queries % query_group] {
            if group == 0 {
                continue;
            }
            for &(len, merged_width, keep) in &shapes {
                let plan = self.plan_knn(group, len, k.min(len), metric, false, KnnPrecision::F32, false)?;
                search_bytes = search_bytes.max(plan.workspace_bytes);
                if several {
                    search_bytes = search_bytes.max(self.knn_rows_workspace(group, merged_width, keep)?);
                }
            }
        }
        let norms_len = if metric == Metric::InnerProduct { 0 } else { longest };
        let merge_len = if several { query_group * k } else { 0 };
        let mut carver = WorkspaceCarver::default();
        let mut pair = |len: usize| (carver.region(len * 4), carver.region(len * 8));
        let (chunk_best, merged, running) = (pair(merge_len), pair(2 * merge_len), pair(merge_len));
        // The second slot (and its norms) only where the chunks take turns.
        let second = |bytes: usize| if several { bytes } else { 0 };
        let slots = [carver.region(longest * vector_bytes), carver.region(second(longest * vector_bytes))];
        let norms = [carver.region(norms_len * 4), carver.region(second(norms_len * 4))];
        let search = (carver.region(search_bytes), search_bytes);
        Ok(StreamedPlan {
            queries,
            base,
            k,
            metric,
            dim,
            chunks,
            steps,
            query_group,
            regions: StreamedRegions { slots, norms, chunk_best, merged, running, search },
            workspace_bytes: carver.bytes(),
        })
    }

    /// Queues `plan`'s search of `queries` (on this device) against `base` (host memory,
    /// `plan.base · dim` values) into `out` (`queries · k`), with `workspace` (at least
    /// `plan.workspace_bytes`): the chunks copied on `copier`'s stream (a handle of this
    /// device), searched and merged on this handle's.
    ///
    /// # Safety
    /// `base` stays alive and unchanged until `copier`'s stream has passed the copies
    /// queued here (dropping the last handle of a forked stream waits for it).
    pub(crate) unsafe fn run_knn_streamed<T: KnnStorage>(
        &self,
        copier: &Gpu,
        plan: &StreamedPlan,
        (queries, base): (VectorSet<T>, &[T]),
        workspace: &DeviceBuffer<u8>,
        out: &mut TopK<f32>,
    ) -> Result<()> {
        let (k, dim, regions) = (plan.k, plan.dim, plan.regions);
        let address = |offset: usize| workspace.global_ptr().address() + offset as u64;
        // Views of the workspace, which owns the memory.
        fn view<V: DeviceValue>(handle: &Gpu, address: u64, len: usize) -> DeviceBuffer<V> {
            DeviceBuffer::borrowed(handle.clone(), address, len, false)
        }
        let pair = |(values, indices): (usize, usize), len: usize| TopK {
            values: view(self, address(values), len),
            indices: view(self, address(indices), len),
        };
        let mut search_workspace = view::<u8>(self, address(regions.search.0), regions.search.1);
        let slot_vectors = |slot: usize, len: usize| VectorSet {
            data: GlobalPtr::from_address(address(regions.slots[slot])),
            count: len,
            stride: dim,
        };
        // Chunk `chunk` into its slot, on the copier's stream (in order after whatever the
        // copier was told to wait for).
        let copy_chunk = |chunk: usize| -> Result<()> {
            let (first, len) = plan.chunks[chunk];
            let values = &base[first * dim..(first + len) * dim];
            // SAFETY: the caller keeps `base` alive until the copier's stream has passed
            // this copy; the slot holds the longest chunk.
            unsafe { copier.copy_to_address_async(values, address(regions.slots[chunk % 2])) }
        };
        let negate = plan.metric.is_similarity();
        let mut searches: Vec<((usize, usize), KnnPlan)> = Vec::new();
        let mut first_query = 0;
        while first_query < plan.queries {
            let count = plan.query_group.min(plan.queries - first_query);
            let group = queries.part(first_query, count);
            let out_rows = first_query * k..(first_query + count) * k;
            let mut group_out = TopK {
                values: out.values.view(out_rows.start, out_rows.len()),
                indices: out.indices.view(out_rows.start, out_rows.len()),
            };
            let merged = pair(regions.merged, count * 2 * k);
            // The first chunk's slot is free once this handle's earlier work is done.
            copier.wait_for(self)?;
            copy_chunk(0)?;
            for chunk in 0..plan.chunks.len() {
                // Chunk `chunk` has arrived (the copier holds no later copy yet) ...
                self.wait_for(copier)?;
                if chunk + 1 < plan.chunks.len() {
                    // ... and the next one's slot is free once the search of the chunk
                    // before this one is done (all this handle has queued so far).
                    copier.wait_for(self)?;
                    copy_chunk(chunk + 1)?;
                }
                let ((first, len), step) = (plan.chunks[chunk], plan.steps[chunk]);
                let vectors = slot_vectors(chunk % 2, len);
                let norms = GlobalPtr::from_address(address(regions.norms[chunk % 2]));
                if plan.needs_norms() {
                    self.knn_norms(vectors, dim, norms)?;
                }
                // A plan per shape (two query counts, a few chunk lengths), not per chunk.
                let shape = (count, len);
                let search = match searches.iter().position(|(known, _)| *known == shape) {
                    Some(at) => &searches[at].1,
                    None => {
                        let made = self.plan_knn(
                            count,
                            len,
                            step.kept,
                            plan.metric,
                            false,
                            KnnPrecision::F32,
                            false,
                        )?;
                        searches.push((shape, made));
                        &searches[searches.len() - 1].1
                    }
                };
                let mut chunk_out = pair(regions.chunk_best, count * step.kept);
                let target = if plan.merges() { &mut chunk_out } else { &mut group_out };
                let run = KnnRun { base_norms: norms, base_norm_max: 0.0, out: target };
                self.run_knn(search, (group, vectors, dim), &search_workspace, run)?;
                if !plan.merges() {
                    continue;
                }
                // The chunk's best beside the best so far (the first chunk's are the best so
                // far), then the best of both.
                let to = (&merged, 2 * k, step.column);
                self.knn_place(&chunk_out, to, count, step.kept, first, None, negate)?;
                if chunk == 0 {
                    continue;
                }
                let mut best = pair(regions.running, count * step.keep);
                let spec = RowsSpec::dense(count, step.column + step.kept, 2 * k, step.keep)?;
                let indices = merged.indices.global_ptr();
                self.knn_select(&merged.values, &spec, step.keep, indices, &mut search_workspace, &mut best)?;
                if chunk + 1 < plan.chunks.len() {
                    self.knn_place(&best, (&merged, 2 * k, 0), count, step.keep, 0, None, false)?;
                } else {
                    // The last merge keeps `k`: the base holds at least `k` vectors.
                    self.knn_place(&best, (&group_out, k, 0), count, k, 0, None, negate)?;
                }
            }
            first_query += count;
        }
        Ok(())
    }
}

/// The chunks of a base of `base` vectors, `(first vector, length)` in order: full chunks
/// of the largest power of two of vectors within `most` and a quarter of the base, after a
/// ramp of an eighth, a quarter and a half of one (at least one vector each); the last what
/// is left. One chunk where a full one would be below `most / 32`.
fn chunk_schedule(base: usize, most: usize) -> Vec<(usize, usize)> {
    let within = most.min(base / BASE_PER_FULL_CHUNK);
    if within < (most / LEAST_FULL_CHUNK_FRACTION).max(1) {
        return vec![(0, base)];
    }
    let full = 1 << within.ilog2();
    let mut chunks = Vec::new();
    let (mut first, mut next) = (0, (full >> RAMP_STEPS).max(1));
    while first < base {
        let len = next.min(base - first);
        chunks.push((first, len));
        first += len;
        next = (next * 2).min(full);
    }
    chunks
}

/// How one chunk's best join the best so far: the chunk keeps `kept` (its `k` best, or all
/// of it), placed at `column` of the merge row, after the best so far; the merge keeps
/// `keep` of those `column + kept` (for the first chunk, nothing is merged: its `kept` are
/// the best so far).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct MergeStep {
    kept: usize,
    column: usize,
    keep: usize,
}

/// The merge steps of `chunks` for the `k` nearest: the best so far are `min(k, vectors
/// so far)`, so a chunk shorter than `k` (a ramp's, or the last) joins as a whole.
fn merge_steps(chunks: &[(usize, usize)], k: usize) -> Vec<MergeStep> {
    let mut so_far = 0;
    chunks
        .iter()
        .map(|&(_, len)| {
            let kept = k.min(len);
            let step = MergeStep { kept, column: so_far, keep: k.min(so_far + kept) };
            so_far = step.keep;
            step
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_ramp_up_and_cover_the_base() {
        for (base, most) in
            [(10, 4), (1000, 64), (7, 100), (4097, 512), (300, 10), (12, 4), (1, 1), (5000, 3)]
        {
            let chunks = chunk_schedule(base, most);
            let mut next = 0;
            for (i, &(first, len)) in chunks.iter().enumerate() {
                assert_eq!(first, next, "{base} {most}: contiguous");
                assert!(len >= 1, "{base} {most}: an empty chunk");
                if chunks.len() > 1 {
                    let full = 1 << most.min(base / 4).ilog2();
                    assert!(len <= full, "{base} {most}: {chunks:?}");
                    if i > 0 && i + 1 < chunks.len() {
                        assert_eq!(len, (chunks[i - 1].1 * 2).min(full), "{base} {most}: doubling");
                    }
                }
                next = first + len;
            }
            assert_eq!(next, base, "{base} {most}: covered");
        }
        // 1000 vectors, chunks of at most 64: full chunks of 64.
        let lengths: Vec<usize> = chunk_schedule(1000, 64).iter().map(|c| c.1).collect();
        let mut want = vec![8, 16, 32];
        want.extend([64; 14]);
        want.push(1000 - 56 - 14 * 64);
        assert_eq!(lengths, want);
        // Full chunks held to a quarter of the base (250), as a power of two: 128.
        assert_eq!(chunk_schedule(1000, 4000), chunk_schedule(1000, 128));
        let lengths: Vec<usize> = chunk_schedule(1000, 4000).iter().map(|c| c.1).collect();
        assert_eq!(lengths, [16, 32, 64, 128, 128, 128, 128, 128, 128, 120]);
        // A full chunk below 1/32 of the most: one chunk.
        assert_eq!(chunk_schedule(250, 8000), [(0, 250)]);
        assert_eq!(chunk_schedule(5, 64), [(0, 5)]);
    }

    #[test]
    fn merge_steps_keep_k_once_the_chunks_hold_k() {
        let chunks = chunk_schedule(1000, 64);
        for k in [1, 5, 8, 9, 40, 100, 1000] {
            let steps = merge_steps(&chunks, k);
            let mut so_far = 0;
            for (step, &(_, len)) in steps.iter().zip(&chunks) {
                assert_eq!(step.kept, k.min(len));
                assert_eq!(step.column, k.min(so_far), "k = {k}: the best so far");
                assert!(step.column + step.kept <= 2 * k, "k = {k}: within the merge row");
                so_far += len;
                assert_eq!(step.keep, k.min(so_far));
            }
            assert_eq!(steps.last().unwrap().keep, k);
        }
    }
}
