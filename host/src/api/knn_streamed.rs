//! Exact k-NN over a base the caller keeps in host memory, streamed through the device in
//! chunks for each search: for a base larger than the GPU's memory.

use gpu_select_kernels::knn::Metric;

use crate::buffer::{DeviceBuffer, PinnedHost};
use crate::engine::knn_streamed::StreamedPlan;
use crate::error::{Error, Result};
use crate::gpu::Gpu;
use crate::results::{Neighbours, TopK, TopKOut};
use crate::view::DeviceSliceMut;

use super::knn::{
    VectorComponent, Vectors, check_k_within, check_planned_search, whole_vectors, with_outputs,
};

/// An exact (brute-force) k-NN index over base vectors the caller keeps in host memory:
/// each search copies the base to the device chunk by chunk (at most
/// [`Tuning::knn_stream_chunk_bytes`](crate::Tuning::knn_stream_chunk_bytes) each, two
/// buffers taking turns: one copied on a stream of its own while the other is searched),
/// so the device holds two chunks, the search's tiles and the queries' merge rows, never
/// the whole base. Made by [`Gpu::streamed_index`].
///
/// The results are a [`FlatIndex`](crate::FlatIndex)'s over the same vectors, bit for bit:
/// the same metrics, distances (each pair's arithmetic does not depend on the chunks),
/// order, ties by lower base index, and non-finite components ranked as there. The base's
/// norms are computed per chunk and search (a read of the chunk beside the products' many).
///
/// The base is page-locked for the index's life (`cuMemHostRegister`) so that the copies
/// run at the bus's speed and beside the search; where the driver refuses (a process may
/// lock only so much memory) the copies are staged by the driver, slower but the same
/// ([`StreamedIndex::is_pinned`] tells which). Precision: `f32` arithmetic (no TF32 form).
///
/// ```
/// use gpu_select::{Gpu, Metric, Tuning, Vectors};
///
/// // Chunks of at most 64 bytes (four 4-component vectors) for the example: the base
/// // crosses in several.
/// let gpu = Gpu::emulator().with_tuning(Tuning { knn_stream_chunk_bytes: 64, ..Tuning::default() });
/// let base: Vec<f32> = (0..10).flat_map(|i| [i as f32, 0.0, 0.0, 0.0]).collect(); // 10 vectors
/// let index = gpu.streamed_index(&base, 4, Metric::L2)?;
/// assert!(index.chunks() > 1);
/// let (distances, indices) = index.search_host(&[6.8, 0.0, 0.0, 0.0], 2)?;
/// assert_eq!(indices, [7, 6]);
/// assert!((distances[0] - 0.04).abs() < 1e-5);
/// # Ok::<(), gpu_select::Error>(())
/// ```
#[derive(Debug)]
pub struct StreamedIndex<'a, T: VectorComponent = f32> {
    gpu: Gpu,
    /// The copies' own stream. Declared before `pinned`: dropping the last handle of a
    /// forked stream waits for its copies, before the base is unlocked.
    copier: Gpu,
    base: &'a [T],
    len: usize,
    dim: usize,
    metric: Metric,
    /// The base's page-locking, undone when the index goes.
    pinned: Option<PinnedHost>,
}

impl<'a, T: VectorComponent> StreamedIndex<'a, T> {
    /// Number of base vectors.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the index holds no vector (never: [`Gpu::streamed_index`] refuses an empty
    /// base).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Components per vector.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// The metric searches rank by.
    pub fn metric(&self) -> Metric {
        self.metric
    }

    /// Whether the base is page-locked, so that its copies run without the driver's
    /// staging (false on the emulator, and where the driver refused to lock it).
    pub fn is_pinned(&self) -> bool {
        self.pinned.is_some()
    }

    /// The chunks a search cuts the base into (each copied once per group of queries; one
    /// group unless the queries' merge rows pass
    /// [`Tuning::knn_tile_bytes`](crate::Tuning::knn_tile_bytes)): full chunks of the
    /// largest power of two of vectors within
    /// [`Tuning::knn_stream_chunk_bytes`](crate::Tuning::knn_stream_chunk_bytes) and an
    /// quarter of the base, after chunks of an eighth, a quarter and a half of one (so that
    /// the first search waits for a short copy); one chunk where a full one would be below
    /// 1/32 of the tuning's bytes.
    pub fn chunks(&self) -> usize {
        self.gpu.knn_stream_chunks::<T>(self.len, self.dim).map_or(1, |chunks| chunks.len())
    }

    /// The `k` nearest base vectors of each query (on the index's device): `queries.count()
    /// · k` distances and base indices, query after query, nearest first, as
    /// [`FlatIndex::search`](crate::FlatIndex::search) gives them. Queued on the index's
    /// handle's stream; returns once the last chunk's copy has been queued (a pageable base
    /// is copied before each copy call returns).
    ///
    /// Errors: [`Error::InvalidArgument`] for queries of another dimension, or on another
    /// device; [`Error::KOutOfRange`] unless `1 ≤ k ≤ len()`; [`Error::OutOfMemory`] when two
    /// chunks and the search's buffers do not fit the device.
    pub fn search(&self, queries: Vectors<'_, T>, k: usize) -> Result<Neighbours> {
        let plan = self.plan_search(queries.count, k)?;
        with_outputs(&self.gpu, (plan.outputs(), plan.workspace_bytes()), |out, workspace| {
            self.run_planned(&plan, &queries, out, workspace)
        })
    }

    /// Plans searches of `queries` vectors for their `k` nearest: the checks of
    /// [`StreamedIndex::search`], the chunks, and the workspace bytes a run needs
    /// ([`StreamedSearchPlan::workspace_bytes`]: two chunks, their norms, the search's
    /// tiles and the queries' merge rows). Run it with [`StreamedIndex::search_into`], as
    /// often as wanted, with no allocation.
    ///
    /// ```
    /// use gpu_select::{Gpu, Metric, TopK, Tuning, Vectors};
    ///
    /// let gpu = Gpu::emulator().with_tuning(Tuning { knn_stream_chunk_bytes: 64, ..Tuning::default() });
    /// let base: Vec<f32> = (0..40).map(|i| i as f32).collect(); // 40 points on a line
    /// let index = gpu.streamed_index(&base, 1, Metric::L2)?;
    /// let plan = index.plan_search(2, 3)?;
    /// let mut workspace = gpu.alloc_zeroed::<u8>(plan.workspace_bytes())?;
    /// let mut out = TopK { values: gpu.alloc_zeroed(plan.outputs())?, indices: gpu.alloc_zeroed(plan.outputs())? };
    /// for batch in [[0.2f32, 38.6], [10.0, 20.4]] {
    ///     let queries = gpu.upload(&batch)?;
    ///     index.search_into(&plan, Vectors::new(&queries, 2, 1)?, &mut out, &mut workspace)?;
    /// }
    /// assert_eq!(gpu.download(&out.indices)?, [10, 9, 11, 20, 21, 19]); // the last batch's
    /// # Ok::<(), gpu_select::Error>(())
    /// ```
    ///
    /// Errors: [`Error::EmptyInput`] for no queries; [`Error::KOutOfRange`] unless
    /// `1 ≤ k ≤ len()`.
    pub fn plan_search(&self, queries: usize, k: usize) -> Result<StreamedSearchPlan> {
        if queries == 0 {
            return Err(Error::EmptyInput);
        }
        check_k_within(k, self.len)?;
        let plan = self.gpu.plan_knn_streamed::<T>(queries, (self.len, self.dim), k, self.metric)?;
        Ok(StreamedSearchPlan { gpu: self.gpu.clone(), metric: self.metric, plan })
    }

    /// Runs `plan` on `queries` (as many as planned, of the index's dimension) into `out`
    /// (`plan.outputs()` distances and indices: a [`TopK`]'s buffers or views of the
    /// caller's memory) with `workspace` (at least `plan.workspace_bytes()` bytes): no
    /// allocation; queued on the index's handle's stream (the chunks' copies on the index's
    /// own), returning once the last chunk's copy is queued.
    ///
    /// Errors: [`Error::InvalidArgument`] for queries of another shape than planned, another
    /// index's plan, memory on another device; [`Error::LengthMismatch`] for outputs of
    /// another length; [`Error::WorkspaceTooSmall`].
    pub fn search_into<'o>(
        &self,
        plan: &StreamedSearchPlan,
        queries: Vectors<'_, T>,
        out: impl Into<TopKOut<'o, f32>>,
        workspace: impl Into<DeviceSliceMut<'o, u8>>,
    ) -> Result<()> {
        let (mut out, mut workspace) = (out.into(), workspace.into());
        let mut out = TopK { values: out.values.buffer_mut(), indices: out.indices.buffer_mut() };
        self.run_planned(plan, &queries, &mut out, &workspace.buffer_mut())
    }

    /// Checks `queries`, the outputs and the workspace against `plan`, then runs it.
    fn run_planned(
        &self,
        plan: &StreamedSearchPlan,
        queries: &Vectors<'_, T>,
        out: &mut TopK<f32>,
        workspace: &DeviceBuffer<u8>,
    ) -> Result<()> {
        let same_index =
            plan.plan.base == self.len && plan.plan.dim == self.dim && plan.metric == self.metric;
        let same_index = same_index && plan.gpu.same_device(&self.gpu);
        let planned = (same_index, self.dim, plan.plan.queries, plan.outputs(), plan.workspace_bytes());
        check_planned_search(&self.gpu, planned, queries, out, workspace)?;
        // SAFETY: the index borrows the base for its whole life, and dropping it drops the
        // copier's last handle, which waits for the copies queued here.
        unsafe {
            self.gpu.run_knn_streamed(&self.copier, &plan.plan, (queries.set(), self.base), workspace, out)
        }
    }

    /// [`StreamedIndex::search`] of queries in a host slice (`count · dim` values): uploads
    /// them, searches, downloads `(distances, indices)`.
    pub fn search_host(&self, queries: &[T], k: usize) -> Result<(Vec<f32>, Vec<u64>)> {
        let count = whole_vectors(queries.len(), self.dim)?;
        let data = self.gpu.upload(queries)?;
        let found = self.search(Vectors::new(&data, count, self.dim)?, k)?;
        Ok((self.gpu.download(&found.distances)?, self.gpu.download(&found.indices)?))
    }
}

/// A search of a [`StreamedIndex`] made ready for a number of queries and a `k`
/// ([`StreamedIndex::plan_search`]): its chunks and the workspace a run needs.
#[derive(Clone, Debug)]
pub struct StreamedSearchPlan {
    gpu: Gpu,
    metric: Metric,
    plan: StreamedPlan,
}

impl StreamedSearchPlan {
    /// Bytes of workspace a run needs ([`StreamedIndex::search_into`]).
    pub fn workspace_bytes(&self) -> usize {
        self.plan.workspace_bytes
    }

    /// Distances (and indices) a run writes: `queries · k`.
    pub fn outputs(&self) -> usize {
        self.plan.queries * self.plan.k
    }

    /// The number of queries planned for.
    pub fn queries(&self) -> usize {
        self.plan.queries
    }

    /// The `k` planned for.
    pub fn k(&self) -> usize {
        self.plan.k
    }

    /// The chunks a run copies the base in.
    pub fn chunks(&self) -> usize {
        self.plan.chunks.len()
    }
}

impl Gpu {
    /// An exact k-NN index over `base` (`count · dim` values in host memory, borrowed for
    /// the index's life and page-locked meanwhile where the driver allows), searched by
    /// `metric` on this handle's device with the base streamed in chunks: see
    /// [`StreamedIndex`].
    ///
    /// Errors: [`Error::EmptyInput`]; [`Error::InvalidArgument`] for values that do not make
    /// whole vectors; what forking a stream returns.
    pub fn streamed_index<'a, T: VectorComponent>(
        &self,
        base: &'a [T],
        dim: usize,
        metric: Metric,
    ) -> Result<StreamedIndex<'a, T>> {
        let len = whole_vectors(base.len(), dim)?;
        let copier = self.fork_stream()?;
        let pinned = self.pin_host(base);
        Ok(StreamedIndex { gpu: self.clone(), copier, base, len, dim, metric, pinned })
    }
}
