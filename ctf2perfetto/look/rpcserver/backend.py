"""The trace processor behind memq serve: one loaded trace, the memq package registered.

`pipe.open_backend(trace, binary)` starts it in a child process: memq's worker
running the embedded engine, or, given a binary, a native `trace_processor_shell
--stdiod`. The server passes the client's RPC requests through unchanged, one at a
time (`forward`), and the replies go straight back. `interrupt()` stops a runaway
request from another thread; the backend is dead afterwards and the server loads
the trace again into a new one.
"""
from __future__ import annotations

import abc
from pathlib import Path
from typing import Any, Callable

from ctf2perfetto.engine.embedded import needs_memory64, protos
from ctf2perfetto.engine.source import trace_source
from ctf2perfetto.engine.wasm import WasmTraceProcessor
from ctf2perfetto.errors import MemqError
from ctf2perfetto.look.rpcserver import wire

Sink = Callable[[bytes], None]
EMBEDDED, NATIVE = "embedded", "native"  # Backend.kind


class Interrupted(MemqError):
    """The request was stopped by `Backend.interrupt()`; the backend is closed."""


class Backend(abc.ABC):
    """A trace_processor holding the trace, spoken to in raw RPC messages."""

    #: EMBEDDED or NATIVE
    kind = ""
    #: trace_processor's StatusResult (versions), read once it has loaded the trace.
    status: Any

    @abc.abstractmethod
    def forward(self, message: bytes, sink: Sink) -> None:
        """Run one framed TraceProcessorRpc request; every reply message goes to `sink` (which must not
        raise). Returns after the request's last reply. Raises Interrupted, or MemqError if it died."""

    @abc.abstractmethod
    def interrupt(self) -> None:
        """Stop the running request (thread-safe); the backend is dead afterwards. No effect when idle."""

    @abc.abstractmethod
    def close(self) -> None:
        """Free it (safe to call twice)."""

    @property
    @abc.abstractmethod
    def alive(self) -> bool:
        """False once closed, interrupted or dead."""


def embedded_status(trace: Path) -> Any:
    """The StatusResult memq's embedded engine gives for `trace`, at once (a fresh instance answers it)."""
    tp = WasmTraceProcessor(needs_memory64(trace_source(trace)))
    try:
        reply = tp.request(wire.request(protos().TraceProcessorRpc.TPM_GET_STATUS))
    finally:
        tp.close()
    if not reply:
        raise MemqError("trace_processor gave no status")
    return wire.parse(reply).status
