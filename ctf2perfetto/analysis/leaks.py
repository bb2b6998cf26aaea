"""`memq leaks`: allocations never freed, by kind and size; and those that outlived a capture window (not leaks).
"""
from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctf2perfetto.engine.rows import Rows, is_null
from ctf2perfetto.analysis.base import (Analysis, addressed_frame, frame, host_min_size, load, module_rows, note_for,
                                       source_info, windows_rows, with_attrs)
from ctf2perfetto.analysis.base import Stage, no_stage


if TYPE_CHECKING:
    import pandas as pd

    from ctf2perfetto.analysis.parts import Part
    from ctf2perfetto.analysis.wholerun import Origin


OUTLIVED = ("Allocations still live when their capture window closed before the process exited are not leaks: "
            "what happened to them outside the window was not recorded (table `outlived`); host blocks below the "
            "heap threshold are counted to the process's exit (the `host` leak row).")


def leaks(trace: Any) -> pd.DataFrame:
    """Allocations never freed, grouped by kind and size: count, bytes, first_ts, last_ts."""
    with load(trace) as engine:
        return frame(leaks_rows(engine))


def leaks_rows(engine: Any) -> Rows:
    """leaks() as Rows."""
    rows = module_rows(engine, ("leaks",), "SELECT * FROM memq_leak_by_kind_size")
    return leaks_result(rows, source_info(engine), windows_rows(engine), host_min_size(engine))


def leaks_result(rows: Rows, info: tuple[list[str], bool, bool], windows: Rows, threshold: int | None) -> Rows:
    """leaks' Rows from memq_leak_by_kind_size rows, the trace's sources, capture windows and host threshold
    (wholerun.py merges the rows of the parts of a recording and finishes them here too)."""
    names, addressed, has_events = info
    caveat = "Allocations with no free in the trace; a lost free shows as a leak."
    if any(size is None for size in rows.column("size")):
        caveat += (" The host row with no size is the blocks below the recording's threshold"
                   + (f" ({threshold:,} bytes)" if threshold is not None else "")
                   + " still live at the end, which the trace holds as totals only.")
    rows = with_attrs(rows, applies=addressed or not has_events,
                       note=note_for(has_events, addressed or not has_events, caveat), sources=names, windows=windows)
    if rows.attrs["windows"]:
        rows.attrs["note"] = " ".join([rows.attrs["note"], OUTLIVED])
    return rows


def outlived(trace: Any) -> pd.DataFrame:
    """Allocations still live when their capture window closed before the process exited, by kind and
    size (count, bytes, live_at_start): not leaks, their fate outside the window is unknown. Empty for a
    trace without windows."""
    with load(trace) as engine:
        return frame(outlived_rows(engine))


def outlived_rows(engine: Any) -> Rows:
    """outlived() as Rows."""
    rows = module_rows(engine, ("leaks",), "SELECT * FROM memq_outlived_by_kind_size")
    return outlived_result(rows, source_info(engine), windows_rows(engine))


def outlived_result(rows: Rows, info: tuple[list[str], bool, bool], windows: Rows) -> Rows:
    """outlived's Rows from memq_outlived_by_kind_size rows, the trace's sources and capture windows."""
    names, addressed, has_events = info
    return with_attrs(rows, applies=addressed or not has_events, note=OUTLIVED, sources=names, windows=windows)


def leaked_allocations(trace: Any) -> pd.DataFrame:
    """Every allocation never freed (keeps `alloc_id` for attribution)."""
    with load(trace) as engine:
        return addressed_frame(engine, ("leaks",), "SELECT * FROM memq_leak_report")


def leaks_whole_run(trace_dir: Path, every_s: float, *, trace_processor: str | None = None,
               stage: Stage = no_stage) -> tuple[Rows, Rows]:
    """leaks_rows and outlived_rows of the whole recording, a part of about `every_s` seconds at a
    time."""
    from ctf2perfetto.analysis.wholerun import cut, finish

    cuts, parts = cut(trace_dir, every_s, trace_processor, stage)
    leaks, outlived = leaks_of_parts(parts, cuts.windowed, stage)
    return finish(leaks, cuts), finish(outlived, cuts)


def _by_kind_size(allocs: list[tuple[Origin, str, int]]) -> dict[tuple[str, int], dict[str, Any]]:
    pass

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
    from ctf2perfetto.analysis.wholerun import AllocIds, Origin, merged

    ids = AllocIds()
    outlived: list[tuple[Origin, str, int]] = []
    state: dict[str, Any] = {}

    def per_part(part: Part) -> None:
        ids.of_part(part)
        for r in module_rows(part.engine, ("leaks",), """
                SELECT a.alloc_id, a.kind, a.size, a.live_at_start FROM memq_allocation a
                JOIN memq_window w ON w.upid = a.upid AND w.window = a.window
                WHERE a.outlived_window AND w.close_cause != 'range'""").records():
            alloc_id = int(r["alloc_id"])
            origin = ids.origin.get(alloc_id) or Origin(ids.whole(alloc_id), 0, bool(r["live_at_start"]))
            outlived.append((origin, r["kind"], int(r["size"])))
        leaked = module_rows(part.engine, ("leaks",), "SELECT alloc_id, kind, size FROM memq_leak").records()
        state.setdefault("leaked", []).extend((ids.origin[int(r["alloc_id"])], r["kind"], int(r["size"]))
                                              for r in leaked)
        # The host blocks below the threshold: the same totals in every part, each with its own first and last
        # time, but for the totals a part writes at its start (a quiet time: no real row is then).
        small = module_rows(part.engine, ("leaks",), "SELECT * FROM memq_leak_by_kind_size WHERE size IS NULL")
        start = "NULL" if part.start is None else part.start
        times = module_rows(part.engine, ("leaks",), f"""
            SELECT MIN(IIF(first_ts IS {start}, NULL, first_ts)) AS first_ts,
              MAX(IIF(last_ts IS {start}, NULL, last_ts)) AS last_ts FROM memq_host_small""").records()[0]
        rows = small.records()
        for row in rows:
            earlier = state.get("small", {}).get(row["kind"], {})
            row.update({k: pick(v for v in (earlier.get(k), times[k]) if not is_null(v))
                        for k, pick in (("first_ts", min), ("last_ts", max))})
        state.update(small={r["kind"]: r for r in rows}, columns=small.columns,
                     threshold=host_min_size(part.engine))

    whole = merged(parts, windowed, per_part, stage)
    columns = state.get("columns") or ["kind", "size", "count", "bytes", "first_ts", "last_ts", "live_at_start"]
    groups = list(_by_kind_size(state.get("leaked", [])).values()) + list(state.get("small", {}).values())
    groups.sort(key=lambda g: -g["bytes"])
    leaks = leaks_result(Rows.from_records(groups, columns, as_query=True), whole.info(), whole.window_rows(),
                                  state.get("threshold"))
    gone = sorted(_by_kind_size(outlived).values(), key=lambda g: -g["bytes"])
    outlived_columns = ["kind", "size", "count", "bytes", "live_at_start"]
    out = outlived_result(Rows.from_records([{c: g[c] for c in outlived_columns} for g in gone],
                                                     outlived_columns, as_query=True), whole.info(), whole.window_rows())
    for rows in (leaks, out):
        rows.attrs.update(warnings=whole.warnings(), trace_start=whole.window()["start_ts"])
    return leaks, out


def leak_tables(engine: Any, args: Any = None) -> dict[str, Rows]:
    """`memq leaks`' tables: the leaks, and with capture windows the allocations that outlived one."""
    tables = {"leaks": leaks_rows(engine)}
    if tables["leaks"].attrs.get("windows"):
        tables["outlived"] = outlived_rows(engine)
    return tables


def leak_tables_whole_run(trace_dir: Path, every_s: float, args: Any = None, **kw: Any) -> dict[str, Rows]:
    """leak_tables of a recording merged from its parts."""

    leaks, outlived = leaks_whole_run(trace_dir, every_s, **kw)
    return {"leaks": leaks, **({"outlived": outlived} if leaks.attrs.get("windows") else {})}



def leaks_verdict(tables: dict[str, Rows]) -> list[str]:
    """Two lines: how much was never freed, and of which kind most."""
    from ctf2perfetto.analysis.base import size_words

    rows = next(iter(tables.values())).records()
    if not rows:
        return ["Every allocation was freed: no leak.", "A lost free would show as a leak; none did."]
    per_kind: dict[str, int] = {}
    for r in rows:
        per_kind[r["kind"]] = per_kind.get(r["kind"], 0) + int(r["bytes"] or 0)
    kind = max(per_kind, key=per_kind.get)
    count = sum(int(r["count"] or 0) for r in rows)
    return [f"{count:,} allocations ({size_words(sum(per_kind.values()))}) were never freed; most of it "
            f"{kind} memory ({size_words(per_kind[kind])}).",
            "A lost free shows as a leak; GPU memory never freed by a long job grows until it fails."]


ANALYSIS = Analysis(
    name="leaks",
    help="allocations never freed, by kind and size",
    tables=leak_tables,
    whole_run=leak_tables_whole_run,
    verdict=leaks_verdict,
)
