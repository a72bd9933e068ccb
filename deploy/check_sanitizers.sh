#!/usr/bin/env bash
# The sanitized and fuzz stages of the test command (deploy/test.sh runs this after the plain
# suite). Each builds with clang (CUDA off) into its own directory:
#   asan  build-asan: ASan + UBSan (a UBSan finding is fatal) with libFuzzer's coverage
#         instrumentation; everything is built and the whole ctest suite runs. LeakSanitizer is
#         on for the C++ tests (the Python interpreter's tree runs without it: python_asan.sh).
#   fuzz  deploy/fuzz.sh on build-asan: every target of test/fuzz for FUZZ_SECONDS (60) on its
#         corpus, 2 at a time.
#   tsan  build-tsan: ThreadSanitizer. Builds the daemons, the integration workers and the
#         server, scheduler and worker unit tests only, runs those unit tests and the
#         integration tests of the engine, server and scheduler, with Abseil's locks made
#         visible to TSan (test/sanitizers/tsan_absl_sync.cc, preloaded). Any TSan report
#         fails the stage, whether or not the test noticed it.
# SANITIZER_STAGES picks stages (default "asan fuzz tsan"); JOBS (build) and TEST_JOBS (ctest)
# default to 2. Prints each stage's wall and CPU time.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
stages=${SANITIZER_STAGES:-asan fuzz tsan}
jobs=${JOBS:-2} test_jobs=${TEST_JOBS:-2}
asan_build=${ASAN_BUILD_DIR:-$root/build-asan}
tsan_build=${TSAN_BUILD_DIR:-$root/build-tsan}
supp=$root/test/sanitizers
log() { echo "[sanitizers] $*"; }
TIMEFORMAT="[sanitizers] %R s wall, %U s user + %S s system CPU"

stage_asan() {
  log "asan: configure and build everything in $asan_build"
  time {
    bash "$root/deploy/configure_sanitized.sh" asan "$asan_build" &&
      cmake --build "$asan_build" -j "$jobs"
  } || return 1
  log "asan: the whole suite under ASan + UBSan"
  time (
    export ASAN_OPTIONS=detect_leaks=1:halt_on_error=1:abort_on_error=1:detect_stack_use_after_return=1
    export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
    export LSAN_OPTIONS=suppressions=$supp/lsan.supp
    # Not the packaging tests: they install the build into fresh roots, where an ASan build's
    # binaries lack their runtime; what they check (layout, units) is not memory safety.
    cd "$asan_build" && ctest --output-on-failure --timeout 900 -j "$test_jobs" -E '^package\.'
  )
}

stage_fuzz() {
  log "fuzz: every target ${FUZZ_SECONDS:-60} s"
  bash "$root/deploy/fuzz.sh" --build-dir "$asan_build" --seconds "${FUZZ_SECONDS:-60}" \
    --jobs "${FUZZ_JOBS:-2}"
}

# What the TSan stage runs: the unit tests with threads of their own, and the integration
# tests whose processes are ours (daemons and C++ workers).
tsan_targets=(bytecomp-scheduler bytecomp-server exact_sum_worker codec_cluster_worker
              bad_input_client bytecomp-bench server_test scheduler_test worker_test
              local_reduce_test bytecomp_tsan_absl_sync)
tsan_tests='^(unit\.(server|scheduler|worker|worker\.local_reduce)|integration\.(exact_sums|bad_input|codecs|strategy_switch|hierarchical|faults))$'

stage_tsan() {
  log "tsan: configure and build ${#tsan_targets[@]} targets in $tsan_build"
  time {
    bash "$root/deploy/configure_sanitized.sh" tsan "$tsan_build" &&
      cmake --build "$tsan_build" -j "$jobs" --target "${tsan_targets[@]}"
  } || return 1
  local reports=$tsan_build/tsan-reports
  rm -rf "$reports" && mkdir -p "$reports"
  log "tsan: tests matching $tsan_tests"
  local status=0
  time (
    export TSAN_OPTIONS="halt_on_error=0 exitcode=66 second_deadlock_stack=1 log_path=$reports/tsan suppressions=$supp/tsan.supp"
    export LD_PRELOAD=$tsan_build/lib/libbytecomp_tsan_absl_sync.so
    cd "$tsan_build" && ctest --output-on-failure --timeout 900 -j "$test_jobs" -R "$tsan_tests"
  ) || status=$?
  if compgen -G "$reports/tsan.*" >/dev/null; then
    log "tsan: FAILED: ThreadSanitizer reports (kept in $reports):"
    for f in "$reports"/tsan.*; do
      echo "===== $f"
      head -80 "$f"
    done
    status=1
  fi
  return "$status"
}

# (A function run as an if's condition runs without errexit: each stage checks its steps.)
failed=()
for stage in $stages; do
  if ! "stage_$stage"; then failed+=("$stage"); fi
done
if ((${#failed[@]})); then
  log "FAILED stages: ${failed[*]}"
  exit 1
fi
log "all stages passed: $stages"
