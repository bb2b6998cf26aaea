"""The parts of a recording (parts.py) as Dask tasks: `memq NAME DIR --parts SEC --workers N | --scheduler ADDR`.

Each part is a Dask actor on one worker: it converts its range there (`make(span, path)`, into a temporary file on
that worker), loads it into a trace_processor of its own, takes in the mirror pieces the previous part left alive
and hands on those alive at its end (parts.carry_in / carry_out), then answers the merging code's queries
(wholerun.py and the analyses' `*_of_parts`, which read `Part.engine` as they read a local engine). Conversions
start at once on every worker; a part's mirrors wait only for the previous part's, so while the merging code reads
one part, the next part's carried state is computed on another worker. The figures are the serial path's: the same
conversions, the same carried state, the same queries in the same order.

Where: `--workers N` starts a `distributed.LocalCluster` of N worker processes on this machine (127.0.0.1, TCP);
`--scheduler ADDRESS` (or DASK_SCHEDULER_ADDRESS; a path names a scheduler file) joins an existing cluster, e.g.
one `dask-jobqueue`'s SLURMCluster started: its workers must read the trace directory at the same path.

A worker that dies (killed for memory, a crash in the engine) is replaced once: the part is converted and carried
in again on a worker still alive; a second loss fails the command with one line naming the part.
"""
from __future__ import annotations

import contextlib
import contextvars
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ctf2perfetto.analysis.base import Stage, no_stage
from ctf2perfetto.analysis.parts import BEGINNING, Carried, Part, carry_in, carry_out
from ctf2perfetto.convert.ranges import Range
from ctf2perfetto.engine.rows import Rows
from ctf2perfetto.errors import MemqError, UsageError

ENV_SCHEDULER = "DASK_SCHEDULER_ADDRESS"
CONNECT_TIMEOUT = "10s"  # reaching an existing scheduler
WAIT_S = 60  # how long a part waits for a worker when the cluster has none
POLL_S = 2.0  # how often a call under way checks that its worker is still in the cluster
_NS = 1_000_000_000
_client: contextvars.ContextVar[Any] = contextvars.ContextVar("memq_dask_client", default=None)


def actor(client: Any, cls: type, *args: Any, worker: str, what: str) -> Any:
    """An actor of `cls(*args)`, made on `worker` if it can be (a wish: the worker may be gone by now, a restarted
    worker has a new address, and a task bound to it would wait forever). A creation task placed on a worker that
    died as it started can also wait for ever (seen under load: the nanny restarts the worker and the task is never
    run again), so it is given WAIT_S, submitted once more anywhere, then the command fails with one line."""
    for wish in ({"workers": [worker], "allow_other_workers": True}, {}):
        future = client.submit(cls, *args, actor=True, pure=False, **wish)
        try:
            return future.result(timeout=WAIT_S)
        except TimeoutError:
            future.cancel()
    raise MemqError(f"{what}: no Dask worker made its actor in {2 * WAIT_S} s (is the cluster alive? "
                    "its dashboard says)")


def current() -> Any:
    """The Dask client the parts run on (scheduled()), or None: in this process, one after another."""
    return _client.get()


@contextlib.contextmanager
def scheduled(workers: int | None = None, scheduler: str | None = None) -> Iterator[Any]:
    """Run the parts of whole-run analyses inside this block on Dask: a LocalCluster of `workers` processes, or
    the cluster at `scheduler` (an address or a scheduler file; DASK_SCHEDULER_ADDRESS when neither is given; a
    `scheduler` given with `workers` wins).
    Without any of them, nothing changes (the parts run here, in turn)."""
    address = scheduler or (None if workers is not None else os.environ.get(ENV_SCHEDULER) or None)
    if workers is None and address is None:
        yield None
        return
    if workers is not None and workers < 1:
        raise UsageError(f"--workers {workers}: at least 1")
    from distributed import Client, LocalCluster

    with contextlib.ExitStack() as stack:
        try:
            if address is not None:
                kind = "scheduler file" if os.path.isfile(address) else "scheduler"
                client = (Client(scheduler_file=address, timeout=CONNECT_TIMEOUT) if kind == "scheduler file"
                          else Client(address, timeout=CONNECT_TIMEOUT))
            else:
                cluster = stack.enter_context(LocalCluster(
                    n_workers=workers, threads_per_worker=1, processes=True, host="127.0.0.1",
                    protocol="tcp", dashboard_address=":0", silence_logs=logging.CRITICAL))  # any free port
                client = Client(cluster)
        except (OSError, TimeoutError, ValueError) as e:  # refused, silent, or not an address
            where = address if address is not None else f"a local cluster of {workers} workers"
            raise MemqError(f"Dask: cannot reach {where}: {e}") from None
        stack.enter_context(client)
        token = _client.set(client)
        try:
            yield client
        finally:
            _client.reset(token)


class PartActor:
    """One part on a worker: its conversion, its trace_processor, the queries on it (a Dask actor)."""

    def __init__(self, make: Callable[[Range, Path], Any], span: Range, trace_processor: str | None) -> None:
        self.make, self.span, self.trace_processor = make, span, trace_processor
        self.dir = tempfile.mkdtemp(prefix="memq-part-")
        self.summary: Any = None
        self.engine: Any = None

    def convert(self) -> bool:
        if self.summary is None:
            self.summary = self.make(self.span, Path(self.dir) / "part.pftrace")
        return True

    def open(self, carried: Carried) -> tuple[Any, int | None, int | None, Carried]:
        """Load the part, take in `carried`: (its RangeReport, start, end, what it carries into the next)."""
        self.convert()
        if self.engine is not None:
            self.engine.close()
        from ctf2perfetto.inputs import open_file

        report = self.summary.range_report
        zero = report.first_ts + self.summary.trace_offset_ns  # the recording's start on trace_processor's clock
        start = None if self.span.start == BEGINNING else zero + self.span.start
        end = None if self.span.end is None else zero + self.span.end
        self.engine = open_file(Path(self.dir) / "part.pftrace", trace_processor=self.trace_processor)
        carry_in(self.engine, carried, start)
        return report, start, end, carry_out(self.engine, end) if end is not None else Carried()

    def rows(self, sql: str) -> tuple[list[str], list[Any] | None, list[tuple] | None]:
        return _shipped(self.engine.rows(sql))

    def import_problem_rows(self) -> tuple[list[str], list[Any] | None, list[tuple] | None]:
        return _shipped(self.engine.import_problem_rows())

    def close(self) -> bool:
        if self.engine is not None:
            self.engine.close()
            self.engine = None
        shutil.rmtree(self.dir, ignore_errors=True)
        return True


def _shipped(got: Rows) -> tuple[list[str], list[Any] | None, list[tuple] | None]:
    """A query result as the worker sends it: trace_processor's own batches (serialized), so the Rows made of them
    on the other side are typed exactly as a local query's."""
    if got.batches is None:
        return got.columns, None, got.rows
    return got.columns, [b.SerializeToString() for b in got.batches], None


def _rows(got: tuple[list[str], list[Any] | None, list[tuple] | None]) -> Rows:
    columns, batches, values = got
    if batches is not None:
        from ctf2perfetto.engine.embedded import protos

        batch = protos().QueryResult.CellsBatch
        return Rows.from_batches(list(columns), [batch.FromString(b) for b in batches])
    return Rows.from_records([dict(zip(columns, v)) for v in values or []], list(columns), as_query=True)


class RemoteEngine:
    """Part.engine of a part on a worker: the engine calls the merging code makes, answered by its actor."""

    kind = "dask"

    def __init__(self, runner: "_Runner", index: int) -> None:
        self.runner, self.index = runner, index

    def rows(self, sql: str) -> Rows:
        return _rows(self.runner.call(self.index, "rows", sql))

    def query(self, sql: str) -> Any:
        return self.rows(sql).frame()

    def import_problem_rows(self) -> Rows:
        return _rows(self.runner.call(self.index, "import_problem_rows"))

    def import_problems(self) -> Any:
        return self.import_problem_rows().frame()

    def close(self) -> None:
        pass


class _Done:
    """A result at hand, read like a future."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def result(self, timeout: float | None = None) -> Any:
        return self.value


class WorkerLost(Exception):
    """The worker holding a part's actor left the cluster while a call to it was under way."""


class _Runner:
    """The parts' actors, replaced once when their worker is lost."""

    def __init__(self, client: Any, spans: list[Range], make: Callable[[Range, Path], Any],
                 trace_processor: str | None) -> None:
        self.client, self.spans, self.make, self.trace_processor = client, spans, make, trace_processor
        self.actors: list[Any] = [None] * len(spans)
        self.workers: list[str] = [""] * len(spans)
        self.carried_in: list[Carried | None] = [None] * len(spans)
        self.retried: set[int] = set()

    def what(self, i: int) -> str:
        span = self.spans[i]
        what = "the start" if span.start == BEGINNING else f"{span.start / _NS:.3f} s"
        return what + " to " + ("the end" if span.end is None else f"{span.end / _NS:.3f} s")

    def start(self, i: int, avoid: str = "") -> None:
        live = sorted(self.client.scheduler_info()["workers"])
        if not live:  # a local cluster's nanny is starting a dead worker again
            try:
                self.client.wait_for_workers(1, timeout=WAIT_S)
            except TimeoutError:
                raise MemqError(f"part {i + 1} of {len(self.spans)} ({self.what(i)}): the Dask cluster has had no "
                                f"worker for {WAIT_S} s") from None
            live = sorted(self.client.scheduler_info()["workers"])
        choices = [w for w in live if w != avoid] or live
        worker = choices[i % len(choices)]
        made = actor(self.client, PartActor, self.make, self.spans[i], self.trace_processor, worker=worker,
                     what=f"part {i + 1} of {len(self.spans)} ({self.what(i)})")
        self.actors[i], self.workers[i] = made, getattr(made, "_address", worker)
        self.actors[i].convert()  # under way on its worker (its actor thread takes calls in turn)

    def lost(self, i: int, error: BaseException) -> Any:
        """The worker of part i died: start the part again elsewhere, once (what opening it there gave)."""
        if i in self.retried:
            raise MemqError(f"part {i + 1} of {len(self.spans)} ({self.what(i)}): its Dask worker died again after "
                            f"a retry ({type(error).__name__}: {error}); give it more memory, or use shorter "
                            "--parts or fewer --workers") from None
        self.retried.add(i)
        try:
            self.start(i, avoid=self.workers[i])
            return None if self.carried_in[i] is None else self.wait(i, self.actors[i].open(self.carried_in[i]))
        except (MemqError, UsageError, KeyboardInterrupt):
            raise
        except Exception as again:
            raise MemqError(f"part {i + 1} of {len(self.spans)} ({self.what(i)}): its Dask worker died again after "
                            f"a retry ({type(again).__name__}: {again}); give it more memory, or use shorter "
                            "--parts or fewer --workers") from None

    def wait(self, i: int, pending: Any) -> Any:
        """A call's result; WorkerLost when the part's worker leaves meanwhile (an actor call does not fail then:
        it would wait forever)."""
        while True:
            try:
                return pending.result(timeout=POLL_S)
            except TimeoutError:
                if self.workers[i] not in self.client.scheduler_info()["workers"]:
                    raise WorkerLost(f"worker {self.workers[i]} left the cluster") from None

    def call(self, i: int, method: str, *args: Any) -> Any:
        while True:
            try:
                return self.wait(i, getattr(self.actors[i], method)(*args))
            except (MemqError, UsageError, KeyboardInterrupt):
                raise
            except Exception as error:  # the worker or its connection is gone
                self.lost(i, error)

    def open(self, i: int, carried: Carried) -> Any:
        """Start opening part i (a future of PartActor.open)."""
        self.carried_in[i] = carried
        try:
            return self.actors[i].open(carried)
        except (MemqError, UsageError, KeyboardInterrupt):
            raise
        except Exception as error:  # its worker is gone already
            return _Done(self.lost(i, error))

    def opened(self, i: int, pending: Any) -> tuple[Any, int | None, int | None, Carried]:
        try:
            return self.wait(i, pending)
        except (MemqError, UsageError, KeyboardInterrupt):
            raise
        except Exception as error:
            return self.lost(i, error)

    def close(self, i: int) -> None:
        with contextlib.suppress(Exception):  # a worker gone meanwhile would never answer: not waited for long
            self.actors[i].close().result(timeout=POLL_S)
        self.actors[i] = None


def default_workers(parts: int) -> int:
    """The workers when --workers is not given: 1 (the parts in this process, in turn) for a single part, else as
    many as the cores this process may run on."""
    return len(os.sched_getaffinity(0)) if parts > 1 else 1


def each_part_on_cores(workers: int, spans: list[Range], make: Callable[[Range, Path], Any], *,
                       trace_processor: str | None = None, stage: Stage = no_stage) -> Iterator[Part]:
    """each_part on a local cluster of `workers` processes, started for these parts and stopped after them."""
    with scheduled(workers) as client:
        yield from each_part(client, spans, make, trace_processor=trace_processor, stage=stage)


def each_part(client: Any, spans: list[Range], make: Callable[[Range, Path], Any], *,
              trace_processor: str | None = None, stage: Stage = no_stage) -> Iterator[Part]:
    """parts.each_part on the Dask cluster of `client`: the same Parts, in the same order, their engines on
    workers."""
    runner, count = _Runner(client, spans, make, trace_processor), len(spans)
    workers = len(client.scheduler_info()["workers"])
    try:
        with stage(f"starting {count} part(s) on {workers} Dask worker(s)"):
            for i in range(count):
                runner.start(i)
        pending = runner.open(0, Carried())
        for i in range(count):
            with stage(f"part {i + 1} of {count} ({runner.what(i)}): converting and carrying in "
                       f"(Dask worker {runner.workers[i]})"):
                report, start, end, carried = runner.opened(i, pending)
            if i + 1 < count:  # the next part's mirrors, on its worker, while this one is read
                pending = runner.open(i + 1, carried)
            yield Part(i, count, spans[i], report, RemoteEngine(runner, i), start, end)
            runner.close(i)
    finally:
        for i in range(count):
            if runner.actors[i] is not None:
                runner.close(i)
