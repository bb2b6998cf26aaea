"""The analyses at the pace of the run: `memq NAME DIR` against the recording's own duration, and the parts of a
recording on Dask (`--parts SEC --workers 2` against `--workers 1`).

  pace     a steady copy loop on the fake HIP runtime (examples/hip_offload.py --seconds S --weights-mib 1:
           five copies a step), recorded with the defaults (or --reuse DIR); then each analysis as a user runs it
           (`memq NAME DIR`: converting on the fly, loading, the queries; a fresh process, wall time and peak
           RSS), median of --repeat, analyses alternating. Prints each wall time over the run's duration (the
           recording's length from its packet headers) and copies per second of analysis.
           Goal: <= 0.3x the run.
  workers  `memq NAME DIR --parts SEC --workers 1` and `--workers 2`, alternating, median of --repeat: the
           ratio (goal <= 0.6x) and whether the outputs are identical (with each other and with the serial
           `--parts` path).

    python3 bench/analyses_pace.py pace [--seconds 30] [--repeat 3] [--keep DIR | --reuse DIR] [--analyses a,b]
    python3 bench/analyses_pace.py workers DIR [--parts 10] [--repeat 3] [--analyses redundant]

Wall-clock figures on a shared machine: compare ratios taken in one run, and quote the load printed beside them.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

MEMQ = [sys.executable, "-m", "ctf2perfetto"]
ANALYSES = ("duplicated", "redundant", "summary", "leaks")


def load() -> str:
    return "load %.1f %.1f %.1f" % os.getloadavg()


def measured(argv: list[str]) -> tuple[float, int, str]:
    """Wall seconds, peak RSS (MiB, of the process and its children) and stdout of a command."""
    with tempfile.TemporaryFile() as out:
        t = time.perf_counter()
        proc = subprocess.run(["/usr/bin/time", "-f", "%M", *argv], stdout=out, stderr=subprocess.PIPE, text=False)
        wall = time.perf_counter() - t
        out.seek(0)
        stdout = out.read().decode()
    err = proc.stderr.decode().strip().splitlines()
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({proc.returncode}): {err[-2:] if err else ''}")
    return wall, int(err[-1]) >> 10, stdout


def recording(args: argparse.Namespace, work: Path) -> Path:
    if args.reuse:
        return Path(args.reuse)
    from support.fakes import build_fakes

    fakes = build_fakes(work / "fakes")
    trace = Path(args.keep) if args.keep else work / "trace"
    cmd = [*MEMQ, "record", "-o", str(trace), "--", sys.executable, str(REPO / "examples" / "hip_offload.py"),
           "--seconds", str(args.seconds), "--weights-mib", "1", "--hip-lib", str(fakes.hip_runtime)]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return trace


def copies_of(trace: Path) -> int:
    out = subprocess.run([*MEMQ, "summary", str(trace), "--format", "json"], capture_output=True, text=True,
                         check=True).stdout
    import json

    return sum(int(r["count"]) for r in json.loads(out)["tables"]["copies"]["rows"] if r.get("pid") is None)


def pace(args: argparse.Namespace) -> int:
    from ctf2perfetto.analysis.parts import recording_length_ns

    names = args.analyses.split(",") if args.analyses else list(ANALYSES)
    with tempfile.TemporaryDirectory(prefix="memq-pace-") as tmp:
        trace = recording(args, Path(tmp))
        run_s = recording_length_ns(trace) / 1e9
        copies = copies_of(trace)
        print(f"recording {trace}: {run_s:.1f} s, {copies:,} copies ({copies / run_s:,.0f}/s); {load()}")
        walls: dict[str, list[float]] = {n: [] for n in names}
        rss: dict[str, int] = {n: 0 for n in names}
        for _ in range(args.repeat):
            for name in names:
                wall, peak, _ = measured([*MEMQ, name, str(trace), "--format", "json"])
                walls[name].append(wall)
                rss[name] = max(rss[name], peak)
        print(f"{'analysis':12s} {'wall (median)':>14s} {'x run':>7s} {'copies/s':>10s} {'peak RSS':>9s}   ({load()})")
        for name in names:
            wall = statistics.median(walls[name])
            print(f"{name:12s} {wall:12.1f} s {wall / run_s:6.2f}x {copies / wall:10,.0f} {rss[name]:6d} MiB"
                  f"   runs {', '.join(f'{w:.1f}' for w in walls[name])}")
    return 0


def workers(args: argparse.Namespace) -> int:
    from ctf2perfetto.analysis.parts import recording_length_ns

    trace = Path(args.trace)
    run_s = recording_length_ns(trace) / 1e9
    names = args.analyses.split(",")
    print(f"recording {trace}: {run_s:.1f} s; --parts {args.parts}; {load()}")
    for name in names:
        base = [*MEMQ, name, str(trace), "--parts", str(args.parts), "--format", "json"]
        serial = measured(base)
        times: dict[int, list[float]] = {1: [], 2: []}
        outputs: set[str] = {serial[2]}
        for _ in range(args.repeat):
            for n in (1, 2):
                wall, peak, out = measured([*base, "--workers", str(n)])
                times[n].append(wall)
                outputs.add(out)
        one, two = statistics.median(times[1]), statistics.median(times[2])
        print(f"{name}: serial --parts {serial[0]:.1f} s; --workers 1 {one:.1f} s ({one / run_s:.2f}x run), "
              f"--workers 2 {two:.1f} s ({two / run_s:.2f}x run): ratio {two / one:.2f}x (goal <= 0.6x); "
              f"outputs {'identical' if len(outputs) == 1 else 'DIFFER'}; {load()}")
        print(f"  runs: 1: {', '.join(f'{t:.1f}' for t in times[1])}; 2: {', '.join(f'{t:.1f}' for t in times[2])}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="goal", required=True)
    p = sub.add_parser("pace")
    p.add_argument("--seconds", type=float, default=30.0)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--keep")
    p.add_argument("--reuse")
    p.add_argument("--analyses", default="")
    w = sub.add_parser("workers")
    w.add_argument("trace")
    w.add_argument("--parts", default="10")
    w.add_argument("--repeat", type=int, default=3)
    w.add_argument("--analyses", default="redundant")
    args = parser.parse_args()
    return pace(args) if args.goal == "pace" else workers(args)


if __name__ == "__main__":
    sys.exit(main())
