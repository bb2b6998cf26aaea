"""Track uuids and descriptors: where each kind of event goes (docs/TRACE_FORMAT.md, "Tracks").

uuids are deterministic (a hash of what the track is), so every writer of a memq trace (the
converter, the Kineto merge, `memq annotate`) reaches the same track from the same facts, with
no table passed between them. Each function returns a TrackDescriptor payload; `record` puts
one on a sequence.
"""
from __future__ import annotations

import hashlib
from functools import lru_cache

from ctf2perfetto.traceformat import names as N
from ctf2perfetto.traceformat import packets as P


@lru_cache(maxsize=None)
def uuid(*parts: object) -> int:
    """A stable, non-zero 63-bit track uuid for the track `parts` describe."""
    digest = hashlib.blake2b("/".join(map(str, ("memq",) + parts)).encode(), digest_size=8).digest()
    return (int.from_bytes(digest, "little") & ((1 << 63) - 1)) or 1


def record(seq: int, descriptor: bytes, ts: int | None = None, clock: int | None = None) -> bytes:
    """A `Trace.packet` record carrying one descriptor on sequence `seq` (process and thread descriptors
    carry the time the process or thread was first seen)."""
    return P.record(P.packet(seq, ts=ts, clock=clock, descriptor=descriptor))


# -- processes and threads -----------------------------------------------------------------------------
def process_uuid(pid: int) -> int:
    return uuid("process", pid)


def thread_uuid(pid: int, tid: int) -> int:
    """The thread track: memq.api slices (and Kineto's CPU events) of that thread."""
    return uuid("thread", pid, tid)


def heap_uuid(pid: int, tid: int) -> int:
    """The thread's `heap` track: its memq.heap instants, beside the API slices rather than under them."""
    return uuid("heap", pid, tid)


def process_track(pid: int, name: str | None) -> bytes:
    return P.descriptor(process_uuid(pid), pid=pid, process_name=name)


def thread_track(pid: int, tid: int, name: str | None) -> bytes:
    return P.descriptor(thread_uuid(pid, tid), pid=pid, tid=tid, thread_name=name)


def heap_track(pid: int, tid: int) -> bytes:
    # A child of a thread track is a thread track of the same thread in trace_processor, shown beside it.
    return P.descriptor(heap_uuid(pid, tid), N.TRACK_HEAP, parent=thread_uuid(pid, tid))


def windows_uuid(pid: int) -> int:
    return uuid("windows", pid)


def windows_track(pid: int) -> bytes:
    """`Capture windows` under a process: one memq.window slice per window of that process."""
    return P.descriptor(windows_uuid(pid), N.TRACK_WINDOWS, parent=process_uuid(pid))


# -- GPUs ----------------------------------------------------------------------------------------------------
def gpu_uuid(device: int) -> int:
    return uuid("gpu", device)


def gpu_track(device: int, bus_ids: list[str] = (), nodes: list[str] = ()) -> bytes:
    """`GPU <device> (<PCI bus id>[, node <node>])`: parent of the device's stream tracks and live-bytes counter."""
    return P.descriptor(gpu_uuid(device), N.gpu_track_title(device, list(bus_ids), list(nodes)), merge=P.MERGE_NONE)


def stream_uuid(device: int, runtime: str, stream: int, lane: int) -> int:
    return uuid("stream", device, runtime, stream, lane)


def stream_track(device: int, runtime: str, stream: int, lane: int) -> bytes:
    """A stream's copies and memsets; lane > 0: copies of that stream overlapping in host time."""
    return P.descriptor(stream_uuid(device, runtime, stream, lane), N.stream_track_name(runtime, stream),
                        parent=gpu_uuid(device), merge=P.MERGE_NONE)


# -- counters ------------------------------------------------------------------------------------------------
def counter_uuid(key: int) -> int:
    return uuid("counter", key)


def counter_track(key: int, name: str, parent: int) -> bytes:
    """A live-bytes counter (absolute values in bytes) under a process or `GPU <device>` track."""
    return P.descriptor(counter_uuid(key), name, parent=parent, counter_unit=P.UNIT_SIZE_BYTES)


# -- the memq track ------------------------------------------------------------------------------------------
def memq_uuid(lane: int = 0) -> int:
    return uuid("memq-track", lane)


def memq_track(lane: int = 0) -> bytes:
    """`memq`: trace info, devices, losses (lane > 0: losses overlapping others, under lane 0)."""
    return P.descriptor(memq_uuid(lane), N.TRACK_MEMQ, parent=memq_uuid() if lane else None, merge=P.MERGE_NONE)


def libraries_uuid() -> int:
    return uuid("libraries")


def libraries_track() -> bytes:
    """`Libraries` under `memq`: the loaded binaries, collapsed with their parent."""
    return P.descriptor(libraries_uuid(), N.TRACK_LIBRARIES, parent=memq_uuid())


# -- Kineto ------------------------------------------------------------------------------------------------------
def kineto_stream_track(device: int, stream: object, label: str, lane: int = 0) -> tuple[int, bytes]:
    """Kineto's GPU work of a stream; lane > 0: work overlapping other work of that stream (a sibling of
    the same name: device work is never clamped or dropped)."""
    track = uuid("kineto-stream", device, stream, *((lane,) if lane else ()))
    return track, P.descriptor(track, N.kineto_stream_track_name(label), parent=gpu_uuid(device),
                               merge=P.MERGE_NONE)


def kineto_runtime_track(pid: int, tid: int) -> tuple[int, bytes]:
    """Kineto's runtime calls of a thread: a thread track beside the memq.api slices they would cross."""
    track = uuid("kineto-runtime", pid, tid)
    return track, P.descriptor(track, N.KINETO_RUNTIME_TRACK, parent=thread_uuid(pid, tid))


def kineto_global_track(pid: object, tid: object) -> tuple[int, bytes]:
    """The profiler's own rows with non-numeric pids ("Spans", "Traces")."""
    track = uuid("kineto-global", str(pid), str(tid))
    return track, P.descriptor(track, N.kineto_global_track_name(pid, tid))


# -- memq annotate ---------------------------------------------------------------------------------------------
def analysis_uuid(name: str, lane: int = 0) -> int:
    return uuid("analysis", name, lane)


def analysis_group() -> bytes:
    return P.descriptor(analysis_uuid(N.ANALYSIS_GROUP), N.ANALYSIS_GROUP, child_ordering=P.ORDER_EXPLICIT,
                        description=f"Results of the memq analyses, added by memq annotate; {N.UPPER_BOUND_NOTE}.")


def analysis_track(name: str, description: str, rank: int, lane: int = 0, counter: bool = False) -> bytes:
    """A track of the analysis group; lanes of one slice track share its name (the UI shows them as one)."""
    return P.descriptor(analysis_uuid(name, lane), name, parent=analysis_uuid(N.ANALYSIS_GROUP),
                        description=description, rank=rank, counter_unit=P.UNIT_SIZE_BYTES if counter else None)


class Lanes:
    """Greedy lanes: a slice goes on the first lane of its key free at its start (one open slice per track)."""

    def __init__(self) -> None:
        self.ends: dict[object, list[int]] = {}

    def assign(self, key: object, begin: int, end: int) -> int:
        ends = self.ends.setdefault(key, [])
        for lane, last in enumerate(ends):
            if last <= begin:
                ends[lane] = end
                return lane
        ends.append(end)
        return len(ends) - 1
