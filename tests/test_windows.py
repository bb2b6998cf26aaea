"""Capture windows end to end: `memq record --capture-range profiler-api` and --delay/--duration
on the fake HIP and CUDA runtimes (tests/fakes/window_work.c), real LTTng sessions, the
converter and the analyses.

What a window must hold: exactly the calls made inside it, one memq:live per allocation
live when it opened (so a copy from, or a free of, an allocation made before the window
resolves to it), and nothing from outside it. The windowed figures themselves are checked
against the oracle in test_windows_analyses.py.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ctf2perfetto import analyses
from ctf2perfetto.engine import open_trace
from support.lttng import LIBRARY_EVENTS, MEMQ, NOT_CALLS, assert_events_match, read_events, read_worklog, record

PROCESS_EVENTS = (*NOT_CALLS, "memq:window", "memq:live")  # not calls: the heap and copy_done included
PROFILER_APIS = {"hip": [("hipProfilerStart", "hipProfilerStop")] * 2,
                 "cuda": [("cudaProfilerStart", "cudaProfilerStop"), ("cuProfilerStart", "cuProfilerStop")]}
ALLOC_API = {"hip": "hipMalloc", "cuda": "cudaMalloc"}


def _convert(trace_dir: Path) -> Path:
    out = trace_dir.parent / f"{trace_dir.name}.pftrace"
    subprocess.run([sys.executable, "-m", "ctf2perfetto.cli.convert", str(trace_dir), "-o", str(out), "-q"],
                   check=True, capture_output=True, text=True)
    return out


def _in_windows(log: list[dict]) -> tuple[list[list[dict]], list[dict]]:
    """The logged runtime calls per profiler window, and those outside every window."""
    windows, outside, current = [], [], None
    for line in log:
        if "profiler" in line:
            if line["profiler"].endswith("Start"):
                current = []
            else:
                windows.append(current)
                current = None
        elif "event" in line:
            (outside if current is None else current).append(line)
    return windows, outside


@pytest.fixture(scope="module", params=["hip", "cuda"])
def profiler_run(request, fake_gpu, tmp_path_factory):
    runtime = request.param
    out = tmp_path_factory.mktemp(f"win_{runtime}") / "trace"
    log = out.parent / "calls.jsonl"
    rec = record(out, [str(fake_gpu.window_work), "profiler", runtime, str(log)], api="hip,cuda",
                 extra=("--capture-range", "profiler-api"))
    calls = read_worklog(log)
    return runtime, rec, calls, calls[0]["pid"]


def test_profiler_windows_hold_exactly_their_calls(profiler_run):
    runtime, rec, log, pid = profiler_run
    events = read_events(rec.dir, pids={pid}, prefix="memq:")
    windows = [(e["open"], e["index"], e["api_label"], e["cause_label"]) for e in events if e["event"] == "memq:window"]
    expect = []
    for index, (start, stop) in enumerate(PROFILER_APIS[runtime]):
        expect += [(1, index, start, "profiler_api"), (0, index, stop, "profiler_api")]
    assert windows == expect
    in_windows, outside = _in_windows(log)
    calls = [e for e in events if e["event"] not in PROCESS_EVENTS]
    assert_events_match(calls, [c for w in in_windows for c in w])
    assert outside and not any(e["begin_ns"] == 0 for e in calls)  # calls outside windows were made, not recorded

    # Each window opens with the allocations live then: A and B, then B and D (A freed, C freed outside).
    allocs = [c for c in log if c.get("event") == "alloc"]
    a, b, _c, d = (x["ptr"] for x in allocs)
    live_per_window: dict[int, set] = {}
    index = -1
    for e in events:
        if e["event"] == "memq:window" and e["open"]:
            index = e["index"]
        elif e["event"] == "memq:live":
            assert (e["api_label"], e["mem_kind"], e["device"], e["result"]) == (ALLOC_API[runtime], 4, 0, 0)
            live_per_window.setdefault(index, set()).add((e["ptr"], e["size"]))
    assert live_per_window == {0: {(a, 4096), (b, 8192)}, 1: {(b, 8192), (d, 2048)}}


def test_profiler_windows_resolve_and_report(profiler_run):
    runtime, rec, log, pid = profiler_run
    trace = _convert(rec.dir)
    allocs = [c["ptr"] for c in log if c.get("event") == "alloc"]
    a, b = allocs[0], allocs[1]
    with open_trace(trace) as engine:
        got = engine.query("""
            INCLUDE PERFETTO MODULE memq.allocations;
            INCLUDE PERFETTO MODULE memq.copies;
            SELECT a.alloc_id, a.addr, a.size, a.live_at_start, a.window, a.leaked, a.outlived_window,
                   a.free_slice_id IS NOT NULL AS freed, a.api
            FROM memq_allocation a ORDER BY a.alloc_id""")
        rows = got.to_dict("records")
        # A: live when window 0 opened, freed in it; the copy from it resolves to it.
        a_live = [r for r in rows if r["addr"] == a and r["live_at_start"] and r["window"] == 0]
        assert len(a_live) == 1 and a_live[0]["freed"] and not a_live[0]["leaked"]
        assert a_live[0]["api"] == ALLOC_API[runtime]
        copies = engine.query("INCLUDE PERFETTO MODULE memq.copies; "
                              "SELECT src, dst, src_alloc_id, dst_alloc_id FROM memq_copy ORDER BY ts")
        assert len(copies) == 4
        assert int(copies["src_alloc_id"].iloc[0]) == a_live[0]["alloc_id"]
        b_live = {r["window"]: r["alloc_id"] for r in rows if r["addr"] == b and r["live_at_start"]}
        assert set(b_live) == {0, 1}
        assert int(copies["dst_alloc_id"].iloc[1]) == b_live[0]
        assert int(copies["src_alloc_id"].iloc[3]) == b_live[1]
        # Four allocations live at a window's start, one made in a window (C); none freed at exit: no leaks,
        # what outlived its window is reported apart.
        assert sum(r["live_at_start"] for r in rows) == 4 and sum(not r["live_at_start"] for r in rows) == 1
        assert not any(r["leaked"] for r in rows)
        summary = analyses.summary(engine)["allocations"].set_index("kind")
        assert (summary.loc["device", "count"], summary.loc["device", "live_at_start"]) == (1, 4)
        assert analyses.leaks(engine).empty
        outlived = {(r["kind"], r["size"]): (r["count"], r["bytes"], r["live_at_start"])
                    for r in analyses.outlived(engine).to_dict("records")}
        assert outlived == {("device", 8192): (2, 16384, 2), ("device", 2048): (1, 2048, 1),
                            ("device", 1024): (1, 1024, 0)}
        windows = analyses.windows(engine)
        starts = [s for s, _ in PROFILER_APIS[runtime]]
        assert windows[["pid", "window", "open_api", "live_allocations"]].values.tolist() == \
            [[pid, 0, starts[0], 2], [pid, 1, starts[1], 2]]
    out = subprocess.run([*MEMQ, "leaks", str(trace), "--format", "json"], capture_output=True, text=True, check=True)
    payload = json.loads(out.stdout)
    assert set(payload["tables"]) == {"leaks", "outlived", "windows"}
    assert any("capture window" in n for n in payload["notes"]) and any("not leaks" in n for n in payload["notes"])


def test_delay_duration_window(fake_gpu, tmp_path):
    out, log_path = tmp_path / "trace", tmp_path / "calls.jsonl"
    rec = record(out, [str(fake_gpu.window_work), "steps", "hip", "50", "20", str(log_path)], api="hip,cuda",
                 extra=("--delay", "0.4", "--duration", "0.4"))
    capture = rec.meta["enabled"]["capture"]
    assert (capture["range"], capture["delay_s"], capture["duration_s"]) == ("none", 0.4, 0.4)
    assert capture["end_monotonic_ns"] - capture["start_monotonic_ns"] == 400_000_000
    log = read_worklog(log_path)
    pid = log[0]["pid"]
    events = read_events(rec.dir, pids={pid}, prefix="memq:")
    windows = [e for e in events if e["event"] == "memq:window"]
    assert [(w["open"], w["cause_label"], w["index"], w["api"]) for w in windows] == \
        [(1, "delay", 0, 0), (0, "duration", 0, 0)]
    opened, closed = windows[0]["ts"], windows[1]["ts"]
    # The timer opens and closes the window at the bounds memq record computed.
    assert capture["start_monotonic_ns"] <= opened < capture["start_monotonic_ns"] + 50_000_000
    assert capture["end_monotonic_ns"] <= closed < capture["end_monotonic_ns"] + 50_000_000
    assert all(w["vtid"] != pid for w in windows)  # the timer thread, not the program's

    # Every step wholly inside the window is recorded (4 calls), every step wholly outside is not.
    steps = [line for line in log if "step" in line]
    calls = [e for e in events if e["event"] not in PROCESS_EVENTS]
    recorded = {e["begin_ns"] for e in calls}
    inside = [s for s in steps if opened < s["t0"] and s["t1"] < closed]
    outside = [s for s in steps if s["t1"] < opened or s["t0"] > closed]
    assert len(inside) >= 10 and len(outside) >= 10
    for s in inside:
        assert sum(s["t0"] <= t <= s["t1"] for t in recorded) == 4
    for s in outside:
        assert not any(s["t0"] <= t <= s["t1"] for t in recorded)
    assert all(opened <= e["ts"] and e["begin_ns"] <= closed for e in calls)
    live = [e for e in events if e["event"] == "memq:live"]
    l_ptr = log[0]["ptr"]
    assert [(e["ptr"], e["size"]) for e in live] == [(l_ptr, 32768)]

    trace = _convert(rec.dir)
    with open_trace(trace) as engine:
        copies = engine.query("""INCLUDE PERFETTO MODULE memq.copies; INCLUDE PERFETTO MODULE memq.allocations;
            SELECT c.direction, a.live_at_start, a.addr FROM memq_copy c
            LEFT JOIN memq_allocation a ON a.alloc_id = c.src_alloc_id WHERE c.direction = 'DtoD'""")
        assert len(copies) >= len(inside)
        assert copies["live_at_start"].astype(bool).all() and (copies["addr"] == l_ptr).all()
        outlived = analyses.outlived(engine).to_dict("records")
        assert outlived == [{"kind": "device", "size": 32768, "count": 1, "bytes": 32768, "live_at_start": 1}]
        dup = analyses.duplicated(engine)
        total = dup[(dup["grouping"] == "total") & dup["pid"].isna()].iloc[0]
        assert total["recorded_dur"] == closed - opened
        assert dup.attrs["windows"] and "1 capture window" in dup.attrs["windows_note"]


@pytest.mark.parametrize("options, message", [
    (["--delay", "-1"], "--delay '-1': expected a number of seconds >= 0"),
    (["--delay", "soon"], "--delay 'soon': expected a number of seconds"),
    (["--duration", "inf"], "--duration 'inf': expected a number of seconds >= 0"),
    (["--duration", "0"], "--duration 0: a window must last more than 0 seconds"),
    (["--capture-range", "cudaProfilerApi"], "--capture-range 'cudaProfilerApi': choose none or profiler-api"),
    (["--capture-range", "profiler-api", "--duration", "5"], "cannot be combined with --delay/--duration"),
    (["--delay", "1", "--api", "hip,cuda,libc", "--host-source", "lttng"], "LTTng's libc wrapper (--host-source lttng)"),
])
def test_bad_window_options_are_one_line(tmp_path, options, message):
    out = tmp_path / "trace"
    proc = subprocess.run([*MEMQ, "record", "-o", str(out), *options, "--", "true"], capture_output=True, text=True)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("memq: error: ") and message in lines[0], proc.stderr
    assert not out.exists()


def test_forked_child_writes_its_own_window(fake_gpu, tmp_path):
    # The child inherits the open window and the allocation table: it writes its own window open and
    # snapshot (A, allocated by the parent before the fork), then its copy from A and A's free, resolved;
    # it exits inside the window (cause exit). The parent's window holds only the parent's calls.
    out, log_path = tmp_path / "trace", tmp_path / "calls.jsonl"
    rec = record(out, [str(fake_gpu.window_work), "fork", "hip", str(log_path)], api="hip,cuda",
                 extra=("--capture-range", "profiler-api"))
    log = read_worklog(log_path)
    parent = log[0]["pid"]
    child = next(line["pid"] for line in log if line["pid"] != parent)
    a = log[0]["ptr"]
    mine = {pid: read_events(rec.dir, pids={pid}, prefix="memq:") for pid in (parent, child)}
    summary = {pid: [(e["event"], e.get("open"), e.get("cause_label"), e.get("ptr", e.get("src")))
                     for e in events if e["event"] not in NOT_CALLS]
               for pid, events in mine.items()}
    assert summary[child] == [("memq:window", 1, "profiler_api", None), ("memq:live", None, None, a),
                              ("memq:copy", None, None, a), ("memq:free", None, None, a),
                              ("memq:window", 0, "exit", None)]
    assert summary[parent] == [("memq:window", 1, "profiler_api", None), ("memq:live", None, None, a),
                               ("memq:copy", None, None, log[-2]["src"]), ("memq:window", 0, "profiler_api", None)]
    trace = _convert(rec.dir)
    with open_trace(trace) as engine:
        got = engine.query("""INCLUDE PERFETTO MODULE memq.copies; INCLUDE PERFETTO MODULE memq.allocations;
            SELECT p.pid, a.live_at_start, a.addr, a.free_slice_id IS NOT NULL AS freed FROM memq_copy c
            JOIN process p USING (upid) JOIN memq_allocation a ON a.alloc_id = c.src_alloc_id""")
        assert got.values.tolist() == [[child, 1, a, 1]]
        windows = analyses.windows(engine)
        assert sorted(map(tuple, windows[["pid", "close_cause"]].values.tolist())) == \
            sorted([(parent, "profiler_api"), (child, "exit")])


def test_windows_racing_with_allocations_are_exact(fake_gpu, tmp_path):
    # 4 threads register a range, copy into it and unregister it while 30 windows open and close: every
    # window's snapshot races with table inserts and takes. Exact means: no release matches nothing, no range
    # starts over a live one, and every copy in a window lands in the range it was made into (registered in
    # the window, or before it and then listed as live, by the snapshot or by the racing call itself).
    out, log_path = tmp_path / "trace", tmp_path / "calls.jsonl"
    # ~100k events a second: 2 MiB sub-buffers (16 MiB a CPU) ride out a consumer starved for seconds on a loaded
    # machine; a lost register would otherwise make its unregister match nothing (LTTng's loss, not the windows').
    rec = record(out, [str(fake_gpu.window_work), "race", "hip", "4", "3000", "30", str(log_path)],
                 api="hip,cuda", extra=("--capture-range", "profiler-api", "--subbuf-size", "2M"))
    assert rec.meta["discarded_events"] == 0 and rec.meta["lost_packets"] == 0
    pid = read_worklog(log_path)[0]["pid"]
    trace = _convert(rec.dir)
    with open_trace(trace) as engine:
        meta = engine.query("""SELECT EXTRACT_ARG(arg_set_id, 'debug.unmatched_frees') AS unmatched,
            EXTRACT_ARG(arg_set_id, 'debug.windows') AS windows,
            EXTRACT_ARG(arg_set_id, 'debug.live_at_start') AS live FROM slice WHERE category = 'memq.meta'""")
        assert meta.values.tolist() == [[0, 30, int(meta["live"].iloc[0])]] and meta["live"].iloc[0] > 0
        got = engine.query("""INCLUDE PERFETTO MODULE memq.copies; INCLUDE PERFETTO MODULE memq.allocations;
            SELECT
              (SELECT COUNT(*) FROM memq_copy) AS copies,
              (SELECT COUNT(*) FROM memq_copy c JOIN memq_allocation a ON a.alloc_id = c.dst_alloc_id
               WHERE a.addr = c.dst) AS resolved,
              (SELECT COUNT(*) FROM slice WHERE EXTRACT_ARG(arg_set_id, 'debug.replaced_alloc_id') IS NOT NULL)
                AS replaced,
              (SELECT COUNT(*) FROM slice WHERE category = 'memq.api' AND name = 'hipHostUnregister'
               AND EXTRACT_ARG(arg_set_id, 'debug.freed_alloc_id') IS NULL) AS frees_unresolved""")
        copies, resolved, replaced, unresolved = got.values.tolist()[0]
        assert copies > 100 and resolved == copies and replaced == 0 and unresolved == 0
        windows = analyses.windows(engine)
        assert (windows["pid"] == pid).all() and windows["window"].tolist() == list(range(30))


def test_a_call_running_past_its_window_is_not_written_in_the_next(fake_gpu, tmp_path):
    # window_work straggler: a copy begun in window 0 runs 1.5 s; the program closes window 0 after 100 ms and
    # opens window 1 at once. The Stop must not wait for the copy (at most the 1 s cap), and the copy, which
    # ends inside window 1, must not be written there (it began before it: window 1 would then hold an event of
    # a call it never saw begin; for a free, one matching nothing). It is left out and said so on stderr.
    out, log_path = tmp_path / "trace", tmp_path / "calls.jsonl"
    rec = record(out, [str(fake_gpu.window_work), "straggler", "hip", str(log_path)], api="hip",
                 extra=("--capture-range", "profiler-api"), env={**os.environ, "FAKE_GPU_SLOW_COPY": "12345"})
    log = read_worklog(log_path)
    pid, straggler_end = log[0]["pid"], next(r["straggler_end"] for r in log if "straggler_end" in r)
    events = read_events(rec.dir, pids={pid}, prefix="memq:")
    windows = [e for e in events if e["event"] == "memq:window"]
    assert [(e["open"], e["index"]) for e in windows] == [(1, 0), (0, 0), (1, 1), (0, 1)]
    assert windows[1]["ts"] < straggler_end < windows[3]["ts"]   # Stop did not wait for the copy
    copies = [e for e in events if e["event"] == "memq:copy"]
    assert [c["bytes"] for c in copies] == [64]
    assert all(windows[2]["ts"] <= e.get("begin_ns", e["ts"]) for e in events
               if windows[2]["ts"] < e["ts"] < windows[3]["ts"])
    assert "1 events of calls still running 1.0 s after their capture window closed were not recorded" in rec.stderr
    with open_trace(_convert(rec.dir)) as engine:
        meta = engine.query("""SELECT EXTRACT_ARG(arg_set_id, 'debug.unmatched_frees') AS unmatched,
            EXTRACT_ARG(arg_set_id, 'debug.windows') AS windows FROM slice WHERE category = 'memq.meta'""")
        assert meta.values.tolist() == [[0, 2]]


def test_heap_blocks_in_a_window(fake_gpu, tmp_path):
    # window_work heap: a worker thread's blocks around a profiler window (default --host-min-size, 4 KiB).
    # H, tracked and allocated before the window, is in its snapshot (memq:live, kind host) and its free in
    # the window ends it; the worker's small blocks so far go out in the window's opening sweep, exactly, so the
    # host live-bytes counter is right from the window's start; what it frees after the close goes out at its
    # exit, outside the window, so `memq leaks`' host row is the small blocks live at the exit.
    out, log_path = tmp_path / "trace", tmp_path / "calls.jsonl"
    rec = record(out, [str(fake_gpu.window_work), "heap", "hip", str(log_path)], api="hip,libc",
                 extra=("--capture-range", "profiler-api"))
    assert rec.meta["discarded_events"] == 0
    log = read_worklog(log_path)
    pid, worker = log[0]["pid"], log[0]["tid"]
    h, k = log[0], next(r for r in log if r["op"] == "alloc" and r["usable"] >= 32768 and r["phase"] == "in")
    assert h["op"] == "alloc" and h["usable"] >= 65536

    def small(phase: str) -> dict[str, int]:
        """The worker's blocks below the threshold in `phase`, as memq:host_small's fields."""
        out = {}
        for op in ("alloc", "free"):
            sizes = [r["usable"] for r in log if r["phase"] == phase and r["op"] == op and r["usable"] < 4096]
            out |= {f"{op}_count": len(sizes), f"{op}_bytes": sum(sizes)}
        return out

    events = read_events(rec.dir, pids={pid}, prefix="memq:")
    opened, closed = (next(e for e in events if e["event"] == "memq:window" and e["open"] == o) for o in (1, 0))
    live = [e for e in events if e["event"] == "memq:live"]
    assert (h["ptr"], h["usable"], "malloc") in {(e["ptr"], e["size"], e["api_label"]) for e in live}
    assert all(e["mem_kind_label"] == "host" for e in live)
    # The worker's tracked blocks in the window: H's free and K; its small blocks are never events.
    mine = [(e["event"], e["ptr"], e["size"]) for e in events
            if e["vtid"] == worker and e["event"] in ("memq:host_alloc", "memq:host_free")]
    assert mine == [("memq:host_free", h["ptr"], h["usable"]), ("memq:host_alloc", k["ptr"], k["usable"])]
    # (memq:identity and the library map are the process's, written whenever a call first finds them unwritten:
    # windows do not gate them)
    assert all(opened["ts"] < e["ts"] < closed["ts"] for e in events
               if e["vtid"] == worker and e["event"] not in ("memq:host_small", "memq:identity", *LIBRARY_EVENTS))

    # The opening sweep (written by the thread that opened the window, before the worker went on): the
    # worker's totals of everything before the window, exactly, in one event.
    first_in = next(e["ts"] for e in events if e["vtid"] == worker and e["event"] == "memq:host_free")
    keys = ("alloc_count", "alloc_bytes", "free_count", "free_bytes")
    smalls = [e for e in events if e["event"] == "memq:host_small"]
    sweep = [e for e in smalls if opened["ts"] <= e["ts"] < first_in]
    assert small("before") in [{k_: e[k_] for k_ in keys} for e in sweep]
    assert all(e["vtid"] != worker for e in sweep)
    # After the close the worker frees 10 small blocks: they go out at its exit, outside the window.
    after = [{k_: e[k_] for k_ in keys} for e in smalls if e["vtid"] == worker and e["ts"] > closed["ts"]]
    assert after == [small("after")]

    def delta(e: dict) -> int:
        return e["alloc_bytes"] - e["free_bytes"]

    trace = _convert(rec.dir)
    with open_trace(trace) as engine:
        counter = engine.query("""SELECT c.ts, CAST(c.value AS INT) AS value FROM counter c
            JOIN process_counter_track t ON c.track_id = t.id JOIN process p USING (upid)
            WHERE t.name = 'Host heap live bytes' AND p.pid = %d ORDER BY c.ts, c.id""" % pid)
        # Right from the window's start: the snapshot's host blocks plus every small total written so far
        # (the trace's clock is the window slice's, LTTng's is CLOCK_MONOTONIC).
        window_ts = engine.query("SELECT ts FROM slice WHERE category = 'memq.window'")["ts"].iloc[0]
        shift = int(window_ts) - opened["ts"]
        at_open = max(e["ts"] for e in sweep)
        expect = sum(e["size"] for e in live) + sum(delta(e) for e in smalls if e["ts"] <= at_open)
        value = counter[counter["ts"] <= at_open + shift]["value"].iloc[-1]
        assert value == expect
        assert value >= h["usable"] + small("before")["alloc_bytes"] - small("before")["free_bytes"]
        assert (counter["value"] >= 0).all()

        rows = engine.query("""INCLUDE PERFETTO MODULE memq.allocations;
            SELECT addr, size, kind, live_at_start, leaked, outlived_window, free_slice_id IS NOT NULL AS freed
            FROM memq_allocation WHERE kind = 'host'""").to_dict("records")
        # H: live at the start, freed in the window; K (often at H's address): outlived its window.
        held = [(r["addr"], r["size"], r["live_at_start"], r["freed"], r["leaked"], r["outlived_window"])
                for r in rows if r["addr"] in (h["ptr"], k["ptr"])]
        assert sorted(held) == sorted([(h["ptr"], h["usable"], 1, 1, 0, 0), (k["ptr"], k["usable"], 0, 0, 0, 1)])
        meta = engine.query("SELECT EXTRACT_ARG(arg_set_id, 'debug.unmatched_frees') AS u FROM slice "
                            "WHERE category = 'memq.meta'")
        assert meta["u"].tolist() == [0]
        # K outlived its window (its fate after the close is unknown); the small blocks are exact at the exit.
        outlived = analyses.outlived(engine)
        assert ((outlived["kind"] == "host") & (outlived["size"] == k["usable"])).any()
        leaks = analyses.leaks(engine)
        host_rows = leaks[(leaks["kind"] == "host") & leaks["size"].isna()]
        assert len(host_rows) == 1
        host_row = host_rows.iloc[0]
        assert host_row["bytes"] == sum(delta(e) for e in smalls)
        worker_live = sum(small(p)["alloc_bytes"] - small(p)["free_bytes"] for p in ("before", "in", "after"))
        assert host_row["bytes"] >= worker_live > 0
