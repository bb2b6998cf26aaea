"""The memq analyses as pandas DataFrames, for notebooks (HolisticTraceAnalysis style).

    from ctf2perfetto import analyses
    with analyses.load("out.pftrace") as engine:
        analyses.duplicated(engine)          # peak / mean duplicated bytes per grouping
        analyses.redundant(engine)           # totals per class
        analyses.summary(engine)["copies"]   # copies per direction

Every function takes a trace (a .pftrace, a PyTorch-profiler .json/.json.gz, an
LTTng trace directory, converted on the fly) or an engine from `load`. The SQL is
the `memq` package (sql/memq/*.sql); this module only runs it and shapes the
result. Each frame carries in `df.attrs`:

* `applies`: False when the trace's source has no addresses (Kineto), so the
  figure cannot be computed; the frame is then empty.
* `note`: why not, or the upper-bound caveat (CPU and kernel writes are not traced).
* `source`: the trace's sources (`lttng`, `kineto`, or `none`).
* `windows`: the capture windows the figures cover (one dict per window, as `windows()`
  gives them; empty for a trace recorded without windows, whose figures cover it all),
  and `windows_note`: the same in one sentence ("" without windows).

Each figure is computed once, as engine Rows (`*_rows(engine)`, plain Python values: what
`memq duplicated` etc. print, without importing pandas), and returned here as a DataFrame.
"""
from __future__ import annotations

import contextlib
import os
from typing import TYPE_CHECKING, Any

from ctf2perfetto.engine.rows import Rows
from ctf2perfetto.errors import UsageError

if TYPE_CHECKING:  # imported where a frame is made (0.4 s the command line does without)
    import pandas as pd

UPPER_BOUND = ("Figures are upper bounds: writes by CPU code and GPU kernels are not traced, "
               "so copied data may have changed (and a mirror ended) earlier than shown; content fingerprints "
               "(memq record --content) check it where the CPU could read a copy's data, and the figures with "
               "evidence `content` are proven, the others (`address`) upper bounds.")
NO_ADDRESSES = ("not applicable: the trace's copies carry no addresses (PyTorch-profiler/Kineto source); "
                "only address-free figures (counts, bytes, time, bandwidth, staged, unified) apply.")
NO_EVENTS = "the trace holds no memory events (no allocations, copies or memsets)."
UNIFIED_MODES = ("auto", "yes", "no")
# memq.meta counts trace_warnings reports (docs/TRACE_FORMAT.md, "memq trace info").
META_COUNTS = ("lost_events", "lost_packets", "unmatched_frees", "skipped_events", "missing_events",
               "missing_packets", "missing_streams", "dropped_packets", "dropped_bytes")
CLASSES = ("no_op", "repeat", "round_trip", "managed", "unified", "redundant", "staged")
ADDRESS_CLASSES = ("no_op", "repeat", "round_trip", "managed")
EVIDENCE = ("content", "address")  # what proves a redundant byte: a fingerprint, or the address rules alone
FIGURES = ("count", "bytes", "dur_sum", "wall_dur")
DUP_GROUPINGS = ("total", "direction", "allocation", "untracked_source")
OUTLIVED = ("Allocations still live when their capture window closed before the process exited are not leaks: "
            "what happened to them outside the window was not recorded (table `outlived`); host blocks below the "
            "heap threshold are counted to the process's exit (the `host` leak row).")


def load(trace: Any, *, trace_processor: str | os.PathLike[str] | None = None, span: Any = None
         ) -> contextlib.AbstractContextManager[Any]:
    """An engine over `trace` (any input memq reads, or an open engine, which is passed through); of a directory
    converted only over `span` (a convert.ranges.Range) when one is given. See ctf2perfetto.inputs."""
    from ctf2perfetto.inputs import open_input

    return open_input(trace, trace_processor=trace_processor, span=span)


def module_rows(engine: Any, modules: tuple[str, ...], sql: str) -> Rows:
    """`sql` (a SELECT of the memq modules' tables) with those modules included."""
    includes = "".join(f"INCLUDE PERFETTO MODULE memq.{m};\n" for m in modules)
    return engine.rows(includes + sql)


def module_query(engine: Any, modules: tuple[str, ...], sql: str) -> pd.DataFrame:
    """module_rows as a DataFrame."""
    return module_rows(engine, modules, sql).frame()


def frame(rows: Rows) -> pd.DataFrame:
    """An analysis' Rows as the DataFrame the API returns (`attrs["windows"]`: the windows' records)."""
    df = rows.frame()
    found = rows.attrs.get("windows")
    if isinstance(found, Rows):
        df.attrs["windows"] = found.frame().to_dict("records")
    return df


def _with_attrs(rows: Rows, *, applies: bool, note: str, sources: list[str], engine: Any = None,
                windows: Rows | None = None) -> Rows:
    """`rows` with the attrs every analysis carries; the capture windows those of `engine`, or `windows`."""
    rows.attrs.update(applies=applies, note=note, source=",".join(sources) or "none")
    if engine is not None:
        windows = windows_rows(engine)
    if windows is not None:  # `frame` turns it into records
        rows.attrs.update(windows=windows, windows_note=windows.attrs["windows_note"])
    return rows


# -- capture windows ---------------------------------------------------------------------
def _seconds(ns: Any) -> str:
    """A duration for people: s, ms or us, whichever reads best."""
    ns = int(ns)
    return f"{ns / 1e9:.1f} s" if ns >= 1e9 else f"{ns / 1e6:.1f} ms" if ns >= 1e6 else f"{ns / 1e3:.0f} us"


def windows(trace: Any) -> pd.DataFrame:
    """The capture windows the trace recorded: pid, window (index in its process), ts, dur, end_ts,
    open_cause, close_cause, open_api, close_api, live_allocations, live_bytes. Empty for a trace
    recorded without windows (its figures cover the whole run). `attrs["windows_note"]` says in one
    sentence what the figures cover."""
    with load(trace) as engine:
        return frame(windows_rows(engine))


def windows_rows(engine: Any) -> Rows:
    """windows() as Rows."""
    rows = module_rows(engine, ("windows",), "SELECT * FROM memq_window_report")
    if not len(rows):
        return with_windows_note(rows, 0, 0)
    span = module_rows(engine, ("trace",), "SELECT recorded_dur, end_ts - start_ts AS span FROM memq_trace")
    return with_windows_note(rows, span.first("recorded_dur"), span.first("span"))


def with_windows_note(rows: Rows, recorded: int, span: int) -> Rows:
    """memq_window_report rows with attrs["windows_note"]: what the figures cover, in one sentence ("" without
    windows); `recorded` ns of a `span` ns trace."""
    note = ""
    if len(rows):
        pids = sorted({int(pid) for pid in rows.column("pid")})
        note = (f"Figures cover the {len(rows)} capture window(s) of {len(pids)} process(es) listed (table "
                f"`windows`): {_seconds(recorded)} recorded of a {_seconds(span)} "
                "trace; nothing outside them was recorded. Allocations live when a window opened start at its "
                "start (live_at_start); means and shares are over the recorded time.")
    rows.attrs.update(windows_note=note)
    return rows


def trace_warnings(trace: Any) -> list[str]:
    """What the converter counted as lost or unusable (memq.meta) and what trace_processor could not
    import (its error / data-loss stats): one line each, empty when clean."""
    with load(trace) as engine:
        return warning_lines(*warning_counts(engine))


def warning_counts(engine: Any) -> tuple[list[dict[str, int]], int, dict[str, int]]:
    """What trace_warnings reports, as numbers: the memq.meta counts (one dict per memq.meta event), the
    copies and memsets left unplaced, and trace_processor's import problems (name -> value)."""
    from ctf2perfetto.engine.rows import is_null

    meta = module_rows(engine, ("trace",), f"SELECT {', '.join(META_COUNTS)} FROM memq_meta")
    unplaced = int(module_rows(engine, ("trace",), "SELECT unplaced FROM memq_trace").first("unplaced"))
    problems: dict[str, int] = {}
    for row in engine.import_problem_rows().records():
        problems[row["name"]] = problems.get(row["name"], 0) + int(row["value"])
    return ([{k: 0 if is_null(v) else int(v) for k, v in row.items()} for row in meta.records()], unplaced,
            problems)


def warning_lines(meta: list[dict[str, int]], unplaced: int, problems: dict[str, int]) -> list[str]:
    """trace_warnings' lines from warning_counts' numbers."""
    lines = []
    for row in meta:
        if row["lost_events"] or row["lost_packets"]:
            lines.append(f"the trace lost {row['lost_events']:,} events and {row['lost_packets']:,}"
                         " packets: allocations, frees or copies may be missing from every figure")
        if row["missing_events"] or row["missing_packets"] or row["missing_streams"]:
            lines.append(f"the trace files lacked {row['missing_events']:,} of the events memq record counted "
                         f"({row['missing_packets']:,} packets, {row['missing_streams']:,} stream files gone): "
                         "allocations, frees or copies may be missing from every figure")
        if row["dropped_packets"]:
            lines.append(f"--salvage dropped {row['dropped_packets']:,} damaged packets "
                         f"({row['dropped_bytes']:,} bytes): their events are missing from every figure")
        if row["unmatched_frees"]:
            lines.append(f"{int(row['unmatched_frees']):,} frees matched no traced allocation")
        if row["skipped_events"]:
            lines.append(f"{int(row['skipped_events']):,} events could not be used")
    if unplaced:
        lines.append(f"{unplaced:,} copies or memsets have no thread (pid, tid) or no address in the trace: they are "
                     "left out of the mirror, duplicated and redundant figures")
    for name, value in problems.items():
        lines.append(f"trace_processor could not import everything: {name} = {value:,} "
                     "(events it dropped are missing from every figure)")
    return lines


def sources(trace: Any) -> pd.DataFrame:
    """What the trace holds: one row per source with has_addresses, copies, sets."""
    with load(trace) as engine:
        return _sources(engine).frame()


def _sources(engine: Any) -> Rows:
    return module_rows(engine, ("copies",), "SELECT * FROM memq_source ORDER BY source")


def source_info(engine: Any) -> tuple[list[str], bool, bool]:
    """(sources, has addresses, has any memory event)."""
    found = _sources(engine)
    events = module_rows(engine, ("trace",), "SELECT allocations + small_block_processes AS n FROM memq_trace"
                         ).first("n")
    names = found.column("source")
    has_events = bool(events) or any(row["copies"] + row["sets"] for row in found.records())
    return names, any(bool(v) for v in found.column("has_addresses")), has_events


def _note(has_events: bool, applies: bool, caveat: str = UPPER_BOUND) -> str:
    if not has_events:
        return NO_EVENTS
    return caveat if applies else NO_ADDRESSES


# -- duplicated --------------------------------------------------------------------------
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
    rows = module_rows(engine, ("duplicated",), "SELECT * FROM memq_duplicated_report")
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
    return _with_attrs(rows, applies=applies, note=_note(has_events, applies), sources=names, windows=windows)


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
        return _addressed(engine, ("duplicated",), f"SELECT * FROM memq_duplicated_over_time('{grouping}')")


def duplicated_over_time(trace: Any) -> pd.DataFrame:
    """Whole-trace duplicated bytes over time: ts, direction ('' = all mirrors), value; one row per change."""
    with load(trace) as engine:
        return _addressed(engine, ("duplicated",), "SELECT ts, direction, value FROM memq_duplicated_trace_counter")


def mirrors(trace: Any) -> pd.DataFrame:
    """Every mirror piece: copy_id, call_id, pid, dst, src, bytes, ts, dur, end_ts, direction, allocations."""
    with load(trace) as engine:
        return _addressed(engine, ("mirrors",), "SELECT * FROM memq_mirror_report")


def _addressed(engine: Any, modules: tuple[str, ...], sql: str) -> pd.DataFrame:
    """A figure that applies to a trace whose copies carry addresses, as a frame with its attrs."""
    names, addressed, has_events = source_info(engine)
    rows = module_rows(engine, modules, sql)
    return frame(_with_attrs(rows, applies=addressed, note=_note(has_events, addressed), sources=names,
                             engine=engine))


# -- redundant ---------------------------------------------------------------------------
def check_unified(unified: str) -> str:
    if unified not in UNIFIED_MODES:
        raise UsageError(f"--unified {unified}: expected one of {', '.join(UNIFIED_MODES)}")
    return unified


def redundant_copies(trace: Any, unified: str = "auto") -> pd.DataFrame:
    """Per copy: redundant bytes per class (no_op, repeat, round_trip, managed, unified), class,
    evidence (content / address) with the bytes content proves, prorated time, staged; keeps `id`
    (memq.copy slice) and `call_id`."""
    check_unified(unified)
    with load(trace) as engine:
        names, addressed, has_events = source_info(engine)
        rows = module_rows(engine, ("redundant",), f"SELECT * FROM memq_redundant_copy_report!('{unified}')")
        return frame(_with_attrs(rows, applies=True, note=_note(has_events, True, _redundant_note(addressed)),
                                 sources=names, engine=engine))


def _redundant_note(addressed: bool) -> str:
    if addressed:
        return UPPER_BOUND
    return ("no_op, repeat, round_trip and managed are not applicable: the trace's copies carry no addresses "
            "(PyTorch-profiler/Kineto source); unified and staged apply.")


def redundant(trace: Any, unified: str = "auto") -> pd.DataFrame:
    """Totals per class: count, bytes, dur_sum (prorated), wall_dur (union across threads and streams),
    and the same four split by evidence: content_* (bytes a fingerprint proves) and address_* (the rest).

    Rows for the whole trace (pid None) for every class, zeros included, then per process.
    `applies` is False on the rows of address-only classes for sources without addresses.
    """
    with load(trace) as engine:
        return frame(redundant_rows(engine, unified))


def redundant_rows(engine: Any, unified: str = "auto") -> Rows:
    """redundant() as Rows."""
    check_unified(unified)
    got = module_rows(engine, ("redundant",), f"SELECT * FROM memq_redundant_total_report!('{unified}')")
    return redundant_result(got.records(), source_info(engine), windows_rows(engine))


def redundant_result(totals: list[dict[str, Any]], info: tuple[list[str], bool, bool], windows: Rows) -> Rows:
    """redundant's Rows from memq_redundant_total_report rows, the trace's sources (source_info) and capture
    windows: one row per (process, class), the evidence split side by side (wholerun.py sums the rows of the parts
    of a recording and finishes them here too)."""
    names, addressed, has_events = info
    columns = [prefix + f for prefix in ("", "content_", "address_") for f in FIGURES]
    wide: dict[tuple, dict] = {}
    for row in totals:
        pid = None if row["pid"] is None else int(row["pid"])
        prefix = "" if row["evidence"] == "all" else f"{row['evidence']}_"
        figures = wide.setdefault((pid, row["class"]), dict.fromkeys(columns, 0))
        figures.update({prefix + f: int(row[f]) for f in FIGURES})
    records = []
    for key in [(None, cls) for cls in CLASSES] + sorted(
            (k for k in wide if k[0] is not None), key=lambda k: (k[0], CLASSES.index(k[1]))):
        pid, cls = key
        records.append({"pid": pid, "class": cls, "applies": addressed or cls not in ADDRESS_CLASSES,
                        **wide.get(key, dict.fromkeys(columns, 0))})
    rows = Rows.from_records(records, ["pid", "class", "applies", *columns])
    return _with_attrs(rows, applies=True, note=_note(has_events, True, _redundant_note(addressed)), sources=names,
                       windows=windows)


# -- summary -----------------------------------------------------------------------------
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
        out[key] = _with_attrs(rows, applies=applies, note=_note(has_events, applies), sources=names,
                               windows=windows)
    return out


# -- leaks -------------------------------------------------------------------------------
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
    rows = _with_attrs(rows, applies=addressed or not has_events,
                       note=_note(has_events, addressed or not has_events, caveat), sources=names, windows=windows)
    if rows.attrs["windows"]:
        rows.attrs["note"] = " ".join([rows.attrs["note"], OUTLIVED])
    return rows


def host_min_size(engine: Any) -> int | None:
    """The recording's host heap threshold (`memq record --host-min-size`), when the trace says."""
    found = module_rows(engine, ("trace",),
                        "SELECT host_min_size AS n FROM memq_meta WHERE host_min_size IS NOT NULL")
    return int(found.first("n")) if len(found) else None


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
    return _with_attrs(rows, applies=addressed or not has_events, note=OUTLIVED, sources=names, windows=windows)


def leaked_allocations(trace: Any) -> pd.DataFrame:
    """Every allocation never freed (keeps `alloc_id` for attribution)."""
    with load(trace) as engine:
        return _addressed(engine, ("leaks",), "SELECT * FROM memq_leak_report")
