"""Columns -> Perfetto TracePacket bytes: the Python side of native/encode.c (libmemqencode.so).

`Table` holds TrackEvents that share an argument schema as columns; `Table.encode`
turns them into `Trace.packet` records in one native call (the bulk path; single
packets come from traceformat.packets). Also `copy_patched`: appending flow ids to
allocation packets already written.
"""
from __future__ import annotations

import ctypes
import heapq
import itertools
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any
from pathlib import Path

import numpy as np
from ctf2perfetto.errors import MemqError
from ctf2perfetto.paths import native_library
from ctf2perfetto.traceformat import names as N
from ctf2perfetto.traceformat import packets as P

ARG_INT, ARG_UINT, ARG_POINTER, ARG_STRING = 0, 1, 2, 3


@lru_cache(maxsize=1)
def _encoder() -> ctypes.CDLL:
    lib = ctypes.CDLL(str(native_library("libmemqencode.so")))
    lib.memq_encode.restype = ctypes.c_int64
    lib.memq_encode.argtypes = [ctypes.c_int64] + [ctypes.c_void_p] * 11 + [ctypes.c_uint64, ctypes.c_int64] + \
        [ctypes.c_void_p] * 5 + [ctypes.c_uint32] + [ctypes.c_void_p] * 3
    lib.memq_encode_bound.restype = ctypes.c_int64
    lib.memq_encode_bound.argtypes = [ctypes.c_int64]
    return lib


def _ptr(array: np.ndarray | None, dtype) -> tuple[int | None, np.ndarray | None]:
    if array is None:
        return None, None
    array = np.ascontiguousarray(array, dtype=dtype)
    return array.ctypes.data, array


class SequenceClocks:
    """The last timestamp written on each sequence's incremental clock (write.stream.PacketStream.start_sequence
    starts it at 0), indexed by sequence id: what the next packet's timestamp is a delta from."""

    def __init__(self) -> None:
        self.last = np.zeros(64, np.int64)

    def last_for(self, max_seq: int) -> np.ndarray:
        """The array, grown to hold sequence `max_seq` (sequence ids are small: the memq and heap ones)."""
        if max_seq >= len(self.last):
            grown = np.zeros(max(max_seq + 1, 2 * len(self.last)), np.int64)
            grown[:len(self.last)] = self.last
            self.last = grown
        return self.last


@dataclass
class Table:
    """Track events sharing one argument schema, to be encoded in one native call."""

    ts: np.ndarray
    track: np.ndarray
    type: np.ndarray
    name_iid: np.ndarray | None = None
    cat_iid: np.ndarray | None = None
    flow_out: np.ndarray | None = None
    flow_in: np.ndarray | None = None
    counter: np.ndarray | None = None
    xc_track: np.ndarray | None = None
    xc_value: np.ndarray | None = None
    xc_has: np.ndarray | None = None  # bool: the row carries an extra counter value
    seq: np.ndarray | None = None  # sequence id per row (default: the memq sequence)
    # (name iid, ARG_* type, uint64 values, bool presence)
    args: list[tuple[int, int, np.ndarray, np.ndarray]] = field(default_factory=list)

    def take(self, order: np.ndarray) -> "Table":
        pick = (lambda a: None if a is None else a[order])
        return Table(self.ts[order], self.track[order], self.type[order], pick(self.name_iid), pick(self.cat_iid),
                      pick(self.flow_out), pick(self.flow_in), pick(self.counter), pick(self.xc_track),
                      pick(self.xc_value), pick(self.xc_has), pick(self.seq),
                      [(n, t, v[order], p[order]) for n, t, v, p in self.args])

    def bound_bytes(self) -> int:
        """Bytes that encoding this table may take, at most."""
        return max(1, len(self.ts) * _encoder().memq_encode_bound(len(self.args)))

    def encode(self, clocks: "SequenceClocks", buffer: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(bytes as a uint8 array, offset of each row's packet in it).

        Timestamps are written as deltas on each sequence's incremental clock, from and into `clocks`
        (the packets must be written in the order they are encoded). The bytes are written into
        `buffer` when it is large enough (`bound_bytes`), so that a caller encoding chunk after chunk
        reuses warm memory instead of faulting in a new one; they are then only valid until its next use."""
        lib = _encoder()
        n = len(self.ts)
        nargs = len(self.args)
        keep = []  # holds converted arrays alive during the call

        def p(array, dtype):
            address, converted = _ptr(array, dtype)
            keep.append(converted)
            return address

        values = (ctypes.c_void_p * max(1, nargs))(*[p(v, np.uint64) for _, _, v, _ in self.args])
        present = (ctypes.c_void_p * max(1, nargs))(*[p(np.ascontiguousarray(pr).view(np.uint8), np.uint8)
                                                       for _, _, _, pr in self.args])
        names = np.array([a[0] for a in self.args] or [0], np.uint32)
        types = np.array([a[1] for a in self.args] or [0], np.uint8)
        size = self.bound_bytes()
        out = buffer if buffer is not None and len(buffer) >= size else np.empty(size, np.uint8)
        offsets = np.empty(max(1, n), np.int64)
        written = lib.memq_encode(
            n, p(self.ts, np.int64), p(self.track, np.uint64), p(self.type, np.uint8), p(self.name_iid, np.uint32),
            p(self.cat_iid, np.uint32), p(self.flow_out, np.uint64), p(self.flow_in, np.uint64),
            p(self.counter, np.int64), p(self.xc_track, np.uint64), p(self.xc_value, np.int64),
            p(self.xc_has, np.uint8), N.FLOW_VARINT_LIMIT, nargs, p(names, np.uint32), p(types, np.uint8),
            values, present, p(self.seq, np.uint32), N.SEQ_MEMQ,
            clocks.last_for(N.SEQ_MEMQ if self.seq is None or n == 0 else int(self.seq.max())).ctypes.data,
            out.ctypes.data, offsets.ctypes.data)
        return out[:written], offsets[:n]


def arg_values(values: np.ndarray) -> np.ndarray:
    """Any integer column as uint64 bits (negative ints as two's complement, as int_value wants)."""
    return np.ascontiguousarray(values).astype(np.int64, copy=False).view(np.uint64) \
        if values.dtype.kind == "i" else values.astype(np.uint64, copy=False)


def _patch_packet(packet: bytes, flow_ids: list[int]) -> bytes:
    """Append flow ids (below FLOW_VARINT_LIMIT, as the encoder writes them) to the TrackEvent of a
    `Trace.packet` record whose last field is its track event; the lengths grow as they need."""
    _, pos = P.read_varint(packet, 1)  # after the record's tag: its length
    body_start = pos
    while pos < len(packet):
        tag_start = pos
        tag, pos = P.read_varint(packet, pos)
        if tag == P.FIELD_TRACK_EVENT << 3 | 2:  # the track event: the record's last field
            length, event_start = P.read_varint(packet, pos)
            assert event_start + length == len(packet), "allocation packet: track event not last"
            extra = b"".join(P.uint_field(P.FIELD_FLOW_IDS_VARINT, fid) for fid in flow_ids)
            body = packet[body_start:tag_start] + P.varint(tag) + P.varint(length + len(extra)) + \
                packet[event_start:] + extra
            return P.record(body)
        wire = tag & 7
        if wire == 0:
            _, pos = P.read_varint(packet, pos)
        elif wire == 2:
            length, pos = P.read_varint(packet, pos)
            pos += length
        else:
            pos += 8 if wire == 1 else 4
    raise AssertionError("allocation packet without a track event")


def _copy_range(src, dst, start: int, stop: int) -> None:
    """Copy bytes [start, stop) of file src to the end of dst, in the kernel where it can."""
    dst.flush()
    offset, remaining = start, stop - start
    while remaining > 0:
        try:
            done = os.copy_file_range(src.fileno(), dst.fileno(), remaining, offset)
        except OSError:
            done = 0
        if done <= 0:  # not supported here: plain reads and writes
            src.seek(offset)
            while remaining > 0:
                chunk = src.read(min(remaining, 1 << 22))
                if not chunk:
                    raise MemqError(f"{src.name}: temporary file shrank while writing the trace")
                dst.write(chunk)
                remaining -= len(chunk)
            dst.flush()
            return
        offset += done
        remaining -= done


class Patches:
    """Copy flow ids to append to allocation packets already written: (body offset, flow id) pairs.

    A steady copy loop makes millions, so memory stays bounded: pairs wait in numpy chunks (16 bytes
    each) until RUN_PAIRS of them, which are then sorted by offset and spilled to an unnamed temporary
    file; the final pass merges the sorted runs, reading each a block at a time.
    """

    RUN_PAIRS = 1 << 20  # 16 MiB of pairs in memory at most
    BLOCK_PAIRS = 1 << 16  # read back per run at a time

    _PAIR = np.dtype([("offset", "<i8"), ("flow", "<u8")])

    def __init__(self, spill_dir: Path | None = None) -> None:
        self.spill_dir = spill_dir
        self.offsets: list[np.ndarray] = []
        self.flows: list[np.ndarray] = []
        self.pending = 0
        self.count = 0
        self.runs: list[tuple[Any, int]] = []  # (file, pairs in it)

    def __len__(self) -> int:
        return self.count

    def add(self, offsets: np.ndarray, flows: np.ndarray) -> None:
        if len(offsets):
            self.offsets.append(np.asarray(offsets, np.int64))
            self.flows.append(np.asarray(flows, np.uint64))
            self.pending += len(offsets)
            self.count += len(offsets)
            if self.pending >= self.RUN_PAIRS:
                self._spill()

    def _sorted_pending(self) -> np.ndarray:
        pairs = np.empty(self.pending, self._PAIR)
        pairs["offset"] = np.concatenate(self.offsets) if self.offsets else []
        pairs["flow"] = np.concatenate(self.flows) if self.flows else []
        self.offsets, self.flows, self.pending = [], [], 0
        return pairs[np.argsort(pairs["offset"], kind="stable")]

    def _spill(self) -> None:
        run = self._sorted_pending()
        f = tempfile.TemporaryFile(dir=self.spill_dir, prefix=".memq-flows-")
        run.tofile(f)
        self.runs.append((f, len(run)))

    def _blocks(self, f, n: int) -> Iterator[np.ndarray]:
        f.seek(0)
        for _ in range(0, n, self.BLOCK_PAIRS):
            yield np.fromfile(f, self._PAIR, count=self.BLOCK_PAIRS)
        f.close()

    def by_offset(self) -> Iterator[tuple[int, list[int]]]:
        """(offset, flow ids in the order they were added) in increasing offset order."""
        sources: list[Iterator[np.ndarray]] = [self._blocks(f, n) for f, n in self.runs]
        self.runs = []
        if self.pending:
            sources.append(iter([self._sorted_pending()]))
        # Runs are in the order the pairs came, so (offset, run, position) keeps equal offsets in order.
        merged = heapq.merge(*[((int(o), r, int(fl)) for block in blocks for o, fl in zip(block["offset"].tolist(),
                                                                                          block["flow"].tolist()))
                               for r, blocks in enumerate(sources)])
        for offset, group in itertools.groupby(merged, key=lambda item: item[0]):
            yield offset, [flow for _, _, flow in group]


def copy_patched(path: Path, start: int, patches: Patches, out) -> None:
    """Copy `path` from `start` to `out`, appending the copy flow ids to the allocation packets they belong to."""
    with open(path, "rb") as src:
        pos = start
        for offset, flows in patches.by_offset():
            _copy_range(src, out, pos, offset)
            src.seek(offset)
            length, body = P.read_varint(src.read(11), 1)  # the record's tag, then its length (<= 10 bytes)
            src.seek(offset)
            packet = src.read(body + length)
            out.write(_patch_packet(packet, flows))
            pos = offset + body + length
        _copy_range(src, out, pos, os.fstat(src.fileno()).st_size)
