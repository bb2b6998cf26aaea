"""The memory model on hand-written event logs, with the expected figures worked out here."""
from __future__ import annotations

import numpy as np

from ctf2perfetto.events import EventBatch, EventKind as K, MemKind as M
from ctf2perfetto.convert.model import (CNT_DEVICE, CNT_HOST, CNT_MANAGED, CNT_PINNED, CNT_REGISTERED, MemoryModel,
                                counter_key)

PID = 100


def heap(ts, kind, ptr=0, size=0, src=0, pid=PID, **kw):
    return dict(ts=ts, kind=kind, api=kw.pop("api", kind.name.lower()), pid=pid, tid=pid, ptr=ptr, size=size, src=src,
                **kw)


def gpu(ts, kind, api, ptr=0, size=0, begin=None, pid=PID, **kw):
    return dict(ts=ts, begin=ts - 5 if begin is None else begin, kind=kind, api=api, pid=pid, tid=pid + 1, ptr=ptr,
                size=size, **kw)


def run(rows, splits=()):
    """Model the rows (optionally cut into batches at `splits`); row-aligned results joined back."""
    names: list[str] = []
    batch = EventBatch.from_rows(rows, names)
    model = MemoryModel()
    bounds = [0, *splits, len(rows)]
    parts = []
    for lo, hi in zip(bounds, bounds[1:]):
        part = EventBatch({k: v[lo:hi] for k, v in batch.columns.items()}, names)
        mb = model.process(part)
        model.set_tags(np.arange(lo, hi, dtype=np.int64) + 1000)  # tag = 1000 + global row
        parts.append((lo, mb))
    out = {
        "alloc_id": np.concatenate([mb.alloc_id for _, mb in parts]).tolist(),
        "freed": np.concatenate([mb.freed_alloc_id for _, mb in parts]).tolist(),
        "replaced": np.concatenate([mb.replaced_alloc_id for _, mb in parts]).tolist(),
        "unmatched": np.concatenate([mb.unmatched for _, mb in parts]).tolist(),
        "samples": [(int(lo + r), int(t), int(k), int(v)) for lo, mb in parts
                    for r, t, k, v in zip(mb.sample_row, mb.sample_ts, mb.sample_key, mb.sample_value)],
        "copies": {},
    }
    for lo, mb in parts:
        ep = mb.endpoints
        for i, row in enumerate(ep["row"].tolist()):
            sides = {}
            for side in ("src", "dst"):
                arow = int(ep[f"{side}_alloc_row"][i])
                origin = lo + arow if arow >= 0 else int(ep[f"{side}_alloc_tag"][i]) - 1000 \
                    if ep[f"{side}_alloc_id"][i] else None
                sides[side] = (int(ep[f"{side}_alloc_id"][i]), int(ep[f"{side}_mem"][i]), origin)
            out["copies"][lo + row] = sides
    return out, model


def host(pid=PID):
    return counter_key(CNT_HOST, pid)


def test_realloc_moves_and_in_place_end_the_old_allocation():
    rows = [
        heap(10, K.MALLOC, 0x1000, 100),  # id 1
        heap(20, K.REALLOC, 0x2000, 300, src=0x1000),  # moves: ends 1, starts 2
        heap(30, K.REALLOC, 0x2000, 50, src=0x2000),  # in place: ends 2, starts 3
        heap(40, K.REALLOC, 0x3000, 8, src=0),  # realloc(NULL, 8) = malloc: id 4
        heap(50, K.REALLOC, 0, 0, src=0x3000),  # realloc(p, 0) frees 4
        heap(60, K.REALLOC, 0, 64, src=0x2000),  # failed (NULL, size > 0): 3 stays live
        heap(70, K.FREE, 0x2000),  # frees 3
    ]
    out, model = run(rows)
    assert out["alloc_id"] == [1, 2, 3, 4, 0, 0, 0]
    assert out["freed"] == [0, 1, 2, 0, 4, 0, 3]
    assert out["unmatched"] == [False] * 7
    # live bytes: 100, 300, 50, 58, 50, (unchanged: no sample), 0
    assert out["samples"] == [(0, 10, host(), 100), (1, 20, host(), 300), (2, 30, host(), 50), (3, 40, host(), 58),
                              (4, 50, host(), 50), (6, 70, host(), 0)]
    assert model.totals.allocations == 4 and model.totals.frees == 4 and model.totals.unmatched_frees == 0


def test_free_null_unknown_and_double_free():
    rows = [
        heap(10, K.MALLOC, 0x1000, 10),
        heap(20, K.FREE, 0),  # free(NULL): nothing, not unmatched
        heap(30, K.FREE, 0x9999),  # unknown pointer: unmatched, nothing changes
        heap(40, K.FREE, 0x1000),
        heap(50, K.FREE, 0x1000),  # double free: unmatched
        heap(60, K.REALLOC, 0x5000, 16, src=0x7777),  # realloc of an unknown pointer: unmatched, still allocates
    ]
    out, model = run(rows)
    assert out["unmatched"] == [False, False, True, False, True, True]
    assert out["freed"] == [0, 0, 0, 1, 0, 0]
    assert out["alloc_id"] == [1, 0, 0, 0, 0, 2]
    assert out["samples"] == [(0, 10, host(), 10), (3, 40, host(), 0), (5, 60, host(), 16)]
    assert model.totals.unmatched_frees == 3


def test_failed_calls_allocate_nothing():
    rows = [
        heap(10, K.MALLOC, 0, 1 << 40),  # NULL
        heap(20, K.POSIX_MEMALIGN, 0x1000, 64, aux=4096, result=12),  # ENOMEM, ptr garbage
        heap(30, K.POSIX_MEMALIGN, 0x2000, 64, aux=4096, result=0),
        gpu(40, K.GPU_ALLOC, "hipMalloc", 0x7f0000, 4096, mem=M.DEVICE, result=2),  # hipErrorOutOfMemory
        gpu(50, K.GPU_FREE, "hipFree", 0x2000, mem=M.DEVICE, result=1),  # failed free frees nothing
        heap(60, K.FREE, 0x1000),  # the failed posix_memalign's pointer was never allocated
    ]
    out, _ = run(rows)
    assert out["alloc_id"] == [0, 0, 1, 0, 0, 0]
    assert out["freed"] == [0] * 6
    assert out["unmatched"] == [False] * 5 + [True]
    assert out["samples"] == [(2, 30, host(), 64)]


def test_memory_kinds_free_only_their_own_class():
    dev0, dev1 = counter_key(CNT_DEVICE, 0), counter_key(CNT_DEVICE, 1)
    rows = [
        heap(10, K.MALLOC, 0x1000, 4096),  # host 1
        gpu(20, K.GPU_ALLOC, "hipHostMalloc", 0x1000, 512, mem=M.PINNED),  # same address, pinned: 2
        gpu(30, K.GPU_REGISTER, "hipHostRegister", 0x1000, 4096),  # registered: 3
        gpu(40, K.GPU_ALLOC, "hipMalloc", 0x8000, 1000, mem=M.DEVICE, device=1),  # device 1: 4
        gpu(50, K.GPU_ALLOC, "hipMallocManaged", 0x9000, 300, mem=M.MANAGED),  # managed: 5
        gpu(60, K.GPU_ALLOC, "cudaMalloc", 0x8000, 7, mem=M.DEVICE, device=1, pid=PID + 1),  # other pid: 6
        gpu(70, K.GPU_FREE, "hipFree", 0x1000, mem=M.PINNED),  # hipFree of pinned memory: no match
        gpu(80, K.GPU_FREE, "hipHostFree", 0x1000, mem=M.PINNED),  # ends 2
        gpu(90, K.GPU_UNREGISTER, "hipHostUnregister", 0x1000),  # ends 3
        gpu(100, K.GPU_FREE, "hipFree", 0x9000, mem=M.MANAGED),  # ends 5
        gpu(110, K.GPU_FREE, "hipFree", 0x8000, mem=M.DEVICE, begin=104),  # ends 4, from its start (104)
        heap(120, K.FREE, 0x1000),  # ends 1
    ]
    out, model = run(rows)
    assert out["alloc_id"] == [1, 2, 3, 4, 5, 6, 0, 0, 0, 0, 0, 0]
    assert out["freed"] == [0, 0, 0, 0, 0, 0, 0, 2, 3, 5, 4, 1]
    assert out["unmatched"] == [False] * 6 + [True] + [False] * 5
    assert out["samples"] == [
        (0, 10, host(), 4096), (1, 20, counter_key(CNT_PINNED, PID), 512),
        (2, 30, counter_key(CNT_REGISTERED, PID), 4096), (3, 40, dev1, 1000),
        (4, 50, counter_key(CNT_MANAGED, PID), 300), (5, 60, dev1, 1007),  # device counter: all processes
        (7, 75, counter_key(CNT_PINNED, PID), 0), (8, 85, counter_key(CNT_REGISTERED, PID), 0),
        (9, 95, counter_key(CNT_MANAGED, PID), 0), (10, 104, dev1, 7), (11, 120, host(), 0)]
    assert dev0 not in model.totals.counters
    assert model.totals.counters[dev1] == 7


def test_address_reuse_and_lost_free():
    rows = [
        heap(10, K.MALLOC, 0x1000, 10),  # 1
        heap(20, K.FREE, 0x1000),
        heap(30, K.MALLOC, 0x1000, 20),  # 2, same address
        heap(40, K.MALLOC, 0x1000, 30),  # 3 over live 2: the free of 2 was not traced -> 2 ends here
        heap(50, K.FREE, 0x1000),  # ends 3
        heap(60, K.MALLOC, 0x1000, 5, pid=PID + 1),  # another process: its own address space
    ]
    out, model = run(rows)
    assert out["alloc_id"] == [1, 0, 2, 3, 0, 4]
    assert out["freed"] == [0, 1, 0, 0, 3, 0]
    assert out["replaced"] == [0, 0, 0, 2, 0, 0]
    assert out["samples"] == [(0, 10, host(), 10), (1, 20, host(), 0), (2, 30, host(), 20), (3, 40, host(), 30),
                              (4, 50, host(), 0), (5, 60, host(PID + 1), 5)]
    assert model.totals.replaced == 1


COPY_LOG = [
    heap(10, K.MALLOC, 0x1000, 256),  # 1: host [0x1000, 0x1100)
    gpu(20, K.GPU_ALLOC, "hipMalloc", 0x70000, 1 << 20, mem=M.DEVICE),  # 2: device
    gpu(30, K.GPU_ALLOC, "hipHostMalloc", 0x50000, 4096, mem=M.PINNED),  # 3: pinned
    # interior pointers on both sides, HtoD
    gpu(100, K.GPU_COPY, "hipMemcpy", 0x70010, 64, begin=90, src=0x1080, copy_kind=1),
    # src one past the end of the host block: untracked; dst in pinned
    gpu(110, K.GPU_COPY, "hipMemcpy", 0x50000, 8, begin=105, src=0x1100, copy_kind=4),
    gpu(120, K.GPU_SET, "hipMemset", 0x70000, 16, begin=115, aux=0),
    heap(130, K.FREE, 0x1000),  # host block ends at 130
    # starts at 125 (before the free's start at 130): the host block was live at the copy's start
    gpu(140, K.GPU_COPY, "hipMemcpyAsync", 0x70000, 8, begin=125, src=0x1000, copy_kind=1),
    # starts after the free: untracked
    gpu(150, K.GPU_COPY, "hipMemcpy", 0x70000, 8, begin=145, src=0x1000, copy_kind=1),
    heap(160, K.MALLOC, 0x1000, 64),  # 4: reuses the address
    gpu(170, K.GPU_COPY, "hipMemcpy", 0x1010, 8, begin=165, src=0x70000, copy_kind=2),  # DtoH into block 4
    # a block allocated during the copy (ends at 178 > copy start 175) is not its source
    heap(178, K.MALLOC, 0x3000, 64),  # 5
    gpu(180, K.GPU_COPY, "hipMemcpy", 0x70000, 8, begin=175, src=0x3000, copy_kind=1),
    gpu(190, K.GPU_COPY, "hipMemcpy", 0x70000, 8, begin=185, src=0x3000, copy_kind=1, result=1),  # failed: none
]


COPY_LOG_SHIFTED = [dict(r, ts=r["ts"] + 10_000, **({"begin": r["begin"] + 10_000} if "begin" in r else {}))
                    for r in COPY_LOG]


def test_copy_endpoints_are_the_allocations_live_at_the_call_start():
    out, _ = run(COPY_LOG)
    H, D, P = int(M.HOST), int(M.DEVICE), int(M.PINNED)
    assert out["copies"] == {
        3: {"src": (1, H, 0), "dst": (2, D, 1)},
        4: {"src": (0, 0, None), "dst": (3, P, 2)},
        5: {"src": (0, 0, None), "dst": (2, D, 1)},  # memset: destination only
        7: {"src": (1, H, 0), "dst": (2, D, 1)},
        8: {"src": (0, 0, None), "dst": (2, D, 1)},
        10: {"src": (2, D, 1), "dst": (4, H, 9)},
        12: {"src": (0, 0, None), "dst": (2, D, 1)},
    }


def test_batch_boundaries_give_the_one_batch_result():
    """State carried across batches: every cut of the logs gives the same figures and endpoints."""
    logs = [COPY_LOG, [heap(10 * i, K.FREE if i % 3 == 2 else K.MALLOC, 0x1000 * (i // 3 % 2 + 1), i + 1)
                       for i in range(12)]]
    for rows in logs:
        whole, whole_model = run(rows)
        for cut in range(1, len(rows)):
            for splits in ((cut,), (1, cut) if cut > 1 else (cut,)):
                part, part_model = run(rows, splits)
                assert part == whole, splits
                assert part_model.totals == whole_model.totals


def test_live_set_compaction_gives_the_same_result(monkeypatch):
    """A large live set is only touched where a batch uses it, and compacts its delta into its base as it
    grows: both forced here on a small log (lookups every batch, a compaction every few changes)."""
    rng = np.random.default_rng(11)
    rows = []
    for i in range(600):
        addr = int(rng.integers(1, 60)) * 64
        rows.append(heap(i, K.FREE if rng.random() < 0.4 else K.MALLOC, addr, int(rng.integers(1, 99)), pid=PID + i % 2))
    rows += COPY_LOG_SHIFTED
    whole, whole_model = run(rows)
    monkeypatch.setattr("ctf2perfetto.convert.liveset._COMPACT_MIN", 3)
    monkeypatch.setattr("ctf2perfetto.convert.liveset._MERGE_ALL_FACTOR", 0)  # always look the touched keys up
    for splits in ((50, 51, 300), tuple(range(10, len(rows), 37))):
        part, part_model = run(rows, splits)
        assert part == whole and part_model.totals == whole_model.totals


def test_space_address_order_and_lookup_match_plain_python():
    """The live set's order (pid, class, address, then input order) and its key lookup, against sorted() and
    a set, with processes close together (ranked by a count) and far apart (ranked by a sort)."""
    from ctf2perfetto.convert.liveset import dense_ranks, lookup, sort_by_space_addr

    rng = np.random.default_rng(5)
    for pids in ((100, 101, 107), (100, 100 + (1 << 20)), (42,)):
        n = 400
        pid = rng.choice(np.array(pids, np.int64), n)
        cls = rng.integers(0, 3, n).astype(np.int64)
        addr = (rng.integers(1, 40, n) * 16).astype(np.uint64)  # repeated keys: input order must hold among them
        values, rank = dense_ranks(pid * 8 + cls)
        distinct = sorted(set((pid * 8 + cls).tolist()))
        assert values.tolist() == distinct and rank.tolist() == [distinct.index(k) for k in (pid * 8 + cls).tolist()]
        order = sort_by_space_addr(pid, cls, addr).tolist()
        assert order == sorted(range(n), key=lambda i: (int(pid[i]), int(cls[i]), int(addr[i]), i))
        space, s_addr = (pid * 8 + cls)[order], addr[order]
        q_pid = rng.choice(np.array(pids, np.int64), 60)
        q_space, q_addr = q_pid * 8 + rng.integers(0, 3, 60), (rng.integers(1, 50, 60) * 16).astype(np.uint64)
        wanted = set(zip(q_space.tolist(), q_addr.tolist()))
        found = lookup(space, s_addr, q_space, q_addr, sorted(set(q_space.tolist()))).tolist()
        keys = list(zip(space.tolist(), s_addr.tolist()))  # a live set holds a key once: the first of a run
        assert found == [i for i in range(n) if keys[i] in wanted and (i == 0 or keys[i - 1] != keys[i])]


def test_counter_samples_are_the_same_counted_densely_or_by_a_sort(monkeypatch):
    """Many counters in one batch (a job's processes) number their (counter, row) pairs by a sort instead of
    a dense array: the same samples either way, on a log with a host counter per process and GPU counters."""
    rng = np.random.default_rng(3)
    rows = [heap(i, K.FREE if rng.random() < 0.3 else K.MALLOC, int(rng.integers(1, 30)) * 64,
                 int(rng.integers(1, 99)), pid=PID + i % 5) for i in range(300)]
    rows += COPY_LOG_SHIFTED
    dense, dense_model = run(rows, (120,))
    assert len({k for _, _, k, _ in dense["samples"]}) > 5
    monkeypatch.setattr("ctf2perfetto.convert.model._DENSE_PAIRS", 0)
    by_sort, sort_model = run(rows, (120,))
    assert by_sort == dense and sort_model.totals == dense_model.totals


def test_allocation_ids_are_unique_and_positive_over_many_batches():
    rng = np.random.default_rng(7)
    rows = []
    live: list[int] = []
    for i in range(3000):
        if live and rng.random() < 0.45:
            rows.append(heap(i, K.FREE, live.pop(int(rng.integers(len(live))))))
        else:
            addr = int(rng.integers(1, 200)) * 64
            rows.append(heap(i, K.MALLOC, addr, int(rng.integers(1, 64))))
            if addr not in live:
                live.append(addr)
    whole, _ = run(rows)
    split, model = run(rows, (700, 701, 1999))
    assert split == whole
    ids = [a for a in whole["alloc_id"] if a]
    assert len(ids) == len(set(ids)) and min(ids) == 1
    # Independent replay: live bytes by address, the last allocation at an address wins.
    live_size: dict[int, int] = {}
    expected = []
    for i, r in enumerate(rows):
        if r["kind"] == K.MALLOC:
            live_size[r["ptr"]] = r["size"]
            expected.append((i, sum(live_size.values())))
        elif r["ptr"] in live_size:
            del live_size[r["ptr"]]
            expected.append((i, sum(live_size.values())))
    assert [(r, v) for r, _, _, v in whole["samples"]] == expected
    assert model.totals.counters[host()] == sum(live_size.values())


def test_memq_host_blocks_and_small_totals() -> None:
    """memq's heap wrappers: HOST_ALLOC / HOST_FREE are allocations of their usable size (a realloc is a free
    and an allocation), HOST_SMALL moves the host counter by bytes allocated minus freed at its time, and
    adds to the small totals, never to the allocations."""
    rows = [
        heap(10, K.HOST_ALLOC, ptr=0x1000, size=8200, api="malloc", aux2=8192),
        heap(20, K.HOST_SMALL, size=500, aux=5, flags=200, aux2=2),
        heap(30, K.HOST_FREE, ptr=0x1000, size=8200, api="realloc"),
        heap(31, K.HOST_ALLOC, ptr=0x1000, size=16392, api="realloc", aux2=16384),
        heap(40, K.HOST_SMALL, size=0, aux=0, flags=300, aux2=3),  # frees only: the counter goes down
        heap(50, K.HOST_SMALL, size=64, aux=1, flags=64, aux2=1),  # no net change: no sample
        heap(60, K.HOST_FREE, ptr=0x1000, size=16392, api="free"),
        heap(70, K.HOST_FREE, ptr=0x9000, size=9000, api="free"),  # a block from before the trace
    ]
    out, model = run(rows, splits=(3, 5))
    assert out["alloc_id"] == [1, 0, 0, 2, 0, 0, 0, 0]
    assert out["freed"] == [0, 0, 1, 0, 0, 0, 2, 0]
    assert out["unmatched"] == [False] * 7 + [True]
    assert [(r, t, v) for r, t, k, v in out["samples"] if k == host()] == [
        (0, 10, 8200), (1, 20, 8500), (2, 30, 300), (3, 31, 16692), (4, 40, 16392), (6, 60, 0)]
    t = model.totals
    assert (t.allocations, t.frees, t.unmatched_frees) == (2, 2, 1)
    assert (t.small_allocations, t.small_allocated_bytes, t.small_frees, t.small_freed_bytes) == (6, 564, 6, 564)
