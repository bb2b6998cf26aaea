"""Checks of an LTTng CTF trace directory, made before libbabeltrace2 reads it.

libbabeltrace2 (2.0) trusts what it reads: a metadata file cut inside a packet
makes its parser spin forever, and a packet header it does not expect (cut
short, an absurd `packet_size`, `timestamp_begin` all ones) or an unreadable or
stray file reaches a precondition or an assert that aborts the process. So
before any trace goes to the library this module reads, in plain Python:

* the metadata packets (complete, sane header, one UUID), and from the TSDL text
  the trace UUID, byte order, stream ids, clock and the LTTng packet layout;
* the directory: every entry babeltrace2 would take for a stream file must be a
  readable regular file starting with a CTF packet (else it is *stray*, or
  *missing* when it is a dangling link or `index/` names it but it is gone);
* every stream file's packet headers and contexts, in a chain from offset 0
  (magic, UUID, stream id, sizes, timestamps, sequence numbers);
* `index/`: packets it lists that the stream file does not hold any more.

What it finds is either a *problem* (babeltrace2 would refuse or abort: the
trace is refused with one line, or `--salvage` cuts it away) or a *loss*
(the files lack data the recording wrote: counted and reported).
"""
from __future__ import annotations

import os
import re
import stat
import struct
from dataclasses import dataclass, field
from pathlib import Path

from ctf2perfetto.errors import MemqError

METADATA = "metadata"
INDEX_DIR = "index"
STREAM_MAGIC = 0xC1FC1FC1
METADATA_MAGIC = 0x75D11D57
INDEX_MAGIC = 0xC1F1DCC1
U64_MAX = (1 << 64) - 1
I64_MAX = (1 << 63) - 1  # babeltrace2's ns from the origin are int64
# babeltrace2 keeps packet and content sizes (bits) in int64: from 2**63 on it asserts.
MAX_SIZE_BITS = (1 << 63) - 1
# Metadata packet header (CTF 1.8 section 7.1): magic, uuid[16], checksum, content_size,
# packet_size (bits), compression, encryption, checksum schemes, major, minor.
_META_FIELDS = "I16sIIIBBBBB"
META_HEADER_BYTES = struct.calcsize("<" + _META_FIELDS)
# LTTng stream packet header (magic, uuid[16], stream_id u32, stream_instance_id u64) and the
# first five members of its packet context (timestamp_begin, timestamp_end, content_size,
# packet_size, packet_seq_num: all u64); the rest of the context depends on the bitness.
_PACKET_FIELDS = "I16sIQQQQQQ"
PACKET_PREFIX_BYTES = struct.calcsize("<" + _PACKET_FIELDS)
HEADER_BYTES = 32
# Index file: magic, major, minor, entry size (u32, big endian), then entries: offset, packet_size,
# content_size, timestamp_begin, timestamp_end, events_discarded, stream_id (u64), and from index
# 1.1 on stream_instance_id, packet_seq_num. babeltrace2 reads a whole v1.1 entry whatever size the
# header gives (and divides by that size).
_INDEX_HEADER = struct.Struct(">IIII")
_INDEX_ENTRY = struct.Struct(">QQQQQ")
INDEX_ENTRY_BYTES = {0: 56, 1: 72}  # by minor version: what babeltrace2 reads of each entry

_LTTNG_HEADER = re.compile(
    r"packet\.header\s*:=\s*struct\s*\{\s*uint32_t\s+magic\s*;\s*uint8_t\s+uuid\s*\[\s*16\s*\]\s*;\s*"
    r"uint32_t\s+stream_id\s*;\s*uint64_t\s+stream_instance_id\s*;\s*\}")
_LTTNG_CONTEXT = re.compile(
    r"struct\s+packet_context\s*\{\s*\w+\s+timestamp_begin\s*;\s*\w+\s+timestamp_end\s*;\s*"
    r"uint64_t\s+content_size\s*;\s*uint64_t\s+packet_size\s*;\s*uint64_t\s+packet_seq_num\s*;")
_TRACE_UUID = re.compile(r"\btrace\s*\{[^{}]*?\buuid\s*=\s*\"([0-9a-fA-F-]{36})\"")
_BYTE_ORDER = re.compile(r"\btrace\s*\{[^{}]*?\bbyte_order\s*=\s*(\w+)")
_STREAM_ID = re.compile(r"\bstream\s*\{\s*id\s*=\s*(\d+)\s*;")
_CLOCK = re.compile(r"\bclock\s*\{([^{}]*)\}")


BAD_METADATA = "unreadable CTF metadata"


class TraceProblem(MemqError):
    """A trace libbabeltrace2 must not be given as it is; the message is one line."""


@dataclass(frozen=True)
class Metadata:
    """What memq needs from a trace's metadata."""

    path: Path
    uuid: bytes | None  # 16 bytes, None when the TSDL has none
    byte_order: str  # struct prefix, "<" or ">"
    stream_ids: frozenset[int]
    lttng_layout: bool  # the packet header and context are LTTng's (fixed offsets above)
    clock_freq: int  # Hz
    clock_offset_ns: int  # the clock class offset from the Epoch, in ns

    def to_ns(self, cycles: int) -> int:
        """A clock value of this trace as ns (without the offset)."""
        return cycles if self.clock_freq == 1_000_000_000 else cycles * 1_000_000_000 // self.clock_freq


@dataclass(frozen=True)
class Packet:
    """One stream packet, as its header and context say."""

    offset: int
    size: int  # bytes
    ts_begin: int  # clock cycles
    ts_end: int
    seq: int


@dataclass
class StreamScan:
    """A stream file's packets up to its first problem, if any."""

    path: Path
    size: int
    packets: list[Packet] = field(default_factory=list)
    walked: bool = True  # False: not LTTng's packet layout, its packets were not walked (babeltrace2 alone reads it)
    problem: str | None = None  # the first thing wrong (at offset 0 or at `good_end`); None when the whole file reads
    stray: bool = False  # not a CTF stream file at all (no packet at offset 0 nor after), or a copy of another
    tail_packets: int = 0  # packets after the problem (the bad one included), estimated by the next magics
    # A damaged first packet followed by readable ones: `packets` start at `head_skip` (the first offset
    # from which the chain reads), the `head_packets` before it (estimated by their magics) are lost.
    head_skip: int = 0
    head_packets: int = 0
    head_problem: str | None = None
    tail_problem: str | None = None  # what is wrong at `good_end` (None: the chain reads to the end)
    first: tuple | None = None  # the first packet's (stream id, instance id, timestamps, seq): tells copies apart

    @property
    def good_end(self) -> int:
        if not self.walked:
            return self.size  # packets unknown: the file holds what its size says
        return self.packets[-1].offset + self.packets[-1].size if self.packets else 0

    def problem_line(self) -> str:
        return f"{self.path}: {self.problem}"


@dataclass(frozen=True)
class IndexEntry:
    offset: int
    size: int  # bytes
    ts_begin: int
    ts_end: int


@dataclass
class IndexFile:
    """An LTTng index file that babeltrace2 will read (it ignores absent or foreign ones)."""

    path: Path
    entries: list[IndexEntry]
    problem: str | None = None  # babeltrace2 would crash on it
    whole: bool = False  # babeltrace2 accepts it as valid (its own checks), so it trusts its offsets

    def accepted_for(self, file_size: int) -> bool:
        """Whether babeltrace2 reads the stream file through this index (its checks, data-stream-file.c)."""
        return self.whole and sum(e.size for e in self.entries) == file_size


@dataclass
class Loss:
    """Data the recording wrote that the files no longer hold (or that salvage left out)."""

    what: str  # "missing packets" | "missing stream" | "dropped packets"
    file: str
    packets: int
    begin_ns: int | None = None  # time range on the trace's clock (ns, without its offset)
    end_ns: int | None = None
    bytes: int = 0

    @property
    def dropped(self) -> bool:
        """Cut away by --salvage (the rest is missing from the files)."""
        return self.what.startswith("dropped")

    def line(self) -> str:
        span = f", {self.bytes:,} bytes" if self.bytes else ""
        return f"{self.file}: {self.what}: {self.packets:,} packet(s){span}"


@dataclass
class TraceCheck:
    """One CTF trace directory, checked."""

    dir: Path
    metadata: Metadata
    streams: dict[str, StreamScan] = field(default_factory=dict)  # name -> scan (readable stream files)
    unreadable: dict[str, str] = field(default_factory=dict)  # name -> why (fatal unless salvaged)
    losses: list[Loss] = field(default_factory=list)
    # name -> index/ entries that agree with the stream file (as far as it goes)
    index: dict[str, list[IndexEntry]] = field(default_factory=dict)
    index_problems: list[str] = field(default_factory=list)  # index files babeltrace2 must not read
    index_ignored: list[str] = field(default_factory=list)  # index files that disagree with their streams

    def problems(self) -> list[str]:
        """One line per file babeltrace2 must not read as it is."""
        lines = [f"{self.dir / n}: cannot read: {why}" for n, why in sorted(self.unreadable.items())]
        return (lines + [s.problem_line() for _, s in sorted(self.streams.items()) if s.problem]
                + self.index_problems)


# ------------------------------------------------------------------------------ metadata

def read_metadata(path: Path) -> Metadata:
    """The metadata file's facts; TraceProblem for a file babeltrace2 cannot be given."""
    data = _read_file(path, "CTF metadata")
    packetized = len(data) >= 4 and struct.unpack("<I", data[:4])[0] in (METADATA_MAGIC, _swap32(METADATA_MAGIC))
    text = _metadata_packets(path, data) if packetized else data
    try:
        tsdl = text.decode("ascii")
    except UnicodeDecodeError as exc:
        raise TraceProblem(f"{path}: {BAD_METADATA}: a non-ASCII byte at offset {exc.start} of its text")
    # Only plain-text metadata says its version in a leading comment; packetized metadata (lttng-modules 2.10/2.11,
    # lttng-ust 2.0-2.3, the relay daemon) says it in every packet header, and babeltrace2 reads it without one.
    if not packetized and not tsdl.lstrip().startswith("/* CTF 1.8"):
        raise TraceProblem(f"{path}: {BAD_METADATA}: its text does not start with `/* CTF 1.8`")
    if "\0" in tsdl:
        raise TraceProblem(f"{path}: {BAD_METADATA}: a NUL byte in its text")
    order = _BYTE_ORDER.search(tsdl)
    uuid = _TRACE_UUID.search(tsdl)
    ids = frozenset(int(m) for m in _STREAM_ID.findall(tsdl)) or frozenset({0})
    freq, offset_ns = _clock(tsdl)
    return Metadata(path, bytes.fromhex(uuid.group(1).replace("-", "")) if uuid else None,
                    ">" if order and order.group(1) in ("be", "network") else "<", ids,
                    bool(_LTTNG_HEADER.search(tsdl) and _LTTNG_CONTEXT.search(tsdl)), freq, offset_ns)


def _metadata_packets(path: Path, data: bytes) -> bytes:
    """The TSDL text of packetized metadata, each packet checked (a cut one hangs babeltrace2)."""
    order = "<" if struct.unpack("<I", data[:4])[0] == METADATA_MAGIC else ">"
    header = struct.Struct(order + _META_FIELDS)
    text = bytearray()
    offset, uuid = 0, None
    while offset < len(data):
        where = f"{path}: {BAD_METADATA}: packet at offset {offset}"
        if len(data) - offset < header.size:
            raise TraceProblem(f"{where}: the file ends inside its header (cut short)")
        magic, puuid, _sum, content, size, comp, enc, csum, major, minor = header.unpack_from(data, offset)
        if magic != METADATA_MAGIC:
            raise TraceProblem(f"{where}: bad magic {magic:#x}")
        if uuid is not None and puuid != uuid:
            raise TraceProblem(f"{where}: its UUID differs from the first packet's")
        uuid = puuid
        if size % 8 or content % 8 or content < header.size * 8 or content > size:
            raise TraceProblem(f"{where}: impossible sizes (content {content} bits, packet {size} bits)")
        if offset + size // 8 > len(data):
            raise TraceProblem(f"{where}: the file ends inside it ({size // 8} bytes, {len(data) - offset} "
                               "left): the metadata was cut short")
        if comp or enc or csum or (major, minor) != (1, 8):
            raise TraceProblem(f"{where}: unsupported (compression/encryption/checksum or CTF {major}.{minor})")
        text += data[offset + header.size: offset + content // 8]
        offset += size // 8
    return bytes(text)


def _clock(tsdl: str) -> tuple[int, int]:
    """(frequency, offset from the Epoch in ns) of the first clock; (1 GHz, 0) without one."""
    block = _CLOCK.search(tsdl)
    if not block:
        return 1_000_000_000, 0
    body = block.group(1)

    def number(name: str) -> int:
        found = re.search(rf"\b{name}\s*=\s*(-?\d+)", body)
        return int(found.group(1)) if found else 0

    freq = number("freq") or 1_000_000_000
    return freq, number("offset_s") * 1_000_000_000 + number("offset") * 1_000_000_000 // freq


# ------------------------------------------------------------------------------ stream files

def scan_stream(path: Path, meta: Metadata, fd: int) -> StreamScan:
    """The chain of packets of one stream file (open as `fd`), up to the first problem."""
    size = os.fstat(fd).st_size
    scan = StreamScan(path, size)
    if not meta.lttng_layout:
        scan.walked = False
        return scan  # not LTTng's layout: offsets unknown, babeltrace2 alone reads it
    prefix = struct.Struct(meta.byte_order + _PACKET_FIELDS)
    offset, prev = 0, None
    while offset < size:
        head = os.pread(fd, prefix.size, offset)
        problem = _packet_problem(head, prefix, offset, size, prev, meta)
        if problem is not None and offset == 0:
            resume = _resume(fd, size, prefix, meta)
            if resume is not None:  # a stream file whose first packet is damaged: the chain reads from `resume`
                scan.problem = scan.head_problem = problem
                scan.head_skip, scan.head_packets = resume, _count_tail(fd, 0, resume, meta)
                offset = resume
                continue
        if problem is not None:
            scan.problem = scan.problem or problem
            scan.tail_problem = problem
            scan.stray = offset == 0 and (len(head) < 4 or prefix.unpack_from(head.ljust(prefix.size, b"\0"))[0]
                                           != STREAM_MAGIC)
            if scan.stray:
                scan.problem = scan.tail_problem = (
                    "not a CTF stream file (no CTF packet in it: a stray file among the trace's stream files; "
                    "move it out of the trace directory)")
            scan.tail_packets = _count_tail(fd, offset, size, meta)
            return scan
        _magic, _uuid, sid, inst, ts_b, ts_e, _content, bits, seq = prefix.unpack_from(head)
        if prev is None:
            scan.first = (sid, inst, ts_b, ts_e, seq)
        prev = Packet(offset, bits // 8, ts_b, ts_e or ts_b, seq)  # end 0: never closed (lttng-crash)
        scan.packets.append(prev)
        offset += bits // 8
    return scan


def _resume(fd: int, size: int, prefix: struct.Struct, meta: Metadata) -> int | None:
    """The first offset after 0 where a sane packet starts (its magic and the trace's UUID, 8-byte aligned,
    a header and context memq would pass): where a stream file whose first packet is damaged reads again."""
    signature = struct.pack(meta.byte_order + "I", STREAM_MAGIC) + (meta.uuid or b"")
    pos, step = 1, 1 << 22
    while pos < size:
        chunk = os.pread(fd, step + len(signature), pos)
        start = 0
        while (hit := chunk.find(signature, start)) >= 0 and hit < step:
            at = pos + hit
            if at % 8 == 0 and _packet_problem(os.pread(fd, prefix.size, at), prefix, at, size, None, meta) is None:
                return at
            start = hit + 1
        pos += step
    return None


def _packet_problem(head: bytes, prefix: struct.Struct, offset: int, size: int, prev: Packet | None,
                    meta: Metadata) -> str | None:
    """Why the packet at `offset` must not reach babeltrace2 (None: it may)."""
    at = f"packet at offset {offset}"
    if len(head) < prefix.size:
        return f"{at}: the file ends inside its header (cut short)"
    magic, uuid, sid, _inst, ts_b, ts_e, content, bits, seq = prefix.unpack_from(head)
    if magic != STREAM_MAGIC:
        return f"{at}: bad magic {magic:#x} (corrupt data where a packet should start)"
    if meta.uuid is not None and uuid != meta.uuid:
        return f"{at}: its trace UUID is not the metadata's (corrupt header)"
    if sid not in meta.stream_ids:
        return f"{at}: stream id {sid} is not declared in the metadata (corrupt header)"
    if bits == 0 or bits % 8 or bits > MAX_SIZE_BITS or bits < prefix.size * 8:
        return f"{at}: impossible packet_size of {bits} bits (corrupt context)"
    if content > bits or content < prefix.size * 8:
        return f"{at}: impossible content_size of {content} bits for a packet of {bits} bits (corrupt context)"
    if offset + bits // 8 > size:
        return (f"{at}: the file ends inside it ({bits // 8} bytes, {size - offset} left): the stream file "
                "was cut mid-packet")
    if ts_e == 0 and ts_b > 0:
        ts_e = ts_b  # a packet never closed (lttng-crash's extraction of the ring buffer): end unknown, as babeltrace2
    if U64_MAX in (ts_b, ts_e) or ts_b > ts_e:
        return f"{at}: impossible timestamps (begin {ts_b}, end {ts_e}) (corrupt context)"
    if meta.clock_offset_ns + meta.to_ns(ts_e) > I64_MAX:
        return (f"{at}: impossible timestamp_end {ts_e}: past the last time babeltrace2 can hold "
                "(corrupt context)")
    if prev is not None:
        if ts_b < prev.ts_end:
            return f"{at}: its timestamp_begin {ts_b} goes back before the previous packet's end {prev.ts_end}"
        if seq < prev.seq:  # equal: LTTng repeats it (babeltrace2 reads on), going back is corrupt
            return f"{at}: packet_seq_num {seq} does not follow the previous packet's {prev.seq}"
    return None


def _count_tail(fd: int, offset: int, size: int, meta: Metadata) -> int:
    """Packets from `offset` to the end: the bad one plus each later start of a packet (its magic
    and the trace UUID), so that a report after a corrupt size still counts what follows."""
    if offset >= size:
        return 0
    signature = struct.pack(meta.byte_order + "I", STREAM_MAGIC) + (meta.uuid or b"")
    count, pos, step = 1, offset + 1, 1 << 22
    while pos < size:
        chunk = os.pread(fd, step + len(signature), pos)
        start = 0
        while (hit := chunk.find(signature, start)) >= 0:
            if (pos + hit) % 8 == 0 and hit < step and pos + hit < size:
                count += 1
            start = hit + 1
        pos += step
    return count


# ------------------------------------------------------------------------------ index/

def read_index(path: Path) -> IndexFile | None:
    """An LTTng index file as babeltrace2 reads it (None when it would ignore the file). One that is not a
    regular file (a FIFO, a device) is a problem: babeltrace2 opens it and waits on it for ever."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO with no writer must not block this open
    except OSError:
        return None  # babeltrace2 cannot map it either, and builds its own index
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            return IndexFile(path, [], problem=f"{path}: not a regular file ({_file_kind(mode)}): babeltrace2 "
                                               "would wait on it for ever")
        data = _read_all(fd)
    except OSError:
        return None
    finally:
        os.close(fd)
    if len(data) < _INDEX_HEADER.size:
        return None
    magic, major, minor, entry = _INDEX_HEADER.unpack_from(data)
    if magic != INDEX_MAGIC or major != 1:
        return None
    index = IndexFile(path, [])
    needed = INDEX_ENTRY_BYTES[min(minor, 1)]
    if entry < needed:
        index.problem = (f"{path}: corrupt index: entries of {entry} bytes, index 1.{minor} needs {needed} "
                         "(babeltrace2 crashes on it)")
        return index
    if (len(data) - _INDEX_HEADER.size) % entry:
        return index  # babeltrace2 ignores it
    index.whole = True
    for at in range(_INDEX_HEADER.size, len(data), entry):
        offset, bits, _content, ts_b, ts_e = _INDEX_ENTRY.unpack_from(data, at)
        if bits % 8 or ts_e < ts_b or (index.entries and offset < index.entries[-1].offset):
            index.whole = False
        index.entries.append(IndexEntry(offset, bits // 8, ts_b, ts_e))
    return index


# ------------------------------------------------------------------------------ the directory

def check_trace(trace: Path) -> TraceCheck:
    """Check one trace directory (holding `metadata`); TraceProblem if its metadata is unusable."""
    meta = read_metadata(trace / METADATA)
    check = TraceCheck(trace, meta)
    index_dir = trace / INDEX_DIR
    listed = {p.name[:-len(".idx")]: p for p in _entries(index_dir) if p.name.endswith(".idx")} \
        if index_dir.is_dir() else {}
    for entry in _entries(trace):
        name = entry.name
        if name == METADATA or name.startswith("."):
            continue  # babeltrace2 skips hidden files
        try:
            st = entry.stat()
        except FileNotFoundError:
            check.losses.append(Loss("missing stream (dangling symbolic link)", str(entry), 0))
            continue
        except OSError as exc:
            check.unreadable[name] = exc.strerror or str(exc)
            continue
        if not stat.S_ISREG(st.st_mode) or st.st_size == 0:
            continue  # directories (index/), devices...: babeltrace2 skips them; empty files hold nothing
        try:
            fd = os.open(entry, os.O_RDONLY)
        except OSError as exc:
            check.unreadable[name] = exc.strerror or str(exc)
            continue
        try:
            check.streams[name] = scan_stream(entry, meta, fd)
        except OSError as exc:
            check.unreadable[name] = exc.strerror or str(exc)
        finally:
            os.close(fd)
    _mark_copies(check, listed)
    for name, index_file in sorted(listed.items()):
        index = read_index(index_file)
        if index is not None:
            _check_index(check, name, index)
    return check


def _mark_copies(check: TraceCheck, listed: dict[str, Path]) -> None:
    """Stream files that begin with the same packet as another (same stream, instance, times, number) are
    copies of it (a file duplicated inside the trace: babeltrace2 reads both and finds time going back).
    The original is the one index/ names, else the first by name; a copy is left out like a stray file."""
    firsts: dict[tuple, list[str]] = {}
    for name, scan in check.streams.items():
        if scan.first is not None and not scan.head_skip:
            firsts.setdefault(scan.first, []).append(name)
    for names in firsts.values():
        if len(names) < 2:
            continue
        original = min(names, key=lambda n: (n not in listed, n))
        for name in names:
            if name != original:
                scan = check.streams[name]
                scan.stray = True
                scan.problem = scan.tail_problem = (f"a copy of {check.dir / original} (the same stream's packets, "
                                                    "read twice): move it out of the trace directory")


def _check_index(check: TraceCheck, name: str, index: IndexFile) -> None:
    """An index file against its stream file: a problem where babeltrace2 would crash or trust it
    wrongly, the losses it shows where it agrees with the file, nothing where it is junk."""
    if index.problem:
        check.index_problems.append(index.problem)
        return
    scan = check.streams.get(name)
    # Offsets and sizes decide where babeltrace2 reads (a wrong one crashes it); the times tell one stream's
    # index from another's (index files of streams with equal packet sizes, swapped, agree on offsets).
    held = {(p.offset, p.size): (p.ts_begin, p.ts_end) for p in scan.packets} if scan is not None else {}
    end = scan.good_end if scan is not None else 0
    inside = [e for e in index.entries if e.offset < end]
    placed = all((e.offset, e.size) in held for e in inside)
    agrees = placed and all(held[(e.offset, e.size)] == (e.ts_begin, e.ts_end) for e in inside)
    if scan is not None and not scan.walked:
        # Packets not walked (not LTTng's layout): only the file's size says what it holds (a complete file whose
        # index is right is no loss).
        check.index[name] = index.entries
        _index_losses(check, name, index.entries)
        return
    if name in check.unreadable or (scan is not None and scan.problem):
        # A damaged file is refused (or cut by salvage, which then leaves index/ out) whatever its index
        # says: the index is no damaged file of its own.
        if agrees:
            check.index[name] = index.entries  # salvage counts what it drops with it
        return  # a damaged file: reported as a problem (or by salvage), not twice
    if scan is not None and index.accepted_for(scan.size) and not (placed and len(inside) == len(scan.packets)):
        check.index_problems.append(f"{index.path}: corrupt index: it does not match the packets of "
                                    f"{scan.path} (babeltrace2 would read them through it)")
        return
    if not agrees:
        check.index_ignored.append(f"{index.path}: does not match its stream file; not used to count losses")
        return
    check.index[name] = index.entries
    _index_losses(check, name, index.entries)


def _index_losses(check: TraceCheck, name: str, entries: list[IndexEntry]) -> None:
    """Packets `index/` lists beyond what the stream file holds (a deleted, emptied or cut file)."""
    scan = check.streams.get(name)
    held = scan.good_end if scan is not None else 0
    gone = [e for e in entries if e.offset + e.size > held]
    if not gone:
        return
    meta = check.metadata
    path = str(check.dir / name)
    what = "missing packets (index/ lists them, the stream file ends before)" if scan is not None \
        else "missing stream (index/ lists it, the file is gone or empty)"
    dangling = [loss for loss in check.losses if loss.file == path]
    for loss in dangling:
        check.losses.remove(loss)
        what = loss.what
    check.losses.append(Loss(what, path, len(gone), meta.to_ns(min(e.ts_begin for e in gone)),
                             meta.to_ns(max(e.ts_end for e in gone)), sum(e.size for e in gone)))


def _file_kind(mode: int) -> str:
    for test, kind in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory")):
        if test(mode):
            return kind
    return "not a file"


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
    return b"".join(chunks)


def _entries(directory: Path) -> list[Path]:
    try:
        return sorted(directory.iterdir())
    except OSError as exc:
        raise TraceProblem(f"{directory}: cannot list the trace directory: {exc.strerror or exc}") from None


def _read_file(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise TraceProblem(f"{path}: cannot read the {what}: {exc.strerror or exc}") from None


def _swap32(value: int) -> int:
    return struct.unpack("<I", struct.pack(">I", value))[0]
