"""`memq annotate TRACE -o OUT`: the analyses' results appended to the trace as tracks."""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from ctf2perfetto.cli.output import add_engine_args, add_unified_arg


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "annotate",
        help="append the analyses to the trace as tracks any Perfetto UI shows",
        description=(
            "Run the memq analyses on TRACE and write OUT = TRACE followed by tracks holding their results, so "
            "the stock Perfetto UI (ui.perfetto.dev, memq open) shows them with no plugin, in a 'memq analyses' "
            "track group: the 'Duplicated bytes' counter, 'Redundant copies' (one slice per copy with redundant "
            "bytes: its class, bytes per class, the reason, the evidence (content: proven by a fingerprint, "
            "address: the address rules alone), and a flow from the copy), 'Staged copies', the counters "
            "'Duplicated bytes HtoD|DtoH|DtoD|HtoH' and 'Leaked bytes', and 'Leaked allocations' (one summary "
            "slice to the trace's end). Nothing in TRACE is changed. "
            "Duplicated and redundant figures are upper bounds: writes by CPU code and GPU kernels are not traced."
        ),
    )
    parser.add_argument("trace", type=Path, metavar="TRACE", help="memq trace (.pftrace from ctf2perfetto)")
    parser.add_argument("-o", "--output", type=Path, required=True, metavar="OUT",
                        help="annotated trace to write (a new file or one of yours, not TRACE; replaced "
                             "atomically)")
    add_unified_arg(parser)
    add_engine_args(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ctf2perfetto.look.annotate import annotation_packets, collect, require_protobuf_trace, write_annotated
    from ctf2perfetto.inputs import open_file
    from ctf2perfetto.cli import stderr_is_terminal
    from ctf2perfetto.outfiles import check_output
    from ctf2perfetto.cli import require_trace_file

    require_trace_file(args.trace)
    check_output(args.output, inputs=[args.trace])
    require_protobuf_trace(args.trace)
    started = time.monotonic()
    if stderr_is_terminal():
        print(f"memq annotate: loading {args.trace} and running the analyses ...", file=sys.stderr, flush=True)
    with open_file(args.trace, trace_processor=args.trace_processor) as engine:
        notes = collect(engine, args.unified)
    packets = annotation_packets(notes)
    write_annotated(args.trace, args.output, packets)
    classes = ", ".join(f"{c.replace('_', ' ')} {n}" for c, n in notes.redundant["cls"].value_counts().items())
    print(f"memq annotate: wrote {args.output} in {time.monotonic() - started:.1f} s: "
          f"{len(notes.duplicated)} duplicated-bytes samples, "
          f"{len(notes.redundant)} redundant-copy slices ({classes or 'none'}), {len(notes.staged)} staged, "
          f"{len(notes.leaks)} leaked allocations", file=sys.stderr)
    return 0
