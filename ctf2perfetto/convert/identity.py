"""Who each traced process is in its job: rank, node, launcher, the rank it works for.

The preload library records facts only (memq:identity: the parent pid, the host name, the launcher's
variables as the process's environment held them; memq:device: each device's UUID and PCI bus id).
This module decides, once, from those facts, for the converter (process names, the memq.process
instants) and nothing else; the analyses read the decision back from the trace (memq.job).

* rank: the first of RANK (torchrun), SLURM_PROCID, OMPI_COMM_WORLD_RANK, PMI_RANK, PMIX_RANK that is
  an integer; local rank and sizes likewise; the job id is SLURM_JOB_ID, else TORCHELASTIC_RUN_ID.
* role `rank`: a process with a rank whose traced parent on the same node does not carry the same
  rank (a data-loader worker forked or spawned by rank 2 inherits RANK=2: it is not rank 2 again).
* role `worker`: a process under a rank (its rank is `owner_rank`), with or without the variable.
* role `launcher`: a process that is not a rank and is an ancestor of one (torchrun, srun's step,
  mpirun).
* role `process`: anything else (a shell, a tool the command ran).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping

from ctf2perfetto.traceformat import names as N

RANK_VARS, LOCAL_RANK_VARS, WORLD_SIZE_VARS, JOB_ID_VARS = N.RANK_VARS, N.LOCAL_RANK_VARS, N.WORLD_SIZE_VARS, N.JOB_ID_VARS

ROLE_RANK, ROLE_WORKER, ROLE_LAUNCHER, ROLE_PROCESS = N.ROLE_RANK, N.ROLE_WORKER, N.ROLE_LAUNCHER, N.ROLE_PROCESS


def parse_env(text: str) -> dict[str, str]:
    """memq:identity's `env` ("NAME=value" lines) as a dict."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        name, sep, value = line.partition("=")
        if sep and name:
            out[name] = value
    return out


def _first_int(env: Mapping[str, str], names: Iterable[str]) -> int | None:
    for name in names:
        value = env.get(name, "").strip()
        if value.lstrip("-").isdigit():
            return int(value)
    return None


@dataclass
class Identity:
    """One process's place in its job (the facts recorded plus the decision made here)."""

    pid: int
    ppid: int = 0
    host: str = ""
    env: dict[str, str] = field(default_factory=dict)
    rank: int | None = None          # the launcher's variable, whatever the role
    local_rank: int | None = None
    world_size: int | None = None
    job_id: str = ""
    role: str = ROLE_PROCESS
    owner_rank: int | None = None    # the rank this process counts under (its own for a rank)
    procname: str = ""

    real_pid: int | None = None      # its pid on its node (a job's later recordings move pids apart)

    def name(self) -> str:
        """The process track's name (traceformat.names.process_title)."""
        pid = self.pid if self.real_pid is None else self.real_pid
        rank = self.rank if self.role == ROLE_RANK else self.owner_rank
        return N.process_title(self.role, pid, self.host, rank, self.procname)


def identify(records: Iterable[Mapping], processes: Mapping[int, str] | None = None,
             recorders: Iterable[int] = ()) -> dict[int, Identity]:
    """pid -> Identity from TraceInfo.identities records (dicts with pid, ppid, host, env: a dict or the
    recorded text). A pid recorded twice (a forked child re-describes itself) keeps its last record.

    `recorders`: the pids of the `memq record` processes that made the recording(s). When given, only their
    commands' processes (children of a recorder and their descendants) can be ranks, workers or launchers: a
    session records every process of its user that runs memq's preload library, so another job traced at the
    same time (another memq record) shows up too, and its ranks are not this job's."""
    found: dict[int, Identity] = {}
    for r in records:
        env = r.get("env") or {}
        if isinstance(env, str):
            env = parse_env(env)
        pid = int(r["pid"])
        ident = Identity(pid=pid, ppid=int(r.get("ppid") or 0), host=str(r.get("host") or ""), env=dict(env),
                         rank=_first_int(env, RANK_VARS), local_rank=_first_int(env, LOCAL_RANK_VARS),
                         world_size=_first_int(env, WORLD_SIZE_VARS),
                         job_id=next((env[k] for k in JOB_ID_VARS if env.get(k)), ""),
                         procname=(processes or {}).get(pid, ""), real_pid=r.get("real_pid"))
        found[pid] = ident

    def parent(i: Identity) -> Identity | None:
        p = found.get(i.ppid)
        return p if p is not None and p.host == i.host and p.pid != i.pid else None

    def ancestors(i: Identity):
        seen = {i.pid}
        p = parent(i)
        while p is not None and p.pid not in seen:
            seen.add(p.pid)
            yield p
            p = parent(p)

    recorders = {int(p) for p in recorders}

    def ours(i: Identity) -> bool:
        if not recorders or i.ppid in recorders:
            return True
        return any(up.ppid in recorders for up in ancestors(i))

    for ident in found.values():
        if ident.rank is None or not ours(ident):
            continue
        up = parent(ident)
        if up is None or up.rank != ident.rank:
            ident.role, ident.owner_rank = ROLE_RANK, ident.rank
    for ident in found.values():
        if ident.role == ROLE_RANK:
            for up in ancestors(ident):
                if up.role == ROLE_PROCESS and up.rank is None:
                    up.role = ROLE_LAUNCHER
            continue
        owner = next((up for up in ancestors(ident) if up.role == ROLE_RANK), None)
        if owner is not None:
            ident.role, ident.owner_rank = ROLE_WORKER, owner.rank
    return found


def run_durations(clock_readings: Iterable[Mapping]) -> dict[int, int]:
    """pid -> its traced life in ns (memq:clock "start" to "end", MONOTONIC), where both were read."""
    start: dict[int, int] = {}
    end: dict[int, int] = {}
    for r in clock_readings:
        if r.get("pid") is None or r.get("monotonic") is None:
            continue
        pid, t = int(r["pid"]), int(r["monotonic"])
        if r.get("where") == "start":
            start[pid] = min(start.get(pid, t), t)
        elif r.get("where") == "end":
            end[pid] = max(end.get(pid, t), t)
    return {pid: end[pid] - t for pid, t in start.items() if pid in end and end[pid] >= t}


def recorder_pids(info) -> set[int]:
    """The `memq record` processes of a TraceInfo: they read the clock (memq-record.json's readings) but run no
    preload library, so they recorded no memq:identity. Empty when no process recorded one (older traces)."""
    identified = {int(r["pid"]) for r in getattr(info, "identities", [])}
    if not identified:
        return set()
    return {int(r["pid"]) for r in info.clock_readings if r.get("pid") is not None} - identified


def job_processes(info) -> dict[int, Identity]:
    """The identities a TraceInfo's memq:identity records give, process names attached."""
    return identify(getattr(info, "identities", []), info.processes, recorder_pids(info))


class PhysicalDevices:
    """Device numbers on the job's timeline: one per physical GPU (its UUID), not per process's ordinal.

    Under CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES (one GPU per rank) every rank calls its GPU device 0, and
    nodes reuse ordinals too: a trace keyed by ordinal would put every rank's copies and device memory on one
    `GPU 0`. Each (pid, ordinal) a memq:device described with a UUID becomes the index of that UUID in order of
    first description; rows' `device` column and TraceInfo.devices' `device` are renumbered so (the ordinal
    stays in `ordinal`). Nothing changes while every described device keeps its ordinal (one process, or
    processes that see the same GPUs in the same order), nor for devices no runtime gave a UUID for. The
    peer / prefetch / advise target devices in `aux`/`aux2` stay ordinals (arguments as the program passed them).
    """

    def __init__(self) -> None:
        self.index: dict[str, int] = {}
        self.by_key: dict[tuple[int, int], int] = {}
        self.seen = 0
        self.moved = False

    def update(self, devices: list[dict]) -> None:
        for d in devices[self.seen:]:
            uuid = d.get("uuid")
            if uuid:
                idx = self.index.setdefault(str(uuid), len(self.index))
                key = (int(d.get("pid", 0)), int(d.get("device", -1)))
                self.by_key.setdefault(key, idx)
                self.moved |= idx != key[1]
        self.seen = len(devices)

    def apply(self, batches, info):
        """`batches` with their device numbers renumbered; `info()` the TraceInfo being filled."""
        import numpy as np

        for batch in batches:
            current = info()
            self.update(current.devices)
            if self.moved and len(batch):
                device = batch["device"]
                pid = batch["pid"]
                used = device >= 0
                if used.any():
                    keys = set(zip(pid[used].tolist(), device[used].tolist()))
                    new = device.copy()
                    for p, d in keys:
                        idx = self.by_key.get((p, d))
                        if idx is not None and idx != d:
                            new[(pid == p) & (device == d)] = idx
                    batch.columns["device"] = new
            yield batch
        current = info()
        self.update(current.devices)
        if self.moved:
            for d in current.devices:
                idx = self.by_key.get((int(d.get("pid", 0)), int(d.get("device", -1))))
                if idx is not None and "ordinal" not in d:
                    d["ordinal"], d["device"] = d["device"], idx
