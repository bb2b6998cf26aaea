"""`memq record`: one LTTng user-space session around one command.

The whole LTTng dance, in order: a reachable session daemon (started when
none is), a session writing to the output directory, one user-space channel
(blocking with a finite timeout, or discard), the events and contexts, the
LD_PRELOAD set (fork/dl helpers, memq's preload library: HIP/CUDA and, with
the `libc` API, the host heap at a size threshold; or LTTng's libc wrapper
with `--host-source lttng`) and the library's settings in the environment,
the command itself with SIGINT/SIGTERM/SIGHUP forwarded, then stop, the
discarded event count, destroy -- the last three whatever happened to the
command, and whatever signals arrive meanwhile (they are recorded, not obeyed,
until memq-record.json is written). If memq itself is killed (SIGKILL), a
guardian process (record_guard.py) stops and destroys the session.
`memq-record.json` in the output directory says what was done.

LTTng semantics worth knowing: a session records every instrumented process
of the user that registers while it is active, not only the command's tree
(processes are told apart by the vpid context); LD_PRELOAD is inherited by
every child, so wrapper scripts (pyenv shims) are resolved to the program
they run before the command starts.
"""
from __future__ import annotations

import ctypes.util
import datetime as _dt
import json
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from . import __version__
from .capture import CAPTURE_ENV, Capture
from .errors import MemqError, UsageError
from .paths import native_library
from .record_guard import start_guardian

APIS = ("hip", "cuda", "libc")
MODES = ("blocking", "discard")
# Where `--api libc` events come from: memq's own heap wrappers (blocks at or above
# --host-min-size as events, smaller ones as per-thread totals) or LTTng's libc
# wrapper (every call an event, raw lttng_ust_libc:* events as in older traces).
HOST_SOURCES = ("memq", "lttng")
HOST_MIN_SIZE = 4096
HOST_MIN_SIZE_RE = re.compile(r"^(\d+)([kKmMgG]?)$")
HOST_MIN_SIZE_MAX = 1 << 48  # beyond any heap block: no block would be an event
# Content fingerprints of copies (docs/EVENTS.md "Content fingerprints"), passed to the preload library.
CONTENT_MODES = ("sampled", "full", "off")
CONTENT_ENV = "MEMQ_CONTENT"
RECORD_FILE = "memq-record.json"
CHANNEL = "memq"
# Finite, so a stuck consumer daemon delays the program (at most this long per
# event) instead of hanging it forever; events then count as discarded.
BLOCKING_TIMEOUT_US = 200_000
# Per-CPU ring buffer: 8 x 2 MiB absorbs bursts of ~600k events between
# consumer reads, what a heap recorded call by call needs (--host-min-size 0,
# --host-source lttng); with the heap at a threshold (~100x fewer events)
# 8 x 512 KiB does, and the session starts faster (the buffers are allocated
# at `lttng start`: 0.15-0.3 s for 2 x 16 MiB here).
SUBBUF_SIZE = "2M"
SUBBUF_SIZE_THRESHOLD = "512k"
NUM_SUBBUF = 8
SIZE_RE = re.compile(r"^[1-9]\d*[kKmMgG]?$")
CONTEXTS = ("vpid", "vtid", "ip")
LTTNG_TIMEOUT_S = 120
INSTALL_HINT = "install LTTng: apt-get install lttng-tools liblttng-ust1 (or run scripts/install.sh)"

# memq events that carry the `api` enum (HIP runtime 1..99 and VMM 401..449,
# CUDA runtime 101..199 and driver 301..399, see docs/EVENTS.md), and the
# per-process ones (`runtime` 1 = hip, 2 = cuda). With one GPU runtime, its
# gate event (never emitted) switches the other runtime's wrappers off in the
# preload library itself, so they forward calls untraced instead of building
# events; the filters still keep this session to its runtime when another
# session of the same user (sessions see all of a user's processes) turns
# the other gate on.
MEMQ_CALL_EVENTS = ("alloc", "register", "free", "unregister", "copy", "set", "prefetch", "advise", "sync",
                    "set_device", "copy_done")
# memq's host heap events (docs/EVENTS.md, "Capture layout"); they carry no runtime.
MEMQ_HOST_EVENTS = ("host_alloc", "host_free", "host_small")
# memq:live lists a window's live allocations: the GPU runtime's (its `api`) and the heap's (malloc ... free).
HOST_API_FILTER = "api > 500 && api < 520"
API_FILTER = {"hip": "api < 100 || (api > 400 && api < 450)",
              "cuda": "(api > 100 && api < 200) || (api > 300 && api < 400)"}
RUNTIME_FILTER = {"hip": "runtime == 1", "cuda": "runtime == 2"}
GATE_EVENT = {"hip": "memq:gate_hip", "cuda": "memq:gate_cuda"}

# LTTng's own preload helpers (liblttng-ust1): fork re-registers children
# that fork without exec, dl reports libraries dlopen'ed after start-up.
LTTNG_HELPERS = ("liblttng-ust-fork.so", "liblttng-ust-dl.so")
LIBC_WRAPPER = "liblttng-ust-libc-wrapper.so"
PRELOAD_LIBRARY = "libmemq_preload.so"


@dataclass(frozen=True)
class RecordOptions:
    """What the user asked for."""

    output: Path
    command: list[str]
    apis: tuple[str, ...] = APIS
    mode: str = "blocking"
    force: bool = False
    subbuf_size: str | None = None  # lttng enable-channel --subbuf-size (power of two, >= page size); None: as
    # the heap needs (subbuf_size())
    num_subbuf: int = NUM_SUBBUF
    capture: Capture = Capture()  # capture windows (default: the whole run)
    host_source: str = "memq"  # HOST_SOURCES
    host_min_size: int = HOST_MIN_SIZE  # bytes (usable size); 0 = every block an event
    content: str = "sampled"  # content fingerprints of copies: sampled, full or off


@dataclass
class RecordResult:
    """What happened; also written as memq-record.json."""

    command: list[str]
    executable: str
    exit_code: int
    session: str
    trace_dir: str
    host: str
    started_at: str
    duration_s: float
    versions: dict[str, str]
    clock_readings: list[dict]
    enabled: dict
    discarded_events: int
    lost_packets: int
    events: int | None = None  # filled after the session is gone
    size_bytes: int = 0
    preload: list[str] = field(default_factory=list)
    # Per traced process: the GPU libraries it had loaded and its traced calls per runtime
    # (the preload library's exit report, see reach_warnings).
    reach: list[dict] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    signals: list[str] = field(default_factory=list)  # signals memq record received (SIGINT, SIGHUP, ...)


def parse_apis(text: str) -> tuple[str, ...]:
    """`hip,cuda,libc` -> ('hip', 'cuda', 'libc'), validated."""
    apis = tuple(dict.fromkeys(a.strip() for a in text.split(",") if a.strip()))
    unknown = [a for a in apis if a not in APIS]
    if not apis or unknown:
        raise UsageError(f"--api {text!r}: choose from {','.join(APIS)}")
    return apis


def parse_host_min_size(text: str) -> int:
    """`--host-min-size`: bytes, with an optional k/M/G suffix (powers of 1024); 0 records every block."""
    match = HOST_MIN_SIZE_RE.match(text.strip())
    if not match:
        raise UsageError(f"--host-min-size {text!r}: a size in bytes such as 4096, 64k or 1M "
                         "(0 records every allocation)")
    value = int(match.group(1)) << {"": 0, "k": 10, "m": 20, "g": 30}[match.group(2).lower()]
    if value > HOST_MIN_SIZE_MAX:
        raise UsageError(f"--host-min-size {text!r}: larger than any heap block (at most {HOST_MIN_SIZE_MAX:,} bytes)")
    return value


def subbuf_size(options: RecordOptions) -> str:
    """The sub-buffer size asked for, else the default for how the heap is recorded (see SUBBUF_SIZE)."""
    if options.subbuf_size:
        return options.subbuf_size
    every_call = "libc" in options.apis and (options.host_source == "lttng" or options.host_min_size == 0)
    return SUBBUF_SIZE if every_call else SUBBUF_SIZE_THRESHOLD


def host_settings(options: RecordOptions) -> dict | None:
    """What memq-record.json says about the host heap: None without the libc API."""
    if "libc" not in options.apis:
        return None
    if options.host_source == "lttng":
        return {"source": "lttng"}
    return {"source": "memq", "min_size": options.host_min_size}


def clock_reading(where: str) -> dict:
    """REALTIME, MONOTONIC and BOOTTIME read back to back (ns)."""
    realtime = time.clock_gettime_ns(time.CLOCK_REALTIME)
    monotonic = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    boottime = time.clock_gettime_ns(time.CLOCK_BOOTTIME)
    return {"pid": os.getpid(), "where": where, "realtime": realtime, "monotonic": monotonic, "boottime": boottime}


# --------------------------------------------------------------------------
# lttng command line
# --------------------------------------------------------------------------

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


# --------------------------------------------------------------------------
# What to enable and preload
# --------------------------------------------------------------------------

def event_rules(apis: tuple[str, ...], host_source: str = "memq") -> list[tuple[str, str | None]]:
    """(event names, filter) pairs for `lttng enable-event -u`.

    memq's host events are emitted only when the preload library is given a threshold
    (HOST_MIN_SIZE_ENV), so `memq:*` enables them harmlessly without the libc API.
    """
    rules: list[tuple[str, str | None]] = [("lttng_ust_statedump:*", None), ("lttng_ust_lib:*", None)]
    memq_heap = "libc" in apis and host_source == "memq"
    if "libc" in apis and not memq_heap:
        rules.append(("lttng_ust_libc:*", None))
    gpu = [a for a in apis if a in ("hip", "cuda")]
    if len(gpu) == 2:
        rules.append(("memq:*", None))
        return rules
    if gpu:
        calls = ",".join(f"memq:{e}" for e in MEMQ_CALL_EVENTS)
        rules += [(calls, API_FILTER[gpu[0]]), ("memq:device", RUNTIME_FILTER[gpu[0]]),
                  (GATE_EVENT[gpu[0]], None)]
    if memq_heap:
        rules.append((",".join(f"memq:{e}" for e in MEMQ_HOST_EVENTS), None))
    if gpu or memq_heap:
        live = [f"({API_FILTER[g]})" for g in gpu] + ([f"({HOST_API_FILTER})"] if memq_heap else [])
        rules += [("memq:clock", None), ("memq:window", None), ("memq:live", " || ".join(live))]
    return rules


def _system_library(name: str) -> str:
    """The soname of an installed LTTng library (e.g. liblttng-ust-fork.so.1).

    LTTng unpacked outside the linker's cache (the GPU bundle, scripts/gpu-bundle.sh)
    is found in LD_LIBRARY_PATH instead, by full path: find_library only sees it
    through gcc/ld/objdump, which such a machine may lack.
    """
    found = ctypes.util.find_library(name[len("lib"):-len(".so")]) or _on_library_path(name)
    if not found:
        raise MemqError(f"{name} is missing: {INSTALL_HINT}")
    return found


def _on_library_path(name: str) -> str | None:
    """The first NAME.N (a soname) in the LD_LIBRARY_PATH directories, as a full path."""
    for directory in filter(None, os.environ.get("LD_LIBRARY_PATH", "").split(":")):
        for candidate in sorted(Path(directory).glob(f"{name}.[0-9]")):
            return str(candidate)
    return None


def preload_list(apis: tuple[str, ...], host_source: str = "memq") -> list[str]:
    """LD_PRELOAD entries, in load order.

    One heap wrapper only: with `--host-source lttng` memq's library (when the GPU APIs
    need it) gets no threshold and its heap wrappers just forward to LTTng's.
    """
    libs = [_system_library(name) for name in LTTNG_HELPERS]
    lttng_heap = "libc" in apis and host_source == "lttng"
    if lttng_heap:
        libs.append(_system_library(LIBC_WRAPPER))
    if "hip" in apis or "cuda" in apis or ("libc" in apis and not lttng_heap):
        libs.append(str(native_library(PRELOAD_LIBRARY)))
    return libs


def resolve_command(argv0: str, env: dict[str, str]) -> str | None:
    """The program that will really run, or None when there is none.

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


# --------------------------------------------------------------------------
# Output directory
# --------------------------------------------------------------------------

def prepare_output(output: Path, force: bool) -> tuple[Path, bool]:
    """Create/validate the output directory; --force clears what memq wrote. Returns it and
    whether this call created it (a recording that fails before the command runs removes it)."""
    output = output.expanduser().resolve()
    if output.exists() and not output.is_dir():
        raise UsageError(f"{output}: exists and is not a directory")
    for parent in [output, *output.parents]:
        if (parent / "metadata").is_file():
            raise UsageError(f"{output}: is inside a CTF trace directory ({parent}); record somewhere else")
    created = not output.exists()
    if output.is_dir() and any(output.iterdir()):
        if not force:
            raise UsageError(f"{output}: directory is not empty (use --force to record into it anyway)")
        _clear_previous(output)
    try:
        output.mkdir(parents=True, exist_ok=True)
        probe = output / ".memq-write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise MemqError(f"{output}: output directory is not writable ({exc.strerror})") from exc
    return output, created


def _clear_previous(output: Path) -> None:
    """--force: removes what a previous recording wrote (ust/, memq-record.json), nothing else:
    never through a link and never a file of another user."""
    ust, record_file = output / "ust", output / RECORD_FILE
    for target, is_dir in ((ust, True), (record_file, False)):
        if not os.path.lexists(target):
            continue
        st = os.lstat(target)
        kind_ok = stat.S_ISDIR(st.st_mode) if is_dir else stat.S_ISREG(st.st_mode)
        if not kind_ok or st.st_uid != os.geteuid():
            raise UsageError(f"{target}: is not what a previous memq record wrote (a link, another kind of file "
                             "or another user's); --force removes only memq's own ust/ and memq-record.json")
    try:
        if os.path.lexists(ust):
            shutil.rmtree(ust)
        if os.path.lexists(record_file):
            record_file.unlink()
    except OSError as exc:
        raise MemqError(f"{output}: cannot clear the previous recording: {exc.strerror or exc}") from exc


def _undo_output(output: Path, created: bool) -> None:
    """After a failure before the command ran: remove what this run made (nothing the user had)."""
    if created:
        shutil.rmtree(output, ignore_errors=True)
    else:
        shutil.rmtree(output / "ust", ignore_errors=True)


def trace_size(output: Path) -> int:
    return sum(p.stat().st_size for p in output.rglob("*") if p.is_file())


def count_events(output: Path) -> int | None:
    """Events in the recorded trace (babeltrace2's counter sink); None if unreadable."""
    babeltrace = shutil.which("babeltrace2")
    if babeltrace is None or not (output / "ust").is_dir():
        return None
    # step=+0 (unsigned): one final count instead of one every 10,000 messages. Its own
    # process session, like lttng's: a terminal's ^C meant for memq does not cut it short.
    proc = subprocess.run([babeltrace, str(output / "ust"), "-c", "sink.utils.counter", "-p", "step=+0"],
                          capture_output=True, text=True, start_new_session=True, stdin=subprocess.DEVNULL)
    match = re.search(r"^\s*(\d+) Event messages", proc.stdout, re.MULTILINE)
    return int(match.group(1)) if proc.returncode == 0 and match else None


# --------------------------------------------------------------------------
# Running the command
# --------------------------------------------------------------------------

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


def configure_session(lttng: Lttng, session: str, options: RecordOptions,
                      rules: list[tuple[str, str | None]]) -> None:
    """Channel, events and contexts of a freshly created session (unfiltered rules in one call:
    each `lttng` run costs ~15 ms)."""
    channel = ["enable-channel", "-u", "-s", session, f"--subbuf-size={subbuf_size(options)}",
               f"--num-subbuf={options.num_subbuf}", "--discard"]
    if options.mode == "blocking":
        channel.append(f"--blocking-timeout={BLOCKING_TIMEOUT_US}")
    lttng.run(*channel, CHANNEL)
    unfiltered = ",".join(events for events, filt in rules if not filt)
    for events, filt in [(unfiltered, None)] * bool(unfiltered) + [(e, f) for e, f in rules if f]:
        lttng.run("enable-event", "-u", "-s", session, "-c", CHANNEL, events, *(["--filter", filt] if filt else []))
    lttng.run("add-context", "-u", "-s", session, "-c", CHANNEL, *[a for c in CONTEXTS for a in ("-t", c)])


def child_environment(env: dict[str, str], preload: list[str], mode: str, reach_dir: Path,
                      host: dict | None = None, content: str = "sampled") -> dict[str, str]:
    """The command's environment: our preloads first, then the user's own; the preload
    library's settings (a threshold only when memq records the heap: unset, it forwards;
    the content fingerprint mode)."""
    child = dict(env)
    child["LD_PRELOAD"] = ":".join(preload + [p for p in env.get("LD_PRELOAD", "").split(":") if p])
    child[REACH_ENV] = str(reach_dir)
    child.pop(HOST_MIN_SIZE_ENV, None)
    if host and host["source"] == "memq":
        child[HOST_MIN_SIZE_ENV] = str(host["min_size"])
    child[CONTENT_ENV] = content
    if mode == "blocking":
        child["LTTNG_UST_ALLOW_BLOCKING"] = "1"  # without it the channel's blocking timeout is ignored
    return child


def read_reach(reach_dir: Path) -> list[dict]:
    """The exit reports (reach.PID.json) the traced processes wrote, by pid; unreadable ones skipped."""
    reports = []
    for path in sorted(reach_dir.glob("reach.*.json")):
        try:
            report = json.loads(path.read_text())
        except (OSError, ValueError):
            continue  # a process killed while writing it: nothing to say about it
        if isinstance(report, dict) and isinstance(report.get("calls"), dict):
            reports.append(report)
    return sorted(reports, key=lambda r: r.get("pid", 0))


# Which runtimes' traced calls count as seeing a loaded library's calls: a program on the
# dynamic CUDA runtime reaches the driver through it (one event, the runtime's).
REACH_SEEN_BY = {"hip": ("hip",), "cuda": ("cuda", "driver"), "driver": ("cuda", "driver")}
REACH_ENV = "MEMQ_REACH_DIR"
# The host heap threshold in bytes (preload/memq_heap.h MEMQ_ENV_HOST_MIN_SIZE); unset = heap wrappers forward only.
HOST_MIN_SIZE_ENV = "MEMQ_HOST_MIN_SIZE"


def reach_warnings(reports: list[dict], apis: tuple[str, ...]) -> list[str]:
    """One line per process that loaded a GPU runtime or driver memq records but made none of its calls,
    one per process whose allocation table dropped updates, and one per process whose asynchronous copies
    outnumbered what content fingerprints keep track of."""
    warnings = []
    for report in reports:
        dropped = report.get("content_dropped", 0)
        if dropped:
            warnings.append(f"pid {report.get('pid')}: {dropped:,} asynchronous copies got no fingerprint after "
                            "completion (more than 1,024 awaited a synchronisation at once): their content "
                            "evidence is partial")
        calls = report["calls"]
        for library in report.get("libraries", []):
            runtime = library.get("runtime")
            api = "hip" if runtime == "hip" else "cuda"
            if runtime not in REACH_SEEN_BY or api not in apis:
                continue
            if any(calls.get(r, 0) for r in REACH_SEEN_BY[runtime]):
                continue
            cause = ("a static CUDA runtime (nvcc's default; build with -cudart shared) or a lookup memq does not "
                     "interpose" if runtime != "hip" else "a lookup memq does not interpose")
            warnings.append(f"pid {report.get('pid')} loaded {library.get('path')} but memq saw none of its memory "
                            f"calls: either it made none, or it reached them another way ({cause}); "
                            "see docs/EVENTS.md, 'How calls are reached'")
        if report.get("table_dropped"):
            warnings.append(f"pid {report.get('pid')}: {report['table_dropped']} allocation-table updates were "
                            "dropped (GPU memory calls from a signal handler that interrupted its own thread inside "
                            "the table, or no memory left): as many frees may record size 0 (unknown)")
    return warnings


def check_capture(options: RecordOptions) -> None:
    """Capture windows gate memq's own events (its heap wrappers' included); LTTng's libc wrapper writes
    its events regardless."""
    if options.capture.windowed and "libc" in options.apis and options.host_source == "lttng":
        raise UsageError("--delay/--duration/--capture-range gate memq's own events, and LTTng's libc wrapper "
                         "(--host-source lttng) would still record the whole run: use --host-source memq")


def capture_env(env: dict[str, str], capture: Capture, command_start_ns: int) -> None:
    """MEMQ_CAPTURE for the command (removed when no window was asked for, so a stale one cannot apply)."""
    value = capture.env_value(command_start_ns)
    if value is None:
        env.pop(CAPTURE_ENV, None)
    else:
        env[CAPTURE_ENV] = value


def record(options: RecordOptions, announce: Callable[[str], None] | None = None) -> RecordResult:
    """Record `options.command` into `options.output`; see the module docstring.

    `announce` receives one line when the command starts (for a terminal).
    """
    if not options.command:
        raise UsageError("no command to record (memq record -o DIR -- COMMAND ...)")
    if options.mode not in MODES:
        raise UsageError(f"--mode {options.mode!r}: choose blocking or discard")
    if options.subbuf_size is not None and not SIZE_RE.match(options.subbuf_size):
        raise UsageError(f"--subbuf-size {options.subbuf_size!r}: a size such as 4096, 64k or 2M")
    if options.num_subbuf < 2:
        raise UsageError(f"--num-subbuf {options.num_subbuf}: at least 2")
    check_capture(options)
    if options.host_source not in HOST_SOURCES:
        raise UsageError(f"--host-source {options.host_source!r}: choose memq or lttng")
    if not 0 <= options.host_min_size <= HOST_MIN_SIZE_MAX:
        raise UsageError(f"--host-min-size {options.host_min_size}: between 0 and {HOST_MIN_SIZE_MAX:,} bytes")
    if options.content not in CONTENT_MODES:
        raise UsageError(f"--content {options.content!r}: choose sampled, full or off")
    env = lttng_environment()
    lttng = Lttng(env)
    executable = resolve_command(options.command[0], env)
    if executable is None:
        raise MemqError(f"{options.command[0]}: command not found", exit_code=127)
    output, created = prepare_output(options.output, options.force)
    signals = Signals()
    try:
        return _record(options, announce, env, lttng, executable, output, created, signals)
    finally:
        signals.restore()


def _record(options: RecordOptions, announce: Callable[[str], None] | None, env: dict[str, str], lttng: Lttng,
            executable: str, output: Path, created: bool, signals: Signals) -> RecordResult:
    try:
        preload = preload_list(options.apis, options.host_source)
        ensure_sessiond(lttng)
    except BaseException:
        _undo_output(output, created)
        raise
    session = f"memq-{os.getpid()}-{int(time.time())}"
    rules = event_rules(options.apis, options.host_source)
    host = host_settings(options)
    enabled = {"apis": list(options.apis), "mode": options.mode, "host": host, "content": options.content,
               "channel": {"name": CHANNEL, "buffers": "per-uid", "subbuf_size": subbuf_size(options),
                           "num_subbuf": options.num_subbuf,
                           "blocking_timeout_us": BLOCKING_TIMEOUT_US if options.mode == "blocking" else 0},
               "events": [{"events": e, "filter": f} for e, f in rules], "contexts": list(CONTEXTS)}
    reach_dir = Path(tempfile.mkdtemp(prefix="memq-reach-"))
    child_env = child_environment(env, preload, options.mode, reach_dir, host, options.content)
    started_at = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    readings: list[dict] = []
    exit_code: int | None = None
    guardian = None
    t0 = time.monotonic()
    try:
        lttng.run("create", session, f"--output={output}")
        guardian = start_guardian(session, output, {
            "command": list(options.command), "session": session, "trace_dir": str(output),
            "started_at": started_at, "clock_readings": readings, "enabled": enabled})
        configure_session(lttng, session, options, rules)
        lttng.run("start", session)
        readings.append(clock_reading("start"))
        guardian.update(readings)
        if signals.received:
            raise MemqError(f"interrupted ({', '.join(signals.names())}) before {options.command[0]} started",
                            exit_code=128 + signals.received[0])
        if announce:
            window = f", capture window {options.capture.describe()}" if options.capture.windowed else ""
            announce(f"memq record: recording {' '.join(options.command)} (session {session}{window}) ...")
        command_start = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        capture_env(child_env, options.capture, command_start)
        enabled["capture"] = options.capture.record(command_start)
        guardian.update(readings)  # its record says which windows were asked for too
        exit_code = run_command([executable, *options.command[1:]], child_env, signals)
        readings.append(clock_reading("end"))
    finally:
        duration = time.monotonic() - t0
        stopped = False
        try:
            # `stop` returns once the trace data is written out; the session's teardown
            # after that (~0.5 s in the daemon) need not be waited for.
            stopped = lttng.run("stop", session, check=False).returncode == 0
            discarded, lost_packets = discarded_counts(lttng, session)
        finally:
            lttng.run("destroy", *(["--no-wait"] if stopped else []), session, check=False)
            reach = read_reach(reach_dir)
            shutil.rmtree(reach_dir, ignore_errors=True)
            if exit_code is None:
                _undo_output(output, created)
                if guardian is not None:
                    guardian.done()

    result = RecordResult(
        command=list(options.command), executable=executable, exit_code=exit_code, session=session,
        trace_dir=str(output), host=socket.gethostname(), started_at=started_at, duration_s=round(duration, 3),
        versions={"memq": __version__, "lttng": lttng.version(), "python": sys.version.split()[0],
                  "kernel": os.uname().release},
        clock_readings=readings,
        enabled=enabled,
        discarded_events=discarded, lost_packets=lost_packets, preload=preload,
        reach=reach, warnings=reach_warnings(reach, options.apis), signals=signals.names())
    if signals.received:
        result.warnings.append(f"memq record received {', '.join(signals.names())}: forwarded to the command "
                               "while it ran; the session was stopped and this record written all the same")
    result.events = count_events(output)
    result.size_bytes = trace_size(output)
    write_record(output, asdict(result))
    guardian.done()
    return result


def write_record(output: Path, record: dict) -> None:
    """memq-record.json, written whole or not at all (a temporary file renamed)."""
    target = output / RECORD_FILE
    tmp = output / f".{RECORD_FILE}.{os.getpid()}.tmp"
    try:
        tmp.write_text(json.dumps(record, indent=2) + "\n")
        os.replace(tmp, target)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise MemqError(f"{target}: cannot write: {exc.strerror or exc}") from exc


def summary(result: RecordResult) -> str:
    """A few lines for the terminal."""
    events = "unknown number of" if result.events is None else f"{result.events:,}"
    lost = result.discarded_events + result.lost_packets
    lost_text = f"{result.discarded_events:,} lost events" + (
        f", {result.lost_packets:,} lost packets" if result.lost_packets else "")
    lines = [f"memq record: {events} events, {lost_text}, {result.size_bytes / 2**20:.1f} MiB in {result.trace_dir}",
             f"memq record: command exited with {result.exit_code} after {result.duration_s:.1f} s"]
    if lost:
        lines.append("memq record: WARNING: events were lost (counted in memq-record.json and marked in the trace); "
                     "to keep them all use --mode blocking, larger buffers (--subbuf-size, --num-subbuf) or "
                     "record less (--api, a larger --host-min-size)")
    lines.extend(f"memq record: WARNING: {w}" for w in result.warnings)
    lines.append(f"memq record: next: ctf2perfetto {result.trace_dir} -o trace.pftrace")
    return "\n".join(lines)
