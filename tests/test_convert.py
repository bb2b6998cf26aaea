"""`ctf2perfetto` end to end: real LTTng traces and live recordings, checked in trace_processor
against an independent reading of the same CTF (bt2 Python bindings, plain-Python live-bytes
replay) or against what the recorded workload logged; every bad input through the CLI.
"""
from __future__ import annotations

import os
import shutil
import struct
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from ctf2perfetto.engine import open_trace

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_write import IMPORT_PROBLEMS  # noqa: E402

LIBC = ("malloc", "calloc", "realloc", "memalign", "posix_memalign", "free")
REAL = ("dbg", "disc", "ovw", "perpid", "trunc_noidx")


def convert(trace: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ctf2perfetto", str(trace), "-o", str(out), *extra], capture_output=True, text=True,
                          timeout=300)


def bt2_reading(bt2, trace: Path) -> dict:
    """Everything the tests compare, read event by event with bt2 and replayed in plain Python.

    The replay: a dict (pid, address) -> size; an allocation at an address overwrites what
    was there; free/realloc of an address not in the dict is unmatched. memq's host events:
    host_alloc / host_free are an allocation / a free of their usable size (counted under
    the function's name: the heap instant's name), host_small moves the process's live
    bytes by bytes allocated minus bytes freed.
    """
    live: dict[tuple[int, int], int] = {}
    per_pid: Counter = Counter()
    timeline: list[tuple[int, int, int]] = []  # (ts, pid, live bytes of pid after the event)
    counts: Counter = Counter()
    facts = {"bytes": 0, "unmatched": 0, "lost_events": 0, "lost_packets": 0, "lost_messages": 0,
             "procnames": {}}
    env_pid: dict[str, int] = {}

    def alloc(pid, ptr, size):
        if ptr:
            per_pid[pid] += size - live.get((pid, ptr), 0)
            live[(pid, ptr)] = size
            facts["bytes"] += size

    def free(pid, ptr):
        if ptr:
            if (pid, ptr) in live:
                per_pid[pid] -= live.pop((pid, ptr))
            else:
                facts["unmatched"] += 1

    for msg in bt2.TraceCollectionMessageIterator(str(trace)):
        kind = type(msg)
        if kind is bt2._StreamBeginningMessageConst:
            env = msg.stream.trace.environment
            env_pid[msg.stream.name] = int(env["vpid"]) if "vpid" in env else 0
            if "procname" in env and "vpid" in env:
                facts["procnames"][int(env["vpid"])] = str(env["procname"])
        elif kind in (bt2._DiscardedEventsMessageConst, bt2._DiscardedPacketsMessageConst):
            facts["lost_packets" if kind is bt2._DiscardedPacketsMessageConst else "lost_events"] += msg.count
            facts["lost_messages"] += 1
        elif kind is bt2._EventMessageConst:
            ev = msg.event
            name = ev.name.removeprefix("lttng_ust_libc:")
            host = ev.name if ev.name in ("memq:host_alloc", "memq:host_free", "memq:host_small") else None
            if name not in LIBC and not host:
                continue
            f = {k: int(v) for k, v in ev.payload_field.items()}
            ctx = ev.common_context_field
            pid = int(ctx["vpid"]) if ctx is not None and "vpid" in ctx else env_pid[ev.stream.name]
            if host:
                counts[str(ev.payload_field["api"].labels[0]) if host != "memq:host_small" else "host_small"] += 1
                if host == "memq:host_alloc":
                    alloc(pid, f["ptr"], f["size"])
                elif host == "memq:host_free":
                    free(pid, f["ptr"])
                else:
                    per_pid[pid] += f["alloc_bytes"] - f["free_bytes"]
                timeline.append((msg.default_clock_snapshot.ns_from_origin, pid, per_pid[pid]))
                continue
            counts[name] += 1
            if name in ("malloc", "memalign"):
                alloc(pid, f["ptr"], f["size"])
            elif name == "calloc":
                alloc(pid, f["ptr"], f["nmemb"] * f["size"])
            elif name == "posix_memalign":
                if f["result"] == 0:
                    alloc(pid, f["out_ptr"], f["size"])
            elif name == "realloc":
                if f["in_ptr"] and (f["ptr"] or f["size"] == 0):
                    free(pid, f["in_ptr"])
                alloc(pid, f["ptr"], f["size"])
            else:
                free(pid, f["ptr"])
            timeline.append((msg.default_clock_snapshot.ns_from_origin, pid, per_pid[pid]))
    facts.update(counts=dict(counts), final=dict(per_pid), timeline=timeline)
    return facts


@pytest.fixture(scope="module")
def real(test_data, bt2, tmp_path_factory):
    """name -> (converter stderr, trace_processor rows, bt2 reading) for every real trace."""
    out_dir = tmp_path_factory.mktemp("real")
    result = {}
    for name in REAL:
        trace = test_data / "ctf" / name
        out = out_dir / f"{name}.pftrace"
        proc = convert(trace, out)
        assert proc.returncode == 0, proc.stderr
        reading = bt2_reading(bt2, trace)
        with open_trace(out) as tp:
            got = {
                "problems": tp.query(IMPORT_PROBLEMS),
                "counts": dict(tp.query("SELECT name, count(*) AS n FROM slice WHERE category = 'memq.heap' "
                                        "GROUP BY name").itertuples(index=False)),
                "bytes": int(tp.query("SELECT COALESCE(SUM(EXTRACT_ARG(arg_set_id, 'debug.size')), 0) AS b "
                                      "FROM slice WHERE EXTRACT_ARG(arg_set_id, 'debug.alloc_id') IS NOT NULL")
                             ["b"][0]),
                "samples": [tuple(r) for r in tp.query("""
                    SELECT c.ts, p.pid, CAST(c.value AS INT) FROM counter c
                    JOIN process_counter_track t ON c.track_id = t.id JOIN process p USING (upid)
                    WHERE t.name = 'Host heap live bytes' ORDER BY c.ts, c.id""").itertuples(index=False)],
                "meta": dict(tp.query("""SELECT substr(a.key, 7) AS k, a.int_value FROM slice s JOIN args a USING
                    (arg_set_id) WHERE s.category = 'memq.meta' AND a.value_type != 'string'""")
                             .itertuples(index=False)),
                "lost": [tuple(r) for r in tp.query("""
                    SELECT name, count(*), SUM(EXTRACT_ARG(arg_set_id, 'debug.count')) FROM slice
                    WHERE category = 'memq.lost' GROUP BY name""").itertuples(index=False)],
                "processes": dict(tp.query("SELECT pid, name FROM process WHERE upid IN (SELECT thread.upid FROM "
                                           "thread JOIN thread_track USING (utid) JOIN slice ON slice.track_id = "
                                           "thread_track.id)").itertuples(index=False)),
            }
        result[name] = (proc.stderr, got, reading)
    return result


@pytest.mark.parametrize("name", REAL)
def test_real_trace_matches_the_bt2_reading(real, name):
    stderr, got, reading = real[name]
    assert got["problems"].empty, got["problems"].to_string()
    assert got["counts"] == reading["counts"]
    assert got["bytes"] == reading["bytes"]
    assert got["meta"]["unmatched_frees"] == reading["unmatched"]
    assert got["meta"]["events"] == sum(reading["counts"].values()) + reading["lost_messages"]
    # final live bytes per process: the last sample of each process counter
    final = {}
    for _ts, pid, value in got["samples"]:
        final[pid] = value
    assert final == {pid: v for pid, v in reading["final"].items() if pid in final}
    assert set(final) == {pid for pid, _ in reading["final"].items()}
    # counter values at chosen times: after every event at a time no other event shares
    tl = reading["timeline"]
    times = [tl[i][0] for i in range(1, len(tl) - 1) if tl[i - 1][0] < tl[i][0] < tl[i + 1][0]]
    chosen = times[:: max(1, len(times) // 25)]
    assert len(chosen) >= min(20, len(times))
    for t in chosen:
        for pid in final:
            want = next((v for ts, p, v in reversed(tl) if ts <= t and p == pid), 0)
            have = next((v for ts, p, v in reversed(got["samples"]) if ts <= t and p == pid), 0)
            assert have == want, (name, t, pid)
    assert "events:" in stderr and "unmatched frees" in stderr


def test_lost_events_and_packets_with_exact_counts(real):
    _, disc, disc_bt2 = real["disc"]
    assert disc_bt2["lost_events"] == 2_689 and disc_bt2["lost_packets"] == 0
    assert (disc["meta"]["lost_events"], disc["meta"]["lost_packets"]) == (2_689, 0)
    assert disc["lost"] == [("lost events", disc_bt2["lost_messages"], 2_689)]
    _, ovw, ovw_bt2 = real["ovw"]
    assert ovw_bt2["lost_packets"] == 46 and ovw_bt2["lost_events"] == 0
    assert (ovw["meta"]["lost_events"], ovw["meta"]["lost_packets"]) == (0, 46)
    assert ovw["lost"] == [("lost packets", ovw_bt2["lost_messages"], 46)]
    assert "lost: 2,689 events, 0 packets" in real["disc"][0]
    assert "lost: 0 events, 46 packets" in real["ovw"][0]


def test_per_pid_buffers_give_two_named_processes(real):
    _, got, reading = real["perpid"]
    assert len(reading["procnames"]) == 2
    assert got["processes"] == reading["procnames"]
    assert "processes: 2" in real["perpid"][0]


# -- live recordings: the fake GPU workloads, what they logged vs what the trace shows ------------
def _workload_figures(calls: list[dict]) -> dict:
    """Independent figures from the workload's own log of its calls."""
    live: dict[int, tuple[int, int, int]] = {}  # ptr -> (size, mem_kind, device)
    final: Counter = Counter()
    copies = 0
    for c in calls:
        if c["result"] != 0:
            continue
        if c["event"] in ("alloc", "register"):
            live[c["ptr"]] = (c["size"], c["mem_kind"], c["device"])
        elif c["event"] in ("free", "unregister") and c["ptr"] in live:
            live.pop(c["ptr"])
        elif c["event"] == "copy":
            copies += 1
    for size, kind, device in live.values():
        final[("device", device) if kind == 4 else kind] += size
    return {"apis": Counter(c["api"] for c in calls), "final": dict(final), "copies": copies,
            "sets": sum(1 for c in calls if c["event"] == "set" and c["result"] == 0)}


@pytest.mark.parametrize("runtime", ["hip", "cuda"])
def test_live_fake_gpu_recording(runtime, request, tmp_path):
    recorded = request.getfixturevalue(f"fake_{runtime}_trace")
    out = tmp_path / "gpu.pftrace"
    proc = convert(recorded.dir, out)
    assert proc.returncode == 0, proc.stderr
    want = _workload_figures(recorded.calls)
    with open_trace(out) as tp:
        assert tp.query(IMPORT_PROBLEMS).empty, tp.query(IMPORT_PROBLEMS).to_string()
        apis = dict(tp.query(f"""SELECT s.name, count(*) FROM slice s JOIN thread_track tt ON s.track_id = tt.id
                                JOIN thread USING (utid) JOIN process p USING (upid)
                                WHERE s.category = 'memq.api' AND p.pid = {recorded.pid}
                                GROUP BY s.name""").itertuples(index=False))
        assert apis == dict(want["apis"])
        copies = tp.query("SELECT count(*) AS n FROM slice WHERE category = 'memq.copy'")["n"][0]
        sets = tp.query("SELECT count(*) AS n FROM slice WHERE category = 'memq.set'")["n"][0]
        assert (copies, sets) == (want["copies"], want["sets"])
        last = dict(tp.query("""SELECT t.name, CAST(c.value AS INT) FROM counter c JOIN counter_track t
                                ON c.track_id = t.id WHERE t.name != 'Host heap live bytes'
                                AND c.ts = (SELECT max(ts) FROM counter WHERE track_id = t.id)""")
                    .itertuples(index=False))
        names = {2: "Pinned live bytes", 3: "Registered live bytes", 5: "Managed live bytes"}
        expected = {names[k] if not isinstance(k, tuple) else f"GPU {k[1]} device live bytes": v
                    for k, v in want["final"].items()}
        assert {k: v for k, v in last.items() if v or k in expected} == expected
        # every copy names the allocations its endpoints fall in, as flows and args
        unflowed = tp.query("""SELECT count(*) AS n FROM slice s WHERE s.category = 'memq.copy'
            AND EXTRACT_ARG(s.arg_set_id, 'debug.dst_alloc_id') IS NOT NULL
            AND NOT EXISTS (SELECT 1 FROM flow f JOIN slice a ON a.id = f.slice_out WHERE f.slice_in = s.id
                            AND EXTRACT_ARG(a.arg_set_id, 'debug.alloc_id')
                                = EXTRACT_ARG(s.arg_set_id, 'debug.dst_alloc_id'))""")["n"][0]
        assert unflowed == 0


@pytest.mark.parametrize("host", [(), ("--host-min-size", "0"), ("--host-source", "lttng")],
                         ids=["memq-default", "memq-every-block", "lttng-libc-wrapper"])
def test_python_numpy_recording(tmp_path, bt2, host):
    """A malloc-heavy Python/numpy run recorded live with `memq record` (memq's heap wrappers at the default
    threshold and at 0, LTTng's libc wrapper): same checks as the real traces."""
    from support.lttng import record

    script = tmp_path / "work.py"
    script.write_text("import numpy as np\n"
                      "xs = [np.ones(n) for n in range(1, 3000, 7)]\n"
                      "del xs[::2]\n"
                      "ys = [bytearray(n) for n in range(100, 200000, 997)]\n")
    rec = record(tmp_path / "trace", [sys.executable, str(script)], api="libc", extra=host)
    out = tmp_path / "py.pftrace"
    proc = convert(rec.dir, out)
    assert proc.returncode == 0, proc.stderr
    reading = bt2_reading(bt2, rec.dir)
    assert sum(reading["counts"].values()) > (200 if not host else 5000)
    with open_trace(out) as tp:
        assert tp.query(IMPORT_PROBLEMS).empty
        counts = dict(tp.query("SELECT name, count(*) FROM slice WHERE category = 'memq.heap' GROUP BY name")
                      .itertuples(index=False))
        final = dict(tp.query("""SELECT p.pid, CAST(c.value AS INT) FROM counter c
            JOIN process_counter_track t ON c.track_id = t.id JOIN process p USING (upid)
            WHERE t.name = 'Host heap live bytes' AND c.ts = (SELECT max(ts) FROM counter WHERE track_id = t.id)""")
                     .itertuples(index=False))
        clock = tp.query("SELECT count(*) AS n FROM clock_snapshot WHERE clock_name = 'BOOTTIME'")["n"][0]
    assert counts == reading["counts"]
    assert final == {pid: v for pid, v in reading["final"].items() if pid in final} and final
    assert clock == 1  # memq record read BOOTTIME: it is in the snapshot
    assert "CTF clock offset" not in proc.stderr


# -- bad input ---------------------------------------------------------------------------------
def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    for root, dirs, files in os.walk(dst):
        for name in dirs + files:
            os.chmod(Path(root) / name, 0o755 if name in dirs else 0o644)
    os.chmod(dst, 0o755)
    return dst


def _packets(index: Path) -> list[tuple[int, int]]:
    """(offset, size in bytes) of each packet, from an LTTng index file (big-endian, CTF 1.8 index v1.x)."""
    data = index.read_bytes()
    _magic, _major, _minor, entry = struct.unpack(">IIII", data[:16])
    return [struct.unpack(">QQ", data[i:i + 16]) for i in range(16, len(data), entry)]


def _bad(tmp_path: Path, trace: Path, *extra: str) -> tuple[subprocess.CompletedProcess, Path]:
    out = tmp_path / "out" / "bad.pftrace"
    out.parent.mkdir(exist_ok=True)
    proc = convert(trace, out, *extra)
    return proc, out


def _assert_one_line_failure(proc, out: Path, code: int, *needles: str) -> None:
    assert proc.returncode == code, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    assert not out.exists() and (not out.parent.exists() or os.listdir(out.parent) == [])


@pytest.fixture
def disc_copy(test_data, tmp_path):
    trace = _copy(test_data / "ctf" / "disc", tmp_path / "disc")
    chan = trace / "ust/uid/0/64-bit"
    return trace, chan / "ch0_1", [(o, s // 8) for o, s in _packets(chan / "index/ch0_1.idx")]


def test_bad_paths(tmp_path):
    (tmp_path / "file").write_text("x")
    proc, out = _bad(tmp_path, tmp_path / "file")
    _assert_one_line_failure(proc, out, 2, str(tmp_path / "file"), "not a directory")
    proc, out = _bad(tmp_path, tmp_path / "missing")
    _assert_one_line_failure(proc, out, 2, str(tmp_path / "missing"), "no such directory")
    (tmp_path / "empty").mkdir()
    proc, out = _bad(tmp_path, tmp_path / "empty")
    _assert_one_line_failure(proc, out, 1, str(tmp_path / "empty"), "no CTF trace")


def test_unreadable_metadata(disc_copy, tmp_path):
    trace, stream, _ = disc_copy
    (stream.parent / "metadata").write_bytes(b"\x00garbage" * 100)
    proc, out = _bad(tmp_path, trace)
    _assert_one_line_failure(proc, out, 1, str(stream.parent / "metadata"), "metadata")


def test_empty_trace(disc_copy, tmp_path):
    trace, stream, _ = disc_copy
    for f in stream.parent.glob("ch*"):
        f.unlink()
    shutil.rmtree(stream.parent / "index")
    proc, out = _bad(tmp_path, trace)
    _assert_one_line_failure(proc, out, 1, "empty trace")


def test_stream_cut_mid_packet_and_salvage(disc_copy, tmp_path, bt2):
    trace, stream, packets = disc_copy
    offset, size = packets[len(packets) // 2]
    os.truncate(stream, offset + size // 3)
    proc, out = _bad(tmp_path, trace)
    _assert_one_line_failure(proc, out, 1, str(stream), "cut mid-packet")
    proc, out = _bad(tmp_path, trace, "--salvage")
    assert proc.returncode == 0, proc.stderr
    assert f"{stream}: salvage dropped 1 packet(s), {size // 3} bytes from offset {offset}" in proc.stderr
    # what was kept is exactly the trace cut back by hand, read with bt2
    os.truncate(stream, offset)
    shutil.rmtree(stream.parent / "index")
    reading = bt2_reading(bt2, trace)
    with open_trace(out) as tp:
        assert tp.query(IMPORT_PROBLEMS).empty
        counts = dict(tp.query("SELECT name, count(*) FROM slice WHERE category = 'memq.heap' GROUP BY name")
                      .itertuples(index=False))
    assert counts == reading["counts"]


def test_garbage_inside_a_packet(disc_copy, tmp_path):
    trace, stream, packets = disc_copy
    offset, size = packets[len(packets) // 3]
    with open(stream, "r+b") as f:
        f.seek(offset + 128)
        f.write(bytes(range(256)) * ((size - 256) // 256))
    proc, out = _bad(tmp_path, trace)
    _assert_one_line_failure(proc, out, 1, str(stream), "corrupt CTF data")
    proc, out = _bad(tmp_path, trace, "--salvage")
    assert proc.returncode == 0 and f"{stream}: salvage dropped" in proc.stderr, proc.stderr


def test_output_that_cannot_be_written(test_data, tmp_path):
    trace = test_data / "ctf" / "dbg"
    proc = convert(trace, tmp_path / "nodir" / "x.pftrace")
    assert proc.returncode == 2 and "nodir" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "nodir").exists()
    (tmp_path / "adir").mkdir()
    proc = convert(trace, tmp_path / "adir")
    assert proc.returncode == 2 and "is a directory" in proc.stderr and os.listdir(tmp_path / "adir") == []
    proc = convert(trace, Path("/proc/memq-test.pftrace"))
    assert proc.returncode == 1 and "/proc/memq-test.pftrace: cannot write" in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


def test_memq_convert_is_the_same_command(test_data, tmp_path):
    a, b = tmp_path / "a.pftrace", tmp_path / "b.pftrace"
    assert convert(test_data / "ctf" / "perpid", a, "--quiet").returncode == 0
    proc = subprocess.run(["memq", "convert", str(test_data / "ctf" / "perpid"), "-o", str(b), "-q"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert a.read_bytes() == b.read_bytes()  # and byte-identical from run to run
    assert "events:" not in proc.stderr  # --quiet: warnings only


def test_salvage_with_a_relative_trace_path(disc_copy, tmp_path):
    """The salvage copy links the intact files: a relative input path must still resolve from the copy."""
    trace, stream, packets = disc_copy
    offset, size = packets[len(packets) // 2]
    os.truncate(stream, offset + size // 3)
    out = tmp_path / "out" / "relative.pftrace"
    out.parent.mkdir(exist_ok=True)
    proc = subprocess.run(["ctf2perfetto", os.path.relpath(trace, tmp_path), "-o", str(out), "--salvage"],
                          cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "salvage dropped 1 packet(s)" in proc.stderr and out.stat().st_size > 0
