"""Every name and number a memq trace is written with (docs/TRACE_FORMAT.md).

Writers take track names, categories, argument keys and ids from here; tests check that the SQL
package and the UI side read nothing else.
"""
from __future__ import annotations

import numpy as np

from ctf2perfetto.events import EventKind, MemKind

# -- packet sequences (trusted_packet_sequence_id) -------------------------------------------------
SEQ_MEMQ = 1  # the converter's events (interned names, state cleared once)
SEQ_CLOCK = 2  # packet 0, the clock snapshot
# Track descriptors on a sequence of their own: trace_processor makes the last thread descriptor of a
# sequence that sequence's default thread, which would leak into events on non-thread tracks.
SEQ_DESCRIPTORS = 3
SEQ_HEAP_BASE = 16  # heap instants of the k-th thread with heap calls: SEQ_HEAP_BASE + k
SEQ_KINETO = 0x6B696E65  # "kine": the merged PyTorch-profiler events
SEQ_ANNOTATION = 0x6D656D71  # "memq": packets `memq annotate` appends

# -- clocks (builtin clock ids) ----------------------------------------------------------------------
CLOCK_REALTIME = 1  # the trace's primary clock: trace_processor's ts is Unix-epoch ns
CLOCK_MONOTONIC = 3  # LTTng's clock: the converter's packets are stamped with it
CLOCK_BOOTTIME = 6
# The converter's sequences stamp their events on a sequence-scoped incremental clock (ids 64-127 are per
# sequence): a packet's timestamp is the delta from the previous one on its sequence, 1-3 bytes instead of
# a 7-byte MONOTONIC value. Each sequence's start declares it equal to MONOTONIC (both 0 there).
CLOCK_INCREMENTAL = 64

# -- categories --------------------------------------------------------------------------------------
CAT_HEAP = "memq.heap"
CAT_API = "memq.api"
CAT_COPY = "memq.copy"
CAT_SET = "memq.set"
CAT_META = "memq.meta"
CAT_DEVICE = "memq.device"
CAT_BINARY = "memq.binary"
CAT_LOST = "memq.lost"
CAT_COPY_DONE = "memq.copy_done"  # a copy's destination fingerprint at its completion point
CAT_WINDOW = "memq.window"  # a capture window, on its process's `Capture windows` track
CAT_LIVE = "memq.live"  # an allocation live when a capture window opened
CAT_ANALYSIS = "memq.analysis"
CAT_PROCESS = "memq.process"  # who a process is in its job (rank, node, role), one instant per process
CAT_RECORDING = "memq.recording"  # a job's recording: its node and how its clock was aligned
# Categories of the PyTorch profiler (Kineto) that memq reads.
KINETO_CPU_OP = "cpu_op"
KINETO_MEMCPY = "gpu_memcpy"
KINETO_MEMSET = "gpu_memset"
KINETO_KERNEL = "kernel"
KINETO_GPU_CATEGORIES = frozenset({KINETO_KERNEL, KINETO_MEMCPY, KINETO_MEMSET, "gpu_user_annotation"})
# What the analyses count: checked on load, and never clamped or dropped (they go on overlap lanes).
KINETO_MEMORY_WORK = frozenset({KINETO_MEMCPY, KINETO_MEMSET})
KINETO_RUNTIME_CATEGORIES = frozenset({"cuda_runtime", "cuda_driver"})

# -- event names ---------------------------------------------------------------------------------------
EVENT_TRACE_INFO = "memq trace info"
EVENT_COPY_DONE = "copy done"
# memq.lost slice names: a LOST row's aux2 (events.py: 0 events, 1 packets), then the losses the files
# show (TraceInfo.losses, ctf2perfetto.ctf.preflight): packets index/ lists that are gone, packets --salvage
# cut away.
LOSS_EVENTS, LOSS_PACKETS, LOSS_MISSING, LOSS_DROPPED = 0, 1, 2, 3
LOSS_NAMES = {LOSS_EVENTS: "lost events", LOSS_PACKETS: "lost packets", LOSS_MISSING: "missing packets",
              LOSS_DROPPED: "dropped packets"}
EVENT_MEMSET = "memset"
EVENT_LIVE = "live"  # a memq.live marker whose allocating function is unknown (else it is named after it)
# A capture window's open and close causes (events.WindowCause, lower case); a window the trace never
# opened or never closed gets WINDOW_UNKNOWN / WINDOW_TRACE_END.
WINDOW_UNKNOWN = "unknown"
WINDOW_EXIT = "exit"
WINDOW_TRACE_END = "trace_end"
EVENT_HOST_SMALL = "host_small"  # memq.heap: one thread's totals of blocks below the recording's threshold
# memq.heap instant names: LTTng's libc events are named by their kind; memq's host_alloc / host_free by the
# function that made the call (`api`, one of HEAP_FUNCTIONS; another api gets the kind's generic name).
HEAP_EVENT_NAMES = {EventKind.MALLOC: "malloc", EventKind.CALLOC: "calloc", EventKind.REALLOC: "realloc",
                    EventKind.MEMALIGN: "memalign", EventKind.POSIX_MEMALIGN: "posix_memalign",
                    EventKind.FREE: "free", EventKind.HOST_ALLOC: "malloc", EventKind.HOST_FREE: "free",
                    EventKind.HOST_SMALL: EVENT_HOST_SMALL}
HEAP_FUNCTIONS = ("malloc", "calloc", "realloc", "memalign", "posix_memalign", "aligned_alloc", "valloc", "pvalloc",
                  "free")
HEAP_NAMES = tuple(dict.fromkeys([*HEAP_EVENT_NAMES.values(), *HEAP_FUNCTIONS]))  # every memq.heap name
COPY_DIRECTIONS = {0: "HtoH", 1: "HtoD", 2: "DtoH", 3: "DtoD", 1024: "DtoD"}  # copy_kind -> direction
DIRECTIONS = ("HtoD", "DtoH", "DtoD", "HtoH")
# hipMemcpyKind / cudaMemcpyKind value -> name after the runtime prefix (`copy_kind_name`).
COPY_KIND_NAMES = {0: "MemcpyHostToHost", 1: "MemcpyHostToDevice", 2: "MemcpyDeviceToHost",
                   3: "MemcpyDeviceToDevice", 4: "MemcpyDefault", 1024: "MemcpyDeviceToDeviceNoCU"}
MEM_NAMES = {MemKind.UNKNOWN: "untracked", MemKind.HOST: "host", MemKind.PINNED: "pinned",
             MemKind.REGISTERED: "registered", MemKind.DEVICE: "device", MemKind.MANAGED: "managed"}
GPU_OPS = {EventKind.GPU_ALLOC: "alloc", EventKind.GPU_FREE: "free", EventKind.GPU_REGISTER: "register",
           EventKind.GPU_UNREGISTER: "unregister", EventKind.GPU_COPY: "copy", EventKind.GPU_SET: "set",
           EventKind.GPU_PREFETCH: "prefetch", EventKind.GPU_ADVISE: "advise", EventKind.GPU_SYNC: "sync",
           EventKind.GPU_SET_DEVICE: "set_device"}
CONTENT_MODES = {0: "off", 1: "sampled", 2: "full"}  # memq:copy content_mode (docs/EVENTS.md)
# A copy's `content` bits: which fingerprint arguments it carries (8: the after-fingerprint comes later,
# in a memq.copy_done instant).
CONTENT_SRC, CONTENT_DST_BEFORE, CONTENT_DST_AFTER, CONTENT_DEFERRED = 1, 2, 4, 8
SOURCE_LTTNG = "lttng"
SOURCE_KINETO = "kineto"  # a JSON trace converted alone (memq's importer)

# -- tracks ------------------------------------------------------------------------------------------------
TRACK_MEMQ = "memq"  # global: trace info, devices, losses
TRACK_LIBRARIES = "Libraries"  # child of `memq`: one instant per loaded binary
TRACK_HEAP = "heap"  # child of a thread track: that thread's heap calls
TRACK_WINDOWS = "Capture windows"  # child of a process track: that process's capture windows
KINETO_RUNTIME_TRACK = "kineto runtime"  # child of a thread track: Kineto's runtime calls
# Per-process live-bytes counters, by memory kind.
COUNTER_HOST = "Host heap live bytes"
COUNTER_PINNED = "Pinned live bytes"
COUNTER_REGISTERED = "Registered live bytes"
COUNTER_MANAGED = "Managed live bytes"
PROCESS_COUNTERS = {"host": COUNTER_HOST, "pinned": COUNTER_PINNED, "registered": COUNTER_REGISTERED,
                    "managed": COUNTER_MANAGED}
DEVICE_COUNTER_SUFFIX = " device live bytes"
# `memq annotate`'s tracks, children of ANALYSIS_GROUP.
ANALYSIS_GROUP = "memq analyses"
DUPLICATED_TRACK = "Duplicated bytes"
REDUNDANT_TRACK = "Redundant copies"
STAGED_TRACK = "Staged copies"
LEAKS_TRACK = "Leaked allocations"
LEAKED_BYTES_TRACK = "Leaked bytes"
UPPER_BOUND_NOTE = "upper bound: writes by CPU code and GPU kernels are not traced"


# The job: launcher variables, roles, process titles (traceformat/job.py, importable without numpy).
from ctf2perfetto.traceformat.job import (JOB_ID_VARS, LOCAL_RANK_VARS, RANK_VARS, ROLE_LAUNCHER,  # noqa: E402,F401
                                          ROLE_PROCESS, ROLE_RANK, ROLE_WORKER, WORLD_SIZE_VARS, process_title)


def gpu_track_title(device: int, bus_ids: list[str], nodes: list[str] = ()) -> str:
    """The GPU track's name: `GPU 0 (0000:17:00.0)`; several bus ids when processes of the trace reached
    different GPUs under the same device number; `GPU 0` when no runtime said. In a trace of several nodes,
    the node(s) of the processes that used it too: `GPU 2 (0000:17:00.0, node b07)`."""
    ids = sorted({b for b in bus_ids if b})
    where = sorted({n for n in nodes if n})
    said = ", ".join(ids) + (", " if ids and where else "") + (f"node {', '.join(where)}" if where else "")
    return gpu_track_name(device) + (f" ({said})" if said else "")


def gpu_track_name(device: int) -> str:
    """The `GPU <device>` track (parent of the stream tracks and the device counter); also the name of
    the device's memq.device instant."""
    return f"GPU {device}"


def window_name(index: int) -> str:
    """The memq.window slice of a process's window `index` (0, 1, ... in that process)."""
    return f"window {index}"


def device_counter_name(device: int) -> str:
    return gpu_track_name(device) + DEVICE_COUNTER_SUFFIX


def stream_track_name(runtime: str, stream: int) -> str:
    return f"{runtime} stream 0x{stream:x}"


def kineto_stream_track_name(label: str) -> str:
    return f"kineto {label}"


def kineto_global_track_name(pid: object, tid: object) -> str:
    return f"Kineto {pid} {tid}".strip()


def duplicated_track_name(direction: str = "") -> str:
    """`Duplicated bytes` (all mirrors) or `Duplicated bytes <direction>`."""
    return DUPLICATED_TRACK + (f" {direction}" if direction else "")


# -- flows -----------------------------------------------------------------------------------------------------
# Flow ids are global to the trace: a tag keeps each kind apart. The converter's own flows (one per
# allocation, one per copy endpoint: about one per event) are small numbers with the kind in the low
# FLOW_KIND_BITS bits, written as varints (TrackEvent's `flow_ids_old` / `terminating_flow_ids_old`:
# 3-5 bytes against fixed64's 9); flows tagged in the high bits (>= FLOW_VARINT_LIMIT) stay fixed64.
FLOW_KIND_BITS = 2
FLOW_ALLOC = 1  # (alloc_id << FLOW_KIND_BITS) | FLOW_ALLOC: allocation -> its free
FLOW_COPY = 2  # (n << FLOW_KIND_BITS) | FLOW_COPY: allocation -> a copy or memset touching it
FLOW_VARINT_LIMIT = 1 << 56  # ids below: varint fields; a packet's flow ids are all on one side of it


def flow_ids(kind: int, numbers: np.ndarray) -> np.ndarray:
    """Flow ids of kind FLOW_ALLOC or FLOW_COPY for numbers (> 0); 0 (no flow) where a number is 0."""
    numbers = np.asarray(numbers).astype(np.uint64)
    return np.where(numbers > 0, (numbers << np.uint64(FLOW_KIND_BITS)) | np.uint64(kind), 0).astype(np.uint64)


FLOW_VERDICT = 3 << 56  # | call_id: copy -> the redundant-copy slice `memq annotate` adds for it
FLOW_KINETO = 1 << 62  # + n: Kineto's own flows (runtime call -> GPU work, forward -> backward)

# -- arguments ---------------------------------------------------------------------------------------------------
BYTES, NS = "B", "ns"
# Every debug-annotation key memq writes (trace_processor: `debug.<key>`) -> its unit (None: a count, an
# id, an address or a name). Size and duration keys get a formatted twin `<key>_fmt` (`4.0 MiB`,
# `1.25 ms`) on the slices people click, and `copy_kind` its name in `copy_kind_name`.
ARGS: dict[str, str | None] = {
    # heap instants and API slices
    "ptr": None, "size": BYTES, "in_ptr": None, "nmemb": None, "alignment": BYTES, "result": None,
    "alloc_id": None, "freed_alloc_id": None, "unmatched": None, "replaced_alloc_id": None, "ip": None,
    "requested": BYTES, "alloc_count": None, "alloc_bytes": BYTES, "free_count": None, "free_bytes": BYTES,
    "runtime": None, "op": None, "device": None, "stream": None, "call_id": None, "mem_kind": None,
    "flags": None, "width": BYTES, "height": None, "dst": None, "src": None, "bytes": BYTES,
    "copy_kind": None, "copy_kind_name": None, "dpitch": BYTES, "spitch": BYTES, "depth": None,
    "dslice": BYTES, "sslice": BYTES, "src_device": None, "value": None, "dst_device": None, "advice": None,
    "new_device": None,
    # copy and memset slices
    "api": None, "pid": None, "tid": None, "dst_alloc_id": None, "src_alloc_id": None, "dst_mem": None,
    "src_mem": None, "direction": None,
    # content fingerprints (copies, memq.copy_done)
    "seq": None, "content": None, "content_mode": None, "src_hash": None, "dst_hash_before": None,
    "dst_hash_after": None,
    # capture windows: memq.live markers, memq.window slices
    "window": None, "index": None, "open_cause": None, "close_cause": None, "open_api": None, "close_api": None,
    "live_allocations": None, "live_bytes": BYTES,
    # memq track: trace info, devices, binaries, losses
    "source": None, "converter_version": None, "hostname": None, "lost_events": None, "lost_packets": None,
    "unmatched_frees": None, "skipped_events": None, "events": None, "events_read": None,
    "recorded_events": None, "missing_events": None, "missing_packets": None, "missing_streams": None,
    "dropped_packets": None, "dropped_bytes": BYTES, "host_source": None,
    "host_min_size": BYTES, "windows": None, "live_at_start": None, "name": None, "integrated": None,
    "unified_memory": None, "baddr": None, "memsz": BYTES, "path": None, "build_id": None, "count": None,
    "gpu_uuid": None, "pci_bus_id": None,
    # the job: memq.process (one per process) and memq.recording (one per recording of a job)
    "real_pid": None, "ppid": None, "node": None, "rank": None, "local_rank": None, "world_size": None,
    "job_id": None, "role": None, "owner_rank": None, "run_dur": None, "launcher_env": None,
    "shift_ns": None, "uncertainty_ns": None, "readings": None,
    # memq annotate
    "class": None, "reason": None, "evidence": None, "redundant_bytes": BYTES, "content_bytes": BYTES,
    "redundant_dur": NS, "no_op_bytes": BYTES, "repeat_bytes": BYTES,
    "round_trip_bytes": BYTES, "managed_bytes": BYTES, "unified_bytes": BYTES, "allocations": None,
    "first_ts": None, "kinds": None, "largest": None, "allocated_ts": None,
}
FMT_SUFFIX = "_fmt"


class _Keys:
    """`A.size` is "size" (`A["class"]` for a keyword): argument keys by name, so a misspelt key fails where it
    is written."""

    def __getattr__(self, key: str) -> str:
        if key in ARGS:
            return key
        raise AttributeError(f"{key!r} is not a memq argument key (traceformat.names.ARGS)")

    __getitem__ = __getattr__


A = _Keys()


def fmt_key(key: str) -> str:
    """Key of the formatted twin of a size or duration argument."""
    if ARGS[key] is None:
        raise KeyError(f"{key!r} has no unit: no formatted twin")
    return key + FMT_SUFFIX


_BYTE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")
_CODE_SHIFT = 56


def bytes_codes(values) -> np.ndarray:
    """One int64 per byte count, equal for counts that read the same (`format_bytes` of the code's text):
    the unit (the largest binary one that keeps the number >= 1) and the digits shown. Vectorized, so a
    column of sizes is formatted once per distinct text."""
    scaled = np.abs(np.asarray(values, dtype=np.float64))
    unit = np.zeros(len(scaled), np.int64)
    for _ in _BYTE_UNITS[1:]:
        up = scaled >= 1024
        scaled = np.where(up, scaled / 1024, scaled)
        unit += up
    digits = np.rint(np.where(unit == 0, scaled, scaled * 10)).astype(np.int64)
    return (unit << _CODE_SHIFT) | digits


def bytes_text(code: int) -> str:
    """The text of a `bytes_codes` code: `512 B`, `4.0 KiB`, `1.5 GiB`."""
    unit, digits = code >> _CODE_SHIFT, code & ((1 << _CODE_SHIFT) - 1)
    return f"{digits} B" if unit == 0 else f"{digits / 10:.1f} {_BYTE_UNITS[unit]}"


def format_bytes(n: float) -> str:
    """A byte count in the largest binary unit that keeps it >= 1: `512 B`, `4.0 KiB`, `1.5 GiB`."""
    return bytes_text(int(bytes_codes([n])[0]))


def format_ns(ns: float) -> str:
    """A duration: `850 ns`, `12.4 µs`, `1.25 ms`, `3.00 s`."""
    value = float(ns)
    for scale, unit, digits in ((1e9, "s", 2), (1e6, "ms", 2), (1e3, "µs", 1)):
        if abs(value) >= scale:
            return f"{value / scale:.{digits}f} {unit}"
    return f"{value:.0f} ns"


def format_value(key: str, value: float) -> str:
    """The formatted twin's text of argument `key`."""
    return format_bytes(value) if ARGS[key] == BYTES else format_ns(value)


def copy_kind_name(runtime: str, copy_kind: int) -> str:
    """`hipMemcpyHostToDevice`, `cudaMemcpyDefault`, ...; the number for a kind the runtimes do not define."""
    name = COPY_KIND_NAMES.get(copy_kind)
    return f"{runtime}{name}" if name is not None and runtime in ("hip", "cuda") else str(copy_kind)
