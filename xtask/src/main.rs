//! Project tasks that are not plain cargo. Run as `cargo xtask <task>`:
//!
//! * `build-ptx`: build the kernels into PTX (sm_80 and sm_90) under `target/ptx/`, then
//!   check them with `ptxas` and print registers, spills, stack and shared memory per
//!   kernel; a ptxas error fails the task.
//! * `test`: formatting, clippy, the PTX build and check, then every test of the workspace
//!   (unit, integration and doc tests) on the GPU when one is present, else the emulator.
//! * `bench [FILTER]`: the benchmarks (`benches/selection.rs`); on a GPU they write
//!   `docs/results/<gpu>-<date>.{json,md}`; without one they say so and run a short demo on
//!   the emulator.
//! * `bundle`: builds the test and bench binaries and puts them, with a script that runs
//!   them, in `.bundle/` to carry to a GPU machine (no Rust needed there).
//! * `ci`: what `.ci/run` runs (= `test`).

#[path = "../../host/build_ptx.rs"]
mod build_ptx;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let root = workspace_root();
    let result = match args.first().map(String::as_str) {
        Some("build-ptx") => build_and_check_ptx(&root).map(|_| ()),
        Some("test") | Some("ci") => test(&root),
        Some("bench") => bench(&root, &args[1..]),
        Some("bundle") => bundle(&root),
        _ => Err(format!(
            "usage: cargo xtask <build-ptx | test | bench [FILTER] | bundle | ci>\n{}",
            "see xtask/src/main.rs for what each does"
        )),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("xtask: {message}");
            ExitCode::FAILURE
        }
    }
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("xtask/ lives in the workspace").to_path_buf()
}

fn cargo() -> Command {
    Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string()))
}

fn run(command: &mut Command) -> Result<(), String> {
    eprintln!("xtask: running {command:?}");
    let status = command.status().map_err(|e| format!("cannot start {command:?}: {e}"))?;
    if status.success() { Ok(()) } else { Err(format!("{command:?} failed ({status})")) }
}

/// One kernel's line of the ptxas report.
#[derive(Default)]
struct KernelReport {
    name: String,
    registers: String,
    stack: String,
    spill_stores: String,
    spill_loads: String,
    shared: String,
}

fn parse_ptxas_report(report: &str) -> Vec<KernelReport> {
    let mut kernels = Vec::new();
    for section in report.split("Compiling entry function '").skip(1) {
        let mut kernel = KernelReport {
            name: section[..section.find('\'').unwrap_or(0)].to_string(),
            ..Default::default()
        };
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
        kernel.stack = number_before(section, " bytes stack frame");
        kernel.spill_stores = number_before(section, " bytes spill stores");
        kernel.spill_loads = number_before(section, " bytes spill loads");
        kernel.registers = number_before(section, " registers");
        kernel.shared = number_before(section, " bytes smem");
        kernels.push(kernel);
    }
    kernels
}

fn build_and_check_ptx(root: &Path) -> Result<Vec<PathBuf>, String> {
    let out_dir = root.join("target").join("ptx");
    let files = build_ptx::build_ptx(root, &out_dir)?;
    for file in &files {
        eprintln!("xtask: wrote {}", file.display());
    }
    let Some(ptxas) = build_ptx::find_ptxas() else {
        eprintln!(
            "xtask: ptxas not found, so the PTX was not assembled: `pip install nvidia-cuda-nvcc-cu12` \
             (or ./setup.sh) provides it"
        );
        return Ok(files);
    };
    for (file, flavour) in files.iter().zip(build_ptx::FLAVOURS.iter()) {
        let output = Command::new(&ptxas)
            .args([&format!("-arch={}", flavour.arch), "-v"])
            .arg(file)
            .args(["-o", "/dev/null"])
            .output()
            .map_err(|e| format!("cannot run {}: {e}", ptxas.display()))?;
        let report = String::from_utf8_lossy(&output.stderr);
        if !output.status.success() {
            return Err(format!("ptxas rejected {}:\n{report}", file.display()));
        }
        println!("\nptxas -arch={} ({}):", flavour.arch, ptxas.display());
        println!(
            "{:<24} {:>5} {:>7} {:>12} {:>11} {:>7}",
            "kernel", "regs", "stack", "spill stores", "spill loads", "smem"
        );
        for kernel in parse_ptxas_report(&report) {
            println!(
                "{:<24} {:>5} {:>7} {:>12} {:>11} {:>7}",
                kernel.name,
                kernel.registers,
                kernel.stack,
                kernel.spill_stores,
                kernel.spill_loads,
                kernel.shared
            );
        }
    }
    Ok(files)
}

fn test(root: &Path) -> Result<(), String> {
    run(cargo().current_dir(root).args(["fmt", "--all", "--", "--check"]))?;
    run(cargo().current_dir(root).args(["clippy", "--workspace", "--all-targets", "--", "-D", "warnings"]))?;
    build_and_check_ptx(root)?;
    // The API docs must build without broken links (the examples run as doc tests below).
    run(cargo().current_dir(root).env("RUSTDOCFLAGS", "-D warnings").args([
        "doc",
        "--workspace",
        "--no-deps",
    ]))?;
    run(cargo().current_dir(root).args(["test", "--workspace"]))
}

fn bench(root: &Path, args: &[String]) -> Result<(), String> {
    let mut command = cargo();
    command.current_dir(root).args(["bench", "--package", "gpu-select", "--bench", "selection", "--"]);
    command.args(args);
    run(&mut command)
}

/// The executables `cargo <subcommand> --no-run` built, from its JSON messages.
fn built_executables(root: &Path, subcommand: &str) -> Result<Vec<PathBuf>, String> {
    let output = cargo()
        .current_dir(root)
        .args([subcommand, "--workspace", "--no-run", "--message-format=json"])
        .output()
        .map_err(|e| format!("cannot run cargo {subcommand}: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "cargo {subcommand} --no-run failed:\n{}",
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    let mut executables = Vec::new();
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        if let Some(start) = line.find("\"executable\":\"") {
            let rest = &line[start + 14..];
            if let Some(end) = rest.find('"') {
                executables.push(PathBuf::from(&rest[..end]));
            }
        }
    }
    Ok(executables)
}

fn bundle(root: &Path) -> Result<(), String> {
    let bundle = root.join(".bundle");
    let _ = std::fs::remove_dir_all(&bundle);
    std::fs::create_dir_all(bundle.join("bin")).map_err(|e| e.to_string())?;
    let ptx = build_and_check_ptx(root)?;
    let mut names = Vec::new();
    for (kind, subcommand) in [("test", "test"), ("bench", "bench")] {
        for executable in built_executables(root, subcommand)? {
            let file_name = executable.file_name().unwrap().to_string_lossy().to_string();
            // cargo names binaries <target>-<hash>; keep the target name.
            let target = file_name.rsplit_once('-').map_or(file_name.as_str(), |(name, _)| name).to_string();
            let wanted = match kind {
                "bench" => target == "selection",
                _ => target != "xtask",
            };
            if !wanted {
                continue;
            }
            let name = format!("{kind}-{target}");
            let destination = bundle.join("bin").join(&name);
            std::fs::copy(&executable, &destination).map_err(|e| e.to_string())?;
            // Debug info is most of a test binary; the bundle must stay small to travel.
            let _ = Command::new("strip").arg("--strip-debug").arg(&destination).status();
            names.push(name);
        }
    }
    for file in ptx {
        std::fs::copy(&file, bundle.join(file.file_name().unwrap())).map_err(|e| e.to_string())?;
    }
    let script = r#"#!/usr/bin/env bash
# Runs the bundled test binaries on this machine's GPU; then, with "bench", the benchmarks.
# Usage: .bundle/run.sh [tests] [sanitize] [bench]   (from the repository root)
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
export GPU_SELECT_BACKEND="${GPU_SELECT_BACKEND:-cuda}"
status=0
for step in "${@:-tests}"; do
  case "$step" in
    tests)
      for t in "$here"/bin/test-*; do
        echo "=== $(basename "$t")"
        "$t" --test-threads=1 || status=1
      done ;;
    sanitize)
      for tool in memcheck racecheck; do
        echo "=== compute-sanitizer --tool $tool: device primitives, block sort (f32, f64, i64 longest), small top-k (every algorithm), small selections, ragged rows (queues and radix), the large row queues and the split radix row (its merge)"
        compute-sanitizer --tool "$tool" --error-exitcode 9 "$here"/bin/test-device_primitives --test-threads=1 || status=1
        compute-sanitizer --tool "$tool" --error-exitcode 9 "$here"/bin/test-block_sort --test-threads=1 \
          sorts_f32 sorts_f64 sorts_the_longest || status=1
        compute-sanitizer --tool "$tool" --error-exitcode 9 "$here"/bin/test-top_k --test-threads=1 \
          algorithms_agree_with_each_other bitonic_for_every_queue_size || status=1
        compute-sanitizer --tool "$tool" --error-exitcode 9 "$here"/bin/test-select --test-threads=1 \
          workspace_is_sized nan_and_signed_zero approximate_selection_is_exact || status=1
        compute-sanitizer --tool "$tool" --error-exitcode 9 "$here"/bin/test-rows --test-threads=1 \
          ragged_rows_pad_what_they_lack many_ragged_rows_one_warp_each large_queues_and_k_beyond_them \
          radix_ragged_rows split_radix_row_f32 || status=1
      done ;;
    bench)
      "$here"/bin/bench-selection --bench || status=1 ;;
  esac
done
exit $status
"#;
    let script_path = bundle.join("run.sh");
    std::fs::write(&script_path, script).map_err(|e| e.to_string())?;
    run(Command::new("chmod").arg("+x").arg(&script_path))?;
    eprintln!("xtask: bundled {} binaries in {}: {}", names.len(), bundle.display(), names.join(", "));
    Ok(())
}
