# Sourced by deploy/test.sh and deploy/check_sanitizers.sh: runs the steps of a long command as
# named stages, each timed, and prints them as one table at the end.
#   stage NAME COMMAND...   runs COMMAND; appends NAME, its wall seconds and its exit status to
#                           $BYTECOMP_STAGE_LOG (the caller's file; one line a stage) and
#                           returns that status
#   stage_table TITLE       prints every stage of the log with its time, the total, and each
#                           budget of $BYTECOMP_STAGE_BUDGETS ("NAME=SECONDS ...", "total" for
#                           the whole) against what was measured
# A stage that fails still gets its line, so the table shows where the time went and what
# failed.

stage() {
  local name=$1
  shift
  local start=$SECONDS status=0
  echo "[stage] $name: $*"
  "$@" || status=$?
  printf '%s\t%d\t%d\n' "$name" $((SECONDS - start)) "$status" >>"$BYTECOMP_STAGE_LOG"
  echo "[stage] $name: $((SECONDS - start)) s, $([ "$status" = 0 ] && echo passed || echo "FAILED (exit $status)")"
  return "$status"
}

stage_table() {
  local title=$1
  [ -s "$BYTECOMP_STAGE_LOG" ] || return 0
  BYTECOMP_STAGE_TITLE=$title python3 - "$BYTECOMP_STAGE_LOG" <<'PY'
import os, sys
rows = [line.rstrip("\n").split("\t") for line in open(sys.argv[1]) if line.strip()]
budgets = dict(b.split("=") for b in os.environ.get("BYTECOMP_STAGE_BUDGETS", "").split() if "=" in b)
total = sum(int(r[1]) for r in rows)


def cell(name, seconds):
    limit = budgets.get(name)
    if limit is None:
        return ""
    verdict = "within" if seconds <= int(limit) else "OVER"
    return f"{verdict} {int(limit) // 60} min"


print(f"\n{os.environ['BYTECOMP_STAGE_TITLE']}: stages, wall time")
print(f"{'stage':<14} {'seconds':>8} {'min:s':>7}  {'result':<8} budget")
for name, seconds, status in rows:
    s = int(seconds)
    result = "passed" if status == "0" else f"FAILED {status}"
    print(f"{name:<14} {s:>8} {s // 60:>4}:{s % 60:02d}  {result:<8} {cell(name, s)}")
print(f"{'total':<14} {total:>8} {total // 60:>4}:{total % 60:02d}  {'':<8} {cell('total', total)}")
PY
}
