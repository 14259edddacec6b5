#!/usr/bin/env bash
# Builds the Gradescope autograder zip of lab N: the released tree with lab N only (no solution:
# scripts/release_labs.sh), setup.sh (installs the Debian/Ubuntu packages and builds lab N's
# grader on Gradescope's image) and run_autograder (grades /autograder/submission with
# `gradsleuth lab grade-all`, limits and all, and writes /autograder/results/results.json).
#   scripts/gradescope/make_autograder.sh N [--seed S] [--out FILE.zip]
# --seed S: grade on the instructor's inputs (the tests are then shown after the due date).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
die() { echo "make_autograder: $*" >&2; exit 2; }
lab="" seed="" out=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --seed) [[ $# -ge 2 && $2 =~ ^[0-9]+$ ]] || die "--seed needs a decimal integer"; seed="$2"; shift ;;
    --out) [[ $# -ge 2 ]] || die "--out needs a file name"; out="$2"; shift ;;
    -h|--help) sed -n '2,8p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) [[ -z $lab && $1 =~ ^[0-9]+$ ]] || die "give one lab number (got '$1')"; lab="$1" ;;
  esac
  shift
done
[[ -n $lab ]] || die "give the lab number, e.g. scripts/gradescope/make_autograder.sh 1"
out="${out:-autograder_lab$lab.zip}"
command -v zip >/dev/null || die "zip is not installed (apt-get install zip)"
stage="$(mktemp -d "${TMPDIR:-/tmp}/gs_autograder.XXXXXX")"
trap 'rm -rf "$stage"' EXIT
"$root/scripts/release_labs.sh" "$stage/gradsleuth" --labs "$lab" >/dev/null
rm -rf "$stage/gradsleuth/.git"
sed "s/@LAB@/$lab/g" "$here/setup.sh.in" > "$stage/setup.sh"
sed "s/@LAB@/$lab/g" "$here/run_autograder.in" > "$stage/run_autograder"
chmod +x "$stage/setup.sh" "$stage/run_autograder"
[[ -n $seed ]] && echo "$seed" > "$stage/grader_seed"
rm -f "$out.tmp"
(cd "$stage" && zip -qr - .) > "$out.tmp"
mv "$out.tmp" "$out"
echo "make_autograder: wrote $out (lab $lab$([[ -n $seed ]] && echo ", graded on the instructor's inputs"))"
