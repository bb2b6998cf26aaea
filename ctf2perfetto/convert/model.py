"""The memory model: allocations, frees, live bytes and copy endpoints, over batches.

`MemoryModel.process(batch)` turns one EventBatch into a `ModelBatch` (per-row
allocation ids, matched frees, counter samples, copy endpoints) and carries the
live allocations to the next batch, so memory grows with live allocations, not
with events. Everything is numpy over columns; GPU events (few) only add a small
per-copy search.

Rules (docs/DEFINITIONS.md, "Allocations" and "Live bytes"):
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
* Capture windows: a LIVE row starts an allocation that was live when its window
  opened (counted as `live_at_start`, not as an allocation made in the trace); when
  a process's window closes before it exits (`end_process`), all its live
  allocations end there: what happens to them outside the window is not recorded.
* Host heap blocks below the recording's threshold are no allocations: a
  HOST_SMALL row (one thread's totals since its previous one) moves the host
  live-bytes counter by bytes allocated minus bytes freed, at its time, and its
  counts go into ModelTotals.small_*.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from ctf2perfetto.events import HEAP_FREE_KINDS, HEAP_KINDS, EventBatch, EventKind, MemKind
from ctf2perfetto.convert.liveset import NEVER, Allocs, LiveSet, dense_ranks, sort_by_space_addr

# Address-space classes: which free can end an allocation.
CLS_HOST, CLS_DEVICE, CLS_PINNED, CLS_REGISTERED = 1, 2, 3, 4
# The allocation holding a byte (docs/DEFINITIONS.md, "Which allocation holds a byte"; the one
# rule, also sql/memq/mirrors.sql's and tests/oracle.py's): among the allocations live at the
# call's start that contain it, the most specific class first (a registered range holds libc
# blocks; a fake runtime's device memory is libc memory), then the latest started.
CLS_PRIORITY = (CLS_DEVICE, CLS_PINNED, CLS_REGISTERED, CLS_HOST)

# Counter kinds: (kind, pid) for the per-process ones, (DEVICE, device) for device memory (their track names:
# write/registry.py, from traceformat).
CNT_HOST, CNT_PINNED, CNT_REGISTERED, CNT_MANAGED, CNT_DEVICE = 0, 1, 2, 3, 4

# MemKind -> class / counter kind (index = MemKind value; UNKNOWN GPU memory counts as device).
_MEM_CLS = np.array([CLS_DEVICE, CLS_HOST, CLS_PINNED, CLS_REGISTERED, CLS_DEVICE, CLS_DEVICE], np.int64)
_MEM_CNT = np.array([CNT_DEVICE, CNT_HOST, CNT_PINNED, CNT_REGISTERED, CNT_DEVICE, CNT_MANAGED], np.int64)
_CNT_SHIFT = 40  # counter key = kind << 40 | pid-or-device


def counter_key(kind: int, owner: int) -> int:
    """Key of a live-bytes counter: (kind, pid) or (CNT_DEVICE, device)."""
    return (kind << _CNT_SHIFT) | (owner & ((1 << _CNT_SHIFT) - 1))


def split_counter_key(key: int) -> tuple[int, int]:
    owner = key & ((1 << _CNT_SHIFT) - 1)
    if owner >= 1 << (_CNT_SHIFT - 1):  # negative device / pid, sign-extend
        owner -= 1 << _CNT_SHIFT
    return key >> _CNT_SHIFT, owner


def kind_in(kind: np.ndarray, kinds: tuple[int, ...]) -> np.ndarray:
    """Boolean mask of rows whose EventKind is one of `kinds` (a table lookup, no sort)."""
    return _kind_table(tuple(kinds))[kind]


@lru_cache(maxsize=None)
def _kind_table(kinds: tuple[int, ...]) -> np.ndarray:
    table = np.zeros(256, bool)
    table[list(kinds)] = True
    return table


def _free_class(api_names: list[str]) -> np.ndarray:
    """api index -> class a GPU_FREE of that function ends (pinned frees vs the rest)."""
    pinned = [("HostFree" in n or "FreeHost" in n) for n in api_names]
    return np.where(np.array(pinned + [False], bool), CLS_PINNED, CLS_DEVICE).astype(np.int64)


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

    allocations: int = 0  # allocations made in the trace (LIVE rows not counted)
    live_at_start: int = 0  # allocations live when a capture window opened (LIVE rows)
    window_ended: int = 0  # live allocations ended by their window's close
    frees: int = 0  # calls that ended an allocation
    unmatched_frees: int = 0
    replaced: int = 0
    # Host blocks below the threshold (HOST_SMALL rows), summed: count and bytes allocated / freed.
    small_allocations: int = 0
    small_allocated_bytes: int = 0
    small_frees: int = 0
    small_freed_bytes: int = 0
    counters: dict[int, int] = field(default_factory=dict)  # counter key -> live bytes now


def _copy_rows(batch: EventBatch) -> np.ndarray:
    """Rows of the copies and sets that succeeded."""
    kind = batch["kind"]
    copies = kind_in(kind, (EventKind.GPU_COPY, EventKind.GPU_SET))
    if not copies.any():  # the common case (libc-only batches): skip the result column
        return np.zeros(0, np.int64)
    return np.flatnonzero(copies & (batch["result"] == 0))


class MemoryModel:
    """Carries live allocations and counters across batches (see module docstring)."""

    def __init__(self) -> None:
        self.live = LiveSet()
        self._recent: tuple[_Entries | None, np.ndarray] = (None, np.zeros(0, np.int64))
        self._recent_tags: np.ndarray | None = None
        self.next_id = 1
        self.totals = ModelTotals()

    # -- public ----------------------------------------------------------------------------
    def process(self, batch: EventBatch) -> ModelBatch:
        n = len(batch)
        if n == 0:
            z = np.zeros(0, np.int64)
            return ModelBatch(np.zeros(0, np.uint64), np.zeros(0, np.uint64), np.zeros(0, np.uint64),
                              np.zeros(0, bool), z, z, z, z,
                              endpoints=self._copy_endpoints(batch, _copy_rows(batch), Allocs.empty()))
        kind = batch["kind"]
        ptr, src, size, result = batch["ptr"], batch["src"], batch["size"], batch["result"]
        ts, begin, pid = batch["ts"], batch["begin"], batch["pid"]
        ok = result == 0
        # Only heap rows (most batches): every allocation and free is on the host heap, so the
        # GPU terms and the per-row memory kinds / classes below are constants.
        heap_only = int(kind.max()) < EventKind.GPU_ALLOC

        # -- which rows start / end an allocation, and in which space ----------------------
        is_realloc = kind == EventKind.REALLOC
        is_live = kind == EventKind.LIVE
        plain_alloc = kind_in(kind, (EventKind.MALLOC, EventKind.CALLOC, EventKind.MEMALIGN, EventKind.HOST_ALLOC))
        starts = (ptr != 0) & (plain_alloc | is_realloc | ((kind == EventKind.POSIX_MEMALIGN) & ok))
        ends = (kind_in(kind, HEAP_FREE_KINDS) & (ptr != 0)) | (is_realloc & (src != 0) & ((ptr != 0) | (size == 0)))
        end_addr = np.where(is_realloc, src, ptr)
        if heap_only:
            start_mem = np.full(n, MemKind.HOST, np.int64)
        else:
            starts |= (ptr != 0) & kind_in(kind, (EventKind.GPU_ALLOC, EventKind.GPU_REGISTER, EventKind.LIVE)) & ok
            ends |= kind_in(kind, (EventKind.GPU_FREE, EventKind.GPU_UNREGISTER)) & ok & (ptr != 0)
            start_mem = np.where(kind == EventKind.GPU_REGISTER, MemKind.REGISTERED, batch["mem"].astype(np.int64))
            start_mem = np.where(kind_in(kind, HEAP_KINDS), MemKind.HOST, start_mem)
            start_cls = _MEM_CLS[start_mem]
            end_cls = np.full(n, CLS_HOST, np.int64)
            gpu_free = kind == EventKind.GPU_FREE
            if gpu_free.any():
                end_cls[gpu_free] = _free_class(batch.api_names)[batch["api"][gpu_free]]
            end_cls[kind == EventKind.GPU_UNREGISTER] = CLS_REGISTERED

        srows = np.flatnonzero(starts)
        alloc_id = np.zeros(n, np.uint64)
        alloc_id[srows] = np.arange(self.next_id, self.next_id + len(srows), dtype=np.uint64)
        self.next_id += len(srows)

        # -- entries: carried live allocations (first), then per row its end (2r) and start (2r+1)
        order2 = np.flatnonzero(np.stack([ends, starts], axis=1).ravel())  # in row order
        erow = order2 >> 1
        e_is_start = (order2 & 1).astype(bool)
        b_pid = pid[erow]
        b_cls = np.full(len(erow), CLS_HOST, np.int64) if heap_only \
            else np.where(e_is_start, start_cls[erow], end_cls[erow])
        b_addr = np.where(e_is_start, ptr[erow], end_addr[erow])
        live = self.live.take(b_pid, b_cls, b_addr)  # only the live allocations this batch touches
        nl = len(live)
        ent_pid = np.concatenate([live.pid, b_pid])
        ent_cls = np.concatenate([live.cls, b_cls])
        ent_addr = np.concatenate([live.addr, b_addr])
        ent_start = np.concatenate([np.ones(nl, bool), e_is_start])
        ent_row = np.concatenate([np.full(nl, -1, np.int64), erow])
        perm = sort_by_space_addr(ent_pid, ent_cls, ent_addr)
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

        entries = _Entries(live, batch, perm, s_pid, s_cls, s_addr, s_start, s_row, closes_prev,
                           {"size": size, "mem": start_mem, "alloc_id": alloc_id})

        freed_alloc_id = np.zeros(n, np.uint64)
        unmatched = np.zeros(n, bool)
        e_idx = np.flatnonzero(~s_start)
        matched = closes_prev[e_idx]
        closed = e_idx[matched] - 1
        freed_alloc_id[s_row[e_idx[matched]]] = entries.column("alloc_id", closed)
        unmatched[s_row[e_idx[~matched]]] = True
        replaced = np.flatnonzero(s_start & closes_prev)
        replaced_alloc_id = np.zeros(n, np.uint64)
        replaced_alloc_id[s_row[replaced]] = entries.column("alloc_id", replaced - 1)

        # -- counters: +size at new starts, -size of the closed allocation at its closing entry ---
        new_start = np.flatnonzero(s_start & (perm >= nl))
        closing = np.flatnonzero(closes_prev)
        alloc_of = np.concatenate([new_start, closing - 1])
        d_row = s_row[np.concatenate([new_start, closing])]
        d_time = np.concatenate([ts[s_row[new_start]], entries.close_time(closing)])
        a_size = entries.column("size", alloc_of).astype(np.int64)
        d_delta = np.concatenate([a_size[:len(new_start)], -a_size[len(new_start):]])
        d_key = entries.counter_keys(alloc_of)
        small = np.flatnonzero(kind == EventKind.HOST_SMALL)
        if len(small):
            d_row, d_time, d_key, d_delta = self._small_blocks(batch, small, d_row, d_time, d_key, d_delta)
        samples = self._counter_samples(n, d_row, d_time, d_key, d_delta)

        # -- carried state ---------------------------------------------------------------------
        copy_rows = _copy_rows(batch)
        endpoints = self._copy_endpoints(
            batch, copy_rows,
            Allocs.concat([entries.allocs(np.flatnonzero(s_start)), self.live.all()]) if len(copy_rows)
            else Allocs.empty())
        self.live.add(entries.allocs(np.flatnonzero(s_start & last_in_group)))
        self._recent = (entries, np.flatnonzero(s_start & ~last_in_group))
        self._recent_tags = None

        t = self.totals
        n_live = int(np.count_nonzero(is_live[srows])) if not heap_only else 0
        t.allocations += len(srows) - n_live
        t.live_at_start += n_live
        t.frees += int(matched.sum())
        t.unmatched_frees += int((~matched).sum())
        t.replaced += len(replaced)
        return ModelBatch(alloc_id, freed_alloc_id, replaced_alloc_id, unmatched, *samples, endpoints=endpoints)

    def end_process(self, pid: int, ts: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """A capture window of `pid` closed at `ts` before the process exited: its live allocations end there.

        Returns the counter samples this makes (ts, counter key, value), one per counter.
        """
        ended = self.live.take_process(pid)
        self.totals.window_ended += len(ended)
        z = np.zeros(0, np.int64)
        if len(ended) == 0:
            return z, z, z
        kind = _MEM_CNT[ended.mem]
        owner = np.where(kind == CNT_DEVICE, ended.device, ended.pid)
        keys = (kind << _CNT_SHIFT) | (owner & ((1 << _CNT_SHIFT) - 1))
        uniq, inverse = np.unique(keys, return_inverse=True)
        drop = np.bincount(inverse.ravel(), weights=ended.size.astype(np.float64))
        values = []
        for key, d in zip(uniq.tolist(), np.rint(drop).astype(np.int64).tolist()):
            self.totals.counters[key] = self.totals.counters.get(key, 0) - d
            values.append(self.totals.counters[key])
        return np.full(len(uniq), ts, np.int64), uniq.astype(np.int64), np.array(values, np.int64)

    @property
    def recent(self) -> Allocs:
        """Allocations that ended in the previous batch (copies may start before their own row)."""
        entries, index = self._recent
        if entries is None:
            return Allocs.empty()
        allocs = entries.allocs(index)
        if self._recent_tags is not None:
            new = allocs.row >= 0
            allocs.tag[new] = self._recent_tags[allocs.row[new]]
            allocs.row[new] = -1
        return allocs

    def set_tags(self, row_tags: np.ndarray) -> None:
        """Attach a value per row of the last processed batch to the allocations it started."""
        delta = self.live.delta  # allocations of the last batch are in the delta until the next compaction
        new = delta.row >= 0
        delta.tag[new] = row_tags[delta.row[new]]
        delta.row[new] = -1
        self._recent_tags = row_tags

    # -- internals ---------------------------------------------------------------------------
    def _small_blocks(self, batch, rows, d_row, d_time, d_key, d_delta):
        """Adds the host counter changes of HOST_SMALL `rows` (bytes allocated - freed) to the
        allocation/free changes (d_*), and their counts to the totals."""
        alloc_bytes, freed_bytes = batch["size"][rows], batch["flags"][rows]
        t = self.totals
        t.small_allocations += int(batch["aux"][rows].sum())
        t.small_frees += int(batch["aux2"][rows].sum())
        t.small_allocated_bytes += int(alloc_bytes.sum())
        t.small_freed_bytes += int(freed_bytes.sum())
        delta = alloc_bytes.astype(np.int64) - freed_bytes.astype(np.int64)
        moves = delta != 0
        rows, delta = rows[moves], delta[moves]
        pid = batch["pid"][rows]
        key = (CNT_HOST << _CNT_SHIFT) | (pid & ((1 << _CNT_SHIFT) - 1))
        return (np.concatenate([d_row, rows]), np.concatenate([d_time, batch["ts"][rows]]),
                np.concatenate([d_key, key]), np.concatenate([d_delta, delta]))

    def _counter_samples(self, n, row, time, key, delta):
        """Absolute counter values after each (row, counter) that changed one, in time order.

        Per counter: net change per row (bincount over (counter, row) pairs), running sum from the
        carried value. Rows are in time order except where a call's start (a GPU free) precedes
        rows before it; only then is there a sort.
        """
        if len(key) == 0:
            z = np.zeros(0, np.int64)
            return z, z, z, z
        keys, rank = dense_ranks(key)
        pair = rank * n + row  # (counter, row), counter-major: each counter's rows in row order
        if len(keys) * n <= _DENSE_PAIRS:  # pairs index a dense array; the used ones are picked out
            size, slot = len(keys) * n, pair
            changed = pick = np.flatnonzero(np.bincount(pair, minlength=size))
        else:  # many counters in one batch (a job's processes): the pairs numbered by a sort instead
            changed, slot = np.unique(pair, return_inverse=True)
            size, slot, pick = len(changed), slot.ravel(), slice(None)
        at = np.zeros(size, np.int64)
        at[slot] = time  # one time per (row, counter): a call's end for starts, its start for frees
        when = at[pick]
        # float64 sums are exact here: a row changes a counter by at most three sizes < 2**50
        step = np.rint(np.bincount(slot, weights=delta, minlength=size)[pick]).astype(np.int64)
        counter, out_row = changed // n, changed % n
        first = np.flatnonzero(np.r_[True, counter[1:] != counter[:-1]])  # each counter's first sample
        back = (when[1:] < when[:-1]) & (counter[1:] == counter[:-1])
        if back.any():  # a counter's samples by time, then row
            order = np.lexsort((out_row, when, counter))
            out_row, when, step = out_row[order], when[order], step[order]
        total = np.cumsum(step)
        carried = np.array([self.totals.counters.get(k, 0) for k in keys[counter[first]].tolist()], np.int64)
        before = np.r_[0, total[first[1:] - 1]]  # the running sum where each counter's samples start
        value = total + np.repeat(carried - before, np.diff(np.r_[first, len(total)]))
        last = np.r_[first[1:], len(total)] - 1
        for k, v in zip(keys[counter[first]].tolist(), value[last].tolist()):
            self.totals.counters[k] = v
        out_key = keys[counter].astype(np.int64)
        if len(keys) > 1:
            order = np.lexsort((out_row, when))
            out_row, when, out_key, value = out_row[order], when[order], out_key[order], value[order]
        return out_row, when, out_key, value

    def _copy_endpoints(self, batch: EventBatch, rows: np.ndarray, allocs: Allocs) -> dict[str, np.ndarray]:
        """For each successful copy/set row (`rows`): the allocation live at its start holding src / dst."""
        kind = batch["kind"]
        out: dict[str, np.ndarray] = {"row": rows}
        recent = self.recent if len(rows) else Allocs.empty()
        pool = Allocs.concat([allocs, recent]) if len(recent) else allocs
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



_DENSE_PAIRS = 1 << 22  # (counter, row) pairs of a batch counted in a dense array up to this many


class _Entries:
    """Allocation starts and ends of one batch, merged with the carried live allocations and
    sorted by (pid, class, address, event order). Columns of the allocation an entry describes
    are gathered on demand, for the entries that need them."""

    def __init__(self, live: Allocs, batch: EventBatch, perm, pid, cls, addr, is_start, row, closes_prev,
                 row_columns: dict[str, np.ndarray]) -> None:
        self.live, self.batch, self.perm = live, batch, perm
        self.pid, self.cls, self.addr, self.is_start, self.row = pid, cls, addr, is_start, row
        self.closes_prev = closes_prev
        self.row_columns = row_columns

    def column(self, name: str, index: np.ndarray, where: _Where | None = None) -> np.ndarray:
        """Column `name` (size, mem, device, alloc_id, start) of the allocations started by entries `index`
        (`where`: their _Where, when several columns of the same entries are gathered)."""
        if where is None:
            where = self.where(index)
        if name in self.row_columns:
            rows = self.row_columns[name]
        elif name == "device":
            rows = self.batch["device"]
        else:  # start
            rows = self.batch["ts"]
        out = rows[where.row].astype(getattr(self.live, name).dtype, copy=False)  # a gather: a new array already
        if where.live is not None:
            out[where.from_live] = getattr(self.live, name)[where.live]
        return out

    def where(self, index: np.ndarray) -> _Where:
        """Where the columns of the allocations started by entries `index` come from."""
        from_live = self.perm[index] < len(self.live)
        live = self.perm[index[from_live]] if from_live.any() else None
        return _Where(np.maximum(self.row[index], 0), from_live, live)

    def close_time(self, index: np.ndarray) -> np.ndarray:
        """When entries `index` end the allocation before them: a free at its call's start, a start at its end."""
        rows = self.row[index]
        return np.where(self.is_start[index], self.batch["ts"][rows], self.batch["begin"][rows])

    def counter_keys(self, index: np.ndarray) -> np.ndarray:
        if (self.cls[index] == CLS_HOST).all():  # host-heap allocations only (their memory is always HOST)
            return (CNT_HOST << _CNT_SHIFT) | (self.pid[index] & ((1 << _CNT_SHIFT) - 1))
        kind = _MEM_CNT[self.column("mem", index)]
        if (kind == CNT_HOST).all():
            owner = self.pid[index]
        else:
            owner = np.where(kind == CNT_DEVICE, self.column("device", index), self.pid[index])
        return (kind << _CNT_SHIFT) | (owner & ((1 << _CNT_SHIFT) - 1))

    def allocs(self, index: np.ndarray) -> Allocs:
        """The allocations started by entries `index`, with their end where a later entry ends them."""
        end = np.full(len(index), NEVER, np.int64)
        nxt = index + 1
        closed = nxt < len(self.perm)
        closed[closed] = self.closes_prev[nxt[closed]]
        end[closed] = self.close_time(nxt[closed])
        where = self.where(index)
        tag = np.zeros(len(index), np.int64)
        if where.live is not None:
            tag[where.from_live] = self.live.tag[where.live]
        row = np.where(where.from_live, -1, self.row[index])
        size, mem, device, alloc_id, start = (self.column(name, index, where)
                                              for name in ("size", "mem", "device", "alloc_id", "start"))
        return Allocs(self.pid[index], self.cls[index], self.addr[index], size, mem, device, alloc_id, start, end,
                      tag, row)


@dataclass
class _Where:
    """Where the columns of some entries' allocations come from: a row of the batch (`row`) or, where
    `from_live`, the carried live allocation `live` (None when none is)."""

    row: np.ndarray
    from_live: np.ndarray
    live: np.ndarray | None


def _find_containing(pool: Allocs, pid: np.ndarray, addr: np.ndarray, when: np.ndarray) -> dict[str, np.ndarray]:
    """Per query: the allocation of `pool` live at `when` in process `pid` holding byte `addr`.

    The first class of CLS_PRIORITY with one wins; within a class, the latest started (the later
    id on a tie), as memq.mirrors picks a primary allocation. Queries are answered per distinct
    address: the allocations holding it are found once, then each query's one by its time (a
    buffer reused at one address over a long batch is thousands of allocations there, so a
    per-query scan would be quadratic).
    """
    q = len(pid)
    res = {
        "alloc_id": np.zeros(q, np.uint64),
        "mem": np.zeros(q, np.int64),
        "alloc_row": np.full(q, -1, np.int64),
        "alloc_tag": np.zeros(q, np.int64),
    }
    if q == 0 or len(pool) == 0:
        return res
    found = np.full(q, -1, np.int64)  # pool index per query
    for cls in CLS_PRIORITY:
        for p in np.unique(pid[found < 0]).tolist():
            sel = np.flatnonzero((pool.pid == p) & (pool.cls == cls))
            if len(sel) == 0:
                continue
            sel = sel[np.argsort(pool.addr[sel], kind="stable")]
            a0 = pool.addr[sel]
            reach = np.maximum.accumulate(a0 + pool.size[sel])  # furthest byte reached so far
            queries = np.flatnonzero((pid == p) & (found < 0))
            addresses, group = np.unique(addr[queries], return_inverse=True)
            for g, a in enumerate(addresses.tolist()):
                a = np.uint64(a)
                hi = int(np.searchsorted(a0, a, side="right"))
                lo = int(np.searchsorted(reach, a, side="right"))
                if lo >= hi:
                    continue
                win = sel[lo:hi]
                win = win[pool.addr[win] + pool.size[win] > a]  # every allocation ever holding byte a
                if len(win) == 0:
                    continue
                win = win[np.lexsort((pool.alloc_id[win], pool.start[win]))]  # by start, then id
                starts, ends = pool.start[win], pool.end[win]
                mine = queries[group.ravel() == g]
                t = when[mine]
                last = np.searchsorted(starts, t, side="right") - 1  # latest started by then
                ok = last >= 0
                live = np.zeros(len(mine), bool)
                live[ok] = ends[last[ok]] > t[ok]
                found[mine[live]] = win[last[live]]
                for i in np.flatnonzero(ok & ~live).tolist():  # ended: an earlier one may still be live
                    alive = np.flatnonzero(ends[:last[i]] > t[i])
                    if len(alive):
                        found[mine[i]] = win[alive[-1]]
    hit = found >= 0
    j = found[hit]
    res["alloc_id"][hit] = pool.alloc_id[j]
    res["mem"][hit] = pool.mem[j]
    res["alloc_row"][hit] = pool.row[j]
    res["alloc_tag"][hit] = pool.tag[j]
    return res
