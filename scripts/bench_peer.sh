#!/usr/bin/env bash
# The peer benchmark of issue 3: one training step of the same MLP and CNN in
# gradsleuth (bench/bench_train_step.cpp) and PyTorch (bench/peer_train_step.py),
# both single-threaded, and the ratio gradsleuth / PyTorch (lower is better).
#   scripts/bench_peer.sh [BUILD_DIR] [MIN_SECONDS]     (defaults: build, 1)
# Needs Google Benchmark (libbenchmark-dev) and Debian's python3-torch; neither
# is needed by ./test.sh. Goals: <= 0.7x at batch 64, <= 1.0x at batch 256.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bdir="${1:-$root/build}"
min_time="${2:-1}"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1

if [[ ! -x "$bdir/bin/bench_train_step" ]]; then
  echo "bench_peer: building bench_train_step in $bdir" >&2
  cmake --build "$bdir" --target bench_train_step -j "$(nproc)" >&2
fi
if ! /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  echo "bench_peer: PyTorch is missing: apt-get install -y --no-install-recommends python3-torch libopenblas0-pthread" >&2
  exit 77
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
echo "bench_peer: gradsleuth ($bdir/bin/bench_train_step) ..." >&2
"$bdir/bin/bench_train_step" --benchmark_filter='train_step/(mlp|cnn)/' --benchmark_min_time="$min_time" \
  --benchmark_repetitions=3 --benchmark_report_aggregates_only=true --benchmark_format=json >"$tmp/gs.json"
echo "bench_peer: PyTorch (bench/peer_train_step.py) ..." >&2
/usr/bin/python3 "$root/bench/peer_train_step.py" "$min_time" >"$tmp/torch.jsonl"

/usr/bin/python3 - "$tmp/gs.json" "$tmp/torch.jsonl" <<'PY'
import json, sys
gs = {}
for b in json.load(open(sys.argv[1]))["benchmarks"]:
    if b.get("aggregate_name") != "median":
        continue
    scale = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}[b["time_unit"]]
    gs[b["run_name"]] = (b["real_time"] * scale, b["cpu_time"] * scale)
th = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
goal = {"train_step/mlp/64": 0.7, "train_step/mlp/256": 1.0, "train_step/cnn/64": None}
print(f"{'step (1 thread)':<22}{'gradsleuth us':>15}{'torch ' + th[0]['torch'] + ' us':>20}{'ratio':>8}  goal")
for t in th:
    name = t["name"]
    if name not in gs:
        continue
    g_real, g_cpu = gs[name]
    ratio = g_cpu / t["cpu_us"]
    gl = goal.get(name)
    verdict = "" if gl is None else (f"<= {gl}x " + ("met" if ratio <= gl else "NOT met"))
    print(f"{name:<22}{g_cpu:>15.1f}{t['cpu_us']:>20.1f}{ratio:>8.2f}  {verdict}")
print("(CPU time per step, median; ratio = gradsleuth / torch, lower is better)")
PY
