//! Exact k-nearest-neighbour search over vectors of `f32`, `half::f16` or `half::bf16`: a
//! flat index (the base vectors and their norms, computed once) searched by batches of
//! queries, and the k-NN graph of a base.

use gpu_select_kernels::knn::Metric;

use crate::buffer::DeviceBuffer;
use crate::engine::knn::{KnnRun, KnnStorage, VectorSet};
use crate::error::{Error, Result};
use crate::gpu::Gpu;
use crate::results::{Neighbours, TopK};
use crate::view::DeviceSlice;

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
    data: DeviceSlice<'a, T>,
    count: usize,
    dim: usize,
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

    fn set(&self) -> VectorSet<T> {
        VectorSet { data: self.data.buffer().global_ptr(), count: self.count, stride: self.stride }
    }
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
    base: Vectors<'a, T>,
    metric: Metric,
    /// The base's squared norms (one value, unused, for the inner product).
    norms: DeviceBuffer<f32>,
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
        self.base.dim
    }

    /// The metric it searches by.
    pub fn metric(&self) -> Metric {
        self.metric
    }

    /// The `k` nearest base vectors of each query: `queries.count() · k` distances and
    /// base indices, query after query, nearest first (see [`FlatIndex`]). Queued on the
    /// index's handle's stream; nothing waits.
    ///
    /// Errors: [`Error::InvalidArgument`] for queries of another dimension, or on another
    /// device; [`Error::KOutOfRange`] unless `1 ≤ k ≤` the base's size.
    pub fn search(&self, queries: Vectors<'_, T>, k: usize) -> Result<Neighbours> {
        queries.data.buffer().check_gpu(&self.gpu, "the queries")?;
        if queries.dim != self.base.dim {
            return Err(Error::invalid(format!(
                "queries of {} components searched in an index of {}",
                queries.dim, self.base.dim
            )));
        }
        if k == 0 || k > self.base.count {
            return Err(Error::k_out_of_range(
                k,
                1,
                self.base.count,
                format!("the index holds {} vectors", self.base.count),
            ));
        }
        self.run(queries.set(), k, false)
    }

    /// [`FlatIndex::search`] of queries in a host slice (`count · dim` values): uploads
    /// them, searches, downloads `(distances, indices)`.
    pub fn search_host(&self, queries: &[T], k: usize) -> Result<(Vec<f32>, Vec<u64>)> {
        if !queries.len().is_multiple_of(self.base.dim) {
            return Err(Error::invalid(format!(
                "{} values do not make vectors of {} components",
                queries.len(),
                self.base.dim
            )));
        }
        let data = self.gpu.upload(queries)?;
        let found = self.search(Vectors::new(&data, queries.len() / self.base.dim, self.base.dim)?, k)?;
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
        self.run(self.base.set(), k, true)
    }

    /// Queues every distance of `queries` to the base into `out` (`queries.count() · len()`,
    /// row after row), as the search ranks them: similarities negated. A measurement hook
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
        if queries.dim != self.base.dim || out.len() != len {
            return Err(Error::invalid("queries of the index's dimension, and an output of queries · base"));
        }
        let query_norms = self.gpu.alloc_uninit::<f32>(queries.count)?;
        self.gpu.knn_norms(queries.set(), queries.dim, query_norms.global_ptr())?;
        self.gpu.knn_distance_tile(
            (queries.set(), query_norms.global_ptr()),
            (self.base.set(), self.norms.global_ptr()),
            self.base.dim,
            self.metric,
            out.global_ptr(),
        )
    }

    fn run(&self, queries: VectorSet<T>, k: usize, drop_own: bool) -> Result<Neighbours> {
        let len = queries.count.checked_mul(k).ok_or_else(|| Error::invalid("queries · k overflows"))?;
        let mut out =
            TopK { values: self.gpu.alloc_uninit::<f32>(len)?, indices: self.gpu.alloc_uninit::<u64>(len)? };
        let run =
            KnnRun { metric: self.metric, k, base_norms: self.norms.global_ptr(), drop_own, out: &mut out };
        self.gpu.run_knn(queries, self.base.set(), self.base.dim, run)?;
        Ok(Neighbours { distances: out.values, indices: out.indices })
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
        if base.count >= u32::MAX as usize {
            return Err(Error::invalid(format!("{} base vectors: at most 2^32 − 2", base.count)));
        }
        let norms = if metric == Metric::InnerProduct {
            self.alloc_uninit::<f32>(1)?
        } else {
            let norms = self.alloc_uninit::<f32>(base.count)?;
            self.knn_norms(base.set(), base.dim, norms.global_ptr())?;
            norms
        };
        Ok(FlatIndex { gpu: self.clone(), base, metric, norms })
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
