"""What open_trace accepts: a trace file or the trace's bytes, checked before trace_processor sees it."""
from __future__ import annotations

import os
import re
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from ctf2perfetto.errors import MemqError, UsageError
from ctf2perfetto.engine.framing import ProtoFraming, is_protobuf_trace

CHUNK_BYTES = 4 << 20  # bytes read from the file per append request


class JsonEventsCheck:
    """Whether a JSON-object trace has a `traceEvents` key anywhere (plain or gzipped).

    trace_processor loads any JSON object, e.g. `{"a": 1}`, as an empty trace, so
    without this a wrong file would give silently empty answers. Scanning stops at
    the first hit, which in Chrome/Kineto traces is near the start.
    """

    KEY = b'"traceEvents"'

    def __init__(self, gzipped: bool) -> None:
        self._inflate = zlib.decompressobj(31) if gzipped else None
        self._tail = b""
        self.found = False

    def feed(self, chunk: bytes) -> None:
        if self.found:
            return
        try:
            data = self._inflate.decompress(chunk) if self._inflate is not None else chunk
        except zlib.error:
            self.found = True  # a damaged gzip is trace_processor's to report
            return
        window = self._tail + data
        self.found = self.KEY in window
        self._tail = window[-len(self.KEY):]

    @staticmethod
    def applies(head: bytes) -> bool:
        """True for a JSON object (plain or gzipped); JSON arrays are event lists and need no key."""
        if head[:2] == b"\x1f\x8b":
            try:
                head = zlib.decompressobj(31).decompress(head)
            except zlib.error:
                return False
        return head.lstrip()[:1] == b"{" and is_text(head)


_CONTROL = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1f]")


def is_text(head: bytes) -> bool:
    """No control byte but whitespace in the first 512 bytes: JSON text (which may start with whitespace, libkineto
    writes "\\n{"), not a Perfetto protobuf whose first packet tag (0x0A) and length happen to read as "\\n{"."""
    return not _CONTROL.search(head[:512])


@dataclass(frozen=True)
class TraceSource:
    """A trace file (`path`) or in-memory trace contents (`data`); `label` names it in errors."""

    label: str
    size: int
    path: Path | None = None
    data: bytes | None = None

    def chunks(self) -> Iterator[bytes]:
        """The trace contents in pieces of at most CHUNK_BYTES."""
        if self.data is not None:
            view = memoryview(self.data)
            for start in range(0, len(view), CHUNK_BYTES):
                yield bytes(view[start:start + CHUNK_BYTES])
            return
        assert self.path is not None
        try:
            with open(self.path, "rb") as f:
                while chunk := f.read(CHUNK_BYTES):
                    yield chunk
        except OSError as exc:
            raise MemqError(f"{self.label}: cannot read: {exc.strerror}") from exc

    def checked_chunks(self) -> Iterator[bytes]:
        """chunks(), then a MemqError if a protobuf trace ends mid-packet (trace_processor would not say)."""
        head = self.head(4096)
        json_object = JsonEventsCheck.applies(head)
        framing = ProtoFraming() if not json_object and is_protobuf_trace(head[:1]) else None
        events = JsonEventsCheck(head[:2] == b"\x1f\x8b") if json_object else None
        for chunk in self.chunks():
            if framing is not None:
                framing.feed(chunk)
            if events is not None:
                events.feed(chunk)
            yield chunk
        problem = framing.problem() if framing is not None else None
        if problem:
            raise MemqError(f"{self.label}: {problem}")
        if events is not None and not events.found:
            raise MemqError(f"{self.label}: a JSON object with no traceEvents: not a Chrome/PyTorch-profiler trace")

    def head(self, n: int) -> bytes:
        """The first n bytes (fewer if the trace is shorter)."""
        if self.data is not None:
            return self.data[:n]
        assert self.path is not None
        with open(self.path, "rb") as f:
            return f.read(n)

    def expanded_size(self) -> int:
        """Bytes trace_processor will hold: the size, or for gzip the size recorded in its trailer."""
        if self.head(2) != b"\x1f\x8b" or self.size < 18:
            return self.size
        if self.data is not None:
            trailer = self.data[-4:]
        else:
            assert self.path is not None
            with open(self.path, "rb") as f:
                f.seek(-4, os.SEEK_END)
                trailer = f.read(4)
        # ISIZE is the uncompressed size modulo 4 GiB; a file past that is big anyway.
        return max(struct.unpack("<I", trailer)[0], self.size)


def trace_source(source: str | os.PathLike[str] | bytes | bytearray | memoryview | TraceSource) -> TraceSource:
    """Check a trace argument: UsageError for a missing file or a directory, MemqError for an empty trace
    (a TraceSource is checked already)."""
    if isinstance(source, TraceSource):
        return source
    if isinstance(source, (bytes, bytearray, memoryview)):
        data = bytes(source)
        if not data:
            raise MemqError("<trace bytes>: empty, not a trace")
        return TraceSource(label="<trace bytes>", size=len(data), data=data)
    if not isinstance(source, (str, os.PathLike)):
        raise UsageError(f"a trace is a file path or bytes, not {type(source).__name__}")
    path = Path(source)
    if not path.exists():
        raise UsageError(f"{path}: no such file")
    if path.is_dir():
        raise UsageError(f"{path}: is a directory, not a trace file (convert an LTTng trace with ctf2perfetto first)")
    if not path.is_file():  # a fifo would block for ever, a device never end
        raise UsageError(f"{path}: not a regular file, not a trace")
    if not os.access(path, os.R_OK):
        raise UsageError(f"{path}: permission denied")
    size = path.stat().st_size
    if size == 0:
        raise UsageError(f"{path}: empty file, not a trace")
    source = TraceSource(label=str(path), size=size, path=path)
    try:
        source.head(4096)  # readable at all: one line now rather than trace_processor's later
    except OSError as exc:
        raise UsageError(f"{path}: cannot read: {exc.strerror or exc}") from None
    return source


def is_json_trace(source: TraceSource) -> bool:
    """True for a JSON trace (Kineto, Chrome; plain or gzipped): memq converts those before the engine loads them
    (ctf2perfetto.inputs)."""
    head = source.head(4096)
    return JsonEventsCheck.applies(head) or (head.lstrip()[:1] == b"[" and is_text(head))
