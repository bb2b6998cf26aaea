"""What the preload library does per call, on the fake runtimes: which calls run the traced path (`--api`)."""
from __future__ import annotations

import json
import os
import sys

from support.gpu_bundle import isolated
from support.lttng import read_worklog


def test_a_runtime_left_out_by_api_pays_no_slow_path(fake_gpu, tmp_path) -> None:
    """--api hip: the CUDA wrappers forward every call without their traced path (device query, table insert,
    event) — the exit report counts the calls that ran it — while every HIP call runs it. Run with a session
    daemon of its own: another session of this user recording CUDA would rightly turn CUDA tracing on."""
    hip_log, cuda_log, out = tmp_path / "hip.jsonl", tmp_path / "cuda.jsonl", tmp_path / "trace"
    script = f"{fake_gpu.workload} hip {hip_log} && {fake_gpu.workload} cuda {cuda_log}"
    proc = isolated([sys.executable, "-m", "ctf2perfetto", "record", "-o", str(out), "--api", "hip", "--",
                     "/bin/sh", "-c", script], env=dict(os.environ), timeout=300)
    assert proc.returncode == 0, proc.stderr
    calls = {r["pid"]: r["calls"] for r in json.loads((out / "memq-record.json").read_text())["reach"]}
    hip, cuda = read_worklog(hip_log), read_worklog(cuda_log)
    assert calls[cuda[0]["pid"]] == {"hip": 0, "cuda": 0, "driver": 0}
    assert calls[hip[0]["pid"]] == {"hip": len(hip), "cuda": 0, "driver": 0}
