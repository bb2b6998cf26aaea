"""`memq duplicated`: bytes in an active host<->device mirror over time (docs/DEFINITIONS.md, "Duplicated bytes").

Peak (and when), time-weighted mean and byte*ns per grouping: the whole trace, each direction, each destination
allocation, and copies whose source no traced allocation holds (sql/memq/duplicated.sql).
"""
from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctf2perfetto.engine.rows import Rows, is_null
from ctf2perfetto.errors import UsageError
from ctf2perfetto.analysis.base import (Analysis, addressed_frame, frame, load, module_rows, note_for, source_info,
                                       windows_rows, with_attrs)
from ctf2perfetto.analysis.base import Stage, no_stage


if TYPE_CHECKING:
    import pandas as pd

    from ctf2perfetto.analysis.parts import Part


DUP_GROUPINGS = ("total", "direction", "allocation", "untracked_source")


def duplicated(trace: Any) -> pd.DataFrame:
    """Peak (and when), time-weighted mean and byte*ns of duplicated bytes per grouping.

    Rows: grouping (total, direction, allocation, untracked_source), pid (None =
    whole trace), key, peak_bytes, peak_ts, mean_bytes, byte_ns, window_start, window_end, recorded_dur (what
    the mean is over: the trace window, or the union of its capture windows).
    """
    with load(trace) as engine:
        return frame(duplicated_rows(engine))


def duplicated_rows(engine: Any) -> Rows:
    """duplicated() as Rows."""
    return _finished(engine, module_rows(engine, ("duplicated",), "SELECT * FROM memq_duplicated_report"))


def duplicated_total_rows(engine: Any) -> Rows:
    """duplicated_rows' `total` rows alone (the whole trace's and each process's), without the other groupings'
    cost (memq.duplicated_trace): what memq report shows."""
    return _finished(engine, module_rows(engine, ("duplicated_trace",), "SELECT * FROM memq_duplicated_total_report"))


def _finished(engine: Any, rows: Rows) -> Rows:
    """duplicated_result of memq_duplicated_report-shaped `rows` of the trace `engine` holds."""
    window = module_rows(engine, ("trace",), "SELECT start_ts, end_ts, recorded_dur FROM memq_trace").records()[0]
    return duplicated_result(rows, window, source_info(engine), windows_rows(engine))


def duplicated_result(rows: Rows, window: dict[str, Any], info: tuple[list[str], bool, bool], windows: Rows) -> Rows:
    """duplicated's Rows from memq_duplicated_report rows, the trace window (start_ts, end_ts, recorded_dur), the
    trace's sources (source_info) and capture windows: a zero `total` row when nothing was duplicated, and the
    attrs (wholerun.py merges the rows of the parts of a recording and finishes them here too)."""
    names, addressed, has_events = info
    applies = addressed or not has_events
    if not applies:
        rows = Rows(rows.columns, [], lambda got=rows: got.frame().iloc[0:0])
    elif not any(g == "total" and p is None for g, p in zip(rows.column("grouping"), rows.column("pid"))):
        zero = {"grouping": "total", "pid": None, "key": None, "peak_bytes": 0, "peak_ts": None, "mean_bytes": 0.0,
                "byte_ns": 0.0, "window_start": window["start_ts"], "window_end": window["end_ts"],
                "recorded_dur": window["recorded_dur"]}
        rows = Rows(list(zero), [tuple(zero.values())] + [tuple(r.get(c) for c in zero) for r in rows.records()],
                    lambda got=rows: _zero_total(zero, got))
    return with_attrs(rows, applies=applies, note=note_for(has_events, applies), sources=names, windows=windows)


def _zero_total(zero: dict[str, Any], got: Rows) -> pd.DataFrame:
    """The whole-trace row of a trace with no mirror (zeros) before the report's rows."""
    import pandas as pd

    first = pd.DataFrame([zero])
    return first if not len(got) else pd.concat([first, got.frame()], ignore_index=True)


def duplicated_counter(trace: Any, grouping: str = "total") -> pd.DataFrame:
    """Duplicated bytes over time for one grouping: pid (None = trace), key, ts, dur, value."""
    if grouping not in DUP_GROUPINGS:
        raise UsageError(f"grouping {grouping!r}: expected one of {', '.join(DUP_GROUPINGS)}")
    with load(trace) as engine:
        return addressed_frame(engine, ("duplicated",), f"SELECT * FROM memq_duplicated_over_time('{grouping}')")


def duplicated_over_time(trace: Any) -> pd.DataFrame:
    """Whole-trace duplicated bytes over time: ts, direction ('' = all mirrors), value; one row per change."""
    with load(trace) as engine:
        return addressed_frame(engine, ("duplicated_trace",),
                               "SELECT ts, direction, value FROM memq_duplicated_trace_counter")


def mirrors(trace: Any) -> pd.DataFrame:
    """Every mirror piece: copy_id, call_id, pid, dst, src, bytes, ts, dur, end_ts, direction, allocations."""
    with load(trace) as engine:
        return addressed_frame(engine, ("mirrors",), "SELECT * FROM memq_mirror_report")


def duplicated_whole_run(trace_dir: Path, every_s: float, *, trace_processor: str | None = None,
                    stage: Stage = no_stage) -> Rows:
    """duplicated_rows of the whole recording, a part of about `every_s` seconds at a time."""
    from ctf2perfetto.analysis.wholerun import cut, finish

    cuts, parts = cut(trace_dir, every_s, trace_processor, stage)
    return finish(duplicated_of_parts(parts, cuts.windowed, stage), cuts)


def duplicated_of_parts(parts: Iterable[Part], windowed: bool, stage: Stage = no_stage) -> Rows:
    """duplicated's Rows of a recording from its parts, in time order (`windowed`: it has windows of its own)."""
    from ctf2perfetto.analysis.wholerun import AllocIds, first_peak, merged

    groups: dict[tuple, dict[str, Any]] = {}
    ids = AllocIds()
    columns: list[str] = []

    def per_part(part: Part) -> None:
        ids.of_part(part)
        got = module_rows(part.engine, ("duplicated",), "SELECT * FROM memq_duplicated_report")
        columns[:] = got.columns
        for row in got.records():
            key = row["key"]
            if row["grouping"] == "allocation" and not is_null(key):
                key = str(ids.whole(int(key)))
            group = groups.setdefault((row["grouping"], row["pid"], key), {"byte_ns": 0.0})
            first_peak(group, row, "peak_bytes", "peak_ts")
            group["byte_ns"] += row["byte_ns"]

    whole = merged(parts, windowed, per_part, stage)
    window = whole.window()
    recorded = window["recorded_dur"]
    records = [{"grouping": g, "pid": pid, "key": key, **fig,
                "mean_bytes": fig["byte_ns"] / recorded if recorded > 0 else 0.0,
                "window_start": window["start_ts"], "window_end": window["end_ts"], "recorded_dur": recorded}
               for (g, pid, key), fig in groups.items()]
    # memq_duplicated_report's order: grouping, the trace's rows before the processes', pid, key (NULL first)
    records.sort(key=lambda r: (r["grouping"], r["pid"] is not None, r["pid"] or 0, r["key"] is not None,
                                r["key"] or ""))
    rows = duplicated_result(Rows.from_records(records, columns, as_query=True), window, whole.info(),
                                      whole.window_rows())
    rows.attrs.update(warnings=whole.warnings(), trace_start=whole.window()["start_ts"])
    return rows


def attributed_mirrors(engine: Any, by: str, args: Any = None) -> pd.DataFrame:
    """`--by op|callsite`: the mirrors' bytes and byte*ns summed per PyTorch op or call site."""
    from ctf2perfetto.analysis.attribution import attribute

    rows = mirrors(engine)
    rows = attribute(engine, rows.assign(byte_ns=rows["bytes"] * rows["dur"]), by)
    column = "op" if by == "op" else "callsite"
    grouped = rows.groupby(column, dropna=False).agg(mirrors=("id", "count"), bytes=("bytes", "sum"),
                                                   byte_ns=("byte_ns", "sum"))
    out = grouped.reset_index().sort_values("bytes", ascending=False)
    out.attrs.update(rows.attrs)
    return out



def duplicated_verdict(tables: dict[str, Rows]) -> list[str]:
    """Two lines: how much is held twice at peak and on average, and by which direction most."""
    from ctf2perfetto.analysis.base import REPORT_HINT, size_words

    rows = next(iter(tables.values()))
    if not rows.attrs.get("applies", True):
        return ["Duplicated bytes do not apply: the trace's copies carry no addresses.", REPORT_HINT]
    whole = [r for r in rows.records() if r["pid"] is None]
    total = next((r for r in whole if r["grouping"] == "total"), None)
    if total is None or not total["peak_bytes"]:
        return ["Nothing is held twice: no copy left host and device holding the same bytes.", REPORT_HINT]
    dirs = sorted((r for r in whole if r["grouping"] == "direction"), key=lambda r: -(r["mean_bytes"] or 0))
    most = f"; {dirs[0]['key']} copies hold most of it" if dirs else ""
    return [f"Up to {size_words(total['peak_bytes'])} is held twice (the same bytes on host and device), "
            f"{size_words(total['mean_bytes'] or 0)} on average over the run{most}.",
            "An upper bound: CPU and kernel writes are not traced. " + REPORT_HINT]


ANALYSIS = Analysis(
    name="duplicated",
    help="bytes duplicated between host and device over time: peak, when, mean; by direction, allocation and "
         "untracked source",
    tables=lambda engine, args: {"duplicated": duplicated_rows(engine)},
    whole_run=lambda trace_dir, every_s, args, **kw: {"duplicated": duplicated_whole_run(trace_dir, every_s, **kw)},
    attributed=attributed_mirrors,
    verdict=duplicated_verdict,
)
