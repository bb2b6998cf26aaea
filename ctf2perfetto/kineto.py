"""PyTorch-profiler (Kineto) traces merged into the memq Perfetto trace.

`load(path)` reads a Kineto JSON (plain or .gz) into a `KinetoTrace`;
`KinetoMerge(trace, ...)` places its events on tracks and `.packets()` turns them
into serialized TracePackets that `write.write_trace(..., extra_packets=...)`
appends to the LTTng-derived trace (ctf2perfetto/cli/convert.py does this).

Timeline: Kineto times are CLOCK_REALTIME microseconds relative to
`baseTimeNanoseconds` (absolute Unix µs in traces older than that field), so each
event lands at `base + round(ts * 1000)` ns on the REALTIME clock, which is the
primary clock of the memq trace (docs/TRACE_FORMAT.md, "Clock recipe"). Numbers
are parsed as decimals, not floats: a float of 1.7e15 µs has a 0.25 µs grain.

Tracks: CPU events go on the process/thread tracks of the LTTng events of the same
pid/tid (`write.thread_track_uuid`); GPU work (the pids Kineto labels "GPU N" or
that carry kernels/memcpys/memsets) on one track per device and stream. Kineto's
category becomes the TrackEvent category and its args become debug annotations,
so trace_processor shows e.g. `category = 'gpu_memcpy'` with `debug.bytes`.
"""
from __future__ import annotations

import bisect
import functools
import gzip
import hashlib
import json
import struct
import zlib
from dataclasses import dataclass, field
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation
from pathlib import Path
from typing import Any

import numpy as np

from .errors import MemqError, UsageError
from .events import HEAP_KINDS, EventBatch, EventKind

# Categories Kineto puts on device (pid = device, tid = stream) lanes.
GPU_CATEGORIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation"})
# What the analyses count: checked on load, and never clamped or dropped (they go on overlap lanes).
MEMORY_WORK = frozenset({"gpu_memcpy", "gpu_memset"})
# Runtime/driver calls: the same calls memq records as memq.api slices, measured a few
# hundred ns apart, so on one track they would cross and trace_processor would
# mismatch their ends. They go on a `kineto runtime` child track of the thread.
RUNTIME_CATEGORIES = frozenset({"cuda_runtime", "cuda_driver"})
# Our packets' sequence (distinct from the LTTng sequences of write.py).
SEQUENCE_ID = 0x6B696E65
# The profiler's `[memory]` event of an allocation is taken right after the allocator returns
# (measured here: 0.1-0.4 µs after the libc call's LTTng event). A median gap beyond this
# is the profiler's clock (a TSC approximation of REALTIME) being off, and gets corrected.
ANCHOR_TOLERANCE_NS = 1_000
MIN_ANCHORS = 5
# Flow ids of Kineto flows start here, far above the small ids write.py uses.
FLOW_ID_BASE = 1 << 62
_REALTIME = 1  # BUILTIN_CLOCK_REALTIME
_SEQ_INCREMENTAL_STATE_CLEARED = 1


@dataclass
class KinetoTrace:
    """A parsed Kineto trace: events with absolute REALTIME nanoseconds."""

    path: Path
    base_ns: int  # baseTimeNanoseconds, 0 when the trace predates it
    events: list[dict]
    process_names: dict[Any, str] = field(default_factory=dict)
    process_labels: dict[Any, str] = field(default_factory=dict)
    thread_names: dict[tuple[Any, Any], str] = field(default_factory=dict)

    def abs_ns(self, ts: Any) -> int | None:
        """Absolute REALTIME ns of a Kineto `ts` (µs); None if it is not a number."""
        ns = _us_to_ns(ts)
        return None if ns is None else self.base_ns + ns


class LttngEvents:
    """What the Kineto merge needs from the LTTng events, collected from EventBatches as they stream by.

    * memq API calls (begin, end) per (pid, tid): Kineto ops that cross one on
      the same thread get widened to cover it (KinetoMerge.packets): one thread's
      ops and calls nest, so a crossing is clock error, and trace_processor would
      mismatch the ends.
    * allocations at the addresses of Kineto's `[memory]` events: the anchors
      that measure how far the profiler's clock is from the LTTng one.
    """

    def __init__(self, anchor_addresses: np.ndarray | None = None) -> None:
        self._calls: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
        self._allocs: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
        self._addresses = anchor_addresses if anchor_addresses is not None else np.zeros(0, np.uint64)

    def add(self, batch: EventBatch) -> EventBatch:
        """Record what `batch` holds of the above and hand it on (for use in a generator)."""
        kind = batch["kind"]
        rows = np.flatnonzero((kind >= EventKind.GPU_ALLOC) & (kind <= EventKind.GPU_SET_DEVICE))
        if len(rows):
            self._calls.append((batch["pid"][rows], batch["tid"][rows], batch["begin"][rows], batch["ts"][rows]))
        if len(self._addresses):
            allocating = np.isin(kind, [*HEAP_KINDS, EventKind.GPU_ALLOC])
            rows = np.flatnonzero(allocating & np.isin(batch["ptr"], self._addresses))
            if len(rows):
                # Kineto reports the bytes asked for: memq's host blocks carry them apart from the usable size
                size = np.where(kind[rows] == EventKind.HOST_ALLOC, batch["aux2"][rows], batch["size"][rows])
                self._allocs.append((batch["pid"][rows], batch["ptr"][rows], size, batch["ts"][rows]))
        return batch

    def calls_by_thread(self, realtime_offset_ns: int) -> dict[tuple[int, int], list[tuple[int, int]]]:
        """(pid, tid) -> [(begin, end)] on REALTIME, sorted by begin."""
        calls: dict[tuple[int, int], list[tuple[int, int]]] = {}
        for pids, tids, begins, ends in self._calls:
            for pid, tid, begin, end in zip(pids.tolist(), tids.tolist(), begins.tolist(), ends.tolist()):
                calls.setdefault((pid, tid), []).append((begin + realtime_offset_ns, end + realtime_offset_ns))
        for intervals in calls.values():
            intervals.sort()
        return calls

    def allocations(self, realtime_offset_ns: int) -> dict[tuple[int, int, int], list[int]]:
        """(pid, address, bytes) -> REALTIME ns of the calls that returned that allocation."""
        allocs: dict[tuple[int, int, int], list[int]] = {}
        for pids, ptrs, sizes, ts in self._allocs:
            for key in zip(pids.tolist(), ptrs.tolist(), sizes.tolist(), ts.tolist()):
                allocs.setdefault(key[:3], []).append(key[3] + realtime_offset_ns)
        return allocs


def load(path: str | Path) -> KinetoTrace:
    """Read a Kineto JSON / JSON.gz trace. Bad input raises one-line errors."""
    path = Path(path)
    if path.is_dir():
        raise UsageError(f"{path}: is a directory, expected a Kineto JSON file")
    if not path.exists():
        raise UsageError(f"{path}: Kineto trace not found")
    if not path.is_file():  # a fifo would block for ever, /dev/zero never end
        raise UsageError(f"{path}: not a regular file, expected a Kineto JSON file")
    try:
        raw = path.read_bytes()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        doc = json.loads(raw, parse_float=Decimal)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise MemqError(f"{path}: cannot read Kineto trace: {reason}") from None
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise MemqError(f"{path}: not a readable gzip file: {exc}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise MemqError(f"{path}: not a JSON Kineto trace: {exc}") from None
    if isinstance(doc, list):  # the Chrome trace format's bare event array
        doc = {"traceEvents": doc}
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise MemqError(f"{path}: no traceEvents list: not a PyTorch profiler (Kineto) trace")
    base = doc.get("baseTimeNanoseconds", 0)
    try:
        base_ns = int(base)
    except (TypeError, ValueError, InvalidOperation):
        raise MemqError(f"{path}: baseTimeNanoseconds is not a number: {base!r}") from None
    trace = KinetoTrace(path, base_ns, [])
    for number, event in enumerate(doc["traceEvents"]):
        if not isinstance(event, dict):
            continue
        if event.get("ph") == "M":
            _read_metadata(trace, event)
        else:
            if event.get("cat") in MEMORY_WORK:
                _check_memory_work(trace, number, event)
            trace.events.append(event)
    return trace


def _check_memory_work(trace: KinetoTrace, number: int, event: dict) -> None:
    """A copy or memset the analyses count: a bad time, duration or byte count is refused in one line
    (it would give negative or wrong figures), never dropped."""
    if event.get("ph") != "X":
        return
    where = f"{trace.path}: traceEvents[{number}] ({event.get('cat')} {str(event.get('name', ''))[:60]!r})"
    if trace.abs_ns(event.get("ts")) is None:
        raise MemqError(f"{where}: ts {event.get('ts')!r} is not a number")
    dur = _us_to_ns(event.get("dur", 0))
    if dur is None or dur < 0:
        raise MemqError(f"{where}: dur {event.get('dur')!r} is not a duration (a number >= 0)")
    args = event.get("args")
    if args is not None and not isinstance(args, dict):
        raise MemqError(f"{where}: args is not an object")
    nbytes = (args or {}).get("bytes")
    if nbytes is not None and (isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 0):
        raise MemqError(f"{where}: bytes {nbytes!r} is not a byte count (an integer >= 0)")


def _read_metadata(trace: KinetoTrace, event: dict) -> None:
    args = event.get("args") or {}
    pid, tid, name = event.get("pid"), event.get("tid"), event.get("name")
    if name == "process_name" and "name" in args:
        trace.process_names[pid] = str(args["name"])
    elif name == "process_labels" and "labels" in args:
        trace.process_labels[pid] = str(args["labels"])
    elif name == "thread_name" and "name" in args:
        trace.thread_names[(pid, tid)] = str(args["name"]).strip()


# ---------------------------------------------------------------------------
# Lanes: where each Kineto (pid, tid) goes in the Perfetto trace.


@dataclass(frozen=True)
class _Lane:
    uuid: int
    kind: str  # "thread", "process", "runtime", "gpu" or "global"
    thread: tuple[int, int] | None = None  # (pid, tid) of a thread lane


def _uuid(*parts: object) -> int:
    """Stable 63-bit track uuid for tracks only Kineto has."""
    digest = hashlib.blake2b(repr(("memq.kineto",) + parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


def _as_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.lstrip("-").isdigit():
        return int(value)
    return None


def _gpu_pids(trace: KinetoTrace) -> set[Any]:
    pids = {pid for pid, label in trace.process_labels.items() if str(label).startswith("GPU")}
    pids.update(e.get("pid") for e in trace.events if e.get("cat") in GPU_CATEGORIES)
    return pids


# ---------------------------------------------------------------------------
# Packet building.


def _encode_varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # negative int64 -> two's complement, as protobuf does
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_SMALL_VARINTS = [_encode_varint(v) for v in range(1 << 14)]  # lengths, tags, small args


def _varint(value: int) -> bytes:
    return _SMALL_VARINTS[value] if 0 <= value < 1 << 14 else _encode_varint(value)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (string, bytes, message)."""
    return _SMALL_VARINTS[number << 3 | 2] + _varint(len(payload)) + payload


# Field numbers (perfetto_trace.proto): TracePacket, TrackEvent, DebugAnnotation.
_PACKET_HEAD = (_varint(10 << 3) + _varint(SEQUENCE_ID)  # trusted_packet_sequence_id
                + _varint(58 << 3) + _varint(_REALTIME))  # timestamp_clock_id
_TS, _TRACK_EVENT = _varint(8 << 3), 11
_TYPE, _TRACK_UUID, _NAME, _CATEGORY, _ANNOTATION = _varint(9 << 3), _varint(11 << 3), 23, 22, 4
_FLOW, _TERMINATING_FLOW = _varint(47 << 3 | 1), _varint(48 << 3 | 1)
_ANN_NAME, _ANN_BOOL, _ANN_UINT, _ANN_INT, _ANN_DOUBLE, _ANN_STRING = 10, 2, 3, 4, 5, 6


def _annotation(key: str, value: Any) -> bytes:
    """A DebugAnnotation: Kineto's scalars typed, lists/dicts as compact JSON strings."""
    if isinstance(value, bool):
        body = _varint(_ANN_BOOL << 3) + _varint(int(value))
    elif isinstance(value, int) and -(1 << 63) <= value < (1 << 64):
        number = _ANN_UINT if value >= 1 << 63 else _ANN_INT
        body = _varint(number << 3) + _varint(value)
    elif isinstance(value, (Decimal, float)):
        body = _varint(_ANN_DOUBLE << 3 | 1) + struct.pack("<d", float(value))
    elif isinstance(value, str):
        body = _field(_ANN_STRING, value.encode())
    else:  # lists (Input Dims, ...), dicts and out-of-range ints stay readable as JSON
        body = _field(_ANN_STRING, json.dumps(value, default=str, separators=(",", ":")).encode())
    return _field(_ANNOTATION, _annotation_name(key) + body)


@functools.lru_cache(maxsize=4096)
def _annotation_name(key: str) -> bytes:
    return _field(_ANN_NAME, str(key).encode())


class _Builder:
    """TrackEvent packets encoded directly (a protobuf object per event is several times slower)."""

    def __init__(self) -> None:
        self.items: list[tuple[int, int, bytes]] = []  # (ts, order, serialized TracePacket)
        self._strings: dict[tuple[int, str], bytes] = {}
        self._uuids: dict[int, bytes] = {}

    def _uuid(self, uuid: int) -> bytes:
        if uuid not in self._uuids:
            self._uuids[uuid] = _varint(uuid)
        return self._uuids[uuid]

    def _string(self, number: int, text: str) -> bytes:
        key = (number, text)
        if key not in self._strings:
            self._strings[key] = _field(number, text.encode())
        return self._strings[key]

    def event(self, ts: int, lane: _Lane, type_: int, name: str | None = None, cat: str | None = None,
              args: dict | None = None, flow_ids: list[int] = (), terminating_flow_ids: list[int] = ()) -> None:
        body = [_TYPE, _varint(type_), _TRACK_UUID, self._uuid(lane.uuid)]
        if name is not None:
            body.append(self._string(_NAME, name))
        if cat:
            body.append(self._string(_CATEGORY, cat))
        if args is not None and not isinstance(args, dict):
            args = {"args": args}  # not Kineto's shape, but keep what is there
        for key, value in (args or {}).items():
            if value is not None:
                body.append(_annotation(key, value))
        for flow in flow_ids:
            body += (_FLOW, struct.pack("<Q", flow))
        for flow in terminating_flow_ids:
            body += (_TERMINATING_FLOW, struct.pack("<Q", flow))
        packet = _TS + _varint(ts) + _PACKET_HEAD + _field(_TRACK_EVENT, b"".join(body))
        self.items.append((ts, len(self.items), packet))


@dataclass
class _Slice:
    start: int
    end: int
    event: dict
    depth: int = 0  # on its lane, once nested
    flow_ids: list[int] = field(default_factory=list)
    terminating_flow_ids: list[int] = field(default_factory=list)


def _us_to_ns(value: Any) -> int | None:
    """Kineto µs (number or numeric string) -> integer ns; None if not a number."""
    if isinstance(value, bool) or value is None:
        return None
    try:
        us = value if isinstance(value, Decimal) else Decimal(str(value))
        return int((us * 1000).to_integral_value(ROUND_HALF_EVEN))
    except (InvalidOperation, ValueError, OverflowError):
        return None


class KinetoMerge:
    """Kineto events placed on tracks; `packets()` serializes them.

    The uuid functions are write.py's, so CPU events share the LTTng tracks.
    `device_track_uuid(device)` (optional) parents the stream tracks under the
    trace's `GPU <device>` track; without it Kineto gets its own device tracks.
    `threads` / `processes` are known at once (write_trace's extra_threads /
    extra_processes); the packets can be made after the LTTng events streamed by.
    """

    def __init__(self, trace: KinetoTrace, *, thread_track_uuid: Any, process_track_uuid: Any,
                 device_track_uuid: Any = None) -> None:
        from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

        self.pb = pb
        self.trace = trace
        self._thread_track_uuid = thread_track_uuid
        self._process_track_uuid = process_track_uuid
        self._device_track_uuid = device_track_uuid
        self._gpu_pids = _gpu_pids(trace)
        self.skipped: dict[str, int] = {}  # reason -> count of events not written (or changed)
        self.threads: dict[tuple[int, int], str] = {}  # CPU tracks used: write_trace's extra_threads
        self.processes: dict[int, str] = {}  # write_trace's extra_processes
        self.events = 0  # Kineto events written (slices, instants), after packets()
        self.unplaced = 0  # events left out (no phase memq knows, no valid ts or dur)
        self.flows = 0  # flows written, after packets()
        self.clock_note: str | None = None  # the clock correction packets() made, if any
        self._descriptors: list[Any] = []
        self._lanes: dict[tuple[Any, Any, bool], _Lane] = {}
        self._device_tracks: dict[int, int] = {}
        self._slices: dict[_Lane, list[_Slice]] = {}
        self._instants: list[tuple[int, _Lane, dict]] = []
        self._flow_points: list[tuple[str, Any, int, tuple[Any, Any], dict]] = []
        self._place_events()

    def _skip(self, reason: str, n: int = 1) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + n

    def _lane(self, pid: Any, tid: Any, runtime: bool = False) -> _Lane:
        if (pid, tid, runtime) in self._lanes:
            return self._lanes[(pid, tid, runtime)]
        pb, key = self.pb, (pid, tid)
        ipid, itid = _as_int(pid), _as_int(tid)
        if ipid is not None and ipid in self._gpu_pids:
            if ipid not in self._device_tracks:
                if self._device_track_uuid is not None:
                    self._device_tracks[ipid] = self._device_track_uuid(ipid)
                else:
                    self._device_tracks[ipid] = _uuid("gpu", ipid)
                    self._descriptors.append(pb.TrackDescriptor(uuid=self._device_tracks[ipid], name=f"GPU {ipid}"))
            uuid = _uuid("stream", ipid, tid)
            label = self.trace.thread_names.get(key) or f"stream {tid}"
            desc = pb.TrackDescriptor(uuid=uuid, parent_uuid=self._device_tracks[ipid], name=f"kineto {label}")
            desc.sibling_merge_behavior = pb.TrackDescriptor.SIBLING_MERGE_BEHAVIOR_NONE
            self._descriptors.append(desc)
            lane = _Lane(uuid, "gpu")
        elif ipid is not None and itid is not None:
            self.processes[ipid] = self.trace.process_names.get(pid, f"pid {ipid}")
            if itid == 0:  # Kineto's process-scoped rows
                lane = _Lane(self._process_track_uuid(ipid), "process")
            else:
                self.threads[(ipid, itid)] = self.trace.thread_names.get(key, "")
                lane = _Lane(self._thread_track_uuid(ipid, itid), "thread", (ipid, itid))
            if runtime:
                uuid = _uuid("runtime", ipid, itid)
                self._descriptors.append(pb.TrackDescriptor(uuid=uuid, parent_uuid=lane.uuid, name="kineto runtime"))
                lane = _Lane(uuid, "runtime")
        else:  # "Spans" / "Traces" rows of the profiler itself
            uuid = _uuid("global", str(pid), str(tid))
            self._descriptors.append(pb.TrackDescriptor(uuid=uuid, name=f"Kineto {pid} {tid}".strip()))
            lane = _Lane(uuid, "global")
        self._lanes[(pid, tid, runtime)] = lane
        return lane

    def _place_events(self) -> None:
        """Slices per lane, instants, flow endpoints; threads and processes."""
        trace = self.trace
        for event in trace.events:
            ph = event.get("ph")
            ts = trace.abs_ns(event.get("ts"))
            if ph not in ("X", "i", "I", "s", "t", "f"):
                self._skip(f"with phase {ph!r}" if ph else "without phase")
                self.unplaced += 1
                continue
            if ts is None:
                self._skip("without a valid ts")
                self.unplaced += 1
                continue
            lane = self._lane(event.get("pid"), event.get("tid"), event.get("cat") in RUNTIME_CATEGORIES)
            if ph == "X":
                dur = _us_to_ns(event.get("dur", 0))
                if dur is None or dur < 0:
                    self._skip("with a bad dur")
                    self.unplaced += 1
                    continue
                self._slices.setdefault(lane, []).append(_Slice(ts, ts + dur, event))
            elif ph in ("i", "I"):
                self._instants.append((ts, lane, event))
            else:
                owner = (event.get("pid"), event.get("tid"))
                self._flow_points.append((ph, (event.get("cat"), event.get("id")), ts, owner, event))

    def _split_overlaps(self, lane: _Lane, lane_slices: list[_Slice]) -> int:
        """Keeps on `lane` the slices that nest (sorted by start, longest first); each one that would
        cross another goes to the first overlap lane where it nests (a sibling track of the same name).
        Returns how many moved."""
        lanes: list[tuple[_Lane, list[_Slice], list[_Slice]]] = [(lane, [], [])]
        moved = 0
        for s in lane_slices:
            for i, (_, kept, stack) in enumerate(lanes):
                while stack and stack[-1].end <= s.start:
                    stack.pop()
                if not stack or s.end <= stack[-1].end:
                    s.depth = len(stack)
                    kept.append(s)
                    stack.append(s)
                    moved += i > 0
                    break
            else:
                extra = _Lane(_uuid("overlap", lane.uuid, len(lanes)), lane.kind)
                parent = next(d for d in self._descriptors if d.uuid == lane.uuid)
                desc = self.pb.TrackDescriptor(uuid=extra.uuid, parent_uuid=parent.parent_uuid, name=parent.name)
                desc.sibling_merge_behavior = self.pb.TrackDescriptor.SIBLING_MERGE_BEHAVIOR_NONE
                self._descriptors.append(desc)
                lanes.append((extra, [s], [s]))
                moved += 1
        for extra, kept, _ in lanes:
            self._slices[extra] = kept
        return moved

    def anchor_addresses(self) -> np.ndarray:
        """Addresses of the allocations Kineto's `[memory]` events report (for LttngEvents)."""
        return np.array(sorted({a for _, a, _, _ in self._memory_allocations()}), np.uint64)

    def _memory_allocations(self) -> list[tuple[int, int, int, int]]:
        """(pid, address, bytes, ts) of each `[memory]` allocation event."""
        found = []
        for ts, _lane, event in self._instants:
            args = event.get("args")
            if event.get("name") != "[memory]" or not isinstance(args, dict):
                continue
            pid, addr, size = _as_int(event.get("pid")), _as_int(args.get("Addr")), _as_int(args.get("Bytes"))
            if pid is not None and addr and size and size > 0 and addr < 1 << 64:
                found.append((pid, addr, size, ts))
        return found

    def clock_gap(self, allocations: dict[tuple[int, int, int], list[int]]) -> tuple[int, int]:
        """(median ns from each LTTng allocation to its `[memory]` event, anchors matched)."""
        gaps = []
        for pid, addr, size, ts in self._memory_allocations():
            times = allocations.get((pid, addr, size))
            if times:
                gaps.append(min((ts - t for t in times), key=abs))
        if not gaps:
            return 0, 0
        gaps.sort()
        return gaps[len(gaps) // 2], len(gaps)

    def _shift(self, ns: int) -> None:
        for lane_slices in self._slices.values():
            for s in lane_slices:
                s.start += ns
                s.end += ns
        self._instants = [(ts + ns, lane, event) for ts, lane, event in self._instants]
        self._flow_points = [(ph, key, ts + ns, owner, event) for ph, key, ts, owner, event in self._flow_points]

    def packets(self, lttng: LttngEvents | None = None, realtime_offset_ns: int = 0) -> list[bytes]:
        """Serialized TracePackets, placed against the LTTng events when given.

        `realtime_offset_ns` is what the trace's clock snapshot adds to LTTng's
        monotonic times. With `lttng`: the Kineto clock is corrected when its
        `[memory]` events sit more than ANCHOR_TOLERANCE_NS from the allocations
        they report, and ops that cross a memq API call are widened.
        """
        pb = self.pb
        self.clock_note = None
        if lttng is not None:
            gap, anchors = self.clock_gap(lttng.allocations(realtime_offset_ns))
            if anchors >= MIN_ANCHORS and abs(gap) > ANCHOR_TOLERANCE_NS:
                self._shift(-gap)
                self.clock_note = (f"the PyTorch profiler's clock was {gap / 1000:+.1f} us off the LTTng clock "
                                   f"(median gap of {anchors} [memory] events to the allocations they report): "
                                   "Kineto events moved to match")
        api_calls = lttng.calls_by_thread(realtime_offset_ns) if lttng is not None else {}
        widened, most = 0, 0
        for lane, lane_slices in list(self._slices.items()):
            if api_calls and lane.thread in api_calls:
                n, shift = _widen(lane_slices, api_calls[lane.thread])
                widened, most = widened + n, max(most, shift)
        if widened:
            self._skip(f"ops widened to cover a memq API call they crossed (by at most {most / 1000:.1f} us)",
                       widened)
        clamped = overlapping = 0
        for lane in list(self._slices):
            lane_slices = self._slices[lane]
            lane_slices.sort(key=lambda s: (s.start, -s.end))
            if lane.kind == "gpu":  # device work is not clamped: what overlaps goes on a lane of its own
                overlapping += self._split_overlaps(lane, lane_slices)
            else:
                clamped += _nest(lane_slices)
        if clamped:
            self._skip("slice ends clamped to their parent", clamped)
        if overlapping:
            self._skip("GPU slices overlapping another on their stream, put on an overlap lane", overlapping)

        # A flow point binds in the runtime child track first (ac2g starts at runtime calls), then the thread's.
        lanes = self._lanes
        flow_points = [(ph, key, ts, [lanes[(*owner, rt)] for rt in (True, False) if (*owner, rt) in lanes], event)
                       for ph, key, ts, owner, event in self._flow_points]
        self.flows = _bind_flows(flow_points, self._slices, self._skip)

        builder = _Builder()
        begin, end, instant = pb.TrackEvent.TYPE_SLICE_BEGIN, pb.TrackEvent.TYPE_SLICE_END, pb.TrackEvent.TYPE_INSTANT
        for lane, lane_slices in self._slices.items():
            stack: list[_Slice] = []
            for s in lane_slices:
                while stack and stack[-1].end <= s.start:
                    builder.event(stack.pop().end, lane, end)
                builder.event(s.start, lane, begin, str(s.event.get("name", "")), s.event.get("cat"),
                              s.event.get("args"), s.flow_ids, s.terminating_flow_ids)
                stack.append(s)
            while stack:
                builder.event(stack.pop().end, lane, end)
        for ts, lane, event in self._instants:
            builder.event(ts, lane, instant, str(event.get("name", "")), event.get("cat"), event.get("args"))
        self.events = sum(map(len, self._slices.values())) + len(self._instants)
        starts = [s.start for lane_slices in self._slices.values() for s in lane_slices[:1]]
        self.first_ns = min(starts + [ts for ts, _, _ in self._instants], default=0)

        first = pb.TracePacket(trusted_packet_sequence_id=SEQUENCE_ID, sequence_flags=_SEQ_INCREMENTAL_STATE_CLEARED)
        packets = [first.SerializeToString()]
        packets += [pb.TracePacket(track_descriptor=d, trusted_packet_sequence_id=SEQUENCE_ID).SerializeToString()
                    for d in self._descriptors]
        builder.items.sort(key=lambda item: (item[0], item[1]))
        packets += [packet for _, _, packet in builder.items]
        return packets

    def warnings(self, lttng_threads: set[tuple[int, int]]) -> list[str]:
        """One line per thing the user should know, given the LTTng trace's (pid, tid) pairs."""
        lines = []
        lttng_pids = {pid for pid, _ in lttng_threads}
        unmatched_pids = sorted(self.processes.keys() - lttng_pids)
        unmatched_threads = sorted(t for t in self.threads.keys() - lttng_threads if t[0] in lttng_pids)
        if unmatched_pids:
            pids = ", ".join(map(str, unmatched_pids[:8])) + (" ..." if len(unmatched_pids) > 8 else "")
            lines.append(
                f"Kineto pid(s) {pids} match no process of the LTTng trace: their events are kept on their own "
                "tracks (was the profile recorded in another run?)"
            )
        if unmatched_threads:
            tids = ", ".join(f"{p}/{t}" for p, t in unmatched_threads[:8])
            lines.append(f"Kineto thread(s) {tids} (pid/tid) have no LTTng events: kept on their own thread tracks")
        if self.skipped:
            detail = ", ".join(f"{n} {reason}" for reason, n in sorted(self.skipped.items()))
            lines.append(f"Kineto events not merged as they were: {detail}")
        if self.clock_note:
            lines.append(self.clock_note)
        return lines


def _widen(lane_slices: list[_Slice], calls: list[tuple[int, int]]) -> tuple[int, int]:
    """Widen slices that cross an API call (begin or end inside it) to enclose it strictly.

    Strictly (1 ns beyond each end): trace_processor orders begins of equal ts
    from different sequences arbitrarily. Returns (slices widened, largest
    widening in ns). Widening can make an enclosing slice cross the same call,
    so this repeats until nothing crosses.
    """
    begins = [b for b, _ in calls]
    widened: set[int] = set()
    most = 0
    changed = True
    while changed:
        changed = False
        for s in lane_slices:
            # calls of one thread do not overlap: walk back over those overlapping the slice
            k = bisect.bisect_left(begins, s.end) - 1
            while k >= 0 and calls[k][1] > s.start:
                begin, end = calls[k]
                nested = (s.start < begin and end < s.end) or (begin < s.start and s.end < end)
                if not nested:
                    shift = max(s.start - (begin - 1), (end + 1) - s.end)
                    most, changed = max(most, shift), True
                    s.start, s.end = min(s.start, begin - 1), max(s.end, end + 1)
                    widened.add(id(s))
                k -= 1
    return len(widened), most


def _nest(lane_slices: list[_Slice]) -> int:
    """Clamp ends so slices sorted by (start, -end) nest; returns how many were clamped.

    Kineto rounds to µs in older traces, so a child can overrun its parent by a
    nanosecond or a microsecond; Perfetto's slice stacks need strict nesting.
    """
    stack: list[_Slice] = []
    clamped = 0
    for s in lane_slices:
        while stack and stack[-1].end <= s.start:
            stack.pop()
        if stack and s.end > stack[-1].end:
            s.end = stack[-1].end
            clamped += 1
        s.depth = len(stack)
        stack.append(s)
    return clamped


def _bind_flows(flow_points: list, slices: dict[_Lane, list[_Slice]], skip: Any) -> int:
    """Attach Kineto flow events (s/t/f) to the slices they bind to.

    A flow point binds to the innermost slice enclosing its ts on the first of its
    candidate lanes that has one; an `f` without `"bp": "e"` binds to the next
    slice starting at or after ts (Chrome JSON semantics). Flows with fewer than
    two bound points are dropped.
    """
    starts = {lane: [s.start for s in lane_slices] for lane, lane_slices in slices.items()}
    groups: dict[Any, list[tuple[int, int, _Slice]]] = {}
    for order, (ph, key, ts, candidates, event) in enumerate(flow_points):
        bound = None
        for lane in candidates:
            lane_slices = slices.get(lane, [])
            if ph == "f" and event.get("bp") != "e":
                i = bisect.bisect_left(starts.get(lane, []), ts)
                bound = lane_slices[i] if i < len(lane_slices) else None
            else:
                # Walk back to the innermost enclosing slice; slices nest, so past a
                # top-level slice that ends before ts nothing earlier can enclose it.
                i = bisect.bisect_right(starts.get(lane, []), ts) - 1
                while i >= 0 and bound is None:
                    if lane_slices[i].end >= ts:
                        bound = lane_slices[i]
                    elif lane_slices[i].depth == 0:
                        break
                    i -= 1
            if bound is not None:
                break
        if bound is None:
            skip("flow points with no slice to bind to")
            continue
        groups.setdefault(key, []).append((ts, order, bound))
    flows = 0
    for points in groups.values():
        points.sort(key=lambda p: (p[0], p[1]))
        chain: list[_Slice] = []
        for _, _, s in points:
            if not any(s is c for c in chain):
                chain.append(s)
        if len(chain) < 2:
            skip("flows with a single bound end")
            continue
        flow_id = FLOW_ID_BASE + flows
        for s in chain[:-1]:
            s.flow_ids.append(flow_id)
        chain[-1].terminating_flow_ids.append(flow_id)
        flows += 1
    return flows


def standalone_trace(path: str | Path) -> bytes:
    """A Kineto JSON trace alone as a Perfetto protobuf trace, through the same placement as `--kineto`
    (copies and memsets are never dropped, unlike trace_processor's JSON importer, which drops an X
    event that partly overlaps another on its track). What memq loads whenever its input is JSON."""
    from . import clocks, write

    merge = KinetoMerge(load(path), thread_track_uuid=write.thread_track_uuid,
                        process_track_uuid=write.process_track_uuid)
    packets = merge.packets()
    # MONOTONIC = REALTIME: the descriptors' times (MONOTONIC in write.py) are REALTIME ns here.
    out = [clocks.snapshot_record(clocks.ClockCorrespondence(0, 0, None, "kineto"))]
    out += write.process_thread_descriptors(merge.processes, merge.threads, merge.first_ns)
    out += [b"\x0a" + _varint(len(p)) + p for p in packets]
    out.append(write.meta_packet("kineto", merge.first_ns, {"skipped_events": merge.unplaced, "events": merge.events}))
    return b"".join(out)
