#!/usr/bin/env bash
# Configures and builds gradsleuth.
#   scripts/build.sh [--sanitize] [--portable] [--arch LEVEL] [--debug] [--reference-kernels] [--target T]...
#                    [-- EXTRA_CMAKE_ARGS...]
# Build directories (run from anywhere; paths are relative to the repo root):
#   build/                   Release (default)
#   build-sanitize/          RelWithDebInfo + ASan/UBSan (-DGRADSLEUTH_SANITIZE=ON)
#   build-debug/, build-sanitize-debug/   the same with CMAKE_BUILD_TYPE=Debug
# --portable turns off -march=native (-DGRADSLEUTH_NATIVE=OFF) in whichever dir.
# --reference-kernels: the CPU backend runs its reference loops only (-DGRADSLEUTH_FAST_KERNELS=OFF,
#   core/fast_kernels.h), in build-reference/ (build-sanitize-reference/, ...).
# --arch LEVEL compiles for that -march instead (e.g. x86-64-v3: AVX2 code that an
#   AVX-512 machine runs too) into build-LEVEL/ (build-sanitize-LEVEL/, ...).
# cmake is only re-run by hand when the dir is new or a requested option differs
# from its cache; otherwise `cmake --build` re-configures by itself when needed.
# --target T (repeatable) builds only those targets and what they need (./run.sh builds
#   gradsleuth_cli, and a lab's grader labN_grader); without it, everything (./test.sh).
# Compiles through ccache when it is installed (scripts/setup.sh installs it) and no compiler launcher
#   is set: CMAKE_CXX_COMPILER_LAUNCHER (and CUDA's) for a new dir, CCACHE_BASEDIR=<repo> unless set, so
#   a clone elsewhere (the suite's fresh-clone and release builds) finds the same objects.
# Runs CMAKE_BUILD_PARALLEL_LEVEL jobs at once when it is set, else one per core ($(nproc)).
# The chosen build dir is printed on the last line ("build: dir <path>").
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
sanitize=0 portable=0 debug=0 reference=0 arch=""
extra=()
targets=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --sanitize) sanitize=1 ;;
    --portable) portable=1 ;;
    --debug) debug=1 ;;
    --reference-kernels) reference=1 ;;
    --arch)
      [[ $# -ge 2 && "$2" =~ ^[A-Za-z0-9_.-]+$ ]] || { echo "build: --arch needs a -march value, e.g. --arch x86-64-v3" >&2; exit 2; }
      arch="$2"; shift ;;
    --arch=*) arch="${1#--arch=}" ;;
    --target)
      [[ $# -ge 2 && -n "$2" ]] || { echo "build: --target needs a target name, e.g. --target gradsleuth_cli" >&2; exit 2; }
      targets+=("$2"); shift ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) sed -n '2,22p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) echo "build: unknown option '$1' (try --help)" >&2; exit 2 ;;
  esac
  shift
done

dir="build"
build_type=Release
if [[ $sanitize == 1 ]]; then
  dir="build-sanitize"
  build_type=RelWithDebInfo
fi
if [[ $reference == 1 ]]; then
  dir="$dir-reference"
fi
if [[ -n $arch ]]; then
  dir="$dir-$arch"
fi
if [[ $debug == 1 ]]; then
  dir="$dir-debug"
  build_type=Debug
fi
bdir="$root/$dir"

opts=(
  "CMAKE_BUILD_TYPE=$build_type"
  "GRADSLEUTH_SANITIZE=$([[ $sanitize == 1 ]] && echo ON || echo OFF)"
  "GRADSLEUTH_NATIVE=$([[ $portable == 1 ]] && echo OFF || echo ON)"
  "GRADSLEUTH_ARCH=$arch"
  "GRADSLEUTH_FAST_KERNELS=$([[ $reference == 1 ]] && echo OFF || echo ON)"
)
# Benchmarks under the sanitizers measure nothing useful: skip building them.
[[ $sanitize == 1 ]] && opts+=("GRADSLEUTH_BUILD_BENCH=OFF")
# -O1 -g1 instead of RelWithDebInfo's -O2 -g: ASan recommends -O1 and reports the same
# errors with file:line stacks (-g1 keeps line tables, drops the variable info that
# made Eigen-heavy files 2-3x bigger); the instrumented build takes a fraction of the
# time (tests/test_core_ops.cpp: 70 s instead of 425 s, measured on 2 cores with other builds running).
[[ $sanitize == 1 && $debug == 0 ]] && opts+=("CMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG")
# nvcc's device code is not instrumented by the sanitizers and its sm_80/sm_90 builds
# are the slowest part of a build: under the sanitizers the CUDA sources are checked
# through the CPU emulator only (which ASan and UBSan do instrument).
[[ $sanitize == 1 ]] && opts+=("GRADSLEUTH_CUDA=OFF")

cache="$bdir/CMakeCache.txt"
# True when the cache already holds NAME=VALUE (any type).
cached() {
  local line
  line=$(grep -m1 "^$1:[A-Z_]*=" "$cache") || return 1
  [[ "${line#*=}" == "$2" ]]
}
configure=0
if [[ ! -f "$cache" ]]; then
  configure=1
elif [[ ! -f "$bdir/build.ninja" && ! -f "$bdir/Makefile" ]]; then
  configure=1  # an earlier configure failed before generating
else
  for o in "${opts[@]}"; do
    cached "${o%%=*}" "${o#*=}" || { configure=1; break; }
  done
  # Extra -DNAME=VALUE arguments already in the cache need no new configure
  # (./test.sh passes one on every run); anything else does.
  for e in "${extra[@]}"; do
    if [[ "$e" =~ ^-D([A-Za-z0-9_]+)(:[A-Za-z]+)?=(.*)$ ]]; then
      cached "${BASH_REMATCH[1]}" "${BASH_REMATCH[3]}" || { configure=1; break; }
    else
      configure=1
      break
    fi
  done
fi

# A build configured before a package it uses was installed (./run.sh's first set-up leaves MPI and
# Boost.Context to the commands that need them; ./test.sh installs everything): configure again, so
# that it is found. Each entry: the cache entry the configure wrote, and a file of the package.
found_later=(GS_MPI_FOUND_AT_CONFIGURE:/usr/lib/x86_64-linux-gnu/openmpi/include/mpi.h
             GS_EMU_FOUND_AT_CONFIGURE:/usr/lib/x86_64-linux-gnu/libboost_context.so)
for entry in "${found_later[@]}"; do
  name="${entry%%:*}" file="${entry#*:}"
  if [[ $configure == 0 ]] && grep -qE "^$name:INTERNAL=(FALSE|OFF|0)?\$" "$cache" && [[ -e $file ]]; then
    echo "build: $file was installed after $dir was configured: configuring again"
    configure=1
  fi
done

use_ccache=0
if command -v ccache >/dev/null 2>&1 && [[ -z "${CMAKE_CXX_COMPILER_LAUNCHER:-}" ]]; then
  use_ccache=1
  # Paths under the repository are hashed relative to the build dir: a clone elsewhere hits too.
  export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$root}"
fi

if [[ $configure == 1 ]]; then
  args=(-S "$root" -B "$bdir")
  if [[ $use_ccache == 1 && ! -f "$cache" ]]; then
    args+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
  fi
  # The generator is fixed once a dir exists; pick one only for a new dir.
  if [[ ! -f "$cache" ]] && command -v ninja >/dev/null 2>&1; then
    args+=(-G Ninja)
  fi
  for o in "${opts[@]}"; do args+=("-D$o"); done
  echo "build: configuring $dir ($build_type)"
  cmake "${args[@]}" "${extra[@]}"
fi

# Parallel jobs: CMAKE_BUILD_PARALLEL_LEVEL when set (as cmake --build reads it), else one per core.
jobs="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}"
if [[ ${#targets[@]} -gt 0 ]]; then
  echo "build: building $dir, targets: ${targets[*]} ($jobs jobs)"
  cmake --build "$bdir" -j "$jobs" --target "${targets[@]}"
else
  echo "build: building $dir (all targets, $jobs jobs)"
  cmake --build "$bdir" -j "$jobs"
fi
echo "build: dir $bdir"
