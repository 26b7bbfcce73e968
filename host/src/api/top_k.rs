//! Top-k: the `k` largest or smallest keys of an array, or of every row of a batch, with
//! their indices.

use std::marker::PhantomData;

use gpu_select_kernels::params::GlobalPtr;

use super::input::{Keys, Layout};
use crate::SelectKey;
use crate::buffer::DeviceBuffer;
use crate::engine::bitonic::BitonicPlan;
use crate::engine::rows::{RowsAlgorithm, RowsSpec};
use crate::engine::top_k::Plan;
use crate::error::{Error, Result};
use crate::gpu::Gpu;
use crate::options::{Algorithm, TopKFusion, TopKOptions};
use crate::results::{TopK, TopKOut};
use crate::view::DeviceSliceMut;

/// A top-k made ready for one input shape: its checks, its algorithm's launch shapes and the
/// workspace bytes a run needs ([`TopKPlan::workspace_bytes`]). Run it with
/// [`Gpu::top_k_into`] on any input of the same shape (for ragged rows: the same offsets),
/// as often as wanted, with no allocation.
///
/// ```
/// use gpu_select::{Gpu, Keys, TopK, TopKOptions};
///
/// let gpu = Gpu::emulator();
/// let (rows, cols, k) = (3, 1000, 10);
/// let keys: Vec<u32> = (0..rows * cols).map(|i| (i as u32).wrapping_mul(2_654_435_761)).collect();
/// let matrix = gpu.upload(&keys)?;
/// let plan = gpu.plan_top_k(&Keys::rows(&matrix, rows, cols), k, &TopKOptions::smallest())?;
/// let mut workspace = gpu.alloc_zeroed::<u8>(plan.workspace_bytes())?;
/// let mut out = TopK { values: gpu.alloc_zeroed::<u32>(plan.outputs())?, indices: gpu.alloc_zeroed(plan.outputs())? };
/// // Reused call after call, as a loop over batches would.
/// gpu.top_k_into(&plan, Keys::rows(&matrix, rows, cols), &mut out, &mut workspace)?;
/// let mut expected = keys[..cols].to_vec();
/// expected.sort();
/// assert_eq!(gpu.download(&out.values)?[..k], expected[..k]);
/// # Ok::<(), gpu_select::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct TopKPlan<K> {
    /// The handle it was planned on (its device, for checks and predictions).
    gpu: Gpu,
    k: usize,
    options: TopKOptions,
    input: PlannedInput,
    kind: PlanKind,
    workspace_bytes: usize,
    key: PhantomData<fn() -> K>,
}

/// The input shape a plan is for.
#[derive(Clone, Debug, PartialEq, Eq)]
enum PlannedInput {
    Flat { n: usize },
    Rows(RowsSpec),
}

/// How the plan runs.
#[derive(Clone, Debug)]
enum PlanKind {
    /// One array: the engine's plan of the algorithm.
    Flat(Plan),
    /// One array with a filter or transform: the fused bitonic top-k.
    Fused(BitonicPlan),
    /// One small array with `Auto`: the rows' radix kernel, the array as one row
    /// ([`Gpu::one_row_pays`]).
    OneRow(RowsSpec),
    /// Rows: their kernel (planned again at the run: microseconds, from the spec).
    Rows(RowsAlgorithm),
}

impl<K: SelectKey> TopKPlan<K> {
    /// Bytes of workspace a run needs (the workspace of [`Gpu::top_k_into`]).
    pub fn workspace_bytes(&self) -> usize {
        self.workspace_bytes
    }

    /// Values (and indices) a run writes: `rows · k` (`k` for one array).
    pub fn outputs(&self) -> usize {
        self.rows() * self.k
    }

    /// Rows of the input (1 for one array).
    pub fn rows(&self) -> usize {
        match &self.input {
            PlannedInput::Flat { .. } => 1,
            PlannedInput::Rows(spec) => spec.count(),
        }
    }

    /// The `k` planned for.
    pub fn k(&self) -> usize {
        self.k
    }

    /// The cost model's time for the run, in milliseconds, on the device planned on; for
    /// [`Algorithm::Auto`], of the algorithm it picked. `None` on the emulator (whose speed
    /// says nothing about a GPU's), for fused and ragged runs, and for rows with `k`
    /// beyond 2048 (one top-k per row; not a choice the model makes).
    ///
    /// ```
    /// use gpu_select::{Gpu, Keys, TopKOptions};
    ///
    /// let gpu = Gpu::emulator();
    /// let data = gpu.upload(&[1.0f32; 4096])?;
    /// let plan = gpu.plan_top_k(&Keys::new(&data), 32, &TopKOptions::largest())?;
    /// assert_eq!(plan.predicted_ms(), None); // the emulator
    /// # Ok::<(), gpu_select::Error>(())
    /// ```
    pub fn predicted_ms(&self) -> Option<f64> {
        let key_bytes = size_of::<K>();
        match (&self.input, &self.kind) {
            (PlannedInput::Flat { n }, PlanKind::Flat(_)) => {
                self.gpu.top_k_predicted_ms(*n, self.k, key_bytes, self.options.algorithm)
            }
            (PlannedInput::Rows(spec), PlanKind::Rows(algorithm)) if spec.offsets().is_none() => {
                self.gpu.rows_predicted_ms(spec, self.k, key_bytes, *algorithm)
            }
            (_, PlanKind::OneRow(spec)) => {
                self.gpu.rows_predicted_ms(spec, self.k, key_bytes, RowsAlgorithm::RadixSelect)
            }
            _ => None,
        }
    }

    /// Checks that `keys` have the shape planned for and are on `gpu`'s device.
    fn check_keys(&self, gpu: &Gpu, keys: &Keys<'_, K>) -> Result<()> {
        if !self.gpu.same_device(gpu) {
            return Err(Error::invalid("the plan was made on another device than the handle called"));
        }
        keys.data.buffer().check_gpu(gpu, "the keys")?;
        let matches = match (&keys.layout, &self.input) {
            (Layout::Flat, PlannedInput::Flat { n }) => keys.data.len() == *n,
            (Layout::Dense { rows, cols, stride, .. }, PlannedInput::Rows(spec)) => {
                spec.offsets().is_none()
                    && RowsSpec::dense(*rows, *cols, *stride, self.k).as_ref() == Ok(spec)
            }
            (Layout::Ragged(offsets), PlannedInput::Rows(spec)) => {
                offsets.buffer().check_gpu(gpu, "the row offsets")?;
                spec.offsets().is_some_and(|planned| planned.len() == offsets.len())
            }
            _ => false,
        };
        if !matches {
            return Err(Error::invalid("the keys do not have the shape the plan was made for"));
        }
        if keys.is_fused() != matches!(self.kind, PlanKind::Fused(_)) {
            return Err(Error::invalid(
                "the keys' filter or transform differs from the plan's: plan with the same Keys",
            ));
        }
        let exact = matches!(keys.layout, Layout::Dense { exact: true, .. });
        if let PlannedInput::Rows(spec) = &self.input
            && (keys.data.len() < spec.data_len() || exact && keys.data.len() != spec.data_len())
        {
            return Err(Error::LengthMismatch {
                what: "keys (rows as described)",
                expected: spec.data_len(),
                actual: keys.data.len(),
            });
        }
        if let Some(indices) = &keys.indices {
            indices.buffer().check_gpu(gpu, "the caller's indices")?;
            if indices.len() != keys.data.len() {
                return Err(Error::LengthMismatch {
                    what: "caller's indices (one per key)",
                    expected: keys.data.len(),
                    actual: indices.len(),
                });
            }
        }
        Ok(())
    }
}

impl Gpu {
    /// The `k` largest (or smallest) keys and their indices: of one array, or of every row.
    ///
    /// * Order: the total order of [`Key`](crate::Key): NaN above +inf (so `Largest` returns
    ///   NaNs first), -0.0 below +0.0.
    /// * Results: `k` per row, best first (unless [`TopKOptions::sorted`] is off), row after
    ///   row; indices are positions (one array), columns (rows) or the caller's
    ///   ([`Keys::with_indices`]).
    /// * Ties: deterministic, equal keys by lower index first; the same input gives the same
    ///   output every run.
    /// * Errors: [`Error::EmptyInput`]; [`Error::KOutOfRange`] for `k = 0`, `k` over the
    ///   array's or a dense row's length, or over the chosen algorithm's bound;
    ///   [`Error::InvalidArgument`] for an input the algorithm does not take (see
    ///   [`Algorithm`]); [`Error::LengthMismatch`] for data or indices of another length
    ///   than described.
    /// * Waits: see [the list](crate::Gpu#which-calls-wait); the workspace and outputs come
    ///   from the handle's pool, so repeated calls allocate nothing new from the driver.
    ///
    /// ```
    /// use gpu_select::{Gpu, TopKOptions};
    ///
    /// let gpu = Gpu::emulator();
    /// let data = gpu.upload(&[4.0f32, 9.5, -1.0, 9.5, 7.0])?;
    /// let top = gpu.top_k(&data, 3, &TopKOptions::largest())?;
    /// assert_eq!(gpu.download(&top.values)?, [9.5, 9.5, 7.0]);
    /// assert_eq!(gpu.download(&top.indices)?, [1, 3, 4]);
    /// # Ok::<(), gpu_select::Error>(())
    /// ```
    pub fn top_k<'a, K: SelectKey>(
        &self,
        keys: impl Into<Keys<'a, K>>,
        k: usize,
        options: &TopKOptions,
    ) -> Result<TopK<K>> {
        let keys = keys.into();
        let plan = self.plan_top_k(&keys, k, options)?;
        // Nothing zeroed: the run clears what its kernels count into, and writes every
        // output. The workspace goes back to the pool in stream order, after the kernels.
        let mut workspace = self.alloc_uninit::<u8>(plan.workspace_bytes)?;
        let outputs = plan.outputs();
        let mut out =
            TopK { values: self.alloc_uninit::<K>(outputs)?, indices: self.alloc_uninit::<u64>(outputs)? };
        self.run_top_k_plan(&plan, &keys, &mut out, &mut workspace)?;
        Ok(out)
    }

    /// Plans a top-k of `keys`' shape (their data is not read, but for ragged rows' offsets):
    /// the checks and the errors of [`Gpu::top_k`], and the workspace a run needs.
    pub fn plan_top_k<K: SelectKey>(
        &self,
        keys: &Keys<'_, K>,
        k: usize,
        options: &TopKOptions,
    ) -> Result<TopKPlan<K>> {
        keys.data.buffer().check_gpu(self, "the keys")?;
        let key_bytes = size_of::<K>();
        let (input, kind, workspace_bytes) = match &keys.layout {
            Layout::Flat => {
                let n = keys.data.len();
                if options.algorithm == Algorithm::WarpSelect {
                    return Err(Error::invalid(
                        "Algorithm::WarpSelect runs per row: describe the keys as rows (Keys::rows)",
                    ));
                }
                if keys.is_fused() {
                    let plan = self.plan_top_k_fused(n, k, key_bytes, options)?;
                    let bytes =
                        crate::engine::bitonic::BitonicWorkspace::new(&plan, k as u32, key_bytes).bytes;
                    (PlannedInput::Flat { n }, PlanKind::Fused(plan), bytes)
                } else if options.algorithm == Algorithm::Auto
                    && (1..=n).contains(&k)
                    && Gpu::one_row_pays(n, k, key_bytes)
                {
                    let spec = RowsSpec::dense(1, n, n, k)?;
                    let bytes =
                        self.rows_workspace_bytes::<K>(&spec, k, options.order, RowsAlgorithm::RadixSelect)?;
                    (PlannedInput::Flat { n }, PlanKind::OneRow(spec), bytes)
                } else {
                    let plan = self.plan_array_top_k(n, k, key_bytes, options)?;
                    let bytes = plan.workspace_bytes(n, k, key_bytes);
                    (PlannedInput::Flat { n }, PlanKind::Flat(plan), bytes)
                }
            }
            layout => {
                if keys.is_fused() {
                    return Err(Error::invalid(
                        "filters and key transforms are fused into one array's top-k only",
                    ));
                }
                let algorithm = RowsAlgorithm::of(options.algorithm).ok_or_else(|| {
                    Error::invalid(format!(
                        "Algorithm::{:?} takes one array; rows take Auto, WarpSelect or RadixSelect",
                        options.algorithm
                    ))
                })?;
                let spec = match layout {
                    Layout::Dense { rows, cols, stride, .. } => RowsSpec::dense(*rows, *cols, *stride, k)?,
                    Layout::Ragged(offsets) => {
                        offsets.buffer().check_gpu(self, "the row offsets")?;
                        if offsets.len() < 2 {
                            return Err(Error::EmptyInput);
                        }
                        RowsSpec::ragged(self.download(offsets)?, keys.data.len(), k)?
                    }
                    Layout::Flat => unreachable!("matched above"),
                };
                let bytes = self.rows_workspace_bytes::<K>(&spec, k, options.order, algorithm)?;
                (PlannedInput::Rows(spec), PlanKind::Rows(algorithm), bytes)
            }
        };
        Ok(TopKPlan {
            gpu: self.clone(),
            k,
            options: *options,
            input,
            kind,
            workspace_bytes,
            key: PhantomData,
        })
    }

    /// Runs `plan` on `keys` (of the shape planned for) into `out` (`plan.outputs()` values
    /// and indices) with `workspace` (at least `plan.workspace_bytes()` bytes): no
    /// allocation. Queues the work on this handle's stream (a download of `out` waits for
    /// it); waits only as [the list](crate::Gpu#which-calls-wait) says.
    ///
    /// Errors: [`Error::InvalidArgument`] for keys of another shape than planned;
    /// [`Error::LengthMismatch`] for outputs of another length; [`Error::WorkspaceTooSmall`].
    pub fn top_k_into<'a, 'o, K: SelectKey>(
        &self,
        plan: &TopKPlan<K>,
        keys: impl Into<Keys<'a, K>>,
        out: impl Into<TopKOut<'o, K>>,
        workspace: impl Into<DeviceSliceMut<'o, u8>>,
    ) -> Result<()> {
        let keys = keys.into();
        let mut out = out.into();
        let mut workspace = workspace.into();
        let mut out = TopK { values: out.values.buffer_mut(), indices: out.indices.buffer_mut() };
        let mut workspace = workspace.buffer_mut();
        self.run_top_k_plan(plan, &keys, &mut out, &mut workspace)
    }

    /// A top-k of a host slice, as `rows` rows of equal length (1 for one array): uploads
    /// it, runs [`Gpu::top_k`], downloads the values and indices.
    ///
    /// ```
    /// use gpu_select::{Gpu, TopKOptions};
    ///
    /// let gpu = Gpu::emulator();
    /// let (values, indices) = gpu.top_k_host(&[3u32, 9, 1, 7, 5, 5, 8, 2], 2, 2, &TopKOptions::smallest())?;
    /// assert_eq!(values, [1, 3, 2, 5]);
    /// assert_eq!(indices, [2, 0, 3, 0]);
    /// # Ok::<(), gpu_select::Error>(())
    /// ```
    pub fn top_k_host<K: SelectKey>(
        &self,
        keys: &[K],
        rows: usize,
        k: usize,
        options: &TopKOptions,
    ) -> Result<(Vec<K>, Vec<u64>)> {
        if rows == 0 || !keys.len().is_multiple_of(rows) {
            return Err(Error::invalid(format!(
                "{} keys do not make {rows} rows of equal length",
                keys.len()
            )));
        }
        let data = self.upload(keys)?;
        let top = if rows == 1 {
            self.top_k(&data, k, options)?
        } else {
            self.top_k(Keys::rows(&data, rows, keys.len() / rows), k, options)?
        };
        Ok((self.download(&top.values)?, self.download(&top.indices)?))
    }

    /// The run shared by [`Gpu::top_k`] and [`Gpu::top_k_into`]: checks, then the engine.
    fn run_top_k_plan<K: SelectKey>(
        &self,
        plan: &TopKPlan<K>,
        keys: &Keys<'_, K>,
        out: &mut TopK<K>,
        workspace: &mut DeviceBuffer<u8>,
    ) -> Result<()> {
        plan.check_keys(self, keys)?;
        self.check_outputs(out, plan.outputs(), ["top-k output values", "top-k output indices"])?;
        self.check_workspace(workspace, plan.workspace_bytes)?;
        let data = keys.data.buffer();
        let order = plan.options.order;
        let base = workspace.global_ptr().address();
        let indices = keys.indices.as_ref().map_or(GlobalPtr::null(), |indices| indices.global_ptr());
        let (spec, algorithm) = match (&plan.kind, &plan.input) {
            (PlanKind::Flat(engine_plan), _) => {
                self.run_top_k(data, plan.k, order, engine_plan, base, out)?;
                return self.gather_caller_indices(out, indices, plan.k);
            }
            (PlanKind::Fused(bitonic), _) => {
                let fusion = TopKFusion { filter: keys.filter, transform: keys.transform };
                self.run_fused(data, plan.k, order, &fusion, bitonic, base, out)?;
                return self.gather_caller_indices(out, indices, plan.k);
            }
            // The array as one row: the block kernel, where every key takes part (as in the
            // array algorithms; `one_row_pays` keeps such rows beyond the warp kernels').
            (PlanKind::OneRow(spec), _) => (spec, RowsAlgorithm::RadixSelect),
            (PlanKind::Rows(algorithm), PlannedInput::Rows(spec)) => (spec, *algorithm),
            (PlanKind::Rows(_), PlannedInput::Flat { .. }) => unreachable!("rows plans are for rows"),
        };
        let offsets = match &keys.layout {
            Layout::Ragged(offsets) => offsets.global_ptr(),
            _ => GlobalPtr::null(),
        };
        // The row kernels read the caller's indices themselves.
        self.run_rows(data, spec, (offsets, indices), plan.k, order, algorithm, workspace, out)
    }

    /// One array's algorithms report positions: the caller's `indices` (when given) replace
    /// the `k` of `out`.
    fn gather_caller_indices<K: SelectKey>(
        &self,
        out: &mut TopK<K>,
        indices: GlobalPtr<u64>,
        k: usize,
    ) -> Result<()> {
        if indices.is_null() {
            return Ok(());
        }
        self.gather_indices(out.indices.global_ptr(), indices, k as u64)
    }
}
