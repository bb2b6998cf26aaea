"""The whole run's figures, merged from its parts (`memq duplicated|redundant|summary|leaks DIR --parts 10m`).

trace_processor holds its whole trace, so analysing an hours-long recording at once takes memory in
proportion to the run. parts.py cuts the recording into parts of about the asked length at quiet
times, converts each as a range and loads it in a fresh trace_processor that first takes in the
mirror pieces the previous part left alive: memory is bounded by a part and what is live, and each
part's figures are those of the whole trace over the part. Here they are merged into the whole run's:

* duplicated: per (grouping, process, key) the highest peak and when it was first reached, the
  integrals (byte*ns) added, the mean over the whole run's recorded time (its trace window, or the
  union of its capture windows); allocation keys are the whole trace's ids
  (ranges.RangeReport.first_alloc_id, and the allocations live at each cut followed into the next
  part by process, kind, address and size: _AllocIds).
* redundant: counts, bytes, summed and wall-clock time added: every copy lies in one part (no cut
  falls inside a call), so the parts' wall-clock unions do not overlap.
* summary: calls, copies, busy time added; peaks the highest, first reached; allocations made counted
  once (a part's LIVE rows are not made there); the host blocks below the threshold, which every
  part holds in full, once.
* leaks: what each part has live when a process exits, and the last part at its end, as the whole
  trace has those allocations (when made); allocations that outlived a window of the recording's own.
* capture windows: a window cut by the parts is one window again; a recording without windows of
  its own has none (the parts' are the cuts').
* warnings: loss as the last part counts it (every part holds every loss), unmatched frees, skipped
  events and unplaced copies added up.

Each `*_of_parts` function takes the parts in time order (parts.each_part), so tests feed it parts of
generated logs as the command line feeds it parts of a recording.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ctf2perfetto.analysis.base import (module_rows, source_info, warning_counts, warning_lines, windows_rows,
                                       with_windows_note)
from ctf2perfetto.analysis.parts import Part, Plan, Stage, each_part, plan
from ctf2perfetto.convert.ranges import Range
from ctf2perfetto.convert.write import ConvertSummary
from ctf2perfetto.engine.rows import Rows, is_null
from ctf2perfetto.errors import UsageError


@dataclass
class Whole:
    """The whole run's trace window, sources, capture windows and warnings, from its parts."""

    windowed: bool
    start: int | None = None
    end: int = 0
    recorded: int = 0  # summed over the parts (used with windows of the recording's own)
    names: set[str] = field(default_factory=set)
    addressed: bool = False
    has_events: bool = False
    windows: dict[tuple[int, int], dict[str, Any]] = field(default_factory=dict)
    meta: list[dict[str, int]] = field(default_factory=list)
    summed: dict[str, int] = field(default_factory=dict)  # unmatched_frees, skipped_events over the parts
    unplaced: int = 0
    problems: dict[str, int] = field(default_factory=dict)

    def add(self, part: Part) -> None:
        engine = part.engine
        trace = module_rows(engine, ("trace",), "SELECT start_ts, end_ts, recorded_dur FROM memq_trace"
                                     ).records()[0]
        if self.start is None:
            self.start = int(trace["start_ts"])
        self.end = int(trace["end_ts"])
        names, addressed, has_events = source_info(engine)
        self.names.update(names)
        self.addressed, self.has_events = self.addressed or addressed, self.has_events or has_events
        if self.windowed:
            windows = windows_rows(engine).records()
            if windows:  # a part in no window recorded nothing (its recorded time is its trace's, without windows)
                self.recorded += int(trace["recorded_dur"])
            for w in windows:
                key = (int(w["pid"]), int(w["window"]))
                if key in self.windows:  # cut by the parts: it goes on (ends, and closes, later)
                    first = self.windows[key]
                    first.update(end_ts=w["end_ts"], dur=int(w["end_ts"]) - int(first["ts"]),
                                 close_cause=w["close_cause"], close_api=w["close_api"])
                else:
                    self.windows[key] = w
        meta, unplaced, problems = warning_counts(engine)
        self.meta = meta  # every part holds every loss: the last one's counts
        for row in meta:
            for name in ("unmatched_frees", "skipped_events"):
                self.summed[name] = self.summed.get(name, 0) + row[name]
        self.unplaced += unplaced
        for name, value in problems.items():
            self.problems[name] = self.problems.get(name, 0) + value

    def window(self) -> dict[str, Any]:
        """memq_trace's start_ts, end_ts and recorded_dur of the whole run."""
        start = self.start or 0
        return {"start_ts": start, "end_ts": self.end,
                "recorded_dur": self.recorded if self.windowed else self.end - start}

    def info(self) -> tuple[list[str], bool, bool]:
        return sorted(self.names), self.addressed, self.has_events

    def window_rows(self) -> Rows:
        records = [self.windows[k] for k in sorted(self.windows, key=lambda k: (self.windows[k]["ts"], k))]
        columns = list(records[0]) if records else ["pid", "window", "ts", "dur", "end_ts"]
        window = self.window()
        return with_windows_note(Rows.from_records(records, columns, as_query=True), window["recorded_dur"],
                                          window["end_ts"] - window["start_ts"])

    def warnings(self) -> list[str]:
        """trace_warnings of the whole run."""
        meta = [dict(row, **self.summed) for row in self.meta[:1]] + self.meta[1:]
        return warning_lines(meta, self.unplaced, self.problems)


@dataclass(frozen=True)
class Origin:
    """An allocation as the whole trace has it."""

    alloc_id: int
    ts: int  # when it was allocated (a window's start when live_at_start)
    live_at_start: bool  # live when a capture window of the recording opened


class AllocIds:
    """The whole trace's allocations of each part's. A part's own come after its LIVE rows in the order they start,
    as in the whole trace (ids from RangeReport.first_alloc_id); those live at its start (ids 1 to its LIVE rows)
    are the ones live at the previous part's end, found by process, kind, address and size."""

    def __init__(self) -> None:
        self.live: dict[tuple, Origin] = {}  # (pid, kind, addr, size) -> origin, at the previous part's end
        self.origin: dict[int, Origin] = {}  # this part's allocations live at its start or its end, by its id
        self.snapshot = 0  # this part's LIVE rows: its ids 1..snapshot
        self.first = 1

    def of_part(self, part: Part) -> None:
        """Follow the allocations into `part` (parts in order)."""
        self.snapshot, self.first = part.report.live, part.report.first_alloc_id
        end = part.end
        where = f"a.alloc_id <= {self.snapshot} OR a.end_ts IS NULL"
        if end is not None:  # and those live at its end, for the next part
            where += f" OR a.end_ts >= {end}"
        rows = module_rows(part.engine, ("allocations",), f"""
            SELECT a.alloc_id, p.pid, a.kind, a.addr, a.size, a.ts, a.end_ts, a.live_at_start
            FROM memq_allocation a JOIN process p USING (upid) WHERE {where}""").records()
        self.origin = {}
        for r in rows:
            alloc_id = int(r["alloc_id"])
            self.origin[alloc_id] = (self.live[(r["pid"], r["kind"], r["addr"], r["size"])]
                                     if alloc_id <= self.snapshot else
                                     Origin(self.whole(alloc_id), int(r["ts"]), bool(r["live_at_start"])))
        if end is not None:
            self.live = {(r["pid"], r["kind"], r["addr"], r["size"]): self.origin[int(r["alloc_id"])] for r in rows
                         if is_null(r["end_ts"]) or int(r["end_ts"]) >= end}

    def whole(self, alloc_id: int) -> int:
        """The whole trace's id of this part's allocation `alloc_id`."""
        if alloc_id <= self.snapshot:
            return self.origin[alloc_id].alloc_id
        return self.first + alloc_id - self.snapshot - 1


def merged(parts: Iterable[Part], windowed: bool, per_part: Callable[[Part], None], stage: Stage) -> Whole:
    whole = Whole(windowed)
    for part in parts:
        with stage(f"part {part.index + 1} of {part.count}: analysing"):
            whole.add(part)
            per_part(part)
    return whole


def cut(trace_dir: Path, every_s: float, trace_processor: str | None, stage: Stage) -> tuple[Plan, Iterator[Part]]:
    if not Path(trace_dir).is_dir():
        raise UsageError(f"{trace_dir}: --parts needs an LTTng trace directory (a converted trace is analysed "
                         "whole)")
    from ctf2perfetto.pipeline import convert

    cuts = plan(Path(trace_dir), every_s, stage)

    def make(span: Range, path: Path) -> ConvertSummary:
        return convert(Path(trace_dir), path, span=span)

    from ctf2perfetto.analysis import cluster

    client = cluster.current()  # inside cluster.scheduled(): the parts on its Dask workers
    if client is not None:
        return cuts, cluster.each_part(client, cuts.spans, make, trace_processor=trace_processor, stage=stage)
    workers = cluster.default_workers(len(cuts.spans))  # none asked for: the cores, when there is more than one part
    if workers > 1:
        return cuts, cluster.each_part_on_cores(workers, cuts.spans, make, trace_processor=trace_processor,
                                                stage=stage)
    return cuts, each_part(cuts.spans, make, trace_processor=trace_processor, stage=stage)


def finish(rows: Rows, cuts: Plan) -> Rows:
    rows.attrs["parts"] = len(cuts.spans)
    if cuts.note:
        rows.attrs["warnings"].append(f"each part decodes the recording from its start: {cuts.note}")
    if cuts.missed:
        rows.attrs["warnings"].append(
            f"{cuts.missed} cut(s) found no quiet time (no call or copy under way) within {cuts.search / 1e9:g} s "
            "and were left out: those parts are longer")
    return rows


def add_figures(total: dict[str, Any], row: dict[str, Any], columns: tuple[str, ...]) -> None:
    """Sums `columns` of `row` into `total` (NULL + NULL stays NULL)."""
    for c in columns:
        if not is_null(row[c]):
            total[c] = row[c] if is_null(total.get(c)) else total[c] + row[c]


def first_peak(total: dict[str, Any], row: dict[str, Any], value: str, at: str) -> None:
    """The highest `value` of the parts, and the earliest `at` they reach it. Not the first part's: a part's
    counters go on after its end with the blocks below the threshold that the range writes there, which can equal
    the peak a later part reaches first (never pass it: those blocks are live in the whole trace then too)."""
    if is_null(row[value]):
        return
    if is_null(total.get(value)) or row[value] > total[value]:
        total[value], total[at] = row[value], row[at]
    elif row[value] == total[value] and not is_null(row[at]) and (is_null(total[at]) or row[at] < total[at]):
        total[at] = row[at]
