"""`memq report` against one analysis on the same trace (goal: the report in the time of one analysis + 10%).

Each command runs in a fresh process (load, convert if a directory, analyse, print), twice in turn; the faster of
each pair counts. The reference is the slower of `memq duplicated` and `memq redundant` (each computes the mirrors
the report shares between its figures). Prints every time (wall, and the CPU seconds of the command and what it
waited for: steadier than wall on a loaded machine) and the ratio report / reference of each.

    python3 bench/report_speed.py TRACE            # a .pftrace or an LTTng trace directory
    python3 bench/report_speed.py --offload 20     # records examples/hip_offload.py --seconds 20 on the fake HIP
    python3 bench/report_speed.py TRACE --checkout OTHER   # also OTHER's memq (e.g. a worktree of main), in turn
"""
from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def timed(argv: list[str], cwd: Path) -> tuple[float, float]:
    """Wall and CPU (user + system) seconds of `argv`."""
    def cpu() -> float:
        used = resource.getrusage(resource.RUSAGE_CHILDREN)
        return used.ru_utime + used.ru_stime

    start, start_cpu = time.monotonic(), cpu()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=cwd)
    return time.monotonic() - start, cpu() - start_cpu


def record_offload(seconds: float, tmp: Path) -> Path:
    sys.path.insert(0, str(REPO / "tests"))
    from support.fakes import build_fakes

    fakes = build_fakes(tmp / "fakes")
    subprocess.run([sys.executable, "-m", "ctf2perfetto", "record", "-o", str(tmp / "offload"), "--api", "hip,libc",
                    "--", sys.executable, str(REPO / "examples" / "hip_offload.py"), "--hip-lib",
                    str(fakes.hip_runtime), "--seconds", str(seconds), "--weights-mib", "1"], check=True,
                   stdout=subprocess.DEVNULL)
    out = tmp / "offload.pftrace"
    subprocess.run([sys.executable, "-m", "ctf2perfetto", "convert", str(tmp / "offload"), "-o", str(out)], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", nargs="?", help="trace to analyse")
    parser.add_argument("--offload", type=float, metavar="SEC", help="record the offload loop for SEC seconds first")
    parser.add_argument("--checkout", type=Path, action="append", default=[], metavar="DIR",
                        help="another checkout whose memq runs the same commands, alternating with this one's "
                             "(each command of each checkout in turn); repeatable")
    args = parser.parse_args()
    checkouts = [REPO] + [c.resolve() for c in args.checkout]
    with tempfile.TemporaryDirectory(prefix="memq-report-bench-") as tmp:
        trace = str(Path(record_offload(args.offload, Path(tmp)) if args.offload else args.trace).resolve())
        memq = [sys.executable, "-m", "ctf2perfetto"]
        commands = {"duplicated": memq + ["duplicated", trace], "redundant": memq + ["redundant", trace],
                    "report": memq + ["report", trace, "-o", str(Path(tmp) / "report.html")]}
        best: dict[tuple[Path, str], float] = {}
        best_cpu: dict[tuple[Path, str], float] = {}
        for _ in range(2):
            for checkout in checkouts:
                for name, argv in commands.items():
                    key = (checkout, name)
                    secs, cpu = timed(argv, checkout)
                    best[key] = min(best.get(key, float("inf")), secs)
                    best_cpu[key] = min(best_cpu.get(key, float("inf")), cpu)
                    print(f"  {checkout.name} {name}: {secs:.2f} s, {cpu:.2f} s CPU (load average "
                          f"{os.getloadavg()[0]:.1f})", flush=True)
        for checkout in checkouts:
            print(f"{checkout} (load average {os.getloadavg()[0]:.1f} at the end)")
            for name in commands:
                print(f"{name:>10}: {best[(checkout, name)]:7.2f} s, {best_cpu[(checkout, name)]:7.2f} s CPU")
            for what, of in (("", best), ("CPU: ", best_cpu)):
                reference = max(of[(checkout, "duplicated")], of[(checkout, "redundant")])
                report = of[(checkout, "report")]
                print(f"{what}report / slower analysis = {report / reference:.2f} (goal <= 1.10); report / "
                      f"(duplicated + redundant) = "
                      f"{report / (of[(checkout, 'duplicated')] + of[(checkout, 'redundant')]):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
