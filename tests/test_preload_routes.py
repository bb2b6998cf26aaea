"""Which runtime answers a wrapped call (preload/memq_route.c): two copies of the CUDA runtime in one process.

tests/fakes/two_runtimes.c dlopens a module linked with libcudart.so.12 and one linked with libcudart.so.13
(both RTLD_LOCAL), then calls each copy through dlsym on its handle. Each call must reach its own copy (the
program checks with the copy's own functions) and, recorded, be one event with that copy's device and argument
form; a dlerror() pending before the first wrapped call must survive it.
"""
from __future__ import annotations

import os
import subprocess

from ctf2perfetto.paths import native_library
from support.lttng import assert_events_match, call_events, read_worklog, record


def test_two_runtimes_untraced(fake_gpu, tmp_path) -> None:
    """With the library preloaded and nothing recorded, memq must not change which runtime answers."""
    env = {**os.environ, "LD_PRELOAD": str(native_library("libmemq_preload.so"))}
    argv = [str(fake_gpu.two_runtimes), str(fake_gpu.dir), str(tmp_path / "log.jsonl")]
    plain = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert plain.returncode == 0, plain.stderr
    preloaded = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env)
    assert preloaded.returncode == 0, preloaded.stderr


def test_two_runtimes_recorded(fake_gpu, tmp_path) -> None:
    """Every call of both copies is one event: each module's own device, its own prefetch form (CUDA 12: an int
    device, 13: a cudaMemLocation), and the functions dlsym found in each copy traced too."""
    log = tmp_path / "log.jsonl"
    run = record(tmp_path / "trace", [str(fake_gpu.two_runtimes), str(fake_gpu.dir), str(log)], api="cuda")
    assert run.meta["exit_code"] == 0, run.stderr
    calls = read_worklog(log)
    assert [c["device"] for c in calls if c["api"] == "cudaMemPrefetchAsync"] == [1, 0]
    assert len(calls) == 14
    assert_events_match(call_events(run.dir, calls[0]["pid"]), calls)
    (report,) = [r for r in run.meta["reach"] if r["pid"] == calls[0]["pid"]]
    assert report["calls"]["cuda"] == len(calls) and report["table_dropped"] == 0


def test_a_runtime_unloaded_and_another_mapped_in_its_place(fake_gpu, tmp_path) -> None:
    """Module 12 and its runtime are dlclosed; module 13 and libcudart.so.13 then load at the same addresses (as
    glibc does): its calls must not be routed to what was cached for the unloaded copy (the CUDA 12 prefetch form,
    and functions of an object that is gone)."""
    log = tmp_path / "log.jsonl"
    run = record(tmp_path / "trace", [str(fake_gpu.two_runtimes), str(fake_gpu.dir), str(log), "reload"], api="cuda")
    assert run.meta["exit_code"] == 0, run.stderr
    calls = read_worklog(log)
    assert [c["device"] for c in calls if c["api"] == "cudaMemPrefetchAsync"] == [1, 0]
    assert_events_match(call_events(run.dir, calls[0]["pid"]), calls)
