//! The kernels' PTX, built from `gpu-kernels/` by the build script and embedded here.

/// PTX for sm_80 (A100 and newer through JIT).
pub const PTX_SM80: &str = include_str!(concat!(env!("OUT_DIR"), "/gpu_select_kernels.sm_80.ptx"));
/// PTX for sm_90 (H100, H200).
pub const PTX_SM90: &str = include_str!(concat!(env!("OUT_DIR"), "/gpu_select_kernels.sm_90.ptx"));

/// The PTX flavour for a device of compute capability `(major, minor)`: the newest one the
/// device runs, or `None` before 8.0.
pub fn arch_for(compute_capability: (i32, i32)) -> Option<&'static str> {
    match compute_capability {
        (major, _) if major >= 9 => Some("sm_90"),
        (8, _) => Some("sm_80"),
        _ => None,
    }
}

/// The PTX text of a flavour named by [`arch_for`].
pub fn source(arch: &str) -> &'static str {
    match arch {
        "sm_90" => PTX_SM90,
        _ => PTX_SM80,
    }
}
