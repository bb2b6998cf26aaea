"""An excerpt of an LTTng trace directory: a copy holding only the packets of a time range.

A range of a long recording (a part, analysis/parts.py) is decoded from an excerpt instead of from
the start of the recording: each stream file keeps its consecutive packets that may hold an event
of the range, chosen by the packet times the pre-flight check reads from every packet's header
(check.py: the times `index/` lists, read from the stream files themselves). Events of a stream
come in time order, so a packet holds events from its `timestamp_begin` to the next packet's (the
last one: to the end). Every stream keeps at least one packet and every trace its metadata, so
the decoder opens the same traces (the rows' time reference is the first clock it meets: the
reader shifts them back onto the recording's, ranges.Lead.reference_ns).

A stream whose packets cannot be walked (not LTTng's packet layout, or damaged) has no excerpt:
`packet_table` says why in one line, and the range is read from the start of the recording.
"""
from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from ctf2perfetto.ctf.check import METADATA, TraceProblem, check_trace
from ctf2perfetto.errors import MemqError

_FOREVER = (1 << 63) - 1
# Packet times are turned into ns as the decoder does, give or take its rounding: a packet within this of the
# range is kept (its rows outside the range are dropped by time).
_SLACK_NS = 1_000


class NoExcerpt(MemqError):
    """The packets of a recording cannot be chosen by time (one line: which file, why)."""


@dataclass
class Stream:
    """One stream file's packets: byte offset, size, and the ns from the clock origin they may hold events of."""

    name: str  # path of the stream file under the recording's directory
    offsets: list[int] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    begins: list[int] = field(default_factory=list)
    ends: list[int] = field(default_factory=list)  # the next packet's begin, or its own end if later


@dataclass
class PacketTable:
    """Every packet of a recording with its time (what an excerpt is cut from)."""

    root: Path
    traces: list[str]  # trace directories (holding `metadata`) under root
    streams: list[Stream]

    def packets(self, begin_ns: int, end_ns: int | None) -> int:
        """How many packets an excerpt from `begin_ns` to `end_ns` holds."""
        return sum(hi - lo for lo, hi in (_chosen(s, begin_ns, end_ns) for s in self.streams))


def packet_table(root: Path) -> PacketTable:
    """The packets of every trace under `root`; NoExcerpt when some stream's packets cannot be walked."""
    from ctf2perfetto.ctf.decode import find_traces

    root = Path(root).absolute()  # Dask workers may run elsewhere on this machine
    traces, streams = [], []
    for trace in (t.absolute() for t in find_traces(root)):
        try:
            check = check_trace(trace)
        except TraceProblem as exc:
            raise NoExcerpt(str(exc)) from None
        problems = check.problems()
        if problems:
            raise NoExcerpt(problems[0])
        traces.append(str(trace.relative_to(root)))
        meta = check.metadata
        for name, scan in sorted(check.streams.items()):
            if not scan.walked or scan.stray or scan.problem or not scan.packets:
                raise NoExcerpt(f"{scan.path}: its packets cannot be walked (not LTTng's packet layout)")
            stream = Stream(str((trace / name).relative_to(root)))
            for p in scan.packets:
                stream.offsets.append(p.offset)
                stream.sizes.append(p.size)
                stream.begins.append(meta.clock_offset_ns + meta.to_ns(p.ts_begin))
                stream.ends.append(meta.clock_offset_ns + meta.to_ns(p.ts_end))
            # A packet never closed (lttng-crash) says no end: the next packet's begin bounds it, the last none.
            stream.ends = [max(e, b) for e, b in zip(stream.ends, stream.begins[1:])] + [_FOREVER]
            streams.append(stream)
    return PacketTable(root, traces, streams)


def _chosen(stream: Stream, begin_ns: int, end_ns: int | None) -> tuple[int, int]:
    """The packets [lo, hi) of `stream` that may hold an event from `begin_ns` to `end_ns` (at least one)."""
    n = len(stream.offsets)
    lo = next((i for i in range(n) if stream.ends[i] >= begin_ns - _SLACK_NS), n - 1)
    hi = n if end_ns is None else next((i for i in range(lo, n) if stream.begins[i] > end_ns + _SLACK_NS), n)
    return lo, max(hi, lo + 1)


def write_excerpt(table: PacketTable, out: Path, begin_ns: int, end_ns: int | None) -> int:
    """The excerpt from `begin_ns` to `end_ns` (ns from the clock origin; None: to the end) under `out` (a new
    directory, laid out as the recording's); returns the packets it holds."""
    out = Path(out)
    for trace in table.traces:
        (out / trace).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(table.root / trace / METADATA, out / trace / METADATA)
    held = 0
    for stream in table.streams:
        lo, hi = _chosen(stream, begin_ns, end_ns)
        held += hi - lo
        source, target = table.root / stream.name, out / stream.name
        if lo == 0 and hi == len(stream.offsets):
            os.symlink(source.resolve(), target)  # all of it
            continue
        start, length = stream.offsets[lo], sum(stream.sizes[lo:hi])
        try:
            with open(source, "rb") as src, open(target, "wb") as dst:
                _copy_range(src.fileno(), dst.fileno(), start, length)
        except OSError as exc:
            raise MemqError(f"{source}: cannot copy its packets for a part: {exc.strerror or exc}") from None
    return held


def _copy_range(src: int, dst: int, offset: int, length: int) -> None:
    kernel = hasattr(os, "copy_file_range")
    while length > 0:
        done = 0
        if kernel:
            try:
                done = os.copy_file_range(src, dst, length, offset)
            except OSError:  # not between these file systems: read and write
                kernel = False
        if done <= 0:
            data = os.pread(src, min(length, 1 << 24), offset)
            if not data:
                raise OSError(f"the stream file ends before byte {offset + length}")
            done = os.write(dst, data)
        offset += done
        length -= done
