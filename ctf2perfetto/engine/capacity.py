"""What the embedded engine can hold, and the one line a trace too big for it gets.

trace_processor holds 3-6x a trace's size while importing it (3.2x for memq's protobuf
traces, bench/engine_ingest.py). The embedded builds' heaps stop at 4 GiB (32-bit) and
16 GiB (memory64), and the machine may have less free memory than that: a trace that
cannot fit is refused before minutes of loading, and a heap that cannot grow further
ends in the same line, never in the kernel's OOM killer.
"""
from __future__ import annotations

from pathlib import Path

from ctf2perfetto.errors import MemqError

# Least memory trace_processor takes per byte of protobuf trace (bench/engine_ingest.py).
INGEST_FACTOR = 3.2
# Memory left to everything else on the machine when the wasm heap grows.
RESERVE_BYTES = 512 << 20
MEMINFO = Path("/proc/meminfo")

WHAT_TO_DO = ("analyse the recording a part at a time (memq duplicated|redundant|summary|leaks TRACE_DIR --parts 5m: "
              "the whole run's figures), convert a part of it (ctf2perfetto TRACE_DIR --from SEC --to SEC), record "
              "less (a capture window: memq record --delay/--duration or --capture-range profiler-api; a larger "
              "--host-min-size) or load it with a native trace_processor_shell (--trace-processor PATH or "
              "MEMQ_TRACE_PROCESSOR)")


def available_memory() -> int | None:
    """Bytes the kernel can give without swapping (MemAvailable), None where it does not say."""
    try:
        for line in MEMINFO.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def gib(n: float) -> str:
    """A size for people: GiB from 1 GiB up, MiB below."""
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


def check_fits(label: str, size: int, heap_max: int) -> None:
    """Refuse a trace of `size` bytes that cannot fit the embedded engine's heap or this machine's memory."""
    need = int(size * INGEST_FACTOR)
    free = available_memory()
    if need > heap_max:
        raise MemqError(f"{label}: {gib(size)} is too big for the embedded trace_processor (it needs about "
                        f"{gib(need)}, its heap stops at {gib(heap_max)}): {WHAT_TO_DO}")
    if free is not None and need > free:
        raise MemqError(f"{label}: {gib(size)} is too big for the embedded trace_processor on this machine (it needs "
                        f"about {gib(need)}, {gib(free)} is free): {WHAT_TO_DO}")


def may_grow(current: int, target: int) -> bool:
    """Whether the heap may grow from `current` to `target` bytes without starving the machine."""
    free = available_memory()
    return free is None or target - current <= free - RESERVE_BYTES
