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

from ctf2perfetto import analyses
from ctf2perfetto.traceformat import names as N
from ctf2perfetto.engine.rows import Rows, is_null
from ctf2perfetto.errors import UsageError
from ctf2perfetto.analysis.parts import Part, Plan, Stage, each_part, no_stage, plan
from ctf2perfetto.convert.ranges import Range
from ctf2perfetto.convert.write import ConvertSummary


# -- what every analysis merges ---------------------------------------------------------------------
@dataclass
class _Whole:
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
        trace = analyses.module_rows(engine, ("trace",), "SELECT start_ts, end_ts, recorded_dur FROM memq_trace"
                                     ).records()[0]
        if self.start is None:
            self.start = int(trace["start_ts"])
        self.end = int(trace["end_ts"])
        names, addressed, has_events = analyses.source_info(engine)
        self.names.update(names)
        self.addressed, self.has_events = self.addressed or addressed, self.has_events or has_events
        if self.windowed:
            windows = analyses.windows_rows(engine).records()
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
        meta, unplaced, problems = analyses.warning_counts(engine)
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
        return analyses.with_windows_note(Rows.from_records(records, columns, as_query=True), window["recorded_dur"],
                                          window["end_ts"] - window["start_ts"])

    def warnings(self) -> list[str]:
        """analyses.trace_warnings of the whole run."""
        meta = [dict(row, **self.summed) for row in self.meta[:1]] + self.meta[1:]
        return analyses.warning_lines(meta, self.unplaced, self.problems)


@dataclass(frozen=True)
class _Origin:
    """An allocation as the whole trace has it."""

    alloc_id: int
    ts: int  # when it was allocated (a window's start when live_at_start)
    live_at_start: bool  # live when a capture window of the recording opened


class _AllocIds:
    """The whole trace's allocations of each part's. A part's own come after its LIVE rows in the order they start,
    as in the whole trace (ids from RangeReport.first_alloc_id); those live at its start (ids 1 to its LIVE rows)
    are the ones live at the previous part's end, found by process, kind, address and size."""

    def __init__(self) -> None:
        self.live: dict[tuple, _Origin] = {}  # (pid, kind, addr, size) -> origin, at the previous part's end
        self.origin: dict[int, _Origin] = {}  # this part's allocations live at its start or its end, by its id
        self.snapshot = 0  # this part's LIVE rows: its ids 1..snapshot
        self.first = 1

    def of_part(self, part: Part) -> None:
        """Follow the allocations into `part` (parts in order)."""
        self.snapshot, self.first = part.report.live, part.report.first_alloc_id
        end = part.end
        where = f"a.alloc_id <= {self.snapshot} OR a.end_ts IS NULL"
        if end is not None:  # and those live at its end, for the next part
            where += f" OR a.end_ts >= {end}"
        rows = analyses.module_rows(part.engine, ("allocations",), f"""
            SELECT a.alloc_id, p.pid, a.kind, a.addr, a.size, a.ts, a.end_ts, a.live_at_start
            FROM memq_allocation a JOIN process p USING (upid) WHERE {where}""").records()
        self.origin = {}
        for r in rows:
            alloc_id = int(r["alloc_id"])
            self.origin[alloc_id] = (self.live[(r["pid"], r["kind"], r["addr"], r["size"])]
                                     if alloc_id <= self.snapshot else
                                     _Origin(self.whole(alloc_id), int(r["ts"]), bool(r["live_at_start"])))
        if end is not None:
            self.live = {(r["pid"], r["kind"], r["addr"], r["size"]): self.origin[int(r["alloc_id"])] for r in rows
                         if is_null(r["end_ts"]) or int(r["end_ts"]) >= end}

    def whole(self, alloc_id: int) -> int:
        """The whole trace's id of this part's allocation `alloc_id`."""
        if alloc_id <= self.snapshot:
            return self.origin[alloc_id].alloc_id
        return self.first + alloc_id - self.snapshot - 1


def _merged(parts: Iterable[Part], windowed: bool, per_part: Callable[[Part], None], stage: Stage) -> _Whole:
    whole = _Whole(windowed)
    for part in parts:
        with stage(f"part {part.index + 1} of {part.count}: analysing"):
            whole.add(part)
            per_part(part)
    return whole


def _cut(trace_dir: Path, every_s: float, trace_processor: str | None, stage: Stage) -> tuple[Plan, Iterator[Part]]:
    if not Path(trace_dir).is_dir():
        raise UsageError(f"{trace_dir}: --parts needs an LTTng trace directory (a converted trace is analysed "
                         "whole)")
    from ctf2perfetto.pipeline import convert

    cuts = plan(Path(trace_dir), every_s, stage)

    def make(span: Range, path: Path) -> ConvertSummary:
        return convert(Path(trace_dir), path, span=span)

    return cuts, each_part(cuts.spans, make, trace_processor=trace_processor, stage=stage)


def _finish(rows: Rows, cuts: Plan) -> Rows:
    rows.attrs["parts"] = len(cuts.spans)
    if cuts.missed:
        rows.attrs["warnings"].append(
            f"{cuts.missed} cut(s) found no quiet time (no call or copy under way) within {cuts.search / 1e9:g} s "
            "and were left out: those parts are longer")
    return rows


def _add(total: dict[str, Any], row: dict[str, Any], columns: tuple[str, ...]) -> None:
    """Sums `columns` of `row` into `total` (NULL + NULL stays NULL)."""
    for c in columns:
        if not is_null(row[c]):
            total[c] = row[c] if is_null(total.get(c)) else total[c] + row[c]


def _first_peak(total: dict[str, Any], row: dict[str, Any], value: str, at: str) -> None:
    """The highest `value` of the parts, and the earliest `at` they reach it. Not the first part's: a part's
    counters go on after its end with the blocks below the threshold that the range writes there, which can equal
    the peak a later part reaches first (never pass it: those blocks are live in the whole trace then too)."""
    if is_null(row[value]):
        return
    if is_null(total.get(value)) or row[value] > total[value]:
        total[value], total[at] = row[value], row[at]
    elif row[value] == total[value] and not is_null(row[at]) and (is_null(total[at]) or row[at] < total[at]):
        total[at] = row[at]


# -- the analyses -------------------------------------------------------------------------------------
def duplicated_rows(trace_dir: Path, every_s: float, *, trace_processor: str | None = None,
                    stage: Stage = no_stage) -> Rows:
    """analyses.duplicated_rows of the whole recording, a part of about `every_s` seconds at a time."""
    cuts, parts = _cut(trace_dir, every_s, trace_processor, stage)
    return _finish(duplicated_of_parts(parts, cuts.windowed, stage), cuts)


def duplicated_of_parts(parts: Iterable[Part], windowed: bool, stage: Stage = no_stage) -> Rows:
    """duplicated's Rows of a recording from its parts, in time order (`windowed`: it has windows of its own)."""
    groups: dict[tuple, dict[str, Any]] = {}
    ids = _AllocIds()
    columns: list[str] = []

    def per_part(part: Part) -> None:
        ids.of_part(part)
        got = analyses.module_rows(part.engine, ("duplicated",), "SELECT * FROM memq_duplicated_report")
        columns[:] = got.columns
        for row in got.records():
            key = row["key"]
            if row["grouping"] == "allocation" and not is_null(key):
                key = str(ids.whole(int(key)))
            group = groups.setdefault((row["grouping"], row["pid"], key), {"byte_ns": 0.0})
            _first_peak(group, row, "peak_bytes", "peak_ts")
            group["byte_ns"] += row["byte_ns"]

    whole = _merged(parts, windowed, per_part, stage)
    window = whole.window()
    recorded = window["recorded_dur"]
    records = [{"grouping": g, "pid": pid, "key": key, **fig,
                "mean_bytes": fig["byte_ns"] / recorded if recorded > 0 else 0.0,
                "window_start": window["start_ts"], "window_end": window["end_ts"], "recorded_dur": recorded}
               for (g, pid, key), fig in groups.items()]
    # memq_duplicated_report's order: grouping, the trace's rows before the processes', pid, key (NULL first)
    records.sort(key=lambda r: (r["grouping"], r["pid"] is not None, r["pid"] or 0, r["key"] is not None,
                                r["key"] or ""))
    rows = analyses.duplicated_result(Rows.from_records(records, columns, as_query=True), window, whole.info(),
                                      whole.window_rows())
    rows.attrs.update(warnings=whole.warnings(), trace_start=whole.window()["start_ts"])
    return rows


def redundant_rows(trace_dir: Path, every_s: float, unified: str = "auto", *, trace_processor: str | None = None,
                   stage: Stage = no_stage) -> Rows:
    """analyses.redundant_rows of the whole recording, a part of about `every_s` seconds at a time."""
    analyses.check_unified(unified)
    cuts, parts = _cut(trace_dir, every_s, trace_processor, stage)
    return _finish(redundant_of_parts(parts, cuts.windowed, unified, stage), cuts)


def redundant_of_parts(parts: Iterable[Part], windowed: bool, unified: str = "auto",
                       stage: Stage = no_stage) -> Rows:
    """redundant's Rows of a recording from its parts, in time order."""
    totals: dict[tuple, dict[str, Any]] = {}

    def per_part(part: Part) -> None:
        got = analyses.module_rows(part.engine, ("redundant",),
                                   f"SELECT * FROM memq_redundant_total_report!('{unified}')")
        for row in got.records():
            key = (row["pid"], row["class"], row["evidence"])
            if key not in totals:
                totals[key] = row
            else:
                for figure in analyses.FIGURES:
                    totals[key][figure] = int(totals[key][figure]) + int(row[figure])

    whole = _merged(parts, windowed, per_part, stage)
    rows = analyses.redundant_result(list(totals.values()), whole.info(), whole.window_rows())
    rows.attrs.update(warnings=whole.warnings(), trace_start=whole.window()["start_ts"])
    return rows


def summary_rows(trace_dir: Path, every_s: float, *, trace_processor: str | None = None,
                 stage: Stage = no_stage) -> dict[str, Rows]:
    """analyses.summary_rows of the whole recording, a part of about `every_s` seconds at a time."""
    cuts, parts = _cut(trace_dir, every_s, trace_processor, stage)
    tables = summary_of_parts(parts, cuts.windowed, stage)
    for rows in tables.values():
        _finish(rows, cuts)
    return tables


def summary_of_parts(parts: Iterable[Part], windowed: bool, stage: Stage = no_stage) -> dict[str, Rows]:
    """summary's tables of a recording from its parts, in time order.

    Every part holds the totals of every host block below the threshold (a range writes those before it at its
    start and those after it at its end): they count once. Allocations live at a part's start (its LIVE rows)
    are not counted as made or as live when a capture window of the recording opened. A leak is in the part where
    its process exited (its window closed then) or in the last part. A device's live bytes count every process's,
    leaks of exited processes included (the whole trace never ends them): a part after such an exit has no
    window, and no memq.live, of that process, so its device peaks are raised by those leaks.
    """
    api: dict[str, dict[str, Any]] = {}
    copies: dict[tuple, dict[str, Any]] = {}
    kinds: dict[str, dict[str, Any]] = {}
    devices: dict[Any, dict[str, Any]] = {}
    columns: dict[str, list[str]] = {}
    small: dict[str, int] = {}
    exited: dict[str, int] = {}  # device counter name -> bytes leaked by processes that exited in earlier parts

    def per_part(part: Part) -> None:
        got = {key: analyses.module_rows(part.engine, ("summary",), sql)
               for key, sql in analyses.SUMMARY_TABLES.items()}
        columns.update({key: rows.columns for key, rows in got.items()})
        for row in got["api"].records():
            total = api.setdefault(row["name"], {"name": row["name"], "max_dur": row["max_dur"]})
            _add(total, row, ("calls", "total_dur"))
            total["max_dur"] = max(total["max_dur"], row["max_dur"])
        for row in got["copies"].records():
            total = copies.setdefault((row["source"], row["direction"]),
                                      {"source": row["source"], "direction": row["direction"]})
            _add(total, row, ("count", "bytes", "dur_sum", "wall_dur", "staged"))
        made = analyses.module_rows(part.engine, ("summary",), f"""
            SELECT kind, COUNT(*) AS n, SUM(size) AS bytes FROM memq_allocation
            WHERE alloc_id <= {part.report.live} GROUP BY kind""").records()
        snapshot = {r["kind"]: r for r in made}
        sums = analyses.module_rows(part.engine, ("summary",), """
            SELECT IFNULL(SUM(alloc_count), 0) AS n, IFNULL(SUM(alloc_bytes), 0) AS bytes,
              MAX(IFNULL(SUM(live_count), 0), 0) AS live, MAX(IFNULL(SUM(live_bytes), 0), 0) AS live_bytes
            FROM memq_host_small""").records()[0]
        small.update({k: int(v) for k, v in sums.items()})
        for row in got["allocations"].records():
            kind = row["kind"]
            total = kinds.setdefault(kind, {"kind": kind, "count": 0, "bytes": 0, "live_at_start": 0,
                                            "live_at_start_bytes": 0, "leaked": 0, "leaked_bytes": 0})
            own = snapshot.get(kind, {"n": 0, "bytes": 0})
            host = kind == "host"
            total["count"] += int(row["count"]) - (small["n"] if host else 0)
            total["bytes"] += int(row["bytes"] or 0) - (small["bytes"] if host else 0)
            # leaks: live when the process exited (its window closed then) or at the end of the recording
            total["leaked"] += int(row["leaked"]) - (small["live"] if host else 0)
            total["leaked_bytes"] += int(row["leaked_bytes"]) - (small["live_bytes"] if host else 0)
            total["live_at_start"] += int(row["live_at_start"]) - int(own["n"])
            total["live_at_start_bytes"] += int(row["live_at_start_bytes"]) - int(own["bytes"] or 0)
            if not is_null(row["max_size"]):
                total["max_size"] = max(total.get("max_size") or 0, int(row["max_size"]))
            if kind == "device":
                row.update(_device_peak(part, exited))
            _first_peak(total, row, "peak_live_bytes", "peak_ts")
        for device, size in analyses.module_rows(part.engine, ("leaks",), """
                SELECT a.device, SUM(a.size) AS bytes FROM memq_allocation a
                JOIN memq_window w ON w.upid = a.upid AND w.window = a.window
                WHERE a.leaked AND a.kind = 'device' AND w.close_cause = 'exit' GROUP BY a.device""").rows:
            name = N.device_counter_name(int(device))
            exited[name] = exited.get(name, 0) + int(size)
        for row in got["devices"].records():
            total = devices.setdefault(row["device"], {"device": row["device"]})
            _add(total, row, ("ops", "busy_dur"))

    whole = _merged(parts, windowed, per_part, stage)
    recorded = whole.window()["recorded_dur"]
    summed = sum(int(t["total_dur"]) for t in api.values())
    for t in api.values():
        t.update(mean_dur=t["total_dur"] / t["calls"], share=t["total_dur"] / summed if summed > 0 else 0.0)
    for t in copies.values():
        t["gb_per_s"] = t["bytes"] / t["dur_sum"] if not is_null(t.get("bytes")) and t["dur_sum"] > 0 else None
    for t in kinds.values():
        if t["kind"] == "host" and small:
            t["count"] += small["n"]
            t["bytes"] += small["bytes"]
            t["leaked"] += small["live"]
            t["leaked_bytes"] += small["live_bytes"]
    for t in devices.values():
        t["busy_share"] = t["busy_dur"] / recorded if recorded > 0 else 0.0
    # the SQL's orders: api by total time, copies by source and direction, kinds by bytes, devices by number
    tables = {
        "api": sorted(api.values(), key=lambda t: -t["total_dur"]),
        "copies": [copies[k] for k in sorted(copies)],
        "allocations": sorted(kinds.values(), key=lambda t: -t["bytes"]),
        "devices": [devices[k] for k in sorted(devices, key=lambda d: (d is not None, d))],
    }
    rows = {key: Rows.from_records([{c: t.get(c) for c in columns[key]} for t in records], columns[key],
                                   as_query=True)
            for key, records in tables.items()} if columns else {}
    out = analyses.summary_result(rows, whole.info(), whole.window_rows())
    for table in out.values():
        table.attrs.update(warnings=whole.warnings(), trace_start=whole.window()["start_ts"])
    return out


def _device_peak(part: Part, exited: dict[str, int]) -> dict[str, Any]:
    """The part's device peak (peak_live_bytes, peak_ts) with the leaks of processes exited before it on each
    device's counter."""
    peaks = analyses.module_rows(part.engine, ("summary",), """
        WITH held AS (SELECT t.name, h.ts, h.value FROM _memq_live_held h
                      JOIN memq_live_counter_track t ON t.id = h.track_id WHERE t.kind = 'device'),
        top AS (SELECT name, MAX(value) AS value FROM held GROUP BY name)
        SELECT h.name, h.value, MIN(h.ts) AS ts FROM held h JOIN top USING (name, value) GROUP BY h.name""").rows
    best = {"peak_live_bytes": None, "peak_ts": None}
    for name, value, ts in peaks:
        _first_peak(best, {"peak_live_bytes": int(value) + exited.get(name, 0), "peak_ts": ts}, "peak_live_bytes",
                    "peak_ts")
    return best


def leaks_rows(trace_dir: Path, every_s: float, *, trace_processor: str | None = None,
               stage: Stage = no_stage) -> tuple[Rows, Rows]:
    """analyses.leaks_rows and outlived_rows of the whole recording, a part of about `every_s` seconds at a
    time."""
    cuts, parts = _cut(trace_dir, every_s, trace_processor, stage)
    leaks, outlived = leaks_of_parts(parts, cuts.windowed, stage)
    return _finish(leaks, cuts), _finish(outlived, cuts)


def _by_kind_size(allocs: list[tuple[_Origin, str, int]]) -> dict[tuple[str, int], dict[str, Any]]:
    groups: dict[tuple[str, int], dict[str, Any]] = {}
    for origin, kind, size in allocs:
        g = groups.setdefault((kind, size), {"kind": kind, "size": size, "count": 0, "bytes": 0, "first_ts": origin.ts,
                                             "last_ts": origin.ts, "live_at_start": 0})
        g["count"] += 1
        g["bytes"] += size
        g["first_ts"], g["last_ts"] = min(g["first_ts"], origin.ts), max(g["last_ts"], origin.ts)
        g["live_at_start"] += origin.live_at_start
    return groups


def leaks_of_parts(parts: Iterable[Part], windowed: bool, stage: Stage = no_stage) -> tuple[Rows, Rows]:
    """leaks' and outlived's Rows of a recording from its parts, in time order: the leaks are what each part has
    live when a process exited (its window closed then) and what the last part has live at its end (those live at
    a part's start as the whole trace has them: when allocated, and whether a window of the recording's own found
    them live), with the last part's host blocks below the threshold (every part holds them all); an allocation
    outlived a window of the recording's own when the window closed early for another reason than a part's end."""
    ids = _AllocIds()
    outlived: list[tuple[_Origin, str, int]] = []
    state: dict[str, Any] = {}

    def per_part(part: Part) -> None:
        ids.of_part(part)
        for r in analyses.module_rows(part.engine, ("leaks",), """
                SELECT a.alloc_id, a.kind, a.size, a.live_at_start FROM memq_allocation a
                JOIN memq_window w ON w.upid = a.upid AND w.window = a.window
                WHERE a.outlived_window AND w.close_cause != 'range'""").records():
            alloc_id = int(r["alloc_id"])
            origin = ids.origin.get(alloc_id) or _Origin(ids.whole(alloc_id), 0, bool(r["live_at_start"]))
            outlived.append((origin, r["kind"], int(r["size"])))
        leaked = analyses.module_rows(part.engine, ("leaks",), "SELECT alloc_id, kind, size FROM memq_leak").records()
        state.setdefault("leaked", []).extend((ids.origin[int(r["alloc_id"])], r["kind"], int(r["size"]))
                                              for r in leaked)
        # The host blocks below the threshold: the same totals in every part, each with its own first and last
        # time, but for the totals a part writes at its start (a quiet time: no real row is then).
        small = analyses.module_rows(part.engine, ("leaks",), "SELECT * FROM memq_leak_by_kind_size WHERE size IS NULL")
        start = "NULL" if part.start is None else part.start
        times = analyses.module_rows(part.engine, ("leaks",), f"""
            SELECT MIN(IIF(first_ts IS {start}, NULL, first_ts)) AS first_ts,
              MAX(IIF(last_ts IS {start}, NULL, last_ts)) AS last_ts FROM memq_host_small""").records()[0]
        rows = small.records()
        for row in rows:
            earlier = state.get("small", {}).get(row["kind"], {})
            row.update({k: pick(v for v in (earlier.get(k), times[k]) if not is_null(v))
                        for k, pick in (("first_ts", min), ("last_ts", max))})
        state.update(small={r["kind"]: r for r in rows}, columns=small.columns,
                     threshold=analyses.host_min_size(part.engine))

    whole = _merged(parts, windowed, per_part, stage)
    columns = state.get("columns") or ["kind", "size", "count", "bytes", "first_ts", "last_ts", "live_at_start"]
    groups = list(_by_kind_size(state.get("leaked", [])).values()) + list(state.get("small", {}).values())
    groups.sort(key=lambda g: -g["bytes"])
    leaks = analyses.leaks_result(Rows.from_records(groups, columns, as_query=True), whole.info(), whole.window_rows(),
                                  state.get("threshold"))
    gone = sorted(_by_kind_size(outlived).values(), key=lambda g: -g["bytes"])
    outlived_columns = ["kind", "size", "count", "bytes", "live_at_start"]
    out = analyses.outlived_result(Rows.from_records([{c: g[c] for c in outlived_columns} for g in gone],
                                                     outlived_columns, as_query=True), whole.info(), whole.window_rows())
    for rows in (leaks, out):
        rows.attrs.update(warnings=whole.warnings(), trace_start=whole.window()["start_ts"])
    return leaks, out
