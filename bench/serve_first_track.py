#!/usr/bin/env python3
"""Time to first track in the Perfetto UI: memq's engine behind the UI (memq serve) against the UI's own.

Reference, in the same run: `memq open --engine browser`, where the UI's built-in WebAssembly engine
loads the trace in Chromium. Measured: `memq open --engine memq` (memq serve's embedded engine loads
the trace, the UI queries it over the RPC). Each is timed from the command's start to the first track
title on screen in headless Chromium (Chromium's start included in both), and to the memory track
`memq open` pins (GPU 0's device live bytes). Both engines are WebAssembly builds of trace_processor v52.
Also printed: the CPU time memq and Chromium (every process) used, which a shared machine's load
distorts less than the wall time (Chromium runs on several threads, memq's engine on one).

    python3 bench/serve_first_track.py                 # the 245 MB demo trace, generated
    python3 bench/serve_first_track.py --trace X.pftrace --repeat 3 --breakdown

The generated trace is bench/analyses_speed.py's workload (heap malloc/free pairs, copies between
1,000 host and 1,000 device buffers) at 3.85M heap events and 38.5k copies: 245 MB.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "bench"))

from ctf2perfetto.traceformat import names as N  # noqa: E402 - after the path set-up

PINNED_TRACK = N.device_counter_name(0)  # pinned by memq open's startup command, on both engines


def make_trace(path: Path, heap: int, copies: int) -> None:
    from analyses_speed import _batches

    from ctf2perfetto.events import TraceInfo
    from ctf2perfetto.convert.write import write_trace

    write_trace(_batches(heap, copies), TraceInfo(), path)


class DescendantsCpu:
    """CPU seconds used by this process's descendants (memq, node, Chromium's processes), sampled from /proc.

    getrusage(RUSAGE_CHILDREN) misses most of Chromium (its renderers are not reaped up the tree), so the
    descendants' utime + stime are read every SAMPLE_S; a process's last fraction of a sample is lost.
    """

    SAMPLE_S = 0.2

    def __init__(self) -> None:
        self._seen: dict[tuple[int, int], float] = {}  # (pid, start time) -> CPU seconds
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._tick = os.sysconf("SC_CLK_TCK")

    def __enter__(self) -> "DescendantsCpu":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def seconds(self) -> float:
        return sum(self._seen.values())

    def _run(self) -> None:
        while not self._stop.wait(self.SAMPLE_S):
            parents, cpu = {}, {}
            for stat in Path("/proc").glob("[0-9]*/stat"):
                try:
                    fields = stat.read_text().rsplit(")", 1)[1].split()
                except OSError:
                    continue
                pid = int(stat.parent.name)
                parents[pid] = int(fields[1])
                cpu[(pid, int(fields[19]))] = (int(fields[11]) + int(fields[12])) / self._tick
            mine = {os.getpid()}
            grown = True
            while grown:
                before = len(mine)
                mine |= {pid for pid, parent in parents.items() if parent in mine}
                grown = len(mine) != before
            for (pid, start), seconds in cpu.items():
                if pid in mine and pid != os.getpid():
                    self._seen[(pid, start)] = max(seconds, self._seen.get((pid, start), 0.0))


def first_track(trace: Path, engine: str, shot: Path) -> tuple[float, float, float]:
    """Seconds from `memq open --engine ENGINE` to the first track and to the pinned memory track, and the CPU
    seconds memq and Chromium (all its processes) used until they were stopped right after."""
    from ui.browser import load_in_chromium, start_memq_open

    with DescendantsCpu() as cpu:
        started = time.time()
        server = start_memq_open(trace, "--engine", engine)
        try:
            report = load_in_chromium(server.url, shot, [PINNED_TRACK], timeout_ms=900_000)
        finally:
            code, err = server.stop()
    assert code == 0, err
    assert report["modals"] == [] and not report["missing"], report
    base = report["startedAt"] / 1000 - started
    return base + report["firstTrackMs"] / 1000, base + report["firstSeenMs"][PINNED_TRACK] / 1000, cpu.seconds


def _worker_cpu_s() -> float:
    """CPU seconds of this process's memq serve engine workers (children running rpcserver.worker)."""
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            cmdline = (stat.parent / "cmdline").read_bytes()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == os.getpid() and b"ctf2perfetto.look.rpcserver.worker" in cmdline:
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def breakdown(trace: Path) -> None:
    """Where memq serve's time goes: the load (in this process, the work its engine worker does) and the
    requests the UI sends until its first track (wall time in memq serve; the worker's CPU)."""
    from ctf2perfetto.cli.open import PIN_MEMORY_TRACKS
    from ctf2perfetto.engine.embedded import EmbeddedEngine, needs_memory64
    from ctf2perfetto.engine.source import trace_source
    from ctf2perfetto.engine.wasm import load_module, wasm_file
    from ctf2perfetto.look.rpcserver import MemqServer, pipe
    from ui.browser import run_rpc_session

    load_module(wasm_file(needs_memory64(trace_source(trace))))  # compiled (or from the cache) outside the timing
    load_cpu = []
    for _ in range(2):
        wall, cpu = time.perf_counter(), time.process_time()
        EmbeddedEngine(trace_source(trace)).close()
        load_cpu.append(time.process_time() - cpu)
        print(f"  load: {time.perf_counter() - wall:6.1f} s, CPU {load_cpu[-1]:5.1f} s", flush=True)
    requests: list[float] = []
    forward = pipe.PipeBackend.forward

    def timed(self: pipe.PipeBackend, message: bytes, sink) -> None:
        wall = time.perf_counter()
        try:
            forward(self, message, sink)
        finally:
            requests.append(time.perf_counter() - wall)

    pipe.PipeBackend.forward = timed
    server = MemqServer.start(trace, 0)
    try:
        report = run_rpc_session({"allowed": [server.origin], "timeoutMs": 900_000, "steps": [
            {"open": "a", "url": server.ui_url([PIN_MEMORY_TRACKS], use_loaded_trace=True)},
            {"tracks": "a", "expect": [PINNED_TRACK]}]})
        worker_cpu = _worker_cpu_s()
    finally:
        server.close()
        pipe.PipeBackend.forward = forward
    assert all(step["ok"] for step in report["steps"]), report["steps"]
    print(f"  UI requests until the first track: {len(requests) - 1}, {sum(requests[1:]):.1f} s in the engine; "
          f"the worker's CPU {worker_cpu:.1f} s in all (load included)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trace", type=Path, default=None, help="a .pftrace (default: generate the demo trace)")
    parser.add_argument("--heap", type=int, default=3_850_000, help="heap events of the generated trace")
    parser.add_argument("--copies", type=int, default=38_500, help="copies of the generated trace")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each (the best is kept)")
    parser.add_argument("--breakdown", action="store_true", help="also: where memq serve's time goes")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="memq-bench-") as tmp:
        trace = args.trace
        if trace is None:
            trace = Path(tmp) / "demo.pftrace"
            make_trace(trace, args.heap, args.copies)
        print(f"trace {trace.name}: {trace.stat().st_size / 1e6:.0f} MB", flush=True)
        results: dict[str, tuple[float, float, float]] = {}
        for _ in range(args.repeat):
            for engine in ("browser", "memq"):  # alternated, so machine load hits both alike
                got = first_track(trace, engine, Path(tmp) / f"{engine}.png")
                print(f"  {engine:8s} first track {got[0]:7.1f} s, {PINNED_TRACK} {got[1]:7.1f} s, "
                      f"CPU {got[2]:6.1f} s (load average {os.getloadavg()[0]:.1f})", flush=True)
                best = results.get(engine)
                results[engine] = got if best is None or got[0] < best[0] else best
        browser, memq = results["browser"], results["memq"]
        for name, (first, pinned, cpu) in (("UI's own engine (reference)", browser), ("memq serve (memq open)", memq)):
            print(f"{name:30s} first track {first:7.1f} s   pinned track {pinned:7.1f} s   CPU {cpu:6.1f} s")
        print(f"{'ratio memq / UI own engine':30s} first track {memq[0] / browser[0]:7.2f}     pinned track "
              f"{memq[1] / browser[1]:7.2f}     CPU {memq[2] / browser[2]:6.2f}")
        if args.breakdown:
            print("memq serve, where the time goes:")
            breakdown(trace)
    return 0


if __name__ == "__main__":
    sys.exit(main())
