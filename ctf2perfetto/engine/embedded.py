"""The embedded backend: the trace processor RPC spoken to trace_processor.wasm in-process.

Each call sends one `TraceProcessorRpc` (framed as a `TraceProcessorRpcStream`)
and collects the replies trace_processor produced before returning. Query
results are decoded by the perfetto package's QueryResultIterator (frames.py).
"""
from __future__ import annotations

import functools
import importlib.util
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable

from ctf2perfetto.errors import MemqError
from ctf2perfetto.engine.base import Engine, sql_error
from ctf2perfetto.engine.capacity import check_fits
from ctf2perfetto.engine.rows import Rows
from ctf2perfetto.engine.source import TraceSource
from ctf2perfetto.engine.sql_package import PACKAGE, sql_modules
from ctf2perfetto.engine.wasm import WasmTrap, WasmTraceProcessor

# Traces whose (uncompressed) size exceeds this use the memory64 build. trace_processor
# holds 3-6x a trace's size while importing it (bench/engine_ingest.py prints the heap
# high-water mark), and the 32-bit build stops at 4 GiB of heap.
MEMORY64_THRESHOLD_BYTES = 512 << 20
PROGRESS_MIN_BYTES = 64 << 20  # smaller traces load in a few seconds: no progress line
MEMORY64_ENV = "MEMQ_WASM_MEMORY64"  # "1": always the memory64 build, "0": always the 32-bit one


class RpcProtos:
    """Message classes of the trace processor RPC by name (`protos().TraceProcessorRpc`), from the perfetto
    wheel's descriptor. Not perfetto's ProtoFactory: importing its package imports pandas (0.4 s)."""

    def __init__(self) -> None:
        from google.protobuf import descriptor_pb2, message_factory
        from google.protobuf.descriptor_pool import DescriptorPool

        spec = importlib.util.find_spec("perfetto")
        if spec is None or not spec.submodule_search_locations:
            raise MemqError("the perfetto Python package is not installed (run scripts/install.sh)")
        descriptor = Path(list(spec.submodule_search_locations)[0]) / "trace_processor" / "trace_processor.descriptor"
        files = descriptor_pb2.FileDescriptorSet.FromString(descriptor.read_bytes())
        self._pool = DescriptorPool()
        for file in files.file:
            self._pool.Add(file)
        self._classes = message_factory.GetMessageClass

    def __getattr__(self, name: str) -> Any:
        cls = self._classes(self._pool.FindMessageTypeByName(f"perfetto.protos.{name}"))
        setattr(self, name, cls)
        return cls


@functools.cache
def protos() -> RpcProtos:
    """Message classes of the trace processor RPC."""
    return RpcProtos()


def forced_memory64() -> bool | None:
    """The build $MEMQ_WASM_MEMORY64 forces: True (memory64), False (32-bit), None when it forces none."""
    forced = os.environ.get(MEMORY64_ENV, "")
    return forced == "1" if forced in ("0", "1") else None


def needs_memory64(source: TraceSource) -> bool:
    """Whether to use the memory64 build: $MEMQ_WASM_MEMORY64 if set, else size > MEMORY64_THRESHOLD_BYTES."""
    forced = forced_memory64()
    return source.expanded_size() > MEMORY64_THRESHOLD_BYTES if forced is None else forced


class EmbeddedEngine(Engine):
    """trace_processor.wasm in this process (wasmtime); the default backend."""

    kind = "embedded"

    def __init__(self, source: TraceSource, memory64: bool | None = None) -> None:
        self.label = source.label
        self._rpc = protos().TraceProcessorRpc
        chosen = needs_memory64(source) if memory64 is None else memory64
        try:
            self._open(source, chosen)
        except MemqError as exc:
            # The 32-bit build's 4 GiB heap is too small for the trace (the up-front estimate is a minimum); the
            # memory64 build may load it. Unless the user chose the build, try that one.
            trap = exc.__cause__
            if memory64 is not None or forced_memory64() is not None \
                    or not (isinstance(trap, WasmTrap) and trap.bigger_heap_may_help):
                raise
            print(f"memq: {self.label}: {trap.what}; loading it again with the memory64 build", file=sys.stderr,
                  flush=True)
            self._open(source, True)

    def _open(self, source: TraceSource, memory64: bool) -> None:
        """A fresh trace_processor (32-bit or memory64) with the memq package and the trace loaded."""
        self.memory64 = memory64
        self._seq = 0
        self._tp: WasmTraceProcessor | None = WasmTraceProcessor(memory64)
        try:
            check_fits(self.label, source.expanded_size(), self._tp.heap_max)
            self._register_sql_package()
            self._load(source)
        except BaseException:
            self.close()
            raise

    # -- RPC ------------------------------------------------------------------------
    def _call(self, method: int, fill: Callable[[Any], None] | None = None) -> list[Any]:
        """Send one request; return the TraceProcessorRpc replies (fatal errors raised)."""
        if self._tp is None:
            raise MemqError(f"{self.label}: the trace is closed")
        stream = protos().TraceProcessorRpcStream()
        request = stream.msg.add()
        self._seq += 1
        request.seq = self._seq
        request.request = method
        if fill is not None:
            fill(request)
        try:
            reply_bytes = self._tp.request(stream.SerializeToString())
        except WasmTrap as exc:
            self.close()  # the instance died with the trap
            raise MemqError(f"{self.label}: {exc}") from exc
        replies = protos().TraceProcessorRpcStream.FromString(reply_bytes).msg
        for reply in replies:
            if reply.fatal_error:
                raise MemqError(f"{self.label}: trace_processor RPC failure: {reply.fatal_error}")
            if reply.invalid_request:
                raise MemqError(f"{self.label}: trace_processor does not support request {method}")
        return list(replies)

    def _register_sql_package(self) -> None:
        def fill(request: Any) -> None:
            args = request.register_sql_package_args
            args.package_name = PACKAGE
            args.allow_override = True
            for name, sql in sql_modules():
                module = args.modules.add()
                module.name = name
                module.sql = sql

        for reply in self._call(self._rpc.TPM_REGISTER_SQL_PACKAGE, fill):
            if reply.register_sql_package_result.error:
                raise MemqError(f"SQL package {PACKAGE}: {reply.register_sql_package_result.error}")

    def _load(self, source: TraceSource) -> None:
        show = source.size >= PROGRESS_MIN_BYTES and sys.stderr.isatty()
        start, done = time.monotonic(), 0
        for chunk in source.checked_chunks():
            for reply in self._call(self._rpc.TPM_APPEND_TRACE_DATA,
                                    lambda r, c=chunk: setattr(r, "append_trace_data", c)):
                if reply.append_result.error:
                    raise MemqError(f"{self.label}: trace_processor cannot read it: {reply.append_result.error}")
            done += len(chunk)
            if show:
                rate = done / 1e6 / max(time.monotonic() - start, 1e-3)
                print(f"\rmemq: loading {self.label}: {done >> 20}/{source.size >> 20} MiB ({rate:.0f} MB/s)",
                      end="", file=sys.stderr, flush=True)
        if show:
            print(file=sys.stderr)
        for reply in self._call(self._rpc.TPM_FINALIZE_TRACE_DATA):
            if reply.finalize_data_result.error:
                raise MemqError(f"{self.label}: trace_processor cannot read it: {reply.finalize_data_result.error}")

    # -- Engine ---------------------------------------------------------------------
    def rows(self, sql: str) -> Rows:
        replies = self._call(self._rpc.TPM_QUERY_STREAMING, lambda r: setattr(r.query_args, "sql_query", sql))
        results = [r.query_result for r in replies if r.HasField("query_result")]
        error = next((r.error for r in results if r.error), "")
        if error:
            problem = sql_error(error)
            memory = self._tp.out_of_memory(str(problem).removeprefix("SQL error: ")) if self._tp else None
            raise problem if memory is None else MemqError(f"{self.label}: {memory}")
        column_names = list(results[0].column_names) if results else []
        batches = [batch for result in results for batch in result.batch]
        return Rows.from_batches(column_names, batches)

    def status(self) -> Any:
        """trace_processor's StatusResult (version, version code, RPC API version)."""
        replies = self._call(self._rpc.TPM_GET_STATUS)
        return next(r.status for r in replies if r.HasField("status"))

    def forward(self, data: bytes, sink: Callable[[bytes], None]) -> None:
        """Pass raw TraceProcessorRpcStream bytes from another client (memq serve's worker) to trace_processor.

        Its replies go to `sink` as they are produced; `sink` must not raise. After
        the first forward the client owns the RPC sequence numbers, so `query()` and
        `status()` must not be used any more. Raises MemqError if trace_processor
        died; the engine is closed then.
        """
        if self._tp is None:
            raise MemqError(f"{self.label}: the trace is closed")
        try:
            self._tp.request(data, sink)
        except WasmTrap:
            self.close()
            raise

    def wasm_heap_bytes(self) -> int:
        """Bytes of WebAssembly linear memory this trace holds (its heap's high-water mark)."""
        return self._tp.heap_bytes() if self._tp is not None else 0

    def wasm_log(self) -> list[str]:
        """trace_processor's recent log lines (for diagnostics)."""
        return self._tp.log_tail() if self._tp is not None else []

    def close(self) -> None:
        tp, self._tp = self._tp, None
        if tp is not None:
            tp.close()
