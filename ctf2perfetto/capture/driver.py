"""`memq record` from start to end: the LTTng session around the command, always stopped and destroyed."""
from __future__ import annotations

import datetime as _dt
import os
import shutil
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from ctf2perfetto import __version__
from ctf2perfetto.errors import MemqError
from ctf2perfetto.capture.guardian import start_guardian
from ctf2perfetto.capture.command import Signals, resolve_command, run_command
from ctf2perfetto.capture.lttng import Lttng, discarded_counts, ensure_sessiond, lttng_environment
from ctf2perfetto.capture.options import RecordOptions, check_options
from ctf2perfetto.capture.outdir import count_events, expand_output, prepare_output, trace_size, undo_output, write_record
from ctf2perfetto.capture.plan import configure_session, enabled_settings, event_rules, host_settings
from ctf2perfetto.capture.preload import RECORDING_ENV, capture_env, child_environment, preload_list
from ctf2perfetto.capture.reach import read_reach, reach_warnings
from ctf2perfetto.capture.result import RecordResult, clock_reading


def record(options: RecordOptions, announce: Callable[[str], None] | None = None) -> RecordResult:
    """Record `options.command` into `options.output`; see the package docstring (ctf2perfetto.capture).

    `announce` receives one line when the command starts (for a terminal).
    """
    check_options(options)
    env = lttng_environment()
    lttng = Lttng(env)
    executable = resolve_command(options.command[0], env)
    if executable is None:
        raise MemqError(f"{options.command[0]}: command not found", exit_code=127)
    output, created = prepare_output(expand_output(options.output, os.environ), options.force)
    signals = Signals()
    try:
        return _record(options, announce, env, lttng, executable, output, created, signals)
    finally:
        signals.restore()


RESERVE_FILE = ".memq-record.reserve"
RESERVE_BYTES = 256 << 10  # held from the start, freed for memq-record.json at the end (a full disk)
DISK_LOW_BYTES = 1 << 20  # free space at which memq stops tracing (the consumer's next writes would fail)


def _reserve(path: Path) -> None:
    try:
        with open(path, "wb") as f:
            f.write(bytes(RESERVE_BYTES))
    except OSError:
        path.unlink(missing_ok=True)


class DiskWatch:
    """Stops tracing when the disk holding the trace is nearly full: LTTng's consumer can write no more, the
    ring buffers stay full and a blocking channel makes every traced call wait its timeout (the command all
    but stalls). Stopped, the command runs on untraced; `full_at` (time.monotonic) says when."""

    PERIOD_S = 0.2

    def __init__(self, lttng: Lttng, session: str, output: Path) -> None:
        self.lttng, self.session, self.output = lttng, session, output
        self.full_at: float | None = None
        self.free = 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="memq-disk-watch", daemon=True)

    def start(self) -> "DiskWatch":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._done.set()
        self._thread.join()

    def low(self) -> bool:
        """Whether the disk is nearly full now (free space read again)."""
        try:
            st = os.statvfs(self.output)
        except OSError:
            return False
        self.free = st.f_bavail * st.f_frsize
        return self.free < DISK_LOW_BYTES

    def _run(self) -> None:
        while not self._done.wait(self.PERIOD_S):
            if self.low():
                self.full_at = time.monotonic()
                self.lttng.run("stop", "--no-wait", self.session, check=False)
                return


def _record(options: RecordOptions, announce: Callable[[str], None] | None, env: dict[str, str], lttng: Lttng,
            executable: str, output: Path, created: bool, signals: Signals) -> RecordResult:
    """The session around the command, once the output directory is ready (undone if it never runs)."""
    try:
        preload = preload_list(options.apis, options.host_source)
        ensure_sessiond(lttng)
    except BaseException:
        undo_output(output, created)
        raise
    session = f"memq-{os.getpid()}-{int(time.time())}"
    rules = event_rules(options.apis, options.host_source)
    host = host_settings(options)
    enabled = enabled_settings(options, rules)
    reach_dir = Path(tempfile.mkdtemp(prefix="memq-reach-"))
    child_env = child_environment(env, preload, options.mode, reach_dir, host, options.content)
    child_env[RECORDING_ENV] = str(output)  # a memq record inside the command refuses to start (cli/record.py)
    started_at = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    readings: list[dict] = []
    exit_code: int | None = None
    guardian = None
    t0 = time.monotonic()
    watch: DiskWatch | None = None
    reserve = output / RESERVE_FILE
    try:
        lttng.run("create", session, f"--output={output}")
        _reserve(reserve)
        guardian = start_guardian(session, output, {
            "command": list(options.command), "session": session, "trace_dir": str(output),
            "started_at": started_at, "clock_readings": readings, "enabled": enabled})
        configure_session(lttng, session, options, rules)
        lttng.run("start", session)
        readings.append(clock_reading("start"))
        guardian.update(readings)
        if signals.received:
            raise MemqError(f"interrupted ({', '.join(signals.names())}) before {options.command[0]} started",
                            exit_code=128 + signals.received[0])
        if announce:
            window = f", capture window {options.capture.describe()}" if options.capture.windowed else ""
            announce(f"memq record: recording {' '.join(options.command)} (session {session}{window}) ...")
        command_start = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        capture_env(child_env, options.capture, command_start)
        enabled["capture"] = options.capture.record(command_start)
        guardian.update(readings)  # its record says which windows were asked for too
        watch = DiskWatch(lttng, session, output).start()
        exit_code = run_command([executable, *options.command[1:]], child_env, signals)
        readings.append(clock_reading("end"))
    finally:
        if watch is not None:
            watch.stop()
        duration = time.monotonic() - t0
        stopped = False
        try:
            # `stop` returns once the trace data is written out; the session's teardown
            # after that (~0.5 s in the daemon) need not be waited for.
            stopped = lttng.run("stop", session, check=False).returncode == 0 or \
                (watch is not None and watch.full_at is not None)  # stopped on a full disk: nothing to wait for
            discarded, lost_packets = discarded_counts(lttng, session)
        finally:
            lttng.run("destroy", *(["--no-wait"] if stopped else []), session, check=False)
            reach = read_reach(reach_dir)
            shutil.rmtree(reach_dir, ignore_errors=True)
            if exit_code is None:
                undo_output(output, created)
                if guardian is not None:
                    guardian.done()

    result = RecordResult(
        command=list(options.command), executable=executable, exit_code=exit_code, session=session,
        trace_dir=str(output), host=socket.gethostname(), started_at=started_at, duration_s=round(duration, 3),
        versions={"memq": __version__, "lttng": lttng.version(), "python": sys.version.split()[0],
                  "kernel": os.uname().release},
        clock_readings=readings,
        enabled=enabled,
        discarded_events=discarded, lost_packets=lost_packets, preload=preload,
        reach=reach, warnings=reach_warnings(reach, options.apis), signals=signals.names())
    if signals.received:
        result.warnings.append(f"memq record received {', '.join(signals.names())}: forwarded to the command "
                               "while it ran; the session was stopped and this record written all the same")
    if watch is not None and watch.full_at is None and watch.low():
        result.warnings.append(
            f"the disk holding {output} filled as the trace was written out at the end ({watch.free >> 10} KiB "
            f"left): the trace lost what LTTng's buffers held then (up to the last {duration:.1f} s of the run)")
    elif watch is not None and watch.full_at is not None:
        result.warnings.append(
            f"the disk holding {output} filled {watch.full_at - t0:.1f} s into the run ({watch.free >> 10} KiB "
            f"left): memq stopped tracing there so that the command could go on; the trace lost the last "
            f"{max(duration - (watch.full_at - t0), 0):.1f} s of the {duration:.1f} s run (and what the buffers "
            "held then)")
    reserve.unlink(missing_ok=True)  # room for this record on a full disk
    result.events = count_events(output)
    result.size_bytes = trace_size(output)
    write_record(output, asdict(result))
    guardian.done()
    return result
