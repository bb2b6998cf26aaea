"""The trace's ClockSnapshot: how LTTng's monotonic timestamps reach wall-clock time.

LTTng stamps events with CLOCK_MONOTONIC. The trace declares REALTIME as the
primary trace clock and gives trace_processor one (MONOTONIC, REALTIME[, BOOTTIME])
correspondence, so it converts every LTTng packet (timestamp_clock_id MONOTONIC)
itself and other sources (Kineto: REALTIME ns) join on the same timeline.

The correspondence comes from the recorder's back-to-back clock readings
(memq-record.json, memq:clock events) when the trace has them, otherwise from
the CTF clock class offset (REALTIME - MONOTONIC at session start, as LTTng
measured it).
"""
from __future__ import annotations

from dataclasses import dataclass

from ctf2perfetto.events import TraceInfo
from ctf2perfetto.traceformat import names as N
from ctf2perfetto.traceformat.packets import fixed_varint as _varint


@dataclass(frozen=True)
class ClockCorrespondence:
    """One instant read on several clocks (ns)."""

    monotonic: int
    realtime: int
    boottime: int | None
    source: str  # "recorder" (clock readings) or "ctf clock offset"

    def realtime_of(self, monotonic_ns: int) -> int:
        """Wall-clock ns of a monotonic timestamp."""
        return monotonic_ns + self.realtime - self.monotonic


def correspondence(info: TraceInfo, first_ts: int) -> ClockCorrespondence:
    """The clock correspondence for a trace whose first event is at monotonic `first_ts`."""
    readings = [r for r in info.clock_readings if "monotonic" in r and "realtime" in r]
    if readings:
        start = next((r for r in readings if r.get("where") == "start"), readings[0])
        boottime = start.get("boottime")
        return ClockCorrespondence(int(start["monotonic"]), int(start["realtime"]),
                                   None if boottime is None else int(boottime), "recorder")
    return ClockCorrespondence(first_ts, first_ts + info.clock_offset_ns, None, "ctf clock offset")


# Packet 0 is written last, into room reserved at the start of the file, so it always
# takes exactly this many bytes: three clocks with their ids in 1-byte varints, or two
# clocks with the difference spread over the sequence id and primary clock varints.
_TS_WIDTH = 10


def _clock_entry(clock_id: int, value: int, id_width: int) -> bytes:
    body = b"\x08" + _varint(clock_id, id_width) + b"\x10" + _varint(value, _TS_WIDTH)
    return b"\x0a" + bytes([len(body)]) + body


def snapshot_record(clock: ClockCorrespondence) -> bytes:
    """`Trace.packet` record of packet 0: the snapshot alone, REALTIME as the primary trace clock, always
    SNAPSHOT_RECORD_SIZE bytes."""
    values = [(N.CLOCK_MONOTONIC, clock.monotonic), (N.CLOCK_REALTIME, clock.realtime)]
    if clock.boottime is not None:
        values.append((N.CLOCK_BOOTTIME, clock.boottime))
    clocks_bytes = b"".join(_clock_entry(cid, v, 1) for cid, v in values)
    slack = 3 * len(_clock_entry(0, 0, 1)) - len(clocks_bytes)  # 0 or one entry's worth
    seq_width = 1 + min(slack, 9)
    primary_width = 1 + slack - (seq_width - 1)
    snapshot = clocks_bytes + b"\x10" + _varint(N.CLOCK_REALTIME, primary_width)
    packet = b"\x50" + _varint(N.SEQ_CLOCK, seq_width) + b"\x32" + _varint(len(snapshot), 2) + snapshot
    record = b"\x0a" + _varint(len(packet), 4) + packet
    assert len(record) == SNAPSHOT_RECORD_SIZE
    return record


SNAPSHOT_RECORD_SIZE = 1 + 4 + 2 + 1 + 2 + 3 * 15 + 2
