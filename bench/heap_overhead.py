"""Cost of a malloc/free pair under memq's heap wrappers (preload/memq_heap.c), four ways:

  plain        no LD_PRELOAD                                   -> reference
  forwarding   libmemq_preload.so, no threshold (--api hip,cuda: the wrappers only forward)
  counting     libmemq_preload.so with MEMQ_HOST_MIN_SIZE=4096, no session
  recorded     `memq record --api libc` (defaults: small blocks counted, big ones events)

for small blocks (64 bytes: counted per thread) and big ones (8 KiB: one memq:host_alloc and one
memq:host_free each when recorded). Best of --repeat runs each, interleaved; ns per pair.

    python3 bench/heap_overhead.py [--pairs 5000000] [--big-pairs 300000] [--repeat 3]
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from ctf2perfetto.paths import native_library  # noqa: E402
from ctf2perfetto.capture.preload import HOST_MIN_SIZE_ENV  # noqa: E402

PROGRAM = r"""
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
int main(int argc, char **argv)
{
    long n = atol(argv[1]);
    size_t size = (size_t) atol(argv[2]);
    struct timespec a, b;
    void *volatile keep;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (long i = 0; i < n; i++) {
        keep = malloc(size + (size_t) (i & 7));
        free(keep);
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    printf("%.2f\n", ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / n);
    return 0;
}
"""


def run(argv: list[str], env: dict[str, str]) -> float:
    """The program's ns per pair (its only stdout line; memq record reports on stderr)."""
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, check=True)
    return float(proc.stdout.split()[0])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=5_000_000)
    parser.add_argument("--big-pairs", type=int, default=300_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    library = str(native_library("libmemq_preload.so"))
    with tempfile.TemporaryDirectory(prefix="memq-heap-bench-") as tmp:
        exe = Path(tmp) / "pairs"
        (Path(tmp) / "pairs.c").write_text(PROGRAM)
        subprocess.run(["gcc", "-O2", "-o", str(exe), str(Path(tmp) / "pairs.c")], check=True)
        base = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", HOST_MIN_SIZE_ENV)}
        base["PYTHONPATH"] = str(REPO)
        ways = {
            "plain": lambda argv: run(argv, base),
            "forwarding": lambda argv: run(argv, {**base, "LD_PRELOAD": library}),
            "counting": lambda argv: run(argv, {**base, "LD_PRELOAD": library, HOST_MIN_SIZE_ENV: "4096"}),
            "recorded": lambda argv: run([sys.executable, "-m", "ctf2perfetto", "record", "-o",
                                          str(Path(tmp) / "trace"), "--force", "--api", "libc", "--", *argv], base),
        }
        results = {}
        for label, size, pairs in (("64 B", 64, args.pairs), ("8 KiB", 8192, args.big_pairs)):
            best = {}
            for _ in range(args.repeat):
                for way, fn in ways.items():
                    value = fn([str(exe), str(pairs), str(size)])
                    best[way] = min(best.get(way, value), value)
            results[label] = best
    print(f"ns per malloc+free pair, best of {args.repeat} (load average {os.getloadavg()[0]:.1f})")
    print(f"{'block':<8}" + "".join(f"{way:>12}" for way in ways) + f"{'counting-plain':>16}{'recorded-plain':>16}")
    for label, best in results.items():
        print(f"{label:<8}" + "".join(f"{best[w]:>12.1f}" for w in ways)
              + f"{best['counting'] - best['plain']:>16.1f}{best['recorded'] - best['plain']:>16.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
