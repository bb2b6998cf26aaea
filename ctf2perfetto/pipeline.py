"""CTF (+ a PyTorch-profiler trace) -> a memq Perfetto trace: the one conversion pipeline.

`convert()` is what `ctf2perfetto` / `memq convert`, the analyses' on-the-fly conversion of
a trace directory and the benchmarks run:

    decode (native/decode.c, a worker thread) -> [Kineto: LttngEvents] -> write (model + writer)
                                                   -> Kineto packets, placed against the LTTng events

The decoder's worker starts before the writer's modules load, so their import overlaps decoding.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, Protocol

from ctf2perfetto.errors import UsageError
from ctf2perfetto.convert.write import ConvertSummary

if TYPE_CHECKING:
    from ctf2perfetto.convert.ranges import Range


class Progress(Protocol):
    """Where a conversion reports how far it is."""

    def decoded(self, done: int, total: int) -> None: ...  # ns of trace time decoded so far, of the trace's span

    def written(self, events: int) -> None: ...  # events written so far


def keep_freed_memory() -> None:
    """Have glibc keep freed memory for reuse instead of handing it back to the kernel.

    The pipeline allocates and frees the same batch-sized numpy arrays (0.5-15 MB) over and
    over, from two threads. With glibc's defaults many of them are mmap'd and unmapped each
    time, or trimmed from the arena top, so every batch faulted its pages in again: ~140k
    page faults and 0.35 s of system time per 3M events. With a fixed 32 MiB mmap threshold
    (above every per-batch array, the 15 MB encode buffer included) and a 1 GiB trim threshold
    they are reused: ~26k faults, 0.12 s. Both must be set: setting either one also freezes
    glibc's adaptive mmap threshold, at 128 KiB if it was not raised. Memory is still bounded
    by the largest working set (peak RSS +10 MB), not by the number of events. No-op where
    libc has no mallopt. Process-wide: entry points call it, the library does not.
    """
    import ctypes

    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)
    if mallopt is not None:
        m_trim_threshold, m_mmap_threshold = -1, -3  # <malloc.h>
        mallopt(m_mmap_threshold, 32 << 20)
        mallopt(m_trim_threshold, 1 << 30)


class _Later:
    """An iterable made on first iteration (write_trace consumes extra_packets after the batches)."""

    def __init__(self, make: Callable[[], list[bytes]]) -> None:
        self.make = make

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.make())


def _realtime_offset(info) -> int:
    """REALTIME - MONOTONIC (ns) that the trace's clock snapshot applies to the LTTng events."""
    from ctf2perfetto.convert import clocks

    clock = clocks.correspondence(info, 0)
    return clock.realtime - clock.monotonic


def _job_size_warning(out: Path) -> list[str]:
    """A job's one trace grows with every rank: say so when it is past what the embedded engine holds."""
    from ctf2perfetto.engine.capacity import INGEST_FACTOR, gib
    from ctf2perfetto.engine.wasm import HEAP_MAX_MEMORY64

    size = Path(out).stat().st_size
    if size * INGEST_FACTOR <= HEAP_MAX_MEMORY64:
        return []
    return [f"{out}: {gib(size)} holds every rank of the job, more than the embedded trace_processor loads (about "
            f"{gib(size * INGEST_FACTOR)} needed, {gib(HEAP_MAX_MEMORY64)} at most): convert a range of it "
            "(ctf2perfetto JOB_DIR --from SEC --to SEC) or one node's recording"]


def _on_dask(*, salvage: bool, batch_size: int):
    """How a job's recordings are opened inside analysis/cluster.scheduled(): each decoded on a Dask worker
    (analysis/jobcluster.py); None (here, each in its own decoder thread) outside it."""
    from ctf2perfetto.analysis import cluster

    client = cluster.current()
    if client is None:
        return None
    from ctf2perfetto.analysis.jobcluster import opener

    return opener(client, salvage=salvage, batch_size=batch_size)


def convert(trace_dir: Path, out: Path, *, kineto: Path | None = None, salvage: bool = False,
            span: Range | None = None, progress: Progress | None = None, batch_size: int = 1 << 16) -> ConvertSummary:
    """Convert the LTTng trace(s) under `trace_dir` (and a Kineto JSON of the same run) into `out`; only `span`
    of it when given, as a capture window over it would have recorded it (ranges.py).

    Returns what was written; `warnings` holds every line the user should see (losses, clock
    source, what the Kineto merge could not place). Bad input raises MemqError / UsageError
    before anything is written; `out` follows ctf2perfetto.outfiles (checked before any work, replaced
    atomically; never one of the inputs).
    """
    # numpy's OpenBLAS starts a thread per core at import, which then spin: a conversion does no
    # linear algebra, and those threads take CPU from the decoder (must be set before numpy loads).
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    from ctf2perfetto.ctf.decode import decode
    from ctf2perfetto.outfiles import check_output

    if span is not None and kineto is not None:
        raise UsageError("--kineto cannot be merged into a --from/--to range: convert the whole trace with it")
    inputs = [Path(trace_dir)] + ([Path(kineto)] if kineto is not None else [])
    check_output(out, inputs=inputs)
    from ctf2perfetto.importers.sniff import sniff

    fmt = sniff(trace_dir)  # another profiler's file (RPD, rocpd, nsys) or a THAPI CTF trace: told from the content
    if fmt is not None:
        return _convert_imported(Path(trace_dir), fmt, out, kineto=kineto, salvage=salvage, span=span,
                                 progress=progress)
    merge = lttng_events = None
    if kineto is not None:
        from ctf2perfetto.importers import kineto as kineto_merge

        merge = kineto_merge.KinetoMerge(kineto_merge.load(kineto))  # bad input fails here, before decoding
        lttng_events = kineto_merge.LttngEvents(merge.anchor_addresses())
    extra_packets: Iterable[bytes] = ()
    from ctf2perfetto.convert.job import decode_job, is_job

    job = is_job(trace_dir)  # several recordings of one job (one per node): read together, clocks aligned
    if job and kineto is not None:
        raise UsageError(f"{trace_dir}: holds several recordings; --kineto merges into one recording: convert "
                         "that recording's directory with it")
    if span is not None and span.lead is not None and (job or salvage):
        span = type(span)(span.start, span.end)  # its Lead is one recording's packets as they are: read it all
    if span is not None and span.lead is not None:  # its own packets alone
        from ctf2perfetto.convert.leads import LeadDecode

        opened = LeadDecode(span, batch_size=batch_size)
    elif job:
        opened = decode_job(trace_dir, salvage=salvage, batch_size=batch_size,
                            opener=_on_dask(salvage=salvage, batch_size=batch_size))
    else:
        opened = decode(trace_dir, salvage=salvage, batch_size=batch_size,
                        progress=progress.decoded if progress else None)
    # 64k-row batches: a quarter of the decoder's default memory, and no slower end to end.
    with opened as decoding:
        batches: Iterable = iter(decoding)  # the decoder starts now, while the writer's modules load
        from ctf2perfetto.convert.identity import PhysicalDevices

        batches = PhysicalDevices().apply(batches, lambda: decoding.info)  # a GPU is its UUID, not an ordinal
        report = None
        if span is not None:
            from ctf2perfetto.convert.ranges import RangeReport, clip

            report = RangeReport()
            batches = clip(batches, span, report)
        from ctf2perfetto.convert.write import write_trace

        if merge is not None and lttng_events is not None:
            batches = (lttng_events.add(batch) for batch in batches)
            # Made after the last batch (write_trace reads extra_packets last), against the LTTng
            # events: clock check on shared allocations, ops widened over API calls (docs/TIMELINE.md).
            extra_packets = _Later(lambda: merge.packets(lttng_events, _realtime_offset(decoding.info)))
        summary = write_trace(batches, lambda: decoding.info, out, progress=progress.written if progress else None,
                              extra_packets=extra_packets, extra_processes=merge.processes if merge else {},
                              extra_threads=merge.threads if merge else {}, inputs=inputs)
    if job:
        summary.warnings += decoding.alignment_lines()
        summary.warnings += _job_size_warning(out)
    if merge is not None:
        summary.warnings += merge.warnings(summary.lttng_threads)
    if report is not None:
        summary.range, summary.range_report = span, report
        summary.warnings += report.warnings()
    return summary


def _convert_imported(path: Path, fmt: str, out: Path, *, kineto: Path | None, salvage: bool, span: Range | None,
                      progress: Progress | None) -> ConvertSummary:
    """Another profiler's trace through its importer (ctf2perfetto/importers) and the same writer."""
    from ctf2perfetto.importers import foreign

    for given, flag in ((kineto, "--kineto"), (span, "--from/--to"), (salvage or None, "--salvage")):
        if given is not None:
            raise UsageError(f"{path}: {flag} applies to memq's own LTTng recordings, not to {foreign.NAMES[fmt]}")
    imported = foreign.read(path, fmt)
    return foreign.write(imported, out, inputs=[path], progress=progress)
