#!/usr/bin/env bash
# Configures and builds ByteComp into build/ (BUILD_DIR overrides): everything, or the targets
# named as arguments (deploy/main.sh builds only what it runs).
#   bash deploy/build.sh [TARGET...]
# Settings, each applied when the build directory is configured for the first time, or
# whenever the variable is set (so a build directory keeps what it was made with):
#   BYTECOMP_CUDA   AUTO (CUDA code whenever nvcc is found, so a CUDA compile error fails the
#                   build), ON, OFF; default AUTO
#   BYTECOMP_UNITY  ON: a unity build (each target's sources compiled in batches, the headers
#                   parsed once a batch: a cold build in about half the time); OFF for
#                   incremental work, where a changed file recompiles only itself; default ON
# A compiler cache (ccache) is used where one is installed. JOBS: parallel jobs (the cores).
# CMAKE_ARGS: more arguments for cmake.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
args=()
fresh=0
[ -f "$build/CMakeCache.txt" ] || fresh=1
if ((fresh)) || [ -n "${BYTECOMP_CUDA+set}" ]; then
  args+=("-DBYTECOMP_CUDA=${BYTECOMP_CUDA:-AUTO}")
fi
if ((fresh)) || [ -n "${BYTECOMP_UNITY+set}" ]; then
  args+=("-DCMAKE_UNITY_BUILD=${BYTECOMP_UNITY:-ON}")
fi
if ((fresh)) && command -v ccache >/dev/null 2>&1; then
  args+=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache
         -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
cmake -S "$root" -B "$build" -G Ninja "${args[@]}" ${CMAKE_ARGS:-} >/dev/null
targets=()
(($#)) && targets=(--target "$@")
cmake --build "$build" -j "${JOBS:-$(nproc)}" "${targets[@]}"
