"""examples/finetune_gpt.py on the CPU under `memq record` and the PyTorch profiler, converted with --kineto.

The GPU run of the same script is scripts/gpu-check.sh's (its checks: tools/gpu_finetune.py, tested on a stand-in
by tests/test_gpu_check.py). Here: the script trains (its eval loss falls), its own log counts what its arguments
ask for, the recording loses nothing, and the merged trace holds the profiler's view of the run: one
`Optimizer.step` and one `zero_grad` per step, one DataLoader `__next__` per micro-batch, beside memq's heap
events of the same process.
"""
from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

from support.lttng import record

REPO = Path(__file__).resolve().parent.parent
MEMQ = [sys.executable, "-m", "ctf2perfetto"]


def sql(trace: Path, query: str) -> list[dict]:
    proc = subprocess.run([*MEMQ, "sql", str(trace), query, "--format", "json"], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_finetune_on_cpu_recorded_with_the_profiler(tmp_path: Path) -> None:
    steps, warmup, accum, every = 8, 2, 2, 2
    trace, log = tmp_path / "trace", tmp_path / "run.json"
    rec = record(trace, [sys.executable, "-m", "ctf2perfetto.torchprof", "-o", str(tmp_path / "profile.json"),
                         str(REPO / "examples" / "finetune_gpt.py"), "--device", "cpu", "--steps", str(steps),
                         "--warmup", str(warmup), "--accum", str(accum), "--ckpt-every", str(every),
                         "--eval-every", str(every), "--log", str(log)], api="cuda,libc", timeout=600)
    assert rec.meta["discarded_events"] == 0
    run = json.loads(log.read_text())
    total = steps + warmup
    assert run["steps"] == total and run["config"]["accum"] == accum
    assert [e["step"] for e in run["evals"]] == list(range(every - 1, total, every))
    losses = [e["loss"] for e in run["evals"]]
    assert all(math.isfinite(v) for v in losses) and losses[-1] < losses[0] < math.log(run["config"]["vocab"]) + 0.5
    # The state dict of the model the preset builds: two embeddings, 12 tensors per block, the final norm, the head.
    assert run["checkpoint_tensors"] == 2 + 12 * run["config"]["layers"] + 2 + 1
    assert run["expected"] == {"h2d_copies": 0, "h2d_bytes": 0, "d2h_copies": 0, "d2h_bytes": 0}  # no device

    out = tmp_path / "run.pftrace"
    proc = subprocess.run([*MEMQ, "convert", str(trace), "--kineto", str(tmp_path / "profile.json"), "-o", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    marks = {r["name"]: r["n"] for r in sql(out, "SELECT name, COUNT(*) AS n FROM slice "
                                                 "WHERE category = 'user_annotation' GROUP BY name")}
    assert marks == {"Optimizer.step#AdamW.step": total, "Optimizer.zero_grad#AdamW.zero_grad": total,
                     "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__": total * accum}
    heap = sql(out, f"SELECT COUNT(*) AS n FROM slice s JOIN thread_track tt ON s.track_id = tt.id "
                    f"JOIN thread USING (utid) JOIN process USING (upid) "
                    f"WHERE s.category = 'memq.heap' AND process.pid = {run['pid']}")
    assert heap[0]["n"] > 1000, "the training process's heap blocks of 4 KiB and more"
