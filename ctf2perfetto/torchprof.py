"""Run a Python script under the PyTorch profiler and write its Kineto trace.

    memq record -o trace/ -- python3 -m ctf2perfetto.torchprof -o trace/profile.json train.py --steps 50
    ctf2perfetto trace/ --kineto trace/profile.json -o out.pftrace

So both traces come from one run without touching the script: the profiler
(CPU, plus CUDA when torch sees a GPU; memory events on) spans the whole script,
which runs as `__main__` with its own argv. The trace is written even when the
script fails; the exit status is the script's.
"""
from __future__ import annotations

import argparse
import runpy
import sys
from pathlib import Path

from ctf2perfetto.cli import run_command
from ctf2perfetto.errors import MemqError, UsageError
from ctf2perfetto.outfiles import AtomicOutput, check_output


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python3 -m ctf2perfetto.torchprof",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("-o", "--output", type=Path, default=Path("profile.json"), metavar="PROFILE.json",
                        help="Kineto trace to write (default profile.json; .gz compresses it)")
    parser.add_argument("--no-memory", action="store_true", help="leave out the profiler's [memory] events")
    parser.add_argument("--activities", metavar="LIST",
                        help="what the profiler records, comma-separated: cpu (operators), cuda (kernels, copies, "
                             "runtime calls); default cpu, plus cuda when torch sees a GPU. A long run's trace is "
                             "much smaller with cuda alone (its copies are what memq's are compared with)")
    parser.add_argument("script", type=Path, help="the Python script to run")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="the script's arguments")
    return parser


ACTIVITIES = ("cpu", "cuda")


def _activities(spec: str | None) -> list[str] | None:
    """--activities as a list of names (None: the default), or a usage error naming what is wrong."""
    if spec is None:
        return None
    names = [n.strip() for n in spec.split(",") if n.strip()]
    bad = [n for n in names if n not in ACTIVITIES]
    if bad or not names:
        raise UsageError(f"--activities {spec}: expected a comma-separated list of {', '.join(ACTIVITIES)}")
    return names


def profile_script(script: Path, args: list[str], output: Path, *, memory: bool = True,
                   activities: list[str] | None = None) -> int:
    """Run `script` with `args` under the profiler (`activities`: names of ACTIVITIES; None: cpu, plus cuda
    when torch sees a GPU), export to `output`; the script's exit status."""
    if not script.is_file():
        raise UsageError(f"{script}: script not found")
    check_output(output, inputs=[script])
    try:
        import torch
        from torch.profiler import ProfilerActivity, profile
    except ImportError as exc:
        raise MemqError(f"the PyTorch profiler is not available: {exc}") from None
    if activities is None:
        activities = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    elif "cuda" in activities and not torch.cuda.is_available():
        raise UsageError("--activities cuda: torch sees no CUDA device")
    activities = [ProfilerActivity.CPU if n == "cpu" else ProfilerActivity.CUDA for n in activities]
    sys.argv = [str(script), *args]
    status: int | str | None = 0
    with profile(activities=activities, profile_memory=memory) as prof:
        try:
            runpy.run_path(str(script), run_name="__main__")
        except SystemExit as exc:
            status = exc.code
    with AtomicOutput(output, inputs=[script]) as target:  # the name keeps .gz: torch compresses by it
        prof.export_chrome_trace(str(target.path))
        target.commit()
    print(f"torchprof: wrote {output}", file=sys.stderr)
    if isinstance(status, str):
        print(status, file=sys.stderr)
        return 1
    return int(status or 0)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    return run_command("torchprof", lambda: profile_script(args.script, args.args, args.output,
                                                           memory=not args.no_memory,
                                                           activities=_activities(args.activities)))


if __name__ == "__main__":
    sys.exit(main())
