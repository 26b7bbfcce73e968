//! Top-k by SampleSelect with the fused filter: the buckets better than the target go
//! straight to the output at every level (the runner is `crate::select`'s).

use gpu_select_kernels::select::sample::flags;

use super::radix::{RadixPlan, RadixWorkspace};
use super::sample_select::{SamplePlan, SampleWorkspace};
use super::staging::OutputStaging;
use crate::buffer::DeviceBuffer;
use crate::error::Result;
use crate::gpu::Gpu;
use crate::results::TopK;
use crate::workspace::WorkspaceCarver;
use crate::{Order, SelectKey};

/// The shape of a SampleSelect top-k.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SampleTopKPlan {
    pub(crate) select: SamplePlan,
    /// Whether the selected keys are sorted afterwards (they come out level by level).
    pub(crate) sort_output: bool,
}

/// Where the SampleSelect top-k keeps its state: the selection's regions, then the
/// output staging.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SampleTopKWorkspace {
    staging: OutputStaging,
    pub(crate) bytes: usize,
}

impl SampleTopKWorkspace {
    pub(crate) fn new(plan: &SampleTopKPlan, n: usize, k: usize, key_bytes: usize) -> Self {
        let mut carver = WorkspaceCarver::default();
        SampleWorkspace::carve(&plan.select, n, key_bytes, &mut carver);
        let staging = OutputStaging::carve(&mut carver, plan.sort_output, k, key_bytes);
        Self { staging, bytes: carver.bytes() }
    }
}

impl Gpu {
    /// The SampleSelect top-k: the selection with [`flags::EMIT`], then the sort of the `k`
    /// outputs when asked for.
    pub(crate) fn run_sample_top_k<K: SelectKey>(
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
        let (keys_out, indices_out) = layout.staging.targets(workspace_base, out);
        let run = self.run_sample_select(
            data,
            k as u64,
            order,
            &plan.select,
            workspace_base,
            Some((keys_out, indices_out)),
        )?;
        if run.is_none() {
            // The samples kept missing: radix select needs none, and always finishes. Its
            // workspace is allocated here (this path is rare).
            let radix = RadixPlan::new(data.len() as u64, self.limits().multiprocessors, plan.sort_output);
            let bytes = RadixWorkspace::new(&radix, 1, k, size_of::<K>()).bytes;
            let workspace = self.alloc_uninit::<u8>(bytes)?;
            return self.run_radix(data, k, order, &radix, workspace.global_ptr().address(), out);
        }
        self.sort_staged(&layout.staging, workspace_base, out, k, order)
    }
}
