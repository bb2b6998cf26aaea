"""Event rows for hand-written logs: the dicts `EventBatch.from_rows` takes, for one process.

    log = Rows(pid=77)                      # HIP names; Rows(pid, "cuda") for CUDA's
    rows = [log.malloc(1000, HOST, 64), log.gpu_alloc(1100, DEV, 64), log.copy(2000, 2100, DEV, HOST, 64, 1)]

Times are ns; GPU calls last `dur` (50 ns) from `begin` unless told; the thread is the process's main thread
unless `tid` is given.
"""
from __future__ import annotations

from dataclasses import dataclass

from ctf2perfetto.events import EventKind as K, MemKind as M

# Function names per runtime: what allocates each memory kind, what frees it, copies and memsets.
NAMES = {
    "hip": {M.DEVICE: "hipMalloc", M.MANAGED: "hipMallocManaged", M.PINNED: "hipHostMalloc",
            M.REGISTERED: "hipHostRegister", "free": "hipFree", "free_pinned": "hipHostFree",
            "unregister": "hipHostUnregister", "copy": "hipMemcpyAsync", "copy_2d": "hipMemcpy2DAsync",
            "set": "hipMemsetAsync", "sync": "hipStreamSynchronize"},
    "cuda": {M.DEVICE: "cudaMalloc", M.MANAGED: "cudaMallocManaged", M.PINNED: "cudaMallocHost",
             M.REGISTERED: "cudaHostRegister", "free": "cudaFree", "free_pinned": "cudaFreeHost",
             "unregister": "cudaHostUnregister", "copy": "cudaMemcpyAsync", "copy_2d": "cudaMemcpy2DAsync",
             "set": "cudaMemsetAsync", "sync": "cudaStreamSynchronize"},
}


@dataclass(frozen=True)
class Rows:
    """Row builders for one process of a log."""

    pid: int = 0
    runtime: str = "hip"

    def _names(self) -> dict:
        return NAMES[self.runtime]

    def malloc(self, ts: int, ptr: int, size: int, kind: K = K.MALLOC) -> dict:
        return dict(kind=kind, ts=ts, pid=self.pid, tid=self.pid, ptr=ptr, size=size, api=kind.name.lower())

    def free(self, ts: int, ptr: int) -> dict:
        return dict(kind=K.FREE, ts=ts, pid=self.pid, tid=self.pid, ptr=ptr, api="free")

    def realloc(self, ts: int, ptr: int, old: int, size: int) -> dict:
        return dict(kind=K.REALLOC, ts=ts, pid=self.pid, tid=self.pid, ptr=ptr, src=old, size=size, api="realloc")

    def gpu_alloc(self, begin: int, ptr: int, size: int, mem: M = M.DEVICE, dur: int = 50, api: str = "",
                  result: int = 0) -> dict:
        """An allocation of `mem` (REGISTERED: a host register call)."""
        kind = K.GPU_REGISTER if mem == M.REGISTERED else K.GPU_ALLOC
        return dict(kind=kind, begin=begin, ts=begin + dur, pid=self.pid, tid=self.pid, ptr=ptr, size=size, mem=mem,
                    api=api or self._names()[mem], result=result)

    def gpu_free(self, begin: int, ptr: int, size: int, mem: M = M.DEVICE, dur: int = 50) -> dict:
        """The runtime's free of `mem` (pinned: hipHostFree / cudaFreeHost; REGISTERED: unregister)."""
        kind = K.GPU_UNREGISTER if mem == M.REGISTERED else K.GPU_FREE
        api = {M.REGISTERED: "unregister", M.PINNED: "free_pinned"}.get(mem, "free")
        return dict(kind=kind, begin=begin, ts=begin + dur, pid=self.pid, tid=self.pid, ptr=ptr, size=size, mem=mem,
                    api=self._names()[api])

    def copy(self, begin: int, end: int, dst: int, src: int, nbytes: int, kind: int, *, stream: int = 0,
             tid: int | None = None, device: int = 0, result: int = 0) -> dict:
        return dict(kind=K.GPU_COPY, begin=begin, ts=end, pid=self.pid, tid=self.pid if tid is None else tid,
                    ptr=dst, src=src, size=nbytes, copy_kind=kind, stream=stream, device=device,
                    api=self._names()["copy"], result=result)

    def copy_2d(self, begin: int, end: int, dst: int, src: int, width: int, height: int, dpitch: int, spitch: int,
                kind: int, **common) -> dict:
        """`height` rows of `width` bytes, `dpitch` apart in the destination, `spitch` in the source."""
        row = self.copy(begin, end, dst, src, width * height, kind, **common)
        return dict(row, aux=width, aux2=height, dpitch=dpitch, spitch=spitch, api=self._names()["copy_2d"])

    def fingerprinted(self, row: dict, seq: int, *, src: int | None = None, before: int | None = None,
                      after: int | None = None, later: bool = False) -> dict:
        """A copy row with content fingerprints (docs/EVENTS.md, memq:copy): `seq` is its number in the process;
        `later`: its after-fingerprint comes in a `copy_done` row with that seq."""
        bits = (src is not None) | (before is not None) << 1 | (after is not None) << 2 | later << 3
        return dict(row, seq=seq, content=bits, content_mode=1, src_hash=src or 0, dst_hash_before=before or 0,
                    dst_hash_after=after or 0)

    def copy_done(self, ts: int, seq: int, dst_hash: int, *, stream: int = 0, device: int = 0) -> dict:
        """The after-fingerprint of copy `seq`, taken at a completion point (a stream synchronisation)."""
        return dict(kind=K.GPU_COPY_DONE, begin=ts, ts=ts, pid=self.pid, tid=self.pid, seq=seq, dst_hash_after=dst_hash,
                    stream=stream, device=device, api=self._names()["sync"])

    def memset(self, begin: int, end: int, dst: int, nbytes: int, *, stream: int = 0, device: int = 0) -> dict:
        return dict(kind=K.GPU_SET, begin=begin, ts=end, pid=self.pid, tid=self.pid, ptr=dst, size=nbytes,
                    stream=stream, device=device, api=self._names()["set"])


def in_time_order(rows: list[dict]) -> list[dict]:
    """Rows by end time; calls ending together keep the order they are listed in."""
    return sorted(rows, key=lambda r: r["ts"])


def unified(pid: int, device: int = 0, runtime: str = "hip") -> dict:
    """The device description of an APU (host and device share one memory pool)."""
    return dict(pid=pid, device=device, runtime=runtime, name="APU", integrated=True, unified_memory=True)


def from_batches(batches: list, api_names: list[str]) -> list[dict]:
    """The rows of decoded EventBatches as dicts (every column; `api` as its name): a recording as a log."""
    rows = []
    for batch in batches:
        columns = {name: col.tolist() for name, col in batch.columns.items()}
        for i in range(len(batch)):
            row = {name: col[i] for name, col in columns.items()}
            row["api"] = api_names[row["api"]] if row["api"] < len(api_names) else ""
            rows.append(row)
    return rows
