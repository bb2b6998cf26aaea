"""`memq diff A B`: what changed between two runs (ctf2perfetto.look.diff)."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ctf2perfetto.cli.output import add_engine_args, add_unified_arg

TRACE_HELP = ("a memq .pftrace, a PyTorch-profiler trace (.json or .json.gz), or an LTTng trace directory "
              "(converted on the fly)")


def _percent(text: str) -> float:
    try:
        value = float(text.rstrip("%"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a percentage (e.g. 5 or 5%)") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: a percentage of at least 0")
    return value


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "diff",
        help="what changed between two runs: per class, call site and direction, with a verdict",
        description=(
            "Compare run B with run A (before and after a fix): per redundant class, per call site and per copy "
            "direction the count, bytes and time in each, the duplicated bytes' peak and mean, and a verdict "
            "line. Call sites are matched by library + symbol + offset, not by address, so two runs of one "
            "program compare. Figures with evidence `address` are upper bounds: CPU and kernel writes are not "
            "traced."),
    )
    parser.add_argument("a", metavar="A", help="the run before: " + TRACE_HELP)
    parser.add_argument("b", metavar="B", help="the run after")
    parser.add_argument("--format", choices=("table", "json"), default="table",
                        help="table (default) or one JSON object with raw bytes and ns")
    parser.add_argument("--fail-if-worse", type=_percent, metavar="PCT", default=None,
                        help="exit 1 when a headline figure (redundant copy time or bytes, repeat bytes, duplicated "
                             "peak or mean, staged copy time) of B is more than PCT percent above A's (from 0 to "
                             "anything counts as worse): a CI regression check")
    add_unified_arg(parser)
    add_engine_args(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ctf2perfetto.cli import ticking
    from ctf2perfetto.cli.output import print_frame
    from ctf2perfetto.engine.rows import Rows
    from ctf2perfetto.errors import UsageError
    from ctf2perfetto.look.diff import HEADLINE, as_json, diff_traces

    for trace in (args.a, args.b):
        if not Path(trace).exists():
            raise UsageError(f"{trace}: no such trace file or directory")
    d = diff_traces(args.a, args.b, unified=args.unified, trace_processor=args.trace_processor, stage=ticking)
    if args.format == "json":
        json.dump(as_json(d), sys.stdout)
        sys.stdout.write("\n")
    else:
        print(d.verdict)
        words = dict((k, w) for k, w, _ in HEADLINE)
        print(f"Most grown: {words[d.worst[0]]} ({'new in B' if d.worst[1] == float('inf') else f'{d.worst[1]:+.1f}%'})"
              if d.worst[1] > 0 else "Nothing grew.")
        for title, rows in (("per class", d.classes), ("per direction", d.directions),
                            ("per call site, class and direction", d.sites)):
            print(f"\n== {title} (A: {d.a.name}, B: {d.b.name}) ==")
            if rows:
                print_frame(Rows.from_records(rows, list(rows[0].keys())), "table")
            else:
                print("(nothing)")
        print("\nnote: figures with evidence `address` are upper bounds (CPU and kernel writes are not traced); "
              "bytes in B, times in ns.")
    if args.fail_if_worse is not None and d.worst[1] > args.fail_if_worse:
        print(f"memq diff: worse by more than {args.fail_if_worse:g}%: {d.worst[0]}", file=sys.stderr)
        return 1
    return 0
