"""Fine-tune a small GPT in plain PyTorch: the copy and memory pattern of an LLM training job.

A decoder-only transformer (token + position embeddings, pre-norm blocks with causal
self-attention and an MLP, tied output head) trained on a synthetic token corpus:

* a DataLoader with pin_memory=True (on CUDA) whose batches go to the device with
  `.to(device, non_blocking=True)`: new tokens and labels every step;
* the loss mask (which positions count) re-uploaded every micro-batch from one pinned host
  tensor that never changes (`--mask-upload step`, the default), the kind of repeat copy
  memq exists to find; `--mask-upload once` uploads it once, the fix;
* bf16 autocast, AdamW, gradient accumulation (`--accum` micro-batches per step);
* every `--ckpt-every` steps a checkpoint saved to host memory (every parameter copied
  device-to-host; the previous checkpoint is dropped);
* every `--eval-every` steps an eval batch whose loss is read with `.item()`.

    python3 examples/finetune_gpt.py --device cpu              # tiny sizes, a few seconds
    python3 examples/finetune_gpt.py --device cuda --steps 200 # the GPU check's run
    memq record -o trace/ -- python3 -m ctf2perfetto.torchprof -o trace/profile.json \\
        examples/finetune_gpt.py --device cpu

`--log LOG.json` writes what the run did, for checks that compare a memq trace against it
(scripts/gpu-check.sh, tools/gpu_check.py): the copies it asked for per direction with their
bytes, the pointers of the label and mask uploads and of the checkpoint copies (CUDA), the
caching allocator's segment count and the steady-state loop time.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import time

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, Dataset

# Sizes per device when not given: a CPU run finishes in a few seconds, a GPU run is the check's.
PRESETS = {
    "cpu": dict(vocab=512, dim=64, layers=2, heads=4, seq=32, batch=8, steps=12, accum=2, ckpt_every=5,
                eval_every=5),
    "cuda": dict(vocab=8192, dim=256, layers=4, heads=4, seq=128, batch=16, steps=200, accum=2, ckpt_every=50,
                 eval_every=25),
}


class TokenCorpus(Dataset):
    """Deterministic synthetic text: sequences of seq+1 tokens from a fixed Markov-ish rule plus noise, so the
    model has something to learn and every sample (hence every batch's labels) differs."""

    def __init__(self, n: int, seq: int, vocab: int, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        start = torch.randint(0, vocab, (n, 1), generator=g)
        steps = torch.randint(1, 7, (n, seq), generator=g)
        self.tokens = torch.cat([start, start + steps.cumsum(1)], 1) % vocab

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        t = self.tokens[i]
        return t[:-1], t[1:]


class Block(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab: int, dim: int, layers: int, heads: int, seq: int) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(seq, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.tok.weight  # tied, as GPT-2
        for m in self.modules():  # GPT-2's initialisation (the default N(0, 1) embedding makes huge logits)
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


def masked_loss(logits: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    per_token = F.cross_entropy(logits.float().flatten(0, 1), labels.flatten(), reduction="none")
    weights = mask.expand_as(labels).flatten()
    return (per_token * weights).sum() / weights.sum()


def ptr(t: torch.Tensor) -> int:
    return int(t.data_ptr())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", choices=("cpu", "cuda"))
    for name in PRESETS["cpu"]:
        parser.add_argument("--" + name.replace("_", "-"), type=int, help="default: the device's preset")
    parser.add_argument("--warmup", type=int, default=None, help="untimed steps first (default 2 on CPU, 10 on CUDA)")
    parser.add_argument("--mask-upload", choices=("step", "once"), default="step",
                        help="upload the unchanging loss mask every micro-batch (the waste) or once (the fix)")
    parser.add_argument("--workers", type=int, default=0, help="DataLoader workers (default 0)")
    parser.add_argument("--log", help="write what the run did (JSON) here")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    cfg = {k: (getattr(args, k) if getattr(args, k) is not None else v) for k, v in PRESETS[args.device].items()}
    warmup = args.warmup if args.warmup is not None else (2 if args.device == "cpu" else 10)
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    if cuda and not torch.cuda.is_available():
        raise SystemExit("finetune_gpt: --device cuda but torch sees no CUDA device")
    if cfg["dim"] % cfg["heads"]:
        raise SystemExit(f"finetune_gpt: --dim {cfg['dim']} is not a multiple of --heads {cfg['heads']}")
    torch.manual_seed(args.seed)
    if not cuda:
        torch.set_num_threads(1)

    steps, accum = warmup + cfg["steps"], cfg["accum"]
    batch, seq = cfg["batch"], cfg["seq"]
    train = TokenCorpus(steps * accum * batch, seq, cfg["vocab"], seed=args.seed + 1)
    held_out = TokenCorpus(batch, seq, cfg["vocab"], seed=args.seed + 2)
    loader = DataLoader(train, batch_size=batch, shuffle=False, drop_last=True, pin_memory=cuda,
                        num_workers=args.workers)
    model = GPT(cfg["vocab"], cfg["dim"], cfg["layers"], cfg["heads"], seq).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)
    # Which label positions count (all but the first few: the prompt). Built once on the host, never changed.
    mask_host = (torch.arange(seq) >= 4).float().unsqueeze(0)
    if cuda:
        mask_host = mask_host.pin_memory()
    mask_dev = mask_host.to(device, non_blocking=True) if args.mask_upload == "once" else None
    eval_x, eval_y = (t.clone().to(device) for t in (held_out.tokens[:, :-1], held_out.tokens[:, 1:]))
    autocast = torch.autocast(device_type=device.type, dtype=torch.bfloat16)

    # What the run asks for, for the checks (CUDA: pointers of the copies).
    log: dict = {"pid": os.getpid(), "device": args.device, "config": cfg, "warmup": warmup, "steps": steps,
                 "mask_upload": args.mask_upload, "label_bytes": batch * seq * 8, "token_bytes": batch * seq * 8,
                 "mask_bytes": seq * 4, "labels": [], "mask_uploads": [], "checkpoints": [], "evals": [],
                 "losses": []}
    h2d = [0, 0]
    d2h = [0, 0]

    def count(pair: list[int], nbytes: int) -> None:
        pair[0] += 1
        pair[1] += nbytes

    if cuda:
        for p in model.parameters():  # model.to(device): one upload per parameter (the tied one once)
            count(h2d, p.nbytes)
        count(h2d, eval_x.nbytes)  # the eval batch
        count(h2d, eval_y.nbytes)
        if args.mask_upload == "once":
            count(h2d, seq * 4)
    checkpoint: dict[str, torch.Tensor] = {}
    batches = iter(loader)
    start = time.perf_counter()
    for step in range(steps):
        if step == warmup:
            if cuda:
                torch.cuda.synchronize()
            start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        for _ in range(accum):
            x_host, y_host = next(batches)
            x = x_host.to(device, non_blocking=True)
            y = y_host.to(device, non_blocking=True)
            mask = mask_dev if mask_dev is not None else mask_host.to(device, non_blocking=True)
            if cuda:
                count(h2d, x_host.nbytes)
                count(h2d, y_host.nbytes)
                log["labels"].append({"step": step, "src": ptr(y_host), "dst": ptr(y), "bytes": y_host.nbytes})
                if mask_dev is None:
                    count(h2d, mask_host.nbytes)
                    log["mask_uploads"].append({"step": step, "src": ptr(mask_host), "dst": ptr(mask),
                                                "bytes": mask_host.nbytes})
            with autocast:
                loss = masked_loss(model(x), y, mask) / accum
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if (step + 1) % cfg["ckpt_every"] == 0:
            # Saved to host memory: every parameter copied device-to-host (pageable), the old checkpoint dropped.
            checkpoint = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
            if cuda:
                copies = [{"name": k, "bytes": v.nbytes, "dst": ptr(checkpoint[k])}
                          for k, v in model.state_dict().items()]
                for c in copies:
                    count(d2h, c["bytes"])
                log["checkpoints"].append({"step": step, "copies": copies})
        if (step + 1) % cfg["eval_every"] == 0:
            model.eval()
            with torch.no_grad(), autocast:
                value = F.cross_entropy(model(eval_x).float().flatten(0, 1), eval_y.flatten()).item()
            model.train()
            if cuda:
                count(d2h, 4)
            log["evals"].append({"step": step, "loss": value})
    if cuda:
        torch.cuda.synchronize()
    loop_s = time.perf_counter() - start
    final = loss.item() * accum
    if cuda:
        count(d2h, 4)
    log["losses"].append(final)
    timed = max(steps - warmup, 1)
    log.update(loop_s=loop_s, step_ms=1e3 * loop_s / timed, timed_steps=steps - warmup,
               checkpoint_tensors=len(checkpoint), checkpoint_bytes=sum(v.nbytes for v in checkpoint.values()),
               params=sum(p.numel() for p in model.parameters()), torch=torch.__version__,
               expected={"h2d_copies": h2d[0], "h2d_bytes": h2d[1], "d2h_copies": d2h[0], "d2h_bytes": d2h[1]})
    if cuda:
        stats = torch.cuda.memory_stats()
        log.update(cuda=torch.version.cuda, gpu=torch.cuda.get_device_name(0),
                   segments_allocated=stats.get("segment.all.allocated", 0),
                   memory_stats={k: v for k, v in stats.items()
                                 if k.startswith(("segment.all", "allocation.all", "reserved_bytes.all"))})
        if hasattr(torch.cuda, "host_memory_stats"):
            log["host_memory_stats"] = {k: v for k, v in torch.cuda.host_memory_stats().items()
                                        if isinstance(v, (int, float))}
    if args.log:
        with open(args.log, "w") as f:
            json.dump(log, f, indent=1)
    evals = ", ".join(f"{e['loss']:.3f}" for e in log["evals"])
    print(f"finetune_gpt: {steps} steps x {accum} micro-batches on {args.device}, {log['step_ms']:.1f} ms/step, "
          f"loss {final:.3f} (ln vocab {math.log(cfg['vocab']):.2f}), eval {evals}, "
          f"{len(log['checkpoints']) or steps // cfg['ckpt_every']} checkpoints of {log['checkpoint_bytes']} B")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
