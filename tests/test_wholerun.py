"""`memq duplicated|redundant|summary|leaks DIR --parts SEC` on real recordings: the whole run's figures, a part at a time.

Each recording is analysed whole (its .pftrace in one trace_processor) and in parts; the outputs
(`--format json`) must be the same, floats (integrals and means, summed in another order) to 1e-9.
The recordings: the offload example on the fake HIP runtime (weights copied again every step, results sent
back: mirrors alive across every cut), the same with content fingerprints, and a recording with capture
windows of its own (profiler API). The exact rules at every cut are tests/test_parts.py's, against the
whole trace of generated logs.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ctf2perfetto.analysis.parts import MAX_PARTS, recording_length_ns

from ctf2perfetto.engine import open_trace
from support.lttng import record
from test_convert import convert

REPO = Path(__file__).resolve().parents[1]


def memq(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(["memq", *argv], capture_output=True, text=True, timeout=600)


def _same(got, expect, where: str = "") -> None:
    assert type(got) is type(expect), (where, got, expect)  # an int is no float: `pid` 6780, not 6780.0
    if isinstance(expect, float):
        assert got == pytest.approx(expect, rel=1e-9, abs=1e-6), where
    elif isinstance(expect, dict):
        assert list(got) == list(expect), where
        for key in expect:
            _same(got[key], expect[key], f"{where}.{key}")
    elif isinstance(expect, list):
        assert len(got) == len(expect), (where, got, expect)
        for i, (g, e) in enumerate(zip(got, expect)):
            _same(g, e, f"{where}[{i}]")
    else:
        assert got == expect, (where, got, expect)


# What `--parts` says of how it cut the run (a cut that found no quiet time in a busy loop under load is left out,
# the part before it is then longer): no counterpart in the whole trace's output, and no figure changes with it.
_CUTTING = ("cut(s) found no quiet time", "each part decodes the recording from its start")


def _without_cutting_notes(output):
    """`output` (memq's JSON) with its notes about the cutting itself left out."""
    return {**output, "notes": [n for n in output["notes"] if not any(c in n for c in _CUTTING)]}


def check_parts(trace: Path, tmp: Path, parts: int = 4) -> None:
    """The whole trace's duplicated and redundant output, and the same from `parts` parts of the recording."""
    tmp.mkdir(exist_ok=True)
    whole = tmp / "whole.pftrace"
    assert convert(trace, whole).returncode == 0
    with open_trace(whole) as engine:
        span = int(engine.query("SELECT trace_end() - trace_start() AS d")["d"][0])
    # At most MAX_PARTS parts of the whole recording (its packets' span, which a windowed recording's idle time
    # makes much longer than the trace's events): memq refuses more.
    length = recording_length_ns(trace) or 0
    every = f"{max(span / parts, length / (MAX_PARTS - 1)) / 1e9:.9f}"
    for name in ("duplicated", "redundant", "summary", "leaks"):
        expect, got = memq(name, str(whole), "--format", "json"), memq(name, str(trace), "--parts", every,
                                                                         "--format", "json")
        assert expect.returncode == got.returncode == 0, expect.stderr + got.stderr
        got, expect = _without_cutting_notes(json.loads(got.stdout)), json.loads(expect.stdout)
        for output in (got, expect):  # tables ordered by time or bytes: ties in no particular order
            for key in ("api", "allocations", "leaks", "outlived"):
                if key in output["tables"]:
                    output["tables"][key]["rows"].sort(key=repr)
        _same(got, expect, name)
    table = memq("duplicated", str(trace), "--parts", every)
    assert table.returncode == 0 and "peak_bytes MiB" in table.stdout, table.stderr


@pytest.fixture(scope="module")
def offload(fake_gpu, tmp_path_factory):
    """The offload example, 24 steps on the fake HIP runtime."""
    argv = [sys.executable, str(REPO / "examples" / "hip_offload.py"), "--hip-lib",
            str(fake_gpu.dir / "libamdhip64.so"), "--steps", "24", "--weights-mib", "1"]
    return record(tmp_path_factory.mktemp("offload") / "trace", argv, api="hip,libc")


def test_parts_of_an_offload_loop(offload, tmp_path):
    check_parts(offload.dir, tmp_path)
    check_parts(offload.dir, tmp_path / "two", parts=2)


def test_parts_of_an_offload_loop_with_fingerprints(fake_gpu, tmp_path):
    argv = [sys.executable, str(REPO / "examples" / "hip_offload.py"), "--hip-lib",
            str(fake_gpu.dir / "libamdhip64.so"), "--steps", "16", "--weights-mib", "1"]
    rec = record(tmp_path / "trace", argv, api="hip,libc", extra=("--content", "full"))
    check_parts(rec.dir, tmp_path)


def test_parts_of_a_windowed_recording(fake_gpu, tmp_path):
    rec = record(tmp_path / "trace", [str(fake_gpu.window_work), "profiler", "hip", str(tmp_path / "log.jsonl")],
                 api="hip,cuda", extra=("--capture-range", "profiler-api"))
    check_parts(rec.dir, tmp_path, parts=3)


@pytest.mark.parametrize("extra, needle", [
    (("--parts", "0"), "--parts 0"),
    (("--parts", "-5"), "--parts -5"),
    (("--parts", "nan"), "'nan': not a time"),
    (("--parts", "1m", "--from", "1"), "leave out --from/--to"),
])
def test_bad_parts(offload, extra, needle):
    proc = memq("duplicated", str(offload.dir), *extra)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert needle in proc.stderr and "Traceback" not in proc.stderr


def test_parts_need_a_trace_directory(offload, tmp_path):
    whole = tmp_path / "whole.pftrace"
    assert convert(offload.dir, whole).returncode == 0
    for target, needle in ((whole, "needs an LTTng trace directory"), (tmp_path / "none", "no such")):
        proc = memq("redundant", str(target), "--parts", "1")
        assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        assert needle in proc.stderr


def test_a_cut_inside_a_long_copy_is_left_out(fake_gpu, tmp_path):
    """Weights copies of 1.5 s each (FAKE_GPU_SLOW_COPY): most multiples of a 1 s part fall inside one, with no
    quiet time within the search (a tenth of a part) after them. Those cuts are left out, and said; the figures
    are still the whole trace's."""
    argv = [sys.executable, str(REPO / "examples" / "hip_offload.py"), "--hip-lib",
            str(fake_gpu.dir / "libamdhip64.so"), "--steps", "3", "--weights-mib", "1"]
    rec = record(tmp_path / "trace", argv, api="hip,libc", env={**os.environ, "FAKE_GPU_SLOW_COPY": str(1 << 20)})
    whole = tmp_path / "whole.pftrace"
    assert convert(rec.dir, whole).returncode == 0
    expect, got = memq("duplicated", str(whole), "--format", "json"), memq("duplicated", str(rec.dir), "--parts",
                                                                           "1", "--format", "json")
    assert expect.returncode == got.returncode == 0, expect.stderr + got.stderr
    got, expect = json.loads(got.stdout), json.loads(expect.stdout)
    missed = [n for n in got["notes"] if "found no quiet time" in n]
    assert len(missed) == 1 and "within 0.1 s" in missed[0], got["notes"]
    got["notes"] = [n for n in got["notes"] if n not in missed]
    _same(got, expect)
