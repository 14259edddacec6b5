#!/usr/bin/env bash
# The lab12_release test: lab 12 handed out on its own. `gradsleuth lab release --labs 12` (through
# tests/release.sh: no solution file or solution line in the tree) must hold lab 12's starter,
# README and grader and no other lab, list lab 12 alone in tutorials/labs.txt and give a GitHub
# Classroom workflow with one step per task. Lab 12's Gradescope zip (make_autograder.sh 12) must
# hold the same and build lab 12's grader; its run_autograder, run against a fake /autograder on
# this build, gives the reference solution 100 points, the starter 0 and a submission that forges
# its results 0 ("needs review").
#   lab12_release.sh GRADSLEUTH SOURCE_ROOT
set -euo pipefail
cli="$1" src="$2"
tmp="$(mktemp -d "${TMPDIR:-/tmp}/gs_lab12_release.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
fail=0
bad() { echo "FAIL: $*"; fail=1; }

"$src/tutorials/tests/release.sh" "$cli" "$src" 12 || bad "tests/release.sh with lab 12"
"$cli" lab release "$tmp/course" --labs 12 >/dev/null
rel="$tmp/course"
for f in tutorials/lab12_precision/README.md tutorials/lab12_precision/lab12.h tutorials/lab12_precision/lab12.cpp \
         tutorials/grader/grade_lab12.cpp tutorials/examples/watch_lab12.cpp; do
  [[ -f $rel/$f ]] || bad "the release has no $f"
done
[[ ! -e $rel/tutorials/lab12_precision/solution ]] || bad "lab 12's solution folder is in the release"
[[ ! -e $rel/tutorials/lab11_fast && ! -e $rel/tutorials/grader/grade_lab11.cpp ]] || bad "lab 11 is in a release of lab 12"
[[ "$(grep -c '^lab [0-9]*:' "$rel/tutorials/labs.txt")" == 1 ]] && grep -q '^lab 12:' "$rel/tutorials/labs.txt" ||
  bad "tutorials/labs.txt of the release does not list lab 12 alone"
for k in 1 2 3 4; do
  grep -q "lab12_grader check 12 --task $k --expect full" "$rel/.github/workflows/classroom.yml" ||
    bad "the Classroom workflow has no step for Task 12.$k"
done

# Gradescope: the zip, then run_autograder on this build for the solution and the starter.
(cd "$tmp" && "$src/scripts/gradescope/make_autograder.sh" 12 --out "$tmp/lab12.zip" >/dev/null)
listing="$(python3 -c 'import sys, zipfile; print("\n".join(zipfile.ZipFile(sys.argv[1]).namelist()))' "$tmp/lab12.zip")"
for f in setup.sh run_autograder gradsleuth/tutorials/lab12_precision/lab12.cpp gradsleuth/tutorials/grader/grade_lab12.cpp; do
  grep -qx "$f" <<<"$listing" || bad "the Gradescope zip has no $f"
done
! grep -q "solution" <<<"$listing" || bad "the Gradescope zip holds a solution file: $(grep solution <<<"$listing" | head -3)"
python3 -c 'import sys, zipfile; s = zipfile.ZipFile(sys.argv[1]).read("setup.sh").decode(); sys.exit("--target lab12_grader" not in s)' \
  "$tmp/lab12.zip" || bad "the zip's setup.sh does not build lab12_grader"
sed 's/@LAB@/12/g' "$src/scripts/gradescope/run_autograder.in" > "$tmp/run_autograder"
chmod +x "$tmp/run_autograder"
for kind in solution:100 starter:0; do
  IFS=: read -r name want <<<"$kind"
  fake="$tmp/autograder_$name"
  mkdir -p "$fake/submission" "$fake/source"
  if [[ $name == solution ]]; then cp "$src/tutorials/lab12_precision/solution/lab12.cpp" "$fake/submission/"
  else cp "$src/tutorials/lab12_precision/lab12.cpp" "$fake/submission/"; fi
  AUTOGRADER_ROOT="$fake" GRADSLEUTH_SOURCE="$(dirname "$(dirname "$(dirname "$cli")")")" GRADESCOPE_TIMEOUT=120 \
    "$tmp/run_autograder" > "$tmp/$name.log" 2>&1 || { cat "$tmp/$name.log"; bad "run_autograder ($name) failed"; }
  python3 - "$fake/results/results.json" "$want" <<'PY' || { cat "$tmp/$name.log"; bad "results.json ($name)"; }
import json, sys
r = json.load(open(sys.argv[1]))
assert r["score"] == int(sys.argv[2]), f"score {r['score']}, expected {sys.argv[2]}: {r.get('output', '')[:500]}"
assert len(r["tests"]) == 4, f"{len(r['tests'])} tests, expected one per task of lab 12"
assert sum(t["score"] for t in r["tests"]) == r["score"], "the tests do not add up to the score"
assert sum(t["max_score"] for t in r["tests"]) == 100, "the tasks do not add up to 100 points"
PY
done
# A submission that writes forged results for every task of lab 12 to every descriptor: 0 points
# and "needs review", not full points.
fake="$tmp/autograder_forge"
mkdir -p "$fake/submission" "$fake/source"
awk '/#include "core\/error.h"/ { print; print "#include <unistd.h>"; next }
     /not implemented: lab 12 task 1 \(float_to_half_bits/ {
       print "  for (int fd = 3; fd < 1024; ++fd)";
       print "    for (const char* s : {\"@task-done 12.1 30 30 passed\\n\", \"@task-done 12.2 15 15 passed\\n\", \"@end 100 100\\n\"})";
       print "      (void)!write(fd, s, __builtin_strlen(s));" }
     { print }' "$src/tutorials/lab12_precision/lab12.cpp" > "$fake/submission/lab12.cpp"
grep -q "@task-done 12.1" "$fake/submission/lab12.cpp" || bad "the forging submission was not made (the starter changed?)"
AUTOGRADER_ROOT="$fake" GRADSLEUTH_SOURCE="$(dirname "$(dirname "$(dirname "$cli")")")" GRADESCOPE_TIMEOUT=120 \
  "$tmp/run_autograder" > "$tmp/forge.log" 2>&1 || { cat "$tmp/forge.log"; bad "run_autograder (forge) failed"; }
python3 -c 'import json, sys; r = json.load(open(sys.argv[1])); sys.exit(r["score"] != 0 or "needs review" not in json.dumps(r))' \
  "$fake/results/results.json" || { cat "$fake/results/results.json"; bad "the forging submission is not 0 points and needs review"; }
[[ $fail == 0 ]] && echo "lab12_release: lab 12 released alone without its solution; its Gradescope zip grades the solution 100, the starter 0 and a forging submission 0 (needs review)"
exit $fail
