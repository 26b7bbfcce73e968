//! Index translation: each selected position becomes the caller's own index for that input
//! (RAFT's `in_idx`), for the top-k paths whose kernels report positions.
//!
//! One thread per output, grid-stride: the outputs are `k` (or `rows · k`) indices, so the
//! pass is a small gather next to the selection that produced them.

use crate::device;
use crate::params::GlobalPtr;
use crate::topk::bitonic::NO_INDEX;

/// Threads per block of [`gather_indices`].
pub const GATHER_THREADS: u32 = 256;

/// Parameters of `gather_indices`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct GatherIndicesParams {
    /// `len` positions into `table`, each replaced by `table[position]`; [`NO_INDEX`]
    /// (padding) stays.
    pub indices: GlobalPtr<u64>,
    /// The caller's indices, one per input position.
    pub table: GlobalPtr<u64>,
    /// Number of positions.
    pub len: u64,
    /// Positions per row of `indices` (rows: each row's positions are into its own part
    /// of `table`); `len` or more for one array.
    pub row_len: u64,
    /// Entries of `table` from one row's part to the next's (0 for one array).
    pub table_row_stride: u64,
}

/// The `gather_indices` kernel: `indices[i] = table[r · table_row_stride + indices[i]]`
/// (row `r = i / row_len`) for every `i < len` whose position is not [`NO_INDEX`].
///
/// # Safety
/// Every position in `indices` other than [`NO_INDEX`] is inside its row's part of `table`;
/// `row_len > 0`; any grid and block shape (threads work alone).
pub unsafe fn gather_indices(params: GatherIndicesParams) {
    let stride = device::grid_dim_x() as u64 * device::block_dim_x() as u64;
    let mut i = device::global_thread_idx();
    while i < params.len {
        unsafe {
            let position = params.indices.read(i);
            if position != NO_INDEX {
                let row_start = (i / params.row_len) * params.table_row_stride;
                params.indices.write(i, params.table.read(row_start + position));
            }
        }
        i += stride;
    }
}
