#!/usr/bin/env bash
# lint.lock_rules: the build that compiles every C++ source with -Wthread-safety -Werror
# (BYTECOMP_LOCK_RULES, the asan build) must refuse a broken lock rule. Compiles
# lock_rule_canary.cc with that build's compiler and flags, once with its rule kept (must
# compile) and once broken (-DBREAK_LOCK_RULE: must be refused by the thread-safety analysis).
#   lock_rule_canary.sh CXX [FLAG...]
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cxx=$1
shift
flags=(-std=c++20 -fsyntax-only -Wall -Wextra -Wthread-safety -Werror "$@")
if ! kept=$("$cxx" "${flags[@]}" "$here/lock_rule_canary.cc" 2>&1); then
  echo "FAILED: the canary with its lock rule kept does not compile:"
  echo "$kept"
  exit 1
fi
if broken=$("$cxx" "${flags[@]}" -DBREAK_LOCK_RULE "$here/lock_rule_canary.cc" 2>&1) ||
   ! grep -q -- "-Wthread-safety" <<<"$broken"; then
  echo "FAILED: $cxx accepted the canary with a broken lock rule, so the build's lock-rule"
  echo "check would let one through:"
  echo "$broken"
  exit 1
fi
echo "lock rules: a broken rule is refused ($(grep -c 'error:' <<<"$broken") error), a kept one compiles ($cxx)"
