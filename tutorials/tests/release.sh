#!/usr/bin/env bash
# The lab_release test: `gradsleuth lab release` writes a student repository with no solution in
# it: no solution folder or file, a git history of one commit, no line of any solution that its
# starter lacks (the distinctive lines of each solution file, grepped in the tree and, after a
# build, in the build's files). With --build it then builds the released tree from scratch in a
# temporary folder (the CLI and the labs' graders: the whole engine, minutes on 2 cores), and
# grades every starter: 0 points each, no crash.
#   release.sh GRADSLEUTH SOURCE_ROOT [LABS (default: all)] [--build]
set -euo pipefail
cli="$1" src="$2" labs="${3:-}" build="${4:-}"
tmp="$(mktemp -d "${TMPDIR:-/tmp}/gs_release_test.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
fail=0
bad() { echo "FAIL: $*"; fail=1; }
"$cli" lab release "$tmp/course" ${labs:+--labs "$labs"}
rel="$tmp/course"

[[ -z "$(find "$rel" \( -path '*/solution/*' -o -name '*_solution*' \) -print)" ]] || bad "solution files in the release"
[[ $(git -C "$rel" rev-list --count HEAD) == 1 ]] || bad "the release's history has more than one commit"
[[ -f $rel/.github/workflows/classroom.yml ]] || bad "no GitHub Classroom workflow"

# Distinctive lines of each solution: code lines (20+ characters, not comments) the starter has not.
pats="$tmp/solution_lines.txt"
: > "$pats"
for sol in "$src"/tutorials/*/solution/*; do
  starter="$(dirname "$(dirname "$sol")")/$(basename "$sol")"
  grep -vE '^\s*(//|\*|#include|namespace|\}|$)' "$sol" | sed 's/^\s*//' | awk 'length($0) >= 20' |
    grep -vxF -f <(sed 's/^\s*//' "$starter" 2>/dev/null || true) >> "$pats" || true
done
sort -u -o "$pats" "$pats"
# Only lines that no other file of this checkout has (a solution calls the engine as it does).
(cd "$src" && git ls-files -co --exclude-standard | grep -vE '^tutorials/[^/]+/solution/' |
   while read -r f; do [[ -f $f ]] && printf '%s\0' "$f"; done | xargs -0 grep -hoF -f "$pats" 2>/dev/null || true) |
  sort -u > "$tmp/common.txt"
grep -vxF -f "$tmp/common.txt" "$pats" > "$pats.only" || true
mv "$pats.only" "$pats"
[[ $(wc -l < "$pats") -gt 50 ]] || bad "found only $(wc -l < "$pats") distinctive solution lines to look for"
if hits="$(grep -rIlF -f "$pats" "$rel" --exclude-dir=.git)"; then bad "solution code in the release: $hits"; fi

# Into a dangling symbolic link: refused at once, with the link named (not mv's message at the end).
ln -s "$tmp/nowhere" "$tmp/dangling"
start=$SECONDS
if msg="$("$cli" lab release "$tmp/dangling" 2>&1)"; then bad "a release into a dangling link was accepted"; fi
grep -q "is a symbolic link to '$tmp/nowhere', which does not exist" <<<"$msg" || bad "dangling link: '$msg'"
(( SECONDS - start < 5 )) || bad "the dangling link was refused only after $((SECONDS - start)) s"

if [[ $build != --build ]]; then
  [[ $fail == 0 ]] && echo "lab_release: released without solutions (run with --build to build and grade it)"
  exit $fail
fi
# Build the released tree from scratch, with no access to this checkout (the labs' graders only).
# With ccache, relative to the tree: objects this checkout already compiled are reused.
if command -v ccache >/dev/null; then export CMAKE_CXX_COMPILER_LAUNCHER=ccache CCACHE_BASEDIR="$rel"; fi
numbers="$(sed -nE 's/^lab ([0-9]+): .*/\1/p' "$rel/tutorials/labs.txt" | paste -sd' ' -)"
targets=(gradsleuth_cli)
for n in $numbers; do targets+=(--target "lab${n}_grader"); done
(cd "$rel" && scripts/build.sh --target "${targets[@]}" -- -DGRADSLEUTH_LAB_SOLUTIONS=ON) > "$tmp/build.log" 2>&1 ||
  { tail -30 "$tmp/build.log"; bad "the released tree did not build"; }
if grep -rlF -f "$pats" "$rel/build" --include='*.ninja' --include='*.txt' --include='*.json' 2>/dev/null; then
  bad "solution code in the release's build files"
fi
[[ -z "$(find "$rel/build" -name '*solution*' -print -quit)" ]] || bad "solution targets in the release's build"
for n in $numbers; do
  out="$("$rel/build/tutorials/lab${n}_grader" check "$n" --expect consistent 2>&1)" || bad "lab $n's starter: the grader exited with $?"
  grep -qE "^lab $n: 0/[0-9]+ points$" <<<"$out" || bad "lab $n's starter does not get 0 points: $(tail -1 <<<"$out")"
done
[[ $fail == 0 ]] && echo "lab_release: labs $numbers released without solutions; every starter graded 0 points"
exit $fail
