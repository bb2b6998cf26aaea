"""The live allocations a MemoryModel carries between batches, as sorted columns (model.py)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

NEVER = np.iinfo(np.int64).max  # `end` of an allocation still live
_COMPACT_MIN = 1 << 16  # live-set delta / deletions tolerated before a compaction, at least
_MERGE_ALL_FACTOR = 4  # a live set up to this many times a batch's entries is merged whole
_DENSE_RANGE = 1 << 16  # dense_ranks counts over a range of values up to this wide


@dataclass
class Allocs:
    """A set of allocations as columns (live ones carried between batches, or recently ended)."""

    pid: np.ndarray
    cls: np.ndarray
    addr: np.ndarray
    size: np.ndarray
    mem: np.ndarray
    device: np.ndarray
    alloc_id: np.ndarray
    start: np.ndarray  # ts of the allocating call's end
    end: np.ndarray  # begin of the freeing call (NEVER while live)
    tag: np.ndarray  # opaque per-allocation value set by the consumer (the writer: packet offset)
    row: np.ndarray  # row of the allocating event in the batch that created it (-1: earlier)

    FIELDS = ("pid", "cls", "addr", "size", "mem", "device", "alloc_id", "start", "end", "tag", "row")

    @classmethod
    def empty(cls) -> "Allocs":
        return cls(*(np.zeros(0, np.uint64 if f in ("addr", "size", "alloc_id") else np.int64) for f in cls.FIELDS))

    @classmethod
    def concat(cls, parts: list["Allocs"]) -> "Allocs":
        return cls(*(np.concatenate([getattr(p, f) for p in parts]) for f in cls.FIELDS))

    def __len__(self) -> int:
        return len(self.pid)


class LiveSet:
    """The live allocations, in (pid, class, address) order, as a large sorted base with deletion marks
    plus a small sorted delta; compacted when the delta or the deletions pass a quarter of the base.
    A batch then costs time in the allocations it touches, not in all that are live."""

    def __init__(self) -> None:
        self.base = Allocs.empty()
        self.base_space = np.zeros(0, np.int64)  # pid * 8 + cls of each base entry
        self.dead = np.zeros(0, bool)
        self.n_dead = 0
        self.delta = Allocs.empty()

    def take(self, pid: np.ndarray, cls: np.ndarray, addr: np.ndarray) -> Allocs:
        """Remove and return, in order, the live allocations at these (pid, cls, addr) keys.

        When few allocations are live, all of them are returned: merging them with the
        batch is cheaper than looking the keys up."""
        if len(self.base) - self.n_dead + len(self.delta) <= _MERGE_ALL_FACTOR * len(pid):
            if len(self.base) == 0:  # the delta alone is in order already
                everything, self.delta = self.delta, Allocs.empty()
                return everything
            everything = self.all()
            self.__init__()
            return take(everything, sort_by_space_addr(everything.pid, everything.cls, everything.addr))
        limit = max(_COMPACT_MIN, len(self.base) // 4)
        if len(self.delta) > limit or self.n_dead > limit:
            self._compact()
        q_space = pid * 8 + cls
        q_spaces = distinct(q_space)  # the same for both lookups
        hit = lookup(self.base_space, self.base.addr, q_space, addr, q_spaces)
        hit = hit[~self.dead[hit]]
        self.dead[hit] = True
        self.n_dead += len(hit)
        in_delta = lookup(self.delta.pid * 8 + self.delta.cls, self.delta.addr, q_space, addr, q_spaces)
        rest = np.ones(len(self.delta), bool)
        rest[in_delta] = False
        touched = Allocs.concat([take(self.base, hit), take(self.delta, in_delta)])
        self.delta = take(self.delta, np.flatnonzero(rest))
        return take(touched, sort_by_space_addr(touched.pid, touched.cls, touched.addr))

    def add(self, allocs: Allocs) -> None:
        """Add allocations that are live (in order; none of them at a key already live)."""
        if len(self.delta) == 0:
            self.delta = allocs
            return
        merged = Allocs.concat([self.delta, allocs])
        self.delta = take(merged, sort_by_space_addr(merged.pid, merged.cls, merged.addr))

    def take_process(self, pid: int) -> Allocs:
        """Remove and return every live allocation of process `pid` (a capture window closed: rare)."""
        everything = self.all()
        mine = everything.pid == pid
        self.__init__()
        if (~mine).any():
            rest = take(everything, np.flatnonzero(~mine))
            self.add(take(rest, sort_by_space_addr(rest.pid, rest.cls, rest.addr)))
        return take(everything, np.flatnonzero(mine))

    def all(self) -> Allocs:
        """Every live allocation (for the rare batches with copies)."""
        return Allocs.concat([take(self.base, np.flatnonzero(~self.dead)), self.delta])

    def _compact(self) -> None:
        merged = self.all()
        self.base = take(merged, sort_by_space_addr(merged.pid, merged.cls, merged.addr))
        self.base_space = self.base.pid * 8 + self.base.cls
        self.dead = np.zeros(len(self.base), bool)
        self.n_dead = 0
        self.delta = Allocs.empty()


def take(allocs: Allocs, index: np.ndarray) -> Allocs:
    return Allocs(*(getattr(allocs, f)[index] for f in Allocs.FIELDS))


def lookup(space: np.ndarray, addr: np.ndarray, q_space: np.ndarray, q_addr: np.ndarray,
           q_spaces: list[int]) -> np.ndarray:
    """Indices of the (space, addr)-sorted entries whose key is one of the queries (each once, in order);
    `q_spaces` are the distinct values of `q_space`."""
    if len(space) == 0 or len(q_space) == 0:
        return np.zeros(0, np.int64)
    hit = np.zeros(len(space), bool)  # marks, not np.unique: the same address may be queried twice
    for sp in q_spaces:
        lo, hi = np.searchsorted(space, sp, "left"), np.searchsorted(space, sp, "right")
        if lo == hi:
            continue
        want = q_addr if len(q_spaces) == 1 else q_addr[q_space == sp]
        pos = lo + np.searchsorted(addr[lo:hi], want)
        ok = pos < hi
        pos, want = pos[ok], want[ok]
        hit[pos[addr[pos] == want]] = True
    return np.flatnonzero(hit)


def distinct(key: np.ndarray) -> list[int]:
    """The distinct values of a pid * 8 + class column, in increasing order (usually one or a few)."""
    if len(key) == 0:
        return []
    lo, hi = int(key.min()), int(key.max())
    if lo == hi:
        return [lo]
    return np.unique(key).tolist()


def dense_ranks(key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(distinct values in increasing order, each entry's index in them) of an integer column: np.unique's
    answer with return_inverse. Process ids of one recording are close together, so a count over the
    range of the values gives it without np.unique's sort."""
    lo, hi = int(key.min()), int(key.max())
    if lo == hi:
        return key[:1], np.zeros(len(key), np.int64)
    if hi - lo < _DENSE_RANGE:
        used = np.bincount(key - lo, minlength=hi - lo + 1) > 0
        return np.flatnonzero(used) + lo, (np.cumsum(used) - 1)[key - lo]
    values, rank = np.unique(key, return_inverse=True)
    return values, rank.ravel()


def sort_by_space_addr(pid: np.ndarray, cls: np.ndarray, addr: np.ndarray) -> np.ndarray:
    """Stable order by (pid, cls, addr); the input is already in event order within a key."""
    if len(pid) == 0:
        return np.zeros(0, np.int64)
    spaces, space = dense_ranks(pid * 8 + cls)
    if len(spaces) < (1 << 15) and int(addr.max()) < (1 << 48):
        return np.argsort((space.astype(np.uint64) << np.uint64(48)) | addr, kind="stable")
    return np.lexsort((addr, space))
