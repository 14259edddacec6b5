#!/usr/bin/env bash
# Installs a built gradsleuth build dir into a temporary prefix, then configures, builds and
# runs the outside project tests/install against it (find_package(gradsleuth)).
#   scripts/check_install.sh [BUILD_DIR] [--expect-parts "dist cuda"] [--keep]
# BUILD_DIR: default build/ in the repo root. --expect-parts: the optional parts the install
# must provide, exactly (without it, whatever is there is used). --keep (or GS_KEEP_INSTALL=1)
# keeps the temporary folder. Exits non-zero if any step fails, with that step's output.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bdir="$root/build"
expect="" expect_set=0 keep="${GS_KEEP_INSTALL:-0}"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --expect-parts) [[ $# -ge 2 ]] || { echo "check_install: --expect-parts needs a list, e.g. \"dist cuda\" or \"\"" >&2; exit 2; }
      expect="$2"; expect_set=1; shift ;;
    --keep) keep=1 ;;
    -h|--help) sed -n '2,7p' "${BASH_SOURCE[0]}"; exit 0 ;;
    -*) echo "check_install: unknown option '$1' (try --help)" >&2; exit 2 ;;
    *) bdir="$1" ;;
  esac
  shift
done
if [[ ! -f "$bdir/CMakeCache.txt" ]]; then
  echo "check_install: $bdir is not a configured build dir (run ./run.sh or scripts/build.sh first)" >&2
  exit 1
fi

tmp="$(mktemp -d "${TMPDIR:-/tmp}/gradsleuth-install.XXXXXX")"
if [[ "$keep" == 1 ]]; then
  echo "check_install: keeping $tmp"
else
  trap 'rm -rf "$tmp"' EXIT
fi
prefix="$tmp/prefix"

step() {  # step NAME LOG CMD...: runs CMD with its output in LOG, shown when it fails
  local name="$1" log="$2"; shift 2
  echo "check_install: $name"
  "$@" >"$log" 2>&1 || { cat "$log" >&2; echo "check_install: FAILED: $name" >&2; exit 1; }
}

step "cmake --install $bdir --prefix $prefix" "$tmp/install.log" cmake --install "$bdir" --prefix "$prefix"
grep "gradsleuth: part" "$tmp/install.log" || true

# A sanitized library needs the sanitizer runtime when the consumer links.
cfg_args=(-S "$root/tests/install" -B "$tmp/consumer" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release)
if grep -q '^GRADSLEUTH_SANITIZE:BOOL=ON$' "$bdir/CMakeCache.txt"; then
  cfg_args+=("-DCMAKE_EXE_LINKER_FLAGS=-fsanitize=address,undefined")
fi
if [[ $expect_set == 1 ]]; then
  cfg_args+=("-DGS_EXPECT_PARTS=${expect// /;}")
fi
if command -v ninja >/dev/null 2>&1; then
  cfg_args+=(-G Ninja)
fi

step "find_package(gradsleuth) from tests/install" "$tmp/configure.log" cmake "${cfg_args[@]}"
grep "install_check: gradsleuth parts found" "$tmp/configure.log" || true
step "building tests/install" "$tmp/build.log" cmake --build "$tmp/consumer"
echo "check_install: running it"
"$tmp/consumer/install_check"
if [[ -x "$tmp/consumer/install_check_dist" ]]; then
  "$tmp/consumer/install_check_dist"
fi
if [[ -x "$tmp/consumer/install_check_cuda" ]] && nvidia-smi >/dev/null 2>&1; then
  "$tmp/consumer/install_check_cuda"
fi
if [[ -x "$prefix/bin/gradsleuth" ]]; then
  "$prefix/bin/gradsleuth" --help >/dev/null || { echo "check_install: the installed bin/gradsleuth --help failed" >&2; exit 1; }
  echo "check_install: installed bin/gradsleuth --help: ok"
fi
echo "check_install: ok"
