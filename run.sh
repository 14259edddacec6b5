#!/usr/bin/env bash
# Sets up, builds (build/, Release) what the command needs, and runs it.
#   ./run.sh                  builds the CLI only and runs MAIN_JOB below
#   ./run.sh ARGS...          builds the CLI only and runs build/bin/gradsleuth ARGS...
#   ./run.sh lab check N      builds the CLI and lab N's grader only (build/tutorials/labN_grader),
#                             then grades lab N; a compile error in another lab does not matter
#   ./run.sh lab check all    builds each lab's grader on its own and grades every lab that
#                             compiles; one that does not is reported, with the compiler's errors
#   ./run.sh lab list         builds the CLI only: the labs and their tasks, with points
# ./test.sh builds everything (tests, benchmarks, every lab, the solutions) and runs the tests.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

# The default main job: arguments for build/bin/gradsleuth. The bug zoo trains
# the clean reference and every catalogued bug on Fashion-MNIST with every
# check attached and prints the detection matrix (about 30 s on 2 cores).
MAIN_JOB=(zoo --quick)

# Idle OpenMP threads sleep instead of spinning (libgomp reads this only at start-up).
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}"

cli_target=gradsleuth_cli
bin=build/bin/gradsleuth

# `lab check N|all` and `lab list` also need lab graders: which ones ("" for none).
labs=""
if [[ $# -ge 2 && $1 == lab && ( $2 == check || $2 == list ) ]]; then
  if [[ $2 == list ]]; then
    labs=""  # `lab list` shows the labs from tutorials/labs.txt where no grader is built
  else
    skip=0
    for a in "${@:3}"; do
      if [[ $skip == 1 ]]; then skip=0; continue; fi
      case "$a" in
        --task) skip=1 ;;
        --*) ;;
        *) labs="$a"; break ;;
      esac
    done
  fi
fi

# The CLI's CUDA emulator (-DGRADSLEUTH_CLI_CUDA_EMU, cli/CMakeLists.txt): built when the command uses
# CUDA (--device cuda, kernels, devices); a first build for another command leaves it out (the main
# job runs on the CPU), and a later `./run.sh ... --device cuda` adds it.
# The CPU kernel workbench (-DGRADSLEUTH_CLI_WORKBENCH, the same file): built when the command is
# `kernels`; a first build for another command leaves it out, and a later `./run.sh kernels ...` adds it.
cuda_emu="" workbench=""
for a in "$@"; do
  case "$a" in
    cuda|--device=cuda|kernels|devices) cuda_emu=ON ;;
  esac
  [[ $a == kernels ]] && workbench=ON
done
cmake_opts=()
if [[ ! -f build/CMakeCache.txt ]]; then
  cuda_emu="${cuda_emu:-OFF}" workbench="${workbench:-OFF}"
  # nvcc's CUDA backend serves only a machine with a GPU (the CLI links it only where one was seen at
  # configure time): without one, a first build does not look for nvcc at all, which saves CMake's
  # detection of it (about 5 s). ./test.sh configures with -DGRADSLEUTH_CUDA=AUTO again.
  if ! nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
    cmake_opts+=(-DGRADSLEUTH_CUDA=OFF)
  fi
fi
[[ -n $cuda_emu ]] && cmake_opts+=(-DGRADSLEUTH_CLI_CUDA_EMU="$cuda_emu")
[[ -n $workbench ]] && cmake_opts+=(-DGRADSLEUTH_CLI_WORKBENCH="$workbench")

# The system packages: those of the CLI's build and main job, and what this command adds (the
# emulator's Boost.Context, Graphviz's pictures, the lab sandbox, MPI for --distributed).
setup_opts=(--main)
[[ $cuda_emu == ON ]] && setup_opts+=(--emu)
for a in "$@"; do
  case "$a" in
    graph|doctor|explore|diagnose) setup_opts+=(--graph) ;;
    lab) setup_opts+=(--lab) ;;
    --distributed) setup_opts+=(--mpi) ;;
  esac
done
# Lab 9's kernels run on the CUDA emulator where there is no GPU (Boost.Context).
[[ $labs == 9 || $labs == all ]] && setup_opts+=(--emu)
scripts/setup.sh "${setup_opts[@]}"
echo "run: building the gradsleuth CLI only (target $cli_target: the engine, nn, optim, debug and what the"
echo "run: command needs; not the tests, benchmarks or labs: ./test.sh builds and runs those)"
scripts/build.sh --target "$cli_target" ${cmake_opts[@]+-- "${cmake_opts[@]}"}

# The labs' graders in this build (lab1_grader, lab2_grader, ...).
graders="$(cmake --build build --target help | grep -oE '^lab[0-9]+_grader\b' | sort -uV || true)"

# Builds lab N's grader; when it does not compile, removes the one left from an earlier build
# (it would grade the old code: the CLI reports the lab as not built instead).
build_grader() {
  echo "run: building lab $1's grader (target lab$1_grader: lab $1's code and its autograder only)"
  if cmake --build build -j "${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}" --target "lab$1_grader"; then return 0; fi
  rm -f "build/tutorials/lab$1_grader"
  echo "run: lab $1 did not compile: the compiler's errors are above" >&2
  return 1
}

if [[ $labs =~ ^[0-9]+$ ]] && grep -qx "lab${labs}_grader" <<<"$graders"; then
  build_grader "$labs" || exit 1
fi

if [[ ! -x "$bin" ]]; then
  echo "run: $bin was not built (the CLI in cli/ is not there yet)" >&2
  [[ $# -gt 0 ]] && exit 1
  exit 0
fi

if [[ $labs == all ]]; then
  # Every lab's grader on its own, so that one lab's compile error stops only that lab.
  failed=()
  for g in $graders; do
    n="${g#lab}"; n="${n%_grader}"
    build_grader "$n" || failed+=("$n")
  done
  rc=0
  "$bin" "$@" || rc=$?
  if [[ ${#failed[@]} -gt 0 ]]; then
    echo "run: not graded because they did not compile: lab ${failed[*]} (./run.sh lab check N shows the errors" \
         "of lab N alone)" >&2
  fi
  exit "$rc"
fi

if [[ $# -gt 0 ]]; then
  exec "$bin" "$@"
fi
echo "run: $bin ${MAIN_JOB[*]}"
exec "$bin" "${MAIN_JOB[@]}"
