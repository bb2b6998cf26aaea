"""`memq record`: one LTTng user-space session around one command.

The whole LTTng dance, in order: a reachable session daemon (started when
none is), a session writing to the output directory, one user-space channel
(blocking with a finite timeout, or discard), the events and contexts, the
LD_PRELOAD set (fork/dl helpers, memq's preload library: HIP/CUDA and, with
the `libc` API, the host heap at a size threshold; or LTTng's libc wrapper
with `--host-source lttng`) and the library's settings in the environment,
the command itself with SIGINT/SIGTERM/SIGHUP forwarded, then stop, the
discarded event count, destroy -- the last three whatever happened to the
command, and whatever signals arrive meanwhile (they are recorded, not obeyed,
until memq-record.json is written). If memq itself is killed (SIGKILL), a
guardian process (guardian.py) stops and destroys the session.
`memq-record.json` in the output directory says what was done.

One job per module:
    options   what may be asked for (RecordOptions, --api/--host-min-size parsing, checks)
    plan      the channel, events, filters and contexts enabled for the options
    lttng     the `lttng` client, the session daemon, discarded-event counts
    preload   the command's environment (LD_PRELOAD list, the preload library's settings)
    command   running the command (resolution, terminal, forwarded signals)
    outdir    the output directory and memq-record.json in it
    reach     the preload library's exit reports and their warnings
    result    RecordResult, clock readings, the terminal summary
    driver    record(): the session around the command, always stopped and destroyed
Standard library only: the GPU bundle (scripts/gpu-bundle.sh) runs it with `python3 -S`.
"""
from __future__ import annotations

from ctf2perfetto.capture.driver import record
from ctf2perfetto.capture.options import RecordOptions, parse_apis, parse_host_min_size
from ctf2perfetto.capture.result import RecordResult, summary

__all__ = ["RecordOptions", "RecordResult", "parse_apis", "parse_host_min_size", "record", "summary"]
