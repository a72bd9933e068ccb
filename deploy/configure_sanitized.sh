#!/usr/bin/env bash
# Configures a clang build directory for a sanitized stage (deploy/check_sanitizers.sh,
# deploy/fuzz.sh); CUDA off in both.
#   configure_sanitized.sh asan DIR   ASan + UBSan (findings fatal) and libFuzzer's coverage
#                                     instrumentation: the whole suite and the fuzz targets.
#                                     One shared ASan runtime for every binary, so that the
#                                     Python tests can preload it into each interpreter that
#                                     loads libbytecomp_worker.so (test/sanitizers/python_asan.sh,
#                                     put before every Python test's interpreter).
#   configure_sanitized.sh tsan DIR   ThreadSanitizer.
# CMAKE_ARGS is passed on (e.g. a compiler launcher).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
mode=$1 build=$2
# -O1 and line tables only (build type None: no -O2 -g1 after these flags): what the sanitizers
# recommend, enough for symbolized stacks, and a good deal less to compile than -O2 under
# instrumentation, which is most of these stages' time.
flags="-O1 -gline-tables-only"
args=(-G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DBYTECOMP_CUDA=OFF
      -DCMAKE_BUILD_TYPE=None "-DCMAKE_C_FLAGS=$flags"
      # compress/ tunes GCC's vectoriser with #pragma GCC optimize, which clang ignores.
      "-DCMAKE_CXX_FLAGS=$flags -Wno-unknown-pragmas")
case "$mode" in
  asan)
    runtime_dir=$(dirname "$(clang++ -print-file-name=libclang_rt.asan-x86_64.so)")
    link="-shared-libsan -Wl,-rpath,$runtime_dir"
    args+=(-DBYTECOMP_SANITIZE=ON -DBYTECOMP_FUZZ=ON
           "-DCMAKE_EXE_LINKER_FLAGS=$link" "-DCMAKE_SHARED_LINKER_FLAGS=$link"
           "-DBYTECOMP_PYTHON_WRAPPER=$root/test/sanitizers/python_asan.sh")
    ;;
  tsan)
    args+=(-DBYTECOMP_TSAN=ON)
    ;;
  *)
    echo "usage: configure_sanitized.sh asan|tsan DIR" >&2
    exit 2
    ;;
esac
cmake -S "$root" -B "$build" "${args[@]}" ${CMAKE_ARGS:-} >/dev/null
