"""What a recording did: memq-record.json's fields, clock readings, and the terminal summary."""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field


@dataclass
class RecordResult:
    """What happened; also written as memq-record.json."""

    command: list[str]
    executable: str
    exit_code: int
    session: str
    trace_dir: str
    host: str
    started_at: str
    duration_s: float
    versions: dict[str, str]
    clock_readings: list[dict]
    enabled: dict
    discarded_events: int
    lost_packets: int
    events: int | None = None  # filled after the session is gone
    size_bytes: int = 0
    preload: list[str] = field(default_factory=list)
    # Per traced process: the GPU libraries it had loaded and its traced calls per runtime
    # (the preload library's exit report, see reach_warnings).
    reach: list[dict] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    signals: list[str] = field(default_factory=list)  # signals memq record received (SIGINT, SIGHUP, ...)


def clock_reading(where: str) -> dict:
    """REALTIME, MONOTONIC and BOOTTIME read back to back (ns)."""
    realtime = time.clock_gettime_ns(time.CLOCK_REALTIME)
    monotonic = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    boottime = time.clock_gettime_ns(time.CLOCK_BOOTTIME)
    return {"pid": os.getpid(), "where": where, "realtime": realtime, "monotonic": monotonic, "boottime": boottime}


def summary(result: RecordResult) -> str:
    """A few lines for the terminal."""
    events = "unknown number of" if result.events is None else f"{result.events:,}"
    lost = result.discarded_events + result.lost_packets
    lost_text = f"{result.discarded_events:,} lost events" + (
        f", {result.lost_packets:,} lost packets" if result.lost_packets else "")
    lines = [f"memq record: {events} events, {lost_text}, {result.size_bytes / 2**20:.1f} MiB in {result.trace_dir}",
             f"memq record: command exited with {result.exit_code} after {result.duration_s:.1f} s"]
    if lost:
        lines.append("memq record: WARNING: events were lost (counted in memq-record.json and marked in the trace); "
                     "to keep them all use --mode blocking, larger buffers (--subbuf-size, --num-subbuf) or "
                     "record less (--api, a larger --host-min-size)")
    lines.extend(f"memq record: WARNING: {w}" for w in result.warnings)
    lines.append(f"memq record: next: ctf2perfetto {result.trace_dir} -o trace.pftrace")
    return "\n".join(lines)
