#!/usr/bin/env bash
# README command (b), and CI's (.ci/run): installs what is needed, builds, and runs every test,
# as timed stages that end in a table (deploy/stages.sh):
#   setup       deploy/setup.sh (system packages, the MXNet environment)
#   build       deploy/build.sh into build/ (a unity build; CUDA code when nvcc is found)
#   ctest       the suite: C++ unit tests, clusters of real daemons and workers on loopback and
#               in network namespaces, the Python shims' tests, the launcher, the package
#   asan-build  build-asan/: clang with ASan + UBSan, and the lock-rule check (every C++
#               source compiled with -Wthread-safety -Werror)
#   asan-tests  the lock-rule canary, the fuzz corpora, every C++ unit test and every codec
#               through a cluster under ASan + UBSan
#   tsan-build, tsan-tests   build-tsan/: ThreadSanitizer on the unit tests with threads of
#               their own and the cluster tests where it found bugs
# (deploy/check_sanitizers.sh runs the last four, docs/TESTING.md says what each covers.)
# The budget, on a 2-core machine from a clean clone: the whole at most 40 minutes, ctest at
# most 12; the table says where each stands.
#
#   bash deploy/test.sh           the test command
#   bash deploy/test.sh --deep    what no longer fits the budget as well: the long jobs at full
#                                 size (BYTECOMP_TEST_DEPTH=deep), the whole suite under ASan,
#                                 the wider TSan scope, 5 minutes of fuzzing per target
#                                 (build-fuzz/, libFuzzer), the package on fresh Debian roots
#                                 (docs/TESTING.md: about 50 minutes). Run it before resolving
#                                 work that touches threads, sockets or decoders.
# BYTECOMP_SKIP_SANITIZERS=1 leaves the sanitized and fuzz stages out (a quicker local run);
# SANITIZER_STAGES picks some of them; TEST_JOBS sets ctest's parallelism (default 3: the
# cluster tests spend much of their time waiting on timeouts and heartbeats).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
deep=0
for arg in "$@"; do
  case "$arg" in
    --deep) deep=1 ;;
    -h|--help) sed -n '2,27p' "$0"; exit 0 ;;
    *) echo "deploy/test.sh: unknown argument '$arg' (--deep, --help)" >&2; exit 2 ;;
  esac
done

# shellcheck source=deploy/stages.sh
source "$root/deploy/stages.sh"
BYTECOMP_STAGE_LOG=$(mktemp /tmp/bytecomp-stages.XXXXXX)
export BYTECOMP_STAGE_LOG
title="deploy/test.sh"
if ((deep)); then
  title="deploy/test.sh --deep"
  export BYTECOMP_TEST_DEPTH=deep SANITIZER_SCOPE=deep
else
  export BYTECOMP_STAGE_BUDGETS="total=2400 ctest=720"
fi
trap 'stage_table "$title"; rm -f "$BYTECOMP_STAGE_LOG"' EXIT

run_ctest() {
  cd "${BUILD_DIR:-$root/build}" &&
    ctest --output-on-failure --timeout 600 -j "${TEST_JOBS:-3}"
}

stage setup bash "$root/deploy/setup.sh"
# CUDA code is compile-checked wherever nvcc is: also in a build directory that
# deploy/main.sh made without it.
export BYTECOMP_CUDA=${BYTECOMP_CUDA:-AUTO}
stage build bash "$root/deploy/build.sh"
stage ctest run_ctest
if [ "${BYTECOMP_SKIP_SANITIZERS:-0}" != 1 ]; then
  bash "$root/deploy/check_sanitizers.sh"
fi
