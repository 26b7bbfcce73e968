//! Project tasks that are not plain cargo. Run as `cargo xtask <task>`:
//!
//! * `build-ptx`: build the kernels (PTX by the pinned nightly, cubins for sm_80 and sm_90
//!   by `ptxas`), print registers, spills, stack and shared memory per kernel, and write
//!   the artifacts that changed to `host/kernels/` (committed: the library embeds them, so
//!   that it builds on stable Rust with no CUDA toolkit; see `kernels.rs`).
//! * `test`: formatting, clippy, the kernels rebuilt and compared with the committed ones
//!   (stale kernels fail), the API docs, every test of the workspace (unit, integration and
//!   doc tests) on the GPU when one is present, else the emulator, the examples, a crate
//!   outside the workspace that depends on gpu-select as README.md says (stable Rust), and
//!   `cargo publish --dry-run` of both crates.
//! * `bench [FILTER]`: the benchmarks (`benches/selection.rs`); on a GPU they write
//!   `docs/results/<gpu>-<date>.{json,md}`; without one they say so and run a short demo on
//!   the emulator.
//! * `bundle`: builds the test, bench and example binaries and puts them, with a script that
//!   runs them, in `.bundle/` to carry to a GPU machine (no Rust needed there).
//! * `downstream`, `package`: two steps of `test` on their own (the crate outside the
//!   workspace; `cargo publish --dry-run --workspace`).
//! * `ci`: what `.ci/run` runs (= `test`).

mod kernels;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let root = workspace_root();
    let result = match args.first().map(String::as_str) {
        Some("build-ptx") => build_kernels(&root),
        Some("test") | Some("ci") => test(&root),
        Some("bench") => bench(&root, &args[1..]),
        Some("bundle") => bundle(&root),
        Some("downstream") => downstream(&root),
        Some("package") => package(&root),
        _ => Err(format!(
            "usage: cargo xtask <build-ptx | test | bench [FILTER] | bundle | downstream | package | ci>\n{}",
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

/// `cargo xtask build-ptx`: rebuilds the kernels and writes what changed.
fn build_kernels(root: &Path) -> Result<(), String> {
    let artifacts = kernels::build(root)?;
    let written = kernels::write(root, &artifacts)?;
    if written.is_empty() {
        eprintln!("xtask: {}/ already held these kernels", kernels::KERNELS_DIR);
    } else {
        eprintln!("xtask: wrote {} in {}/: commit them", written.join(", "), kernels::KERNELS_DIR);
    }
    Ok(())
}

fn test(root: &Path) -> Result<(), String> {
    run(cargo().current_dir(root).args(["fmt", "--all", "--", "--check"]))?;
    run(cargo().current_dir(root).args(["clippy", "--workspace", "--all-targets", "--", "-D", "warnings"]))?;
    // The optional interop (cudarc views) too: its tests need a GPU, so here they only build.
    run(cargo().current_dir(root).args([
        "clippy",
        "--workspace",
        "--all-targets",
        "--all-features",
        "--",
        "-D",
        "warnings",
    ]))?;
    // The embedded kernels must be what the sources build: a stale kernel cannot ship.
    let artifacts = kernels::build(root)?;
    kernels::check(root, &artifacts)?;
    // The API docs must build without broken links (the examples run as doc tests below).
    run(cargo().current_dir(root).env("RUSTDOCFLAGS", "-D warnings").args([
        "doc",
        "--workspace",
        "--no-deps",
    ]))?;
    run(cargo().current_dir(root).args(["test", "--workspace"]))?;
    for example in EXAMPLES {
        run(cargo().current_dir(root).args(["run", "--quiet", "--example", example]))?;
    }
    mpi_processes(root)?;
    downstream(root)?;
    package(root)
}

/// `cargo publish --dry-run` of both crates: packaged, unpacked and built as crates.io would.
fn package(root: &Path) -> Result<(), String> {
    forget_unpacked_packages()?;
    // Its own target folder, with the two packages' artifacts removed first: cargo takes a
    // registry crate's sources as immutable, so a build of an earlier dry run's
    // `gpu-select-kernels 0.1.0` would otherwise be reused whatever the new package holds.
    let target = root.join("target").join("publish-dry-run");
    let target = target.to_str().ok_or("the target folder is not UTF-8")?;
    run(cargo().current_dir(root).args([
        "clean",
        "--target-dir",
        target,
        "-p",
        "gpu-select-kernels",
        "-p",
        "gpu-select",
    ]))?;
    run(cargo().current_dir(root).args([
        "publish",
        "--dry-run",
        "--workspace",
        "--allow-dirty",
        "--target-dir",
        target,
    ]))
}

/// Removes this workspace's own packages from cargo's registry caches. The dry run verifies
/// `gpu-select` against the `gpu-select-kernels` it just packaged, through a local registry
/// whose crates cargo unpacks into its shared registry folder under their name and version;
/// an earlier dry run's copy of the same version there is used as it is, stale (a kernel
/// module added since is then missing, as a rehearsal of `.ci/run` found).
fn forget_unpacked_packages() -> Result<(), String> {
    let cargo_home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cargo")))
        .ok_or("neither CARGO_HOME nor HOME is set")?;
    for cache in ["src", "cache"] {
        let Ok(registries) = std::fs::read_dir(cargo_home.join("registry").join(cache)) else { continue };
        for registry in registries.flatten() {
            let Ok(entries) = std::fs::read_dir(registry.path()) else { continue };
            for entry in entries.flatten() {
                let name = entry.file_name().to_string_lossy().to_string();
                let ours = ["gpu-select-", "gpu-select-kernels-"].iter().any(|package| {
                    name.strip_prefix(package)
                        .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit()))
                });
                if ours {
                    let path = entry.path();
                    let removed = if path.is_dir() {
                        std::fs::remove_dir_all(&path)
                    } else {
                        std::fs::remove_file(&path)
                    };
                    removed.map_err(|e| format!("cannot remove {}: {e}", path.display()))?;
                }
            }
        }
    }
    Ok(())
}

/// The programs of `examples/`, each run by `test` (on the emulator without a GPU).
const EXAMPLES: [&str; 6] = ["top_k", "rows", "select", "quantiles", "caller_memory", "knn_streamed"];

/// Distributed quantiles over real MPI processes (examples/dibms.rs, three processes on the
/// emulator): the answers of every algorithm, then the faults: a process with a bad
/// argument (every process returns the same error), one that stops answering (the others
/// time out and end the job) and one that exits (mpirun ends the job); none may hang.
fn mpi_processes(root: &Path) -> Result<(), String> {
    run(cargo().current_dir(root).args(["build", "--quiet", "--features", "mpi", "--example", "dibms"]))?;
    let binary = root.join("target/debug/examples/dibms");
    // (mode, exit status wanted, what its output must hold)
    let cases = [
        ("check", Some(0), "SortAndChoose: "),
        ("fault-input", Some(0), "rank 1 failed: invalid argument: quantile 1.5"),
        ("fault-silent", None, "heard nothing from the other ranks"),
        ("fault-exit", None, "exited"),
    ];
    for (mode, wanted_status, wanted_words) in cases {
        let started = std::time::Instant::now();
        let output = Command::new("timeout")
            .args(["600", "mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "3"])
            .arg(&binary)
            .arg(mode)
            .env("GPU_SELECT_BACKEND", "emulator")
            .output()
            .map_err(|e| format!("cannot start mpirun (./setup.sh installs Open MPI): {e}"))?;
        let text =
            format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
        let status = output.status.code();
        eprintln!(
            "xtask: mpirun -np 3 dibms {mode}: status {status:?} in {:.1} s",
            started.elapsed().as_secs_f64()
        );
        let status_ok = match wanted_status {
            Some(code) => status == Some(code),
            None => status.is_some_and(|code| code != 0 && code != 124), // failed, not timed out
        };
        if !status_ok || !text.contains(wanted_words) {
            return Err(format!(
                "mpirun -np 3 dibms {mode}: status {status:?}, wanted {wanted_status:?} and \"{wanted_words}\":\n{text}"
            ));
        }
        if mode == "check" {
            eprint!("{}", String::from_utf8_lossy(&output.stdout));
        }
    }
    Ok(())
}

/// Builds and runs, on stable Rust, a new crate outside the workspace that depends on
/// gpu-select exactly as README.md's "Use it in your crate" says: that section's
/// `Cargo.toml` lines and `main.rs`, with this checkout where the section puts it.
fn downstream(root: &Path) -> Result<(), String> {
    let readme = std::fs::read_to_string(root.join("README.md")).map_err(|e| e.to_string())?;
    let section = readme
        .split("\n## Use it in your crate\n")
        .nth(1)
        .map(|rest| rest.split("\n## ").next().unwrap_or(rest))
        .ok_or("README.md has no \"## Use it in your crate\" section")?;
    let block = |language: &str| -> Result<String, String> {
        let fence = format!("```{language}\n");
        let start = section.find(&fence).ok_or(format!("the section has no {language} block"))? + fence.len();
        let end = section[start..].find("```").ok_or(format!("the {language} block is not closed"))?;
        Ok(section[start..start + end].to_string())
    };
    let (dependencies, main) = (block("toml")?, block("rust")?);
    // The section says: a checkout of gpu-select beside your crate.
    let base = std::env::temp_dir().join(format!("gpu-select-downstream-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let app = base.join("my-app");
    std::fs::create_dir_all(app.join("src")).map_err(|e| e.to_string())?;
    std::os::unix::fs::symlink(root, base.join("gpu-select")).map_err(|e| e.to_string())?;
    let manifest =
        format!("[package]\nname = \"my-app\"\nversion = \"0.1.0\"\nedition = \"2024\"\n\n{dependencies}");
    std::fs::write(app.join("Cargo.toml"), manifest).map_err(|e| e.to_string())?;
    std::fs::write(app.join("src").join("main.rs"), main).map_err(|e| e.to_string())?;
    // `rustup run stable`: the toolchain a user has, not this workspace's pinned nightly; and
    // nothing of the outer cargo's environment.
    let mut command = Command::new("rustup");
    command.current_dir(&app).args(["run", "stable", "cargo", "run", "--quiet"]);
    for (name, _) in std::env::vars() {
        let keep = name == "CARGO_HOME";
        if !keep
            && (name.starts_with("CARGO")
                || name.starts_with("RUSTC")
                || name.starts_with("RUSTUP_TOOLCHAIN"))
        {
            command.env_remove(name);
        }
    }
    command.env_remove("RUSTFLAGS").env_remove("RUSTDOCFLAGS");
    let result = run(&mut command);
    let _ = std::fs::remove_dir_all(&base);
    result
}

fn bench(root: &Path, args: &[String]) -> Result<(), String> {
    let mut command = cargo();
    command.current_dir(root).args(["bench", "--package", "gpu-select", "--bench", "selection", "--"]);
    command.args(args);
    run(&mut command)
}

/// The executables a cargo command built (`test --no-run`, `build --examples`), from its
/// JSON messages.
fn built_executables(root: &Path, args: &[&str]) -> Result<Vec<PathBuf>, String> {
    let output = cargo()
        .current_dir(root)
        .args(args)
        .arg("--message-format=json")
        .output()
        .map_err(|e| format!("cannot run cargo {args:?}: {e}"))?;
    if !output.status.success() {
        return Err(format!("cargo {args:?} failed:\n{}", String::from_utf8_lossy(&output.stderr)));
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
    let mut names = Vec::new();
    let builds: [(&str, &[&str]); 3] = [
        // Not the `mpi` feature: the GPU machine has no MPI library to load.
        ("test", &["test", "--workspace", "--features", "cudarc,cust", "--no-run"]),
        ("bench", &["bench", "--workspace", "--no-run"]),
        ("example", &["build", "--release", "--examples", "--features", "cudarc,cust"]),
    ];
    for (kind, args) in builds {
        for executable in built_executables(root, args)? {
            // `cargo test --no-run` builds the examples too, under the same names as tests
            // (`rows`, `top_k`): only the examples' own build bundles them.
            if (kind == "example") != executable.components().any(|part| part.as_os_str() == "examples") {
                continue;
            }
            let file_name = executable.file_name().unwrap().to_string_lossy().to_string();
            // cargo names binaries <target>-<hash>; keep the target name.
            let target = match kind {
                "example" => file_name.clone(),
                _ => file_name.rsplit_once('-').map_or(file_name.as_str(), |(name, _)| name).to_string(),
            };
            let wanted = match kind {
                "bench" => target == "selection",
                "example" => true,
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
    let script = r#"#!/usr/bin/env bash
# Runs the bundled test binaries on this machine's GPU; then, with "bench", the benchmarks.
# Usage: .bundle/run.sh [tests] [sanitize] [examples] [bench]   (from the repository root)
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
export GPU_SELECT_BACKEND="${GPU_SELECT_BACKEND:-cuda}"
status=0
for step in "${@:-tests}"; do
  case "$step" in
    tests)
      for t in "$here"/bin/test-*; do
        echo "=== $(basename "$t")"
        # The GPU-only tests (ignored on the emulator) run here too.
        "$t" --test-threads=1 --include-ignored || status=1
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
    examples)
      for e in "$here"/bin/example-*; do
        echo "=== $(basename "$e")"
        "$e" || status=1
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
