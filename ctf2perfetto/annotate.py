"""Bake the analyses' results into a trace as tracks the stock Perfetto UI shows with no plugin.

A Perfetto trace is a concatenation of `Trace.packet` fields, so the annotated trace is the
original bytes followed by the annotation packets: nothing already in the trace is rewritten.
The packets sit on their own sequence (`ANNOTATION_SEQUENCE_ID`) and carry timestamps in trace
time, i.e. trace_processor's `ts` (REALTIME, the trace's primary clock), with no clock id.

Tracks, all children of one global track `memq analyses` (the UI shows it as a top-level group):

| track | kind | what |
|---|---|---|
| `Duplicated bytes` | counter, bytes | destination bytes in an active mirror (upper bound: CPU/kernel writes are not traced) |
| `Duplicated bytes <direction>` | counter, bytes | the same, for mirrors created by copies of that direction |
| `Redundant copies: <class>` | slices | one per copy with redundant bytes of that class (no op, repeat, round trip, managed, unified), named with its evidence (`content`: proven by a fingerprint, `address`: the address rules alone) and with its content_bytes |
| `Staged copies` | slices | host<->device copies from pageable memory (not redundant, slower than needed) |
| `Leaked allocations` | instants at the trace's end | per memory kind: a summary (count, bytes), then its largest leaked allocations |
| `Leaked bytes` | counter, bytes | bytes allocated by then that are never freed (reaches the total leaked at the end) |

Overlapping slices of one class go on extra tracks of the same name, which the UI merges into one.
"""
from __future__ import annotations

import functools
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pandas as pd

from .errors import MemqError, UsageError
from .outfiles import AtomicOutput

ANNOTATION_SEQUENCE_ID = 0x6D656D71  # "memq": far above the writer's small sequence ids
_UUID_BASE = 0x6D656D7100000000  # track uuids of annotation tracks: "memq" in the high bits
ANNOTATION_CATEGORY = "memq.analysis"
GROUP_TRACK = "memq analyses"
DUPLICATED_TRACK = "Duplicated bytes"
REDUNDANT_TRACK_PREFIX = "Redundant copies: "
STAGED_TRACK = "Staged copies"
LEAKS_TRACK = "Leaked allocations"
LEAKED_BYTES_TRACK = "Leaked bytes"
# A Python job leaks tens of thousands of small heap blocks, all marked at one instant (the UI stacks them):
# show the largest few per kind; the per-kind summary counts them all.
LEAKS_SHOWN_PER_KIND = 3
UPPER_BOUND_NOTE = "upper bound: writes by CPU code and GPU kernels are not traced"

# The analyses' classes (ctf2perfetto.analyses / sql/memq/redundant.sql), in their order of precedence.
REDUNDANT_REASONS = {
    "no_op": "the destination's content fingerprint is the same before and after: the copy changed nothing",
    "repeat": "source and destination were already a mirror from an earlier copy in the same direction",
    "round_trip": "copies data back to where it came from: the destination already mirrors the source",
    "managed": "an endpoint is managed memory, which the runtime migrates on demand",
    "unified": "host<->device copy on a unified-memory device, where host and device share one pool",
}


@dataclass(frozen=True)
class Annotations:
    """The analysis results to bake in, as plain tables in trace time (ns).

    duplicated: ts, direction ('' = total), value — counter samples, one per change.
    redundant: ts, dur, cls, bytes, redundant_bytes (of that class), content_bytes (of those, proven by a
        fingerprint), evidence (content when all are, else address), redundant_dur (the copy's prorated time,
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


def annotation_packets(notes: Annotations) -> bytes:
    """The annotation packets, serialized as a `Trace` message (appendable to any trace)."""
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import CounterDescriptor, Trace, TracePacket, TrackEvent

    trace = Trace()
    uuids = iter(range(_UUID_BASE + 1, _UUID_BASE + (1 << 32)))
    first = True

    def packet() -> TracePacket:
        nonlocal first
        p = trace.packet.add()
        p.trusted_packet_sequence_id = ANNOTATION_SEQUENCE_ID
        if first:
            p.sequence_flags = TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
            first = False
        return p

    def track(name: str, description: str, counter: bool = False, parent: int | None = None) -> int:
        uuid = next(uuids)
        desc = packet().track_descriptor
        desc.uuid = uuid
        desc.name = name
        desc.description = description
        if parent is not None:
            desc.parent_uuid = parent
        if counter:
            desc.counter.unit = CounterDescriptor.UNIT_SIZE_BYTES
        return uuid

    group = track(GROUP_TRACK, f"Results of the memq analyses, added by memq annotate; {UPPER_BOUND_NOTE}.")
    child = functools.partial(track, parent=group)

    def event(track_uuid: int, ts: int, kind: int, name: str | None = None) -> TrackEvent:
        p = packet()
        p.timestamp = int(ts)
        e = p.track_event
        e.track_uuid = track_uuid
        e.type = kind
        if name is not None:
            e.name = name
            e.categories.append(ANNOTATION_CATEGORY)
        return e

    def args(e: TrackEvent, values: dict[str, object]) -> None:
        for key, value in values.items():
            if value is None or (not isinstance(value, str) and pd.isna(value)):
                continue  # absent means "not applicable" (TRACE_FORMAT.md), e.g. no call_id in Kineto copies
            a = e.debug_annotations.add()
            a.name = key
            if isinstance(value, str):
                a.string_value = value
            elif isinstance(value, float):
                a.double_value = value
            else:
                a.int_value = int(value)

    # Counters: total first, then per direction.
    dup = notes.duplicated.copy()
    dup["direction"] = dup["direction"].fillna("").astype(str)
    for direction in sorted(dup["direction"].unique(), key=lambda d: (d != "", d)):
        name = DUPLICATED_TRACK + (f" {direction}" if direction else "")
        what = f"mirrors created by {direction} copies" if direction else "all mirrors"
        uuid = child(name, f"Destination bytes in an active mirror ({what}); {UPPER_BOUND_NOTE}.", counter=True)
        rows = dup[dup["direction"] == direction].sort_values("ts", kind="stable")
        for ts, value in zip(rows["ts"].to_numpy(), rows["value"].to_numpy()):
            event(uuid, ts, TrackEvent.TYPE_COUNTER).counter_value = int(value)

    def slices(name: str, description: str, rows: pd.DataFrame, title: Callable[[pd.Series], str],
               fields: Callable[[pd.Series], dict[str, object]]) -> None:
        lanes: list[tuple[int, int]] = []  # (track uuid, end of its last slice)
        for _, row in rows.sort_values(["ts", "dur"], kind="stable").iterrows():
            start, end = int(row["ts"]), int(row["ts"]) + max(int(row["dur"]), 0)
            lane = next((i for i, (_, busy_until) in enumerate(lanes) if busy_until <= start), None)
            if lane is None:
                lanes.append((child(name, description), end))
                lane = len(lanes) - 1
            uuid = lanes[lane][0]
            lanes[lane] = (uuid, end)
            args(event(uuid, start, TrackEvent.TYPE_SLICE_BEGIN, title(row)), fields(row))
            event(uuid, end, TrackEvent.TYPE_SLICE_END)

    red = notes.redundant
    for cls in [c for c in REDUNDANT_REASONS if (red["cls"] == c).any()]:
        label = cls.replace("_", " ")
        reason = REDUNDANT_REASONS[cls]
        slices(REDUNDANT_TRACK_PREFIX + label, f"Copies with {label} redundant bytes: {reason}; {UPPER_BOUND_NOTE}.",
               red[red["cls"] == cls],
               lambda r: f"{r['cls'].replace('_', ' ')} {_size(r['redundant_bytes'])} {r['direction']} "
                         f"({r['evidence']})",
               lambda r: {"class": r["cls"], "reason": REDUNDANT_REASONS[r["cls"]], "evidence": r["evidence"],
                          "redundant_bytes": r["redundant_bytes"], "content_bytes": r["content_bytes"],
                          "redundant_dur": r["redundant_dur"],
                          "bytes": r["bytes"], "direction": r["direction"], "api": r["api"],
                          "call_id": r["call_id"]})
    slices(STAGED_TRACK, "Host<->device copies from pageable host memory: not redundant, but staged through a "
           "bounce buffer and slower than from pinned memory.", notes.staged,
           lambda r: f"staged {_size(r['bytes'])} {r['direction']}",
           lambda r: {"bytes": r["bytes"], "direction": r["direction"], "api": r["api"], "call_id": r["call_id"]})

    if len(notes.leaks):
        uuid = child(LEAKED_BYTES_TRACK, "Bytes allocated up to this time that are never freed in the trace "
                     "(all memory kinds).", counter=True)
        growth = notes.leaks.groupby("ts", sort=True)["bytes"].sum().cumsum()
        for ts, value in zip(growth.index.to_numpy(), growth.to_numpy()):
            event(uuid, ts, TrackEvent.TYPE_COUNTER).counter_value = int(value)
        uuid = child(LEAKS_TRACK, "Allocations never freed before the trace ended, marked at its end: one summary "
                     f"per memory kind, then the largest {LEAKS_SHOWN_PER_KIND} allocations of each kind.")
        leaks = notes.leaks.sort_values(["bytes", "ts"], ascending=[False, True], kind="stable")
        for kind, rows in leaks.groupby("mem_kind", sort=True):
            shown = rows.head(LEAKS_SHOWN_PER_KIND)
            args(event(uuid, notes.trace_end, TrackEvent.TYPE_INSTANT,
                       f"leaked {kind}: {len(rows)} allocations, {_size(rows['bytes'].sum())}"),
                 {"mem_kind": kind, "allocations": len(rows), "bytes": int(rows["bytes"].sum()),
                  "shown": len(shown)})
            for _, row in shown.iterrows():
                args(event(uuid, notes.trace_end, TrackEvent.TYPE_INSTANT, f"leak {kind} {_size(row['bytes'])}"),
                     {"bytes": row["bytes"], "mem_kind": kind, "ptr": row["ptr"], "alloc_id": row["alloc_id"],
                      "pid": row["pid"], "api": row["api"], "allocated_ts": row["ts"]})
    return trace.SerializeToString()


def duplicated_over_time(engine: Any) -> pd.DataFrame:
    """Whole-trace duplicated bytes over time: ts, direction ('' = total), value; one row per change."""
    from . import analyses

    total = analyses.duplicated_counter(engine, "total")
    by_direction = analyses.duplicated_counter(engine, "direction")
    frame = pd.concat([
        total[total["pid"].isna()].assign(direction=""),
        by_direction[by_direction["pid"].isna()].assign(direction=lambda d: d["key"].astype(str)),
    ], ignore_index=True)[["ts", "direction", "value"]]
    frame.attrs.update(total.attrs)  # applies / note: e.g. not applicable to traces without addresses
    return frame


def collect(engine: Any, unified: str = "auto") -> Annotations:
    """Run the analyses on an open engine and shape their results for `annotation_packets`."""
    from . import analyses

    if (engine.query(f"SELECT COUNT(*) AS n FROM track WHERE name = '{DUPLICATED_TRACK}'")["n"].iloc[0]):
        raise UsageError(f"the trace already has a '{DUPLICATED_TRACK}' track: it is annotated already; "
                         "annotate the original trace")
    duplicated = duplicated_over_time(engine)
    copies = analyses.redundant_copies(engine, unified)
    per_class = []
    for cls in REDUNDANT_REASONS:
        has = copies[copies[f"{cls}_bytes"].fillna(0) > 0]
        class_bytes = has[f"{cls}_bytes"].astype("int64")
        proven = class_bytes if cls == "no_op" else has.get(f"{cls}_content_bytes", pd.Series(0, index=has.index))
        proven = proven.fillna(0).astype("int64")
        per_class.append(has.assign(cls=cls, redundant_bytes=class_bytes, content_bytes=proven,
                                    evidence=["content" if p == n else "address"
                                              for p, n in zip(proven.tolist(), class_bytes.tolist())]))
    columns = ["ts", "dur", "cls", "bytes", "redundant_bytes", "content_bytes", "evidence", "redundant_dur",
               "direction", "api", "call_id"]
    redundant = pd.concat(per_class, ignore_index=True)[columns] if per_class else pd.DataFrame(columns=columns)
    staged = copies[copies["staged"].fillna(0).astype(bool)][["ts", "dur", "bytes", "direction", "api", "call_id"]]

    leaks = analyses.leaked_allocations(engine).rename(columns={"size": "bytes", "kind": "mem_kind", "addr": "ptr"})
    trace_end = int(engine.query("SELECT trace_end() AS e")["e"].iloc[0])
    return Annotations(duplicated, redundant, staged, leaks, trace_end)


def _size(n: object) -> str:
    value = float(n)  # type: ignore[arg-type]
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"


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
    """Write `out` = the trace's bytes followed by `packets`, atomically (never a half-written file;
    `out` follows ctf2perfetto.outfiles: never the input, a link, a device, ...)."""
    try:
        with AtomicOutput(out, inputs=[trace]) as target:
            with open(target.path, "wb") as dst, trace.open("rb") as src:
                shutil.copyfileobj(src, dst, 1 << 22)
                dst.write(packets)
            target.commit()
    except OSError as exc:
        raise MemqError(f"{out}: cannot write the annotated trace: {exc.strerror or exc}") from exc
