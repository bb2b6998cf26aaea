"""`memq duplicated | redundant | summary | leaks TRACE`: the analyses on the command line.

TRACE is a .pftrace, a PyTorch-profiler JSON (.json / .json.gz) or an LTTng trace
directory (converted on the fly). Human tables by default (bytes in MiB, times in
ms, times in seconds from the trace start), `--format json|csv` for machines (raw bytes, ns). Every output says the figures are upper
bounds (CPU and kernel writes are not traced) and which figures do not apply to a
source without addresses.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import math
import os
import sys
from typing import Any

from ctf2perfetto.engine.rows import Rows, is_null
from ctf2perfetto.cli import ticking
from ctf2perfetto.errors import UsageError
from ctf2perfetto.cli.output import (SCHEDULER_ADDRESS, add_cluster_args, add_engine_args, add_format_arg,
                                     add_range_args, add_unified_arg, on_cluster, print_frame, range_of, seconds)

EPILOG = ("Output: tables with bytes in MiB, times in ms and timestamps in seconds from the trace start; "
          "--format json prints one object {analysis, source, upper_bound, notes, tables: {name: {applies, rows}}} "
          "with raw bytes and ns; --format csv prints '# ' note lines, then each table (with a '# table:' line "
          "when there are several). Whole-trace rows have pid null ('all' in tables). A trace recorded with "
          "capture windows (memq record --delay/--duration/--capture-range) adds the table `windows`: the "
          "figures cover those windows only, means and shares are over the recorded time, and `leaks` lists "
          "allocations still live when a window closed early apart (`outlived`: not leaks).")
PARTS_HELP = ("analyse the LTTng trace directory TRACE a part of about this length at a time (seconds, or 10m, "
              "1.5h), each in a fresh trace_processor: memory is bounded by the part and what is live, not by the "
              "run, and the figures are the whole run's. The recording is cut at the first moment after each "
              "multiple of the length at which no call or copy is under way; the mirrors alive at a cut are "
              "carried into the next part, and the parts' figures merged (README, \"Ranges of a long run\"). "
              "Each part decodes its own packets, from the state at its start that one pass over the "
              "recording carries")
WORKERS_HELP = ("with --parts: run the parts as Dask tasks on a local cluster of N worker processes (the next part's "
                "carried mirrors are computed while the previous one is read; output identical whatever N; default: "
                "as many as the cores this process may run on when there is more than one part, else the part runs "
                "in this process; --workers 1 runs them on one Dask worker, in turn). With TRACE a job directory "
                "(several recordings, one per node): decode each recording as a Dask task there (output identical "
                "too)")
SCHEDULER_HELP = ("with --parts, or TRACE a job directory: run the parts, or decode the recordings, on the existing "
                  f"Dask cluster at ADDRESS {SCHEDULER_ADDRESS}, e.g. one dask-jobqueue started; its workers must "
                  "read TRACE at the same path")
TRACE_HELP = ("a memq .pftrace, a PyTorch-profiler trace (.json or .json.gz), or an LTTng trace directory "
              "(converted on the fly)")


def _has_attribution() -> bool:
    return importlib.util.find_spec("ctf2perfetto.analysis.attribution") is not None


def add_parser(subparsers: Any) -> None:
    """Register every analysis of the registry as `memq NAME`."""
    from ctf2perfetto.analysis.registry import ANALYSES

    for analysis in ANALYSES:
        name = analysis.name
        parser = subparsers.add_parser(
            name, help=analysis.help, epilog=EPILOG,
            description=f"memq {name}: {analysis.help}. Figures are upper bounds: writes by CPU code and GPU "
                        "kernels are not traced.")
        parser.add_argument("trace", metavar="TRACE", help=TRACE_HELP)
        add_format_arg(parser)
        add_engine_args(parser)
        add_range_args(parser, "when TRACE is an LTTng trace directory, analyse only")
        if analysis.whole_run is not None:
            parser.add_argument("--parts", type=seconds, metavar="SEC", default=None, help=PARTS_HELP)
            add_cluster_args(parser, WORKERS_HELP, SCHEDULER_HELP)
        if "unified" in analysis.options:
            add_unified_arg(parser)
        job_help = ("rank, node or gpu: the job's figures per rank (its process and its workers), per node or per "
                    "GPU (UUID), with the job's totals and the spread across them (shown per rank by default when "
                    "the trace has ranks)")
        if analysis.attributed is not None and _has_attribution():
            parser.add_argument("--by", choices=("op", "callsite", "rank", "node", "gpu"), default=None,
                                help="also break the figures down by PyTorch op (needs a trace merged with "
                                     "`ctf2perfetto --kineto`) or by call site (binary + function); " + job_help)
        else:
            parser.add_argument("--by", choices=("rank", "node", "gpu"), default=None, help=job_help)
        parser.set_defaults(func=lambda args, name=name: run(name, args))


TOP_ROWS = 20  # per-allocation / leak-group rows a human table shows (json/csv: all)


def run(name: str, args: argparse.Namespace) -> int:
    from ctf2perfetto import analyses
    from ctf2perfetto.analysis.registry import analysis

    found = analysis(name)
    span = range_of(args)
    if getattr(args, "parts", None) is not None:
        return _run_in_parts(found, args, span)
    loading = f"loading {args.trace}" + (" (converting the LTTng trace first)" if os.path.isdir(args.trace) else "")
    with contextlib.ExitStack() as stack:
        with ticking(loading), on_cluster(args.trace, getattr(args, "workers", None),
                                          getattr(args, "scheduler", None), ", or with --parts SEC its parts"):
            engine = stack.enter_context(analyses.load(args.trace, trace_processor=args.trace_processor,
                                                       span=span))
        with ticking(f"running {name}"):
            tables = found.tables(engine, args)
            if next(iter(tables.values())).attrs.get("windows"):
                tables["windows"] = analyses.windows_rows(engine)
            by = getattr(args, "by", None)
            if by in ("op", "callsite"):
                tables[f"by {by}"] = Rows.from_frame(found.attributed(engine, by, args))
            tables.update(_job_tables(name, engine, tables, by))
            first = next(iter(tables.values()))
            first.attrs["warnings"] = list(first.attrs.get("warnings", [])) + analyses.trace_warnings(engine)
            start = int(analyses.module_rows(engine, ("trace",), "SELECT start_ts FROM memq_trace").first("start_ts"))
    _print(found, tables, args.format, start)
    return 0


def _job_tables(name: str, engine: Any, tables: dict[str, Rows], by: str | None) -> dict[str, Rows]:
    """The job's tables (analysis/job.py): per rank unless --by node|gpu; summary also per process."""
    from ctf2perfetto.analysis import job

    out = job.job_tables(name, engine, tables, by if by in job.BY else "rank")
    if by in job.BY and not out:
        raise UsageError(f"--by {by}: the trace names no ranks (record the job's processes with memq record: each "
                         "records the rank its launcher gave it)")
    if name == "summary":
        processes = job.process_table(engine)
        if processes is not None:
            out["processes"] = processes
    return out


def _run_in_parts(found: Any, args: argparse.Namespace, span: Any) -> int:
    """`--parts`: the whole run's figures, a part at a time (ctf2perfetto.analysis.wholerun)."""
    if span is not None:
        raise UsageError("--parts analyses the whole recording: leave out --from/--to")
    if getattr(args, "by", None):
        raise UsageError("--by needs the whole trace in one trace_processor: leave out --parts")
    if not os.path.isdir(args.trace):
        raise UsageError(f"{args.trace}: --parts needs an LTTng trace directory (a converted trace is analysed "
                         "whole)" if os.path.exists(args.trace) else f"{args.trace}: no such trace directory")
    from ctf2perfetto.convert.job import is_job

    if is_job(args.trace):
        raise UsageError(f"{args.trace}: holds several recordings (a job); --parts cuts one recording: give one "
                         "node's directory, or convert a range of the job (--from/--to)")
    from ctf2perfetto.analysis.cluster import scheduled

    with scheduled(args.workers, args.scheduler):
        tables = found.whole_run(args.trace, args.parts, args, trace_processor=args.trace_processor, stage=ticking)
    first = next(iter(tables.values()))
    if first.attrs.get("windows"):
        tables["windows"] = first.attrs["windows"]
    _print(found, tables, args.format, int(first.attrs["trace_start"]))
    return 0


def _round(value: float, digits: int) -> float:
    """numpy's round (what the frames' `.round` did): x * 10**digits to the nearest even integer, divided
    back; not Python's round(x, digits), which rounds the decimal value and may differ in the last digit."""
    scale = 10.0 ** digits
    scaled = value * scale
    return math.copysign(float(round(scaled)), scaled) / scale


def _human(table: Rows, start: int) -> Rows:
    """Bytes as MiB, durations as ms, times as seconds from the trace start, pid 'all' for the
    whole trace, for reading."""
    columns, values = [], []
    for col, column in zip(table.columns, table.typed_columns()):
        if col == "pid":  # whole-trace rows have no pid
            column = ["all" if is_null(v) else int(v) for v in column]
        elif col == "ts" or col.endswith("_ts") or col in ("window_start", "window_end"):
            column = [None if is_null(v) else _round((float(v) - start) / 1e9, 6) for v in column]
            col = f"{col} s"
        elif col == "bytes" or col.endswith("_bytes") or col == "size" or col == "max_size":
            column = [None if is_null(v) else _round(float(v) / 1048576.0, 3) for v in column]
            col = f"{col} MiB"
        elif col.endswith("_dur") or col.endswith("dur_sum") or col in ("dur", "byte_ns"):
            scale, unit = (1e6, "ms") if col != "byte_ns" else (1048576.0 * 1e9, "MiB*s")
            column = [None if is_null(v) else _round(float(v) / scale, 3) for v in column]
            col = f"{col} {unit}"
        columns.append(col)
        values.append(column)
    return Rows(columns, list(zip(*values)) if columns else [], lambda: table.frame(), table.attrs)


def _largest(table: Rows, keep: list[int], column: str) -> list[int]:
    """The TOP_ROWS of rows `keep` with the largest `column`, largest first, ties in row order, NULLs last:
    DataFrame.nlargest's choice and order."""
    values = table.column(column)
    ranked = sorted((i for i in keep if not is_null(values[i])), key=lambda i: -values[i])
    return (ranked + [i for i in keep if is_null(values[i])])[:TOP_ROWS]


def _shortened(key: str, table: Rows) -> Rows:
    """For reading: at most TOP_ROWS allocation rows (highest peak) or leak groups (most bytes), saying so."""
    if "grouping" in table.columns:
        by_alloc = [g == "allocation" for g in table.column("grouping")]
        if sum(by_alloc) > TOP_ROWS:
            print(f"(allocation rows: the {TOP_ROWS} of {sum(by_alloc)} with the highest peak; "
                  "--format json|csv has all)")
            others = [i for i, alloc in enumerate(by_alloc) if not alloc]
            return _subset(table, others + _largest(table, [i for i, alloc in enumerate(by_alloc) if alloc],
                                                    "peak_bytes"))
    elif key == "leaks" and len(table) > TOP_ROWS:
        print(f"(the {TOP_ROWS} of {len(table)} kind/size groups with the most bytes; --format json|csv has all)")
        return _subset(table, _largest(table, list(range(len(table))), "bytes"))
    return table


def _subset(table: Rows, keep: list[int]) -> Rows:
    """Rows `keep` of the table, in that order (for printing only)."""
    rows = table.rows
    return Rows(table.columns, [rows[i] for i in keep], lambda: table.frame().iloc[keep], table.attrs)


def _print(found: Any, tables: dict[str, Rows], fmt: str, start: int) -> None:
    from ctf2perfetto.analyses import UPPER_BOUND, frame

    name = found.name

    first = next(iter(tables.values()))
    notes = [UPPER_BOUND]
    for df in tables.values():
        for n in [df.attrs.get("note", ""), df.attrs.get("windows_note", "")] + list(df.attrs.get("warnings", [])):
            if n and not any(n in m for m in notes):  # a note may repeat inside a longer one
                notes.append(n)
    source = first.attrs.get("source", "none")
    if fmt == "json":
        payload = {
            "analysis": name, "source": source, "upper_bound": True, "notes": notes,
            "verdict": found.verdict(tables) if found.verdict is not None else [],
            "tables": {key: {"applies": bool(df.attrs.get("applies", True)),
                             "rows": json.loads(frame(df).to_json(orient="records"))} for key, df in tables.items()},
        }
        json.dump(payload, sys.stdout)
        sys.stdout.write("\n")
        return
    if fmt == "csv":
        for line in [f"memq {name} (source: {source})"] + notes:
            print(f"# {line}")
        for key, df in tables.items():
            if len(tables) > 1:
                print(f"# table: {key}")
            print_frame(frame(df), "csv")
        return
    if found.verdict is not None:  # two lines in words first: what the figures mean for the user
        for line in found.verdict(tables):
            print(line)
    print(f"memq {name} (source: {source})")
    for key, df in tables.items():
        print()
        if len(tables) > 1 or key != name:
            print(f"== {key} ==")
        if not df.attrs.get("applies", True):
            print(f"({df.attrs.get('note') or 'not applicable'})")
            continue
        if key == name and found.for_reading is not None:
            df, left_out = found.for_reading(df)
            if left_out:
                print(left_out)
        print_frame(_human(_shortened(key, df), start), "table")
    print()
    for line in notes:
        print(f"note: {line}")
