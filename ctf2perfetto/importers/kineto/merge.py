"""PyTorch-profiler (Kineto) events placed on the memq trace's tracks and serialized as TracePackets.

`KinetoMerge(trace)` places the events of a `load`ed trace on tracks; `.packets()` turns
them into serialized TracePackets (sequence SEQ_KINETO, REALTIME timestamps) that the
pipeline appends to the LTTng-derived trace (ctf2perfetto.pipeline).

Tracks (traceformat.tracks): CPU events go on the process/thread tracks of the LTTng events
of the same pid/tid; runtime calls on a `kineto runtime` child of the thread; GPU work (the
pids Kineto labels "GPU N" or that carry kernels/memcpys/memsets) on one track per stream
under the trace's `GPU <device>` track. Kineto's category becomes the TrackEvent category
and its args become debug annotations, so trace_processor shows e.g.
`category = 'gpu_memcpy'` with `debug.bytes`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ctf2perfetto.traceformat import names as N
from ctf2perfetto.traceformat import packets as P
from ctf2perfetto.traceformat import tracks as T
from ctf2perfetto.importers.kineto.layout import Slice, bind_flows, nest, widen
from ctf2perfetto.importers.kineto.load import KinetoTrace, as_int, us_to_ns
from ctf2perfetto.importers.kineto.lttng import LttngEvents

# The profiler's `[memory]` event of an allocation is taken right after the allocator returns
# (measured here: 0.1-0.4 µs after the libc call's LTTng event). A median gap beyond this
# is the profiler's clock (a TSC approximation of REALTIME) being off, and gets corrected.
ANCHOR_TOLERANCE_NS = 1_000
MIN_ANCHORS = 5


@dataclass(frozen=True)
class _Lane:
    uuid: int
    kind: str  # "thread", "process", "runtime", "gpu" or "global"
    thread: tuple[int, int] | None = None  # (pid, tid) of a thread lane


def _gpu_pids(trace: KinetoTrace) -> set[Any]:
    pids = {pid for pid, label in trace.process_labels.items() if str(label).startswith("GPU")}
    pids.update(e.get("pid") for e in trace.events if e.get("cat") in N.KINETO_GPU_CATEGORIES)
    return pids


def event_packet(ts: int, track: int, type_: int, name: str | None = None, category: str | None = None,
                 args: Any = None, flows: list[int] = (), terminating: list[int] = ()) -> bytes:
    """One Kineto event as a serialized TracePacket on the Kineto sequence (REALTIME ns)."""
    if args is not None and not isinstance(args, dict):
        args = {"args": args}  # not Kineto's shape, but keep what is there
    event = P.track_event(type_, track, name=name, category=category or None, args=args, flows=flows,
                          terminating=terminating)
    return P.packet(N.SEQ_KINETO, ts=ts, clock=N.CLOCK_REALTIME, event=event)


class KinetoMerge:
    """Kineto events placed on tracks; `packets()` serializes them.

    Tracks come from traceformat.tracks, so CPU events share the LTTng thread tracks and GPU
    work the trace's `GPU <device>` tracks. `threads` / `processes` are known at once
    (write_trace's extra_threads / extra_processes); the packets can be made after the LTTng
    events streamed by.
    """

    def __init__(self, trace: KinetoTrace) -> None:
        self.trace = trace
        self._gpu_pids = _gpu_pids(trace)
        self.skipped: dict[str, int] = {}  # reason -> count of events not written (or changed)
        self.threads: dict[tuple[int, int], str] = {}  # CPU tracks used: write_trace's extra_threads
        self.processes: dict[int, str] = {}  # write_trace's extra_processes
        self.events = 0  # Kineto events written (slices, instants), after packets()
        self.unplaced = 0  # events left out (no phase memq knows, no valid ts or dur)
        self.first_ns = 0  # the first event's REALTIME ns, after packets()
        self.flows = 0  # flows written, after packets()
        self.clock_note: str | None = None  # the clock correction packets() made, if any
        self._descriptors: list[bytes] = []
        self._lanes: dict[tuple[Any, Any, bool], _Lane] = {}
        self._streams: dict[_Lane, tuple[int, Any, str]] = {}  # GPU lane -> (device, stream, label)
        self._devices: set[int] = set()
        self._slices: dict[_Lane, list[Slice]] = {}
        self._instants: list[tuple[int, _Lane, dict]] = []
        self._flow_points: list[tuple[str, Any, int, tuple[Any, Any], dict]] = []
        self._place_events()

    def _skip(self, reason: str, n: int = 1) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + n

    def _lane(self, pid: Any, tid: Any, runtime: bool = False) -> _Lane:
        if (pid, tid, runtime) in self._lanes:
            return self._lanes[(pid, tid, runtime)]
        key = (pid, tid)
        ipid, itid = as_int(pid), as_int(tid)
        if ipid is not None and ipid in self._gpu_pids:
            if ipid not in self._devices:
                self._devices.add(ipid)
                self._descriptors.append(T.gpu_track(ipid))
            label = self.trace.thread_names.get(key) or f"stream {tid}"
            uuid, descriptor = T.kineto_stream_track(ipid, tid, label)
            self._descriptors.append(descriptor)
            lane = _Lane(uuid, "gpu")
            self._streams[lane] = (ipid, tid, label)
        elif ipid is not None and itid is not None:
            self.processes[ipid] = self.trace.process_names.get(pid, f"pid {ipid}")
            if itid == 0:  # Kineto's process-scoped rows
                lane = _Lane(T.process_uuid(ipid), "process")
            else:
                self.threads[(ipid, itid)] = self.trace.thread_names.get(key, "")
                lane = _Lane(T.thread_uuid(ipid, itid), "thread", (ipid, itid))
            if runtime:
                uuid, descriptor = T.kineto_runtime_track(ipid, itid)
                self._descriptors.append(descriptor)
                lane = _Lane(uuid, "runtime")
        else:  # "Spans" / "Traces" rows of the profiler itself
            uuid, descriptor = T.kineto_global_track(pid, tid)
            self._descriptors.append(descriptor)
            lane = _Lane(uuid, "global")
        self._lanes[(pid, tid, runtime)] = lane
        return lane

    def _place_events(self) -> None:
        """Slices per lane, instants, flow endpoints; threads and processes."""
        trace = self.trace
        for event in trace.events:
            ph = event.get("ph")
            ts = trace.abs_ns(event.get("ts"))
            if ph not in ("X", "i", "I", "s", "t", "f"):
                self._skip(f"with phase {ph!r}" if ph else "without phase")
                self.unplaced += 1
                continue
            if ts is None:
                self._skip("without a valid ts")
                self.unplaced += 1
                continue
            lane = self._lane(event.get("pid"), event.get("tid"), event.get("cat") in N.KINETO_RUNTIME_CATEGORIES)
            if ph == "X":
                dur = us_to_ns(event.get("dur", 0))
                if dur is None or dur < 0:
                    self._skip("with a bad dur")
                    self.unplaced += 1
                    continue
                self._slices.setdefault(lane, []).append(Slice(ts, ts + dur, event))
            elif ph in ("i", "I"):
                self._instants.append((ts, lane, event))
            else:
                owner = (event.get("pid"), event.get("tid"))
                self._flow_points.append((ph, (event.get("cat"), event.get("id")), ts, owner, event))

    def _split_overlaps(self, lane: _Lane, lane_slices: list[Slice]) -> int:
        """Keeps on `lane` the slices that nest (sorted by start, longest first); each one that would
        cross another goes to the first overlap lane where it nests (a sibling track of the same name).
        Returns how many moved."""
        lanes: list[tuple[_Lane, list[Slice], list[Slice]]] = [(lane, [], [])]
        moved = 0
        for s in lane_slices:
            for i, (_, kept, stack) in enumerate(lanes):
                while stack and stack[-1].end <= s.start:
                    stack.pop()
                if not stack or s.end <= stack[-1].end:
                    s.depth = len(stack)
                    kept.append(s)
                    stack.append(s)
                    moved += i > 0
                    break
            else:
                uuid, descriptor = T.kineto_stream_track(*self._streams[lane], lane=len(lanes))
                self._descriptors.append(descriptor)
                lanes.append((_Lane(uuid, lane.kind), [s], [s]))
                moved += 1
        for extra, kept, _ in lanes:
            self._slices[extra] = kept
        return moved

    def anchor_addresses(self) -> np.ndarray:
        """Addresses of the allocations Kineto's `[memory]` events report (for LttngEvents)."""
        return np.array(sorted({a for _, a, _, _ in self._memory_allocations()}), np.uint64)

    def _memory_allocations(self) -> list[tuple[int, int, int, int]]:
        """(pid, address, bytes, ts) of each `[memory]` allocation event."""
        found = []
        for ts, _lane, event in self._instants:
            args = event.get("args")
            if event.get("name") != "[memory]" or not isinstance(args, dict):
                continue
            pid, addr, size = as_int(event.get("pid")), as_int(args.get("Addr")), as_int(args.get("Bytes"))
            if pid is not None and addr and size and size > 0 and addr < 1 << 64:
                found.append((pid, addr, size, ts))
        return found

    def clock_gap(self, allocations: dict[tuple[int, int, int], list[int]]) -> tuple[int, int]:
        """(median ns from each LTTng allocation to its `[memory]` event, anchors matched)."""
        gaps = []
        for pid, addr, size, ts in self._memory_allocations():
            times = allocations.get((pid, addr, size))
            if times:
                gaps.append(min((ts - t for t in times), key=abs))
        if not gaps:
            return 0, 0
        gaps.sort()
        return gaps[len(gaps) // 2], len(gaps)

    def _shift(self, ns: int) -> None:
        for lane_slices in self._slices.values():
            for s in lane_slices:
                s.start += ns
                s.end += ns
        self._instants = [(ts + ns, lane, event) for ts, lane, event in self._instants]
        self._flow_points = [(ph, key, ts + ns, owner, event) for ph, key, ts, owner, event in self._flow_points]

    def packets(self, lttng: LttngEvents | None = None, realtime_offset_ns: int = 0) -> list[bytes]:
        """Serialized TracePackets, placed against the LTTng events when given.

        `realtime_offset_ns` is what the trace's clock snapshot adds to LTTng's
        monotonic times. With `lttng`: the Kineto clock is corrected when its
        `[memory]` events sit more than ANCHOR_TOLERANCE_NS from the allocations
        they report, and ops that cross a memq API call are widened.
        """
        self.clock_note = None
        if lttng is not None:
            gap, anchors = self.clock_gap(lttng.allocations(realtime_offset_ns))
            if anchors >= MIN_ANCHORS and abs(gap) > ANCHOR_TOLERANCE_NS:
                self._shift(-gap)
                self.clock_note = (f"the PyTorch profiler's clock was {gap / 1000:+.1f} us off the LTTng clock "
                                   f"(median gap of {anchors} [memory] events to the allocations they report): "
                                   "Kineto events moved to match")
        api_calls = lttng.calls_by_thread(realtime_offset_ns) if lttng is not None else {}
        widened, most = 0, 0
        for lane, lane_slices in list(self._slices.items()):
            if api_calls and lane.thread in api_calls:
                n, shift = widen(lane_slices, api_calls[lane.thread])
                widened, most = widened + n, max(most, shift)
        if widened:
            self._skip(f"ops widened to cover a memq API call they crossed (by at most {most / 1000:.1f} us)",
                       widened)
        clamped = overlapping = 0
        for lane in list(self._slices):
            lane_slices = self._slices[lane]
            lane_slices.sort(key=lambda s: (s.start, -s.end))
            if lane.kind == "gpu":  # device work is not clamped: what overlaps goes on a lane of its own
                overlapping += self._split_overlaps(lane, lane_slices)
            else:
                clamped += nest(lane_slices)
        if clamped:
            self._skip("slice ends clamped to their parent", clamped)
        if overlapping:
            self._skip("GPU slices overlapping another on their stream, put on an overlap lane", overlapping)

        # A flow point binds in the runtime child track first (ac2g starts at runtime calls), then the thread's.
        lanes = self._lanes
        flow_points = [(ph, key, ts, [lanes[(*owner, rt)] for rt in (True, False) if (*owner, rt) in lanes], event)
                       for ph, key, ts, owner, event in self._flow_points]
        self.flows = bind_flows(flow_points, self._slices, self._skip)

        items: list[tuple[int, int, bytes]] = []  # (ts, order, serialized TracePacket)

        def add(ts: int, lane: _Lane, type_: int, event: dict | None = None, s: Slice | None = None) -> None:
            if event is None:
                packet = event_packet(ts, lane.uuid, type_)
            else:
                packet = event_packet(ts, lane.uuid, type_, str(event.get("name", "")), event.get("cat"),
                                      event.get("args"), s.flow_ids if s else (), s.terminating_flow_ids if s else ())
            items.append((ts, len(items), packet))

        for lane, lane_slices in self._slices.items():
            stack: list[Slice] = []
            for s in lane_slices:
                while stack and stack[-1].end <= s.start:
                    add(stack.pop().end, lane, P.TYPE_SLICE_END)
                add(s.start, lane, P.TYPE_SLICE_BEGIN, s.event, s)
                stack.append(s)
            while stack:
                add(stack.pop().end, lane, P.TYPE_SLICE_END)
        for ts, lane, event in self._instants:
            add(ts, lane, P.TYPE_INSTANT, event)
        self.events = sum(map(len, self._slices.values())) + len(self._instants)
        starts = [s.start for lane_slices in self._slices.values() for s in lane_slices[:1]]
        self.first_ns = min(starts + [ts for ts, _, _ in self._instants], default=0)

        packets = [P.sequence_start(N.SEQ_KINETO)]
        packets += [P.packet(N.SEQ_KINETO, descriptor=d) for d in self._descriptors]
        items.sort(key=lambda item: (item[0], item[1]))
        packets += [packet for _, _, packet in items]
        return packets

    def warnings(self, lttng_threads: set[tuple[int, int]]) -> list[str]:
        """One line per thing the user should know, given the LTTng trace's (pid, tid) pairs."""
        lines = []
        lttng_pids = {pid for pid, _ in lttng_threads}
        unmatched_pids = sorted(self.processes.keys() - lttng_pids)
        unmatched_threads = sorted(t for t in self.threads.keys() - lttng_threads if t[0] in lttng_pids)
        if unmatched_pids:
            pids = ", ".join(map(str, unmatched_pids[:8])) + (" ..." if len(unmatched_pids) > 8 else "")
            lines.append(
                f"Kineto pid(s) {pids} match no process of the LTTng trace: their events are kept on their own "
                "tracks (was the profile recorded in another run?)"
            )
        if unmatched_threads:
            tids = ", ".join(f"{p}/{t}" for p, t in unmatched_threads[:8])
            lines.append(f"Kineto thread(s) {tids} (pid/tid) have no LTTng events: kept on their own thread tracks")
        if self.skipped:
            detail = ", ".join(f"{n} {reason}" for reason, n in sorted(self.skipped.items()))
            lines.append(f"Kineto events not merged as they were: {detail}")
        if self.clock_note:
            lines.append(self.clock_note)
        if self.trace.fixes:
            lines.append("Kineto events of an older layout read as today's: " + ", ".join(
                f"{n:,} {what}" for what, n in sorted(self.trace.fixes.items())))
        return lines


