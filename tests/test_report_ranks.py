"""`memq report` of a job: per rank, the headline figures with their spread and the plots (live bytes per kind,
duplicated bytes, redundant copy time), read back from the page in headless Chromium and checked against the
oracle (tests/oracle.py) run over each rank's processes; a trace without ranks shows no per-rank part.

The job is a hand-written log of three ranks under a launcher (as torchrun starts them), rank 1 with a data-loader
worker: rank r uploads its pinned weights of 64 * (r + 1) bytes 3 + r times, unchanged (repeats, proven by
fingerprints), each upload 100 * (r + 1) ns long; the worker uploads its own 32 bytes twice.
"""
from __future__ import annotations

import pytest

import oracle
from ctf2perfetto import analyses
from ctf2perfetto.convert.write import write_trace
from ctf2perfetto.events import EventBatch, MemKind as M, TraceInfo
from ctf2perfetto.look import report
from support.rows import Rows, in_time_order
from test_report import open_page

PIN, DEV, H2D = 0x70000000, 0x900000000, 1
LAUNCHER, RANK_PIDS, WORKER = 40, {0: 41, 1: 42, 2: 43}, 52
NODE = "node-a"
OWNER = {41: 0, 42: 1, 43: 2, 52: 1}  # pid -> the rank it counts under


def job_log() -> list[dict]:
    rows = []
    for r, pid in RANK_PIDS.items():
        log, size, dev = Rows(pid), 64 * (r + 1), DEV + r * 0x100000
        rows += [log.gpu_alloc(100 + r, PIN, size, M.PINNED), log.gpu_alloc(200 + r, dev, size)]
        for step in range(3 + r):
            t = 1000 + 1000 * step + 10 * r
            rows.append(log.fingerprinted(log.copy(t, t + 100 * (r + 1), dev, PIN, size, H2D), step + 1,
                                          src=0xABC0 + r))
    worker, dev = Rows(WORKER), DEV + 0x800000
    rows += [worker.gpu_alloc(300, PIN + 0x1000, 32, M.PINNED), worker.gpu_alloc(310, dev, 32)]
    for step, t in enumerate((1500, 2500)):
        rows.append(worker.fingerprinted(worker.copy(t, t + 40, dev, PIN + 0x1000, 32, H2D), step + 1, src=0xF00))
    return in_time_order(rows)


def job_info() -> TraceInfo:
    idents = [{"pid": LAUNCHER, "ppid": 1, "host": NODE, "env": {}},
              {"pid": WORKER, "ppid": RANK_PIDS[1], "host": NODE, "env": {"RANK": "1"}}]
    idents += [{"pid": pid, "ppid": LAUNCHER, "host": NODE, "env": {"RANK": str(r), "WORLD_SIZE": "3"}}
               for r, pid in RANK_PIDS.items()]
    return TraceInfo(devices=[], identities=idents, processes={LAUNCHER: "torchrun", WORKER: "pt_data_worker",
                                                              **{p: "python" for p in RANK_PIDS.values()}})


def per_rank_oracle(rows: list[dict], window: tuple[int, int]) -> dict[int, dict]:
    """Per rank, from the log alone: the job's figures (each process's, summed over the rank's processes), the
    peak of the rank's duplicated bytes over time and of its live device bytes."""
    ref = oracle.build(rows)
    groups = oracle.mirror_groups(ref)
    out: dict[int, dict] = {}
    for pid, rank in OWNER.items():
        got = out.setdefault(rank, {"peak_bytes": 0, "redundant_dur": 0, "redundant_bytes": 0, "redundant_count": 0,
                                    "series": [], "device": []})
        got["peak_bytes"] += oracle.counter_figures(groups.get(("total", pid, None), []), window)["peak"]
        red = oracle.redundant_totals(ref, pid)["redundant"]
        got["redundant_dur"] += red["time"]
        got["redundant_bytes"] += red["bytes"]
        got["redundant_count"] += red["count"]
        got["series"].append(oracle.counter_series(groups.get(("total", pid, None), []), window))
        got["device"] += [r["size"] for r in rows if r["pid"] == pid and r.get("mem") == M.DEVICE]
    for got in out.values():
        got["dup_series_peak"] = max((v for _, v in report.series_sum(got.pop("series"))), default=0)
        got["device_peak"] = sum(got.pop("device"))  # never freed: all live at the end
    return out


def test_job_report_per_rank_figures_spread_and_plots(tmp_path):
    rows = job_log()
    path = tmp_path / "job.pftrace"
    write_trace([EventBatch.from_rows(rows)], job_info(), path)
    with analyses.load(path) as engine:
        rep = report.collect(engine, "job")
        trace = engine.query("INCLUDE PERFETTO MODULE memq.trace; SELECT start_ts, end_ts FROM memq_trace")
    want = per_rank_oracle(rows, (int(trace["start_ts"].iloc[0]), int(trace["end_ts"].iloc[0])))
    assert sorted(want) == [0, 1, 2] and want[2]["redundant_dur"] > want[1]["redundant_dur"] > 0

    page = tmp_path / "job.html"
    page.write_text(report.render([rep]), encoding="utf-8")
    got = open_page(page, tmp_path / "job.png")
    print("screenshot:", tmp_path / "job.png")
    assert got["pageErrors"] == [] and got["consoleErrors"] == [], (got["pageErrors"], got["consoleErrors"])
    assert got["externalRequests"] == [] and got["failedRequests"] == [], got

    fig = {k.split(":", 1)[1]: v for k, v in got["figures"].items()}
    for rank, w in want.items():
        for f in ("peak_bytes", "redundant_dur", "redundant_bytes", "redundant_count"):
            assert int(fig[f"rank{rank}.{f}"]["value"]) == w[f], (rank, f)
    # the job row: the whole trace's peak over time (at most the sum of the ranks'), all redundant copies
    assert int(fig["job.redundant_dur"]["value"]) == sum(w["redundant_dur"] for w in want.values())
    assert 0 < int(fig["job.peak_bytes"]["value"]) <= sum(w["peak_bytes"] for w in want.values())
    # the spread: min / median / max over the ranks, and which rank has them
    for f in ("peak_bytes", "redundant_dur", "redundant_bytes"):
        values = sorted((w[f], r) for r, w in want.items())
        assert int(fig[f"spread.{f}.min"]["value"]) == values[0][0]
        assert int(float(fig[f"spread.{f}.median"]["value"])) == values[1][0]
        assert int(fig[f"spread.{f}.max"]["value"]) == values[2][0]
    row = next(s for s in rep.ranks.spread if s["figure"] == "redundant_dur")
    assert (row["min_rank"], row["max_rank"]) == (0, 2)
    # findings say which rank: the top one is rank 2's repeat (its uploads are the longest), the worker's is rank 1's
    assert got["findings"][0]["kind"] == "repeat" and f"rank 2, pid {RANK_PIDS[2]}" in got["findings"][0]["text"]
    assert any(f"rank 1, pid {WORKER}" in f["text"] for f in got["findings"])

    plots = {(p["plot"], p["rank"]): p for p in got["plots"]}
    for rank, w in want.items():
        key = str(rank)
        assert plots[("live", key)]["svg"] and plots[("duplicated", key)]["svg"]
        live = {s["name"]: s["peak"] for s in plots[("live", key)]["series"]}
        assert live["device"] == w["device_peak"], (rank, live)
        assert [s["peak"] for s in plots[("duplicated", key)]["series"]] == [w["dup_series_peak"]]
        assert sum(b["value"] for b in plots[("redundant", key)]["bars"]) == w["redundant_dur"]
    # the comparison plot holds one line per rank; the job's own plots stay
    compare = {s["name"]: s["peak"] for s in plots[("duplicated-ranks", None)]["series"]}
    assert compare == {f"rank {r}": w["dup_series_peak"] for r, w in want.items()}
    assert ("live", None) in plots and ("redundant", None) in plots
    assert sum(b["value"] for b in plots[("redundant", None)]["bars"]) == \
        sum(w["redundant_dur"] for w in want.values())


def test_no_per_rank_part_without_ranks(tmp_path):
    rows = [r for r in job_log() if r["pid"] == RANK_PIDS[0]]
    path = tmp_path / "one.pftrace"
    write_trace([EventBatch.from_rows(rows)], TraceInfo(devices=[]), path)
    with analyses.load(path) as engine:
        rep = report.collect(engine, "one")
    assert rep.ranks is None
    page = report.render([rep])
    assert 'data-table="ranks"' not in page and "data-rank=" not in page
