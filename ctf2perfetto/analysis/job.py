"""The job's figures: each analysis per rank (or node, or GPU), the job's totals, and the spread across ranks.

Who each process is comes from the trace (memq.job: the memq.process instants the converter wrote from
memq:identity). Every analysis already gives its figures per process (duplicated's and redundant's per-pid rows,
memq_process_figures for summary, the leaked allocations for leaks); this module groups them:

* `by rank`: one row per rank: the rank's own process plus its workers (processes under it that are not ranks,
  e.g. data-loader workers), figures summed (a peak summed over a rank's processes is an upper bound of their
  combined peak; a rank alone is exact), then one row per process that is no rank's (the launcher, others),
  then the job: the whole trace's own figures (duplicated's and redundant's whole-trace rows: a peak over time of
  the whole job, not a sum of peaks), or the sum over every process. Keys: `rank` (NULL for the job and for
  processes outside ranks), `role` (`rank`, `launcher`, `process`, `job`), `node`, `gpu_uuid`, `pid` (on its node).
* `by node` / `by gpu`: the rank rows summed per node / per GPU UUID set.
* the spread: per figure over the groups (ranks, nodes or GPUs): min, median, max (with the group that has them)
  and mean; for redundant also `redundant_share`, the rank's redundant copy time over its traced life.
"""
from __future__ import annotations

import statistics
from typing import Any

from ctf2perfetto.analysis.base import module_rows
from ctf2perfetto.engine.rows import Rows, is_null
from ctf2perfetto.traceformat import job as N  # the job's names without numpy (the command line avoids it)

BY = ("rank", "node", "gpu")

IDENTITY_SQL = "SELECT * FROM memq_process_identity_report"
LEAKED_SQL = """SELECT p.pid, COUNT(*) AS leaked, SUM(a.size) AS leaked_bytes
FROM memq_allocation a JOIN process p USING (upid) WHERE a.leaked GROUP BY p.pid"""


def identities(engine: Any) -> list[dict[str, Any]]:
    """memq_process_identity_report as records (empty for a trace without memq.process instants)."""
    return module_rows(engine, ("job",), IDENTITY_SQL).records()


def _num(v: Any) -> float | int:
    return 0 if is_null(v) else v


def process_figures(name: str, engine: Any, tables: dict[str, Rows]) -> tuple[dict[int, dict], dict, list[str]]:
    """(pid -> figures, the job's figures, the figure names) of analysis `name`, from its tables (and the trace)."""
    per: dict[int, dict] = {}
    job: dict[str, Any] = {}
    if name == "duplicated":
        figures = ["peak_bytes", "mean_bytes", "byte_ns"]
        for row in tables["duplicated"].records():
            if row["grouping"] != "total":
                continue
            values = {f: _num(row[f]) for f in figures}
            if is_null(row["pid"]):
                job = values
            else:
                per[int(row["pid"])] = values
    elif name == "redundant":
        figures = ["redundant_count", "redundant_bytes", "redundant_dur", "staged_count", "staged_bytes"]
        for row in tables["redundant"].records():
            if row["class"] not in ("redundant", "staged"):
                continue
            prefix = row["class"]
            target = job if is_null(row["pid"]) else per.setdefault(int(row["pid"]), {})
            target[f"{prefix}_count"] = _num(row["count"])
            target[f"{prefix}_bytes"] = _num(row["bytes"])
            if prefix == "redundant":
                target["redundant_dur"] = _num(row["dur_sum"])
    elif name == "summary":
        rows = module_rows(engine, ("job",), "SELECT * FROM memq_process_figures WHERE pid IS NOT NULL")
        figures = [c for c in rows.columns if c not in ("upid", "pid")]
        for row in rows.records():
            per[int(row["pid"])] = {f: _num(row[f]) for f in figures}
    elif name == "leaks":
        rows = module_rows(engine, ("allocations",), LEAKED_SQL)
        figures = ["leaked", "leaked_bytes"]
        for row in rows.records():
            per[int(row["pid"])] = {f: _num(row[f]) for f in figures}
    else:
        return {}, {}, []
    for values in per.values():
        for f in figures:
            values.setdefault(f, 0)
    if not job:
        job = {f: sum(v[f] for v in per.values()) for f in figures}
    for f in figures:
        job.setdefault(f, 0)
    return per, job, figures


def _join(values) -> str:
    return ",".join(sorted({str(v) for v in values if v and not is_null(v)}))


def job_tables(name: str, engine: Any, tables: dict[str, Rows], by: str = "rank") -> dict[str, Rows]:
    """The `by <rank|node|gpu>` table and its spread for analysis `name`; {} for a trace with no ranks."""
    if by not in BY:
        raise ValueError(by)
    idents = identities(engine)
    ranks = [i for i in idents if i["role"] == N.ROLE_RANK]
    if not ranks and (by == "rank" or not idents):
        return {}
    per, job, figures = process_figures(name, engine, tables)
    if not figures:
        return {}
    zero = dict.fromkeys(figures, 0)
    groups: dict[int, dict] = {}  # owner rank -> rows of it
    others: list[dict] = []
    for ident in idents:
        values = per.get(int(ident["pid"]), zero)
        owner = ident["owner_rank"]
        if ident["role"] in (N.ROLE_RANK, N.ROLE_WORKER) and not is_null(owner):
            groups.setdefault(int(owner), []).append((ident, values))
        else:
            others.append((ident, values))
    share = name == "redundant"
    rank_rows = []
    for rank in sorted(groups):
        members = groups[rank]
        own = next((i for i, _ in members if i["role"] == N.ROLE_RANK), members[0][0])
        row = {"rank": rank, "role": N.ROLE_RANK, "node": own["node"], "pid": own["real_pid"],
               "processes": len(members), "gpu_uuid": _join(i["gpu_uuid"] for i, _ in members),
               "pci_bus_id": _join(i["pci_bus_id"] for i, _ in members), "run_dur": own["run_dur"]}
        for f in figures:
            row[f] = sum(v[f] for _, v in members)
        if share:
            row["redundant_share"] = (row["redundant_dur"] / row["run_dur"]
                                      if not is_null(row["run_dur"]) and row["run_dur"] else None)
        rank_rows.append(row)
    if not ranks:  # --by node|gpu of a job without ranks (one program per node): every process counts
        for ident, values in others:
            rank_rows.append({"rank": None, "role": ident["role"], "node": ident["node"], "pid": ident["real_pid"],
                              "processes": 1, "gpu_uuid": _join([ident["gpu_uuid"]]), **values})
        others = []
    columns = ["rank", "role", "node", "pid", "processes", "gpu_uuid", "pci_bus_id", "run_dur", *figures] + \
        (["redundant_share"] if share else [])
    if by == "rank":
        grouped, key = rank_rows, "rank"
    else:
        key = "node" if by == "node" else "gpu_uuid"
        merged: dict[str, dict] = {}
        for row in rank_rows:
            g = merged.setdefault(row[key] or "", {key: row[key] or "", "ranks": "", "processes": 0,
                                                   **dict.fromkeys(figures, 0)})
            if row["rank"] is not None:
                g["ranks"] = _join([*g["ranks"].split(","), row["rank"]]) if g["ranks"] else str(row["rank"])
            g["processes"] += row["processes"]
            for f in figures:
                g[f] += row[f]
        grouped = [merged[k] for k in sorted(merged)]
        columns = [key, "ranks", "processes", *figures]
    out_rows = list(grouped)
    if by == "rank":
        for ident, values in others:
            out_rows.append({"rank": None, "role": ident["role"], "node": ident["node"], "pid": ident["real_pid"],
                             "processes": 1, "gpu_uuid": _join([ident["gpu_uuid"]]),
                             "pci_bus_id": _join([ident["pci_bus_id"]]), "run_dur": ident["run_dur"], **values})
    job_row = {c: None for c in columns}
    job_row.update(job)
    every = len(set(per) | {int(i["pid"]) for i in idents})
    job_row.update({"processes": every, "node": _join(i["node"] for i in idents)} if by != "gpu" else
                   {"processes": every})
    if "role" in columns:
        job_row["role"] = "job"
    if by == "gpu":
        job_row["gpu_uuid"] = "job"
    elif by == "node":
        job_row["node"] = "job"
    out_rows.append(job_row)
    table = Rows.from_records([{c: r.get(c) for c in columns} for r in out_rows], columns)
    spread_figures = figures + (["redundant_share"] if share and by == "rank" else [])
    spread = spread_rows(grouped, key, spread_figures)
    note = (f"{len(ranks)} rank(s) on {len({i['node'] for i in ranks})} node(s): a rank's figures are its process's "
            "plus its workers'; the job row is the whole trace's" if ranks else
            f"no ranks: the {len(idents)} processes on {len({i['node'] for i in idents})} node(s) grouped by {by}; "
            "the job row is the whole trace's")
    for rows in (table, spread):
        rows.attrs.update(applies=True, note=note)
    return {f"by {by}": table, f"{by} spread": spread}


def spread_rows(groups: list[dict], key: str, figures: list[str]) -> Rows:
    """Per figure: min, median, max over `groups` (with the `key` of the group holding the min and the max; the
    first such in key order) and the mean."""
    records = []
    for f in figures:
        values = [(g[f], g[key]) for g in groups if not is_null(g.get(f))]
        if not values:
            continue
        lo = min(values, key=lambda v: v[0])
        hi = max(values, key=lambda v: v[0])
        numbers = [v for v, _ in values]
        records.append({"figure": f, "min": lo[0], f"min_{key}": lo[1], "median": statistics.median(numbers),
                        "max": hi[0], f"max_{key}": hi[1], "mean": statistics.fmean(numbers), "groups": len(values)})
    columns = ["figure", "min", f"min_{key}", "median", "max", f"max_{key}", "mean", "groups"]
    return Rows.from_records(records, columns)


def process_table(engine: Any) -> Rows | None:
    """memq summary's per-process split: each process's own figures with who it is; None outside a job (no
    rank, launcher or worker, and one node) or with one process."""
    idents = identities(engine)
    if not any(i["role"] != N.ROLE_PROCESS for i in idents) and len({i["node"] for i in idents}) < 2:
        return None
    rows = module_rows(engine, ("job",), """
        SELECT f.pid, i.real_pid, i.node, i.rank, i.role, i.owner_rank, i.run_dur, i.gpu_uuid, f.copies,
          f.copy_bytes, f.copy_dur, f.sets, f.set_bytes, f.allocations, f.allocated_bytes, f.small_allocations,
          f.small_bytes
        FROM memq_process_figures f LEFT JOIN memq_process_identity_report i USING (pid)
        WHERE f.pid IS NOT NULL AND f.pid != 0 ORDER BY i.owner_rank IS NULL, i.owner_rank, f.pid""")
    if len(rows) < 2:
        return None
    rows.attrs.update(applies=True, note="")
    return rows
