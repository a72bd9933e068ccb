#!/usr/bin/env bash
# README command (b): installs what is needed, builds, runs every test (ctest: C++ unit tests,
# multi-process integration tests and the Python shim tests), then checks the lock rules of
# every C++ file with clang -Wthread-safety -Werror (deploy/check_clang.py, in build-clang/),
# then the sanitized and fuzz stages (deploy/check_sanitizers.sh, in build-asan/: the whole suite
# but the packaging tests under ASan and UBSan, the longest jobs on less work there; in
# build-fuzz/: every fuzz target for a minute; in build-tsan/: the scheduler's, server's and
# engine's unit and integration tests under ThreadSanitizer; README.md gives their time).
# BYTECOMP_SKIP_SANITIZERS=1 leaves those stages out (a quicker local run); SANITIZER_STAGES
# picks some of them.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bash "$root/deploy/setup.sh"
bash "$root/deploy/build.sh"
cd "${BUILD_DIR:-$root/build}"
ctest --output-on-failure --timeout 600 -j "${TEST_JOBS:-2}"
python3 "$root/deploy/check_clang.py"
if [ "${BYTECOMP_SKIP_SANITIZERS:-0}" != 1 ]; then
  bash "$root/deploy/check_sanitizers.sh"
fi
