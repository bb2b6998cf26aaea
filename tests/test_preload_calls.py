"""What the preload library does per call, on the fake runtimes: which calls run the traced path (`--api`), the
per-thread-stream entry points, and stream ids."""
from __future__ import annotations

import json
import os
import sys

import pytest

from support.gpu_bundle import isolated
from support.lttng import assert_events_match, call_events, read_worklog, record


def test_a_runtime_left_out_by_api_pays_no_slow_path(fake_gpu, tmp_path) -> None:
    """--api hip: the CUDA wrappers forward every call without their traced path (device query, table insert,
    event) — the exit report counts the calls that ran it — while every HIP call runs it. Run with a session
    daemon of its own: another session of this user recording CUDA would rightly turn CUDA tracing on."""
    hip_log, cuda_log, out = tmp_path / "hip.jsonl", tmp_path / "cuda.jsonl", tmp_path / "trace"
    script = f"{fake_gpu.workload} hip {hip_log} && {fake_gpu.workload} cuda {cuda_log}"
    proc = isolated([sys.executable, "-m", "ctf2perfetto", "record", "-o", str(out), "--api", "hip", "--",
                     "/bin/sh", "-c", script], env=dict(os.environ), timeout=300,
                     system_lttng=True)
    assert proc.returncode == 0, proc.stderr
    calls = {r["pid"]: r["calls"] for r in json.loads((out / "memq-record.json").read_text())["reach"]}
    hip, cuda = read_worklog(hip_log), read_worklog(cuda_log)
    assert calls[cuda[0]["pid"]] == {"hip": 0, "cuda": 0, "driver": 0}
    assert calls[hip[0]["pid"]] == {"hip": len(hip), "cuda": 0, "driver": 0}


@pytest.mark.parametrize("runtime, apis", [
    ("hip", {"hipMemcpy_spt", "hipMemcpyAsync_spt", "hipMemset_spt", "hipMemsetAsync_spt", "hipMemcpy2D_spt",
             "hipMemcpy2DAsync_spt", "hipMemcpy3D_spt", "hipMemcpy3DAsync_spt", "hipStreamSynchronize_spt",
             "hipMemPrefetchAsync_v2", "hipMemAdvise_v2"}),
    ("cuda", {"cudaMemcpyAsync_ptsz", "cudaMemPrefetchAsync_v2_ptsz", "cuMemcpyHtoDAsync_v2_ptsz"}),
])
def test_per_thread_entry_points_and_one_id_per_stream(fake_gpu, tmp_path, runtime, apis) -> None:
    """HIP's _spt exports (-fgpu-default-stream=per-thread) and ROCm 7.1's location forms, CUDA's _v2_ptsz prefetch,
    all recorded; stream 0 given to a per-thread entry point is recorded as the per-thread stream 0x2 (as _ptds
    calls are), the legacy handle 0x1 as the legacy stream 0."""
    log = tmp_path / f"{runtime}.jsonl"
    run = record(tmp_path / "trace", [str(fake_gpu.stream_work), runtime, str(log)], api=runtime)
    assert run.meta["exit_code"] == 0, run.stderr
    calls = read_worklog(log)
    assert apis <= {c["api"] for c in calls}
    assert_events_match(call_events(run.dir, calls[0]["pid"]), calls)
