"""What every analysis shares: running the memq SQL modules, the attrs every result carries, and what the trace
itself says about its figures (its sources, capture windows and warnings)."""
from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ctf2perfetto.engine.rows import Rows

Stage = Callable[[str], contextlib.AbstractContextManager[Any]]  # progress: a context around each long step, given
# its description


def no_stage(_: str) -> contextlib.AbstractContextManager[Any]:
    """A Stage that shows nothing."""
    return contextlib.nullcontext()


if TYPE_CHECKING:  # imported where a frame is made (0.4 s the command line does without)
    import pandas as pd


UPPER_BOUND = ("Figures are upper bounds: writes by CPU code and GPU kernels are not traced, "
               "so copied data may have changed (and a mirror ended) earlier than shown; content fingerprints "
               "(memq record --content) check it where the CPU could read a copy's data, and the figures with "
               "evidence `content` are proven, the others (`address`) upper bounds.")


NO_ADDRESSES = ("not applicable: the trace's copies carry no addresses (PyTorch-profiler/Kineto or Nsight Systems "
                "source); only address-free figures (counts, bytes, time, bandwidth, staged, unified) apply.")


NO_EVENTS = "the trace holds no memory events (no allocations, copies or memsets)."


# memq.meta counts trace_warnings reports (docs/TRACE_FORMAT.md, "memq trace info").
META_COUNTS = ("lost_events", "lost_packets", "unmatched_frees", "skipped_events", "missing_events",
               "missing_packets", "missing_streams", "dropped_packets", "dropped_bytes")


EVIDENCE = ("content", "address")  # what proves a redundant byte: a fingerprint, or the address rules alone


FIGURES = ("count", "bytes", "dur_sum", "wall_dur")


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


def with_attrs(rows: Rows, *, applies: bool, note: str, sources: list[str], engine: Any = None,
                windows: Rows | None = None) -> Rows:
    """`rows` with the attrs every analysis carries; the capture windows those of `engine`, or `windows`."""
    rows.attrs.update(applies=applies, note=note, source=",".join(sources) or "none")
    if engine is not None:
        windows = windows_rows(engine)
    if windows is not None:  # `frame` turns it into records
        rows.attrs.update(windows=windows, windows_note=windows.attrs["windows_note"])
    return rows


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
                f"`windows`): {time_words(recorded)} recorded of a {time_words(span)} "
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


def note_for(has_events: bool, applies: bool, caveat: str = UPPER_BOUND) -> str:
    if not has_events:
        return NO_EVENTS
    return caveat if applies else NO_ADDRESSES


def host_min_size(engine: Any) -> int | None:
    """The recording's host heap threshold (`memq record --host-min-size`), when the trace says."""
    found = module_rows(engine, ("trace",),
                        "SELECT host_min_size AS n FROM memq_meta WHERE host_min_size IS NOT NULL")
    return int(found.first("n")) if len(found) else None


def addressed_frame(engine: Any, modules: tuple[str, ...], sql: str) -> pd.DataFrame:
    """A figure that applies to a trace whose copies carry addresses, as a frame with its attrs."""
    names, addressed, has_events = source_info(engine)
    rows = module_rows(engine, modules, sql)
    return frame(with_attrs(rows, applies=addressed, note=note_for(has_events, addressed), sources=names,
                             engine=engine))


@dataclass(frozen=True)
class Analysis:
    """One analysis as every front end uses it: the `memq NAME` command, `--parts`, the notebook API and the report.

    `tables(engine, args)` gives the command's tables of a whole trace (the first is the analysis' own; `args`
    holds its options, e.g. `unified`); `whole_run(trace_dir, every_s, args, trace_processor=, stage=)` the same
    tables of a recording merged from its parts (None: `--parts` is not offered); `attributed(engine, by, args)`
    the `--by op|callsite` breakdown as a DataFrame (None: `--by` is not offered); `for_reading(rows)` what the
    human table shows of the first table, with a line saying what it left out ("" if nothing); `verdict(tables)` the
    two lines in words the human output starts with (what the figures mean for the user)."""

    name: str
    help: str
    tables: Callable[[Any, Any], dict[str, Rows]]
    whole_run: Callable[..., dict[str, Rows]] | None = None
    attributed: Callable[[Any, str, Any], pd.DataFrame] | None = None
    for_reading: Callable[[Rows], tuple[Rows, str]] | None = None
    options: tuple[str, ...] = field(default=())  # extra command-line options: "unified"
    verdict: Callable[[dict[str, Rows]], list[str]] | None = None


def size_words(n: float | None) -> str:
    """A byte count for people: B, KiB, MiB, GiB or TiB, whichever reads best."""
    if n is None:
        return "n/a"
    for scale, unit in ((1 << 40, "TiB"), (1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if abs(n) >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{int(n)} B"


def time_words(ns: float | None) -> str:
    """A duration for people: ns, µs, ms or s (three digits; whole seconds with a thousands separator from
    1,000 s on, where three digits would read as 1.46e+03 s)."""
    if ns is None:
        return "n/a"
    if abs(ns) >= 999.5e9:
        return f"{ns / 1e9:,.0f} s"
    for scale, unit in ((1e9, "s"), (1e6, "ms"), (1e3, "µs")):
        if abs(ns) >= scale:
            return f"{ns / scale:.3g} {unit}"
    return f"{int(ns)} ns"


REPORT_HINT = "What to fix, where, and what it gains: memq report TRACE -o report.html"
