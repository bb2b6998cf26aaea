"""Content fingerprints for generated event logs (tests/test_analyses_property.py).

`with_fingerprints(draw, rows)` runs a generated log over simulated memory: every
byte of every process holds a value (its address at first), copies and memsets
write at their end, and untraced writes (CPU stores, kernels: no row in the log)
put new values into random ranges between events. Each successful copy then gets,
at random, the fingerprints a recorder could have taken: its source at its start,
its destination before (start) and after (at its end, or later with a GPU_COPY_DONE
row), hashed from that simulated memory, so they see the untraced writes that
happened before they were taken and miss the others. The oracle and the SQL only
compare the hashes; the simulation makes them mean what they would on a machine.
"""
from __future__ import annotations

from collections.abc import Callable

from hypothesis import strategies as st

from ctf2perfetto.events import EventKind as K

HASH_MASK = (1 << 63) - 1  # fingerprints fit a signed 64-bit trace argument
UNTRACED_REGIONS = (0x10000, 0x20000, 0x30000, 0x50000)  # the generator's arenas (host, pinned, device, untracked)
SPAN = 256


def _fingerprint(values: list[int]) -> int:
    return hash((len(values), tuple(values))) & HASH_MASK


def _rows_of(r: dict) -> list[tuple[int, int | None, int]]:
    """(dst, src, bytes) runs a copy or memset writes, as the oracle reads them."""
    src = r.get("src", 0) if r["kind"] == K.GPU_COPY else None
    if r["kind"] == K.GPU_COPY and (r.get("dpitch", 0) or r.get("spitch", 0)):
        return [(r["ptr"] + z * r.get("dslice", 0) + y * r["dpitch"], src + z * r.get("sslice", 0) + y * r["spitch"],
                 r["aux"]) for z in range(max(r.get("depth", 0), 1)) for y in range(r["aux2"])]
    return [(r["ptr"], src, r["size"])]


def with_fingerprints(draw: Callable, rows: list[dict]) -> list[dict]:
    """The rows with fingerprints on their copies and GPU_COPY_DONE rows added (see the module doc)."""
    memory: dict[tuple[int, int], int] = {}
    fresh = iter(range(1 << 40, 1 << 41))  # values no address has

    def read(pid: int, addrs: list[int]) -> list[int]:
        return [memory.get((pid, a), a) for a in addrs]

    def side(r: dict, which: int) -> list[int]:
        """The destination (0) or source (1) byte addresses, in order."""
        out: list[int] = []
        for run in _rows_of(r):
            out.extend(range(run[which], run[which] + run[2]))
        return out

    timeline: list[tuple[int, int, int, str, dict]] = []  # (time, rank, order, what, row)
    seq: dict[int, int] = {}
    for n, r in enumerate(rows):
        if r["kind"] == K.GPU_COPY:
            seq[r["pid"]] = seq.get(r["pid"], 0) + 1
            r["seq"] = seq[r["pid"]]
            r["content_mode"] = 1
        if r["kind"] not in (K.GPU_COPY, K.GPU_SET) or r.get("result", 0) != 0:
            continue
        timeline.append((r["ts"], 2, n, "write", r))
        if r["kind"] == K.GPU_COPY:
            timeline.append((r["begin"], 0, n, "start", r))
            after = draw(st.sampled_from(["none", "none", "at end", "later"]))
            if after == "at end":
                timeline.append((r["ts"], 3, n, "after", r))
            elif after == "later":
                timeline.append((r["ts"] + draw(st.integers(1, 30)), 3, n, "done", r))
    # Untraced writes: CPU stores or kernels into a random range, just before or after an event.
    for _ in range(draw(st.integers(0, 6)) if timeline else 0):
        at = draw(st.sampled_from(timeline))[0] + draw(st.sampled_from([-1, 1]))
        pid = draw(st.sampled_from(sorted({r["pid"] for r in rows})))
        lo = draw(st.sampled_from(UNTRACED_REGIONS)) + draw(st.integers(0, SPAN - 1))
        timeline.append((at, 1, -1, "untraced", dict(pid=pid, lo=lo, n=draw(st.integers(1, 24)))))

    done_rows = []
    for at, _rank, _order, what, r in sorted(timeline, key=lambda e: e[:3]):
        pid = r["pid"]
        if what == "untraced":
            for a in range(r["lo"], r["lo"] + r["n"]):
                memory[(pid, a)] = next(fresh)
        elif what == "start":
            bits = draw(st.sampled_from([0, 1, 2, 3, 3]))  # 1 source, 2 destination before
            if bits & 1:
                r["src_hash"] = _fingerprint(read(pid, side(r, 1)))
            if bits & 2:
                r["dst_hash_before"] = _fingerprint(read(pid, side(r, 0)))
            r["content"] = r.get("content", 0) | bits
        elif what == "write":
            if r["kind"] == K.GPU_SET:
                value = next(fresh)
                values = [value] * len(side(r, 0))
            else:
                values = read(pid, side(r, 1))
            for a, v in zip(side(r, 0), values):
                memory[(pid, a)] = v
        else:  # the destination after completion: with the copy, or at a later completion point
            hashed = _fingerprint(read(pid, side(r, 0)))
            if what == "after":
                r["dst_hash_after"] = hashed
                r["content"] = r.get("content", 0) | 4
            else:
                r["content"] = r.get("content", 0) | 8
                done_rows.append(dict(kind=K.GPU_COPY_DONE, ts=at, begin=at, pid=pid, tid=r["tid"], seq=r["seq"],
                                      dst_hash_after=hashed, api="hipStreamSynchronize", stream=r.get("stream", 0),
                                      device=r.get("device", 0)))
    return sorted(rows + done_rows, key=lambda r: r["ts"])
