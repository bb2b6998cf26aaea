"""`memq report TRACE... -o report.html`: one self-contained page that says what to fix (ctf2perfetto.look.report)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ctf2perfetto.cli.output import SCHEDULER_ADDRESS, add_cluster_args, add_engine_args, on_cluster

WORKERS_HELP = ("with TRACE a job directory (several recordings, one per node, memq record -o job/%%h): decode each "
                "recording as a Dask task on a local cluster of N worker processes (the page is the same as "
                "without; as memq duplicated JOB_DIR --workers N)")
SCHEDULER_HELP = ("with TRACE a job directory: decode its recordings on the existing Dask cluster at ADDRESS "
                  f"{SCHEDULER_ADDRESS}; its workers must read TRACE at the same path")

TRACE_HELP = ("a memq .pftrace, a PyTorch-profiler trace (.json or .json.gz), an LTTng trace directory or a job "
              "directory of them, one per node (converted on the fly); several: one section each")


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "report",
        help="one HTML page: what the job wastes, where, the fix and its gain (start here)",
        description=(
            "Write one self-contained HTML page (inline CSS and SVG, no network: readable offline, attachable "
            "to a ticket) per run of the analyses: how much memory is duplicated (peak, time-weighted mean, share "
            "of device memory in use), how much time goes into redundant copies (summed and wall-clock, share of "
            "the run and of copy time), staged copies, and what unified memory would save, each with its "
            "evidence (content-proven or an address upper bound); the findings ranked by what fixing them "
            "would gain, each at one call site / PyTorch op with a concrete fix and the time range to look at "
            "in Perfetto; plots over time; for a job (several ranks), each rank's figures with their spread "
            "and its plots; and what the trace lacks."),
    )
    parser.add_argument("traces", nargs="+", metavar="TRACE", help=TRACE_HELP)
    parser.add_argument("-o", "--output", type=Path, required=True, metavar="OUT.html", help="HTML file to write")
    add_engine_args(parser)
    add_cluster_args(parser, WORKERS_HELP, SCHEDULER_HELP)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ctf2perfetto.cli import ticking
    from ctf2perfetto.errors import UsageError
    from ctf2perfetto.inputs import existing
    from ctf2perfetto.look.report import verdict_words, write_report

    if args.output.suffix.lower() not in (".html", ".htm"):
        raise UsageError(f"-o {args.output}: the report is an HTML page; name it *.html")
    for trace in args.traces:
        existing(trace)
        on_cluster(trace, args.workers, args.scheduler)  # one they do not apply to: said now, not after the others
    reports = write_report(args.traces, args.output, trace_processor=args.trace_processor, stage=ticking,
                           workers=args.workers, scheduler=args.scheduler)
    for rep in reports:
        print(f"{rep.name}: {verdict_words(rep)}")
    print(f"memq report: wrote {args.output}", file=sys.stderr)
    return 0
