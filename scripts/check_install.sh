#!/usr/bin/env bash
# Installs a configured+built gradsleuth build dir into a temporary prefix, then
# configures, builds and runs the outside project tests/install against it.
#   scripts/check_install.sh [BUILD_DIR]     (default: build/ in the repo root)
# Exits non-zero if any step fails. Set GS_KEEP_INSTALL=1 to keep the temp dir.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bdir="${1:-$root/build}"
if [[ ! -f "$bdir/CMakeCache.txt" ]]; then
  echo "check_install: $bdir is not a configured build dir (run scripts/build.sh first)" >&2
  exit 1
fi

tmp="$(mktemp -d "${TMPDIR:-/tmp}/gradsleuth-install.XXXXXX")"
if [[ "${GS_KEEP_INSTALL:-0}" == 1 ]]; then
  echo "check_install: keeping $tmp"
else
  trap 'rm -rf "$tmp"' EXIT
fi
prefix="$tmp/prefix"

echo "check_install: installing $bdir into $prefix"
cmake --install "$bdir" --prefix "$prefix" >"$tmp/install.log" || { cat "$tmp/install.log" >&2; exit 1; }

# A sanitized library needs the sanitizer runtime when the consumer links.
cfg_args=(-S "$root/tests/install" -B "$tmp/consumer" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release)
if grep -q '^GRADSLEUTH_SANITIZE:BOOL=ON$' "$bdir/CMakeCache.txt"; then
  cfg_args+=("-DCMAKE_EXE_LINKER_FLAGS=-fsanitize=address,undefined")
fi
if command -v ninja >/dev/null 2>&1; then
  cfg_args+=(-G Ninja)
fi

echo "check_install: configuring tests/install against it"
cmake "${cfg_args[@]}" >"$tmp/configure.log" 2>&1 || { cat "$tmp/configure.log" >&2; exit 1; }
echo "check_install: building"
cmake --build "$tmp/consumer" >"$tmp/build.log" 2>&1 || { cat "$tmp/build.log" >&2; exit 1; }
echo "check_install: running"
"$tmp/consumer/install_check"
