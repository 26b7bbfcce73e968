//! Builds the prebuilt kernels that the library embeds (`host/kernels/`), and checks that the
//! committed ones are what the sources build today.
//!
//! 1. The kernel crate to PTX with rustc's own NVPTX backend (design.md §2; the pinned
//!    nightly): one module of every kernel, `.target sm_80`, the fallback that the driver
//!    compiles for GPUs without a prebuilt binary (newer than Hopper).
//! 2. That PTX to machine code (cubins) by `ptxas` for sm_80 (A100 and every 8.x GPU) and
//!    sm_90 (H100, H200): no JIT compilation on those GPUs, so a fresh machine starts in
//!    well under a second instead of the 134 s the driver took to compile 28 MB of PTX.
//! 3. Each artifact zstd-compressed (the library decompresses the one it loads), with the
//!    `ptxas -v` report of each cubin beside it (registers, stack, spills per kernel: read
//!    by `tests/ptx_checks.rs`) and `BUILD_INFO` naming the tools that made them.
//!
//! The compression is not part of what must match: [`check()`] compares the decompressed
//! contents with a fresh build, and [`write()`] rewrites only the files whose contents changed,
//! so a newer zstd never makes a diff.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The kernel crate's package name.
pub const KERNEL_PACKAGE: &str = "gpu-select-kernels";

/// What the PTX is built for (`-C target-cpu`): the oldest GPU the library supports.
pub const PTX_ARCH: &str = "sm_80";

/// The GPUs that get machine code, and the ptxas `-arch` for each.
pub const CUBIN_ARCHES: [&str; 2] = ["sm_80", "sm_90"];

/// The ptxas release the committed cubins were built with: `./setup.sh` installs exactly
/// this one (pip `nvidia-cuda-nvcc-cu12` at [`PTXAS_PIP_VERSION`]), so that a rebuild on any
/// machine gives the same bytes. Another release gives other (valid) machine code, and the
/// check says so.
pub const PTXAS_RELEASE: &str = "V12.9.86";

/// The pip package version that holds [`PTXAS_RELEASE`] (read by `./setup.sh`).
pub const PTXAS_PIP_VERSION: &str = "12.9.86";

/// Where the committed artifacts live, relative to the workspace root.
pub const KERNELS_DIR: &str = "host/kernels";

/// Launch bounds, by kernel family and key type: `(family, key, threads, blocks)`
/// ([`bound_applies`]; an empty key: every key type). Each matching entry
/// gets a `.maxntid threads` directive (what CUDA C's `__launch_bounds__` writes; rustc has
/// no attribute for it), and with `blocks > 0` a `.minnctapersm blocks` too, so that `ptxas`
/// and the driver's JIT keep it within the registers a thread may have at that size (64 at
/// 1024 threads). Kernels launched with more than 256 threads need it, or the launch fails
/// once either compiler takes more. The SBP partition asks for as many blocks per
/// multiprocessor as its shared-memory tile allows and its registers fit without spilling
/// (four of 256 threads with 32-bit keys: 64 registers, where it would take 118 and run two;
/// three with 16-bit keys and 64-bit integers; `f64` spills at three and gets no bound), so
/// that some blocks load while others narrow. The radix select's filter with 32- and 16-bit
/// keys keeps the two blocks of 256 threads per multiprocessor its host plan launches: its
/// batched form's row pointers would take it to 144 registers and one block (64-bit keys
/// took 147 and one block already, and spill at two). The k-NN filtered product keeps the two
/// blocks of 256 threads per multiprocessor of the plain distance tile (128 registers), which
/// its epilogue's appends took to 140 and one block in a first form; so does the TF32 tile
/// (not split), whose interleaved stages took it to 151 (H200 run 344: 5.8 → 8.1 ms a
/// query tile at one block). `tests/ptx_checks.rs` checks each
/// entry's directives against the kernel crate's constants, and that no kernel spills.
pub const LAUNCH_BOUNDS: [(&str, &str, u32, u32); 17] = [
    ("sample_select_sample", "", 1024, 0),
    ("sbp_tree", "", 1024, 0),
    ("sbp_partition", "f32", 256, 4),
    ("sbp_partition", "i32", 256, 4),
    ("sbp_partition", "u32", 256, 4),
    ("sbp_partition", "f16", 256, 3),
    ("sbp_partition", "bf16", 256, 3),
    ("sbp_partition", "f64", 256, 0),
    ("sbp_partition", "i64", 256, 3),
    ("sbp_partition", "u64", 256, 3),
    ("radix_filter", "f32", 256, 2),
    ("radix_filter", "i32", 256, 2),
    ("radix_filter", "u32", 256, 2),
    ("radix_filter", "f16", 256, 2),
    ("radix_filter", "bf16", 256, 2),
    ("knn_distance_filter", "", 256, 2),
    ("knn_distance_tile_tf32", "", 256, 2),
];

/// Whether the kernel `name` is of `family` (its name starts `family_`; the SBP partition's
/// family holds both of its kernels, `sbp_partition_<key>` and `sbp_partition_tree_<key>`)
/// and, unless `key` is empty, of that key type (its name ends `_key`).
fn bound_applies(name: &str, family: &str, key: &str) -> bool {
    name.strip_prefix(family)
        .is_some_and(|rest| rest.starts_with('_') && (key.is_empty() || rest.ends_with(&format!("_{key}"))))
}

/// One file of `host/kernels/`: its name there and its uncompressed contents.
pub struct Artifact {
    pub name: String,
    pub contents: Vec<u8>,
}

impl Artifact {
    /// Stored zstd-compressed (the name ends in `.zst`), or as plain text.
    fn compressed(&self) -> bool {
        self.name.ends_with(".zst")
    }
}

/// Adds [`LAUNCH_BOUNDS`]' directives to `ptx`: after the parameter list of each matching
/// `.entry`, before its body.
pub fn bound_block_threads(ptx: &str) -> String {
    let mut out = String::with_capacity(ptx.len() + 1024);
    let mut pending = None;
    for line in ptx.lines() {
        out.push_str(line);
        out.push('\n');
        if let Some(name) = line.trim_start().strip_prefix(".visible .entry ") {
            pending = LAUNCH_BOUNDS
                .iter()
                .find(|(family, key, _, _)| bound_applies(name.trim_end_matches('('), family, key))
                .map(|&(_, _, threads, blocks)| (threads, blocks));
        } else if line == ")"
            && let Some((threads, blocks)) = pending.take()
        {
            out.push_str(&format!(".maxntid {threads}, 1, 1\n"));
            if blocks > 0 {
                out.push_str(&format!(".minnctapersm {blocks}\n"));
            }
        }
    }
    out
}

/// Where `ptxas` is: `$PTXAS`, else the pip package `nvidia-cuda-nvcc-cu12` that
/// `./setup.sh` installs at [`PTXAS_RELEASE`], else the `PATH` or `/usr/local/cuda/bin`.
pub fn find_ptxas() -> Option<PathBuf> {
    if let Ok(path) = std::env::var("PTXAS") {
        return Some(PathBuf::from(path));
    }
    let output = Command::new("python3")
        .args(["-c", "import nvidia.cuda_nvcc, os; print(os.path.join(list(nvidia.cuda_nvcc.__path__)[0], 'bin', 'ptxas'))"])
        .output();
    if let Ok(output) = output {
        let path = PathBuf::from(String::from_utf8_lossy(&output.stdout).trim());
        if path.is_file() {
            return Some(path);
        }
    }
    if Command::new("ptxas").arg("--version").output().is_ok_and(|o| o.status.success()) {
        return Some(PathBuf::from("ptxas"));
    }
    let cuda = PathBuf::from("/usr/local/cuda/bin/ptxas");
    cuda.is_file().then_some(cuda)
}

/// The release `ptxas --version` names, e.g. `V12.9.86`.
fn ptxas_release(ptxas: &Path) -> Result<String, String> {
    let output = Command::new(ptxas)
        .arg("--version")
        .output()
        .map_err(|e| format!("cannot run {}: {e}", ptxas.display()))?;
    let text = String::from_utf8_lossy(&output.stdout);
    text.split_whitespace()
        .find(|word| word.starts_with('V') && word[1..].starts_with(|c: char| c.is_ascii_digit()))
        .map(str::to_string)
        .ok_or_else(|| format!("{} --version printed no release:\n{text}", ptxas.display()))
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

/// Builds the kernel crate into PTX (the pinned nightly, `-Zbuild-std=core`), with the
/// `.maxntid` directives added. Its own target directory, so it never waits on the lock of
/// a build that runs it.
fn build_ptx(workspace: &Path) -> Result<String, String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let target_dir = workspace.join("target").join("ptx-build");
    let mut command = Command::new(&cargo);
    command
        .current_dir(workspace)
        .args(["rustc", "--package", KERNEL_PACKAGE, "--profile", "ptx"])
        .args(["--target", "nvptx64-nvidia-cuda", "-Zbuild-std=core", "--crate-type", "cdylib"])
        .arg("--target-dir")
        .arg(&target_dir)
        .args(["--", "-C", &format!("target-cpu={PTX_ARCH}")])
        // The bitcode linker cannot be installed here; `--emit asm` leaves the PTX, and
        // `/bin/true` stands in for the link step.
        .args(["--emit", "asm", "-C", "linker=/bin/true"])
        // Queue merges of up to 64 registers per lane must unroll fully, or their register
        // arrays go to local memory (tests/ptx_checks.rs checks the reports).
        .args(["-C", "llvm-args=-unroll-threshold=4000"]);
    for name in ENV_TO_CLEAR {
        command.env_remove(name);
    }
    for (name, _) in std::env::vars() {
        if name.starts_with("CARGO_TARGET_") || name.starts_with("CARGO_PROFILE_") {
            command.env_remove(name);
        }
    }
    eprintln!("xtask: building the kernels into PTX ({PTX_ARCH}, the pinned nightly)");
    let output = command.output().map_err(|e| format!("cannot run {cargo}: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "building the kernels failed ({}):\n{}\nThe kernel build needs the pinned nightly with \
             rust-src (rust-toolchain.toml); `./setup.sh` installs it.",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    let built = target_dir.join("nvptx64-nvidia-cuda").join("ptx").join("deps").join("gpu_select_kernels.s");
    let ptx = std::fs::read_to_string(&built).map_err(|e| format!("cannot read {}: {e}", built.display()))?;
    Ok(bound_block_threads(&ptx))
}

/// Assembles `ptx_file` for `arch`: the cubin and ptxas's `-v` report.
fn assemble(ptxas: &Path, ptx_file: &Path, arch: &str, cubin: &Path) -> Result<String, String> {
    let output = Command::new(ptxas)
        .args([&format!("-arch={arch}"), "-v"])
        .arg(ptx_file)
        .arg("-o")
        .arg(cubin)
        .output()
        .map_err(|e| format!("cannot run {}: {e}", ptxas.display()))?;
    let report = String::from_utf8_lossy(&output.stderr).to_string();
    if !output.status.success() {
        return Err(format!("ptxas -arch={arch} rejected the PTX:\n{report}"));
    }
    // Kept and compared: what the machine code is. Not how long ptxas took.
    Ok(report
        .lines()
        .filter(|line| !line.contains("Compile time ="))
        .map(|line| format!("{line}\n"))
        .collect())
}

/// One kernel's line of a ptxas report.
#[derive(Default)]
pub struct KernelReport {
    pub name: String,
    pub registers: String,
    pub stack: String,
    pub spill_stores: String,
    pub spill_loads: String,
    pub shared: String,
}

/// The kernels of a `ptxas -v` report, each from its own properties line (a section goes on
/// with the properties of the functions it calls, which must not stand in for it).
pub fn parse_ptxas_report(report: &str) -> Vec<KernelReport> {
    let mut kernels = Vec::new();
    for section in report.split("Compiling entry function '").skip(1) {
        let name = section[..section.find('\'').unwrap_or(0)].to_string();
        let properties = format!("Function properties for {name}\n");
        let own = section.find(&properties).map_or(section, |at| &section[at + properties.len()..]);
        let number_before = |text: &str, unit: &str| -> String {
            text.find(unit)
                .map(|end| {
                    text[..end]
                        .trim_end()
                        .rsplit(|c: char| !c.is_ascii_digit())
                        .next()
                        .unwrap_or("")
                        .to_string()
                })
                .unwrap_or_else(|| "0".to_string())
        };
        kernels.push(KernelReport {
            stack: number_before(own, " bytes stack frame"),
            spill_stores: number_before(own, " bytes spill stores"),
            spill_loads: number_before(own, " bytes spill loads"),
            registers: number_before(own, " registers"),
            shared: number_before(own, " bytes smem"),
            name,
        });
    }
    kernels
}

/// Builds every artifact of `host/kernels/` from the sources, in `target/kernels/`, and
/// prints each cubin's resource table. (Which kernels may use local memory is
/// `tests/ptx_checks.rs`'s rule, over the reports stored here.)
pub fn build(workspace: &Path) -> Result<Vec<Artifact>, String> {
    let ptxas = find_ptxas().ok_or(
        "ptxas not found: `./setup.sh` installs it (pip nvidia-cuda-nvcc-cu12), or set PTXAS".to_string(),
    )?;
    let release = ptxas_release(&ptxas)?;
    if release != PTXAS_RELEASE {
        return Err(format!(
            "{} is ptxas {release}; the committed cubins come from {PTXAS_RELEASE}, and only that \
             release rebuilds them byte for byte. `./setup.sh` installs it (pip install \
             nvidia-cuda-nvcc-cu12=={PTXAS_PIP_VERSION}), or set PTXAS.",
            ptxas.display()
        ));
    }
    let ptx = build_ptx(workspace)?;
    let scratch = workspace.join("target").join("kernels");
    std::fs::create_dir_all(&scratch).map_err(|e| format!("cannot create {}: {e}", scratch.display()))?;
    let ptx_file = scratch.join("gpu_select_kernels.ptx");
    std::fs::write(&ptx_file, &ptx).map_err(|e| format!("cannot write {}: {e}", ptx_file.display()))?;

    // The two assemblies take minutes each and are independent: side by side.
    eprintln!("xtask: assembling the cubins ({}) with ptxas {release}", CUBIN_ARCHES.join(", "));
    let reports: Vec<Result<String, String>> = std::thread::scope(|scope| {
        let jobs: Vec<_> = CUBIN_ARCHES
            .iter()
            .map(|arch| {
                let (ptxas, ptx_file, cubin) = (&ptxas, &ptx_file, scratch.join(format!("{arch}.cubin")));
                scope.spawn(move || assemble(ptxas, ptx_file, arch, &cubin))
            })
            .collect();
        jobs.into_iter().map(|job| job.join().expect("the ptxas thread panicked")).collect()
    });

    let rustc = Command::new(std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_string()))
        .current_dir(workspace)
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let mut info = format!(
        "# What built the prebuilt kernels (written by `cargo xtask build-ptx`; checked by `cargo xtask test`).\n\
         kernels: {rustc}, target nvptx64-nvidia-cuda, -C target-cpu={PTX_ARCH}\n\
         cubins: ptxas {release}, -arch {}\n",
        CUBIN_ARCHES.join(", ")
    );
    let mut artifacts = vec![];
    for (arch, report) in CUBIN_ARCHES.iter().zip(reports) {
        let report = report?;
        let cubin_file = scratch.join(format!("{arch}.cubin"));
        let cubin =
            std::fs::read(&cubin_file).map_err(|e| format!("cannot read {}: {e}", cubin_file.display()))?;
        println!("\nptxas -arch={arch}:");
        println!(
            "{:<40} {:>5} {:>7} {:>12} {:>11} {:>7}",
            "kernel", "regs", "stack", "spill stores", "spill loads", "smem"
        );
        let kernels = parse_ptxas_report(&report);
        for kernel in &kernels {
            println!(
                "{:<40} {:>5} {:>7} {:>12} {:>11} {:>7}",
                kernel.name,
                kernel.registers,
                kernel.stack,
                kernel.spill_stores,
                kernel.spill_loads,
                kernel.shared
            );
        }
        info.push_str(&format!("{arch}.cubin: {} kernels, {} bytes\n", kernels.len(), cubin.len()));
        artifacts.push(Artifact { name: format!("gpu_select_kernels.{arch}.cubin.zst"), contents: cubin });
        artifacts.push(Artifact { name: format!("ptxas.{arch}.txt"), contents: report.into_bytes() });
    }
    info.push_str(&format!("PTX: {} bytes\n", ptx.len()));
    artifacts.push(Artifact { name: "gpu_select_kernels.ptx.zst".to_string(), contents: ptx.into_bytes() });
    artifacts.push(Artifact { name: "BUILD_INFO".to_string(), contents: info.into_bytes() });
    Ok(artifacts)
}

/// The uncompressed contents of a committed artifact, if the file is there.
fn committed(dir: &Path, artifact: &Artifact) -> Result<Option<Vec<u8>>, String> {
    let path = dir.join(&artifact.name);
    let Ok(bytes) = std::fs::read(&path) else { return Ok(None) };
    if artifact.compressed() {
        zstd::decode_all(bytes.as_slice())
            .map(Some)
            .map_err(|e| format!("cannot decompress {}: {e}", path.display()))
    } else {
        Ok(Some(bytes))
    }
}

/// zstd's window for the artifacts, as a power of two: 64 MiB, past the largest artifact
/// (47 MB of PTX), so a kernel's code matches its other key types' anywhere in the file. At
/// level 19's own 8 MiB window the cubins compressed 2.3 MB worse (3.75 against 3.00 MB
/// each) and the three passed the library's 10 MiB bound. The library's decoder (ruzstd)
/// takes windows up to 128 MiB.
const WINDOW_LOG: u32 = 26;

/// `contents` zstd-compressed: level 19, long-distance matching over a [`WINDOW_LOG`] window.
fn compress(contents: &[u8]) -> Result<Vec<u8>, String> {
    use std::io::Write;
    let fail = |e: std::io::Error| format!("cannot compress: {e}");
    let mut encoder = zstd::stream::Encoder::new(Vec::new(), 19).map_err(fail)?;
    encoder.long_distance_matching(true).map_err(fail)?;
    encoder.window_log(WINDOW_LOG).map_err(fail)?;
    encoder.write_all(contents).map_err(fail)?;
    encoder.finish().map_err(fail)
}

/// Writes the artifacts whose contents differ from the committed ones (compressed by
/// [`compress`]: 80 MB of PTX and cubins in about 9 MB). Returns the names written.
pub fn write(workspace: &Path, artifacts: &[Artifact]) -> Result<Vec<String>, String> {
    let dir = workspace.join(KERNELS_DIR);
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let mut written = Vec::new();
    for artifact in artifacts {
        if committed(&dir, artifact)?.as_deref() == Some(artifact.contents.as_slice()) {
            continue;
        }
        let bytes =
            if artifact.compressed() { compress(&artifact.contents)? } else { artifact.contents.clone() };
        let path = dir.join(&artifact.name);
        std::fs::write(&path, bytes).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        written.push(artifact.name.clone());
    }
    Ok(written)
}

/// Fails unless every committed artifact holds exactly what the sources build today.
pub fn check(workspace: &Path, artifacts: &[Artifact]) -> Result<(), String> {
    let dir = workspace.join(KERNELS_DIR);
    let stale: Vec<&str> = artifacts
        .iter()
        .map(|artifact| Ok((artifact, committed(&dir, artifact)?)))
        .collect::<Result<Vec<_>, String>>()?
        .into_iter()
        .filter(|(artifact, contents)| contents.as_deref() != Some(artifact.contents.as_slice()))
        .map(|(artifact, _)| artifact.name.as_str())
        .collect();
    if stale.is_empty() {
        eprintln!("xtask: the committed kernels in {KERNELS_DIR}/ match the sources");
        Ok(())
    } else {
        Err(format!(
            "the committed kernels are stale: {} differ from what the sources build. Run \
             `cargo xtask build-ptx` and commit {KERNELS_DIR}/.",
            stale.join(", ")
        ))
    }
}
