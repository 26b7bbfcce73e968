//! Builds the kernels into PTX for the host crate to embed (see `build_ptx.rs`).
//!
//! Cargo reruns this whenever a kernel source changes, so the embedded PTX always matches
//! the kernel code the emulator runs: a stale PTX cannot be embedded.

#[path = "build_ptx.rs"]
mod build_ptx;

use std::path::PathBuf;

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let workspace = manifest.parent().expect("host/ lives in the workspace").to_path_buf();
    let out_dir = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    for watched in ["gpu-kernels", "Cargo.toml", "rust-toolchain.toml", "host/build_ptx.rs"] {
        println!("cargo:rerun-if-changed={}", workspace.join(watched).display());
    }
    // cust links libcuda; where no CUDA toolkit lives in /usr/local/cuda, the driver library
    // in the system path serves (Debian's libcuda1 on machines without a GPU).
    println!("cargo:rerun-if-env-changed=CUDA_LIBRARY_PATH");
    if let Err(message) = build_ptx::build_ptx(&workspace, &out_dir) {
        eprintln!("{message}");
        panic!("the PTX build failed; see the message above");
    }
}
