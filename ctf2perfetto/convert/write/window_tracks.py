"""Capture windows: memq.live markers as the batches come, memq.window slices at the end (windows.py tracks them)."""
from __future__ import annotations

import numpy as np

from ctf2perfetto.convert.encode import ARG_INT, ARG_POINTER, ARG_STRING, ARG_UINT, arg_values
from ctf2perfetto.events import EventBatch, MemKind
from ctf2perfetto.convert.model import ModelBatch
from ctf2perfetto.traceformat import names as N
from ctf2perfetto.traceformat import tracks as T
from ctf2perfetto.convert.windows import Window
from ctf2perfetto.convert.write.gpu import api_is, mem_names
from ctf2perfetto.convert.write.registry import TrackRegistry
from ctf2perfetto.convert.write.stream import PacketStream, slice_table

A = N.A


class WindowWriter:
    def __init__(self, out: PacketStream, tracks: TrackRegistry) -> None:
        self.out = out
        self.tracks = tracks

    def emit_live(self, batch: EventBatch, mb: ModelBatch, rows: np.ndarray, thread_uuid: np.ndarray,
                  window: np.ndarray) -> np.ndarray:
        """memq.live markers (allocations live when a capture window opened) on the thread track of whoever
        opened it, named after the function that allocated them; their packet offsets (the allocations'
        flows start there).

        They are zero-length slices, not instants: trace_processor nests instants of one track at one time
        inside each other, and past 512 deep it drops their arguments (a snapshot of thousands of allocations
        lost most of them). A slice's END closes it before the next BEGIN, so these stay side by side."""
        g = len(rows)
        interner = self.out.interner
        name_iid = api_is(batch, batch["api"][rows], lambda nm: interner.name(nm or N.EVENT_LIVE), np.uint32)
        mem = batch["mem"][rows]
        size = batch["size"][rows]
        alloc_id, replaced = mb.alloc_id[rows], mb.replaced_alloc_id[rows]
        ones = np.ones(g, bool)
        a = interner.arg
        args = [
            (a(A.ptr), ARG_POINTER, batch["ptr"][rows], ones),
            (a(A.size), ARG_UINT, size, ones),
            (a(A.mem_kind), ARG_STRING, mem_names(self.out, mem), ones),
            (a(A.device), ARG_INT, arg_values(batch["device"][rows]), mem != MemKind.HOST),
            (a(A.window), ARG_UINT, window.astype(np.uint64), window >= 0),
            (a(A.alloc_id), ARG_UINT, alloc_id, alloc_id > 0),
            (a(A.replaced_alloc_id), ARG_UINT, replaced, replaced > 0),
            interner.twin(A.size, size, ones),
        ]
        ts = batch["ts"][rows]
        offsets = self.out.emit(slice_table(
            ts, ts, thread_uuid[rows], name_iid, np.full(g, interner.category(N.CAT_LIVE), np.uint32), args,
            end_flow_out=N.flow_ids(N.FLOW_ALLOC, alloc_id)), slices=True)
        return offsets[g:]  # the END packet carries the allocation (its flows start there), as for API calls

    def emit_windows(self, windows: list[Window], first_ts: int, last_ts: int) -> None:
        """One slice per capture window on its process's `Capture windows` track (written at the end: a
        window's close may come batches after its open). A window the trace never closes ends with the
        trace; one it never opened starts with it."""
        if not windows:
            return
        g = len(windows)
        interner = self.out.interner
        self.tracks.window_pids.update(w.pid for w in windows)
        begin = np.array([w.start if w.start is not None else first_ts for w in windows], np.int64)
        end = np.array([w.end if w.end is not None else last_ts for w in windows], np.int64)
        track = np.array([T.windows_uuid(w.pid) for w in windows], np.uint64)
        name = np.array([interner.name(N.window_name(w.index)) for w in windows], np.uint32)
        live_bytes = np.array([w.live_bytes for w in windows], np.uint64)
        ones = np.ones(g, bool)
        a = interner.arg

        def strings(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
            return interner.strings(texts), np.array([bool(t) for t in texts])

        args = [
            (a(A.pid), ARG_INT, arg_values(np.array([w.pid for w in windows], np.int64)), ones),
            (a(A.index), ARG_UINT, np.array([w.index for w in windows], np.uint64), ones),
            (a(A.open_cause), ARG_STRING, *strings([w.open_cause or N.WINDOW_UNKNOWN for w in windows])),
            (a(A.close_cause), ARG_STRING, *strings([w.close_cause or N.WINDOW_TRACE_END for w in windows])),
            (a(A.open_api), ARG_STRING, *strings([w.open_api for w in windows])),
            (a(A.close_api), ARG_STRING, *strings([w.close_api for w in windows])),
            (a(A.live_allocations), ARG_UINT, np.array([w.live for w in windows], np.uint64), ones),
            (a(A.live_bytes), ARG_UINT, live_bytes, ones),
            interner.twin(A.live_bytes, live_bytes, ones),
        ]
        self.out.emit(slice_table(begin, end, track, name, np.full(g, interner.category(N.CAT_WINDOW), np.uint32),
                                  args), slices=True)
