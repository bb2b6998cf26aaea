"""Whether two checkouts give the same duplicated-bytes outputs for a trace: every table and view of
sql/memq/duplicated.sql and duplicated_trace.sql that a command, the report or the UI reads, and
`memq duplicated TRACE --format json`, compared row by row (floats by their exact repr).

    python3 bench/duplicated_outputs.py TRACE [TRACE ...] --reference /path/to/other/checkout

Each checkout runs in a process of its own with PYTHONPATH naming it. Prints one line per output and trace
(`same` or where the first difference is); exit 1 when anything differs.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

GROUPINGS = ("total", "direction", "allocation", "untracked_source")
# What is compared: a name and its query (an unordered view is compared in a stated order).
QUERIES = [
    ("memq_duplicated_report", "SELECT * FROM memq_duplicated_report"),
    ("memq_duplicated_group", "SELECT * FROM memq_duplicated_group"),
    ("memq_duplicated_by_allocation", "SELECT * FROM memq_duplicated_by_allocation"),
    ("memq_duplicated_counter", "SELECT * FROM memq_duplicated_counter ORDER BY grouping, upid, key, ts"),
    ("memq_duplicated_trace_counter", "SELECT * FROM memq_duplicated_trace_counter"),
    ("memq_duplicated_process_counter", "SELECT * FROM memq_duplicated_process_counter"),
    ("memq_duplicated_total_report", "SELECT * FROM memq_duplicated_total_report"),
] + [(f"memq_duplicated_over_time('{g}')", f"SELECT * FROM memq_duplicated_over_time('{g}')") for g in GROUPINGS]

# Run in the checkout's own process: prints {name: [repr of each row]} as JSON.
DUMP = """
import json, sys
from ctf2perfetto.engine import open_trace
engine = open_trace(sys.argv[1])
out = {}
for name, sql in json.loads(sys.argv[2]):
    rows = engine.rows("INCLUDE PERFETTO MODULE memq.duplicated; " + sql)
    out[name] = [repr(tuple(r)) for r in rows.rows]
print(json.dumps(out))
"""


def dump(checkout: Path, trace: str) -> dict[str, list[str]]:
    """Every query's rows in `checkout`, and the JSON of `memq duplicated TRACE`."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    got = subprocess.run([sys.executable, "-c", DUMP, trace, json.dumps(QUERIES)], env=env, check=True,
                         capture_output=True, text=True, cwd="/tmp")
    out = json.loads(got.stdout)
    cli = subprocess.run([sys.executable, "-m", "ctf2perfetto", "duplicated", trace, "--format", "json"], env=env,
                         check=True, capture_output=True, text=True, cwd="/tmp")
    out["memq duplicated --format json"] = cli.stdout.splitlines()
    return out


def first_difference(a: list[str], b: list[str]) -> str:
    """Where two dumps part."""
    if len(a) != len(b):
        return f"{len(a)} rows against {len(b)}"
    i = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)
    return f"row {i}: {a[i]} against {b[i]}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("traces", nargs="+")
    ap.add_argument("--reference", required=True, type=Path, help="the other checkout (e.g. main's)")
    args = ap.parse_args()
    differ = False
    for trace in args.traces:
        mine, theirs = dump(REPO, trace), dump(args.reference.resolve(), trace)
        for name in theirs:
            same = mine.get(name) == theirs[name]
            differ |= not same
            rows = len(theirs[name])
            print(f"{trace}  {name}: " + (f"same ({rows:,} rows)" if same else
                                        "DIFFERS: " + first_difference(mine.get(name, []), theirs[name])))
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
