"""Conversion speed: ctf2perfetto (and its decoder alone) against babeltrace2's own C decoder.

By default records (once, cached in bench/out/) a libc-heavy LTTng trace of >= 3M events: a Python
allocation loop under the lttng-ust libc wrapper (LD_PRELOAD), on a blocking channel so
that nothing is lost. `--trace DIR` measures any recording instead (memq's own events, e.g. a
`memq record` of a PyTorch job). Then, in one run and on that trace, times:

  1. babeltrace2 -c source.ctf.fs --params 'inputs=[<every CTF trace under DIR>]' -c sink.utils.counter
  2. ctf2perfetto.ctf.decode alone (iterate every EventBatch)
  3. ctf2perfetto <dir> -o out.pftrace --quiet (the whole converter: ctf2perfetto.pipeline), when its CLI is installed
  4. with --baseline CHECKOUT: the same command with another source checkout on PYTHONPATH (e.g. the
     main branch's worktree, native libraries built), so a change is measured against it in the same run

Every side runs once per round, rounds repeated --repeat times (so all sides see the same machine
load), and the median of each side's wall and CPU seconds is kept. Prints events/s, the ratios to
babeltrace2 (and to the baseline) and the peak RSS of each. The converter runs with this file's
checkout on PYTHONPATH. Usage:

    python3 bench/convert_vs_babeltrace.py [--trace DIR] [--events 3000000] [--repeat 3] [--rerecord] [--baseline DIR]
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

OUT = Path(__file__).resolve().parent / "out"
LIBC_WRAPPER = "liblttng-ust-libc-wrapper.so"
# Each iteration: a bytearray (malloc + free of its buffer) and list growth (realloc).
WORKLOAD = """
import sys
n = int(sys.argv[1])
keep = []
for i in range(n):
    b = bytearray(1000 + (i & 1023))
    if i % 64 == 0:
        keep.append(b)
    if len(keep) > 4096:
        keep.clear()
"""


def lttng(*args: str) -> None:
    subprocess.run(["lttng", *args], check=True, stdout=subprocess.DEVNULL)


def record(trace: Path, events: int) -> None:
    """A discard-free recording of the allocation loop into `trace`."""
    session = f"memq-bench-{os.getpid()}"
    if trace.exists():
        shutil.rmtree(trace)
    lttng("create", session, f"--output={trace}")
    try:
        lttng("enable-channel", "-u", "--session", session, "--subbuf-size=4M", "--num-subbuf=8",
              "--blocking-timeout=inf", "libc")
        lttng("enable-event", "-u", "--session", session, "--channel", "libc", "lttng_ust_libc:*")
        for ctx in ("vpid", "vtid", "ip"):
            lttng("add-context", "-u", "--session", session, "--channel", "libc", "-t", ctx)
        lttng("start", session)
        env = dict(os.environ, LD_PRELOAD=LIBC_WRAPPER, LTTNG_UST_ALLOW_BLOCKING="1")
        # ~2 events per iteration (malloc + free), plus interpreter start-up.
        subprocess.run([os.path.realpath(sys.executable), "-c", WORKLOAD, str(events // 2 + 1)], env=env,
                       check=True)
        lttng("stop", session)
    finally:
        lttng("destroy", session)


def trace_dirs(trace: Path) -> list[Path]:
    return sorted(p.parent for p in trace.rglob("metadata"))


REPO = Path(__file__).resolve().parent.parent


def run_child(cmd: list[str], output: Path | None = None, pythonpath: Path = REPO) -> tuple[float, float, int, str]:
    """Wall seconds, CPU seconds (user + system), peak RSS (KiB) and stdout of a child process.

    `output` (the file the child writes) is removed first, untimed: replacing the previous
    run's 200 MiB file would add the kernel's freeing of its page cache (~0.1 s) to the run."""
    if output is not None:
        output.unlink(missing_ok=True)
    start = time.perf_counter()
    env = dict(os.environ, PYTHONPATH=str(pythonpath))
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    out = proc.stdout.read()
    err = proc.stderr.read()
    _pid, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise RuntimeError(f"{' '.join(cmd)} failed: {err.decode(errors='replace').strip()[-500:]}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss, out.decode()


def entry_point(name: str) -> str | None:
    """The installed console script itself: the one beside this interpreter, rather than what PATH
    finds first, which under pyenv is a shell shim that costs 60-100 ms per run before Python starts."""
    beside = Path(sys.executable).parent / name
    return str(beside) if beside.is_file() else shutil.which(name)


DECODE_ONLY = """
import sys
from ctf2perfetto.ctf.decode import decode
rows = 0
with decode(sys.argv[1]) as d:
    for batch in d:
        rows += len(batch)
print(rows)
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=3_000_000, help="events to record (default 3M)")
    parser.add_argument("--trace", type=Path, metavar="DIR",
                        help="measure this recording (a directory holding CTF traces) instead of the libc loop")
    parser.add_argument("--repeat", type=int, default=3, help="rounds (each runs every side once); the median is kept")
    parser.add_argument("--rerecord", action="store_true", help="record the trace again")
    parser.add_argument("--baseline", type=Path, metavar="CHECKOUT",
                        help="also time the converter of this source checkout (its native libraries built)")
    args = parser.parse_args()

    if args.trace is not None:
        trace = args.trace
        if not trace.is_dir():
            print(f"{trace}: not a directory", file=sys.stderr)
            return 1
    else:
        trace = OUT / f"libc-{args.events}"
        if args.rerecord or not trace.is_dir():
            print(f"recording {args.events:,} libc events into {trace} ...", file=sys.stderr)
            record(trace, args.events)
    dirs = trace_dirs(trace)
    if not dirs:
        print(f"{trace}: holds no CTF trace (no metadata file)", file=sys.stderr)
        return 1
    inputs = "[" + ",".join(f'"{d}"' for d in dirs) + "]"
    load = os.getloadavg()

    sides: list[tuple[str, list[str], Path | None, Path]] = [
        ("babeltrace2 counter", ["babeltrace2", "-c", "source.ctf.fs", "--params", f"inputs={inputs}",
                                 "-c", "sink.utils.counter"], None, REPO),
        ("memq decode", [sys.executable, "-c", DECODE_ONLY, str(trace)], None, REPO)]
    converter = entry_point("ctf2perfetto")
    pftrace = OUT / "bench.pftrace"
    if converter:
        OUT.mkdir(parents=True, exist_ok=True)
        command = [converter, str(trace), "-o", str(pftrace), "--quiet"]
        sides.append(("ctf2perfetto", command, pftrace, REPO))
        if args.baseline:
            sides.append(("baseline ctf2perfetto", command, pftrace, args.baseline))
    runs: dict[str, list[tuple[float, float, int, str]]] = {name: [] for name, *_ in sides}
    for _ in range(args.repeat):  # interleaved round by round, so every side sees the same machine load
        for name, cmd, output, where in sides:
            try:
                runs[name].append(run_child(cmd, output, where))
            except RuntimeError as exc:
                if name == "babeltrace2 counter":
                    raise
                print(f"{name}: not measured ({exc})", file=sys.stderr)
    results: dict[str, tuple[float, float, int]] = {
        name: (statistics.median(r[0] for r in measured), statistics.median(r[1] for r in measured),
               max(r[2] for r in measured)) for name, measured in runs.items() if measured}
    # The counter prints running totals; the last one is the trace's.
    out = runs["babeltrace2 counter"][0][3]
    events = int([line.split()[0] for line in out.splitlines() if line.strip().endswith("Event messages")][-1])
    rows = int(runs["memq decode"][0][3].strip()) if runs["memq decode"] else 0

    base, base_cpu, _rss = results["babeltrace2 counter"]
    size = sum(f.stat().st_size for d in dirs for f in d.iterdir() if f.is_file())
    print(f"trace: {trace} ({events:,} events, {rows:,} rows, {size / 2**20:.0f} MiB)")
    print(f"load average before: {load[0]:.2f}, after: {os.getloadavg()[0]:.2f} "
          f"(the machine is shared: median of {args.repeat} rounds)")
    print(f"{'tool':22} {'wall s':>7} {'events/s':>12} {'ratio':>6} {'CPU s':>7} {'CPU ratio':>9} {'peak RSS':>10}")
    for name, (wall, cpu, rss) in results.items():
        print(f"{name:22} {wall:7.2f} {events / wall:12,.0f} {wall / base:6.2f} {cpu:7.2f} {cpu / base_cpu:9.2f} "
              f"{rss / 1024:6.0f} MiB")
    if "baseline ctf2perfetto" in results and "ctf2perfetto" in results:
        new, old = results["ctf2perfetto"], results["baseline ctf2perfetto"]
        print(f"ctf2perfetto / baseline ({args.baseline}): wall {new[0] / old[0]:.2f}, CPU {new[1] / old[1]:.2f} "
              "(< 1: this checkout is faster)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
