//! Top-k with a fused filter and key transform (the bitonic top-k paper's §6): which
//! inputs take part and what they are ranked by, applied as the bitonic top-k reads the
//! data, without a pass of its own.
//!
//! The result's keys are the keys as stored, best first by the ranked key; ties of the
//! ranked key by lower index first. Fewer than `k` admitted: the result ends in padding,
//! index [`PADDING_INDEX`](crate::PADDING_INDEX) and the worst key that is not NaN, as the
//! rows top-k pads. Bitonic only (also for `Auto`): `k ≤ 1024`, `n < 2^32`; always sorted.

use gpu_select_kernels::topk::bitonic::MAX_BITONIC_K;
use gpu_select_kernels::topk::fusion::Fusion;

use super::bitonic::BitonicPlan;
use crate::SelectKey;
use crate::buffer::DeviceBuffer;
use crate::error::{Error, Result};
use crate::gpu::Gpu;
use crate::options::{Algorithm, InputFilter, KeyTransform, TopKFusion, TopKOptions};
use crate::results::TopK;

impl Gpu {
    /// Queues the fused bitonic top-k `plan` describes on `data` (checked by the caller),
    /// with `fusion` checked against it here, into `out`, with the workspace at `base`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn run_fused<K: SelectKey>(
        &self,
        data: &DeviceBuffer<K>,
        k: usize,
        order: crate::Order,
        fusion: &TopKFusion<'_, K>,
        plan: &BitonicPlan,
        base: u64,
        out: &mut TopK<K>,
    ) -> Result<()> {
        let kernel_fusion = self.kernel_fusion(data.len(), fusion)?;
        self.run_bitonic(data, k as u32, order, kernel_fusion, plan, base, out)
    }

    /// The bitonic plan, after the checks every top-k makes and the fusion's own.
    pub(crate) fn plan_top_k_fused(
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
        match self.plan_array_top_k(n, k, key_bytes, &bitonic)? {
            super::top_k::Plan::Bitonic(plan) => Ok(plan),
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
