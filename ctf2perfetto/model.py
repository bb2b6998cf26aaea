"""The memory model: allocations, frees, live bytes and copy endpoints, over batches.

`MemoryModel.process(batch)` turns one EventBatch into a `ModelBatch` (per-row
allocation ids, matched frees, counter samples, copy endpoints) and carries the
live allocations to the next batch, so memory grows with live allocations, not
with events. Everything is numpy over columns; GPU events (few) only add a small
per-copy search.

Rules (DESIGN.md, "What the numbers mean"):
* An allocation lives in one address space: (pid, class), where the class says
  which free can end it: libc free -> libc heap; hipFree/cudaFree -> device and
  managed; hipHostFree/cudaFreeHost -> pinned; *Unregister -> registered.
* It lives from the end of its allocating call (`ts`) to the start of its freeing
  call (`begin`). realloc ends the old allocation and starts a new one, even in
  place; realloc(NULL, n) only starts; realloc(p, 0) only ends.
* free(NULL) does nothing; a free that matches no live allocation changes nothing
  and is counted as unmatched; failed calls (result != 0, NULL pointer) allocate
  and free nothing.
* An allocation starting where a live one of the same space starts (the trace
  lost its free) ends the old one, so the counters never hold unreachable bytes;
  these are counted as `replaced`.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .events import HEAP_KINDS, EventBatch, EventKind, MemKind

# Address-space classes: which free can end an allocation.
CLS_HOST, CLS_DEVICE, CLS_PINNED, CLS_REGISTERED = 1, 2, 3, 4
# Copy endpoints prefer the more specific memory when two classes overlap
# (a registered range holds libc blocks; a fake runtime's device memory is libc memory).
CLS_PRIORITY = (CLS_DEVICE, CLS_PINNED, CLS_REGISTERED, CLS_HOST)

# Counter kinds: (kind, pid) for the per-process ones, (DEVICE, device) for device memory.
CNT_HOST, CNT_PINNED, CNT_REGISTERED, CNT_MANAGED, CNT_DEVICE = 0, 1, 2, 3, 4
COUNTER_NAMES = {
    CNT_HOST: "Host heap live bytes",
    CNT_PINNED: "Pinned live bytes",
    CNT_REGISTERED: "Registered live bytes",
    CNT_MANAGED: "Managed live bytes",
}

# MemKind -> class / counter kind (index = MemKind value; UNKNOWN GPU memory counts as device).
_MEM_CLS = np.array([CLS_DEVICE, CLS_HOST, CLS_PINNED, CLS_REGISTERED, CLS_DEVICE, CLS_DEVICE], np.int64)
_MEM_CNT = np.array([CNT_DEVICE, CNT_HOST, CNT_PINNED, CNT_REGISTERED, CNT_DEVICE, CNT_MANAGED], np.int64)
_NEVER = np.iinfo(np.int64).max
_CNT_SHIFT = 40  # counter key = kind << 40 | pid-or-device


def counter_key(kind: int, owner: int) -> int:
    """Key of a live-bytes counter: (kind, pid) or (CNT_DEVICE, device)."""
    return (kind << _CNT_SHIFT) | (owner & ((1 << _CNT_SHIFT) - 1))


def split_counter_key(key: int) -> tuple[int, int]:
    owner = key & ((1 << _CNT_SHIFT) - 1)
    if owner >= 1 << (_CNT_SHIFT - 1):  # negative device / pid, sign-extend
        owner -= 1 << _CNT_SHIFT
    return key >> _CNT_SHIFT, owner


def _free_class(api_names: list[str]) -> np.ndarray:
    """api index -> class a GPU_FREE of that function ends (pinned frees vs the rest)."""
    pinned = [("HostFree" in n or "FreeHost" in n) for n in api_names]
    return np.where(np.array(pinned + [False], bool), CLS_PINNED, CLS_DEVICE).astype(np.int64)


@dataclass
class _Allocs:
    """A set of allocations as columns (live ones carried between batches, or recently ended)."""

    pid: np.ndarray
    cls: np.ndarray
    addr: np.ndarray
    size: np.ndarray
    mem: np.ndarray
    device: np.ndarray
    alloc_id: np.ndarray
    start: np.ndarray  # ts of the allocating call's end
    end: np.ndarray  # begin of the freeing call (_NEVER while live)
    tag: np.ndarray  # opaque per-allocation value set by the consumer (the writer: packet offset)
    row: np.ndarray  # row of the allocating event in the batch that created it (-1: earlier)

    FIELDS = ("pid", "cls", "addr", "size", "mem", "device", "alloc_id", "start", "end", "tag", "row")

    @classmethod
    def empty(cls) -> "_Allocs":
        return cls(*(np.zeros(0, np.uint64 if f in ("addr", "size", "alloc_id") else np.int64) for f in cls.FIELDS))

    def take(self, index: np.ndarray) -> "_Allocs":
        return _Allocs(*(getattr(self, f)[index] for f in self.FIELDS))

    @classmethod
    def concat(cls, parts: list["_Allocs"]) -> "_Allocs":
        return cls(*(np.concatenate([getattr(p, f) for p in parts]) for f in cls.FIELDS))

    def __len__(self) -> int:
        return len(self.pid)


@dataclass
class ModelBatch:
    """What the model adds to one EventBatch (row-aligned arrays, 0 / -1 where not applicable)."""

    alloc_id: np.ndarray  # uint64: allocation this row starts
    freed_alloc_id: np.ndarray  # uint64: allocation this row ends
    replaced_alloc_id: np.ndarray  # uint64: live allocation at the address this row allocates (free not traced)
    unmatched: np.ndarray  # bool: a non-NULL free/realloc pointer that matched nothing
    # Counter samples, in time order: the value of counter `counter_key` after row `row`,
    # effective at `ts` (an allocation counts from its call's end, a free from its call's start).
    sample_row: np.ndarray
    sample_ts: np.ndarray
    sample_key: np.ndarray
    sample_value: np.ndarray
    # Copy / set endpoints (rows of GPU_COPY / GPU_SET that succeeded), per endpoint prefix src_/dst_:
    # alloc id (0 untracked), MemKind (0 untracked), row of the allocating event in this batch (-1 if
    # earlier) and the tag of an earlier allocation.
    endpoints: dict[str, np.ndarray] = field(default_factory=dict)


@dataclass
class ModelTotals:
    """Counts over the whole trace so far."""

    allocations: int = 0
    frees: int = 0  # calls that ended an allocation
    unmatched_frees: int = 0
    replaced: int = 0
    counters: dict[int, int] = field(default_factory=dict)  # counter key -> live bytes now


class MemoryModel:
    """Carries live allocations and counters across batches (see module docstring)."""

    def __init__(self) -> None:
        self.live = _Allocs.empty()  # sorted by (pid, cls, addr)
        self.recent = _Allocs.empty()  # ended in the previous batch: copies may start before their row
        self.next_id = 1
        self.totals = ModelTotals()

    # -- public ----------------------------------------------------------------------------
    def process(self, batch: EventBatch) -> ModelBatch:
        n = len(batch)
        if n == 0:
            z = np.zeros(0, np.int64)
            return ModelBatch(np.zeros(0, np.uint64), np.zeros(0, np.uint64), np.zeros(0, np.uint64),
                              np.zeros(0, bool), z, z, z, z,
                              endpoints=self._copy_endpoints(batch, _Allocs.empty()))
        kind = batch["kind"]
        ptr, src, size, result = batch["ptr"], batch["src"], batch["size"], batch["result"]
        ts, begin, pid = batch["ts"], batch["begin"], batch["pid"]
        mem = batch["mem"].astype(np.int64)
        ok = result == 0

        # -- which rows start / end an allocation, and in which space ----------------------
        is_realloc = kind == EventKind.REALLOC
        plain_alloc = np.isin(kind, (EventKind.MALLOC, EventKind.CALLOC, EventKind.MEMALIGN))
        starts = (ptr != 0) & (
            plain_alloc
            | is_realloc
            | ((kind == EventKind.POSIX_MEMALIGN) & ok)
            | (np.isin(kind, (EventKind.GPU_ALLOC, EventKind.GPU_REGISTER)) & ok)
        )
        ends = (
            ((kind == EventKind.FREE) & (ptr != 0))
            | (is_realloc & (src != 0) & ((ptr != 0) | (size == 0)))
            | (np.isin(kind, (EventKind.GPU_FREE, EventKind.GPU_UNREGISTER)) & ok & (ptr != 0))
        )
        start_mem = np.where(kind == EventKind.GPU_REGISTER, MemKind.REGISTERED, mem)
        start_mem = np.where(np.isin(kind, HEAP_KINDS), MemKind.HOST, start_mem)
        start_cls = _MEM_CLS[start_mem]
        end_cls = np.full(n, CLS_HOST, np.int64)
        gpu_free = kind == EventKind.GPU_FREE
        if gpu_free.any():
            end_cls[gpu_free] = _free_class(batch.api_names)[batch["api"][gpu_free]]
        end_cls[kind == EventKind.GPU_UNREGISTER] = CLS_REGISTERED
        end_addr = np.where(is_realloc, src, ptr)

        srows = np.flatnonzero(starts)
        alloc_id = np.zeros(n, np.uint64)
        alloc_id[srows] = np.arange(self.next_id, self.next_id + len(srows), dtype=np.uint64)
        self.next_id += len(srows)

        # -- entries: carried live allocations (first), then per row its end (2r) and start (2r+1)
        order2 = np.flatnonzero(np.stack([ends, starts], axis=1).ravel())  # in row order
        erow = order2 >> 1
        e_is_start = (order2 & 1).astype(bool)
        live = self.live
        nl = len(live)
        ent_pid = np.concatenate([live.pid, pid[erow]])
        ent_cls = np.concatenate([live.cls, np.where(e_is_start, start_cls[erow], end_cls[erow])])
        ent_addr = np.concatenate([live.addr, np.where(e_is_start, ptr[erow], end_addr[erow])])
        ent_start = np.concatenate([np.ones(nl, bool), e_is_start])
        ent_row = np.concatenate([np.full(nl, -1, np.int64), erow])
        perm = _sort_by_space_addr(ent_pid, ent_cls, ent_addr)
        s_pid, s_cls, s_addr = ent_pid[perm], ent_cls[perm], ent_addr[perm]
        s_start, s_row = ent_start[perm], ent_row[perm]
        m = len(perm)
        same_prev = np.zeros(m, bool)
        if m > 1:
            same_prev[1:] = (s_pid[1:] == s_pid[:-1]) & (s_cls[1:] == s_cls[:-1]) & (s_addr[1:] == s_addr[:-1])
        prev_start = np.zeros(m, bool)
        prev_start[1:] = s_start[:-1]
        closes_prev = same_prev & prev_start  # this entry ends the allocation entry i-1 started
        last_in_group = np.ones(m, bool)
        last_in_group[:-1] = ~same_prev[1:]

        # Columns of the allocation each start entry describes (carried ones come from `live`).
        src_live = perm < nl
        a_idx = np.where(src_live, perm, 0)
        a_row = np.where(src_live, -1, s_row)
        r_safe = np.maximum(s_row, 0)
        a_size = np.where(src_live, live.size[a_idx] if nl else 0, size[r_safe])
        a_mem = np.where(src_live, live.mem[a_idx] if nl else 0, start_mem[r_safe])
        a_dev = np.where(src_live, live.device[a_idx] if nl else 0, batch["device"][r_safe].astype(np.int64))
        a_id = np.where(src_live, live.alloc_id[a_idx] if nl else 0, alloc_id[r_safe])
        a_start = np.where(src_live, live.start[a_idx] if nl else 0, ts[r_safe])
        a_tag = np.where(src_live, live.tag[a_idx] if nl else 0, 0)
        # When the entry closing allocation i-1 happens: a free at its call's start, a replacing start at its end.
        close_time = np.where(s_start, ts[r_safe], begin[r_safe])
        a_end = np.full(m, _NEVER, np.int64)
        closed_by_next = np.zeros(m, bool)
        closed_by_next[:-1] = closes_prev[1:]
        a_end[:-1] = np.where(closed_by_next[:-1], close_time[1:], _NEVER)

        freed_alloc_id = np.zeros(n, np.uint64)
        unmatched = np.zeros(n, bool)
        e_idx = np.flatnonzero(~s_start)
        matched = closes_prev[e_idx]
        freed_alloc_id[s_row[e_idx[matched]]] = a_id[e_idx[matched] - 1]
        unmatched[s_row[e_idx[~matched]]] = True
        replaced = s_start & closes_prev
        replaced_alloc_id = np.zeros(n, np.uint64)
        replaced_alloc_id[s_row[replaced]] = a_id[np.flatnonzero(replaced) - 1]

        # -- counters: +size at starts, -size of the closed allocation at its closing entry ---
        new_start = s_start & ~src_live
        closing = np.flatnonzero(closes_prev)
        d_idx = np.concatenate([np.flatnonzero(new_start), closing])
        alloc_of = np.concatenate([np.flatnonzero(new_start), closing - 1])
        d_row = s_row[d_idx]
        d_time = np.concatenate([ts[s_row[new_start]], close_time[closing]])
        d_delta = np.concatenate([a_size[new_start].astype(np.int64), -a_size[closing - 1].astype(np.int64)])
        d_kind = _MEM_CNT[a_mem[alloc_of]]
        d_owner = np.where(d_kind == CNT_DEVICE, a_dev[alloc_of], s_pid[alloc_of])
        d_key = (d_kind << _CNT_SHIFT) | (d_owner & ((1 << _CNT_SHIFT) - 1))
        samples = self._counter_samples(d_row, d_time, d_key, d_delta)

        # -- carried state ---------------------------------------------------------------------
        allocs = _Allocs(s_pid, s_cls, s_addr, a_size, a_mem, a_dev, a_id, a_start, a_end, a_tag, a_row)
        is_alloc = np.flatnonzero(s_start)
        candidates = allocs.take(is_alloc)
        endpoints = self._copy_endpoints(batch, candidates)
        keep_live = s_start & last_in_group
        self.live = allocs.take(np.flatnonzero(keep_live))
        self.recent = allocs.take(np.flatnonzero(s_start & ~last_in_group))

        t = self.totals
        t.allocations += len(srows)
        t.frees += int(matched.sum())
        t.unmatched_frees += int((~matched).sum())
        t.replaced += int(replaced.sum())
        return ModelBatch(alloc_id, freed_alloc_id, replaced_alloc_id, unmatched, *samples, endpoints=endpoints)

    def set_tags(self, row_tags: np.ndarray) -> None:
        """Attach a value per row of the last processed batch to the allocations it started."""
        for allocs in (self.live, self.recent):
            new = allocs.row >= 0
            allocs.tag[new] = row_tags[allocs.row[new]]
            allocs.row[new] = -1

    # -- internals ---------------------------------------------------------------------------
    def _counter_samples(self, row, time, key, delta):
        """Absolute counter values after each (row, counter) that changed one, in time order."""
        if len(row) == 0:
            z = np.zeros(0, np.int64)
            return z, z, z, z
        order = np.lexsort((row, time, key))
        key, row, time, delta = key[order], row[order], time[order], delta[order]
        seg_start = np.ones(len(key), bool)
        seg_start[1:] = key[1:] != key[:-1]
        uniq = key[seg_start]
        base = np.array([self.totals.counters.get(int(k), 0) for k in uniq], np.int64)
        csum = np.cumsum(delta)
        seg_id = np.cumsum(seg_start) - 1
        seg_offset = (csum - delta)[seg_start]  # cumsum before each segment
        value = csum - seg_offset[seg_id] + base[seg_id]
        seg_end = np.flatnonzero(np.r_[seg_start[1:], True])
        for k, v in zip(uniq.tolist(), value[seg_end].tolist()):
            self.totals.counters[k] = v
        # one sample per (counter, row): the last value
        last = np.ones(len(key), bool)
        last[:-1] = (key[1:] != key[:-1]) | (row[1:] != row[:-1])
        key, row, time, value = key[last], row[last], time[last], value[last]
        out = np.lexsort((row, time))
        return row[out], time[out], key[out], value[out]

    def _copy_endpoints(self, batch: EventBatch, allocs: _Allocs) -> dict[str, np.ndarray]:
        """For each successful copy/set row: the allocation live at its start holding src / dst."""
        kind = batch["kind"]
        rows = np.flatnonzero(np.isin(kind, (EventKind.GPU_COPY, EventKind.GPU_SET)) & (batch["result"] == 0))
        out: dict[str, np.ndarray] = {"row": rows}
        pool = _Allocs.concat([allocs, self.recent]) if len(self.recent) else allocs
        for side, col in (("dst", "ptr"), ("src", "src")):
            query = rows if side == "dst" else rows[kind[rows] == EventKind.GPU_COPY]
            found = _find_containing(pool, batch["pid"][query], batch[col][query], batch["begin"][query])
            res = {k: np.zeros(len(rows), v.dtype) for k, v in found.items()}
            pos = np.searchsorted(rows, query)
            for k, v in found.items():
                res[k][pos] = v
            res["alloc_row"][np.setdiff1d(np.arange(len(rows)), pos)] = -1
            for k, v in res.items():
                out[f"{side}_{k}"] = v
        return out



def _sort_by_space_addr(pid: np.ndarray, cls: np.ndarray, addr: np.ndarray) -> np.ndarray:
    """Stable order by (pid, cls, addr); the input is already in event order within a key."""
    if len(pid) == 0:
        return np.zeros(0, np.int64)
    spaces, space = np.unique(pid * 8 + cls, return_inverse=True)
    if len(spaces) < (1 << 15) and int(addr.max()) < (1 << 48):
        return np.argsort((space.astype(np.uint64) << np.uint64(48)) | addr, kind="stable")
    return np.lexsort((addr, space))


def _find_containing(pool: _Allocs, pid: np.ndarray, addr: np.ndarray, when: np.ndarray) -> dict[str, np.ndarray]:
    """Per query: the allocation of `pool` live at `when` in process `pid` holding byte `addr`."""
    q = len(pid)
    res = {
        "alloc_id": np.zeros(q, np.uint64),
        "mem": np.zeros(q, np.int64),
        "alloc_row": np.full(q, -1, np.int64),
        "alloc_tag": np.zeros(q, np.int64),
    }
    if q == 0 or len(pool) == 0:
        return res
    found = np.zeros(q, bool)
    for cls in CLS_PRIORITY:
        for p in np.unique(pid[~found]).tolist():
            sel = np.flatnonzero((pool.pid == p) & (pool.cls == cls))
            if len(sel) == 0:
                continue
            sel = sel[np.argsort(pool.addr[sel], kind="stable")]
            a0 = pool.addr[sel]
            reach = np.maximum.accumulate(a0 + pool.size[sel])  # furthest byte reached so far
            for qi in np.flatnonzero((pid == p) & ~found).tolist():
                a = np.uint64(addr[qi])
                hi = int(np.searchsorted(a0, a, side="right"))
                lo = int(np.searchsorted(reach, a, side="right"))
                if lo >= hi:
                    continue
                win = sel[lo:hi]
                hit = (pool.addr[win] + pool.size[win] > a) & (pool.start[win] <= when[qi]) & (pool.end[win] > when[qi])
                if hit.any():
                    j = win[np.flatnonzero(hit)[-1]]
                    found[qi] = True
                    res["alloc_id"][qi] = pool.alloc_id[j]
                    res["mem"][qi] = pool.mem[j]
                    res["alloc_row"][qi] = pool.row[j]
                    res["alloc_tag"][qi] = pool.tag[j]
    return res
