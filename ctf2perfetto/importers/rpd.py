"""RPD (rocmProfileData `rpd_tracer`) SQLite -> memq events.

Read: `rocpd_api` (pid, tid, start, end, apiName, args) for the allocation calls whose arguments rpd_tracer
writes as text (`hipMalloc` / `cudaMalloc`: `ptr=0x.. | size=0x..`, `hipFree` / `cudaFree`: `ptr=0x..`, JSON
objects with the same keys from newer backends); `rocpd_copyapi` (stream, size, width, height, kind, dst, src,
dstDevice, srcDevice) for every copy call; `rocpd_op` + `rocpd_api_ops` for the GPU's own time of each copy
and for copies that exist only as GPU ops (a graph launch's copy nodes: no copy API row, so no size and no
addresses).

rpd_tracer's quirks, corrected:
* its insert statement binds the destination to column `src` and the source to column `dst` (and the
  devices likewise). Whether a file has the swap is decided from the file itself: a host-to-device copy's
  destination lies in a device allocation (`hipMalloc`), a device-to-host copy's source does; each copy
  whose columns can be placed votes (the first 20,000). Without allocations to decide by, rpd_tracer's own binding is taken
  and a warning says the sides were not confirmed.
* `size` is stored as a 32-bit int, and as '' (text) when it was not positive as one: copies of 2 GiB or
  more. Such a copy's size is bounded by the allocation holding its device side (its bytes from the copy's
  address to the allocation's end) and counted with that bound, said in a warning; with no allocation to
  bound it, 0 bytes and a warning. 2D copies store '' as size and width x height as their extent.
* `hipMalloc`'s size is printed as 32 bits (`size=0x%x` of a uint32): allocations of 4 GiB or more are
  recorded modulo 4 GiB (not correctable from the file; said in docs/IMPORTERS.md).
Times: a copy's slice is its GPU op (`rocpd_op` start/end) when it has one, else its API call.
"""
from __future__ import annotations

import bisect
import json
import re
from pathlib import Path

from ctf2perfetto.events import EventKind, MemKind
from ctf2perfetto.importers.foreign import (DIRECTIONS, DTOD, DTOH, HTOD, HTOH, Imported, Rows, address, columns, open_sqlite,
                      query, tables)

WHAT = "an RPD (rocmProfileData) trace"
SIGNATURE = ("rocpd_api", "rocpd_op", "rocpd_copyapi", "rocpd_api_ops", "rocpd_string")

ALLOC_KINDS = {
    "hipMalloc": MemKind.DEVICE, "hipExtMallocWithFlags": MemKind.DEVICE, "hipMallocAsync": MemKind.DEVICE,
    "hipMallocFromPoolAsync": MemKind.DEVICE, "hipMallocManaged": MemKind.MANAGED,
    "hipHostMalloc": MemKind.PINNED, "hipMallocHost": MemKind.PINNED, "hipHostAlloc": MemKind.PINNED,
    "cudaMalloc": MemKind.DEVICE, "cudaMallocAsync": MemKind.DEVICE, "cudaMallocManaged": MemKind.MANAGED,
    "cudaMallocHost": MemKind.PINNED, "cudaHostAlloc": MemKind.PINNED,
}
FREE_KINDS = {
    "hipFree": MemKind.DEVICE, "hipFreeAsync": MemKind.DEVICE, "hipHostFree": MemKind.PINNED,
    "hipFreeHost": MemKind.PINNED, "cudaFree": MemKind.DEVICE, "cudaFreeAsync": MemKind.DEVICE,
    "cudaFreeHost": MemKind.PINNED,
}
OP_KINDS = {"CopyHostToDevice": HTOD, "CopyDeviceToHost": DTOH, "CopyDeviceToDevice": DTOD,
            "CopyHostToHost": HTOH}
VOTERS = 20_000  # copies that vote on the swap: enough to tell, and a bounded cost on files of millions
_ARG = re.compile(r"(\w+)\s*[=:]\s*\"?((?:0x)?[0-9a-fA-F]+|\(nil\))")


def is_rpd(names: set[str]) -> bool:
    return all(t in names for t in SIGNATURE) and not any(n.startswith("rocpd_memory_copy") for n in names)


def parse_args(text: str) -> dict[str, int]:
    """`ptr=0x7f.. | size=0x77400000` (roctracer/CUPTI backends) or a JSON object -> {'ptr': .., 'size': ..}."""
    text = text or ""
    if text.lstrip().startswith("{"):
        try:
            doc = json.loads(text)
        except ValueError:
            doc = None
        if isinstance(doc, dict):
            out = {}
            for key, value in doc.items():
                number = address(value)
                if number is not None:
                    out[str(key)] = number
            return out
    out = {}
    for key, value in _ARG.findall(text):
        number = address(value) if value != "(nil)" else 0
        if number is not None:
            out[key] = number
    return out


class _Ranges:
    """Address ranges of allocations (any time in the trace): which one holds an address."""

    def __init__(self, ranges: list[tuple[int, int]]) -> None:
        self.ranges = sorted(ranges)
        self.starts = [start for start, _ in self.ranges]

    def holder(self, addr: int) -> tuple[int, int] | None:
        i = bisect.bisect_right(self.starts, addr) - 1
        if i >= 0:
            start, size = self.ranges[i]
            if addr < start + max(size, 1):
                return start, size
        return None


def read(path: Path) -> Imported:
    path = Path(path)
    db = open_sqlite(path, WHAT)
    try:
        names = set(tables(db))
        missing = [t for t in SIGNATURE if t not in names]
        if missing:
            raise_missing(path, missing)
        return _read(db, path)
    finally:
        db.close()


def raise_missing(path: Path, missing: list[str]) -> None:
    from ctf2perfetto.errors import MemqError

    raise MemqError(f"{path}: not {WHAT}: no table {', '.join(missing)}")


def _read(db, path: Path) -> Imported:
    out = Imported("rpd", path, None)
    rows = Rows()
    strings = dict(query(db, path, "SELECT id, string FROM rocpd_string"))
    version = dict(query(db, path, "SELECT tag, value FROM rocpd_metadata")) if "rocpd_metadata" in tables(db) else {}
    skipped = 0

    # -- allocations and frees (API rows with their arguments) ------------------------------------------------
    wanted = [i for i, s in strings.items() if s in ALLOC_KINDS or s in FREE_KINDS]
    device_ranges: list[tuple[int, int]] = []
    host_ranges: list[tuple[int, int]] = []
    if wanted:
        marks = ",".join("?" * len(wanted))
        for api_id, pid, tid, start, end, name_id, args_id in query(
                db, path, f'SELECT id, pid, tid, start, "end", apiName_id, args_id FROM rocpd_api '
                          f'WHERE apiName_id IN ({marks}) ORDER BY id', tuple(wanted)):
            name = strings.get(name_id, "")
            args = parse_args(strings.get(args_id, ""))
            ptr = args.get("ptr")
            if name in ALLOC_KINDS:
                size = args.get("size")
                if not ptr or size is None:  # failed call, or a backend that wrote no arguments
                    skipped += 1
                    continue
                mem = ALLOC_KINDS[name]
                rows.add(EventKind.GPU_ALLOC, start, end, pid, tid, name, ptr=ptr, size=size, mem=int(mem))
                (host_ranges if mem == MemKind.PINNED else device_ranges).append((ptr, size))
            else:
                if ptr is None:
                    skipped += 1
                    continue
                if ptr == 0:  # hipFree(NULL): a no-op
                    continue
                rows.add(EventKind.GPU_FREE, start, end, pid, tid, name, ptr=ptr, mem=int(FREE_KINDS[name]))
    device = _Ranges(device_ranges)
    host = _Ranges(host_ranges)

    # -- copy calls, with their GPU ops ----------------------------------------------------------------------
    copy_cols = set(columns(db, "rocpd_copyapi"))
    width = "c.width" if "width" in copy_cols else "''"
    height = "c.height" if "height" in copy_cols else "''"
    # The copy calls, then their GPU ops apart (joined here: rocpd_api_ops has no index, and SQLite's plan for the
    # grouped three-way join took a minute per million rows).
    ops: dict[int, list[int]] = {}
    for api, start, end, gpu in query(db, path, 'SELECT ao.api_id, o.start, o."end", o.gpuId FROM rocpd_api_ops ao '
                                                "JOIN rocpd_op o ON o.id = ao.op_id"):
        found = ops.get(api)
        if found is None:
            ops[api] = [start, end, gpu]
        else:
            found[0], found[1], found[2] = min(found[0], start), max(found[1], end), min(found[2], gpu)
    calls = [(*row, *ops.get(row[0], (None, None, None))) for row in query(db, path, f"""
        SELECT a.id, a.pid, a.tid, a.start, a."end", a.apiName_id, c.stream, c.size, {width}, {height}, c.kind,
               c.dst, c.src, c.dstDevice, c.srcDevice
        FROM rocpd_copyapi c JOIN rocpd_api a ON a.id = c.api_ptr_id ORDER BY a.id""")]

    # The swap: each host<->device copy whose endpoints fall on either side of the known allocations votes.
    as_named = swapped = 0
    for call in calls[:VOTERS]:
        kind, col_dst, col_src = call[10], address(call[11]), address(call[12])
        if kind not in (HTOD, DTOH) or col_dst is None or col_src is None:
            continue
        dev_dst, dev_src = device.holder(col_dst) is not None, device.holder(col_src) is not None
        pin_dst, pin_src = host.holder(col_dst) is not None, host.holder(col_src) is not None
        device_side_dst = kind == HTOD  # the true destination is the device side for HtoD
        if (dev_dst and not dev_src) or (pin_src and not pin_dst):
            if device_side_dst:
                as_named += 1
            else:
                swapped += 1
        elif (dev_src and not dev_dst) or (pin_dst and not pin_src):
            if device_side_dst:
                swapped += 1
            else:
                as_named += 1
    if swapped > as_named:
        swap = True
        how = f"found by {swapped:,} of {swapped + as_named:,} host<->device copies against the allocations"
    elif as_named > swapped:
        swap = False
        how = f"columns as named, found by {as_named:,} of {swapped + as_named:,} copies against the allocations"
    else:
        swap = True
        how = "not confirmed"
        if calls:
            out.warnings.append(
                f"{path.name}: no allocation tells which of rocpd_copyapi's dst/src columns is the destination; "
                "read as rpd_tracer binds them (swapped: destination in `src`)")
    out.notes.append(f"rocpd_copyapi dst/src: {'swapped' if swap else 'as named'} ({how})")

    unsized = unbounded = 0
    streams: dict = {}
    peers = {n for n in strings.values() if n.startswith(("hipMemcpyPeer", "cudaMemcpyPeer"))}
    totals = {kind: [0, 0, 0] for kind in DIRECTIONS}

    def hexa(value):
        if type(value) is str and value[:2] == "0x":
            try:
                return int(value, 16)
            except ValueError:
                return None
        return address(value)
    for (api_id, pid, tid, start, end, name_id, stream, size, w, h, kind, col_dst, col_src, col_dst_dev,
         col_src_dev, op_start, op_end, gpu) in calls:
        dst, src = hexa(col_dst), hexa(col_src)
        dst_dev, src_dev = col_dst_dev, col_src_dev
        if swap:
            dst, src, dst_dev, src_dev = src, dst, src_dev, dst_dev
        dst, src = dst or 0, src or 0
        kind = kind if isinstance(kind, int) and kind in DIRECTIONS else 4
        nbytes = size if type(size) is int else (address(size) if not isinstance(size, str) or size.strip() else None)
        if not nbytes:
            w, h = address(w), address(h)
            if w and h:
                nbytes = w * h
            else:  # '' : 2 GiB or more (rpd_tracer's 32-bit int), bounded by the device side's allocation
                unsized += 1
                side = dst if kind in (HTOD, DTOD) else src
                holder = device.holder(side) or host.holder(side)
                if holder is None and kind == DTOH:
                    holder = device.holder(src)
                if holder is not None:
                    nbytes = holder[0] + holder[1] - side
                else:
                    unbounded += 1
                    nbytes = 0
        begin, finish = (op_start, op_end) if op_start is not None else (start, end)
        name = strings.get(name_id, "hipMemcpy")
        stream_id = streams.get(stream)
        if stream_id is None:
            stream_id = streams[stream] = address(stream) or 0
        if name in peers:
            rows.add(EventKind.GPU_COPY, begin, finish, pid, tid, name, copy_kind=kind, ptr=dst, src=src, size=nbytes,
                     stream=stream_id, device=int(gpu if gpu is not None else (dst_dev or 0)), aux=int(src_dev or 0))
        else:
            rows.add(EventKind.GPU_COPY, begin, finish, pid, tid, name, copy_kind=kind, ptr=dst, src=src, size=nbytes,
                     stream=stream_id, device=int(gpu if gpu is not None else (dst_dev or 0)))
        total = totals[kind]
        total[0] += 1
        total[1] += nbytes
        total[2] += finish - begin
    for kind, (n, nbytes, dur) in totals.items():
        if n:
            row = out.copies.setdefault(DIRECTIONS[kind], [0, 0, 0])
            row[0] += n
            row[1] += nbytes
            row[2] += dur
    if unsized:
        out.warnings.append(
            f"{path.name}: {unsized:,} copies of 2 GiB or more, whose size rpd_tracer stores as '': counted with "
            f"the bytes from their address to the end of the allocation holding it (an upper bound)"
            + (f"; {unbounded:,} in no traced allocation counted as 0 bytes" if unbounded else ""))

    # -- copies that exist only as GPU ops (no copy API row: graph launches, ...) --------------------------------
    op_types = {i: OP_KINDS[s] for i, s in strings.items() if s in OP_KINDS}
    if op_types:
        marks = ",".join("?" * len(op_types))
        # (ops linked to a copy call are that call's; a set here, not a correlated subquery: quadratic in SQLite)
        linked = {r[0] for r in query(db, path, "SELECT ao.op_id FROM rocpd_api_ops ao JOIN rocpd_copyapi c "
                                                "ON c.api_ptr_id = ao.api_id")}
        op_only = [r for r in query(db, path, f"""
            SELECT o.id, o.start, o."end", o.gpuId, o.queueId, o.opType_id, a.pid, a.tid, a.apiName_id
            FROM rocpd_op o
            LEFT JOIN (SELECT op_id, MIN(api_id) AS api_id FROM rocpd_api_ops GROUP BY op_id) ao ON ao.op_id = o.id
            LEFT JOIN rocpd_api a ON a.id = ao.api_id
            WHERE o.opType_id IN ({marks}) ORDER BY o.id""", tuple(op_types)) if r[0] not in linked]
        pids = {r[0] for r in query(db, path, "SELECT DISTINCT pid FROM rocpd_api LIMIT 2")}
        only_pid = next(iter(pids)) if len(pids) == 1 else 0
        for op_id, start, end, gpu, queue, type_id, pid, tid, name_id in op_only:
            kind = op_types[type_id]
            name = strings.get(name_id, "") if name_id is not None else ""
            rows.add(EventKind.GPU_COPY, start, end, pid if pid is not None else only_pid,
                     tid if tid is not None else (pid or only_pid), name or "gpu copy op", copy_kind=kind,
                     stream=queue or 0, device=int(gpu or 0))
            out.count_copy(DIRECTIONS[kind], 0, end - start)
        if op_only:
            out.warnings.append(
                f"{path.name}: {len(op_only):,} copies exist only as GPU ops (rocpd_op, no copy API row: e.g. "
                "graph launches): counted with their time, without size or addresses")
    if skipped:
        out.info.skipped["allocation calls without arguments"] = skipped
    out.batch = rows.batch()
    out.version = version.get("schema_version", "")
    return out

