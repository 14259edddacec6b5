#!/usr/bin/env python3
"""The PyTorch side of the peer benchmark (scripts/bench_peer.sh runs both).

Times one training step -- zero_grad, forward, cross-entropy, backward, SGD
step -- of the same models bench/bench_train_step.cpp times in gradsleuth, on
the same random Fashion-MNIST-shaped data, single-threaded:

  train_step/mlp/64    MLP 784-256-10, batch 64
  train_step/mlp/256   the same at batch 256
  train_step/cnn/64    conv32-pool-conv64-pool-fc128-fc10, batch 64

Prints one JSON object per line: {"name", "real_us", "cpu_us", "steps"}.
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


def time_step(make, batch, min_time=1.0, blocks=5):
    """Median over `blocks` blocks of the mean step time; each block runs >= min_time / blocks s."""
    torch.manual_seed(0)
    model = make()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    x = torch.rand(batch, 1, 28, 28)   # (B, 1, 28, 28)
    y = torch.randint(0, 10, (batch,))  # (B) int64

    def step():
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()

    for _ in range(5):  # warm-up: allocator, first-call paths
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
    min_time = float(sys.argv[1]) if len(sys.argv) > 1 else 1.0
    for name, make, batch in [("mlp", mlp, 64), ("mlp", mlp, 256), ("cnn", cnn, 64)]:
        real_us, cpu_us, steps = time_step(make, batch, min_time)
        print(json.dumps({"name": f"train_step/{name}/{batch}", "real_us": round(real_us, 1),
                          "cpu_us": round(cpu_us, 1), "steps": steps, "torch": torch.__version__}), flush=True)


if __name__ == "__main__":
    main()
