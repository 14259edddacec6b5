#!/usr/bin/env python3
"""A napkin model of data-parallel training: ring all-reduce time against compute time.

    python3 scripts/napkin_allreduce.py            # the tables of docs/distributed.md
    python3 scripts/napkin_allreduce.py --json

The model (the textbook cost of a ring all-reduce, as NCCL's ring algorithm runs it):
each of N workers sends and receives 2(N-1)/N of the gradient's S bytes over its
slowest link of bandwidth B, in 2(N-1) steps that each pay a latency a:

    t_comm(N) = 2 (N-1)/N * S / B  +  2 (N-1) * a

Compute per step is the step's FLOPs at a sustained rate. With bucketed all-reduce
overlapping the backward pass (DDP), communication is hidden while it is shorter
than the backward (about 2/3 of a step's FLOPs); what is left shows as exposed time.
Every number below is an assumption written out, not a measurement; change them
with the flags to match your hardware.
"""
import argparse
import json

# Links: bandwidth a single GPU gets in an all-reduce (bytes/s) and per-step latency (s).
LINKS = {
    # NVLink 3 (A100 SXM): NCCL reaches ~230 GB/s bus bandwidth inside one NVLink domain.
    "NVLink": (230e9, 5e-6),
    # InfiniBand HDR, one 200 Gb/s adapter per GPU (as in DGX A100): 25 GB/s.
    "InfiniBand": (25e9, 10e-6),
}

MODELS = {
    # The CNN of `gradsleuth train --model cnn`: conv32-pool-conv64-pool-fc128-fc10,
    # 421,642 float32 parameters; forward 8.5 MFLOP per 28x28 image, a step ~3x forward.
    "CNN (0.42M params, batch 64/GPU)": dict(params=421_642, flops=3 * 8.5e6 * 64, rate=10e12),
    # A 100M-parameter transformer, 8 sequences of 1024 tokens per GPU per step:
    # 6 * params * tokens FLOPs (forward + backward), at 100 TFLOP/s sustained (bf16 on an A100-class GPU).
    "100M-param model (8x1024 tokens/GPU)": dict(params=100e6, flops=6 * 100e6 * 8 * 1024, rate=100e12),
}

WORLD = [2, 4, 8, 16, 32, 64]


def ring_allreduce_seconds(n, nbytes, bandwidth, latency):
    if n < 2:
        return 0.0
    return 2 * (n - 1) / n * nbytes / bandwidth + 2 * (n - 1) * latency


def table(bytes_per_param):
    rows = []
    for mname, m in MODELS.items():
        compute = m["flops"] / m["rate"]
        backward = compute * 2 / 3
        nbytes = m["params"] * bytes_per_param
        for link, (bw, lat) in LINKS.items():
            for n in WORLD:
                comm = ring_allreduce_seconds(n, nbytes, bw, lat)
                exposed = max(0.0, comm - backward)
                rows.append(dict(model=mname, link=link, world=n, grad_mb=nbytes / 1e6, compute_ms=compute * 1e3,
                                 comm_ms=comm * 1e3, comm_over_compute=comm / compute,
                                 efficiency_overlapped=compute / (compute + exposed),
                                 efficiency_serial=compute / (compute + comm)))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bytes-per-param", type=int, default=4, help="gradient bytes per parameter (4: float32)")
    ap.add_argument("--json", action="store_true", help="machine-readable rows")
    a = ap.parse_args()
    rows = table(a.bytes_per_param)
    if a.json:
        print(json.dumps(rows, indent=1))
        return
    for mname in MODELS:
        sub = [r for r in rows if r["model"] == mname]
        print(f"\n{mname}: gradient {sub[0]['grad_mb']:.2f} MB, compute {sub[0]['compute_ms']:.3g} ms per step\n")
        print("| link | N | all-reduce (ms) | comm / compute | efficiency, no overlap | efficiency, overlapped |")
        print("|---|---|---|---|---|---|")
        for r in sub:
            print(f"| {r['link']} | {r['world']} | {r['comm_ms']:.3g} | {r['comm_over_compute']:.2g} | "
                  f"{r['efficiency_serial']:.0%} | {r['efficiency_overlapped']:.0%} |")


if __name__ == "__main__":
    main()
