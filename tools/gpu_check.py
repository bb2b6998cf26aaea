"""Read the archive of scripts/gpu-check.sh and check memq against what really ran.

    python3 -m tools.gpu_check gpu-check.tar.gz [--json REPORT.json]

The archive (layout: scripts/gpu-check.sh, docs/GPU_CHECK.md) holds the traces of a
CUDA program that calls every wrapped runtime function once (tests/gpu/cuda_all.cu),
of a PyTorch training loop and an LLM fine-tune, and of GVProf's Rodinia pairs, their
own logs, the Kineto traces and timings.
Checks, each PASS or FAIL:
  conversion        every trace converts (`memq convert`, the loop's with --kineto)
  device query      the preload library found the CUDA runtime's device (name as the trace says)
  cuda_all calls    every logged call is one memq event, in order, with the exact
                    pointers, bytes, kinds, directions, streams, devices and results
  behaviour unchanged  every call returns what it returns without memq (an untraced run)
  frees sized       every successful free/unregister carries the size of what it freed
  torch copies      memq's copies equal the profiler's gpu_memcpy events per direction
                    (count and bytes)
  torch segments    memq's successful cudaMalloc count equals the caching allocator's
                    memory_stats()["segment.all.allocated"]
  pinned            pinned host allocations (DataLoader pin_memory) were recorded
  torch labels      the loop's label uploads (new labels every step, pinned blocks used again) are not
                    flagged redundant, one distinct source fingerprint each
  finetune copies, segments   the same two for the LLM fine-tune (examples/finetune_gpt.py)
  finetune labels   its DataLoader label uploads (new labels every micro-batch) are not
                    repeats, and one distinct source fingerprint each shows why
  finetune mask     its unchanged loss mask, re-uploaded every micro-batch: every upload
                    after the first a repeat with evidence content
  finetune checkpoints  every parameter's device-to-host checkpoint copy seen with its bytes
  finetune report   `memq report` names the mask's re-uploads as a finding, with their call site
  rodinia ...       GVProf's Rodinia findings (tests/fakes/rodinia_work.c, tools/rodinia_pairs.py):
                    each copy flagged exactly when the program says it moved nothing new,
                    but for the listed disagreements; each finding in the original, not the fix
  lost events       0 in every trace (memq-record.json and the trace's own counts)
and two goals, reported as met or missed: a recorded cudaMemcpyAsync costs <= 300 ns
more than an untraced one, and the loop runs <= 1.05x slower traced (default settings).
Exit status 1 when a check fails; bad input is one line and exit status 2.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path


from ctf2perfetto.cli import run_command
from ctf2perfetto.outfiles import check_output, write_atomically
from ctf2perfetto.events import EventKind, MemKind
from tools.gpu_finetune import check_labels, copy_verdicts, finetune_checks, rodinia_checks
from tools.gpu_archive import (ARCHIVES, DIRECTIONS, LOG_FIELDS, LOG_KINDS, UNSIGNED, Check, TraceRows, _copy_directions,
                               _json, check_lost, read_log, read_trace, unpack)

COST_GOAL_NS = 300.0
SLOWDOWN_GOAL = 1.05
U64 = (1 << 64) - 1

def compare_call(call: dict, rows: TraceRows, i: int) -> list[str]:
    """Differences between one logged call and trace row i ("field: log X, trace Y")."""
    c = rows.columns
    diffs = []
    want_kind = LOG_KINDS.get(call["event"])
    if want_kind is None or int(c["kind"][i]) != want_kind:
        return [f"event: log {call['event']}, trace {EventKind(int(c['kind'][i])).name}"]
    if rows.api(i) != call["api"]:
        diffs.append(f"api: log {call['api']}, trace {rows.api(i)}")
    fields = dict(LOG_FIELDS[call["event"]], device="device", result="result")
    expected = {col: call[key] for key, col in fields.items() if key in call}
    if call["event"] == "copy":
        peer = call.get("src_device", -1) >= 0
        expected["aux"] = call["src_device"] if peer else call.get("width", 0)
    for col, want in expected.items():
        got = int(c[col][i])
        if col in UNSIGNED:
            want &= U64
        if got != want:
            diffs.append(f"{col}: log {want:#x}, trace {got:#x}" if col in ("ptr", "src", "stream")
                         else f"{col}: log {want}, trace {got}")
    return diffs


def check_calls(calls: list[dict], rows: TraceRows) -> Check:
    """Every logged call is the trace's next GPU row of that process, field by field."""
    if not calls:
        return Check("cuda_all calls", False, "the program's call log is missing or empty")
    mine = rows.of_pid(calls[0]["pid"])
    problems = []
    for n, call in enumerate(calls):
        if n >= len(mine):
            problems.append(f"call {n + 1} ({call['api']}): no event")
            continue
        diffs = compare_call(call, mine, n)
        if diffs:
            problems.append(f"call {n + 1} ({call['api']}): " + "; ".join(diffs))
    if len(mine) > len(calls):
        extra = ", ".join(mine.api(i) for i in range(len(calls), min(len(mine), len(calls) + 5)))
        problems.append(f"{len(mine) - len(calls)} events the program did not log ({extra}...)")
    apis = sorted({c["api"] for c in calls})
    if problems:
        return Check("cuda_all calls", False, f"{len(problems)} mismatches: " + " | ".join(problems[:8]))
    return Check("cuda_all calls", True, f"{len(calls)} calls of {len(apis)} functions seen exactly: {', '.join(apis)}")


def check_unchanged(traced: list[dict], untraced: list[dict]) -> Check:
    """memq changes no outcome: the program's calls return the same results with and without it."""
    if not untraced:
        return Check("behaviour unchanged", False, "no untraced run of cuda_all in the archive")
    pairs = list(zip(traced, untraced))
    diffs = [f"{t['api']}: {u['result']} untraced, {t['result']} traced" for t, u in pairs
             if t["api"] != u["api"] or t["result"] != u["result"]]
    if len(traced) != len(untraced):
        diffs.append(f"{len(untraced)} calls untraced, {len(traced)} traced")
    return Check("behaviour unchanged", not diffs,
                 "; ".join(diffs[:5]) if diffs else f"{len(pairs)} calls return the same results untraced and traced")


def check_devices(rows: TraceRows) -> Check:
    """The preload library queried the runtime it wrapped: CUDA, with a named device."""
    seen = sorted({f"{d.get('runtime')} device {d.get('device')}: {d.get('name')}" for d in rows.devices})
    ok = any(d.get("runtime") == "cuda" and d.get("name") for d in rows.devices)
    return Check("device query", ok, "; ".join(seen) or "no memq:device event")


def check_free_sizes(rows: TraceRows, label: str) -> Check:
    """Successful frees/unregisters carry the size of the allocation they end (same pid, same pointer)."""
    c = rows.columns
    live: dict[tuple[int, int], int] = {}
    bad, frees = [], 0
    for i in range(len(rows)):
        kind, ok = int(c["kind"][i]), int(c["result"][i]) == 0
        key = (int(c["pid"][i]), int(c["ptr"][i]))
        if not ok:
            continue
        if kind in (EventKind.GPU_ALLOC, EventKind.GPU_REGISTER):
            live[key] = int(c["size"][i])
        elif kind in (EventKind.GPU_FREE, EventKind.GPU_UNREGISTER) and key[1]:
            frees += 1
            want = live.pop(key, None)
            if want is None or int(c["size"][i]) != want:
                bad.append(f"{rows.api(i)}({key[1]:#x}) size {int(c['size'][i])}, allocated {want}")
    if bad:
        return Check(f"frees sized ({label})", False, f"{len(bad)} of {frees}: " + "; ".join(bad[:5]))
    return Check(f"frees sized ({label})", True, f"{frees} frees, each with its allocation's size")


def _kineto_copies(profile: Path) -> list[tuple[str, int]]:
    """(direction, bytes) of the profiler's gpu_memcpy events ("Memcpy HtoD (Pinned -> Device)")."""
    from ctf2perfetto.importers.kineto import load

    out = []
    for ev in load(profile).events:
        if ev.get("cat") != "gpu_memcpy":
            continue
        words = str(ev.get("name", "")).split()
        direction = words[1] if len(words) > 1 and words[1] in DIRECTIONS else "other"
        out.append((direction, int((ev.get("args") or {}).get("bytes", 0))))
    return out


def _tally(copies: list[tuple[str, int]]) -> dict[str, tuple[int, int]]:
    out: dict[str, tuple[int, int]] = {}
    for direction, n in copies:
        count, total = out.get(direction, (0, 0))
        out[direction] = (count + 1, total + n)
    return out


def check_torch_copies(rows: TraceRows, profile: Path, label: str = "torch") -> Check:
    name = f"{label} copies"
    if not profile.is_file():
        return Check(name, False, f"{profile.name} is missing")
    memq, prof = _tally(_copy_directions(rows)), _tally(_kineto_copies(profile))
    if not prof:
        return Check(name, False, "the profiler recorded no gpu_memcpy event")
    text = ", ".join(f"{d} memq {memq.get(d, (0, 0))[0]}/{memq.get(d, (0, 0))[1]} B, "
                     f"profiler {prof.get(d, (0, 0))[0]}/{prof.get(d, (0, 0))[1]} B"
                     for d in sorted(set(memq) | set(prof)))
    return Check(name, memq == prof, text)


def check_segments(rows: TraceRows, loop: dict, label: str = "torch") -> Check:
    """PyTorch's caching allocator takes each segment with one runtime cudaMalloc: their count and bytes equal
    memory_stats' segment.all.allocated and reserved_bytes.all.allocated. Device memory that CUDA libraries take
    from the driver themselves (cuBLAS calls cuMemAlloc_v2: seen on an H100) is real but outside the caching
    allocator, so it is listed by API and calling library rather than counted."""
    c = rows.columns
    device = [i for i in range(len(rows)) if int(c["kind"][i]) == EventKind.GPU_ALLOC
              and int(c["result"][i]) == 0 and int(c["mem"][i]) == MemKind.DEVICE]
    runtime = [i for i in device if rows.api(i).startswith("cuda")]
    others: dict[str, tuple[int, int]] = {}
    for i in device:
        if i not in runtime:
            key = f"{rows.api(i)} from {rows.library_of(i)}"
            n, total = others.get(key, (0, 0))
            others[key] = (n + 1, total + int(c["size"][i]))
    got_bytes = sum(int(c["size"][i]) for i in runtime)
    want = int(loop.get("segments_allocated", -1))
    want_bytes = int((loop.get("memory_stats") or {}).get("reserved_bytes.all.allocated", -1))
    ok = len(runtime) == want and (want_bytes < 0 or got_bytes == want_bytes)
    other_text = "; ".join(f"{k}: {n}, {b} B" for k, (n, b) in sorted(others.items()))
    return Check(f"{label} segments", ok,
                 f"memq device allocations {len(runtime)} ({got_bytes} B), memory_stats segment.all.allocated "
                 f"{want} ({want_bytes} B reserved)" + (f"; outside the caching allocator: {other_text}"
                                                        if other_text else ""))


def check_pinned(rows: TraceRows, loop: dict) -> Check:
    c = rows.columns
    pinned = [i for i in range(len(rows)) if int(c["kind"][i]) == EventKind.GPU_ALLOC
              and int(c["result"][i]) == 0 and int(c["mem"][i]) == MemKind.PINNED]
    apis = sorted({rows.api(i) for i in pinned})
    host = loop.get("host_memory_stats") or {}
    extra = f"; torch host_memory_stats num_host_alloc {host['num_host_alloc']}" if "num_host_alloc" in host else ""
    return Check("pinned", bool(pinned),
                 f"{len(pinned)} pinned allocations ({', '.join(apis) or 'none'}), "
                 f"{sum(int(c['size'][i]) for i in pinned)} B{extra}")


def check_conversion(trace_dir: Path, profile: Path | None, out_dir: Path, label: str) -> Check:
    """`memq convert` on the trace (with the Kineto trace when given), as a user runs it."""
    out = out_dir / f"{label}.pftrace"
    cmd = [sys.executable, "-m", "ctf2perfetto", "convert", str(trace_dir), "-o", str(out)]
    if profile is not None:
        cmd[4:4] = ["--kineto", str(profile)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, MEMQ_DEBUG=""))
    ok = proc.returncode == 0 and out.is_file() and out.stat().st_size > 0
    detail = f"{out.stat().st_size} B" if ok else (proc.stderr.strip().splitlines() or ["no output"])[-1]
    return Check(f"conversion ({label})", ok, detail)


def _median(xs: list[float]) -> float | None:
    xs = sorted(x for x in xs if x is not None)
    if not xs:
        return None
    mid = len(xs) // 2
    return xs[mid] if len(xs) % 2 else (xs[mid - 1] + xs[mid]) / 2


def goals(timings: dict | None) -> list[Check]:
    timings = timings or {}
    bench = timings.get("bench_ns_per_call", {})
    untraced = _median(bench.get("untraced", []))
    out = []
    for mode, label in (("default", ""), ("cuda", " (--api cuda)")):
        traced = _median(bench.get(mode, []))
        if untraced is None or traced is None:
            if mode == "default":  # archives before the --api cuda bench have no such rounds
                out.append(Check("cudaMemcpyAsync cost", None, "not measured", goal=True))
            continue
        cost = traced - untraced
        out.append(Check(f"cudaMemcpyAsync cost{label}", cost <= COST_GOAL_NS,
                         f"{cost:.0f} ns per recorded call (traced {traced:.0f}, untraced {untraced:.0f} ns; "
                         f"goal <= {COST_GOAL_NS:.0f})", goal=True))
    loop = timings.get("loop_s", {})
    base = _median(loop.get("untraced", []))
    for mode, label in (("default", "default settings"), ("cuda", "--api cuda")):
        t = _median(loop.get(mode, []))
        if base is None or t is None or base <= 0:
            out.append(Check(f"loop slowdown ({label})", None, "not measured", goal=True))
            continue
        ratio = t / base
        out.append(Check(f"loop slowdown ({label})", ratio <= SLOWDOWN_GOAL,
                         f"{ratio:.3f}x (median loop {t:.3f} s traced, {base:.3f} s untraced, "
                         f"{len(loop.get(mode, []))} runs; goal <= {SLOWDOWN_GOAL})", goal=True))
    return out


def check_archive(path: Path, work: Path) -> tuple[dict, list[Check]]:
    """(info.json, checks) of one archive, unpacked under `work`."""
    root = unpack(path, work)
    if (root / ARCHIVES["gpu-reach"]).is_file() and not (root / ARCHIVES["gpu-check"]).is_file():
        from tools.gpu_reach import reach_checks, reach_info

        return reach_info(root), reach_checks(root)
    info = _json(root / "info.json") or {}
    checks: list[Check] = []
    failed_steps = sorted(k for k, v in (info.get("status") or {}).items() if v != 0)
    checks.append(Check("steps", not failed_steps, "failed: " + ", ".join(failed_steps) if failed_steps
                        else f"{len(info.get('status') or {})} steps exited 0"))
    traces: dict[str, TraceRows] = {}
    cuda_trace, torch_trace = root / "cuda_all" / "trace", root / "torch" / "trace"
    profile = root / "torch" / "profile.json"
    if (cuda_trace / "ust").is_dir():
        checks.append(check_conversion(cuda_trace, None, work, "cuda_all"))
        traces["cuda_all"] = read_trace(cuda_trace)
        calls = read_log(root / "cuda_all" / "calls.jsonl")
        checks.append(check_calls(calls, traces["cuda_all"]))
        checks.append(check_unchanged(calls, read_log(root / "cuda_all" / "untraced.jsonl")))
        checks.append(check_devices(traces["cuda_all"].of_pid(calls[0]["pid"]) if calls else traces["cuda_all"]))
        checks.append(check_free_sizes(traces["cuda_all"], "cuda_all"))
    else:
        checks.append(Check("cuda_all calls", False, "no cuda_all/trace/ust in the archive"))
    loop = _json(root / "torch" / "loop.json")
    if (torch_trace / "ust").is_dir() and loop:
        checks.append(check_conversion(torch_trace, profile if profile.is_file() else None, work, "torch"))
        rows = read_trace(torch_trace)
        traces["torch"] = rows
        mine = rows.of_pid(int(loop["pid"]))
        checks += [check_torch_copies(mine, profile), check_segments(mine, loop), check_pinned(mine, loop),
                   check_free_sizes(mine, "torch")]
        if "labels" in loop:  # archives before content fingerprints logged no label pointers
            copies = copy_verdicts(torch_trace)
            checks.append(check_labels(copies[copies["pid"] == int(loop["pid"])], loop, "torch"))
    else:
        checks.append(Check("torch copies", False, "no torch/trace/ust or torch/loop.json in the archive"))
    finetune, run = root / "finetune" / "trace", _json(root / "finetune" / "run.json")
    ft_profile = root / "finetune" / "profile.json"
    if (finetune / "ust").is_dir() and run:
        checks.append(check_conversion(finetune, ft_profile if ft_profile.is_file() else None, work, "finetune"))
        traces["finetune"] = read_trace(finetune)
        mine = traces["finetune"].of_pid(int(run["pid"]))
        checks += [check_torch_copies(mine, ft_profile, "finetune"), check_segments(mine, run, "finetune"),
                   *finetune_checks(finetune, run)]
    else:
        checks.append(Check("finetune copies", False, "no finetune/trace/ust or finetune/run.json in the archive"))
    checks += rodinia_checks(root / "rodinia")
    checks.append(check_lost(traces))
    checks += goals(_json(root / "timings.json"))
    return info, checks


def report(path: Path) -> tuple[dict, list[Check]]:
    with tempfile.TemporaryDirectory(prefix="memq-gpu-check-") as tmp:
        return check_archive(path, Path(tmp))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m tools.gpu_check", description=__doc__.split("\n\n")[0],
                                     epilog=__doc__.split("\n\n", 2)[2], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("archive", type=Path, help="gpu-check.tar.gz (or the unpacked directory)")
    parser.add_argument("--json", type=Path, metavar="REPORT.json", help="also write the checks as JSON")
    args = parser.parse_args(argv)

    def body() -> int:
        if args.json:
            check_output(args.json, inputs=[args.archive], flag="--json")
        info, checks = report(args.archive)
        print(f"gpu-check archive {args.archive}: {info.get('nvidia_smi') or 'unknown GPU'}; "
              f"torch {info.get('torch', '?')}; python {info.get('python', '?')}")
        for check in checks:
            print(check.line())
        if args.json:
            write_atomically(args.json, (json.dumps({"info": info, "checks": [asdict(c) for c in checks]}, indent=1)
                                         + "\n").encode(), flag="--json")
        return 1 if any(c.ok is False and not c.goal for c in checks) else 0

    return run_command("gpu_check", body)


if __name__ == "__main__":
    sys.exit(main())
