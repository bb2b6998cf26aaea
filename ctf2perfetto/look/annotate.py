"""Bake the analyses' results into a trace as tracks the stock Perfetto UI shows with no plugin.

A Perfetto trace is a concatenation of `Trace.packet` fields, so the annotated trace is the
original bytes followed by the annotation packets: nothing already in the trace is rewritten.
The packets sit on their own sequence (traceformat's `SEQ_ANNOTATION`) and carry timestamps in trace
time, i.e. trace_processor's `ts` (REALTIME, the trace's primary clock), with no clock id.

Tracks, all children of one global track `memq analyses` (the UI shows it as a top-level group), in this order:

| track | kind | what |
|---|---|---|
| `Duplicated bytes` | counter, bytes | destination bytes in an active mirror (upper bound: CPU/kernel writes are not traced) |
| `Redundant copies` | slices | one per copy with redundant bytes: its main class, bytes per class, the reason, the evidence (`content`: every redundant byte proven by a fingerprint, `address`: the address rules alone) with the bytes content proves; a flow from the copy |
| `Staged copies` | slices | host<->device copies from pageable memory (not redundant, slower than needed) |
| `Duplicated bytes <direction>` | counter, bytes | the same as the first, for mirrors created by copies of that direction |
| `Leaked bytes` | counter, bytes | bytes allocated by then that are never freed (reaches the total leaked at the end) |
| `Leaked allocations` | one slice | from the first leaked allocation to the trace's end: totals, per kind, the largest |

Overlapping slices go on extra tracks of the same name, which the UI shows as one. Every size and duration
argument has its formatted twin (`<key>_fmt`).
"""
from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pandas as pd

from ctf2perfetto.errors import MemqError, UsageError
from ctf2perfetto.outfiles import AtomicOutput
from ctf2perfetto.traceformat import names as N
from ctf2perfetto.traceformat import packets as P
from ctf2perfetto.traceformat import tracks as T

A = N.A

# A Python job leaks tens of thousands of small heap blocks: the summary counts them all per kind and lists the
# largest few of each.
LEAKS_SHOWN_PER_KIND = 3
CLASS_BYTES = {cls: f"{cls}_bytes" for cls in ("no_op", "repeat", "round_trip", "managed", "unified")}

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
    redundant: ts, dur, cls (the class with most bytes), bytes, redundant_bytes (all classes), no_op_bytes,
        repeat_bytes, round_trip_bytes, managed_bytes, unified_bytes, content_bytes (of redundant_bytes, proven by
        a fingerprint), evidence (content when all are, else address), redundant_dur (prorated), direction, api,
        call_id — one row per copy with redundant bytes.
    staged: ts, dur, bytes, direction, api, call_id.
    leaks: ts (allocated), bytes, mem_kind, ptr, alloc_id, pid, api.
    trace_end: last timestamp of the trace (where the leak summary ends).
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
              counter: int | None = None, terminating: tuple[int, ...] = ()) -> None:
        event = P.track_event(type_, track, name=name, category=N.CAT_ANALYSIS if name is not None else None,
                              args=_present(args), counter=counter, terminating=terminating)
        self.records.append(P.record(P.packet(N.SEQ_ANNOTATION, ts=int(ts), event=event)))

    def slices(self, name: str, description: str, rows: pd.DataFrame, title: Callable[[pd.Series], str],
               fields: Callable[[pd.Series], dict[str, object]], flows: bool = False) -> None:
        """One slice per row on the first lane (a track of the same name) free at its start; with `flows`, a
        flow from the row's copy (`call_id`) to it."""
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
            # The copy's slice started this flow (write/gpu.py); ending it at this END, never earlier than
            # the copy's BEGIN, links the verdict to the copy it judges.
            call_id = row.get("call_id")
            verdict = (N.FLOW_VERDICT | int(call_id),) if flows and call_id is not None and pd.notna(call_id) else ()
            self.event(end, track, P.TYPE_SLICE_END, terminating=verdict)


def _present(values: dict | None) -> dict | None:
    """Arguments without the absent ones (absent means "not applicable", TRACE_FORMAT.md: e.g. no call_id
    for Kineto copies), numbers as ints unless they are floats, each size or duration with its formatted
    twin; nested dicts alike."""
    if values is None:
        return None
    out: dict[str, object] = {}
    for key, value in values.items():
        if isinstance(value, dict):
            out[key] = _present(value)
            continue
        if value is None or (not isinstance(value, str) and pd.isna(value)):
            continue
        out[key] = value if isinstance(value, (str, float, P.Pointer)) else int(value)
        if N.ARGS.get(key) is not None:
            out[N.fmt_key(key)] = N.format_value(key, out[key])  # type: ignore[arg-type]
    return out


def annotation_packets(notes: Annotations) -> bytes:
    """The annotation packets, serialized as `Trace.packet` records (appendable to any trace)."""
    out = _Packets()
    out.track(T.analysis_group())

    dup = notes.duplicated.copy()
    dup["direction"] = dup["direction"].fillna("").astype(str)

    def duplicated(direction: str) -> None:
        what = f"mirrors created by {direction} copies" if direction else "all mirrors"
        track = out.child(N.duplicated_track_name(direction),
                          f"Destination bytes in an active mirror ({what}); {N.UPPER_BOUND_NOTE}.", counter=True)
        rows = dup[dup["direction"] == direction].sort_values("ts", kind="stable")
        for ts, value in zip(rows["ts"].to_numpy(), rows["value"].to_numpy()):
            out.event(ts, track, P.TYPE_COUNTER, counter=int(value))

    if "" in set(dup["direction"]):
        duplicated("")
    out.slices(N.REDUNDANT_TRACK, f"Copies that moved bytes their destination already held, one slice per copy, "
               f"named after the class with most bytes and its evidence (content: every redundant byte proven by a "
               f"content fingerprint; address: the address rules alone, {N.UPPER_BOUND_NOTE}). Classes: "
               + "; ".join(f"{c.replace('_', ' ')}: {r}" for c, r in REDUNDANT_REASONS.items()) + ".",
               notes.redundant,
               lambda r: f"{r['cls'].replace('_', ' ')} {N.format_bytes(r['redundant_bytes'])} {r['direction']} "
                         f"({r['evidence']})",
               lambda r: {A["class"]: r["cls"], A.reason: REDUNDANT_REASONS[r["cls"]], A.evidence: r["evidence"],
                          A.redundant_bytes: r["redundant_bytes"], A.content_bytes: r["content_bytes"],
                          A.redundant_dur: r["redundant_dur"],
                          **{A[column]: r[column] or None for column in CLASS_BYTES.values()},
                          A.bytes: r["bytes"], A.direction: r["direction"], A.api: r["api"], A.call_id: r["call_id"]},
               flows=True)
    out.slices(N.STAGED_TRACK, "Host<->device copies from pageable host memory: not redundant, but staged through a "
               "bounce buffer and slower than from pinned memory.", notes.staged,
               lambda r: f"staged {N.format_bytes(r['bytes'])} {r['direction']}",
               lambda r: {A.bytes: r["bytes"], A.direction: r["direction"], A.api: r["api"], A.call_id: r["call_id"]})
    for direction in sorted(set(dup["direction"]) - {""}):
        duplicated(direction)
    if len(notes.leaks):
        _leaks(out, notes.leaks, notes.trace_end)
    return b"".join(out.records)


def _leaks(out: _Packets, leaks: pd.DataFrame, trace_end: int) -> None:
    """`Leaked bytes` (growth over time) and `Leaked allocations`: one summary slice, not one mark per leak."""
    track = out.child(N.LEAKED_BYTES_TRACK, "Bytes allocated up to this time that are never freed in the trace "
                      "(all memory kinds).", counter=True)
    growth = leaks.groupby("ts", sort=True)["bytes"].sum().cumsum()
    for ts, value in zip(growth.index.to_numpy(), growth.to_numpy()):
        out.event(ts, track, P.TYPE_COUNTER, counter=int(value))
    track = out.child(N.LEAKS_TRACK, "Allocations never freed before the trace ended: one slice from the first of "
                      "them to the trace's end, with their count and bytes per memory kind and the largest "
                      f"{LEAKS_SHOWN_PER_KIND} of each kind.")
    kinds = {}
    for kind, rows in leaks.sort_values(["bytes", "ts"], ascending=[False, True], kind="stable").groupby(
            "mem_kind", sort=True):
        largest = {str(i + 1): {A.bytes: r["bytes"], A.ptr: P.Pointer(int(r["ptr"])), A.alloc_id: r["alloc_id"],
                                A.pid: r["pid"], A.api: r["api"], A.allocated_ts: r["ts"]}
                   for i, (_, r) in enumerate(rows.head(LEAKS_SHOWN_PER_KIND).iterrows())}
        kinds[kind] = {A.allocations: len(rows), A.bytes: int(rows["bytes"].sum()), A.largest: largest}
    total = int(leaks["bytes"].sum())
    first = int(leaks["ts"].min())
    out.event(first, track, P.TYPE_SLICE_BEGIN, f"leaked: {len(leaks):,} allocations, {N.format_bytes(total)}",
              {A.allocations: len(leaks), A.bytes: total, A.first_ts: first, A.kinds: kinds})
    out.event(max(trace_end, first), track, P.TYPE_SLICE_END)


def collect(engine: Any, unified: str = "auto") -> Annotations:
    """Run the analyses on an open engine and shape their results for `annotation_packets`."""
    from ctf2perfetto import analyses

    trace = analyses.module_query(engine, ("trace",), "SELECT annotated, end_ts FROM memq_trace").iloc[0]
    if trace["annotated"]:
        raise UsageError(f"the trace already has a '{N.DUPLICATED_TRACK}' track: it is annotated already; "
                         "annotate the original trace")
    duplicated = analyses.duplicated_over_time(engine)
    copies = analyses.redundant_copies(engine, unified)
    redundant = copies[copies["redundant_bytes"].fillna(0) > 0].rename(columns={"class": "cls"})[
        ["ts", "dur", "cls", "bytes", "redundant_bytes", *CLASS_BYTES.values(), "content_bytes", "evidence",
         "redundant_dur", "direction", "api", "call_id"]]
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
