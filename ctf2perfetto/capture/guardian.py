"""The guardian of a `memq record` session: stops and destroys it if memq record dies first.

memq record handles SIGINT, SIGTERM and SIGHUP itself, but nothing survives SIGKILL (or the
OOM killer): its LTTng session would go on recording every instrumented process of the
user. So right after `lttng create` it starts this guardian (`python3 -m
ctf2perfetto.capture.guardian SESSION`) in a process session of its own, with a pipe on its
stdin: JSON lines with what memq-record.json should say so far, then `done` once memq has
destroyed the session and written the record itself. End of input without `done` means
memq died: the guardian stops and destroys the session and, unless memq-record.json
exists, writes one saying so (the command may still be running, untraced). Standard
library only, like the rest of recording (the GPU bundle runs it too).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

DONE = b"done"


class Guardian:
    """memq record's end of the pipe."""

    def __init__(self, proc: subprocess.Popen, partial: dict) -> None:
        self.proc = proc
        self.partial = partial
        self._send(json.dumps(partial).encode())

    def update(self, readings: list[dict]) -> None:
        """The clock readings taken so far (the guardian's record keeps the start reading)."""
        self.partial["clock_readings"] = list(readings)
        self._send(json.dumps(self.partial).encode())

    def done(self) -> None:
        """memq destroyed the session itself: the guardian exits without doing anything."""
        if self.proc.stdin is None or self.proc.stdin.closed:
            return
        self._send(DONE)
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass

    def _send(self, line: bytes) -> None:
        try:
            self.proc.stdin.write(line + b"\n")
            self.proc.stdin.flush()
        except (OSError, ValueError):
            pass  # the guardian is gone: memq record still cleans up itself


def start_guardian(session: str, output: Path, partial: dict) -> Guardian:
    """Starts the guardian of `session` (writing to `output`); see the module docstring."""
    package_root = str(Path(__file__).resolve().parents[2])  # the folder holding ctf2perfetto/
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH", "")]))
    proc = subprocess.Popen([sys.executable, "-m", "ctf2perfetto.capture.guardian", session, str(output)],
                            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True, env=env)
    return Guardian(proc, partial)


def main(argv: list[str]) -> int:
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)  # only the end of memq record ends the watch
    session, output = argv[0], Path(argv[1])
    lines = sys.stdin.buffer.read().splitlines()
    if lines and lines[-1].strip() == DONE:
        return 0
    from ctf2perfetto.capture.lttng import Lttng, lttng_environment
    from ctf2perfetto.capture.outdir import RECORD_FILE, write_record

    lttng = Lttng(lttng_environment())
    lttng.run("stop", session, check=False)
    lttng.run("destroy", session, check=False)
    record = {}
    for line in reversed(lines):
        try:
            record = json.loads(line)
            break
        except ValueError:
            continue
    if not (output / RECORD_FILE).exists() and output.is_dir():
        record["exit_code"] = None
        record["events"] = None
        record["warnings"] = ["memq record was killed before it finished (SIGKILL?): its guardian stopped and "
                              "destroyed the LTTng session; the command may have gone on running untraced"]
        write_record(output, record)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
