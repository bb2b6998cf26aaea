"""Top-level framing check of a Perfetto protobuf trace.

trace_processor accepts a protobuf trace cut in the middle of a packet without a
word (the partial packet is dropped at end of file, no stat records it), so a
truncated .pftrace would silently give wrong answers. Walking the framing of the
top-level `Trace.packet` fields (tag, length, skip) costs little next to the
import and tells where the file was cut.
"""
from __future__ import annotations

PACKET_TAG = 0x0A  # Trace.packet: field 1, length-delimited
_WIRE_FIXED = {1: 8, 5: 4}


def is_protobuf_trace(head: bytes) -> bool:
    """Whether a trace starts like a Perfetto protobuf (its first field is a packet)."""
    return head[:1] == bytes([PACKET_TAG])


def _varint(buf: bytes, pos: int) -> tuple[int, int] | None:
    """(value, next position), or None when the buffer ends inside the varint."""
    value = shift = 0
    while pos < len(buf):
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
    return None


class ProtoFraming:
    """Fed the trace chunk by chunk; `truncation()` says whether the last field is complete."""

    def __init__(self) -> None:
        self._offset = 0  # file offset where the next chunk starts
        self._skip = 0  # bytes of the current field's payload still to come
        self._carry = b""  # an incomplete field header left at the end of the previous chunk
        self._field_start = 0  # file offset and payload size of the last field seen
        self._field_size = 0
        self._malformed_at: int | None = None

    def feed(self, chunk: bytes) -> None:
        size_in = len(chunk)
        if self._malformed_at is not None or self._skip >= size_in:
            self._skip = max(0, self._skip - size_in)
            self._offset += size_in
            return
        buf = self._carry + chunk if self._carry else chunk
        base = self._offset - len(self._carry)
        pos = 0 if self._carry else self._skip
        end = len(buf)
        self._carry = b""
        while pos < end:
            if buf[pos] == PACKET_TAG and pos + 1 < end and buf[pos + 1] < 0x80:
                # The common case: a packet shorter than 128 bytes has a two-byte header ...
                size, body = buf[pos + 1], pos + 2
            elif buf[pos] == PACKET_TAG and pos + 2 < end and buf[pos + 2] < 0x80:
                # ... and one shorter than 16 KiB a three-byte header.
                size, body = (buf[pos + 1] & 0x7F) | (buf[pos + 2] << 7), pos + 3
            else:
                header = _field_header(buf, pos)
                if header is None:
                    self._carry = buf[pos:]
                    break
                if header[0] < 0:
                    self._malformed_at = base + pos
                    break
                size, body = header
            self._field_start, self._field_size = base + pos, size
            pos = body + size
        self._skip = max(0, pos - end)
        self._offset += size_in

    def problem(self) -> str | None:
        """None if the trace ended on a field boundary, else what is wrong (one phrase)."""
        if self._malformed_at is not None:
            return f"malformed protobuf: invalid field header at byte {self._malformed_at}"
        if self._skip:
            return (f"truncated protobuf: the packet at byte {self._field_start} declares {self._field_size} bytes "
                    f"but the trace ends {self._skip} bytes short")
        if self._carry:
            return f"truncated protobuf: the trace ends inside a packet header at byte {self._offset - len(self._carry)}"
        return None


def _field_header(buf: bytes, pos: int) -> tuple[int, int] | None:
    """(payload size, payload position) of the field at pos; None if the buffer ends first; size -1 if invalid."""
    tag = _varint(buf, pos)
    if tag is None:
        return None
    wire_type, pos = tag[0] & 7, tag[1]
    if wire_type == 2:
        return _varint(buf, pos)
    if wire_type == 0:
        value = _varint(buf, pos)
        return None if value is None else (0, value[1])
    if wire_type in _WIRE_FIXED:
        return _WIRE_FIXED[wire_type], pos
    return -1, pos
