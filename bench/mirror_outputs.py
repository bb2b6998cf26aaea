"""Whether two checkouts give byte-identical analysis outputs on the same traces: what a change to the SQL of the
mirror chain (memq.copies, memq.mirrors) must not move.

For each TRACE (a .pftrace), each checkout (this one and --against DIR) runs in its own process and prints a
digest (SHA-256 and row count) of: `memq duplicated|redundant|summary|leaks TRACE --format json`, and in one
trace_processor `memq_mirror_report`, `_memq_copy_content`, `memq_redundant_copy_report!('auto')`, each
grouping's `memq_duplicated_over_time`, and `memq_mirror_carry` / `memq_mirror_carry_holder` at the trace's middle
(what a part hands the next). Prints the outputs that differ; exit 1 when any does.

    python3 bench/mirror_outputs.py TRACE... --against /path/to/other/checkout [--no-cli]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ANALYSES = ("duplicated", "redundant", "summary", "leaks")
GROUPINGS = ("total", "direction", "allocation", "untracked_source")


def queries() -> dict[str, str]:
    """Output name -> the query that gives it (after `INCLUDE PERFETTO MODULE memq.duplicated, memq.redundant`)."""
    mid = "(SELECT (trace_start() + trace_end()) / 2)"
    out = {
        "memq_mirror_report": "SELECT * FROM memq_mirror_report",
        "_memq_copy_content": "SELECT * FROM _memq_copy_content ORDER BY copy_id",
        "memq_redundant_copy_report": "SELECT * FROM memq_redundant_copy_report!('auto')",
        "memq_mirror_carry": f"SELECT * FROM memq_mirror_carry({mid})",
        "memq_mirror_carry_holder": f"SELECT * FROM memq_mirror_carry_holder({mid})",
    }
    out.update({f"memq_duplicated_over_time('{g}')": f"SELECT * FROM memq_duplicated_over_time('{g}')"
                for g in GROUPINGS})
    return out


def digest(data: bytes, size: str) -> str:
    return f"{hashlib.sha256(data).hexdigest()[:16]} ({size})"


def dump(trace: str, cli: bool) -> dict[str, str]:
    """This process's checkout's digests of every output on `trace`."""
    from ctf2perfetto.engine import open_trace

    out: dict[str, str] = {}
    with open_trace(trace) as engine:
        engine.rows("INCLUDE PERFETTO MODULE memq.duplicated; INCLUDE PERFETTO MODULE memq.redundant")
        for name, sql in queries().items():
            rows = engine.rows(sql)
            out[name] = digest(repr((rows.columns, rows.rows)).encode(), f"{len(rows.rows):,} rows")
    if cli:
        for name in ANALYSES:
            proc = subprocess.run([sys.executable, "-m", "ctf2perfetto.cli.memq", name, trace, "--format", "json"],
                                  capture_output=True, check=False)
            out[f"memq {name} --format json"] = (digest(proc.stdout, f"{len(proc.stdout):,} bytes")
                                                 if proc.returncode == 0 else f"exit {proc.returncode}")
    return out


def digests_of(checkout: Path, trace: str, cli: bool) -> dict[str, str]:
    """`dump` run by `checkout`'s code in a fresh process."""
    env = dict(os.environ, PYTHONPATH=str(checkout))
    proc = subprocess.run([sys.executable, str(REPO / "bench" / "mirror_outputs.py"), "--dump", trace]
                          + ([] if cli else ["--no-cli"]), env=env, capture_output=True, text=True, check=False,
                          cwd=checkout)
    if proc.returncode != 0:
        raise SystemExit(f"{checkout} on {trace} failed: {proc.stderr.strip().splitlines()[-1:]}")
    return json.loads(proc.stdout)


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
        ours = digests_of(REPO, trace, not args.no_cli)
        theirs = digests_of(args.against.resolve(), trace, not args.no_cli)
        for name in ours:
            same = ours[name] == theirs.get(name)
            differ += not same
            print(f"{'same  ' if same else 'DIFFER'} {trace}: {name}: {ours[name]}"
                  + ("" if same else f" against {theirs.get(name)}"))
    print(f"{differ} output(s) differ")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
