"""Checks of scripts/gpu-reach.sh's archive: the ways a real job reaches CUDA without the dynamic linker.

    python3 -m tools.gpu_check gpu-reach.tar.gz

Each check compares what memq recorded with what the program itself did or reported:
  static runtime    tests/gpu/cuda_all.cu built with nvcc's default static runtime: every logged runtime call
                    is the driver call it became (cuGetProcAddress hands out memq's wrappers), in order, with
                    the same pointers, bytes and outcome; calls with no driver call are named, not counted
  expandable        PyTorch with expandable_segments:True: the caching allocator's cuMemMap mappings add up
                    to memory_stats' reserved bytes, and the loop's copies are all seen
  ctypes            the runtime loaded by ctypes (RTLD_LOCAL): every call seen exactly
  jax               XLA (static runtime, driver entry points): every upload and read-back seen
  lost events       0 in every trace
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path

from ctf2perfetto.events import EventKind, MemKind
from tools.gpu_archive import Check, TraceRows, _copy_directions, _json, read_log, read_trace

# Logged runtime calls that make no driver call: cudaSetDevice only sets the thread's context, and a copy
# with an invalid direction (cudaErrorInvalidMemcpyDirection = 21) is refused by the runtime itself.
NO_DRIVER_CALL = ("set_device",)
RUNTIME_ONLY_ERRORS = (21,)
# Log event -> (EventKind, log field of the address, log field of the byte count).
LOG_SHAPES = {"alloc": (EventKind.GPU_ALLOC, "ptr", "size"), "register": (EventKind.GPU_REGISTER, "ptr", "size"),
              "free": (EventKind.GPU_FREE, "ptr", "size"), "unregister": (EventKind.GPU_UNREGISTER, "ptr", "size"),
              "copy": (EventKind.GPU_COPY, "dst", "bytes"), "set": (EventKind.GPU_SET, "dst", "bytes"),
              "prefetch": (EventKind.GPU_PREFETCH, "ptr", "bytes"), "advise": (EventKind.GPU_ADVISE, "ptr", "bytes"),
              "sync": (EventKind.GPU_SYNC, None, None)}
U64 = (1 << 64) - 1


def _differences(call: dict, rows: TraceRows, i: int, same_api: bool) -> list[str]:
    """How trace row i differs from the logged call (kind, api when same_api, address, bytes, outcome)."""
    kind, addr, size = LOG_SHAPES[call["event"]]
    c = rows.columns
    if int(c["kind"][i]) != kind:
        return [f"event {EventKind(int(c['kind'][i])).name} ({rows.api(i)})"]
    out = []
    if same_api and rows.api(i) != call["api"]:
        out.append(f"api {rows.api(i)}")
    if addr and int(c["ptr"][i]) != call[addr] & U64:
        out.append(f"address {int(c['ptr'][i]):#x}, logged {call[addr]:#x}")
    if size and int(c["size"][i]) != call[size]:
        out.append(f"bytes {int(c['size'][i])}, logged {call[size]}")
    # Driver and runtime error codes differ; success must agree.
    if (int(c["result"][i]) == 0) != (call["result"] == 0):
        out.append(f"result {int(c['result'][i])}, logged {call['result']}")
    return out


def match_calls(name: str, calls: list[dict], rows: TraceRows, *, same_api: bool,
                skip=lambda call: False) -> Check:
    """Every logged call (but the skipped) is the process's next GPU row, in order; no row left over."""
    if not calls:
        return Check(name, False, "the program's call log is missing or empty")
    mine = rows.of_pid(calls[0]["pid"])
    problems, skipped, j = [], [], 0
    for n, call in enumerate(calls):
        if skip(call):
            skipped.append(call["api"])
            continue
        if j >= len(mine):
            problems.append(f"call {n + 1} ({call['api']}): no event")
            continue
        diffs = _differences(call, mine, j, same_api)
        if diffs:
            problems.append(f"call {n + 1} ({call['api']}): " + ", ".join(diffs))
        j += 1
    if j < len(mine):
        problems.append(f"{len(mine) - j} events the program did not log "
                        f"({', '.join(mine.api(i) for i in range(j, min(len(mine), j + 5)))})")
    if problems:
        return Check(name, False, f"{len(problems)} mismatches: " + " | ".join(problems[:8]))
    apis = sorted({mine.api(i) for i in range(len(mine))})
    note = f"; no driver call for {', '.join(skipped)}" if skipped else ""
    return Check(name, True, f"{j} calls seen exactly as {len(apis)} functions ({', '.join(apis)}){note}")


def check_static(root: Path) -> tuple[Check, TraceRows | None]:
    trace = root / "static" / "trace"
    if not (trace / "ust").is_dir():
        return Check("static runtime", False, "no static/trace in the archive"), None
    rows = read_trace(trace)
    calls = read_log(root / "static" / "calls.jsonl")
    skip = lambda call: call["event"] in NO_DRIVER_CALL or call["result"] in RUNTIME_ONLY_ERRORS  # noqa: E731
    return match_calls("static runtime", calls, rows, same_api=False, skip=skip), rows


def check_expandable(root: Path) -> tuple[Check, TraceRows | None]:
    trace, loop = root / "expandable" / "trace", _json(root / "expandable" / "loop.json")
    if not (trace / "ust").is_dir() or not loop:
        return Check("expandable", False, "no expandable/trace or loop.json in the archive"), None
    rows = read_trace(trace)
    mine = rows.of_pid(int(loop["pid"]))
    c = mine.columns
    mapped = sum(int(c["size"][i]) for i in range(len(mine)) if mine.api(i) == "cuMemMap"
                 and int(c["kind"][i]) == EventKind.GPU_ALLOC and int(c["result"][i]) == 0
                 and int(c["mem"][i]) == MemKind.DEVICE and mine.library_of(i).startswith("libc10_cuda"))
    reserved = int((loop.get("memory_stats") or {}).get("reserved_bytes.all.allocated", -1))
    copies = Counter(_copy_directions(mine))
    expect = loop.get("expected") or {}
    steps, batch = int(loop["steps"]), int(loop["batch"])
    batch_h2d = copies[("HtoD", batch * 512 * 4)] + copies[("HtoD", batch * 8)]  # features (f32) and labels (i64)
    d2h = copies[("DtoH", 4)]
    ok = mapped == reserved and batch_h2d == expect.get("h2d_copies") and d2h == expect.get("d2h_copies") == steps
    return Check("expandable", ok, f"caching allocator mapped {mapped} B with cuMemMap, memory_stats reserved "
                                   f"{reserved} B; batch uploads {batch_h2d} (expected {expect.get('h2d_copies')}), "
                                   f"loss read-backs {d2h} (expected {expect.get('d2h_copies')})"), rows


def check_ctypes(root: Path) -> tuple[Check, TraceRows | None]:
    trace = root / "ctypes" / "trace"
    if not (trace / "ust").is_dir():
        return Check("ctypes", False, "no ctypes/trace in the archive"), None
    rows = read_trace(trace)
    return match_calls("ctypes", read_log(root / "ctypes" / "calls.jsonl"), rows, same_api=True), rows


def check_jax(root: Path) -> tuple[Check, TraceRows | None]:
    trace, log = root / "jax" / "trace", _json(root / "jax" / "log.json")
    if not (trace / "ust").is_dir() or not log:
        return Check("jax", False, "no jax/trace or log.json in the archive"), None
    rows = read_trace(trace)
    copies = Counter(_copy_directions(rows))
    n, steps = int(log["bytes_each_way"]), int(log["steps"])
    up, down = copies[("HtoD", n)], copies[("DtoH", n)]
    return Check("jax", up == down == steps, f"{up} uploads and {down} read-backs of {n} B seen "
                                             f"(the program made {steps} of each; devices {log['devices']})"), rows


def reach_info(root: Path) -> dict:
    """The machine the archive came from (logs/nvidia-smi.txt, logs/versions.txt), as gpu-check's info.json."""
    def last_line(name: str) -> str:
        path = root / "logs" / name
        lines = path.read_text().strip().splitlines() if path.is_file() else []
        return lines[-1] if lines else ""
    return {"archive": "gpu-reach", "nvidia_smi": last_line("nvidia-smi.txt"), "torch": last_line("torch.txt"),
            "python": last_line("python.txt")}


def reach_checks(root: Path) -> list[Check]:
    """Every check of an unpacked gpu-reach/ directory."""
    from tools.gpu_archive import check_lost

    status = {}
    status_file = root / "status.txt"
    if status_file.is_file():
        status = {name: int(rc) for name, rc in (line.split() for line in status_file.read_text().splitlines())}
    failed = sorted(k for k, v in status.items() if v != 0)
    checks = [Check("steps", bool(status) and not failed,
                    "failed: " + ", ".join(failed) if failed else f"{len(status)} steps exited 0")]
    traces = {}
    for label, fn in (("static", check_static), ("expandable", check_expandable), ("ctypes", check_ctypes),
                      ("jax", check_jax)):
        check, rows = fn(root)
        checks.append(check)
        if rows is not None:
            traces[label] = rows
    checks.append(check_lost(traces))
    return checks
