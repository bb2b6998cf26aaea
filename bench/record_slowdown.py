"""Slowdown of a PyTorch CPU training loop under `memq record` (libc heap + HIP/CUDA wrappers) vs without.

The same script runs plainly and under `memq record --api hip,cuda,libc
--mode blocking|discard`, interleaved, best of --repeat runs each. It reports
the whole process (wall time, import torch included: the interpreter's and
torch's start-up is malloc-heavy) and the training loop alone (timed inside the
script), with the events recorded, lost and the trace size.

    python3 bench/record_slowdown.py [--steps 100] [--repeat 3] [--mode blocking]
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TRAIN = """
import sys, time
t0 = time.perf_counter()
import torch
t1 = time.perf_counter()
torch.manual_seed(0)
torch.set_num_threads(1)  # the machine is shared: one thread keeps the timing stable
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512), torch.nn.ReLU(),
                            torch.nn.Linear(512, 10))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
x, y = torch.randn(128, 256), torch.randint(0, 10, (128,))
for step in range(int(sys.argv[1])):
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
t2 = time.perf_counter()
print(f"{t1 - t0:.4f} {t2 - t1:.4f} {loss.item():.4f}")
"""


def timed(argv: list[str]) -> tuple[float, float, float, str]:
    """(process wall s, import s, loop s, loss) of one run."""
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, check=True)
    wall = time.perf_counter() - start
    import_s, loop_s, loss = proc.stdout.split()[-3:]
    return wall, float(import_s), float(loop_s), loss


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--mode", choices=("blocking", "discard"), default="blocking")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="memq-slowdown-") as tmp:
        script = Path(tmp) / "train.py"
        script.write_text(TRAIN)
        plain_argv = [sys.executable, str(script), str(args.steps)]
        plain, traced, meta = [], [], {}
        for i in range(args.repeat):
            plain.append(timed(plain_argv))
            out = Path(tmp) / f"trace{i}"
            traced.append(timed([sys.executable, "-m", "ctf2perfetto", "record", "-o", str(out), "--mode",
                                 args.mode, "--", *plain_argv]))
            meta = json.loads((out / "memq-record.json").read_text())
            shutil.rmtree(out)
    losses = {r[3] for r in plain + traced}
    best_plain = [min(r[k] for r in plain) for k in range(3)]
    best_traced = [min(r[k] for r in traced) for k in range(3)]
    print(f"PyTorch CPU MLP training, {args.steps} steps, best of {args.repeat}; memq record --mode {args.mode}")
    print(f"{'':<22}{'plain s':>9}{'recorded s':>12}{'slowdown':>10}")
    for k, name in enumerate(("process (wall)", "import torch", "training loop")):
        print(f"{name:<22}{best_plain[k]:>9.2f}{best_traced[k]:>12.2f}{best_traced[k] / best_plain[k]:>9.2f}x")
    print(f"last recording: {meta['events']:,} events, {meta['discarded_events']:,} lost, "
          f"{meta['size_bytes'] / 2**20:.0f} MiB; same final loss in every run: {len(losses) == 1}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
