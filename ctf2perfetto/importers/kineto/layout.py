"""Slices of one Kineto lane made to nest, and Kineto's flow events bound to slices."""
from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Any

from ctf2perfetto.traceformat import names as N


@dataclass
class Slice:
    """A Kineto complete (X) event on its lane, with the flows bound to it."""

    start: int
    end: int
    event: dict
    depth: int = 0  # on its lane, once nested
    flow_ids: list[int] = field(default_factory=list)
    terminating_flow_ids: list[int] = field(default_factory=list)


def widen(lane_slices: list[Slice], calls: list[tuple[int, int]]) -> tuple[int, int]:
    """Widen slices that cross an API call (begin or end inside it) to enclose it strictly.

    Strictly (1 ns beyond each end): trace_processor orders begins of equal ts
    from different sequences arbitrarily. Returns (slices widened, largest
    widening in ns). Widening can make an enclosing slice cross the same call,
    so this repeats until nothing crosses.
    """
    begins = [b for b, _ in calls]
    widened: set[int] = set()
    most = 0
    changed = True
    while changed:
        changed = False
        for s in lane_slices:
            # calls of one thread do not overlap: walk back over those overlapping the slice
            k = bisect.bisect_left(begins, s.end) - 1
            while k >= 0 and calls[k][1] > s.start:
                begin, end = calls[k]
                nested = (s.start < begin and end < s.end) or (begin < s.start and s.end < end)
                if not nested:
                    shift = max(s.start - (begin - 1), (end + 1) - s.end)
                    most, changed = max(most, shift), True
                    s.start, s.end = min(s.start, begin - 1), max(s.end, end + 1)
                    widened.add(id(s))
                k -= 1
    return len(widened), most


def nest(lane_slices: list[Slice]) -> int:
    """Clamp ends so slices sorted by (start, -end) nest; returns how many were clamped.

    Kineto rounds to µs in older traces, so a child can overrun its parent by a
    nanosecond or a microsecond; Perfetto's slice stacks need strict nesting.
    """
    stack: list[Slice] = []
    clamped = 0
    for s in lane_slices:
        while stack and stack[-1].end <= s.start:
            stack.pop()
        if stack and s.end > stack[-1].end:
            s.end = stack[-1].end
            clamped += 1
        s.depth = len(stack)
        stack.append(s)
    return clamped


def bind_flows(flow_points: list, slices: dict[Any, list[Slice]], skip: Any) -> int:
    """Attach Kineto flow events (s/t/f) to the slices they bind to.

    A flow point binds to the innermost slice enclosing its ts on the first of its
    candidate lanes that has one; an `f` without `"bp": "e"` binds to the next
    slice starting at or after ts (Chrome JSON semantics). Flows with fewer than
    two bound points are dropped.
    """
    starts = {lane: [s.start for s in lane_slices] for lane, lane_slices in slices.items()}
    groups: dict[Any, list[tuple[int, int, Slice]]] = {}
    for order, (ph, key, ts, candidates, event) in enumerate(flow_points):
        bound = None
        for lane in candidates:
            lane_slices = slices.get(lane, [])
            if ph == "f" and event.get("bp") != "e":
                i = bisect.bisect_left(starts.get(lane, []), ts)
                bound = lane_slices[i] if i < len(lane_slices) else None
            else:
                # Walk back to the innermost enclosing slice; slices nest, so past a
                # top-level slice that ends before ts nothing earlier can enclose it.
                i = bisect.bisect_right(starts.get(lane, []), ts) - 1
                while i >= 0 and bound is None:
                    if lane_slices[i].end >= ts:
                        bound = lane_slices[i]
                    elif lane_slices[i].depth == 0:
                        break
                    i -= 1
            if bound is not None:
                break
        if bound is None:
            skip("flow points with no slice to bind to")
            continue
        groups.setdefault(key, []).append((ts, order, bound))
    flows = 0
    for points in groups.values():
        points.sort(key=lambda p: (p[0], p[1]))
        chain: list[Slice] = []
        for _, _, s in points:
            if not any(s is c for c in chain):
                chain.append(s)
        if len(chain) < 2:
            skip("flows with a single bound end")
            continue
        flow_id = N.FLOW_KINETO + flows
        for s in chain[:-1]:
            s.flow_ids.append(flow_id)
        chain[-1].terminating_flow_ids.append(flow_id)
        flows += 1
    return flows
