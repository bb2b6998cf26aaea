"""The tracks a conversion uses, and their descriptors (traceformat.tracks makes each one)."""
from __future__ import annotations

from typing import Mapping

import numpy as np

from ctf2perfetto.events import TraceInfo
from ctf2perfetto.convert.identity import job_processes
from ctf2perfetto.convert.model import CNT_DEVICE, CNT_HOST, CNT_MANAGED, CNT_PINNED, CNT_REGISTERED, split_counter_key
from ctf2perfetto.traceformat import names as N
from ctf2perfetto.traceformat import tracks as T
from ctf2perfetto.convert.write.stream import PacketStream

# model.py's counter kinds -> their track names (device counters are named per device).
COUNTER_NAMES = {CNT_HOST: N.COUNTER_HOST, CNT_PINNED: N.COUNTER_PINNED, CNT_REGISTERED: N.COUNTER_REGISTERED,
                 CNT_MANAGED: N.COUNTER_MANAGED}


class TrackRegistry:
    """Which threads, counters, GPUs, streams and memq lanes the events went on."""

    def __init__(self, out: PacketStream) -> None:
        self.out = out
        self.threads: set[tuple[int, int]] = set()
        self.heap_threads: set[tuple[int, int]] = set()  # threads with a `heap` track
        self.libraries = False  # whether the `Libraries` track has events
        self.window_pids: set[int] = set()  # processes with a `Capture windows` track
        self.counters: set[int] = set()
        self.gpus: set[int] = set()
        self.streams: dict[int, tuple[int, str, int, int]] = {}  # uuid -> (device, runtime, stream, lane)
        self.copy_lanes = T.Lanes()
        self.lost_lanes = T.Lanes()
        self.memq_lanes = 1

    def stream_uuids(self, device: np.ndarray, runtime: np.ndarray, stream: np.ndarray, begin: np.ndarray,
                     end: np.ndarray) -> np.ndarray:
        """Stream lane track uuid per copy/set: greedy lanes per (device, runtime, stream) in start order
        (a lane is free at a copy's begin, taken until its end). A stream whose copies overlap neither each
        other nor its lane 0 stays on lane 0 without a loop (the common case: one copy at a time)."""
        track = np.zeros(len(device), np.uint64)
        if len(device) == 0:
            return track
        codes = {r: i for i, r in enumerate(dict.fromkeys(runtime.tolist()))}
        key = np.stack([device.astype(np.int64), stream.view(np.int64),
                        np.array([codes[r] for r in runtime.tolist()], np.int64)], axis=1)
        groups, inverse = np.unique(key, axis=0, return_inverse=True)
        inverse = inverse.ravel()
        for g in range(len(groups)):
            idx = np.flatnonzero(inverse == g)
            idx = idx[np.lexsort((idx, begin[idx]))]
            where = (int(device[idx[0]]), str(runtime[idx[0]]), int(stream[idx[0]]))
            lanes = self.copy_lanes.ends.setdefault(where, [])
            b, e = begin[idx], end[idx]
            reach = np.maximum.accumulate(e)
            if (not lanes or lanes[0] <= b[0]) and (len(b) < 2 or (b[1:] >= reach[:-1]).all()):
                if lanes:
                    lanes[0] = int(reach[-1])
                else:
                    lanes.append(int(reach[-1]))
                lane_of = np.zeros(len(idx), np.int64)
            else:
                lane_of = np.array([self.copy_lanes.assign(where, int(x), int(y))
                                    for x, y in zip(b.tolist(), e.tolist())], np.int64)
            for lane in np.unique(lane_of).tolist():
                uuid = T.stream_uuid(*where, lane)
                self.streams[uuid] = (*where, lane)
                track[idx[lane_of == lane]] = uuid
            self.gpus.add(where[0])
        return track

    def lost_lane(self, begin: int, end: int) -> int:
        """uuid of the memq lane free at `begin`, taken until `end`."""
        lane = self.lost_lanes.assign("lost", begin, end)
        self.memq_lanes = max(self.memq_lanes, lane + 1)
        return T.memq_uuid(lane)

    def counter_uuids(self, keys: np.ndarray) -> np.ndarray:
        """Counter track uuid per key; a counter's descriptor goes out before its first value, because
        trace_processor's tokenizer needs it (the other descriptors can come at the end)."""
        if len(keys) == 0:
            return np.zeros(0, np.uint64)
        uniq, inverse = np.unique(keys, return_inverse=True)
        for key in uniq.tolist():
            if key not in self.counters:
                self.counters.add(key)
                kind, owner = split_counter_key(key)
                if kind == CNT_DEVICE:
                    self.gpus.add(owner)
                    descriptor = T.counter_track(key, N.device_counter_name(owner), T.gpu_uuid(owner))
                else:
                    descriptor = T.counter_track(key, COUNTER_NAMES[kind], T.process_uuid(owner))
                self.out.write(T.record(N.SEQ_DESCRIPTORS, descriptor))
        return np.array([T.counter_uuid(k) for k in uniq.tolist()], np.uint64)[inverse.ravel()]

    def descriptors(self, info: TraceInfo, t0: int, extra_processes: Mapping[int, str],
                    extra_threads: Mapping[tuple[int, int], str]) -> bytes:
        """Every other descriptor (written after the events: trace_processor reads them first anyway)."""
        pids = {split_counter_key(k)[1] for k in self.counters if split_counter_key(k)[0] != CNT_DEVICE}
        pids |= self.window_pids
        # In a job (ranks, or several nodes), a process is named by its place in it (`rank 2 (node a12, pid
        # 4411)`); its threads keep their own names. A single program's trace keeps its process names.
        idents = job_processes(info)
        nodes = {i.host for i in idents.values()}
        in_job = len(nodes) > 1 or any(i.role != N.ROLE_PROCESS for i in idents.values())
        titles = {pid: ident.name() for pid, ident in idents.items()} if in_job else {}
        out = process_thread_descriptors({**info.processes, **extra_processes}, {**info.threads, **extra_threads},
                                         t0, self.threads | set(extra_threads), pids | set(extra_processes) | set(titles),
                                         titles)
        out += [T.record(N.SEQ_DESCRIPTORS, T.heap_track(pid, tid)) for pid, tid in sorted(self.heap_threads)]
        # A GPU of a trace of several nodes says whose it is (device numbers are the job's, not the node's).
        hosts = {pid: ident.host for pid, ident in idents.items()} if len(nodes) > 1 else {}
        out += [T.record(N.SEQ_DESCRIPTORS, T.gpu_track(dev, [str(d.get("pci_bus_id") or "") for d in info.devices
                                                              if d.get("device") == dev],
                                                        [hosts.get(int(d.get("pid", 0)), "") for d in info.devices
                                                         if d.get("device") == dev]))
                for dev in sorted(self.gpus)]
        out += [T.record(N.SEQ_DESCRIPTORS, T.stream_track(*where))
                for _, where in sorted(self.streams.items(), key=lambda kv: kv[1])]
        out += [T.record(N.SEQ_DESCRIPTORS, T.windows_track(pid)) for pid in sorted(self.window_pids)]
        out += [T.record(N.SEQ_DESCRIPTORS, T.memq_track(lane)) for lane in range(self.memq_lanes)]
        if self.libraries:
            out.append(T.record(N.SEQ_DESCRIPTORS, T.libraries_track()))
        return b"".join(out)


def process_thread_descriptors(processes: Mapping[int, str], threads: Mapping[tuple[int, int], str], t0: int = 0,
                               used_threads: set | None = None, used_pids: set | None = None,
                               titles: Mapping[int, str] | None = None) -> list[bytes]:
    """Descriptor records of processes and threads (names where known, stamped `t0` on the converter's
    MONOTONIC clock): the threads `used_threads` (default: every one named) and the processes of those plus
    `used_pids` (default: every one named); `titles` name processes instead of `processes` (not their threads)."""
    thread_set = set(threads) if used_threads is None else set(used_threads)
    pids = sorted({p for p, _ in thread_set} | (set(processes) if used_pids is None else set(used_pids)))
    titles = titles or {}
    out = [T.record(N.SEQ_DESCRIPTORS, T.process_track(pid, titles.get(pid) or processes.get(pid) or None), t0,
                    N.CLOCK_MONOTONIC)
           for pid in pids]
    for pid, tid in sorted(thread_set):
        name = threads.get((pid, tid)) or (processes.get(pid) if pid == tid else None)
        out.append(T.record(N.SEQ_DESCRIPTORS, T.thread_track(pid, tid, name or None), t0, N.CLOCK_MONOTONIC))
    return out
