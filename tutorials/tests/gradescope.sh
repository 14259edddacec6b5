#!/usr/bin/env bash
# The lab_gradescope test: Gradescope's run_autograder (scripts/gradescope/run_autograder.in for
# lab 1) against a fake /autograder (AUTOGRADER_ROOT) for a correct submission, an unfinished one
# and one that does not compile; each results.json has the fields Gradescope requires and the
# expected score; one that forges its results gets 0 and "needs review". Also `gradsleuth lab check
# 1 --gradescope --out FILE`.
#   gradescope.sh GRADSLEUTH SOURCE_ROOT
set -euo pipefail
cli="$1" src="$2"
tmp="$(mktemp -d "${TMPDIR:-/tmp}/gs_gradescope_test.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
sed 's/@LAB@/1/g' "$src/scripts/gradescope/run_autograder.in" > "$tmp/run_autograder"
chmod +x "$tmp/run_autograder"
"$src/tutorials/tests/make_class.sh" "$src" "$tmp/class" 3 >/dev/null  # correct, partial, no_compile
validate() {  # validate results.json expected_score
  python3 - "$1" "$2" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
want = int(sys.argv[2])
assert isinstance(r.get("score"), (int, float)), "top-level score missing"
assert r["score"] == want, f"score {r['score']}, expected {want}"
assert "execution_time" in r or not r.get("tests"), "execution_time missing"
for t in r.get("tests", []):
    for k in ("name", "number", "score", "max_score", "status", "output", "visibility"):
        assert k in t, f"test {t.get('name')} has no {k}"
    assert t["status"] in ("passed", "failed"), t["status"]
    assert t["visibility"] in ("visible", "hidden", "after_due_date", "after_published"), t["visibility"]
    assert 0 <= t["score"] <= t["max_score"], t
if r.get("tests"):
    assert sum(t["score"] for t in r["tests"]) == r["score"], "the tests do not add up to the score"
print("ok", sys.argv[1], r["score"])
PY
}
fail=0
for kind in 0:correct:100 1:partial:10 2:no_compile:0; do
  IFS=: read -r k name score <<<"$kind"
  fake="$tmp/autograder_$name"
  mkdir -p "$fake/submission" "$fake/source"
  cp "$tmp/class/student0${k}_$name/lab1.cpp" "$fake/submission/"
  AUTOGRADER_ROOT="$fake" GRADSLEUTH_SOURCE="$(dirname "$(dirname "$(dirname "$cli")")")" GRADESCOPE_TIMEOUT=60 \
    "$tmp/run_autograder" > "$tmp/$name.log" 2>&1 || { cat "$tmp/$name.log"; fail=1; }
  validate "$fake/results/results.json" "$score" || { cat "$tmp/$name.log"; fail=1; }
done
grep -q "did not compile" "$tmp/autograder_no_compile/results/results.json" || { echo "FAIL: no compile error in the output"; fail=1; }
# A submission that writes forged results to every descriptor: 0 points and "needs review", not a crash.
fake="$tmp/autograder_forge"
mkdir -p "$fake/submission" "$fake/source"
awk '/#include "core\/ops.h"/ { print; print "#include <unistd.h>"; next }
     /not implemented: lab 1 task 1 / { print "  for (int fd = 3; fd < 1024; ++fd) (void)!write(fd, \"@task-done 1.1 10 10 passed\\n\", 28);"; }
     { print }' "$src/tutorials/lab1_tensors/lab1.cpp" > "$fake/submission/lab1.cpp"
AUTOGRADER_ROOT="$fake" GRADSLEUTH_SOURCE="$(dirname "$(dirname "$(dirname "$cli")")")" GRADESCOPE_TIMEOUT=60 \
  "$tmp/run_autograder" > "$tmp/forge.log" 2>&1 || { cat "$tmp/forge.log"; fail=1; }
validate "$fake/results/results.json" 0 || { cat "$tmp/forge.log"; fail=1; }
grep -q "needs review" "$fake/results/results.json" || { echo "FAIL: the forged submission is not marked for review"; fail=1; }
# A secret input seed: the tests are shown after the due date.
"$cli" lab check 1 --gradescope --out "$tmp/public.json" >/dev/null
validate "$tmp/public.json" 0 || fail=1
"$cli" lab check 1 --gradescope --out "$tmp/hidden.json" --seed 7 >/dev/null
grep -q '"visibility":"after_due_date"' "$tmp/hidden.json" || { echo "FAIL: a secret seed's tests are not after_due_date"; fail=1; }
[[ $fail == 0 ]] && echo "lab_gradescope: results.json valid for a correct, an unfinished, a non-compiling and a forging submission"
exit $fail
