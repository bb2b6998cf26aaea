"""Fuzz runner for the surfaces beside the CTF files: `python -m support.fuzz_surfaces SEED KINETO RPC WORKDIR PFTRACE`.

* KINETO random Kineto traces: a small valid one (a kernel, copies, a memset, a flow, metadata), then 1 to 3
  hostile changes each (numbers out of any range, of the wrong type, ids that are lists or objects, JSON
  nested deep, baseTimeNanoseconds odd, events of another shape, a gzip of something else), each read by
  `memq summary` in a process of its own forked from this one (the compiled engine inherited: no start-up);
  printed like support.fuzz_run's cases (`start N`, then one JSON line: what was done, exit code, stderr).
* RPC random message sequences sent to one `memq serve PFTRACE` by one tab after another (queries good and
  bad, resets, trace data appended and finalised, metatrace, metric requests, garbage and oversized frames,
  tabs closing mid-request); after each, a fresh tab must find the served trace whole (its slice count) and
  the server alive. One JSON line per sequence: {"rpc": N, "steps": [...], "ok": bool, "why": str}.
"""
from __future__ import annotations

import gzip
import json
import random
import sys
import time
from pathlib import Path

from support.fuzz_run import _forked

BASE = 1_700_000_000_000_000_000
HOSTILE_NUMBERS = [0, -1, 1 << 63, (1 << 63) - 1, 1 << 64, 1 << 70, -(1 << 70), 10 ** 30, "1e300", "-1e300",
                   "1e-300", "3.5", "nan", "NaN", "Infinity", "-0", "12", "", "0x10", True, False, None, [], [1, 2],
                   {}, {"a": 1}, 2.5, 1e15, -2e15]
FIELDS = ["ts", "dur", "pid", "tid", "bytes", "stream", "device", "name", "cat", "ph", "args", "id"]


def kineto_base() -> dict:
    events = [{"ph": "M", "name": "process_labels", "pid": 0, "args": {"labels": "GPU 0"}},
              {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "python"}},
              {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "main"}},
              {"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "pid": 1, "tid": 1, "ts": 5.0,
               "dur": 3.0, "args": {"correlation": 9, "size": 100}},
              {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 9, "pid": 1, "tid": 1, "ts": 5.0},
              {"ph": "f", "cat": "ac2g", "name": "ac2g", "id": 9, "pid": 0, "tid": 7, "ts": 10.0, "bp": "e"},
              {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 50.0, "dur": 60.0,
               "args": {"device": 0, "stream": 7, "correlation": 10}},
              {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pageable -> Device)", "pid": 0, "tid": 7,
               "ts": 10.0, "dur": 5.0, "args": {"device": 0, "stream": 7, "bytes": 100, "correlation": 9}},
              {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoH (Device -> Pinned)", "pid": 0, "tid": 7,
               "ts": 120.0, "dur": 2.0, "args": {"device": 0, "stream": 7, "bytes": 200}},
              {"ph": "X", "cat": "gpu_memset", "name": "Memset (Device)", "pid": 0, "tid": 7, "ts": 130.0,
               "dur": 1.0, "args": {"device": 0, "stream": 7, "bytes": 64}}]
    return {"traceEvents": events, "baseTimeNanoseconds": BASE, "deviceProperties": [{"id": 0, "name": "GPU"}]}


def _nested(depth: int) -> str:
    """A placeholder for JSON nested `depth` deep, written out by _text (json.dumps would recurse as deep)."""
    return f"@@deep{depth}@@"


def _text(doc: dict) -> str:
    text = json.dumps(doc, default=str)
    for depth in (10, 100, 900, 5000, 50_000):
        text = text.replace(f'"@@deep{depth}@@"', "[" * depth + "1" + "]" * depth)
    return text


def kineto_change(doc: dict, rng: random.Random) -> str:
    """One hostile change to the document."""
    events = doc.get("traceEvents")
    how = rng.choice(["field", "field", "field", "base", "nest", "shape", "drop"])
    if how == "base":
        doc["baseTimeNanoseconds"] = rng.choice(HOSTILE_NUMBERS)
        return f"baseTimeNanoseconds = {doc['baseTimeNanoseconds']!r}"
    if not isinstance(events, list) or not events:
        doc["traceEvents"] = [{}]
        return "traceEvents = [{}]"
    i = rng.randrange(len(events))
    event = events[i] if isinstance(events[i], dict) else {}
    if how == "nest":
        depth = rng.choice([10, 100, 900, 5000, 50_000])
        event.setdefault("args", {})
        if isinstance(event["args"], dict):
            event["args"]["deep"] = _nested(depth)
        else:
            event["args"] = _nested(depth)
        return f"traceEvents[{i}] args nested {depth} deep"
    if how == "shape":
        events[i] = rng.choice([None, 5, "x", [], [event], {"ph": "X"}, {"ph": "X", "cat": "gpu_memcpy"}])
        return f"traceEvents[{i}] = {events[i]!r}"[:200]
    if how == "drop":
        key = rng.choice(list(event) or ["ts"])
        event.pop(key, None)
        return f"traceEvents[{i}] without {key}"
    key = rng.choice(FIELDS)
    value = rng.choice(HOSTILE_NUMBERS + ["x" * rng.choice([1, 1000])])
    if key in ("bytes", "stream", "device"):
        if not isinstance(event.get("args"), dict):
            event["args"] = {}
        event["args"][key] = value
    else:
        event[key] = value
    return f"traceEvents[{i}].{key} = {value!r}"[:200]


def kineto_case(work: Path, rng: random.Random, number: int) -> dict:
    from ctf2perfetto.cli.memq import main as memq

    doc = kineto_base()
    done = [kineto_change(doc, rng) for _ in range(rng.choice([1, 1, 2, 3]))]
    text = _text(doc)
    path = work / (f"kineto{number}.json" + (".gz" if rng.random() < 0.5 else ""))
    if path.suffix == ".gz":
        with gzip.open(path, "wt") as f:
            f.write(text)
    else:
        path.write_text(text)
    code, stderr = _forked(lambda: memq(["summary", str(path)]))
    path.unlink()
    return {"case": number, "mutations": done, "runs": [{"salvage": False, "rc": code, "stderr": stderr,
                                                         "output": code == 0}]}


# -- memq serve: message sequences ----------------------------------------------------------------------------
METHODS = ["TPM_QUERY_STREAMING", "TPM_QUERY_STREAMING", "TPM_QUERY_STREAMING", "TPM_RESET_TRACE_PROCESSOR",
           "TPM_RESTORE_INITIAL_TABLES", "TPM_GET_STATUS", "TPM_APPEND_TRACE_DATA", "TPM_FINALIZE_TRACE_DATA",
           "TPM_ENABLE_METATRACE", "TPM_DISABLE_AND_READ_METATRACE", "TPM_GET_METRIC_DESCRIPTORS",
           "TPM_COMPUTE_METRIC", "TPM_UNSPECIFIED", "garbage", "oversized", "close"]
QUERIES = ["SELECT count(*) FROM slice", "SELECT * FROM slice LIMIT 5", "SELEC nonsense", "DROP TABLE slice",
           "CREATE PERFETTO TABLE x AS SELECT 1 AS a", "INCLUDE PERFETTO MODULE memq.copies", "SELECT 1/0",
           "SELECT zeroblob(1000000000)", "DELETE FROM slice", ""]


def rpc_sequence(port: int, origin: str, rng: random.Random) -> list[str]:
    """One tab's random requests; returns what it did."""
    from ctf2perfetto.engine.embedded import protos
    from support.rpc_client import RpcSocket

    ws = RpcSocket(port, origin=origin, timeout=60)
    steps: list[str] = []
    try:
        for _ in range(rng.randrange(1, 8)):
            method = rng.choice(METHODS)
            steps.append(method)
            if method == "close":
                return steps
            if method == "garbage":
                ws.send_frame(rng.randbytes(rng.randrange(1, 64)))
                return steps  # the server closes a stream that is not RPC
            if method == "oversized":
                ws.send_frame(b"\x0a\xff\xff\xff\xff\x0f")  # a message length of 4 GiB
                return steps
            stream = protos().TraceProcessorRpcStream()
            message = stream.msg.add()
            message.seq = len(steps)
            message.request = getattr(protos().TraceProcessorRpc, method)
            if method == "TPM_QUERY_STREAMING":
                message.query_args.sql_query = rng.choice(QUERIES)
            elif method == "TPM_APPEND_TRACE_DATA":
                message.append_trace_data = rng.randbytes(rng.randrange(0, 256))
            elif method == "TPM_COMPUTE_METRIC":
                message.compute_metric_args.metric_names.append(rng.choice(["android_cpu", "nonsense", ""]))
            ws.send_frame(stream.SerializeToString())
            if rng.random() < 0.15:
                return steps + ["closed before the reply"]
            ws.replies()
    except (ConnectionError, OSError) as exc:
        steps.append(f"connection ended: {exc}"[:200])
    finally:
        ws.close()
    return steps


def rpc_check(port: int, origin: str, expected: int) -> str | None:
    """Why a fresh tab does not find the served trace whole (None: it does)."""
    from ctf2perfetto.engine.frames import typed_frame
    from support.rpc_client import RpcSocket

    deadline = time.monotonic() + 60
    while True:
        ws = RpcSocket(port, origin=origin, timeout=120)
        try:
            replies = ws.rpc("TPM_QUERY_STREAMING", "SELECT count(*) AS n FROM slice")
        except ConnectionError as exc:  # the previous tab not let go yet: refused as a second tab
            if time.monotonic() > deadline:
                return f"refused: {exc}"
            time.sleep(0.5)
            continue
        finally:
            ws.close()
        fatal = [r.fatal_error for r in replies if r.fatal_error]
        if fatal:
            return f"fatal: {fatal[0]}"
        errors = [r.query_result.error for r in replies if r.query_result.error]
        if errors:
            return f"query error: {errors[0]}"
        results = [r.query_result for r in replies]
        n = typed_frame(list(results[0].column_names), [b for r in results for b in r.batch])["n"].tolist()
        return None if n == [expected] else f"slice count {n}, expected {expected}"


def main(argv: list[str]) -> int:
    seed, kineto, rpc, work, pftrace = int(argv[0]), int(argv[1]), int(argv[2]), Path(argv[3]), Path(argv[4])
    rng = random.Random(seed)
    from ctf2perfetto.engine.wasm import load_module, wasm_file

    load_module(wasm_file(False))  # compiled once here; each forked case inherits it
    for number in range(kineto):
        print(f"start kineto {number}", flush=True)
        print(json.dumps(kineto_case(work, rng, number)), flush=True)
    if rpc:
        from ctf2perfetto.engine import open_trace
        from ui.browser import start_memq_serve

        with open_trace(pftrace) as tp:
            expected = int(tp.query("SELECT count(*) AS n FROM slice")["n"][0])
        server = start_memq_serve(pftrace)
        try:
            for number in range(rpc):
                print(f"start rpc {number}", flush=True)
                steps = rpc_sequence(server.port, server.origin, rng)
                why = rpc_check(server.port, server.origin, expected)
                alive = server.process.poll() is None
                print(json.dumps({"rpc": number, "steps": steps, "ok": why is None and alive,
                                  "why": why or ("" if alive else "the server ended")}), flush=True)
        finally:
            code, err = server.stop()
        print(json.dumps({"server": code, "traceback": "Traceback" in err, "stderr_tail": err[-2000:]}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
