"""Salvage a damaged LTTng trace: a temporary copy with each bad stream file cut back.

babeltrace2 refuses a whole trace when one stream file ends mid-packet, and stops
the whole graph at the first undecodable packet. The copy links every intact file
to the original (the input is never modified), writes a truncated copy of each
damaged stream file ending at its last good packet, and drops the stale `index/`
of the traces it cut. Then it reads the copy to the end with the decoder and, while
a stream file still fails, cuts that file back before the packet being read when
it failed. What was dropped is recorded exactly (files, offsets, bytes, packets).
"""
from __future__ import annotations

import os
import shutil
import struct
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .errors import MemqError

CTF_MAGIC = 0xC1FC1FC1
# LTTng packet header (magic u32, uuid[16], stream_id u32, stream_instance_id u64) is 32
# bytes; the packet context follows: timestamp_begin, timestamp_end, content_size (bits),
# packet_size (bits), ... all u64 little endian.
_HEADER = struct.Struct("<I28xQQQQ")
MAX_ATTEMPTS = 10000

# (message, failed stream file, packets begun, packets ended) or None when readable.
Checker = Callable[[list[Path]], "tuple[str, str, int, int] | None"]


@dataclass
class Dropped:
    """What salvage removed from one stream file."""

    file: str  # original path
    offset: int  # bytes kept (the cut)
    bytes: int  # bytes dropped
    packets: int  # packets dropped (a trailing partial packet counts as one)
    reason: str

    def line(self) -> str:
        return (f"{self.file}: salvage dropped {self.packets} packet(s), {self.bytes} bytes "
                f"from offset {self.offset} ({self.reason})")


@dataclass
class _Layout:
    """Where the packets of a stream file are."""

    offsets: list[int]  # starts of the complete, well-formed packets
    good_end: int  # end of the last of them
    size: int  # file size

    @property
    def packets(self) -> int:
        """Packets in the file; bytes after the last good packet count as one more."""
        return len(self.offsets) + (self.good_end < self.size)

    @classmethod
    def read(cls, path: Path) -> "_Layout":
        size = path.stat().st_size
        offsets: list[int] = []
        offset = 0
        with path.open("rb") as f:
            while offset + _HEADER.size <= size:
                f.seek(offset)
                magic, _tb, _te, content_bits, packet_bits = _HEADER.unpack(f.read(_HEADER.size))
                if (magic != CTF_MAGIC or packet_bits == 0 or packet_bits % 8 or content_bits > packet_bits
                        or offset + packet_bits // 8 > size):
                    break
                offsets.append(offset)
                offset += packet_bits // 8
        return cls(offsets, offset, size)


def _stream_files(trace: Path) -> list[Path]:
    return sorted(p for p in trace.iterdir()
                  if p.is_file() and p.name != "metadata" and not p.name.startswith("."))


class SalvagedCopy:
    """A readable temporary copy of `traces`; `traces` lists the copies, `dropped` the cuts."""

    def __init__(self, traces: list[Path], check: Checker) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="memq-salvage-"))
        self.originals = traces
        self.traces: list[Path] = []
        self.dropped: dict[str, Dropped] = {}
        self._layouts: dict[Path, _Layout] = {}
        try:
            for i, trace in enumerate(traces):
                self.traces.append(self._mirror(trace, self.root / str(i)))
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
        return [d.line() for d in self.dropped.values()]

    def cleanup(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def _mirror(self, trace: Path, copy: Path) -> Path:
        copy.mkdir(parents=True)
        os.symlink(trace / "metadata", copy / "metadata")
        damaged = False
        for stream in _stream_files(trace):
            layout = _Layout.read(stream)
            self._layouts[copy / stream.name] = layout
            if layout.good_end < layout.size:
                damaged = True
                self._cut(stream, copy / stream.name, len(layout.offsets), "file ends inside a packet")
            else:
                os.symlink(stream, copy / stream.name)
        if not damaged and (trace / "index").is_dir():
            os.symlink(trace / "index", copy / "index")
        return copy

    def _cut(self, source: Path, copy: Path, keep_packets: int, reason: str) -> None:
        """Makes `copy` the first `keep_packets` packets of the original stream file (none: no file)."""
        layout = self._layouts[copy]
        keep = layout.offsets[keep_packets] if keep_packets < len(layout.offsets) else layout.good_end
        if copy.is_symlink() or copy.exists():
            copy.unlink()
        if keep:
            with source.open("rb") as src, copy.open("wb") as dst:
                remaining = keep
                while remaining:
                    chunk = src.read(min(remaining, 1 << 20))
                    dst.write(chunk)
                    remaining -= len(chunk)
        self.dropped[str(source)] = Dropped(str(source), keep, layout.size - keep,
                                            layout.packets - keep_packets, reason)
        index = copy.parent / "index"
        if index.is_symlink():
            index.unlink()

    def _cut_until_readable(self, check: Checker) -> None:
        cuts: dict[Path, int] = {}
        for _ in range(MAX_ATTEMPTS):
            failure = check(self.traces)
            if failure is None:
                return
            message, stream_name, begun, ended = failure
            copy = Path(stream_name)
            if copy not in self._layouts:
                raise MemqError(self.original(message) + " (salvage cannot cut this away)")
            # The packet being read when decoding failed (or the next one, if the last ended).
            bad = begun - 1 if begun > ended else begun
            if copy in cuts and bad >= cuts[copy]:
                bad = cuts[copy] - 1
            if bad < 0:
                raise MemqError(self.original(message) + " (salvage cannot cut this away)")
            cuts[copy] = bad
            source = self.originals[self.traces.index(copy.parent)] / copy.name
            self._cut(source, copy, bad, "undecodable data in packet %d" % bad)
        raise MemqError(f"{self.originals[0]}: salvage gave up after {MAX_ATTEMPTS} attempts")
