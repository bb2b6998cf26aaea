"""A native `trace_processor_shell --stdiod` as memq serve's backend.

`--stdiod` (in trace_processor_shell since 2023, v52 included) loads the trace given
on its command line, then speaks the RPC byte stream on stdin/stdout: the same
messages the UI sends over the WebSocket, so requests are written through
unchanged. The shell reads stdin only once the trace is loaded, so the answer to a
first status request says the load is over. A runaway request is stopped by
killing the process (an in-process interrupt would leave the shell's signal
handler holding a stale pointer after a client reset); the server reloads.
"""
from __future__ import annotations

import subprocess
import tempfile
from collections import deque
from pathlib import Path
from typing import IO

from ..engine.embedded import protos
from ..engine.source import trace_source
from ..errors import MemqError
from ..paths import sql_package_dir
from . import wire
from .backend import Backend, Interrupted, Sink

_READ_BYTES = 1 << 20


def shell_command(binary: Path, trace: Path) -> list[str]:
    """The shell's command line: stdio RPC, memq's SQL package, the trace."""
    return [str(binary), "--stdiod", "--add-sql-package", str(sql_package_dir()), str(trace)]


class NativeBackend(Backend):
    """trace_processor_shell as a child process, RPC over its stdin and stdout."""

    kind = "native"

    def __init__(self, binary: Path, trace: Path) -> None:
        trace_source(trace)  # the same argument checks as the embedded engine
        self.binary = binary
        self.trace = trace
        self._interrupted = False
        self._splitter = wire.MessageSplitter()
        self._replies: deque[bytes] = deque()
        # Its log goes to a file: a pipe nobody drains would stall it once full.
        self._log: IO[bytes] = tempfile.TemporaryFile()
        try:
            # Its own session: a Ctrl-C in the terminal is memq serve's to handle, not the shell's.
            self._process: subprocess.Popen[bytes] | None = subprocess.Popen(
                shell_command(binary, trace), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log,
                start_new_session=True)
        except OSError as exc:
            self._log.close()
            raise MemqError(f"{binary}: cannot run trace_processor_shell: {exc.strerror or exc}") from exc
        try:
            status: list[bytes] = []
            self.forward(wire.request(protos().TraceProcessorRpc.TPM_GET_STATUS), status.append)
            self.status = wire.parse(status[-1]).status
        except BaseException:
            self.close()  # Ctrl-C or a failure while it loads: never leave it running behind us
            raise

    def forward(self, message: bytes, sink: Sink) -> None:
        process = self._process
        if process is None or process.stdin is None:
            raise MemqError("trace_processor_shell is not running")
        try:
            process.stdin.write(message)
            process.stdin.flush()
        except OSError:
            raise self._ended() from None
        while True:
            reply = self._next_reply()
            sink(reply)
            if wire.is_last_reply(wire.parse(reply)):
                return

    def _next_reply(self) -> bytes:
        assert self._process is not None and self._process.stdout is not None
        while not self._replies:
            try:
                data = self._process.stdout.read1(_READ_BYTES)
            except (OSError, ValueError):
                data = b""
            if not data:
                raise self._ended()
            self._replies.extend(self._splitter.feed(data))
        return self._replies.popleft()

    def _ended(self) -> MemqError:
        """The error for a shell that stopped answering (killed by interrupt(), or crashed)."""
        assert self._process is not None
        code = self._process.wait()
        self._log.seek(0)
        lines = self._log.read().decode(errors="replace").replace("\r", "\n").strip().splitlines()
        self.close()
        if self._interrupted:
            return Interrupted("trace_processor_shell was stopped")
        return MemqError(f"{self.binary} exited with status {code} ({self.trace}): "
                         f"{lines[-1] if lines else 'no message'}")

    def interrupt(self) -> None:
        process = self._process
        if process is not None:
            self._interrupted = True
            process.kill()

    def close(self) -> None:
        process, self._process = self._process, None
        if process is not None:
            if process.poll() is None:
                process.kill()
            process.wait()
            for pipe in (process.stdin, process.stdout):
                try:
                    if pipe is not None:
                        pipe.close()
                except OSError:
                    pass
        if not self._log.closed:
            self._log.close()

    @property
    def alive(self) -> bool:
        return self._process is not None
