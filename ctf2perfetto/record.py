"""`memq record`: one LTTng user-space session around one command.

The whole LTTng dance, in order: a reachable session daemon (started when
none is), a session writing to the output directory, one user-space channel
(blocking with a finite timeout, or discard), the events and contexts, the
LD_PRELOAD set (fork/dl helpers, LTTng's libc wrapper, our HIP/CUDA wrapper),
the command itself with SIGINT/SIGTERM forwarded, then stop, the discarded
event count, destroy -- the last three whatever happened to the command.
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

APIS = ("hip", "cuda", "libc")
MODES = ("blocking", "discard")
RECORD_FILE = "memq-record.json"
CHANNEL = "memq"
# Finite, so a stuck consumer daemon delays the program (at most this long per
# event) instead of hanging it forever; events then count as discarded.
BLOCKING_TIMEOUT_US = 200_000
# Per-CPU ring buffer: 8 x 2 MiB absorbs bursts of ~600k events between
# consumer reads.
SUBBUF_SIZE = "2M"
NUM_SUBBUF = 8
SIZE_RE = re.compile(r"^[1-9]\d*[kKmMgG]?$")
CONTEXTS = ("vpid", "vtid", "ip")
LTTNG_TIMEOUT_S = 120
INSTALL_HINT = "install LTTng: apt-get install lttng-tools liblttng-ust1 (or run scripts/install.sh)"

# memq events that carry the `api` enum (HIP runtime 1..99 and VMM 401..449,
# CUDA runtime 101..199 and driver 301..399, see docs/EVENTS.md), and the
# per-process ones (`runtime` 1 = hip, 2 = cuda).
MEMQ_CALL_EVENTS = ("alloc", "register", "free", "unregister", "copy", "set", "prefetch", "advise", "sync",
                    "set_device", "live")
API_FILTER = {"hip": "api < 100 || (api > 400 && api < 450)",
              "cuda": "(api > 100 && api < 200) || (api > 300 && api < 400)"}
RUNTIME_FILTER = {"hip": "runtime == 1", "cuda": "runtime == 2"}

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
    subbuf_size: str = SUBBUF_SIZE  # lttng enable-channel --subbuf-size (power of two, >= page size)
    num_subbuf: int = NUM_SUBBUF
    capture: Capture = Capture()  # capture windows (default: the whole run)


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


def parse_apis(text: str) -> tuple[str, ...]:
    """`hip,cuda,libc` -> ('hip', 'cuda', 'libc'), validated."""
    apis = tuple(dict.fromkeys(a.strip() for a in text.split(",") if a.strip()))
    unknown = [a for a in apis if a not in APIS]
    if not apis or unknown:
        raise UsageError(f"--api {text!r}: choose from {','.join(APIS)}")
    return apis


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
        try:
            proc = subprocess.run([self.binary, *args], env=self.env, capture_output=True, text=True,
                                  timeout=LTTNG_TIMEOUT_S)
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

def event_rules(apis: tuple[str, ...]) -> list[tuple[str, str | None]]:
    """(event names, filter) pairs for `lttng enable-event -u`."""
    rules: list[tuple[str, str | None]] = [("lttng_ust_statedump:*", None), ("lttng_ust_lib:*", None)]
    if "libc" in apis:
        rules.append(("lttng_ust_libc:*", None))
    gpu = [a for a in apis if a in ("hip", "cuda")]
    if len(gpu) == 2:
        rules.append(("memq:*", None))
    elif gpu:
        calls = ",".join(f"memq:{e}" for e in MEMQ_CALL_EVENTS)
        rules += [(calls, API_FILTER[gpu[0]]), ("memq:device", RUNTIME_FILTER[gpu[0]]), ("memq:clock", None),
                  ("memq:window", None)]
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


def preload_list(apis: tuple[str, ...]) -> list[str]:
    """LD_PRELOAD entries, in load order."""
    libs = [_system_library(name) for name in LTTNG_HELPERS]
    if "libc" in apis:
        libs.append(_system_library(LIBC_WRAPPER))
    if "hip" in apis or "cuda" in apis:
        libs.append(str(native_library(PRELOAD_LIBRARY)))
    return libs


def resolve_command(argv0: str, env: dict[str, str]) -> str | None:
    """The program that will really run, or None when there is none.

    A pyenv shim is a bash script that spawns pyenv, readlink, ... before
    exec'ing the interpreter: with LD_PRELOAD set, every one of them would be
    traced. Ask pyenv (without the preload) which program it would run.
    """
    path = shutil.which(argv0, path=env.get("PATH"))
    if path is None:
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

def prepare_output(output: Path, force: bool) -> Path:
    """Create/validate the output directory; --force clears what memq wrote."""
    output = output.expanduser().resolve()
    if output.exists() and not output.is_dir():
        raise UsageError(f"{output}: exists and is not a directory")
    if output.is_dir() and any(output.iterdir()):
        if not force:
            raise UsageError(f"{output}: directory is not empty (use --force to record into it anyway)")
        # Only what a previous recording wrote: never the user's other files.
        for name in ("ust", RECORD_FILE):
            target = output / name
            if target.is_dir():
                shutil.rmtree(target)
            elif target.exists():
                target.unlink()
    try:
        output.mkdir(parents=True, exist_ok=True)
        probe = output / ".memq-write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise MemqError(f"{output}: output directory is not writable ({exc.strerror})") from exc
    return output


def trace_size(output: Path) -> int:
    return sum(p.stat().st_size for p in output.rglob("*") if p.is_file())


def count_events(output: Path) -> int | None:
    """Events in the recorded trace (babeltrace2's counter sink); None if unreadable."""
    babeltrace = shutil.which("babeltrace2")
    if babeltrace is None or not (output / "ust").is_dir():
        return None
    # step=+0 (unsigned): one final count instead of one every 10,000 messages.
    proc = subprocess.run([babeltrace, str(output / "ust"), "-c", "sink.utils.counter", "-p", "step=+0"],
                          capture_output=True, text=True)
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


def run_command(argv: list[str], env: dict[str, str]) -> int:
    """Run the command to its end; returns its exit code (128+N when killed by signal N)."""
    foreground = Foreground()
    try:
        child = subprocess.Popen(argv, env=env, process_group=0, preexec_fn=foreground.preexec)
    except OSError as exc:
        foreground.restore()
        raise MemqError(f"{argv[0]}: cannot run: {exc.strerror}", exit_code=126) from exc

    def forward(signum: int, _frame) -> None:
        try:
            os.killpg(child.pid, signum)
        except ProcessLookupError:
            pass

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        code = child.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
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
    """Channel, events and contexts of a freshly created session."""
    channel = ["enable-channel", "-u", "-s", session, f"--subbuf-size={options.subbuf_size}",
               f"--num-subbuf={options.num_subbuf}", "--discard"]
    if options.mode == "blocking":
        channel.append(f"--blocking-timeout={BLOCKING_TIMEOUT_US}")
    lttng.run(*channel, CHANNEL)
    for events, filt in rules:
        lttng.run("enable-event", "-u", "-s", session, "-c", CHANNEL, events, *(["--filter", filt] if filt else []))
    lttng.run("add-context", "-u", "-s", session, "-c", CHANNEL, *[a for c in CONTEXTS for a in ("-t", c)])


def child_environment(env: dict[str, str], preload: list[str], mode: str, reach_dir: Path) -> dict[str, str]:
    """The command's environment: our preloads first, then the user's own."""
    child = dict(env)
    child["LD_PRELOAD"] = ":".join(preload + [p for p in env.get("LD_PRELOAD", "").split(":") if p])
    child[REACH_ENV] = str(reach_dir)
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


def reach_warnings(reports: list[dict], apis: tuple[str, ...]) -> list[str]:
    """One line per process that loaded a GPU runtime or driver memq records but made none of its calls."""
    warnings = []
    for report in reports:
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
    return warnings


def check_capture(options: RecordOptions) -> None:
    """Capture windows gate memq's own events; LTTng's libc wrapper writes its events regardless."""
    if options.capture.windowed and "libc" in options.apis:
        raise UsageError("--delay/--duration/--capture-range gate memq's own events, and LTTng's libc wrapper "
                         "(--api libc) would still record the whole run: add --api hip,cuda")


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
    if not SIZE_RE.match(options.subbuf_size):
        raise UsageError(f"--subbuf-size {options.subbuf_size!r}: a size such as 4096, 64k or 2M")
    if options.num_subbuf < 2:
        raise UsageError(f"--num-subbuf {options.num_subbuf}: at least 2")
    check_capture(options)
    env = lttng_environment()
    lttng = Lttng(env)
    executable = resolve_command(options.command[0], env)
    if executable is None:
        raise MemqError(f"{options.command[0]}: command not found", exit_code=127)
    output = prepare_output(options.output, options.force)
    preload = preload_list(options.apis)
    ensure_sessiond(lttng)

    session = f"memq-{os.getpid()}-{int(time.time())}"
    rules = event_rules(options.apis)
    reach_dir = Path(tempfile.mkdtemp(prefix="memq-reach-"))
    child_env = child_environment(env, preload, options.mode, reach_dir)
    started_at = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    lttng.run("create", session, f"--output={output}")
    readings: list[dict] = []
    t0 = time.monotonic()
    try:
        configure_session(lttng, session, options, rules)
        lttng.run("start", session)
        readings.append(clock_reading("start"))
        if announce:
            window = f", capture window {options.capture.describe()}" if options.capture.windowed else ""
            announce(f"memq record: recording {' '.join(options.command)} (session {session}{window}) ...")
        command_start = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        capture_env(child_env, options.capture, command_start)
        exit_code = run_command([executable, *options.command[1:]], child_env)
        readings.append(clock_reading("end"))
    finally:
        duration = time.monotonic() - t0
        try:
            lttng.run("stop", session, check=False)
            discarded, lost_packets = discarded_counts(lttng, session)
        finally:
            lttng.run("destroy", session, check=False)
            reach = read_reach(reach_dir)
            shutil.rmtree(reach_dir, ignore_errors=True)

    result = RecordResult(
        command=list(options.command), executable=executable, exit_code=exit_code, session=session,
        trace_dir=str(output), host=socket.gethostname(), started_at=started_at, duration_s=round(duration, 3),
        versions={"memq": __version__, "lttng": lttng.version(), "python": sys.version.split()[0],
                  "kernel": os.uname().release},
        clock_readings=readings,
        enabled={"apis": list(options.apis), "mode": options.mode,
                 "channel": {"name": CHANNEL, "buffers": "per-uid", "subbuf_size": options.subbuf_size,
                             "num_subbuf": options.num_subbuf,
                             "blocking_timeout_us": BLOCKING_TIMEOUT_US if options.mode == "blocking" else 0},
                 "events": [{"events": e, "filter": f} for e, f in rules], "contexts": list(CONTEXTS),
                 "capture": options.capture.record(command_start)},
        discarded_events=discarded, lost_packets=lost_packets, preload=preload,
        reach=reach, warnings=reach_warnings(reach, options.apis))
    result.events = count_events(output)
    result.size_bytes = trace_size(output)
    (output / RECORD_FILE).write_text(json.dumps(asdict(result), indent=2) + "\n")
    return result


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
                     "record less (--api)")
    lines.extend(f"memq record: WARNING: {w}" for w in result.warnings)
    lines.append(f"memq record: next: ctf2perfetto {result.trace_dir} -o trace.pftrace")
    return "\n".join(lines)
