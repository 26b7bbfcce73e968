//! Selection by rank: the element of rank `k`, its approximation, and (through the fused
//! filter) the top `k`, with SampleSelect and QuickSelect; many ranks at once with bucket
//! multiselect; numpy's quantiles of sorted rows.

pub mod multi;
pub mod quantiles;
pub mod sample;
