"""The names of a process's place in its job, importable without numpy (the analyses' command line reads them).

traceformat.names re-exports them; docs/TRACE_FORMAT.md "The job" says what each means.
"""
from __future__ import annotations


# The launcher variables that name a process's place in its job (preload/memq_core.c records them), in the
# order they are asked: torchrun, Slurm, Open MPI, MPICH/PMI, PMIx.
RANK_VARS = ("RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK")
LOCAL_RANK_VARS = ("LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID")
WORLD_SIZE_VARS = ("WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE")
JOB_ID_VARS = ("SLURM_JOB_ID", "TORCHELASTIC_RUN_ID")

# A process's role in its job (ctf2perfetto.convert.identity decides; memq.process instants carry it).
ROLE_RANK = "rank"  # the launcher gave it a rank (and its parent does not carry the same one)
ROLE_WORKER = "worker"  # under a rank (a data-loader worker): its figures count under that rank
ROLE_LAUNCHER = "launcher"  # not a rank, parents ranks (torchrun, srun, mpirun)
ROLE_PROCESS = "process"  # anything else


def process_title(role: str, pid: int, node: str, rank: int | None = None, procname: str = "") -> str:
    """A process track's name in a job: `rank 2 (node a12, pid 4411)`, `rank 2 worker python3 (node a12, pid
    4420)`, `launcher torchrun (node a12, pid 4400)` (`rank`: its own for a rank, its owner's for a worker)."""
    where = f"node {node or '?'}, pid {pid}"
    what = f" {procname}" if procname else ""
    if role == ROLE_RANK:
        return f"rank {rank} ({where})"
    if role == ROLE_WORKER:
        return f"rank {rank} worker{what} ({where})"
    if role == ROLE_LAUNCHER:
        return f"launcher{what} ({where})"
    return f"{procname or 'process'} ({where})"
