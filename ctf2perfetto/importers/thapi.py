"""THAPI (`iprof`) CTF traces -> memq events.

THAPI's tracepoints are generated from the API headers: every function F of a backend is an event
`<provider>:F_entry` with every parameter by its C name (pointers as hex integers) and `<provider>:F_exit` with
the result (`hipResult`, `cuResult`, `cudaResult`) and the out-parameters as `<name>_val` (`hipMalloc_exit.ptr_val`,
`cuMemAlloc_v2_exit.dptr_val`). Entry and exit are paired per (vpid, vtid), as THAPI's own interval plugin does.

Read (providers lttng_ust_hip, lttng_ust_cuda, lttng_ust_cudart):
* allocations: the HIP and CUDA driver allocators' size on entry and the pointer on exit (`ptr_val`, `dptr_val`,
  `pp_val`, `pHost_val`); cudart's `cudaMalloc` exit carries no address, so cudart allocations are not read (its
  copies are);
* frees: the pointer on entry;
* copies: `dst`/`src`/`sizeBytes`/`kind` (HIP, cudart: `count`), the CUDA driver's `dstDevice`/`srcHost`/... with
  `ByteCount` (the direction from the function name);
* memsets: `dst`/`dstDevice`, `value`, `sizeBytes`/`N`.
A call is its entry to its exit; a failed call (result != 0) is kept with its result, as memq's own recordings.
What it cannot tell: device work times (THAPI's device profiling is a separate, optional stream, not read), host
heap blocks, and calls of other backends (OpenCL, Level Zero, OpenMP).
The CTF is read with the babeltrace2 Python bindings (python3-bt2).
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

from ctf2perfetto.errors import MemqError
from ctf2perfetto.events import EventKind, MemKind
from ctf2perfetto.importers.foreign import DIRECTIONS, DTOD, DTOH, HTOD, Imported, Rows, kind_of_name

PROVIDERS = ("lttng_ust_hip", "lttng_ust_cuda", "lttng_ust_cudart")
ALLOCS = {  # function -> (memory kind, size parameter, pointer out-parameter)
    "hipMalloc": (MemKind.DEVICE, "size", "ptr_val"), "hipExtMallocWithFlags": (MemKind.DEVICE, "sizeBytes", "ptr_val"),
    "hipMallocManaged": (MemKind.MANAGED, "size", "dev_ptr_val"), "hipHostMalloc": (MemKind.PINNED, "size", "ptr_val"),
    "hipMallocHost": (MemKind.PINNED, "size", "ptr_val"), "hipHostAlloc": (MemKind.PINNED, "size", "ptr_val"),
    "hipMallocAsync": (MemKind.DEVICE, "size", "dev_ptr_val"),
    "cuMemAlloc": (MemKind.DEVICE, "bytesize", "dptr_val"), "cuMemAlloc_v2": (MemKind.DEVICE, "bytesize", "dptr_val"),
    "cuMemAllocManaged": (MemKind.MANAGED, "bytesize", "dptr_val"),
    "cuMemAllocHost": (MemKind.PINNED, "bytesize", "pp_val"), "cuMemAllocHost_v2": (MemKind.PINNED, "bytesize", "pp_val"),
    "cuMemHostAlloc": (MemKind.PINNED, "bytesize", "pp_val"),
    "cuMemAllocAsync": (MemKind.DEVICE, "bytesize", "dptr_val"),
}
FREES = {"hipFree": ("ptr", MemKind.DEVICE), "hipFreeAsync": ("dev_ptr", MemKind.DEVICE),
         "hipHostFree": ("ptr", MemKind.PINNED), "hipFreeHost": ("ptr", MemKind.PINNED),
         "cuMemFree": ("dptr", MemKind.DEVICE), "cuMemFree_v2": ("dptr", MemKind.DEVICE),
         "cuMemFreeAsync": ("dptr", MemKind.DEVICE), "cuMemFreeHost": ("p", MemKind.PINNED),
         "cudaFree": ("devPtr", MemKind.DEVICE), "cudaFreeHost": ("ptr", MemKind.PINNED)}
_CU_COPY = re.compile(r"^cuMemcpy(HtoD|DtoH|DtoD|)(Async)?(_v2)?$")
_HIP_COPY = re.compile(r"^(hip|cuda)Memcpy(Async|WithStream|HtoD|DtoH|DtoD|HtoDAsync|DtoHAsync|DtoDAsync)?$")
_SET = re.compile(r"^(hipMemset|hipMemsetAsync|hipMemsetD8|hipMemsetD8Async|hipMemsetD32|hipMemsetD32Async|"
                  r"cuMemsetD8|cuMemsetD8_v2|cuMemsetD8Async|cuMemsetD32|cuMemsetD32_v2|cuMemsetD32Async|"
                  r"cudaMemset|cudaMemsetAsync)$")
_FIXED = {"HtoD": HTOD, "DtoH": DTOH, "DtoD": DTOD}


def _bt2():
    try:
        import bt2  # noqa: F401
    except ImportError:
        sys.path.append("/usr/lib/python3/dist-packages")  # Debian's python3-bt2
        try:
            import bt2  # noqa: F401
        except ImportError:
            raise MemqError("reading a THAPI trace needs the babeltrace2 Python bindings (python3-bt2)") from None
    return sys.modules["bt2"]


def _value(field):
    try:
        return int(field)
    except (TypeError, ValueError):
        return None


def read(path: Path) -> Imported:
    path = Path(path)
    bt2 = _bt2()
    out = Imported("thapi", path, None)
    rows = Rows()
    open_calls: dict[tuple[int, int], list[tuple[str, str, int, dict]]] = {}
    unpaired = other = 0
    try:
        iterator = bt2.TraceCollectionMessageIterator(str(path))
        for msg in iterator:
            if type(msg) is not bt2._EventMessageConst:
                continue
            event = msg.event
            provider, _, name = event.name.partition(":")
            if provider not in PROVIDERS:
                other += 1
                continue
            ctx = event.common_context_field
            pid = _value(ctx["vpid"]) if ctx is not None and "vpid" in ctx else 0
            tid = _value(ctx["vtid"]) if ctx is not None and "vtid" in ctx else pid
            ts = msg.default_clock_snapshot.ns_from_origin
            fields = {k: _value(v) for k, v in event.payload_field.items()} if event.payload_field is not None else {}
            stack = open_calls.setdefault((pid, tid), [])
            if name.endswith("_entry"):
                stack.append((provider, name[:-len("_entry")], ts, fields))
            elif name.endswith("_exit"):
                func = name[:-len("_exit")]
                if not stack or stack[-1][1] != func:
                    unpaired += 1
                    continue
                _, _, begin, entry = stack.pop()
                _call(rows, out, func, pid, tid, begin, ts, entry, fields)
    except bt2._Error as exc:
        first = str(exc).strip().splitlines()
        raise MemqError(f"{path}: babeltrace2 cannot read this THAPI trace: {first[-1] if first else exc}") from None
    unpaired += sum(len(s) for s in open_calls.values())
    if unpaired:
        out.warnings.append(f"{path}: {unpaired:,} entry or exit events without their pair (calls under way when "
                            "the trace ended, or lost events): left out")
    if other:
        out.info.skipped["events of other THAPI backends"] = other
    out.batch = rows.batch()
    return out


def _call(rows: Rows, out: Imported, func: str, pid: int, tid: int, begin: int, end: int, entry: dict,
          exit_: dict) -> None:
    result = next((v for k, v in exit_.items() if k.endswith("Result")), 0) or 0
    if func in ALLOCS:
        mem, size_name, out_name = ALLOCS[func]
        ptr = exit_.get(out_name)
        if ptr is None:
            return
        rows.add(EventKind.GPU_ALLOC, begin, end, pid, tid, func, ptr=ptr if result == 0 else 0,
                 size=entry.get(size_name) or 0, mem=int(mem), result=result)
        return
    if func in FREES:
        name, mem = FREES[func]
        if entry.get(name):
            rows.add(EventKind.GPU_FREE, begin, end, pid, tid, func, ptr=entry[name], mem=int(mem), result=result)
        return
    if _SET.match(func):
        dst = entry.get("dst", entry.get("dstDevice", entry.get("devPtr")))
        size = entry.get("sizeBytes", entry.get("N", entry.get("count")))
        if dst is not None and size is not None:
            value = entry.get("value", entry.get("uc", entry.get("ui", 0))) or 0
            rows.add(EventKind.GPU_SET, begin, end, pid, tid, func, ptr=dst, size=size, aux=value,
                     stream=entry.get("stream", entry.get("hStream", 0)) or 0, result=result)
        return
    cu = _CU_COPY.match(func)
    if cu:
        dst = next((entry[k] for k in ("dstDevice", "dstHost", "dst") if k in entry), None)
        src = next((entry[k] for k in ("srcDevice", "srcHost", "src") if k in entry), None)
        size = entry.get("ByteCount")
        kind = _FIXED.get(cu.group(1), 4)
    else:
        hip = _HIP_COPY.match(func)
        if not hip:
            return
        dst, src = entry.get("dst"), entry.get("src")
        size = entry.get("sizeBytes", entry.get("count"))
        suffix = (hip.group(2) or "").replace("Async", "")
        kind = _FIXED.get(suffix)
        if kind is None:
            kind = entry.get("kind")
            kind = kind if kind in DIRECTIONS else 4
    if dst is None or src is None or size is None:
        return
    rows.add(EventKind.GPU_COPY, begin, end, pid, tid, func, copy_kind=kind, ptr=dst, src=src, size=size,
             stream=entry.get("stream", entry.get("hStream", 0)) or 0, result=result)
    if result == 0:
        out.count_copy(DIRECTIONS[kind], size, end - begin)
