"""Speed of the memq analyses against the time to load the trace (goal: each <= 2x load).

Generates a trace with N heap events (malloc/free pairs, no address reuse) and C copies
between 1,000 host buffers and 1,000 device buffers (HtoD and DtoH, random pairs, so
many repeats and round trips), plus memsets, written with write_trace. Then, for each
analysis, a fresh engine loads the trace (timed) and runs the analysis (timed), so
no analysis profits from tables another one built.

    python3 bench/analyses_speed.py                    # 10M heap events, 100k copies
    python3 bench/analyses_speed.py --heap 1000000 --copies 10000
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from ctf2perfetto import analyses
from ctf2perfetto.engine import open_trace
from ctf2perfetto.events import EventBatch, EventKind as K, MemKind as M, TraceInfo
from ctf2perfetto.convert.write import write_trace

PID = 4242
BUFFERS = 1000
BUF_SIZE = 1 << 20
HOST_BASE, DEV_BASE, HEAP_BASE = 0x7F0000000000, 0x7E0000000000, 0x100000000
STEP = 100  # ns between events


def _batches(heap: int, copies: int, batch: int = 1 << 20):
    """EventBatches in time order: buffer setup, then heap pairs with copies spread among them."""
    names = ["malloc", "free", "hipMalloc", "hipMemcpyAsync", "hipMemsetAsync"]
    setup = EventBatch.empty(2 * BUFFERS, names)
    c = setup.columns
    c["ts"][:] = np.arange(2 * BUFFERS) * STEP + 1000
    c["begin"][:] = c["ts"]
    c["pid"][:], c["tid"][:] = PID, PID
    c["kind"][:BUFFERS], c["api"][:BUFFERS], c["mem"][:BUFFERS] = K.MALLOC, 0, M.HOST
    c["ptr"][:BUFFERS] = HOST_BASE + np.arange(BUFFERS, dtype=np.uint64) * BUF_SIZE
    c["kind"][BUFFERS:], c["api"][BUFFERS:], c["mem"][BUFFERS:] = K.GPU_ALLOC, 2, M.DEVICE
    c["ptr"][BUFFERS:] = DEV_BASE + np.arange(BUFFERS, dtype=np.uint64) * BUF_SIZE
    c["begin"][BUFFERS:] -= 50
    c["size"][:] = BUF_SIZE
    yield setup
    t0 = int(c["ts"][-1]) + STEP
    rng = np.random.default_rng(1)
    total = heap + copies
    # Positions of the copies among all events after setup.
    is_copy = np.zeros(total, bool)
    is_copy[rng.choice(total, copies, replace=False)] = True
    heap_idx = np.cumsum(~is_copy) - 1  # index among heap events
    copy_idx = np.cumsum(is_copy) - 1
    live_window = 1000
    for start in range(0, total, batch):
        stop = min(total, start + batch)
        n = stop - start
        b = EventBatch.empty(n, names)
        c = b.columns
        pos = np.arange(start, stop)
        c["ts"][:] = t0 + pos * STEP
        c["begin"][:] = c["ts"]
        c["pid"][:], c["tid"][:] = PID, PID
        cp = is_copy[start:stop]
        h = heap_idx[start:stop]
        # Heap: even heap index = malloc of block h//2, odd = free of block h//2 - live_window.
        is_malloc = (~cp) & (h % 2 == 0)
        block = np.where(is_malloc, h // 2, h // 2 - live_window)
        is_free = (~cp) & (h % 2 == 1) & (block >= 0)
        c["kind"][is_malloc], c["api"][is_malloc], c["mem"][is_malloc] = K.MALLOC, 0, M.HOST
        c["kind"][is_free], c["api"][is_free] = K.FREE, 1
        c["ptr"][is_malloc | is_free] = HEAP_BASE + block[is_malloc | is_free].astype(np.uint64) * 64
        c["size"][is_malloc] = 16 + (block[is_malloc] % 48).astype(np.uint64)
        # Events whose free would precede any malloc become mallocs of extra blocks.
        odd = (~cp) & ~is_malloc & ~is_free
        c["kind"][odd], c["api"][odd], c["mem"][odd] = K.MALLOC, 0, M.HOST
        c["ptr"][odd] = HEAP_BASE + (np.uint64(1) << np.uint64(40)) + h[odd].astype(np.uint64) * 64
        c["size"][odd] = 32
        # Copies: 10% memsets, else HtoD / DtoH between random buffers (1/4 of a buffer).
        k = copy_idx[start:stop][cp]
        crng = np.random.default_rng(k[0] if len(k) else 0)
        host = crng.integers(0, BUFFERS, len(k)).astype(np.uint64)
        dev = crng.integers(0, BUFFERS, len(k)).astype(np.uint64)
        h2d = crng.random(len(k)) < 0.6
        memset = crng.random(len(k)) < 0.1
        hp, dp = HOST_BASE + host * BUF_SIZE, DEV_BASE + dev * BUF_SIZE
        rows = np.flatnonzero(cp)
        c["kind"][rows] = np.where(memset, K.GPU_SET, K.GPU_COPY)
        c["api"][rows] = np.where(memset, 4, 3)
        c["ptr"][rows] = np.where(memset, dp, np.where(h2d, dp, hp))
        c["src"][rows] = np.where(memset, 0, np.where(h2d, hp, dp))
        c["copy_kind"][rows] = np.where(memset, -1, np.where(h2d, 1, 2))
        c["size"][rows] = BUF_SIZE // 4
        c["begin"][rows] = c["ts"][rows] - 60
        c["stream"][rows] = (k % 4).astype(np.uint64)
        yield b


def _timed(func):
    started = time.perf_counter()
    value = func()
    return time.perf_counter() - started, value


ANALYSES = {
    "duplicated": analyses.duplicated,
    "redundant": analyses.redundant,
    "summary": analyses.summary,
    "leaks": analyses.leaks,
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--heap", type=int, default=10_000_000, help="heap events (default 10M)")
    parser.add_argument("--copies", type=int, default=100_000, help="copies and memsets (default 100k)")
    parser.add_argument("--keep", metavar="PATH", help="write the trace here and keep it")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="memq-bench-") as tmp:
        path = Path(args.keep) if args.keep else Path(tmp) / "bench.pftrace"
        write_s, _ = _timed(lambda: write_trace(_batches(args.heap, args.copies), TraceInfo(), path))
        print(f"trace: {args.heap:,} heap events + {args.copies:,} copies/memsets, "
              f"{os.path.getsize(path) / 1e6:.0f} MB, written in {write_s:.1f} s", flush=True)
        worst = 0.0
        for name, func in ANALYSES.items():
            load_s, engine = _timed(lambda: open_trace(path))
            with engine:
                run_s, _ = _timed(lambda: func(engine))
            ratio = run_s / load_s
            worst = max(worst, ratio)
            print(f"{name:>10}: load {load_s:6.1f} s, analysis {run_s:6.1f} s, ratio {ratio:.2f}x (goal <= 2x)",
                  flush=True)
        print(f"worst ratio: {worst:.2f}x -> {'OK' if worst <= 2 else 'over the goal'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
