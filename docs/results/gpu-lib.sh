# Sourced by the GPU run scripts beside it (knn-gpu.sh, multi-gpu.sh, robustness-gpu.sh,
# distributed-gpu.sh): what every run does first. Binaries of the commit under test come xz-compressed in .gpu-run/ (the GPU machine
# has Python but no xz); `unpack NAME` puts .gpu-run/NAME.xz at /tmp/NAME, once.
export GPU_SELECT_BACKEND=cuda
unpack() {
  [ -x "/tmp/$1" ] || { python3 -c 'import lzma,sys; open(sys.argv[2],"wb").write(lzma.open(sys.argv[1]).read())' \
    ".gpu-run/$1.xz" "/tmp/$1" && chmod +x "/tmp/$1"; }
}
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader
