//! The engine: each algorithm's plan (launch shapes and workspace layout, from the shape and
//! the device), its launches, and the cost models that choose among them. Crate-private;
//! the public calls (`crate::api`) validate their arguments and call down into it. A module
//! here imports only the layers below the engine (`gpu`, `buffer`, `options`, `results`,
//! `workspace`) and the engine modules it runs on (the heap's reduction is the bitonic
//! chain; a SampleSelect top-k is the SampleSelect runner's).

pub(crate) mod bitonic;
pub(crate) mod cost;
pub(crate) mod fused;
pub(crate) mod gather;
pub(crate) mod heap;
pub(crate) mod knn;
pub(crate) mod knn_streamed;
pub(crate) mod multiselect;
pub(crate) mod multiselect_rows;
pub(crate) mod radix;
pub(crate) mod rows;
pub(crate) mod rows_cost;
pub(crate) mod sample_select;
pub(crate) mod sample_top_k;
pub(crate) mod sbp;
pub(crate) mod sort;
pub(crate) mod sort_choose;
pub(crate) mod staging;
pub(crate) mod top_k;

/// The bytes of a key's ordered bits, which registers and shared memory hold: 4 for 16- and
/// 32-bit keys, 8 for 64-bit ones. Global memory holds keys at their own width
/// (`key_bytes`), so reads and workspaces scale with that; what fits a block or a thread's
/// registers scales with this.
pub(crate) fn rank_bytes(key_bytes: usize) -> usize {
    key_bytes.max(4)
}
