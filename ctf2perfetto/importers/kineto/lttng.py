"""What the Kineto merge needs from the LTTng events, collected as the batches stream by."""
from __future__ import annotations

import numpy as np

from ctf2perfetto.events import HEAP_KINDS, EventBatch, EventKind


class LttngEvents:
    """What the Kineto merge needs from the LTTng events, collected from EventBatches as they stream by.

    * memq API calls (begin, end) per (pid, tid): Kineto ops that cross one on
      the same thread get widened to cover it (KinetoMerge.packets): one thread's
      ops and calls nest, so a crossing is clock error, and trace_processor would
      mismatch the ends.
    * allocations at the addresses of Kineto's `[memory]` events: the anchors
      that measure how far the profiler's clock is from the LTTng one.
    """

    def __init__(self, anchor_addresses: np.ndarray | None = None) -> None:
        self._calls: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
        self._allocs: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
        self._addresses = anchor_addresses if anchor_addresses is not None else np.zeros(0, np.uint64)

    def add(self, batch: EventBatch) -> EventBatch:
        """Record what `batch` holds of the above and hand it on (for use in a generator)."""
        kind = batch["kind"]
        rows = np.flatnonzero((kind >= EventKind.GPU_ALLOC) & (kind <= EventKind.GPU_SET_DEVICE))
        if len(rows):
            self._calls.append((batch["pid"][rows], batch["tid"][rows], batch["begin"][rows], batch["ts"][rows]))
        if len(self._addresses):
            allocating = np.isin(kind, [*HEAP_KINDS, EventKind.GPU_ALLOC])
            rows = np.flatnonzero(allocating & np.isin(batch["ptr"], self._addresses))
            if len(rows):
                # Kineto reports the bytes asked for: memq's host blocks carry them apart from the usable size
                size = np.where(kind[rows] == EventKind.HOST_ALLOC, batch["aux2"][rows], batch["size"][rows])
                self._allocs.append((batch["pid"][rows], batch["ptr"][rows], size, batch["ts"][rows]))
        return batch

    def calls_by_thread(self, realtime_offset_ns: int) -> dict[tuple[int, int], list[tuple[int, int]]]:
        """(pid, tid) -> [(begin, end)] on REALTIME, sorted by begin."""
        calls: dict[tuple[int, int], list[tuple[int, int]]] = {}
        for pids, tids, begins, ends in self._calls:
            for pid, tid, begin, end in zip(pids.tolist(), tids.tolist(), begins.tolist(), ends.tolist()):
                calls.setdefault((pid, tid), []).append((begin + realtime_offset_ns, end + realtime_offset_ns))
        for intervals in calls.values():
            intervals.sort()
        return calls

    def allocations(self, realtime_offset_ns: int) -> dict[tuple[int, int, int], list[int]]:
        """(pid, address, bytes) -> REALTIME ns of the calls that returned that allocation."""
        allocs: dict[tuple[int, int, int], list[int]] = {}
        for pids, ptrs, sizes, ts in self._allocs:
            for key in zip(pids.tolist(), ptrs.tolist(), sizes.tolist(), ts.tolist()):
                allocs.setdefault(key[:3], []).append(key[3] + realtime_offset_ns)
        return allocs
