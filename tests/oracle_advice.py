"""Reference implementation of the advice rules (sql/memq/advice/*.sql), for the tests only.

Plain Python on a log's raw rows and the allocations and writes `oracle.build` derives from
them, following the rules' written decisions (each module's doc comment):

* zero_content: copies whose source fingerprint equals the fingerprint of as many zero bytes in
  the copy's content mode (the caller's `zero_fp(mode, nbytes)`), per (pid, ip, api, direction,
  destination allocation);
* pinning: HtoD copies of at least one byte from pageable memory, per (pid, source allocation or
  source byte sequence), at least two; the pinned rate from the process's HtoD copies on the same
  device whose source is not pageable;
* sync_loop: copies of at least one byte with a blocking API (no `Async`) or HtoD/DtoH from
  pageable memory, per (pid, tid, ip, api, direction, bytes), at least three;
* pinned_oversize: pinned allocations whose copies (first source or destination byte in it) reach
  less than half their size, leaving at least 1 MiB unused;
* pinned_churn: pinned allocations per (pid, size): more made than were ever live at once; the
  allocating and freeing calls' durations from the rows;
* zero_bytes: copies and memsets of 0 bytes per (pid, ip, api, direction).

Rows' `ip` is 0 or absent when not recorded (None here, as NULL in SQL).
"""
from __future__ import annotations

from collections import defaultdict
from typing import Callable

from ctf2perfetto.events import EventKind as K, MemKind
from oracle import Alloc, Oracle, Write

MIN_SYNC_LOOP = 3
MiB = 1 << 20


def _ip(rows: list[dict], w: Write) -> int | None:
    return rows[w.index].get("ip") or None


def _alloc_key(a: Alloc | None) -> tuple | None:
    """An allocation as the tests compare it with memq_allocation: (pid, kind, addr, start)."""
    return None if a is None else (a.pid, a.mem, a.addr, a.start)


def _copies(o: Oracle) -> list[Write]:
    return [w for w in o.writes if w.src is not None]


def zero_content(o: Oracle, rows: list[dict], zero_fp: Callable[[str, int], int]) -> dict[tuple, dict]:
    out: dict[tuple, dict] = {}
    for w in _copies(o):
        r = rows[w.index]
        mode = {1: "sampled", 2: "full"}.get(r.get("content_mode", 0))
        if w.src_hash is None or w.nbytes <= 0 or mode is None:
            continue
        if w.src_hash % (1 << 64) != zero_fp(mode, w.nbytes) % (1 << 64):  # signed or not, the same 64 bits
            continue
        key = (w.pid, _ip(rows, w), w.api, w.direction, _alloc_key(o.primary(w.pid, w.dst, w.begin)))
        g = out.setdefault(key, {"count": 0, "bytes": 0, "dur_sum": 0, "full": True, "first_ts": w.begin,
                                 "last_end_ts": w.end})
        g["count"] += 1
        g["bytes"] += w.nbytes
        g["dur_sum"] += w.end - w.begin
        g["full"] &= mode == "full" or w.nbytes <= 1024
        g["first_ts"], g["last_end_ts"] = min(g["first_ts"], w.begin), max(g["last_end_ts"], w.end)
    for g in out.values():
        g["proof"] = "full" if g.pop("full") else "sampled"
        g["gain_dur"] = g["dur_sum"]
    return out


def pinning(o: Oracle, rows: list[dict]) -> dict[tuple, dict]:
    rate: dict[tuple, list[int]] = defaultdict(lambda: [0, 0])
    groups: dict[tuple, list[Write]] = defaultdict(list)
    for w in _copies(o):
        if w.direction != "HtoD" or w.nbytes <= 0:
            continue
        if not w.pageable:
            if w.end - w.begin > 0:
                rate[(w.pid, w.device)][0] += w.nbytes
                rate[(w.pid, w.device)][1] += w.end - w.begin
            continue
        src = o.primary(w.pid, w.src, w.begin)
        groups[(w.pid, _alloc_key(src) if src else ("key", w.src_seq))].append(w)
    out = {}
    for key, ws in groups.items():
        if len(ws) < 2:
            continue
        per_dev: dict[int, int] = defaultdict(int)
        for w in ws:
            per_dev[w.device] += 1
        device = min(per_dev, key=lambda d: (-per_dev[d], d))
        nbytes, dur = sum(w.nbytes for w in ws), sum(w.end - w.begin for w in ws)
        b, d = rate.get((key[0], device), (0, 0))
        gbps = b * 1.0 / d if d else None
        est = None if gbps is None else int(nbytes / gbps)
        out[key] = {"device": device, "count": len(ws), "bytes": nbytes, "dur_sum": dur, "pinned_gb_per_s": gbps,
                    "est_pinned_dur": est, "gain_dur": None if est is None else max(0, dur - est),
                    "first_ts": min(w.begin for w in ws), "last_end_ts": max(w.end for w in ws)}
    return out


def sync_loop(o: Oracle, rows: list[dict]) -> dict[tuple, dict]:
    groups: dict[tuple, list[Write]] = defaultdict(list)
    for w in _copies(o):
        blocking = "Async" not in w.api
        if w.nbytes <= 0 or not (blocking or (w.direction in ("HtoD", "DtoH") and w.pageable)):
            continue
        groups[(w.pid, w.tid, _ip(rows, w), w.api, w.direction, w.nbytes)].append(w)
    out = {}
    for key, ws in groups.items():
        if len(ws) < MIN_SYNC_LOOP:
            continue
        starts = sorted(w.begin for w in ws)
        out[key] = {"count": len(ws), "bytes": sum(w.nbytes for w in ws),
                    "dur_sum": sum(w.end - w.begin for w in ws),
                    "why": "blocking API" if "Async" not in key[3] else "pageable host memory",
                    "period": (starts[-1] - starts[0]) / (len(ws) - 1),
                    "first_ts": starts[0], "last_end_ts": max(w.end for w in ws)}
    return out


def _extent(r: dict, side: str) -> int:
    """Bytes from a side's first byte to its last, plus one."""
    pitch = r.get("dpitch" if side == "dst" else "spitch", 0)
    if not (r.get("dpitch", 0) or r.get("spitch", 0)):
        return r["size"]
    slices = r.get("dslice" if side == "dst" else "sslice", 0)
    return (max(r.get("depth", 0), 1) - 1) * slices + (r["aux2"] - 1) * pitch + r["aux"]


def pinned_oversize(o: Oracle, rows: list[dict]) -> dict[tuple, dict]:
    used: dict[int, list[int]] = defaultdict(list)  # Alloc.index -> [highest byte, copies]
    for w in _copies(o):
        r = rows[w.index]
        for side, addr in (("dst", w.dst), ("src", w.src)):
            a = o.primary(w.pid, addr, w.begin)
            if a is not None and a.mem == "pinned":
                u = used.setdefault(a.index, [0, 0])
                u[0] = max(u[0], addr - a.addr + _extent(r, side))
                u[1] += 1
    out = {}
    for a in o.allocs:
        if a.mem != "pinned":
            continue
        high, n = used.get(a.index, (0, 0))
        high = min(high, a.size)
        unused = a.size - high
        if unused >= a.size / 2 and unused >= MiB:
            out[_alloc_key(a)] = {"size": a.size, "used_bytes": high, "unused_bytes": unused, "copies": n}
    return out


def pinned_churn(o: Oracle, rows: list[dict]) -> dict[tuple, dict]:
    # the calls' durations, from the rows: a pinned free is the runtime's HostFree / FreeHost
    call: dict[tuple, int] = {}  # (pid, addr, start) -> alloc call + its free call
    open_: dict[tuple, tuple] = {}
    for r in rows:
        ok, dur = r.get("result", 0) == 0, r["ts"] - r.get("begin", r["ts"])
        if r["kind"] == K.GPU_ALLOC and ok and r.get("ptr") and r.get("mem") == MemKind.PINNED:
            key = (r["pid"], r["ptr"], r["ts"])
            call[key] = dur
            open_[(r["pid"], r["ptr"])] = key
        elif r["kind"] == K.GPU_FREE and ok and ("HostFree" in r.get("api", "") or "FreeHost" in r.get("api", "")):
            key = open_.pop((r["pid"], r.get("ptr")), None)
            if key is not None:
                call[key] += dur
    groups: dict[tuple, list[Alloc]] = defaultdict(list)
    for a in o.allocs:
        if a.mem == "pinned" and not a.live_at_start:
            groups[(a.pid, a.size)].append(a)
    out = {}
    for key, allocs in groups.items():
        events = sorted([(a.start, 1) for a in allocs] + [(a.end, -1) for a in allocs if a.end is not None])
        live = best = 0
        for _, delta in events:
            live += delta
            best = max(best, live)
        avoidable = len(allocs) - best
        if avoidable < 1:
            continue
        call_dur = sum(call.get((a.pid, a.addr, a.start), 0) for a in allocs)
        out[key] = {"allocs": len(allocs), "frees": sum(a.end is not None for a in allocs), "max_live": best,
                    "avoidable": avoidable, "call_dur": call_dur,
                    "gain_dur": int(call_dur * 1.0 * avoidable / len(allocs))}
    return out


def zero_bytes(o: Oracle, rows: list[dict]) -> dict[tuple, dict]:
    out: dict[tuple, dict] = {}
    for w in o.writes:
        if w.nbytes != 0:
            continue
        direction = "memset" if w.src is None else w.direction
        g = out.setdefault((w.pid, _ip(rows, w), w.api, direction), {"count": 0, "dur_sum": 0})
        g["count"] += 1
        g["dur_sum"] += w.end - w.begin
    for g in out.values():
        g["gain_dur"] = g["dur_sum"]
    return out
