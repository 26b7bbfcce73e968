//! Top-k by SampleSelect with the fused filter: the buckets better than the target go
//! straight to the output at every level (the runner is `crate::select`'s).

use gpu_select_kernels::select::sample::flags;

use super::{TopK, WorkspaceCarver};
use crate::buffer::DeviceBuffer;
use crate::error::Result;
use crate::gpu::Gpu;
use crate::select::{SamplePlan, SampleWorkspace};
use crate::sort::Pairs;
use crate::{MAX_SMALL_SORT_LEN, Order, SelectKey};

/// The shape of a SampleSelect top-k.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct SampleTopKPlan {
    pub(super) select: SamplePlan,
    /// Whether the selected keys are sorted afterwards (they come out level by level).
    pub(super) sort_output: bool,
}

/// Where the SampleSelect top-k keeps its state: the selection's regions, then the
/// unsorted selection and the sort's scratch when the output is sorted.
#[derive(Clone, Copy, Debug)]
pub(super) struct SampleTopKWorkspace {
    staging_keys: [usize; 2],
    staging_indices: [usize; 2],
    pub(super) bytes: usize,
}

impl SampleTopKWorkspace {
    pub(super) fn new(plan: &SampleTopKPlan, n: usize, k: usize, key_bytes: usize) -> Self {
        let mut carver = WorkspaceCarver::default();
        SampleWorkspace::carve(&plan.select, n, key_bytes, &mut carver);
        let staged = if plan.sort_output { k } else { 0 };
        let scratch = if staged > MAX_SMALL_SORT_LEN { k } else { 0 };
        let staging_keys = [carver.region(staged * key_bytes), carver.region(scratch * key_bytes)];
        let staging_indices = [carver.region(staged * 8), carver.region(scratch * 8)];
        Self { staging_keys, staging_indices, bytes: carver.bytes() }
    }
}

impl Gpu {
    /// The SampleSelect top-k: the selection with [`flags::EMIT`], then a stable sort of the
    /// `k` outputs when asked for.
    pub(super) fn run_sample_top_k<K: SelectKey>(
        &self,
        data: &DeviceBuffer<K>,
        k: usize,
        order: Order,
        plan: &SampleTopKPlan,
        workspace_base: u64,
        out: &mut TopK<K>,
    ) -> Result<()> {
        debug_assert!(plan.select.has_flag(flags::EMIT));
        let layout = SampleTopKWorkspace::new(plan, data.len(), k, size_of::<K>());
        let at = |offset: usize| workspace_base + offset as u64;
        let (keys_out, indices_out) = if plan.sort_output {
            (at(layout.staging_keys[0]), at(layout.staging_indices[0]))
        } else {
            (out.values.global_ptr().address(), out.indices.global_ptr().address())
        };
        self.run_sample_select(
            data,
            k as u64,
            order,
            &plan.select,
            workspace_base,
            Some((keys_out, indices_out)),
        )?;
        if plan.sort_output {
            // Equal keys always fall in one bucket, so they come out together in index
            // order, and the sort is stable: ties stay lowest index first.
            self.launch_sort_pairs(
                Pairs::<K>::at(keys_out, indices_out),
                Pairs::at(at(layout.staging_keys[1]), at(layout.staging_indices[1])),
                Pairs::at(out.values.global_ptr().address(), out.indices.global_ptr().address()),
                k as u64,
                order,
            )?;
        }
        Ok(())
    }
}
