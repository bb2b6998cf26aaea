"""A time range of a recording, converted as if a capture window had recorded it (`ctf2perfetto --from/--to`).

The analyses hold their whole trace in trace_processor, so an hours-long recording is
analysed a range at a time: converting a range bounds the trace, and every analysis of
it, by the range, not by the run. `clip()` sits between the decoder and the writer and
turns the decoded batches into the batches a `memq record --delay/--duration` window
over that range would have held (windows.py), so everything downstream (model, writer,
SQL) treats a range as the window it is:

* Times are nanoseconds after the start of the trace: the `begin` of its first row (the
  first call to return; 0 on the timeline of the whole trace's conversion, unless a call
  that began earlier returned later). A call belongs to the range when
  it returns in it (`from <= ts <= to`); one that began before `from` is cut there
  (`begin = from`), so nothing of the range lies outside it.
* The memory model runs over everything before `from` (memory bounded by the live
  allocations, as in a conversion). At `from` each process seen before it opens a window
  (cause `range`) with one LIVE row per allocation then live, in the order they were made
  (the latest started holds a byte, as in the whole trace), and one HOST_SMALL row with the
  totals of its blocks below the threshold so far: what the preload writes when a window
  opens. A process first seen in the range opens its window at its first event (cause
  `delay`: a process started inside a window). Small-block totals alone do not make a
  process seen (the preload writes them at thread exit outside windows too): one seen
  before only through them gets its totals at `from`, and no window.
* A recording with windows of its own is intersected: a window open at `from` is
  reopened there under its own index; a process whose window is closed at `from` gets
  only its small-block totals, and its next window passes through.
* At `to`, each window still open closes (cause `range`), and its allocations still live
  outlived the range (not leaks), as at any early close. When the trace ends before `to`
  nothing closes: what is live at the end is a leak, as in the whole trace.
* GPU_COPY_DONE rows of copies made before the range are dropped (their copy is not
  there). LOST rows pass whatever their time: loss is never dropped.
* Events after `to` are still decoded (the loss and completeness checks read every file)
  and counted, not written; only their loss, and per process the totals of its host blocks
  below the threshold, at the last of them: the preload writes those totals at thread and
  process exit outside windows too, so small blocks leak as in the whole trace.

A range with a `Lead` (leads.py: the parts of a recording) makes the same batches from its own
packets alone: what the model and the windows know at `from`, the loss before, in and after the
range and what follows `to` come from the Lead, made by one pass over the recording.
"""
from __future__ import annotations

import copy
import dataclasses
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import numpy as np

from ctf2perfetto.ctf.excerpt import PacketTable
from ctf2perfetto.errors import UsageError
from ctf2perfetto.events import EventBatch, EventKind, MemKind, TraceInfo, WindowCause
from ctf2perfetto.convert.liveset import Allocs
from ctf2perfetto.convert.model import MemoryModel
from ctf2perfetto.convert.windows import Windows

_NS = 1_000_000_000
_CONTENT_AFTER_LATER = 8  # GPU_COPY `content` bit: the after-fingerprint comes in a GPU_COPY_DONE row


@dataclass
class Range:
    """The part of a recording to convert: nanoseconds after its start (`end` None: to its end)."""

    start: int = 0
    end: int | None = None
    # What the range starts from when it reads only its own packets (parts.py makes it); None: the whole
    # recording is read, from its start.
    lead: "Lead | None" = field(default=None, compare=False, repr=False)

    @classmethod
    def from_seconds(cls, start: float | None, end: float | None) -> "Range | None":
        """The range of `--from SEC --to SEC` (None when neither is given); bad values are a UsageError."""
        if start is None and end is None:
            return None
        for name, value in (("--from", start), ("--to", end)):
            if value is not None and not (0 <= value < 1e9):  # NaN fails this too
                raise UsageError(f"{name} {value}: not a time in seconds after the start of the trace (0 to 1e9)")
        if end is not None and end <= (start or 0):
            raise UsageError(f"--to {end} is not after --from {start or 0}")
        return cls(round((start or 0) * _NS), None if end is None else round(end * _NS))

    def describe(self) -> str:
        """`600.000 s to 900.000 s` (seconds after the start of the trace)."""
        return f"{self.start / _NS:.3f} s to " + ("the end" if self.end is None else f"{self.end / _NS:.3f} s")


@dataclass
class RangeReport:
    """What clip() left out and made (for the summary)."""

    first_ts: int | None = None  # the start of the trace's first call (the range's zero)
    before: int = 0  # events before the range, not written (LOST rows excepted)
    after: int = 0  # events after it, not written
    done_dropped: int = 0  # GPU_COPY_DONE rows of copies made before the range
    lost_before: int = 0  # LOST rows before the range (what they lost may be missing from its live snapshot)
    opened: int = 0  # windows opened at the range's start (or at a process's first event in it)
    closed: int = 0  # windows closed at its end
    live: int = 0  # LIVE rows made at its start
    first_alloc_id: int = 1  # the whole trace's id of the range's first allocation after them (parts.py)
    decoded: int = 0  # rows the range's decoder read (all the recording's, unless it started from a Lead)
    ended_before: bool = False  # the trace ended before the range's end

    def warnings(self) -> list[str]:
        """What the user must know about the range's figures."""
        warnings = []
        if self.lost_before:
            warnings.append(f"{self.lost_before:,} losses before --from: allocations or frees among what they lost "
                            "are missing from the allocations live at its start")
        if self.ended_before:
            warnings.append("the trace ends before --to: nothing closed there, and what is live at the end is "
                            "reported as leaks")
        return warnings


class _ApiNames:
    """The clipped batches' function names: the decoder's, in its order as they come, plus "" (a window opened or
    closed by no call). The decoder's list is its own (it checks its numbering), so the clipped batches carry this
    one and their `api` column is mapped onto it."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.index: dict[str, int] = {}
        self.of_decoder = np.zeros(0, np.uint16)  # decoder's api index -> index here

    def name(self, text: str) -> int:
        if text not in self.index:
            self.index[text] = len(self.names)
            self.names.append(text)
        return self.index[text]

    def mapped(self, batch: EventBatch) -> EventBatch:
        """`batch` with its `api` column on this list (its other columns shared, not copied)."""
        known = len(self.of_decoder)
        if len(batch.api_names) > known:
            new = [self.name(t) for t in batch.api_names[known:]]
            self.of_decoder = np.concatenate([self.of_decoder, np.array(new, np.uint16)])
        columns = dict(batch.columns)
        if len(batch):
            lut, top = self.of_decoder, int(batch["api"].max())
            if top >= len(lut):  # rows that name no function (api 0) before the decoder has named any: ""
                lut = np.concatenate([lut, np.full(top + 1 - len(lut), self.name(""), np.uint16)])
            columns["api"] = lut[batch["api"]]
        return EventBatch(columns, self.names)


def _rows(names: _ApiNames, rows: list[dict]) -> EventBatch:
    """A batch of made rows (dicts of column values; `api` a name, "" when absent)."""
    return EventBatch.from_rows([{**row, "api": names.name(row.get("api", ""))} for row in rows], names.names)


@dataclass
class Start:
    """What clip() knows at a range's start from everything before it: what `_open` writes there and the window
    state the range goes on from. A pass over the recording (`Before.start`) makes one per cut, so that a range
    can start there without reading what came before (parts.py); picklable, bounded by what is live then."""

    names: list[str]  # the clipped batches' function names so far (`live.tag` indexes them)
    live: Allocs  # the allocations live at the start
    next_id: int  # the model's id of the next allocation
    windows: Windows  # the recording's own windows before the range
    tid: dict[int, int]  # pid -> a thread of it (its last one seen before the range)
    seen: set[int]  # processes with events before the range (small-block totals aside)
    small: dict[int, list[int]]  # pid -> its HOST_SMALL rows before the range, summed (add_small)
    before: int  # events before the range (LOST rows excepted)
    lost_before: int  # LOST rows before the range
    last_ts: int  # of the last event before the range


class Before:
    """clip()'s state before its range: the model and the windows over everything before `from`, nothing
    written but loss (`add` returns the LOST rows, which pass)."""

    def __init__(self, names: "_ApiNames") -> None:
        self.names = names
        self.model = MemoryModel()  # the allocations live at the range's start
        self.windows = Windows()  # the recording's own windows before the range
        self.tid: dict[int, int] = {}
        self.seen: set[int] = set()
        self.small: dict[int, list[int]] = {}
        self.before = self.lost_before = self.last_ts = 0

    def add(self, batch: EventBatch) -> EventBatch:
        """Takes in `batch` (rows before the range, its `api` on `names`); returns its LOST rows."""
        kind = batch["kind"]
        self.last_ts = int(batch["ts"][-1])
        for part, closed in self.windows.split(batch):
            self.model.process(part)
            self.model.set_tags(part["api"].astype(np.int64))  # LIVE rows are named after the allocating call
            self.windows.note(part, np.zeros(0, np.int64))
            if closed is not None:
                self.model.end_process(*closed)
        pid = batch["pid"]
        real = kind != EventKind.LOST
        backwards_pid, backwards_tid = pid[real][::-1], batch["tid"][real][::-1]
        uniq, last = np.unique(backwards_pid, return_index=True)
        self.tid.update(zip(uniq.tolist(), backwards_tid[last].tolist()))
        self.seen.update(np.unique(pid[_makes_seen(kind)]).tolist())
        add_small(batch, self.small)
        self.before += int(real.sum())
        self.lost_before += int((~real).sum())
        return batch.take(~real)

    def start(self, keep: bool = False) -> Start:
        """The state at the range's start; `keep`: copied, for a model that goes on (else this one is spent)."""
        own = copy.deepcopy if keep else (lambda x: x)
        return Start(list(self.names.names), self.model.live.all(), self.model.next_id, own(self.windows),
                     dict(self.tid), set(self.seen), {pid: list(v) for pid, v in self.small.items()}, self.before,
                     self.lost_before, self.last_ts)


@dataclass
class Lead:
    """Everything a range needs from the rest of its recording when it reads only its own packets (parts.py makes
    one per cut in one pass): its Start, the recording's loss (every range writes all of it), what follows its end
    (counted there, not read here), and the decoder's whole-run TraceInfo and clock reference."""

    start: Start
    first_ts: int  # the recording's first row's begin (the range's zero)
    lost: EventBatch  # the recording's LOST rows (their `api` on their own `api_names`)
    lost_at: np.ndarray  # per LOST row: how many rows come before it in the recording
    rows_after: bool  # a row comes after the range's end
    after: int  # events after the range (LOST rows excepted)
    small_after: dict[int, list[int]]  # pid -> its HOST_SMALL rows after the range, summed (add_small)
    info: TraceInfo  # the whole recording's, as its decode completed it
    reference_ns: int  # the decoder's clock reference (its rows' time 0 from the clock origin)
    packets: PacketTable  # the recording's packets, with their times (the range reads its own)


class _Clipper:
    """clip()'s state: before the range (Before, or a Lead made by a pass over the recording), in it, after it."""

    def __init__(self, span: Range, report: RangeReport) -> None:
        self.span = span
        self.report = report
        self.names = _ApiNames()
        self.lead: Lead | None = span.lead
        self.state: Before | None = Before(self.names) if self.lead is None else None
        self.windows = Windows()  # the range's windows (the recording's own before it, taken from the start)
        self.tid: dict[int, int] = {}
        self.small_after: dict[int, list[int]] = {}  # pid -> its HOST_SMALL rows after the range, summed
        self.lost_after: list[EventBatch] = []  # LOST rows after the range
        self.in_range: set[int] = set()  # processes whose window state the range has settled
        self.waiting_done: set[tuple[int, int]] = set()  # (pid, seq) of copies in the range awaiting COPY_DONE
        self.start = self.end = 0  # absolute ns, set at the first event
        self.phase = 0  # 0 before the range, 1 in it, 2 after it

    def _zero(self, first_ts: int) -> None:
        self.report.first_ts = first_ts
        self.start = first_ts + self.span.start
        self.end = np.iinfo(np.int64).max if self.span.end is None else first_ts + self.span.end

    def batches(self, batches: Iterable[EventBatch]) -> Iterator[EventBatch]:
        if self.lead is not None:
            yield from self._resumed(batches)
            return
        for raw in batches:
            if len(raw) == 0:
                continue
            self.report.decoded += len(raw)
            batch = self.names.mapped(raw)
            if self.report.first_ts is None:  # the first row's begin: not the batching's choice
                self._zero(int(batch["begin"][0]))
            ts = batch["ts"]
            cut_start = int(np.searchsorted(ts, self.start, "left")) if self.phase == 0 else 0
            cut_end = int(np.searchsorted(ts, self.end, "right")) if self.phase < 2 else 0
            parts = []
            if cut_start > 0:
                parts.append(self.state.add(batch.take(slice(0, cut_start))))
            if self.phase == 0 and cut_start < len(batch):
                parts.append(self._open(self.state.start()))
            if self.phase == 1 and cut_end > cut_start:
                parts.append(self._inside(batch.take(slice(cut_start, cut_end))))
            if cut_end < len(batch) and self.phase == 1:
                parts.append(self._close())
            if self.phase == 2 and max(cut_start, cut_end) < len(batch):
                parts.append(self._after(batch.take(slice(max(cut_start, cut_end), len(batch)))))
            out = EventBatch.concat(parts, self.names.names)
            if len(out):
                yield out
        if self.report.first_ts is None:
            return
        if self.phase == 2:
            last = self._last()
            if len(last):
                yield last
        if self.phase == 0:
            raise UsageError(f"--from {self.span.start / _NS:g}: the trace ends before it (its events span "
                             f"{(self.state.last_ts - self.report.first_ts) / _NS:.3f} s)")
        self.report.ended_before = self.phase == 1 and self.span.end is not None

    # -- a range that reads only its own packets, from its Lead -------------------------------------------
    def _resumed(self, batches: Iterable[EventBatch]) -> Iterator[EventBatch]:
        """The batches clip() makes from the whole recording, made from the range's packets (`batches`: rows
        from some time before its start on, their LOST rows the decoder's own) and its Lead: the rows before
        the start and after the end are the Lead's (its loss where the whole recording has it), not read."""
        lead = self.lead
        self._zero(lead.first_ts)
        for name in lead.start.names:  # the function names in the whole recording's order, as far as it goes
            self.names.name(name)
        lost = _lost_rows(self.names, lead.lost)
        first_in = int(np.searchsorted(lost["ts"], self.start, "left"))
        past = int(np.searchsorted(lost["ts"], self.end, "right"))
        # Per LOST row of the range: how many of the range's other rows come before it in the whole recording.
        ahead = lead.lost_at[first_in:past] - lead.start.before - lead.start.lost_before - np.arange(past - first_in)
        start = dataclasses.replace(lead.start, windows=copy.deepcopy(lead.start.windows), tid=dict(lead.start.tid))
        yield EventBatch.concat([lost.take(slice(0, first_in)), self._open(start)], self.names.names)  # the Lead
        # stays as it is: a part converted again (a Dask worker lost) starts from it again
        read = put = 0  # the range's rows read, its LOST rows put among them
        for raw in batches:
            if len(raw) == 0:
                continue
            self.report.decoded += len(raw)
            batch = self.names.mapped(raw)
            batch = batch.take(batch["kind"] != EventKind.LOST)  # the decoder's own: the Lead's are the run's
            ts = batch["ts"]
            lo = int(np.searchsorted(ts, self.start, "left"))
            hi = int(np.searchsorted(ts, self.end, "right"))
            if hi > lo:
                mine = batch.take(slice(lo, hi))
                upto = int(np.searchsorted(ahead, read + len(mine), "left"))
                if upto > put:
                    mine = _inserted(mine, lost.take(slice(first_in + put, first_in + upto)), ahead[put:upto] - read,
                                     self.names.names)
                read += hi - lo
                put = upto
                yield self._inside(mine)
            if hi < len(batch):
                break
        rest = lost.take(slice(first_in + put, past))
        if len(rest):
            yield self._inside(rest)
        if not lead.rows_after:
            self.report.ended_before = self.span.end is not None
            return
        self.report.after = lead.after
        self.small_after = lead.small_after
        self.lost_after = [lost.take(slice(past, len(lost)))]
        out = EventBatch.concat([self._close(), self._last()], self.names.names)
        if len(out):
            yield out

    # -- at the range's start: the window openings, what is live, the small blocks' totals -------------------
    def _open(self, start: Start) -> EventBatch:
        self.phase = 1
        self.windows, self.tid = start.windows, start.tid
        self.report.before, self.report.lost_before = start.before, start.lost_before
        at, rows = self.start, []
        live = start.live
        has_windows = {pid for pid, _ in self.windows.by_key}
        for pid in sorted(self.tid):
            tid = self.tid[pid]
            # between two of its own windows its next opening comes in the range; small blocks alone open none
            opens = pid in start.seen and not (pid in has_windows and pid not in self.windows.current)
            if pid in start.seen:
                self.in_range.add(pid)
            if opens:
                rows.append(dict(kind=EventKind.WINDOW, ts=at, pid=pid, tid=tid, aux=1, aux2=WindowCause.RANGE,
                                 flags=self.windows.current.get(pid, 0)))
            # The small blocks' totals, then the allocations live (any order gives the same counter: the writer
            # keeps the samples of one time in row order).
            if pid in start.small:
                size, freed, allocated, frees, _, _ = start.small[pid]
                rows.append(dict(kind=EventKind.HOST_SMALL, ts=at, pid=pid, tid=tid, size=size, flags=freed,
                                 aux=allocated, aux2=frees))
            if not opens:
                continue
            mine = np.flatnonzero(live.pid == pid)
            mine = mine[np.lexsort((live.alloc_id[mine], live.start[mine]))]
            for i in mine.tolist():
                rows.append(dict(kind=EventKind.LIVE, ts=at, pid=pid, tid=tid, ptr=live.addr[i], size=live.size[i],
                                 mem=live.mem[i], device=live.device[i] if live.mem[i] != MemKind.HOST else 0,
                                 api=_api_name(start.names, int(live.tag[i]))))
            self.report.opened += 1
            self.report.live += len(mine)
        # The whole trace numbers allocations in the order they start; the range's own after its LIVE rows.
        self.report.first_alloc_id = start.next_id
        self.state = None  # its live set is written: free it
        return self._noted(_rows(self.names, rows))

    # -- in the range: rows as they are, cut at its start; processes new to it open their window ------------
    def _inside(self, batch: EventBatch) -> EventBatch:
        batch.columns["begin"] = np.maximum(batch["begin"], self.start)
        kind = batch["kind"]
        keep = np.ones(len(batch), bool)
        if int(kind.max()) >= EventKind.GPU_COPY:
            keep &= self._copy_done_kept(batch)
        pid = batch["pid"]
        real = _makes_seen(kind)
        new = [p for p in np.unique(pid[real]).tolist() if p not in self.in_range]
        parts, lo = [], 0
        for first in sorted(int(np.flatnonzero((pid == p) & real)[0]) for p in new):
            p = int(pid[first])
            parts.append(batch.take(np.flatnonzero(keep[lo:first]) + lo))
            self.in_range.add(p)
            self.tid[p] = int(batch["tid"][first])
            if not (kind[first] == EventKind.WINDOW and batch["aux"][first] == 1):
                parts.append(_rows(self.names, [dict(kind=EventKind.WINDOW, ts=int(batch["ts"][first]), pid=p,
                                                     tid=int(batch["tid"][first]), aux=1, aux2=WindowCause.DELAY)]))
                self.report.opened += 1
            lo = first
        parts.append(batch.take(np.flatnonzero(keep[lo:]) + lo))
        return self._noted(EventBatch.concat(parts, self.names.names))

    def _copy_done_kept(self, batch: EventBatch) -> np.ndarray:
        """False for the GPU_COPY_DONE rows of copies made before the range."""
        kind, keep = batch["kind"], np.ones(len(batch), bool)
        for r in np.flatnonzero((kind == EventKind.GPU_COPY) | (kind == EventKind.GPU_COPY_DONE)).tolist():
            key = (int(batch["pid"][r]), int(batch["seq"][r]))
            if kind[r] == EventKind.GPU_COPY:
                if batch["content"][r] & _CONTENT_AFTER_LATER:
                    self.waiting_done.add(key)
            elif key in self.waiting_done:
                self.waiting_done.discard(key)
            else:
                keep[r] = False
                self.report.done_dropped += 1
        return keep

    def _noted(self, batch: EventBatch) -> EventBatch:
        if len(batch):
            self.windows.note(batch, np.zeros(0, np.int64))
        return batch

    # -- at the range's end: every window still open closes -----------------------------------------------
    def _close(self) -> EventBatch:
        self.phase = 2
        rows = [dict(kind=EventKind.WINDOW, ts=self.end, pid=pid, tid=self.tid[pid], aux=0,
                     aux2=WindowCause.RANGE, flags=index) for pid, index in sorted(self.windows.current.items())]
        self.report.closed += len(rows)
        return self._noted(_rows(self.names, rows))

    def _after(self, batch: EventBatch) -> EventBatch:
        """Nothing now: loss and the small blocks' totals wait for the end (_last)."""
        kind = batch["kind"]
        lost = kind == EventKind.LOST
        self.report.after += int((~lost).sum())
        if lost.any():
            self.lost_after.append(batch.take(lost))
        add_small(batch, self.small_after)
        return batch.take(slice(0, 0))

    def _last(self) -> EventBatch:
        """After the range, in time order: its loss, and per process one HOST_SMALL row with the totals of its
        small blocks after it, at the last of them. Those totals are written at thread and process exit, windows or
        not, so the leaks report counts what was live at the exit, as in the whole trace (sql/memq/leaks.sql)."""
        rows = []
        for pid, (size, freed, allocated, frees, ts, tid) in sorted(self.small_after.items()):
            rows.append(dict(kind=EventKind.HOST_SMALL, ts=ts, pid=pid, tid=tid, size=size, flags=freed,
                             aux=allocated, aux2=frees))
        out = EventBatch.concat(self.lost_after + [_rows(self.names, rows)], self.names.names)
        return out.take(np.argsort(out["ts"], kind="stable"))

def add_small(batch: EventBatch, sums: dict[int, list[int]]) -> None:
    """Adds the HOST_SMALL rows of `batch` to per-process sums [size, flags, aux, aux2, last ts, its tid]."""
    rows = np.flatnonzero(batch["kind"] == EventKind.HOST_SMALL)
    pids = batch["pid"][rows]
    for pid in np.unique(pids).tolist():
        mine = rows[pids == pid]
        total = sums.setdefault(pid, [0] * 6)
        for i, column in enumerate(("size", "flags", "aux", "aux2")):
            total[i] += int(batch[column][mine].sum())
        total[4], total[5] = int(batch["ts"][mine[-1]]), int(batch["tid"][mine[-1]])


def _api_name(names: list[str], api: int) -> str:
    return names[api] if 0 <= api < len(names) else ""


def _lost_rows(names: _ApiNames, lost: EventBatch) -> EventBatch:
    """A Lead's LOST rows with their `api` on `names` (by function name: the Lead's decoder numbered its own)."""
    out = EventBatch(dict(lost.columns), names.names)
    if len(lost):
        out.columns["api"] = np.array([names.name(_api_name(lost.api_names, a)) for a in lost["api"].tolist()],
                                      np.uint16)
    return out


def _inserted(rows: EventBatch, extra: EventBatch, where: np.ndarray, api_names: list[str]) -> EventBatch:
    """`rows` with `extra`'s rows put in, each before the row of `rows` at its `where` (ascending)."""
    at = where + np.arange(len(where))  # each one put in moves those after it by one
    taken = np.zeros(len(rows) + len(extra), bool)
    taken[at] = True
    order = np.empty(len(taken), np.int64)
    order[~taken] = np.arange(len(rows))
    order[taken] = len(rows) + np.arange(len(extra))
    return EventBatch.concat([rows, extra], api_names).take(order)


def _makes_seen(kind: np.ndarray) -> np.ndarray:
    """Rows that show a process running (for its windows): not loss, not small-block totals."""
    return (kind != EventKind.LOST) & (kind != EventKind.HOST_SMALL)


def clip(batches: Iterable[EventBatch], span: Range, report: RangeReport) -> Iterator[EventBatch]:
    """The batches a capture window over `span` would have held (see the module docstring); `report` is filled
    as they go (complete after the last)."""
    return _Clipper(span, report).batches(batches)
