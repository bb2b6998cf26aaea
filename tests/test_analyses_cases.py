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
from ctf2perfetto.write import write_trace

MiB = 1 << 20
PID = 77
HOST, HOST2, DEV, MANAGED, UNTRACKED = 0x10000000, 0x30000000, 0x900000000, 0xA00000000, 0x50000000
KINETO = sorted((Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "kineto").glob("*.json.gz"))


def malloc(ts: int, ptr: int, size: int) -> dict:
    return dict(kind=K.MALLOC, ts=ts, pid=PID, tid=PID, ptr=ptr, size=size, api="malloc")


def free(ts: int, ptr: int) -> dict:
    return dict(kind=K.FREE, ts=ts, pid=PID, tid=PID, ptr=ptr, api="free")


def gpu_alloc(begin: int, ptr: int, size: int, mem: M = M.DEVICE) -> dict:
    api = {M.DEVICE: "hipMalloc", M.MANAGED: "hipMallocManaged", M.PINNED: "hipHostMalloc"}[mem]
    return dict(kind=K.GPU_ALLOC, begin=begin, ts=begin + 50, pid=PID, tid=PID, ptr=ptr, size=size, mem=mem, api=api)


def copy(begin: int, end: int, dst: int, src: int, nbytes: int, kind: int, stream: int = 0, tid: int = PID) -> dict:
    return dict(kind=K.GPU_COPY, begin=begin, ts=end, pid=PID, tid=tid, ptr=dst, src=src, size=nbytes, copy_kind=kind,
                stream=stream, api="hipMemcpyAsync")


def memset(begin: int, end: int, dst: int, nbytes: int) -> dict:
    return dict(kind=K.GPU_SET, begin=begin, ts=end, pid=PID, tid=PID, ptr=dst, size=nbytes, api="hipMemsetAsync")


@pytest.fixture
def trace(tmp_path):
    """Write rows (sorted by end time) as a trace; return its path."""
    def make(rows: list[dict], devices: list[dict] | None = None) -> Path:
        path = tmp_path / f"case{len(list(tmp_path.iterdir()))}.pftrace"
        write_trace([EventBatch.from_rows(sorted(rows, key=lambda r: r["ts"]))], TraceInfo(devices=devices or []),
                    path)
        return path
    return make


def totals(df: pd.DataFrame) -> dict[str, tuple]:
    whole = df[df["pid"].isna()]
    return {r["class"]: (r["count"], r["bytes"], r["dur_sum"], r["wall_dur"]) for r in whole.to_dict("records")}


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

        m = analyses.mirrors(engine)
        assert m["bytes"].sum() == 4 * MiB + 4 * MiB + 1 * MiB  # three copies' pieces
        assert set(m.loc[m["end_ts"].notna(), "end_ts"]) <= {5000, 6500, 8000}
        assert m["end_ts"].notna().all()  # the free ends every mirror: none open


def test_partial_overlap_and_memset(trace):
    path = trace([
        malloc(1000, HOST, 200),
        gpu_alloc(1100, DEV, 200),
        copy(2000, 2100, DEV, HOST, 100, 1),             # d[0:100] <- h[0:100]
        copy(3000, 3100, DEV + 50, HOST + 50, 100, 1),   # d[50:150] <- h[50:150]: 50 repeated
        memset(4000, 4100, DEV + 60, 20),                # d[60:80] overwritten
        copy(5000, 5100, DEV, HOST, 150, 1),             # repeats d[0:60] and d[80:150] = 130 bytes
    ])
    with analyses.load(path) as engine:
        per_copy = analyses.redundant_copies(engine).sort_values("ts")
        assert per_copy["repeat_bytes"].tolist() == [0, 50, 130]
        assert per_copy["class"].tolist()[1:] == ["repeat", "repeat"]
        # prorated time: 100 ns * 50/100 and 100 ns * 130/150 (floored)
        assert per_copy["redundant_dur"].tolist() == [0, 50, 86]
        dup = analyses.duplicated(engine)
        # 100 bytes from 2100, 150 from 3100, 130 from 4100 (memset), 150 from 5100 to the end.
        assert group(dup, "total")["peak_bytes"] == 150
        assert group(dup, "total")["peak_ts"] == 3100


def test_managed_unified_and_untracked(trace):
    rows = [
        gpu_alloc(1000, MANAGED, 64, M.MANAGED),
        gpu_alloc(1100, DEV, 64),
        copy(2000, 2040, MANAGED, UNTRACKED, 64, 4),  # Default kind, managed endpoint, untracked source
        copy(3000, 3100, DEV, UNTRACKED, 32, 1),      # HtoD from untracked (pageable) memory
        malloc(5000, HOST, 8),                         # the trace goes on after the copies
    ]
    apu = [dict(pid=PID, device=0, runtime="hip", name="MI300A", integrated=True, unified_memory=True)]
    with analyses.load(trace(rows, apu)) as engine:
        per_copy = analyses.redundant_copies(engine).sort_values("ts")
        # Default kind: untracked source counts as host, managed as device.
        assert per_copy["direction"].tolist() == ["HtoD", "HtoD"]
        assert per_copy["managed_bytes"].tolist() == [64, 0]
        assert per_copy["unified_bytes"].tolist() == [0, 32]  # managed takes precedence over unified
        assert per_copy["staged"].tolist() == [1, 1]
        red = totals(analyses.redundant(engine))
        assert red["managed"] == (1, 64, 40, 40) and red["unified"] == (1, 32, 100, 100)
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
            dict(kind=K.REALLOC, ts=3000, pid=PID, tid=PID, ptr=HOST, src=HOST, size=64, api="realloc"),
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
    """Independent count from the JSON: per (kind, direction) count, bytes, ns, pageable."""
    events = json.load(gzip.open(path))
    events = events["traceEvents"] if isinstance(events, dict) else events
    out: dict[tuple[str, str], dict] = defaultdict(lambda: {"count": 0, "bytes": 0, "dur": 0, "pageable": 0})
    for e in events:
        if e.get("cat") not in ("gpu_memcpy", "gpu_memset") or e.get("ph") != "X":
            continue
        direction = e["name"].split()[1] if e["cat"] == "gpu_memcpy" else "memset"
        fig = out[direction]
        fig["count"] += 1
        fig["bytes"] += e.get("args", {}).get("bytes", 0)
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


def test_cli_formats_state_upper_bounds(trace):
    path = trace([malloc(1000, HOST, 64), gpu_alloc(1100, DEV, 64), copy(2000, 2100, DEV, HOST, 64, 1),
                  copy(3000, 3100, DEV, HOST, 64, 1)])
    table = _memq("redundant", str(path))
    assert table.returncode == 0 and "upper bounds" in table.stdout and "repeat" in table.stdout
    payload = json.loads(_memq("redundant", str(path), "--format", "json").stdout)
    assert payload["upper_bound"] is True and any("upper bounds" in n for n in payload["notes"])
    rows = {(r["pid"], r["class"]): r for r in payload["tables"]["redundant"]["rows"]}
    assert rows[(None, "repeat")]["bytes"] == 64 and rows[(None, "repeat")]["dur_sum"] == 100
    csv = _memq("duplicated", str(path), "--format", "csv").stdout
    assert csv.startswith("# memq duplicated") and "upper bounds" in csv
    frame = pd.read_csv(pd.io.common.StringIO(csv), comment="#")
    assert frame.loc[(frame["grouping"] == "total") & frame["pid"].isna(), "peak_bytes"].tolist() == [64]
    assert _memq("redundant", "--unified", "no", str(path)).returncode == 0


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


def test_lttng_directory_is_converted(shared_data, bt2):
    """A real LTTng trace: host allocations equal an independent count through the bt2 bindings."""
    directory = shared_data / "ctf" / "dbg"
    allocs = 0
    for msg in bt2.TraceCollectionMessageIterator(str(directory)):
        if type(msg) is bt2._EventMessageConst:
            name, fields = msg.event.name, msg.event.payload_field
            if name in ("lttng_ust_libc:malloc", "lttng_ust_libc:calloc", "lttng_ust_libc:memalign") \
                    and int(fields["ptr"]) != 0:
                allocs += 1
            elif name == "lttng_ust_libc:realloc" and int(fields["ptr"]) != 0:
                allocs += 1
            elif name == "lttng_ust_libc:posix_memalign" and int(fields["result"]) == 0 and int(fields["out_ptr"]):
                allocs += 1
    with analyses.load(directory) as engine:
        got = analyses.summary(engine)["allocations"].set_index("kind")
        assert got.loc["host", "count"] == allocs
    out = _memq("leaks", str(directory))
    assert out.returncode == 0 and "upper bounds" in out.stdout


def test_cli_by_is_wired_to_attribution(trace):
    """--by hands the per-copy rows (with call_id) to ctf2perfetto.attribution; without PyTorch ops or
    binaries in the trace that is one clear line and a failure, not a wrong table."""
    path = trace([malloc(1000, HOST, 64), gpu_alloc(1100, DEV, 64), copy(2000, 2100, DEV, HOST, 64, 1),
                  copy(3000, 3100, DEV, HOST, 64, 1)])
    for by, needs in (("op", "--kineto"), ("callsite", "memq.binary")):
        out = _memq("redundant", str(path), "--by", by)
        assert out.returncode in (1, 2) and out.stderr.count("\n") == 1 and needs in out.stderr, out.stderr


def test_lost_events_are_reported(shared_data, bt2):
    """A discard-mode trace that lost events: every output says how many (independent count: bt2's
    DiscardedEvents messages)."""
    directory = shared_data / "ctf" / "disc"
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


def test_copy_without_its_api_call_is_reported_not_dropped_silently(trace) -> None:
    """A memq.copy slice whose call_id matches no memq.api slice (e.g. a hand-edited or foreign trace) cannot be
    placed in a process's address space: the figures leave it out, and the warnings say how many."""
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

    path = trace([malloc(100, HOST, MiB), gpu_alloc(200, DEV, MiB), copy(1_000, 2_000, DEV, HOST, MiB, 1)])
    assert not any("no API call" in line for line in analyses.trace_warnings(path))
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
            for name, value in (("call_id", 987654), ("dst", DEV), ("src", HOST), ("bytes", MiB), ("copy_kind", 1)):
                a = p.track_event.debug_annotations.add()
                a.name, a.int_value = name, value
    with open(path, "ab") as f:
        f.write(packets.SerializeToString())
    warnings = analyses.trace_warnings(path)
    assert any(line.startswith("1 copies or memsets have no API call") for line in warnings), warnings
