"""A trace processor in a child process, spoken to over its stdin and stdout: memq serve's backend.

Two programs speak the RPC byte stream on a pipe after loading the trace given on
their command line: a native `trace_processor_shell --stdiod` (since 2023, v52
included) and memq's own worker (`python3 -m ctf2perfetto.look.rpcserver.worker`, the
embedded engine). Requests are written through unchanged; the replies are read up
to the request's last one (wire.is_last_reply). Neither reads stdin before the
trace is loaded, so the answer to a first status request says the load is over.
A runaway request is stopped by ending the process (the server then loads the trace
again): nothing needs compiling in for it, and a native shell's own SIGINT handler
would be left holding a freed instance after a client reset.
"""
from __future__ import annotations

import subprocess
import sys
import tempfile
import threading
from collections import deque
from pathlib import Path
from typing import IO

from ctf2perfetto.engine.embedded import protos
from ctf2perfetto.engine.source import trace_source
from ctf2perfetto.errors import MemqError
from ctf2perfetto.look.rpcserver import wire
from ctf2perfetto.look.rpcserver.backend import EMBEDDED, NATIVE, Backend, Interrupted, Sink
from ctf2perfetto.paths import sql_package_dir

_READ_BYTES = 1 << 20


class PipeBackend(Backend):
    """`command` as a child process holding the trace; `name` says what it is in messages.

    `log_stderr` sends the child's stderr to a file (read back for a failure's last line); otherwise it
    goes to ours (the worker's progress bar on a terminal).
    """

    def __init__(self, command: list[str], name: str, kind: str, log_stderr: bool) -> None:
        self.name = name
        self.kind = kind
        self._interrupted = False
        self._in_flight = False
        self._lock = threading.Lock()  # guards _in_flight and the kill in interrupt()
        self._splitter = wire.MessageSplitter()
        self._replies: deque[bytes] = deque()
        self._log: IO[bytes] | None = tempfile.TemporaryFile() if log_stderr else None
        try:
            # Its own session: a Ctrl-C in the terminal is memq serve's to handle, not the child's.
            self._process: subprocess.Popen[bytes] | None = subprocess.Popen(
                command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log, start_new_session=True)
        except OSError as exc:
            self._close_log()
            raise MemqError(f"{command[0]}: cannot run {name}: {exc.strerror or exc}") from exc
        try:
            status: list[bytes] = []
            self.forward(wire.request(protos().TraceProcessorRpc.TPM_GET_STATUS), status.append)
            reply = wire.parse(status[-1])
            if reply.fatal_error:
                raise MemqError(reply.fatal_error)
            self.status = reply.status
        except BaseException:
            self.close()  # Ctrl-C or a failure while it loads: never leave it running behind us
            raise

    def forward(self, message: bytes, sink: Sink) -> None:
        process = self._process
        if process is None or process.stdin is None:
            raise MemqError(f"{self.name} is not running")
        with self._lock:
            self._in_flight = True
        try:
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
        finally:
            with self._lock:
                self._in_flight = False

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
        """The error for a child that stopped answering (ended by interrupt(), or died)."""
        assert self._process is not None
        code = self._process.wait()
        last = "no message"
        if self._log is not None:
            self._log.seek(0)
            lines = self._log.read().decode(errors="replace").replace("\r", "\n").strip().splitlines()
            last = lines[-1] if lines else last
        self.close()
        if self._interrupted:
            return Interrupted(f"{self.name} was stopped")
        return MemqError(f"{self.name} exited with status {code}: {last}")

    def interrupt(self) -> None:
        """End the child if a request runs (from any thread); an idle one is left alone."""
        with self._lock:
            if self._in_flight and self._process is not None:
                self._interrupted = True
                self._process.kill()

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
        self._close_log()

    def _close_log(self) -> None:
        if self._log is not None and not self._log.closed:
            self._log.close()

    @property
    def alive(self) -> bool:
        return self._process is not None and self._process.poll() is None


def native_command(binary: Path, trace: Path, sql_package: Path) -> list[str]:
    """trace_processor_shell's command line: stdio RPC, memq's SQL package, the trace."""
    return [str(binary), "--stdiod", "--add-sql-package", str(sql_package), str(trace)]


def open_backend(trace: Path, binary: Path | None = None) -> Backend:
    """`trace` loaded by memq's embedded engine, or by the native shell `binary` when given."""
    trace_source(trace)  # the argument checks every engine makes (a missing file, a directory, an empty file)
    if binary is None:
        return PipeBackend([sys.executable, "-m", "ctf2perfetto.look.rpcserver.worker", str(trace)],
                           "memq's embedded engine", EMBEDDED, log_stderr=False)
    return PipeBackend(native_command(binary, trace, sql_package_dir()), str(binary), NATIVE, log_stderr=True)
