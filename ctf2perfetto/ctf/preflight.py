"""What happens around libbabeltrace2 when a trace is decoded: checks before, guard during, loss after.

    checked = Preflight(traces, salvage)   # ctf/check.py on every trace; refuses a damaged one unless salvaging
    handle = checked.open(opener, probe)   # the library opens it first in a guarded child, then here
    checked.account(info, events_read)     # losses the files show, into TraceInfo (after the last batch)

decode.py calls these; salvage.py uses the same checks to know where to cut.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from ctf2perfetto.ctf.check import Loss, TraceCheck, TraceProblem, check_trace
from ctf2perfetto.errors import MemqError
from ctf2perfetto.events import TraceInfo
from ctf2perfetto.ctf.guard import guarded

SALVAGE_HINT = "; --salvage converts what is readable"
T = TypeVar("T")


class Preflight:
    """The checks of every trace under one input, and what they say was lost."""

    def __init__(self, traces: list[Path], salvage: bool) -> None:
        self.checks: list[TraceCheck] = []
        self.dropped_traces: list[str] = []  # salvage: traces whose metadata is unusable, left out whole
        for trace in traces:
            try:
                self.checks.append(check_trace(trace))
            except TraceProblem as exc:
                if not salvage:
                    raise
                self.dropped_traces.append(str(exc))
        if not self.checks:
            raise MemqError(self.dropped_traces[0] + " (salvage cannot cut this away)")
        problems = [line for check in self.checks for line in check.problems()]
        if problems and not salvage:
            more = f" (and {len(problems) - 1} more damaged file(s))" if len(problems) > 1 else ""
            raise MemqError(problems[0] + more + SALVAGE_HINT)

    @property
    def traces(self) -> list[Path]:
        return [check.dir for check in self.checks]

    def losses(self) -> list[Loss]:
        """Missing streams and packets (index/, dangling links), trace by trace."""
        return [loss for check in self.checks for loss in check.losses]

    def warnings(self) -> list[str]:
        return [f"salvage left out a whole trace: {line}" for line in self.dropped_traces]

    def account(self, info: TraceInfo, events_read: int, salvaged: list[Loss], reference_offset_ns: int) -> None:
        """Everything the files lack, into `info` (counts, loss ranges on the decoder's clock, warnings).

        `salvaged` is what salvage reports (what it cut away, what the files it cut lack);
        `reference_offset_ns` the clock offset the decoder's times are relative to (rows of other
        traces are shifted onto it, and so are these ranges).
        """
        offsets = {str(check.dir): check.metadata.clock_offset_ns for check in self.checks}
        for loss in self.losses() + salvaged:
            shift = offsets.get(str(Path(loss.file).parent), reference_offset_ns) - reference_offset_ns
            info.losses.append({
                "what": loss.what, "file": loss.file, "packets": loss.packets, "bytes": loss.bytes,
                "begin": None if loss.begin_ns is None else loss.begin_ns + shift,
                "end": None if loss.end_ns is None else loss.end_ns + shift})
            if loss.dropped:
                info.dropped_packets += loss.packets
                info.dropped_bytes += loss.bytes
            else:
                info.missing_packets += loss.packets
                info.missing_streams += loss.what.startswith("missing stream")
                info.warnings.append(loss.line() + ": their events are missing from the trace")
        info.events_read = events_read
        recorded = (info.record or {}).get("events")
        if isinstance(recorded, int) and not isinstance(recorded, bool):
            info.recorded_events = recorded
            if recorded > events_read:
                info.missing_events = recorded - events_read
                info.warnings.append(f"memq-record.json counted {recorded:,} events, the trace files hold "
                                     f"{events_read:,}: {recorded - events_read:,} events are missing")
            elif recorded < events_read:
                info.warnings.append(f"the trace files hold {events_read:,} events, more than the {recorded:,} "
                                     "memq-record.json counted (files added after recording?)")

    def open(self, opener: Callable[[], T], probe: Callable[[T], Any], what: str) -> T:
        """`opener()` run in a guarded child first (`probe` on its result must be JSON-able and is
        raised on as a MemqError if it is a string), then here once the child came through."""

        def attempt(_beat: Callable[[], None]) -> Any:
            return probe(opener())

        problem = guarded(attempt, what)
        if isinstance(problem, str):
            raise MemqError(problem)
        return opener()
