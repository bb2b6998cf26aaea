"""The parts of a recording on Dask (`--parts SEC --workers N | --scheduler ADDRESS`): the serial output, byte for byte.

Real `distributed.LocalCluster`s of two worker processes over TCP on 127.0.0.1: the command line's own
(`--workers 2`), and one the test starts and names with `--scheduler` / DASK_SCHEDULER_ADDRESS. A worker that dies
while converting a part is replaced once (the figures are still the serial ones); one that dies again fails with
one line naming the part.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import cloudpickle
import pytest
from distributed import Client, LocalCluster

from ctf2perfetto.analysis import cluster, parts
from ctf2perfetto.analysis.redundant import redundant_of_parts
from ctf2perfetto.errors import MemqError
from ctf2perfetto.pipeline import convert
from support.lttng import record

REPO = Path(__file__).resolve().parents[1]
ANALYSES = ("redundant", "summary")


def memq(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["memq", *argv], capture_output=True, text=True, timeout=600, env=env)


@pytest.fixture(scope="module")
def offload(fake_gpu, tmp_path_factory):
    """The offload example, 24 steps on the fake HIP runtime: mirrors alive across every cut."""
    argv = [sys.executable, str(REPO / "examples" / "hip_offload.py"), "--hip-lib",
            str(fake_gpu.dir / "libamdhip64.so"), "--steps", "24", "--weights-mib", "1"]
    return record(tmp_path_factory.mktemp("offload") / "trace", argv, api="hip,libc")


@pytest.fixture(scope="module")
def every(offload) -> str:
    """A part length that cuts the recording into three parts or more."""
    length = parts.recording_length_ns(offload.dir)
    for share in (4, 8, 16, 32, 64):  # the loop runs after a start without copies: how long depends on the load
        every = f"{length / share / 1e9:.9f}"
        if len(parts.plan(offload.dir, float(every)).spans) >= 3:
            return every
    raise AssertionError("no part length cuts the recording in three")


@pytest.fixture(scope="module")
def serial(offload, every) -> dict[str, str]:
    out = {}
    for name in ANALYSES:
        got = memq(name, str(offload.dir), "--parts", every, "--format", "json")
        assert got.returncode == 0, got.stderr
        assert json.loads(got.stdout)["tables"]
        out[name] = got.stdout
    return out


@pytest.fixture(scope="module")
def local_cluster():
    """A cluster the commands join: two worker processes, TCP on 127.0.0.1."""
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", protocol="tcp",
                      dashboard_address=":0") as lc:
        assert lc.scheduler_address.startswith("tcp://127.0.0.1:")
        yield lc


def test_workers_give_the_serial_output(offload, every, serial):
    got = memq("redundant", str(offload.dir), "--parts", every, "--workers", "2", "--format", "json")
    assert got.returncode == 0, got.stderr
    assert got.stdout == serial["redundant"]
    assert len(json.loads(got.stdout)["tables"]["redundant"]["rows"]) > 1


def test_an_existing_cluster_gives_the_serial_output(offload, every, serial, local_cluster):
    got = memq("summary", str(offload.dir), "--parts", every, "--scheduler", local_cluster.scheduler_address,
               "--format", "json")
    assert got.returncode == 0, got.stderr
    assert got.stdout == serial["summary"]
    with Client(local_cluster.scheduler_address) as client:  # the parts ran there, as actors of its workers
        assert client.run_on_scheduler(lambda dask_scheduler: "PartActor" in dask_scheduler.task_prefixes)


def test_workers_need_parts(offload):
    got = memq("redundant", str(offload.dir), "--workers", "2")
    assert got.returncode == 2 and "--parts" in got.stderr and "Traceback" not in got.stderr
    assert len(got.stderr.strip().splitlines()) == 1


def test_an_unreachable_scheduler_is_one_line(offload, every):
    env = dict(os.environ, DASK_SCHEDULER_ADDRESS="tcp://127.0.0.1:9")  # nothing listens on the discard port
    got = memq("redundant", str(offload.dir), "--parts", every, env=env)
    assert got.returncode == 1 and "Traceback" not in got.stderr
    assert len(got.stderr.strip().splitlines()) == 1
    assert "cannot reach tcp://127.0.0.1:9" in got.stderr


# -- a worker that dies ------------------------------------------------------------------------------------------
cloudpickle.register_pickle_by_value(sys.modules[__name__])  # `_Dying` runs on the workers


class _Dying:
    """make(span, path) for each_part that ends its worker process converting the second part: once (the marker
    file then exists), or every time."""

    def __init__(self, trace: Path, marker: Path, always: bool) -> None:
        self.trace, self.marker, self.always = trace, marker, always

    def __call__(self, span, path):
        if span.start != parts.BEGINNING and span.end is not None and (self.always or not self.marker.exists()):
            self.marker.touch()
            os._exit(3)
        return convert(self.trace, path, span=span)


def _redundant(cuts, make, **kw):
    """The merged redundant rows of the parts, on the Dask cluster when inside cluster.scheduled() (as
    wholerun.cut runs them), else here."""
    client = cluster.current()
    each = parts.each_part(cuts.spans, make) if client is None else cluster.each_part(client, cuts.spans, make)
    return redundant_of_parts(each, cuts.windowed).records()


def test_a_dead_worker_is_replaced_once(offload, every, tmp_path):
    cuts = parts.plan(offload.dir, float(every))
    expect = _redundant(cuts, lambda span, path: convert(offload.dir, path, span=span))
    with cluster.scheduled(workers=2):
        got = _redundant(cuts, _Dying(offload.dir, tmp_path / "died", always=False))
    assert (tmp_path / "died").exists()  # a worker died
    assert got == expect
    with cluster.scheduled(workers=2), pytest.raises(MemqError, match=r"^part 2 of \d+ .*died again after a retry"):
        _redundant(cuts, _Dying(offload.dir, tmp_path / "died", always=True))


def test_the_default_is_a_worker_per_core_for_several_parts(offload, every):
    """Without --workers or --scheduler, several parts run on a local cluster of one worker per core this process
    may run on (in this process on one core), a single part in this process."""
    from ctf2perfetto.analysis import wholerun
    from ctf2perfetto.analysis.base import no_stage

    cores = len(os.sched_getaffinity(0))
    for length, several in ((float(every), True), (1e6, False)):
        cuts, each = wholerun.cut(offload.dir, length, None, no_stage)
        assert (len(cuts.spans) > 1) == several
        workers = {len(p.engine.runner.client.scheduler_info()["workers"]) if p.engine.kind == "dask" else 0
                   for p in each}
        assert workers == ({cores} if several and cores > 1 else {0})
