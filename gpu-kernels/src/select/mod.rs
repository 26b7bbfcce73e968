//! Selection by rank: the element of rank `k`, its approximation, and (through the fused
//! filter) the top `k`, with SampleSelect and QuickSelect.

pub mod sample;
