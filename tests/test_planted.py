"""Rules that single-point bugs once broke with every test passing (scripts/mutation_check.py plants them).

* a GPU call's begin time in a recording of several traces whose clock offsets differ (decode.c adds each
  trace's clock-offset delta to the payload's begin time, as it does to the event times);
* a 3D copy whose slices continue the row stride has the byte-sequence key of the same rows as a 2D copy;
* the leak report users see is largest first;
* a Kineto flow end without `"bp": "e"` binds to the slice starting exactly at its time.

Each expected value is worked out here from what the test wrote, not read back from the code.
"""
from __future__ import annotations

import json
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

from ctf2perfetto import analyses
from ctf2perfetto.engine import open_trace
from ctf2perfetto.events import EventBatch, MemKind as M, TraceInfo
from ctf2perfetto.convert.write import write_trace
from support.rows import Rows, in_time_order

SHIFT_NS = 100 * 10**9  # the second trace's clock offset, later by this much (its clock is 1 GHz)
STREAM_MAGIC = 0xC1FC1FC1
METADATA_MAGIC = 0x75D11D57


# -- decode.c: the begin time of a call in the second of two traces ------------------------------------------
def _retimed(source: Path, dest: Path, shift_ns: int) -> None:
    """A copy of the CTF trace `source` (the directory holding `metadata`) as another recording whose clock
    offset is `shift_ns` later (same clock values, so every time lands shift_ns later) and whose trace UUID
    differs (babeltrace2 keeps traces of one UUID together)."""
    shutil.copytree(source, dest)
    shutil.rmtree(dest / "index", ignore_errors=True)
    meta = bytearray((dest / "metadata").read_bytes())
    assert struct.unpack_from("<I", meta)[0] == METADATA_MAGIC
    text = meta.decode("latin-1")
    uuid = re.search(r'\btrace\s*\{[^}]*?uuid = "([0-9a-f-]{36})"', text).group(1)
    new_uuid = ("0" if uuid[0] != "0" else "1") + uuid[1:]
    offset = re.search(r"\bclock\s*\{[^}]*?\boffset = (\d+);", text)
    assert "freq = 1000000000;" in text
    new_offset = str(int(offset.group(1)) + shift_ns)
    assert len(new_offset) == len(offset.group(1))
    text = text[:offset.start(1)] + new_offset + text[offset.end(1):]
    text = text.replace(f'uuid = "{uuid}"', f'uuid = "{new_uuid}"')
    old_bytes, new_bytes = bytes.fromhex(uuid.replace("-", "")), bytes.fromhex(new_uuid.replace("-", ""))
    meta = bytearray(text.encode("latin-1"))
    at = 0
    while at < len(meta):  # metadata packets: magic, uuid, checksum, content_size, packet_size (bits)
        assert meta[at + 4:at + 20] == old_bytes
        meta[at + 4:at + 20] = new_bytes
        at += struct.unpack_from("<I", meta, at + 28)[0] // 8
    (dest / "metadata").write_bytes(bytes(meta))
    for stream in dest.iterdir():
        if not stream.is_file() or stream.name == "metadata":
            continue
        data = bytearray(stream.read_bytes())
        at = 0
        while at < len(data):  # LTTng packet header: magic, uuid; context: packet_size (bits) at 56
            assert struct.unpack_from("<I", data, at)[0] == STREAM_MAGIC and data[at + 4:at + 20] == old_bytes
            data[at + 4:at + 20] = new_bytes
            at += struct.unpack_from("<Q", data, at + 56)[0] // 8
        stream.write_bytes(bytes(data))


def _calls(path: Path) -> list[tuple[int, int, str]]:
    with open_trace(path) as tp:
        df = tp.query("SELECT ts, dur, name FROM slice WHERE category = 'memq.api' ORDER BY ts, name")
    return [(int(ts), int(dur), name) for ts, dur, name in df.itertuples(index=False)]


def _convert(trace: Path, out: Path) -> Path:
    proc = subprocess.run([sys.executable, "-m", "ctf2perfetto.cli.convert", str(trace), "-o", str(out), "-q"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return out


def test_call_times_of_two_traces_with_different_clock_offsets(fake_hip_trace, tmp_path):
    """The HIP recording, and beside it the same recording as taken with a clock offset 100 s later: every
    GPU call appears twice, the second 100 s after the first, with the same begin and duration."""
    channel = next(fake_hip_trace.dir.rglob("metadata")).parent
    both = tmp_path / "both"
    shutil.copytree(channel, both / "a" / "64-bit")
    shutil.rmtree(both / "a" / "64-bit" / "index", ignore_errors=True)
    _retimed(channel, both / "b" / "64-bit", SHIFT_NS)
    single = _calls(_convert(fake_hip_trace.dir, tmp_path / "single.pftrace"))
    assert single and all(dur > 0 for _, dur, _ in single)
    assert single[-1][0] - single[0][0] < SHIFT_NS  # the two copies do not overlap in time
    doubled = _calls(_convert(both, tmp_path / "both.pftrace"))
    assert len(doubled) == 2 * len(single)
    first, second = doubled[:len(single)], doubled[len(single):]
    zero = first[0][0] - single[0][0]  # the converted timeline's own zero
    assert first == [(ts + zero, dur, name) for ts, dur, name in single]
    assert second == [(ts + zero + SHIFT_NS, dur, name) for ts, dur, name in single]


# -- copies.sql: a 3D copy's key ------------------------------------------------------------------------------
PID = 41
DEV, HOST = 0x900000000, 0x10000000


def _write(rows: list[dict], path: Path) -> Path:
    write_trace([EventBatch.from_rows(in_time_order(rows))], TraceInfo(), path)
    return path


def test_a_3d_copy_of_contiguous_slices_has_the_2d_key(tmp_path):
    """3 slices of 4 rows of 100 bytes, rows 128 apart and slices 512 (= 4 * 128) apart on both sides: the
    same byte sequence as 12 rows of 100 bytes 128 apart, so the same key as that 2D copy; with slices 600
    apart it is a sequence of its own (every number kept)."""
    log = Rows(PID)
    width, height, pitch, depth = 100, 4, 128, 3
    flat = log.copy_2d(1000, 1100, DEV, HOST, width, height * depth, pitch, pitch, 1)
    cube = dict(log.copy_2d(2000, 2100, DEV, HOST, width, height, pitch, pitch, 1), size=width * height * depth,
                depth=depth, dslice=pitch * height, sslice=pitch * height)
    gapped = dict(log.copy_2d(3000, 3100, DEV, HOST, width, height, pitch, pitch, 1), size=width * height * depth,
                  depth=depth, dslice=600, sslice=600)
    rows = [log.gpu_alloc(0, DEV, 1 << 20), log.malloc(10, HOST, 1 << 20), flat, cube, gapped]
    path = _write(rows, tmp_path / "t.pftrace")
    with open_trace(path) as tp:
        keys = tp.query("INCLUDE PERFETTO MODULE memq.copies; "
                        "SELECT ts, src_key, dst_key FROM memq_copy ORDER BY ts")
    rows_key = lambda addr: f"{addr}:{width}:{height * depth}:{pitch}"  # noqa: E731
    assert [(r.src_key, r.dst_key) for r in keys.itertuples()] == [
        (rows_key(HOST), rows_key(DEV)), (rows_key(HOST), rows_key(DEV)),
        (f"{HOST}:{width}:{height}:{pitch}:{depth}:600", f"{DEV}:{width}:{height}:{pitch}:{depth}:600")]


# -- leaks.sql: the order users see ---------------------------------------------------------------------------
def test_leaks_are_listed_largest_first(tmp_path):
    """Leaked: one 1 MiB and one 4 MiB device block, three 2 MiB pinned blocks (6 MiB), freed: one 8 MiB block.
    `memq leaks` lists kind/size groups by leaked bytes, largest first; the allocations by size, then time."""
    log = Rows(PID)
    mib = 1 << 20
    rows = [log.gpu_alloc(100, DEV, mib), log.gpu_alloc(200, DEV + 0x1000000, 4 * mib),
            log.gpu_alloc(300, 0x70000000, 2 * mib, mem=M.PINNED), log.gpu_alloc(400, 0x70400000, 2 * mib, mem=M.PINNED),
            log.gpu_alloc(500, 0x70800000, 2 * mib, mem=M.PINNED), log.gpu_alloc(600, DEV + 0x2000000, 8 * mib),
            log.gpu_free(700, DEV + 0x2000000, 8 * mib)]
    path = _write(rows, tmp_path / "t.pftrace")
    proc = subprocess.run([sys.executable, "-m", "ctf2perfetto.cli.memq", "leaks", str(path), "--format", "json"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    table = json.loads(proc.stdout)["tables"]["leaks"]["rows"]
    assert [(r["kind"], r["size"], r["bytes"]) for r in table] == [
        ("pinned", 2 * mib, 6 * mib), ("device", 4 * mib, 4 * mib), ("device", mib, mib)]
    leaked = analyses.leaked_allocations(path)  # an allocation exists from its call's end (each call: 50 ns)
    assert [(int(r.size), int(r.ts)) for r in leaked.itertuples()] == [
        (4 * mib, 250), (2 * mib, 350), (2 * mib, 450), (2 * mib, 550), (mib, 150)]


# -- importers/kineto/layout.py: a flow end at a slice's start -------------------------------------------------
def test_a_flow_end_binds_to_the_slice_starting_at_its_time():
    """Chrome JSON: an `f` point without `"bp": "e"` binds to the next slice starting at or after its ts; one at
    exactly a kernel's start is that kernel's, not the one after it."""
    from ctf2perfetto.importers.kineto.layout import Slice, bind_flows

    launch = Slice(0, 100, {"name": "cudaLaunchKernel"})
    kernel, later = Slice(150, 160, {"name": "k1"}), Slice(170, 180, {"name": "k2"})
    slices = {"cpu": [launch], "gpu": [kernel, later]}
    skipped: list[str] = []
    points = [("s", 1, 50, ["cpu"], {}), ("f", 1, 150, ["gpu"], {})]
    assert bind_flows(points, slices, skipped.append) == 1
    assert launch.flow_ids and kernel.terminating_flow_ids == launch.flow_ids
    assert later.terminating_flow_ids == [] and skipped == []
