"""The issue-11 goals on real recordings: what `memq redundant` says of four training-loop copy patterns,
with content fingerprints (--content sampled, full) and without (--content off), in one run.

Each pattern is tests/fakes/content_work.c on the fake CUDA runtime (its copies move bytes; "kernels"
write the fake device memory directly, untraced), recorded with `memq record --api cuda`:

  staging    4 steps: the CPU writes a new 8 MiB batch into one pinned buffer, uploads it
             goal: 0 repeat, 0 round trip
  reupload   the same 8 MiB batch uploaded twice               goal: 1 repeat, evidence content
  readback   4 steps: a kernel writes new results, read back    goal: 0 redundant
  unchanged  results read back twice, unchanged                 goal: 1 no-op copy

    python3 bench/content_goals.py [--bytes 8388608]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from support.fakes import build_fakes  # noqa: E402

from ctf2perfetto import analyses  # noqa: E402

PATTERNS = {  # name: (steps, goal text, goal check on the totals)
    "staging": (4, "0 repeat, 0 round trip", lambda t: t["repeat"][0] == 0 and t["round_trip"][0] == 0),
    "reupload": (2, "1 repeat (content)", lambda t: t["repeat"][0] == 1 and t["repeat"][1] == 1),
    "readback": (4, "0 redundant", lambda t: t["redundant"][0] == 0),
    "unchanged": (2, "1 no-op copy", lambda t: t["no_op"][0] == 1),
}
MODES = ("off", "sampled", "full")
SHOWN = ("no_op", "repeat", "round_trip", "redundant")


def totals(trace: Path, pid: int) -> dict[str, tuple[int, int]]:
    """Per class: (copies, of which with evidence content) for the workload's process."""
    df = analyses.redundant(trace)
    rows = {r["class"]: r for r in df[df["pid"] == pid].to_dict("records")}
    return {c: (int(rows[c]["count"]), int(rows[c]["content_count"])) if c in rows else (0, 0) for c in SHOWN}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bytes", type=int, default=8 << 20)
    args = parser.parse_args()
    failed = False
    with tempfile.TemporaryDirectory(prefix="memq-goals-") as tmp:
        fakes = build_fakes(Path(tmp) / "fakes")
        print(f"copies per class (of which evidence content), {args.bytes >> 20} MiB copies")
        print(f"{'pattern':<11}{'mode':<9}" + "".join(f"{c:>12}" for c in SHOWN) + "   goal")
        for name, (steps, goal, check) in PATTERNS.items():
            for mode in MODES:
                out = Path(tmp) / f"{name}-{mode}"
                subprocess.run([sys.executable, "-m", "ctf2perfetto", "record", "-o", str(out), "--api", "cuda",
                                "--content", mode, "--", str(fakes.content_work), name, str(steps),
                                str(args.bytes)], check=True, capture_output=True)
                # the workload's process: the one that wrote an exit report (the session may see others)
                pid = json.loads((out / "memq-record.json").read_text())["reach"][0]["pid"]
                got = totals(out, pid)
                met = check(got) if mode != "off" else None
                failed |= met is False
                cells = "".join(f"{f'{n} ({c})':>12}" for n, c in (got[k] for k in SHOWN))
                verdict = "" if met is None else f"   {goal}: {'met' if met else 'NOT met'}"
                print(f"{name:<11}{mode:<9}{cells}{verdict}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
