"""The embedded engine behind a pipe, as `trace_processor_shell --stdiod` is: memq serve's engine process.

    python3 -m ctf2perfetto.look.rpcserver.worker TRACE

Loads TRACE into the embedded engine (trace_processor.wasm, memq package registered),
then passes the bytes read on stdin to trace_processor's RPC and writes its replies
to stdout, unchanged, until stdin closes. memq serve runs the engine in this child
process so that a runaway query is stopped the way a native shell's is, by ending
the process, with no interrupt checks compiled into the engine. A trace that does
not load is answered with one `fatal_error` message on stdout (what memq serve
reports) and exit status 1; stderr carries the load's progress bar on a terminal.
"""
from __future__ import annotations

import ctypes
import os
import signal
import sys
from pathlib import Path

from ctf2perfetto.engine.embedded import EmbeddedEngine
from ctf2perfetto.engine.source import trace_source
from ctf2perfetto.errors import MemqError
from ctf2perfetto.look.rpcserver import wire

READ_BYTES = 1 << 20
_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent() -> None:
    """End this process when memq serve does, however it ends (SIGKILL included): a runaway query never reads
    stdin again, so without this it would go on using a core after its server is gone."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        return  # not Linux: a closed stdin still ends it between requests
    if os.getppid() == 1:  # the server was already gone before the request took effect
        os._exit(1)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python3 -m ctf2perfetto.look.rpcserver.worker TRACE", file=sys.stderr)
        return 2
    die_with_parent()
    replies = _Replies(sys.stdout.buffer)
    try:
        engine = EmbeddedEngine(trace_source(Path(args[0])))
    except MemqError as exc:
        replies.fatal(str(exc))
        return 1
    with engine:
        while not replies.gone and (chunk := os.read(sys.stdin.fileno(), READ_BYTES)):
            try:
                engine.forward(chunk, replies.write)
            except MemqError as exc:  # trace_processor died (out of memory, a failed check)
                replies.fatal(str(exc))
                return 1
            replies.flush()
    if replies.gone:  # no final flush into the broken pipe at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


class _Replies:
    """stdout for replies; once memq serve is gone (a broken pipe) it swallows them and says so in `gone`.

    A write must not raise: it runs inside trace_processor's reply callback.
    """

    def __init__(self, out) -> None:
        self._out = out
        self.gone = False

    def write(self, data: bytes) -> None:
        if not self.gone:
            try:
                self._out.write(data)
            except OSError:
                self.gone = True

    def flush(self) -> None:
        if not self.gone:
            try:
                self._out.flush()
            except OSError:
                self.gone = True

    def fatal(self, message: str) -> None:
        """The last reply: trace_processor cannot go on (memq serve reports `message`)."""
        self.write(wire.fatal_error(message))
        self.flush()


if __name__ == "__main__":
    sys.exit(main())
