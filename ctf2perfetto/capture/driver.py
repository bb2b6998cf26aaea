"""`memq record` from start to end: the LTTng session around the command, always stopped and destroyed."""
from __future__ import annotations

import datetime as _dt
import os
import shutil
import socket
import sys
import tempfile
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
    try:
        lttng.run("create", session, f"--output={output}")
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
        exit_code = run_command([executable, *options.command[1:]], child_env, signals)
        readings.append(clock_reading("end"))
    finally:
        duration = time.monotonic() - t0
        stopped = False
        try:
            # `stop` returns once the trace data is written out; the session's teardown
            # after that (~0.5 s in the daemon) need not be waited for.
            stopped = lttng.run("stop", session, check=False).returncode == 0
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
    result.events = count_events(output)
    result.size_bytes = trace_size(output)
    write_record(output, asdict(result))
    guardian.done()
    return result
