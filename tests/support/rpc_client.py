"""A small client of memq serve for tests: raw HTTP, and the WebSocket RPC as a browser sends it.

Written from RFC 6455 and trace_processor.proto, not from the server's code, so the
tests check the server against the protocol: client frames masked with a random
key, server frames read unmasked, replies of a query complete at `is_last_batch`.
"""
from __future__ import annotations

import base64
import http.client
import os
import socket
import struct
from typing import Any

from ctf2perfetto.engine.embedded import protos
from ctf2perfetto.engine.frames import typed_frame


def http_request(port: int, method: str, path: str, headers: dict[str, str] | None = None,
                 body: bytes | None = None) -> tuple[int, dict[str, str], bytes]:
    """One request to 127.0.0.1:`port`; (status, headers, body). `headers` may override Host."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.putrequest(method, path, skip_host=headers is not None and "Host" in headers)
        for name, value in (headers or {}).items():
            conn.putheader(name, value)
        if body is not None:
            conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body)
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        conn.close()


class RpcSocket:
    """A WebSocket to /websocket. `status` is the HTTP status of the handshake (101 when accepted)."""

    def __init__(self, port: int, origin: str | None = None, host: str | None = None, timeout: float = 120) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        lines = [f"GET /websocket HTTP/1.1", f"Host: {host or f'127.0.0.1:{port}'}", "Upgrade: websocket",
                 "Connection: Upgrade", f"Sec-WebSocket-Key: {key}", "Sec-WebSocket-Version: 13"]
        if origin is not None:
            lines.append(f"Origin: {origin}")
        self.sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        self._buffer = b""
        head = self._read_until(b"\r\n\r\n").decode()
        self.status = int(head.split()[1])
        self.headers = dict(line.split(": ", 1) for line in head.split("\r\n")[1:] if ": " in line)
        self._seq = 0

    # -- bytes -------------------------------------------------------------------------
    def _read_until(self, marker: bytes) -> bytes:
        while marker not in self._buffer:
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise ConnectionError("closed during the handshake")
            self._buffer += chunk
        head, self._buffer = self._buffer.split(marker, 1)
        return head

    def _read(self, n: int) -> bytes:
        while len(self._buffer) < n:
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError("closed by the server")
            self._buffer += chunk
        data, self._buffer = self._buffer[:n], self._buffer[n:]
        return data

    def send_frame(self, payload: bytes, opcode: int = 2, fin: bool = True, masked: bool = True) -> None:
        """One frame as a browser sends it (masked), or deliberately not."""
        size = len(payload)
        first = (0x80 if fin else 0) | opcode
        mask_bit = 0x80 if masked else 0
        if size < 126:
            header = struct.pack("!BB", first, mask_bit | size)
        elif size < 1 << 16:
            header = struct.pack("!BBH", first, mask_bit | 126, size)
        else:
            header = struct.pack("!BBQ", first, mask_bit | 127, size)
        if masked:
            key = os.urandom(4)
            payload = bytes(b ^ key[i % 4] for i, b in enumerate(payload)) if size < 4096 else \
                _mask_fast(payload, key)
            header += key
        self.sock.sendall(header + payload)

    def recv_frame(self) -> tuple[int, bytes]:
        """(opcode, payload) of the next frame from the server (which must not mask)."""
        first, second = self._read(2)
        assert not second & 0x80, "server frames must not be masked"
        size = second & 0x7F
        if size == 126:
            size = struct.unpack("!H", self._read(2))[0]
        elif size == 127:
            size = struct.unpack("!Q", self._read(8))[0]
        return first & 0x0F, self._read(size)

    # -- RPC ---------------------------------------------------------------------------
    def rpc(self, method: str, sql: str | None = None) -> list[Any]:
        """Send one TraceProcessorRpc request; its replies (TraceProcessorRpc messages) until the last one."""
        self.send_frame(self.request_bytes(method, sql))
        return self.replies()

    def request_bytes(self, method: str, sql: str | None = None) -> bytes:
        """The next request (numbered like the UI numbers them, from 0) as a one-message stream."""
        stream = protos().TraceProcessorRpcStream()
        message = stream.msg.add()
        message.seq = self._seq
        self._seq += 1
        message.request = getattr(protos().TraceProcessorRpc, method)
        if sql is not None:
            message.query_args.sql_query = sql
        return stream.SerializeToString()

    def replies(self) -> list[Any]:
        stream = b""
        out: list[Any] = []
        while True:
            opcode, payload = self.recv_frame()
            if opcode == 8:
                raise ConnectionError(f"closed by the server: {close_reason(payload)}")
            if opcode != 2:
                continue
            stream += payload
            messages = protos().TraceProcessorRpcStream.FromString(stream).msg if _complete(stream) else None
            if messages is None:
                continue
            out.extend(messages)
            stream = b""
            last = out[-1]
            if last.fatal_error or not last.HasField("query_result") or \
                    any(b.is_last_batch for b in last.query_result.batch):
                return out

    def query(self, sql: str):
        """Rows of `sql` as a DataFrame (the same decoding as memq's engine)."""
        replies = self.rpc("TPM_QUERY_STREAMING", sql=sql)
        # A fatal_error (e.g. the server refusing a second tab) carries no query_result: never an empty frame.
        fatal = [r.fatal_error for r in replies if r.fatal_error]
        assert not fatal, fatal
        results = [r.query_result for r in replies]
        errors = [r.error for r in results if r.error]
        assert not errors, errors
        return typed_frame(list(results[0].column_names), [b for r in results for b in r.batch])

    def close(self) -> None:
        self.sock.close()


def close_reason(payload: bytes) -> str:
    return f"{struct.unpack('!H', payload[:2])[0]} {payload[2:].decode()}" if len(payload) >= 2 else "no code"


def _complete(stream: bytes) -> bool:
    """Whether `stream` ends exactly at a message boundary (tag 0x0A, varint length, body)."""
    pos = 0
    while pos < len(stream):
        if stream[pos] != 0x0A:
            raise AssertionError(f"bad tag {stream[pos]:#x} in the reply stream")
        pos, length, shift = pos + 1, 0, 0
        while True:
            if pos >= len(stream):
                return False
            byte = stream[pos]
            pos += 1
            length |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
        pos += length
    return pos == len(stream)


def _mask_fast(payload: bytes, key: bytes) -> bytes:
    import numpy as np

    data = np.frombuffer(payload, np.uint8)
    keys = np.resize(np.frombuffer(key, np.uint8), len(data))
    return (data ^ keys).tobytes()
