#!/usr/bin/env python3
"""Compares two builds of one Google Benchmark program, interleaved in one run.

    scripts/bench_ab.py A_BINARY B_BINARY [--rounds 5] [--filter REGEX] [--min-time 0.2] [--json]

Runs A, then B, then A, ... (--rounds times each, alternating, so that a change in the
machine's load falls on both), each with --benchmark_format=json, and prints per
benchmark the median real time of A and of B, the fastest of each, and B / A of the
medians. Typical use: the previous commit's build as A, the working tree's as B, to show
that a change is within noise (or to measure what it gains).
"""
import argparse
import json
import statistics
import subprocess
import sys


def run_once(binary, flt, min_time):
    cmd = [binary, "--benchmark_format=json", f"--benchmark_min_time={min_time}"]
    if flt:
        cmd.append(f"--benchmark_filter={flt}")
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    times = {}
    for b in json.loads(out)["benchmarks"]:
        if b.get("run_type", "iteration") != "iteration":
            continue
        scale = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}[b.get("time_unit", "ns")]
        times[b["name"]] = b["real_time"] * scale
    return times


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--filter", default="")
    ap.add_argument("--min-time", type=float, default=0.2)
    ap.add_argument("--json", action="store_true", help="print the table as JSON")
    o = ap.parse_args()
    if o.rounds < 1:
        sys.exit("bench_ab: --rounds must be >= 1")
    samples = {"a": {}, "b": {}}
    for r in range(o.rounds):
        for side, binary in (("a", o.a), ("b", o.b)):
            print(f"bench_ab: round {r + 1}/{o.rounds}, {side.upper()}", file=sys.stderr, flush=True)
            for name, t in run_once(binary, o.filter, o.min_time).items():
                samples[side].setdefault(name, []).append(t)
    rows = []
    for name in samples["a"]:
        if name not in samples["b"]:
            continue
        a, b = samples["a"][name], samples["b"][name]
        rows.append({"name": name, "a_median_s": statistics.median(a), "b_median_s": statistics.median(b),
                     "a_min_s": min(a), "b_min_s": min(b),
                     "ratio_median": statistics.median(b) / statistics.median(a), "ratio_min": min(b) / min(a)})
    if o.json:
        print(json.dumps(rows, indent=1))
        return
    w = max([len(r["name"]) for r in rows] + [9])
    print(f"{'benchmark':<{w}}  {'A median':>10}  {'B median':>10}  {'B/A med':>8}  {'B/A min':>8}")
    for r in rows:
        print(f"{r['name']:<{w}}  {r['a_median_s'] * 1e3:>8.3f}ms  {r['b_median_s'] * 1e3:>8.3f}ms  "
              f"{r['ratio_median']:>8.3f}  {r['ratio_min']:>8.3f}")


if __name__ == "__main__":
    main()
