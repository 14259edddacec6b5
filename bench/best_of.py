#!/usr/bin/env python3
"""Summarise Google Benchmark JSON runs: the fastest repetition of each benchmark.

On a shared machine, other work only ever slows a run down, so the fastest of
several repetitions is the best estimate of what the code can do. Prints a
Markdown table: name, time, and every user counter of that repetition.

    ./bench_gemm --benchmark_repetitions=5 --benchmark_format=json > gemm.json
    python3 bench/best_of.py gemm.json --ratio gemm_gs/:gemm_eigen/

--ratio A:B adds a column: the speed of this row relative to the row whose name
has A replaced by B, i.e. reference time / this time (the two do the same work;
> 1 means faster than the reference).
--cpu ranks repetitions by CPU time of the main thread instead of wall time.
"""
import argparse
import json


def si(x):
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.3g}{unit}"
    if 0 < abs(x) < 1e-3:
        return f"{x * 1e9:.3g}n"
    return f"{x:.3g}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+")
    ap.add_argument("--ratio", help="A:B, e.g. gemm_gs/:gemm_eigen/")
    ap.add_argument("--cpu", action="store_true", help="rank by cpu_time instead of real_time")
    args = ap.parse_args()

    key = "cpu_time" if args.cpu else "real_time"
    best, order = {}, []
    skip = {"name", "run_name", "run_type", "repetitions", "repetition_index", "threads", "iterations",
            "real_time", "cpu_time", "time_unit", "family_index", "per_family_instance_index",
            "aggregate_name", "aggregate_unit", "label", "error_occurred", "error_message"}
    for path in args.files:
        with open(path) as f:
            for b in json.load(f)["benchmarks"]:
                if b.get("run_type") != "iteration":
                    continue
                name = b["run_name"]
                if name not in best:
                    order.append(name)
                if name not in best or b[key] < best[name][key]:
                    best[name] = b

    counters = []
    for name in order:
        for k in best[name]:
            if k not in skip and k not in counters:
                counters.append(k)
    head = ["benchmark", f"{key} (fastest)"] + counters + (["ratio"] if args.ratio else [])
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for name in order:
        b = best[name]
        t = b[key]
        row = [f"`{name}`", f"{t:,.0f} {b['time_unit']}" if t >= 100 else f"{t:.3g} {b['time_unit']}"]
        row += [si(b[c]) if c in b else "" for c in counters]
        if args.ratio:
            a, r = args.ratio.split(":")
            ref = best.get(name.replace(a, r)) if a in name else None
            row.append(f"{ref[key] / b[key]:.2f}" if ref is not None else "")
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
