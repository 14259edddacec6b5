#!/usr/bin/env bash
# gradsleuth against its peer, libtorch's C++ API, single-threaded, in one run:
# the gradsleuth programs (bench_train_step, bench_gemm, bench_overhead) and
# bench/peer_libtorch.cpp alternate for ROUNDS rounds (>= 3), so a load change on a
# shared machine hits both sides; each figure is the median over the rounds, and the
# ratio is gradsleuth / libtorch (time: lower is better; GEMM throughput: higher). Times
# are CPU times and GEMM GFLOP/s are computed from CPU time: one thread each, so the
# load of other processes does not count against either side.
#   scripts/bench_peer.sh [--rounds N] [--min-time S] [--json FILE] [BUILD_DIR]
# Needs Google Benchmark (setup.sh installs it) and Debian's libtorch-dev (not needed
# by ./test.sh; CMake builds bench/peer_libtorch.cpp when it is installed):
#   apt-get install -y --no-install-recommends libtorch-dev libopenblas0-pthread
# Both peers' BLAS kernels are reported. Where gradsleuth's OpenBLAS runs kernels far below the CPU
# (generic ones on a CPU newer than the library, bench_gemm's "blas_far_below"), libtorch would run
# the same crippled kernels and flatter every ratio: the peer then runs with OPENBLAS_CORETYPE set to
# the core type that suits this CPU ("blas_suggested_core"), and the report says so.
# Exit 77 when the peer is missing.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
rounds=3 min_time=0.5 json="" bdir="$root/build"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --rounds) rounds="$2"; shift ;;
    --min-time) min_time="$2"; shift ;;
    --json) json="$2"; shift ;;
    -h|--help) sed -n '2,17p' "${BASH_SOURCE[0]}"; exit 0 ;;
    -*) echo "bench_peer: unknown option '$1'" >&2; exit 2 ;;
    *) bdir="$1" ;;
  esac
  shift
done
[[ "$rounds" =~ ^[0-9]+$ && "$rounds" -ge 3 ]] || { echo "bench_peer: --rounds must be a whole number >= 3" >&2; exit 2; }
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 OMP_WAIT_POLICY=passive

if [[ ! -f /usr/lib/x86_64-linux-gnu/cmake/Torch/TorchConfig.cmake ]]; then
  echo "bench_peer: libtorch is missing: apt-get install -y --no-install-recommends libtorch-dev libopenblas0-pthread" >&2
  exit 77
fi
if [[ ! -x "$bdir/bin/peer_libtorch" || ! -x "$bdir/bin/bench_train_step" ]]; then
  echo "bench_peer: building the benchmarks in $bdir (with the libtorch peer: -DGRADSLEUTH_BENCH_PEER=ON)" >&2
  cmake "$bdir" -DGRADSLEUTH_BENCH_PEER=ON >/dev/null
  cmake --build "$bdir" --target bench_train_step bench_gemm bench_overhead peer_libtorch -j "$(nproc)" >&2
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
run() {  # run NAME PROGRAM FILTER [VAR=VALUE...]: the program with those variables set
  env "${@:4}" "$bdir/bin/$2" --benchmark_filter="$3" --benchmark_min_time="$min_time" --benchmark_format=json \
    >"$tmp/$1.$r.json" 2>/dev/null
}
context() {  # context FILE KEY: a value of a benchmark program's JSON context ("" when absent)
  python3 -c 'import json, sys; print(json.load(open(sys.argv[1])).get("context", {}).get(sys.argv[2], ""))' "$1" "$2"
}
peer_env=()
for ((r = 1; r <= rounds; r++)); do
  echo "bench_peer: round $r/$rounds: gradsleuth" >&2
  run gs_step bench_train_step 'train_step/(mlp|cnn)/'
  run gs_gemm bench_gemm 'gemm_(gs|blas)/a@b/.*threads:1'
  run gs_over bench_overhead 'overhead/add/record$'
  if [[ $r == 1 && "$(context "$tmp/gs_gemm.1.json" blas_far_below)" == true ]]; then
    core="$(context "$tmp/gs_gemm.1.json" blas_suggested_core)"
    if [[ -n $core ]]; then
      peer_env=(OPENBLAS_CORETYPE="$core")
      echo "bench_peer: the BLAS runs kernels far below this CPU ($(context "$tmp/gs_gemm.1.json" blas)):" \
           "the peer runs with OPENBLAS_CORETYPE=$core" >&2
    fi
  fi
  echo "bench_peer: round $r/$rounds: libtorch" >&2
  run torch peer_libtorch '.' "${peer_env[@]}"
done

python3 - "$tmp" "$rounds" "$json" "${peer_env[*]}" <<'PY'
import glob, json, os, platform, re, statistics, sys
tmp, rounds, out, peer_env = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
def ctx(name):
    try:
        return json.load(open(os.path.join(tmp, name + ".1.json"))).get("context", {})
    except (OSError, ValueError):
        return {}
gs_ctx, peer_ctx = ctx("gs_gemm"), ctx("torch")
blas = {"gradsleuth": gs_ctx.get("blas", ""), "gradsleuth_gemm_route": gs_ctx.get("gemm_route", ""),
        "cpu_isa": gs_ctx.get("cpu_isa", ""), "peer": peer_ctx.get("blas", ""), "peer_env": peer_env}
series = {}  # (side, name) -> [values]
context = {}
for path in sorted(glob.glob(os.path.join(tmp, "*.json"))):
    side = "torch" if os.path.basename(path).startswith("torch") else "gs"
    doc = json.load(open(path))
    context = context or doc.get("context", {})
    for b in doc["benchmarks"]:
        name = b["run_name"] if "run_name" in b else b["name"]
        name = name.replace("/real_time", "")
        scale = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}[b["time_unit"]]
        if "FLOP/s" in b:
            # From CPU time, not the benchmarks' wall-time rate: everything here runs on one
            # thread, and on a shared machine the wall-time rate measures the load (a GEMM
            # 1024^3 "at 74 GFLOP/s" was a fast kernel descheduled part of the time).
            n = int(re.search(r"n:(\d+)", name).group(1))
            val = 2.0 * n ** 3 / (b["cpu_time"] * scale * 1e-6) / 1e9
        elif "per_op" in b:
            val = b["per_op"] * 1e6  # seconds per op -> us
        else:
            val = b["cpu_time"] * scale
        series.setdefault((side, name), []).append(val)
med = {k: statistics.median(v) for k, v in series.items()}
rows = []
def row(label, gs_key, torch_key, unit, goal=None, higher_better=False):
    g, t = med.get(("gs", gs_key)), med.get(("torch", torch_key))
    if g is None or t is None:
        return
    ratio = g / t
    ok = None if goal is None else (ratio >= goal if higher_better else ratio <= goal)
    rows.append(dict(name=label, gradsleuth=g, libtorch=t, unit=unit, ratio=ratio, goal=goal,
                     met=ok, higher_is_better=higher_better))
for n in (256, 512, 1024):
    row(f"SGEMM {n}^3", f"gemm_gs/a@b/n:{n}/threads:1", f"gemm_torch/a@b/n:{n}", "GFLOP/s", None, True)
for n in (256, 512, 1024):  # the library itself, called raw, in the same run
    g, b = med.get(("gs", f"gemm_gs/a@b/n:{n}/threads:1")), med.get(("gs", f"gemm_blas/a@b/n:{n}/threads:1"))
    if g and b:
        rows.append(dict(name=f"SGEMM {n}^3 vs raw BLAS", gradsleuth=g, libtorch=b, unit="GFLOP/s", ratio=g / b,
                         goal=1.0, met=g / b >= 0.97, higher_is_better=True, peer="raw cblas_sgemm"))
row("MLP step, batch 64", "train_step/mlp/64", "train_step/mlp/64", "us", 0.8)
row("MLP step, batch 256", "train_step/mlp/256", "train_step/mlp/256", "us", 0.9)
row("CNN step, batch 64", "train_step/cnn/64", "train_step/cnn/64", "us", 0.6)
row("add, autograd recording", "overhead/add/record", "overhead/add/record", "us/op", None)
cpu = context.get("host_name", "")
try:
    cpu = next(l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name"))
except (OSError, StopIteration):
    pass
print(f"{'one thread, median of ' + str(rounds) + ' alternating rounds':<34}{'gradsleuth':>12}{'peer':>12}{'ratio':>8}  goal")
for r in rows:
    goal = "" if r["goal"] is None else (("met" if r["met"] else "NOT met") + f" ({'>=' if r['higher_is_better'] else '<='} {r['goal']}x)")
    print(f"{r['name']:<34}{r['gradsleuth']:>12.1f}{r['libtorch']:>12.1f}{r['ratio']:>8.2f}  {goal}   [{r['unit']}]")
print(f"(peer: libtorch 1.13 C++ API unless noted; CPU: {cpu}; "
      f"GEMM rows are throughput, higher is better; the others are time, lower is better)")
print(f"BLAS: gradsleuth: {blas['gradsleuth'] or 'unknown'} (float32 products on "
      f"{'its own kernel' if blas['gradsleuth_gemm_route'] == 'engine' else 'the BLAS'}); "
      f"peer: {blas['peer'] or 'unknown'}{' with ' + peer_env if peer_env else ''}; CPU ISA: {blas['cpu_isa']}")
if out:
    tmpf = out + ".tmp"
    with open(tmpf, "w") as f:
        json.dump({"cpu": cpu, "rounds": rounds, "blas": blas, "rows": rows}, f, indent=1)
    os.replace(tmpf, out)
PY
