#!/usr/bin/env bash
# Installs what the project's own commands need on a fresh Debian machine, and nothing by hand:
#  1. the pinned nightly of rust-toolchain.toml (with rust-src, rustfmt, clippy), which builds
#     the kernels; rustup here does not install toolchains on its own (RUSTUP_AUTO_INSTALL=0);
#  2. the stable toolchain, on which `cargo xtask test` builds a crate that depends on
#     gpu-select the way README.md tells users to;
#  3. ptxas at the release the committed cubins were built with (pip nvidia-cuda-nvcc-cu12;
#     xtask/src/kernels.rs names it), so that `cargo xtask test` can rebuild them and find
#     them the same;
#  4. the CUDA driver library for the linker, for the optional `cust` feature only (cust links
#     libcuda when it builds; `cargo xtask test` builds every feature): where no driver is
#     installed, Debian's libcuda1 from the non-free component, which on a machine without a
#     GPU answers "no CUDA-capable device". The library itself links nothing: it loads the
#     driver at run time and runs on its emulator where there is none;
#  5. Open MPI and libclang (Debian's openmpi-bin, libopenmpi-dev, libclang-dev): the `mpi`
#     feature's crate binds MPI with bindgen, and `cargo xtask test` starts real MPI
#     processes with mpirun (distributed quantiles).
# Each step is skipped when its tool is already there, so running it again costs seconds.
set -euo pipefail
cd "$(dirname "$0")"

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
    echo "setup: need root for: $*" >&2; return 1; fi
}

# 1. Rust: `rustup toolchain install` with no name reads rust-toolchain.toml.
if ! rustup run "$(sed -n 's/^channel = "\(.*\)"/\1/p' rust-toolchain.toml)" rustc --version >/dev/null 2>&1; then
  echo "setup: installing the pinned Rust toolchain"
  rustup toolchain install
fi

# 2. Stable Rust, as a user of the library has it.
if ! rustup run stable rustc --version >/dev/null 2>&1; then
  echo "setup: installing stable Rust"
  rustup toolchain install stable --profile minimal
fi

# 3. ptxas, at the pinned release.
ptxas_package="nvidia-cuda-nvcc-cu12==$(sed -n 's/^pub const PTXAS_PIP_VERSION: &str = "\(.*\)";/\1/p' xtask/src/kernels.rs)"
if [ "$(python3 -m pip show nvidia-cuda-nvcc-cu12 2>/dev/null | sed -n 's/^Version: //p')" != "${ptxas_package#*==}" ]; then
  echo "setup: installing ptxas (pip: $ptxas_package)"
  python3 -m pip install -q --disable-pip-version-check "$ptxas_package"
fi
# 4. libcuda.so for the linker (the `cust` feature).
if ! ldconfig -p | grep -q 'libcuda\.so ' && [ ! -e /usr/local/cuda/lib64/stubs/libcuda.so ]; then
  echo "setup: installing Debian's libcuda1 (the CUDA driver library, for linking the cust feature)"
  sources=/etc/apt/sources.list.d/debian.sources
  if [ -f "$sources" ] && ! grep -q 'non-free' "$sources"; then
    as_root sed -i 's/^Components: main$/Components: main contrib non-free/' "$sources"
  elif [ -f /etc/apt/sources.list ] && ! grep -q 'non-free' /etc/apt/sources.list; then
    as_root sed -i 's/^\(deb .* main\)$/\1 contrib non-free/' /etc/apt/sources.list
  fi
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends libcuda1 >/dev/null
fi
# 5. Open MPI, and libclang for the mpi crate's bindings.
if ! command -v mpirun >/dev/null || ! command -v mpicc >/dev/null || ! ldconfig -p | grep -q 'libclang'; then
  echo "setup: installing Open MPI and libclang (Debian's openmpi-bin, libopenmpi-dev, libclang-dev)"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    openmpi-bin libopenmpi-dev libclang-dev >/dev/null
fi
echo "setup: ready ($(rustup show active-toolchain | cut -d' ' -f1), $(rustup run stable rustc --version))"
