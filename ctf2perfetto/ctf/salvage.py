"""Salvage a damaged LTTng trace: a temporary copy with each bad stream file cut back.

babeltrace2 refuses a whole trace when one stream file ends mid-packet, and stops
the whole graph at the first undecodable packet. The copy links every intact file
to the original (the input is never modified), writes a truncated copy of each
damaged stream file ending at its last good packet (where ctf2perfetto.ctf.check
found the first problem), leaves out stray and unreadable files, and drops the
stale `index/` of the traces it cut. Then it reads the copy to the end with the
decoder (in a guarded child process: whatever the library does, this process
lives on and removes the copy) and, while a stream file still fails, cuts that
file back before the packet being read when it failed; a muxer error (a time
going backwards) names a time, and the stream whose packet holds the odd time is
cut; a read that brings the library down names nothing, so each stream file is
read alone and the first packets that do not crash it are found by bisection.
What was dropped is recorded exactly (files, offsets, bytes, packets, times).
"""
from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ctf2perfetto.ctf.check import INDEX_DIR, METADATA, IndexEntry, Loss, StreamScan, TraceCheck
from ctf2perfetto.errors import MemqError
from ctf2perfetto.outfiles import pid_alive

MAX_ATTEMPTS = 10000
PREFIX = "memq-salvage-"
# The muxer's complaint about a message older than the last one it returned: `ts=` is that message's time.
_ORDER_ERROR = re.compile(r"timestamp is less than muxer's.*?\bts=(-?\d+)")

# A full read of the copy: None when readable, else {"message" (one line), "raw" (babeltrace2's causes),
# "stream" (file or ""), "begun", "ended", "streams": [[file, begun, ended], ...]} (packets each stream
# had begun / ended when it failed).
Checker = Callable[[list[Path]], "dict | None"]


@dataclass
class Dropped:
    """What salvage removed from one stream file."""

    file: str  # original path
    offset: int  # bytes kept (the cut)
    bytes: int  # bytes dropped
    packets: int  # packets dropped (the damaged one and every one after it)
    reason: str
    begin_ns: int | None = None  # time range of the dropped packets, when their contexts say
    end_ns: int | None = None

    def line(self) -> str:
        return (f"{self.file}: salvage dropped {self.packets} packet(s), {self.bytes} bytes "
                f"from offset {self.offset} ({self.reason})")

    def loss(self) -> Loss:
        return Loss("dropped packets (salvage)", self.file, self.packets, self.begin_ns, self.end_ns, self.bytes)


@dataclass
class _Stream:
    """A stream file of the copy: its original and what the checks read of it."""

    source: Path
    scan: StreamScan
    index: list[IndexEntry] | None
    to_ns: Callable[[int], int]
    offset_ns: int  # the trace's clock offset


class SalvagedCopy:
    """A readable temporary copy of the checked traces; `traces` lists the copies, `dropped` the cuts."""

    def __init__(self, checks: list[TraceCheck], check: Checker) -> None:
        sweep_stale_copies()
        self.root = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-"))
        self.originals = [c.dir for c in checks]
        self.traces: list[Path] = []
        self.dropped: dict[str, Dropped] = {}
        self.missing: dict[str, Loss | None] = {}  # packets index/ lists beyond a cut file's end
        self.left_out: list[str] = []  # stray files: not part of the trace, not linked
        self._streams: dict[Path, _Stream] = {}
        try:
            for i, trace_check in enumerate(checks):
                self.traces.append(self._mirror(trace_check, self.root / str(i)))
            self._cut_until_readable(check)
        except BaseException:
            self.cleanup()
            raise

    def original(self, name: str) -> str:
        """`name` (a path or a message) with paths inside the copy shown as the user's paths."""
        for i, trace in reversed(list(enumerate(self.originals))):
            name = name.replace(str(self.root / str(i)), str(trace))
        return name

    def warnings(self) -> list[str]:
        return self.left_out + [d.line() for d in self.dropped.values()]

    def losses(self) -> list[Loss]:
        """What salvage dropped and what the files it cut lack (index/), one Loss each."""
        return [d.loss() for d in self.dropped.values()] + [m for m in self.missing.values() if m is not None]

    def cleanup(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def _mirror(self, check: TraceCheck, copy: Path) -> Path:
        trace = check.dir
        copy.mkdir(parents=True)
        os.symlink(trace / METADATA, copy / METADATA)
        meta = check.metadata
        damaged = False
        for name, scan in sorted(check.streams.items()):
            if scan.stray:
                self.left_out.append(f"{trace / name}: salvage left it out: {scan.problem}")
                continue
            self._streams[copy / name] = _Stream(trace / name, scan, check.index.get(name), meta.to_ns,
                                                 meta.clock_offset_ns)
            if scan.problem:
                damaged = True
                if scan.head_skip:  # a damaged first packet: the copy starts where the chain reads again
                    # Its times are lost with its context: the loss is placed where the readable packets begin.
                    at = meta.to_ns(scan.packets[0].ts_begin) if scan.packets else None
                    self.dropped[f"{trace / name}#head"] = Dropped(
                        str(trace / name), 0, scan.head_skip, scan.head_packets, scan.head_problem or "", at, at)
                self._cut(copy / name, len(scan.packets), scan.tail_problem or "")
            else:
                os.symlink(trace / name, copy / name)
        for name, why in sorted(check.unreadable.items()):
            entries = check.index.get(name) or []
            self.dropped[str(trace / name)] = Dropped(
                str(trace / name), 0, sum(e.size for e in entries), len(entries), f"unreadable: {why}",
                meta.to_ns(entries[0].ts_begin) if entries else None,
                meta.to_ns(entries[-1].ts_end) if entries else None)
        if not damaged and not check.index_problems and (trace / INDEX_DIR).is_dir():
            os.symlink(trace / INDEX_DIR, copy / INDEX_DIR)
        return copy

    def _cut(self, copy: Path, keep_packets: int, reason: str) -> None:
        """Makes `copy` the first `keep_packets` packets of the original stream file (none: no file)."""
        stream = self._streams[copy]
        packets = stream.scan.packets
        keep = packets[keep_packets].offset if keep_packets < len(packets) else stream.scan.good_end
        start = stream.scan.head_skip  # the copy holds the original's bytes [start, keep)
        if copy.is_symlink() or copy.exists():
            copy.unlink()
        if keep > start:
            with stream.source.open("rb") as src, copy.open("wb") as dst:
                src.seek(start)
                remaining = keep - start
                while remaining:
                    chunk = src.read(min(remaining, 1 << 20))
                    if not chunk:
                        raise MemqError(f"{stream.source}: changed while being salvaged (shorter than {keep} bytes)")
                    dst.write(chunk)
                    remaining -= len(chunk)
        dropped = self._dropped(stream, keep_packets, keep, reason)
        if dropped.packets or dropped.bytes:
            self.dropped[str(stream.source)] = dropped
        index = copy.parent / INDEX_DIR
        if index.is_symlink():
            index.unlink()

    def _dropped(self, stream: _Stream, keep_packets: int, keep: int, reason: str) -> Dropped:
        """The packets of the file from `keep` on: those index/ lists there when it agrees with the
        file up to the cut, else the packets read plus those found after the damage
        (StreamScan.tail_packets). Packets index/ lists beyond the file's end are not in the file:
        they are recorded apart, as missing."""
        scan = stream.scan
        later = scan.packets[keep_packets:]
        count = len(later) + scan.tail_packets
        times = [(p.ts_begin, p.ts_end) for p in later]
        index = stream.index if stream.index and (keep == 0 or any(e.offset == keep for e in stream.index)) else None
        if index:
            listed = [e for e in index if keep <= e.offset < scan.size]
            if len(listed) >= count:
                count = len(listed)
                times = [(e.ts_begin, e.ts_end) for e in listed]
            gone = [e for e in index if e.offset >= scan.size]
            self.missing[str(stream.source)] = Loss(
                "missing packets (index/ lists them, the stream file ends before)", str(stream.source),
                len(gone), stream.to_ns(gone[0].ts_begin), stream.to_ns(max(e.ts_end for e in gone)),
                sum(e.size for e in gone)) if gone else None
        begin = stream.to_ns(times[0][0]) if times else None
        end = stream.to_ns(max(t for _, t in times)) if times else None
        return Dropped(str(stream.source), keep, scan.size - keep, count, reason, begin, end)

    def _cut_until_readable(self, check: Checker) -> None:
        cuts: dict[Path, int] = {}
        for _ in range(MAX_ATTEMPTS):
            failure = check(self.traces)
            if failure is None:
                return
            message = failure["message"]
            crashed = bool(failure.get("crashed"))
            target = self._crashed_in(check) if crashed else self._failed_packet(failure)
            if target is None:
                raise MemqError(self.original(message) + " (salvage cannot cut this away)")
            copy, bad = target
            if copy in cuts and bad >= cuts[copy]:
                bad = cuts[copy] - 1
            if bad < 0:
                raise MemqError(self.original(message) + " (salvage cannot cut this away)")
            cuts[copy] = bad
            self._cut(copy, bad, f"babeltrace2 crashed reading packet {bad}" if crashed
                      else f"undecodable data in packet {bad}")
        raise MemqError(f"{self.originals[0]}: salvage gave up after {MAX_ATTEMPTS} attempts")

    def _crashed_in(self, check: Checker) -> tuple[Path, int] | None:
        """The library died reading (no error names the stream): read each stream file alone (with the
        metadata) to find one that brings it down, then the longest run of its first packets that does
        not (a binary search), and cut there."""
        for copy in sorted(self._streams):
            if not copy.exists():
                continue
            kept = len(self._kept_packets(copy))
            if not self._crashes(check, copy, kept):
                continue
            good, bad = 0, kept  # packets [0, good) read; [0, bad) crash
            while bad - good > 1:
                middle = (good + bad) // 2
                good, bad = (good, middle) if self._crashes(check, copy, middle) else (middle, bad)
            return copy, good
        return None

    def _kept_packets(self, copy: Path) -> list:
        scan = self._streams[copy].scan
        size = copy.stat().st_size + scan.head_skip  # the copy's end, as an offset of the original
        return [p for p in scan.packets if p.offset + p.size <= size]

    def _crashes(self, check: Checker, copy: Path, packets: int) -> bool:
        """Whether reading the first `packets` packets of `copy` alone brings the library down."""
        solo = self.root / "solo"
        shutil.rmtree(solo, ignore_errors=True)
        solo.mkdir()
        try:
            os.symlink(os.readlink(copy.parent / METADATA), solo / METADATA)
            scan = self._streams[copy].scan
            head = scan.packets[:packets]
            end = head[-1].offset + head[-1].size - scan.head_skip if head else 0
            with copy.open("rb") as src, (solo / copy.name).open("wb") as dst:
                dst.write(src.read(end))
            failure = check([solo]) if end else None
            return bool(failure and failure.get("crashed"))
        finally:
            shutil.rmtree(solo, ignore_errors=True)

    def _failed_packet(self, failure: dict) -> tuple[Path, int] | None:
        """(stream file of the copy, packet number) to cut at, from a failed read."""
        name = failure.get("stream")
        if name and Path(name) in self._streams:
            begun, ended = failure["begun"], failure["ended"]
            # The packet being read when decoding failed (or the next one, if the last ended).
            return Path(name), begun - 1 if begun > ended else begun
        ts = order_error_ts(failure.get("raw") or failure["message"])
        if ts is None:
            return None
        return self._out_of_order(ts, failure.get("streams", []))

    def _out_of_order(self, ts: int, progress: list) -> tuple[Path, int] | None:
        found = out_of_order(ts, progress, {str(k): v for k, v in self._streams.items()})
        return (Path(found[0]), found[1]) if found else None


def order_error_ts(text: str) -> int | None:
    """The time (ns from the Epoch) of the message babeltrace2's muxer found too late, from its error text."""
    found = _ORDER_ERROR.search(" ".join(text.split()))
    return int(found.group(1)) if found else None


def out_of_order(ts: int, progress: list, streams: dict[str, _Stream]) -> tuple[str, int] | None:
    """The packet holding the message at `ts` (ns from the Epoch) that came too late for the muxer:
    a packet beginning or ending exactly then (its context is off), else an open packet whose own
    time range does not hold it (an event's time is off), else the first open packet (each cut
    makes progress; the report says what was dropped). `progress` is the decoder's [file, packets
    begun, packets ended] per stream; `streams` the checked stream files by path."""
    exact, outside, open_ = [], [], []
    for name, begun, ended in progress:
        stream = streams.get(name)
        if stream is None:
            continue
        packets = stream.scan.packets
        current = begun - 1 if begun > ended else begun
        if current >= len(packets):
            continue
        packet = packets[current]
        at = ts - stream.offset_ns
        begin, end = stream.to_ns(packet.ts_begin), stream.to_ns(packet.ts_end)
        where = (name, current)
        if at in (begin, end):
            exact.append(where)
        elif begun > ended:
            (open_ if begin <= at <= end else outside).append(where)
    found = exact + outside + open_
    return found[0] if found else None


def checked_streams(checks: list[TraceCheck]) -> dict[str, _Stream]:
    """Every checked stream file by path, as out_of_order takes them."""
    return {str(c.dir / name): _Stream(c.dir / name, scan, c.index.get(name), c.metadata.to_ns,
                                       c.metadata.clock_offset_ns)
            for c in checks for name, scan in c.streams.items()}


def sweep_stale_copies() -> None:
    """Removes salvage copies left in the temporary directory by memq processes that no longer run."""
    pattern = re.compile(rf"^{PREFIX}(\d+)-")
    try:
        entries = list(Path(tempfile.gettempdir()).iterdir())
    except OSError:
        return
    for entry in entries:
        found = pattern.match(entry.name)
        if found and not pid_alive(int(found.group(1))) and entry.is_dir() and not entry.is_symlink():
            try:
                if entry.stat().st_uid == os.geteuid():
                    shutil.rmtree(entry, ignore_errors=True)
            except OSError:
                pass

