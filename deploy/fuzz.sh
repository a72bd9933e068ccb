#!/usr/bin/env bash
# Runs the fuzz targets of test/fuzz (libFuzzer, clang, ASan + UBSan), each for a bounded time
# on its committed corpus (test/fuzz/corpus/<target>) with its dictionary, --jobs at a time.
# Fails on any crash, sanitizer report, leak, timeout (one input running over --timeout s) or
# out-of-memory (over --rss-mb), and prints for each failure the input that caused it and how
# to reproduce and minimize it. New inputs the fuzzer finds go to a scratch directory, not
# into the repository (test/fuzz/README.md: adding a finding to the corpus).
#
#   deploy/fuzz.sh                      every target for 60 s, 2 at a time (test.sh --deep: 300)
#   deploy/fuzz.sh --seconds 3600 codec aggregator     longer, chosen targets
#   deploy/fuzz.sh --work-dir ~/fuzz-work --seconds 0  until stopped; keeps what it found
#
# Options: --seconds N (0: no limit), --jobs N, --timeout S, --rss-mb M, --build-dir DIR
# (default build-fuzz: ASan + UBSan + libFuzzer's coverage, configure_sanitized.sh fuzz; only
# the fuzz targets are built), --no-build, --work-dir DIR
# (default: a temporary directory, removed afterwards). Prints each target's coverage
# (libFuzzer's cov: and ft:) and executions, and the stage's wall and CPU time.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
seconds=60 jobs=${FUZZ_JOBS:-2} timeout=30 rss_mb=2048
build=${FUZZ_BUILD_DIR:-$root/build-fuzz} do_build=1 work=""
targets=()
while (($#)); do
  case "$1" in
    --seconds) seconds=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --timeout) timeout=$2; shift 2 ;;
    --rss-mb) rss_mb=$2; shift 2 ;;
    --build-dir) build=$2; shift 2 ;;
    --no-build) do_build=0; shift ;;
    --work-dir) work=$2; shift 2 ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
fuzz_dir=$root/test/fuzz
if ((${#targets[@]} == 0)); then
  for d in "$fuzz_dir"/corpus/*/; do targets+=("$(basename "$d")"); done
fi
log() { echo "[fuzz] $*"; }

# The largest input each target is given: room for its biggest seed and then some.
max_len() {
  case "$1" in
    codec|aggregator) echo 20000 ;;
    config_text) echo 16384 ;;
    *) echo 8192 ;;
  esac
}

if ((do_build)); then
  bash "$root/deploy/configure_sanitized.sh" fuzz "$build"
  cmake --build "$build" -j "${JOBS:-2}" --target "${targets[@]/%/_fuzzer}"
fi

keep_work=1
if [[ -z $work ]]; then
  work=$(mktemp -d /tmp/bytecomp-fuzz.XXXXXX)
  keep_work=0
fi
mkdir -p "$work"
# halt_on_error: UBSan is fatal already (-fno-sanitize-recover); ASan and LSan stop too.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:halt_on_error=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$root/test/sanitizers/lsan.supp}

run_one() {
  local t=$1 bin=$build/bin/${1}_fuzzer
  local corpus=$work/corpus/$t log=$work/$t.log
  mkdir -p "$corpus" "$work/artifacts"
  local dict=()
  [[ -f $fuzz_dir/dict/$t.dict ]] && dict=(-dict="$fuzz_dir/dict/$t.dict")
  local status=0
  "$bin" -max_total_time="$seconds" -timeout="$timeout" -rss_limit_mb="$rss_mb" \
    -malloc_limit_mb="$rss_mb" -detect_leaks=1 -max_len="$(max_len "$t")" "${dict[@]}" \
    -print_final_stats=1 -artifact_prefix="$work/artifacts/$t-" \
    "$corpus" "$fuzz_dir/corpus/$t" >"$log" 2>&1 || status=$?
  echo "$status" >"$work/$t.status"
}
export -f run_one max_len
export build work fuzz_dir seconds timeout rss_mb

log "${#targets[@]} targets, ${seconds} s each, $jobs at a time; work in $work"
TIMEFORMAT="[fuzz] stage: %R s wall, %U s user + %S s system CPU"
time printf '%s\n' "${targets[@]}" | xargs -P "$jobs" -I{} bash -c 'run_one {}'

failed=0
printf '[fuzz] %-18s %10s %8s %8s %8s  %s\n' target runs exec/s cov ft result
for t in "${targets[@]}"; do
  log_file=$work/$t.log
  status=$(cat "$work/$t.status" 2>/dev/null || echo 1)
  done_line=$(grep -a -E '^#[0-9]+[[:space:]]+DONE' "$log_file" | tail -1 || true)
  [[ -z $done_line ]] && done_line=$(grep -a -E '^#[0-9]+[[:space:]]' "$log_file" | tail -1 || true)
  runs=$(sed -n 's/^#\([0-9]*\).*/\1/p' <<<"$done_line")
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$done_line")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$done_line")
  eps=$(sed -n 's/.* exec\/s: \([0-9]*\).*/\1/p' <<<"$done_line")
  result=ok
  if [[ $status != 0 ]]; then
    result="FAILED (exit $status)"
    failed=1
  fi
  printf '[fuzz] %-18s %10s %8s %8s %8s  %s\n' "$t" "${runs:-?}" "${eps:-?}" "${cov:-?}" \
    "${ft:-?}" "$result"
done
if ((failed)); then
  for t in "${targets[@]}"; do
    [[ $(cat "$work/$t.status" 2>/dev/null || echo 1) == 0 ]] && continue
    echo "===== $t: the end of its log ($work/$t.log)"
    grep -a -v -E '^#[0-9]+[[:space:]]|NEW_FUNC' "$work/$t.log" | tail -60
    for a in "$work"/artifacts/"$t"-*; do
      [[ -e $a ]] || continue
      echo "----- input: $a"
      echo "      reproduce: $build/bin/${t}_fuzzer $a"
      echo "      minimize:  $build/bin/${t}_fuzzer -minimize_crash=1 -runs=10000 $a"
      echo "      then fix it and add the minimized input as" \
           "test/fuzz/corpus/$t/regress-<what> (test/fuzz/README.md)"
    done
  done
  keep_work=1
fi
if ((keep_work)); then log "kept $work"; else rm -rf "$work"; fi
exit "$failed"
