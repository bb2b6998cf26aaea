"""A 3-rank torchrun job (gloo, CPU) recorded by memq: what `memq record` costs the whole job.

Measures, in one run, `torchrun --standalone --nproc_per_node 3 tests/fakes/ddp_loop.py STEPS` untraced and
under `memq record` (defaults: memq's heap wrappers, --host-min-size 4096; every process of the job, the
launcher included, writes memq:identity once): alternating runs, median of --repeat each; goal <= 1.1x + 1 s.
Then checks the recording names ranks 0..2 and the launcher (memq:identity decoded), and prints the ratio.

    python3 bench/job_record.py [--steps 30] [--repeat 3] [--keep DIR]

Wall-clock on a shared machine: run it when the machine is quiet and compare the ratio, not the seconds; the CPU
seconds of each command (and what it waited for) are printed too, which load changes less.
"""
from __future__ import annotations

import argparse
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from ctf2perfetto.convert.identity import job_processes  # noqa: E402
from ctf2perfetto.ctf.decode import decode  # noqa: E402

LOOP = REPO / "tests" / "fakes" / "ddp_loop.py"
MEMQ = [sys.executable, "-m", "ctf2perfetto"]
GOAL_SLOWDOWN, GOAL_FIXED_S = 1.1, 1.0


CPU: list[float] = []  # CPU seconds (user + system) of each timed command and its children, in call order


def timed(argv: list[str], fresh: Path | None = None) -> float:
    """Wall seconds of `argv`; its CPU seconds (every process it waited for) go to CPU."""
    for attempt in (1, 2):  # torchrun's rendezvous can time out on a machine this loaded: one retry
        if fresh is not None:
            shutil.rmtree(fresh, ignore_errors=True)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        wall = time.perf_counter() - start
        if done.returncode == 0:
            break
        if attempt == 2:
            tail = "\n".join(done.stderr.strip().splitlines()[-15:])
            raise SystemExit(f"{' '.join(argv)}: exit {done.returncode} twice; its last stderr lines:\n{tail}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return wall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--keep", type=Path, default=None, help="keep the last recording here")
    args = parser.parse_args()
    job = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "3", str(LOOP),
           str(args.steps)]
    tmp = Path(tempfile.mkdtemp(prefix="memq-bench-job-"))
    out = args.keep or tmp / "rec"
    plain, traced = [], []
    try:
        for _ in range(args.repeat):
            plain.append(timed(job))
            traced.append(timed([*MEMQ, "record", "-o", str(out), "--", *job], fresh=out))
        with decode(out) as d:
            for _ in d:
                pass
            roles = sorted((i.role, i.rank if i.rank is not None else -1)
                           for i in job_processes(d.info).values())
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    base, rec = statistics.median(plain), statistics.median(traced)
    limit = base * GOAL_SLOWDOWN + GOAL_FIXED_S
    print(f"untraced torchrun (3 ranks, {args.steps} steps): median {base:.2f} s of {plain}")
    print(f"memq record of it:                       median {rec:.2f} s of {traced}")
    print(f"ratio {rec / base:.3f}x, +{rec - base:.2f} s; goal <= {GOAL_SLOWDOWN}x + {GOAL_FIXED_S} s = {limit:.2f} s: "
          f"{'met' if rec <= limit else 'NOT met'}")
    cpu_plain, cpu_traced = statistics.median(CPU[0::2]), statistics.median(CPU[1::2])
    print(f"CPU seconds (user + system, the command and every process it waited for; not the LTTng daemons): "
          f"untraced {cpu_plain:.2f}, memq record {cpu_traced:.2f}: {cpu_traced / cpu_plain:.3f}x")
    print(f"processes identified: {roles}")
    ok = rec <= limit and [r for r in roles if r[0] == "rank"] == [("rank", 0), ("rank", 1), ("rank", 2)] \
        and ("launcher", -1) in roles
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
