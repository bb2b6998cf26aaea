"""`memq plot TRACE -o out.png`: memory, duplicated bytes and redundant copy time in one figure."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ctf2perfetto.cli.output import add_engine_args, add_unified_arg


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "plot",
        help="draw live memory, duplicated bytes and redundant copy time as a PNG",
        description=(
            "Draw one figure of TRACE: live bytes per memory kind over time (host heap, pinned, registered, "
            "managed summed over processes; device bytes per GPU), duplicated bytes over time (total and per "
            "copy direction) and redundant copy time per class (summed over copies and wall-clock). Time is "
            "in seconds from the trace's start, sizes in B/KiB/MiB/GiB. Duplicated and redundant figures are "
            "upper bounds: writes by CPU code and GPU kernels are not traced."
        ),
    )
    parser.add_argument("trace", type=Path, metavar="TRACE", help="memq trace (.pftrace from ctf2perfetto)")
    parser.add_argument("-o", "--output", type=Path, required=True, metavar="OUT.png", help="PNG file to write")
    add_unified_arg(parser)
    add_engine_args(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ctf2perfetto.inputs import open_file
    from ctf2perfetto.errors import UsageError
    from ctf2perfetto.outfiles import check_output
    from ctf2perfetto.cli import stderr_is_terminal
    from ctf2perfetto.cli import require_trace_file
    from ctf2perfetto.look.plot import collect, render

    require_trace_file(args.trace)
    if args.output.suffix.lower() != ".png":
        raise UsageError(f"-o {args.output}: the figure is a PNG; name it *.png")
    check_output(args.output, inputs=[args.trace])
    if stderr_is_terminal():
        print(f"memq plot: loading {args.trace} and running the analyses ...", file=sys.stderr, flush=True)
    with open_file(args.trace, trace_processor=args.trace_processor) as engine:
        data = collect(engine, args.unified)
    render(data, args.output, f"memq: {args.trace.name}")
    print(f"memq plot: wrote {args.output}", file=sys.stderr)
    return 0
