"""A data-parallel training loop as torchrun runs it: gloo on the CPU, one process per rank.

    torchrun --standalone --nproc_per_node 3 ddp_loop.py [STEPS [LOADER_WORKERS]]

Every rank trains the same small model on its own random batches and all-reduces the gradients
(DistributedDataParallel); memq's job tests record it and check the per-rank figures. With LOADER_WORKERS > 0 each
rank reads its batches through a DataLoader with that many worker processes (forked: they inherit RANK).
"""
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

torch.set_num_threads(1)
dist.init_process_group("gloo")
torch.manual_seed(dist.get_rank())
model = DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(),
                                                    torch.nn.Linear(512, 10)))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
steps = int(sys.argv[1]) if len(sys.argv) > 1 else 20
workers = int(sys.argv[2]) if len(sys.argv) > 2 else 0
data = torch.utils.data.TensorDataset(torch.randn(64 * steps, 256), torch.randint(0, 10, (64 * steps,)))
batches = iter(torch.utils.data.DataLoader(data, batch_size=64, num_workers=workers)) if workers else None
for _ in range(steps):
    x, y = next(batches) if batches is not None else (torch.randn(64, 256), torch.randint(0, 10, (64,)))
    opt.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
dist.destroy_process_group()
