#!/usr/bin/env bash
# scripts/gpu_check.sh: one prepared command for a machine with a CUDA GPU. It builds the CUDA
# backend with nvcc (sm_90 by default), runs the real-GPU tests, the kernel workbench at its GPU
# sizes, the MLP/CNN training step on the card against the CPU (and against PyTorch on the same
# card where PyTorch with CUDA is installed), the same step under bf16 and fp16 autocast (against
# PyTorch's autocast), then compute-sanitizer's memcheck and racecheck over
# the backend's GPU test, and writes one Markdown report. Each step is appended to the report as
# it finishes, so a run stopped at a time limit still leaves what it measured.
#
#   scripts/gpu_check.sh --prepare [DIR]   on a machine with this project's packages: copy the
#                                          header-only build dependencies (Eigen, doctest) into DIR
#                                          (default .device-carry/, ignored by git) for a GPU
#                                          machine that has nvcc and CMake but not these packages
#   scripts/gpu_check.sh [REPORT]          on the GPU machine; REPORT defaults to
#                                          $OUT/gpu_check_<date>.md when OUT is set, else the repo root
#   scripts/gpu_check.sh --emulator BUILD [REPORT]
#                                          the same steps on the CPU, so the script cannot break unseen
#                                          between leases (a ctest test runs it): a dry run of the
#                                          --prepare bundle (a configure that can see Eigen and doctest
#                                          only through it, and an Eigen object compiled), then every
#                                          step against BUILD's CUDA emulator (small sizes, no timing
#                                          worth reading, no compute-sanitizer)
#   env: GS_GPU_BUILD (build dir, default build-gpu), JOBS (default nproc),
#        GS_CUDA_ARCHS (CMAKE_CUDA_ARCHITECTURES, default 90), GS_CARRY (the --prepare folder,
#        default .device-carry/: used as CMAKE_PREFIX_PATH when it exists),
#        GS_SANITIZER_TIMEOUT (seconds per compute-sanitizer tool, default 150),
#        GS_STEP_MIN_TIME (seconds per timed training-step case, default 0.5)
# Exit status: 0 when every step passed, 1 when a test, a validation or a sanitizer failed, 2 when
# there is no GPU or the build failed.
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
carry=${GS_CARRY:-$root/.device-carry}

if [[ ${1:-} == --prepare ]]; then
  dest=${2:-$carry}
  eigen_cfg=$(ls -d /usr/share/eigen3/cmake /usr/lib/cmake/eigen3 2>/dev/null | head -n 1)
  if [[ ! -d /usr/include/eigen3 || -z $eigen_cfg || ! -f /usr/include/doctest/doctest.h ]]; then
    echo "gpu_check --prepare: Eigen or doctest is missing here; run scripts/setup.sh first" >&2
    exit 2
  fi
  rm -rf "$dest"
  mkdir -p "$dest/usr/include" "$dest/usr/share/eigen3" "$dest/usr/lib/cmake"
  cp -r /usr/include/eigen3 "$dest/usr/include/"
  cp -r "$eigen_cfg" "$dest/usr/share/eigen3/cmake"
  cp -r /usr/include/doctest "$dest/usr/include/"
  cp -r /usr/lib/cmake/doctest "$dest/usr/lib/cmake/"
  # doctest's exported targets name /usr; make them relative to where the folder lands.
  sed -i 's|^set(_IMPORT_PREFIX "/usr")|get_filename_component(_IMPORT_PREFIX "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)|' \
    "$dest/usr/lib/cmake/doctest/doctestTargets.cmake"
  echo "gpu_check --prepare: $(du -sh "$dest" | cut -f1) in $dest (Eigen $(sed -n 's/.*PACKAGE_VERSION "\(.*\)".*/\1/p' "$dest/usr/share/eigen3/cmake/Eigen3ConfigVersion.cmake" | head -n 1), doctest)"
  exit 0
fi

emulator=0
if [[ ${1:-} == --emulator ]]; then
  [[ -n ${2:-} && -d ${2:-} ]] || { echo "gpu_check --emulator: give an emulator build folder (e.g. build)" >&2; exit 2; }
  emulator=1
  emu_build=$(cd "$2" && pwd)
  shift 2
fi

build=${GS_GPU_BUILD:-$root/build-gpu}
jobs=${JOBS:-$(nproc)}
archs=${GS_CUDA_ARCHS:-90}
san_timeout=${GS_SANITIZER_TIMEOUT:-150}
step_time=${GS_STEP_MIN_TIME:-0.5}
day=$(date +%Y-%m-%d)
report=${1:-${OUT:-$root}/gpu_check_$day.md}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
export PATH="$PATH:/usr/local/cuda/bin"
[[ -d $carry/usr ]] && export CMAKE_PREFIX_PATH="$carry/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
start=$SECONDS
elapsed() { echo "$((SECONDS - start)) s"; }

if [[ $emulator == 0 ]] && { ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >"$log" 2>&1 || ! grep -q "^GPU [0-9]" "$log"; }; then
  echo "gpu_check: no CUDA GPU here (nvidia-smi missing, or nvidia-smi -L listed none: $(head -c 300 "$log"))." >&2
  echo "gpu_check: without a GPU run the emulator tests instead: ctest -L cuda_emu" >&2
  exit 2
fi

status=0
fail() { status=1; echo "gpu_check: FAILED: $*" >&2; }
{
  echo "# gradsleuth GPU check, $day$([[ $emulator == 1 ]] && echo ' (on the CPU emulator: a check of the script, not of a GPU)')"
  echo
  echo "Commit \`$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)\`, host \`$(hostname)\`, $(nproc) CPU cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'))."
  echo
  echo "## Devices"
  echo
  echo '```'
  if [[ $emulator == 1 ]]; then echo "(none: the CPU emulator)"; else
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv 2>&1
    nvcc --version 2>&1 | tail -n 2
  fi
  echo '```'
} >"$report"

if [[ $emulator == 1 ]]; then
  # The bundle, dry: a configure that finds Eigen and doctest only through it (/usr and /usr/local
  # are ignored prefixes), then one object that includes Eigen (not on the default include path; eigen_gemm.cpp,
  # built without a BLAS, compiles alone, outside the unity batches).
  dry=$(mktemp -d)
  trap 'rm -f "$log"; rm -rf "$dry"' EXIT
  echo "gpu_check: the --prepare bundle, dry run in $dry" >&2
  if ! bash "$0" --prepare "$dry/carry" >"$log" 2>&1 ||
     ! cmake -S "$root" -B "$dry/build" -G Ninja -DCMAKE_BUILD_TYPE=Release "-DCMAKE_PREFIX_PATH=$dry/carry/usr" \
       "-DCMAKE_IGNORE_PREFIX_PATH=/usr;/usr/local" -DGRADSLEUTH_CUDA=OFF -DGRADSLEUTH_CUDA_EMU=OFF \
       -DGRADSLEUTH_BUILD_LABS=OFF -DGRADSLEUTH_BUILD_BENCH=OFF -DGRADSLEUTH_BLAS=OFF >>"$log" 2>&1 ||
     ! grep -q "^Eigen3_DIR:PATH=$dry/carry/" "$dry/build/CMakeCache.txt" ||
     ! grep -q "^doctest_DIR:PATH=$dry/carry/" "$dry/build/CMakeCache.txt" ||
     ! cmake --build "$dry/build" --target core/CMakeFiles/gradsleuth_core.dir/cpu/fast/eigen_gemm.cpp.o >>"$log" 2>&1; then
    { echo; echo "## The --prepare bundle: FAILED"; echo; echo '```'; tail -n 40 "$log"; echo '```'; } >>"$report"
    echo "gpu_check: the bundle's dry run failed; see $report" >&2
    exit 2
  fi
  { echo; echo "The --prepare bundle ($(du -sh "$dry/carry" | cut -f1)) configured a build that saw Eigen and doctest only through it, and compiled an Eigen object."; } >>"$report"
  build=$emu_build
  targets=()
  gpu_tests=()
else

# ---- build: only what the checks run ----
echo "gpu_check: configuring in $build (sm $archs)" >&2
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
if ! cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DGRADSLEUTH_CUDA=ON \
     -DGRADSLEUTH_CUDA_EMU=OFF -DGRADSLEUTH_KERNELS_ON=GPU "-DCMAKE_CUDA_ARCHITECTURES=$archs" \
     -DGRADSLEUTH_BUILD_BENCH=ON -DGRADSLEUTH_BUILD_LABS=OFF >"$log" 2>&1; then
  { echo; echo "## Configure: FAILED"; echo; echo '```'; tail -n 60 "$log"; echo '```'; } >>"$report"
  echo "gpu_check: the configure step failed; see $report" >&2
  exit 2
fi
# The real-GPU tests are the ones labelled exactly "cuda"; their targets carry the test's name.
mapfile -t gpu_tests < <(ctest --test-dir "$build" -N -L '^cuda$' 2>/dev/null | sed -n 's/^ *Test *#[0-9]*: *\([^ ]*\).*/\1/p')
targets=(gradsleuth_cli bench_step_device)
known=$(cmake --build "$build" --target help 2>/dev/null | sed 's/[:].*//; s/^\.\.\. //')
for t in "${gpu_tests[@]}"; do
  grep -qx "$t" <<<"$known" && targets+=("$t")
done
echo "gpu_check: building ${targets[*]} with $jobs jobs" >&2
t0=$SECONDS
if ! cmake --build "$build" -j "$jobs" --target "${targets[@]}" >"$log" 2>&1; then
  { echo; echo "## Build: FAILED"; echo; echo '```'; tail -n 60 "$log"; echo '```'; } >>"$report"
  echo "gpu_check: the build failed; see $report" >&2
  exit 2
fi
echo "gpu_check: built in $((SECONDS - t0)) s ($(elapsed) so far)" >&2
built_line="Built ${targets[*]} for sm $archs in $((SECONDS - t0)) s with $jobs jobs."
fi
[[ $emulator == 1 ]] && built_line="The emulator build in $build (not rebuilt)."
cli=$build/bin/gradsleuth
step=$build/bin/bench_step_device
[[ -x $step ]] || step=$(find "$build" -name bench_step_device -type f -perm -u+x | head -n 1)

{
  echo
  echo "$built_line"
  echo
  echo "## gradsleuth devices"
  echo
  echo '```'
  "$cli" devices 2>&1
  echo '```'
  echo
  echo "## The real-GPU tests: ctest -L '^cuda\$'"
  echo
  echo '```'
} >>"$report"
echo "gpu_check: ctest -L '^cuda\$' (${gpu_tests[*]})" >&2
if [[ $emulator == 1 ]]; then
  # Listed, not run: they would only skip without a GPU, and this may itself run under ctest.
  ctest --test-dir "$build" -N -L '^cuda$' >"$log" 2>&1 || fail "ctest -N -L '^cuda\$'"
else
  ctest --test-dir "$build" -L '^cuda$' --output-on-failure --timeout 300 >"$log" 2>&1 || fail "ctest -L '^cuda\$'"
fi
tail -n 60 "$log" >>"$report"
echo '```' >>"$report"

# ---- the kernel workbench at its GPU sizes ----
{
  echo
  echo "## Kernel workbench (GPU default sizes; time, GFLOP/s or GB/s, % of the H100 SXM roofline and of the reference)"
} >>"$report"
for k in matmul softmax reduce layernorm gelu; do
  echo "gpu_check: gradsleuth kernels bench $k ($(elapsed) so far)" >&2
  { echo; echo "### $k"; echo; echo '```'; } >>"$report"
  "$cli" kernels bench "$k" >>"$report" 2>&1 || fail "kernels bench $k"
  echo '```' >>"$report"
done
# Every version on the card's roofline (a picture under $OUT); the emulator refuses it.
if [[ $emulator == 0 ]]; then
  echo "gpu_check: gradsleuth kernels roofline --device cuda ($(elapsed) so far)" >&2
  { echo; echo '```'; } >>"$report"
  "$cli" kernels roofline --device cuda --repeats 3 --out "${OUT:-.}/roofline_gpu.svg" >>"$report" 2>&1 ||
    fail "kernels roofline --device cuda"
  echo '```' >>"$report"
fi

# ---- the training step: the card against its CPU cores and against PyTorch on the card ----
{
  echo
  echo "## Training step (SGD; median of >= 5 blocks, each step synchronised by reading its loss)"
  echo
  echo '```'
} >>"$report"
echo "gpu_check: training steps ($(elapsed) so far)" >&2
only=()
[[ $emulator == 1 ]] && { only=(--only mlp/64); step_time=0.01; }  # the emulator: one small case, for the logic
"$step" --device cuda --min-time "$step_time" "${only[@]}" >>"$report" 2>&1 || fail "bench_step_device --device cuda"
"$step" --device cpu --threads 1 --min-time "$step_time" "${only[@]}" >>"$report" 2>&1 ||
  fail "bench_step_device --device cpu --threads 1"
OMP_WAIT_POLICY=passive "$step" --device cpu --threads "$(nproc)" --min-time "$step_time" "${only[@]}" >>"$report" 2>&1 ||
  fail "bench_step_device --device cpu --threads $(nproc)"
have_torch=0
python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null && have_torch=1
if [[ $have_torch == 1 ]]; then
  PYTHONUNBUFFERED=1 python3 "$root/bench/peer_train_step.py" "$step_time" --device cuda >>"$report" 2>&1 ||
    fail "peer_train_step.py --device cuda"
else
  echo "(PyTorch with CUDA is not installed here: no PyTorch peer)" >>"$report"
fi
echo '```' >>"$report"

# ---- the same step in mixed precision: autocast bf16, and fp16 with a GradScaler, against PyTorch's ----
{
  echo
  echo "## Training step under autocast (bf16; fp16 with a loss scaler), gradsleuth and PyTorch on the card"
  echo
  echo '```'
} >>"$report"
autocasts=(bf16 fp16)
# The emulator: bf16 only (its fp16 step adds the loss scaler's launches: over a minute there).
[[ $emulator == 1 ]] && autocasts=(bf16)
for ac in "${autocasts[@]}"; do
  echo "gpu_check: training steps under autocast $ac ($(elapsed) so far)" >&2
  "$step" --device cuda --autocast "$ac" --min-time "$step_time" "${only[@]}" >>"$report" 2>&1 ||
    fail "bench_step_device --device cuda --autocast $ac"
  if [[ $have_torch == 1 ]]; then
    PYTHONUNBUFFERED=1 python3 "$root/bench/peer_train_step.py" "$step_time" --device cuda --autocast "$ac" \
      >>"$report" 2>&1 || fail "peer_train_step.py --device cuda --autocast $ac"
  fi
done
[[ $have_torch == 1 ]] || echo "(PyTorch with CUDA is not installed here: no PyTorch peer)" >>"$report"
echo '```' >>"$report"

# ---- compute-sanitizer over the backend's GPU test ----
{
  echo
  echo "## compute-sanitizer (memcheck, racecheck) over test_cuda_backend_gpu's kernel tests"
} >>"$report"
backend_test=$(find "$build" -name test_cuda_backend_gpu -type f -perm -u+x | head -n 1)
if [[ $emulator == 1 ]]; then
  echo "(the emulator's own memcheck and racecheck ran in every step above; compute-sanitizer needs the GPU)" >>"$report"
elif ! command -v compute-sanitizer >/dev/null; then
  echo "(compute-sanitizer is not on the PATH)" >>"$report"
elif [[ -z $backend_test ]]; then
  echo "(test_cuda_backend_gpu was not built)" >>"$report"
else
  for tool in memcheck racecheck; do
    echo "gpu_check: compute-sanitizer --tool $tool ($(elapsed) so far)" >&2
    { echo; echo "### $tool"; echo; echo '```'; } >>"$report"
    t0=$SECONDS
    # The kernels' test cases; the training runs (many small launches, minutes under racecheck) are left out.
    timeout "$san_timeout" compute-sanitizer --tool "$tool" --error-exitcode 3 "$backend_test" \
      --source-file-exclude='*test_cuda_training*' >"$log" 2>&1
    rc=$?
    tail -n 25 "$log" >>"$report"
    echo '```' >>"$report"
    case $rc in
      0) echo "$tool: clean, $((SECONDS - t0)) s." >>"$report" ;;
      124) echo "$tool: stopped at the ${san_timeout} s limit (no error reported before it)." >>"$report" ;;
      *) echo "$tool: exit $rc." >>"$report"; fail "compute-sanitizer --tool $tool (exit $rc)" ;;
    esac
  done
fi

{ echo; echo "Overall: $([ $status -eq 0 ] && echo passed || echo 'FAILED (see above)'), $(elapsed)."; } >>"$report"
echo "gpu_check: report written to $report ($(elapsed))" >&2
exit $status
