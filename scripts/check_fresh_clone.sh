#!/usr/bin/env bash
# What a new user does, on a fresh clone of this repository's HEAD (committed work only):
#   git clone  ->  ./run.sh --help  ->  cmake --install build --prefix P
#   ->  find_package(gradsleuth) from the separate project tests/install: build it and run it
# and then the README's other route: add_subdirectory(gradsleuth EXCLUDE_FROM_ALL) in that
# project, whose plain build must plan only what gradsleuth::gradsleuth needs (a dry run: no
# CUDA backend, emulator, kernel workbench, distributed code, CLI, tests or labs).
#   scripts/check_fresh_clone.sh WORK_DIR [--expect-parts "dist cuda"] [--time]
# WORK_DIR is emptied first; a fixed place keeps the compiler cache's hits from one run to the
# next (with ccache, CMAKE_CXX_COMPILER_LAUNCHER=ccache is set for the clone's build).
# --expect-parts is passed to scripts/check_install.sh. --time prints each step's wall time.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
work="" expect=() timing=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --expect-parts) [[ $# -ge 2 ]] || { echo "check_fresh_clone: --expect-parts needs a list" >&2; exit 2; }
      expect=(--expect-parts "$2"); shift ;;
    --time) timing=1 ;;
    -h|--help) sed -n '2,11p' "${BASH_SOURCE[0]}"; exit 0 ;;
    -*) echo "check_fresh_clone: unknown option '$1' (try --help)" >&2; exit 2 ;;
    *) work="$1" ;;
  esac
  shift
done
[[ -n $work ]] || { echo "check_fresh_clone: give a work dir, e.g. scripts/check_fresh_clone.sh /tmp/gs-fresh" >&2; exit 2; }

if [[ -n "$(git -C "$root" status --porcelain --untracked-files=no)" ]]; then
  echo "check_fresh_clone: note: $root has uncommitted changes; the clone tests HEAD ($(git -C "$root" rev-parse --short HEAD))"
fi
rm -rf "$work"
mkdir -p "$work"
work="$(cd "$work" && pwd)"
src="$work/gradsleuth"

if command -v ccache >/dev/null 2>&1; then
  export CMAKE_CXX_COMPILER_LAUNCHER="${CMAKE_CXX_COMPILER_LAUNCHER:-ccache}"
  export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$work}"
fi

last=$SECONDS
lap() {  # lap NAME: the wall time of the step that just ended
  if [[ $timing == 1 ]]; then echo "check_fresh_clone: time: $1: $((SECONDS - last)) s"; fi
  last=$SECONDS
}

echo "check_fresh_clone: git clone into $src"
git clone -q "$root" "$src"
# Exactly the source's HEAD (a clone checks out the default branch).
git -C "$src" fetch -q "$root" HEAD
git -C "$src" checkout -q --detach FETCH_HEAD
lap "git clone"

echo "check_fresh_clone: ./run.sh --help (the first command of the README)"
(cd "$src" && ./run.sh --help) >"$work/run.log" 2>&1 || { cat "$work/run.log" >&2; echo "check_fresh_clone: FAILED: ./run.sh --help" >&2; exit 1; }
grep -q "gradsleuth" "$work/run.log" || { cat "$work/run.log" >&2; echo "check_fresh_clone: ./run.sh --help printed no help" >&2; exit 1; }
lap "./run.sh --help"

"$src/scripts/check_install.sh" "$src/build" "${expect[@]}"
lap "install + find_package project"

echo "check_fresh_clone: add_subdirectory(gradsleuth EXCLUDE_FROM_ALL): what a plain build of the user's project builds"
sub="$work/subdir-consumer"
gen=()
command -v ninja >/dev/null 2>&1 && gen=(-G Ninja)
cmake -S "$src/tests/install" -B "$sub" "${gen[@]}" -DGS_SOURCE_DIR="$src" >"$work/subdir-configure.log" 2>&1 ||
  { cat "$work/subdir-configure.log" >&2; echo "check_fresh_clone: FAILED: configuring with add_subdirectory" >&2; exit 1; }
if [[ ${#gen[@]} -gt 0 ]]; then
  plan_cmd=(ninja -C "$sub" -t commands all)  # every command of a plain build, nothing run
else
  plan_cmd=(make -C "$sub" -n)
fi
"${plan_cmd[@]}" >"$work/subdir-plan.log" 2>&1 || { cat "$work/subdir-plan.log" >&2; exit 1; }
# What it must build, and what it must not.
# (core/cpu/fast/sgemm.cpp compiles alone; the engine's lighter files compile in unity batches.)
for need in /gradsleuth/core/cpu/fast/sgemm.cpp /gradsleuth/nn/ /gradsleuth/optim/ /gradsleuth/debug/ install_check; do
  grep -q "$need" "$work/subdir-plan.log" || { echo "check_fresh_clone: the plan does not build $need" >&2; exit 1; }
done
# (the clone is $work/gradsleuth: its sources appear as /gradsleuth/<folder>/...)
bad="$(grep -oE '/gradsleuth/(cuda|distributed|tutorials|bench|cli|tests)/[A-Za-z0-9_./-]+\.(cpp|cu)' "$work/subdir-plan.log" |
       grep -v '^/gradsleuth/tests/install/' | sort -u || true)"
if [[ -n $bad ]]; then
  echo "check_fresh_clone: with EXCLUDE_FROM_ALL the user's build still compiles parts gradsleuth::gradsleuth does not need:" >&2
  echo "$bad" >&2
  exit 1
fi
echo "check_fresh_clone: add_subdirectory plan: $(grep -cE '\.(cpp|cu)' "$work/subdir-plan.log") commands, compiling only core, nn, optim, debug and the project"
lap "add_subdirectory dry run"
echo "check_fresh_clone: ok"
