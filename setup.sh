#!/usr/bin/env bash
# Installs what the project needs on a fresh Debian machine, and nothing by hand:
#  1. the pinned nightly of rust-toolchain.toml (with rust-src, rustfmt, clippy), since
#     rustup here does not install toolchains on its own (RUSTUP_AUTO_INSTALL=0);
#  2. libcuda for linking (cust links the CUDA driver library): where no driver is installed,
#     Debian's libcuda1 from the non-free component, which on a machine without a GPU
#     answers "no CUDA-capable device" at run time and so lets the emulator take over;
#  3. ptxas for the PTX checks, from the pip package nvidia-cuda-nvcc-cu12.
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

# 2. libcuda.so for the linker.
if ! ldconfig -p | grep -q 'libcuda\.so ' && [ ! -e /usr/local/cuda/lib64/stubs/libcuda.so ]; then
  echo "setup: installing Debian's libcuda1 (link-time CUDA driver library)"
  sources=/etc/apt/sources.list.d/debian.sources
  if [ -f "$sources" ] && ! grep -q 'non-free' "$sources"; then
    as_root sed -i 's/^Components: main$/Components: main contrib non-free/' "$sources"
  elif [ -f /etc/apt/sources.list ] && ! grep -q 'non-free' /etc/apt/sources.list; then
    as_root sed -i 's/^\(deb .* main\)$/\1 contrib non-free/' /etc/apt/sources.list
  fi
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends libcuda1 >/dev/null
fi

# 3. ptxas.
if ! command -v ptxas >/dev/null && [ ! -x /usr/local/cuda/bin/ptxas ] \
   && ! python3 -c 'import nvidia.cuda_nvcc, os, sys; sys.exit(not os.path.isfile(os.path.join(list(nvidia.cuda_nvcc.__path__)[0], "bin", "ptxas")))' 2>/dev/null; then
  echo "setup: installing ptxas (pip: nvidia-cuda-nvcc-cu12)"
  python3 -m pip install -q --disable-pip-version-check nvidia-cuda-nvcc-cu12
fi
echo "setup: ready ($(rustup show active-toolchain | cut -d' ' -f1))"
