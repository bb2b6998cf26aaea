"""Several recordings of one job (one `memq record` per node) read as one: clocks aligned, pids kept apart.

`memq record -o job/%h` on every node leaves job/<host>/ recordings side by side. `recordings(path)` finds
them; `decode_job` decodes each with its own decoder and merges the rows in time order, as one decode of one
trace would give them, so the writer and the analyses need nothing else:

* **Clocks.** LTTng stamps events with the node's CLOCK_MONOTONIC, which differs per node. Every recording
  holds REALTIME-then-MONOTONIC readings (memq:clock at each process's start and end, and memq-record.json's
  around the command). A reading delayed between its two reads gives REALTIME - MONOTONIC too small by the
  delay, never too large, so a recording's offset is its readings' largest (the least delayed, as NTP takes the
  fastest exchange); the first recording (in node order) is the reference, its best reading is the trace's
  clock snapshot, and every other recording's rows move by its offset minus the reference's, onto the
  reference's MONOTONIC clock. The **uncertainty** stated: each side's readings' range (largest - smallest)
  plus READ_NS for the best reading itself, summed over the two sides (for the reference alone: where its
  events land on REALTIME). It assumes the nodes' REALTIME clocks agree (NTP/PTP): how far they do not is
  invisible to memq and not included.
* **Pids.** Two nodes may run processes of the same pid: every recording after the first has its pids and
  tids moved up by its index * PID_BASE (10,000,000: above Linux's largest pid, 2^22), so each process stays its
  own in the trace and its trace pid reads as the recording's index then its pid (node 1's pid 4411 is
  10004411, what the Perfetto UI shows after the process name); the memq.process instants and process names
  (`rank 2 (node a12, pid 4411)`) give the real pid and the node. Perfetto's machine ids, which would keep
  each node's pids apart without this, do not work for a trace laid out as memq writes it in the
  trace_processor memq uses (docs/ARCHITECTURE.md, "A job of several recordings").
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from ctf2perfetto.errors import UsageError
from ctf2perfetto.events import EventBatch, EventKind, TraceInfo

PID_LIMIT = 1 << 22  # Linux's largest pid + 1 (PID_MAX_LIMIT)
PID_BASE = 10_000_000  # a recording's pids move up by its index times this (a round number above PID_LIMIT)
MAX_RECORDINGS = (2**31 - PID_LIMIT) // PID_BASE + 1  # trace pids are int32 (Perfetto's ProcessDescriptor.pid)
READ_NS = 1000  # a REALTIME/MONOTONIC pair read back to back: bound on the gap between the two reads
RECORD_FILE = "memq-record.json"


def _is_recording(path: Path) -> bool:
    if (path / RECORD_FILE).is_file():
        return True
    return any(p.name == "metadata" for p in path.rglob("metadata"))


def recordings(path: str | Path) -> list[Path]:
    """The recordings `path` holds: itself when it is one recording (memq-record.json at its top, or CTF
    directly under it), else each subdirectory that is one, in name order. A directory whose top holds
    no memq-record.json but whose subdirectories are each a memq recording is a job."""
    path = Path(path)
    if (path / RECORD_FILE).is_file() or not path.is_dir():
        return [path]
    subs = sorted(p for p in path.iterdir() if p.is_dir() and (p / RECORD_FILE).is_file())
    return subs if len(subs) >= 2 else [path]


def is_job(path: str | Path) -> bool:
    return len(recordings(path)) > 1


def _offsets(info: TraceInfo) -> list[int]:
    return [int(r["realtime"]) - int(r["monotonic"]) for r in info.clock_readings
            if r.get("realtime") is not None and r.get("monotonic") is not None]


def clock_offset(info: TraceInfo) -> tuple[int, int, int]:
    """(REALTIME - MONOTONIC ns: the largest reading's, the readings' range ns, readings) of one recording; the
    CTF clock offset (the session daemon's measure) when it has no reading."""
    offsets = _offsets(info)
    if not offsets:
        return int(info.clock_offset_ns), 0, 0
    return max(offsets), max(offsets) - min(offsets), len(offsets)


def best_reading(info: TraceInfo) -> dict | None:
    """The reading clock_offset takes (the largest REALTIME - MONOTONIC), None without readings."""
    readings = [r for r in info.clock_readings if r.get("realtime") is not None and r.get("monotonic") is not None]
    return max(readings, key=lambda r: int(r["realtime"]) - int(r["monotonic"])) if readings else None


def node_of(info: TraceInfo, path: Path) -> str:
    """The node a recording ran on: the host name its processes recorded (memq:identity), else
    memq-record.json's host, else the trace's, else the directory's name."""
    hosts = [str(r.get("host") or "") for r in getattr(info, "identities", [])]
    hosts = [h for h in hosts if h]
    if hosts:
        return max(sorted(set(hosts)), key=hosts.count)
    record = info.record or {}
    return str(record.get("host") or info.hostname or path.name)


@dataclass
class Recording:
    """One recording of the job and how it was placed on the job's timeline."""

    path: str
    node: str = ""
    index: int = 0
    offset_ns: int = 0         # its REALTIME - MONOTONIC
    spread_ns: int = 0         # range of its readings' REALTIME - MONOTONIC
    readings: int = 0
    shift_ns: int = 0          # added to its timestamps (offset - the reference's)
    uncertainty_ns: int = 0    # of shift_ns
    pid_base: int = 0          # added to its pids and tids

    def as_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass
class _Source:
    decoding: object
    iterator: Iterator[EventBatch]
    rec: Recording
    head: EventBatch | None = None
    done: bool = False
    api_map: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    files_seen: int = 0
    file_map: list[int] = field(default_factory=list)
    devices_seen: int = 0


class JobDecoding:
    """Decodes of several recordings merged in time order (see the module docstring); iterate for
    EventBatches; `info` (one TraceInfo over all of them, `recordings` added) is complete after the last."""

    def __init__(self, paths: list[Path], *, salvage: bool = False, batch_size: int = 1 << 16,
                 progress=None, opener: Callable[[Path], Any] | None = None) -> None:
        """`opener(path)`: how each recording is decoded (a context manager iterated for EventBatches, with
        `info`, as ctf/decode.Decoding); here by default, or on a Dask worker (analysis/jobcluster.opener)."""
        from ctf2perfetto.ctf.decode import decode

        self.paths = paths
        self.api_names: list[str] = []
        self.stream_files: list[str] = []
        self._decodings = []
        self._progress = progress
        try:
            for path in paths:
                opened = opener(path) if opener is not None else decode(path, salvage=salvage, batch_size=batch_size)
                self._decodings.append(opened.__enter__())
        except BaseException:
            self.close()
            raise
        self.info = TraceInfo()
        self.recordings: list[Recording] = []

    def __enter__(self) -> "JobDecoding":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        for d in self._decodings:
            try:
                d.__exit__(None, None, None)
            except Exception:  # noqa: BLE001 - every decoder is released, the first error is not masked
                pass
        self._decodings = []

    # ---- placement ------------------------------------------------------------------------------
    def _place(self, sources: list[_Source]) -> None:
        """Offsets from the clock readings the recordings hold before their first batch (memq-record.json)
        or, for recordings without one, from what the first batch brought (memq:clock start)."""
        for s in sources:
            s.rec.offset_ns, s.rec.spread_ns, s.rec.readings = clock_offset(s.decoding.info)
        ref = sources[0].rec
        for s in sources:
            s.rec.shift_ns = s.rec.offset_ns - ref.offset_ns
            own = s.rec.spread_ns + READ_NS
            s.rec.uncertainty_ns = own if s.rec is ref else own + ref.spread_ns + READ_NS

    def _fetch(self, s: _Source) -> None:
        while not s.done and (s.head is None or len(s.head) == 0):
            try:
                batch = next(s.iterator)
            except StopIteration:
                s.done = True
                s.head = None
                return
            s.head = self._adapt(s, batch)

    def _adapt(self, s: _Source, batch: EventBatch) -> EventBatch:
        """A source's batch on the job's clock, pids, function names and stream file list."""
        cols = dict(batch.columns)
        if s.rec.shift_ns:
            cols["ts"] = cols["ts"] + np.int64(s.rec.shift_ns)
            begin = cols["begin"]
            cols["begin"] = np.where(begin != 0, begin + np.int64(s.rec.shift_ns), begin)
        if s.rec.pid_base:
            cols["pid"] = cols["pid"] + np.int64(s.rec.pid_base)
            cols["tid"] = cols["tid"] + np.int64(s.rec.pid_base)
        names = batch.api_names
        if len(s.api_map) < len(names):
            extra = []
            for name in names[len(s.api_map):]:
                if name not in self.api_names:
                    self.api_names.append(name)
                extra.append(self.api_names.index(name))
            s.api_map = np.concatenate([s.api_map, np.array(extra, np.int64)])
        if len(names):
            cols["api"] = s.api_map[cols["api"].astype(np.int64)].astype(cols["api"].dtype)
        # Devices as they are described (the rows of this batch after their memq:device), for readers of
        # `info` while the rows go by (convert/identity.PhysicalDevices).
        devices = s.decoding.info.devices
        self.info.devices.extend({**d, "pid": int(d.get("pid", 0)) + s.rec.pid_base} for d in devices[s.devices_seen:])
        s.devices_seen = len(devices)
        files = s.decoding.info.stream_files
        for name in files[s.files_seen:]:
            s.file_map.append(len(self.stream_files))
            self.stream_files.append(name)
        s.files_seen = len(files)
        if s.file_map:
            lost = cols["kind"] == EventKind.LOST
            if lost.any():
                fmap = np.array(s.file_map, np.int64)
                idx = cols["stream"].astype(np.int64)
                ok = lost & (idx >= 0) & (idx < len(fmap))
                stream = cols["stream"].copy()
                stream[ok] = fmap[idx[ok]].astype(stream.dtype)
                cols["stream"] = stream
        return EventBatch(cols, self.api_names)

    def __iter__(self) -> Iterator[EventBatch]:
        sources = [_Source(d, iter(d), Recording(str(p), index=i, pid_base=i * PID_BASE))
                   for i, (d, p) in enumerate(zip(self._decodings, self.paths))]
        # The first batch of each before placing: a recording without memq-record.json has its
        # readings in memq:clock events only.
        firsts = []
        for s in sources:
            try:
                firsts.append(next(s.iterator))
            except StopIteration:
                firsts.append(None)
                s.done = True
        self._place(sources)
        for s, first in zip(sources, firsts):
            if first is not None:
                s.head = self._adapt(s, first)
        self.recordings = [s.rec for s in sources]
        while True:
            for s in sources:
                self._fetch(s)
            live = [s for s in sources if s.head is not None and len(s.head)]
            if not live:
                break
            pending = [s for s in live if not s.done]
            horizon = min(int(s.head["ts"][-1]) for s in pending) if pending else None
            parts = []
            for s in live:
                ts = s.head["ts"]
                n = len(ts) if horizon is None else int(np.searchsorted(ts, horizon, side="right"))
                if n:
                    parts.append(s.head.take(slice(0, n)))
                    s.head = s.head.take(slice(n, None))
            batch = EventBatch.concat(parts, self.api_names)
            order = np.argsort(batch["ts"], kind="stable")
            yield batch.take(order)
        self._finish(sources)

    # ---- one TraceInfo ----------------------------------------------------------------------------
    def _finish(self, sources: list[_Source]) -> None:
        info = TraceInfo()
        ref = sources[0].decoding.info
        info.clock_offset_ns = ref.clock_offset_ns
        # The reference's readings first (the trace's clock snapshot is made from them), then every other
        # recording's, moved onto the reference's clock like its rows (process lifetimes, memq.process).
        best = best_reading(ref)
        # The snapshot (convert/clocks.correspondence: the first "start" reading) is the reference's best
        # reading, the one the shifts were taken against; pid -1: no process's start (run_durations).
        info.clock_readings = ([{**best, "pid": -1, "where": "start"}] if best else []) + list(ref.clock_readings)
        for s in sources[1:]:
            info.clock_readings.extend({**r, "pid": int(r.get("pid") or 0) + s.rec.pid_base,
                                        "monotonic": int(r["monotonic"]) + s.rec.shift_ns}
                                       for r in s.decoding.info.clock_readings if r.get("monotonic") is not None)
        info.record = ref.record
        info.hostname = ref.hostname
        info.stream_files = list(self.stream_files)
        for s in sources:
            sub: TraceInfo = s.decoding.info
            base = s.rec.pid_base
            s.rec.node = node_of(sub, Path(s.rec.path))
            info.processes.update({pid + base: name for pid, name in sub.processes.items()})
            info.threads.update({(pid + base, tid + base): name for (pid, tid), name in sub.threads.items()})
            self.info.devices.extend({**d, "pid": int(d.get("pid", 0)) + base} for d in sub.devices[s.devices_seen:])
            s.devices_seen = len(sub.devices)
            info.binaries.extend({**d, "pid": int(d.get("pid", 0)) + base} for d in sub.binaries)
            if hasattr(info, "identities"):
                info.identities.extend({**d, "pid": int(d["pid"]) + base, "ppid": int(d.get("ppid") or 0) + base,
                                        "real_pid": int(d["pid"])} for d in sub.identities)
            for key in ("lost_events", "lost_packets", "missing_packets", "missing_streams", "missing_events",
                        "dropped_packets", "dropped_bytes", "events_read"):
                setattr(info, key, getattr(info, key) + getattr(sub, key))
            for name, n in sub.skipped.items():
                info.skipped[name] = info.skipped.get(name, 0) + n
            info.losses.extend(sub.losses)
            info.warnings.extend(sub.warnings)
        info.devices = self.info.devices  # the same records the rows were renumbered by
        if hasattr(info, "recordings"):
            info.recordings = [r.as_dict() for r in self.recordings]
        self.info = info

    def alignment_lines(self) -> list[str]:
        """One line per recording placed against the reference: what moved and how sure it is."""
        out = []
        ref = self.recordings[0]
        out.append(f"{ref.path}: node {ref.node}, the job's clock (from {ref.readings} REALTIME readings; its events "
                   f"on REALTIME within ±{ref.uncertainty_ns:,} ns)")
        for r in self.recordings[1:]:
            out.append(f"{r.path}: node {r.node}, clock moved by {r.shift_ns:+,} ns onto {ref.node}'s "
                       f"(from {r.readings} REALTIME readings; uncertainty ±{r.uncertainty_ns:,} ns, assuming the "
                       "nodes' REALTIME clocks agree)")
        return out


def decode_job(path: str | Path, *, salvage: bool = False, batch_size: int = 1 << 16, progress=None,
               opener: Callable[[Path], Any] | None = None) -> JobDecoding:
    paths = recordings(path)
    if len(paths) < 2:
        raise UsageError(f"{path}: not a directory of several recordings")
    if len(paths) > MAX_RECORDINGS:
        raise UsageError(f"{path}: {len(paths)} recordings; one trace holds at most {MAX_RECORDINGS} (each node's "
                         "pids are moved apart within Perfetto's 32-bit pids): convert a subdirectory holding some "
                         "of them")
    return JobDecoding(paths, salvage=salvage, batch_size=batch_size, progress=progress, opener=opener)


def read_record(path: Path) -> dict:
    try:
        return json.loads((path / RECORD_FILE).read_text())
    except (OSError, ValueError):
        return {}
