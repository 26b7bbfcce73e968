//! Neighbours moved into place: a column tile's `k` best per query into that query's row
//! of candidates, the final lists' signs restored for the similarity metrics, and for a
//! k-NN graph each vector's own index dropped. A warp per row. The filtered search's
//! neighbours come as candidates (`rank << 32 | index`, [`super::tile::FilterTarget`]) and
//! are unpacked here.

use crate::device::{self, FULL_WARP};
use crate::key::Key;
use crate::params::GlobalPtr;
use crate::topk::bitonic::NO_INDEX;

/// Threads per block of [`place_neighbours`] (a warp per row).
pub const PLACE_THREADS: u32 = 256;

/// `PlaceParams::own_index_start` when no row drops its own index.
pub const KEEP_ALL: u64 = u64::MAX;

/// Parameters of `knn_place`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct PlaceParams {
    /// `rows × width_in` distances, row after row.
    pub values_in: GlobalPtr<f32>,
    /// Their base indices (or [`NO_INDEX`]).
    pub indices_in: GlobalPtr<u64>,
    /// Row `r` is written at `r · stride_out + column_out`, `width_out` entries. The same
    /// memory as the inputs only when nothing is dropped.
    pub values_out: GlobalPtr<f32>,
    /// Their indices, laid out alike.
    pub indices_out: GlobalPtr<u64>,
    /// Number of rows.
    pub rows: u64,
    /// Entries per input row.
    pub width_in: u64,
    /// Entries per output row: `width_in`, or `width_in − 1` when a row drops its own index.
    pub width_out: u64,
    /// Entries from one output row's start to the next's.
    pub stride_out: u64,
    /// Where in its output row a row's entries start.
    pub column_out: u64,
    /// Added to every index but [`NO_INDEX`] (the column tile's first base vector).
    pub index_offset: u64,
    /// Row `r` drops the entry of index `own_index_start + r` (after the offset), or its
    /// last entry when it holds none; [`KEEP_ALL`]: nothing dropped.
    pub own_index_start: u64,
    /// Whether each distance's sign flips (the similarity metrics).
    pub negate: u32,
    /// Null, or the entries as the filtered search's candidates (`rank << 32 | index`, the
    /// rank of an `f32` distance), read instead of `values_in` and `indices_in`.
    pub candidates_in: GlobalPtr<u64>,
}

/// The `knn_place` kernel (module docs).
///
/// # Safety
/// Blocks of whole warps; every row in bounds; outputs that overlap the inputs only
/// entry for entry (`own_index_start == KEEP_ALL`, the same layout).
pub unsafe fn place_neighbours(params: PlaceParams) {
    let warps_per_block = (device::block_dim_x() / 32) as u64;
    let warps = device::grid_dim_x() as u64 * warps_per_block;
    let lane = device::lane_id() as u64;
    let mut row = device::block_idx_x() as u64 * warps_per_block + device::warp_id() as u64;
    while row < params.rows {
        let row_in = row * params.width_in;
        let shifted = |index: u64| if index == NO_INDEX { NO_INDEX } else { index + params.index_offset };
        // Entry `at` of the row: its distance and its index (before the offset).
        let entry = |at: u64| unsafe {
            if params.candidates_in.is_null() {
                (params.values_in.read(row_in + at), params.indices_in.read(row_in + at))
            } else {
                let candidate = params.candidates_in.read(row_in + at);
                (f32::from_ordered((candidate >> 32) as u32), candidate & u64::from(u32::MAX))
            }
        };
        // The entry this row drops, or `width_in` for none.
        let mut dropped = params.width_in;
        if params.own_index_start != KEEP_ALL {
            let own = params.own_index_start + row;
            dropped = params.width_in - 1;
            let mut chunk = 0;
            while chunk < params.width_in {
                let at = chunk + lane;
                let is_own = at < params.width_in && shifted(entry(at).1) == own;
                let found = unsafe { device::ballot(FULL_WARP, is_own) };
                if found != 0 {
                    dropped = chunk + found.trailing_zeros() as u64;
                    break;
                }
                chunk += 32;
            }
        }
        let row_out = row * params.stride_out + params.column_out;
        let mut at = lane;
        while at < params.width_in {
            if at != dropped {
                let to = if at > dropped { at - 1 } else { at };
                if to < params.width_out {
                    let (value, index) = entry(at);
                    let index = shifted(index);
                    unsafe {
                        params
                            .values_out
                            .write(row_out + to, if params.negate != 0 { -value } else { value });
                        params.indices_out.write(row_out + to, index);
                    }
                }
            }
            at += 32;
        }
        row += warps;
    }
}
