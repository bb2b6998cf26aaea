"""Reference implementation of DESIGN.md "What the numbers mean", for the tests only.

Plain Python, byte by byte, on raw event rows (dicts with EventBatch columns, `api` as
a name): it never looks at the converter's allocation ids or resolved endpoints, so it
checks the SQL package `memq` independently. Small address spaces only.

It follows the same written decisions as the SQL modules (sql/memq/*.sql doc comments):
* allocation lifetime [end of allocating call, start of freeing call); address spaces
  per (pid, class) with the classes of ctf2perfetto/model.py (libc heap, device+managed,
  pinned, registered); a start where a live allocation of the same space starts ends it;
* a byte's allocations are all allocations live at the copy's start that hold it; its
  *primary* allocation is the one of the first class in (device, pinned, registered,
  host) order (the latest started within a class);
* writes take effect at the end of their call; effects are applied in time order, frees
  at the start of their call (the generated logs have distinct effect times);
* classes per byte: repeat / round trip first, then managed endpoint, then unified;
* a 2D copy writes `height` rows of `width` bytes at `dpitch` / `spitch` strides; a 3D
  copy `depth` slices of those at `dslice` / `sslice` strides;
* prorated time = floor(dur * class_bytes / bytes) (float arithmetic, as in SQL);
  wall-clock time = length of the union of [start, start + prorated).
* capture windows (sql/memq/windows.sql): a LIVE row starts an allocation live when its
  window opened (not counted among allocations made); when a process's window closes,
  its active mirrors end there, and unless the process exited (cause 4) its live
  allocations end there too (outlived: not leaks); time-weighted means are over the
  union of the windows.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from ctf2perfetto.events import EventKind, MemKind

K = EventKind
CLS_HOST, CLS_DEVICE, CLS_PINNED, CLS_REGISTERED = 1, 2, 3, 4
CLASS_PRIORITY = (CLS_DEVICE, CLS_PINNED, CLS_REGISTERED, CLS_HOST)
MEM_NAME = {MemKind.HOST: "host", MemKind.PINNED: "pinned", MemKind.REGISTERED: "registered",
            MemKind.DEVICE: "device", MemKind.MANAGED: "managed", MemKind.UNKNOWN: "device"}
MEM_CLASS = {"host": CLS_HOST, "pinned": CLS_PINNED, "registered": CLS_REGISTERED, "device": CLS_DEVICE,
             "managed": CLS_DEVICE}
KIND_DIRECTION = {0: "HtoH", 1: "HtoD", 2: "DtoH", 3: "DtoD", 1024: "DtoD"}
CLASSES = ("repeat", "round_trip", "managed", "unified")


@dataclass
class Alloc:
    index: int
    pid: int
    cls: int
    mem: str
    addr: int
    size: int
    start: int
    end: int | None = None
    device: int = 0
    live_at_start: bool = False  # a LIVE row: live when its capture window opened
    outlived: bool = False  # still live when its window closed before the process exited

    def holds(self, pid: int, byte: int, when: int) -> bool:
        return (self.pid == pid and self.addr <= byte < self.addr + self.size and self.start <= when
                and (self.end is None or self.end > when))


@dataclass
class Write:
    index: int  # row index in the log
    pid: int
    tid: int
    begin: int
    end: int
    dst: int
    nbytes: int
    src: int | None  # None for a memset
    copy_kind: int
    stream: int
    device: int
    direction: str | None = None
    pageable: bool = False
    repeat: int = 0
    round_trip: int = 0
    managed: int = 0
    unified: int = 0
    unified_device: bool = False
    rows: list[tuple[int, int | None, int]] = field(default_factory=list)  # (dst, src, bytes) written

    def pairs(self):
        """(destination byte, source byte or None) for every byte written."""
        for dst, src, n in self.rows:
            for i in range(n):
                yield dst + i, None if src is None else src + i


@dataclass
class Mirror:
    pid: int
    dst: int
    src: int
    copy: int  # Write.index of the copy that made it
    start: int
    direction: str
    dst_alloc: int | None  # primary allocation of the destination byte (Alloc.index)
    untracked_source: bool
    allocs: frozenset[int] = frozenset()  # every allocation holding either byte
    end: int | None = None


@dataclass
class Oracle:
    allocs: list[Alloc] = field(default_factory=list)
    writes: list[Write] = field(default_factory=list)
    mirrors: list[Mirror] = field(default_factory=list)
    windows: list[tuple[int, int | None, int | None]] = field(default_factory=list)  # (pid, open, close)
    closes: list[tuple[int, int]] = field(default_factory=list)  # (time, pid) of each window close

    # -- allocations ---------------------------------------------------------------------
    def holding(self, pid: int, byte: int, when: int) -> list[Alloc]:
        return [a for a in self.allocs if a.holds(pid, byte, when)]

    def primary(self, pid: int, byte: int, when: int) -> Alloc | None:
        held = self.holding(pid, byte, when)
        for cls in CLASS_PRIORITY:
            same = [a for a in held if a.cls == cls]
            if same:
                return max(same, key=lambda a: (a.start, a.index))
        return None


def _free_class(kind: int, api: str) -> int:
    if kind == K.FREE or kind == K.REALLOC:
        return CLS_HOST
    if kind == K.GPU_UNREGISTER:
        return CLS_REGISTERED
    return CLS_PINNED if ("HostFree" in api or "FreeHost" in api) else CLS_DEVICE


def build(rows: list[dict], unified_devices: set[tuple[int, int]] = frozenset()) -> Oracle:
    """Run the definitions over a log; `unified_devices` holds (pid, device) pairs."""
    o = Oracle()
    live: dict[tuple[int, int, int], Alloc] = {}

    def end_alloc(pid: int, cls: int, addr: int, when: int) -> None:
        alloc = live.pop((pid, cls, addr), None)
        if alloc is not None:
            alloc.end = when

    def start_alloc(pid: int, mem: str, addr: int, size: int, when: int, device: int = 0, at_start=False) -> None:
        cls = MEM_CLASS[mem]
        end_alloc(pid, cls, addr, when)  # a lost free: the new start replaces it
        alloc = Alloc(len(o.allocs), pid, cls, mem, addr, size, when, device=device, live_at_start=at_start)
        o.allocs.append(alloc)
        live[(pid, cls, addr)] = alloc

    open_window: dict[int, int] = {}

    for i, r in enumerate(rows):
        kind, pid, ptr = r["kind"], r["pid"], r.get("ptr", 0)
        ok = r.get("result", 0) == 0
        begin, end = r.get("begin", r["ts"]), r["ts"]
        if kind in (K.MALLOC, K.CALLOC, K.MEMALIGN) and ptr:
            start_alloc(pid, "host", ptr, r["size"], end)
        elif kind == K.POSIX_MEMALIGN and ok and ptr:
            start_alloc(pid, "host", ptr, r["size"], end)
        elif kind == K.REALLOC:
            old = r.get("src", 0)
            if old and (ptr or r["size"] == 0):
                end_alloc(pid, CLS_HOST, old, begin)
            if ptr:
                start_alloc(pid, "host", ptr, r["size"], end)
        elif kind == K.FREE and ptr:
            end_alloc(pid, CLS_HOST, ptr, begin)
        elif kind in (K.GPU_ALLOC, K.GPU_REGISTER) and ok and ptr:
            mem = "registered" if kind == K.GPU_REGISTER else MEM_NAME[MemKind(r["mem"])]
            start_alloc(pid, mem, ptr, r["size"], end, r.get("device", 0))
        elif kind in (K.GPU_FREE, K.GPU_UNREGISTER) and ok and ptr:
            end_alloc(pid, _free_class(kind, r.get("api", "")), ptr, begin)
        elif kind == K.LIVE and ptr:
            start_alloc(pid, MEM_NAME[MemKind(r["mem"])], ptr, r["size"], end, r.get("device", 0), at_start=True)
        elif kind == K.WINDOW and r["aux"]:
            open_window[pid] = end
        elif kind == K.WINDOW:
            o.windows.append((pid, open_window.pop(pid, None), end))
            o.closes.append((end, pid))
            if r["aux2"] != 4:  # not the process's exit: what stays live is not known after
                for key in [k for k in live if k[0] == pid]:
                    live[key].outlived = True
                    end_alloc(*key, end)
        elif kind in (K.GPU_COPY, K.GPU_SET) and ok:
            src = r.get("src", 0) if kind == K.GPU_COPY else None
            w = Write(i, pid, r.get("tid", pid), begin, end, ptr, r["size"], src, r.get("copy_kind", -1),
                      r.get("stream", 0), r.get("device", 0))
            dpitch, spitch = r.get("dpitch", 0), r.get("spitch", 0)
            depth, dslice, sslice = r.get("depth", 0), r.get("dslice", 0), r.get("sslice", 0)
            if kind == K.GPU_COPY and (dpitch or spitch):  # 2D: height rows of width bytes (3D: depth x that)
                w.rows = [(ptr + z * dslice + row * dpitch, src + z * sslice + row * spitch, r["aux"])
                          for z in range(max(depth, 1)) for row in range(r["aux2"])]
            else:
                w.rows = [(ptr, src, r["size"])]
            o.writes.append(w)
    o.windows += [(pid, t, None) for pid, t in open_window.items()]
    for w in o.writes:
        if w.src is not None:
            _endpoints(o, w, unified_devices)
    _mirrors(o)
    return o


def recorded_time(o: Oracle, window: tuple[int, int]) -> int:
    """Length of the union of the capture windows (the trace `window` when there are none)."""
    if not o.windows:
        return window[1] - window[0]
    lo, hi = window
    return union_length([(window[0] if t0 is None else t0, hi if t1 is None else t1) for _, t0, t1 in o.windows])


def _side(a: Alloc | None) -> str:
    """D for device and managed memory, H for the rest (untracked memory counts as host)."""
    return "D" if a is not None and a.mem in ("device", "managed") else "H"


def _pageable(a: Alloc | None) -> bool:
    return a is None or a.mem == "host"


def _endpoints(o: Oracle, w: Write, unified_devices) -> None:
    """Direction (Default kind from the primary allocations of the first bytes), staged, unified device."""
    dst_a = o.primary(w.pid, w.dst, w.begin)
    src_a = o.primary(w.pid, w.src, w.begin)
    w.direction = f"{_side(src_a)}to{_side(dst_a)}" if w.copy_kind == 4 else KIND_DIRECTION[w.copy_kind]
    w.pageable = (w.direction == "HtoD" and _pageable(src_a)) or (w.direction == "DtoH" and _pageable(dst_a))
    w.unified_device = (w.pid, w.device) in unified_devices


def _mirrors(o: Oracle) -> None:
    # Effects in time order: frees at their time, writes at their end (ties: frees first, then log order).
    effects: list[tuple[int, int, int, object]] = []
    for a in o.allocs:
        if a.end is not None:
            effects.append((a.end, 0, a.index, a))
    for w in o.writes:
        effects.append((w.end, 1, w.index, w))
    for when, pid in o.closes:  # a window's close ends its process's mirrors
        effects.append((when, 0, -1, pid))
    effects.sort(key=lambda e: e[:3])
    active: dict[tuple[int, int], Mirror] = {}  # (pid, dst byte) -> mirror
    by_src: dict[tuple[int, int], set[int]] = defaultdict(set)  # (pid, src byte) -> dst bytes

    def close(m: Mirror, when: int) -> None:
        m.end = when
        del active[(m.pid, m.dst)]
        by_src[(m.pid, m.src)].discard(m.dst)

    for when, _, _, ev in effects:
        if isinstance(ev, int):
            for m in [m for m in active.values() if m.pid == ev]:
                close(m, when)
            continue
        if isinstance(ev, Alloc):
            for m in [m for m in active.values() if ev.index in m.allocs]:
                close(m, when)
            continue
        w: Write = ev
        pid = w.pid
        if w.src is not None:
            for d, s in w.pairs():
                held = o.holding(pid, d, w.begin) + o.holding(pid, s, w.begin)
                m = active.get((pid, d))
                back = active.get((pid, s))
                if m is not None and m.src == s:
                    w.repeat += 1
                elif back is not None and back.src == d:
                    w.round_trip += 1
                elif any(a.mem == "managed" for a in held):
                    w.managed += 1
                elif w.direction in ("HtoD", "DtoH") and w.unified_device:
                    w.unified += 1
        for y, _ in w.pairs():
            if (pid, y) in active:
                close(active[(pid, y)], when)
            for d in list(by_src.get((pid, y), ())):
                close(active[(pid, d)], when)
        if w.src is None:
            continue
        for d, s in w.pairs():
            held = o.holding(pid, d, w.begin) + o.holding(pid, s, w.begin)
            dst_a = o.primary(pid, d, w.begin)
            m = Mirror(pid, d, s, w.index, when, w.direction, None if dst_a is None else dst_a.index,
                       not o.holding(pid, s, w.begin), frozenset(a.index for a in held))
            o.mirrors.append(m)
            if any(a.end is not None and a.end <= when for a in held):
                m.end = when  # an allocation it lives in ended before the copy completed
                continue
            active[(pid, d)] = m
            by_src[(pid, s)].add(d)


# -- figures -----------------------------------------------------------------------------
def counter_figures(mirrors: list[Mirror], window: tuple[int, int]) -> dict:
    """Peak, first time of the peak, and byte*ns integral over `window` of a mirror set."""
    lo, hi = window
    deltas: dict[int, int] = defaultdict(int)
    for m in mirrors:
        end = hi if m.end is None else m.end
        if end > m.start:
            deltas[m.start] += 1
            deltas[end] -= 1
    value, peak, peak_ts, integral, prev_t = 0, 0, None, 0, None
    for t in sorted(deltas):
        if prev_t is not None:
            integral += value * (min(t, hi) - max(prev_t, lo)) if min(t, hi) > max(prev_t, lo) else 0
        value += deltas[t]
        if value > peak:
            peak, peak_ts = value, t
        prev_t = t
    return {"peak": peak, "peak_ts": peak_ts, "integral": integral}


def duplicated_groups(o: Oracle, window: tuple[int, int]) -> dict[tuple, dict]:
    """Counter figures per (grouping, pid or None for the whole trace, key) as memq.duplicated
    names them; allocation keys are (addr, start) of the primary destination allocation."""
    groups: dict[tuple, list[Mirror]] = defaultdict(list)
    for m in o.mirrors:
        a = None if m.dst_alloc is None else o.allocs[m.dst_alloc]
        flag = "1" if m.untracked_source else "0"
        for pid in (None, m.pid):
            groups[("total", pid, None)].append(m)
            groups[("direction", pid, m.direction)].append(m)
            groups[("untracked_source", pid, flag)].append(m)
        groups[("allocation", m.pid, None if a is None else (a.addr, a.start))].append(m)
    figures = {key: counter_figures(ms, window) for key, ms in groups.items()}
    return {key: f for key, f in figures.items() if f["peak"] > 0}


def prorated(w: Write, nbytes: int) -> int:
    return int(float(w.end - w.begin) * nbytes / w.nbytes) if w.nbytes else 0


def union_length(intervals: list[tuple[int, int]]) -> int:
    total, cur_lo, cur_hi = 0, None, None
    for lo, hi in sorted(i for i in intervals if i[1] > i[0]):
        if cur_hi is None or lo > cur_hi:
            if cur_hi is not None:
                total += cur_hi - cur_lo
            cur_lo, cur_hi = lo, hi
        else:
            cur_hi = max(cur_hi, hi)
    if cur_hi is not None:
        total += cur_hi - cur_lo
    return total


def redundant_totals(o: Oracle, pid: int | None = None) -> dict[str, dict]:
    """Per class (and 'redundant' = all classes, 'staged'): count, bytes, time, wall."""
    copies = [w for w in o.writes if w.src is not None and (pid is None or w.pid == pid)]
    out = {}
    for cls in CLASSES + ("redundant",):
        def nbytes(w: Write) -> int:
            return w.repeat + w.round_trip + w.managed + w.unified if cls == "redundant" else getattr(w, cls)
        hit = [w for w in copies if nbytes(w) > 0]
        out[cls] = {"count": len(hit), "bytes": sum(nbytes(w) for w in hit),
                    "time": sum(prorated(w, nbytes(w)) for w in hit),
                    "wall": union_length([(w.begin, w.begin + prorated(w, nbytes(w))) for w in hit])}
    staged = [w for w in copies if w.pageable]
    out["staged"] = {"count": len(staged), "bytes": sum(w.nbytes for w in staged),
                     "time": sum(w.end - w.begin for w in staged),
                     "wall": union_length([(w.begin, w.end) for w in staged])}
    return out


# -- summary and leaks -------------------------------------------------------------------
def copies_per_direction(o: Oracle) -> dict[str, dict]:
    """Per direction (memsets as 'memset'): count, bytes, summed and wall-clock time."""
    groups: dict[str, list[Write]] = defaultdict(list)
    for w in o.writes:
        groups["memset" if w.src is None else w.direction].append(w)
    return {d: {"count": len(ws), "bytes": sum(w.nbytes for w in ws), "dur_sum": sum(w.end - w.begin for w in ws),
                "wall_dur": union_length([(w.begin, w.end) for w in ws])} for d, ws in groups.items()}


def device_busy(o: Oracle) -> dict[int, int]:
    """Per device: union of its copy and memset intervals."""
    per: dict[int, list] = defaultdict(list)
    for w in o.writes:
        per[w.device].append((w.begin, w.end))
    return {d: union_length(iv) for d, iv in per.items()}


def allocations_per_kind(o: Oracle) -> dict[str, dict]:
    """Per kind: count, bytes, max size, leaked, and the peak of the live-bytes counters
    (per process; device memory per device) with its first time."""
    out: dict[str, dict] = {}
    for a in o.allocs:
        k = out.setdefault(a.mem, {"count": 0, "bytes": 0, "max_size": 0, "leaked": 0, "leaked_bytes": 0,
                                   "live_at_start": 0, "live_at_start_bytes": 0})
        k["count"] += not a.live_at_start
        k["bytes"] += 0 if a.live_at_start else a.size
        k["live_at_start"] += a.live_at_start
        k["live_at_start_bytes"] += a.size if a.live_at_start else 0
        k["max_size"] = max(k["max_size"], a.size)
        k["leaked"] += a.end is None
        k["leaked_bytes"] += a.size if a.end is None else 0
    tracks: dict[tuple, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    for a in o.allocs:
        track = (a.mem, "device", a.device) if a.mem == "device" else (a.mem, "pid", a.pid)
        tracks[track][a.start] += a.size
        if a.end is not None:
            tracks[track][a.end] -= a.size
    for (mem, _, _), deltas in tracks.items():
        live = 0
        for t in sorted(deltas):
            live += deltas[t]
            best = out[mem].get("peak_live_bytes", 0)
            if live > best or (live == best and t < out[mem].get("peak_ts", t + 1)):
                out[mem]["peak_live_bytes"], out[mem]["peak_ts"] = live, t
    return out


def leaks_by_kind_size(o: Oracle) -> dict[tuple[str, int], tuple[int, int]]:
    """(kind, size) -> (count, bytes) of allocations never freed."""
    out: dict[tuple[str, int], tuple[int, int]] = {}
    for a in o.allocs:
        if a.end is None:
            n, b = out.get((a.mem, a.size), (0, 0))
            out[(a.mem, a.size)] = (n + 1, b + a.size)
    return out


def outlived_by_kind_size(o: Oracle) -> dict[tuple[str, int], tuple[int, int, int]]:
    """(kind, size) -> (count, bytes, live_at_start) of allocations still live when their window closed early."""
    out: dict[tuple[str, int], tuple[int, int, int]] = {}
    for a in o.allocs:
        if a.outlived:
            n, b, s = out.get((a.mem, a.size), (0, 0, 0))
            out[(a.mem, a.size)] = (n + 1, b + a.size, s + a.live_at_start)
    return out
