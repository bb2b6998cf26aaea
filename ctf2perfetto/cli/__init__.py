"""Command-line plumbing shared by `memq` and `ctf2perfetto`.

Every command runs under `run_command`, which turns a MemqError (and the few
exceptions a user can cause, like Ctrl-C or a broken pipe) into one line on
stderr and the right exit code. Anything else is a bug: it still prints one line,
with a hint to rerun with MEMQ_DEBUG=1 for the traceback.
"""
from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Callable

from ctf2perfetto.errors import MemqError, error_text, set_program


def error_line(prog: str, message: str) -> None:
    """Print `prog: error: message` on stderr, on one line."""
    print(error_text(message, prog), file=sys.stderr)


def run_command(prog: str, func: Callable[[], int | None]) -> int:
    """Run a command body, mapping failures to one line and an exit code."""
    set_program(prog)
    try:
        return int(func() or 0)
    except MemqError as exc:
        error_line(prog, str(exc))
        return exc.exit_code
    except KeyboardInterrupt:
        error_line(prog, "interrupted")
        return 130
    except BrokenPipeError:
        # The reader (e.g. `| head`) went away: not an error worth a line. Point stdout
        # at /dev/null so the interpreter's final flush does not fail again. (os.open,
        # not open(): the `cli.open` submodule shadows the builtin in this package.)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except OSError as exc:
        # A file the user named that turned out unreadable/unwritable past the checks: say which.
        if os.environ.get("MEMQ_DEBUG"):
            raise
        if exc.filename:
            error_line(prog, f"{exc.filename}: {exc.strerror or exc}")
        else:
            error_line(prog, f"internal error: {type(exc).__name__}: {exc} (rerun with MEMQ_DEBUG=1 for details)")
        return 1
    except Exception as exc:  # noqa: BLE001 - last line of defence, see module doc
        if os.environ.get("MEMQ_DEBUG"):
            raise
        error_line(prog, f"internal error: {type(exc).__name__}: {exc} (rerun with MEMQ_DEBUG=1 for details)")
        return 1


def stderr_is_terminal() -> bool:
    """Whether progress bars should be drawn."""
    return sys.stderr.isatty()


@contextlib.contextmanager
def ticking(text: str) -> Iterator[None]:
    """`memq: TEXT ... 12 s` on stderr, redrawn every second while the block runs, when stderr is a
    terminal (loading a big trace or one analysis can take minutes with nothing else to show). The
    engine's calls release the GIL, so the clock keeps moving while trace_processor works."""
    if not stderr_is_terminal():
        yield
        return
    start, stop = time.monotonic(), threading.Event()

    def draw() -> None:
        while not stop.wait(1.0):
            sys.stderr.write(f"\rmemq: {text} ... {time.monotonic() - start:.0f} s")
            sys.stderr.flush()

    sys.stderr.write(f"memq: {text} ...")
    sys.stderr.flush()
    thread = threading.Thread(target=draw, name="memq-ticker", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        sys.stderr.write(f"\rmemq: {text} ... {time.monotonic() - start:.1f} s\n")
        sys.stderr.flush()


def require_trace_file(path: Path) -> Path:
    """`path` if it is a non-empty file; otherwise UsageError saying what it is instead."""
    from ctf2perfetto.errors import UsageError

    if path.is_dir():
        raise UsageError(f"{path}: is a directory, not a trace file; convert it first: "
                         f"ctf2perfetto {path} -o out.pftrace")
    if not path.exists():
        raise UsageError(f"{path}: no such trace file")
    if not path.is_file():  # a fifo would block for ever, a device never end
        raise UsageError(f"{path}: not a regular file, not a trace")
    if path.stat().st_size == 0:
        raise UsageError(f"{path}: the trace file is empty")
    try:
        with path.open("rb") as f:
            f.read(1)
    except OSError as exc:
        raise UsageError(f"{path}: cannot read: {exc.strerror or exc}") from None
    return path
