"""The native backend: a trace_processor_shell binary driven by the perfetto package."""
from __future__ import annotations

import io
import os
from pathlib import Path

from ctf2perfetto.errors import MemqError, UsageError
from ctf2perfetto.paths import sql_package_dir
from ctf2perfetto.engine.base import Engine, sql_error
from ctf2perfetto.engine.rows import Rows
from ctf2perfetto.engine.sql_package import PACKAGE
from ctf2perfetto.engine.source import TraceSource

ENV_VAR = "MEMQ_TRACE_PROCESSOR"


def check_binary(path: str | os.PathLike[str], origin: str) -> Path:
    """The trace_processor_shell at `path`; UsageError naming `origin` (the flag or variable) if unusable."""
    binary = Path(path)
    if not binary.is_file():
        raise UsageError(f"{binary}: no such trace_processor_shell binary (from {origin})")
    if not os.access(binary, os.X_OK):
        raise UsageError(f"{binary}: trace_processor_shell is not executable (from {origin})")
    return binary


class NativeEngine(Engine):
    """trace_processor_shell as a subprocess (perfetto.trace_processor.TraceProcessor over HTTP)."""

    kind = "native"

    def __init__(self, source: TraceSource, binary: Path) -> None:
        from perfetto.common.exceptions import PerfettoException
        from perfetto.trace_processor.api import SqlPackage, TraceProcessor, TraceProcessorConfig

        self.label = source.label
        self._error = PerfettoException
        self._tp = None
        for _ in source.checked_chunks():
            pass  # the shell reads the file itself; this only checks the protobuf framing
        config = TraceProcessorConfig(
            bin_path=str(binary),
            add_sql_packages=[SqlPackage(path=str(sql_package_dir()), package=PACKAGE)],
        )
        trace = str(source.path) if source.path is not None else io.BytesIO(source.data or b"")
        try:
            self._tp = TraceProcessor(trace=trace, config=config)
        except PerfettoException as exc:
            raise MemqError(_startup_failure(self.label, binary, str(exc))) from exc
        except OSError as exc:
            raise MemqError(f"{binary}: cannot run trace_processor_shell: {exc.strerror or exc}") from exc

    def rows(self, sql: str) -> Rows:
        if self._tp is None:
            raise MemqError(f"{self.label}: the trace is closed")
        # The backend's raw QueryResult keeps the cell types, so both backends build frames the same way.
        try:
            result = self._tp._backend.execute_query(sql)
        except (self._error, OSError) as exc:
            raise MemqError(f"{self.label}: trace_processor_shell failed: {_one_line(exc)}") from exc
        if result.error:
            raise sql_error(result.error)
        return Rows.from_batches(list(result.column_names), list(result.batch))

    def close(self) -> None:
        tp, self._tp = getattr(self, "_tp", None), None
        if tp is not None:
            tp.close()


def _startup_failure(label: str, binary: Path, report: str) -> str:
    """One line for a shell that did not start or could not load the trace."""
    if report.startswith("Trace processor failed to start"):
        # perfetto's report: "...failed to start.\nstdout: ...\nstderr: ...\nIf this is a slow machine..."
        output = report.split("\n", 1)[-1].rsplit("If this is a slow machine", 1)[0]
        return f"{binary}: trace_processor_shell failed to start ({' '.join(output.split()) or 'no output'})"
    return f"{label}: {' '.join(report.split())} (trace_processor_shell {binary})"


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())
