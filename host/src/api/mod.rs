//! The public calls, one shape per operation: an input description ([`Keys`], or a view for
//! selection and sorting), one options value, and three forms of the call:
//!
//! - the convenient one (`top_k`, `select`, `sort_segments`), which allocates its outputs
//!   and workspace from the handle's stream-ordered pool;
//! - the plan (`plan_top_k`, `plan_select`): the checks and launch shapes made once, and the
//!   workspace bytes a run needs (CUB's two phases);
//! - the run of a plan into the caller's outputs and workspace (`top_k_into`,
//!   `select_into`, `sort_segments_into`): no allocation.
//!
//! Host-slice conveniences (`top_k_host`, `select_host`, `sort_small`) upload, run and
//! download. The calls validate and describe; the engine (`crate::engine`) plans and
//! launches.
//!
//!
//! Which calls wait for the GPU: [`Gpu`](crate::Gpu#which-calls-wait).

mod input;
mod knn;
mod knn_streamed;
mod quantile;
mod select;
mod sort;
mod top_k;

pub use input::Keys;
pub use knn::{FlatIndex, MultiGpuIndex, Placement, SearchPlan, VectorComponent, Vectors};
pub use knn_streamed::{StreamedIndex, StreamedSearchPlan};
pub use select::SelectPlan;
pub use top_k::TopKPlan;
