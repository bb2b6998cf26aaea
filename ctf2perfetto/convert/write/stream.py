"""The converter's output stream: packets written in order, the memq sequence's interned names, and
tables of events encoded in C (native/encode.c via encode.Table) in the order trace_processor needs.
"""
from __future__ import annotations

from typing import BinaryIO, Callable, Iterable

import numpy as np

from ctf2perfetto.convert.encode import ARG_STRING, SequenceClocks, Table
from ctf2perfetto.traceformat import names as N
from ctf2perfetto.traceformat import packets as P

_ENCODE_ROWS = 1 << 15  # rows per native call: bounds the encode buffers


def each_distinct(values: np.ndarray, fn: Callable[[object], object], dtype) -> np.ndarray:
    """fn applied once per distinct value of `values` (per distinct row, as a tuple, of a 2-D array), spread
    back over them: rows share few values, and per-row Python on a copy-heavy trace's columns was most of
    its conversion time."""
    if len(values) == 0:
        return np.zeros(0, dtype)
    if values.ndim == 1:
        uniq, inverse = np.unique(values, return_inverse=True)
        keys = uniq.tolist()
    else:
        uniq, inverse = np.unique(values, axis=0, return_inverse=True)
        keys = [tuple(row) for row in uniq.tolist()]
    return np.array([fn(k) for k in keys], dtype)[inverse.ravel()]


class Interner:
    """Interned names of the memq sequence; new entries go out in the next interned-data packet."""

    def __init__(self) -> None:
        self.tables: dict[str, dict[str, int]] = {k: {} for k in P.INTERNED_KINDS}
        self.texts: dict[str, list[str]] = {k: [] for k in P.INTERNED_KINDS}  # iid - 1 -> text
        self.pending: list[tuple[str, int, str]] = []
        self._small_texts = np.zeros(1 << 16, np.uint64)  # byte count -> interned text (0: not made yet)

    def iid(self, kind: str, text: str) -> int:
        table = self.tables[kind]
        iid = table.get(text)
        if iid is None:
            iid = table[text] = len(table) + 1
            self.texts[kind].append(text)
            self.pending.append((kind, iid, text))
        return iid

    def iids(self, kind: str, texts: Iterable[str]) -> np.ndarray:
        return np.array([self.iid(kind, t) for t in texts] or [0], np.uint32)

    def name(self, text: str) -> int:
        return self.iid("event_names", text)

    def category(self, text: str) -> int:
        return self.iid("event_categories", text)

    def arg(self, key: str) -> int:
        return self.iid("debug_annotation_names", key)

    def string(self, text: str) -> int:
        return self.iid("debug_annotation_string_values", text)

    def strings(self, texts: Iterable[str]) -> np.ndarray:
        """Interned string values of `texts`, as the uint64 column an ARG_STRING argument takes."""
        return np.array([self.string(t) for t in texts], np.uint64)

    def formatted(self, key: str, values: np.ndarray) -> np.ndarray:
        """Interned `<key>_fmt` texts (`4.0 KiB`, `1.25 ms`) of a size or duration column, each distinct
        text made once in the trace. Sizes below 64 KiB (most heap blocks) are looked up in a table."""
        values = np.asarray(values)
        if N.ARGS[key] != N.BYTES:
            uniq, inverse = np.unique(values, return_inverse=True)
            return self.strings(N.format_value(key, v) for v in uniq.tolist())[inverse.ravel()]
        small = values < len(self._small_texts)
        if not small.all():
            out = np.zeros(len(values), np.uint64)
            out[small] = self.formatted(key, values[small])
            uniq, inverse = np.unique(N.bytes_codes(values[~small]), return_inverse=True)
            out[~small] = self.strings(N.bytes_text(code) for code in uniq.tolist())[inverse.ravel()]
            return out
        out = self._small_texts[values]
        missing = out == 0
        if missing.any():
            new = np.unique(values[missing])
            self._small_texts[new] = self.strings(N.bytes_text(code) for code in N.bytes_codes(new).tolist())
            out = self._small_texts[values]
        return out

    def twin(self, key: str, values: np.ndarray, present: np.ndarray) -> tuple[int, int, np.ndarray, np.ndarray]:
        """The formatted twin of a size or duration argument, as an argument column (present where it is)."""
        texts = np.zeros(len(present), np.uint64)
        texts[present] = self.formatted(key, np.asarray(values)[present])
        return self.arg(N.fmt_key(key)), ARG_STRING, texts, present

    def text(self, kind: str, iid: int) -> str:
        """The text interned as `iid`."""
        return self.texts[kind][iid - 1]

    def packet(self) -> bytes | None:
        """Record of the interned-data packet with the entries not yet written, or None."""
        if not self.pending:
            return None
        packet = P.packet(N.SEQ_MEMQ, flags=P.SEQ_NEEDS_INCREMENTAL_STATE, interned=P.interned(self.pending))
        self.pending.clear()
        return P.record(packet)


class PacketStream:
    """Packets written to `body` in order, each one's offset known (flows are patched in by offset later)."""

    def __init__(self, body: BinaryIO) -> None:
        self.body = body
        self.pos = 0
        self.interner = Interner()
        self.clocks = SequenceClocks()
        self._encoded = np.zeros(0, np.uint8)  # reused encode output (see emit)

    def write(self, data) -> int:
        """Write bytes; their offset in the body back."""
        start = self.pos
        self.body.write(data)
        self.pos += len(data)
        return start

    def start_sequence(self, seq: int, *, track: int | None = None, extra_counter_tracks: Iterable[int] = (),
                       interned_entries: Iterable[tuple[str, int, str]] = ()) -> None:
        """Clear a sequence's state and set its defaults (and interned names), then start its incremental
        clock (traceformat.names.CLOCK_INCREMENTAL) at 0 = MONOTONIC 0: what `emit` writes deltas on."""
        self.write(P.record(P.sequence_start(seq, N.CLOCK_INCREMENTAL, track=track,
                                             extra_counter_tracks=extra_counter_tracks,
                                             interned_entries=interned_entries)))
        self.write(P.record(P.incremental_clock(seq, N.CLOCK_INCREMENTAL, N.CLOCK_MONOTONIC)))
        self.clocks.last_for(seq)[seq] = 0

    def emit(self, table: Table, slices: bool = False) -> np.ndarray:
        """Encode and write a table; each row's packet offset in the body back.

        A slice table holds [all BEGINs, all ENDs] (rows i and i + n/2 are one slice).
        It goes out in time order with, at equal times, the ENDs of earlier slices
        first and BEGINs last, but a zero-length slice's END right after its BEGIN, so
        every END closes its own slice.
        """
        if len(table.ts) == 0:
            return np.zeros(0, np.int64)
        interned = self.interner.packet()
        if interned is not None:
            self.write(interned)
        order = None
        if slices:
            half = len(table.ts) // 2
            pair = np.tile(np.arange(half), 2)
            is_end = np.arange(2 * half) >= half
            zero_len = is_end & (table.ts == np.tile(table.ts[:half], 2))
            rank = np.where(is_end & ~zero_len, 0, 1)
            order = np.lexsort((is_end, pair, rank, table.ts))
            table = table.take(order)
        offsets = np.empty(len(table.ts), np.int64)
        for lo in range(0, len(table.ts), _ENCODE_ROWS):
            hi = min(lo + _ENCODE_ROWS, len(table.ts))
            part = table.take(slice(lo, hi))
            if len(self._encoded) < part.bound_bytes():
                self._encoded = np.empty(part.bound_bytes(), np.uint8)
            data, chunk = part.encode(self.clocks, self._encoded)  # written out before the buffer's next use
            offsets[lo:hi] = chunk + self.write(memoryview(data))
        if order is not None:
            unsorted = np.empty_like(offsets)
            unsorted[order] = offsets
            offsets = unsorted
        return offsets


def slice_table(begin: np.ndarray, end: np.ndarray, track: np.ndarray, name_iid: np.ndarray, cat_iid: np.ndarray,
                args: list[tuple[int, int, np.ndarray, np.ndarray]], *, begin_flow_out=None, begin_flow_in=None,
                end_flow_out=None, end_flow_in=None) -> Table:
    """A Table of slices: all BEGINs (name, category, args) then all ENDs (what PacketStream.emit orders).

    Arguments are (name iid, ARG_* type, values, present) for the BEGINs; flows as columns per end."""
    n = len(begin)
    zero = np.zeros(n, np.uint64)
    none = np.zeros(n, bool)

    def both(first, second, dtype):
        if first is None and second is None:
            return None
        return np.concatenate([zero if first is None else first, zero if second is None else second]).astype(dtype)

    return Table(
        ts=np.concatenate([begin, end]), track=np.concatenate([track, track]),
        type=np.repeat(np.array([P.TYPE_SLICE_BEGIN, P.TYPE_SLICE_END], np.uint8), n),
        name_iid=np.concatenate([name_iid, np.zeros(n, np.uint32)]),
        cat_iid=np.concatenate([cat_iid, np.zeros(n, np.uint32)]),
        flow_out=both(begin_flow_out, end_flow_out, np.uint64), flow_in=both(begin_flow_in, end_flow_in, np.uint64),
        args=[(nm, t, np.concatenate([np.asarray(v).astype(np.uint64), zero]), np.concatenate([p, none]))
              for nm, t, v, p in args])


def instant_table(ts: np.ndarray, track: np.ndarray, name_iid: np.ndarray, cat_iid: np.ndarray,
                  args: list[tuple[int, int, np.ndarray, np.ndarray]], *, flow_out=None) -> Table:
    """A Table of instants; arguments as slice_table's."""
    n = len(ts)
    return Table(ts=np.asarray(ts, np.int64), track=np.asarray(track, np.uint64),
                 type=np.full(n, P.TYPE_INSTANT, np.uint8), name_iid=np.asarray(name_iid, np.uint32),
                 cat_iid=np.asarray(cat_iid, np.uint32),
                 flow_out=None if flow_out is None else np.asarray(flow_out, np.uint64),
                 args=[(nm, t, np.asarray(v).astype(np.uint64), p) for nm, t, v, p in args])


def counter_table(ts: np.ndarray, track: np.ndarray, values: np.ndarray) -> Table:
    """A Table of counter samples (absolute values)."""
    return Table(ts=ts, track=track, type=np.full(len(ts), P.TYPE_COUNTER, np.uint8), counter=values)
