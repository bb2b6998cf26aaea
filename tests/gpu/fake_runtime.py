"""What the stand-ins for PyTorch programs on the fake CUDA runtime share (fake_torch_loop.py, fake_finetune.py):
calling the runtime as libtorch_cuda does, and writing the Kineto trace the profiler would write of their copies."""
from __future__ import annotations

import ctypes
import json
import os
import time
from typing import Callable


def runtime(program: str) -> Callable[..., None]:
    """call(name, *args): the fake runtime ($FAKE_CUDART) loaded into the global scope and called through
    dlsym(RTLD_DEFAULT), so memq's LD_PRELOAD wrappers come first; a non-zero result ends the program."""
    ctypes.CDLL(os.environ["FAKE_CUDART"], mode=ctypes.RTLD_GLOBAL)
    rt = ctypes.CDLL(None)

    def call(name: str, *argv) -> None:
        r = getattr(rt, name)(*argv)
        if r != 0:
            raise SystemExit(f"{program}: {name} returned {r}")

    return call


def write_profile(path: str, copies: list[tuple[str, int]]) -> None:
    """A Kineto trace with one gpu_memcpy event per (name, bytes), as the PyTorch profiler reports copies."""
    base_us = time.clock_gettime_ns(time.CLOCK_REALTIME) // 1000
    events = [{"ph": "X", "cat": "gpu_memcpy", "name": name, "pid": 0, "tid": 7, "ts": base_us + 10 * i,
               "dur": 2, "args": {"device": 0, "stream": 7, "correlation": i + 1, "bytes": n}}
              for i, (name, n) in enumerate(copies)]
    with open(path, "w") as f:
        json.dump({"schemaVersion": 1, "traceEvents": events}, f)
