"""Ranges that read only their own packets: each range's Lead made in one pass, and the decode a Lead starts.

Converting a range (ranges.clip) from the start of the recording costs the decode and the memory
model of everything before it, so the parts of a recording (analysis/parts.py) would cost about
half a decode each. Instead:

* `make_leads` runs clip()'s own state before a range (ranges.Before) over the recording once,
  and at each range's start keeps what clip() writes there (ranges.Start); from the same pass, the
  recording's loss and what follows each range's end (counted, and the small-block totals after
  it). A Lead holds them with the decoder's whole-run TraceInfo (the loss and completeness checks
  read every file once, here).
* `LeadDecode` is what the conversion of a range with a Lead decodes instead of the recording: an
  excerpt (ctf/excerpt.py) holding the range's packets, its rows put back on the recording's
  clock; its `info` is the Lead's. clip() takes it from the range's start, drops the rows before
  and after the range by time, and stops reading after the range's end.
"""
from __future__ import annotations

import copy
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ctf2perfetto.ctf.excerpt import PacketTable, write_excerpt
from ctf2perfetto.events import EventBatch, EventKind, TraceInfo
from ctf2perfetto.convert.ranges import Before, Lead, Range, Start, _ApiNames, add_small

if TYPE_CHECKING:
    from ctf2perfetto.ctf.decode import Decoding


def make_leads(decoding: Decoding, spans: list[Range], packets: PacketTable) -> list[Lead | None]:
    """The Lead of each of `spans` (consecutive ranges, in order) from one pass over `decoding` (unread) of the
    recording whose `packets` they are read from; None for a span that starts after the recording's last row (its
    conversion says so, reading the recording from its start)."""
    from ctf2perfetto.convert.identity import PhysicalDevices

    names = _ApiNames()
    state = Before(names)
    starts: dict[int, Start] = {}
    pending = sorted({span.start for span in spans})
    ends = sorted({span.end for span in spans if span.end is not None})
    real_upto = dict.fromkeys(ends, 0)  # rows (LOST rows excepted) at or before each end
    lost, lost_at, small = [], [], []
    first_ts = last_ts = None
    rows = 0
    whole: list[TraceInfo] = []

    def read() -> Iterator[EventBatch]:
        yield from decoding
        whole.append(copy.deepcopy(decoding.info))  # as the decoder left it (PhysicalDevices renumbers it next)

    for raw in PhysicalDevices().apply(read(), lambda: decoding.info):
        if not len(raw):
            continue
        batch = names.mapped(raw)
        if first_ts is None:
            first_ts = int(batch["begin"][0])
        ts, kind = batch["ts"], batch["kind"]
        last_ts = int(ts[-1])
        is_lost = kind == EventKind.LOST
        if is_lost.any():
            lost.append(batch.take(is_lost))
            lost_at.append(rows + np.flatnonzero(is_lost))
        is_small = kind == EventKind.HOST_SMALL
        if is_small.any():
            small.append(batch.take(is_small))
        real = np.concatenate([[0], np.cumsum(~is_lost)])
        for end in ends:
            real_upto[end] += int(real[np.searchsorted(ts, first_ts + end, "right")])
        lo = 0
        while pending and (cut := int(np.searchsorted(ts, first_ts + pending[0], "left"))) < len(batch):
            if cut > lo:
                state.add(batch.take(slice(lo, cut)))
            starts[pending.pop(0)] = state.start(keep=True)
            lo = cut
        if pending and lo < len(batch):
            state.add(batch.take(slice(lo, len(batch))))
        rows += len(batch)
    if first_ts is None:
        return [None] * len(spans)
    info = whole[0]
    real_rows = rows - sum(len(b) for b in lost)
    lost_rows = EventBatch.concat(lost, names.names)
    small_rows = EventBatch.concat(small, names.names)
    at = np.concatenate(lost_at) if lost_at else np.zeros(0, np.int64)
    leads: list[Lead | None] = []
    for span in spans:
        if span.start not in starts:
            leads.append(None)
            continue
        after: dict[int, list[int]] = {}
        if span.end is not None:
            add_small(small_rows.take(small_rows["ts"] > first_ts + span.end), after)
        leads.append(Lead(
            start=starts[span.start], first_ts=first_ts, lost=lost_rows, lost_at=at,
            rows_after=span.end is not None and last_ts > first_ts + span.end,
            after=0 if span.end is None else real_rows - real_upto[span.end], small_after=after, info=info,
            reference_ns=info.clock_offset_ns, packets=packets))
    return leads


class LeadDecode:
    """The decode of a range with a Lead: its packets alone (an excerpt of the recording in a temporary
    directory), rows on the recording's clock; `info` the whole recording's (the Lead's, a copy)."""

    def __init__(self, span: Range, *, batch_size: int) -> None:
        lead = span.lead
        self.lead, self.batch_size = lead, batch_size
        self.info = copy.deepcopy(lead.info)
        zero = lead.reference_ns + lead.first_ts
        self.begin_ns, self.end_ns = zero + span.start, None if span.end is None else zero + span.end
        self.table = lead.packets
        self._tmp: tempfile.TemporaryDirectory | None = None
        self._decoding: Decoding | None = None
        self.packets = 0

    def __enter__(self) -> "LeadDecode":
        from ctf2perfetto.ctf.decode import decode

        self._tmp = tempfile.TemporaryDirectory(prefix="memq-excerpt-")
        try:
            self.packets = write_excerpt(self.table, Path(self._tmp.name), self.begin_ns, self.end_ns)
            self._decoding = decode(self._tmp.name, batch_size=self.batch_size)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        if self._decoding is not None:
            self._decoding.close()
            self._decoding = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __iter__(self) -> Iterator[EventBatch]:
        return self._batches(iter(self._decoding))

    def _batches(self, batches: Iterable[EventBatch]) -> Iterator[EventBatch]:
        shift = None
        for batch in batches:
            if shift is None:  # the excerpt's decoder counts from the first clock it met, maybe not the recording's
                shift = self._decoding.reference_offset_ns() - self.lead.reference_ns
            if shift and len(batch):
                batch.columns["ts"] = batch["ts"] + shift
                batch.columns["begin"] = batch["begin"] + shift
            yield batch
