"""Step series of memq report's headline and plots: a counter's samples (each value holds from its time until the
next sample; 0 before the first), as numpy arrays, and what the page takes from them (sums, peaks, means, and per
column of a plot the values a column's samples take).

A 30-second copy loop has 10^5-10^6 samples; summed and reduced here they cost milliseconds where one Python tuple
per sample cost seconds.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np


@dataclass(frozen=True)
class Series:
    """Samples in time order: `ts` and the `value` from then on (int64 arrays of one length)."""

    ts: np.ndarray
    value: np.ndarray

    @classmethod
    def of(cls, ts: Any, value: Any) -> "Series":
        return cls(np.asarray(ts, dtype=np.int64), np.asarray(value, dtype=np.int64))

    @classmethod
    def from_pairs(cls, pairs: list[tuple[int, int]]) -> "Series":
        """(ts, value) pairs in time order."""
        return cls.of([t for t, _ in pairs], [v for _, v in pairs])

    def __len__(self) -> int:
        return len(self.ts)

    def __iter__(self) -> Iterator[tuple[int, int]]:
        return zip(self.ts.tolist(), self.value.tolist())


EMPTY = Series.of([], [])


def query_arrays(engine: Any, modules: tuple[str, ...], sql: str) -> list[Any]:
    """The columns of a query of integers and strings (no NULL), decoded in bulk (Rows.arrays): a column of
    integers as an int64 array, of strings as a list."""
    from ctf2perfetto.analysis.base import module_rows
    from ctf2perfetto.engine.rows import is_null

    rows = module_rows(engine, modules, sql)
    found = rows.arrays()
    if found is None:  # a NULL or a float among the values: cell by cell
        cols = list(zip(*rows.rows)) or [()] * len(rows.columns)
        found = [list(c) if any(isinstance(v, str) for v in c) else np.asarray([0 if is_null(v) else int(v) for v in c],
                                                                        dtype=np.int64)
                 for c in cols]
    return found


def run_starts(keys: np.ndarray) -> np.ndarray:
    """Where each run of equal neighbouring `keys` starts (indices; none for no keys)."""
    if not len(keys):
        return np.zeros(0, dtype=np.int64)
    return np.concatenate(([0], np.flatnonzero(keys[1:] != keys[:-1]) + 1))


def _by_run(keys: np.ndarray, ts: np.ndarray, value: np.ndarray) -> list[tuple[Any, Series]]:
    """(key, series) of each run of one key, in order."""
    starts = run_starts(keys)
    ends = np.append(starts[1:], len(ts))
    return [(keys[a].item(), Series(ts[a:b], value[a:b])) for a, b in zip(starts.tolist(), ends.tolist())]


def split_runs(keys: Any, ts: np.ndarray, value: np.ndarray) -> dict[Any, Series]:
    """Rows in runs of one key each (a query ordered by the key, then time) as a series per key, in run order."""
    return dict(_by_run(np.asarray(keys), ts, value))


def group_by(keys: np.ndarray, ts: np.ndarray, value: np.ndarray) -> dict[int, Series]:
    """Rows in time order with an integer key each (a counter track) as a series per key, in key order."""
    order = np.argsort(keys, kind="stable")
    return {int(k): series for k, series in _by_run(keys[order], ts[order], value[order])}


def changes_sum(ts: np.ndarray, delta: np.ndarray) -> Series:
    """The series of changes (`delta` from `ts` on), from 0: one sample per distinct time."""
    if not len(ts):
        return EMPTY
    order = np.argsort(ts, kind="stable")
    ts, delta = ts[order], delta[order]
    first = run_starts(ts)
    return Series(ts[first], np.cumsum(np.add.reduceat(delta, first)))


def series_sum(parts: list[Series]) -> Series:
    """The sum of step series."""
    parts = [p if isinstance(p, Series) else Series.from_pairs(list(p)) for p in parts]
    parts = [p for p in parts if len(p)]
    if not parts:
        return EMPTY
    return changes_sum(np.concatenate([p.ts for p in parts]),
                       np.concatenate([np.diff(p.value, prepend=0) for p in parts]))


def value_at(s: Series, ts: int) -> int:
    """The value `s` holds at `ts`."""
    i = int(np.searchsorted(s.ts, ts, side="right")) - 1
    return int(s.value[i]) if i >= 0 else 0


def series_peak(s: Series) -> tuple[int, int | None]:
    """The highest value and the first time it is reached; (0, None) when it never rises above 0."""
    if not len(s):
        return 0, None
    i = int(np.argmax(s.value))
    return (int(s.value[i]), int(s.ts[i])) if s.value[i] > 0 else (0, None)


def series_mean(s: Series, start: int, end: int) -> float:
    """The time-weighted mean over [start, end)."""
    if end <= start or not len(s):
        return 0.0
    lo = np.maximum(s.ts, start)
    hi = np.minimum(np.append(s.ts[1:], end), end)
    held = np.maximum(hi - lo, 0)
    # summed in order, as floats (np.cumsum adds one after the other, as a loop would)
    return float(np.cumsum(s.value.astype(np.float64) * held)[-1]) / (end - start)


@dataclass(frozen=True)
class Columns:
    """Per column of a plot that holds samples (`col`, in time order): the value held when it starts (`held`),
    the lowest and the highest value in it (`lo`, `hi`: of `held` and its samples), the value at its end (`last`),
    and the time-weighted mean over it (`mean`)."""

    col: np.ndarray
    held: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    last: np.ndarray
    mean: np.ndarray


def columns(s: Series, start: int, end: int, count: int) -> Columns:
    """`s` over [start, end) cut into `count` columns of equal time; only the columns holding a sample."""
    span = max(end - start, 1)
    col = np.clip((s.ts - start) * count // span, 0, count - 1)
    first = run_starts(col)
    lastidx = np.append(first[1:], len(col)) - 1
    held = np.where(first > 0, s.value[np.maximum(first - 1, 0)], 0)
    lo = np.minimum(np.minimum.reduceat(s.value, first), held) if len(first) else held
    hi = np.maximum(np.maximum.reduceat(s.value, first), held) if len(first) else held
    cols = col[first]
    # the mean: the integral of the steps over each column's time, from the integral up to each sample
    t0 = start + cols * span / count
    t1 = start + (cols + 1) * span / count
    ts = s.ts.astype(np.float64)
    v = s.value.astype(np.float64)
    upto = np.concatenate(([0.0], np.cumsum(v[:-1] * np.diff(ts)))) if len(ts) else ts

    def integral(t: np.ndarray) -> np.ndarray:
        i = np.searchsorted(s.ts, t, side="right") - 1
        at = np.maximum(i, 0)
        return np.where(i >= 0, upto[at] + v[at] * (t - ts[at]), 0.0)

    mean = (integral(t1) - integral(t0)) / np.maximum(t1 - t0, 1e-9)
    return Columns(cols, held, lo, hi, s.value[lastidx], mean)
