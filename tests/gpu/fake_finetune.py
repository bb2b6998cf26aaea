"""Stand-in for examples/finetune_gpt.py on the fake CUDA runtime (no GPU, no CUDA torch).

Makes the CUDA calls the fine-tune makes, through the global symbol scope (so memq's LD_PRELOAD
wrappers see them, as they see libtorch_cuda's), with data that behaves as the real run's:
  * two caching-allocator segments (cudaMalloc), the parameters uploaded once (pageable);
  * per micro-batch, the DataLoader's pinned token and label buffers (two cudaHostAlloc blocks the
    caching host allocator hands out again every step) filled with NEW tokens and labels, then
    uploaded (cudaMemcpyAsync HtoD); the loss mask uploaded from one pinned buffer that never
    changes (--mask-upload step, the default) or once (--mask-upload once);
  * every --ckpt-every steps a checkpoint: each parameter copied device-to-host into a fresh
    pageable buffer (cudaMemcpyAsync DtoH + cudaStreamSynchronize, as `.to("cpu")` does);
  * every --eval-every steps, and at the end, a 4-byte `.item()` read-back.
Writes the same --log as finetune_gpt.py (the pointers of the label, mask and checkpoint copies,
segment count, the copies asked for) and, with --profile, a Kineto trace whose gpu_memcpy events
are those copies (what the PyTorch profiler reports on a GPU).

    FAKE_CUDART=.../libcudart.so.13 python3 fake_finetune.py --log LOG [--steps N] [--profile P]
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import time

from fake_runtime import runtime, write_profile

H2D, D2H = 1, 2
SEGMENT = 8 << 20
PARAMS = {"tok.weight": 512 * 64 * 4, "pos.weight": 32 * 64 * 4, "blocks.0.qkv.weight": 3 * 64 * 64 * 4,
          "blocks.0.mlp.0.weight": 4 * 64 * 64 * 4, "blocks.0.mlp.2.weight": 4 * 64 * 64 * 4, "ln.weight": 64 * 4}
BATCH, SEQ = 8, 32


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--log", required=True)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--accum", type=int, default=2)
    parser.add_argument("--ckpt-every", type=int, default=5)
    parser.add_argument("--eval-every", type=int, default=5)
    parser.add_argument("--mask-upload", choices=("step", "once"), default="step")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--profile")
    args = parser.parse_args()
    call = runtime("fake_finetune")
    vp = ctypes.c_void_p

    stream = vp()
    call("cudaStreamCreate", ctypes.byref(stream))
    copies: list[tuple[str, int]] = []

    def copy(dst: int, src: int, n: int, kind: int, name: str) -> None:
        call("cudaMemcpyAsync", vp(dst), vp(src), ctypes.c_size_t(n), ctypes.c_int(kind), stream)
        copies.append((name, n))

    def sync() -> None:
        call("cudaStreamSynchronize", stream)

    seg = [vp(), vp()]
    for s in seg:
        call("cudaMalloc", ctypes.byref(s), ctypes.c_size_t(SEGMENT))
    offsets, at = {}, 0
    for name, n in PARAMS.items():  # parameters inside the first segment, as the caching allocator places them
        offsets[name], at = at, at + (n + 511) // 512 * 512
    host_params = {name: ctypes.create_string_buffer(bytes((i * 7 + len(name)) % 251 for i in range(n)))
                   for name, n in PARAMS.items()}
    for name, n in PARAMS.items():  # model.to("cuda"): pageable uploads
        copy(seg[0].value + offsets[name], ctypes.addressof(host_params[name]), n, H2D,
             "Memcpy HtoD (Pageable -> Device)")
        sync()
    nbytes = BATCH * SEQ * 8
    pinned = {"x": vp(), "y": vp(), "mask": vp()}
    for key, n in (("x", nbytes), ("y", nbytes), ("mask", SEQ * 4)):
        call("cudaHostAlloc", ctypes.byref(pinned[key]), ctypes.c_size_t(n), ctypes.c_uint(0))
    ctypes.memmove(pinned["mask"].value, bytes([0] * 16 + [1, 0, 0x80, 0x3f] * (SEQ - 4)), SEQ * 4)
    dev_x, dev_y, dev_mask = (seg[1].value + off for off in (0, 1 << 20, 2 << 20))
    loss = ctypes.c_float()
    log: dict = {"pid": os.getpid(), "device": "cuda", "warmup": args.warmup, "steps": args.warmup + args.steps,
                 "mask_upload": args.mask_upload, "label_bytes": nbytes, "token_bytes": nbytes, "mask_bytes": SEQ * 4,
                 "labels": [], "mask_uploads": [], "checkpoints": [], "evals": [], "losses": []}
    if args.mask_upload == "once":
        copy(dev_mask, pinned["mask"].value, SEQ * 4, H2D, "Memcpy HtoD (Pinned -> Device)")
    checkpoint: list = []
    start = time.perf_counter()
    steps = args.warmup + args.steps
    for step in range(steps):
        if step == args.warmup:
            start = time.perf_counter()
        for micro in range(args.accum):
            k = step * args.accum + micro
            # The DataLoader pins the next batch into the same blocks: new tokens, new labels.
            ctypes.memmove(pinned["x"].value, bytes((k * 13 + i) % 256 for i in range(nbytes)), nbytes)
            ctypes.memmove(pinned["y"].value, bytes((k * 29 + i * 3) % 256 for i in range(nbytes)), nbytes)
            copy(dev_x, pinned["x"].value, nbytes, H2D, "Memcpy HtoD (Pinned -> Device)")
            copy(dev_y, pinned["y"].value, nbytes, H2D, "Memcpy HtoD (Pinned -> Device)")
            log["labels"].append({"step": step, "src": pinned["y"].value, "dst": dev_y, "bytes": nbytes})
            if args.mask_upload == "step":
                copy(dev_mask, pinned["mask"].value, SEQ * 4, H2D, "Memcpy HtoD (Pinned -> Device)")
                log["mask_uploads"].append({"step": step, "src": pinned["mask"].value, "dst": dev_mask,
                                            "bytes": SEQ * 4})
        if (step + 1) % args.ckpt_every == 0:
            checkpoint = [ctypes.create_string_buffer(n) for n in PARAMS.values()]
            for (name, n), buf in zip(PARAMS.items(), checkpoint):
                copy(ctypes.addressof(buf), seg[0].value + offsets[name], n, D2H, "Memcpy DtoH (Device -> Pageable)")
                sync()
            log["checkpoints"].append({"step": step, "copies": [
                {"name": name, "bytes": n, "dst": ctypes.addressof(buf)}
                for (name, n), buf in zip(PARAMS.items(), checkpoint)]})
        if (step + 1) % args.eval_every == 0:
            copy(ctypes.addressof(loss), seg[1].value + (3 << 20), 4, D2H, "Memcpy DtoH (Device -> Pageable)")
            sync()
            log["evals"].append({"step": step, "loss": 0.0})
    copy(ctypes.addressof(loss), seg[1].value + (3 << 20) + 64, 4, D2H, "Memcpy DtoH (Device -> Pageable)")
    sync()
    loop_s = time.perf_counter() - start
    h2d = [n for name, n in copies if "HtoD" in name]
    d2h = [n for name, n in copies if "DtoH" in name]
    log.update(loop_s=loop_s, step_ms=1e3 * loop_s / max(args.steps, 1), timed_steps=args.steps,
               checkpoint_tensors=len(PARAMS), checkpoint_bytes=sum(PARAMS.values()), torch="fake", cuda="fake",
               gpu="Fake CUDA GPU 0", segments_allocated=len(seg),
               memory_stats={"segment.all.allocated": len(seg), "reserved_bytes.all.allocated": len(seg) * SEGMENT},
               host_memory_stats={"num_host_alloc": len(pinned)},
               expected={"h2d_copies": len(h2d), "h2d_bytes": sum(h2d), "d2h_copies": len(d2h),
                         "d2h_bytes": sum(d2h)})
    with open(args.log, "w") as f:
        json.dump(log, f, indent=1)
    if args.profile:
        write_profile(args.profile, copies)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
