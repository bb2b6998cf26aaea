"""The event log: what every source of memory events is decoded into.

This is the contract between the decoder (ctf2perfetto.ctf.decode, LTTng CTF) and the
model (ctf2perfetto.convert.model). Tests and other sources (generated logs, Kineto) build
the same columns, so everything downstream of this module does not care where an
event came from.

An `EventBatch` is a struct of numpy arrays, one row per event, in time order
(by `ts`, ties broken by arrival order). A trace arrives as a sequence of batches
so memory grows with the batch size, not with the trace.

Row semantics per `kind` (unused columns are 0):

| kind            | ptr                  | src            | size              | aux                 | aux2   |
|-----------------|----------------------|----------------|-------------------|---------------------|--------|
| MALLOC          | returned pointer     |                | size              |                     |        |
| CALLOC          | returned pointer     |                | nmemb*size        | nmemb               |        |
| REALLOC         | returned pointer     | in_ptr         | size              |                     |        |
| MEMALIGN        | returned pointer     |                | size              | alignment           |        |
| POSIX_MEMALIGN  | *memptr (0 on error) |                | size              | alignment           |        |
| FREE            | freed pointer        |                | (0: libc)         |                     |        |
| HOST_ALLOC      | returned pointer     |                | usable size       |                     | requested size |
| HOST_FREE       | freed pointer        |                | usable size       |                     |        |
| HOST_SMALL      |                      |                | bytes allocated   | blocks allocated    | blocks freed |
| GPU_ALLOC       | returned pointer     |                | bytes (pitch*h)   | width (pitched)     | height |
| GPU_FREE        | freed pointer        |                | bytes (wrapper)   |                     |        |
| GPU_REGISTER    | host pointer         |                | bytes             |                     |        |
| GPU_UNREGISTER  | host pointer         |                | bytes (wrapper)   |                     |        |
| GPU_COPY        | dst                  | src            | bytes (w*h for 2D)| width (2D) / src device (peer) | height (2D) |
| GPU_SET         | dst                  |                | bytes             | value               |        |
| GPU_PREFETCH    | ptr                  |                | bytes             | destination device  |        |
| GPU_ADVISE      | ptr                  |                | bytes             | advice              |        |
| GPU_SYNC        |                      |                |                   |                     |        |
| GPU_SET_DEVICE  |                      |                |                   | new device          |        |
| GPU_COPY_DONE   |                      |                |                   |                     |        |
| LOST            |                      |                | range length (ns) | count               | 0 events / 1 packets |
| LIVE            | allocation's start   |                | bytes             |                     |        |
| WINDOW          |                      |                |                   | 1 opens / 0 closes  | WindowCause |

LIVE and WINDOW rows come from capture windows (`memq record --delay/--duration/
--capture-range`): a WINDOW row opens or closes one process's window (`flags` = its
index in the process, `api` = the profiler call, "" for a timer or the exit); a LIVE
row is an allocation live when the window opened (`mem`, `device`, `api` = the
function that allocated it, `begin` = `ts` = the window's start).

MALLOC ... FREE are LTTng's libc wrapper events (`memq record --host-source lttng`,
older traces): every call, sizes as requested. HOST_ALLOC / HOST_FREE / HOST_SMALL are
memq's heap wrappers (docs/EVENTS.md memq:host_*): blocks at or above the recording's
threshold, sizes as the allocator's usable size on both sides, `api` naming the
function (malloc ... pvalloc; a realloc is a HOST_FREE and a HOST_ALLOC with api
realloc); HOST_SMALL is one thread's blocks below the threshold since its previous
HOST_SMALL, with `flags` = bytes freed (their usable sizes).
A LOST row's `ts` (= `begin`) is the start of the range where items were lost and
its `stream` indexes TraceInfo.stream_files.
For 2D copies `dpitch` / `spitch` hold the pitches (0 otherwise). 3D copies are
`depth` slices of `aux2` rows of `aux` bytes: rows `dpitch`/`spitch` apart, slices
`dslice`/`sslice` apart (`depth` 0 for every other row).
Content fingerprints (docs/EVENTS.md "Content fingerprints"): a GPU_COPY row carries
`seq` (per-process copy number), `content` (bits: 1 `src_hash`, 2 `dst_hash_before`, 4
`dst_hash_after` hold a fingerprint; 8 the after-fingerprint comes in a later
GPU_COPY_DONE row with the same pid and `seq`), `content_mode` (0 off, 1 sampled,
2 full) and the three hashes. A GPU_COPY_DONE row is an instant (begin = ts): `api` is
the completion call that covered the copy, `seq`, `stream`, `device` and
`dst_hash_after` the copy's destination fingerprint then.
`mem` is the memory kind (MemKind) of what an allocation, free or register
call concerns; for copies `copy_kind` is the hipMemcpyKind/cudaMemcpyKind value
as passed (0 HtoH, 1 HtoD, 2 DtoH, 3 DtoD, 4 Default, 1024 DtoD no-CU) and -1 for
everything else. `begin` is the start of the call (== ts for libc instants);
`ts` is its end, where LTTng recorded the event. Times are nanoseconds on the
trace's monotonic clock (CTF clock value in ns, without the clock class offset).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum

import numpy as np


class EventKind(IntEnum):
    """What one row of an EventBatch is."""

    MALLOC = 1
    CALLOC = 2
    REALLOC = 3
    MEMALIGN = 4
    POSIX_MEMALIGN = 5
    FREE = 6
    HOST_ALLOC = 7
    HOST_FREE = 8
    HOST_SMALL = 9
    GPU_ALLOC = 10
    GPU_FREE = 11
    GPU_REGISTER = 12
    GPU_UNREGISTER = 13
    GPU_COPY = 14
    GPU_SET = 15
    GPU_PREFETCH = 16
    GPU_ADVISE = 17
    GPU_SYNC = 18
    GPU_SET_DEVICE = 19
    GPU_COPY_DONE = 20
    LOST = 30
    LIVE = 40  # an allocation live when a capture window opened (memq:live)
    WINDOW = 41  # a capture window opens or closes (memq:window)


class WindowCause(IntEnum):
    """Why a capture window opened or closed (memq:window `cause`)."""

    UNKNOWN = 0
    DELAY = 1  # --delay elapsed (or the process started inside the window)
    DURATION = 2  # --duration elapsed
    PROFILER_API = 3  # cuda/cu/hipProfilerStart or Stop
    EXIT = 4  # the process exited with its window open
    RANGE = 5  # the converted range's start or end (`ctf2perfetto --from/--to`, ranges.py; never in a recording)


class MemKind(IntEnum):
    """Kind of memory an allocation is (docs/DEFINITIONS.md, "Allocations")."""

    UNKNOWN = 0
    HOST = 1  # libc heap
    PINNED = 2  # hipHostMalloc, cudaHostAlloc, cudaMallocHost, ...
    REGISTERED = 3  # hipHostRegister / cudaHostRegister
    DEVICE = 4  # hipMalloc, cudaMalloc, async and pitched variants
    MANAGED = 5  # hipMallocManaged / cudaMallocManaged


# Heap rows that allocate, that free, and every heap row (all below GPU_ALLOC).
HEAP_KINDS = (EventKind.MALLOC, EventKind.CALLOC, EventKind.REALLOC, EventKind.MEMALIGN, EventKind.POSIX_MEMALIGN,
              EventKind.HOST_ALLOC)
HEAP_FREE_KINDS = (EventKind.FREE, EventKind.HOST_FREE)
HEAP_ROW_KINDS = (*HEAP_KINDS, *HEAP_FREE_KINDS, EventKind.HOST_SMALL)

# Column name -> dtype. Order is the canonical column order.
COLUMNS: dict[str, np.dtype] = {
    "ts": np.dtype(np.int64),
    "begin": np.dtype(np.int64),
    "pid": np.dtype(np.int64),
    "tid": np.dtype(np.int64),
    "ip": np.dtype(np.uint64),
    "kind": np.dtype(np.uint8),
    "api": np.dtype(np.uint16),  # index into EventBatch.api_names
    "mem": np.dtype(np.uint8),  # MemKind
    "copy_kind": np.dtype(np.int32),
    "device": np.dtype(np.int32),
    "result": np.dtype(np.int64),
    "ptr": np.dtype(np.uint64),
    "src": np.dtype(np.uint64),
    "size": np.dtype(np.uint64),
    "stream": np.dtype(np.uint64),
    "flags": np.dtype(np.uint64),
    "aux": np.dtype(np.uint64),
    "aux2": np.dtype(np.uint64),
    "dpitch": np.dtype(np.uint64),
    "spitch": np.dtype(np.uint64),
    # appended for 3D copies, 0 otherwise
    "depth": np.dtype(np.uint64),
    "dslice": np.dtype(np.uint64),
    "sslice": np.dtype(np.uint64),
    # appended for content fingerprints of copies, 0 otherwise (see the module docstring)
    "seq": np.dtype(np.uint64),
    "content": np.dtype(np.uint8),
    "content_mode": np.dtype(np.uint8),
    "src_hash": np.dtype(np.uint64),
    "dst_hash_before": np.dtype(np.uint64),
    "dst_hash_after": np.dtype(np.uint64),
}


@dataclass
class EventBatch:
    """A run of events in time order, as columns (see the module docstring)."""

    columns: dict[str, np.ndarray]
    # api index -> function name ("malloc", "hipMemcpyAsync", ...); shared by all
    # batches of one decode, and only ever appended to.
    api_names: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.columns["ts"])

    def __getitem__(self, name: str) -> np.ndarray:
        return self.columns[name]

    def take(self, index) -> "EventBatch":
        """The rows at `index` (a slice, indices or a mask), with the same function names."""
        return EventBatch({k: v[index] for k, v in self.columns.items()}, self.api_names)

    @classmethod
    def concat(cls, parts: list["EventBatch"], api_names: list[str]) -> "EventBatch":
        """The rows of `parts` one after the other (their `api` columns index `api_names`)."""
        parts = [p for p in parts if len(p)]
        if not parts:
            return cls.empty(0, api_names)
        return cls({k: np.concatenate([p[k] for p in parts]) for k in COLUMNS}, api_names)

    @classmethod
    def empty(cls, n: int = 0, api_names: list[str] | None = None) -> "EventBatch":
        """A batch of n zeroed rows (copy_kind -1), to be filled by a producer."""
        cols = {name: np.zeros(n, dtype) for name, dtype in COLUMNS.items()}
        cols["copy_kind"][:] = -1
        return cls(cols, api_names if api_names is not None else [])

    @classmethod
    def from_rows(cls, rows: list[dict], api_names: list[str] | None = None) -> "EventBatch":
        """Build a batch from dicts (tests, small generated logs). `api` may be a name."""
        names = api_names if api_names is not None else []
        batch = cls.empty(len(rows), names)
        for i, row in enumerate(rows):
            row = {"begin": row["ts"], **row}  # libc-style instant unless a begin is given
            for key, value in row.items():
                if key == "api" and isinstance(value, str):
                    if value not in names:
                        names.append(value)
                    value = names.index(value)
                batch.columns[key][i] = value
        return batch


@dataclass
class TraceInfo:
    """What a source knows about the trace besides its events.

    Filled by the decoder while it reads (process names arrive in statedump
    events), so consumers read it after the last batch.
    """

    # CLOCK_REALTIME - CLOCK_MONOTONIC in ns, from the CTF clock class offset
    # (per trace; the first one when several traces are read together).
    clock_offset_ns: int = 0
    # Back-to-back clock readings taken by the recorder / preload library:
    # dicts with keys realtime, monotonic, boottime (ns) and where ("start"/"end").
    clock_readings: list[dict] = field(default_factory=list)
    hostname: str = ""
    # The profiler whose file these events were imported from (`rpd`, `rocpd`, `thapi`: memq.meta's source);
    # "" for an LTTng recording.
    source: str = ""
    processes: dict[int, str] = field(default_factory=dict)  # pid -> process name
    threads: dict[tuple[int, int], str] = field(default_factory=dict)  # (pid, tid) -> name
    # Devices the preload library could query: dicts with pid, device, name,
    # integrated (bool), unified_memory (bool), runtime ("hip"/"cuda"), uuid, pci_bus_id ("" unknown).
    devices: list[dict] = field(default_factory=list)
    # Who each process is in its job (memq:identity; ctf2perfetto.convert.identity decides the roles):
    # dicts with pid, ppid, host, env ({NAME: value} of the launcher variables that were set).
    identities: list[dict] = field(default_factory=list)
    # A job of several recordings read together (ctf2perfetto.convert.job): one dict per recording with
    # path, node, offset_ns, shift_ns, uncertainty_ns, pid_base; empty for one recording.
    recordings: list[dict] = field(default_factory=list)
    # Loaded binaries for call-site mapping: dicts with pid, baddr, memsz, path, build_id.
    binaries: list[dict] = field(default_factory=list)
    # Contents of memq-record.json when the trace came from `memq record`.
    record: dict | None = None
    lost_events: int = 0  # DiscardedEvents counts, summed
    lost_packets: int = 0  # DiscardedPackets counts, summed
    # What the decoder read but could not use, by reason (e.g. "unknown event class").
    skipped: dict[str, int] = field(default_factory=dict)
    # Problems worth a warning line (salvaged files, dropped bytes, ...).
    warnings: list[str] = field(default_factory=list)
    # CTF stream files in the order the decoder met them; a LOST row's `stream` is an
    # index into this list (the file that lost the events / packets).
    stream_files: list[str] = field(default_factory=list)
    # Loss the trace files show beyond LTTng's own counters (ctf2perfetto.ctf.preflight, docs/TRACE_FORMAT.md
    # "Loss"): one dict per file and kind with what, file, packets, bytes, begin/end (ns on the rows'
    # clock; None when unknown).
    losses: list[dict] = field(default_factory=list)
    missing_packets: int = 0  # packets index/ lists that the stream files no longer hold
    missing_streams: int = 0  # stream files index/ lists (or dangling links to them) that are gone
    missing_events: int = 0  # memq-record.json's event count minus the events the files hold
    dropped_packets: int = 0  # packets --salvage cut away (damaged ones and what followed them)
    dropped_bytes: int = 0
    events_read: int = 0  # every event babeltrace2 delivered (rows or not)
    recorded_events: int | None = None  # memq-record.json's count, when the trace has one
