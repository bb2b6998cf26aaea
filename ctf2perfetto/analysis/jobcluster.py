"""Each recording of a job directory as a Dask task: `ctf2perfetto JOB_DIR --workers N | --scheduler ADDR` and the
analyses of a job directory (`memq summary JOB_DIR --workers N`).

A job directory holds one recording per node (convert/job.py). Each recording is decoded by a Dask actor on a
worker (RecordingActor: the same decoder, same batch size, as here), and read here through RemoteRecording, which
stands where a local decode stands in convert/job.JobDecoding: the same batches, and `info` as the decoder had it
after each of them. So the merge (clock alignment, pids apart), the writer and the analyses are the serial path's
and the output is the same, byte for byte. A worker decodes its next batch while this process merges and writes
the previous one (one call ahead per recording); the batch and its `info` are pickled on the worker as the call
returns, so the worker's next batch cannot change what was sent; a column holding one value throughout is sent as
that value (a heap-only batch: 2.3 of its 12.5 MB are sent).

What runs where: the decoding (babeltrace2, the CTF reading) on the workers, one recording per worker in turn
(a worker runs its actors' calls one at a time); the merge and the writer here. `--scheduler` workers must read
the job directory at the same path (a shared file system, as `memq record -o job/%h` on each node leaves it).
The cluster comes from analysis/cluster.scheduled (the one `--parts` uses).

A worker that leaves the cluster while its recording is read is replaced once (the recording decoded again on
another worker, the batches already handed out passed over); a second loss fails with one line naming the
recording.
"""
from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any, Callable, Iterator

from ctf2perfetto.analysis.cluster import POLL_S, WAIT_S, WorkerLost, actor
from ctf2perfetto.errors import MemqError, UsageError
from ctf2perfetto.events import EventBatch, TraceInfo


def packed(batch: EventBatch) -> tuple[int, dict[str, Any], list[str]]:
    """A batch as sent: a column holding one value throughout (most of the 29 in a heap-only batch, e.g. the copy
    and content fields) as that value and its dtype, the others as they are."""
    n = len(batch)
    columns: dict[str, Any] = {}
    for name, column in batch.columns.items():
        same = n > 0 and column[0] == column[-1] and bool((column == column[0]).all())
        columns[name] = (column.dtype.str, column[0].item()) if same else column
    return n, columns, list(batch.api_names)


def unpacked(sent: tuple[int, dict[str, Any], list[str]]) -> EventBatch:
    """The batch `packed` sent, column for column (dtypes and values) as it was."""
    import numpy as np

    n, columns, api_names = sent
    return EventBatch({name: np.full(n, c[1], np.dtype(c[0])) if isinstance(c, tuple) else c
                       for name, c in columns.items()}, api_names)


class RecordingActor:
    """One recording's decode on a worker (a Dask actor): its batches in turn, each with the decoder's info."""

    def __init__(self, path: str, salvage: bool, batch_size: int) -> None:
        from ctf2perfetto.ctf.decode import decode

        self.decoding = decode(path, salvage=salvage, batch_size=batch_size).__enter__()
        self.batches = iter(self.decoding)  # the decoder's own read-ahead thread starts now

    def info(self) -> bytes:
        return pickle.dumps(self.decoding.info, protocol=pickle.HIGHEST_PROTOCOL)

    def next(self) -> bytes:
        """(the next batch packed or None after the last, the info after it), pickled now."""
        batch = next(self.batches, None)
        return pickle.dumps((None if batch is None else packed(batch), self.decoding.info),
                            protocol=pickle.HIGHEST_PROTOCOL)

    def skip(self, count: int) -> bool:
        """Pass over the first `count` batches (a replaced actor catching up with what was handed out)."""
        for _ in range(count):
            next(self.batches, None)
        return True

    def close(self) -> bool:
        self.decoding.__exit__(None, None, None)
        return True


class RemoteRecording:
    """A recording decoded by a RecordingActor, read as ctf/decode.Decoding is: iterate for EventBatches; `info`
    is the decoder's as of the last batch handed out (complete after the last).

    A worker lost while the recording is read is replaced once: a new actor on another worker decodes the
    recording again, passes over the batches already handed out (the decode is deterministic: the same batches)
    and goes on; a second loss fails with one line naming the recording."""

    def __init__(self, client: Any, path: Path, worker: str, *, salvage: bool, batch_size: int) -> None:
        self.client, self.path, self.args = client, path, (str(path), salvage, batch_size)
        self.actor: Any = None
        self.worker = worker
        self.handed = 0  # batches handed out so far
        self.retried = False
        self._start(worker)
        self.info: TraceInfo = pickle.loads(self._call("info"))

    def _start(self, worker: str) -> None:
        # a recording that cannot be opened fails here, with the decoder's line
        self.actor = actor(self.client, RecordingActor, *self.args, worker=worker, what=str(self.path))
        self.worker = getattr(self.actor, "_address", worker)

    def _wait(self, pending: Any) -> Any:
        """A call's result; WorkerLost when the recording's worker leaves meanwhile (an actor call would wait
        forever)."""
        while True:
            try:
                return pending.result(timeout=POLL_S)
            except TimeoutError:
                if self.worker not in self.client.scheduler_info()["workers"]:
                    raise WorkerLost(f"worker {self.worker} left the cluster") from None

    def _call(self, method: str, pending: Any = None) -> Any:
        """`method`'s result (`pending`: the call made already), on a replacement actor if the worker is lost."""
        try:
            return self._wait(pending if pending is not None else getattr(self.actor, method)())
        except (MemqError, UsageError, KeyboardInterrupt):
            raise
        except Exception as error:  # the worker or its connection is gone
            self._replace(error)
            return self._call(method)

    def _replace(self, error: BaseException) -> None:
        if self.retried:
            raise MemqError(f"{self.path}: its Dask worker died again after a retry ({type(error).__name__}: "
                            f"{error}); give the workers more memory, or decode without --workers/--scheduler") \
                from None
        self.retried = True
        live = sorted(set(self.client.scheduler_info()["workers"]) - {self.worker})
        self._start(live[0] if live else self.worker)
        try:
            self._wait(self.actor.skip(self.handed))
        except (MemqError, UsageError, KeyboardInterrupt):
            raise
        except Exception as again:
            self._replace(again)

    def _ask(self, method: str) -> Any:
        """`method` called on the actor, its result to come (None: the call could not be made; _call makes it
        again, on a replacement when the worker is gone)."""
        try:
            return getattr(self.actor, method)()
        except Exception:  # noqa: BLE001 - _call finds out why
            return None

    def __iter__(self) -> Iterator[EventBatch]:
        pending = self._ask("next")
        while True:
            sent, self.info = pickle.loads(self._call("next", pending))
            if sent is None:
                return
            batch = unpacked(sent)
            self.handed += 1
            pending = self._ask("next")  # decoded there while this one is merged and written here
            yield batch

    def __enter__(self) -> "RemoteRecording":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        if self.actor is not None:
            try:
                self.actor.close().result(timeout=POLL_S)
            except Exception:  # noqa: BLE001 - a worker already gone holds nothing to release
                pass
            self.actor = None


def opener(client: Any, *, salvage: bool, batch_size: int) -> Callable[[Path], RemoteRecording]:
    """What convert/job.JobDecoding opens each recording with: the i-th on the i-th worker (round robin)."""
    workers = sorted(client.scheduler_info()["workers"])
    if not workers:  # a cluster just started, or one whose workers are starting again
        try:
            client.wait_for_workers(1, timeout=WAIT_S)
        except TimeoutError:
            raise MemqError(f"the Dask cluster has had no worker for {WAIT_S} s") from None
        workers = sorted(client.scheduler_info()["workers"])
    opened = [0]

    def open_recording(path: Path) -> RemoteRecording:
        worker = workers[opened[0] % len(workers)]
        opened[0] += 1
        return RemoteRecording(client, path, worker, salvage=salvage, batch_size=batch_size)

    return open_recording
