"""`ctf2perfetto --from/--to` (ctf2perfetto/convert/ranges.py) against an independent cut of the log.

`range_cut` below is the module docstring of ranges.py in plain Python over row dicts, written
without its code: the rows before the range run through the oracle (tests/oracle.py) for the
allocations live at its start, and a few dicts follow the windows, threads and small-block totals.
Hypothesis draws logs (the generated cases of test_analyses_property, recordings with windows of
their own as test_windows_analyses cuts them, both mixed in one log, with HOST_SMALL and LOST rows
added at random places) and ranges that start and end at event times, at a call's begin (so calls
straddle the start), at 0 (the first row's begin), just after a window of the recording closed or
its second one opened, and end at the last event, beyond it or nowhere. The log goes through `clip`
as the decoder hands it: several batches split at random rows (empty ones too), one `api_names`
list shared by all of them. Then:

* every column of every row `clip` writes, in order, equals `range_cut`'s, and so do the
  RangeReport's counts;
* every analysis figure of the cut log equals the oracle's (test_windows_analyses.check_windows; a
  range to the end leaves windows the trace never closes, a range's end may fall where a copy
  returns: test_windows_analyses.test_copies_returning_as_their_window_closes pins both ties),
  and the trace written from `clip`'s own batches holds the oracle's allocations of the cut log,
  its windows and the small-block totals of its HOST_SMALL rows;
* small pinned logs (test_pinned_ranges) hold the cases a draw finds rarely, and Range.from_seconds
  and a start past the trace's end are usage errors.

Order at equal times: `range_cut` writes the rows made at the range's start and end process by
process in pid order, as `clip` does. The docstring does not fix that order across processes; the
test asserts it anyway so that clip's output stays deterministic (every order it does fix, per
process WINDOW then HOST_SMALL then LIVE rows by start, a window opened right before a process's
first row, loss before small-block totals at the end, is asserted by the same comparison).
"""
from __future__ import annotations

import math
from collections import defaultdict

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import oracle
from ctf2perfetto.engine import open_trace
from ctf2perfetto.errors import UsageError
from ctf2perfetto.events import COLUMNS, EventBatch, EventKind as K, MemKind as M, TraceInfo
from ctf2perfetto.convert.ranges import Range, RangeReport, clip
from ctf2perfetto.convert.write import write_trace
from test_analyses_property import _combine, _int, case
from test_windows_analyses import MEM_KIND, check_windows, windowed_case

ROW_EXAMPLES = 300  # logs x ranges compared row by row (fast: no trace_processor)
TRACE_EXAMPLES = 50  # of which written and analysed (each loads two traces into trace_processor)
RANGE_CAUSE, DELAY_CAUSE = 5, 1  # WindowCause.RANGE, DELAY
CONTENT_AFTER_LATER = 8  # GPU_COPY `content` bit: its after-fingerprint comes in a GPU_COPY_DONE row
HEAP_ALLOCS = (K.MALLOC, K.CALLOC, K.MEMALIGN, K.POSIX_MEMALIGN, K.REALLOC)
SETTINGS = dict(deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate],
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.large_base_example, HealthCheck.filter_too_much])


# -- the independent cut ---------------------------------------------------------------------------
def _made(kind: int, ts: int, pid: int, tid: int, **columns) -> dict:
    return {"kind": kind, "ts": ts, "begin": ts, "pid": pid, "tid": tid, "api": "", **columns}


def _started_mem(r: dict) -> str | None:
    """The memory kind (oracle name) of the allocation a row starts, None when it starts none."""
    kind = r["kind"]
    if kind in (K.MALLOC, K.CALLOC, K.MEMALIGN, K.POSIX_MEMALIGN, K.REALLOC, K.HOST_ALLOC):
        return "host"
    if kind == K.GPU_REGISTER:
        return "registered"
    if kind in (K.GPU_ALLOC, K.LIVE):
        return oracle.MEM_NAME[M(r["mem"])]
    return None


def _allocating_api(before: list[dict], a: oracle.Alloc) -> str:
    """The function that made a live allocation: the last row before the range that started it (its end is the
    allocation's start; a later row starting the same block at the same time would have replaced it)."""
    for r in reversed(before):
        if (r["pid"] == a.pid and r["ts"] == a.start and r.get("ptr", 0) == a.addr and r["size"] == a.size
                and _started_mem(r) == a.mem):
            return r.get("api", "")
    raise AssertionError(f"no row made {a}")


def range_cut(rows: list[dict], start: int, end: int | None) -> tuple[list[dict], dict]:
    """The rows a capture window over [start, end] (ns after the first row) would have held, and the counts a
    RangeReport must hold (see the module docstring of ctf2perfetto/convert/ranges.py)."""
    t0 = rows[0].get("begin", rows[0]["ts"])  # the range's zero: the first row's begin
    lo, hi = t0 + start, None if end is None else t0 + end
    before = [r for r in rows if r["ts"] < lo]
    inside = [r for r in rows if r["ts"] >= lo and (hi is None or r["ts"] <= hi)]
    after = [r for r in rows if hi is not None and r["ts"] > hi]
    assert len(before) + len(inside) + len(after) == len(rows) and (inside or after)
    counts = dict(first_ts=t0, before=0, after=0, lost_before=0, done_dropped=0, opened=0, closed=0, live=0,
                  ended_before=hi is not None and not after)

    # Before the range: only loss is written; the threads, windows and small blocks are followed.
    out = [dict(r) for r in before if r["kind"] == K.LOST]
    tid: dict[int, int] = {}  # pid -> its last thread before the range (then its first in it)
    with_windows: set[int] = set()  # processes with windows of their own
    open_index: dict[int, int] = {}  # pid -> index of its open window

    def follow_window(r: dict) -> None:
        pid = r["pid"]
        with_windows.add(pid)
        if r["aux"]:
            open_index[pid] = r["flags"]
        elif open_index.get(pid) == r["flags"]:
            del open_index[pid]

    small: dict[int, list[int]] = {}
    running: set[int] = set()  # processes with rows before the range besides small-block totals
    for r in before:
        if r["kind"] == K.LOST:
            counts["lost_before"] += 1
            continue
        counts["before"] += 1
        tid[r["pid"]] = r["tid"]
        if r["kind"] != K.HOST_SMALL:
            running.add(r["pid"])
        if r["kind"] == K.WINDOW:
            follow_window(r)
        if r["kind"] == K.HOST_SMALL:
            sums = small.setdefault(r["pid"], [0, 0, 0, 0])
            for i, column in enumerate(("size", "flags", "aux", "aux2")):
                sums[i] += r[column]

    # At its start: per process running before (and not between two windows of its own) a window, its small
    # blocks' totals, and what the oracle has live then, in the order it was made; the totals alone for a
    # process between its windows or seen only through them.
    live = sorted((a for a in oracle.build(before).allocs if a.end is None), key=lambda a: (a.start, a.index))
    for pid in sorted(tid):
        opens = pid in running and not (pid in with_windows and pid not in open_index)
        if opens:
            window = _made(K.WINDOW, lo, pid, tid[pid], aux=1, aux2=RANGE_CAUSE, flags=open_index.get(pid, 0))
            out.append(window)
            follow_window(window)
            counts["opened"] += 1
        if pid in small:
            size, freed, allocated, frees = small[pid]
            out.append(_made(K.HOST_SMALL, lo, pid, tid[pid], size=size, flags=freed, aux=allocated, aux2=frees))
        if not opens:
            continue
        for a in (a for a in live if a.pid == pid):
            out.append(_made(K.LIVE, lo, pid, tid[pid], ptr=a.addr, size=a.size, mem=MEM_KIND[a.mem],
                             device=0 if a.mem == "host" else a.device, api=_allocating_api(before, a)))
            counts["live"] += 1

    # In it: rows as they are, begins cut at the start; a process new to it opens a window at its first row
    # (small-block totals aside).
    seen = set(running)
    waiting: set[tuple[int, int]] = set()  # copies in the range whose after-fingerprint comes later
    for r in inside:
        kind, pid = r["kind"], r["pid"]
        if kind not in (K.LOST, K.HOST_SMALL) and pid not in seen:
            seen.add(pid)
            tid[pid] = r["tid"]
            if not (kind == K.WINDOW and r["aux"] == 1):
                window = _made(K.WINDOW, r["ts"], pid, r["tid"], aux=1, aux2=DELAY_CAUSE, flags=0)
                out.append(window)
                follow_window(window)
                counts["opened"] += 1
        if kind == K.GPU_COPY and r.get("content", 0) & CONTENT_AFTER_LATER:
            waiting.add((pid, r["seq"]))
        if kind == K.GPU_COPY_DONE:
            if (pid, r["seq"]) not in waiting:
                counts["done_dropped"] += 1
                continue
            waiting.remove((pid, r["seq"]))
        if kind == K.WINDOW:
            follow_window(r)
        out.append(dict(r, begin=max(r.get("begin", r["ts"]), lo)))

    # At its end (when the trace goes on after it): the open windows close; then the loss after it, and per
    # process the totals of its small blocks after it at the last of them.
    if after:
        for pid, index in sorted(open_index.items()):
            out.append(_made(K.WINDOW, hi, pid, tid[pid], aux=0, aux2=RANGE_CAUSE, flags=index))
            counts["closed"] += 1
    small_after: dict[int, dict] = {}
    tail = []
    for r in after:
        if r["kind"] == K.LOST:
            tail.append((r["ts"], 0, len(tail), dict(r)))
            continue
        counts["after"] += 1
        if r["kind"] == K.HOST_SMALL:
            total = small_after.setdefault(r["pid"], _made(K.HOST_SMALL, 0, r["pid"], 0, size=0, flags=0, aux=0,
                                                           aux2=0))
            for column in ("size", "flags", "aux", "aux2"):
                total[column] += r[column]
            total.update(ts=r["ts"], begin=r["ts"], tid=r["tid"])
    tail += [(total["ts"], 1, pid, total) for pid, total in small_after.items()]
    out += [row for *_, row in sorted(tail, key=lambda e: e[:3])]
    return out, counts


# -- rows as comparable tuples -------------------------------------------------------------------------
def _tuple(row: dict) -> tuple:
    """Every column of a row dict (EventBatch defaults for the missing ones; `api` as its name)."""
    full = {name: 0 for name in COLUMNS}
    full.update(copy_kind=-1, begin=row["ts"], api="")
    full.update(row)
    return tuple(full[name] if name == "api" else int(full[name]) for name in COLUMNS)


def _batch_tuples(batches: list[EventBatch]) -> list[tuple]:
    out = []
    for batch in batches:
        columns = {name: batch[name].tolist() for name in COLUMNS}
        names = batch.api_names
        for i in range(len(batch)):
            out.append(tuple(names[columns[n][i]] if n == "api" else columns[n][i] for n in COLUMNS))
    return out


def _split(rows: list[dict], cuts: list[int]) -> list[EventBatch]:
    """The log as the decoder hands it: batches cut at `cuts` (empty ones too), one api_names list for all."""
    names: list[str] = []
    bounds = [0] + sorted(min(c, len(rows)) for c in cuts) + [len(rows)]
    return [EventBatch.from_rows(rows[a:b], names) for a, b in zip(bounds, bounds[1:])]


def _readable(t: tuple) -> dict:
    return {n: v for n, v in zip(COLUMNS, t) if v not in (0, "") and not (n == "copy_kind" and v == -1)}


# -- what is drawn -------------------------------------------------------------------------------------
@st.composite
def recording(draw) -> tuple[list[dict], list[dict]]:
    """A log of 1-5 cases, each plain or with windows of its own, with HOST_SMALL and LOST rows at random
    places (LOST rows of no process or of one that has rows: loss never makes a process seen)."""
    cases = draw(st.lists(st.one_of(case(), windowed_case()), min_size=1, max_size=5))
    rows, devices = _combine(cases)
    rows = [dict(r, api=r.get("api", "")) for r in rows]
    if not rows:
        return rows, devices
    for r in rows:  # a device on heap rows means nothing: a LIVE row of a heap block has device 0
        if r["kind"] in HEAP_ALLOCS and draw(st.integers(0, 3)) == 0:
            r["device"] = 1
    threads = sorted({(r["pid"], r["tid"]) for r in rows})
    for _ in range(draw(st.integers(0, 8))):
        at = draw(st.sampled_from(rows))["ts"] + draw(st.sampled_from([0, 0, -1, 1]))
        where = draw(st.integers(0, len(rows)))
        if draw(st.booleans()):
            pid, tid = draw(st.sampled_from(threads))
            allocated = draw(st.integers(0, 40))
            row = dict(kind=K.HOST_SMALL, ts=at, pid=pid, tid=tid, size=16 * allocated,
                       flags=16 * draw(st.integers(0, allocated)), aux=allocated,
                       aux2=draw(st.integers(0, allocated)), api="")
        else:
            pid = draw(st.sampled_from([0] + [p for p, _ in threads]))
            row = dict(kind=K.LOST, ts=at, pid=pid, tid=pid, size=draw(st.integers(0, 50)),
                       aux=draw(st.integers(1, 9)), aux2=draw(st.integers(0, 1)), api="")
        rows.insert(where, row)
    rows.sort(key=lambda r: r["ts"])  # stable: extra rows fall among the others at their time
    return rows, devices


@st.composite
def clipped(draw, closing: bool = False) -> tuple[list[dict], list[dict], int, int | None, list[int]]:
    """(rows, devices, start, end, batch cuts): a range of a recording, both bounds often at its events;
    `closing`: one that ends before the last row (every window closes at its end)."""
    rows, devices = draw(recording().filter(lambda rd: rd[0]))
    t0 = rows[0].get("begin", rows[0]["ts"])
    last = rows[-1]["ts"] - t0
    closing = closing and last > 1
    top = last - 2 if closing else last  # the last start (leaving room for an end before the last row)
    times = sorted({t - t0 for r in rows for t in (r["ts"], r.get("begin", r["ts"]))} | {0})
    starts = [t + d for t in times for d in (0, 0, 1, -1) if 0 <= t + d <= top]
    # just after a window's close: a process between two windows of its own (or after its last) gets none,
    # or just after a second window opened (what the first window left live must not come back)
    bounds = [r["ts"] - t0 + 1 for r in rows if r["kind"] == K.WINDOW and r["ts"] - t0 < top
              and (r["aux"] == 0 or r["flags"] > 0)]
    start = draw(st.one_of(st.just(0), st.sampled_from(starts), st.integers(0, top),
                           *([st.sampled_from(bounds)] if bounds else [])))
    ends = [t + d for t in times for d in (0, 0, 1, -1) if start < t + d and (not closing or t + d < last)]
    if closing:
        end = draw(st.one_of(st.sampled_from(ends or [start + 1]), st.integers(start + 1, last - 1)))
    else:
        end = draw(st.one_of(st.none(), st.just(last), st.just(last + draw(st.integers(1, 5))),
                             st.sampled_from(ends or [start + 1]), st.integers(start + 1, max(start + 1, last))))
    cuts = draw(st.lists(st.integers(0, len(rows)), max_size=6))
    return rows, devices, start, end, cuts


def run_clip(rows: list[dict], start: int, end: int | None, cuts: list[int]) -> tuple[list[EventBatch], RangeReport]:
    report = RangeReport()
    return list(clip(_split(rows, cuts), Range(start, end), report)), report


def check_rows(rows: list[dict], start: int, end: int | None, cuts: list[int]) -> tuple[list[dict], list]:
    """clip's rows and report equal range_cut's; returns the cut rows and clip's batches."""
    expect_rows, counts = range_cut(rows, start, end)
    batches, report = run_clip(rows, start, end, cuts)
    got, expect = _batch_tuples(batches), [_tuple(r) for r in expect_rows]
    for i, (g, e) in enumerate(zip(got, expect)):
        assert g == e, (i, _readable(g), _readable(e))
    assert len(got) == len(expect), (len(got), len(expect), [_readable(t) for t in (got[len(expect):] or
                                                                                      expect[len(got):])][:4])
    assert {k: getattr(report, k) for k in counts} == counts
    assert all(b.api_names is batches[0].api_names for b in batches)
    return expect_rows, batches


# -- the tests -------------------------------------------------------------------------------------
def test_clip_matches_cut() -> None:
    """Every row and count clip makes equals the independent cut, whatever the batches."""
    seen = defaultdict(int)

    @settings(max_examples=ROW_EXAMPLES, **SETTINGS)
    @given(clipped())
    def compare(drawn) -> None:
        rows, _devices, start, end, cuts = drawn
        cut, _ = check_rows(rows, start, end, cuts)
        lo = rows[0].get("begin", rows[0]["ts"]) + start
        seen["range start at an event"] += any(r["ts"] == lo for r in rows)
        seen["call straddling the start"] += any(r.get("begin", r["ts"]) < lo < r["ts"] for r in rows)
        seen["live rows"] += any(r["kind"] == K.LIVE and r["ts"] == lo for r in cut)
        own = {r["pid"] for r in rows if r["kind"] == K.WINDOW and r["ts"] < lo}  # windows of their own before
        opened = {r["pid"] for r in cut if r["kind"] == K.WINDOW and r["aux2"] == RANGE_CAUSE and r["aux"] == 1}
        seen["window reopened"] += bool(own & opened)
        seen["process between its windows"] += bool(own - opened)
        seen["delay window"] += any(r["kind"] == K.WINDOW and r["aux2"] == DELAY_CAUSE and r["api"] == ""
                                    and r["flags"] == 0 and r.get("aux") == 1 for r in cut)
        seen["closed at the end"] += any(r["kind"] == K.WINDOW and r["aux"] == 0 and r["aux2"] == RANGE_CAUSE
                                         for r in cut)
        seen["small blocks at the start"] += any(r["kind"] == K.HOST_SMALL and r["ts"] == lo and r["api"] == ""
                                                 for r in cut)
        seen["copy done dropped"] += range_cut(rows, start, end)[1]["done_dropped"] > 0

    compare()
    assert all(seen[k] >= 3 for k in ("range start at an event", "call straddling the start", "live rows",
                                      "window reopened", "process between its windows", "delay window",
                                      "closed at the end", "small blocks at the start", "copy done dropped")), \
        dict(seen)


def _windows_ended(ref: oracle.Oracle, rows: list[dict]) -> list[tuple]:
    """The oracle's windows, those the log never closes ending with the trace (as the writer ends them): at its
    last row, or where the range a loss spans ends."""
    last = max(r["ts"] + (r["size"] if r["kind"] == K.LOST else 0) for r in rows)
    return sorted((pid, t0, last if t1 is None else t1) for pid, t0, t1 in ref.windows)


def check_written(batches: list[EventBatch], cut: list[dict], devices: list[dict], path) -> None:
    """The trace written from clip's own batches holds the oracle's allocations and windows of the cut log, and
    the totals of its HOST_SMALL rows."""
    write_trace(batches, TraceInfo(devices=devices), path)
    ref = oracle.build(cut)
    with open_trace(path) as engine:
        df = engine.query("""INCLUDE PERFETTO MODULE memq.allocations;
            SELECT p.pid, a.kind, a.addr, a.size, a.ts, a.end_ts, a.live_at_start, a.outlived_window
            FROM memq_allocation a JOIN process p USING (upid)""")
        never = -1  # end of an allocation never freed (None does not sort among ints)
        allocs = sorted((int(r.pid), r.kind, int(r.addr), int(r.size), int(r.ts), _int(r.end_ts) or never,
                         bool(r.live_at_start), bool(r.outlived_window)) for r in df.itertuples())
        assert allocs == sorted((a.pid, a.mem, a.addr, a.size, a.start, never if a.end is None else a.end,
                                 a.live_at_start, a.outlived) for a in ref.allocs)
        windows = engine.query("INCLUDE PERFETTO MODULE memq.windows; SELECT pid, ts, end_ts FROM memq_window")
        assert sorted((int(r.pid), int(r.ts), int(r.end_ts)) for r in windows.itertuples()) == \
            _windows_ended(ref, cut)
        small = engine.query("""INCLUDE PERFETTO MODULE memq.allocations;
            SELECT p.pid, s.alloc_count, s.alloc_bytes, s.free_count, s.free_bytes
            FROM memq_host_small s JOIN process p USING (upid)""")
        small = sorted(tuple(int(v) for v in r) for r in small.itertuples(index=False))
    sums: dict[int, list[int]] = {}
    for r in cut:
        if r["kind"] == K.HOST_SMALL:
            total = sums.setdefault(r["pid"], [0, 0, 0, 0])
            for i, column in enumerate(("aux", "size", "aux2", "flags")):
                total[i] += r[column]
    assert small == sorted((pid, *total) for pid, total in sums.items())


def test_clipped_analyses_match_oracle(tmp_path_factory) -> None:
    """Every analysis figure of the cut log equals the oracle's, and the trace written from clip's own batches holds
    the oracle's allocations, windows and small-block totals of the cut."""
    analysed: list[int] = []
    written: list[int] = []

    @settings(max_examples=TRACE_EXAMPLES, **SETTINGS)
    @given(st.one_of(clipped(closing=True), clipped(closing=True), clipped()))
    def compare(drawn) -> None:
        rows, devices, start, end, cuts = drawn
        cut, batches = check_rows(rows, start, end, cuts)
        if not any(r["kind"] == K.WINDOW for r in cut):
            return
        # The oracle knows neither loss nor small blocks (the host counter would differ by their bytes).
        modelled = [r for r in cut if r["kind"] not in (K.LOST, K.HOST_SMALL)]
        check_windows(modelled, devices, tmp_path_factory.mktemp("range") / "cut.pftrace")
        analysed.append(1)
        check_written(batches, cut, devices, tmp_path_factory.mktemp("range") / "clipped.pftrace")
        written.append(1)

    compare()
    assert len(analysed) >= TRACE_EXAMPLES // 3 and len(written) >= TRACE_EXAMPLES // 2, (analysed, written)


def _pinned_logs() -> dict[str, tuple[list[dict], int, int | None]]:
    """Small logs of cases a draw finds rarely or that once broke clip: (rows, start, end)."""
    def row(kind, ts, pid=7, **columns):
        return dict(kind=kind, ts=ts, pid=pid, tid=pid, api=columns.pop("api", kind.name.lower()), **columns)

    def window(ts, opens, index, cause=2, pid=7):
        return row(K.WINDOW, ts, pid, aux=int(opens), aux2=cause, flags=index, api="")

    two_windows = [window(100, True, 0), row(K.MALLOC, 110, ptr=0x1000, size=8), window(120, False, 0),
                   window(200, True, 1), row(K.MALLOC, 210, ptr=0x2000, size=8), row(K.FREE, 300, ptr=0x2000),
                   window(310, False, 1)]
    copy = row(K.GPU_COPY, 130, begin=90, ptr=0x3000, src=0x4000, size=4, copy_kind=1, api="hipMemcpyAsync")
    return {
        # --from 0: no process seen before the range (nothing opens at its start)
        "from the first event": ([row(K.MALLOC, 100, ptr=0x1000, size=8)], 0, None),
        "only loss before the range": ([row(K.LOST, 90, pid=0, size=5, aux=1, api=""),
                                        row(K.MALLOC, 100, ptr=0x1000, size=8)], 5, None),
        # every window closed before --to: nothing closes there
        "no window open at the end": (two_windows, 5, 50),
        # a block live at an early close and freed between two windows is not live when the second one is cut
        "second window cut": (two_windows, 115, 205),
        # the first row's begin is the range's zero; a call straddling --from is cut there
        "call straddling the start": ([row(K.MALLOC, 80, ptr=0x1000, size=8), copy], 20, None),
    }


@pytest.mark.parametrize("name", list(_pinned_logs()))
def test_pinned_ranges(name: str) -> None:
    rows, start, end = _pinned_logs()[name]
    for cuts in ([], [1], list(range(len(rows)))):
        check_rows(rows, start, end, cuts)


def _log() -> list[dict]:
    return [dict(kind=K.MALLOC, ts=100, pid=7, tid=7, ptr=0x1000, size=8, api="malloc"),
            dict(kind=K.FREE, ts=150, pid=7, tid=7, ptr=0x1000, api="free"),
            dict(kind=K.LOST, ts=160, pid=0, tid=0, size=5, aux=2, api="")]


def test_start_past_the_trace_is_a_usage_error() -> None:
    rows = _log()
    for start in (61, 62, 10**12):
        with pytest.raises(UsageError):
            run_clip(rows, start, None, [1])
    batches, report = run_clip(rows, 60, None, [1])  # at the last event: the range holds it
    assert report.before == 2 and [len(b) for b in batches] == [2]


@pytest.mark.parametrize("start,end", [(-1, None), (None, -0.5), (math.nan, None), (None, math.nan),
                                       (math.inf, None), (2.0, 1.0), (1.0, 1.0), (0, 0), (None, 0), (2e9, None)])
def test_range_rejects_bad_seconds(start, end) -> None:
    with pytest.raises(UsageError):
        Range.from_seconds(start, end)


def test_range_from_seconds() -> None:
    assert Range.from_seconds(None, None) is None
    assert Range.from_seconds(1.5, None) == Range(1_500_000_000, None)
    assert Range.from_seconds(None, 2) == Range(0, 2_000_000_000)
    assert Range.from_seconds(0, 1e-9) == Range(0, 1)


def test_rows_before_any_function_is_named() -> None:
    """The decoder's first batch may hold rows naming no function (api 0: loss) before it has named any: they map
    to "", and the names that come later keep their own."""
    names: list[str] = []
    lost = EventBatch.empty(1, [])
    lost["kind"][0], lost["ts"][0], lost["begin"][0] = K.LOST, 5, 5
    later = EventBatch.from_rows([dict(kind=K.MALLOC, ts=10, pid=1, tid=1, ptr=16, size=8, api="malloc")], names)
    out = list(clip([lost, later], Range(0, None), RangeReport()))
    assert [[b.api_names[a] for a in b["api"].tolist()] for b in out] == [[""], ["", "malloc"]]
