"""Ranges that read only their own packets (ctf2perfetto/convert/leads.py, ranges.Lead, ctf/excerpt.py).

* Generated logs (test_ranges' draws: windows of their own, HOST_SMALL and LOST rows anywhere, calls
  straddling the start): the Lead made by one pass over the log, then clip() over only some rows
  from before the range's start on (the decoder's own LOST rows among them, which the Lead's
  replace), writes every row and count that test_ranges' independent cut of the whole log does.
* A real recording cut in parts (parts.plan): each part's conversion decodes fewer rows than the
  recording holds, all of them fewer than converting each part from the start would, and its trace
  holds exactly what that conversion's does. Packets that cannot be walked keep that old path,
  with one warning line.
"""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctf2perfetto.analysis.parts import plan, recording_length_ns
from ctf2perfetto.analysis.wholerun import finish
from ctf2perfetto.engine import open_trace
from ctf2perfetto.engine.rows import Rows
from ctf2perfetto.events import EventBatch, EventKind as K, TraceInfo
from ctf2perfetto.convert.leads import make_leads
from ctf2perfetto.convert.ranges import Range, RangeReport, clip
from ctf2perfetto.pipeline import convert
from support.lttng import record
from test_ranges import SETTINGS, _batch_tuples, _split, _tuple, clipped, range_cut

REPO = Path(__file__).resolve().parents[1]


class _Log:
    """A log as a decode hands it (batches, then a TraceInfo)."""

    def __init__(self, batches: list[EventBatch]) -> None:
        self.batches, self.info = batches, TraceInfo()

    def __iter__(self):
        return iter(self.batches)


@st.composite
def resumed(draw):
    """A drawn range, the batches of the whole log, and what a decoder of the range's packets hands: rows from
    some row at or before the range's first on (LOST rows of its own instead of the log's), to some row at or
    after its last."""
    rows, _devices, start, end, cuts = draw(clipped())
    t0 = rows[0].get("begin", rows[0]["ts"])
    first = next(i for i, r in enumerate(rows) if r["ts"] >= t0 + start)
    last = len(rows) if end is None else next((i for i, r in enumerate(rows) if r["ts"] > t0 + end), len(rows))
    lo, hi = draw(st.integers(0, first)), draw(st.integers(last, len(rows)))
    mine = [r for r in rows[lo:hi] if r["kind"] != K.LOST]
    for _ in range(draw(st.integers(0, 3))):  # the excerpt's decoder reports loss of its own: not the log's
        at = draw(st.integers(0, len(mine)))
        ts = mine[min(at, len(mine) - 1)]["ts"] if mine else t0
        mine.insert(at, dict(kind=K.LOST, ts=ts, pid=0, tid=0, size=1, aux=draw(st.integers(1, 9)), api=""))
    part_cuts = draw(st.lists(st.integers(0, len(mine)), max_size=4))
    return rows, start, end, cuts, mine, part_cuts


def test_a_lead_gives_the_rows_of_the_whole_log() -> None:
    @settings(max_examples=300, **SETTINGS)
    @given(resumed())
    def compare(drawn) -> None:
        rows, start, end, cuts, mine, part_cuts = drawn
        expect_rows, counts = range_cut(rows, start, end)
        span = Range(start, end)
        (span.lead,) = make_leads(_Log(_split(rows, cuts)), [span], packets=None)
        report = RangeReport()
        got = _batch_tuples(list(clip(_split(mine, part_cuts), span, report)))
        expect = [_tuple(r) for r in expect_rows]
        assert got == expect
        assert {k: getattr(report, k) for k in counts} == counts
        t0 = rows[0].get("begin", rows[0]["ts"])
        needed = sum(1 for r in mine if end is None or r["ts"] <= t0 + end)  # it stops reading after the range
        assert needed <= report.decoded <= len(mine)

    compare()


def test_a_start_after_the_last_row_has_no_lead() -> None:
    rows = [dict(kind=K.MALLOC, ts=10, pid=1, tid=1, ptr=16, size=8, api="malloc")]
    first, second = make_leads(_Log(_split(rows, [])), [Range(0, 100), Range(100, None)], packets=None)
    assert first is not None and first.start.live.addr.tolist() == [] and first.rows_after is False
    assert second is None  # its conversion reads the recording and says the range starts after it


# -- a real recording ------------------------------------------------------------------------------------
def _contents(path: Path) -> list:
    """What trace_processor holds of a trace (every row of the tables the analyses read)."""
    with open_trace(path) as engine:
        return [engine.query(q).to_csv() for q in (
            "SELECT ts, dur, name, track_id, depth, arg_set_id FROM slice ORDER BY id",
            "SELECT arg_set_id, key, display_value FROM args ORDER BY arg_set_id, key",
            "SELECT ts, track_id, value FROM counter ORDER BY id",
            "SELECT * FROM flow ORDER BY id",
            "SELECT id, name, type FROM track ORDER BY id")]


def test_parts_decode_their_own_packets(fake_gpu, tmp_path):
    argv = [sys.executable, str(REPO / "examples" / "hip_offload.py"), "--hip-lib",
            str(fake_gpu.dir / "libamdhip64.so"), "--seconds", "3", "--weights-mib", "1"]
    rec = record(tmp_path / "trace", argv, api="hip,libc", extra=("--subbuf-size", "16k"))
    cuts = plan(rec.dir, 0.6)
    assert len(cuts.spans) >= 4 and cuts.note is None and all(s.lead is not None for s in cuts.spans)
    own, from_start = [], []
    for i, span in enumerate(cuts.spans):
        lead, whole = tmp_path / f"lead{i}.pftrace", tmp_path / f"whole{i}.pftrace"
        got, expect = convert(rec.dir, lead, span=span), convert(rec.dir, whole, span=Range(span.start, span.end))
        mine, theirs = dataclasses.asdict(got.range_report), dataclasses.asdict(expect.range_report)
        own.append(mine.pop("decoded"))
        from_start.append(theirs.pop("decoded"))
        assert mine == theirs and got.warnings == expect.warnings
        assert (got.lost_events, got.lost_packets, got.events) == (expect.lost_events, expect.lost_packets,
                                                                   expect.events)
        assert _contents(lead) == _contents(whole)
    rows = from_start[-1]  # converting from the start reads every row of the recording, whatever the part
    assert all(n == rows for n in from_start)
    assert all(n < rows for n in own), (own, rows)
    assert sum(own) < 1.5 * rows, (own, rows)  # each packet read about once (a cut's packets by both its parts)


def test_packets_that_cannot_be_walked_keep_the_old_path(fake_gpu, tmp_path, monkeypatch):
    """No packet times (a stream not in LTTng's layout): every part decodes the recording from its start, and one
    warning line says so; the figures are the same."""
    from ctf2perfetto.ctf import excerpt

    argv = [sys.executable, str(REPO / "examples" / "hip_offload.py"), "--hip-lib",
            str(fake_gpu.dir / "libamdhip64.so"), "--steps", "12", "--weights-mib", "1"]
    rec = record(tmp_path / "trace", argv, api="hip,libc")

    def unwalkable(root):
        raise excerpt.NoExcerpt(f"{root}/memq_0: its packets cannot be walked (not LTTng's packet layout)")

    length = recording_length_ns(rec.dir)
    # the loop runs after a start without copies: how long depends on the load
    every = next(e for e in (length / share / 1e9 for share in (4, 8, 16, 32, 64)) if len(plan(rec.dir, e).spans) > 2)
    with_leads = plan(rec.dir, every)
    monkeypatch.setattr(excerpt, "packet_table", unwalkable)
    without = plan(rec.dir, every)
    assert len(without.spans) > 1 and all(s.lead is None for s in without.spans)
    assert without.note == f"{rec.dir}/memq_0: its packets cannot be walked (not LTTng's packet layout)"
    rows = Rows.from_records([], ["pid"])
    rows.attrs["warnings"] = []
    finish(rows, without)
    first, *others = rows.attrs["warnings"]
    assert first == "each part decodes the recording from its start: " + without.note
    # under load a cut may find no quiet time in the busy loop: said too, and nothing else
    assert all("found no quiet time" in w for w in others), others
    for a, b in zip(with_leads.spans, without.spans):
        assert (a.start, a.end) == (b.start, b.end)
        got, expect = convert(rec.dir, tmp_path / "a.pftrace", span=a), convert(rec.dir, tmp_path / "b.pftrace",
                                                                              span=b)
        assert expect.range_report.decoded >= got.range_report.decoded
        assert _contents(tmp_path / "a.pftrace") == _contents(tmp_path / "b.pftrace")
