"""EventBatches -> a Perfetto protobuf trace laid out as docs/TRACE_FORMAT.md says.

`write_trace` runs the memory model (model.py) over each batch and writes its
events as they come: bulk events (heap instants, API and copy slices, counter
samples) are encoded from columns by native/encode.c (encode.py); the few
structural packets (interned names, track descriptors) use the perfetto
package's protos. Packet 0, the clock snapshot, needs the complete TraceInfo:
room is reserved for it and it is written last. Copy -> allocation flows must
be appended to allocation packets already written: when a trace has any, the
file is rewritten once at the end with them. Everything happens in a temporary
file renamed over `out` only on success.
"""
from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Callable, Iterable, Mapping

import numpy as np
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from . import __version__, clocks
from .errors import MemqError
from .outfiles import AtomicOutput
from .events import HEAP_ROW_KINDS, EventBatch, EventKind, MemKind, TraceInfo
from .model import CNT_DEVICE, CNT_HOST, COUNTER_NAMES, MemoryModel, counter_key, kind_in, split_counter_key
from .encode import (ARG_INT, ARG_POINTER, ARG_STRING, ARG_UINT, SEQ, TYPE_BEGIN, TYPE_COUNTER, TYPE_END,
                     TYPE_INSTANT, Patches, Table, arg_values, copy_patched, record, varint)
from .windows import TRACK_NAME as WINDOW_TRACK_NAME, Windows

# Track descriptors go on a sequence of their own: trace_processor makes the last thread
# descriptor of a sequence that sequence's default thread, which would leak into events
# on non-thread tracks (copies, memq) as a `legacy_event.passthrough_utid` arg.
DESCRIPTOR_SEQ = 3
# Heap instants of thread k go on sequence HEAP_SEQ_BASE + k, whose TrackEventDefaults name the
# thread track and the process's heap counter: the bulk of a trace then carries neither uuid.
HEAP_SEQ_BASE = 16
HEAP_ARGS = ("ptr", "size", "in_ptr", "nmemb", "alignment", "result", "alloc_id", "freed_alloc_id", "unmatched",
             "replaced_alloc_id", "ip", "requested", "alloc_count", "alloc_bytes", "free_count", "free_bytes")
# memq.heap instant names: LTTng's libc events are named by their kind, memq's host_alloc / host_free by the
# function (`api`), host_small as itself.
_LTTNG_HEAP = (EventKind.MALLOC, EventKind.CALLOC, EventKind.REALLOC, EventKind.MEMALIGN, EventKind.POSIX_MEMALIGN,
               EventKind.FREE)
HEAP_NAMES = (*(k.name.lower() for k in _LTTNG_HEAP), "aligned_alloc", "valloc", "pvalloc", "host_small")
_ENCODE_ROWS = 1 << 15  # rows per native call: bounds the encode buffers
_ALLOC_FLOW = 1 << 56  # flow id = tag | alloc_id (allocation -> free)
_COPY_FLOW = 2 << 56  # flow id = tag | n (allocation -> copy)
_MEM_NAMES = {MemKind.UNKNOWN: "untracked", MemKind.HOST: "host", MemKind.PINNED: "pinned",
              MemKind.REGISTERED: "registered", MemKind.DEVICE: "device", MemKind.MANAGED: "managed"}
# memq.lost slice names by the row's aux2 (events.py LOST rows: 0 events, 1 packets) and for the losses
# the files show (TraceInfo.losses): packets index/ lists that are gone, packets salvage cut away.
LOSS_MISSING, LOSS_DROPPED = 2, 3
LOSS_NAMES = {0: "lost events", 1: "lost packets", LOSS_MISSING: "missing packets", LOSS_DROPPED: "dropped packets"}
_COPY_DIRECTIONS = {0: "HtoH", 1: "HtoD", 2: "DtoH", 3: "DtoD", 1024: "DtoD"}
CONTENT_MODES = {0: "off", 1: "sampled", 2: "full"}  # memq:copy content_mode (docs/EVENTS.md)
_GPU_OPS = {EventKind.GPU_ALLOC: "alloc", EventKind.GPU_FREE: "free", EventKind.GPU_REGISTER: "register",
            EventKind.GPU_UNREGISTER: "unregister", EventKind.GPU_COPY: "copy", EventKind.GPU_SET: "set",
            EventKind.GPU_PREFETCH: "prefetch", EventKind.GPU_ADVISE: "advise", EventKind.GPU_SYNC: "sync",
            EventKind.GPU_SET_DEVICE: "set_device"}


# -- track uuids (deterministic, shared with other writers of memq traces) -------------------
@lru_cache(maxsize=None)
def _uuid(*parts: object) -> int:
    digest = hashlib.blake2b("/".join(map(str, ("memq",) + parts)).encode(), digest_size=8).digest()
    return (int.from_bytes(digest, "little") & ((1 << 63) - 1)) or 1


def process_track_uuid(pid: int) -> int:
    """uuid of the process track of `pid`."""
    return _uuid("process", pid)


def thread_track_uuid(pid: int, tid: int) -> int:
    """uuid of the thread track of (`pid`, `tid`)."""
    return _uuid("thread", pid, tid)


def device_track_uuid(device: int) -> int:
    """uuid of the `GPU <device>` track (parent of the stream tracks and the device counter)."""
    return _uuid("gpu", device)


def device_track_packet(device: int) -> bytes:
    """Serialized descriptor of the `GPU <device>` track, for writers of extra packets that use it."""
    packet = pb.TracePacket()
    packet.trusted_packet_sequence_id = DESCRIPTOR_SEQ
    _fill_device_track(packet.track_descriptor, device)
    return packet.SerializeToString()


def _fill_device_track(d: pb.TrackDescriptor, device: int) -> None:
    d.uuid = device_track_uuid(device)
    d.name = f"GPU {device}"
    d.sibling_merge_behavior = pb.TrackDescriptor.SIBLING_MERGE_BEHAVIOR_NONE


def _stream_track_uuid(device: int, runtime: str, stream: int, lane: int) -> int:
    return _uuid("stream", device, runtime, stream, lane)


def _counter_track_uuid(key: int) -> int:
    return _uuid("counter", key)


def _memq_track_uuid(lane: int = 0) -> int:
    return _uuid("memq-track", lane)


def _window_track_uuid(pid: int) -> int:
    return _uuid("windows", pid)


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
    output: str = ""
    output_bytes: int = 0
    trace_duration_ns: int = 0  # last event - first event
    elapsed_s: float = 0.0  # wall-clock time the conversion took

    @property
    def total_events(self) -> int:
        return sum(self.events.values())


# -- interning -------------------------------------------------------------------------------
class _Interner:
    """Interned names of the memq sequence; new entries go out in the next interned-data packet."""

    KINDS = ("event_categories", "event_names", "debug_annotation_names", "debug_annotation_string_values")

    def __init__(self) -> None:
        self.tables: dict[str, dict[str, int]] = {k: {} for k in self.KINDS}
        self.pending: list[tuple[str, int, str]] = []

    def iid(self, kind: str, text: str) -> int:
        table = self.tables[kind]
        iid = table.get(text)
        if iid is None:
            iid = table[text] = len(table) + 1
            self.pending.append((kind, iid, text))
        return iid

    def iids(self, kind: str, texts: Iterable[str]) -> np.ndarray:
        return np.array([self.iid(kind, t) for t in texts] or [0], np.uint32)

    def packet(self) -> pb.TracePacket | None:
        """Interned-data packet with the entries not yet written, or None."""
        if not self.pending:
            return None
        packet = pb.TracePacket()
        packet.trusted_packet_sequence_id = SEQ
        packet.sequence_flags = pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
        data = packet.interned_data
        for kind, iid, text in self.pending:
            entry = getattr(data, kind).add()
            entry.iid = iid
            if kind == "debug_annotation_string_values":
                entry.str = text.encode()
            else:
                entry.name = text
        self.pending.clear()
        return packet


# -- the writer ----------------------------------------------------------------------------------
class _Lanes:
    """Greedy lanes: a slice goes on the first lane free at its start (one open slice per track)."""

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


class _TraceWriter:
    def __init__(self, body, spill_dir: Path | None = None) -> None:
        self.body = body
        self.pos = 0
        self.model = MemoryModel()
        self.interner = _Interner()
        self.patches = Patches(spill_dir)  # (body offset of an allocation packet, copy flow id)
        self.next_copy_flow = 1
        self.next_call_id = 1
        self.first_ts: int | None = None
        self.last_ts = 0
        self.events: dict[str, int] = {}
        self.threads: set[tuple[int, int]] = set()
        self.counters: set[int] = set()
        self.gpus: set[int] = set()
        self.streams: dict[int, tuple[int, str, int, int]] = {}  # uuid -> (device, runtime, stream, lane)
        self.copy_lanes = _Lanes()
        self.lost_lanes = _Lanes()
        self.memq_lanes = 1
        self.lost: list[dict[str, np.ndarray]] = []
        self.windows = Windows()
        self.api_names: list[str] = []
        # Room for packet 0 (the clock snapshot needs the complete TraceInfo), then the
        # packet that clears the memq sequence's state and sets its default clock.
        self._write(bytes(clocks.SNAPSHOT_RECORD_SIZE))
        clear = pb.TracePacket()
        clear.trusted_packet_sequence_id = SEQ
        clear.sequence_flags = (pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
                                | pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE)
        clear.trace_packet_defaults.timestamp_clock_id = clocks.MONOTONIC
        self._write(record(clear))
        self.heap_cat = self.interner.iid("event_categories", "memq.heap")
        self.heap_names = {name: self.interner.iid("event_names", name) for name in HEAP_NAMES}
        self.heap_args = {name: self._arg(name) for name in HEAP_ARGS}
        self.heap_seqs: dict[tuple[int, int], int] = {}
        self._pairs: list[tuple[int, int]] = []  # the current batch's threads, and each row's index in it
        self._pair_of_row = np.zeros(0, np.int64)
        self._encoded = np.zeros(0, np.uint8)  # reused encode output (see _emit)

    # -- output ----------------------------------------------------------------------------
    def _write(self, data) -> int:
        start = self.pos
        self.body.write(data)
        self.pos += len(data)
        return start

    def _flush_interned(self) -> None:
        packet = self.interner.packet()
        if packet is not None:
            self._write(record(packet))

    def _emit(self, table: Table, slices: bool = False) -> np.ndarray:
        """Encode and write a table; each row's packet offset in the body back.

        A slice table holds [all BEGINs, all ENDs] (rows i and i + n/2 are one slice).
        It goes out in time order with, at equal times, the ENDs of earlier slices
        first and BEGINs last, but a zero-length slice's END right after its BEGIN, so
        every END closes its own slice.
        """
        if len(table.ts) == 0:
            return np.zeros(0, np.int64)
        self._flush_interned()
        order = None
        if slices:
            half = len(table.ts) // 2
            pair = np.tile(np.arange(half), 2)
            is_end = np.arange(2 * half) >= half
            zero_len = is_end & (table.ts == np.tile(table.ts[:half], 2))
            rank = np.where(is_end & ~zero_len, 0, 1)
            order = np.lexsort((is_end, pair, rank, table.ts))
            table = table.take(order)
        offsets = np.empty(len(table.ts), np.int64)
        for lo in range(0, len(table.ts), _ENCODE_ROWS):
            hi = min(lo + _ENCODE_ROWS, len(table.ts))
            part = table.take(slice(lo, hi))
            if len(self._encoded) < part.bound_bytes():
                self._encoded = np.empty(part.bound_bytes(), np.uint8)
            data, chunk = part.encode(self._encoded)  # written out before the buffer's next use
            offsets[lo:hi] = chunk + self._write(memoryview(data))
        if order is not None:
            unsorted = np.empty_like(offsets)
            unsorted[order] = offsets
            offsets = unsorted
        return offsets

    def _str(self, text: str) -> int:
        return self.interner.iid("debug_annotation_string_values", text)

    def _arg(self, name: str) -> int:
        return self.interner.iid("debug_annotation_names", name)

    # -- per batch -------------------------------------------------------------------------------
    def add(self, batch: EventBatch) -> None:
        """One batch; cut after each capture-window close, where the process's allocations end."""
        if len(batch) == 0:
            return
        for part, closed in self.windows.split(batch):
            self._add(part)
            if closed is not None:
                self._emit_counters(*self.model.end_process(*closed))

    def _add(self, batch: EventBatch) -> None:
        n = len(batch)
        if n == 0:
            return
        self.api_names = batch.api_names
        if self.first_ts is None:
            self.first_ts = int(batch["ts"][0])
        self.first_ts = min(self.first_ts, int(batch["begin"].min()), int(batch["ts"].min()))
        self.last_ts = max(self.last_ts, int(batch["ts"].max()))
        counts = np.bincount(batch["kind"])  # kinds are < 256: a count per value, no sort
        for k in np.flatnonzero(counts).tolist():
            name = EventKind(k).name.lower()
            self.events[name] = self.events.get(name, 0) + int(counts[k])
        mb = self.model.process(batch)
        thread_uuid = self._thread_uuids(batch)
        row_offsets = np.zeros(n, np.int64)
        sample_done = np.zeros(len(mb.sample_row), bool)

        heap = np.flatnonzero(kind_in(batch["kind"], HEAP_ROW_KINDS))
        if len(heap):
            # A libc-only batch (the bulk of most traces) is used in place, not gathered row by row.
            rows = slice(None) if len(heap) == n else heap
            row_offsets[rows] = self._emit_heap(batch, mb, rows, thread_uuid, sample_done)
        kind = batch["kind"]
        live = np.flatnonzero(kind == EventKind.LIVE) if int(kind.max()) >= EventKind.LIVE \
            else np.zeros(0, np.int64)
        window_of_live = self.windows.note(batch, live)
        if len(live):
            row_offsets[live] = self._emit_live(batch, mb, live, thread_uuid, window_of_live)
        gpu = np.flatnonzero((kind >= EventKind.GPU_ALLOC) & (kind < EventKind.LOST) & (kind != EventKind.GPU_COPY_DONE))
        done = np.flatnonzero(kind == EventKind.GPU_COPY_DONE)
        if len(done):
            self._emit_copy_done(batch, done, thread_uuid)
        if len(gpu):
            call_ids = np.arange(self.next_call_id, self.next_call_id + len(gpu), dtype=np.uint64)
            self.next_call_id += len(gpu)
            row_call_id = np.zeros(n, np.uint64)
            row_call_id[gpu] = call_ids
            row_offsets[gpu] = self._emit_api(batch, mb, gpu, thread_uuid, row_call_id)
            self._emit_copies(batch, mb, row_call_id, row_offsets)
        rest = ~sample_done
        if rest.any():
            self._emit_counters(mb.sample_ts[rest], mb.sample_key[rest], mb.sample_value[rest])
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
        self.threads.update(pair for pair, u in zip(pairs, used) if u)
        self._pairs, self._pair_of_row = pairs, inverse
        uuids = np.array([thread_track_uuid(p, t) for p, t in pairs], np.uint64)
        return uuids[inverse]

    def _heap_sequence(self, pid: int, tid: int) -> int:
        """The sequence of a thread's heap instants, started (state cleared, defaults, names) on first use."""
        seq = self.heap_seqs.get((pid, tid))
        if seq is not None:
            return seq
        seq = self.heap_seqs[(pid, tid)] = HEAP_SEQ_BASE + len(self.heap_seqs)
        host = int(self._counter_uuids(np.array([counter_key(CNT_HOST, pid)], np.int64))[0])
        packet = pb.TracePacket()
        packet.trusted_packet_sequence_id = seq
        packet.sequence_flags = (pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
                                 | pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE)
        defaults = packet.trace_packet_defaults
        defaults.timestamp_clock_id = clocks.MONOTONIC
        defaults.track_event_defaults.track_uuid = thread_track_uuid(pid, tid)
        defaults.track_event_defaults.extra_counter_track_uuids.append(host)
        data = packet.interned_data
        data.event_categories.add(iid=self.heap_cat, name="memq.heap")
        for name, iid in self.heap_names.items():
            data.event_names.add(iid=iid, name=name)
        for name, iid in self.heap_args.items():
            data.debug_annotation_names.add(iid=iid, name=name)
        self._write(record(packet))
        return seq

    def _counter_uuids(self, keys: np.ndarray) -> np.ndarray:
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
                self._write(record(_counter_descriptor(key)))
        return np.array([_counter_track_uuid(k) for k in uniq.tolist()], np.uint64)[inverse.ravel()]

    def _heap_name_iids(self, kind: np.ndarray, api: np.ndarray) -> np.ndarray:
        """memq.heap instant name per row (see HEAP_NAMES)."""
        lut = np.zeros(256, np.uint32)
        for k in _LTTNG_HEAP:
            lut[k] = self.heap_names[k.name.lower()]
        lut[EventKind.HOST_ALLOC] = self.heap_names["malloc"]  # (an api outside HEAP_NAMES: generic names)
        lut[EventKind.HOST_FREE] = self.heap_names["free"]
        lut[EventKind.HOST_SMALL] = self.heap_names["host_small"]
        names = lut[kind]
        host = kind_in(kind, (EventKind.HOST_ALLOC, EventKind.HOST_FREE))
        if host.any():
            by_api = np.array([self.heap_names.get(n, 0) for n in self.api_names] + [0], np.uint32)
            named = by_api[np.minimum(api[host], len(self.api_names))]
            names[host] = np.where(named != 0, named, names[host])
        return names

    def _emit_heap(self, batch, mb, rows, thread_uuid, sample_done) -> np.ndarray:
        """Heap instants of `rows` (row indices, or slice(None) for the whole batch)."""
        kind = batch["kind"][rows]
        g = len(kind)
        alloc_id = mb.alloc_id[rows]
        freed = mb.freed_alloc_id[rows]
        unmatched = mb.unmatched[rows]
        small = kind == EventKind.HOST_SMALL
        aligned = kind_in(kind, (EventKind.MEMALIGN, EventKind.POSIX_MEMALIGN))
        ip = batch["ip"][rows]
        ones = np.ones(g, bool)
        a = self.heap_args
        replaced = mb.replaced_alloc_id[rows]
        args = [
            (a["ptr"], ARG_POINTER, batch["ptr"][rows], ~small),
            (a["size"], ARG_UINT, batch["size"][rows], ~small & (kind != EventKind.FREE)),
            (a["requested"], ARG_UINT, batch["aux2"][rows], kind == EventKind.HOST_ALLOC),
            (a["alloc_count"], ARG_UINT, batch["aux"][rows], small),
            (a["alloc_bytes"], ARG_UINT, batch["size"][rows], small),
            (a["free_count"], ARG_UINT, batch["aux2"][rows], small),
            (a["free_bytes"], ARG_UINT, batch["flags"][rows], small),
            (a["in_ptr"], ARG_POINTER, batch["src"][rows], kind == EventKind.REALLOC),
            (a["nmemb"], ARG_UINT, batch["aux"][rows], kind == EventKind.CALLOC),
            (a["alignment"], ARG_UINT, batch["aux"][rows], aligned),
            (a["result"], ARG_INT, arg_values(batch["result"][rows]), kind == EventKind.POSIX_MEMALIGN),
            (a["alloc_id"], ARG_UINT, alloc_id, alloc_id > 0),
            (a["freed_alloc_id"], ARG_UINT, freed, freed > 0),
            (a["unmatched"], ARG_UINT, unmatched.astype(np.uint64), unmatched),
            (a["replaced_alloc_id"], ARG_UINT, replaced, replaced > 0),
            (a["ip"], ARG_POINTER, ip, ip != 0),
        ]
        # The heap counter sample of a row rides on its instant (same time): no packet of its own,
        # and no uuid when it is the process's heap counter (the sequence's default).
        pair = self._pair_of_row[rows]
        seq_of_pair = np.zeros(len(self._pairs), np.uint32)
        for i in (np.unique(pair).tolist() if len(self._pairs) > 1 else [0]):
            seq_of_pair[i] = self._heap_sequence(*self._pairs[i])
        seq = seq_of_pair[pair]
        xc_track = np.zeros(g, np.uint64)
        xc_value = np.zeros(g, np.int64)
        xc_has = np.zeros(g, bool)
        pos = np.full(len(batch), -1, np.int64)
        pos[rows] = np.arange(g)
        at = pos[mb.sample_row]
        ride = np.flatnonzero((at >= 0) & (mb.sample_ts == batch["ts"][mb.sample_row]))
        if len(ride):
            keys = mb.sample_key[ride]
            own = keys == (counter_key(CNT_HOST, 0) | batch["pid"][mb.sample_row[ride]])
            xc_track[at[ride[~own]]] = self._counter_uuids(keys[~own])
            xc_value[at[ride]] = mb.sample_value[ride]
            xc_has[at[ride]] = True
            sample_done[ride] = True
        table = Table(
            ts=batch["ts"][rows], track=np.zeros(g, np.uint64),
            type=np.full(g, TYPE_INSTANT, np.uint8),
            name_iid=self._heap_name_iids(kind, batch["api"][rows]), cat_iid=np.full(g, self.heap_cat, np.uint32),
            flow_out=np.where(alloc_id > 0, alloc_id | _ALLOC_FLOW, 0).astype(np.uint64),
            flow_in=np.where(freed > 0, freed | _ALLOC_FLOW, 0).astype(np.uint64),
            xc_track=xc_track, xc_value=xc_value, xc_has=xc_has, pad=(alloc_id > 0).astype(np.uint8), seq=seq,
            args=args)
        return self._emit(table)

    def _api_is(self, api: np.ndarray, test: Callable[[str], object], dtype=bool) -> np.ndarray:
        """test(function name) per row of `api` (evaluated once per distinct function)."""
        return _each_distinct(api, lambda i: test(self.api_names[i]), dtype)

    def _api_strings(self, api: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per row: the function name's event-name iid and the runtime's string iid."""
        return (self._api_is(api, lambda nm: self.interner.iid("event_names", nm), np.uint32),
                self._api_is(api, lambda nm: self._str(_runtime(nm)), np.uint64))

    def _emit_api(self, batch, mb, rows, thread_uuid, row_call_id) -> np.ndarray:
        """memq.api slices: BEGIN (all args, free flows) at the call's start, END (alloc flows) at its end."""
        g = len(rows)
        col = {c: batch[c][rows] for c in ("kind", "api", "ptr", "src", "size", "stream", "flags", "aux", "aux2",
                                          "dpitch", "spitch", "ip", "mem", "copy_kind", "depth", "dslice",
                                          "sslice")}
        kind = col["kind"]
        name_iid, runtime = self._api_strings(col["api"])
        op = _each_distinct(kind, lambda k: self._str(_GPU_OPS[EventKind(k)]), np.uint64)
        mem_kind = self._mem_strings(col["mem"])
        is_ = {k: kind == k for k in _GPU_OPS}
        allocish = is_[EventKind.GPU_ALLOC] | is_[EventKind.GPU_REGISTER]
        freeish = is_[EventKind.GPU_FREE] | is_[EventKind.GPU_UNREGISTER]
        copy, gset = is_[EventKind.GPU_COPY], is_[EventKind.GPU_SET]
        prefetch, advise = is_[EventKind.GPU_PREFETCH], is_[EventKind.GPU_ADVISE]
        two_d = copy & ((col["dpitch"] != 0) | (col["spitch"] != 0))
        pitched = is_[EventKind.GPU_ALLOC] & (col["aux"] != 0)
        peer = copy & self._api_is(col["api"], lambda nm: "Peer" in nm)
        has_stream = copy | gset | prefetch | self._api_is(col["api"], lambda nm: "Async" in nm or "Stream" in nm)
        alloc_id, freed, unmatched = mb.alloc_id[rows], mb.freed_alloc_id[rows], mb.unmatched[rows]
        ones = np.ones(g, bool)
        a = self._arg
        args = [
            (a("runtime"), ARG_STRING, runtime, ones),
            (a("op"), ARG_STRING, op, ones),
            (a("result"), ARG_INT, arg_values(batch["result"][rows]), ones),
            (a("device"), ARG_INT, arg_values(batch["device"][rows]), ones),
            (a("stream"), ARG_UINT, col["stream"], has_stream),
            (a("call_id"), ARG_UINT, row_call_id[rows], ones),
            (a("ip"), ARG_POINTER, col["ip"], col["ip"] != 0),
            (a("ptr"), ARG_POINTER, col["ptr"], allocish | freeish | prefetch | advise),
            (a("size"), ARG_UINT, col["size"], allocish | freeish),
            (a("mem_kind"), ARG_STRING, mem_kind, allocish | freeish),
            (a("flags"), ARG_UINT, col["flags"], allocish),
            (a("alloc_id"), ARG_UINT, alloc_id, alloc_id > 0),
            (a("replaced_alloc_id"), ARG_UINT, mb.replaced_alloc_id[rows], mb.replaced_alloc_id[rows] > 0),
            (a("width"), ARG_UINT, col["aux"], pitched | two_d),
            (a("height"), ARG_UINT, col["aux2"], pitched | two_d),
            (a("freed_alloc_id"), ARG_UINT, freed, freed > 0),
            (a("unmatched"), ARG_UINT, unmatched.astype(np.uint64), unmatched),
            (a("dst"), ARG_POINTER, col["ptr"], copy | gset),
            (a("src"), ARG_POINTER, col["src"], copy),
            (a("bytes"), ARG_UINT, col["size"], copy | gset | prefetch | advise),
            (a("copy_kind"), ARG_INT, arg_values(col["copy_kind"]), copy),
            (a("dpitch"), ARG_UINT, col["dpitch"], two_d),
            (a("spitch"), ARG_UINT, col["spitch"], two_d),
            (a("depth"), ARG_UINT, col["depth"], col["depth"] != 0),
            (a("dslice"), ARG_UINT, col["dslice"], col["depth"] != 0),
            (a("sslice"), ARG_UINT, col["sslice"], col["depth"] != 0),
            (a("src_device"), ARG_INT, arg_values(col["aux"]), peer),
            (a("value"), ARG_UINT, col["aux"], gset),
            (a("dst_device"), ARG_INT, arg_values(col["aux"]), prefetch),
            (a("advice"), ARG_UINT, col["aux"], advise),
            (a("new_device"), ARG_INT, arg_values(col["aux"]), is_[EventKind.GPU_SET_DEVICE]),
        ]
        none = np.zeros(g, bool)
        zero = np.zeros(g, np.uint64)
        table = Table(
            ts=np.concatenate([batch["begin"][rows], batch["ts"][rows]]),
            track=np.concatenate([thread_uuid[rows]] * 2),
            type=np.repeat(np.array([TYPE_BEGIN, TYPE_END], np.uint8), g),
            name_iid=np.concatenate([name_iid, np.zeros(g, np.uint32)]),
            cat_iid=np.concatenate([np.full(g, self.interner.iid("event_categories", "memq.api"), np.uint32),
                                    np.zeros(g, np.uint32)]),
            flow_out=np.concatenate([zero, np.where(alloc_id > 0, alloc_id | _ALLOC_FLOW, 0).astype(np.uint64)]),
            flow_in=np.concatenate([np.where(freed > 0, freed | _ALLOC_FLOW, 0).astype(np.uint64), zero]),
            pad=np.concatenate([none, alloc_id > 0]).astype(np.uint8),
            args=[(nm, t, np.concatenate([v.astype(np.uint64), zero]), np.concatenate([p, none]))
                  for nm, t, v, p in args])
        offsets = self._emit(table, slices=True)
        return offsets[g:]  # the END packet carries the allocation (its flows start there)

    def _emit_live(self, batch, mb, rows, thread_uuid, window) -> np.ndarray:
        """memq.live instants (allocations live when a capture window opened), on the thread track of
        whoever opened it; named after the function that allocated them."""
        g = len(rows)
        name_iid = self._api_is(batch["api"][rows], lambda nm: self.interner.iid("event_names", nm or "live"),
                                np.uint32)
        mem = batch["mem"][rows]
        mem_kind = self._mem_strings(mem)
        alloc_id, replaced = mb.alloc_id[rows], mb.replaced_alloc_id[rows]
        ones = np.ones(g, bool)
        a = self._arg
        args = [
            (a("ptr"), ARG_POINTER, batch["ptr"][rows], ones),
            (a("size"), ARG_UINT, batch["size"][rows], ones),
            (a("mem_kind"), ARG_STRING, mem_kind, ones),
            (a("device"), ARG_INT, arg_values(batch["device"][rows]), mem != MemKind.HOST),
            (a("window"), ARG_UINT, window.astype(np.uint64), window >= 0),
            (a("alloc_id"), ARG_UINT, alloc_id, alloc_id > 0),
            (a("replaced_alloc_id"), ARG_UINT, replaced, replaced > 0),
        ]
        return self._emit(Table(
            ts=batch["ts"][rows], track=thread_uuid[rows], type=np.full(g, TYPE_INSTANT, np.uint8),
            name_iid=name_iid, cat_iid=np.full(g, self.interner.iid("event_categories", "memq.live"), np.uint32),
            flow_out=np.where(alloc_id > 0, alloc_id | _ALLOC_FLOW, 0).astype(np.uint64),
            pad=(alloc_id > 0).astype(np.uint8), args=args))

    def _emit_windows(self) -> None:
        """One slice per capture window on its process's `Capture windows` track (written at the end:
        a window's close may come batches after its open). A window the trace never closes ends with
        the trace; one it never opened starts with it."""
        windows = self.windows.all()
        if not windows:
            return
        g = len(windows)
        first, last = self.first_ts or 0, self.last_ts
        begin = np.array([w.start if w.start is not None else first for w in windows], np.int64)
        end = np.array([w.end if w.end is not None else last for w in windows], np.int64)
        track = np.array([_window_track_uuid(w.pid) for w in windows], np.uint64)
        name = np.array([self.interner.iid("event_names", f"window {w.index}") for w in windows], np.uint32)
        string = lambda values: np.array([self._str(v) for v in values], np.uint64)  # noqa: E731
        ones = np.ones(g, bool)
        a = self._arg
        args = [
            (a("pid"), ARG_INT, arg_values(np.array([w.pid for w in windows], np.int64)), ones),
            (a("index"), ARG_UINT, np.array([w.index for w in windows], np.uint64), ones),
            (a("open_cause"), ARG_STRING, string([w.open_cause or "unknown" for w in windows]), ones),
            (a("close_cause"), ARG_STRING, string([w.close_cause or "trace_end" for w in windows]), ones),
            (a("open_api"), ARG_STRING, string([w.open_api for w in windows]),
             np.array([bool(w.open_api) for w in windows])),
            (a("close_api"), ARG_STRING, string([w.close_api for w in windows]),
             np.array([bool(w.close_api) for w in windows])),
            (a("live_allocations"), ARG_UINT, np.array([w.live for w in windows], np.uint64), ones),
            (a("live_bytes"), ARG_UINT, np.array([w.live_bytes for w in windows], np.uint64), ones),
        ]
        none = np.zeros(g, bool)
        zero = np.zeros(g, np.uint64)
        self._emit(Table(
            ts=np.concatenate([begin, end]), track=np.concatenate([track, track]),
            type=np.repeat(np.array([TYPE_BEGIN, TYPE_END], np.uint8), g),
            name_iid=np.concatenate([name, np.zeros(g, np.uint32)]),
            cat_iid=np.concatenate([np.full(g, self.interner.iid("event_categories", "memq.window"), np.uint32),
                                    np.zeros(g, np.uint32)]),
            args=[(nm, t, np.concatenate([np.asarray(v, np.uint64), zero]), np.concatenate([p, none]))
                  for nm, t, v, p in args]), slices=True)

    def _mem_strings(self, mem: np.ndarray) -> np.ndarray:
        return _each_distinct(mem, lambda m: self._str(_MEM_NAMES.get(MemKind(m), "untracked")), np.uint64)

    def _directions(self, copy_kind, src_mem, dst_mem, copy) -> np.ndarray:
        """Per copy/set row: HtoD, DtoH, ... (memsets: `memset`), once per distinct (kind, memories)."""
        key = np.stack([copy_kind.astype(np.int64), src_mem.astype(np.int64), dst_mem.astype(np.int64),
                        copy.astype(np.int64)], axis=1)
        if len(key) == 0:
            return np.zeros(0, object)
        uniq, inverse = np.unique(key, axis=0, return_inverse=True)
        text = [_direction(k, s, d) if cp else "memset" for k, s, d, cp in uniq.tolist()]
        return np.array(text, object)[inverse.ravel()]

    def _copy_tracks(self, api, device, stream, begin, end) -> np.ndarray:
        """Stream lane track uuid per copy/set: greedy lanes per (device, runtime, stream) in start order;
        a stream whose copies do not overlap each other or its lane 0 stays on lane 0 without a loop."""
        c = len(api)
        runtime = self._api_is(api, _runtime, object)
        track = np.zeros(c, np.uint64)
        key = np.stack([device.astype(np.int64), stream.view(np.int64), _each_distinct(
            api, lambda i: ("hip", "cuda", "unknown").index(_runtime(self.api_names[i])), np.int64)], axis=1)
        groups, inverse = np.unique(key, axis=0, return_inverse=True)
        inverse = inverse.ravel()
        for g in range(len(groups)):
            idx = np.flatnonzero(inverse == g)
            idx = idx[np.lexsort((idx, begin[idx]))]
            dev, st, rt = int(device[idx[0]]), int(stream[idx[0]]), str(runtime[idx[0]])
            lanes = self.copy_lanes.ends.setdefault((dev, rt, st), [])
            b, e = begin[idx], end[idx]
            reach = np.maximum.accumulate(e)
            if (not lanes or lanes[0] <= b[0]) and (len(b) < 2 or (b[1:] >= reach[:-1]).all()):
                if lanes:
                    lanes[0] = int(reach[-1])
                else:
                    lanes.append(int(reach[-1]))
                lane_of = np.zeros(len(idx), np.int64)
            else:
                lane_of = np.array([self.copy_lanes.assign((dev, rt, st), int(x), int(y))
                                    for x, y in zip(b.tolist(), e.tolist())], np.int64)
            for lane in np.unique(lane_of).tolist():
                uuid = _stream_track_uuid(dev, rt, st, lane)
                self.streams[uuid] = (dev, rt, st, lane)
                track[idx[lane_of == lane]] = uuid
            self.gpus.add(dev)
        return track

    def _emit_copies(self, batch, mb, row_call_id, row_offsets) -> None:
        """memq.copy / memq.set slices on per-stream lane tracks, with copy -> allocation flows."""
        ep = mb.endpoints
        rows = ep["row"]
        if len(rows) == 0:
            return
        c = len(rows)
        kind = batch["kind"][rows]
        copy = kind == EventKind.GPU_COPY
        api = batch["api"][rows]
        begin, end = batch["begin"][rows], batch["ts"][rows]
        device, stream = batch["device"][rows], batch["stream"][rows]
        copy_kind = batch["copy_kind"][rows]
        track = self._copy_tracks(api, device, stream, begin, end)
        direction = self._directions(copy_kind, ep["src_mem"], ep["dst_mem"], copy)
        name_iid = _each_distinct(direction, lambda d: self.interner.iid("event_names", d), np.uint32)
        cat = np.where(copy, self.interner.iid("event_categories", "memq.copy"),
                       self.interner.iid("event_categories", "memq.set")).astype(np.uint32)
        flows = {}
        for side in ("src", "dst"):
            has = np.flatnonzero(ep[f"{side}_alloc_id"] > 0)
            flow = np.zeros(c, np.uint64)
            flow[has] = _COPY_FLOW | np.arange(self.next_copy_flow, self.next_copy_flow + len(has), dtype=np.uint64)
            self.next_copy_flow += len(has)
            arow = ep[f"{side}_alloc_row"][has]
            at = np.where(arow >= 0, row_offsets[np.maximum(arow, 0)], ep[f"{side}_alloc_tag"][has])
            self.patches.add(at, flow[has])
            flows[side] = flow
        two_d = copy & ((batch["dpitch"][rows] != 0) | (batch["spitch"][rows] != 0))
        peer = copy & self._api_is(api, lambda nm: "Peer" in nm)
        aux = batch["aux"][rows]
        ones = np.ones(c, bool)
        a = self._arg
        mem_str = {side: self._mem_strings(ep[f"{side}_mem"]) for side in ("src", "dst")}
        args = [
            (a("api"), ARG_STRING, self._api_is(api, self._str, np.uint64), ones),
            (a("call_id"), ARG_UINT, row_call_id[rows], ones),
            (a("dst"), ARG_POINTER, batch["ptr"][rows], ones),
            (a("src"), ARG_POINTER, batch["src"][rows], copy),
            (a("bytes"), ARG_UINT, batch["size"][rows], ones),
            (a("copy_kind"), ARG_INT, arg_values(copy_kind), copy),
            (a("stream"), ARG_UINT, stream, ones),
            (a("device"), ARG_INT, arg_values(device), ones),
            (a("result"), ARG_INT, arg_values(batch["result"][rows]), ones),
            (a("width"), ARG_UINT, aux, two_d),
            (a("height"), ARG_UINT, batch["aux2"][rows], two_d),
            (a("dpitch"), ARG_UINT, batch["dpitch"][rows], two_d),
            (a("spitch"), ARG_UINT, batch["spitch"][rows], two_d),
            (a("depth"), ARG_UINT, batch["depth"][rows], batch["depth"][rows] != 0),
            (a("dslice"), ARG_UINT, batch["dslice"][rows], batch["depth"][rows] != 0),
            (a("sslice"), ARG_UINT, batch["sslice"][rows], batch["depth"][rows] != 0),
            (a("src_device"), ARG_INT, arg_values(aux), peer),
            (a("value"), ARG_UINT, aux, ~copy),
            (a("dst_alloc_id"), ARG_UINT, ep["dst_alloc_id"], ep["dst_alloc_id"] > 0),
            (a("src_alloc_id"), ARG_UINT, ep["src_alloc_id"], ep["src_alloc_id"] > 0),
            (a("dst_mem"), ARG_STRING, mem_str["dst"], ones),
            (a("src_mem"), ARG_STRING, mem_str["src"], copy),
            (a("direction"), ARG_STRING, _each_distinct(direction, self._str, np.uint64), copy),
            *self._content_args(batch, rows, copy),
        ]
        none = np.zeros(c, bool)
        zero = np.zeros(c, np.uint64)
        # src flow terminates on the BEGIN, dst flow on the END: one terminating id per packet.
        table = Table(
            ts=np.concatenate([begin, end]), track=np.concatenate([track, track]),
            type=np.repeat(np.array([TYPE_BEGIN, TYPE_END], np.uint8), c),
            name_iid=np.concatenate([name_iid, np.zeros(c, np.uint32)]),
            cat_iid=np.concatenate([cat, np.zeros(c, np.uint32)]),
            flow_in=np.concatenate([flows["src"], flows["dst"]]),
            args=[(nm, t, np.concatenate([np.asarray(v).astype(np.uint64), zero]), np.concatenate([p, none]))
                  for nm, t, v, p in args])
        self._emit(table, slices=True)

    def _content_args(self, batch, rows, copy) -> list[tuple]:
        """A copy's content fingerprints (docs/TRACE_FORMAT.md): each hash only where its `content` bit says so."""
        a = self._arg
        content = batch["content"][rows]
        recorded = copy & (batch["content_mode"][rows] > 0)
        return [
            (a("seq"), ARG_UINT, batch["seq"][rows], copy & (batch["seq"][rows] > 0)),
            (a("content"), ARG_UINT, content, recorded),
            (a("content_mode"), ARG_STRING, np.array([self._str(CONTENT_MODES.get(int(m), str(m)))
                                                      for m in batch["content_mode"][rows].tolist()], np.uint64),
             recorded),
            (a("src_hash"), ARG_POINTER, batch["src_hash"][rows], copy & ((content & 1) != 0)),
            (a("dst_hash_before"), ARG_POINTER, batch["dst_hash_before"][rows], copy & ((content & 2) != 0)),
            (a("dst_hash_after"), ARG_POINTER, batch["dst_hash_after"][rows], copy & ((content & 4) != 0)),
        ]

    def _emit_copy_done(self, batch, rows, thread_uuid) -> None:
        """memq.copy_done instants on the completing thread: a copy's destination fingerprint after completion."""
        g = len(rows)
        ones = np.ones(g, bool)
        a = self._arg
        args = [
            (a("seq"), ARG_UINT, batch["seq"][rows]),
            (a("dst_hash_after"), ARG_POINTER, batch["dst_hash_after"][rows]),
            (a("api"), ARG_STRING, self._api_is(batch["api"][rows], self._str, np.uint64)),
            (a("stream"), ARG_UINT, batch["stream"][rows]),
            (a("device"), ARG_INT, arg_values(batch["device"][rows])),
        ]
        self._emit(Table(
            ts=batch["ts"][rows], track=thread_uuid[rows], type=np.full(g, TYPE_INSTANT, np.uint8),
            name_iid=np.full(g, self.interner.iid("event_names", "copy done"), np.uint32),
            cat_iid=np.full(g, self.interner.iid("event_categories", "memq.copy_done"), np.uint32),
            args=[(nm, t, np.asarray(v).astype(np.uint64), ones) for nm, t, v in args]))

    def _emit_counters(self, ts, keys, values) -> None:
        if len(ts) == 0:
            return
        self._emit(Table(ts=ts, track=self._counter_uuids(keys), type=np.full(len(ts), TYPE_COUNTER, np.uint8),
                          counter=values))

    def _emit_lost(self, lost: dict[str, np.ndarray], stream_files: list[str]) -> None:
        """memq.lost slices on the memq track (lanes below it where loss ranges overlap)."""
        g = len(lost["ts"])
        if g == 0:
            return
        begin = lost["ts"]
        end = begin + lost["size"].astype(np.int64)
        track = np.zeros(g, np.uint64)
        for i in np.lexsort((np.arange(g), begin)).tolist():
            lane = self.lost_lanes.assign("lost", int(begin[i]), int(end[i]))
            self.memq_lanes = max(self.memq_lanes, lane + 1)
            track[i] = _memq_track_uuid(lane)
        name = np.array([self.interner.iid("event_names", LOSS_NAMES[int(k)]) for k in lost["aux2"].tolist()],
                        np.uint32)
        stream = np.array([self._str(stream_files[i] if 0 <= i < len(stream_files) else f"stream {i}")
                           for i in lost["stream"].tolist()], np.uint64)
        ones = np.ones(g, bool)
        none = np.zeros(g, bool)
        zero = np.zeros(g, np.uint64)
        args = [(self._arg("count"), ARG_UINT, lost["aux"], ones), (self._arg("stream"), ARG_STRING, stream, ones)]
        self._emit(Table(
            ts=np.concatenate([begin, end]), track=np.concatenate([track, track]),
            type=np.repeat(np.array([TYPE_BEGIN, TYPE_END], np.uint8), g),
            name_iid=np.concatenate([name, np.zeros(g, np.uint32)]),
            cat_iid=np.concatenate([np.full(g, self.interner.iid("event_categories", "memq.lost"), np.uint32),
                                    np.zeros(g, np.uint32)]),
            args=[(nm, t, np.concatenate([v, zero]), np.concatenate([p, none])) for nm, t, v, p in args]),
            slices=True)

    # -- end of trace ------------------------------------------------------------------------------
    def add_meta(self, info: TraceInfo, summary: ConvertSummary) -> None:
        """memq.meta, memq.device and memq.binary instants on the memq track."""
        t0 = self.first_ts or 0
        memq = _memq_track_uuid()
        placed = [loss for loss in info.losses if loss.get("begin") is not None]
        if placed:  # losses the files show (ctf2perfetto.preflight), with the files as their streams
            files = sorted({loss["file"] for loss in placed})
            self.lost.append({
                "ts": np.array([loss["begin"] for loss in placed], np.int64),
                "size": np.array([max(0, loss["end"] - loss["begin"]) for loss in placed], np.uint64),
                "aux": np.array([loss["packets"] for loss in placed], np.uint64),
                "aux2": np.array([LOSS_DROPPED if "salvage" in loss["what"] else LOSS_MISSING for loss in placed],
                                 np.uint64),
                "stream": np.array([len(info.stream_files) + files.index(loss["file"]) for loss in placed],
                                   np.uint64)})
        else:
            files = []
        if self.lost:
            self._emit_lost({c: np.concatenate([part[c] for part in self.lost]) for c in self.lost[0]},
                            list(info.stream_files) + files)
        self._emit_windows()

        def instant(ts: int, cat: str, name: str, values: dict[str, object]) -> None:
            args = []
            for key, value in values.items():
                if isinstance(value, str):
                    args.append((self._arg(key), ARG_STRING, np.array([self._str(value)], np.uint64)))
                else:
                    value = int(value)
                    args.append((self._arg(key), ARG_INT if value < 0 else ARG_UINT,
                                 np.array([value & ((1 << 64) - 1)], np.uint64)))
            self._emit(Table(
                ts=np.array([ts], np.int64), track=np.array([memq], np.uint64),
                type=np.array([TYPE_INSTANT], np.uint8),
                name_iid=np.array([self.interner.iid("event_names", name)], np.uint32),
                cat_iid=np.array([self.interner.iid("event_categories", cat)], np.uint32),
                args=[(nm, t, v, np.ones(1, bool)) for nm, t, v in args]))

        instant(t0, "memq.meta", "memq trace info", {
            "source": "lttng", "converter_version": __version__, "hostname": info.hostname,
            "lost_events": info.lost_events, "lost_packets": info.lost_packets,
            "unmatched_frees": summary.unmatched_frees, "skipped_events": sum(info.skipped.values()),
            "events": summary.total_events, "events_read": info.events_read,
            **({"recorded_events": info.recorded_events} if info.recorded_events is not None else {}),
            "missing_events": info.missing_events, "missing_packets": info.missing_packets,
            "missing_streams": info.missing_streams, "dropped_packets": info.dropped_packets,
            "dropped_bytes": info.dropped_bytes, **_host_settings(info),
            **({"windows": summary.windows, "live_at_start": summary.live_at_start} if summary.windows else {})})
        for dev in info.devices:
            instant(t0, "memq.device", f"GPU {dev.get('device', 0)}", {
                "pid": dev.get("pid", 0), "device": dev.get("device", 0), "runtime": str(dev.get("runtime", "")),
                "name": str(dev.get("name", "")), "integrated": int(bool(dev.get("integrated"))),
                "unified_memory": int(bool(dev.get("unified_memory")))})
        for binary in info.binaries:
            values = {k: binary.get(k, 0) for k in ("pid", "baddr", "memsz")}
            values["path"] = str(binary.get("path", ""))
            build_id = binary.get("build_id")
            if build_id:
                values["build_id"] = build_id.hex() if isinstance(build_id, (bytes, bytearray)) else str(build_id)
            instant(int(binary.get("ts", t0)), "memq.binary", values["path"], values)

    def descriptors(self, info: TraceInfo, extra_processes: Mapping[int, str],
                    extra_threads: Mapping[tuple[int, int], str]) -> bytes:
        """Every track descriptor (written after the events: trace_processor reads them first anyway)."""
        t0 = self.first_ts or 0
        out: list[bytes] = []

        def descriptor(fill: Callable[[pb.TrackDescriptor], None], timestamped: bool = False) -> None:
            packet = pb.TracePacket()
            packet.trusted_packet_sequence_id = DESCRIPTOR_SEQ
            if timestamped:
                packet.timestamp = t0
                packet.timestamp_clock_id = clocks.MONOTONIC
            fill(packet.track_descriptor)
            out.append(record(packet))

        pids = {split_counter_key(k)[1] for k in self.counters if split_counter_key(k)[0] != CNT_DEVICE} \
            | {w.pid for w in self.windows.all()}
        out += process_thread_descriptors({**{p: "" for p in pids}, **info.processes, **extra_processes},
                                          {**{t: "" for t in self.threads}, **info.threads, **extra_threads},
                                          t0, set(self.threads) | set(extra_threads), pids | set(extra_processes))
        for dev in sorted(self.gpus):
            descriptor(lambda d, dev=dev: _fill_device_track(d, dev))
        for uuid, (dev, runtime, stream, _lane) in sorted(self.streams.items(), key=lambda kv: kv[1]):
            def fill(d, uuid=uuid, dev=dev, runtime=runtime, stream=stream):
                d.uuid = uuid
                d.parent_uuid = device_track_uuid(dev)
                d.name = f"{runtime} stream 0x{stream:x}"
                d.sibling_merge_behavior = pb.TrackDescriptor.SIBLING_MERGE_BEHAVIOR_NONE
            descriptor(fill)
        for pid in sorted({w.pid for w in self.windows.all()}):
            def fill(d, pid=pid):
                d.uuid = _window_track_uuid(pid)
                d.parent_uuid = process_track_uuid(pid)
                d.name = WINDOW_TRACK_NAME
            descriptor(fill)
        for lane in range(self.memq_lanes):
            def fill(d, lane=lane):
                d.uuid = _memq_track_uuid(lane)
                d.name = "memq"
                d.sibling_merge_behavior = pb.TrackDescriptor.SIBLING_MERGE_BEHAVIOR_NONE
                if lane:
                    d.parent_uuid = _memq_track_uuid()
            descriptor(fill)
        return b"".join(out)


def process_thread_descriptors(processes: Mapping[int, str], threads: Mapping[tuple[int, int], str], t0: int = 0,
                               used_threads: set | None = None, used_pids: set | None = None) -> list[bytes]:
    """Track descriptor records of processes and threads (names where known): the threads
    `used_threads` (default: every one named) and the processes of those plus `used_pids`."""
    thread_set = set(threads) if used_threads is None else set(used_threads)
    pids = sorted({p for p, _ in thread_set} | (set(processes) if used_pids is None else set(used_pids)))
    out = []

    def descriptor(fill: Callable[[pb.TrackDescriptor], None]) -> None:
        packet = pb.TracePacket()
        packet.trusted_packet_sequence_id = DESCRIPTOR_SEQ
        packet.timestamp = t0
        packet.timestamp_clock_id = clocks.MONOTONIC
        fill(packet.track_descriptor)
        out.append(record(packet))

    for pid in pids:
        def fill(d, pid=pid):
            d.uuid = process_track_uuid(pid)
            d.process.pid = pid
            if processes.get(pid):
                d.process.process_name = processes[pid]
        descriptor(fill)
    for pid, tid in sorted(thread_set):
        def fill(d, pid=pid, tid=tid):
            d.uuid = thread_track_uuid(pid, tid)
            d.thread.pid = pid
            d.thread.tid = tid
            name = threads.get((pid, tid)) or (processes.get(pid) if pid == tid else None)
            if name:
                d.thread.thread_name = name
        descriptor(fill)
    return out


def meta_packet(source: str, ts: int, values: Mapping[str, int]) -> bytes:
    """The `memq trace info` instant (memq.meta, docs/TRACE_FORMAT.md) of a trace memq built from another
    source than LTTng, at `ts` (REALTIME ns), with the memq track's descriptor."""
    track = pb.TracePacket(trusted_packet_sequence_id=DESCRIPTOR_SEQ)
    track.track_descriptor.uuid = _memq_track_uuid()
    track.track_descriptor.name = "memq"
    event = pb.TracePacket(trusted_packet_sequence_id=DESCRIPTOR_SEQ, timestamp=ts, timestamp_clock_id=clocks.REALTIME)
    event.track_event.type = pb.TrackEvent.TYPE_INSTANT
    event.track_event.track_uuid = _memq_track_uuid()
    event.track_event.name = "memq trace info"
    event.track_event.categories.append("memq.meta")
    for key, value in {"source": source, "converter_version": __version__, **values}.items():
        annotation = event.track_event.debug_annotations.add(name=key)
        if isinstance(value, str):
            annotation.string_value = value
        else:
            annotation.int_value = int(value)
    return record(track) + record(event)


def _counter_descriptor(key: int) -> pb.TracePacket:
    packet = pb.TracePacket()
    packet.trusted_packet_sequence_id = DESCRIPTOR_SEQ
    d = packet.track_descriptor
    kind, owner = split_counter_key(key)
    d.uuid = _counter_track_uuid(key)
    if kind == CNT_DEVICE:
        d.parent_uuid = device_track_uuid(owner)
        d.name = f"GPU {owner} device live bytes"
    else:
        d.parent_uuid = process_track_uuid(owner)
        d.name = COUNTER_NAMES[kind]
    d.counter.unit = pb.CounterDescriptor.UNIT_SIZE_BYTES
    return packet


def _each_distinct(values: np.ndarray, fn: Callable[[object], object], dtype) -> np.ndarray:
    """fn applied once per distinct value of `values`, spread back over them (rows share few values)."""
    if len(values) == 0:
        return np.zeros(0, dtype)
    uniq, inverse = np.unique(values, return_inverse=True)
    return np.array([fn(v) for v in uniq.tolist()], dtype)[inverse.ravel()]


def _host_settings(info: TraceInfo) -> dict[str, object]:
    """How the recording took the host heap (memq-record.json), for `memq trace info`."""
    host = ((info.record or {}).get("enabled") or {}).get("host")
    if not isinstance(host, dict) or host.get("source") not in ("memq", "lttng"):
        return {}
    values: dict[str, object] = {"host_source": host["source"]}
    if isinstance(host.get("min_size"), int):
        values["host_min_size"] = host["min_size"]
    return values


def _runtime(api_name: str) -> str:
    return "cuda" if api_name.startswith("cu") else "hip" if api_name.startswith("hip") else "unknown"


def _direction(copy_kind: int, src_mem: int, dst_mem: int) -> str:
    """Copy direction from the API's kind, or from the endpoints' memory for Default (and unknown) kinds."""
    if copy_kind in _COPY_DIRECTIONS:
        return _COPY_DIRECTIONS[copy_kind]
    side = lambda m: "D" if m in (MemKind.DEVICE, MemKind.MANAGED) else "H"  # noqa: E731
    return f"{side(src_mem)}to{side(dst_mem)}"


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
        directory = out.parent if str(out.parent) else Path(".")
        with AtomicOutput(out, inputs=inputs) as target:
            name = target.path
            with open(name, "wb", buffering=1 << 20) as body:
                writer = _TraceWriter(body, directory)
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
                writer.add_meta(trace_info, summary)
                writer._write(writer.descriptors(trace_info, extra_processes, extra_threads))
                for packet in extra_packets:
                    writer._write(b"\x0a" + varint(len(packet)) + bytes(packet))
                clock = clocks.correspondence(trace_info, writer.first_ts or 0)
                summary.clock_source = clock.source
                if not writer.patches:
                    body.flush()
                    body.seek(0)
                    body.write(clocks.snapshot_record(clock))
            if writer.patches:  # copy -> allocation flows: the allocation packets grow, so the file is rewritten
                patched = target.temp()
                with open(patched, "wb", buffering=1 << 20) as final:
                    final.write(clocks.snapshot_record(clock))
                    copy_patched(name, clocks.SNAPSHOT_RECORD_SIZE, writer.patches, final)
                name = patched
            target.commit(name)
    except OSError as exc:
        raise MemqError(f"{out}: cannot write: {exc.strerror or exc}") from exc
    pids = {p for p, _ in writer.threads} | set(extra_processes)
    summary.processes = len(pids)
    summary.threads = len(writer.threads | set(extra_threads))
    summary.lttng_threads = set(writer.threads)
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
