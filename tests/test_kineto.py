"""Merging PyTorch-profiler (Kineto) traces into the converted LTTng trace.

Real inputs: the Kineto traces in tests/data/kineto (CUDA, ROCm MI250) merged
with the real LTTng trace tests/data/ctf/dbg through the `ctf2perfetto` CLI,
read back with the real trace_processor. Expected values are computed here from
the JSON with plain Python.
"""
from __future__ import annotations

import gzip
import json
import subprocess
from collections import Counter
from decimal import Decimal
from pathlib import Path

import pytest

from ctf2perfetto.engine import open_trace

KINETO_FILES = [
    "mi250_minitoy_train_ROCm6_2_kineto.json.gz",
    "benchmark_result_493459_1694039959_trace.json.gz",
    "base.json.gz",
    "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
]
GPU_CATEGORIES = {"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation"}


def convert(trace_dir: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ctf2perfetto", str(trace_dir), "-o", str(out), *extra],
                          capture_output=True, text=True, timeout=300)


def read_kineto(path: Path) -> dict:
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    return json.loads(raw, parse_float=Decimal)


def expected_ns(doc: dict, ts) -> int:
    """baseTimeNanoseconds + ts*1000, rounded to the ns (ts in µs, exact decimal)."""
    return int(doc.get("baseTimeNanoseconds", 0)) + int((Decimal(str(ts)) * 1000).to_integral_value())


@pytest.fixture(scope="module")
def merged(test_data: Path, tmp_path_factory) -> dict[str, tuple[Path, subprocess.CompletedProcess]]:
    out_dir = tmp_path_factory.mktemp("kineto")
    result = {}
    for name in KINETO_FILES:
        out = out_dir / f"{name}.pftrace"
        proc = convert(test_data / "ctf" / "dbg", out, "--kineto", str(test_data / "kineto" / name))
        assert proc.returncode == 0, proc.stderr
        result[name] = (out, proc)
    return result


@pytest.mark.parametrize("name", KINETO_FILES)
def test_shared_kineto_traces_merge_on_realtime(name: str, merged, test_data: Path) -> None:
    out, proc = merged[name]
    doc = read_kineto(test_data / "kineto" / name)
    events = [e for e in doc["traceEvents"] if e.get("ph") in ("X", "i", "I") and e.get("cat")]
    expected = Counter((e["cat"], expected_ns(doc, e["ts"])) for e in events)
    with open_trace(out) as engine:
        assert engine.import_problems().empty, engine.import_problems().to_string()
        rows = engine.query("SELECT category, ts FROM slice WHERE category NOT LIKE 'memq.%'")
        got = Counter(zip(rows["category"], rows["ts"].astype(int)))
        assert got == expected
        # The LTTng events are still there, on the same timeline (REALTIME ns, year > 2020).
        lttng = engine.query("SELECT count(*) AS n, min(ts) AS t0 FROM slice WHERE category = 'memq.heap'")
        assert lttng["n"][0] > 0 and lttng["t0"][0] > 1_600_000_000 * 10**9
    # None of these pids ran in the LTTng trace: said on stderr, events kept.
    assert "match no process of the LTTng trace" in proc.stderr


def test_memcpy_args_and_gpu_stream_tracks(merged, test_data: Path) -> None:
    name = "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
    doc = read_kineto(test_data / "kineto" / name)
    copies = [e for e in doc["traceEvents"] if e.get("cat") == "gpu_memcpy"]
    by_device_stream = Counter((e["args"]["device"], e["args"]["stream"]) for e in copies)
    with open_trace(merged[name][0]) as engine:
        rows = engine.query("""
            SELECT EXTRACT_ARG(s.arg_set_id, 'debug.bytes') AS bytes, s.name, t.name AS track, p.name AS gpu
            FROM slice s JOIN track t ON s.track_id = t.id LEFT JOIN track p ON t.parent_id = p.id
            WHERE s.category = 'gpu_memcpy'""")
    assert sorted(rows["bytes"].astype(int)) == sorted(int(e["args"]["bytes"]) for e in copies)
    assert Counter(rows["name"]) == Counter(e["name"] for e in copies)
    got = Counter(zip(rows["gpu"], rows["track"]))
    assert got == {(f"GPU {d}", f"kineto stream {s}"): n for (d, s), n in by_device_stream.items()}


def test_flows_join_runtime_calls_to_gpu_work(merged, test_data: Path) -> None:
    name = "mi250_minitoy_train_ROCm6_2_kineto.json.gz"
    doc = read_kineto(test_data / "kineto" / name)
    phases: dict = {}
    for e in doc["traceEvents"]:
        if e.get("ph") in ("s", "f"):
            phases.setdefault((e["cat"], e["id"]), set()).add(e["ph"])
    complete = sum(1 for p in phases.values() if p == {"s", "f"})
    with open_trace(merged[name][0]) as engine:
        flows = engine.query("""
            SELECT a.category AS src, b.category AS dst FROM flow f
            JOIN slice a ON f.slice_out = a.id JOIN slice b ON f.slice_in = b.id
            WHERE a.category NOT LIKE 'memq.%'""")
    assert len(flows) == complete
    pairs = Counter(zip(flows["src"], flows["dst"]))
    # Every runtime launch/copy reaches GPU work on the device (ac2g flows).
    runtime_to_gpu = sum(n for (src, dst), n in pairs.items() if src == "cuda_runtime" and dst in GPU_CATEGORIES)
    ac2g = sum(1 for (cat, _), p in phases.items() if cat == "ac2g" and p == {"s", "f"})
    assert runtime_to_gpu == ac2g > 0


def test_memory_instants_keep_their_args(tmp_path: Path, test_data: Path) -> None:
    doc = {"baseTimeNanoseconds": 1_700_000_000_000_000_000, "traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "aten::empty", "pid": 4242, "tid": 4243, "ts": 10.5, "dur": 3.25,
         "args": {"Input Dims": [[2, 3]], "External id": 7}},
        {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 4242, "tid": 4243,
         "ts": 11.001, "args": {"Device Type": 0, "Device Id": -1, "Addr": 140000000000000, "Bytes": 4096,
                                "Total Allocated": 4096, "Total Reserved": 0}},
    ]}
    kineto = tmp_path / "profile.json"
    kineto.write_text(json.dumps(doc))
    out = tmp_path / "out.pftrace"
    proc = convert(test_data / "ctf" / "dbg", out, "--kineto", str(kineto))
    assert proc.returncode == 0, proc.stderr
    with open_trace(out) as engine:
        mem = engine.query("""
            SELECT s.ts, s.dur, EXTRACT_ARG(s.arg_set_id, 'debug.Bytes') AS bytes,
                   EXTRACT_ARG(s.arg_set_id, 'debug.Addr') AS addr, t.tid, p.pid
            FROM slice s JOIN thread_track tt ON s.track_id = tt.id JOIN thread t USING (utid)
            JOIN process p USING (upid) WHERE s.name = '[memory]'""")
        op = engine.query("SELECT ts, dur, EXTRACT_ARG(arg_set_id, 'debug.Input Dims') AS dims FROM slice "
                          "WHERE name = 'aten::empty'")
    assert mem.to_dict("records") == [{"ts": 1_700_000_000_000_011_001, "dur": 0, "bytes": 4096,
                                       "addr": 140000000000000, "tid": 4243, "pid": 4242}]
    assert op.to_dict("records") == [{"ts": 1_700_000_000_000_010_500, "dur": 3250, "dims": "[[2,3]]"}]
    assert "4242" in proc.stderr  # the pid that matched nothing is named


BAD_INPUTS = {
    "missing": (None, 2, "Kineto trace not found"),
    "not_json": (b"this is not json", 1, "not a JSON Kineto trace"),
    "bad_gzip": (b"\x1f\x8b\x08\x00garbage", 1, "not a readable gzip file"),
    "no_trace_events": (b'{"schemaVersion": 1, "events": []}', 1, "no traceEvents"),
    "trace_events_not_list": (b'{"traceEvents": 3}', 1, "no traceEvents"),
    "bad_base_time": (b'{"traceEvents": [], "baseTimeNanoseconds": "soon"}', 1, "baseTimeNanoseconds"),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_kineto_input_is_one_line(case: str, tmp_path: Path, test_data: Path) -> None:
    content, code, message = BAD_INPUTS[case]
    kineto = tmp_path / "profile.json.gz"
    if content is not None:
        kineto.write_bytes(content)
    out = tmp_path / "out.pftrace"
    proc = convert(test_data / "ctf" / "dbg", out, "--kineto", str(kineto))
    assert proc.returncode == code
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and str(kineto) in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr
    assert not out.exists()


def test_unreadable_kineto_file(tmp_path: Path, test_data: Path) -> None:
    kineto = tmp_path / "profile.json"
    kineto.mkdir()  # a directory where a file is expected
    proc = convert(test_data / "ctf" / "dbg", tmp_path / "out.pftrace", "--kineto", str(kineto))
    assert proc.returncode == 2 and "is a directory" in proc.stderr


def test_runtime_calls_sit_under_their_thread(merged, test_data: Path) -> None:
    """cuda_runtime slices go on a `kineto runtime` child of the thread track of their pid/tid.

    trace_processor turns a child of a thread track into a thread track of the same thread."""
    name = "benchmark_result_493459_1694039959_trace.json.gz"
    doc = read_kineto(test_data / "kineto" / name)
    expected = Counter((e["pid"], e["tid"]) for e in doc["traceEvents"] if e.get("cat") == "cuda_runtime")
    with open_trace(merged[name][0]) as engine:
        rows = engine.query("""
            SELECT tt.name AS track, p.pid, th.tid FROM slice s JOIN thread_track tt ON s.track_id = tt.id
            JOIN thread th USING (utid) JOIN process p USING (upid)
            WHERE s.category = 'cuda_runtime'""")
    assert set(rows["track"]) == {"kineto runtime"}
    assert Counter(zip(rows["pid"], rows["tid"])) == expected


def test_packets_decode_with_the_perfetto_protos() -> None:
    """A Kineto event's packet reads back, field by field, with the protobuf library (decimals as doubles)."""
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

    from ctf2perfetto.importers.kineto.merge import event_packet

    args = {"neg": -5, "big": 1 << 63, "f": Decimal("0.25"), "ok": True, "s": "x", "dims": [[1, 2]], "none": None}
    packet = pb.TracePacket.FromString(event_packet(1_700_000_000_123_456_789, 12345, pb.TrackEvent.TYPE_SLICE_BEGIN,
                                                    "aten::mm", "cpu_op", args, [7], [9]))
    assert (packet.timestamp, packet.timestamp_clock_id) == (1_700_000_000_123_456_789, 1)
    event = packet.track_event
    assert (event.type, event.track_uuid, event.name, list(event.categories)) == (1, 12345, "aten::mm", ["cpu_op"])
    assert (list(event.flow_ids), list(event.terminating_flow_ids)) == ([7], [9])
    values = {a.name: a.WhichOneof("value") for a in event.debug_annotations}
    assert values == {"neg": "int_value", "big": "uint_value", "f": "double_value", "ok": "bool_value",
                      "s": "string_value", "dims": "string_value"}
    by_name = {a.name: a for a in event.debug_annotations}
    assert by_name["neg"].int_value == -5 and by_name["big"].uint_value == 1 << 63
    assert by_name["f"].double_value == 0.25 and by_name["dims"].string_value == "[[1,2]]"


def test_odd_events_are_counted_not_fatal(tmp_path: Path, test_data: Path) -> None:
    """Events the merge cannot place are counted on stderr; the rest are merged."""
    doc = {"traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "good", "pid": "4242", "tid": 4243, "ts": "1700000000000000.5",
         "dur": 2, "args": ["not", "a", "dict"]},
        {"ph": "X", "cat": "cpu_op", "name": "no ts", "pid": 4242, "tid": 4243, "dur": 1},
        {"ph": "X", "cat": "cpu_op", "name": "negative", "pid": 4242, "tid": 4243, "ts": 1700000000000001, "dur": -3},
        {"ph": "B", "cat": "cpu_op", "name": "begin", "pid": 4242, "tid": 4243, "ts": 1700000000000001},
        {"ph": "i", "name": "[memory]", "pid": 4242, "tid": 4243, "ts": 1700000000000001, "args": None},
        "not an event",
    ]}
    kineto = tmp_path / "odd.json"
    kineto.write_text(json.dumps(doc))
    out = tmp_path / "odd.pftrace"
    proc = convert(test_data / "ctf" / "dbg", out, "--kineto", str(kineto))
    assert proc.returncode == 0, proc.stderr
    assert "1 with a bad dur, 1 with phase 'B', 1 without a valid ts" in proc.stderr
    with open_trace(out) as engine:
        assert engine.import_problems().empty
        rows = engine.query("SELECT name, ts, dur, IFNULL(EXTRACT_ARG(arg_set_id, 'debug.args'), '-') AS args "
                            "FROM slice WHERE category = 'cpu_op' OR name = '[memory]' ORDER BY name")
    assert rows.to_dict("records") == [
        {"name": "[memory]", "ts": 1_700_000_000_000_001_000, "dur": 0, "args": "-"},
        {"name": "good", "ts": 1_700_000_000_000_000_500, "dur": 2000, "args": '["not","a","dict"]'}]
