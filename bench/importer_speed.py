"""Importer speed: RPD and rocpd databases of many copies read into memq events, against a plain sqlite3
read of the same rows.

Builds (in a temporary directory) an RPD file from the blog's matmul trace with N synthetic copy calls added
(rocpd_api + rocpd_copyapi + rocpd_op + rocpd_api_ops rows, as rpd_tracer writes them, dst/src swapped, hipMalloc
buffers to vote on the swap) and a rocpd database from rocprofiler-sdk's schema with N copy rows
(tests/data/rocpd/make_rocpd.py). Times, best of --repeat:

  1. reference: sqlite3 fetching the copy rows the importer needs (the copy calls, their GPU ops), no work on them
  2. the importer: file -> EventBatch (importers.<format>.read)
  3. the whole conversion: file -> memq Perfetto trace (importers.foreign.write after read)

and prints copy rows per minute of each, and the ratio importer / reference. The goal: >= 1M copy rows a
minute for the importer. Usage:

    python3 bench/importer_speed.py [--copies 1000000] [--repeat 1] [--format rpd|rocpd|both]
"""
from __future__ import annotations

import argparse
import importlib.util
import shutil
import sqlite3
import tempfile
import time
from pathlib import Path

from ctf2perfetto.importers import foreign

DATA = Path(__file__).resolve().parent.parent / "tests" / "data"


def make_rpd(path: Path, copies: int) -> None:
    shutil.copy(DATA / "rpd" / "matmul_result.rpd", path)
    db = sqlite3.connect(path)
    strings = dict((s, i) for i, s in db.execute("SELECT id, string FROM rocpd_string"))
    def sid(text: str) -> int:
        if text not in strings:
            strings[text] = db.execute("INSERT INTO rocpd_string (string) VALUES (?)", (text,)).lastrowid
        return strings[text]
    empty, memcpy, htod, dtoh = sid(""), sid("hipMemcpyAsync"), sid("CopyHostToDevice"), sid("CopyDeviceToHost")
    api_id = db.execute("SELECT MAX(id) FROM rocpd_api").fetchone()[0] + 1
    op_id = db.execute("SELECT MAX(id) FROM rocpd_op").fetchone()[0] + 1
    t0 = db.execute('SELECT MAX("end") FROM rocpd_api').fetchone()[0] + 1000
    dev, host = 0x7F3EBCA00000, 0x7FFF9D15D000  # inside the first hipMalloc / a host buffer
    api, capi, ops, links = [], [], [], []
    for i in range(copies):
        start = t0 + i * 2000
        kind = 1 if i % 2 == 0 else 2
        dst, src = (dev + (i % 4096) * 256, host) if kind == 1 else (host, dev + (i % 4096) * 256)
        api.append((api_id + i, 4242, 4242, start, start + 900, memcpy, empty))
        capi.append((api_id + i, "0x0", 256, "", "", kind, hex(src), hex(dst), 0, 0, 0, 0))  # rpd_tracer's swap
        ops.append((op_id + i, 0, 0, 0, "0x0", start + 1000, start + 1500, empty, htod if kind == 1 else dtoh))
        links.append((api_id + i, op_id + i))
    db.executemany('INSERT INTO rocpd_api (id, pid, tid, start, "end", apiName_id, args_id) VALUES (?,?,?,?,?,?,?)',
                   api)
    db.executemany("INSERT INTO rocpd_copyapi VALUES (?,?,?,?,?,?,?,?,?,?,?,?)", capi)
    db.executemany('INSERT INTO rocpd_op (id, gpuId, queueId, sequenceId, completionSignal, start, "end", '
                   "description_id, opType_id) VALUES (?,?,?,?,?,?,?,?,?)", ops)
    db.executemany("INSERT INTO rocpd_api_ops (api_id, op_id) VALUES (?,?)", links)
    db.commit()
    db.close()


def make_rocpd(path: Path, copies: int) -> None:
    spec = importlib.util.spec_from_file_location("make_rocpd", DATA / "rocpd" / "make_rocpd.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    path.unlink(missing_ok=True)
    db = sqlite3.connect(path)
    module.schema(db)
    module.common(db)
    uuid, t0 = module.UUID, module.T0
    name = db.execute(f'INSERT INTO "rocpd_string{uuid}" (string) VALUES ("MEMORY_COPY_HOST_TO_DEVICE")').lastrowid
    db.executemany(f'INSERT INTO "rocpd_event{uuid}" (id, category_id, stack_id, parent_stack_id, correlation_id) '
                   "VALUES (?, ?, ?, ?, 0)", ((i + 1, name, i, i) for i in range(copies)))
    db.executemany(f'INSERT INTO "rocpd_memory_copy{uuid}" (id, nid, pid, tid, start, "end", name_id, dst_agent_id, '
                   "dst_address, src_agent_id, src_address, size, queue_id, stream_id, event_id) "
                   "VALUES (?, 1, ?, ?, ?, ?, ?, 2, ?, 1, ?, 4096, 1, 0, ?)",
                   ((i + 1, module.PID, module.TID, t0 + i * 2000, t0 + i * 2000 + 900, name,
                     module.DEV_A + (i % 4096) * 4096, module.PAGEABLE, i + 1) for i in range(copies)))
    db.commit()
    db.close()


REFERENCE = {
    "rpd": 'SELECT a.id, a.pid, a.tid, a.start, a."end", a.apiName_id, c.stream, c.size, c.width, c.height, c.kind, '
           "c.dst, c.src, c.dstDevice, c.srcDevice FROM rocpd_copyapi c JOIN rocpd_api a ON a.id = c.api_ptr_id "
           'ORDER BY a.id; SELECT ao.api_id, o.start, o."end", o.gpuId FROM rocpd_api_ops ao JOIN rocpd_op o ON '
           "o.id = ao.op_id",
    "rocpd": "SELECT pid, tid, start, \"end\", name_id, dst_agent_id, dst_address, src_agent_id, src_address, size, "
             "stream_id FROM rocpd_memory_copy ORDER BY id",
}


def best(repeat: int, func) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        func()
        times.append(time.perf_counter() - started)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=1_000_000, help="copy rows per database (default 1M)")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each side; the best counts (default 1)")
    parser.add_argument("--format", choices=("rpd", "rocpd", "both"), default="both", help="which database (default both)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="memq-bench-") as tmp:
        for fmt, make in (("rpd", make_rpd), ("rocpd", make_rocpd)):
            if args.format not in (fmt, "both"):
                continue
            path = Path(tmp) / f"big.{fmt}"
            started = time.perf_counter()
            make(path, args.copies)
            built = time.perf_counter() - started
            db = sqlite3.connect(path)
            reference = best(args.repeat, lambda: [db.execute(sql).fetchall() for sql in REFERENCE[fmt].split("; ")])
            db.close()
            imported = None

            def read() -> None:
                nonlocal imported
                imported = foreign.read(path, fmt)

            importer = best(args.repeat, read)
            copies = sum(v[0] for v in imported.copies.values())
            out = Path(tmp) / f"big-{fmt}.pftrace"
            whole = best(args.repeat, lambda: foreign.write(foreign.read(path, fmt), out))
            per_min = lambda s: copies / s * 60
            print(f"{fmt}: {copies:,} copies ({path.stat().st_size / 2**20:.0f} MiB, built in {built:.1f} s)")
            print(f"  reference (sqlite3 fetch of the rows): {reference:6.2f} s  {per_min(reference):13,.0f} rows/min")
            print(f"  importer (file -> memq events):        {importer:6.2f} s  {per_min(importer):13,.0f} rows/min"
                  f"  (ratio importer/reference {importer / reference:.2f})")
            print(f"  whole conversion (-> .pftrace):        {whole:6.2f} s  {per_min(whole):13,.0f} rows/min"
                  f"  ({out.stat().st_size / 2**20:.0f} MiB)")
            print(f"  goal >= 1,000,000 copy rows a minute (importer): {'met' if per_min(importer) >= 1e6 else 'MISSED'}")


if __name__ == "__main__":
    main()
