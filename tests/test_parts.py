"""A recording cut into parts at quiet times, each part starting with the mirrors the previous one left alive
(ctf2perfetto/analysis/parts.py, sql/memq/carried.sql): inside every part, the mirror figures are the whole trace's;
merged (ctf2perfetto/analysis/wholerun.py), every analysis's output is the whole trace's.

Hypothesis draws logs as test_ranges does (plain and windowed cases, small blocks, loss) and a number of
parts; the quiet points after each multiple of the part length cut the log into parts, each converted as a
range (`clip`) into a trace of its own and loaded by `parts.each_part`, which hands each part what the
previous one's `carry_out` gave. Then

* each part's duplicated bytes over time (every grouping but `allocation`, whose keys are each trace's own
  ids; per process and for the trace) equal the whole trace's over the part, the allocation grouping's peaks
  and integrals equal the whole trace's for the same allocations (matched by process, kind, address and size),
  and every copy of the part has the whole trace's redundant bytes per class, evidence and prorated time;
* the rows each analysis' `*_of_parts` merges from the parts (duplicated, redundant, the four summary tables, leaks,
  outlived), their notes, warnings and capture windows equal the whole trace's, allocation keys (the whole
  trace's ids) included. Logs whose processes are partly windowed are left out: a recording is not (the
  preload records every process of a run alike), and the first part would give their windowless processes a
  window.

`test_pinned_parts` holds a fixed log of the hard cases (scripts/mutation_check.py plants bugs in the carried
pieces' SQL and checks it catches each); `quiet_points` is checked against a brute-force scan of the times after
each target.
"""
from __future__ import annotations

import math

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctf2perfetto import analyses
from ctf2perfetto.analysis.duplicated import duplicated_of_parts
from ctf2perfetto.analysis.leaks import leaks_of_parts
from ctf2perfetto.analysis.redundant import redundant_of_parts
from ctf2perfetto.analysis.summary import summary_of_parts
from ctf2perfetto.engine import open_trace
from ctf2perfetto.events import EventBatch, EventKind as K, MemKind as M, TraceInfo
from ctf2perfetto.analysis.parts import BEGINNING, carry_out, each_part, quiet_points
from ctf2perfetto.convert.ranges import Range, RangeReport, clip
from ctf2perfetto.convert.write import write_trace
from support.rows import Rows, in_time_order
from test_analyses_property import _int
from test_ranges import SETTINGS, _split, recording

EXAMPLES = 40
CONTENT_AFTER_LATER = 8
GROUPINGS = ("total", "direction", "untracked_source")
REDUNDANT = ("no_op_bytes", "repeat_bytes", "round_trip_bytes", "managed_bytes", "unified_bytes", "content_bytes",
             "class", "evidence", "redundant_dur")


# -- quiet points -------------------------------------------------------------------------------------
def busy_intervals(rows: list[dict]) -> list[tuple[int, int]]:
    """Every call's [begin, ts], and every asynchronous copy's [begin, its GPU_COPY_DONE's ts] (to the end of
    time when it never completes)."""
    out, waiting = [], {}
    for r in rows:
        out.append((r.get("begin", r["ts"]), r["ts"]))
        if r["kind"] == K.GPU_COPY and r.get("content", 0) & CONTENT_AFTER_LATER:
            waiting[(r["pid"], r["seq"])] = r.get("begin", r["ts"])
        elif r["kind"] == K.GPU_COPY_DONE and (r["pid"], r.get("seq", 0)) in waiting:
            out.append((waiting.pop((r["pid"], r["seq"])), r["ts"]))
    return out + [(b, 2**62) for b in waiting.values()]


def first_quiet(rows: list[dict], target: int, search: int) -> int | None:
    """Brute force: try every ns from the target on."""
    t0 = rows[0].get("begin", rows[0]["ts"])
    busy = busy_intervals(rows)
    for x in range(t0 + target, t0 + target + search):
        if not any(b <= x <= e for b, e in busy):
            return x - t0
    return None


@settings(max_examples=200, **SETTINGS)
@given(recording().filter(lambda rd: rd[0]), st.integers(1, 12), st.integers(1, 60),
       st.lists(st.integers(0, 400), max_size=4))
def test_quiet_points_are_the_first_times_no_call_holds(drawn, parts, search, cuts) -> None:
    rows, _ = drawn
    t0 = rows[0].get("begin", rows[0]["ts"])
    length = max(r["ts"] for r in rows) - t0
    every = max(length // parts, 1)
    scan = quiet_points(_split(rows, cuts), every, search)
    assert scan.length == length and scan.windowed == any(r["kind"] == K.WINDOW for r in rows)
    assert scan.targets == list(range(every, length, every))
    expect = [first_quiet(rows, t, search) for t in scan.targets]
    assert scan.points == [None if x is None or x >= length else x for x in expect]


# -- parts against the whole ----------------------------------------------------------------------------
def _write(batches: list[EventBatch], devices: list[dict], path) -> None:
    write_trace(batches, TraceInfo(devices=devices), path)


def _steps(engine, lo: int | None, hi: int | None) -> dict[tuple, list[tuple[int, int]]]:
    """Duplicated bytes per (grouping, pid, key) as (time, value) changes within [lo, hi), with the value held at
    lo first; the groupings whose keys do not depend on the trace's own ids."""
    df = engine.query("""INCLUDE PERFETTO MODULE memq.duplicated;
        SELECT c.grouping, p.pid, c.key, c.ts, c.value FROM memq_duplicated_counter c
        LEFT JOIN process p USING (upid) ORDER BY c.ts""")
    out: dict[tuple, list[tuple[int, int]]] = {}
    for r in df.itertuples():
        if r.grouping not in GROUPINGS:
            continue
        key = (r.grouping, _int(r.pid), None if r.key is None else str(r.key))
        ts, value = int(r.ts), int(r.value)
        series = out.setdefault(key, [])
        if lo is not None and ts <= lo:
            series[:] = [(lo, value)]
        elif hi is None or ts < hi:
            series.append((ts, value))
    changes = {}
    for key, series in out.items():  # from 0: a value restated is no change
        kept, held = [], 0
        for ts, value in series:
            if value != held:
                kept.append((ts, value))
                held = value
        if kept:
            changes[key] = kept
    return changes


def _by_allocation(engine, lo: int | None, hi: int | None) -> dict[tuple, tuple[int, float]]:
    """Per destination allocation (pid, kind, addr, size): peak duplicated bytes in [lo, hi) and their integral."""
    df = engine.query("""INCLUDE PERFETTO MODULE memq.duplicated;
        SELECT p.pid, a.kind, a.addr, a.size, c.ts, c.dur, c.value FROM memq_duplicated_counter c
        JOIN process p USING (upid) LEFT JOIN memq_allocation a ON a.alloc_id = CAST(c.key AS INT)
        WHERE c.grouping = 'allocation'""")
    out: dict[tuple, list] = {}
    for r in df.itertuples():
        start, end = int(r.ts), int(r.ts) + int(r.dur)
        start, end = max(start, lo if lo is not None else start), min(end, hi if hi is not None else end)
        if end <= start:
            continue
        key = (int(r.pid), None if pd.isna(r.kind) else r.kind, _int(r.addr), _int(r.size))
        peak, integral = out.setdefault(key, [0, 0])
        out[key] = [max(peak, int(r.value)), integral + int(r.value) * max(end - start, 0)]
    return {k: tuple(v) for k, v in out.items() if v[0]}


def _redundant(engine, lo: int | None, hi: int | None) -> list[tuple]:
    """Per copy returning in [lo, hi): who, when and what (a trace's call ids are its own), and its figures."""
    df = engine.query("INCLUDE PERFETTO MODULE memq.redundant; SELECT * FROM memq_redundant_copy_report!('auto')")
    who = ("pid", "tid", "ts", "dur", "direction", "bytes")
    return sorted(tuple(str(None if pd.isna(r[c]) else r[c]) for c in who + REDUNDANT) for r in df.to_dict("records")
                  if (lo is None or r["ts"] + r["dur"] > lo) and (hi is None or r["ts"] + r["dur"] < hi))


def _maker(rows: list[dict], devices: list[dict]):
    """parts.each_part's `make` for a log: the range's batches from `clip`, written as the converter would."""
    def make(span: Range, path):
        report = RangeReport()
        summary = write_trace(list(clip(_split(rows, []), span, report)), TraceInfo(devices=devices), path)
        summary.range_report = report
        return summary

    return make


def check_parts(rows: list[dict], devices: list[dict], bounds: list[int], tmp) -> int:
    """Parts at `bounds` (quiet ns after the start) against the whole trace; returns the pieces carried."""
    _write(_split(rows, []), devices, tmp / "whole.pftrace")
    t0 = rows[0].get("begin", rows[0]["ts"])
    spans = [Range(a, b) for a, b in zip([BEGINNING] + bounds, bounds + [None])]
    moved = 0
    with open_trace(tmp / "whole.pftrace") as whole:
        for part in each_part(spans, _maker(rows, devices)):
            lo, hi = part.start, part.end
            # on the log's clock (no clock readings); where a window opens or closes for the range, then
            assert (lo, hi) == (None if part.index == 0 else t0 + part.span.start,
                                None if part.span.end is None else t0 + part.span.end)
            opened, closed = part.engine.rows("""INCLUDE PERFETTO MODULE memq.windows;
                SELECT (SELECT MIN(ts) FROM memq_window WHERE open_cause = 'range') AS a,
                  (SELECT MAX(end_ts) FROM memq_window WHERE close_cause = 'range') AS b""").rows[0]
            assert opened in (None, lo) and closed in (None, hi)
            assert _steps(part.engine, lo, hi) == _steps(whole, lo, hi), (part.index, lo, hi)
            assert _by_allocation(part.engine, lo, hi) == _by_allocation(whole, lo, hi), (part.index, lo, hi)
            assert _redundant(part.engine, lo, hi) == _redundant(whole, lo, hi), (part.index, lo, hi)
            moved += len(carry_out(part.engine, hi).pieces) if hi is not None else 0
    return moved


def cuts(rows: list[dict], parts: int) -> list[int]:
    """Where `parts` parts of the log begin (after the first): the quiet points after each multiple of a part."""
    length = max(r["ts"] for r in rows) - rows[0].get("begin", rows[0]["ts"])
    scan = quiet_points(_split(rows, []), max(length // parts, 1), max(length, 1))
    return sorted({x for x in scan.points if x is not None and 0 < x})


def test_parts_have_the_whole_traces_mirror_figures(tmp_path_factory) -> None:
    carried: list[int] = []

    @settings(max_examples=EXAMPLES, **SETTINGS)
    @given(recording().filter(lambda rd: rd[0]), st.integers(2, 4))
    def compare(drawn, parts) -> None:
        rows, devices = drawn
        bounds = cuts(rows, parts)
        if not bounds:
            return
        carried.append(check_parts(rows, devices, bounds, tmp_path_factory.mktemp("parts")))

    compare()
    assert len(carried) >= EXAMPLES // 3 and sum(carried) > 0, carried


# -- the whole run's figures, merged from its parts ------------------------------------------------------
def _close(got: list[dict], expect: list[dict], table: str) -> None:
    """Row by row, the same values; floats (integrals and means, summed in another order) to 1e-9."""
    assert [list(r) for r in got] == [list(r) for r in expect], table
    for g, e in zip(got, expect):
        for column, value in e.items():
            if isinstance(value, float) and not math.isnan(value):
                assert g[column] == pytest.approx(value, rel=1e-9, abs=1e-6), (table, column, g, e)
            else:
                assert g[column] == value or (_none(g[column]) and _none(value)), (table, column, g, e)


def _none(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def check_merged(rows: list[dict], devices: list[dict], bounds: list[int], tmp) -> None:
    _write(_split(rows, []), devices, tmp / "whole.pftrace")
    spans = [Range(a, b) for a, b in zip([BEGINNING] + bounds, bounds + [None])]
    make = _maker(rows, devices)

    windowed = any(r["kind"] == K.WINDOW for r in rows)
    got = {"duplicated": duplicated_of_parts(each_part(spans, make), windowed),
           "redundant": redundant_of_parts(each_part(spans, make), windowed)}
    got.update(summary_of_parts(each_part(spans, make), windowed))
    got["leaks"], got["outlived"] = leaks_of_parts(each_part(spans, make), windowed)
    with open_trace(tmp / "whole.pftrace") as whole:
        expect = {"duplicated": analyses.duplicated_rows(whole), "redundant": analyses.redundant_rows(whole),
                  **analyses.summary_rows(whole), "leaks": analyses.leaks_rows(whole),
                  "outlived": analyses.outlived_rows(whole)}
        warnings = analyses.trace_warnings(whole)
    for key in expect:
        records, expected = got[key].records(), expect[key].records()
        if key in ("api", "allocations", "leaks", "outlived"):  # by time or bytes: ties in no particular order
            records, expected = sorted(records, key=repr), sorted(expected, key=repr)
        _close(records, expected, key)
    for key in expect:
        mine, theirs = got[key], expect[key]
        assert mine.attrs["warnings"] == warnings, key
        assert {k: mine.attrs[k] for k in ("applies", "note", "source", "windows_note")} == \
            {k: theirs.attrs[k] for k in ("applies", "note", "source", "windows_note")}, key
        assert mine.attrs["windows"].records() == theirs.attrs["windows"].records(), key


def _plain(rows: list[dict]) -> bool:
    """A log whose processes all have windows of their own, or none has: what a recording is (the preload
    records every process of a run alike). A process without windows in a windowed log would get windows in
    the first part (a range's), and the whole run's recorded time would not be the parts'."""
    pids = {r["pid"] for r in rows if r["kind"] != K.LOST}
    windowed = {r["pid"] for r in rows if r["kind"] == K.WINDOW}
    return not windowed or windowed == pids


def test_merged_parts_equal_the_whole_trace(tmp_path_factory) -> None:
    merged: list[int] = []

    @settings(max_examples=EXAMPLES, **SETTINGS)
    @given(recording().filter(lambda rd: rd[0] and _plain(rd[0])), st.integers(2, 4))
    def compare(drawn, parts) -> None:
        rows, devices = drawn
        bounds = cuts(rows, parts)
        if not bounds:
            return
        check_merged(rows, devices, bounds, tmp_path_factory.mktemp("merged"))
        merged.append(len(bounds))

    compare()
    assert len(merged) >= EXAMPLES // 3, merged


# -- the hard cases, pinned ------------------------------------------------------------------------------
HOST, HOST2, DEV, DEV2 = 0x10000, 0x20000, 0x30000, 0x40000


def carried_log() -> list[dict]:
    """Mirrors alive across cuts at 1000 and 2000 (ns after the start), one part each between:

    * HtoD of 64 bytes at 100, fingerprinted (content 7); a registration over half of its source at 300, after
      the copy: not a holder of the mirror, so unregistering it at 1100 leaves the mirror alive, and the copy at
      1200 repeats that half (checked by content: the same fingerprint);
    * a DtoD copy at 400 of 32 bytes from DEV2 + 16 to DEV2 (source and destination overlap: its own write does
      not end its pieces), repeated at 1300;
    * DtoH at 1500 sending bytes 32..48 back where they came from (a round trip of a carried piece);
    * in the last part, a read of the whole of DEV at 2100 with another fingerprint: the rest of the mirror
      (bytes 48..64, carried twice) ends there, by content; the host block freed at 2300."""
    log = Rows(0)
    return in_time_order([
        log.malloc(10, HOST, 64), log.malloc(10, HOST2, 64), log.gpu_alloc(20, DEV, 64, dur=10),
        log.gpu_alloc(20, DEV2, 64, dur=10),
        log.fingerprinted(log.copy(100, 150, DEV, HOST, 64, 1), 1, src=7, after=7),
        log.gpu_alloc(300, HOST, 32, M.REGISTERED, dur=10),
        log.copy(400, 450, DEV2, DEV2 + 16, 32, 3),
        log.gpu_free(1100, HOST, 32, M.REGISTERED, dur=10),
        log.fingerprinted(log.copy(1200, 1250, DEV, HOST, 32, 1), 2, src=7, after=7),
        log.copy(1300, 1350, DEV2, DEV2 + 16, 32, 3),
        log.copy(1500, 1550, HOST + 32, DEV + 32, 16, 2),
        log.fingerprinted(log.copy(2100, 2150, HOST2, DEV, 64, 2), 3, src=9, after=9),
        log.free(2300, HOST)])


@pytest.mark.parametrize("parts", ["per part", "merged"])
def test_pinned_parts(tmp_path, parts) -> None:
    rows = carried_log()
    t0 = rows[0]["ts"]
    bounds = [1000 - t0, 2000 - t0]
    if parts == "per part":
        assert check_parts(rows, [], bounds, tmp_path) > 0
    else:
        check_merged(rows, [], bounds, tmp_path)
