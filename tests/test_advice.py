"""The advice rules (sql/memq/advice/*.sql, ctf2perfetto.analysis.advice): hand-worked cases, and generated
logs checked against the independent computation in tests/oracle.py.

Every expected number in the hand-worked cases is worked out from the events the test writes (times in ns,
sizes in bytes).
"""
from __future__ import annotations

import ctypes
import random
from pathlib import Path

import pytest

import oracle
from ctf2perfetto import analyses
from ctf2perfetto.analysis import advice
from ctf2perfetto.convert.write import write_trace
from ctf2perfetto.events import EventBatch, MemKind as M, TraceInfo
from support.memq_hash import FULL, SAMPLED, HashLib
from support.rows import Rows, in_time_order

MiB = 1 << 20
HOST, HOST2, DEV, PIN, UNTRACKED = 0x10000000, 0x30000000, 0x900000000, 0x70000000, 0x50000000
H2D, D2H = 1, 2
SITE_A, SITE_B = 0x401000, 0x402000


def unsigned(value: int) -> int:
    return value % (1 << 64)


def write(rows: list[dict], path: Path) -> Path:
    write_trace([EventBatch.from_rows(in_time_order(rows))], TraceInfo(devices=[]), path)
    return path


def at(row: dict, **extra) -> dict:
    return dict(row, **extra)


def records(engine, name: str) -> list[dict]:
    return advice.rule_rows(engine, name).records()


# -- the fingerprint of zeros is memq_hash.c's ---------------------------------------------
def test_zero_fingerprint_is_what_the_recorder_takes(tmp_path):
    lib = HashLib(tmp_path / "hash")
    for n in (1, 100, 1024, 1025, 4096, 3 * MiB + 7):
        zeros = ctypes.create_string_buffer(n)
        for mode, code in (("sampled", SAMPLED), ("full", FULL)):
            assert unsigned(advice.zero_fingerprint(mode, n)) == lib.hash(ctypes.addressof(zeros), n, mode=code)
        one = ctypes.create_string_buffer(n)
        one[n // 2] = b"x"  # a full fingerprint sees any non-zero byte
        assert unsigned(advice.zero_fingerprint("full", n)) != lib.hash(ctypes.addressof(one), n, mode=FULL)
    assert advice.zero_fingerprint("sampled", 0) is None


# -- one story, every rule -----------------------------------------------------------------
def story() -> list[dict]:
    """A loop of 4 steps (1000 ns apart, from 1000):
    * site A: hipMemcpy (blocking) of the 1 MiB pageable buffer HOST to DEV, 100 ns: a pinning candidate and a
      synchronous loop site;
    * hipMemcpyAsync of 2 MiB from the 8 MiB pinned buffer PIN, 50 ns: the pinned rate (2 MiB / 50 ns), and PIN
      is oversized (6 MiB unused);
    * site B: hipMemcpyAsync of 0 bytes, 10 ns: a zero-byte copy;
    * hipMemcpyAsync of 4096 zero bytes from HOST2 (fingerprinted, sampled), 20 ns, in steps 0 and 1 only;
    then three hipHostMalloc (500 ns) / hipHostFree (300 ns) cycles of a 64 KiB pinned buffer: churn.
    """
    log = Rows(77)
    zero = advice.zero_fingerprint("sampled", 4096)
    rows = [log.malloc(100, HOST, 4 * MiB), log.malloc(110, HOST2, 4 * MiB), log.gpu_alloc(200, DEV, 16 * MiB),
            log.gpu_alloc(300, PIN, 8 * MiB, M.PINNED)]
    t = 1000
    for step in range(4):
        rows.append(at(log.copy(t, t + 100, DEV, HOST, 1 * MiB, H2D), api="hipMemcpy", ip=SITE_A))
        rows.append(log.copy(t + 200, t + 250, DEV + 2 * MiB, PIN, 2 * MiB, H2D))
        rows.append(at(log.copy(t + 400, t + 410, DEV, HOST, 0, H2D), ip=SITE_B))
        if step < 2:
            rows.append(log.fingerprinted(log.copy(t + 500, t + 520, DEV + 8 * MiB, HOST2, 4096, H2D), step + 1,
                                          src=unsigned(zero)))
        t += 1000
    for _ in range(3):
        rows.append(log.gpu_alloc(t, PIN + 16 * MiB, 64 << 10, M.PINNED, dur=500))
        rows.append(log.gpu_free(t + 1000, PIN + 16 * MiB, 64 << 10, M.PINNED, dur=300))
        t += 2000
    return rows


def test_story_rules_by_hand(tmp_path):
    with analyses.load(write(story(), tmp_path / "story.pftrace")) as engine:
        pin, zeros = records(engine, "pinning")  # by gain: HOST, then HOST2 (its zeros go up twice)
        # 4 uploads of 1 MiB in 4 x 100 ns; pinned rate 2 MiB / 50 ns, so 4 MiB take 100 ns pinned
        assert (pin["count"], pin["bytes"], pin["dur_sum"]) == (4, 4 * MiB, 400)
        assert pin["pinned_gb_per_s"] == pytest.approx(2 * MiB / 50)
        assert (pin["est_pinned_dur"], pin["gain_dur"]) == (100, 300)
        assert (pin["addr"], pin["size"], pin["src_mem"], pin["ip"]) == (HOST, 4 * MiB, "host", SITE_A)
        assert (pin["first_ts"], pin["last_end_ts"]) == (1000, 4100)
        # 2 x 4096 bytes in 2 x 20 ns: 8192 bytes take 0.2 ns pinned, 0 as an integer
        assert (zeros["addr"], zeros["count"], zeros["bytes"], zeros["dur_sum"]) == (HOST2, 2, 8192, 40)
        assert (zeros["est_pinned_dur"], zeros["gain_dur"], zeros["ip"]) == (0, 40, None)

        [sync] = records(engine, "sync_loop")  # only site A blocks; the Async copies come from pinned memory
        assert (sync["api"], sync["direction"], sync["bytes_each"], sync["why"]) == ("hipMemcpy", "HtoD", MiB,
                                                                                       "blocking API")
        assert (sync["count"], sync["bytes"], sync["dur_sum"], sync["gain_dur"]) == (4, 4 * MiB, 400, 400)
        assert sync["period"] == 1000.0 and sync["ip"] == SITE_A

        [big] = records(engine, "pinned_oversize")  # copies reach 2 MiB of 8; the 64 KiB buffers are small
        assert (big["addr"], big["size"], big["used_bytes"], big["unused_bytes"], big["copies"]) == \
            (PIN, 8 * MiB, 2 * MiB, 6 * MiB, 4)

        [churn] = records(engine, "pinned_churn")  # 3 made, 1 live at a time: 2 avoidable of 3 x 800 ns
        assert (churn["size"], churn["allocs"], churn["frees"], churn["max_live"], churn["avoidable"]) == \
            (64 << 10, 3, 3, 1, 2)
        assert (churn["call_dur"], churn["gain_dur"]) == (2400, 1600)

        [zb] = records(engine, "zero_bytes")
        assert (zb["ip"], zb["api"], zb["direction"], zb["count"], zb["dur_sum"], zb["gain_dur"]) == \
            (SITE_B, "hipMemcpyAsync", "HtoD", 4, 40, 40)

        [zc] = records(engine, "zero_content")
        assert (zc["count"], zc["bytes"], zc["dur_sum"], zc["proof"], zc["dst_mem"]) == (2, 8192, 40, "sampled",
                                                                                            "device")
        assert (zc["first_ts"], zc["last_end_ts"]) == (1500, 2520)


def test_rules_hold_back(tmp_path):
    """What the rules must not advise: a pageable buffer uploaded once, two blocking copies (not a loop),
    a pinned buffer its copies fill, pinned buffers alive together, copies of data that is not zero, and
    zero copies whose fingerprint mode is `full` but of a different length."""
    log = Rows(5)
    rows = [log.malloc(100, HOST, 4 * MiB), log.gpu_alloc(200, DEV, 16 * MiB),
            log.gpu_alloc(300, PIN, 2 * MiB, M.PINNED), log.gpu_alloc(310, PIN + 4 * MiB, 2 * MiB, M.PINNED)]
    rows.append(at(log.copy(1000, 1100, DEV, HOST, MiB, H2D), api="hipMemcpy"))      # once from HOST
    rows.append(at(log.copy(2000, 2100, HOST, DEV, MiB, D2H), api="hipMemcpy"))      # twice blocking D2H ...
    rows.append(at(log.copy(3000, 3100, HOST, DEV, MiB, D2H), api="hipMemcpy"))      # ... not yet a loop
    rows.append(log.fingerprinted(log.copy(4000, 4100, DEV, PIN, 2 * MiB, H2D), 1, src=12345))
    rows.append(at(log.fingerprinted(log.copy(5000, 5100, DEV, PIN + 4 * MiB, 2 * MiB, H2D), 2,
                                     src=unsigned(advice.zero_fingerprint("full", MiB))), content_mode=2))
    rows += [log.gpu_free(6000, PIN, 2 * MiB, M.PINNED), log.gpu_free(6100, PIN + 4 * MiB, 2 * MiB, M.PINNED)]
    with analyses.load(write(rows, tmp_path / "quiet.pftrace")) as engine:
        for rule in advice.RULES:
            assert records(engine, rule.name) == [], rule.name


def test_full_mode_and_small_copies_are_full_proof(tmp_path):
    log = Rows(6)
    rows = [log.malloc(100, HOST, 4 * MiB), log.gpu_alloc(200, DEV, 16 * MiB)]
    rows.append(at(log.fingerprinted(log.copy(1000, 1100, DEV, HOST, 2 * MiB, H2D), 1,
                                     src=unsigned(advice.zero_fingerprint("full", 2 * MiB))), content_mode=2))
    rows.append(log.fingerprinted(log.copy(2000, 2010, DEV + 4 * MiB, HOST, 1000, H2D), 2,
                                  src=unsigned(advice.zero_fingerprint("sampled", 1000))))
    with analyses.load(write(rows, tmp_path / "full.pftrace")) as engine:
        # one site, one destination: both copies hashed every byte (full mode; sampled at <= 1,024 bytes)
        found = [(r["count"], r["bytes"], r["proof"]) for r in records(engine, "zero_content")]
        assert found == [(2, 2 * MiB + 1000, "full")]


# -- generated logs against the oracle ------------------------------------------------------
def generated(seed: int, pid: int) -> list[dict]:
    """A random loop of one process: copies between host, pinned, device and untracked memory of sizes 0 to
    16 KiB from two call sites and two threads, blocking or not, some of zeros (fingerprints of zeros, of other
    data, or none), pinned staging buffers allocated and freed on the way."""
    rnd = random.Random(seed * 1000 + pid)
    log = Rows(pid)
    base = pid << 36
    host = [base + HOST + k * 8 * MiB for k in range(3)]
    pinned = [base + PIN + k * 16 * MiB for k in range(2)]
    dev = [base + DEV + k * 16 * MiB for k in range(3)]
    untracked = [base + UNTRACKED + k * MiB for k in range(2)]
    rows, t = [], 100
    for a in host:
        rows.append(log.malloc(t, a, 4 * MiB))
        t += 10
    for a in pinned:
        rows.append(log.gpu_alloc(t, a, rnd.choice((64 << 10, 2 * MiB)), M.PINNED))
        t += 100
    for a in dev:
        rows.append(log.gpu_alloc(t, a, 8 * MiB))
        t += 100
    staging: list[int] = []
    seq = 0
    for _ in range(rnd.randint(20, 60)):
        t += rnd.randint(10, 300)
        choice = rnd.random()
        if choice < 0.08:  # a pinned staging buffer, freed later
            addr = base + PIN + 64 * MiB + len(staging) * 4 * MiB
            size = rnd.choice((64 << 10, 2 * MiB))
            rows.append(log.gpu_alloc(t, addr, size, M.PINNED, dur=rnd.randint(50, 900)))
            staging.append((addr, size))
            t += 1000
            continue
        if choice < 0.14 and staging:
            addr, size = staging.pop(rnd.randrange(len(staging)))
            rows.append(log.gpu_free(t, addr, size, M.PINNED, dur=rnd.randint(50, 900)))
            t += 1000
            continue
        nbytes = rnd.choice((0, 512, 4096, 4096, 16384))  # small: the oracle works byte by byte
        direction = rnd.choice(("HtoD", "HtoD", "DtoH", "DtoD"))
        offset = rnd.choice((0, 4096))
        source = rnd.choice(("host", "pinned", "untracked"))
        hosts = {"host": host, "pinned": pinned, "untracked": untracked}[source]
        h = rnd.choice(hosts) + (0 if source == "untracked" else offset)
        if source == "untracked":
            nbytes = rnd.choice((0, 4096))
        d = rnd.choice(dev) + offset
        dst, src, kind = {"HtoD": (d, h, H2D), "DtoH": (h, d, D2H), "DtoD": (d, rnd.choice(dev), 3)}[direction]
        dur = rnd.randint(5, 400)
        row = log.copy(t, t + dur, dst, src, nbytes, kind, tid=rnd.choice((pid, pid + 1)))
        row.update(api=rnd.choice(("hipMemcpy", "hipMemcpyAsync")), ip=rnd.choice((0, SITE_A, SITE_B)))
        if direction == "HtoD" and rnd.random() < 0.6:
            seq += 1
            mode = rnd.choice(("sampled", "full"))
            hashed = rnd.choice((advice.zero_fingerprint(mode, nbytes) if nbytes else None, 99, None))
            if hashed is not None:
                row = dict(log.fingerprinted(row, seq, src=unsigned(hashed)), content_mode=1 if mode == "sampled" else 2)
        rows.append(row)
        if rnd.random() < 0.1:
            rows.append(log.memset(t + dur + 5, t + dur + 15, d, rnd.choice((0, 256))))
        t += dur
    return rows


def _fill_by_rule(engine):
    pid = {int(r["upid"]): int(r["pid"]) for r in engine.rows("SELECT upid, pid FROM process").records()
           if r["pid"] is not None}
    allocs = {int(r["alloc_id"]): (pid[int(r["upid"])], r["kind"], int(r["addr"]), int(r["ts"]))
              for r in engine.rows("INCLUDE PERFETTO MODULE memq.allocations; SELECT * FROM memq_allocation").records()}
    tids = {int(r["utid"]): int(r["tid"]) for r in engine.rows("SELECT utid, tid FROM thread").records()}
    return pid, allocs, tids


def _ip(value) -> int | None:
    return None if value is None else int(value) % (1 << 64)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_generated_logs_match_oracle(tmp_path, seed):
    rows = [r for p in (11, 12, 13, 14) for r in generated(seed, p)]
    path = write(rows, tmp_path / f"gen{seed}.pftrace")
    ref = oracle.build(in_time_order(rows))
    ordered = in_time_order(rows)
    seen = set()
    with analyses.load(path) as engine:
        pid, allocs, tids = _fill_by_rule(engine)

        got = {(pid[r["upid"]], _ip(r["ip"]), r["api"], r["direction"], allocs.get(r["dst_alloc_id"])):
               {k: r[k] for k in ("count", "bytes", "dur_sum", "gain_dur", "proof", "first_ts", "last_end_ts")}
               for r in records(engine, "zero_content")}
        assert got == oracle.advice_zero_content(ref, ordered, advice.zero_fingerprint)
        seen.add(bool(got))

        got = {}
        for r in records(engine, "pinning"):
            key = allocs[r["src_alloc_id"]] if r["src_alloc_id"] is not None else ("key", tuple(
                range(r["addr"], r["addr"] + r["size"])))
            got[(pid[r["upid"]], key)] = {k: r[k] for k in ("device", "count", "bytes", "dur_sum", "pinned_gb_per_s",
                                                            "est_pinned_dur", "gain_dur", "first_ts", "last_end_ts")}
        want = oracle.advice_pinning(ref, ordered)
        assert got.keys() == want.keys()
        for key, figures in want.items():
            assert got[key] == pytest.approx(figures), key
        seen.add(bool(got))

        got = {(pid[r["upid"]], tids[r["utid"]], _ip(r["ip"]), r["api"], r["direction"], r["bytes_each"]):
               {k: r[k] for k in ("count", "bytes", "dur_sum", "why", "period", "first_ts", "last_end_ts")}
               for r in records(engine, "sync_loop")}
        want = oracle.advice_sync_loop(ref, ordered)
        assert got.keys() == want.keys()
        for key, figures in want.items():
            assert got[key] == pytest.approx(figures), key
        seen.add(bool(got))

        # the per-copy tables (what the report's overlaps read): each finding's copies, as many and as long as its own
        for rule in ("sync_loop", "pinning"):
            per_site = {r["site"]: (r["n"], r["d"]) for r in engine.rows(
                f"""INCLUDE PERFETTO MODULE memq.advice.{rule}; SELECT s.site, COUNT(*) AS n, SUM(c.dur) AS d
                FROM memq_advice_{rule}_copy s JOIN memq_copy c USING (id) GROUP BY s.site""").records()}
            assert per_site == {r["first_call_id"]: (r["count"], r["dur_sum"]) for r in records(engine, rule)}, rule

        got = {allocs[r["alloc_id"]]: {k: r[k] for k in ("size", "used_bytes", "unused_bytes", "copies")}
               for r in records(engine, "pinned_oversize")}
        assert got == oracle.advice_pinned_oversize(ref, ordered)
        seen.add(bool(got))

        got = {(pid[r["upid"]], r["size"]): {k: r[k] for k in ("allocs", "frees", "max_live", "avoidable",
                                                               "call_dur", "gain_dur")}
               for r in records(engine, "pinned_churn")}
        assert got == oracle.advice_pinned_churn(ref, ordered)
        seen.add(bool(got))

        got = {(pid[r["upid"]], _ip(r["ip"]), r["api"], r["direction"]): {k: r[k] for k in ("count", "dur_sum",
                                                                                             "gain_dur")}
               for r in records(engine, "zero_bytes")}
        assert got == oracle.advice_zero_bytes(ref, ordered)
        seen.add(bool(got))
    assert seen == {True}, "each generated log has findings of the rules it checks"


def test_notebook_api(tmp_path):
    path = write(story(), tmp_path / "story.pftrace")
    found = analyses.advice(path)
    summary = found["advice"].set_index("rule")
    assert list(summary.index) == [r.name for r in advice.RULES]
    assert summary.loc["pinning", "findings"] == 2 and summary.loc["pinned_churn", "gain_dur"] == 1600
    assert set(found) == {"advice", *(r.name for r in advice.RULES)}  # every rule finds something in the story
    assert found["sync_loop"]["count"].tolist() == [4]
