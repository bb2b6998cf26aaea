#!/usr/bin/env python3
"""Ingest speed of the embedded engine (trace_processor.wasm under wasmtime).

Generates a Perfetto protobuf trace of N TrackEvent packets (slice begin/end
pairs with debug args on four thread tracks, plus counter samples), loads it
with ctf2perfetto.engine.open_trace, and reports MB/s and events/s next to the
reference: parsing the same file with the protobuf package
(`python -c "Trace.FromString(...)"`, upb) in a fresh process, in the same run.

    python3 bench/engine_ingest.py [--events 1000000] [--memory64] [--repeat 3] [--keep PATH]

Both sides report the best of --repeat runs (the machine is shared and noisy).
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import CounterDescriptor, Trace, TrackEvent

TS_PLACEHOLDER = 1 << 40  # every timestamp lies in [2**35, 2**42): a 6-byte varint, so packets have fixed sizes
TS_STEP_NS = 100
TRACKS = 4
PID = 1000

REFERENCE = """
import sys, time
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace
data = open(sys.argv[1], 'rb').read()
best = float('inf')
for _ in range(int(sys.argv[2])):
    start = time.perf_counter()
    trace = Trace.FromString(data)
    best = min(best, time.perf_counter() - start)
print(best, len(trace.packet))
"""


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _framed(packet) -> bytes:  # noqa: ANN001 - a TracePacket
    trace = Trace()
    trace.packet.append(packet)
    return trace.SerializeToString()


def descriptors() -> bytes:
    """Process, thread and counter track descriptors (first in the file)."""
    trace = Trace()
    p = trace.packet.add()
    p.track_descriptor.uuid = 1
    p.track_descriptor.process.pid = PID
    p.track_descriptor.process.process_name = "bench"
    for k in range(TRACKS):
        p = trace.packet.add()
        p.track_descriptor.uuid = 10 + k
        p.track_descriptor.thread.pid = PID
        p.track_descriptor.thread.tid = PID + 1 + k
        p.track_descriptor.thread.thread_name = f"worker{k}"
    p = trace.packet.add()
    p.track_descriptor.uuid = 2
    p.track_descriptor.parent_uuid = 1
    p.track_descriptor.name = "live bytes"
    p.track_descriptor.counter.unit = CounterDescriptor.UNIT_SIZE_BYTES
    return trace.SerializeToString()


def block_templates() -> list[bytes]:
    """One repeating block of framed packets, each with TS_PLACEHOLDER as its timestamp."""
    block = []
    for k in range(TRACKS):
        for kind in (TrackEvent.TYPE_SLICE_BEGIN, TrackEvent.TYPE_SLICE_END):
            p = Trace().packet.add()
            p.timestamp = TS_PLACEHOLDER
            p.trusted_packet_sequence_id = 1 + k
            p.track_event.type = kind
            p.track_event.track_uuid = 10 + k
            if kind == TrackEvent.TYPE_SLICE_BEGIN:
                p.track_event.name = "hipMemcpy"
                p.track_event.categories.append("hip")
                for name, value in (("bytes", 4096 << k), ("dst", 0x7F00_0000_0000 + k)):
                    a = p.track_event.debug_annotations.add()
                    a.name = name
                    if name == "dst":
                        a.pointer_value = value
                    else:
                        a.int_value = value
            block.append(_framed(p))
    p = Trace().packet.add()
    p.timestamp = TS_PLACEHOLDER
    p.trusted_packet_sequence_id = 99
    p.track_event.type = TrackEvent.TYPE_COUNTER
    p.track_event.track_uuid = 2
    p.track_event.counter_value = 123456789
    block.append(_framed(p))
    return block


def generate(events: int) -> bytes:
    """A trace of at least `events` TrackEvent packets, encoded with numpy from templates."""
    templates = block_templates()
    marker = b"\x40" + _varint(TS_PLACEHOLDER)  # field 8 (timestamp), varint
    offsets, start = [], 0
    for t in templates:
        offsets.append(start + t.index(marker) + 1)
        start += len(t)
    block = np.frombuffer(b"".join(templates), dtype=np.uint8)
    blocks = -(-events // len(templates))
    body = np.tile(block, (blocks, 1))
    seq = np.arange(blocks * len(templates), dtype=np.uint64).reshape(blocks, len(templates))
    ts = np.uint64(TS_PLACEHOLDER) + seq * np.uint64(TS_STEP_NS)
    for j, off in enumerate(offsets):
        value = ts[:, j]
        for i in range(6):
            byte = (value >> np.uint64(7 * i)) & np.uint64(0x7F)
            body[:, off + i] = (byte | np.uint64(0x80 if i < 5 else 0)).astype(np.uint8)
    return descriptors() + body.tobytes()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=1_000_000, help="TrackEvent packets to generate (default 1M)")
    parser.add_argument("--memory64", action="store_true", help="load with the memory64 build (default: the 32-bit one)")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each side; the best is reported (default 3)")
    parser.add_argument("--keep", type=Path, help="write the generated trace here (default: a temporary file)")
    args = parser.parse_args()

    from ctf2perfetto.engine.embedded import EmbeddedEngine
    from ctf2perfetto.engine.source import trace_source
    from ctf2perfetto.engine.wasm import load_module, wasm_file

    t0 = time.perf_counter()
    data = generate(args.events)
    gen_s = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as tmp:
        path = args.keep or Path(tmp) / "bench.pftrace"
        path.write_bytes(data)
        mb = len(data) / 1e6
        load_module(wasm_file(memory64=args.memory64))  # compile or fetch from cache outside the timing

        ref = subprocess.run([sys.executable, "-c", REFERENCE, str(path), str(args.repeat)], capture_output=True, text=True, check=True)
        ref_s, ref_packets = float(ref.stdout.split()[0]), int(ref.stdout.split()[1])

        load_s = float("inf")
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            engine = EmbeddedEngine(trace_source(path), memory64=args.memory64)
            load_s = min(load_s, time.perf_counter() - t0)
            if _ < args.repeat - 1:
                engine.close()
        with engine:
            counts = engine.query("SELECT (SELECT count(*) FROM slice) AS slices, (SELECT count(*) FROM counter) AS counters")
            heap = engine.wasm_heap_bytes()
            problems = engine.import_problems()
    slices, counters = int(counts["slices"][0]), int(counts["counters"][0])
    events = 2 * slices + counters
    print(f"trace: {len(data):,} bytes, {ref_packets:,} packets (generated in {gen_s:.1f} s)")
    print(f"loaded: {slices:,} slices + {counters:,} counter samples = {events:,} events; "
          f"import problems: {len(problems)}; wasm heap after import: {heap / 2**20:.0f} MiB "
          f"({heap / len(data):.1f}x the trace)")
    build = "memory64" if args.memory64 else "32-bit"
    print(f"embedded engine ({build:>8}): {load_s:6.2f} s  {mb / load_s:7.1f} MB/s  {events / load_s / 1e6:6.2f} M events/s")
    print(f"protobuf parse          : {ref_s:6.2f} s  {mb / ref_s:7.1f} MB/s  {ref_packets / ref_s / 1e6:6.2f} M packets/s")
    print(f"ratio (engine time / protobuf parse time): {load_s / ref_s:.2f}")
    return 0 if events == ref_packets - (TRACKS + 2) else 1


if __name__ == "__main__":
    sys.exit(main())
