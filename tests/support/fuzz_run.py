"""Fuzz runner: `python -m support.fuzz_run BASE SEED COUNT WORKDIR`.

COUNT corruptions of the trace BASE (1 to 3 random mutations each, support.hostile.mutate),
each converted in this process with and without --salvage through the real CLI entry
(ctf2perfetto.cli.convert.main). Prints `start N` before each case and one JSON line after
it: what was done, the exit codes and stderr lines. A case that aborts the process or hangs
is the last `start` line the test sees.
"""
from __future__ import annotations

import contextlib
import io
import json
import random
import shutil
import sys
from pathlib import Path

from ctf2perfetto.cli.convert import main as convert
from support.hostile import TraceCopy, mutate


def run_case(base: Path, work: Path, rng: random.Random, number: int) -> dict:
    copy = TraceCopy.of(base, work / f"case{number}")
    done = [mutate(copy, rng) for _ in range(rng.choice([1, 1, 2, 3]))]
    result = {"case": number, "mutations": done, "runs": []}
    for extra in ([], ["--salvage"]):
        out = work / f"case{number}.pftrace"
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            code = convert([str(copy.root), "-o", str(out), "-q", *extra])
        result["runs"].append({"salvage": bool(extra), "rc": code, "stderr": err.getvalue().splitlines(),
                               "output": out.is_file()})
        out.unlink(missing_ok=True)
    shutil.rmtree(copy.root)
    return result


def main(argv: list[str]) -> int:
    base, seed, count, work = Path(argv[0]), int(argv[1]), int(argv[2]), Path(argv[3])
    rng = random.Random(seed)
    for number in range(count):
        print(f"start {number}", flush=True)
        print(json.dumps(run_case(base, work, rng, number)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
