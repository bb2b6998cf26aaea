"""Other profilers' files (RPD, rocpd, Nsight Systems SQLite) read into memq: every figure against an
independent count of the file's own tables (plain sqlite3 here), the format told from the content, the
quirks of each format corrected, and the address-free case said.

Samples (tests/data/README.md): the rocmProfileData blog's own matmul traces, a PyTorch RPD cut to its copies,
rocpd databases built from rocprofiler-sdk's schema files, an nsys export from a public course repository.
"""
from __future__ import annotations

import json
import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from ctf2perfetto.engine import open_trace
from ctf2perfetto.errors import MemqError
from ctf2perfetto.importers import foreign, sniff

sys.path.insert(0, str(Path(__file__).resolve().parent))

DATA = Path(__file__).resolve().parent / "data"
RPD = DATA / "rpd"
ROCPD = DATA / "rocpd"
NSYS = DATA / "nsys"
DIRS = {1: "HtoD", 2: "DtoH", 3: "DtoD", 0: "HtoH"}


def convert(path: Path, tmp_path: Path) -> tuple[foreign.Imported, Path]:
    fmt = sniff.sniff(path)
    imported = foreign.read(path, fmt)
    out = tmp_path / (path.name + ".pftrace")
    foreign.write(imported, out)
    return imported, out


def trace_copies(out: Path) -> dict[str, tuple[int, int, int]]:
    """Per direction: count, bytes, summed duration of the copies in the converted trace (memq.copies)."""
    with open_trace(out) as engine:
        rows = engine.rows("INCLUDE PERFETTO MODULE memq.copies; SELECT direction, COUNT(*) AS n, "
                           "SUM(IFNULL(bytes, 0)) AS b, SUM(dur) AS d FROM memq_copy GROUP BY direction")
        return {r["direction"]: (r["n"], r["b"], r["d"]) for r in rows.records()}


def rpd_raw(path: Path) -> dict[str, tuple[int, int, int]]:
    """Independent count of an RPD file: one copy per copy API row (kind, size or width*height; '' sizes
    bounded by the hipMalloc holding the device side, args parsed here by hand), timed by its GPU op when
    it has one; plus one per copy op without a copy API row."""
    db = sqlite3.connect(path)
    allocs = []
    for args, in db.execute("SELECT s.string FROM rocpd_api a JOIN rocpd_string n ON n.id = a.apiName_id "
                            "JOIN rocpd_string s ON s.id = a.args_id WHERE n.string = 'hipMalloc'"):
        parts = dict(p.strip().split("=") for p in args.split("|"))
        allocs.append((int(parts["ptr"], 16), int(parts["size"], 16)))
    out: dict[str, list[int]] = {}
    for kind, size, width, height, cdst, csrc, start, end, ostart, oend in db.execute(
            'SELECT c.kind, c.size, c.width, c.height, c.dst, c.src, a.start, a."end", MIN(o.start), MAX(o."end") '
            "FROM rocpd_copyapi c JOIN rocpd_api a ON a.id = c.api_ptr_id LEFT JOIN rocpd_api_ops x ON "
            "x.api_id = a.id LEFT JOIN rocpd_op o ON o.id = x.op_id GROUP BY a.id"):
        if size == "":
            if width != "" and height != "":
                size = width * height
            else:  # the true destination of a HtoD is in column src (rpd_tracer's swap)
                side = int(csrc, 16) if kind == 1 else int(cdst, 16)
                size = next(a + n - side for a, n in allocs if a <= side < a + n)
        dur = (oend - ostart) if ostart is not None else (end - start)
        row = out.setdefault(DIRS[kind], [0, 0, 0])
        row[0] += 1
        row[1] += size
        row[2] += dur
    for op_type, n, dur in db.execute(
            'SELECT t.string, COUNT(*), SUM(o."end" - o.start) FROM rocpd_op o JOIN rocpd_string t ON '
            "t.id = o.opType_id WHERE t.string LIKE 'Copy%' AND o.id NOT IN (SELECT x.op_id FROM rocpd_api_ops x "
            "JOIN rocpd_copyapi c ON c.api_ptr_id = x.api_id) GROUP BY t.string"):
        direction = {"CopyHostToDevice": "HtoD", "CopyDeviceToHost": "DtoH", "CopyDeviceToDevice": "DtoD"}[op_type]
        row = out.setdefault(direction, [0, 0, 0])
        row[0] += n
        row[2] += dur
    return {k: tuple(v) for k, v in out.items()}


# -- sniffing ----------------------------------------------------------------------------------------------------

def test_format_told_from_the_content_not_the_name(tmp_path):
    for src, fmt in ((RPD / "matmul_result.rpd", "rpd"), (NSYS / "test_cuda_report1.sqlite", "nsys")):
        renamed = tmp_path / f"trace-{fmt}.json"
        shutil.copy(src, renamed)
        assert sniff.sniff(renamed) == fmt
    other = tmp_path / "other.rpd"
    db = sqlite3.connect(other)
    db.execute("CREATE TABLE people (name TEXT)")
    db.commit()
    db.close()
    with pytest.raises(MemqError) as err:
        sniff.sniff(other)
    assert "people" in str(err.value) and "\n" not in str(err.value)
    text = tmp_path / "plain.rpd"
    text.write_text("not a database")
    assert sniff.sniff(text) is None


# -- RPD -------------------------------------------------------------------------------------------------------

def test_rpd_blog_matmul_figures_equal_the_tables(tmp_path):
    imported, out = convert(RPD / "matmul_result.rpd", tmp_path)
    raw = rpd_raw(RPD / "matmul_result.rpd")
    assert raw == {"HtoD": (2, 2_032_000_000, raw["HtoD"][2]), "DtoH": (53, 296, raw["DtoH"][2])}
    assert trace_copies(out) == raw
    assert {k: tuple(v) for k, v in imported.copies.items()} == raw
    # the swap was found from the allocations, not assumed
    assert any("swapped (found by 55 of 55" in n for n in imported.notes), imported.notes
    with open_trace(out) as engine:
        rows = engine.rows("INCLUDE PERFETTO MODULE memq.copies; INCLUDE PERFETTO MODULE memq.allocations; "
                           "SELECT c.dst, c.bytes, a.addr AS ptr FROM memq_copy c JOIN memq_allocation a ON a.alloc_id = "
                           "c.dst_alloc_id "
                           "WHERE c.direction = 'HtoD' ORDER BY c.ts")
        assert list(rows.column("bytes")) == [2_000_000_000, 32_000_000]
        assert list(rows.column("ptr")) == [0x7F3EBCA00000, 0x7F3EB6600000]  # the hipMalloc'd allocations


def test_rpd_redundant_rereads_found_with_address_evidence(tmp_path):
    _, out = convert(RPD / "matmul_result.rpd", tmp_path)
    # independent: a DtoH whose (host dst, device src, size) was copied before with no copy writing either since
    db = sqlite3.connect(RPD / "matmul_result.rpd")
    rows = db.execute('SELECT c.kind, c.src, c.dst, c.size FROM rocpd_copyapi c JOIN rocpd_api_ops x ON '
                      'x.api_id = c.api_ptr_id JOIN rocpd_op o ON o.id = x.op_id ORDER BY o.start').fetchall()
    seen, writes, repeats, repeat_bytes = {}, [], 0, 0
    for kind, true_dst, true_src, size in rows:
        dst, src = int(true_dst, 16), int(true_src, 16)
        key = (dst, src, size)
        if key in seen and not any(w < a + size and a < w + n for w, n in writes[seen[key] + 1:] for a in (dst, src)):
            repeats += 1
            repeat_bytes += size
        seen[key] = len(writes)
        writes.append((dst, size))
    assert repeats == 2
    result = subprocess.run([sys.executable, "-m", "ctf2perfetto", "redundant", str(out), "--format", "csv"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    lines = [line.split(",") for line in result.stdout.splitlines() if not line.startswith("#")]
    repeat = [dict(zip(lines[0], line)) for line in lines[1:] if line[:2] == ["", "repeat"]]  # pid "" = all
    assert (int(repeat[0]["count"]), int(repeat[0]["bytes"])) == (repeats, repeat_bytes)
    assert (int(repeat[0]["address_count"]), int(repeat[0]["content_count"])) == (repeats, 0)  # evidence: address


def test_rpd_sizes_of_2_gib_stored_as_empty_text(tmp_path):
    imported, out = convert(RPD / "matmul_result_large.rpd", tmp_path)
    db = sqlite3.connect(RPD / "matmul_result_large.rpd")
    assert db.execute("SELECT COUNT(*) FROM rocpd_copyapi WHERE size = ''").fetchone()[0] == 1
    raw = rpd_raw(RPD / "matmul_result_large.rpd")
    assert trace_copies(out) == raw
    assert raw["HtoD"][1] == 0xA8200000 + 160_000_000  # the bound: the whole hipMalloc from the copy's address
    assert any("2 GiB or more" in w for w in imported.warnings)


def test_rpd_copies_only_in_gpu_ops(tmp_path):
    imported, out = convert(RPD / "graph_copies.rpd", tmp_path)
    raw = rpd_raw(RPD / "graph_copies.rpd")
    assert raw["DtoD"][0] == 804  # 164 copy calls + 640 graph-launch copy nodes
    assert trace_copies(out) == raw
    assert any("640 copies exist only as GPU ops" in w for w in imported.warnings)
    assert any("not confirmed" in n for n in imported.notes)  # no hipMalloc in the file: the swap not confirmed


def test_rpd_unswapped_columns_are_detected(tmp_path):
    fixed = tmp_path / "fixed.rpd"
    shutil.copy(RPD / "matmul_result.rpd", fixed)
    db = sqlite3.connect(fixed)
    db.execute("UPDATE rocpd_copyapi SET dst = src, src = dst, dstDevice = srcDevice, srcDevice = dstDevice")
    db.commit()
    db.close()
    imported, out = convert(fixed, tmp_path)
    assert any("as named" in n for n in imported.notes), imported.notes
    with open_trace(out) as engine:
        rows = engine.rows("INCLUDE PERFETTO MODULE memq.copies; SELECT dst FROM memq_copy WHERE direction = 'HtoD' "
                           "ORDER BY ts LIMIT 1")
        assert rows.column("dst")[0] == 0x7F3EBCA00000


# -- rocpd -----------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def rocpd_dbs(tmp_path_factory):
    where = tmp_path_factory.mktemp("rocpd")
    subprocess.run([sys.executable, str(ROCPD / "make_rocpd.py"), str(where)], check=True)
    return {name: where / name for name in ("copies.db", "args.db")}


def test_rocpd_copies_and_allocations_equal_the_views(rocpd_dbs, tmp_path):
    path = rocpd_dbs["copies.db"]
    assert sniff.sniff(path) == "rocpd"
    imported, out = convert(path, tmp_path)
    db = sqlite3.connect(path)
    # rocprofiler-sdk's own view, independent of memq's reading of the tables
    raw = {}
    for src_type, dst_type, n, b, d in db.execute(
            "SELECT src_agent_type, dst_agent_type, COUNT(*), SUM(size), SUM(duration) FROM memory_copies GROUP BY 1, 2"):
        raw[{("CPU", "GPU"): "HtoD", ("GPU", "CPU"): "DtoH", ("GPU", "GPU"): "DtoD"}[(src_type, dst_type)]] = (n, b, d)
    assert trace_copies(out) == raw
    allocs = db.execute("SELECT COUNT(*) FROM memory_allocations WHERE type = 'ALLOC' AND level = 'REAL'").fetchone()[0]
    with open_trace(out) as engine:
        rows = engine.rows("INCLUDE PERFETTO MODULE memq.allocations; SELECT COUNT(*) AS n FROM memq_allocation")
        assert rows.column("n")[0] == allocs == 3
    result = subprocess.run([sys.executable, "-m", "ctf2perfetto", "leaks", str(out), "--format", "csv"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    never_freed = db.execute("SELECT SUM(size) FROM memory_allocations a WHERE type = 'ALLOC' AND level = 'REAL' AND "
                             "NOT EXISTS (SELECT 1 FROM memory_allocations f WHERE f.type = 'FREE' AND "
                             "f.address = a.address)").fetchone()[0]
    assert str(never_freed) in result.stdout  # DEV_A, 64 MiB


def test_rocpd_copies_from_call_arguments(rocpd_dbs, tmp_path):
    path = rocpd_dbs["args.db"]
    imported, out = convert(path, tmp_path)
    db = sqlite3.connect(path)
    raw: dict[str, list[int]] = {}
    for name, start, end, event in db.execute(
            'SELECT s.string, r.start, r."end", r.event_id FROM rocpd_region r JOIN rocpd_string s ON s.id = r.name_id '
            "WHERE s.string LIKE 'hipMemcpy%'"):
        args = dict(db.execute("SELECT name, value FROM rocpd_arg WHERE event_id = ?", (event,)).fetchall())
        kind = args.get("kind", "hipMemcpyDeviceToDevice" if name.endswith("DtoD") else "")
        direction = {"hipMemcpyHostToDevice": "HtoD", "hipMemcpyDeviceToHost": "DtoH",
                     "hipMemcpyDeviceToDevice": "DtoD"}[kind]
        row = raw.setdefault(direction, [0, 0, 0])
        row[0] += 1
        row[1] += int(args["sizeBytes"])
        row[2] += end - start
    assert trace_copies(out) == {k: tuple(v) for k, v in raw.items()}
    assert any("rocpd_arg" in n for n in imported.notes)


# -- Nsight Systems ----------------------------------------------------------------------------------------------

def nsys_raw(path: Path) -> dict[str, tuple[int, int, int]]:
    db = sqlite3.connect(path)
    kinds = {1: "HtoD", 2: "DtoH", 8: "DtoD", 10: "PtoP", 11: "HtoD", 12: "DtoH"}
    out: dict[str, list[int]] = {}
    for kind, n, b, d in db.execute('SELECT copyKind, COUNT(*), SUM(bytes), SUM("end" - start) FROM '
                                    "CUPTI_ACTIVITY_KIND_MEMCPY GROUP BY copyKind"):
        row = out.setdefault(kinds[kind], [0, 0, 0])
        for i, v in enumerate((n, b, d)):
            row[i] += v
    return {k: tuple(v) for k, v in out.items()}


def test_nsys_export_figures_and_no_addresses(tmp_path):
    path = NSYS / "test_cuda_report1.sqlite"
    imported, out = convert(path, tmp_path)
    raw = nsys_raw(path)
    assert raw == {"HtoD": (8, 800_000_000, raw["HtoD"][2]), "DtoH": (4, 400_000_000, raw["DtoH"][2])}
    assert trace_copies(out) == raw
    with open_trace(out) as engine:
        pinned = engine.rows("INCLUDE PERFETTO MODULE memq.copies; SELECT COUNT(*) AS n FROM memq_copy "
                             "WHERE pageable = 0")
        assert pinned.column("n")[0] == 12  # srcKind/dstKind: pinned host memory on every copy
    result = subprocess.run([sys.executable, "-m", "ctf2perfetto", "redundant", str(out)], capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "carry no addresses" in result.stdout + result.stderr


def test_nsys_schema_2_without_enum_tables(tmp_path):
    old = tmp_path / "report-2x.sqlite"
    shutil.copy(NSYS / "test_cuda_report1.sqlite", old)
    db = sqlite3.connect(old)
    db.execute("DROP TABLE ENUM_CUDA_MEM_KIND")
    db.execute("DROP TABLE ENUM_CUDA_MEMCPY_OPER")
    db.execute("ALTER TABLE META_DATA_EXPORT RENAME TO EXPORT_META_DATA")
    db.execute("UPDATE EXPORT_META_DATA SET value = '2.9.1' WHERE name = 'EXPORT_SCHEMA_VERSION'")
    # schema 2.x's memset table, with two memsets
    db.execute('CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (start INTEGER NOT NULL, "end" INTEGER NOT NULL, deviceId '
               "INTEGER NOT NULL, contextId INTEGER NOT NULL, streamId INTEGER NOT NULL, correlationId INTEGER, "
               "globalPid INTEGER, value INTEGER NOT NULL, bytes INTEGER NOT NULL, graphNodeId INTEGER, memKind "
               "INTEGER)")
    db.execute("INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET SELECT start, start + 1500, deviceId, contextId, streamId, "
               "correlationId, globalPid, 0, bytes / 2, NULL, 2 FROM CUPTI_ACTIVITY_KIND_MEMCPY LIMIT 2")
    db.commit()
    imported, out = convert(old, tmp_path)
    assert imported.version == "2.9.1"
    assert trace_copies(out) == nsys_raw(old)
    sets = db.execute("SELECT COUNT(*), SUM(bytes) FROM CUPTI_ACTIVITY_KIND_MEMSET").fetchone()
    with open_trace(out) as engine:
        rows = engine.rows("INCLUDE PERFETTO MODULE memq.copies; SELECT COUNT(*) AS n, SUM(bytes) AS b FROM memq_set")
        assert (rows.column("n")[0], rows.column("b")[0]) == sets


# -- through the commands ---------------------------------------------------------------------------------------

def memq(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ctf2perfetto", *args], capture_output=True, text=True, timeout=300)


def test_commands_take_the_database_itself(tmp_path):
    out = tmp_path / "matmul.pftrace"
    conv = subprocess.run([sys.executable, "-m", "ctf2perfetto.cli.convert", str(RPD / "matmul_result.rpd"), "-o",
                           str(out)], capture_output=True, text=True, timeout=300)
    assert conv.returncode == 0, conv.stderr
    assert "read as an RPD (rocmProfileData) trace (schema 2): DtoH 53 (296 B), HtoD 2 (2,032,000,000 B)" in conv.stderr
    assert trace_copies(out) == rpd_raw(RPD / "matmul_result.rpd")
    direct = memq("redundant", str(RPD / "matmul_result.rpd"), "--format", "csv")
    converted = memq("redundant", str(out), "--format", "csv")
    assert direct.returncode == 0 and direct.stdout == converted.stdout
    png = tmp_path / "plot.png"
    assert memq("plot", str(RPD / "matmul_result.rpd"), "-o", str(png)).returncode == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    annotated = tmp_path / "annotated.pftrace"
    ann = memq("annotate", str(out), "-o", str(annotated))
    assert ann.returncode == 0 and "2 redundant-copy slices (repeat 2)" in ann.stdout + ann.stderr
    nsys = memq("convert", str(NSYS / "test_cuda_report1.sqlite"), "-o", str(tmp_path / "n.pftrace"))
    assert nsys.returncode == 0 and "carry no addresses" in nsys.stderr


def test_bad_databases_are_one_line(tmp_path):
    other = tmp_path / "other.db"
    db = sqlite3.connect(other)
    db.execute("CREATE TABLE t (a)")
    db.commit()
    result = memq("redundant", str(other))
    assert result.returncode == 1 and result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert "an SQLite database memq does not know (tables: t)" in result.stderr
    cut = tmp_path / "cut.rpd"
    cut.write_bytes((RPD / "matmul_result.rpd").read_bytes()[:20000])
    result = memq("convert", str(cut), "-o", str(tmp_path / "cut.pftrace"))
    assert result.returncode == 1 and result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    result = memq("convert", str(RPD / "matmul_result.rpd"), "--salvage", "-o", str(tmp_path / "s.pftrace"))
    assert result.returncode == 2 and "--salvage applies to memq's own LTTng recordings" in result.stderr
    assert not (tmp_path / "s.pftrace").exists()


# -- THAPI -----------------------------------------------------------------------------------------------------

def thapi_calls() -> list[dict]:
    """Two threads of one process through HIP, one through the CUDA driver; a failed hipMalloc."""
    dev, dev2, pinned, host = 0x7F1A00000000, 0x7F1A10000000, 0x7F1B00000000, 0x55D0C4A1B2C0
    hip = "lttng_ust_hip"
    calls, t = [], 1_000_000

    def call(provider, func, tid, dur, entry, exit_=None, pid=4100):
        nonlocal t
        calls.append(dict(provider=provider, func=func, pid=pid, tid=tid, begin=t, end=t + dur, entry=entry,
                          exit=exit_ or {}))
        t += dur + 500

    call(hip, "hipMalloc", 4100, 800, {"ptr": 0x7FFD0010, "size": 1 << 20}, {"ptr_val": dev})
    call(hip, "hipMalloc", 4101, 700, {"ptr": 0x7FFD0020, "size": 1 << 20}, {"ptr_val": dev2})
    call(hip, "hipHostMalloc", 4100, 900, {"ptr": 0x7FFD0030, "size": 4096, "flags": 0}, {"ptr_val": pinned})
    call(hip, "hipMalloc", 4100, 300, {"ptr": 0x7FFD0040, "size": 1 << 40}, {"hipResult": 2, "ptr_val": 0})
    call(hip, "hipMemcpy", 4100, 5000, {"dst": dev, "src": host, "sizeBytes": 65536, "kind": 1})
    call(hip, "hipMemcpy", 4100, 5100, {"dst": dev, "src": host, "sizeBytes": 65536, "kind": 1})  # again: repeat
    call(hip, "hipMemcpyAsync", 4101, 1200, {"dst": pinned, "src": dev, "sizeBytes": 4096, "kind": 2, "stream": 0x99})
    call(hip, "hipMemcpyDtoD", 4101, 700, {"dst": dev2, "src": dev, "sizeBytes": 8192})
    call(hip, "hipMemsetAsync", 4100, 200, {"dst": dev2, "value": 0, "sizeBytes": 512, "stream": 0})
    call(hip, "hipFree", 4101, 400, {"ptr": dev2})
    call("lttng_ust_cuda", "cuMemAlloc_v2", 5200, 600, {"dptr": 0x7FFE0000, "bytesize": 2048}, {"dptr_val": 0x7F2000000000},
         pid=5200)
    call("lttng_ust_cuda", "cuMemcpyHtoD_v2", 5200, 900, {"dstDevice": 0x7F2000000000, "srcHost": host, "ByteCount": 2048},
         pid=5200)
    call("lttng_ust_cuda", "cuMemFree_v2", 5200, 300, {"dptr": 0x7F2000000000}, pid=5200)
    return calls


def thapi_raw(path: Path) -> dict[str, tuple[int, int, int]]:
    """Independent count from babeltrace2's text output: copy calls paired entry/exit per (vpid, vtid)."""
    text = subprocess.run(["babeltrace2", "--clock-seconds", str(path)], capture_output=True, text=True,
                          check=True).stdout
    line = re.compile(r"^\[(\d+)\.(\d{9})\] .*? (lttng_ust_\w+):(\w+)_(entry|exit): \{ vpid = (\d+), vtid = (\d+) \}"
                      r"(?:, \{(.*)\})?$")
    open_calls, out = {}, {}
    for match in map(line.match, text.splitlines()):
        sec, frac, _, func, phase, pid, tid, fields = match.groups()
        ts = int(sec) * 10**9 + int(frac)
        values = dict(f.split(" = ") for f in fields.strip().split(", ")) if fields and fields.strip() else {}
        if phase == "entry":
            open_calls[(pid, tid)] = (func, ts, values)
            continue
        func_in, begin, entry = open_calls.pop((pid, tid))
        if "Memcpy" not in func or int(values.get("hipResult", values.get("cuResult", "0")), 0):
            continue
        direction = {"1": "HtoD", "0x1": "HtoD", "0x2": "DtoH"}.get(entry.get("kind"), None) or \
            {"hipMemcpyDtoD": "DtoD", "cuMemcpyHtoD_v2": "HtoD"}[func]
        size = int(entry.get("sizeBytes", entry.get("ByteCount")), 0)
        row = out.setdefault(direction, [0, 0, 0])
        row[0] += 1
        row[1] += size
        row[2] += ts - begin
    return {k: tuple(v) for k, v in out.items()}


def test_thapi_trace(tmp_path):
    from support.thapi_ctf import write_trace

    calls = thapi_calls()
    calls.append(dict(provider="lttng_ust_hip", func="hipDeviceSynchronize", pid=4100, tid=4100, begin=10**8,
                      end=10**8 + 5, entry={}, exit={}))  # a call memq does not read, with no parameter
    trace = write_trace(tmp_path / "thapi", calls)
    stream = (trace / "stream_0").read_bytes()
    assert sniff.sniff(trace) == "thapi"
    imported, out = convert(trace, tmp_path)
    raw = thapi_raw(trace)
    assert raw == {"HtoD": (3, 133120, 11000), "DtoH": (1, 4096, 1200), "DtoD": (1, 8192, 700)}
    assert trace_copies(out) == raw
    assert (trace / "stream_0").read_bytes() == stream
    with open_trace(out) as engine:
        allocs = engine.rows("INCLUDE PERFETTO MODULE memq.allocations; SELECT kind, COUNT(*) AS n, SUM(size) AS b, "
                             "SUM(leaked) AS leaked FROM memq_allocation GROUP BY kind ORDER BY kind").records()
        assert [(a["kind"], a["n"], a["b"], a["leaked"]) for a in allocs] == [
            ("device", 3, (1 << 21) + 2048, 1), ("pinned", 1, 4096, 1)]  # the failed hipMalloc allocates nothing
        sets = engine.rows("INCLUDE PERFETTO MODULE memq.copies; SELECT COUNT(*) AS n, SUM(bytes) AS b FROM memq_set")
        assert (sets.column("n")[0], sets.column("b")[0]) == (1, 512)
    result = memq("redundant", str(trace), "--format", "csv")
    assert result.returncode == 0, result.stderr
    rows = [line.split(",") for line in result.stdout.splitlines() if not line.startswith("#")]
    repeat = [dict(zip(rows[0], r)) for r in rows[1:] if r[:2] == ["", "repeat"]][0]
    assert (repeat["count"], repeat["bytes"]) == ("1", "65536")


@pytest.mark.parametrize("fmt", ["rpd", "rocpd", "thapi"])
def test_imports_name_their_source_and_keep_the_address_figures(fmt, rocpd_dbs, tmp_path):
    """The terminal and the report name the profiler an import came from, not `lttng`, and the figures that need
    addresses still apply (duplicated and redundant: applies, with the repeats the address rules find)."""
    from ctf2perfetto.look import report
    from support.thapi_ctf import write_trace

    path = {"rpd": RPD / "matmul_result.rpd", "rocpd": rocpd_dbs["copies.db"],
            "thapi": write_trace(tmp_path / "thapi", thapi_calls()) if fmt == "thapi" else None}[fmt]
    _, out = convert(path, tmp_path)
    table = memq("redundant", str(out))
    assert table.returncode == 0, table.stderr
    assert f"memq redundant (source: {fmt})" in table.stdout.splitlines(), table.stdout
    for name in ("duplicated", "redundant"):
        done = memq(name, str(out), "--format", "json")
        assert done.returncode == 0, done.stderr
        got = json.loads(done.stdout)
        assert got["source"] == fmt and all(table["applies"] for table in got["tables"].values()), got
    with open_trace(out) as engine:
        rep = report.collect(engine, out.name)
        copies = engine.rows("INCLUDE PERFETTO MODULE memq.copies; SELECT COUNT(*) AS n FROM memq_copy "
                             "WHERE src IS NOT NULL AND dst IS NOT NULL").first("n")
    assert rep.source == fmt and rep.addressed and copies > 0
    page = report.render([rep])
    assert f"Source: {fmt} ·" in page and 'data-figure="dup_peak"' in page and "carry no addresses" not in page
