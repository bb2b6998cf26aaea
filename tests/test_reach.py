"""Every GPU memory call, however the program reaches it, on the fake runtimes and driver.

Each program logs the calls it makes with the event memq must record
(tests/fakes/driver_work.c, ctypes_direct.py); the recorded memq events of its
pid must be exactly that sequence: nothing missed, nothing counted twice.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from ctf2perfetto import analyses
from support.lttng import assert_events_match, call_events, read_worklog, record

FAKES = Path(__file__).resolve().parent / "fakes"


def record_driver_work(fake_gpu, tmp_path: Path, mode: str, api: str = "hip,cuda"):
    log = tmp_path / f"{mode}.jsonl"
    run = record(tmp_path / "trace", [str(fake_gpu.driver_work), mode, str(log)], api=api)
    calls = read_worklog(log)
    return run, calls, calls[0]["pid"]


def test_driver_api_by_name(fake_gpu, tmp_path) -> None:
    """The driver API called directly (static cudart, JAX, driver programs): every call, exact fields."""
    run, calls, pid = record_driver_work(fake_gpu, tmp_path, "direct")
    assert len({c["api"] for c in calls}) == 35  # distinct driver functions (peer copies and advise included)
    assert_events_match(call_events(run.dir, pid), calls)
    assert run.meta["warnings"] == []


def test_cuGetProcAddress_hands_out_the_wrappers(fake_gpu, tmp_path) -> None:
    """Entry points fetched from the driver (v1, _v2, per-thread flag, unnamed entries, itself) are traced."""
    run, calls, pid = record_driver_work(fake_gpu, tmp_path, "procaddr")
    assert [c["api"] for c in calls] == ["cuMemAlloc_v2", "cuMemcpyHtoD_v2", "cuMemcpyHtoDAsync_v2_ptsz",
                                         "cuMemsetD8_v2", "cuMemFree_v2", "cuCtxSynchronize_v2"]
    assert_events_match(call_events(run.dir, pid), calls)


def test_dlsym_rtld_next_stays_relative_to_its_caller(fake_gpu, tmp_path) -> None:
    """memq's dlsym must not change what RTLD_NEXT means for the program (it is relative to the caller)."""
    run = record(tmp_path / "trace", [str(fake_gpu.driver_work), "next", str(tmp_path / "log")], api="hip,cuda",
                 check=False)
    assert run.returncode == 0, run.stderr


def test_runtimes_by_dlsym_dlvsym_and_driver_entry_points(fake_gpu, tmp_path) -> None:
    """Runtimes dlopen'ed RTLD_LOCAL, functions by dlsym/dlvsym (3D copies, HIP VMM), a driver function
    from cudaGetDriverEntryPoint."""
    run, calls, pid = record_driver_work(fake_gpu, tmp_path, "runtime")
    assert {"hipMemcpy3D", "cudaMemcpy3DAsync", "hipMemMap", "hipMemUnmap", "cudaFree"} <= {c["api"] for c in calls}
    assert_events_match(call_events(run.dir, pid), calls)


def test_vmm_allocator_mappings_are_allocations(fake_gpu, tmp_path) -> None:
    """reserve, create, map x2, copy into the mappings (one repeat), one unmap of both, release:
    the copies resolve to the mappings and every mirror ends at the unmap."""
    run, calls, pid = record_driver_work(fake_gpu, tmp_path, "vmm")
    assert_events_match(call_events(run.dir, pid), calls)
    unmaps = [e for e in call_events(run.dir, pid) if e["api_label"] == "cuMemUnmap"]
    assert len(unmaps) == 2 and len({e["begin_ns"] for e in unmaps}) == 1  # one call, one free per mapping
    # This process's rows only: LTTng sessions see every process of the user, so other programs running meanwhile
    # (other tests, long workloads) can add their copies to this trace.
    with analyses.load(run.dir) as engine:
        mirrors = analyses.mirrors(engine).query("pid == @pid")
        redundant = analyses.redundant(engine).set_index(["pid", "class"])
        duplicated = analyses.duplicated(engine)
        counter = analyses.duplicated_counter(engine).query("pid == @pid")
    # Worked by hand: 64 KiB into mapping 0 (replaced by the identical second upload: a repeat),
    # then 1 MiB from the same host buffer at 1.5 MiB: 512 KiB in each mapping.
    replaced, *live = mirrors.sort_values("id").itertuples()
    assert replaced.end_ts == live[0].ts and replaced.bytes == 65536
    assert len({m.end_ts for m in live}) == 1  # all end at the unmap
    by_alloc = {}
    for m in live:
        by_alloc[m.dst_alloc_id] = by_alloc.get(m.dst_alloc_id, 0) + m.bytes
    assert sorted(by_alloc.values()) == [524288, 65536 + 524288] and None not in by_alloc
    assert redundant.loc[(pid, "repeat"), "count"] == 1 and redundant.loc[(pid, "repeat"), "bytes"] == 65536
    total = duplicated[(duplicated["grouping"] == "total") & (duplicated["pid"] == pid)].iloc[0]
    assert total["peak_bytes"] == 65536 + 2**20
    assert counter.sort_values("ts")["value"].iloc[-1] == 0  # nothing duplicated after the unmap


def test_ctypes_rtld_local_runtime_called_directly(fake_gpu, tmp_path) -> None:
    """Python ctypes.CDLL(libcudart / libamdhip64) (RTLD_LOCAL) calling cudaMalloc/cudaMemcpy/cudaFree itself."""
    log = tmp_path / "ctypes.jsonl"
    run = record(tmp_path / "trace", [sys.executable, str(FAKES / "ctypes_direct.py"), str(fake_gpu.dir), str(log)],
                 api="hip,cuda")
    calls = read_worklog(log)
    assert {c["api"] for c in calls} == {"hipMalloc", "hipMemcpy", "hipFree", "cudaMalloc", "cudaMemcpy", "cudaFree"}
    assert_events_match(call_events(run.dir, calls[0]["pid"]), calls)


def test_a_runtime_loaded_but_never_seen_is_reported(fake_gpu, tmp_path) -> None:
    """A process that loads a GPU runtime whose calls memq does not see gets a warning naming the cause."""
    script = ("import ctypes, os, sys; ctypes.CDLL(os.path.join(sys.argv[1], 'libcudart.so.12'), "
              "mode=os.RTLD_LOCAL)")
    run = record(tmp_path / "trace", [sys.executable, "-c", script, str(fake_gpu.dir)], api="hip,cuda")
    (warning,) = run.meta["warnings"]
    assert "libcudart.so.12" in warning and "static CUDA runtime" in warning
    assert f"WARNING: {warning}" in run.stderr
    (report,) = [r for r in run.meta["reach"] if r["libraries"]]
    assert report["calls"] == {"hip": 0, "cuda": 0, "driver": 0}
    # --api hip: CUDA is not recorded, so its silence is no news
    quiet = record(tmp_path / "hip", [sys.executable, "-c", script, str(fake_gpu.dir)], api="hip")
    assert quiet.meta["warnings"] == []
