"""`memq annotate` on the fake HIP workload: the appended tracks load cleanly and hold the figures of the
plain-Python oracle (tests/oracle.py) run on the workload's decoded events."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

import oracle
from ctf2perfetto import analyses
from ctf2perfetto.look.annotate import LEAKS_SHOWN_PER_KIND, Annotations, annotation_packets, write_annotated
from ctf2perfetto.ctf.decode import decode
from ctf2perfetto.engine import open_trace
from ctf2perfetto.events import EventKind
from ctf2perfetto.traceformat import names as N
from support.rows import from_batches
from ui.traces import annotated, converted, memq

# Import problems as docs/notes list them: errors and data losses, plus the info/notice stats that mean a
# TrackEvent packet was dropped or misread.
PROBLEMS_SQL = """
SELECT name, idx, severity, value FROM stats
WHERE value > 0 AND (severity IN ('error', 'data_loss') OR name IN (
  'track_event_parser_errors', 'track_event_tokenizer_errors', 'interned_data_tokenizer_errors',
  'track_hierarchy_missing_uuid', 'packet_skipped_seq_needs_incremental_state_invalid',
  'interned_data_skipped_incremental_state_invalid', 'track_event_skipped_timestamp_delta_without_valid_state',
  'misplaced_end_event', 'track_descriptor_conflicting_reservation'))
"""


@pytest.fixture(scope="module")
def hip(fake_hip_trace, tmp_path_factory) -> Path:
    return converted(fake_hip_trace.dir, tmp_path_factory.mktemp("annotate") / "hip.pftrace")


@pytest.fixture(scope="module")
def hip_annotated(hip: Path) -> Path:
    return annotated(hip, hip.with_name("hip.annotated.pftrace"))


@pytest.fixture(scope="module")
def reference(fake_hip_trace, hip: Path) -> tuple[oracle.Oracle, tuple[int, int]]:
    """The plain-Python oracle (tests/oracle.py) run on the workload's decoded events, and the trace window."""
    with decode(fake_hip_trace.dir) as decoding:
        rows = from_batches(list(decoding), decoding.api_names)
        unified = {(d["pid"], d["device"]) for d in decoding.info.devices if d["unified_memory"]}
    with open_trace(hip) as engine:
        window = tuple(int(v) for v in engine.query("SELECT trace_start() AS s, trace_end() AS e").iloc[0])
        first_copy = engine.query("INCLUDE PERFETTO MODULE memq.copies; SELECT MIN(ts) AS t FROM memq_copy")
        first_copy = int(first_copy["t"][0])
    # Decoded times are on the monotonic clock, the trace's on the wall clock: shift by the first copy's start.
    offset = first_copy - min(r["begin"] for r in rows if r["kind"] == EventKind.GPU_COPY and r["result"] == 0)
    for r in rows:
        r["ts"], r["begin"] = r["ts"] + offset, r["begin"] + offset
    return oracle.build(rows, unified), window


@pytest.fixture(scope="module")
def engines(hip: Path, hip_annotated: Path):
    with open_trace(hip) as original, open_trace(hip_annotated) as annotated_engine:
        yield original, annotated_engine


def test_appends_without_touching_the_trace_and_loads_clean(hip: Path, hip_annotated: Path, engines) -> None:
    original_bytes = hip.read_bytes()
    assert hip_annotated.read_bytes()[:len(original_bytes)] == original_bytes
    assert hip_annotated.stat().st_size > len(original_bytes)
    _, annotated_engine = engines
    assert annotated_engine.query(PROBLEMS_SQL).empty, annotated_engine.query(PROBLEMS_SQL)
    # Every event of the original is still there, unchanged in count.
    count = "SELECT COUNT(*) AS n FROM slice WHERE category IS NOT '" + N.CAT_ANALYSIS + "'"
    assert engines[0].query(count)["n"].iloc[0] == annotated_engine.query(count)["n"].iloc[0]


def _counter(engine, track: str) -> pd.DataFrame:
    return engine.query(f"""
        SELECT c.ts, CAST(c.value AS INT) AS value FROM counter c JOIN counter_track t ON c.track_id = t.id
        WHERE t.name = '{track}' ORDER BY c.ts""").reset_index(drop=True)


def test_duplicated_counters_equal_the_oracle(engines, reference) -> None:
    _, annotated_engine = engines
    ref, window = reference
    total = oracle.counter_series(ref.mirrors, window)
    assert len(total) > 3 and max(v for _, v in total) > 0, \
        "the workload must duplicate bytes for this test to mean much"
    assert list(_counter(annotated_engine, "Duplicated bytes").itertuples(index=False, name=None)) == total
    directions = {m.direction for m in ref.mirrors if m.end is None or m.end > m.start}
    assert directions >= {"HtoD", "DtoH"}
    for direction in directions:
        expected = oracle.counter_series([m for m in ref.mirrors if m.direction == direction], window)
        got = _counter(annotated_engine, f"Duplicated bytes {direction}")
        assert list(got.itertuples(index=False, name=None)) == expected, direction
    # The counter tracks carry the byte unit, so the UI labels them in bytes.
    units = annotated_engine.query("SELECT DISTINCT unit FROM counter_track WHERE name GLOB 'Duplicated bytes*'")
    assert units["unit"].tolist() == ["bytes"] or units["unit"].tolist() == ["B"], units


def test_peak_of_the_counter_is_the_reported_peak(engines, reference) -> None:
    original, annotated_engine = engines
    ref, window = reference
    groups = analyses.duplicated(original)
    peak = groups[(groups["grouping"] == "total") & groups["pid"].isna()]["peak_bytes"].iloc[0]
    assert _counter(annotated_engine, "Duplicated bytes")["value"].max() == peak == \
        oracle.counter_figures(ref.mirrors, window)["peak"]


def test_redundant_copy_slices_equal_the_oracle(engines, reference) -> None:
    """One slice per copy with redundant bytes on one `Redundant copies` track (lanes share the name): its main
    class, the bytes of each class, their formatted twins, and a flow from the copy it judges."""
    _, annotated_engine = engines
    ref, _ = reference
    class_bytes = ", ".join(f"EXTRACT_ARG(s.arg_set_id, 'debug.{cls}_bytes') AS {cls}" for cls in oracle.CLASSES)
    got = annotated_engine.query(f"""
        SELECT t.name AS track, s.ts, s.dur, s.depth, EXTRACT_ARG(s.arg_set_id, 'debug.class') AS cls,
               EXTRACT_ARG(s.arg_set_id, 'debug.redundant_bytes') AS redundant_bytes, {class_bytes},
               EXTRACT_ARG(s.arg_set_id, 'debug.evidence') AS evidence,
               EXTRACT_ARG(s.arg_set_id, 'debug.content_bytes') AS content_bytes,
               EXTRACT_ARG(s.arg_set_id, 'debug.redundant_bytes_fmt') AS redundant_fmt,
               EXTRACT_ARG(s.arg_set_id, 'debug.redundant_dur_fmt') AS dur_fmt,
               EXTRACT_ARG(s.arg_set_id, 'debug.call_id') AS call_id,
               EXTRACT_ARG(s.arg_set_id, 'debug.reason') AS reason,
               (SELECT EXTRACT_ARG(c.arg_set_id, 'debug.call_id') FROM flow f JOIN slice c ON c.id = f.slice_out
                WHERE f.slice_in = s.id AND c.category = '{N.CAT_COPY}') AS flow_from_call,
               (SELECT c.ts FROM flow f JOIN slice c ON c.id = f.slice_out
                WHERE f.slice_in = s.id AND c.category = '{N.CAT_COPY}') AS copy_ts
        FROM slice s JOIN track t ON s.track_id = t.id
        WHERE s.category = '{N.CAT_ANALYSIS}' AND t.name GLOB 'Redundant*'""")
    # The copy's evidence is `content` when a fingerprint proves all its redundant bytes (no-op copies always).
    expected = sorted((N.REDUNDANT_TRACK, w.begin, w.end - w.begin, oracle.copy_class(w), sum(by_class),
                       *(n or None for n in by_class), oracle.proven_bytes(w, "redundant"),
                       "content" if oracle.proven_bytes(w, "redundant") == sum(by_class) else "address")
                      for w in ref.writes if w.src is not None
                      for by_class in [[getattr(w, cls) for cls in oracle.CLASSES]] if any(by_class))
    assert any(w.round_trip for w in ref.writes) and any(w.no_op for w in ref.writes), \
        "the workload must copy data back (round trip) and read back unchanged data (no-op) for this test to mean much"
    assert {row[-1] for row in expected} == {"content", "address"}, "both kinds of evidence must occur"
    rows = got[["track", "ts", "dur", "cls", "redundant_bytes", *oracle.CLASSES, "content_bytes",
                "evidence"]].astype(object)
    assert sorted(tuple(None if pd.isna(v) else v for v in row) for row in rows.itertuples(index=False)) == expected
    assert (got["depth"] == 0).all(), "overlapping copies must go to separate lanes, never nest"
    assert got["reason"].str.len().min() > 20
    assert (got["flow_from_call"] == got["call_id"]).all() and (got["copy_ts"] == got["ts"]).all(), \
        "each verdict has a flow from its own copy"
    assert set(got["redundant_fmt"]) == {N.format_bytes(b) for b in got["redundant_bytes"]}
    assert got["dur_fmt"].str.endswith("s").all()


def _leaks(ref: oracle.Oracle) -> list[oracle.Alloc]:
    return [a for a in ref.allocs if a.end is None]


def test_leaks_are_one_summary(engines, reference) -> None:
    """`Leaked allocations` holds one slice from the first leak to the trace's end: totals, per kind, the largest."""
    original, annotated_engine = engines
    leaks = _leaks(reference[0])
    trace_end = original.query("SELECT trace_end() AS e")["e"].iloc[0]
    marks = annotated_engine.query("""
        SELECT s.id, s.ts, s.dur, s.name, s.arg_set_id FROM slice s JOIN track t ON s.track_id = t.id
        WHERE t.name = 'Leaked allocations'""")
    assert leaks and len(marks) == 1
    mark = marks.iloc[0]
    total = sum(a.size for a in leaks)
    assert (mark["ts"], mark["ts"] + mark["dur"]) == (min(a.start for a in leaks), trace_end)
    args = dict(annotated_engine.query(f"SELECT key, display_value FROM args WHERE arg_set_id = {mark['arg_set_id']}")
                .itertuples(index=False))
    assert (int(args["debug.allocations"]), int(args["debug.bytes"])) == (len(leaks), total)
    assert mark["name"] == f"leaked: {len(leaks):,} allocations, {N.format_bytes(total)}"
    for kind in {a.mem for a in leaks}:
        sizes = sorted((a.size for a in leaks if a.mem == kind), reverse=True)
        assert int(args[f"debug.kinds.{kind}.allocations"]) == len(sizes)
        assert int(args[f"debug.kinds.{kind}.bytes"]) == sum(sizes)
        assert args[f"debug.kinds.{kind}.bytes_fmt"] == N.format_bytes(sum(sizes))
        shown = [int(args[f"debug.kinds.{kind}.largest.{i}.bytes"]) for i in range(1, LEAKS_SHOWN_PER_KIND + 1)
                 if f"debug.kinds.{kind}.largest.{i}.bytes" in args]
        # The largest leaks are the ones shown, largest first.
        assert shown == sizes[:LEAKS_SHOWN_PER_KIND]
        ids = {int(args[f"debug.kinds.{kind}.largest.{i}.alloc_id"]) for i in range(1, len(shown) + 1)}
        assert ids <= set(analyses.leaked_allocations(original)["alloc_id"])
    assert not [k for k in args if k.startswith("debug.kinds.") and k.split(".")[2] not in {a.mem for a in leaks}]


def test_leaked_bytes_counter_grows_to_the_total_leaked(engines, reference) -> None:
    _, annotated_engine = engines
    got = _counter(annotated_engine, "Leaked bytes")
    # For each allocation time, the bytes of leaked allocations made up to then.
    times, expected, running = [], [], 0
    for when, size in sorted((a.start, a.size) for a in _leaks(reference[0])):
        running += size
        if times and times[-1] == when:
            expected[-1] = running
        else:
            times.append(when)
            expected.append(running)
    assert got["ts"].tolist() == times and got["value"].tolist() == expected


def test_overlapping_slices_get_lanes_and_load_clean(hip: Path, tmp_path: Path) -> None:
    with open_trace(hip) as engine:
        start = int(engine.query("SELECT trace_start() AS s")["s"].iloc[0])
    # Three repeat copies where the second overlaps the first and the third fits after the first.
    red = pd.DataFrame({"ts": [start + 100, start + 150, start + 300], "dur": [200, 500, 50],
                        "cls": ["repeat"] * 3, "bytes": [64, 128, 32], "redundant_bytes": [64, 100, 32],
                        "no_op_bytes": [0] * 3, "repeat_bytes": [64, 100, 32], "round_trip_bytes": [0] * 3,
                        "managed_bytes": [0] * 3, "unified_bytes": [0] * 3, "content_bytes": [64, 0, 0],
                        "evidence": ["content", "address", "address"], "redundant_dur": [200, 390, 50],
                        "direction": ["HtoD"] * 3, "api": ["hipMemcpy"] * 3, "call_id": [1, 2, 3]})
    staged = pd.DataFrame({"ts": [start + 400], "dur": [20], "bytes": [4096], "direction": ["HtoD"],
                           "api": ["hipMemcpy"], "call_id": [4]})
    notes = Annotations(pd.DataFrame({"ts": [start + 100], "direction": [""], "value": [64]}), red, staged,
                        pd.DataFrame(columns=["ts", "bytes", "mem_kind", "ptr", "alloc_id", "pid", "api"]),
                        start + 1000)
    out = tmp_path / "lanes.pftrace"
    write_annotated(hip, out, annotation_packets(notes))
    with open_trace(out) as engine:
        assert engine.query(PROBLEMS_SQL).empty
        lanes = engine.query(f"""
            SELECT s.track_id, s.ts - {start} AS t FROM slice s JOIN track t ON s.track_id = t.id
            WHERE t.name = 'Redundant copies' ORDER BY s.ts""")
        staged_rows = engine.query(f"""
            SELECT s.ts - {start} AS t, s.dur, EXTRACT_ARG(s.arg_set_id, 'debug.bytes') AS bytes
            FROM slice s JOIN track t ON s.track_id = t.id WHERE t.name = 'Staged copies'""")
    assert lanes["t"].tolist() == [100, 150, 300]
    first, second, third = lanes["track_id"].tolist()
    assert first != second and third == first
    assert staged_rows.values.tolist() == [[400, 20, 4096]]


def test_unified_yes_marks_every_host_device_copy(hip: Path, tmp_path: Path) -> None:
    out = tmp_path / "unified.pftrace"
    done = memq("annotate", str(hip), "-o", str(out), "--unified", "yes")
    assert done.returncode == 0, done.stderr
    with open_trace(hip) as original:
        copies = analyses.redundant_copies(original, "yes")
    expected = sorted((int(r.ts), int(r.unified_bytes)) for r in copies.itertuples() if (r.unified_bytes or 0) > 0)
    assert expected, "HtoD/DtoH copies on a unified device must be unified-redundant"
    with open_trace(out) as engine:
        got = engine.query("""
            SELECT s.ts, EXTRACT_ARG(s.arg_set_id, 'debug.unified_bytes') AS b FROM slice s
            JOIN track t ON s.track_id = t.id WHERE t.name = 'Redundant copies'
            AND EXTRACT_ARG(s.arg_set_id, 'debug.unified_bytes') IS NOT NULL ORDER BY s.ts""")
    assert sorted(map(tuple, got.astype(int).values.tolist())) == expected


def test_bad_input_is_one_line(hip: Path, hip_annotated: Path, tmp_path: Path) -> None:
    missing = memq("annotate", str(tmp_path / "nope.pftrace"), "-o", str(tmp_path / "x.pftrace"))
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1 and "nope.pftrace" in missing.stderr

    same = memq("annotate", str(hip), "-o", str(hip))
    assert same.returncode == 2 and same.stderr.count("\n") == 1 and "input trace" in same.stderr

    twice = memq("annotate", str(hip_annotated), "-o", str(tmp_path / "twice.pftrace"))
    assert twice.returncode == 2 and twice.stderr.count("\n") == 1 and "annotated already" in twice.stderr
    assert not (tmp_path / "twice.pftrace").exists()

    garbage = tmp_path / "garbage.pftrace"
    garbage.write_bytes(b"\x0a\xff" * 1000)  # starts like a trace, then is not one
    bad = memq("annotate", str(garbage), "-o", str(tmp_path / "g.pftrace"))
    assert bad.returncode == 1 and bad.stderr.count("\n") == 1 and "Traceback" not in bad.stderr
    assert not (tmp_path / "g.pftrace").exists()


def test_refuses_json_traces(test_data: Path, tmp_path: Path) -> None:
    # trace_processor reads Kineto JSON, but packets appended to JSON would make it unreadable.
    kineto = test_data / "kineto" / "base.json.gz"
    refused = memq("annotate", str(kineto), "-o", str(tmp_path / "k.pftrace"))
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1 and "gzip" in refused.stderr
    assert not (tmp_path / "k.pftrace").exists()
