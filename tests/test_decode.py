"""ctf2perfetto.ctf.decode on the real LTTng traces, checked against the bt2 Python bindings.

The reference reading (`bt2_rows`) walks the same CTF with babeltrace2's Python
bindings and builds the expected rows from the payload field names of the
lttng-ust libc wrapper, independently of decode.c.
"""
from __future__ import annotations

import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ctf2perfetto.ctf.decode import decode, find_traces
from ctf2perfetto.errors import MemqError, UsageError
from ctf2perfetto.events import COLUMNS, EventBatch, EventKind, MemKind

TRACES = ["dbg", "disc", "ovw", "perpid", "trunc_noidx"]
LIBC = {
    "lttng_ust_libc:malloc": EventKind.MALLOC,
    "lttng_ust_libc:calloc": EventKind.CALLOC,
    "lttng_ust_libc:realloc": EventKind.REALLOC,
    "lttng_ust_libc:memalign": EventKind.MEMALIGN,
    "lttng_ust_libc:posix_memalign": EventKind.POSIX_MEMALIGN,
    "lttng_ust_libc:free": EventKind.FREE,
}


def decode_all(path: Path, **kwargs) -> tuple[dict[str, np.ndarray], list[str], object]:
    """Every row of a decode, concatenated, with the api names and the TraceInfo."""
    with decode(path, **kwargs) as dec:
        batches = list(dec)
    cols = {name: np.concatenate([b.columns[name] for b in batches]) for name in COLUMNS}
    return cols, dec.api_names, dec.info


def libc_row(name: str, payload: dict, common: dict, env_vpid: int) -> dict:
    """Expected columns of one libc wrapper event, from its bt2 payload."""
    kind = LIBC[name]
    pid = common.get("vpid", env_vpid)
    row = {"kind": kind, "api": name.split(":")[1], "mem": MemKind.HOST, "pid": pid,
           "tid": common.get("vtid", pid), "ip": common.get("ip", 0), "ptr": payload.get("ptr", 0),
           "size": payload.get("size", 0)}
    if kind == EventKind.CALLOC:
        row.update(size=payload["nmemb"] * payload["size"], aux=payload["nmemb"])
    elif kind == EventKind.REALLOC:
        row["src"] = payload["in_ptr"]
    elif kind == EventKind.MEMALIGN:
        row["aux"] = payload["alignment"]
    elif kind == EventKind.POSIX_MEMALIGN:
        row.update(ptr=payload["out_ptr"] if payload["result"] == 0 else 0, aux=payload["alignment"],
                   result=payload["result"])
    return row


def bt2_rows(bt2, path: Path) -> tuple[list[dict], dict]:
    """Expected rows (ts on the CTF clock value, in ns) and facts, read with bt2."""
    rows: list[dict] = []
    facts = {"lost_events": 0, "lost_packets": 0, "procnames": {}, "offsets": {}}
    env_vpid = {}
    for msg in bt2.TraceCollectionMessageIterator(str(path)):
        t = type(msg)
        if t is bt2._StreamBeginningMessageConst:
            env = msg.stream.trace.environment
            env_vpid[msg.stream.name] = int(env["vpid"]) if "vpid" in env else 0
            cc = msg.stream.cls.default_clock_class
            facts["offsets"][msg.stream.trace.uuid] = cc.offset.seconds * 10**9 + cc.offset.cycles
        elif t is bt2._EventMessageConst:
            ev = msg.event
            if ev.name in LIBC:
                payload = {k: int(v) for k, v in ev.payload_field.items()}
                common = {k: int(v) for k, v in (ev.common_context_field or {}).items()}
                row = libc_row(ev.name, payload, common, env_vpid[ev.stream.name])
                row["ts"] = row["begin"] = msg.default_clock_snapshot.value
                row["ns_from_origin"] = msg.default_clock_snapshot.ns_from_origin
                rows.append(row)
            elif ev.name == "lttng_ust_statedump:procname":
                facts["procnames"][int(ev.common_context_field["vpid"])] = str(ev.payload_field["procname"])
        elif t in (bt2._DiscardedEventsMessageConst, bt2._DiscardedPacketsMessageConst):
            packets = t is bt2._DiscardedPacketsMessageConst
            facts["lost_packets" if packets else "lost_events"] += msg.count
            begin = msg.beginning_default_clock_snapshot
            rows.append({"kind": EventKind.LOST, "aux": msg.count, "aux2": int(packets), "ts": begin.value,
                         "pid": env_vpid[msg.stream.name], "tid": env_vpid[msg.stream.name],
                         "stream_file": msg.stream.name,
                         "begin": begin.value, "size": msg.end_default_clock_snapshot.value - begin.value,
                         "ns_from_origin": begin.ns_from_origin})
    return rows, facts


@pytest.fixture(scope="module")
def decoded(test_data, bt2):
    """name -> (our columns, api names, info, bt2 rows, bt2 facts), read once per module."""
    out = {}
    for name in TRACES:
        path = test_data / "ctf" / name
        out[name] = (*decode_all(path), *bt2_rows(bt2, path))
    return out


@pytest.mark.parametrize("name", TRACES)
def test_every_row_equals_the_bt2_reading(decoded, name):
    cols, apis, info, rows, _facts = decoded[name]
    assert len(cols["ts"]) == len(rows)
    # One clock for all traces: CTF clock value shifted by its offset's distance to the first trace's.
    expected_ts = np.array([r["ns_from_origin"] for r in rows], dtype=np.int64) - info.clock_offset_ns
    assert np.array_equal(cols["ts"], expected_ts)
    if len(_facts["offsets"]) == 1:  # a single trace: exactly the CTF clock values
        assert np.array_equal(cols["ts"], np.array([r["ts"] for r in rows], dtype=np.int64))
    assert np.all(np.diff(cols["ts"]) >= 0)
    for column in COLUMNS:
        if column in ("ts", "begin"):
            continue
        default = -1 if column == "copy_kind" else 0
        got = cols[column]
        if column == "api":
            got = np.array([apis[i] if k != EventKind.LOST else 0 for i, k in zip(got, cols["kind"])],
                           dtype=object)
        if column == "stream":  # LOST rows: index of the stream file that lost them
            got = np.array([info.stream_files[i] if k == EventKind.LOST else i
                            for i, k in zip(got, cols["kind"])], dtype=object)
            want = np.array([r.get("stream_file", 0) for r in rows], dtype=object)
            assert np.array_equal(got, want), column
            continue
        want = np.array([r.get(column, default) for r in rows], dtype=got.dtype)
        assert np.array_equal(got, want), column
    lost = cols["kind"] == EventKind.LOST
    assert np.array_equal(cols["begin"][~lost], cols["ts"][~lost])
    assert np.array_equal(cols["begin"][lost], cols["ts"][lost])


@pytest.mark.parametrize("name", TRACES)
def test_counts_bytes_and_pids(decoded, name):
    cols, _apis, info, rows, facts = decoded[name]
    for kind in EventKind:
        assert int(np.sum(cols["kind"] == kind)) == sum(r["kind"] == kind for r in rows), kind.name
    heap = np.isin(cols["kind"], [int(k) for k in (EventKind.MALLOC, EventKind.CALLOC, EventKind.REALLOC,
                                                    EventKind.MEMALIGN, EventKind.POSIX_MEMALIGN)])
    assert int(cols["size"][heap].sum()) == sum(r["size"] for r in rows if r["kind"] != EventKind.FREE
                                                and r["kind"] != EventKind.LOST)
    events = cols["kind"] != EventKind.LOST
    assert set(np.unique(cols["pid"][events]).tolist()) == {r["pid"] for r in rows if r["kind"] != EventKind.LOST}
    assert info.lost_events == facts["lost_events"]
    assert info.lost_packets == facts["lost_packets"]
    for pid, procname in facts["procnames"].items():
        assert info.processes[pid] == procname


def test_losses_are_rows_with_their_counts(decoded):
    cols, _apis, info, _rows, facts = decoded["disc"]
    assert facts["lost_events"] > 0 and info.lost_events == facts["lost_events"]
    lost = cols["kind"] == EventKind.LOST
    assert int(cols["aux"][lost].sum()) == facts["lost_events"]
    assert all(info.stream_files[i].endswith("ch0_1") for i in cols["stream"][lost])
    cols, _apis, info, _rows, facts = decoded["ovw"]
    assert facts["lost_packets"] > 0 and info.lost_packets == facts["lost_packets"] and info.lost_events == 0
    assert np.all(cols["aux2"][cols["kind"] == EventKind.LOST] == 1)


def test_overwrite_trace_without_vpid_is_reported(decoded):
    cols, _apis, info, _rows, _facts = decoded["ovw"]
    assert np.all(cols["pid"] == 0)
    assert any("no vpid/vtid context" in w for w in info.warnings)


def test_per_pid_buffers_give_two_named_processes(decoded, bt2, test_data):
    cols, _apis, info, _rows, _facts = decoded["perpid"]
    expected = {}
    assert len(find_traces(test_data / "ctf" / "perpid")) == 2
    for msg in bt2.TraceCollectionMessageIterator(str(test_data / "ctf" / "perpid")):
        if type(msg) is bt2._StreamBeginningMessageConst:
            env = msg.stream.trace.environment
            expected[int(env["vpid"])] = str(env["procname"])
    assert len(expected) == 2
    assert info.processes == expected
    assert set(np.unique(cols["pid"]).tolist()) == set(expected)


def test_statedump_binaries_with_build_ids(decoded, bt2, test_data):
    _cols, _apis, info, _rows, _facts = decoded["dbg"]
    expected = {}
    for msg in bt2.TraceCollectionMessageIterator(str(test_data / "ctf" / "dbg")):
        if type(msg) is bt2._EventMessageConst and msg.event.name == "lttng_ust_statedump:bin_info":
            p = msg.event.payload_field
            expected[int(p["baddr"])] = (str(p["path"]), int(p["memsz"]))
        if type(msg) is bt2._EventMessageConst and msg.event.name == "lttng_ust_statedump:build_id":
            p = msg.event.payload_field
            expected[int(p["baddr"])] += (bytes(int(b) for b in p["build_id"]).hex(),)
    got = {b["baddr"]: (b["path"], b["memsz"]) + ((b["build_id"],) if b["build_id"] else ())
           for b in info.binaries}
    assert got == expected and len(got) > 5


def lttng(*args: str) -> None:
    subprocess.run(["lttng", *args], check=True, stdout=subprocess.DEVNULL)


def test_live_recording_with_rotation_chunks(tmp_path, bt2):
    """A real session rotated twice: chunks under archives/, read as one muxed trace."""
    session = f"memq-test-decode-{os.getpid()}"
    out = tmp_path / "trace"
    lttng("create", session, f"--output={out}")
    try:
        lttng("enable-channel", "-u", "--session", session, "--subbuf-size=1M", "--blocking-timeout=inf", "ch")
        lttng("enable-event", "-u", "--session", session, "--channel", "ch", "lttng_ust_libc:*")
        for ctx in ("vpid", "vtid", "ip"):
            lttng("add-context", "-u", "--session", session, "--channel", "ch", "-t", ctx)
        lttng("start", session)
        env = dict(os.environ, LD_PRELOAD="liblttng-ust-libc-wrapper.so", LTTNG_UST_ALLOW_BLOCKING="1")
        workload = "x = [bytearray(3000) for _ in range(2000)]"
        python = os.path.realpath(sys.executable)
        for _ in range(2):
            subprocess.run([python, "-c", workload], env=env, check=True)
            lttng("rotate", session)
        lttng("stop", session)
    finally:
        lttng("destroy", session)
    found = find_traces(out)
    assert len(found) >= 2 and all("archives" in p.parts for p in found)
    cols, _apis, info = decode_all(out)
    # Only libc events are enabled, so every event bt2 sees (chunks grouped by UUID) is a row.
    assert len(cols["ts"]) == bt2_event_count(bt2, out)
    assert np.all(np.diff(cols["ts"]) >= 0)
    big = (cols["kind"] == EventKind.MALLOC) & (cols["size"] >= 3000)
    assert int(big.sum()) >= 2 * 2000
    assert len(np.unique(cols["pid"][big])) == 2 and not info.warnings


# ---------------------------------------------------------------------------------- bad input


def writable_copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    for root, dirs, files in os.walk(dst):
        for name in dirs + files:
            os.chmod(os.path.join(root, name), 0o755)
    return dst


def index_packets(idx: Path) -> list[tuple[int, int]]:
    """(offset, size in bytes) of each packet, from an LTTng CTF index file (big endian)."""
    data = idx.read_bytes()
    magic, _major, _minor, entry_len = struct.unpack(">IIII", data[:16])
    assert magic == 0xC1F1DCC1
    out = []
    for pos in range(16, len(data), entry_len):
        offset, packet_bits = struct.unpack(">QQ", data[pos:pos + 16])
        out.append((offset, packet_bits // 8))
    return out


def bt2_event_count(bt2, path: Path) -> int:
    return sum(type(m) is bt2._EventMessageConst for m in bt2.TraceCollectionMessageIterator(str(path)))


@pytest.fixture
def disc_copy(test_data, tmp_path):
    trace = writable_copy(test_data / "ctf" / "disc", tmp_path / "disc")
    stream = trace / "ust/uid/0/64-bit/ch0_1"
    return trace, stream, index_packets(trace / "ust/uid/0/64-bit/index/ch0_1.idx")


def test_bad_paths(tmp_path):
    with pytest.raises(UsageError, match="no such directory"):
        decode(tmp_path / "missing")
    (tmp_path / "file").write_text("x")
    with pytest.raises(UsageError, match=r"file: not a directory"):
        decode(tmp_path / "file")
    (tmp_path / "empty").mkdir()
    with pytest.raises(MemqError, match=r"empty: no CTF trace under it"):
        decode(tmp_path / "empty")


def test_unreadable_metadata(disc_copy):
    trace, stream, _packets = disc_copy
    metadata = stream.parent / "metadata"
    metadata.write_bytes(b"\x00garbage" * 100)
    with pytest.raises(MemqError) as err:
        decode(trace)
    assert str(err.value) == f"{metadata}: unreadable CTF metadata: its text does not start with `/* CTF 1.8`"


def test_empty_trace(disc_copy):
    trace, stream, _packets = disc_copy
    for f in stream.parent.glob("ch*"):
        f.unlink()
    shutil.rmtree(stream.parent / "index")
    with pytest.raises(MemqError, match=r"disc: empty trace: no events"):
        with decode(trace) as dec:
            list(dec)


def test_stream_file_cut_mid_packet(disc_copy, bt2):
    trace, stream, packets = disc_copy
    offset, size = packets[len(packets) // 2]
    cut = offset + size // 3
    os.truncate(stream, cut)
    with pytest.raises(MemqError) as err:
        decode(trace)
    assert str(err.value) == (f"{stream}: packet at offset {offset}: the file ends inside it ({size} bytes, "
                              f"{cut - offset} left): the stream file was cut mid-packet; --salvage converts what "
                              "is readable")

    cols, _apis, info = decode_all(trace, salvage=True)
    # the partial packet is dropped; the packets index/ lists after it are missing from the file
    assert info.warnings[0] == (f"{stream}: salvage dropped 1 packet(s), {cut - offset} bytes from offset {offset} "
                                f"(packet at offset {offset}: the file ends inside it ({size} bytes, {cut - offset} "
                                "left): the stream file was cut mid-packet)")
    assert (info.dropped_packets, info.dropped_bytes) == (1, cut - offset)
    assert info.missing_packets == len(packets) - len(packets) // 2 - 1
    assert os.path.getsize(stream) == cut  # the input is untouched
    # Independent reference: the same cut done by hand, read with bt2.
    os.truncate(stream, offset)
    shutil.rmtree(stream.parent / "index")
    assert int(np.sum(cols["kind"] != EventKind.LOST)) == bt2_event_count(bt2, trace)


def test_garbage_inside_a_packet(disc_copy, bt2):
    trace, stream, packets = disc_copy
    bad = len(packets) // 3
    offset, size = packets[bad]
    with open(stream, "r+b") as f:
        f.seek(offset + 128)
        f.write(bytes(range(256)) * ((size - 256) // 256))
    with pytest.raises(MemqError) as err:
        with decode(trace) as dec:
            list(dec)
    assert str(err.value).startswith(f"{stream}: corrupt CTF data: ")
    assert "\n" not in str(err.value)

    before = stream.read_bytes()
    cols, _apis, info = decode_all(trace, salvage=True)
    assert stream.read_bytes() == before
    file_size = len(before)
    assert info.warnings == [f"{stream}: salvage dropped {len(packets) - bad} packet(s), {file_size - offset} "
                             f"bytes from offset {offset} (undecodable data in packet {bad})"]
    os.truncate(stream, offset)
    shutil.rmtree(stream.parent / "index")
    assert int(np.sum(cols["kind"] != EventKind.LOST)) == bt2_event_count(bt2, trace)


def test_progress_reaches_the_total(test_data):
    calls = []
    with decode(test_data / "ctf" / "disc", batch_size=8000, progress=lambda d, t: calls.append((d, t))) as dec:
        batches = list(dec)
    assert len(batches) == 6 and all(isinstance(b, EventBatch) for b in batches)
    assert all(0 <= d <= t for d, t in calls) and calls[-1][0] == calls[-1][1] > 0
    assert [d for d, _t in calls] == sorted(d for d, _t in calls)


def test_discarded_counter_going_backwards_counts_its_net_change(test_data, tmp_path):
    """LTTng's cumulative per-stream discarded counter can go backwards under contention; babeltrace2's delta then
    wraps to nearly 2**64. Lower one packet's counter below its predecessor's in a copy of the real lossy trace:
    the wrapped delta and the larger next delta cancel, so the total must equal the untouched trace's, whichever
    batches the two LOST rows fall in, and the anomaly must be reported."""
    _, _, untouched = decode_all(test_data / "ctf" / "disc", batch_size=1 << 16)
    trace = tmp_path / "disc"
    shutil.copytree(test_data / "ctf" / "disc", trace)
    chan = trace / "ust/uid/0/64-bit"
    shutil.rmtree(chan / "index")  # babeltrace2 must read the packet contexts, not the index
    stream = chan / "ch0_1"
    data = bytearray(stream.read_bytes())
    # Packet header (32 B) then context: timestamp_begin@32, timestamp_end@40, content_size@48 (bits),
    # packet_size@56 (bits), packet_seq_num@64, events_discarded@72 (native little-endian u64 on x86-64).
    offsets, offset = [], 0
    while offset < len(data):
        offsets.append(offset)
        offset += struct.unpack_from("<Q", data, offset + 56)[0] // 8
    discarded = [struct.unpack_from("<Q", data, o + 72)[0] for o in offsets]
    k = next(i for i in range(1, len(offsets) - 1) if discarded[i - 1] >= 1000 and discarded[i] > discarded[i - 1])
    struct.pack_into("<Q", data, offsets[k] + 72, discarded[k - 1] - 1000)
    stream.write_bytes(bytes(data))
    for batch_size in (1 << 16, 97):
        _, _, info = decode_all(trace, batch_size=batch_size)
        assert info.lost_events == untouched.lost_events == 2_689
        assert any("discarded-event counter went backwards 1 time(s) (by 1,000 events)" in w
                   for w in info.warnings), info.warnings
