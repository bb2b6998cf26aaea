"""Hostile input: nothing hangs, nothing aborts, nothing is overwritten, nothing is lost in silence.

Every reproduction of a hostile input, built from a small real recording (the fake HIP workload
under `memq record`, 4 KiB sub-buffers so its busiest stream file has dozens of packets):
one line and the documented exit code, within the subprocess timeout (a hang fails the
test), no file replaced that is not ours, and losses counted exactly against an
independent count (babeltrace2's counter sink, index/, memq-record.json). Ends with a fuzz
run: 200 random corruptions of the trace, each converted with and without --salvage.
"""
from __future__ import annotations

import ctypes
import gzip
import http.client
import json
import os
import resource
import signal
import stat
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from ctf2perfetto import analyses
from ctf2perfetto.engine import open_trace
from ctf2perfetto.errors import MemqError
from ctf2perfetto.events import EventBatch, EventKind as K, TraceInfo
from ctf2perfetto.ctf.guard import guarded, join_thread
from ctf2perfetto.convert.write import write_trace
from support.hostile import TIMEOUT_S, TraceCopy, run_cli, run_fuzz_runner
from support.lttng import record

FUZZ_CASES = 200
FUZZ_MEMORY = 4 << 30  # address space of the fuzz runner
ISSUE_BOUND_S = 10  # the issue's goal for every case


@pytest.fixture(scope="session")
def recorded(fake_gpu, tmp_path_factory) -> Path:
    """The HIP workload recorded with 4 KiB sub-buffers and every heap block an event (many packets per
    stream file: tests cut after the 10th), run four times on the first and four on the last CPU: two stream
    files with events, so one can go and events remain."""
    out = tmp_path_factory.mktemp("hostile") / "trace"
    last = os.cpu_count() - 1
    script = "; ".join(f"taskset -c {cpu} {fake_gpu.workload} hip {out.parent}/calls{cpu}-{i}.jsonl"
                       for cpu in (0, last) for i in range(4))
    record(out, ["sh", "-c", script], extra=("--subbuf-size", "4k", "--num-subbuf", "4", "--host-min-size", "0"))
    return out


@pytest.fixture(scope="session")
def converted(recorded, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("hostile_pf") / "trace.pftrace"
    proc = run_cli("ctf2perfetto", recorded, "-o", out, "-q")
    assert proc.returncode == 0, proc.stderr
    return out


@pytest.fixture
def t(recorded, tmp_path) -> TraceCopy:
    return TraceCopy.of(recorded, tmp_path / "t")


def recorded_events(trace: TraceCopy) -> int:
    return json.loads((trace.root / "memq-record.json").read_text())["events"]


def one_line(proc: subprocess.CompletedProcess, code: int, *needles: str) -> str:
    """The single stderr line of a failed command, checked."""
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == code, proc.stderr
    assert len(lines) == 1 and "Traceback" not in proc.stderr and "internal error" not in proc.stderr, proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def trace_info(path: Path) -> dict:
    """The `memq trace info` instant's args."""
    with open_trace(path) as tp:
        df = tp.query("SELECT key, int_value, string_value FROM slice JOIN args USING (arg_set_id) "
                      "WHERE category = 'memq.meta'")
    return {k.removeprefix("debug."): s if i is None or i != i else int(i)
            for k, i, s in df.itertuples(index=False)}


def lost_slices(path: Path) -> dict[str, int]:
    """memq.lost slices: name -> summed count."""
    with open_trace(path) as tp:
        df = tp.query("SELECT name, SUM(EXTRACT_ARG(arg_set_id, 'debug.count')) AS n FROM slice "
                      "WHERE category = 'memq.lost' GROUP BY name")
    return {name: int(n) for name, n in df.itertuples(index=False)}


# -- 1. nothing is overwritten that is not a regular file we own ------------------------------------------
def _target(kind: str, t: TraceCopy, tmp: Path, suffix: str) -> Path:
    if kind in ("/dev/null", "/dev/full"):
        return Path(kind)
    if kind == "metadata":
        return t.channel / "metadata"
    if kind == "stream directory":
        return t.channel / f"new{suffix}"
    if kind == "index directory":
        return t.channel / "index" / f"new{suffix}"
    if kind == "directory":
        (tmp / "adir").mkdir()
        return tmp / "adir"
    if kind == "symlink":
        (tmp / f"elsewhere{suffix}").write_bytes(b"keep")
        (tmp / f"link{suffix}").symlink_to(tmp / f"elsewhere{suffix}")
        return tmp / f"link{suffix}"
    assert kind == "another user's file"
    (tmp / f"theirs{suffix}").write_bytes(b"keep")
    os.chown(tmp / f"theirs{suffix}", 65534, 65534)
    return tmp / f"theirs{suffix}"


def _snapshot(path: Path) -> tuple:
    st = os.lstat(path)
    data = path.read_bytes() if stat.S_ISREG(st.st_mode) else b""
    return st.st_mode, st.st_ino, st.st_uid, data


KINDS = {"/dev/null": "is a device", "/dev/full": "is a device", "metadata": "inside a CTF trace directory",
         "stream directory": "inside a CTF trace directory", "index directory": "inside a CTF trace directory",
         "directory": "is a directory", "symlink": "is a symbolic link", "another user's file": "another user"}


@pytest.mark.parametrize("kind", list(KINDS))
def test_convert_never_writes_over_what_is_not_ours(kind, t, tmp_path):
    target = _target(kind, t, tmp_path, ".pftrace")
    before = _snapshot(target) if os.path.lexists(target) else None
    listing = sorted(os.listdir(t.channel))
    proc = run_cli("ctf2perfetto", t.root, "-o", target)
    one_line(proc, 2, str(target), KINDS[kind])
    assert (_snapshot(target) if os.path.lexists(target) else None) == before
    assert sorted(os.listdir(t.channel)) == listing  # nothing added to the trace either


@pytest.mark.parametrize("kind", ["/dev/null", "symlink", "stream directory", "input"])
def test_annotate_and_plot_never_write_over_what_is_not_ours(kind, converted, t, tmp_path):
    for tool, suffix in (("annotate", ".pftrace"), ("plot", ".png")):
        if kind in ("input", "/dev/null") and tool == "plot":
            continue  # not a .png: refused for that first
        if kind == "input":
            target = converted
        elif kind == "/dev/null":
            target = Path("/dev/null")
        else:
            (tmp_path / tool).mkdir()
            target = _target(kind, t, tmp_path / tool, suffix)
        before = _snapshot(target) if os.path.lexists(target) else None
        proc = run_cli("memq", tool, converted, "-o", target)
        one_line(proc, 2, str(target), {"input": "is an input"}.get(kind, KINDS.get(kind, "")))
        assert (_snapshot(target) if os.path.lexists(target) else None) == before


def test_record_refuses_an_output_inside_a_trace(t):
    proc = run_cli("memq", "record", "-o", t.channel / "again", "--", "/bin/true")
    one_line(proc, 2, "inside a CTF trace directory")
    assert not (t.channel / "again").exists()


def test_temporaries_of_a_killed_run_are_swept(recorded, tmp_path):
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = tmp_path / f".memq-tmp.{dead.pid}.0123abcd.out.pftrace"
    live = tmp_path / f".memq-tmp.{os.getpid()}.0123abcd.out.pftrace"  # a run still writing: kept
    stale.write_bytes(b"half a trace")
    live.write_bytes(b"being written")
    proc = run_cli("ctf2perfetto", recorded, "-o", tmp_path / "out.pftrace", "-q")
    assert proc.returncode == 0, proc.stderr
    assert sorted(os.listdir(tmp_path)) == [live.name, "out.pftrace"]


# -- 2. nothing hangs ----------------------------------------------------------------------------------------
def test_truncated_metadata_is_one_line_at_once(t, tmp_path):
    """libbabeltrace2 spins for ever on this (its support-info query); memq checks the packets first."""
    metadata = t.channel / "metadata"
    os.truncate(metadata, 100)
    for tool, args in (("ctf2perfetto", [t.root, "-o", tmp_path / "x.pftrace"]), ("memq", ["summary", t.root])):
        started = time.monotonic()
        proc = run_cli(tool, *args)
        assert time.monotonic() - started < ISSUE_BOUND_S
        one_line(proc, 1, f"{metadata}: unreadable CTF metadata: packet at offset 0: the file ends inside it")
    assert not (tmp_path / "x.pftrace").exists()


def _spin(_beat):
    while True:
        pass


def _abort(_beat):
    os.abort()


def _refuse(_beat):
    raise MemqError("bad input", exit_code=2)


def test_guard_bounds_what_hangs_and_survives_what_aborts():
    """The guarded child: a loop is stopped at the bound, an abort is one line, answers and errors come back."""
    with pytest.raises(MemqError, match=r"^spinning: babeltrace2 made no progress in 1 s"):
        guarded(_spin, "spinning", seconds=1)
    with pytest.raises(MemqError, match=r"^aborting: babeltrace2 crashed \(SIGABRT\)"):
        guarded(_abort, "aborting", seconds=30)
    with pytest.raises(MemqError, match="^bad input$") as err:
        guarded(_refuse, "refusing", seconds=30)
    assert err.value.exit_code == 2
    assert guarded(lambda beat: [beat() or i for i in range(3)], "answering", seconds=30) == [0, 1, 2]


def test_guard_works_in_a_process_holding_more_than_1024_descriptors():
    """A long-lived process (a notebook decoding trace after trace: libbabeltrace2 2.0 keeps each one's
    metadata file open) reaches descriptor numbers select() cannot watch; the guard still answers."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        assert max(held) > 1024
        assert guarded(lambda beat: [beat() or i for i in range(3)], "answering", seconds=30) == [0, 1, 2]
        with pytest.raises(MemqError, match=r"^spinning: babeltrace2 made no progress in 1 s"):
            guarded(_spin, "spinning", seconds=1)
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_join_thread_returns_once_the_thread_has_run_its_exit_destructors():
    """Thread.join() returns while the thread still runs its C exit destructors (where glib's g_slice
    cleanup took a mutex that a guarded child, forked then, waited on forever); join_thread after them."""
    libc = ctypes.CDLL(None)
    key = ctypes.c_uint()
    # The destructor is usleep(value): the thread lingers that long after its Python code is done.
    assert libc.pthread_key_create(ctypes.byref(key), ctypes.cast(libc.usleep, ctypes.c_void_p)) == 0
    linger = lambda: libc.pthread_setspecific(key, ctypes.c_void_p(500_000))  # noqa: E731
    plain, waited = threading.Thread(target=linger), threading.Thread(target=linger)
    plain.start()
    plain.join()
    assert os.path.exists(f"/proc/self/task/{plain.native_id}")  # joined, yet still running C code
    waited.start()
    assert join_thread(waited, seconds=30)
    assert not os.path.exists(f"/proc/self/task/{waited.native_id}")
    assert join_thread(plain, seconds=30)  # its destructor must not outlive the key
    libc.pthread_key_delete(key)


def test_ctrl_c_stops_a_guarded_child(tmp_path):
    pid_file = tmp_path / "child.pid"
    script = ("import os, sys\nfrom ctf2perfetto.cli import run_command\nfrom ctf2perfetto.ctf.guard import guarded\n"
              f"def spin(beat):\n    open({str(pid_file)!r}, 'w').write(str(os.getpid()))\n    while True: pass\n"
              "sys.exit(run_command('x', lambda: guarded(spin, 'spin', 600)))\n")
    proc = subprocess.Popen([sys.executable, "-c", script], stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + TIMEOUT_S
    while not pid_file.exists() or not pid_file.read_text():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=ISSUE_BOUND_S)
    assert proc.returncode == 130 and err == "x: error: interrupted\n"
    with pytest.raises(ProcessLookupError):
        os.kill(int(pid_file.read_text()), 0)  # the child was killed, not left spinning


def test_ctrl_c_stops_a_runaway_query(converted, tmp_path):
    # The compiled trace_processor in a cache of this test's own, warmed first: compiling it takes
    # 5-30 s (in C, where no signal is handled), and memq runs with other engine settings drop the
    # shared cache's entry (engine/wasm.py _drop_stale).
    env = {**os.environ, "MEMQ_CACHE_DIR": str(tmp_path / "cache")}
    warm = run_cli("memq", "sql", converted, "SELECT 1", env=env, timeout=120)
    assert warm.returncode == 0, warm.stderr
    query = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c) SELECT count(*) FROM c"
    proc = subprocess.Popen([sys.executable, "-m", "ctf2perfetto.cli.memq", "sql", str(converted), query],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    time.sleep(4)  # loaded (from the warm cache) and looping
    assert proc.poll() is None
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=ISSUE_BOUND_S)
    assert (proc.returncode, out, err) == (130, "", "memq: error: interrupted\n")


# -- 3. nothing aborts ----------------------------------------------------------------------------------------
def _header_cut(t: TraceCopy) -> tuple[str, int]:
    name = t.biggest_stream()
    offset = t.packets(name)[10][0]
    os.truncate(t.stream(name), offset + 20)
    return name, 10


def _packet_size(t: TraceCopy) -> tuple[str, int]:
    name = t.biggest_stream()
    t.set_field(name, 5, "packet_size", 1 << 63)
    return name, 5


def _timestamp_begin(t: TraceCopy) -> tuple[str, int]:
    name = t.biggest_stream()
    t.set_field(name, 5, "timestamp_begin", (1 << 64) - 1)
    return name, 5


def _stray(t: TraceCopy) -> tuple[str, int]:
    (t.channel / "notes.txt").write_text("hi\n")
    return "notes.txt", 0


def _index_offsets(t: TraceCopy) -> tuple[str, int]:
    """An index babeltrace2 trusts (sizes add up) whose offsets point past the packets."""
    name = t.biggest_stream()
    index = t.channel / "index" / f"{name}.idx"
    data = bytearray(index.read_bytes())
    entry = int.from_bytes(data[12:16], "big")
    for i in range(16 + entry, len(data), entry):  # every offset but the first, moved 1 MiB on
        data[i:i + 8] = (int.from_bytes(data[i:i + 8], "big") + (1 << 20)).to_bytes(8, "big")
    index.write_bytes(bytes(data))
    return name, 0


def _unreadable_stream(t: TraceCopy) -> tuple[str, int]:
    name = min(t.streams(), key=lambda p: p.stat().st_size).name
    t.stream(name).chmod(0)
    return name, 0


def _unreadable_metadata(t: TraceCopy) -> tuple[str, int]:
    (t.channel / "metadata").chmod(0)
    return "metadata", 0


ABORTS = {
    # case: (damage, root-without-capabilities, the one line's words, what salvage does)
    "stream cut inside a packet header": (_header_cut, False, "the file ends inside its header", "cut"),
    "packet_size of 2^63": (_packet_size, False, "impossible packet_size of 9223372036854775808 bits", "cut"),
    "timestamp_begin all ones": (_timestamp_begin, False, "impossible timestamps (begin 18446744073709551615", "cut"),
    "stray file in the stream directory": (_stray, False, "not a CTF stream file", "left out"),
    "index offsets past the packets": (_index_offsets, False, "corrupt index", "index ignored"),
    "unreadable stream file": (_unreadable_stream, True, "cannot read: Permission denied", "unreadable"),
    "unreadable metadata": (_unreadable_metadata, True, "cannot read the CTF metadata: Permission denied", "refused"),
}


@pytest.mark.parametrize("case", list(ABORTS))
def test_what_babeltrace2_aborts_on_is_one_line(case, t, tmp_path):
    damage, unprivileged, words, salvaged = ABORTS[case]
    name, packet = damage(t)
    path = t.channel / name
    out = tmp_path / "out" / "x.pftrace"
    out.parent.mkdir()
    tmp = tmp_path / "tmp"  # where salvage makes its copy: must be empty again afterwards
    tmp.mkdir()
    os.chmod(tmp_path, 0o755)
    os.chmod(tmp, 0o777)
    proc = run_cli("ctf2perfetto", t.root, "-o", out, unprivileged=unprivileged, env={"TMPDIR": str(tmp)})
    one_line(proc, 1, str(path), words, "--salvage converts what is readable" if salvaged != "refused" else "")
    assert not out.exists() and os.listdir(out.parent) == []

    proc = run_cli("ctf2perfetto", t.root, "-o", out, "--salvage", unprivileged=unprivileged,
                   env={"TMPDIR": str(tmp)})
    assert os.listdir(tmp) == []  # the salvage copy is gone, whatever happened
    if salvaged == "refused":
        one_line(proc, 1, str(path), "(salvage cannot cut this away)")
        return
    assert proc.returncode == 0, proc.stderr
    assert "--salvage" not in proc.stderr and "Traceback" not in proc.stderr
    info = trace_info(out)
    if salvaged == "cut":
        packets = t.packets(name)
        kept = packets[packet][0]
        dropped = len([o for o, _ in packets if kept <= o < path.stat().st_size])
        assert f"{path}: salvage dropped {dropped} packet(s), {path.stat().st_size - kept} bytes from offset " \
               f"{kept} (packet at offset {kept}: {words}" in proc.stderr
        assert (info["dropped_packets"], info["dropped_bytes"]) == (dropped, path.stat().st_size - kept)
    elif salvaged == "left out":
        assert f"{path}: salvage left it out: not a CTF stream file" in proc.stderr
        assert info["dropped_packets"] == 0 and info["events_read"] == recorded_events(t)
    elif salvaged == "index ignored":
        assert info["dropped_packets"] == 0 and info["events_read"] == recorded_events(t)
    else:  # unreadable: left out whole, its packets (from index/) counted as dropped
        assert info["dropped_packets"] == len(t.packets(name)) and f"{path}: salvage dropped" in proc.stderr


@pytest.fixture(scope="session")
def recorded_lttng_map(fake_gpu, tmp_path_factory) -> Path:
    """The workload with LTTng's own library map (its statedump's build_id events: a 64-bit sequence length;
    memq's own map, the default with memq's preload, has an 8-bit one): LTTng's libc wrapper alone."""
    out = tmp_path_factory.mktemp("hostile_lttng_map") / "trace"
    last = os.cpu_count() - 1  # two stream files with events, in small packets: salvage keeps the other packets
    script = "; ".join(f"taskset -c {cpu} {fake_gpu.workload} hip {out.parent}/calls{cpu}.jsonl" for cpu in (0, last))
    record(out, ["sh", "-c", script], api="libc",
           extra=("--host-source", "lttng", "--subbuf-size", "4k", "--num-subbuf", "4"))
    return out


def test_a_corrupt_sequence_length_is_one_line(recorded_lttng_map, tmp_path, bt2):
    """A build_id length of 2^32 + n in a statedump event: libbabeltrace2 allocates that many fields and
    dies (or, unbounded, takes the machine's memory). Events are not checked beforehand: the decode's
    memory is bounded, the crash is one line, and --salvage finds the packet by reading each file alone."""
    t = TraceCopy.of(recorded_lttng_map, tmp_path / "t")
    build_id = next(bytes(int(b) for b in msg.event.payload_field["build_id"])
                    for msg in bt2.TraceCollectionMessageIterator(str(t.root))
                    if type(msg) is bt2._EventMessageConst and msg.event.name.endswith(":build_id"))
    encoded = len(build_id).to_bytes(8, "little") + build_id  # __build_id_length, then the bytes
    stream = next(s for s in t.streams() if encoded in s.read_bytes())
    data = bytearray(stream.read_bytes())
    data[data.find(encoded) + 4] = 1  # the length + 2^32
    stream.write_bytes(bytes(data))
    out = tmp_path / "x.pftrace"
    proc = run_cli("ctf2perfetto", t.root, "-o", out)
    one_line(proc, 1, f"{t.root}: babeltrace2 crashed reading the trace", "--salvage converts what is readable")
    assert not out.exists()
    proc = run_cli("ctf2perfetto", t.root, "-o", out, "--salvage")
    assert proc.returncode == 0, proc.stderr
    assert f"{stream}: salvage dropped" in proc.stderr and "(babeltrace2 crashed reading packet" in proc.stderr
    assert trace_info(out)["dropped_packets"] >= 1


# -- 4. nothing is lost in silence ---------------------------------------------------------------------------
@pytest.mark.parametrize("how", ["deleted", "dangling link"])
def test_a_missing_stream_file_is_counted(how, t, tmp_path):
    name = t.biggest_stream()
    packets = t.packets(name)
    t.stream(name).unlink()
    if how == "dangling link":
        t.stream(name).symlink_to(tmp_path / "nowhere")
    recorded, held = recorded_events(t), t.events()
    assert held < recorded
    out = tmp_path / "x.pftrace"
    proc = run_cli("ctf2perfetto", t.root, "-o", out)
    assert proc.returncode == 0, proc.stderr
    assert (f"  missing from the files: {recorded - held:,} events of the {recorded:,} memq-record.json counted; "
            f"{len(packets)} packet{'s' if len(packets) > 1 else ''} index/ lists; 1 stream file gone") in proc.stderr
    assert f"warning: {t.stream(name)}: missing stream" in proc.stderr
    info = trace_info(out)
    assert (info["missing_events"], info["missing_packets"], info["missing_streams"], info["events_read"],
            info["recorded_events"]) == (recorded - held, len(packets), 1, held, recorded)
    assert lost_slices(out) == {"missing packets": len(packets)}
    notes = analyses.trace_warnings(out)
    assert any(f"lacked {recorded - held:,} of the events memq record counted" in n for n in notes), notes


def test_a_stream_cut_at_a_packet_boundary_is_counted(t, tmp_path):
    name = t.biggest_stream()
    packets = t.packets(name)
    os.truncate(t.stream(name), packets[10][0])
    recorded, held = recorded_events(t), t.events()
    out = tmp_path / "x.pftrace"
    proc = run_cli("ctf2perfetto", t.root, "-o", out)
    assert proc.returncode == 0, proc.stderr
    gone = len(packets) - 10
    assert f"  missing from the files: {recorded - held:,} events of the {recorded:,} memq-record.json counted; " \
           f"{gone} packets index/ lists\n" in proc.stderr
    info = trace_info(out)
    assert (info["missing_events"], info["missing_packets"], info["missing_streams"]) == (recorded - held, gone, 0)
    assert lost_slices(out) == {"missing packets": gone}


def test_salvage_records_what_it_dropped(t, tmp_path):
    name, packet = _packet_size(t)
    packets = t.packets(name)
    size = t.stream(name).stat().st_size
    out = tmp_path / "x.pftrace"
    proc = run_cli("ctf2perfetto", t.root, "-o", out, "--salvage")
    assert proc.returncode == 0, proc.stderr
    dropped, nbytes = len(packets) - packet, size - packets[packet][0]
    assert f"  dropped by salvage: {dropped} packets ({nbytes:,} bytes)" in proc.stderr
    info = trace_info(out)
    assert (info["dropped_packets"], info["dropped_bytes"]) == (dropped, nbytes)
    assert info["missing_events"] == recorded_events(t) - info["events_read"] > 0
    assert lost_slices(out) == {"dropped packets": dropped}
    notes = analyses.trace_warnings(out)
    assert any(f"--salvage dropped {dropped} damaged packets" in n for n in notes), notes


@pytest.mark.parametrize("field", ["timestamp_begin", "timestamp_end"])
def test_salvage_recovers_from_a_time_going_backwards(field, t, tmp_path):
    """timestamp_begin before the previous packet's end (memq's check), or timestamp_end before the packet's
    last event (babeltrace2's muxer: 'timestamp is less than muxer's last returned timestamp')."""
    name = t.biggest_stream()
    begin = t.field(name, 5, "timestamp_begin")
    t.set_field(name, 5, field, 1 if field == "timestamp_begin" else begin + 11)
    out = tmp_path / "x.pftrace"
    proc = run_cli("ctf2perfetto", t.root, "-o", out)
    one_line(proc, 1, "--salvage converts what is readable")
    proc = run_cli("ctf2perfetto", t.root, "-o", out, "--salvage")
    assert proc.returncode == 0 and "--salvage" not in proc.stderr, proc.stderr
    packets = t.packets(name)
    assert f"{t.stream(name)}: salvage dropped {len(packets) - 5} packet(s)" in proc.stderr
    assert trace_info(out)["dropped_packets"] == len(packets) - 5


def _kineto(path: Path, memcpys: list[tuple[float, float, object]], kernel: tuple[float, float]) -> Path:
    """A Kineto trace: one kernel and copies (ts us, dur us, bytes) on stream 7 of GPU 0."""
    events = [{"ph": "M", "name": "process_labels", "pid": 0, "args": {"labels": "GPU 0"}},
              {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": kernel[0], "dur": kernel[1],
               "args": {"device": 0, "stream": 7}}]
    events += [{"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoH (Device -> Pinned)", "pid": 0, "tid": 7,
                "ts": ts, "dur": dur, "args": {"device": 0, "stream": 7, "bytes": nbytes}}
               for ts, dur, nbytes in memcpys]
    with gzip.open(path, "wt") as f:
        json.dump({"traceEvents": events, "baseTimeNanoseconds": 1_700_000_000_000_000_000}, f)
    return path


def test_a_kineto_copy_overlapping_a_kernel_is_kept(tmp_path):
    """trace_processor's JSON importer drops an X event that partly overlaps another on its track (HTA's
    negative_queue_length trace lost one of its 30 DtoH copies): memq reads JSON with its own importer."""
    copies = [(10.0, 5.0, 100), (95.0, 20.0, 200), (200.0, 1.5, 300)]  # the second one crosses the kernel's end
    path = _kineto(tmp_path / "k.json.gz", copies, (50.0, 60.0))
    proc = run_cli("memq", "summary", path, "--format", "json")
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)["tables"]["copies"]["rows"]
    assert [(r["direction"], r["count"], r["bytes"], r["dur_sum"]) for r in rows] == [("DtoH", 3, 600, 26_500)]
    assert not any("could not import" in n for n in json.loads(proc.stdout)["notes"])


@pytest.mark.parametrize("value, words", [(-5, "bytes -5 is not a byte count"), ("12", "bytes '12' is not a byte count"),
                                          ("dur", "dur -1 is not a duration")])
def test_bad_kineto_copy_values_are_one_line(value, words, tmp_path):
    copies = [(10.0, -1, 8)] if value == "dur" else [(10.0, 1.0, value)]
    path = _kineto(tmp_path / "k.json.gz", copies, (50.0, 1.0))
    for argv in (["summary", path], ["sql", path, "SELECT 1"]):
        one_line(run_cli("memq", *argv), 1, f"{path}: traceEvents[2] (gpu_memcpy", words)


def test_one_rule_for_the_allocation_holding_a_byte(tmp_path):
    """Two live libc blocks hold the copy's first source byte (a free was not traced): the latest started
    one is the copy's src_alloc_id and the mirror's primary allocation, not the one at the higher address."""
    pid, a, dev = 7, 0x10000, 0x900000000
    rows = [dict(kind=K.MALLOC, ts=1000, pid=pid, tid=pid, ptr=a + 16, size=64, api="malloc"),  # alloc 1
            dict(kind=K.MALLOC, ts=1100, pid=pid, tid=pid, ptr=a, size=128, api="malloc"),  # alloc 2: later, lower
            dict(kind=K.GPU_ALLOC, begin=1200, ts=1250, pid=pid, tid=pid, ptr=dev, size=64, mem=4, api="hipMalloc"),
            dict(kind=K.GPU_COPY, begin=2000, ts=2100, pid=pid, tid=pid, ptr=dev, src=a + 32, size=32, copy_kind=1,
                 api="hipMemcpy")]
    path = tmp_path / "rule.pftrace"
    write_trace([EventBatch.from_rows(rows)], TraceInfo(), path)
    with analyses.load(path) as engine:
        copy = engine.query("SELECT EXTRACT_ARG(arg_set_id, 'debug.src_alloc_id') AS a FROM slice "
                            "WHERE category = 'memq.copy'")
        mirrors = analyses.mirrors(engine)
    assert copy["a"].tolist() == [2]
    assert mirrors["src_alloc_id"].tolist() == [2] and mirrors["bytes"].tolist() == [32]


# -- 6. memq record: no session left behind ------------------------------------------------------------------
def _recording(fake_gpu, out: Path) -> tuple[subprocess.Popen, Path]:
    log = out.parent / "wait.jsonl"
    proc = subprocess.Popen([sys.executable, "-m", "ctf2perfetto", "record", "-o", str(out), "--api", "hip", "--",
                             str(fake_gpu.workload), "wait", str(log)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "ready\n"
    return proc, log


def _sessions() -> str:
    return subprocess.run(["lttng", "list"], capture_output=True, text=True, timeout=TIMEOUT_S).stdout


@pytest.mark.parametrize("signals, exit_code", [(["SIGHUP"], 129), (["SIGINT", "SIGTERM"], 42),
                                                (["SIGINT", "SIGINT"], 42)])
def test_record_survives_signals_and_cleans_up(signals, exit_code, fake_gpu, tmp_path):
    """A closed terminal (SIGHUP), SIGTERM after ^C, a second ^C: the command gets them, the session is
    destroyed and memq-record.json written all the same."""
    out = tmp_path / "trace"
    proc, _log = _recording(fake_gpu, out)
    for name in signals:
        proc.send_signal(getattr(signal, name))
        time.sleep(0.05)
    _, err = proc.communicate(timeout=TIMEOUT_S)
    assert proc.returncode == exit_code, err
    meta = json.loads((out / "memq-record.json").read_text())
    assert meta["exit_code"] == exit_code and meta["signals"] == signals
    assert meta["session"] not in _sessions()


def test_record_killed_leaves_no_session(fake_gpu, tmp_path):
    out = tmp_path / "trace"
    proc, log = _recording(fake_gpu, out)
    proc.kill()
    proc.wait(timeout=TIMEOUT_S)
    deadline = time.monotonic() + ISSUE_BOUND_S
    while not (out / "memq-record.json").exists():
        assert time.monotonic() < deadline, "the guardian did not clean up"
        time.sleep(0.1)
    meta = json.loads((out / "memq-record.json").read_text())
    try:
        assert meta["exit_code"] is None and "killed" in meta["warnings"][0]
        assert meta["session"] not in _sessions()
    finally:
        os.kill(json.loads(log.read_text().splitlines()[0])["pid"], signal.SIGTERM)  # the orphaned command


def _not_executable(directory: Path) -> Path:
    (directory / "noexec.sh").write_text("#!/bin/sh\n")
    return directory / "noexec.sh"


@pytest.mark.parametrize("make, code, words", [(_not_executable, 126, "not executable"),
                                               (lambda d: d, 126, "is a directory")])
def test_record_command_that_cannot_run(make, code, words, tmp_path):
    command = make(tmp_path)
    one_line(run_cli("memq", "record", "-o", tmp_path / "out", "--", command), code, str(command), words)
    assert not (tmp_path / "out").exists()


def test_record_failed_start_leaves_no_directory(tmp_path):
    proc = run_cli("memq", "record", "-o", tmp_path / "out", "--subbuf-size", "100G", "--", "/bin/true")
    one_line(proc, 1, "enable-channel", "--subbuf-size=100G")
    assert not (tmp_path / "out").exists()


# -- 7. the smaller ones ---------------------------------------------------------------------------------------
def test_unreadable_trace_file_is_one_line(converted, tmp_path):
    unreadable = tmp_path / "u.pftrace"
    unreadable.write_bytes(converted.read_bytes())
    unreadable.chmod(0)
    os.chmod(tmp_path, 0o755)
    for argv in (["annotate", unreadable, "-o", tmp_path / "a.pftrace"], ["summary", unreadable],
                 ["plot", unreadable, "-o", tmp_path / "p.png"]):
        one_line(run_cli("memq", *argv, unprivileged=True), 2, f"{unreadable}", "ermission denied")


@pytest.mark.parametrize("source", ["/dev/zero", "fifo"])
def test_inputs_that_never_end_are_refused(source, recorded, converted, tmp_path):
    """A device or a fifo given as a trace or profile would be read for ever (or block): one line, at once."""
    path = Path(source)
    if source == "fifo":
        path = tmp_path / "fifo"
        os.mkfifo(path)
    one_line(run_cli("ctf2perfetto", recorded, "-o", tmp_path / "x.pftrace", "--kineto", path), 2, str(path),
             "not a regular file")
    one_line(run_cli("memq", "summary", path), 2, str(path), "not a regular file")
    if source == "/dev/zero":
        one_line(run_cli("memq", "sql", converted, "--file", path), 2, str(path), "not a query file")
    assert not (tmp_path / "x.pftrace").exists()


def test_memq_open_serves_json_through_memqs_importer(tmp_path):
    """The UI's own JSON importer would drop the overlapping copy: memq open serves memq's conversion."""
    path = _kineto(tmp_path / "k.json.gz", [(10.0, 5.0, 100), (95.0, 20.0, 200)], (50.0, 60.0))
    proc = subprocess.Popen([sys.executable, "-m", "ctf2perfetto.cli.memq", "open", str(path), "--no-browser",
                             "--engine", "browser", "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first, url = proc.stdout.readline(), proc.stdout.readline()
        assert f"serving {path} (JSON, read by memq's importer)" in first
        trace_url = url.split("url=", 1)[1].split("&", 1)[0]
        with urllib.request.urlopen(trace_url, timeout=TIMEOUT_S) as reply:
            served = reply.read()
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=TIMEOUT_S)
    with open_trace(served) as tp:
        assert tp.query("SELECT count(*) AS n FROM slice WHERE category = 'gpu_memcpy'")["n"].tolist() == [2]


def test_memq_serve_reads_json_through_memqs_importer(tmp_path):
    """memq serve (and memq open's default engine) holds memq's conversion of a JSON trace: both copies."""
    from support.rpc_client import RpcSocket
    from ui.browser import start_memq_serve

    path = _kineto(tmp_path / "k.json.gz", [(10.0, 5.0, 100), (95.0, 20.0, 200)], (50.0, 60.0))
    server = start_memq_serve(path)
    try:
        ws = RpcSocket(server.port, origin=server.origin)
        try:
            assert ws.query("SELECT count(*) AS n FROM slice WHERE category = 'gpu_memcpy'")["n"].tolist() == [2]
        finally:
            ws.close()
    finally:
        code, err = server.stop()
    assert code == 0 and "Traceback" not in err, err


def test_memq_open_answers_only_its_own_host_and_sane_paths(converted, capfd):
    from ctf2perfetto.look.browser import UiServer

    with UiServer(converted, port=0) as server:
        def get(path: str, host: str) -> int:
            conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=TIMEOUT_S)
            conn.putrequest("GET", path, skip_host=True)
            conn.putheader("Host", host)
            conn.endheaders()
            status = conn.getresponse().status
            conn.close()
            return status

        port = server.port
        assert get("/", f"127.0.0.1:{port}") == 200 and get("/", f"localhost:{port + 1}") == 200
        assert get("/", f"attacker.example:{port}") == 403  # DNS rebinding
        assert get("/", "127.0.0.1.attacker.example") == 403
        assert get("/%00", f"127.0.0.1:{port}") == 400
        assert get("/%ff%fe", f"127.0.0.1:{port}") == 400
    assert "Traceback" not in capfd.readouterr().err


# -- fuzz ------------------------------------------------------------------------------------------------------
def test_fuzz_corrupted_traces(recorded, tmp_path):
    """FUZZ_CASES random corruptions (1-3 each: truncations, bit flips, packet header/context fields,
    missing files and dangling links, stray files, metadata and index damage), each converted with and
    without --salvage in one process: zero hangs, zero aborts, zero tracebacks or internal errors; a
    failure is one line, exit 1 or 2, and leaves no output."""
    seed = int(os.environ.get("MEMQ_FUZZ_SEED", time.strftime("%Y%m%d")))
    work = tmp_path / "work"
    work.mkdir()
    cmd = [sys.executable, "-m", "support.fuzz_run", str(recorded), str(seed), str(FUZZ_CASES), str(work)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]),
           "MEMQ_GUARD_SECONDS": "20"}
    # Bounded memory: a corruption that made something allocate without limit must fail here, not take
    # the machine's memory (the OOM killer would pick any process).
    results = run_fuzz_runner(cmd, env, seed, 1800,
                              preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (FUZZ_MEMORY, FUZZ_MEMORY)))
    assert len(results) == FUZZ_CASES
    bad = []
    for case in results:
        for run in case["runs"]:
            errors = [line for line in run["stderr"] if ": error: " in line]
            ok = (run["rc"] == 0 and not errors and run["output"]) or (
                run["rc"] in (1, 2) and len(run["stderr"]) == 1 and errors and not run["output"])
            if not ok or any("internal error" in line or "Traceback" in line for line in run["stderr"]):
                bad.append((case["mutations"], run))
    assert not bad, f"seed {seed}: {len(bad)} bad runs, first: {bad[0]}"
