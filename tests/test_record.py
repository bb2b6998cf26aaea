"""`memq record` + the preload library on the fake HIP/CUDA runtimes, read back with babeltrace2.

Each workload logs every runtime call it makes (arguments, returned pointers,
results, the current device, and for frees the size and kind of what it
frees); the recorded memq events of its pid must be exactly that sequence.
"""
from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import termios
from pathlib import Path

import pytest

from support.lttng import HOST_EVENTS, PROCESS_EVENTS, assert_events_match, call_events, read_events, read_worklog, \
    record, record_workload

def process_events(trace_dir: Path, pid: int) -> dict[str, list[dict]]:
    events = read_events(trace_dir, pids={pid}, prefix="memq:")
    return {name: [e for e in events if e["event"] == name] for name in PROCESS_EVENTS}


def test_hip_workload_is_recorded_call_by_call(fake_hip_trace) -> None:
    calls = fake_hip_trace.calls
    assert len({c["api"] for c in calls}) == 41  # every wrapped HIP function
    assert_events_match(call_events(fake_hip_trace.dir, fake_hip_trace.pid), calls)
    per_process = process_events(fake_hip_trace.dir, fake_hip_trace.pid)
    assert [c["where"] for c in per_process["memq:clock"]] == ["start", "end"]
    devices = [(d["runtime_label"], d["device"], d["name"], d["integrated"], d["unified_memory"])
               for d in per_process["memq:device"]]
    assert devices == [("hip", 0, "Fake HIP GPU 0", 0, 0), ("hip", 1, "Fake HIP GPU 1", 0, 0)]


def test_ip_context_is_the_applications_call_site(fake_hip_trace) -> None:
    """The `ip` of a memq event lies in the code that called the runtime (libhipwork.so), not in the wrapper."""
    events = read_events(fake_hip_trace.dir, pids={fake_hip_trace.pid})
    binaries = [(e["baddr"], e["baddr"] + e["memsz"], e["path"]) for e in events if e["event"] == "memq:lib_load"]
    calls = [e for e in events if e["event"].startswith("memq:") and e["event"] not in PROCESS_EVENTS + HOST_EVENTS]

    def binary_of(ip: int) -> str:
        return next(Path(path).name for lo, hi, path in binaries if lo <= ip < hi)

    assert {binary_of(e["ip"]) for e in calls} == {"libhipwork.so"}


def test_cuda_workload_is_recorded_call_by_call(fake_cuda_trace) -> None:
    calls = fake_cuda_trace.calls
    assert len({c["api"] for c in calls}) == 38  # every wrapped CUDA function, _ptds/_ptsz and _v2 included
    assert_events_match(call_events(fake_cuda_trace.dir, fake_cuda_trace.pid), calls)


def test_record_json_describes_the_session(fake_hip_trace, fake_gpu) -> None:
    meta = fake_hip_trace.recording.meta
    assert meta["exit_code"] == 0 and meta["discarded_events"] == 0
    assert meta["command"][0] == str(fake_gpu.workload)
    start, end = meta["clock_readings"]
    assert (start["where"], end["where"]) == ("start", "end")
    for key in ("realtime", "monotonic", "boottime"):
        assert start[key] < end[key]
    # The workload's own clock reading lies between the recorder's two.
    clock = process_events(fake_hip_trace.dir, fake_hip_trace.pid)["memq:clock"][0]
    assert start["monotonic"] < clock["monotonic_ns"] < end["monotonic"]
    assert abs((clock["realtime_ns"] - clock["monotonic_ns"]) - (start["realtime"] - start["monotonic"])) < 50_000_000
    assert set(meta["enabled"]["contexts"]) == {"vpid", "vtid", "ip"}
    assert any("libmemq_preload.so" in p for p in meta["preload"])
    assert meta["events"] == len(read_events(fake_hip_trace.dir))
    assert "0 lost events" in fake_hip_trace.recording.stderr


def test_cuda13_signatures_and_unified_device(fake_gpu, tmp_path) -> None:
    """CUDA 13 prefetch/advise take a cudaMemLocation: forwarded intact, device decoded from it."""
    env = {**os.environ, "FAKE_CUDA_VERSION": "13000", "FAKE_GPU_UNIFIED": "1", "FAKE_GPU_COUNT": "3"}
    run = record_workload(fake_gpu, tmp_path / "trace", "cuda", api="cuda", env=env)
    assert_events_match(call_events(run.dir, run.pid), run.calls)
    devices = process_events(run.dir, run.pid)["memq:device"]
    assert [(d["runtime_label"], d["device"], d["integrated"], d["unified_memory"]) for d in devices] == [
        ("cuda", 0, 1, 1), ("cuda", 1, 1, 1), ("cuda", 2, 1, 1)]


def test_python_ctypes_rtld_local_runtime(fake_gpu, tmp_path) -> None:
    """The runtime is only in a local scope (dlsym(RTLD_NEXT) fails): the wrapper still finds it."""
    run = record_workload(fake_gpu, tmp_path / "trace", "hip", api="hip", python=True)
    assert run.pid != os.getpid()
    assert_events_match(call_events(run.dir, run.pid), run.calls)


def test_api_selects_the_runtime(fake_gpu, tmp_path) -> None:
    script = (f"{fake_gpu.workload} hip {tmp_path / 'hip.jsonl'} && "
              f"{fake_gpu.workload} cuda {tmp_path / 'cuda.jsonl'}")
    rec = record(tmp_path / "trace", ["/bin/sh", "-c", script], api="hip")
    hip, cuda = read_worklog(tmp_path / "hip.jsonl"), read_worklog(tmp_path / "cuda.jsonl")
    assert_events_match(call_events(rec.dir, hip[0]["pid"]), hip)
    assert call_events(rec.dir, cuda[0]["pid"]) == []
    assert process_events(rec.dir, cuda[0]["pid"])["memq:device"] == []
    assert read_events(rec.dir, pids={hip[0]["pid"]}, prefix="lttng_ust_libc:") == []
    assert rec.meta["enabled"]["apis"] == ["hip"]


def test_threads_blocking_mode_loses_nothing(fake_gpu, tmp_path) -> None:
    """8 threads x 10,000 calls: every event recorded, every free sized, output unchanged."""
    argv = [str(fake_gpu.workload), "stress", "8", "2500"]
    plain = subprocess.run(argv, capture_output=True, text=True, check=True)
    rec = record(tmp_path / "trace", argv, api="hip", mode="blocking")
    assert rec.stdout == plain.stdout and "calls 80000" in plain.stdout
    assert rec.meta["discarded_events"] == 0
    pid = int(next(line for line in rec.stderr.splitlines() if line.startswith("pid "))[4:])
    calls = call_events(rec.dir, pid)
    assert len(calls) == 80_000
    by_thread: dict[int, list[dict]] = {}
    for e in calls:
        by_thread.setdefault(e["vtid"], []).append(e)
    assert sorted(len(v) for v in by_thread.values()) == [10_000] * 8
    for seq in by_thread.values():
        assert [e["event"] for e in seq] == ["memq:alloc", "memq:set", "memq:copy", "memq:free"] * 2500
        for alloc, fill, copy, free in zip(*[iter(seq)] * 4):
            assert alloc["ptr"] == fill["dst"] == copy["src"] == free["ptr"]
            assert alloc["size"] == fill["bytes"] == copy["bytes"] == free["size"]
            assert free["mem_kind_label"] == "device" and free["result"] == 0


def test_discard_mode_counts_what_it_loses(fake_gpu, tmp_path, bt2) -> None:
    """Tiny buffers, no blocking: events are lost, and every report of the loss agrees."""
    argv = [str(fake_gpu.workload), "stress", "8", "2500"]
    rec = record(tmp_path / "trace", argv, api="hip", mode="discard", extra=("--subbuf-size", "4k", "--num-subbuf", "2"))
    meta = rec.meta
    assert meta["enabled"]["mode"] == "discard" and meta["enabled"]["channel"]["blocking_timeout_us"] == 0
    # Each count is a delta of LTTng's cumulative 64-bit discarded counter, which can go backwards under this
    # contention (the delta then wraps): the loss is the net change, the sum modulo 2**64.
    lost_messages = sum(msg.count for msg in bt2.TraceCollectionMessageIterator(str(rec.dir))
                        if type(msg) is bt2._DiscardedEventsMessageConst) % (1 << 64)
    assert meta["discarded_events"] > 0 and lost_messages == meta["discarded_events"]
    assert f"{meta['discarded_events']:,} lost events" in rec.stderr and "WARNING" in rec.stderr
    pid = int(next(line for line in rec.stderr.splitlines() if line.startswith("pid "))[4:])
    assert len(call_events(rec.dir, pid)) < 80_000
    assert "calls 80000" in rec.stdout  # the program itself ran to completion


def test_fork_child_recorded_under_its_own_pid(fake_gpu, tmp_path) -> None:
    log = tmp_path / "fork.jsonl"
    rec = record(tmp_path / "trace", [str(fake_gpu.workload), "fork", str(log)], api="hip")
    calls = read_worklog(log)
    parent, child = calls[0]["pid"], calls[1]["pid"]
    assert parent != child
    for pid in (parent, child):
        assert_events_match(call_events(rec.dir, pid), [c for c in calls if c["pid"] == pid])
        assert [c["where"] for c in process_events(rec.dir, pid)["memq:clock"]] == ["start", "end"]
    # The child frees the parent's allocation: the size comes from the table it inherited.
    assert call_events(rec.dir, child)[-1]["size"] == 12345


def test_crashing_program_keeps_its_trace(fake_gpu, tmp_path) -> None:
    log = tmp_path / "crash.jsonl"
    rec = record(tmp_path / "trace", [str(fake_gpu.workload), "crash", str(log)], api="hip", check=False)
    assert rec.returncode == 128 + 6  # SIGABRT, as a shell reports it
    assert rec.meta["exit_code"] == 134
    calls = read_worklog(log)
    assert_events_match(call_events(rec.dir, calls[0]["pid"]), calls)


def test_interrupt_is_forwarded_and_session_cleaned_up(fake_gpu, tmp_path) -> None:
    log = tmp_path / "wait.jsonl"
    cmd = [sys.executable, "-m", "ctf2perfetto", "record", "-o", str(tmp_path / "trace"), "--api", "hip", "--",
           str(fake_gpu.workload), "wait", str(log)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "ready\n"
    proc.send_signal(2)  # what Ctrl-C sends
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 42, err
    calls = read_worklog(log)
    assert calls[-1] == {"signal": 2}
    assert_events_match(call_events(tmp_path / "trace", calls[0]["pid"]), calls[:-1])
    session = Path(tmp_path / "trace" / "memq-record.json").read_text()
    listing = subprocess.run(["lttng", "list"], capture_output=True, text=True).stdout
    assert json_session(session) not in listing


def test_ctrl_c_on_a_terminal_interrupts_the_command(fake_gpu, tmp_path) -> None:
    """On a terminal the command gets the foreground: ^C interrupts it, memq lives on to stop the session."""
    log = tmp_path / "wait.jsonl"
    master, slave = os.openpty()

    def controlling_tty() -> None:  # a new session whose terminal is the pty, as in a terminal window
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    cmd = [sys.executable, "-m", "ctf2perfetto", "record", "-o", str(tmp_path / "trace"), "--api", "hip", "--",
           str(fake_gpu.workload), "wait", str(log)]
    proc = subprocess.Popen(cmd, stdin=slave, stdout=slave, stderr=slave, start_new_session=True,
                            preexec_fn=controlling_tty)
    os.close(slave)
    seen = b""
    while b"ready" not in seen:
        seen += os.read(master, 1024)
    os.write(master, b"\x03")  # ^C: the terminal signals its foreground process group
    assert proc.wait(timeout=60) == 42
    output = b""
    try:
        while chunk := os.read(master, 4096):
            output += chunk
    except OSError:  # EIO: the last process holding the terminal is gone
        pass
    os.close(master)
    calls = read_worklog(log)
    assert calls[-1] == {"signal": 2}
    assert b"memq record: recording" in seen + output  # the terminal start line
    assert b"command exited with 42" in output


def json_session(text: str) -> str:
    import json

    return json.loads(text)["session"]


def run_memq(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ctf2perfetto", "record", *args], capture_output=True, text=True,
                          env=env, timeout=120)


def test_command_not_found_exits_127(tmp_path) -> None:
    proc = run_memq("-o", str(tmp_path / "t"), "--", "no-such-command-memq")
    assert proc.returncode == 127
    assert proc.stderr.strip().splitlines() == ["memq: error: no-such-command-memq: command not found"]


def test_non_empty_output_needs_force(fake_gpu, tmp_path) -> None:
    out = tmp_path / "t"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    proc = run_memq("-o", str(out), "--", "/bin/true")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert "not empty" in proc.stderr and "--force" in proc.stderr
    rec = record(out, ["/bin/true"], api="libc", force=True)
    assert rec.meta["exit_code"] == 0 and (out / "keep.txt").read_text() == "mine"


@pytest.mark.parametrize("args, message", [
    (["--api", "hip,opencl", "--", "/bin/true"], "--api"),
    (["--mode", "overwrite", "--", "/bin/true"], "--mode"),
    (["--subbuf-size", "lots", "--", "/bin/true"], "--subbuf-size"),
    (["--host-source", "glibc", "--", "/bin/true"], "--host-source"),
    (["--host-min-size", "4 KiB", "--", "/bin/true"], "--host-min-size"),
    ([], "no command"),
])
def test_bad_options_are_one_line_usage_errors(tmp_path, args, message) -> None:
    proc = run_memq("-o", str(tmp_path / "t"), *args)
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and message in proc.stderr


def test_unwritable_output_and_missing_lttng(tmp_path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    proc = run_memq("-o", str(blocker / "sub"), "--", "/bin/true")
    assert proc.returncode == 1 and len(proc.stderr.strip().splitlines()) == 1
    assert str(blocker / "sub") in proc.stderr
    proc = run_memq("-o", str(tmp_path / "t"), "--", "/bin/true", env={**os.environ, "PATH": str(tmp_path)})
    assert proc.returncode == 1 and len(proc.stderr.strip().splitlines()) == 1
    assert "apt-get install lttng-tools" in proc.stderr
