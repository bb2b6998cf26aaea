"""Content fingerprints of copies, end to end and piece by piece.

Real `memq record` sessions of tests/fakes/content_work.c (the fake CUDA / HIP runtimes
move bytes for real; "kernels" write the fake device memory directly, untraced), read
back with bt2 and analysed by the SQL package:
* the goals: a staging loop with new data each step has no repeat; an identical re-upload
  is one repeat with evidence content; read-backs of new kernel results are not
  redundant; an unchanged read-back is one no-op copy; `--content off` keeps the old
  address-only verdicts;
* when after-fingerprints are taken: at the first completion point that covers an
  asynchronous copy (a successful stream / event query, an event wait, a device
  synchronisation), never at a query that answers "not ready", on a fake device that
  really finishes the work only then (FAKE_GPU_DEFER=1); nothing during stream capture;
* the fingerprint function itself (preload/memq_hash.c): rows concatenated, sampled
  blocks, full mode, safe reads of unmapped memory;
* the fakes: their copies, sets and queued work really move bytes.
"""
from __future__ import annotations

import ctypes
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from ctf2perfetto import analyses
from support.lttng import read_events, record
from support.memq_hash import FULL, SAMPLED, HashLib, block_offsets

MiB = 1 << 20
CONTENT_BITS = {"src": 1, "before": 2, "after": 4, "pending": 8}


@dataclass
class Run:
    """One recording of content_work: its trace, the workload's memq:* events and its pid."""

    dir: Path
    events: list[dict]
    pid: int


def run_workload(fake_gpu, tmp_path: Path, *args: str, content: str = "sampled", env: dict | None = None) -> Run:
    """Record `content_work ARGS` (CUDA and HIP)."""
    out = tmp_path / f"{args[0]}-{content}"
    rec = record(out, [str(fake_gpu.content_work), *args], api="hip,cuda", extra=("--content", content),
                 env={**os.environ, **(env or {})})
    assert rec.meta["enabled"]["content"] == content
    # The workload's own process: the one that wrote an exit report (LTTng sessions also record other
    # instrumented processes of the user that run meanwhile).
    pids = {r["pid"] for r in rec.meta["reach"]}
    assert len(pids) == 1, "one workload process"
    return Run(out, read_events(out, pids=pids, prefix="memq:"), pids.pop())


def totals(run: Run) -> dict[str, dict]:
    """The workload process's redundant totals per class (zeros for a class it has none of)."""
    df = analyses.redundant(run.dir)
    zero = {c: 0 for c in df.columns if c not in ("pid", "class", "applies")}
    return {cls: zero for cls in analyses.CLASSES} | {r["class"]: r for r in df[df["pid"] == run.pid].to_dict("records")}


def copies(run: Run):
    df = analyses.redundant_copies(run.dir)
    return df[df["pid"] == run.pid]


# -- the goals --------------------------------------------------------------------------------
def test_staging_loop_with_new_data_is_not_redundant(fake_gpu, tmp_path) -> None:
    run = run_workload(fake_gpu, tmp_path, "staging", "4", str(MiB))
    uploads = [e for e in run.events if e["event"] == "memq:copy"]
    assert len(uploads) == 4 and all(c["content"] & CONTENT_BITS["src"] for c in uploads)
    assert len({c["src_hash"] for c in uploads}) == 4, "every batch is new data"
    red = totals(run)
    assert (red["repeat"]["count"], red["round_trip"]["count"], red["redundant"]["count"]) == (0, 0, 0)
    # What the address rules alone say of the same loop: three repeats of 1 MiB.
    off = run_workload(fake_gpu, tmp_path, "staging", "4", str(MiB), content="off")
    assert all(e["content"] == 0 and e["content_mode"] == 0 for e in off.events if e["event"] == "memq:copy")
    assert not [e for e in off.events if e["event"] == "memq:copy_done"]
    red_off = totals(off)
    assert (red_off["repeat"]["count"], red_off["repeat"]["bytes"], red_off["repeat"]["address_count"]) == \
        (3, 3 * MiB, 3)


def test_identical_reupload_is_one_repeat_with_content_evidence(fake_gpu, tmp_path) -> None:
    run = run_workload(fake_gpu, tmp_path, "reupload", "2", str(MiB))
    red = totals(run)
    assert (red["repeat"]["count"], red["repeat"]["bytes"]) == (1, MiB)
    assert (red["repeat"]["content_count"], red["repeat"]["content_bytes"], red["repeat"]["address_count"]) == \
        (1, MiB, 0)
    assert copies(run)["evidence"].fillna("").tolist() == ["", "content"]


def test_readbacks_of_new_results_are_not_redundant(fake_gpu, tmp_path) -> None:
    run = run_workload(fake_gpu, tmp_path, "readback", "4", str(MiB))
    reads = {e["seq"]: e for e in run.events if e["event"] == "memq:copy"}
    done = {e["seq"]: e for e in run.events if e["event"] == "memq:copy_done"}
    # a pinned destination: hashed before the call, after it at the stream synchronisation
    assert all(c["content"] == CONTENT_BITS["before"] | CONTENT_BITS["pending"] for c in reads.values())
    assert sorted(done) == sorted(reads) and {d["api_label"] for d in done.values()} == {"cudaStreamSynchronize"}
    assert all(done[s]["dst_hash_after"] != reads[s]["dst_hash_before"] for s in reads)
    assert totals(run)["redundant"]["count"] == 0
    off = run_workload(fake_gpu, tmp_path, "readback", "4", str(MiB), content="off")
    assert totals(off)["repeat"]["count"] == 3, "the address rules alone: every read-back repeats"


def test_unchanged_readback_is_one_no_op_copy(fake_gpu, tmp_path) -> None:
    run = run_workload(fake_gpu, tmp_path, "unchanged", "2", str(MiB))
    red = totals(run)
    assert (red["no_op"]["count"], red["no_op"]["bytes"], red["no_op"]["content_count"]) == (1, MiB, 1)
    assert (red["repeat"]["count"], red["redundant"]["count"]) == (0, 1)
    assert copies(run)["class"].fillna("").tolist() == ["", "no_op"]


# -- when the after-fingerprint is taken ------------------------------------------------------
def test_async_copies_are_hashed_at_the_first_completion_point(fake_gpu, tmp_path) -> None:
    """On a fake device that finishes work only at completion points, every read-back of new data is
    hashed after it landed: hashing at the call (or at a 'not ready' query) would find the old
    content and make it a no-op copy."""
    run = run_workload(fake_gpu, tmp_path, "deferred", "1", "4096", env={"FAKE_GPU_DEFER": "1"})
    calls = [e for e in run.events if e["event"] in ("memq:copy", "memq:sync", "memq:copy_done")]
    names = [(e["event"].split(":")[1], e["api_label"], e.get("result")) for e in calls]
    assert names == [
        ("copy", "cudaMemcpyAsync", 0), ("sync", "cudaStreamQuery", 600), ("sync", "cudaStreamQuery", 0),
        ("copy_done", "cudaStreamQuery", None),
        ("copy", "cudaMemcpyAsync", 0), ("sync", "cudaEventQuery", 600), ("sync", "cudaEventSynchronize", 0),
        ("copy_done", "cudaEventSynchronize", None),
        ("copy", "cudaMemcpyAsync", 0), ("sync", "cudaDeviceSynchronize", 0),
        ("copy_done", "cudaDeviceSynchronize", None),
    ]
    reads = [e for e in calls if e["event"] == "memq:copy"]
    done = [e for e in calls if e["event"] == "memq:copy_done"]
    assert [d["seq"] for d in done] == [c["seq"] for c in reads]
    assert all(d["dst_hash_after"] != c["dst_hash_before"] for c, d in zip(reads, done))
    event_sync = next(e for e in calls if e["api_label"] == "cudaEventSynchronize")
    assert event_sync["stream"] == reads[1]["stream"], "an event wait names the stream the event was recorded on"
    assert totals(run)["redundant"]["count"] == 0


def test_hip_event_completes_a_read_back(fake_gpu, tmp_path) -> None:
    run = run_workload(fake_gpu, tmp_path, "hip", "1", "4096", env={"FAKE_GPU_DEFER": "1"})
    copy = next(e for e in run.events if e["event"] == "memq:copy")
    done = [e for e in run.events if e["event"] == "memq:copy_done"]
    assert [(d["api_label"], d["seq"]) for d in done] == [("hipEventSynchronize", copy["seq"])]
    assert done[0]["dst_hash_after"] != copy["dst_hash_before"]


def test_nothing_is_fingerprinted_during_stream_capture(fake_gpu, tmp_path) -> None:
    run = run_workload(fake_gpu, tmp_path, "capture", "1", "4096")
    captured, executed = [e for e in run.events if e["event"] == "memq:copy"]
    assert captured["content"] == 0 and captured["src_hash"] == 0
    assert executed["content"] == CONTENT_BITS["src"] and executed["src_hash"] != 0


def test_a_one_page_change_in_64_mib_is_caught_by_full(fake_gpu, tmp_path) -> None:
    # Offset 32 MiB + 8 KiB: in no block `sampled` reads.
    page = 32 * MiB + 8192
    assert all(b + 64 <= page or b >= page + 4096 for b in block_offsets(64 * MiB))
    args = ("page", "1", str(64 * MiB), str(page))
    assert totals(run_workload(fake_gpu, tmp_path, *args, content="full"))["repeat"]["count"] == 0
    red = totals(run_workload(fake_gpu, tmp_path, *args, content="sampled"))
    assert (red["repeat"]["count"], red["repeat"]["content_count"]) == (1, 1), \
        "sampled reads 1 KiB of the 64 MiB: this change is its documented miss"


def test_record_refuses_an_unknown_content_mode(fake_gpu, tmp_path) -> None:
    rec = record(tmp_path / "bad", [str(fake_gpu.content_work), "staging", "1", "64"], extra=("--content", "most"),
                 check=False)
    assert rec.returncode == 2 and rec.stderr.count("\n") == 1 and "--content" in rec.stderr


# -- the fingerprint function -----------------------------------------------------------------
@pytest.fixture(scope="module")
def hashes(tmp_path_factory) -> HashLib:
    return HashLib(tmp_path_factory.mktemp("hash"))


def _buffer(data: bytes):
    buf = ctypes.create_string_buffer(data, len(data))
    return buf, ctypes.addressof(buf)


def test_hash_covers_the_bytes_in_row_order(hashes) -> None:
    data = bytes((i * 7 + 3) % 251 for i in range(6000))
    buf, base = _buffer(data)
    for mode in (SAMPLED, FULL):
        whole = hashes.hash(base, 6000, mode=mode)
        # The same 6000 bytes as 3 rows of 2000 (contiguous), or as 2 slices of 3 rows of 1000.
        assert hashes.hash(base, 2000, height=3, mode=mode) == whole
        assert hashes.hash(base, 1000, height=3, depth=2, slice=3000, mode=mode) == whole
        # Rows 100 apart read other bytes: another fingerprint; the same rows copied together: the same.
        strided = hashes.hash(base, 50, height=10, pitch=100, mode=mode)
        packed = bytes(b for r in range(10) for b in data[r * 100:r * 100 + 50])
        pbuf, pbase = _buffer(packed)
        assert strided != hashes.hash(base, 500, mode=mode) and strided == hashes.hash(pbase, 500, mode=mode)
    # Up to 16 x 64 bytes, sampled is full.
    assert hashes.hash(base, 1024, mode=SAMPLED) == hashes.hash(base, 1024, mode=FULL)
    assert hashes.hash(base, 1025, mode=SAMPLED) != hashes.hash(base, 1025, mode=FULL)
    del buf, pbuf


def test_sampled_reads_first_last_and_spread_blocks(hashes) -> None:
    n = 1 << 20
    data = bytearray(os.urandom(n))
    buf = ctypes.create_string_buffer(bytes(data), n)
    base = ctypes.addressof(buf)
    before = hashes.hash(base, n, mode=SAMPLED)
    blocks = block_offsets(n)
    assert blocks[0] == 0 and blocks[-1] == n - 64 and all(b % 64 == 0 for b in blocks)
    for at in (0, n - 1, blocks[7] + 10):           # first byte, last byte, inside block 7
        buf[at] = (buf[at][0] ^ 0xFF).to_bytes(1, "little")
        assert hashes.hash(base, n, mode=SAMPLED) != before, at
        buf[at] = (buf[at][0] ^ 0xFF).to_bytes(1, "little")
    assert hashes.hash(base, n, mode=SAMPLED) == before
    gap = blocks[7] + 64 + 100                      # between two blocks: sampled misses it, full does not
    full = hashes.hash(base, n, mode=FULL)
    buf[gap] = (buf[gap][0] ^ 0xFF).to_bytes(1, "little")
    assert hashes.hash(base, n, mode=SAMPLED) == before and hashes.hash(base, n, mode=FULL) != full


def test_safe_reads_fail_instead_of_faulting(hashes) -> None:
    data, base = _buffer(b"x" * (1 << 16))
    for mode in (SAMPLED, FULL):
        assert hashes.hash(base, 1 << 16, mode=mode, safe=True) == hashes.hash(base, 1 << 16, mode=mode)
    # Memory the process may not read (a direct read would crash it): the safe read says so.
    hole = _inaccessible(1 << 16)
    for mode in (SAMPLED, FULL):
        assert hashes.hash(hole, 1 << 16, mode=mode, safe=True) is None
    del data


def _inaccessible(size: int) -> int:
    """The address of a fresh PROT_NONE mapping: reads fault there."""
    libc = ctypes.CDLL(None)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    addr = libc.mmap(None, size, 0, 0x22, -1, 0)  # PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS
    assert addr and addr != ctypes.c_void_p(-1).value
    return addr


# -- the fakes move bytes -----------------------------------------------------------------------
def test_fake_copies_sets_and_queued_work_move_bytes(fake_gpu) -> None:
    code = r"""
import ctypes, sys
cuda = ctypes.CDLL(sys.argv[1])
p = lambda: ctypes.c_void_p()
d, h, e, s = p(), p(), p(), p()
assert cuda.cudaMalloc(ctypes.byref(d), 4096) == 0 and cuda.cudaMallocHost(ctypes.byref(h), 4096) == 0
assert cuda.cudaStreamCreate(ctypes.byref(s)) == 0 and cuda.cudaEventCreate(ctypes.byref(e)) == 0
ctypes.memmove(h, bytes(range(256)) * 16, 4096)
assert cuda.cudaMemcpy(d, h, 4096, 1) == 0 and ctypes.string_at(d, 4096) == bytes(range(256)) * 16
assert cuda.cudaMemset(d, 7, 100) == 0 and ctypes.string_at(d, 100) == b"\x07" * 100
# 2D: 3 rows of 10 bytes, pitches 16 (dst) and 20 (src)
assert cuda.cudaMemcpy2D(d, ctypes.c_size_t(16), h, ctypes.c_size_t(20), ctypes.c_size_t(10), ctypes.c_size_t(3), 1) == 0
assert all(ctypes.string_at(d.value + 16 * r, 10) == ctypes.string_at(h.value + 20 * r, 10) for r in range(3))
# queued (FAKE_GPU_DEFER=1): nothing lands before the stream is synchronised
assert cuda.cudaMemsetAsync(h, 9, 64, s) == 0 and ctypes.string_at(h, 64) != b"\x09" * 64
assert cuda.cudaEventRecord(e, s) == 0 and cuda.cudaEventQuery(e) == 600 and cuda.cudaEventQuery(e) == 0
assert ctypes.string_at(h, 64) == b"\x09" * 64
device = ctypes.string_at(d, 16)  # row 0 of the 2D copy, then the memset's 7s
assert device == bytes(range(10)) + b"\x07" * 6
assert cuda.cudaMemcpyAsync(h, d, 16, 2, s) == 0 and ctypes.string_at(h, 16) == b"\x09" * 16
assert cuda.cudaStreamSynchronize(s) == 0 and ctypes.string_at(h, 16) == device
print("ok")
"""
    done = subprocess.run(["python3", "-c", code, str(fake_gpu.cuda_runtime)], capture_output=True, text=True,
                          env={**os.environ, "FAKE_GPU_DEFER": "1", "LD_PRELOAD": ""})
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
