//! Shared by the integration tests: the backend they run on, said once per test binary.

#![allow(dead_code)]

use std::io::Write;
use std::sync::Once;

use gpu_select::{BackendKind, Gpu};

static ANNOUNCE: Once = Once::new();

/// The backend of this run: the GPU when one is present, else the emulator
/// (`GPU_SELECT_BACKEND=cuda|emulator` forces one). Printed once, past the test harness's
/// output capture, so every log says what the tests ran on.
pub fn gpu() -> Gpu {
    let gpu = Gpu::from_env().expect("GPU_SELECT_BACKEND names a backend that cannot start");
    ANNOUNCE.call_once(|| {
        let _ = writeln!(std::io::stderr(), "gpu-select tests run on: {}", gpu.describe());
    });
    gpu
}

/// Whether this run is on the (slow) emulator, so tests can size their matrices.
pub fn on_emulator(gpu: &Gpu) -> bool {
    gpu.backend() == BackendKind::Emulator
}

/// A small deterministic generator (SplitMix64), so failures reproduce.
pub struct SplitMix(pub u64);

impl SplitMix {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}
