"""Fixed event logs of the hard cases for the analyses, compared with the oracle on every run
(tests/test_analyses_property.py::test_pinned_logs_match_oracle).

Each log is one case in the generator's form: pids 0 and 1 (tid = pid unless said), times from 0, rows in time
order, plus the unified-memory device descriptions. Each targets a documented rule of sql/memq whose breakage
no other test is sure to see; bench/mutation_check.py plants those breakages and checks that they are caught.
"""
from __future__ import annotations

from typing import Callable

from ctf2perfetto.events import EventKind as K, MemKind as M

HOST, PINNED, DEV, UNTRACKED = 0x10000, 0x20000, 0x30000, 0x50000
Case = tuple[list[dict], list[dict]]


def malloc(ts: int, ptr: int, size: int, pid: int = 0) -> dict:
    return dict(kind=K.MALLOC, ts=ts, pid=pid, tid=pid, ptr=ptr, size=size, api="malloc")


def free(ts: int, ptr: int, pid: int = 0) -> dict:
    return dict(kind=K.FREE, ts=ts, pid=pid, tid=pid, ptr=ptr, api="free")


def gpu_alloc(begin: int, end: int, ptr: int, size: int, mem: M = M.DEVICE, api: str = "hipMalloc",
              pid: int = 0) -> dict:
    kind = K.GPU_REGISTER if mem == M.REGISTERED else K.GPU_ALLOC
    return dict(kind=kind, begin=begin, ts=end, pid=pid, tid=pid, ptr=ptr, size=size, mem=mem, api=api)


def gpu_free(begin: int, end: int, ptr: int, size: int, mem: M = M.DEVICE, api: str = "hipFree",
             pid: int = 0) -> dict:
    kind = K.GPU_UNREGISTER if mem == M.REGISTERED else K.GPU_FREE
    return dict(kind=kind, begin=begin, ts=end, pid=pid, tid=pid, ptr=ptr, size=size, mem=mem, api=api)


def copy(begin: int, end: int, dst: int, src: int, nbytes: int, kind: int, *, stream: int = 0, device: int = 0,
         tid: int = 0, pid: int = 0, api: str = "hipMemcpyAsync", **shape) -> dict:
    return dict(kind=K.GPU_COPY, begin=begin, ts=end, pid=pid, tid=tid, ptr=dst, src=src, size=nbytes,
                copy_kind=kind, stream=stream, device=device, api=api, **shape)


def memset(begin: int, end: int, dst: int, nbytes: int, pid: int = 0) -> dict:
    return dict(kind=K.GPU_SET, begin=begin, ts=end, pid=pid, tid=pid, ptr=dst, size=nbytes, api="hipMemsetAsync")


def _in_order(rows: list[dict], devices: list[dict] | None = None) -> Case:
    return sorted(rows, key=lambda r: r["ts"]), devices or []


def free_at_copy_start() -> Case:
    """A free starting exactly when a copy starts: the block no longer holds the copy's bytes, so the source is
    untracked and the mirror outlives the free (mirrors.sql: live at the copy's start is end > start)."""
    return _in_order([malloc(10, HOST, 32), gpu_alloc(10, 20, DEV, 32),
                      free(30, HOST), copy(30, 40, DEV, HOST, 32, 1)])


LOGS: dict[str, Callable[[], Case]] = {f.__name__: f for f in (free_at_copy_start,)}
