"""Shared command-line pieces for commands that print query results.

    add_format_arg(parser)     --format table|json|csv (default table)
    add_engine_args(parser)    --trace-processor PATH (native trace_processor_shell)
    add_unified_arg(parser)    --unified auto|yes|no (how redundant copies are classed)
    add_range_args(parser)     --from SEC / --to SEC (convert only a range of an LTTng trace)
    range_of(args)             ... as a ranges.Range, None without them
    print_frame(df, fmt)       the frame as an aligned table, JSON records or CSV
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from typing import TYPE_CHECKING, Any, TextIO

from ctf2perfetto.engine.rows import Rows, is_null
from ctf2perfetto.errors import UsageError
from ctf2perfetto.inputs import existing

if TYPE_CHECKING:  # pandas is imported where a frame is printed: every command builds this parser,
    import pandas as pd  # and `memq record` must not pay 0.4 s for it

FORMATS = ("table", "json", "csv")
NULL_TEXT = "NULL"


def add_format_arg(parser: argparse.ArgumentParser) -> None:
    """Add `--format table|json|csv` (default table)."""
    parser.add_argument("--format", choices=FORMATS, default="table",
                        help="output: an aligned table for reading (default), JSON records (one object per row, "
                             "null for NULL) or CSV with a header row (empty field for NULL)")


def add_engine_args(parser: argparse.ArgumentParser) -> None:
    """Add `--trace-processor PATH`: run a native trace_processor_shell instead of the embedded WebAssembly one."""
    parser.add_argument("--trace-processor", metavar="PATH", default=None,
                        help="native trace_processor_shell binary to run the queries (default: "
                             "$MEMQ_TRACE_PROCESSOR if set, else the embedded WebAssembly trace_processor)")


def add_unified_arg(parser: argparse.ArgumentParser) -> None:
    """Add `--unified auto|yes|no`, shared by every command that classes redundant copies."""
    parser.add_argument("--unified", choices=("auto", "yes", "no"), default="auto",
                        help="count every host<->device copy as avoidable (unified-memory device, e.g. MI300A, "
                             "GH200): auto = as the device property the recorder stored says (default), yes, no")


_TIME_UNITS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}


def seconds(text: str) -> float:
    """A time on the command line in seconds: `90`, `90s`, `1.5m`, `2h`, `250ms` (argparse type)."""
    number = text.rstrip("abcdefghijklmnopqrstuvwxyz")
    unit = text[len(number):] or "s"
    if unit not in _TIME_UNITS:
        raise argparse.ArgumentTypeError(f"{text!r}: not a time (a number of seconds, or with a unit: "
                                         f"{', '.join(_TIME_UNITS)})")
    try:
        return float(number) * _TIME_UNITS[unit]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: not a time (a number of seconds, or with a unit: "
                                         f"{', '.join(_TIME_UNITS)})") from None


def add_range_args(parser: argparse.ArgumentParser, what: str = "convert only") -> None:
    """Add `--from SEC` and `--to SEC` (ctf2perfetto.convert.ranges; `args.range_from`, `args.range_to` in seconds)."""
    parser.add_argument("--from", dest="range_from", type=seconds, metavar="SEC",
                        help=f"{what} from SEC seconds (or 10m, 1.5h, 250ms) after the start of the trace (0 on "
                             "the timeline of the "
                             "whole trace's conversion), as a capture window opening there would have recorded it "
                             "(window cause `range`): the allocations live then are written at its start "
                             "(memq.live), with the totals of the host blocks below the threshold; a call that "
                             "began before it is cut at it. For recordings too long to analyse whole: the trace, "
                             "and each analysis of it, grows with the range, not the run (README, \"Ranges of a "
                             "long run\")")
    parser.add_argument("--to", dest="range_to", type=seconds, metavar="SEC",
                        help=f"{what} up to SEC seconds after the start of the trace (calls that returned by "
                             "then): windows still open close there (cause `range`) and what is live then "
                             "outlived the range, not a leak (default: the end of the trace, where what is live "
                             "is a leak)")


def range_of(args: argparse.Namespace) -> Any:
    """The ranges.Range of `--from/--to` (a UsageError for bad values), None when neither is given."""
    if args.range_from is None and args.range_to is None:
        return None
    from ctf2perfetto.convert.ranges import Range  # numpy and the model: only where a range is asked for

    return Range.from_seconds(args.range_from, args.range_to)


# Where --scheduler finds a cluster, said the same by every command that takes it.
SCHEDULER_ADDRESS = "(tcp://host:port, or a scheduler file; default $DASK_SCHEDULER_ADDRESS)"


def add_cluster_args(parser: argparse.ArgumentParser, workers_help: str, scheduler_help: str) -> None:
    """Add `--workers N` and `--scheduler ADDRESS` (what each does for this command: the helps; on_cluster and
    analysis/cluster.py read them)."""
    parser.add_argument("--workers", type=int, metavar="N", default=None, help=workers_help)
    parser.add_argument("--scheduler", metavar="ADDRESS", default=None, help=scheduler_help)


def on_cluster(trace: Any, workers: int | None, scheduler: str | None,
               elsewhere: str = "") -> contextlib.AbstractContextManager[Any]:
    """Where `--workers N` / `--scheduler ADDRESS` put a job directory's recordings: a block whose conversion
    decodes each recording as a Dask task (analysis/jobcluster.py; $DASK_SCHEDULER_ADDRESS without either);
    nothing for one recording, which they do not apply to (a UsageError when given; `elsewhere` says what they
    do apply to)."""
    job = False
    if os.path.isdir(trace):  # a .pftrace is one trace; job.py imports numpy, which a table of one need not
        from ctf2perfetto.convert.job import is_job

        job = is_job(trace)
    if job:
        from ctf2perfetto.analysis.cluster import scheduled

        return scheduled(workers, scheduler)
    if workers is not None or scheduler is not None:
        existing(trace)
        raise UsageError(f"{trace}: not a directory of several recordings; --workers and --scheduler decode each "
                         f"recording of a job directory (several recordings) as a Dask task{elsewhere}")
    return contextlib.nullcontext()


def print_frame(df: pd.DataFrame | Rows, fmt: str = "table", file: TextIO | None = None) -> None:
    """Print df as 'table', 'json' or 'csv' on file (default stdout); Rows print as a table only."""
    out = sys.stdout if file is None else file
    if fmt == "json":
        json.dump([{k: _json_value(v) for k, v in row.items()} for row in df.to_dict(orient="records")], out,
                  indent=None)
        out.write("\n")
    elif fmt == "csv":
        df.to_csv(out, index=False, na_rep="", lineterminator="\n")
    elif fmt == "table":
        out.write(format_table(df))
    else:
        raise ValueError(f"unknown output format {fmt!r}; expected one of {', '.join(FORMATS)}")


def format_table(df: pd.DataFrame | Rows) -> str:
    """Columns aligned with two spaces between them: numbers to the right, text to the left."""
    if len(df.columns) == 0:
        return "(no columns)\n"
    columns = [str(c) for c in df.columns]
    if isinstance(df, Rows):
        values = df.typed_columns()
    else:
        values = [df.iloc[:, i].tolist() for i in range(len(columns))]
    cells = [[_text(v) for v in column] for column in values]
    numeric = [all(_is_number(v) for v in column if not _is_null(v)) for column in values]
    widths = [max([len(name)] + [len(c) for c in col]) for name, col in zip(columns, cells)]

    def line(values: list[str]) -> str:
        parts = [v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric)]
        return "  ".join(parts).rstrip() + "\n"

    rows = [line(columns), line(["-" * w for w in widths])]
    rows += [line([col[r] for col in cells]) for r in range(len(df))]
    rows.append(f"({len(df)} row{'s' if len(df) != 1 else ''})\n")
    return "".join(rows)


def _is_null(value: Any) -> bool:
    # pandas' NA can only be here if pandas is loaded: tables of engine Rows never import it.
    pd = sys.modules.get("pandas")
    return is_null(value) or (pd is not None and value is pd.NA)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) or hasattr(value, "dtype")


def _text(value: Any) -> str:
    if _is_null(value):
        return NULL_TEXT
    if isinstance(value, float):
        if value == int(value) and abs(value) < 1e16:
            return f"{value:.1f}"
        # For reading, six significant digits (shares, bandwidths, MiB); --format json/csv keep every digit.
        return f"{value:.6g}" if 1e-4 <= abs(value) < 1e6 else repr(value)
    if isinstance(value, bytes):
        return value.hex()
    return " ".join(str(value).split()) if "\n" in str(value) else str(value)


def _json_value(value: Any) -> Any:
    if _is_null(value):
        return None
    if hasattr(value, "item"):  # numpy scalar
        return value.item()
    if isinstance(value, bytes):
        return value.hex()
    return value
