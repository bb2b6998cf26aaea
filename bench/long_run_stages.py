"""Long runs, the pipeline's side: how fast the analyses are, and how much memory every
stage takes on a long recording.

  analyses   examples/train_cpu.py --steps N (default 200) untraced (median of --repeat runs), then
             recorded with the defaults and converted; each of `memq duplicated | redundant | summary |
             leaks` on it, as a user runs it (a fresh process: start-up, loading the trace, the query),
             median of --repeat. Goal: each <= 0.2x the untraced command.
  long       a steady GPU-offload loop on the fake HIP runtime (examples/hip_offload.py) and a CPU
             training loop (examples/train_cpu.py) recorded together for --minutes (default 30) with the
             defaults; the CTF size (goal: under 1 GiB), then convert and each analysis with its wall time
             and peak memory (RSS of its process). With --compare M the same for a recording of M minutes
             first, and the ratios: converting must not grow with run length beyond live allocations (the
             embedded trace_processor holds the whole trace, so the analyses grow with its size: their
             memory is printed per MiB of trace too). --reuse DIR converts and analyses the recordings a
             --keep DIR kept (long-<M>min) instead of recording again: the same traces under other code.

  ranges     ranges of one long recording (DIR, e.g. one `long --keep` kept) converted with
             ctf2perfetto --from/--to: --minutes (default 5) at its start, middle and end, each converted
             and analysed (wall time, peak memory, .pftrace size). Goal: the same memory per byte of the
             range's trace wherever the range lies, i.e. bounded by the range and the allocations live, not
             by the run before it.
  parts      the whole run's figures of recordings (DIR ..., e.g. long-5min and long-30min that `long
             --keep` kept) with `memq NAME DIR --parts` (--minutes, default 5): each analysis's wall time
             and peak memory, against the same analysis of the whole .pftrace (converted once) in the same
             run, whose output it must equal. Goal: the peak memory of --parts the same for a recording
             6x as long (bounded by a part and the allocations live, not by the run).
  partcost   what the parts of one recording (DIR) cost to convert (`--parts SEC`, default 5): each part
             decoding its own packets from the Lead one pass made (plan() with that pass) against each
             converted from the recording's start (the same Range without its Lead), the two alternated
             part by part in one process, --repeat times (medians); the ratio of the conversions and of
             plan + conversions. With --before CHECKOUT, also `memq redundant DIR --parts SEC` total wall
             time of that checkout against this one, alternated, --repeat times each (medians), same
             --workers (default 1: the conversion's own cost, not the cores).
  writer     the converter's model and writer alone (no LTTng, nothing else on the machine in the
             figure) on a synthetic steady copy loop (alloc, HtoD, DtoH, free at one address) of --steps
             and 8x that: peak memory of each (a process each) and their ratio; goal: flat (<= 1.2x).

    python3 bench/long_run_stages.py analyses [--steps 200] [--repeat 3]
    python3 bench/long_run_stages.py long [--minutes 30] [--compare 5] [--keep DIR | --reuse DIR]
    python3 bench/long_run_stages.py ranges DIR [--minutes 5]
    python3 bench/long_run_stages.py parts DIR [DIR ...] [--minutes 5] [--no-whole]
    python3 bench/long_run_stages.py partcost DIR [--parts 5] [--repeat 3] [--before CHECKOUT] [--workers 1]
    python3 bench/long_run_stages.py writer [--steps 400000]

Wall-clock figures on a shared machine: compare ratios, and say the load (printed) beside them.
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

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

MEMQ = [sys.executable, "-m", "ctf2perfetto"]
CONVERT = [sys.executable, "-m", "ctf2perfetto.cli.convert"]
ANALYSES = ("duplicated", "redundant", "summary", "leaks")
GOAL_ANALYSIS = 0.2
GOAL_CTF_BYTES = 1 << 30
MiB = 1 << 20


class Failed(Exception):
    """A measured command failed: its last line of stderr."""


def measured(argv: list[str], env: dict[str, str]) -> tuple[float, int]:
    """(wall seconds, peak RSS bytes) of one command, its own process only (wait4)."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise Failed(f"exit {proc.returncode}: {(err.strip().splitlines() or ['no message'])[-1]}")
    return seconds, usage.ru_maxrss * 1024


def environment() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "OPENBLAS_NUM_THREADS": "1"}


def ctf_bytes(trace: Path) -> int:
    return sum(p.stat().st_size for p in (trace / "ust").rglob("*") if p.is_file())


def command_pids(trace: Path) -> set[int]:
    """The recorded command's processes: those that wrote memq's exit report into this recording."""
    record = json.loads((trace / "memq-record.json").read_text())
    return {int(r["pid"]) for r in record.get("reach", [])}


def strangers(trace: Path) -> int:
    """Events of processes that are not the command's. LTTng's per-user buffers record every process of
    the user that registers while the session runs: on a shared machine, other people's programs."""
    from ctf2perfetto.ctf.decode import decode

    own = np.array(sorted(command_pids(trace)), np.int64)
    with decode(trace) as batches:
        return sum(int((~np.isin(b["pid"], own)).sum()) for b in batches)


def own_trace(trace: Path, out: Path) -> None:
    """Write the .pftrace of the command's processes only (what the goal is about)."""
    from ctf2perfetto.ctf.decode import decode
    from ctf2perfetto.convert.write import write_trace

    own = np.array(sorted(command_pids(trace)), np.int64)
    with decode(trace) as batches:
        mine = (b.take(np.isin(b["pid"], own)) for b in batches)
        write_trace(mine, lambda: batches.info, out)


def stage_report(trace: Path, env: dict[str, str], span: tuple[float, float] | None = None) -> list[dict]:
    """Convert `trace` (only seconds `span` of it: ctf2perfetto --from/--to) and run each analysis on the result:
    name, seconds, peak bytes."""
    out = trace.with_suffix(".pftrace" if span is None else ".range.pftrace")
    rows = []
    limits = [] if span is None else ["--from", f"{span[0]:g}", "--to", f"{span[1]:g}"]
    seconds, peak = measured([*CONVERT, str(trace), "-o", str(out), "-q", *limits], env)
    rows.append({"stage": "convert", "seconds": seconds, "peak": peak})
    foreign = strangers(trace)
    if foreign:
        print(f"  note: {foreign:,} events of other processes of this user are in the recording (shared machine); "
              "the stages ran on all of it", file=sys.stderr)
    for name in ANALYSES:
        try:  # a failing stage is a finding: reported, and the others still run
            seconds, peak = measured([*MEMQ, name, str(out), "--format", "json"], env)
            rows.append({"stage": name, "seconds": seconds, "peak": peak})
        except Failed as exc:
            rows.append({"stage": name, "seconds": float("nan"), "peak": 0, "failed": str(exc)})
    for row in rows:
        row["trace"] = out.stat().st_size
    return rows


def record(trace: Path, command: list[str], env: dict[str, str], extra: list[str]) -> float:
    shutil.rmtree(trace, ignore_errors=True)
    seconds, _ = measured([*MEMQ, "record", "-o", str(trace), *extra, "--", *command], env)
    return seconds


# -- analyses against the untraced command ----------------------------------------------------
def analyses_goal(args: argparse.Namespace, work: Path) -> int:
    env = environment()
    command = [sys.executable, str(REPO / "examples" / "train_cpu.py"), "--steps", str(args.steps)]
    plain = [measured(command, env)[0] for _ in range(args.repeat)]
    trace = work / "train"
    record(trace, command, env, args.record_args)
    foreign = strangers(trace)
    if foreign:  # other people's programs recorded too: the goal is about this command's trace
        print(f"  note: {foreign:,} events of other processes of this user left out of the trace analysed",
              file=sys.stderr)
        own_trace(trace, trace.with_suffix(".pftrace"))
    else:
        measured([*CONVERT, str(trace), "-o", str(trace.with_suffix(".pftrace")), "-q"], env)
    base = statistics.median(plain)
    print(f"examples/train_cpu.py --steps {args.steps}: untraced {base:.2f} s (median of {args.repeat}: "
          f"{', '.join(f'{x:.2f}' for x in plain)}); trace {ctf_bytes(trace) / MiB:.1f} MiB of CTF, "
          f"{trace.with_suffix('.pftrace').stat().st_size / MiB:.1f} MiB .pftrace; load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    for name in ANALYSES:
        runs = [measured([*MEMQ, name, str(trace.with_suffix(".pftrace")), "--format", "json"], env)
                for _ in range(args.repeat)]
        t = statistics.median(r[0] for r in runs)
        peak = max(r[1] for r in runs)
        ratio = t / base
        print(f"  memq {name:<10} {t:6.2f} s = {ratio:.3f}x the untraced command (peak {peak / MiB:.0f} MiB); "
              f"goal <= {GOAL_ANALYSIS}x: {'met' if ratio <= GOAL_ANALYSIS else 'NOT met'}")
    return 0


# -- the long recording ---------------------------------------------------------------------------
def long_recording(seconds: float, trace: Path, fake_dir: Path, env: dict[str, str], extra: list[str]) -> float:
    """Both loops under one `memq record`, for `seconds`."""
    offload = f"{sys.executable} {REPO / 'examples' / 'hip_offload.py'} --hip-lib {fake_dir / 'libamdhip64.so'} " \
              f"--seconds {seconds}"
    train = f"{sys.executable} {REPO / 'examples' / 'train_cpu.py'} --seconds {seconds}"
    return record(trace, ["sh", "-c", f"{offload} & {train}; wait"], env, extra)


def long_goal(args: argparse.Namespace, work: Path) -> int:
    from support.fakes import build_fakes

    env = environment()
    fakes = None if args.reuse else build_fakes(work / "fakes")
    runs = []
    for minutes in ([args.compare] if args.compare else []) + [args.minutes]:
        trace = work / f"long-{minutes:g}min"
        if args.reuse:
            shutil.copytree(args.reuse / trace.name, trace)
            took = json.loads((trace / "memq-record.json").read_text())["duration_s"]
        else:
            print(f"recording {minutes:g} minutes ...", file=sys.stderr, flush=True)
            took = long_recording(minutes * 60, trace, fakes.dir, env, args.record_args)
        size = ctf_bytes(trace)
        print(f"converting and analysing the {minutes:g}-minute recording ...", file=sys.stderr, flush=True)
        runs.append((minutes, took, size, stage_report(trace, env)))
        if args.keep:
            args.keep.mkdir(parents=True, exist_ok=True)
            for path in (trace, trace.with_suffix(".pftrace")):
                target = args.keep / path.name
                shutil.rmtree(target, ignore_errors=True) if target.is_dir() else target.unlink(missing_ok=True)
                shutil.move(str(path), str(target))
    print(f"steady offload loop (fake HIP) + CPU training loop; load average {os.getloadavg()[0]:.1f} on "
          f"{os.cpu_count()} CPUs")
    for minutes, took, size, rows in runs:
        print(f"  {minutes:g} min: recorded in {took:.0f} s, {size / MiB:.0f} MiB of CTF (goal < 1 GiB: "
              f"{'met' if size < GOAL_CTF_BYTES else 'NOT met'}), {rows[0]['trace'] / MiB:.0f} MiB .pftrace")
        for row in rows:
            if "failed" in row:
                print(f"    {row['stage']:<10} FAILED ({row['failed']})")
                continue
            per = f", {row['peak'] / row['trace']:.1f}x the trace" if row["stage"] != "convert" else ""
            print(f"    {row['stage']:<10} {row['seconds']:7.1f} s  peak {row['peak'] / MiB:7.0f} MiB{per}")
    if len(runs) == 2:
        (m0, _, s0, r0), (m1, _, s1, r1) = runs
        print(f"  {m1:g} min against {m0:g} min: {m1 / m0:.1f}x the run, {s1 / s0:.1f}x the CTF")
        for a, b in zip(r0, r1):
            if a["peak"] and b["peak"]:
                print(f"    {a['stage']:<10} peak memory {b['peak'] / a['peak']:.2f}x")
    return 0


# -- ranges of one long recording --------------------------------------------------------------------
def ranges_goal(args: argparse.Namespace, work: Path) -> int:
    env = environment()
    trace = work / args.trace.name
    shutil.copytree(args.trace, trace)
    total = json.loads((trace / "memq-record.json").read_text())["duration_s"]
    length = args.minutes * 60
    if length >= total:
        raise SystemExit(f"{args.trace}: the recording lasts {total:.0f} s, not more than --minutes {args.minutes:g}")
    starts = {"start": 0.0, "middle": (total - length) / 2, "end": total - length - 1}
    reports = {}
    for where, start in starts.items():
        print(f"converting and analysing {start:.0f} s to {start + length:.0f} s ...", file=sys.stderr, flush=True)
        reports[where] = (start, stage_report(trace, env, (start, start + length)))
    print(f"{args.minutes:g}-minute ranges of a {total / 60:.0f}-minute recording ({ctf_bytes(trace) / MiB:.0f} MiB "
          f"of CTF); load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    for where, (start, rows) in reports.items():
        print(f"  {where:<6} {start:6.0f} s to {start + length:6.0f} s: {rows[0]['trace'] / MiB:.0f} MiB .pftrace")
        for row in rows:
            if "failed" in row:
                print(f"    {row['stage']:<10} FAILED ({row['failed']})")
                continue
            print(f"    {row['stage']:<10} {row['seconds']:7.1f} s  peak {row['peak'] / MiB:7.0f} MiB, "
                  f"{row['peak'] / row['trace']:.1f}x the range's .pftrace")
    # The run's event rate varies, so ranges of one length differ in size: what must not change with where the
    # range lies is the memory per byte of the range's own trace (the run before it costs only its live set).
    first, last = reports["start"][1], reports["end"][1]
    print(f"  end against start: {last[0]['trace'] / first[0]['trace']:.2f}x the .pftrace; per MiB of it:")
    for a, b in zip(first, last):
        if a["peak"] and b["peak"]:
            print(f"    {a['stage']:<10} peak memory {(b['peak'] / b['trace']) / (a['peak'] / a['trace']):.2f}x, "
                  f"time {(b['seconds'] / b['trace']) / (a['seconds'] / a['trace']):.2f}x")
    return 0


# -- the whole run in parts -----------------------------------------------------------------------
def _same_output(a: str, b: str) -> bool:
    """Two `--format json` outputs equal, floats to 1e-9 and rows in any order (the tests check the order)."""
    def norm(value):
        if isinstance(value, float):
            return float(f"{value:.9e}")
        if isinstance(value, dict):
            return {k: norm(v) for k, v in value.items()}
        if isinstance(value, list):
            return sorted((norm(v) for v in value), key=repr)
        return value

    return norm(json.loads(a)) == norm(json.loads(b))


def _output(argv: list[str], env: dict[str, str]) -> tuple[float, int, str]:
    """measured(), with the command's standard output."""
    with tempfile.TemporaryFile() as out:
        start = time.perf_counter()
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.DEVNULL)
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - start
        if os.waitstatus_to_exitcode(status) != 0:
            raise Failed(f"exit {os.waitstatus_to_exitcode(status)}: {' '.join(argv)}")
        out.seek(0)
        return seconds, usage.ru_maxrss * 1024, out.read().decode()


def parts_goal(args: argparse.Namespace, work: Path) -> int:
    env = environment()
    peaks: dict[str, list[int]] = {name: [] for name in ANALYSES}
    for source in args.traces:
        trace = work / source.name
        shutil.copytree(source, trace)
        total = json.loads((trace / "memq-record.json").read_text())["duration_s"]
        print(f"{source.name}: a {total / 60:.1f}-minute recording ({ctf_bytes(trace) / MiB:.0f} MiB of CTF), "
              f"parts of {args.minutes:g} minutes; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs",
              flush=True)
        whole = trace.with_suffix(".pftrace")
        if args.whole:
            seconds, peak = measured([*CONVERT, str(trace), "-o", str(whole), "-q"], env)
            print(f"  whole trace: convert {seconds:.1f} s, peak {peak / MiB:.0f} MiB, "
                  f"{whole.stat().st_size / MiB:.0f} MiB .pftrace", flush=True)
        for name in ANALYSES:
            seconds, peak, got = _output([*MEMQ, name, str(trace), "--parts", f"{args.minutes:g}m", "--format",
                                          "json"], env)
            peaks[name].append(peak)
            line = f"  memq {name:<10} --parts: {seconds:6.1f} s, peak {peak / MiB:5.0f} MiB"
            if args.whole:
                w_seconds, w_peak, expect = _output([*MEMQ, name, str(whole), "--format", "json"], env)
                line += (f"; whole trace: {w_seconds:6.1f} s, peak {w_peak / MiB:5.0f} MiB; parts/whole: time "
                         f"{seconds / w_seconds:.2f}x, memory {peak / w_peak:.2f}x; output "
                         f"{'the same' if _same_output(got, expect) else 'DIFFERENT'}")
            print(line, flush=True)
        shutil.rmtree(trace)
        whole.unlink(missing_ok=True)
    if len(args.traces) > 1:
        print("the last recording against the first, peak memory with --parts (goal: about 1x):")
        for name, values in peaks.items():
            print(f"  memq {name:<10} {values[-1] / values[0]:.2f}x")
    return 0


# -- what the parts cost to convert ----------------------------------------------------------------
class _Stages:
    """parts.plan's `stage`: the seconds of each stage it runs, by the start of its message."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def __call__(self, message: str):
        import contextlib

        @contextlib.contextmanager
        def timed():
            start = time.perf_counter()
            yield
            key = message.split(" (")[0].split(" at each")[0]
            self.seconds[key] = self.seconds.get(key, 0.0) + time.perf_counter() - start
        return timed()


def partcost_goal(args: argparse.Namespace, work: Path) -> int:
    from ctf2perfetto.analysis.parts import plan
    from ctf2perfetto.convert.ranges import Range
    from ctf2perfetto.pipeline import convert

    trace = args.trace
    print(f"{trace}: {ctf_bytes(trace) / MiB:.0f} MiB of CTF, parts of {args.parts:g} s; load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs", flush=True)
    plans, own, from_start, rows_own, rows_start = [], [], [], [], []
    for _ in range(args.repeat):
        stages = _Stages()
        start = time.perf_counter()
        cuts = plan(trace, args.parts, stages)
        plans.append((time.perf_counter() - start, stages.seconds))
        mine = theirs = 0.0
        decoded_own = decoded_start = 0
        for i, span in enumerate(cuts.spans):
            out = work / "part.pftrace"
            for with_lead in ((True, False) if i % 2 == 0 else (False, True)):
                start = time.perf_counter()
                summary = convert(trace, out, span=span if with_lead else Range(span.start, span.end))
                took = time.perf_counter() - start
                if with_lead:
                    mine, decoded_own = mine + took, decoded_own + summary.range_report.decoded
                else:
                    theirs, decoded_start = theirs + took, decoded_start + summary.range_report.decoded
        own.append(mine)
        from_start.append(theirs)
        rows_own.append(decoded_own)
        rows_start.append(decoded_start)
    total, steps = plans[len(plans) // 2]
    lead_pass = sum(v for k, v in steps.items() if k.startswith("carrying"))
    mine, theirs = statistics.median(own), statistics.median(from_start)
    print(f"  {len(cuts.spans)} parts{'' if cuts.note is None else ' (no Leads: ' + cuts.note + ')'}; plan "
          f"{total:.1f} s, of which the Leads' pass {lead_pass:.1f} s (medians of {args.repeat})")
    print(f"  converting the parts: from their Leads {mine:.1f} s, {rows_own[-1]:,} rows decoded; each from the "
          f"recording's start {theirs:.1f} s, {rows_start[-1]:,} rows decoded: {mine / theirs:.2f}x the time, "
          f"{rows_own[-1] / rows_start[-1]:.2f}x the rows")
    print(f"  plan + conversions: {(total + mine) / (total - lead_pass + theirs):.2f}x "
          f"({total + mine:.1f} s against {total - lead_pass + theirs:.1f} s)")
    if args.before is not None:
        walls: dict[str, list[float]] = {"before": [], "after": []}
        outputs: dict[str, str] = {}
        argv = [*MEMQ, "redundant", str(trace), "--parts", f"{args.parts:g}", "--workers", str(args.workers),
                "--format", "json"]
        for r in range(args.repeat):
            for side in (("before", "after") if r % 2 == 0 else ("after", "before")):
                env = {**environment(), "PYTHONPATH": str(args.before if side == "before" else REPO)}
                seconds, _peak, outputs[side] = _output(argv, env)
                walls[side].append(seconds)
        before, after = statistics.median(walls["before"]), statistics.median(walls["after"])
        print(f"  memq redundant --parts {args.parts:g} --workers {args.workers}: {args.before} {before:.1f} s, "
              f"this checkout {after:.1f} s: {after / before:.2f}x; output "
              f"{'the same' if outputs['before'] == outputs['after'] else 'DIFFERENT'}; load average "
              f"{os.getloadavg()[0]:.1f}")
    return 0


# -- the writer alone ------------------------------------------------------------------------------
GOAL_FLAT = 1.2


def synthetic_loop(steps: int, out: Path) -> None:
    """write_trace over `steps` of (hipMalloc, hipMemcpy HtoD, hipMemcpy DtoH, hipFree) at one device
    address, copying with one host buffer that no event allocates (untracked)."""
    from ctf2perfetto.events import EventBatch, EventKind as K, MemKind as M, TraceInfo
    from ctf2perfetto.convert.write import write_trace

    names = ["hipMalloc", "hipMemcpy", "hipFree"]
    pattern = {"kind": [K.GPU_ALLOC, K.GPU_COPY, K.GPU_COPY, K.GPU_FREE], "api": [0, 1, 1, 2],
               "mem": [M.DEVICE, 0, 0, M.DEVICE], "ptr": [0x7000, 0x7000, 0x1000, 0x7000],
               "src": [0, 0x1000, 0x7000, 0], "copy_kind": [-1, 1, 2, -1]}

    def batches(per: int = 16384):
        t = 1000
        for first in range(0, steps, per):
            n = min(per, steps - first)
            batch = EventBatch.empty(4 * n, names)
            c = batch.columns
            c["begin"][:] = t + np.arange(4 * n) * 100
            c["ts"][:] = c["begin"] + 50
            c["pid"][:] = c["tid"][:] = 42
            c["size"][:] = 4096
            for column, values in pattern.items():
                c[column][:] = np.tile(np.array(values, c[column].dtype), n)
            t += 4 * n * 100
            yield batch

    write_trace(batches(), TraceInfo(), out)


def writer_goal(args: argparse.Namespace, work: Path) -> int:
    env = environment()
    peaks = []
    for steps in (args.steps, 8 * args.steps):
        code = (f"import sys; sys.path.insert(0, {str(REPO / 'bench')!r}); import long_run_stages as b; "
                f"from pathlib import Path; b.synthetic_loop({steps}, Path({str(work / 'loop.pftrace')!r}))")
        seconds, peak = measured([sys.executable, "-c", code], env)
        peaks.append(peak)
        print(f"  {steps:>10,} steps ({4 * steps:,} events, {2 * steps:,} copies): {seconds:6.1f} s, "
              f"peak {peak / MiB:.0f} MiB")
    ratio = peaks[1] / peaks[0]
    print(f"  8x the run: {ratio:.2f}x the peak memory; goal <= {GOAL_FLAT}x: {'met' if ratio <= GOAL_FLAT else 'NOT met'}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what", required=True)
    a = sub.add_parser("analyses", help="each analysis against the untraced command (goal <= 0.2x)")
    a.add_argument("--steps", type=int, default=200, help="training steps of examples/train_cpu.py (default 200)")
    a.add_argument("--repeat", type=int, default=3, help="runs of each command; the median counts (default 3)")
    g = sub.add_parser("long", help="a long recording: CTF size, and every stage's time and peak memory")
    g.add_argument("--minutes", type=float, default=30.0, help="length of the recording (default 30)")
    g.add_argument("--compare", type=float, help="also a recording this many minutes long, and the ratios")
    kept = g.add_mutually_exclusive_group()
    kept.add_argument("--keep", type=Path, help="keep the recordings and their .pftrace files here")
    kept.add_argument("--reuse", type=Path, help="convert and analyse the recordings --keep kept in this "
                      "directory (long-<M>min) instead of recording")
    r = sub.add_parser("ranges", help="ranges of one long recording at its start, middle and end (ctf2perfetto "
                       "--from/--to): their memory must not depend on where they lie")
    r.add_argument("trace", type=Path, metavar="DIR", help="a memq recording (e.g. long-30min that long --keep kept)")
    r.add_argument("--minutes", type=float, default=5.0, help="length of each range (default 5)")
    p = sub.add_parser("parts", help="the analyses with --parts against the whole trace: output, time, memory")
    p.add_argument("traces", type=Path, nargs="+", metavar="DIR", help="memq recordings (e.g. long-5min "
                   "long-30min that long --keep kept)")
    p.add_argument("--minutes", type=float, default=5.0, help="length of each part (default 5)")
    p.add_argument("--no-whole", dest="whole", action="store_false",
                   help="skip the whole trace (the reference: its analyses take minutes and GiB on a long run)")
    c = sub.add_parser("partcost", help="converting the parts of a recording: from their Leads against each from "
                       "the recording's start")
    c.add_argument("trace", type=Path, metavar="DIR", help="a memq recording")
    c.add_argument("--parts", type=float, default=5.0, help="length of each part in seconds (default 5)")
    c.add_argument("--repeat", type=int, default=3, help="runs of each side; the median counts (default 3)")
    c.add_argument("--before", type=Path, help="a checkout of memq to time `memq redundant --parts` against")
    c.add_argument("--workers", type=int, default=1, help="--workers of those commands (default 1)")
    w = sub.add_parser("writer", help="the writer's peak memory on a synthetic copy loop, and 8x as long")
    w.add_argument("--steps", type=int, default=400_000,
                   help="steps of the synthetic copy loop; the second run has 8x as many (default 400000)")
    for cmd in (a, g):
        cmd.add_argument("--record-args", nargs=argparse.REMAINDER, default=[],
                       help="extra `memq record` options (the rest of the line), e.g. --api hip,cuda")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="memq-long-"))
    try:
        run = {"analyses": analyses_goal, "long": long_goal, "ranges": ranges_goal, "parts": parts_goal,
               "partcost": partcost_goal, "writer": writer_goal}[args.what]
        return run(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
