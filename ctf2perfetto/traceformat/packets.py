"""The one TracePacket builder: protobuf wire bytes written directly.

A protobuf object per event is several times slower than this, and the converter's bulk
packets come from columns through native/encode.c, which writes the same fields. Field
numbers are perfetto_trace.proto's (tests/test_traceformat.py parses what this builds with
the perfetto package's generated protos).

Building blocks: `varint`, `record` (a `Trace.packet` field), `annotation`, and the three
payloads a packet carries here: `track_event`, `descriptor`, `interned`/`defaults`;
`packet` wraps one of them with its sequence, timestamp and clock.
"""
from __future__ import annotations

import json
import struct
from decimal import Decimal
from functools import lru_cache
from typing import Any, Iterable, Mapping

# Field numbers, perfetto_trace.proto.
_P_TIMESTAMP, _P_SEQ, _P_FLAGS, _P_INTERNED = 8, 10, 13, 12
FIELD_TRACK_EVENT, FIELD_FLOW_IDS = 11, 47  # TracePacket.track_event, TrackEvent.flow_ids (fixed64)
FIELD_FLOW_IDS_VARINT = 36  # TrackEvent.flow_ids_old: the same ids as varints (small ones: names.FLOW_VARINT_LIMIT)
_P_DESCRIPTOR, _P_CLOCK, _P_DEFAULTS = 60, 58, 59
_E_TYPE, _E_TRACK, _E_NAME, _E_NAME_IID, _E_CATEGORY, _E_CATEGORY_IID = 9, 11, 23, 10, 22, 3
_E_ANNOTATION, _E_TERMINATING_FLOW, _E_COUNTER, _E_DOUBLE_COUNTER = 4, 48, 30, 44
_A_NAME, _A_NAME_IID, _A_BOOL, _A_UINT, _A_INT, _A_DOUBLE, _A_STRING, _A_POINTER, _A_DICT = \
    10, 1, 2, 3, 4, 5, 6, 7, 11
_D_UUID, _D_NAME, _D_PROCESS, _D_THREAD, _D_PARENT, _D_COUNTER, _D_CHILD_ORDERING, _D_RANK = \
    1, 2, 3, 4, 5, 8, 11, 12
_D_DESCRIPTION, _D_MERGE = 14, 15
_PROCESS_PID, _PROCESS_NAME, _THREAD_PID, _THREAD_TID, _THREAD_NAME = 1, 6, 1, 2, 5
_COUNTER_UNIT = 3
_P_CLOCK_SNAPSHOT, _SNAP_CLOCK, _CLOCK_ID, _CLOCK_TIMESTAMP, _CLOCK_INCREMENTAL = 6, 1, 1, 2, 3
_DEFAULTS_CLOCK, _DEFAULTS_EVENT, _EVENT_DEFAULTS_TRACK, _EVENT_DEFAULTS_EXTRA_COUNTERS = 58, 11, 11, 31
# InternedData field numbers (each entry: iid = 1, its text = 2, `name` or `str` alike on the wire).
INTERNED_KINDS = {"event_categories": 1, "event_names": 2, "debug_annotation_names": 3,
                  "debug_annotation_string_values": 29}

# Enum values used by writers.
TYPE_SLICE_BEGIN, TYPE_SLICE_END, TYPE_INSTANT, TYPE_COUNTER = 1, 2, 3, 4
SEQ_INCREMENTAL_STATE_CLEARED, SEQ_NEEDS_INCREMENTAL_STATE = 1, 2
UNIT_SIZE_BYTES = 3
MERGE_NONE = 2  # SIBLING_MERGE_BEHAVIOR_NONE: lane tracks of one name stay apart
ORDER_EXPLICIT = 3  # child_ordering EXPLICIT: children ordered by sibling_order_rank


class Pointer(int):
    """An integer written as a DebugAnnotation `pointer_value` (the UI shows it in hex)."""


def _encode_varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # negative int64 -> two's complement, as protobuf does
    out = b""
    while value >= 1 << 14:  # 14 bits (two continued bytes) at a time: timestamps are 9-byte varints
        out += _CONTINUED[value & 0x3FFF]
        value >>= 14
    return out + _SMALL[value]


_SMALL = [bytes([v]) if v < 0x80 else bytes([(v & 0x7F) | 0x80, v >> 7]) for v in range(1 << 14)]
_CONTINUED = [bytes([(v & 0x7F) | 0x80, (v >> 7) | 0x80]) for v in range(1 << 14)]


def varint(value: int) -> bytes:
    return _SMALL[value] if 0 <= value < 1 << 14 else _encode_varint(value)


def fixed_varint(value: int, width: int) -> bytes:
    """`value` as a varint of exactly `width` bytes (redundant continuation bytes are valid protobuf), for
    fields written before their value is known."""
    if value < 0 or value >> (7 * width):
        raise ValueError(f"{value} does not fit a {width}-byte varint")
    return bytes(((value >> (7 * i)) & 0x7F) | (0x80 if i < width - 1 else 0) for i in range(width))


def read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    """(value, position after it)."""
    value = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, pos


def uint_field(number: int, value: int) -> bytes:
    return varint(number << 3) + varint(value)


def fixed64_field(number: int, value: int) -> bytes:
    return varint(number << 3 | 1) + struct.pack("<Q", value)


def bytes_field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (string, bytes, message)."""
    return varint(number << 3 | 2) + varint(len(payload)) + payload


@lru_cache(maxsize=8192)
def _text_field(number: int, text: str) -> bytes:
    return bytes_field(number, text.encode())


def record(packet: bytes) -> bytes:
    """One `Trace.packet` record: what a trace file is a concatenation of."""
    return bytes_field(1, packet)


# -- TrackEvent ------------------------------------------------------------------------------------------
def annotation(key: str | int, value: Any) -> bytes:
    """A TrackEvent debug annotation field (`key` a name, or an interned name's iid): bools, ints (uint
    beyond int64), floats, strings, `Pointer`s, dicts (nested entries); anything else (Kineto's lists) as
    compact JSON."""
    body = _annotation_body(key, value)
    return _TAG_ANNOTATION + varint(len(body)) + body


_TAG_ANNOTATION = varint(_E_ANNOTATION << 3 | 2)
_TAG_INT, _TAG_UINT, _TAG_DOUBLE = varint(_A_INT << 3), varint(_A_UINT << 3), varint(_A_DOUBLE << 3 | 1)


@lru_cache(maxsize=8192)
def _annotation_name(key: str | int) -> bytes:
    return uint_field(_A_NAME_IID, key) if isinstance(key, int) else _text_field(_A_NAME, key)


def _annotation_body(key: str | int, value: Any) -> bytes:
    """A DebugAnnotation message."""
    name = _annotation_name(key)
    kind = type(value)
    if kind is int and -(1 << 63) <= value < (1 << 63):  # the common case first
        return name + _TAG_INT + varint(value)
    if kind is str:
        return name + _text_field(_A_STRING, value)
    if kind is bool:
        return name + uint_field(_A_BOOL, int(value))
    if isinstance(value, Pointer):
        return name + uint_field(_A_POINTER, value)
    if isinstance(value, int) and -(1 << 63) <= value < (1 << 64):
        return name + (_TAG_UINT if value >= 1 << 63 else _TAG_INT) + varint(value)
    if isinstance(value, (Decimal, float)):
        return name + _TAG_DOUBLE + struct.pack("<d", float(value))
    if isinstance(value, Mapping):
        return name + b"".join(bytes_field(_A_DICT, _annotation_body(str(k), v))
                               for k, v in value.items() if v is not None)
    return name + bytes_field(_A_STRING, json.dumps(value, default=str, separators=(",", ":")).encode())


_TYPES = {t: varint(_E_TYPE << 3) + varint(t) for t in (TYPE_SLICE_BEGIN, TYPE_SLICE_END, TYPE_INSTANT,
                                                          TYPE_COUNTER)}
_TAG_TRACK, _TAG_FLOW, _TAG_TERMINATING = varint(_E_TRACK << 3), varint(FIELD_FLOW_IDS << 3 | 1), \
    varint(_E_TERMINATING_FLOW << 3 | 1)


@lru_cache(maxsize=4096)  # a trace has few tracks and many events on each
def _track_field(track: int) -> bytes:
    return _TAG_TRACK + varint(track)


def track_event(type_: int, track: int | None = None, *, name: str | int | None = None,
                category: str | int | None = None, args: Mapping[str | int, Any] | None = None,
                flows: Iterable[int] = (), terminating: Iterable[int] = (), counter: int | float | None = None
                ) -> bytes:
    """A TrackEvent payload. `name` / `category` as text, or as interned iids (ints)."""
    body = [_TYPES.get(type_) or uint_field(_E_TYPE, type_)]
    if track is not None:
        body.append(_track_field(track))
    if name is not None:
        body.append(uint_field(_E_NAME_IID, name) if isinstance(name, int) else _text_field(_E_NAME, name))
    if category is not None:
        body.append(uint_field(_E_CATEGORY_IID, category) if isinstance(category, int)
                    else _text_field(_E_CATEGORY, category))
    if args:
        body += [annotation(key, value) for key, value in args.items() if value is not None]
    body += [_TAG_FLOW + struct.pack("<Q", f) for f in flows]
    body += [_TAG_TERMINATING + struct.pack("<Q", f) for f in terminating]
    if isinstance(counter, float):
        body.append(varint(_E_DOUBLE_COUNTER << 3 | 1) + struct.pack("<d", counter))
    elif counter is not None:
        body.append(uint_field(_E_COUNTER, counter))
    return b"".join(body)


# -- structural payloads --------------------------------------------------------------------------------
def descriptor(uuid: int, name: str | None = None, *, parent: int | None = None, description: str | None = None,
               pid: int | None = None, process_name: str | None = None, tid: int | None = None,
               thread_name: str | None = None, counter_unit: int | None = None, merge: int | None = None,
               child_ordering: int | None = None, rank: int | None = None) -> bytes:
    """A TrackDescriptor payload: a plain track, or with `pid` a process track, with `pid` and `tid` a
    thread track, with `counter_unit` a counter track."""
    body = [uint_field(_D_UUID, uuid)]
    if name is not None:
        body.append(_text_field(_D_NAME, name))
    if tid is not None:
        thread = uint_field(_THREAD_PID, pid or 0) + uint_field(_THREAD_TID, tid)
        body.append(bytes_field(_D_THREAD, thread + (_text_field(_THREAD_NAME, thread_name) if thread_name else b"")))
    elif pid is not None:
        process = uint_field(_PROCESS_PID, pid) + (_text_field(_PROCESS_NAME, process_name) if process_name else b"")
        body.append(bytes_field(_D_PROCESS, process))
    body.append(_given(uint_field, ((_D_PARENT, parent), (_D_CHILD_ORDERING, child_ordering), (_D_RANK, rank),
                                    (_D_MERGE, merge))))
    if counter_unit is not None:
        body.append(bytes_field(_D_COUNTER, uint_field(_COUNTER_UNIT, counter_unit) if counter_unit else b""))
    if description is not None:
        body.append(_text_field(_D_DESCRIPTION, description))
    return b"".join(body)


def _given(encode, fields: Iterable[tuple[int, Any]]) -> bytes:
    """The (number, value) fields whose value is given (not None), encoded."""
    return b"".join(encode(number, value) for number, value in fields if value is not None)


def interned(entries: Iterable[tuple[str, int, str]]) -> bytes:
    """An InternedData payload from (kind, iid, text) entries, kind one of INTERNED_KINDS."""
    out = []
    for kind, iid, text in entries:
        out.append(bytes_field(INTERNED_KINDS[kind], uint_field(1, iid) + _text_field(2, text)))
    return b"".join(out)


def defaults(clock: int, track: int | None = None, extra_counter_tracks: Iterable[int] = ()) -> bytes:
    """A TracePacketDefaults payload: the sequence's clock, default track and extra counter tracks."""
    event = b"".join([uint_field(_EVENT_DEFAULTS_TRACK, track)] if track is not None else []) + \
        b"".join(uint_field(_EVENT_DEFAULTS_EXTRA_COUNTERS, t) for t in extra_counter_tracks)
    return uint_field(_DEFAULTS_CLOCK, clock) + (bytes_field(_DEFAULTS_EVENT, event) if event else b"")


def packet(seq: int, *, ts: int | None = None, clock: int | None = None, flags: int = 0,
           event: bytes | None = None, descriptor: bytes | None = None, interned: bytes | None = None,
           defaults: bytes | None = None) -> bytes:
    """A TracePacket payload on sequence `seq` carrying the given payloads (wrap with `record` for a file)."""
    head = (_TAG_TIMESTAMP + varint(ts) if ts is not None else b"") + _sequence_and_clock(seq, clock)
    if flags:
        head += uint_field(_P_FLAGS, flags)
    if defaults is None and interned is None and descriptor is None:  # an event: the bulk of the calls
        return head + (_TAG_EVENT + varint(len(event)) + event if event is not None else b"")
    return head + _given(bytes_field, ((_P_DEFAULTS, defaults), (_P_INTERNED, interned),
                                       (_P_DESCRIPTOR, descriptor), (FIELD_TRACK_EVENT, event)))


_TAG_TIMESTAMP, _TAG_EVENT = varint(_P_TIMESTAMP << 3), varint(FIELD_TRACK_EVENT << 3 | 2)


@lru_cache(maxsize=256)
def _sequence_and_clock(seq: int, clock: int | None) -> bytes:
    return uint_field(_P_SEQ, seq) + (uint_field(_P_CLOCK, clock) if clock is not None else b"")


def incremental_clock(seq: int, clock: int, base: int) -> bytes:
    """A ClockSnapshot payload on sequence `seq` declaring the sequence-scoped `clock` incremental and equal to
    the `base` clock (both read 0), so that each packet's timestamp on it is a delta from the previous one."""
    entry = lambda clock_id, incremental: bytes_field(_SNAP_CLOCK, uint_field(_CLOCK_ID, clock_id) + uint_field(
        _CLOCK_TIMESTAMP, 0) + (uint_field(_CLOCK_INCREMENTAL, 1) if incremental else b""))  # noqa: E731
    return uint_field(_P_SEQ, seq) + bytes_field(_P_CLOCK_SNAPSHOT, entry(clock, True) + entry(base, False))


def sequence_start(seq: int, clock: int | None = None, *, track: int | None = None,
                   extra_counter_tracks: Iterable[int] = (), interned_entries: Iterable[tuple[str, int, str]] = ()
                   ) -> bytes:
    """The first packet of a sequence: incremental state cleared, default clock (and track), interned names."""
    entries = list(interned_entries)
    flags = SEQ_INCREMENTAL_STATE_CLEARED | (SEQ_NEEDS_INCREMENTAL_STATE if clock is not None or entries else 0)
    return packet(seq, flags=flags,
                  defaults=None if clock is None else defaults(clock, track, extra_counter_tracks),
                  interned=interned(entries) if entries else None)
