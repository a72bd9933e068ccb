#!/usr/bin/env bash
# Configures a clang build directory for a sanitized stage (deploy/check_sanitizers.sh,
# deploy/fuzz.sh); CUDA off in each.
#   configure_sanitized.sh asan DIR   ASan + UBSan (findings fatal), and clang's lock-rule check
#                                     (BYTECOMP_LOCK_RULES: -Wthread-safety -Werror on every C++
#                                     source; this build compiles them all). The fuzz
#                                     targets here run their corpora once (replay_main.cc).
#                                     One shared ASan runtime for every binary, so that the
#                                     Python tests can preload it into each interpreter that
#                                     loads libbytecomp_worker.so (test/sanitizers/python_asan.sh,
#                                     put before every Python test's interpreter).
#   configure_sanitized.sh fuzz DIR   ASan + UBSan and libFuzzer's coverage instrumentation: the
#                                     fuzz targets as libFuzzer binaries (deploy/fuzz.sh). Apart
#                                     from asan because the coverage instrumentation makes the
#                                     suite's processes much slower (measured: seven of its
#                                     longest tests took 613 s with it, 382 s without).
#   configure_sanitized.sh tsan DIR   ThreadSanitizer.
# Every one is a unity build (CMAKE_UNITY_BUILD: a target's sources compiled in batches, the
# headers parsed once a batch): these builds start cold in CI, and it halves their compile
# time (measured cold: the asan build 306 s instead of 650 s, the tsan stage's targets 95 s
# instead of 291 s). A name defined in two sources of one target then clashes: give it one
# home (a shared header) or a name of its own.
# CMAKE_ARGS is passed on (e.g. a compiler launcher).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
mode=$1 build=$2
# -O1 and line tables only (build type None: no -O2 -g1 after these flags): what the sanitizers
# recommend, enough for symbolized stacks, and a good deal less to compile than -O2 under
# instrumentation, which is most of these stages' time.
flags="-O1 -gline-tables-only"
args=(-G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DBYTECOMP_CUDA=OFF
      -DCMAKE_BUILD_TYPE=None -DCMAKE_UNITY_BUILD=ON "-DCMAKE_C_FLAGS=$flags"
      # compress/ tunes GCC's vectoriser with #pragma GCC optimize, which clang ignores.
      "-DCMAKE_CXX_FLAGS=$flags -Wno-unknown-pragmas")
case "$mode" in
  asan|fuzz)
    runtime_dir=$(dirname "$(clang++ -print-file-name=libclang_rt.asan-x86_64.so)")
    link="-shared-libsan -Wl,-rpath,$runtime_dir"
    args+=(-DBYTECOMP_SANITIZE=ON "-DCMAKE_EXE_LINKER_FLAGS=$link"
           "-DCMAKE_SHARED_LINKER_FLAGS=$link")
    if [[ $mode == fuzz ]]; then
      args+=(-DBYTECOMP_FUZZ=ON)
    else
      args+=(-DBYTECOMP_FUZZ=OFF -DBYTECOMP_LOCK_RULES=ON
             "-DBYTECOMP_PYTHON_WRAPPER=$root/test/sanitizers/python_asan.sh")
    fi
    ;;
  tsan)
    args+=(-DBYTECOMP_TSAN=ON)
    ;;
  *)
    echo "usage: configure_sanitized.sh asan|fuzz|tsan DIR" >&2
    exit 2
    ;;
esac
cmake -S "$root" -B "$build" "${args[@]}" ${CMAKE_ARGS:-} >/dev/null
