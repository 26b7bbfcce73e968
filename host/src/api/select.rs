//! Selection by rank: the key of rank `k` (exact: SampleSelect or QuickSelect), or a key of
//! known rank near it in about one read (approximate).

use std::marker::PhantomData;

use gpu_select_kernels::select::sample::flags;

use crate::SelectKey;
use crate::engine::sample_select::{SamplePlan, SampleWorkspace};
use crate::error::{Error, Result};
use crate::gpu::Gpu;
use crate::options::{SampleSelectPolicy, SelectAlgorithm, SelectOptions};
use crate::results::Selection;
use crate::view::{DeviceSlice, DeviceSliceMut};

/// A selection made ready for `n` keys: its checks, launch shapes and the workspace bytes a
/// run needs. Run it with [`Gpu::select_into`] on any `n` keys, for any rank, with no
/// allocation.
///
/// ```
/// use gpu_select::{Gpu, SelectAlgorithm, SelectOptions};
///
/// let gpu = Gpu::emulator();
/// let data = gpu.upload(&(0..10_000u32).rev().collect::<Vec<_>>())?;
/// let options = SelectOptions::default().with_algorithm(SelectAlgorithm::Approximate { buckets: 256 });
/// let plan = gpu.plan_select::<u32>(data.len(), &options)?;
/// let mut workspace = gpu.alloc_zeroed::<u8>(plan.workspace_bytes())?;
/// for k in [100, 5_000, 9_900] {
///     let approx = gpu.select_into(&plan, &data, k, &mut workspace)?;
///     assert_eq!(approx.value as u64, approx.rank); // the value of rank r is r here
///     assert!(approx.error(k as u64) <= 100);
/// }
/// # Ok::<(), gpu_select::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct SelectPlan<K> {
    gpu: Gpu,
    n: usize,
    options: SelectOptions,
    route: SelectionRoute,
    workspace_bytes: usize,
    key: PhantomData<fn() -> K>,
}

/// How a planned selection runs.
#[derive(Clone, Debug)]
enum SelectionRoute {
    /// The SampleSelect family (SampleSelect, QuickSelect, approximate): its plan.
    Sample(SamplePlan),
    /// A split-bucket partition (`S_RdSP`, or `S_StSPT` with its search tree), planned when
    /// the rank is known.
    Sbp { tree: bool },
}

impl<K: SelectKey> SelectPlan<K> {
    /// Bytes of workspace a run needs. Exact selection: the oracles (one byte per key), two
    /// candidate buffers (`n / 8` keys each with the bracket, else `n / 32`) and a few
    /// kilobytes; approximate: a few tens of kilobytes.
    pub fn workspace_bytes(&self) -> usize {
        self.workspace_bytes
    }

    /// The options of the same selection without the passes that load 16-byte vectors.
    fn without_vector_loads(&self) -> SelectOptions {
        let base = self.options.policy.unwrap_or_else(|| match self.options.algorithm {
            SelectAlgorithm::QuickSelect => SampleSelectPolicy::quick_select(),
            _ => SampleSelectPolicy::for_keys(self.gpu.limits(), size_of::<K>()),
        });
        self.options.with_policy(SampleSelectPolicy { bracket: false, window_count: false, ..base })
    }
}

/// Whether the run loads the keys by 16-byte vectors (the bracket of exact selection,
/// the window of approximate selection), and so needs them 16-byte aligned.
fn loads_vectors(plan: &SamplePlan) -> bool {
    let exact_bracket = plan.has_flag(flags::BRACKET) && !plan.has_flag(flags::EMIT);
    let window = plan.has_flag(flags::APPROXIMATE) && plan.policy().window_count;
    exact_bracket || window
}

impl Gpu {
    /// The key of rank `k` (from 0; by default smallest first, so what the keys sorted
    /// ascending hold at position `k`), with its rank. Keys follow the total order of
    /// [`Key`](crate::Key) (NaN above +inf). With
    /// [`SelectAlgorithm::Approximate`](crate::SelectAlgorithm::Approximate), a key whose
    /// rank is near `k`, and that rank.
    ///
    /// Keys that do not start on 16 bytes (a view at an odd offset) run without the passes
    /// that load 16-byte vectors (the bracket, the window): the same answer, slower.
    ///
    /// Errors: [`Error::EmptyInput`]; [`Error::KOutOfRange`] for `k ≥ n`;
    /// [`Error::InvalidArgument`] for a bad policy or bucket count. Waits for the result.
    ///
    /// ```
    /// use gpu_select::{Gpu, Order, SelectAlgorithm, SelectOptions};
    ///
    /// let gpu = Gpu::emulator();
    /// let data = gpu.upload(&[4.0f32, 9.5, -1.0, 9.5, 7.0])?;
    /// assert_eq!(gpu.select(&data, 0, &SelectOptions::default())?.value, -1.0);
    /// assert_eq!(gpu.select(&data, 2, &SelectOptions::default())?.value, 7.0); // the median
    /// let largest = SelectOptions::new(Order::Largest).with_algorithm(SelectAlgorithm::QuickSelect);
    /// assert_eq!(gpu.select(&data, 1, &largest)?.value, 9.5);
    /// # Ok::<(), gpu_select::Error>(())
    /// ```
    pub fn select<'a, K: SelectKey>(
        &self,
        keys: impl Into<DeviceSlice<'a, K>>,
        k: usize,
        options: &SelectOptions,
    ) -> Result<Selection<K>> {
        let keys = keys.into();
        let plan = self.plan_select::<K>(keys.len(), options)?;
        // Nothing zeroed: the run clears what its kernels count into.
        let mut workspace = self.alloc_uninit::<u8>(plan.workspace_bytes)?;
        self.select_into(&plan, keys, k, &mut workspace)
    }

    /// Plans a selection of `n` keys: the checks of [`Gpu::select`] but the rank's, and the
    /// workspace a run needs.
    pub fn plan_select<K: SelectKey>(&self, n: usize, options: &SelectOptions) -> Result<SelectPlan<K>> {
        let (route, workspace_bytes) = match options.algorithm {
            SelectAlgorithm::SbpRadix | SelectAlgorithm::SbpTree => {
                crate::workspace::check_key_count(n)?;
                if n == 0 {
                    return Err(Error::EmptyInput);
                }
                let tree = options.algorithm == SelectAlgorithm::SbpTree;
                let bytes =
                    crate::engine::sbp::selection_workspace_bytes(n as u64, size_of::<K>(), self.tuning());
                (SelectionRoute::Sbp { tree }, bytes)
            }
            _ => {
                let plan = self.plan_selection(n, size_of::<K>(), options)?;
                let bytes = SampleWorkspace::new(&plan, n, size_of::<K>()).bytes;
                (SelectionRoute::Sample(plan), bytes)
            }
        };
        Ok(SelectPlan { gpu: self.clone(), n, options: *options, route, workspace_bytes, key: PhantomData })
    }

    /// Runs `plan` on `keys` (`n` of them, as planned) for rank `k`, with `workspace` (at
    /// least `plan.workspace_bytes()` bytes). Waits for the result.
    ///
    /// Errors: as [`Gpu::select`]; [`Error::LengthMismatch`] for another number of keys
    /// than planned; [`Error::WorkspaceTooSmall`].
    pub fn select_into<'a, 'w, K: SelectKey>(
        &self,
        plan: &SelectPlan<K>,
        keys: impl Into<DeviceSlice<'a, K>>,
        k: usize,
        workspace: impl Into<DeviceSliceMut<'w, u8>>,
    ) -> Result<Selection<K>> {
        let keys = keys.into();
        let mut workspace = workspace.into();
        if !plan.gpu.same_device(self) {
            return Err(Error::invalid("the plan was made on another device than the handle called"));
        }
        keys.buffer().check_gpu(self, "the keys")?;
        if keys.len() != plan.n {
            return Err(Error::LengthMismatch {
                what: "keys (as planned)",
                expected: plan.n,
                actual: keys.len(),
            });
        }
        self.check_workspace(workspace.buffer(), plan.workspace_bytes)?;
        let base = workspace.buffer_mut().global_ptr().address();
        let sample_plan = match &plan.route {
            SelectionRoute::Sbp { tree } => {
                return self.run_sbp_selection(keys.buffer(), k, plan.options.order, *tree, base);
            }
            SelectionRoute::Sample(sample_plan) => sample_plan,
        };
        if loads_vectors(sample_plan) && !keys.device_address().is_multiple_of(16) {
            // Keys at an odd offset (a view): the same selection without the passes that
            // load 16-byte vectors. Its regions are the plan's or smaller, so the workspace
            // serves; checked all the same.
            let scalar = self.plan_selection(plan.n, size_of::<K>(), &plan.without_vector_loads())?;
            let needed = SampleWorkspace::new(&scalar, plan.n, size_of::<K>()).bytes;
            Error::check_workspace_size(needed, workspace.len())?;
            return self.run_selection(keys.buffer(), k, plan.options.order, &scalar, base);
        }
        self.run_selection(keys.buffer(), k, plan.options.order, sample_plan, base)
    }

    /// Selection on a host slice: uploads it and runs [`Gpu::select`].
    pub fn select_host<K: SelectKey>(
        &self,
        keys: &[K],
        k: usize,
        options: &SelectOptions,
    ) -> Result<Selection<K>> {
        self.select(&self.upload(keys)?, k, options)
    }
}
