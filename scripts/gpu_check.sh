#!/usr/bin/env bash
# scripts/gpu_check.sh: one command for a machine with a CUDA GPU: builds with CUDA, runs the
# `cuda` tests and every kernel-workbench version, and writes a dated Markdown report.
#
#   scripts/gpu_check.sh [REPORT]      default report: gpu_check_<YYYY-MM-DD>.md in the repo root
#   env: GS_GPU_BUILD (build dir, default build-gpu), JOBS (default nproc),
#        GS_CUDA_ARCHS (CMAKE_CUDA_ARCHITECTURES, default "80;90")
# Exit status: 0 when every step passed, 1 when a test or a validation failed, 2 when there is
# no GPU or the build failed.
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${GS_GPU_BUILD:-$root/build-gpu}
jobs=${JOBS:-$(nproc)}
archs=${GS_CUDA_ARCHS:-80;90}
day=$(date +%Y-%m-%d)
report=${1:-$root/gpu_check_$day.md}
log=$(mktemp)
trap 'rm -f "$log"' EXIT

if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >"$log" 2>&1 || ! grep -q "^GPU [0-9]" "$log"; then
  echo "gpu_check: no CUDA GPU here (nvidia-smi missing, or nvidia-smi -L listed none: $(head -c 300 "$log"))." >&2
  echo "gpu_check: without a GPU run the emulator tests instead: ctest -L cuda_emu" >&2
  exit 2
fi

generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
status=0
{
  echo "# gradsleuth GPU check, $day"
  echo
  echo "Commit \`$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)\`, host \`$(hostname)\`."
  echo
  echo "## Devices"
  echo
  echo '```'
  nvidia-smi -L
  echo '```'
} >"$report"

echo "gpu_check: configuring and building in $build (this takes a while)" >&2
if ! cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DGRADSLEUTH_CUDA=ON \
     -DGRADSLEUTH_KERNELS_ON=GPU "-DCMAKE_CUDA_ARCHITECTURES=$archs" -DGRADSLEUTH_BUILD_BENCH=OFF >"$log" 2>&1 ||
   ! cmake --build "$build" -j "$jobs" >>"$log" 2>&1; then
  { echo; echo "## Build: FAILED"; echo; echo '```'; tail -n 60 "$log"; echo '```'; } >>"$report"
  echo "gpu_check: the build failed; see $report" >&2
  exit 2
fi
cli=$build/bin/gradsleuth

{
  echo
  echo "## gradsleuth devices"
  echo
  echo '```'
  "$cli" devices 2>&1
  echo '```'
  echo
  echo "## ctest -L cuda"
  echo
  echo '```'
} >>"$report"
if ! ctest --test-dir "$build" -L cuda --output-on-failure >"$log" 2>&1; then status=1; fi
tail -n 40 "$log" >>"$report"
echo '```' >>"$report"

{
  echo
  echo "## Kernel workbench (default sizes; time, GFLOP/s or GB/s, % of peak and of the reference)"
} >>"$report"
for k in matmul softmax reduce layernorm gelu; do
  echo "gpu_check: gradsleuth kernels bench $k" >&2
  { echo; echo "### $k"; echo; echo '```'; } >>"$report"
  if ! "$cli" kernels bench "$k" >>"$report" 2>&1; then status=1; fi
  echo '```' >>"$report"
done

{
  echo
  echo "## Resource usage (nvcc --resource-usage)"
  echo
  echo '```'
} >>"$report"
if cmake --build "$build" --target workbench_resource_usage >"$log" 2>&1; then
  grep -E "^==|Function properties|spill|Used" "$build/cuda/workbench/resource_usage.txt" | sed 's/ptxas info    : //' >>"$report"
else
  echo "(workbench_resource_usage failed)" >>"$report"
fi
echo '```' >>"$report"

{ echo; echo "Overall: $([ $status -eq 0 ] && echo passed || echo 'FAILED (see above)')"; } >>"$report"
echo "gpu_check: report written to $report" >&2
exit $status
