"""memq's host heap wrappers (preload/memq_heap.c) under `memq record`, read back with babeltrace2.

tests/fakes/heap_work.c does the allocations in worker threads that touch nothing
but the allocator and logs every block with its malloc_usable_size; a worker's
recorded events must be exactly its blocks at or above the threshold, and the sum
of its memq:host_small events exactly its smaller blocks.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from support.lttng import HOST_EVENTS, MEMQ, read_worklog, record, scan_events

REPO = Path(__file__).resolve().parent.parent
SMALL_KEYS = ("alloc_count", "alloc_bytes", "free_count", "free_bytes")
EDGE_MIN = 4008  # a usable size glibc hands out (16k + 8): blocks exactly at the threshold exist


def host_events(trace_dir: Path, pid: int | None = None) -> list[dict]:
    return scan_events(trace_dir, HOST_EVENTS, pids=None if pid is None else {pid})


def small_totals(events: list[dict], tid: int) -> dict[str, int]:
    """The sum of a thread's memq:host_small events."""
    total = dict.fromkeys(SMALL_KEYS, 0)
    for e in events:
        if e["event"] == "memq:host_small" and e["vtid"] == tid:
            for k in SMALL_KEYS:
                total[k] += e[k]
    return total


def expected(rows: list[dict], tid: int, minimum: int) -> tuple[list[tuple], dict[str, int]]:
    """From a worker's log: its events at or above `minimum` (in order) and its small totals."""
    big, small = [], dict.fromkeys(SMALL_KEYS, 0)
    for r in rows:
        if r.get("tid") != tid or "op" not in r:
            continue
        if r["usable"] >= minimum:
            big.append((f"memq:host_{r['op']}", r["api"], r["ptr"], r["usable"], r["requested"]))
        else:
            side = "alloc" if r["op"] == "alloc" else "free"
            small[f"{side}_count"] += 1
            small[f"{side}_bytes"] += r["usable"]
    return big, small


def recorded(events: list[dict], tid: int) -> list[tuple]:
    return [(e["event"], e["api_label"], e["ptr"], e["size"], e["requested"]) for e in events
            if e["vtid"] == tid and e["event"] != "memq:host_small"]


def run_edges(fake_gpu, tmp_path: Path, minimum: int, extra: tuple[str, ...] = ()):
    log = tmp_path / "edges.jsonl"
    rec = record(tmp_path / "trace", [str(fake_gpu.heap_work), "edges", str(EDGE_MIN), str(log)], api="libc",
                 extra=("--host-min-size", str(minimum), *extra))
    rows = read_worklog(log)
    tid = next(r["tid"] for r in rows if "op" in r)
    return rec, rows, tid


def test_blocks_around_the_threshold_every_allocator_and_realloc(fake_gpu, tmp_path) -> None:
    """Just below / at / above the threshold, with every allocator; realloc crossing it both ways and in
    place, failing (nothing changes: the block is recorded freed and live again), free(NULL); errno."""
    rec, rows, tid = run_edges(fake_gpu, tmp_path, EDGE_MIN)
    assert all(r["ok"] for r in rows if "check" in r), [r for r in rows if "check" in r and not r["ok"]]
    events = host_events(rec.dir)
    big, small = expected(rows, tid, EDGE_MIN)
    assert recorded(events, tid) == big
    assert small_totals(events, tid) == small
    # the log covers what it claims: each allocator on both sides, exactly-at blocks, crossings and in place
    blocks = [r for r in rows if r.get("op") == "alloc"]
    assert {r["api"] for r in blocks if r["usable"] >= EDGE_MIN} >= {
        "malloc", "calloc", "realloc", "memalign", "posix_memalign", "aligned_alloc", "valloc", "pvalloc"}
    assert {r["api"] for r in blocks if r["usable"] < EDGE_MIN} >= {
        "malloc", "calloc", "realloc", "memalign", "posix_memalign", "aligned_alloc", "valloc"}
    assert any(r["usable"] == EDGE_MIN for r in blocks) and any(r["usable"] == EDGE_MIN - 16 for r in blocks)
    pairs = [(a, b) for a, b in zip(rows, rows[1:]) if a.get("api") == b.get("api") == "realloc"
             and a.get("op") == "free" and b.get("op") == "alloc"]
    crossings = {(a["usable"] >= EDGE_MIN, b["usable"] >= EDGE_MIN) for a, b in pairs}
    assert crossings >= {(False, True), (True, False), (True, True), (False, False)}
    assert any(a["ptr"] == b["ptr"] and a["usable"] >= EDGE_MIN for a, b in pairs)  # in place
    assert rec.meta["enabled"]["host"] == {"source": "memq", "min_size": EDGE_MIN}
    assert rec.meta["discarded_events"] == 0
    # the call site of each event lies in the workload, not in the wrapper
    assert all(e["ip"] != 0 for e in events if e["vtid"] == tid and e["event"] != "memq:host_small")


def test_min_size_zero_records_every_block(fake_gpu, tmp_path) -> None:
    rec, rows, tid = run_edges(fake_gpu, tmp_path, 0)
    events = host_events(rec.dir)
    big, small = expected(rows, tid, 0)
    assert small == dict.fromkeys(SMALL_KEYS, 0)
    assert recorded(events, tid) == big
    assert small_totals(events, tid) == small


def test_threads_lose_nothing_and_totals_are_exact(fake_gpu, tmp_path) -> None:
    """8 threads x 10,000 allocations on both sides of 4096 (default threshold): every event, exact totals.
    Each worker's last counts go out at its exit (within its last 10 ms otherwise lost)."""
    log = tmp_path / "threads.jsonl"
    rec = record(tmp_path / "trace", [str(fake_gpu.heap_work), "threads", "8", "10000", str(log)], api="libc")
    assert rec.meta["discarded_events"] == 0 and rec.meta["lost_packets"] == 0
    totals: dict[int, dict[str, dict]] = defaultdict(dict)
    for r in read_worklog(log):
        if r.get("op") == "totals":
            totals[r["tid"]][r["api"]] = r
    assert len(totals) == 8
    events = host_events(rec.dir)
    for tid, t in totals.items():
        assert small_totals(events, tid) == {
            "alloc_count": t["small"]["ptr"], "alloc_bytes": t["small"]["usable"],
            "free_count": t["small"]["requested"], "free_bytes": t["small_freed_bytes"]["ptr"]}
        mine = [e for e in events if e["vtid"] == tid]
        assert sum(e["event"] == "memq:host_alloc" for e in mine) == t["big"]["ptr"] == 1000
        assert sum(e["event"] == "memq:host_free" for e in mine) == t["big"]["usable"]
        assert all(e["size"] >= 4096 for e in mine if e["event"] != "memq:host_small")
        # written every 10 ms while busy, not once per block
        assert sum(e["event"] == "memq:host_small" for e in mine) < 2000


def test_idle_thread_counts_go_out_at_process_exit(fake_gpu, tmp_path) -> None:
    """A thread that counted small blocks and went to sleep: what it had not written yet goes out when the
    process exits, as one memq:host_small of the exiting thread (whose vtid it carries)."""
    log = tmp_path / "idle.jsonl"
    rec = record(tmp_path / "trace", [str(fake_gpu.heap_work), "idle", str(log)], api="libc")
    rows = read_worklog(log)
    tid = rows[0]["tid"]
    big, small = expected(rows, tid, 4096)
    assert big == [] and small["alloc_count"] == 10 and small["free_count"] == 5
    events = host_events(rec.dir)
    own = small_totals(events, tid)
    pending = {k: small[k] - own[k] for k in SMALL_KEYS}
    assert pending["alloc_count"] > 0  # the worker had not written everything itself
    swept = [{k: e[k] for k in SMALL_KEYS} for e in events if e["event"] == "memq:host_small" and e["vtid"] != tid]
    assert pending in swept


def test_fork_child_inherits_the_live_small_blocks(fake_gpu, tmp_path) -> None:
    """The child frees 100 small blocks and a big one the parent allocated: its small totals start with the
    parent's live small blocks, so its live count never goes below zero; the big free is the child's event."""
    log = tmp_path / "fork.jsonl"
    rec = record(tmp_path / "trace", [str(fake_gpu.heap_work), "fork", str(log)], api="libc")
    parent, child = read_worklog(log)
    events = host_events(rec.dir)
    mine = [e for e in events if e["vpid"] == child["child"]]
    live = 0
    for e in mine:
        if e["event"] == "memq:host_small":
            live += e["alloc_count"] - e["free_count"]
            assert live >= 0
    counts = small_totals(mine, child["child"])
    assert counts["free_count"] >= 100 and counts["alloc_count"] >= 150
    assert ("memq:host_free", parent["big"]) in {(e["event"], e.get("ptr")) for e in mine}
    assert ("memq:host_alloc", child["big"]) in {(e["event"], e.get("ptr")) for e in mine}
    in_parent = [e for e in events if e["vpid"] == parent["parent"]]
    assert ("memq:host_alloc", parent["big"]) in {(e["event"], e.get("ptr")) for e in in_parent}
    assert ("memq:host_free", parent["big"]) not in {(e["event"], e.get("ptr")) for e in in_parent}


BOOT_LOOKUP = r"""
#define _GNU_SOURCE
#include <malloc.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
void *memq_real_dlsym(void *handle, const char *name);
static void *kept;
/* Looks the symbol up after allocating, as glibc's dlsym does on its error path: while memq
 * resolves the real allocator, these requests must come from its bootstrap buffer. */
void *boot_lookup(void *handle, const char *name)
{
    char *a = malloc(100), *b = calloc(10, 30), *c = NULL;
    int ok = a && b && posix_memalign((void **) &c, 256, 64) == 0 && ((unsigned long) c & 255) == 0;
    for (int i = 0; ok && i < 300; i++)
        ok = b[i] == 0;
    memset(a, 'x', 100);
    a = realloc(a, 200);
    ok = ok && a && a[99] == 'x' && malloc_usable_size(a) >= 200 && aligned_alloc(64, 128) && memalign(32, 10);
    free(b);
    free(c);
    if (!kept)
        kept = a;
    else
        free(a);
    if (write(2, ok ? "boot lookup ok\n" : "boot lookup FAILED\n", ok ? 15 : 19) < 0)
        ok = 0;
    return memq_real_dlsym(handle, name);
}
/* After start-up: a bootstrap block moves to real memory with realloc (content kept). */
static void __attribute__((constructor)) moved(void)
{
    char *p = realloc(kept, 100000);
    if (write(2, p && p[0] == 'x' && p[99] == 'x' ? "boot realloc ok\n" : "boot realloc FAILED\n", 16) < 0)
        abort();
    free(p);
}
"""


def test_allocations_while_resolving_the_allocator(fake_gpu, tmp_path) -> None:
    """A build of the library whose lookup allocates (malloc, calloc, realloc, posix_memalign, ... and
    frees) before the real functions are known: served from the bootstrap buffer; the program runs and
    its heap is recorded as with the real build."""
    subprocess.run(["make", "-s", "native"], cwd=REPO, check=True, capture_output=True)
    (tmp_path / "boot_lookup.c").write_text(BOOT_LOOKUP)
    cflags = subprocess.run(["pkg-config", "--cflags", "lttng-ust"], capture_output=True, text=True).stdout.split()
    libs = subprocess.run(["pkg-config", "--libs", "lttng-ust"], capture_output=True, text=True).stdout.split()
    preload = REPO / "preload"
    objects = [str(preload / name) for name in subprocess.run(["make", "-s", "-C", str(preload), "objs"], check=True,
                                                              capture_output=True, text=True).stdout.split()
               if name != "memq_heap.o"]
    common = ["gcc", "-O2", "-std=gnu11", "-fPIC", "-fvisibility=hidden", f"-I{preload}", *cflags]
    subprocess.run([*common, "-DMEMQ_HEAP_LOOKUP=boot_lookup", "-c", str(preload / "memq_heap.c"), "-o",
                    str(tmp_path / "memq_heap.o")], check=True)
    subprocess.run([*common, "-c", str(tmp_path / "boot_lookup.c"), "-o", str(tmp_path / "boot_lookup.o")], check=True)
    variant = tmp_path / "libmemq_boot.so"
    subprocess.run(["gcc", "-shared", "-Wl,-z,defs", "-Wl,--no-as-needed", "-Wl,-z,nodelete", "-o", str(variant),
                    *objects,
                    str(tmp_path / "memq_heap.o"), str(tmp_path / "boot_lookup.o"), *libs, "-lpthread"], check=True)
    # memq record sets up the session and the threshold; the workload alone gets the variant instead
    log = tmp_path / "edges.jsonl"
    rec = record(tmp_path / "trace", ["env", f"LD_PRELOAD={variant}", str(fake_gpu.heap_work), "edges",
                                      str(EDGE_MIN), str(log)], api="libc", extra=("--host-min-size", str(EDGE_MIN)))
    assert rec.stderr.count("boot lookup ok") >= 10 and "FAILED" not in rec.stderr
    assert "boot realloc ok" in rec.stderr
    rows = read_worklog(log)
    tid = next(r["tid"] for r in rows if "op" in r)
    assert all(r["ok"] for r in rows if "check" in r)
    events = host_events(rec.dir)
    big, small = expected(rows, tid, EDGE_MIN)
    assert recorded(events, tid) == big and small_totals(events, tid) == small


def test_settings_reach_the_library_under_one_name() -> None:
    """The environment variable memq record sets is the one the library reads."""
    from ctf2perfetto.capture import preload

    header = (REPO / "preload" / "memq_heap.h").read_text()
    assert re.search(r'#define MEMQ_ENV_HOST_MIN_SIZE "(\w+)"', header).group(1) == preload.HOST_MIN_SIZE_ENV


@pytest.mark.parametrize("value, shown", [("1.5k", "'1.5k'"), ("-1", "'-1'"), ("lots", "'lots'"), ("", "''"),
                                          ("300000G", "larger than any heap block")])
def test_host_min_size_nonsense_is_one_line(tmp_path, value, shown) -> None:
    proc = subprocess.run([*MEMQ, "record", "-o", str(tmp_path / "t"), "--host-min-size", value, "--", "/bin/true"],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert "--host-min-size" in proc.stderr and shown in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "t").exists()


def test_min_size_suffixes_and_host_source_lttng(fake_gpu, tmp_path) -> None:
    """`--host-min-size 8k` is 8192 bytes; `--host-source lttng` records LTTng's raw events and no memq host
    event (one heap wrapper at a time)."""
    log = tmp_path / "edges.jsonl"
    rec = record(tmp_path / "k", [str(fake_gpu.heap_work), "edges", str(EDGE_MIN), str(log)], api="libc",
                 extra=("--host-min-size", "8k"))
    assert rec.meta["enabled"]["host"] == {"source": "memq", "min_size": 8192}
    assert all(e["size"] >= 8192 for e in host_events(rec.dir) if e["event"] != "memq:host_small")
    rec = record(tmp_path / "lttng", [str(fake_gpu.heap_work), "edges", str(EDGE_MIN), str(log)], api="libc",
                 extra=("--host-source", "lttng"))
    assert rec.meta["enabled"]["host"] == {"source": "lttng"}
    assert any("liblttng-ust-libc-wrapper" in p for p in rec.meta["preload"])
    assert not any("libmemq_preload" in p for p in rec.meta["preload"])
    tid = next(r["tid"] for r in read_worklog(log) if "op" in r)
    raw = scan_events(rec.dir, ("lttng_ust_libc:malloc", "lttng_ust_libc:posix_memalign"))
    assert sum(e["vtid"] == tid for e in raw) > 10
    assert host_events(rec.dir) == []


def test_gpu_apis_alone_leave_the_heap_unrecorded(fake_gpu, tmp_path) -> None:
    """`--api hip`: the preload library is loaded for HIP, its heap wrappers only forward."""
    log = tmp_path / "edges.jsonl"
    rec = record(tmp_path / "trace", [str(fake_gpu.heap_work), "edges", str(EDGE_MIN), str(log)], api="hip")
    assert rec.meta["enabled"]["host"] is None
    assert all(r["ok"] for r in read_worklog(log) if "check" in r)
    assert host_events(rec.dir) == []
    assert "MEMQ_HOST_MIN_SIZE" not in json.dumps(rec.meta)
    assert sys.executable  # (the recording ran the workload with the library preloaded)


def _figures(trace_dir: Path, tmp_path: Path, pid: int) -> dict:
    """The duplicated and redundant figures of process `pid` (a session records every traced process of
    the user that runs meanwhile), without ids or times, which differ from run to run."""
    from ctf2perfetto import analyses

    out = tmp_path / f"{trace_dir.name}.pftrace"
    proc = subprocess.run([*MEMQ, "convert", str(trace_dir), "-o", str(out)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    with analyses.load(out) as engine:
        dup = analyses.duplicated(engine)
        red = analyses.redundant(engine)
        pieces = analyses.mirrors(engine)
    dup = dup[dup["grouping"].isin(["direction", "untracked_source"]) & (dup["pid"] == pid)]
    red = red[red["pid"] == pid]
    pieces = pieces[pieces["pid"] == pid]
    return {"duplicated": sorted(map(tuple, dup[["grouping", "key", "peak_bytes"]].astype(str).values.tolist())),
            "redundant": sorted(map(tuple, red[["class", "count", "bytes"]].astype(str).values.tolist())),
            "mirrors": pieces.groupby(["call_id", "direction"])["bytes"].agg(["count", "sum"]).values.tolist()}


@pytest.mark.parametrize("runtime", ["hip", "cuda"])
def test_duplicated_and_redundant_do_not_depend_on_the_threshold(fake_gpu, tmp_path, runtime) -> None:
    """The fake-GPU workloads give the same duplicated and redundant figures with every heap block recorded
    (--host-min-size 0) as with the default threshold: copies resolve to device and pinned memory and to
    host blocks above the threshold, and the small blocks' totals do not move any figure."""
    figures = {}
    for name, extra in (("every", ("--host-min-size", "0")), ("default", ())):
        log = tmp_path / f"{name}.jsonl"
        rec = record(tmp_path / name, [str(fake_gpu.workload), runtime, str(log)], extra=extra)
        assert rec.meta["discarded_events"] == 0
        figures[name] = _figures(rec.dir, tmp_path, read_worklog(log)[0]["pid"])
    assert figures["every"] == figures["default"]
    assert any(int(float(bytes_)) > 0 for _, _, bytes_ in figures["default"]["redundant"])
    assert any(int(float(peak)) > 0 for _, _, peak in figures["default"]["duplicated"])
    assert len(figures["default"]["mirrors"]) >= 10


def test_summary_and_leaks_count_the_small_blocks(fake_gpu, tmp_path) -> None:
    """memq summary's host allocations are the events plus the small blocks' totals, and memq leaks shows the
    small blocks still live as one host row without a size: checked against the raw events (every process the
    session recorded)."""
    from ctf2perfetto import analyses

    log = tmp_path / "threads.jsonl"
    rec = record(tmp_path / "trace", [str(fake_gpu.heap_work), "threads", "4", "2000", str(log)], api="libc")
    out = tmp_path / "t.pftrace"
    proc = subprocess.run([*MEMQ, "convert", str(rec.dir), "-o", str(out)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    events = host_events(rec.dir)
    allocs = [e for e in events if e["event"] == "memq:host_alloc"]
    freed = {(e["vpid"], e["ptr"]) for e in events if e["event"] == "memq:host_free"}
    small = [e for e in events if e["event"] == "memq:host_small"]
    live = {}
    for e in events:  # blocks at or above the threshold live at the end, by (pid, ptr)
        if e["event"] == "memq:host_alloc":
            live[(e["vpid"], e["ptr"])] = e["size"]
        elif e["event"] == "memq:host_free":
            live.pop((e["vpid"], e["ptr"]), None)
    small_live = sum(e["alloc_count"] - e["free_count"] for e in small)
    small_live_bytes = sum(e["alloc_bytes"] - e["free_bytes"] for e in small)
    assert freed and small_live > 0
    with analyses.load(out) as engine:
        host = analyses.summary(engine)["allocations"].set_index("kind").loc["host"]
        leaks = analyses.leaks(engine)
    assert int(host["count"]) == len(allocs) + sum(e["alloc_count"] for e in small)
    assert int(host["bytes"]) == sum(e["size"] for e in allocs) + sum(e["alloc_bytes"] for e in small)
    assert int(host["leaked"]) == len(live) + small_live
    assert int(host["leaked_bytes"]) == sum(live.values()) + small_live_bytes
    totals = leaks[leaks["size"].isna()]
    assert totals[["kind", "count", "bytes"]].values.tolist() == [["host", small_live, small_live_bytes]]
    assert int(leaks.loc[leaks["size"].notna(), "count"].sum()) == len(live)
    assert "below the recording's threshold (4,096 bytes)" in leaks.attrs["note"]
