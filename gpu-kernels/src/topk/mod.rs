//! Top-k algorithms: each module is one algorithm of the host's `Algorithm` enum.

pub mod bitonic;
pub mod fusion;
pub mod heap;
pub mod radix;
pub mod rows;
pub mod rows_merge;
pub mod rows_radix;
pub mod rows_warp_radix;
pub mod sbp;
pub mod sort_choose;
