"""Fuzz runner: `python -m support.fuzz_run BASE SEED COUNT WORKDIR`.

COUNT corruptions of the trace BASE (1 to 3 random mutations each, support.hostile.mutate),
each converted with and without --salvage through the real CLI entry
(ctf2perfetto.cli.convert.main), each run in a process of its own forked from this one (as a
command runs: libbabeltrace2 dying on event data memq does not check yet ends the process with
one line and exit 1, decode.py's crash guard; a fork costs no start-up). Prints `start N`
before each case and one JSON line after it: what was done, the exit codes and stderr lines.
A run that aborts has a negative exit code; a case that hangs is the last `start` line the
test sees.
"""
from __future__ import annotations

import json
import os
import random
import shutil
import sys
import tempfile
from pathlib import Path

from ctf2perfetto.cli.convert import main as convert
from support.hostile import TraceCopy, mutate


def run_case(base: Path, work: Path, rng: random.Random, number: int) -> dict:
    copy = TraceCopy.of(base, work / f"case{number}")
    done = [mutate(copy, rng) for _ in range(rng.choice([1, 1, 2, 3]))]
    result = {"case": number, "mutations": done, "runs": []}
    for extra in ([], ["--salvage"]):
        out = work / f"case{number}.pftrace"
        code, stderr = _forked(lambda: convert([str(copy.root), "-o", str(out), "-q", *extra]))
        result["runs"].append({"salvage": bool(extra), "rc": code, "stderr": stderr, "output": out.is_file()})
        out.unlink(missing_ok=True)
    shutil.rmtree(copy.root)
    return result


def _forked(run) -> tuple[int, list[str]]:
    """`run()` in a child process: its exit code (negative: the signal that ended it) and its stderr lines."""
    with tempfile.TemporaryFile() as err:
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:  # the child: stderr to the file, the code as the exit status, nothing else of this process
            code = 70
            try:
                os.dup2(err.fileno(), 2)
                code = run()
            finally:
                sys.stderr.flush()
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        err.seek(0)
        return os.waitstatus_to_exitcode(status), err.read().decode(errors="replace").splitlines()


def main(argv: list[str]) -> int:
    base, seed, count, work = Path(argv[0]), int(argv[1]), int(argv[2]), Path(argv[3])
    rng = random.Random(seed)
    for number in range(count):
        print(f"start {number}", flush=True)
        print(json.dumps(run_case(base, work, rng, number)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
