"""`memq report`: one self-contained HTML page that answers what a user acts on.

For each trace: the headline in words and numbers (duplicated bytes, redundant copy time, staged copies, the
unified-memory what-if, each with its evidence), the findings ranked by what fixing them would gain (a class of
waste at one call site / PyTorch op, with a concrete fix and the time range to look at in Perfetto), plots over
time (inline SVG), and what the trace lacks. No script, no network: inline CSS and SVG only, so the page reads
offline and can be attached to a ticket.

Every figure comes from the analyses (ctf2perfetto.analysis.*, the memq SQL package); `collect` gathers them
into plain numbers (bytes, ns) and `render` writes them, each with `data-figure` / `data-value` attributes so a
test can read them back from the page.
"""
from __future__ import annotations

import html
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ctf2perfetto.analysis.base import size_words, time_words
from ctf2perfetto.engine.rows import is_null
from ctf2perfetto.look.series import Columns, Series, columns, group_by, series_mean, series_peak, series_sum, \
    query_arrays, split_runs, value_at

CLASS_WORDS = {"repeat": "repeat upload of the same data", "round_trip": "round trip (data copied back where it came "
               "from)", "no_op": "no-op read-back (the destination already held the data)",
               "managed": "explicit copy with a managed endpoint", "unified": "host<->device copy on a unified-memory "
               "device"}
RULE_WORDS = {"zero_content": "copies of all-zero data", "pinning": "pageable buffer uploaded again and again",
              "sync_loop": "synchronous copy in a loop", "pinned_oversize": "pinned buffer much larger than its copies",
              "pinned_churn": "pinned alloc/free churn", "zero_bytes": "zero-byte copies"}
KIND_COLORS = {"host": "#8c6d31", "pinned": "#6b6ecf", "registered": "#9c9ede", "managed": "#e7ba52",
               "device": "#d6616b"}
CLASS_COLORS = {"repeat": "#d62728", "round_trip": "#ff7f0e", "no_op": "#9467bd", "managed": "#e7ba52",
                "unified": "#17becf"}
DIR_COLORS = {"total": "#222222", "HtoD": "#d62728", "DtoH": "#1f77b4", "DtoD": "#2ca02c", "HtoH": "#8c564b"}
BINS = 80


# -- numbers for people --------------------------------------------------------------------
size, duration = size_words, time_words


def share(part: float | None, whole: float | None) -> str:
    if part is None or not whole:
        return "n/a"
    return f"{100.0 * part / whole:.1f}%"


def _int(v: Any) -> int:
    return 0 if v is None or is_null(v) else int(v)


# -- what the page shows -------------------------------------------------------------------------
@dataclass
class Finding:
    kind: str  # a redundant class or an advice rule
    title: str
    where: str
    count: int
    bytes: int
    gain_ns: int | None
    gain_bytes: int
    evidence: str
    fix: str
    first_ts: int
    last_ts: int
    pid: int | None = None
    buffers: tuple[int, ...] = ()  # allocation ids it names
    detail: str = ""
    unproven: bool = False  # a repeat / round trip no fingerprint checked: ranked after every other finding


@dataclass
class TraceReport:
    name: str
    start: int
    end: int
    recorded: int
    source: str
    addressed: bool
    headline: dict[str, Any] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    live: dict[str, Series] = field(default_factory=dict)
    duplicated: dict[str, Series] = field(default_factory=dict)
    redundant_bins: dict[str, list[int]] = field(default_factory=dict)
    lacks: list[str] = field(default_factory=list)
    ranks: Any = None  # a job's per-rank figures and plots (report_ranks.JobRanks); None without ranks


def _rows(engine: Any, modules: tuple[str, ...], sql: str) -> list[dict[str, Any]]:
    from ctf2perfetto.analysis.base import module_rows

    return module_rows(engine, modules, sql).records()


# The samples the plots and the headline's device and pool figures read: the whole trace's duplicated bytes, in
# runs of one direction ('' for all mirrors) in time order; every live-bytes counter's samples in time order.
DUPLICATED_SQL = "SELECT direction, ts, value FROM memq_duplicated_trace_counter"
LIVE_SQL = "SELECT track_id, kind, ts, value FROM memq_live_counter"


def _totals(engine: Any) -> dict[str, dict[str, int]]:
    """The whole trace's figures memq redundant gives per class (memq_report_class_total)."""
    return {r["cls"]: {k: _int(r[k]) for k in ("count", "bytes", "dur_sum", "wall_dur", "content_bytes")}
            for r in _rows(engine, ("report",), "SELECT * FROM memq_report_class_total")}


class _Sites:
    """Call sites (binary + function) of ips, and PyTorch ops of calls, where the trace can say."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self.symbolizer = None
        self.problem = ""
        binaries = _rows(engine, ("attribution",), "SELECT * FROM memq_binary")
        if binaries:
            from ctf2perfetto.analysis.callsite import Mapping, Symbolizer

            self.symbolizer = Symbolizer([Mapping(int(b["pid"]), int(b["baddr"]), int(b["memsz"]), str(b["path"]),
                                                  str(b["build_id"] or ""), int(b["ts"])) for b in binaries
                                          if b["pid"] is not None and b["baddr"] is not None and b["memsz"]])
        self.ops = bool(_rows(engine, ("attribution",), "SELECT 1 AS x FROM memq_cpu_op LIMIT 1"))

    def label(self, pid: int | None, ip: int | None, ts: int) -> str:
        if ip is None or pid is None or self.symbolizer is None:
            return ""
        try:
            site = self.symbolizer.resolve([(int(pid), int(ip) & (2**64 - 1), int(ts))])[0]
        except Exception as e:  # a binary that moved or cannot be read: say so, keep the report
            return f"ip {int(ip) & (2**64 - 1):#x} ({e})"
        return site.label() if site.binary else f"ip {int(ip) & (2**64 - 1):#x}"

    def op(self, call_id: int | None) -> str:
        if not self.ops or call_id is None:
            return ""
        import pandas as pd

        from ctf2perfetto.analysis.attribution import attribute

        found = attribute(self.engine, pd.DataFrame({"call_id": [int(call_id)]}), "op")["op"].iloc[0]
        return "" if found is None or (isinstance(found, float)) else str(found)


REDUNDANT_SITES = """
SELECT r.class, p.pid, k.ip, r.api, r.direction, c.src_alloc_id, c.dst_alloc_id, c.src_mem, c.dst_mem,
  COUNT(*) AS count, SUM(r.redundant_bytes) AS bytes, SUM(r.content_bytes) AS content_bytes,
  SUM(r.redundant_dur) AS gain_dur, MIN(r.ts) AS first_ts, MAX(r.ts + r.dur) AS last_end_ts,
  MIN(r.call_id) AS first_call_id
FROM memq_report_copy r
JOIN memq_copy c ON c.id = r.id
LEFT JOIN memq_advice_call k ON k.call_id = r.call_id
LEFT JOIN process p ON p.upid = r.upid
WHERE r.class IS NOT NULL
GROUP BY r.class, r.upid, k.ip, r.api, r.direction, c.src_alloc_id, c.dst_alloc_id
"""

FIXES = {
    ("repeat", "HtoD"): "keep it on the device: upload it once before the loop and reuse the device copy (move the "
                        ".to('cuda') / hipMemcpy out of the loop, or cache the device tensor)",
    ("repeat", "DtoH"): "keep the host copy: it already holds this data; read back only after the device changed it",
    ("repeat", None): "drop the copy: the destination already holds this data",
    ("round_trip", None): "drop the copy back: the destination still holds the data it was copied from",
    ("no_op", None): "drop the read-back (or the .item() / .cpu() inside the loop): the host already held exactly "
                     "this data",
    ("managed", None): "use the managed buffer directly (no explicit copy; hipMemPrefetchAsync / "
                       "cudaMemPrefetchAsync to move it ahead of use)",
    ("unified", None): "on this unified-memory device, use the host data in place (hipMallocManaged, or "
                       "hipHostMalloc with its device pointer; on MI300A the APU path, HSA_XNACK=1) instead of "
                       "copying",
}


def _fix(cls: str, direction: str | None) -> str:
    return FIXES.get((cls, direction)) or FIXES[(cls, None)]


def collect(engine: Any, name: str) -> TraceReport:
    """Every figure of the report of one trace, from an open engine."""
    from ctf2perfetto.analysis import advice
    from ctf2perfetto.analysis.base import source_info, warning_counts, warning_lines, windows_rows
    from ctf2perfetto.analysis.duplicated import duplicated_total_rows

    trace = _rows(engine, ("trace",), "SELECT start_ts, end_ts, recorded_dur FROM memq_trace")[0]
    start, end, recorded = _int(trace["start_ts"]), _int(trace["end_ts"]), _int(trace["recorded_dur"])
    names, addressed, has_events = source_info(engine)
    rep = TraceReport(name, start, end, recorded, ",".join(names) or "none", addressed)
    h = rep.headline

    # duplicated: peak, mean, device share
    dup_rows = duplicated_total_rows(engine)
    dup = {(r["grouping"], r["key"]): r for r in dup_rows.records() if r["pid"] is None}
    total = dup.get(("total", None)) or {}
    h["dup_peak"], h["dup_peak_ts"] = _int(total.get("peak_bytes")), total.get("peak_ts")
    h["dup_mean"] = float(total.get("mean_bytes") or 0.0)
    direction, ts, value = query_arrays(engine, ("duplicated_trace",), DUPLICATED_SQL)
    rep.duplicated = {d or "total": s for d, s in split_runs(direction, ts, value).items()}
    track, kind_of, ts, value = query_arrays(engine, ("counters",), LIVE_SQL)
    per_track = group_by(track, ts, value)
    kinds = dict(zip(track.tolist(), kind_of))  # each track's kind
    for kind in ("host", "pinned", "registered", "managed", "device"):
        tracks = [s for t, s in per_track.items() if kinds[t] == kind]
        if tracks:
            rep.live[kind] = series_sum(tracks)
    # device memory in use: device allocations and managed memory (which the device holds while it uses it)
    device = series_sum([rep.live[k] for k in ("device", "managed") if k in rep.live])
    # destinations on a device
    on_device = series_sum([rep.duplicated[d] for d in ("HtoD", "DtoD") if d in rep.duplicated])
    h["dup_device_peak"], h["dup_device_peak_ts"] = series_peak(on_device)
    h["device_live_at_peak"] = value_at(device, h["dup_device_peak_ts"]) if h["dup_device_peak_ts"] else 0
    h["dup_device_mean"] = series_mean(on_device, start, end)
    h["device_live_mean"] = series_mean(device, start, end)
    h["device_live_peak"] = series_peak(device)[0]
    h["device_share_peak"] = h["dup_device_peak"] / h["device_live_at_peak"] if h["device_live_at_peak"] else None
    h["device_share_mean"] = h["dup_device_mean"] / h["device_live_mean"] if h["device_live_mean"] else None
    # the shared pool of an APU: host<->device mirrors would be one copy
    pool = series_sum([rep.duplicated[d] for d in ("HtoD", "DtoH") if d in rep.duplicated])
    h["pool_peak"], h["pool_peak_ts"] = series_peak(pool)
    h["pool_mean"] = series_mean(pool, start, end)

    # redundant and staged time, and the unified what-if
    auto = _totals(engine)
    red = auto.get("redundant", {})
    h["red_count"], h["red_bytes"] = red.get("count", 0), red.get("bytes", 0)
    h["red_sum"], h["red_wall"] = red.get("dur_sum", 0), red.get("wall_dur", 0)
    h["red_content_bytes"] = red.get("content_bytes", 0)
    h["classes"] = {c: auto.get(c, {}) for c in ("repeat", "round_trip", "no_op", "managed", "unified")}
    staged = auto.get("staged", {})
    h["staged_count"], h["staged_bytes"] = staged.get("count", 0), staged.get("bytes", 0)
    h["staged_sum"], h["staged_wall"] = staged.get("dur_sum", 0), staged.get("wall_dur", 0)
    apu = _rows(engine, ("report",), "SELECT * FROM memq_report_apu_total")[0]
    h["apu_count"], h["apu_bytes"], h["apu_sum"], h["apu_wall"] = (_int(apu[k]) for k in ("count", "bytes", "dur_sum",
                                                                                           "wall_dur"))
    # all copy time (memq summary's copies, memsets aside), as memq redundant counts copies: a trace merged with its PyTorch profile holds each copy
    # twice, and then only the LTTng ones count
    copy_time = _rows(engine, ("copies",), """SELECT IFNULL(SUM(dur), 0) AS d, COUNT(*) AS n,
        IFNULL(SUM(bytes), 0) AS b FROM memq_copy WHERE direction IS NOT NULL
        AND (source = 'lttng' OR NOT EXISTS (SELECT 1 FROM memq_copy WHERE source = 'lttng'
                                             AND direction IS NOT NULL))""")[0]
    h["copy_sum"], h["copy_count"], h["copy_bytes"] = _int(copy_time["d"]), _int(copy_time["n"]), _int(copy_time["b"])
    h["run"] = recorded

    # per rank, when the trace is a job's (analysis/job.py)
    from ctf2perfetto.look.report_ranks import collect_ranks

    rep.ranks = collect_ranks(engine, dup_rows, start, end, BINS)

    # findings: redundant classes per site, then the advice rules
    sites = _Sites(engine)
    allocs: dict[int, dict[str, Any]] = {}

    def buffer(alloc_id: Any, mem: str | None, what: str) -> str:
        if alloc_id is None or is_null(alloc_id):
            return f"an untracked {what}" if mem in (None, "untracked") else f"a {mem} {what}"
        a = allocs.get(int(alloc_id))
        if a is None:
            found = _rows(engine, ("allocations",), f"SELECT kind, addr, size FROM memq_allocation "
                                                    f"WHERE alloc_id = {int(alloc_id)}")
            a = allocs[int(alloc_id)] = found[0] if found else {}
        if not a:
            return f"allocation {int(alloc_id)}"
        kind = {"host": "pageable host", "device": "device"}.get(a["kind"], a["kind"])
        return f"the {size(_int(a['size']))} {kind} buffer at {_int(a['addr']):#x}"

    rank_of = {pid: part.rank for part in rep.ranks.parts for pid in part.pids} if rep.ranks else {}

    def where(pid: Any, ip: Any, ts: int, api: str, call_id: Any) -> str:
        who = "" if pid is None else f"pid {pid}" if int(pid) not in rank_of else f"rank {rank_of[int(pid)]}, pid {pid}"
        parts = [who, f"{api}"]
        site = sites.label(pid, ip, ts)
        if site:
            parts.append(f"called from {site}")
        op = sites.op(call_id)
        if op:
            parts.append(f"in PyTorch op {op}")
        return ", ".join(p for p in parts if p)

    if addressed:
        unified_classes = {"unified"} if any(_int(v.get("bytes")) for k, v in auto.items() if k == "unified") else set()
        for r in _rows(engine, ("report", "advice.calls"), REDUNDANT_SITES):
            cls = r["class"]
            if cls == "unified" and not unified_classes:
                continue
            nbytes, proven = _int(r["bytes"]), _int(r["content_bytes"])
            evidence = ("content: fingerprints show the data unchanged" if proven == nbytes and nbytes else
                        f"address upper bound ({share(proven, nbytes)} content-proven): a buffer the CPU or a kernel "
                        "refilled looks the same without fingerprints (memq record --content tells)" if proven else
                        "address upper bound: no fingerprint checked it; a buffer the CPU or a kernel refilled "
                        "looks the same (memq record --content tells)")
            src = buffer(r["src_alloc_id"], r["src_mem"], "source")
            dst = buffer(r["dst_alloc_id"], r["dst_mem"], "destination")
            fix = _fix(cls, r["direction"])
            unproven = cls in ("repeat", "round_trip") and proven < nbytes
            if unproven:  # a staging buffer refilled with new data looks the same by address: never advise against it
                fix = ("only if the data is the same each time (memq record --content proves it; a staging buffer "
                       f"refilled with new data is fine as it is): {fix}")
            rep.findings.append(Finding(
                kind=cls, title=f"{CLASS_WORDS[cls]}, {r['direction']}", count=_int(r["count"]), bytes=nbytes,
                where=where(r["pid"], r["ip"], _int(r["first_ts"]), r["api"], r["first_call_id"]),
                gain_ns=_int(r["gain_dur"]), gain_bytes=0, evidence=evidence, fix=fix, unproven=unproven,
                first_ts=_int(r["first_ts"]), last_ts=_int(r["last_end_ts"]), pid=r["pid"],
                buffers=tuple(int(a) for a in (r["src_alloc_id"], r["dst_alloc_id"]) if a is not None),
                detail=f"{src} to {dst}"))
        pid_of = {_int(p["upid"]): p["pid"] for p in _rows(engine, (), "SELECT upid, pid FROM process")}
        advice.fill_zero_fingerprints(engine)
        overlap = _overlaps(engine)
        for rule in advice.RULES:
            for r in advice.rule_rows(engine, rule.name).records():
                f = _rule_finding(rule, r, pid_of, where, buffer)
                # copies a redundant finding removes need no other fix: count each nanosecond once
                gone, copies = overlap.get((rule.name, _overlap_key(rule.name, r)), (0, 0))
                left = _int(r.get("count")) - copies
                if copies and rule.name in MIN_LEFT and left < MIN_LEFT[rule.name]:
                    continue  # fixing the redundant copies leaves too few for this rule: nothing more to fix
                if f.gain_ns == 0 and not f.gain_bytes:
                    continue  # measured to gain nothing (pinned uploads ran no faster)
                if gone and f.gain_ns and _int(r.get("dur_sum")):
                    f.gain_ns = max(0, int(f.gain_ns * (1 - gone / _int(r["dur_sum"]))))
                    f.detail += (f"; {duration(gone)} of it is in redundant copies (a redundant finding removes "
                                 "them): the gain is what remains")
                rep.findings.append(f)

    # by gain; repeats and round trips only addresses suggest (the CPU or a kernel may have refilled the buffer)
    # after every finding whose gain is certain
    rank = {"content": 0}
    rep.findings.sort(key=lambda f: (f.unproven, -(f.gain_ns or 0), -f.gain_bytes,
                                     rank.get(f.evidence.split(":")[0], 1), -f.bytes))

    # redundant copy time over time, per class
    if addressed or h["red_count"]:
        span = max(end - start, 1)
        for r in _rows(engine, ("report",), f"""SELECT class, MIN({BINS - 1}, MAX(0, (ts - {start}) * {BINS} / {span}))
            AS bin, SUM(redundant_dur) AS d FROM memq_report_copy WHERE class IS NOT NULL
            GROUP BY class, bin"""):
            rep.redundant_bins.setdefault(r["class"], [0] * BINS)[_int(r["bin"])] += _int(r["d"])

    # what the trace lacks
    rep.lacks = warning_lines(*warning_counts(engine))
    windows_note = windows_rows(engine).attrs.get("windows_note")
    if windows_note:
        rep.lacks.append(windows_note)
    if not has_events:
        rep.lacks.append("The trace holds no memory events.")
    elif not addressed:
        rep.lacks.append("The trace's copies carry no addresses (PyTorch-profiler/Kineto source): duplicated bytes, "
                         "repeats, round trips and the advice rules do not apply; counts, bytes, time, staged and "
                         "the unified what-if do.")
    else:
        modes = _rows(engine, ("copies",), "SELECT COUNT(*) AS n, SUM(src_hash IS NOT NULL OR dst_hash_after IS NOT "
                                           "NULL) AS fp FROM memq_copy WHERE source = 'lttng'")[0]
        if _int(modes["n"]) and not _int(modes["fp"]):
            rep.lacks.append("No content fingerprints: every redundant figure is an address upper bound (CPU and "
                             "kernel writes are not traced). Record with memq record --content sampled (the default) "
                             "to prove them.")
        elif h["red_bytes"] > h["red_content_bytes"]:
            rep.lacks.append(f"{size(h['red_bytes'] - h['red_content_bytes'])} of the redundant bytes are address "
                             "upper bounds (no fingerprint could check them: device memory, or no fingerprint taken).")
        if sites.symbolizer is None:
            rep.lacks.append("No loaded-binary events: findings name the API and buffers, not the call site.")
        if not sites.ops:
            rep.lacks.append("No PyTorch profile merged (ctf2perfetto --kineto): findings are not tied to PyTorch ops.")
    if advice.zero_fingerprint("full", 1) is None:
        rep.lacks.append("libxxhash was not found: copies of all-zero data cannot be recognised.")
    return rep


OVERLAPS = """
WITH r AS MATERIALIZED (
  SELECT id, redundant_dur, redundant_bytes = bytes AS whole FROM memq_report_copy WHERE class IS NOT NULL
)
SELECT 'sync_loop' AS rule, s.site AS k1, NULL AS k2, NULL AS k3, NULL AS k4, NULL AS k5, SUM(r.redundant_dur) AS d,
  SUM(r.whole) AS gone
FROM memq_advice_sync_loop_copy s JOIN r USING (id) GROUP BY s.site
UNION ALL
SELECT 'pinning', s.site, NULL, NULL, NULL, NULL, SUM(r.redundant_dur), SUM(r.whole)
FROM memq_advice_pinning_copy s JOIN r USING (id) GROUP BY s.site
UNION ALL
SELECT 'zero_content', z.upid, z.ip, z.api, z.direction, z.dst_alloc_id, SUM(r.redundant_dur), SUM(r.whole)
FROM memq_advice_zero_copy z JOIN r USING (id)
GROUP BY z.upid, z.ip, z.api, z.direction, z.dst_alloc_id
"""


MIN_LEFT = {"sync_loop": 3, "pinning": 2}  # the fewest copies that still make a loop site / a pinning candidate


def _overlap_key(rule: str, r: dict[str, Any]) -> tuple:
    if rule == "zero_content":
        return (r["upid"], r["ip"], r["api"], r["direction"], r["dst_alloc_id"])
    return (r.get("first_call_id"), None, None, None, None)


def _overlaps(engine: Any) -> dict[tuple[str, tuple], tuple[int, int]]:
    """Per advice finding (rule, key): the redundant time of its copies, and how many of them are wholly redundant
    (they go once the redundant finding is fixed)."""
    rows = _rows(engine, ("report", "advice.sync_loop", "advice.pinning", "advice.zero_content"), OVERLAPS)
    return {(r["rule"], (r["k1"], r["k2"], r["k3"], r["k4"], r["k5"])): (_int(r["d"]), _int(r["gone"]))
            for r in rows if _int(r["d"])}


def _rule_finding(rule: Any, r: dict[str, Any], pid_of: dict[int, Any], where: Any, buffer: Any) -> Finding:
    pid = pid_of.get(_int(r.get("upid")))
    first = _int(r.get("first_ts") if r.get("first_ts") is not None else r.get("ts"))
    last = _int(r.get("last_end_ts") if r.get("last_end_ts") is not None else r.get("last_ts") or r.get("end_ts")
                or first)
    api = r.get("api") or ""
    call_id = r.get("first_call_id")
    gain = None if r.get("gain_dur") is None or is_null(r.get("gain_dur")) else _int(r.get("gain_dur"))
    f = Finding(kind=rule.name, title=RULE_WORDS[rule.name], where=where(pid, r.get("ip"), first, api, call_id),
                count=_int(r.get("count", r.get("allocs", 1))), bytes=_int(r.get("bytes", r.get("size"))),
                gain_ns=gain, gain_bytes=0, evidence="", fix=rule.fix, first_ts=first, last_ts=last, pid=pid)
    if rule.name == "zero_content":
        f.evidence = (f"content: the source's fingerprint is that of zeros ({r['proof']}: "
                      + ("every byte hashed)" if r["proof"] == "full" else "16 blocks of 64 bytes hashed)"))
        f.detail = f"{r['direction']} into {buffer(r['dst_alloc_id'], r['dst_mem'], 'destination')}"
    elif rule.name == "pinning":
        f.evidence = "address: the source lies in pageable memory (malloc'd or untracked)"
        f.detail = (f"{buffer(r['src_alloc_id'], r['src_mem'], 'source')} uploaded {r['count']} times at "
                    f"{r['gb_per_s']:.2f} GB/s" + (f"; pinned uploads of this process ran at "
                                                   f"{r['pinned_gb_per_s']:.2f} GB/s" if r["pinned_gb_per_s"] else
                                                   "; no pinned upload in the trace to compare: gain unknown"))
    elif rule.name == "sync_loop":
        f.evidence = f"API: {r['why']} (the calling thread waits for every copy)"
        f.detail = (f"{r['count']} copies of {size(r['bytes_each'])} {r['direction']}, one every "
                    f"{duration(r['period'])}")
    elif rule.name == "pinned_oversize":
        f.count, f.bytes, f.gain_bytes, f.gain_ns = _int(r["copies"]), _int(r["size"]), _int(r["unused_bytes"]), 0
        f.evidence = "address: the highest byte any copy reached"
        f.detail = (f"{size(r['size'])} pinned at {_int(r['addr']):#x} ({r['api']}); copies use "
                    f"{size(r['used_bytes'])}, {size(r['unused_bytes'])} locked for nothing")
        f.where = where(pid, None, first, r["api"], None)
        f.buffers = (int(r["alloc_id"]),)
    elif rule.name == "pinned_churn":
        f.count, f.bytes = _int(r["allocs"]), _int(r["size"]) * _int(r["allocs"])
        f.evidence = "calls: allocations of one size made after others were freed"
        f.detail = (f"{r['allocs']} allocations of {size(r['size'])}, never more than {r['max_live']} live at once; "
                    f"{duration(r['call_dur'])} in the allocating and freeing calls")
    elif rule.name == "zero_bytes":
        f.evidence = "call arguments: size 0"
        f.detail = f"{r['count']} calls ({r['direction']})"
    return f


# -- rendering ---------------------------------------------------------------------------------------
CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#1d1d1f;background:#f6f6f8}
main{max-width:1040px;margin:0 auto;padding:20px 28px 60px}
h1{font-size:22px;margin:8px 0 4px} h2{font-size:18px;margin:30px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}
h3{font-size:15px;margin:18px 0 6px}
.sub{color:#666;margin:0 0 14px}
.cards{display:grid;grid-template-columns:repeat(2,minmax(0,1fr));gap:12px}
.card{background:#fff;border:1px solid #e2e2e6;border-radius:8px;padding:12px 14px}
.card h3{margin:0 0 4px;font-size:13px;text-transform:uppercase;letter-spacing:.04em;color:#555}
.big{font-size:24px;font-weight:600}
.ev{font-size:12px;color:#555;margin-top:6px}
.ev b{color:#333}
.tag{display:inline-block;font-size:11px;padding:1px 6px;border-radius:9px;background:#eee;color:#333;margin-right:4px}
.tag.content{background:#d9f2dd;color:#14532d}.tag.address{background:#fde9c8;color:#7a4a00}
table{border-collapse:collapse;width:100%;background:#fff;font-size:13px}
th,td{border-bottom:1px solid #eee;padding:6px 8px;text-align:left;vertical-align:top}
th{background:#fafafa;font-weight:600}
td.num,th.num{text-align:right;white-space:nowrap}
.fix{color:#0b5394}
.small{font-size:12px;color:#666}
figure{margin:12px 0;background:#fff;border:1px solid #e2e2e6;border-radius:8px;padding:8px}
figcaption{font-size:13px;color:#333;margin:2px 4px 6px;font-weight:600}
ul.lacks li{margin:3px 0}
tr.job td{border-top:2px solid #ccc;background:#fafafa}
details.rank{margin:10px 0;background:#fff;border:1px solid #e2e2e6;border-radius:8px;padding:6px 10px}
details.rank summary{font-weight:600;cursor:pointer;padding:4px 0}
details.rank figure{border:none;padding:0}
code{font-size:12px;background:#f0f0f3;padding:0 3px;border-radius:3px}
"""


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _fig(key: str, value: Any, text: str) -> str:
    """A figure of the page, readable back from the DOM: data-figure (name), data-value (raw number)."""
    raw = "" if value is None else (f"{value:.6g}" if isinstance(value, float) else str(value))
    return f'<span data-figure="{_e(key)}" data-value="{_e(raw)}">{_e(text)}</span>'


def _tag(evidence: str) -> str:
    kind = evidence.split(":")[0].split(" ")[0]
    return f'<span class="tag {_e(kind)}">{_e(kind)}</span>'


def _rel(rep: TraceReport, ts: int | None) -> str:
    return "n/a" if ts is None else f"{(ts - rep.start) / 1e9:.6f} s"


def headline_html(rep: TraceReport) -> str:
    h = rep.headline
    run, copy = h["run"], h["copy_sum"]
    cards = []
    if rep.addressed:
        peak_share = share(h["dup_device_peak"], h["device_live_at_peak"])
        mean_share = share(h["dup_device_mean"], h["device_live_mean"])
        cards.append(f"""<div class="card" id="q-duplicated"><h3>How much memory is duplicated?</h3>
<div class="big">{_fig('dup_peak', h['dup_peak'], size(h['dup_peak']))} at peak</div>
<div>{_fig('dup_mean', h['dup_mean'], size(h['dup_mean']))} on average (time-weighted over the run); peak at
{_e(_rel(rep, h['dup_peak_ts']))}. On the devices (destinations of HtoD and DtoD copies):
{_fig('dup_device_peak', h['dup_device_peak'], size(h['dup_device_peak']))} at peak,
{_fig('dup_device_peak_share', h['device_share_peak'], peak_share)} of the device memory in use then (device and
managed allocations); {_fig('dup_device_mean_share', h['device_share_mean'], mean_share)} of it on average.</div>
<div class="ev"><b>Evidence:</b> {_tag('address')} upper bound. A mirror ends at a free, an overwrite by a copy or
memset, or a content fingerprint that shows a change; CPU stores and kernel writes are not traced.</div></div>""")
    else:
        cards.append("""<div class="card" id="q-duplicated"><h3>How much memory is duplicated?</h3>
<div class="big">n/a</div><div>The trace's copies carry no addresses: which bytes mirror which cannot be known.</div>
</div>""")
    proven = h["red_content_bytes"]
    if not rep.addressed:
        cards.append("""<div class="card" id="q-redundant"><h3>How much time goes into redundant copies?</h3>
<div class="big">n/a</div><div>The trace's copies carry no addresses: whether a copy moved data its destination
already held (repeat, round trip, no-op) cannot be known. Record with memq record for these figures; staged copies
and the unified what-if below apply.</div></div>""")
    classes = ", ".join(f"{c.replace('_', ' ')} {size(_int(v.get('bytes')))} in {duration(_int(v.get('dur_sum')))}"
                        for c, v in h["classes"].items() if _int(v.get("bytes")))
    if rep.addressed:
        cards.append(f"""<div class="card" id="q-redundant"><h3>How much time goes into redundant copies?</h3>
<div class="big">{_fig('red_sum', h['red_sum'], duration(h['red_sum']))} summed,
{_fig('red_wall', h['red_wall'], duration(h['red_wall']))} wall-clock</div>
<div>{_fig('red_count', h['red_count'], f"{h['red_count']:,}")} copies moved
{_fig('red_bytes', h['red_bytes'], size(h['red_bytes']))} that the destination already held:
{_fig('red_share_run', (h['red_wall'] / run) if run else None, share(h['red_wall'], run))} of the run (wall-clock) and
{_fig('red_share_copy', (h['red_sum'] / copy) if copy else None, share(h['red_sum'], copy))} of all copy time
({_e(duration(copy))} in {h['copy_count']:,} copies).{(' By class: ' + _e(classes) + '.') if classes else ''}</div>
<div class="ev"><b>Evidence:</b> {_tag('content')} {_fig('red_content_bytes', proven, size(proven))}
({_e(share(proven, h['red_bytes']))}) proven by content fingerprints; {_tag('address')}
{_e(size(h['red_bytes'] - proven))} address upper bound.</div></div>""")
    cards.append(f"""<div class="card" id="q-staged"><h3>Staged copies (pageable host memory)</h3>
<div class="big">{_fig('staged_sum', h['staged_sum'], duration(h['staged_sum']))}</div>
<div>{_fig('staged_count', h['staged_count'], f"{h['staged_count']:,}")} host&harr;device copies of
{_fig('staged_bytes', h['staged_bytes'], size(h['staged_bytes']))} went through the runtime's bounce buffer
({_e(share(h['staged_sum'], copy))} of copy time): not redundant, slower than needed, and synchronous for the host.
</div><div class="ev"><b>Evidence:</b> {_tag('address')} the host side lies in malloc'd or untracked memory.</div>
</div>""")
    pool = (f"""A shared pool would save {_fig('pool_peak', h['pool_peak'], size(h['pool_peak']))} at peak
({_fig('pool_mean', h['pool_mean'], size(h['pool_mean']))} on average): the bytes held twice by host&harr;device
mirrors.""" if rep.addressed else "What a shared pool would save needs addresses (the duplicated bytes).")
    cards.append(f"""<div class="card" id="q-unified"><h3>What if memory were unified (APU: MI300A, GH200)?</h3>
<div class="big">{_fig('apu_sum', h['apu_sum'], duration(h['apu_sum']))} of copies not needed</div>
<div>{_fig('apu_count', h['apu_count'], f"{h['apu_count']:,}")} copies of
{_fig('apu_bytes', h['apu_bytes'], size(h['apu_bytes']))} ({_e(duration(h['apu_wall']))} wall-clock,
{_e(share(h['apu_sum'], copy))} of copy time) would go: every host&harr;device copy, and every redundant one.
{pool}</div><div class="ev"><b>Evidence:</b> {_tag('address')} directions and duplicated bytes from the address
rules; the copies themselves are certain.</div></div>""")
    return '<div class="cards">' + "".join(cards) + "</div>"


def verdict_words(rep: TraceReport) -> str:
    h = rep.headline
    top = rep.findings[0] if rep.findings else None
    if rep.addressed:
        words = (f"This run spends {duration(h['red_sum'])} ({share(h['red_wall'], h['run'])} of it, "
                 f"{share(h['red_sum'], h['copy_sum'])} of copy time) on copies that moved nothing new and holds up "
                 f"to {size(h['dup_peak'])} twice.")
    else:
        words = (f"The trace's copies carry no addresses: {h['copy_count']:,} copies took {duration(h['copy_sum'])}; "
                 f"on a unified-memory device {duration(h['apu_sum'])} of it would go.")
    if top is not None:
        gain = duration(top.gain_ns) if top.gain_ns else size(top.gain_bytes) if top.gain_bytes else "an unknown amount"
        words += f" Fix first: {top.title} ({top.where}): {top.fix}; it saves up to {gain}."
    return words


def findings_html(rep: TraceReport, limit: int = 25) -> str:
    if not rep.findings:
        return "<p id=\"findings\">No finding: no redundant copy and no advice rule fired.</p>"
    rows = []
    for i, f in enumerate(rep.findings[:limit], 1):
        if f.gain_bytes:
            gain = f"{size(f.gain_bytes)} of memory" + (f", {duration(f.gain_ns)}" if f.gain_ns else "")
        else:
            gain = duration(f.gain_ns) if f.gain_ns else "unknown" if f.gain_ns is None else "0 ns"
        perfetto = (f"{_rel(rep, f.first_ts)} – {_rel(rep, f.last_ts)} from the start "
                    f"(trace ts {f.first_ts} – {f.last_ts})")
        rows.append(f"""<tr data-finding="{i}" data-kind="{_e(f.kind)}" data-gain="{f.gain_ns or 0}"
data-bytes="{f.bytes}" data-count="{f.count}" data-buffers="{_e(' '.join(map(str, f.buffers)))}">
<td class="num">{i}</td><td><b>{_e(f.title)}</b><div class="small">{_e(f.where)}</div>
<div class="small">{_e(f.detail)}</div></td>
<td class="num">{f.count:,}</td><td class="num">{_e(size(f.bytes))}</td><td class="num"><b>{_e(gain)}</b></td>
<td>{_tag(f.evidence)}<div class="small">{_e(f.evidence.split(': ', 1)[-1])}</div></td>
<td class="fix">{_e(f.fix)}<div class="small">Perfetto: {_e(perfetto)}</div></td></tr>""")
    more = (f"<p class=\"small\">{len(rep.findings) - limit} more findings with smaller gains; "
            "<code>memq advice TRACE</code> and <code>memq redundant TRACE --by callsite</code> list all.</p>"
            if len(rep.findings) > limit else "")
    return f"""<table id="findings"><thead><tr><th>#</th><th>What, where</th><th>How often</th><th>Bytes</th>
<th>Gain</th><th>Evidence</th><th>Fix, and where to look</th></tr></thead><tbody>{''.join(rows)}</tbody></table>{more}"""


def _ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    if hi <= lo:
        return [lo]
    import math

    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step) * step
    return [first + i * step for i in range(int((hi - first) / step) + 1)]


def _time_scale(span_ns: float) -> tuple[float, str]:
    """The unit the time axis reads best in: s, ms or µs."""
    return next(((s, u) for s, u in ((1e9, "s"), (1e6, "ms"), (1e3, "µs")) if span_ns >= 2 * s), (1.0, "ns"))


def _time_axis(rep: "TraceReport", pw: int, ph: int) -> list[str]:
    span = max(rep.end - rep.start, 1)
    scale, unit = _time_scale(span)
    out = []
    for t in _ticks(0, span / scale):
        xx = L + pw * t * scale / span
        out.append(f'<line x1="{xx:.1f}" x2="{xx:.1f}" y1="{T + ph}" y2="{T + ph + 4}" stroke="#999"/>'
                   f'<text x="{xx:.1f}" y="{T + ph + 16}" font-size="11" text-anchor="middle" fill="#555">{t:g}</text>')
    out.append(f'<line x1="{L}" x2="{L + pw}" y1="{T + ph}" y2="{T + ph}" stroke="#999"/>'
               f'<text x="{L + pw / 2}" y="{H - 4}" font-size="11" text-anchor="middle" fill="#555">{unit} from '
               'the trace start</text>')
    return out


def _y_axis(top: float, scale: float, unit: str, pw: int, ph: int) -> list[str]:
    """Grid lines and labels of a value axis from 0 to `top` (raw units), labelled in `unit` (raw / `scale`)."""
    out = []
    for t in _ticks(0, top / scale):
        yy = T + ph * (1 - t * scale / top)
        out.append(f'<line x1="{L}" x2="{L + pw}" y1="{yy:.1f}" y2="{yy:.1f}" stroke="#eee"/>'
                   f'<text x="{L - 6}" y="{yy + 4:.1f}" font-size="11" text-anchor="end" fill="#555">{t:g}</text>')
    out.append(f'<text x="12" y="{T + ph / 2}" font-size="11" fill="#555" '
               f'transform="rotate(-90 12 {T + ph / 2})" text-anchor="middle">{unit}</text>')
    return out


def _size_scale(top: float) -> tuple[float, str]:
    for scale, unit in ((1 << 40, "TiB"), (1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if top >= scale:
            return scale, unit
    return 1, "B"


W, H, L, R, T, B = 940, 220, 64, 200, 12, 34


# What a band plot shows (step_svg), said in its caption.
BAND_WORDS = ("the band spans the lowest to the highest value within each pixel column, the line is the "
              "time-weighted mean")
STEP_COLUMNS = 10  # a step line's columns per unit of x (the points' resolution)


def step_svg(rep: TraceReport, key: str, series: dict[str, Series], colors: dict[str, str], caption: str,
             empty: str, rank: int | None = None, band: bool = False) -> str:
    """A plot of `series` over the trace's time: each a step line, or with `band` (a series that swings within a
    pixel column on a long run: a solid block as steps) the band from its lowest to its highest value in each
    column of one unit of x and a line through its time-weighted mean there. `rank`: the rank it shows (a job's
    per-rank plots)."""
    head = _figure_head(key, caption, rank)
    peaks = {name: int(s.value.max()) if len(s) else 0 for name, s in series.items()}
    top = max(peaks.values(), default=0)
    if not series or top <= 0:
        return f'{head}<p class="small">{_e(empty)}</p></figure>'
    scale, unit = _size_scale(top)
    pw, ph = W - L - R, H - T - B

    def y(v: float) -> float:
        return T + ph * (1 - v / top)

    parts = [f'<svg viewBox="0 0 {W} {H}" width="100%" role="img" aria-label="{_e(caption)}">']
    parts += _y_axis(top, scale, unit, pw, ph) + _time_axis(rep, pw, ph)
    ordered = sorted(series.items(), key=lambda kv: kv[0] == "total")  # the total on top of its parts
    for i, (name, s) in enumerate(ordered):
        color, peak = colors.get(name, "#555"), peaks[name]
        width = 2.2 if name == "total" else 1.6
        if band:
            cols = columns(s, rep.start, rep.end, pw)
            outline, mean = _band_points(cols, y, rep.start, rep.end, pw)
            parts.append(f'<polygon data-series="{_e(name)}" data-peak="{peak}" fill="{color}" fill-opacity="0.3" '
                         f'stroke="none" points="{" ".join(outline)}"/>'
                         f'<polyline data-mean="{_e(name)}" fill="none" stroke="{color}" stroke-width="{width}" '
                         f'points="{" ".join(mean)}"/>')
        else:
            pts = _step_points(columns(s, rep.start, rep.end, pw * STEP_COLUMNS), y, pw * STEP_COLUMNS)
            dash = ' stroke-dasharray="5 3"' if name == "total" else ""
            parts.append(f'<polyline data-series="{_e(name)}" data-peak="{peak}" fill="none" stroke="{color}" '
                         f'stroke-width="{width}"{dash} points="{" ".join(pts)}"/>')
        ly = T + 14 + 18 * i
        parts.append(f'<rect x="{L + pw + 12}" y="{ly - 9}" width="12" height="{8 if band else 3}" fill="{color}"/>'
                     f'<text x="{L + pw + 30}" y="{ly - 4}" font-size="12" fill="#333">{_e(name)} '
                     f'(peak {_e(size(peak))})</text>')
    parts.append("</svg>")
    return f'{head}{"".join(parts)}</figure>'


def _step_points(c: Columns, y: Any, count: int) -> list[str]:
    """The polyline of a step series cut into `count` columns across the plot (`c`), from the trace's start to its
    end: in each column holding samples a vertical run through the value reaching it, the lowest and the highest
    there, and the last. What the eye sees of every sample, in at most a few points per column: a long run's
    10^5-10^6 samples made pages of tens of MiB."""
    pw = W - L - R
    pts = [f"{L:.1f},{y(0):.1f}"]
    for col, held, lo, hi, last in zip(*(a.tolist() for a in (c.col, c.held, c.lo, c.hi, c.last))):
        at, shown = f"{L + pw * col / count:.1f}", None
        for v in (held, lo, hi, last):
            if v != shown:
                pts.append(f"{at},{y(v):.1f}")
                shown = v
    pts.append(f"{L + pw:.1f},{y(c.last[-1] if len(c.last) else 0):.1f}")
    return pts


def _band_points(c: Columns, y: Any, start: int, end: int, count: int) -> tuple[list[str], list[str]]:
    """The outline of a series' band (its highest values left to right, then its lowest back; between columns
    holding samples both are the value held) and its mean line (the mean in the middle of each such column, the
    value held across the columns between), for `count` columns of one unit of x."""
    step = (W - L - R) / count
    upper, lower, mean = [(L, 0.0)], [(L, 0.0)], [(L, 0.0)]
    prev_x1, prev_last = float(L), 0
    for col, lo, hi, last, avg in zip(*(a.tolist() for a in (c.col, c.lo, c.hi, c.last, c.mean))):
        x0 = L + step * col
        if x0 > prev_x1:  # columns without samples before this one: the value held
            mean.append((prev_x1, prev_last))
            for edge in (upper, lower, mean):
                edge.append((x0, prev_last))
        upper += [(x0, hi), (x0 + step, hi), (x0 + step, last)]
        lower += [(x0, lo), (x0 + step, lo), (x0 + step, last)]
        mean.append((x0 + step / 2, avg))
        prev_x1, prev_last = x0 + step, last
    mean.append((prev_x1, prev_last))
    for edge in (upper, lower, mean):
        edge.append((float(L + W - L - R), prev_last))

    def pts(edge: list[tuple[float, float]]) -> list[str]:
        out: list[str] = []
        for xx, v in edge:
            p = f"{xx:.1f},{y(v):.1f}"
            if not out or out[-1] != p:
                out.append(p)
        return out

    return pts(upper) + pts(lower)[::-1], pts(mean)


def _figure_head(key: str, caption: str, rank: int | None) -> str:
    """A plot's opening tag and caption: data-plot names it, data-rank its rank (none for the whole trace)."""
    of = "" if rank is None else f' data-rank="{rank}"'
    return f'<figure data-plot="{_e(key)}"{of}><figcaption>{_e(caption)}</figcaption>'


def bars_svg(rep: TraceReport, bins: dict[str, list[int]] | None = None,
             caption: str = "Redundant copy time over time, per class (summed prorated time per bin)",
             rank: int | None = None) -> str:
    """Redundant copy time per class in BINS bins of the trace's time: the trace's, or `bins` (a rank's)."""
    bins = rep.redundant_bins if bins is None else bins
    head = _figure_head("redundant", caption, rank)
    totals = [sum(b[i] for b in bins.values()) for i in range(BINS)] if bins else []
    top = max(totals, default=0)
    if top <= 0:
        return f'{head}<p class="small">No redundant copy.</p></figure>'
    scale, unit = next(((s, u) for s, u in ((1e9, "s"), (1e6, "ms"), (1e3, "µs")) if top >= s), (1, "ns"))
    pw, ph = W - L - R, H - T - B
    bw = pw / BINS
    parts = [f'<svg viewBox="0 0 {W} {H}" width="100%" role="img" aria-label="{_e(caption)}">']
    parts += _y_axis(top, scale, unit, pw, ph) + _time_axis(rep, pw, ph)
    base = [0] * BINS
    for i, (cls, b) in enumerate(sorted(bins.items())):
        color = CLASS_COLORS.get(cls, "#777")
        for j, v in enumerate(b):
            if v:
                h0, h1 = ph * base[j] / top, ph * (base[j] + v) / top
                parts.append(f'<rect data-class="{_e(cls)}" data-bin="{j}" data-value="{v}" x="{L + j * bw:.1f}" '
                             f'y="{T + ph - h1:.1f}" width="{max(bw - 1, 1):.1f}" height="{h1 - h0:.1f}" '
                             f'fill="{color}"/>')
                base[j] += v
        ly = T + 14 + 18 * i
        parts.append(f'<rect x="{L + pw + 12}" y="{ly - 9}" width="12" height="8" fill="{color}"/>'
                     f'<text x="{L + pw + 30}" y="{ly - 2}" font-size="12" fill="#333">{_e(cls.replace("_", " "))} '
                     f'({_e(duration(sum(b)))})</text>')
    parts.append("</svg>")
    return f'{head}{"".join(parts)}</figure>'


def trace_html(rep: TraceReport, index: int) -> str:
    from ctf2perfetto.look.report_ranks import ranks_html

    lacks = "".join(f"<li>{_e(line)}</li>" for line in rep.lacks) or "<li>Nothing: no loss, no window.</li>"
    dup = {k: v for k, v in rep.duplicated.items()}
    ranks = len(rep.ranks.parts) if rep.ranks else 0
    job = f" (the job: all {ranks} ranks)" if ranks else ""
    per_rank = f' · <a href="#ranks-{index}">{ranks} ranks: figures and plots per rank</a>' if ranks else ""
    return f"""<section data-trace="{index}">
<h1>{_e(rep.name)}</h1>
<p class="sub">Source: {_e(rep.source)} · {_e(duration(rep.end - rep.start))} traced · {_e(duration(rep.recorded))}
recorded{per_rank} · <span id="verdict-{index}" data-figure="verdict">{_e(verdict_words(rep))}</span></p>
{headline_html(rep)}
<h2>Findings, by what fixing them would gain</h2>
{findings_html(rep)}
<h2>Over time{_e(job)}</h2>
{step_svg(rep, "live", rep.live, KIND_COLORS, "Live bytes per memory kind", "No live-bytes counters in the trace.")}
{step_svg(rep, "duplicated", dup, DIR_COLORS, "Duplicated bytes (upper bound), all mirrors and per copy direction: "
          f"{BAND_WORDS}", "Nothing duplicated." if rep.addressed else "Not applicable: the copies carry no addresses.",
          band=True)}
{bars_svg(rep)}
{ranks_html(rep, index)}
<h2>What the trace lacks</h2>
<ul class="lacks">{lacks}</ul>
</section>"""


def render(reports: list[TraceReport]) -> str:
    title = "memq report: " + ", ".join(r.name for r in reports)
    body = "".join(trace_html(r, i) for i, r in enumerate(reports))
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; img-src data:">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{_e(title)}</title><style>{CSS}</style></head>
<body><main>{body}
<p class="small">Made by memq report. Times are seconds from each trace's start; sizes in binary units (MiB =
2<sup>20</sup> bytes). Every figure with evidence <i>address</i> is an upper bound: writes by CPU code and GPU kernels
are not traced. Open a trace in Perfetto with <code>memq open TRACE</code> and go to the time range of a finding.</p>
</main></body></html>
"""


def write_report(traces: list[str], out: os.PathLike[str] | str, *, trace_processor: str | None = None,
                 stage: Any = None, workers: int | None = None, scheduler: str | None = None) -> list[TraceReport]:
    """Collect every trace's report and write the page to `out` (atomically). `workers` / `scheduler`: a job
    directory's recordings are decoded as Dask tasks (cli.output.on_cluster; the page is the same)."""
    import contextlib

    from ctf2perfetto.analysis.base import load
    from ctf2perfetto.cli.output import on_cluster
    from ctf2perfetto.outfiles import AtomicOutput, check_output

    check_output(Path(out), inputs=traces)  # before the analyses, not after
    reports = []
    for trace in traces:
        with contextlib.ExitStack() as stack:
            if stage:
                stack.enter_context(stage(f"analysing {trace}"))
            with on_cluster(trace, workers, scheduler):  # the conversion only: the queries run here
                engine = stack.enter_context(load(trace, trace_processor=trace_processor))
            reports.append(collect(engine, Path(trace).name))
    page = render(reports)
    with AtomicOutput(Path(out), inputs=traces) as target:
        target.path.write_text(page, encoding="utf-8")
        target.commit()
    return reports
