#!/usr/bin/env bash
# Test fixture: a made-up class of lab 1 submissions for `gradsleuth lab grade-all`, one folder
# per student, each holding that student's lab1.cpp. Student k gets kind k mod 6:
#   correct      the reference solution                                   100 points
#   partial      the starter with Task 1.1 done                            10 points
#   no_compile   the starter with a syntax error                          did not compile
#   hangs        Task 1.1 done, Task 1.2 loops forever                    timed out in Task 1.2
#   crashes      Task 1.1 done, Task 1.2 writes through a null pointer    crashed in Task 1.2
#   writes_out   Task 1.1 done, Task 1.2 writes a file outside its folder  tried to write outside
# and expected.csv lists each student's kind.
#   make_class.sh SOURCE_ROOT OUT_DIR [STUDENTS (default 40)]
set -euo pipefail
src="$1" out="$2" count="${3:-40}"
starter="$src/tutorials/lab1_tensors/lab1.cpp" solution="$src/tutorials/lab1_tensors/solution/lab1.cpp"
[[ -f $starter && -f $solution ]] || { echo "make_class: no lab 1 starter and solution under $src" >&2; exit 2; }
mkdir -p "$out"

task1='  Strides s(shape.size(), 1);
  for (int64_t d = static_cast<int64_t>(shape.size()) - 2; d >= 0; --d) s[d] = s[d + 1] * shape[d + 1];
  return s;'
# The starter with Task 1.1 written and Task 1.2's stub replaced by $2.
with_tasks() {
  awk -v t1="$task1" -v t2="$1" '
    /not implemented: lab 1 task 1 / { print t1; next }
    /not implemented: lab 1 task 2 / && t2 != "" { print t2; next }
    { print }' "$starter"
}
kinds=(correct partial no_compile hangs crashes writes_out)
echo "student,kind" > "$out/expected.csv"
for ((k = 0; k < count; k++)); do
  kind="${kinds[k % 6]}"
  s="$(printf 'student%02d_%s' "$k" "$kind")"
  mkdir -p "$out/$s"
  case "$kind" in
    correct) cp "$solution" "$out/$s/lab1.cpp" ;;
    partial) with_tasks "" > "$out/$s/lab1.cpp" ;;
    no_compile) with_tasks "  int x = ;  // a syntax error" > "$out/$s/lab1.cpp" ;;
    hangs) with_tasks '  for (volatile int64_t spin = 0;; spin = spin + 1) {
  }' > "$out/$s/lab1.cpp" ;;
    crashes) with_tasks '  volatile int64_t* nowhere = nullptr;
  return *nowhere;' > "$out/$s/lab1.cpp" ;;
    writes_out) with_tasks '  if (std::FILE* f = std::fopen("../../escaped.txt", "w")) std::fclose(f);
  throw Error("lab 1", "could not finish storage_index");' > "$out/$s/lab1.cpp"
                sed -i 's|#include "core/ops.h"|#include "core/ops.h"\n\n#include <cstdio>|' "$out/$s/lab1.cpp" ;;
  esac
  echo "$s,$kind" >> "$out/expected.csv"
done
echo "make_class: $count submissions in $out"
