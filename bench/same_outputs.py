"""Whether two checkouts give byte-identical analysis outputs on the same traces: what a change that is only
meant to be faster (SQL of the copies, the mirror chain, the duplicated counters; the converter) must not move.

For each TRACE (a .pftrace or a recording directory), each checkout (this one and --against DIR) runs in its own
process and dumps, row by row (floats by their exact repr): `memq duplicated|redundant|summary|leaks TRACE
--format json`, and in one trace_processor every table and view of memq.duplicated that a command, the report or
the UI reads, each grouping's `memq_duplicated_over_time`, `memq_mirror_report`, `_memq_copy_content`,
`memq_redundant_copy_report!('auto')`, and `memq_mirror_carry` / `memq_mirror_carry_holder` at the trace's
middle (what a part hands the next). Prints one line per output (`same` and its size, or where the first
difference is); exit 1 when any differs.

    python3 bench/same_outputs.py TRACE... --against /path/to/other/checkout [--no-cli]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ANALYSES = ("duplicated", "redundant", "summary", "leaks")
GROUPINGS = ("total", "direction", "allocation", "untracked_source")
MIDDLE = "(SELECT (trace_start() + trace_end()) / 2)"

# Output name -> its query, after `INCLUDE PERFETTO MODULE memq.duplicated, memq.redundant` (a view without an
# ORDER BY of its own is compared in a stated order).
QUERIES = {
    "memq_duplicated_report": "SELECT * FROM memq_duplicated_report",
    "memq_duplicated_group": "SELECT * FROM memq_duplicated_group",
    "memq_duplicated_by_allocation": "SELECT * FROM memq_duplicated_by_allocation",
    "memq_duplicated_counter": "SELECT * FROM memq_duplicated_counter ORDER BY grouping, upid, key, ts",
    "memq_duplicated_trace_counter": "SELECT * FROM memq_duplicated_trace_counter",
    "memq_duplicated_process_counter": "SELECT * FROM memq_duplicated_process_counter",
    "memq_duplicated_total_report": "SELECT * FROM memq_duplicated_total_report",
    "memq_mirror_report": "SELECT * FROM memq_mirror_report",
    "_memq_copy_content": "SELECT * FROM _memq_copy_content ORDER BY copy_id",
    "memq_redundant_copy_report": "SELECT * FROM memq_redundant_copy_report!('auto')",
    "memq_mirror_carry": f"SELECT * FROM memq_mirror_carry({MIDDLE})",
    "memq_mirror_carry_holder": f"SELECT * FROM memq_mirror_carry_holder({MIDDLE})",
    **{f"memq_duplicated_over_time('{g}')": f"SELECT * FROM memq_duplicated_over_time('{g}')" for g in GROUPINGS},
}


def dump(trace: str, cli: bool) -> dict[str, list[str]]:
    """Every output on `trace` as computed by this process's checkout: name -> its rows (or lines), as text."""
    from ctf2perfetto.engine import open_trace

    out: dict[str, list[str]] = {}
    with open_trace(trace) as engine:
        engine.rows("INCLUDE PERFETTO MODULE memq.duplicated; INCLUDE PERFETTO MODULE memq.redundant")
        for name, sql in QUERIES.items():
            rows = engine.rows(sql)
            out[name] = [repr(tuple(rows.columns))] + [repr(tuple(r)) for r in rows.rows]
    for name in ANALYSES if cli else ():
        proc = subprocess.run([sys.executable, "-m", "ctf2perfetto.cli.memq", name, trace, "--format", "json"],
                              capture_output=True, text=True, check=False)
        out[f"memq {name} --format json"] = (proc.stdout.splitlines() if proc.returncode == 0
                                             else [f"exit {proc.returncode}"])
    return out


def dump_of(checkout: Path, trace: str, cli: bool) -> dict[str, list[str]]:
    """`dump` run by `checkout`'s code in a fresh process."""
    env = dict(os.environ, PYTHONPATH=str(checkout))
    proc = subprocess.run([sys.executable, str(REPO / "bench" / "same_outputs.py"), "--dump", trace]
                          + ([] if cli else ["--no-cli"]), env=env, capture_output=True, text=True, check=False,
                          cwd=checkout)
    if proc.returncode != 0:
        raise SystemExit(f"{checkout} on {trace} failed: {proc.stderr.strip().splitlines()[-1:]}")
    return json.loads(proc.stdout)


def first_difference(ours: list[str], theirs: list[str]) -> str:
    """Where two dumps of one output part."""
    for i, (a, b) in enumerate(zip(ours, theirs)):
        if a != b:
            return f"line {i}: {a[:200]} against {b[:200]}"
    return f"{len(ours)} lines against {len(theirs)}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("traces", nargs="+")
    ap.add_argument("--against", type=Path, help="the other checkout (e.g. a worktree of main)")
    ap.add_argument("--no-cli", action="store_true", help="only the in-engine outputs (not `memq NAME`)")
    ap.add_argument("--dump", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.dump:
        sys.path.insert(0, os.environ.get("PYTHONPATH", str(REPO)).split(os.pathsep)[0])
        print(json.dumps(dump(args.traces[0], not args.no_cli)))
        return 0
    if args.against is None:
        ap.error("--against DIR is required")
    differ = 0
    for trace in args.traces:
        ours = dump_of(REPO, trace, not args.no_cli)
        theirs = dump_of(args.against.resolve(), trace, not args.no_cli)
        for name in ours:
            same = ours[name] == theirs.get(name)
            differ += not same
            print(f"{trace}  {name}: " + (f"same ({len(ours[name]):,} lines)" if same
                                         else "DIFFERS: " + first_difference(ours[name], theirs.get(name, []))))
    print(f"{differ} output(s) differ")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
