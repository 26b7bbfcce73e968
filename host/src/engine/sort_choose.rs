//! Sort & choose's host side: the radix sort's passes and workspace (kernel docs:
//! `gpu_select_kernels::topk::sort_choose`).

use gpu_select_kernels::params::GlobalPtr;
use gpu_select_kernels::topk::sort_choose::{
    MAX_SORT_CHOOSE_BLOCKS, SORT_CHOOSE_THREADS, SORT_DIGITS, SortChooseParams, SortCountLayout,
    SortScanLayout, SortScatterLayout, passes_of,
};

use crate::buffer::DeviceBuffer;
use crate::error::{Error, Result};
use crate::gpu::{Gpu, LaunchShape};
use crate::results::TopK;
use crate::workspace::WorkspaceCarver;
use crate::{Order, SelectKey};

/// Blocks per multiprocessor of the count and scatter passes (the scatter takes 19 to 27 KiB of
/// shared memory and 256 threads: four leave room for the registers).
const SORT_BLOCKS_PER_SM: u32 = 4;
/// Inputs of one block's tile (the kernels' `TILE`).
const SORT_TILE: u64 = gpu_select_kernels::block::tiles::TILE;

/// The shape of a sort & choose.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SortChoosePlan {
    /// Blocks of the count and scatter launches.
    blocks: u32,
}

impl SortChoosePlan {
    /// The plan for `n` keys; errors for 2^32 keys or more (32-bit positions).
    pub(crate) fn new(n: u64, multiprocessors: u32) -> Result<Self> {
        if n >= 1 << 32 {
            return Err(Error::invalid(format!("{n} keys: sort & choose takes fewer than 2^32 keys")));
        }
        let blocks = n
            .div_ceil(SORT_TILE)
            .min((multiprocessors * SORT_BLOCKS_PER_SM) as u64)
            .min(MAX_SORT_CHOOSE_BLOCKS as u64);
        Ok(Self { blocks: blocks as u32 })
    }
}

/// Where sort & choose keeps its state in a workspace: the per-block counts and two
/// buffers of every key and its 32-bit position.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SortChooseWorkspace {
    counts: usize,
    keys: [usize; 2],
    positions: [usize; 2],
    pub(crate) bytes: usize,
}

impl SortChooseWorkspace {
    pub(crate) fn new(plan: &SortChoosePlan, n: usize, key_bytes: usize) -> Self {
        let mut carver = WorkspaceCarver::default();
        let counts = carver.region(plan.blocks as usize * SORT_DIGITS * 4);
        let keys = [carver.region(n * key_bytes), carver.region(n * key_bytes)];
        let positions = [carver.region(n * 4), carver.region(n * 4)];
        Self { counts, keys, positions, bytes: carver.bytes() }
    }
}

impl Gpu {
    /// Queues sort & choose: a radix sort of every key (count, scan and scatter per 8-bit
    /// digit), whose last pass writes the first `k` to `out`. Sorted and stable, so the
    /// result is best first with ties lowest index first, whatever `sorted` asks.
    pub(crate) fn run_sort_choose<K: SelectKey>(
        &self,
        data: &DeviceBuffer<K>,
        k: usize,
        order: Order,
        plan: &SortChoosePlan,
        workspace_base: u64,
        out: &mut TopK<K>,
    ) -> Result<()> {
        let layout = SortChooseWorkspace::new(plan, data.len(), size_of::<K>());
        let at = |offset: usize| workspace_base + offset as u64;
        let mut params = SortChooseParams {
            data: data.global_ptr(),
            len: data.len() as u64,
            k: k as u64,
            keys_out: out.values.global_ptr(),
            indices_out: out.indices.global_ptr(),
            buffer_keys: layout.keys.map(|offset| GlobalPtr::from_address(at(offset))),
            buffer_positions: layout.positions.map(|offset| GlobalPtr::from_address(at(offset))),
            counts: GlobalPtr::from_address(at(layout.counts)),
            blocks: plan.blocks,
            pass: 0,
            passes: passes_of::<K>(),
            order: order.to_raw(),
        };
        let shape = |blocks: u32, shared_bytes: usize| LaunchShape {
            grid: (blocks, 1),
            block_threads: SORT_CHOOSE_THREADS,
            shared_bytes,
        };
        let count = shape(plan.blocks, SortCountLayout::new().bytes);
        let scan = shape(1, SortScanLayout::new().bytes);
        let scatter = shape(plan.blocks, SortScatterLayout::<K>::new().bytes);
        for pass in 0..params.passes {
            params.pass = pass;
            self.launch(K::SORT_CHOOSE_COUNT, count, params)?;
            self.launch(K::SORT_CHOOSE_SCAN, scan, params)?;
            self.launch(K::SORT_CHOOSE_SCATTER, scatter, params)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_fit_the_kernels_limits() {
        for n in [1u64, 2048, 2049, 1 << 20, 1 << 28, (1 << 32) - 1] {
            let plan = SortChoosePlan::new(n, 132).unwrap();
            assert!(plan.blocks >= 1 && plan.blocks <= MAX_SORT_CHOOSE_BLOCKS, "n = {n}");
            assert!(plan.blocks as u64 <= n.div_ceil(SORT_TILE), "n = {n}: no block without a tile");
        }
        assert!(SortChoosePlan::new(1 << 32, 132).is_err());
        let plan = SortChoosePlan::new(1 << 28, 132).unwrap();
        let workspace = SortChooseWorkspace::new(&plan, 1 << 28, 4);
        assert!(workspace.bytes >= (1 << 28) * 16, "two buffers of keys and positions");
    }
}
