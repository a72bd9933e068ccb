#!/usr/bin/env bash
# Configures and builds ByteComp into build/ (BUILD_DIR overrides). CUDA code is built whenever
# nvcc is found (BYTECOMP_CUDA=AUTO), so a CUDA compile error fails the build.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
cuda=${BYTECOMP_CUDA:-AUTO}
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
cmake -S "$root" -B "$build" -G Ninja -DBYTECOMP_CUDA="$cuda" ${CMAKE_ARGS:-} >/dev/null
cmake --build "$build" -j "${JOBS:-$(nproc)}"
