"""A small PyTorch training loop on the CPU: the demo's real workload.

It allocates tensors through the libc heap (posix_memalign via c10::alloc_cpu),
so `memq record` sees a realistic host-memory pattern without a GPU.
    memq record -o trace/ -- python3 examples/train_cpu.py --steps 50
"""
import argparse
import time

import torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=50, help="training steps (default 50)")
    parser.add_argument("--batch", type=int, default=64, help="batch size (default 64)")
    parser.add_argument("--seconds", type=float, help="train for this long instead of --steps (a steady loop)")
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Sequential(
        torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = torch.nn.CrossEntropyLoss()
    deadline = None if args.seconds is None else time.monotonic() + args.seconds
    steps = 0
    while (steps < args.steps) if deadline is None else (time.monotonic() < deadline):
        steps += 1
        x = torch.randn(args.batch, 512)
        y = torch.randint(0, 10, (args.batch,))
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
    print(f"trained {steps} steps, final loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
