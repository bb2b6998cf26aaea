"""Run library code that may hang or abort where it can be stopped: a forked child, with a bound.

libbabeltrace2 can spin forever (corrupt metadata) or abort the process (its
preconditions and asserts) on input memq has not foreseen. `guarded(func, what)`
runs `func()` in a forked child and returns its (JSON-able) result; the child
may call `beat()` (passed as `func`'s argument) to say it is making progress,
which pushes the deadline back. A child that aborts, is killed by a signal or
does not finish in time becomes one MemqError line saying what it was doing; a
MemqError raised in the child is raised again here. Ctrl-C kills the child and
raises KeyboardInterrupt. The child's memory is bounded too (MemoryBound).

The child inherits every lock as it was at the fork, but none of the other
threads, so no other thread may be inside the library then, nor ending after
having used it: join such a thread with `join_thread`, not Thread.join (the
child runs only `func`, then `os._exit`).
"""
from __future__ import annotations

import faulthandler
import json
import os
import resource
import select
import signal
import threading
import time
from typing import Any, Callable

from ctf2perfetto.errors import MemqError

DEFAULT_SECONDS = 60.0
TIMEOUT_ENV = "MEMQ_GUARD_SECONDS"  # the no-progress bound, in seconds
_BEAT = b"."
_MAX_STDERR = 64 << 10


def bound_seconds(default: float = DEFAULT_SECONDS) -> float:
    """The no-progress bound: $MEMQ_GUARD_SECONDS when set (and positive), else `default`."""
    try:
        value = float(os.environ.get(TIMEOUT_ENV, ""))
    except ValueError:
        return default
    return value if value > 0 else default


def join_thread(thread: threading.Thread, seconds: float) -> bool:
    """Joins `thread` and waits until the kernel has reaped it; False when that takes over `seconds`.

    Thread.join() returns once the thread's Python code is done, but the thread then still runs
    glibc's exit path, which calls the libraries' thread destructors: glib's g_slice cleanup of a
    thread that used libbabeltrace2 takes g_slice's mutexes there. A guarded() fork in that window
    can give the child such a mutex locked for good, and the child's first g_slice_alloc waits forever
    (seen under load as "made no progress" on a healthy trace). Once its /proc task entry is gone
    the thread runs nothing more.
    """
    deadline = time.monotonic() + seconds
    thread.join(timeout=seconds)
    if thread.is_alive():
        return False
    task = f"/proc/self/task/{thread.native_id}"
    while os.path.exists(task):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.001)
    return True


def guarded(func: Callable[[Callable[[], None]], Any], what: str, seconds: float | None = None) -> Any:
    """func(beat)'s result, computed in a child process; see the module docstring."""
    limit = bound_seconds() if seconds is None else seconds
    result_r, result_w = os.pipe()
    err_r, err_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        _child(func, result_r, result_w, err_r, err_w)
    os.close(result_w)
    os.close(err_w)
    try:
        payload, stderr, status = _wait(pid, result_r, err_r, limit, what)
    finally:
        os.close(result_r)
        os.close(err_r)
    return _outcome(payload, stderr, status, what)


def _child(func, result_r: int, result_w: int, err_r: int, err_w: int) -> None:
    code = 0
    try:
        os.close(result_r)
        os.close(err_r)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides; it kills us on Ctrl-C
        faulthandler.disable()  # a crash's words are the library's, on the pipe below
        MemoryBound()  # an unbounded allocation fails here instead of taking the machine's memory
        os.dup2(err_w, 2)  # the library's last words (assert, precondition) come back to the parent

        def beat() -> None:
            os.write(result_w, _BEAT)

        value = func(beat)
        reply = {"value": value}
    except MemqError as exc:
        reply, code = {"error": str(exc), "exit_code": exc.exit_code}, 3
    except BaseException as exc:  # noqa: BLE001 - reported by the parent as one line
        reply, code = {"error": f"{type(exc).__name__}: {exc}", "internal": True}, 3
    try:
        data = json.dumps(reply).encode()
        view = memoryview(b"\n" + data)
        while view:
            view = view[os.write(result_w, view):]
    finally:
        os._exit(code)


def _wait(pid: int, result_r: int, err_r: int, limit: float, what: str) -> tuple[bytes, bytes, int]:
    """Reads the child's pipes until it exits; kills it past the bound or on Ctrl-C."""
    payload, stderr = bytearray(), bytearray()
    deadline = time.monotonic() + limit
    # poll, not select: select() cannot watch descriptors numbered past 1023, and a long-lived process
    # (a notebook, memq serve) reaches them: libbabeltrace2 2.0 keeps each trace's metadata file open.
    poller = select.poll()
    open_fds = {result_r, err_r}
    for fd in open_fds:
        poller.register(fd, select.POLLIN)
    try:
        while open_fds:
            left = deadline - time.monotonic()
            if left <= 0:
                _kill(pid)
                raise MemqError(f"{what}: babeltrace2 made no progress in {limit:g} s (corrupt input it loops on?); "
                                f"stopped it ({TIMEOUT_ENV} sets this bound)")
            for fd, _ in poller.poll(min(left, 0.5) * 1000):
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    open_fds.discard(fd)
                    poller.unregister(fd)
                elif fd == err_r:
                    stderr += chunk[: max(0, _MAX_STDERR - len(stderr))]
                else:
                    if chunk.strip(_BEAT) or b"\n" in chunk:
                        payload += chunk
                    deadline = time.monotonic() + limit  # a beat or the reply: progress
        _, status = os.waitpid(pid, 0)
        return bytes(payload), bytes(stderr), status
    except BaseException:
        _kill(pid)
        raise


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except (ProcessLookupError, ChildProcessError):
        pass


def _outcome(payload: bytes, stderr: bytes, status: int, what: str) -> Any:
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else f"signal {sig}"
        cause = last_words(stderr)
        raise MemqError(f"{what}: babeltrace2 crashed ({name})" + (f": {cause}" if cause else "")
                        + "; the input is corrupt in a way memq does not check yet")
    text = payload.split(b"\n", 1)[1] if b"\n" in payload else b""
    try:
        reply = json.loads(text.decode(errors="replace"))
    except ValueError:
        raise MemqError(f"{what}: the checking process ended without an answer (exit status "
                        f"{os.WEXITSTATUS(status)})") from None
    if "error" in reply:
        if reply.get("internal"):
            raise MemqError(f"{what}: internal error in the checking process: {reply['error']}")
        raise MemqError(reply["error"], exit_code=reply.get("exit_code", 1))
    return reply["value"]


def last_words(stderr: bytes) -> str:
    """The line of a library's dying message that says why (an assert or a precondition)."""
    lines = [" ".join(line.split()) for line in stderr.decode(errors="replace").splitlines() if line.strip()]
    for line in reversed(lines):
        if "Assertion" in line:
            return line.split("  ", 1)[-1].split("┻━┻", 1)[-1].strip()
    for i, line in enumerate(lines):
        if "precondition not satisfied" in line and i + 1 < len(lines):
            return "precondition not satisfied: " + _after_location(lines[i + 1])
    return lines[-1][:300] if lines else ""


def _after_location(line: str) -> str:
    """`11-24 ... F LIB/X fn@file.c:132 Component is NULL:` -> `Component is NULL`."""
    parts = line.split("@", 1)
    tail = parts[1].split(" ", 1)[1] if len(parts) == 2 and " " in parts[1] else line
    return tail.strip().rstrip(":")


MEMORY_HEADROOM = 8 << 30  # what a decode may add to its address space (at most half the RAM)


class MemoryBound:
    """Caps this process's address space at what it uses now plus MEMORY_HEADROOM, until release().

    A corrupt length field can make libbabeltrace2 allocate without bound (2^32 field objects for
    one sequence); with overcommit the allocations succeed and the OOM killer later takes this
    process (or another one) without a word. Under the cap they fail once the headroom is used
    and the library's crash becomes one line (native/crash.c). A decode holds two batches and
    the live allocations of the model: far less. Only ever lowers the soft limit, and puts it back.
    """

    def __init__(self) -> None:
        self.previous = resource.getrlimit(resource.RLIMIT_AS)
        soft, hard = self.previous
        cap = _vm_size() + min(MEMORY_HEADROOM, _ram_bytes() // 2)
        self.active = cap > 0 and (soft == resource.RLIM_INFINITY or cap < soft) and (
            hard == resource.RLIM_INFINITY or cap <= hard)
        if self.active:
            resource.setrlimit(resource.RLIMIT_AS, (cap, hard))

    def release(self) -> None:
        if self.active:
            resource.setrlimit(resource.RLIMIT_AS, self.previous)
            self.active = False


def _ram_bytes() -> int:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return 0


def _vm_size() -> int:
    """This process's current address-space size (VmSize), in bytes; 0 when unknown."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0
