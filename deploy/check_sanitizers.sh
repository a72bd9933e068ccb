#!/usr/bin/env bash
# The sanitized and fuzz stages of the test command and of the deep run (deploy/test.sh runs
# this after the plain suite). Each builds with clang (CUDA off, -O1, line tables only, a
# unity build: deploy/configure_sanitized.sh) into its own directory. SANITIZER_STAGES picks
# the stages, SANITIZER_SCOPE how much each runs: `ci` (the default, what deploy/test.sh runs
# within its budget) or `deep` (deploy/test.sh --deep). docs/TESTING.md gives what each takes.
#   asan  build-asan: ASan + UBSan (a UBSan finding is fatal), LeakSanitizer on for the C++
#         processes, and clang's lock-rule check (-Wthread-safety -Werror on every C++ source:
#         this build compiles them all, and lint.lock_rules proves the check is in force).
#         ci: the lock-rule canary, every fuzz target once over its corpus (seeds, grown inputs
#         and past findings), every C++ unit test (UBSan found a null memcpy there), and the
#         cluster tests through the engine's distinct paths: every codec one- and two-way
#         (integration.codecs, where UBSan found a misaligned read of pulled factors), exact
#         sums, faults, bad input, device placement (hierarchical jobs in deep), and through the
#         PyTorch shim (the Python tests preload the ASan runtime into each interpreter, leak
#         checks off there: test/sanitizers/python_asan.sh) an adaptive two-round codec and
#         the DDP comm hook. deep: the whole ctest suite but the packaging tests.
#         BYTECOMP_SANITIZER=asan: the longest jobs run the same checks on less work there
#         (cluster.sized, the planner's random models).
#   fuzz  deep only (or SANITIZER_STAGES=fuzz): deploy/fuzz.sh in build-fuzz (ASan + UBSan +
#         libFuzzer's coverage instrumentation, the fuzz targets only): every target of
#         test/fuzz for FUZZ_SECONDS (deep 300, else 60)
#         on its corpus, FUZZ_JOBS (2) at a time; a hard bound of targets x seconds / jobs.
#   tsan  build-tsan: ThreadSanitizer, with Abseil's locks and libzmq's hand-offs of messages
#         made visible to it (test/sanitizers/tsan_absl_sync.cc and tsan_zmq_sync.cc,
#         preloaded), the accesses of libzmq and of Abseil's deadlock graph ignored
#         (test/sanitizers/tsan.supp says why). Any TSan report fails the stage, whether or not
#         the test noticed it. Both scopes: the check of the preloaded edges, the scheduler's,
#         server's, engine's and local reducers' unit tests (a use after free in the local
#         reducer was found there), and the integration tests whose processes are ours (daemons
#         and C++ workers): exact_sums, bad_input, codecs, strategy_switch, faults and
#         scheduler_restart (test workers freeing tensors ZeroMQ still held were found there),
#         cluster_key (a Register sent after its handshake had failed); deep adds the two
#         longest, hierarchical and server_failover (where the held tensors were found too),
#         and hostile_peers. The longest jobs run fewer rounds there (BYTECOMP_SANITIZER=tsan).
# JOBS (build) and TEST_JOBS (ctest) default to 2. Each step is a stage (deploy/stages.sh):
# with BYTECOMP_STAGE_LOG set (deploy/test.sh) its lines join the caller's table, otherwise
# this script prints its own.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
scope=${SANITIZER_SCOPE:-ci}
case "$scope" in
  ci|deep) ;;
  *) echo "SANITIZER_SCOPE must be ci or deep, got '$scope'" >&2; exit 2 ;;
esac
# Fuzzing (a build of its own and minutes of search) is the deep run's: the test command
# replays every target's corpus under ASan (fuzz.*.corpus), which keeps each past finding a
# regression test; work on a decoder runs the deep run before it is resolved.
if [ "$scope" = deep ]; then
  stages=${SANITIZER_STAGES:-asan fuzz tsan}
else
  stages=${SANITIZER_STAGES:-asan tsan}
fi
jobs=${JOBS:-2} test_jobs=${TEST_JOBS:-2}
asan_build=${ASAN_BUILD_DIR:-$root/build-asan}
fuzz_build=${FUZZ_BUILD_DIR:-$root/build-fuzz}
tsan_build=${TSAN_BUILD_DIR:-$root/build-tsan}
supp=$root/test/sanitizers
log() { echo "[sanitizers] $*"; }
# shellcheck source=deploy/stages.sh
source "$root/deploy/stages.sh"
own_table=0
if [ -z "${BYTECOMP_STAGE_LOG:-}" ]; then
  BYTECOMP_STAGE_LOG=$(mktemp /tmp/bytecomp-stages.XXXXXX)
  export BYTECOMP_STAGE_LOG
  own_table=1
fi

# Everything: the lock-rule check compiles every source, and the suite's tests need the
# daemons, the engine library, the test workers, the tools and the fuzz targets.
asan_targets=(all)
if [ "$scope" = ci ]; then
  # unit.compress.avx2: on an AVX2 machine unit.compress runs the same paths.
  asan_tests=(-R '^(lint\.lock_rules|fuzz\..*\.corpus|unit\..*|integration\.(codecs|exact_sums|faults|bad_input|device_placement)|python\.cluster_(adaptive_ratio|ddp_comm_hook_equals))$'
              -E '^unit\.compress\.avx2$')
else
  # Not the packaging tests: they install the build into fresh roots, where an ASan build's
  # binaries lack their runtime; what they check (layout, units) is not memory safety.
  asan_tests=(-E '^package\.')
fi

asan_build_step() {
  bash "$root/deploy/configure_sanitized.sh" asan "$asan_build" &&
    cmake --build "$asan_build" -j "$jobs" --target "${asan_targets[@]}"
}

asan_test_step() (
  export ASAN_OPTIONS=detect_leaks=1:halt_on_error=1:abort_on_error=1:detect_stack_use_after_return=1
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  export LSAN_OPTIONS=suppressions=$supp/lsan.supp
  export BYTECOMP_SANITIZER=asan  # the longest jobs run less work (cluster.sized)
  cd "$asan_build" && ctest --output-on-failure --timeout 900 -j "$test_jobs" "${asan_tests[@]}"
)

stage_asan() {
  log "asan: build ${asan_targets[*]} in $asan_build (ASan + UBSan, lock rules), then ctest ${asan_tests[*]}"
  stage asan-build asan_build_step || return 1
  stage asan-tests asan_test_step
}

stage_fuzz() {
  local seconds=${FUZZ_SECONDS:-$([ "$scope" = deep ] && echo 300 || echo 60)}
  log "fuzz: build the fuzz targets in $fuzz_build, then every target $seconds s"
  stage fuzz bash "$root/deploy/fuzz.sh" --build-dir "$fuzz_build" --seconds "$seconds" \
    --jobs "${FUZZ_JOBS:-2}"
}

# What the TSan stage builds: the daemons, the C++ test workers and clients, the unit tests
# with threads of their own and the preloaded libraries. scheduler_test starts
# bytecomp-scheduler (SchedulerBinaryTest).
tsan_targets=(bytecomp-scheduler bytecomp-server bytecomp-keygen exact_sum_worker
              codec_cluster_worker bad_input_client hostile_peer intruder_client bytecomp-bench
              server_test scheduler_test worker_test local_reduce_test collective_exchange_test
              bytecomp_tsan_absl_sync
              bytecomp_tsan_zmq_sync tsan_zmq_sync_check)
# ci leaves the two longest (hierarchical, server_failover: about 330 s of the stage's 740 s of
# tests here) and hostile_peers (66 s) to deep; the local reducer's threads stay in unit.worker.local_reduce, the replay
# after a lost node in scheduler_restart.
tsan_integration='exact_sums|bad_input|codecs|strategy_switch|faults|scheduler_restart|cluster_key|collectives'
if [ "$scope" = deep ]; then tsan_integration+='|hierarchical|server_failover|hostile_peers'; fi
tsan_tests="^(sanitizers\.tsan_zmq_sync|unit\.(server|scheduler|worker|worker\.local_reduce|worker\.collectives)|integration\.($tsan_integration))\$"

tsan_build_step() {
  bash "$root/deploy/configure_sanitized.sh" tsan "$tsan_build" &&
    cmake --build "$tsan_build" -j "$jobs" --target "${tsan_targets[@]}"
}

tsan_test_step() {
  local reports=$tsan_build/tsan-reports
  rm -rf "$reports" && mkdir -p "$reports"
  local status=0
  (
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

stage_tsan() {
  log "tsan: build ${tsan_targets[*]} in $tsan_build, then the tests matching $tsan_tests"
  stage tsan-build tsan_build_step || return 1
  stage tsan-tests tsan_test_step
}

# (A function run as an if's condition runs without errexit: each stage checks its steps.)
failed=()
for s in $stages; do
  if ! "stage_$s"; then failed+=("$s"); fi
done
if ((own_table)); then
  stage_table "check_sanitizers.sh ($scope: $stages)"
  rm -f "$BYTECOMP_STAGE_LOG"
fi
if ((${#failed[@]})); then
  log "FAILED stages: ${failed[*]}"
  exit 1
fi
log "all stages passed: $stages ($scope)"
