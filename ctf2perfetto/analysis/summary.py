"""`memq summary`: top API calls by time, copies per direction with bandwidth, allocations per kind, device busy share.
"""
from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctf2perfetto.engine.rows import Rows, is_null
from ctf2perfetto.analysis.base import (Analysis, frame, load, module_rows, note_for, source_info, windows_rows,
                                       with_attrs)
from ctf2perfetto.analysis.base import Stage, no_stage


if TYPE_CHECKING:
    import pandas as pd

    from ctf2perfetto.analysis.parts import Part


SUMMARY_TABLES = {
    "api": "SELECT * FROM memq_summary_api",
    "copies": "SELECT * FROM memq_summary_copy",
    "allocations": "SELECT * FROM memq_summary_allocation",
    "devices": "SELECT * FROM memq_summary_device",
}


def summary(trace: Any) -> dict[str, pd.DataFrame]:
    """Top API calls by time, copies per direction (count, bytes, time, bandwidth),
    allocations per kind, device busy share: one frame each, keyed api/copies/allocations/devices."""
    with load(trace) as engine:
        return {key: frame(rows) for key, rows in summary_rows(engine).items()}


def summary_rows(engine: Any) -> dict[str, Rows]:
    """summary() as Rows."""
    tables = {key: module_rows(engine, ("summary",), sql) for key, sql in SUMMARY_TABLES.items()}
    return summary_result(tables, source_info(engine), windows_rows(engine))


def summary_result(tables: dict[str, Rows], info: tuple[list[str], bool, bool], windows: Rows) -> dict[str, Rows]:
    """summary's Rows from the SUMMARY_TABLES' rows, the trace's sources and capture windows (wholerun.py merges
    the tables of the parts of a recording and finishes them here too)."""
    names, addressed, has_events = info
    out = {}
    for key, rows in tables.items():
        applies = addressed or key != "allocations"
        out[key] = with_attrs(rows, applies=applies, note=note_for(has_events, applies), sources=names,
                               windows=windows)
    return out


def summary_whole_run(trace_dir: Path, every_s: float, *, trace_processor: str | None = None,
                 stage: Stage = no_stage) -> dict[str, Rows]:
    """summary_rows of the whole recording, a part of about `every_s` seconds at a time."""
    from ctf2perfetto.analysis.wholerun import cut, finish

    cuts, parts = cut(trace_dir, every_s, trace_processor, stage)
    tables = summary_of_parts(parts, cuts.windowed, stage)
    for rows in tables.values():
        finish(rows, cuts)
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
    from ctf2perfetto.analysis.wholerun import add_figures, first_peak, merged

    from ctf2perfetto.traceformat import names as N

    api: dict[str, dict[str, Any]] = {}
    copies: dict[tuple, dict[str, Any]] = {}
    kinds: dict[str, dict[str, Any]] = {}
    devices: dict[Any, dict[str, Any]] = {}
    columns: dict[str, list[str]] = {}
    small: dict[str, int] = {}
    exited: dict[str, int] = {}  # device counter name -> bytes leaked by processes that exited in earlier parts

    def per_part(part: Part) -> None:
        got = {key: module_rows(part.engine, ("summary",), sql)
               for key, sql in SUMMARY_TABLES.items()}
        columns.update({key: rows.columns for key, rows in got.items()})
        for row in got["api"].records():
            total = api.setdefault(row["name"], {"name": row["name"], "max_dur": row["max_dur"]})
            add_figures(total, row, ("calls", "total_dur"))
            total["max_dur"] = max(total["max_dur"], row["max_dur"])
        for row in got["copies"].records():
            total = copies.setdefault((row["source"], row["direction"]),
                                      {"source": row["source"], "direction": row["direction"]})
            add_figures(total, row, ("count", "bytes", "dur_sum", "wall_dur", "staged"))
        made = module_rows(part.engine, ("summary",), f"""
            SELECT kind, COUNT(*) AS n, SUM(size) AS bytes FROM memq_allocation
            WHERE alloc_id <= {part.report.live} GROUP BY kind""").records()
        snapshot = {r["kind"]: r for r in made}
        sums = module_rows(part.engine, ("summary",), """
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
            first_peak(total, row, "peak_live_bytes", "peak_ts")
        for device, size in module_rows(part.engine, ("leaks",), """
                SELECT a.device, SUM(a.size) AS bytes FROM memq_allocation a
                JOIN memq_window w ON w.upid = a.upid AND w.window = a.window
                WHERE a.leaked AND a.kind = 'device' AND w.close_cause = 'exit' GROUP BY a.device""").rows:
            name = N.device_counter_name(int(device))
            exited[name] = exited.get(name, 0) + int(size)
        for row in got["devices"].records():
            total = devices.setdefault(row["device"], {"device": row["device"]})
            add_figures(total, row, ("ops", "busy_dur"))

    whole = merged(parts, windowed, per_part, stage)
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
    out = summary_result(rows, whole.info(), whole.window_rows())
    for table in out.values():
        table.attrs.update(warnings=whole.warnings(), trace_start=whole.window()["start_ts"])
    return out


def _device_peak(part: Part, exited: dict[str, int]) -> dict[str, Any]:
    """The part's device peak (peak_live_bytes, peak_ts) with the leaks of processes exited before it on each
    device's counter."""
    from ctf2perfetto.analysis.wholerun import first_peak

    peaks = module_rows(part.engine, ("summary",), """
        WITH held AS (SELECT t.name, h.ts, h.value FROM _memq_live_held h
                      JOIN memq_live_counter_track t ON t.id = h.track_id WHERE t.kind = 'device'),
        top AS (SELECT name, MAX(value) AS value FROM held GROUP BY name)
        SELECT h.name, h.value, MIN(h.ts) AS ts FROM held h JOIN top USING (name, value) GROUP BY h.name""").rows
    best = {"peak_live_bytes": None, "peak_ts": None}
    for name, value, ts in peaks:
        first_peak(best, {"peak_live_bytes": int(value) + exited.get(name, 0), "peak_ts": ts}, "peak_live_bytes",
                    "peak_ts")
    return best



def summary_verdict(tables: dict[str, Rows]) -> list[str]:
    """Two lines: what the copies moved and took, the busiest device, and the API call that took longest."""
    from ctf2perfetto.analysis.base import REPORT_HINT, size_words, time_words

    copies = [r for r in (tables.get("copies").records() if tables.get("copies") is not None else [])
              if r["direction"] != "memset"]
    lttng = [r for r in copies if r["source"] == "lttng"] or copies
    n, nbytes, dur = (sum(r[k] or 0 for r in lttng) for k in ("count", "bytes", "dur_sum"))
    devices = tables.get("devices").records() if tables.get("devices") is not None else []
    busy = max(devices, key=lambda r: r["busy_share"] or 0, default=None)
    busy_words = f"; device {busy['device']} was busy copying {busy['busy_share']:.0%} of the time" if busy else ""
    api = tables.get("api").records() if tables.get("api") is not None else []
    first = (f"{n:,} copies moved {size_words(nbytes)} in {time_words(dur)}{busy_words}." if n else
             "No copies in the trace.")
    second = (f"Most time in one API function: {api[0]['name']} ({api[0]['share']:.0%} of the API time). " if api
              else "")
    return [first, second + REPORT_HINT]


ANALYSIS = Analysis(
    name="summary",
    help="top API calls by time, copies per direction with bandwidth, allocations per kind, device busy share",
    tables=lambda engine, args: summary_rows(engine),
    whole_run=lambda trace_dir, every_s, args, **kw: summary_whole_run(trace_dir, every_s, **kw),
    verdict=summary_verdict,
)
