"""WebSocket (RFC 6455), server side, for the Perfetto UI's trace processor connection.

The UI sends and receives binary messages whose payloads together form one byte
stream (a TraceProcessorRpcStream); like trace_processor's own server, message
boundaries carry no meaning here, so each data frame's payload is handed over as
it arrives and fragments are not reassembled. Control frames are answered: ping
with pong, close with close. Frames from a client must be masked (section 5.1).
"""
from __future__ import annotations

import base64
import hashlib
import socket
import struct
import threading
from typing import BinaryIO, Mapping

_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"  # RFC 6455 section 1.3
VERSION = "13"
# Opcodes (section 5.2).
CONTINUATION, TEXT, BINARY, CLOSE, PING, PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA
# Close codes (section 7.4.1).
NORMAL, PROTOCOL_ERROR, ABNORMAL, POLICY_VIOLATION, TOO_BIG = 1000, 1002, 1006, 1008, 1009
MAX_FRAME_BYTES = 64 << 20  # trace_processor's server limit: the UI's trace slices are 32 MiB
_CONTROL_MAX = 125


def handshake_problem(method: str, headers: Mapping[str, str]) -> str | None:
    """Why an HTTP request is not a usable WebSocket opening handshake (None if it is)."""
    if method != "GET":
        return f"a WebSocket handshake is a GET, not {method}"
    if headers.get("Upgrade", "").lower() != "websocket":
        return "not a WebSocket upgrade request (Upgrade: websocket missing)"
    if "upgrade" not in [t.strip().lower() for t in headers.get("Connection", "").split(",")]:
        return "not a WebSocket upgrade request (Connection: Upgrade missing)"
    if headers.get("Sec-WebSocket-Version") != VERSION:
        return f"WebSocket version {headers.get('Sec-WebSocket-Version')!r} (only {VERSION} is spoken)"
    try:
        key = base64.b64decode(headers.get("Sec-WebSocket-Key", ""), validate=True)
    except ValueError:
        key = b""
    if len(key) != 16:
        return "a WebSocket handshake without a valid Sec-WebSocket-Key"
    return None


def accept_token(key: str) -> str:
    """The Sec-WebSocket-Accept value answering Sec-WebSocket-Key `key` (section 4.2.2)."""
    return base64.b64encode(hashlib.sha1((key + _GUID).encode("ascii")).digest()).decode("ascii")


def frame(opcode: int, payload: bytes) -> bytes:
    """One unmasked frame with FIN set (servers never mask)."""
    size = len(payload)
    if size < 126:
        header = struct.pack("!BB", 0x80 | opcode, size)
    elif size < 1 << 16:
        header = struct.pack("!BBH", 0x80 | opcode, 126, size)
    else:
        header = struct.pack("!BBQ", 0x80 | opcode, 127, size)
    return header + payload


class WebSocket:
    """An accepted WebSocket connection: `receive()` on one thread, `send()` from any.

    `reader` is the connection's buffered input (the HTTP handler's rfile, which may
    already hold bytes after the handshake); `sock` is the socket, for writing.
    """

    def __init__(self, reader: BinaryIO, sock: socket.socket, max_frame_bytes: int = MAX_FRAME_BYTES) -> None:
        self._reader = reader
        self._sock = sock
        self._max_frame = max_frame_bytes
        self._send_lock = threading.Lock()
        self._closed = False
        self.close_code: int | None = None  # the code the connection ended with (ours or the peer's)
        self.close_reason = ""

    @property
    def closed(self) -> bool:
        return self._closed

    def receive(self) -> bytes | None:
        """The payload of the next data frame; None once the connection is closed (by either side)."""
        while not self._closed:
            head = self._read(2)
            if head is None:
                return self._lost()
            fin, opcode = head[0] & 0x80, head[0] & 0x0F
            if head[0] & 0x70:
                return self._fail(PROTOCOL_ERROR, "reserved bits set (no extension was negotiated)")
            if not head[1] & 0x80:
                return self._fail(PROTOCOL_ERROR, "client frames must be masked")
            size = head[1] & 0x7F
            if size >= 126:
                extended = self._read(2 if size == 126 else 8)
                if extended is None:
                    return self._lost()
                size = int.from_bytes(extended, "big")
            if opcode >= CLOSE and (size > _CONTROL_MAX or not fin):
                return self._fail(PROTOCOL_ERROR, "a control frame that is fragmented or over 125 bytes")
            if size > self._max_frame:
                return self._fail(TOO_BIG, f"a frame of {size} bytes (limit {self._max_frame >> 20} MiB)")
            mask = self._read(4)
            body = self._read(size) if mask is not None else None
            if body is None:
                return self._lost()
            payload = _unmask(body, mask)
            if opcode in (CONTINUATION, TEXT, BINARY):
                return payload
            if opcode == PING:
                self._write(frame(PONG, payload))
            elif opcode == CLOSE:
                code = int.from_bytes(payload[:2], "big") if len(payload) >= 2 else NORMAL
                self._finish(code, payload[2:].decode("utf-8", "replace"), echo=True)
            elif opcode != PONG:
                return self._fail(PROTOCOL_ERROR, f"unknown opcode {opcode}")
        return None

    def send(self, data: bytes) -> bool:
        """Send one binary message; False (and no exception) if the connection is gone."""
        return self._write(frame(BINARY, data))

    def close(self, code: int = NORMAL, reason: str = "") -> None:
        """Send a close frame (if still open) and shut the socket; safe to call twice."""
        self._finish(code, reason, echo=True)

    # -- internals ---------------------------------------------------------------------
    def _read(self, n: int) -> bytes | None:
        try:
            data = self._reader.read(n) if n else b""
        except (OSError, ValueError):
            return None
        return data if len(data) == n else None

    def _write(self, data: bytes) -> bool:
        with self._send_lock:
            if self._closed:
                return False
            try:
                self._sock.sendall(data)
                return True
            except OSError:
                self._closed = True
                return False

    def _finish(self, code: int, reason: str, echo: bool) -> None:
        with self._send_lock:
            if self._closed:
                return
            if self.close_code is None:
                self.close_code, self.close_reason = code, reason
            if echo:
                try:
                    # Reason trimmed to fit a control frame (125 bytes with the code).
                    self._sock.sendall(frame(CLOSE, struct.pack("!H", code) + reason.encode()[:_CONTROL_MAX - 2]))
                except OSError:
                    pass
            self._closed = True
            try:
                self._sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _fail(self, code: int, reason: str) -> None:
        self._finish(code, reason, echo=True)
        return None

    def _lost(self) -> None:
        """The peer vanished without a close frame (a killed tab, a dropped tunnel): 1006 in RFC terms."""
        self._finish(ABNORMAL, "connection lost", echo=False)
        return None


def _unmask(body: bytes, mask: bytes) -> bytes:
    """XOR `body` with the 4-byte `mask` repeated (section 5.3), a whole integer at a time."""
    if not body:
        return body
    repeated = (mask * (len(body) // 4 + 1))[:len(body)]
    return (int.from_bytes(body, "little") ^ int.from_bytes(repeated, "little")).to_bytes(len(body), "little")
