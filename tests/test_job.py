"""The whole job: ranks, nodes and GPUs.

* A real 3-rank `torchrun` (gloo, CPU, a DataLoader worker per rank) recorded by `memq record`: memq:identity names
  each rank, its worker and the launcher, `memq summary DIR --format json` gives rows per rank 0, 1, 2 and the job,
  the launcher is no rank, a worker counts under its rank, and each rank's figures equal its processes analysed
  alone by the oracle (tests/oracle.py, from the decoded events).
* Two "nodes" (two recordings, each in a mount, UTS and time namespace of its own: its own host name, its own
  LTTng session daemon, and for the second a CLOCK_MONOTONIC 5000 s ahead): read together, the offset is removed
  and the stated uncertainty covers the real error, checked against the wall-clock times the program read around
  each call.
* Devices: the fake runtimes' UUID and PCI bus id per device (CUDA_VISIBLE_DEVICES maps ordinals to other GPUs).
"""
from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import cloudpickle
import pytest
from distributed import Client, LocalCluster

import oracle
from ctf2perfetto.analysis import jobcluster
from ctf2perfetto.convert.job import PID_BASE
from support.lttng import MEMQ, PROCESS_EVENTS, read_events, record
from support.rows import from_batches

FAKES = Path(__file__).resolve().parent / "fakes"
OFFSET_S = 5000  # node b's CLOCK_MONOTONIC is this far ahead of node a's


def memq_json(*args: str) -> dict:
    proc = subprocess.run([*MEMQ, *args, "--format", "json"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def sql(trace: Path, query: str) -> list[dict]:
    from ctf2perfetto.analysis.base import load

    with load(trace) as engine:
        return engine.rows(query).records()


def process_events(trace_dir: Path, pid: int) -> dict[str, list[dict]]:
    events = read_events(trace_dir, pids={pid}, prefix="memq:")
    return {name: [e for e in events if e["event"] == name] for name in PROCESS_EVENTS}


def decoded(trace_dir: Path):
    from ctf2perfetto.ctf.decode import decode

    with decode(trace_dir) as d:
        batches = list(d)
        return from_batches(batches, d.api_names), d.info


# --- a real torchrun job ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def torchrun_job(tmp_path_factory):
    out = tmp_path_factory.mktemp("torchrun") / "rec"
    rec = record(out, [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "3",
                       str(FAKES / "ddp_loop.py"), "4", "1"], timeout=600,
                 env={**os.environ, "TMPDIR": str(out.parent)})  # torchrun's torchelastic_* directories stay here
    trace = out.parent / "job.pftrace"
    proc = subprocess.run([*MEMQ, "convert", str(out), "-o", str(trace)], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr
    return rec, trace


def test_torchrun_ranks_are_recorded_named_and_summed_per_rank(torchrun_job) -> None:
    rec, trace = torchrun_job
    rows, info = decoded(rec.dir)
    # What each process recorded: torchrun's variables in the ranks, none in the launcher, which parents them.
    parents = {r["pid"]: r["ppid"] for r in info.identities}
    recorder = rec.meta["clock_readings"][0]["pid"]  # memq record: the command is its child

    def ours(pid: int) -> bool:  # the session also records other jobs traced at the same time
        for _ in range(16):
            if parents.get(pid) == recorder:
                return True
            pid = parents.get(pid)
        return False

    env = {r["pid"]: r["env"] for r in info.identities if ours(r["pid"])}
    # a rank's DataLoader worker is forked from it and inherits RANK: it is not that rank again
    rank_pids = {pid for pid, e in env.items() if "RANK" in e and env.get(parents[pid], {}).get("RANK") != e["RANK"]}
    ranks = {int(env[pid]["RANK"]): pid for pid in rank_pids}
    assert sorted(ranks) == [0, 1, 2]
    workers = {pid: parents[pid] for pid, e in env.items() if "RANK" in e and pid not in rank_pids}
    assert sorted(workers.values()) == sorted(rank_pids)  # one worker per rank, under it
    launcher = {parents[pid] for pid in ranks.values()}
    assert len(launcher) == 1 and "RANK" not in env[next(iter(launcher))]
    launcher_pid = next(iter(launcher))
    assert all(env[p]["WORLD_SIZE"] == "3" and env[p]["TORCHELASTIC_RUN_ID"] for p in ranks.values())
    host = info.identities[0]["host"]

    out = memq_json("summary", str(rec.dir))
    table = out["tables"]["by rank"]["rows"]
    by_rank = {r["rank"]: r for r in table if r["role"] == "rank"}
    assert sorted(by_rank) == [0, 1, 2]
    others = [r["role"] for r in table if r["rank"] is None]
    assert others[-1] == "job" and set(others[:-1]) <= {"launcher", "process"}  # torchrun may run helpers too
    assert [r["pid"] for r in table if r["role"] == "launcher"] == [launcher_pid]
    # Each rank's figures are its process's alone (the oracle over that process's events).
    per_pid = defaultdict(list)
    for row in rows:
        per_pid[row["pid"]].append(row)
    for rank, pid in ranks.items():
        got = by_rank[rank]
        members = [pid] + [w for w, parent in workers.items() if parent == pid]
        assert (got["pid"], got["node"], got["processes"]) == (pid, host, 2)
        kinds = [oracle.allocations_per_kind(oracle.build(per_pid[p])) for p in members]  # each process alone
        assert got["allocations"] == sum(k["count"] for kind in kinds for k in kind.values()) > 1000
        assert got["allocated_bytes"] == sum(k["bytes"] for kind in kinds for k in kind.values())
        small = [r for p in members for r in per_pid[p] if r["kind"] == oracle.K.HOST_SMALL]
        assert got["small_allocations"] == sum(r["aux"] for r in small) > 0
        assert got["small_bytes"] == sum(r["size"] for r in small)
    # The job: every process's, the launcher's included; the spread names its ranks.
    job = next(r for r in table if r["role"] == "job")
    everyone = oracle.allocations_per_kind(oracle.build(rows))
    assert job["allocations"] == sum(k["count"] for k in everyone.values())
    spread = {r["figure"]: r for r in out["tables"]["rank spread"]["rows"]}
    values = {rank: by_rank[rank]["allocated_bytes"] for rank in by_rank}
    top = max(values, key=lambda r: (values[r], -r))
    assert (spread["allocated_bytes"]["max"], spread["allocated_bytes"]["max_rank"]) == (values[top], top)
    assert spread["allocated_bytes"]["median"] == sorted(values.values())[1]
    # memq summary's per-process split lists every process with who it is.
    processes = {r["pid"]: r for r in out["tables"]["processes"]["rows"]}
    assert {processes[p]["rank"] for p in ranks.values()} == {0, 1, 2}
    assert processes[launcher_pid]["role"] == "launcher"
    assert {(processes[w]["role"], processes[w]["owner_rank"]) for w in workers} == \
        {("worker", int(env[parent]["RANK"])) for parent in workers.values()}

    # The trace names the processes by their place in the job.
    names = {r["pid"]: r["name"] for r in sql(trace, "SELECT pid, name FROM process WHERE pid > 0")}
    for rank, pid in ranks.items():
        assert names[pid] == f"rank {rank} (node {host}, pid {pid})"
    for worker, parent in workers.items():
        assert names[worker].startswith(f"rank {env[parent]['RANK']} worker ")
    assert names[launcher_pid].startswith("launcher ") and names[launcher_pid].endswith(f"(node {host}, pid "
                                                                                        f"{launcher_pid})")


def test_torchrun_other_analyses_by_rank_and_node(torchrun_job) -> None:
    _rec, trace = torchrun_job
    dup = memq_json("duplicated", str(trace))
    assert sorted(r["rank"] for r in dup["tables"]["by rank"]["rows"] if r["role"] == "rank") == [0, 1, 2]
    node = memq_json("redundant", str(trace), "--by", "node")
    rows = node["tables"]["by node"]["rows"]
    assert [r["ranks"] for r in rows if r["node"] != "job"] == ["0,1,2"]
    assert "redundant_share" not in rows[0]  # per node: sums only
    ranks = memq_json("redundant", str(trace), "--by", "rank")["tables"]["by rank"]["rows"]
    assert all(r["redundant_share"] == 0 for r in ranks if r["role"] == "rank")  # no GPU copies on the CPU


def test_by_rank_on_a_trace_without_ranks_is_one_clear_line(fake_hip_trace, tmp_path) -> None:
    proc = subprocess.run([*MEMQ, "summary", str(fake_hip_trace.dir), "--by", "rank"], capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "names no ranks" in proc.stderr.strip().splitlines()[-1]


# --- two nodes, two clocks ----------------------------------------------------------------------------------

NODE_SCRIPT = r'''
set -e
hostname "$1"
mount -t tmpfs memq-test /var/run/lttng
export HOME="$2" LTTNG_HOME="$2"
shift 2
rc=0
"$@" || rc=$?
if [ -f /var/run/lttng/lttng-sessiond.pid ]; then kill "$(cat /var/run/lttng/lttng-sessiond.pid)" || true; fi
sleep 0.3
exit $rc
'''


def on_node(name: str, home: Path, argv: list[str], monotonic_s: int = 0) -> subprocess.CompletedProcess:
    """Run `argv` as on another node: its own host name, LTTng daemons (a private /var/run/lttng: memq record
    starts a session daemon there, stopped after) and, with `monotonic_s`, a CLOCK_MONOTONIC (and BOOTTIME)
    that far ahead (a time namespace); REALTIME is the machine's, as NTP keeps it on real nodes."""
    home.mkdir(parents=True, exist_ok=True)
    clock = ["--time", f"--monotonic={monotonic_s}", f"--boottime={monotonic_s}"] if monotonic_s else []
    return subprocess.run(["unshare", "--mount", "--uts", *clock, "--fork", "sh", "-c", NODE_SCRIPT, "node", name,
                           str(home), *argv], capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def two_nodes(fake_gpu, tmp_path_factory):
    base = tmp_path_factory.mktemp("two_nodes")
    job = base / "job"
    marks = {}
    for name, offset in (("nodea", 0), ("nodeb", OFFSET_S)):
        marks[name] = base / f"marks-{name}.json"
        proc = on_node(name, base / f"home-{name}", [*MEMQ, "record", "-o", str(job / "%h"), "--", sys.executable,
                                                     str(FAKES / "clock_marks.py"), str(fake_gpu.dir),
                                                     str(marks[name]), "6"], offset)
        assert proc.returncode == 0, proc.stderr
    return job, {name: json.loads(path.read_text()) for name, path in marks.items()}


def test_two_nodes_merge_with_the_offset_removed(two_nodes, tmp_path) -> None:
    job, marks = two_nodes
    assert sorted(p.name for p in job.iterdir()) == ["nodea", "nodeb"]  # -o job/%h
    # The namespace really moved node b's clock: its program read MONOTONIC 5000 s ahead of node a's.
    gap = marks["nodeb"][0]["mono_before"] - marks["nodea"][0]["mono_before"]
    real_gap = marks["nodeb"][0]["before"] - marks["nodea"][0]["before"]
    assert abs(gap - real_gap - OFFSET_S * 10**9) < 10**9

    trace = tmp_path / "job.pftrace"
    proc = subprocess.run(["ctf2perfetto", str(job), "-o", str(trace)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert "uncertainty" in proc.stderr and "nodeb" in proc.stderr
    placed = sql(trace, """SELECT EXTRACT_ARG(arg_set_id, 'debug.node') AS node,
                                  EXTRACT_ARG(arg_set_id, 'debug.shift_ns') AS shift,
                                  EXTRACT_ARG(arg_set_id, 'debug.uncertainty_ns') AS unc
                           FROM slice WHERE category = 'memq.recording' ORDER BY node""")
    assert [p["node"] for p in placed] == ["nodea", "nodeb"]
    ref, other = placed
    assert ref["shift"] == 0 and 0 < ref["unc"] <= other["unc"]
    # The offset removed: node b moved back by 5000 s, within the stated uncertainty (µs here, however loaded).
    assert abs(other["shift"] + OFFSET_S * 10**9) <= other["unc"] < 10**7

    # Each traced call lands, on the trace's REALTIME clock, between the wall-clock readings its program took
    # around it, on both nodes, within the stated uncertainty.
    calls = sql(trace, """SELECT s.ts, s.dur, EXTRACT_ARG(s.arg_set_id, 'debug.size') AS size, p.name AS process
                          FROM slice s JOIN thread_track tt ON s.track_id = tt.id JOIN thread USING (utid)
                          JOIN process p USING (upid) WHERE s.name = 'hipMalloc'""")
    assert len(calls) == 12
    for name, unc in (("nodea", ref["unc"]), ("nodeb", other["unc"])):
        by_size = {c["size"]: c for c in calls if f"(node {name}," in c["process"]}
        assert len(by_size) == 6
        for mark in marks[name]:
            call = by_size[mark["size"]]
            assert mark["before"] - unc <= call["ts"] and call["ts"] + call["dur"] <= mark["after"] + unc

    # Both nodes' processes are apart (each its own pid in the trace), named by node; a trace pid reads as the
    # recording's index (node order) then the pid on its node, as the UI shows it after the name.
    procs = sql(trace, "SELECT pid, name FROM process WHERE name GLOB '* (node *'")
    assert {p["name"].split("(node ")[1].split(",")[0] for p in procs} >= {"nodea", "nodeb"}
    assert len({p["pid"] for p in procs}) == len(procs)
    for p in procs:
        node, real = p["name"].split("(node ")[1].rstrip(")").split(", pid ")
        assert p["pid"] == ["nodea", "nodeb"].index(node) * PID_BASE + int(real)
    # Each GPU track says whose node it is on (device numbers are the job's, one per GPU UUID).
    gpus = [r["name"] for r in sql(trace, "SELECT name FROM track WHERE name GLOB 'GPU * (*)'")]
    assert sorted(g.rsplit("node ", 1)[1].rstrip(")") for g in gpus) == ["nodea", "nodeb"]


def test_the_job_trace_in_the_ui_shows_each_node(two_nodes, tmp_path) -> None:
    """`memq open` of the two-node trace in headless Chromium: what a user sees is a process group per process,
    titled with its node (and, for node b, a trace pid that reads as its index then its pid), and each GPU track
    with its node."""
    from ui.browser import load_in_chromium, start_memq_open

    job, _marks = two_nodes
    trace = tmp_path / "job.pftrace"
    assert run("ctf2perfetto", str(job), "-o", str(trace), "-q").returncode == 0
    procs = sql(trace, "SELECT pid, name FROM process WHERE name GLOB '* (node *'")
    gpus = [r["name"] for r in sql(trace, "SELECT name FROM track WHERE name GLOB 'GPU * (*node *)'")]
    groups = [f"{p['name']} {p['pid']}" for p in procs]  # the UI titles a process group `name pid`
    assert {g.split("(node ")[1].split(",")[0] for g in groups} == {"nodea", "nodeb"} and len(gpus) == 2
    server = start_memq_open(trace)
    try:
        report = load_in_chromium(server.url, tmp_path / "job_two_nodes.png", groups + gpus)
    finally:
        code, _err = server.stop()
    print("screenshot:", tmp_path / "job_two_nodes.png")
    assert report["missing"] == [] and not report["pageErrors"] and code == 0, report


def test_two_nodes_analysed_by_node(two_nodes) -> None:
    job, _marks = two_nodes
    out = memq_json("summary", str(job))
    assert "by rank" not in out["tables"]  # no launcher gave ranks: no job tables by rank
    procs = out["tables"]["processes"]["rows"]
    assert {p["node"] for p in procs} >= {"nodea", "nodeb"}
    # --by node groups the processes of a job without ranks by node; each node's figures are its processes'.
    by_node = memq_json("summary", str(job), "--by", "node")["tables"]["by node"]["rows"]
    assert [r["node"] for r in by_node] == ["nodea", "nodeb", "job"]
    for row in by_node[:2]:
        mine = [p for p in procs if p["node"] == row["node"]]
        assert row["allocations"] == sum(p["allocations"] for p in mine) > 0
        assert row["copies"] == sum(p["copies"] for p in mine)
    assert by_node[2]["allocations"] == sum(p["allocations"] for p in procs)


def test_machine_ids_need_each_node_self_contained_in_this_trace_processor(tmp_path) -> None:
    """Why a job's nodes are kept apart by pid, not by Perfetto's machine id (TracePacket.machine_id): the
    trace_processor memq loads traces with reads machine ids (a machine's processes get their own upids), but
    keys track uuids, sequence state (interned names, default clock) and clock snapshots per machine. memq's
    writer puts every node's events on one sequence, interned once, with one clock snapshot: a node's event
    without the machine id misses its node's tracks, and one with it misses the sequence's names and clock.
    When this fails, the trace_processor changed: machine ids may then carry the nodes (docs/ARCHITECTURE.md)."""
    from ctf2perfetto.convert import clocks
    from ctf2perfetto.traceformat import names as TN
    from ctf2perfetto.traceformat import packets as P

    machine_id = 98  # TracePacket.machine_id (perfetto_trace.proto)

    def on(machine: int, packet: bytes) -> bytes:
        return P.record(packet + (P.uint_field(machine_id, machine) if machine else b""))

    start = 10**18
    out = [clocks.snapshot_record(clocks.ClockCorrespondence(0, start, None, "recorder")),
           P.record(P.sequence_start(TN.SEQ_MEMQ, TN.CLOCK_MONOTONIC, interned_entries=[("event_names", 1, "call")]))]
    for machine in (0, 1):  # the same pid and track uuids on both, as two nodes would have them
        for described in (P.descriptor(7, pid=100, process_name=f"m{machine}"), P.descriptor(8, pid=100, tid=101)):
            out.append(on(machine, P.packet(TN.SEQ_DESCRIPTORS, descriptor=described)))
    stamped = {0: 1000, 1: 2000, 2: 3000}  # machine 0's; machine 1's without, then with its id
    for ts in stamped.values():
        machine = 1 if ts == 3000 else 0
        out += [on(machine, P.packet(TN.SEQ_MEMQ, ts=ts, event=P.track_event(P.TYPE_SLICE_BEGIN, 8, name=1))),
                on(machine, P.packet(TN.SEQ_MEMQ, ts=ts + 10, event=P.track_event(P.TYPE_SLICE_END, 8)))]
    trace = tmp_path / "machines.pftrace"
    trace.write_bytes(b"".join(out))
    procs = sql(trace, "SELECT upid, name, machine_id FROM process WHERE pid = 100 ORDER BY upid")
    assert [(p["name"], p["machine_id"]) for p in procs] == [("m0", None), ("m1", 1)]  # one upid per machine
    slices = sql(trace, """SELECT s.ts - %d AS ts, s.name, p.machine_id FROM slice s JOIN thread_track tt
                           ON s.track_id = tt.id JOIN thread USING (utid) JOIN process p USING (upid)""" % start)
    # The machine-less events land on machine 0's track (the second, meant for machine 1, too: uuids are per
    # machine); machine 1's event lost its interned name and its clock (its ts is the raw MONOTONIC value).
    assert [(s["ts"], s["name"], s["machine_id"]) for s in slices if s["machine_id"] is None] == \
        [(1000, "call", None), (2000, "call", None)]
    lost = [s for s in slices if s["machine_id"] == 1]
    assert len(lost) == 1 and lost[0]["name"] is None and lost[0]["ts"] + start == 3000
    stats = {r["name"]: r["value"] for r in sql(trace, "SELECT name, value FROM stats WHERE value > 0")}
    assert stats.get("interned_data_tokenizer_errors", 0) >= 1


# --- the recordings of a job as Dask tasks (--workers / --scheduler) -------------------------------------------

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # `_DyingActor` runs on the workers


def run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=600)


def test_job_recordings_on_dask_give_the_serial_output(two_nodes, tmp_path) -> None:
    job, _marks = two_nodes
    serial, on_dask = tmp_path / "serial.pftrace", tmp_path / "dask.pftrace"
    assert run("ctf2perfetto", str(job), "-o", str(serial), "-q").returncode == 0
    got = run("ctf2perfetto", str(job), "-o", str(on_dask), "-q", "--workers", "2")
    assert got.returncode == 0, got.stderr
    assert on_dask.read_bytes() == serial.read_bytes()  # the same trace, byte for byte
    expect = {name: memq_json(name, str(job)) for name in ("summary", "redundant")}
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", protocol="tcp",
                      dashboard_address=":0") as lc:
        for name, serial_out in expect.items():
            assert memq_json(name, str(job), "--scheduler", lc.scheduler_address) == serial_out
        with Client(lc.scheduler_address) as client:  # the recordings were decoded there, by actors of its workers
            assert client.run_on_scheduler(lambda dask_scheduler: "RecordingActor" in dask_scheduler.task_prefixes)
    assert {r["node"] for r in expect["summary"]["tables"]["processes"]["rows"]} >= {"nodea", "nodeb"}
    # One recording: --workers does not apply (one line, exit 2).
    for argv in (["ctf2perfetto", str(job / "nodea"), "-o", str(tmp_path / "one.pftrace")],
                 [*MEMQ, "summary", str(job / "nodea")]):
        got = run(*argv, "--workers", "2")
        assert got.returncode == 2 and "Traceback" not in got.stderr and len(got.stderr.strip().splitlines()) == 1
        assert "not a directory of several recordings" in got.stderr
    # Nothing there: said as such, not as a directory of the wrong kind.
    for argv in (["ctf2perfetto", str(tmp_path / "absent"), "-o", str(tmp_path / "none.pftrace")],
                 [*MEMQ, "summary", str(tmp_path / "absent")]):
        got = run(*argv, "--workers", "2")
        assert got.returncode == 2 and got.stderr.strip().splitlines() == [
            f"{'ctf2perfetto' if argv[0] == 'ctf2perfetto' else 'memq'}: error: {tmp_path / 'absent'}: "
            "no such trace file or directory"], got.stderr


def test_job_report_on_dask_is_the_serial_page(two_nodes, tmp_path) -> None:
    """`memq report JOB_DIR --scheduler ADDRESS | --workers N`: the recordings decoded on the cluster, the page
    byte for byte the serial one; on one recording the options do not apply (one line, exit 2)."""
    job, _marks = two_nodes
    pages = {how: tmp_path / f"{how}.html" for how in ("serial", "scheduler", "workers")}
    got = run(*MEMQ, "report", str(job), "-o", str(pages["serial"]))
    assert got.returncode == 0, got.stderr
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", protocol="tcp",
                      dashboard_address=":0") as lc:
        got = run(*MEMQ, "report", str(job), "-o", str(pages["scheduler"]), "--scheduler", lc.scheduler_address)
        assert got.returncode == 0, got.stderr
        with Client(lc.scheduler_address) as client:  # the recordings were decoded there, by actors of its workers
            assert client.run_on_scheduler(lambda dask_scheduler: "RecordingActor" in dask_scheduler.task_prefixes)
    got = run(*MEMQ, "report", str(job), "-o", str(pages["workers"]), "--workers", "2")
    assert got.returncode == 0, got.stderr
    serial = pages["serial"].read_text()
    assert 'data-figure="red_count"' in serial  # a page of figures (the job's copies carry addresses)
    assert pages["scheduler"].read_text() == serial and pages["workers"].read_text() == serial
    got = run(*MEMQ, "report", str(job / "nodea"), "-o", str(tmp_path / "one.html"), "--workers", "2")
    assert got.returncode == 2 and "Traceback" not in got.stderr and len(got.stderr.strip().splitlines()) == 1
    assert "not a directory of several recordings" in got.stderr and not (tmp_path / "one.html").exists()


def test_a_batch_is_sent_as_it_was() -> None:
    import numpy as np

    from ctf2perfetto.events import EventBatch

    for n in (0, 1, 5):
        batch = EventBatch.empty(n, ["malloc"])
        batch.columns["ts"][:] = np.arange(n) + 10**18  # varies
        batch.columns["ptr"][:] = 2**64 - 1  # one value throughout, past int64
        batch.columns["size"][:] = np.arange(n) % 2  # varies unless n <= 1
        sent = jobcluster.packed(batch)
        if n > 1:
            assert isinstance(sent[1]["ptr"], tuple) and not isinstance(sent[1]["ts"], tuple)
        got = jobcluster.unpacked(pickle.loads(pickle.dumps(sent)))
        assert list(got.columns) == list(batch.columns) and got.api_names == batch.api_names
        for name, column in batch.columns.items():
            assert got[name].dtype == column.dtype and np.array_equal(got[name], column)


DYING = "MEMQ_TEST_DYING"  # the marker file's path, for the workers (a LocalCluster's inherit the environment)


class _DyingActor(jobcluster.RecordingActor):
    """A RecordingActor that ends its worker process when asked node b's first batch: once (the marker file then
    exists), or every time (the marker's path ends in `always`)."""

    def next(self) -> bytes:
        marker = Path(os.environ[DYING])
        if self.decoding.path.name == "nodeb" and (marker.name == "always" or not marker.exists()):
            marker.touch()
            os._exit(3)
        return super().next()


def test_a_dead_worker_decoding_a_recording_is_replaced_once(two_nodes, tmp_path, monkeypatch) -> None:
    from ctf2perfetto.analysis import cluster
    from ctf2perfetto.errors import MemqError
    from ctf2perfetto.pipeline import convert

    job, _marks = two_nodes
    convert(job, tmp_path / "serial.pftrace")
    monkeypatch.setattr(jobcluster, "RecordingActor", _DyingActor)
    monkeypatch.setenv(DYING, str(tmp_path / "died"))
    with cluster.scheduled(workers=2):
        convert(job, tmp_path / "retried.pftrace")
    assert (tmp_path / "died").exists()  # a worker died
    assert (tmp_path / "retried.pftrace").read_bytes() == (tmp_path / "serial.pftrace").read_bytes()
    monkeypatch.setenv(DYING, str(tmp_path / "always"))
    with cluster.scheduled(workers=2), pytest.raises(MemqError, match=r"nodeb: its Dask worker died again after a "
                                                                      r"retry"):
        convert(job, tmp_path / "never.pftrace")
    assert not (tmp_path / "never.pftrace").exists()


# --- devices ------------------------------------------------------------------------------------------------

def test_devices_are_named_by_uuid_and_bus_id(fake_gpu, tmp_path) -> None:
    env = dict(__import__("os").environ, CUDA_VISIBLE_DEVICES="3,1")
    rec = record(tmp_path / "t", [str(fake_gpu.workload), "cuda", str(tmp_path / "log")], env=env)
    pid = json.loads((tmp_path / "log").read_text().splitlines()[0])["pid"]
    devices = process_events(rec.dir, pid)["memq:device"]
    # CUDA_VISIBLE_DEVICES=3,1: device 0 is the fourth GPU (bus 0x78), device 1 the second (0x38).
    assert [(d["device"], d["pci_bus_id"]) for d in devices] == [(0, "0000:78:00.0"), (1, "0000:38:00.0")]
    uuids = [d["uuid"] for d in devices]
    assert all(u.startswith("GPU-") and len(u) == 40 for u in uuids) and len(set(uuids)) == 2
    ident = process_events(rec.dir, pid)["memq:identity"]
    # once at start-up, once more by the first call or the exit (the first may be lost before the session is ready)
    assert 1 <= len(ident) <= 2 and ident[0]["host"] and ident[0]["ppid"] > 0
    assert all({k: e[k] for k in ("ppid", "host", "env")} == {k: ident[0][k] for k in ("ppid", "host", "env")}
               for e in ident)
    trace = tmp_path / "t.pftrace"
    assert subprocess.run(["ctf2perfetto", str(rec.dir), "-o", str(trace)], capture_output=True).returncode == 0
    tracks = {r["name"] for r in sql(trace, "SELECT name FROM track WHERE name GLOB 'GPU *'")}
    assert {"GPU 0 (0000:78:00.0)", "GPU 1 (0000:38:00.0)"} <= tracks
    used = sql(trace, "INCLUDE PERFETTO MODULE memq.job; SELECT DISTINCT gpu_uuid FROM memq_process_gpu")
    assert {u["gpu_uuid"] for u in used} <= set(uuids) and used


# --- who is who (convert/identity.py), on hand-written records ---------------------------------------------

def test_roles_workers_launcher_and_a_foreign_job() -> None:
    from ctf2perfetto.convert.identity import identify

    def ident(pid, ppid, host="a12", **env):
        return {"pid": pid, "ppid": ppid, "host": host, "env": {k: str(v) for k, v in env.items()}}

    records = [
        ident(10, 1),                                        # torchrun, child of memq record (pid 1)
        ident(11, 10, RANK=0, WORLD_SIZE=2), ident(12, 10, RANK=1, WORLD_SIZE=2),
        ident(13, 12, RANK=1), ident(14, 13),                # rank 1's data-loader worker and its child
        ident(20, 1, SLURM_PROCID=5, SLURM_JOB_ID=77),       # a Slurm task: rank 5, job 77
        ident(30, 99, RANK=0),                               # another job's rank 0, traced by its own memq record
        ident(40, 1, host="b07", RANK=1),                    # same pid tree numbers on another node: a rank there
    ]
    got = identify(records, {10: "torchrun"}, recorders={1})
    assert {p: (i.role, i.owner_rank) for p, i in got.items()} == {
        10: ("launcher", None), 11: ("rank", 0), 12: ("rank", 1), 13: ("worker", 1), 14: ("worker", 1),
        20: ("rank", 5), 30: ("process", None), 40: ("rank", 1)}
    assert got[20].job_id == "77" and got[11].world_size == 2
    assert got[10].name() == "launcher torchrun (node a12, pid 10)"
    assert got[13].name() == "rank 1 worker (node a12, pid 13)"
    assert got[12].name() == "rank 1 (node a12, pid 12)"
    # Without the recorders' pids every process with a rank counts (older recordings).
    assert identify(records)[30].role == "rank"


def test_processes_shown_other_gpus_land_on_their_own_gpu_tracks(fake_gpu, tmp_path) -> None:
    # Two processes, each shown two other GPUs (CUDA_VISIBLE_DEVICES), each calls them devices 0 and 1: on the
    # timeline they are four GPUs, by UUID, each with its bus id, and each process's allocations count on its own.
    work = f"{fake_gpu.workload} cuda"
    rec = record(tmp_path / "t", ["sh", "-c", f"CUDA_VISIBLE_DEVICES=2,3 {work} {tmp_path}/a && "
                                              f"CUDA_VISIBLE_DEVICES=0,1 {work} {tmp_path}/b"])
    trace = tmp_path / "t.pftrace"
    assert subprocess.run(["ctf2perfetto", str(rec.dir), "-o", str(trace)], capture_output=True).returncode == 0
    pids = [json.loads((tmp_path / n).read_text().splitlines()[0])["pid"] for n in ("a", "b")]
    gpus = {(r["pid"], r["device"], r["pci_bus_id"]) for r in sql(trace, """INCLUDE PERFETTO MODULE memq.job;
        SELECT p.pid, g.device, g.pci_bus_id FROM memq_process_gpu g JOIN process p USING (upid)""")}
    assert {(pid, dev, bus) for pid, dev, bus in gpus if pid == pids[0]} <= {(pids[0], 0, "0000:58:00.0"),
                                                                          (pids[0], 1, "0000:78:00.0")}
    assert {(pid, dev, bus) for pid, dev, bus in gpus if pid == pids[1]} <= {(pids[1], 2, "0000:18:00.0"),
                                                                          (pids[1], 3, "0000:38:00.0")}
    assert {pid for pid, _, _ in gpus} == set(pids)
    tracks = {r["name"] for r in sql(trace, "SELECT name FROM track WHERE name GLOB 'GPU *'")}
    assert {"GPU 0 (0000:58:00.0)", "GPU 2 (0000:18:00.0)"} <= tracks
    device_alloc = sql(trace, """INCLUDE PERFETTO MODULE memq.allocations;
        SELECT DISTINCT p.pid, a.device FROM memq_allocation a JOIN process p USING (upid) WHERE a.kind = 'device'""")
    assert {r["device"] for r in device_alloc if r["pid"] == pids[0]} <= {0, 1}
    assert {r["device"] for r in device_alloc if r["pid"] == pids[1]} <= {2, 3}
    assert len(device_alloc) >= 2


def test_more_recordings_than_pids_hold_is_one_line(tmp_path) -> None:
    from ctf2perfetto.convert.job import MAX_RECORDINGS, PID_LIMIT

    top = [i * PID_BASE + PID_LIMIT - 1 for i in (MAX_RECORDINGS - 1, MAX_RECORDINGS)]  # the last recording's top pid
    assert top[0] <= 2**31 - 1 < top[1]  # fits in int32, one more recording would not
    for i in range(MAX_RECORDINGS + 1):
        node = tmp_path / "job" / f"node{i:03d}"
        node.mkdir(parents=True)
        (node / "memq-record.json").write_text("{}")
    proc = subprocess.run(["ctf2perfetto", str(tmp_path / "job"), "-o", str(tmp_path / "job.pftrace")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert f"{MAX_RECORDINGS + 1} recordings; one trace holds at most {MAX_RECORDINGS}" in proc.stderr


def test_output_patterns_name_host_rank_and_job(tmp_path) -> None:
    from ctf2perfetto.capture.outdir import expand_output
    from ctf2perfetto.errors import UsageError

    env = {"SLURM_PROCID": "7", "SLURM_JOB_ID": "4242"}
    assert expand_output(Path("job/%h/r%r-%j-100%%"), env, host="a12") == Path("job/a12/r7-4242-100%")
    assert expand_output(Path("job/%r"), {"RANK": "3", "SLURM_PROCID": "7"}) == Path("job/3")  # torchrun's first
    assert expand_output(Path("plain/dir"), {}) == Path("plain/dir")
    for bad, says in (("job/%r", "%r needs a rank"), ("job/%x", "unknown pattern %x"), ("job/%j", "%j needs a job id")):
        with pytest.raises(UsageError, match=says):
            expand_output(Path(bad), {})
    with pytest.raises(UsageError, match="cannot be a directory name"):
        expand_output(Path("job/%h"), {}, host="../etc")
    # memq record itself: a bad pattern is one line and exit 2, before any session
    proc = subprocess.run([*MEMQ, "record", "-o", str(tmp_path / "%r"), "--", "true"], capture_output=True, text=True,
                          env={k: v for k, v in __import__("os").environ.items() if k not in ("RANK", "SLURM_PROCID",
                               "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK")}, timeout=120)
    assert proc.returncode == 2 and "%r needs a rank" in proc.stderr and "Traceback" not in proc.stderr
