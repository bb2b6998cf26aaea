"""Attribution of copies, mirrors and allocations to PyTorch ops or call sites.

`attribute(engine, df, by)` adds columns to a DataFrame of the analyses
(one row per copy or mirror, with a `call_id` column; or per allocation, with an
`alloc_id` column) saying where each row came from:

* `by="op"`: the innermost PyTorch op (Kineto `cpu_op` slice, merged with
  `ctf2perfetto --kineto`) on the same thread that encloses the API call
  (or the allocating event): columns `op` and `op_slice_id`.
* `by="callsite"`: binary + function (+ file:line) of the call's `ip`, through the
  `memq.binary` events and the binaries on disk (ctf2perfetto.analysis.callsite):
  columns `callsite`, `binary`, `function`, `source`.

Rows whose anchor event is missing or that fall in no op / no known binary get
None; how many is in `df.attrs["warnings"]`.
"""
from __future__ import annotations

import bisect
from typing import Any

import pandas as pd

from ctf2perfetto.analysis.callsite import Mapping, Symbolizer
from ctf2perfetto.errors import MemqError, UsageError

BY = ("op", "callsite")
KEYS = ("call_id", "alloc_id")

_MODULE = "INCLUDE PERFETTO MODULE memq.attribution;\n"


def attribute(engine: Any, df: pd.DataFrame, by: str) -> pd.DataFrame:
    """A copy of df with the attribution columns for `by` ("op" or "callsite")."""
    if by not in BY:
        raise UsageError(f"--by {by}: expected one of {', '.join(BY)}")
    key = next((k for k in KEYS if k in df.columns), None)
    if key is None:
        raise MemqError(f"cannot attribute by {by}: the table has no {' or '.join(KEYS)} column")
    anchors = engine.query(f"{_MODULE}SELECT * FROM memq_anchor('{key}')").drop_duplicates("anchor_key")
    out = df.copy()
    joined = out[[key]].merge(anchors, how="left", left_on=key, right_on="anchor_key")
    warnings: list[str] = list(df.attrs.get("warnings", []))
    missing = int(joined["anchor_ts"].isna().sum())
    if missing:
        warnings.append(f"{missing} row(s) whose {key} matches no event of the trace: not attributed")
    if by == "op":
        ops, op_ids = _innermost_ops(engine, joined)
        out["op"], out["op_slice_id"] = ops, op_ids
        outside = sum(1 for o, ts in zip(ops, joined["anchor_ts"]) if o is None and pd.notna(ts))
        if outside:
            warnings.append(f"{outside} row(s) fall inside no PyTorch op of their thread")
    else:
        sites, problems = _callsites(engine, joined)
        out["callsite"] = [s.label() if s else None for s in sites]
        out["binary"] = [s.binary if s else None for s in sites]
        out["function"] = [s.function if s else None for s in sites]
        out["source"] = [s.source if s else None for s in sites]
        warnings.extend(problems)
    out.attrs["warnings"] = warnings
    return out


def _innermost_ops(engine: Any, joined: pd.DataFrame) -> tuple[list[str | None], list[int | None]]:
    ops = engine.query(f"{_MODULE}SELECT * FROM memq_cpu_op")
    if ops.empty:
        raise UsageError("--by op needs a PyTorch profiler trace merged in: convert with "
                         "`ctf2perfetto TRACE_DIR --kineto profile.json -o out.pftrace`")
    per_thread: dict[int, tuple[list[int], list[int], list[str], list[int], list[bool]]] = {}
    for utid, group in ops.groupby("utid", sort=False):
        per_thread[int(utid)] = (group["op_ts"].tolist(), (group["op_ts"] + group["op_dur"]).tolist(),
                                 group["op"].tolist(), group["op_slice_id"].tolist(),
                                 group["top_level"].astype(bool).tolist())
    names: list[str | None] = []
    ids: list[int | None] = []
    for utid, ts, dur in zip(joined["utid"], joined["anchor_ts"], joined["anchor_dur"]):
        found = None
        if pd.notna(ts) and int(utid) in per_thread:
            starts, ends, op_names, op_ids, top_level = per_thread[int(utid)]
            begin, end = int(ts), int(ts) + max(int(dur), 0)
            # Ops on one thread nest, so walking back from the latest op that
            # starts no later than the call, the first that covers it is the
            # innermost, and past a top-level op that does not, none does.
            i = bisect.bisect_right(starts, begin) - 1
            while i >= 0:
                if ends[i] >= end:
                    found = i
                    break
                if top_level[i]:
                    break
                i -= 1
            if found is not None:
                names.append(op_names[found])
                ids.append(int(op_ids[found]))
                continue
        names.append(None)
        ids.append(None)
    return names, ids


def _callsites(engine: Any, joined: pd.DataFrame) -> tuple[list, list[str]]:
    binaries = engine.query(f"{_MODULE}SELECT * FROM memq_binary")
    if binaries.empty:
        raise MemqError("--by callsite: the trace has no memq.binary events (record with `memq record`, "
                        "which writes the library map: memq:lib_load, or LTTng's statedump and lttng_ust_lib events)")
    if joined["ip"].isna().all():
        raise MemqError("--by callsite: the trace's events carry no ip (record with `memq record`, "
                        "which adds the ip context)")
    mappings = [Mapping(int(r.pid), int(r.baddr), int(r.memsz), str(r.path), str(r.build_id or ""), int(r.ts))
                for r in binaries.itertuples() if pd.notna(r.pid) and pd.notna(r.baddr) and pd.notna(r.memsz)]
    symbolizer = Symbolizer(mappings)
    wanted = [(i, int(pid), int(ip) & (2**64 - 1), int(ts))
              for i, (pid, ip, ts) in enumerate(zip(joined["pid"], joined["ip"], joined["anchor_ts"]))
              if pd.notna(ip) and pd.notna(pid)]
    resolved = symbolizer.resolve([(pid, ip, ts) for _, pid, ip, ts in wanted])
    sites: list = [None] * len(joined)
    for (i, *_), site in zip(wanted, resolved):
        sites[i] = site
    problems = [f"call-site mapping: {p}" for p in symbolizer.problems()]
    unknown = sum(1 for s in sites if s is not None and s.binary is None)
    if unknown:
        problems.append(f"{unknown} row(s) whose ip lies in no binary the trace reported")
    return sites, problems
