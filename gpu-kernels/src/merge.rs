//! Device-wide merge of sorted runs (merge path), for sorting more keys than one block
//! holds: the block bitonic sort makes runs of 2048, and each launch of `merge_runs_<key>`
//! merges neighbouring runs pairwise, doubling the run length.
//!
//! Each thread writes [`MERGE_ITEMS`] consecutive outputs of one pair of runs `(A, B)`: a
//! binary search on the merge path finds how many of the first outputs come from `A`
//! (Odeh, Green, Mwassi, Shmueli & Birk, "Merge Path", 2012), then the thread merges
//! sequentially. Ties take `A` first, so the merge is stable: with stable runs, the whole
//! sort is stable.

use crate::device;
use crate::key::{Key, OrderedBits};
use crate::params::{GlobalPtr, Order};

/// Threads per block.
pub const MERGE_THREADS: u32 = 256;
/// Outputs each thread writes.
pub const MERGE_ITEMS: u64 = 8;

/// Parameters of `merge_runs_<key>`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct MergeParams<K> {
    /// `len` keys in sorted runs of `run_len` (the last run may be shorter).
    pub keys_in: GlobalPtr<K>,
    /// The index carried with each key.
    pub indices_in: GlobalPtr<u64>,
    /// The merged keys: sorted runs of `2·run_len`.
    pub keys_out: GlobalPtr<K>,
    /// Their indices; null: keys only (`indices_in` is not read).
    pub indices_out: GlobalPtr<u64>,
    /// Number of keys.
    pub len: u64,
    /// Length of the input runs.
    pub run_len: u64,
    /// [`Order::to_raw`]: the order the runs are sorted in.
    pub order: u32,
    /// Keeps the struct free of implicit padding (set to 0).
    pub reserved: u32,
}

/// Threads a launch needs for `len` keys: one per [`MERGE_ITEMS`] outputs.
pub const fn merge_threads_for(len: u64) -> u64 {
    len.div_ceil(MERGE_ITEMS)
}

/// The `merge_runs_<key>` kernel body.
///
/// # Safety
/// At least [`merge_threads_for`]`(len)` threads in a 1-D grid; inputs sorted in runs of
/// `run_len ≥ 1` in `order`; outputs of `len` that do not overlap the inputs.
pub unsafe fn merge_runs<K: Key>(params: MergeParams<K>) {
    let first_out = device::global_thread_idx() * MERGE_ITEMS;
    if first_out >= params.len {
        return;
    }
    let largest = Order::from_raw(params.order) == Order::Largest;
    let load = |at: u64| unsafe { params.keys_in.read(at) };
    // Rank bits: ascending in the merge's order.
    let rank = |key: K| {
        let ordered = key.to_ordered();
        if largest { ordered.complement() } else { ordered }
    };
    let pair_len = 2 * params.run_len;
    let a_start = first_out / pair_len * pair_len;
    let a_len = params.run_len.min(params.len - a_start);
    let b_start = a_start + a_len;
    let b_len = params.run_len.min(params.len - b_start);
    let diagonal = first_out - a_start;

    // Outputs before `diagonal` take `low` keys of A: the smallest i with A[i] after
    // B[diagonal - 1 - i] (A wins ties).
    let (mut low, mut high) = (diagonal.saturating_sub(b_len), diagonal.min(a_len));
    while low < high {
        let middle = (low + high) / 2;
        if rank(load(a_start + middle)) <= rank(load(b_start + diagonal - 1 - middle)) {
            low = middle + 1;
        } else {
            high = middle;
        }
    }
    // Merge, holding the next key of each run so that every key is read once.
    let (mut a, mut b) = (low, diagonal - low);
    let next_a = |a: u64| (a < a_len).then(|| load(a_start + a));
    let next_b = |b: u64| (b < b_len).then(|| load(b_start + b));
    let (mut key_a, mut key_b) = (next_a(a), next_b(b));
    let end = (first_out + MERGE_ITEMS).min(a_start + a_len + b_len);
    for out in first_out..end {
        // `out < end` leaves a key in at least one run; the `None, None` arm only spares
        // the kernel a panic call (whose call frame ptxas counts as stack).
        let (key, take_a) = match (key_a, key_b) {
            (Some(x), Some(y)) => {
                if rank(x) <= rank(y) {
                    (x, true)
                } else {
                    (y, false)
                }
            }
            (Some(x), None) => (x, true),
            (None, Some(y)) => (y, false),
            (None, None) => break,
        };
        let from = if take_a {
            a += 1;
            key_a = next_a(a);
            a_start + a - 1
        } else {
            b += 1;
            key_b = next_b(b);
            b_start + b - 1
        };
        unsafe {
            params.keys_out.write(out, key);
            if !params.indices_out.is_null() {
                params.indices_out.write(out, params.indices_in.read(from));
            }
        }
    }
}
