"""Bake the analyses' results into a trace as tracks the stock Perfetto UI shows with no plugin.

A Perfetto trace is a concatenation of `Trace.packet` fields, so the annotated trace is the
original bytes followed by the annotation packets: nothing already in the trace is rewritten.
The packets sit on their own sequence (traceformat's `SEQ_ANNOTATION`) and carry timestamps in trace
time, i.e. trace_processor's `ts` (REALTIME, the trace's primary clock), with no clock id.

Tracks, all children of one global track `memq analyses` (the UI shows it as a top-level group):

| track | kind | what |
|---|---|---|
| `Duplicated bytes` | counter, bytes | destination bytes in an active mirror (upper bound: CPU/kernel writes are not traced) |
| `Duplicated bytes <direction>` | counter, bytes | the same, for mirrors created by copies of that direction |
| `Redundant copies: <class>` | slices | one per copy with redundant bytes of that class (repeat, round trip, unified, managed) |
| `Staged copies` | slices | host<->device copies from pageable memory (not redundant, slower than needed) |
| `Leaked allocations` | instants at the trace's end | per memory kind: a summary (count, bytes), then its largest leaked allocations |
| `Leaked bytes` | counter, bytes | bytes allocated by then that are never freed (reaches the total leaked at the end) |

Overlapping slices of one class go on extra tracks of the same name, which the UI merges into one.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pandas as pd

from .errors import MemqError, UsageError
from .traceformat import names as N
from .traceformat import packets as P
from .traceformat import tracks as T

# A Python job leaks tens of thousands of small heap blocks, all marked at one instant (the UI stacks them):
# show the largest few per kind; the per-kind summary counts them all.
LEAKS_SHOWN_PER_KIND = 3

# The analyses' classes (ctf2perfetto.analyses / sql/memq/redundant.sql), in their order of precedence.
REDUNDANT_REASONS = {
    "repeat": "source and destination were already a mirror from an earlier copy in the same direction",
    "round_trip": "copies data back to where it came from: the destination already mirrors the source",
    "managed": "an endpoint is managed memory, which the runtime migrates on demand",
    "unified": "host<->device copy on a unified-memory device, where host and device share one pool",
}


@dataclass(frozen=True)
class Annotations:
    """The analysis results to bake in, as plain tables in trace time (ns).

    duplicated: ts, direction ('' = total), value — counter samples, one per change.
    redundant: ts, dur, cls, bytes, redundant_bytes (of that class), redundant_dur (the copy's prorated time,
        all classes), direction, api, call_id — one row per copy and class it has bytes in.
    staged: ts, dur, bytes, direction, api, call_id.
    leaks: ts (allocated), bytes, mem_kind, ptr, alloc_id, pid, api.
    trace_end: last timestamp of the trace (where leaks are marked).
    """

    duplicated: pd.DataFrame
    redundant: pd.DataFrame
    staged: pd.DataFrame
    leaks: pd.DataFrame
    trace_end: int


class _Packets:
    """The annotation sequence's packets, in order (trace time: no clock id, the primary clock applies)."""

    def __init__(self) -> None:
        self.records = [P.record(P.sequence_start(N.SEQ_ANNOTATION))]
        self.ranks = iter(range(1, 1 << 30))

    def track(self, descriptor: bytes) -> None:
        self.records.append(T.record(N.SEQ_ANNOTATION, descriptor))

    def child(self, name: str, description: str, lane: int = 0, counter: bool = False) -> int:
        """A track of the analysis group (in the order made); its uuid."""
        self.track(T.analysis_track(name, description, next(self.ranks), lane, counter))
        return T.analysis_uuid(name, lane)

    def event(self, ts: int, track: int, type_: int, name: str | None = None, args: dict | None = None,
              counter: int | None = None) -> None:
        event = P.track_event(type_, track, name=name, category=N.CAT_ANALYSIS if name is not None else None,
                              args=_present(args), counter=counter)
        self.records.append(P.record(P.packet(N.SEQ_ANNOTATION, ts=int(ts), event=event)))

    def slices(self, name: str, description: str, rows: pd.DataFrame, title: Callable[[pd.Series], str],
               fields: Callable[[pd.Series], dict[str, object]]) -> None:
        """One slice per row on the first lane (a track of the same name) free at its start."""
        lanes = T.Lanes()
        made: set[int] = set()
        for _, row in rows.sort_values(["ts", "dur"], kind="stable").iterrows():
            start, end = int(row["ts"]), int(row["ts"]) + max(int(row["dur"]), 0)
            lane = lanes.assign(name, start, end)
            if lane not in made:
                made.add(lane)
                self.child(name, description, lane)
            track = T.analysis_uuid(name, lane)
            self.event(start, track, P.TYPE_SLICE_BEGIN, title(row), fields(row))
            self.event(end, track, P.TYPE_SLICE_END)


def _present(values: dict | None) -> dict | None:
    """Arguments without the absent ones (absent means "not applicable", TRACE_FORMAT.md: e.g. no call_id
    for Kineto copies); numbers as ints unless they are floats."""
    if values is None:
        return None
    out = {}
    for key, value in values.items():
        if value is None or (not isinstance(value, str) and pd.isna(value)):
            continue
        out[key] = value if isinstance(value, (str, float)) else int(value)
    return out


def annotation_packets(notes: Annotations) -> bytes:
    """The annotation packets, serialized as `Trace.packet` records (appendable to any trace)."""
    out = _Packets()
    out.track(T.analysis_group())

    # Counters: total first, then per direction.
    dup = notes.duplicated.copy()
    dup["direction"] = dup["direction"].fillna("").astype(str)
    for direction in sorted(dup["direction"].unique(), key=lambda d: (d != "", d)):
        what = f"mirrors created by {direction} copies" if direction else "all mirrors"
        track = out.child(N.duplicated_track_name(direction),
                          f"Destination bytes in an active mirror ({what}); {N.UPPER_BOUND_NOTE}.", counter=True)
        rows = dup[dup["direction"] == direction].sort_values("ts", kind="stable")
        for ts, value in zip(rows["ts"].to_numpy(), rows["value"].to_numpy()):
            out.event(ts, track, P.TYPE_COUNTER, counter=int(value))

    red = notes.redundant
    for cls in [c for c in REDUNDANT_REASONS if (red["cls"] == c).any()]:
        label = cls.replace("_", " ")
        reason = REDUNDANT_REASONS[cls]
        out.slices(f"{N.REDUNDANT_TRACK}: {label}",
                   f"Copies with {label} redundant bytes: {reason}; {N.UPPER_BOUND_NOTE}.", red[red["cls"] == cls],
                   lambda r: f"{r['cls'].replace('_', ' ')} {N.format_bytes(r['redundant_bytes'])} {r['direction']}",
                   lambda r: {"class": r["cls"], "reason": REDUNDANT_REASONS[r["cls"]],
                              "redundant_bytes": r["redundant_bytes"], "redundant_dur": r["redundant_dur"],
                              "bytes": r["bytes"], "direction": r["direction"], "api": r["api"],
                              "call_id": r["call_id"]})
    out.slices(N.STAGED_TRACK, "Host<->device copies from pageable host memory: not redundant, but staged through a "
               "bounce buffer and slower than from pinned memory.", notes.staged,
               lambda r: f"staged {N.format_bytes(r['bytes'])} {r['direction']}",
               lambda r: {"bytes": r["bytes"], "direction": r["direction"], "api": r["api"], "call_id": r["call_id"]})

    if len(notes.leaks):
        track = out.child(N.LEAKED_BYTES_TRACK, "Bytes allocated up to this time that are never freed in the trace "
                          "(all memory kinds).", counter=True)
        growth = notes.leaks.groupby("ts", sort=True)["bytes"].sum().cumsum()
        for ts, value in zip(growth.index.to_numpy(), growth.to_numpy()):
            out.event(ts, track, P.TYPE_COUNTER, counter=int(value))
        track = out.child(N.LEAKS_TRACK, "Allocations never freed before the trace ended, marked at its end: one "
                          f"summary per memory kind, then the largest {LEAKS_SHOWN_PER_KIND} allocations of each kind.")
        leaks = notes.leaks.sort_values(["bytes", "ts"], ascending=[False, True], kind="stable")
        for kind, rows in leaks.groupby("mem_kind", sort=True):
            shown = rows.head(LEAKS_SHOWN_PER_KIND)
            out.event(notes.trace_end, track, P.TYPE_INSTANT,
                      f"leaked {kind}: {len(rows)} allocations, {N.format_bytes(rows['bytes'].sum())}",
                      {"mem_kind": kind, "allocations": len(rows), "bytes": int(rows["bytes"].sum()),
                       "shown": len(shown)})
            for _, row in shown.iterrows():
                out.event(notes.trace_end, track, P.TYPE_INSTANT, f"leak {kind} {N.format_bytes(row['bytes'])}",
                          {"bytes": row["bytes"], "mem_kind": kind, "ptr": row["ptr"], "alloc_id": row["alloc_id"],
                           "pid": row["pid"], "api": row["api"], "allocated_ts": row["ts"]})
    return b"".join(out.records)


def collect(engine: Any, unified: str = "auto") -> Annotations:
    """Run the analyses on an open engine and shape their results for `annotation_packets`."""
    from . import analyses

    trace = analyses.module_query(engine, ("trace",), "SELECT annotated, end_ts FROM memq_trace").iloc[0]
    if trace["annotated"]:
        raise UsageError(f"the trace already has a '{N.DUPLICATED_TRACK}' track: it is annotated already; "
                         "annotate the original trace")
    duplicated = analyses.duplicated_over_time(engine)
    copies = analyses.redundant_copies(engine, unified)
    per_class = []
    for cls in REDUNDANT_REASONS:
        has = copies[copies[f"{cls}_bytes"].fillna(0) > 0]
        per_class.append(has.assign(cls=cls, redundant_bytes=has[f"{cls}_bytes"].astype("int64")))
    columns = ["ts", "dur", "cls", "bytes", "redundant_bytes", "redundant_dur", "direction", "api", "call_id"]
    redundant = pd.concat(per_class, ignore_index=True)[columns] if per_class else pd.DataFrame(columns=columns)
    staged = copies[copies["staged"].fillna(0).astype(bool)][["ts", "dur", "bytes", "direction", "api", "call_id"]]

    leaks = analyses.leaked_allocations(engine).rename(columns={"size": "bytes", "kind": "mem_kind", "addr": "ptr"})
    return Annotations(duplicated, redundant, staged, leaks, int(trace["end_ts"]))


def require_protobuf_trace(trace: Path) -> None:
    """UsageError unless `trace` starts like a Perfetto protobuf trace (a `Trace.packet` field, tag 0x0A).

    Appending packets only makes sense there: after a JSON or gzip trace they would make the file unreadable.
    """
    with trace.open("rb") as f:
        head = f.read(2)
    if head[:1] != b"\x0a":
        kind = "gzip" if head == b"\x1f\x8b" else "JSON" if head[:1] in (b"{", b"[") else "not protobuf"
        raise UsageError(f"{trace}: only Perfetto protobuf traces can be annotated and this one is {kind}; "
                         "convert it first (ctf2perfetto TRACE_DIR -o out.pftrace [--kineto PROFILE.json])")


def write_annotated(trace: Path, out: Path, packets: bytes) -> None:
    """Write `out` = the trace's bytes followed by `packets`, atomically (never a half-written file)."""
    if out.exists() and out.resolve() == trace.resolve():
        raise UsageError(f"-o {out}: is the input trace; write the annotated trace to a new file")
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", dir=out.parent)
    try:
        with os.fdopen(fd, "wb") as dst, trace.open("rb") as src:
            shutil.copyfileobj(src, dst, 1 << 22)
            dst.write(packets)
        os.replace(tmp, out)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise MemqError(f"{out}: cannot write the annotated trace: {exc.strerror or exc}") from exc
