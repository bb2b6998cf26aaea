"""`memq redundant`: copies that moved nothing new, avoidable ones, and staged copies (docs/DEFINITIONS.md, "Redundant copies").

Per copy (sql/memq/redundant.sql) and per class: count, bytes, summed and wall-clock time, split by evidence
(content: a fingerprint proves it; address: the address rules alone).
"""
from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctf2perfetto.engine.rows import Rows
from ctf2perfetto.errors import UsageError
from ctf2perfetto.analysis.base import (Analysis, FIGURES, UPPER_BOUND, frame, load, module_rows, note_for,
                                       source_info, windows_rows, with_attrs)
from ctf2perfetto.analysis.base import Stage, no_stage


if TYPE_CHECKING:
    import pandas as pd

    from ctf2perfetto.analysis.parts import Part


UNIFIED_MODES = ("auto", "yes", "no")


CLASSES = ("no_op", "repeat", "round_trip", "managed", "unified", "redundant", "staged")


ADDRESS_CLASSES = ("no_op", "repeat", "round_trip", "managed")


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
        return frame(with_attrs(rows, applies=True, note=note_for(has_events, True, _redundant_note(addressed)),
                                 sources=names, engine=engine))


def _redundant_note(addressed: bool) -> str:
    if addressed:
        return UPPER_BOUND
    return ("no_op, repeat, round_trip and managed are not applicable: the trace's copies carry no addresses "
            "(PyTorch-profiler/Kineto or Nsight Systems source); unified and staged apply.")


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
    return with_attrs(rows, applies=True, note=note_for(has_events, True, _redundant_note(addressed)), sources=names,
                       windows=windows)


def redundant_whole_run(trace_dir: Path, every_s: float, unified: str = "auto", *, trace_processor: str | None = None,
                   stage: Stage = no_stage) -> Rows:
    """redundant_rows of the whole recording, a part of about `every_s` seconds at a time."""
    from ctf2perfetto.analysis.wholerun import cut, finish

    check_unified(unified)
    cuts, parts = cut(trace_dir, every_s, trace_processor, stage)
    return finish(redundant_of_parts(parts, cuts.windowed, unified, stage), cuts)


def redundant_of_parts(parts: Iterable[Part], windowed: bool, unified: str = "auto",
                       stage: Stage = no_stage) -> Rows:
    """redundant's Rows of a recording from its parts, in time order."""
    from ctf2perfetto.analysis.wholerun import merged

    totals: dict[tuple, dict[str, Any]] = {}

    def per_part(part: Part) -> None:
        got = module_rows(part.engine, ("redundant",),
                                   f"SELECT * FROM memq_redundant_total_report!('{unified}')")
        for row in got.records():
            key = (row["pid"], row["class"], row["evidence"])
            if key not in totals:
                totals[key] = row
            else:
                for figure in FIGURES:
                    totals[key][figure] = int(totals[key][figure]) + int(row[figure])

    whole = merged(parts, windowed, per_part, stage)
    rows = redundant_result(list(totals.values()), whole.info(), whole.window_rows())
    rows.attrs.update(warnings=whole.warnings(), trace_start=whole.window()["start_ts"])
    return rows


def attributed_copies(engine: Any, by: str, args: Any) -> pd.DataFrame:
    """`--by op|callsite`: the redundant copies' count, bytes and time summed per PyTorch op or call site."""
    from ctf2perfetto.analysis.attribution import attribute

    rows = redundant_copies(engine, args.unified)
    rows = attribute(engine, rows[rows["redundant_bytes"] > 0], by)
    column = "op" if by == "op" else "callsite"
    grouped = rows.groupby(column, dropna=False).agg(copies=("id", "count"), bytes=("redundant_bytes", "sum"),
                                                   dur_sum=("redundant_dur", "sum"))
    out = grouped.reset_index().sort_values("bytes", ascending=False)
    out.attrs.update(rows.attrs)
    return out


def for_reading(rows: Rows) -> tuple[Rows, str]:
    """The human table: the evidence split as the part content proves (json/csv keep both sides)."""
    drop = {c for c in rows.columns if c.startswith("address_") or c == "content_wall_dur"}
    keep = [i for i, c in enumerate(rows.columns) if c not in drop]
    shown = Rows([rows.columns[i] for i in keep], [tuple(r[i] for i in keep) for r in rows.rows],
                 lambda: rows.frame().drop(columns=sorted(drop)), rows.attrs)
    return shown, ("(content_*: the part a content fingerprint proves; the rest has evidence address, "
                   "--format json|csv has both)")



def redundant_verdict(tables: dict[str, Rows]) -> list[str]:
    """Two lines: the time and bytes of copies that moved nothing new, how much is proven, the largest class."""
    from ctf2perfetto.analysis.base import REPORT_HINT, size_words, time_words

    rows = {r["class"]: r for r in next(iter(tables.values())).records() if r["pid"] is None}
    red, staged = rows.get("redundant") or {}, rows.get("staged") or {}
    staged_words = (f"; {staged['count']:,} staged copies from pageable memory took {time_words(staged['dur_sum'])}"
                    if staged.get("count") else "")
    if not red.get("count"):
        return ["No copy moved data its destination already held" + staged_words + ".", REPORT_HINT]
    classes = [c for c in ("no_op", "repeat", "round_trip", "managed", "unified") if (rows.get(c) or {}).get("bytes")]
    top = max(classes, key=lambda c: rows[c]["dur_sum"]) if classes else None
    largest = (f" Largest: {top.replace('_', ' ')}, {size_words(rows[top]['bytes'])} in "
               f"{time_words(rows[top]['dur_sum'])}." if top else "")
    proven = red["content_bytes"] / red["bytes"] if red["bytes"] else 0.0
    return [f"{red['count']:,} copies moved {size_words(red['bytes'])} their destination already held: "
            f"{time_words(red['dur_sum'])} summed, {time_words(red['wall_dur'])} wall-clock{staged_words}.",
            f"{proven:.0%} of those bytes are proven by content fingerprints, the rest are upper bounds.{largest} "
            + REPORT_HINT]


ANALYSIS = Analysis(
    name="redundant",
    help="copies that moved nothing new (no-op, repeat, round trip, managed endpoint, unified memory) and staged "
         "(pageable) copies: count, bytes, summed and wall-clock time, and how much of it content fingerprints "
         "prove (evidence content) rather than the address rules alone (address)",
    tables=lambda engine, args: {"redundant": redundant_rows(engine, args.unified)},
    whole_run=lambda trace_dir, every_s, args, **kw: {
        "redundant": redundant_whole_run(trace_dir, every_s, args.unified, **kw)},
    attributed=attributed_copies,
    for_reading=for_reading,
    options=("unified",),
    verdict=redundant_verdict,
)
