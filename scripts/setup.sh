#!/usr/bin/env bash
# Checks for the system packages gradsleuth needs and installs the missing ones
# with apt-get when run as root. Cheap checks only (files and commands), so a
# second run costs well under a second. Set GS_SKIP_SETUP=1 to skip it entirely.
#   scripts/setup.sh          everything the build, the tools and every test need (./test.sh)
#   scripts/setup.sh --main   what the CLI's build and its main job (zoo --quick) need (./run.sh): not
#                             Chromium and node-dagre-layout (the browser tests, the explorer's pages),
#                             Boost.Context (the CUDA emulator), Graphviz (the graph pictures), Google
#                             Benchmark (bench/), bubblewrap (lab grade-all's sandbox) nor MPI
#                             (data-parallel runs), unless asked:
#     --emu     with --main: Boost.Context too (./run.sh ... --device cuda, kernels, devices)
#     --graph   with --main: Graphviz too (./run.sh graph, doctor, explore, diagnose)
#     --lab     with --main: bubblewrap and prlimit too (./run.sh lab ...)
#     --mpi     with --main: Open MPI too (./run.sh ... --distributed)
set -euo pipefail

if [[ "${GS_SKIP_SETUP:-0}" == 1 ]]; then
  echo "setup: skipped (GS_SKIP_SETUP=1)"
  exit 0
fi

main_only=0 want_emu=0 want_graph=0 want_lab=0 want_mpi=0
for arg in "$@"; do
  case "$arg" in
    --main) main_only=1 ;;
    --emu) want_emu=1 ;;
    --graph) want_graph=1 ;;
    --lab) want_lab=1 ;;
    --mpi) want_mpi=1 ;;
    --browser) ;;  # Chromium is installed unless --main; the option is accepted and does nothing more
    *) echo "setup: unknown option '$arg' (known: --main, --emu, --graph, --lab, --mpi, --browser)" >&2; exit 2 ;;
  esac
done
if [[ $main_only == 0 ]]; then want_emu=1 want_graph=1 want_lab=1 want_mpi=1; fi
left_out=()  # what --main leaves to a later ./test.sh (or to the command that needs it)
missing=()

need_cmd() {  # need_cmd COMMAND PACKAGE
  command -v "$1" >/dev/null 2>&1 || missing+=("$2")
}
need_file() {  # need_file PATH PACKAGE
  [[ -e "$1" ]] || missing+=("$2")
}

need_cmd cmake cmake
need_cmd g++ g++
if ! command -v ninja >/dev/null 2>&1 && ! command -v make >/dev/null 2>&1; then
  missing+=(ninja-build)
fi
# ccache: scripts/build.sh compiles through it, so the suite's builds of a fresh clone and of a released
# lab tree (install_fresh_clone, lab_release_build) reuse what the main build compiled.
need_cmd ccache ccache
need_file /usr/include/eigen3/Eigen/Core libeigen3-dev
need_file /usr/include/doctest/doctest.h doctest-dev
# Google Benchmark: bench/ (built by ./test.sh; CMake finds it when it is installed later).
if [[ $main_only == 0 ]]; then
  need_file /usr/include/benchmark/benchmark.h libbenchmark-dev
else
  [[ -e /usr/include/benchmark/benchmark.h ]] || left_out+=(libbenchmark-dev)
fi
need_file /usr/include/zlib.h zlib1g-dev
# The CPU backend's GEMM (core/cpu/fast/blas.h); Eigen's kernel is used without it.
need_file /usr/include/x86_64-linux-gnu/cblas-openblas.h libopenblas-dev
# Boost.Context: the fibers of the CPU CUDA emulator (cuda/emu/), which runs every kernel in ./test.sh.
# The CLI builds the emulator only for a command that uses CUDA (./run.sh passes --emu then).
if [[ $want_emu == 1 ]]; then
  need_file /usr/lib/x86_64-linux-gnu/libboost_context.so libboost-context-dev
else
  [[ -e /usr/lib/x86_64-linux-gnu/libboost_context.so ]] || left_out+=(libboost-context-dev)
fi
need_file /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz dataset-fashion-mnist
# MPI for data-parallel training (distributed/, docs/distributed.md): headers and mpirun; the 'dist' tests run under it.
# Without it the library is a world of one process. Open MPI brings some 35 packages (about 14 s of apt
# with them downloaded), which a first ./run.sh does not need; scripts/build.sh configures a build again
# once it is installed.
if [[ $want_mpi == 1 ]]; then
  need_file /usr/lib/x86_64-linux-gnu/openmpi/include/mpi.h libopenmpi-dev
  need_cmd mpirun openmpi-bin
else
  [[ -e /usr/lib/x86_64-linux-gnu/openmpi/include/mpi.h ]] || left_out+=(libopenmpi-dev)
  command -v mpirun >/dev/null 2>&1 || left_out+=(openmpi-bin)
fi
# Graphviz's `dot`: the autograd graph as an SVG picture (gradsleuth graph, and the graph section of
# the HTML reports); without it they fall back to the DOT text.
if [[ $want_graph == 1 ]]; then
  need_cmd dot graphviz
else
  command -v dot >/dev/null 2>&1 || left_out+=(graphviz)
fi
# bubblewrap: the sandbox of `gradsleuth lab grade-all` (a mount, PID, network and user namespace
# per submission); prlimit (util-linux) sets its process limit inside it.
if [[ $want_lab == 1 ]]; then
  need_cmd bwrap bubblewrap
  need_cmd prlimit util-linux
else
  command -v bwrap >/dev/null 2>&1 || left_out+=(bubblewrap)
fi
# Python 3: scripts/mutation_test.py (the emulator's checks against deliberately broken kernels).
need_cmd python3 python3
# dagre, the graph-layout library the explorer's page embeds (debug/report/explore.h; read at build
# time when present, else when a page is written), and Chromium: the browser tests (test_debug_explore
# drives the explorer's page; report_browser renders doctor's HTML report) run it headless.
# ./run.sh (--main) leaves both out: its job writes no explorer page and runs no browser, and
# node-dagre-layout alone brings some 250 packages (nodejs and its libraries).
if [[ $main_only == 0 ]]; then
  need_file /usr/share/nodejs/dagre/dist/dagre.min.js node-dagre-layout
  need_cmd chromium chromium
else
  [[ -e /usr/share/nodejs/dagre/dist/dagre.min.js ]] ||
    echo "setup: node-dagre-layout left out (gradsleuth explore reads it when it writes a page; scripts/setup.sh installs it)"
  command -v chromium >/dev/null 2>&1 ||
    echo "setup: Chromium left out (only ./test.sh's browser tests run it; scripts/setup.sh installs it)"
fi

if [[ ${#left_out[@]} -gt 0 ]]; then
  echo "setup: left for later: ${left_out[*]} (not needed by this command; ./test.sh installs them)"
fi

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "setup: all system packages present"
  exit 0
fi

echo "setup: missing packages: ${missing[*]}"
if [[ "$(id -u)" -ne 0 ]]; then
  echo "setup: not root; install them with:" >&2
  echo "  sudo apt-get update && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ${missing[*]}" >&2
  exit 1
fi

echo "setup: apt-get update"
apt-get update -qq
echo "setup: apt-get install ${missing[*]}"
DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
echo "setup: done"
