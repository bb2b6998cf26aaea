"""Record with the real `memq record` and read the CTF back with babeltrace2 (bt2).

    trace = record(out_dir, [str(fake.workload), "hip", str(log)], api="hip,cuda,libc", mode="blocking")
    events = read_events(trace.dir, pids={trace.pid_of(log)})

`record` runs the CLI in a subprocess (exactly what a user runs) and returns a
`Recording`; `read_events` turns every event of every trace under a directory
into a plain dict (bt2 Python bindings; fine for test-sized traces).
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

MEMQ = [sys.executable, "-m", "ctf2perfetto"]


@dataclass
class Recording:
    """One `memq record` run."""

    dir: Path  # the trace directory (-o)
    returncode: int
    stdout: str
    stderr: str

    @property
    def meta(self) -> dict:
        """memq-record.json."""
        return json.loads((self.dir / "memq-record.json").read_text())


def record(out_dir: Path, argv: list[str], *, api: str = "hip,cuda,libc", mode: str = "blocking",
           force: bool = False, env: dict[str, str] | None = None, check: bool = True,
           timeout: float = 300, extra: tuple[str, ...] = ()) -> Recording:
    """Run `memq record -o out_dir --api api --mode mode [extra] -- argv`; check=True asserts exit 0."""
    cmd = [*MEMQ, "record", "-o", str(out_dir), "--api", api, "--mode", mode, *(["--force"] if force else []),
           *extra, "--", *argv]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    rec = Recording(Path(out_dir), proc.returncode, proc.stdout, proc.stderr)
    if check:
        assert proc.returncode == 0, f"memq record failed ({proc.returncode}):\n{proc.stderr}"
    return rec


def read_worklog(path: Path) -> list[dict]:
    """The JSON lines a fake workload wrote (tests/fakes/worklog.h)."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _value(field):
    from conftest import import_bt2

    bt2 = import_bt2()
    if isinstance(field, bt2._StringFieldConst):
        return str(field)
    if isinstance(field, (bt2._StructureFieldConst,)):
        return {k: _value(v) for k, v in field.items()}
    if isinstance(field, (bt2._ArrayFieldConst,)):
        return [_value(v) for v in field]
    if isinstance(field, bt2._RealFieldConst):
        return float(field)
    return int(field)  # integers and enumerations (by value)


# name = value: an enumeration, a string, an array of integers, or a plain value
_FIELD = re.compile(r'(\w+) = (\( "[^"]*" : container = \d+ \)|"(?:[^"\\]|\\.)*"'
                    r'|\[(?: \[\d+\] = [^,\]]+,?)* \]|[^,}]+)')
_ELEMENT = re.compile(r'\[\d+\] = ([^,\]]+)')
_ENUM = re.compile(r'\( "([^"]*)" : container = (\d+) \)')


def _text_value(text: str):
    text = text.strip()
    if text.startswith('"'):
        return json.loads(text)
    if text.startswith("["):  # an array or sequence of integers (memq:lib_load's build_id)
        return [int(v, 0) for v in _ELEMENT.findall(text)]
    return int(text, 0)


def scan_events(trace_dir: Path, names: tuple[str, ...], *, pids: set[int] | None = None) -> list[dict]:
    """Like read_events, for traces of millions of events, restricted to the event `names`.

    Reads babeltrace2's text output (C, ~10x faster than bt2 Python objects)
    and parses only the lines of those events. Integer, enumeration, string and
    integer array fields only (the libc wrappers', statedump and library map events).
    """
    proc = subprocess.Popen(["babeltrace2", "--clock-cycles", "--no-delta", str(trace_dir)], stdout=subprocess.PIPE,
                            text=True)
    wanted = tuple(f" {name}: " for name in names)
    out = []
    for line in proc.stdout:
        if not any(w in line for w in wanted):
            continue
        stamp, _host, name, rest = line.split(" ", 3)
        row = {"event": name.rstrip(":"), "ts": int(stamp.strip("[]"))}
        for key, text in _FIELD.findall(rest):
            enum = _ENUM.match(text)
            if enum:  # as read_events gives enumerations: the value, and the label beside it
                row[key], row[f"{key}_label"] = int(enum.group(2)), enum.group(1)
            else:
                row[key] = _text_value(text)
        if pids is None or row.get("vpid") in pids:
            out.append(row)
    assert proc.wait() == 0, f"babeltrace2 failed on {trace_dir}"
    return out


def read_events(trace_dir: Path, *, pids: set[int] | None = None, prefix: str | None = None) -> list[dict]:
    """Every event under trace_dir, in time order, as dicts.

    Keys: `event` (the event name), `ts` (clock value in ns, CLOCK_MONOTONIC), `cpu`, the
    contexts (`vpid`, `vtid`, `ip`) and the payload fields; enumerations as
    their integer value, with `<field>_label` for the label. `pids` keeps
    only those vpids; `prefix` only event names starting with it.
    """
    from conftest import import_bt2

    bt2 = import_bt2()
    out = []
    for msg in bt2.TraceCollectionMessageIterator(str(trace_dir)):
        if type(msg) is not bt2._EventMessageConst:
            continue
        ev = msg.event
        if prefix and not ev.name.startswith(prefix):
            continue
        ctx = ev.common_context_field
        if pids is not None and (ctx is None or int(ctx["vpid"]) not in pids):
            continue
        row = {"event": ev.name, "ts": msg.default_clock_snapshot.value}
        if ctx is not None:
            row.update({k: int(v) for k, v in ctx.items()})
        for key, field in ev.payload_field.items():
            row[key] = _value(field)
            if isinstance(field, bt2._EnumerationFieldConst):
                try:
                    labels = field.labels
                except AssertionError:  # bt2 asserts on a value no label maps (memq:window's api 0)
                    labels = []
                row[f"{key}_label"] = labels[0] if labels else None
        out.append(row)
    return out


@dataclass
class RecordedWorkload:
    """A fake-GPU workload recorded with `memq record`: the trace and what the workload did."""

    recording: Recording
    calls: list[dict]  # the workload's log: one dict per runtime call, memq event field names
    pid: int  # the workload process (the Python interpreter for python=True)

    @property
    def dir(self) -> Path:
        return self.recording.dir


def record_workload(fake, out_dir: Path, runtime: str, *, api: str = "hip,cuda,libc", mode: str = "blocking",
                    python: bool = False, env: dict[str, str] | None = None) -> RecordedWorkload:
    """Record the fake `runtime` ("hip"/"cuda") workload: C program, or Python via ctypes RTLD_LOCAL."""
    out_dir = Path(out_dir)
    log = out_dir.parent / f"{out_dir.name}.calls.jsonl"
    argv = fake.python_argv(sys.executable, runtime, log) if python else [str(fake.workload), runtime, str(log)]
    rec = record(out_dir, argv, api=api, mode=mode, env=env)
    calls = read_worklog(log)
    return RecordedWorkload(rec, calls, calls[0]["pid"])


# --- comparing a recording with what a workload logged (tests/fakes/worklog.h) ---

LIBRARY_EVENTS = ("memq:lib_load", "memq:lib_unload")  # the library map (test_callsite.py checks it)
PROCESS_EVENTS = ("memq:clock", "memq:device", "memq:identity", *LIBRARY_EVENTS)
HOST_EVENTS = ("memq:host_alloc", "memq:host_free", "memq:host_small")  # the host heap (test_heap.py's business)
# Events that are not calls: these two, the host heap's and copies' after-fingerprints (tests/test_content.py).
NOT_CALLS = PROCESS_EVENTS + HOST_EVENTS + ("memq:copy_done",)
NOT_PAYLOAD = ("pid", "tid", "event", "api")


def call_events(trace_dir: Path, pid: int) -> list[dict]:
    """The memq GPU call events of `pid` (not the per-process, host heap or copy_done events)."""
    return [e for e in read_events(trace_dir, pids={pid}, prefix="memq:") if e["event"] not in NOT_CALLS]


def assert_events_match(events: list[dict], calls: list[dict]) -> None:
    """Event i is call i: same event, function, thread and every logged field."""
    assert [(e["event"], e["api_label"]) for e in events] == [(f"memq:{c['event']}", c["api"]) for c in calls]
    for event, call in zip(events, calls):
        expected = {k: v for k, v in call.items() if k not in NOT_PAYLOAD}
        got = {k: event[k] for k in expected}
        assert got == expected, f"{call['api']}: recorded {got}, workload did {expected}"
        assert event["vtid"] == call["tid"]
        assert 0 < event["begin_ns"] <= event["ts"]  # begin is the call's entry on the same clock
