//! Exact k-nearest-neighbour search over vectors of `f32`, `half::f16` or `half::bf16`: a
//! flat index (the base vectors and their norms, computed once) searched by batches of
//! queries, and the k-NN graph of a base.

use gpu_select_kernels::knn::Metric;

use std::marker::PhantomData;

use crate::buffer::DeviceBuffer;
use crate::engine::knn::{KnnPlan, KnnPrecision, KnnRun, KnnStorage, VectorSet, share};
use crate::error::{Error, Result};
use crate::gpu::Gpu;
use crate::results::{Neighbours, TopK, TopKOut};
use crate::view::{DeviceSlice, DeviceSliceMut};

/// What vector components may be stored as: `f32`, or half the bytes as `half::f16` or
/// `half::bf16` (widened to `f32` exactly as the kernels read them; every product and
/// distance is `f32`).
pub trait VectorComponent: KnnStorage {}
impl VectorComponent for f32 {}
impl VectorComponent for half::f16 {}
impl VectorComponent for half::bf16 {}

/// Vectors on the device: `count` rows of `dim` components (`f32` unless named:
/// [`VectorComponent`]), row-major, row `i` starting at component `i · stride`
/// (`stride ≥ dim`; BLAS's leading dimension).
///
/// ```
/// use gpu_select::{Gpu, Vectors};
///
/// let gpu = Gpu::emulator();
/// let data = gpu.upload(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0])?;
/// let three_of_two = Vectors::new(&data, 3, 2)?;
/// assert_eq!((three_of_two.count(), three_of_two.dim()), (3, 2));
/// // Two vectors of two components, stored three apart (the third component is skipped).
/// let strided = Vectors::strided(&data, 2, 2, 3)?;
/// assert_eq!(strided.count(), 2);
/// assert!(Vectors::new(&data, 4, 2).is_err()); // 8 components are not there
/// # Ok::<(), gpu_select::Error>(())
/// ```
#[derive(Debug)]
pub struct Vectors<'a, T: VectorComponent = f32> {
    pub(super) data: DeviceSlice<'a, T>,
    pub(super) count: usize,
    pub(super) dim: usize,
    stride: usize,
}

impl<'a, T: VectorComponent> Vectors<'a, T> {
    /// `count` vectors of `dim` components stored one after another: `data` holds exactly
    /// `count · dim` values.
    ///
    /// Errors: [`Error::EmptyInput`] for no vectors or no components;
    /// [`Error::LengthMismatch`] when `data` holds another number of values.
    pub fn new(data: impl Into<DeviceSlice<'a, T>>, count: usize, dim: usize) -> Result<Self> {
        let data = data.into();
        if count == 0 || dim == 0 {
            return Err(Error::EmptyInput);
        }
        let expected = count.checked_mul(dim).ok_or_else(|| Error::invalid("count · dim overflows"))?;
        if data.len() != expected {
            return Err(Error::LengthMismatch {
                what: "vector components (count · dim)",
                expected,
                actual: data.len(),
            });
        }
        Self::strided(data, count, dim, dim)
    }

    /// `count` vectors of `dim` components, vector `i` at component `i · stride`: `data`
    /// holds at least `(count − 1) · stride + dim` values.
    ///
    /// Errors: [`Error::EmptyInput`]; [`Error::InvalidArgument`] for `stride < dim`;
    /// [`Error::LengthMismatch`] when `data` is too short.
    pub fn strided(
        data: impl Into<DeviceSlice<'a, T>>,
        count: usize,
        dim: usize,
        stride: usize,
    ) -> Result<Self> {
        let data = data.into();
        if count == 0 || dim == 0 {
            return Err(Error::EmptyInput);
        }
        if stride < dim {
            return Err(Error::invalid(format!(
                "a stride of {stride} is shorter than a vector ({dim} components)"
            )));
        }
        let needed = (count - 1)
            .checked_mul(stride)
            .and_then(|len| len.checked_add(dim))
            .ok_or_else(|| Error::invalid("the vectors' extent overflows"))?;
        if data.len() < needed {
            return Err(Error::LengthMismatch {
                what: "vector components",
                expected: needed,
                actual: data.len(),
            });
        }
        Ok(Vectors { data, count, dim, stride })
    }

    /// Number of vectors.
    pub fn count(&self) -> usize {
        self.count
    }

    /// Components per vector.
    pub fn dim(&self) -> usize {
        self.dim
    }

    pub(super) fn set(&self) -> VectorSet<T> {
        VectorSet { data: self.data.buffer().global_ptr(), count: self.count, stride: self.stride }
    }
}

/// The number of vectors of `dim` components that `len` values make.
///
/// Errors: [`Error::EmptyInput`] for no values or no components; [`Error::InvalidArgument`]
/// when the values do not make whole vectors.
pub(super) fn whole_vectors(len: usize, dim: usize) -> Result<usize> {
    if len == 0 || dim == 0 {
        return Err(Error::EmptyInput);
    }
    if !len.is_multiple_of(dim) {
        return Err(Error::invalid(format!("{len} values do not make vectors of {dim} components")));
    }
    Ok(len / dim)
}

/// An exact (brute-force) k-NN index over base vectors the caller keeps on the device, as
/// Faiss's `GpuIndexFlat`: the base's squared norms are computed once, when the index is
/// made, and every search reuses them. Made by [`Gpu::flat_index`].
///
/// * Distances: squared L2 (`‖x − y‖²`), inner product `⟨x, y⟩` or cosine similarity
///   ([`Metric`]), in `f32`, through `‖x‖² + ‖y‖² − 2⟨x, y⟩` for L2 (clamped at 0; as
///   Faiss computes them, so a distance's rounding error is about `2⁻²³ · (‖x‖² + ‖y‖²)`).
/// * Results: `k` per query, nearest first (smallest distance, or largest similarity); ties
///   by lower base index.
/// * Non-finite components: a distance that is NaN ranks after every number under every
///   metric, so such vectors come last; infinities give infinite or NaN distances.
/// * A cosine with a zero vector is 0.
///
/// ```
/// use gpu_select::{Gpu, Metric, Vectors};
///
/// let gpu = Gpu::emulator();
/// // Four base points on a line, two queries.
/// let base = gpu.upload(&[0.0f32, 0.0, 1.0, 0.0, 2.0, 0.0, 3.0, 0.0])?;
/// let index = gpu.flat_index(Vectors::new(&base, 4, 2)?, Metric::L2)?;
/// let queries = gpu.upload(&[2.2f32, 0.0, -1.0, 0.0])?;
/// let found = index.search(Vectors::new(&queries, 2, 2)?, 2)?;
/// assert_eq!(gpu.download(&found.indices)?, [2, 3, 0, 1]);
/// let distances = gpu.download(&found.distances)?;
/// assert!((distances[0] - 0.04).abs() < 1e-5 && distances[2] == 1.0);
/// # Ok::<(), gpu_select::Error>(())
/// ```
#[derive(Debug)]
pub struct FlatIndex<'a, T: VectorComponent = f32> {
    gpu: Gpu,
    base: VectorSet<T>,
    dim: usize,
    metric: Metric,
    /// The base's squared norms (one value, unused, for the inner product in `f32`).
    norms: DeviceBuffer<f32>,
    /// How searches compute distances ([`FlatIndex::with_precision`]).
    precision: KnnPrecision,
    /// The largest of `norms` (TF32 searches' error bound); 0 until a TF32 precision is set.
    base_norm_max: f32,
    /// The base, when the index holds it ([`Gpu::upload_flat_index`]).
    _owned: Option<DeviceBuffer<T>>,
    /// The caller's base, borrowed for as long as the index lives.
    borrowed: PhantomData<DeviceSlice<'a, T>>,
}

impl<'a, T: VectorComponent> FlatIndex<'a, T> {
    /// Number of base vectors.
    pub fn len(&self) -> usize {
        self.base.count
    }

    /// Whether the index holds no vector (never: [`Gpu::flat_index`] refuses an empty base).
    pub fn is_empty(&self) -> bool {
        self.base.count == 0
    }

    /// Components per vector.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// The metric it searches by.
    pub fn metric(&self) -> Metric {
        self.metric
    }

    /// The index, searching with `precision` from now on ([`KnnPrecision`]): with
    /// [`KnnPrecision::Tf32Reranked`] the distance tiles run on the tensor cores and each
    /// query's candidates are re-ranked in `f32`, with the same neighbours as the `f32`
    /// search up to ties at the `k`-th distance. Setting it reads the base's norms back
    /// once (computing them first for the inner product): a wait.
    ///
    /// A TF32 search waits once at its end, for the values that prove each query's
    /// candidates; the queries it cannot prove (near-ties at the edge of the candidates,
    /// non-finite distances) are searched again in `f32`, with memory of their own. The
    /// k-NN graph ([`FlatIndex::knn_graph`]) always runs in `f32`.
    ///
    /// ```
    /// use gpu_select::{Gpu, KnnPrecision, Metric};
    ///
    /// let gpu = Gpu::emulator();
    /// let points: Vec<f32> = (0..200).map(|i| (i * 37 % 101) as f32).collect();
    /// let index = gpu.upload_flat_index(&points, 2, Metric::L2)?;
    /// let exact = index.search_host(&[20.0, 70.0], 5)?;
    /// let index = index.with_precision(KnnPrecision::Tf32Reranked)?;
    /// assert_eq!(index.search_host(&[20.0, 70.0], 5)?.1, exact.1);
    /// # Ok::<(), gpu_select::Error>(())
    /// ```
    pub fn with_precision(mut self, precision: KnnPrecision) -> Result<Self> {
        if precision != KnnPrecision::F32 {
            if self.metric == Metric::InnerProduct && self.norms.len() != self.base.count {
                let norms = self.gpu.alloc_uninit::<f32>(self.base.count)?;
                self.gpu.knn_norms(self.base, self.dim, norms.global_ptr())?;
                self.norms = norms;
            }
            // The largest squared norm; a NaN one is no bound (its vector's distances are
            // NaN, which the proof refuses anyway).
            let norms = self.gpu.download(&self.norms)?;
            self.base_norm_max = norms.iter().copied().filter(|norm| !norm.is_nan()).fold(0.0, f32::max);
        }
        self.precision = precision;
        Ok(self)
    }

    /// How searches compute distances.
    pub fn precision(&self) -> KnnPrecision {
        self.precision
    }

    /// The `k` nearest base vectors of each query: `queries.count() · k` distances and
    /// base indices, query after query, nearest first (see [`FlatIndex`]). Queued on the
    /// index's handle's stream. A search that writes its distance tiles waits for nothing; a
    /// filtered one ([`SearchPlan::filters`], the default where it pays) waits once at its
    /// end for each query's count of candidates and searches the rare query whose
    /// candidates overflowed again unfiltered, with memory of its own (the same results); a
    /// TF32 search waits likewise for its proofs ([`FlatIndex::with_precision`]).
    ///
    /// Errors: [`Error::InvalidArgument`] for queries of another dimension, or on another
    /// device; [`Error::KOutOfRange`] unless `1 ≤ k ≤` the base's size.
    pub fn search(&self, queries: Vectors<'_, T>, k: usize) -> Result<Neighbours> {
        let plan = self.plan_search(queries.count, k)?;
        self.with_outputs(&plan, |out, workspace| self.run_planned(&plan, &queries, out, workspace))
    }

    /// Plans searches of `queries` vectors for their `k` nearest: the checks of
    /// [`FlatIndex::search`], the tiles, and the workspace bytes a run needs
    /// ([`SearchPlan::workspace_bytes`]). Run it with [`FlatIndex::search_into`], as often as
    /// wanted, with no allocation.
    ///
    /// ```
    /// use gpu_select::{Gpu, Metric, TopK, Vectors};
    ///
    /// let gpu = Gpu::emulator();
    /// let base = gpu.upload(&[0.0f32, 1.0, 2.0, 3.0, 4.0])?;
    /// let index = gpu.flat_index(Vectors::new(&base, 5, 1)?, Metric::L2)?;
    /// let plan = index.plan_search(2, 2)?;
    /// let mut workspace = gpu.alloc_zeroed::<u8>(plan.workspace_bytes())?;
    /// let mut out = TopK { values: gpu.alloc_zeroed(plan.outputs())?, indices: gpu.alloc_zeroed(plan.outputs())? };
    /// for batch in [[0.2f32, 3.9], [1.6, 2.4]] {
    ///     let queries = gpu.upload(&batch)?;
    ///     index.search_into(&plan, Vectors::new(&queries, 2, 1)?, &mut out, &mut workspace)?;
    /// }
    /// assert_eq!(gpu.download(&out.indices)?, [2, 1, 2, 3]); // the last batch's
    /// # Ok::<(), gpu_select::Error>(())
    /// ```
    ///
    /// Errors: [`Error::EmptyInput`] for no queries; [`Error::KOutOfRange`] unless
    /// `1 ≤ k ≤ len()`.
    pub fn plan_search(&self, queries: usize, k: usize) -> Result<SearchPlan> {
        if queries == 0 {
            return Err(Error::EmptyInput);
        }
        check_k_within(k, self.base.count)?;
        let plan =
            self.gpu.plan_knn(queries, self.base.count, k, self.metric, false, self.precision, true)?;
        Ok(SearchPlan { gpu: self.gpu.clone(), dim: self.dim, plan })
    }

    /// Runs `plan` on `queries` (as many as planned, of the index's dimension) into `out`
    /// (`plan.outputs()` distances and indices: a [`TopK`]'s buffers or views of the
    /// caller's memory) with `workspace` (at least `plan.workspace_bytes()` bytes): no
    /// allocation; queued on the index's handle's stream, waiting only where
    /// [`FlatIndex::search`] says (and allocating then only for queries searched again).
    ///
    /// Errors: [`Error::InvalidArgument`] for queries of another shape than planned, another
    /// index's plan, memory on another device; [`Error::LengthMismatch`] for outputs of
    /// another length; [`Error::WorkspaceTooSmall`].
    pub fn search_into<'o>(
        &self,
        plan: &SearchPlan,
        queries: Vectors<'_, T>,
        out: impl Into<TopKOut<'o, f32>>,
        workspace: impl Into<DeviceSliceMut<'o, u8>>,
    ) -> Result<()> {
        let (mut out, mut workspace) = (out.into(), workspace.into());
        let mut out = TopK { values: out.values.buffer_mut(), indices: out.indices.buffer_mut() };
        self.run_planned(plan, &queries, &mut out, &workspace.buffer_mut())
    }

    /// [`FlatIndex::search`] of queries in a host slice (`count · dim` values): uploads
    /// them, searches, downloads `(distances, indices)`.
    pub fn search_host(&self, queries: &[T], k: usize) -> Result<(Vec<f32>, Vec<u64>)> {
        let count = whole_vectors(queries.len(), self.dim)?;
        let data = self.gpu.upload(queries)?;
        let found = self.search(Vectors::new(&data, count, self.dim)?, k)?;
        Ok((self.gpu.download(&found.distances)?, self.gpu.download(&found.indices)?))
    }

    /// The k-NN graph of the base: for every base vector, its `k` nearest *other* base
    /// vectors (itself left out by its index, whatever its distance; among exact
    /// duplicates the others are kept). `len() · k` neighbours, vector after vector.
    ///
    /// Errors: [`Error::KOutOfRange`] unless `1 ≤ k < len()`.
    ///
    /// ```
    /// use gpu_select::{Gpu, Metric, Vectors};
    ///
    /// let gpu = Gpu::emulator();
    /// let points = gpu.upload(&[0.0f32, 1.0, 1.5, 10.0])?; // four 1-D points
    /// let index = gpu.flat_index(Vectors::new(&points, 4, 1)?, Metric::L2)?;
    /// let graph = index.knn_graph(1)?;
    /// assert_eq!(gpu.download(&graph.indices)?, [1, 2, 1, 2]);
    /// # Ok::<(), gpu_select::Error>(())
    /// ```
    pub fn knn_graph(&self, k: usize) -> Result<Neighbours> {
        if k == 0 || k >= self.base.count {
            return Err(Error::k_out_of_range(
                k,
                1,
                self.base.count - 1,
                format!("a graph of {} vectors leaves each {} others", self.base.count, self.base.count - 1),
            ));
        }
        let plan = self.gpu.plan_knn(
            self.base.count,
            self.base.count,
            k,
            self.metric,
            true,
            KnnPrecision::F32,
            false,
        )?;
        let plan = SearchPlan { gpu: self.gpu.clone(), dim: self.dim, plan };
        self.with_outputs(&plan, |out, workspace| self.run_core(&plan, self.base, out, workspace))
    }

    /// Queues every distance of `queries` to the base into `out` (`queries.count() · len()`,
    /// row after row), as the search's tiles hold them (similarities negated; TF32 ones
    /// with [`KnnPrecision::Tf32Reranked`]). A measurement hook
    /// ([`crate::diagnostics::knn_distances`]).
    pub(crate) fn queue_distances(
        &self,
        queries: &Vectors<'_, T>,
        out: &mut DeviceBuffer<f32>,
    ) -> Result<()> {
        queries.data.buffer().check_gpu(&self.gpu, "the queries")?;
        out.check_gpu(&self.gpu, "the distances")?;
        let len = queries
            .count
            .checked_mul(self.base.count)
            .ok_or_else(|| Error::invalid("queries · base overflows"))?;
        if queries.dim != self.dim || out.len() != len {
            return Err(Error::invalid("queries of the index's dimension, and an output of queries · base"));
        }
        let query_norms = self.gpu.alloc_uninit::<f32>(queries.count)?;
        self.gpu.knn_norms(queries.set(), queries.dim, query_norms.global_ptr())?;
        self.gpu.knn_distance_tile(
            (queries.set(), query_norms.global_ptr()),
            (self.base, self.norms.global_ptr()),
            self.dim,
            (self.metric, self.precision),
            out.global_ptr(),
        )
    }

    /// How many of `queries` a search for their `k` nearest with this index's precision
    /// would search again in `f32` (0 unless TF32): the search without the second one. A
    /// measurement hook ([`crate::diagnostics::knn_unproven`]).
    pub(crate) fn unproven_queries(&self, queries: &Vectors<'_, T>, k: usize) -> Result<usize> {
        let plan = self.plan_search(queries.count, k)?;
        let mut unproven = 0;
        self.with_outputs(&plan, |out, workspace| {
            unproven = self.run_unproven(&plan, queries.set(), out, workspace)?.len();
            Ok(())
        })?;
        Ok(unproven)
    }

    /// Runs `run` with `plan`'s outputs and workspace taken from the pool.
    fn with_outputs(
        &self,
        plan: &SearchPlan,
        run: impl FnOnce(&mut TopK<f32>, &DeviceBuffer<u8>) -> Result<()>,
    ) -> Result<Neighbours> {
        with_outputs(&self.gpu, (plan.outputs(), plan.workspace_bytes()), run)
    }

    /// The engine's run of `plan` on `queries` into `out`.
    fn run_engine(
        &self,
        plan: &SearchPlan,
        queries: VectorSet<T>,
        out: &mut TopK<f32>,
        workspace: &DeviceBuffer<u8>,
    ) -> Result<()> {
        let run = KnnRun { base_norms: self.norms.global_ptr(), base_norm_max: self.base_norm_max, out };
        self.gpu.run_knn(&plan.plan, (queries, self.base, self.dim), workspace, run)
    }

    /// [`FlatIndex::run_engine`], then the queries to search again: those a TF32 search's
    /// proof leaves unproven, or whose candidates overflowed a filtered search's row.
    fn run_unproven(
        &self,
        plan: &SearchPlan,
        queries: VectorSet<T>,
        out: &mut TopK<f32>,
        workspace: &DeviceBuffer<u8>,
    ) -> Result<Vec<usize>> {
        self.run_engine(plan, queries, out, workspace)?;
        self.gpu.knn_unproven::<T>(&plan.plan, workspace, self.dim, self.base_norm_max)
    }

    /// The engine's run of `plan` on `queries`; for TF32, then the proof, and the `f32`
    /// search of the queries it does not prove (filtered: the unfiltered search of those
    /// whose candidates overflowed), each copied over its row of `out`.
    fn run_core(
        &self,
        plan: &SearchPlan,
        queries: VectorSet<T>,
        out: &mut TopK<f32>,
        workspace: &DeviceBuffer<u8>,
    ) -> Result<()> {
        let unproven = self.run_unproven(plan, queries, out, workspace)?;
        if unproven.is_empty() {
            return Ok(());
        }
        // The unproven queries side by side, searched in f32, and their rows copied back.
        let (dim, k) = (self.dim, plan.plan.k);
        let copy = |from: u64, to: u64, bytes: usize| self.gpu.copy_on_device(from, to, bytes);
        let again = self.gpu.alloc_uninit::<T>(unproven.len() * dim)?;
        for (row, &query) in unproven.iter().enumerate() {
            let from = queries.data.offset((query * queries.stride) as u64).address();
            copy(from, again.global_ptr().offset((row * dim) as u64).address(), dim * size_of::<T>())?;
        }
        let exact = self.gpu.plan_knn(
            unproven.len(),
            self.base.count,
            k,
            self.metric,
            false,
            KnnPrecision::F32,
            false,
        )?;
        let exact = SearchPlan { gpu: self.gpu.clone(), dim, plan: exact };
        let again_set = VectorSet { data: again.global_ptr(), count: unproven.len(), stride: dim };
        let searched =
            self.with_outputs(&exact, |found, scratch| self.run_engine(&exact, again_set, found, scratch))?;
        for (row, &query) in unproven.iter().enumerate() {
            let (from, to) = ((row * k) as u64, (query * k) as u64);
            let distances = (searched.distances.global_ptr(), out.values.global_ptr());
            copy(distances.0.offset(from).address(), distances.1.offset(to).address(), k * 4)?;
            let indices = (searched.indices.global_ptr(), out.indices.global_ptr());
            copy(indices.0.offset(from).address(), indices.1.offset(to).address(), k * 8)?;
        }
        // The copies read buffers freed on return.
        self.gpu.synchronize()
    }

    /// Checks `queries`, the outputs and the workspace against `plan`, then runs it.
    fn run_planned(
        &self,
        plan: &SearchPlan,
        queries: &Vectors<'_, T>,
        out: &mut TopK<f32>,
        workspace: &DeviceBuffer<u8>,
    ) -> Result<()> {
        let same_index =
            plan.dim == self.dim && plan.plan.base == self.base.count && plan.plan.metric == self.metric;
        let same_index = same_index && plan.gpu.same_device(&self.gpu);
        let planned = (same_index, self.dim, plan.plan.queries, plan.outputs(), plan.workspace_bytes());
        check_planned_search(&self.gpu, planned, queries, out, workspace)?;
        self.run_core(plan, queries.set(), out, workspace)
    }
}

/// Runs `run` with outputs of `outputs` distances and indices and a workspace of
/// `workspace_bytes` bytes taken from `gpu`'s pool: the convenient searches of every index.
pub(super) fn with_outputs(
    gpu: &Gpu,
    (outputs, workspace_bytes): (usize, usize),
    run: impl FnOnce(&mut TopK<f32>, &DeviceBuffer<u8>) -> Result<()>,
) -> Result<Neighbours> {
    let mut out =
        TopK { values: gpu.alloc_uninit::<f32>(outputs)?, indices: gpu.alloc_uninit::<u64>(outputs)? };
    run(&mut out, &gpu.alloc_uninit::<u8>(workspace_bytes.max(1))?)?;
    Ok(Neighbours { distances: out.values, indices: out.indices })
}

/// Checks `1 ≤ k ≤ len` for an index of `len` vectors.
pub(super) fn check_k_within(k: usize, len: usize) -> Result<()> {
    if k == 0 || k > len {
        return Err(Error::k_out_of_range(k, 1, len, format!("the index holds {len} vectors")));
    }
    Ok(())
}

/// The checks a planned search (of either index) makes of its queries, outputs and
/// workspace. `plan`: whether it was made for this index on this device, the index's
/// dimension, and the plan's queries, outputs and workspace bytes.
pub(super) fn check_planned_search<T: VectorComponent>(
    gpu: &Gpu,
    (same_index, dim, planned, outputs, workspace_bytes): (bool, usize, usize, usize, usize),
    queries: &Vectors<'_, T>,
    out: &TopK<f32>,
    workspace: &DeviceBuffer<u8>,
) -> Result<()> {
    queries.data.buffer().check_gpu(gpu, "the queries")?;
    if !same_index {
        return Err(Error::invalid("the plan was made for another index"));
    }
    if queries.dim != dim {
        return Err(Error::invalid(format!(
            "queries of {} components searched in an index of {dim}",
            queries.dim
        )));
    }
    if queries.count != planned {
        return Err(Error::invalid(format!("{} queries, the plan is for {planned}", queries.count)));
    }
    gpu.check_outputs(out, outputs, ["k-NN output distances", "k-NN output indices"])?;
    gpu.check_workspace(workspace, workspace_bytes)
}

/// A search of a [`FlatIndex`] made ready for a number of queries and a `k`
/// ([`FlatIndex::plan_search`]): its tiles and the workspace a run needs.
#[derive(Clone, Debug)]
pub struct SearchPlan {
    gpu: Gpu,
    dim: usize,
    plan: KnnPlan,
}

impl SearchPlan {
    /// Bytes of workspace a run needs ([`FlatIndex::search_into`]).
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

    /// Whether the search filters its distances as the product makes them
    /// ([`Tuning::knn_filter`](crate::Tuning::knn_filter)) rather than writing distance tiles.
    ///
    /// ```
    /// use gpu_select::{Gpu, Metric, Tuning, Vectors};
    ///
    /// let gpu = Gpu::emulator();
    /// let base: Vec<f32> = (0..5000).map(|i| (i * 7919 % 5000) as f32).collect();
    /// let data = gpu.upload(&base)?;
    /// let index = gpu.flat_index(Vectors::new(&data, 5000, 1)?, Metric::L2)?;
    /// assert!(index.plan_search(3, 5)?.filters());
    /// assert!(!index.plan_search(3, 2000)?.filters()); // rows of candidates too long
    /// let tiles = gpu.with_tuning(Tuning { knn_filter: false, ..*gpu.tuning() });
    /// let index = tiles.flat_index(Vectors::new(&data, 5000, 1)?, Metric::L2)?;
    /// assert!(!index.plan_search(3, 5)?.filters());
    /// # Ok::<(), gpu_select::Error>(())
    /// ```
    pub fn filters(&self) -> bool {
        self.plan.filters()
    }
}

impl Gpu {
    /// An exact k-NN index over `base` (kept by the caller, borrowed), searched by
    /// `metric`: computes the base's squared norms (queued on this handle's stream).
    ///
    /// Errors: [`Error::InvalidArgument`] for a base on another device, or of `2^32 − 1`
    /// vectors or more (distances are ranked with 32-bit positions per column tile).
    pub fn flat_index<'a, T: VectorComponent>(
        &self,
        base: Vectors<'a, T>,
        metric: Metric,
    ) -> Result<FlatIndex<'a, T>> {
        base.data.buffer().check_gpu(self, "the base vectors")?;
        self.index_of(base.set(), base.dim, metric, None)
    }

    /// An exact k-NN index that holds its base: `base` (`count · dim` values) uploaded to
    /// this handle's device. The form for an index that outlives the caller's buffers, and
    /// for several GPUs ([`MultiGpuIndex`]).
    ///
    /// Errors: as [`Vectors::new`] and [`Gpu::flat_index`].
    ///
    /// ```
    /// use gpu_select::{Gpu, Metric};
    ///
    /// let gpu = Gpu::emulator();
    /// let index = gpu.upload_flat_index(&[0.0f32, 1.0, 5.0], 1, Metric::L2)?;
    /// assert_eq!(index.search_host(&[4.0], 1)?, (vec![1.0], vec![2]));
    /// # Ok::<(), gpu_select::Error>(())
    /// ```
    pub fn upload_flat_index<T: VectorComponent>(
        &self,
        base: &[T],
        dim: usize,
        metric: Metric,
    ) -> Result<FlatIndex<'static, T>> {
        let count = whole_vectors(base.len(), dim)?;
        let data = self.upload(base)?;
        let set = VectorSet { data: data.global_ptr(), count, stride: dim };
        self.index_of(set, dim, metric, Some(data))
    }

    /// The index over `base` (on this handle's device), its norms queued.
    fn index_of<'a, T: VectorComponent>(
        &self,
        base: VectorSet<T>,
        dim: usize,
        metric: Metric,
        owned: Option<DeviceBuffer<T>>,
    ) -> Result<FlatIndex<'a, T>> {
        if base.count >= u32::MAX as usize {
            return Err(Error::invalid(format!("{} base vectors: at most 2^32 − 2", base.count)));
        }
        let norms = if metric == Metric::InnerProduct {
            self.alloc_uninit::<f32>(1)?
        } else {
            let norms = self.alloc_uninit::<f32>(base.count)?;
            self.knn_norms(base, dim, norms.global_ptr())?;
            norms
        };
        Ok(FlatIndex {
            gpu: self.clone(),
            base,
            dim,
            metric,
            norms,
            precision: KnnPrecision::F32,
            base_norm_max: 0.0,
            _owned: owned,
            borrowed: PhantomData,
        })
    }

    /// The `k` nearest of `base` to each of `queries` by `metric`: a [`FlatIndex`] made
    /// for this one search (see it and [`FlatIndex::search`] for order, ties, non-finite
    /// components and errors). To search one base many times, make the index once.
    ///
    /// ```
    /// use gpu_select::{Gpu, Metric, Vectors};
    ///
    /// let gpu = Gpu::emulator();
    /// let base = gpu.upload(&[1.0f32, 0.0, 0.0, 1.0, -1.0, 0.0])?; // three unit vectors
    /// let query = gpu.upload(&[0.8f32, 0.6])?;
    /// let found = gpu.knn(Vectors::new(&query, 1, 2)?, Vectors::new(&base, 3, 2)?, 3, Metric::InnerProduct)?;
    /// assert_eq!(gpu.download(&found.indices)?, [0, 1, 2]); // largest inner product first
    /// assert_eq!(gpu.download(&found.distances)?, [0.8, 0.6, -0.8]);
    /// # Ok::<(), gpu_select::Error>(())
    /// ```
    pub fn knn<T: VectorComponent>(
        &self,
        queries: Vectors<'_, T>,
        base: Vectors<'_, T>,
        k: usize,
        metric: Metric,
    ) -> Result<Neighbours> {
        self.flat_index(base, metric)?.search(queries, k)
    }
}

/// How a [`MultiGpuIndex`] spreads a base and its searches over several GPUs (Faiss's
/// `IndexShards` and `IndexReplicas`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// Each GPU holds a share of the base (in order: the first GPU the first vectors) and
    /// searches every query in it; one more k-selection merges the shares' best. The base
    /// is held once over all the GPUs: for a base larger than one GPU's memory.
    Sharded,
    /// Each GPU holds the whole base and searches a share of the queries: for many queries
    /// on a base that fits one GPU.
    Replicated,
}

/// An exact k-NN index over several GPUs (or several handles of one, or the emulator): a
/// [`FlatIndex`] per GPU, [sharded or replicated](Placement). Its results are the one-GPU
/// index's, bit for bit: the same distances (each pair's arithmetic does not depend on the
/// tiling), the same order, ties by lower base index. The GPUs work at once; their results
/// meet on the first GPU, copied through the host.
///
/// ```
/// use gpu_select::{Gpu, Metric, MultiGpuIndex, Placement};
///
/// // Two handles (on a machine with two GPUs: Gpu::cuda(0)?, Gpu::cuda(1)?).
/// let gpus = [Gpu::emulator(), Gpu::emulator()];
/// let base: Vec<f32> = (0..100).map(|i| i as f32).collect(); // 100 points on a line
/// let index = MultiGpuIndex::new(&gpus, &base, 1, Metric::L2, Placement::Sharded)?;
/// let (distances, indices) = index.search_host(&[49.6, 80.0], 2)?;
/// assert_eq!(indices, [50, 49, 80, 79]); // 79 and 81 tie: the lower index
/// assert_eq!(distances[2..], [0.0, 1.0]);
/// # Ok::<(), gpu_select::Error>(())
/// ```
#[derive(Debug)]
pub struct MultiGpuIndex<T: VectorComponent = f32> {
    parts: Vec<FlatIndex<'static, T>>,
    /// Sharded: each part's first base index.
    first: Vec<usize>,
    placement: Placement,
    len: usize,
    dim: usize,
    metric: Metric,
}

impl<T: VectorComponent> MultiGpuIndex<T> {
    /// Uploads `base` (`count · dim` values, host memory) to the GPUs of `gpus` as
    /// `placement` says (a GPU left without vectors, when the base has fewer than there are
    /// GPUs, takes no part), and computes each part's norms.
    ///
    /// Errors: [`Error::InvalidArgument`] for no GPUs, or values that do not make whole
    /// vectors; [`Error::EmptyInput`]; what uploading returns ([`Error::OutOfMemory`]).
    pub fn new(gpus: &[Gpu], base: &[T], dim: usize, metric: Metric, placement: Placement) -> Result<Self> {
        if gpus.is_empty() {
            return Err(Error::invalid("a multi-GPU index needs at least one GPU handle"));
        }
        let len = whole_vectors(base.len(), dim)?;
        let (mut parts, mut first) = (Vec::new(), Vec::new());
        match placement {
            Placement::Sharded => {
                for (gpu, (start, count)) in
                    gpus.iter().zip((0..gpus.len()).map(|part| share(len, gpus.len(), part)))
                {
                    if count > 0 {
                        parts.push(gpu.upload_flat_index(
                            &base[start * dim..(start + count) * dim],
                            dim,
                            metric,
                        )?);
                        first.push(start);
                    }
                }
            }
            Placement::Replicated => {
                for gpu in gpus {
                    parts.push(gpu.upload_flat_index(base, dim, metric)?);
                    first.push(0);
                }
            }
        }
        Ok(MultiGpuIndex { parts, first, placement, len, dim, metric })
    }

    /// Number of base vectors.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the index holds no vector (never: [`MultiGpuIndex::new`] refuses an empty
    /// base).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Components per vector.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// How the base and the searches are spread.
    pub fn placement(&self) -> Placement {
        self.placement
    }

    /// The handles that hold a part, in order (the first also merges the results).
    pub fn gpus(&self) -> Vec<&Gpu> {
        self.parts.iter().map(|part| &part.gpu).collect()
    }

    /// The `k` nearest base vectors of each query (`count · dim` values, host memory), as
    /// [`FlatIndex::search`] gives them, on the first GPU. Waits for the GPUs' parts (their
    /// results are copied to the first GPU through the host).
    ///
    /// Errors: [`Error::InvalidArgument`] for values that do not make whole vectors;
    /// [`Error::EmptyInput`]; [`Error::KOutOfRange`] unless `1 ≤ k ≤ len()`.
    pub fn search(&self, queries: &[T], k: usize) -> Result<Neighbours> {
        let count = whole_vectors(queries.len(), self.dim)?;
        check_k_within(k, self.len)?;
        let merger = &self.parts[0].gpu;
        match self.placement {
            Placement::Sharded => {
                // Every part searches every query, all at once; then their best are laid
                // side by side per query (similarities negated, so that the merge ranks
                // as the one-GPU search does: NaN last) and selected once more.
                let mut found = Vec::with_capacity(self.parts.len());
                for part in &self.parts {
                    let data = part.gpu.upload(queries)?;
                    let kept = k.min(part.len());
                    // (A statement of its own: the view of `data` ends before `data` moves.)
                    let neighbours = part.search(Vectors::new(&data, count, self.dim)?, kept)?;
                    found.push((neighbours, kept, data));
                }
                let width: usize = found.iter().map(|(_, kept, _)| kept).sum();
                let (mut values, mut indices) = (vec![0.0f32; count * width], vec![0u64; count * width]);
                let mut column = 0;
                for ((neighbours, kept, _), &first) in found.iter().zip(&self.first) {
                    let gpu = neighbours.distances.gpu();
                    let (part_values, part_indices) =
                        (gpu.download(&neighbours.distances)?, gpu.download(&neighbours.indices)?);
                    for q in 0..count {
                        for j in 0..*kept {
                            let value = part_values[q * kept + j];
                            values[q * width + column + j] =
                                if self.metric.is_similarity() { -value } else { value };
                            indices[q * width + column + j] = part_indices[q * kept + j] + first as u64;
                        }
                    }
                    column += kept;
                }
                let candidates = TopK { values: merger.upload(&values)?, indices: merger.upload(&indices)? };
                let best = merger.knn_merge(&candidates, (count, width), k, self.metric)?;
                Ok(Neighbours { distances: best.values, indices: best.indices })
            }
            Placement::Replicated => {
                // Each part searches its share of the queries; the shares' results, in
                // query order, on the first GPU.
                let mut found = Vec::new();
                for (part, (start, share)) in self
                    .parts
                    .iter()
                    .zip((0..self.parts.len()).map(|part| share(count, self.parts.len(), part)))
                {
                    if share > 0 {
                        let data = part.gpu.upload(&queries[start * self.dim..(start + share) * self.dim])?;
                        let neighbours = part.search(Vectors::new(&data, share, self.dim)?, k)?;
                        found.push((neighbours, data));
                    }
                }
                let (mut values, mut indices) =
                    (Vec::with_capacity(count * k), Vec::with_capacity(count * k));
                for (neighbours, _) in &found {
                    let gpu = neighbours.distances.gpu();
                    values.extend(gpu.download(&neighbours.distances)?);
                    indices.extend(gpu.download(&neighbours.indices)?);
                }
                Ok(Neighbours { distances: merger.upload(&values)?, indices: merger.upload(&indices)? })
            }
        }
    }

    /// [`MultiGpuIndex::search`], downloaded: `(distances, indices)`.
    pub fn search_host(&self, queries: &[T], k: usize) -> Result<(Vec<f32>, Vec<u64>)> {
        let found = self.search(queries, k)?;
        let gpu = &self.parts[0].gpu;
        Ok((gpu.download(&found.distances)?, gpu.download(&found.indices)?))
    }
}
