//! The caller's indices for selected positions ([`gpu_select_kernels::gather`]).

use gpu_select_kernels::entry::GATHER_INDICES;
use gpu_select_kernels::gather::{GATHER_THREADS, GatherIndicesParams};
use gpu_select_kernels::params::GlobalPtr;

use crate::error::Result;
use crate::gpu::{Gpu, LaunchShape};

/// Blocks of the gather at most: the outputs are few (`k`, or `rows · k`); a grid-stride
/// loop covers more.
const MAX_GATHER_BLOCKS: u64 = 1024;

impl Gpu {
    /// Queues `indices[i] = table[indices[i]]` for the `len` positions at `indices` (the
    /// padding index stays), after the selection that wrote them.
    pub(crate) fn gather_indices(
        &self,
        indices: GlobalPtr<u64>,
        table: GlobalPtr<u64>,
        len: u64,
    ) -> Result<()> {
        self.gather_row_indices(indices, table, len, 0, len)
    }

    /// The gather for rows of `row_len` positions at `indices`, `len` in all: row `r`'s
    /// positions index `table` from `r · table_row_stride` on.
    pub(crate) fn gather_row_indices(
        &self,
        indices: GlobalPtr<u64>,
        table: GlobalPtr<u64>,
        row_len: u64,
        table_row_stride: u64,
        len: u64,
    ) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        let blocks = len.div_ceil(GATHER_THREADS as u64).min(MAX_GATHER_BLOCKS) as u32;
        let shape = LaunchShape { grid: (blocks, 1), block_threads: GATHER_THREADS, shared_bytes: 0 };
        let params = GatherIndicesParams { indices, table, len, row_len: row_len.max(1), table_row_stride };
        self.launch(GATHER_INDICES, shape, params)
    }
}
