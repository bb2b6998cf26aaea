"""The trace processor RPC wire format, as far as memq serve needs to look into it.

Both directions of the RPC are one byte stream: a `TraceProcessorRpcStream`, i.e.
repeated field 1, each `msg` written as the tag byte 0x0A, a varint length and one
`TraceProcessorRpc` (protos/perfetto/trace_processor/trace_processor.proto). The
stream may be cut anywhere into websocket frames or pipe reads; `MessageSplitter`
gives back whole messages, each still framed, so it can be forwarded unchanged and
also parsed on its own as a one-message stream.

memq serve hands trace_processor one request at a time, so it must know when a
request's replies are complete: a streaming query answers with `query_result`
messages until a batch has `is_last_batch`; every other request with one message.
"""
from __future__ import annotations

from typing import Any

from ctf2perfetto.engine.embedded import protos
from ctf2perfetto.errors import MemqError

MSG_TAG = 0x0A  # field 1 (msg), wire type 2 (length-delimited)
# Largest message accepted: the UI sends trace data in 32 MiB slices and a
# websocket frame is capped at 64 MiB, as in trace_processor's own server.
MAX_MESSAGE_BYTES = 64 << 20
_VARINT_MAX_BYTES = 10


class FramingError(MemqError):
    """The byte stream is not a TraceProcessorRpcStream (bad tag or oversized message)."""


class MessageSplitter:
    """Cuts a TraceProcessorRpcStream byte stream into whole framed messages."""

    def __init__(self, max_bytes: int = MAX_MESSAGE_BYTES) -> None:
        self._buffer = bytearray()
        self._max_bytes = max_bytes

    def feed(self, data: bytes) -> list[bytes]:
        """Add `data`; return the messages it completed (tag and length included), in order."""
        self._buffer += data
        messages = []
        start = 0
        while True:
            header = _header(self._buffer, start, self._max_bytes)
            if header is None:
                break
            header_len, body_len = header
            end = start + header_len + body_len
            if end > len(self._buffer):
                break
            messages.append(bytes(self._buffer[start:end]))
            start = end
        del self._buffer[:start]
        return messages

    @property
    def pending_bytes(self) -> int:
        """Bytes of an incomplete message held back."""
        return len(self._buffer)


def _header(buffer: bytearray, start: int, max_bytes: int) -> tuple[int, int] | None:
    """(header length, body length) of the message at `start`, None if the header is incomplete."""
    if start >= len(buffer):
        return None
    if buffer[start] != MSG_TAG:
        raise FramingError(f"not a trace processor RPC stream (byte 0x{buffer[start]:02x} where a message starts)")
    length, shift = 0, 0
    for i in range(1, _VARINT_MAX_BYTES + 1):
        if start + i >= len(buffer):
            return None
        byte = buffer[start + i]
        length |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            if length > max_bytes:
                raise FramingError(f"an RPC message of {length} bytes (more than {max_bytes >> 20} MiB)")
            return i + 1, length
    raise FramingError("an RPC message length that is not a varint")


def parse(message: bytes) -> Any:
    """The TraceProcessorRpc in one framed message."""
    return protos().TraceProcessorRpcStream.FromString(message).msg[0]


def is_last_reply(reply: Any) -> bool:
    """Whether `reply` (a TraceProcessorRpc) is the last one its request gets."""
    if reply.fatal_error:
        return True
    if reply.HasField("query_result"):
        return any(batch.is_last_batch for batch in reply.query_result.batch)
    return True


def fatal_error(text: str) -> bytes:
    """A stream with one message carrying `fatal_error` (the UI stops and shows it)."""
    stream = protos().TraceProcessorRpcStream()
    stream.msg.add().fatal_error = text
    return stream.SerializeToString()


def request(method: int, seq: int = 0, **args: Any) -> bytes:
    """A stream with one request; `args` are TraceProcessorRpc fields (e.g. append_trace_data=b"...")."""
    stream = protos().TraceProcessorRpcStream()
    message = stream.msg.add()
    message.seq = seq
    message.request = method
    for name, value in args.items():
        setattr(message, name, value)
    return stream.SerializeToString()


def status_result(trace_name: str, engine_status: Any) -> bytes:
    """The /status answer: the engine's version fields with the loaded trace's name."""
    status = protos().StatusResult()
    status.CopyFrom(engine_status)
    status.loaded_trace_name = trace_name
    return status.SerializeToString()
