"""`memq diff A B`: what changed between two runs of one program (before and after a fix).

Per redundant class, per call site and per copy direction: count, bytes and time in A and in B; the duplicated
bytes' peak and time-weighted mean; and a verdict line. Call sites are matched across runs by library + symbol +
offset in the library (the `ip` minus the library's load address), never by address: two runs load libraries at
different addresses. A trace without loaded-binary events matches by API function alone (and says so).

`--fail-if-worse PCT`: exit 1 when a headline figure (redundant copy time or bytes, duplicated peak or mean, staged
copy time) grew by more than PCT percent (from 0 to anything counts as worse), for CI regression checks.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ctf2perfetto.engine.rows import is_null

CLASSES = ("repeat", "round_trip", "no_op", "managed", "unified", "redundant", "staged")
FIGS = ("count", "bytes", "dur_sum")
# the figures --fail-if-worse watches, in the order the verdict names them: (key, words, kind)
HEADLINE = (("redundant.dur_sum", "redundant copy time", "time"), ("redundant.bytes", "redundant bytes", "size"),
            ("repeat.bytes", "repeat bytes", "size"), ("dup.peak", "duplicated peak", "size"),
            ("dup.mean", "duplicated mean", "size"), ("staged.dur_sum", "staged copy time", "time"))


def _int(v: Any) -> int:
    return 0 if v is None or is_null(v) else int(v)


@dataclass
class RunFigures:
    name: str
    classes: dict[str, dict[str, int]] = field(default_factory=dict)
    directions: dict[str, dict[str, int]] = field(default_factory=dict)
    sites: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)  # (class, site, direction)
    dup: dict[str, float] = field(default_factory=dict)
    sites_by: str = "symbol"

    def headline(self, key: str) -> float:
        group, fig = key.split(".")
        return float(self.dup.get(fig, 0.0)) if group == "dup" else float(self.classes.get(group, {}).get(fig, 0))


SITES = """
SELECT IFNULL(r.class, 'copies') AS class, p.pid, k.ip, r.api, r.direction, COUNT(*) AS count,
  SUM(IIF(r.class IS NULL, r.bytes, r.redundant_bytes)) AS bytes, SUM(IIF(r.class IS NULL, r.dur, r.redundant_dur))
    AS dur_sum, MIN(r.ts) AS first_ts
FROM memq_redundant_copy('{unified}') r
LEFT JOIN memq_advice_call k ON k.call_id = r.call_id
LEFT JOIN process p ON p.upid = r.upid
GROUP BY r.class IS NULL, r.class, r.upid, k.ip, r.api, r.direction
UNION ALL
SELECT 'copies', p.pid, k.ip, r.api, r.direction, COUNT(*), SUM(r.bytes), SUM(r.dur), MIN(r.ts)
FROM memq_redundant_copy('{unified}') r
LEFT JOIN memq_advice_call k ON k.call_id = r.call_id
LEFT JOIN process p ON p.upid = r.upid
WHERE r.class IS NOT NULL
GROUP BY r.upid, k.ip, r.api, r.direction
"""


def site_key(site: Any, api: str) -> str:
    """A call site as two runs of one program share it: library + symbol + offset in the library."""
    if site is None or site.binary is None:
        return api
    where = f"{Path(site.binary).name}:{site.function or '?'}+{site.offset:#x}"
    return f"{api} from {where}"


def collect(engine: Any, name: str, unified: str = "auto") -> RunFigures:
    from ctf2perfetto.analysis.base import module_rows
    from ctf2perfetto.analysis.duplicated import duplicated_rows
    from ctf2perfetto.analysis.redundant import redundant_rows

    run = RunFigures(name)
    for r in redundant_rows(engine, unified).records():
        if r["pid"] is None:
            run.classes[r["class"]] = {f: _int(r[f]) for f in (*FIGS, "wall_dur")}
    for r in duplicated_rows(engine).records():
        if r["pid"] is None and r["grouping"] == "total":
            run.dup = {"peak": _int(r["peak_bytes"]), "mean": float(r["mean_bytes"] or 0.0)}
    for r in module_rows(engine, ("summary",), "SELECT direction, SUM(count) AS count, SUM(bytes) AS bytes, "
                         "SUM(dur_sum) AS dur_sum FROM memq_summary_copy WHERE source = 'lttng' OR NOT EXISTS "
                         "(SELECT 1 FROM memq_summary_copy WHERE source = 'lttng') GROUP BY direction").records():
        run.directions[r["direction"]] = {f: _int(r[f]) for f in FIGS}
    rows = module_rows(engine, ("redundant", "advice.calls"), SITES.format(unified=unified)).records()
    symbolizer = _symbolizer(engine)
    if symbolizer is None:
        run.sites_by = "api"
    wanted = sorted({(int(r["pid"]), int(r["ip"]) & (2**64 - 1), int(r["first_ts"])) for r in rows
                     if r["ip"] is not None and r["pid"] is not None})
    resolved = dict(zip(wanted, symbolizer.resolve(wanted))) if symbolizer and wanted else {}
    for r in rows:
        site = None
        if r["ip"] is not None and r["pid"] is not None:
            site = resolved.get((int(r["pid"]), int(r["ip"]) & (2**64 - 1), int(r["first_ts"])))
        key = (r["class"], site_key(site, r["api"]), r["direction"])
        got = run.sites.setdefault(key, dict.fromkeys(FIGS, 0))
        for f in FIGS:
            got[f] += _int(r[f])
    return run


def _symbolizer(engine: Any) -> Any:
    from ctf2perfetto.analysis.base import module_rows

    binaries = module_rows(engine, ("attribution",), "SELECT * FROM memq_binary").records()
    if not binaries:
        return None
    from ctf2perfetto.analysis.callsite import Mapping, Symbolizer

    return Symbolizer([Mapping(int(b["pid"]), int(b["baddr"]), int(b["memsz"]), str(b["path"]),
                               str(b["build_id"] or ""), int(b["ts"])) for b in binaries
                       if b["pid"] is not None and b["baddr"] is not None and b["memsz"]])


def change(a: float, b: float) -> float:
    """Percent change from a to b; inf from 0 to more, 0 from 0 to 0."""
    if a == 0:
        return 0.0 if b == 0 else math.inf
    return 100.0 * (b - a) / a


def _words(kind: str, v: float) -> str:
    from ctf2perfetto.analysis.base import size_words, time_words

    return time_words(v) if kind == "time" else size_words(v)


def _pct(p: float) -> str:
    return "new" if p == math.inf else f"{p:+.0f}%"


@dataclass
class Diff:
    a: RunFigures
    b: RunFigures
    verdict: str
    worst: tuple[str, float]  # the headline figure that grew most, and by how much (percent)
    classes: list[dict[str, Any]]
    directions: list[dict[str, Any]]
    sites: list[dict[str, Any]]


def _rows(a: dict[Any, dict[str, Any]], b: dict[Any, dict[str, Any]], keys: list[str]) -> list[dict[str, Any]]:
    out = []
    for key in sorted(set(a) | set(b), key=str):
        ra, rb = a.get(key, {}), b.get(key, {})
        row = dict(zip(keys, key if isinstance(key, tuple) else (key,)))
        for f in FIGS:
            va, vb = _int(ra.get(f)), _int(rb.get(f))
            row.update({f"{f}_a": va, f"{f}_b": vb, f"{f}_change": vb - va})
        if any(row[f"{f}_a"] or row[f"{f}_b"] for f in FIGS):
            out.append(row)
    return out


def compare(a: RunFigures, b: RunFigures) -> Diff:
    changes = [(key, words, kind, a.headline(key), b.headline(key)) for key, words, kind in HEADLINE]
    worst = max(((key, change(va, vb)) for key, _, _, va, vb in changes), key=lambda kv: kv[1])
    better = [f"{words} {_words(kind, va)} -> {_words(kind, vb)} ({_pct(change(va, vb))})"
              for key, words, kind, va, vb in changes if vb < va]
    worse = [f"{words} {_words(kind, va)} -> {_words(kind, vb)} ({_pct(change(va, vb))})"
             for key, words, kind, va, vb in changes if vb > va]
    if not better and not worse:
        verdict = f"{b.name} is the same as {a.name}: no headline figure changed."
    elif better and not worse:
        verdict = f"{b.name} is better than {a.name}: " + "; ".join(better) + "."
    elif worse and not better:
        verdict = f"{b.name} is worse than {a.name}: " + "; ".join(worse) + "."
    else:
        verdict = f"{b.name} is mixed against {a.name}: better " + "; ".join(better) + "; worse " + "; ".join(worse) + "."
    rep_a, rep_b = a.classes.get("repeat", {}).get("bytes", 0), b.classes.get("repeat", {}).get("bytes", 0)
    if rep_a and not rep_b:
        verdict += " Repeat bytes are now 0: nothing is uploaded twice."
    if a.sites_by != "symbol" or b.sites_by != "symbol":
        verdict += " (Call sites matched by API function: a trace has no loaded-binary events.)"
    sites = _rows({k: v for k, v in a.sites.items()}, {k: v for k, v in b.sites.items()},
                  ["class", "site", "direction"])
    return Diff(a, b, verdict, worst,
                _rows({c: a.classes.get(c, {}) for c in CLASSES}, {c: b.classes.get(c, {}) for c in CLASSES},
                      ["class"]) + [{"class": f"duplicated {k}", "count_a": None, "count_b": None,
                                     "count_change": None, "bytes_a": int(a.dup.get(k, 0)),
                                     "bytes_b": int(b.dup.get(k, 0)),
                                     "bytes_change": int(b.dup.get(k, 0)) - int(a.dup.get(k, 0)),
                                     "dur_sum_a": None, "dur_sum_b": None, "dur_sum_change": None}
                                    for k in ("peak", "mean")],
                _rows(a.directions, b.directions, ["direction"]), sites)


def diff_traces(trace_a: str, trace_b: str, *, unified: str = "auto", trace_processor: str | None = None,
                stage: Any = None) -> Diff:
    import contextlib

    from ctf2perfetto.analysis.base import load

    runs = []
    for trace in (trace_a, trace_b):
        ctx = stage(f"analysing {trace}") if stage else contextlib.nullcontext()
        with ctx, load(trace, trace_processor=trace_processor) as engine:
            runs.append(collect(engine, Path(trace).name, unified))
    return compare(*runs)


def as_json(d: Diff) -> dict[str, Any]:
    return {"a": d.a.name, "b": d.b.name, "verdict": d.verdict,
            "worst": {"figure": d.worst[0], "change_pct": None if d.worst[1] == math.inf else d.worst[1],
                      "new": d.worst[1] == math.inf},
            "headline": {key: {"a": d.a.headline(key), "b": d.b.headline(key)} for key, _, _ in HEADLINE},
            "classes": d.classes, "directions": d.directions, "sites": d.sites,
            "sites_matched_by": "symbol" if d.a.sites_by == d.b.sites_by == "symbol" else "api"}
