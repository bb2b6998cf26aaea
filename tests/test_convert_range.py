"""`ctf2perfetto --from/--to` on real recordings: a range converted as a capture window over it.

Each recording is converted whole and as a range between two quiet moments (no call in
flight), and the range's trace must hold exactly what the whole trace has in it: the
allocations made in the range (ending at its end when freed after it), one memq.live per
allocation live at its start, the copies made in it, the same live-bytes counters at every
sample in it, and the same leaks when it runs to the end. The exact rules at every edge
(calls cut at the start, equal times, windows of the recording itself, batch boundaries)
are tests/test_ranges.py's, against an independent computation.
"""
from __future__ import annotations

import bisect
import subprocess
from pathlib import Path

import pytest

from ctf2perfetto.cli.output import seconds
from ctf2perfetto.engine import open_trace
from support.lttng import record
from test_convert import _assert_one_line_failure, convert

ALLOCATIONS = """INCLUDE PERFETTO MODULE memq.allocations;
    SELECT p.pid, a.kind, a.addr, a.size, a.ts, a.end_ts, a.live_at_start, a.outlived_window
    FROM memq_allocation a JOIN process p USING (upid)"""
COPIES = """INCLUDE PERFETTO MODULE memq.copies;
    SELECT p.pid, c.ts, c.dur, c.bytes, c.src, c.dst, c.direction, c.dst_mem, c.src_mem FROM memq_copy c JOIN process p USING (upid)"""
SAMPLES = """SELECT t.name, p.pid, c.ts, CAST(c.value AS INT) AS value FROM counter c
    JOIN counter_track t ON t.id = c.track_id
    LEFT JOIN process_counter_track pt ON pt.id = t.id LEFT JOIN process p USING (upid) ORDER BY c.ts, c.id"""
CALLS = "SELECT ts, dur FROM slice WHERE category GLOB 'memq.*' AND category != 'memq.meta'"
LEAKS = """INCLUDE PERFETTO MODULE memq.leaks;
    SELECT kind, size, count, bytes FROM memq_leak_by_kind_size"""
WINDOWS = """INCLUDE PERFETTO MODULE memq.windows;
    SELECT pid, window, ts, end_ts, open_cause, close_cause FROM memq_window"""


def _rows(path: Path, sql: str) -> list[tuple]:
    with open_trace(path) as engine:
        return [tuple(None if v != v else v for v in r) for r in engine.query(sql).itertuples(index=False)]


def _quiet(path: Path, fractions: tuple[float, ...]) -> tuple[int, list[int]]:
    """trace_start() and, at each fraction of the trace, a time between two events where no call is in flight."""
    with open_trace(path) as engine:
        start = int(engine.query("SELECT trace_start() AS s")["s"][0])
    calls = _rows(path, CALLS)
    times = sorted({t for ts, dur in calls for t in (ts, ts + dur)})
    picked = []
    for fraction in fractions:
        i = int(len(times) * fraction)
        while True:
            t = (times[i] + times[i + 1]) // 2
            if times[i + 1] - times[i] > 1 and not any(ts < t < ts + dur for ts, dur in calls):
                break
            i += 1
        picked.append(t)
    return start, picked


def _value_at(samples: list[tuple[int, int]], ts: int) -> int:
    """A counter's value at `ts` (its last sample at or before it; 0 before the first)."""
    i = bisect.bisect_right([t for t, _ in samples], ts) - 1
    return samples[i][1] if i >= 0 else 0


def check_range(trace: Path, tmp: Path) -> None:
    whole = tmp / "whole.pftrace"
    assert convert(trace, whole).returncode == 0
    zero, (a, b) = _quiet(whole, (0.3, 0.7))
    part = tmp / "part.pftrace"
    proc = convert(trace, part, "--from", f"{(a - zero) / 1e9:.9f}", "--to", f"{(b - zero) / 1e9:.9f}")
    assert proc.returncode == 0, proc.stderr
    assert "range: " in proc.stderr

    windows = _rows(part, WINDOWS)
    assert windows and all(ts >= a and end == b and close == "range" for _, _, ts, end, _, close in windows)
    assert {o for *_, o, _ in windows} <= {"range", "delay"}

    allocs = _rows(whole, ALLOCATIONS)
    live = sorted((pid, kind, addr, size) for pid, kind, addr, size, ts, end, *_ in allocs
                  if ts < a and (end is None or end > a))
    made = sorted((pid, kind, addr, size, ts, end if end is not None and end <= b else b)
                  for pid, kind, addr, size, ts, end, *_ in allocs if a <= ts <= b)
    got = _rows(part, ALLOCATIONS)
    assert sorted((pid, kind, addr, size) for pid, kind, addr, size, ts, end, at_start, _ in got if at_start) == live
    assert all(ts == a for *_, ts, _, at_start, _ in got if at_start)
    assert sorted((pid, kind, addr, size, ts, end) for pid, kind, addr, size, ts, end, at_start, _ in got
                  if not at_start) == made
    assert all(outlived for *_, end, _, outlived in got if end == b)  # the range's end is not a free

    assert sorted(_rows(part, COPIES)) == sorted(c for c in _rows(whole, COPIES) if a <= c[1] and c[1] + c[2] <= b)

    by_counter: dict[tuple, list[tuple[int, int]]] = {}
    for name, pid, ts, value in _rows(whole, SAMPLES):
        by_counter.setdefault((name, pid), []).append((ts, value))
    last = {}  # (name, pid, ts) -> the last sample there: a snapshot moves a counter many times at one time
    for name, pid, ts, value in _rows(part, SAMPLES):
        last[(name, pid, ts)] = value
    compared = 0
    for (name, pid, ts), value in last.items():
        if ts < b:  # at b the range's close ends everything still live
            assert value == _value_at(by_counter[(name, pid)], ts), (name, pid, ts)
            compared += 1
    assert compared > 0

    to_end = tmp / "to_end.pftrace"
    assert convert(trace, to_end, "--from", f"{(a - zero) / 1e9:.9f}").returncode == 0
    assert sorted(_rows(to_end, LEAKS), key=repr) == sorted(_rows(whole, LEAKS), key=repr)
    assert all(close == "trace_end" for *_, close in _rows(to_end, WINDOWS))


def test_range_of_a_fake_gpu_recording(fake_hip_trace, tmp_path):
    check_range(fake_hip_trace.dir, tmp_path)


def test_range_of_a_real_libc_trace(test_data, tmp_path):
    check_range(test_data / "ctf" / "perpid", tmp_path)


def test_range_of_a_windowed_recording(fake_gpu, tmp_path):
    """A range over a recording's own windows: the window open at --from reopens there under its index (cause
    `range`), the next one opens as recorded, and the one open at --to closes there."""
    rec = record(tmp_path / "trace", [str(fake_gpu.window_work), "profiler", "hip", str(tmp_path / "log.jsonl")],
                 api="hip,cuda", extra=("--capture-range", "profiler-api"))
    whole = tmp_path / "whole.pftrace"
    assert convert(rec.dir, whole).returncode == 0
    recorded = _rows(whole, WINDOWS)
    pid = recorded[0][0]
    (_, _, w0, e0, *_), (_, _, w1, e1, *_) = [w for w in recorded if w[0] == pid]
    with open_trace(whole) as engine:
        zero = int(engine.query("SELECT trace_start() AS s")["s"][0])
    a, b = (w0 + e0) // 2, (w1 + e1) // 2
    part = tmp_path / "part.pftrace"
    proc = convert(rec.dir, part, "--from", f"{(a - zero) / 1e9:.9f}", "--to", f"{(b - zero) / 1e9:.9f}")
    assert proc.returncode == 0, proc.stderr
    got = [w for w in _rows(part, WINDOWS) if w[0] == pid]
    assert [(index, open_cause, close_cause) for _, index, _, _, open_cause, close_cause in got] == \
        [(0, "range", "profiler_api"), (1, "profiler_api", "range")]
    assert (got[0][2], got[0][3], got[1][2], got[1][3]) == (a, e0, w1, b)


@pytest.mark.parametrize("extra, code, needle", [
    (("--from", "-1"), 2, "--from -1"),
    (("--from", "nan"), 2, "'nan': not a time"),
    (("--to", "5x"), 2, "'5x': not a time"),
    (("--from", "abc"), 2, "--from"),
    (("--from", "2", "--to", "1"), 2, "--to 1.0 is not after --from 2.0"),
    (("--from", "100000"), 2, "the trace ends before it"),
])
def test_bad_ranges(fake_hip_trace, tmp_path, extra, code, needle):
    out = tmp_path / "out" / "bad.pftrace"
    out.parent.mkdir()
    _assert_one_line_failure(convert(fake_hip_trace.dir, out, *extra), out, code, needle)


def test_a_range_takes_no_kineto_merge(fake_hip_trace, test_data, tmp_path):
    out = tmp_path / "out" / "bad.pftrace"
    out.parent.mkdir()
    profile = next((test_data / "kineto").rglob("*.json*"))
    proc = subprocess.run(["ctf2perfetto", str(fake_hip_trace.dir), "-o", str(out), "--from", "0",
                           "--kineto", str(profile)], capture_output=True, text=True, timeout=300)
    _assert_one_line_failure(proc, out, 2, "--kineto")


def test_analyses_of_a_range_of_a_trace_directory(fake_hip_trace, tmp_path):
    """`memq redundant DIR --from --to` analyses what `ctf2perfetto DIR --from --to` writes; a converted trace
    takes no range."""
    whole = tmp_path / "whole.pftrace"
    assert convert(fake_hip_trace.dir, whole).returncode == 0
    zero, (a, b) = _quiet(whole, (0.2, 0.8))
    limits = ["--from", f"{(a - zero) / 1e9:.9f}", "--to", f"{(b - zero) / 1e9:.9f}"]
    part = tmp_path / "part.pftrace"
    assert convert(fake_hip_trace.dir, part, *limits).returncode == 0

    def memq(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run(["memq", *argv], capture_output=True, text=True, timeout=300)

    for name in ("redundant", "leaks"):
        direct, converted = memq(name, str(fake_hip_trace.dir), *limits, "--format", "json"), \
            memq(name, str(part), "--format", "json")
        assert direct.returncode == converted.returncode == 0, direct.stderr + converted.stderr
        assert direct.stdout == converted.stdout and '"windows"' in direct.stdout
    proc = memq("leaks", str(part), "--from", "0")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert "need an LTTng trace directory" in proc.stderr and "Traceback" not in proc.stderr


def test_times_take_units(fake_hip_trace, tmp_path):
    assert [seconds(t) for t in ("90", "90s", "1.5m", "10min", "2h", "250ms", "1e3")] == \
        [90, 90, 90, 600, 7200, 0.25, 1000]
    out = tmp_path / "part.pftrace"
    proc = convert(fake_hip_trace.dir, out, "--from", "0.5ms", "--to", "1h")
    assert proc.returncode == 0, proc.stderr
    assert "range: 0.001 s to 3600.000 s" in proc.stderr
