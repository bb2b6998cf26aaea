"""A long recording a part at a time: where to cut it, what each part carries into the next, the parts in turn.

trace_processor holds its whole trace, so an analysis of an hours-long recording needs memory
in proportion to the run. Cut into consecutive parts (ranges, ranges.py), each part is a trace
of its own, bounded by the part. What makes a part's mirror figures those of the whole
recording is what it starts with: the allocations live at its start (the range's `memq.live`
markers) and the mirror pieces alive then (sql/memq/carried.sql). Here:

* `quiet_points`: a part's start must be a *quiet* time, inside no call and no asynchronous
  copy awaiting its completion (a call cut in two would be two calls, each with the wrong
  time, holders and fingerprints). It finds the first quiet time at or after each target;
  `plan` cuts a recording there.
* `carry_out(engine, end)`: the mirror pieces alive at a part's end, with their holders;
  `carry_in(engine, carried, start)` fills memq.carried in the next part's trace_processor,
  before any memq module is included.
* `plan` also gives each part its Lead (convert/leads.py, one more pass): the state its conversion
  starts from, so that it decodes only its own packets (the parts together about one decode).
* `each_part`: the parts in turn, each converted and loaded in a fresh trace_processor that has
  taken in what the previous one left alive. wholerun.py merges their figures.

Times are nanoseconds after the start of the recording, as ranges.Range counts them (the
`begin` of its first row), except a Part's `start` and `end`: trace_processor's clock.
"""
from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ctf2perfetto.analysis.base import Stage, no_stage
from ctf2perfetto.errors import UsageError
from ctf2perfetto.events import EventBatch, EventKind
from ctf2perfetto.convert.ranges import Range, RangeReport

if TYPE_CHECKING:
    from ctf2perfetto.convert.write import ConvertSummary

_CONTENT_AFTER_LATER = 8  # GPU_COPY `content` bit: the copy completes later, in a GPU_COPY_DONE row
# The first part's start: before every call, so that none is cut (the first row's begin, a Range's 0, need not
# be the earliest: rows come in the order calls return).
BEGINNING = -(1 << 62)
_NS = 1_000_000_000
# How far after each cut's target a quiet time is looked for (at most a tenth of a part). The planning pass keeps
# the rows of that span after each target: 10 s of an untrimmed heap recording (650k events/s) is ~100 MiB.
SEARCH_NS = 10 * _NS
PASS_BATCH = 1 << 16  # rows per batch of the planning passes (a quarter of the decoder's default memory)
_INSERT_ROWS = 500  # rows per INSERT statement (SQLite parses each; one huge statement is slower)

# -- where to cut --------------------------------------------------------------------------------
class _Busy:
    """Intervals [begin, end] (absolute ns, ends inclusive) near each target, as the batches go by."""

    def __init__(self, search: int) -> None:
        self.search = search
        self.targets: list[int] = []
        self.begins: list[list[np.ndarray]] = []
        self.ends: list[list[np.ndarray]] = []

    def target(self, t: int) -> None:
        """Look for a quiet time at or after t (before any row returning at or after t is added)."""
        self.targets.append(t)
        self.begins.append([])
        self.ends.append([])

    def add(self, begin: np.ndarray, end: np.ndarray) -> None:
        earliest = int(begin.min())
        for i in range(len(self.targets) - 1, -1, -1):
            t = self.targets[i]
            if t + self.search <= earliest:  # this target's search is over, and every earlier one's
                break
            near = (end >= t) & (begin < t + self.search)
            if near.any():
                self.begins[i].append(begin[near])
                self.ends[i].append(end[near])

    def first_quiet(self, i: int) -> int | None:
        """The first time at or after target i that no interval holds, within the search; None if none is."""
        t = self.targets[i]
        if not self.begins[i]:
            return t
        begin, end = np.concatenate(self.begins[i]), np.concatenate(self.ends[i])
        order = np.argsort(begin, kind="stable")
        x = t
        for b, e in zip(begin[order].tolist(), end[order].tolist()):
            if b > x:
                break
            x = max(x, e + 1)
        return x if x < t + self.search else None


@dataclass
class Scan:
    """What quiet_points found: per target (every `every` ns after the start, before the last row) the first
    quiet time at or after it (None: none within the search), in ns after the start."""

    targets: list[int] = field(default_factory=list)
    points: list[int | None] = field(default_factory=list)
    length: int = 0  # the recording's last row's ts, after its start
    windowed: bool = False  # it has capture windows of its own (WINDOW rows)


def quiet_points(batches: Iterable[EventBatch], every: int, search: int) -> Scan:
    """The first *quiet* time at or after each multiple of `every` (ns after the recording's start, the first
    row's `begin`), within `search` ns: one at which no call is under way (no row's [begin, ts] holds it) and no
    asynchronous copy awaits its GPU_COPY_DONE. Reads every batch (a copy may complete long after it was issued);
    keeps only the rows near the targets."""
    busy = _Busy(search)
    scan = Scan()
    first: int | None = None
    waiting: dict[tuple[int, int], int] = {}  # (pid, seq) of an asynchronous copy -> its begin
    for batch in batches:
        if not len(batch):
            continue
        kind, begin, ts = batch["kind"], batch["begin"], batch["ts"]
        if first is None:
            first = int(begin[0])
        top = int(ts[-1])  # rows come by ts: targets up to here are passed
        while first + every * (len(busy.targets) + 1) <= top:
            busy.target(first + every * (len(busy.targets) + 1))
        busy.add(begin, ts)
        scan.length = max(scan.length, top - first)
        scan.windowed = scan.windowed or bool((kind == EventKind.WINDOW).any())
        for r in np.flatnonzero((kind == EventKind.GPU_COPY) | (kind == EventKind.GPU_COPY_DONE)).tolist():
            key = (int(batch["pid"][r]), int(batch["seq"][r]))
            if kind[r] == EventKind.GPU_COPY:
                if batch["content"][r] & _CONTENT_AFTER_LATER:
                    waiting[key] = int(begin[r])
            elif key in waiting:
                busy.add(np.array([waiting.pop(key)], np.int64), ts[r:r + 1].astype(np.int64))
    for start in waiting.values():  # never completed: under way to the end
        busy.add(np.array([start], np.int64), np.array([np.iinfo(np.int64).max - 1], np.int64))
    if first is not None:
        last = first + scan.length
        scan.targets = [t - first for t in busy.targets if t < last]
        found = [busy.first_quiet(i) for i in range(len(scan.targets))]
        scan.points = [None if x is None or x >= last else x - first for x in found]
    return scan


# -- what a part hands to the next ------------------------------------------------------------------
@dataclass
class Carried:
    """Mirror pieces alive at a part's end (memq_carried_piece rows without their time) and their holders
    (memq_carried_holder rows)."""

    pieces: list[tuple] = field(default_factory=list)  # (id, write, pid, dst, src, bytes, direction, content,
    #                                                     src_key, dst_key)
    holders: list[tuple] = field(default_factory=list)  # (piece, side, kind, addr, size)


def carry_out(engine: Any, end: int) -> Carried:
    """The mirror pieces alive at `end` (trace_processor's clock), the end of this part (memq_mirror_carry),
    numbered for the next part."""
    pieces = engine.rows(f"""INCLUDE PERFETTO MODULE memq.mirrors;
        SELECT * FROM memq_mirror_carry({end})""").records()
    holders = engine.rows(f"SELECT * FROM memq_mirror_carry_holder({end})").records()
    number = {p["piece_id"]: i for i, p in enumerate(pieces, 1)}
    writes: dict[int, int] = {}
    out = Carried()
    for p in pieces:
        write = writes.setdefault(p["write"], len(writes) + 1)
        out.pieces.append((number[p["piece_id"]], write, p["pid"], p["dst"], p["src"], p["bytes"], p["direction"],
                           p["content"], p["src_key"], p["dst_key"]))
    out.holders = [(number[h["piece_id"]], h["side"], h["kind"], h["addr"], h["size"]) for h in holders]
    return out


def _sql_value(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return str(int(value))


def _insert(engine: Any, table: str, rows: list[tuple]) -> None:
    for lo in range(0, len(rows), _INSERT_ROWS):
        values = ",".join("(" + ",".join(_sql_value(v) for v in row) + ")" for row in rows[lo:lo + _INSERT_ROWS])
        engine.rows(f"INSERT INTO {table} VALUES {values}")


def carry_in(engine: Any, carried: Carried, start: int | None) -> None:
    """Fill memq.carried in `engine` (a part's trace, no memq module included yet) with what the previous part
    left alive: the pieces come in at this part's `start` (trace_processor's clock)."""
    engine.rows("INCLUDE PERFETTO MODULE memq.carried")
    if not carried.pieces:
        return
    _insert(engine, "memq_carried_piece", [(p[0], p[1], p[2], start, *p[3:]) for p in carried.pieces])
    _insert(engine, "memq_carried_holder", carried.holders)


# -- the parts in turn ------------------------------------------------------------------------------
@dataclass
class Part:
    """One part of the recording, converted and loaded, with what the previous part carried in."""

    index: int
    count: int
    span: Range
    report: RangeReport
    engine: Any
    start: int | None  # the part's start on trace_processor's clock (None: the first part)
    end: int | None  # ... and its end (None: the last part)


@dataclass
class Plan:
    """Where a recording is cut."""

    spans: list[Range]
    windowed: bool  # the recording has capture windows of its own
    search: int  # ns after each cut's target searched for a quiet time
    missed: int = 0  # cuts dropped: no quiet time within `search` of them (their parts are joined)
    note: str | None = None  # why each part decodes the recording from its start (None: its own packets alone)


MAX_PARTS = 1000  # parts of one recording: each is a conversion and a trace_processor of its own


def recording_length_ns(trace_dir: Path) -> int | None:
    """The recording's length from its packet headers (ctf2perfetto.ctf.check: no event is decoded), from the
    first packet's begin to the last one's end over every trace; None when no trace says."""
    from ctf2perfetto.ctf.check import TraceProblem, check_trace
    from ctf2perfetto.ctf.decode import find_traces

    first = last = None
    for trace in find_traces(trace_dir):
        try:
            check = check_trace(trace)
        except TraceProblem:
            continue  # the decode says what is wrong with it
        meta = check.metadata
        for scan in check.streams.values():
            if scan.packets and not scan.stray:
                begin = meta.clock_offset_ns + meta.to_ns(scan.packets[0].ts_begin)
                end = meta.clock_offset_ns + meta.to_ns(max(p.ts_end for p in scan.packets))
                first = begin if first is None else min(first, begin)
                last = end if last is None else max(last, end)
    return None if first is None else max(last - first, 0)


def plan(trace_dir: Path, every_s: float, stage: Stage = no_stage) -> Plan:
    """The parts of about `every_s` seconds of an LTTng trace directory, cut at the first quiet time after each
    multiple of it (one decoding pass), each with the Lead it starts from (a second pass: leads.py), so that its
    conversion decodes its own packets alone."""
    from ctf2perfetto.ctf.decode import decode

    if not every_s > 0 or every_s >= 1e9:  # NaN fails this too
        raise UsageError(f"--parts {every_s}: not a length of time in seconds (more than 0)")
    every = max(round(every_s * _NS), 1)
    length = recording_length_ns(trace_dir)
    if length is not None and length // every + 1 > MAX_PARTS:
        raise UsageError(f"--parts {every_s:g} s would cut the {length / _NS:.3g} s recording into "
                         f"{length // every + 1:,} parts (at most {MAX_PARTS:,}: each is a trace_processor of "
                         f"its own); give parts of {length / MAX_PARTS / _NS:.3g} s or more")
    search = max(min(SEARCH_NS, every // 10), 1)
    with stage("finding quiet times to cut the recording at"):
        with decode(trace_dir, batch_size=PASS_BATCH) as decoding:
            scan = quiet_points(iter(decoding), every, search)
    bounds = sorted({x for x in scan.points if x is not None and x > 0})
    starts = [BEGINNING] + bounds
    cuts = Plan([Range(a, b) for a, b in zip(starts, bounds + [None])], scan.windowed, search,
                sum(x is None for x in scan.points))
    cuts.note = _lead(trace_dir, cuts.spans, stage)
    return cuts


def _lead(trace_dir: Path, spans: list[Range], stage: Stage) -> str | None:
    """Gives each span its Lead (one pass); what stops that, in one line (each part then decodes the recording
    from its start), or None."""
    from ctf2perfetto.convert.job import is_job
    from ctf2perfetto.convert.leads import make_leads
    from ctf2perfetto.ctf.decode import decode
    from ctf2perfetto.ctf.excerpt import NoExcerpt, packet_table

    if len(spans) < 2:
        return None  # one part: the whole recording, read once anyway
    if is_job(trace_dir):
        return "the recordings of a job are read together"
    try:
        packets = packet_table(trace_dir)
    except NoExcerpt as exc:
        return str(exc)
    with stage(f"carrying the state at each of the {len(spans) - 1} cuts (one pass)"):
        with decode(trace_dir, batch_size=PASS_BATCH) as decoding:
            leads = make_leads(decoding, spans, packets)
    for span, lead in zip(spans, leads):
        span.lead = lead
    return None


def each_part(spans: list[Range], make: Callable[[Range, Path], ConvertSummary], *,
              trace_processor: str | None = None, stage: Stage = no_stage) -> Iterator[Part]:
    """Each part in turn, written by `make(span, path)` (a conversion of the span, its summary holding the
    RangeReport), in a fresh trace_processor that has taken in the mirrors the previous part left alive (memory:
    one part at a time), here in this process (cluster.each_part runs them on Dask workers)."""
    from ctf2perfetto.inputs import open_file

    carried, count = Carried(), len(spans)
    with tempfile.TemporaryDirectory(prefix="memq-parts-") as tmp:
        path = Path(tmp) / "part.pftrace"
        for i, span in enumerate(spans):
            what = "the start" if span.start == BEGINNING else f"{span.start / _NS:.3f} s"
            what += " to " + ("the end" if span.end is None else f"{span.end / _NS:.3f} s")
            with stage(f"part {i + 1} of {count} ({what}): converting"):
                summary = make(span, path)
            report = summary.range_report
            zero = report.first_ts + summary.trace_offset_ns  # the recording's start on trace_processor's clock
            start = None if span.start == BEGINNING else zero + span.start
            end = None if span.end is None else zero + span.end
            with open_file(path, trace_processor=trace_processor) as engine:
                carry_in(engine, carried, start)
                yield Part(i, count, span, report, engine, start, end)
                carried = carry_out(engine, end) if end is not None else Carried()
            os.unlink(path)
