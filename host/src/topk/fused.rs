//! Top-k with a fused filter and key transform (the bitonic top-k paper's §6): which
//! inputs take part and what they are ranked by, applied as the bitonic top-k reads the
//! data, without a pass of its own.

use gpu_select_kernels::topk::bitonic::MAX_BITONIC_K;
use gpu_select_kernels::topk::fusion::Fusion;

use super::bitonic::BitonicPlan;
use super::{Algorithm, TopK, TopKOptions};
use crate::SelectKey;
use crate::buffer::DeviceBuffer;
use crate::error::{Error, Result};
use crate::gpu::Gpu;

/// What the keys are ranked by in [`Gpu::top_k_fused`]. The results are the keys as
/// stored, whatever they were ranked by (the transformed key is a function of them).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
#[non_exhaustive]
pub enum KeyTransform<K> {
    /// The keys themselves.
    #[default]
    Identity,
    /// Their absolute value ([`Key::magnitude`](crate::Key::magnitude)): floats drop the sign (NaN stays NaN and
    /// still orders above +inf), signed integers wrap (`MIN` stays `MIN`).
    Magnitude,
    /// `scale · key + offset` ([`Key::affine`](crate::Key::affine)): for floats a multiply, then an add, each
    /// rounded; for integers wrapping arithmetic. A negative scale reverses the order.
    Affine {
        /// The factor.
        scale: K,
        /// The addend.
        offset: K,
    },
}

/// Which inputs take part in [`Gpu::top_k_fused`].
#[derive(Clone, Copy, Debug, Default)]
#[non_exhaustive]
pub enum InputFilter<'a, K> {
    /// Every input.
    #[default]
    All,
    /// The inputs whose key (as stored, before any transform) lies from `low` to `high`,
    /// both included, in the total order of [`Key`](crate::Key) (NaN above +inf, -0.0 below +0.0).
    Range {
        /// The lowest key admitted.
        low: K,
        /// The highest key admitted.
        high: K,
    },
    /// The inputs whose byte in the mask (one per input, on the same GPU) is not zero.
    Mask(&'a DeviceBuffer<u8>),
}

/// A filter and a key transform for [`Gpu::top_k_fused`]; the default admits every input
/// and ranks the keys themselves.
#[derive(Clone, Copy, Debug, Default)]
pub struct TopKFusion<'a, K> {
    /// Which inputs take part.
    pub filter: InputFilter<'a, K>,
    /// What they are ranked by.
    pub transform: KeyTransform<K>,
}

impl<'a, K> TopKFusion<'a, K> {
    /// The same fusion with another filter.
    pub fn with_filter(self, filter: InputFilter<'a, K>) -> Self {
        Self { filter, ..self }
    }

    /// The same fusion with another transform.
    pub fn with_transform(self, transform: KeyTransform<K>) -> Self {
        Self { transform, ..self }
    }
}

impl Gpu {
    /// The `k` best keys of `data` among those `fusion.filter` admits, ranked by
    /// `fusion.transform` of the key, with their indices: one bitonic top-k whose kernels
    /// filter and transform as they read, so the data is not read again, copied or
    /// written.
    ///
    /// * Values: the keys as stored (gathered by index), best first by the ranked key; ties
    ///   of the ranked key by lower index first, as in [`Gpu::top_k`].
    /// * Fewer than `k` admitted: the result ends in padding, index
    ///   [`PADDING_INDEX`](crate::PADDING_INDEX) and the worst key that is not NaN
    ///   ([`Key::LOWEST`](crate::Key::LOWEST) for `Largest`, [`Key::HIGHEST`](crate::Key::HIGHEST) for `Smallest`), as the rows
    ///   top-k pads.
    /// * Algorithm: [`Algorithm::Bitonic`] (also for `Auto`), so `k ≤ 1024` and `n < 2^32`;
    ///   `options.sorted` does not matter, the result is always sorted.
    /// * Errors: as [`Gpu::top_k`], and [`Error::InvalidArgument`] for another algorithm or
    ///   a range whose `low` orders above its `high`; [`Error::LengthMismatch`] for a mask of
    ///   another length than the data.
    ///
    /// ```
    /// use gpu_select::{Gpu, InputFilter, KeyTransform, Order, TopKFusion, TopKOptions};
    ///
    /// let gpu = Gpu::emulator();
    /// let data = gpu.upload(&[4.0f32, -9.5, 2.0, 30.0, -7.0])?;
    /// // The two largest magnitudes among the keys below 10.
    /// let fusion = TopKFusion::default()
    ///     .with_filter(InputFilter::Range { low: f32::NEG_INFINITY, high: 10.0 })
    ///     .with_transform(KeyTransform::Magnitude);
    /// let top = gpu.top_k_fused(&data, 2, &TopKOptions::new(Order::Largest), &fusion)?;
    /// assert_eq!(gpu.download(&top.values)?, [-9.5, -7.0]);
    /// assert_eq!(gpu.download(&top.indices)?, [1, 4]);
    /// # Ok::<(), gpu_select::Error>(())
    /// ```
    pub fn top_k_fused<K: SelectKey>(
        &self,
        data: &DeviceBuffer<K>,
        k: usize,
        options: &TopKOptions,
        fusion: &TopKFusion<'_, K>,
    ) -> Result<TopK<K>> {
        let bytes = self.top_k_fused_workspace_bytes::<K>(data.len(), k, options)?;
        let mut workspace = self.alloc_uninit::<u8>(bytes)?;
        let mut out = TopK { values: self.alloc_uninit::<K>(k)?, indices: self.alloc_uninit::<u64>(k)? };
        self.top_k_fused_into(data, k, options, fusion, &mut workspace, &mut out)?;
        Ok(out)
    }

    /// Bytes of workspace [`Gpu::top_k_fused_into`] needs for `n` keys of type `K` (checks
    /// the arguments as the run does).
    pub fn top_k_fused_workspace_bytes<K: SelectKey>(
        &self,
        n: usize,
        k: usize,
        options: &TopKOptions,
    ) -> Result<usize> {
        let plan = self.plan_top_k_fused(n, k, size_of::<K>(), options)?;
        Ok(super::bitonic::BitonicWorkspace::new(&plan, k as u32, size_of::<K>()).bytes)
    }

    /// [`Gpu::top_k_fused`] into caller-provided outputs (`out.values` and `out.indices` of
    /// length `k`), with a caller-provided workspace of at least
    /// [`Gpu::top_k_fused_workspace_bytes`]. Queues the work without waiting.
    pub fn top_k_fused_into<K: SelectKey>(
        &self,
        data: &DeviceBuffer<K>,
        k: usize,
        options: &TopKOptions,
        fusion: &TopKFusion<'_, K>,
        workspace: &mut DeviceBuffer<u8>,
        out: &mut TopK<K>,
    ) -> Result<()> {
        data.check_gpu(self, "the data")?;
        self.check_outputs(out, k, ["top-k output values", "top-k output indices"])?;
        let plan = self.plan_top_k_fused(data.len(), k, size_of::<K>(), options)?;
        let kernel_fusion = self.kernel_fusion(data.len(), fusion)?;
        let needed = super::bitonic::BitonicWorkspace::new(&plan, k as u32, size_of::<K>()).bytes;
        self.check_workspace(workspace, needed)?;
        let base = workspace.global_ptr().address();
        self.run_bitonic(data, k as u32, options.order, kernel_fusion, &plan, base, out)
    }

    /// The bitonic plan, after the checks every top-k makes and the fusion's own.
    fn plan_top_k_fused(
        &self,
        n: usize,
        k: usize,
        key_bytes: usize,
        options: &TopKOptions,
    ) -> Result<BitonicPlan> {
        if !matches!(options.algorithm, Algorithm::Auto | Algorithm::Bitonic) {
            return Err(Error::invalid(format!(
                "filters and key transforms are fused into the bitonic top-k only; Algorithm::{:?} does not take them",
                options.algorithm
            )));
        }
        let bitonic = options.with_algorithm(Algorithm::Bitonic);
        match self.plan_top_k(n, k, key_bytes, &bitonic)? {
            super::Plan::Bitonic(plan) => Ok(plan),
            _ => Err(Error::k_out_of_range(
                k,
                1,
                MAX_BITONIC_K as usize,
                format!("the fused top-k takes k ≤ {MAX_BITONIC_K}"),
            )),
        }
    }

    /// The kernels' form of `fusion`, after checking it against `n` keys.
    fn kernel_fusion<K: SelectKey>(&self, n: usize, fusion: &TopKFusion<'_, K>) -> Result<Fusion> {
        let mut kernel = Fusion::identity();
        match fusion.filter {
            InputFilter::All => {}
            InputFilter::Range { low, high } => {
                if low.to_ordered() > high.to_ordered() {
                    return Err(Error::invalid(format!(
                        "the range filter's low key {low:?} orders above its high key {high:?}"
                    )));
                }
                kernel = kernel.with_range(low, high);
            }
            InputFilter::Mask(mask) => {
                mask.check_gpu(self, "the filter mask")?;
                if mask.len() != n {
                    return Err(Error::LengthMismatch {
                        what: "filter mask bytes (one per input)",
                        expected: n,
                        actual: mask.len(),
                    });
                }
                kernel = kernel.with_mask(mask.global_ptr());
            }
        }
        Ok(match fusion.transform {
            KeyTransform::Identity => kernel,
            KeyTransform::Magnitude => kernel.with_magnitude(),
            KeyTransform::Affine { scale, offset } => kernel.with_affine(scale, offset),
        })
    }
}
