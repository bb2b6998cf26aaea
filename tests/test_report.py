"""`memq report` and `memq diff`: the page's figures are the analyses', the findings rank a true repeat first and
never a reused staging buffer filled with new data, the page renders in headless Chromium with no error and no
request outside the file; the diff of a loop before and after keeping its weights on the device says repeat bytes
went to 0.

The recorded cases run examples/hip_offload.py under `memq record` against the fake HIP runtime; the screenshots
are kept under the test's tmp dir (printed) for a person to look at.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ctf2perfetto import analyses
from ctf2perfetto.analysis import advice
from ctf2perfetto.analysis.duplicated import duplicated_rows
from ctf2perfetto.analysis.redundant import redundant_rows
from ctf2perfetto.convert.write import write_trace
from ctf2perfetto.events import EventBatch, MemKind as M, TraceInfo
from ctf2perfetto.look import report
from ctf2perfetto.look.series import columns
from support.rows import Rows, in_time_order

REPO = Path(__file__).resolve().parent.parent
UI = REPO / "tests" / "ui"
MiB = 1 << 20
HOST, DEV, PIN, STAGING = 0x10000000, 0x900000000, 0x70000000, 0x78000000
H2D = 1


def memq(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ctf2perfetto", *args], capture_output=True, text=True, cwd=REPO,
                          timeout=600)


def open_page(page: Path, screenshot: Path) -> dict:
    """The page in headless Chromium with no network (tests/ui/report_page.mjs)."""
    assert (UI / "node_modules" / "playwright-core").is_dir(), "run scripts/install.sh (npm ci in tests/ui)"
    done = subprocess.run(["node", str(UI / "report_page.mjs"), str(page), str(screenshot)], capture_output=True,
                          text=True, timeout=180, cwd=UI, env={**os.environ, "PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


# -- a hand-written loop: a reused staging buffer with new data, and a true repeat -----------------------------
def staging_and_repeat() -> list[dict]:
    """Four steps, 1000 ns apart: the 8 MiB pinned weights go up again unchanged (same fingerprint: a repeat from
    step 2 on, 3 x 8 MiB in 3 x 200 ns), and the 1 MiB pinned staging buffer goes up with new data each time (a new
    fingerprint: never redundant), 100 ns each."""
    log = Rows(41)
    rows = [log.gpu_alloc(100, PIN, 8 * MiB, M.PINNED), log.gpu_alloc(200, STAGING, MiB, M.PINNED),
            log.gpu_alloc(300, DEV, 8 * MiB), log.gpu_alloc(400, DEV + 16 * MiB, MiB)]
    t, seq = 1000, 0
    for step in range(4):
        seq += 1
        rows.append(log.fingerprinted(log.copy(t, t + 200, DEV, PIN, 8 * MiB, H2D), seq, src=0xABC))
        seq += 1
        rows.append(log.fingerprinted(log.copy(t + 300, t + 400, DEV + 16 * MiB, STAGING, MiB, H2D), seq,
                                      src=0x1000 + step))
        t += 1000
    return rows


def test_true_repeat_first_staging_buffer_never(tmp_path):
    path = tmp_path / "loop.pftrace"
    write_trace([EventBatch.from_rows(in_time_order(staging_and_repeat()))], TraceInfo(devices=[]), path)
    with analyses.load(path) as engine:
        rep = report.collect(engine, "loop")
        staging = int(engine.query("INCLUDE PERFETTO MODULE memq.allocations; SELECT alloc_id FROM memq_allocation "
                                   f"WHERE addr = {STAGING}")["alloc_id"].iloc[0])
    top = rep.findings[0]
    assert (top.kind, top.count, top.bytes, top.gain_ns) == ("repeat", 3, 3 * 8 * MiB, 600)
    assert top.evidence.startswith("content")
    assert all(staging not in f.buffers for f in rep.findings), [(f.kind, f.buffers) for f in rep.findings]
    assert [f.kind for f in rep.findings] == ["repeat"]  # pinned, asynchronous, fully used: nothing else to fix
    h = rep.headline
    assert (h["red_count"], h["red_bytes"], h["red_sum"], h["red_content_bytes"]) == (3, 24 * MiB, 600, 24 * MiB)
    assert h["copy_sum"] == 4 * 200 + 4 * 100 and h["staged_count"] == 0


def test_a_repeat_only_addresses_suggest_comes_after_a_proven_one(tmp_path):
    """A pinned buffer uploaded 4 times with no fingerprint (3 x 400 ns: maybe a staging buffer the CPU refilled)
    and one uploaded 4 times unchanged by its fingerprints (3 x 100 ns): the proven repeat leads, and the other's
    fix says it holds only if the data is the same."""
    log = Rows(43)
    rows = [log.gpu_alloc(100, PIN, MiB, M.PINNED), log.gpu_alloc(150, STAGING, MiB, M.PINNED),
            log.gpu_alloc(200, DEV, 4 * MiB)]
    t = 1000
    for step in range(4):
        rows.append(log.copy(t, t + 400, DEV, STAGING, MiB, H2D))
        rows.append(log.fingerprinted(log.copy(t + 500, t + 600, DEV + 2 * MiB, PIN, MiB, H2D), step + 1, src=0x77))
        t += 1000
    path = tmp_path / "unproven.pftrace"
    write_trace([EventBatch.from_rows(in_time_order(rows))], TraceInfo(devices=[]), path)
    with analyses.load(path) as engine:
        rep = report.collect(engine, "unproven")
    first, second = rep.findings
    assert (first.kind, first.gain_ns, first.unproven) == ("repeat", 300, False)
    assert (second.kind, second.gain_ns, second.unproven) == ("repeat", 1200, True)
    assert second.fix.startswith("only if the data is the same each time") and second.evidence.startswith("address")


def test_zero_copy_rule_in_the_report(tmp_path):
    """A copy of zeros shows as its own finding with its content proof."""
    log = Rows(42)
    zero = advice.zero_fingerprint("sampled", 2 * MiB) % (1 << 64)
    rows = [log.gpu_alloc(100, PIN, 2 * MiB, M.PINNED), log.gpu_alloc(200, DEV, 2 * MiB),
            log.fingerprinted(log.copy(1000, 1500, DEV, PIN, 2 * MiB, H2D), 1, src=zero)]
    path = tmp_path / "zeros.pftrace"
    write_trace([EventBatch.from_rows(in_time_order(rows))], TraceInfo(devices=[]), path)
    with analyses.load(path) as engine:
        rep = report.collect(engine, "zeros")
    [f] = rep.findings
    assert (f.kind, f.count, f.bytes, f.gain_ns) == ("zero_content", 1, 2 * MiB, 500)
    assert "hipMemset" in f.fix and f.evidence.startswith("content")


# -- plots downsampled in SQL, with exact peaks -------------------------------------------------------------------
def dense_burst() -> list[dict]:
    """1,500 steps of 100 ns (a device buffer allocated, uploaded from pinned memory, read back into another, freed 3
    steps later), a managed buffer live throughout, one 8 ns spike of a 32 MiB buffer and its upload at step 777, and
    a last allocation 1 s later: the burst falls in a few of the plots' pixel columns."""
    log = Rows(44)
    pin, back, managed, big = PIN, PIN + 64 * MiB, 0x500000000, DEV + (1 << 32)
    rows = [log.gpu_alloc(100, pin, 64 * MiB, M.PINNED), log.gpu_alloc(150, back, 8 * MiB, M.PINNED),
            log.gpu_alloc(200, managed, 3 * MiB, M.MANAGED)]
    sizes = [(i % 7 + 1) * 4096 for i in range(1500)]
    for i in range(1500):
        t, dev = 1000 + 100 * i, DEV + i * 65536
        rows += [log.gpu_alloc(t, dev, sizes[i], dur=5), log.copy(t + 10, t + 30, dev, pin, sizes[i], H2D),
                 log.copy(t + 40, t + 60, back, dev, sizes[i], 2)]
        if i >= 3:
            rows.append(log.gpu_free(t + 70, DEV + (i - 3) * 65536, sizes[i - 3], dur=5))
        if i == 777:
            rows += [log.gpu_alloc(t + 80, big, 32 * MiB, dur=2), log.copy(t + 83, t + 86, big, pin, 32 * MiB, H2D),
                     log.gpu_free(t + 88, big, 32 * MiB, dur=2)]
    rows.append(log.gpu_alloc(10**9, DEV + (1 << 33), MiB))
    return rows


def _summed(parts: dict) -> list[tuple[int, int]]:
    """The sum of step series, the plain way: at each time any part changes, every part's last value by then."""
    times = sorted({ts for samples in parts.values() for ts, _ in samples})
    out = []
    for t in times:
        total = 0
        for samples in parts.values():
            before = [v for ts, v in samples if ts <= t]
            total += before[-1] if before else 0
        out.append((t, total))
    return out


def _peak(series: list[tuple[int, int]]) -> tuple[int, int | None]:
    top = max((v for _, v in series), default=0)
    return (top, next(ts for ts, v in series if v == top)) if top > 0 else (0, None)


def _mean(series: list[tuple[int, int]], start: int, end: int) -> float:
    ends = [ts for ts, _ in series[1:]] + [end]
    return sum(v * max(0, min(e, end) - max(ts, start)) for (ts, v), e in zip(series, ends)) / (end - start)


def test_plots_are_downsampled_with_exact_peaks(tmp_path):
    path = tmp_path / "burst.pftrace"
    write_trace([EventBatch.from_rows(in_time_order(dense_burst()))], TraceInfo(devices=[]), path)
    with analyses.load(path) as engine:
        rep = report.collect(engine, "burst")
        live = engine.rows("INCLUDE PERFETTO MODULE memq.counters; SELECT track_id, kind, ts, value "
                           "FROM memq_live_counter").records()
        dup = engine.rows("INCLUDE PERFETTO MODULE memq.duplicated_trace; SELECT direction, ts, value "
                          "FROM memq_duplicated_trace_counter").records()
    per_track: dict = {}
    for r in live:
        per_track.setdefault((r["kind"], r["track_id"]), []).append((r["ts"], r["value"]))
    per_dir: dict = {}
    for r in dup:
        per_dir.setdefault(r["direction"] or "total", []).append((r["ts"], r["value"]))
    kinds = {kind: _summed({k: v for k, v in per_track.items() if k[0] == kind}) for kind, _ in per_track}
    assert len(dup) > 6000 and len(live) > 3000  # far more samples than the burst's columns can show

    # every plotted series has the exact peak of its samples, drawn from a handful of points per pixel column
    assert rep.live.keys() == kinds.keys() and rep.duplicated.keys() == per_dir.keys()
    assert _peak(per_dir["HtoD"])[0] >= 32 * MiB  # the 8 ns spike is there
    page = report.render([rep])
    lines = re.findall(r'data-series="([^"]+)" data-peak="(\d+)"[^>]* points="([^"]*)"', page)
    assert {name: int(peak) for name, peak, _ in lines} == {**{k: _peak(v)[0] for k, v in kinds.items()},
                                                           **{k: _peak(v)[0] for k, v in per_dir.items()}}
    ph = report.H - report.T - report.B  # a plot's height; its y axis runs from 0 to its highest series' peak
    for name, peak, points in lines:
        ys = [float(xy.split(",")[1]) for xy in points.split()]
        assert len(ys) <= 4 * 40, (name, len(ys))  # the burst spans fewer than 40 of the columns
        top = max(_peak(v)[0] for v in (kinds if name in kinds else per_dir).values())
        assert min(ys) == pytest.approx(report.T + ph * (1 - int(peak) / top), abs=0.051), name  # drawn up to it

    # the headline's device and pool figures, from the same samples
    h, start, end = rep.headline, rep.start, rep.end
    device = _summed({k: v for k, v in per_track.items() if k[0] in ("device", "managed")})
    on_device = _summed({d: per_dir[d] for d in ("HtoD", "DtoD") if d in per_dir})
    pool = _summed({d: per_dir[d] for d in ("HtoD", "DtoH") if d in per_dir})
    peak, when = _peak(on_device)
    assert (h["dup_device_peak"], h["dup_device_peak_ts"]) == (peak, when)
    assert h["device_live_at_peak"] == [v for ts, v in device if ts <= when][-1]
    assert h["device_live_peak"] == _peak(device)[0]
    assert h["dup_device_mean"] == pytest.approx(_mean(on_device, start, end), rel=1e-9)
    assert h["device_live_mean"] == pytest.approx(_mean(device, start, end), rel=1e-9)
    assert (h["pool_peak"], h["pool_peak_ts"]) == _peak(pool)
    assert h["pool_mean"] == pytest.approx(_mean(pool, start, end), rel=1e-9)


def _column_figures(series: list[tuple[int, int]], start: int, end: int, count: int) -> dict[int, tuple]:
    """Per column of [start, end) cut into `count` equal parts that holds a sample, the plain way: the value held
    when it starts, the lowest and the highest value in it, the last, and the time-weighted mean over it. A sample
    at `end` falls in the last column."""
    out = {}
    for col in sorted({min(count - 1, (ts - start) * count // (end - start)) for ts, _ in series}):
        t0, t1 = start + col * (end - start) / count, start + (col + 1) * (end - start) / count
        before = [v for ts, v in series if ts < t0]
        inside = [v for ts, v in series if t0 <= ts < t1 or (col == count - 1 and ts == end)]
        held = before[-1] if before else 0
        steps = [(t0, held)] + [(ts, v) for ts, v in series if t0 <= ts <= t1]
        area = sum(v * (min(t1, nxt) - ts) for (ts, v), (nxt, _) in zip(steps, steps[1:] + [(t1, 0)]))
        out[col] = (held, min([held] + inside), max([held] + inside), inside[-1], area / (t1 - t0))
    return out


def test_duplicated_plot_is_a_band_with_its_mean(tmp_path):
    """The duplicated-bytes plot: per pixel column the band from the lowest to the highest value and a line through
    the time-weighted mean; the per-column figures against the samples read the plain way."""
    path = tmp_path / "burst.pftrace"
    write_trace([EventBatch.from_rows(in_time_order(dense_burst()))], TraceInfo(devices=[]), path)
    with analyses.load(path) as engine:
        rep = report.collect(engine, "burst")
        result = engine.rows("INCLUDE PERFETTO MODULE memq.duplicated_trace; SELECT direction, ts, value "
                             "FROM memq_duplicated_trace_counter")
        with_null = engine.rows("SELECT NULL AS x, 1 AS y")
    # the samples decoded in bulk are those decoded cell by cell; a NULL leaves it to the cell-by-cell decoding
    direction, ts, value = result.arrays()
    assert list(zip(direction, ts.tolist(), value.tolist())) == result.rows and with_null.arrays() is None
    per_dir: dict = {}
    for d, t, v in result.rows:
        per_dir.setdefault(d or "total", []).append((t, v))

    count = 500  # columns enough for the burst to fill several, and to leave others without a sample
    for name, samples in per_dir.items():
        got = columns(rep.duplicated[name], rep.start, rep.end, count)
        want = _column_figures(samples, rep.start, rep.end, count)
        assert got.col.tolist() == list(want), name
        for i, (held, lo, hi, last, mean) in enumerate(want.values()):
            assert (got.held[i], got.lo[i], got.hi[i], got.last[i]) == (held, lo, hi, last), (name, i)
            assert got.mean[i] == pytest.approx(mean, rel=1e-9, abs=1e-6), (name, i)

    page = report.render([rep])
    plot = re.search(r'<figure data-plot="duplicated".*?</figure>', page, re.S).group(0)
    bands = re.findall(r'<polygon data-series="([^"]+)" data-peak="(\d+)"[^>]* points="([^"]*)"', plot)
    means = dict(re.findall(r'<polyline data-mean="([^"]+)"[^>]* points="([^"]*)"', plot))
    assert {name for name, _, _ in bands} == set(per_dir) == set(means)
    ph, top = report.H - report.T - report.B, max(_peak(v)[0] for v in per_dir.values())
    for name, peak, points in bands:
        ys = [float(xy.split(",")[1]) for xy in points.split()]
        assert int(peak) == _peak(per_dir[name])[0]
        assert min(ys) == pytest.approx(report.T + ph * (1 - int(peak) / top), abs=0.051), name  # up to the peak
        # the mean line stays inside the band: never above the peak, never below 0
        assert all(min(ys) - 0.051 <= float(xy.split(",")[1]) <= report.T + ph + 0.051
                   for xy in means[name].split()), name


# -- the offload loop, recorded --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def offload(fake_gpu, tmp_path_factory) -> dict[str, Path]:
    """examples/hip_offload.py with a reused pinned staging buffer (--fresh-batches), before and after keeping the
    weights on the device (--keep-weights), recorded and converted."""
    out = tmp_path_factory.mktemp("report")
    traces = {}
    for name, extra in (("before", []), ("after", ["--keep-weights"])):
        done = memq("record", "-o", str(out / name), "--api", "hip,libc", "--", sys.executable,
                    str(REPO / "examples" / "hip_offload.py"), "--hip-lib", str(fake_gpu.hip_runtime),
                    "--fresh-batches", *extra)
        assert done.returncode == 0, done.stderr
        done = memq("convert", str(out / name), "-o", str(out / f"{name}.pftrace"))
        assert done.returncode == 0, done.stderr
        traces[name] = out / f"{name}.pftrace"
    return traces


def test_report_page_states_the_analyses_figures(offload, tmp_path):
    page = tmp_path / "report.html"
    done = memq("report", str(offload["before"]), "-o", str(page))
    assert done.returncode == 0, done.stderr
    assert "Fix first: " in done.stdout  # the verdict, also on the terminal
    text = page.read_text()
    assert "<script" not in text and "http://" not in text and "https://" not in text

    got = open_page(page, tmp_path / "report.png")
    print("screenshot:", tmp_path / "report.png")
    assert got["pageErrors"] == [] and got["consoleErrors"] == [], (got["pageErrors"], got["consoleErrors"])
    assert got["externalRequests"] == [] and got["failedRequests"] == [], got
    assert (tmp_path / "report.png").stat().st_size > 30_000

    fig = {k.split(":", 1)[1]: v["value"] for k, v in got["figures"].items()}
    with analyses.load(offload["before"]) as engine:
        totals = {r["class"]: r for r in redundant_rows(engine, "auto").records() if r["pid"] is None}
        apu = {r["class"]: r for r in redundant_rows(engine, "yes").records() if r["pid"] is None}
        total = next(r for r in duplicated_rows(engine).records() if r["pid"] is None and r["grouping"] == "total")
        copies = engine.query("INCLUDE PERFETTO MODULE memq.copies; SELECT * FROM memq_copy")
        staging = int(copies[copies["api"] == "hipMemcpyAsync"]["src_alloc_id"].iloc[0])
        weights = copies[copies["bytes"] == 16 * MiB]
    red = totals["redundant"]
    assert int(fig["red_sum"]) == red["dur_sum"] and int(fig["red_wall"]) == red["wall_dur"]
    assert int(fig["red_count"]) == red["count"] and int(fig["red_bytes"]) == red["bytes"]
    assert int(fig["red_content_bytes"]) == red["content_bytes"]
    assert int(fig["staged_sum"]) == totals["staged"]["dur_sum"]
    assert int(fig["staged_count"]) == totals["staged"]["count"]
    assert int(fig["apu_sum"]) == apu["redundant"]["dur_sum"] and int(fig["apu_bytes"]) == apu["redundant"]["bytes"]
    assert int(fig["dup_peak"]) == total["peak_bytes"]
    assert float(fig["dup_mean"]) == pytest.approx(total["mean_bytes"], rel=1e-5)
    assert float(fig["red_share_copy"]) == pytest.approx(red["dur_sum"] / copies["dur"].sum(), rel=1e-5)

    findings = got["findings"]
    # (which finding leads depends on this machine's copy times: the hand-written loop above checks the order)
    # the weights go up 8 times, unchanged: 7 repeats of 16 MiB, proven by their fingerprints
    [top] = [f for f in findings if f["kind"] == "repeat"]
    assert top["count"] == 7 and top["bytes"] == 7 * 16 * MiB, top
    assert "content" in top["text"] and "keep it on the device" in top["text"]
    assert top["gain"] == pytest.approx(sum(weights["dur"].iloc[1:]), rel=0.01)
    # the synchronous weights uploads are no loop once the repeats are gone; the read-backs neither
    assert not [f for f in findings if f["kind"] == "sync_loop" and f["bytes"] == 8 * 16 * MiB]
    share = float(fig["dup_device_peak_share"])
    assert 0 < share <= 1.0  # duplicated device bytes are device memory in use
    assert all(staging not in f["buffers"] for f in findings), findings
    certain = [f["gain"] for f in findings if "only if the data is the same" not in f["text"]]
    assert certain == sorted(certain, reverse=True)
    plots = {p["plot"]: p for p in got["plots"]}
    assert plots["live"]["svg"] and {s["name"] for s in plots["live"]["series"]} >= {"device", "pinned"}
    assert max(s["peak"] for s in plots["duplicated"]["series"]) == total["peak_bytes"]
    assert sum(b["value"] for b in plots["redundant"]["bars"]) == red["dur_sum"]


def test_diff_before_after_keeping_weights_on_the_device(offload):
    done = memq("diff", str(offload["before"]), str(offload["after"]), "--format", "json")
    assert done.returncode == 0, done.stderr
    d = json.loads(done.stdout)
    assert d["headline"]["repeat.bytes"] == {"a": 7 * 16 * MiB, "b": 0}
    assert "Repeat bytes are now 0" in d["verdict"] and d["verdict"].startswith("after.pftrace is better")
    assert d["sites_matched_by"] == "symbol"  # libffi's call site, matched by library + symbol + offset
    repeat = [s for s in d["sites"] if s["class"] == "repeat"]
    assert repeat and all(s["bytes_b"] == 0 for s in repeat) and sum(s["bytes_a"] for s in repeat) == 7 * 16 * MiB
    htod = next(r for r in d["directions"] if r["direction"] == "HtoD")
    assert htod["count_a"] - htod["count_b"] == 7  # the weights' uploads inside the loop
    table = memq("diff", str(offload["before"]), str(offload["after"]))
    assert table.returncode == 0 and table.stdout.splitlines()[0] == d["verdict"]
    # the other way round it is a regression: --fail-if-worse exits 1, and says why
    worse = memq("diff", str(offload["after"]), str(offload["before"]), "--fail-if-worse", "5")
    assert worse.returncode == 1 and "worse by more than 5%" in worse.stderr, worse.stderr
    same = memq("diff", str(offload["before"]), str(offload["before"]), "--fail-if-worse", "0")
    assert same.returncode == 0 and "is the same as" in same.stdout


def test_bad_input_is_one_line(tmp_path):
    done = memq("report", str(tmp_path / "missing.pftrace"), "-o", str(tmp_path / "r.html"))
    assert done.returncode == 2 and "no such trace" in done.stderr and "Traceback" not in done.stderr
    done = memq("report", str(tmp_path), "-o", str(tmp_path / "r.png"))
    assert done.returncode == 2 and "HTML" in done.stderr
    done = memq("diff", str(tmp_path / "a.pftrace"), str(tmp_path / "b.pftrace"))
    assert done.returncode == 2 and "no such trace" in done.stderr
    bare = subprocess.run([sys.executable, "-m", "ctf2perfetto"], capture_output=True, text=True, cwd=REPO)
    assert bare.returncode == 2 and "memq report TRACE -o report.html" in bare.stderr


def test_trace_without_addresses_says_what_applies(tmp_path, test_data):
    """A PyTorch-profiler trace: no duplicated or redundant figures (n/a, said why), the unified what-if applies."""
    kineto = test_data / "kineto" / "mi250_minitoy_train_ROCm6_2_kineto.json.gz"
    with analyses.load(kineto) as engine:
        rep = report.collect(engine, kineto.name)
    assert not rep.addressed and rep.findings == []
    assert rep.headline["apu_count"] == rep.headline["copy_count"] > 0  # every copy is host<->device there
    page = report.render([rep])
    assert "carry no addresses" in page and 'data-figure="dup_peak"' not in page
