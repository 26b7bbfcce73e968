//! The radix-select top-k's host side: its launch sequence and workspace.

use gpu_select_kernels::params::GlobalPtr;
use gpu_select_kernels::topk::radix::{
    BUCKETS, LEVEL_SLOTS, MAX_RADIX_BLOCKS, RADIX_THREADS, RADIX_TILE, RadixChooseLayout, RadixLevel,
    RadixParams, RadixPassLayout, levels_of,
};

use super::staging::OutputStaging;
use crate::buffer::DeviceBuffer;
use crate::error::Result;
use crate::gpu::{Gpu, LaunchShape};
use crate::results::TopK;
use crate::workspace::WorkspaceCarver;
use crate::{Order, SelectKey};

/// Blocks per multiprocessor of the count and filter passes: as many as fit at once (the
/// filter kernel needs about 128 registers per thread with 32-bit keys).
const RADIX_BLOCKS_PER_SM: u32 = 2;
/// Each candidate buffer holds `n / CAPACITY_DIVISOR` candidates (at least one tile); a
/// larger target bucket is read from the data again instead.
const CAPACITY_DIVISOR: u64 = 32;

/// The shape of a radix-select top-k.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RadixPlan {
    /// Blocks of the count and filter launches.
    blocks: u32,
    /// Candidates per buffer.
    capacity: u64,
    /// Whether the selected keys are sorted afterwards (they come out in level order).
    sort_output: bool,
}

impl RadixPlan {
    pub(crate) fn new(n: u64, multiprocessors: u32, sort_output: bool) -> Self {
        let blocks = n
            .div_ceil(RADIX_TILE)
            .min((multiprocessors * RADIX_BLOCKS_PER_SM) as u64)
            .min(MAX_RADIX_BLOCKS as u64);
        Self { blocks: blocks as u32, capacity: (n / CAPACITY_DIVISOR).max(RADIX_TILE), sort_output }
    }
}

/// Where the radix-select top-k keeps its state in a workspace.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RadixWorkspace {
    levels: usize,
    totals: usize,
    /// Bytes from the start that are cleared before the first launch (levels and totals).
    cleared: usize,
    cumulative: usize,
    better_offsets: usize,
    tie_offsets: usize,
    buffer_keys: [usize; 2],
    buffer_indices: [usize; 2],
    staging: OutputStaging,
    pub(crate) bytes: usize,
}

impl RadixWorkspace {
    pub(crate) fn new(plan: &RadixPlan, k: usize, key_bytes: usize) -> Self {
        let mut carver = WorkspaceCarver::default();
        let levels = carver.region(LEVEL_SLOTS * size_of::<RadixLevel>());
        let totals = carver.region(LEVEL_SLOTS * BUCKETS * 8);
        let cleared = carver.bytes();
        let blocks = plan.blocks as usize;
        let cumulative = carver.region(blocks * BUCKETS * 4);
        let better_offsets = carver.region(blocks * 8);
        let tie_offsets = carver.region(blocks * 8);
        let capacity = plan.capacity as usize;
        let buffer_keys = [carver.region(capacity * key_bytes), carver.region(capacity * key_bytes)];
        let buffer_indices = [carver.region(capacity * 8), carver.region(capacity * 8)];
        let staging = OutputStaging::carve(&mut carver, plan.sort_output, k, key_bytes);
        Self {
            levels,
            totals,
            cleared,
            cumulative,
            better_offsets,
            tie_offsets,
            buffer_keys,
            buffer_indices,
            staging,
            bytes: carver.bytes(),
        }
    }
}

impl Gpu {
    /// Queues the radix-select top-k (kernel docs: `gpu_select_kernels::topk::radix`):
    /// count, choose and filter per level, without reading anything back.
    pub(crate) fn run_radix<K: SelectKey>(
        &self,
        data: &DeviceBuffer<K>,
        k: usize,
        order: Order,
        plan: &RadixPlan,
        workspace_base: u64,
        out: &mut TopK<K>,
    ) -> Result<()> {
        let layout = RadixWorkspace::new(plan, k, size_of::<K>());
        let at = |offset: usize| workspace_base + offset as u64;
        let (keys_out, indices_out) = layout.staging.targets(workspace_base, out);
        self.clear_on_device(workspace_base, layout.cleared)?;
        let mut params = RadixParams {
            data: data.global_ptr(),
            len: data.len() as u64,
            k: k as u64,
            keys_out: GlobalPtr::from_address(keys_out),
            indices_out: GlobalPtr::from_address(indices_out),
            levels: GlobalPtr::from_address(at(layout.levels)),
            totals: GlobalPtr::from_address(at(layout.totals)),
            cumulative: GlobalPtr::from_address(at(layout.cumulative)),
            better_offsets: GlobalPtr::from_address(at(layout.better_offsets)),
            tie_offsets: GlobalPtr::from_address(at(layout.tie_offsets)),
            buffer_keys: layout.buffer_keys.map(|offset| GlobalPtr::from_address(at(offset))),
            buffer_indices: layout.buffer_indices.map(|offset| GlobalPtr::from_address(at(offset))),
            capacity: plan.capacity,
            blocks: plan.blocks,
            level: 0,
            order: order.to_raw(),
            reserved: 0,
        };
        let pass = LaunchShape {
            grid: (plan.blocks, 1),
            block_threads: RADIX_THREADS,
            shared_bytes: RadixPassLayout::new().bytes,
        };
        let choose = LaunchShape {
            grid: (1, 1),
            block_threads: RADIX_THREADS,
            shared_bytes: RadixChooseLayout::new().bytes,
        };
        for level in 0..levels_of::<K>() {
            params.level = level;
            self.launch(K::RADIX_COUNT, pass, params)?;
            self.launch(K::RADIX_CHOOSE, choose, params)?;
            self.launch(K::RADIX_FILTER, pass, params)?;
        }
        self.sort_staged(&layout.staging, workspace_base, out, k, order)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_fit_the_kernels_limits() {
        for n in [1u64, 2048, 2049, 1 << 20, 1 << 28, 1 << 33] {
            let plan = RadixPlan::new(n, 132, false);
            assert!(plan.blocks >= 1 && plan.blocks <= MAX_RADIX_BLOCKS, "{n}: {plan:?}");
            assert!(plan.capacity >= RADIX_TILE);
            // Per-block counts are 32-bit.
            let per_block = n.div_ceil(RADIX_TILE).div_ceil(plan.blocks as u64) * RADIX_TILE;
            assert!(per_block < 1 << 32, "{n}: {plan:?}");
        }
    }
}
