#!/usr/bin/env python3
"""The PyTorch side of the peer benchmark (scripts/bench_peer.sh runs both).

Times one training step -- zero_grad, forward, cross-entropy, backward, SGD
step -- of the same models bench/bench_train_step.cpp times in gradsleuth, on
the same random Fashion-MNIST-shaped data, single-threaded:

  train_step/mlp/64    MLP 784-256-10, batch 64
  train_step/mlp/256   the same at batch 256
  train_step/cnn/64    conv32-pool-conv64-pool-fc128-fc10, batch 64

Prints one JSON object per line: {"name", "real_us", "cpu_us", "steps"}.

  peer_train_step.py [MIN_TIME] [--device cuda] [--autocast bf16|fp16]

--device cuda times the steps on the GPU instead (bench_step_device --device cuda is the
gradsleuth side; scripts/gpu_check.sh runs both): each step reads its loss back, so the time
is the synchronised step, and TF32 is off (gradsleuth's CUDA kernels compute in float32).
It adds the batch sizes that fill a GPU: mlp/4096 and cnn/512.
--autocast runs the forward and the loss under torch.autocast in that dtype (fp16 with a
torch.amp.GradScaler), the step bench_step_device --autocast times; the names get /bf16 or /fp16.
Needs Debian's python3-torch (not needed by ./test.sh):
  apt-get install -y --no-install-recommends python3-torch libopenblas0-pthread
"""
import json
import statistics
import sys
import time

try:
    import torch
    import torch.nn as nn
except ImportError:
    print("peer_train_step: PyTorch is not installed (apt-get install python3-torch)", file=sys.stderr)
    sys.exit(77)


def mlp():  # (B, 1, 28, 28) -> (B, 10)
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))


def cnn():
    return nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
        nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))


def time_step(make, batch, min_time=1.0, blocks=5, device="cpu", autocast=None):
    """Median over `blocks` blocks of the mean step time; each block runs >= min_time / blocks s.
    autocast: None, torch.bfloat16 or torch.float16 (then with a GradScaler)."""
    torch.manual_seed(0)
    model = make().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    x = torch.rand(batch, 1, 28, 28).to(device)   # (B, 1, 28, 28)
    y = torch.randint(0, 10, (batch,)).to(device)  # (B) int64
    scaler = None
    if autocast == torch.float16:  # torch.amp.GradScaler from PyTorch 2.3, torch.cuda.amp's before
        scaler = torch.amp.GradScaler(device) if hasattr(torch.amp, "GradScaler") else torch.cuda.amp.GradScaler()

    def step():
        opt.zero_grad()
        with torch.autocast(device_type=device, dtype=autocast or torch.bfloat16, enabled=autocast is not None):
            loss = loss_fn(model(x), y)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
        if device != "cpu":
            loss.item()  # synchronises, as gradsleuth's side does

    for _ in range(10 if device != "cpu" else 5):  # warm-up: allocator, cuBLAS/cuDNN handles
        step()
    real, cpu, total = [], [], 0
    for _ in range(blocks):
        n, t0, c0 = 0, time.perf_counter(), time.process_time()
        while time.perf_counter() - t0 < min_time / blocks:
            step()
            n += 1
        real.append((time.perf_counter() - t0) / n)
        cpu.append((time.process_time() - c0) / n)
        total += n
    return statistics.median(real) * 1e6, statistics.median(cpu) * 1e6, total


def main():
    torch.set_num_threads(1)
    args = sys.argv[1:]
    device = "cpu"
    if "--device" in args:
        i = args.index("--device")
        if i + 1 >= len(args) or args[i + 1] not in ("cpu", "cuda"):
            print("peer_train_step: --device takes cpu or cuda", file=sys.stderr)
            sys.exit(2)
        device = args[i + 1]
        del args[i:i + 2]
    autocast, suffix = None, ""
    if "--autocast" in args:
        i = args.index("--autocast")
        kinds = {"bf16": torch.bfloat16, "fp16": torch.float16}
        if i + 1 >= len(args) or args[i + 1] not in kinds:
            print("peer_train_step: --autocast takes bf16 or fp16", file=sys.stderr)
            sys.exit(2)
        autocast, suffix = kinds[args[i + 1]], "/" + args[i + 1]
        del args[i:i + 2]
    min_time = float(args[0]) if args else 1.0
    cases = [("mlp", mlp, 64), ("mlp", mlp, 256), ("cnn", cnn, 64)]
    if device == "cuda":
        if not torch.cuda.is_available():
            print("peer_train_step: --device cuda: PyTorch sees no CUDA GPU", file=sys.stderr)
            sys.exit(77)
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        cases = [("mlp", mlp, 64), ("mlp", mlp, 256), ("mlp", mlp, 4096), ("cnn", cnn, 64), ("cnn", cnn, 512)]
    for name, make, batch in cases:
        real_us, cpu_us, steps = time_step(make, batch, min_time, device=device, autocast=autocast)
        print(json.dumps({"name": f"train_step/{name}/{batch}{suffix}", "device": device, "real_us": round(real_us, 1),
                          "cpu_us": round(cpu_us, 1), "steps": steps, "torch": torch.__version__}), flush=True)


if __name__ == "__main__":
    main()
