"""Conversion speed: ctf2perfetto (and its decoder alone) against babeltrace2's own C decoder.

Records (once, cached in bench/out/) a libc-heavy LTTng trace of >= 3M events: a Python
allocation loop under the lttng-ust libc wrapper (LD_PRELOAD), on a blocking channel so
that nothing is lost. Then, in one run and on that trace, times:

  1. babeltrace2 -c source.ctf.fs --params 'inputs=["<trace>"]' -c sink.utils.counter
  2. ctf2perfetto.ctf.decode alone (iterate every EventBatch)
  3. ctf2perfetto <dir> -o out.pftrace (the whole converter: ctf2perfetto.pipeline), when its CLI is installed
  4. with --baseline CHECKOUT: the same command with another source checkout on PYTHONPATH (e.g. the
     main branch's worktree, native libraries built), so a change is measured against it in the same run

and prints events/s, the ratios to babeltrace2 (and to the baseline) and the peak RSS of each. The
converter runs with this file's checkout on PYTHONPATH. Usage:

    python3 bench/convert_vs_babeltrace.py [--events 3000000] [--repeat 3] [--rerecord] [--baseline DIR]
"""
from __future__ import annotations

import argparse
import os
import shutil
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
    parser.add_argument("--repeat", type=int, default=3, help="runs per tool; the best is kept")
    parser.add_argument("--rerecord", action="store_true", help="record the trace again")
    parser.add_argument("--baseline", type=Path, metavar="CHECKOUT",
                        help="also time the converter of this source checkout (its native libraries built)")
    args = parser.parse_args()

    trace = OUT / f"libc-{args.events}"
    if args.rerecord or not trace.is_dir():
        print(f"recording {args.events:,} libc events into {trace} ...", file=sys.stderr)
        record(trace, args.events)
    dirs = trace_dirs(trace)
    if len(dirs) != 1:
        print(f"{trace}: expected one CTF trace, found {len(dirs)}", file=sys.stderr)
        return 1
    inputs = '["' + str(dirs[0]) + '"]'
    load = os.getloadavg()

    results: dict[str, tuple[float, float, int]] = {}
    events = 0

    def keep_best(name: str, runs: list[tuple[float, float, int, str]]) -> str:
        results[name] = (min(r[0] for r in runs), min(r[1] for r in runs), max(r[2] for r in runs))
        return runs[0][3]

    def best(name: str, cmd: list[str]) -> str:
        return keep_best(name, [run_child(cmd) for _ in range(args.repeat)])

    out = best("babeltrace2 counter", ["babeltrace2", "-c", "source.ctf.fs", "--params", f"inputs={inputs}",
                                       "-c", "sink.utils.counter"])
    # The counter prints running totals; the last one is the trace's.
    events = int([line.split()[0] for line in out.splitlines() if line.strip().endswith("Event messages")][-1])
    rows = int(best("memq decode", [sys.executable, "-c", DECODE_ONLY, str(trace)]).strip())
    converter = entry_point("ctf2perfetto")
    if converter:
        pftrace = OUT / "bench.pftrace"
        command = [converter, str(trace), "-o", str(pftrace), "--quiet"]
        sides = [("ctf2perfetto", REPO)] + ([("baseline ctf2perfetto", args.baseline)] if args.baseline else [])
        runs: dict[str, list] = {name: [] for name, _ in sides}
        try:
            for _ in range(args.repeat):  # interleaved run by run, so both sides see the same machine load
                for name, where in sides:
                    runs[name].append(run_child(command, pftrace, where))
            for name, measured in runs.items():
                keep_best(name, measured)
        except RuntimeError as exc:
            print(f"ctf2perfetto: not measured ({exc})", file=sys.stderr)

    base, base_cpu, _rss = results["babeltrace2 counter"]
    print(f"trace: {trace} ({events:,} events, {rows:,} rows, "
          f"{sum(f.stat().st_size for f in dirs[0].iterdir() if f.is_file()) / 2**20:.0f} MiB)")
    print(f"load average before: {load[0]:.2f} (the machine is shared: best of {args.repeat} runs)")
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
