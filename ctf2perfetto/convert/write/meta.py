"""The `memq` track: trace info, devices, loaded binaries and losses (written once the trace is read)."""
from __future__ import annotations

import numpy as np

from ctf2perfetto import __version__
from ctf2perfetto.convert.encode import ARG_INT, ARG_STRING, ARG_UINT
from ctf2perfetto.events import TraceInfo
from ctf2perfetto.convert.identity import job_processes, run_durations
from ctf2perfetto.traceformat import names as N
from ctf2perfetto.traceformat import packets as P
from ctf2perfetto.traceformat import tracks as T
from ctf2perfetto.convert.write.registry import TrackRegistry
from ctf2perfetto.convert.write.stream import PacketStream, instant_table, slice_table

A = N.A


class MetaWriter:
    def __init__(self, out: PacketStream, tracks: TrackRegistry) -> None:
        self.out = out
        self.tracks = tracks

    def emit_lost(self, lost: dict[str, np.ndarray], stream_files: list[str]) -> None:
        """memq.lost slices on the memq track (lanes below it where loss ranges overlap)."""
        g = len(lost["ts"])
        if g == 0:
            return
        begin = lost["ts"]
        end = begin + lost["size"].astype(np.int64)
        track = np.zeros(g, np.uint64)
        for i in np.lexsort((np.arange(g), begin)).tolist():
            track[i] = self.tracks.lost_lane(int(begin[i]), int(end[i]))
        interner = self.out.interner
        name = np.array([interner.name(N.LOSS_NAMES[int(k)]) for k in lost["aux2"].tolist()], np.uint32)
        stream = interner.strings(stream_files[i] if 0 <= i < len(stream_files) else f"stream {i}"
                                  for i in lost["stream"].tolist())
        ones = np.ones(g, bool)
        args = [(interner.arg(A.count), ARG_UINT, lost["aux"], ones),
                (interner.arg(A.stream), ARG_STRING, stream, ones)]
        self.out.emit(slice_table(begin, end, track, name, np.full(g, interner.category(N.CAT_LOST), np.uint32),
                                  args), slices=True)

    def _instant(self, ts: int, track: int, category: str, name: str, values: dict[str, object]) -> None:
        interner = self.out.interner
        args = []
        for key, value in values.items():
            if isinstance(value, str):
                args.append((interner.arg(key), ARG_STRING, np.array([interner.string(value)], np.uint64)))
            else:
                value = int(value)
                args.append((interner.arg(key), ARG_INT if value < 0 else ARG_UINT,
                             np.array([value & ((1 << 64) - 1)], np.uint64)))
        self.out.emit(instant_table([ts], [track], [interner.name(name)], [interner.category(category)],
                                    [(nm, t, v, np.ones(1, bool)) for nm, t, v in args]))

    def _emit_job(self, info: TraceInfo, t0: int, memq: int) -> None:
        """memq.process: who each process is in its job (convert/identity.py); memq.recording: each recording
        of a job and how its clock was aligned (convert/job.py)."""
        runs = run_durations(info.clock_readings)
        for pid, ident in sorted(job_processes(info).items()):
            values = {A.pid: pid, A.real_pid: ident.pid if ident.real_pid is None else ident.real_pid,
                      A.ppid: ident.ppid, A.node: ident.host, A.role: ident.role, A.job_id: ident.job_id,
                      A.launcher_env: "".join(f"{k}={v}\n" for k, v in ident.env.items())}
            for key, value in ((A.rank, ident.rank), (A.local_rank, ident.local_rank),
                               (A.world_size, ident.world_size), (A.owner_rank, ident.owner_rank),
                               (A.run_dur, runs.get(pid))):
                if value is not None:
                    values[key] = value
            self._instant(t0, memq, N.CAT_PROCESS, ident.name(), values)
        for rec in getattr(info, "recordings", []):
            self._instant(t0, memq, N.CAT_RECORDING, str(rec.get("node", "")), {
                A.path: str(rec.get("path", "")), A.node: str(rec.get("node", "")),
                A.shift_ns: int(rec.get("shift_ns", 0)), A.uncertainty_ns: int(rec.get("uncertainty_ns", 0)),
                A.readings: int(rec.get("readings", 0))})

    def emit_info(self, info: TraceInfo, t0: int, summary) -> None:
        """memq.meta, memq.device and memq.binary instants (`summary`: the ConvertSummary so far)."""
        memq = T.memq_uuid()
        windows = {A.windows: summary.windows, A.live_at_start: summary.live_at_start} if summary.windows else {}
        self._instant(t0, memq, N.CAT_META, N.EVENT_TRACE_INFO, {
            A.source: info.source or N.SOURCE_LTTNG, A.converter_version: __version__, A.hostname: info.hostname,
            A.lost_events: info.lost_events, A.lost_packets: info.lost_packets,
            A.unmatched_frees: summary.unmatched_frees, A.skipped_events: sum(info.skipped.values()),
            A.events: summary.total_events, **_loss_accounting(info), **_host_settings(info), **windows})
        for dev in info.devices:
            self._instant(t0, memq, N.CAT_DEVICE, N.gpu_track_name(dev.get("device", 0)), {
                A.pid: dev.get("pid", 0), A.device: dev.get("device", 0), A.runtime: str(dev.get("runtime", "")),
                A.name: str(dev.get("name", "")), A.integrated: int(bool(dev.get("integrated"))),
                A.unified_memory: int(bool(dev.get("unified_memory"))),
                **{key: str(dev[field]) for key, field in ((A.gpu_uuid, "uuid"), (A.pci_bus_id, "pci_bus_id"))
                   if dev.get(field)}})
        self._emit_job(info, t0, memq)
        for binary in info.binaries:
            values = {key: binary.get(key, 0) for key in (A.pid, A.baddr, A.memsz)}
            values[A.path] = str(binary.get("path", ""))
            build_id = binary.get("build_id")
            if build_id:
                values[A.build_id] = build_id.hex() if isinstance(build_id, (bytes, bytearray)) else str(build_id)
            values[N.fmt_key(A.memsz)] = N.format_bytes(values[A.memsz])
            self.tracks.libraries = True
            self._instant(int(binary.get("ts", t0)), T.libraries_uuid(), N.CAT_BINARY, values[A.path], values)


def info_packet(source: str, ts: int, values: dict[str, int]) -> bytes:
    """The `memq trace info` instant (memq.meta) of a trace memq built from another source than LTTng, at
    `ts` (REALTIME ns), with the memq track's descriptor."""
    event = P.track_event(P.TYPE_INSTANT, T.memq_uuid(), name=N.EVENT_TRACE_INFO, category=N.CAT_META,
                          args={A.source: source, A.converter_version: __version__, **values})
    return T.record(N.SEQ_DESCRIPTORS, T.memq_track()) + \
        P.record(P.packet(N.SEQ_DESCRIPTORS, ts=ts, clock=N.CLOCK_REALTIME, event=event))


def placed_losses(info: TraceInfo) -> tuple[dict[str, np.ndarray] | None, list[str]]:
    """The losses the files show at a known time (ctf2perfetto.ctf.preflight) as LOST-like columns, their
    `stream` indexing TraceInfo.stream_files followed by the returned file names; (None, []) if none."""
    placed = [loss for loss in info.losses if loss.get("begin") is not None]
    if not placed:
        return None, []
    files = sorted({loss["file"] for loss in placed})
    return {
        "ts": np.array([loss["begin"] for loss in placed], np.int64),
        "size": np.array([max(0, loss["end"] - loss["begin"]) for loss in placed], np.uint64),
        "aux": np.array([loss["packets"] for loss in placed], np.uint64),
        "aux2": np.array([N.LOSS_DROPPED if "salvage" in loss["what"] else N.LOSS_MISSING for loss in placed],
                         np.uint64),
        "stream": np.array([len(info.stream_files) + files.index(loss["file"]) for loss in placed], np.uint64),
    }, files


def _loss_accounting(info: TraceInfo) -> dict[str, object]:
    """What was read and what the files lack (docs/TRACE_FORMAT.md, "Loss"), for `memq trace info`."""
    values: dict[str, object] = {A.events_read: info.events_read}
    if info.recorded_events is not None:
        values[A.recorded_events] = info.recorded_events
    values.update({A.missing_events: info.missing_events, A.missing_packets: info.missing_packets,
                   A.missing_streams: info.missing_streams, A.dropped_packets: info.dropped_packets,
                   A.dropped_bytes: info.dropped_bytes, N.fmt_key(A.dropped_bytes): N.format_bytes(info.dropped_bytes)})
    return values


def _host_settings(info: TraceInfo) -> dict[str, object]:
    """How the recording took the host heap (memq-record.json), for `memq trace info`."""
    host = ((info.record or {}).get("enabled") or {}).get("host")
    if not isinstance(host, dict) or host.get("source") not in ("memq", "lttng"):
        return {}
    values: dict[str, object] = {A.host_source: host["source"]}
    if isinstance(host.get("min_size"), int):
        values[A.host_min_size] = host["min_size"]
        values[N.fmt_key(A.host_min_size)] = N.format_bytes(host["min_size"])
    return values
