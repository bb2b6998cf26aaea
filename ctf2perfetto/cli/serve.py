"""`memq serve TRACE`: memq's trace processor (memq SQL package included) for any Perfetto UI, on 127.0.0.1:9001."""
from __future__ import annotations

import argparse
import sys
import textwrap
from pathlib import Path
from typing import Callable

DESCRIPTION = textwrap.fill(
    "Load TRACE into memq's trace processor (the embedded WebAssembly engine, or a native trace_processor_shell) "
    "with the memq SQL package registered, and serve it over the trace processor RPC that the Perfetto UI speaks "
    "(what `trace_processor_shell --httpd` does), plus the matching Perfetto UI on the same port. Listens on "
    "127.0.0.1 only; browsers may connect from the served UI and https://ui.perfetto.dev (more with "
    "--allow-origin).", 100)
HELP_EPILOG = """\
The Perfetto UI (ui.perfetto.dev, or the matching one served here on the same port) looks for a trace
processor on 127.0.0.1:9001 and asks 'Use trace processor native acceleration?': answer 'YES, use loaded
trace'. Its query page then runs memq's modules, e.g.
    INCLUDE PERFETTO MODULE memq.redundant; SELECT * FROM memq_redundant_total('auto')
From a laptop: ssh -L 9001:127.0.0.1:9001 USER@HOST, then open http://127.0.0.1:9001/ (or ui.perfetto.dev).
One tab at a time; closing a tab stops its running query (the trace is then loaded again). Ctrl-C stops the
server. More: docs/SERVE.md."""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="serve the trace to any Perfetto UI with memq's engine and SQL package (127.0.0.1:9001)",
        description=DESCRIPTION,
        epilog=HELP_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_server_options(parser)
    parser.set_defaults(func=run)


def add_server_options(parser: argparse.ArgumentParser) -> None:
    """TRACE and the options `memq serve` and `memq open --engine memq` share."""
    parser.add_argument("trace", type=Path, metavar="TRACE", help="Perfetto trace (.pftrace), e.g. from memq annotate")
    parser.add_argument("--port", type=int, default=None,
                        help="port on 127.0.0.1 (default 9001, where the Perfetto UI looks; another port "
                             "works with the UI served here, and with ui.perfetto.dev given ?rpc_port=)")
    parser.add_argument("--allow-origin", action="append", default=[], metavar="ORIGIN",
                        help="also accept browsers from ORIGIN (scheme://host[:port]); repeatable")
    parser.add_argument("--trace-processor", metavar="PATH", default=None,
                        help="native trace_processor_shell to hold the trace (default: $MEMQ_TRACE_PROCESSOR; "
                             "unset = memq's embedded WebAssembly engine)")


def run(args: argparse.Namespace) -> int:
    from ctf2perfetto.look.rpcserver import DEFAULT_PORT

    return serve_until_stopped(start_server(args, DEFAULT_PORT if args.port is None else args.port), "memq serve")


def serve_until_stopped(server, prog: str, startup_commands: list[dict] | None = None,
                        use_loaded_trace: bool = False, on_ready: Callable[[str], None] | None = None) -> int:
    """Print the banner, call `on_ready(url)` (e.g. open a browser), serve until Ctrl-C; 0, or MemqError."""
    try:
        print_banner(server, startup_commands, use_loaded_trace)
        if on_ready is not None:
            on_ready(server.ui_url(startup_commands, use_loaded_trace))
        server.wait()
    except KeyboardInterrupt:
        print(f"{prog}: stopped", file=sys.stderr)
    finally:
        server.close()
    return 0


def start_server(args: argparse.Namespace, port: int):
    """Check the arguments, load the trace and start serving (a MemqServer)."""
    from ctf2perfetto.look.rpcserver import MemqServer
    from ctf2perfetto.look.rpcserver.access import normalize_origin
    from ctf2perfetto.look.browser import trace_processor_binary
    from ctf2perfetto.cli import require_trace_file

    require_trace_file(args.trace)
    origins = tuple(normalize_origin(o) for o in args.allow_origin)
    return MemqServer.start(args.trace, port, origins, trace_processor_binary(args.trace_processor))


def print_banner(server, startup_commands: list[dict] | None = None, use_loaded_trace: bool = False) -> None:
    """What the user opens, from here or from a laptop."""
    from ctf2perfetto.look.rpcserver.access import PERFETTO_UI_ORIGIN
    from ctf2perfetto.look.rpcserver.page import UI_RPC_PORT
    from ctf2perfetto.look.browser import ssh_tunnel_line

    status = server.session.engine_status
    stock_ui = PERFETTO_UI_ORIGIN + ("" if server.port == UI_RPC_PORT else f"/#!/?rpc_port={server.port}")
    print(f"memq serve: {server.trace} in trace processor {status.human_readable_version.split(' (')[0]} "
          f"({server.session.kind}), memq SQL package registered, on 127.0.0.1:{server.port}")
    print(f"  URL:         {server.ui_url(startup_commands, use_loaded_trace)}")
    print(f"  or:          {stock_ui}   (answer 'YES, use loaded trace' there)")
    print(f"  from laptop: {ssh_tunnel_line(server.port)}   then open the URL there")
    print("  one tab at a time; closing the tab stops its running query")
    print("Press Ctrl-C to stop.", flush=True)
