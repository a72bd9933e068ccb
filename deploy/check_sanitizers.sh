#!/usr/bin/env bash
# The sanitized and fuzz stages of the test command (deploy/test.sh runs this after the plain
# suite). Each builds with clang (CUDA off, -O1, line tables only, a unity build:
# deploy/configure_sanitized.sh) into its own directory. SANITIZER_STAGES picks the stages;
# README.md ("Sanitizers and fuzzing") gives what each takes on a 2-core machine.
#   asan  build-asan: ASan + UBSan (a UBSan finding is fatal), LeakSanitizer on for the C++
#         processes. Builds everything and runs the whole ctest suite but the packaging tests:
#         every fuzz target once over its corpus (seeds, grown inputs and past findings), every
#         C++ unit test, every integration test of real daemons and workers, the launcher's,
#         the tools' and the Python shims' tests (with the ASan runtime preloaded into each
#         interpreter and leak checks off there: test/sanitizers/python_asan.sh).
#         BYTECOMP_SANITIZER=asan: the longest jobs run the same checks on less work there
#         (cluster.sized, the planner's random models).
#   fuzz  deploy/fuzz.sh in build-fuzz (ASan + UBSan + libFuzzer's coverage instrumentation,
#         the fuzz targets only): every target of test/fuzz for FUZZ_SECONDS (60) on its
#         corpus, FUZZ_JOBS (2) at a time; a hard bound of targets x seconds / jobs.
#   tsan  build-tsan: ThreadSanitizer, with Abseil's locks and libzmq's hand-offs of messages
#         made visible to it (test/sanitizers/tsan_absl_sync.cc and tsan_zmq_sync.cc,
#         preloaded), the accesses of libzmq and of Abseil's deadlock graph ignored
#         (test/sanitizers/tsan.supp says why). Any TSan report fails the stage, whether or not
#         the test noticed it. Runs the scheduler's, server's, engine's and local
#         reducers' unit tests (their threads, ZeroMQ between them) and the integration tests
#         whose processes are ours (daemons and C++ workers: exact sums, bad input, codecs,
#         strategy switch, hierarchical, faults, server failover, scheduler restart, hostile
#         peers, cluster key; the longest jobs run fewer rounds there,
#         BYTECOMP_SANITIZER=tsan): clean.
# Default: SANITIZER_STAGES="asan fuzz tsan" (what deploy/test.sh runs). JOBS (build) and
# TEST_JOBS (ctest) default to 2. Prints each step's wall and CPU time and the total.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
stages=${SANITIZER_STAGES:-asan fuzz tsan}
jobs=${JOBS:-2} test_jobs=${TEST_JOBS:-2}
asan_build=${ASAN_BUILD_DIR:-$root/build-asan}
fuzz_build=${FUZZ_BUILD_DIR:-$root/build-fuzz}
tsan_build=${TSAN_BUILD_DIR:-$root/build-tsan}
supp=$root/test/sanitizers
log() { echo "[sanitizers] $*"; }
TIMEFORMAT="[sanitizers] %R s wall, %U s user + %S s system CPU"

# Everything: the suite's tests need the daemons, the engine library, the test workers, the
# tools and the fuzz targets.
asan_targets=(all)
# Not the packaging tests: they install the build into fresh roots, where an ASan build's
# binaries lack their runtime; what they check (layout, units) is not memory safety.
asan_tests=(-E '^package\.')

stage_asan() {
  log "asan: configure and build ${asan_targets[*]} in $asan_build"
  time {
    bash "$root/deploy/configure_sanitized.sh" asan "$asan_build" &&
      cmake --build "$asan_build" -j "$jobs" --target "${asan_targets[@]}"
  } || return 1
  log "asan: ctest ${asan_tests[*]} under ASan + UBSan"
  time (
    export ASAN_OPTIONS=detect_leaks=1:halt_on_error=1:abort_on_error=1:detect_stack_use_after_return=1
    export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
    export LSAN_OPTIONS=suppressions=$supp/lsan.supp
    export BYTECOMP_SANITIZER=asan  # the longest jobs run less work (cluster.sized)
    cd "$asan_build" && ctest --output-on-failure --timeout 900 -j "$test_jobs" "${asan_tests[@]}"
  )
}

stage_fuzz() {
  log "fuzz: build the fuzz targets in $fuzz_build, then every target ${FUZZ_SECONDS:-60} s"
  TIMEFORMAT="[sanitizers] fuzz: %R s wall, %U s user + %S s system CPU (build included)"
  time bash "$root/deploy/fuzz.sh" --build-dir "$fuzz_build" --seconds "${FUZZ_SECONDS:-60}" \
    --jobs "${FUZZ_JOBS:-2}"
}

# What the TSan stage runs: the check of the preloaded libraries
# (sanitizers.tsan_zmq_sync: hand-offs draw no report; a plain race and a zero-copy payload
# freed while ZeroMQ holds it still do), the unit tests
# with threads of their own, and the integration tests whose processes are ours (daemons and
# C++ workers). scheduler_test starts bytecomp-scheduler (SchedulerBinaryTest).
tsan_targets=(bytecomp-scheduler bytecomp-server bytecomp-keygen exact_sum_worker
              codec_cluster_worker bad_input_client hostile_peer intruder_client bytecomp-bench
              server_test scheduler_test worker_test local_reduce_test bytecomp_tsan_absl_sync
              bytecomp_tsan_zmq_sync tsan_zmq_sync_check)
tsan_tests='^(sanitizers\.tsan_zmq_sync|unit\.(server|scheduler|worker|worker\.local_reduce)|integration\.(exact_sums|bad_input|codecs|strategy_switch|hierarchical|faults|server_failover|scheduler_restart|hostile_peers|cluster_key))$'

stage_tsan() {
  log "tsan: configure and build ${tsan_targets[*]} in $tsan_build"
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
    export BYTECOMP_SANITIZER=tsan  # the longest jobs run less work (cluster.sized)
    export LD_PRELOAD="$tsan_build/lib/libbytecomp_tsan_absl_sync.so $tsan_build/lib/libbytecomp_tsan_zmq_sync.so"
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
  TIMEFORMAT="[sanitizers] %R s wall, %U s user + %S s system CPU"
  if ! "stage_$stage"; then failed+=("$stage"); fi
done
log "stages $stages: ${SECONDS} s wall in all"
if ((${#failed[@]})); then
  log "FAILED stages: ${failed[*]}"
  exit 1
fi
log "all stages passed: $stages"
