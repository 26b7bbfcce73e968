//! The radix-select top-k's host side: its launch sequence and workspace.

use gpu_select_kernels::params::GlobalPtr;
use gpu_select_kernels::topk::radix::{
    BUCKETS, LEVEL_SLOTS, MAX_RADIX_BLOCKS, RADIX_THREADS, RADIX_TILE, RadixChooseLayout, RadixLevel,
    RadixParams, RadixPassLayout, levels_of,
};

use super::sort::Pairs;
use super::staging::OutputStaging;
use crate::buffer::DeviceBuffer;
use crate::error::Result;
use crate::gpu::{Gpu, LaunchShape};
use crate::results::TopK;
use crate::workspace::WorkspaceCarver;
use crate::{MAX_SMALL_SORT_LEN, Order, SelectKey};

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
    /// The regions of `rows` selections of `plan` side by side (one array: `rows = 1`),
    /// row after row in each region as the kernels expect, with `staged` outputs in all.
    pub(crate) fn new(plan: &RadixPlan, rows: usize, staged: usize, key_bytes: usize) -> Self {
        let mut carver = WorkspaceCarver::default();
        let levels = carver.region(rows * LEVEL_SLOTS * size_of::<RadixLevel>());
        let totals = carver.region(rows * LEVEL_SLOTS * BUCKETS * 8);
        let cleared = carver.bytes();
        let blocks = rows * plan.blocks as usize;
        let cumulative = carver.region(blocks * BUCKETS * 4);
        let better_offsets = carver.region(blocks * 8);
        let tie_offsets = carver.region(blocks * 8);
        let capacity = rows * plan.capacity as usize;
        let buffer_keys = [carver.region(capacity * key_bytes), carver.region(capacity * key_bytes)];
        let buffer_indices = [carver.region(capacity * 8), carver.region(capacity * 8)];
        let staging = OutputStaging::carve(&mut carver, plan.sort_output, staged, key_bytes);
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
        let layout = RadixWorkspace::new(plan, 1, k, size_of::<K>());
        let (keys_out, indices_out) = layout.staging.targets(workspace_base, out);
        let params = RadixParams {
            data: data.global_ptr(),
            len: data.len() as u64,
            k: k as u64,
            row_stride: 0,
            out_stride: k as u64,
            ..layout.params(plan, workspace_base, keys_out, indices_out, order)
        };
        self.launch_radix_levels(params, 1, layout.cleared)?;
        self.sort_staged(&layout.staging, workspace_base, out, k, order)
    }

    /// Queues the levels of `params` over `rows` rows (`grid.y`), after clearing the
    /// `cleared` bytes of level states and totals.
    fn launch_radix_levels<K: SelectKey>(
        &self,
        mut params: RadixParams<K>,
        rows: u32,
        cleared: usize,
    ) -> Result<()> {
        self.clear_on_device(params.levels.address(), cleared)?;
        let pass = LaunchShape {
            grid: (params.blocks, rows),
            block_threads: RADIX_THREADS,
            shared_bytes: RadixPassLayout::new().bytes,
        };
        let choose = LaunchShape {
            grid: (1, rows),
            block_threads: RADIX_THREADS,
            shared_bytes: RadixChooseLayout::new().bytes,
        };
        for level in 0..levels_of::<K>() {
            params.level = level;
            self.launch(K::RADIX_COUNT, pass, params)?;
            self.launch(K::RADIX_CHOOSE, choose, params)?;
            self.launch(K::RADIX_FILTER, pass, params)?;
        }
        Ok(())
    }
}

impl RadixWorkspace {
    /// The kernels' parameters for this workspace at `base` (the data, its length, `k` and
    /// the strides left to the caller).
    fn params<K>(
        &self,
        plan: &RadixPlan,
        base: u64,
        keys_out: u64,
        indices_out: u64,
        order: Order,
    ) -> RadixParams<K> {
        fn at<T>(base: u64, offset: usize) -> GlobalPtr<T> {
            GlobalPtr::from_address(base + offset as u64)
        }
        RadixParams {
            data: GlobalPtr::null(),
            len: 0,
            k: 0,
            keys_out: GlobalPtr::from_address(keys_out),
            indices_out: GlobalPtr::from_address(indices_out),
            levels: at(base, self.levels),
            totals: at(base, self.totals),
            cumulative: at(base, self.cumulative),
            better_offsets: at(base, self.better_offsets),
            tie_offsets: at(base, self.tie_offsets),
            buffer_keys: self.buffer_keys.map(|offset| at(base, offset)),
            buffer_indices: self.buffer_indices.map(|offset| at(base, offset)),
            capacity: plan.capacity,
            blocks: plan.blocks,
            level: 0,
            order: order.to_raw(),
            reserved: 0,
            row_stride: 0,
            out_stride: 0,
        }
    }
}

/// Rows one batched launch takes at most (its `grid.y`).
const MAX_GRID_ROWS: u64 = 65_535;
/// Blocks per multiprocessor a batched launch aims for over all its rows: two waves.
const ROWS_BLOCKS_PER_SM: u64 = 2 * RADIX_BLOCKS_PER_SM as u64;

/// The shape of a batched radix-select top-k: every dense row's `k` best at once, for `k`
/// beyond the rows kernels' 2048. Each row is the one-array selection of its own (`grid.y`
/// picks the row; its state lives in its own part of each workspace region), emitting its
/// `k` level by level into a staging row padded to `padded_k`; a segmented sort (block
/// sorts of 2048, merges that never cross a row) orders each row, and a pitched copy moves
/// the first `k` of each row to the output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RadixRowsPlan {
    /// Each row's selection: its blocks and candidate capacity, sorted.
    row: RadixPlan,
    /// Rows per launch.
    rows_per_launch: u64,
    /// Staged outputs per row: `k` rounded up to the block sort's 2048 times a power of two,
    /// so that the merge passes' runs stay inside rows.
    padded_k: u64,
}

impl RadixRowsPlan {
    /// The plan for `rows` rows of `cols` keys, `k` each, in launches whose workspace stays
    /// within about `budget` bytes.
    pub(crate) fn new(
        rows: u64,
        cols: u64,
        k: u64,
        key_bytes: usize,
        multiprocessors: u32,
        budget: usize,
    ) -> Self {
        let run = MAX_SMALL_SORT_LEN as u64;
        let padded_k = k.div_ceil(run).next_power_of_two() * run;
        let row_plan = |rows_per_launch: u64| {
            let blocks = (multiprocessors as u64 * ROWS_BLOCKS_PER_SM)
                .div_ceil(rows_per_launch)
                .clamp(1, cols.div_ceil(RADIX_TILE).min(MAX_RADIX_BLOCKS as u64));
            RadixPlan {
                blocks: blocks as u32,
                capacity: (cols / CAPACITY_DIVISOR).max(RADIX_TILE),
                sort_output: true,
            }
        };
        let mut plan = Self { row: row_plan(rows.min(MAX_GRID_ROWS)), rows_per_launch: 1, padded_k };
        let per_row = RadixRowsWorkspace::new(&plan, k as usize, key_bytes).bytes;
        let rows_per_launch = (budget / per_row).clamp(1, rows.min(MAX_GRID_ROWS) as usize) as u64;
        plan.row = row_plan(rows_per_launch);
        plan.rows_per_launch = rows_per_launch;
        plan
    }

    /// Workspace bytes of [`Gpu::run_radix_rows`] with this plan.
    pub(crate) fn workspace_bytes(&self, k: usize, key_bytes: usize) -> usize {
        RadixRowsWorkspace::new(self, k, key_bytes).bytes
    }
}

/// Where a batched radix select keeps its state: the selections' regions for a launch's
/// rows (staging `padded_k` outputs per row), then the sorted rows when they are padded.
#[derive(Clone, Copy, Debug)]
struct RadixRowsWorkspace {
    radix: RadixWorkspace,
    /// The sorted, padded rows (keys, indices); unused when `padded_k == k` (the sort
    /// writes the output itself).
    sorted: [usize; 2],
    bytes: usize,
}

impl RadixRowsWorkspace {
    fn new(plan: &RadixRowsPlan, k: usize, key_bytes: usize) -> Self {
        let rows = plan.rows_per_launch as usize;
        let staged = rows * plan.padded_k as usize;
        let radix = RadixWorkspace::new(&plan.row, rows, staged, key_bytes);
        let mut carver = WorkspaceCarver::default();
        carver.region(radix.bytes);
        let sorted_len = if plan.padded_k as usize == k { 0 } else { staged };
        let sorted = [carver.region(sorted_len * key_bytes), carver.region(sorted_len * 8)];
        Self { radix, sorted, bytes: carver.bytes() }
    }
}

/// Dense rows as the batched selection reads them.
#[derive(Clone, Copy, Debug)]
pub(crate) struct DenseRows {
    /// Number of rows.
    pub(crate) count: u64,
    /// Keys per row.
    pub(crate) cols: u64,
    /// Keys from one row's start to the next's.
    pub(crate) stride: u64,
    /// The caller's index of each key (laid out as the keys), or null for the column.
    pub(crate) indices: GlobalPtr<u64>,
}

impl Gpu {
    /// Queues the batched radix-select top-k of every row of `rows` in `data` (`k` per
    /// row, sorted, into `out`'s `count · k`) with the workspace at `workspace_base`
    /// ([`RadixRowsPlan::workspace_bytes`]).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn run_radix_rows<K: SelectKey>(
        &self,
        data: &DeviceBuffer<K>,
        rows: DenseRows,
        k: usize,
        order: Order,
        plan: &RadixRowsPlan,
        workspace_base: u64,
        out: &mut TopK<K>,
    ) -> Result<()> {
        let layout = RadixRowsWorkspace::new(plan, k, size_of::<K>());
        let key_bytes = size_of::<K>();
        let (k, padded_k) = (k as u64, plan.padded_k);
        let (staged_keys, staged_indices) = layout.radix.staging.targets(workspace_base, out);
        let staged = Pairs::<K>::at(staged_keys, staged_indices);
        let scratch = layout.radix.staging.scratch::<K>(workspace_base);
        let sorted = Pairs::<K>::at(
            workspace_base + layout.sorted[0] as u64,
            workspace_base + layout.sorted[1] as u64,
        );
        let mut first = 0;
        while first < rows.count {
            let count = (rows.count - first).min(plan.rows_per_launch);
            let params = RadixParams {
                data: data.global_ptr().offset(first * rows.stride),
                len: rows.cols,
                k,
                row_stride: rows.stride,
                out_stride: padded_k,
                ..layout.radix.params(&plan.row, workspace_base, staged_keys, staged_indices, order)
            };
            self.launch_radix_levels(params, count as u32, layout.radix.cleared)?;
            let output = Pairs::<K>::at(
                out.values.global_ptr().offset(first * k).address(),
                out.indices.global_ptr().offset(first * k).address(),
            );
            if padded_k == k {
                self.launch_sort_pairs_in_segments(staged, true, scratch, output, count * k, k, order)?;
            } else {
                self.launch_sort_pairs_in_segments(
                    staged,
                    true,
                    scratch,
                    sorted,
                    count * padded_k,
                    padded_k,
                    order,
                )?;
                let (pitch, width) = (padded_k as usize, k as usize);
                self.copy_rows_on_device(
                    sorted.keys.address(),
                    pitch * key_bytes,
                    output.keys.address(),
                    width * key_bytes,
                    width * key_bytes,
                    count as usize,
                )?;
                self.copy_rows_on_device(
                    sorted.indices.address(),
                    pitch * 8,
                    output.indices.address(),
                    width * 8,
                    width * 8,
                    count as usize,
                )?;
            }
            if !rows.indices.is_null() {
                let table = rows.indices.offset(first * rows.stride);
                self.gather_row_indices(output.indices, table, k, rows.stride, count * k)?;
            }
            first += count;
        }
        Ok(())
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
