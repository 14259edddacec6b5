#!/usr/bin/env bash
# Where a training step's time goes: samples one benchmark of bench_train_step with
# `perf record` and groups the samples by what the code does — GEMM (the BLAS or
# Eigen kernels and their packing, or core/cpu/fast/sgemm.h's kernel and its transposes),
# Winograd's transforms, im2col/col2im, pooling, elementwise, reductions
# and softmax, the optimizer, allocation (malloc/free, page faults, zero-fills) and
# autograd bookkeeping (graph nodes, shared pointers, dispatch) — one thread.
#   scripts/step_profile.sh [--seconds S] [BUILD_DIR] [FILTER...]
#   (defaults: 3 s per step, build/, the MLP at batch 64 and 256 and the CNN at 64)
# Needs perf (Debian linux-perf); prints a table per step, shares of the step's samples.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
secs=3 bdir="$root/build" filters=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --seconds) secs="$2"; shift ;;
    -h|--help) sed -n '2,8p' "${BASH_SOURCE[0]}"; exit 0 ;;
    train_step*/*) filters+=("$1") ;;
    *) bdir="$1" ;;
  esac
  shift
done
[[ ${#filters[@]} -gt 0 ]] || filters=(train_step/mlp/64 train_step/mlp/256 train_step/cnn/64)
command -v perf >/dev/null || { echo "step_profile: perf is missing (apt-get install linux-perf)" >&2; exit 77; }
[[ -x "$bdir/bin/bench_train_step" ]] || cmake --build "$bdir" --target bench_train_step -j "$(nproc)" >&2
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 OMP_WAIT_POLICY=passive
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

for f in "${filters[@]}"; do
  echo "step_profile: $f (${secs} s under perf)" >&2
  perf record -q -o "$tmp/perf.data" "$bdir/bin/bench_train_step" --benchmark_filter="^$f\$" \
    --benchmark_min_time="$secs" --benchmark_format=json >"$tmp/bench.json" 2>/dev/null
  perf report -i "$tmp/perf.data" --no-children --sort symbol --stdio 2>/dev/null >"$tmp/report.txt"
  python3 - "$f" "$tmp/report.txt" "$tmp/bench.json" <<'PY'
import json, re, sys
name, report, bench = sys.argv[1:4]
rules = [  # first match wins: (category, regex on the symbol)
    ("GEMM", r"sgemm|dgemm|gemm_|::tile<\d|gebp|gemm_pack|blas_gemm|cblas|_kernel_(SKYLAKEX|HASWELL|ZEN|COOPERLAKE)|(in|it|on|ot)copy"),
    ("Winograd transforms", r"winograd|transpose8x8|input_tile|padded_row|flush_tiles|weight_transform|flip_transpose|dy_tile|dy_plane|direct_sample"),
    ("im2col / col2im, conv bias fill", r"im2col|col2im|conv2d_forward|conv2d_backward"),
    ("pooling", r"pool2d|pool_2x2"),
    ("softmax, reductions", r"softmax|reduce_kernel|block_sum|accurate_sum|arg_reduce"),
    ("optimizer", r"optim::|SGD|Adam|sgd_step|adam_step|rmsprop_step"),
    ("allocation, page faults", r"malloc|free|_int_|clear_page|page_fault|memset|folio|CpuBackend::allocate|CpuBackend::deallocate|mmap|madvise|\[k\]"),
    ("elementwise, copies", r"binary|unary|compare|for_each_row|copy|fill|where|clamp|memmove|memcpy|exp|log|uniform|normal"),
]
totals = {}
for line in open(report):
    m = re.match(r"\s*([\d.]+)%\s+(\[[.k]\])\s+(.*)", line)
    if not m:
        continue
    pct, kind, sym = float(m.group(1)), m.group(2), m.group(3)
    full = kind + " " + sym
    cat = next((c for c, rx in rules if re.search(rx, full)), "autograd bookkeeping, dispatch, other")
    totals[cat] = totals.get(cat, 0.0) + pct
step = None
for b in json.load(open(bench))["benchmarks"]:
    scale = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}[b["time_unit"]]
    step = b["cpu_time"] * scale
print(f"\n{name}: {step:.0f} us per step (CPU time, one thread)" if step else f"\n{name}")
print(f"  {'where':<40}{'share':>8}{'us':>10}")
for cat, pct in sorted(totals.items(), key=lambda kv: -kv[1]):
    us = f"{pct / 100 * step:10.0f}" if step else ""
    print(f"  {cat:<40}{pct:>7.1f}%{us}")
PY
done
