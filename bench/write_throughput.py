"""Model + writer throughput: events/s of write_trace on a synthetic libc-heavy batch stream.

The reference, measured in the same run, is babeltrace2's own C decoder with the
counter sink on a real trace (events/s); the end-to-end goal (decode + model +
write <= 1.5x babeltrace2) leaves the model and writer a budget of about twice
babeltrace2's rate. Prints both rates, the ratio and peak RSS.

    python3 bench/write_throughput.py [--events 3000000] [--trace tests/data/ctf/disc]
"""
from __future__ import annotations

import argparse
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from ctf2perfetto.pipeline import keep_freed_memory  # noqa: E402
from ctf2perfetto.events import EventBatch, EventKind, TraceInfo  # noqa: E402
from ctf2perfetto.convert.write import write_trace  # noqa: E402

API = ["malloc", "calloc", "realloc", "memalign", "posix_memalign", "free"]


def kept_live(count: int, batch_size: int):
    """`count` mallocs that are never freed (a large live set for what follows)."""
    for lo in range(0, count, batch_size):
        n = min(batch_size, count - lo)
        b = EventBatch.empty(n, list(API))
        c = b.columns
        c["kind"][:] = EventKind.MALLOC
        c["ptr"][:] = 0x700000000000 + (lo + np.arange(n, dtype=np.uint64)) * 32
        c["size"][:] = 32
        c["ts"][:] = c["begin"][:] = lo + np.arange(n)
        c["pid"][:] = c["tid"][:] = 4242
        yield b


def synthetic(total: int, batch_size: int, seed: int = 1):
    """A malloc/free workload: 4 threads, addresses reused from a pool, ~1% realloc/calloc."""
    rng = np.random.default_rng(seed)
    live: list[int] = []
    free_addrs = list(range(0x10000000, 0x10000000 + 64 * 200_000, 64))
    ts = 1 << 40
    done = 0
    while done < total:
        n = min(batch_size, total - done)
        b = EventBatch.empty(n, list(API))
        c = b.columns
        kinds = np.empty(n, np.uint8)
        ptr = np.zeros(n, np.uint64)
        src = np.zeros(n, np.uint64)
        r = rng.random(n)
        sizes = rng.integers(16, 4096, n).astype(np.uint64)
        for i in range(n):  # generating the workload is not what is measured
            if (r[i] < 0.5 and free_addrs) or not live:
                a = free_addrs.pop()
                live.append(a)
                kinds[i] = EventKind.CALLOC if r[i] < 0.005 else EventKind.MALLOC
                ptr[i] = a
            elif r[i] < 0.51:
                j = int(rng.integers(len(live)))
                kinds[i] = EventKind.REALLOC
                ptr[i] = src[i] = live[j]
            else:
                j = int(rng.integers(len(live)))
                live[j], live[-1] = live[-1], live[j]
                a = live.pop()
                free_addrs.append(a)
                kinds[i] = EventKind.FREE
                ptr[i] = a
        c["kind"][:] = kinds
        c["api"][:] = np.where(kinds == EventKind.FREE, 5, np.where(kinds == EventKind.REALLOC, 2,
                                                                       np.where(kinds == EventKind.CALLOC, 1, 0)))
        c["ptr"][:] = ptr
        c["src"][:] = src
        c["size"][:] = np.where(kinds == EventKind.FREE, 0, sizes)
        c["ts"][:] = ts + np.arange(n) * 300
        c["begin"][:] = c["ts"]
        c["pid"][:] = 4242
        c["tid"][:] = 4242 + rng.integers(0, 4, n)
        c["ip"][:] = 0x400000 + rng.integers(0, 1 << 16, n).astype(np.uint64)
        ts += n * 300
        done += n
        yield b


def babeltrace_rate(trace: Path) -> tuple[int, float, float]:
    """(events, events/s wall, CPU seconds) of babeltrace2's counter sink on `trace`."""
    trace = next(trace.rglob("metadata")).parent
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    out = subprocess.run(["babeltrace2", "-c", "source.ctf.fs", "--params", f'inputs=["{trace}"]',
                          "-c", "sink.utils.counter"], capture_output=True, text=True, check=True).stdout
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    events = int(re.findall(r"(\d+) Event messages", out)[-1])  # the counter prints running totals
    return events, events / elapsed, cpu


def _default_trace() -> Path:
    big = Path(__file__).resolve().parent / "out" / "libc-3000000"
    return big if big.is_dir() else Path(__file__).resolve().parents[1] / "tests/data/ctf/disc"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=3_000_000)
    parser.add_argument("--batch-size", type=int, default=65_536, help="rows per batch (the CLI's size)")
    parser.add_argument("--live", type=int, default=0,
                        help="first make this many allocations that stay live (not counted in --events)")
    parser.add_argument("--trace", type=Path, default=_default_trace(),
                        help="reference trace for babeltrace2 (default: bench/out/libc-3000000 when "
                             "bench/convert_vs_babeltrace.py has recorded it, else tests/data/ctf/disc)")
    args = parser.parse_args()
    keep_freed_memory()  # the allocator settings of the CLI, so the figures are the CLI's
    live = list(kept_live(args.live, args.batch_size))
    batches = list(synthetic(args.events, args.batch_size))
    clock: dict[str, float] = {}

    def stream():
        yield from live
        # the clocks start when the workload starts: making the live set is not measured
        clock["wall"], clock["cpu"] = time.perf_counter(), time.process_time()
        yield from batches

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "bench.pftrace"
        summary = write_trace(stream(), TraceInfo(), out)
        elapsed, cpu = time.perf_counter() - clock["wall"], time.process_time() - clock["cpu"]
    if args.live:
        print(f"({args.live:,} allocations made first and kept live throughout; not in the figures below)")
    rate = args.events / elapsed
    # The machine is shared: CPU time says what the work costs when others hold the cores.
    print(f"model+writer CPU time: {cpu:.2f} s = {args.events / cpu / 1e6:.2f} M events/s of CPU")
    bt_events, bt_rate, bt_cpu = babeltrace_rate(args.trace)
    print(f"model+writer: {args.events:,} events in {elapsed:.2f} s = {rate / 1e6:.2f} M events/s "
          f"({summary.output_bytes / (args.events + args.live):.1f} bytes/event, "
          f"{summary.allocations - args.live:,} allocations)")
    print(f"babeltrace2 counter sink: {bt_events:,} events of {args.trace} = {bt_rate / 1e6:.2f} M events/s, "
          f"CPU {bt_cpu:.2f} s = {bt_events / bt_cpu / 1e6:.2f} M events/s of CPU")
    print(f"ratio (writer time per event / babeltrace2 time per event): wall {bt_rate / rate:.2f}, "
          f"CPU {(cpu / args.events) / (bt_cpu / bt_events):.2f}")
    print(f"peak RSS (whole benchmark, batches held in memory): "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
