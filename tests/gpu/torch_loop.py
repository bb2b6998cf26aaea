"""A small PyTorch CUDA training loop for scripts/gpu-check.sh (real GPU only).

Pinned DataLoader batches moved with `.to('cuda', non_blocking=True)`, a two-layer
MLP, `loss.item()` every step (a device-to-host copy and a sync) and
`torch.cuda.synchronize()` around the timed part. Writes LOG (JSON) with what the
checker (tools/gpu_check.py) compares the trace against: the caching
allocator's segment count (one cudaMalloc each), the pinned host allocator's
counters, the bytes the loop moved, and the steady-state loop time.

    python3 tests/gpu/torch_loop.py --log loop.json [--steps 60] [--warmup 10]
"""
from __future__ import annotations

import argparse
import json
import os
import time

import torch
from torch.utils.data import DataLoader, TensorDataset

FEATURES, HIDDEN, CLASSES = 512, 1024, 10


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--log", required=True)
    parser.add_argument("--steps", type=int, default=60, help="timed steps (after the warm-up)")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--batch", type=int, default=256)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("torch_loop: no CUDA device")

    torch.manual_seed(0)
    steps = args.warmup + args.steps
    data = TensorDataset(torch.randn(steps * args.batch, FEATURES), torch.randint(0, CLASSES, (steps * args.batch,)))
    loader = DataLoader(data, batch_size=args.batch, shuffle=False, pin_memory=True, num_workers=0)
    model = torch.nn.Sequential(torch.nn.Linear(FEATURES, HIDDEN), torch.nn.ReLU(),
                                torch.nn.Linear(HIDDEN, CLASSES)).to("cuda")
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    losses = []
    start = None
    labels = []  # each step's label upload: its pinned source, device destination and bytes (new labels each)
    for step, (x_host, y_host) in enumerate(loader):
        if step == args.warmup:
            torch.cuda.synchronize()
            start = time.perf_counter()
        x = x_host.to("cuda", non_blocking=True)
        y = y_host.to("cuda", non_blocking=True)
        labels.append({"step": step, "src": y_host.data_ptr(), "dst": y.data_ptr(), "bytes": y_host.nbytes})
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    torch.cuda.synchronize()
    loop_s = time.perf_counter() - start

    stats = torch.cuda.memory_stats()
    host_stats = {}
    if hasattr(torch.cuda, "host_memory_stats"):  # torch >= 2.5
        host_stats = {k: v for k, v in torch.cuda.host_memory_stats().items() if isinstance(v, (int, float))}
    batch_bytes = args.batch * (FEATURES * 4 + 8)  # float32 features + int64 labels
    log = {
        "pid": os.getpid(),
        "steps": steps, "timed_steps": args.steps, "warmup": args.warmup, "batch": args.batch,
        "loop_s": loop_s, "step_ms": 1e3 * loop_s / args.steps,
        "final_loss": losses[-1],
        "torch": torch.__version__, "cuda": torch.version.cuda, "device": torch.cuda.get_device_name(0),
        "segments_allocated": stats.get("segment.all.allocated", 0),
        "segments_freed": stats.get("segment.all.freed", 0),
        "memory_stats": {k: v for k, v in stats.items() if k.startswith(("segment.all", "allocation.all",
                                                                         "reserved_bytes.all"))},
        "host_memory_stats": host_stats,
        "labels": labels,
        # What the loop asked for: two host->device copies per step (x, y) and one
        # device->host copy per step (loss.item(), 4 bytes).
        "expected": {"h2d_copies": 2 * steps, "h2d_bytes": steps * batch_bytes,
                     "d2h_copies": steps, "d2h_bytes": 4 * steps},
    }
    with open(args.log, "w") as f:
        json.dump(log, f, indent=1)
    print(f"torch_loop: {steps} steps, {log['step_ms']:.2f} ms/step, loss {losses[-1]:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
