"""Capture windows of `memq record`: --delay/--duration and --capture-range profiler-api.

The session records the whole command; the preload library gates its own events
and writes memq:window / memq:live itself (preload/memq_window.h says why). This
module checks the options and turns them into the MEMQ_CAPTURE value the library
reads:

    time:START_NS:END_NS   one window, CLOCK_MONOTONIC, END_NS 0 = to the end
    profiler               windows between hip/cuda/cuProfilerStart and ...Stop

Standard library only (the record-only entry point, docs/GPU_CHECK.md).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ctf2perfetto.errors import UsageError

CAPTURE_ENV = "MEMQ_CAPTURE"
CAPTURE_RANGES = ("none", "profiler-api")
NS = 1_000_000_000


def parse_seconds(text: str, option: str) -> float:
    """A non-negative, finite number of seconds ('10', '2.5'); a UsageError naming `option` otherwise."""
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise UsageError(f"{option} {text!r}: expected a number of seconds, e.g. 10 or 2.5") from None
    if not math.isfinite(value) or value < 0:
        raise UsageError(f"{option} {text!r}: expected a number of seconds >= 0")
    return value


@dataclass(frozen=True)
class Capture:
    """What to record of the command's run (default: all of it)."""

    delay_s: float | None = None  # window opens this long after the command starts
    duration_s: float | None = None  # and closes this long after it opened
    capture_range: str = "none"  # "profiler-api": between the program's profiler start/stop calls

    @classmethod
    def from_options(cls, delay: str | None, duration: str | None, capture_range: str | None) -> "Capture":
        """Checked options (strings as typed; None when not given)."""
        rng = capture_range or "none"
        if rng not in CAPTURE_RANGES:
            raise UsageError(f"--capture-range {capture_range!r}: choose {' or '.join(CAPTURE_RANGES)}")
        delay_s = None if delay is None else parse_seconds(delay, "--delay")
        duration_s = None if duration is None else parse_seconds(duration, "--duration")
        if duration_s == 0:
            raise UsageError("--duration 0: a window must last more than 0 seconds")
        if rng == "profiler-api" and (delay_s is not None or duration_s is not None):
            raise UsageError("--capture-range profiler-api cannot be combined with --delay/--duration: "
                             "the program's profiler start/stop calls open and close the windows")
        return cls(delay_s, duration_s, rng)

    @property
    def windowed(self) -> bool:
        return self.capture_range != "none" or self.delay_s is not None or self.duration_s is not None

    def env_value(self, command_start_ns: int) -> str | None:
        """MEMQ_CAPTURE for a command started at CLOCK_MONOTONIC `command_start_ns`; None without windows."""
        if self.capture_range == "profiler-api":
            return "profiler"
        if not self.windowed:
            return None
        start = command_start_ns + round((self.delay_s or 0.0) * NS)
        end = start + round(self.duration_s * NS) if self.duration_s is not None else 0
        return f"time:{start}:{end}"

    def describe(self) -> str:
        """One phrase for the terminal."""
        if self.capture_range == "profiler-api":
            return "between the program's profiler start/stop calls (cuda/cu/hipProfilerStart .. Stop)"
        start = f"{self.delay_s:g} s after the start" if self.delay_s else "from the start"
        return start + (f" for {self.duration_s:g} s" if self.duration_s is not None else " to the end")

    def record(self, command_start_ns: int) -> dict:
        """What memq-record.json keeps (`enabled.capture`)."""
        out: dict = {"range": self.capture_range, "delay_s": self.delay_s, "duration_s": self.duration_s}
        value = self.env_value(command_start_ns)
        if value and value.startswith("time:"):
            _, start, end = value.split(":")
            out.update(start_monotonic_ns=int(start), end_monotonic_ns=int(end) or None)
        return out
