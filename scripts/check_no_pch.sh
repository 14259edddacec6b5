#!/usr/bin/env bash
# The build without precompiled headers or unity batches (-DGRADSLEUTH_PCH=OFF -DGRADSLEUTH_UNITY=OFF,
# cmake/precompile.cmake): each file of the named targets compiled on its own, so a file that uses a
# header it does not include (which the precompiled header or a batch-mate hides) fails here. It
# builds without a BLAS (-DGRADSLEUTH_BLAS=OFF), so that the code only such a build has (Eigen's GEMM,
# core/cpu/fast/eigen_gemm.cpp) compiles in every test run too.
#   scripts/check_no_pch.sh WORK_DIR [TARGET...]      (default targets: gradsleuth_core gradsleuth_nn gradsleuth_optim)
# Only the targets' object files are compiled (with Ninja; with Make, the whole targets and what they
# link). WORK_DIR is kept from one run to the next, so that only changed files compile again, and
# with ccache a new WORK_DIR at the same place takes its objects from the cache.
# Run by CTest (test build_no_pch, label build).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
[[ $# -ge 1 && $1 != -* ]] || { sed -n '2,11p' "${BASH_SOURCE[0]}"; exit 2; }
work="$1"; shift
targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=(gradsleuth_core gradsleuth_nn gradsleuth_optim)

args=(-S "$root" -B "$work" -DCMAKE_BUILD_TYPE=Release -DGRADSLEUTH_PCH=OFF -DGRADSLEUTH_UNITY=OFF -DGRADSLEUTH_BLAS=OFF
      -DGRADSLEUTH_BUILD_TESTS=OFF -DGRADSLEUTH_BUILD_BENCH=OFF -DGRADSLEUTH_BUILD_LABS=OFF
      -DGRADSLEUTH_CLI_CUDA_EMU=OFF -DGRADSLEUTH_CUDA=OFF)
if [[ ! -f $work/CMakeCache.txt ]]; then
  command -v ninja >/dev/null 2>&1 && args+=(-G Ninja)
  if command -v ccache >/dev/null 2>&1 && [[ -z "${CMAKE_CXX_COMPILER_LAUNCHER:-}" ]]; then
    args+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  fi
fi
cmake "${args[@]}" >"$work.configure.log" 2>&1 || { cat "$work.configure.log"; echo "check_no_pch: configure failed" >&2; exit 1; }

if [[ -f $work/build.ninja ]]; then
  # Each target's objects: the outputs of its compile steps (CMakeFiles/<target>.dir/...o).
  objects=()
  for t in "${targets[@]}"; do
    mapfile -t objs < <(ninja -C "$work" -t targets all | grep -oE "^[^:]*CMakeFiles/$t\\.dir/[^:]*\\.o" || true)
    [[ ${#objs[@]} -gt 0 ]] || { echo "check_no_pch: target $t has no object files in $work" >&2; exit 2; }
    objects+=("${objs[@]}")
  done
  echo "check_no_pch: compiling ${#objects[@]} files of ${targets[*]} without precompiled headers or unity batches"
  ninja -C "$work" -j "$(nproc)" "${objects[@]}"
else
  echo "check_no_pch: building ${targets[*]} without precompiled headers or unity batches"
  cmake --build "$work" -j "$(nproc)" --target "${targets[@]}"
fi
echo "check_no_pch: every file of ${targets[*]} compiles on its own"
