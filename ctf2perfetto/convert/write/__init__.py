"""EventBatches -> a Perfetto protobuf trace laid out as docs/TRACE_FORMAT.md says (ctf2perfetto.traceformat).

`write_trace` runs the memory model (model.py) over each batch and writes its events
as they come: heap instants (heap.py), API and copy slices (gpu.py), allocations live
when a capture window opened (windows.py), counter samples; then the capture windows
(windows.py), the `memq` track (meta.py) and the track descriptors (registry.py). Batches
are cut after each early window close, where the process's allocations end. Bulk events
are encoded from columns in C (stream.py, encode.py). Packet 0, the clock snapshot,
needs the complete TraceInfo: room is reserved for it and it is written last. Copy ->
allocation flows must be appended to allocation packets already written: when a trace
has any, the file is rewritten once at the end with them (encode.Patches keeps them,
spilled beside `out` on copy-heavy traces). Everything happens in a
temporary file renamed over `out` only on success.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import numpy as np

from ctf2perfetto.convert import clocks
from ctf2perfetto.convert.encode import copy_patched
from ctf2perfetto.errors import MemqError
from ctf2perfetto.events import EventBatch, EventKind, TraceInfo
from ctf2perfetto.convert.model import MemoryModel, kind_in
from ctf2perfetto.convert.windows import Windows
from ctf2perfetto.outfiles import AtomicOutput
from ctf2perfetto.traceformat import names as N
from ctf2perfetto.traceformat import packets as P
from ctf2perfetto.traceformat import tracks as T
from ctf2perfetto.convert.write.gpu import GpuWriter
from ctf2perfetto.convert.write.heap import HEAP_EVENTS, HeapWriter
from ctf2perfetto.convert.write.meta import MetaWriter, placed_losses
from ctf2perfetto.convert.write.registry import TrackRegistry
from ctf2perfetto.convert.write.stream import PacketStream, counter_table
from ctf2perfetto.convert.write.window_tracks import WindowWriter


@dataclass
class ConvertSummary:
    """What a conversion wrote."""

    events: dict[str, int] = field(default_factory=dict)  # by EventKind name (lower case)
    processes: int = 0
    threads: int = 0
    lttng_threads: set[tuple[int, int]] = field(default_factory=set)  # (pid, tid) pairs with memq events
    allocations: int = 0
    live_at_start: int = 0  # allocations live when a capture window opened (memq:live)
    windows: int = 0  # capture windows (per process)
    unmatched_frees: int = 0
    replaced_allocations: int = 0  # allocations started over a live one (their free was not traced)
    small_allocations: int = 0  # host blocks below the recording's threshold (memq:host_small totals)
    small_frees: int = 0
    lost_events: int = 0
    lost_packets: int = 0
    missing_events: int = 0  # TraceInfo's: what the files lack (index/, memq-record.json) ...
    missing_packets: int = 0
    missing_streams: int = 0
    recorded_events: int | None = None
    dropped_packets: int = 0  # ... and what --salvage cut away
    dropped_bytes: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    clock_source: str = ""  # "recorder" or "ctf clock offset"
    trace_offset_ns: int = 0  # trace_processor's time of an event minus its `ts`: REALTIME - MONOTONIC of the
    #                           clock snapshot (the trace's clock is REALTIME, docs/TRACE_FORMAT.md "Clock recipe")
    output: str = ""
    output_bytes: int = 0
    trace_duration_ns: int = 0  # last event - first event
    range: Any = None  # the --from/--to range converted (ranges.Range), None for the whole trace ...
    range_report: Any = None  # ... and what it left out and made (ranges.RangeReport)
    elapsed_s: float = 0.0  # wall-clock time the conversion took

    @property
    def total_events(self) -> int:
        return sum(self.events.values())


class _TraceWriter:
    """Batches in, packets out (see the module docstring)."""

    def __init__(self, body, spill_dir: Path | None = None) -> None:
        self.out = PacketStream(body)
        self.model = MemoryModel()
        self.tracks = TrackRegistry(self.out)
        self.next_call_id = 1
        self.first_ts: int | None = None
        self.last_ts = 0
        self.events: dict[str, int] = {}
        self.lost: list[dict[str, np.ndarray]] = []
        # Room for packet 0 (the clock snapshot needs the complete TraceInfo), then the
        # packet that clears the memq sequence's state and sets its default clock.
        self.out.write(bytes(clocks.SNAPSHOT_RECORD_SIZE))
        self.out.start_sequence(N.SEQ_MEMQ)
        self.heap = HeapWriter(self.out, self.tracks)
        self.gpu = GpuWriter(self.out, self.tracks, spill_dir)
        self.windows = Windows()
        self.window_writer = WindowWriter(self.out, self.tracks)
        self.meta = MetaWriter(self.out, self.tracks)
        self._pairs: list[tuple[int, int]] = []  # the current batch's threads, and each row's index in it
        self._pair_of_row = np.zeros(0, np.int64)

    def add(self, batch: EventBatch) -> None:
        """One batch; cut after each capture-window close, where the process's allocations end."""
        if len(batch) == 0:
            return
        for part, closed in self.windows.split(batch):
            self._add(part)
            if closed is not None:
                ts, keys, values = self.model.end_process(*closed)
                self.out.emit(counter_table(ts, self.tracks.counter_uuids(keys), values))

    def _add(self, batch: EventBatch) -> None:
        n = len(batch)
        if n == 0:
            return
        if self.first_ts is None:
            self.first_ts = int(batch["ts"][0])
        self.first_ts = min(self.first_ts, int(batch["begin"].min()), int(batch["ts"].min()))
        self.last_ts = max(self.last_ts, int(batch["ts"].max()))
        counts = np.bincount(batch["kind"])  # kinds are < 256: a count per value, no sort
        if len(counts) > EventKind.LOST and counts[EventKind.LOST]:  # a loss's slice spans the range it lost
            lost = batch["kind"] == EventKind.LOST
            self.last_ts = max(self.last_ts, int((batch["ts"][lost] + batch["size"][lost].astype(np.int64)).max()))
        for k in np.flatnonzero(counts).tolist():
            name = EventKind(k).name.lower()
            self.events[name] = self.events.get(name, 0) + int(counts[k])
        mb = self.model.process(batch)
        thread_uuid = self._thread_uuids(batch)
        row_offsets = np.zeros(n, np.int64)
        sample_done = np.zeros(len(mb.sample_row), bool)

        heap = np.flatnonzero(kind_in(batch["kind"], HEAP_EVENTS))
        if len(heap):
            # A libc-only batch (the bulk of most traces) is used in place, not gathered row by row.
            rows = slice(None) if len(heap) == n else heap
            row_offsets[rows] = self.heap.emit(batch, mb, rows, self._pairs, self._pair_of_row, sample_done)
        kind = batch["kind"]
        live = np.flatnonzero(kind == EventKind.LIVE) if int(kind.max()) >= EventKind.LIVE else np.zeros(0, np.int64)
        window_of_live = self.windows.note(batch, live)
        if len(live):
            row_offsets[live] = self.window_writer.emit_live(batch, mb, live, thread_uuid, window_of_live)
        gpu = np.flatnonzero((kind >= EventKind.GPU_ALLOC) & (kind < EventKind.LOST) & (kind != EventKind.GPU_COPY_DONE))
        done = np.flatnonzero(kind == EventKind.GPU_COPY_DONE)
        if len(done):
            self.gpu.emit_copy_done(batch, done, thread_uuid)
        if len(gpu):
            row_call_id = np.zeros(n, np.uint64)
            row_call_id[gpu] = np.arange(self.next_call_id, self.next_call_id + len(gpu), dtype=np.uint64)
            self.next_call_id += len(gpu)
            row_offsets[gpu] = self.gpu.emit_api(batch, mb, gpu, thread_uuid, row_call_id)
            self.gpu.emit_copies(batch, mb, row_call_id, row_offsets)
        rest = ~sample_done
        if rest.any():
            ts, keys = mb.sample_ts[rest], mb.sample_key[rest]
            self.out.emit(counter_table(ts, self.tracks.counter_uuids(keys), mb.sample_value[rest]))
        lost = batch["kind"] == EventKind.LOST
        if lost.any():  # written at the end, when the stream file names are known
            self.lost.append({c: batch[c][lost] for c in ("ts", "size", "aux", "aux2", "stream")})
        self.model.set_tags(row_offsets)

    def _thread_uuids(self, batch: EventBatch) -> np.ndarray:
        """Thread track uuid per row (LOST rows belong to no thread)."""
        pid, tid = batch["pid"], batch["tid"]
        key = (pid << 32) ^ (tid & 0xFFFFFFFF)
        real = batch["kind"] != EventKind.LOST
        if key[0] == key[-1] and (key == key[0]).all():  # one thread: the common case, no sort
            pairs, inverse = [(int(pid[0]), int(tid[0]))], np.zeros(len(key), np.int64)
            used = [bool(real.any())]
        else:
            keys, first, inverse = np.unique(key, return_index=True, return_inverse=True)
            pairs = [(int(pid[i]), int(tid[i])) for i in first.tolist()]
            used = np.zeros(len(keys), bool)
            used[inverse[real]] = True
            used = used.tolist()
        self.tracks.threads.update(pair for pair, u in zip(pairs, used) if u)
        self._pairs, self._pair_of_row = pairs, inverse
        uuids = np.array([T.thread_uuid(p, t) for p, t in pairs], np.uint64)
        return uuids[inverse]

    def finish(self, info: TraceInfo, summary: ConvertSummary, extra_processes: Mapping[int, str],
               extra_threads: Mapping[tuple[int, int], str], extra_packets: Iterable[bytes]) -> None:
        """The `memq` track, every descriptor, then the extra packets."""
        t0 = self.first_ts or 0
        placed, files = placed_losses(info)
        if placed is not None:  # losses the files show, with the files as their streams
            self.lost.append(placed)
        if self.lost:
            self.meta.emit_lost({c: np.concatenate([part[c] for part in self.lost]) for c in self.lost[0]},
                                list(info.stream_files) + files)
        self.window_writer.emit_windows(self.windows.all(), t0, self.last_ts)
        self.meta.emit_info(info, t0, summary)
        self.out.write(self.tracks.descriptors(info, t0, extra_processes, extra_threads))
        for packet in extra_packets:
            self.out.write(P.record(bytes(packet)))


def write_trace(batches: Iterable[EventBatch], info: TraceInfo | Callable[[], TraceInfo], out: Path, *,
                progress: Callable[[int], None] | None = None, extra_packets: Iterable[bytes] = (),
                extra_processes: Mapping[int, str] = {}, extra_threads: Mapping[tuple[int, int], str] = {},
                inputs: Iterable[Path] = ()) -> ConvertSummary:
    """Write `batches` as a memq Perfetto trace at `out` (atomically: nothing is left there on failure).

    `info` may be a callable, called after the last batch (the decoder completes
    TraceInfo while it reads). `extra_packets` are serialized TracePackets appended
    as they are; `extra_processes` / `extra_threads` get track descriptors even
    if no memq event uses them. `progress(events_done)` is called after each batch. `out`
    follows ctf2perfetto.outfiles (never an input, a link, a device, ...; `inputs` are the command's).
    """
    started = time.monotonic()
    out = Path(out)
    summary = ConvertSummary(output=str(out))
    try:
        with AtomicOutput(out, inputs=inputs) as target:
            name = target.path
            with open(name, "wb", buffering=1 << 20) as body:
                writer = _TraceWriter(body, out.parent)
                done = 0
                for batch in batches:
                    writer.add(batch)
                    done += len(batch)
                    if progress is not None:
                        progress(done)
                trace_info = info() if callable(info) else info
                totals = writer.model.totals
                summary.events = dict(sorted(writer.events.items()))
                summary.allocations = totals.allocations
                summary.live_at_start = totals.live_at_start
                summary.windows = len(writer.windows)
                summary.unmatched_frees = totals.unmatched_frees
                summary.replaced_allocations = totals.replaced
                summary.small_allocations = totals.small_allocations
                summary.small_frees = totals.small_frees
                writer.finish(trace_info, summary, extra_processes, extra_threads, extra_packets)
                clock = clocks.correspondence(trace_info, writer.first_ts or 0)
                summary.clock_source = clock.source
                summary.trace_offset_ns = clock.realtime - clock.monotonic
                if not writer.gpu.patches:
                    body.flush()
                    body.seek(0)
                    body.write(clocks.snapshot_record(clock))
            if writer.gpu.patches:  # copy -> allocation flows: the allocation packets grow, so the file is rewritten
                patched = target.temp()
                with open(patched, "wb", buffering=1 << 20) as final:
                    final.write(clocks.snapshot_record(clock))
                    copy_patched(name, clocks.SNAPSHOT_RECORD_SIZE, writer.gpu.patches, final)
                name = patched
            target.commit(name)
    except OSError as exc:
        raise MemqError(f"{out}: cannot write: {exc.strerror or exc}") from exc
    threads = writer.tracks.threads
    summary.processes = len({p for p, _ in threads} | set(extra_processes))
    summary.threads = len(threads | set(extra_threads))
    summary.lttng_threads = set(threads)
    summary.lost_events = trace_info.lost_events
    summary.lost_packets = trace_info.lost_packets
    for name in ("missing_events", "missing_packets", "missing_streams", "recorded_events", "dropped_packets",
                 "dropped_bytes"):
        setattr(summary, name, getattr(trace_info, name))
    summary.skipped = dict(trace_info.skipped)
    summary.warnings = list(trace_info.warnings)
    if summary.clock_source != "recorder":
        summary.warnings.append("no recorder clock readings: wall-clock time from the CTF clock offset (no BOOTTIME in the clock snapshot)")
    summary.output_bytes = out.stat().st_size
    summary.trace_duration_ns = (writer.last_ts - writer.first_ts) if writer.first_ts is not None else 0
    summary.elapsed_s = time.monotonic() - started
    return summary
