"""Kineto merge speed: memq's Kineto -> TracePackets against trace_processor's own JSON importer.

On the largest Kineto trace of the tests (tests/data/kineto/rank-0...: 68k events, 1,600 memcpys),
in one run, times:

  1. trace_processor (the embedded engine) loading the Kineto JSON itself (its Chrome-JSON importer)
  2. kineto.load + KinetoMerge.packets: what `ctf2perfetto --kineto` adds to a conversion

and prints events/s of each and the ratio (reference / memq: > 1 means memq's merge is faster
than trace_processor reading the same file). Usage:

    python3 bench/kineto_merge.py [--repeat 3] [--kineto PATH]
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

from ctf2perfetto.importers import kineto
from ctf2perfetto.engine import open_trace

DEFAULT = (Path(__file__).resolve().parent.parent / "tests" / "data" / "kineto"
           / "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz")


def best(repeat: int, func) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        func()
        times.append(time.perf_counter() - started)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs of each side; the best counts (default 3)")
    parser.add_argument("--kineto", type=Path, default=DEFAULT, help="Kineto JSON(.gz) to merge")
    args = parser.parse_args()

    def reference() -> None:
        with open_trace(args.kineto) as engine:
            engine.query("SELECT count(*) FROM slice")

    def merge() -> int:
        merged = kineto.KinetoMerge(kineto.load(args.kineto))
        return len(merged.packets())

    events = len(kineto.load(args.kineto).events)
    ref = best(args.repeat, reference)
    ours = best(args.repeat, merge)
    print(f"kineto file: {args.kineto.name} ({events:,} events)")
    print(f"trace_processor JSON import: {ref:.2f} s ({events / ref:,.0f} events/s)")
    print(f"memq Kineto merge:           {ours:.2f} s ({events / ours:,.0f} events/s)")
    print(f"ratio (reference / memq):    {ref / ours:.2f}")


if __name__ == "__main__":
    main()
