"""A data-parallel training loop as torchrun runs it: gloo on the CPU, one process per rank.

    torchrun --standalone --nproc_per_node 3 ddp_loop.py [STEPS]

Every rank trains the same small model on its own random batches and all-reduces the gradients
(DistributedDataParallel); memq's job tests record it and check the per-rank figures.
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
for _ in range(int(sys.argv[1]) if len(sys.argv) > 1 else 20):
    x, y = torch.randn(64, 256), torch.randint(0, 10, (64,))
    opt.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
dist.destroy_process_group()
