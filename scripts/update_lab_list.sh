#!/usr/bin/env bash
# Writes tutorials/labs.txt: every lab's tasks and points as its grader lists them
# (`labN_grader list`), so that `gradsleuth lab list` shows the labs before any grader is built
# and `lab release` can write the GitHub Classroom workflow. The labs_lint test fails when it is
# out of date with the graders; run this after changing a grader's tasks or points.
#   scripts/update_lab_list.sh [BUILD_DIR (default build)]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"
tmp="$(mktemp)"
trap 'rm -f "$tmp"' EXIT
{
  echo "# Every lab's tasks and points, as its grader lists them (scripts/update_lab_list.sh writes this file)."
  for g in $(ls "$build"/tutorials/lab*_grader 2>/dev/null | grep -E '/lab[0-9]+_grader$' | sort -V); do
    "$g" list
  done
} > "$tmp"
[[ $(grep -c '^lab [0-9]*:' "$tmp") -gt 0 ]] || { echo "update_lab_list: no graders in $build/tutorials (build them: cmake --build $build --target lab_graders)" >&2; exit 1; }
mv "$tmp" "$root/tutorials/labs.txt"
trap - EXIT
echo "update_lab_list: wrote tutorials/labs.txt ($(grep -c '^lab [0-9]*:' "$root/tutorials/labs.txt") labs)"
