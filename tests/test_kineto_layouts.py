"""PyTorch-profiler (Kineto) JSON in the layouts memq used to refuse or misread: a plain file starting with
whitespace (libkineto writes "\\n{"), the PyTorch 1.8-era categories and "stream N" tids, ROCm copies whose
size is only on the correlated runtime call. Figures against a plain count of the JSON."""
from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

from ctf2perfetto.engine import open_trace
from ctf2perfetto.inputs import open_file

DATA = Path(__file__).resolve().parent / "data"


def copies(path: Path) -> dict[str, tuple[int, int]]:
    with open_file(path) as engine:
        rows = engine.rows("INCLUDE PERFETTO MODULE memq.copies; SELECT direction, COUNT(*) AS n, "
                           "SUM(IFNULL(bytes, 0)) AS b FROM memq_copy GROUP BY direction")
        out = {r["direction"]: (r["n"], r["b"]) for r in rows.records()}
        sets = engine.rows("INCLUDE PERFETTO MODULE memq.copies; SELECT COUNT(*) AS n, SUM(bytes) AS b FROM memq_set")
        out["memset"] = (sets.column("n")[0], sets.column("b")[0] or 0)
        return out


def expected(events: list[dict]) -> dict[str, tuple[int, int]]:
    out: dict[str, list[int]] = {"memset": [0, 0]}
    for e in events:
        if e.get("cat") in ("Memcpy", "gpu_memcpy"):
            row = out.setdefault(e["name"][7:11], [0, 0])
        elif e.get("cat") in ("Memset", "gpu_memset"):
            row = out["memset"]
        else:
            continue
        row[0] += 1
        row[1] += e["args"]["bytes"]
    return {k: tuple(v) for k, v in out.items()}


def era_1_8_trace() -> dict:
    """The shape of a PyTorch 1.8 profile: categories Memcpy/Memset/Kernel/Runtime/Operator, GPU tids
    "stream 7", CPU tids as strings, absolute µs timestamps."""
    events, ts = [], 1_617_000_000_000_000
    for i in range(12):
        corr = 100 + i
        events.append({"ph": "X", "cat": "Runtime", "name": "cudaMemcpyAsync", "pid": 4242, "tid": "4242",
                       "ts": ts + 10 * i, "dur": 3, "args": {"cbid": 41, "correlation": corr, "external id": i}})
        events.append({"ph": "X", "cat": "Memcpy", "name": "Memcpy HtoD (Pageable -> Device)", "pid": 0,
                       "tid": "stream 7", "ts": ts + 10 * i + 4, "dur": 2,
                       "args": {"device": 0, "context": 1, "stream": 7, "correlation": corr, "external id": i,
                                "bytes": 4096 * (i + 1), "memory bandwidth (GB/s)": 1.5}})
    for i in range(5):
        events.append({"ph": "X", "cat": "Memset", "name": "Memset (Device)", "pid": 0, "tid": "stream 7",
                       "ts": ts + 200 + 3 * i, "dur": 1,
                       "args": {"device": 0, "context": 1, "stream": 7, "correlation": 300 + i, "bytes": 512}})
    events.append({"ph": "X", "cat": "Kernel", "name": "void at::native::vectorized_elementwise_kernel", "pid": 0,
                   "tid": "stream 7", "ts": ts + 300, "dur": 9, "args": {"device": 0, "stream": 7}})
    events.append({"ph": "X", "cat": "Operator", "name": "aten::copy_", "pid": 4242, "tid": "4242", "ts": ts,
                   "dur": 150})
    return {"schemaVersion": 1, "traceEvents": events}


def test_plain_json_starting_with_a_newline(tmp_path):
    doc = era_1_8_trace()
    path = tmp_path / "libkineto.json"
    path.write_text("\n" + json.dumps(doc, indent=1))
    assert copies(path) == expected(doc["traceEvents"])
    result = subprocess.run([sys.executable, "-m", "ctf2perfetto", "summary", str(path)], capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "no memory events" not in result.stdout + result.stderr


def test_pytorch_1_8_categories_and_stream_tids(tmp_path):
    doc = era_1_8_trace()
    path = tmp_path / "torch18.json.gz"
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    found = copies(path)
    assert found == expected(doc["traceEvents"]) == {"HtoD": (12, 4096 * 78), "memset": (5, 2560)}
    with open_file(path) as engine:
        rows = engine.rows("INCLUDE PERFETTO MODULE memq.copies; SELECT DISTINCT stream FROM memq_copy")
        assert rows.column("stream") == [7]


def test_rocm_copy_sizes_from_the_correlated_runtime_call():
    path = DATA / "kineto" / "mi250_minitoy_train_ROCm6_2_kineto.json.gz"
    doc = json.loads(gzip.decompress(path.read_bytes()))
    runtime = {e["args"]["correlation"]: int(e["args"]["size"]) for e in doc["traceEvents"]
               if e.get("cat") == "cuda_runtime" and "size" in e.get("args", {})}
    memcpys = [e for e in doc["traceEvents"] if e.get("cat") == "gpu_memcpy"]
    assert memcpys and all("bytes" not in e["args"] for e in memcpys)
    want = sum(runtime[e["args"]["correlation"]] for e in memcpys)
    found = copies(path)
    assert found["HtoD"] == (len(memcpys), want) and want == 5120
