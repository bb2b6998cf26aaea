"""Reference implementation of docs/DEFINITIONS.md (every figure and tie rule), for the tests only.

Plain Python, byte by byte, on raw event rows (dicts with EventBatch columns, `api` as
a name): it never looks at the converter's allocation ids or resolved endpoints, so it
checks the SQL package `memq` independently. Small address spaces only.

It follows the same written decisions as the SQL modules (sql/memq/*.sql doc comments):
* allocation lifetime [end of allocating call, start of freeing call); address spaces
  per (pid, class) with the classes of ctf2perfetto/convert/model.py (libc heap, device+managed,
  pinned, registered); a start where a live allocation of the same space starts ends it;
* a byte's allocations are all allocations live at the copy's start that hold it; its
  *primary* allocation is the one of the first class in (device, pinned, registered,
  host) order (the latest started within a class);
* writes take effect at the end of their call, frees at the start of theirs; effects are
  applied in time order, and at equal times frees first, then writes by slice id (see
  `effect_key`);
* classes per byte: no-op (every byte of a copy whose destination fingerprint is the same
  before and after), then repeat / round trip, then managed endpoint, then unified; a
  byte is a repeat or round trip when its pair was a mirror just before the copy (a copy
  is never redundant with itself) that no fingerprint has ended; a copy's class is the
  class with most bytes (ties in that order);
* content fingerprints (sql/memq/mirrors.sql): a copy's *content* is its source
  fingerprint, else its destination's after completion. Observations are (byte
  sequence, time, hash): the source at the copy's start (or, from the after-hash, at
  its end), the destination before (start) and after (`after_ts`: its end, or the
  copy-done row with its pid and seq). Byte sequences are compared as the exact tuple
  of addresses. An observation is *after* a time t when taken later, or at t if it is an
  after-fingerprint. A mirror ends at the first observation after its copy's end of
  exactly its source or destination sequence with another hash; a repeat / round trip
  needs no such observation up to the later copy's end, and is *checked* (evidence
  `content`) when the later copy itself observed a side of it after the earlier end, up
  to its own end, with the earlier content;
* a 2D copy writes `height` rows of `width` bytes at `dpitch` / `spitch` strides; a 3D
  copy `depth` slices of those at `dslice` / `sslice` strides; rows are written in order,
  so where rows of one copy overlap (pitch < width) the last row's byte is the mirror;
* prorated time = floor(dur * class_bytes / bytes) (float arithmetic, as in SQL);
  wall-clock time = length of the union of [start, start + prorated);
* live bytes at a time are the value after every call at that time (a block allocated
  and freed at the same ns is never live).
* capture windows (sql/memq/windows.sql): a LIVE row starts an allocation live when its
  window opened (not counted among allocations made); when a process's window closes,
  its active mirrors end there, and unless the process exited (cause 4) its live
  allocations end there too (outlived: not leaks); time-weighted means are over the
  union of the windows.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Callable, NamedTuple

from ctf2perfetto.events import EventKind, MemKind

K = EventKind
CLS_HOST, CLS_DEVICE, CLS_PINNED, CLS_REGISTERED = 1, 2, 3, 4
CLASS_PRIORITY = (CLS_DEVICE, CLS_PINNED, CLS_REGISTERED, CLS_HOST)
MEM_NAME = {MemKind.HOST: "host", MemKind.PINNED: "pinned", MemKind.REGISTERED: "registered",
            MemKind.DEVICE: "device", MemKind.MANAGED: "managed", MemKind.UNKNOWN: "device"}
MEM_CLASS = {"host": CLS_HOST, "pinned": CLS_PINNED, "registered": CLS_REGISTERED, "device": CLS_DEVICE,
             "managed": CLS_DEVICE}
KIND_DIRECTION = {0: "HtoH", 1: "HtoD", 2: "DtoH", 3: "DtoD", 1024: "DtoD"}
CLASSES = ("no_op", "repeat", "round_trip", "managed", "unified")
NEVER = float("inf")


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
    api: str = ""
    direction: str | None = None
    pageable: bool = False
    no_op: int = 0
    repeat: int = 0
    round_trip: int = 0
    managed: int = 0
    unified: int = 0
    repeat_checked: int = 0  # of repeat / round_trip: bytes content proves
    round_trip_checked: int = 0
    unified_device: bool = False
    rows: list[tuple[int, int | None, int]] = field(default_factory=list)  # (dst, src, bytes) written
    seq: int = 0
    src_hash: int | None = None
    before: int | None = None
    after: int | None = None
    after_ts: int | None = None

    def pairs(self):
        """(destination byte, source byte or None) for every byte written."""
        for dst, src, n in self.rows:
            for i in range(n):
                yield dst + i, None if src is None else src + i

    @property
    def dst_seq(self) -> tuple[int, ...]:
        return tuple(d for d, _ in self.pairs())

    @property
    def src_seq(self) -> tuple[int, ...]:
        return tuple(s for _, s in self.pairs())

    @property
    def content(self) -> int | None:
        """What it copied: the source's fingerprint, else the destination's after completion."""
        return self.src_hash if self.src_hash is not None else self.after

    @property
    def redundant(self) -> int:
        return self.no_op + self.repeat + self.round_trip + self.managed + self.unified

    @property
    def proven(self) -> int:
        return self.no_op + self.repeat_checked + self.round_trip_checked


@dataclass(frozen=True)
class Observation:
    pid: int
    key: tuple[int, ...]  # the byte addresses, in order
    ts: int
    hash: int
    copy: int  # Write.index
    kind: str  # copied, before, after


@dataclass
class Mirror:
    pid: int
    dst: int
    src: int
    copy: int  # Write.index of the copy that made it
    start: int
    direction: str
    dst_alloc: int | None  # primary allocation of the destination byte (Alloc.index)
    src_alloc: int | None  # primary allocation of the source byte
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
    observations: list[Observation] = field(default_factory=list)

    # -- allocations ---------------------------------------------------------------------
    def holding(self, pid: int, byte: int, when: int, among: list[Alloc] | None = None) -> list[Alloc]:
        """The allocations (of `among`, default all) holding a byte at a time."""
        return [a for a in (self.allocs if among is None else among) if a.holds(pid, byte, when)]

    def primary(self, pid: int, byte: int, when: int, among: list[Alloc] | None = None) -> Alloc | None:
        held = self.holding(pid, byte, when, among)
        for cls in CLASS_PRIORITY:
            same = [a for a in held if a.cls == cls]
            if same:
                return max(same, key=lambda a: (a.start, a.index))
        return None

    def near(self, w: "Write") -> list[Alloc]:
        """A shortlist for `holding` on a write's bytes: the allocations of its process live at its start that
        overlap a range it writes or reads (a recorded workload has thousands of heap blocks)."""
        spans = [(d, d + n) for d, _, n in w.rows] + [(s, s + n) for _, s, n in w.rows if s is not None]
        return [a for a in self.allocs if a.pid == w.pid and a.start <= w.begin and (a.end is None or a.end > w.begin)
                and any(a.addr < hi and lo < a.addr + a.size for lo, hi in spans)]


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

    done: dict[tuple[int, int], tuple[int, int]] = {}  # (pid, seq) -> (ts, dst hash) of the first copy-done
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
        elif kind == K.HOST_ALLOC and ptr:  # memq's heap: blocks at or above the threshold (usable size)
            start_alloc(pid, "host", ptr, r["size"], end)
        elif kind == K.HOST_FREE and ptr:
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
                      r.get("stream", 0), r.get("device", 0), r.get("api", ""))
            dpitch, spitch = r.get("dpitch", 0), r.get("spitch", 0)
            depth, dslice, sslice = r.get("depth", 0), r.get("dslice", 0), r.get("sslice", 0)
            if kind == K.GPU_COPY and (dpitch or spitch):  # 2D: height rows of width bytes (3D: depth x that)
                w.rows = [(ptr + z * dslice + row * dpitch, src + z * sslice + row * spitch, r["aux"])
                          for z in range(max(depth, 1)) for row in range(r["aux2"])]
            else:
                w.rows = [(ptr, src, r["size"])]
            if kind == K.GPU_COPY:
                _fingerprints(w, r)
            o.writes.append(w)
        elif kind == K.GPU_COPY_DONE:
            done.setdefault((pid, r["seq"]), (r["ts"], r["dst_hash_after"]))
    # A window the log never closes ends with the trace (its last row, or the end of the range a loss spans:
    # memq_window's `trace_end`), and so do its process's mirrors.
    last = max((r["ts"] + (r["size"] if r["kind"] == K.LOST else 0) for r in rows), default=0)
    o.windows += [(pid, t, last) for pid, t in open_window.items()]
    o.closes += [(last, pid) for pid in open_window]
    for w in o.writes:
        if w.src is not None:
            if w.after is None and (w.pid, w.seq) in done:
                w.after_ts, w.after = done[(w.pid, w.seq)]
            _endpoints(o, w, unified_devices)
    _observations(o)
    _mirrors(o)
    return o


def recorded_time(o: Oracle, window: tuple[int, int]) -> int:
    """Length of the union of the capture windows (the trace `window` when there are none)."""
    if not o.windows:
        return window[1] - window[0]
    lo, hi = window
    return union_length([(window[0] if t0 is None else t0, hi if t1 is None else t1) for _, t0, t1 in o.windows])


def _fingerprints(w: Write, r: dict) -> None:
    """The hashes a copy row holds, by its content bits."""
    bits = r.get("content", 0)
    w.seq = r.get("seq", 0)
    if bits & 1:
        w.src_hash = r["src_hash"]
    if bits & 2:
        w.before = r["dst_hash_before"]
    if bits & 4:
        w.after, w.after_ts = r["dst_hash_after"], w.end


def _observations(o: Oracle) -> None:
    for w in o.writes:
        if w.src is None:
            continue
        if w.content is not None:
            when = w.begin if w.src_hash is not None else w.end
            o.observations.append(Observation(w.pid, w.src_seq, when, w.content, w.index, "copied"))
        if w.before is not None:
            o.observations.append(Observation(w.pid, w.dst_seq, w.begin, w.before, w.index, "before"))
        if w.after is not None:
            o.observations.append(Observation(w.pid, w.dst_seq, w.after_ts, w.after, w.index, "after"))


def _after(ob: Observation, t: int) -> bool:
    """Taken after t; at t only an after-fingerprint (a copy starting then saw the state before)."""
    return ob.ts > t or (ob.ts == t and ob.kind == "after")


def content_end(o: Oracle, w: Write) -> float:
    """When an observation first showed a side of w's mirror no longer holding its content (inf: never)."""
    if w.content is None:
        return NEVER
    keys = (w.src_seq, w.dst_seq)
    hits = [ob.ts for ob in o.observations
            if ob.pid == w.pid and ob.key in keys and _after(ob, w.end) and ob.hash != w.content]
    return min(hits, default=NEVER)


def _checked(o: Oracle, later: Write, earlier: Write) -> bool:
    """Whether `later` itself observed a side of `earlier`'s mirror unchanged, between their ends."""
    if earlier.content is None:
        return False
    keys = (earlier.src_seq, earlier.dst_seq)
    return any(ob.copy == later.index and ob.key in keys and _after(ob, earlier.end) and ob.ts <= later.end
               and ob.hash == earlier.content for ob in o.observations)


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


def effect_key(ev: "Alloc | Write") -> tuple[int, int, int, int]:
    """Where an effect falls in the order memq.mirrors applies them: by time, frees (at their call's start)
    before writes (at their call's end) at equal times, and writes by (end, slice id). trace_processor numbers
    slices as it meets their starts, in time order and at equal starts in the order the log lists them, so slice
    id order is (start, log row)."""
    if isinstance(ev, Alloc):
        return (ev.end, 0, 0, ev.index)
    return (ev.end, 1, ev.begin, ev.index)


def _classify(o: Oracle, w: Write, active: dict[tuple[int, int], "Mirror"], ends: dict[int, float],
              writes: dict[int, Write]) -> None:
    """Classes of a copy's bytes from the mirrors active just before it completes, less those a fingerprint
    ended by then (`ends`: content_end per copy); every byte a no-op when its destination did not change."""
    if w.before is not None and w.before == w.after:
        w.no_op = w.nbytes
        return
    near = o.near(w)
    checked: dict[int, bool] = {}  # per earlier copy: _checked, once

    def is_checked(earlier: int) -> bool:
        if earlier not in checked:
            checked[earlier] = _checked(o, w, writes[earlier])
        return checked[earlier]

    for d, s in w.pairs():
        held = o.holding(w.pid, d, w.begin, near) + o.holding(w.pid, s, w.begin, near)
        m = active.get((w.pid, d))
        back = active.get((w.pid, s))
        if m is not None and m.src == s and ends[m.copy] > w.end:
            w.repeat += 1
            w.repeat_checked += is_checked(m.copy)
        elif back is not None and back.src == d and ends[back.copy] > w.end:
            w.round_trip += 1
            w.round_trip_checked += is_checked(back.copy)
        elif any(a.mem == "managed" for a in held):
            w.managed += 1
        elif w.direction in ("HtoD", "DtoH") and w.unified_device:
            w.unified += 1


class _Close(NamedTuple):
    """A capture window's close, as a mirror effect (after frees and writes at its time: a copy that returns as
    its window closes is in the window, and its mirror ends there)."""
    when: int
    pid: int


def _mirrors(o: Oracle) -> None:
    effects: list[Alloc | Write | _Close] = [a for a in o.allocs if a.end is not None] + o.writes
    effects += [_Close(when, pid) for when, pid in o.closes]  # a window's close ends its process's mirrors
    effects.sort(key=lambda ev: (ev.when, 2, 0, 0) if isinstance(ev, _Close) else effect_key(ev))
    active: dict[tuple[int, int], Mirror] = {}  # (pid, dst byte) -> mirror
    by_src: dict[tuple[int, int], set[int]] = defaultdict(set)  # (pid, src byte) -> dst bytes
    ends = {w.index: content_end(o, w) for w in o.writes if w.src is not None}
    writes = {w.index: w for w in o.writes}

    def close(m: Mirror, when: int) -> None:
        m.end = when
        del active[(m.pid, m.dst)]
        by_src[(m.pid, m.src)].discard(m.dst)

    for ev in effects:
        if isinstance(ev, _Close):
            for m in [m for m in active.values() if m.pid == ev.pid]:
                close(m, ev.when)
            continue
        if isinstance(ev, Alloc):
            for m in [m for m in active.values() if ev.index in m.allocs]:
                close(m, ev.end)
            continue
        w, when, pid = ev, ev.end, ev.pid
        if w.src is not None:
            _classify(o, w, active, ends, writes)
        for y, _ in w.pairs():
            if (pid, y) in active:
                close(active[(pid, y)], when)
            for d in list(by_src.get((pid, y), ())):
                close(active[(pid, d)], when)
        if w.src is None:
            continue
        near = o.near(w)
        for d, s in w.pairs():
            held = o.holding(pid, d, w.begin, near) + o.holding(pid, s, w.begin, near)
            dst_a, src_a = o.primary(pid, d, w.begin, near), o.primary(pid, s, w.begin, near)
            m = Mirror(pid, d, s, w.index, when, w.direction, None if dst_a is None else dst_a.index,
                       None if src_a is None else src_a.index, src_a is None, frozenset(a.index for a in held))
            o.mirrors.append(m)
            if (pid, d) in active:  # an earlier row of this copy wrote the byte: the last row's content stays
                close(active[(pid, d)], when)
            if any(a.end is not None and a.end <= when for a in held):
                m.end = when  # an allocation it lives in ended before the copy completed
                continue
            active[(pid, d)] = m
            by_src[(pid, s)].add(d)
    for m in o.mirrors:  # a fingerprint ends it earlier than the address rules did
        if ends[m.copy] < (NEVER if m.end is None else m.end):
            m.end = int(ends[m.copy])


def copy_class(w: Write) -> str | None:
    """The class with most bytes (ties: no-op, repeat, round trip, managed, unified); None when nothing is redundant."""
    counts = [(getattr(w, cls), -i, cls) for i, cls in enumerate(CLASSES)]
    best = max(counts)
    return best[2] if best[0] > 0 else None


# -- figures -----------------------------------------------------------------------------
def counter_series(mirrors: list[Mirror], window: tuple[int, int]) -> list[tuple[int, int]]:
    """Duplicated bytes of a mirror set over time: (time, value from then on) at every time a mirror starts or
    ends (mirrors alive at the end end at the window's end)."""
    deltas: dict[int, int] = defaultdict(int)
    for m in mirrors:
        end = window[1] if m.end is None else m.end
        if end > m.start:
            deltas[m.start] += 1
            deltas[end] -= 1
    series, value = [], 0
    for t in sorted(deltas):
        value += deltas[t]
        series.append((t, value))
    return series


def counter_figures(mirrors: list[Mirror], window: tuple[int, int]) -> dict:
    """Peak, first time of the peak, and byte*ns integral over `window` of a mirror set."""
    lo, hi = window
    series = counter_series(mirrors, window)
    peak, peak_ts, integral = 0, None, 0
    for (t, value), (nxt, _) in zip(series, series[1:] + [(hi, 0)]):
        integral += value * max(0, min(nxt, hi) - max(t, lo))
        if value > peak:
            peak, peak_ts = value, t
    return {"peak": peak, "peak_ts": peak_ts, "integral": integral}


def mirror_groups(o: Oracle) -> dict[tuple, list[Mirror]]:
    """Mirrors per (grouping, pid or None for the whole trace, key) as memq.duplicated names them; allocation
    keys are the primary destination allocation (Alloc.index, None when untracked)."""
    groups: dict[tuple, list[Mirror]] = defaultdict(list)
    for m in o.mirrors:
        flag = "1" if m.untracked_source else "0"
        for pid in (None, m.pid):
            groups[("total", pid, None)].append(m)
            groups[("direction", pid, m.direction)].append(m)
            groups[("untracked_source", pid, flag)].append(m)
        groups[("allocation", m.pid, m.dst_alloc)].append(m)
    return groups


def duplicated_groups(o: Oracle, window: tuple[int, int]) -> dict[tuple, dict]:
    """Counter figures per group of `mirror_groups` that duplicates anything."""
    figures = {key: counter_figures(ms, window) for key, ms in mirror_groups(o).items()}
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


def proven_bytes(w: Write, cls: str) -> int:
    """Of a copy's bytes in `cls` (or 'redundant': any class), those a fingerprint proves (evidence `content`)."""
    return {"no_op": w.no_op, "repeat": w.repeat_checked, "round_trip": w.round_trip_checked,
            "redundant": w.proven}.get(cls, 0)


def redundant_totals(o: Oracle, pid: int | None = None, evidence: str = "all") -> dict[str, dict]:
    """Per class (and 'redundant' = all classes, 'staged'): count, bytes, time, wall; `evidence`
    'content' / 'address' keeps only the bytes a fingerprint proves / the others (no 'staged')."""
    copies = [w for w in o.writes if w.src is not None and (pid is None or w.pid == pid)]
    out = {}
    for cls in CLASSES + ("redundant",):
        def nbytes(w: Write) -> int:
            every = w.redundant if cls == "redundant" else getattr(w, cls)
            return {"all": every, "content": proven_bytes(w, cls), "address": every - proven_bytes(w, cls)}[evidence]
        hit = [w for w in copies if nbytes(w) > 0]
        out[cls] = {"count": len(hit), "bytes": sum(nbytes(w) for w in hit),
                    "time": sum(prorated(w, nbytes(w)) for w in hit),
                    "wall": union_length([(w.begin, w.begin + prorated(w, nbytes(w))) for w in hit])}
    if evidence == "all":
        staged = [w for w in copies if w.pageable]
        out["staged"] = {"count": len(staged), "bytes": sum(w.nbytes for w in staged),
                         "time": sum(w.end - w.begin for w in staged),
                         "wall": union_length([(w.begin, w.end) for w in staged])}
    return out


# -- summary and leaks -------------------------------------------------------------------
def copies_per_direction(o: Oracle) -> dict[str, dict]:
    """Per direction (memsets as 'memset'): count, bytes, summed and wall-clock time, bandwidth (GB/s = bytes/ns),
    staged (pageable host endpoint) copies."""
    groups: dict[str, list[Write]] = defaultdict(list)
    for w in o.writes:
        groups["memset" if w.src is None else w.direction].append(w)
    out = {}
    for d, ws in groups.items():
        nbytes, dur = sum(w.nbytes for w in ws), sum(w.end - w.begin for w in ws)
        out[d] = {"count": len(ws), "bytes": nbytes, "dur_sum": dur,
                  "wall_dur": union_length([(w.begin, w.end) for w in ws]),
                  "gb_per_s": nbytes / dur if dur > 0 else None, "staged": sum(w.pageable for w in ws)}
    return out


def devices(o: Oracle) -> dict[int, dict]:
    """Per device: copies and memsets on it, and the union of their intervals."""
    per: dict[int, list] = defaultdict(list)
    for w in o.writes:
        per[w.device].append((w.begin, w.end))
    return {d: {"ops": len(iv), "busy_dur": union_length(iv)} for d, iv in per.items()}


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


# -- advice rules (sql/memq/advice/*.sql) ------------------------------------------------------
# Plain Python on a log's raw rows and the allocations and writes `oracle.build` derives from
# them, following the rules' written decisions (each module's doc comment):
#
# * zero_content: copies whose source fingerprint equals the fingerprint of as many zero bytes in
#   the copy's content mode (the caller's `zero_fp(mode, nbytes)`), per (pid, ip, api, direction,
#   destination allocation);
# * pinning: HtoD copies of at least one byte from pageable memory, per (pid, source allocation or
#   source byte sequence), at least two; the pinned rate from the process's HtoD copies on the same
#   device whose source is not pageable;
# * sync_loop: copies of at least one byte with a blocking API (no `Async`) or HtoD/DtoH from
#   pageable memory, per (pid, tid, ip, api, direction, bytes), at least three;
# * pinned_oversize: pinned allocations whose copies (first source or destination byte in it) reach
#   less than half their size, leaving at least 1 MiB unused;
# * pinned_churn: pinned allocations per (pid, size): more made than were ever live at once; the
#   allocating and freeing calls' durations from the rows;
# * zero_bytes: copies and memsets of 0 bytes per (pid, ip, api, direction).
#
# Rows' `ip` is 0 or absent when not recorded (None here, as NULL in SQL).

MIN_SYNC_LOOP = 3
_MiB = 1 << 20


def _advice_ip(rows: list[dict], w: Write) -> int | None:
    return rows[w.index].get("ip") or None


def _advice_alloc_key(a: Alloc | None) -> tuple | None:
    """An allocation as the tests compare it with memq_allocation: (pid, kind, addr, start)."""
    return None if a is None else (a.pid, a.mem, a.addr, a.start)


def _advice_copies(o: Oracle) -> list[Write]:
    return [w for w in o.writes if w.src is not None]


def advice_zero_content(o: Oracle, rows: list[dict], zero_fp: Callable[[str, int], int]) -> dict[tuple, dict]:
    out: dict[tuple, dict] = {}
    for w in _advice_copies(o):
        r = rows[w.index]
        mode = {1: "sampled", 2: "full"}.get(r.get("content_mode", 0))
        if w.src_hash is None or w.nbytes <= 0 or mode is None:
            continue
        if w.src_hash % (1 << 64) != zero_fp(mode, w.nbytes) % (1 << 64):  # signed or not, the same 64 bits
            continue
        key = (w.pid, _advice_ip(rows, w), w.api, w.direction, _advice_alloc_key(o.primary(w.pid, w.dst, w.begin)))
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


def advice_pinning(o: Oracle, rows: list[dict]) -> dict[tuple, dict]:
    rate: dict[tuple, list[int]] = defaultdict(lambda: [0, 0])
    groups: dict[tuple, list[Write]] = defaultdict(list)
    for w in _advice_copies(o):
        if w.direction != "HtoD" or w.nbytes <= 0:
            continue
        if not w.pageable:
            if w.end - w.begin > 0:
                rate[(w.pid, w.device)][0] += w.nbytes
                rate[(w.pid, w.device)][1] += w.end - w.begin
            continue
        src = o.primary(w.pid, w.src, w.begin)
        groups[(w.pid, _advice_alloc_key(src) if src else ("key", w.src_seq))].append(w)
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


def advice_sync_loop(o: Oracle, rows: list[dict]) -> dict[tuple, dict]:
    groups: dict[tuple, list[Write]] = defaultdict(list)
    for w in _advice_copies(o):
        blocking = "Async" not in w.api
        if w.nbytes <= 0 or not (blocking or (w.direction in ("HtoD", "DtoH") and w.pageable)):
            continue
        groups[(w.pid, w.tid, _advice_ip(rows, w), w.api, w.direction, w.nbytes)].append(w)
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


def _advice_extent(r: dict, side: str) -> int:
    """Bytes from a side's first byte to its last, plus one."""
    pitch = r.get("dpitch" if side == "dst" else "spitch", 0)
    if not (r.get("dpitch", 0) or r.get("spitch", 0)):
        return r["size"]
    slices = r.get("dslice" if side == "dst" else "sslice", 0)
    return (max(r.get("depth", 0), 1) - 1) * slices + (r["aux2"] - 1) * pitch + r["aux"]


def advice_pinned_oversize(o: Oracle, rows: list[dict]) -> dict[tuple, dict]:
    used: dict[int, list[int]] = defaultdict(list)  # Alloc.index -> [highest byte, copies]
    for w in _advice_copies(o):
        r = rows[w.index]
        for side, addr in (("dst", w.dst), ("src", w.src)):
            a = o.primary(w.pid, addr, w.begin)
            if a is not None and a.mem == "pinned":
                u = used.setdefault(a.index, [0, 0])
                u[0] = max(u[0], addr - a.addr + _advice_extent(r, side))
                u[1] += 1
    out = {}
    for a in o.allocs:
        if a.mem != "pinned":
            continue
        high, n = used.get(a.index, (0, 0))
        high = min(high, a.size)
        unused = a.size - high
        if unused >= a.size / 2 and unused >= _MiB:
            out[_advice_alloc_key(a)] = {"size": a.size, "used_bytes": high, "unused_bytes": unused, "copies": n}
    return out


def advice_pinned_churn(o: Oracle, rows: list[dict]) -> dict[tuple, dict]:
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


def advice_zero_bytes(o: Oracle, rows: list[dict]) -> dict[tuple, dict]:
    out: dict[tuple, dict] = {}
    for w in o.writes:
        if w.nbytes != 0:
            continue
        direction = "memset" if w.src is None else w.direction
        g = out.setdefault((w.pid, _advice_ip(rows, w), w.api, direction), {"count": 0, "dur_sum": 0})
        g["count"] += 1
        g["dur_sum"] += w.end - w.begin
    for g in out.values():
        g["gain_dur"] = g["dur_sum"]
    return out
