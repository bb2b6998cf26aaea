"""Copies attributed to PyTorch ops (`by="op"`) and to call sites (`by="callsite"`).

A C program drives the fake HIP runtime under `memq record`: two hipMemcpy calls
from two known functions. Call sites come from the real recording. For ops, a
Kineto trace is written for the same pid/tid around the recorded calls (an outer
op enclosing both, an inner op enclosing only the first, a decoy op on another
thread), merged, and each copy must get its innermost op on its own thread.
"""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from ctf2perfetto.analysis.attribution import attribute
from ctf2perfetto.engine import open_trace
from support.fakes import build_fakes

PROGRAM = r"""
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
int hipMalloc(void **, size_t);
int hipFree(void *);
int hipMemcpy(void *, const void *, size_t, int);
static char host[8192];
void *volatile keep;
__attribute__((noinline)) void upload_weights(void *dev) { hipMemcpy(dev, host, 4096, 1); }
__attribute__((noinline)) void download_result(void *dev) { hipMemcpy(host, dev, 2048, 2); }
int main(void)
{
	void *dev = 0;
	if (hipMalloc(&dev, 8192))
		return 1;
	memset(host, 7, sizeof host);
	for (int i = 1; i <= 6; i++) {
		keep = malloc(100000 * i);
		free(keep);
	}
	upload_weights(dev);
	usleep(2000);
	download_result(dev);
	hipFree(dev);
	printf("%d %d\n", getpid(), gettid());
	return 0;
}
"""
FUNCTIONS = {4096: "upload_weights", 2048: "download_result"}

# Only the program's own events: other LTTng-instrumented processes running at the same time on the
# machine can land in the recording too.
PROCESS_SLICES = """
SELECT s.* FROM slice s JOIN thread_track tt ON s.track_id = tt.id JOIN thread USING (utid)
JOIN process p USING (upid) WHERE p.pid = {pid}"""
COPIES_SQL = """
SELECT EXTRACT_ARG(arg_set_id, 'debug.call_id') AS call_id, EXTRACT_ARG(arg_set_id, 'debug.bytes') AS bytes,
       ts, dur FROM slice WHERE category = 'memq.copy' AND EXTRACT_ARG(arg_set_id, 'debug.call_id') IN (
         SELECT EXTRACT_ARG(arg_set_id, 'debug.call_id') FROM (""" + PROCESS_SLICES + """) WHERE category = 'memq.api')
ORDER BY ts"""


@pytest.fixture(scope="module")
def recording(tmp_path_factory) -> dict:
    work = tmp_path_factory.mktemp("kineto_attr")
    fakes = build_fakes(work / "fakes")
    (work / "prog.c").write_text(PROGRAM)
    exe = work / "copier"
    subprocess.run(["gcc", "-g", "-O1", "-o", str(exe), str(work / "prog.c"), f"-L{fakes.dir}", "-l:libamdhip64.so",
                    f"-Wl,-rpath,{fakes.dir}"], check=True)
    trace = work / "trace"
    rec = subprocess.run(["memq", "record", "-o", str(trace), "--", str(exe)], capture_output=True, text=True,
                         timeout=120)
    assert rec.returncode == 0, rec.stderr
    pid, tid = map(int, rec.stdout.split()[-2:])
    plain = work / "plain.pftrace"
    subprocess.run(["ctf2perfetto", str(trace), "-o", str(plain)], check=True, capture_output=True, timeout=120)
    return {"work": work, "trace": trace, "plain": plain, "pid": pid, "tid": tid}


def test_copies_by_callsite(recording: dict) -> None:
    with open_trace(recording["plain"]) as engine:
        copies = engine.query(COPIES_SQL.format(pid=recording["pid"]))
        result = attribute(engine, copies, "callsite")
    assert sorted(result["bytes"]) == sorted(FUNCTIONS)
    assert {int(b): f for b, f in zip(result["bytes"], result["function"])} == FUNCTIONS
    assert all(Path(b).name == "copier" for b in result["binary"])
    assert all(s.startswith(str(recording["work"] / "prog.c")) for s in result["source"])


def _kineto_ops(pid: int, tid: int, copies: pd.DataFrame, malloc_end: int) -> dict:
    """Kineto JSON with ops around the recorded copies (REALTIME µs relative to a base).

    The inner op starts after hipMalloc returned (API calls and ops of one thread nest) and after the outer op
    started (ops nest too), whatever the time between hipMalloc and the first copy.
    """
    first, second = copies.iloc[0], copies.iloc[1]
    base = int(first["ts"]) // 10**9 * 10**9
    inner_begin = max((malloc_end + int(first["ts"])) // 2, int(first["ts"]) - 40_000)

    def op(name: str, begin_ns: int, end_ns: int, tid_: int = tid) -> dict:
        # µs with the ns digits, relative to the base, as Kineto writes them
        return {"ph": "X", "cat": "cpu_op", "name": name, "pid": pid, "tid": tid_,
                "ts": round((begin_ns - base) / 1000, 3), "dur": round((end_ns - begin_ns) / 1000, 3)}

    end_second = int(second["ts"] + second["dur"])
    return {"baseTimeNanoseconds": base, "traceEvents": [
        op("train_step", int(first["ts"]) - 50_000, end_second + 50_000),
        op("aten::copy_", inner_begin, int(first["ts"] + first["dur"]) + 10_000),
        op("decoy_on_other_thread", int(first["ts"]) - 100_000, end_second + 100_000, tid + 1),
    ]}


def test_copies_by_innermost_op_on_their_thread(recording: dict) -> None:
    with open_trace(recording["plain"]) as engine:
        copies = engine.query(COPIES_SQL.format(pid=recording["pid"]))
        malloc_end = int(engine.query(f"SELECT ts + dur AS end_ts FROM ({PROCESS_SLICES}) WHERE name = 'hipMalloc'"
                                      .format(pid=recording["pid"]))["end_ts"][0])
    assert len(copies) == 2
    profile = recording["work"] / "ops.json"
    profile.write_text(json.dumps(_kineto_ops(recording["pid"], recording["tid"], copies, malloc_end)))
    merged = recording["work"] / "merged.pftrace"
    conv = subprocess.run(["ctf2perfetto", str(recording["trace"]), "--kineto", str(profile), "-o", str(merged)],
                          capture_output=True, text=True, timeout=120)
    assert conv.returncode == 0, conv.stderr
    assert f"{recording['pid']}/{recording['tid'] + 1}" in conv.stderr  # the decoy thread has no LTTng events
    with open_trace(merged) as engine:
        assert engine.import_problems().empty, engine.import_problems().to_string()
        result = attribute(engine, engine.query(COPIES_SQL.format(pid=recording["pid"])), "op")
    assert dict(zip(result["bytes"].astype(int), result["op"])) == {4096: "aten::copy_", 2048: "train_step"}
    assert result["op_slice_id"].notna().all()


def test_op_crossing_an_api_call_is_widened_not_mismatched(recording: dict) -> None:
    """An op that starts inside hipMalloc (clock error) would make trace_processor pair the wrong ends."""
    with open_trace(recording["plain"]) as engine:
        malloc = engine.query(f"SELECT ts, dur FROM ({PROCESS_SLICES}) WHERE name = 'hipMalloc'"
                              .format(pid=recording["pid"])).iloc[0]
    begin, end = int(malloc["ts"]), int(malloc["ts"] + malloc["dur"])
    base = begin // 10**9 * 10**9
    op_begin, op_end = (begin + end) // 2, end + 5_000  # crosses the end of hipMalloc
    profile = recording["work"] / "crossing.json"
    profile.write_text(json.dumps({"baseTimeNanoseconds": base, "traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "aten::empty", "pid": recording["pid"], "tid": recording["tid"],
         "ts": (op_begin - base) / 1000, "dur": (op_end - op_begin) / 1000}]}))
    merged = recording["work"] / "crossing.pftrace"
    conv = subprocess.run(["ctf2perfetto", str(recording["trace"]), "--kineto", str(profile), "-o", str(merged)],
                          capture_output=True, text=True, timeout=120)
    assert conv.returncode == 0, conv.stderr
    assert "1 ops widened to cover a memq API call" in conv.stderr
    with open_trace(merged) as engine:
        assert engine.import_problems().empty, engine.import_problems().to_string()
        rows = engine.query(f"SELECT name, ts, dur, depth FROM ({PROCESS_SLICES}) WHERE name IN ('hipMalloc', 'aten::empty')"
                            .format(pid=recording["pid"]))
    got = {r.name: (int(r.ts), int(r.dur), int(r.depth)) for r in rows.itertuples()}
    assert got["hipMalloc"] == (begin, end - begin, 1)  # untouched, now inside the op
    assert got["aten::empty"] == (begin - 1, op_end - begin + 1, 0)  # encloses it strictly


def test_profiler_clock_error_is_measured_on_shared_allocations(recording: dict) -> None:
    """`[memory]` events 50 µs after the mallocs they report: the Kineto events are moved back by 50 µs."""
    with open_trace(recording["plain"]) as engine:
        mallocs = engine.query(f"""
            SELECT ts, ptr, size FROM (
              SELECT ts, EXTRACT_ARG(arg_set_id, 'debug.ptr') AS ptr,
                EXTRACT_ARG(arg_set_id, 'debug.requested') AS size  -- what was asked for, as Kineto reports it
              FROM ({PROCESS_SLICES}) WHERE name = 'malloc')
            WHERE size % 100000 = 0""".format(pid=recording["pid"]))
    assert len(mallocs) == 6
    base = int(mallocs["ts"].min()) // 10**9 * 10**9
    late = 50_000
    events = [{"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]", "pid": recording["pid"],
               "tid": recording["tid"], "ts": (int(t) + late - base) / 1000,
               "args": {"Addr": int(p), "Bytes": int(n), "Device Type": 0, "Device Id": -1}}
              for t, p, n in zip(mallocs["ts"], mallocs["ptr"], mallocs["size"])]
    profile = recording["work"] / "late.json"
    profile.write_text(json.dumps({"baseTimeNanoseconds": base, "traceEvents": events}))
    merged = recording["work"] / "late.pftrace"
    conv = subprocess.run(["ctf2perfetto", str(recording["trace"]), "--kineto", str(profile), "-o", str(merged)],
                          capture_output=True, text=True, timeout=120)
    assert conv.returncode == 0, conv.stderr
    assert "clock was +50.0 us off the LTTng clock (median gap of 6 [memory] events" in conv.stderr
    with open_trace(merged) as engine:
        moved = engine.query("SELECT ts, EXTRACT_ARG(arg_set_id, 'debug.Addr') AS addr FROM slice "
                             "WHERE name = '[memory]'")
    assert dict(zip(moved["addr"].astype(int), moved["ts"].astype(int))) == dict(
        zip(mallocs["ptr"].astype(int), mallocs["ts"].astype(int)))
