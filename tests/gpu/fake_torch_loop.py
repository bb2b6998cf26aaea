"""Stand-in for tests/gpu/torch_loop.py on the fake CUDA runtime (no GPU, no CUDA torch).

Makes the CUDA calls a PyTorch loop makes, through the global symbol scope (so memq's
LD_PRELOAD wrappers see them, as they see libtorch_cuda's): two caching-allocator
segments (cudaMalloc), two pinned batch buffers (cudaHostAlloc, DataLoader
pin_memory), per step two host-to-device batch copies (new labels every step) and the 4-byte device-to-host
copy of `loss.item()` with its stream sync, plus one cudaMemcpyDefault copy whose
direction only the pointers tell. Writes the same LOG as torch_loop.py and, with
--profile, a Kineto trace whose gpu_memcpy events are those copies (what the
PyTorch profiler reports for them on a GPU).

    FAKE_CUDART=.../libcudart.so.13 python3 fake_torch_loop.py --log LOG [--steps N] [--profile P]
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import time

from fake_runtime import runtime, write_profile

BATCH_X, BATCH_Y, SEGMENT = 256 * 512 * 4, 256 * 8, 2 << 20
H2D, D2H, DEFAULT = 1, 2, 4


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--log", required=True)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--profile")
    args = parser.parse_args()
    call = runtime("fake_torch_loop")
    vp = ctypes.c_void_p

    seg = [vp(), vp()]
    for s in seg:
        call("cudaMalloc", ctypes.byref(s), ctypes.c_size_t(SEGMENT))
    pinned = [vp(), vp()]
    for p, n in zip(pinned, (BATCH_X, BATCH_Y)):
        call("cudaHostAlloc", ctypes.byref(p), ctypes.c_size_t(n), ctypes.c_uint(0))
    stream = vp()
    call("cudaStreamCreate", ctypes.byref(stream))
    loss = ctypes.c_float()
    copies: list[tuple[str, int]] = []

    def copy(dst, src, n: int, kind: int, name: str) -> None:
        call("cudaMemcpyAsync", vp(dst), vp(src), ctypes.c_size_t(n), ctypes.c_int(kind), stream)
        copies.append((name, n))

    steps = args.warmup + args.steps
    start = 0.0
    labels: list[dict] = []
    for step in range(steps):
        if step == args.warmup:
            start = time.perf_counter()
        # The DataLoader pins the next batch into the same blocks: new labels every step.
        ctypes.memmove(pinned[1].value, bytes((step * 37 + i * 5) % 256 for i in range(BATCH_Y)), BATCH_Y)
        copy(seg[0].value, pinned[0].value, BATCH_X, H2D, "Memcpy HtoD (Pinned -> Device)")
        copy(seg[1].value, pinned[1].value, BATCH_Y, H2D, "Memcpy HtoD (Pinned -> Device)")
        labels.append({"step": step, "src": pinned[1].value, "dst": seg[1].value, "bytes": BATCH_Y})
        copy(ctypes.addressof(loss), seg[0].value, 4, D2H, "Memcpy DtoH (Device -> Pageable)")
        call("cudaStreamSynchronize", stream)
    copy(seg[1].value + 4096, pinned[0].value, 512, DEFAULT, "Memcpy HtoD (Pinned -> Device)")
    call("cudaStreamSynchronize", stream)
    loop_s = time.perf_counter() - start

    log = {"pid": os.getpid(), "steps": steps, "timed_steps": args.steps, "warmup": args.warmup,
           "loop_s": loop_s, "step_ms": 1e3 * loop_s / args.steps, "torch": "fake", "cuda": "fake",
           "device": "Fake CUDA GPU 0", "segments_allocated": len(seg), "segments_freed": 0,
           "memory_stats": {"segment.all.allocated": len(seg), "reserved_bytes.all.allocated": len(seg) * SEGMENT},
           "host_memory_stats": {"num_host_alloc": len(pinned)}, "labels": labels,
           "expected": {"h2d_copies": 2 * steps + 1, "d2h_copies": steps}}
    with open(args.log, "w") as f:
        json.dump(log, f, indent=1)
    if args.profile:
        write_profile(args.profile, copies)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
