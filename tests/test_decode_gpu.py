"""Decoding the `memq` GPU events (schema: docs/EVENTS.md), checked against bt2.

A tiny tracepoint provider written here from the schema (not preload/'s) emits every
event class with chosen values; a real LTTng session records it with the vpid, vtid,
ip and procname contexts; the decoder's rows are compared with a bt2 reading that
applies the schema's "Mapping to ctf2perfetto.events columns" by field name.
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from ctf2perfetto.ctf.decode import decode
from ctf2perfetto.events import COLUMNS, EventKind, MemKind

TP_HEADER = r"""
#undef LTTNG_UST_TRACEPOINT_PROVIDER
#define LTTNG_UST_TRACEPOINT_PROVIDER memq
#undef LTTNG_UST_TRACEPOINT_INCLUDE
#define LTTNG_UST_TRACEPOINT_INCLUDE "./tp.h"
#if !defined(TP_H) || defined(LTTNG_UST_TRACEPOINT_HEADER_MULTI_READ)
#define TP_H
#include <lttng/tracepoint.h>
#include <stdint.h>
#ifndef REC_DEFINED
#define REC_DEFINED
struct rec { uint16_t api; uint64_t ptr, src, size; uint8_t mem; int32_t kind, device, src_device, value, target;
             uint64_t stream, flags, width, height, dpitch, spitch; int32_t result; uint64_t begin_ns; };
#endif

LTTNG_UST_TRACEPOINT_ENUM(memq, api, LTTNG_UST_TP_ENUM_VALUES(
    lttng_ust_field_enum_value("hipMalloc", 1) lttng_ust_field_enum_value("hipFree", 2)
    lttng_ust_field_enum_value("hipMallocPitch", 3) lttng_ust_field_enum_value("hipHostRegister", 4)
    lttng_ust_field_enum_value("hipHostUnregister", 5) lttng_ust_field_enum_value("hipMemcpyAsync", 6)
    lttng_ust_field_enum_value("hipMemcpy2D", 7) lttng_ust_field_enum_value("hipMemcpyPeer", 8)
    lttng_ust_field_enum_value("hipMemsetAsync", 9) lttng_ust_field_enum_value("hipMemPrefetchAsync", 10)
    lttng_ust_field_enum_value("hipMemAdvise", 11) lttng_ust_field_enum_value("hipStreamSynchronize", 12)
    lttng_ust_field_enum_value("hipSetDevice", 13) lttng_ust_field_enum_value("cudaMallocManaged", 40)))
LTTNG_UST_TRACEPOINT_ENUM(memq, mem_kind, LTTNG_UST_TP_ENUM_VALUES(
    lttng_ust_field_enum_value("host", 1) lttng_ust_field_enum_value("pinned", 2)
    lttng_ust_field_enum_value("registered", 3) lttng_ust_field_enum_value("device", 4)
    lttng_ust_field_enum_value("managed", 5)))
LTTNG_UST_TRACEPOINT_ENUM(memq, memcpy_kind, LTTNG_UST_TP_ENUM_VALUES(
    lttng_ust_field_enum_value("HostToHost", 0) lttng_ust_field_enum_value("HostToDevice", 1)
    lttng_ust_field_enum_value("DeviceToHost", 2) lttng_ust_field_enum_value("DeviceToDevice", 3)
    lttng_ust_field_enum_value("Default", 4) lttng_ust_field_enum_value("DeviceToDeviceNoCU", 1024)))
LTTNG_UST_TRACEPOINT_ENUM(memq, runtime, LTTNG_UST_TP_ENUM_VALUES(
    lttng_ust_field_enum_value("hip", 1) lttng_ust_field_enum_value("cuda", 2)))

#define API lttng_ust_field_enum(memq, api, uint16_t, api, r->api)
#define TAIL lttng_ust_field_integer(int32_t, result, r->result) \
             lttng_ust_field_integer(uint64_t, begin_ns, r->begin_ns)
LTTNG_UST_TRACEPOINT_EVENT_CLASS(memq, alloc_class, LTTNG_UST_TP_ARGS(const struct rec *, r),
  LTTNG_UST_TP_FIELDS(API lttng_ust_field_integer_hex(uint64_t, ptr, r->ptr)
    lttng_ust_field_integer(uint64_t, size, r->size) lttng_ust_field_enum(memq, mem_kind, uint8_t, mem_kind, r->mem)
    lttng_ust_field_integer(int32_t, device, r->device) lttng_ust_field_integer_hex(uint64_t, stream, r->stream)
    lttng_ust_field_integer(uint64_t, flags, r->flags) lttng_ust_field_integer(uint64_t, width, r->width)
    lttng_ust_field_integer(uint64_t, height, r->height) TAIL))
LTTNG_UST_TRACEPOINT_EVENT_INSTANCE(memq, alloc_class, memq, alloc, LTTNG_UST_TP_ARGS(const struct rec *, r))
LTTNG_UST_TRACEPOINT_EVENT_INSTANCE(memq, alloc_class, memq, register, LTTNG_UST_TP_ARGS(const struct rec *, r))
LTTNG_UST_TRACEPOINT_EVENT_CLASS(memq, free_class, LTTNG_UST_TP_ARGS(const struct rec *, r),
  LTTNG_UST_TP_FIELDS(API lttng_ust_field_integer_hex(uint64_t, ptr, r->ptr)
    lttng_ust_field_integer(uint64_t, size, r->size) lttng_ust_field_enum(memq, mem_kind, uint8_t, mem_kind, r->mem)
    lttng_ust_field_integer(int32_t, device, r->device) lttng_ust_field_integer_hex(uint64_t, stream, r->stream) TAIL))
LTTNG_UST_TRACEPOINT_EVENT_INSTANCE(memq, free_class, memq, free, LTTNG_UST_TP_ARGS(const struct rec *, r))
LTTNG_UST_TRACEPOINT_EVENT_INSTANCE(memq, free_class, memq, unregister, LTTNG_UST_TP_ARGS(const struct rec *, r))
LTTNG_UST_TRACEPOINT_EVENT(memq, copy, LTTNG_UST_TP_ARGS(const struct rec *, r),
  LTTNG_UST_TP_FIELDS(API lttng_ust_field_integer_hex(uint64_t, dst, r->ptr)
    lttng_ust_field_integer_hex(uint64_t, src, r->src) lttng_ust_field_integer(uint64_t, bytes, r->size)
    lttng_ust_field_enum(memq, memcpy_kind, int32_t, kind, r->kind)
    lttng_ust_field_integer_hex(uint64_t, stream, r->stream) lttng_ust_field_integer(int32_t, device, r->device)
    lttng_ust_field_integer(int32_t, src_device, r->src_device) lttng_ust_field_integer(uint64_t, width, r->width)
    lttng_ust_field_integer(uint64_t, height, r->height) lttng_ust_field_integer(uint64_t, dpitch, r->dpitch)
    lttng_ust_field_integer(uint64_t, spitch, r->spitch) TAIL))
LTTNG_UST_TRACEPOINT_EVENT(memq, set, LTTNG_UST_TP_ARGS(const struct rec *, r),
  LTTNG_UST_TP_FIELDS(API lttng_ust_field_integer_hex(uint64_t, dst, r->ptr)
    lttng_ust_field_integer(int32_t, value, r->value) lttng_ust_field_integer(uint64_t, bytes, r->size)
    lttng_ust_field_integer_hex(uint64_t, stream, r->stream) lttng_ust_field_integer(int32_t, device, r->device) TAIL))
LTTNG_UST_TRACEPOINT_EVENT(memq, prefetch, LTTNG_UST_TP_ARGS(const struct rec *, r),
  LTTNG_UST_TP_FIELDS(API lttng_ust_field_integer_hex(uint64_t, ptr, r->ptr)
    lttng_ust_field_integer(uint64_t, bytes, r->size) lttng_ust_field_integer(int32_t, dst_device, r->target)
    lttng_ust_field_integer_hex(uint64_t, stream, r->stream) lttng_ust_field_integer(int32_t, device, r->device) TAIL))
LTTNG_UST_TRACEPOINT_EVENT(memq, advise, LTTNG_UST_TP_ARGS(const struct rec *, r),
  LTTNG_UST_TP_FIELDS(API lttng_ust_field_integer_hex(uint64_t, ptr, r->ptr)
    lttng_ust_field_integer(uint64_t, bytes, r->size) lttng_ust_field_integer(int32_t, advice, r->value)
    lttng_ust_field_integer(int32_t, target_device, r->target) lttng_ust_field_integer(int32_t, device, r->device) TAIL))
LTTNG_UST_TRACEPOINT_EVENT(memq, sync, LTTNG_UST_TP_ARGS(const struct rec *, r),
  LTTNG_UST_TP_FIELDS(API lttng_ust_field_integer_hex(uint64_t, stream, r->stream)
    lttng_ust_field_integer(int32_t, device, r->device) TAIL))
LTTNG_UST_TRACEPOINT_EVENT(memq, set_device, LTTNG_UST_TP_ARGS(const struct rec *, r),
  LTTNG_UST_TP_FIELDS(API lttng_ust_field_integer(int32_t, new_device, r->target)
    lttng_ust_field_integer(int32_t, device, r->device) TAIL))
LTTNG_UST_TRACEPOINT_EVENT(memq, clock, LTTNG_UST_TP_ARGS(const char *, where, uint64_t, rt, uint64_t, mono, uint64_t, boot),
  LTTNG_UST_TP_FIELDS(lttng_ust_field_string(where, where) lttng_ust_field_integer(uint64_t, realtime_ns, rt)
    lttng_ust_field_integer(uint64_t, monotonic_ns, mono) lttng_ust_field_integer(uint64_t, boottime_ns, boot)))
LTTNG_UST_TRACEPOINT_EVENT(memq, device, LTTNG_UST_TP_ARGS(int, runtime, int, device, const char *, name, int, integrated, int, unified),
  LTTNG_UST_TP_FIELDS(lttng_ust_field_enum(memq, runtime, uint8_t, runtime, runtime)
    lttng_ust_field_integer(int32_t, device, device) lttng_ust_field_string(name, name)
    lttng_ust_field_integer(int32_t, integrated, integrated) lttng_ust_field_integer(int32_t, unified_memory, unified)))
LTTNG_UST_TRACEPOINT_EVENT(memq, copy_done, LTTNG_UST_TP_ARGS(const struct rec *, r),
  LTTNG_UST_TP_FIELDS(API lttng_ust_field_integer(uint64_t, seq, r->flags)
    lttng_ust_field_integer_hex(uint64_t, stream, r->stream) lttng_ust_field_integer(int32_t, device, r->device)
    lttng_ust_field_integer_hex(uint64_t, dst_hash_after, r->src)))
LTTNG_UST_TRACEPOINT_EVENT(memq, from_the_future, LTTNG_UST_TP_ARGS(int, x),
  LTTNG_UST_TP_FIELDS(lttng_ust_field_integer(int, x, x)))
#endif
#include <lttng/tracepoint-event.h>
"""

PROGRAM = r"""
#define LTTNG_UST_TRACEPOINT_CREATE_PROBES
#define LTTNG_UST_TRACEPOINT_DEFINE
#include "tp.h"
#include <stdio.h>
#include <time.h>
#include <unistd.h>
static uint64_t now(clockid_t c) { struct timespec t; clock_gettime(c, &t); return t.tv_sec * 1000000000ull + t.tv_nsec; }
#define EMIT(ev, ...) do { struct rec r = {__VA_ARGS__}; r.begin_ns = now(CLOCK_MONOTONIC); \
                           lttng_ust_tracepoint(memq, ev, &r); } while (0)
int main(void) {
    lttng_ust_tracepoint(memq, clock, "start", now(CLOCK_REALTIME), now(CLOCK_MONOTONIC), now(CLOCK_BOOTTIME));
    lttng_ust_tracepoint(memq, device, 1, 0, "Fake MI300A \"APU\"", 1, 1);
    lttng_ust_tracepoint(memq, device, 2, 1, "Fake H100", 0, 0);
    EMIT(set_device, .api = 13, .target = 1, .device = 0);
    for (int i = 0; i < 3; i++)
        lttng_ust_tracepoint(memq, from_the_future, i);
    EMIT(sync, .api = 99, .stream = 0, .device = 1);
    EMIT(alloc, .api = 1, .ptr = 0x7f0000001000, .size = 1 << 20, .mem = 4, .device = 1);
    EMIT(alloc, .api = 3, .ptr = 0x7f0000200000, .size = 1024 * 64, .mem = 4, .device = 1, .width = 1000, .height = 64);
    EMIT(alloc, .api = 40, .ptr = 0x7e0000000000, .size = 4096, .mem = 5, .device = 1, .flags = 1);
    EMIT(alloc, .api = 1, .ptr = 0, .size = 1ull << 40, .mem = 4, .device = 1, .result = 2);
    EMIT(register, .api = 4, .ptr = 0x5500000000, .size = 8192, .mem = 3, .device = 1, .flags = 2);
    EMIT(copy, .api = 6, .ptr = 0x7f0000001000, .src = 0x5500000000, .size = 8192, .kind = 1, .stream = 0xabc0,
         .device = 1, .src_device = -1);
    EMIT(copy, .api = 7, .ptr = 0x7f0000200000, .src = 0x5500000000, .size = 1000 * 8, .kind = 1, .device = 1,
         .src_device = -1, .width = 1000, .height = 8, .dpitch = 1024, .spitch = 1000);
    EMIT(copy, .api = 8, .ptr = 0x7f0000001000, .src = 0x7f1000000000, .size = 4096, .kind = 1024, .device = 1,
         .src_device = 0);
    EMIT(set, .api = 9, .ptr = 0x7f0000001000, .value = -1, .size = 4096, .stream = 0xabc0, .device = 1);
    EMIT(prefetch, .api = 10, .ptr = 0x7e0000000000, .size = 4096, .target = -1, .stream = 0xabc0, .device = 1);
    EMIT(advise, .api = 11, .ptr = 0x7e0000000000, .size = 4096, .value = 3, .target = 1, .device = 1);
    EMIT(sync, .api = 12, .stream = 0xabc0, .device = 1, .result = 0);
    EMIT(copy_done, .api = 12, .flags = 7, .stream = 0xabc0, .device = 1, .src = 0xfedcba9876543210ull);
    EMIT(unregister, .api = 5, .ptr = 0x5500000000, .size = 8192, .mem = 3, .device = 1);
    EMIT(free, .api = 2, .ptr = 0x7f0000001000, .size = 1 << 20, .mem = 4, .device = 1);
    EMIT(free, .api = 2, .ptr = 0x1234, .size = 0, .mem = 0, .device = 1, .result = 1);
    lttng_ust_tracepoint(memq, clock, "end", now(CLOCK_REALTIME), now(CLOCK_MONOTONIC), now(CLOCK_BOOTTIME));
    printf("%d\n", (int)getpid());
    return 0;
}
"""

# Schema "Mapping to ctf2perfetto.events columns": event -> (kind, {column: payload member}); members a trace
# may lack (appended to an event later, or absent from an instant: its begin is its ts) are read as the default.
COMMON = {"device": "device", "result": "result", "begin": "begin_ns"}
CONTENT = {"seq": "seq", "content": "content", "content_mode": "content_mode", "src_hash": "src_hash",
           "dst_hash_before": "dst_hash_before", "dst_hash_after": "dst_hash_after"}
MAPPING = {
    "memq:alloc": (EventKind.GPU_ALLOC, {"ptr": "ptr", "size": "size", "stream": "stream", "flags": "flags",
                                         "aux": "width", "aux2": "height"}),
    "memq:register": (EventKind.GPU_REGISTER, {"ptr": "ptr", "size": "size", "stream": "stream",
                                               "flags": "flags", "aux": "width", "aux2": "height"}),
    "memq:free": (EventKind.GPU_FREE, {"ptr": "ptr", "size": "size", "stream": "stream"}),
    "memq:unregister": (EventKind.GPU_UNREGISTER, {"ptr": "ptr", "size": "size", "stream": "stream"}),
    "memq:copy": (EventKind.GPU_COPY, {"ptr": "dst", "src": "src", "size": "bytes", "copy_kind": "kind",
                                       "stream": "stream", "aux2": "height", "dpitch": "dpitch",
                                       "spitch": "spitch", **CONTENT}),
    "memq:copy_done": (EventKind.GPU_COPY_DONE, {"seq": "seq", "stream": "stream",
                                                 "dst_hash_after": "dst_hash_after"}),
    "memq:set": (EventKind.GPU_SET, {"ptr": "dst", "size": "bytes", "aux": "value", "stream": "stream"}),
    "memq:prefetch": (EventKind.GPU_PREFETCH, {"ptr": "ptr", "size": "bytes", "aux": "dst_device",
                                               "stream": "stream"}),
    "memq:advise": (EventKind.GPU_ADVISE, {"ptr": "ptr", "size": "bytes", "aux": "advice",
                                           "aux2": "target_device"}),
    "memq:sync": (EventKind.GPU_SYNC, {"stream": "stream"}),
    "memq:set_device": (EventKind.GPU_SET_DEVICE, {"aux": "new_device"}),
}
UNSIGNED = {"aux", "aux2", "ptr", "src", "size", "stream", "flags", "dpitch", "spitch", "seq", "src_hash",
            "dst_hash_before", "dst_hash_after"}


def lttng(*args: str) -> None:
    subprocess.run(["lttng", *args], check=True, stdout=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def gpu_trace(tmp_path_factory) -> tuple[Path, int]:
    """A live recording of the test provider; returns (trace dir, pid of the program)."""
    work = tmp_path_factory.mktemp("gpu")
    (work / "tp.h").write_text(TP_HEADER)
    (work / "prog.c").write_text(PROGRAM)
    subprocess.run(["cc", "-O1", "-I", str(work), "-o", str(work / "prog"), str(work / "prog.c"),
                    "-llttng-ust", "-ldl"], check=True, cwd=work, capture_output=True)
    session = f"memq-test-decode-gpu-{os.getpid()}"
    out = work / "trace"
    lttng("create", session, f"--output={out}")
    try:
        lttng("enable-event", "-u", "--session", session, "memq:*")
        for ctx in ("vpid", "vtid", "ip", "procname"):
            lttng("add-context", "-u", "--session", session, "-t", ctx)
        lttng("start", session)
        proc = subprocess.run([str(work / "prog")], check=True, capture_output=True, text=True)
        lttng("stop", session)
    finally:
        lttng("destroy", session)
    return out, int(proc.stdout)


def label_of(field) -> str | None:
    """The enumeration label of a bt2 enum field's value, from its class (None: no label)."""
    value = int(field)
    for label, mapping in field.cls.items():
        if any(r.lower <= value <= r.upper for r in mapping.ranges):
            return label
    return None


def expected_rows(bt2, path: Path) -> tuple[list[dict], list[dict], list[dict], dict]:
    rows, clocks, devices, threads = [], [], [], {}
    for msg in bt2.TraceCollectionMessageIterator(str(path)):
        if type(msg) is not bt2._EventMessageConst:
            continue
        ev = msg.event
        p = ev.payload_field
        cc = ev.common_context_field
        pid, tid = int(cc["vpid"]), int(cc["vtid"])
        if "procname" in cc:
            threads[(pid, tid)] = str(cc["procname"])
        if ev.name == "memq:clock":
            clocks.append({"pid": pid, "where": str(p["where"]), "realtime": int(p["realtime_ns"]),
                           "monotonic": int(p["monotonic_ns"]), "boottime": int(p["boottime_ns"])})
            continue
        if ev.name == "memq:device":
            devices.append({"pid": pid, "runtime": label_of(p["runtime"]), "device": int(p["device"]),
                            "name": str(p["name"]), "integrated": bool(int(p["integrated"])),
                            "unified_memory": bool(int(p["unified_memory"])),
                            # appended fields: "" where the trace predates them (this test's provider)
                            "uuid": str(p["uuid"]) if "uuid" in p else "",
                            "pci_bus_id": str(p["pci_bus_id"]) if "pci_bus_id" in p else ""})
            continue
        if ev.name not in MAPPING:
            continue
        kind, members = MAPPING[ev.name]
        row = {"ts": msg.default_clock_snapshot.value, "pid": pid, "tid": tid, "ip": int(cc["ip"]),
               "kind": kind, "api": label_of(p["api"]) or f"api {int(p['api'])}"}
        row["begin"] = row["ts"]
        for column, name in {**COMMON, **members}.items():
            if name not in p:
                continue
            value = int(p[name])
            row[column] = value % 2**64 if column in UNSIGNED else value
        if "mem_kind" in p:
            label = label_of(p["mem_kind"])
            row["mem"] = MemKind[label.upper()] if label else MemKind.UNKNOWN
        if ev.name == "memq:copy":
            peer = int(p["src_device"]) >= 0
            row["aux"] = int(p["src_device"]) if peer else int(p["width"])
        rows.append(row)
    return rows, clocks, devices, threads


def gpu_rows(path: Path):
    """The decoder's GPU rows (libc rows are test_decode.py's business), api names and info."""
    with decode(path) as dec:
        batches = list(dec)
    cols = {name: np.concatenate([b[name] for b in batches]) for name in COLUMNS}
    gpu = (cols["kind"] >= EventKind.GPU_ALLOC) & (cols["kind"] < EventKind.LOST)
    return {name: col[gpu] for name, col in cols.items()}, dec.api_names, dec.info


def assert_rows_equal(cols: dict[str, np.ndarray], api_names: list[str], rows: list[dict]) -> None:
    assert len(cols["ts"]) == len(rows)
    for i, row in enumerate(rows):
        for column in COLUMNS:
            default = -1 if column == "copy_kind" else 0
            got = cols[column][i]
            if column == "api":
                got = api_names[got]
            assert got == row.get(column, default), (i, column, row)


def test_gpu_events_match_the_schema_mapping(gpu_trace, bt2):
    path, pid = gpu_trace
    cols, api_names, info = gpu_rows(path)
    rows, clocks, devices, threads = expected_rows(bt2, path)
    assert len(rows) == 18 and "api 99" in api_names
    assert set(cols["pid"].tolist()) == {pid} and {p for p, _ in threads} == {pid}  # this run's program
    done = rows[-4]
    assert (done["kind"], done["seq"], done["dst_hash_after"]) == (EventKind.GPU_COPY_DONE, 7, 0xfedcba9876543210)
    assert_rows_equal(cols, api_names, rows)
    # Every call lasts from begin_ns to the event: both on the monotonic clock.
    assert np.all(cols["begin"] <= cols["ts"]) and np.all(cols["ts"] - cols["begin"] < 10**9)
    assert info.clock_readings == clocks and [c["where"] for c in clocks] == ["start", "end"]
    assert info.devices == devices and devices[0]["name"] == 'Fake MI300A "APU"'
    assert info.threads == threads and set(threads.values()) == {"prog"}
    assert info.skipped == {"memq:from_the_future": 3} and info.lost_events == 0


@pytest.mark.parametrize("runtime", ["hip", "cuda"])
def test_fake_runtime_recordings_match_bt2(runtime, request, bt2):
    """`memq record` of the fake HIP / CUDA workloads (preload/'s provider), against bt2."""
    recording = request.getfixturevalue(f"fake_{runtime}_trace")
    cols, api_names, info = gpu_rows(recording.dir)
    rows, clocks, devices, _threads = expected_rows(bt2, recording.dir)
    assert_rows_equal(cols, api_names, rows)
    # And against what the workload logged, call by call (copy-done rows are not calls).
    calls = recording.calls
    call = cols["kind"] != EventKind.GPU_COPY_DONE
    assert (~call).any() and (cols["content"][cols["kind"] == EventKind.GPU_COPY] != 0).any()
    assert [(api_names[a], int(t), int(d), int(r)) for a, t, d, r in
            zip(cols["api"][call], cols["tid"][call], cols["device"][call], cols["result"][call])] == \
        [(c["api"], c["tid"], c["device"], c["result"]) for c in calls]
    assert set(np.unique(cols["pid"]).tolist()) == {recording.pid}
    assert [c for c in info.clock_readings if "pid" in c and c in clocks] == clocks
    assert info.devices == devices and all(d["runtime"] == runtime for d in devices)
    assert info.record is not None and info.lost_events == 0 and info.skipped == {}
