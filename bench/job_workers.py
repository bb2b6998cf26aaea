"""A job directory converted serially and with each recording decoded on Dask: what `--workers` / `--scheduler`
cost or save.

Records (or takes with --job) a job of two recordings, each a heap-heavy Python loop (`memq record -o JOB/nodeX`),
then times in one run, alternating, `ctf2perfetto JOB -o OUT` serially, with `--workers 2` (a LocalCluster started
by the command) and with `--scheduler` on a LocalCluster of 2 worker processes this script started (the cluster's
start-up not counted), median of --repeat each, prints the ratios to the serial run and checks the three outputs are
the same bytes.

    python3 bench/job_workers.py [--job DIR] [--blocks 150000] [--repeat 3]

Wall-clock on a shared machine: compare the ratios, and state the load average printed beside them.
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

CONVERT = [sys.executable, "-m", "ctf2perfetto.cli.convert"]
MEMQ = [sys.executable, "-m", "ctf2perfetto"]


def timed(argv: list[str]) -> float:
    start = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(argv)}: exit {proc.returncode}: {proc.stderr.strip()}")
    return time.monotonic() - start


def record_job(job: Path, blocks: int) -> None:
    loop = f"import numpy as np\nfor _ in range({blocks}): np.ones(100000)"
    for node in ("nodea", "nodeb"):
        timed([*MEMQ, "record", "-o", str(job / node), "--", sys.executable, "-c", loop])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--job", type=Path, help="an existing job directory (default: record one)")
    parser.add_argument("--blocks", type=int, default=150_000, help="800 KB blocks each recording allocates")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    from distributed import LocalCluster

    with tempfile.TemporaryDirectory(prefix="memq-job-workers-") as tmp:
        job = args.job or Path(tmp) / "job"
        if args.job is None:
            record_job(job, args.blocks)
        with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", protocol="tcp",
                          dashboard_address=":0") as cluster:
            ways = {"serial": [], "--workers 2": ["--workers", "2"],
                    "--scheduler (started)": ["--scheduler", cluster.scheduler_address]}
            times: dict[str, list[float]] = {way: [] for way in ways}
            print(f"load average before: {os.getloadavg()[0]:.2f}")
            for _ in range(args.repeat):
                for i, (way, extra) in enumerate(ways.items()):
                    times[way].append(timed([*CONVERT, str(job), "-o", f"{tmp}/out{i}.pftrace", "-q", *extra]))
            print(f"load average after: {os.getloadavg()[0]:.2f}")
        serial = statistics.median(times["serial"])
        for way, got in times.items():
            median = statistics.median(got)
            print(f"{way:24} median {median:6.2f} s  ({', '.join(f'{t:.2f}' for t in got)})  "
                  f"ratio {median / serial:.2f}x")
        outputs = [Path(f"{tmp}/out{i}.pftrace").read_bytes() for i in range(len(ways))]
        print(f"outputs identical: {all(o == outputs[0] for o in outputs)} ({len(outputs[0]):,} bytes)")


if __name__ == "__main__":
    main()
