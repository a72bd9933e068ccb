#!/usr/bin/env bash
# README command (b): installs what is needed, builds, runs every test (ctest: C++ unit tests,
# multi-process integration tests and the Python shim tests), then checks the lock rules of
# every C++ file with clang -Wthread-safety -Werror (deploy/check_clang.py, in build-clang/).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bash "$root/deploy/setup.sh"
bash "$root/deploy/build.sh"
cd "${BUILD_DIR:-$root/build}"
ctest --output-on-failure --timeout 600 -j "${TEST_JOBS:-2}"
python3 "$root/deploy/check_clang.py"
