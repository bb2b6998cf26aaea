"""The archives of scripts/gpu-check.sh and scripts/gpu-reach.sh: unpacked, their logs and traces read.

What tools.gpu_check and tools.gpu_reach both read: a Check (one line of the report), the call logs the
test programs write, and the trace rows memq decoded from the recording.
"""
from __future__ import annotations

import json
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ctf2perfetto.errors import MemqError, UsageError
from ctf2perfetto.events import EventKind, MemKind


# Log event (tests/fakes/worklog.h) -> EventKind, and log field -> EventBatch column
# (docs/EVENTS.md, "Mapping to ctf2perfetto.events columns").
LOG_KINDS = {"alloc": EventKind.GPU_ALLOC, "register": EventKind.GPU_REGISTER, "free": EventKind.GPU_FREE,
             "unregister": EventKind.GPU_UNREGISTER, "copy": EventKind.GPU_COPY, "set": EventKind.GPU_SET,
             "prefetch": EventKind.GPU_PREFETCH, "advise": EventKind.GPU_ADVISE, "sync": EventKind.GPU_SYNC,
             "set_device": EventKind.GPU_SET_DEVICE}
_ALLOC_FIELDS = {"ptr": "ptr", "size": "size", "mem_kind": "mem", "stream": "stream", "flags": "flags",
                 "width": "aux", "height": "aux2"}
_FREE_FIELDS = {"ptr": "ptr", "size": "size", "mem_kind": "mem", "stream": "stream"}
LOG_FIELDS = {
    "alloc": _ALLOC_FIELDS, "register": _ALLOC_FIELDS, "free": _FREE_FIELDS, "unregister": _FREE_FIELDS,
    "copy": {"dst": "ptr", "src": "src", "bytes": "size", "kind": "copy_kind", "stream": "stream",
             "height": "aux2", "dpitch": "dpitch", "spitch": "spitch"},  # aux: width or src_device, below
    "set": {"dst": "ptr", "value": "aux", "bytes": "size", "stream": "stream"},
    "prefetch": {"ptr": "ptr", "bytes": "size", "dst_device": "aux", "stream": "stream"},
    "advise": {"ptr": "ptr", "bytes": "size", "advice": "aux", "target_device": "aux2"},
    "sync": {"stream": "stream"},
    "set_device": {"new_device": "aux"},
}
UNSIGNED = {"ptr", "src", "size", "stream", "flags", "aux", "aux2", "dpitch", "spitch"}
DIRECTIONS = ("HtoH", "HtoD", "DtoH", "DtoD")
GPU_KINDS = tuple(LOG_KINDS.values())


@dataclass
class Check:
    """One line of the report: ok True (PASS), False (FAIL) or None (goal missed / not measured)."""

    name: str
    ok: bool | None
    detail: str
    goal: bool = False

    def line(self) -> str:
        if self.goal:
            state = "GOAL met" if self.ok else ("GOAL missed" if self.ok is False else "GOAL unmeasured")
        else:
            state = "PASS" if self.ok else "FAIL"
        return f"{state:<16}{self.name}: {self.detail}"


# --------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------

# The two archives: scripts/gpu-check.sh's and scripts/gpu-reach.sh's (top directory, the file that marks it).
ARCHIVES = {"gpu-check": "info.json", "gpu-reach": "status.txt"}


def unpack(path: Path, into: Path) -> Path:
    """The archive's gpu-check/ or gpu-reach/ directory (a directory is taken as already unpacked)."""
    if path.is_dir():
        base = path
    else:
        if not path.is_file():
            raise UsageError(f"{path}: archive not found")
        try:
            with tarfile.open(path) as tar:
                tar.extractall(into, filter="data")
        except (tarfile.TarError, OSError, EOFError) as exc:
            raise MemqError(f"{path}: not a readable gpu-check archive: {exc}") from None
        base = into
    for root in [base / top for top in ARCHIVES] + [base]:
        if any((root / marker).is_file() for marker in ARCHIVES.values()):
            return root
    raise MemqError(f"{path}: no gpu-check/info.json or gpu-reach/status.txt: not an archive of "
                    "scripts/gpu-check.sh or scripts/gpu-reach.sh")


def _json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def read_log(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@dataclass
class TraceRows:
    """The GPU rows of one recorded trace, as a dict of numpy columns, plus its loss counts."""

    columns: dict[str, np.ndarray]
    api_names: list[str]
    lost_events: int
    lost_packets: int
    record: dict | None
    devices: list[dict] = field(default_factory=list)  # what the preload library's device query found
    binaries: list[dict] = field(default_factory=list)  # loaded libraries (pid, baddr, memsz, path)

    def __len__(self) -> int:
        return len(self.columns["kind"])

    def api(self, i: int) -> str:
        return self.api_names[int(self.columns["api"][i])]

    def of_pid(self, pid: int) -> "TraceRows":
        keep = self.columns["pid"] == pid
        return TraceRows({k: v[keep] for k, v in self.columns.items()}, self.api_names, self.lost_events,
                         self.lost_packets, self.record, [d for d in self.devices if d.get("pid") == pid],
                         [b for b in self.binaries if b.get("pid") == pid])

    def library_of(self, i: int) -> str:
        """File name of the library row i was called from (its `ip`), or "?"."""
        ip, pid = int(self.columns["ip"][i]), int(self.columns["pid"][i])
        for b in self.binaries:
            if b.get("pid") == pid and b["baddr"] <= ip < b["baddr"] + b["memsz"]:
                return Path(b["path"]).name
        return "?"


def read_trace(trace_dir: Path) -> TraceRows:
    """Decode every stream under trace_dir; keep the memq GPU rows (in time order)."""
    from ctf2perfetto.ctf.decode import decode

    parts: list[dict[str, np.ndarray]] = []
    with decode(trace_dir) as decoding:
        for batch in decoding:
            keep = np.isin(batch["kind"], np.array(GPU_KINDS, dtype=np.uint8))
            if keep.any():
                parts.append({k: v[keep].copy() for k, v in batch.columns.items()})
        info, names = decoding.info, decoding.api_names
    columns = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]} if parts else {
        "kind": np.zeros(0, np.uint8), "pid": np.zeros(0, np.int64), "api": np.zeros(0, np.uint16)}
    return TraceRows(columns, list(names), info.lost_events, info.lost_packets, info.record, list(info.devices),
                     list(info.binaries))


# --------------------------------------------------------------------------
# Checks
# --------------------------------------------------------------------------

def _copy_directions(rows: TraceRows) -> list[tuple[str, int]]:
    """(direction, bytes) of each successful copy; kind Default resolved by the recorded allocations."""
    c = rows.columns
    device_ranges: list[tuple[int, int]] = []
    out = []
    for i in range(len(rows)):
        kind = int(c["kind"][i])
        if kind == EventKind.GPU_ALLOC and int(c["result"][i]) == 0 and int(c["mem"][i]) in (
                MemKind.DEVICE, MemKind.MANAGED):
            device_ranges.append((int(c["ptr"][i]), int(c["ptr"][i]) + int(c["size"][i])))
        if kind != EventKind.GPU_COPY or int(c["result"][i]) != 0:
            continue
        ck = int(c["copy_kind"][i])
        if 0 <= ck <= 3:
            direction = DIRECTIONS[ck]
        else:  # Default (4) or DeviceToDeviceNoCU (1024): by where the pointers live
            on_dev = [any(lo <= int(c[col][i]) < hi for lo, hi in device_ranges) for col in ("src", "ptr")]
            direction = ("D" if on_dev[0] else "H") + "to" + ("D" if on_dev[1] else "H")
        out.append((direction, int(c["size"][i])))
    return out


def check_lost(traces: dict[str, TraceRows]) -> Check:
    parts, ok = [], True
    for name, rows in traces.items():
        rec = rows.record or {}
        counts = (rec.get("discarded_events", 0), rec.get("lost_packets", 0), rows.lost_events, rows.lost_packets)
        ok &= not any(counts)
        parts.append(f"{name}: {counts[0]} discarded, {counts[1]} packets (record), "
                     f"{counts[2]}/{counts[3]} (trace)")
    return Check("lost events", ok, "; ".join(parts))
