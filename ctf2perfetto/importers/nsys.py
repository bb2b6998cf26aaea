"""Nsight Systems SQLite export (`nsys export --type sqlite`, or the .sqlite `nsys stats` leaves) -> memq.

Read: `CUPTI_ACTIVITY_KIND_MEMCPY` (start, end, bytes, copyKind, srcKind, dstKind, deviceId, streamId,
globalPid, correlationId) and `CUPTI_ACTIVITY_KIND_MEMSET` (start, end, bytes, deviceId, streamId); names of
the memory kinds from `ENUM_CUDA_MEM_KIND` (schema 3.x), or nsys's own numbering where the export has no ENUM
tables (schema 2.x: 0 pageable, 1 pinned, 2 device, 3 array, 4 managed, 5 device static, 6 managed static);
times are ns from the session start, placed on the wall clock by `TARGET_INFO_SESSION_START_TIME.utcEpochNs`.
Copy kinds: HtoD / DtoH / DtoD / HtoH / PtoP as named; array copies as the side they touch (HtoA as HtoD,
AtoH as DtoH, the others DtoD); unified-memory migrations (copyKind 11-13) as their direction, named
"(Unified ... migration)".

What it cannot tell: CUPTI records no source or destination address for a copy, so the address-based figures
(duplicated, the redundant classes, mirrors, leaks) do not apply and memq says so, as for a PyTorch-profiler
trace; `CUDA_GPU_MEMORY_USAGE_EVENTS` (allocations, with `--cuda-memory-usage=true`) is counted, not tied to
copies. Whether host memory is pageable is known per copy (srcKind / dstKind), so the staged figure applies.
"""
from __future__ import annotations

from decimal import Decimal
from pathlib import Path

from ctf2perfetto.errors import MemqError
from ctf2perfetto.importers.foreign import Imported, columns, open_sqlite, query, tables

WHAT = "an Nsight Systems SQLite export"
MEM_KINDS = {0: "Pageable", 1: "Pinned", 2: "Device", 3: "Array", 4: "Managed", 5: "Device Static",
             6: "Managed Static", 7: "Unknown"}
COPY_KINDS = {1: "HtoD", 2: "DtoH", 3: "HtoD", 4: "DtoH", 5: "DtoD", 6: "DtoD", 7: "DtoD", 8: "DtoD", 9: "HtoH",
              10: "PtoP", 11: "HtoD", 12: "DtoH", 13: "DtoD"}
UNIFIED = {11: "Unified Host-to-Device migration", 12: "Unified Device-to-Host migration",
           13: "Unified Device-to-Device migration"}


def is_nsys(names: set[str]) -> bool:
    return "StringIds" in names and ("TARGET_INFO_SESSION_START_TIME" in names or "EXPORT_META_DATA" in names
                                     or "META_DATA_EXPORT" in names)


def _us(ns: int) -> Decimal:
    return Decimal(int(ns)) / 1000


def read(path: Path) -> Imported:
    path = Path(path)
    db = open_sqlite(path, WHAT)
    try:
        names = set(tables(db))
        if not is_nsys(names):
            raise MemqError(f"{path}: not {WHAT}: no StringIds / TARGET_INFO_SESSION_START_TIME tables")
        return _read(db, path, names)
    finally:
        db.close()


def _read(db, path: Path, names: set[str]) -> Imported:
    out = Imported("nsys", path, None, has_addresses=False)
    for table in ("META_DATA_EXPORT", "EXPORT_META_DATA"):
        if table in names:
            meta = dict(query(db, path, f"SELECT name, value FROM {table}"))
            out.version = str(meta.get("EXPORT_SCHEMA_VERSION", ""))
    base_ns = 0
    if "TARGET_INFO_SESSION_START_TIME" in names:
        cols = columns(db, "TARGET_INFO_SESSION_START_TIME")
        if "utcEpochNs" in cols:
            row = query(db, path, "SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME LIMIT 1")
            base_ns = int(row[0][0]) if row and row[0][0] is not None else 0
    mem_kinds = dict(MEM_KINDS)
    if "ENUM_CUDA_MEM_KIND" in names:
        enum_cols = columns(db, "ENUM_CUDA_MEM_KIND")
        label = "label" if "label" in enum_cols else enum_cols[-1]
        mem_kinds.update({int(i): str(text) for i, text in query(db, path, f"SELECT id, {label} FROM "
                                                                             "ENUM_CUDA_MEM_KIND")})
    processes: dict[int, str] = {}
    if "PROCESSES" in names and {"pid", "name"} <= set(columns(db, "PROCESSES")):
        for pid, name in query(db, path, "SELECT pid, name FROM PROCESSES"):
            if pid is not None:
                processes[int(pid)] = str(name or "")
    events: list[dict] = []
    meta: list[dict] = []
    devices: set[int] = set()
    skipped = 0
    if "CUPTI_ACTIVITY_KIND_MEMCPY" in names:
        cols = set(columns(db, "CUPTI_ACTIVITY_KIND_MEMCPY"))
        src_kind = "srcKind" if "srcKind" in cols else "NULL"
        dst_kind = "dstKind" if "dstKind" in cols else "NULL"
        for start, end, device, stream, pid, corr, nbytes, kind, sk, dk in query(
                db, path, f'SELECT start, "end", deviceId, streamId, globalPid, correlationId, bytes, copyKind, '
                          f'{src_kind}, {dst_kind} FROM CUPTI_ACTIVITY_KIND_MEMCPY ORDER BY start'):
            direction = COPY_KINDS.get(kind)
            if direction is None or start is None or end is None or end < start:
                skipped += 1
                continue
            if kind in UNIFIED:
                label = UNIFIED[kind]
            else:
                label = f"{mem_kinds.get(sk, 'Unknown')} -> {mem_kinds.get(dk, 'Unknown')}"
            devices.add(int(device))
            events.append({"ph": "X", "cat": "gpu_memcpy", "name": f"Memcpy {direction} ({label})",
                           "pid": int(device), "tid": int(stream), "ts": _us(start), "dur": _us(end - start),
                           "args": {"device": int(device), "stream": int(stream), "correlation": int(corr or 0),
                                    "bytes": int(nbytes), "process": _pid(pid), "copy kind": int(kind)}})
            out.count_copy(direction, int(nbytes), int(end - start))
    if "CUPTI_ACTIVITY_KIND_MEMSET" in names:
        for start, end, device, stream, pid, corr, nbytes in query(
                db, path, 'SELECT start, "end", deviceId, streamId, globalPid, correlationId, bytes '
                          'FROM CUPTI_ACTIVITY_KIND_MEMSET ORDER BY start'):
            if start is None or end is None or end < start:
                skipped += 1
                continue
            devices.add(int(device))
            events.append({"ph": "X", "cat": "gpu_memset", "name": "Memset (Device)", "pid": int(device),
                           "tid": int(stream), "ts": _us(start), "dur": _us(end - start),
                           "args": {"device": int(device), "stream": int(stream), "correlation": int(corr or 0),
                                    "bytes": int(nbytes), "process": _pid(pid)}})
            out.count_copy("memset", int(nbytes), int(end - start))
    for device in sorted(devices):
        meta.append({"ph": "M", "name": "process_labels", "pid": device, "tid": 0,
                     "args": {"labels": f"GPU {device}"}})
    if skipped:
        out.info.skipped["copies of an unknown kind or without a time"] = skipped
        out.warnings.append(f"{path.name}: {skipped:,} copies or memsets of an unknown kind or without a valid time "
                            "left out")
    if "CUDA_GPU_MEMORY_USAGE_EVENTS" in names:
        count = query(db, path, "SELECT count(*) FROM CUDA_GPU_MEMORY_USAGE_EVENTS")[0][0]
        if count:
            out.notes.append(f"{count:,} device memory events (CUDA_GPU_MEMORY_USAGE_EVENTS) not tied to copies: "
                             "nsys records no copy addresses")
    issued = {e["args"]["process"] for e in events}
    out.info.processes = {pid: name for pid, name in processes.items() if pid in issued}
    out.timeline = {"traceEvents": meta + events, "baseTimeNanoseconds": base_ns}
    return out


def _pid(global_pid) -> int:
    """The OS pid inside nsys's serialized globalPid (bits 24-47)."""
    return (int(global_pid) >> 24) & 0xFFFFFF if global_pid else 0
