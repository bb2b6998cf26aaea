"""write_trace on hand-written logs, read back through trace_processor (ctf2perfetto.engine).

Every figure expected here is worked out from the log in this file: slices, args,
counters, flows, tracks, clocks; plus zero import problems and byte-identical output.
"""
from __future__ import annotations

import os

import pytest
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from ctf2perfetto.engine import open_trace
from ctf2perfetto.errors import MemqError
from ctf2perfetto.events import EventBatch, EventKind as K, MemKind as M, TraceInfo
from ctf2perfetto.traceformat import names as N
from ctf2perfetto.traceformat.tracks import process_uuid, thread_uuid
from ctf2perfetto.convert.write import write_trace

# The full check of perfetto.md section 6: errors, data losses and the info/notice stats they miss.
IMPORT_PROBLEMS = """
SELECT name, idx, severity, source, value FROM stats
WHERE value > 0 AND (
  severity IN ('error', 'data_loss')
  OR name IN (
    'track_event_parser_errors', 'track_event_tokenizer_errors',
    'interned_data_tokenizer_errors', 'track_hierarchy_missing_uuid',
    'packet_skipped_seq_needs_incremental_state_invalid',
    'interned_data_skipped_incremental_state_invalid',
    'thread_descriptor_skipped_incremental_state_invalid',
    'track_event_skipped_timestamp_delta_without_valid_state',
    'flow_step_without_start', 'flow_end_without_start'))"""

OFFSET = 1_700_000_000_000_000_000  # REALTIME - MONOTONIC of the CTF clock class
A, B = 10, 20  # pids
T0 = 1_000_000
ROWS = [
    dict(ts=T0 + 0, kind=K.MALLOC, api="malloc", pid=A, tid=A, ptr=0x1000, size=100, ip=0x401000),
    dict(ts=T0 + 10, kind=K.CALLOC, api="calloc", pid=A, tid=A, ptr=0x2000, size=48, aux=3),
    dict(ts=T0 + 20, kind=K.REALLOC, api="realloc", pid=A, tid=A + 1, ptr=0x3000, src=0x1000, size=200),
    dict(ts=T0 + 30, kind=K.POSIX_MEMALIGN, api="posix_memalign", pid=A, tid=A, ptr=0x4000, size=64, aux=64),
    dict(ts=T0 + 40, kind=K.MEMALIGN, api="memalign", pid=B, tid=B, ptr=0x1000, size=32, aux=16),
    dict(ts=T0 + 50, kind=K.FREE, api="free", pid=A, tid=A, ptr=0x9999),  # unmatched
    dict(ts=T0 + 60, kind=K.FREE, api="free", pid=A, tid=A, ptr=0),  # free(NULL)
    dict(ts=T0 + 100, begin=T0 + 70, kind=K.GPU_ALLOC, api="hipMalloc", pid=A, tid=A, ptr=0x700000, size=4096,
         mem=M.DEVICE, flags=0),
    dict(ts=T0 + 120, begin=T0 + 110, kind=K.GPU_ALLOC, api="hipHostMalloc", pid=A, tid=A, ptr=0x500000,
         size=1024, mem=M.PINNED, flags=1),
    # two copies on stream 7 overlapping in host time (two threads): two lanes
    dict(ts=T0 + 200, begin=T0 + 130, kind=K.GPU_COPY, api="hipMemcpyAsync", pid=A, tid=A, ptr=0x700010,
         src=0x3008, size=16, copy_kind=4, stream=7),
    dict(ts=T0 + 210, begin=T0 + 150, kind=K.GPU_COPY, api="hipMemcpyAsync", pid=A, tid=A + 1, ptr=0x500000,
         src=0x700000, size=32, copy_kind=2, stream=7),
    dict(ts=T0 + 230, begin=T0 + 220, kind=K.GPU_SET, api="hipMemset", pid=A, tid=A, ptr=0x700000, size=64,
         aux=0xAB),
    dict(ts=T0 + 250, begin=T0 + 240, kind=K.GPU_SYNC, api="hipDeviceSynchronize", pid=A, tid=A),
    dict(ts=T0 + 260, begin=T0 + 255, kind=K.GPU_COPY, api="hipMemcpy", pid=A, tid=A, ptr=0x700000, src=0x4000,
         size=8, copy_kind=1, result=1),  # failed: API slice only
    dict(ts=T0 + 300, begin=T0 + 280, kind=K.GPU_FREE, api="hipFree", pid=A, tid=A, ptr=0x700000, size=4096,
         mem=M.DEVICE),
    dict(ts=T0 + 310, kind=K.FREE, api="free", pid=A, tid=A, ptr=0x3000),
    dict(ts=T0 + 320, kind=K.LOST, aux=5, aux2=0, size=30, stream=1),  # events lost in [320, 350)
    dict(ts=T0 + 330, kind=K.LOST, aux=2, aux2=1, size=40, stream=0),  # packets lost in [330, 370): overlaps
]
INFO = TraceInfo(
    clock_offset_ns=OFFSET, hostname="node1", processes={A: "python3", B: "worker"},
    threads={(A, A + 1): "loader"},
    devices=[dict(pid=A, device=0, name="AMD Instinct MI300A", integrated=True, unified_memory=True,
                  runtime="hip")],
    binaries=[dict(pid=A, baddr=0x400000, memsz=0x2000, path="/usr/bin/python3", build_id="abcd")],
    lost_events=5, lost_packets=2, skipped={"unknown event class": 3},
    stream_files=["ust/uid/0/64-bit/chan_0", "ust/uid/0/64-bit/chan_1"])


def rt(mono: int) -> int:
    return mono + OFFSET


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    out = tmp_path_factory.mktemp("write") / "t.pftrace"
    summary = write_trace([EventBatch.from_rows(ROWS[:9]), EventBatch.from_rows(ROWS[9:], None)], INFO, out)
    return out, summary


@pytest.fixture(scope="module")
def tp(written):
    with open_trace(written[0]) as engine:
        yield engine


def rows(engine, sql) -> list[tuple]:
    return [tuple(r) for r in engine.query(sql).itertuples(index=False)]


def test_imports_without_problems(tp):
    assert tp.query(IMPORT_PROBLEMS).empty, tp.query(IMPORT_PROBLEMS).to_string()


def test_summary(written):
    out, s = written
    assert s.events == {"malloc": 1, "calloc": 1, "realloc": 1, "posix_memalign": 1, "memalign": 1, "free": 3,
                        "gpu_alloc": 2, "gpu_copy": 3, "gpu_set": 1, "gpu_sync": 1, "gpu_free": 1, "lost": 2}
    assert (s.processes, s.threads, s.allocations, s.unmatched_frees) == (2, 3, 7, 1)
    assert (s.lost_events, s.lost_packets, s.skipped) == (5, 2, {"unknown event class": 3})
    assert s.output_bytes == out.stat().st_size and s.clock_source == "ctf clock offset"
    assert any("CTF clock offset" in w for w in s.warnings)


def test_slices_on_their_tracks(tp):
    got = rows(tp, """
        SELECT s.ts, s.dur, s.category, s.name, COALESCE(th.tid, t.name) AS track
        FROM slice s JOIN track t ON s.track_id = t.id LEFT JOIN thread_track tt ON tt.id = s.track_id
        LEFT JOIN thread th USING (utid) ORDER BY s.ts, s.category, s.name""")
    expected = [
        (rt(T0), 0, "memq.binary", "/usr/bin/python3", "Libraries"), (rt(T0), 0, "memq.device", "GPU 0", "memq"),
        (rt(T0), 0, "memq.heap", "malloc", A), (rt(T0), 0, "memq.meta", "memq trace info", "memq"),
        (rt(T0 + 10), 0, "memq.heap", "calloc", A), (rt(T0 + 20), 0, "memq.heap", "realloc", A + 1),
        (rt(T0 + 30), 0, "memq.heap", "posix_memalign", A), (rt(T0 + 40), 0, "memq.heap", "memalign", B),
        (rt(T0 + 50), 0, "memq.heap", "free", A), (rt(T0 + 60), 0, "memq.heap", "free", A),
        (rt(T0 + 70), 30, "memq.api", "hipMalloc", A), (rt(T0 + 110), 10, "memq.api", "hipHostMalloc", A),
        (rt(T0 + 130), 70, "memq.api", "hipMemcpyAsync", A), (rt(T0 + 130), 70, "memq.copy", "HtoD", "hip stream 0x7"),
        (rt(T0 + 150), 60, "memq.api", "hipMemcpyAsync", A + 1),
        (rt(T0 + 150), 60, "memq.copy", "DtoH", "hip stream 0x7"),
        (rt(T0 + 220), 10, "memq.api", "hipMemset", A), (rt(T0 + 220), 10, "memq.set", "memset", "hip stream 0x0"),
        (rt(T0 + 240), 10, "memq.api", "hipDeviceSynchronize", A), (rt(T0 + 255), 5, "memq.api", "hipMemcpy", A),
        (rt(T0 + 280), 20, "memq.api", "hipFree", A), (rt(T0 + 310), 0, "memq.heap", "free", A),
        (rt(T0 + 320), 30, "memq.lost", "lost events", "memq"), (rt(T0 + 330), 40, "memq.lost", "lost packets", "memq"),
    ]
    assert got == expected
    # overlapping copies of one stream, and overlapping losses, went on distinct lanes (tracks)
    lanes = rows(tp, "SELECT count(DISTINCT track_id) FROM slice WHERE category IN ('memq.copy', 'memq.lost')")
    assert lanes == [(4,)]
    # heap calls sit on a `heap` track of their thread, beside its API slices; libraries under `memq`
    heap = rows(tp, """SELECT DISTINCT t.name, th.tid FROM slice s JOIN thread_track t ON s.track_id = t.id
                       JOIN thread th USING (utid) WHERE s.category = 'memq.heap' ORDER BY th.tid""")
    assert heap == [("heap", A), ("heap", A + 1), ("heap", B)]
    api = rows(tp, """SELECT DISTINCT t.name FROM slice s JOIN track t ON s.track_id = t.id
                      WHERE s.category = 'memq.api'""")
    assert api == [(None,)]  # the thread tracks themselves (the UI names them after the thread)
    assert rows(tp, """SELECT p.name FROM track t JOIN track p ON t.parent_id = p.id
                       WHERE t.name = 'Libraries'""") == [("memq",)]


def args_of(tp, where: str) -> dict:
    got = rows(tp, f"""SELECT a.key, a.value_type, a.int_value, a.string_value FROM slice s
                       JOIN args a USING (arg_set_id) WHERE {where} AND a.key GLOB 'debug.*' ORDER BY a.key""")
    return {k[6:]: (s if t == "string" else int(i)) for k, t, i, s in got}


def test_heap_instant_args(tp):
    assert args_of(tp, "s.name = 'malloc'") == {"ptr": 0x1000, "size": 100, "size_fmt": "100 B", "alloc_id": 1,
                                                "ip": 0x401000}
    assert args_of(tp, "s.name = 'calloc'") == {"ptr": 0x2000, "size": 48, "size_fmt": "48 B", "nmemb": 3,
                                                "alloc_id": 2}
    assert args_of(tp, "s.name = 'realloc'") == {"ptr": 0x3000, "size": 200, "size_fmt": "200 B", "in_ptr": 0x1000,
                                                 "alloc_id": 3, "freed_alloc_id": 1}
    assert args_of(tp, "s.name = 'posix_memalign'") == {"ptr": 0x4000, "size": 64, "size_fmt": "64 B",
                                                        "alignment": 64, "alignment_fmt": "64 B", "result": 0,
                                                        "alloc_id": 4}
    assert args_of(tp, "s.name = 'memalign'") == {"ptr": 0x1000, "size": 32, "size_fmt": "32 B", "alignment": 16,
                                                  "alignment_fmt": "16 B", "alloc_id": 5}
    assert args_of(tp, f"s.name = 'free' AND s.ts = {rt(T0 + 50)}") == {"ptr": 0x9999, "unmatched": 1}
    assert args_of(tp, f"s.name = 'free' AND s.ts = {rt(T0 + 60)}") == {"ptr": 0}
    assert args_of(tp, f"s.name = 'free' AND s.ts = {rt(T0 + 310)}") == {"ptr": 0x3000, "freed_alloc_id": 3}


def test_api_and_copy_slice_args(tp):
    assert args_of(tp, "s.name = 'hipMalloc'") == {
        "runtime": "hip", "op": "alloc", "result": 0, "device": 0, "call_id": 1, "ptr": 0x700000, "size": 4096,
        "size_fmt": "4.0 KiB", "mem_kind": "device", "flags": 0, "alloc_id": 6}
    assert args_of(tp, "s.name = 'hipFree'") == {
        "runtime": "hip", "op": "free", "result": 0, "device": 0, "call_id": 8, "ptr": 0x700000, "size": 4096,
        "size_fmt": "4.0 KiB", "mem_kind": "device", "freed_alloc_id": 6}
    api = args_of(tp, f"s.category = 'memq.api' AND s.ts = {rt(T0 + 130)}")
    # a copy's endpoints are on its memq.copy slice (same call_id), not again on its API call
    assert api == {"runtime": "hip", "op": "copy", "result": 0, "device": 0, "stream": 7, "call_id": 3}
    assert args_of(tp, "s.name = 'hipMemset'") == {"runtime": "hip", "op": "set", "result": 0, "device": 0,
                                                    "stream": 0, "call_id": 5}
    # Default kind: direction from the endpoints (host block 3 -> device block 6)
    assert args_of(tp, f"s.category = 'memq.copy' AND s.ts = {rt(T0 + 130)}") == {
        "api": "hipMemcpyAsync", "call_id": 3, "pid": A, "tid": A, "dst": 0x700010, "src": 0x3008, "bytes": 16,
        "bytes_fmt": "16 B", "copy_kind": 4, "copy_kind_name": "hipMemcpyDefault", "stream": 7, "device": 0,
        "result": 0, "dst_alloc_id": 6, "src_alloc_id": 3, "dst_mem": "device", "src_mem": "host",
        "direction": "HtoD"}
    assert args_of(tp, "s.category = 'memq.copy' AND s.name = 'DtoH'")["dst_mem"] == "pinned"
    assert args_of(tp, "s.category = 'memq.copy' AND s.name = 'DtoH'")["tid"] == A + 1
    assert args_of(tp, "s.category = 'memq.set'") == {
        "api": "hipMemset", "call_id": 5, "pid": A, "tid": A, "dst": 0x700000, "bytes": 64, "bytes_fmt": "64 B",
        "stream": 0, "device": 0, "result": 0, "value": 0xAB, "dst_alloc_id": 6, "dst_mem": "device"}
    # a failed copy has no memq.copy slice: its endpoints stay on the API call
    assert args_of(tp, "s.name = 'hipMemcpy'") == {
        "runtime": "hip", "op": "copy", "result": 1, "device": 0, "stream": 0, "call_id": 7, "dst": 0x700000,
        "src": 0x4000,
        "bytes": 8, "bytes_fmt": "8 B", "copy_kind": 1, "copy_kind_name": "hipMemcpyHostToDevice"}


def test_meta_device_binary_and_lost_args(tp):
    assert args_of(tp, "s.category = 'memq.meta'") == {
        "source": "lttng", "converter_version": __import__("ctf2perfetto").__version__, "hostname": "node1",
        "lost_events": 5, "lost_packets": 2, "unmatched_frees": 1, "skipped_events": 3, "events": len(ROWS),
        "events_read": 0, "missing_events": 0, "missing_packets": 0, "missing_streams": 0, "dropped_packets": 0,
        "dropped_bytes": 0, "dropped_bytes_fmt": "0 B"}
    assert args_of(tp, "s.category = 'memq.device'") == {
        "pid": A, "device": 0, "runtime": "hip", "name": "AMD Instinct MI300A", "integrated": 1, "unified_memory": 1}
    assert args_of(tp, "s.category = 'memq.binary'") == {
        "pid": A, "baddr": 0x400000, "memsz": 0x2000, "memsz_fmt": "8.0 KiB", "path": "/usr/bin/python3",
        "build_id": "abcd"}
    assert args_of(tp, "s.name = 'lost events'") == {"count": 5, "stream": "ust/uid/0/64-bit/chan_1"}
    assert args_of(tp, "s.name = 'lost packets'") == {"count": 2, "stream": "ust/uid/0/64-bit/chan_0"}


def test_memq_host_heap_instants(tmp_path):
    """memq's heap wrappers: host_alloc / host_free named by their function (a function the format does not know
    by its kind), usable and requested sizes with their twins, host_small totals moving the host counter, and
    the recording's heap settings in `memq trace info`."""
    log = [dict(ts=T0, kind=K.HOST_ALLOC, api="aligned_alloc", pid=A, tid=A, ptr=0x10000, size=8192, aux2=8000),
           dict(ts=T0 + 10, kind=K.HOST_SMALL, pid=A, tid=A, size=3000, aux=3, aux2=1, flags=1000),
           dict(ts=T0 + 20, kind=K.HOST_FREE, api="free", pid=A, tid=A, ptr=0x10000, size=8192),
           dict(ts=T0 + 30, kind=K.HOST_ALLOC, api="mystery_alloc", pid=A, tid=A, ptr=0x20000, size=4096, aux2=4096)]
    info = TraceInfo(clock_offset_ns=OFFSET, record={"enabled": {"host": {"source": "memq", "min_size": 4096}}})
    out = tmp_path / "host.pftrace"
    summary = write_trace([EventBatch.from_rows(log)], info, out)
    assert (summary.allocations, summary.small_allocations, summary.small_frees) == (2, 3, 1)
    with open_trace(out) as engine:
        assert engine.query(IMPORT_PROBLEMS).empty
        assert rows(engine, "SELECT ts, name FROM slice WHERE category = 'memq.heap' ORDER BY ts") == [
            (rt(T0), "aligned_alloc"), (rt(T0 + 10), "host_small"), (rt(T0 + 20), "free"), (rt(T0 + 30), "malloc")]
        assert args_of(engine, "s.name = 'aligned_alloc'") == {"ptr": 0x10000, "size": 8192, "size_fmt": "8.0 KiB",
                                                               "requested": 8000, "requested_fmt": "7.8 KiB",
                                                               "alloc_id": 1}
        assert args_of(engine, "s.name = 'host_small'") == {"alloc_count": 3, "alloc_bytes": 3000,
                                                            "alloc_bytes_fmt": "2.9 KiB", "free_count": 1,
                                                            "free_bytes": 1000, "free_bytes_fmt": "1000 B"}
        assert args_of(engine, "s.name = 'free'") == {"ptr": 0x10000, "size": 8192, "size_fmt": "8.0 KiB",
                                                      "freed_alloc_id": 1}
        meta = args_of(engine, "s.category = 'memq.meta'")
        assert (meta["host_source"], meta["host_min_size"], meta["host_min_size_fmt"]) == ("memq", 4096, "4.0 KiB")
        host = rows(engine, """SELECT c.ts, CAST(c.value AS INT) FROM counter c JOIN counter_track t
                               ON c.track_id = t.id WHERE t.name = 'Host heap live bytes' ORDER BY c.ts""")
        assert host == [(rt(T0), 8192), (rt(T0 + 10), 10192), (rt(T0 + 20), 2000), (rt(T0 + 30), 6096)]


def test_counters(tp):
    got = rows(tp, """
        SELECT COALESCE(p.pid, -1), t.name, t.unit, c.ts, CAST(c.value AS INT) FROM counter c
        JOIN counter_track t ON c.track_id = t.id LEFT JOIN process_counter_track pt ON pt.id = t.id
        LEFT JOIN process p USING (upid) ORDER BY t.name, p.pid, c.ts""")
    assert got == [
        (-1, "GPU 0 device live bytes", "bytes", rt(T0 + 100), 4096),
        (-1, "GPU 0 device live bytes", "bytes", rt(T0 + 280), 0),  # freed at the call's start
        (A, "Host heap live bytes", "bytes", rt(T0), 100), (A, "Host heap live bytes", "bytes", rt(T0 + 10), 148),
        (A, "Host heap live bytes", "bytes", rt(T0 + 20), 248), (A, "Host heap live bytes", "bytes", rt(T0 + 30), 312),
        (A, "Host heap live bytes", "bytes", rt(T0 + 310), 112),
        (B, "Host heap live bytes", "bytes", rt(T0 + 40), 32),
        (A, "Pinned live bytes", "bytes", rt(T0 + 120), 1024),
    ]
    parents = rows(tp, """SELECT t.name, p.name FROM track t JOIN track p ON t.parent_id = p.id
                          WHERE t.name = 'GPU 0 device live bytes'""")
    assert parents == [("GPU 0 device live bytes", "GPU 0")]


def test_flows(tp):
    got = rows(tp, """
        SELECT so.name, EXTRACT_ARG(so.arg_set_id, 'debug.alloc_id'), si.name, si.category FROM flow f
        JOIN slice so ON f.slice_out = so.id JOIN slice si ON f.slice_in = si.id ORDER BY si.ts, so.ts""")
    assert got == [
        ("malloc", 1, "realloc", "memq.heap"),  # allocation -> free
        ("realloc", 3, "HtoD", "memq.copy"), ("hipMalloc", 6, "HtoD", "memq.copy"),  # allocation -> copy
        ("hipMalloc", 6, "DtoH", "memq.copy"), ("hipHostMalloc", 7, "DtoH", "memq.copy"),
        ("hipMalloc", 6, "memset", "memq.set"),
        ("hipMalloc", 6, "hipFree", "memq.api"),
        ("realloc", 3, "free", "memq.heap"),
    ]


def test_tracks(tp):
    assert rows(tp, "SELECT pid, name FROM process WHERE pid > 0 ORDER BY pid") == [(A, "python3"), (B, "worker")]
    assert rows(tp, "SELECT tid, name FROM thread WHERE tid > 0 ORDER BY tid") == [
        (A, "python3"), (A + 1, "loader"), (B, "worker")]
    streams = rows(tp, """SELECT t.name, p.name FROM track t JOIN track p ON t.parent_id = p.id
                          WHERE t.name GLOB 'hip stream*' ORDER BY t.name""")
    assert streams == [("hip stream 0x0", "GPU 0"), ("hip stream 0x7", "GPU 0"), ("hip stream 0x7", "GPU 0")]


def test_byte_identical_and_snapshot(written, tmp_path):
    again = tmp_path / "again.pftrace"
    write_trace([EventBatch.from_rows(ROWS[:9]), EventBatch.from_rows(ROWS[9:])], INFO, again)
    assert again.read_bytes() == written[0].read_bytes()
    umask = os.umask(0o022)
    os.umask(umask)
    assert again.stat().st_mode & 0o777 == 0o666 & ~umask
    trace = pb.Trace.FromString(again.read_bytes())
    first = trace.packet[0]
    assert first.WhichOneof("data") == "clock_snapshot"
    assert first.clock_snapshot.primary_trace_clock == pb.BUILTIN_CLOCK_REALTIME
    assert [(c.clock_id, c.timestamp) for c in first.clock_snapshot.clocks] == [
        (pb.BUILTIN_CLOCK_MONOTONIC, T0), (pb.BUILTIN_CLOCK_REALTIME, T0 + OFFSET)]
    assert all(p.trusted_packet_sequence_id != 0 for p in trace.packet)
    events = [p for p in trace.packet if p.HasField("track_event")]
    assert events and all(p.sequence_flags == 0 for p in events)  # their sequence's first packet cleared it
    # every sequence with events is cleared once, before its first event, with the sequence's incremental
    # clock as its default: declared (a clock snapshot on the sequence) equal to MONOTONIC, each event's
    # timestamp a delta from the previous one's
    first_event = {}
    for i, p in enumerate(trace.packet):
        if p.HasField("track_event"):
            first_event.setdefault(p.trusted_packet_sequence_id, i)
    cleared = [(i, p) for i, p in enumerate(trace.packet)
               if p.sequence_flags & pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED]
    assert sorted(p.trusted_packet_sequence_id for _, p in cleared) == sorted(first_event)
    assert len(first_event) == 4  # the memq sequence, and one per thread with heap calls
    for i, p in cleared:
        assert i < first_event[p.trusted_packet_sequence_id]
        assert p.trace_packet_defaults.timestamp_clock_id == N.CLOCK_INCREMENTAL
    declared = {p.trusted_packet_sequence_id: [(c.clock_id, c.timestamp, c.is_incremental)
                                               for c in p.clock_snapshot.clocks]
                for i, p in enumerate(trace.packet) if i and p.HasField("clock_snapshot")}
    assert declared == {seq: [(N.CLOCK_INCREMENTAL, 0, True), (pb.BUILTIN_CLOCK_MONOTONIC, 0, False)]
                        for seq in first_event}
    # the converter's flows are small varints with their kind in the low bits; tagged ones (verdict) fixed64
    small = [f for p in events for f in (*p.track_event.flow_ids_old, *p.track_event.terminating_flow_ids_old)]
    fixed = [f for p in events for f in (*p.track_event.flow_ids, *p.track_event.terminating_flow_ids)]
    assert small and all(f < 1 << 16 and f & 3 in (N.FLOW_ALLOC, N.FLOW_COPY) for f in small)
    assert fixed and all(f >= N.FLOW_VARINT_LIMIT for f in fixed)
    clock = dict.fromkeys(first_event, 0)
    for p in events:
        # a step back in time is a negative delta: uint64 on the wire, two's complement
        clock[p.trusted_packet_sequence_id] = (clock[p.trusted_packet_sequence_id] + p.timestamp) % (1 << 64)
        assert T0 <= clock[p.trusted_packet_sequence_id] <= T0 + 370  # the rows' times (the last loss ends there)


def test_recorder_clock_readings_and_info_callable(tmp_path):
    readings = [dict(where="start", realtime=5_000_000_000, monotonic=1_000, boottime=2_000),
                dict(where="end", realtime=6_000_000_000, monotonic=1_000_001_000, boottime=1_000_002_000)]
    info = TraceInfo(clock_offset_ns=123, clock_readings=readings, processes={A: "late name"})
    seen = []

    def batches():
        yield EventBatch.from_rows(ROWS[:2])
        seen.append("done")

    out = tmp_path / "r.pftrace"
    summary = write_trace(batches(), lambda: (seen.append("info"), info)[1], out)
    assert seen == ["done", "info"] and summary.clock_source == "recorder" and summary.warnings == []
    with open_trace(out) as engine:
        assert engine.query(IMPORT_PROBLEMS).empty
        # packet 0's snapshot (the first): the others start each sequence's incremental clock
        snap = rows(engine, "SELECT clock_name, clock_value FROM clock_snapshot WHERE snapshot_id = "
                            "(SELECT MIN(snapshot_id) FROM clock_snapshot) ORDER BY clock_name")
        assert snap == [("BOOTTIME", 2_000), ("MONOTONIC", 1_000), ("REALTIME", 5_000_000_000)]
        assert rows(engine, "SELECT ts FROM slice WHERE name = 'malloc'") == [(T0 - 1_000 + 5_000_000_000,)]
        assert rows(engine, f"SELECT name FROM process WHERE pid = {A}") == [("late name",)]


def test_extra_packets_join_the_same_tracks(tmp_path):
    packet = pb.TracePacket(timestamp=rt(T0 + 5), timestamp_clock_id=pb.BUILTIN_CLOCK_REALTIME,
                            trusted_packet_sequence_id=777)
    packet.track_event.type = pb.TrackEvent.TYPE_INSTANT
    packet.track_event.name = "op"
    packet.track_event.track_uuid = thread_uuid(A, A)
    other = pb.TracePacket(timestamp=rt(T0 + 6), timestamp_clock_id=pb.BUILTIN_CLOCK_REALTIME,
                           trusted_packet_sequence_id=777)
    other.track_event.type = pb.TrackEvent.TYPE_INSTANT
    other.track_event.name = "elsewhere"
    other.track_event.track_uuid = thread_uuid(99, 98)
    proc = pb.TracePacket(trusted_packet_sequence_id=777)
    proc.track_event.type = pb.TrackEvent.TYPE_INSTANT
    out = tmp_path / "x.pftrace"
    write_trace([EventBatch.from_rows(ROWS[:1])], INFO, out,
                extra_packets=[p.SerializeToString() for p in (packet, other)],
                extra_processes={99: "kineto-only"}, extra_threads={(99, 98): "ghost"})
    with open_trace(out) as engine:
        assert engine.query(IMPORT_PROBLEMS).empty, engine.query(IMPORT_PROBLEMS).to_string()
        got = rows(engine, """SELECT s.name, t.tid, t.name, p.pid, p.name FROM slice s
                              JOIN thread_track tt ON s.track_id = tt.id JOIN thread t USING (utid)
                              JOIN process p USING (upid) ORDER BY s.ts""")
    assert got == [("malloc", A, "python3", A, "python3"), ("op", A, "python3", A, "python3"),
                   ("elsewhere", 98, "ghost", 99, "kineto-only")]
    assert process_uuid(A) != thread_uuid(A, A)


def test_failure_leaves_nothing(tmp_path):
    out = tmp_path / "f.pftrace"
    out.write_bytes(b"previous")

    def broken():
        yield EventBatch.from_rows(ROWS[:3])
        raise MemqError("trace.ctf: garbage inside a packet")

    with pytest.raises(MemqError, match="garbage"):
        write_trace(broken(), INFO, out)
    assert out.read_bytes() == b"previous"  # untouched, and no temporary files beside it
    assert sorted(os.listdir(tmp_path)) == ["f.pftrace"]
    with pytest.raises(MemqError, match="does not exist"):
        write_trace([EventBatch.from_rows(ROWS[:1])], INFO, tmp_path / "missing" / "x.pftrace")


def test_empty_log_and_many_batches_are_valid(tmp_path):
    out = tmp_path / "e.pftrace"
    summary = write_trace([], TraceInfo(), out)
    assert summary.total_events == 0
    with open_trace(out) as engine:
        assert engine.query(IMPORT_PROBLEMS).empty
    # one row per batch: the same trace as one batch
    one, many = tmp_path / "one.pftrace", tmp_path / "many.pftrace"
    write_trace([EventBatch.from_rows(ROWS)], INFO, one)
    names: list[str] = []
    write_trace([EventBatch.from_rows([r], names) for r in ROWS], INFO, many)
    with open_trace(one) as a, open_trace(many) as b:
        sql = """SELECT s.ts, s.dur, s.name, a.key, a.display_value FROM slice s LEFT JOIN args a USING (arg_set_id)
                 ORDER BY s.ts, s.name, a.key"""
        assert rows(a, sql) == rows(b, sql)
        csql = "SELECT c.ts, c.value FROM counter c ORDER BY c.ts, c.value"
        assert rows(a, csql) == rows(b, csql)


def test_a_snapshot_of_thousands_of_live_allocations_keeps_every_one(tmp_path):
    """A window's snapshot writes every live allocation at its opening time on one thread track. As instants
    trace_processor nested them, and past 512 deep it dropped their arguments (allocation ids): memq.live
    markers are zero-length slices side by side."""
    n = 2000
    rows = [dict(kind=K.WINDOW, ts=100, pid=1, tid=1, aux=1, aux2=1, api="")]
    rows += [dict(kind=K.LIVE, ts=100, pid=1, tid=1, ptr=4096 * (i + 1), size=i + 1, mem=M.HOST, api="malloc")
             for i in range(n)]
    rows += [dict(kind=K.FREE, ts=200 + i, pid=1, tid=1, ptr=4096 * (i + 1)) for i in range(n)]
    out = tmp_path / "t.pftrace"
    write_trace([EventBatch.from_rows(rows)], TraceInfo(), out)
    with open_trace(out) as tp:
        live = tp.query("""SELECT COUNT(*) AS n, COUNT(EXTRACT_ARG(arg_set_id, 'debug.alloc_id')) AS ids,
            SUM(EXTRACT_ARG(arg_set_id, 'debug.size')) AS bytes, MAX(depth) AS depth, MAX(dur) AS dur
            FROM slice WHERE category = 'memq.live'""").iloc[0]
        assert (live.n, live.ids, live.bytes, live.depth, live.dur) == (n, n, n * (n + 1) // 2, 0, 0)
        freed = tp.query("""INCLUDE PERFETTO MODULE memq.allocations;
            SELECT COUNT(*) AS n FROM memq_allocation WHERE live_at_start AND end_ts IS NOT NULL""")["n"][0]
        assert freed == n


def test_counter_samples_at_one_time_keep_row_order(tmp_path):
    """A heap row's counter sample rides on its instant, written before the other rows' samples. Where a
    memq.live at a window's start and a free of it share that time, the free's value (the later row) must
    still be the counter's value then: the samples of one time go out in row order."""
    rows = [dict(kind=K.WINDOW, ts=100, pid=1, tid=1, aux=1, aux2=1, api=""),
            dict(kind=K.LIVE, ts=100, pid=1, tid=1, ptr=0x1000, size=17, mem=M.HOST, api="malloc"),
            dict(kind=K.FREE, ts=100, pid=1, tid=1, ptr=0x1000),
            dict(kind=K.MALLOC, ts=200, pid=1, tid=1, ptr=0x2000, size=5)]
    out = tmp_path / "t.pftrace"
    write_trace([EventBatch.from_rows(rows)], TraceInfo(), out)
    with open_trace(out) as tp:
        values = tp.query("""SELECT c.ts, CAST(c.value AS INT) AS v FROM counter c
            JOIN process_counter_track t ON t.id = c.track_id WHERE t.name = 'Host heap live bytes'
            ORDER BY c.ts, c.id""")
        assert [tuple(r) for r in values.itertuples(index=False)][-2:] == [(100, 0), (200, 5)]
        peak = tp.query("""INCLUDE PERFETTO MODULE memq.summary;
            SELECT peak_live_bytes FROM memq_summary_allocation WHERE kind = 'host'""")
        assert peak["peak_live_bytes"].tolist() == [5]
