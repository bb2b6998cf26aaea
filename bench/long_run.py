"""Long runs: what recording a real training loop costs, with the host heap at a threshold.

Measures, in one run, on examples/train_cpu.py (--steps, default 200):
  * the whole `memq record` command (defaults: memq's heap wrappers, --host-min-size 4096) against the
    untraced command: alternating runs, median of --repeat each; goal <= 1.05x + 0.5 s;
  * events of the traced process with the defaults and with --host-min-size 0; goal >= 50x fewer;
  * peak host live bytes of that process in both recordings (decoded and replayed by memq's memory
    model, small blocks as their totals); goal: within 1%.

    python3 bench/long_run.py [--steps 200] [--repeat 5] [--keep DIR]

Timings are wall-clock on a shared machine: run it when the machine is quiet and compare the
ratios, not the seconds, with other machines.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from ctf2perfetto.ctf.decode import decode  # noqa: E402
from ctf2perfetto.convert.model import CNT_HOST, MemoryModel, counter_key  # noqa: E402

EXAMPLE = REPO / "examples" / "train_cpu.py"
MEMQ = [sys.executable, "-m", "ctf2perfetto"]
GOAL_EVENTS_RATIO = 50.0
GOAL_PEAK_DIFF = 0.01
GOAL_SLOWDOWN, GOAL_FIXED_S = 1.05, 0.5


def timed(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    return time.perf_counter() - start


def record(out: Path, command: list[str], env: dict[str, str], *extra: str) -> float:
    shutil.rmtree(out, ignore_errors=True)
    return timed([*MEMQ, "record", "-o", str(out), *extra, "--", *command], env)


def traced_pid(trace: Path) -> int:
    """The command's process: the one memq's preload library wrote an exit report for."""
    reports = json.loads((trace / "memq-record.json").read_text())["reach"]
    if len(reports) != 1:
        raise SystemExit(f"{trace}: expected one traced process, found {len(reports)}")
    return int(reports[0]["pid"])


def heap_figures(trace: Path, pid: int) -> dict[str, int]:
    """Rows of `pid` and of the whole trace, and the peak of pid's host live-bytes counter."""
    model, key = MemoryModel(), counter_key(CNT_HOST, pid)
    rows = own = peak = 0
    with decode(trace) as batches:
        for batch in batches:
            rows += len(batch)
            own += int((batch["pid"] == pid).sum())
            mb = model.process(batch)
            values = mb.sample_value[mb.sample_key == key]
            if len(values):
                peak = max(peak, int(values.max()))
    return {"rows": rows, "own_rows": own, "peak_host_bytes": peak,
            "small_allocations": model.totals.small_allocations}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200, help="training steps of examples/train_cpu.py (default 200)")
    parser.add_argument("--repeat", type=int, default=5, help="timed runs of each command (median)")
    parser.add_argument("--keep", type=Path, help="keep the two recordings in this directory")
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    command = [sys.executable, str(EXAMPLE), "--steps", str(args.steps)]
    work = Path(tempfile.mkdtemp(prefix="memq-long-run-"))
    try:
        plain, traced = [], []
        for i in range(args.repeat):
            print(f"timing run {i + 1}/{args.repeat} ...", file=sys.stderr, flush=True)
            plain.append(timed(command, env))
            traced.append(record(work / "default", command, env))
        print("recording with --host-min-size 0 ...", file=sys.stderr, flush=True)
        record(work / "every", command, env, "--host-min-size", "0")
        figures = {}
        for name in ("default", "every"):
            print(f"decoding the {name} recording ...", file=sys.stderr, flush=True)
            figures[name] = heap_figures(work / name, traced_pid(work / name))
        if args.keep:
            args.keep.mkdir(parents=True, exist_ok=True)
            for name in ("default", "every"):
                shutil.rmtree(args.keep / name, ignore_errors=True)
                shutil.move(str(work / name), str(args.keep / name))
    finally:
        shutil.rmtree(work, ignore_errors=True)

    p, t = statistics.median(plain), statistics.median(traced)
    budget = GOAL_SLOWDOWN * p + GOAL_FIXED_S
    d, e = figures["default"], figures["every"]
    ratio = e["own_rows"] / max(d["own_rows"], 1)
    peak_diff = abs(d["peak_host_bytes"] - e["peak_host_bytes"]) / max(e["peak_host_bytes"], 1)
    load = os.getloadavg()[0]
    print(f"examples/train_cpu.py --steps {args.steps}; {args.repeat} alternating runs each, median; "
          f"load average {load:.1f} on {os.cpu_count()} CPUs")
    print(f"  untraced command           {p:8.2f} s   (runs: {', '.join(f'{x:.2f}' for x in plain)})")
    print(f"  memq record (defaults)     {t:8.2f} s   (runs: {', '.join(f'{x:.2f}' for x in traced)})")
    print(f"  ratio {t / p:.3f}x, {t - p:+.2f} s; goal <= {GOAL_SLOWDOWN}x + {GOAL_FIXED_S} s = {budget:.2f} s: "
          f"{'met' if t <= budget else 'NOT met'}")
    print(f"  events of the process: {d['own_rows']:,} (defaults) vs {e['own_rows']:,} (--host-min-size 0): "
          f"{ratio:.0f}x fewer; goal >= {GOAL_EVENTS_RATIO:.0f}x: {'met' if ratio >= GOAL_EVENTS_RATIO else 'NOT met'}"
          f" (whole traces: {d['rows']:,} vs {e['rows']:,})")
    print(f"  events per second of run (untraced median): {d['own_rows'] / p:,.0f} (defaults) vs "
          f"{e['own_rows'] / p:,.0f} (--host-min-size 0)")
    print(f"  peak host live bytes: {d['peak_host_bytes']:,} vs {e['peak_host_bytes']:,}: {peak_diff:.3%} apart; "
          f"goal <= {GOAL_PEAK_DIFF:.0%}: {'met' if peak_diff <= GOAL_PEAK_DIFF else 'NOT met'}"
          f" ({d['small_allocations']:,} small blocks counted as totals)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
