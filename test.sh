#!/usr/bin/env bash
# Sets up, builds and runs the CTest suite; exits with ctest's status.
#   ./test.sh                          build/ (Release)
#   ./test.sh --sanitize               build-sanitize/ with ASan + UBSan
#   ./test.sh --tsan                   build-tsan/ with ThreadSanitizer, no OpenMP: the concurrency tests
#   ./test.sh [--portable] [--debug]   passed on to scripts/build.sh
#   ./test.sh --arch x86-64-v3         AVX2-only code in build-x86-64-v3/ (run before landing engine changes)
#   ./test.sh --reference-kernels      the CPU backend on its reference loops only, in build-reference/
#   ./test.sh [opts] -- CTEST_ARGS...  e.g. ./test.sh -- -L lab
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

build_args=()
ctest_args=()
sanitize=0 debug=0 reference=0 arch=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --tsan)
      # The library and the thread tests with -fsanitize=thread. OpenMP is off
      # (libgomp is not instrumented: TSan would report its barriers) and OpenBLAS
      # runs one thread for the same reason.
      scripts/setup.sh
      cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGRADSLEUTH_TSAN=ON \
        -DGRADSLEUTH_OPENMP=OFF -DGRADSLEUTH_CUDA=OFF -DGRADSLEUTH_BUILD_BENCH=OFF -DGRADSLEUTH_BUILD_LABS=OFF >/dev/null
      cmake --build build-tsan --target test_threads test_core_observer test_core_autograd
      export TSAN_OPTIONS="${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}" OPENBLAS_NUM_THREADS=1
      echo "test: ctest in build-tsan (ThreadSanitizer)"
      exec ctest --test-dir build-tsan --output-on-failure --no-tests=error \
        -R '^(test_threads|test_core_observer|test_core_autograd)$' ;;
    --sanitize) sanitize=1; build_args+=("$1") ;;
    --debug) debug=1; build_args+=("$1") ;;
    --portable) build_args+=("$1") ;;
    --reference-kernels) reference=1; build_args+=("$1") ;;
    --arch) [[ $# -ge 2 ]] || { echo "test: --arch needs a value" >&2; exit 2; }
      arch="$2"; build_args+=("$1" "$2"); shift ;;
    --) shift; ctest_args=("$@"); break ;;
    *) echo "test: unknown option '$1' (ctest arguments go after --)" >&2; exit 2 ;;
  esac
  shift
done

dir=build
[[ $sanitize == 1 ]] && dir=build-sanitize
[[ $reference == 1 ]] && dir="$dir-reference"
[[ -n $arch ]] && dir="$dir-$arch"
[[ $debug == 1 ]] && dir="$dir-debug"

if [[ $sanitize == 1 ]]; then
  # allocator_may_return_null: a huge allocation is gradsleuth's "out of host memory" error, as in Release.
  export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:allocator_may_return_null=1}"
  export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
  # ctest already runs one test per core: OpenMP threads on top only oversubscribe
  # the instrumented code. The loader fuzz test runs its long mode here.
  export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
  export GS_FUZZ_LONG="${GS_FUZZ_LONG:-1}"
fi

scripts/setup.sh
# The labs' reference solutions are built for the tests (the lab*_solution tests
# check that they get full points), the CLI with its CUDA emulator and its CPU kernel workbench, and
# nvcc's CUDA backend where nvcc is found (./run.sh may have left them out of a first build).
scripts/build.sh "${build_args[@]}" -- -DGRADSLEUTH_LAB_SOLUTIONS=ON -DGRADSLEUTH_CLI_CUDA_EMU=ON \
  -DGRADSLEUTH_CLI_WORKBENCH=ON -DGRADSLEUTH_CUDA=AUTO

# Tests run in parallel, each with OpenMP threads: let idle threads sleep
# instead of spinning, so test processes do not starve each other.
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}"

echo "test: ctest in $dir"
rc=0
ctest --test-dir "$dir" --output-on-failure --no-tests=error -j "$(nproc)" "${ctest_args[@]}" || rc=$?
exit "$rc"
