"""Hand-worked cases for each figure of the analyses, the Kineto traces, and the CLI.

Every expected number below is worked out by hand in the test from the events it
writes (times in ns, sizes in bytes), not read back from the code.
"""
from __future__ import annotations

import gzip
import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pandas as pd
import pytest

from ctf2perfetto import analyses
from ctf2perfetto.events import EventBatch, EventKind as K, MemKind as M, TraceInfo
from ctf2perfetto.convert.write import write_trace
from support.rows import Rows, in_time_order, unified

MiB = 1 << 20
PID = 77
HOST, HOST2, DEV, MANAGED, UNTRACKED = 0x10000000, 0x30000000, 0x900000000, 0xA00000000, 0x50000000
PINNED, DEV2 = 0x70000000, 0x900100000
KINETO = sorted((Path(__file__).resolve().parent / "data" / "kineto").glob("*.json.gz"))


LOG = Rows(PID)
malloc, free, gpu_alloc, gpu_free, copy, copy_2d, memset = (LOG.malloc, LOG.free, LOG.gpu_alloc, LOG.gpu_free,
                                                             LOG.copy, LOG.copy_2d, LOG.memset)


@pytest.fixture
def trace(tmp_path):
    """Write rows (sorted by end time) as a trace; return its path."""
    def make(rows: list[dict], devices: list[dict] | None = None) -> Path:
        path = tmp_path / f"case{len(list(tmp_path.iterdir()))}.pftrace"
        write_trace([EventBatch.from_rows(in_time_order(rows))], TraceInfo(devices=devices or []), path)
        return path
    return make


def totals(df: pd.DataFrame) -> dict[str, tuple]:
    whole = df[df["pid"].isna()]
    return {r["class"]: (r["count"], r["bytes"], r["dur_sum"], r["wall_dur"]) for r in whole.to_dict("records")}


def mirror_ranges(engine) -> set[tuple]:
    """Mirrors as (dst, src, bytes, ts, end_ts): pieces of one copy with one lifetime that continue each other
    are joined, so the sets below do not depend on where memq.mirrors cuts its pieces."""
    out: list[list] = []
    for r in analyses.mirrors(engine).sort_values(["copy_id", "ts", "dst"]).itertuples():
        end = None if pd.isna(r.end_ts) else int(r.end_ts)
        last = out[-1] if out else None
        if last and (last[5], last[3], last[4]) == (r.copy_id, int(r.ts), end) and last[0] + last[2] == r.dst \
                and last[1] + last[2] == r.src:
            last[2] += int(r.bytes)
        else:
            out.append([int(r.dst), int(r.src), int(r.bytes), int(r.ts), end, r.copy_id])
    return {tuple(m[:5]) for m in out}


def counter(engine, grouping: str = "total", key=None) -> list[tuple[int, int]]:
    """The whole-trace duplicated-bytes counter of one group: (ts, value) at every change."""
    df = analyses.duplicated_counter(engine, grouping)
    df = df[df["pid"].isna() & (df["key"].isna() if key is None else df["key"] == key)]
    return [(int(r.ts), int(r.value)) for r in df.itertuples()]


def classes(per_copy: pd.DataFrame) -> list[str | None]:
    """The per-copy `class` column, None where nothing is redundant."""
    return [c if isinstance(c, str) else None for c in per_copy["class"]]


def alloc_id(engine, kind: str, addr: int) -> int:
    """Id of the one allocation of `kind` at `addr`."""
    df = engine.query(f"""INCLUDE PERFETTO MODULE memq.allocations;
        SELECT alloc_id FROM memq_allocation WHERE kind = '{kind}' AND addr = {addr}""")
    assert len(df) == 1, (kind, hex(addr), df)
    return int(df["alloc_id"].iloc[0])


def group(df: pd.DataFrame, grouping: str, key=None, pid=None) -> dict:
    sel = df[(df["grouping"] == grouping) & (df["pid"].isna() if pid is None else df["pid"] == pid)]
    sel = sel[sel["key"].isna()] if key is None else sel[sel["key"] == key]
    assert len(sel) == 1, (grouping, key, pid, df)
    return sel.iloc[0].to_dict()


# -- the story from the issue: h->d 4 MiB, again, back 1 MiB, free the host buffer ---------
def test_repeat_round_trip_and_free(trace):
    path = trace([
        malloc(1000, HOST, 4 * MiB),
        gpu_alloc(1100, DEV, 4 * MiB),
        copy(2000, 3000, DEV, HOST, 4 * MiB, 1),          # new data on the device
        copy(4000, 5000, DEV, HOST, 4 * MiB, 1),          # the same bytes again: repeat
        copy(6000, 6500, HOST, DEV, 1 * MiB, 2),          # first MiB back where it came from: round trip
        free(8000, HOST),                                  # host copy gone: no more mirror
    ])
    with analyses.load(path) as engine:
        red = totals(analyses.redundant(engine))
        assert red["repeat"] == (1, 4 * MiB, 1000, 1000)
        assert red["round_trip"] == (1, 1 * MiB, 500, 500)
        assert red["managed"] == (0, 0, 0, 0) and red["unified"] == (0, 0, 0, 0)
        assert red["redundant"] == (2, 5 * MiB, 1500, 1500)
        assert red["staged"] == (3, 9 * MiB, 2500, 2500)  # malloc'd host memory is pageable

        dup = analyses.duplicated(engine)
        # 4 MiB of device bytes mirror the host from 3000; at 6500 the host's first MiB
        # mirrors the device instead (still 4 MiB); the free at 8000 ends everything.
        total = group(dup, "total")
        assert (total["peak_bytes"], total["peak_ts"]) == (4 * MiB, 3000)
        assert total["byte_ns"] == 4 * MiB * (8000 - 3000)
        assert total["window_start"] == 1000 and total["window_end"] == 8000
        assert total["mean_bytes"] == pytest.approx(4 * MiB * 5000 / 7000)
        assert group(dup, "direction", "HtoD")["byte_ns"] == 4 * MiB * (6500 - 3000) + 3 * MiB * (8000 - 6500)
        assert group(dup, "direction", "DtoH")["byte_ns"] == 1 * MiB * (8000 - 6500)
        assert group(dup, "untracked_source", "0")["peak_bytes"] == 4 * MiB

        # The first copy's mirror ends when the second rewrites the device; the round trip rewrites the
        # second copy's first source MiB at 6500; the free ends the rest, and the round trip's mirror.
        assert mirror_ranges(engine) == {(DEV, HOST, 4 * MiB, 3000, 5000), (DEV, HOST, 1 * MiB, 5000, 6500),
                                         (DEV + MiB, HOST + MiB, 3 * MiB, 5000, 8000),
                                         (HOST, DEV, 1 * MiB, 6500, 8000)}


def test_partial_overlap_and_memset(trace):
    path = trace([
        malloc(1000, HOST, 200),
        gpu_alloc(1100, DEV, 200),
        copy(2000, 2100, DEV, HOST, 100, 1),             # d[0:100] <- h[0:100]
        copy(3000, 3100, DEV + 50, HOST + 50, 100, 1),   # d[50:150] <- h[50:150]: 50 repeated
        memset(4000, 4100, DEV + 60, 20),                # d[60:80] overwritten
        copy(5000, 5100, DEV, HOST, 150, 1),             # repeats d[0:60] and d[80:150] = 130 bytes
        malloc(6000, HOST2, 8),                          # the trace goes on
    ])
    with analyses.load(path) as engine:
        per_copy = analyses.redundant_copies(engine).sort_values("ts")
        assert per_copy["repeat_bytes"].tolist() == [0, 50, 130]
        assert per_copy["class"].tolist()[1:] == ["repeat", "repeat"]
        # prorated time: 100 ns * 50/100 and 100 ns * 130/150 (floored)
        assert per_copy["redundant_dur"].tolist() == [0, 50, 86]
        # 100 bytes from 2100, 150 from 3100, 130 from 4100 (memset), 150 from 5100 to the end.
        assert counter(engine) == [(2100, 100), (3100, 150), (4100, 130), (5100, 150), (6000, 0)]
        total = group(analyses.duplicated(engine), "total")
        assert (total["peak_bytes"], total["peak_ts"]) == (150, 3100)
        assert total["byte_ns"] == 100 * 1000 + 150 * 1000 + 130 * 1000 + 150 * 900


def test_managed_unified_and_untracked(trace):
    rows = [
        gpu_alloc(1000, MANAGED, 64, M.MANAGED),
        gpu_alloc(1100, DEV, 64),
        copy(2000, 2040, MANAGED, UNTRACKED, 64, 4),  # Default kind, managed endpoint, untracked source
        copy(3000, 3100, DEV, UNTRACKED, 32, 1),      # HtoD from untracked (pageable) memory
        copy(4000, 4100, UNTRACKED + 128, MANAGED + 32, 16, 2),  # managed source
        malloc(5000, HOST, 8),                         # the trace goes on after the copies
    ]
    apu = [unified(PID)]
    with analyses.load(trace(rows, apu)) as engine:
        per_copy = analyses.redundant_copies(engine).sort_values("ts")
        # Default kind: untracked source counts as host, managed as device.
        assert per_copy["direction"].tolist() == ["HtoD", "HtoD", "DtoH"]
        assert per_copy["managed_bytes"].tolist() == [64, 0, 16]
        assert per_copy["unified_bytes"].tolist() == [0, 32, 0]  # managed takes precedence over unified
        assert per_copy["staged"].tolist() == [1, 1, 1]
        red = totals(analyses.redundant(engine))
        assert red["managed"] == (2, 80, 140, 140) and red["unified"] == (1, 32, 100, 100)
        assert totals(analyses.redundant(engine, "no"))["unified"] == (0, 0, 0, 0)
        dup = analyses.duplicated(engine)
        assert group(dup, "untracked_source", "1")["peak_bytes"] == 64 + 32
    with analyses.load(trace(rows)) as engine:  # no device description: auto means not unified
        assert totals(analyses.redundant(engine))["unified"] == (0, 0, 0, 0)
        assert totals(analyses.redundant(engine, "yes"))["unified"] == (1, 32, 100, 100)


def test_wall_clock_is_the_union_across_streams(trace):
    rows = [malloc(1000, HOST, 100), gpu_alloc(1100, DEV, 100), gpu_alloc(1200, DEV + 1000, 100),
            copy(2000, 2100, DEV, HOST, 100, 1), copy(2200, 2300, DEV + 1000, HOST, 100, 1)]
    # Two repeats on two streams and threads, overlapping: [3000, 3400) and [3200, 3600).
    rows += [copy(3000, 3400, DEV, HOST, 100, 1, stream=1, tid=PID + 1),
             copy(3200, 3600, DEV + 1000, HOST, 100, 1, stream=2, tid=PID + 2)]
    with analyses.load(trace(rows)) as engine:
        red = totals(analyses.redundant(engine))
        assert red["repeat"] == (2, 200, 800, 600)


def test_realloc_in_place_ends_the_mirror(trace):
    rows = [malloc(1000, HOST, 64), gpu_alloc(1100, DEV, 64),
            copy(2000, 2100, DEV, HOST, 64, 1),
            LOG.realloc(3000, HOST, HOST, 64),
            copy(4000, 4100, DEV, HOST, 64, 1)]
    with analyses.load(trace(rows)) as engine:
        assert analyses.redundant_copies(engine)["repeat_bytes"].tolist() == [0, 0]
        m = analyses.mirrors(engine).sort_values("ts")
        assert m["end_ts"].tolist()[0] == 3000 and pd.isna(m["end_ts"].tolist()[1])


def test_leaks_by_kind_and_size(trace):
    rows = [malloc(1000 + 10 * i, HOST + 64 * i, 64) for i in range(4)] + [free(2000, HOST)]
    rows += [gpu_alloc(3000, DEV, MiB), malloc(4000, HOST2, 100)]
    with analyses.load(trace(rows)) as engine:
        leaks = analyses.leaks(engine)
        got = {(r["kind"], r["size"]): (r["count"], r["bytes"]) for r in leaks.to_dict("records")}
        assert got == {("host", 64): (3, 192), ("device", MiB): (1, MiB), ("host", 100): (1, 100)}
        alloc = analyses.summary(engine)["allocations"].set_index("kind")
        assert alloc.loc["host", "count"] == 5 and alloc.loc["host", "leaked"] == 4
        # 4 * 64 live before the free at 2000, then 3 * 64 + 100 from 4000: the peak.
        assert (alloc.loc["host", "peak_live_bytes"], alloc.loc["host", "peak_ts"]) == (3 * 64 + 100, 4000)
        assert alloc.loc["device", "peak_live_bytes"] == MiB


def test_no_memory_events(trace, capsys):
    path = trace([dict(kind=K.GPU_SYNC, begin=1000, ts=1100, pid=PID, tid=PID, api="hipDeviceSynchronize")])
    with analyses.load(path) as engine:
        dup = analyses.duplicated(engine)
        assert dup["peak_bytes"].tolist() == [0] and dup.attrs["note"] == analyses.NO_EVENTS
        assert all(v == (0, 0, 0, 0) for v in totals(analyses.redundant(engine)).values())
    for command in ("duplicated", "redundant", "summary", "leaks"):
        out = _memq(command, str(path))
        assert out.returncode == 0, out.stderr
        assert "no memory events" in out.stdout and "upper bounds" in out.stdout


# -- Kineto -------------------------------------------------------------------------------
def _json_copies(path: Path) -> dict[tuple[str, str], dict]:
    """Independent count from the JSON: per (kind, direction) count, bytes, ns, pageable. A copy without `bytes`
    (ROCm's gpu_memcpy) has the `size` of the runtime call with its correlation id."""
    events = json.load(gzip.open(path))
    events = events["traceEvents"] if isinstance(events, dict) else events
    call_size = {e["args"]["correlation"]: int(str(e["args"]["size"]), 0) for e in events
                 if e.get("cat") in ("cuda_runtime", "hip_runtime", "runtime") and "size" in e.get("args", {})
                 and "correlation" in e["args"]}
    out: dict[tuple[str, str], dict] = defaultdict(lambda: {"count": 0, "bytes": 0, "dur": 0, "pageable": 0})
    for e in events:
        if e.get("cat") not in ("gpu_memcpy", "gpu_memset") or e.get("ph") != "X":
            continue
        direction = e["name"].split()[1] if e["cat"] == "gpu_memcpy" else "memset"
        fig = out[direction]
        fig["count"] += 1
        args = e.get("args", {})
        fig["bytes"] += args["bytes"] if "bytes" in args else call_size.get(args.get("correlation"), 0)
        fig["dur"] += round(e["dur"] * 1000)
        fig["pageable"] += "Pageable" in e["name"]
    return dict(out)


def _json_api_calls(path: Path) -> dict[str, tuple[int, int]]:
    """Runtime calls per name from the JSON: (count, summed ns)."""
    events = json.load(gzip.open(path))
    events = events["traceEvents"] if isinstance(events, dict) else events
    out: dict[str, tuple[int, int]] = {}
    for e in events:
        if e.get("cat") in ("cuda_runtime", "cuda_driver", "hip_runtime") and e.get("ph") == "X":
            n, d = out.get(e["name"], (0, 0))
            out[e["name"]] = (n + 1, d + round(e["dur"] * 1000))
    return out


@pytest.mark.parametrize("path", KINETO, ids=[p.name for p in KINETO])
def test_kineto_copies_match_the_json(path):
    expect = _json_copies(path)
    assert expect, f"{path} has no copies"
    with analyses.load(path) as engine:
        api = analyses.summary(engine)["api"]
        got_api = {r["name"]: (r["calls"], r["total_dur"]) for r in api.to_dict("records")}
        dropped = engine.import_problems()
        if dropped.empty:
            assert got_api == _json_api_calls(path)
        else:  # overlapping X events that trace_processor dropped: fewer calls, and the output says so
            assert all(got_api.get(name, (0, 0))[0] <= n for name, (n, _) in _json_api_calls(path).items())
            assert any(str(name) in w for name in dropped["name"] for w in analyses.trace_warnings(engine))
        copies = analyses.summary(engine)["copies"]
        got = {r["direction"]: {"count": r["count"], "bytes": 0 if pd.isna(r["bytes"]) else r["bytes"],
                                "dur": r["dur_sum"], "pageable": r["staged"]} for r in copies.to_dict("records")}
        assert got == expect
        assert (copies["source"] == "kineto").all()
        red = analyses.redundant(engine)
        staged = red[(red["class"] == "staged") & red["pid"].isna()].iloc[0]
        assert staged["count"] == sum(f["pageable"] for f in expect.values())
        assert not red.set_index("class").loc[["repeat", "round_trip", "managed"], "applies"].any()
        dup = analyses.duplicated(engine)
        assert dup.empty and not dup.attrs["applies"] and "no addresses" in dup.attrs["note"]


# -- CLI ------------------------------------------------------------------------------------
def _memq(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ctf2perfetto.cli.memq", *args], capture_output=True, text=True,
                          timeout=300)


def _table(stdout: str) -> dict[tuple[str, str], list[str]]:
    """The rows of a `memq redundant` text table, by (pid, class): the cells after those two."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("---")) + 1
    rows = {}
    for line in lines[start:]:
        if not line.strip() or line.startswith("("):
            break
        pid, cls, *rest = line.split()
        rows[(pid, cls)] = rest
    return rows


def test_cli_formats_state_upper_bounds(trace):
    # On an APU (auto: unified): the first 4 MiB copy (2 ms) is avoidable as unified, the second is a repeat.
    path = trace([malloc(1000, HOST, 4 * MiB), gpu_alloc(1100, DEV, 4 * MiB),
                  copy(1_000_000, 3_000_000, DEV, HOST, 4 * MiB, 1), copy(4_000_000, 6_000_000, DEV, HOST, 4 * MiB, 1)],
                 [unified(PID)])
    table = _memq("redundant", str(path))
    assert table.returncode == 0 and "upper bounds" in table.stdout
    got = _table(table.stdout)
    # applies, count, MiB, summed ms, wall-clock ms; then the part content proves (count, MiB, summed ms): none,
    # the log has no fingerprints
    unproven = ["0", "0.0", "0.0"]
    assert got[("all", "repeat")] == ["True", "1", "4.0", "2.0", "2.0"] + unproven
    assert got[("all", "unified")] == ["True", "1", "4.0", "2.0", "2.0"] + unproven
    assert got[("all", "redundant")] == ["True", "2", "8.0", "4.0", "4.0"] + unproven
    assert got[("all", "staged")] == ["True", "2", "8.0", "4.0", "4.0"] + unproven
    assert got[(str(PID), "redundant")] == got[("all", "redundant")]
    payload = json.loads(_memq("redundant", str(path), "--format", "json").stdout)
    assert payload["upper_bound"] is True and any("upper bounds" in n for n in payload["notes"])
    rows = {(r["pid"], r["class"]): r for r in payload["tables"]["redundant"]["rows"]}
    assert (rows[(None, "repeat")]["bytes"], rows[(None, "repeat")]["dur_sum"]) == (4 * MiB, 2_000_000)
    assert (rows[(None, "unified")]["bytes"], rows[(None, "unified")]["dur_sum"]) == (4 * MiB, 2_000_000)
    csv = _memq("duplicated", str(path), "--format", "csv").stdout
    assert csv.startswith("# memq duplicated") and "upper bounds" in csv
    frame = pd.read_csv(pd.io.common.StringIO(csv), comment="#")
    assert frame.loc[(frame["grouping"] == "total") & frame["pid"].isna(), "peak_bytes"].tolist() == [4 * MiB]
    # --unified no: the first copy is not avoidable any more; the repeat stays.
    off = json.loads(_memq("redundant", "--unified", "no", str(path), "--format", "json").stdout)
    rows = {(r["pid"], r["class"]): r for r in off["tables"]["redundant"]["rows"]}
    assert (rows[(None, "unified")]["count"], rows[(None, "unified")]["bytes"]) == (0, 0)
    assert (rows[(None, "redundant")]["count"], rows[(None, "redundant")]["bytes"],
            rows[(None, "redundant")]["dur_sum"]) == (1, 4 * MiB, 2_000_000)
    assert (rows[(None, "repeat")]["count"], rows[(None, "repeat")]["bytes"]) == (1, 4 * MiB)


def test_cli_bad_input(tmp_path):
    missing = _memq("leaks", str(tmp_path / "nope.pftrace"))
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1 and "nope.pftrace" in missing.stderr
    bad = tmp_path / "bad.pftrace"
    bad.write_bytes(b"this is not a trace\n" * 10)
    broken = _memq("summary", str(bad))
    assert broken.returncode == 1 and broken.stderr.count("\n") == 1 and "bad.pftrace" in broken.stderr
    option = _memq("redundant", "--unified", "maybe", str(bad))
    assert option.returncode == 2 and option.stderr.count("\n") == 1
    unknown = _memq("duplicated", "--frobnicate", str(bad))
    assert unknown.returncode == 2 and unknown.stderr.count("\n") == 1
    for out in (missing, broken, option, unknown):
        assert "Traceback" not in out.stderr


HEAP_EVENTS = ("lttng_ust_libc:malloc", "lttng_ust_libc:calloc", "lttng_ust_libc:memalign",
               "lttng_ust_libc:posix_memalign", "lttng_ust_libc:realloc", "lttng_ust_libc:free")


def _heap_by_bt2(bt2, directory: Path) -> tuple[int, dict[tuple[str, int], tuple[int, int]]]:
    """Independent count through the bt2 bindings: host allocations, and those never freed as
    (kind, size) -> (count, bytes). A block allocated where a live one starts replaces it (its free was lost)."""
    allocs, live = 0, {}
    for msg in bt2.TraceCollectionMessageIterator(str(directory)):
        if type(msg) is not bt2._EventMessageConst or msg.event.name not in HEAP_EVENTS:
            continue
        name, f = msg.event.name.split(":")[1], msg.event.payload_field
        pid = int(msg.event.common_context_field["vpid"])
        if name == "free":
            live.pop((pid, int(f["ptr"])), None)
            continue
        if name == "realloc" and int(f["in_ptr"]) and (int(f["ptr"]) or int(f["size"]) == 0):
            live.pop((pid, int(f["in_ptr"])), None)
        ptr = int(f["out_ptr"]) if name == "posix_memalign" else int(f["ptr"])
        if ptr == 0 or (name == "posix_memalign" and int(f["result"]) != 0):
            continue
        allocs += 1
        live[(pid, ptr)] = int(f["nmemb"]) * int(f["size"]) if name == "calloc" else int(f["size"])
    leaks: dict[tuple[str, int], tuple[int, int]] = {}
    for size in live.values():
        n, b = leaks.get(("host", size), (0, 0))
        leaks[("host", size)] = (n + 1, b + size)
    return allocs, leaks


def test_lttng_directory_is_converted(test_data, bt2):
    """A real LTTng trace: host allocations and the leaks table equal an independent count through bt2."""
    directory = test_data / "ctf" / "dbg"
    allocs, leaks = _heap_by_bt2(bt2, directory)
    assert allocs and leaks
    with analyses.load(directory) as engine:
        got = analyses.summary(engine)["allocations"].set_index("kind")
        assert got.loc["host", "count"] == allocs
    out = _memq("leaks", str(directory), "--format", "json")
    assert out.returncode == 0 and any("a lost free shows as a leak" in n for n in json.loads(out.stdout)["notes"])
    rows = json.loads(out.stdout)["tables"]["leaks"]["rows"]
    assert {(r["kind"], r["size"]): (r["count"], r["bytes"]) for r in rows} == leaks
    table = _memq("leaks", str(directory))
    assert table.returncode == 0 and "upper bounds" in table.stdout
    assert f"of {len(leaks)} kind/size groups" in table.stdout


def test_cli_by_is_wired_to_attribution(trace):
    """--by hands the per-copy rows (with call_id) to ctf2perfetto.analysis.attribution; without PyTorch ops or
    binaries in the trace that is one clear line and a failure, not a wrong table."""
    path = trace([malloc(1000, HOST, 64), gpu_alloc(1100, DEV, 64), copy(2000, 2100, DEV, HOST, 64, 1),
                  copy(3000, 3100, DEV, HOST, 64, 1)])
    for by, needs, code in (("op", "--kineto", 2), ("callsite", "memq.binary", 1)):
        out = _memq("redundant", str(path), "--by", by)
        assert (out.returncode, out.stdout) == (code, "") and out.stderr.count("\n") == 1 and needs in out.stderr, \
            out.stderr


def test_lost_events_are_reported(test_data, bt2):
    """A discard-mode trace that lost events: every output says how many (independent count: bt2's
    DiscardedEvents messages)."""
    directory = test_data / "ctf" / "disc"
    discarded = sum(msg.count or 0 for msg in bt2.TraceCollectionMessageIterator(str(directory))
                    if type(msg) is bt2._DiscardedEventsMessageConst)
    assert discarded > 0
    out = _memq("leaks", str(directory), "--format", "json")
    assert out.returncode == 0, out.stderr
    notes = json.loads(out.stdout)["notes"]
    assert f"the trace lost {discarded:,} events" in " ".join(notes)


def test_free_at_the_copy_end_leaves_no_mirror(trace):
    """Tie rule (memq.mirrors): a free taking effect at the instant a copy completes comes first."""
    rows = [malloc(1000, HOST, 64), gpu_alloc(1100, DEV, 64),
            copy(2000, 3000, DEV, HOST, 64, 1), free(3000, HOST),
            malloc(4000, HOST, 64), copy(5000, 6000, DEV, HOST, 64, 1), malloc(7000, HOST2, 8)]
    with analyses.load(trace(rows)) as engine:
        assert analyses.redundant_copies(engine)["repeat_bytes"].tolist() == [0, 0]
        total = group(analyses.duplicated(engine), "total")
        assert (total["peak_bytes"], total["peak_ts"], total["byte_ns"]) == (64, 6000, 64 * 1000)


# -- tie rules (memq.mirrors decisions) -------------------------------------------------------
def test_tie_free_at_the_copy_start_no_longer_holds_the_source(trace):
    """Live at a copy's start = allocated by then and not freed by then: a free starting as the copy starts
    leaves its source untracked, and an untracked source is never freed, so the mirror lasts."""
    rows = [malloc(1000, HOST, 64), gpu_alloc(1100, DEV, 64),
            free(2000, HOST), copy(2000, 2100, DEV, HOST, 64, 1),   # source freed as the copy starts
            copy(3000, 3100, DEV, HOST, 64, 1),                     # the same untracked bytes again
            malloc(4000, HOST2, 8)]
    with analyses.load(trace(rows)) as engine:
        per_copy = analyses.redundant_copies(engine)
        assert per_copy["repeat_bytes"].tolist() == [0, 64] and classes(per_copy) == [None, "repeat"]
        assert per_copy["staged"].tolist() == [1, 1]  # untracked host memory is pageable
        assert mirror_ranges(engine) == {(DEV, HOST, 64, 2100, 3100), (DEV, HOST, 64, 3100, None)}
        m = analyses.mirrors(engine)
        assert m["untracked_source"].astype(bool).all() and m["src_alloc_id"].isna().all()
        assert set(m["dst_alloc_id"]) == {alloc_id(engine, "device", DEV)}
        assert counter(engine) == [(2100, 64), (3100, 64), (4000, 0)]


def test_tie_allocation_made_at_the_copy_start_holds_the_source(trace):
    """An allocation whose call ends as a copy starts holds the copy's bytes: its free ends the mirror."""
    rows = [gpu_alloc(1000, DEV, 64), malloc(2000, HOST, 64), copy(2000, 2100, DEV, HOST, 64, 1),
            free(3000, HOST), malloc(4000, HOST2, 8)]
    with analyses.load(trace(rows)) as engine:
        assert mirror_ranges(engine) == {(DEV, HOST, 64, 2100, 3000)}
        m = analyses.mirrors(engine)
        assert m["src_alloc_id"].tolist() == [alloc_id(engine, "host", HOST)] and not m["untracked_source"].any()
        assert counter(engine) == [(2100, 64), (3000, 0)]


def test_tie_frees_come_before_writes(trace):
    """A copy that would repeat completes exactly when its source block is freed: the free comes first, so the
    pair was no longer a mirror (no repeat) and the new mirror never exists."""
    rows = [malloc(1000, HOST, 64), gpu_alloc(1100, DEV, 64),
            copy(2000, 2100, DEV, HOST, 64, 1),
            copy(3000, 3100, DEV, HOST, 64, 1), free(3100, HOST),
            malloc(4000, HOST2, 8)]
    with analyses.load(trace(rows)) as engine:
        assert analyses.redundant_copies(engine)["repeat_bytes"].tolist() == [0, 0]
        assert totals(analyses.redundant(engine))["redundant"] == (0, 0, 0, 0)
        assert mirror_ranges(engine) == {(DEV, HOST, 64, 2100, 3100)}
        assert counter(engine) == [(2100, 64), (3100, 0)]


def test_tie_writes_ending_together_apply_by_slice_id(trace):
    """Writes ending together apply by slice id, which follows the start (then the order of the log): a memset
    that started after a copy wipes its mirror; a copy that started after a memset keeps its mirror; of two
    copies that start and end together the one listed second stays."""
    rows = [malloc(1000, HOST, 64), malloc(1000, HOST2, 64), gpu_alloc(1100, DEV, 64), gpu_alloc(1100, DEV2, 64),
            copy(2000, 3000, DEV, HOST, 64, 1), memset(2500, 3000, DEV, 64),
            memset(4000, 5000, DEV2, 64), copy(4500, 5000, DEV2, HOST, 64, 1),
            copy(6000, 7000, DEV, HOST, 64, 1, stream=1), copy(6000, 7000, DEV, HOST2, 64, 1, stream=2),
            malloc(8000, HOST + 0x1000, 8)]
    with analyses.load(trace(rows)) as engine:
        assert mirror_ranges(engine) == {(DEV2, HOST, 64, 5000, None), (DEV, HOST2, 64, 7000, None)}
        assert counter(engine) == [(5000, 64), (7000, 128), (8000, 0)]


def test_primary_allocation_kind_order_and_latest_start(trace):
    """The primary allocation of a byte is the first of device/managed, pinned, registered, host, and the latest
    started within a kind: a registered range over a heap block is the registered one; of two heap blocks that
    overlap (the first one's free was lost) the second; the same for device memory."""
    rows = [malloc(1000, HOST, 128), gpu_alloc(1100, HOST, 128, M.REGISTERED),
            malloc(1200, HOST2, 64), malloc(1300, HOST2 + 32, 64),
            gpu_alloc(1400, DEV, 256), gpu_alloc(1500, DEV + 128, 256),
            copy(2000, 2100, DEV, HOST, 32, 1),                 # source: registered over heap
            copy(3000, 3100, DEV + 160, HOST2 + 32, 32, 1),     # source in both heap blocks, dst in both device
            malloc(4000, HOST + 0x1000, 8)]
    with analyses.load(trace(rows)) as engine:
        m = analyses.mirrors(engine).sort_values("ts")
        assert m["src_alloc_id"].tolist() == [alloc_id(engine, "registered", HOST),
                                              alloc_id(engine, "host", HOST2 + 32)]
        assert m["dst_alloc_id"].tolist() == [alloc_id(engine, "device", DEV), alloc_id(engine, "device", DEV + 128)]
        # Registered memory is pinned (no staging); the heap block is pageable.
        assert analyses.redundant_copies(engine)["staged"].tolist() == [0, 1]
        by_alloc = analyses.duplicated(engine)
        assert group(by_alloc, "allocation", str(alloc_id(engine, "device", DEV + 128)), PID)["byte_ns"] == 32 * 900


# -- allocation endings -----------------------------------------------------------------------
@pytest.mark.parametrize("runtime", ["hip", "cuda"])
def test_gpu_frees_and_unregister_end_mirrors(trace, runtime):
    """hipFree/cudaFree (device and managed memory), hipHostFree/cudaFreeHost and hipHostUnregister/
    cudaHostUnregister each end the mirrors of the bytes they release, at the start of the call."""
    log = Rows(PID, runtime)
    rows = [log.malloc(1000, HOST, 64), log.gpu_alloc(1100, HOST, 64, M.REGISTERED),
            log.gpu_alloc(1200, DEV, 64), log.gpu_alloc(1300, PINNED, 64, M.PINNED),
            log.gpu_alloc(1400, MANAGED, 64, M.MANAGED),
            log.copy(2000, 2100, DEV, HOST, 64, 1),          # device <- registered (heap block under it)
            log.copy(2200, 2300, PINNED, DEV, 64, 2),        # pinned <- device
            log.copy(2400, 2500, MANAGED, PINNED, 32, 4),    # managed <- pinned
            log.gpu_free(3000, MANAGED, 64, M.MANAGED),      # ends managed <- pinned
            log.gpu_free(4000, PINNED, 64, M.PINNED),        # ends pinned <- device
            log.gpu_free(5000, HOST, 64, M.REGISTERED),      # ends device <- registered; the heap block lives on
            log.gpu_free(6000, DEV, 64),
            log.malloc(7000, HOST2, 8)]
    assert {r["api"] for r in rows if r["kind"] in (K.GPU_FREE, K.GPU_UNREGISTER)} == \
        ({"hipFree", "hipHostFree", "hipHostUnregister"} if runtime == "hip" else
         {"cudaFree", "cudaFreeHost", "cudaHostUnregister"})
    with analyses.load(trace(rows)) as engine:
        assert mirror_ranges(engine) == {(DEV, HOST, 64, 2100, 5000), (PINNED, DEV, 64, 2300, 4000),
                                         (MANAGED, PINNED, 32, 2500, 3000)}
        assert counter(engine) == [(2100, 64), (2300, 128), (2500, 160), (3000, 128), (4000, 64), (5000, 0)]
        per_copy = analyses.redundant_copies(engine)
        assert per_copy["direction"].tolist() == ["HtoD", "DtoH", "HtoD"]
        assert per_copy["managed_bytes"].tolist() == [0, 0, 32]


def test_memset_over_a_mirror_source(trace):
    """A memset over part of a mirror's source bytes ends that part of the mirror: the next copy of the whole
    range repeats the rest only."""
    rows = [malloc(1000, HOST, 100), gpu_alloc(1100, DEV, 100),
            copy(2000, 2100, DEV, HOST, 100, 1),
            memset(3000, 3100, HOST + 20, 20),               # h[20:40] changes
            copy(4000, 4100, DEV, HOST, 100, 1),             # repeats d[0:20] and d[40:100]
            malloc(5000, HOST2, 8)]
    with analyses.load(trace(rows)) as engine:
        per_copy = analyses.redundant_copies(engine)
        assert per_copy["repeat_bytes"].tolist() == [0, 80] and per_copy["redundant_dur"].tolist() == [0, 80]
        assert mirror_ranges(engine) == {(DEV, HOST, 20, 2100, 4100), (DEV + 20, HOST + 20, 20, 2100, 3100),
                                         (DEV + 40, HOST + 40, 60, 2100, 4100), (DEV, HOST, 100, 4100, None)}
        assert counter(engine) == [(2100, 100), (3100, 80), (4100, 100), (5000, 0)]


# -- 2D copies and the grouping by allocation -------------------------------------------------
def test_two_d_repeat_and_rows_overlapping(trace):
    """A 2D copy writes `height` rows of `width` bytes `dpitch` apart, reading them `spitch` apart: repeating it
    repeats every row; another source pitch repeats only the rows that read the same bytes; rows that overlap
    (dpitch < width) leave the last row's bytes."""
    rows = [malloc(1000, HOST, 256), gpu_alloc(1100, DEV, 256),
            copy_2d(2000, 2100, DEV, HOST, 16, 4, 32, 64, 1),      # d[32r:32r+16] <- h[64r:64r+16], r = 0..3
            copy_2d(3000, 3100, DEV, HOST, 16, 4, 32, 64, 1),      # all 64 bytes again: repeat
            copy_2d(4000, 4100, DEV, HOST, 16, 4, 32, 48, 1),      # rows 1..3 read h[48r:...]: only row 0 repeats
            copy_2d(5000, 5100, DEV + 128, HOST, 16, 2, 8, 16, 1),  # d[128:144] <- h[0:16], then d[136:152] <- h[16:32]
            malloc(6000, HOST2, 8)]
    with analyses.load(trace(rows)) as engine:
        per_copy = analyses.redundant_copies(engine)
        assert per_copy["bytes"].tolist() == [64, 64, 64, 32]
        assert per_copy["repeat_bytes"].tolist() == [0, 64, 16, 0]
        assert per_copy["redundant_dur"].tolist() == [0, 100, 25, 0]  # 100 ns * 16 / 64
        assert classes(per_copy) == [None, "repeat", "repeat", None]
        last = {(d, s, n, t, e) for d, s, n, t, e in mirror_ranges(engine) if t >= 4100}
        assert last == {(DEV, HOST, 16, 4100, None), (DEV + 32, HOST + 48, 16, 4100, None),
                        (DEV + 64, HOST + 96, 16, 4100, None), (DEV + 96, HOST + 144, 16, 4100, None),
                        (DEV + 128, HOST, 8, 5100, None), (DEV + 136, HOST + 16, 16, 5100, None)}
        assert counter(engine)[-3:] == [(4100, 64), (5100, 64 + 24), (6000, 0)]


def test_duplicated_by_destination_allocation(trace):
    """Duplicated bytes split by allocation count each mirror in the allocation of its destination bytes."""
    rows = [malloc(1000, HOST, 64), gpu_alloc(1100, DEV, 64), gpu_alloc(1200, DEV2, 64),
            copy(2000, 2100, DEV, HOST, 64, 1),
            copy(3000, 3100, DEV2, HOST, 32, 1),             # the same host bytes into a second allocation
            free(5000, HOST)]
    with analyses.load(trace(rows)) as engine:
        dup = analyses.duplicated(engine)
        first, second = alloc_id(engine, "device", DEV), alloc_id(engine, "device", DEV2)
        by_alloc = dup[dup["grouping"] == "allocation"]
        assert sorted(by_alloc["key"]) == sorted([str(first), str(second)])
        assert (group(dup, "allocation", str(first), PID)["byte_ns"],
                group(dup, "allocation", str(second), PID)["byte_ns"]) == (64 * 2900, 32 * 1900)
        assert group(dup, "allocation", str(second), PID)["peak_ts"] == 3100
        assert counter(engine) == [(2100, 64), (3100, 96), (5000, 0)]


def test_class_ties_and_round_trips(trace):
    """A copy's class is the class with most bytes, ties in the order repeat, round trip, managed, unified; a
    round trip copies back onto the very bytes the data came from."""
    rows = [malloc(1000, HOST, 64), gpu_alloc(1100, DEV, 64), gpu_alloc(1100, DEV2, 64),
            copy(2000, 2100, DEV, HOST, 8, 1),               # d[0:8] <- h[0:8]
            copy(2000, 2100, HOST + 8, DEV + 8, 8, 2, stream=1),  # h[8:16] <- d[8:16]
            copy(3000, 3100, DEV, HOST, 16, 1),              # 8 repeat + 8 round trip: class repeat
            copy(4000, 4100, HOST + 32, DEV2, 8, 2),         # h[32:40] <- d2[0:8]
            copy(5000, 5100, DEV + 32, HOST + 32, 8, 1),     # h[32:40] -> d[32:40]: not where it came from
            malloc(6000, HOST2, 8)]
    with analyses.load(trace(rows)) as engine:
        per_copy = analyses.redundant_copies(engine)
        assert per_copy["repeat_bytes"].tolist() == [0, 0, 8, 0, 0]
        assert per_copy["round_trip_bytes"].tolist() == [0, 0, 8, 0, 0]
        assert classes(per_copy) == [None, None, "repeat", None, None]


def test_unified_memory_is_per_device(trace):
    """--unified auto: only copies on a device described as unified memory count as unified."""
    rows = [malloc(1000, HOST, 64), copy(2000, 2100, DEV, HOST, 64, 1, device=0),
            copy(3000, 3100, DEV2, HOST, 64, 1, device=1), malloc(4000, HOST2, 8)]
    with analyses.load(trace(rows, [unified(PID, 1)])) as engine:
        per_copy = analyses.redundant_copies(engine)
        assert per_copy["unified_device"].tolist() == [0, 1] and per_copy["unified_bytes"].tolist() == [0, 64]
        assert totals(analyses.redundant(engine))["unified"] == (1, 64, 100, 100)


def test_copy_without_its_thread_is_reported_not_dropped_silently(trace) -> None:
    """A memq.copy slice that names no thread of the trace (e.g. a hand-edited or foreign trace) cannot be
    placed in a process's address space: the figures leave it out, and the warnings say how many."""
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

    path = trace([malloc(100, HOST, MiB), gpu_alloc(200, DEV, MiB), copy(1_000, 2_000, DEV, HOST, MiB, 1)])
    assert not any("no thread" in line for line in analyses.trace_warnings(path))
    packets = pb.Trace()
    p = packets.packet.add()
    p.trusted_packet_sequence_id = 4242
    p.track_descriptor.uuid = 4242
    p.track_descriptor.name = "foreign copies"
    for ts, kind in ((3_000, pb.TrackEvent.TYPE_SLICE_BEGIN), (4_000, pb.TrackEvent.TYPE_SLICE_END)):
        p = packets.packet.add()
        p.trusted_packet_sequence_id, p.timestamp = 4242, ts
        p.track_event.type, p.track_event.track_uuid = kind, 4242
        if kind == pb.TrackEvent.TYPE_SLICE_BEGIN:
            p.track_event.name = "HtoD"
            p.track_event.categories.append("memq.copy")
            for name, value in (("call_id", 987654), ("pid", 424242), ("tid", 424242), ("dst", DEV), ("src", HOST),
                                ("bytes", MiB), ("copy_kind", 1)):
                a = p.track_event.debug_annotations.add()
                a.name, a.int_value = name, value
    with open(path, "ab") as f:
        f.write(packets.SerializeToString())
    warnings = analyses.trace_warnings(path)
    assert any(line.startswith("1 copies or memsets have no thread") for line in warnings), warnings
