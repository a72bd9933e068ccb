#!/usr/bin/env bash
# lint.format: every tracked C++ and CUDA file is as clang-format (.clang-format at the root)
# writes it. Prints each file that is not, and how to fix it; --fix formats them in place.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
fix=0
[ "${1:-}" = --fix ] && fix=1
if ! command -v clang-format >/dev/null; then
  echo "lint.format: clang-format is not installed (deploy/setup.sh installs it)" >&2
  exit 1
fi
# The tracked files where there is a git checkout, else every such file outside build trees.
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t files < <(git ls-files '*.cc' '*.h' '*.cu' '*.cuh')
else
  mapfile -t files < <(find . \( -name 'build*' -o -name '.git' -o -name '.venv*' \) -prune -o \
                         -type f \( -name '*.cc' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) \
                         -print | sed 's|^\./||' | sort)
fi
if [ "$fix" = 1 ]; then
  clang-format --style=file -i "${files[@]}"
  echo "lint.format: formatted ${#files[@]} files"
  exit 0
fi
# One clang-format for all files; each that differs is named in its "file:line:col: error:" lines.
rc=0
report=$(clang-format --style=file --dry-run -Werror "${files[@]}" 2>&1) || rc=$?
mapfile -t bad < <(sed -n 's/^\([^:]*\):[0-9]*:[0-9]*: error: .*/\1/p' <<<"$report" | sort -u)
if ((rc != 0 && ${#bad[@]} == 0)); then
  echo "lint.format: clang-format failed (exit $rc):" >&2
  echo "$report" | head -20 >&2
  exit 1
fi
if ((${#bad[@]})); then
  printf 'lint.format: not formatted: %s\n' "${bad[@]}" >&2
  echo "lint.format: ${#bad[@]} of ${#files[@]} files differ from clang-format" \
       "($(clang-format --version | sed 's/.*version //')); run: bash test/lint/check_format.sh --fix" >&2
  exit 1
fi
echo "lint.format: ${#files[@]} files formatted as .clang-format says"
