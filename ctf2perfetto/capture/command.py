"""Running the command: the program it resolves to, its terminal and process group, forwarded signals."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

from ctf2perfetto.errors import MemqError


def resolve_command(argv0: str, env: dict[str, str]) -> str | None:
    """The program that will really run, or None when there is none.

    LD_PRELOAD is inherited by every child, so wrapper scripts (pyenv shims) are
    resolved to the program they run before the command starts.

    Found but not runnable (no execute permission, a directory) is a MemqError with
    exit code 126, as a shell reports it. A pyenv shim is a bash script that spawns
    pyenv, readlink, ... before exec'ing the interpreter: with LD_PRELOAD set, every
    one of them would be traced. Ask pyenv (without the preload) which program it
    would run.
    """
    path = shutil.which(argv0, path=env.get("PATH"))
    if path is None:
        candidates = [Path(argv0)] if "/" in argv0 else [
            Path(d or ".", argv0) for d in env.get("PATH", os.defpath).split(os.pathsep)]
        for candidate in candidates:
            if candidate.is_dir():
                raise MemqError(f"{argv0}: is a directory, not a command", exit_code=126)
            if candidate.exists():
                raise MemqError(f"{argv0}: cannot run: permission denied (not executable)", exit_code=126)
        return None
    if Path(path).parent.name == "shims" and shutil.which("pyenv", path=env.get("PATH")):
        proc = subprocess.run(["pyenv", "which", Path(path).name], env=env, capture_output=True, text=True)
        real = proc.stdout.strip()
        if proc.returncode == 0 and real and os.access(real, os.X_OK):
            return real
    return path


class Foreground:
    """The command runs in its own process group, given the terminal if we have one.

    Ctrl-C on a terminal then reaches the command (and its children) once, as
    without memq; SIGINT/SIGTERM sent to memq itself are forwarded to the
    command's group. Either way memq lives on to stop the session.
    """

    def __init__(self) -> None:
        self.tty = None
        try:
            fd = os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY)
            if os.tcgetpgrp(fd) == os.getpgrp():
                self.tty = fd
            else:
                os.close(fd)
        except OSError:
            pass

    def preexec(self) -> None:
        """In the child, before exec: take the terminal (SIGTTOU ignored meanwhile)."""
        if self.tty is not None:
            old = signal.signal(signal.SIGTTOU, signal.SIG_IGN)
            os.tcsetpgrp(self.tty, os.getpgrp())
            signal.signal(signal.SIGTTOU, old)

    def restore(self) -> None:
        if self.tty is not None:
            old = signal.signal(signal.SIGTTOU, signal.SIG_IGN)
            try:
                os.tcsetpgrp(self.tty, os.getpgrp())
            except OSError:
                pass
            signal.signal(signal.SIGTTOU, old)
            os.close(self.tty)


class Signals:
    """SIGINT, SIGTERM and SIGHUP for the whole of `memq record`.

    While the command runs they are forwarded to its process group (a closed terminal's
    SIGHUP too); before it starts they cancel the start; after it ended they are only
    counted: the session must still be stopped and destroyed and memq-record.json written,
    so a second ^C or a SIGTERM after a SIGINT cannot leave a session recording.
    """

    HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __init__(self) -> None:
        self.received: list[int] = []
        self.child_group: int | None = None
        self.previous = {sig: signal.signal(sig, self._handle) for sig in self.HANDLED}

    def _handle(self, signum: int, _frame) -> None:
        self.received.append(signum)
        if self.child_group is not None:
            try:
                os.killpg(self.child_group, signum)
            except (ProcessLookupError, PermissionError):
                pass

    def names(self) -> list[str]:
        return [signal.Signals(s).name for s in self.received]

    def restore(self) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)


def run_command(argv: list[str], env: dict[str, str], signals: Signals) -> int:
    """Run the command to its end; returns its exit code (128+N when killed by signal N)."""
    foreground = Foreground()
    try:
        child = subprocess.Popen(argv, env=env, process_group=0, preexec_fn=foreground.preexec)
    except OSError as exc:
        foreground.restore()
        raise MemqError(f"{argv[0]}: cannot run: {exc.strerror}", exit_code=126) from exc
    signals.child_group = child.pid
    try:
        code = child.wait()
    finally:
        signals.child_group = None
        foreground.restore()
    return 128 - code if code < 0 else code
