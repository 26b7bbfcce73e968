//! Block-wide prefix sums.

use crate::device::{self, SharedSlice};
use crate::warp;

/// Exclusive prefix sum of one `u64` per thread over the block, in thread order: a warp scan,
/// then the warps' totals through `warp_sums`.
///
/// # Safety
/// *Block-wide*: every thread of a block of whole warps calls it together; `warp_sums` holds
/// one value per warp. Starts with a warp scan and ends with a barrier, so it may be called
/// again at once with the same `warp_sums`.
pub unsafe fn exclusive_scan_add_u64(value: u64, warp_sums: &SharedSlice<u64>) -> u64 {
    let warp = device::warp_id() as usize;
    let inclusive = unsafe { warp::inclusive_scan_add_u64(value) };
    unsafe { device::sync_threads() }; // earlier readers of `warp_sums` are done
    if device::lane_id() == 31 {
        unsafe { warp_sums.store(warp, inclusive) };
    }
    unsafe { device::sync_threads() };
    let mut before = 0;
    for w in 0..warp {
        before += unsafe { warp_sums.load(w) };
    }
    unsafe { device::sync_threads() };
    before + inclusive - value
}
