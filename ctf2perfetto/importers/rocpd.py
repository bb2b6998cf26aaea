"""rocpd (rocprofv3 / rocprofiler-sdk, rocprof-sys) SQLite -> memq events.

The database holds one set of tables per writer, suffixed `_<uuid>` (`rocpd_memory_copy_<uuid>`, ...), with
unsuffixed views over them; several sets (merged runs) are read one after the other. Read:
* `rocpd_memory_copy_*` (`--memory-copy-trace`): start, end, dst/src address, size, dst/src agent (whose
  `rocpd_info_agent` type, CPU or GPU, gives the direction), stream, the copy's name
  (`MEMORY_COPY_HOST_TO_DEVICE`, ..., the direction when an agent is missing);
* `rocpd_memory_allocate_*` (`--memory-allocation-trace`): ALLOC / FREE rows of level REAL with address and
  size; the allocating agent says device memory (GPU) or pinned host memory (CPU). VIRTUAL reservations and
  SCRATCH memory are not allocations a copy lands in: counted as skipped;
* without copy records, the HIP calls' arguments: `rocpd_region_*` (the API call: name, start, end, pid, tid)
  with `rocpd_arg_*` (`dst`, `src`, `sizeBytes`, `kind`; memsets `dst`, `value`, `sizeBytes`), so a run recorded
  with `--hip-runtime-trace` alone still has its copies with addresses (the call's time, not the GPU's).
pid and tid are ids into `rocpd_info_process` / `rocpd_info_thread`, resolved to the OS pid / tid.
What rocpd cannot tell: which hipMalloc an address came from when allocations were not traced (`hipMalloc`'s
`ptr` argument is the `void**`, not the result), host heap blocks (pageable memory is "untracked").
"""
from __future__ import annotations

import re
from pathlib import Path

from ctf2perfetto.errors import MemqError
from ctf2perfetto.events import EventKind, MemKind
from ctf2perfetto.importers.foreign import (DIRECTIONS, DTOD, DTOH, HTOD, HTOH, Imported, Rows, address, columns, kind_of_name,
                      open_sqlite, query, tables)

WHAT = "a rocpd (rocprofv3) database"
COPY_NAMES = {"HOST_TO_DEVICE": HTOD, "DEVICE_TO_HOST": DTOH, "DEVICE_TO_DEVICE": DTOD, "HOST_TO_HOST": HTOH}
_COPY_CALL = re.compile(r"^(hip|cuda)Memcpy(Async|WithStream|HtoD|DtoH|DtoD|HtoDAsync|DtoHAsync|DtoDAsync|Peer|"
                        r"PeerAsync)?$")
_SET_CALL = re.compile(r"^(hip|cuda)Memset(Async|D8|D16|D32|D8Async|D16Async|D32Async)?$")
_FIXED_KIND = {"HtoD": HTOD, "DtoH": DTOH, "DtoD": DTOD, "Peer": DTOD}


def is_rocpd(names: set[str]) -> bool:
    return any(n.startswith("rocpd_info_process") for n in names) and any(
        n.startswith(("rocpd_memory_copy", "rocpd_region", "rocpd_string")) for n in names)


def _suffixes(names: set[str]) -> list[str]:
    """The `_<uuid>` of each set of tables (the unsuffixed names are views over one of them)."""
    found = sorted(n[len("rocpd_info_process"):] for n in names if n.startswith("rocpd_info_process"))
    return [s for s in found if s] or [""]


def read(path: Path) -> Imported:
    path = Path(path)
    db = open_sqlite(path, WHAT)
    try:
        kinds = tables(db)
        names = set(kinds)
        if not is_rocpd(names):
            raise MemqError(f"{path}: not {WHAT}: no rocpd_info_process / rocpd_memory_copy tables")
        out = Imported("rocpd", path, None)
        rows = Rows()
        for suffix in _suffixes(names):
            _read_set(db, path, names, suffix, rows, out)
        meta = f"rocpd_metadata{_suffixes(names)[0]}"
        if meta in names:
            values = dict(query(db, path, f'SELECT tag, value FROM "{meta}"'))
            out.version = str(values.get("schema_version", ""))
        out.batch = rows.batch()
        return out
    finally:
        db.close()


def _table(names: set[str], base: str, suffix: str) -> str | None:
    name = base + suffix
    return name if name in names else None


def _read_set(db, path: Path, names: set[str], suffix: str, rows: Rows, out: Imported) -> None:
    def t(base: str) -> str | None:
        return _table(names, base, suffix)

    strings = dict(query(db, path, f'SELECT id, string FROM "{t("rocpd_string")}"')) if t("rocpd_string") else {}
    pids = dict(query(db, path, f'SELECT id, pid FROM "{t("rocpd_info_process")}"')) if t("rocpd_info_process") else {}
    tids = dict(query(db, path, f'SELECT id, tid FROM "{t("rocpd_info_thread")}"')) if t("rocpd_info_thread") else {}
    agents = {}
    if t("rocpd_info_agent"):
        cols = columns(db, t("rocpd_info_agent"))
        index = "logical_index" if "logical_index" in cols else "id"
        agents = {i: (kind, idx) for i, kind, idx in query(
            db, path, f'SELECT id, type, {index} FROM "{t("rocpd_info_agent")}"')}
    if t("rocpd_info_process"):
        for pid, command in query(db, path, f'SELECT pid, command FROM "{t("rocpd_info_process")}"'):
            if command:
                out.info.processes[int(pid)] = str(command).split()[0].rsplit("/", 1)[-1][:64]
    if t("rocpd_info_node"):
        host = query(db, path, f'SELECT hostname FROM "{t("rocpd_info_node")}" LIMIT 1')
        if host and host[0][0]:
            out.info.hostname = str(host[0][0])

    def pid_of(value) -> int:
        return int(pids.get(value, value) or 0)

    def tid_of(value, pid: int) -> int:
        return int(tids.get(value, value) if value is not None else pid)

    skipped = 0
    alloc = t("rocpd_memory_allocate")
    if alloc:
        for pid, tid, agent, typ, level, start, end, addr, size in query(
                db, path, f'SELECT pid, tid, agent_id, type, level, start, "end", address, size FROM "{alloc}" '
                          'ORDER BY id'):
            addr = address(addr)
            if level != "REAL" or not addr or typ not in ("ALLOC", "FREE"):
                skipped += 1
                continue
            p = pid_of(pid)
            mem = MemKind.PINNED if agents.get(agent, ("GPU",))[0] == "CPU" else MemKind.DEVICE
            if typ == "ALLOC":
                rows.add(EventKind.GPU_ALLOC, start, end, p, tid_of(tid, p), "hsa alloc", ptr=addr,
                         size=address(size) or 0, mem=int(mem), device=int(agents.get(agent, (0, 0))[1] or 0))
            else:
                rows.add(EventKind.GPU_FREE, start, end, p, tid_of(tid, p), "hsa free", ptr=addr,
                         size=address(size) or 0)
    if skipped:
        out.info.skipped["memory_allocate rows not of level REAL (VIRTUAL, SCRATCH) or without address"] = \
            out.info.skipped.get("memory_allocate rows not of level REAL (VIRTUAL, SCRATCH) or without address",
                                 0) + skipped

    copies = t("rocpd_memory_copy")
    have_copies = False
    if copies:
        cols = set(columns(db, copies))
        stream = "stream_id" if "stream_id" in cols else "0"
        for pid, tid, start, end, name_id, dst_agent, dst, src_agent, src, size, strm in query(
                db, path, f'SELECT pid, tid, start, "end", name_id, dst_agent_id, dst_address, src_agent_id, '
                          f'src_address, size, {stream} FROM "{copies}" ORDER BY id'):
            have_copies = True
            name = strings.get(name_id, "")
            dst_type = agents.get(dst_agent, (None, None))
            src_type = agents.get(src_agent, (None, None))
            kind = _kind_of_agents(src_type[0], dst_type[0])
            if kind is None:
                kind = next((k for key, k in COPY_NAMES.items() if key in name), 4)
            p = pid_of(pid)
            nbytes = address(size) or 0
            device = dst_type[1] if dst_type[0] == "GPU" else src_type[1]
            rows.add(EventKind.GPU_COPY, start, end, p, tid_of(tid, p), name or "memory copy", copy_kind=kind,
                     ptr=address(dst) or 0, src=address(src) or 0, size=nbytes, stream=address(strm) or 0,
                     device=int(device or 0),
                     aux=int(src_type[1] or 0) if kind == DTOD and src_agent != dst_agent else 0)
            out.count_copy(DIRECTIONS[kind], nbytes, end - start)
    if not have_copies and t("rocpd_region") and t("rocpd_arg"):
        found = _copies_from_args(db, path, t, strings, pid_of, tid_of, rows, out)
        if found:
            out.notes.append(f"{found:,} copies and memsets from the HIP calls' arguments (rocpd_arg): recorded "
                             "without --memory-copy-trace, their times are the calls'")


def _kind_of_agents(src: str | None, dst: str | None) -> int | None:
    if src is None or dst is None:
        return None
    return {("CPU", "GPU"): HTOD, ("GPU", "CPU"): DTOH, ("GPU", "GPU"): DTOD, ("CPU", "CPU"): HTOH}.get((src, dst))


def _copies_from_args(db, path: Path, t, strings: dict, pid_of, tid_of, rows: Rows, out: Imported) -> int:
    wanted = {i: s for i, s in strings.items() if _COPY_CALL.match(s) or _SET_CALL.match(s)}
    if not wanted:
        return 0
    marks = ",".join("?" * len(wanted))
    regions = query(db, path, f'SELECT r.event_id, r.pid, r.tid, r.start, r."end", r.name_id '
                              f'FROM "{t("rocpd_region")}" r WHERE r.name_id IN ({marks}) ORDER BY r.start',
                    tuple(wanted))
    args: dict[int, dict[str, str]] = {}
    events = [r[0] for r in regions if r[0] is not None]
    for chunk in range(0, len(events), 900):
        part = events[chunk:chunk + 900]
        for event_id, name, value in query(db, path, f'SELECT event_id, name, value FROM "{t("rocpd_arg")}" '
                                                     f'WHERE event_id IN ({",".join("?" * len(part))})', tuple(part)):
            args.setdefault(event_id, {})[name] = value
    found = 0
    for event_id, pid, tid, start, end, name_id in regions:
        name = wanted[name_id]
        a = args.get(event_id, {})
        dst = address(a.get("dst"))
        size = address(a.get("sizeBytes", a.get("count", a.get("size"))))
        if dst is None or size is None:
            continue
        p = pid_of(pid)
        stream = address(a.get("stream")) or 0
        if _SET_CALL.match(name):
            rows.add(EventKind.GPU_SET, start, end, p, tid_of(tid, p), name, ptr=dst, size=size,
                     aux=address(a.get("value")) or 0, stream=stream)
            found += 1
            continue
        src = address(a.get("src"))
        if src is None:
            continue
        suffix = _COPY_CALL.match(name).group(2) or ""
        kind = _FIXED_KIND.get(suffix.replace("Async", "")) if suffix.replace("Async", "") in _FIXED_KIND else None
        if kind is None:
            kind = kind_of_name(str(a.get("kind", "")))
        kind = 4 if kind is None else kind
        rows.add(EventKind.GPU_COPY, start, end, p, tid_of(tid, p), name, copy_kind=kind, ptr=dst, src=src, size=size,
                 stream=stream)
        out.count_copy(DIRECTIONS[kind], size, end - start)
        found += 1
    return found
