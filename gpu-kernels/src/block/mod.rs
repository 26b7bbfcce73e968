//! Block-wide algorithms: every thread of the block calls them together, and each ends
//! with a barrier unless it says otherwise.

pub mod bitonic_sort;
pub mod places;
pub mod scan;
pub mod tiles;
