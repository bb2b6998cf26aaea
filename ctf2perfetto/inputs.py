"""What every command accepts as TRACE, loaded into trace_processor.

A memq Perfetto trace (`.pftrace` from ctf2perfetto) is loaded as it is. Anything else is
converted by memq first and the engine loads the result: an LTTng trace directory by the
conversion pipeline, a PyTorch-profiler / Chrome JSON trace by memq's own importer
(importers/kineto: trace_processor's JSON importer drops an event that partly overlaps
another on its track, copies included). The format is told from the content, never from
the file name. The engine itself (ctf2perfetto.engine) only ever sees Perfetto traces.
"""
from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Any, Iterator

from ctf2perfetto.engine.source import TraceSource, is_json_trace, trace_source
from ctf2perfetto.errors import UsageError


def as_perfetto(source: TraceSource) -> TraceSource:
    """`source` as a Perfetto trace: a JSON trace converted by memq's importer, another profiler's database
    (RPD, rocpd, Nsight Systems SQLite: ctf2perfetto/importers) converted by the pipeline, a Perfetto trace
    itself."""
    if source.path is not None and source.data is None:
        from ctf2perfetto.importers.sniff import is_sqlite

        if is_sqlite(source.path):
            from ctf2perfetto.pipeline import convert

            with tempfile.TemporaryDirectory(prefix="memq-") as tmp:
                converted = Path(tmp) / "trace.pftrace"
                convert(source.path, converted)
                data = converted.read_bytes()
            return TraceSource(label=source.label, size=len(data), data=data)
    if not is_json_trace(source):
        return source
    from ctf2perfetto.importers.kineto import standalone_trace

    for _ in source.checked_chunks():  # a JSON object without traceEvents: one line, before any parsing
        pass
    data = standalone_trace(source.path)
    return TraceSource(label=source.label, size=len(data), data=data)


def servable_trace(trace: Path, directory: Path) -> Path:
    """`trace` as a file any trace processor reads as memq does: a converted input written into `directory`,
    a Perfetto trace itself. For what reads files, not memq's engine: the Perfetto UI's own engine, a native
    trace_processor_shell, memq serve's engine process."""
    source = as_perfetto(trace_source(trace))
    if source.data is None:
        return trace
    served = directory / f"{trace.name}.pftrace"
    served.write_bytes(source.data)
    return served


def existing(trace: str | os.PathLike[str]) -> Path:
    """`trace` as a Path; a UsageError when nothing is there."""
    path = Path(trace)
    if not path.exists():
        raise UsageError(f"{path}: no such trace file or directory")
    return path


@contextlib.contextmanager
def open_input(trace: Any, *, trace_processor: str | os.PathLike[str] | None = None,
               span: Any = None) -> Iterator[Any]:
    """An engine over `trace` (a path, or an open engine, which is passed through); a directory is converted
    first, only over `span` (a convert.ranges.Range) when one is given."""
    if hasattr(trace, "query"):
        yield trace
        return
    from ctf2perfetto.engine import open_trace

    path = existing(trace)
    if span is not None and not path.is_dir():
        raise UsageError(f"{path}: --from/--to need an LTTng trace directory (a converted trace is converted "
                         "already: ctf2perfetto DIR --from SEC --to SEC -o PART.pftrace)")
    if path.is_dir():
        from ctf2perfetto.pipeline import convert  # the converter's imports (0.1 s) only where there is something to convert

        with tempfile.TemporaryDirectory(prefix="memq-") as tmp:
            converted = Path(tmp) / "trace.pftrace"
            convert(path, converted, span=span)
            with open_trace(converted, trace_processor=trace_processor) as engine:
                yield engine
        return
    with open_file(path, trace_processor=trace_processor) as engine:
        yield engine


def open_file(trace: str | os.PathLike[str], *, trace_processor: str | os.PathLike[str] | None = None) -> Any:
    """An engine over a trace file (a JSON trace converted first), for the commands that take a file, not an LTTng
    directory (memq sql, annotate, plot)."""
    from ctf2perfetto.engine import open_trace

    return open_trace(as_perfetto(trace_source(trace)), trace_processor=trace_processor)
