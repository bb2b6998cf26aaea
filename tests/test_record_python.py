"""`memq record` on real Python programs: numpy and a PyTorch CPU training loop.

The programs print their own pid and process name; the trace must hold their
heap (memq's heap wrappers: blocks of 4 KiB and more as events, the rest as
per-thread totals) under that pid, and the statedump must name the process.
"""
from __future__ import annotations

import sys
from pathlib import Path

from support.lttng import record, scan_events

ALLOC, FREE, SMALL = "memq:host_alloc", "memq:host_free", "memq:host_small"

NUMPY = """
import os
import numpy as np
a = np.ones(1_000_000)           # 8,000,000 bytes from the C heap
total = float((a * 2).sum())
print(os.getpid(), open("/proc/self/comm").read().strip(), total, flush=True)
"""

TORCH = """
import os
import torch
torch.manual_seed(0)
torch.set_num_threads(1)
model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(256, 64), torch.randint(0, 10, (256,))
for step in range(20):
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
print(os.getpid(), open("/proc/self/comm").read().strip(), round(loss.item(), 4), flush=True)
"""


def run_script(tmp_path: Path, name: str, source: str, argv0: str) -> tuple[list[dict], int, str, dict, str]:
    """Record the script; its heap, process name and library map events, pid, name, memq-record.json, printed result."""
    script = tmp_path / f"{name}.py"
    script.write_text(source)
    rec = record(tmp_path / "trace", [argv0, str(script)], api="libc")
    pid_text, comm, result = rec.stdout.split()
    pid = int(pid_text)
    names = (ALLOC, FREE, SMALL, "lttng_ust_statedump:procname", "memq:lib_load")
    return scan_events(rec.dir, names, pids={pid}), pid, comm, rec.meta, result


def procnames(events: list[dict]) -> set[str]:
    return {e["procname"] for e in events if e["event"] == "lttng_ust_statedump:procname"}


def test_numpy_heap_recorded_under_its_pid(tmp_path) -> None:
    # `python3` through PATH: the pyenv shim is replaced by the interpreter it runs.
    events, pid, comm, meta, total = run_script(tmp_path, "numpy_work", NUMPY, "python3")
    assert float(total) == 2_000_000.0
    assert Path(meta["executable"]).parent.name != "shims"
    assert procnames(events) == {comm}
    assert {e["vpid"] for e in events} == {pid}
    array = [e for e in events if e["event"] == ALLOC and e["requested"] == 8_000_000]
    assert array, "the 8 MB array allocation is missing"
    assert array[-1]["size"] >= 8_000_000  # the usable size
    frees = {(e["ptr"], e["size"]) for e in events if e["event"] == FREE}
    assert (array[-1]["ptr"], array[-1]["size"]) in frees  # the free says what it frees
    assert all(e["size"] >= 4096 for e in events if e["event"] in (ALLOC, FREE))
    # the interpreter's own heap: thousands of small blocks, as totals
    assert sum(e["alloc_count"] for e in events if e["event"] == SMALL) > 1000
    assert all(e["ip"] != 0 for e in events if e["event"] == ALLOC)  # caller address context
    assert meta["discarded_events"] == 0


def test_pytorch_training_loop_recorded(tmp_path) -> None:
    events, pid, comm, meta, loss = run_script(tmp_path, "torch_train", TORCH, sys.executable)
    assert 0 < float(loss) < 2.31  # trained: below ln(10), the loss of a uniform guess
    assert procnames(events) == {comm}
    # c10::alloc_cpu: 64-byte aligned posix_memalign per tensor; the hidden
    # activations (256 x 128 float32) are allocated at least once per step.
    aligned = [e for e in events if e["event"] == ALLOC and e["api_label"] == "posix_memalign"]
    assert sum(e["requested"] == 256 * 128 * 4 and e["ptr"] % 64 == 0 for e in aligned) >= 20
    # torch's libraries, dlopen'ed by the import, in memq's library map
    assert any(e["event"] == "memq:lib_load" and "libtorch" in e["path"] for e in events)
    assert meta["exit_code"] == 0 and meta["discarded_events"] == 0
