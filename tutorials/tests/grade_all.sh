#!/usr/bin/env bash
# The lab_grade_all test: a made-up class (make_class.sh: correct, partly done, not compiling,
# hanging, crashing and writing-outside submissions of lab 1) graded by `gradsleuth lab grade-all`:
# every student gets the status and points of their kind, no file appears outside the students'
# folders, and each has a feedback file.
#   grade_all.sh GRADSLEUTH SOURCE_ROOT [STUDENTS]
set -euo pipefail
cli="$1" src="$2" count="${3:-12}"
tmp="$(mktemp -d "${TMPDIR:-/tmp}/gs_grade_all.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
"$src/tutorials/tests/make_class.sh" "$src" "$tmp/class" "$count" >/dev/null
"$cli" lab grade-all 1 "$tmp/class" --out "$tmp/gradebook.csv" -j 2 --timeout 4 --memory 2048
fail=0
check() { if ! grep -qE "$2" <<<"$1"; then echo "FAIL: expected /$2/ in: $1"; fail=1; fi; }
while IFS=, read -r student kind; do
  [[ $student == student ]] && continue
  row="$(grep "^$student," "$tmp/gradebook.csv" || true)"
  case "$kind" in
    correct)    check "$row" ',100,graded$' ;;
    partial)    check "$row" ',10,0,0,0,0,0,0,10,graded$' ;;
    no_compile) check "$row" ',0,"?did not compile: .*lab1\.cpp:[0-9]+:[0-9]+: error' ;;
    hangs)      check "$row" ',10,timed out in Task 1\.2 after 4 s$' ;;
    crashes)    check "$row" ',10,crashed in Task 1\.2: .*signal 11' ;;
    writes_out) check "$row" 'tried to write outside its folder \(\.\./\.\./escaped\.txt, refused\)' ;;
  esac
  [[ -s "$tmp/gradebook.csv.feedback/$student.txt" ]] || { echo "FAIL: no feedback file for $student"; fail=1; }
done < "$tmp/class/expected.csv"
rows=$(($(wc -l < "$tmp/gradebook.csv") - 1))
[[ $rows == "$count" ]] || { echo "FAIL: $rows rows in the gradebook for $count students"; fail=1; }
if [[ -n "$(find "$tmp" -name escaped.txt)" ]]; then echo "FAIL: a submission wrote outside its folder"; fail=1; fi
grep -q "Task 1.3  transpose as a view" "$tmp/gradebook.csv.feedback/student00_correct.txt" ||
  { echo "FAIL: the feedback file of a graded student has no report"; fail=1; }
[[ $fail == 0 ]] && echo "lab_grade_all: $count submissions, every status as expected"
exit $fail
