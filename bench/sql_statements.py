"""Where an analysis' time goes: each statement of the memq SQL modules, timed in include order in one
trace_processor (the embedded one memq runs).

Loads TRACE (a .pftrace; convert a recording once with `ctf2perfetto DIR -o X.pftrace`), then walks the modules
an analysis includes, depth first as `INCLUDE PERFETTO MODULE` does (each module once), and runs their statements
one at a time: a `memq.*` include is followed here rather than sent, so every statement is timed on its own.
Prints each statement's CPU time (this process': the embedded trace_processor runs in it, so other work on the
machine barely changes it) and wall time and, for a table, its rows; `--plan NAME` also prints `EXPLAIN QUERY PLAN` of
the statements that create NAME.

    python3 bench/sql_statements.py TRACE [--modules duplicated,redundant,summary,leaks] [--top 25] [--plan NAME]
    python3 bench/sql_statements.py TRACE --report    # memq report's modules, then its Python steps

`--report` walks the modules memq report includes (REPORT_MODULES), then times what is left of the report on a
second engine whose modules are included first (the statements above were sent one by one: including their
modules again would make their tables again): `report.collect` (its own queries, the rows it fetches and the Python
that turns them into figures; the slowest functions by cProfile) and `report.render` (the page).

Wall-clock figures on a shared machine: compare the CPU times, and quote the load printed with them.
"""
from __future__ import annotations

import argparse
import os
import re
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from ctf2perfetto.engine import open_trace  # noqa: E402
from ctf2perfetto.engine.sql_package import PACKAGE  # noqa: E402
from ctf2perfetto.paths import sql_package_dir  # noqa: E402

INCLUDE = re.compile(r"^\s*INCLUDE\s+PERFETTO\s+MODULE\s+([\w.]+)\s*$", re.I | re.S)
CREATED = re.compile(r"^\s*CREATE\s+(?:OR\s+REPLACE\s+)?PERFETTO\s+(TABLE|VIEW|FUNCTION|MACRO|INDEX)\s+(\w+)",
                     re.I)


def statements(sql: str) -> list[str]:
    """`sql` split at its top-level semicolons, comments dropped (a comment or a string may hold a ';')."""
    out, cur, depth, i = [], [], 0, 0
    while i < len(sql):
        c = sql[i]
        if sql.startswith("--", i):
            i = sql.find("\n", i) if "\n" in sql[i:] else len(sql)
            continue
        if sql.startswith("/*", i):
            i = sql.index("*/", i) + 2
            continue
        if c in "'\"":
            end = sql.index(c, i + 1)
            cur.append(sql[i:end + 1])
            i = end + 1
            continue
        depth += (c == "(") - (c == ")")
        if c == ";" and depth == 0:
            if "".join(cur).strip():
                out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(c)
        i += 1
    if "".join(cur).strip():
        out.append("".join(cur).strip())
    return out


def module_statements(module: str, seen: set[str]) -> list[tuple[str, str]]:
    """(module, statement) of `module` and, before each of its includes' first use, the included memq modules'."""
    if module in seen:
        return []
    seen.add(module)
    path = sql_package_dir().joinpath(*module.split(".")[1:]).with_suffix(".sql")
    out: list[tuple[str, str]] = []
    for stmt in statements(path.read_text(encoding="utf-8")):
        inc = INCLUDE.match(stmt)
        if inc and inc.group(1).startswith(PACKAGE + "."):
            out += module_statements(inc.group(1), seen)
        else:
            out.append((module, stmt))
    return out


# The modules memq report includes, in the order its first queries reach them (ctf2perfetto.look.report.collect).
REPORT_MODULES = ("trace,duplicated_trace,counters,report,copies,attribution,allocations,advice.calls,"
                  "advice.zero_content,advice.pinning,advice.sync_loop,advice.pinned_oversize,advice.pinned_churn,"
                  "advice.zero_bytes")


def report_steps(trace: str, top: int) -> None:
    """Time report.collect and report.render on a fresh engine with the report's modules included, with collect's
    slowest functions (cProfile, cumulative: the engine's queries count under the function that sends them)."""
    import cProfile
    import pstats

    from ctf2perfetto.look import report

    engine = open_trace(trace)
    t, c = time.perf_counter(), time.process_time()
    engine.rows("".join(f"INCLUDE PERFETTO MODULE {PACKAGE}.{m};\n" for m in REPORT_MODULES.split(","))
                + "SELECT 1 AS x")
    print(line(time.process_time() - c, time.perf_counter() - t, "(all of the above)", "INCLUDE", None))
    queries: list[tuple[float, float, str]] = []
    send = engine.rows

    def timed_rows(sql: str) -> object:  # each query collect sends: its CPU and wall time, rows not yet decoded
        t, c = time.perf_counter(), time.process_time()
        try:
            return send(sql)
        finally:
            queries.append((time.process_time() - c, time.perf_counter() - t, sql))

    engine.rows = timed_rows  # type: ignore[method-assign]
    prof = cProfile.Profile()
    t, c = time.perf_counter(), time.process_time()
    rep = prof.runcall(report.collect, engine, Path(trace).name)
    print(line(time.process_time() - c, time.perf_counter() - t, "report (Python)", "report.collect", None))
    print(line(sum(q[0] for q in queries), sum(q[1] for q in queries), "report (Python)",
               f"of which its {len(queries)} queries in the engine", None))
    for cpu, wall, sql in sorted(queries, reverse=True)[:top // 3]:
        words = " ".join(w for w in sql.split() if not w.startswith("memq.")).replace("INCLUDE PERFETTO MODULE ;", "")
        print(line(cpu, wall, "  query", words.replace("INCLUDE PERFETTO MODULE", "").strip()[:70], None))
    t, c = time.perf_counter(), time.process_time()
    page = report.render([rep])
    print(line(time.process_time() - c, time.perf_counter() - t, "report (Python)", "report.render", None)
          + f"  ({len(page):,} characters)")
    pstats.Stats(prof).sort_stats("cumulative").print_stats(r"ctf2perfetto|engine", top)
    engine.close()


def label(stmt: str) -> str:
    """What a statement makes (`TABLE _memq_piece`), or its first words."""
    m = CREATED.match(stmt)
    return f"{m.group(1).upper()} {m.group(2)}" if m else " ".join(stmt.split())[:60]


def line(cpu: float, wall: float, module: str, what: str, rows: int | None) -> str:
    """One statement's figures."""
    return f"{cpu:7.3f} s CPU {wall:7.3f} s wall  {module:24} {what}" + (f"  ({rows:,} rows)" if rows is not None else "")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--modules", default="duplicated,redundant,summary,leaks",
                    help="the analyses' modules, comma-separated, in this order")
    ap.add_argument("--top", type=int, default=25, help="the N slowest statements again at the end")
    ap.add_argument("--plan", action="append", default=[], help="print EXPLAIN QUERY PLAN of what creates NAME")
    ap.add_argument("--report", action="store_true",
                    help="memq report's modules (instead of --modules), then its Python steps")
    args = ap.parse_args()

    t = time.perf_counter()
    engine = open_trace(args.trace)
    print(f"loading {args.trace}: {time.perf_counter() - t:.2f} s ({'load %.1f %.1f %.1f' % os.getloadavg()})")
    seen: set[str] = set()
    timed: list[tuple[float, float, str, str, int | None]] = []
    total = total_cpu = 0.0
    for name in (REPORT_MODULES if args.report else args.modules).split(","):
        for module, stmt in module_statements(f"{PACKAGE}.{name}", seen):
            what = label(stmt)
            m = CREATED.match(stmt)
            if m and m.group(2) in args.plan:
                body = re.split(r"\bAS\b", stmt, maxsplit=1, flags=re.I)[1] if m.group(1).upper() == "TABLE" else ""
                if body:
                    for row in engine.rows("EXPLAIN QUERY PLAN " + body).rows:
                        print("   plan:", row)
            t, c = time.perf_counter(), time.process_time()
            engine.rows(stmt)
            dt, cpu = time.perf_counter() - t, time.process_time() - c
            total += dt
            total_cpu += cpu
            rows = None
            if m and m.group(1).upper() == "TABLE":
                rows = engine.rows(f"SELECT COUNT(*) AS n FROM {m.group(2)}").first("n")
            timed.append((cpu, dt, module, what, rows))
            print(line(cpu, dt, module, what, rows), flush=True)
    print(f"statements: {total_cpu:.2f} s CPU, {total:.2f} s wall ({'load %.1f %.1f %.1f' % os.getloadavg()})")
    print(f"\nslowest {args.top} (CPU):")
    for cpu, dt, module, what, rows in sorted(timed, reverse=True)[:args.top]:
        print(line(cpu, dt, module, what, rows))
    engine.close()
    if args.report:
        report_steps(args.trace, args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
