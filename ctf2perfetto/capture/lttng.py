"""The `lttng` client and the session daemon it talks to."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

from ctf2perfetto.errors import MemqError

LTTNG_TIMEOUT_S = 120
INSTALL_HINT = "install LTTng: apt-get install lttng-tools liblttng-ust1 (or run scripts/install.sh)"


class Lttng:
    """The `lttng` client, with the environment that reaches our session daemon."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.binary = shutil.which("lttng", path=env.get("PATH"))
        if not self.binary or not shutil.which("lttng-sessiond", path=env.get("PATH")):
            raise MemqError(f"LTTng is not installed (no lttng / lttng-sessiond on PATH): {INSTALL_HINT}")

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        # In a process session of its own: a terminal's ^C or hang-up meant for memq must not
        # kill `lttng destroy` halfway.
        try:
            proc = subprocess.run([self.binary, *args], env=self.env, capture_output=True, text=True,
                                  timeout=LTTNG_TIMEOUT_S, start_new_session=True, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as exc:
            raise MemqError(f"`lttng {' '.join(args)}` did not finish in {LTTNG_TIMEOUT_S} s") from exc
        if check and proc.returncode != 0:
            raise MemqError(f"`lttng {' '.join(args)}` failed: {_last_line(proc.stderr or proc.stdout)}")
        return proc

    def reachable(self) -> bool:
        """Whether a session daemon answers (`lttng list` fails without one)."""
        return self.run("list", check=False).returncode == 0

    def version(self) -> str:
        text = self.run("--version", check=False).stdout
        match = re.search(r"\d+\.\d+(\.\d+)?", text)
        return match.group(0) if match else _last_line(text)


def _last_line(text: str) -> str:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1] if lines else "no output"


def lttng_environment() -> dict[str, str]:
    """Environment for lttng, the daemon and the traced command.

    root uses the system daemon (/var/run/lttng). Another user gets a private
    daemon under LTTNG_HOME (default $HOME); when HOME is not writable, under a
    per-user directory in /tmp, so memq still records.
    """
    env = dict(os.environ)
    if os.geteuid() != 0 and "LTTNG_HOME" not in env:
        home = env.get("HOME", "")
        if not home or not os.access(home, os.W_OK):
            private = Path("/tmp") / f"memq-lttng-{os.geteuid()}"
            private.mkdir(mode=0o700, exist_ok=True)
            env["LTTNG_HOME"] = str(private)
    return env


def ensure_sessiond(lttng: Lttng) -> None:
    """Start a session daemon when none answers (user-space only).

    The daemon runs in the foreground of its own process session rather than with
    `--daemonize`: on some machines (Firecracker GPU VMs) the daemonized child dies
    before it signals its parent and `--daemonize` fails with nothing but a lock-file
    message. Its stderr is a pipe read only when it exits early, so the error it gives
    is the one we report; once it answers, we close our end (it ignores SIGPIPE).
    """
    if lttng.reachable():
        return
    daemon = shutil.which("lttng-sessiond", path=lttng.env.get("PATH"))
    proc = subprocess.Popen([daemon, "--no-kernel"], env=lttng.env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + LTTNG_TIMEOUT_S
        while time.monotonic() < deadline:
            if lttng.reachable():
                return
            if proc.poll() is not None:
                # Another memq may have started one meanwhile (ours then exits: lock held).
                if lttng.reachable():
                    return
                raise MemqError(f"cannot start lttng-sessiond (exit {proc.returncode}): "
                                f"{_first_error(proc.stderr.read())}")
            time.sleep(0.1)
        proc.kill()
        raise MemqError(f"lttng-sessiond did not answer in {LTTNG_TIMEOUT_S} s")
    finally:
        proc.stderr.close()


def _first_error(text: str) -> str:
    """The daemon's fatal error: its last `Error:` line (PERROR lines before it are often
    warnings, e.g. an open-files limit it may not raise), else its last line."""
    errors = [line.strip() for line in (text or "").splitlines() if line.startswith("Error")]
    return errors[-1] if errors else _last_line(text)


WRAPPED_COUNT = 1 << 63  # no session loses 9.2e18 events: a count this big is a wrapped counter


def discarded_counts(lttng: Lttng, session: str) -> tuple[int, int]:
    """(discarded events, lost packets) of the session's channels, from `lttng list`.

    LTTng's per-stream discarded counter can go backwards under contention (seen with
    4 KiB sub-buffers and 8 writer threads); `lttng list` then shows the total plus
    2**63. The trace's own DiscardedEvents deltas have the same net change (see
    decode.py), so the wrap is taken off here to keep both reports equal.
    """
    text = lttng.run("list", session, check=False).stdout
    events = sum(int(n) % WRAPPED_COUNT for n in re.findall(r"Discarded events:\s*(\d+)", text))
    packets = sum(int(n) % WRAPPED_COUNT for n in re.findall(r"Lost packets:\s*(\d+)", text))
    return events, packets
