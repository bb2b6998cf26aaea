"""The trace processor behind memq serve: one loaded trace, the memq package registered.

`open_backend(trace, binary)` loads it: the embedded engine (trace_processor.wasm in
this process, compiled with interrupt checks) or, given a binary, a native
`trace_processor_shell --stdiod`. Either way the server passes the client's RPC
requests through unchanged, one at a time (`forward`), and the replies go straight
back. `interrupt()` stops a runaway request from another thread; the backend is
dead afterwards and the server loads the trace again into a new one.
"""
from __future__ import annotations

import abc
from pathlib import Path
from typing import Any, Callable

from ..engine.embedded import EmbeddedEngine, needs_memory64, protos
from ..engine.source import trace_source
from ..engine.wasm import WasmInterrupted, WasmTraceProcessor
from ..errors import MemqError
from . import wire

Sink = Callable[[bytes], None]


class Interrupted(MemqError):
    """The request was stopped by `Backend.interrupt()`; the backend is closed."""


class Backend(abc.ABC):
    """A trace_processor holding the trace, spoken to in raw RPC messages."""

    #: 'embedded' or 'native'
    kind = ""
    #: trace_processor's StatusResult (versions), read once while loading.
    status: Any

    @abc.abstractmethod
    def forward(self, message: bytes, sink: Sink) -> None:
        """Run one framed TraceProcessorRpc request; every reply message goes to `sink` (which must not
        raise). Returns after the request's last reply. Raises Interrupted, or MemqError if it died."""

    @abc.abstractmethod
    def interrupt(self) -> None:
        """Stop the running request (thread-safe); the backend is dead afterwards."""

    @abc.abstractmethod
    def close(self) -> None:
        """Free it (safe to call twice)."""

    @property
    @abc.abstractmethod
    def alive(self) -> bool:
        """False once closed, interrupted or crashed."""


class EmbeddedBackend(Backend):
    """trace_processor.wasm in this process (interruptible build)."""

    kind = "embedded"

    def __init__(self, trace: Path) -> None:
        self._engine: EmbeddedEngine | None = EmbeddedEngine(trace_source(trace), interruptible=True)
        self.status = self._engine.status()

    def forward(self, message: bytes, sink: Sink) -> None:
        if self._engine is None:
            raise MemqError("trace_processor is closed")
        try:
            self._engine.forward(message, sink)
        except WasmInterrupted as exc:
            self._engine = None
            raise Interrupted(str(exc)) from exc
        except MemqError:
            self._engine = None
            raise

    def interrupt(self) -> None:
        engine = self._engine
        if engine is not None:
            engine.interrupt()

    def close(self) -> None:
        engine, self._engine = self._engine, None
        if engine is not None:
            engine.close()

    @property
    def alive(self) -> bool:
        return self._engine is not None


def embedded_status(trace: Path) -> Any:
    """The StatusResult the embedded engine will give for `trace`, at once (a fresh instance answers it)."""
    tp = WasmTraceProcessor(needs_memory64(trace_source(trace)), interruptible=True)
    try:
        reply = tp.request(wire.request(protos().TraceProcessorRpc.TPM_GET_STATUS))
    finally:
        tp.close()
    return wire.parse(reply).status


def open_backend(trace: Path, binary: Path | None = None) -> Backend:
    """Load `trace` into the embedded engine, or into the native shell `binary` when given."""
    if binary is None:
        return EmbeddedBackend(trace)
    from .native import NativeBackend

    return NativeBackend(binary, trace)
