"""Reading a PyTorch-profiler (Kineto) JSON trace: events with absolute REALTIME nanoseconds.

Kineto times are CLOCK_REALTIME microseconds relative to `baseTimeNanoseconds` (absolute
Unix µs in traces older than that field), so each event lands at `base + round(ts * 1000)`
ns. Numbers are parsed as decimals, not floats: a float of 1.7e15 µs has a 0.25 µs grain.
"""
from __future__ import annotations

import gzip
import json
import sys
import zlib
from dataclasses import dataclass, field
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from ctf2perfetto.errors import MemqError, UsageError
from ctf2perfetto.traceformat import names as N


@dataclass
class KinetoTrace:
    """A parsed Kineto trace: events with absolute REALTIME nanoseconds."""

    path: Path
    base_ns: int  # baseTimeNanoseconds, 0 when the trace predates it
    events: list[dict]
    process_names: dict[Any, str] = field(default_factory=dict)
    process_labels: dict[Any, str] = field(default_factory=dict)
    thread_names: dict[tuple[Any, Any], str] = field(default_factory=dict)
    # What was read as a current trace has it (older layouts), by what: "1.8-era category" counts, ...
    fixes: dict[str, int] = field(default_factory=dict)

    def abs_ns(self, ts: Any) -> int | None:
        """Absolute REALTIME ns of a Kineto `ts` (µs); None if it is not a number."""
        ns = us_to_ns(ts)
        return None if ns is None else self.base_ns + ns


def load(path: str | Path) -> KinetoTrace:
    """Read a Kineto JSON / JSON.gz trace. Bad input raises one-line errors."""
    path = Path(path)
    if path.is_dir():
        raise UsageError(f"{path}: is a directory, expected a Kineto JSON file")
    if not path.exists():
        raise UsageError(f"{path}: Kineto trace not found")
    if not path.is_file():  # a fifo would block for ever, /dev/zero never end
        raise UsageError(f"{path}: not a regular file, expected a Kineto JSON file")
    raw = b""
    try:
        raw = _json_text(path)
        doc = json.loads(raw, parse_float=Decimal)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise MemqError(f"{path}: cannot read Kineto trace: {reason}") from None
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise MemqError(f"{path}: not a readable gzip file: {exc}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise MemqError(f"{path}: not a JSON Kineto trace: {exc}") from None
    except RecursionError:
        raise MemqError(f"{path}: not a Kineto trace: its JSON is nested deeper than {sys.getrecursionlimit()} "
                        "levels") from None
    except MemoryError:
        raise MemqError(f"{path}: the trace ({len(raw):,} bytes of JSON text) does not fit in the memory this "
                        "process may use (ulimit -v, the machine's memory)") from None
    del raw
    if isinstance(doc, list):  # the Chrome trace format's bare event array
        doc = {"traceEvents": doc}
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise MemqError(f"{path}: no traceEvents list: not a PyTorch profiler (Kineto) trace")
    base = doc.get("baseTimeNanoseconds", 0)
    try:
        base_ns = int(base)
    except (TypeError, ValueError, InvalidOperation, OverflowError):
        raise MemqError(f"{path}: baseTimeNanoseconds is not a number: {base!r}") from None
    if not 0 <= base_ns <= I64_MAX:
        raise MemqError(f"{path}: baseTimeNanoseconds {base} is outside the times a trace holds (0 to 2^63-1 ns "
                        "from the Epoch)")
    trace = KinetoTrace(path, base_ns, [])
    for number, event in enumerate(doc["traceEvents"]):
        if not isinstance(event, dict):
            continue
        _check_event(trace, number, event)
        _modernize(trace, event)
        if event.get("ph") == "M":
            _read_metadata(trace, event)
        else:
            if event.get("cat") in N.KINETO_MEMORY_WORK:
                _check_memory_work(trace, number, event)
            trace.events.append(event)
    _sizes_from_runtime(trace)
    return trace


I64_MAX = (1 << 63) - 1  # a Perfetto trace's times and sizes are int64
READ_BYTES = 16 << 20


def _json_text(path: Path) -> bytes:
    """The file's JSON text, decompressed if gzipped, a piece at a time: what does not start like JSON (a
    gzip of zeros) is refused after its first piece, never decompressed whole."""
    with open(path, "rb") as f:
        gzipped = f.read(2) == b"\x1f\x8b"
    text = bytearray()
    with (gzip.open(path, "rb") if gzipped else open(path, "rb")) as f:
        while piece := f.read(READ_BYTES):
            if not text:
                start = piece.lstrip(b" \t\r\n\xef\xbb\xbf")[:1]
                if start and start not in b"{[":
                    raise MemqError(f"{path}: not a JSON Kineto trace: it starts with byte {start[0]:#04x}, "
                                    "not a JSON object or array")
            text += piece
    return bytes(text)


def _check_event(trace: KinetoTrace, number: int, event: dict) -> None:
    """An event's ids and time as the format holds them: a pid or tid that is no id (a list, an object) and a
    time outside int64 ns from the Epoch are refused in one line, not turned into something else."""
    where = f"{trace.path}: traceEvents[{number}] ({event.get('cat')} {str(event.get('name', ''))[:60]!r})"
    for key, what in (("pid", "process"), ("tid", "thread")):
        value = event.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, str, Decimal))):
            raise MemqError(f"{where}: {key} {value!r} is not a {what} id (a number or a string)")
    for key in ("ph", "cat", "name"):
        if event.get(key) is not None and not isinstance(event[key], str):
            raise MemqError(f"{where}: {key} {str(event[key])[:60]} is not a string")
    # Ids the merge keys on (flows, correlations, streams, devices): a list or an object is no id.
    args = event.get("args") if isinstance(event.get("args"), dict) else {}
    for key, value in [("id", event.get("id"))] + [(f"args.{k}", args.get(k)) for k in
                                                   ("correlation", "stream", "device", "External id")]:
        if isinstance(value, (list, dict)):
            raise MemqError(f"{where}: {key} {str(value)[:60]} is not an id (a number or a string)")
    ts = event.get("ts")
    if ts is None:
        return
    at = trace.abs_ns(ts)
    if at is not None and not 0 <= at <= I64_MAX:
        raise MemqError(f"{where}: ts {ts} is outside the times a trace holds (0 to 2^63-1 ns from the Epoch, "
                        f"with baseTimeNanoseconds {trace.base_ns})")


# PyTorch 1.8-era (libkineto's first) category names -> today's.
LEGACY_CATEGORIES = {"Memcpy": N.KINETO_MEMCPY, "Memset": N.KINETO_MEMSET, "Kernel": N.KINETO_KERNEL,
                     "Runtime": "cuda_runtime", "Operator": N.KINETO_CPU_OP}


def _modernize(trace: KinetoTrace, event: dict) -> None:
    """An event of an older layout as today's: 1.8-era categories (`Memcpy`, `Memset`, `Kernel`, `Runtime`,
    `Operator`) renamed, GPU tids written as "stream 7" read as the stream number."""
    cat = event.get("cat")
    if isinstance(cat, str) and cat in LEGACY_CATEGORIES:
        event["cat"] = LEGACY_CATEGORIES[cat]
        trace.fixes["1.8-era categories"] = trace.fixes.get("1.8-era categories", 0) + 1
    tid = event.get("tid")
    if isinstance(tid, str) and tid.startswith("stream "):
        stream = as_int(tid[len("stream "):].strip())
        if stream is not None:
            event["tid"] = stream
            args = event.get("args")
            if isinstance(args, dict):
                args.setdefault("stream", stream)


def _sizes_from_runtime(trace: KinetoTrace) -> None:
    """Copies and memsets without `bytes` (ROCm's gpu_memcpy) take the size of the runtime call they correlate
    with (hipMemcpy*'s `size`)."""
    missing = [e for e in trace.events if e.get("cat") in N.KINETO_MEMORY_WORK and e.get("ph") == "X"
               and isinstance(e.get("args"), dict) and e["args"].get("bytes") is None
               and e["args"].get("correlation") is not None]
    if not missing:
        return
    sizes: dict[Any, int] = {}
    for event in trace.events:
        args = event.get("args")
        if event.get("cat") in N.KINETO_RUNTIME_CATEGORIES and isinstance(args, dict):
            size = next((as_int(args[k]) for k in ("size", "sizeBytes", "bytes", "count") if k in args), None)
            if size is not None and size >= 0 and args.get("correlation") is not None:
                sizes[args["correlation"]] = size
    for event in missing:
        size = sizes.get(event["args"]["correlation"])
        if size is not None:
            event["args"]["bytes"] = size
            trace.fixes["sizes from the correlated runtime call"] = \
                trace.fixes.get("sizes from the correlated runtime call", 0) + 1


def _check_memory_work(trace: KinetoTrace, number: int, event: dict) -> None:
    """A copy or memset the analyses count: a bad time, duration or byte count is refused in one line
    (it would give negative or wrong figures), never dropped."""
    if event.get("ph") != "X":
        return
    where = f"{trace.path}: traceEvents[{number}] ({event.get('cat')} {str(event.get('name', ''))[:60]!r})"
    if trace.abs_ns(event.get("ts")) is None:
        raise MemqError(f"{where}: ts {event.get('ts')!r} is not a number")
    dur = us_to_ns(event.get("dur", 0))
    if dur is None or dur < 0:
        raise MemqError(f"{where}: dur {event.get('dur')!r} is not a duration (a number >= 0)")
    if trace.abs_ns(event.get("ts")) + dur > I64_MAX:
        raise MemqError(f"{where}: dur {event.get('dur')} ends outside the times a trace holds (2^63-1 ns from the "
                        "Epoch)")
    args = event.get("args")
    if args is not None and not isinstance(args, dict):
        raise MemqError(f"{where}: args is not an object")
    nbytes = (args or {}).get("bytes")
    if nbytes is not None and (isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 0):
        raise MemqError(f"{where}: bytes {nbytes!r} is not a byte count (an integer >= 0)")
    if nbytes is not None and nbytes > I64_MAX:
        raise MemqError(f"{where}: bytes {nbytes} does not fit a trace's byte counts (at most 2^63-1)")


def _read_metadata(trace: KinetoTrace, event: dict) -> None:
    args = event.get("args")
    if not isinstance(args, dict):
        return  # names nothing
    pid, tid, name = event.get("pid"), event.get("tid"), event.get("name")
    if name == "process_name" and "name" in args:
        trace.process_names[pid] = str(args["name"])
    elif name == "process_labels" and "labels" in args:
        trace.process_labels[pid] = str(args["labels"])
    elif name == "thread_name" and "name" in args:
        trace.thread_names[(pid, tid)] = str(args["name"]).strip()


def us_to_ns(value: Any) -> int | None:
    """Kineto µs (number or numeric string) -> integer ns; None if not a number."""
    if isinstance(value, bool) or value is None:
        return None
    try:
        us = value if isinstance(value, Decimal) else Decimal(str(value))
        return int((us * 1000).to_integral_value(ROUND_HALF_EVEN))
    except (InvalidOperation, ValueError, OverflowError):
        return None


def as_int(value: Any) -> int | None:
    """A Kineto pid / tid / address as an int (they are ints or numeric strings); None otherwise."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.lstrip("-").isdigit():
        return int(value)
    return None
