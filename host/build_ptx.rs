//! Builds the kernel crate into PTX with rustc's own NVPTX backend (design.md §2).
//!
//! One source for two callers: the host crate's build script (so the embedded PTX is always
//! built from the kernel sources it is compiled with: a stale PTX cannot happen) and
//! `cargo xtask build-ptx` (which also runs `ptxas` over the result). Both include this file
//! with `#[path]`.

use std::path::{Path, PathBuf};
use std::process::Command;

/// One PTX build: a file name suffix and the `-C target-cpu` it is built for.
pub struct PtxFlavour {
    /// `sm_80`: JIT-compiled by the driver for A100, H100/H200 and newer.
    pub arch: &'static str,
}

/// Every flavour built. The host picks the newest one the device supports.
pub const FLAVOURS: [PtxFlavour; 2] = [PtxFlavour { arch: "sm_80" }, PtxFlavour { arch: "sm_90" }];

/// The kernel crate's package name.
pub const KERNEL_PACKAGE: &str = "gpu-select-kernels";

/// Kernels launched with more threads than 256, by name prefix, and their block size: their
/// entries get a `.maxntid` directive (what CUDA C's `__launch_bounds__` writes; rustc has no
/// attribute for it), so that `ptxas` and the driver's JIT keep them within the registers a
/// thread may have at that size (64 at 1024 threads). Without it the launch fails once
/// either compiler takes more. `tests/ptx_checks.rs` checks the size against the kernel
/// crate's constant.
pub const WIDE_KERNELS: [(&str, u32); 1] = [("sample_select_sample_", 1024)];

/// Adds [`WIDE_KERNELS`]' `.maxntid` directives to `ptx`: after the parameter list of each
/// matching `.entry`, before its body.
pub fn bound_block_threads(ptx: &str) -> String {
    let mut out = String::with_capacity(ptx.len() + 1024);
    let mut pending = None;
    for line in ptx.lines() {
        out.push_str(line);
        out.push('\n');
        if let Some(name) = line.trim_start().strip_prefix(".visible .entry ") {
            pending =
                WIDE_KERNELS.iter().find(|(prefix, _)| name.starts_with(prefix)).map(|&(_, threads)| threads);
        } else if line == ")"
            && let Some(threads) = pending.take()
        {
            out.push_str(&format!(".maxntid {threads}, 1, 1\n"));
        }
    }
    out
}

/// The file name of one flavour's PTX.
pub fn ptx_file_name(arch: &str) -> String {
    format!("gpu_select_kernels.{arch}.ptx")
}

/// Where `ptxas` is: `$PTXAS`, the `PATH`, `/usr/local/cuda/bin`, or the pip package
/// `nvidia-cuda-nvcc-cu12` (which `./setup.sh` installs).
#[allow(dead_code)] // the host build script does not assemble; xtask and the tests do
pub fn find_ptxas() -> Option<PathBuf> {
    if let Ok(path) = std::env::var("PTXAS") {
        return Some(PathBuf::from(path));
    }
    if Command::new("ptxas").arg("--version").output().is_ok_and(|o| o.status.success()) {
        return Some(PathBuf::from("ptxas"));
    }
    let cuda = PathBuf::from("/usr/local/cuda/bin/ptxas");
    if cuda.is_file() {
        return Some(cuda);
    }
    let output = Command::new("python3")
        .args(["-c", "import nvidia.cuda_nvcc, os; print(os.path.join(list(nvidia.cuda_nvcc.__path__)[0], 'bin', 'ptxas'))"])
        .output()
        .ok()?;
    let path = PathBuf::from(String::from_utf8_lossy(&output.stdout).trim());
    path.is_file().then_some(path)
}

/// Environment the outer cargo sets that must not leak into the nested PTX build: host
/// flags (coverage, sanitizers, linkers) mean nothing for nvptx64, and a wrapper such as
/// clippy-driver cannot build for it.
const ENV_TO_CLEAR: &[&str] = &[
    "CARGO_ENCODED_RUSTFLAGS",
    "RUSTFLAGS",
    "CARGO_BUILD_RUSTFLAGS",
    "CARGO_BUILD_TARGET",
    "CARGO_TARGET_DIR",
    "CARGO_BUILD_TARGET_DIR",
    "RUSTC_WRAPPER",
    "RUSTC_WORKSPACE_WRAPPER",
    "CARGO_MAKEFLAGS",
    "MAKEFLAGS",
    "MFLAGS",
    "CARGO_PRIMARY_PACKAGE",
    "CARGO_LLVM_COV",
    "LLVM_PROFILE_FILE",
];

/// Builds every flavour into `out_dir` and returns the files written.
///
/// `workspace` is the workspace root; the nested build uses its own target directory,
/// `target/ptx-build`, so it never waits on the outer build's lock.
pub fn build_ptx(workspace: &Path, out_dir: &Path) -> Result<Vec<PathBuf>, String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let target_dir = workspace.join("target").join("ptx-build");
    std::fs::create_dir_all(out_dir).map_err(|e| format!("cannot create {}: {e}", out_dir.display()))?;
    let mut written = Vec::new();
    for flavour in &FLAVOURS {
        let mut command = Command::new(&cargo);
        command
            .current_dir(workspace)
            .args(["rustc", "--package", KERNEL_PACKAGE, "--profile", "ptx"])
            .args(["--target", "nvptx64-nvidia-cuda", "-Zbuild-std=core", "--crate-type", "cdylib"])
            .arg("--target-dir")
            .arg(&target_dir)
            .args(["--", "-C", &format!("target-cpu={}", flavour.arch)])
            // The bitcode linker cannot be installed here; `--emit asm` leaves the PTX,
            // and `/bin/true` stands in for the link step.
            .args(["--emit", "asm", "-C", "linker=/bin/true"])
            // Queue merges of up to 64 registers per lane must unroll fully, or their
            // register arrays go to local memory (tests/ptx_checks.rs).
            .args(["-C", "llvm-args=-unroll-threshold=4000"]);
        for name in ENV_TO_CLEAR {
            command.env_remove(name);
        }
        for (name, _) in std::env::vars() {
            if name.starts_with("CARGO_TARGET_") || name.starts_with("CARGO_PROFILE_") {
                command.env_remove(name);
            }
        }
        let output = command.output().map_err(|e| format!("cannot run {cargo}: {e}"))?;
        if !output.status.success() {
            return Err(format!(
                "building the kernels for {} failed ({}):\n{}\n\
                 The PTX build needs the pinned nightly with rust-src (rust-toolchain.toml); \
                 `./setup.sh` installs it.",
                flavour.arch,
                output.status,
                String::from_utf8_lossy(&output.stderr)
            ));
        }
        let built =
            target_dir.join("nvptx64-nvidia-cuda").join("ptx").join("deps").join("gpu_select_kernels.s");
        let destination = out_dir.join(ptx_file_name(flavour.arch));
        let ptx =
            std::fs::read_to_string(&built).map_err(|e| format!("cannot read {}: {e}", built.display()))?;
        std::fs::write(&destination, bound_block_threads(&ptx))
            .map_err(|e| format!("cannot write {}: {e}", destination.display()))?;
        written.push(destination);
    }
    Ok(written)
}
