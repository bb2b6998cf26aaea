"""Build the rocpd test databases from rocprofiler-sdk's own schema files (rocpd_tables.sql, rocpd_views.sql,
data_views.sql, copied unchanged beside this script), with values in the shape rocprofv3 writes them: tables
suffixed with a uuid v7 whose dashes are underscores, process and thread ids equal to the OS ids, agents
"CPU" and "GPU", ALLOC rows with the allocating agent, FREE rows without agent and with size 0, 0x00007f..
addresses, CLOCK_MONOTONIC nanoseconds around 1.06e15 (rocprofiler-sdk docs/data/memory_copy_trace.csv,
memory_allocation_trace.csv).

    python3 tests/data/rocpd/make_rocpd.py [DIR]      # writes copies.db and args.db into DIR (default: .)
    python3 tests/data/rocpd/make_rocpd.py --copies N OUT.db   # N copy rows (bench/)
"""
from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
GUID = "0000ddb5-8903-7903-b269-cd8d3745bb8a"
UUID = "_" + GUID.replace("-", "_")
PID, TID, TID2 = 238, 238, 241
T0 = 1057963336487172

DEV_A, DEV_B = 0x00007FFA2C000000, 0x00007FFA30000000  # hipMalloc'd (GPU agent)
PINNED = 0x00007FFB26354000  # hipHostMalloc'd (CPU agent)
PAGEABLE = 0x000055D0C4A1B2C0  # malloc'd host memory: never in rocpd
SCRATCH = 0x00007FF000000000


def schema(db: sqlite3.Connection) -> None:
    text = "".join((HERE / name).read_text() for name in ("rocpd_tables.sql", "rocpd_views.sql", "data_views.sql"))
    db.executescript(text.replace("{{uuid}}", UUID).replace("{{guid}}", GUID).replace("{{view_uuid}}", ""))


def _string(db, text: str) -> int:
    row = db.execute(f'SELECT id FROM "rocpd_string{UUID}" WHERE string = ?', (text,)).fetchone()
    if row:
        return row[0]
    return db.execute(f'INSERT INTO "rocpd_string{UUID}" (string) VALUES (?)', (text,)).lastrowid


def _event(db, category: str, corr: int) -> int:
    return db.execute(f'INSERT INTO "rocpd_event{UUID}" (category_id, stack_id, parent_stack_id, correlation_id) '
                      'VALUES (?, ?, ?, 0)', (_string(db, category), corr, corr)).lastrowid


def common(db) -> None:
    for tag, value in (("schema_version", "3"), ("uuid", UUID[1:]), ("guid", GUID)):
        db.execute(f'INSERT INTO "rocpd_metadata{UUID}" (tag, value) VALUES (?, ?)', (tag, value))
    db.execute(f'INSERT INTO "rocpd_info_node{UUID}" (id, hash, machine_id, system_name, hostname, release, version, '
               'hardware_name) VALUES (1, 7309420419340612437, "6a3f2d5be0b14d0e9c1f0e33c1b2a7d4", "Linux", '
               '"mi210-node", "6.8.0-45-generic", "#45-Ubuntu SMP", "x86_64")')
    db.execute(f'INSERT INTO "rocpd_info_process{UUID}" (id, nid, ppid, pid, init, fini, start, "end", command) '
               f'VALUES ({PID}, 1, 201, {PID}, {T0 - 10**9}, {T0 + 10**9}, {T0 - 10**9}, {T0 + 10**9}, '
               '"/usr/bin/python3 train.py --epochs 1")')
    for tid in (TID, TID2):
        db.execute(f'INSERT INTO "rocpd_info_thread{UUID}" (id, nid, ppid, pid, tid) VALUES ({tid}, 1, 201, {PID}, '
                   f'{tid})')
    db.execute(f'INSERT INTO "rocpd_info_agent{UUID}" (id, nid, pid, type, absolute_index, logical_index, type_index, '
               f'uuid, name, model_name, vendor_name, product_name, user_name) VALUES (1, 1, {PID}, "CPU", 0, 0, 0, 0, '
               '"AMD EPYC 7763 64-Core Processor", "", "CPU", "AMD EPYC 7763 64-Core Processor", "")')
    db.execute(f'INSERT INTO "rocpd_info_agent{UUID}" (id, nid, pid, type, absolute_index, logical_index, type_index, '
               f'uuid, name, model_name, vendor_name, product_name, user_name) VALUES (2, 1, {PID}, "GPU", 4, 1, 0, '
               '1863214587, "gfx90a", "aldebaran", "AMD", "AMD Instinct MI210", "")')
    db.execute(f'INSERT INTO "rocpd_info_stream{UUID}" (id, nid, pid, name) VALUES (0, 1, {PID}, "Default Stream")')
    db.execute(f'INSERT INTO "rocpd_info_queue{UUID}" (id, nid, pid, name) VALUES (1, 1, {PID}, "Queue 1")')


COPIES = [  # (start offset ns, duration ns, tid, direction, src agent, dst agent, src, dst, size)
    (1_000_000, 77_040, TID, "HOST_TO_DEVICE", 1, 2, PAGEABLE, DEV_A, 4 << 20),
    (2_500_000, 75_361, TID, "HOST_TO_DEVICE", 1, 2, PAGEABLE, DEV_A, 4 << 20),  # the same bytes again: repeat
    (4_000_000, 75_440, TID, "DEVICE_TO_HOST", 2, 1, DEV_A, PINNED, 1 << 20),
    (5_000_000, 101_321, TID2, "DEVICE_TO_DEVICE", 2, 2, DEV_A, DEV_B, 8 << 20),
    (6_000_000, 40_112, TID2, "HOST_TO_DEVICE", 1, 2, PINNED, DEV_B + (1 << 20), 1 << 20),
    (7_000_000, 3_210, TID, "DEVICE_TO_HOST", 2, 1, DEV_B, PAGEABLE, 296),
    (7_100_000, 3_050, TID, "DEVICE_TO_HOST", 2, 1, DEV_B, PAGEABLE, 296),  # re-read into the same host bytes
]
ALLOCS = [  # (start offset, duration, type, level, agent, address, size)
    (100_000, 57_417, "ALLOC", "REAL", 2, DEV_A, 64 << 20),
    (200_000, 36_415, "ALLOC", "REAL", 2, DEV_B, 16 << 20),
    (300_000, 41_002, "ALLOC", "REAL", 1, PINNED, 1 << 20),
    (350_000, 12_000, "ALLOC", "VIRTUAL", 2, 0x00007FF800000000, 1 << 30),
    (400_000, 8_000, "ALLOC", "SCRATCH", 2, SCRATCH, 1 << 24),
    (9_000_000, 145_090, "FREE", "REAL", None, DEV_B, 0),
    (9_200_000, 191_940, "FREE", "REAL", None, PINNED, 0),
]  # DEV_A is never freed


def copies_db(out: Path, n_copies: int | None = None) -> None:
    out.unlink(missing_ok=True)
    db = sqlite3.connect(out)
    schema(db)
    common(db)
    for i, (at, dur, typ, level, agent, addr, size) in enumerate(ALLOCS):
        kind = "SCRATCH_MEMORY" if level == "SCRATCH" else "MEMORY_ALLOCATION"
        ev = _event(db, kind, i + 1)
        db.execute(f'INSERT INTO "rocpd_memory_allocate{UUID}" (nid, pid, tid, agent_id, type, level, start, "end", '
                   'address, size, queue_id, stream_id, event_id) VALUES (1, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, 0, ?)',
                   (PID, TID, agent, typ, level, T0 + at, T0 + at + dur, addr, size, ev))
    rows = COPIES if n_copies is None else [COPIES[i % len(COPIES)] for i in range(n_copies)]
    for i, (at, dur, tid, direction, sa, da, src, dst, size) in enumerate(rows):
        if n_copies is not None:
            at = 1_000_000 + i * 10_000
        ev = _event(db, "MEMORY_COPY", 100 + i)
        db.execute(f'INSERT INTO "rocpd_memory_copy{UUID}" (id, nid, pid, tid, start, "end", name_id, dst_agent_id, '
                   'dst_address, src_agent_id, src_address, size, queue_id, stream_id, event_id) '
                   'VALUES (?, 1, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1, 0, ?)',
                   (i + 1, PID, tid, T0 + at, T0 + at + dur, _string(db, f"MEMORY_COPY_{direction}"), da, dst, sa, src,
                    size, ev))
    db.commit()
    db.close()


CALLS = [  # (start offset, duration, function, args): rocprofv3 --hip-runtime-trace without --memory-copy-trace
    (100_000, 76_237, "hipMalloc", [("ptr", "void**", "0x7ffd9c3e7a48"), ("size", "size_t", "67108864")]),
    (1_000_000, 412_077, "hipMemcpy", [("dst", "void*", "0x7ffa2c000000"), ("src", "const void*", "0x55d0c4a1b2c0"),
                                       ("sizeBytes", "size_t", "4194304"), ("kind", "hipMemcpyKind",
                                                                            "hipMemcpyHostToDevice")]),
    (2_000_000, 401_311, "hipMemcpy", [("dst", "void*", "0x7ffa2c000000"), ("src", "const void*", "0x55d0c4a1b2c0"),
                                       ("sizeBytes", "size_t", "4194304"), ("kind", "hipMemcpyKind",
                                                                            "hipMemcpyHostToDevice")]),
    (3_000_000, 21_904, "hipMemsetAsync", [("dst", "void*", "0x7ffa2c400000"), ("value", "int", "0"),
                                           ("sizeBytes", "size_t", "1048576"), ("stream", "hipStream_t", "0x0")]),
    (4_000_000, 98_004, "hipMemcpyAsync", [("dst", "void*", "0x7ffb26354000"), ("src", "const void*",
                                                                                "0x7ffa2c000000"),
                                           ("sizeBytes", "size_t", "1048576"), ("kind", "hipMemcpyKind",
                                                                                "hipMemcpyDeviceToHost"),
                                           ("stream", "hipStream_t", "0x0")]),
    (5_000_000, 9_120, "hipMemcpyDtoD", [("dst", "hipDeviceptr_t", "0x7ffa30000000"),
                                         ("src", "hipDeviceptr_t", "0x7ffa2c000000"),
                                         ("sizeBytes", "size_t", "8388608")]),
    (6_000_000, 5_003, "hipGetLastError", []),
]


def args_db(out: Path) -> None:
    out.unlink(missing_ok=True)
    db = sqlite3.connect(out)
    schema(db)
    common(db)
    for i, (at, dur, name, args) in enumerate(CALLS):
        ev = _event(db, "HIP_RUNTIME_API_EXT", i + 1)
        for pos, (arg, typ, value) in enumerate(args):
            db.execute(f'INSERT INTO "rocpd_arg{UUID}" (event_id, position, type, name, value) VALUES (?, ?, ?, ?, ?)',
                       (ev, pos, typ, arg, value))
        db.execute(f'INSERT INTO "rocpd_region{UUID}" (id, nid, pid, tid, start, "end", name_id, event_id) '
                   'VALUES (?, 1, ?, ?, ?, ?, ?, ?)', (i + 1, PID, TID, T0 + at, T0 + at + dur, _string(db, name), ev))
    db.commit()
    db.close()


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--copies":
        copies_db(Path(sys.argv[3]), int(sys.argv[2]))
    else:
        where = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(".")
        copies_db(where / "copies.db")
        args_db(where / "args.db")
