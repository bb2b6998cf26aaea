"""Bytes per event of a .pftrace, and where they go: per TracePacket field, TrackEvent field and argument name.

The goal for the converter's output is at most 70 bytes per decoded event. This reads a trace written by
ctf2perfetto (or converts a CTF trace directory first), walks the protobuf wire format of every packet (no
message objects: a 200 MB trace takes seconds) and prints the total against the decoded events (the
converter's own `events_read`, from its memq.meta summary), then the bytes of each field, largest first, as
bytes per event. Names come from the perfetto package's protos and the trace's interned argument names.

    python3 bench/trace_bytes.py TRACE.pftrace [--events N]
    python3 bench/trace_bytes.py CTF_DIR            # converted into a temporary file first
"""
from __future__ import annotations

import argparse
import collections
import subprocess
import sys
import tempfile
from pathlib import Path

from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import InternedData, TracePacket, TrackEvent

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from ctf2perfetto.traceformat.packets import read_varint  # noqa: E402

GOAL_BYTES_PER_EVENT = 70
_PACKET, _TRACK_EVENT, _INTERNED, _ANNOTATIONS = 1, 11, 12, 4  # Trace.packet, .track_event, .interned_data, debug_annotations


def fields(buf: memoryview):
    """(field number, wire type, value or payload, bytes the field takes) of one message's wire format."""
    i = 0
    while i < len(buf):
        start = i
        key, i = read_varint(buf, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = read_varint(buf, i)
        elif wire == 2:
            size, i = read_varint(buf, i)
            value, i = buf[i:i + size], i + size
        elif wire == 1:
            value, i = buf[i:i + 8], i + 8
        elif wire == 5:
            value, i = buf[i:i + 4], i + 4
        else:
            raise ValueError(f"wire type {wire} at offset {start}")
        yield number, wire, value, i - start


def tally(path: Path) -> tuple[int, int, collections.Counter, collections.Counter, collections.Counter, dict]:
    """Packets, bytes, and bytes per TracePacket field, TrackEvent field and argument name iid; interned names."""
    data = memoryview(path.read_bytes())
    packet_fields, event_fields, arguments = collections.Counter(), collections.Counter(), collections.Counter()
    names: dict[int, str] = {}
    packets = 0
    for number, _wire, packet, size in fields(data):
        if number != _PACKET:
            continue
        packets += 1
        packet_fields["(packet key and length)"] += size - len(packet)
        for field, _w, value, taken in fields(packet):
            packet_fields[field] += taken
            if field == _INTERNED:
                for entry in InternedData.FromString(bytes(value)).debug_annotation_names:
                    names[entry.iid] = entry.name
            elif field == _TRACK_EVENT:
                for sub, _w2, body, used in fields(value):
                    event_fields[sub] += used
                    if sub == _ANNOTATIONS:
                        iid = next((v for n, _w3, v, _u in fields(body) if n == 1), None)  # DebugAnnotation.name_iid
                        arguments[iid] += used
    return packets, len(data), packet_fields, event_fields, arguments, names


def events_read(path: Path) -> int | None:
    """The converter's count of decoded events, from the trace itself (memq.meta)."""
    from ctf2perfetto.inputs import open_input

    with open_input(path) as engine:
        rows = engine.query("SELECT int_value FROM args WHERE key = 'debug.events_read' LIMIT 1")
    return int(rows.iloc[0, 0]) if len(rows) else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", type=Path, help="a .pftrace, or a CTF trace directory to convert first")
    parser.add_argument("--events", type=int, help="events to divide by (default: the trace's events_read)")
    parser.add_argument("--top", type=int, default=12, help="rows per table (default 12)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = args.trace
        if path.is_dir():
            path = Path(tmp) / "trace.pftrace"
            subprocess.run([sys.executable, "-m", "ctf2perfetto.cli.convert", str(args.trace), "-o", str(path),
                            "--quiet"], check=True, cwd=REPO)
        packets, total, packet_fields, event_fields, arguments, names = tally(path)
        events = args.events or events_read(path)
    if not events:
        print(f"{path}: no events_read in the trace; give --events N", file=sys.stderr)
        return 2
    per = total / events
    print(f"{args.trace}: {total:,} bytes, {packets:,} packets, {events:,} events: {per:.1f} bytes per event "
          f"(goal <= {GOAL_BYTES_PER_EVENT}: {'met' if per <= GOAL_BYTES_PER_EVENT else 'NOT met'})")
    tables = (("TracePacket field", packet_fields, lambda f: TracePacket.DESCRIPTOR.fields_by_number[f].name
               if isinstance(f, int) and f in TracePacket.DESCRIPTOR.fields_by_number else str(f)),
              ("TrackEvent field", event_fields, lambda f: TrackEvent.DESCRIPTOR.fields_by_number[f].name
               if f in TrackEvent.DESCRIPTOR.fields_by_number else str(f)),
              ("argument", arguments, lambda iid: names.get(iid, f"iid {iid}")))
    for title, counter, name in tables:
        print(f"\n{title:32} {'bytes/event':>12}")
        for key, size in counter.most_common(args.top):
            print(f"{name(key):32} {size / events:12.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
