"""Capture windows during conversion: WINDOW rows -> one window per (process, index).

`memq record --delay/--duration/--capture-range` records only inside windows; the
preload library writes a WINDOW row when a process's window opens or closes, and a
LIVE row per allocation live at the opening (events.py). The writer (write/)
splits batches after each close that is not the process's exit, so that the model
can end the process's allocations there (nothing is known of them outside the
window; after an exit they are leaks, as without windows), numbers the LIVE
rows with their window, and writes each window as a slice on the process's
`Capture windows` track (write/windows.py, docs/TRACE_FORMAT.md).
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from ctf2perfetto.events import EventBatch, EventKind, WindowCause
from ctf2perfetto.traceformat import names as N


def cause_name(code: int) -> str:
    """`delay`, `duration`, `profiler_api`, `exit`, `range` (or `unknown`)."""
    try:
        return WindowCause(code).name.lower()
    except ValueError:
        return N.WINDOW_UNKNOWN


@dataclass
class Window:
    """One process's capture window."""

    pid: int
    index: int
    start: int | None = None  # ts of the open row (None: the trace has no open for it)
    end: int | None = None  # ts of the close row (None: never closed in the trace)
    open_cause: str = ""
    close_cause: str = ""
    open_api: str = ""  # the profiler call that opened it ("" for a timer)
    close_api: str = ""
    live: int = 0  # allocations live when it opened (LIVE rows)
    live_bytes: int = 0


class Windows:
    """Every window seen so far, and which one is open in each process."""

    def __init__(self) -> None:
        self.by_key: dict[tuple[int, int], Window] = {}
        self.current: dict[int, int] = {}  # pid -> index of its open window

    def __len__(self) -> int:
        return len(self.by_key)

    def split(self, batch: EventBatch) -> Iterator[tuple[EventBatch, tuple[int, int] | None]]:
        """Sub-batches that end right after each early window close (any cause but the process's exit,
        after which its live allocations are leaks, as without windows), with (pid, ts) of that close."""
        kind = batch["kind"]
        rows = np.flatnonzero(kind == EventKind.WINDOW) if int(kind.max()) >= EventKind.WINDOW else []
        closes = [r for r in np.asarray(rows).tolist()
                  if batch["aux"][r] == 0 and batch["aux2"][r] != WindowCause.EXIT]
        if not closes:
            yield batch, None
            return
        lo = 0
        for r in closes:
            yield batch.take(slice(lo, r + 1)), (int(batch["pid"][r]), int(batch["ts"][r]))
            lo = r + 1
        if lo < len(batch):
            yield batch.take(slice(lo, len(batch))), None

    def note(self, batch: EventBatch, live_rows: np.ndarray) -> np.ndarray:
        """Takes in the WINDOW rows of `batch` (in order) and returns the window index of each
        LIVE row (-1 where its process has no open window: a trace cut before the open)."""
        kind = batch["kind"]
        wrows = np.flatnonzero(kind == EventKind.WINDOW).tolist() if int(kind.max()) >= EventKind.WINDOW else []
        index = np.full(len(live_rows), -1, np.int64)
        # Between two WINDOW rows the open windows do not change: LIVE rows there are numbered together.
        cuts = np.searchsorted(live_rows, wrows).tolist() + [len(live_rows)]
        lo = 0
        for r, hi in zip(wrows + [None], cuts):
            if hi > lo:
                self._number(batch, live_rows[lo:hi], index[lo:hi])
            lo = hi
            if r is not None:
                self._window_row(batch, r)
        return index

    def _window_row(self, batch: EventBatch, r: int) -> None:
        pid, idx = int(batch["pid"][r]), int(batch["flags"][r])
        window = self.by_key.setdefault((pid, idx), Window(pid, idx))
        names = batch.api_names
        api = names[int(batch["api"][r])] if int(batch["api"][r]) < len(names) else ""
        cause = cause_name(int(batch["aux2"][r]))
        if batch["aux"][r]:
            window.start, window.open_cause, window.open_api = int(batch["ts"][r]), cause, api
            self.current[pid] = idx
        else:
            window.end, window.close_cause, window.close_api = int(batch["ts"][r]), cause, api
            if self.current.get(pid) == idx:
                del self.current[pid]

    def _number(self, batch: EventBatch, rows: np.ndarray, out: np.ndarray) -> None:
        pids = batch["pid"][rows]
        for pid in np.unique(pids).tolist():
            idx = self.current.get(pid, -1)
            mine = pids == pid
            out[mine] = idx
            if idx >= 0:
                window = self.by_key[(pid, idx)]
                window.live += int(mine.sum())
                window.live_bytes += int(batch["size"][rows[mine]].sum())

    def all(self) -> list[Window]:
        """Every window, by process and index."""
        return [self.by_key[k] for k in sorted(self.by_key)]

