"""What the importers of other profilers' files share: the result they hand over, the rows they build, the
read-only SQLite connection.

Every importer turns its format into memq's own events (ctf2perfetto.events: one EventBatch, time-ordered,
plus a TraceInfo), so the one writer (write_trace) makes a memq Perfetto trace of it and every analysis,
annotate and plot apply. A format whose copies carry no addresses (Nsight Systems) hands over a
PyTorch-profiler-shaped document instead (`timeline`), written by the Kineto importer: only the address-free
figures apply to it, and the analyses say so.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ctf2perfetto.errors import MemqError
from ctf2perfetto.events import COLUMNS, EventBatch, EventKind, TraceInfo
from ctf2perfetto.importers.sqlite import columns, open_sqlite, query, tables  # noqa: F401 (the importers' one import)

# hipMemcpyKind / cudaMemcpyKind values, as memq's copy_kind column holds them.
HTOH, HTOD, DTOH, DTOD, DEFAULT = 0, 1, 2, 3, 4
DIRECTIONS = {HTOH: "HtoH", HTOD: "HtoD", DTOH: "DtoH", DTOD: "DtoD", DEFAULT: "Default"}
NAMES = {"rpd": "an RPD (rocmProfileData) trace", "rocpd": "a rocpd (rocprofv3) database",
         "nsys": "an Nsight Systems export", "thapi": "a THAPI (iprof) trace"}


@dataclass
class Imported:
    """One file of another profiler, as memq events."""

    format: str  # "rpd", "rocpd", "nsys", "thapi"
    path: Path
    batch: EventBatch | None  # memq events (None when the format has no addresses: see `timeline`)
    info: TraceInfo = field(default_factory=TraceInfo)
    warnings: list[str] = field(default_factory=list)
    has_addresses: bool = True
    # For address-free formats: a Kineto-shaped document ({"traceEvents": [...]}) the Kineto importer places.
    timeline: dict | None = None
    # Per direction: [count, bytes, duration ns] of the copies read (what the summary prints).
    copies: dict[str, list[int]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # what the importer found out (printed with the summary)
    version: str = ""  # the format's schema version, where the file says

    def count_copy(self, direction: str, nbytes: int, dur: int) -> None:
        row = self.copies.setdefault(direction, [0, 0, 0])
        row[0] += 1
        row[1] += nbytes
        row[2] += dur


class Rows:
    """EventBatch columns filled one row at a time (lists, turned into numpy arrays once). A column a row does
    not name is padded with its default (0, copy_kind -1) only when a later row names it, or at the end."""

    def __init__(self) -> None:
        self.cols: dict[str, list] = {name: [] for name in COLUMNS}
        self.api_names: list[str] = []
        self._api_index: dict[str, int] = {}
        self.n = 0

    def api(self, name: str) -> int:
        index = self._api_index.get(name)
        if index is None:
            index = self._api_index[name] = len(self.api_names)
            self.api_names.append(name)
        return index

    def add(self, kind: EventKind, begin: int, end: int, pid: int, tid: int, api: str, **values: int) -> None:
        cols, n = self.cols, self.n
        cols["kind"].append(int(kind))
        cols["begin"].append(begin)
        cols["ts"].append(end)
        cols["pid"].append(pid)
        cols["tid"].append(tid)
        cols["api"].append(self.api(api))
        for name, value in values.items():
            column = cols[name]
            if len(column) < n:
                column.extend([-1 if name == "copy_kind" else 0] * (n - len(column)))
            column.append(value)
        self.n = n + 1

    def __len__(self) -> int:
        return self.n

    def batch(self) -> EventBatch:
        """The rows in time order (by end, ties in the order they were added)."""
        cols = {}
        for name, dtype in COLUMNS.items():
            values = self.cols[name]
            if len(values) < self.n:
                values.extend([-1 if name == "copy_kind" else 0] * (self.n - len(values)))
            try:
                cols[name] = np.array(values, dtype=dtype) if values else np.zeros(0, dtype)
            except OverflowError:  # an address read as a signed SQLite integer: its 64 bits
                cols[name] = np.array([v & 0xFFFFFFFFFFFFFFFF for v in values], dtype=dtype)
        order = np.argsort(cols["ts"], kind="stable")
        return EventBatch({k: v[order] for k, v in cols.items()}, self.api_names)


_INT = re.compile(r"^\s*(0[xX][0-9a-fA-F]+|-?\d+)\s*$")


def address(value) -> int | None:
    """A pointer or size as SQLite holds it (integer, '0x..' text, decimal text); None when absent or not one
    ('', '(nil)', NULL)."""
    kind = type(value)
    if kind is int:
        return value & 0xFFFFFFFFFFFFFFFF
    if kind is str and value[:2] in ("0x", "0X") and value.isalnum():
        try:
            return int(value, 16) & 0xFFFFFFFFFFFFFFFF
        except ValueError:
            return None
    if value is None or kind is bool:
        return None
    if kind is float:
        return int(value) if value.is_integer() else None
    if kind is bytes:
        value = value.decode("ascii", "replace")
    match = _INT.match(str(value))
    if not match:
        return None
    return int(match.group(1), 0) & 0xFFFFFFFFFFFFFFFF


def kind_of_name(name: str) -> int | None:
    """hipMemcpyKind / cudaMemcpyKind from its name (hipMemcpyHostToDevice, HostToDevice, HtoD, ...)."""
    text = name.replace("_", "").replace("-", "").lower()
    for key, kind in (("hosttodevice", HTOD), ("htod", HTOD), ("devicetohost", DTOH), ("dtoh", DTOH),
                      ("devicetodevice", DTOD), ("dtod", DTOD), ("hosttohost", HTOH), ("htoh", HTOH),
                      ("default", DEFAULT)):
        if key in text:
            return kind
    value = address(name)
    return value if value is not None and value in DIRECTIONS else None


def read(path: Path, fmt: str) -> Imported:
    """The file at `path` in format `fmt` (sniff.sniff's answer) as memq events."""
    from importlib import import_module

    return import_module(f"{__package__}.{fmt}").read(Path(path))


CLOCK_WARNING = "no recorder clock readings"


def timeline_trace(imported: Imported) -> bytes:
    """An address-free import (`timeline`) as a Perfetto trace, placed by the Kineto importer."""
    from ctf2perfetto.convert import clocks
    from ctf2perfetto.convert.write.meta import info_packet
    from ctf2perfetto.convert.write.registry import process_thread_descriptors
    from ctf2perfetto.traceformat import names as N
    from ctf2perfetto.traceformat import packets as P
    from ctf2perfetto.importers.kineto.load import KinetoTrace
    from ctf2perfetto.importers.kineto.merge import KinetoMerge

    doc = imported.timeline or {"traceEvents": []}
    trace = KinetoTrace(imported.path, int(doc.get("baseTimeNanoseconds", 0)), [])
    for event in doc["traceEvents"]:
        if event.get("ph") == "M":
            if event.get("name") == "process_labels":
                trace.process_labels[event.get("pid")] = str(event["args"]["labels"])
        else:
            trace.events.append(event)
    merge = KinetoMerge(trace)
    packets = merge.packets()
    out = [clocks.snapshot_record(clocks.ClockCorrespondence(0, 0, None, N.SOURCE_KINETO))]
    out += process_thread_descriptors(merge.processes, merge.threads, merge.first_ns)
    out += [P.record(p) for p in packets]
    out.append(info_packet(imported.format, merge.first_ns, {N.A.skipped_events: merge.unplaced,
                                                             N.A.events: merge.events}))
    return b"".join(out)


def write(imported: Imported, out: Path, *, inputs=(), progress=None):
    """`imported` as a memq Perfetto trace at `out` (atomically); the ConvertSummary, with the importer's
    warnings and notes (`summary.imported`)."""
    import time

    from ctf2perfetto.convert.write import ConvertSummary, write_trace
    from ctf2perfetto.outfiles import AtomicOutput

    if imported.batch is not None:
        imported.info.source = imported.format  # what the analyses name as the source (memq_source)
        summary = write_trace([imported.batch], imported.info, out, inputs=inputs,
                              progress=progress.written if progress else None)
        summary.warnings = [w for w in summary.warnings if not w.startswith(CLOCK_WARNING)]
    else:
        started = time.monotonic()
        data = timeline_trace(imported)
        summary = ConvertSummary(output=str(out))
        try:
            with AtomicOutput(out, inputs=inputs) as target:
                target.path.write_bytes(data)
                target.commit(target.path)
        except OSError as exc:
            raise MemqError(f"{out}: cannot write: {exc.strerror or exc}") from exc
        summary.events = {"gpu_copy": sum(v[0] for k, v in imported.copies.items() if k != "memset"),
                          "gpu_set": imported.copies.get("memset", [0])[0]}
        summary.processes = len(imported.info.processes)
        summary.skipped = dict(imported.info.skipped)
        summary.output_bytes = Path(out).stat().st_size
        summary.elapsed_s = time.monotonic() - started
    summary.warnings = list(imported.warnings) + summary.warnings
    summary.imported = imported
    return summary
