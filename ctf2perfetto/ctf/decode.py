"""LTTng CTF traces -> EventBatch columns (see ctf2perfetto.events).

The work happens in C (native/decode.c over libbabeltrace2): one `src.ctf.fs`
per trace found under the input, muxed in time order, each event written into
numpy columns by a handler resolved once per event class. This module finds the
traces, drives the batches, turns the decoder's side records (process names,
binaries, devices, clock readings, API names, lost and skipped counts) into a
TraceInfo, and turns babeltrace2 errors into one-line MemqErrors.

Row conventions beyond events.py: a LOST row has begin = ts = start of the range
where items were lost, `size` = length of that range (ns) and `stream` = index
into TraceInfo.stream_files (the CTF stream file that lost them). Rows of a
second trace (per-pid buffers) are shifted by the difference of its clock class
offset to the first trace's, so that all rows share one clock and stay sorted.
"""
from __future__ import annotations

import ctypes
import json
import mmap
import os
import queue
import re
import stat
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from ctf2perfetto.errors import MemqError, UsageError, error_text
from ctf2perfetto.events import COLUMNS, EventBatch, EventKind, TraceInfo
from ctf2perfetto.ctf.guard import MemoryBound, bound_seconds, guarded, join_thread
from ctf2perfetto.paths import native_library
from ctf2perfetto.ctf.preflight import SALVAGE_HINT, Preflight
from ctf2perfetto.ctf.salvage import SalvagedCopy, checked_streams, order_error_ts, out_of_order

RECORD_FILE = "memq-record.json"
SALVAGE_STEP_ROWS = 1024  # salvage's reads note where each stream stands after this many rows
PROGRESS_BYTES = 1 << 20
JOIN_SECONDS = 10.0  # a worker asked to stop finishes its batch well within this
STALL_SECONDS = 120.0  # no batch from the library for this long: it loops ($MEMQ_GUARD_SECONDS overrides)
READ_FAILURE = "cannot read the trace"  # decode.c take_error() text while running the graph
Progress = Callable[[int, int], None]


class _Columns(ctypes.Structure):
    """decode.c `memq_columns`: one data pointer per column, in COLUMNS order."""

    _fields_ = [(name, ctypes.c_void_p) for name in COLUMNS]


_lib: ctypes.CDLL | None = None


def _native() -> ctypes.CDLL:
    global _lib
    if _lib is None:
        lib = ctypes.CDLL(str(native_library("libmemqdecode.so")))
        lib.memq_open.restype = ctypes.c_void_p
        lib.memq_open.argtypes = [ctypes.POINTER(ctypes.c_char_p), ctypes.c_int, ctypes.c_int]
        lib.memq_error.restype = ctypes.c_char_p
        lib.memq_error.argtypes = [ctypes.c_void_p]
        lib.memq_next.restype = ctypes.c_int64
        lib.memq_next.argtypes = [ctypes.c_void_p, ctypes.POINTER(_Columns), ctypes.c_int64]
        lib.memq_side.restype = ctypes.c_void_p
        lib.memq_side.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t)]
        lib.memq_failed_stream.restype = ctypes.c_char_p
        lib.memq_failed_stream.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint64),
                                           ctypes.POINTER(ctypes.c_uint64)]
        lib.memq_stream_progress.restype = ctypes.c_char_p
        lib.memq_stream_progress.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.POINTER(ctypes.c_uint64),
                                             ctypes.POINTER(ctypes.c_uint64)]
        lib.memq_events_seen.restype = ctypes.c_uint64
        lib.memq_events_seen.argtypes = [ctypes.c_void_p]
        lib.memq_progress.restype = None
        lib.memq_progress.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int64),
                                      ctypes.POINTER(ctypes.c_int64)]
        lib.memq_reference_offset_ns.restype = ctypes.c_int64
        lib.memq_reference_offset_ns.argtypes = [ctypes.c_void_p]
        lib.memq_close.restype = None
        lib.memq_close.argtypes = [ctypes.c_void_p]
        lib.memq_crash_guard.restype = None
        lib.memq_crash_guard.argtypes = [ctypes.c_char_p]
        _lib = lib
    return _lib


def find_traces(path: str | Path) -> list[Path]:
    """CTF trace directories (those holding a `metadata` file) under path, archives/ included."""
    root = Path(path)
    if not root.exists():
        raise UsageError(f"{root}: no such directory")
    if not root.is_dir():
        raise UsageError(f"{root}: not a directory (expected an LTTng trace directory)")
    found = []

    def unreadable(exc: OSError) -> None:
        raise MemqError(f"{exc.filename}: cannot read the trace directory: {exc.strerror or exc}")

    for directory, _dirs, files in os.walk(root, onerror=unreadable, followlinks=True):
        if "metadata" in files and Path(directory, "metadata").is_file():
            found.append(Path(directory))
    found.sort()
    if not found:
        raise MemqError(f"{root}: no CTF trace under it (no `metadata` file)")
    return found


class _Native:
    """One open decoder graph (native handle + the ctypes calls on it)."""

    def __init__(self, traces: list[Path], want_range: bool) -> None:
        self.lib = _native()
        dirs = (ctypes.c_char_p * len(traces))(*[str(t).encode() for t in traces])
        self.handle = self.lib.memq_open(dirs, len(traces), int(want_range))
        if not self.handle:
            raise MemqError("out of memory while opening the trace")
        self.traces = traces

    def error(self) -> str | None:
        err = self.lib.memq_error(self.handle)
        return err.decode(errors="replace") if err is not None else None

    def failed_stream(self) -> tuple[str, int, int] | None:
        begun, ended = ctypes.c_uint64(), ctypes.c_uint64()
        name = self.lib.memq_failed_stream(self.handle, ctypes.byref(begun), ctypes.byref(ended))
        return None if name is None else (name.decode(errors="replace"), begun.value, ended.value)

    def stream_progress(self) -> list[list]:
        """[stream file, packets begun, packets ended] of every stream met so far."""
        out, begun, ended = [], ctypes.c_uint64(), ctypes.c_uint64()
        while (name := self.lib.memq_stream_progress(self.handle, len(out), ctypes.byref(begun),
                                                     ctypes.byref(ended))) is not None:
            out.append([name.decode(errors="replace"), begun.value, ended.value])
        return out

    def next(self, columns: dict[str, np.ndarray], capacity: int) -> int:
        ptrs = _Columns(*[columns[name].ctypes.data for name in COLUMNS])
        return self.lib.memq_next(self.handle, ctypes.byref(ptrs), capacity)

    def side(self) -> list[dict]:
        size = ctypes.c_size_t()
        ptr = self.lib.memq_side(self.handle, ctypes.byref(size))
        if not size.value:
            return []
        text = ctypes.string_at(ptr, size.value).decode(errors="replace")
        return [json.loads(line) for line in text.splitlines()]

    def progress(self) -> tuple[int, int]:
        done, total = ctypes.c_int64(), ctypes.c_int64()
        self.lib.memq_progress(self.handle, ctypes.byref(done), ctypes.byref(total))
        return done.value, total.value

    def close(self) -> None:
        if self.handle:
            self.lib.memq_close(self.handle)
            self.handle = None


def error_line(text: str, traces: list[Path], failed: str | None = None, hint: str = SALVAGE_HINT) -> str:
    """One line from a decoder error text (what failed, then babeltrace2's causes, root first);
    `hint` ends the lines about damage that salvage could cut away."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    reading = bool(lines) and lines[0] == READ_FAILURE
    causes = lines[1:] or ["unknown error"]
    root = re.sub(r"\b[\w-]+-addr=0x[0-9a-f]+(, )?", "", causes[0])
    root = re.sub(r"[:,]\s*$", "", re.sub(r"\s+", " ", root)).rstrip(".")
    where = failed
    named = [m.group(1) for line in causes for m in re.finditer(r"[`'\"](/[^`'\"]+)[`'\"]", line)]
    if where is None and named:
        where = named[0]
    if where is None:
        where = str(traces[0]) if len(traces) == 1 else os.path.commonpath([str(t) for t in traces])
    if root.startswith("Failed to index CTF stream file"):
        return f"{where}: stream file is cut mid-packet or corrupt (babeltrace2 cannot index its packets){hint}"
    if root.startswith("Cannot create trace for") and Path(where, "metadata").is_file():
        return f"{Path(where, 'metadata')}: unreadable CTF metadata (babeltrace2 cannot parse it)"
    if reading:
        return f"{where}: corrupt CTF data: {root}{hint}"
    return f"{where}: cannot open the trace: {root}"


def _env_lines(text: str) -> dict[str, str]:
    """memq:identity's `env` ("NAME=value" lines) as a dict."""
    return {name: value for name, sep, value in (line.partition("=") for line in text.splitlines()) if sep and name}


class Decoding:
    """An open decode of every trace under one directory; iterate for EventBatches.

    `info` is complete once iteration has finished. Use as a context manager so the
    babeltrace2 graph (and a salvage copy) are released.
    """

    def __init__(self, path: str | Path, *, salvage: bool = False, batch_size: int = 262144,
                 progress: Progress | None = None) -> None:
        self.path = Path(path)
        self.batch_size = batch_size
        self.progress = progress
        self.info = TraceInfo()
        self.api_names: list[str] = []
        self.salvaged: SalvagedCopy | None = None
        # Absolute: a salvage copy links to the original files, and a relative link would
        # resolve inside the copy.
        traces = [t.absolute() for t in find_traces(self.path)]
        self.info.record = _read_record(self.path)
        if self.info.record:
            self.info.clock_readings.extend(self.info.record.get("clock_readings", []))
        self._ahead: _DecodeAhead | None = None
        # Checks before libbabeltrace2 reads anything (it hangs or aborts on some damage).
        self._preflight = Preflight(traces, salvage)
        traces = self._preflight.traces
        self._hint = "" if salvage else SALVAGE_HINT
        try:
            if salvage:
                self.salvaged = SalvagedCopy(self._preflight.checks, _check_readable)
                traces = self.salvaged.traces
                self.info.warnings.extend(self._preflight.warnings() + self.salvaged.warnings())
            # Opened in a guarded child first: whatever the library does there, this process lives on.
            self._native = self._preflight.open(lambda: _Native(traces, want_range=progress is not None),
                                                lambda native: self._open_problem(native, traces), str(self.path))
        except BaseException:
            self.close()
            raise
        self._traces = traces
        self._binaries: dict[tuple[int, int], dict] = {}
        self._warned_pid: set[str] = set()

    def _open_problem(self, native: _Native, traces: list[Path]) -> str | None:
        """The one-line error of a freshly opened decoder (None: it opened); closes it."""
        try:
            err = native.error()
            if err is None:
                return None
            failed = native.failed_stream()
            return self._display(error_line(err, traces, self._display(failed[0]) if failed else None,
                                            self._hint))
        finally:
            native.close()

    def _order_line(self, err: str, native: _Native) -> str | None:
        """babeltrace2's muxer complaint (a message older than one it returned) in memq's words, naming the
        stream file and packet whose time is off (salvage.out_of_order); None for any other error."""
        ts = order_error_ts(err)
        if ts is None or self.salvaged is not None:
            return None
        streams = checked_streams(self._preflight.checks)
        found = out_of_order(ts, native.stream_progress(), streams)
        if found is None:
            return None
        name, number = found
        packet = streams[name].scan.packets[number]
        return (f"{name}: packet {number} (at offset {packet.offset}): an event or packet time ({ts} ns from the "
                f"Epoch) comes before times already read: corrupt timestamps{self._hint}")

    def _failed_file(self) -> str | None:
        failed = self._native.failed_stream() if getattr(self, "_native", None) else None
        return self._display(failed[0]) if failed else None

    def _display(self, name: str) -> str:
        """A path in the salvage copy shown as the user's original path."""
        return self.salvaged.original(name) if self.salvaged else name

    def reference_offset_ns(self) -> int:
        """The clock offset the rows' times are relative to (the first clock class met): set once the first batch
        has come, and kept (info.clock_offset_ns says it at the end)."""
        native = getattr(self, "_native", None)
        return self.info.clock_offset_ns if native is None else native.lib.memq_reference_offset_ns(native.handle)

    def __enter__(self) -> "Decoding":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if getattr(self, "_ahead", None) is not None:
            if not self._ahead.stop():  # the worker must be out of the decoder before it is closed
                self._native = None  # stuck inside it: leave it (the process is about to end)
            self._ahead = None
        if getattr(self, "_native", None) is not None:
            self._native.close()
            self._native.lib.memq_crash_guard(None)
            self._native = None
        if getattr(self, "_memory", None) is not None:
            self._memory.release()
            self._memory = None
        if self.salvaged is not None:
            self.salvaged.cleanup()

    def __iter__(self) -> Iterator[EventBatch]:
        """Batches in time order. A worker thread decodes the next batch (in C, without
        the GIL) while the consumer works on this one: two cores, one pipeline. The worker
        starts here, not at the first batch asked for, so that it is already decoding while
        the consumer gets ready (e.g. imports its own modules)."""
        native = self._native
        if native is None or self._ahead is not None:
            raise MemqError(f"{self.path}: a decode can be iterated only once")
        # Event data is not checked beforehand: if the library dies on it, one line says so
        # (crash.c), and a bound on memory makes an unbounded allocation fail instead of
        # taking the machine's memory.
        native.lib.memq_crash_guard((error_text(
            f"{self.path}: babeltrace2 crashed reading the trace (corrupt event data memq does not check "
            f"yet){self._hint}") + "\n").encode())
        self._memory = MemoryBound()
        self._ahead = _DecodeAhead(native, self.batch_size)
        return self._batches(native, self._ahead)

    def _batches(self, native: _Native, ahead: "_DecodeAhead") -> Iterator[EventBatch]:
        try:
            while True:
                n, batch, side, (done, total) = ahead.get()
                self._absorb(side)
                if n < 0:
                    err = native.error() or READ_FAILURE
                    raise MemqError(self._order_line(err, native) or
                                    self._display(error_line(err, self._traces, self._failed_file(), self._hint)))
                if self.progress is not None:
                    self.progress(total if n == 0 else done, total)
                if n == 0:
                    break
                batch.api_names = self.api_names
                if n < self.batch_size:
                    batch.columns = {k: v[:n].copy() for k, v in batch.columns.items()}
                self._count_lost(batch)
                yield batch
            events_read = int(native.lib.memq_events_seen(native.handle))
            self.info.clock_offset_ns = native.lib.memq_reference_offset_ns(native.handle)
            self._preflight.account(self.info, events_read, self.salvaged.losses() if self.salvaged else [],
                                    self.info.clock_offset_ns)
            if events_read == 0:
                gone = [f"{loss['file']} ({loss['what']})" for loss in self.info.losses]
                raise MemqError(f"{self.path}: empty trace: no events in "
                                + ", ".join(str(self._display(str(t))) for t in self._traces)
                                + (f"; what held them is missing: {', '.join(gone)}" if gone else ""))
        finally:
            self.close()

    def _count_lost(self, batch: EventBatch) -> None:
        lost = batch["kind"] == EventKind.LOST
        if lost.any():
            packets = batch["aux2"][lost] == 1
            # A DiscardedEvents count is babeltrace2's delta of LTTng's cumulative 64-bit
            # discarded counter between two packets. Under contention that counter can go
            # backwards, and the delta wraps to nearly 2**64: read deltas as signed so the
            # total is the counter's net change whatever the batching, and say so.
            counts = batch["aux"][lost].view(np.int64)
            backwards = counts[~packets] < 0
            if backwards.any():
                self.info.warnings.append(
                    f"LTTng's discarded-event counter went backwards {int(backwards.sum())} time(s) "
                    f"(by {int(-counts[~packets][backwards].sum()):,} events): lost events are its net change")
            self.info.lost_packets += int(counts[packets].sum())
            self.info.lost_events += int(counts[~packets].sum())

    def _absorb(self, records: list[dict]) -> None:
        info = self.info
        for r in records:
            t = r["t"]
            if t == "api":
                assert r["index"] == len(self.api_names)
                self.api_names.append(r["name"])
            elif t == "stream":
                self._stream(r)
            elif t == "process":
                info.processes[r["pid"]] = r["name"]
            elif t == "thread":
                info.threads[(r["pid"], r["tid"])] = r["name"]
            elif t == "binary":
                known = self._binaries.get((r["pid"], r["baddr"]))
                if known is not None and (known["path"], known["memsz"]) == (r["path"], r["memsz"]):
                    continue  # the same object again: memq:lib_load writes a process's whole map twice
                binary = {"pid": r["pid"], "baddr": r["baddr"], "memsz": r["memsz"], "path": r["path"],
                          "build_id": ""}
                self._binaries[(r["pid"], r["baddr"])] = binary
                info.binaries.append(binary)
            elif t == "build_id":
                binary = self._binaries.get((r["pid"], r["baddr"]))
                if binary is not None:
                    binary["build_id"] = r["build_id"]
            elif t == "clock":
                info.clock_readings.append({k: r[k] for k in ("pid", "where", "realtime", "monotonic",
                                                               "boottime")})
            elif t == "device":
                info.devices.append({k: v for k, v in r.items() if k != "t"})
            elif t == "identity":
                info.identities.append({"pid": r["pid"], "ppid": r["ppid"], "host": r["host"],
                                        "env": _env_lines(r["env"])})
            elif t == "skipped":
                info.skipped[r["name"]] = info.skipped.get(r["name"], 0) + r["count"]

    def _stream(self, r: dict) -> None:
        info = self.info
        name = self._display(r["name"])
        info.stream_files.append(name)
        if not info.hostname and r.get("hostname"):
            info.hostname = r["hostname"]
        vpid = r.get("vpid")
        if vpid is not None and r.get("procname"):
            info.processes.setdefault(vpid, r["procname"])
        trace_dir = str(Path(name).parent)
        if not r["has_vpid"] and trace_dir not in self._warned_pid:
            self._warned_pid.add(trace_dir)
            if vpid is not None:
                source = f"taken from the trace environment (vpid {vpid})"
            elif r.get("has_vtid"):
                source = "unknown: each thread (vtid) read as a process of its own (pid = vtid)"
            else:
                source = "unknown, recorded as 0"
            info.warnings.append(f"{trace_dir}: no vpid/vtid context; process id {source}")


class _DecodeAhead:
    """Runs the native decoder one batch ahead of the consumer, in a thread (ctypes calls
    release the GIL). At most two batches wait, so memory stays bounded."""

    def __init__(self, native: _Native, batch_size: int) -> None:
        self.native = native
        self.batch_size = batch_size
        self.queue: queue.Queue = queue.Queue(maxsize=1)
        self.stopping = threading.Event()
        self.stuck = False
        self.thread = threading.Thread(target=self._work, name="memq-decode", daemon=True)
        self.thread.start()

    def _work(self) -> None:
        while not self.stopping.is_set():
            try:
                batch = _uninitialised(self.batch_size, [])
                n = self.native.next(batch.columns, self.batch_size)
                item = (n, batch, self.native.side(), self.native.progress())
            except BaseException as exc:  # handed to the consumer, raised there
                n, item = -1, (None, exc, [], (0, 0))
            while not self.stopping.is_set():
                try:
                    self.queue.put(item, timeout=0.05)
                    break
                except queue.Full:
                    continue
            if n <= 0:
                return

    def get(self) -> tuple[int, EventBatch, list[dict], tuple[int, int]]:
        # A batch takes well under a second; none for the whole bound means the library loops.
        limit = bound_seconds(STALL_SECONDS)
        try:
            item = self.queue.get(timeout=limit)
        except queue.Empty:
            self.stuck = True
            raise MemqError(f"{self.native.traces[0]}: babeltrace2 made no progress reading the trace in "
                            f"{limit:g} s (corrupt data it loops on?); stopped") from None
        if item[0] is None:
            raise item[1]
        return item

    def stop(self) -> bool:
        """Stops the worker (it finishes the batch it is decoding) before the decoder closes;
        False when it did not come back (stuck in the library: the decoder must not be closed).
        True only once the thread is gone for good: the next decode's guarded fork must not
        happen while it still runs its exit destructors (guard.join_thread)."""
        self.stopping.set()
        return join_thread(self.thread, 1.0 if self.stuck else JOIN_SECONDS)


def _uninitialised(n: int, api_names: list[str]) -> EventBatch:
    """A batch of n rows the decoder overwrites completely (no zero-filling pass)."""
    return EventBatch({name: np.empty(n, dtype) for name, dtype in COLUMNS.items()}, api_names)


RECORD_MAX_BYTES = 64 << 20  # memq record writes a few KiB


def _read_record(path: Path) -> dict | None:
    """memq-record.json (None without one). Anything else by that name is refused: the loss accounting
    compares the files against it, and a FIFO or a device would block or never end."""
    record = path / RECORD_FILE
    if not os.path.lexists(record):
        return None
    try:
        fd = os.open(record, os.O_RDONLY | os.O_NONBLOCK)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise MemqError(f"{record}: not a regular file: memq record writes its JSON record here "
                                "(the loss accounting reads it); move it away")
            if st.st_size > RECORD_MAX_BYTES:
                raise MemqError(f"{record}: {st.st_size:,} bytes, not memq record's JSON record (a few KiB)")
            data = os.read(fd, RECORD_MAX_BYTES + 1)
        finally:
            os.close(fd)
        record_data = json.loads(data)
    except (OSError, ValueError) as exc:
        raise MemqError(f"{record}: unreadable recorder metadata: {exc}") from None
    if not isinstance(record_data, dict):
        raise MemqError(f"{record}: unreadable recorder metadata: not a JSON object")
    problem = _record_problem(record_data)
    if problem:
        raise MemqError(f"{record}: unreadable recorder metadata: {problem}")
    return record_data


def _count(value: object, low: int = 0) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value < 1 << 63


def _record_problem(record: dict) -> str | None:
    """What in memq-record.json has a shape memq record never writes (the converter reads these members)."""
    for key in ("events", "discarded_events", "lost_packets"):
        if record.get(key) is not None and not _count(record[key]):
            return f"{key} {record[key]!r} is not a count (an integer from 0 to 2^63-1)"
    if record.get("enabled") is not None and not isinstance(record["enabled"], dict):
        return f"enabled {record['enabled']!r} is not an object"
    host = (record.get("enabled") or {}).get("host")
    if host is not None and not isinstance(host, dict):
        return f"enabled.host {host!r} is not an object"
    readings = record.get("clock_readings", [])
    if not isinstance(readings, list):
        return f"clock_readings {readings!r} is not a list"
    for i, reading in enumerate(readings):
        if not isinstance(reading, dict):
            return f"clock_readings[{i}] {reading!r} is not an object"
        for key in ("monotonic", "realtime", "boottime", "pid"):
            if reading.get(key) is not None and not _count(reading[key], -(1 << 63)):
                return f"clock_readings[{i}].{key} {reading[key]!r} is not a 64-bit integer"
    return None


def _check_readable(traces: list[Path]) -> dict | None:
    """Reads `traces` to the end in a guarded child (salvage.Checker): None when readable, else
    the failure (message, the stream file that failed and where every stream stood). Where each
    stream stood is also kept in shared memory after every few messages, so that a read that
    brings the library down (MemqError from the guard) still says where it was."""
    shared = mmap.mmap(-1, PROGRESS_BYTES)  # MAP_SHARED: written by the child, read here

    def read(beat) -> dict | None:
        native = _Native(traces, want_range=False)
        try:
            err = native.error()
            if err is None:
                cols = _uninitialised(SALVAGE_STEP_ROWS, []).columns
                while (n := native.next(cols, SALVAGE_STEP_ROWS)) > 0:
                    native.side()
                    _put_progress(shared, native.stream_progress())
                    beat()
                if n == 0:
                    return None
                err = native.error() or READ_FAILURE
            failed = native.failed_stream()
            name, begun, ended = failed if failed is not None else ("", 0, 0)
            return {"message": error_line(err, traces, failed[0] if failed else None, hint=""),
                    "raw": err, "stream": name, "begun": begun, "ended": ended,
                    "streams": native.stream_progress()}
        finally:
            native.close()

    try:
        return guarded(read, f"{traces[0]}: reading the salvage copy")
    except MemqError as exc:
        return {"message": str(exc), "raw": "", "stream": "", "begun": 0, "ended": 0,
                "streams": _get_progress(shared), "crashed": True}
    finally:
        shared.close()


def _put_progress(shared: mmap.mmap, progress: list) -> None:
    data = json.dumps(progress).encode()[:PROGRESS_BYTES - 4]
    shared[4:4 + len(data)] = data
    shared[:4] = len(data).to_bytes(4, "little")  # the length last: a torn write reads as the older one


def _get_progress(shared: mmap.mmap) -> list:
    size = int.from_bytes(shared[:4], "little")
    try:
        return json.loads(shared[4:4 + size]) if size else []
    except ValueError:
        return []


def decode(path: str | Path, *, salvage: bool = False, batch_size: int = 262144,
           progress: Progress | None = None) -> Decoding:
    """Open every LTTng trace under `path` for decoding (see Decoding).

    `progress(done, total)` is called after each batch, in nanoseconds of trace time
    (total = span of all streams). With `salvage`, damaged stream files are cut back on
    a temporary copy; `Decoding.salvaged.dropped` and `info.warnings` say what was lost.
    """
    return Decoding(path, salvage=salvage, batch_size=batch_size, progress=progress)
