"""`memq report` of a job: the headline figures per rank with their spread, and each rank's plots.

A rank is its own process plus its workers (ctf2perfetto.analysis.job). The table's figures and their spread
(min / median / max and which rank) are the analyses' `--by rank` figures (job.job_tables of duplicated and
redundant); the plots are the job's, restricted to the rank's processes, on the job's time axis:

* live bytes per kind: the process counter tracks (host heap, pinned, registered, managed) and the device
  allocations of the rank's processes (the device tracks are per GPU, all processes together);
* duplicated bytes: every mirror of the rank's processes (memq_duplicated_process_counter), summed over time;
* redundant copy time per class, in the job's bins.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ctf2perfetto.engine.rows import Rows, is_null
from ctf2perfetto.look.series import Series, changes_sum, group_by, query_arrays, series_sum, split_runs

# The per-rank table: (analysis, figure, heading, unit), in column order; unit "bytes", "dur", "share" or "count".
FIGURES = (("duplicated", "peak_bytes", "duplicated peak", "bytes"),
           ("duplicated", "mean_bytes", "duplicated mean", "bytes"),
           ("redundant", "redundant_dur", "redundant copy time", "dur"),
           ("redundant", "redundant_share", "share of its run", "share"),
           ("redundant", "redundant_bytes", "redundant bytes", "bytes"),
           ("redundant", "redundant_count", "redundant copies", "count"),
           ("redundant", "staged_count", "staged copies", "count"))
RANK_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
               "#17becf")
ALL_MIRRORS = "all mirrors"  # a rank's duplicated-bytes series (its processes' mirrors, every direction)
OPEN_UP_TO = 4  # ranks whose plots the page shows open; more are folded (one click each)

LIVE_SQL = """SELECT t.kind, p.pid, c.ts, CAST(c.value AS INT) AS value
FROM counter c JOIN memq_live_counter_track t ON c.track_id = t.id
JOIN process_counter_track pt ON pt.id = t.id JOIN process p USING (upid)
WHERE t.kind != 'device' ORDER BY c.ts, c.id"""
DEVICE_SQL = """SELECT p.pid, a.ts, a.end_ts, a.size FROM memq_allocation a JOIN process p USING (upid)
WHERE a.kind = 'device'"""
DUPLICATED_SQL = "SELECT pid, ts, value FROM memq_duplicated_process_counter"
REDUNDANT_SQL = """SELECT p.pid, r.class, MIN({last}, MAX(0, (r.ts - {start}) * {bins} / {span})) AS bin,
  SUM(r.redundant_dur) AS d
FROM memq_report_copy r JOIN process p USING (upid) WHERE r.class IS NOT NULL
GROUP BY p.pid, r.class, bin"""


@dataclass
class RankPart:
    """One rank's plots."""

    rank: int
    node: str
    pids: tuple[int, ...]
    live: dict[str, Series] = field(default_factory=dict)
    duplicated: dict[str, Series] = field(default_factory=dict)
    redundant_bins: dict[str, list[int]] = field(default_factory=dict)


@dataclass
class JobRanks:
    """The per-rank part of a job's report."""

    table: list[dict[str, Any]]  # one row per rank, then the job's: rank, node, pid, processes, gpu_uuid, FIGURES
    spread: list[dict[str, Any]]  # per figure: figure, min, min_rank, median, max, max_rank
    parts: list[RankPart]


def collect_ranks(engine: Any, dup_rows: Rows, start: int, end: int, bins: int) -> JobRanks | None:
    """The per-rank figures and plots of a job's trace; None when the trace names no rank."""
    import numpy as np

    from ctf2perfetto.analysis import job
    from ctf2perfetto.analysis.base import module_rows
    from ctf2perfetto.analysis.redundant import redundant_rows
    from ctf2perfetto.traceformat import names as N

    idents = job.identities(engine)
    if not any(i["role"] == N.ROLE_RANK for i in idents):
        return None
    tables = {"duplicated": job.job_tables("duplicated", engine, {"duplicated": dup_rows}, "rank"),
              "redundant": job.job_tables("redundant", engine, {"redundant": redundant_rows(engine, "auto")}, "rank")}
    table: dict[Any, dict[str, Any]] = {}
    for name, found in tables.items():
        for r in found["by rank"].records():
            if r["role"] not in (N.ROLE_RANK, "job"):
                continue  # the launcher and processes outside ranks: in memq summary's per-process split
            row = table.setdefault(r["rank"] if r["role"] == N.ROLE_RANK else "job", {
                "rank": r["rank"], "role": r["role"], "node": r["node"], "pid": r["pid"],
                "processes": r["processes"], "gpu_uuid": r["gpu_uuid"]})
            row.update({f: r.get(f) for n, f, _, _ in FIGURES if n == name})
    spread = []
    for name, figure, _, _ in FIGURES:
        got = next((s for s in tables[name]["rank spread"].records() if s["figure"] == figure), None)
        if got is not None:
            spread.append(got)

    members: dict[int, list[int]] = {}
    for i in idents:
        if i["role"] in (N.ROLE_RANK, N.ROLE_WORKER) and not is_null(i["owner_rank"]):
            members.setdefault(int(i["owner_rank"]), []).append(int(i["pid"]))
    kind, pid, ts, value = query_arrays(engine, ("counters",), LIVE_SQL)
    kinds = sorted(set(kind))  # a (kind, pid) is one key: pid * len(kinds) + the kind's place among them
    code = np.searchsorted(np.asarray(kinds), np.asarray(kind)) if len(kind) else np.zeros(0, dtype=np.int64)
    per_pid_live: dict[tuple[str, int], Series] = {
        (kinds[key % len(kinds)], key // len(kinds)): s
        for key, s in group_by(pid * max(len(kinds), 1) + code, ts, value).items()}
    device: dict[int, tuple[list[int], list[int]]] = {}  # pid -> (ts, change of live device bytes)
    for r in module_rows(engine, ("allocations",), DEVICE_SQL).records():
        at, change = device.setdefault(int(r["pid"]), ([], []))
        at.append(int(r["ts"]))
        change.append(int(r["size"]))
        if not is_null(r["end_ts"]):
            at.append(int(r["end_ts"]))
            change.append(-int(r["size"]))
    for p, (at, change) in device.items():
        per_pid_live[("device", p)] = changes_sum(np.asarray(at, dtype=np.int64), np.asarray(change, dtype=np.int64))
    pid, ts, value = query_arrays(engine, ("duplicated_trace",), DUPLICATED_SQL)
    dup: dict[int, Series] = split_runs(pid, ts, value)
    red: dict[int, dict[str, list[int]]] = {}
    sql = REDUNDANT_SQL.format(last=bins - 1, start=start, bins=bins, span=max(end - start, 1))
    for r in module_rows(engine, ("report",), sql).records():
        red.setdefault(int(r["pid"]), {}).setdefault(r["class"], [0] * bins)[int(r["bin"])] += int(r["d"])

    parts = []
    for rank in sorted(members):
        pids = tuple(sorted(members[rank]))
        part = RankPart(rank, str(table.get(rank, {}).get("node") or ""), pids)
        for kind in ("host", "pinned", "registered", "managed", "device"):
            found = [per_pid_live[(kind, p)] for p in pids if (kind, p) in per_pid_live]
            if found:
                part.live[kind] = series_sum(found)
        found = [dup[p] for p in pids if p in dup]
        if found:
            part.duplicated[ALL_MIRRORS] = series_sum(found)
        for p in pids:
            for cls, b in red.get(p, {}).items():
                into = part.redundant_bins.setdefault(cls, [0] * bins)
                for j, v in enumerate(b):
                    into[j] += v
        parts.append(part)
    ranks = [table[k] for k in sorted(k for k in table if k != "job")] + ([table["job"]] if "job" in table else [])
    return JobRanks(ranks, spread, parts)


# -- rendering -----------------------------------------------------------------------------------------------
def _words(unit: str, v: Any) -> str:
    """A figure in words by its unit (FIGURES)."""
    from ctf2perfetto.look.report import duration, size

    if v is None or is_null(v):
        return "n/a"
    if unit == "bytes":
        return size(v)
    if unit == "dur":
        return duration(v)
    return f"{100 * v:.1f}%" if unit == "share" else f"{v:,}"


def ranks_html(rep: Any, index: int) -> str:
    """The "Per rank" section of a job's trace (the page's `index`-th): the table, the spread, a comparison of the
    ranks' duplicated bytes, and each rank's plots."""
    from ctf2perfetto.look.report import BAND_WORDS, KIND_COLORS, _e, _fig, bars_svg, step_svg

    job: JobRanks | None = rep.ranks
    if job is None:
        return ""
    shown = [f for f in FIGURES if any(not is_null(r.get(f[1])) and r.get(f[1]) is not None for r in job.table)]
    heads = "".join(f'<th class="num">{_e(h)}</th>' for _, _, h, _ in shown)
    body = []
    for row in job.table:
        rank = row["rank"]
        who = "job" if rank is None else f"rank {rank}"
        key = "job" if rank is None else f"rank{rank}"
        cells = "".join(f'<td class="num">{_fig(f"{key}.{f}", row.get(f), _words(u, row.get(f)))}</td>'
                        for _, f, _, u in shown)
        gpu = ", ".join(g[:13] + "…" if len(g) > 14 else g for g in str(row.get("gpu_uuid") or "").split(",") if g)
        where = "all ranks" if rank is None else f"node {row['node'] or '?'}, pid {row['pid']}" + (
            f", {row['processes']} processes" if (row.get("processes") or 1) > 1 else "") + (f", {gpu}" if gpu else "")
        cls = ' class="job"' if rank is None else ""
        body.append(f'<tr data-rank="{_e("job" if rank is None else rank)}"{cls}>'
                    f'<td><b>{_e(who)}</b><div class="small">{_e(where)}</div></td>{cells}</tr>')
    units = {f: u for _, f, _, u in FIGURES}
    labels = {f: h for _, f, h, _ in FIGURES}
    spread = "".join(_spread_row(s, units[s["figure"]], labels[s["figure"]]) for s in job.spread)
    compare = {f"rank {p.rank}": p.duplicated[ALL_MIRRORS] for p in job.parts if p.duplicated.get(ALL_MIRRORS)}
    colors = {f"rank {p.rank}": RANK_COLORS[i % len(RANK_COLORS)] for i, p in enumerate(job.parts)}
    out = [f"""<h2 id="ranks-{index}">Per rank</h2>
<p class="small">{len(job.parts)} ranks. A rank's figures are its process's plus its workers' (a peak summed over
them is an upper bound); the job's duplicated figures are the whole trace's, over time, not a sum.</p>
<table data-table="ranks"><thead><tr><th>rank</th>{heads}</tr></thead><tbody>{''.join(body)}</tbody></table>
<h3>Spread across ranks</h3>
<table data-table="spread" class="spread"><thead><tr><th>figure</th><th class="num">min</th><th class="num">median</th>
<th class="num">max</th><th class="num">max / min</th></tr></thead><tbody>{spread}</tbody></table>""",
           step_svg(rep, "duplicated-ranks", compare, colors, "Duplicated bytes per rank (upper bound)",
                    "Nothing duplicated in any rank." if rep.addressed else
                    "Not applicable: the copies carry no addresses.")]
    for part in job.parts:
        fold = " open" if len(job.parts) <= OPEN_UP_TO else ""
        procs = ", ".join(map(str, part.pids))
        out.append(f"""<details class="rank" data-rank="{part.rank}"{fold}><summary>Rank {part.rank} (node
{_e(part.node or '?')}, pid{'s' if len(part.pids) > 1 else ''} {_e(procs)})</summary>
{step_svg(rep, "live", part.live, KIND_COLORS, f"Rank {part.rank}: live bytes per memory kind",
          "No live-bytes counters for this rank.", rank=part.rank)}
{step_svg(rep, "duplicated", part.duplicated, {ALL_MIRRORS: colors.get(f"rank {part.rank}", "#222")},
          f"Rank {part.rank}: duplicated bytes (upper bound), all its mirrors: {BAND_WORDS}",
          "Nothing duplicated." if rep.addressed else "Not applicable: the copies carry no addresses.", rank=part.rank,
          band=True)}
{bars_svg(rep, part.redundant_bins, f"Rank {part.rank}: redundant copy time over time, per class", rank=part.rank)}
</details>""")
    return "".join(out)


def _spread_row(s: dict[str, Any], unit: str, label: str) -> str:
    """A figure's min (and its rank), median, max (and its rank) and max / min; the ranks only where they differ."""
    from ctf2perfetto.look.report import _e, _fig

    differ = s["min"] != s["max"]

    def cell(what: str, rank: Any = None) -> str:
        who = f' <span class="small">rank {_e(rank)}</span>' if differ and rank is not None else ""
        name = f"spread.{s['figure']}.{what}"
        return f'<td class="num">{_fig(name, s[what], _words(unit, s[what]))}{who}</td>'

    return (f'<tr data-spread="{_e(s["figure"])}"><td>{_e(label)}</td>{cell("min", s["min_rank"])}{cell("median")}'
            f'{cell("max", s["max_rank"])}<td class="num">{_e(_ratio(s))}</td></tr>')


def _ratio(s: dict[str, Any]) -> str:
    lo, hi = s["min"], s["max"]
    if is_null(lo) or is_null(hi) or not hi:
        return "–"
    return "∞" if not lo else f"{hi / lo:.2f}×"
