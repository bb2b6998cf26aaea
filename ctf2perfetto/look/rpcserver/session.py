"""One trace processor, one client at a time: the engine side of memq serve.

The backend lives on one thread, which runs the client's requests in the order
they came. One client (a UI tab's WebSocket) holds the engine; a second one is told
who holds it. When the holder goes away (tab closed or reloaded) while its request
runs, the request gets DISCONNECT_GRACE_S to finish; then it is interrupted and the
trace is loaded again into a fresh backend (an interrupted trace_processor is dead),
so the server survives a runaway query. What the tab had built (views, included
modules) went with it anyway: the next tab restores the initial tables first.
Requests of a client that left are dropped.
"""
from __future__ import annotations

import queue
import threading
import time
from typing import Any, Callable, Protocol

from ctf2perfetto.engine.embedded import protos
from ctf2perfetto.errors import MemqError
from ctf2perfetto.look.rpcserver import wire
from ctf2perfetto.look.rpcserver.backend import Backend, Interrupted

# Marks the UI shows as a websocket problem (a plain dialog with our text, not a crash report).
UI_CONNECTION_ERROR = "(ERR:ws)"
# What a second tab is told, in the error message and as the close frame's reason (at most 123 bytes): under load
# the UI may show the close before the message, so both must say what to do.
SECOND_TAB = "another tab is using this trace processor; close that tab, then reload this page"
# A request whose tab closed may finish in this time; after it, a reload is cheaper than waiting on (the
# UI's own queries take seconds at most; a reload costs a trace load).
DISCONNECT_GRACE_S = 2.0
# A tab connecting while another holds the engine waits this long for it to let go before it is refused: the
# server learns of a closed tab a moment after the close, and a UI refused while it loads the trace fails an
# assertion in its loadTrace (seen at load 3, a page opened 0.5 s after the previous one closed).
HOLDER_GONE_S = 5.0


class Client(Protocol):
    """A connected client: replies go to `send` (from the engine thread; never raises)."""

    label: str

    def send(self, data: bytes) -> bool: ...

    def close(self, reason: str) -> None: ...


class Session:
    """Serves one trace from its engine thread.

    `backend` is the trace loaded already; without it the engine thread loads it first (`loader`), with the
    engine's `status` and `kind` known beforehand, so that a UI can connect while a big trace loads: its
    requests wait in the queue. A failed load ends the session through `on_failure`.
    """

    def __init__(self, loader: Callable[[], Backend], trace_name: str, log: Callable[[str], None],
                 on_failure: Callable[[MemqError], None], backend: Backend | None = None,
                 status: Any = None, kind: str = "") -> None:
        self._loader = loader
        self.trace_name = trace_name
        self._log = log
        self._on_failure = on_failure
        self._backend: Backend | None = backend
        self.engine_status = backend.status if backend is not None else status
        self.kind = backend.kind if backend is not None else kind
        self._queue: queue.SimpleQueue[tuple[Client, bytes] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()  # guards _client, _running and _backend
        self._released = threading.Condition(self._lock)  # notified when the client lets go
        self._client: Client | None = None
        self._running: Client | None = None
        self._request_no = 0  # which request runs (so a late timer does not interrupt the next one)
        self._stopping = False
        self._reset_by: Client | None = None  # the tab that reset the trace processor (its trace is gone)
        self._thread = threading.Thread(target=self._serve, name="memq-engine", daemon=True)

    def start(self) -> "Session":
        self._thread.start()
        return self

    # -- clients (HTTP threads) ------------------------------------------------------
    def status(self) -> bytes:
        """The /status answer; while a tab holds the engine, its name says so (the UI shows it)."""
        with self._lock:
            holder = self._client
        name = self.trace_name if holder is None else f"{self.trace_name} (in use by {holder.label})"
        return wire.status_result(name, self.engine_status)

    def attach(self, client: Client) -> str | None:
        """Make `client` the one client; or the message saying why it cannot be. A tab that closed lets go a
        moment after its close, on its connection's thread (later still on a loaded machine): the tab that
        follows it (a reload, the next page) waits up to HOLDER_GONE_S for that before it is refused."""
        deadline = time.monotonic() + HOLDER_GONE_S
        with self._released:
            while self._client is not None and (left := deadline - time.monotonic()) > 0:
                self._released.wait(left)
            if self._client is not None:
                return f"memq serve: {SECOND_TAB} (the other tab: {self._client.label}) {UI_CONNECTION_ERROR}"
            self._client = client
        return None

    def submit(self, client: Client, message: bytes) -> None:
        """Queue one framed request of `client`."""
        self._queue.put((client, message))

    def detach(self, client: Client) -> None:
        """`client` went away: drop its queued requests; the one running is interrupted unless it ends soon."""
        with self._lock:
            if self._client is client:
                self._client = None
                self._released.notify_all()
            if self._running is not client:
                return
            request_no = self._request_no
        timer = threading.Timer(DISCONNECT_GRACE_S, self._interrupt, (client, request_no))
        timer.daemon = True
        timer.start()

    def _interrupt(self, client: Client, request_no: int) -> None:
        with self._lock:
            if self._running is client and self._request_no == request_no and self._backend is not None:
                self._backend.interrupt()

    def stop(self, timeout_s: float = 10.0) -> None:
        """Interrupt whatever runs, stop the thread and free the backend."""
        with self._lock:
            self._client = None
            self._stopping = True
            self._released.notify_all()
            if self._running is not None and self._backend is not None:
                self._backend.interrupt()
        self._queue.put(None)
        if self._thread.is_alive():
            self._thread.join(timeout_s)
        if not self._thread.is_alive():
            self._close_backend()

    # -- the engine thread -------------------------------------------------------------
    def _serve(self) -> None:
        if self._backend is None:
            self._load(again=False)
        while (item := self._queue.get()) is not None:
            client, message = item
            if self._reset_by is not None and self._reset_by is not client and client is self._client:
                # A tab reset the trace processor (the UI does on some reloads) or changed its trace, and
                # went: the served trace is loaded again for this one.
                self._log(f"a tab had reset the trace processor or changed its trace; loading {self.trace_name} again")
                self._reset_by = None
                self._reload()
            with self._lock:
                backend = self._backend
                if client is not self._client or backend is None:
                    continue  # its tab is gone
                self._running = client  # every request: a closed tab's runaway one is interrupted (detach)
                self._request_no += 1
            if _is_reset(message):
                self._reset_by = client
            started = time.monotonic()
            failure: MemqError | None = None
            try:
                backend.forward(message, client.send)
            except MemqError as exc:
                failure = exc
            except Exception as exc:  # noqa: BLE001 - a bug must not leave the server without its engine thread
                failure = MemqError(f"internal error: {type(exc).__name__}: {exc}")
            with self._lock:
                self._running = None
            if isinstance(failure, Interrupted):
                self._after_interrupt(client, time.monotonic() - started)
            elif failure is not None:
                self._log(f"trace processor failed: {failure}; loading {self.trace_name} again")
                client.send(wire.fatal_error(f"memq serve: the trace processor failed ({failure}); "
                                             f"reload this page {UI_CONNECTION_ERROR}"))
                client.close("trace processor failed")
                self._reload()
            elif not backend.alive:
                # It answered with its last words (a fatal_error the client has now) and ended.
                self._log(f"trace processor ended; loading {self.trace_name} again")
                client.close("trace processor ended")
                self._reload()
        self._close_backend()

    def _after_interrupt(self, client: Client, seconds: float) -> None:
        if self._stopping:
            self._close_backend()
            return
        self._log(f"stopped a request after {seconds:.1f} s: its tab ({client.label}) closed; "
                  f"loading {self.trace_name} again")
        self._reload()

    def _reload(self) -> None:
        self._close_backend()
        if not self._stopping:
            self._load(again=True)

    def _load(self, again: bool) -> None:
        started = time.monotonic()
        try:
            backend = self._loader()
        except MemqError as exc:
            self._on_failure(exc)
            return
        except Exception as exc:  # noqa: BLE001 - the server must stop with a line, not hang without its engine
            self._on_failure(MemqError(f"internal error while loading: {type(exc).__name__}: {exc}"))
            return
        with self._lock:
            self._backend = backend
        self._log(f"{self.trace_name} loaded{' again' if again else ''} in {time.monotonic() - started:.1f} s; ready")

    def _close_backend(self) -> None:
        with self._lock:
            backend, self._backend = self._backend, None
        if backend is not None:
            backend.close()


def _is_reset(message: bytes) -> bool:
    """Whether a framed request changes the served trace: resets the trace processor (the trace goes), or appends
    trace data to it or finalises it again (trace_processor may end on those, the served trace is no longer it)."""
    try:
        request = wire.parse(message)
    except Exception:  # noqa: BLE001 - not ours to judge: the backend answers what it cannot parse
        return False
    rpc = protos().TraceProcessorRpc
    return request.request in (rpc.TPM_RESET_TRACE_PROCESSOR, rpc.TPM_APPEND_TRACE_DATA, rpc.TPM_FINALIZE_TRACE_DATA)
